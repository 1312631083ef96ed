/* jschema_fuzz.c - libFuzzer target for isopod-mcp's check of a tool
 * call's arguments (lib/jschema.c) against the tools' own inputSchemas
 * (lib/mcptools.c): the first byte picks the tool, the rest is the
 * arguments' JSON, as a client sends them.  Checks: the answer is 0 or -1;
 * a pass leaves no error; a refusal is an object whose field and message
 * are printable ASCII and encode.  Then the same JSON as a tool's result
 * through mcp_unmap_hosts (whose texts, the tools' errors and warnings,
 * may quote the guest's bytes): it must not read or write out of bounds,
 * and the result must still encode.  See fuzz/run. */
#include "jschema.h"
#include "mcptools.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void printable(const char *s)
{
	if (!s)
		abort();
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t e;
	json_t *sch, *v, *err = NULL;
	char *out;
	int r;

	if (!size)
		return 0;
	sch = json_loads(mcp_tools[data[0] % mcp_ntools].in, JSON_REJECT_DUPLICATES, &e);
	if (!sch) /* a constant of ours */
		abort();
	v = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &e);
	if (v) {
		r = jschema_validate(sch, v, "", &err);
		if (r == 0 && err)
			abort();
		if (r != 0) {
			if (r != -1 || !json_is_object(err))
				abort();
			printable(json_string_value(json_object_get(err, "field")));
			printable(json_string_value(json_object_get(err, "message")));
			if (!(out = json_dumps(err, JSON_COMPACT)))
				abort();
			free(out);
		}
		json_decref(err);
		if (json_is_object(v)) {
			struct call c = { .hostmap = json_pack("{s:s, s:s, s:s}", "/proc/1/fd/7", "tree",
							       "/proc/1/fd/8/.", "into",
							       "/proc/1/fd/9/back", "sub/back") };

			if (!c.hostmap)
				abort();
			mcp_unmap_hosts(&c, v);
			if (!(out = json_dumps(v, JSON_COMPACT)))
				abort();
			free(out);
			json_decref(c.hostmap);
		}
		json_decref(v);
	}
	json_decref(sch);
	return 0;
}
