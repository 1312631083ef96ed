/* attest.c - isopod-attest's work as a library (attest.h): the key
 * directory, the live subjects, sign and verify.  Nothing here exits:
 * every failure is a negative ATTEST_E* class with a reason, and the tool
 * (or the runner) decides what it means.  man isopod-attest. */
#include "attest.h"
#include "dsse.h"
#include "report.h"
#include "subjects.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>


/* ---- the key directory ------------------------------------------------ */

const char *attest_key_dir(const char *opt)
{
	const char *e = getenv("ISOPOD_ATTEST_DIR");

	return opt ? opt : e && *e ? e : ATTEST_DEFAULT_DIR;
}

/* The key directory holds the private key: root's alone.  Checked on the
 * descriptor every use goes through, before every use, not only when made,
 * so a later chmod is caught and a later rename or symlink changes
 * nothing. */
int attest_dir_open(struct attest_dir *d, const char *path, char *why, size_t whysz)
{
	struct stat st;
	int cls;

	d->fd = -1;
	if (pathn(d->path, sizeof d->path, "%s", path) < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "key directory %s:", EXC(path));
	if ((d->fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
		if (errno == ENOTDIR || errno == ELOOP)
			return reason_code(ATTEST_ESYS, why, whysz,
				    "key directory %s is not a directory (or is a symlink)", path);
		return reason_code(errno == ENOENT ? ATTEST_ENOTFOUND : ATTEST_ESYS, why, whysz,
			    "unable to open key directory %s:", path);
	}
	if (fstat(d->fd, &st) < 0)
		cls = reason_code(ATTEST_ESYS, why, whysz, "unable to stat key directory %s:", path);
	else if (!S_ISDIR(st.st_mode))
		cls = reason_code(ATTEST_ESYS, why, whysz, "key directory %s is not a directory (or is a symlink)", path);
	else if (st.st_uid != 0 || (st.st_mode & 077))
		cls = reason_code(ATTEST_ESYS, why, whysz,
			   "key directory %s must be owned by root with mode 0700 (is uid %ld, mode %04o)",
			   path, (long)st.st_uid, (unsigned)(st.st_mode & 07777));
	else
		return 0;
	attest_dir_close(d);
	return cls;
}

void attest_dir_close(struct attest_dir *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

/* A file of the directory, as diagnostics name it (always fits: the
 * directory's path is under PATH_MAX, the names are short). */
#define SHOWN_SZ (PATH_MAX + 64)
static char *shown(const struct attest_dir *d, const char *name, char out[SHOWN_SZ])
{
	snprintf(out, SHOWN_SZ, "%s/%s", d->path, name);
	return out;
}

/* The same file through the checked descriptor, for the helpers that take
 * a path (atomic_write's temporary file and rename, lock_open): the
 * kernel resolves /proc/self/fd/N to the directory opened, whatever has
 * been renamed or swapped in at its path since. */
#define VIA_SZ 96
static char *via(const struct attest_dir *d, const char *name, char out[VIA_SZ])
{
	snprintf(out, VIA_SZ, "/proc/self/fd/%d/%s", d->fd, name);
	return out;
}

/* The one way a file that decides what isopod-attest says is opened: not
 * through a symlink, a regular file, root's, (mode & mask) == want.  at is
 * the key directory's descriptor or AT_FDCWD.  The descriptor, or -1 with
 * errno (EPERM: it is there but not as it must be; *st says how). */
static int open_owned(int at, const char *name, mode_t mask, mode_t want, struct stat *st)
{
	int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), e;

	if (fd < 0)
		return -1;
	if (fstat(fd, st) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if (!S_ISREG(st->st_mode) || st->st_uid != 0 || (st->st_mode & mask) != want) {
		close(fd);
		errno = EPERM;
		return -1;
	}
	return fd;
}

/* "<64 hex>\n" -> 32 bytes.  0, or -1 (errno; EINVAL when malformed). */
static int read_hex32(int fd, unsigned char out[32])
{
	char buf[80];
	size_t n = 0, hl;
	ssize_t r;
	int e, ok;

	while (n < sizeof buf - 1 && (r = read(fd, buf + n, sizeof buf - 1 - n)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			e = errno;
			sodium_memzero(buf, sizeof buf);
			errno = e;
			return -1;
		}
		n += (size_t)r;
	}
	buf[n] = 0;
	if (n == 65 && buf[64] == '\n')
		buf[64] = 0, n = 64;
	/* buf may be the private seed in hex: wiped on every path */
	ok = n == 64 && sodium_hex2bin(out, 32, buf, 64, NULL, &hl, NULL) == 0 && hl == 32;
	sodium_memzero(buf, sizeof buf);
	if (!ok) {
		sodium_memzero(out, 32);
		errno = EINVAL;
		return -1;
	}
	return 0;
}

/* The two keys: the private one root's alone, the pinned public one
 * decides everything verify says, so nobody but root may write it (nor
 * swap it for a symlink).  The words of their diagnostics. */
struct keyfile {
	mode_t mask;      /* mode bits that must be clear */
	const char *what, *rule, *open_hint, *read_hint;
};
static const struct keyfile SECRET_KEY = {
	.mask = 077, .what = "private key", .rule = " with mode 0600",
	.open_hint = " (isopod-attest keygen makes it)", .read_hint = "",
};
static const struct keyfile PUBLIC_KEY = {
	.mask = 022, .what = "public key", .rule = ", not group- or world-writable",
	.open_hint = " (or a symlink)", .read_hint = " (64 hex digits)",
};

/* 32 bytes from the key file name (relative to at); path is what
 * diagnostics call it. */
static int load_key(int at, const char *name, const char *path, const struct keyfile *k,
		    unsigned char out[32], char *why, size_t whysz)
{
	struct stat st;
	int fd, r, e;

	if ((fd = open_owned(at, name, k->mask, 0, &st)) < 0) {
		if (errno == EPERM)
			return reason_code(ATTEST_ESYS, why, whysz,
					   "%s %s must be a regular file owned by root%s (is uid %ld, mode %04o)",
					   k->what, path, k->rule, (long)st.st_uid,
					   (unsigned)(st.st_mode & 07777));
		return reason_code(errno == ENOENT ? ATTEST_ENOTFOUND : ATTEST_ESYS, why, whysz,
				   "unable to open the %s %s%s:", k->what, path, k->open_hint);
	}
	r = read_hex32(fd, out);
	e = errno;
	close(fd);
	errno = e;
	if (r < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to read the %s %s%s:", k->what, path,
				   k->read_hint);
	return 0;
}

int attest_load_keypair(const struct attest_dir *d, unsigned char pk[32], unsigned char sk[64],
			char *why, size_t whysz)
{
	unsigned char seed[DSSE_SEED_BYTES];
	char p[SHOWN_SZ];
	int r;

	if ((r = load_key(d->fd, "key", shown(d, "key", p), &SECRET_KEY, seed, why, whysz)) < 0) {
		sodium_memzero(seed, sizeof seed);
		return r;
	}
	crypto_sign_seed_keypair(pk, sk, seed);
	sodium_memzero(seed, sizeof seed);
	return 0;
}

int attest_load_pubkey(const struct attest_dir *d, const char *path, unsigned char pk[32],
		       char *why, size_t whysz)
{
	char p[SHOWN_SZ];

	if (path)
		return load_key(AT_FDCWD, path, path, &PUBLIC_KEY, pk, why, whysz);
	return load_key(d->fd, "key.pub", shown(d, "key.pub", p), &PUBLIC_KEY, pk, why, whysz);
}

/* A JSON file that only root may have written: root's, mode 0600.  NULL
 * with errno (EPERM: it exists but is not root's alone). */
static json_t *load_private(int at, const char *name)
{
	struct stat st;

	return json_load_close(open_owned(at, name, 07777, 0600, &st));
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

int attest_machine_id(char out[64])
{
	return machine_id(out);
}

char *attest_iso(long long t, char buf[32])
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
/* The live subjects, with the directory's digest cache (an unreadable or
 * malformed cache is only a cache: started afresh). */
int attest_subjects(const struct attest_dir *d, json_t **list, json_t **errors, char *why,
		    size_t whysz)
{
	char p[SHOWN_SZ], v[VIA_SZ];
	json_t *cache;
	int dirty = 0, r;

	*list = *errors = NULL;
	shown(d, "digests.json", p);
	if (!(cache = load_private(d->fd, "digests.json"))) {
		if (errno == EPERM)
			warn("digest cache %s is not root's 0600 file: ignored (every subject read afresh)", p);
		if (!(cache = json_object()))
			return reason_code(ATTEST_ESYS, why, whysz, "out of memory");
	}
	r = subjects_live(cache, &dirty, list, errors, why, whysz) < 0 ? ATTEST_ESYS : 0;
	if (!r && dirty && json_write_atomic(via(d, "digests.json", v), cache) < 0)
		warn("unable to write the digest cache %s: %s", p, strerror(errno));
	json_decref(cache);
	return r;
}

size_t attest_subjects_warn(json_t *errors)
{
	json_t *e;
	size_t i;

	json_array_foreach(errors, i, e)
		warn("subject %s: %s", json_string_value(json_object_get(e, "subject")),
		     json_string_value(json_object_get(e, "why")));
	return json_array_size(errors);
}

/* ---- keygen ------------------------------------------------------------ */

int attest_keygen(const char *dir, int force, json_t **out, char *why, size_t whysz)
{
	unsigned char pk[32], sk[64];
	char parent[PATH_MAX], failed[PATH_MAX], hex[65], id[65], line[66], p[SHOWN_SZ], v[VIA_SZ];
	struct attest_dir d;
	int r;

	*out = NULL;
	/* The parent (e.g. /etc/isopod) stays readable: config lives there. */
	if (pathn(parent, sizeof parent, "%s", dir) < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to make %s:", EXC(dir));
	if (mkdir_p(dirname(parent), 0755, failed, sizeof failed) < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to make %s:", failed);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to make %s:", dir);
	if ((r = attest_dir_open(&d, dir, why, whysz)) < 0)
		return r;
	shown(&d, "key", p);
	if (!force && faccessat(d.fd, "key", F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		r = reason_code(ATTEST_ECONFLICT, why, whysz,
			 "%s exists; --force replaces it (every attestation signed with it then fails to verify)", p);
		goto out;
	}
	crypto_sign_keypair(pk, sk);
	/* The seed (the first half of libsodium's secret key) is the key. */
	sodium_bin2hex(line, 65, sk, DSSE_SEED_BYTES);
	line[64] = '\n';
	r = atomic_write(via(&d, "key", v), line, 65, 0600);
	sodium_memzero(line, sizeof line);
	sodium_memzero(sk, sizeof sk);
	if (r < 0) {
		r = reason_code(ATTEST_ESYS, why, whysz, "unable to write %s:", p);
		goto out;
	}
	sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
	memcpy(line, hex, 64);
	line[64] = '\n';
	shown(&d, "key.pub", p);
	if (atomic_write(via(&d, "key.pub", v), line, 65, 0644) < 0 ||
	    fchmodat(d.fd, "key.pub", 0644, 0) < 0) {
		r = reason_code(ATTEST_ESYS, why, whysz, "unable to write %s:", p);
		goto out;
	}
	dsse_keyid(pk, id);
	if (!(*out = json_pack("{s:s, s:s, s:s, s:s}", "public_key", hex, "key_id", id, "dir", dir,
			       "public_key_file", p)))
		r = reason_code(ATTEST_ESYS, why, whysz, "out of memory");
out:
	attest_dir_close(&d);
	return r;
}

/* ---- sign -------------------------------------------------------------- */

/* The sequence number: only grows, one signer at a time, the new value
 * on disk before anything is signed with it. */
static int next_sequence(const struct attest_dir *d, long long *out, char *why, size_t whysz)
{
	char p[SHOWN_SZ], l[SHOWN_SZ], v[VIA_SZ], buf[32];
	long long n = 0;
	ssize_t r;
	int lk, fd, cls = 0;

	shown(d, "sequence.lock", l);
	shown(d, "sequence", p);
	if ((lk = lock_open(via(d, "sequence.lock", v), LOCK_EX)) < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to lock %s:", l);
	if ((fd = openat(d->fd, "sequence", O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) >= 0) {
		r = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[r > 0 ? r : 0] = 0;
		buf[strcspn(buf, "\n")] = 0;
		if (r < 0)
			cls = reason_code(ATTEST_ESYS, why, whysz, "unable to read %s:", p);
		else if (parse_ll(buf, 0, (1LL << 53) - 2, &n) < 0)
			cls = reason_code(ATTEST_ESYS, why, whysz, "%s: not a sequence number: %s", p, EXC(buf));
	} else if (errno != ENOENT) {
		cls = reason_code(ATTEST_ESYS, why, whysz, "unable to open %s:", p);
	}
	if (!cls) {
		n++;
		snprintf(buf, sizeof buf, "%lld\n", n);
		if (atomic_write(via(d, "sequence", v), buf, strlen(buf), 0600) < 0)
			cls = reason_code(ATTEST_ESYS, why, whysz, "unable to write %s:", p);
	}
	close(lk);
	*out = n;
	return cls;
}

/* The Statement: the live subjects, and the report's evidence with what
 * the signer adds (when, until when, which key, which sequence). */
static json_t *statement(json_t *rep, json_t *subjects, const char *id, long long seq,
			 const char *t_signed, const char *t_exp)
{
	json_t *pred = json_pack("{s:O, s:O, s:O, s:O, s:s, s:s, s:I, s:s, s:s, s:O*, s:O}",
				 "host", json_object_get(rep, "host"),
				 "doctor", json_object_get(rep, "doctor"),
				 "started", json_object_get(rep, "started"),
				 "finished", json_object_get(rep, "finished"),
				 "signed", t_signed, "expires", t_exp, "sequence", (json_int_t)seq,
				 "key_id", id, "verdict", "pass",
				 "counts", json_object_get(rep, "counts"),
				 "probes", json_object_get(rep, "probes"));

	if (!pred)
		return NULL;
	return json_pack("{s:s, s:O, s:s, s:o}", "_type", ATTEST_STATEMENT_TYPE, "subject", subjects,
			 "predicateType", ATTEST_PREDICATE_TYPE, "predicate", pred);
}

static int sign_in(const struct attest_dir *d, const struct attest_sign_opts *o, json_t *rep,
		   long long now, long long fin, json_t **env, struct attest_signed *info, char *why,
		   size_t whysz)
{
	unsigned char pk[32], sk[64];
	json_t *list = NULL, *errors = NULL, *stmt = NULL;
	char *body = NULL;
	long long seq = 0;
	size_t n;
	int r;

	if ((r = attest_load_keypair(d, pk, sk, why, whysz)) < 0)
		return r;
	dsse_keyid(pk, info->key_id);
	if ((r = attest_subjects(d, &list, &errors, why, whysz)) < 0)
		goto out;
	if ((n = attest_subjects_warn(errors))) {
		r = reason_code(ATTEST_ESYS, why, whysz,
			 "unable to attest: %zu subject(s) cannot be read on this host now", n);
		goto out;
	}
	if ((r = report_subjects_check(rep, list, why, whysz)) < 0 ||
	    (r = next_sequence(d, &seq, why, whysz)) < 0)
		goto out;
	/* Expiry counts from the end of the doctor's run: the evidence's age,
	 * not the signature's. */
	attest_iso(fin + o->expires_s, info->expires);
	info->sequence = seq;
	info->subjects = json_array_size(list);
	if (!(stmt = statement(rep, list, info->key_id, seq, attest_iso(now, (char[32]){ 0 }),
			       info->expires)) ||
	    !(body = json_dumps(stmt, JSON_COMPACT)) ||
	    !(*env = dsse_sign(sk, info->key_id, DSSE_INTOTO_TYPE, body, strlen(body))))
		r = reason_code(ATTEST_ESYS, why, whysz, "out of memory");
out:
	sodium_memzero(sk, sizeof sk);
	free(body);
	json_decref(stmt);
	json_decref(list);
	json_decref(errors);
	return r;
}

int attest_sign(const struct attest_sign_opts *o, json_t *rep, json_t **env,
		struct attest_signed *info, char *why, size_t whysz)
{
	long long now = wall_ms() / 1000, fin = 0;
	struct attest_dir d;
	struct report_live live;
	char mid[64];
	int r;

	*env = NULL;
	if (machine_id(mid) < 0)
		return reason_code(ATTEST_ESYS, why, whysz, "unable to read /etc/machine-id:");
	/* what the doctor had to cover is what this host has now */
	report_live_read(&live);
	if ((r = report_check(rep, mid, &live, now, o->expires_s, o->max_age_s, &fin, why, whysz)) < 0 ||
	    (r = attest_dir_open(&d, o->dir, why, whysz)) < 0)
		return r;
	r = sign_in(&d, o, rep, now, fin, env, info, why, whysz);
	attest_dir_close(&d);
	return r;
}

/* ---- verify ------------------------------------------------------------ */

/* The failures found so far; a failure that cannot be recorded (out of
 * memory) makes the verdict impossible, never "valid". */
struct fails {
	json_t *a;
	int oom;
};

static void fail_(struct fails *f, const char *kind, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void fail_(struct fails *f, const char *kind, const char *what, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (json_array_append_new(f->a, json_pack("{s:s, s:s}", kind, what, "why", why)) < 0)
		f->oom = 1;
}
#define FIELD(f, name, ...) fail_(f, "field", name, __VA_ARGS__)
#define SUBJECT(f, name, ...) fail_(f, "subject", name, __VA_ARGS__)

/* The last sequence number verify accepted for this key: a replay of an
 * older attestation is refused even while it has not expired.  name is
 * relative to at; path is what diagnostics call it. */
static int seen_read(int at, const char *name, const char *path, long long *out, char *why,
		     size_t whysz)
{
	json_t *j = load_private(at, name);

	*out = 0;
	if (!j) {
		if (errno == ENOENT)
			return 0;
		if (errno == EPERM)
			return reason_code(ATTEST_ESYS, why, whysz, "verify state %s must be a regular file owned by root with mode 0600", path);
		return reason_code(ATTEST_ESYS, why, whysz, "unable to read the verify state %s:", path);
	}
	if (!json_is_integer(json_object_get(j, "sequence"))) {
		json_decref(j);
		return reason_code(ATTEST_ESYS, why, whysz, "verify state %s: no sequence", path);
	}
	*out = (long long)json_integer_value(json_object_get(j, "sequence"));
	json_decref(j);
	return 0;
}

/* The signer's counter, DIR/sequence: signer and verifier share the host,
 * so only the newest attestation is valid, whatever the verifier's own
 * state says (a deleted state file must not let an older one back in).
 * -1 with why when missing or not root's. */
static long long signer_sequence(const struct attest_dir *d, char *why, size_t whysz)
{
	char p[SHOWN_SZ], buf[32];
	struct stat st;
	long long n;
	ssize_t r;
	int fd;

	shown(d, "sequence", p);
	if ((fd = open_owned(d->fd, "sequence", 022, 0, &st)) < 0) {
		if (errno == EPERM)
			snprintf(why, whysz, "the signer's counter %.300s is not root's regular file", p);
		else
			snprintf(why, whysz, "unable to read the signer's counter %.300s: %s", p, strerror(errno));
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
static void check_times(struct fails *fails, json_t *pred, long long exp, long long max_valid)
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

static int subjects_compare(const struct attest_dir *d, struct fails *fails, json_t *signed_list,
			    char *why, size_t whysz)
{
	struct { json_t *list, *errors; } live;
	json_t *e, *l;
	size_t i, j;
	int r;

	if ((r = attest_subjects(d, &live.list, &live.errors, why, whysz)) < 0)
		return r;
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
	return 0;
}


/* verify with the key directory open: every check runs and each failure
 * is one entry of the verdict; only what keeps a verdict from being
 * reached (or recorded) is an error. */
static int verify_in(const struct attest_dir *d, const struct attest_opts *o, json_t **verdict,
		     char *why, size_t whysz)
{
	unsigned char pk[32], *body = NULL;
	char id[65], st[SHOWN_SZ], stpath[SHOWN_SZ], lkpath[SHOWN_SZ + 8];
	char mid[64], msg[512], t[32], t_s[2][32], stname[40];
	const char *field = NULL, *type = NULL;
	struct fails f = { .a = json_array() };
	json_t *env = NULL, *stmt = NULL, *pred = NULL;
	long long now = wall_ms() / 1000, seq = -1, last = 0, exp = -1, cur, t_run[2];
	size_t blen;
	int lock = -1, valid, r;

	if (!f.a)
		return reason_code(ATTEST_ESYS, why, whysz, "out of memory");
	if ((r = attest_load_pubkey(d, o->pubkey, pk, why, whysz)) < 0)
		goto out;
	dsse_keyid(pk, id);
	/* The state the caller names, or the directory's, reached through
	 * its descriptor (stpath); st is what diagnostics call it. */
	if (o->state) {
		if (pathn(st, sizeof st, "%s", o->state) < 0) {
			r = reason_code(ATTEST_ESYS, why, whysz, "verify state %s:", EXC(o->state));
			goto out;
		}
		snprintf(stpath, sizeof stpath, "%s", st);
	} else {
		snprintf(stname, sizeof stname, "verified-%.16s.json", id);
		shown(d, stname, st);
		via(d, stname, stpath);
	}
	snprintf(lkpath, sizeof lkpath, "%s.lock", stpath);

	if (o->envelope_buf) {
		if (!(env = json_parse(o->envelope_buf, o->envelope_len, 0, msg, sizeof msg)))
			errno = EINVAL;
	} else if (!o->envelope || !strcmp(o->envelope, "-"))
		env = json_load_fd(0);
	else
		env = json_load_path(o->envelope);
	if (!env) {
		if (errno != EINVAL && errno != EFBIG) {
			r = reason_code(errno == ENOENT ? ATTEST_ENOTFOUND : ATTEST_ESYS, why, whysz,
				 "unable to read the envelope %s:", o->envelope ? o->envelope : "-");
			goto out;
		}
		FIELD(&f, "envelope", "not one JSON object (or a duplicate key, or over 1 MiB)");
		goto done;
	}
	/* Signature first: nothing of the payload is believed before it. */
	if (dsse_open(env, pk, &body, &blen, &type, &field, msg, sizeof msg) < 0) {
		FIELD(&f, field, "%s", msg);
		goto done;
	}
	if (strcmp(type, DSSE_INTOTO_TYPE)) {
		FIELD(&f, "payloadType", "%s, not %s", EXC(type), DSSE_INTOTO_TYPE);
		goto done;
	}
	if (!(stmt = json_parse((const char *)body, blen, 0, msg, sizeof msg))) {
		FIELD(&f, "payload", "not a JSON object: %s", msg);
		goto done;
	}
	if (!json_is_string(json_object_get(stmt, "_type")) ||
	    strcmp(json_string_value(json_object_get(stmt, "_type")), ATTEST_STATEMENT_TYPE))
		FIELD(&f, "_type", "not %s", ATTEST_STATEMENT_TYPE);
	if (!json_is_string(json_object_get(stmt, "predicateType")) ||
	    strcmp(json_string_value(json_object_get(stmt, "predicateType")), ATTEST_PREDICATE_TYPE))
		FIELD(&f, "predicateType", "not %s", ATTEST_PREDICATE_TYPE);
	pred = json_object_get(stmt, "predicate");
	exp = iso_parse(json_string_value(json_object_get(pred, "expires")));
	if (exp < 0)
		FIELD(&f, "predicate.expires", "missing or not YYYY-MM-DDTHH:MM:SSZ");
	else if (now >= exp)
		FIELD(&f, "predicate.expires", "expired at %s",
		      json_string_value(json_object_get(pred, "expires")));
	check_times(&f, pred, exp, o->max_validity_s);
	if (!json_is_integer(json_object_get(pred, "sequence")) ||
	    (seq = (long long)json_integer_value(json_object_get(pred, "sequence"))) < 1) {
		FIELD(&f, "predicate.sequence", "missing or not a positive integer");
		seq = -1;
	} else {
		if ((lock = lock_open(lkpath, LOCK_EX)) < 0) {
			r = reason_code(ATTEST_ESYS, why, whysz, "unable to lock %s.lock:", st);
			goto out;
		}
		if ((r = seen_read(AT_FDCWD, stpath, st, &last, why, whysz)) < 0)
			goto out;
		if (seq < last)
			FIELD(&f, "predicate.sequence",
			      "%lld is older than the last one verified (%lld): a replay", seq, last);
		else if ((cur = signer_sequence(d, msg, sizeof msg)) < 0)
			FIELD(&f, "predicate.sequence", "%s", msg);
		else if (seq != cur)
			FIELD(&f, "predicate.sequence",
			      "%lld is not the signer's latest (%lld): an older attestation", seq, cur);
	}
	if (machine_id(mid) < 0) {
		r = reason_code(ATTEST_ESYS, why, whysz, "unable to read /etc/machine-id:");
		goto out;
	}
	if (!json_is_string(json_object_get(json_object_get(pred, "host"), "id")) ||
	    strcmp(json_string_value(json_object_get(json_object_get(pred, "host"), "id")), mid))
		FIELD(&f, "predicate.host.id", "not this host's (%s)", mid);
	if (!json_is_array(json_object_get(stmt, "subject")) ||
	    json_array_size(json_object_get(stmt, "subject")) == 0)
		FIELD(&f, "subject", "missing or empty");
	else if ((r = subjects_compare(d, &f, json_object_get(stmt, "subject"), why, whysz)) < 0)
		goto out;
done:
	r = 0;
	if (f.oom) {
		r = reason_code(ATTEST_ESYS, why, whysz, "out of memory");
		goto out;
	}
	valid = json_array_size(f.a) == 0;
	if (valid && seq > last) {
		json_t *rec = json_pack("{s:s, s:I, s:s}", "key_id", id, "sequence", (json_int_t)seq,
					"verified", attest_iso(now, t));

		if (!rec || json_write_atomic(stpath, rec) < 0) {
			r = reason_code(ATTEST_ESYS, why, whysz, "unable to record the sequence in %s:", st);
			json_decref(rec);
			goto out;
		}
		json_decref(rec);
	}
	/* the doctor run's times (signed: pred is NULL unless the signature
	 * verified), for a caller that asks how fresh the proof is
	 * (isopod-runner after the host changed under it) */
	t_run[0] = iso_parse(json_string_value(json_object_get(pred, "started")));
	t_run[1] = iso_parse(json_string_value(json_object_get(pred, "finished")));
	*verdict = json_pack("{s:b, s:s, s:o, s:o, s:o, s:o, s:O}", "valid", valid, "key_id", id,
			     "sequence", seq > 0 ? json_integer(seq) : json_null(),
			     "expires", exp >= 0 ? json_string(attest_iso(exp, t)) : json_null(),
			     "started", t_run[0] >= 0 ? json_string(attest_iso(t_run[0], t_s[0])) : json_null(),
			     "finished", t_run[1] >= 0 ? json_string(attest_iso(t_run[1], t_s[1])) : json_null(),
			     "failures", f.a);
	if (!*verdict)
		r = reason_code(ATTEST_ESYS, why, whysz, "out of memory");
out:
	if (lock >= 0)
		close(lock);
	json_decref(f.a);
	json_decref(stmt);
	json_decref(env);
	free(body);
	return r;
}

int attest_verify(const struct attest_opts *o, json_t **verdict, char *why, size_t whysz)
{
	struct attest_dir d;
	int r;

	*verdict = NULL;
	/* The state and the digest cache live here: root's alone, as for sign. */
	if ((r = attest_dir_open(&d, o->dir, why, whysz)) < 0)
		return r;
	r = verify_in(&d, o, verdict, why, whysz);
	attest_dir_close(&d);
	return r;
}
