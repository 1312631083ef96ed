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

/* apply V (a verdict's JSON) said VALID to s: *valid after, in *out */
static int apply(struct attstale *s, const char *v, int valid, const char *now, int *out, char *why, size_t whysz)
{
	json_t *j = json_loads(v, 0, NULL);
	int r;

	why[0] = 0;
	r = attstale_apply(s, j, &valid, "/att.json", now, why, whysz);
	json_decref(j);
	*out = valid;
	return r;
}

/* The record's file: never followed through a symlink, never a FIFO
 * (it would hang the runner's start), never taken for nothing seen. */
static void stale_files(char *why, size_t whysz)
{
	struct attstale s;
	char p[512], q[512];

	snprintf(p, sizeof p, "%s/stale.lnk", dir);
	snprintf(q, sizeof q, "%s/stale.fifo", dir);
	ok(symlink("/nonexistent/stale.json", p) == 0 && attstale_load(p, &s, why, whysz) == -1 &&
		   strstr(why, "stale.lnk: a symbolic link"), "a dangling symlink: -1, not nothing seen (%s)", why);
	unlink(p);
	ok(symlink(file("stale", "{\"sequence\": 1, \"seen\": \"2026-01-01T00:00:00Z\"}", 0600), p) == 0 &&
		   attstale_load(p, &s, why, whysz) == -1 && strstr(why, "a symbolic link"),
	   "a symlink to a good record: -1 (%s)", why);
	unlink(p);
	ok_bounded(10, mkfifo(q, 0600) == 0 && attstale_load(q, &s, why, whysz) == -1 &&
			       strstr(why, "stale.fifo: not a regular file"),
		   "a FIFO without a writer: -1 at once (\"stale.fifo: not a regular file\"), no hang");
	unlink(q);
}

/* Whose clock: a runner's clock that cannot say when fails closed; the
 * failing attestation's own signed finish (the doctor's clock) binds too. */
static void stale_clocks(const char *p, char *why, size_t whysz)
{
	const char *fin = "{\"valid\":false,\"sequence\":6,\"started\":\"2026-01-01T00:00:00Z\","
			  "\"finished\":\"2026-01-01T00:05:00Z\",\"failures\":[{\"subject\":\"qemu\"}]}";
	const char *bad[] = { "", "garbage", "2026-01-01 00:00:00", "2026-02-31T00:00:00Z", NULL };
	struct attstale s, t;
	int v;

	for (const char **n = bad; *n; n++) {
		s = (struct attstale){ 0 };
		ok(apply(&s, fin, 0, *n, &v, why, whysz) == 1 && s.seq == 6 && !strcmp(s.seen, ATTSTALE_NEVER),
		   "a subject failure with now '%s' (not a time): marked, seen %s", *n, s.seen);
		apply(&s, "{\"valid\":true,\"sequence\":7,\"started\":\"2099-01-01T00:00:00Z\",\"failures\":[]}",
		      1, "2026-01-01T00:10:00Z", &v, why, whysz);
		ok(v == 0 && strstr(why, "only removing stale.json resumes"), "...then nothing resumes (%s)", why);
	}
	/* the runner's clock behind (it says 00:01, the failing doctor run
	 * finished 00:05): a run started 00:02 is not after the change */
	s = (struct attstale){ 0 };
	ok(apply(&s, fin, 0, "2026-01-01T00:01:00Z", &v, why, whysz) == 1 &&
		   !strcmp(s.after, "2026-01-01T00:05:00Z"), "the failing attestation's finished: recorded as after");
	ok(attstale_save(p, &s) == 0 && attstale_load(p, &t, why, whysz) == 0 && !strcmp(t.after, s.after) &&
		   !strcmp(t.seen, s.seen) && t.seq == 6, "after saved and read back");
	apply(&s, "{\"valid\":true,\"sequence\":7,\"started\":\"2026-01-01T00:02:00Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:10:00Z", &v, why, whysz);
	ok(v == 0 && strstr(why, "the failed attestation's doctor run finished 2026-01-01T00:05:00Z"),
	   "a run started after seen but before the failing run finished: not valid (%s)", why);
	apply(&s, "{\"valid\":true,\"sequence\":7,\"started\":\"2026-01-01T00:05:00Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:10:00Z", &v, why, whysz);
	ok(v == 0, "started in the second it finished: not valid");
	ok(apply(&s, fin, 0, "2026-01-01T00:00:30Z", &v, why, whysz) == 0 && !strcmp(s.seen, "2026-01-01T00:01:00Z"),
	   "the runner's clock going back: seen kept (the latest), nothing to save");
	apply(&s, "{\"valid\":true,\"sequence\":7,\"started\":\"2026-01-01T00:05:01Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:10:00Z", &v, why, whysz);
	ok(v == 1 && !why[0], "a run started after both: valid");
}

/* The runner's record of the host changing under an attestation. */
static void stale_tests(char *why, size_t whysz)
{
	static const char *const bad[] = { "", "{\"sequence\": 1", "[]", "{\"sequence\": 1}",
		"{\"sequence\": \"1\", \"seen\": \"2026-01-01T00:00:00Z\"}",
		"{\"sequence\": -1, \"seen\": \"2026-01-01T00:00:00Z\"}",
		"{\"sequence\": 1, \"seen\": \"2026-01-01 00:00:00\"}",
		"{\"sequence\": 1, \"seen\": \"2026-01-01T00:00:00Z\", \"x\": 1}",
		"{\"sequence\": 1, \"sequence\": 2, \"seen\": \"2026-01-01T00:00:00Z\"}",
		/* above the signer's cap, 2^53-1; a shaped seen that is no time */
		"{\"sequence\": 9007199254740992, \"seen\": \"2026-01-01T00:00:00Z\"}",
		"{\"sequence\": 1, \"seen\": \"2026-02-31T00:00:00Z\"}",
		"{\"sequence\": 1, \"seen\": \"2026-01-01T25:00:00Z\"}",
		"{\"sequence\": 1, \"seen\": \"2026-01-01T00:00:00Z\", \"after\": \"2026-13-01T00:00:00Z\"}",
		"{\"sequence\": 1, \"seen\": \"2026-01-01T00:00:00Z\", \"after\": 1}",
		"{\"sequence\": 1, \"after\": \"2026-01-01T00:00:00Z\", \"x\": 1}" };
	const char *sub = "{\"valid\":false,\"sequence\":4,\"failures\":[{\"subject\":\"ruleset/nftables\"}]}";
	struct attstale s = { .seq = 9 }, t;
	char p[512];
	int v;

	snprintf(p, sizeof p, "%s/stale", dir);
	ok(attstale_load(p, &s, why, whysz) == 0 && s.seq == 0 && !s.seen[0], "no record: nothing seen");
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		ok(attstale_load(file("stale", bad[i], 0600), &s, why, whysz) == -1 && strstr(why, "/stale: not "),
		   "a malformed record: -1, never nothing seen (%s: %s)", bad[i], why);
	ok(attstale_load(file("stale", "{\"sequence\": 9007199254740991, \"seen\": \"2026-01-01T00:00:00Z\"}", 0600),
			 &s, why, whysz) == 0 && s.seq == 9007199254740991LL && !s.after[0],
	   "the signer's cap, 2^53-1, and an older record without after: read");
	ok(attstale_load(file("stale", "{\"after\": \"2025-12-31T23:59:59Z\", \"sequence\": 2, \"seen\": "
			      "\"2026-01-01T00:00:00Z\"}", 0600), &s, why, whysz) == 0 && s.seq == 2 &&
		   !strcmp(s.after, "2025-12-31T23:59:59Z"), "a record with after: read");
	ok(attstale_load(dir, &s, why, whysz) == -1 && strstr(why, ": not a regular file"),
	   "a directory: -1 (%s)", why);
	stale_files(why, whysz);
	s = (struct attstale){ 0 };
	ok(apply(&s, "{\"valid\":false,\"sequence\":4,\"failures\":[{\"field\":\"predicate.expires\"}]}", 0,
		 "2026-01-01T00:00:10Z", &v, why, whysz) == 0 && !s.seen[0], "a failed field marks nothing");
	ok(apply(&s, sub, 0, "2026-01-01T00:00:10Z", &v, why, whysz) == 1 && s.seq == 4 &&
		   !strcmp(s.seen, "2026-01-01T00:00:10Z"), "a failed subject marks its sequence and when");
	ok(attstale_save(p, &s) == 0 && attstale_load(p, &t, why, whysz) == 0 && t.seq == 4 &&
		   !strcmp(t.seen, s.seen), "saved and read back");
	apply(&s, "{\"valid\":false,\"sequence\":3,\"failures\":[{\"subject\":\"qemu\"}]}", 0,
	      "2026-01-01T00:00:20Z", &v, why, whysz);
	ok(s.seq == 4 && !strcmp(s.seen, "2026-01-01T00:00:20Z"), "the highest sequence, the last time seen");
	apply(&s, "{\"valid\":true,\"sequence\":4,\"started\":\"2026-01-01T00:01:00Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:02:00Z", &v, why, whysz);
	ok(v == 0 && strstr(why, "(sequence 4) verifies again"), "the same sequence verifying again: not valid (%s)", why);
	apply(&s, "{\"valid\":true,\"sequence\":5,\"started\":\"2026-01-01T00:00:05Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:02:00Z", &v, why, whysz);
	ok(v == 0 && strstr(why, "doctor run started 2026-01-01T00:00:05Z, not after"),
	   "a higher sequence of a doctor run from before: not valid (%s)", why);
	apply(&s, "{\"valid\":true,\"sequence\":5,\"started\":\"2026-01-01T00:00:20Z\",\"failures\":[]}", 1,
	      "2026-01-01T00:02:00Z", &v, why, whysz);
	ok(v == 0, "a doctor run started in the second the change was seen: not valid");
	apply(&s, "{\"valid\":true,\"sequence\":5,\"failures\":[]}", 1, "2026-01-01T00:02:00Z", &v, why, whysz);
	ok(v == 0 && strstr(why, "(not said)"), "no start said: not valid (%s)", why);
	ok(apply(&s, "{\"valid\":true,\"sequence\":5,\"started\":\"2026-01-01T00:00:21Z\",\"failures\":[]}", 1,
		 "2026-01-01T00:02:00Z", &v, why, whysz) == 0 && v == 1 && !why[0],
	   "a higher sequence of a doctor run started after: valid");
	stale_clocks(p, why, whysz);
	/* two readers' marks: the highest sequence, the latest times */
	s = (struct attstale){ .seq = 4, .seen = "2026-01-01T00:03:00Z", .after = "" };
	{
		struct attstale o = { .seq = 3, .seen = "2026-01-01T00:05:00Z", .after = "2026-01-01T00:01:00Z" };
		struct attstale same = o;

		ok(attstale_merge(&s, &o) == 1 && s.seq == 4 && !strcmp(s.seen, "2026-01-01T00:05:00Z") &&
			   !strcmp(s.after, "2026-01-01T00:01:00Z"),
		   "merge: the highest sequence, the latest seen and after (%lld %s %s)", s.seq, s.seen, s.after);
		ok(attstale_merge(&s, &same) == 0 && s.seq == 4, "merge of what it holds: unchanged");
		o = (struct attstale){ 0 };
		ok(attstale_merge(&o, &s) == 1 && o.seq == 4 && !strcmp(o.seen, s.seen),
		   "merge into nothing seen: the mark");
	}
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
	stale_tests(why, sizeof why);
	for (const char *const *n = (const char *const[]){ "config", "valid", "fails", "lies", "slow", "stale", NULL };
	     *n; n++) {
		snprintf(msg, sizeof msg, "%s/%s", dir, *n);
		unlink(msg);
	}
	rmdir(dir);
	return tap_done();
}
