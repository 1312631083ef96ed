/* host.c - host side of an agent connection: non-blocking unix socket,
 * frame queueing, bounded waits, and the HELLO handshake. */
#include "host.h"
#include "util.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int remaining(int64_t deadline_ms)
{
	int64_t r = deadline_ms - mono_ms();

	if (r < 0)
		return 0;
	return r > 1000000 ? 1000000 : (int)r;
}

int conn_open(struct conn *c, const char *sock_path, int64_t deadline_ms)
{
	struct sockaddr_un sa;

	memset(c, 0, offsetof(struct conn, rbuf));
	c->fd = -1;
	c->rlen = c->roff = 0;
	c->wbuf = NULL;
	c->wlen = c->woff = c->wcap = 0;
	c->err[0] = 0;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if (strlen(sock_path) >= sizeof sa.sun_path) {
		snprintf(c->err, sizeof c->err, "socket path too long: %s", sock_path);
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, sock_path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			snprintf(c->err, sizeof c->err, "socket: %s", strerror(errno));
			return -1;
		}
		if (unix_connect_nofollow(fd, sock_path) == 0) {
			fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
			c->fd = fd;
			return 0;
		}
		int e = errno;
		close(fd);
		/* The socket appears when QEMU has started; it refuses while
		 * another client holds the one slot.  Both are transient. */
		if (e != ENOENT && e != ECONNREFUSED && e != EAGAIN) {
			snprintf(c->err, sizeof c->err, "connect %s: %s", sock_path, strerror(e));
			errno = e;
			return -1;
		}
		if (mono_ms() >= deadline_ms) {
			snprintf(c->err, sizeof c->err, "connect %s: %s (timed out)", sock_path,
				 strerror(e));
			errno = ETIMEDOUT;
			return -1;
		}
		struct timespec ts = { .tv_nsec = 10 * 1000000 };
		nanosleep(&ts, NULL);
	}
}

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->wbuf);
	c->wbuf = NULL;
	c->wlen = c->woff = c->wcap = 0;
}

int conn_queue(struct conn *c, uint8_t type, uint32_t stream, const void *p, size_t n)
{
	size_t need;

	if (n > FRAME_MAX_PAYLOAD) {
		errno = EMSGSIZE;
		return -1;
	}
	/* Compact what was already written before growing. */
	if (c->woff && c->woff == c->wlen)
		c->woff = c->wlen = 0;
	need = c->wlen + FRAME_HDR + n;
	if (need > c->wcap) {
		if (c->woff) {
			memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
			c->wlen -= c->woff;
			c->woff = 0;
			need = c->wlen + FRAME_HDR + n;
		}
		if (need > c->wcap) {
			size_t cap = c->wcap ? c->wcap : 65536;
			uint8_t *nb;

			while (cap < need)
				cap *= 2;
			nb = realloc(c->wbuf, cap);
			if (!nb)
				return -1;
			c->wbuf = nb;
			c->wcap = cap;
		}
	}
	frame_hdr(c->wbuf + c->wlen, type, stream, (uint32_t)n);
	if (n)
		memcpy(c->wbuf + c->wlen + FRAME_HDR, p, n);
	c->wlen += FRAME_HDR + n;
	return 0;
}

int conn_flush_some(struct conn *c)
{
	while (c->woff < c->wlen) {
		ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			snprintf(c->err, sizeof c->err, "write to agent: %s", strerror(errno));
			return -1;
		}
		c->woff += (size_t)w;
	}
	c->woff = c->wlen = 0;
	return 0;
}

int conn_flush(struct conn *c, int64_t deadline_ms)
{
	while (c->woff < c->wlen) {
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };

		if (conn_flush_some(c) < 0)
			return -1;
		if (c->woff >= c->wlen)
			break;
		if (mono_ms() >= deadline_ms) {
			snprintf(c->err, sizeof c->err, "write to agent: timed out");
			errno = ETIMEDOUT;
			return -3;
		}
		poll(&p, 1, remaining(deadline_ms));
	}
	return 0;
}

int conn_next(struct conn *c, struct frame *fr)
{
	size_t used;
	int r = frame_parse(c->rbuf + c->roff, c->rlen - c->roff, fr, &used);

	if (r < 0) {
		snprintf(c->err, sizeof c->err, "malformed frame from the guest agent");
		return -1;
	}
	if (r == 0)
		return 0;
	c->roff += used;
	return 1;
}

int conn_fill(struct conn *c)
{
	ssize_t r;

	/* Everything before roff has been handed out; frames returned by
	 * conn_next stay valid only until this call moves the rest down. */
	if (c->roff) {
		memmove(c->rbuf, c->rbuf + c->roff, c->rlen - c->roff);
		c->rlen -= c->roff;
		c->roff = 0;
	}
	if (c->rlen == sizeof c->rbuf) /* impossible: a whole frame always fits */
		return 0;
	for (;;) {
		r = recv(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen, 0);
		if (r < 0 && errno == EINTR)
			continue;
		break;
	}
	if (r < 0) {
		if (errno == EAGAIN)
			return 0;
		snprintf(c->err, sizeof c->err, "read from agent: %s", strerror(errno));
		return -1;
	}
	if (r == 0) {
		snprintf(c->err, sizeof c->err, "the guest agent closed the connection");
		return -2;
	}
	c->rlen += (size_t)r;
	return 1;
}

int conn_wait(struct conn *c, struct frame *fr, int64_t deadline_ms)
{
	for (;;) {
		int r = conn_next(c, fr);
		struct pollfd p;

		if (r != 0)
			return r;
		if (conn_flush_some(c) < 0)
			return -1;
		p.fd = c->fd;
		p.events = POLLIN | (c->woff < c->wlen ? POLLOUT : 0);
		p.revents = 0;
		if (mono_ms() >= deadline_ms) {
			snprintf(c->err, sizeof c->err, "timed out waiting for the guest agent");
			return -3;
		}
		if (poll(&p, 1, remaining(deadline_ms)) < 0 && errno != EINTR) {
			snprintf(c->err, sizeof c->err, "poll: %s", strerror(errno));
			return -1;
		}
		if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
			r = conn_fill(c);
			if (r < 0)
				return -1;
		}
	}
}

void frame_error_text(const struct frame *fr, char *kind, size_t ksz, char *msg, size_t msz)
{
	struct tlv_r r;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l;

	char ex[EXCERPT_SZ];

	snprintf(kind, ksz, "agent");
	snprintf(msg, msz, "(no message)");
	/* Guest text, escaped (control bytes, invalid UTF-8): it goes to the
	 * caller's terminal and into JSON. */
	tlv_rinit(&r, fr->payload, fr->len);
	while (tlv_next(&r, &tag, &v, &l) == 1) {
		if (tag == T_ERROR_KIND)
			snprintf(kind, ksz, "%s", excerpt(ex, v, l));
		if (tag == T_MESSAGE || tag == T_ERROR)
			snprintf(msg, msz, "%s", excerpt(ex, v, l));
	}
}

/* Queue one HELLO with a fresh cookie (and a fresh clock and seed). */
static int hello_queue(struct conn *c, const struct hello *h, uint64_t *cookie_out)
{
	uint8_t buf[1024];
	struct tlv_w w;
	uint64_t cookie;

	if (rand_bytes(&cookie, sizeof cookie) < 0) {
		snprintf(c->err, sizeof c->err, "unable to get random bytes: %s", strerror(errno));
		return -1;
	}
	*cookie_out = cookie;
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&w, T_COOKIE, cookie);
	if (h->hostname)
		tlv_put_str(&w, T_HOSTNAME, h->hostname);
	if (h->set_time) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		tlv_put_u64(&w, T_TIME_NS, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
	}
	if (h->seed) {
		uint8_t seed[32];

		if (rand_bytes(seed, sizeof seed) < 0) {
			snprintf(c->err, sizeof c->err, "unable to get random bytes: %s",
				 strerror(errno));
			return -1;
		}
		tlv_put(&w, T_SEED, seed, sizeof seed);
	}
	if (h->grow)
		tlv_put_u32(&w, T_GROW, 1);
	if (h->root_rw)
		tlv_put_u32(&w, T_ROOT_RW, 1);
	if (h->net_addr)
		tlv_put_str(&w, T_NET_ADDR, h->net_addr);
	if (h->net_gw)
		tlv_put_str(&w, T_NET_GW, h->net_gw);
	if (h->net_dns)
		tlv_put_str(&w, T_NET_DNS, h->net_dns);
	if (h->net_mtu)
		tlv_put_u32(&w, T_NET_MTU, h->net_mtu);
	if (h->net_mac)
		tlv_put(&w, T_NET_MAC, h->net_mac, 6);
	if (w.err || conn_queue(c, F_HELLO, STREAM_CTL, buf, w.len) < 0) {
		snprintf(c->err, sizeof c->err, "HELLO does not fit");
		return -1;
	}
	return 0;
}

/* First resend of an unanswered HELLO, and the longest gap between them. */
#define HELLO_RESEND_MS 100
#define HELLO_RESEND_MAX_MS 2000

int conn_hello(struct conn *c, struct hello *h, int64_t deadline_ms)
{
	/* ROOT_RW: the agent remounts right after an answer, so an answer to a
	 * resent HELLO may say "rw" where the first said "ro".  What the root
	 * was when the agent first answered this call (the root a resumed
	 * clone came with: lib/launch.c refuses "rw") is that first answer's,
	 * kept by the cookies this call sent. */
	uint64_t cookie, sent[32];
	size_t nsent = 0;
	char first_root[sizeof h->root] = "";
	struct frame fr;
	int64_t gap = HELLO_RESEND_MS, resend = mono_ms() + gap;

	if (hello_queue(c, h, &cookie) < 0)
		return -1;
	sent[nsent++] = cookie;
	h->root[0] = 0;
	h->guest_error[0] = 0;
	h->uptime_ms = 0;
	for (;;) {
		int r = conn_wait(c, &fr, resend < deadline_ms ? resend : deadline_ms);
		struct tlv_r rd;
		uint8_t tag;
		const uint8_t *v;
		uint32_t l, ver = 0;
		uint64_t ck = 0;

		if (r == -3 && mono_ms() < deadline_ms) {
			/* No answer yet: say HELLO again, with a new cookie (only
			 * the newest one's HELLO_ACK counts, so an answer to an
			 * older one can never be left behind in the stream).  A
			 * guest may see a new connection's first bytes before
			 * the port's "host connected" event, read EOF right after
			 * them and drop its answer as meant for a vanished host
			 * (seen on freshly resumed warm clones); a HELLO always
			 * starts a new session, so saying it twice is harmless. */
			if (hello_queue(c, h, &cookie) < 0)
				return -1;
			if (nsent < sizeof sent / sizeof sent[0])
				sent[nsent++] = cookie;
			gap = gap * 2 < HELLO_RESEND_MAX_MS ? gap * 2 : HELLO_RESEND_MAX_MS;
			resend = mono_ms() + gap;
			continue;
		}
		if (r < 0)
			return r;
		/* Anything but our own HELLO_ACK is left over from an earlier
		 * client of this port: skip it. */
		if (fr.type != F_HELLO_ACK)
			continue;
		tlv_rinit(&rd, fr.payload, fr.len);
		while ((r = tlv_next(&rd, &tag, &v, &l)) == 1) {
			switch (tag) {
			case T_VERSION: tlv_u32(v, l, &ver); break;
			case T_COOKIE: tlv_u64(v, l, &ck); break;
			case T_ROOT: tlv_str(v, l, h->root, sizeof h->root); break;
			case T_UPTIME_MS: tlv_u64(v, l, &h->uptime_ms); break;
			case T_BULK: tlv_u64(v, l, &h->bulk_bytes); break;
			case T_ERROR: {
				char ex[EXCERPT_SZ];

				snprintf(h->guest_error, sizeof h->guest_error, "%s",
					 excerpt(ex, v, l));
				break;
			}
			default: break;
			}
		}
		if (r < 0) {
			snprintf(c->err, sizeof c->err, "malformed HELLO_ACK from the guest agent");
			return -1;
		}
		if (h->root_rw && !first_root[0] && ver == ISOPOD_PROTO_VERSION)
			for (size_t i = 0; i < nsent; i++)
				if (ck == sent[i]) {
					memcpy(first_root, h->root, sizeof first_root);
					break;
				}
		if (ck != cookie)
			continue;
		if (first_root[0])
			memcpy(h->root, first_root, sizeof h->root);
		if (ver != ISOPOD_PROTO_VERSION) {
			snprintf(c->err, sizeof c->err,
				 "protocol version mismatch: host %u, agent %u", ISOPOD_PROTO_VERSION, ver);
			return -1;
		}
		if (h->guest_error[0]) {
			snprintf(c->err, sizeof c->err, "guest agent: %s", h->guest_error);
			return -1;
		}
		return 0;
	}
}
