/* proxy.c - isopod-broker's HTTP(S) proxy connections (see proxy.h). */
#include "proxy.h"
#include "allow.h"
#include "dns.h"
#include "http.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_ADDRS 16
#define BUF_CAP 65536
/* A busy relay pipe's size.  Bigger pipes mean fewer, larger splices:
 * 256 KiB took a fifth less of the broker's CPU per GiB than 64 KiB, 1 MiB
 * two fifths (bench/broker).  But a pipe holds what its destination does
 * not take, outside the sockets' memory accounting, so a guest that stops
 * reading can pin two per flow: 256 flows x 2 x 256 KiB = 128 MiB at most.
 * And every pipe page counts against its user's fs.pipe-user-pages-soft
 * (64 MiB by default), past which each new pipe of that user, the broker's
 * or not, gets 8 KiB: so a direction has no pipe until bytes come, one of
 * the default size then, grown to PIPE_SIZE only once bytes filled it, and
 * none again once its flow has been idle PIPE_IDLE_MS with it empty.
 * A pipe of PIPE_SIZE that fills again is a bulk transfer's: it grows to
 * PIPE_BULK, for at most PIPE_BULK_MAX pipes of the broker at once (12 MiB
 * more at most, 3072 pages of the soft limit), since the splices of a
 * bulk direction are what the broker's CPU goes to (about half of it per
 * GiB at 1 MiB against 256 KiB: perf, doc/SPEED.md goal 5). */
#define PIPE_SIZE (256 << 10)
#define PIPE_BULK (1 << 20)
#define PIPE_BULK_MAX 16
#define PIPE_IDLE_MS 1000
#define HEAD_MS 10000
#define CONNECT_MS 10000
#define IDLE_MS 300000
#define DRAIN_MS 2000

enum fstate { F_HEAD, F_RESOLVE, F_CONNECT, F_RELAY, F_DRAIN, F_DEAD };

struct buf {
	char *d;
	size_t off, len;
};

/* One direction of a relay.  Its bytes go from one socket into a pipe and
 * from the pipe to the other socket with splice(2): the kernel hands the
 * pages on and the broker never copies (or looks at) what the guest and
 * the target say to each other.  The broker's own bytes (the "200
 * Connection established", a plain request's rewritten head, the early
 * data read with the head) go out first, from pre. */
struct dir {
	struct buf pre;
	int p[2];                 /* the pipe's read and write ends (-1: none
				     yet, see PIPE_SIZE) */
	size_t inpipe, cap;       /* bytes in the pipe; its size */
	int grown;                /* F_SETPIPE_SZ was tried on this pipe: 1 for
				     PIPE_SIZE, 2 for PIPE_BULK */
	int bulk;                 /* the pipe is of PIPE_BULK (counted in
				     the broker's bulk_pipes) */
	int full;                 /* a splice into it met EAGAIN while it held
				     bytes: its slots may all be taken (a socket
				     fills one per fragment, however small), so
				     the source waits until some go out */
	int eof;                  /* the source said all it will */
	int shut;                 /* the destination's write side is shut */
};

/* One proxy connection from the guest, from its request head to its end. */
struct flow {
	struct broker *b;         /* its broker */
	struct bk_ep eg, eu, er;
	int g, u, r;              /* guest, upstream, resolver query fds (-1) */
	uint32_t gev, uev;        /* their current epoll interest */
	enum fstate st;
	int64_t start, deadline, last;
	char head[HTTP_HEAD_MAX + 1];
	size_t headn, hlen;
	struct http_req req;
	char name[DNS_NAME_MAX + 1]; /* normalised name (or the IP literal) */
	uint16_t qid;
	uint32_t addrs[MAX_ADDRS], addr;
	int naddrs, ai, ndenied, nfailed;
	const char *denied_by;    /* the first denied address's block (static) */
	struct dir g2u, u2g;      /* guest to upstream, and back */
	uint64_t up, down;
	int logged;               /* its ledger line is written */
	struct flow *prev, *next;
};

static void refuse(struct flow *f, int code, const char *reason, int denied, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void try_next(struct flow *f);

static const char *flow_kind(const struct flow *f)
{
	return f->req.connect ? "connect" : "http";
}

static const char *ip4(uint32_t a, char *buf)
{
	struct in_addr ia = { .s_addr = a };

	return inet_ntop(AF_INET, &ia, buf, INET_ADDRSTRLEN);
}

/* Its ledger line: the flow's kind, port, bytes and time. */
static void note(struct flow *f, const char *name, uint32_t addr, int allowed, const char *reason)
{
	bk_ledger(f->b, &(struct ledger_rec){ .kind = flow_kind(f), .name = name,
					      .port = f->req.port, .addr = addr, .up = f->up,
					      .down = f->down, .allowed = allowed, .reason = reason,
					      .ms = mono_ms() - f->start });
}

/* d's pipe closed, whatever it holds; a bulk pipe leaves room for another. */
static void dir_close(struct broker *b, struct dir *d)
{
	if (d->bulk)
		b->bulk_pipes--;
	d->bulk = 0;
	bk_closefd(&d->p[0]);
	bk_closefd(&d->p[1]);
	d->cap = 0;
	d->full = 0;
}

static void flow_free_fds(struct flow *f)
{
	bk_closefd(&f->g);
	bk_closefd(&f->u);
	bk_closefd(&f->r);
	dir_close(f->b, &f->g2u);
	dir_close(f->b, &f->u2g);
}

/* The source of d may be read: not at its end, and room in the pipe (or
 * no pipe yet). */
static int dir_wants_in(const struct dir *d)
{
	return !d->eof && !d->full && (d->p[0] < 0 || d->inpipe < d->cap);
}

static int dir_has_out(const struct dir *d)
{
	return d->pre.len || d->inpipe;
}

/* End a flow: its ledger line (unless written already, or it never named a
 * target), its fds closed.  The memory lives until the end of this round
 * of events, which may still point at it (st == F_DEAD). */
static void flow_end(struct flow *f, const char *reason)
{
	if (f->st == F_DEAD)
		return;
	if (!f->logged && f->name[0])
		note(f, f->name, f->addr, 1, reason);
	f->logged = 1;
	flow_free_fds(f);
	f->st = F_DEAD;
	if (f->prev)
		f->prev->next = f->next;
	else
		f->b->flows = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->next = f->b->dead_flows;
	f->b->dead_flows = f;
	f->b->nflows--;
}

static void set_interest(struct broker *b, int fd, struct bk_ep *e, uint32_t *cur, uint32_t want)
{
	/* on failure *cur keeps what epoll has: the broker is stopping anyway */
	if (fd >= 0 && want != *cur && bk_ep_mod(b, fd, e, want) == 0)
		*cur = want;
}

static void update_interest(struct flow *f)
{
	uint32_t ge = 0, ue = 0;

	switch (f->st) {
	case F_HEAD:
	case F_DRAIN:
		ge = EPOLLIN;
		break;
	case F_CONNECT:
		ue = EPOLLOUT;
		break;
	case F_RELAY:
		if (dir_wants_in(&f->g2u))
			ge |= EPOLLIN;
		if (dir_has_out(&f->u2g))
			ge |= EPOLLOUT;
		if (dir_wants_in(&f->u2g))
			ue |= EPOLLIN;
		if (dir_has_out(&f->g2u))
			ue |= EPOLLOUT;
		break;
	case F_RESOLVE:
	case F_DEAD:
		break;
	}
	/* A socket reports EPOLLHUP and EPOLLERR whatever its interest.  In a
	 * relay, pump() acts only on what the interest asks for, so a side that
	 * waits for nothing (its peer reset after a half-close, or its FIN
	 * unread behind a full pipe) would wake a level-triggered loop
	 * forever with nothing to do.  Such a side is edge-triggered: a
	 * hang-up or error is reported once (an error of the guest's side
	 * ends the flow, see proxy_on_event), and the level comes back with an
	 * interest, when pump() meets what is left.  In the other states an
	 * interest of 0 is level-triggered on purpose: a hang-up while
	 * resolving or connecting ends the flow. */
	set_interest(f->b, f->g, &f->eg, &f->gev, ge ? ge : f->st == F_RELAY ? EPOLLET : 0);
	set_interest(f->b, f->u, &f->eu, &f->uev, ue ? ue : f->st == F_RELAY ? EPOLLET : 0);
}

/* An error response (403 refusal, 400, 502, 503) with the reason in a
 * header and a body a human can read; the ledger line at once.  Then the
 * guest's side is half-closed and drained for a moment, so the response is
 * not lost to a reset. */
static void flow_reply(struct flow *f, int code, const char *reason, int denied, const char *body)
{
	char resp[8192];
	const char *text = code == 403 ? "Forbidden" : code == 400 ? "Bad Request" :
			   code == 502 ? "Bad Gateway" : "Service Unavailable";
	int n;

	if (!f->logged)
		note(f, f->name[0] ? f->name : NULL, 0, !denied, reason);
	f->logged = 1;
	n = snprintf(resp, sizeof resp,
		     "HTTP/1.1 %d %s\r\nX-Isopod-Refusal: %s\r\nContent-Type: text/plain\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		     code, text, reason, strlen(body), body);
	if (n > 0)
		(void)!send(f->g, resp, (size_t)n < sizeof resp ? (size_t)n : sizeof resp - 1,
			    MSG_NOSIGNAL | MSG_DONTWAIT);
	shutdown(f->g, SHUT_WR);
	bk_closefd(&f->u);
	bk_closefd(&f->r);
	f->st = F_DRAIN;
	f->deadline = mono_ms() + DRAIN_MS;
	update_interest(f);
}

static void refuse(struct flow *f, int code, const char *reason, int denied, const char *fmt, ...)
{
	char body[6144];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(body, sizeof body, fmt, ap);
	va_end(ap);
	flow_reply(f, code, reason, denied, body);
}

static void buf_put(struct buf *b, const void *p, size_t n)
{
	/* a head of <= 16 KiB, rewritten, and what came after it in the same
	 * reads (<= 16 KiB): never more than BUF_CAP */
	if (n > BUF_CAP - b->off - b->len)
		n = BUF_CAP - b->off - b->len;
	memcpy(b->d + b->off + b->len, p, n);
	b->len += n;
}

static void buf_puts(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

/* The plain HTTP request as the origin gets it: origin-form target, our
 * own Host, no Proxy-* / Connection / Keep-Alive, Connection: close. */
static void rewrite_head(struct flow *f)
{
	struct buf *b = &f->g2u.pre;
	const char *c = f->req.hdrs, *end = f->req.hdrs + f->req.hdrs_len;
	struct http_hdr h;
	char port[16];

	buf_puts(b, f->req.method);
	buf_puts(b, " ");
	if (!f->req.path_len || f->req.path[0] != '/')
		buf_puts(b, "/");
	buf_put(b, f->req.path, f->req.path_len);
	buf_puts(b, " ");
	buf_puts(b, f->req.version);
	buf_puts(b, "\r\nHost: ");
	buf_puts(b, f->name);
	if (f->req.port != 80) {
		snprintf(port, sizeof port, ":%u", f->req.port);
		buf_puts(b, port);
	}
	buf_puts(b, "\r\n");
	while (http_next_header(&c, end, &h) == 1) {
		if (http_hdr_is(&h, "host") || http_hdr_is(&h, "connection") ||
		    http_hdr_is(&h, "keep-alive") || http_hdr_prefix(&h, "proxy-"))
			continue;
		buf_put(b, h.name, h.name_len);
		buf_puts(b, ": ");
		buf_put(b, h.value, h.value_len);
		buf_puts(b, "\r\n");
	}
	buf_puts(b, "Connection: close\r\n\r\n");
}

/* d's pipe, of the default size, made when bytes first come (PIPE_SIZE).
 * 0, or -1 (errno). */
static int dir_pipe(struct dir *d)
{
	int n;

	if (d->p[0] >= 0)
		return 0;
	if (pipe2(d->p, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	n = fcntl(d->p[1], F_GETPIPE_SZ);
	d->cap = n > 0 ? (size_t)n : 4096;
	d->inpipe = 0;
	d->grown = 0;
	return 0;
}

/* d's pipe is full (of bytes, or of slots): once, ask for PIPE_SIZE; full
 * again at that size, for PIPE_BULK while the broker holds fewer than
 * PIPE_BULK_MAX such pipes (else at a later fill).  The system may refuse
 * (past fs.pipe-max-size, or, unprivileged, past fs.pipe-user-pages-soft):
 * it then keeps its size, and is not asked again. */
static void dir_grow(struct broker *b, struct dir *d)
{
	size_t want;
	int n;

	if (d->p[1] < 0 || d->grown >= 2 || (d->grown == 1 && b->bulk_pipes >= PIPE_BULK_MAX))
		return;
	want = d->grown ? PIPE_BULK : PIPE_SIZE;
	d->grown++;
	if ((n = fcntl(d->p[1], F_SETPIPE_SZ, want)) > 0 && (size_t)n > d->cap)
		d->cap = (size_t)n;
	if (want == PIPE_BULK && d->cap >= PIPE_BULK) {
		d->bulk = 1;
		b->bulk_pipes++;
	}
}

/* An idle direction's empty pipe goes: its pages count for its user. */
static void dir_unpipe(struct broker *b, struct dir *d)
{
	if (d->p[0] < 0 || d->inpipe)
		return;
	dir_close(b, d);
}

static void start_relay(struct flow *f)
{
	static const char est[] = "HTTP/1.1 200 Connection established\r\n\r\n";

	if (f->b->fatal[0]) {
		refuse(f, 503, "broker stopped", 0, "isopod-broker: the broker is stopping\n");
		return;
	}
	f->g2u.pre.d = malloc(BUF_CAP);
	f->u2g.pre.d = malloc(BUF_CAP);
	if (!f->g2u.pre.d || !f->u2g.pre.d) {
		refuse(f, 503, "out of memory", 0, "isopod-broker: out of memory\n");
		return;
	}
	/* The pipes come with the first bytes (dir_pipe): PROXY_FLOW_FDS
	 * counts them, and the broker's fd limit is set for PROXY_MAX_FLOWS
	 * flows of six fds (isopod-broker.c). */
	if (f->req.connect)
		buf_put(&f->u2g.pre, est, sizeof est - 1);
	else
		rewrite_head(f);
	/* bytes the guest sent after its head (early data) go on */
	buf_put(&f->g2u.pre, f->head + f->hlen, f->headn - f->hlen);
	/* a side with nothing of the broker's to send keeps no buffer */
	for (int i = 0; i < 2; i++) {
		struct buf *q = i ? &f->u2g.pre : &f->g2u.pre;

		if (!q->len) {
			free(q->d);
			q->d = NULL;
		}
	}
	f->st = F_RELAY;
	f->last = mono_ms();
	update_interest(f);
}

/* Connect to the next resolved address that passes the deny checks. */
static void try_next(struct flow *f)
{
	char ab[INET_ADDRSTRLEN];

	bk_closefd(&f->u); /* which takes it out of epoll */
	f->uev = 0;
	f->addr = 0;
	/* a flow admitted before the broker had to stop (the round and its
	 * sweeps stop first; this is the last guard): no new connection */
	if (f->b->fatal[0]) {
		refuse(f, 503, "broker stopped", 0, "isopod-broker: the broker is stopping\n");
		return;
	}
	while (f->ai < f->naddrs) {
		uint32_t a = f->addrs[f->ai++];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)f->req.port),
					  .sin_addr.s_addr = a };
		const char *blk = policy_range_denied(&f->b->pol, a);

		if (blk || policy_host(&f->b->host, a) != 0) {
			if (!f->ndenied++)
				f->denied_by = blk ? blk : "the host's own address";
			continue;
		}
		f->u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (f->u < 0) {
			warn("unable to create a socket:");
			f->nfailed++;
			break;
		}
		if (connect(f->u, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
			bk_closefd(&f->u);
			f->nfailed++;
			continue;
		}
		f->addr = a;
		f->st = F_CONNECT;
		f->deadline = mono_ms() + CONNECT_MS;
		f->uev = EPOLLOUT;
		if (bk_ep_add(f->b, f->u, &f->eu, EPOLLOUT) < 0) {
			bk_closefd(&f->u);
			f->nfailed++;
			break;
		}
		update_interest(f);
		return;
	}
	if (f->ndenied && !f->nfailed) {
		if (f->naddrs == 1 && inet_pton(AF_INET, f->name, &(struct in_addr){ 0 }) == 1)
			refuse(f, 403, "a denied address", 1,
			       "isopod-broker: %s is a denied address (%s)\n", f->name, f->denied_by);
		else
			refuse(f, 403, "resolves only to denied addresses", 1,
			       "isopod-broker: %s resolves only to denied addresses (%s%s: %s)\n",
			       f->name, ip4(f->addrs[0], ab), f->naddrs > 1 ? ", ..." : "",
			       f->denied_by);
		return;
	}
	refuse(f, 502, "connection failed", 0, "isopod-broker: %s port %u: connection failed\n",
	       f->name, f->req.port);
}

static void on_connected(struct flow *f)
{
	int err = 0;
	socklen_t l = sizeof err;

	if (getsockopt(f->u, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
		err = errno;
	if (err) {
		f->nfailed++;
		try_next(f);
		return;
	}
	start_relay(f);
}

static void start_resolve(struct flow *f)
{
	uint8_t q[DNS_QUESTION_MAX];
	size_t n;

	/* no random id: no query, the resolver's failure below */
	n = rand_bytes(&f->qid, sizeof f->qid) < 0
		    ? 0 : dns_build_query(q, sizeof q, f->qid, f->name, DNS_T_A);
	/* a fresh socket per query: a random source port as well as a random id */
	f->r = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!n || f->r < 0 ||
	    connect(f->r, (struct sockaddr *)&f->b->resolver, sizeof f->b->resolver) < 0 ||
	    send(f->r, q, n, 0) != (ssize_t)n || bk_ep_add(f->b, f->r, &f->er, EPOLLIN) < 0) {
		refuse(f, 502, "resolver failed", 0, "isopod-broker: %s: the resolver failed\n",
		       f->name);
		return;
	}
	f->st = F_RESOLVE;
	f->deadline = mono_ms() + BK_RESOLVE_MS;
	update_interest(f);
}

static void on_resolved(struct flow *f)
{
	uint8_t buf[4096];
	ssize_t n = recv(f->r, buf, sizeof buf, 0);
	int rc = 0, cnt;

	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		refuse(f, 502, "resolver failed", 0, "isopod-broker: %s: the resolver failed\n",
		       f->name);
		return;
	}
	if (dns_check_reply(buf, (size_t)n, f->qid, f->name, DNS_T_A) < 0)
		return; /* not the answer to our query: keep waiting */
	cnt = dns_parse_a(buf, (size_t)n, f->qid, f->name, f->addrs, MAX_ADDRS, &rc);
	bk_closefd(&f->r);
	if (cnt < 0 || (rc != DNS_RC_NOERROR && rc != DNS_RC_NXDOMAIN)) {
		refuse(f, 502, "resolver failed", 0, "isopod-broker: %s: the resolver failed\n",
		       f->name);
		return;
	}
	if (cnt == 0) {
		refuse(f, 502, "no such name", 0, "isopod-broker: %s: no such name\n", f->name);
		return;
	}
	f->naddrs = cnt;
	try_next(f);
}

/* A complete head: parse it and decide. */
static void on_request(struct flow *f)
{
	const char *why;
	char list[4096];
	struct in_addr ia;

	if (http_parse_request(f->head, f->hlen, &f->req, &why) < 0) {
		refuse(f, 400, "malformed request", 1, "isopod-broker: bad request: %s\n", why);
		return;
	}
	policy_allow_text(&f->b->pol, list, sizeof list);
	if (f->req.ipv6) {
		snprintf(f->name, sizeof f->name, "%s", f->req.host);
		refuse(f, 403, "an IP address, not a name", 1,
		       "isopod-broker: %s is an IPv6 address; IPv6 is not served\n", f->name);
		return;
	}
	if (inet_pton(AF_INET, f->req.host, &ia) == 1) {
		snprintf(f->name, sizeof f->name, "%s", f->req.host);
		if (!f->b->pol.allow_all) {
			refuse(f, 403, "an IP address, not a name", 1,
			       "isopod-broker: %s is an IP address, not a name in the allowlist (%s)\n",
			       f->name, list);
			return;
		}
		if (bk_full(f->b)) {
			refuse(f, 503, "ledger full", 1, "isopod-broker: the ledger is full\n");
			return;
		}
		f->addrs[0] = ia.s_addr;
		f->naddrs = 1;
		try_next(f);
		return;
	}
	if (allow_name_norm(f->name, sizeof f->name, f->req.host) < 0) {
		snprintf(f->name, sizeof f->name, "%s", f->req.host);
		refuse(f, 403, "not a host name", 1, "isopod-broker: %s is not a host name\n",
		       f->name);
		return;
	}
	if (!policy_name_allowed(&f->b->pol, f->name)) {
		refuse(f, 403, "not in the allowlist", 1,
		       "isopod-broker: %s is not in the allowlist (%s)\n", f->name, list);
		return;
	}
	/* An entry means HTTP and HTTPS (80, 443); any other port is named
	 * ("NAME:PORT"), so an allowed name is not a tunnel to its ssh. */
	if (!policy_port_allowed(&f->b->pol, f->name, f->req.port, list, sizeof list)) {
		refuse(f, 403, "port not in the allowlist", 1,
		       "isopod-broker: %s port %u is not allowed: the allowlist entries for %s (%s) "
		       "allow %s; allow that port as %s:%u\n",
		       f->name, f->req.port, f->name, list,
		       strchr(list, ':') ? "only the ports they name (or 80 and 443 without one)" :
					   "ports 80 (HTTP) and 443 (HTTPS) only",
		       f->name, f->req.port);
		return;
	}
	if (bk_full(f->b)) {
		refuse(f, 503, "ledger full", 1, "isopod-broker: the ledger is full\n");
		return;
	}
	start_resolve(f);
}

static void on_head(struct flow *f)
{
	ssize_t n = read(f->g, f->head + f->headn, HTTP_HEAD_MAX - f->headn);
	size_t seen = f->headn;

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) { /* gone before its request: nothing to record */
		flow_end(f, NULL);
		return;
	}
	f->headn += (size_t)n;
	/* the new bytes only: a guest sending a byte at a time must not make
	 * the broker scan 16 KiB per byte */
	f->hlen = http_head_len_more(f->head, f->headn, seen);
	if (f->hlen) {
		on_request(f);
		return;
	}
	if (f->headn >= HTTP_HEAD_MAX)
		refuse(f, 400, "malformed request", 1,
		       "isopod-broker: bad request: request head over %d bytes\n", HTTP_HEAD_MAX);
}

static void drain(struct flow *f)
{
	char junk[4096];
	ssize_t n = read(f->g, junk, sizeof junk);

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		flow_end(f, NULL);
}

/* Send what q holds to fd (count: bytes that went out, or NULL).  -1 on an
 * error that ends the flow.  Its memory goes once it is all out. */
static int flush(struct flow *f, int fd, struct buf *q, uint64_t *count, int64_t now)
{
	ssize_t n = send(fd, q->d + q->off, q->len, MSG_NOSIGNAL);

	if (n > 0) {
		q->off += (size_t)n;
		q->len -= (size_t)n;
		if (count)
			*count += (uint64_t)n;
		f->last = now;
		if (!q->len) {
			free(q->d);
			*q = (struct buf){ .d = NULL };
		}
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		return -1;
	}
	return 0;
}

/* splice(2) from a TCP socket stops at the urgent mark (it reads nothing,
 * EAGAIN, or 0 if the peer is at its end), while epoll still reports the
 * bytes behind it: a level-triggered loop would spin on them.  When a
 * splice into d's pipe brings nothing and d holds nothing to send, recv()
 * what is there instead into d->pre (it goes out before any pipe bytes
 * that follow): recv() goes past the mark, and drops the urgent byte
 * itself (SO_OOBINLINE is off), as the relay's read() did before it
 * spliced.  0 from recv() is the end.  While d still holds bytes, later
 * ones must wait behind them (full, until d->pre or the pipe is out).
 * Returns the bytes it took (counted in *in), 0, or -1 on an error that
 * ends the flow. */
static ssize_t past_mark(struct broker *b, struct dir *d, int src, uint64_t *in)
{
	ssize_t n;

	if (dir_has_out(d)) {
		d->full = 1;
		dir_grow(b, d);
		return 0;
	}
	if (!d->pre.d && !(d->pre.d = malloc(BUF_CAP)))
		return -1;
	d->pre.off = 0;
	n = recv(src, d->pre.d, BUF_CAP, 0);
	if (n > 0) {
		d->pre.len = (size_t)n;
		if (in)
			*in += (uint64_t)n;
		return n;
	}
	free(d->pre.d);
	d->pre.d = NULL;
	if (n == 0)
		d->eof = 1;
	else if (errno != EAGAIN && errno != EINTR)
		return -1;
	return 0;
}

/* One step of d, without blocking: from src into the pipe while it has
 * room, then to dst what d->pre holds, else what the pipe holds (in: bytes
 * that came from src; out: bytes that went to dst; each may be NULL).
 * Only a socket the event names as ready is tried (sev, dev: its events
 * for src and dst, or 0), and dst also when bytes just came in: every
 * other readiness comes as an event of its own, since the interest asks
 * for it (update_interest).  -1 on an error that ends the flow. */
static int step(struct flow *f, struct dir *d, int src, int dst, uint32_t sev, uint32_t dev,
		uint64_t *in, uint64_t *out, int64_t now)
{
	const uint32_t ready = EPOLLHUP | EPOLLERR;
	int fresh = 0;
	ssize_t n;

	if ((sev & (EPOLLIN | ready)) && dir_wants_in(d)) {
		if (dir_pipe(d) < 0)
			return -1;
		n = splice(src, NULL, d->p[1], NULL, d->cap - d->inpipe,
			   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			d->inpipe += (size_t)n;
			if (d->inpipe >= d->cap)
				dir_grow(f->b, d);
			if (in)
				*in += (uint64_t)n;
			f->last = now;
			fresh = 1;
		} else if (n == 0 || errno == EAGAIN) {
			/* nothing to read, no slot left, the end, or TCP's
			 * urgent mark (see past_mark) */
			n = past_mark(f->b, d, src, in);
			if (n > 0) {
				f->last = now;
				fresh = 1;
			} else if (n < 0) {
				return -1;
			}
		} else if (errno != EINTR) {
			return -1;
		}
	}
	if (!fresh && !(dev & (EPOLLOUT | ready)))
		return 0;
	if (d->pre.len) {
		int r = flush(f, dst, &d->pre, out, now);

		if (!d->pre.len)
			d->full = 0; /* what past_mark waits for */
		return r;
	}
	if (!d->inpipe)
		return 0;
	n = splice(d->p[0], NULL, dst, NULL, d->inpipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n > 0) {
		d->inpipe -= (size_t)n;
		d->full = 0;
		if (out)
			*out += (uint64_t)n;
		f->last = now;
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		return -1;
	}
	return 0;
}

/* d's source is at its end and all it said went on: pass the end on. */
static void pass_eof(struct dir *d, int dst)
{
	if (d->eof && !dir_has_out(d) && !d->shut) {
		shutdown(dst, SHUT_WR);
		d->shut = 1;
	}
}

/* Move what can be moved, both ways, without blocking: ev, the events of
 * the flow's socket of kind k (BK_GUEST, BK_UP). */
static void pump(struct flow *f, enum bk_kind k, uint32_t ev)
{
	uint32_t gev = k == BK_GUEST ? ev : 0, uev = k == BK_UP ? ev : 0;
	int64_t now = mono_ms();

	if (step(f, &f->g2u, f->g, f->u, gev, uev, NULL, &f->up, now) < 0 ||
	    step(f, &f->u2g, f->u, f->g, uev, gev, &f->down, NULL, now) < 0) {
		flow_end(f, NULL);
		return;
	}
	pass_eof(&f->g2u, f->u);
	pass_eof(&f->u2g, f->g);
	/* A tunnel ends when both directions are over; a plain request (sent
	 * with Connection: close) when the origin's answer is delivered. */
	if ((f->g2u.shut && f->u2g.shut) || (!f->req.connect && f->u2g.shut)) {
		flow_end(f, NULL);
		return;
	}
	update_interest(f);
}

void proxy_on_accept(struct broker *b)
{
	for (int k = 0; k < 32; k++) {
		int fd = accept4(b->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct flow *f;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* out of fds: stop accepting for a tick rather than spin */
				epoll_ctl(b->ep, EPOLL_CTL_DEL, b->lfd, NULL);
				b->lfd_paused = 1;
				b->lfd_resume = mono_ms() + 100;
			}
			return;
		}
		if (b->nflows >= PROXY_MAX_FLOWS || !(f = calloc(1, sizeof *f))) {
			static const char busy[] =
				"HTTP/1.1 503 Service Unavailable\r\nX-Isopod-Refusal: too many flows\r\n"
				"Content-Type: text/plain\r\nContent-Length: 35\r\nConnection: close\r\n\r\n"
				"isopod-broker: too many open flows\n";

			(void)!send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
			close(fd);
			bk_ledger(b, &(struct ledger_rec){ .kind = "http", .reason = "too many flows" });
			continue;
		}
		f->b = b;
		f->g = fd;
		f->u = f->r = -1;
		f->g2u.p[0] = f->g2u.p[1] = f->u2g.p[0] = f->u2g.p[1] = -1;
		f->eg = (struct bk_ep){ .kind = BK_GUEST, .obj = f };
		f->eu = (struct bk_ep){ .kind = BK_UP, .obj = f };
		f->er = (struct bk_ep){ .kind = BK_RES, .obj = f };
		f->st = F_HEAD;
		f->start = f->last = mono_ms();
		f->deadline = f->start + HEAD_MS;
		f->gev = EPOLLIN;
		if (bk_ep_add(b, fd, &f->eg, EPOLLIN) < 0) {
			close(fd);
			free(f);
			return;
		}
		f->next = b->flows;
		if (b->flows)
			b->flows->prev = f;
		b->flows = f;
		b->nflows++;
	}
}

void proxy_on_event(struct bk_ep *e, uint32_t ev)
{
	struct flow *f = e->obj;

	switch (f->st) {
	case F_HEAD:
		if (e->kind == BK_GUEST)
			on_head(f);
		break;
	case F_RESOLVE:
	case F_CONNECT:
		/* waiting for the resolver or the origin: the guest may go */
		if (e->kind == BK_RES && f->st == F_RESOLVE)
			on_resolved(f);
		else if (e->kind == BK_UP && f->st == F_CONNECT)
			on_connected(f);
		else if (e->kind == BK_GUEST && (ev & (EPOLLHUP | EPOLLERR)))
			flow_end(f, "client went away");
		break;
	case F_RELAY:
		/* The guest reset its connection: nothing more can reach it.
		 * (With an interest in reading, pump() first reads what came
		 * before the reset, then meets the error.) */
		if (e->kind == BK_GUEST && (ev & EPOLLERR) && !(f->gev & EPOLLIN))
			flow_end(f, NULL);
		else
			pump(f, e->kind, ev);
		break;
	case F_DRAIN:
		if (e->kind == BK_GUEST)
			drain(f);
		break;
	case F_DEAD:
		break;
	}
}

void proxy_sweep(struct broker *b, int64_t now)
{
	struct flow *f, *fn;

	for (f = b->flows; f; f = fn) {
		fn = f->next;
		switch (f->st) {
		case F_HEAD:
		case F_DRAIN:
			if (now >= f->deadline)
				flow_end(f, NULL);
			break;
		case F_RESOLVE:
			if (now >= f->deadline)
				refuse(f, 502, "resolver timed out", 0,
				       "isopod-broker: %s: the resolver did not answer\n", f->name);
			break;
		case F_CONNECT:
			if (now >= f->deadline) {
				f->nfailed++;
				try_next(f);
			}
			break;
		case F_RELAY:
			if (now - f->last >= IDLE_MS) {
				flow_end(f, "idle timeout");
			} else if (now - f->last >= PIPE_IDLE_MS) {
				dir_unpipe(b, &f->g2u);
				dir_unpipe(b, &f->u2g);
			}
			break;
		case F_DEAD:
			break;
		}
	}
	if (b->lfd_paused && now >= b->lfd_resume && bk_ep_add(b, b->lfd, &b->elisten, EPOLLIN) == 0)
		b->lfd_paused = 0;
}

void proxy_stop(struct broker *b)
{
	while (b->flows)
		flow_end(b->flows, "broker stopped");
}

void proxy_reap(struct broker *b)
{
	while (b->dead_flows) {
		struct flow *f = b->dead_flows;

		b->dead_flows = f->next;
		free(f->g2u.pre.d);
		free(f->u2g.pre.d);
		free(f);
	}
}
