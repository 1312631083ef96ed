/* report.c - a doctor's report as isopod-attest sign checks it before
 * signing (report.h). */
#include "report.h"
#include "attest.h"
#include "util.h"

#include <string.h>

/* A report from a clock a little ahead of ours is not "from the future". */
#define SKEW_S 60

/* A probe's verdict is the doctor's conclusion; the steps are its evidence,
 * and sign believes the conclusion only when the evidence says the same:
 * exactly the five steps of issue 10, in order, the VM alive, the tools
 * there, the control (the same path, allowed) through, the attempt
 * blocked, and the host's evidence of the block seen. */
static int check_steps(const char *name, json_t *steps, char *why, size_t whysz)
{
	static const struct {
		const char *step;
		int ok;
	} want[] = {
		{ .step = "liveness", .ok = 1 }, { .step = "tooling", .ok = 1 },
		{ .step = "control", .ok = 1 },  { .step = "attempt", .ok = 0 },
		{ .step = "evidence", .ok = 1 },
	};
	size_t k, n = sizeof want / sizeof *want;

	if (json_array_size(steps) != n)
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: probe %s: %zu steps, not the %zu of a probe (liveness, tooling, control, attempt, evidence)",
		    EXC(name), json_array_size(steps), n);
	for (k = 0; k < n; k++) {
		json_t *st = json_array_get(steps, k), *ok = json_object_get(st, "ok");
		const char *sn = json_string_value(json_object_get(st, "step"));

		if (!sn || strcmp(sn, want[k].step))
			return attest_errf(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %zu is %s, not %s", EXC(name), k + 1,
			    sn ? EXC(sn) : "missing", want[k].step);
		if (!json_is_boolean(ok))
			return attest_errf(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %s: ok is missing or not a boolean",
			    EXC(name), want[k].step);
		if (json_is_true(ok) != want[k].ok)
			return attest_errf(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %s: ok %s (%s), yet the probe says pass",
			    EXC(name), want[k].step, want[k].ok ? "false" : "true",
			    want[k].ok ? "it must succeed" : "the attempt must be blocked");
	}
	return 0;
}

/* counts: {probes, pass, fail, error}, each an integer, that agree with
 * the probes (all of which passed by now). */
static int check_counts(json_t *counts, size_t n, char *why, size_t whysz)
{
	static const char *const key[] = { "probes", "pass", "fail", "error" };
	size_t k;

	if (!json_is_object(counts))
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: counts is missing or not an object");
	for (k = 0; k < sizeof key / sizeof *key; k++) {
		json_t *c = json_object_get(counts, key[k]);
		json_int_t want = k < 2 ? (json_int_t)n : 0;

		if (!json_is_integer(c))
			return attest_errf(ATTEST_EINPUT, why, whysz, "report: counts.%s is missing or not an integer", key[k]);
		if (json_integer_value(c) != want)
			return attest_errf(ATTEST_EREFUSED, why, whysz, "report: counts.%s is %lld, but the probes say %lld", key[k],
			    (long long)json_integer_value(c), (long long)want);
	}
	return 0;
}

/* The doctor's report (doc/INTERFACES.md "Doctor report"): refuse unless
 * it says pass, has at least one probe, and every probe passed. */
int report_check(json_t *rep, const char *mid, long long now, long long expires_s,
		 long long max_age, long long *fin_out, char *why, size_t whysz)
{
	json_t *probes = json_object_get(rep, "probes"), *p, *host = json_object_get(rep, "host");
	const char *v = json_string_value(json_object_get(rep, "verdict"));
	const char *hid = json_string_value(json_object_get(host, "id"));
	const char *ver = json_string_value(json_object_get(json_object_get(rep, "doctor"), "version"));
	long long st = attest_iso_parse(json_string_value(json_object_get(rep, "started")));
	long long fin = attest_iso_parse(json_string_value(json_object_get(rep, "finished")));
	size_t i, j;
	int r;

	if (!v)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: verdict is missing or not a string");
	if (!json_is_array(probes))
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: probes is missing or not an array");
	if (json_array_size(probes) == 0)
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: no probes; a report that tested nothing never signs");
	json_array_foreach(probes, i, p) {
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *cls = json_string_value(json_object_get(p, "class"));
		const char *pv = json_string_value(json_object_get(p, "verdict"));
		json_t *steps = json_object_get(p, "steps");

		if (!name || !*name || !cls || !*cls)
			return attest_errf(ATTEST_EINPUT, why, whysz, "report: probe %zu has no name or class", i);
		if (!pv)
			return attest_errf(ATTEST_EINPUT, why, whysz, "report: probe %s: verdict is missing", EXC(name));
		if (strcmp(pv, "pass"))
			return attest_errf(ATTEST_EREFUSED, why, whysz, "report: probe %s (class %s): verdict %s, not pass", EXC(name),
			    EXC(cls), EXC(pv));
		if (!json_is_array(steps) || json_array_size(steps) == 0)
			return attest_errf(ATTEST_EINPUT, why, whysz, "report: probe %s: no steps (a pass without evidence)", EXC(name));
		if ((r = check_steps(name, steps, why, whysz)) < 0)
			return r;
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(probes, j), "name"))))
				return attest_errf(ATTEST_EINPUT, why, whysz, "report: probe %s appears twice", EXC(name));
	}
	if (strcmp(v, "pass"))
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: verdict %s, not pass", EXC(v));
	if ((r = check_counts(json_object_get(rep, "counts"), json_array_size(probes), why, whysz)) < 0)
		return r;
	if (!hid)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: host.id is missing");
	if (strcmp(hid, mid))
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: host.id %s is not this host's (%s)", EXC(hid), mid);
	if (!ver)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: doctor.version is missing");
	if (st < 0)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: started is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < 0)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: finished is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < st)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: finished is before started");
	if (fin > now + SKEW_S)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: finished is in the future");
	if (fin + expires_s <= now)
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: finished %s, already older than the expiry (%lld s)",
		    json_string_value(json_object_get(rep, "finished")), expires_s);
	if (fin + max_age < now)
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: finished %s, older than the %lld s a report may be (--max-report-age-s)",
		    json_string_value(json_object_get(rep, "finished")), max_age);
	*fin_out = fin;
	return 0;
}

/* The subjects the doctor recorded when it started (isopod-attest
 * subjects) must be the live ones now: what it tested is what is signed.
 * Each difference is named on stderr. */
int report_subjects_check(json_t *rep, json_t *live, char *why, size_t whysz)
{
	json_t *rs = json_object_get(rep, "subjects"), *e, *l;
	size_t i, j, bad = 0;

	if (!json_is_array(rs) || json_array_size(rs) == 0)
		return attest_errf(ATTEST_EINPUT, why, whysz, "report: subjects is missing or empty (the doctor records isopod-attest subjects before its probes)");
	json_array_foreach(rs, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *d = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));

		if (!name || !d)
			return attest_errf(ATTEST_EINPUT, why, whysz, "report: subjects entry %zu has no name or no digest.sha256", i);
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(rs, j), "name"))))
				return attest_errf(ATTEST_EINPUT, why, whysz, "report: subject %s appears twice", EXC(name));
	}
	json_array_foreach(live, i, l) {
		const char *name = json_string_value(json_object_get(l, "name"));
		const char *have = json_string_value(json_object_get(json_object_get(l, "digest"), "sha256"));
		const char *want = NULL;

		json_array_foreach(rs, j, e)
			if (!strcmp(name, json_string_value(json_object_get(e, "name"))))
				want = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));
		if (!want)
			warn("subject %s: on this host now, but not in the report", name), bad++;
		else if (strcmp(want, have))
			warn("subject %s: the doctor tested %.16s…, live now %.16s…", name, EXC(want), have), bad++;
	}
	json_array_foreach(rs, j, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		int found = 0;

		json_array_foreach(live, i, l)
			found |= !strcmp(name, json_string_value(json_object_get(l, "name")));
		if (!found)
			warn("subject %s: in the report, but not on this host now", EXC(name)), bad++;
	}
	if (bad)
		return attest_errf(ATTEST_EREFUSED, why, whysz, "report: %zu subject(s) differ from the live host's: the doctor did not test this host as it is now", bad);
	return 0;
}
