/* proc_test.c - the one spawn helper (lib/proc.c): its descriptor plan,
 * statuses, and the optional session, umask and parent-death signal. */
#include "../../lib/proc.c" /* self-contained: t/run-unit links frame+util only */

#include <stdlib.h>

#include "tap.h"

/* Run ps with stdout captured (proc_capture); the output (trailing
 * newline dropped) into out, the status as proc_status.  -1 when it could
 * not be started. */
static int capture(struct proc_spec *ps, char *out, size_t sz)
{
	size_t got;
	int r;

	ps->out = PROC_PIPE;
	r = proc_capture(ps, out, sz, NULL);
	if ((got = strlen(out)) && out[got - 1] == '\n')
		out[got - 1] = 0;
	return r;
}

/* Our own /proc/self/status THP_enabled line, without its newline. */
static const char *own_thp(char *buf, size_t sz)
{
	FILE *f = fopen("/proc/self/status", "r");

	buf[0] = 0;
	while (f && fgets(buf, (int)sz, f) && strncmp(buf, "THP_enabled:", 12))
		buf[0] = 0;
	if (f)
		fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

/* pid is there and not a zombie (a killed child of a shell that exited
 * is its new parent's to reap, whenever that is) */
static int alive(long pid)
{
	char p[64], buf[512], *rp;
	FILE *f;

	snprintf(p, sizeof p, "/proc/%ld/stat", pid);
	if (!(f = fopen(p, "r")))
		return 0;
	rp = fgets(buf, sizeof buf, f);
	fclose(f);
	return rp && (rp = strrchr(buf, ')')) && rp[1] == ' ' && rp[2] != 'Z';
}

/* The shell's own descriptors, listed by a child (ls) so that listing
 * them opens none in the shell. */
static int fds_of(struct proc_spec *ps, char *out, size_t sz)
{
	static char *av[] = { "sh", "-c", "ls /proc/$$/fd", NULL };
	int r;

	ps->argv = av;
	r = capture(ps, out, sz);
	for (char *p = out; *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (strlen(out) + 1 < sz)
		strcat(out, " ");
	return r;
}

int main(void)
{
	char out[512], p1[64], p2[64], thp[64];
	char *t_true[] = { "true", NULL }, *t_false[] = { "false", NULL };
	char *t_missing[] = { "/nonexistent/isopod-no-such-program", NULL };
	char *t_kill[] = { "sh", "-c", "kill -9 $$", NULL };
	char *t_umask[] = { "sh", "-c", "umask", NULL };
	char *t_thp[] = { "sh", "-c", "exec grep -E '^THP_enabled' /proc/self/status", NULL };
	char *t_sid[] = { "sh", "-c", "[ \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$ ] && echo leader", NULL };
	char *t_mask[] = { "sh", "-c", "exec grep -E '^SigBlk' /proc/self/status", NULL };
	char *t_arg0[] = { "custom-name", "-c", "echo $0", NULL };
	char *t_in[] = { "cat", NULL };
	char *t_sleep[] = { "sleep", "30", NULL };
	struct proc_spec ps = PROC_SPEC(t_true);
	int a, b, leak, r, st, pp[2];
	sigset_t term;
	pid_t mid = -1, kid = -1;

	progname = "proc_test";
	ok(proc_run(t_true, PROC_NULL, PROC_NULL) == 0, "true: 0");
	ok(proc_run(t_false, PROC_NULL, PROC_NULL) == 1, "false: 1");
	ok(proc_run(t_missing, PROC_NULL, PROC_NULL) == 127, "a program that is not there: 127");
	ok(proc_run(t_kill, PROC_NULL, PROC_NULL) == 128 + SIGKILL, "killed by SIGKILL: 137");

	/* Nothing leaks: a descriptor without FD_CLOEXEC is closed too. */
	leak = open("/dev/null", O_RDONLY);
	r = fds_of(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, "0 1 2 "), "only 0 1 2 by default (a non-cloexec fd %d was open): %s",
	   leak, out);

	/* The keep-list becomes 3, 4, ...; a PROC_NULL entry stays closed. */
	snprintf(p1, sizeof p1, "/tmp/proc_test.%ld.a", (long)getpid());
	snprintf(p2, sizeof p2, "/tmp/proc_test.%ld.b", (long)getpid());
	a = open(p1, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	b = open(p2, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ps = (struct proc_spec)PROC_SPEC(t_true);
	ps.keep[0] = a;
	ps.keep[1] = PROC_NULL;
	ps.keep[2] = b;
	ps.nkeep = 3;
	r = fds_of(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, "0 1 2 3 5 "), "keep {a, closed, b}: 0 1 2 3 5: %s", out);
	{
		char *av[] = { "sh", "-c", "readlink /proc/$$/fd/3 /proc/$$/fd/5 | tr '\\n' ' '", NULL };
		char want[200];

		ps.argv = av;
		r = capture(&ps, out, sizeof out);
		snprintf(want, sizeof want, "%s %s ", p1, p2);
		ok(r == 0 && !strcmp(out, want), "fd 3 is a, fd 5 is b: %s", out);
	}

	/* Sources that are themselves targets: move a to 4 and b to 3 first,
	 * then ask for them swapped. */
	if (dup2(a, 4) == 4 && dup2(b, 3) == 3) {
		char *av[] = { "sh", "-c", "readlink /proc/$$/fd/3 /proc/$$/fd/4 | tr '\\n' ' '", NULL };
		char want[200];

		ps = (struct proc_spec)PROC_SPEC(av);
		ps.keep[0] = 4;
		ps.keep[1] = 3;
		ps.nkeep = 2;
		r = capture(&ps, out, sizeof out);
		snprintf(want, sizeof want, "%s %s ", p1, p2);
		ok(r == 0 && !strcmp(out, want), "keep {4, 3} swaps them: %s", out);
		close(3);
		close(4);
	} else {
		ok(0, "dup2 for the swap test");
	}
	/* A kept fd that is already its own target (dup2 onto itself would
	 * keep FD_CLOEXEC) */
	if (dup2(a, 3) == 3 && fcntl(3, F_SETFD, FD_CLOEXEC) == 0) {
		ps = (struct proc_spec)PROC_SPEC(t_true);
		ps.keep[0] = 3;
		ps.nkeep = 1;
		r = fds_of(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "0 1 2 3 "), "a close-on-exec fd 3 kept as 3: %s", out);
		close(3);
	}

	/* stdin: /dev/null by default, or the caller's own. */
	ps = (struct proc_spec)PROC_SPEC(t_in);
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && !out[0], "stdin is /dev/null by default");
	if (write(b, "from b\n", 7) == 7 && lseek(b, 0, SEEK_SET) == 0) {
		ps = (struct proc_spec)PROC_SPEC(t_in);
		ps.in = b;
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "from b"), "stdin from an fd: %s", out);
	}

	ps = (struct proc_spec)PROC_SPEC(t_umask);
	ps.umask = 077;
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, "0077"), "umask 077: %s", out);
	/* nothp: the kernel says THP is off for the program (exec'd after
	 * the prctl: the flag is kept across execve); by default as ours
	 * (1, or 0 on a kernel without THP: t/35's guest) */
	ps = (struct proc_spec)PROC_SPEC(t_thp);
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, own_thp(thp, sizeof thp)), "THP as ours by default: %s", out);
	ps.nothp = 1;
	{
		/* ... and not for us: the flag is the mm's, and a vfork
		 * child's mm is its parent's until the exec (a TCG start
		 * must leave its caller, and the KVM QEMU it starts later,
		 * with huge pages).  Ours cleared first, so that the check
		 * can fail when we were started with it set (bench/run sets
		 * it on itself). */
		char before[64];
		int cleared = prctl(PR_SET_THP_DISABLE, 0, 0, 0, 0), is;

		own_thp(before, sizeof before);
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "THP_enabled:\t0"), "nothp: THP_enabled 0: %s", out);
		is = prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0);
		own_thp(thp, sizeof thp);
		ok(cleared == 0 && is == 0 && !strcmp(thp, before),
		   "nothp: the caller's THP left on: PR_GET_THP_DISABLE %d, %s -> %s", is, before, thp);
	}
	ps = (struct proc_spec)PROC_SPEC(t_sid);
	r = capture(&ps, out, sizeof out);
	ok(r == 1 && !out[0], "no session of its own unless asked");
	ps.setsid = 1;
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, "leader"), "setsid: a session leader: %s", out);

	/* Signals blocked here are unblocked there (a supervisor blocks the
	 * ones its signalfd reads). */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	ps = (struct proc_spec)PROC_SPEC(t_mask);
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && strstr(out, "0000000000000000"), "signal mask cleared: %s", out);
	sigprocmask(SIG_UNBLOCK, &term, NULL);

	/* env: set in the program's environment over the caller's, by PATH
	 * lookup and by file; the caller's own environment never changes. */
	setenv("PROC_TEST_KEPT", "mine", 1);
	setenv("PROC_TEST_OVER", "caller", 1);
	unsetenv("PROC_TEST_NEW");
	{
		char *t_env[] = { "sh", "-c", "echo \"$PROC_TEST_KEPT $PROC_TEST_OVER $PROC_TEST_NEW\"", NULL };
		char *add[] = { "PROC_TEST_OVER=child", "PROC_TEST_NEW=a=b c", NULL };
		char *bad[] = { "NOEQUALS", NULL }, *bad2[] = { "=x", NULL };

		ps = (struct proc_spec)PROC_SPEC(t_env);
		ps.env = add;
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "mine child a=b c"), "env set over the caller's (PATH): %s", out);
		ps.file = "/bin/sh";
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "mine child a=b c"), "env set over the caller's (file): %s", out);
		ok(!strcmp(getenv("PROC_TEST_OVER") ?: "", "caller") && !getenv("PROC_TEST_NEW"),
		   "the caller's environment is unchanged");
		ps.env = NULL;
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "mine caller "), "no env: the caller's as it is: %s", out);
		ps.env = bad;
		errno = 0;
		ok(proc_spawn(&ps) == -1 && errno == EINVAL, "an env entry without '=': EINVAL, nothing started");
		ps.env = bad2;
		errno = 0;
		ok(proc_spawn(&ps) == -1 && errno == EINVAL, "an env entry without a name: EINVAL");
	}
	/* unset: names and NAME* patterns taken out of the caller's, then env
	 * set over it (lib/slurmjob.c: Slurm's option variables, SLURM_CONF kept) */
	setenv("PROC_TESTX_A", "a", 1);
	setenv("PROC_TESTX_B", "b", 1);
	setenv("PROC_TESTX", "c", 1);
	setenv("PROC_TESTY", "y", 1);
	setenv("PROC_TESTY2", "y2", 1);
	{
		char *t_env[] = { "sh", "-c", "env | grep ^PROC_TEST | LC_ALL=C sort | tr '\\n' ' '", NULL };
		char *un[] = { "PROC_TESTX*", "PROC_TESTY", "PROC_TEST_NOTSET", NULL };
		char *add[] = { "PROC_TESTX_B=again", NULL };
		char *bad[] = { "A=B", NULL }, *bad2[] = { "", NULL };

		ps = (struct proc_spec)PROC_SPEC(t_env);
		ps.unset = un;
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "PROC_TESTY2=y2 PROC_TEST_KEPT=mine PROC_TEST_OVER=caller "),
		   "unset: a NAME* pattern takes every name it starts, a NAME that name alone: %s", out);
		ps.env = add;
		r = capture(&ps, out, sizeof out);
		ok(r == 0 && !strcmp(out, "PROC_TESTX_B=again PROC_TESTY2=y2 PROC_TEST_KEPT=mine PROC_TEST_OVER=caller "),
		   "unset, then env set over it: %s", out);
		ok(!strcmp(getenv("PROC_TESTX_A") ?: "", "a") && !strcmp(getenv("PROC_TESTY") ?: "", "y"),
		   "unset: the caller's environment is unchanged");
		ps.env = NULL;
		ps.unset = bad;
		errno = 0;
		ok(proc_spawn(&ps) == -1 && errno == EINVAL, "an unset entry with '=': EINVAL, nothing started");
		ps.unset = bad2;
		errno = 0;
		ok(proc_spawn(&ps) == -1 && errno == EINVAL, "an empty unset entry: EINVAL");
	}
	unsetenv("PROC_TESTX_A"), unsetenv("PROC_TESTX_B"), unsetenv("PROC_TESTX");
	unsetenv("PROC_TESTY"), unsetenv("PROC_TESTY2");

	ps = (struct proc_spec)PROC_SPEC(t_arg0);
	ps.file = "/bin/sh";
	r = capture(&ps, out, sizeof out);
	ok(r == 0 && !strcmp(out, "custom-name"), "file and argv[0] apart: %s", out);

	/* The parent-death signal: a middle process spawns sleep with
	 * SIGKILL as its pdeathsig, reports its pid and exits. */
	fflush(stdout);
	if (pipe(pp) == 0 && (mid = fork()) == 0) {
		ps = (struct proc_spec)PROC_SPEC(t_sleep);
		ps.pdeathsig = SIGKILL;
		kid = proc_spawn(&ps);
		if (write(pp[1], &kid, sizeof kid) != (ssize_t)sizeof kid)
			_exit(1);
		_exit(0);
	} else {
		int gone = 0;

		close(pp[1]);
		if (read(pp[0], &kid, sizeof kid) != (ssize_t)sizeof kid)
			kid = -1;
		close(pp[0]);
		proc_wait(mid, &st);
		for (int i = 0; i < 200 && kid > 0 && !gone; i++) {
			char sp[64], stat[512] = "";
			FILE *f;

			snprintf(sp, sizeof sp, "/proc/%ld/stat", (long)kid);
			/* gone, or a zombie waiting for init to reap it */
			if (!(f = fopen(sp, "r")))
				gone = 1;
			else {
				if (fgets(stat, sizeof stat, f) && strstr(stat, ") Z "))
					gone = 1;
				fclose(f);
			}
			if (!gone)
				usleep(10000);
		}
		ok(kid > 0 && gone, "pdeathsig: the child died with its parent (pid %ld)", (long)kid);
		if (kid > 0 && !gone)
			kill(kid, SIGKILL);
	}

	/* proc_capture: stdout, stderr or both into a bounded buffer; what
	 * does not fit is read and dropped, the status is the program's. */
	{
		char *t_both[] = { "sh", "-c", "echo out; echo err >&2; exit 3", NULL };
		char *t_long[] = { "sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; "
				  "i=$((i + 1)); done; exit 4", NULL };
		char small[16];
		size_t len = 0;
		int a2, b2;

		ps = (struct proc_spec)PROC_SPEC(t_both);
		ps.out = PROC_PIPE;
		r = proc_capture(&ps, out, sizeof out, &len);
		ok(r == 3 && !strcmp(out, "out\n") && len == 4, "capture stdout: exit 3, \"out\": %d %s", r,
		   out);
		ps.out = PROC_NULL, ps.err = PROC_PIPE;
		r = proc_capture(&ps, out, sizeof out, &len);
		ok(r == 3 && !strcmp(out, "err\n"), "capture stderr alone: %s", out);
		ps.out = PROC_PIPE;
		r = proc_capture(&ps, out, sizeof out, &len);
		ok(r == 3 && !strcmp(out, "out\nerr\n") && len == 8, "capture both: %s", out);
		ps = (struct proc_spec)PROC_SPEC(t_long);
		ps.out = PROC_PIPE;
		r = proc_capture(&ps, small, sizeof small, &len);
		ok(r == 4 && len == 100000 && strlen(small) == sizeof small - 1 &&
		   strspn(small, "x") == sizeof small - 1,
		   "over-long output: the first %zu bytes kept, %zu counted, its own exit 4 (%d)",
		   strlen(small), len, r);
		ps = (struct proc_spec)PROC_SPEC(t_missing);
		ps.out = PROC_PIPE, ps.err = PROC_PIPE;
		r = proc_capture(&ps, out, sizeof out, &len);
		ok(r == 127 && strstr(out, "unable to exec /nonexistent/isopod-no-such-program"),
		   "a program that is not there: 127 and why: %s", out);
		ps = (struct proc_spec)PROC_SPEC(t_true);
		errno = 0;
		ok(proc_capture(&ps, out, sizeof out, &len) == -1 && errno == EINVAL,
		   "no std fd on the pipe: EINVAL, nothing started");
		ps.out = PROC_PIPE;
		ps.env = (char *[]){ "NOEQUALS", NULL };
		a2 = dup(0);
		close(a2);
		errno = 0;
		r = proc_capture(&ps, small, sizeof small, &len);
		b2 = dup(0);
		close(b2);
		ok(r == -1 && errno == EINVAL && a2 == b2,
		   "a spawn refused: -1, no descriptor left open (lowest free %d, then %d)", a2, b2);
	}

	/* proc_capture_within: a program that hangs (sbatch, scontrol or
	 * scancel on a slurmctld that does not answer) is killed at its
	 * deadline and reaped, -1 ETIMEDOUT with what it wrote; its session's
	 * children too (setsid: the group is killed, so a sleep holding the
	 * pipe is no hang either); one that ends in time is its status. */
	{
		char *t_hang[] = { "sh", "-c", "echo part; exec sleep 30", NULL };
		char *t_kid[] = { "sh", "-c", "sleep 30 & echo $!; exit 0", NULL };
		char *t_quick[] = { "sh", "-c", "echo done; exit 5", NULL };
		int64_t t0 = mono_ms(), el;
		size_t len = 0;
		long kid = 0;

		ps = (struct proc_spec)PROC_SPEC(t_hang);
		ps.out = PROC_PIPE;
		errno = 0;
		r = proc_capture_within(&ps, out, sizeof out, &len, 300);
		el = mono_ms() - t0;
		ok(r == -1 && errno == ETIMEDOUT && !strcmp(out, "part\n") && el >= 300 && el < 3000,
		   "capture within 300 ms: a hang is killed, ETIMEDOUT, its output so far (%d, %lld ms, %s)", r,
		   (long long)el, out);
		ps = (struct proc_spec)PROC_SPEC(t_kid);
		ps.out = PROC_PIPE, ps.setsid = 1;
		t0 = mono_ms();
		errno = 0;
		r = proc_capture_within(&ps, out, sizeof out, &len, 300);
		el = mono_ms() - t0;
		kid = atol(out);
		usleep(100 * 1000);
		ok(r == -1 && errno == ETIMEDOUT && el < 3000 && kid > 0 && !alive(kid),
		   "capture within: a child holding the pipe past the deadline is killed with its group (%d, %lld ms, pid %ld)",
		   r, (long long)el, kid);
		if (kid > 0)
			kill((pid_t)kid, SIGKILL);
		ps = (struct proc_spec)PROC_SPEC(t_quick);
		ps.out = PROC_PIPE;
		r = proc_capture_within(&ps, out, sizeof out, &len, 5000);
		ok(r == 5 && !strcmp(out, "done\n"), "capture within: in time, its own status (%d)", r);
	}

	/* A program on PATH as execvp finds it (isopod-doctor's checks, the
	 * warm pool's QEMU): the first executable entry; an empty entry is
	 * ".", a missing program ENOENT and "" */
	{
		char f[PATH_MAX], *old = getenv("PATH") ? strdup(getenv("PATH")) : NULL;

		setenv("PATH", "/nonexistent:/bin:/usr/bin", 1);
		ok(proc_path_find("sh", f, sizeof f) == 0 && !strcmp(f, "/bin/sh"),
		   "path_find: the first executable entry (%s)", f);
		setenv("PATH", "/nonexistent", 1);
		errno = 0;
		ok(proc_path_find("sh", f, sizeof f) == -1 && errno == ENOENT && !f[0],
		   "path_find: nowhere: -1 ENOENT, \"\"");
		setenv("PATH", "", 1);
		ok(proc_path_find("sh", f, sizeof f) == 0 && !strncmp(f, "/", 1),
		   "path_find: an empty PATH is the default one (%s)", f);
		setenv("PATH", ":/nonexistent", 1);
		ok(proc_path_find("proc_test.bin", f, sizeof f) == (access("proc_test.bin", X_OK) ? -1 : 0),
		   "path_find: an empty entry is the current directory");
		if (old) {
			setenv("PATH", old, 1);
			free(old);
		}
	}

	/* The tools' directory and the front end beside it (isopod-runner,
	 * isopod-mcp), or the source tree's ../sh/isopod. */
	{
		char d[PATH_MAX], t[64], f[PATH_MAX], w[PATH_MAX + 256];
		char *slash;

		setenv("ISOPOD_LIBEXEC", "/opt/isopod/libexec", 1);
		ok(proc_tools_dir(d, sizeof d) == 0 && !strcmp(d, "/opt/isopod/libexec"),
		   "tools dir: $ISOPOD_LIBEXEC as is: %s", d);
		unsetenv("ISOPOD_LIBEXEC");
		r = readlink("/proc/self/exe", w, sizeof w - 1);
		w[r > 0 ? r : 0] = 0;
		if ((slash = strrchr(w, '/')))
			*slash = 0;
		ok(proc_tools_dir(d, sizeof d) == 0 && !strcmp(d, w), "tools dir: else our own: %s", d);
		snprintf(t, sizeof t, "/tmp/proc_test.%ld.tree", (long)getpid());
		snprintf(w, sizeof w, "mkdir -p %s/bin %s/sh && touch %s/sh/isopod", t, t, t);
		r = system(w);
		snprintf(d, sizeof d, "%s/bin", t);
		errno = 0;
		ok(r == 0 && proc_front_end(d, f, sizeof f) < 0,
		   "front end: not executable anywhere: -1 (%s)", strerror(errno));
		snprintf(w, sizeof w, "%s/sh/isopod", t);
		chmod(w, 0755);
		ok(proc_front_end(d, f, sizeof f) == 0 && !strcmp(f, w),
		   "front end: the source tree's ../sh/isopod, resolved: %s", f);
		snprintf(w, sizeof w, "%s/bin/isopod", t);
		close(open(w, O_WRONLY | O_CREAT | O_CLOEXEC, 0755));
		ok(proc_front_end(d, f, sizeof f) == 0 && !strcmp(f, w),
		   "front end: beside the tools first: %s", f);
		snprintf(w, sizeof w, "rm -rf %s", t);
		r = system(w);
	}

	ok(proc_exited_within(proc_spawn(&(struct proc_spec)PROC_SPEC(t_true)), &st, 2000) &&
	   proc_status(st) == 0, "proc_exited_within reaps a quick child");
	{
		pid_t s = proc_spawn(&(struct proc_spec)PROC_SPEC(t_sleep));

		ok(!proc_exited_within(s, &st, 50), "proc_exited_within: not a sleeping one");
		kill(s, SIGKILL);
		proc_wait(s, &st);
		ok(proc_status(st) == 137, "then 137 after SIGKILL");
	}
	close(leak);
	close(a);
	close(b);
	unlink(p1);
	unlink(p2);
	return tap_done();
}
