/* tree.c - tree_bytes, tree_remove and tree_visit (tree.h): walks by descriptor.
 *
 * Not fts or nftw: they open each directory again by its whole path, so a
 * subdirectory swapped for a symbolic link while they walk (by a jailed
 * process that outlived its VM's lock, in a tree once handed to its jail)
 * is followed, and gc, root, deletes outside the store.  Here every step is
 * relative to a directory's descriptor, and a directory is entered only by
 * openat(O_NOFOLLOW | O_DIRECTORY): a name swapped for a link is removed as
 * the link it now is, and a directory on another mount is left, reported.
 *
 * A tree a jail wrote can be as deep as it likes, and a descriptor a level
 * runs out (a first version stopped at 128 levels, ELOOP: such a tree could
 * never be removed).  So at most TREE_FDS directories of one walk are open
 * at once: removing, a subdirectory at that depth is moved up into the top
 * directory (renameat2 RENAME_NOREPLACE, a fresh name) and the top is
 * walked again, until it is empty or a walk removes nothing more; bounded
 * in walks and entries, so a jail still writing cannot keep gc at it for
 * ever.  Measuring moves nothing: the directories at that depth are kept
 * open (TREE_QUEUE of them at most) and walked after.
 */
#include "tree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TREE_FDS 16                 /* directories open at once, one walk */
#define TREE_QUEUE 64               /* measuring: directories kept for later */
#define TREE_PASSES 4096            /* walks of the top, removing */
#define TREE_ENTRIES (1L << 24)     /* entries looked at, all walks together */

struct tw {
	int rm;                /* remove, or only measure */
	int top;               /* the top directory: moved subtrees land in it */
	dev_t dev;             /* its filesystem ... */
	unsigned long long mnt; /* ... and mount (statx; 0: unknown) */
	long long bytes;
	long entries;
	int progress;          /* this walk removed or moved something */
	int stop;              /* TREE_ENTRIES met */
	int err;               /* the first thing left (this walk), its errno */
	char why[PATH_MAX + 96];
	char rel[PATH_MAX];    /* where we are, below the top: for why */
	size_t rl;
	unsigned long seq;     /* the moved subtrees' names */
	int queue[TREE_QUEUE];
	int nq;
	/* Tests only (t/unit/tree_test.c): called before a subdirectory is
	 * opened, where a jail could swap it; no mount id, as on a kernel
	 * before 5.8 (st_dev alone). */
	int no_mnt_id;
	void (*before_open)(void *arg, int dfd, const char *name);
	void *arg;
};

/* The names are the jail's: no line or escape of theirs on stderr. */
static void unctrl(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

/* Something is left: the first of this walk is what tree_remove reports
 * (name below where we are; NULL: where we are).  ENOENT is nothing left. */
static void left(struct tw *t, int e, const char *name, const char *what)
{
	if (t->err || e == ENOENT)
		return;
	t->err = e;
	snprintf(t->why, sizeof t->why, "%.3800s%s%.255s: %.100s", t->rl || name ? t->rel : ".",
		 t->rl && name ? "/" : "", name ? name : "", what ? what : strerror(e));
	unctrl(t->why);
}

/* The bytes st's file takes, added to t->bytes (saturated).  A file of
 * several links is shared: measuring counts its share; removing, only the
 * last link frees anything (a jail could link a big file of ours many
 * times, inflating what gc says it reclaimed). */
static void add(struct tw *t, const struct stat *st)
{
	long long b = (long long)st->st_blocks * 512;

	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1)
		b = t->rm ? 0 : b / (long long)st->st_nlink;
	t->bytes = b > LLONG_MAX - t->bytes ? LLONG_MAX : t->bytes + b;
}

static unsigned long long mnt_id(int fd)
{
	struct statx sx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &sx) < 0 || !(sx.stx_mask & STATX_MNT_ID))
		return 0;
	return sx.stx_mnt_id;
}

/* The directory open at fd is on the top's mount: the same st_dev (else
 * another filesystem) and, where the kernel tells, the same mount id (a
 * bind mount of the same filesystem has its st_dev).  Its stat in *st. */
static int same_mount(const struct tw *t, int fd, struct stat *st)
{
	if (fstat(fd, st) < 0 || !S_ISDIR(st->st_mode) || st->st_dev != t->dev)
		return 0;
	return !t->mnt || mnt_id(fd) == t->mnt;
}

/* A name that is not (or no longer) a directory: removed as what it is. */
static void drop(struct tw *t, int dfd, const char *n, const struct stat *st)
{
	if (!t->rm) {
		add(t, st);
		return;
	}
	if (unlinkat(dfd, n, 0) == 0) {
		add(t, st);
		t->progress = 1;
	} else if (errno == EISDIR) {
		t->progress = 1; /* a directory again: the next walk */
	} else {
		left(t, errno, n, NULL);
	}
}

/* Removing, a directory at the depth bound: into the top under a fresh
 * name, walked from there next time.  RENAME_NOREPLACE: a name the jail
 * made meanwhile is not replaced; a filesystem without it gets a plain
 * rename, which could only replace an empty directory of the top's, itself
 * on its way out. */
static void move_up(struct tw *t, int dfd, const char *n)
{
	char to[64];
	int i, r = -1;

	for (i = 0; i < 8; i++) {
		snprintf(to, sizeof to, ".isopod-deep.%ld.%lu", (long)getpid(), t->seq++);
		r = renameat2(dfd, n, t->top, to, RENAME_NOREPLACE);
		if (r < 0 && errno == EINVAL)
			r = renameat(dfd, n, t->top, to);
		if (r == 0 || errno != EEXIST)
			break;
	}
	if (r == 0)
		t->progress = 1;
	else
		left(t, errno, n, "too deep, and could not be moved up: left");
}

static void walk_dir(struct tw *t, int dfd, int depth);

/* Measuring, a directory at the depth bound: kept open, walked after. */
static void keep_for_later(struct tw *t, int sub, const char *n)
{
	if (t->nq < TREE_QUEUE) {
		t->queue[t->nq++] = sub;
		return;
	}
	close(sub);
	left(t, ELOOP, n, "too deep, too many: not counted");
}

/* The subdirectory n of dfd (n's lstat in *lst), at depth (directories
 * open, dfd's included): entered only as a directory of the top's mount. */
static void walk_sub(struct tw *t, int dfd, const char *n, const struct stat *lst, int depth)
{
	size_t rl = t->rl;
	struct stat st;
	int sub, e;

	if (t->rm && depth >= TREE_FDS) {
		move_up(t, dfd, n);
		return;
	}
	if (t->before_open)
		t->before_open(t->arg, dfd, n);
	if ((sub = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		e = errno;
		if (e == ELOOP || e == ENOTDIR) { /* swapped for a link or a file */
			drop(t, dfd, n, lst);
		} else if (e == EACCES || e == EPERM) { /* unreadable: gone if empty */
			if (t->rm && unlinkat(dfd, n, AT_REMOVEDIR) == 0) {
				add(t, lst);
				t->progress = 1;
			} else if (t->rm && errno == ENOTDIR) {
				t->progress = 1; /* swapped for a link: the next walk */
			} else if (t->rm) {
				char what[100];

				snprintf(what, sizeof what, "unreadable, %s: left",
					 errno == ENOTEMPTY || errno == EEXIST ? "not empty"
									       : strerror(errno));
				left(t, e, n, what);
			} else {
				left(t, e, n, NULL);
			}
		} else {
			left(t, e, n, NULL);
		}
		return;
	}
	if (!same_mount(t, sub, &st)) {
		close(sub);
		left(t, EXDEV, n, "a mount point: left, not entered");
		return;
	}
	if (!t->rm) {
		add(t, &st);
		if (depth >= TREE_FDS) {
			keep_for_later(t, sub, n);
			return;
		}
	}
	snprintf(t->rel + t->rl, sizeof t->rel - t->rl, "%s%s", t->rl ? "/" : "", n);
	t->rl += strlen(t->rel + t->rl);
	walk_dir(t, sub, depth + 1);
	t->rel[t->rl = rl] = '\0';
	if (!t->rm)
		return;
	/* by name below dfd: an empty directory, or (swapped) nothing */
	if (unlinkat(dfd, n, AT_REMOVEDIR) == 0) {
		add(t, &st);
		t->progress = 1;
	} else if (errno == ENOTDIR) {
		t->progress = 1; /* swapped for a link meanwhile: the next walk */
	} else {
		left(t, errno, n, NULL);
	}
}

/* The entries of the directory dfd (closed here), depth first. */
static void walk_dir(struct tw *t, int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		left(t, errno, NULL, NULL);
		close(dfd);
		return;
	}
	while ((errno = 0, de = readdir(d))) {
		const char *n = de->d_name;
		struct stat st;

		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		if (++t->entries > TREE_ENTRIES) {
			t->stop = 1;
			t->err = 0; /* this, rather than what it cut short */
			left(t, ELOOP, n, "more entries than a walk looks at: left");
		}
		if (t->stop)
			break;
		if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) < 0)
			left(t, errno, n, NULL);
		else if (S_ISDIR(st.st_mode))
			walk_sub(t, dirfd(d), n, &st, depth);
		else
			drop(t, dirfd(d), n, &st);
	}
	if (errno && !t->stop)
		left(t, errno, NULL, NULL);
	closedir(d);
}

/* The top at path is not a directory we can open: a link (never followed:
 * unlinked), a file, or unreadable. */
static int walk_top_other(struct tw *t, int at, const char *path, int e)
{
	struct stat st;

	if (e == ENOENT)
		return 0;
	if (e == ELOOP || e == ENOTDIR) {
		if (fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
			return errno == ENOENT ? 0 : -1;
		if (t->rm && unlinkat(at, path, 0) < 0)
			return errno == ENOENT ? 0 : -1;
		add(t, &st);
		return 0;
	}
	if ((e == EACCES || e == EPERM) && t->rm && unlinkat(at, path, AT_REMOVEDIR) == 0)
		return 0;
	errno = e;
	return -1;
}

/* Measure or remove the tree at path, relative to the directory at (or
 * AT_FDCWD) (tree.h).  0, or -1 with errno and t->why. */
static int tree_walk(struct tw *t, int at, const char *path)
{
	struct stat st;
	int pass, dfd;

	t->bytes = 0;
	t->why[0] = t->rel[0] = '\0';
	if ((t->top = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return walk_top_other(t, at, path, errno);
	if (fstat(t->top, &st) < 0) {
		int e = errno;

		close(t->top);
		errno = e;
		return -1;
	}
	t->dev = st.st_dev;
	t->mnt = t->no_mnt_id ? 0 : mnt_id(t->top);
	for (pass = 0; pass < (t->rm ? TREE_PASSES : 1) && !t->stop; pass++) {
		t->progress = t->err = 0;
		/* its own open file: a walk reads the top from its start */
		if ((dfd = openat(t->top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
			left(t, errno, NULL, NULL);
			break;
		}
		walk_dir(t, dfd, 1);
		while (t->nq > 0) /* measuring: the deep ones, from where they are */
			walk_dir(t, t->queue[--t->nq], 1);
		if (!t->progress)
			break;
	}
	close(t->top);
	if (!t->rm) {
		add(t, &st);
		return 0;
	}
	if (unlinkat(at, path, AT_REMOVEDIR) == 0 || errno == ENOENT) {
		add(t, &st);
		return 0;
	}
	if (!t->err) {
		if (pass == TREE_PASSES)
			left(t, ENOTEMPTY, NULL, "still not empty after the walks: left");
		else
			left(t, errno, NULL, NULL);
	}
	errno = t->err;
	return -1;
}

long long tree_bytes_at(int at, const char *path)
{
	struct tw t = { .rm = 0 };

	tree_walk(&t, at, path);
	return t.bytes;
}

long long tree_bytes(const char *path)
{
	return tree_bytes_at(AT_FDCWD, path);
}

int tree_remove_at(int at, const char *path, long long *bytes, char *why, size_t whysz)
{
	struct tw t = { .rm = 1 };
	int r = tree_walk(&t, at, path), e = errno;

	if (bytes)
		*bytes += t.bytes;
	if (why && whysz)
		snprintf(why, whysz, "%s", r < 0 && t.why[0] ? t.why : r < 0 ? strerror(e) : "");
	errno = e;
	return r;
}

int tree_remove(const char *path, long long *bytes, char *why, size_t whysz)
{
	return tree_remove_at(AT_FDCWD, path, bytes, why, whysz);
}

/* tree_visit: a read-only walk that hands every entry to a callback with
 * its parent's descriptor.  The same rules as the walk above (openat
 * O_NOFOLLOW | O_DIRECTORY, the top's mount only, TREE_FDS directories
 * open, TREE_ENTRIES entries), but nothing is renamed: a directory at the
 * depth bound is queued by its path below the top, not by a descriptor,
 * so no queue of descriptors can fill up and drop it; it is reached again
 * from the top one name at a time, each step O_NOFOLLOW and on the top's
 * mount, and visited only if it is still the directory (st_dev, st_ino)
 * that was queued.  A jail renaming directories meanwhile can only move
 * the visit elsewhere inside the top, never outside it. */
#define TREE_PENDING (64L << 20) /* visiting: bytes of queued paths */

struct pend {
	char *rel;
	int lvl; /* its entries' depth below the top, less one */
	dev_t dev;
	ino_t ino;
};

struct tv {
	struct tw w;           /* top, dev, mnt, entries, stop, err, why; hooks */
	tree_visit_fn fn;
	void *arg;
	char *rel;             /* where we are below the top, any length */
	size_t rl, rcap;
	int base;              /* the depth of the directory a walk started at */
	struct pend *pend;
	size_t np, pcap, pbytes;
};

/* The first thing left, named by where we are (v->rel). */
static void vleft(struct tv *v, int e, const char *what)
{
	if (v->w.err || e == ENOENT)
		return;
	v->w.err = e;
	snprintf(v->w.why, sizeof v->w.why, "%.3800s: %.100s", v->rl ? v->rel : ".",
		 what ? what : strerror(e));
	unctrl(v->w.why);
}

static int rel_set(struct tv *v, size_t at, const char *sep, const char *n)
{
	size_t need = at + strlen(sep) + strlen(n) + 1;

	if (need > v->rcap) {
		char *r = realloc(v->rel, need + 256);

		if (!r)
			return -1;
		v->rel = r;
		v->rcap = need + 256;
	}
	snprintf(v->rel + at, v->rcap - at, "%s%s", sep, n);
	v->rl = need - 1;
	return 0;
}

/* Queue the directory at v->rel (its lstat st, its entries at lvl). */
static void pend_push(struct tv *v, const struct stat *st, int lvl)
{
	struct pend p = { .lvl = lvl, .dev = st->st_dev, .ino = st->st_ino };

	if (v->pbytes + v->rl + 1 > TREE_PENDING) {
		vleft(v, ELOOP, "too deep, too many: not visited");
		return;
	}
	if (v->np == v->pcap) {
		size_t n = v->pcap ? v->pcap * 2 : 64;
		struct pend *q = realloc(v->pend, n * sizeof *q);

		if (!q) {
			vleft(v, errno, NULL);
			return;
		}
		v->pend = q;
		v->pcap = n;
	}
	if (!(p.rel = strdup(v->rel))) {
		vleft(v, errno, NULL);
		return;
	}
	v->pbytes += v->rl + 1;
	v->pend[v->np++] = p;
}

/* Open the directory n of dfd (its lstat lst) as a directory of the top's
 * mount that is still the one looked at: its descriptor, or -1 (left). */
static int sub_open(struct tv *v, int dfd, const char *n, dev_t dev, ino_t ino)
{
	struct stat st;
	int sub;

	if (v->w.before_open)
		v->w.before_open(v->w.arg, dfd, n);
	if ((sub = openat(dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		int e = errno;

		vleft(v, e, e == ELOOP || e == ENOTDIR ? "no longer a directory: not entered" : NULL);
		return -1;
	}
	if (!same_mount(&v->w, sub, &st)) {
		close(sub);
		vleft(v, EXDEV, "a mount point: not entered");
		return -1;
	}
	if (st.st_dev != dev || st.st_ino != ino) {
		close(sub);
		vleft(v, ESTALE, "changed since it was looked at: not entered");
		return -1;
	}
	return sub;
}

/* A queued directory, reached from the top name by name (p->rel). */
static int pend_open(struct tv *v, const struct pend *p)
{
	char name[NAME_MAX + 1];
	const char *s = p->rel, *e;
	int fd = v->w.top, next;
	struct stat st;

	if (rel_set(v, 0, "", p->rel) < 0)
		return -1;
	while (*s) {
		size_t n;

		/* each step down again counts: a chain deep past the fds
		 * would otherwise cost its depth squared, unbounded */
		if (++v->w.entries > TREE_ENTRIES) {
			v->w.stop = 1;
			v->w.err = 0;
			vleft(v, ELOOP, "more entries than a visit looks at: the rest not visited");
			if (fd != v->w.top)
				close(fd);
			return -1;
		}
		e = strchr(s, '/');
		n = e ? (size_t)(e - s) : strlen(s);
		if (n > NAME_MAX) {
			next = -1, vleft(v, ENAMETOOLONG, NULL);
		} else {
			memcpy(name, s, n);
			name[n] = '\0';
			v->rel[v->rl = (size_t)(s - p->rel) + n] = '\0'; /* what vleft names */
			if (fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
				next = -1, vleft(v, errno, NULL);
			else
				next = sub_open(v, fd, name, e ? st.st_dev : p->dev, e ? st.st_ino : p->ino);
		}
		if (fd != v->w.top)
			close(fd);
		if ((fd = next) < 0)
			return -1;
		if (e)
			v->rel[v->rl = (size_t)(e - p->rel)] = '/';
		s = e ? e + 1 : s + n;
	}
	v->rl = strlen(v->rel);
	return fd == v->w.top ? -1 : fd;
}

static void visit_dir(struct tv *v, int dfd, int depth);

/* One entry n of dfd: to the callback, then into it (a directory the
 * callback did not refuse). */
static void visit_one(struct tv *v, int dfd, const char *n, int depth)
{
	size_t rl = v->rl;
	struct stat st;
	int r, sub;

	if (rel_set(v, rl, rl ? "/" : "", n) < 0) {
		vleft(v, errno, NULL);
		v->w.stop = 1;
		return;
	}
	if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		vleft(v, errno, NULL);
	} else {
		r = v->fn(&(struct tree_ent){ .dfd = dfd, .name = n, .path = v->rel,
					       .depth = v->base + depth, .st = &st }, v->arg);
		if (r < 0)
			v->w.stop = 1;
		else if (r == 0 && S_ISDIR(st.st_mode) && depth >= TREE_FDS)
			pend_push(v, &st, v->base + depth);
		else if (r == 0 && S_ISDIR(st.st_mode) &&
			 (sub = sub_open(v, dfd, n, st.st_dev, st.st_ino)) >= 0)
			visit_dir(v, sub, depth + 1);
	}
	v->rel[v->rl = rl] = '\0';
}

/* The entries of the directory dfd (closed here). */
static void visit_dir(struct tv *v, int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;

	if (!d) {
		vleft(v, errno, NULL);
		close(dfd);
		return;
	}
	while (!v->w.stop && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (++v->w.entries > TREE_ENTRIES) {
			v->w.stop = 1;
			v->w.err = 0; /* this, rather than what it cut short */
			vleft(v, ELOOP, "more entries than a visit looks at: the rest not visited");
			break;
		}
		visit_one(v, dirfd(d), de->d_name, depth);
	}
	if (errno && !v->w.stop)
		vleft(v, errno, NULL);
	closedir(d);
}

/* tree_visit with v's hooks (t/unit/tree_test.c sets them). */
static int visit_run(struct tv *v, int at, const char *path)
{
	struct stat st;
	int fd;

	v->w.why[0] = '\0';
	if ((v->w.top = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
	    fstat(v->w.top, &st) < 0 || (fd = openat(v->w.top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		int e = errno;

		if (v->w.top >= 0)
			close(v->w.top);
		snprintf(v->w.why, sizeof v->w.why, "%s", strerror(e));
		errno = e;
		return -1;
	}
	v->w.dev = st.st_dev;
	v->w.mnt = v->w.no_mnt_id ? 0 : mnt_id(v->w.top);
	visit_dir(v, fd, 1);
	while (v->np > 0) {
		struct pend p = v->pend[--v->np];

		v->pbytes -= strlen(p.rel) + 1;
		v->base = p.lvl;
		if (!v->w.stop && (fd = pend_open(v, &p)) >= 0)
			visit_dir(v, fd, 1);
		free(p.rel);
	}
	free(v->pend);
	free(v->rel);
	close(v->w.top);
	if (v->w.err) {
		errno = v->w.err;
		return -1;
	}
	return 0;
}

int tree_visit(int at, const char *path, tree_visit_fn fn, void *arg, char *why, size_t whysz)
{
	struct tv v = { .w = { .rm = 0 }, .fn = fn, .arg = arg };
	int r = visit_run(&v, at, path), e = errno;

	if (why && whysz)
		snprintf(why, whysz, "%s", r < 0 ? v.w.why : "");
	errno = e;
	return r;
}
