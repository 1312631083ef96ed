/* launch.c - one VM's QEMU under isopod-supervise (lib/launch.h). */

#include "launch.h"
#include "proc.h"
#include "qmp.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Start isopod-supervise with its fixed descriptors (isopod-supervise(1)):
 * it starts QEMU with av (keepfd, when >= 0, becomes QEMU's fd 3); read
 * back QEMU's pid.  It inherits the vm lock's open file description, so
 * the lock never has a gap; the parent keeps its own hold on it too
 * (l->lockfd): a failed attempt's supervisor can exit without the VM ever
 * looking free to gc.  0, or -1 with msg. */
static pid_t start_supervisor(struct launch *l, char *const *av, int keepfd, int ctlfd, int repfd,
			      char *msg, size_t msz)
{
	char sup[PATH_MAX], *sav[8], *text;
	int k = 0, spec[2];
	json_t *j = json_pack("{s:s, s:s, s:[], s:O?, s:b, s:s, s:I}", "vm", l->id, "dir",
			      l->in->dir, "qemu", "net", l->net, "jail", l->jail, "jail_why",
			      l->jail_why, "console_max", (json_int_t)l->console_max);
	struct proc_spec ps = PROC_SPEC(sav);
	pid_t pid;

	if (j && l->pool_idle_s > 0)
		json_object_set_new(j, "pool_idle_s", json_integer(l->pool_idle_s));
	for (char *const *a = av; j && *a; a++)
		json_array_append_new(json_object_get(j, "qemu"), json_string(*a));
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text) {
		snprintf(msg, msz, "unable to build the supervisor's spec");
		return -1;
	}
	if (pipe2(spec, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		free(text);
		return -1;
	}
	sav[k++] = "isopod-supervise";
	if (l->ownerfd >= 0)
		sav[k++] = "--owner";
	if (keepfd >= 0)
		sav[k++] = "--mem";
	if (l->slotfd >= 0)
		sav[k++] = "--slot";
	sav[k] = NULL;
	ps.file = proc_sibling(sup, sizeof sup, "isopod-supervise", "ISOPOD_SUPERVISE");
	ps.in = spec[0];
	ps.err = PROC_INHERIT; /* until it has opened qemu.log */
	ps.setsid = 1;
	ps.keep[0] = l->lockfd;
	ps.keep[1] = ctlfd;
	ps.keep[2] = repfd;
	ps.keep[3] = l->ownerfd >= 0 ? l->ownerfd : PROC_NULL;
	ps.keep[4] = keepfd >= 0 ? keepfd : PROC_NULL;
	ps.keep[5] = l->slotfd >= 0 ? l->slotfd : PROC_NULL;
	ps.nkeep = 6;
	pid = proc_spawn(&ps);
	close(spec[0]);
	if (pid < 0)
		snprintf(msg, msz, "unable to fork: %s", strerror(errno));
	else if (write_all(spec[1], text, strlen(text)) < 0)
		warn("unable to write the supervisor's spec:"); /* it reports no pid */
	close(spec[1]);
	free(text);
	return pid;
}

/* Start the supervisor, which starts QEMU with av (keepfd, when >= 0,
 * becomes QEMU's fd 3), and read back QEMU's pid.  0, or -1 with msg. */
int launch_start(struct launch *l, char *const *av, int keepfd, char *msg, size_t msz)
{
	static const char *const booting[] = { "booting", NULL };
	char line[1024], *end; /* room for a broker's reason (egress_log_reason) */
	int ctl[2], rep[2];
	size_t got = 0;
	long long v;
	ssize_t n;
	json_t *m;

	if (pipe2(ctl, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		return -1;
	}
	if (pipe2(rep, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		close(ctl[0]);
		close(ctl[1]);
		return -1;
	}
	l->sup = start_supervisor(l, av, keepfd, ctl[0], rep[1], msg, msz);
	if (l->sup < 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(rep[0]);
		close(rep[1]);
		return -1;
	}
	close(ctl[0]);
	close(rep[1]);
	l->ctlfd = ctl[1];
	l->supfd = pidfd_open_(l->sup);

	while (got < sizeof line - 1 && (n = read(rep[0], line + got, sizeof line - 1 - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	close(rep[0]);
	line[got] = 0;
	if (got > 0 && line[got - 1] == '\n')
		line[got - 1] = 0;
	errno = 0;
	v = strtoll(line, &end, 10);
	if (!got || errno || *end || v <= 0) {
		snprintf(msg, msz, "supervisor failed to start qemu: %s", got ? line : "no report");
		return -1;
	}
	/* A note (lib/vm.h): pids that a host crash, the only thing that
	 * could undo it, ends */
	m = json_pack("{s:I, s:I}", "supervisor_pid", (json_int_t)l->sup, "qemu_pid", (json_int_t)v);
	if (!m || vm_meta_note(l->id, booting, m) < 0)
		warn("unable to update the record of %s:", l->id);
	json_decref(m);
	return 0;
}

/* Is the supervisor (and so QEMU) gone? */
int launch_gone(const struct launch *l)
{
	struct pollfd p = { .fd = l->supfd, .events = POLLIN };

	return l->supfd >= 0 && poll(&p, 1, 0) > 0;
}

/* Connect to the agent of what launch_start() started and shake hands (l->h), by
 * deadline.  0, or an exit code (EX_SYS, EX_TIMEOUT) with msg; `within`
 * names the bound in the timeout message. */
int launch_handshake(struct launch *l, int64_t deadline, long long within, char *msg,
		     size_t msz)
{
	struct hello *h = &l->h;
	char l1[256], l2[256];
	int r, st;

	for (;;) {
		int64_t slice = mono_ms() + 100;

		if (conn_open(l->conn, l->in->agent, slice < deadline ? slice : deadline) == 0)
			break;
		if (errno != ETIMEDOUT) {
			snprintf(msg, msz, "unable to connect to the agent: %s", l->conn->err);
			return EX_SYS;
		}
		if (launch_gone(l) || mono_ms() >= deadline)
			break;
	}
	r = l->conn->fd >= 0 ? conn_hello(l->conn, h, deadline) : -1;
	if (r == 0) {
		conn_close(l->conn);
		return 0;
	}
	{
		struct pollfd p = { .fd = l->supfd, .events = POLLIN };

		/* QEMU gone?  Give the supervisor a moment to notice and exit. */
		if (l->supfd >= 0 && poll(&p, 1, r == -3 ? 0 : 1000) > 0 &&
		    waitpid(l->sup, &st, 0) == l->sup) {
			l->sup = -1;
			conn_close(l->conn);
			last_line(l->in->qlog, l1, sizeof l1);
			last_line(l->in->console, l2, sizeof l2);
			snprintf(msg, msz, "qemu exited with status %d before the agent answered%s%s%s%s",
				 proc_status(st), l1[0] ? ": " : "", l1, l2[0] ? "; console: " : "",
				 l2);
			return EX_SYS;
		}
	}
	last_line(l->in->console, l2, sizeof l2);
	if (h->guest_error[0])
		snprintf(msg, msz, "the guest agent reported: %s", h->guest_error);
	else if (r == -3 || l->conn->fd < 0)
		snprintf(msg, msz, "the guest agent did not answer within %lld ms%s%s", within,
			 l2[0] ? "; console: " : "", l2);
	else
		snprintf(msg, msz, "agent handshake failed: %s", l->conn->err);
	conn_close(l->conn);
	return !h->guest_error[0] && (r == -3 || l->conn->fd < 0) ? EX_TIMEOUT : EX_SYS;
}

/* Resume this VM from the checked snapshot sn: the cold command line with
 * RAM as a private mapping of the snapshot's memory file (QEMU's fd 3,
 * from the supervisor) and `-incoming defer`; then over QMP
 * x-ignore-shared, the state file passed by getfd, migrate-incoming,
 * wait for "paused", cont; then the usual HELLO (hostname, clock, a fresh
 * RNG seed) to the agent.  0 with l->h filled and the supervisor waiting for
 * 'r', or an exit code with msg and nothing left running. */
int launch_resume(struct launch *l, const struct qemu_vm *vm, struct snap *sn, int64_t deadline,
		  char *msg, size_t msz)
{
	const struct inst *in = l->in;
	struct qmp *qm = malloc(sizeof *qm); /* 64 KiB of buffer */
	char l1[256], qerr[600];
	struct qemu_argv q;
	json_t *ret;
	int r;

	if (!qm) {
		snprintf(msg, msz, "out of memory");
		return EX_SYS;
	}
	qm->fd = -1;
	{
		/* share=off: a private copy-on-write mapping of the checked
		 * memory file, which the supervisor hands QEMU as its fd 3 (and
		 * QEMU opens read-only: qemu_clone_env). */
		struct qemu_cfg qc = qemu_cfg_at(vm, in);

		qc.memfile = QEMU_CLONE_MEM;
		qc.incoming = 1;
		if (qemu_argv(&q, &qc) < 0) {
			/* the store's paths, the host's doing: the snapshot
			 * is kept, as when the supervisor fails to start */
			snprintf(msg, msz, "the VM's paths are too long for QEMU's command line "
					   "(its disk %.512s...): no QEMU started",
				 in->disk);
			close(sn->memfd);
			sn->memfd = -1;
			l->start_failed = 1;
			r = EX_SYS;
			goto bad;
		}
	}
	if (inst_fresh(in) < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", in->bulk, strerror(errno));
		close(sn->memfd);
		sn->memfd = -1;
		l->start_failed = 1;
		r = EX_SYS;
		goto bad;
	}
	r = launch_start(l, q.av, sn->memfd, msg, msz);
	close(sn->memfd);
	sn->memfd = -1;
	if (r < 0) {
		/* the supervisor's own setup, not the snapshot */
		l->start_failed = 1;
		r = EX_SYS;
		goto bad;
	}
	for (;;) {
		int64_t slice = mono_ms() + 100;

		r = qmp_open(qm, in->qmp, slice < deadline ? slice : deadline);
		if (r == 0 || r != -3 || launch_gone(l) || mono_ms() >= deadline)
			break;
	}
	if (r < 0)
		goto qbad;
	if (qmp_call(qm, "migrate-set-capabilities",
		     json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			       "state", 1),
		     -1, NULL, deadline) < 0 ||
	    qmp_call(qm, "getfd", json_pack("{s:s}", "fdname", WARM_STATE_FD), sn->statefd, NULL,
		     deadline) < 0 ||
	    qmp_call(qm, "migrate-incoming", json_pack("{s:s}", "uri", "fd:" WARM_STATE_FD), -1, NULL,
		     deadline) < 0)
		goto qbad;
	for (;;) {
		const char *s;

		if (qmp_call(qm, "query-status", NULL, -1, &ret, deadline) < 0)
			goto qbad;
		s = json_string_value(json_object_get(ret, "status"));
		if (s && !strcmp(s, "paused")) {
			json_decref(ret);
			break;
		}
		if (!s || strcmp(s, "inmigrate")) {
			snprintf(qm->err, sizeof qm->err, "unexpected status %s after the state was loaded",
				 s ? s : "(none)");
			json_decref(ret);
			goto qbad;
		}
		json_decref(ret);
		usleep(2000);
	}
	if (qmp_call(qm, "cont", NULL, -1, NULL, deadline) < 0)
		goto qbad;
	qmp_close(qm);
	close(sn->statefd);
	sn->statefd = -1;
	if ((r = launch_handshake(l, deadline, WARM_RESUME_MAX_MS, msg, msz)) != 0)
		goto bad2;
	if (strcmp(l->h.root, "ro")) {
		snprintf(msg, msz, "the resumed agent reports its root as %s, not ro", l->h.root);
		r = EX_SYS;
		goto bad2;
	}
	free(qm);
	return 0;
qbad:
	snprintf(qerr, sizeof qerr, "%s", qm->err);
	qmp_close(qm);
	launch_abandon(l); /* QEMU is gone after this: its log is complete */
	last_line(in->qlog, l1, sizeof l1);
	snprintf(msg, msz, "%s%s%s", qerr, l1[0] ? "; qemu: " : "", l1);
	r = strstr(qerr, "timed out") ? EX_TIMEOUT : EX_SYS;
	goto bad;
bad2:
	launch_abandon(l);
bad:
	if (sn->statefd >= 0)
		close(sn->statefd);
	sn->statefd = -1;
	free(qm);
	return r ? r : EX_SYS;
}

int launch_memro_ok(char *why, size_t wsz)
{
	char sup[PATH_MAX], real[PATH_MAX], so[PATH_MAX];

	/* the supervisor looks beside its /proc/self/exe: so do we */
	proc_sibling(sup, sizeof sup, "isopod-supervise", "ISOPOD_SUPERVISE");
	if (!realpath(sup, real)) {
		snprintf(why, wsz, "the supervisor %.512s: %s", sup, strerror(errno));
		return -1;
	}
	*strrchr(real, '/') = '\0';
	if (pathn(so, sizeof so, "%s/%s", real, QEMU_MEMRO_SO) < 0) {
		snprintf(why, wsz, "%s beside %.512s: path too long", QEMU_MEMRO_SO, real);
		return -1;
	}
	return qemu_memro_ok(so, why, wsz);
}

/* Stop what launch_start() started, before the boot was confirmed: EOF on ctl
 * without 'r' makes the supervisor kill QEMU, and it reaps QEMU before it
 * exits itself.  The supervisor is our child (not reaped), so signalling
 * it by pid is safe. */
void launch_abandon(struct launch *l)
{
	if (l->ctlfd >= 0) {
		close(l->ctlfd);
		l->ctlfd = -1;
	}
	if (l->sup > 0) {
		struct pollfd p = { .fd = l->supfd, .events = POLLIN };
		int st;

		if (l->supfd < 0 || poll(&p, 1, 3000) <= 0) {
			kill(l->sup, SIGTERM);
			p.revents = 0;
			if (l->supfd < 0 || poll(&p, 1, 2000) <= 0)
				kill(l->sup, SIGKILL);
		}
		while (waitpid(l->sup, &st, 0) < 0 && errno == EINTR)
			;
		l->sup = -1;
	}
	if (l->supfd >= 0) {
		close(l->supfd);
		l->supfd = -1;
	}
}

int launch_confirm(struct launch *l)
{
	if (write(l->ctlfd, "r", 1) != 1) /* the supervisor is gone: QEMU is too */
		return -1;
	close(l->ctlfd);
	l->ctlfd = -1;
	return 0;
}
