/* tree_test.c - tree_bytes and tree_remove (lib/tree.c), the walk gc uses
 * on trees a jail's uid could still write: links are never followed (one
 * planted, by the walk's test hook, where a subdirectory was a moment
 * before; one at the top), a tree deeper than the walk's descriptors is
 * still removed whole and counted, a mount point inside is neither entered
 * nor counted (a bind mount of the same filesystem, a tmpfs; in a mount
 * namespace of a child's), and an unreadable directory goes when empty and
 * is named when not (as uid 65534 when we are root).  tree_visit: every
 * entry handed over once with its parent's fd; a directory swapped for a
 * link, or for another directory, between its fstatat and its openat is
 * not entered (also one queued at the depth bound, when it is reached
 * again); any depth with at most FDS_MAX descriptors, 100 directories at
 * the bound none dropped; neither mount entered; a directory the callback
 * refuses is not entered. */
#include "../../lib/tree.c"
#include "../../lib/util.h"

#include "tap.h"

#include <grp.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define DEEP 300
#define BIG 65536
#define FDS_MAX 24 /* a walk's descriptors, not one a level (TREE_FDS 16) */

static void put(const char *path, size_t n)
{
	char blk[4096];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	memset(blk, 'b', sizeof blk);
	while (fd >= 0 && n > 0) {
		size_t k = n < sizeof blk ? n : sizeof blk;

		if (write(fd, blk, k) != (ssize_t)k)
			break;
		n -= k;
	}
	if (fd >= 0)
		close(fd);
}

static int exists(const char *path)
{
	struct stat st;

	return lstat(path, &st) == 0;
}

/* A directory outside the trees, with a file of BIG bytes: what a walk
 * that follows a link would count, and remove.  One a check, so that a
 * check that fails leaves the next one's alone. */
static void outside(const char *home, const char *name, char *out, size_t osz, char *keep,
		    size_t ksz)
{
	snprintf(out, osz, "%s/outside-%s", home, name);
	mkdir(out, 0755);
	snprintf(keep, ksz, "%s/keep", out);
	put(keep, BIG);
}

/* The walk with a hook, as tree_bytes (rm 0) and tree_remove (rm 1) run it. */
static int walk(const char *path, int rm, long long *bytes,
		void (*hook)(void *, int, const char *), void *arg)
{
	struct tw t = { .rm = rm, .before_open = hook, .arg = arg };
	int r = tree_walk(&t, AT_FDCWD, path);

	*bytes = t.bytes;
	return r;
}

/* A tree with a file, a subdirectory and links out of it. */
static void test_plain(const char *home, const char *out, const char *keep)
{
	char t[PATH_MAX], p[PATH_MAX], why[256];
	long long bytes, b = 7;

	snprintf(t, sizeof t, "%s/plain/sub/deeper", home);
	ok(mkdir_p(t, 0700, p, sizeof p) == 0, "plain: a tree");
	snprintf(p, sizeof p, "%s/plain/f", home);
	put(p, 4096);
	snprintf(p, sizeof p, "%s/plain/sub/deeper/g", home);
	put(p, 1);
	snprintf(p, sizeof p, "%s/plain/sub/to-dir", home);
	ok(symlink(out, p) == 0, "plain: a link to a directory outside");
	snprintf(p, sizeof p, "%s/plain/to-file", home);
	ok(symlink(keep, p) == 0, "plain: a link to a file outside");
	snprintf(p, sizeof p, "%s/plain/dangling", home);
	ok(symlink("/nonexistent/x", p) == 0, "plain: a dangling link");
	snprintf(t, sizeof t, "%s/plain", home);
	bytes = tree_bytes(t);
	ok(bytes >= 4096 && bytes < BIG, "tree_bytes counts the tree, not what its links point to (%lld)",
	   bytes);
	ok(tree_remove(t, &b, why, sizeof why) == 0 && b == 7 + bytes && !why[0],
	   "tree_remove: 0, its bytes added (%lld)", b - 7);
	ok(!exists(t) && exists(keep), "tree_remove: the tree is gone, what a link pointed to stays");
	b = 7;
	ok(tree_remove(t, &b, NULL, 0) == 0 && b == 7, "tree_remove of a missing tree: 0, nothing added");
	ok(tree_bytes(t) == 0, "tree_bytes of a missing tree: 0");
	snprintf(p, sizeof p, "%s/plain-file", home);
	put(p, 1);
	ok(tree_remove(p, NULL, NULL, 0) == 0 && !exists(p), "tree_remove of a plain file removes it");
}

/* A child's end: its counts (ours at its fork, and its own) in one write
 * on fd w, which the parent reads whole. */
static void tap_report(int w)
{
	int n[2] = { tap_n, tap_fail };

	fflush(stdout);
	_exit(write(w, n, sizeof n) == (ssize_t)sizeof n ? 0 : 1);
}

static int fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

static void count_fds(void *arg, int dfd, const char *name)
{
	int *max = arg, n = fds_open();

	(void)dfd;
	(void)name;
	if (n > *max)
		*max = n;
}

/* DEEP levels, a file at the bottom: more than TREE_FDS descriptors deep
 * (a descriptor a level would not do; the first version stopped at 128). */
static void test_deep(const char *home)
{
	char t[PATH_MAX];
	long long want = 0, bytes;
	struct stat st;
	int fd, i, base, max;

	snprintf(t, sizeof t, "%s/deep", home);
	mkdir(t, 0700);
	fd = open(t, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (i = 0; fd >= 0 && i <= DEEP; i++) {
		int sub;

		fstat(fd, &st);
		want += (long long)st.st_blocks * 512;
		if (i == DEEP) {
			sub = openat(fd, "bottom", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
			if (sub >= 0 && write(sub, "x", 1) == 1 && fstat(sub, &st) == 0)
				want += (long long)st.st_blocks * 512;
		} else {
			mkdirat(fd, "d", 0700);
			sub = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		}
		close(fd);
		fd = sub;
	}
	if (fd >= 0)
		close(fd);
	ok(i == DEEP + 1, "deep: a tree %d directories deep", DEEP);
	base = fds_open() + 1; /* the walk's counting opens one */
	max = 0;
	ok(walk(t, 0, &bytes, count_fds, &max) == 0 && bytes == want,
	   "deep: tree_bytes counts all of it (%lld of %lld)", bytes, want);
	ok(max - base <= FDS_MAX, "deep: measuring, at most %d descriptors open (%d)", FDS_MAX, max - base);
	max = 0;
	ok(walk(t, 1, &bytes, count_fds, &max) == 0 && !exists(t) && bytes == want,
	   "deep: tree_remove removes all of it (%lld of %lld bytes)", bytes, want);
	ok(max - base <= FDS_MAX, "deep: removing, at most %d descriptors open (%d)", FDS_MAX, max - base);
}

struct swap {
	const char *out;
	int done;
};

/* What a jail could do between the walk's fstatat and its openat: the
 * subdirectory "victim" moved aside and a link to outside put in its place. */
static void swap_victim(void *arg, int dfd, const char *name)
{
	struct swap *s = arg;

	if (s->done || strcmp(name, "victim"))
		return;
	s->done = renameat(dfd, "victim", dfd, "victim.aside") == 0 &&
		  symlinkat(s->out, dfd, "victim") == 0;
}

/* <home>/<name>/victim/inner: the tree of a check, in t */
static void swap_tree(const char *home, const char *name, char *t, size_t tsz)
{
	char p[PATH_MAX];

	snprintf(p, sizeof p, "%s/%s/victim", home, name);
	mkdir_p(p, 0700, t, tsz);
	snprintf(p, sizeof p, "%s/%s/victim/inner", home, name);
	put(p, 1);
	snprintf(t, tsz, "%s/%s", home, name);
}

static void test_swap(const char *home, const char *out, const char *keep)
{
	char t[PATH_MAX];
	struct swap s = { .out = out };
	long long bytes;

	swap_tree(home, "swap-measured", t, sizeof t);
	ok(walk(t, 0, &bytes, swap_victim, &s) == 0 && s.done && bytes < BIG,
	   "swap: measuring, a subdirectory swapped for a link to outside is not followed (%lld)", bytes);
	swap_tree(home, "swap-removed", t, sizeof t);
	s.done = 0;
	ok(walk(t, 1, &bytes, swap_victim, &s) == 0 && s.done && !exists(t),
	   "swap: removing, the link is removed as a link, and the moved directory too");
	ok(exists(keep), "swap: what the link pointed to stays");
}

/* The top itself a link to a directory: unlinked, never followed. */
static void test_top_link(const char *home, const char *out, const char *keep)
{
	char t[PATH_MAX], why[256];

	snprintf(t, sizeof t, "%s/top-link", home);
	ok(symlink(out, t) == 0, "top: a link to a directory outside");
	ok(tree_bytes(t) < BIG, "top: tree_bytes does not follow it (%lld)", tree_bytes(t));
	ok(tree_remove(t, NULL, why, sizeof why) == 0 && !exists(t), "top: tree_remove unlinks it");
	ok(exists(keep), "top: its target stays");
}

/* tree_visit's tests: a callback as isopod-gc's tmp sweep uses it, which
 * unlinks every "*.tmp.<pid>" file by its parent's descriptor. */
struct seen {
	int entries, staged, maxdepth, deepest_file;
	int outside;       /* an entry named "keep" or "file": outside, or in a mount */
	int max_fds, base; /* descriptors open, beyond base, at the callback */
};

static int visit_cb(const struct tree_ent *e, void *arg)
{
	struct seen *s = arg;
	struct stat st;
	int n = fds_open() - s->base;

	s->entries++;
	if (n > s->max_fds)
		s->max_fds = n;
	if (e->depth > s->maxdepth)
		s->maxdepth = e->depth;
	if (!strcmp(e->name, "keep") || !strcmp(e->name, "file") || !strcmp(e->name, "o.tmp.1"))
		s->outside++;
	if (S_ISDIR(e->st->st_mode) && !strcmp(e->name, "skip"))
		return 1; /* as gc's for a directory handed to a jail */
	/* the stat given is the entry's below dfd */
	if (fstatat(e->dfd, e->name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_ino != e->st->st_ino)
		return 0;
	if (S_ISREG(e->st->st_mode) && strstr(e->name, ".tmp.")) {
		if (unlinkat(e->dfd, e->name, 0) == 0)
			s->staged++;
		if (e->depth > s->deepest_file)
			s->deepest_file = e->depth;
	}
	return 0;
}

/* tree_visit with the test hooks */
static int visit(const char *path, struct seen *s, void (*hook)(void *, int, const char *),
		 void *arg, int no_mnt_id, char *why, size_t whysz)
{
	struct tv v = { .w = { .before_open = hook, .arg = arg, .no_mnt_id = no_mnt_id },
			.fn = visit_cb, .arg = s };
	int r = visit_run(&v, AT_FDCWD, path), e = errno;

	snprintf(why, whysz, "%s", v.w.why);
	errno = e;
	return r;
}

/* A plain tree, and a link to the outside directory (its "keep.tmp.1")
 * inside: every entry seen once, the link not followed, nothing moved. */
static void test_visit_plain(const char *home, const char *out)
{
	char t[PATH_MAX], p[PATH_MAX], why[256], keep[PATH_MAX];
	struct seen s = { .base = 0 };

	snprintf(t, sizeof t, "%s/visit/sub/deeper", home);
	mkdir_p(t, 0700, p, sizeof p);
	snprintf(p, sizeof p, "%s/visit/sub/x.tmp.1", home);
	put(p, 1);
	snprintf(p, sizeof p, "%s/visit/skip", home);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/visit/skip/s.tmp.1", home);
	put(p, 1);
	snprintf(p, sizeof p, "%s/visit/sub/link", home);
	ok(symlink(out, p) == 0, "visit: a tree, a link to outside in it");
	snprintf(keep, sizeof keep, "%s/keep.tmp.1", out);
	put(keep, 1);
	snprintf(t, sizeof t, "%s/visit", home);
	ok(visit(t, &s, NULL, NULL, 0, why, sizeof why) == 0 && s.entries == 5 && s.staged == 1 &&
	   s.maxdepth == 2 && !s.outside && exists(p),
	   "visit: 5 entries, one staging file, the link not followed, a directory refused not entered (%d %d %d: %s)",
	   s.entries, s.staged, s.maxdepth, why);
	ok(exists(keep), "visit: the outside staging file stays");
	snprintf(p, sizeof p, "%s/visit/sub/link", home);
	ok(tree_visit(AT_FDCWD, p, visit_cb, &s, why, sizeof why) < 0 && errno == ENOTDIR,
	   "visit: a top that is a link is not followed (%s)", why);
}

/* What a jail could do between the visit's fstatat and its openat: the
 * directory "victim" swapped for a link to outside, or for another
 * directory ("other", beside the tree) */
struct vswap {
	const char *out, *other;
	int done;
};

static void vswap_hook(void *arg, int dfd, const char *name)
{
	struct vswap *s = arg;

	if (s->done || strcmp(name, "victim"))
		return;
	if (renameat(dfd, "victim", dfd, "victim.aside") < 0)
		return;
	s->done = s->other ? renameat(AT_FDCWD, s->other, dfd, "victim") == 0
			   : symlinkat(s->out, dfd, "victim") == 0;
}

static void test_visit_swap(const char *home, const char *out)
{
	char t[PATH_MAX], p[PATH_MAX], keep[PATH_MAX], why[256];
	struct vswap w = { .out = out };
	struct seen s = { .base = 0 };

	swap_tree(home, "vswap", t, sizeof t);
	snprintf(keep, sizeof keep, "%s/keep.tmp.1", out);
	put(keep, 1);
	ok(visit(t, &s, vswap_hook, &w, 0, why, sizeof why) < 0 && w.done && (errno == ELOOP || errno == ENOTDIR) && !s.outside,
	   "visit swap: a directory swapped for a link is not followed (%s)", why);
	ok(exists(keep), "visit swap: the outside staging file stays");
	swap_tree(home, "vswap2", t, sizeof t);
	snprintf(p, sizeof p, "%s/vswap2-other", home);
	mkdir(p, 0700);
	snprintf(keep, sizeof keep, "%s/vswap2-other/o.tmp.1", home);
	put(keep, 1);
	w = (struct vswap){ .out = out, .other = p };
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, vswap_hook, &w, 0, why, sizeof why) < 0 && w.done && errno == ESTALE && strstr(why, "victim: changed since"),
	   "visit swap: a directory swapped for another one is not entered (%s)", why);
}

/* The directory chain <t>/l1/.../l<n>, its fd (or -1). */
static int chain(const char *t, int n)
{
	int fd = open(t, O_RDONLY | O_DIRECTORY | O_CLOEXEC), i;

	for (i = 1; fd >= 0 && i <= n; i++) {
		char l[16];
		int sub;

		snprintf(l, sizeof l, "l%d", i);
		mkdirat(fd, l, 0700);
		sub = openat(fd, l, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		close(fd);
		fd = sub;
	}
	return fd;
}

/* l5 swapped for a link to outside when the visit reaches it again (its
 * second open: a directory below TREE_FDS queued, reached name by name);
 * with other set, the queued l16 itself swapped for that directory. */
static void again_hook(void *arg, int dfd, const char *name)
{
	struct vswap *s = arg;
	const char *n = s->other ? "l16" : "l5";

	if (strcmp(name, n) || s->done++ != (s->other ? 0 : 1))
		return;
	if (renameat(dfd, n, dfd, "aside") < 0 ||
	    (s->other ? renameat(AT_FDCWD, s->other, dfd, n) : symlinkat(s->out, dfd, n)) < 0)
		s->done = -100;
}

/* DEEP levels, a staging file at the bottom: visited, with at most
 * FDS_MAX descriptors, nothing moved; 100 directories at the depth bound
 * (more than tree_bytes's queue) all visited; a queued directory's path
 * swapped for a link when it is reached again: not followed. */
static void test_visit_deep(const char *home, const char *out)
{
	char t[PATH_MAX], keep[PATH_MAX], why[256];
	struct seen s = { .base = 0 };
	struct vswap w = { .out = out };
	int fd, i;

	snprintf(t, sizeof t, "%s/vdeep", home);
	mkdir(t, 0700);
	if ((fd = chain(t, DEEP)) >= 0) {
		close(openat(fd, "bottom.tmp.1", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		close(fd);
	}
	s.base = fds_open() + 1;
	ok(visit(t, &s, NULL, NULL, 0, why, sizeof why) == 0 && s.staged == 1 && s.deepest_file == DEEP + 1 &&
	   s.entries == DEEP + 1, "visit deep: %d levels, the bottom's staging file seen (%d %d: %s)",
	   DEEP, s.entries, s.deepest_file, why);
	ok(s.max_fds <= FDS_MAX, "visit deep: at most %d descriptors open (%d)", FDS_MAX, s.max_fds);
	snprintf(t, sizeof t, "%s/vwide", home);
	mkdir(t, 0700);
	if ((fd = chain(t, 15)) >= 0) {
		for (i = 0; i < 100; i++) {
			char n[16];
			int sub;

			snprintf(n, sizeof n, "w%d", i);
			mkdirat(fd, n, 0700);
			if ((sub = openat(fd, n, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
				close(openat(sub, "f.tmp.1", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
				close(sub);
			}
		}
		close(fd);
	}
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, NULL, NULL, 0, why, sizeof why) == 0 && s.staged == 100,
	   "visit wide: 100 directories at the depth bound, none dropped (%d: %s)", s.staged, why);
	snprintf(t, sizeof t, "%s/vagain", home);
	mkdir(t, 0700);
	if ((fd = chain(t, 20)) >= 0) {
		close(openat(fd, "a.tmp.1", O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
		close(fd);
	}
	snprintf(keep, sizeof keep, "%s/keep.tmp.1", out);
	put(keep, 1);
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, again_hook, &w, 0, why, sizeof why) < 0 && (errno == ELOOP || errno == ENOTDIR) && w.done == 2 &&
	   s.staged == 0 && exists(keep), "visit again: a queued directory's path swapped for a link is "
	   "not followed, the outside staging file stays (%s)", why);
	snprintf(t, sizeof t, "%s/vqueued", home);
	mkdir(t, 0700);
	if ((fd = chain(t, 20)) >= 0)
		close(fd);
	snprintf(keep, sizeof keep, "%s/vqueued-other", home);
	mkdir(keep, 0700);
	w = (struct vswap){ .out = out, .other = keep };
	snprintf(keep, sizeof keep, "%s/vqueued-other/o.tmp.1", home);
	put(keep, 1);
	snprintf(keep, sizeof keep, "%s/vqueued-other", home);
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, again_hook, &w, 0, why, sizeof why) < 0 && errno == ESTALE && w.done == 1 && !s.outside,
	   "visit again: a queued directory swapped for another one is not entered (%s)", why);
}

static void mounts_check(const char *t, const char *b, const char *m, const char *mf, const char *f,
			 const char *keep)
{
	char why[512];
	long long bytes = 0;
	struct seen s;
	int r, e;

	put(mf, BIG);
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, NULL, NULL, 0, why, sizeof why) < 0 && errno == EXDEV && !s.outside && s.entries == 4,
	   "mounts: tree_visit enters neither mount (%d entries: %s)", s.entries, why);
	ok(tree_bytes(t) < BIG, "mounts: tree_bytes counts neither mount (%lld)", tree_bytes(t));
	r = tree_remove(t, &bytes, why, sizeof why);
	e = errno;
	ok(r < 0 && e == EXDEV && (strstr(why, "a/bind: a mount point") || strstr(why, "tmpfs: a mount point")),
	   "mounts: tree_remove fails, EXDEV, naming one (%s)", why);
	ok(exists(keep), "mounts: the bind-mounted directory's file is untouched");
	ok(exists(mf), "mounts: the tmpfs's file is untouched");
	ok(!exists(f) && exists(b) && exists(m), "mounts: the rest is gone, the mount points stay");
}

/* t/m, a tmpfs, with a file of BIG bytes; the walk without the mount id (a
 * kernel before 5.8): another filesystem is still told by its st_dev. */
static void mounts_dev_check(const char *t, const char *mf)
{
	struct tw w = { .rm = 0, .no_mnt_id = 1 };
	struct tw r = { .rm = 1, .no_mnt_id = 1 };
	struct seen s;
	char why[512];

	put(mf, BIG);
	ok(tree_walk(&w, AT_FDCWD, t) == 0 && w.bytes < BIG, "mounts, by st_dev alone: the tmpfs is not counted (%lld)",
	   w.bytes);
	ok(tree_walk(&r, AT_FDCWD, t) < 0 && errno == EXDEV && exists(mf),
	   "mounts, by st_dev alone: the tmpfs is left, EXDEV, not entered (%s)", r.why);
	put(mf, BIG);
	memset(&s, 0, sizeof s);
	ok(visit(t, &s, NULL, NULL, 1, why, sizeof why) < 0 && errno == EXDEV && !s.outside,
	   "mounts, by st_dev alone: tree_visit does not enter the tmpfs (%s)", why);
}

/* In a mount namespace of our own (our mounts go with it): a bind mount of
 * outside (its filesystem's st_dev: the mount id tells) and a tmpfs (its
 * own st_dev) inside a tree.  The checks' count goes back on fd w. */
static void mounts_child(const char *home, const char *out, const char *keep, int w)
{
	char t[PATH_MAX], b[PATH_MAX], m[PATH_MAX], mf[PATH_MAX], f[PATH_MAX], why[512];
	char dt[PATH_MAX], dm[PATH_MAX], dmf[PATH_MAX];

	snprintf(t, sizeof t, "%s/mounts", home);
	snprintf(b, sizeof b, "%s/mounts/a/bind", home);
	snprintf(m, sizeof m, "%s/mounts/tmpfs", home);
	snprintf(mf, sizeof mf, "%s/mounts/tmpfs/file", home);
	snprintf(f, sizeof f, "%s/mounts/f", home);
	snprintf(dt, sizeof dt, "%s/mounts-dev", home);
	snprintf(dm, sizeof dm, "%s/mounts-dev/m", home);
	snprintf(dmf, sizeof dmf, "%s/mounts-dev/m/file", home);
	mkdir_p(b, 0700, why, sizeof why);
	mkdir(m, 0700);
	mkdir_p(dm, 0700, why, sizeof why);
	put(f, 1);
	if ((unshare(CLONE_NEWNS) < 0 && unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(out, b, NULL, MS_BIND, NULL) < 0 || mount("tmpfs", m, "tmpfs", 0, NULL) < 0 ||
	    mount("tmpfs", dm, "tmpfs", 0, NULL) < 0) {
		printf("ok %d - # skip no mount namespace here: %s\n", ++tap_n, strerror(errno));
	} else {
		mounts_check(t, b, m, mf, f, keep);
		mounts_dev_check(dt, dmf);
	}
	tap_report(w);
}

static void test_mounts(const char *home, const char *out, const char *keep)
{
	int p[2], n[2] = { 0, 0 }, st = -1;
	pid_t pid;

	fflush(stdout);
	if (pipe(p) < 0 || (pid = fork()) < 0) {
		ok(0, "mounts: fork");
		return;
	}
	if (pid == 0) {
		close(p[0]);
		mounts_child(home, out, keep, p[1]);
	}
	close(p[1]);
	if (read(p[0], n, sizeof n) != (ssize_t)sizeof n)
		n[0] = tap_n, n[1] = tap_fail; /* skipped */
	close(p[0]);
	waitpid(pid, &st, 0);
	tap_n = n[0]; /* the child's counts: ours at its fork, and its own */
	tap_fail = n[1];
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mounts: the child ran its checks");
}

/* Unreadable directories (mode 0): an empty one goes (rmdir), a full one is
 * left and named.  Root reads anything: the child becomes uid 65534. */
static void test_unreadable(const char *home)
{
	char t[128], p[PATH_MAX], why[512];
	int pip[2], n[2] = { 0, 0 }, st = -1, r, e;
	pid_t pid;

	snprintf(t, sizeof t, "%s/unr", home);
	mkdir(t, 0700);
	if (geteuid() == 0 && chown(t, 65534, 65534) < 0)
		ok(0, "unreadable: chown");
	fflush(stdout);
	if (pipe(pip) < 0 || (pid = fork()) < 0)
		return;
	if (pid == 0) {
		close(pip[0]);
		if (geteuid() == 0 && (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0))
			_exit(1);
		snprintf(p, sizeof p, "%s/empty", t);
		mkdir(p, 0);
		snprintf(p, sizeof p, "%s/full", t);
		mkdir(p, 0700);
		snprintf(p, sizeof p, "%s/full/f", t);
		put(p, 1);
		snprintf(p, sizeof p, "%s/full", t);
		chmod(p, 0);
		r = tree_remove(t, NULL, why, sizeof why);
		e = errno;
		ok(r < 0 && e == EACCES && strstr(why, "full: unreadable, not empty"),
		   "unreadable: tree_remove fails, EACCES, naming the full one (%s)", why);
		snprintf(p, sizeof p, "%s/empty", t);
		ok(!exists(p), "unreadable: the empty one is gone");
		snprintf(p, sizeof p, "%s/full", t);
		chmod(p, 0700);
		tap_report(pip[1]);
	}
	close(pip[1]);
	if (read(pip[0], n, sizeof n) == (ssize_t)sizeof n) {
		tap_n = n[0];
		tap_fail = n[1];
	}
	close(pip[0]);
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unreadable: the child ran its checks");
}

/* A file of ours the jail linked into the tree many times (review L2): it
 * is not what gc reclaims when the links go, nor counted whole by each. */
static void test_links(const char *home, const char *keep)
{
	char t[PATH_MAX / 2], p[PATH_MAX], why[4096];
	long long bytes, b = 0;
	int i;

	snprintf(t, sizeof t, "%s/links", home);
	mkdir(t, 0700);
	for (i = 0; i < 8; i++) {
		snprintf(p, sizeof p, "%s/l%d", t, i);
		if (link(keep, p) < 0)
			ok(0, "links: link");
	}
	bytes = tree_bytes(t);
	ok(bytes < BIG, "links: 8 links to a %d-byte file outside count a share of it, not 8 times (%lld)",
	   BIG, bytes);
	ok(tree_remove(t, &b, why, sizeof why) == 0 && !exists(t) && b < BIG,
	   "links: removing them frees nothing of the file, and says so (%lld)", b);
	ok(exists(keep), "links: the file stays");
}

/* A name with a newline and an escape, reported as left (a mount point,
 * an unreadable directory: left() as the walk calls it): the reason says
 * it without them (review L4), so the jail's names forge no line of
 * gc's stderr. */
static void test_escape(const char *home)
{
	char t[PATH_MAX / 2], p[PATH_MAX];
	struct tw w = { .rm = 1 };
	int r;

	snprintf(t, sizeof t, "%s/esc", home);
	mkdir(t, 0700);
	snprintf(p, sizeof p, "%s/bad\nname\033[2J", t);
	mkdir(p, 0700);
	left(&w, EXDEV, "bad\nname\033[2J", "a mount point: left, not entered");
	ok(!strchr(w.why, '\n') && !strchr(w.why, '\033') && strstr(w.why, "bad?name?[2J"),
	   "escape: a left name's newline and escape are '?' (%s)", w.why);
	r = tree_remove(t, NULL, NULL, 0);
	ok(r == 0 && !exists(t), "escape: such a name is removed as any");
}

int main(void)
{
	char home[64], out[PATH_MAX / 2], keep[PATH_MAX], cmd[128];

	snprintf(home, sizeof home, "/tmp/tree_test.%ld", (long)getpid());
	mkdir(home, 0755);
	outside(home, "plain", out, sizeof out, keep, sizeof keep);
	test_plain(home, out, keep);
	test_deep(home);
	outside(home, "swap", out, sizeof out, keep, sizeof keep);
	test_swap(home, out, keep);
	outside(home, "top", out, sizeof out, keep, sizeof keep);
	test_top_link(home, out, keep);
	outside(home, "mounts", out, sizeof out, keep, sizeof keep);
	test_mounts(home, out, keep);
	test_unreadable(home);
	outside(home, "links", out, sizeof out, keep, sizeof keep);
	test_links(home, keep);
	test_escape(home);
	outside(home, "visit", out, sizeof out, keep, sizeof keep);
	test_visit_plain(home, out);
	outside(home, "vswap", out, sizeof out, keep, sizeof keep);
	test_visit_swap(home, out);
	outside(home, "vdeep", out, sizeof out, keep, sizeof keep);
	test_visit_deep(home, out);

	snprintf(cmd, sizeof cmd, "rm -rf %s", home);
	if (system(cmd) != 0)
		printf("# unable to remove %s\n", home);
	return tap_done();
}
