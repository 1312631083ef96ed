/* isopod-broker - the egress broker of filtered mode: a DNS forwarder and an
 * HTTP(S) proxy on a VM's gateway address that let through names from an
 * allowlist only, and append every flow to a ledger.
 *
 * One process, one epoll loop, no threads and no blocking call after start:
 * names are resolved with the broker's own A queries (never getaddrinfo),
 * connects are non-blocking.  Every table is bounded (flows, pending
 * queries, buffers) and every state has a deadline, so a guest can slow
 * its own egress down but never grow the broker.
 *
 * The security of filtered mode rests on three checks here:
 * - a name outside the allowlist is refused before anything leaves the
 *   host: a DNS query for it is answered REFUSED locally and never
 *   forwarded, so queries cannot carry data out;
 * - every address a name resolves to is checked at connect time against
 *   the deny ranges and the host's own addresses (read again for every
 *   connect), so an allowed name that resolves, or is rebound, to
 *   metadata, private ranges or the host itself gets nowhere;
 * - a plain HTTP request's Host header is the broker's, written from the
 *   checked target: the guest's own Host is dropped (RFC 9112 3.2.2), so it
 *   cannot pick another virtual host on an allowed server. */

#include "allow.h"
#include "dns.h"
#include "http.h"
#include "ranges.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define USAGE                                                                              \
	"isopod-broker --listen ADDR --ledger FILE [--proxy-port N] [--dns-port N] "       \
	"[--allow PATTERN]... [--allow-all] [--allow-range CIDR]... [--no-proxy] "         \
	"[--resolver ADDR[:PORT]] [--parent PID] [--vm ID] [--canary PORT]"

#define MAX_FLOWS 256
#define MAX_PEND 256
#define MAX_ALLOW 1024
#define MAX_ADDRS 16
#define BUF_CAP 65536
#define HEAD_MS 10000
#define RESOLVE_MS 3000
#define CONNECT_MS 10000
#define IDLE_MS 300000
#define DRAIN_MS 2000
#define TICK_MS 200
#define CANARY_START_MS 2000 /* no answer before the announce: refuse to start */
#define CANARY_EVERY_MS 1000
#define CANARY_MISSES 3      /* that many probes unanswered: the table is gone */

enum ekind { E_LISTEN, E_DNS, E_SIG, E_GUEST, E_UP, E_RES, E_PEND };

struct ep {
	enum ekind kind;
	void *obj;
};

enum fstate { F_HEAD, F_RESOLVE, F_CONNECT, F_RELAY, F_DRAIN, F_DEAD };

struct buf {
	char *d;
	size_t off, len;
};

/* One proxy connection from the guest, from its request head to its end. */
struct flow {
	struct ep eg, eu, er;
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
	struct buf g2u, u2g;
	int g_eof, u_eof, g_shut, u_shut;
	uint64_t up, down;
	int logged;               /* its ledger line is written */
	struct flow *prev, *next;
};

/* One guest DNS query forwarded to the resolver. */
struct pend {
	struct ep e;
	int fd;
	struct sockaddr_in from;
	uint16_t gid, qid, qtype;
	struct dns_query q;       /* for the SERVFAIL of a timeout */
	uint8_t qraw[DNS_QUESTION_MAX];
	char name[DNS_NAME_MAX + 1];
	int64_t start, deadline;
	size_t up;
	int dead;
	struct pend *prev, *next;
};

static struct {
	struct in_addr listen;
	unsigned proxy_port, dns_port;
	struct sockaddr_in resolver;
	char *allow[MAX_ALLOW];
	size_t nallow;
	/* the host's overrides of the deny list (isopod-boot passes the
	 * allow_range lines of the host's config) */
	struct range allow_range[RANGES_ALLOW_MAX];
	size_t nallow_range;
	int allow_all, no_proxy;
	const char *vm;
	int ledger, ep, lfd, ufd, sfd;
	/* A guest can make refusals as fast as it likes: the ledger is capped
	 * (ISOPOD_LEDGER_MAX bytes, default 64 MiB).  Past the cap, refusals
	 * are counted, not written, and nothing new is served (a flow that
	 * could not be recorded is not served); flows already open still get
	 * their lines, and one last line says how many were suppressed. */
	long long ledger_bytes, ledger_max, suppressed;
	int lfd_paused;
	int64_t lfd_resume;
	struct flow *flows, *dead_flows;
	struct pend *pends, *dead_pends;
	int nflows, npend;
	struct ep elisten, edns, esig;
	/* The canary of isopod-netsetup's table (--canary, canary_*()):
	 * nonces cfd (bound to listen:canary_port + 1) sends to
	 * listen:canary_port come back to it only while `inet isopod` is
	 * loaded. */
	unsigned canary_port;
	int cfd;
	uint8_t nonce[2][16];     /* the last one sent, and the one before */
	int64_t canary_sent, canary_ok;
	unsigned unanswered;      /* probes sent since the last answer */
} B = { .ledger = -1, .lfd = -1, .ufd = -1, .sfd = -1, .cfd = -1 };

/* ---- ledger ------------------------------------------------------------ */

static char *iso_ms(char *buf, size_t sz)
{
	struct timespec ts;
	struct tm tm;
	char s[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, sz, "%.20s.%03uZ", s, (unsigned)(ts.tv_nsec / 1000000) % 1000);
	return buf;
}

static const char *ip4(uint32_t a, char *buf)
{
	struct in_addr ia = { .s_addr = a };

	return inet_ntop(AF_INET, &ia, buf, INET_ADDRSTRLEN);
}

/* One line per flow (at its end) or refusal (at once), one write(2) on an
 * O_APPEND fd, so concurrent writers and a reader tailing the file always
 * see whole lines.  A ledger that cannot be written fails closed: egress
 * that would go unrecorded is not served. */
static void ledger(const char *kind, const char *name, unsigned port, uint32_t addr,
		   uint64_t up, uint64_t down, int allowed, const char *reason, int64_t ms,
		   const char *qtype)
{
	char ts[64], ab[INET_ADDRSTRLEN];
	json_t *o;
	char *s;
	size_t n;

	o = json_pack("{s:s, s:s, s:s?, s:o, s:s?, s:I, s:I, s:s, s:s?, s:I}", "time",
		      iso_ms(ts, sizeof ts), "kind", kind, "name", name, "port",
		      port ? json_integer(port) : json_null(), "address",
		      addr ? ip4(addr, ab) : NULL, "up", (json_int_t)up, "down", (json_int_t)down,
		      "verdict", allowed ? "allowed" : "denied", "reason", reason, "ms",
		      (json_int_t)(ms < 0 ? 0 : ms));
	if (!o)
		die(EX_SYS, "unable to build a ledger line");
	if (!strcmp(kind, "dns")) /* null for a query too malformed to have one */
		json_object_set_new(o, "qtype", qtype ? json_string(qtype) : json_null());
	if (B.vm)
		json_object_set_new(o, "vm", json_string(B.vm));
	s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (!s)
		die(EX_SYS, "unable to build a ledger line");
	n = strlen(s);
	if (!allowed && strcmp(kind, "ledger") &&
	    B.ledger_bytes + (long long)n + 1 > B.ledger_max) {
		B.suppressed++;
		free(s);
		return;
	}
	s[n] = '\n'; /* json_dumps leaves room: replace the NUL, write n + 1 */
	if (write(B.ledger, s, n + 1) != (ssize_t)(n + 1))
		die(EX_SYS, "unable to write the ledger:");
	B.ledger_bytes += (long long)n + 1;
	free(s);
}

/* Past the cap nothing new is served. */
static int ledger_full(void)
{
	return B.ledger_bytes >= B.ledger_max || B.suppressed > 0;
}

/* ---- policy ------------------------------------------------------------ */

static int name_allowed(const char *name)
{
	if (B.allow_all)
		return 1;
	for (size_t i = 0; i < B.nallow; i++)
		if (allow_match(B.allow[i], name))
			return 1;
	return 0;
}

/* Does an entry that matches name allow port?  (--allow-all: any port.)
 * When none does, rules gets the entries that match the name, for the
 * refusal. */
static int port_allowed(const char *name, unsigned port, char *rules, size_t sz)
{
	size_t o = 0;

	rules[0] = '\0';
	if (B.allow_all)
		return 1;
	for (size_t i = 0; i < B.nallow; i++) {
		int k;

		if (!allow_match(B.allow[i], name))
			continue;
		if (allow_port(B.allow[i], port))
			return 1;
		k = snprintf(rules + o, sz - o, "%s%s", o ? ", " : "", B.allow[i]);
		if (k < 0 || (size_t)k >= sz - o)
			break;
		o += (size_t)k;
	}
	return 0;
}

static void allow_list_text(char *out, size_t sz)
{
	size_t o = 0;

	out[0] = '\0';
	if (B.allow_all) {
		snprintf(out, sz, "every name");
		return;
	}
	if (!B.nallow) {
		snprintf(out, sz, "empty");
		return;
	}
	for (size_t i = 0; i < B.nallow; i++) {
		int k = snprintf(out + o, sz - o, "%s%s", i ? ", " : "", B.allow[i]);

		if (k < 0 || (size_t)k >= sz - o) {
			/* a long list is cut; the ledger and the man page have it all */
			if (sz > 5)
				snprintf(out + sz - 5, 5, " ...");
			return;
		}
		o += (size_t)k;
	}
}

/* Addresses no flow may reach, whatever the name: lib/ranges.c's list
 * (every special-purpose block that is not globally reachable, and
 * multicast), less the host's overrides.  The name of the block, or NULL. */
static const char *range_denied(uint32_t a_net)
{
	return ranges_denied(4, (const uint8_t *)&a_net, B.allow_range, B.nallow_range);
}

/* Is a one of the host's own IPv4 addresses, as they are now?  An
 * interface added since the broker started counts too, and so does every
 * address however many the host has (a fixed-size copy of the list would
 * let the ones past its end through).  -1 when they cannot be read (then
 * nothing is connected: fail closed). */
static int own_addr(uint32_t a)
{
	struct ifaddrs *ifa, *i;
	int own = 0;

	if (getifaddrs(&ifa) < 0)
		return -1;
	for (i = ifa; i && !own; i = i->ifa_next)
		own = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		      ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == a;
	freeifaddrs(ifa);
	return own;
}

/* Does the host deliver a to itself?  Asked of the kernel's routing
 * (RTM_GETROUTE, which needs no privilege), as connect() would route it
 * now: a local, broadcast, anycast or multicast route is the host (or
 * beyond any one flow), whatever own_addr's list of interface addresses
 * says (a whole local route such as 127/8 or one `ip route add local`
 * made, a subnet's broadcast address).  1 when it does, 0 when not (a
 * destination with no route or an unreachable/blackhole/prohibit one just
 * fails to connect), -1 when the kernel cannot be asked (then nothing is
 * connected: fail closed).  The answer is queued by the time send
 * returns, so the recv never waits. */
static int local_route(uint32_t a)
{
	struct {
		struct nlmsghdr n;
		struct rtmsg r;
		struct rtattr at;
		uint32_t dst;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETROUTE,
		       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1 },
		.r = { .rtm_family = AF_INET, .rtm_dst_len = 32 },
		.at = { .rta_len = RTA_LENGTH(sizeof a), .rta_type = RTA_DST },
		.dst = a,
	};
	union {
		struct nlmsghdr n;
		char b[4096];
	} ans;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), ret = -1;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&k, sizeof k) != (ssize_t)sizeof req)
		goto out;
	n = recv(fd, &ans, sizeof ans, MSG_DONTWAIT);
	if (n < (ssize_t)NLMSG_HDRLEN || !NLMSG_OK(&ans.n, (size_t)n) || ans.n.nlmsg_seq != 1)
		goto out;
	if (ans.n.nlmsg_type == NLMSG_ERROR &&
	    ans.n.nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
		int e = -((struct nlmsgerr *)NLMSG_DATA(&ans.n))->error;

		if (e == ENETUNREACH || e == EHOSTUNREACH || e == EINVAL || e == EACCES)
			ret = 0;
	} else if (ans.n.nlmsg_type == RTM_NEWROUTE &&
		   ans.n.nlmsg_len >= NLMSG_LENGTH(sizeof(struct rtmsg))) {
		unsigned char t = ((struct rtmsg *)NLMSG_DATA(&ans.n))->rtm_type;

		ret = t == RTN_LOCAL || t == RTN_BROADCAST || t == RTN_ANYCAST || t == RTN_MULTICAST;
	}
out:
	close(fd);
	return ret;
}

/* ---- epoll helpers ----------------------------------------------------- */

static void ep_add(int fd, struct ep *e, uint32_t ev)
{
	struct epoll_event ee = { .events = ev, .data.ptr = e };

	if (epoll_ctl(B.ep, EPOLL_CTL_ADD, fd, &ee) < 0)
		die(EX_SYS, "unable to add to epoll:");
}

static void ep_mod(int fd, struct ep *e, uint32_t ev)
{
	struct epoll_event ee = { .events = ev, .data.ptr = e };

	if (epoll_ctl(B.ep, EPOLL_CTL_MOD, fd, &ee) < 0)
		die(EX_SYS, "unable to modify epoll:");
}

static void closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ---- proxy flows ------------------------------------------------------- */

static const char *flow_kind(const struct flow *f)
{
	return f->req.connect ? "connect" : "http";
}

static void flow_free_fds(struct flow *f)
{
	closefd(&f->g);
	closefd(&f->u);
	closefd(&f->r);
}

/* End a flow: its ledger line (unless written already, or it never named a
 * target), its fds closed.  The memory lives until the end of this round
 * of events, which may still point at it (st == F_DEAD). */
static void flow_end(struct flow *f, const char *reason)
{
	if (f->st == F_DEAD)
		return;
	if (!f->logged && f->name[0])
		ledger(flow_kind(f), f->name, f->req.port, f->addr, f->up, f->down, 1, reason,
		       mono_ms() - f->start, NULL);
	f->logged = 1;
	flow_free_fds(f);
	f->st = F_DEAD;
	if (f->prev)
		f->prev->next = f->next;
	else
		B.flows = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->next = B.dead_flows;
	B.dead_flows = f;
	B.nflows--;
}

static void set_interest(int fd, struct ep *e, uint32_t *cur, uint32_t want)
{
	if (fd >= 0 && want != *cur) {
		ep_mod(fd, e, want);
		*cur = want;
	}
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
		if (!f->g_eof && f->g2u.len < BUF_CAP)
			ge |= EPOLLIN;
		if (f->u2g.len)
			ge |= EPOLLOUT;
		if (!f->u_eof && f->u2g.len < BUF_CAP)
			ue |= EPOLLIN;
		if (f->g2u.len)
			ue |= EPOLLOUT;
		break;
	case F_RESOLVE:
	case F_DEAD:
		break;
	}
	/* A socket reports EPOLLHUP and EPOLLERR whatever its interest.  In a
	 * relay, pump() acts only on what the interest asks for, so a side that
	 * waits for nothing (its peer reset after a half-close, or its FIN
	 * unread behind a full buffer) would wake a level-triggered loop
	 * forever with nothing to do.  Such a side is edge-triggered: a
	 * hang-up or error is reported once (an error of the guest's side
	 * ends the flow, see on_flow_event), and the level comes back with an
	 * interest, when pump() meets what is left.  In the other states an
	 * interest of 0 is level-triggered on purpose: a hang-up while
	 * resolving or connecting ends the flow. */
	set_interest(f->g, &f->eg, &f->gev, ge ? ge : f->st == F_RELAY ? EPOLLET : 0);
	set_interest(f->u, &f->eu, &f->uev, ue ? ue : f->st == F_RELAY ? EPOLLET : 0);
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
		ledger(flow_kind(f), f->name[0] ? f->name : NULL, f->req.port, 0, f->up, f->down,
		       !denied, reason, mono_ms() - f->start, NULL);
	f->logged = 1;
	n = snprintf(resp, sizeof resp,
		     "HTTP/1.1 %d %s\r\nX-Isopod-Refusal: %s\r\nContent-Type: text/plain\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		     code, text, reason, strlen(body), body);
	if (n > 0)
		(void)!send(f->g, resp, (size_t)n < sizeof resp ? (size_t)n : sizeof resp - 1,
			    MSG_NOSIGNAL | MSG_DONTWAIT);
	shutdown(f->g, SHUT_WR);
	closefd(&f->u);
	closefd(&f->r);
	f->st = F_DRAIN;
	f->deadline = mono_ms() + DRAIN_MS;
	update_interest(f);
}

static void refuse(struct flow *f, int code, const char *reason, int denied, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

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
	/* only the first fill (a head of <= 16 KiB) goes through here */
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
	struct buf *b = &f->g2u;
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

static void start_relay(struct flow *f)
{
	static const char est[] = "HTTP/1.1 200 Connection established\r\n\r\n";

	f->g2u.d = malloc(BUF_CAP);
	f->u2g.d = malloc(BUF_CAP);
	if (!f->g2u.d || !f->u2g.d) {
		refuse(f, 503, "out of memory", 0, "isopod-broker: out of memory\n");
		return;
	}
	if (f->req.connect)
		buf_put(&f->u2g, est, sizeof est - 1);
	else
		rewrite_head(f);
	/* bytes the guest sent after its head (early data) go on */
	buf_put(&f->g2u, f->head + f->hlen, f->headn - f->hlen);
	f->st = F_RELAY;
	f->last = mono_ms();
	update_interest(f);
}

/* Connect to the next resolved address that passes the deny checks. */
static void try_next(struct flow *f)
{
	char ab[INET_ADDRSTRLEN];

	closefd(&f->u); /* which takes it out of epoll */
	f->uev = 0;
	f->addr = 0;
	while (f->ai < f->naddrs) {
		uint32_t a = f->addrs[f->ai++];
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)f->req.port),
					  .sin_addr.s_addr = a };
		const char *blk = range_denied(a);

		if (blk || own_addr(a) != 0 || local_route(a) != 0) {
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
			closefd(&f->u);
			f->nfailed++;
			continue;
		}
		f->addr = a;
		f->st = F_CONNECT;
		f->deadline = mono_ms() + CONNECT_MS;
		f->uev = EPOLLOUT;
		ep_add(f->u, &f->eu, EPOLLOUT);
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

	rand_bytes(&f->qid, sizeof f->qid);
	n = dns_build_query(q, sizeof q, f->qid, f->name, DNS_T_A);
	/* a fresh socket per query: a random source port as well as a random id */
	f->r = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (!n || f->r < 0 ||
	    connect(f->r, (struct sockaddr *)&B.resolver, sizeof B.resolver) < 0 ||
	    send(f->r, q, n, 0) != (ssize_t)n) {
		refuse(f, 502, "resolver failed", 0, "isopod-broker: %s: the resolver failed\n",
		       f->name);
		return;
	}
	ep_add(f->r, &f->er, EPOLLIN);
	f->st = F_RESOLVE;
	f->deadline = mono_ms() + RESOLVE_MS;
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
	closefd(&f->r);
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
	allow_list_text(list, sizeof list);
	if (f->req.ipv6) {
		snprintf(f->name, sizeof f->name, "%s", f->req.host);
		refuse(f, 403, "an IP address, not a name", 1,
		       "isopod-broker: %s is an IPv6 address; IPv6 is not served\n", f->name);
		return;
	}
	if (inet_pton(AF_INET, f->req.host, &ia) == 1) {
		snprintf(f->name, sizeof f->name, "%s", f->req.host);
		if (!B.allow_all) {
			refuse(f, 403, "an IP address, not a name", 1,
			       "isopod-broker: %s is an IP address, not a name in the allowlist (%s)\n",
			       f->name, list);
			return;
		}
		if (ledger_full()) {
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
	if (!name_allowed(f->name)) {
		refuse(f, 403, "not in the allowlist", 1,
		       "isopod-broker: %s is not in the allowlist (%s)\n", f->name, list);
		return;
	}
	/* An entry means HTTP and HTTPS (80, 443); any other port is named
	 * ("NAME:PORT"), so an allowed name is not a tunnel to its ssh. */
	if (!port_allowed(f->name, f->req.port, list, sizeof list)) {
		refuse(f, 403, "port not in the allowlist", 1,
		       "isopod-broker: %s port %u is not allowed: the allowlist entries for %s (%s) "
		       "allow %s; allow that port as %s:%u\n",
		       f->name, f->req.port, f->name, list,
		       strchr(list, ':') ? "only the ports they name (or 80 and 443 without one)" :
					   "ports 80 (HTTP) and 443 (HTTPS) only",
		       f->name, f->req.port);
		return;
	}
	if (ledger_full()) {
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

/* Move what can be moved, both ways, without blocking. */
static void pump(struct flow *f)
{
	ssize_t n;
	int64_t now = mono_ms();

	if (!f->g_eof && f->g2u.len < BUF_CAP) {
		if (f->g2u.off + f->g2u.len == BUF_CAP) {
			memmove(f->g2u.d, f->g2u.d + f->g2u.off, f->g2u.len);
			f->g2u.off = 0;
		}
		n = read(f->g, f->g2u.d + f->g2u.off + f->g2u.len, BUF_CAP - f->g2u.off - f->g2u.len);
		if (n > 0) {
			f->g2u.len += (size_t)n;
			f->last = now;
		} else if (n == 0) {
			f->g_eof = 1;
		} else if (errno != EAGAIN && errno != EINTR) {
			flow_end(f, NULL);
			return;
		}
	}
	if (f->g2u.len) {
		n = send(f->u, f->g2u.d + f->g2u.off, f->g2u.len, MSG_NOSIGNAL);
		if (n > 0) {
			f->g2u.off += (size_t)n;
			f->g2u.len -= (size_t)n;
			f->up += (uint64_t)n;
			f->last = now;
			if (!f->g2u.len)
				f->g2u.off = 0;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			flow_end(f, NULL);
			return;
		}
	}
	if (!f->u_eof && f->u2g.len < BUF_CAP) {
		if (f->u2g.off + f->u2g.len == BUF_CAP) {
			memmove(f->u2g.d, f->u2g.d + f->u2g.off, f->u2g.len);
			f->u2g.off = 0;
		}
		n = read(f->u, f->u2g.d + f->u2g.off + f->u2g.len, BUF_CAP - f->u2g.off - f->u2g.len);
		if (n > 0) {
			f->u2g.len += (size_t)n;
			f->down += (uint64_t)n;
			f->last = now;
		} else if (n == 0) {
			f->u_eof = 1;
		} else if (errno != EAGAIN && errno != EINTR) {
			flow_end(f, NULL);
			return;
		}
	}
	if (f->u2g.len) {
		n = send(f->g, f->u2g.d + f->u2g.off, f->u2g.len, MSG_NOSIGNAL);
		if (n > 0) {
			f->u2g.off += (size_t)n;
			f->u2g.len -= (size_t)n;
			f->last = now;
			if (!f->u2g.len)
				f->u2g.off = 0;
		} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
			flow_end(f, NULL);
			return;
		}
	}
	if (f->g_eof && !f->g2u.len && !f->u_shut) {
		shutdown(f->u, SHUT_WR);
		f->u_shut = 1;
	}
	if (f->u_eof && !f->u2g.len && !f->g_shut) {
		shutdown(f->g, SHUT_WR);
		f->g_shut = 1;
	}
	/* A tunnel ends when both directions are over; a plain request (sent
	 * with Connection: close) when the origin's answer is delivered. */
	if ((f->g_shut && f->u_shut) || (!f->req.connect && f->g_shut)) {
		flow_end(f, NULL);
		return;
	}
	update_interest(f);
}

static void on_accept(void)
{
	for (int k = 0; k < 32; k++) {
		int fd = accept4(B.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct flow *f;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* out of fds: stop accepting for a tick rather than spin */
				epoll_ctl(B.ep, EPOLL_CTL_DEL, B.lfd, NULL);
				B.lfd_paused = 1;
				B.lfd_resume = mono_ms() + 100;
			}
			return;
		}
		if (B.nflows >= MAX_FLOWS || !(f = calloc(1, sizeof *f))) {
			static const char busy[] =
				"HTTP/1.1 503 Service Unavailable\r\nX-Isopod-Refusal: too many flows\r\n"
				"Content-Type: text/plain\r\nContent-Length: 35\r\nConnection: close\r\n\r\n"
				"isopod-broker: too many open flows\n";

			(void)!send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
			close(fd);
			ledger("http", NULL, 0, 0, 0, 0, 0, "too many flows", 0, NULL);
			continue;
		}
		f->g = fd;
		f->u = f->r = -1;
		f->eg = (struct ep){ E_GUEST, f };
		f->eu = (struct ep){ E_UP, f };
		f->er = (struct ep){ E_RES, f };
		f->st = F_HEAD;
		f->start = f->last = mono_ms();
		f->deadline = f->start + HEAD_MS;
		f->gev = EPOLLIN;
		ep_add(fd, &f->eg, EPOLLIN);
		f->next = B.flows;
		if (B.flows)
			B.flows->prev = f;
		B.flows = f;
		B.nflows++;
	}
}

static void on_flow_event(struct ep *e, uint32_t ev)
{
	struct flow *f = e->obj;

	switch (f->st) {
	case F_HEAD:
		if (e->kind == E_GUEST)
			on_head(f);
		break;
	case F_RESOLVE:
		if (e->kind == E_RES)
			on_resolved(f);
		else if (e->kind == E_GUEST && (ev & (EPOLLHUP | EPOLLERR)))
			flow_end(f, "client went away");
		break;
	case F_CONNECT:
		if (e->kind == E_UP)
			on_connected(f);
		else if (e->kind == E_GUEST && (ev & (EPOLLHUP | EPOLLERR)))
			flow_end(f, "client went away");
		break;
	case F_RELAY:
		/* The guest reset its connection: nothing more can reach it.
		 * (With an interest in reading, pump() first reads what came
		 * before the reset, then meets the error.) */
		if (e->kind == E_GUEST && (ev & EPOLLERR) && !(f->gev & EPOLLIN))
			flow_end(f, NULL);
		else
			pump(f);
		break;
	case F_DRAIN:
		if (e->kind == E_GUEST)
			drain(f);
		break;
	case F_DEAD:
		break;
	}
}

/* ---- DNS --------------------------------------------------------------- */

static void shut_down(void);
static int bind_sock(int type, unsigned *port);

static void dns_answer(const struct sockaddr_in *to, const uint8_t *query,
		       const struct dns_query *q, int rcode)
{
	uint8_t out[DNS_QUESTION_MAX];
	size_t n = dns_reply_rcode(out, sizeof out, query, q, rcode);

	if (n)
		(void)!sendto(B.ufd, out, n, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof *to);
}

static void pend_end(struct pend *p)
{
	closefd(&p->fd);
	p->dead = 1;
	if (p->prev)
		p->prev->next = p->next;
	else
		B.pends = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->next = B.dead_pends;
	B.dead_pends = p;
	B.npend--;
}

static void pend_fail(struct pend *p, const char *reason)
{
	char tn[16];

	dns_answer(&p->from, p->qraw, &p->q, DNS_RC_SERVFAIL);
	ledger("dns", p->name, 53, B.resolver.sin_addr.s_addr, p->up, 0, 1, reason,
	       mono_ms() - p->start, dns_type_name(p->qtype, tn, sizeof tn));
	pend_end(p);
}

static void on_pend(struct pend *p)
{
	uint8_t buf[4096];
	ssize_t n;
	char tn[16];

	if (p->dead)
		return;
	n = recv(p->fd, buf, sizeof buf, MSG_TRUNC);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			pend_fail(p, "resolver failed");
		return;
	}
	if ((size_t)n > sizeof buf ||
	    dns_check_reply(buf, (size_t)n, p->qid, p->name, p->qtype) < 0)
		return; /* not our answer (or cut): keep waiting until the deadline */
	buf[0] = (uint8_t)(p->gid >> 8);
	buf[1] = (uint8_t)p->gid;
	(void)!sendto(B.ufd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&p->from,
		      sizeof p->from);
	ledger("dns", p->name, 53, B.resolver.sin_addr.s_addr, p->up, (uint64_t)n, 1, NULL,
	       mono_ms() - p->start, dns_type_name(p->qtype, tn, sizeof tn));
	pend_end(p);
}

static void forward(const struct sockaddr_in *from, const uint8_t *raw,
		    const struct dns_query *q, const char *name)
{
	uint8_t out[DNS_QUESTION_MAX];
	struct pend *p = calloc(1, sizeof *p);
	size_t n;

	if (!p) {
		dns_answer(from, raw, q, DNS_RC_SERVFAIL);
		return;
	}
	p->e = (struct ep){ E_PEND, p };
	p->from = *from;
	p->gid = q->id;
	p->qtype = q->qtype;
	p->q = *q;
	memcpy(p->qraw, raw, q->qend);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->start = mono_ms();
	p->deadline = p->start + RESOLVE_MS;
	rand_bytes(&p->qid, sizeof p->qid);
	/* The broker's own query: only the checked name and the type leave. */
	n = dns_build_query(out, sizeof out, p->qid, name, q->qtype);
	p->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	p->next = B.pends;
	if (B.pends)
		B.pends->prev = p;
	B.pends = p;
	B.npend++;
	if (!n || p->fd < 0 ||
	    connect(p->fd, (struct sockaddr *)&B.resolver, sizeof B.resolver) < 0 ||
	    send(p->fd, out, n, 0) != (ssize_t)n) {
		pend_fail(p, "resolver failed");
		return;
	}
	p->up = n;
	ep_add(p->fd, &p->e, EPOLLIN);
}

static void on_dns(void)
{
	for (int k = 0; k < 64; k++) {
		uint8_t buf[4096];
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		struct dns_query q;
		char name[DNS_NAME_MAX + 1], tn[16];
		const char *reason = NULL;
		ssize_t n = recvfrom(B.ufd, buf, sizeof buf, MSG_TRUNC, (struct sockaddr *)&from, &fl);
		int rc;

		if (n < 0)
			return;
		if (fl != sizeof from || from.sin_family != AF_INET)
			continue;
		if ((size_t)n > sizeof buf)
			n = sizeof buf;
		rc = dns_parse_query(buf, (size_t)n, &q);
		if (rc < 0)
			continue;
		if (rc > 0) {
			dns_answer(&from, buf, &q, rc);
			ledger("dns", q.name[0] ? q.name : NULL, 53, 0, 0, 0, 0, "malformed query", 0,
			       q.qend ? dns_type_name(q.qtype, tn, sizeof tn) : NULL);
			continue;
		}
		dns_type_name(q.qtype, tn, sizeof tn);
		if (q.qclass != DNS_CLASS_IN)
			reason = "not class IN";
		else if (allow_name_norm(name, sizeof name, q.name) < 0)
			reason = "not a host name";
		else if (!name_allowed(name))
			reason = "not in the allowlist";
		if (reason) {
			/* answered here, never forwarded: nothing of it leaves */
			dns_answer(&from, buf, &q, DNS_RC_REFUSED);
			ledger("dns", q.name, 53, 0, 0, 0, 0, reason, 0, tn);
			continue;
		}
		if (ledger_full()) {
			dns_answer(&from, buf, &q, DNS_RC_REFUSED);
			ledger("dns", name, 53, 0, 0, 0, 0, "ledger full", 0, tn);
			continue;
		}
		if (B.npend >= MAX_PEND) {
			dns_answer(&from, buf, &q, DNS_RC_SERVFAIL);
			ledger("dns", name, 53, 0, 0, 0, 1, "too many pending queries", 0, tn);
			continue;
		}
		forward(&from, buf, &q, name);
	}
}

/* ---- the canary -------------------------------------------------------
 *
 * The broker cannot read nftables (that needs CAP_NET_ADMIN), so it asks
 * the table for positive evidence: `inet isopod` turns a datagram from the
 * host to GW:PORT into one to GW:PORT+1, where this broker's canary socket
 * is bound and sends from (isopod-netsetup(8), FAIL CLOSED).  A socket of
 * its own, not the DNS one: a guest flooding DNS cannot crowd the nonces
 * out, and the table drops whatever a guest sends to PORT+1.  No answer
 * before the announce: the broker refuses to start, naming
 * isopod-netsetup.  CANARY_MISSES probes in a row unanswered, the last one
 * for a whole CANARY_EVERY_MS, while serving: it writes
 * a "policy" ledger line, stops serving and exits 111; the routing rules
 * isopod-netsetup leaves outside the table cut what the table no longer
 * filters. */

static void canary_send(void)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr = B.listen,
				  .sin_port = htons((uint16_t)B.canary_port) };

	memcpy(B.nonce[1], B.nonce[0], sizeof B.nonce[0]);
	rand_bytes(B.nonce[0], sizeof B.nonce[0]);
	B.canary_sent = mono_ms();
	B.unanswered++;
	/* a failure (EPERM from some output drop) is just no answer */
	(void)!sendto(B.cfd, B.nonce[0], sizeof B.nonce[0], MSG_DONTWAIT,
		      (const struct sockaddr *)&to, sizeof to);
}

/* Read what came back: a datagram counts only with one of the last two
 * nonces (random, and they never leave the host's loopback path, so a
 * guest cannot send one).  cfd is connected to its own address
 * (canary_start), so the kernel hands it only datagrams from GW:PORT+1,
 * which only this socket holds: a host process that binds *:PORT while the
 * table is gone and sends the nonce back cannot fake an answer, and one
 * flooding GW:PORT while it is up (the table turns that into GW:PORT+1
 * too) cannot crowd the nonces out.  Drained to the end all the same
 * (bounded: a tick is never spent here). */
static void canary_drain(void)
{
	for (int k = 0; k < 4096; k++) {
		uint8_t buf[64];
		ssize_t n = recv(B.cfd, buf, sizeof buf, MSG_TRUNC);

		if (n < 0)
			return;
		if (n == (ssize_t)sizeof B.nonce[0] &&
		    (!memcmp(buf, B.nonce[0], sizeof B.nonce[0]) ||
		     !memcmp(buf, B.nonce[1], sizeof B.nonce[1]))) {
			B.canary_ok = mono_ms();
			B.unanswered = 0;
		}
	}
}

/* Before the announce: the table must answer within CANARY_START_MS. */
static void canary_start(void)
{
	int64_t end = mono_ms() + CANARY_START_MS;
	char ab[INET_ADDRSTRLEN];
	unsigned port = B.canary_port + 1;

	B.cfd = bind_sock(SOCK_DGRAM, &port);
	{
		/* to itself: see canary_drain; sendto still names GW:PORT */
		struct sockaddr_in self = { .sin_family = AF_INET, .sin_addr = B.listen,
					    .sin_port = htons((uint16_t)port) };

		if (connect(B.cfd, (struct sockaddr *)&self, sizeof self) < 0)
			die(EX_SYS, "unable to connect the canary socket:");
	}
	B.canary_ok = 0;
	while (!B.canary_ok && mono_ms() < end) {
		struct pollfd p = { B.cfd, POLLIN, 0 };
		int64_t until = mono_ms() + 200;

		canary_send();
		while (!B.canary_ok && mono_ms() < until &&
		       poll(&p, 1, (int)(until - mono_ms())) > 0)
			canary_drain();
	}
	if (!B.canary_ok)
		die(EX_SYS, "no network policy on %s: the canary of isopod-netsetup's table inet isopod "
		    "(udp %u) did not answer; run isopod-netsetup",
		    inet_ntop(AF_INET, &B.listen, ab, sizeof ab), B.canary_port);
}

/* The "policy" ledger line: written whatever the ledger's cap, once. */
static void ledger_policy_lost(const char *reason)
{
	char ts[64];
	json_t *o = json_pack("{s:s, s:s, s:n, s:i, s:s, s:s}", "time", iso_ms(ts, sizeof ts),
			      "kind", "policy", "name", "port", (int)B.canary_port, "verdict", "lost",
			      "reason", reason);
	char *s;
	size_t n;

	if (o && B.vm)
		json_object_set_new(o, "vm", json_string(B.vm));
	if (!o || !(s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER)))
		die(EX_SYS, "unable to build a ledger line");
	json_decref(o);
	n = strlen(s);
	s[n] = '\n';
	(void)!write(B.ledger, s, n + 1);
	free(s);
}

/* Every tick while serving: probe, and give up when the table is gone.
 * Counted in probes, not in time since the last answer: a broker that was
 * not scheduled for a while (a loaded host) has sent nothing meanwhile,
 * and the answer to a probe is there as soon as its sendto returns. */
static void canary_tick(void)
{
	int64_t now = mono_ms();
	char ab[INET_ADDRSTRLEN], why[256];

	if (!B.canary_port)
		return;
	canary_drain();
	if (now - B.canary_sent < CANARY_EVERY_MS)
		return;
	if (B.unanswered >= CANARY_MISSES) {
		snprintf(why, sizeof why, "network policy lost: isopod-netsetup's table inet isopod "
			 "stopped answering its canary on %s:%u; the VM's network is cut (run "
			 "isopod-netsetup)", inet_ntop(AF_INET, &B.listen, ab, sizeof ab),
			 B.canary_port);
		ledger_policy_lost(why);
		shut_down();
		die(EX_SYS, "%s", why);
	}
	canary_send();
}

/* ---- set-up and loop --------------------------------------------------- */

static void sweep(void)
{
	int64_t now = mono_ms();
	struct flow *f, *fn;
	struct pend *p, *pn;

	for (f = B.flows; f; f = fn) {
		fn = f->next;
		switch (f->st) {
		case F_HEAD:
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
			if (now - f->last >= IDLE_MS)
				flow_end(f, "idle timeout");
			break;
		case F_DRAIN:
			if (now >= f->deadline)
				flow_end(f, NULL);
			break;
		case F_DEAD:
			break;
		}
	}
	for (p = B.pends; p; p = pn) {
		pn = p->next;
		if (now >= p->deadline)
			pend_fail(p, "resolver timed out");
	}
	if (B.lfd_paused && now >= B.lfd_resume) {
		ep_add(B.lfd, &B.elisten, EPOLLIN);
		B.lfd_paused = 0;
	}
}

static void reap(void)
{
	while (B.dead_flows) {
		struct flow *f = B.dead_flows;

		B.dead_flows = f->next;
		free(f->g2u.d);
		free(f->u2g.d);
		free(f);
	}
	while (B.dead_pends) {
		struct pend *p = B.dead_pends;

		B.dead_pends = p->next;
		free(p);
	}
}

static void parse_resolver(const char *s)
{
	char host[64];
	const char *colon = strchr(s, ':');
	size_t hn = colon ? (size_t)(colon - s) : strlen(s);
	long long port = 53;

	if (hn >= sizeof host)
		die(EX_USAGE, "--resolver %s: not an IPv4 address", EXC(s));
	memcpy(host, s, hn);
	host[hn] = '\0';
	B.resolver.sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &B.resolver.sin_addr) != 1)
		die(EX_USAGE, "--resolver %s: not an IPv4 address", EXC(s));
	if (colon && parse_ll(colon + 1, 1, 65535, &port) < 0)
		die(EX_USAGE, "--resolver %s: bad port", EXC(s));
	B.resolver.sin_port = htons((uint16_t)port);
}

/* The first IPv4 nameserver of /etc/resolv.conf (inside `ip netns exec`,
 * the namespace's /etc/netns/NAME/resolv.conf is mounted over it). */
static void default_resolver(void)
{
	FILE *fp = fopen("/etc/resolv.conf", "re");
	char line[512], addr[64];

	if (fp) {
		while (fgets(line, sizeof line, fp)) {
			if (sscanf(line, " nameserver %63s", addr) == 1 &&
			    inet_pton(AF_INET, addr, &B.resolver.sin_addr) == 1) {
				B.resolver.sin_family = AF_INET;
				B.resolver.sin_port = htons(53);
				fclose(fp);
				return;
			}
		}
		fclose(fp);
	}
	die(EX_SYS, "no IPv4 nameserver in /etc/resolv.conf: give --resolver ADDR[:PORT]");
}

static int bind_sock(int type, unsigned *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = B.listen,
				  .sin_port = htons((uint16_t)*port) };
	socklen_t sl = sizeof sa;
	char ab[INET_ADDRSTRLEN];
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

	if (fd < 0)
		die(EX_SYS, "unable to create a socket:");
	/* TCP only: on UDP, SO_REUSEADDR would let two brokers share the port */
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		die(errno == EADDRINUSE ? EX_CONFLICT : EX_SYS, "unable to bind %s %s:%u:",
		    type == SOCK_STREAM ? "TCP" : "UDP", inet_ntop(AF_INET, &B.listen, ab, sizeof ab),
		    *port);
	if (type == SOCK_STREAM && listen(fd, 128) < 0)
		die(EX_SYS, "unable to listen:");
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		*port = ntohs(sa.sin_port);
	return fd;
}

static void announce(void)
{
	char ab[INET_ADDRSTRLEN], rb[INET_ADDRSTRLEN], proxy[32], dns[32], res[32];
	json_t *allow = json_array(), *o;
	int fd;

	inet_ntop(AF_INET, &B.listen, ab, sizeof ab);
	inet_ntop(AF_INET, &B.resolver.sin_addr, rb, sizeof rb);
	snprintf(proxy, sizeof proxy, "%s:%u", ab, B.proxy_port);
	snprintf(dns, sizeof dns, "%s:%u", ab, B.dns_port);
	snprintf(res, sizeof res, "%s:%u", rb, ntohs(B.resolver.sin_port));
	for (size_t i = 0; i < B.nallow; i++)
		json_array_append_new(allow, json_string(B.allow[i]));
	o = json_pack("{s:I, s:s?, s:s, s:s, s:o, s:b}", "pid", (json_int_t)getpid(), "proxy",
		      B.no_proxy ? NULL : proxy, "dns", dns, "resolver", res, "allow", allow,
		      "allow_all", B.allow_all);
	if (!o)
		die(EX_SYS, "unable to build the output");
	{
		json_t *ar = json_array();
		char t[RANGES_TEXT_MAX];

		for (size_t i = 0; i < B.nallow_range; i++)
			json_array_append_new(ar, json_string(range_text(&B.allow_range[i], t, sizeof t)));
		json_object_set_new(o, "allow_ranges", ar);
	}
	if (B.vm)
		json_object_set_new(o, "vm", json_string(B.vm));
	json_emit(o);
	json_decref(o);
	/* The parent reads to EOF: let go of stdout, keep fd 1 taken. */
	if (fclose(stdout) == EOF)
		die(EX_SYS, "unable to close standard output:");
	fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0 && fd != 1) {
		dup2(fd, 1);
		close(fd);
	}
}

static void shut_down(void)
{
	while (B.flows)
		flow_end(B.flows, "broker stopped");
	while (B.pends)
		pend_fail(B.pends, "broker stopped");
	if (B.suppressed) {
		char why[96];

		snprintf(why, sizeof why, "ledger full: %lld refusals not written", B.suppressed);
		ledger("ledger", NULL, 0, 0, 0, 0, 0, why, 0, NULL);
	}
	reap();
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "ledger", required_argument, NULL, 'L' },
		{ "proxy-port", required_argument, NULL, 'p' },
		{ "dns-port", required_argument, NULL, 'd' },
		{ "allow", required_argument, NULL, 'a' },
		{ "allow-all", no_argument, NULL, 'A' },
		{ "allow-range", required_argument, NULL, 'R' },
		{ "no-proxy", no_argument, NULL, 'n' },
		{ "resolver", required_argument, NULL, 'r' },
		{ "parent", required_argument, NULL, 'P' },
		{ "vm", required_argument, NULL, 'v' },
		{ "canary", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen_s = NULL, *ledger_s = NULL, *resolver_s = NULL, *why;
	long long v, parent = 0;
	struct epoll_event evs[64];
	struct rlimit rl;
	sigset_t ss;
	int c, stop = 0;

	progname = "isopod-broker";
	B.proxy_port = 3128;
	B.dns_port = 1053;
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			listen_s = optarg;
			break;
		case 'L':
			ledger_s = optarg;
			break;
		case 'p':
		case 'd':
			if (parse_ll(optarg, 0, 65535, &v) < 0)
				die(EX_USAGE, "--%s %s: out of range 0..65535",
				    c == 'p' ? "proxy-port" : "dns-port", EXC(optarg));
			*(c == 'p' ? &B.proxy_port : &B.dns_port) = (unsigned)v;
			break;
		case 'a': {
			char norm[ALLOW_PATTERN_MAX];

			if (allow_norm(norm, sizeof norm, optarg, &why) < 0)
				die(EX_USAGE, "--allow %s: %s", EXC(optarg), why);
			if (B.nallow >= MAX_ALLOW)
				die(EX_USAGE, "--allow: more than %d patterns", MAX_ALLOW);
			if (!(B.allow[B.nallow++] = strdup(norm)))
				die(EX_SYS, "out of memory");
			break;
		}
		case 'A':
			B.allow_all = 1;
			break;
		case 'R': {
			struct range r;

			if (range_parse(optarg, &r, &why) < 0 || ranges_override_check(&r, &why) < 0)
				die(EX_USAGE, "--allow-range %s: %s", optarg, why);
			if (B.nallow_range >= RANGES_ALLOW_MAX)
				die(EX_USAGE, "--allow-range: more than %d ranges", RANGES_ALLOW_MAX);
			B.allow_range[B.nallow_range++] = r;
			break;
		}
		case 'n':
			B.no_proxy = 1;
			break;
		case 'r':
			resolver_s = optarg;
			break;
		case 'P':
			if (parse_ll(optarg, 1, 0x7fffffff, &parent) < 0)
				die(EX_USAGE, "--parent %s: not a pid", EXC(optarg));
			break;
		case 'v':
			B.vm = optarg;
			break;
		case 'c':
			if (parse_ll(optarg, 1, 65534, &v) < 0)
				die(EX_USAGE, "--canary %s: out of range 1..65534", optarg);
			B.canary_port = (unsigned)v;
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (optind != argc || !listen_s || !ledger_s)
		die(EX_USAGE, "usage: %s", USAGE);
	if (inet_pton(AF_INET, listen_s, &B.listen) != 1)
		die(EX_USAGE, "--listen %s: not an IPv4 address", EXC(listen_s));
	if (resolver_s)
		parse_resolver(resolver_s);
	else
		default_resolver();

	/* Signals through a signalfd, blocked before PDEATHSIG can fire. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0 ||
	    (B.sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		die(EX_SYS, "unable to set up signals:");
	if (parent) {
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0)
			die(EX_SYS, "unable to set the parent-death signal:");
		/* the parent may have died before prctl: then nobody would stop us */
		if (getppid() != (pid_t)parent)
			die(EX_SYS, "parent %lld is gone", parent);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	B.ledger_max = 64ll << 20;
	{
		const char *e = getenv("ISOPOD_LEDGER_MAX");
		long long lm;

		if (e && *e && parse_ll(e, 1024, 1ll << 40, &lm) == 0)
			B.ledger_max = lm;
	}
	B.ledger = open(ledger_s, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (B.ledger < 0)
		die(EX_SYS, "unable to open the ledger %s:", ledger_s);
	{
		struct stat lst;

		if (fstat(B.ledger, &lst) == 0)
			B.ledger_bytes = (long long)lst.st_size;
	}
	if (!B.no_proxy)
		B.lfd = bind_sock(SOCK_STREAM, &B.proxy_port);
	B.ufd = bind_sock(SOCK_DGRAM, &B.dns_port);
	if ((B.ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die(EX_SYS, "unable to create an epoll instance:");
	B.elisten = (struct ep){ E_LISTEN, NULL };
	B.edns = (struct ep){ E_DNS, NULL };
	B.esig = (struct ep){ E_SIG, NULL };
	if (B.lfd >= 0)
		ep_add(B.lfd, &B.elisten, EPOLLIN);
	ep_add(B.ufd, &B.edns, EPOLLIN);
	ep_add(B.sfd, &B.esig, EPOLLIN);
	if (B.canary_port)
		canary_start();
	announce();

	while (!stop) {
		int n = epoll_wait(B.ep, evs, 64, TICK_MS);

		if (n < 0 && errno != EINTR)
			die(EX_SYS, "epoll_wait:");
		for (int i = 0; i < n; i++) {
			struct ep *e = evs[i].data.ptr;

			switch (e->kind) {
			case E_LISTEN:
				on_accept();
				break;
			case E_DNS:
				on_dns();
				break;
			case E_SIG: {
				struct signalfd_siginfo si;

				while (read(B.sfd, &si, sizeof si) == (ssize_t)sizeof si)
					stop = 1;
				break;
			}
			case E_GUEST:
			case E_UP:
			case E_RES:
				on_flow_event(e, evs[i].events);
				break;
			case E_PEND:
				on_pend(e->obj);
				break;
			}
		}
		sweep();
		reap();
		canary_tick();
	}
	shut_down();
	return 0;
}
