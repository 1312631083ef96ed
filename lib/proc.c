/* proc.c - spawn a program with an explicit descriptor plan (see proc.h). */
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int proc_child_setup(const struct proc_spec *ps, pid_t parent)
{
	int src[3 + PROC_KEEP_MAX], tmp[3 + PROC_KEEP_MAX];
	int n = 3 + ps->nkeep, i, nul = -1, top;
	sigset_t none;

	if (ps->nkeep < 0 || ps->nkeep > PROC_KEEP_MAX)
		return -1;
	if (ps->setsid && setsid() < 0)
		return -1;
	if (ps->pdeathsig) {
		if (prctl(PR_SET_PDEATHSIG, ps->pdeathsig) < 0)
			return -1;
		if (getppid() != parent) /* the parent died before prctl */
			return -1;
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (ps->umask >= 0)
		umask((mode_t)ps->umask);
	if (ps->nothp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) < 0)
		return -1;
	src[0] = ps->in;
	src[1] = ps->out;
	src[2] = ps->err;
	for (i = 0; i < ps->nkeep; i++)
		src[3 + i] = ps->keep[i];
	/* Every source first goes above the targets (close-on-exec), so no
	 * dup2 below can overwrite a source still to be placed. */
	top = n;
	for (i = 0; i < n; i++) {
		int s = src[i];

		if (s == PROC_INHERIT)
			s = i;
		else if (s == PROC_NULL && i < 3) {
			if (nul < 0 && (nul = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0)
				return -1;
			s = nul;
		} else if (s < 0) {
			tmp[i] = -1;
			continue;
		}
		if ((tmp[i] = fcntl(s, F_DUPFD_CLOEXEC, top)) < 0)
			return -1;
	}
	for (i = 0; i < n; i++) {
		if (tmp[i] < 0) {
			close(i);
			continue;
		}
		/* dup2 onto a different fd clears FD_CLOEXEC on the target */
		if (dup2(tmp[i], i) < 0)
			return -1;
	}
	close_range((unsigned)n, ~0U, 0);
	return 0;
}

/* Whether the caller's entry e (NAME=VALUE, its name nl long) is one of
 * ps->unset's names or patterns. */
static int unset_has(const struct proc_spec *ps, const char *e, size_t nl)
{
	for (size_t j = 0; ps->unset && ps->unset[j]; j++) {
		size_t ul = strlen(ps->unset[j]);

		if (ps->unset[j][ul - 1] == '*' ? nl >= ul - 1 && !strncmp(ps->unset[j], e, ul - 1)
						: ul == nl && !strncmp(ps->unset[j], e, nl))
			return 1;
	}
	return 0;
}

/* A NAME in ps->env replaces the caller's NAME, one in ps->unset drops
 * it; the array's strings are the caller's and ps's. */
char **proc_env(const struct proc_spec *ps)
{
	static char *const none[] = { NULL };
	char *const *env = ps->env ? ps->env : none;
	size_t n = 0, k = 0, i, j;
	char **out;

	for (i = 0; environ && environ[i]; i++)
		n++;
	for (j = 0; env[j]; j++)
		if (!strchr(env[j], '=') || env[j][0] == '=')
			return errno = EINVAL, NULL;
	for (i = 0; ps->unset && ps->unset[i]; i++)
		if (!ps->unset[i][0] || strchr(ps->unset[i], '='))
			return errno = EINVAL, NULL;
	if (!(out = calloc(n + j + 1, sizeof *out)))
		return NULL;
	for (i = 0; i < n; i++) {
		size_t nl = strcspn(environ[i], "=");
		int over = unset_has(ps, environ[i], nl);

		for (j = 0; env[j] && !over; j++)
			over = strcspn(env[j], "=") == nl && !strncmp(env[j], environ[i], nl);
		if (!over)
			out[k++] = environ[i];
	}
	for (j = 0; env[j]; j++)
		out[k++] = env[j];
	out[k] = NULL;
	return out;
}

/* In a vfork child, which runs on its parent's memory until it execs: a
 * handler of the parent's would run there and write the parent's memory,
 * so every signal with a handler goes back to its default before any is
 * unblocked (glibc's posix_spawn does the same). */
static void child_signals_default(void)
{
	struct sigaction sa, dfl = { .sa_handler = SIG_DFL };

	for (int s = 1; s < NSIG; s++)
		if (sigaction(s, NULL, &sa) == 0 && ((sa.sa_flags & SA_SIGINFO) ||
		    (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN)))
			sigaction(s, &dfl, NULL);
}

/* vfork, not fork (but with nothp, below): the child only sets its
 * descriptors up and execs, and copying the parent's page tables only to
 * drop them at the exec cost 2-4 ms a start on a host where page-table
 * work is dear (PVM; a 4 MiB heap: fork 4-6 ms, vfork 1.3, /bin/true
 * included; doc/SPEED.md "Goal 3, sixth round").  Until its exec the child makes system calls only (no
 * stdio, no allocation, no return), with every signal blocked until its
 * handlers are back to their defaults. */
pid_t proc_spawn(const struct proc_spec *ps)
{
	pid_t parent = getpid(), pid;
	char **volatile envp = NULL;
	sigset_t all, old;
	int e;

	/* built before the fork: the child only execs */
	if ((ps->env || ps->unset) && !(envp = proc_env(ps)))
		return -1;
	fflush(NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* nothp: fork.  PR_SET_THP_DISABLE marks the mm, which a vfork
	 * child shares with us until its exec: the flag would stay on the
	 * caller and on all it starts later (a KVM QEMU, qemu-img, the
	 * supervisor).  Not chosen: vfork, then the flag put back here
	 * after it (the kernel copies it into the new mm at the exec, so
	 * the program keeps it): that leaves it on our mm for the child's
	 * life up to its exec, seen by any other thread of ours (none
	 * today, this is a library) and by all it forks meanwhile, and adds
	 * a failure after the child is started.  The price is the page-table
	 * copy, +0.3 ms a spawn from a 4 MiB heap on this host (doc/SPEED.md
	 * "THP off for QEMU: its caller's left as it was"), on an unjailed
	 * TCG start only: a jailed one clones without CLONE_VM already
	 * (lib/jail.c). */
	if (ps->nothp)
		pid = fork();
	else
		pid = vfork();
	if (pid == 0) {
		char msg[512];
		int n;

		child_signals_default();
		if (proc_child_setup(ps, parent) < 0)
			_exit(126);
		if (ps->file)
			execve(ps->file, ps->argv, envp ? envp : environ);
		else
			execvpe(ps->argv[0], ps->argv, envp ? envp : environ);
		/* strerrordesc_np: no locale, no buffer of its own (strerror's
		 * translation could take a lock the parent holds) */
		e = errno;
		n = snprintf(msg, sizeof msg, "%s: fatal: unable to exec %s: %s\n",
			     progname ? progname : "isopod", ps->file ? ps->file : ps->argv[0],
			     strerrordesc_np(e) ? strerrordesc_np(e) : "unknown error");
		if (n > 0)
			(void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
		_exit(127);
	}
	e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	free((void *)envp);
	errno = e;
	return pid;
}

int proc_wait(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

int proc_status(int st)
{
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

int proc_exited_within(pid_t pid, int *st, int ms)
{
	int64_t until = mono_ms() + ms;

	for (;;) {
		if (waitpid(pid, st, WNOHANG) == pid)
			return 1;
		if (mono_ms() >= until)
			return 0;
		usleep(10 * 1000);
	}
}

int proc_run(char *const argv[], int out, int err)
{
	struct proc_spec ps = PROC_SPEC(argv);
	pid_t pid;
	int st;

	ps.out = out;
	ps.err = err;
	if ((pid = proc_spawn(&ps)) < 0 || proc_wait(pid, &st) < 0)
		return -1;
	return proc_status(st);
}

pid_t proc_spawn_pipe(const struct proc_spec *ps, int *rfd)
{
	struct proc_spec sp = *ps;
	int p[2], e, used = 0;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if (sp.out == PROC_PIPE)
		sp.out = p[1], used = 1;
	if (sp.err == PROC_PIPE)
		sp.err = p[1], used = 1;
	if (sp.in == PROC_PIPE) /* a pipe the caller reads is no one's input */
		used = 0;
	if (!used) {
		close(p[0]);
		close(p[1]);
		return errno = EINVAL, -1;
	}
	pid = proc_spawn(&sp);
	e = errno;
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return errno = e, -1;
	}
	*rfd = p[0];
	return pid;
}

int proc_capture(const struct proc_spec *ps, char *buf, size_t sz, size_t *len)
{
	return proc_capture_within(ps, buf, sz, len, -1);
}

int proc_capture_within(const struct proc_spec *ps, char *buf, size_t sz, size_t *len, int ms)
{
	char drop[4096];
	size_t got = 0, all = 0;
	int fd, st, rerr = 0, late = 0;
	int64_t until = ms < 0 ? 0 : mono_ms() + ms;
	ssize_t n;
	pid_t pid;

	if (len)
		*len = 0;
	if (sz)
		buf[0] = 0;
	if (!sz)
		return errno = EINVAL, -1;
	if ((pid = proc_spawn_pipe(ps, &fd)) < 0)
		return -1;
	for (;;) {
		/* past the buffer's end: read on and drop, so that it ends
		 * as it would have, not killed by a closed pipe */
		int room = got < sz - 1;

		if (ms >= 0) {
			struct pollfd pf = { .fd = fd, .events = POLLIN };
			int64_t left = until - mono_ms();

			if (left <= 0 || poll(&pf, 1, left > INT_MAX ? INT_MAX : (int)left) == 0) {
				late = 1;
				break;
			}
		}
		n = room ? read(fd, buf + got, sz - 1 - got) : read(fd, drop, sizeof drop);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rerr = n < 0 ? errno : 0;
			break;
		}
		all += (size_t)n;
		if (room)
			got += (size_t)n;
	}
	buf[got] = 0;
	close(fd);
	if (len)
		*len = all;
	/* its pipe closed (or the deadline passed) while it runs on, or a
	 * child of its own holds the pipe: what is left of the deadline,
	 * then SIGKILL (to its process group when it has a session of its
	 * own: what it started goes too) */
	if (ms >= 0 && !late) {
		int64_t left = until - mono_ms();

		late = !proc_exited_within(pid, &st, left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left);
	}
	if (late) {
		kill(ps->setsid ? -pid : pid, SIGKILL);
		if (proc_wait(pid, &st) < 0)
			return -1;
		return errno = ETIMEDOUT, -1;
	}
	if (ms < 0 && proc_wait(pid, &st) < 0)
		return -1;
	if (rerr)
		return errno = rerr, -1;
	return proc_status(st);
}

const char *proc_sibling(char *buf, size_t sz, const char *name, const char *env)
{
	const char *e = env ? getenv(env) : NULL;
	char self[PATH_MAX];
	ssize_t n;
	char *slash;

	if (e && *e) {
		snprintf(buf, sz, "%s", e);
		return buf;
	}
	n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0) {
		snprintf(buf, sz, "%s", name);
		return buf;
	}
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0';
	snprintf(buf, sz, "%s/%s", self, name);
	return buf;
}

int proc_tools_dir(char *buf, size_t sz)
{
	const char *e = getenv("ISOPOD_LIBEXEC");
	char self[PATH_MAX], *slash;
	ssize_t n;

	if (e && *e)
		return pathn(buf, sz, "%s", e);
	if ((n = readlink("/proc/self/exe", self, sizeof self - 1)) <= 0)
		return n == 0 ? (errno = ENOENT, -1) : -1;
	self[n] = '\0';
	if ((slash = strrchr(self, '/')))
		*slash = '\0';
	return pathn(buf, sz, "%s", self);
}

int proc_front_end(const char *dir, char *buf, size_t sz)
{
	char p[PATH_MAX], real[PATH_MAX];

	if (pathn(buf, sz, "%s/isopod", dir) == 0 && access(buf, X_OK) == 0)
		return 0;
	if (pathn(p, sizeof p, "%s/../sh/isopod", dir) < 0 || !realpath(p, real) ||
	    access(real, X_OK) < 0 || pathn(buf, sz, "%s", real) < 0)
		return -1;
	return 0;
}

int proc_ident(long long pid, unsigned long long *start, long long *uid, long long *euid)
{
	char p[64], buf[1024], *rp;
	long long r = -1, e = -1;
	FILE *fp;
	int i, got = 0;

	if (pid <= 0 || pid > INT_MAX)
		return -1;
	snprintf(p, sizeof p, "/proc/%lld/stat", pid);
	if (!(fp = fopen(p, "re")))
		return -1;
	rp = fgets(buf, sizeof buf, fp);
	fclose(fp);
	/* Field 22, counted after the ")" that ends comm (a comm may hold
	 * spaces and parentheses). */
	if (!rp || !(rp = strrchr(buf, ')')))
		return -1;
	for (i = 3, rp++; *rp && i <= 22; i++) {
		while (*rp == ' ')
			rp++;
		if (i == 22)
			got = sscanf(rp, "%llu", start) == 1;
		while (*rp && *rp != ' ')
			rp++;
	}
	if (!got)
		return -1;
	if (!uid && !euid)
		return 0;
	snprintf(p, sizeof p, "/proc/%lld/status", pid);
	if (!(fp = fopen(p, "re")))
		return -1;
	while (fgets(buf, sizeof buf, fp))
		if (sscanf(buf, "Uid: %lld %lld", &r, &e) == 2)
			break;
	fclose(fp);
	if (r < 0 || e < 0)
		return -1;
	if (uid)
		*uid = r;
	if (euid)
		*euid = e;
	return 0;
}

int proc_path_find(const char *name, char *out, size_t sz)
{
	const char *path = getenv("PATH"), *p, *e;

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path;; p = e + 1) {
		size_t n;

		e = strchr(p, ':');
		n = e ? (size_t)(e - p) : strlen(p);
		if (pathn(out, sz, "%.*s/%s", (int)(n ? n : 1), n ? p : ".", name) == 0 &&
		    access(out, X_OK) == 0)
			return 0;
		if (!e)
			break;
	}
	out[0] = 0;
	errno = ENOENT;
	return -1;
}

int proc_alive(long long pid)
{
	return pid > 0 && pid <= INT_MAX && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

time_t proc_started(long long pid)
{
	char buf[256];
	unsigned long long ticks = 0, btime = 0;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *fp;

	if (hz <= 0 || proc_ident(pid, &ticks, NULL, NULL) < 0 || !(fp = fopen("/proc/stat", "re")))
		return -1;
	while (fgets(buf, sizeof buf, fp))
		if (sscanf(buf, "btime %llu", &btime) == 1)
			break;
	fclose(fp);
	if (!btime)
		return -1;
	return (time_t)(btime + ticks / (unsigned long long)hz);
}
