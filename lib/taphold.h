/* taphold.h - an isopod tap held open by a process that is not an isopod
 * VM (issue 14; doc/DECISIONS.md "A tap someone else holds").
 *
 * isopod-netsetup's taps are persistent and single-queue, so the kernel
 * attaches one file at a time: while any process holds a tap open (QEMU,
 * or a stray one), a second TUNSETIFF on it fails with EBUSY.  lib/net.c
 * skips such a slot; lib/qjail.c names the holder when QEMU's own open
 * meets one. */
#ifndef ISOPOD_TAPHOLD_H
#define ISOPOD_TAPHOLD_H

#include <stddef.h>

/* Does any file hold tap (isopod-tapK) open?  Asked by attaching one and
 * letting go, which only the tap's owner (or CAP_NET_ADMIN) may do; the
 * caller holds slot K's lock, so no isopod VM is opening it meanwhile.  1 held,
 * 0 free or unable to tell (QEMU's own open is then the last word). */
int taphold_busy(const char *tap);
/* The processes holding tap open (a /dev/net/tun file attached to it, as
 * /proc/PID/fdinfo says "iff:\tTAP"), "pid N (comm), ..." in out; those of
 * this network namespace only, since tap names are per namespace.  Only
 * the processes this user may inspect are seen.  The number found; 0 with
 * out saying what is known ("a process this user cannot see", or the
 * holders of a tap of that name in other namespaces). */
int taphold_who(const char *tap, char *out, size_t sz);

#endif
