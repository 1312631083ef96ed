/* oci_fuzz.c - libFuzzer target for lib/oci.c, the codec of what isopod-oci
 * pull reads from a registry it does not trust: manifests, stage and base
 * configs, and the references a user types.  The input must never crash
 * the parsers; a manifest that parses must build back into bytes that
 * parse into the same descriptors (the round trip push relies on), and a
 * reference that parses names a host, a repository and a tag or digest.
 * See fuzz/run. */
#include "oci.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void round_trip(const struct oci_manifest *m)
{
	struct oci_manifest m2;
	char why[256], *b;
	size_t n;

	if (!(b = oci_manifest_build(m, &n)))
		abort();
	if (oci_manifest_parse(b, n, &m2, why, sizeof why) != 0 || m2.kind != m->kind ||
	    memcmp(&m2.config, &m->config, sizeof m->config) ||
	    memcmp(&m2.layer, &m->layer, sizeof m->layer) || m2.has_parent != m->has_parent ||
	    (m->has_parent && memcmp(&m2.parent, &m->parent, sizeof m->parent)))
		abort();
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct oci_manifest m;
	struct oci_ref r;
	char why[256], *s;
	json_t *j;

	if (oci_manifest_parse((const char *)data, size, &m, why, sizeof why) == 0)
		round_trip(&m);
	if ((j = json_parse((const char *)data, size, 0, why, sizeof why))) {
		oci_stage_config_check(j, why, sizeof why);
		oci_base_config_check(j, "0000000000000000000000000000000000000000000000000000000000000000",
				      why, sizeof why);
		json_decref(j);
	}
	if (size < 1024 && (s = malloc(size + 1))) {
		memcpy(s, data, size);
		s[size] = 0;
		if (oci_ref_parse(s, &r, why, sizeof why) == 0 &&
		    (!r.host[0] || !r.repo[0] || (!r.tag[0] && !r.digest[0])))
			abort();
		free(s);
	}
	return 0;
}
