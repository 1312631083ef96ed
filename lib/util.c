/* util.c - shared helpers of the host tools. */

#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char *progname = "isopod";

/* Format "progname: kind: msg[: strerror]" (no newline) into line. */
static void vline(char *line, size_t sz, const char *kind, const char *fmt, va_list ap)
{
	int e = errno;
	size_t n = strlen(fmt), k;
	char msg[DIAG_MAX];
	int len = vsnprintf(msg, sizeof msg, fmt, ap);

	/* Callers pass input through EXC(); this cut is the net for one
	 * that does not: no diagnostic echoes a 100 MB argument whole. */
	snprintf(line, sz, "%s: %s: %s", progname, kind, len < 0 ? fmt : msg);
	k = strlen(line);
	if (len >= (int)sizeof msg)
		snprintf(line + k, sz - k, "…(%d bytes)", len);
	k = strlen(line);
	if (n && fmt[n - 1] == ':')
		snprintf(line + k, sz - k, " %s", strerror(e));
}

void vreason(char *buf, size_t sz, int e, const char *fmt, va_list ap)
{
	size_t n = strlen(fmt), k;

	vsnprintf(buf, sz, fmt, ap);
	k = strlen(buf);
	if (n && fmt[n - 1] == ':' && k < sz)
		snprintf(buf + k, sz - k, " %s", strerror(e));
}

int reason_code(int code, char *err, size_t sz, const char *fmt, ...)
{
	va_list ap;
	int e = errno;

	va_start(ap, fmt);
	vreason(err, sz, e, fmt, ap);
	va_end(ap);
	errno = e;
	return code;
}

const char *exit_kind(int code)
{
	switch (code) {
	case EX_TIMEOUT: return "timeout";
	case EX_USAGE: return "usage";
	case EX_NOTFOUND: return "not_found";
	case EX_CONFLICT: return "busy";
	default: return "infra";
	}
}

int exit_code_of(int err)
{
	switch (err) {
	case EINVAL: return EX_USAGE;
	case ENOENT: return EX_NOTFOUND;
	case ENOTUNIQ: return EX_CONFLICT;
	default: return EX_SYS;
	}
}

/* The status descriptor: taken from the environment before main runs, and
 * the variable removed, so that no child (the supervisor, the broker, QEMU)
 * inherits it and writes its own failure over ours or into one of its fixed
 * descriptors; close-on-exec for the same reason.  -1: none. */
static int *status_fdp(void)
{
	static int fd = -1;

	return &fd;
}

__attribute__((constructor)) static void status_init(void)
{
	const char *s = getenv("ISOPOD_STATUS_FD");
	long long v;
	int fl;

	if (!s)
		return;
	if (parse_ll(s, 3, 1 << 20, &v) == 0 && (fl = fcntl((int)v, F_GETFD)) >= 0 &&
	    (fcntl((int)v, F_GETFL) & O_ACCMODE) != O_RDONLY) {
		fcntl((int)v, F_SETFD, fl | FD_CLOEXEC);
		*status_fdp() = (int)v;
	}
	unsetenv("ISOPOD_STATUS_FD");
}

int status_fd(void)
{
	return *status_fdp();
}

void status_report(int code, const char *kind, const char *line)
{
	int *fd = status_fdp();
	json_t *j;
	char *s;

	if (*fd < 0)
		return;
	/* A diagnostic may quote bytes that are not UTF-8 (a path): keep the
	 * object whole, as utf8_json does for guest output. */
	j = json_pack("{s:o, s:s, s:i}", "error",
		      utf8_json((const uint8_t *)line, strlen(line), 0), "error_kind", kind,
		      "exit", code);
	s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	if (s) {
		size_t n = strlen(s);

		s[n] = '\n'; /* json_dumps leaves room for its NUL */
		(void)write_all(*fd, s, n + 1);
	}
	free(s);
	json_decref(j);
	close(*fd);
	*fd = -1;
}

__attribute__((noreturn)) static void vdie(int code, const char *kind, const char *fmt,
					   va_list ap)
{
	char line[DIAG_MAX + 512];

	vline(line, sizeof line, "fatal", fmt, ap);
	fprintf(stderr, "%s\n", line);
	/* what stdout holds first: the front end reads the status as the
	 * last line where both share a pipe (sh/isopod run_step) */
	fflush(stdout);
	status_report(code, kind ? kind : exit_kind(code), line);
	exit(code);
}

void die_kind(int code, const char *kind, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(code, kind, fmt, ap);
	va_end(ap);
}

void die_usage(const char *synopsis, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "usage: %s\n", synopsis);
	va_start(ap, fmt);
	vdie(EX_USAGE, NULL, fmt, ap);
	va_end(ap);
}

void warnx_(const char *fmt, ...)
{
	va_list ap;
	char line[DIAG_MAX + 512];

	va_start(ap, fmt);
	vline(line, sizeof line, "warning", fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s\n", line);
}

/* HOME is an environment string, so never longer than the kernel's
 * MAX_ARG_STRLEN (128 KiB): buf holds any HOME/.isopod, and a password
 * database home cut to fit is still far over PATH_MAX.  A root too long to
 * use fails where it is used (pathn returns -1, pathf dies in main), as an
 * over-long ISOPOD_HOME does: nothing here exits. */
const char *store_home(void)
{
	static char buf[(32 << 12) + sizeof "/.isopod"];
	const char *h = getenv("ISOPOD_HOME");
	struct passwd *pw;

	if (h && *h)
		return h;
	if (!buf[0] && geteuid() == 0)
		snprintf(buf, sizeof buf, "/var/lib/isopod");
	else if (!buf[0]) {
		if (!(h = getenv("HOME")) || !*h)
			h = (pw = getpwuid(geteuid())) && pw->pw_dir[0] ? pw->pw_dir : "/tmp";
		snprintf(buf, sizeof buf, "%s/.isopod", h);
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

int dir_own_open(const char *path, char *why, size_t whysz)
{
	return dir_own_openat(AT_FDCWD, path, why, whysz);
}

int dir_own_openat(int at, const char *path, char *why, size_t whysz)
{
	struct stat st;
	int fd = openat(at, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
		return reason_fail(why, whysz, "%s: not a directory (or a symbolic link)", EXC(path));
	if (fd < 0)
		return reason_fail(why, whysz, "%s:", EXC(path));
	if (fstat(fd, &st) < 0) {
		reason_fail(why, whysz, "%s:", EXC(path));
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 022)) {
		snprintf(why, whysz, "%s: owned by uid %ld with mode %04o: want owned by uid %ld and writable by no one else",
			 EXC(path), (long)st.st_uid, (unsigned)(st.st_mode & 07777), (long)geteuid());
		close(fd);
		return errno = EPERM, -1;
	}
	return fd;
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

int unix_connect_nofollow(int fd, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int p = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), r, e;
	struct stat st;

	if (p < 0)
		return -1;
	if (fstat(p, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		e = S_ISLNK(st.st_mode) ? ELOOP : ENOTSOCK;
		close(p);
		errno = e;
		return -1;
	}
	snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d", p);
	r = connect(fd, (struct sockaddr *)&sa, sizeof sa);
	e = errno;
	close(p);
	errno = e;
	return r;
}

ssize_t fd_send(int sock, const void *buf, size_t n, int fd)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof cm);
		mh.msg_control = cm.b;
		mh.msg_controllen = sizeof cm.b;
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof fd);
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

ssize_t fd_recv(int sock, void *buf, size_t n, int *fd)
{
	union {
		char b[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = buf, .iov_len = n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			     .msg_controllen = sizeof cm.b };
	ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

	*fd = -1;
	for (struct cmsghdr *c = r >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k = c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
				   ? (c->cmsg_len - CMSG_LEN(0)) / sizeof(int)
				   : 0;

		for (size_t i = 0; i < k; i++) {
			int g;

			memcpy(&g, CMSG_DATA(c) + i * sizeof(int), sizeof g);
			if (*fd < 0 && k == 1)
				*fd = g;
			else
				close(g);
		}
	}
	return r;
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

	if (pathn(dir, sizeof dir, "%s", path) < 0)
		return -1;
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

static int atomic_write_held(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	unsigned char rnd[8];
	int fd = -1, e, tries;

	/* The directory may be writable by others (a --copy-out or
	 * --provenance destination): a name nobody can guess, made by us
	 * (O_EXCL: never a planted file or a link), retried on a collision.
	 * It still ends in .tmp.<pid>: isopod-gc and isopod-runner find a
	 * dead writer's leftovers by that. */
	for (tries = 0; fd < 0 && tries < 16; tries++) {
		if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
			return -1;
		if (pathn(tmp, sizeof tmp, "%s.%02x%02x%02x%02x%02x%02x%02x%02x.tmp.%ld", path, rnd[0],
			  rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7], (long)getpid()) < 0)
			return -1;
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode & 07777);
		if (fd < 0 && errno != EEXIST)
			return -1;
	}
	if (fd < 0)
		return -1;
	test_pause("atomic-write"); /* t/unit/util_test.c: a SIGTERM here */
	if (write_all(fd, data, len) < 0 || (!(mode & ATOMIC_NOSYNC) && fsync(fd) < 0)) {
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
	return mode & (ATOMIC_NOSYNC | ATOMIC_NODIRSYNC) ? 0 : fsync_dir_of(path);
}

int stop_signals_hold(sigset_t *old)
{
	sigset_t stop;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	sigaddset(&stop, SIGQUIT);
	return (errno = pthread_sigmask(SIG_BLOCK, &stop, old)) ? -1 : 0;
}

void stop_signals_release(const sigset_t *old)
{
	int e = errno;

	(void)pthread_sigmask(SIG_SETMASK, old, NULL);
	errno = e;
}

int atomic_write(const char *path, const void *data, size_t len, mode_t mode)
{
	sigset_t old;
	int r;

	/* Held from the temporary file's creation to its rename (or unlink):
	 * a tool its group's SIGTERM ended in between left path.*.tmp.<pid>
	 * behind, which isopod-gc reports as leaked (isopod-boot's record
	 * update when isopod-mcp cancelled its call: 2 of 25 runs SIGTERMed
	 * as their VM came up).  fsync makes the window milliseconds long. */
	if (stop_signals_hold(&old) < 0)
		return -1;
	r = atomic_write_held(path, data, len, mode);
	stop_signals_release(&old);
	return r;
}

int json_write_atomic(const char *path, json_t *obj)
{
	return json_write_atomic_flags(path, obj, 0);
}

int json_write_atomic_flags(const char *path, json_t *obj, unsigned flags)
{
	char *s;
	size_t n;
	int r;

	if (flags & ~(ATOMIC_NOSYNC | ATOMIC_NODIRSYNC)) {
		errno = EINVAL;
		return -1;
	}
	s = json_dumps(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	n = strlen(s);
	s[n] = '\n'; /* json_dumps leaves room for its NUL; reuse it */
	r = atomic_write(path, s, n + 1, 0644 | flags);
	free(s);
	return r;
}

json_t *json_read_stdin(void)
{
	char why[512];
	json_t *j = json_load_stdin(why, sizeof why);

	if (!j)
		die(EX_USAGE, "bad JSON on standard input: %s", why);
	return j;
}

size_t hex_span(const char *s)
{
	size_t i = 0;

	while (s && ((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
		i++;
	return i;
}

int hex64_ok(const char *s)
{
	return s && hex_span(s) == 64 && !s[64];
}

int id_vm_ok(const char *s)
{
	return s && !strncmp(s, "vm-", 3) && hex_span(s + 3) == 12 && !s[15];
}

int id_stage_ok(const char *s)
{
	return s && !strncmp(s, "st-", 3) && hex_span(s + 3) == 12 && !s[15];
}

int vm_ref_ok(const char *s)
{
	size_t n = s ? strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") : 0;

	return n >= 1 && n <= 63 && !s[n];
}

char *excerpt(char buf[EXCERPT_SZ], const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t i, k = 0, m = n < EXCERPT_MAX ? n : EXCERPT_MAX;

	for (i = 0; i < m; i++) {
		if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\')
			buf[k++] = (char)s[i];
		else
			k += (size_t)sprintf(buf + k, "\\x%02x", s[i]);
	}
	if (n > m)
		snprintf(buf + k, EXCERPT_SZ - k, "…(%zu bytes)", n);
	else
		buf[k] = 0;
	return buf;
}

json_t *json_failure(const char *kind, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return json_pack("{s:b, s:s, s:s}", "ok", 0, "error", msg, "error_kind", kind);
}

void json_emit(json_t *obj)
{
	if (json_dumpf(obj, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF || ferror(stdout))
		die(EX_SYS, "unable to write to standard output:");
}

int run_options_print(const struct run_option *ro, const struct option *lo, int text, char *err,
		      size_t errsz)
{
	json_t *j;
	char *t;

	if (text) {
		if (!(t = run_options_text(ro, lo, err, errsz)))
			return -1;
		if (fputs(t, stdout) == EOF || fflush(stdout) == EOF || ferror(stdout)) {
			free(t);
			die(EX_SYS, "unable to write to standard output:");
		}
		free(t);
		return 0;
	}
	if (!(j = run_options_json(ro, lo, err, errsz)))
		return -1;
	json_emit(j);
	json_decref(j);
	return 0;
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

void test_pause(const char *point)
{
	const char *k = getenv("ISOPOD_TEST_PAUSE_AT");

	if (k && !strcmp(k, point))
		raise(SIGSTOP);
}

void test_kill(const char *point)
{
	const char *k = getenv("ISOPOD_TEST_KILL_AT");

	if (k && !strcmp(k, point))
		raise(SIGKILL);
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

long long iso_parse(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	struct tm tm = { 0 };
	char back[32];
	const char *e;
	time_t t;
	size_t i;

	if (!s || strlen(s) != sizeof shape - 1)
		return -1;
	for (i = 0; shape[i]; i++)
		if (shape[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != shape[i])
			return -1;
	if (!(e = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm)) || *e)
		return -1;
	/* what it read prints back the same: not 2026-02-31, not 25:00:00 */
	t = timegm(&tm);
	if (!gmtime_r(&t, &tm) || !strftime(back, sizeof back, "%Y-%m-%dT%H:%M:%SZ", &tm) ||
	    strcmp(back, s))
		return -1;
	return (long long)t;
}

/* A time in ns, computed in uint64_t: anyone may set a file's mtime past
 * 2262 (touch -d @10000000000), where the signed product overflows
 * (undefined); unsigned wraps modulo 2^64, and for every time that fits
 * the bytes are the signed product's (stored cache keys stay valid). */
static int64_t ts_ns(const struct timespec *t)
{
	return (int64_t)((uint64_t)t->tv_sec * 1000000000u + (uint64_t)t->tv_nsec);
}

void stat_identity(const struct stat *st, int64_t v[STAT_IDENTITY_N])
{
	v[0] = (int64_t)st->st_dev;
	v[1] = (int64_t)st->st_ino;
	v[2] = (int64_t)st->st_size;
	v[3] = ts_ns(&st->st_mtim);
	v[4] = ts_ns(&st->st_ctim);
}

json_t *file_identity(const char *path, const struct stat *st)
{
	int64_t v[STAT_IDENTITY_N];

	stat_identity(st, v);
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "path", path, "dev", (json_int_t)v[0],
			 "ino", (json_int_t)v[1], "size", (json_int_t)v[2], "mtime_ns",
			 (json_int_t)v[3], "ctime_ns", (json_int_t)v[4]);
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

int vm_running(const char *id)
{
	char p[PATH_MAX];
	int fd;

	if (pathn(p, sizeof p, "%s/vms/%s/lock", store_home(), id) < 0)
		return -1;
	/* No lock file: never started.  Any other failure (EMFILE, EACCES...)
	 * cannot tell, and "not running" would let gc reap a live VM. */
	fd = open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	/* A shared probe fails exactly when the supervisor holds it (LOCK_EX):
	 * two probes at once (`isopod vm ls` in a loop, gc) never see each
	 * other as a running VM, as two exclusive ones would. */
	if (flock(fd, LOCK_SH | LOCK_NB) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return e == EWOULDBLOCK ? 1 : -1;
	}
	close(fd);
	return 0;
}

int boot_id_of(const char *s, char out[37])
{
	size_t i, n = strcspn(s, "\n");

	if (n != 36)
		return -1;
	for (i = 0; i < 36; i++)
		if ((i == 8 || i == 13 || i == 18 || i == 23) ? s[i] != '-'
							     : !strchr("0123456789abcdef", s[i]))
			return -1;
	memcpy(out, s, 36);
	out[36] = 0;
	return 0;
}

int host_boot_id(char out[37])
{
	char buf[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = 0;
		fclose(f);
	}
	return boot_id_of(buf, out);
}

int json_update_locked(const char *lockpath, const char *path,
		       int (*edit)(json_t *obj, void *arg), void *arg, unsigned flags)
{
	json_t *j;
	int lk, r, e;

	if ((lk = lock_open(lockpath, LOCK_EX)) < 0)
		return -1;
	if (!(j = json_load_path(path))) {
		r = -1;
		goto out;
	}
	r = edit(j, arg);
	if (r > 0 && json_write_atomic_flags(path, j, flags) < 0)
		r = -1;
out:
	e = errno;
	json_decref(j);
	close(lk);
	errno = e;
	return r;
}

int vm_wait_stopped(const char *id, int64_t deadline_ms)
{
	return vm_wait_stopped_fd(id, deadline_ms, -1);
}

int vm_wait_stopped_fd(const char *id, int64_t deadline_ms, int wake_fd)
{
	char p[PATH_MAX];
	int64_t fine = mono_ms() + 1000;
	struct pollfd w = { .fd = wake_fd, .events = POLLIN };
	int fd;

	if (pathn(p, sizeof p, "%s/vms/%s/lock", store_home(), id) < 0)
		return -1;
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
		/* A stop takes the supervisor ~50-150 ms after QEMU's quit:
		 * every 20 ms cost a run ~10 ms on average between its exit
		 * and ours.  2 ms for the first second (an open and a flock,
		 * microseconds each), then 20. */
		if (mono_ms() >= fine) {
			usleep(20 * 1000);
		} else if (w.fd < 0) {
			usleep(2000);
		} else if (poll(&w, 1, 2) != 0) {
			/* The supervisor gone (its files, the lock's among them,
			 * are closed before a pidfd turns readable), or poll
			 * failed: check now, and sleep from then on (a readable
			 * pidfd stays readable). */
			w.fd = -1;
		}
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


char *fd_text(int fd, size_t cap, size_t *n)
{
	char *b = malloc(cap + 1);
	ssize_t k;

	*n = 0;
	/* a pipe (no offset) is read as it comes */
	if (!b || (lseek(fd, 0, SEEK_SET) < 0 && errno != ESPIPE)) {
		free(b);
		return NULL;
	}
	while (*n < cap && ((k = read(fd, b + *n, cap - *n)) > 0 || (k < 0 && errno == EINTR)))
		if (k > 0)
			*n += (size_t)k;
	b[*n] = 0;
	return b;
}

int progress_fd(void)
{
	const char *e = getenv("ISOPOD_PROGRESS_FD");
	struct stat st;
	long long v;
	int fl;

	/* a regular file (isopod-mcp's memfd) only: a write there never
	 * blocks, where a pipe whose reader stalled would stop the writer's
	 * loop (isopod-slurm run's polls, its cancel on a signal) */
	if (!e || parse_ll(e, 3, 1 << 20, &v) < 0 || (fl = fcntl((int)v, F_GETFL)) < 0 ||
	    (fl & O_ACCMODE) == O_RDONLY || fstat((int)v, &st) < 0 || !S_ISREG(st.st_mode))
		return -1;
	fcntl((int)v, F_SETFD, FD_CLOEXEC);
	return (int)v;
}
