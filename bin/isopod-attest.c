/* isopod-attest - sign and verify what the doctor proved, about this host.
 *
 *   keygen   an Ed25519 key pair in a root-owned 0700 directory
 *   sign     a passing doctor report -> a DSSE envelope around an in-toto
 *            Statement v1 whose subjects are the live host's enforcement
 *            and code (ruleset, QEMU, kernel, bases, isopod's binaries,
 *            config) and whose predicate is the report's evidence
 *   verify   an envelope against a pinned public key and the live host now
 *
 * A containment check that cannot fail is worse than none: sign refuses an
 * empty report, any probe that did not pass and a report that is not
 * itself "pass"; verify is valid only when every check ran and passed, and
 * names the subject or field of every refusal.  man isopod-attest. */
#include "dsse.h"
#include "image.h"
#include "ruleset.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define USAGE "isopod-attest keygen [--dir DIR] [--force] | " \
	      "isopod-attest subjects [--dir DIR] | " \
	      "isopod-attest sign [--dir DIR] [--expires-s N] [--max-report-age-s N] [-o FILE] [REPORT] | " \
	      "isopod-attest verify [--dir DIR] [--pubkey FILE] [--state FILE] [--max-validity-s N] [ENVELOPE]"

#define DEFAULT_DIR "/etc/isopod/attest"
#define STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define PREDICATE_TYPE "urn:isopod:predicate:containment:v1"
#define EXPIRES_DEFAULT (24 * 3600)
#define EXPIRES_MAX (30 * 24 * 3600)
/* How old a doctor's report may be when signed: the host it tested is the
 * host signed only if little could change in between (and the subjects it
 * recorded are checked too).  --max-report-age-s sets it, up to a day. */
#define REPORT_AGE_DEFAULT 3600
#define REPORT_AGE_MAX (24 * 3600)
#define QEMU_BIN "qemu-system-x86_64"
/* A report from a clock a little ahead of ours is not "from the future". */
#define SKEW_S 60

/* ---- small helpers ----------------------------------------------------- */

static const char *key_dir(const char *opt)
{
	const char *e = getenv("ISOPOD_ATTEST_DIR");

	return opt ? opt : e && *e ? e : DEFAULT_DIR;
}

/* The key directory holds the private key: root's alone.  Checked before
 * every use, not only when made, so a later chmod is caught. */
static void check_dir(const char *dir)
{
	struct stat st;

	if (lstat(dir, &st) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to stat key directory %s:", dir);
	if (!S_ISDIR(st.st_mode))
		die(EX_SYS, "key directory %s is not a directory (or is a symlink)", dir);
	if (st.st_uid != 0 || (st.st_mode & 077))
		die(EX_SYS, "key directory %s must be owned by root with mode 0700 (is uid %ld, mode %04o)",
		    dir, (long)st.st_uid, (unsigned)(st.st_mode & 07777));
}

/* "<64 hex>\n" -> 32 bytes.  0, or -1 (errno; EINVAL when malformed). */
static int read_hex32(int fd, unsigned char out[32])
{
	char buf[80];
	size_t n = 0, hl;
	ssize_t r;

	while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		n += (size_t)r;
	}
	buf[n] = 0;
	if (n == 65 && buf[64] == '\n')
		buf[64] = 0, n = 64;
	if (n != 64 || sodium_hex2bin(out, 32, buf, 64, NULL, &hl, NULL) != 0 || hl != 32) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

static void load_sk(const char *dir, unsigned char pk[32], unsigned char sk[64])
{
	char p[PATH_MAX];
	unsigned char seed[DSSE_SEED_BYTES];
	struct stat st;
	int fd;

	check_dir(dir);
	pathf(p, sizeof p, "%s/key", dir);
	if ((fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS,
		    "unable to open the private key %s (isopod-attest keygen makes it):", p);
	if (fstat(fd, &st) < 0)
		die(EX_SYS, "unable to stat %s:", p);
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 077))
		die(EX_SYS, "private key %s must be a regular file owned by root with mode 0600 (is uid %ld, mode %04o)",
		    p, (long)st.st_uid, (unsigned)(st.st_mode & 07777));
	if (read_hex32(fd, seed) < 0)
		die(EX_SYS, "unable to read the private key %s:", p);
	close(fd);
	crypto_sign_seed_keypair(pk, sk, seed);
	sodium_memzero(seed, sizeof seed);
}

/* The pinned key decides everything verify says: root's, and nobody else
 * may write it (nor swap it for a symlink). */
static void load_pk(const char *path, unsigned char pk[32])
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to open the public key %s (or a symlink):", path);
	if (fstat(fd, &st) < 0)
		die(EX_SYS, "unable to stat %s:", path);
	if (!S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
		die(EX_SYS, "public key %s must be a regular file owned by root, not group- or world-writable (is uid %ld, mode %04o)",
		    path, (long)st.st_uid, (unsigned)(st.st_mode & 07777));
	if (read_hex32(fd, pk) < 0)
		die(EX_SYS, "unable to read the public key %s (64 hex digits):", path);
	close(fd);
}

/* The host's id: /etc/machine-id (systemd's, also written by Debian
 * without systemd).  The doctor's report names the same. */
static int machine_id(char out[64])
{
	int fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, out, 63);
	close(fd);
	if (n < 0)
		return -1;
	out[n] = 0;
	out[strcspn(out, "\n")] = 0;
	if (!*out) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* A JSON file of the key directory that only root may have written: a
 * regular file, not a symlink, root's, mode 0600.  NULL with errno
 * (EPERM: it exists but is not root's alone). */
static json_t *load_private(const char *path)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), e;
	struct stat st;
	json_t *j;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 ||
	    (st.st_mode & 07777) != 0600) {
		close(fd);
		errno = EPERM;
		return NULL;
	}
	j = json_load_fd(fd);
	e = errno;
	close(fd);
	errno = e;
	return j;
}

static char *iso_of(long long t, char buf[32])
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

/* ISO-8601 UTC exactly "YYYY-MM-DDTHH:MM:SSZ" -> epoch seconds; -1 if it
 * is anything else.  strptime alone takes spaces, one-digit fields and
 * out-of-range days (2026-02-31 is March 3rd): the text must also be what
 * the parsed time prints as. */
static long long iso_parse(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	struct tm tm = { 0 };
	char back[32];
	const char *e;
	long long t;
	size_t i;

	if (!s || strlen(s) != sizeof shape - 1)
		return -1;
	for (i = 0; shape[i]; i++)
		if (shape[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != shape[i])
			return -1;
	if (!(e = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) || *e)
		return -1;
	t = (long long)timegm(&tm);
	if (strcmp(iso_of(t, back), s))
		return -1;
	return t;
}

/* ---- the live subjects ------------------------------------------------- */

struct subjects {
	json_t *list;   /* [{name, digest:{sha256}, annotations?}] */
	json_t *errors; /* [{subject, why}]: what could not be read now */
	json_t *cache;  /* DIR/digests.json: {path: {stat..., sha256}} */
	int cache_dirty;
};

/* Hashing a 1.8 GiB base image takes ~10 s of CPU, and the runner verifies
 * before every job: a file whose device, inode, size, mtime and ctime are
 * those recorded with its digest is not read again.  A write moves ctime,
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

/* sha256 of what fd reads, from where it is (a fresh open: the start). */
static int hash_fd(int fd, char hex[65])
{
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES], buf[1 << 16];
	ssize_t r;

	crypto_hash_sha256_init(&st);
	while ((r = read(fd, buf, sizeof buf)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
	}
	crypto_hash_sha256_final(&st, h);
	sodium_bin2hex(hex, 65, h, sizeof h);
	return 0;
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
	if (!(have = stat_json(&a)))
		die(EX_SYS, "out of memory");
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
	if (hash_fd(fd, hex) < 0) {
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
		die(EX_SYS, "out of memory");
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
		die(EX_SYS, "out of memory");
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
		die(EX_SYS, "out of memory");
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

	pathf(dir, sizeof dir, "%s/images", store_home());
	n = scandir(dir, &ents, NULL, name_sort);
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
		pathf(dir, sizeof dir, "%s", e);
	} else {
		ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);

		if (l < 0)
			die(EX_SYS, "unable to read /proc/self/exe:");
		self[l] = 0;
		pathf(dir, sizeof dir, "%s", dirname(self));
	}
	n = scandir(dir, &ents, NULL, name_sort);
	if (n < 0) {
		subj_err(s, "bin", "unable to list %s: %s", dir, strerror(errno));
		return;
	}
	for (i = 0; i < n; i++) {
		const char *f = ents[i]->d_name;

		if (!strncmp(f, "isopod-", 7) && !strchr(f, '.') &&
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
	const char *e = getenv("ISOPOD_SYSCONFIG"), *x, *h;
	char p[PATH_MAX];

	subj_file(s, "config/host", e && *e ? e : "/etc/isopod/config", 1);
	if ((e = getenv("ISOPOD_CONFIG")) && *e)
		pathf(p, sizeof p, "%s", e);
	else if ((x = getenv("XDG_CONFIG_HOME")) && *x)
		pathf(p, sizeof p, "%s/isopod/config", x);
	else
		pathf(p, sizeof p, "%s/.config/isopod/config", (h = getenv("HOME")) && *h ? h : "/nonexistent");
	subj_file(s, "config/user", p, 1);
}

/* The live subjects; dir's digest cache is used and brought up to date
 * (an unreadable or malformed cache is only a cache: started afresh). */
static struct subjects live_subjects(const char *dir)
{
	struct subjects s = { .list = json_array(), .errors = json_array() };
	char p[PATH_MAX];

	if (!s.list || !s.errors)
		die(EX_SYS, "out of memory");
	pathf(p, sizeof p, "%s/digests.json", dir);
	if (!(s.cache = load_private(p))) {
		if (errno == EPERM)
			warn("digest cache %s is not root's 0600 file: ignored (every subject read afresh)", p);
		if (!(s.cache = json_object()))
			die(EX_SYS, "out of memory");
	}
	subj_ruleset(&s);
	subj_qemu(&s);
	subj_kernel(&s);
	subj_images(&s);
	subj_bins(&s);
	subj_config(&s);
	if (s.cache_dirty && json_write_atomic(p, s.cache) < 0)
		warn("unable to write the digest cache %s: %s", p, strerror(errno));
	json_decref(s.cache);
	s.cache = NULL;
	return s;
}

/* ---- keygen ------------------------------------------------------------ */

static int cmd_keygen(const char *dir, int force)
{
	unsigned char pk[32], sk[64];
	char p[PATH_MAX], parent[PATH_MAX], failed[PATH_MAX], hex[65], id[65], line[66];
	json_t *out;

	/* The parent (e.g. /etc/isopod) stays readable: config lives there. */
	pathf(parent, sizeof parent, "%s", dir);
	if (mkdir_p(dirname(parent), 0755, failed, sizeof failed) < 0)
		die(EX_SYS, "unable to make %s:", failed);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		die(EX_SYS, "unable to make %s:", dir);
	check_dir(dir);
	pathf(p, sizeof p, "%s/key", dir);
	if (!force && access(p, F_OK) == 0)
		die(EX_CONFLICT, "%s exists; --force replaces it (every attestation signed with it then fails to verify)", p);
	crypto_sign_keypair(pk, sk);
	/* The seed (the first half of libsodium's secret key) is the key. */
	sodium_bin2hex(line, 65, sk, DSSE_SEED_BYTES);
	line[64] = '\n';
	if (atomic_write(p, line, 65, 0600) < 0)
		die(EX_SYS, "unable to write %s:", p);
	sodium_memzero(line, sizeof line);
	sodium_memzero(sk, sizeof sk);
	sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
	memcpy(line, hex, 64);
	line[64] = '\n';
	pathf(p, sizeof p, "%s/key.pub", dir);
	if (atomic_write(p, line, 65, 0644) < 0 || chmod(p, 0644) < 0)
		die(EX_SYS, "unable to write %s:", p);
	dsse_keyid(pk, id);
	out = json_pack("{s:s, s:s, s:s, s:s}", "public_key", hex, "key_id", id, "dir", dir,
			"public_key_file", p);
	json_emit(out);
	json_decref(out);
	return 0;
}

/* ---- sign -------------------------------------------------------------- */

/* A probe's verdict is the doctor's conclusion; the steps are its evidence,
 * and sign believes the conclusion only when the evidence says the same:
 * exactly the five steps of issue 10, in order, the VM alive, the tools
 * there, the control (the same path, allowed) through, the attempt
 * blocked, and the host's evidence of the block seen. */
static void check_steps(const char *name, json_t *steps)
{
	static const struct {
		const char *step;
		int ok;
	} want[] = {
		{ .step = "liveness", .ok = 1 }, { .step = "tooling", .ok = 1 },
		{ .step = "control", .ok = 1 },  { .step = "attempt", .ok = 0 },
		{ .step = "evidence", .ok = 1 },
	};
	size_t k, n = sizeof want / sizeof *want;

	if (json_array_size(steps) != n)
		die(EX_GUEST, "report: probe %s: %zu steps, not the %zu of a probe (liveness, tooling, control, attempt, evidence)",
		    EXC(name), json_array_size(steps), n);
	for (k = 0; k < n; k++) {
		json_t *st = json_array_get(steps, k), *ok = json_object_get(st, "ok");
		const char *sn = json_string_value(json_object_get(st, "step"));

		if (!sn || strcmp(sn, want[k].step))
			die(EX_GUEST, "report: probe %s: step %zu is %s, not %s", EXC(name), k + 1,
			    sn ? EXC(sn) : "missing", want[k].step);
		if (!json_is_boolean(ok))
			die(EX_GUEST, "report: probe %s: step %s: ok is missing or not a boolean",
			    EXC(name), want[k].step);
		if (json_is_true(ok) != want[k].ok)
			die(EX_GUEST, "report: probe %s: step %s: ok %s (%s), yet the probe says pass",
			    EXC(name), want[k].step, want[k].ok ? "false" : "true",
			    want[k].ok ? "it must succeed" : "the attempt must be blocked");
	}
}

/* counts: {probes, pass, fail, error}, each an integer, that agree with
 * the probes (all of which passed by now). */
static void check_counts(json_t *counts, size_t n)
{
	static const char *const key[] = { "probes", "pass", "fail", "error" };
	size_t k;

	if (!json_is_object(counts))
		die(EX_USAGE, "report: counts is missing or not an object");
	for (k = 0; k < sizeof key / sizeof *key; k++) {
		json_t *c = json_object_get(counts, key[k]);
		json_int_t want = k < 2 ? (json_int_t)n : 0;

		if (!json_is_integer(c))
			die(EX_USAGE, "report: counts.%s is missing or not an integer", key[k]);
		if (json_integer_value(c) != want)
			die(EX_GUEST, "report: counts.%s is %lld, but the probes say %lld", key[k],
			    (long long)json_integer_value(c), (long long)want);
	}
}

/* The doctor's report (doc/INTERFACES.md "Doctor report"): refuse unless
 * it says pass, has at least one probe, and every probe passed. */
static void check_report(json_t *rep, const char *mid, long long now, long long expires_s,
			 long long max_age, long long *fin_out)
{
	json_t *probes = json_object_get(rep, "probes"), *p, *host = json_object_get(rep, "host");
	const char *v = json_string_value(json_object_get(rep, "verdict"));
	const char *hid = json_string_value(json_object_get(host, "id"));
	const char *ver = json_string_value(json_object_get(json_object_get(rep, "doctor"), "version"));
	long long st = iso_parse(json_string_value(json_object_get(rep, "started")));
	long long fin = iso_parse(json_string_value(json_object_get(rep, "finished")));
	size_t i, j;

	if (!v)
		die(EX_USAGE, "report: verdict is missing or not a string");
	if (!json_is_array(probes))
		die(EX_USAGE, "report: probes is missing or not an array");
	if (json_array_size(probes) == 0)
		die(EX_GUEST, "report: no probes; a report that tested nothing never signs");
	json_array_foreach(probes, i, p) {
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *cls = json_string_value(json_object_get(p, "class"));
		const char *pv = json_string_value(json_object_get(p, "verdict"));
		json_t *steps = json_object_get(p, "steps");

		if (!name || !*name || !cls || !*cls)
			die(EX_USAGE, "report: probe %zu has no name or class", i);
		if (!pv)
			die(EX_USAGE, "report: probe %s: verdict is missing", EXC(name));
		if (strcmp(pv, "pass"))
			die(EX_GUEST, "report: probe %s (class %s): verdict %s, not pass", EXC(name),
			    EXC(cls), EXC(pv));
		if (!json_is_array(steps) || json_array_size(steps) == 0)
			die(EX_USAGE, "report: probe %s: no steps (a pass without evidence)", EXC(name));
		check_steps(name, steps);
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(probes, j), "name"))))
				die(EX_USAGE, "report: probe %s appears twice", EXC(name));
	}
	if (strcmp(v, "pass"))
		die(EX_GUEST, "report: verdict %s, not pass", EXC(v));
	check_counts(json_object_get(rep, "counts"), json_array_size(probes));
	if (!hid)
		die(EX_USAGE, "report: host.id is missing");
	if (strcmp(hid, mid))
		die(EX_USAGE, "report: host.id %s is not this host's (%s)", EXC(hid), mid);
	if (!ver)
		die(EX_USAGE, "report: doctor.version is missing");
	if (st < 0)
		die(EX_USAGE, "report: started is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < 0)
		die(EX_USAGE, "report: finished is missing or not YYYY-MM-DDTHH:MM:SSZ");
	if (fin < st)
		die(EX_USAGE, "report: finished is before started");
	if (fin > now + SKEW_S)
		die(EX_USAGE, "report: finished is in the future");
	if (fin + expires_s <= now)
		die(EX_GUEST, "report: finished %s, already older than the expiry (%lld s)",
		    json_string_value(json_object_get(rep, "finished")), expires_s);
	if (fin + max_age < now)
		die(EX_GUEST, "report: finished %s, older than the %lld s a report may be (--max-report-age-s)",
		    json_string_value(json_object_get(rep, "finished")), max_age);
	*fin_out = fin;
}

/* The subjects the doctor recorded when it started (isopod-attest
 * subjects) must be the live ones now: what it tested is what is signed.
 * Each difference is named on stderr. */
static void check_report_subjects(json_t *rep, json_t *live)
{
	json_t *rs = json_object_get(rep, "subjects"), *e, *l;
	size_t i, j, bad = 0;

	if (!json_is_array(rs) || json_array_size(rs) == 0)
		die(EX_USAGE, "report: subjects is missing or empty (the doctor records isopod-attest subjects before its probes)");
	json_array_foreach(rs, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *d = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));

		if (!name || !d)
			die(EX_USAGE, "report: subjects entry %zu has no name or no digest.sha256", i);
		for (j = 0; j < i; j++)
			if (!strcmp(name, json_string_value(json_object_get(json_array_get(rs, j), "name"))))
				die(EX_USAGE, "report: subject %s appears twice", EXC(name));
	}
	json_array_foreach(live, i, l) {
		const char *name = json_string_value(json_object_get(l, "name"));
		const char *have = json_string_value(json_object_get(json_object_get(l, "digest"), "sha256"));
		const char *want = NULL;

		json_array_foreach(rs, j, e)
			if (!strcmp(name, json_string_value(json_object_get(e, "name"))))
				want = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));
		if (!want)
			warn("subject %s: on this host now, but not in the report", name), bad++;
		else if (strcmp(want, have))
			warn("subject %s: the doctor tested %.16s…, live now %.16s…", name, EXC(want), have), bad++;
	}
	json_array_foreach(rs, j, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		int found = 0;

		json_array_foreach(live, i, l)
			found |= !strcmp(name, json_string_value(json_object_get(l, "name")));
		if (!found)
			warn("subject %s: in the report, but not on this host now", EXC(name)), bad++;
	}
	if (bad)
		die(EX_GUEST, "report: %zu subject(s) differ from the live host's: the doctor did not test this host as it is now", bad);
}

/* The sequence number: only grows, one signer at a time, the new value
 * on disk before anything is signed with it. */
static long long next_sequence(const char *dir)
{
	char p[PATH_MAX], l[PATH_MAX], buf[32];
	long long n = 0;
	ssize_t r;
	int lk, fd;

	pathf(l, sizeof l, "%s/sequence.lock", dir);
	pathf(p, sizeof p, "%s/sequence", dir);
	if ((lk = lock_open(l, LOCK_EX)) < 0)
		die(EX_SYS, "unable to lock %s:", l);
	if ((fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		r = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (r < 0)
			die(EX_SYS, "unable to read %s:", p);
		buf[r] = 0;
		buf[strcspn(buf, "\n")] = 0;
		if (parse_ll(buf, 0, (1LL << 53) - 2, &n) < 0)
			die(EX_SYS, "%s: not a sequence number: %s", p, EXC(buf));
	} else if (errno != ENOENT) {
		die(EX_SYS, "unable to open %s:", p);
	}
	n++;
	snprintf(buf, sizeof buf, "%lld\n", n);
	if (atomic_write(p, buf, strlen(buf), 0600) < 0)
		die(EX_SYS, "unable to write %s:", p);
	close(lk);
	return n;
}

static int cmd_sign(const char *dir, long long expires_s, long long max_age, const char *report,
		    const char *outp)
{
	unsigned char pk[32], sk[64];
	char id[65], mid[64], t_signed[32], t_exp[32];
	long long now = wall_ms() / 1000, fin = 0, seq;
	json_t *rep, *stmt, *env, *pred;
	struct subjects s;
	char *body, *envs;
	size_t i;
	json_t *e;

	if (machine_id(mid) < 0)
		die(EX_SYS, "unable to read /etc/machine-id:");
	if (!report || !strcmp(report, "-")) {
		rep = json_read_stdin();
	} else if (!(rep = json_load_path(report))) {
		die(errno == ENOENT ? EX_NOTFOUND : errno == EINVAL || errno == EFBIG ? EX_USAGE : EX_SYS,
		    "unable to read the report %s:", report);
	}
	check_report(rep, mid, now, expires_s, max_age, &fin);
	load_sk(dir, pk, sk);
	dsse_keyid(pk, id);
	s = live_subjects(dir);
	if (json_array_size(s.errors)) {
		json_array_foreach(s.errors, i, e)
			warn("subject %s: %s", json_string_value(json_object_get(e, "subject")),
			     json_string_value(json_object_get(e, "why")));
		die(EX_SYS, "unable to attest: %zu subject(s) cannot be read on this host now",
		    json_array_size(s.errors));
	}
	check_report_subjects(rep, s.list);
	seq = next_sequence(dir);
	/* Expiry counts from the end of the doctor's run: the evidence's age,
	 * not the signature's. */
	iso_of(fin + expires_s, t_exp);
	iso_of(now, t_signed);
	pred = json_pack("{s:O, s:O, s:O, s:O, s:s, s:s, s:I, s:s, s:s, s:O*, s:O}",
			 "host", json_object_get(rep, "host"),
			 "doctor", json_object_get(rep, "doctor"),
			 "started", json_object_get(rep, "started"),
			 "finished", json_object_get(rep, "finished"),
			 "signed", t_signed, "expires", t_exp, "sequence", (json_int_t)seq,
			 "key_id", id, "verdict", "pass",
			 "counts", json_object_get(rep, "counts"),
			 "probes", json_object_get(rep, "probes"));
	stmt = json_pack("{s:s, s:O, s:s, s:o}", "_type", STATEMENT_TYPE, "subject", s.list,
			 "predicateType", PREDICATE_TYPE, "predicate", pred);
	if (!pred || !stmt || !(body = json_dumps(stmt, JSON_COMPACT)))
		die(EX_SYS, "out of memory");
	if (!(env = dsse_sign(sk, id, DSSE_INTOTO_TYPE, body, strlen(body))))
		die(EX_SYS, "out of memory");
	sodium_memzero(sk, sizeof sk);
	if (outp) {
		json_t *sum;

		if (!(envs = json_dumps(env, JSON_COMPACT)))
			die(EX_SYS, "out of memory");
		i = strlen(envs);
		envs = realloc(envs, i + 2);
		if (!envs)
			die(EX_SYS, "out of memory");
		envs[i] = '\n', envs[i + 1] = 0;
		if (atomic_write(outp, envs, i + 1, 0644) < 0)
			die(EX_SYS, "unable to write %s:", outp);
		free(envs);
		sum = json_pack("{s:s, s:s, s:I, s:s, s:i}", "envelope", outp, "key_id", id,
				"sequence", (json_int_t)seq, "expires", t_exp, "subjects",
				(int)json_array_size(s.list));
		json_emit(sum);
		json_decref(sum);
	} else {
		json_emit(env);
	}
	free(body);
	json_decref(env);
	json_decref(stmt);
	json_decref(s.list);
	json_decref(s.errors);
	json_decref(rep);
	return 0;
}

/* ---- subjects ---------------------------------------------------------- */

/* What the doctor records before its probes, and sign compares. */
static int cmd_subjects(const char *dir)
{
	struct subjects s;
	json_t *e, *out;
	size_t i;

	check_dir(dir);
	s = live_subjects(dir);
	if (json_array_size(s.errors)) {
		json_array_foreach(s.errors, i, e)
			warn("subject %s: %s", json_string_value(json_object_get(e, "subject")),
			     json_string_value(json_object_get(e, "why")));
		die(EX_SYS, "%zu subject(s) cannot be read on this host now", json_array_size(s.errors));
	}
	if (!(out = json_pack("{s:o}", "subjects", s.list)))
		die(EX_SYS, "out of memory");
	json_emit(out);
	json_decref(out);
	json_decref(s.errors);
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

static void fail_(json_t *f, const char *kind, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail_(json_t *f, const char *kind, const char *what, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (json_array_append_new(f, json_pack("{s:s, s:s}", kind, what, "why", why)) < 0)
		die(EX_SYS, "out of memory");
}
#define FIELD(f, name, ...) fail_(f, "field", name, __VA_ARGS__)
#define SUBJECT(f, name, ...) fail_(f, "subject", name, __VA_ARGS__)

/* The last sequence number verify accepted for this key: a replay of an
 * older attestation is refused even while it has not expired. */
static long long seen_read(const char *path)
{
	json_t *j = load_private(path);
	long long n;

	if (!j) {
		if (errno == ENOENT)
			return 0;
		if (errno == EPERM)
			die(EX_SYS, "verify state %s must be a regular file owned by root with mode 0600", path);
		die(EX_SYS, "unable to read the verify state %s:", path);
	}
	if (!json_is_integer(json_object_get(j, "sequence")))
		die(EX_SYS, "verify state %s: no sequence", path);
	n = (long long)json_integer_value(json_object_get(j, "sequence"));
	json_decref(j);
	return n;
}

/* The signer's counter, DIR/sequence: signer and verifier share the host,
 * so only the newest attestation is valid, whatever the verifier's own
 * state says (a deleted state file must not let an older one back in).
 * -1 with why when missing or not root's. */
static long long signer_sequence(const char *dir, char *why, size_t whysz)
{
	char p[PATH_MAX], buf[32];
	struct stat st;
	long long n;
	ssize_t r;
	int fd;

	pathf(p, sizeof p, "%s/sequence", dir);
	if ((fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		snprintf(why, whysz, "unable to read the signer's counter %.300s: %s", p, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
		close(fd);
		snprintf(why, whysz, "the signer's counter %.300s is not root's regular file", p);
		return -1;
	}
	r = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[r > 0 ? r : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	if (parse_ll(buf, 1, (1LL << 53) - 1, &n) < 0) {
		snprintf(why, whysz, "the signer's counter %.300s is not a sequence number", p);
		return -1;
	}
	return n;
}

/* started <= finished <= signed < expires, and expires no further from
 * the evidence than the verifier's policy allows (--max-validity-s). */
static void check_times(json_t *fails, json_t *pred, long long exp, long long max_valid)
{
	static const char *const key[] = { "started", "finished", "signed" };
	long long t[3];
	size_t k;

	for (k = 0; k < 3; k++)
		if ((t[k] = iso_parse(json_string_value(json_object_get(pred, key[k])))) < 0) {
			fail_(fails, "field", key[k] == key[0] ? "predicate.started" : key[k] == key[1] ?
			      "predicate.finished" : "predicate.signed", "missing or not YYYY-MM-DDTHH:MM:SSZ");
			return;
		}
	if (t[0] > t[1])
		FIELD(fails, "predicate.finished", "before started");
	if (t[1] > t[2])
		FIELD(fails, "predicate.signed", "before finished");
	if (exp >= 0 && t[2] >= exp)
		FIELD(fails, "predicate.expires", "not after signed");
	if (exp >= 0 && exp - t[1] > max_valid)
		FIELD(fails, "predicate.expires", "%lld s after finished, over the %lld s this verifier allows (--max-validity-s)",
		      exp - t[1], max_valid);
}

static void subjects_compare(const char *dir, json_t *fails, json_t *signed_list)
{
	struct subjects live = live_subjects(dir);
	json_t *e, *l;
	size_t i, j;

	json_array_foreach(live.errors, i, e)
		SUBJECT(fails, json_string_value(json_object_get(e, "subject")), "%s",
			json_string_value(json_object_get(e, "why")));
	json_array_foreach(signed_list, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *want = json_string_value(json_object_get(json_object_get(e, "digest"), "sha256"));
		int found = 0;
		json_t *sp, *lp;

		if (!name || !want) {
			FIELD(fails, "subject", "entry %zu has no name or no digest.sha256", i);
			continue;
		}
		json_array_foreach(live.list, j, l) {
			const char *have = json_string_value(json_object_get(json_object_get(l, "digest"), "sha256"));

			if (strcmp(name, json_string_value(json_object_get(l, "name"))))
				continue;
			found = 1;
			if (strcmp(want, have))
				SUBJECT(fails, name, "sha256 differs: signed %.16s…, live now %.16s…", want, have);
			/* The same bytes elsewhere is another host set-up (another
			 * PATH, ISOPOD_LIBEXEC, config): what was signed is not
			 * what this verifier's environment runs. */
			sp = json_object_get(json_object_get(e, "annotations"), "path");
			lp = json_object_get(json_object_get(l, "annotations"), "path");
			if ((sp || lp) && !json_equal(sp, lp))
				SUBJECT(fails, name, "path differs: signed %s, live now %s",
					EXC(json_string_value(json_object_get(json_object_get(e, "annotations"), "path")) ?: "none"),
					EXC(json_string_value(json_object_get(json_object_get(l, "annotations"), "path")) ?: "none"));
		}
		if (!found) {
			int err = 0;

			json_array_foreach(live.errors, j, l)
				err |= !strcmp(name, json_string_value(json_object_get(l, "subject")));
			if (!err)
				SUBJECT(fails, name, "signed, but not on this host now");
		}
	}
	/* Something new (a tool, a base image) was never attested. */
	json_array_foreach(live.list, j, l) {
		const char *name = json_string_value(json_object_get(l, "name"));
		int found = 0;

		json_array_foreach(signed_list, i, e)
			found |= json_is_string(json_object_get(e, "name")) &&
				 !strcmp(name, json_string_value(json_object_get(e, "name")));
		if (!found)
			SUBJECT(fails, name, "on this host now, but not signed");
	}
	json_decref(live.list);
	json_decref(live.errors);
}

static int cmd_verify(const char *dir, const char *pubp, const char *statep, const char *envp,
		      long long max_valid)
{
	unsigned char pk[32], *body = NULL;
	char id[65], p[PATH_MAX], st[PATH_MAX], lk[PATH_MAX], mid[64], why[512];
	const char *field = NULL, *type = NULL;
	json_t *env, *stmt = NULL, *pred = NULL, *fails = json_array(), *out;
	long long now = wall_ms() / 1000, seq = -1, last = 0, exp = -1, cur;
	size_t blen;
	int lock = -1, valid;

	if (!fails)
		die(EX_SYS, "out of memory");
	/* The state and the digest cache live here: root's alone, as for sign. */
	check_dir(dir);
	if (!pubp)
		pubp = pathf(p, sizeof p, "%s/key.pub", dir);
	load_pk(pubp, pk);
	dsse_keyid(pk, id);
	if (statep)
		pathf(st, sizeof st, "%s", statep);
	else
		pathf(st, sizeof st, "%s/verified-%.16s.json", dir, id);
	pathf(lk, sizeof lk, "%s.lock", st);

	if (!envp || !strcmp(envp, "-"))
		env = json_load_fd(0);
	else
		env = json_load_path(envp);
	if (!env) {
		if (errno != EINVAL && errno != EFBIG)
			die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read the envelope %s:",
			    envp ? envp : "-");
		FIELD(fails, "envelope", "not one JSON object (or a duplicate key, or over 1 MiB)");
		goto done;
	}
	/* Signature first: nothing of the payload is believed before it. */
	if (dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) < 0) {
		FIELD(fails, field, "%s", why);
		goto done;
	}
	if (strcmp(type, DSSE_INTOTO_TYPE)) {
		FIELD(fails, "payloadType", "%s, not %s", EXC(type), DSSE_INTOTO_TYPE);
		goto done;
	}
	if (!(stmt = json_parse((const char *)body, blen, 0, why, sizeof why))) {
		FIELD(fails, "payload", "not a JSON object: %s", why);
		goto done;
	}
	if (!json_is_string(json_object_get(stmt, "_type")) ||
	    strcmp(json_string_value(json_object_get(stmt, "_type")), STATEMENT_TYPE))
		FIELD(fails, "_type", "not %s", STATEMENT_TYPE);
	if (!json_is_string(json_object_get(stmt, "predicateType")) ||
	    strcmp(json_string_value(json_object_get(stmt, "predicateType")), PREDICATE_TYPE))
		FIELD(fails, "predicateType", "not %s", PREDICATE_TYPE);
	pred = json_object_get(stmt, "predicate");
	exp = iso_parse(json_string_value(json_object_get(pred, "expires")));
	if (exp < 0)
		FIELD(fails, "predicate.expires", "missing or not YYYY-MM-DDTHH:MM:SSZ");
	else if (now >= exp)
		FIELD(fails, "predicate.expires", "expired at %s",
		      json_string_value(json_object_get(pred, "expires")));
	check_times(fails, pred, exp, max_valid);
	if (!json_is_integer(json_object_get(pred, "sequence")) ||
	    (seq = (long long)json_integer_value(json_object_get(pred, "sequence"))) < 1) {
		FIELD(fails, "predicate.sequence", "missing or not a positive integer");
		seq = -1;
	} else {
		if ((lock = lock_open(lk, LOCK_EX)) < 0)
			die(EX_SYS, "unable to lock %s:", lk);
		last = seen_read(st);
		if (seq < last)
			FIELD(fails, "predicate.sequence",
			      "%lld is older than the last one verified (%lld): a replay", seq, last);
		else if ((cur = signer_sequence(dir, why, sizeof why)) < 0)
			FIELD(fails, "predicate.sequence", "%s", why);
		else if (seq != cur)
			FIELD(fails, "predicate.sequence",
			      "%lld is not the signer's latest (%lld): an older attestation", seq, cur);
	}
	if (machine_id(mid) < 0)
		die(EX_SYS, "unable to read /etc/machine-id:");
	if (!json_is_string(json_object_get(json_object_get(pred, "host"), "id")) ||
	    strcmp(json_string_value(json_object_get(json_object_get(pred, "host"), "id")), mid))
		FIELD(fails, "predicate.host.id", "not this host's (%s)", mid);
	if (!json_is_array(json_object_get(stmt, "subject")) ||
	    json_array_size(json_object_get(stmt, "subject")) == 0)
		FIELD(fails, "subject", "missing or empty");
	else
		subjects_compare(dir, fails, json_object_get(stmt, "subject"));
done:
	valid = json_array_size(fails) == 0;
	if (valid && seq > last) {
		json_t *rec = json_pack("{s:s, s:I, s:s}", "key_id", id, "sequence", (json_int_t)seq,
					"verified", iso_of(now, why));

		if (!rec || json_write_atomic(st, rec) < 0)
			die(EX_SYS, "unable to record the sequence in %s:", st);
		json_decref(rec);
	}
	if (lock >= 0)
		close(lock);
	out = json_pack("{s:b, s:s, s:o, s:o, s:O}", "valid", valid, "key_id", id,
			"sequence", seq > 0 ? json_integer(seq) : json_null(),
			"expires", exp >= 0 ? json_string(iso_of(exp, why)) : json_null(),
			"failures", fails);
	json_emit(out);
	json_decref(out);
	json_decref(fails);
	json_decref(stmt);
	json_decref(env);
	free(body);
	return valid ? 0 : EX_GUEST;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "force", no_argument, NULL, 'f' },
		{ "expires-s", required_argument, NULL, 'e' },
		{ "pubkey", required_argument, NULL, 'p' },
		{ "state", required_argument, NULL, 's' },
		{ "max-report-age-s", required_argument, NULL, 'm' },
		{ "max-validity-s", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *verb, *dir = NULL, *pubp = NULL, *statep = NULL, *outp = NULL;
	long long expires_s = EXPIRES_DEFAULT, max_age = REPORT_AGE_DEFAULT, max_valid = -1;
	int c, force = 0;

	progname = "isopod-attest";
	umask(077);
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2)
		die(EX_USAGE, "usage: %s", USAGE);
	verb = argv[1];
	if (strcmp(verb, "keygen") && strcmp(verb, "sign") && strcmp(verb, "verify") &&
	    strcmp(verb, "subjects"))
		die(EX_USAGE, "unknown command %s; usage: %s", EXC(verb), USAGE);
	optind = 2;
	while ((c = getopt_long(argc, argv, "+ho:", lo, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'f': force = 1; break;
		case 'e':
			if (parse_ll(optarg, 1, EXPIRES_MAX, &expires_s) < 0)
				die(EX_USAGE, "--expires-s: 1 to %d seconds, not %s", EXPIRES_MAX, EXC(optarg));
			break;
		case 'm':
			if (parse_ll(optarg, 1, REPORT_AGE_MAX, &max_age) < 0)
				die(EX_USAGE, "--max-report-age-s: 1 to %d seconds, not %s", REPORT_AGE_MAX,
				    EXC(optarg));
			break;
		case 'v':
			if (parse_ll(optarg, 1, EXPIRES_MAX, &max_valid) < 0)
				die(EX_USAGE, "--max-validity-s: 1 to %d seconds, not %s", EXPIRES_MAX, EXC(optarg));
			break;
		case 'o': outp = optarg; break;
		case 'p': pubp = optarg; break;
		case 's': statep = optarg; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (sodium_init() < 0)
		die(EX_SYS, "unable to initialise libsodium");
	dir = key_dir(dir);
	if (!strcmp(verb, "keygen")) {
		if (optind != argc || pubp || statep || outp || expires_s != EXPIRES_DEFAULT ||
		    max_age != REPORT_AGE_DEFAULT || max_valid >= 0)
			die(EX_USAGE, "usage: %s", USAGE);
		return cmd_keygen(dir, force);
	}
	if (!strcmp(verb, "subjects")) {
		if (optind != argc || pubp || statep || outp || force || expires_s != EXPIRES_DEFAULT ||
		    max_age != REPORT_AGE_DEFAULT || max_valid >= 0)
			die(EX_USAGE, "usage: %s", USAGE);
		return cmd_subjects(dir);
	}
	if (!strcmp(verb, "sign")) {
		if (argc - optind > 1 || pubp || statep || force || max_valid >= 0)
			die(EX_USAGE, "usage: %s", USAGE);
		return cmd_sign(dir, expires_s, max_age, optind < argc ? argv[optind] : NULL, outp);
	}
	if (argc - optind > 1 || outp || force || expires_s != EXPIRES_DEFAULT ||
	    max_age != REPORT_AGE_DEFAULT)
		die(EX_USAGE, "usage: %s", USAGE);
	return cmd_verify(dir, pubp, statep, optind < argc ? argv[optind] : NULL,
			  max_valid < 0 ? EXPIRES_DEFAULT : max_valid);
}
