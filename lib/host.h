/* host.h - the host side of an agent connection (glibc tools only). */
#ifndef ISOPOD_HOST_H
#define ISOPOD_HOST_H

#include "frame.h"

#include <stddef.h>
#include <stdint.h>

/* Receive buffer large enough for one whole frame plus read-ahead. */
#define CONN_RBUF (2 * (FRAME_HDR + FRAME_MAX_PAYLOAD))

struct conn {
	int fd;               /* non-blocking unix socket */
	uint8_t rbuf[CONN_RBUF];
	size_t rlen, roff;    /* bytes buffered, start of unparsed data */
	uint8_t *wbuf;        /* pending output (heap, grows) */
	size_t wlen, woff, wcap;
	char err[512];        /* last error text for the caller's diagnostics */
};

/* What HELLO carries (all optional but cookie, which conn_hello fills). */
struct hello {
	const char *hostname;
	int set_time;              /* send the host's CLOCK_REALTIME */
	int seed;                  /* send 32 random bytes for the guest RNG */
	int grow;
	/* ROOT_RW: the agent makes its root read-write right after its
	 * HELLO_ACK.  Never for a template, whose root must stay read-only
	 * until its snapshot is taken (lib/warmtpl.c). */
	int root_rw;
	const char *net_addr, *net_gw, *net_dns;
	uint32_t net_mtu;
	const uint8_t *net_mac;    /* 6 bytes, or NULL (a warm clone keeps the
	                            * template's MAC unless told) */
	/* filled from HELLO_ACK */
	char root[8];
	uint64_t uptime_ms;
	uint64_t bulk_bytes;       /* BULK: the agent found the bulk lane, this big; 0: none */
	char guest_error[256];
};

/* Connect to the agent socket, retrying until deadline (mono ms).  0 or -1
 * (c->err says why; errno ETIMEDOUT when the deadline passed). */
int conn_open(struct conn *c, const char *sock_path, int64_t deadline_ms);
void conn_close(struct conn *c);

/* Queue one frame (payload copied).  0, or -1 when out of memory. */
int conn_queue(struct conn *c, uint8_t type, uint32_t stream, const void *p, size_t n);
/* Write as much queued output as the socket takes now (non-blocking). */
int conn_flush_some(struct conn *c);
/* Write all queued output, waiting at most until deadline.  0 / -1. */
int conn_flush(struct conn *c, int64_t deadline_ms);

/* Get the next frame: 1 got one (valid until the next call), 0 none buffered
 * (call conn_fill), -1 malformed (c->err).  */
int conn_next(struct conn *c, struct frame *fr);
/* Read what the socket has (non-blocking).  1 read something, 0 would
 * block, -1 error, -2 peer closed. */
int conn_fill(struct conn *c);
/* Block until a frame arrives or deadline: 1 frame, -1 error/closed,
 * -3 timeout.  Output is flushed meanwhile. */
int conn_wait(struct conn *c, struct frame *fr, int64_t deadline_ms);

/* HELLO / HELLO_ACK handshake with a fresh cookie; skips stale frames.
 * 0 ok; -1 failure (c->err); -3 timeout.  A guest ERROR in HELLO_ACK is
 * returned as failure with h->guest_error set. */
int conn_hello(struct conn *c, struct hello *h, int64_t deadline_ms);

/* Decode an ERROR frame payload into kind/message buffers. */
void frame_error_text(const struct frame *fr, char *kind, size_t ksz, char *msg, size_t msz);

#endif
