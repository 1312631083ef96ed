/* subjects.c - the live host's subjects (subjects.h): hashed files and
 * the canonical ruleset, each named as an attestation names it. */
#include "subjects.h"
#include "config.h"
#include "image.h"
#include "ruleset.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define QEMU_BIN "qemu-system-x86_64"

struct subjects {
	json_t *list;   /* [{name, digest:{sha256}, annotations?}] */
	json_t *errors; /* [{subject, why}]: what could not be read now */
	json_t *cache;  /* DIR/digests.json: {path: {stat..., sha256}} */
	int cache_dirty;
	int failed;     /* -1: the subjects cannot be listed */
	char *why;      /* its reason */
	size_t whysz;
};

static void oom(struct subjects *s)
{
	if (!s->failed)
		snprintf(s->why, s->whysz, "out of memory");
	s->failed = -1;
}

/* Hashing the 2.8 GiB debian base image (sparse, but every byte is hashed)
 * takes ~10 s of CPU, and the runner verifies before every job: a file
 * whose device, inode, size, mtime and ctime are those recorded with its
 * digest is not read again.  A write moves ctime,
 * and ctime cannot be set back (utimensat sets only atime and mtime), so a
 * changed file is always re-read.  The cache lives in the key directory
 * (root's alone, 0700), so nobody but root can plant a digest. */
static json_t *stat_json(const struct stat *st)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "dev", (json_int_t)st->st_dev,
			 "ino", (json_int_t)st->st_ino, "size", (json_int_t)st->st_size,
			 "mtime_s", (json_int_t)st->st_mtim.tv_sec, "mtime_ns",
			 (json_int_t)st->st_mtim.tv_nsec, "ctime_s", (json_int_t)st->st_ctim.tv_sec,
			 "ctime_ns", (json_int_t)st->st_ctim.tv_nsec);
}

/* A file system whose server or daemon decides what a read returns, and
 * whose inode times it reports: its stat proves nothing about the bytes. */
static int stat_trustworthy(int fd)
{
	struct statfs sf;

	if (fstatfs(fd, &sf) < 0)
		return 0;
	switch ((unsigned long)sf.f_type) {
	case 0x65735546UL: /* FUSE */
	case 0x6969UL:     /* NFS */
	case 0xFF534D42UL: /* CIFS */
	case 0xFE534D42UL: /* SMB2 */
	case 0x01021997UL: /* 9P */
	case 0x00c36400UL: /* Ceph */
		return 0;
	default:
		return 1;
	}
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* One open: the stat compared with the cache, the bytes hashed and the
 * stat after are all of the same file (a rename in between cannot pair
 * one file's stat with another's digest). */
static int hash_file(struct subjects *s, const char *path, char hex[65])
{
	struct stat a, b;
	json_t *want, *have, *e;
	const char *k;
	int same = 1, fd, use, err;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	if (fstat(fd, &a) < 0)
		goto fail;
	if (!(have = stat_json(&a))) {
		oom(s);
		errno = ENOMEM;
		goto fail;
	}
	use = s->cache && S_ISREG(a.st_mode) && stat_trustworthy(fd);
	e = use ? json_object_get(s->cache, path) : NULL;
	if (e && json_is_string(json_object_get(e, "sha256")) &&
	    hex64_ok(json_string_value(json_object_get(e, "sha256")))) {
		json_object_foreach(have, k, want)
			same &= json_equal(want, json_object_get(e, k));
		if (same) {
			memcpy(hex, json_string_value(json_object_get(e, "sha256")), 65);
			json_decref(have);
			close(fd);
			return 0;
		}
	}
	if (sha256_fd(fd, hex) < 0) {
		json_decref(have);
		goto fail;
	}
	/* Only what did not change while it was read is remembered. */
	if (use && fstat(fd, &b) == 0 && same_file(&a, &b)) {
		json_object_set_new(have, "sha256", json_string(hex));
		json_object_set_new(s->cache, path, have);
		s->cache_dirty = 1;
	} else {
		json_decref(have);
	}
	close(fd);
	return 0;
fail:
	err = errno;
	close(fd);
	errno = err;
	return -1;
}

static void subj_add(struct subjects *s, const char *name, const char *hex, const char *path)
{
	json_t *o = json_pack("{s:s, s:{s:s}}", "name", name, "digest", "sha256", hex);

	if (o && path)
		json_object_set_new(o, "annotations", json_pack("{s:s}", "path", path));
	if (!o || json_array_append_new(s->list, o) < 0)
		oom(s);
}

static void subj_err(struct subjects *s, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void subj_err(struct subjects *s, const char *name, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (json_array_append_new(s->errors, json_pack("{s:s, s:s}", "subject", name, "why", why)) < 0)
		oom(s);
}

/* A missing file is hashed as empty only where absence means "nothing
 * configured" (optional); elsewhere it is an error naming the subject. */
static void subj_file(struct subjects *s, const char *name, const char *path, int optional)
{
	char hex[65];

	if (hash_file(s, path, hex) == 0) {
		subj_add(s, name, hex, path);
		return;
	}
	if (optional && errno == ENOENT) {
		sha256_hex("", 0, hex);
		subj_add(s, name, hex, path);
		return;
	}
	subj_err(s, name, "unable to read %s: %s", path, strerror(errno));
}

static void subj_ruleset(struct subjects *s)
{
	struct canon c = { 0 };
	char why[512], hex[65];
	char *text;
	size_t n;

	if (ruleset_read(&c, why, sizeof why) < 0) {
		subj_err(s, "ruleset/nftables", "%s", why);
	} else if (c.tables == 0) {
		subj_err(s, "ruleset/nftables",
			 "no table named %s in this network namespace (run isopod-netsetup)",
			 RULESET_TABLE);
	} else if (!(text = canon_text(&c, &n))) {
		oom(s);
	} else {
		sha256_hex(text, n, hex);
		subj_add(s, "ruleset/nftables", hex, NULL);
		free(text);
	}
	canon_free(&c);
}

/* QEMU as isopod's supervisor finds it: the first qemu-system-x86_64 on
 * PATH (execvp), recorded by its real path. */
static void subj_qemu(struct subjects *s)
{
	const char *path = getenv("PATH");
	char cand[PATH_MAX], real[PATH_MAX];
	const char *p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";

	while (*p) {
		size_t n = strcspn(p, ":");

		if (n && pathn(cand, sizeof cand, "%.*s/%s", (int)n, p, QEMU_BIN) == 0 &&
		    access(cand, X_OK) == 0 && realpath(cand, real)) {
			subj_file(s, "qemu", real, 0);
			return;
		}
		p += n + (p[n] == ':');
	}
	subj_err(s, "qemu", "%s is not on PATH", QEMU_BIN);
}

static void subj_kernel(struct subjects *s)
{
	struct img im = { 0 };
	char err[1024];

	if (resolve_kernel(&im, err, sizeof err) != 0) {
		subj_err(s, "kernel/vmlinux", "%s", err);
		subj_err(s, "kernel/initramfs", "%s", err);
		return;
	}
	subj_file(s, "kernel/vmlinux", im.vmlinux, 0);
	subj_file(s, "kernel/initramfs", im.initrd, 0);
}

static int name_sort(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static void subj_images(struct subjects *s)
{
	char dir[PATH_MAX], name[128], err[1024];
	struct dirent **ents;
	int n, i, found = 0;

	n = pathn(dir, sizeof dir, "%s/images", store_home()) < 0 ? -1 :
	    scandir(dir, &ents, NULL, name_sort);
	if (n < 0) {
		subj_err(s, "image", "unable to list %s: %s", dir, strerror(errno));
		return;
	}
	for (i = 0; i < n; i++) {
		const char *f = ents[i]->d_name;
		struct img im = { 0 };

		if (!strncmp(f, "current-", 8) && f[8] && strlen(f) < 72) {
			found++;
			snprintf(name, sizeof name, "image/%s", f + 8);
			if (resolve_base(&im, f + 8, NULL, err, sizeof err) != 0)
				subj_err(s, name, "%s", err);
			else
				subj_file(s, name, im.base, 0);
		}
		free(ents[i]);
	}
	free(ents);
	if (!found)
		subj_err(s, "image", "no base image registered in %s (run make images)", dir);
}

/* isopod's own programs: every isopod-* executable beside this one (or in
 * $ISOPOD_LIBEXEC, where the front end looks for them), and the front end
 * `isopod` there or, in a source tree, in ../sh. */
static void subj_bins(struct subjects *s)
{
	const char *e = getenv("ISOPOD_LIBEXEC");
	char self[PATH_MAX], dir[PATH_MAX], p[PATH_MAX], name[PATH_MAX];
	struct dirent **ents;
	struct stat st;
	int n, i;

	if (e && *e) {
		if (pathn(dir, sizeof dir, "%s", e) < 0) {
			subj_err(s, "bin", "ISOPOD_LIBEXEC: %s", strerror(errno));
			return;
		}
	} else {
		ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);

		if (l < 0) {
			snprintf(s->why, s->whysz, "unable to read /proc/self/exe: %s", strerror(errno));
			s->failed = -1;
			return;
		}
		self[l] = 0;
		snprintf(dir, sizeof dir, "%s", dirname(self));
	}
	n = scandir(dir, &ents, NULL, name_sort);
	if (n < 0) {
		subj_err(s, "bin", "unable to list %s: %s", dir, strerror(errno));
		return;
	}
	for (i = 0; i < n; i++) {
		const char *f = ents[i]->d_name, *dot = strchr(f, '.');

		/* the tools, and the library preloaded into every warm clone's
		 * QEMU (isopod-memro.so, lib/memro.c): its code runs there */
		if (!strncmp(f, "isopod-", 7) && (!dot || !strcmp(dot, ".so")) &&
		    pathn(p, sizeof p, "%s/%s", dir, f) == 0 && stat(p, &st) == 0 &&
		    S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
			snprintf(name, sizeof name, "bin/%s", f);
			subj_file(s, name, p, 0);
		}
		free(ents[i]);
	}
	free(ents);
	if (pathn(p, sizeof p, "%s/isopod", dir) == 0 && access(p, F_OK) == 0)
		subj_file(s, "bin/isopod", p, 0);
	else if (pathn(p, sizeof p, "%s/../sh/isopod", dir) == 0 && access(p, F_OK) == 0 &&
		 realpath(p, name))
		subj_file(s, "bin/isopod", name, 0);
	else
		subj_err(s, "bin/isopod", "the front end is neither in %s nor in %s/../sh", dir, dir);
}

/* The configuration isopod reads (sh/isopod, lib/ranges.c): the host's
 * file, then the user's.  An absent file configures nothing: hashed as
 * empty. */
static void subj_config(struct subjects *s)
{
	char p[PATH_MAX];

	subj_file(s, "config/host", config_host_file(), 1);
	if (config_user_file(p, sizeof p) == 0)
		subj_file(s, "config/user", p, 1);
	else
		subj_err(s, "config/user", "the user's configuration file: %s", strerror(errno));
}

int subjects_live(json_t *cache, int *dirty, json_t **list, json_t **errors, char *why,
		  size_t whysz)
{
	struct subjects s = { .list = json_array(), .errors = json_array(), .cache = cache,
			      .why = why, .whysz = whysz };

	*list = *errors = NULL;
	if (!s.list || !s.errors) {
		oom(&s);
	} else {
		subj_ruleset(&s);
		subj_qemu(&s);
		subj_kernel(&s);
		subj_images(&s);
		subj_bins(&s);
		subj_config(&s);
	}
	*dirty = s.cache_dirty;
	if (s.failed) {
		json_decref(s.list);
		json_decref(s.errors);
		return -1;
	}
	*list = s.list;
	*errors = s.errors;
	return 0;
}
