/* advprobe.c - the adverse suite's probes and the host's evidence; see
 * adverse.h. */
#include "adverse.h"
#include "dns.h"
#include "proc.h"
#include "ruleset.h"
#include "sniff.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <linux/if_arp.h>
#include <linux/if_packet.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void adv_fatal(struct adv *a, int code, const char *fmt, ...)
{
	int e = errno;
	size_t n = strlen(fmt), k;
	va_list ap;

	if (a->fatal[0])
		return;
	va_start(ap, fmt);
	vsnprintf(a->fatal, sizeof a->fatal, fmt, ap);
	va_end(ap);
	k = strlen(a->fatal);
	if (n && fmt[n - 1] == ':')
		snprintf(a->fatal + k, sizeof a->fatal - k, " %s", strerror(e));
	a->fatal_code = code;
}

/* What the sniffer counted for one probe. */
struct seen {
	long in, out, back, payload, drops;
};

static int adv_addr(const char *s, int *af, uint8_t a[16])
{
	if (inet_pton(AF_INET, s, a) == 1)
		return *af = 4, 0;
	if (inet_pton(AF_INET6, s, a) == 1)
		return *af = 6, 0;
	return -1;
}

/* Drain the packet socket: everything up to now belongs to no probe. */
static void sniff_drain(int fd)
{
	uint8_t b[2048];
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	while (recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0)
		;
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl); /* resets them */
}

/* Count what the packet socket saw since the last drain, for a probe from
 * vm (its tap) to addr (proto, port; port -1: any).  needle: bytes that
 * must not leave (DNS exfiltration), else NULL. */
static struct seen sniff_count(int fd, const struct avm *vm, const char *addr, int proto, int port,
			       const char *needle, const char *leak)
{
	struct seen s = { 0 };
	uint8_t b[4096], ta[16], ga[16], la[16];
	int taf = 0, gaf = 0, laf = 0;
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	if (addr && adv_addr(addr, &taf, ta) < 0)
		taf = 0;
	if (leak && adv_addr(leak, &laf, la) < 0)
		laf = 0;
	adv_addr(vm->guest, &gaf, ga);
	for (;;) {
		struct sockaddr_ll ll;
		socklen_t ls = sizeof ll;
		struct sniff_pkt pk;
		ssize_t n = recvfrom(fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&ll, &ls);
		int alen, to_t, from_t, pmatch;

		if (n < 0)
			break;
		if (sniff_parse(b, (size_t)n, ll.sll_hatype, &pk) < 0)
			continue;
		alen = pk.af == 4 ? 4 : 16;
		to_t = taf && pk.af == taf && !memcmp(pk.dst, ta, (size_t)alen);
		from_t = taf && pk.af == taf && !memcmp(pk.src, ta, (size_t)alen);
		pmatch = pk.proto == proto && (port < 0 || pk.dport == port);
		if (ll.sll_pkttype != PACKET_OUTGOING && ll.sll_ifindex == vm->ifindex) {
			/* from the guest, on its tap: the probe reached the host */
			if (pk.af == gaf && !memcmp(pk.src, ga, 4) && (needle ? pmatch : to_t && pmatch))
				s.in++;
		} else if (ll.sll_pkttype == PACKET_OUTGOING) {
			if (ll.sll_ifindex == vm->ifindex) {
				/* an answer from the target's probed port back to the guest */
				if (from_t && pk.proto == proto && (port < 0 || pk.sport == port))
					s.back++;
			} else if (to_t && pmatch) {
				/* (the port too: the brokers' canaries go to their
				 * gateways every second) */
				s.out++;
			} else if (laf && pk.af == laf && !memcmp(pk.dst, la, (size_t)alen)) {
				/* anything for the address the broker was asked for */
				s.out++;
			}
			if (needle && ll.sll_ifindex != vm->ifindex &&
			    sniff_payload_has(&pk, needle, strlen(needle)))
				s.payload++;
		}
	}
	if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl) == 0)
		s.drops = ts.tp_drops;
	return s;
}

int adv_own_open(struct adv *a, const char *addr, int port, int proto)
{
	struct own *o;
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} u = { 0 };
	int af, one = 1, fd;
	uint8_t b[16];
	socklen_t sl;

	if (a->nown >= ADV_MAXOWN || adv_addr(addr, &af, b) < 0)
		return errno = EINVAL, -1;
	if (af == 4) {
		u.in.sin_family = AF_INET, u.in.sin_port = htons((uint16_t)port);
		memcpy(&u.in.sin_addr, b, 4);
		sl = sizeof u.in;
	} else {
		u.in6.sin6_family = AF_INET6, u.in6.sin6_port = htons((uint16_t)port);
		memcpy(&u.in6.sin6_addr, b, 16);
		sl = sizeof u.in6;
	}
	fd = socket(af == 4 ? AF_INET : AF_INET6,
		    (proto == IPPROTO_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* No IP_FREEBIND: the bind must fail for an address that is not this
	 * host's, or a "host address" target could be any silent address. */
	if (bind(fd, &u.sa, sl) < 0 || (proto == IPPROTO_TCP && listen(fd, 8) < 0)) {
		int e = errno;

		close(fd);
		return errno = e, -1;
	}
	o = &a->own[a->nown++];
	*o = (struct own){ .port = port, .proto = proto, .fd = fd };
	snprintf(o->addr, sizeof o->addr, "%s", addr);
	return 0;
}

static void rebind_serve(struct adv *a, int fd);

/* Take what arrived on the doctor's own sockets, counting each hit; a TCP
 * connection gets a line and is closed, so a probe that got in ends at
 * once with an answer instead of waiting out its timeout. */
static void own_service(struct adv *a)
{
	static const char hello[] = "isopod-doctor: you reached a listener the doctor owns\n";
	char b[512];
	int i, c;

	for (i = 0; i < a->nown; i++) {
		struct own *o = &a->own[i];

		if (o->proto == IPPROTO_TCP)
			while ((c = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
				if (write(c, hello, sizeof hello - 1) < 0) {
					/* the hit counts all the same */
				}
				close(c), o->hits++;
			}
		else if (o->rebind)
			rebind_serve(a, o->fd);
		else
			while (recv(o->fd, b, sizeof b, MSG_DONTWAIT) >= 0)
				o->hits++;
	}
}

/* Hits on the doctor's own sockets for addr/proto since the last call. */
static long own_hits(struct adv *a, const char *addr, int proto)
{
	long n = 0;
	int i;

	own_service(a);
	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			n += a->own[i].hits, a->own[i].hits = 0;
	return n;
}

int adv_own_has(const struct adv *a, const char *addr, int proto)
{
	int i;

	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			return 1;
	return 0;
}

/* A tool's stdout (at most 4 MiB) as one JSON value, the doctor's own
 * listeners served while it runs (a guest connecting to one must get in
 * and out while the probe runs, not wait for it to end); NULL if none. */
static json_t *read_serving(struct adv *a, int fd)
{
	size_t n = 0, cap = 0;
	char *buf = NULL;
	json_t *j;

	for (;;) {
		struct pollfd pf[1 + ADV_MAXOWN] = { { .fd = fd, .events = POLLIN } };
		int i, np = 1;
		ssize_t r;

		for (i = 0; i < a->nown; i++)
			pf[np++] = (struct pollfd){ .fd = a->own[i].fd, .events = POLLIN };
		if (poll(pf, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			adv_fatal(a, EX_SYS, "unable to poll:");
			break;
		}
		own_service(a);
		if (!pf[0].revents)
			continue;
		if (n + 65536 > cap) {
			char *nb;

			if (cap >= (4u << 20))
				break;
			cap = cap ? cap * 2 : 65536;
			if (!(nb = realloc(buf, cap))) {
				adv_fatal(a, EX_SYS, "out of memory");
				break;
			}
			buf = nb;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	j = buf && !a->fatal[0] ? json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(buf);
	return j;
}

json_t *adv_tool_json(struct adv *a, char **av, int in, int *st)
{
	char path[PATH_MAX];
	struct proc_spec ps = PROC_SPEC(av);
	int pfd[2], w = 0;
	json_t *out;
	pid_t pid;

	*st = EX_SYS;
	if (a->fatal[0])
		return NULL;
	/* (a path over PATH_MAX: its first 64 bytes are libexec's) */
	if (pathn(path, sizeof path, "%s/%s", a->libexec, av[0]) < 0)
		return adv_fatal(a, EX_USAGE, "path too long: %.64s...", a->libexec), NULL;
	ps.file = path;
	ps.in = in;
	ps.err = PROC_INHERIT;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return adv_fatal(a, EX_SYS, "unable to make a pipe:"), NULL;
	ps.out = pfd[1];
	if ((pid = proc_spawn(&ps)) < 0) {
		adv_fatal(a, EX_SYS, "unable to start %s:", path);
		close(pfd[0]), close(pfd[1]);
		return NULL;
	}
	close(pfd[1]);
	out = read_serving(a, pfd[0]);
	close(pfd[0]);
	if (proc_wait(pid, &w) < 0) {
		adv_fatal(a, EX_SYS, "unable to wait for %s:", path);
		json_decref(out);
		return NULL;
	}
	if (a->fatal[0]) {
		json_decref(out);
		return NULL;
	}
	*st = proc_status(w);
	return out;
}

/* isopod-exec --vm ID -- sh -c SCRIPT: its result, or NULL. */
static json_t *guest_sh(struct adv *a, const struct avm *vm, const char *script, int tmo_ms, int *st)
{
	char t[32];
	char *av[] = { "isopod-exec", "--vm", (char *)vm->id, "--timeout-ms", t, "--", "sh", "-c",
		       (char *)script, NULL };

	snprintf(t, sizeof t, "%d", tmo_ms);
	return adv_tool_json(a, av, PROC_NULL, st);
}

/* The ledger of vm: its path into p. */
static int ledger_path(struct adv *a, const struct avm *vm, char *p, size_t psz)
{
	/* (a path over PATH_MAX: its first 64 bytes are the store's) */
	if (pathn(p, psz, "%s/vms/%s/ledger.jsonl", store_home(), vm->id) < 0)
		return adv_fatal(a, EX_USAGE, "path too long: %.64s...", store_home()), -1;
	return 0;
}

/* The ledger's size now: where a probe's lines will start (0 none yet). */
static long long ledger_size(struct adv *a, const struct avm *vm)
{
	char p[PATH_MAX];
	struct stat st;

	if (ledger_path(a, vm, p, sizeof p) < 0 || stat(p, &st) < 0)
		return 0;
	return (long long)st.st_size;
}

/* The ledger of vm has a line, written at or after byte from, refusing
 * `name` (kind dns or http) on port (0: any). */
static int ledger_refused(struct adv *a, const struct avm *vm, long long from, const char *name,
			  const char *kind, int port)
{
	char p[PATH_MAX], line[4096];
	FILE *f;
	int found = 0;

	if (ledger_path(a, vm, p, sizeof p) < 0 || !(f = fopen(p, "re")))
		return 0;
	if (fseeko(f, (off_t)from, SEEK_SET) < 0) {
		fclose(f);
		return 0;
	}
	while (!found && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		const char *n = json_string_value(json_object_get(j, "name"));
		const char *k = json_string_value(json_object_get(j, "kind"));
		const char *v = json_string_value(json_object_get(j, "verdict"));

		found = n && k && v && !strcmp(n, name) && !strcmp(k, kind) && !strcmp(v, "denied") &&
			(!port || json_integer_value(json_object_get(j, "port")) == port);
		json_decref(j);
	}
	fclose(f);
	return found;
}

/* A probe: what the guest runs and what the host must see. */
struct probe {
	const char *cls;
	char name[128];
	int proto;              /* IPPROTO_TCP/UDP/ICMP; 0: no network (none) */
	char addr[64];
	int port;               /* TCP/UDP port; -1 any */
	const char *tool;       /* the guest program */
	char control[1024], attempt[1024];
	char ledger_name[128];  /* a refusal due in the ledger ("" none) */
	const char *ledger_kind;
	int ledger_port;        /* its port, the probe's own token (0: any) */
	char leak[64];          /* nothing at all may leave for it ("" none) */
	char needle[64];        /* bytes that must not leave ("" none) */
	int nonic;              /* class none: host evidence from the record */
	int broker;             /* the target is the slot's broker: its answer (a refusal) is due */
	struct xev *x;          /* a class with evidence of its own (spoofing, ARP, IPv6,
				 * rebinding): its counts stand for the packet socket's */
};

/* The evidence of the classes that the packet socket's match (the guest's
 * own IPv4 source to the target) cannot see: its own packet socket
 * (before: opened; after: counted), and whatever else after() checks. */
struct xev {
	int (*after)(struct adv *a, const struct avm *vm, struct xev *x); /* 0: evidence present */
	int fd;
	long in, out, back;
	json_t *ev;             /* merged into the evidence step */
	char why[200];          /* why after() found the evidence missing */
	void *ctx;
	/* The tap filter's counter (TCF_*) the class's frames must move, -1
	 * none (the broker's flow: passed to it, as any broker probe).  by
	 * names the enforcement when it moved: "tc" where the filter drops
	 * them (spoofed sources: TCF_SPOOF; IPv6: TCF_NONIP); ARP passes the
	 * filter by design (TCF_ARP), so its enforcement is the host's
	 * neighbour table that after() reads ("neighbours"). */
	int tc_reason;
	const char *by;
};
static void xev_before(struct xev *x);

/* Shell for one guest request: "R A" lines (status, answered 0/1). */
#define SH_TCP "o=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | %s -w %d %s %d 2>/dev/null); r=$?; " \
	       "if [ -n \"$o\" ]; then a=1; else a=0; fi; echo \"%s $r $a\""
#define SH_UDP "o=$(nslookup -port=%d -timeout=%d -retry=1 doctor-probe.invalid %s 2>&1); r=$?; " \
	       "case $o in *NXDOMAIN*|*REFUSED*|*Name:*) a=1;; *) a=0;; esac; echo \"%s $r $a\""
#define SH_ICMP "ping -c1 -W%d %s >/dev/null 2>&1; r=$?; " \
		"if [ $r = 0 ]; then a=1; else a=0; fi; echo \"%s $r $a\""

static void sh_tcp(char *b, size_t n, const char *nc, int tmo, const char *addr, int port,
		   const char *tag)
{
	snprintf(b, n, SH_TCP, nc, tmo, addr, port, tag);
}

/* The control of a protocol from vm: what its mode allows. */
static int control_for(struct adv *a, const struct avm *vm, struct probe *p)
{
	switch (p->proto) {
	case IPPROTO_TCP:
		if (!strcmp(vm->mode, "filtered")) {
			/* the broker's proxy answers (a refusal is an answer) */
			snprintf(p->control, sizeof p->control,
				 "o=$(printf 'GET http://doctor-control.invalid/ HTTP/1.0\\r\\n\\r\\n' | "
				 "%s -w %d %s 3128 2>/dev/null); r=$?; case $o in HTTP/*) a=1;; *) a=0;; "
				 "esac; echo \"control $r $a\"", a->nc, a->tmo + 1, vm->gw);
			return 0;
		}
		if (a->open_control) {
			char h[64];
			const char *c = strrchr(a->open_control, ':');

			snprintf(h, sizeof h, "%.*s", (int)(c - a->open_control), a->open_control);
			sh_tcp(p->control, sizeof p->control, a->nc, a->tmo + 1, h, atoi(c + 1),
			       "control");
			return 0;
		}
		return -1;
	case IPPROTO_UDP:
		/* the gateway's DNS (the broker) answers, a refusal included */
		snprintf(p->control, sizeof p->control, SH_UDP, 53, a->tmo + 1, vm->gw, "control");
		return 0;
	case IPPROTO_ICMP:
		snprintf(p->control, sizeof p->control, SH_ICMP, a->tmo + 1, vm->gw, "control");
		return 0;
	default:
		return -1;
	}
}

static json_t *step(const char *name, int ok, json_t *ev)
{
	json_t *s = json_pack("{s:s, s:b}", "step", name, "ok", ok);

	if (ev) {
		json_object_update(s, ev);
		json_decref(ev);
	}
	return s;
}

/* "tag R A" out of the guest's output; -1 when the line is missing. */
static int line_of(const char *out, const char *tag, int *r, int *ans)
{
	const char *l = out;
	size_t tl = strlen(tag);

	while (l && *l) {
		if (!strncmp(l, tag, tl) && l[tl] == ' ' && sscanf(l + tl, " %d %d", r, ans) == 2)
			return 0;
		l = strchr(l, '\n');
		l = l ? l + 1 : NULL;
	}
	return -1;
}

/* Does the VM's QEMU have no NIC?  The record's net is null and its
 * command line has no -netdev/-nic.  *why on failure. */
static int no_nic(const struct avm *vm, char *why, size_t wsz)
{
	json_t *rec = vm_read(vm->id);
	json_int_t qp = json_integer_value(json_object_get(rec, "qemu_pid"));
	char p[64], b[16384];
	ssize_t n, i;
	int fd, bad = 0;

	if (!rec)
		return snprintf(why, wsz, "no record"), -1;
	if (json_string_value(json_object_get(json_object_get(rec, "net"), "tap"))) {
		json_decref(rec);
		return snprintf(why, wsz, "the record has a network"), -1;
	}
	json_decref(rec);
	snprintf(p, sizeof p, "/proc/%lld/cmdline", (long long)qp);
	if (qp <= 0 || (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return snprintf(why, wsz, "its QEMU (pid %lld) is not there", (long long)qp), -1;
	n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return snprintf(why, wsz, "its QEMU's command line is unreadable"), -1;
	b[n] = 0;
	for (i = 0; i < n; i += (ssize_t)strlen(b + i) + 1)
		bad |= !strcmp(b + i, "-netdev") || !strcmp(b + i, "-nic") || !strcmp(b + i, "-net");
	if (bad)
		return snprintf(why, wsz, "its QEMU has a network device"), -1;
	return 0;
}

/* The enforcement counters of a tap, read around a probe: its tc filter's
 * (by verdict and reason) and isopod's drop rules'. */
struct counters {
	int tc_ok;                       /* the tap's filter is ours and its counters read */
	uint64_t tc[TCFILTER_NCOUNT];
	int nft_ok;
	struct ruleset_drop *nft;
	size_t nnft;
};

static void counters_read(const struct avm *vm, struct counters *c)
{
	struct tcfilter_state st;
	char msg[256];

	*c = (struct counters){ 0 };
	if (vm->ifindex > 0 && tcfilter_read(vm->ifindex, &st, msg, sizeof msg) == 0 && st.ours &&
	    st.filters == 1 && st.counts_read) {
		c->tc_ok = 1;
		memcpy(c->tc, st.counts, sizeof c->tc);
	}
	c->nft_ok = ruleset_drops(&c->nft, &c->nnft, msg, sizeof msg) == 0;
}

/* What moved between b and e: the evidence's "tc_filter" (null when the
 * tap's filter could not be read both times) and "nft_drops" (the isopod
 * drop rules whose counters moved); *passed, *dropped (IPv4 drops: not the
 * guest's own IPv6 or other chatter) and *ndrop their sums. */
static json_t *counters_delta(const struct counters *b, const struct counters *e, long *passed,
			      long *dropped, long *ndrop)
{
	json_t *ev = json_object(), *tc = json_null(), *nd = json_array();
	size_t i, j;
	int r;

	*passed = *dropped = *ndrop = 0;
	if (b->tc_ok && e->tc_ok) {
		tc = json_object();
		for (r = 0; r < TCFILTER_NCOUNT; r++) {
			long d = (long)(e->tc[r] - b->tc[r]);

			if (!tcfilter_count_names[r][0])
				continue;
			json_object_set_new(tc, tcfilter_count_names[r], json_integer(d));
			if (r == TCF_PASSED)
				*passed += d;
			else if (r != TCF_ARP && r != TCF_NONIP)
				*dropped += d;
		}
	}
	for (i = 0; i < e->nnft; i++)
		for (j = 0; j < b->nnft; j++)
			if (e->nft[i].handle == b->nft[j].handle && !strcmp(e->nft[i].chain, b->nft[j].chain) &&
			    e->nft[i].packets > b->nft[j].packets) {
				long d = (long)(e->nft[i].packets - b->nft[j].packets);

				*ndrop += d;
				json_array_append_new(nd, json_pack("{s:s, s:I, s:I}", "chain", e->nft[i].chain,
								    "handle", (json_int_t)e->nft[i].handle,
								    "packets", (json_int_t)d));
			}
	json_object_set_new(ev, "tc_filter", tc);
	json_object_set_new(ev, "nft_drops", b->nft_ok && e->nft_ok ? nd : (json_decref(nd), json_null()));
	return ev;
}

/* Serve the doctor's listeners for ms more: a packet still on its way when
 * the guest's program gave up is counted (the capture and the hits). */
static void grace(struct adv *a, int ms)
{
	int64_t end = mono_ms() + ms, left;

	while ((left = end - mono_ms()) > 0) {
		struct pollfd pf[ADV_MAXOWN];
		int i;

		for (i = 0; i < a->nown; i++)
			pf[i] = (struct pollfd){ .fd = a->own[i].fd, .events = POLLIN };
		if (poll(pf, (nfds_t)a->nown, (int)left) < 0 && errno != EINTR)
			break;
		own_service(a);
	}
}

static void run_probe(struct adv *a, const struct avm *vm, struct probe *p)
{
	char script[4096], why[256] = "";
	json_t *steps = json_array(), *res = NULL, *ev;
	int st = 0, live, tool_ok, cr = -1, ca = 0, ar = -1, aa = 0, ok_ctl, att_blocked, ev_ok;
	int xok = 1;
	char xwhy[96] = "";
	const char *out = "", *verdict;
	long hits = 0;
	struct seen s = { 0 };
	int64_t t0 = mono_ms();
	struct counters cb = { 0 }, ce = { 0 };
	long tc_pass = 0, tc_drop = 0, nft_drop = 0;
	long long lfrom = 0;
	int enforced = 0, led = 1, tc_absent = 0, routed = 0;
	const char *by = NULL;

	if (a->fatal[0] || !adv_class_on(a, p->cls)) {
		json_decref(steps);
		return; /* the suite ends without a report; or --class left it out */
	}
	/* 1. liveness, right before: the lock held, the agent runs `true` */
	live = vm_running(vm->id);
	if (live) {
		res = guest_sh(a, vm, "true", 30000, &st);
		live = st == 0 && json_integer_value(json_object_get(res, "exit_code")) == 0 &&
		       json_is_integer(json_object_get(res, "exit_code"));
		json_decref(res);
		res = NULL;
	}
	json_array_append_new(steps, step("liveness", live,
					  json_pack("{s:s, s:b, s:i}", "vm", vm->id, "lock_held",
						    vm_running(vm->id), "noop_status", st)));
	if (!live) {
		json_array_append_new(steps, step("tooling", 0, NULL));
		json_array_append_new(steps, step("control", 0, NULL));
		json_array_append_new(steps, step("attempt", 0, NULL));
		json_array_append_new(steps, step("evidence", 0, NULL));
		verdict = "error";
		snprintf(why, sizeof why, "the VM is not running (lock free or agent silent)");
		goto done;
	}
	/* 2-4 in one request: the tool, the control, the attempt */
	snprintf(script, sizeof script,
		 "command -v %s >/dev/null 2>&1; echo \"tooling $?\"\n%s\n%s\n", p->tool, p->control,
		 p->attempt);
	if (!p->nonic) {
		counters_read(vm, &cb);
		lfrom = ledger_size(a, vm);
	}
	sniff_drain(a->sniff);
	if (p->proto)
		own_hits(a, p->addr, p->proto);
	if (p->x)
		xev_before(p->x);
	res = guest_sh(a, vm, script, (a->tmo * 3 + 20) * 1000, &st);
	grace(a, ADV_GRACE_MS);
	s = sniff_count(a->sniff, vm, p->proto ? p->addr : NULL, p->proto, p->port,
			p->needle[0] ? p->needle : NULL, p->leak[0] ? p->leak : NULL);
	if (!p->nonic)
		counters_read(vm, &ce);
	if (p->x) {
		xok = p->x->after(a, vm, p->x) == 0;
		s.in = p->x->in, s.out = p->x->out, s.back = p->x->back;
	}
	if (p->proto)
		hits = own_hits(a, p->addr, p->proto);
	out = json_string_value(json_object_get(res, "stdout"));
	if (!out)
		out = "";
	tool_ok = res && !json_is_true(json_object_get(res, "timed_out")) &&
		  strstr(out, "tooling 0\n") != NULL;
	if (line_of(out, "control", &cr, &ca) < 0 || line_of(out, "attempt", &ar, &aa) < 0)
		tool_ok = 0;
	/* the program itself must have run: not 126/127, not a signal */
	if (cr == 126 || cr == 127 || cr > 128 || ar == 126 || ar == 127 || ar > 128)
		tool_ok = 0;
	json_array_append_new(steps, step("tooling", tool_ok,
					  json_pack("{s:s, s:b, s:i, s:i}", "program", p->tool,
						    "exec_timed_out",
						    json_is_true(json_object_get(res, "timed_out")),
						    "control_status", cr, "attempt_status", ar)));
	ok_ctl = tool_ok && ca == 1;
	json_array_append_new(steps, step("control", ok_ctl, json_pack("{s:i, s:b}", "status", cr,
									"answered", ca == 1)));
	att_blocked = aa != 1;
	json_array_append_new(steps, step("attempt", tool_ok && !att_blocked,
					  json_pack("{s:s, s:i, s:b}", "target", p->addr, "status", ar,
						    "answered", aa == 1)));
	/* 5. the host's evidence */
	if (p->nonic) {
		ev_ok = no_nic(vm, why, sizeof why) == 0;
		ev = json_pack("{s:b, s:s?}", "no_nic", ev_ok, "why", ev_ok ? NULL : why);
	} else {
		json_t *cev = counters_delta(&cb, &ce, &tc_pass, &tc_drop, &nft_drop);

		led = !p->ledger_name[0] ||
		      ledger_refused(a, vm, lfrom, p->ledger_name, p->ledger_kind, p->ledger_port);
		/* isopod's enforcement took the attempt: its tap's filter (ours,
		 * read before and after) dropped it or passed it to a drop rule
		 * of the table that moved; a broker's refusal: passed to it.  An
		 * open VM's packet for another VM is dropped by the routing
		 * before any rule (the reverse-path lookup meets the other tap's
		 * fail-closed rule; its host check tests that it works): passed
		 * by the filter, and nothing out, is its evidence. */
		tc_absent = !json_is_object(json_object_get(cev, "tc_filter"));
		routed = !strcmp(p->cls, "other-vm") && !strcmp(vm->mode, "open");
		by = tc_absent ? NULL : p->broker ? (tc_pass > 0 ? "broker" : NULL) :
		     tc_drop > 0 ? "tc" : nft_drop > 0 ? "nft" : routed && tc_pass > 0 ? "routing" : NULL;
		/* a class with evidence of its own: its filter counter, by name */
		if (p->x && !p->broker && !tc_absent) {
			int r = p->x->tc_reason;

			by = r >= 0 && ce.tc[r] > cb.tc[r] && (r != TCF_ARP || xok) ? p->x->by : NULL;
			snprintf(xwhy, sizeof xwhy, "the tap filter's %s counter did not move",
				 r >= 0 ? tcfilter_count_names[r] : "?");
		}
		enforced = by != NULL;
		ev_ok = s.in > 0 && s.out == 0 && (p->broker || s.back == 0) && s.payload == 0 &&
			hits == 0 && s.drops == 0 && led && enforced;
		ev = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "tap", vm->tap, "in_from_guest",
			       (json_int_t)s.in, "out_to_target", (json_int_t)s.out, "back_to_guest",
			       (json_int_t)s.back, "own_listener_hits", (json_int_t)hits,
			       "capture_drops", (json_int_t)s.drops, "leaked_payload",
			       (json_int_t)s.payload);
		if (p->ledger_name[0])
			json_object_set_new(ev, "ledger_refusal", json_boolean(led));
		json_object_update(ev, cev);
		json_decref(cev);
		json_object_set_new(ev, "enforced", json_boolean(enforced));
		json_object_set_new(ev, "enforced_by", by ? json_string(by) : json_null());
		if (p->x) {
			json_object_update(ev, p->x->ev);
			ev_ok = ev_ok && xok;
		}
	}
	json_array_append_new(steps, step("evidence", ev_ok, ev));
	if (!tool_ok) {
		verdict = "error";
		snprintf(why, sizeof why, "the probe program %s did not run (missing, 126/127, a signal or a timeout)", p->tool);
	} else if (!ok_ctl) {
		verdict = "error";
		snprintf(why, sizeof why, "the control failed: the probe would prove nothing");
	} else if (!att_blocked) {
		verdict = "fail";
		snprintf(why, sizeof why, "the attempt got an answer");
	} else if (!p->nonic && s.drops) {
		verdict = "error";
		snprintf(why, sizeof why, "the capture dropped frames");
	} else if (!p->nonic && s.in == 0) {
		verdict = "error";
		snprintf(why, sizeof why, "the attempt never reached the host (nothing on %s)", vm->tap);
	} else if (!ev_ok) {
		verdict = "fail";
		if (!p->nonic)
			snprintf(why, sizeof why, "%s",
				 s.out || s.payload ? "the probe left the host (seen on the way out)" :
				 s.back && !p->broker ? "the target answered the guest" :
				 hits ? "the doctor's listener got a hit" :
				 !led ? "no refusal in the broker's ledger" :
				 p->x && !xok ? p->x->why :
				 tc_absent ?
				 "the tap's tc filter counters are absent (no filter of ours to read)" :
				 p->x && xwhy[0] ? xwhy :
				 "no enforcement counter moved (neither the tap's filter nor an isopod drop rule)");
	} else {
		verdict = "pass";
	}
done:
	if (!strcmp(verdict, "pass"))
		a->pass++;
	else if (!strcmp(verdict, "fail"))
		a->fail++;
	else
		a->error++;
	json_array_append_new(a->probes,
			      json_pack("{s:s, s:s, s:s, s:s, s:s?, s:o, s:I}", "name", p->name, "class",
					p->cls, "vm", vm->id, "verdict", verdict, "why",
					why[0] ? why : NULL, "steps", steps, "ms",
					(json_int_t)(mono_ms() - t0)));
	json_decref(res);
	free(cb.nft);
	free(ce.nft);
}

static struct probe *probe_new(struct probe *p, const char *cls, int proto, const char *addr,
			       int port, const char *tool)
{
	*p = (struct probe){ .cls = cls, .proto = proto, .port = port, .tool = tool };
	snprintf(p->addr, sizeof p->addr, "%s", addr ? addr : "");
	return p;
}

/* One probe of protocol proto against addr (port for TCP/UDP), with the
 * mode's control. */
static void probe_ip(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		     int proto, const char *addr, int port)
{
	struct probe p;

	probe_new(&p, cls, proto, addr, port,
		  proto == IPPROTO_TCP ? a->nc : proto == IPPROTO_UDP ? "nslookup" : "ping");
	snprintf(p.name, sizeof p.name, "%s/%s", vm->mode, name);
	if (control_for(a, vm, &p) < 0) {
		/* no control: the probe cannot tell "blocked" from "broken" */
		snprintf(p.control, sizeof p.control, "echo 'control 0 0'");
	}
	if (proto == IPPROTO_TCP)
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, addr, port, "attempt");
	else if (proto == IPPROTO_UDP)
		snprintf(p.attempt, sizeof p.attempt, SH_UDP, port, a->tmo, addr, "attempt");
	else
		snprintf(p.attempt, sizeof p.attempt, SH_ICMP, a->tmo, addr, "attempt");
	if (proto == IPPROTO_ICMP)
		p.port = -1;
	run_probe(a, vm, &p);
}

/* The other VM of an other-vm probe alive right before it (its lock held,
 * its agent runs `true`): a dead target answers nothing, which is no
 * proof.  0, with an ERROR probe named name, when it is not. */
static int peer_alive(struct adv *a, const struct avm *vm, const struct avm *o, const char *name)
{
	json_t *res;
	int st = 0, live = vm_running(o->id);
	char why[160];

	if (live) {
		res = guest_sh(a, o, "true", 30000, &st);
		live = st == 0 && json_is_integer(json_object_get(res, "exit_code")) &&
		       json_integer_value(json_object_get(res, "exit_code")) == 0;
		json_decref(res);
	}
	if (live)
		return 1;
	snprintf(why, sizeof why, "the other VM %s is not running (lock free or agent silent)", o->id);
	adv_probe_missing(a, vm, "other-vm", name, why);
	return 0;
}

/* The probe just added: its liveness step names the other VM too. */
static void peer_note(struct adv *a, const struct avm *o)
{
	json_t *p = json_array_get(a->probes, json_array_size(a->probes) - 1);
	json_t *l = json_array_get(json_object_get(p, "steps"), 0);

	json_object_set_new(l, "peer", json_string(o->id));
	json_object_set_new(l, "peer_alive", json_true());
}

void adv_probes_net(struct adv *a, const struct avm *vm, const struct range *allow, size_t nallow,
		    int again)
{
	const struct range_def *rl;
	size_t nr, i;
	char n[128], gwn[96];
	int k;

	if (again)
		goto other_vm; /* a second VM of a mode: the same policy, but the way back */
	probe_ip(a, vm, "metadata", "metadata-tcp", IPPROTO_TCP, a->meta, 80);
	probe_ip(a, vm, "metadata", "metadata-udp", IPPROTO_UDP, a->meta, a->udp_port);
	probe_ip(a, vm, "metadata", "metadata-icmp", IPPROTO_ICMP, a->meta, -1);
	/* one address of every denied IPv4 block: its first host */
	rl = ranges_list(&nr);
	for (i = 0; i < nr; i++) {
		struct range r;
		const char *why;
		char t[64];
		uint8_t h[4];
		size_t j;
		int opened = 0;

		if (range_parse(rl[i].cidr, &r, &why) < 0 || r.af != 4)
			continue;
		/* the guest's own kernel keeps these (0/8, 127/8) or will not
		 * send them unasked (the limited broadcast): not the host's to block */
		if (r.a[0] == 0 || r.a[0] == 127 || r.len == 32)
			continue;
		memcpy(h, r.a, 4);
		h[3] |= 1;
		for (j = 0; j < nallow; j++)
			opened |= range_has(&allow[j], 4, h);
		if (opened && !strcmp(vm->mode, "open"))
			continue; /* the host opened it (allow_range): a warning already says so */
		inet_ntop(AF_INET, h, t, sizeof t);
		snprintf(n, sizeof n, "range-%s", rl[i].cidr);
		/* multicast takes no TCP: a datagram */
		if (r.a[0] >= 224 && r.a[0] < 240)
			probe_ip(a, vm, "denied-range", n, IPPROTO_UDP, t, a->udp_port);
		else
			probe_ip(a, vm, "denied-range", n, IPPROTO_TCP, t, 80);
	}
	/* the host's own addresses: the doctor's listener on each */
	if (!a->nhost)
		adv_probe_missing(a, vm, "host", "host-none", "no host address to probe: the class would pass empty (give --host-addr)");
	for (k = 0; k < a->nhost; k++) {
		snprintf(n, sizeof n, "host-%s-tcp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_TCP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-udp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_UDP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-icmp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_ICMP, a->hostaddr[k], -1);
	}
	/* the gateway's ports other than the broker's */
	snprintf(gwn, sizeof gwn, "gateway-%s-port-%d", vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-tcp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_TCP, vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-udp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_UDP, vm->gw, ADV_LISTEN_PORT);
	/* the host's default gateway */
	if (!a->gwhost[0])
		adv_probe_missing(a, vm, "host-gateway", "host-gateway-none", "no default gateway to probe: the class would pass empty (give --host-gateway)");
	if (a->gwhost[0]) {
		snprintf(n, sizeof n, "host-gateway-%s-tcp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_TCP, a->gwhost, 80);
		snprintf(n, sizeof n, "host-gateway-%s-icmp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_ICMP, a->gwhost, -1);
	}
	/* another VM, this way (the other VM probes back in its own turn) */
other_vm:
	for (k = 0, i = 0; k < a->nvm; k++) {
		const struct avm *o = &a->vm[k];

		if (o == vm || !o->guest[0])
			continue;
		i++;
		if (!adv_class_on(a, "other-vm"))
			continue;
		snprintf(n, sizeof n, "other-vm-%s-to-%s-tcp", vm->guest, o->guest);
		if (peer_alive(a, vm, o, n)) {
			probe_ip(a, vm, "other-vm", n, IPPROTO_TCP, o->guest, 80);
			peer_note(a, o);
		}
		snprintf(n, sizeof n, "other-vm-%s-to-%s-icmp", vm->guest, o->guest);
		if (peer_alive(a, vm, o, n)) {
			probe_ip(a, vm, "other-vm", n, IPPROTO_ICMP, o->guest, -1);
			peer_note(a, o);
		}
	}
	if (!i && a->want_peers)
		adv_probe_missing(a, vm, "other-vm", "other-vm-none", "no other networked VM to probe: the class would pass empty");
	if (again || strcmp(vm->mode, "filtered"))
		return;
	/* filtered forwards nothing: an IP literal, without and with the proxy */
	{
		struct probe p;

		/* without the proxy variables: nc honours none */
		probe_new(&p, "filtered-forwarding", IPPROTO_TCP, a->public_addr, 80, a->nc);
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-direct", a->public_addr);
		control_for(a, vm, &p);
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, a->public_addr, 80, "attempt");
		run_probe(a, vm, &p);

		probe_new(&p, "filtered-forwarding", IPPROTO_TCP, vm->gw, 3128, "wget");
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-proxy", a->public_addr);
		control_for(a, vm, &p);
		/* with them (isopod-exec sets them): the broker's refusal is quick;
		 * no -T: busybox 1.35's wget crashes with it */
		/* a port of its own: the probe's token in the ledger */
		{
			char rh[9];

			rand_hex(rh, 4);
			p.ledger_port = 20000 + (int)(strtoul(rh, NULL, 16) % 40000);
		}
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(wget -q -O- http://%s:%d/ 2>/dev/null); r=$?; if [ -n \"$o\" ]; then "
			 "a=1; else a=0; fi; echo \"attempt $r $a\"", a->public_addr, p.ledger_port);
		p.broker = 1;
		/* the evidence: the broker refused it (a line written since the
		 * probe began, with its port), nothing left for the address */
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", a->public_addr);
		snprintf(p.leak, sizeof p.leak, "%s", a->public_addr);
		p.ledger_kind = "http";
		run_probe(a, vm, &p);
	}
	/* DNS exfiltration: an unlisted name never leaves the host */
	{
		struct probe p;
		char tag[17], qn[96];

		rand_hex(tag, 8);
		snprintf(qn, sizeof qn, "x%s.exfil.invalid", tag);
		probe_new(&p, "dns-exfiltration", IPPROTO_UDP, vm->gw, 53, "nslookup");
		snprintf(p.name, sizeof p.name, "filtered/dns-exfiltration");
		control_for(a, vm, &p);
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(nslookup -timeout=%d -retry=1 %s %s 2>&1); r=$?; case $o in "
			 "*Name:*x%s*) a=1;; *) a=0;; esac; echo \"attempt $r $a\"",
			 a->tmo, qn, vm->gw, tag);
		snprintf(p.needle, sizeof p.needle, "x%s", tag);
		p.broker = 1;
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", qn);
		p.ledger_kind = "dns";
		run_probe(a, vm, &p);
	}
}

void adv_probes_none(struct adv *a, const struct avm *vm)
{
	struct probe p;

	probe_new(&p, "none", 0, a->meta, -1, "ping");
	snprintf(p.name, sizeof p.name, "none/no-nic");
	snprintf(p.control, sizeof p.control, SH_ICMP, a->tmo, "127.0.0.1", "control");
	/* any interface but loopback and the kernel's idle tunnel devices, or
	 * an answer from the metadata address, is a way out */
	snprintf(p.attempt, sizeof p.attempt,
		 "a=0; for i in /sys/class/net/*; do case ${i##*/} in lo|sit0|tunl0|ip6tnl0|'*') ;; "
		 "*) a=1;; esac; done; ping -c1 -W%d %s >/dev/null 2>&1; r=$?; [ $r != 0 ] || a=1; "
		 "echo \"attempt $r $a\"", a->tmo, a->meta);
	p.nonic = 1;
	run_probe(a, vm, &p);
}


/* ---- spoofing, ARP, IPv6 and DNS rebinding --------------------------------
 *
 * What these probes send is not the guest's own IPv4 to a target (what
 * sniff_count matches): a spoofed source, another MAC, ARP, IPv6, and a
 * flow the broker makes itself.  Each brings its own packet socket, opened
 * right before the guest runs, and its own match (struct xmatch). */

/* Big enough to mark a probe's own ICMP echo (the controls' are 56). */
#define SPOOF_SIZE 1000

int adv_class_on(const struct adv *a, const char *cls)
{
	const char *s = a->classes;
	size_t n = strlen(cls);

	if (!s)
		return 1;
	for (; *s; s += strcspn(s, ","), s += *s == ',')
		if (!strncmp(s, cls, n) && (s[n] == ',' || !s[n]))
			return 1;
	return 0;
}

void adv_probe_missing(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		       const char *why)
{
	json_t *steps = json_array();
	static const char *const sn[] = { "liveness", "tooling", "control", "attempt", "evidence" };
	char n[160];
	size_t i;

	if (a->fatal[0] || !adv_class_on(a, cls))
		return;
	for (i = 0; i < sizeof sn / sizeof *sn; i++)
		json_array_append_new(steps, step(sn[i], 0, i ? NULL : json_pack("{s:s, s:b}", "vm", vm->id,
										  "lock_held", vm_running(vm->id))));
	snprintf(n, sizeof n, "%s/%s", vm->mode, name);
	a->error++;
	json_array_append_new(a->probes,
			      json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:i}", "name", n, "class", cls,
					"vm", vm->id, "verdict", "error", "why", why, "steps", steps,
					"ms", 0));
}

/* A frame the xev sockets match: which way, on which interface. */
struct xmatch {
	uint16_t ethertype;     /* ETH_P_IP, ETH_P_ARP, ETH_P_IPV6 */
	int ifindex;            /* the VM's tap */
	int icmp_big;           /* IPv4: only ICMP of SPOOF_SIZE or more */
	uint8_t in_mac[6];      /* in: the frame's source MAC (all zero: any) */
	int in_af;              /* in: the source address (0: any) */
	uint8_t in_src[16];
	int in_proto, in_port;  /* in: to this protocol/port (0: any) */
	int out_af;             /* out: to this address, leaving any other interface */
	uint8_t out_dst[16];
	int out_proto, out_port;/* out: only this protocol/port (0: any) */
	int out_any_if;         /* out: on the tap too (an answer is as bad as a leak) */
	int back_any;           /* back: anything of this ethertype to the guest */
};

static void xev_before(struct xev *x)
{
	int big = 8 << 20;

	x->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
	if (x->fd >= 0)
		setsockopt(x->fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
}

static void xev_end(struct xev *x)
{
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
	json_decref(x->ev);
	x->ev = NULL;
}

/* Count the frames of m since xev_before into x (in, out, back); -1 when
 * the socket was never opened or dropped frames. */
static int xev_count(struct xev *x, const struct xmatch *m)
{
	uint8_t b[4096];
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	x->in = x->out = x->back = 0;
	if (x->fd < 0)
		return snprintf(x->why, sizeof x->why, "no packet socket: %s", strerror(errno)), -1;
	usleep(200 * 1000); /* what is still on its way */
	for (;;) {
		struct sockaddr_ll ll;
		socklen_t ls = sizeof ll;
		struct sniff_pkt pk;
		ssize_t n = recvfrom(x->fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&ll, &ls);
		int eth = ll.sll_hatype == ARPHRD_ETHER, alen, outgoing, ok;

		if (n < 0)
			break;
		if (ntohs(ll.sll_protocol) != m->ethertype)
			continue;
		outgoing = ll.sll_pkttype == PACKET_OUTGOING;
		if (m->ethertype == ETH_P_ARP) {
			/* Ethernet/IPv4 ARP: sha at 8, spa at 14, tpa at 24 (after the
			 * 14-byte Ethernet header) */
			if (!eth || n < 14 + 28 || ll.sll_ifindex != m->ifindex)
				continue;
			if (!outgoing) {
				/* from the guest, a sender address not its own */
				x->in += memcmp(b + 14 + 14, m->in_src, 4) != 0;
			} else if (!memcmp(b + 14 + 24, m->out_dst, 4)) {
				x->back++; /* the host answered the claimed sender */
			}
			continue;
		}
		if (sniff_parse(b, (size_t)n, ll.sll_hatype, &pk) < 0)
			continue;
		alen = pk.af == 4 ? 4 : 16;
		if (m->icmp_big && (pk.proto != IPPROTO_ICMP || pk.plen < SPOOF_SIZE))
			continue;
		if (!outgoing && ll.sll_ifindex == m->ifindex) {
			static const uint8_t zero[6];

			ok = (!memcmp(m->in_mac, zero, 6) || (eth && n >= 14 && !memcmp(b + 6, m->in_mac, 6))) &&
			     (!m->in_af || (pk.af == m->in_af && !memcmp(pk.src, m->in_src, (size_t)alen))) &&
			     (!m->in_proto || (pk.proto == m->in_proto && (!m->in_port || pk.dport == m->in_port)));
			x->in += ok;
		} else if (outgoing) {
			int to = m->out_af && pk.af == m->out_af && !memcmp(pk.dst, m->out_dst, (size_t)alen) &&
				 (!m->out_proto || (pk.proto == m->out_proto && (!m->out_port || pk.dport == m->out_port)));

			if (ll.sll_ifindex == m->ifindex) {
				if (m->back_any || (to && m->out_any_if))
					x->back++;
			} else if (to) {
				x->out++;
			}
		}
	}
	if (getsockopt(x->fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl) == 0 && ts.tp_drops)
		return snprintf(x->why, sizeof x->why, "the capture dropped frames"), -1;
	return 0;
}

static int mac_parse(const char *s, uint8_t m[6])
{
	unsigned v[6];
	int i;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
		return -1;
	for (i = 0; i < 6; i++)
		m[i] = (uint8_t)v[i];
	return 0;
}

/* An address of another slot (the next one's guest): what a guest spoofs. */
static void spoof_addr(const struct avm *vm, char *out, size_t sz)
{
	struct in_addr ia;

	inet_pton(AF_INET, vm->guest, &ia);
	ia.s_addr = htonl(ntohl(ia.s_addr) + 4);
	inet_ntop(AF_INET, &ia, out, (socklen_t)sz);
}

/* The tap's own MAC (the guest's gateway's), as text.  -1 if unreadable. */
static int tap_mac(const struct avm *vm, char *out, size_t sz)
{
	char p[PATH_MAX];
	uint8_t m[6];
	int fd;
	ssize_t n;

	if (pathn(p, sizeof p, "/sys/class/net/%s/address", vm->tap) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, out, sz - 1);
	close(fd);
	out[n > 0 ? n : 0] = 0;
	out[strcspn(out, "\n")] = 0;
	return mac_parse(out, m);
}

/* ---- spoofed source IP and MAC ---- */

struct spoof_ctx {
	struct xmatch m;
};

static int spoof_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct spoof_ctx *c = x->ctx;

	(void)a, (void)vm;
	if (xev_count(x, &c->m) < 0)
		return -1;
	x->ev = json_pack("{s:b}", "spoofed_frames_seen", x->in > 0);
	if (x->out || x->back)
		return snprintf(x->why, sizeof x->why, "the spoofed echo (or its answer) left the tap"), -1;
	return 0;
}

/* From vm: an ICMP echo to its gateway (which answers the control) from
 * another slot's address, then from another MAC; the marked size tells
 * the attempt's frames from the control's. */
static void probe_spoof(struct adv *a, const struct avm *vm, int mac)
{
	struct probe p;
	struct spoof_ctx c = { .m = { .ethertype = ETH_P_IP, .ifindex = vm->ifindex, .icmp_big = 1,
				      .out_any_if = 1 } };
	struct xev x = { .after = spoof_after, .fd = -1, .ctx = &c, .tc_reason = TCF_SPOOF, .by = "tc" };
	char sa[16], m2[18], tm[32];
	uint8_t gmac[6];

	probe_new(&p, mac ? "spoof-mac" : "spoof-ip", IPPROTO_ICMP, vm->gw, -1, "ping");
	p.x = &x;
	control_for(a, vm, &p);
	spoof_addr(vm, sa, sizeof sa);
	if (mac) {
		if (mac_parse(vm->mac, gmac) < 0) {
			adv_probe_missing(a, vm, p.cls, "spoof-mac", "the VM's record has no MAC");
			return;
		}
		/* another slot's MAC (the last byte's low bit flipped) */
		snprintf(m2, sizeof m2, "%.15s%02x", vm->mac, gmac[5] ^ 1);
		memcpy(c.m.in_mac, gmac, 5);
		c.m.in_mac[5] = gmac[5] ^ 1;
		snprintf(p.name, sizeof p.name, "%s/spoof-mac-%s", vm->mode, m2);
		if (tap_mac(vm, tm, sizeof tm) < 0) {
			adv_probe_missing(a, vm, p.cls, "spoof-mac", "unable to read the tap's MAC");
			return;
		}
		/* a new MAC flushes the guest's neighbours, and its ARP from that
		 * MAC is dropped: the gateway's MAC is set by hand, so the echo
		 * itself goes out */
		snprintf(p.attempt, sizeof p.attempt,
			 "ip link set eth0 address %s && arp -i eth0 -s %s %s && "
			 "{ ping -c1 -s %d -W%d %s >/dev/null 2>&1; r=$?; }; ip link set eth0 address %s; "
			 "arp -i eth0 -d %s >/dev/null 2>&1; "
			 "if [ \"${r:-1}\" = 0 ]; then a=1; else a=0; fi; echo \"attempt ${r:-1} $a\"",
			 m2, vm->gw, tm, SPOOF_SIZE, a->tmo, vm->gw, vm->mac, vm->gw);
	} else {
		inet_pton(AF_INET, sa, c.m.in_src);
		c.m.in_af = 4;
		snprintf(p.name, sizeof p.name, "%s/spoof-ip-%s", vm->mode, sa);
		snprintf(p.attempt, sizeof p.attempt,
			 "ping -c1 -W1 %s >/dev/null 2>&1; ip addr add %s/32 dev eth0 2>/dev/null; "
			 "ping -c1 -s %d -W%d -I %s %s >/dev/null 2>&1; r=$?; ip addr del %s/32 dev eth0 2>/dev/null; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
			 vm->gw, sa, SPOOF_SIZE, a->tmo, sa, vm->gw, sa);
	}
	/* where its answer would go (the spoofed address; with another MAC,
	 * the guest itself), on any interface, the tap included */
	inet_pton(AF_INET, mac ? vm->guest : sa, c.m.out_dst);
	c.m.out_af = 4;
	run_probe(a, vm, &p);
	xev_end(&x);
}

/* ---- ARP claiming the gateway ---- */

#define NEIGH_MAX 256

struct neigh {
	int ifindex;
	uint8_t ip[4], ll[6];
	int has_ll;
};

struct arp_ctx {
	struct xmatch m;
	uint8_t watch[2][4];    /* the claimed addresses: another slot's, the gateway */
	uint8_t guest[4], gmac[6];
	struct neigh before[NEIGH_MAX];
	int nbefore;
};

/* The host's IPv4 neighbour table (RTM_GETNEIGH), entries with a link
 * address.  -1 with errno. */
static int neigh_dump(struct neigh *out, int max, int *n)
{
	struct {
		struct nlmsghdr h;
		struct ndmsg nd;
	} req = { .h = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETNEIGH,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		  .nd = { .ndm_family = AF_INET } };
	char buf[16384];
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), done = 0;

	*n = 0;
	if (fd < 0)
		return -1;
	if (send(fd, &req, sizeof req, 0) < 0) {
		close(fd);
		return -1;
	}
	while (!done) {
		ssize_t r = recv(fd, buf, sizeof buf, 0);
		struct nlmsghdr *h;

		if (r <= 0) {
			close(fd);
			return -1;
		}
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned)r); h = NLMSG_NEXT(h, r)) {
			struct ndmsg *nd = NLMSG_DATA(h);
			struct rtattr *at;
			int len;
			struct neigh e = { 0 };
			int has_ip = 0;

			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				done = 1;
				break;
			}
			if (h->nlmsg_type != RTM_NEWNEIGH || nd->ndm_family != AF_INET)
				continue;
			e.ifindex = nd->ndm_ifindex;
			len = (int)RTM_PAYLOAD(h);
			for (at = RTM_RTA(nd); RTA_OK(at, len); at = RTA_NEXT(at, len)) {
				if (at->rta_type == NDA_DST && RTA_PAYLOAD(at) == 4)
					memcpy(e.ip, RTA_DATA(at), 4), has_ip = 1;
				if (at->rta_type == NDA_LLADDR && RTA_PAYLOAD(at) == 6)
					memcpy(e.ll, RTA_DATA(at), 6), e.has_ll = 1;
			}
			if (has_ip && e.has_ll && !(nd->ndm_state & (NUD_FAILED | NUD_INCOMPLETE)) &&
			    *n < max)
				out[(*n)++] = e;
		}
	}
	close(fd);
	return 0;
}

static const struct neigh *neigh_find(const struct neigh *t, int n, int ifindex, const uint8_t ip[4])
{
	int i;

	for (i = 0; i < n; i++)
		if (t[i].ifindex == ifindex && !memcmp(t[i].ip, ip, 4))
			return &t[i];
	return NULL;
}

static int arp_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct arp_ctx *c = x->ctx;
	struct neigh now[NEIGH_MAX];
	int nnow, i, k, changed = 0, own_bad = 0;
	char t[INET_ADDRSTRLEN];
	json_t *ch = json_array();

	(void)a;
	if (xev_count(x, &c->m) < 0 || neigh_dump(now, NEIGH_MAX, &nnow) < 0) {
		if (!x->why[0])
			snprintf(x->why, sizeof x->why, "unable to read the neighbour table: %s", strerror(errno));
		json_decref(ch);
		return -1;
	}
	/* a claimed address: on any interface, no entry that was not there
	 * before, none that changed its link address */
	for (i = 0; i < nnow; i++)
		for (k = 0; k < 2; k++) {
			const struct neigh *b;

			if (memcmp(now[i].ip, c->watch[k], 4))
				continue;
			b = neigh_find(c->before, c->nbefore, now[i].ifindex, now[i].ip);
			if (!b || memcmp(b->ll, now[i].ll, 6)) {
				changed++;
				json_array_append_new(ch, json_pack("{s:s, s:i}", "address",
								    inet_ntop(AF_INET, now[i].ip, t, sizeof t),
								    "ifindex", now[i].ifindex));
			}
		}
	/* and the guest's own address keeps its own MAC */
	{
		const struct neigh *g = neigh_find(now, nnow, vm->ifindex, c->guest);

		own_bad = g && memcmp(g->ll, c->gmac, 6);
	}
	x->ev = json_pack("{s:b, s:o, s:b}", "neighbours_unchanged", !changed, "neighbours_changed", ch,
			  "guest_neighbour_ok", !own_bad);
	if (changed || own_bad)
		return snprintf(x->why, sizeof x->why, "the host's neighbour table took the claim"), -1;
	if (x->back)
		return snprintf(x->why, sizeof x->why, "the host answered the claimed sender"), -1;
	return 0;
}

/* From vm: an ARP request for its gateway from another slot's address,
 * then a gratuitous ARP claiming the gateway's own address. */
static void probe_arp(struct adv *a, const struct avm *vm)
{
	struct probe p;
	struct arp_ctx *c = calloc(1, sizeof *c);
	struct xev x = { .after = arp_after, .fd = -1, .ctx = c, .tc_reason = TCF_ARP,
			  .by = "neighbours" };
	char sa[16];

	if (!c) {
		adv_fatal(a, EX_SYS, "out of memory");
		return;
	}
	spoof_addr(vm, sa, sizeof sa);
	probe_new(&p, "arp-gateway", 0, vm->gw, -1, "arping");
	p.x = &x;
	snprintf(p.name, sizeof p.name, "%s/arp-claim-%s-and-gateway-%s", vm->mode, sa, vm->gw);
	c->m = (struct xmatch){ .ethertype = ETH_P_ARP, .ifindex = vm->ifindex, .in_af = 4 };
	inet_pton(AF_INET, vm->guest, c->m.in_src);
	inet_pton(AF_INET, sa, c->m.out_dst);
	inet_pton(AF_INET, sa, c->watch[0]);
	inet_pton(AF_INET, vm->gw, c->watch[1]);
	inet_pton(AF_INET, vm->guest, c->guest);
	if (mac_parse(vm->mac, c->gmac) < 0) {
		adv_probe_missing(a, vm, p.cls, "arp-gateway", "the VM's record has no MAC");
		free(c);
		return;
	}
	/* the control: an honest request for the gateway is answered */
	snprintf(p.control, sizeof p.control,
		 "arping -c1 -w%d -I eth0 %s >/dev/null 2>&1; r=$?; if [ $r = 0 ]; then a=1; else a=0; fi; "
		 "echo \"control $r $a\"", a->tmo + 1, vm->gw);
	/* the answer to the request from another address is the claim taken */
	snprintf(p.attempt, sizeof p.attempt,
		 "ip addr add %s/32 dev eth0 2>/dev/null; arping -c1 -w%d -I eth0 -s %s %s >/dev/null 2>&1; "
		 "r=$?; ip addr del %s/32 dev eth0 2>/dev/null; ip addr add %s/32 dev eth0 2>/dev/null; "
		 "arping -U -c1 -w1 -I eth0 -s %s %s >/dev/null 2>&1; ip addr del %s/32 dev eth0 2>/dev/null; "
		 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
		 sa, a->tmo, sa, vm->gw, sa, vm->gw, vm->gw, vm->gw, vm->gw);
	if (neigh_dump(c->before, NEIGH_MAX, &c->nbefore) < 0) {
		adv_probe_missing(a, vm, p.cls, "arp-gateway", "unable to read the host's neighbour table");
		free(c);
		return;
	}
	run_probe(a, vm, &p);
	xev_end(&x);
	free(c);
}

/* ---- IPv6 ---- */

struct v6_ctx {
	struct xmatch m;
};

static int v6_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct v6_ctx *c = x->ctx;

	(void)a, (void)vm;
	if (xev_count(x, &c->m) < 0)
		return -1;
	x->ev = json_pack("{s:b}", "ipv6_from_guest_seen", x->in > 0);
	if (x->back)
		return snprintf(x->why, sizeof x->why, "the host sent IPv6 to the guest"), -1;
	return 0;
}

/* The link-local address the tap would have (EUI-64 of its MAC): what a
 * guest on that link tries first.  -1 when the MAC is unreadable. */
static int tap_ll(const struct avm *vm, char *out, size_t sz)
{
	char s[32] = "";
	uint8_t m[6], a6[16] = { 0xfe, 0x80 };

	if (tap_mac(vm, s, sizeof s) < 0 || mac_parse(s, m) < 0)
		return -1;
	a6[8] = m[0] ^ 2, a6[9] = m[1], a6[10] = m[2], a6[11] = 0xff;
	a6[12] = 0xfe, a6[13] = m[3], a6[14] = m[4], a6[15] = m[5];
	inet_ntop(AF_INET6, a6, out, (socklen_t)sz);
	return 0;
}

/* From vm: ping6 to the tap's link-local address, and to a ULA and a
 * global address routed through it. */
static void probe_v6(struct adv *a, const struct avm *vm, const char *what, const char *target)
{
	struct probe p;
	struct v6_ctx c = { .m = { .ethertype = ETH_P_IPV6, .ifindex = vm->ifindex, .back_any = 1 } };
	struct xev x = { .after = v6_after, .fd = -1, .ctx = &c, .tc_reason = TCF_NONIP, .by = "tc" };
	char ll[INET6_ADDRSTRLEN];

	probe_new(&p, "ipv6", 0, target, -1, "ping6");
	p.x = &x;
	snprintf(p.name, sizeof p.name, "%s/ipv6-%s-%s", vm->mode, what, target ? target : "?");
	if (tap_ll(vm, ll, sizeof ll) < 0) {
		adv_probe_missing(a, vm, p.cls, p.name + strlen(vm->mode) + 1, "unable to read the tap's MAC");
		return;
	}
	if (!target) {
		target = ll;
		snprintf(p.name, sizeof p.name, "%s/ipv6-%s-%s", vm->mode, what, ll);
		snprintf(p.addr, sizeof p.addr, "%s", ll);
	}
	c.m.out_af = 6;
	inet_pton(AF_INET6, target, c.m.out_dst);
	/* the control: the guest's own IPv6 works (its loopback) */
	snprintf(p.control, sizeof p.control,
		 "ping6 -c1 -W%d ::1 >/dev/null 2>&1; r=$?; if [ $r = 0 ]; then a=1; else a=0; fi; "
		 "echo \"control $r $a\"", a->tmo + 1);
	if (!strcmp(target, ll))
		snprintf(p.attempt, sizeof p.attempt,
			 "ip -6 neigh flush dev eth0 >/dev/null 2>&1; ping6 -c1 -W%d -I eth0 %s >/dev/null 2>&1; r=$?; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"", a->tmo, ll);
	else
		/* routed through the host's link-local address, as a router */
		snprintf(p.attempt, sizeof p.attempt,
			 "ip -6 neigh flush dev eth0 >/dev/null 2>&1; ip -6 route add %s/128 via %s dev eth0 2>/dev/null; "
			 "ping6 -c1 -W%d %s >/dev/null 2>&1; "
			 "r=$?; ip -6 route del %s/128 via %s dev eth0 2>/dev/null; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
			 target, ll, a->tmo, target, target, ll);
	run_probe(a, vm, &p);
	xev_end(&x);
}

/* ---- DNS rebinding ---- */

int adv_rebind_open(struct adv *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	struct own *o;
	int fd;

	if (a->nown >= ADV_MAXOWN)
		return errno = ENOSPC, -1;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		int e = errno;

		close(fd);
		return errno = e, -1;
	}
	o = &a->own[a->nown++];
	/* proto 0: no probe's target, so own_hits never counts it */
	*o = (struct own){ .port = ntohs(sa.sin_port), .proto = 0, .fd = fd, .rebind = 1 };
	snprintf(o->addr, sizeof o->addr, "127.0.0.1");
	a->rebind_port = ntohs(sa.sin_port);
	return 0;
}

/* Answer the brokers' queries: A for ip-A-B-C-D.ADV_REBIND_ZONE is
 * A.B.C.D (TTL 0); anything else REFUSED.  The query is parsed by
 * lib/dns.c (fuzzed), the answer is one record after the question. */
static void rebind_serve(struct adv *a, int fd)
{
	uint8_t q[512], r[600];
	struct sockaddr_in from;
	socklen_t fl;
	ssize_t n;

	while (fl = sizeof from,
	       (n = recvfrom(fd, q, sizeof q, MSG_DONTWAIT, (struct sockaddr *)&from, &fl)) >= 0) {
		struct dns_query dq;
		unsigned v[4];
		char tail[DNS_NAME_MAX + 1];
		int pr = dns_parse_query(q, (size_t)n, &dq), ok;
		size_t len;

		if (pr < 0)
			continue;
		ok = pr == 0 && dq.qtype == DNS_T_A &&
		     sscanf(dq.name, "ip-%3u-%3u-%3u-%3u.%1024s", &v[0], &v[1], &v[2], &v[3], tail) == 5 &&
		     !strcmp(tail, ADV_REBIND_ZONE) && v[0] < 256 && v[1] < 256 && v[2] < 256 && v[3] < 256;
		len = dns_reply_rcode(r, sizeof r, q, &dq, pr > 0 ? pr : ok ? DNS_RC_NOERROR : DNS_RC_REFUSED);
		if (!len)
			continue;
		if (ok && len + 16 <= sizeof r) {
			static const uint8_t rr[12] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4 };

			memcpy(r + len, rr, sizeof rr);
			r[len + 12] = (uint8_t)v[0], r[len + 13] = (uint8_t)v[1];
			r[len + 14] = (uint8_t)v[2], r[len + 15] = (uint8_t)v[3];
			len += 16;
			r[7] = 1; /* ANCOUNT */
			a->rebind_answers++;
		}
		sendto(fd, r, len, 0, (struct sockaddr *)&from, fl);
	}
}

struct rebind_ctx {
	struct xmatch m;
	long answers0;
	char name[128];
};

/* The ledger's refusal of name says why: the address, not the name. */
static int ledger_rebind(const struct avm *vm, const char *name)
{
	char p[PATH_MAX], line[4096];
	FILE *f;
	int found = 0;

	if (pathn(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), vm->id) < 0 ||
	    !(f = fopen(p, "re")))
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		const char *n = json_string_value(json_object_get(j, "name"));
		const char *r = json_string_value(json_object_get(j, "reason"));

		found = n && r && !strcmp(n, name) && strstr(r, "denied address");
		json_decref(j);
	}
	fclose(f);
	return found;
}

static int rebind_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct rebind_ctx *c = x->ctx;
	long asked = a->rebind_answers - c->answers0, leaked;
	int led;

	if (xev_count(x, &c->m) < 0)
		return -1;
	leaked = x->out + x->back;
	led = ledger_rebind(vm, c->name);
	x->ev = json_pack("{s:I, s:I, s:b}", "resolver_answers", (json_int_t)asked,
			  "to_denied_address", (json_int_t)leaked, "ledger_says_denied_address", led);
	if (!asked)
		return snprintf(x->why, sizeof x->why, "the broker never asked the doctor's resolver for %s", c->name), -1;
	if (leaked)
		return snprintf(x->why, sizeof x->why, "a connection to the rebound address left"), -1;
	if (!led)
		return snprintf(x->why, sizeof x->why, "no ledger line refusing %s for its denied address", c->name), -1;
	return 0;
}

/* From a filtered vm: an allowed name (*.ADV_REBIND_ZONE) that resolves to
 * a denied address, through the proxy: the broker must refuse it. */
static void probe_rebind(struct adv *a, const struct avm *vm, const char *what, const char *addr)
{
	struct probe p;
	struct rebind_ctx c = { .answers0 = a->rebind_answers };
	struct xev x = { .after = rebind_after, .fd = -1, .ctx = &c, .tc_reason = -1 };
	unsigned v[4];

	probe_new(&p, "dns-rebinding", IPPROTO_TCP, vm->gw, 3128, "wget");
	p.x = &x;
	if (sscanf(addr, "%u.%u.%u.%u", &v[0], &v[1], &v[2], &v[3]) != 4)
		return;
	snprintf(c.name, sizeof c.name, "ip-%u-%u-%u-%u." ADV_REBIND_ZONE, v[0], v[1], v[2], v[3]);
	snprintf(p.name, sizeof p.name, "%s/dns-rebinding-%s-%s", vm->mode, what, addr);
	if (!a->rebind_port) {
		adv_probe_missing(a, vm, p.cls, p.name + strlen(vm->mode) + 1, "the doctor's resolver is not running");
		return;
	}
	control_for(a, vm, &p);
	snprintf(p.attempt, sizeof p.attempt,
		 "o=$(wget -q -O- http://%s/ 2>/dev/null); r=$?; if [ -n \"$o\" ]; then "
		 "a=1; else a=0; fi; echo \"attempt $r $a\"", c.name);
	p.broker = 1;
	snprintf(p.ledger_name, sizeof p.ledger_name, "%s", c.name);
	p.ledger_kind = "http";
	/* in: the guest's request to the proxy; out: the broker's own
	 * connection to the address's port 80 (on lo for loopback, where the
	 * broker's queries to the doctor's resolver go too), any interface */
	c.m = (struct xmatch){ .ethertype = ETH_P_IP, .ifindex = vm->ifindex, .in_af = 4,
			       .in_proto = IPPROTO_TCP, .in_port = 3128, .out_af = 4,
			       .out_proto = IPPROTO_TCP, .out_port = 80, .out_any_if = 1 };
	inet_pton(AF_INET, vm->guest, c.m.in_src);
	inet_pton(AF_INET, addr, c.m.out_dst);
	run_probe(a, vm, &p);
	xev_end(&x);
}

void adv_probes_net2(struct adv *a, const struct avm *vm)
{
	probe_spoof(a, vm, 0);
	probe_spoof(a, vm, 1);
	probe_arp(a, vm);
	probe_v6(a, vm, "link-local", NULL);
	probe_v6(a, vm, "ula", a->v6_ula);
	probe_v6(a, vm, "global", a->v6_global);
	if (strcmp(vm->mode, "filtered"))
		return;
	probe_rebind(a, vm, "metadata", a->meta);
	probe_rebind(a, vm, "loopback", "127.0.0.1");
	probe_rebind(a, vm, "private", "10.0.0.1");
	if (a->nhost)
		probe_rebind(a, vm, "host", a->hostaddr[0]);
}
