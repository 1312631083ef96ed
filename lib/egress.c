/* egress.c - start and stop a VM's isopod-broker (see egress.h). */

#include "egress.h"
#include "jail.h"
#include "net.h"
#include "proc.h"
#include "taphold.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void add(struct egress *e, const char *s)
{
	if (e->argc < (int)(sizeof e->argv / sizeof e->argv[0]) - 1)
		e->argv[e->argc++] = (char *)s;
	e->argv[e->argc] = NULL;
}

int egress_plan(struct egress *e, const char *broker, const char *mode, const char *gw,
		const json_t *allow, const char *ledger, const char *vmid, char *msg, size_t msz)
{
	struct range ranges[RANGES_ALLOW_MAX];
	size_t i, nranges;
	json_t *v;
	int rc;

	memset(e, 0, sizeof *e);
	e->pid = -1;
	e->pidfd = -1;
	e->jailed = 1;
	snprintf(e->arg[0], sizeof e->arg[0], "%s", broker);
	snprintf(e->arg[1], sizeof e->arg[1], "%s", gw);
	snprintf(e->arg[2], sizeof e->arg[2], "%s", ledger);
	snprintf(e->arg[4], sizeof e->arg[4], "%s", vmid);
	add(e, e->arg[0]);
	add(e, "--listen");
	add(e, e->arg[1]);
	/* The ledger is opened by egress_start and handed over as fd 4: the
	 * jailed broker has no writable path at all.  Its path stays on the
	 * command line: the broker names it in its messages.  (isopod-gc
	 * knows a leaked broker by its start time and uid, which the
	 * supervisor records: a cmdline the broker can rewrite.) */
	add(e, "--ledger");
	add(e, e->arg[2]);
	add(e, "--ledger-fd");
	add(e, "4");
	add(e, "--vm");
	add(e, e->arg[4]);
	/* The broker proves isopod-netsetup's table is loaded before it
	 * announces itself, and keeps checking (isopod-broker(1)). */
	snprintf(e->arg[6], sizeof e->arg[6], "%d", NET_CANARY_PORT);
	add(e, "--canary");
	add(e, e->arg[6]);
	/* The upstream resolver always on the command line: a jailed broker
	 * cannot read /etc/resolv.conf (none found: the broker says so). */
	if ((getenv("ISOPOD_RESOLVER") && *getenv("ISOPOD_RESOLVER") &&
	     snprintf(e->arg[5], sizeof e->arg[5], "%s", getenv("ISOPOD_RESOLVER"))) ||
	    egress_default_resolver(e->arg[5], sizeof e->arg[5]) == 0) {
		add(e, "--resolver");
		add(e, e->arg[5]);
	}
	if ((rc = ranges_load_config(ranges_config_path(), ranges, RANGES_ALLOW_MAX, &nranges, msg,
				     msz)) < 0)
		return rc;
	for (i = 0; i < nranges; i++) {
		add(e, "--allow-range");
		add(e, range_text(&ranges[i], e->range[i], sizeof e->range[i]));
	}
	if (!strcmp(mode, "open")) {
		add(e, "--no-proxy");
		add(e, "--allow-all");
	} else if (!strcmp(mode, "learn")) {
		/* a filtered slot's broker that lets every name through (and
		 * IP literals: the proposal names them), each flow in the
		 * ledger; the deny ranges and the host's addresses still hold */
		add(e, "--allow-all");
	} else if (json_is_array(allow)) {
		json_array_foreach(allow, i, v) {
			if (!json_is_string(v))
				continue;
			if (e->argc > (int)(sizeof e->argv / sizeof e->argv[0]) - 6) {
				snprintf(msg, msz, "too many --allow patterns (at most %d)",
					 (int)(sizeof e->argv / sizeof e->argv[0]) - 20);
				return -1;
			}
			add(e, "--allow");
			add(e, json_string_value(v)); /* lives as long as the record */
		}
	}
	add(e, "--parent");
	add(e, e->arg[3]); /* the supervisor's pid, written by egress_start */
	return 0;
}

/* The broker's jail (see egress.h): nothing of the host's file system but
 * its binary and what it loads, nothing writable, no uid of the
 * supervisor's.  Memory: room for every flow's pipes (256 flows x 2 x 256
 * KiB) and buffers; it is one process, the pids limit only stops a fork. */
#define BROKER_MEM_BYTES (384ll << 20)
#define BROKER_PIDS 8
#define BROKER_RO_MAX 64

static pid_t spawn_jailed(struct egress *e, const struct proc_spec *ps, int logfd, char *msg,
			  size_t msz)
{
	char *ro[BROKER_RO_MAX], name[96], prog[PATH_MAX], err[1024];
	struct jail_spec js = { .name = name, .hostnet = 1, .landlock = 1,
				.mem_bytes = BROKER_MEM_BYTES, .pids = BROKER_PIDS };
	size_t nro = 0, i;
	pid_t pid = -1;

	snprintf(name, sizeof name, EGRESS_JAIL_NAME "%.56s", e->arg[4]);
	if (!realpath(e->argv[0], prog)) {
		snprintf(msg, msz, "egress broker: %s: %s", e->argv[0], strerror(errno));
		return -1;
	}
	snprintf(err, sizeof err, "out of memory");
	if (!(ro[nro++] = strdup(prog)) || jail_deps(prog, ro, &nro, BROKER_RO_MAX, err, sizeof err) < 0 ||
	    (geteuid() == 0 && jail_identity(name, &js.uid, &js.gid, err, sizeof err) < 0)) {
		snprintf(msg, msz, "egress broker: %s", err);
		goto out;
	}
	js.ro = (const char *const *)ro;
	js.nro = nro;
	if ((pid = jail_spawn(&js, ps, &e->jail, err, sizeof err)) < 0) {
		snprintf(msg, msz, "egress broker: %s", err);
		goto out;
	}
	{
		char *s = json_dumps(e->jail.applied, JSON_COMPACT);

		dprintf(logfd, "isopod-broker: jail: %s\n", s ? s : "{}");
		free(s);
	}
out:
	for (i = 0; i < nro; i++)
		free(ro[i]);
	return pid;
}

const char *egress_jail_vm(const char *name)
{
	size_t n = strlen(EGRESS_JAIL_NAME);

	return strncmp(name, EGRESS_JAIL_NAME, n) ? NULL : name + n;
}

/* An open slot's broker: DNS only, no proxy port. */
static int no_proxy(const struct egress *e)
{
	for (int i = 0; i < e->argc; i++)
		if (!strcmp(e->argv[i], "--no-proxy"))
			return 1;
	return 0;
}

int egress_start(struct egress *e, int logfd, int lockfd, int timeout_ms, char *msg, size_t msz)
{
	char line[512];
	size_t got = 0;
	int out[2], st, ledger, jailed = e->jailed;
	int64_t deadline = mono_ms() + timeout_ms;
	pid_t me = getpid();

	snprintf(e->arg[3], sizeof e->arg[3], "%ld", (long)me);
	if (!jailed)
		dprintf(logfd, "isopod-broker: jail: off (%s)\n", e->jail_why);
	ledger = open(e->arg[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW,
		      0600);
	if (ledger < 0) {
		snprintf(msg, msz, "egress broker: unable to open the ledger %s: %s", e->arg[2],
			 strerror(errno));
		return -1;
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "egress broker: pipe: %s", strerror(errno));
		close(ledger);
		return -1;
	}
	{
		/* SIGTERM, not SIGKILL: the broker writes its ledger lines.
		 * The slot lock as its fd 3: the slot is busy while it lives;
		 * the ledger its fd 4. */
		struct proc_spec ps = PROC_SPEC(e->argv);

		ps.file = e->argv[0];
		ps.out = out[1];
		ps.err = logfd;
		ps.keep[0] = lockfd;
		ps.keep[1] = ledger;
		ps.nkeep = 2;
		ps.pdeathsig = SIGTERM;
		/* Root's jail runs it as a jail uid, which the host's jail egress
		 * chain must hold: it proves that before its ready line (a range
		 * changed since netsetup ran would leave it outside, review L1).
		 * Unjailed, or a user's jail (its own uid, in a user namespace):
		 * outside the chain anyway (isopod-netsetup(8), JAIL EGRESS). */
		if (jailed && geteuid() == 0)
			add(e, "--expect-jail-chain");
		if (jailed)
			e->pid = spawn_jailed(e, &ps, logfd, msg, msz);
		else if ((e->pid = proc_spawn(&ps)) < 0)
			snprintf(msg, msz, "egress broker: fork: %s", strerror(errno));
	}
	close(ledger);
	if (e->pid < 0) {
		close(out[0]);
		close(out[1]);
		return -1;
	}
	close(out[1]);
	e->pidfd = pidfd_open_(e->pid);
	/* The ready line: one JSON object, then EOF (the broker closes its
	 * stdout).  EOF without it: the broker failed; its reason is in the log. */
	for (;;) {
		struct pollfd p = { .fd = out[0], .events = POLLIN };
		int64_t left = deadline - mono_ms();
		ssize_t n;

		if (left <= 0) {
			snprintf(msg, msz, "egress broker: not ready within %d ms", timeout_ms);
			goto fail;
		}
		if (poll(&p, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			snprintf(msg, msz, "egress broker: poll: %s", strerror(errno));
			goto fail;
		}
		n = read(out[0], line + got, sizeof line - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || (got += (size_t)n) >= sizeof line - 1)
			break;
		if (memchr(line, '\n', got))
			break;
	}
	line[got] = '\0';
	close(out[0]);
	out[0] = -1;
	if (!strchr(line, '\n') || line[0] != '{') {
		char why[400];
		struct in_addr gw;
		int code = -1;

		/* End of file without the line: the broker is exiting; give it
		 * a moment to be reapable, so its status (102: address in use)
		 * can be told, not guessed. */
		if (e->pidfd >= 0)
			poll(&(struct pollfd){ .fd = e->pidfd, .events = POLLIN }, 1, 2000);
		if (waitpid(e->pid, &st, WNOHANG) == e->pid) {
			code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			e->pid = -1;
		}
		snprintf(msg, msz, "egress broker failed to start (exit %d)%s", code,
			 code == 102 ? ": its address is in use (another broker on this slot?)" : "");
		/* Bound since the claim found the slot free (lib/taphold.c
		 * taphold_ports_held): this run fails naming the holder, the
		 * next one skips the slot. */
		if (code == 102 && inet_pton(AF_INET, e->arg[1], &gw) == 1 &&
		    taphold_ports_held(gw.s_addr, no_proxy(e), NET_CANARY_PORT + 1, why, sizeof why))
			snprintf(msg, msz, "egress broker failed to start (exit 102): %s: the next run "
				 "skips this slot", why);
		goto fail;
	}
	return 0;
fail:
	if (out[0] >= 0)
		close(out[0]);
	egress_stop(e);
	return -1;
}

void egress_stop(struct egress *e)
{
	int st;

	if (e->pid > 0) {
		/* Our unreaped child: its pid cannot have been recycled. */
		struct pollfd p = { .fd = e->pidfd, .events = POLLIN };

		kill(e->pid, SIGTERM);
		if (e->pidfd < 0 || poll(&p, 1, 3000) <= 0)
			kill(e->pid, SIGKILL);
		while (waitpid(e->pid, &st, 0) < 0 && errno == EINTR)
			;
		e->pid = -1;
	}
	if (e->jail.pid > 0) {
		char err[512];

		if (jail_release(&e->jail, err, sizeof err) < 0)
			warn("egress broker: %s", err);
		e->jail.pid = -1;
	}
	if (e->pidfd >= 0) {
		close(e->pidfd);
		e->pidfd = -1;
	}
}

int egress_default_resolver(char *out, size_t sz)
{
	FILE *fp = fopen("/etc/resolv.conf", "re");
	char line[512], addr[64];
	struct in_addr a;

	if (!fp)
		return -1;
	while (fgets(line, sizeof line, fp)) {
		if (sscanf(line, " nameserver %63s", addr) == 1 && inet_pton(AF_INET, addr, &a) == 1) {
			fclose(fp);
			snprintf(out, sz, "%s", addr);
			return 0;
		}
	}
	fclose(fp);
	return -1;
}

void egress_log_reason(const char *path, char *msg, size_t msz)
{
	/* The broker's reason is its last line but the jail line: that one is
	 * written by us, the parent, after jail_spawn returns, so it may land
	 * after the broker's own last words (seen in CI: the reason was cut
	 * off behind a 600-byte jail description).  The tail read holds more
	 * than one jail line, whose size grows with the store's paths. */
	static const char jl[] = "isopod-broker: jail: ";
	char buf[16384], *line = NULL, *p;
	size_t len = strlen(msg);
	ssize_t n;
	off_t end;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	if (end > (off_t)sizeof buf - 1)
		end -= (off_t)sizeof buf - 1;
	else
		end = 0;
	n = pread(fd, buf, sizeof buf - 1, end);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	/* from the end: the first whole line, not empty, not the jail's */
	for (p = buf + n; p > buf && !line;) {
		char *eol = p, *bol;

		while (eol > buf && (eol[-1] == '\n' || eol[-1] == '\r'))
			*--eol = '\0';
		for (bol = eol; bol > buf && bol[-1] != '\n'; bol--)
			;
		if (bol == buf && end > 0)
			break; /* a line cut by the read: not whole */
		if (*bol && strncmp(bol, jl, sizeof jl - 1))
			line = bol;
		p = bol;
	}
	if (line && len + 3 < msz)
		snprintf(msg + len, msz - len, ": %s", line);
}
