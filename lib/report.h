/* report.h - a doctor's report (doc/INTERFACES.md "Doctor report") as
 * isopod-attest sign checks it: a containment check that cannot fail is
 * worse than none, so sign refuses an empty report, any probe that did not
 * pass (or whose five steps say otherwise) and a report that is not itself
 * "pass".  Both return 0 or ATTEST_EINPUT (malformed) / ATTEST_EREFUSED
 * (well-formed, not signable) with why. */
#ifndef ISOPOD_REPORT_H
#define ISOPOD_REPORT_H

#include <jansson.h>
#include <stddef.h>

/* The report itself, for this host (mid: /etc/machine-id) now: finished
 * no later than now (with a little skew), not older than max_age nor the
 * expiry.  *fin_out: when it finished. */
int report_check(json_t *rep, const char *mid, long long now, long long expires_s,
		 long long max_age, long long *fin_out, char *why, size_t whysz);
/* The subjects the doctor recorded when it started (isopod-attest
 * subjects) against the live ones: each difference warned on stderr. */
int report_subjects_check(json_t *rep, json_t *live, char *why, size_t whysz);

#endif
