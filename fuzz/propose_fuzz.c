/* propose_fuzz.c - libFuzzer target for lib/propose.c, which reads the
 * broker's ledger (written from guest-chosen names and requests) and
 * proposes an allowlist.  Beyond no crash: every entry's pattern is one
 * isopod-claim would take, and it serves every flow it says it covers (its
 * name, and for connect/http its port).  See fuzz/run. */
#include "allow.h"
#include "propose.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *p = propose_ledger((const char *)data, size), *e, *f;
	char norm[ALLOW_PATTERN_MAX];
	const char *why;
	size_t i, k;

	if (!p)
		abort();
	json_array_foreach(json_object_get(p, "allow"), i, e) {
		const char *pat = json_string_value(json_object_get(e, "pattern"));

		if (!pat || allow_norm(norm, sizeof norm, pat, &why) < 0 || strcmp(norm, pat))
			abort();
		json_array_foreach(json_object_get(e, "flows"), k, f) {
			const char *name = json_string_value(json_object_get(f, "name"));
			const char *kind = json_string_value(json_object_get(f, "kind"));
			json_int_t port = json_integer_value(json_object_get(f, "port"));

			if (!name || !kind || !allow_match(pat, name) ||
			    (strcmp(kind, "dns") && !allow_port(pat, (unsigned)port)))
				abort();
		}
	}
	json_decref(p);
	return 0;
}
