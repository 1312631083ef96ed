/* proc.h - the one way a host tool starts another program.
 *
 * fork + exec with an explicit descriptor plan: stdin, stdout and stderr
 * named (or /dev/null), a keep-list that becomes fds 3, 4, ... in order,
 * every other descriptor closed; signals unblocked and SIGPIPE default;
 * optionally a session of its own, a parent-death signal, a umask and
 * variables added to the environment the program gets (the caller's own
 * environment is never changed to reach a child).
 * The fd plan is applied through descriptors above the target range, so a
 * source may be any fd, even one of the targets (bubblewrap's fdwalk and
 * catatonit do the same before exec). */
#ifndef ISOPOD_PROC_H
#define ISOPOD_PROC_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#define PROC_NULL (-1)    /* a std fd: /dev/null; a keep entry: left closed */
#define PROC_INHERIT (-2) /* a std fd: the caller's own */
#define PROC_PIPE (-3)    /* a std fd: the pipe back to the caller (proc_spawn_pipe,
			     proc_capture only) */
#define PROC_KEEP_MAX 8

struct proc_spec {
	char *const *argv;
	const char *file;       /* the program; NULL: argv[0] looked up in PATH */
	int in, out, err;       /* fds for 0, 1, 2: an fd, PROC_NULL or PROC_INHERIT */
	int keep[PROC_KEEP_MAX];/* keep[i] becomes fd 3+i (PROC_NULL: closed) */
	int nkeep;
	int pdeathsig;          /* 0: none; else delivered when the caller dies */
	int setsid;             /* 1: a session of its own */
	int umask;              /* -1: unchanged */
	char *const *env;       /* NULL, or "NAME=VALUE"s, NULL-ended: the program's
				   environment is the caller's with these set over it */
	char *const *unset;     /* NULL, or NAMEs, NULL-ended, taken out of the caller's
				   environment before env is set (a NAME ending in '*':
				   every name that starts with what comes before it) */
	int nothp;              /* 1: no transparent huge pages for the program nor
				   what it starts (PR_SET_THP_DISABLE, kept across fork
				   and execve, even over the program's MADV_HUGEPAGE);
				   the caller's own THP is untouched (proc_spawn forks
				   then, rather than vfork: the flag is the mm's) */
};

/* A spec with every member in its neutral state: argv set, std fds
 * /dev/null, nothing kept, umask unchanged. */
#define PROC_SPEC(av) { .argv = (av), .in = PROC_NULL, .out = PROC_NULL, .err = PROC_NULL, \
			.umask = -1 }

/* In a child just forked (by proc_spawn, or by a caller that runs code of
 * its own rather than exec, like the stage seal's hasher): apply the plan
 * (session, parent-death signal, umask, huge pages, descriptors; every fd
 * not in the plan closed).  parent is the forking process's pid.  0, or -1: the
 * child should _exit. */
int proc_child_setup(const struct proc_spec *ps, pid_t parent);
/* ps's program's environment, built before a fork (the child only
 * execs): the caller's less ps->unset, each of ps->env set over it.
 * Only the array is new (free it).  NULL with errno (EINVAL: an env
 * entry without '=', an unset entry that is empty or holds '='). */
char **proc_env(const struct proc_spec *ps);
/* Start it.  The child exits 126 when it cannot set its descriptors up,
 * 127 when exec fails (naming the program on its stderr).  The pid, or -1
 * with errno (EINVAL: an env entry without '='). */
pid_t proc_spawn(const struct proc_spec *ps);
/* waitpid, retrying on EINTR.  0, or -1 with errno. */
int proc_wait(pid_t pid, int *status);
/* Exit status as one number: the code, or 128+sig when signalled. */
int proc_status(int st);
/* Reap our child pid if it exits within ms milliseconds.  1 reaped. */
int proc_exited_within(pid_t pid, int *st, int ms);
/* Run argv to completion (stdin /dev/null, stdout and stderr as given).
 * Its proc_status, or -1 with errno when it could not be started. */
int proc_run(char *const argv[], int out, int err);
/* Start ps with each std fd that is PROC_PIPE (stdout, stderr or both)
 * on one pipe, whose read end (close-on-exec) goes to *rfd: for a caller
 * that reads the output as it comes.  The pid, or -1 with errno (EINVAL:
 * no std fd is PROC_PIPE), nothing left open. */
pid_t proc_spawn_pipe(const struct proc_spec *ps, int *rfd);
/* Run ps to completion with proc_spawn_pipe, what it writes to PROC_PIPE
 * in buf, NUL-ended: at most sz - 1 bytes, the rest read and dropped, so
 * the status is the program's own and not a SIGPIPE.  *len (may be NULL):
 * how many bytes it wrote in all; more than sz - 1 says buf is cut short.
 * Its proc_status, or -1 with errno (not started, a read failed: then
 * waited for all the same). */
int proc_capture(const struct proc_spec *ps, char *buf, size_t sz, size_t *len);
/* proc_capture within ms milliseconds (ms < 0: no bound, proc_capture):
 * past them the program is killed (SIGKILL; its whole process group when
 * ps->setsid) and reaped, and -1 comes back with errno ETIMEDOUT, buf
 * holding what it wrote so far (sbatch, scontrol and scancel that hang
 * on a slurmctld that does not answer). */
int proc_capture_within(const struct proc_spec *ps, char *buf, size_t sz, size_t *len, int ms);
/* The tool `name` beside the running program (isopod-boot finds
 * isopod-supervise so), or $env when set.  Returns buf. */
const char *proc_sibling(char *buf, size_t sz, const char *name, const char *env);
/* name found as execvp would find it: the first executable PATH entry
 * ("/usr/local/bin:/usr/bin:/bin" when PATH is unset or empty; an empty
 * entry is the current directory) into out.  0, or -1 with errno ENOENT. */
int proc_path_find(const char *name, char *out, size_t sz);
/* The directory of the isopod tools: $ISOPOD_LIBEXEC when set, else the
 * running program's own.  0, or -1 with errno (ENAMETOOLONG; /proc/self/exe
 * unreadable). */
int proc_tools_dir(char *buf, size_t sz);
/* The front end `isopod` beside the tools in dir (installed), else the
 * source tree's dir/../sh/isopod, resolved: what isopod-runner and
 * isopod-mcp run, and isopod-attest lists as a subject.  0, or -1 with
 * errno (ENOENT: in neither, or not executable). */
int proc_front_end(const char *dir, char *buf, size_t sz);

/* Who process pid is, as the kernel says and it cannot change: its start
 * (field 22 of /proc/PID/stat, clock ticks since boot) and its real and
 * effective uids (/proc/PID/status).  isopod-gc knows a leaked broker by
 * them, not by its cmdline, which the process may rewrite.  0, or -1
 * (gone, unreadable).  uid, euid may be NULL. */
int proc_ident(long long pid, unsigned long long *start, long long *uid, long long *euid);
/* Whether process pid exists (EPERM counts: it does). */
int proc_alive(long long pid);
/* When process pid started, in seconds since the epoch (/proc/stat's
 * btime plus its start: a second's resolution, btime jitters); -1 when it
 * is gone or /proc cannot say. */
time_t proc_started(long long pid);

#endif
