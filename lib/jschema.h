/* jschema.h - the small JSON Schema validator isopod-mcp(1) checks a tool
 * call's arguments with, against the tool's own inputSchema (lib/mcptools.c),
 * so the schema a client sees and the rules enforced are one text.
 *
 * The keywords read, nothing else: type (object, array, string, integer,
 * boolean; one name, not a list: a schema of another type accepts
 * anything); object: properties, required, additionalProperties (false, or
 * a schema for the members not named), propertyNames.pattern,
 * maxProperties; array: items, minItems, maxItems; string: minLength,
 * maxLength (bytes), pattern (POSIX extended, unanchored), enum (the
 * refusal quotes the schema's description); integer: minimum, maximum.
 * The first violation found is the answer.  Pure: no I/O, no die. */
#ifndef ISOPOD_JSCHEMA_H
#define ISOPOD_JSCHEMA_H

#include <jansson.h>

/* t with every byte outside printable ASCII made '?'; returns t. */
char *jschema_ascii(char *t);

/* *err = {"field": FIELD, "message": the formatted text}, both cut to
 * fit and made printable ASCII (an answer must encode); returns -1. */
__attribute__((format(printf, 3, 4))) int jschema_bad(json_t **err, const char *field,
							const char *fmt, ...);

/* v checked against schema sch; path names v in messages ("" the top).
 * 0, or -1 with *err set as jschema_bad sets it. */
int jschema_validate(const json_t *sch, const json_t *v, const char *path, json_t **err);

#endif
