/* jschema_test.c - unit tests of lib/jschema.c, the validator isopod-mcp
 * checks a tool call's arguments with: each keyword it reads (type,
 * required, properties/additionalProperties, propertyNames.pattern,
 * maxProperties, items, minItems/maxItems, minLength/maxLength, pattern,
 * enum, minimum/maximum), the field an error names and the message's text
 * (the client's -32602), and that client bytes quoted come back as
 * printable ASCII.  Built by t/run-unit with ASan + UBSan. */
#include "../../lib/jschema.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

/* check SCHEMA against VALUE (both JSON texts): 0 or -1; on -1 the
 * error's field and message in f and m. */
static int check(const char *schema, const char *value, char *f, char *m)
{
	json_error_t e;
	json_t *s = json_loads(schema, 0, &e), *v = json_loads(value, JSON_DECODE_ANY, &e);
	json_t *err = NULL;
	int r;

	if (!s || !v) {
		fprintf(stderr, "bad test JSON: %s / %s\n", schema, value);
		exit(2);
	}
	f[0] = m[0] = 0;
	r = jschema_validate(s, v, "", &err);
	if (r < 0) {
		snprintf(f, 300, "%s", json_string_value(json_object_get(err, "field")));
		snprintf(m, 700, "%s", json_string_value(json_object_get(err, "message")));
	} else if (err) {
		r = 99; /* a pass that left an error behind */
	}
	json_decref(err);
	json_decref(s);
	json_decref(v);
	return r;
}

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			return 0;
	return 1;
}

#define OBJ "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"a\"],\"properties\":{" \
	"\"a\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4}," \
	"\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":10}," \
	"\"u\":{\"type\":\"integer\"}," \
	"\"b\":{\"type\":\"boolean\"}," \
	"\"p\":{\"type\":\"string\",\"pattern\":\"^/[^:]*$\"}," \
	"\"e\":{\"type\":\"string\",\"enum\":[\"x\",\"y\"],\"description\":\"x or y\"}," \
	"\"l\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":2,\"items\":{\"type\":\"string\",\"maxLength\":2}}," \
	"\"o\":{\"type\":\"object\",\"required\":[\"k\"],\"properties\":{\"k\":{\"type\":\"boolean\"}}}," \
	"\"env\":{\"type\":\"object\",\"maxProperties\":2,\"propertyNames\":{\"pattern\":\"^[A-Z]+$\"}," \
	"\"additionalProperties\":{\"type\":\"string\"}}," \
	"\"any\":{}}}"

int main(void)
{
	char f[300], m[700], big[400];

	/* what passes */
	ok(check(OBJ, "{\"a\":\"x\"}", f, m) == 0, "the required member alone passes");
	ok(check(OBJ, "{\"a\":\"abcd\",\"n\":10,\"u\":-5,\"b\":false,\"p\":\"/x\",\"e\":\"y\",\"l\":[\"ab\",\"\"],"
		      "\"o\":{\"k\":true,\"more\":1},\"env\":{\"A\":\"1\",\"B\":\"\"},\"any\":[1,{}]}", f, m) == 0,
	   "every keyword at its bound passes; an object without additionalProperties takes more; {} takes anything");
	ok(check("{\"properties\":{}}", "[1]", f, m) == 0, "a schema without a type accepts anything");

	/* type */
	ok(check(OBJ, "[]", f, m) < 0 && !strcmp(f, "") && !strcmp(m, ": want an object"),
	   "type object: an array is refused (%s)", m);
	ok(check(OBJ, "{\"a\":1}", f, m) < 0 && !strcmp(f, "a") && !strcmp(m, "a: want a string"),
	   "type string: a number is refused, naming the field (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"b\":0}", f, m) < 0 && !strcmp(m, "b: want true or false"),
	   "type boolean: 0 is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"l\":\"ab\"}", f, m) < 0 && !strcmp(m, "l: want an array"),
	   "type array: a string is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"n\":\"2\"}", f, m) < 0 && !strcmp(m, "n: want an integer from 1 to 10"),
	   "type integer: a string is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"n\":2.0}", f, m) < 0 && !strcmp(f, "n"),
	   "type integer: a real is refused, even 2.0 (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"u\":true}", f, m) < 0 &&
	   !strcmp(m, "u: want an integer from -9223372036854775808 to 9223372036854775807"),
	   "type integer without bounds: the message says the int64 range (%s)", m);

	/* required */
	ok(check(OBJ, "{}", f, m) < 0 && !strcmp(f, "") && !strcmp(m, "a: missing"),
	   "required: a missing member is named (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"o\":{}}", f, m) < 0 && !strcmp(m, "o.k: missing"),
	   "required: nested, the path is dotted (%s)", m);

	/* unknown members */
	ok(check(OBJ, "{\"a\":\"x\",\"bogus\":1}", f, m) < 0 && !strcmp(f, "bogus") &&
	   !strcmp(m, "bogus: unknown field"),
	   "additionalProperties false: an unknown member is refused, naming it (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"env\":{\"A\":1}}", f, m) < 0 && !strcmp(f, "env.A") &&
	   !strcmp(m, "env.A: want a string"),
	   "additionalProperties a schema: applied to the members not named (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"env\":{\"a\":\"1\"}}", f, m) < 0 && !strcmp(f, "env.a") &&
	   !strcmp(m, "env: bad name a; want ^[A-Z]+$"),
	   "propertyNames.pattern: a bad name is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"env\":{\"A\":\"\",\"B\":\"\",\"C\":\"\"}}", f, m) < 0 &&
	   !strcmp(m, "env: at most 2 members"), "maxProperties (%s)", m);

	/* ranges */
	ok(check(OBJ, "{\"a\":\"x\",\"n\":0}", f, m) < 0 && !strcmp(m, "n: want an integer from 1 to 10"),
	   "minimum: one below is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"n\":11}", f, m) < 0 && !strcmp(m, "n: want an integer from 1 to 10"),
	   "maximum: one above is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"n\":1}", f, m) == 0, "minimum: the bound itself passes");

	/* strings */
	ok(check(OBJ, "{\"a\":\"\"}", f, m) < 0 && !strcmp(m, "a: at least 1 characters"),
	   "minLength (%s)", m);
	ok(check(OBJ, "{\"a\":\"abcde\"}", f, m) < 0 && !strcmp(m, "a: at most 4 bytes"),
	   "maxLength: one over is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"\\u00e9\\u00e9\\u00e9\"}", f, m) < 0 && !strcmp(m, "a: at most 4 bytes"),
	   "maxLength counts bytes: three 2-byte characters are 6 (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"p\":\"/a:b\"}", f, m) < 0 && !strcmp(f, "p") &&
	   !strcmp(m, "p: /a:b does not match ^/[^:]*$"), "pattern: a mismatch is refused (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"p\":\"rel\"}", f, m) < 0, "pattern: anchored at the start (%s)", m);
	ok(check("{\"type\":\"string\",\"pattern\":\"b\"}", "\"abc\"", f, m) == 0,
	   "pattern: unanchored, it matches anywhere");
	ok(check("{\"type\":\"string\",\"pattern\":\"(\"}", "\"abc\"", f, m) < 0 &&
	   !strcmp(m, ": bad schema pattern"), "pattern: one that does not compile refuses (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"e\":\"z\"}", f, m) < 0 && !strcmp(m, "e: z; want one of x or y"),
	   "enum: a value not listed is refused, quoting the description (%s)", m);

	/* items */
	ok(check(OBJ, "{\"a\":\"x\",\"l\":[]}", f, m) < 0 && !strcmp(m, "l: at least 1 items"),
	   "minItems (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"l\":[\"a\",\"b\",\"c\"]}", f, m) < 0 && !strcmp(m, "l: at most 2 items"),
	   "maxItems (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"l\":[\"a\",\"abc\"]}", f, m) < 0 && !strcmp(f, "l[1]") &&
	   !strcmp(m, "l[1]: at most 2 bytes"), "items: each item is checked, named by index (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"l\":[\"a\",3]}", f, m) < 0 && !strcmp(m, "l[1]: want a string"),
	   "items: a wrong type (%s)", m);

	/* what comes back is printable ASCII, whatever the client sent */
	ok(check(OBJ, "{\"a\":\"x\",\"e\":\"\\u00e9\\n\\u0001\"}", f, m) < 0 && printable(m) &&
	   strstr(m, "\\xc3\\xa9"), "a quoted value: escaped, printable (%s)", m);
	ok(check(OBJ, "{\"a\":\"x\",\"b\\u00e9\\n\":1}", f, m) < 0 && printable(f) && printable(m) &&
	   !strcmp(f, "b???"), "an unknown member's name: made printable in field and message (%s)", f);
	memset(big, 'k', sizeof big - 1);
	big[sizeof big - 1] = 0;
	{
		char v[500];

		snprintf(v, sizeof v, "{\"a\":\"x\",\"%s\":1}", big);
		ok(check(OBJ, v, f, m) < 0 && strlen(f) == 64 && !strcmp(m + 64, ": unknown field"),
		   "a long member name is cut to 64 bytes in the path (%zu)", strlen(f));
	}
	{
		json_t *e = NULL;
		char t[8] = "a\tb\x80";

		ok(jschema_bad(&e, "f\x01", "m\xff") == -1, "jschema_bad returns -1");
		ok(e && !strcmp(json_string_value(json_object_get(e, "field")), "f?") &&
		   !strcmp(json_string_value(json_object_get(e, "message")), "m?") &&
		   !strcmp(jschema_ascii(t), "a?b?"), "jschema_bad and jschema_ascii: bytes outside printable ASCII are '?'");
		json_decref(e);
	}
	return tap_done();
}
