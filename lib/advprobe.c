/* advprobe.c - the adverse suite's probes and the host's evidence; see
 * adverse.h. */
#include "adverse.h"
#include "proc.h"
#include "ruleset.h"
#include "sniff.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
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
};

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
	const char *out = "", *verdict;
	long hits = 0;
	struct seen s = { 0 };
	int64_t t0 = mono_ms();
	struct counters cb = { 0 }, ce = { 0 };
	long tc_pass = 0, tc_drop = 0, nft_drop = 0;
	long long lfrom = 0;
	int enforced = 0, led = 1, tc_absent = 0, routed = 0;
	const char *by = NULL;

	if (a->fatal[0]) {
		json_decref(steps);
		return; /* the suite ends without a report */
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
	res = guest_sh(a, vm, script, (a->tmo * 3 + 20) * 1000, &st);
	grace(a, ADV_GRACE_MS);
	s = sniff_count(a->sniff, vm, p->proto ? p->addr : NULL, p->proto, p->port,
			p->needle[0] ? p->needle : NULL, p->leak[0] ? p->leak : NULL);
	if (!p->nonic)
		counters_read(vm, &ce);
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
				 tc_absent ?
				 "the tap's tc filter counters are absent (no filter of ours to read)" :
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
	if (a->gwhost[0]) {
		snprintf(n, sizeof n, "host-gateway-%s-tcp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_TCP, a->gwhost, 80);
		snprintf(n, sizeof n, "host-gateway-%s-icmp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_ICMP, a->gwhost, -1);
	}
	/* another VM, this way (the other VM probes back in its own turn) */
other_vm:
	for (k = 0; k < a->nvm; k++) {
		const struct avm *o = &a->vm[k];

		if (o == vm || !o->guest[0])
			continue;
		snprintf(n, sizeof n, "other-vm-%s-to-%s-tcp", vm->guest, o->guest);
		probe_ip(a, vm, "other-vm", n, IPPROTO_TCP, o->guest, 80);
		snprintf(n, sizeof n, "other-vm-%s-to-%s-icmp", vm->guest, o->guest);
		probe_ip(a, vm, "other-vm", n, IPPROTO_ICMP, o->guest, -1);
	}
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

