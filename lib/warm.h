/* warm.h - the warm pool's store: memory snapshots, one per VM shape.
 *
 * warm/<key>/mem          guest RAM of the template (the file its QEMU ran
 *                         on with share=on); clones map it privately
 * warm/<key>/state        the template's device state (QMP migrate with
 *                         x-ignore-shared: RAM is not in it)
 * warm/<key>/meta.json    {format, key, key_text, shape, created, last_used,
 *                         hits, size, build_ms, mem:{bytes,ino,ctime_ns},
 *                         state:{bytes,sha256}, console_bytes,
 *                         console_log_truncated}
 * warm/<key>.lock         flock: held by the one run building <key>, and by
 *                         whoever publishes, retires or removes it
 * warm/.staging-<key>.<pid>   a build in progress (or killed): only <pid>
 *                         ever writes or removes it; gc reclaims it once
 *                         <pid> is dead or the key's lock is free
 * warm/.retired-<key>.<pid>   a snapshot being removed
 * warm/qemu-version.json  the QEMU version string, cached by the binary's
 *                         identity (running QEMU costs ~50 ms)
 * A snapshot's argv_fingerprint is lib/qemu.c's qemu_fingerprint() of the
 * isopod that built it; one that differs from this build's is orphaned, as
 * is a TCG one whose guest was told another TSC rate than the store keeps
 * (accel/tsc.json, lib/tsc.h).
 *
 * The key is the sha256 of a canonical text naming everything a resume
 * depends on (kernel, disk chain and size, vCPUs, memory, net mode,
 * accelerator, QEMU version and the whole QEMU command line with its
 * per-VM paths, tap and MAC replaced).  The net mode (shape.net: none,
 * filtered or open) is named as such: filtered and open VMs have the same
 * NIC but never share a snapshot; a networked template runs with the NIC
 * its clones get, each clone on its own slot's tap.  Publishing is one
 * rename(2) of a complete, fsynced staging directory: a snapshot is either
 * whole or absent. */
#ifndef ISOPOD_WARM_H
#define ISOPOD_WARM_H

#include <jansson.h>
#include <stddef.h>

#define WARM_FORMAT 1

/* 64 lower-case hex digits? */
int warm_key_valid(const char *s);
/* $ISOPOD_HOME/warm (created 0700 when mk); NULL with errno when the path
 * does not fit (ENAMETOOLONG) or cannot be made. */
const char *warm_root(int mk);
/* The first line of `qemu-system-x86_64 --version` (cached).  0, or -1
 * with the reason in err. */
int qemu_version(char *out, size_t sz, char *err, size_t errsz);
/* flock warm/<key>.lock with op (LOCK_EX [| LOCK_NB]); makes sure the file
 * locked is still the one at that path (remover-safe).  fd, or -1 (errno:
 * EWOULDBLOCK when held; warm/ not made or the path too long: as
 * warm_root). */
int warm_lock(const char *key, int op);
/* Load warm/<key>/meta.json (NULL with errno; ENAMETOOLONG when the path
 * does not fit). */
json_t *warm_meta(const char *key);
/* Why this snapshot can never be resumed again: an array of reasons
 * ("kernel ...", "base ...", "stage st-...", "qemu ..."), empty when it
 * still can.  New reference; NULL when out of memory or a path does not fit
 * (ENAMETOOLONG; the callers then keep the snapshot). */
json_t *warm_orphaned_by(json_t *meta, const char *cur_qemu);
/* Remove warm/<key>: rename it to warm/.retired-<key>.<pid>, then delete
 * that.  The caller holds the key's lock.  0, or -1 (errno; ENOENT when
 * there is nothing to remove). */
int warm_remove(const char *key, long long *bytes);
/* Parse ".staging-<key>.<pid>" / ".retired-<key>.<pid>": 1 and fills key
 * and pid, else 0. */
int warm_stale_name(const char *name, char key[65], long long *pid);
/* The jail name (its cgroup isopod-<name>, its identity) of the template
 * QEMU that builds key's snapshot: "tpl-", the key's first 32 hex, "-" and
 * the store's 16 (of sha256 of its directory's device and inode).  Of the
 * key, not of the VM: one builder per key at a time in a store (the key's
 * lock), and a cgroup a killed builder left is found again -- by the next
 * build of the shape (jail_spawn reclaims an empty one) and by isopod-gc's
 * cgroup sweep while no lock of the key is held (lib/gcjail.c).  Of the
 * store: every store's cgroups of a user share a parent (the caller's),
 * and two stores building one key at once would have wanted one cgroup
 * (the second's mkdir refused: booted cold); gc judges only its own
 * store's (the locks it can see are its own store's). */
#define WARM_TPL_NAME_SZ 56
void warm_tpl_name(const char *key, char out[WARM_TPL_NAME_SZ]);

/* What a template's builder (lib/warmtpl.c, inside its VM's isopod-boot)
 * killed mid-build leaves in that VM's directory, which its tpl_end would
 * have undone: the template's sockets' directory WARM_TPL_DIR, and the
 * VM's disk lent to the template's jail at WARM_TPL_LEND_MODE.  For
 * isopod-gc, holding the VM's lock: a builder's boot holds it from before
 * the lend until after tpl_end, so no builder of that VM lives or starts.
 * tpl/ is the sign of a lend: both act only where vdir/tpl is a directory
 * (not a link) of our own uid, as the builder made it.
 * warm_tpl_unlend: vdir/disk.qcow2 (a regular file of our uid and one
 * link, not followed) back to 0600 when it has the lend's mode (unless
 * dry); 1 when it had, 0 when not (or no disk, no tpl/), -1 with errno.
 * warm_tpl_clear: tpl/ emptied by its descriptor (what is not a directory
 * unlinked, links as links; nothing descended into: the jail's uid writes
 * there) and removed (unless dry); 0 when there is no such tpl/, 1 when
 * it went (would go), 2 when something stays (a directory: its name in
 * tpl/ in left, or rmdir's error; tpl/ left), -1 with errno.  Also the builder's own, before and after. */
#define WARM_TPL_DIR "tpl"
#define WARM_TPL_LEND_MODE 0644
int warm_tpl_unlend(const char *vdir, int dry);
int warm_tpl_clear(const char *vdir, int dry, char *left, size_t lsz);

#endif
