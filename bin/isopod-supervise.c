/* isopod-supervise - the supervisor of one VM: holds its lock, owns its
 * QEMU (and its egress broker), and records how it ended.
 *
 * Exec'd by isopod-boot with fixed descriptors (s6-supervise, Firecracker's
 * jailer): nothing else of the caller's reaches it, nor QEMU.
 *   fd 3  vms/<id>/lock, flock-held: the lock IS "the VM is running"; it
 *         goes when this process exits, after QEMU (and the broker) did
 *   fd 4  control, read: 'r' once the boot is confirmed; EOF before that
 *         (the boot failed or its process died) ends QEMU
 *   fd 5  report, written once: "<qemu pid>\n", or "error: <why>\n"
 *   fd 6  (--owner) the owner's pidfd: the owner gone ends QEMU
 *   fd 7  (--mem) a warm clone's memory file: QEMU's fd 3
 *   fd 8  (--slot) the network slot's lock: held while the VM lives, and
 *         the broker's fd 3
 * stdin: one JSON object {"vm":ID, "dir":DIR, "qemu":[ARGV...],
 * "net":{"mode","gateway","allow":[...]}|null, "jail":true|false,
 * "jail_why":WHY, "console_max":BYTES, "pool_idle_s":N}.  With pool_idle_s
 * the VM is a pooled one (isopod-pool(1), lib/pool.h): no owner yet; one
 * is taken on pool/.own/<id>.sock (a pidfd sent by the taker), one only
 * (the socket goes with it), and watched as --owner's; none within N
 * seconds of our start ends QEMU (stopped_by "pool-idle").  QEMU writes the guest's console
 * into a pipe (its fd QEMU_CONSOLE_FD) that we read for the VM's whole
 * life into DIR/console.log, its first console_max bytes (default
 * CONSOLE_MAX_DEFAULT); the rest is counted, and the record gets
 * console_bytes and console_log_truncated (lib/conlog.c).  With
 * "jail":true QEMU runs in the jail (lib/qjail.c, lib/jail.c), and so
 * does its broker; what the jail applied goes into the
 * VM's record as "jail".  False: neither, the broker's log says WHY.  The
 * supervisor watches QEMU, the owner and its signals through pidfds and a
 * signalfd, and kills QEMU (the pid it forked itself, never a pid read
 * from a file).  QEMU carries PDEATHSIG=SIGKILL, so a SIGKILLed supervisor
 * takes QEMU with it. */

#include "conlog.h"
#include "egress.h"
#include "pool.h"
#include "proc.h"
#include "qemu.h"
#include "qjail.h"
#include "util.h"
#include "vm.h"

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
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-supervise [--owner] [--mem] [--slot] < spec.json"

/* The console is read at most this often: QEMU writes it a byte at a time
 * (the 16550), and a wakeup per byte cost the guest 60% more time per
 * console byte (3 MiB: 5.1 s instead of 3.1 s under TCG); the pipe (1
 * MiB, conlog_open) holds ~1 s of TCG's 1.1 MB/s meanwhile. */
#define CONSOLE_BATCH_MS 20

enum { FD_LOCK = 3, FD_CTL, FD_REP, FD_OWNER, FD_MEM, FD_SLOT };

/* What one supervisor watches, and what it found. */
struct sup {
	const char *id, *dir;
	char *const *av;
	int ctlfd, repfd, ownerfd, memfd, slotfd, sfd;
	struct egress eg;           /* argc 0: no broker */
	pid_t q;
	int qfd, st, ready, killed;
	int jailed;                 /* the spec's "jail" */
	struct qjail qj;
	struct jail j;
	const char *why;            /* stopped_by */
	struct conlog con;          /* the console: QEMU's fd QEMU_CONSOLE_FD */
	int conwfd;                 /* its write end, until QEMU has it */
	int con_noted;              /* the record says the log was cut */
	long long pool_idle_s;      /* the spec's: a pooled VM (0: not) */
	int plfd;                   /* its owner socket, until an owner came */
	int pifd;                   /* inotify on its shape's directory (pool_watch) */
	int64_t idle_at;            /* no owner by then: QEMU ends */
	int64_t take_at;            /* its entry taken: no owner by then, QEMU ends */
};

/* Before QEMU runs: a session of its own (isopod-boot asked for it), the
 * signals read through a signalfd, the caller's stdio let go of. */
static void sup_setup(struct sup *s)
{
	sigset_t set;
	int nul, logfd;
	char qlog[PATH_MAX];

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	s->sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	/* Let go of the caller's stdio: a $(isopod-boot) must see EOF when
	 * isopod-boot exits, not when the VM does. */
	nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	snprintf(qlog, sizeof qlog, "%s/qemu.log", s->dir);
	logfd = open(qlog, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s->sfd < 0 || nul < 0 || logfd < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 ||
	    dup2(logfd, 2) < 0) {
		dprintf(s->repfd, "error: supervisor setup: %s\n", strerror(errno));
		_exit(111);
	}
	close(nul);
	close(logfd); /* it lives on as fd 2 */
}

/* A process's pid and start (ticks since the host booted) name it only
 * within one boot of the host: the host's boot id beside them, so that
 * isopod-gc, after a reboot, never takes a new process with the same pid
 * and start for the VM's (its still_ours).  None when it cannot be read:
 * gc then goes by the start alone, as for an older record. */
static void with_boot_id(json_t *m)
{
	char bid[37];

	if (m && host_boot_id(bid) == 0)
		json_object_set_new(m, "boot_id", json_string(bid));
}

/* The VM's egress broker, before QEMU: filtered, proxy + DNS for the
 * allowlist; open, DNS. */
static void sup_broker(struct sup *s)
{
	char bl[PATH_MAX], msg[512];
	unsigned long long start = 0;
	long long uid = -1;
	json_t *m;
	int blog;

	if (!s->eg.argc)
		return;
	snprintf(bl, sizeof bl, "%s/broker.log", s->dir);
	blog = open(bl, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (blog < 0 || egress_start(&s->eg, blog, s->slotfd, 5000, msg, sizeof msg) < 0) {
		if (blog >= 0)
			egress_log_reason(bl, msg, sizeof msg);
		dprintf(s->repfd, "error: %s (see %s)\n", blog < 0 ? strerror(errno) : msg, bl);
		_exit(111);
	}
	close(blog);
	/* for isopod-gc, should a broker ever outlive us: who it is, as the
	 * kernel says (our child, unreaped: the pid is its own), not its
	 * cmdline, which a subverted broker may rewrite */
	if (proc_ident(s->eg.pid, &start, &uid, NULL) < 0) {
		warn("supervisor: unable to read the broker's start and uid (recorded as 0 and -1: "
		     "isopod-gc will not kill it should it leak, only report it):");
		start = 0;
		uid = -1;
	}
	m = json_pack("{s:I, s:I, s:I}", "broker_pid", (json_int_t)s->eg.pid, "broker_start",
		      (json_int_t)start, "broker_uid", (json_int_t)uid);
	with_boot_id(m);
	if (!m || vm_meta_update(s->id, NULL, m) < 0)
		warn("supervisor: unable to record the broker's pid:");
	json_decref(m);
}

/* Start QEMU in its jail (lib/qjail.c): the VM directory handed to the
 * jail's uid first, what was applied recorded after.  The pid, or -1 with
 * msg (the directory is root's again). */
static pid_t sup_jailed(struct sup *s, char *msg, size_t msz)
{
	struct proc_spec ps = PROC_SPEC(s->qj.av);
	char *env[] = { s->qj.preload, NULL };
	json_t *m;

	if (qjail_plan(&s->qj, s->id, s->dir, s->av, msg, msz) < 0 ||
	    qjail_give(&s->qj, s->dir, msg, msz) < 0) {
		qjail_reclaim(&s->qj);
		return -1;
	}
	ps.file = s->qj.prog;
	if (s->qj.preload[0]) /* a clone's: its RAM file read-only (lib/memro.c) */
		ps.env = env;
	ps.out = ps.err = 2;
	ps.keep[0] = s->memfd;
	ps.keep[1] = s->qj.tapfd;
	ps.keep[2] = s->conwfd;
	ps.nkeep = 3;
	ps.pdeathsig = SIGKILL;
	ps.umask = 0177; /* as qemu_spawn: its sockets 0600 from the start */
	ps.nothp = qemu_nothp(s->av); /* as qemu_spawn */
	if (jail_spawn(&s->qj.js, &ps, &s->j, msg, msz) < 0) {
		qjail_reclaim(&s->qj);
		return -1;
	}
	if (s->qj.tapfd >= 0)
		close(s->qj.tapfd); /* QEMU's now, as its fd 4 */
	s->qj.tapfd = -1;
	m = json_pack("{s:O}", "jail", s->j.applied);
	if (!m || vm_meta_note(s->id, NULL, m) < 0) /* sup_record's write carries it again */
		warn("supervisor: unable to record the jail:");
	json_decref(m);
	return s->j.pid;
}

/* Unjailed, QEMU is reaped: the lane's bytes (this VM's stdin and files)
 * go with it, as the jail's reclaim unlinks them (lib/qjail.c); the next
 * QEMU of this directory gets a new file (bulk_file_new). */
static void sup_unlink_bulk(const struct sup *s)
{
	char p[PATH_MAX];

	if (pathn(p, sizeof p, "%s/" QEMU_BULK_FILE, s->dir) == 0 && unlink(p) < 0 && errno != ENOENT)
		warn("supervisor: unlink %s:", p);
}

/* QEMU did not start (or cannot be watched): report why and exit, the
 * broker ended first.  Its jail's cgroups are ours to remove (egress_stop):
 * exiting without would leave them to isopod-gc, as would a QEMU started
 * but not watched, which goes the same way. */
__attribute__((noreturn)) static void sup_start_failed(struct sup *s, const char *what)
{
	char err[512];

	if (s->q > 0) {
		kill(s->q, SIGKILL);
		while (waitpid(s->q, &s->st, 0) < 0 && errno == EINTR)
			;
		if (s->jailed && jail_release(&s->j, err, sizeof err) < 0)
			warn("supervisor: %s", err);
		if (s->jailed) /* (a failed start was reclaimed by sup_jailed) */
			qjail_reclaim(&s->qj);
		else
			sup_unlink_bulk(s);
	}
	egress_stop(&s->eg);
	if (s->plfd >= 0)
		pool_unlisten(s->id);
	dprintf(s->repfd, "error: %s\n", what);
	_exit(111);
}

/* Start QEMU and report its pid to isopod-boot. */
static void sup_qemu(struct sup *s)
{
	char msg[1024], clog[PATH_MAX], env[PATH_MAX + 16], why[PATH_MAX + 128];
	unsigned long long start;
	json_t *m;

	if (conlog_open(&s->con, pathf(clog, sizeof clog, "%s/console.log", s->dir), s->con.max,
			&s->conwfd) < 0) {
		snprintf(msg, sizeof msg, "unable to create %.512s: %s", clog, strerror(errno));
		s->q = -1;
	} else if (s->jailed) {
		s->q = sup_jailed(s, msg, sizeof msg);
	} else if (qemu_clone_env(s->av, env, sizeof env, why, sizeof why) < 0) {
		/* qemu_spawn's own check, said first and in full */
		s->q = -1;
		snprintf(msg, sizeof msg, "%.900s (a warm clone's QEMU needs it)", why);
	} else if ((s->q = qemu_spawn(s->av, 2, 1, s->memfd, s->conwfd)) < 0) {
		snprintf(msg, sizeof msg, "unable to fork: %s", strerror(errno));
	}
	if (s->memfd >= 0)
		close(s->memfd); /* QEMU has its own copy as fd 3 */
	if (s->conwfd >= 0)
		close(s->conwfd); /* QEMU's, as its fd QEMU_CONSOLE_FD: EOF here once it is gone */
	s->conwfd = -1;
	if (s->q < 0) {
		/* one line: isopod-boot reads "error: ..." up to it */
		for (char *c = msg; *c; c++)
			if (*c == '\n')
				*c = ' ';
		warn("supervisor: %s", msg);
		sup_start_failed(s, msg);
	}
	s->qfd = pidfd_open_(s->q); /* our unreaped child: cannot be a recycled pid */
	if (s->qfd < 0) {
		snprintf(msg, sizeof msg, "pidfd_open: %s", strerror(errno));
		sup_start_failed(s, msg);
	}
	/* for isopod-gc, as the broker's: its start time, which QEMU cannot
	 * change (its uid may not be the jail's yet: not recorded) */
	if (proc_ident(s->q, &start, NULL, NULL) < 0) {
		warn("supervisor: unable to read QEMU's start (recorded as 0: isopod-gc will not "
		     "kill it should it leak, only report it):");
		start = 0;
	}
	/* A note: it names a process that a host crash, the only thing
	 * that could undo the note, ends */
	m = json_pack("{s:I}", "qemu_start", (json_int_t)start);
	with_boot_id(m);
	if (!m || vm_meta_note(s->id, NULL, m) < 0)
		warn("supervisor: unable to record QEMU's start:");
	json_decref(m);
	dprintf(s->repfd, "%ld\n", (long)s->q);
	close(s->repfd);
}

/* Kill QEMU once, saying why. */
static void sup_kill(struct sup *s, const char *why, const char *note)
{
	if (s->killed)
		return;
	if (note)
		warn("supervisor: %s: killing qemu", note);
	s->why = why;
	s->killed = 1;
	kill(s->q, SIGKILL);
}

/* What the guest wrote to its console since the last call, into
 * console.log up to its cap (lib/conlog.c); the first time the cap cuts
 * it, the record says so at once (a kept VM's result reads it while the
 * VM runs) and qemu.log says where. */
static void sup_console(struct sup *s, uint64_t budget)
{
	char why[256];
	json_t *m;

	conlog_drain(&s->con, budget);
	if (s->con_noted || !conlog_truncated(&s->con))
		return;
	s->con_noted = 1;
	warn("supervisor: %s", conlog_cut(&s->con, why, sizeof why));
	m = json_pack("{s:b}", "console_log_truncated", 1);
	if (!m || vm_meta_update(s->id, NULL, m) < 0)
		warn("supervisor: unable to record the console's cut:");
	json_decref(m);
}

/* A pooled VM's one owner: the pidfd the taker sent, watched from now on
 * as --owner's; the socket closed and removed, so no second owner can
 * ever be handed this VM. */
static void sup_pool_owner(struct sup *s)
{
	static const char *const live[] = { "running", NULL };
	struct pollfd q = { .fd = s->qfd, .events = POLLIN };
	int conn, pfd = pool_accept(s->plfd, &conn);
	json_t *m;

	if (pfd < 0)
		return;
	/* The answer last, once we know QEMU still runs and we are not
	 * killing it: a taker answered 'k' runs in its VM (review L1). */
	if (s->killed || poll(&q, 1, 0) != 0) {
		close(pfd);
		close(conn);
		return;
	}
	s->ownerfd = pfd;
	close(s->plfd);
	s->plfd = -1;
	pool_unlisten(s->id);
	if (s->pifd >= 0) {
		close(s->pifd);
		s->pifd = -1;
	}
	m = json_pack("{s:b}", "pool_taken", 1);
	if (!m || vm_meta_update(s->id, live, m) < 0)
		warn("supervisor: unable to record the pool's take:");
	json_decref(m);
	if (pool_ack(conn) < 0)
		/* the taker is gone: so is the run it took us for */
		sup_kill(s, "owner", "the taker went before its answer");
}

/* Watch QEMU, the signals, the owner, the control pipe and the console
 * until QEMU is gone; then reap it and take the rest of its console. */
static void sup_watch(struct sup *s)
{
	struct pollfd pf[7];
	int64_t con_at = 0; /* the console is polled again from then */

	for (;;) {
		int n = 0, iq, is, io = -1, ic = -1, icon = -1, ip = -1, ii = -1, wait = -1;
		int64_t now = mono_ms();

		pf[iq = n++] = (struct pollfd){ .fd = s->qfd, .events = POLLIN };
		pf[is = n++] = (struct pollfd){ .fd = s->sfd, .events = POLLIN };
		if (s->con.rfd >= 0 && now >= con_at)
			pf[icon = n++] = (struct pollfd){ .fd = s->con.rfd, .events = POLLIN };
		else if (s->con.rfd >= 0)
			wait = (int)(con_at - now);
		if (s->ownerfd >= 0)
			pf[io = n++] = (struct pollfd){ .fd = s->ownerfd, .events = POLLIN };
		if (s->ctlfd >= 0)
			pf[ic = n++] = (struct pollfd){ .fd = s->ctlfd, .events = POLLIN };
		if (s->plfd >= 0) {
			pf[ip = n++] = (struct pollfd){ .fd = s->plfd, .events = POLLIN };
			if (now >= s->idle_at)
				sup_kill(s, "pool-idle", "pooled, no run within its idle lifetime");
			else if (wait < 0 || s->idle_at - now < wait)
				wait = (int)(s->idle_at - now);
			/* taken and no owner came: the taker died or failed */
			if (s->take_at && now >= s->take_at)
				sup_kill(s, "pool-orphan", "pooled, taken, no owner handed over");
			else if (s->take_at && (wait < 0 || s->take_at - now < wait))
				wait = (int)(s->take_at - now);
		}
		if (s->pifd >= 0)
			pf[ii = n++] = (struct pollfd){ .fd = s->pifd, .events = POLLIN };
		if (poll(pf, (nfds_t)n, wait) < 0) {
			if (errno == EINTR)
				continue;
			warn("supervisor: poll:");
			s->why = "error";
			kill(s->q, SIGKILL);
			break;
		}
		/* First, then not again for CONSOLE_BATCH_MS: a full pipe stalls
		 * the guest's UART, a wakeup per byte slows it more.  A budget
		 * per round keeps the other descriptors in view. */
		if (icon >= 0 && pf[icon].revents) {
			sup_console(s, 4 << 20);
			con_at = mono_ms() + CONSOLE_BATCH_MS;
		}
		if (pf[iq].revents) {
			/* QEMU is gone.  A confirmation already in the pipe still
			 * counts: the boot was confirmed before we saw the exit
			 * (seen under load: the record said failed). */
			struct pollfd c = { .fd = s->ctlfd, .events = POLLIN };
			char b = 0;

			if (ic >= 0 && !s->ready && poll(&c, 1, 0) == 1 && (c.revents & POLLIN) &&
			    read(s->ctlfd, &b, 1) == 1 && b == 'r')
				s->ready = 1;
			break;
		}
		if (pf[is].revents) {
			struct signalfd_siginfo si;
			char note[64];

			while (read(s->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
				snprintf(note, sizeof note, "signal %u", si.ssi_signo);
				sup_kill(s, "signal", note);
			}
		}
		if (ii >= 0 && pf[ii].revents && pool_watch_taken(s->pifd, s->id) && !s->take_at)
			s->take_at = mono_ms() + POOL_TAKE_MS;
		if (ip >= 0 && pf[ip].revents)
			sup_pool_owner(s);
		if (io >= 0 && pf[io].revents) {
			sup_kill(s, "owner", "owner exited");
			close(s->ownerfd);
			s->ownerfd = -1;
		}
		if (ic >= 0 && pf[ic].revents) {
			char b = 0;
			ssize_t r = read(s->ctlfd, &b, 1);

			if (r == 1 && b == 'r') {
				s->ready = 1;
			} else if (r < 0 && errno == EINTR) {
				continue;
			} else if (!s->ready) {
				/* no log line: the last line of qemu.log is the
				 * parent's diagnostic material */
				sup_kill(s, "boot", NULL);
			}
			if (r != 1 || s->ready) {
				close(s->ctlfd);
				s->ctlfd = -1;
			}
		}
	}
	while (waitpid(s->q, &s->st, 0) < 0 && errno == EINTR)
		;
	if (s->plfd >= 0) {
		close(s->plfd);
		s->plfd = -1;
		pool_unlisten(s->id);
	}
	/* what QEMU wrote before it went: the pipe holds at most its size,
	 * and reads never block (O_NONBLOCK: should anything of the jail's
	 * still hold the write end, EAGAIN ends this) */
	sup_console(s, UINT64_MAX);
	conlog_close(&s->con);
	if (s->jailed) {
		char err[512];

		if (jail_release(&s->j, err, sizeof err) < 0)
			warn("supervisor: %s", err);
		qjail_reclaim(&s->qj);
		qjail_free(&s->qj);
	} else {
		sup_unlink_bulk(s);
	}
}

/* QEMU is gone: end the broker, then make the record final. */
static void sup_record(struct sup *s)
{
	static const char *const live[] = { "booting", "running", NULL };
	char now[32];
	json_t *m, *f;

	/* The broker ends after QEMU and before the lock goes: its ledger is
	 * complete when isopod-stop sees the VM stopped. */
	egress_stop(&s->eg);
	m = json_pack("{s:s, s:i, s:s, s:I, s:b}", "stopped_at", iso_now(now, sizeof now),
		      "qemu_exit", proc_status(s->st), "stopped_by", s->why, "console_bytes",
		      (json_int_t)s->con.bytes, "console_log_truncated", conlog_truncated(&s->con));
	/* Before the parent confirmed the boot this is a failed boot; the
	 * parent, if alive, overwrites error with the specific reason.  The
	 * state only from a live one; both in one write (isopod-stop waits
	 * for it: each write is two fsyncs). */
	if (s->ready)
		f = json_pack("{s:s}", "state", "stopped");
	else
		f = json_pack("{s:s, s:s}", "state", "failed", "error",
			      !strcmp(s->why, "boot") ? "isopod-boot failed or died before the agent answered"
						      : "qemu stopped before the agent answered");
	if (!m || !f || vm_meta_update_also(s->id, m, live, f) < 0)
		warn("supervisor: unable to update the record of %s:", s->id);
	json_decref(m);
	json_decref(f);
}

static int fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

/* The spec on stdin: ids and paths checked, QEMU's argv, the broker's plan. */
static json_t *read_spec(struct sup *s, char **av, size_t avn)
{
	json_t *spec = json_read_stdin(), *q, *v, *net;
	char bp[PATH_MAX], ledger[PATH_MAX], msg[512];
	const char *mode, *gw;
	size_t i;
	int r;

	s->id = json_string_value(json_object_get(spec, "vm"));
	s->dir = json_string_value(json_object_get(spec, "dir"));
	q = json_object_get(spec, "qemu");
	if (!id_vm_ok(s->id) || !s->dir || s->dir[0] != '/' || strlen(s->dir) > PATH_MAX - 64)
		die(EX_USAGE, "standard input: want {\"vm\":\"vm-<12 hex>\",\"dir\":ABSOLUTE,...}");
	if (!json_is_array(q) || !json_array_size(q) || json_array_size(q) >= avn)
		die(EX_USAGE, "standard input: want \"qemu\": [ARGV...] of 1..%zu strings", avn - 1);
	json_array_foreach(q, i, v) {
		if (!json_is_string(v))
			die(EX_USAGE, "standard input: qemu[%zu] is not a string", i);
		av[i] = (char *)json_string_value(v);
	}
	av[i] = NULL;
	s->av = av;
	s->jailed = json_is_true(json_object_get(spec, "jail"));
	v = json_object_get(spec, "console_max");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0 ||
		  json_integer_value(v) > CONSOLE_MAX_LIMIT))
		die(EX_USAGE, "standard input: want \"console_max\": 0..%lld", CONSOLE_MAX_LIMIT);
	s->con.max = v ? (long long)json_integer_value(v) : CONSOLE_MAX_DEFAULT;
	v = json_object_get(spec, "pool_idle_s");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 86400))
		die(EX_USAGE, "standard input: want \"pool_idle_s\": 1..86400");
	s->pool_idle_s = v ? (long long)json_integer_value(v) : 0;
	net = json_object_get(spec, "net");
	if (!json_is_object(net))
		return spec;
	mode = json_string_value(json_object_get(net, "mode"));
	gw = json_string_value(json_object_get(net, "gateway"));
	if (!mode || !gw ||
	    (strcmp(mode, "filtered") && strcmp(mode, "open") && strcmp(mode, "learn")))
		die(EX_USAGE, "standard input: want \"net\": {\"mode\":\"filtered\"|\"open\"|\"learn\","
			      "\"gateway\":ADDRESS,\"allow\":[...]} or null");
	snprintf(ledger, sizeof ledger, "%s/ledger.jsonl", s->dir);
	proc_sibling(bp, sizeof bp, "isopod-broker", "ISOPOD_BROKER");
	if ((r = egress_plan(&s->eg, bp, mode, gw, json_object_get(net, "allow"), ledger, s->id, msg,
			     sizeof msg)) < 0)
		die(r == -2 ? EX_SYS : EX_USAGE, "vm %s: %s", s->id, msg);
	/* the broker as QEMU: isopod-boot decided once for both */
	s->eg.jailed = s->jailed;
	snprintf(s->eg.jail_why, sizeof s->eg.jail_why, "%s",
		 json_string_value(json_object_get(spec, "jail_why")) ?: "the spec's jail is false");
	return spec;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "owner", no_argument, NULL, 'o' },
		{ "mem", no_argument, NULL, 'm' },
		{ "slot", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sup s = { .ctlfd = FD_CTL, .repfd = FD_REP, .ownerfd = -1, .memfd = -1,
			 .slotfd = -1, .sfd = -1, .eg = { .pid = -1, .pidfd = -1 }, .q = -1,
			 .qfd = -1, .why = "qemu", .con = { .rfd = -1, .logfd = -1 }, .conwfd = -1,
			 .plfd = -1, .pifd = -1 };
	char *av[128];
	json_t *spec;
	int c, i;

	progname = "isopod-supervise";
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'o': s.ownerfd = FD_OWNER; break;
		case 'm': s.memfd = FD_MEM; break;
		case 's': s.slotfd = FD_SLOT; break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	for (i = FD_LOCK; i <= FD_SLOT; i++)
		if ((i <= FD_REP || i == s.ownerfd || i == s.memfd || i == s.slotfd) && !fd_open(i))
			die(EX_USAGE, "fd %d is not open; isopod-boot starts isopod-supervise "
				      "(see isopod-supervise(1))", i);
	spec = read_spec(&s, av, sizeof av / sizeof av[0]);
	/* a pooled VM's owner is the run that takes it, handed over once */
	if (s.pool_idle_s && s.ownerfd >= 0)
		die_usage(USAGE, "--owner and a spec's pool_idle_s: a pooled VM gets its owner "
				 "from its take");
	sup_setup(&s);
	if (s.pool_idle_s) {
		char msg[PATH_MAX + 64];

		if ((s.plfd = pool_listen(s.id, msg, sizeof msg)) < 0) {
			dprintf(s.repfd, "error: %s\n", msg);
			return 111;
		}
		s.idle_at = mono_ms() + s.pool_idle_s * 1000;
		/* its entry's unlink is a take: the hand-over follows or the VM ends */
		if ((s.pifd = pool_watch(s.id, msg, sizeof msg)) < 0)
			warn("supervisor: %s: a take that never hands over waits for the idle lifetime", msg);
	}
	sup_broker(&s);
	sup_qemu(&s);
	sup_watch(&s);
	sup_record(&s);
	json_decref(spec);
	/* Exiting closes fd 3: the VM is no longer running. */
	return proc_status(s.st) & 0xff;
}
