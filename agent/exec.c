/* exec.c - EXEC: spawning the command (and its setup between fork and
 * exec, reported back as stage + errno), feeding its stdin under the credit
 * window, its output into DATA frames, the timeout, reaping, and EXIT. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* EXEC: the child (between fork and exec)                             */

static const char *env_get(char *const envp[], const char *key)
{
	size_t klen = strlen(key);

	for (; *envp; envp++)
		if (strncmp(*envp, key, klen) == 0 && (*envp)[klen] == '=')
			return *envp + klen + 1;
	return NULL;
}

/* execvp with the PATH of the command's environment (musl's execvpe
 * searches the caller's PATH instead).  No sh fallback on ENOEXEC: that is
 * reported as not executable.  Returns the errno to report. */
static int exec_search(const char *file, char *const argv[], char *const envp[])
{
	const char *path, *p, *colon;
	char buf[PATH_MAX];
	size_t dlen, flen = strlen(file);
	int eacces = 0;

	if (!*file)
		return ENOENT;
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return errno;
	}
	path = env_get(envp, "PATH");
	if (!path)
		path = DEFAULT_PATH;
	for (p = path;; p = colon + 1) {
		colon = strchr(p, ':');
		if (!colon)
			colon = p + strlen(p);
		dlen = (size_t)(colon - p);
		if (dlen + 1 + flen < sizeof buf) {
			/* An empty entry means the current directory. */
			if (dlen)
				memcpy(buf, p, dlen);
			else
				buf[dlen++] = '.';
			buf[dlen] = '/';
			memcpy(buf + dlen + 1, file, flen + 1);
			execve(buf, argv, envp);
			switch (errno) {
			case EACCES:
				eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ENAMETOOLONG:
			case ELOOP:
			case ESTALE:
			case ENODEV:
				break;
			default:
				return errno; /* found it but cannot run it */
			}
		}
		if (!*colon)
			break;
	}
	return eacces ? EACCES : ENOENT;
}

static void child_fail(int st, int stage, int err, int code) __attribute__((noreturn));
static void child_fail(int st, int stage, int err, int code)
{
	uint8_t b[1 + sizeof(int)];

	b[0] = (uint8_t)stage;
	memcpy(b + 1, &err, sizeof err);
	if (write(st, b, sizeof b) < 0)
		_exit(code);
	_exit(code);
}

/* Keep fds 0..2 free for dup2: move a low fd up (CLOEXEC stays). */
static int fd_high(int fd)
{
	int n;

	if (fd > 2)
		return fd;
	n = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return n < 0 ? fd : n;
}

/* Close every fd from 3 up but keep. */
static void close_others(int keep)
{
	int fd;

#ifdef SYS_close_range
	if ((keep <= 3 || syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) == 0) &&
	    syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0)
		return;
#endif
	for (fd = 3; fd < 4096; fd++)
		if (fd != keep)
			close(fd);
}

static void child(const struct exec_req *sp, int in, int o, int e, int st) __attribute__((noreturn));
static void child(const struct exec_req *sp, int in, int o, int e, int st)
{
	sigset_t none;
	int sig;

	/* The agent blocks signals (signalfd) and ignores SIGPIPE; both
	 * would be inherited across exec. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	/* Its own session and process group: the whole group can be killed
	 * at exit and on timeout. */
	setsid();
	st = fd_high(st);
	if (in < 0)
		in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		child_fail(st, STAGE_SETUP, errno, 125);
	in = fd_high(in);
	o = fd_high(o);
	e = fd_high(e);
	if (dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
		child_fail(st, STAGE_SETUP, errno, 125);
	close_others(st);
	if (chdir(sp->cwd) < 0)
		child_fail(st, STAGE_CWD, errno, 125);
	sig = exec_search(sp->argv[0], sp->argv, sp->envp);
	child_fail(st, STAGE_EXEC, sig, sig == ENOENT || sig == ENOTDIR ? 127 : 126);
}

/* ------------------------------------------------------------------ */
/* EXEC: the parent                                                    */

static void timer_arm(struct agent *a, uint64_t ms)
{
	struct itimerspec it;

	memset(&it, 0, sizeof it);
	it.it_value.tv_sec = (time_t)(ms / 1000);
	it.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	if (a->tfd >= 0 && timerfd_settime(a->tfd, 0, &it, NULL) < 0)
		logm("timerfd_settime: %s", strerror(errno));
}

static void exec_clear(struct agent *a)
{
	close_fd(&a->ex.in_fd);
	close_fd(&a->ex.out_fd);
	close_fd(&a->ex.err_fd);
	close_fd(&a->ex.st_fd);
	a->ex.bq_len = 0; /* the session is over: its host lends no more */
	timer_arm(a, 0);
	a->ex.pid = 0;
	a->op = OP_NONE;
}

void exec_abort(struct agent *a)
{
	/* Reaped later by the SIGCHLD loop, which ignores unknown pids.
	 * Never kill(0) or kill(-0): that is our own process group. */
	if (a->ex.pid > 0) {
		kill(-a->ex.pid, SIGKILL);
		if (!a->ex.reaped)
			kill(a->ex.pid, SIGKILL);
	}
	exec_clear(a);
}

static int spawn(struct agent *a, const struct exec_req *sp)
{
	int in[2] = { -1, -1 }, o[2] = { -1, -1 }, e[2] = { -1, -1 }, st[2] = { -1, -1 };
	int i, err;
	pid_t pid;

	if ((sp->with_stdin && pipe2(in, O_CLOEXEC) < 0) || pipe2(o, O_CLOEXEC) < 0 ||
	    pipe2(e, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0) {
		err = errno;
		goto fail;
	}
	/* Best effort: the default 64 KiB works too, only slower. */
	if (in[1] >= 0)
		fcntl(in[1], F_SETPIPE_SZ, PIPE_SZ);
	fcntl(o[0], F_SETPIPE_SZ, PIPE_SZ);
	fcntl(e[0], F_SETPIPE_SZ, PIPE_SZ);
	pid = fork();
	if (pid < 0) {
		err = errno;
		goto fail;
	}
	if (pid == 0)
		child(sp, in[0], o[1], e[1], st[1]);
	close(o[1]);
	close(e[1]);
	close(st[1]);
	if (in[0] >= 0)
		close(in[0]);
	memset(&a->ex, 0, sizeof a->ex);
	a->ex.pid = pid;
	a->ex.in_fd = in[1];
	a->ex.out_fd = o[0];
	a->ex.err_fd = e[0];
	a->ex.st_fd = st[0];
	a->ex.with_stdin = sp->with_stdin;
	snprintf(a->ex.argv0, sizeof a->ex.argv0, "%s", sp->argv[0]);
	snprintf(a->ex.cwd, sizeof a->ex.cwd, "%s", sp->cwd);
	if (a->ex.in_fd >= 0)
		set_nonblock(a->ex.in_fd);
	set_nonblock(a->ex.out_fd);
	set_nonblock(a->ex.err_fd);
	set_nonblock(a->ex.st_fd);
	a->op = OP_EXEC;
	/* the rest of the window (agent.h), once the command can take stdin */
	if (sp->with_stdin)
		a->credit_due[STREAM_STDIN] += AGENT_WINDOW - FRAME_INITIAL_CREDIT;
	timer_arm(a, sp->timeout_ms);
	return 0;
fail:
	for (i = 0; i < 2; i++) {
		close_fd(&in[i]);
		close_fd(&o[i]);
		close_fd(&e[i]);
		close_fd(&st[i]);
	}
	send_error(a, "io", "spawn %.200s: %s", sp->argv[0], strerror(err));
	return -1;
}

void on_exec(struct agent *a, const struct frame *fr)
{
	char err[1024];

	if (exec_parse(fr, &a->req, err, sizeof err) < 0) {
		send_error(a, "bad_request", "%s", err);
		return;
	}
	if (root_make_rw(a, err, sizeof err) < 0) {
		send_error(a, "root_unavailable", "%s", err);
		return;
	}
	spawn(a, &a->req);
}

/* The child's spawn report: 5 bytes on failure, EOF once exec succeeded. */
void exec_read_status(struct agent *a)
{
	uint8_t b[1 + sizeof(int)];
	ssize_t n;

	if (a->ex.st_fd < 0)
		return;
	n = read(a->ex.st_fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n == (ssize_t)sizeof b) {
		a->ex.st_stage = b[0];
		memcpy(&a->ex.st_errno, b + 1, sizeof a->ex.st_errno);
	}
	close_fd(&a->ex.st_fd);
}

static void pipe_close(struct agent *a, int *fd, uint32_t stream)
{
	if (*fd < 0)
		return;
	close_fd(fd);
	out_frame(a, F_EOF, stream, NULL, 0);
}

/* Command output into DATA frames, until EAGAIN, EOF or backpressure. */
void pipe_pump(struct agent *a, int *fd, uint32_t stream)
{
	ssize_t n;

	while (*fd >= 0 && out_pending(a) <= OUT_HIGH) {
		n = out_read_data(a, *fd, stream, OUT_DATA_CHUNK);
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n == -2)
			return; /* out of memory: try again next turn */
		if (n < 0)
			logm("read stream %u: %s", stream, strerror(errno));
		pipe_close(a, fd, stream);
	}
}

/* Stdin data the command will never read is still credited, so the host
 * never stalls on a window that cannot open. */
static void stdin_close(struct agent *a)
{
	close_fd(&a->ex.in_fd);
	if (!a->ex.ring_bulk)
		a->credit_due[STREAM_STDIN] += a->ex.rlen;
	a->ex.rlen = a->ex.rhead = 0;
	/* and bulk slots are returned unread: all before EXIT, as credit */
	for (; a->ex.bq_len; a->ex.bq_len--, a->ex.bq_head = (a->ex.bq_head + 1) % BULK_SLOTS_MAX)
		bulk_done(a, STREAM_STDIN, a->ex.bq[a->ex.bq_head]);
}

/* What the command's stdin takes of p[0..len), each byte credited, in
 * *done: 0 when all of it went, 1 at EAGAIN, -1 when the pipe is gone
 * (EPIPE: the command closed its stdin; another error is logged).  The
 * caller closes stdin then, once its own count is right: stdin_close
 * credits what is still queued. */
static int stdin_write(struct agent *a, const uint8_t *p, size_t len, size_t *done, int credit)
{
	ssize_t n;

	for (*done = 0; *done < len;) {
		n = write(a->ex.in_fd, p + *done, len - *done);
		if (n > 0) {
			*done += (size_t)n;
			/* the port's bytes only: a slot's come back by BULK_DONE */
			if (credit)
				a->credit_due[STREAM_STDIN] += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 1;
		if (n < 0 && errno != EPIPE)
			logm("write to stdin: %s", strerror(errno));
		return -1;
	}
	return 0;
}

void stdin_pump(struct agent *a)
{
	size_t chunk, done;
	int r;

	/* The ring empty: the next bulk slot into it, and the slot back to
	 * the host at once (its bytes are ours now). */
	while (a->ex.in_fd >= 0 && (a->ex.rlen || a->ex.bq_len)) {
		if (!a->ex.rlen) {
			uint32_t slot = a->ex.bq[a->ex.bq_head], len = a->ex.bq_n[a->ex.bq_head];

			a->ex.bq_head = (a->ex.bq_head + 1) % BULK_SLOTS_MAX;
			a->ex.bq_len--;
			if (bulk_read(a, slot, len, a->stdin_ring) < 0) {
				bulk_done(a, STREAM_STDIN, slot);
				stdin_close(a);
				return;
			}
			bulk_done(a, STREAM_STDIN, slot);
			a->ex.rhead = 0;
			a->ex.rlen = len;
			a->ex.ring_bulk = 1;
		}
		chunk = sizeof a->stdin_ring - a->ex.rhead;
		if (chunk > a->ex.rlen)
			chunk = a->ex.rlen;
		r = stdin_write(a, a->stdin_ring + a->ex.rhead, chunk, &done, !a->ex.ring_bulk);
		a->ex.rhead = (a->ex.rhead + done) % sizeof a->stdin_ring;
		a->ex.rlen -= done;
		if (r < 0)
			stdin_close(a);
		if (r)
			return;
	}
	if (a->ex.in_fd >= 0 && a->ex.stdin_eof)
		close_fd(&a->ex.in_fd);
}

void on_stdin_data(struct agent *a, const struct frame *fr)
{
	const uint8_t *p = fr->payload;
	size_t len = fr->len, tail, first, done;

	if (a->op != OP_EXEC || !a->ex.with_stdin)
		return; /* left over from a command that already exited */
	if (a->ex.in_fd < 0 || a->ex.stdin_eof) {
		a->credit_due[STREAM_STDIN] += fr->len;
		return;
	}
	if (fr->len > sizeof a->stdin_ring - a->ex.rlen || (a->ex.rlen && a->ex.ring_bulk)) {
		send_error(a, "protocol", "%s", a->ex.rlen && a->ex.ring_bulk ?
			   "stdin DATA while a bulk slot's bytes are being written" :
			   "stdin beyond the credit window");
		a->port.poisoned = 1;
		return;
	}
	a->ex.ring_bulk = 0; /* the ring is empty or holds the port's bytes */
	/* Nothing queued before it: straight into the pipe, and only what
	 * the pipe does not take into the ring.  Under TCG each copy of the
	 * bytes inside the guest is emulated; the ring's was one of four. */
	if (a->ex.rlen == 0) {
		int r = stdin_write(a, p, len, &done, 1);

		p += done;
		len -= done;
		if (r < 0) {
			stdin_close(a);
			a->credit_due[STREAM_STDIN] += len;
			return;
		}
	}
	tail = (a->ex.rhead + a->ex.rlen) % sizeof a->stdin_ring;
	first = sizeof a->stdin_ring - tail;
	if (first > len)
		first = len;
	memcpy(a->stdin_ring + tail, p, first);
	memcpy(a->stdin_ring, p + first, len - first);
	a->ex.rlen += len;
}

void on_stdin_bulk(struct agent *a, uint32_t slot, uint32_t len)
{
	uint32_t tail;

	if (a->op != OP_EXEC || !a->ex.with_stdin || a->ex.in_fd < 0 || a->ex.stdin_eof) {
		/* left over, or the command no longer reads: returned unread */
		bulk_done(a, STREAM_STDIN, slot);
		return;
	}
	/* A host lends each slot once until it is returned: never more
	 * queued than there are slots, so the queue cannot overflow. */
	if (a->ex.bq_len >= a->bulk.n) {
		send_error(a, "protocol", "BULK: more slots lent than the lane has");
		a->port.poisoned = 1;
		return;
	}
	tail = (a->ex.bq_head + a->ex.bq_len) % BULK_SLOTS_MAX;
	a->ex.bq[tail] = slot;
	a->ex.bq_n[tail] = len;
	a->ex.bq_len++;
	stdin_pump(a);
}

void exec_on_timer(struct agent *a)
{
	uint64_t ticks;

	if (read(a->tfd, &ticks, sizeof ticks) < 0)
		return;
	if (a->op != OP_EXEC || a->ex.reaped)
		return;
	logm("command %.100s timed out: killing its process group", a->ex.argv0);
	a->ex.timed_out = 1;
	kill(-a->ex.pid, SIGKILL);
	kill(a->ex.pid, SIGKILL); /* in case it has not reached setsid() yet */
}

void reap(struct agent *a)
{
	int64_t now;
	pid_t pid;
	int wst;

	while ((pid = waitpid(-1, &wst, WNOHANG)) > 0) {
		if (a->op != OP_EXEC || a->ex.reaped || pid != a->ex.pid)
			continue; /* an orphan reparented to us, or an aborted command */
		a->ex.reaped = 1;
		a->ex.wstatus = wst;
		/* The rest of its process group goes with it. */
		kill(-pid, SIGKILL);
		stdin_close(a);
		now = mono_ms();
		a->ex.drain_until = now + (a->ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		a->ex.drain_cap = now + (a->ex.timed_out ? DRAIN_TIMEOUT_MAX_MS : DRAIN_MAX_MS);
	}
}

static void send_exit(struct agent *a)
{
	const char *kind = NULL;
	char msg[600] = "";
	uint8_t buf[800];
	struct tlv_w w;
	int code = 0, sig = 0, e = a->ex.st_errno;

	switch (a->ex.st_stage) {
	case STAGE_CWD:
		code = 125;
		kind = "cwd_missing";
		snprintf(msg, sizeof msg, "cwd %.400s: %s", a->ex.cwd, strerror(e));
		break;
	case STAGE_EXEC:
		if (e == ENOENT || e == ENOTDIR) {
			code = 127;
			kind = "not_found";
			if (e == ENOENT && !strchr(a->ex.argv0, '/'))
				snprintf(msg, sizeof msg, "%s: command not found", a->ex.argv0);
			else
				snprintf(msg, sizeof msg, "%s: %s", a->ex.argv0, strerror(e));
		} else {
			code = 126;
			kind = "not_executable";
			snprintf(msg, sizeof msg, "%s: %s", a->ex.argv0, strerror(e));
		}
		break;
	case STAGE_SETUP:
		code = 125;
		kind = "io";
		snprintf(msg, sizeof msg, "setting up %s: %s", a->ex.argv0, strerror(e));
		break;
	default:
		if (WIFEXITED(a->ex.wstatus)) {
			code = WEXITSTATUS(a->ex.wstatus);
		} else if (WIFSIGNALED(a->ex.wstatus)) {
			sig = WTERMSIG(a->ex.wstatus);
			code = 128 + sig;
		}
		break;
	}
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_EXIT_CODE, (uint32_t)code);
	tlv_put_u32(&w, T_SIGNAL, (uint32_t)sig);
	tlv_put_u32(&w, T_TIMED_OUT, (uint32_t)a->ex.timed_out);
	if (kind) {
		tlv_put_str(&w, T_ERROR_KIND, kind);
		tlv_put_str(&w, T_MESSAGE, msg);
	}
	out_tlv(a, F_EXIT, STREAM_CTL, &w);
}

/* EXIT goes out once the main process is reaped and its output is
 * drained: EOF on both pipes, or DRAIN_MS without EOF (a process that left
 * the group still holds them) while the host keeps up, DRAIN_MAX_MS at most. */
void exec_maybe_finish(struct agent *a, int64_t now)
{
	if (a->op != OP_EXEC || !a->ex.reaped)
		return;
	exec_read_status(a); /* the child is gone: its report (or EOF) is there */
	if (a->ex.out_fd >= 0 || a->ex.err_fd >= 0) {
		if (out_pending(a) > OUT_HIGH && now < a->ex.drain_cap)
			a->ex.drain_until = now + (a->ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		if (now < a->ex.drain_until && (!a->ex.timed_out || now < a->ex.drain_cap))
			return;
		logm("output of %.100s still open %d ms after it exited: closed",
		     a->ex.argv0, a->ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		pipe_close(a, &a->ex.out_fd, STREAM_STDOUT);
		pipe_close(a, &a->ex.err_fd, STREAM_STDERR);
	}
	/* Nothing is owed after EXIT: the host's stdin ends there, and a
	 * CREDIT behind EXIT would be read as the reply to what the host
	 * sends next (a copy-out's FILE_GET). What was consumed and not yet
	 * credited goes out before EXIT, as the host may still be waiting for
	 * it (credit_flush is also what the loop turn runs after this). */
	credit_flush(a);
	send_exit(a);
	exec_clear(a);
}
