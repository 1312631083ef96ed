/* report.c - a doctor's report as isopod-attest sign checks it before
 * signing (report.h). */
#include "report.h"
#include "attest.h"
#include "net.h"
#include "suite.h"
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
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s: %zu steps, not the %zu of a probe (liveness, tooling, control, attempt, evidence)",
		    EXC(name), json_array_size(steps), n);
	for (k = 0; k < n; k++) {
		json_t *st = json_array_get(steps, k), *ok = json_object_get(st, "ok");
		const char *sn = json_string_value(json_object_get(st, "step"));

		if (!sn || strcmp(sn, want[k].step))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %zu is %s, not %s", EXC(name), k + 1,
			    sn ? EXC(sn) : "missing", want[k].step);
		if (!json_is_boolean(ok))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %s: ok is missing or not a boolean",
			    EXC(name), want[k].step);
		if (json_is_true(ok) != want[k].ok)
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s: step %s: ok %s (%s), yet the probe says pass",
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
		return reason_code(ATTEST_EINPUT, why, whysz, "report: counts is missing or not an object");
	for (k = 0; k < sizeof key / sizeof *key; k++) {
		json_t *c = json_object_get(counts, key[k]);
		json_int_t want = k < 2 ? (json_int_t)n : 0;

		if (!json_is_integer(c))
			return reason_code(ATTEST_EINPUT, why, whysz, "report: counts.%s is missing or not an integer", key[k]);
		if (json_integer_value(c) != want)
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: counts.%s is %lld, but the probes say %lld", key[k],
			    (long long)json_integer_value(c), (long long)want);
	}
	return 0;
}

void report_live_read(struct report_live *live)
{
	size_t i, n;
	const struct suite_mode *sm = suite_modes(&n);
	char m[16];
	int k;

	*live = (struct report_live){ .ntaps = net_ntaps() };
	/* none needs no tap: every host has it */
	for (i = 0; i < n && i < REPORT_MODES_MAX; i++)
		live->mode[i] = !strcmp(sm[i].mode, "none");
	for (k = 0; k < live->ntaps; k++) {
		net_tap_mode(k, m, sizeof m);
		for (i = 0; i < n && i < REPORT_MODES_MAX; i++)
			live->mode[i] |= !strcmp(sm[i].mode, m);
	}
}

/* The host side: what a probe from inside cannot see.  With taps live,
 * each must have its forwarding flag, its fail-closed rule, its tc
 * filter and the broker of the VM on its slot checked, the host its tables, rules and filters against
 * isopod-netsetup's record before and after the probes (netstate), and
 * every check the report has must be ok. */
static int check_host(json_t *hc, const struct report_live *live, char *why, size_t whysz)
{
	static const char *const want[] = { "tap-forwarding", "fail-closed-rule", "tc-filter", "broker" };
	static const char *const when[] = { "before", "after" };
	json_t *c;
	size_t i, w;
	int k;

	if (hc && !json_is_array(hc))
		return reason_code(ATTEST_EINPUT, why, whysz, "report: host_checks is not an array");
	if (live->ntaps > 0 && json_array_size(hc) == 0)
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: host_checks is missing or empty, yet this host has %d isopod tap(s): the doctor's host side did not run (a --vm run never signs)",
		    live->ntaps);
	json_array_foreach(hc, i, c) {
		const char *ck = json_string_value(json_object_get(c, "check"));
		const char *tap = json_string_value(json_object_get(c, "tap"));

		if (!json_is_true(json_object_get(c, "ok")))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: host check %s on %s is not ok", ck ? EXC(ck) : "?",
			    tap ? EXC(tap) : "?");
	}
	for (k = 0; k < live->ntaps; k++)
		for (w = 0; w < sizeof want / sizeof *want; w++) {
			char tap[32];
			int found = 0;

			snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
			json_array_foreach(hc, i, c)
				found |= !strcmp(json_string_value(json_object_get(c, "check")) ?: "", want[w]) &&
					 !strcmp(json_string_value(json_object_get(c, "tap")) ?: "", tap);
			if (!found)
				return reason_code(ATTEST_EREFUSED, why, whysz, "report: no host check %s for %s, a live tap of this host",
				    want[w], tap);
		}
	for (w = 0; live->ntaps > 0 && w < sizeof when / sizeof *when; w++) {
		int found = 0;

		json_array_foreach(hc, i, c)
			found |= !strcmp(json_string_value(json_object_get(c, "check")) ?: "", "netstate") &&
				 !strcmp(json_string_value(json_object_get(c, "when")) ?: "", when[w]);
		if (!found)
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: no host check netstate %s the probes, yet this host has %d isopod tap(s)",
			    when[w], live->ntaps);
	}
	return 0;
}

/* The mode of the report's VM id, or NULL. */
static const char *vm_mode(json_t *vms, const char *id)
{
	json_t *v;
	size_t i;

	json_array_foreach(vms, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "id")) ?: "", id))
			return json_string_value(json_object_get(v, "mode"));
	return NULL;
}

/* The whole suite, on this host as it is: the adverse suite, set up in
 * full, in VMs the doctor booted itself, with every mode the live host
 * has slots for run and every class lib/suite.h lists for it present.
 * Per-probe verdicts alone say nothing of what was not probed. */
static int check_coverage(json_t *rep, json_t *probes, const struct report_live *live, char *why,
			  size_t whysz)
{
	/* the doctor puts it beside its version: {"doctor": {"version", "suite"}} */
	const char *suite = json_string_value(json_object_get(json_object_get(rep, "doctor"), "suite"));
	json_t *setup = json_object_get(rep, "setup"), *vms = json_object_get(rep, "vms"), *v, *p;
	size_t i, j, m, nm;
	const struct suite_mode *sm = suite_modes(&nm);
	int r;

	if (!suite || strcmp(suite, SUITE_NAME))
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: doctor.suite is %s, not " SUITE_NAME ": only the adverse suite's report signs",
		    suite ? EXC(suite) : "missing");
	if (!json_is_true(json_object_get(setup, "ok")))
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: setup.ok is not true (step %s: %s): the suite did not run in full",
		    EXC(json_string_value(json_object_get(setup, "step")) ?: "?"),
		    EXC(json_string_value(json_object_get(setup, "why")) ?: "?"));
	if ((r = check_host(json_object_get(rep, "host_checks"), live, why, whysz)) < 0)
		return r;
	if (!json_is_array(vms) || json_array_size(vms) == 0)
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: vms is missing or empty: which VMs the probes ran in is not said");
	json_array_foreach(vms, i, v) {
		const char *id = json_string_value(json_object_get(v, "id"));
		const char *mode = json_string_value(json_object_get(v, "mode"));

		if (!id || !mode)
			return reason_code(ATTEST_EINPUT, why, whysz, "report: vms entry %zu has no id or mode", i);
		if (!json_is_true(json_object_get(v, "booted_by_doctor")))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: VM %s (mode %s) was not booted by the doctor: a --vm run never signs",
			    EXC(id), EXC(mode));
	}
	json_array_foreach(probes, i, p) {
		const char *id = json_string_value(json_object_get(p, "vm"));
		const char *name = json_string_value(json_object_get(p, "name"));

		if (!id || !vm_mode(vms, id))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s ran in VM %s, which is not among the report's vms",
			    EXC(name), id ? EXC(id) : "(none named)");
	}
	for (m = 0; m < nm && m < REPORT_MODES_MAX; m++) {
		size_t c;
		int ran = 0;

		if (!live->mode[m])
			continue;
		json_array_foreach(probes, i, p)
			ran |= !strcmp(vm_mode(vms, json_string_value(json_object_get(p, "vm"))), sm[m].mode);
		if (!ran)
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: mode %s is missing: this host has %s slots, but no doctor VM of mode %s ran probes",
			    sm[m].mode, sm[m].mode, sm[m].mode);
		for (c = 0; sm[m].classes[c]; c++) {
			int have = 0;

			json_array_foreach(probes, j, p)
				have |= !strcmp(vm_mode(vms, json_string_value(json_object_get(p, "vm"))), sm[m].mode) &&
					!strcmp(json_string_value(json_object_get(p, "class")), sm[m].classes[c]);
			if (!have)
				return reason_code(ATTEST_EREFUSED, why, whysz, "report: mode %s: class %s is missing (the doctor's suite runs it in every %s VM)",
				    sm[m].mode, sm[m].classes[c], sm[m].mode);
		}
	}
	return 0;
}

/* The doctor's report (doc/INTERFACES.md "Doctor report"): refuse unless
 * it says pass, has at least one probe, and every probe passed. */
int report_check(json_t *rep, const char *mid, const struct report_live *live, long long now,
		 long long expires_s, long long max_age, long long *fin_out, char *why, size_t whysz)
{
	json_t *probes = json_object_get(rep, "probes"), *p, *host = json_object_get(rep, "host");
	const char *v = json_string_value(json_object_get(rep, "verdict"));
	const char *hid = json_string_value(json_object_get(host, "id"));
	const char *ver = json_string_value(json_object_get(json_object_get(rep, "doctor"), "version"));
	long long st = iso_parse(json_string_value(json_object_get(rep, "started")));
	long long fin = iso_parse(json_string_value(json_object_get(rep, "finished")));
	size_t i, j;
	int r;

	if (!v)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: verdict is missing or not a string");
	if (!json_is_array(probes))
		return reason_code(ATTEST_EINPUT, why, whysz, "report: probes is missing or not an array");
	if (json_array_size(probes) == 0)
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: no probes; a report that tested nothing never signs");
	json_array_foreach(probes, i, p) {
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *cls = json_string_value(json_object_get(p, "class"));
		const char *pv = json_string_value(json_object_get(p, "verdict"));
		json_t *steps = json_object_get(p, "steps");

		if (!name || !*name || !cls || !*cls)
			return reason_code(ATTEST_EINPUT, why, whysz, "report: probe %zu has no name or class", i);
		if (!pv)
			return reason_code(ATTEST_EINPUT, why, whysz, "report: probe %s: verdict is missing", EXC(name));
		if (strcmp(pv, "pass"))
			return reason_code(ATTEST_EREFUSED, why, whysz, "report: probe %s (class %s): verdict %s, not pass", EXC(name),
			    EXC(cls), EXC(pv));
		if (!json_is_array(steps) || json_array_size(steps) == 0)
			return reason_code(ATTEST_EINPUT, why, whysz, "report: probe %s: no steps (a pass without evidence)", EXC(name));
		if ((r = check_steps(name, steps, why, whysz)) < 0)
			return r;
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(probes, j), "name"))))
				return reason_code(ATTEST_EINPUT, why, whysz, "report: probe %s appears twice", EXC(name));
	}
	if (strcmp(v, "pass"))
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: verdict %s, not pass", EXC(v));
	if ((r = check_counts(json_object_get(rep, "counts"), json_array_size(probes), why, whysz)) < 0 ||
	    (r = check_coverage(rep, probes, live, why, whysz)) < 0)
		return r;
	if (!hid)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: host.id is missing");
	if (strcmp(hid, mid))
		return reason_code(ATTEST_EINPUT, why, whysz, "report: host.id %s is not this host's (%s)", EXC(hid), mid);
	if (!ver)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: doctor.version is missing");
	if (st < 0)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: started is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < 0)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: finished is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < st)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: finished is before started");
	if (fin > now + SKEW_S)
		return reason_code(ATTEST_EINPUT, why, whysz, "report: finished is in the future");
	if (fin + expires_s <= now)
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: finished %s, already older than the expiry (%lld s)",
		    json_string_value(json_object_get(rep, "finished")), expires_s);
	if (fin + max_age < now)
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: finished %s, older than the %lld s a report may be (--max-report-age-s)",
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
		return reason_code(ATTEST_EINPUT, why, whysz, "report: subjects is missing or empty (the doctor records isopod-attest subjects before its probes)");
	json_array_foreach(rs, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *d = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));

		if (!name || !d)
			return reason_code(ATTEST_EINPUT, why, whysz, "report: subjects entry %zu has no name or no digest.sha256", i);
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(rs, j), "name"))))
				return reason_code(ATTEST_EINPUT, why, whysz, "report: subject %s appears twice", EXC(name));
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
		return reason_code(ATTEST_EREFUSED, why, whysz, "report: %zu subject(s) differ from the live host's: the doctor did not test this host as it is now", bad);
	return 0;
}
