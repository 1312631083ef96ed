/* accelhost.h - the KVM probe's verdict shared by every store of one user
 * on one host (lib/accel.c asks here when its store has no verdict).
 *
 * The probe boots the kernel under KVM for up to 10 s, and its verdict was
 * kept per store: every new store (each test file's, every user's first)
 * paid for it again, although what decides it is the host's.  This cache
 * keeps the verdict with a key of everything that decides it (accel_host_key)
 * in a directory only the caller's euid may write:
 *   $ISOPOD_ACCEL_HOST_CACHE_DIR (tests), else
 *   /run/isopod/accel as root, else $XDG_RUNTIME_DIR/isopod/accel, else none;
 * one file per key, <16 hex of the kernel>-<16 hex of the key's sha256>.json.  $ISOPOD_ACCEL_HOST_CACHE, else the
 * configuration's accel_host_cache (yes or no, lib/config.c), turns it off.
 *
 * It is a trust input: a planted "kvm" would make every run pick KVM where
 * it cannot work (they fail), a planted "tcg" slows them.  So each directory
 * and the file must be ours and writable by nobody else, reached without
 * following a link; anything else -- missing, unreadable, not ours, not a
 * regular file, malformed, another key -- is a miss (the probe runs), never
 * an error.  Writes are atomic (temporary file, rename). */
#ifndef ISOPOD_ACCELHOST_H
#define ISOPOD_ACCELHOST_H

#include <jansson.h>
#include <stddef.h>

/* Bumped when the probe would decide otherwise for the same key (its
 * bound, what it counts as an answer): older verdicts then miss. */
#define ACCEL_HOST_VERSION 1

/* The key of kernel ksha's verdict when the device is dev: {version,
 * kernel, qemu: the binary's identity (lib/util.c file_identity, found in
 * PATH), argv: lib/qemu.c qemu_fingerprint (this build's command lines),
 * kvm: dev's identity and rdev (a reloaded module is a new node), boot_id
 * (a reboot, a new host kernel; $ISOPOD_TEST_BOOT_ID in tests), jail: the
 * probe's QEMU jailed or not (it may not open the device in its jail)}.
 * NULL when a part cannot be known: then there is no host cache. */
json_t *accel_host_key(const char *ksha, const char *dev);

/* The cache's verdict for key (accel_host_key's): 1 with *accel ("kvm" or
 * "tcg", static), reason (the probe's, then " (host cache)", always whole)
 * and probed (when the probe ran, YYYY-MM-DDTHH:MM:SSZ); else 0, nothing
 * made or written. */
int accel_host_read(const json_t *key, const char **accel, char *reason, size_t rsz, char *probed,
		    size_t psz);

/* Keep a probe's verdict for key, the directories made (0700) when
 * missing.  Best effort: a directory refused (not ours, writable by
 * another, a link) or a failed write is a warning, no cache is none. */
void accel_host_write(const json_t *key, const char *accel, const char *reason,
		      const char *probed);

#endif
