/* allow.h - egress allowlist patterns (libc only; used by isopod-claim,
 * isopod-broker and their tests).
 *
 * A pattern is a host name ("pkg.example.org") or a wildcard "*.example.org",
 * which matches every name strictly below example.org (a.example.org,
 * a.b.example.org) and not example.org itself: list both to allow both.
 * Names and patterns compare case-insensitively; one trailing dot is
 * ignored.  IP literals are not names: an allowlist holds names only.
 *
 * Ports: a pattern without one allows ports 80 (plain HTTP) and 443
 * (HTTPS), by CONNECT or plain HTTP alike; "NAME:PORT" (PORT 1..65535,
 * decimal, no leading zero) allows exactly that port of the names it
 * matches.  Entries add up: "pkg.test" and "pkg.test:8443" allow 80, 443
 * and 8443.  DNS looks at the name alone. */
#ifndef ISOPOD_ALLOW_H
#define ISOPOD_ALLOW_H

#include <stddef.h>

#define ALLOW_NAME_MAX 253
/* a normalised pattern: "*." + name + ":65535" + NUL */
#define ALLOW_PATTERN_MAX (ALLOW_NAME_MAX + 2 + 6 + 1)

/* Check a host name's syntax (labels of 1..63 [a-z0-9-], not starting or
 * ending with '-', total <= 253, at least one letter somewhere so an IPv4
 * literal is never a name) and write it lowercased, without a trailing dot.
 * 0, or -1 when it is not a valid name (out is then "").  */
int allow_name_norm(char *out, size_t outsz, const char *name);

/* Same for a pattern ("name" or "*.name", either with ":PORT"), written
 * as "name[:port]".  0, or -1 with *why set to a short reason (static
 * string). */
int allow_norm(char *out, size_t outsz, const char *pattern, const char **why);

/* 1 when the normalised name matches the normalised pattern's name part
 * (its port aside), else 0. */
int allow_match(const char *pattern, const char *name);

/* 1 when the normalised pattern allows port (see Ports above), else 0. */
int allow_port(const char *pattern, unsigned port);

#endif
