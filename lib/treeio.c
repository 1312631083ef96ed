/* treeio.c - a tree into a stream and a stream into a tree (treeio.h). */
#include "treeio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* the walk                                                            */

static void queue(struct ts_walk *w, size_t n)
{
	w->hlen = n;
	w->hoff = 0;
}

static void note(struct ts_walk *w, const char *why)
{
	queue(w, ts_put_entry(w->hdr, 'n', 0, 0, 0, w->path, 0, why));
	w->skipped++;
	if (w->note)
		w->note(w->ctx, w->path, why);
}

int ts_walk_open(struct ts_walk *w, int fd)
{
	struct stat sb;

	memset(w, 0, sizeof *w);
	w->file = -1;
	if (fstat(fd, &sb) < 0 || !S_ISDIR(sb.st_mode) || !(w->dir[0] = fdopendir(fd))) {
		snprintf(w->err, sizeof w->err, "not a directory: %s",
			 strerror(errno ? errno : ENOTDIR));
		close(fd);
		return -1;
	}
	w->fd[0] = fd;
	w->depth = 1;
	queue(w, ts_put_entry(w->hdr, 'd', sb.st_mode, sb.st_mtim.tv_sec,
			      (uint32_t)sb.st_mtim.tv_nsec, ".", 0, NULL));
	return 0;
}

void ts_walk_close(struct ts_walk *w)
{
	while (w->depth > 0)
		closedir(w->dir[--w->depth]); /* closes w->fd[] too */
	if (w->file >= 0)
		close(w->file);
	w->file = -1;
}

static long walk_fail(struct ts_walk *w, const char *what)
{
	snprintf(w->err, sizeof w->err, "%s %.400s: %s", what, w->path[0] ? w->path : ".",
		 strerror(errno));
	return -1;
}

/* The current file's next segment head, or its end.  Holes are found with
 * SEEK_DATA/SEEK_HOLE and never sent: the other side leaves them unwritten. */
static int next_seg(struct ts_walk *w)
{
	off_t data, hole;
	uint64_t len;

	data = w->pos < w->size ? lseek(w->file, (off_t)w->pos, SEEK_DATA) : -1;
	if (data < 0 && w->pos < w->size && errno != ENXIO)
		data = (off_t)w->pos; /* no SEEK_DATA here: all of it is data */
	if (data < 0 || (uint64_t)data >= w->size) {
		queue(w, ts_put_seg(w->hdr, 0, 0));
		close(w->file);
		w->file = -1;
		return 0;
	}
	hole = lseek(w->file, data, SEEK_HOLE);
	if (hole < 0 || (uint64_t)hole > w->size)
		hole = (off_t)w->size;
	/* A region hole-punched between the two seeks: hole <= data.  A
	 * segment of length 0 is the end of the file on the wire, so this
	 * is the end of its data (the rest stays a hole, the size is sent). */
	if (hole <= data) {
		queue(w, ts_put_seg(w->hdr, 0, 0));
		close(w->file);
		w->file = -1;
		return 0;
	}
	len = (uint64_t)(hole - data);
	if (len > TS_SEG_MAX)
		len = TS_SEG_MAX;
	w->seg_off = (uint64_t)data;
	w->seg_left = len;
	w->pos = (uint64_t)data + len;
	queue(w, ts_put_seg(w->hdr, (uint64_t)data, (uint32_t)len));
	return 0;
}

/* One entry of the directory at the top of the stack: its record head (or
 * a note), a directory pushed, a file opened.  0, or -1 (w->err). */
static int next_entry(struct ts_walk *w)
{
	int dfd = w->fd[w->depth - 1], fd;
	size_t base = w->plen[w->depth - 1], nl;
	struct dirent *de;
	struct stat sb;
	char target[TS_PATH_MAX + 2];
	ssize_t tl;

	errno = 0;
	if (!(de = readdir(w->dir[w->depth - 1]))) {
		if (errno) {
			w->path[base] = 0;
			return (int)walk_fail(w, "readdir");
		}
		closedir(w->dir[--w->depth]);
		return 0;
	}
	if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
		return 0;
	nl = strlen(de->d_name);
	if (base + !!base + nl > TS_PATH_MAX) {
		errno = ENAMETOOLONG;
		return (int)walk_fail(w, "below");
	}
	if (base)
		w->path[base++] = '/';
	memcpy(w->path + base, de->d_name, nl + 1);
	if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
		note(w, "vanished or unreadable: skipped");
		return 0;
	}
	if (S_ISDIR(sb.st_mode)) {
		if (w->depth == TS_DEPTH_MAX) {
			note(w, "a directory deeper than 64 levels: skipped");
			return 0;
		}
		fd = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || !(w->dir[w->depth] = fdopendir(fd))) {
			if (fd >= 0)
				close(fd);
			note(w, "a directory that could not be opened: skipped");
			return 0;
		}
		w->fd[w->depth] = fd;
		w->plen[w->depth++] = base + nl;
		queue(w, ts_put_entry(w->hdr, 'd', sb.st_mode, sb.st_mtim.tv_sec,
				      (uint32_t)sb.st_mtim.tv_nsec, w->path, 0, NULL));
	} else if (S_ISREG(sb.st_mode)) {
		if (sb.st_nlink > 1) {
			note(w, "a hard link (a file with more than one name): skipped");
			return 0;
		}
		/* O_NONBLOCK: a FIFO swapped in since the fstatat must not block. */
		fd = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			if (fd >= 0)
				close(fd);
			note(w, "a file that could not be opened: skipped");
			return 0;
		}
		/* Asked again of what was opened: the look above was of a name,
		 * which may have been given a second one (or swapped for a file
		 * that has one) since. */
		if (sb.st_nlink > 1) {
			close(fd);
			note(w, "a hard link (a file with more than one name): skipped");
			return 0;
		}
		/* The size at open bounds what is sent: a file still growing is cut. */
		w->file = fd;
		w->nth++;
		w->size = (uint64_t)sb.st_size;
		w->pos = 0;
		w->seg_left = 0;
		queue(w, ts_put_entry(w->hdr, 'f', sb.st_mode, sb.st_mtim.tv_sec,
				      (uint32_t)sb.st_mtim.tv_nsec, w->path, w->size, NULL));
	} else if (S_ISLNK(sb.st_mode)) {
		tl = readlinkat(dfd, de->d_name, target, sizeof target - 1);
		if (tl <= 0 || (size_t)tl > TS_PATH_MAX) {
			note(w, "a symlink that could not be read or is too long: skipped");
			return 0;
		}
		target[tl] = 0;
		queue(w, ts_put_entry(w->hdr, 'l', 0777, sb.st_mtim.tv_sec,
				      (uint32_t)sb.st_mtim.tv_nsec, w->path, 0, target));
	} else {
		note(w, "a device, FIFO or socket: skipped");
	}
	return 0;
}

long ts_walk_read(struct ts_walk *w, uint8_t *buf, size_t cap)
{
	for (;;) {
		if (w->hoff < w->hlen) {
			size_t k = w->hlen - w->hoff < cap ? w->hlen - w->hoff : cap;

			memcpy(buf, w->hdr + w->hoff, k);
			w->hoff += k;
			return (long)k;
		}
		if (w->file >= 0 && w->seg_left) {
			size_t want = w->seg_left < cap ? (size_t)w->seg_left : cap;
			ssize_t n = w->pread ? w->pread(w->ctx, w->nth, w->file, buf, want, w->seg_off, w->size)
					     : pread(w->file, buf, want, (off_t)w->seg_off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return walk_fail(w, "read");
			if (n == 0) {
				errno = ESPIPE;
				snprintf(w->err, sizeof w->err, "%.400s: the file shrank while it "
					 "was copied", w->path);
				return -1;
			}
			w->seg_off += (uint64_t)n;
			w->seg_left -= (uint64_t)n;
			return n;
		}
		if (w->file >= 0) {
			next_seg(w);
			continue;
		}
		if (w->ended)
			return 0;
		if (w->depth == 0) {
			w->hdr[0] = 'e';
			queue(w, 1);
			w->ended = 1;
			continue;
		}
		if (next_entry(w) < 0)
			return -1;
	}
}

/* ------------------------------------------------------------------ */
/* the sink                                                            */

void ts_sink_init(struct ts_sink *k, int top, uint32_t mask)
{
	memset(k, 0, sizeof *k);
	k->top = top;
	k->mask = mask;
	k->file = -1;
	k->pfd = -1;
	k->max_dir_bytes = TS_DIR_BYTES_MAX;
}

void ts_sink_free(struct ts_sink *k)
{
	if (k->file >= 0)
		close(k->file);
	if (k->pfd >= 0)
		close(k->pfd);
	k->file = k->pfd = -1;
	for (size_t i = 0; i < k->ndirs; i++)
		free(k->dirs[i].path);
	free(k->dirs);
	k->dirs = NULL;
	k->ndirs = k->cap = 0;
}

/* The directory at path below the top, one component at a time, never
 * through a symlink (O_NOFOLLOW|O_DIRECTORY: a symlink fails, ELOOP or
 * ENOTDIR).  A new descriptor, or -1. */
static int open_below(int top, const char *path)
{
	char comp[TS_NAME_MAX + 1];
	const char *p = path, *sl;
	int cur = top, nfd;

	if (!*path)
		return openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (;;) {
		size_t l;

		sl = strchr(p, '/');
		l = sl ? (size_t)(sl - p) : strlen(p);
		if (l == 0 || l > TS_NAME_MAX) {
			errno = EINVAL;
			nfd = -1;
		} else {
			memcpy(comp, p, l);
			comp[l] = 0;
			nfd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		}
		if (cur != top) {
			int e = errno;

			close(cur);
			errno = e;
		}
		if (nfd < 0 || !sl)
			return nfd;
		cur = nfd;
		p = sl + 1;
	}
}

static int sink_fail(char *why, size_t wsz, const char *what, const char *path)
{
	snprintf(why, wsz, "%s %.400s: %s", what, path, strerror(errno));
	return -1;
}

static int remember_dir(struct ts_sink *k, const char *path, const struct ts_item *it)
{
	size_t l = strlen(path) + 1 + sizeof *k->dirs;

	if (l > k->max_dir_bytes - k->dir_bytes) {
		errno = E2BIG; /* "Argument list too long": more directories than allowed */
		return -1;
	}
	k->dir_bytes += l;
	if (k->ndirs == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 64;
		struct ts_dirmode *d = realloc(k->dirs, cap * sizeof *d);

		if (!d)
			return -1;
		k->dirs = d;
		k->cap = cap;
	}
	if (!(k->dirs[k->ndirs].path = strdup(path)))
		return -1;
	k->dirs[k->ndirs].mode = it->mode & k->mask;
	k->dirs[k->ndirs].sec = it->mtime_sec;
	k->dirs[k->ndirs].nsec = it->mtime_nsec;
	k->ndirs++;
	return 0;
}

static int sink_entry(struct ts_sink *k, const struct ts_item *it, char *why, size_t wsz)
{
	const char *sl, *name;
	char parent[TS_PATH_MAX + 1];
	struct timespec ts[2];

	if (it->kind == 'n')
		return 0;
	if (!strcmp(it->path, ".")) {
		if (remember_dir(k, "", it) < 0)
			return sink_fail(why, wsz, "remember", ".");
		return 0;
	}
	sl = strrchr(it->path, '/');
	name = sl ? sl + 1 : it->path;
	snprintf(parent, sizeof parent, "%.*s", sl ? (int)(sl - it->path) : 0, it->path);
	if (k->pfd < 0 || strcmp(parent, k->ppath) != 0) {
		if (k->pfd >= 0)
			close(k->pfd);
		k->ppath[0] = 0;
		if ((k->pfd = open_below(k->top, parent)) < 0)
			return sink_fail(why, wsz, "open the directory of", it->path);
		memcpy(k->ppath, parent, strlen(parent) + 1);
	}
	ts[0].tv_sec = ts[1].tv_sec = (time_t)it->mtime_sec;
	ts[0].tv_nsec = ts[1].tv_nsec = (long)it->mtime_nsec;
	switch (it->kind) {
	case 'd':
		/* 0700 until ts_sink_finish: its entries are still to come. */
		if (mkdirat(k->pfd, name, 0700) < 0)
			return sink_fail(why, wsz, "mkdir", it->path);
		if (remember_dir(k, it->path, it) < 0)
			return sink_fail(why, wsz, "remember", it->path);
		return 0;
	case 'f':
		k->file = openat(k->pfd, name,
				 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
				 0600);
		if (k->file < 0)
			return sink_fail(why, wsz, "create", it->path);
		k->size = it->size;
		k->mode = it->mode & k->mask;
		k->sec = it->mtime_sec;
		k->nsec = it->mtime_nsec;
		return 0;
	case 'l':
		if (symlinkat(it->target, k->pfd, name) < 0)
			return sink_fail(why, wsz, "symlink", it->path);
		utimensat(k->pfd, name, ts, AT_SYMLINK_NOFOLLOW);
		return 0;
	default:
		snprintf(why, wsz, "%.400s: unknown kind", it->path);
		return -1;
	}
}

int ts_sink_item(struct ts_sink *k, const struct ts_item *it, char *why, size_t wsz)
{
	switch (it->type) {
	case TS_ENTRY:
		return sink_entry(k, it, why, wsz);
	case TS_DATA: {
		const uint8_t *p = it->data;
		size_t left = it->len;
		uint64_t off = it->off;

		while (left) {
			ssize_t n = pwrite(k->file, p, left, (off_t)off);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return sink_fail(why, wsz, "write", "a file");
			p += n;
			left -= (size_t)n;
			off += (uint64_t)n;
			k->bytes += (uint64_t)n;
		}
		return 0;
	}
	case TS_FILE_END: {
		struct timespec ts[2] = {{.tv_sec = (time_t)k->sec, .tv_nsec = (long)k->nsec},
					 {.tv_sec = (time_t)k->sec, .tv_nsec = (long)k->nsec}};
		int fd = k->file;

		k->file = -1;
		/* The size last: what lies past the last segment stays a hole. */
		if (ftruncate(fd, (off_t)k->size) < 0 || fchmod(fd, k->mode) < 0) {
			sink_fail(why, wsz, "size or mode of", "a file");
			close(fd);
			return -1;
		}
		futimens(fd, ts);
		k->files++;
		if (close(fd) < 0)
			return sink_fail(why, wsz, "close", "a file");
		return 0;
	}
	case TS_END:
		return 0;
	}
	snprintf(why, wsz, "unknown item");
	return -1;
}

int ts_sink_finish(struct ts_sink *k, char *why, size_t wsz)
{
	if (k->pfd >= 0)
		close(k->pfd);
	k->pfd = -1;
	/* Deepest first: a directory made 0555 or 0000 is not entered again. */
	for (size_t i = k->ndirs; i-- > 0;) {
		struct ts_dirmode *d = &k->dirs[i];
		struct timespec ts[2] = {{.tv_sec = (time_t)d->sec, .tv_nsec = (long)d->nsec},
					 {.tv_sec = (time_t)d->sec, .tv_nsec = (long)d->nsec}};
		int fd = open_below(k->top, d->path);

		if (fd < 0 || fchmod(fd, d->mode) < 0) {
			if (fd >= 0)
				close(fd);
			return sink_fail(why, wsz, "mode of", *d->path ? d->path : ".");
		}
		futimens(fd, ts);
		close(fd);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* the feed                                                            */

void ts_feed_init(struct ts_feed *f, int top, uint32_t mask)
{
	ts_dec_init(&f->dec);
	ts_sink_init(&f->sink, top, mask);
	f->note = NULL;
	f->item = NULL;
	f->ctx = NULL;
	f->failed = 0;
	f->len = 0;
}

void ts_feed_free(struct ts_feed *f)
{
	ts_sink_free(&f->sink);
}

int ts_feed(struct ts_feed *f, const uint8_t *p, size_t n, char *why, size_t wsz)
{
	if (f->failed) {
		snprintf(why, wsz, "the tree stream failed before");
		return -1;
	}
	while (n) {
		size_t k = sizeof f->buf - f->len < n ? sizeof f->buf - f->len : n, off = 0, used;
		int r;

		memcpy(f->buf + f->len, p, k);
		f->len += k;
		p += k;
		n -= k;
		while ((r = ts_next(&f->dec, f->buf + off, f->len - off, &f->it, &used)) == 1) {
			off += used;
			if (f->it.type == TS_ENTRY && f->it.kind == 'n' && f->note)
				f->note(f->ctx, f->it.path, f->it.target);
			if (ts_sink_item(&f->sink, &f->it, why, wsz) < 0) {
				f->failed = 1;
				return -1;
			}
			if (f->item)
				f->item(f->ctx, &f->it);
		}
		if (r < 0) {
			snprintf(why, wsz, "malformed tree stream: %s", f->dec.why);
			f->failed = 1;
			return -1;
		}
		/* what is left is less than a record head (TS_HDR_MAX) */
		memmove(f->buf, f->buf + off, f->len - off);
		f->len -= off;
	}
	return 0;
}

int ts_feed_end(struct ts_feed *f, char *why, size_t wsz)
{
	if (f->failed) {
		snprintf(why, wsz, "the tree stream failed before");
		return -1;
	}
	if (!ts_dec_done(&f->dec) || f->len) {
		snprintf(why, wsz, "the tree stream was cut short");
		return -1;
	}
	return ts_sink_finish(&f->sink, why, wsz);
}
