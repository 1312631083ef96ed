/* util.c - shared helpers of the host tools. */

#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *progname = "isopod";

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
	int e = errno;
	size_t n = strlen(fmt);

	fprintf(stderr, "%s: %s: ", progname, kind);
	vfprintf(stderr, fmt, ap);
	if (n && fmt[n - 1] == ':')
		fprintf(stderr, " %s", strerror(e));
	fputc('\n', stderr);
}

void die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg("fatal", fmt, ap);
	va_end(ap);
	exit(code);
}

void warnx_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg("warning", fmt, ap);
	va_end(ap);
}

const char *store_home(void)
{
	static char buf[PATH_MAX];
	const char *h = getenv("ISOPOD_HOME");

	if (h && *h)
		return h;
	if (buf[0])
		return buf;
	if (geteuid() == 0) {
		snprintf(buf, sizeof buf, "/var/lib/isopod");
	} else {
		const char *home = getenv("HOME");
		struct passwd *pw;

		if (!home || !*home) {
			pw = getpwuid(geteuid());
			home = pw ? pw->pw_dir : "/tmp";
		}
		pathf(buf, sizeof buf, "%s/.isopod", home);
	}
	return buf;
}

int pathn(char *buf, size_t sz, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sz, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sz) {
		buf[0] = 0;
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int vm_id_valid(const char *s)
{
	size_t i, n = s ? strlen(s) : 0;

	if (n != 15 || strncmp(s, "vm-", 3))
		return 0;
	for (i = 3; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

char *pathf(char *buf, size_t sz, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sz, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sz)
		die(EX_USAGE, "path too long: %.64s...", buf);
	return buf;
}

int mkdir_p(const char *path, mode_t mode, char *failed, size_t fsz)
{
	char tmp[PATH_MAX];
	char *p;
	int n = snprintf(tmp, sizeof tmp, "%s", path);

	if (n < 0 || (size_t)n >= sizeof tmp) {
		snprintf(failed, fsz, "%s", path);
		errno = ENAMETOOLONG;
		return -1;
	}
	for (p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, mode) < 0 && errno != EEXIST)
			goto fail;
		*p = '/';
	}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		goto fail;
	return 0;
fail:
	snprintf(failed, fsz, "%s", tmp);
	return -1;
}

void mkdirs(const char *path, mode_t mode)
{
	char failed[PATH_MAX];

	if (mkdir_p(path, mode, failed, sizeof failed) < 0) {
		if (errno == ENAMETOOLONG)
			die(EX_USAGE, "path too long: %.64s...", path);
		die(EX_SYS, "unable to create %s:", failed);
	}
}

int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int fsync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd, r;

	pathf(dir, sizeof dir, "%s", path);
	slash = strrchr(dir, '/');
	if (slash == dir)
		slash[1] = 0;
	else if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	r = fsync(fd);
	close(fd);
	return r;
}

int atomic_write(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	int fd, e;

	pathf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
	if (fd < 0)
		return -1;
	if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		e = errno;
		close(fd);
		unlink(tmp);
		errno = e;
		return -1;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	return fsync_dir_of(path);
}

int json_write_atomic(const char *path, json_t *obj)
{
	char *s = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	size_t n;
	int r;

	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room for its NUL; reuse it */
	r = atomic_write(path, s, n + 1, 0644);
	free(s);
	return r;
}

json_t *json_load_path(const char *path)
{
	json_error_t err;
	json_t *j;
	FILE *f = fopen(path, "re");

	if (!f)
		return NULL;
	j = json_loadf(f, 0, &err);
	fclose(f);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		errno = EINVAL;
		return NULL;
	}
	return j;
}

json_t *json_read_stdin(void)
{
	json_error_t err;
	json_t *j = json_loadf(stdin, JSON_DISABLE_EOF_CHECK, &err);

	if (!j)
		die(EX_USAGE, "bad JSON on standard input: %s (line %d)", err.text, err.line);
	if (!json_is_object(j))
		die(EX_USAGE, "bad JSON on standard input: not an object");
	return j;
}

void json_emit(json_t *obj)
{
	if (json_dumpf(obj, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF || ferror(stdout))
		die(EX_SYS, "unable to write to standard output:");
}

int lock_open(const char *path, int op)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd < 0)
		return -1;
	while (flock(fd, op) < 0) {
		int e = errno;

		if (e == EINTR)
			continue;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int store_lock(void)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "%s/locks", store_home());
	mkdirs(p, 0700);
	pathf(p, sizeof p, "%s/locks/store", store_home());
	fd = lock_open(p, LOCK_EX);
	if (fd < 0)
		die(EX_SYS, "unable to lock %s:", p);
	return fd;
}

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *iso_now(char *buf, size_t sz)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
	return buf;
}

void rand_bytes(void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			die(EX_SYS, "unable to get random bytes:");
		}
		p += r;
		n -= (size_t)r;
	}
}

void rand_hex(char *out, size_t nbytes)
{
	unsigned char b[64];
	size_t i;

	if (nbytes > sizeof b)
		nbytes = sizeof b;
	rand_bytes(b, nbytes);
	for (i = 0; i < nbytes; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * nbytes] = 0;
}

static void hex32(const unsigned char *h, char out[65])
{
	int i;

	for (i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
	out[64] = 0;
}

void sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, data, n);
	hex32(h, out);
}

int sha256_file(const char *path, char out[65])
{
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES];
	static unsigned char buf[1 << 16];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r;

	if (fd < 0)
		return -1;
	crypto_hash_sha256_init(&st);
	while ((r = read(fd, buf, sizeof buf)) != 0) {
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
	}
	close(fd);
	crypto_hash_sha256_final(&st, h);
	hex32(h, out);
	return 0;
}

int parse_ll(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	long long v;

	if (!s || !*s || isspace((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int valid_ref(const char *ref)
{
	return *ref && !strchr(ref, '/') && strcmp(ref, ".") && strcmp(ref, "..") &&
	       strlen(ref) < 64;
}

void vm_resolve(const char *ref, char *id_out, size_t idsz)
{
	char dir[PATH_MAX], meta[PATH_MAX];
	char cands[8][64];
	size_t ncand = 0, reflen = strlen(ref), i;
	DIR *d;
	struct dirent *de;

	if (!valid_ref(ref))
		die(EX_NOTFOUND, "no such vm: %s", ref);
	pathf(dir, sizeof dir, "%s/vms", store_home());
	d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "no such vm: %s", ref);
		die(EX_SYS, "unable to open %s:", dir);
	}
	while ((de = readdir(d))) {
		json_t *j;
		const char *name;
		int match;

		if (strncmp(de->d_name, "vm-", 3))
			continue;
		if (!strcmp(de->d_name, ref)) { /* an exact id wins outright */
			ncand = 0;
			snprintf(cands[ncand++], sizeof cands[0], "%.63s", de->d_name);
			break;
		}
		match = !strncmp(de->d_name, ref, reflen) ||
			(!strncmp(ref, "vm-", 3) ? 0 : !strncmp(de->d_name + 3, ref, reflen));
		if (!match) {
			pathf(meta, sizeof meta, "%s/%s/meta.json", dir, de->d_name);
			j = json_load_path(meta);
			name = j ? json_string_value(json_object_get(j, "name")) : NULL;
			match = name && !strcmp(name, ref);
			json_decref(j);
		}
		if (match && ncand < 8)
			snprintf(cands[ncand++], sizeof cands[0], "%.63s", de->d_name);
	}
	closedir(d);
	if (ncand == 0)
		die(EX_NOTFOUND, "no such vm: %s", ref);
	if (ncand > 1) {
		fprintf(stderr, "%s: fatal: vm reference %s is ambiguous; candidates:", progname, ref);
		for (i = 0; i < ncand; i++)
			fprintf(stderr, " %s", cands[i]);
		fputc('\n', stderr);
		exit(EX_CONFLICT);
	}
	snprintf(id_out, idsz, "%s", cands[0]);
}

int vm_running(const char *id)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "%s/vms/%s/lock", store_home(), id);
	fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return errno == EWOULDBLOCK;
	}
	close(fd);
	return 0;
}

/* utf8_json: the in-band copy of guest output: valid UTF-8 (jansson requires it), cut on a character
 * boundary when `cut` says the bytes were cut by a cap, invalid bytes and NUL
 * replaced by U+FFFD.  The log keeps the bytes. */
json_t *utf8_json(const uint8_t *p, size_t n, int cut)
{
	char *out = malloc(n * 3 + 1);
	size_t i = 0, k = 0;
	json_t *j;

	if (!out)
		return json_string("");
	while (i < n) {
		uint8_t b = p[i];
		size_t len = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3
			   : (b & 0xf8) == 0xf0 ? 4 : 0;
		size_t m;
		int ok = len > 0 && i + len <= n;

		for (m = 1; ok && m < len; m++)
			ok = (p[i + m] & 0xc0) == 0x80;
		if (ok && len == 2 && b < 0xc2)
			ok = 0; /* overlong */
		if (ok && len == 3) {
			uint32_t cp = (uint32_t)(b & 0x0f) << 12 | (uint32_t)(p[i + 1] & 0x3f) << 6 |
				      (p[i + 2] & 0x3f);
			ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
		}
		if (ok && len == 4) {
			uint32_t cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(p[i + 1] & 0x3f) << 12 |
				      (uint32_t)(p[i + 2] & 0x3f) << 6 | (p[i + 3] & 0x3f);
			ok = cp >= 0x10000 && cp <= 0x10ffff;
		}
		if (!ok && cut && len > 0 && i + len > n)
			break; /* a character cut by the cap: drop the tail */
		if (!ok || b == 0) {
			/* NUL is valid UTF-8 but C strings end there: U+FFFD too */
			memcpy(out + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
			continue;
		}
		memcpy(out + k, p + i, len);
		k += len;
		i += len;
	}
	out[k] = 0;
	j = json_stringn(out, k);
	free(out);
	return j ? j : json_string("");
}


int vm_meta_update(const char *id, const char *const *if_states, json_t *set)
{
	char p[PATH_MAX];
	const char *st;
	json_t *j;
	int lk, r = 0, e;

	pathf(p, sizeof p, "%s/vms/%s/meta.lock", store_home(), id);
	lk = lock_open(p, LOCK_EX);
	if (lk < 0)
		return -1;
	pathf(p, sizeof p, "%s/vms/%s/meta.json", store_home(), id);
	j = json_load_path(p);
	if (!j) {
		e = errno;
		close(lk);
		errno = e;
		return -1;
	}
	st = json_string_value(json_object_get(j, "state"));
	if (if_states) {
		for (; *if_states; if_states++)
			if (st && !strcmp(st, *if_states))
				break;
		if (!*if_states)
			goto out;
	}
	if (json_object_update(j, set) < 0 || json_write_atomic(p, j) < 0) {
		r = -1;
		goto out;
	}
	r = 1;
out:
	e = errno;
	json_decref(j);
	close(lk);
	errno = e;
	return r;
}

int vm_wait_stopped(const char *id, int64_t deadline_ms)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "%s/vms/%s/lock", store_home(), id);
	for (;;) {
		fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return 0; /* no lock file: nothing ever ran */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			close(fd);
			return 0;
		}
		close(fd);
		if (mono_ms() >= deadline_ms) {
			errno = ETIMEDOUT;
			return -1;
		}
		usleep(20 * 1000);
	}
}

int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

int pidfd_kill(int pidfd, int sig)
{
	return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

