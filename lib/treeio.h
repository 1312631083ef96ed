/* treeio.h - a directory tree into a tree stream (the walk) and a tree
 * stream into a directory (the sink); the records are treestream.h's.
 * libc only: the agent walks for copy-out and sinks for copy-in, the host
 * the other way round.
 *
 * The sink is where a hostile guest's copy-out lands on the host: every
 * entry is created relative to the top's descriptor, each parent reached
 * one component at a time with O_NOFOLLOW|O_DIRECTORY (a symlink the guest
 * sent is created, never resolved through), with O_EXCL / mkdirat /
 * symlinkat that never replace what is there (a name sent twice is an
 * error, not a file swapped for a symlink), modes masked by the caller's
 * mask (the host's: 0777, no setuid, setgid or sticky bit), and only
 * directories, regular files and symlinks made. */
#ifndef ISOPOD_TREEIO_H
#define ISOPOD_TREEIO_H

#include "treestream.h"

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TS_DIR_BYTES_MAX (16u << 20) /* the sink's memory of directory paths */

/* The walk is not tree_visit (tree.h), and its policy differs on purpose:
 * - it is pulled, a buffer at a time, by whoever sends the stream (the
 *   agent's credit window, exec's copy-in): tree_visit calls back over the
 *   whole tree in one go and cannot pause between two reads;
 * - it holds one descriptor per level, TS_DEPTH_MAX at most, and notes a
 *   deeper directory as skipped: tree_visit's trick of queueing deep
 *   directories by name and reaching them again from the top needs a
 *   visit that may take its time, not a stream that is half sent;
 * - it crosses mount points, as tar does: the caller named a directory to
 *   copy, and what is mounted in it is what the caller sees there.
 *   tree_visit stays on one filesystem because it removes and measures a
 *   jail's leftovers, where a mount is never ours to empty;
 * - a file of several names is skipped (noted): the stream has no link
 *   record, and sending its bytes once per name would make copies where
 *   the source had one file.
 * TS_DEPTH_MAX (treestream.h): directories open at once in a walk */
struct ts_walk {
	int fd[TS_DEPTH_MAX];       /* the open directories, top first */
	DIR *dir[TS_DEPTH_MAX];
	size_t plen[TS_DEPTH_MAX];  /* path's length at each level */
	int depth;                  /* levels open; 0 once all is sent */
	char path[TS_PATH_MAX + 1];
	int file;                   /* the file being sent, or -1 */
	uint64_t size, pos;         /* its size at open, where to look for data next */
	uint64_t seg_off, seg_left; /* the segment being sent */
	uint8_t hdr[TS_HDR_MAX];    /* a record head not yet handed out */
	size_t hlen, hoff;
	int ended;                  /* 'e' queued */
	uint32_t skipped;           /* entries sent as notes */
	/* each of them, also told here (may be NULL) */
	void (*note)(void *ctx, const char *path, const char *why);
	void *ctx;
	/* Reads the current file's bytes as pread does (may be NULL:
	 * pread); nth counts the walk's files from 1, so a reader that
	 * keeps a file's bytes ahead knows when they are another's.  Set
	 * after ts_walk_open, as note is. */
	ssize_t (*pread)(void *ctx, uint64_t nth, int fd, uint8_t *buf, size_t n, uint64_t off,
			 uint64_t size);
	uint64_t nth;
	char err[512];
};

/* Begin a walk of the directory open at fd (taken: closed by ts_walk_close).
 * 0, or -1 (w->err). */
int ts_walk_open(struct ts_walk *w, int fd);
/* The next bytes of the stream into buf[cap] (cap >= 1): their count, 0 at
 * the end, -1 on a failure (w->err: a read error, a file that shrank). */
long ts_walk_read(struct ts_walk *w, uint8_t *buf, size_t cap);
void ts_walk_close(struct ts_walk *w);

struct ts_dirmode {
	char *path;
	uint32_t mode;
	int64_t sec;
	uint32_t nsec;
};

struct ts_sink {
	int top;                /* the destination directory (not ours: not closed) */
	uint32_t mask;          /* modes are & mask */
	int file;               /* the file being written, or -1 */
	uint64_t size;
	uint32_t mode;
	int64_t sec;
	uint32_t nsec;
	int pfd;                /* the last parent opened, and its path */
	char ppath[TS_PATH_MAX + 1];
	struct ts_dirmode *dirs; /* modes and times set at the end (a 0555
				  * directory must still take its entries) */
	size_t ndirs, cap;
	size_t dir_bytes, max_dir_bytes; /* their paths' memory, bounded (a
					  * guest's 100000 paths of 4000 bytes) */
	uint64_t files, bytes;
};

void ts_sink_init(struct ts_sink *k, int top, uint32_t mask);
/* Apply one decoded item.  0, or -1 with why (the sink then takes no more;
 * what it made stays for the caller to remove). */
int ts_sink_item(struct ts_sink *k, const struct ts_item *it, char *why, size_t wsz);
/* Set the directories' modes and times (deepest first).  0 or -1 (why). */
int ts_sink_finish(struct ts_sink *k, char *why, size_t wsz);
void ts_sink_free(struct ts_sink *k);

/* A stream arriving in pieces (DATA frames) decoded into a sink: a record
 * head cut between pieces waits in buf. */
struct ts_feed {
	struct ts_dec dec;
	struct ts_sink sink;
	struct ts_item it;
	/* each 'n' record the sender made (may be NULL) */
	void (*note)(void *ctx, const char *path, const char *why);
	/* each item once the sink has applied it, in the stream's order (may
	 * be NULL): the host hashes a copied-out tree's files here, as their
	 * bytes arrive, with what this file cannot link (libc only) */
	void (*item)(void *ctx, const struct ts_item *it);
	void *ctx;
	int failed;
	size_t len;
	uint8_t buf[TS_HDR_MAX + 65536];
};

/* dec's limits are the caller's to set after this. */
void ts_feed_init(struct ts_feed *f, int top, uint32_t mask);
/* 0, or -1 with why (and every later call fails). */
int ts_feed(struct ts_feed *f, const uint8_t *p, size_t n, char *why, size_t wsz);
/* The stream ended: whole ('e' and nothing cut), then the directories'
 * modes.  0, or -1 with why. */
int ts_feed_end(struct ts_feed *f, char *why, size_t wsz);
void ts_feed_free(struct ts_feed *f);

#endif
