/* gcstore.h - isopod-gc's sweeps of the store's space (isopod-gc(1)): the
 * warm pool's byte budget (least recently used first), kernels nothing
 * uses, the build cache (--cache) and the store's usage (--df).  No exit:
 * a failure is -1 with errno; isopod-gc's main picks the exit status. */
#ifndef ISOPOD_GCSTORE_H
#define ISOPOD_GCSTORE_H

#include <jansson.h>
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
	int running, candidate, keep, in_use;
};

/* What a sweep shares with its caller: whether it only counts, and the
 * bytes it removed (or, dry, would have). */
struct gcstore {
	int dry_run;
	long long reclaimed;
};

void gcstore_remove_tree(struct gcstore *g, const char *dir);
long long parse_size(const char *s);
int warm_evict(struct gcstore *g, long long budget, const struct rec *recs, size_t nrec,
	       json_t *swept, json_t *evicted, long long *total);
void prune_kernels(struct gcstore *g, const struct rec *recs, size_t nrec, json_t *swept,
		   json_t *out);
json_t *store_usage(void);
int cache_sweep(struct gcstore *g, long long grace, json_t *out);

#endif
