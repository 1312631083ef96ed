/* treestream_test.c - the tree stream (lib/treestream.c) and its walk and
 * sink (lib/treeio.c): a tree walked and sunk comes back with its modes
 * (setuid, setgid and sticky bits masked off), symlinks as symlinks, empty
 * directories, holes left holes, devices and hard links skipped as notes;
 * and every hostile stream a guest could send is refused with nothing
 * written outside the destination: "..", absolute paths, empty and "."
 * components, a NUL, a name over 255 bytes, a path over TS_PATH_MAX, a
 * first record that is not the top, an unknown kind (a device), a write
 * through a symlink the stream made, a name sent twice (a file replaced by
 * a symlink, a symlink then a file), segments overlapping, backwards or
 * past the size, more entries or bytes than allowed, bytes after the end,
 * a stream cut short.  Streams are fed whole and a byte at a time. */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* A file given a second name between the walk's look at it and its open
 * (a hard link made to it from elsewhere): armed (race_name set), the
 * first openat() of race_name links it to race_link, then opens. */
static const char *race_name, *race_link;

static int race_openat(int dfd, const char *name, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	va_start(ap, flags);
	if (flags & (O_CREAT | O_TMPFILE))
		mode = va_arg(ap, mode_t);
	va_end(ap);
	if (race_name && !strcmp(name, race_name)) {
		race_name = NULL;
		if (linkat(dfd, name, AT_FDCWD, race_link, 0) < 0)
			return -1;
	}
	return openat(dfd, name, flags, mode);
}

#define openat(...) race_openat(__VA_ARGS__)
#include "../../lib/treestream.c"
#include "../../lib/treeio.c"
#undef openat

#include "tap.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static char tmp[64];

struct sbuf {
	uint8_t *p;
	size_t len, cap;
};

static void add(struct sbuf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 4096;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void ent(struct sbuf *b, char kind, uint32_t mode, const char *path, uint64_t size,
		const char *target)
{
	uint8_t h[TS_HDR_MAX];

	add(b, h, ts_put_entry(h, kind, mode, 1000000000, 0, path, size, target));
}

static void seg(struct sbuf *b, uint64_t off, const char *data, uint32_t len)
{
	uint8_t h[12];

	add(b, h, ts_put_seg(h, off, len));
	add(b, data, len);
}

static void top(struct sbuf *b)
{
	b->len = 0;
	ent(b, 'd', 0755, ".", 0, NULL);
}

static void end(struct sbuf *b)
{
	add(b, "e", 1);
}

static int nnotes;
static void on_note(void *ctx, const char *path, const char *why)
{
	(void)ctx;
	(void)path;
	(void)why;
	nnotes++;
}

/* Feed b into a fresh directory dst (step bytes at a time; 0: whole).
 * 0 when the stream was taken whole, else -1 with why. */
static int sink(const struct sbuf *b, const char *dst, size_t step, uint32_t max_entries,
		uint64_t max_bytes, char *why, size_t wsz)
{
	struct ts_feed *f = malloc(sizeof *f);
	int top_fd, r = 0;

	mkdir(dst, 0700);
	top_fd = open(dst, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ts_feed_init(f, top_fd, 0777);
	f->note = on_note;
	if (max_entries)
		f->dec.max_entries = max_entries;
	if (max_bytes)
		f->dec.max_bytes = max_bytes;
	for (size_t off = 0; r == 0 && off < b->len; off += step ? step : b->len)
		r = ts_feed(f, b->p + off, step && b->len - off > step ? step : b->len - off, why,
			    wsz);
	if (r == 0)
		r = ts_feed_end(f, why, wsz);
	ts_feed_free(f);
	free(f);
	close(top_fd);
	return r;
}

static int exists(const char *p)
{
	struct stat sb;

	return lstat(p, &sb) == 0;
}

/* A hostile stream: refused (whole and byte by byte), and nothing at
 * tmp/outside. */
static void hostile(const struct sbuf *b, const char *what, uint32_t max_entries,
		    uint64_t max_bytes)
{
	char dst[300], cmd[400], why[600] = "", why1[600] = "", out[300];
	int r, r1;

	snprintf(dst, sizeof dst, "%s/h", tmp);
	snprintf(out, sizeof out, "%s/outside", tmp);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dst);
	r = sink(b, dst, 0, max_entries, max_bytes, why, sizeof why);
	system(cmd);
	r1 = sink(b, dst, 1, max_entries, max_bytes, why1, sizeof why1);
	system(cmd);
	ok(r < 0 && r1 < 0 && !exists(out), "refused: %s (%s)", what, why);
	unlink(out);
	rmdir(out);
}

static void roundtrip(void)
{
	char src[120], dst[120], p[400], why[600] = "";
	struct ts_walk *w = malloc(sizeof *w);
	struct sbuf b = {0};
	struct stat sb;
	uint8_t chunk[777];
	long n;
	int fd;

	snprintf(src, sizeof src, "%s/src", tmp);
	snprintf(dst, sizeof dst, "%s/dst", tmp);
	mkdir(src, 0750);
	snprintf(p, sizeof p, "%s/empty", src);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/ro", src);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/ro/f", src);
	close(open(p, O_WRONLY | O_CREAT, 0640));
	snprintf(p, sizeof p, "%s/ro", src);
	chmod(p, 0555);
	snprintf(p, sizeof p, "%s/suid", src);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	write(fd, "#!/bin/sh\n", 10);
	fchmod(fd, 04755);
	close(fd);
	snprintf(p, sizeof p, "%s/sparse", src);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	pwrite(fd, "head", 4, 0);
	pwrite(fd, "tail", 4, 64 << 20);
	close(fd);
	snprintf(p, sizeof p, "%s/link", src);
	symlink("../../etc/passwd", p);
	snprintf(p, sizeof p, "%s/fifo", src);
	mkfifo(p, 0600);
	snprintf(p, sizeof p, "%s/hard1", src);
	close(open(p, O_WRONLY | O_CREAT, 0600));
	snprintf(why, sizeof why, "%s/hard2", src);
	link(p, why);

	fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok(ts_walk_open(w, fd) == 0, "walk opens a directory");
	while ((n = ts_walk_read(w, chunk, sizeof chunk)) > 0)
		add(&b, chunk, (size_t)n);
	ok(n == 0, "the walk ends cleanly (%s)", w->err);
	ok(w->skipped == 3, "a FIFO and two hard links are notes (%u)", w->skipped);
	ts_walk_close(w);
	nnotes = 0;
	ok(sink(&b, dst, 0, 0, 0, why, sizeof why) == 0, "the stream sinks whole (%s)", why);
	ok(nnotes == 3, "the sink sees the 3 notes");
	ok(stat(dst, &sb) == 0 && (sb.st_mode & 07777) == 0750, "the top's mode (%o)",
	   sb.st_mode & 07777);
	snprintf(p, sizeof p, "%s/empty", dst);
	ok(stat(p, &sb) == 0 && S_ISDIR(sb.st_mode), "an empty directory");
	snprintf(p, sizeof p, "%s/ro", dst);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0555, "a 0555 directory, with its file");
	snprintf(p, sizeof p, "%s/ro/f", dst);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0640 && sb.st_mtime > 0, "0640 kept");
	snprintf(p, sizeof p, "%s/suid", dst);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0755, "setuid masked off (%o)",
	   sb.st_mode & 07777);
	snprintf(p, sizeof p, "%s/link", dst);
	n = readlink(p, why, sizeof why - 1);
	ok(n == 16 && !memcmp(why, "../../etc/passwd", 16), "the symlink is a symlink");
	snprintf(p, sizeof p, "%s/sparse", dst);
	ok(stat(p, &sb) == 0 && sb.st_size == (64 << 20) + 4 && sb.st_blocks < 256,
	   "the sparse file keeps its size and its holes (%lld blocks)",
	   (long long)sb.st_blocks);
	fd = open(p, O_RDONLY);
	memset(chunk, 0, 8);
	pread(fd, chunk, 4, 64 << 20);
	pread(fd, chunk + 4, 4, 0);
	close(fd);
	ok(!memcmp(chunk, "tailhead", 8), "and its data");
	snprintf(p, sizeof p, "%s/fifo", dst);
	ok(!exists(p), "no FIFO made");
	snprintf(p, sizeof p, "%s/hard1", dst);
	ok(!exists(p), "no hard link copied");
	/* the same stream a byte at a time */
	snprintf(p, sizeof p, "chmod -R u+w %s; rm -rf %s", dst, dst);
	system(p);
	ok(sink(&b, dst, 1, 0, 0, why, sizeof why) == 0, "the stream sinks a byte at a time");
	snprintf(p, sizeof p, "%s/sparse", dst);
	ok(stat(p, &sb) == 0 && sb.st_size == (64 << 20) + 4, "the sparse file again");
	b.len -= 1;
	snprintf(p, sizeof p, "chmod -R u+w %s; rm -rf %s", dst, dst);
	system(p);
	ok(sink(&b, dst, 0, 0, 0, why, sizeof why) < 0, "a stream without its end is refused");
	system(p);
	snprintf(p, sizeof p, "%s/ro", src);
	chmod(p, 0755);
	free(b.p);
	free(w);
}

/* A file with one name when the walk looks at it, two when it opens it:
 * skipped as a hard link all the same, nothing of it sent. */
static void linked_meanwhile(void)
{
	char src[120], p[200], other[120], why[600] = "";
	struct ts_walk *w = malloc(sizeof *w);
	struct sbuf b = {0};
	uint8_t chunk[777];
	long n;
	int fd;

	snprintf(src, sizeof src, "%s/src2", tmp);
	snprintf(other, sizeof other, "%s/other-name", tmp);
	mkdir(src, 0700);
	snprintf(p, sizeof p, "%s/racy", src);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	write(fd, "secret", 6);
	close(fd);
	race_name = "racy";
	race_link = other;
	fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ok(ts_walk_open(w, fd) == 0, "linked meanwhile: the walk opens");
	while ((n = ts_walk_read(w, chunk, sizeof chunk)) > 0)
		add(&b, chunk, (size_t)n);
	ts_walk_close(w);
	snprintf(p, sizeof p, "%s/dst2", tmp);
	nnotes = 0;
	ok(n == 0 && !race_name && w->skipped == 1,
	   "linked meanwhile: a file given a second name after the look and before the open "
	   "is a note (%u skipped)", w->skipped);
	ok(sink(&b, p, 0, 0, 0, why, sizeof why) == 0 && nnotes == 1,
	   "linked meanwhile: the stream sinks, the note in it (%s)", why);
	snprintf(p, sizeof p, "%s/dst2/racy", tmp);
	ok(!exists(p), "linked meanwhile: nothing of it sent");
	free(b.p);
	free(w);
}

int main(void)
{
	struct sbuf b = {0};
	char out[300], longp[TS_PATH_MAX + 10], why[600];
	struct stat sb;

	snprintf(tmp, sizeof tmp, "/tmp/treestream-test.XXXXXX");
	if (!mkdtemp(tmp))
		return 1;
	snprintf(out, sizeof out, "%s/outside", tmp);
	roundtrip();
	linked_meanwhile();

	top(&b), ent(&b, 'f', 0644, "..", 0, NULL), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a path \"..\"", 0, 0);
	top(&b), ent(&b, 'd', 0755, "../outside", 0, NULL), end(&b);
	hostile(&b, "a path ../outside", 0, 0);
	top(&b), ent(&b, 'd', 0755, "a", 0, NULL), ent(&b, 'd', 0755, "a/../../outside", 0, NULL), end(&b);
	hostile(&b, "a/../../outside", 0, 0);
	top(&b), ent(&b, 'd', 0755, out, 0, NULL), end(&b);
	hostile(&b, "an absolute path", 0, 0);
	top(&b), ent(&b, 'd', 0755, "a//b", 0, NULL), end(&b);
	hostile(&b, "an empty component", 0, 0);
	top(&b), ent(&b, 'd', 0755, "a/", 0, NULL), end(&b);
	hostile(&b, "a trailing /", 0, 0);
	top(&b), ent(&b, 'd', 0755, "./a", 0, NULL), end(&b);
	hostile(&b, "a \".\" component", 0, 0);
	top(&b), ent(&b, 'd', 0755, "", 0, NULL), end(&b);
	hostile(&b, "an empty path", 0, 0);
	top(&b), ent(&b, 'd', 0755, "a", 0, NULL);
	b.p[b.len - 1] = 0;
	end(&b);
	hostile(&b, "a NUL in a path", 0, 0);
	memset(longp, 'a', 256);
	longp[256] = 0;
	top(&b), ent(&b, 'd', 0755, longp, 0, NULL), end(&b);
	hostile(&b, "a name of 256 bytes", 0, 0);
	for (int i = 0; i < (int)TS_PATH_MAX + 2; i++)
		longp[i] = i % 2 ? '/' : 'a';
	longp[TS_PATH_MAX + 1] = 0;
	top(&b), ent(&b, 'd', 0755, "a", 0, NULL);
	{
		uint8_t h[TS_HDR_MAX + 16];
		size_t l = strlen(longp);

		h[0] = 'd';
		memset(h + 1, 0, 16);
		h[17] = (uint8_t)l;
		h[18] = (uint8_t)(l >> 8);
		memcpy(h + 19, longp, l);
		add(&b, h, 19 + l);
	}
	end(&b);
	hostile(&b, "a path over TS_PATH_MAX", 0, 0);
	/* a/a/a/...: each parent sent, one level past TS_DEPTH_MAX (the
	 * sink reopens every component of a parent: 2000 levels were
	 * seconds of host CPU an entry) */
	top(&b);
	for (int i = 0; i < TS_DEPTH_MAX + 1; i++) {
		longp[2 * i] = 'a';
		longp[2 * i + 1] = 0;
		ent(&b, 'd', 0755, longp, 0, NULL);
		longp[2 * i + 1] = '/';
	}
	end(&b);
	hostile(&b, "a path deeper than TS_DEPTH_MAX", 0, 0);
	b.len -= 1 + 19 + 2 * TS_DEPTH_MAX + 1; /* the deepest record and the end */
	end(&b);
	snprintf(longp, sizeof longp, "%s/deep", tmp);
	ok(sink(&b, longp, 0, 0, 0, why, sizeof why) == 0, "a path of TS_DEPTH_MAX components (%s)",
	   why);
	b.len = 0, ent(&b, 'd', 0755, "a", 0, NULL), end(&b);
	hostile(&b, "a first record that is not the top", 0, 0);
	top(&b), ent(&b, 'f', 0644, "x", 0, NULL), seg(&b, 0, "", 0);
	b.p[b.len - 12 - 28] = (uint8_t)'b'; /* the kind of the 28-byte head: a block device */ /* the kind: a block device */
	end(&b);
	hostile(&b, "a device (unknown kind)", 0, 0);

	/* symlinks: never written through, never replaced */
	top(&b), ent(&b, 'l', 0777, "l", 0, tmp), ent(&b, 'f', 0644, "l/outside", 4, NULL);
	seg(&b, 0, "evil", 4), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a file written through a symlink the stream made", 0, 0);
	top(&b), ent(&b, 'l', 0777, "l", 0, tmp), ent(&b, 'd', 0755, "l/outside", 0, NULL), end(&b);
	hostile(&b, "a directory made through a symlink the stream made", 0, 0);
	top(&b), ent(&b, 'l', 0777, "l", 0, out), ent(&b, 'f', 0644, "l", 4, NULL);
	seg(&b, 0, "evil", 4), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a file sent over a symlink of the same name", 0, 0);
	top(&b), ent(&b, 'd', 0755, "d", 0, NULL), ent(&b, 'l', 0777, "d", 0, tmp);
	ent(&b, 'f', 0644, "d/outside", 0, NULL), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a directory replaced by a symlink (a name sent twice)", 0, 0);
	top(&b), ent(&b, 'f', 0644, "f", 0, NULL), seg(&b, 0, "", 0);
	ent(&b, 'f', 0644, "f", 0, NULL), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a file sent twice", 0, 0);

	/* data: bounded, in order, within the size */
	top(&b), ent(&b, 'f', 0644, "f", 8, NULL), seg(&b, 4, "abcd", 4), seg(&b, 2, "ab", 2);
	seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a segment before the last one's end", 0, 0);
	top(&b), ent(&b, 'f', 0644, "f", 8, NULL), seg(&b, 6, "abcd", 4), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a segment past the size", 0, 0);
	top(&b), ent(&b, 'f', 0644, "f", 1ull << 41, NULL), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "a file over 1 TiB", 0, 0);
	top(&b), ent(&b, 'f', 0644, "f", 40, NULL), seg(&b, 0, "0123456789", 10);
	seg(&b, 20, "0123456789", 10), seg(&b, 0, "", 0), end(&b);
	hostile(&b, "more bytes than allowed", 0, 15);
	/* sparse: 50 files of a declared TiB and no data, a 2 KB stream */
	top(&b);
	for (int i = 0; i < 50; i++) {
		char nm[16];

		snprintf(nm, sizeof nm, "f%d", i);
		ent(&b, 'f', 0644, nm, TS_FILE_SIZE_MAX, NULL), seg(&b, 0, "", 0);
	}
	end(&b);
	hostile(&b, "files whose sizes (all holes) are more than allowed", 0, 1ull << 30);
	top(&b);
	for (int i = 0; i < 5; i++) {
		char nm[16];

		snprintf(nm, sizeof nm, "d%d", i);
		ent(&b, 'd', 0755, nm, 0, NULL);
	}
	end(&b);
	hostile(&b, "more entries than allowed", 3, 0);
	{
		char dd[120];
		struct ts_feed *f = malloc(sizeof *f);
		int tfd, r;

		snprintf(dd, sizeof dd, "%s/dirmem", tmp);
		mkdir(dd, 0700);
		tfd = open(dd, O_RDONLY | O_DIRECTORY);
		ts_feed_init(f, tfd, 0777);
		f->sink.max_dir_bytes = 3 * (sizeof(struct ts_dirmode) + 4);
		r = ts_feed(f, b.p, b.len, why, sizeof why);
		ok(r < 0 && strstr(why, "remember"), "more directory paths than the sink keeps (%s)",
		   why);
		ts_feed_free(f);
		free(f);
		close(tfd);
	}
	add(&b, "x", 1);
	hostile(&b, "bytes after the end", 0, 0);

	/* the decoder alone (the sink and the feed refuse these too) */
	{
		struct ts_dec d;
		struct ts_item *it = malloc(sizeof *it);
		size_t used, off = 0;
		int r = 1;

		top(&b), end(&b), add(&b, "x", 1);
		ts_dec_init(&d);
		while (r == 1 && off < b.len)
			if ((r = ts_next(&d, b.p + off, b.len - off, it, &used)) == 1)
				off += used;
		ok(r < 0, "ts_next: a byte after the end is malformed");
		top(&b), ent(&b, 'f', 0644, "x", 0, NULL);
		b.p[b.len - 28] = 'c'; /* a character device */
		ts_dec_init(&d);
		off = 0;
		r = 1;
		while (r == 1 && off < b.len)
			if ((r = ts_next(&d, b.p + off, b.len - off, it, &used)) == 1)
				off += used;
		ok(r < 0, "ts_next: a record of an unknown kind is malformed");
		top(&b), ent(&b, 'l', 0777, "l", 0, "t");
		b.p[b.len - 2] = 0xff, b.p[b.len - 1] = 0x0f; /* a target of 4095 bytes */
		ts_dec_init(&d);
		off = 0;
		r = 1;
		while (r == 1 && off < b.len)
			if ((r = ts_next(&d, b.p + off, b.len - off, it, &used)) == 1)
				off += used;
		ok(r < 0, "ts_next: a symlink target over TS_PATH_MAX is malformed at once");
		free(it);
	}

	/* and the same streams within their limits are taken */
	top(&b), ent(&b, 'f', 06755, "f", 40, NULL), seg(&b, 0, "0123456789", 10);
	seg(&b, 20, "0123456789", 10), seg(&b, 0, "", 0), ent(&b, 'd', 01777, "d", 0, NULL);
	end(&b);
	snprintf(longp, sizeof longp, "%s/ok", tmp);
	ok(sink(&b, longp, 1, 3, 40, why, sizeof why) == 0, "a stream within its limits (%s)", why);
	snprintf(longp, sizeof longp, "%s/ok/f", tmp);
	ok(stat(longp, &sb) == 0 && (sb.st_mode & 07777) == 0755 && sb.st_size == 40,
	   "setuid and setgid masked off a file (%o)", sb.st_mode & 07777);
	snprintf(longp, sizeof longp, "%s/ok/d", tmp);
	ok(stat(longp, &sb) == 0 && (sb.st_mode & 07777) == 0777, "sticky masked off a directory");

	free(b.p);
	snprintf(longp, sizeof longp, "chmod -R u+w %s; rm -rf %s", tmp, tmp);
	system(longp);
	return tap_done();
}
