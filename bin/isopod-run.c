/* isopod-run - the front end's driver of a claimed run (not a user command).
 *
 * sh/isopod parses `isopod run`, checks its options, pulls, takes a pooled
 * VM or claims one, and then execs this with everything it learnt: the
 * same pid, so the supervisor that watches the run's owner pid (isopod-boot
 * --owner-pid) still sees the run end, whatever ends it.  From there this
 * does what the shell did with one bash fork per tool (5-10 ms each on a
 * host where page tables are dear, doc/SPEED.md "Goal 3"): fork (--stage),
 * boot (none when pooled), exec (--stop on the default path), commit, stop,
 * provenance, each step's stdout, status object and stderr in the scratch
 * directory as DIR/STEP.json, .status and .err; then it execs isopod-result,
 * which prints the run's result, exits with its status and removes DIR. */

#include "proc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-run --libexec DIR --vm ID --name NAME --dir DIR --start-ms N --timeout-s N\n" \
	"       --net MODE [--fold] [--keep] [--pooled] [--json-only] [--stage ID]\n" \
	"       [--commit-as LABEL] [--provenance FILE] [--sign-option WORD]...\n" \
	"       [--stdin-file FILE|-] [--notes-fd N] [--usage TEXT] [--allow-ranges LINES]\n" \
	"       [--sysconfig PATH] [--boot-option WORD]... [--exec-option WORD]... -- CMD [ARG]..."

/* What sh/isopod knew when it exec'd us, and what the steps change. */
struct run {
	const char *libexec, *vm, *name, *dir, *net, *stage, *commit_as, *prov, *stdin_file;
	const char *usage, *ranges, *sysconf;
	const char *stdin_arg; /* exec's --stdin-file: ours ("-"), a file, or NULL */
	char *stop_file;       /* exec's --stop FILE, or NULL */
	long long start_ms, timeout_s, notes_fd;
	int fold, keep, pooled, json_only, have_commit_as;
	int booted, stopped;
	int closed_std;        /* bit fd: 0, 1 or 2 was closed then (now /dev/null; closed
				  again for the result): a closed stdin is no input */
	char **boot, **exec, **sign, **cmd; /* NULL-ended word lists */
	int nboot, nexec, nsign, ncmd;
	sigset_t sigs; /* INT, TERM, HUP and CHLD: blocked, taken with sigtimedwait */
};

/* A growing argv, NULL-ended; out of memory is the run's failure. */
struct av {
	char **v;
	size_t n, cap;
};

static void av_add(struct av *a, const char *w)
{
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 32;
		char **v = realloc(a->v, cap * sizeof *v);

		if (!v)
			die(EX_SYS, "out of memory");
		a->v = v, a->cap = cap;
	}
	a->v[a->n++] = (char *)w;
	a->v[a->n] = NULL;
}

static void av_addv(struct av *a, char *const *w, int n)
{
	for (int i = 0; i < n; i++)
		av_add(a, w[i]);
}

/* DIR/PREFIXNAME in a ring of buffers: a step's argv holds its tool's
 * while the step opens and relays up to four files of its own, and
 * provenance's argv two strdup'd ones before that; 12 leaves room. */
static const char *path_in(const char *dir, const char *prefix, const char *name)
{
	static char p[12][PATH_MAX];
	static int k;
	char *s = p[k++ % 12];

	if (pathn(s, PATH_MAX, "%s/%s%s", dir, prefix, name) < 0)
		die(EX_SYS, "%s/%s%s: path too long", dir, prefix, name);
	return s;
}

static const char *tool(const struct run *r, const char *name)
{
	return path_in(r->libexec, "isopod-", name);
}

static const char *scratch(const struct run *r, const char *file)
{
	return path_in(r->dir, "", file);
}

/* "LINE\n" to isopod-mcp, when it gave us a descriptor (isopod(1)):
 * "step NAME" as each step starts.  Best effort: the run does not depend
 * on its reader. */
static void note(const struct run *r, const char *step)
{
	if (r->notes_fd >= 0)
		dprintf((int)r->notes_fd, "step %s\n", step);
}

/* A signal the run was sent and not yet acted on (0: none). */
static int pending_signal(struct run *r)
{
	static const struct timespec zero = { 0 };
	sigset_t three = r->sigs;
	int s;

	sigdelset(&three, SIGCHLD);
	while ((s = sigtimedwait(&three, NULL, &zero)) < 0 && errno == EINTR)
		;
	return s < 0 ? 0 : s;
}

/* INT, TERM and HUP blocked before anything else of ours runs (our
 * earliest constructor: priority 101 orders only the executable's own;
 * the shared libraries' initialisers ran before it): the shell's traps went
 * with its exec, and one of them now would kill the run with no result.
 * main() decides which it takes and unblocks the others.  What is left,
 * from the exec to here, is the kernel's, the loader's and those
 * initialisers' (isopod-run(1), SIGNALS). */
static void hold_signals(void) __attribute__((constructor(101)));
static void hold_signals(void)
{
	sigset_t three;

	sigemptyset(&three);
	sigaddset(&three, SIGINT);
	sigaddset(&three, SIGTERM);
	sigaddset(&three, SIGHUP);
	sigprocmask(SIG_BLOCK, &three, NULL);
}

static void finish(struct run *r, struct av *res) __attribute__((noreturn));
static void fail(struct run *r, int code, const char *kind, const char *msg) __attribute__((noreturn));
static void sys_fail(struct run *r, const char *what, const char *path) __attribute__((noreturn));

/* The run interrupted by sig: no VM kept, --keep or not (its caller, a
 * cancelled isopod-mcp call say, may never learn the VM's id). */
static void interrupted(struct run *r, int sig)
{
	char m[64];

	r->keep = 0;
	snprintf(m, sizeof m, "interrupted by SIG%s",
		 sig == SIGINT ? "INT" : sig == SIGHUP ? "HUP" : "TERM");
	fail(r, 128 + sig, "interrupted", m);
}

/* Wait for child pid, its status.  A signal meanwhile, when the wait may
 * be interrupted: the child is sent SIGTERM (as bash's kill), reaped, and
 * the run ends interrupted; else the signal is left pending for the next
 * step's check (what bash did with a trap during a foreground command). */
static int wait_child(struct run *r, pid_t pid, int interruptible)
{
	sigset_t only_chld;
	siginfo_t si;
	int st, s;

	sigemptyset(&only_chld);
	sigaddset(&only_chld, SIGCHLD);
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return proc_status(st);
		if (w < 0 && errno != EINTR) {
			char m[64];

			snprintf(m, sizeof m, "%d", (int)pid);
			sys_fail(r, "unable to wait for", m);
		}
		s = sigwaitinfo(interruptible ? &r->sigs : &only_chld, &si);
		if (s < 0 || s == SIGCHLD)
			continue;
		kill(pid, SIGTERM);
		proc_wait(pid, &st);
		interrupted(r, s);
	}
}

/* A system call of ours failed (errno): the run's infrastructure failure. */
static void sys_fail(struct run *r, const char *what, const char *path)
{
	char m[PATH_MAX + 256];

	snprintf(m, sizeof m, "%s %s: %s", what, path, strerror(errno));
	fail(r, EX_SYS, "infra", m);
}

/* Start argv's tool: stdin in, stdout out, stderr err, its fd 3 closed and
 * its status object on fd 4 (ISOPOD_STATUS_FD=4) when sfd >= 0, in a
 * session of its own when own_session; -1 with errno when it could not be. */
static pid_t start(char **argv, int in, int out, int err, int sfd, int own_session)
{
	static char fdenv[] = "ISOPOD_STATUS_FD=4";
	static char *const env[] = { fdenv, NULL };
	struct proc_spec ps = PROC_SPEC(argv);

	ps.file = argv[0];
	ps.in = in, ps.out = out, ps.err = err;
	ps.setsid = own_session;
	if (sfd >= 0) {
		ps.keep[0] = PROC_NULL, ps.keep[1] = sfd, ps.nkeep = 2;
		ps.env = env;
	}
	return proc_spawn(&ps);
}

static int open_out(struct run *r, const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);

	if (fd < 0)
		sys_fail(r, "unable to open", path);
	return fd;
}

/* Its captured stderr relayed to ours once it ended (a step's diagnostics
 * stay in DIR/STEP.err for isopod-result, and reach the user too). */
static void relay(const char *path)
{
	char buf[8192];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return;
	while ((n = read(fd, buf, sizeof buf)) > 0 && write_all(2, buf, (size_t)n) == 0)
		;
	close(fd);
}

/* One step, as the shell's run_step: DIR/NAME.json its stdout,
 * DIR/NAME.status its status object, DIR/NAME.err its stderr when capture
 * (relayed after), else ours.  Its status; a failure ends the run
 * (isopod-result --failed) unless it is data: exec's 1, any commit's or
 * provenance's (isopod-result says why). */
static int step(struct run *r, const char *name, struct av *a, int in, int capture)
{
	char f[64];
	int out, sfd, efd = PROC_INHERIT, rc, sig;
	pid_t pid;

	if ((rc = pending_signal(r)))
		interrupted(r, rc);
	note(r, name);
	snprintf(f, sizeof f, "%s.json", name);
	out = open_out(r, scratch(r, f));
	snprintf(f, sizeof f, "%s.status", name);
	sfd = open_out(r, scratch(r, f));
	if (capture) {
		snprintf(f, sizeof f, "%s.err", name);
		efd = open_out(r, scratch(r, f));
	}
	if ((pid = start(a->v, in, out, efd, sfd, 0)) < 0)
		sys_fail(r, "unable to start", a->v[0]);
	close(out);
	close(sfd);
	if (efd >= 0)
		close(efd);
	rc = wait_child(r, pid, 1);
	/* a step killed by the signal its process group was sent (the
	 * terminal's SIGINT) may be reaped before the signal is taken: the
	 * run was interrupted, not failed in that step */
	if ((sig = pending_signal(r)))
		interrupted(r, sig);
	if (capture) {
		snprintf(f, sizeof f, "%s.err", name);
		relay(scratch(r, f));
	}
	if (rc == 0 || (rc == 1 && !strcmp(name, "exec")) || !strcmp(name, "commit") ||
	    !strcmp(name, "provenance"))
		return rc;
	{
		struct av res = { 0 };
		char rcs[16];

		snprintf(rcs, sizeof rcs, "%d", rc);
		av_add(&res, "--failed");
		av_add(&res, name);
		av_add(&res, "--rc");
		av_add(&res, strdup(rcs));
		av_add(&res, "--dir");
		av_add(&res, r->dir);
		finish(r, &res);
	}
}

/* isopod-stop --force of our VM, never interrupted (a signal meanwhile
 * waits for the next check): its status, 111 when it could not start.  In
 * a session of its own: a second Ctrl-C (the terminal's SIGINT to its
 * foreground process group) must not end the stop the first one asked
 * for, and leave the VM running. */
static int stop_vm(struct run *r, int quiet)
{
	char *av[] = { (char *)tool(r, "stop"), "--force", "--vm", (char *)r->vm, NULL };
	pid_t pid = start(av, PROC_NULL, PROC_NULL, quiet ? PROC_NULL : PROC_INHERIT, -1, 1);

	return pid < 0 ? EX_SYS : wait_child(r, pid, 0);
}

/* The end of every path: what the shell's EXIT trap did (a VM never
 * outlives its run unless --keep was asked and it booted; isopod-stop of
 * a VM not running says so and succeeds), then isopod-result exec'd with
 * res: it prints the result, removes DIR (--remove-dir) and exits with the
 * run's status.  Nothing is left to do after it. */
static void finish(struct run *r, struct av *res)
{
	struct av a = { 0 };
	int kept = r->keep && r->booted && !r->stopped, s;

	/* a signal already here ends the run interrupted (its VM stopped):
	 * an interrupted run keeps no VM */
	if (kept && (s = pending_signal(r)))
		interrupted(r, s);
	if (!r->stopped && (!r->keep || !r->booted) && stop_vm(r, 1) != 0)
		warn("unable to stop %s; isopod gc will reap it", r->vm);
	av_add(&a, tool(r, "result"));
	if (!r->json_only && isatty(1))
		av_add(&a, "--pretty");
	av_add(&a, "--vm");
	av_add(&a, r->vm);
	av_add(&a, "--name");
	av_add(&a, r->name);
	if (r->usage) {
		av_add(&a, "--usage");
		av_add(&a, r->usage);
	}
	av_add(&a, "--remove-dir");
	av_addv(&a, res->v, (int)res->n);
	/* the status descriptor we were given (lib/util.c took it) is
	 * isopod-result's, as the shell passed it on.  A signal still pending
	 * is dropped (the result is decided).  With the VM stopped, INT, TERM
	 * and HUP are unblocked, so that they end a stalled isopod-result as
	 * they did when the shell ran it; with the VM kept they stay blocked
	 * through isopod-result: one that cut it short would leave a running
	 * VM whose id nobody was told (isopod-run(1), SIGNALS). */
	if (status_fd() >= 0) {
		char e[32];

		snprintf(e, sizeof e, "%d", status_fd());
		fcntl(status_fd(), F_SETFD, 0);
		setenv("ISOPOD_STATUS_FD", e, 1);
	}
	while (pending_signal(r))
		;
	/* isopod-result finds them as we did (a closed stdout: its 111) */
	for (int fd = 0; fd < 3; fd++)
		if (r->closed_std & 1 << fd)
			close(fd);
	if (kept) {
		sigset_t chld;

		sigemptyset(&chld);
		sigaddset(&chld, SIGCHLD);
		sigprocmask(SIG_UNBLOCK, &chld, NULL);
	} else {
		sigprocmask(SIG_UNBLOCK, &r->sigs, NULL);
	}
	execv(a.v[0], a.v);
	/* (DIR stays for isopod-gc: runs/ of a pid that is gone) */
	die(EX_SYS, "unable to exec %s:", a.v[0]);
}

/* A failure the driver decided (a timeout, a signal): isopod-result
 * --fail, DIR given so that --remove-dir removes it. */
static void fail(struct run *r, int code, const char *kind, const char *msg)
{
	struct av res = { 0 };
	char c[16];

	snprintf(c, sizeof c, "%d", code);
	av_add(&res, "--dir");
	av_add(&res, r->dir);
	av_add(&res, "--fail");
	av_add(&res, strdup(c));
	av_add(&res, "--kind");
	av_add(&res, kind);
	av_add(&res, "--");
	av_add(&res, strdup(msg));
	finish(r, &res);
}

/* "--timeout-ms" of what is left of the budget, into rem; else the run
 * timed out, before the boot or after it. */
static void budget(struct run *r, char rem[32], int booted)
{
	long long left = r->start_ms + r->timeout_s * 1000 - wall_ms();
	char msg[160];

	if (left <= 0) {
		if (booted)
			snprintf(msg, sizeof msg, "the --timeout-s %lld budget was used up by the boot",
				 r->timeout_s);
		else
			snprintf(msg, sizeof msg, "timed out before boot (--timeout-s %lld)", r->timeout_s);
		fail(r, EX_TIMEOUT, "timeout", msg);
	}
	snprintf(rem, 32, "%lld", left);
}

/* 2. fork (the VM's disk on the stage's chain) and boot, within the
 * budget; the supervisor kills the VM when our pid dies, even by SIGKILL
 * (unless --keep).  A pooled VM is booted already. */
static void boot(struct run *r)
{
	struct av a = { 0 };
	char rem[32], owner[24];

	budget(r, rem, 0);
	if (r->stage) {
		av_add(&a, tool(r, "fork"));
		av_add(&a, "--vm");
		av_add(&a, r->vm);
		av_add(&a, "--stage");
		av_add(&a, r->stage);
		step(r, "fork", &a, PROC_NULL, 1);
		a.n = 0;
	}
	if (!r->pooled) {
		snprintf(owner, sizeof owner, "%d", (int)getpid());
		av_add(&a, tool(r, "boot"));
		av_add(&a, "--vm");
		av_add(&a, r->vm);
		av_add(&a, "--owner-pid");
		av_add(&a, owner);
		av_addv(&a, r->boot, r->nboot);
		if (r->keep)
			av_add(&a, "--keep");
		/* nothing reads this VM's disk once it stops (no --keep, no
		 * --commit-as): QEMU may skip the guest's fdatasyncs (lib/qemu.h
		 * qemu_vm no_flush).  A commit of it while it runs stays whole:
		 * the flushes still write QEMU's qcow2 tables to the file, and
		 * isopod-commit fsyncs the layer (doc/DECISIONS.md) */
		else if (!r->have_commit_as)
			av_add(&a, "--ephemeral");
		av_add(&a, "--timeout-ms");
		av_add(&a, rem);
		step(r, "boot", &a, PROC_NULL, 1);
	}
	free(a.v);
	r->booted = 1;
}

/* 3. exec, within the rest of the budget: its status.  Its stdin:
 * --stdin-file's (ours for '-'), else ours when a pipe or a file; not a
 * terminal (the command gets /dev/null), nor a closed stdin.  --stop: it
 * stops the VM itself when nothing after it needs the VM (no isopod-stop). */
static int exec(struct run *r)
{
	struct av a = { 0 };
	char rem[32];
	int in = PROC_NULL;

	budget(r, rem, 1);
	if (r->stdin_file) {
		r->stdin_arg = r->stdin_file;
		if (!strcmp(r->stdin_arg, "-"))
			in = 0;
	} else if (!isatty(0) && !(r->closed_std & 1)) {
		r->stdin_arg = "-";
		in = 0;
	}
	av_add(&a, tool(r, "exec"));
	av_add(&a, "--vm");
	av_add(&a, r->vm);
	av_add(&a, "--timeout-ms");
	av_add(&a, rem);
	if (!r->keep && !r->pooled && !r->have_commit_as) {
		r->stop_file = strdup(scratch(r, "stopped"));
		if (!r->stop_file)
			die(EX_SYS, "out of memory");
		av_add(&a, "--stop");
		av_add(&a, r->stop_file);
	}
	if (r->prov)
		av_add(&a, "--for-provenance");
	if (r->stdin_arg) {
		av_add(&a, "--stdin-file");
		av_add(&a, r->stdin_arg);
	}
	av_addv(&a, r->exec, r->nexec);
	av_add(&a, "--");
	av_addv(&a, r->cmd, r->ncmd);
	return step(r, "exec", &a, in, 0);
}

/* Unless --keep, the VM stops before the result (gone when our caller
 * reads it): exec --stop's file says it did; else its stop failed (its
 * warning says how) and the result says what our retry did (res).  Its
 * broker's ledger is complete once it has stopped. */
static void stop(struct run *r, struct av *res)
{
	struct stat sb;
	char *w;
	int src;

	if (r->keep || r->pooled)
		return;
	if (lstat(scratch(r, "stopped"), &sb) == 0) {
		r->stopped = 1;
		return;
	}
	if ((src = pending_signal(r)))
		interrupted(r, src);
	note(r, "stop");
	if ((src = stop_vm(r, 0)) == 0) {
		r->stopped = 1;
		if (r->stop_file) {
			av_add(res, "--warning");
			av_add(res, "isopod-exec --stop did not confirm the stop; after the retry by "
				    "isopod-stop the vm is stopped");
		}
		return;
	}
	/* finish tries once more; a VM that outlives that runs until its
	 * supervisor sees the run end */
	if (!(w = malloc(1024)))
		die(EX_SYS, "out of memory");
	snprintf(w, 1024, "%sisopod-stop %s failed%s (exit %d); tried again as the run ends, else "
		 "the vm runs until its supervisor sees the run end",
		 r->stop_file ? "isopod-exec --stop did not confirm the stop; the retry by " : "",
		 r->vm, r->stop_file ? " too" : "", src);
	av_add(res, "--warning");
	av_add(res, w);
}

/* isopod-provenance signs what was copied out, with the host's key, once
 * the VM has stopped (its broker's ledger complete): the run's command, the
 * words sh/isopod gave (--cwd, --env-name), exec's result, a commit's, the
 * stdin sent (a --stdin-file was copied into DIR first by sh/isopod: the
 * bytes signed are the bytes sent).  Its failure is the run's, as a
 * commit's: its status to the result (res). */
static void sign(struct run *r, int commit_rc, struct av *res)
{
	static char sms[24], prc[16];
	struct av a = { 0 };

	av_add(res, "--provenance");
	av_add(res, r->prov);
	if (!r->stopped)
		return;
	snprintf(sms, sizeof sms, "%lld", r->start_ms);
	av_add(&a, tool(r, "provenance"));
	av_add(&a, "sign");
	av_add(&a, "--vm");
	av_add(&a, r->vm);
	av_add(&a, "--result");
	av_add(&a, strdup(scratch(r, "exec.json")));
	av_add(&a, "--start-ms");
	av_add(&a, sms);
	if (r->stage) {
		av_add(&a, "--stage");
		av_add(&a, r->stage);
	}
	if (commit_rc == 0) {
		av_add(&a, "--commit");
		av_add(&a, strdup(scratch(r, "commit.json")));
	}
	if (r->stdin_arg && !strcmp(r->stdin_arg, "-")) {
		av_add(&a, "--stdin-pipe");
	} else if (r->stdin_arg) {
		av_add(&a, "--stdin-file");
		av_add(&a, r->stdin_arg);
	}
	av_add(&a, "-o");
	av_add(&a, r->prov);
	av_addv(&a, r->sign, r->nsign);
	av_add(&a, "--");
	av_addv(&a, r->cmd, r->ncmd);
	snprintf(prc, sizeof prc, "%d", step(r, "provenance", &a, PROC_NULL, 1));
	av_add(res, "--provenance-rc");
	av_add(res, prc);
}

static void the_run(struct run *r)
{
	static char crc[16], sms[24];
	struct av a = { 0 }, res = { 0 };
	int rc, commit_rc = -1;

	boot(r);
	rc = exec(r);
	/* 4. commit (only when the command exited 0: else isopod-result says
	 * why not), stop, provenance; 5. the result: exec's, plus what boot,
	 * commit, the ledger and we know. */
	snprintf(sms, sizeof sms, "%lld", r->start_ms);
	av_add(&res, "--dir");
	av_add(&res, r->dir);
	av_add(&res, "--net");
	av_add(&res, r->net);
	if (r->fold)
		av_add(&res, "--fold");
	av_add(&res, "--start-ms");
	av_add(&res, sms);
	if (r->commit_as && *r->commit_as) {
		av_add(&res, "--commit-as");
		av_add(&res, r->commit_as);
	}
	av_add(&res, "--allow-ranges");
	av_add(&res, r->ranges ? r->ranges : "");
	av_add(&res, "--sysconfig");
	av_add(&res, r->sysconf ? r->sysconf : "");
	if (r->have_commit_as && rc == 0) {
		av_add(&a, tool(r, "commit"));
		av_add(&a, "--label");
		av_add(&a, r->commit_as);
		av_add(&a, "--vm");
		av_add(&a, r->vm);
		commit_rc = step(r, "commit", &a, PROC_NULL, 1);
		snprintf(crc, sizeof crc, "%d", commit_rc);
		av_add(&res, "--commit-rc");
		av_add(&res, crc);
	}
	stop(r, &res);
	if (r->prov)
		sign(r, commit_rc, &res);
	if ((rc = pending_signal(r)))
		interrupted(r, rc);
	finish(r, &res);
}

/* Whether dir is a run's scratch directory, the only kind a refusal may
 * remove: isopod-claim's runs/vm-ID.PID.START of our pid (the shell's, as
 * we are it) or sh/isopod run_tmp's isopod.XXXXXX, a directory (not a link)
 * of our uid.  A --dir of anything else, given by hand, is never touched. */
static int run_dir(const char *dir)
{
	char pid[32];
	const char *base = strrchr(dir, '/'), *dot;
	struct stat sb;
	size_t b, p;

	base = base ? base + 1 : dir;
	b = (size_t)(base - dir);
	p = (size_t)snprintf(pid, sizeof pid, ".%d.", (int)getpid());
	dot = strchr(base, '.');
	if (!(!strncmp(base, "isopod.", 7) && strlen(base) == 13) &&
	    !(!strncmp(base, "vm-", 3) && dot && !strncmp(dot, pid, p) && dot[p] &&
	      ((b == 5 && !strncmp(dir, "runs/", 5)) ||
	       (b > 5 && !strncmp(base - 6, "/runs/", 6)))))
		return 0;
	return lstat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) && sb.st_uid == getuid();
}

/* A repeated WORD option into its list. */
static void word(char ***list, int *n, const char *w)
{
	char **v = realloc(*list, (size_t)(*n + 2) * sizeof *v);

	if (!v)
		die(EX_SYS, "out of memory");
	v[(*n)++] = (char *)w;
	v[*n] = NULL;
	*list = v;
}

int main(int argc, char **argv)
{
	enum { O_LIBEXEC = 256, O_VM, O_NAME, O_DIR, O_START, O_TIMEOUT, O_NET, O_FOLD, O_KEEP,
	       O_POOLED, O_JSON, O_STAGE, O_COMMIT, O_PROV, O_SIGN, O_STDIN, O_NOTES, O_USAGE,
	       O_RANGES, O_SYSCONF, O_BOOT, O_EXEC };
	static const struct option lo[] = {
		{ "libexec", required_argument, NULL, O_LIBEXEC },
		{ "vm", required_argument, NULL, O_VM },
		{ "name", required_argument, NULL, O_NAME },
		{ "dir", required_argument, NULL, O_DIR },
		{ "start-ms", required_argument, NULL, O_START },
		{ "timeout-s", required_argument, NULL, O_TIMEOUT },
		{ "net", required_argument, NULL, O_NET },
		{ "fold", no_argument, NULL, O_FOLD },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "pooled", no_argument, NULL, O_POOLED },
		{ "json-only", no_argument, NULL, O_JSON },
		{ "stage", required_argument, NULL, O_STAGE },
		{ "commit-as", required_argument, NULL, O_COMMIT },
		{ "provenance", required_argument, NULL, O_PROV },
		{ "sign-option", required_argument, NULL, O_SIGN },
		{ "stdin-file", required_argument, NULL, O_STDIN },
		{ "notes-fd", required_argument, NULL, O_NOTES },
		{ "usage", required_argument, NULL, O_USAGE },
		{ "allow-ranges", required_argument, NULL, O_RANGES },
		{ "sysconfig", required_argument, NULL, O_SYSCONF },
		{ "boot-option", required_argument, NULL, O_BOOT },
		{ "exec-option", required_argument, NULL, O_EXEC },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct run r = { .notes_fd = -1, .start_ms = -1, .timeout_s = -1 };
	char bad[256] = "";
	int c, known;

	progname = "isopod-run";
	/* Signals first: held from here on and taken at each step's start and
	 * while a step runs (sigtimedwait, sigwaitinfo), never by a handler.
	 * One ignored when we start stays ignored (nohup's HUP, the INT of a
	 * job in the background), as the shell could not trap it either; a
	 * blocked signal would be queued even so.  SIGCHLD ignored would reap
	 * the steps before we could wait for them. */
	sigemptyset(&r.sigs);
	sigaddset(&r.sigs, SIGCHLD);
	for (int i = 0; i < 3; i++) {
		static const int take[] = { SIGINT, SIGTERM, SIGHUP };
		struct sigaction sa;
		sigset_t one;

		sigemptyset(&one);
		sigaddset(&one, take[i]);
		if (sigaction(take[i], NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
			sigaddset(&r.sigs, take[i]);
		else /* held by hold_signals: one queued meanwhile is dropped */
			sigprocmask(SIG_UNBLOCK, &one, NULL);
	}
	signal(SIGCHLD, SIG_DFL);
	sigprocmask(SIG_BLOCK, &r.sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* A closed 0, 1 or 2 would be the next file we open (exec's input
	 * would be its own DIR/exec.json): /dev/null there, and a closed
	 * stdin remembered (it is no input to send). */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0) {
			if (open("/dev/null", O_RDWR) != fd)
				die(EX_SYS, "unable to open /dev/null as descriptor %d:", fd);
			r.closed_std |= 1 << fd;
		}
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case O_LIBEXEC: r.libexec = optarg; break;
		case O_VM: r.vm = optarg; break;
		case O_NAME: r.name = optarg; break;
		case O_DIR: r.dir = optarg; break;
		case O_START:
			if (parse_ll(optarg, 0, (long long)1 << 60, &r.start_ms) < 0 && !*bad)
				snprintf(bad, sizeof bad, "--start-ms %s: want milliseconds", EXC(optarg));
			break;
		case O_TIMEOUT:
			if (parse_ll(optarg, 1, 86400, &r.timeout_s) < 0 && !*bad)
				snprintf(bad, sizeof bad, "--timeout-s %s: out of range; valid: 1..86400",
					 EXC(optarg));
			break;
		case O_NET: r.net = optarg; break;
		case O_FOLD: r.fold = 1; break;
		case O_KEEP: r.keep = 1; break;
		case O_POOLED: r.pooled = 1; break;
		case O_JSON: r.json_only = 1; break;
		case O_STAGE: r.stage = optarg; break;
		case O_COMMIT: r.commit_as = optarg, r.have_commit_as = 1; break;
		case O_PROV: r.prov = optarg; break;
		case O_SIGN: word(&r.sign, &r.nsign, optarg); break;
		case O_STDIN: r.stdin_file = optarg; break;
		case O_NOTES:
			if (parse_ll(optarg, 3, 1 << 20, &r.notes_fd) < 0 && !*bad)
				snprintf(bad, sizeof bad, "--notes-fd %s: want a descriptor", EXC(optarg));
			break;
		case O_USAGE: r.usage = optarg; break;
		case O_RANGES: r.ranges = optarg; break;
		case O_SYSCONF: r.sysconf = optarg; break;
		case O_BOOT: word(&r.boot, &r.nboot, optarg); break;
		case O_EXEC: word(&r.exec, &r.nexec, optarg); break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			if (!*bad)
				snprintf(bad, sizeof bad, "bad option (usage above)");
		}
	}
	/* Once we know the run (its tools, VM and directory), a refusal is the
	 * run's result as any failure after it: the VM stopped, DIR removed
	 * (nothing else would: the shell that claimed them is gone). */
	known = r.libexec && r.vm && r.name && r.dir && strlen(r.libexec) <= PATH_MAX - 64 &&
		strlen(r.dir) <= PATH_MAX - 64;
	if (!*bad && (r.start_ms < 0 || r.timeout_s < 0 || !r.net || !known))
		snprintf(bad, sizeof bad, "%s", known || !r.libexec || !r.vm || !r.name || !r.dir
			 ? "--libexec, --vm, --name, --dir, --start-ms, --timeout-s and --net "
			   "are sh/isopod's to give (isopod-run drives a run it claimed)"
			 : "--libexec or --dir: a path too long");
	if (known && !run_dir(r.dir)) {
		known = 0;
		if (!*bad)
			snprintf(bad, sizeof bad, "--dir %s: not a run's scratch directory "
				 "(isopod-run drives a run sh/isopod claimed)", EXC(r.dir));
	}
	if (!*bad && optind >= argc)
		snprintf(bad, sizeof bad, "no command given");
	if (!*bad && r.stdin_file && !strcmp(r.stdin_file, "-") && (r.closed_std & 1))
		snprintf(bad, sizeof bad, "--stdin-file -: standard input is closed");
	if (*bad && !known)
		die_usage(USAGE, "%s", bad);
	if (r.pooled) /* its supervisor stops it when we exit */
		r.booted = r.stopped = 1;
	/* Ours alone: no step inherits a descriptor we were given (the notes'
	 * is written by us; the status descriptor util.c took is close-on-exec). */
	close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
	if (*bad) {
		fprintf(stderr, "usage: %s\nisopod-run: fatal: %s\n", USAGE, bad);
		progname = "isopod";
		fail(&r, EX_USAGE, "usage", bad);
	}
	r.cmd = argv + optind;
	r.ncmd = argc - optind;
	/* From here on the words are the front end's (isopod(1)). */
	progname = "isopod";
	the_run(&r);
	return EX_SYS;
}
