/* accel.h - which accelerator a VM runs under, decided once per kernel.
 *
 * --accel / $ISOPOD_ACCEL force it; else tcg when /dev/kvm
 * ($ISOPOD_KVM_DEV) does not open O_RDWR; else the verdict cached in
 * accel/<ksha>.json; else the host's cached verdict for the same key
 * (lib/accelhost.h: another store's probe on this host, this boot, this
 * QEMU), copied into the store with its reason ending " (host cache)";
 * else a real boot of the kernel under KVM (bounded at 10 s) decides, and
 * its verdict is cached -- in the store, with its qemu.log beside it, and
 * in the host's cache.
 * On PVM hosts /dev/kvm opens fine and an unmodified guest dies late with
 * "KVM internal error": only a real boot tells.  isopod-boot and the
 * doctor both ask here; nobody repeats the probe. */
#ifndef ISOPOD_ACCEL_H
#define ISOPOD_ACCEL_H

#include "image.h"

#include <stddef.h>

/* Pick "kvm" or "tcg" into *accel (a static string); reason says why (set
 * for tcg; for kvm when probed or forced).  forced: "kvm", "tcg" or NULL, and
 * forced_by names who forced it.  0, or an exit class with err. */
int accel_choose(const char *forced, const char *forced_by, const struct img *im,
		 const char **accel, char *reason, size_t rsz, char *err, size_t errsz);
/* What accel_choose decides before it would boot a probe, without
 * writing anything (the doctor's view): 0 with *accel set -- forced
 * (reason "forced by ..."), tcg when the device does not open (reason
 * says why), or the cached verdict, the store's or else the host's
 * (*cached = 1) --, or 0 with *accel NULL
 * when only a probe can tell (the device opens and nothing is cached for
 * im->ksha, or im->ksha is empty).  An exit class with err as
 * accel_choose. */
int accel_known(const char *forced, const char *forced_by, const struct img *im,
		const char **accel, int *cached, char *reason, size_t rsz, char *err, size_t errsz);
/* Boot im's kernel under KVM on a throwaway overlay and see whether its
 * agent answers within 10 s: 1 it does, 0 not (reason says why), -1 the
 * probe could not run (err). */
int accel_probe(const struct img *im, char *reason, size_t rsz, char *err, size_t errsz);

#endif
