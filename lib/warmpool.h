/* warmpool.h - the warm pool as a boot uses it: key a VM's shape, build
 * the snapshot of a shape that has none (one builder, the others wait),
 * open and check a published one for a resume, retire a bad one.  The
 * store underneath (locks, removal, orphans) is lib/warm.h.
 *
 * Whatever goes wrong here ends in a cold boot with a warning (appended to
 * pool.warnings and printed), never in a failed run: these functions
 * return how it went, and the tool decides. */
#ifndef ISOPOD_WARMPOOL_H
#define ISOPOD_WARMPOOL_H

#include "conlog.h"
#include "image.h"
#include "qemu.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WARM_RESUME_MAX_MS 20000  /* a resume, at most: then the snapshot is retired */
#define WARM_STATE_FD "isopod-state" /* the state file's name for QMP getfd */

struct conn;

/* One boot's view of the pool.  Initialise with POOL_INIT, then set vm,
 * im, conn, ownerfd and wait_ms. */
struct pool {
	int on;                  /* this boot consults the pool */
	char key[65], dir[PATH_MAX], argv_fp[65];
	char *text;              /* the canonical text hashed into key */
	char qver[256];
	const char *net;         /* the net mode: none, filtered or open */
	json_t *layers;          /* the disk chain's stages, root first */
	long long disk_bytes;
	json_t *warnings;
	const char *path;        /* "cold" | "warm" | "snapshot-build" */
	long long resume_ms, build_ms;
	dev_t dev;               /* the snapshot directory resumed from: */
	ino_t ino;               /*   retire that one, never a newer build */
	int ownerfd;             /* the owner's pidfd (-1 with --keep) */
	int hold;                /* warm/<key>.lock held shared from before the
				  * snapshot is opened until this process exits
				  * (its record names warm_key by then): gc and
				  * isopod-warm rm never remove it meanwhile */
	long long wait_ms;       /* ISOPOD_WARM_WAIT_MS */
	int jail;                /* the template's QEMU jailed (jail_wanted) */
	const char *jail_why;    /* else why not */
	long long console_max;   /* the template's console.log keeps this
				  * much (isopod-boot --console-max) */
	const struct qemu_vm *vm;
	const struct img *im;
	struct conn *conn;       /* the agent connection's buffers (large) */
};

#define POOL_INIT                                                                           \
	{ .path = "cold", .resume_ms = -1, .build_ms = -1, .ownerfd = -1, .hold = -1,      \
	  .console_max = CONSOLE_MAX_DEFAULT }

enum { GOT_NONE, GOT_PUBLISHED, GOT_BUILT };

struct snap {
	int memfd, statefd;
};

/* A warning for the result (and stderr, which the front end relays). */
__attribute__((format(printf, 2, 3))) void warm_warn(struct pool *w, const char *fmt, ...);
/* Has the owner exited, or is a stop signal (SIGTERM, SIGINT, SIGHUP)
 * pending, blocked by isopod-boot while the snapshot is prepared?  Then no
 * run wants this VM. */
int owner_gone(const struct pool *w);
/* Key this VM's shape (record rec, disk size, forked disk or NULL, net
 * mode).  0, or -1 when it cannot be keyed (a warning says why). */
int warm_setup(struct pool *w, json_t *rec, long long disk_bytes, const char *forked_disk,
	       const char *net_mode);
/* Make sure a snapshot of this shape exists (building it in the VM in's
 * directory when plain or forked).  GOT_BUILT, GOT_PUBLISHED or GOT_NONE
 * (boot cold; a warning says why).  With a snapshot, its key's lock is held
 * shared (w->hold) until exit or warm_retire. */
int warm_get(struct pool *w, const struct inst *in, int plain, int64_t deadline);
/* Build the snapshot of this shape in the staging directory sd (lib/
 * warmtpl.c): the template QEMU, jailed when w->jail, on an overlay over
 * the VM in's disk; sd/meta.json last.  0, or -1 with msg (sd is the
 * caller's to remove). */
int warm_build(struct pool *w, const struct inst *in, int plain, const char *sd,
	       int64_t deadline, char *msg, size_t msz);
/* Open the published snapshot and check it.  0, or -1 with why. */
int snap_open(struct pool *w, struct snap *sn, char *why, size_t wsz);
/* Take the snapshot we checked or resumed from out of use. */
void warm_retire(struct pool *w);
/* Usage figures in its meta.json. */
void warm_touch(struct pool *w, int hit);
/* Make disk a copy of the snapshot's empty overlay.  0, or -1. */
int blank_copy(struct pool *w, const char *disk, long long bytes);
/* Copy a small file (a VM's empty overlay): 0 or -1 (errno). */
int copy_small(const char *from, const char *to);

#endif
