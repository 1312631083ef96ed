/* main.c - the agent's one poll() loop and main().  See agent.h for what
 * the agent is and where the rest of it lives. */
#include "agent.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

/* fds start closed.  The rest of *a is zero: the caller's storage is
 * static (main) or zeroed (harnesses). */
void agent_init(struct agent *a)
{
	a->port.fd = -1;
	a->ex.in_fd = a->ex.out_fd = a->ex.err_fd = a->ex.st_fd = -1;
	a->put.fd = -1;
	a->get.fd = -1;
	a->sigfd = a->tfd = -1;
	a->bulk.fd = -1;
	a->out.p = a->out_first;
	a->out.cap = sizeof a->out_first;
}

/* ------------------------------------------------------------------ */
/* main loop                                                           */

void signals_setup(struct agent *a)
{
	/* SIGIO: the port's, when a host connects (port_try_open) */
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT,
				    SIGUSR1, SIGUSR2, SIGPWR, SIGIO };
	sigset_t set;
	size_t i;

	/* EPIPE from a closed stdin pipe instead of a signal. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	a->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sigfd < 0)
		logm("signalfd: %s: reaping by polling", strerror(errno));
	a->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (a->tfd < 0)
		logm("timerfd_create: %s: command timeouts disabled", strerror(errno));
}

static void on_signals(struct agent *a)
{
	struct signalfd_siginfo si;

	while (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si)
		if (si.ssi_signo == SIGIO)
			a->port.retry_at = 0; /* a host came (or went): look now */
		else if (si.ssi_signo != SIGCHLD)
			logm("ignoring signal %u", si.ssi_signo);
	reap(a);
}

static int ms_until(int64_t t, int64_t now, int cur)
{
	int64_t d = t > now ? t - now : 0;

	if (d > INT_MAX)
		d = INT_MAX;
	return cur < 0 || d < cur ? (int)d : cur;
}

enum { P_PORT, P_SIG, P_TIMER, P_OUT, P_ERR, P_IN, P_ST, P_N };

void loop_once(struct agent *a)
{
	struct pollfd pf[P_N];
	int64_t now = mono_ms();
	int timeout = -1, i;

	for (i = 0; i < P_N; i++) {
		pf[i].fd = -1;
		pf[i].events = POLLIN;
		pf[i].revents = 0;
	}
	if (a->port.fd < 0 && now >= a->port.retry_at && port_try_open(a) < 0)
		a->port.retry_at = now + 1000;
	if (a->port.fd < 0 || a->port.retry_at > now) {
		timeout = ms_until(a->port.retry_at, now, timeout);
	} else {
		pf[P_PORT].fd = a->port.fd;
		pf[P_PORT].events = (out_pending(a) < OUT_STOP_INPUT ? POLLIN : 0) |
				    (out_pending(a) ? POLLOUT : 0);
	}
	pf[P_SIG].fd = a->sigfd;
	if (a->sigfd < 0)
		timeout = ms_until(now + 100, now, timeout);
	pf[P_TIMER].fd = a->tfd;
	if (a->op == OP_EXEC) {
		if (out_pending(a) <= OUT_HIGH) {
			pf[P_OUT].fd = a->ex.out_fd;
			pf[P_ERR].fd = a->ex.err_fd;
		}
		if (a->ex.rlen || a->ex.bq_len) {
			pf[P_IN].fd = a->ex.in_fd;
			pf[P_IN].events = POLLOUT;
		}
		pf[P_ST].fd = a->ex.st_fd;
		if (a->ex.reaped)
			timeout = ms_until(a->ex.drain_until, now, timeout);
	}
	if (a->op == OP_GET && out_pending(a) <= OUT_HIGH)
		timeout = 0;

	if (poll(pf, P_N, timeout) < 0 && errno != EINTR) {
		logm("poll: %s", strerror(errno));
		sleep_ms(10);
		return;
	}
	if (pf[P_SIG].revents)
		on_signals(a);
	else if (a->sigfd < 0)
		reap(a);
	if (pf[P_TIMER].revents)
		exec_on_timer(a);
	if (pf[P_ST].revents)
		exec_read_status(a);
	if (pf[P_OUT].revents)
		pipe_pump(a, &a->ex.out_fd, STREAM_STDOUT);
	if (pf[P_ERR].revents)
		pipe_pump(a, &a->ex.err_fd, STREAM_STDERR);
	if (pf[P_PORT].revents & (POLLIN | POLLHUP | POLLERR))
		port_read(a);
	if (a->op == OP_EXEC)
		stdin_pump(a);
	if (a->op == OP_GET)
		get_pump(a);
	exec_maybe_finish(a, mono_ms());
	credit_flush(a);
	port_flush(a);
	/* Once HELLO_ACK is on its way: the host is then between its boot
	 * and its first command, and the remount overlaps that. */
	if (a->root.rw_soon && !out_pending(a))
		root_rw_soon(a);
}

#ifndef ISOPOD_AGENT_NO_MAIN
int main(void)
{
	/* All the agent's state (~1.5 MiB, mostly buffers; the stdin ring
	 * is 1 MiB): in .bss, so there is no allocation that could fail
	 * before the loop runs. */
	static struct agent agent;
	struct agent *a = &agent;
	int64_t end;

	agent_init(a);
	boot(a);
	signals_setup(a);
	/* The port shows up with the virtio devices; give it a while before
	 * complaining (the loop keeps looking every second after that). */
	for (end = mono_ms() + WAIT_DEV_MS; port_try_open(a) < 0 && mono_ms() < end;)
		sleep_ms(10);
	if (a->port.fd < 0)
		logm("no virtio port named %s yet: still looking", PORT_NAME);
	/* The lane's lookup (~2 ms under TCG) while the host's first HELLO
	 * is still on its way through QEMU (it reaches us ~2-3 ms after the
	 * port opens on a cold boot): that HELLO's own lookup finds it done. */
	bulk_find(a);
	for (;;)
		loop_once(a);
}
#endif
