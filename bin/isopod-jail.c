/* isopod-jail - run a program in the jail QEMU gets (lib/jail.c), the same
 * code path: the test hook of t/17-jail.bats and a way to look inside.
 *
 * The program's standard descriptors are ours; what the jail applied goes
 * to --json-fd N (bubblewrap's --json-status-fd) once the program runs.
 * Exit status: the program's (128+N for signal N), or the failure contract's
 * 100/111 when the jail could not be made. */
#include "jail.h"
#include "proc.h"
#include "qjail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-jail [--vm-dir DIR] [--ro PATH]... [--rw PATH]... [--mem-mib N] " \
	      "[--pids N] [--kvm] [--hostnet] [--landlock] [--name NAME] [--json-fd N] -- PROG [ARG...]"
#define NPATH (2 * JAIL_PATHS_MAX)

/* PROG as the jail will exec it: a path made absolute, or found in PATH. */
static void resolve(const char *prog, char *out)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (strchr(prog, '/')) {
		if (!realpath(prog, out))
			die(EX_NOTFOUND, "%s:", EXC(prog));
		return;
	}
	for (path = path ? path : "/usr/bin:/bin"; *path;) {
		size_t n = strcspn(path, ":");

		if (n && (size_t)snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, prog) < sizeof buf &&
		    access(buf, X_OK) == 0 && realpath(buf, out))
			return;
		path += n + (path[n] == ':');
	}
	errno = ENOENT;
	die(EX_NOTFOUND, "%s:", EXC(prog));
}

/* What the command line asks for, then the jail's plan. */
struct args {
	struct jail_spec js;
	char *ro[NPATH], *rw[NPATH];
	size_t nro, nrw;
	char prog[PATH_MAX], vmdir[PATH_MAX], name[80];
	const char *jname;
	long long jfd;
};

/* Options; optind is then PROG's index. */
static void parse_args(struct args *a, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "vm-dir", required_argument, NULL, 'v' }, { "ro", required_argument, NULL, 'r' },
		{ "rw", required_argument, NULL, 'w' },     { "mem-mib", required_argument, NULL, 'm' },
		{ "pids", required_argument, NULL, 'p' },   { "kvm", no_argument, NULL, 'k' },
		{ "json-fd", required_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "hostnet", no_argument, NULL, 'H' },      { "landlock", no_argument, NULL, 'L' },
		{ "name", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct jail_spec *js = &a->js;
	long long v;
	int c;

	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'v':
			if (!realpath(optarg, a->vmdir))
				die(EX_NOTFOUND, "--vm-dir %s:", EXC(optarg));
			js->vm_dir = a->vmdir;
			break;
		case 'r':
		case 'w':
			if ((c == 'r' ? a->nro : a->nrw) >= JAIL_PATHS_MAX)
				die(EX_USAGE, "more than %d --ro or --rw paths", JAIL_PATHS_MAX);
			if (optarg[0] != '/')
				die(EX_USAGE, "--%s %s: not an absolute path", c == 'r' ? "ro" : "rw",
				    EXC(optarg));
			if (c == 'r')
				a->ro[a->nro++] = optarg;
			else
				a->rw[a->nrw++] = optarg;
			break;
		case 'm':
			if (parse_ll(optarg, 1, 1 << 20, &v) < 0)
				die(EX_USAGE, "--mem-mib %s: out of range 1..1048576", EXC(optarg));
			js->mem_bytes = v << 20;
			break;
		case 'p':
			if (parse_ll(optarg, 1, 4194304, &js->pids) < 0)
				die(EX_USAGE, "--pids %s: out of range 1..4194304", EXC(optarg));
			break;
		case 'k':
			js->kvm = 1;
			break;
		case 'H':
			js->hostnet = 1;
			break;
		case 'L':
			js->landlock = 1;
			break;
		case 'n':
			a->jname = optarg;
			break;
		case 'j':
			if (parse_ll(optarg, 3, INT_MAX, &a->jfd) < 0 || fcntl((int)a->jfd, F_GETFD) < 0)
				die(EX_USAGE, "--json-fd %s: not an open descriptor above 2", EXC(optarg));
			break;
		case 'h':
			puts("usage: " USAGE);
			exit(0);
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind >= argc)
		die_usage(USAGE, "no PROG given");
}

/* The jail's paths, name and identity for PROG. */
static void plan(struct args *a, const char *prog)
{
	struct jail_spec *js = &a->js;
	char err[1024];
	long long owner;

	resolve(prog, a->prog);
	js->rw = (const char *const *)a->rw;
	js->nrw = a->nrw;
	/* The program and the libraries it loads, read-only at their paths
	 * (unless already in the jail: a program in DIR is the jail's own). */
	if (!jail_covers(js, a->prog))
		a->ro[a->nro++] = a->prog;
	if (jail_deps(a->prog, a->ro, &a->nro, NPATH, err, sizeof err) < 0)
		die(EX_SYS, "%s", err);
	if (a->nro > JAIL_PATHS_MAX)
		die(EX_USAGE, "more than %d read-only paths with PROG's libraries", JAIL_PATHS_MAX);
	js->ro = (const char *const *)a->ro;
	js->nro = a->nro;
	/* The VM's id names the jail (its cgroup, its hostname, its uid). */
	snprintf(a->name, sizeof a->name, JAIL_TOOL_NAME "%d", (int)getpid());
	if (js->vm_dir && strrchr(js->vm_dir, '/')[1])
		snprintf(a->name, sizeof a->name, "%.64s", strrchr(js->vm_dir, '/') + 1);
	if (a->jname) /* the broker's jail is named broker-<VM id> (lib/egress.c) */
		snprintf(a->name, sizeof a->name, "%.64s", a->jname);
	/* isopod-gc judges a cgroup named for a pid (ours by default, a
	 * qemu-img caller's, a doctor's) by that pid alone: another's pid in
	 * a name of the caller's choosing would let it go while we are
	 * between its mkdir and our program's entry */
	if ((owner = qjail_img_owner(a->name)) > 0 && owner != (long long)getpid())
		die(EX_USAGE, "jail name %s: names the jail of process %lld (isopod-gc judges its "
			      "cgroup by that pid)", EXC(a->name), owner);
	js->name = a->name;
	if (geteuid() == 0 && jail_identity(a->name, &js->uid, &js->gid, err, sizeof err) < 0)
		die(EX_USAGE, "%s", err);
	/* The VM's directory is the jail's to write: as root, the directory
	 * itself (not what is in it) goes to the jail's uid, as a VM's does. */
	if (geteuid() == 0 && js->vm_dir && chown(js->vm_dir, js->uid, js->gid) < 0)
		die(EX_SYS, "chown %s:", js->vm_dir);
}

/* Run argv in the jail, report what it applied, wait; its status. */
static int run(struct args *a, char **argv)
{
	struct jail j;
	char err[1024];
	int st, sfd, pfd;
	sigset_t sigs;
	pid_t pid;

	/* Signals that would kill us first kill the jail (then its cgroups go). */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &sigs, NULL) < 0 ||
	    (sfd = signalfd(-1, &sigs, SFD_CLOEXEC)) < 0)
		die(EX_SYS, "signalfd:");
	{
		struct proc_spec ps = PROC_SPEC(argv);

		ps.file = a->prog;
		ps.in = ps.out = ps.err = PROC_INHERIT;
		ps.pdeathsig = SIGKILL;
		if ((pid = jail_spawn(&a->js, &ps, &j, err, sizeof err)) < 0)
			die(errno == EINVAL ? EX_USAGE : EX_SYS, "%s", err);
	}
	if ((pfd = pidfd_open_(pid)) < 0)
		die(EX_SYS, "pidfd_open:"); /* the jail dies with us (pdeathsig) */
	if (a->jfd >= 0) {
		char *s = json_dumps(j.applied, JSON_COMPACT);

		if (!s || write_all((int)a->jfd, s, strlen(s)) < 0 || write_all((int)a->jfd, "\n", 1) < 0)
			die(EX_SYS, "--json-fd %lld:", a->jfd);
		free(s);
	}
	for (;;) {
		struct pollfd pf[2] = { { .fd = pfd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			die(EX_SYS, "poll:");
		if (pf[0].revents)
			break;
		if (pf[1].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof si) == sizeof si)
				warn("signal %u: killing the jail", si.ssi_signo);
			pidfd_kill(pfd, SIGKILL);
		}
	}
	if (proc_wait(pid, &st) < 0)
		die(EX_SYS, "waitpid:");
	if (jail_release(&j, err, sizeof err) < 0)
		warn("%s", err);
	return proc_status(st);
}

int main(int argc, char **argv)
{
	/* PROG may be anything: an init of ours keeps the parent-death
	 * signal whatever it execs (jail.h) */
	struct args a = { .js = { .name = NULL, .init = 1 }, .jfd = -1 };

	progname = "isopod-jail";
	signal(SIGPIPE, SIG_IGN);
	parse_args(&a, argc, argv);
	plan(&a, argv[optind]);
	return run(&a, argv + optind);
}
