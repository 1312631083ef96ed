/* gcstore.h - isopod-gc's sweeps of the store's space (isopod-gc(1)): the
 * warm pool's byte budget (least recently used first), kernels nothing
 * uses, the build cache (--cache) and the store's usage (--df).  No exit:
 * a failure is -1 with errno; isopod-gc's main picks the exit status. */
#ifndef ISOPOD_GCSTORE_H
#define ISOPOD_GCSTORE_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <time.h>

/* A VM record as isopod-gc read it (bin/isopod-gc.c load_rec). */
struct rec {
	char id[64];
	char state[16];
	char warm_key[65]; /* the snapshot a VM was resumed from */
	char kernel[65];   /* the kernel it booted */
	time_t created, ref; /* ref: stopped_at, else created */
	long long qemu_pid, broker_pid, owner_pid;
	unsigned long long qemu_start, broker_start; /* /proc stat start (ticks), 0: none recorded */
	long long broker_uid;            /* -1: none recorded */
	char boot_id[37];                /* the host's boot when they were recorded; "": none */
	int running, candidate, keep, in_use;
};

/* What a sweep shares with its caller: whether it only counts, the bytes
 * it removed (or, dry, would have), and its trash: a directory
 * store/trash/gc-XXXXXX (flocked while its gc lives) into which victims are
 * renamed under the store lock, to be deleted once that lock is released.
 * Initialise with { .dry_run = D, .trash_fd = -1 }. */
struct gcstore {
	int dry_run;
	long long reclaimed;
	int trash_fd;          /* our trash directory, flocked; -1 when none */
	char trash[PATH_MAX];
	unsigned long ntrash;  /* victims moved so far: their names' prefix */
	char store[PATH_MAX];  /* the store as named (isopod-gc: ISOPOD_HOME is then
				* its pinned /proc/self/fd path), for output */
	char err[PATH_MAX + 64]; /* what a -1 (or -2) below failed at, when it says */
};

/* Under the store lock: make our trash directory and adopt every trash
 * directory whose gc is gone (its flock free: a gc killed before it emptied
 * it).  0, or -1 (errno; the sweep then removes in place), or -2 (errno,
 * g->err: store/trash could not be made; the caller's exit). */
int gcstore_trash_open(struct gcstore *g);
/* Take path (a file or a tree in the store) out of the store: count its
 * bytes, then (unless dry) rename it into the trash (one atomic rename,
 * cheap under the store lock), or remove it in place when there is no
 * trash or the rename cannot be done (another file system).  Returns its
 * bytes, or -1 (errno; ENOENT when path is gone). */
long long gcstore_discard(struct gcstore *g, const char *path);
/* The same for path relative to the directory at (a walk's parent: no
 * path above it is followed again); shown names it in warnings. */
long long gcstore_discard_at(struct gcstore *g, int at, const char *path, const char *shown);
/* After the store lock is released: delete the trash and close it. */
void gcstore_trash_empty(struct gcstore *g);
/* gcstore_discard, warning on a failure. */
void gcstore_remove_tree(struct gcstore *g, const char *dir);
void gcstore_remove_tree_at(struct gcstore *g, int at, const char *name, const char *shown);
/* Is a running VM (its lock held) recorded as resumed from warm/<key>?
 * Read from the records now, for a caller holding the key's lock: a boot
 * holds it shared from before it resumes until its record names the key. */
int gcstore_warm_in_use(const char *key);
/* The sweeps: 0, or -1 with errno: ENOMEM, or ENAMETOOLONG with g->err
 * "path too long: <its start>..." (a store or cache path that does not fit
 * PATH_MAX).  store_usage: the object, or NULL likewise. */
int warm_evict(struct gcstore *g, long long budget, const struct rec *recs, size_t nrec,
	       json_t *swept, json_t *evicted, long long *total);
int prune_kernels(struct gcstore *g, const struct rec *recs, size_t nrec, json_t *swept,
		  json_t *out);
/* The overlay templates (lib/ovtpl.h) of bases no longer in images/ and
 * of stages' layers no longer in stages/. */
int prune_overlays(struct gcstore *g, json_t *out);
json_t *store_usage(struct gcstore *g);
int cache_sweep(struct gcstore *g, long long grace, json_t *out, json_t *busy);

/* Every <64 hex>.lock in dir whose name starts with prefix, taken
 * (LOCK_EX, not waiting) but never made, into fds (at most max): how many,
 * or -1 (none left held) when one is held by someone, there are more than
 * max, or dir cannot be read (unknown: as if held).  A dir that does not
 * exist holds none: 0.  The KVM probe's accel/<ksha>.lock (prefix: its
 * dir's 16 hex), a warm template builder's warm/<key>.lock (prefix: its
 * cgroup's 32). */
int gcstore_lock_prefix(const char *dir, const char *prefix, int *fds, int max);

/* What jails leave behind (lib/gcjail.c).  jail_cgroups_sweep: every jail
 * cgroup (lib/jail.h jail_cg_each) with no member whose owner is gone: a
 * qemu-img caller's (or a killed doctor's check's, or a killed
 * isopod-jail's jail-<pid>) pid that no longer is its (qjail_img_owner),
 * or a VM
 * of recs (its QEMU's or its broker's) whose lock is free, or a VM id no
 * record has when the cgroup is 10 minutes old (lib/gcjail.c
 * unknown_stale: the name says no store); removed (or,
 * dry, not) and each as {path, pid|vm, removed} into out.
 * jail_cache_sweep: the ldd cache's files in <store>/jail that are stale
 * (jail_deps_valid 0), or all of them; each as {name, bytes, stale} into
 * out.  0 (nothing there fails them). */
int jail_cgroups_sweep(struct gcstore *g, const struct rec *recs, size_t nrec, json_t *out);
int jail_cache_sweep(struct gcstore *g, int all, json_t *out);

#endif
