/* treestream.h - a directory tree as a byte stream: what --copy-in and
 * --copy-out of a directory carry as stream-4 DATA (doc/PROTOCOL.md, "Tree
 * stream").  libc only: the static agent links it as the host tools do, so
 * the one decoder of the guest's bytes is the one fuzzed (fuzz/tree_fuzz.c).
 *
 * Records, little endian:
 *   u8 kind | u32 mode | u64 mtime_sec | u32 mtime_nsec | u16 plen | path
 *   kind 'd' (a directory), 'f' (a regular file): + u64 size, then
 *            segments  u64 offset | u32 len | data[len]  ending with len 0
 *            (what lies between segments is a hole: never written),
 *   kind 'l' (a symlink): + u16 tlen | target,
 *   kind 'n' (an entry the sender skipped: a device, a hard link): + u16
 *            mlen | why,
 *   kind 'e': the end; nothing may follow.
 * The first record is the top: kind 'd', path ".".  Every other path is
 * relative, its parents sent before it, of at most TS_DEPTH_MAX
 * components: no empty, "." or ".." component, no leading or trailing '/',
 * no NUL.
 *
 * The decoder (ts_next) is the parser of a hostile guest's bytes on the
 * host: it bounds the path, the entries, the data; the sink (treeio.h)
 * decides where things land. */
#ifndef ISOPOD_TREESTREAM_H
#define ISOPOD_TREESTREAM_H

#include <stddef.h>
#include <stdint.h>

#define TS_PATH_MAX 4000u        /* a path below the top, a symlink target */
#define TS_NAME_MAX 255u
/* Components of a path below the top: the walk opens at most this many
 * directories (treeio.h) and the sink reopens a path's parents one
 * component at a time, so a deeper path (a/a/a/... of 2000 levels: seconds
 * of host CPU an entry) is refused. */
#define TS_DEPTH_MAX 64
#define TS_FILE_SIZE_MAX (1ull << 40) /* a file's apparent size (holes count) */
#define TS_SEG_MAX (1u << 20)    /* one segment's data */
#define TS_ENTRIES_DEFAULT 100000u
/* The longest record head: kind..path, then size or a target. */
#define TS_HDR_MAX (1 + 4 + 8 + 4 + 2 + TS_PATH_MAX + 2 + TS_PATH_MAX)

enum ts_type { TS_ENTRY = 1, TS_DATA, TS_FILE_END, TS_END };

struct ts_item {
	enum ts_type type;
	/* TS_ENTRY */
	char kind;               /* 'd' 'f' 'l' 'n' */
	uint32_t mode;           /* & 07777: never a file type */
	int64_t mtime_sec;
	uint32_t mtime_nsec;
	uint64_t size;           /* 'f' */
	char path[TS_PATH_MAX + 1];
	char target[TS_PATH_MAX + 1]; /* 'l': the target; 'n': why */
	/* TS_DATA: a piece of the current file's data at off */
	uint64_t off;
	const uint8_t *data;
	size_t len;
};

struct ts_dec {
	/* limits, set by the caller after ts_dec_init (defaults there) */
	uint64_t max_bytes;      /* data of all files together, and their
				  * sizes (holes count: 50 files of a
				  * declared TiB, no data, are 50 TiB on
				  * the host to whoever reads them) */
	uint32_t max_entries;
	/* state */
	int st;                  /* what comes next */
	uint32_t entries;
	uint64_t bytes, sizes;   /* data taken; files' declared sizes */
	uint64_t size, next;     /* the current file: its size, where data may next begin */
	uint64_t seg_off, seg_left;
	char why[200];
};

void ts_dec_init(struct ts_dec *d);
/* One item from buf[0..n): 1 (*it, *used bytes taken), 0 more bytes needed
 * (*used 0; a record head needs at most TS_HDR_MAX: a buffer that holds
 * that much always progresses), -1 malformed or over a limit (d->why).
 * A TS_DATA item points into buf and may be part of a segment. */
int ts_next(struct ts_dec *d, const uint8_t *buf, size_t n, struct ts_item *it, size_t *used);
/* Whether the stream ended where it may (after 'e'). */
int ts_dec_done(const struct ts_dec *d);

/* The record heads, into buf (TS_HDR_MAX suffices): their length, or 0 when
 * path or target is too long. */
size_t ts_put_entry(uint8_t *buf, char kind, uint32_t mode, int64_t sec, uint32_t nsec,
		    const char *path, uint64_t size, const char *target);
size_t ts_put_seg(uint8_t *buf, uint64_t off, uint32_t len);
/* Whether a path (below the top) is one the decoder takes. */
int ts_path_ok(const char *p, size_t len);

#endif
