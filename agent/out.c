/* out.c - the agent's output toward the host (one buffer of whole frames,
 * see PORT_WRITE_MAX), its diagnostics on the console, and time. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* diagnostics and time                                                */

void logm(const char *fmt, ...)
{
	char buf[1024];
	size_t len = sizeof AGENT - 1, room;
	va_list ap;
	int n;

	memcpy(buf, AGENT, len);
	room = sizeof buf - len - 1; /* keep one byte for the newline */
	va_start(ap, fmt);
	n = vsnprintf(buf + len, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	len += (size_t)n < room ? (size_t)n : room - 1;
	buf[len++] = '\n';
	/* The console is diagnostics only; nothing to do if it fails. */
	if (write(2, buf, len) < 0)
		return;
}

int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int clear_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* O_DIRECT on or off for fd's file: -1 (EINVAL) where the file system
 * has no direct I/O (tmpfs). */
int set_direct(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT);
}

void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ------------------------------------------------------------------ */
/* output toward the host                                              */

size_t out_pending(const struct agent *a)
{
	return a->out.len - a->out.off;
}

/* The output buffer back to out_first (harnesses, between sessions). */
void out_free(struct agent *a)
{
	if (a->out.p != a->out_first)
		free(a->out.p);
	a->out.p = a->out_first;
	a->out.cap = sizeof a->out_first;
	a->out.off = a->out.len = a->out.split = 0;
}

/* Room for n more bytes at the end of the output buffer; NULL when memory
 * ran out (the caller drops the frame: PID 1 must not die for a buffer). */
static uint8_t *out_reserve(struct agent *a, size_t n)
{
	size_t need, cap;
	uint8_t *p;

	if (a->out.off == a->out.len)
		a->out.off = a->out.len = 0;
	if (a->out.cap - a->out.len >= n)
		return a->out.p + a->out.len;
	if (a->out.off) {
		memmove(a->out.p, a->out.p + a->out.off, a->out.len - a->out.off);
		a->out.len -= a->out.off;
		a->out.off = 0;
		if (a->out.cap - a->out.len >= n)
			return a->out.p + a->out.len;
	}
	need = a->out.len + n;
	if (need > OUT_MAX)
		return NULL;
	for (cap = a->out.cap; cap < need; cap *= 2)
		;
	/* Out of out_first only now: musl's first malloc costs a cold boot's
	 * guest 4-12 ms under TCG (doc/SPEED.md "Goal 1, the port's
	 * lookup"), and a run that stays within it never pays that. */
	p = a->out.p == a->out_first ? malloc(cap) : realloc(a->out.p, cap);
	if (!p)
		return NULL;
	if (a->out.p == a->out_first)
		memcpy(p, a->out_first, a->out.len);
	a->out.p = p;
	a->out.cap = cap;
	return a->out.p + a->out.len;
}

void out_frame(struct agent *a, uint8_t type, uint32_t stream, const void *payload, size_t n)
{
	uint8_t *dst = FRAME_HDR + n <= PORT_WRITE_MAX ? out_reserve(a, FRAME_HDR + n) : NULL;

	if (!dst) {
		logm("no room for a frame of type %u (%zu bytes): dropped", type, n);
		return;
	}
	frame_hdr(dst, type, stream, (uint32_t)n);
	if (n)
		memcpy(dst + FRAME_HDR, payload, n);
	a->out.len += FRAME_HDR + n;
}

void out_tlv(struct agent *a, uint8_t type, uint32_t stream, const struct tlv_w *w)
{
	if (w->err) {
		logm("frame of type %u does not fit: dropped", type);
		return;
	}
	out_frame(a, type, stream, w->buf, w->len);
}

void send_error(struct agent *a, const char *kind, const char *fmt, ...)
{
	char msg[1024];
	uint8_t buf[1100];
	struct tlv_w w;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	logm("error %s: %s", kind, msg);
	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_ERROR_KIND, kind);
	tlv_put_str(&w, T_MESSAGE, msg);
	out_tlv(a, F_ERROR, STREAM_CTL, &w);
}

/* One F_CREDIT per stream and loop turn, for what was consumed meanwhile. */
void credit_flush(struct agent *a)
{
	uint8_t buf[16];
	struct tlv_w w;
	uint32_t s;

	for (s = 0; s <= STREAM_MAX; s++) {
		if (!a->credit_due[s])
			continue;
		tlv_init(&w, buf, sizeof buf);
		tlv_put_u64(&w, T_BYTES, a->credit_due[s]);
		out_tlv(a, F_CREDIT, s, &w);
		a->credit_due[s] = 0;
	}
}

/* A whole frame at p (its header included, at most PORT_WRITE_MAX long)
 * toward the host: written from p at once when nothing is queued before
 * it, so its bytes are not copied into the output buffer first (under TCG
 * every copy inside the guest is emulated code); what the port does not
 * take now is queued as out_frame queues, and port_flush goes on with it
 * (and reports a broken port).  0, or -1 when there is no room to queue
 * what the port might not take: nothing was sent, the caller tries
 * again later (a frame dropped here would cut a file short silently). */
int out_frame_now(struct agent *a, const uint8_t *p, size_t n)
{
	uint8_t *dst = out_reserve(a, n); /* before any byte is written */
	ssize_t w = 0;

	if (!dst)
		return -1;
	if (!out_pending(a) && a->port.fd >= 0) {
		w = port_write(a, p, n);
		if (w < 0)
			w = 0; /* queued: port_flush meets the error and reports it */
		if ((size_t)w == n)
			return 0;
	}
	memcpy(dst, p + w, n - (size_t)w);
	a->out.len += n - (size_t)w;
	if (w)
		a->out.split = n - (size_t)w; /* the rest of a write taken in part */
	return 0;
}

/* Room for a DATA frame of up to OUT_DATA_CHUNK bytes, its payload
 * returned (NULL when out of memory); out_data_commit queues the first n
 * (n may be 0: nothing is queued). */
uint8_t *out_data_reserve(struct agent *a)
{
	uint8_t *dst = out_reserve(a, FRAME_HDR + OUT_DATA_CHUNK);

	return dst ? dst + FRAME_HDR : NULL;
}

void out_data_commit(struct agent *a, uint32_t stream, size_t n)
{
	if (!n)
		return;
	frame_hdr(a->out.p + a->out.len, F_DATA, stream, (uint32_t)n);
	a->out.len += FRAME_HDR + n;
}

/* Queue a DATA frame of at most `max` bytes read straight from fd into the
 * output buffer.  Returns the read() result (-1 with errno; -2 when out of
 * memory). */
ssize_t out_read_data(struct agent *a, int fd, uint32_t stream, uint64_t max)
{
	uint8_t *dst = out_data_reserve(a);
	ssize_t n;

	if (!dst)
		return -2;
	n = read(fd, dst, max < OUT_DATA_CHUNK ? (size_t)max : OUT_DATA_CHUNK);
	if (n > 0)
		out_data_commit(a, stream, (size_t)n);
	return n;
}

/* Length of the next write: whole queued frames, at most PORT_WRITE_MAX
 * (out_frame never queues a bigger frame; if one were, it would go alone
 * and the driver's partial writes would be finished through out.split). */
size_t out_next_write(const struct agent *a)
{
	size_t n = 0, f, pend = out_pending(a);

	if (a->out.split)
		return a->out.split;
	while (pend - n >= FRAME_HDR) {
		f = FRAME_HDR + (size_t)get_le32(a->out.p + a->out.off + n);
		if (n && n + f > PORT_WRITE_MAX)
			break;
		n += f;
	}
	return n;
}
