/* oci_test.c - lib/oci.c: references (tag, digest, default tag, refusals),
 * a manifest's round trip (the bytes push writes parse into the same
 * descriptors) and the refusals pull relies on: a foreign media type, two
 * layers, a stage without its parent, a base with one, a bad digest; stage
 * configs whose id, parent, depth or base do not hold. */
#include "../../lib/oci.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <string.h>

#include "tap.h"

#define H64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static int parses(const char *s)
{
	struct oci_manifest m;
	char why[256];

	return oci_manifest_parse(s, strlen(s), &m, why, sizeof why) == 0;
}

static int cfg_ok(const char *s)
{
	char why[256];
	json_t *j = json_loads(s, 0, NULL);
	int r = oci_stage_config_check(j, why, sizeof why) == 0;

	json_decref(j);
	return r;
}

int main(void)
{
	struct oci_ref r;
	struct oci_manifest m = {.kind = OCI_STAGE, .has_parent = 1}, m2;
	char why[256], *b, buf[4096];
	size_t n;

	ok(oci_ref_parse("reg.test:5000/team/py:3.11", &r, why, sizeof why) == 0 &&
	   !strcmp(r.host, "reg.test:5000") && !strcmp(r.repo, "team/py") && !strcmp(r.tag, "3.11"),
	   "REGISTRY/REPO:TAG");
	ok(oci_ref_parse("10.0.0.1:5000/a", &r, why, sizeof why) == 0 && !strcmp(r.tag, "latest"),
	   "no tag: latest");
	ok(oci_ref_parse("r.test/a/b@sha256:" H64, &r, why, sizeof why) == 0 && !r.tag[0] &&
	   !strcmp(r.digest, "sha256:" H64), "@digest");
	ok(oci_ref_parse("r.test/A", &r, why, sizeof why) < 0, "upper-case repository refused");
	ok(oci_ref_parse("r.test/a@sha256:abc", &r, why, sizeof why) < 0, "short digest refused");
	ok(oci_ref_parse("noslash", &r, why, sizeof why) < 0, "no registry refused");
	ok(oci_ref_parse("r.test/a/../b", &r, why, sizeof why) < 0, "dot components refused");
	ok(oci_ref_parse("r.test/a:-x", &r, why, sizeof why) < 0, "bad tag refused");

	snprintf(m.config.digest, sizeof m.config.digest, "sha256:%s", H64);
	m.config.size = 300;
	snprintf(m.layer.digest, sizeof m.layer.digest, "sha256:%s", H64);
	m.layer.size = 1 << 20;
	snprintf(m.parent.digest, sizeof m.parent.digest, "sha256:%s", H64);
	m.parent.size = 500;
	snprintf(m.id, sizeof m.id, "st-0123456789ab");
	b = oci_manifest_build(&m, &n);
	ok(b && oci_manifest_parse(b, n, &m2, why, sizeof why) == 0 && m2.kind == OCI_STAGE &&
	   m2.has_parent && m2.layer.size == 1 << 20 && !strcmp(m2.parent.digest, m.parent.digest),
	   "a stage's manifest round-trips");
	ok(b && strstr(b, "\"subject\"") && !strchr(b, ' '), "subject, compact");
	snprintf(buf, sizeof buf, "%s", b ? b : "");
	{
		char *p = strstr(buf, "stage.layer.v1.qcow2");

		if (p)
			memcpy(p, "stage.layer.v1.qcowX", 20);
		ok(p && !parses(buf), "a foreign layer media type is refused");
	}
	snprintf(buf, sizeof buf, "%s", b ? b : "");
	{
		char *p = strstr(buf, "\"subject\"");

		if (p)
			memcpy(p, "\"subjecX\"", 9);
		ok(p && !parses(buf), "a stage without its parent is refused");
	}
	free(b);
	m.kind = OCI_BASE;
	b = oci_manifest_build(&m, &n);
	ok(b && !parses(b), "a base that names a parent is refused");
	free(b);
	m.has_parent = 0;
	b = oci_manifest_build(&m, &n);
	ok(b && parses(b), "a base without one parses");
	free(b);
	m.kind = OCI_STAGE;
	m.has_parent = 1;
	m.layer.digest[10] = 'X';
	b = oci_manifest_build(&m, &n);
	ok(b && !parses(b), "a bad digest is refused");
	free(b);
	ok(!parses("{\"schemaVersion\":2}"), "not our artifact");

	ok(cfg_ok("{\"id\":\"st-0123456789ab\",\"parent\":null,\"depth\":1,\"label\":\"a\","
		  "\"base\":{\"flavor\":\"base\",\"sha256\":\"" H64 "\"}}"), "a root stage's config");
	ok(!cfg_ok("{\"id\":\"st-0123456789ab\",\"parent\":null,\"depth\":2,"
		   "\"base\":{\"flavor\":\"base\",\"sha256\":\"" H64 "\"}}"), "depth 2 without a parent");
	ok(!cfg_ok("{\"id\":\"st-0123456789ab\",\"parent\":\"../x\",\"depth\":2,"
		   "\"base\":{\"flavor\":\"base\",\"sha256\":\"" H64 "\"}}"), "a parent that is no id");
	ok(!cfg_ok("{\"id\":\"../../etc\",\"parent\":null,\"depth\":1,"
		   "\"base\":{\"flavor\":\"base\",\"sha256\":\"" H64 "\"}}"), "an id that is a path");
	ok(!cfg_ok("{\"id\":\"st-0123456789ab\",\"parent\":null,\"depth\":1,"
		   "\"base\":{\"flavor\":\"Base/x\",\"sha256\":\"" H64 "\"}}"), "a flavor that is a path");
	return tap_done();
}
