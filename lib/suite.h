/* suite.h - the doctor's adverse suite as isopod-attest sign requires it
 * (doc/INTERFACES.md "Doctor report"): for each mode, the classes of probe
 * a doctor-booted VM of that mode always produces.
 *
 * The doctor reads this table too (lib/adverse.c suite_check): a class
 * here that a VM of its mode did not produce is an ERROR probe in its
 * report, so the two cannot drift apart unseen; a class it adds that
 * always runs belongs here too, or sign will sign a report without it.  Classes that depend on what the host
 * has (host: its own IPv4 addresses; host-gateway: a default route;
 * other-vm: a second VM) are not listed: sign cannot know they were due. */
#ifndef ISOPOD_SUITE_H
#define ISOPOD_SUITE_H

#include <stddef.h>

#define SUITE_NAME "adverse"
#define SUITE_MAX_CLASSES 16

struct suite_mode {
	const char *mode;                          /* "none", "filtered", "open" */
	const char *classes[SUITE_MAX_CLASSES];    /* NULL-terminated */
};

/* The table, *n entries, in the order the doctor boots them. */
const struct suite_mode *suite_modes(size_t *n);

#endif
