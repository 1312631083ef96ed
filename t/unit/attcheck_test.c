/* attcheck_test.c - unit tests of lib/attcheck.c: the host config's
 * require_attestation, and the verdict read back from a verifier (stand-in
 * scripts: valid, failures, no JSON, killed past its time).  Built by
 * t/run-unit with ASan + UBSan. */
#include "../../lib/attcheck.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/proc.c"
#include "../../lib/config.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tap.h"

static char dir[] = "/tmp/attcheck-test.XXXXXX";

static const char *file(const char *name, const char *text, int mode)
{
	static char p[4][512];
	static int k;
	char *q = p[k++ % 4];
	FILE *f;

	snprintf(q, 512, "%s/%s", dir, name);
	f = fopen(q, "w");
	fputs(text, f);
	fclose(f);
	chmod(q, (mode_t)mode);
	return q;
}

static int req(const char *text, int *r, char *msg, size_t msz)
{
	return attcheck_required(file("config", text, 0600), r, msg, msz);
}

int main(void)
{
	char msg[512], why[2048];
	int r = -1;
	json_t *v = NULL;
	struct attcheck a = { .att = "/att.json" };

	if (!mkdtemp(dir))
		return 111;
	ok(attcheck_required("/nonexistent/config", &r, msg, sizeof msg) == 0 && r == 0,
	   "a missing config: not required");
	ok(req("net = none\n", &r, msg, sizeof msg) == 0 && r == 0, "absent: not required");
	ok(req("require_attestation = yes\n", &r, msg, sizeof msg) == 0 && r == 1, "yes");
	ok(req("  require_attestation=TRUE  # the host's policy\n", &r, msg, sizeof msg) == 0 && r == 1,
	   "TRUE, blanks and a comment");
	ok(req("require_attestation = 1\nrequire_attestation = no\n", &r, msg, sizeof msg) == 0 && r == 0,
	   "the last line wins");
	ok(req("# require_attestation = yes\n", &r, msg, sizeof msg) == 0 && r == 0, "commented out");
	ok(req("require_attestation_x = yes\n", &r, msg, sizeof msg) == 0 && r == 0,
	   "another key with that prefix");
	ok(req("net = none\nrequire_attestation = maybe\n", &r, msg, sizeof msg) == -1 &&
		   strstr(msg, "config:2: require_attestation: yes or no, not maybe"),
	   "a bad value: -1 naming file:line (%s)", msg);
	ok(req("require_attestation =\n", &r, msg, sizeof msg) == -1, "an empty value: -1");

	a.tool = file("valid", "#!/bin/sh\necho '{\"valid\":true,\"failures\":[]}'\n", 0700);
	ok(attcheck_verify(&a, &v, why, sizeof why) == 1 && !why[0] && json_is_true(json_object_get(v, "valid")),
	   "valid: 1, the verdict kept");
	json_decref(v);
	a.tool = file("fails", "#!/bin/sh\necho '{\"valid\":false,\"failures\":[{\"subject\":\"ruleset/nftables\","
		      "\"why\":\"digest differs\"},{\"field\":\"expires\",\"why\":\"past\"}]}'\nexit 1\n", 0700);
	ok(attcheck_verify(&a, NULL, why, sizeof why) == 0 &&
		   !strcmp(why, "attestation /att.json does not verify: ruleset/nftables: digest differs; "
				"expires: past"),
	   "failures named in one line (%s)", why);
	a.tool = file("lies", "#!/bin/sh\necho '{\"valid\":true}'\necho 'isopod-attest: fatal: x' >&2\nexit 1\n", 0700);
	ok(attcheck_verify(&a, NULL, why, sizeof why) == 0 && strstr(why, "isopod-attest: fatal: x (isopod-attest exit 1)"),
	   "valid:true with a failing exit is not valid (%s)", why);
	a.tool = file("slow", "#!/bin/sh\nexec sleep 30\n", 0700);
	a.timeout_ms = 300;
	ok(attcheck_verify(&a, NULL, why, sizeof why) == 0 && strstr(why, "no verdict"),
	   "past its time: killed, not valid (%s)", why);
	a.tool = "/nonexistent/isopod-attest";
	ok(attcheck_verify(&a, NULL, why, sizeof why) == 0 && strstr(why, "(isopod-attest exit 127)"),
	   "no verifier: not valid (%s)", why);
	for (const char *const *n = (const char *const[]){ "config", "valid", "fails", "lies", "slow", NULL };
	     *n; n++) {
		snprintf(msg, sizeof msg, "%s/%s", dir, *n);
		unlink(msg);
	}
	rmdir(dir);
	return tap_done();
}
