/* util.h - shared helpers of the host tools (glibc, jansson, libsodium).
 * Not linked into the agent: the agent must never call die(). */
#ifndef ISOPOD_UTIL_H
#define ISOPOD_UTIL_H

#include <jansson.h>
#include <sodium.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* isopod's version, as the front end's ISOPOD_VERSION says it (t/10-cli
 * checks that `isopod version` and the doctor agree). */
#define ISOPOD_VERSION "0.1.0"

/* Exit codes, the same in every tool and man page (doc/INTERFACES.md). */
enum {
	EX_OK = 0,
	EX_GUEST = 1,     /* the guest command failed: data, not a tool failure */
	EX_TIMEOUT = 99,  /* infrastructure timed out */
	EX_USAGE = 100,   /* usage / bad input */
	EX_NOTFOUND = 101,/* vm, stage, image not found */
	EX_CONFLICT = 102,/* busy / conflict / lock held */
	EX_SYS = 111      /* system or infrastructure failure */
};

extern const char *progname;

/* The failure contract (doc/INTERFACES.md, FAILURE): a tool that fails
 * (exit 99, 100, 101, 102, 111) leaves stdout empty (isopod-exec alone keeps
 * its ok:false result there), ends stderr with its diagnostic line, and, when
 * its caller set ISOPOD_STATUS_FD=N, writes to fd N one JSON object
 * {"error": <that line>, "error_kind": <kind>, "exit": <status>} + newline.
 * exit_kind is the one status -> kind table: timeout, usage, not_found,
 * busy, infra. */
const char *exit_kind(int code);
/* The errno of a lookup's refusal (a VM or stage reference) as the exit
 * status a tool's main gives it: EINVAL 100, ENOENT 101, ENOTUNIQ 102,
 * anything else 111. */
int exit_code_of(int err);
/* Write the status object (once per process; later calls do nothing).  A
 * caller with a more precise kind than exit_kind(code) names it. */
void status_report(int code, const char *kind, const char *line);
/* The status fd taken from ISOPOD_STATUS_FD at start (the variable is then
 * unset), for a child whose refusal is passed on as ours; -1: none. */
int status_fd(void);

/* die(code, fmt, ...): "isopod-X: fatal: <msg>" on stderr, exit code.
 * A message ending in ':' gets ": strerror(errno)" appended (sbase eprintf).
 * A message over DIAG_MAX bytes is cut (a last net under EXC() below). */
#define DIAG_MAX 4096
#define die(code, ...) die_kind((code), NULL, __VA_ARGS__)
/* die with a kind more precise than exit_kind(code) in the status object
 * (NULL: exit_kind(code); die is that). */
__attribute__((noreturn, format(printf, 3, 4))) void die_kind(int code, const char *kind,
							       const char *fmt, ...);
/* A command line of the wrong shape (an unknown option, an operand missing
 * or too many), the one usage shape of every tool: "usage: <synopsis>" on
 * stderr (synopsis: the tool's USAGE, the man page's SYNOPSIS; a line break
 * in it is followed by its own indentation), then the diagnostic
 * "isopod-X: fatal: <why>" last, as die(EX_USAGE) (status object kind
 * usage, exit 100).  A bad value of a well-formed option is die(EX_USAGE). */
__attribute__((noreturn, format(printf, 2, 3))) void die_usage(const char *synopsis,
								const char *fmt, ...);
__attribute__((format(printf, 1, 2))) void warnx_(const char *fmt, ...);
#define warn warnx_

/* Store root: $ISOPOD_HOME, else /var/lib/isopod as root, else $HOME/.isopod,
 * else the password database's home/.isopod, else /tmp/.isopod.  Never NULL,
 * never exits: a root too long for a path fails where a path is made. */
const char *store_home(void);
/* snprintf into a static-ish caller buffer; dies on truncation. */
__attribute__((format(printf, 3, 4))) char *pathf(char *buf, size_t sz, const char *fmt, ...);
/* snprintf a path that must fit: 0, or -1 (ENAMETOOLONG) with buf "" --
 * never a shorter, other path.  The library's pathf. */
__attribute__((format(printf, 3, 4))) int pathn(char *buf, size_t sz, const char *fmt, ...);
/* mkdir -p with mode; dies on failure. */
void mkdirs(const char *path, mode_t mode);
/* mkdir -p with mode: 0, or -1 with errno and the directory that could not
 * be made in failed (ENAMETOOLONG: path itself). */
int mkdir_p(const char *path, mode_t mode, char *failed, size_t fsz);
/* A directory of ours that others may share only by reading: path itself a
 * directory (not a symbolic link), owned by our euid, writable by neither
 * its group nor others (else another user could swap in what we write to
 * or read back).  Its fd (O_DIRECTORY, close-on-exec), or -1 with errno
 * (ELOOP or ENOTDIR: a link or no directory; EPERM: the owner or the
 * mode) and why, naming path. */
int dir_own_open(const char *path, char *why, size_t whysz);
/* The same for path below the directory at (AT_FDCWD: dir_own_open): a
 * chain of such directories opened step by step from a checked one, so
 * that no step is resolved through a directory another user could write
 * (lib/accelhost.c). */
int dir_own_openat(int at, const char *path, char *why, size_t whysz);

/* Atomic write: tmp + fsync + rename + fsync(dir).  Returns 0 or -1 (errno;
 * ENAMETOOLONG when the temporary name beside path does not fit).  mode:
 * the file's permission bits, or'ed with ATOMIC_NOSYNC for a file that
 * needs no durability (a cache, rebuilt when lost or torn): the rename
 * still gives a reader the old file or the new one, never half of one,
 * but neither fsync is made (a flag, not a second helper: one copy of
 * the temporary file's naming and cleanup). */
#define ATOMIC_NOSYNC 010000000u /* above every permission and type bit of mode_t */
/* Or'ed in mode instead: the bytes fsynced before the rename (a crash never
 * leaves a torn file in place of the whole one it replaced), but the
 * directory not, so the rename is not waited for (a crash may keep the
 * previous version, whole): for an update that a later fully synced write
 * of the same file supersedes, or one whose loss costs nothing
 * (doc/SPEED.md, "A run's fsyncs, audited"). */
#define ATOMIC_NODIRSYNC 020000000u /* above every permission and type bit, as ATOMIC_NOSYNC */
_Static_assert(((ATOMIC_NOSYNC | ATOMIC_NODIRSYNC) & (S_IFMT | 07777)) == 0,
	       "atomic_write's flags must not be permission or type bits of a mode");
int atomic_write(const char *path, const void *data, size_t len, mode_t mode);
/* The signals that end a tool by default and come to its whole process
 * group (isopod-mcp's cancel, a ^C): held over a window that must not be
 * cut in two (a file and its rename, a claim and its report); one that
 * came meanwhile ends the tool at stop_signals_release.  hold: 0, or -1
 * with errno; *old the mask to give back. */
int stop_signals_hold(sigset_t *old);
void stop_signals_release(const sigset_t *old);
/* Write a JSON object atomically (pretty, sorted keys off, trailing newline),
 * 0644; _flags: with atomic_write's flags (ATOMIC_NOSYNC, ATOMIC_NODIRSYNC:
 * flags only, the mode stays 0644; any other bit is EINVAL, so a
 * permission passed by mistake fails rather than making a 0000 file). */
int json_write_atomic(const char *path, json_t *obj);
int json_write_atomic_flags(const char *path, json_t *obj, unsigned flags);
/* Every JSON document a host tool reads goes through the four loaders below,
 * which refuse duplicate keys (JSON_REJECT_DUPLICATES: with "last one wins",
 * {"vm":{"id":A},"vm":{"id":B}} reads as B here and as A in a reader that
 * keeps the first) and anything over JSON_MAX_BYTES (each of our documents is
 * a few KiB; a hostile 100 MB one never reaches memory).  Only objects. */
#define JSON_MAX_BYTES (1u << 20)
/* Load a JSON object from a file; NULL with errno (ENOENT...), EINVAL on bad
 * JSON or a duplicate key, EFBIG over JSON_MAX_BYTES. */
json_t *json_load_path(const char *path);
/* The same from an open fd (read to its end, not closed). */
json_t *json_load_fd(int fd);
/* json_load_fd, then fd closed, errno kept.  fd < 0: NULL with errno as it
 * is, so that json_load_close(open(...)) says why the open failed. */
json_t *json_load_close(int fd);
/* json_load_path for a file whose contents we trust because we wrote it (a
 * cache): opened without following a link or waiting on a FIFO, and read
 * only when it is a regular file owned by our effective uid that neither
 * its group nor others may write; else NULL with errno (open's, fstat's,
 * EPERM: a file another user could have put or changed, or
 * json_load_fd's). */
json_t *json_load_ours(const char *path);
/* Read one JSON object from standard input (what follows it is left);
 * NULL with the problem in why (a duplicate key by name). */
json_t *json_load_stdin(char *why, size_t whysz);
/* json_load_stdin, or die with EX_USAGE and why: main only. */
json_t *json_read_stdin(void);
/* Parse buf[0..n) (one object; trailing bytes are an error unless
 * JSON_DISABLE_EOF_CHECK is in flags).  NULL with a reason in why (a bounded
 * text, may be NULL). */
json_t *json_parse(const char *buf, size_t n, size_t flags, char *why, size_t whysz);

/* Syntax of the store's names, checked before anything is looked up.
 * hex_span: how many lower-case hex digits s starts with. */
size_t hex_span(const char *s);
int hex64_ok(const char *s);      /* a sha256: kernel, base, warm key */
int id_vm_ok(const char *s);      /* "vm-" + 12 lower-case hex */
int id_stage_ok(const char *s);   /* "st-" + 12 lower-case hex */
/* A VM reference: an id, a unique id prefix (with or without "vm-") or a
 * vanity name: 1..63 of [a-z0-9-]. */
int vm_ref_ok(const char *s);

/* A diagnostic never echoes more than EXCERPT_MAX bytes of its input:
 * excerpt() writes p[0..n) with every byte outside printable ASCII (and the
 * backslash) as \xHH, cut after EXCERPT_MAX bytes with "…(N bytes)".
 * EXC(s) is excerpt of a C string into a buffer that lives as long as the
 * enclosing block: die(EX_USAGE, "bad id %s", EXC(id)). */
#define EXCERPT_MAX 200
#define EXCERPT_SZ (4 * EXCERPT_MAX + 40)
char *excerpt(char buf[EXCERPT_SZ], const void *p, size_t n);
#define EXC(s) excerpt((char[EXCERPT_SZ]){0}, (s), strlen(s))
/* fmt's text into buf as die() words it (a format ending in ':' gets
 * strerror(e) appended), for a library that hands its reason back. */
__attribute__((format(printf, 4, 0))) void vreason(char *buf, size_t sz, int e, const char *fmt, va_list ap);
/* vreason with errno's text, for a library's error return: errno kept,
 * code back, so one line both words the reason and picks the result
 * (`return reason_code(EX_USAGE, err, errsz, "bad %s", what);`): the one
 * "status + message" helper (bootopt's refusals, attest's classes). */
__attribute__((format(printf, 4, 5))) int reason_code(int code, char *err, size_t sz, const char *fmt, ...);
/* reason_code for the usual -1 (`return reason_fail(err, errsz, "open %s:", path);`). */
#define reason_fail(err, sz, ...) reason_code(-1, (err), (sz), __VA_ARGS__)

/* Print obj compactly + "\n" to stdout and check the write (dies EX_SYS). */
void json_emit(json_t *obj);
/* The failure contract's object, {ok:false, error, error_kind} (doc/
 * INTERFACES.md), for tools that answer a failure in JSON themselves. */
__attribute__((format(printf, 2, 3))) json_t *json_failure(const char *kind, const char *fmt, ...);

/* A tool's run options: those of its options that `isopod run` accepts too
 * and passes on as given (the front end knows none of them by name; it asks
 * the tool, `--run-options`).  name as in the tool's getopt table; arg the
 * value's placeholder in a usage line, NULL for an option without one;
 * repeat when the option may be given more than once.  Ends with name NULL. */
struct run_option {
	const char *name;
	const char *arg;
	int repeat;
};
struct option;
/* --run-options' answer, {"tool":progname,"run_options":[{"option":"--N",
 * "arg":A|null,"repeat":B}...]}; NULL with err when an entry is not in lo
 * or disagrees with it on taking a value (the two tables drifted). */
json_t *run_options_json(const struct run_option *ro, const struct option *lo, char *err,
			 size_t errsz);
/* --run-options=text's answer: one line per run option, "--N PLACEHOLDER R"
 * (PLACEHOLDER '-' for an option without a value, R 1 when repeatable, else
 * 0), what isopod run reads with its shell's `read`, without a JSON parser
 * on every run.  malloc'd; NULL with err as run_options_json, or when a
 * placeholder is empty, '-' or holds a blank (it would not read back). */
char *run_options_text(const struct run_option *ro, const struct option *lo, char *err,
		       size_t errsz);
/* That answer on stdout: the JSON one (json_emit), or with text the lines
 * of run_options_text; -1 with err as those. */
int run_options_print(const struct run_option *ro, const struct option *lo, int text, char *err,
		      size_t errsz);

/* Lock helpers: open (O_CREAT|O_CLOEXEC) and flock.  op = LOCK_EX / LOCK_SH,
 * optionally | LOCK_NB.  Returns the fd, or -1 with errno (EWOULDBLOCK = held). */
int lock_open(const char *path, int op);
/* The store-wide lock for read-decide-write mutations. */
int store_lock(void);
/* Tests stop a tool at a named point to look at the store in a window a
 * race would otherwise open: ISOPOD_TEST_PAUSE_AT=<point> makes the process
 * SIGSTOP itself there (the test resumes it with SIGCONT).  A no-op unless
 * the variable names this point. */
void test_pause(const char *point);
/* ISOPOD_TEST_KILL_AT=<point>: the process SIGKILLs itself there (the
 * tests of what a killed tool leaves). */
void test_kill(const char *point);

/* Milliseconds: monotonic and wall clock (epoch). */
int64_t mono_ms(void);
int64_t wall_ms(void);
/* ISO-8601 UTC timestamp of now, into buf (>= 32 bytes). */
char *iso_now(char *buf, size_t sz);
/* The seconds since the epoch that s says, when s is a real UTC time
 * written exactly YYYY-MM-DDTHH:MM:SSZ, as isopod writes and signs them
 * (times of that one shape compare as strings); -1 for anything else
 * (strptime alone takes spaces, one-digit fields and 2026-02-31). */
long long iso_parse(const char *s);

/* Random bytes (getrandom).  0, or -1 with errno. */
int rand_bytes(void *buf, size_t n);
/* Lower-case hex of n random bytes into out (2n+1).  0, or -1 with errno
 * (out is then ""). */
int rand_hex(char *out, size_t nbytes);

/* sha256 of a file, lower-case hex into out[65].  -1 with errno on failure. */
int sha256_file(const char *path, char out[65]);
/* sha256 of what fd holds from its offset to its end (the offset left at
 * the end); holes are hashed as the zeros they read as, without reading
 * them.  A pipe is read.  -1 with errno on failure. */
int sha256_fd(int fd, char out[65]);
void sha256_hex(const void *data, size_t n, char out[65]);
/* An incremental SHA-256, sha256_fd's: OpenSSL's libcrypto when it loads
 * (the CPU's SHA instructions, ~6x libsodium's portable code here), else
 * libsodium's; the same digest.  sha256_end writes it into h and frees
 * the state: -1 when libcrypto failed (an update or the final). */
struct sha256_stream {
	crypto_hash_sha256_state st;
	void *lib, *ctx;
	int bad; /* an update libcrypto refused: the digest is not the input's */
	int (*update)(void *, const void *, size_t);
	int (*final)(void *, unsigned char *, unsigned int *);
	void (*free)(void *);
};
void sha256_begin(struct sha256_stream *f);
void sha256_add(struct sha256_stream *f, const void *b, size_t n);
int sha256_end(struct sha256_stream *f, unsigned char h[32]);
/* A file's identity as the caches keyed by one compare it: st's dev, ino,
 * size, mtime and ctime (both in ns), in that order.  A package upgrade
 * replaces the inode; a rewrite in place moves ctime, which nobody can set
 * back. */
#define STAT_IDENTITY_N 5
void stat_identity(const struct stat *st, int64_t v[STAT_IDENTITY_N]);
/* What a cache keyed by a file's identity compares: {path, dev, ino, size,
 * mtime_ns, ctime_ns} of st (path's stat).  A package upgrade replaces the
 * inode; a rewrite in place moves ctime, which nobody can set back.  NULL:
 * out of memory. */
json_t *file_identity(const char *path, const struct stat *st);

/* Parse a decimal integer in [lo, hi]; -1 if not a number or out of range. */
int parse_ll(const char *s, long long lo, long long hi, long long *out);
/* The caller's progress descriptor (ISOPOD_PROGRESS_FD, isopod-mcp's: one
 * line there is one notifications/progress; isopod-stage flatten,
 * isopod-slurm run), made close-on-exec (no program we start writes
 * there), or -1: none, not a number from 3, or not open for writing. */
int progress_fd(void);

/* Is the VM's supervisor alive (its lock on vms/<id>/lock is held)?  1 or
 * 0 (0 only when the lock is free or there is none); -1 with errno when it
 * cannot tell (the lock's path does not fit, ENAMETOOLONG; the lock cannot
 * be opened or probed), which every caller takes as running: the answer
 * that removes and starts nothing. */
int vm_running(const char *id);
/* The host's boot id (/proc/sys/kernel/random/boot_id,
 * "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"): a new one after every boot of
 * the host, so what names a process by its pid and start (ticks since
 * boot) can tell this boot from an earlier one.  0, or -1 when it cannot
 * be read or is not of that shape.  boot_id_of: s (a line, its newline
 * dropped) checked and copied to out, the same answers. */
int host_boot_id(char out[37]);
int boot_id_of(const char *s, char out[37]);

/* connect(2) the AF_UNIX stream socket fd to the socket at path, never
 * through a symbolic link: a VM's sockets are in a directory its jailed
 * QEMU can write, and a link planted there must not steer a root tool to
 * another socket.  The path's last component is opened O_PATH|O_NOFOLLOW
 * and the connect goes through /proc/self/fd.  0, or -1 with errno
 * (ELOOP: a link; ENOTSOCK: not a socket; ENOENT, ECONNREFUSED as connect). */
int unix_connect_nofollow(int fd, const char *path);

/* One sendmsg(2) of buf[0..n) on the socket sock with the descriptor fd
 * riding along (SCM_RIGHTS) when fd >= 0, MSG_NOSIGNAL: sendmsg's answer
 * (the bytes sent, or -1 with errno).  The one such sender: QMP's fd
 * commands (lib/qmp.c) and the pool's owner hand-over (lib/pool.c). */
ssize_t fd_send(int sock, const void *buf, size_t n, int fd);
/* One recvmsg(2) into buf[0..n) on sock, MSG_CMSG_CLOEXEC; a descriptor
 * that came with it (exactly one, SCM_RIGHTS) in *fd, else *fd = -1 (any
 * other received is closed).  recvmsg's answer. */
ssize_t fd_recv(int sock, void *buf, size_t n, int *fd);
/* Write all of buf to fd, retrying on EINTR/short writes; -1 on error. */
int write_all(int fd, const void *buf, size_t n);

/* (lib/utf8.c) A JSON string from guest bytes: invalid UTF-8 and NUL become U+FFFD; with
 * `cut`, a character split by a size cap at the end is dropped. */
json_t *utf8_json(const uint8_t *p, size_t n, int cut);
/* 1 when p[0..n) is all valid UTF-8 (no overlong forms, no surrogates). */
int utf8_valid(const void *p, size_t n);

/* Locked read-modify-write of the JSON object in path: under an flock
 * LOCK_EX on lockpath (created if need be), path is loaded (json_load_path)
 * and edit(obj, arg) decides: 1 write obj back atomically, 0 leave the file
 * as it is, -1 fail (errno).  Returns edit's answer, or -1 with errno (the
 * lock, the load or the write failed: ENOENT when path does not exist).
 * flags: the write's, as json_write_atomic_flags's (0, or ATOMIC_NODIRSYNC
 * for an update a later synced one supersedes); the file is 0644.
 * The one such helper: VM records (lib/vm.c) and stage seals use it. */
int json_update_locked(const char *lockpath, const char *path,
		       int (*edit)(json_t *obj, void *arg), void *arg, unsigned flags);
/* Wait until vms/<id>/lock is free (poll LOCK_EX|LOCK_NB every 2 ms for a
 * second, then every 20 ms) or the
 * monotonic deadline passes.  0 free, -1 still held (errno ETIMEDOUT) or
 * the lock's path too long (ENAMETOOLONG).  vm_wait_stopped_fd: the same,
 * but the 2 ms waits end early when wake_fd (a pidfd of the supervisor,
 * or -1) turns readable; the lock is what is checked, always, so a wrong
 * or stale wake_fd only leaves the polls as they were. */
int vm_wait_stopped(const char *id, int64_t deadline_ms);
int vm_wait_stopped_fd(const char *id, int64_t deadline_ms, int wake_fd);
/* pidfd_open(2) / pidfd_send_signal(2) through syscall(2). */
int pidfd_open_(pid_t pid);
int pidfd_kill(int pidfd, int sig);
/* At most cap bytes of fd from its start (a memfd a child wrote; a pipe
 * from where it is), NUL-terminated, their number in *n; NULL with errno.
 * Reading stops at end of file or at a read error other than EINTR (then
 * errno says which, and *n counts what came before). */
char *fd_text(int fd, size_t cap, size_t *n);

#endif
