/* tree.c - tree_bytes and tree_remove (tree.h): a walk by descriptor.
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

/* Something is left: the first of this walk is what tree_remove reports
 * (name below where we are; NULL: where we are).  ENOENT is nothing left. */
static void left(struct tw *t, int e, const char *name, const char *what)
{
	if (t->err || e == ENOENT)
		return;
	t->err = e;
	snprintf(t->why, sizeof t->why, "%.3800s%s%.255s: %.100s", t->rl || name ? t->rel : ".",
		 t->rl && name ? "/" : "", name ? name : "", what ? what : strerror(e));
	/* the names are the jail's: no line or escape of theirs on stderr */
	for (char *c = t->why; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
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
static int walk_top_other(struct tw *t, const char *path, int e)
{
	struct stat st;

	if (e == ENOENT)
		return 0;
	if (e == ELOOP || e == ENOTDIR) {
		if (lstat(path, &st) < 0)
			return errno == ENOENT ? 0 : -1;
		if (t->rm && unlink(path) < 0)
			return errno == ENOENT ? 0 : -1;
		add(t, &st);
		return 0;
	}
	if ((e == EACCES || e == EPERM) && t->rm && rmdir(path) == 0)
		return 0;
	errno = e;
	return -1;
}

/* Measure or remove the tree at path (tree.h).  0, or -1 with errno and
 * t->why. */
static int tree_walk(struct tw *t, const char *path)
{
	struct stat st;
	int pass, dfd;

	t->bytes = 0;
	t->why[0] = t->rel[0] = '\0';
	if ((t->top = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return walk_top_other(t, path, errno);
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
	if (rmdir(path) == 0 || errno == ENOENT) {
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

long long tree_bytes(const char *path)
{
	struct tw t = { .rm = 0 };

	tree_walk(&t, path);
	return t.bytes;
}

int tree_remove(const char *path, long long *bytes, char *why, size_t whysz)
{
	struct tw t = { .rm = 1 };
	int r = tree_walk(&t, path), e = errno;

	if (bytes)
		*bytes += t.bytes;
	if (why && whysz)
		snprintf(why, whysz, "%s", r < 0 && t.why[0] ? t.why : r < 0 ? strerror(e) : "");
	errno = e;
	return r;
}
