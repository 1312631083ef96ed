/* pool.h - the run pool: VMs of one shape already resumed and warmed up
 * (one command run), each waiting for ONE run (isopod-pool(1)).
 *
 * The store's pool/<key>/ holds, per shape key:
 *   ready-<vm id>   a ready VM: its boot's JSON.  Taking it is unlinking
 *                   it: of any number of takers one unlink succeeds.
 *   fill.lock       held by the one filler of the shape while it runs
 *   filling-<vm id> the VM the filler is making ready (counted)
 * A pooled VM's supervisor (isopod-supervise --pool-idle) listens on
 * pool/.own/<id>.sock for its one owner: the taker sends the run's pidfd
 * (SCM_RIGHTS), the supervisor answers 'k', closes and unlinks the socket
 * (no second owner) and then kills QEMU when that owner exits, as for a
 * booted VM's --owner.  No owner within the idle lifetime: it stops.
 *
 * These functions return errors; the tools decide. */
#ifndef ISOPOD_POOL_H
#define ISOPOD_POOL_H

#include "vm.h"

#include <jansson.h>
#include <stddef.h>

#define POOL_IDLE_DEFAULT 300      /* seconds a ready VM waits for a run */
#define POOL_SIZE_MAX 16
#define POOL_MAX_DEFAULT 4         /* pooled VMs of all shapes together */
#define POOL_TAKE_MS 4000          /* from a take's unlink to its hand-over, at most */

struct pool_cfg {
	long long size;    /* VMs per shape (0: off, the default) */
	long long idle_s;  /* a ready VM's lifetime without a run */
	long long max;     /* VMs of all shapes together, ready or filling */
};

/* pool_size and pool_idle_s from the configuration (lib/config.c), then
 * ISOPOD_POOL_SIZE and ISOPOD_POOL_IDLE_S over them.  0, or -1 with msg
 * (a bad value). */
int pool_config(struct pool_cfg *pc, char *msg, size_t msz);
/* store/pool/<key> (key: 64 hex).  0, or -1 (ENAMETOOLONG, EINVAL). */
int pool_path(char *out, size_t sz, const char *key);
/* The ready entries of key whose VM runs, counted; those whose VM is gone
 * removed (their supervisor died or the idle lifetime ended).  With the
 * filler's VM (filling-*) when count_filling.  -1 with errno. */
int pool_count(const char *key, int count_filling);
/* The pooled VMs of every shape, ready or being filled: what pool_max
 * bounds.  A filling entry counts while its shape's filler lives (holds
 * fill.lock); mine is the key whose filler is the caller (its own
 * filling entries then are a killed filler's, not counted).  -1. */
int pool_count_all(const char *mine);
/* Take one ready VM of key for the run whose pidfd is ownerfd: its entry
 * unlinked (ours alone), then the owner handed to its supervisor.  1 with
 * id and its boot JSON (*boot, the caller's), 0 when none is ready, -1
 * with msg. */
int pool_take(const char *key, int ownerfd, char id[VM_ID_SZ], json_t **boot, char *msg,
	      size_t msz);
/* Publish the VM id (booted and warmed up) as ready with its boot JSON:
 * written beside, then one rename.  0, or -1 with msg. */
int pool_publish(const char *key, const char *id, json_t *boot, char *msg, size_t msz);

/* The supervisor's side.  Listen on the VM id's owner socket
 * (pool/.own/<id>.sock): the fd, or -1 with msg. */
int pool_listen(const char *id, char *msg, size_t msz);
/* Remove it (the owner taken, or the VM gone). */
void pool_unlisten(const char *id);
/* Accept one connection on lfd and the pidfd it carries ('o' and the
 * pidfd, SCM_RIGHTS).  The pidfd, its connection in *conn for the answer
 * (pool_ack: the caller decides, after checking its VM still runs, review
 * L1), or -1 (not a pidfd, the peer gone: the listener stays). */
int pool_accept(int lfd, int *conn);
/* Answer the taker on conn 'k' (it has the VM) and close it.  0, or -1. */
int pool_ack(int conn);
/* An inotify fd watching id's shape directory for its ready entry's
 * unlink (the take), or -1 with msg (no entry of id: not a filler's VM).
 * The supervisor arms POOL_TAKE_MS from that unlink: no owner by then (the
 * taker was killed or failed after its take) ends the VM at once, not at
 * its idle lifetime (review L2). */
int pool_watch(const char *id, char *msg, size_t msz);
/* Read ifd's events: 1 when id's ready entry was removed, else 0. */
int pool_watch_taken(int ifd, const char *id);

/* isopod-gc: entries whose VM is not running (its supervisor died, it
 * expired), removed (not with dry), listed in out as {key, vm, removed};
 * then each shape left without entries and without a filler (its
 * fill.lock free) removed, listed in shapes as {key, removed}.  0, or -1
 * with errno. */
int pool_sweep(int dry, json_t *out, json_t *shapes);
/* The filler's lock of key's shape (op: LOCK_EX, | LOCK_NB): its
 * directory made, fill.lock locked as it is now (not one gc unlinked
 * while we opened it).  The fd, or -1 with errno (EWOULDBLOCK: another
 * filler holds it). */
int pool_fill_lock(const char *key, int op);
/* isopod df: {"shapes":N, "ready":N, "filling":N, "pss_bytes":N} of the
 * pool's running VMs (QEMU's PSS, /proc/PID/smaps_rollup). */
json_t *pool_df(void);

#endif
