/* file.c - FILE_PUT (copy-in: a file created from stream-4 DATA under
 * the credit window) and FILE_GET (copy-out: a regular file into stream-4
 * DATA while the host keeps up); with TREE, a directory as a tree stream
 * (lib/treeio.h) both ways. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p of path's parents, 0755. */
static int mkdir_parents(const char *path, char *err, size_t errsz)
{
	char buf[PATH_MAX];
	size_t i;

	snprintf(buf, sizeof buf, "%s", path);
	for (i = 1; buf[i]; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
			snprintf(err, errsz, "mkdir %s: %s", buf, strerror(errno));
			return -1;
		}
		buf[i] = '/';
	}
	return 0;
}

void put_fail(struct agent *a)
{
	if (a->put.tree) {
		/* what was made of the tree stays: the ERROR says it is partial */
		ts_feed_free(&a->put.feed);
		close_fd(&a->put.fd);
		a->put.tree = 0;
	} else if (a->put.fd >= 0) {
		close_fd(&a->put.fd);
		unlink(a->put.path); /* no half-written file left behind */
	}
	a->put.failed = 1;
}

void on_file_put(struct agent *a, const struct frame *fr)
{
	char err[PATH_MAX + 100];
	uint32_t mode = 0644, tree;
	struct stat sb;
	int fd;

	/* Whatever happens, the host's DATA/EOF on stream 4 follow: drain them. */
	a->op = OP_PUT;
	a->put.fd = -1;
	a->put.failed = 1;
	a->put.tree = 0;
	a->put.bytes = 0;
	if (put_parse(fr, a->put.path, &mode, err, sizeof err) < 0) {
		send_error(a, "bad_request", "%s", err);
		return;
	}
	mode &= 07777;
	if (tree_parse(fr, &tree, err, sizeof err) < 0) {
		send_error(a, "bad_request", "FILE_PUT: %s", err);
		return;
	}
	if (root_make_rw(a, err, sizeof err) < 0) {
		send_error(a, "root_unavailable", "%s", err);
		return;
	}
	if (mkdir_parents(a->put.path, err, sizeof err) < 0) {
		send_error(a, "io", "%s", err);
		return;
	}
	if (tree) {
		/* A new directory, never one that is there: what the stream
		 * makes is all that is below it (mkdir does not follow a
		 * symlink at PATH, O_NOFOLLOW the open). */
		if (mkdir(a->put.path, 0700) < 0 ||
		    (fd = open(a->put.path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
			send_error(a, "io", "mkdir %s: %s", a->put.path, strerror(errno));
			return;
		}
		ts_feed_init(&a->put.feed, fd, 07777);
		a->put.fd = fd;
		a->put.tree = 1;
		a->put.failed = 0;
		a->credit_due[STREAM_FILE] += AGENT_WINDOW - FRAME_INITIAL_CREDIT;
		return;
	}
	/* O_NONBLOCK: a FIFO at that path must not hang PID 1. */
	fd = open(a->put.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
		  mode);
	if (fd < 0) {
		send_error(a, "io", "open %s: %s", a->put.path, strerror(errno));
		return;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		send_error(a, "io", "%s: not a regular file", a->put.path);
		return;
	}
	if (clear_nonblock(fd) < 0 || fchmod(fd, mode) < 0) {
		send_error(a, "io", "chmod %s: %s", a->put.path, strerror(errno));
		close(fd);
		return;
	}
	a->put.fd = fd;
	a->put.failed = 0;
	/* the rest of the window (agent.h): the file takes what comes at once */
	a->credit_due[STREAM_FILE] += AGENT_WINDOW - FRAME_INITIAL_CREDIT;
}

/* p[0..left) into the file (or the tree); a failure is reported once. */
static void put_write(struct agent *a, const uint8_t *p, size_t left)
{
	ssize_t n;

	if (a->put.tree && !a->put.failed) {
		char err[600];

		if (ts_feed(&a->put.feed, p, left, err, sizeof err) < 0) {
			send_error(a, "io", "%s: %s", a->put.path, err);
			put_fail(a);
		}
		a->put.bytes += left;
		return;
	}
	while (!a->put.failed && left) {
		n = write(a->put.fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			send_error(a, "io", "write %s: %s", a->put.path,
				   n < 0 ? strerror(errno) : "wrote nothing");
			put_fail(a);
			return;
		}
		p += n;
		left -= (size_t)n;
		a->put.bytes += (uint64_t)n;
	}
}

void on_file_data(struct agent *a, const struct frame *fr)
{
	if (a->op != OP_PUT)
		return;
	a->credit_due[STREAM_FILE] += fr->len;
	put_write(a, fr->payload, fr->len);
}

/* p[0..len) (aligned) into a plain file: its whole sectors with O_DIRECT
 * when the file's offset is a whole sector, so they go from the buffer to
 * the disk by QEMU's DMA instead of through the page cache (under TCG the
 * guest's copy into the page cache was most of a copy-in's time: doc/SPEED.md
 * "Goal 4, the bulk lane"); the rest, or all of it where O_DIRECT is
 * refused, buffered.  A slot is 1 MiB, so only a file's last piece is
 * ever not whole sectors. */
static void put_write_direct(struct agent *a, const uint8_t *p, size_t len)
{
	size_t whole = len / BULK_SECTOR * BULK_SECTOR;

	if (!a->put.tree && whole && a->put.bytes % BULK_SECTOR == 0 && set_direct(a->put.fd, 1) == 0) {
		size_t off = 0;

		while (off < whole) {
			ssize_t n = write(a->put.fd, p + off, whole - off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break; /* the buffered write below reports or finishes it */
			off += (size_t)n; /* written, whole sectors or not */
			if ((size_t)n % BULK_SECTOR)
				break; /* the file's offset is no longer a sector's */
		}
		set_direct(a->put.fd, 0);
		a->put.bytes += off;
		p += off;
		len -= off;
	}
	put_write(a, p, len);
}

/* A bulk slot's bytes: into the idle stdin ring (aligned for O_DIRECT),
 * the slot back to the host, then into the file as DATA would go. */
void on_file_bulk(struct agent *a, uint32_t slot, uint32_t len)
{
	if (a->op != OP_PUT || a->put.failed) {
		bulk_done(a, STREAM_FILE, slot);
		return;
	}
	if (bulk_read(a, slot, len, a->stdin_ring) < 0) {
		bulk_done(a, STREAM_FILE, slot);
		send_error(a, "io", "%s: the bulk lane could not be read", a->put.path);
		put_fail(a);
		return;
	}
	bulk_done(a, STREAM_FILE, slot);
	put_write_direct(a, a->stdin_ring, len);
}

void on_file_eof(struct agent *a)
{
	uint8_t buf[32];
	struct tlv_w w;

	if (a->op != OP_PUT)
		return;
	a->op = OP_NONE;
	/* No CREDIT after this FILE_PUT's end (FILE_DONE or its ERROR): the
	 * host's stream is over, and a grant sent now (768 KiB for the window,
	 * even for an empty file) would count for the next copy-in. */
	a->credit_due[STREAM_FILE] = 0;
	if (a->put.failed)
		return;
	if (a->put.tree) {
		char err[600];
		int r = ts_feed_end(&a->put.feed, err, sizeof err);
		uint64_t bytes = a->put.feed.sink.bytes;

		put_fail(a);
		if (r < 0) {
			send_error(a, "io", "%s: %s", a->put.path, err);
			return;
		}
		tlv_init(&w, buf, sizeof buf);
		tlv_put_u64(&w, T_BYTES, bytes);
		tlv_put_u32(&w, T_TREE, 1);
		out_tlv(a, F_FILE_DONE, STREAM_CTL, &w);
		return;
	}
	/* The bytes are on the disk (O_DIRECT) or in the page cache: a read
	 * of a file written past the cache pays for it then, not here (a
	 * readback here would hold PID 1 for the whole file). */
	if (close(a->put.fd) < 0) {
		a->put.fd = -1;
		send_error(a, "io", "close %s: %s", a->put.path, strerror(errno));
		unlink(a->put.path);
		return;
	}
	a->put.fd = -1;
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u64(&w, T_BYTES, a->put.bytes);
	out_tlv(a, F_FILE_DONE, STREAM_CTL, &w);
}

/* The page size: mmap's and mincore's unit, and an O_DIRECT alignment
 * that suits any disk (virtio-blk's sectors are 512). */
#define COLD_ALIGN 4096u

/* Whether the page cache holds all of fd's [off, off + len) (off
 * aligned; the file is size long).  mincore of a mapping that is never
 * touched looks the pages up without reading any (a buffered read with
 * RWF_NOWAIT would start readahead of what is missing, the page-cache fill
 * this avoids).  The file is mapped once: a mapping per chunk cost ~10 %
 * of a cached file's copy-out under TCG. */
static int in_cache(struct cold_read *c, int fd, uint64_t off, size_t len, uint64_t size)
{
	unsigned char vec[AGENT_WINDOW / COLD_ALIGN];
	size_t i;

	if (!c->map && !c->nomap) {
		void *m = size && size <= SIZE_MAX - COLD_ALIGN ?
			mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;

		if (m == MAP_FAILED) {
			c->nomap = 1;
		} else {
			c->map = m;
			c->maplen = (size_t)size;
		}
	}
	if (!c->map || off >= c->maplen)
		return 0;
	if (len > c->maplen - off)
		len = c->maplen - (size_t)off;
	if (len > sizeof vec * COLD_ALIGN)
		return 0; /* more than vec covers: not known cached (cold_fill asks no more) */
	if (mincore(c->map + off, len, vec) < 0)
		return 0;
	for (i = 0; i < (len + COLD_ALIGN - 1) / COLD_ALIGN; i++)
		if (!(vec[i] & 1))
			return 0;
	return 1;
}

/* The copy-out's file is done with (or another's bytes come next). */
void cold_release(struct agent *a)
{
	if (a->get.cold.map)
		munmap(a->get.cold.map, a->get.cold.maplen);
	a->get.cold = (struct cold_read){ .key = 0 };
}

/* The ring's bytes start this far in: room for a frame's header before
 * any byte, so a DATA frame can be written from the ring in place. */
#define COLD_HEAD COLD_ALIGN

/* Makes the ring hold fd's byte at off when the page cache does not (the
 * file is key's (cold_read) and size long): the chunk around off, up to
 * the ring's size, aligned, read with O_DIRECT.  1 when the ring holds
 * it; 0 when off is to be read buffered (the page cache holds its chunk,
 * O_DIRECT is refused here, or the read failed: the buffered read then
 * reports it, for the rest of the chunk).  Blocks PID 1 for one chunk's
 * read, as a buffered read of a cold chunk did. */
static int cold_fill(struct agent *a, uint64_t key, int fd, uint64_t off, uint64_t size)
{
	struct cold_read *c = &a->get.cold;
	uint64_t start, end;
	ssize_t got = -1;

	if (c->key != key) {
		cold_release(a);
		c->key = key;
	}
	if (off >= c->rpos && off < c->rpos + c->rlen)
		return 1;
	if (c->nodirect || off >= size || (off < c->cached_end && !c->stuck))
		return 0;
	start = off / COLD_ALIGN * COLD_ALIGN;
	end = (size + COLD_ALIGN - 1) / COLD_ALIGN * COLD_ALIGN;
	/* in_cache's vec covers a ring's chunk */
	_Static_assert(sizeof a->stdin_ring - COLD_HEAD <= AGENT_WINDOW, "chunk beyond in_cache's vec");
	if (end - start > sizeof a->stdin_ring - COLD_HEAD)
		end = start + sizeof a->stdin_ring - COLD_HEAD;
	c->rlen = 0;
	if (c->stuck)
		goto read; /* O_DIRECT cannot be cleared: every read through the ring */
	if (in_cache(c, fd, start, (size_t)(end - start), size)) {
		c->cached_end = end;
		return 0;
	}
	if (set_direct(fd, 1) < 0) {
		c->nodirect = 1; /* tmpfs, ...: buffered, as before */
		return 0;
	}
read:
	got = pread_full(fd, a->stdin_ring + COLD_HEAD, (size_t)(end - start), (off_t)start);
	if (got < 0 && errno == EINVAL)
		c->nodirect = 1;
	if (!c->stuck && set_direct(fd, 0) < 0) {
		/* A buffered pread at an unaligned offset would fail with
		 * EINVAL: this file's chunks all come through the ring, and a
		 * read that fails there fails the copy-out (the buffered
		 * read reports it) rather than being retried. */
		logm("%s: O_DIRECT not cleared: %s", a->get.path, strerror(errno));
		c->stuck = 1;
	}
	if (got <= 0 || (uint64_t)got <= off - start) {
		/* The rest of this chunk is read buffered, not retried with
		 * O_DIRECT at each frame (a bad sector cost ~64 blocking
		 * reads of the chunk); the buffered read reports an error
		 * or finds where a file shorter than at open ends. */
		c->cached_end = end;
		return 0;
	}
	c->rpos = start;
	c->rlen = (uint64_t)got;
	return 1;
}

/* The ring's bytes from off (cold_fill said it holds them), at most n. */
static uint8_t *cold_at(struct agent *a, uint64_t off, size_t *n)
{
	struct cold_read *c = &a->get.cold;

	if (*n > c->rpos + c->rlen - off)
		*n = (size_t)(c->rpos + c->rlen - off);
	return a->stdin_ring + COLD_HEAD + (off - c->rpos);
}

/* Up to n bytes of the file fd at off into buf, as pread; a chunk the page
 * cache does not hold comes through the ring (cold_fill). */
static ssize_t get_pread(struct agent *a, uint64_t key, int fd, uint8_t *buf, size_t n,
			 uint64_t off, uint64_t size)
{
	if (cold_fill(a, key, fd, off, size)) {
		const uint8_t *p = cold_at(a, off, &n); /* n cut to what the ring holds */

		memcpy(buf, p, n);
		return (ssize_t)n;
	}
	return pread(fd, buf, n, (off_t)off);
}

static ssize_t tree_pread(void *ctx, uint64_t nth, int fd, uint8_t *buf, size_t n, uint64_t off,
			  uint64_t size)
{
	return get_pread(ctx, nth, fd, buf, n, off, size);
}

void on_file_get(struct agent *a, const struct frame *fr)
{
	char err[1024];
	struct stat sb;
	uint64_t max;
	uint32_t tree;
	int fd;

	cold_release(a);
	if (get_parse(fr, a->get.path, &max, err, sizeof err) < 0 ||
	    tree_parse(fr, &tree, err, sizeof err) < 0) {
		send_error(a, "bad_request", "%s", err);
		return;
	}
	if (!a->root.ok) {
		send_error(a, "root_unavailable", "%s", a->root.err);
		return;
	}
	fd = open(a->get.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			send_error(a, "not_found", "%s: %s", a->get.path, strerror(errno));
		else
			send_error(a, "io", "open %s: %s", a->get.path, strerror(errno));
		return;
	}
	if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode) && !tree) {
		/* the host asks again with TREE: a directory is a tree stream */
		close(fd);
		send_error(a, "is_dir", "%s: a directory", a->get.path);
		return;
	}
	if (tree) {
		if (ts_walk_open(&a->get.walk, fd) < 0) { /* fd taken */
			send_error(a, "io", "%s: %s", a->get.path, a->get.walk.err);
			return;
		}
		/* the files' bytes as a single file's are read (get_pread) */
		a->get.walk.pread = tree_pread;
		a->get.walk.ctx = a;
		a->get.tree = 1;
		a->get.fd = -1;
		a->get.bytes = 0;
		a->get.max = max;
		a->op = OP_GET;
		return;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		send_error(a, "io", "%s: not a regular file", a->get.path);
		return;
	}
	if ((uint64_t)sb.st_size > max) {
		close(fd);
		send_error(a, "too_large", "%s: %lld bytes, more than the %llu the host takes", a->get.path,
			   (long long)sb.st_size, (unsigned long long)max);
		return;
	}
	clear_nonblock(fd);
	a->get.tree = 0;
	a->get.fd = fd;
	a->get.bytes = 0;
	/* The size at open bounds what is sent: a file that a survivor of the
	 * command keeps growing (or a sparse one extended) cannot stretch the
	 * copy-out past what the host was told it could take. */
	a->get.size = (uint64_t)sb.st_size;
	a->get.mode = sb.st_mode & 07777;
	a->op = OP_GET;
}

/* A directory's tree stream into DATA frames while the host keeps up. */
static void tree_pump(struct agent *a)
{
	uint8_t buf[OUT_DATA_CHUNK], tl[32];
	struct tlv_w w;
	long n;

	while (a->op == OP_GET && out_pending(a) <= OUT_HIGH) {
		n = ts_walk_read(&a->get.walk, buf, sizeof buf);
		if (n > 0 && (uint64_t)n <= a->get.max - a->get.bytes) {
			out_frame(a, F_DATA, STREAM_FILE, buf, (size_t)n);
			a->get.bytes += (uint64_t)n;
			continue;
		}
		a->op = OP_NONE;
		ts_walk_close(&a->get.walk);
		cold_release(a);
		a->get.tree = 0;
		if (n > 0) {
			send_error(a, "too_large", "%s: more than the %llu bytes the host takes",
				   a->get.path, (unsigned long long)a->get.max);
			return;
		}
		if (n < 0) {
			send_error(a, "io", "%s: %s", a->get.path, a->get.walk.err);
			return;
		}
		out_frame(a, F_EOF, STREAM_FILE, NULL, 0);
		tlv_init(&w, tl, sizeof tl);
		tlv_put_u64(&w, T_BYTES, a->get.bytes);
		tlv_put_u32(&w, T_TREE, 1);
		out_tlv(a, F_FILE_DONE, STREAM_CTL, &w);
	}
}

/* File content into DATA frames while the host keeps up. */
void get_pump(struct agent *a)
{
	uint8_t buf[32];
	struct tlv_w w;
	ssize_t n;
	/* Frames written in place (below) leave nothing pending, so
	 * out_pending alone would not end the loop: a whole file would go
	 * out in one call, PID 1 not back to poll (no reaping, no PING, no
	 * timers).  This bounds a call's in-place bytes as OUT_HIGH bounds
	 * the queued ones; loop_once polls with timeout 0 and comes back. */
	size_t budget = OUT_HIGH;

	if (a->get.tree) {
		tree_pump(a);
		return;
	}
	while (a->op == OP_GET && out_pending(a) <= OUT_HIGH && budget) {
		uint64_t left = a->get.size - a->get.bytes;
		uint8_t *dst;

		if (left && !out_pending(a) && cold_fill(a, 1, a->get.fd, a->get.bytes, a->get.size)) {
			/* The frame written from the ring, its header over
			 * bytes already sent: no copy into the output buffer
			 * (under TCG every copy inside the guest is emulated). */
			size_t k = left < OUT_DATA_CHUNK ? (size_t)left : OUT_DATA_CHUNK;
			uint8_t *p = cold_at(a, a->get.bytes, &k) - FRAME_HDR;

			frame_hdr(p, F_DATA, STREAM_FILE, (uint32_t)k);
			if (out_frame_now(a, p, FRAME_HDR + k) < 0)
				return; /* out of memory: as below, tried again later */
			a->get.bytes += k;
			budget -= k < budget ? k : budget;
			continue;
		}
		dst = out_data_reserve(a);
		if (!dst)
			return; /* out of memory: as out_read_data's -2, tried again later */
		n = left ? get_pread(a, 1, a->get.fd, dst, left < OUT_DATA_CHUNK ? (size_t)left : OUT_DATA_CHUNK,
				     a->get.bytes, a->get.size) : 0;
		if (n > 0) {
			out_data_commit(a, STREAM_FILE, (size_t)n);
			a->get.bytes += (uint64_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		close_fd(&a->get.fd);
		cold_release(a);
		a->op = OP_NONE;
		if (n < 0) {
			/* after some DATA: the host takes ERROR as the answer */
			send_error(a, "io", "read %s: %s", a->get.path, strerror(errno));
			return;
		}
		out_frame(a, F_EOF, STREAM_FILE, NULL, 0);
		tlv_init(&w, buf, sizeof buf);
		tlv_put_u64(&w, T_BYTES, a->get.bytes);
		tlv_put_u32(&w, T_MODE, a->get.mode);
		out_tlv(a, F_FILE_DONE, STREAM_CTL, &w);
	}
}
