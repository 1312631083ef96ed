/* jschema.c - the small JSON Schema validator of isopod-mcp (jschema.h).
 * The values are the MCP client's: bounded, no die, every refusal is an
 * object naming the field. */
#include "jschema.h"
#include "util.h"

#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* printable ASCII only: a field name cut at a byte count (or quoted
 * client text) must not make the answer unencodable (invalid UTF-8). */
char *jschema_ascii(char *t)
{
	for (char *c = t; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
	return t;
}

int jschema_bad(json_t **err, const char *field, const char *fmt, ...)
{
	char m[600], f[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	snprintf(f, sizeof f, "%s", field);
	*err = json_pack("{s:s, s:s}", "field", jschema_ascii(f), "message", jschema_ascii(m));
	return -1;
}

int jschema_validate(const json_t *sch, const json_t *v, const char *path, json_t **err)
{
	const char *type = json_string_value(json_object_get(sch, "type"));
	json_t *t, *e;
	const char *k;
	char sub[300];
	size_t i;

	if (!type)
		return 0;
	if (!strcmp(type, "object")) {
		json_t *props = json_object_get(sch, "properties");
		json_t *addl = json_object_get(sch, "additionalProperties");
		json_t *pn = json_object_get(json_object_get(sch, "propertyNames"), "pattern");

		if (!json_is_object(v))
			return jschema_bad(err, path, "%s: want an object", path);
		if ((t = json_object_get(sch, "maxProperties")) &&
		    json_object_size(v) > (size_t)json_integer_value(t))
			return jschema_bad(err, path, "%s: at most %lld members", path,
				   (long long)json_integer_value(t));
		json_array_foreach(json_object_get(sch, "required"), i, e)
			if (!json_object_get(v, json_string_value(e)))
				return jschema_bad(err, path, "%s%s%s: missing", path, *path ? "." : "",
					   json_string_value(e));
		json_object_foreach((json_t *)v, k, e) {
			json_t *ps = json_object_get(props, k);

			snprintf(sub, sizeof sub, "%s%s%.64s", path, *path ? "." : "", k);
			if (pn) {
				regex_t re;
				int no;

				if (regcomp(&re, json_string_value(pn), REG_EXTENDED | REG_NOSUB))
					return jschema_bad(err, path, "%s: bad schema pattern", path);
				no = regexec(&re, k, 0, NULL, 0);
				regfree(&re);
				if (no)
					return jschema_bad(err, sub, "%s: bad name %s; want %s", path, EXC(k),
						   json_string_value(pn));
			}
			if (!ps && json_is_false(addl))
				return jschema_bad(err, sub, "%s: unknown field", sub);
			if (!ps)
				ps = addl;
			if (json_is_object(ps) && jschema_validate(ps, e, sub, err) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "array")) {
		if (!json_is_array(v))
			return jschema_bad(err, path, "%s: want an array", path);
		if ((t = json_object_get(sch, "minItems")) &&
		    json_array_size(v) < (size_t)json_integer_value(t))
			return jschema_bad(err, path, "%s: at least %lld items", path,
				   (long long)json_integer_value(t));
		if ((t = json_object_get(sch, "maxItems")) &&
		    json_array_size(v) > (size_t)json_integer_value(t))
			return jschema_bad(err, path, "%s: at most %lld items", path,
				   (long long)json_integer_value(t));
		json_array_foreach(v, i, e) {
			snprintf(sub, sizeof sub, "%s[%zu]", path, i);
			if (jschema_validate(json_object_get(sch, "items"), e, sub, err) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "string")) {
		json_t *en = json_object_get(sch, "enum");
		json_t *pat = json_object_get(sch, "pattern");

		if (!json_is_string(v))
			return jschema_bad(err, path, "%s: want a string", path);
		if ((t = json_object_get(sch, "minLength")) &&
		    json_string_length(v) < (size_t)json_integer_value(t))
			return jschema_bad(err, path, "%s: at least %lld characters", path,
				   (long long)json_integer_value(t));
		if ((t = json_object_get(sch, "maxLength")) &&
		    json_string_length(v) > (size_t)json_integer_value(t))
			return jschema_bad(err, path, "%s: at most %lld bytes", path,
				   (long long)json_integer_value(t));
		if (pat) {
			regex_t re;
			int no;

			if (regcomp(&re, json_string_value(pat), REG_EXTENDED | REG_NOSUB))
				return jschema_bad(err, path, "%s: bad schema pattern", path);
			no = regexec(&re, json_string_value(v), 0, NULL, 0);
			regfree(&re);
			if (no)
				return jschema_bad(err, path, "%s: %s does not match %s", path,
					   EXC(json_string_value(v)), json_string_value(pat));
		}
		if (en) {
			json_array_foreach(en, i, e)
				if (json_equal(e, v))
					return 0;
			return jschema_bad(err, path, "%s: %s; want one of %s", path,
				   EXC(json_string_value(v)), json_string_value(json_object_get(sch, "description")));
		}
		return 0;
	}
	if (!strcmp(type, "integer")) {
		json_t *lo = json_object_get(sch, "minimum"), *hi = json_object_get(sch, "maximum");

		if (!json_is_integer(v) ||
		    (lo && json_integer_value(v) < json_integer_value(lo)) ||
		    (hi && json_integer_value(v) > json_integer_value(hi)))
			return jschema_bad(err, path, "%s: want an integer from %lld to %lld", path,
				   lo ? (long long)json_integer_value(lo) : (long long)INT64_MIN,
				   hi ? (long long)json_integer_value(hi) : (long long)INT64_MAX);
		return 0;
	}
	if (!strcmp(type, "boolean")) {
		if (!json_is_boolean(v))
			return jschema_bad(err, path, "%s: want true or false", path);
		return 0;
	}
	return 0;
}
