/* report.h - a doctor's report (doc/INTERFACES.md "Doctor report") as
 * isopod-attest sign checks it: a containment check that cannot fail is
 * worse than none, so sign refuses an empty report, any probe that did not
 * pass (or whose five steps say otherwise) and a report that is not itself
 * "pass", nor one that did not run the whole adverse suite against what
 * the live host has (report_live).  Both return 0 or ATTEST_EINPUT (malformed) / ATTEST_EREFUSED
 * (well-formed, not signable) with why. */
#ifndef ISOPOD_REPORT_H
#define ISOPOD_REPORT_H

#include <jansson.h>
#include <stddef.h>

/* What the live host has, as sign reads it itself (never from the report):
 * its taps and, per mode of lib/suite.h's table, whether it has slots of
 * that mode (none always does). */
#define REPORT_MODES_MAX 8
struct report_live {
	int ntaps;                      /* isopod-tap0.. present */
	int mode[REPORT_MODES_MAX];     /* by suite_modes() index: 1 live */
};

/* The live host's taps and modes (lib/net.c, as isopod-claim reads them). */
void report_live_read(struct report_live *live);

/* The report itself, for this host (mid: /etc/machine-id) now: finished
 * no later than now (with a little skew), not older than max_age nor the
 * expiry, and the whole suite run for live (report_live).  *fin_out: when
 * it finished. */
int report_check(json_t *rep, const char *mid, const struct report_live *live, long long now,
		 long long expires_s, long long max_age, long long *fin_out, char *why, size_t whysz);
/* The subjects the doctor recorded when it started (isopod-attest
 * subjects) against the live ones: each difference warned on stderr. */
int report_subjects_check(json_t *rep, json_t *live, char *why, size_t whysz);

#endif
