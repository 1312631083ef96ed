/* port.c - the virtio port to the host: finding and opening it, reading
 * (hang-ups, stale frames of a vanished host, resynchronising on a new
 * host's HELLO), dispatching each frame, and writing whole frames back. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* connection                                                          */

/* The host is gone (or started over): nothing of its session survives. */
void conn_reset(struct agent *a, const char *why)
{
	if (a->port.active)
		logm("host %s: connection state reset", why);
	op_abort(a);
	a->out.off = a->out.len = a->out.split = 0;
	a->port.rlen = a->port.roff = 0;
	memset(a->credit_due, 0, sizeof a->credit_due);
	a->port.active = a->port.poisoned = a->port.helloed = 0;
	a->port.eof_since = 0;
}
/* p's first n bytes to the port, as far as the driver takes them now:
 * the bytes written, 0 when it takes none yet (it says EAGAIN, or POLLOUT,
 * once it can), -1 with errno when the port is broken.  The one write to
 * the port, for port_flush and out_frame_now. */
ssize_t port_write(struct agent *a, const uint8_t *p, size_t n)
{
	ssize_t w;

	do
		w = write(a->port.fd, p, n);
	while (w < 0 && errno == EINTR);
	if (w < 0 && errno == EAGAIN)
		return 0;
	return w;
}

void port_flush(struct agent *a)
{
	size_t want;
	ssize_t n;

	while (a->port.fd >= 0 && (want = out_next_write(a)) > 0) {
		n = port_write(a, a->out.p + a->out.off, want);
		if (n > 0) {
			a->out.off += (size_t)n;
			a->out.split = want - (size_t)n;
			continue;
		}
		if (n == 0)
			return;
		logm("write %s: %s", a->port.dev, strerror(errno));
		conn_reset(a, "unwritable");
		a->port.retry_at = mono_ms() + 10;
		return;
	}
}

/* A short sysfs file into buf, its newline cut (empty when it is).  0, or
 * -1.  The port's name here, the bulk lane's serial and size (bulk.c). */
int sys_read(const char *path, char *buf, size_t sz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sz - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* Each name in directory dir (dot-entries skipped) to fn, until fn
 * returns 0: 0 then, -1 when none did or dir is unreadable.  getdents64
 * into the stack rather than opendir: opendir's calloc was the agent's
 * first allocation, and musl's first malloc costs a cold boot's guest
 * 4-12 ms under TCG (doc/SPEED.md "Goal 1, the port's lookup"); the
 * agent allocates nothing else on a run's path. */
int sys_each(const char *dir, int (*fn)(struct agent *, const char *), struct agent *a)
{
	/* linux_dirent64; its name is NUL-terminated within reclen */
	struct ent {
		uint64_t ino;
		int64_t off;
		unsigned short reclen;
		unsigned char type;
		char name[];
	};
	_Alignas(8) char buf[4096];
	const size_t hdr = offsetof(struct ent, name);
	const struct ent *e;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = -1;
	long n;
	size_t off;

	if (fd < 0)
		return -1;
	while (r < 0 && (n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
		for (off = 0; r < 0 && off + hdr < (size_t)n; off += e->reclen) {
			e = (const struct ent *)(buf + off);
			if (e->reclen <= hdr || e->reclen > (size_t)n - off)
				break; /* not the kernel's layout: the rest of this batch is skipped */
			if (e->name[0] != '.' && memchr(e->name, 0, e->reclen - hdr))
				r = fn(a, e->name);
		}
	close(fd);
	return r;
}

/* The port, if entry's name file says isopod.agent: opened.  0 when open. */
static int port_open_entry(struct agent *a, const char *entry)
{
	char path[600], name[64];
	int fl;

	snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", entry);
	if (sys_read(path, name, sizeof name) < 0 || strcmp(name, PORT_NAME) != 0)
		return -1;
	snprintf(a->port.dev, sizeof a->port.dev, "/dev/%s", entry);
	a->port.fd = open(a->port.dev, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (a->port.fd < 0)
		return -1; /* the node may lag the sysfs entry */
	/* A read says "no host" at once until one connects, and poll says
	 * so too: the driver's SIGIO on the host's connection
	 * (virtio_console's PORT_OPEN) is what tells us one came, so that a
	 * guest without a host sleeps rather than looks every 10 ms -- under
	 * TCG each look woke QEMU's threads several times (doc/SPEED.md
	 * "Goal 6, third round"). */
	fl = fcntl(a->port.fd, F_GETFL);
	a->port.async = fl >= 0 && fcntl(a->port.fd, F_SETOWN, getpid()) == 0 &&
			fcntl(a->port.fd, F_SETFL, fl | O_ASYNC) == 0;
	if (!a->port.async)
		logm("O_ASYNC on %s: %s: looking for a host every %d ms", a->port.dev,
		     strerror(errno), NOHOST_POLL_MS);
	logm("serving on %s", a->port.dev);
	return 0;
}

/* Open the port under /sys/class/virtio-ports whose name is isopod.agent.
 * 0 when open. */
int port_try_open(struct agent *a)
{
	return sys_each("/sys/class/virtio-ports", port_open_entry, a);
}
void op_abort(struct agent *a)
{
	switch (a->op) {
	case OP_EXEC:
		exec_abort(a);
		break;
	case OP_PUT:
		put_fail(a);
		break;
	case OP_GET:
		if (a->get.tree)
			ts_walk_close(&a->get.walk);
		else
			close_fd(&a->get.fd);
		cold_release(a);
		break;
	case OP_NONE:
		break;
	}
	a->op = OP_NONE;
}
/* Write out what is queued, waiting up to ms for the host to take it. */
void flush_wait(struct agent *a, int ms)
{
	int64_t end = mono_ms() + ms, now;
	struct pollfd pf;

	while (a->port.fd >= 0 && out_pending(a) && (now = mono_ms()) < end) {
		port_flush(a);
		if (!out_pending(a) || a->port.fd < 0)
			return;
		pf.fd = a->port.fd;
		pf.events = POLLOUT;
		if (poll(&pf, 1, (int)(end - now)) > 0 && (pf.revents & POLLHUP))
			return;
	}
}

/* Wait up to ms for the host to hang up (read returns 0). */
void hangup_wait(struct agent *a, int ms)
{
	int64_t end = mono_ms() + ms, now;
	struct pollfd pf;
	uint8_t junk[4096];
	ssize_t n;

	while (a->port.fd >= 0 && (now = mono_ms()) < end) {
		pf.fd = a->port.fd;
		pf.events = POLLIN;
		if (poll(&pf, 1, (int)(end - now)) <= 0)
			continue;
		n = read(a->port.fd, junk, sizeof junk);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return;
	}
}

/* ------------------------------------------------------------------ */
/* frames from the host                                                */

static int need_hello(struct agent *a)
{
	if (a->port.helloed)
		return 0;
	send_error(a, "bad_request", "HELLO (with protocol version %u) first", ISOPOD_PROTO_VERSION);
	return -1;
}

/* New operations: refused while one runs.  A FILE_PUT that failed and
 * whose host gave up streaming it does not count as running. */
static int need_idle(struct agent *a)
{
	if (a->op == OP_PUT && a->put.failed)
		a->op = OP_NONE;
	if (a->op == OP_NONE)
		return 0;
	send_error(a, "busy", "another operation is running");
	return -1;
}

void on_frame(struct agent *a, const struct frame *fr)
{
	switch (fr->type) {
	case F_HELLO:
		on_hello(a, fr);
		return;
	case F_PING:
		out_frame(a, F_PONG, STREAM_CTL, NULL, 0);
		return;
	case F_EXEC:
	case F_FILE_PUT:
	case F_FILE_GET:
		if (need_hello(a) < 0 || need_idle(a) < 0)
			return;
		if (fr->type == F_EXEC)
			on_exec(a, fr);
		else if (fr->type == F_FILE_PUT)
			on_file_put(a, fr);
		else
			on_file_get(a, fr);
		return;
	case F_SHUTDOWN:
		on_shutdown(a);
		return;
	case F_BULK:
		on_bulk(a, fr);
		return;
	case F_DATA:
	case F_EOF:
		/* Stray stdin / file data is dropped: it races with the end of
		 * the operation it belonged to. */
		if (fr->stream == STREAM_STDIN) {
			if (fr->type == F_DATA)
				on_stdin_data(a, fr);
			else if (a->op == OP_EXEC)
				a->ex.stdin_eof = 1;
			return;
		}
		if (fr->stream == STREAM_FILE) {
			if (fr->type == F_DATA)
				on_file_data(a, fr);
			else
				on_file_eof(a);
			return;
		}
		break;
	default:
		break;
	}
	send_error(a, "bad_request", "unexpected frame type %u on stream %u", fr->type, fr->stream);
}


/* After malformed input, look for a new host's HELLO in what follows.
 * The agent cannot always see a hang-up: when a host closes and the next
 * one connects before the agent runs, the port never reads 0.  Returns 1
 * with roff at the HELLO, 0 with roff past what can never start one. */
static int port_resync(struct agent *a)
{
	size_t i, keep = SIZE_MAX, used;
	struct frame fr;
	int r;

	for (i = a->port.roff; i + FRAME_HDR <= a->port.rlen; i++) {
		if (a->port.rbuf[i + 4] != F_HELLO)
			continue;
		r = frame_parse(a->port.rbuf + i, a->port.rlen - i, &fr, &used);
		if (r == 0 && keep == SIZE_MAX)
			keep = i; /* may be one once the rest arrives */
		if (r == 1 && hello_plausible(&fr)) {
			logm("resynchronised on a HELLO");
			a->port.roff = i;
			a->port.poisoned = 0;
			return 1;
		}
	}
	a->port.roff = keep != SIZE_MAX ? keep : i;
	return 0;
}

void port_parse(struct agent *a)
{
	struct frame fr;
	size_t used;
	int r;

	while (a->port.roff < a->port.rlen) {
		if (a->port.poisoned && !port_resync(a))
			break;
		r = frame_parse(a->port.rbuf + a->port.roff, a->port.rlen - a->port.roff, &fr, &used);
		if (r == 0)
			break;
		if (r < 0) {
			send_error(a, "protocol", "malformed frame");
			a->port.poisoned = 1;
			continue; /* a new host's HELLO may follow */
		}
		a->port.roff += used;
		on_frame(a, &fr); /* may reset the buffer; fr stays readable */
	}
	if (a->port.roff) {
		memmove(a->port.rbuf, a->port.rbuf + a->port.roff, a->port.rlen - a->port.roff);
		a->port.rlen -= a->port.roff;
		a->port.roff = 0;
	}
}

/* Each read() returns one virtio buffer, and QEMU starts a new buffer for
 * each chunk (≤ 4 KiB) it reads from its socket, so a new host's first
 * bytes begin a read; and since a host sends HELLO alone and waits for the
 * answer, that read holds exactly the HELLO.  If a partial frame of a
 * vanished host is pending and a read is exactly a whole HELLO, the partial
 * frame is dropped (hosts never send HELLO twice on one connection; stdin
 * or file data would have to hold a whole HELLO frame ending exactly at a
 * read boundary to look like one). */
static void port_cut_stale(struct agent *a, size_t n)
{
	struct frame fr;
	size_t used;

	if (a->port.rlen == 0 ||
	    frame_parse(a->port.rbuf + a->port.rlen, n, &fr, &used) != 1 || used != n ||
	    !hello_plausible(&fr))
		return;
	logm("a new host's HELLO follows %zu bytes of an unfinished frame: dropped them",
	     a->port.rlen);
	memmove(a->port.rbuf, a->port.rbuf + a->port.rlen, n);
	a->port.rlen = a->port.roff = 0;
	a->port.poisoned = 0;
}

void port_read(struct agent *a)
{
	size_t budget = READ_BUDGET;
	ssize_t n;

	while (a->port.fd >= 0 && budget) {
		n = read(a->port.fd, a->port.rbuf + a->port.rlen, sizeof a->port.rbuf - a->port.rlen);
		if (n != 0)
			a->port.eof_since = 0; /* a host is there after all */
		if (n > 0) {
			a->port.active = 1;
			budget = (size_t)n < budget ? budget - (size_t)n : 0;
			port_cut_stale(a, (size_t)n);
			a->port.rlen += (size_t)n;
			port_parse(a);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		/* 0: no host (it hung up, or none came yet); the port keeps
		 * saying so at once until one connects, so look again later
		 * instead of spinning.  A 0 right after a host's data may be
		 * spurious: the guest can take in a new connection's bytes
		 * before it has processed the port's host-connected event (seen
		 * on freshly resumed warm clones), and reads 0 until it has.
		 * Dropping the session then would drop the answer the host
		 * waits for: it is a hang-up only when it lasts. */
		if (n < 0) {
			logm("read %s: %s", a->port.dev, strerror(errno));
		} else if (a->port.active) {
			int64_t now = mono_ms();

			if (!a->port.eof_since)
				a->port.eof_since = now ? now : 1;
			if (now - a->port.eof_since < HANGUP_CONFIRM_MS) {
				a->port.retry_at = now + 10;
				return;
			}
		}
		conn_reset(a, "hung up");
		a->port.retry_at = mono_ms() + (a->port.async ? NOHOST_WAIT_MS : NOHOST_POLL_MS);
		return;
	}
}
