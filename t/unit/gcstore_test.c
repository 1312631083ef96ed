/* gcstore_test.c - lib/gcstore.c's sweeps return a path that does not fit
 * PATH_MAX (-1, errno ENAMETOOLONG, g->err "path too long: <its start>...")
 * to isopod-gc's main, which picks the exit status: the library never exits
 * (it used pathf, which did).  Each check runs in this process: had the
 * library exited, the program would end before its "N passed" line. */
#include "../../lib/proc.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/qemu.c"
#include "../../lib/vm.c"
#include "../../lib/tree.c"
#include "../../lib/tsc.c"
#include "../../lib/warm.c"
#include "../../lib/config.c"
#include "../../lib/ovtpl.c"
#include "../../lib/image.c" /* ovtpl's qcow2 header reader */
#include "../../lib/gcstore.c"

#include "tap.h"

#include <stdlib.h>

#define HA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

/* dir + "/" + c...: a path of exactly len bytes. */
static void long_path(char *out, size_t len, const char *dir)
{
	size_t n = strlen(dir);

	memcpy(out, dir, n);
	out[n] = '/';
	memset(out + n + 1, 'c', len - n - 1);
	out[len] = 0;
}

/* A template file at p: a qcow2 header of size bytes over base (its name
 * at offset 112, as qemu-img's header names the backing file). */
static void put_tpl(const char *p, unsigned long long size, const char *base)
{
	unsigned char h[112 + PATH_MAX] = "QFI\xfb";
	size_t n = strlen(base);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	for (int i = 0; i < 8; i++) {
		h[8 + i] = (unsigned char)(112ULL >> (56 - 8 * i));
		h[24 + i] = (unsigned char)(size >> (56 - 8 * i));
	}
	for (int i = 0; i < 4; i++)
		h[16 + i] = (unsigned char)(n >> (24 - 8 * i));
	memcpy(h + 112, base, n);
	if (fd < 0 || write(fd, h, 112 + n) != (ssize_t)(112 + n))
		perror(p);
	close(fd);
}

/* Templates made under an older key (another qemu-img: here the same
 * stand-in on PATH, its mtime changed, which is in the key) go with their
 * digest, and so does one without a header or over another base than its
 * name's; the current key's stay, for each size (the key is per size and
 * per base path: both come from the header, since gc names the store
 * /proc/self/fd/N/., not as the boots did). */
static void stale_templates(const char *dir, const char *home)
{
	struct gcstore w = { .trash_fd = -1 };
	struct timespec ts[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = 1000000000 } };
	char bin[PATH_MAX], img[PATH_MAX], base[PATH_MAX], old[PATH_MAX], olds[PATH_MAX],
		cur[PATH_MAX], curs[PATH_MAX], big[PATH_MAX], junk[PATH_MAX], other[PATH_MAX],
		p[PATH_MAX];
	char *path = getenv("PATH") ? strdup(getenv("PATH")) : NULL;
	json_t *gone = json_array();
	int fd;

	pathf(bin, sizeof bin, "%s/bin", dir);
	mkdir(bin, 0700);
	pathf(img, sizeof img, "%s/qemu-img", bin);
	close(open(img, O_WRONLY | O_CREAT, 0700));
	setenv("PATH", bin, 1);
	pathf(p, sizeof p, "%s/images", home);
	mkdir(p, 0700);
	pathf(p, sizeof p, "%s/overlays", home);
	mkdir(p, 0700);
	pathf(base, sizeof base, "%s/images/base-" HA ".img", home);
	close(open(base, O_WRONLY | O_CREAT, 0600));
	ok(overlay_tpl_path(base, 1LL << 31, old, sizeof old, olds, sizeof olds) == 0 &&
		   utimensat(AT_FDCWD, img, ts, 0) == 0 &&
		   overlay_tpl_path(base, 1LL << 31, cur, sizeof cur, curs, sizeof curs) == 0 &&
		   overlay_tpl_path(base, 1LL << 32, big, sizeof big, NULL, 0) == 0 && strcmp(old, cur),
	   "qemu-img replaced: another key, another template");
	put_tpl(old, 1ULL << 31, base);
	close(open(olds, O_WRONLY | O_CREAT, 0600));
	put_tpl(cur, 1ULL << 31, base);
	close(open(curs, O_WRONLY | O_CREAT, 0600));
	put_tpl(big, 1ULL << 32, base);
	pathf(junk, sizeof junk, "%s/overlays/" HA "-0123456789abcdef0123456789abcdef.qcow2", home);
	close(open(junk, O_WRONLY | O_CREAT, 0600));
	pathf(p, sizeof p, "%s/images/base-" HB ".img", home);
	pathf(other, sizeof other, "%s/overlays/" HA "-fedcba9876543210fedcba9876543210.qcow2", home);
	put_tpl(other, 1ULL << 31, p);
	/* the store as isopod-gc names it (bin/isopod-gc.c store_pin) */
	fd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(p, sizeof p, "/proc/self/fd/%d/.", fd);
	setenv("ISOPOD_HOME", p, 1);
	ok(prune_overlays(&w, gone) == 0 && json_array_size(gone) == 4,
	   "prune_overlays: a template of an older key and its digest, one without a header, one "
	   "over another base");
	setenv("ISOPOD_HOME", home, 1);
	close(fd);
	ok(access(old, F_OK) < 0 && access(olds, F_OK) < 0 && access(junk, F_OK) < 0 &&
		   access(other, F_OK) < 0,
	   "... removed");
	ok(access(cur, F_OK) == 0 && access(curs, F_OK) == 0 && access(big, F_OK) == 0,
	   "... the current key's kept, of each size");
	for (const char *const *f = (const char *const[]){ cur, curs, big, base, img, NULL }; *f; f++)
		unlink(*f);
	pathf(p, sizeof p, "%s/overlays", home);
	rmdir(p);
	pathf(p, sizeof p, "%s/images", home);
	rmdir(p);
	rmdir(bin);
	if (path)
		setenv("PATH", path, 1);
	free(path);
	json_decref(gone);
}

int main(void)
{
	static char root[8192], home[PATH_MAX], want[128];
	struct gcstore g = { .dry_run = 1, .trash_fd = -1 };
	json_t *out = json_array(), *busy = json_array(), *u;
	char tmpl[] = "/tmp/gcstore_test.XXXXXX";
	const char *dir = mkdtemp(tmpl);
	long long total = -1;

	if (!dir || !out || !busy)
		return 1;
	snprintf(home, sizeof home, "%s/store", dir);
	mkdir(home, 0700);
	setenv("ISOPOD_HOME", home, 1);
	/* A cache root that fits, but not with /kernel after it. */
	long_path(root, PATH_MAX - 4, dir);
	setenv("ISOPOD_CACHE", root, 1);
	snprintf(want, sizeof want, "path too long: %.64s...", root);
	errno = 0;
	ok(cache_sweep(&g, 0, out, busy) == -1 && errno == ENAMETOOLONG,
	   "cache_sweep: root/kind too long is -1 ENAMETOOLONG");
	ok(!strcmp(g.err, want), "cache_sweep: g->err names the path's start (%s)", g.err);
	/* A cache root that does not fit at all. */
	long_path(root, PATH_MAX + 100, dir);
	setenv("ISOPOD_CACHE", root, 1);
	g.err[0] = 0;
	errno = 0;
	ok(cache_sweep(&g, 0, out, busy) == -1 && errno == ENAMETOOLONG && !strcmp(g.err, want),
	   "cache_sweep: a root past PATH_MAX is -1 ENAMETOOLONG, named");
	ok(json_array_size(out) == 0 && json_array_size(busy) == 0, "nothing swept, nothing busy");
	/* A store whose paths do not fit. */
	long_path(root, PATH_MAX - 3, dir);
	setenv("ISOPOD_HOME", root, 1);
	snprintf(want, sizeof want, "path too long: %.64s...", root);
	g.err[0] = 0;
	errno = 0;
	ok(warm_evict(&g, 0, NULL, 0, out, out, &total) == -1 && errno == ENAMETOOLONG &&
		   !strcmp(g.err, want),
	   "warm_evict: store/warm too long is -1 ENAMETOOLONG, named");
	g.err[0] = 0;
	errno = 0;
	ok(prune_kernels(&g, NULL, 0, out, out) == -1 && errno == ENAMETOOLONG &&
		   !strcmp(g.err, want),
	   "prune_kernels: store/kernels too long is -1 ENAMETOOLONG, named");
	g.err[0] = 0;
	errno = 0;
	ok(prune_overlays(&g, out) == -1 && errno == ENAMETOOLONG && !strcmp(g.err, want),
	   "prune_overlays: store/overlays too long is -1 ENAMETOOLONG, named");
	g.err[0] = 0;
	errno = 0;
	u = store_usage(&g);
	ok(!u && errno == ENAMETOOLONG && !strcmp(g.err, want),
	   "store_usage: store/kernels too long is NULL ENAMETOOLONG, named");
	json_decref(u);
	/* The store as it is: the sweeps run. */
	setenv("ISOPOD_HOME", home, 1);
	snprintf(root, sizeof root, "%s/cache", dir);
	setenv("ISOPOD_CACHE", root, 1);
	ok(cache_sweep(&g, 0, out, busy) == 0 && warm_evict(&g, 0, NULL, 0, out, out, &total) == 0 &&
		   total == 0 && prune_kernels(&g, NULL, 0, out, out) == 0,
	   "a store and cache that fit: 0");
	ok((u = store_usage(&g)) != NULL, "store_usage of a store that fits: an object");
	ok(json_is_integer(json_object_get(u, "overlays")), "store_usage counts overlays/");
	json_decref(u);
	/* The overlay templates of a base that is gone go; the rest stay. */
	{
		struct gcstore w = { .trash_fd = -1 };
		static const char *const files[] = { "images/base-" HA ".img", "overlays/" HA "-k.qcow2",
						     "overlays/" HA "-k.sha256", "overlays/" HB "-k.qcow2",
						     "overlays/" HB "-k.sha256", "overlays/other",
						     "stages/st-aaaaaaaaaaaa/layer.qcow2",
						     "overlays/st-aaaaaaaaaaaa-k.qcow2",
						     "overlays/st-bbbbbbbbbbbb-k.qcow2",
						     "overlays/st-bbbbbbbbbbbb-k.sha256", NULL };
		json_t *gone = json_array();
		char p[PATH_MAX];

		pathf(p, sizeof p, "%s/images", home);
		mkdir(p, 0700);
		pathf(p, sizeof p, "%s/overlays", home);
		mkdir(p, 0700);
		pathf(p, sizeof p, "%s/stages", home);
		mkdir(p, 0700);
		pathf(p, sizeof p, "%s/stages/st-aaaaaaaaaaaa", home);
		mkdir(p, 0700);
		for (const char *const *f = files; *f; f++) {
			pathf(p, sizeof p, "%s/%s", home, *f);
			close(open(p, O_WRONLY | O_CREAT, 0600));
		}
		ok(prune_overlays(&w, gone) == 0 && json_array_size(gone) == 4,
		   "prune_overlays: the two files of the base that is gone, two of the stage's layer");
		pathf(p, sizeof p, "%s/overlays/" HB "-k.qcow2", home);
		ok(access(p, F_OK) < 0, "... removed");
		pathf(p, sizeof p, "%s/overlays/" HA "-k.qcow2", home);
		ok(access(p, F_OK) == 0, "... those of a base still there kept");
		pathf(p, sizeof p, "%s/overlays/other", home);
		ok(access(p, F_OK) == 0, "... and a name not a template's kept");
		pathf(p, sizeof p, "%s/overlays/st-bbbbbbbbbbbb-k.sha256", home);
		ok(access(p, F_OK) < 0, "... a stage's whose layer is gone removed");
		pathf(p, sizeof p, "%s/overlays/st-aaaaaaaaaaaa-k.qcow2", home);
		ok(access(p, F_OK) == 0, "... one whose layer is there kept");
		for (const char *const *f = files; *f; f++) {
			pathf(p, sizeof p, "%s/%s", home, *f);
			unlink(p);
		}
		pathf(p, sizeof p, "%s/stages/st-aaaaaaaaaaaa", home);
		rmdir(p);
		pathf(p, sizeof p, "%s/stages", home);
		rmdir(p);
		pathf(p, sizeof p, "%s/overlays", home);
		rmdir(p);
		/* overlays/ a link to another directory (root's gc on a user's
		 * store): not followed, nothing there removed */
		{
			char victim[PATH_MAX];

			pathf(victim, sizeof victim, "%s/victim", dir);
			mkdir(victim, 0700);
			pathf(p, sizeof p, "%s/" HB "-k.qcow2", victim);
			close(open(p, O_WRONLY | O_CREAT, 0600));
			pathf(p, sizeof p, "%s/overlays", home);
			ok(symlink(victim, p) == 0, "overlays/ a symlink to another directory");
			ok(prune_overlays(&w, gone) == 0 && json_array_size(gone) == 4,
			   "prune_overlays: a symlinked overlays/ is not swept");
			unlink(p);
			pathf(p, sizeof p, "%s/" HB "-k.qcow2", victim);
			ok(access(p, F_OK) == 0, "... the file it points at kept");
			unlink(p);
			rmdir(victim);
		}
		pathf(p, sizeof p, "%s/images", home);
		rmdir(p);
		json_decref(gone);
	}
	stale_templates(dir, home);
	json_decref(out);
	json_decref(busy);
	rmdir(home);
	rmdir(dir);
	return tap_done();
}
