/* jaildeps_test.c - lib/jaildeps.c: ldd's answer cached by identity, and
 * never trusted when the key moved or the file is not ours alone.  Each
 * check compares with ldd's own answer: a hit must be ldd's answer, and a
 * planted answer (an extra "library" this test controls) must vanish as
 * soon as anything in its key changes. */
#include "../../lib/jaildeps.c"
#include "../../lib/proc.c"

#include "tap.h"

#include <sys/time.h>

struct fix {
	char dir[64], prog[128], ldc[128], cache[128], file[256], lib[128];
	char *ldd[DEPS_MAX];
	size_t nldd;
};

static int put_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	int r = fd < 0 ? -1 : write_all(fd, text, strlen(text));

	if (fd >= 0)
		close(fd);
	return r;
}

static int copy(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out, r = 0;
	ssize_t n;

	if (in < 0)
		return -1;
	if ((out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755)) < 0) {
		close(in);
		return -1;
	}
	while ((n = read(in, buf, sizeof buf)) > 0)
		if (write_all(out, buf, (size_t)n) < 0)
			r = -1;
	close(in);
	close(out);
	return n < 0 ? -1 : r;
}

/* One lookup: its hit flag; *same: the answer is ldd's, *planted: it holds
 * the planted library. */
static int look(struct fix *f, int *same, int *planted)
{
	char *out[DEPS_MAX], err[512];
	size_t n = 0, i;
	int hit = -1, r = jail_deps_cached(f->prog, f->cache, f->ldc, out, &n, DEPS_MAX, &hit, err,
					   sizeof err);

	*same = r == 0 && n == f->nldd;
	*planted = 0;
	for (i = 0; i < n; i++) {
		if (*same && strcmp(out[i], f->ldd[i]))
			*same = 0;
		*planted |= !strcmp(out[i], f->lib);
		free(out[i]);
	}
	if (r < 0)
		printf("# jail_deps_cached: %s\n", err);
	return hit;
}

/* A cache file that says prog loads ldd's libraries and f->lib, with the
 * right key for all of them: as if written by us. */
static void plant(struct fix *f)
{
	char *list[DEPS_MAX], before[65];

	memcpy(list, f->ldd, f->nldd * sizeof *list);
	list[f->nldd] = f->lib;
	unlink(f->file);
	if (deps_key(f->prog, f->ldc, NULL, 0, before) == 0)
		cache_write(f->file, f->prog, f->ldc, before, list, f->nldd + 1);
}

/* The directory's whole identity, as the key takes it (stamp_add). */
static int same_identity(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static void later(const char *path)
{
	struct timespec t[2] = { { .tv_sec = 1000000000, .tv_nsec = 0 },
				 { .tv_sec = 1000000000, .tv_nsec = 0 } };

	utimensat(AT_FDCWD, path, t, 0);
}

static void test_cache(struct fix *f)
{
	char err[512], sha[65], target[192];
	struct stat st;
	int same, planted, h;

	ok(run_ldd(f->prog, f->ldd, &f->nldd, DEPS_MAX, err, sizeof err) == 0 && f->nldd >= 2,
	   "ldd's own answer for a copy of /bin/sh: %zu paths", f->nldd);
	sha256_hex(f->prog, strlen(f->prog), sha);
	snprintf(f->file, sizeof f->file, "%s/deps-%.16s.json", f->cache, sha);

	h = look(f, &same, &planted);
	ok(h == 0 && same, "first lookup: a miss, ldd's answer");
	ok(stat(f->file, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 07777) == 0600,
	   "the answer is kept, ours, 0600 (%o)", (unsigned)st.st_mode & 07777);
	h = look(f, &same, &planted);
	ok(h == 1 && same, "second lookup: a hit, the same answer");
	ok(jail_deps_valid(f->file, f->ldc) == 1, "jail_deps_valid: the answer kept is valid");
	{
		char other[256];

		snprintf(other, sizeof other, "%s/deps-0000000000000000.json", f->cache);
		ok(link(f->file, other) == 0 && jail_deps_valid(other, f->ldc) == 0,
		   "jail_deps_valid: the same answer under a name not its program's is not");
		unlink(other);
	}

	plant(f);
	h = look(f, &same, &planted);
	ok(h == 1 && planted, "a planted answer with a right key is used (the test sees the cache)");
	later(f->prog);
	ok(jail_deps_valid(f->file, f->ldc) == 0, "jail_deps_valid: stale once the program was touched");
	h = look(f, &same, &planted);
	ok(h == 0 && same && !planted, "the program touched: recomputed, ldd's answer");

	plant(f);
	later(f->ldc);
	h = look(f, &same, &planted);
	ok(h == 0 && same && !planted, "the loader's cache (a stand-in) touched: recomputed");

	plant(f);
	later(f->lib);
	ok(jail_deps_valid(f->file, f->ldc) == 0, "jail_deps_valid: stale once a library was touched");
	h = look(f, &same, &planted);
	ok(h == 0 && same && !planted, "a listed library touched: recomputed");

	/* The library's own identity, its directory's left as it was (which
	 * would tell on its own: the key holds it too).  First a chmod to the
	 * same mode: only the library's ctime moves. */
	{
		struct stat a, b, d0, d1;
		char dir[PATH_MAX];
		int i;

		plant(f);
		dir_of(f->lib, dir);
		stat(dir, &d0);
		stat(f->lib, &a);
		/* (a coarse clock may give the chmod the ctime it had: again,
		 * bounded, until it moved) */
		for (i = 0; i < 100; i++) {
			chmod(f->lib, a.st_mode & 07777);
			if (stat(f->lib, &b) == 0 && (b.st_ctim.tv_sec != a.st_ctim.tv_sec ||
						     b.st_ctim.tv_nsec != a.st_ctim.tv_nsec))
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 10000000 }, NULL);
		}
		ok(stat(dir, &d1) == 0 && same_identity(&d0, &d1) && b.st_ino == a.st_ino &&
		   b.st_size == a.st_size && b.st_mtim.tv_nsec == a.st_mtim.tv_nsec &&
		   b.st_mtim.tv_sec == a.st_mtim.tv_sec &&
		   (b.st_ctim.tv_sec != a.st_ctim.tv_sec || b.st_ctim.tv_nsec != a.st_ctim.tv_nsec),
		   "(chmod to the same mode: the library's ctime moved, nothing else, its directory's neither)");
		ok(jail_deps_valid(f->file, f->ldc) == 0,
		   "jail_deps_valid: stale once a library's ctime moved (same inode, size, mtime)");
		h = look(f, &same, &planted);
		ok(h == 0 && same && !planted, "a listed library's ctime moved: recomputed");
	}

	/* A library replaced by another file with the same size and times (a
	 * package's rename over it; the times copied on purpose): its inode
	 * and ctime moved, the answer is stale.  The library listed is a
	 * symlink to a file in a directory of its own, and the rename happens
	 * there: the listed library's directory (the one in the key) is left
	 * as it was, so only the library's own identity tells. */
	{
		char real[160], tmp[160], lib[sizeof f->lib], dir[PATH_MAX];
		struct stat a, b, d0, d1;
		struct timespec t[2];

		snprintf(real, sizeof real, "%s/real", f->dir);
		mkdir(real, 0755);
		snprintf(real, sizeof real, "%s/real/libreal.so", f->dir);
		snprintf(tmp, sizeof tmp, "%s/real/libreal.so.new", f->dir);
		put_file(real, "a library\n", 0644);
		memcpy(lib, f->lib, sizeof lib);
		snprintf(f->lib, sizeof f->lib, "%s/libvia.so", f->dir);
		symlink(real, f->lib);
		plant(f);
		ok(jail_deps_valid(f->file, f->ldc) == 1, "(a library through a symlink planted: valid)");
		dir_of(f->lib, dir);
		stat(dir, &d0);
		if (stat(real, &a) == 0 && copy(real, tmp) == 0) {
			t[0] = a.st_atim;
			t[1] = a.st_mtim;
			utimensat(AT_FDCWD, tmp, t, 0);
			rename(tmp, real);
		}
		ok(stat(dir, &d1) == 0 && same_identity(&d0, &d1) && stat(f->lib, &b) == 0 &&
		   b.st_ino != a.st_ino && b.st_size == a.st_size &&
		   b.st_mtim.tv_sec == a.st_mtim.tv_sec && b.st_mtim.tv_nsec == a.st_mtim.tv_nsec,
		   "(replaced: another inode, the same size and mtime; the key's directory as it was)");
		ok(jail_deps_valid(f->file, f->ldc) == 0,
		   "jail_deps_valid: stale once a library was replaced (another inode and ctime, same size and mtime)");
		h = look(f, &same, &planted);
		ok(h == 0 && same && !planted, "a listed library replaced: recomputed");
		unlink(f->lib);
		memcpy(f->lib, lib, sizeof lib);
	}

	/* A file added beside a library (one the loader could now pick
	 * first): only the directory's identity tells.  The planted library's
	 * directory is the program's too; the library itself untouched. */
	{
		char beside[160];

		plant(f);
		ok(jail_deps_valid(f->file, f->ldc) == 1, "(planted again: valid)");
		snprintf(beside, sizeof beside, "%s/libbeside.so", f->dir);
		put_file(beside, "another library\n", 0644);
		ok(jail_deps_valid(f->file, f->ldc) == 0,
		   "jail_deps_valid: stale once a file was added in a library's directory");
		h = look(f, &same, &planted);
		ok(h == 0 && same && !planted, "a file added beside a library: recomputed");
		unlink(beside);
	}

	/* The key names each directory once however many libraries it holds:
	 * a second library in the planted one's directory changes only the
	 * libraries' part (the test of deps_key's own dedup). */
	{
		char *one[2] = { f->lib, f->prog }, *two[1] = { f->lib }, k1[65], k2[65];
		struct stamp a = { .buf = NULL };
		char dir[PATH_MAX];

		dir_of(f->lib, dir);
		stamp_add(&a, f->prog, 0);
		stamp_add(&a, f->ldc, 0);
		stamp_add(&a, "/etc/ld.so.preload", 1);
		stamp_add(&a, f->lib, 0);
		stamp_add(&a, f->prog, 0);
		stamp_add(&a, dir, 0);
		ok(!a.doubt && deps_key(f->prog, f->ldc, one, 2, k1) == 0 &&
		   (sha256_hex(a.buf, a.len, k2), !strcmp(k1, k2)),
		   "deps_key: two libraries of one directory: the directory once");
		ok(deps_key(f->prog, f->ldc, two, 1, k2) == 0 && strcmp(k1, k2),
		   "deps_key: another list, another key");
		free(a.buf);
	}

	/* a cache file of version 1 (each identity kept): a miss, rewritten */
	{
		json_t *c;

		plant(f);
		c = json_load_file(f->file, 0, NULL);
		json_object_set_new(c, "version", json_integer(1));
		json_dump_file(c, f->file, JSON_COMPACT);
		json_decref(c);
		h = look(f, &same, &planted);
		ok(h == 0 && same && !planted, "a cache file of another version is a miss");
	}

	plant(f);
	chmod(f->file, 0620);
	h = look(f, &same, &planted);
	ok(h == 0 && same && !planted, "a group-writable cache file is ignored");
	plant(f);
	chmod(f->file, 0602);
	h = look(f, &same, &planted);
	ok(h == 0 && same && !planted, "a world-writable cache file is ignored");
	plant(f);
	if (chown(f->file, 4242, 4242) == 0) {
		h = look(f, &same, &planted);
		ok(h == 0 && same && !planted, "a cache file owned by uid 4242 is ignored");
	} else
		ok(1, "# skip: a cache file of another uid (chown: %s)", strerror(errno));

	/* the real file beside it, in the cache directory (not in the key) */
	plant(f);
	snprintf(target, sizeof target, "%s/target.json", f->cache);
	h = rename(f->file, target) == 0 && symlink(target, f->file) == 0 ? look(f, &same, &planted)
									   : -1;
	ok(h == 0 && same && !planted, "a cache file that is a symlink is ignored");
	unlink(target);

	plant(f);
	setenv("LD_LIBRARY_PATH", f->dir, 1);
	h = look(f, &same, &planted);
	unsetenv("LD_LIBRARY_PATH");
	ok(h == 0 && !planted, "with LD_LIBRARY_PATH set, the cache is not read");

	plant(f);
	setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX2", 1);
	h = look(f, &same, &planted);
	unsetenv("GLIBC_TUNABLES");
	ok(h == 0 && !planted, "with GLIBC_TUNABLES set (it picks the loader's hwcaps directory), the cache is not read");

	{
		char *list[DEPS_MAX], before[65];
		struct stat gone;

		memcpy(list, f->ldd, f->nldd * sizeof *list);
		list[f->nldd] = "/nonexistent/libgone.so";
		unlink(f->file);
		if (deps_key(f->prog, f->ldc, NULL, 0, before) == 0)
			cache_write(f->file, f->prog, f->ldc, before, list, f->nldd + 1);
		ok(lstat(f->file, &gone) < 0 && errno == ENOENT,
		   "an answer naming a library that is gone is not kept (doubt, not a null identity)");
	}

	unlink(f->file);
	if (mkfifo(f->file, 0600) == 0)
		ok_bounded(10, look(f, &same, &planted) == 0 && same,
			   "a FIFO in the cache file's place is a miss at once (no blocking open)");
	else
		ok(0, "mkfifo %s: %s", f->file, strerror(errno));
	unlink(f->file);

	put_file(f->file, "{\"version\":1,", 0600);
	h = look(f, &same, &planted);
	ok(h == 0 && same, "a cut cache file is a miss, not an error");
}

int main(void)
{
	struct fix f = { .dir = "/tmp/isopod-jaildeps-test.XXXXXX" };
	char cmd[128];

	if (!mkdtemp(f.dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(f.prog, sizeof f.prog, "%s/prog", f.dir);
	snprintf(f.ldc, sizeof f.ldc, "%s/ld.so.cache", f.dir);
	snprintf(f.cache, sizeof f.cache, "%s/cache", f.dir);
	snprintf(f.lib, sizeof f.lib, "%s/libplanted.so", f.dir);
	if (copy("/bin/sh", f.prog) < 0 || put_file(f.ldc, "a stand-in\n", 0644) < 0 ||
	    put_file(f.lib, "a library\n", 0644) < 0 || mkdir(f.cache, 0700) < 0) {
		perror("fixture");
		return 1;
	}
	test_cache(&f);
	for (size_t i = 0; i < f.nldd; i++)
		free(f.ldd[i]);
	snprintf(cmd, sizeof cmd, "rm -rf %s", f.dir);
	if (system(cmd) != 0)
		printf("# unable to remove %s\n", f.dir);
	return tap_done();
}
