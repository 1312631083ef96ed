/* isopod-broker - the egress broker of filtered mode: a DNS forwarder and an
 * HTTP(S) proxy on a VM's gateway address that let through names from an
 * allowlist only, and append every flow to a ledger.
 *
 * One process, one epoll loop, no threads and no blocking call after start:
 * names are resolved with the broker's own A queries (never getaddrinfo),
 * connects are non-blocking.  Every table is bounded (flows, pending
 * queries, buffers) and every state has a deadline, so a guest can slow
 * its own egress down but never grow the broker.  This file is the tool:
 * its options, set-up, event loop and exit status; the proxy, the DNS
 * forwarder, the ledger, the canary and the policy live in lib/ (see
 * lib/broker.h).
 *
 * The security of filtered mode rests on three checks (lib/dnsfwd.c,
 * lib/proxy.c, lib/policy.c):
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
#include "broker.h"
#include "dnsfwd.h"
#include "egress.h"
#include "proxy.h"
#include "ranges.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define USAGE                                                                              \
	"isopod-broker --listen ADDR --ledger FILE [--ledger-fd N] [--proxy-port N] [--dns-port N] " \
	"[--allow PATTERN]... [--allow-all] [--allow-range CIDR]... [--no-proxy] "         \
	"[--resolver ADDR[:PORT]] [--parent PID] [--vm ID] [--canary PORT] [--expect-jail-chain]"

#define TICK_MS 200

/* What the command line names beyond the broker's own state. */
struct args {
	const char *listen, *ledger, *resolver;
	long long parent, ledger_fd;
	int expect_jail_chain; /* --expect-jail-chain: bk_jail_probe before the ready line */
};

static void parse_resolver(struct broker *b, const char *s)
{
	char host[64];
	const char *colon = strchr(s, ':');
	size_t hn = colon ? (size_t)(colon - s) : strlen(s);
	long long port = 53;

	if (hn >= sizeof host)
		die(EX_USAGE, "--resolver %s: not an IPv4 address", EXC(s));
	memcpy(host, s, hn);
	host[hn] = '\0';
	b->resolver.sin_family = AF_INET;
	if (inet_pton(AF_INET, host, &b->resolver.sin_addr) != 1)
		die(EX_USAGE, "--resolver %s: not an IPv4 address", EXC(s));
	if (colon && parse_ll(colon + 1, 1, 65535, &port) < 0)
		die(EX_USAGE, "--resolver %s: bad port", EXC(s));
	b->resolver.sin_port = htons((uint16_t)port);
}

/* The first IPv4 nameserver of /etc/resolv.conf (inside `ip netns exec`,
 * the namespace's /etc/netns/NAME/resolv.conf is mounted over it).  A
 * jailed broker has none to read: lib/egress.c reads it and passes
 * --resolver. */
static void default_resolver(struct broker *b)
{
	char addr[64];

	if (egress_default_resolver(addr, sizeof addr) < 0)
		die(EX_SYS, "no IPv4 nameserver in /etc/resolv.conf: give --resolver ADDR[:PORT]");
	parse_resolver(b, addr);
}

static void add_allow(struct policy *p, const char *pattern)
{
	char norm[ALLOW_PATTERN_MAX];
	const char *why;

	if (allow_norm(norm, sizeof norm, pattern, &why) < 0)
		die(EX_USAGE, "--allow %s: %s", EXC(pattern), why);
	if (p->nallow >= POLICY_ALLOW_MAX)
		die(EX_USAGE, "--allow: more than %d patterns", POLICY_ALLOW_MAX);
	if (!(p->allow[p->nallow++] = strdup(norm)))
		die(EX_SYS, "out of memory");
}

static void add_range(struct policy *p, const char *cidr)
{
	struct range r;
	const char *why;

	if (range_parse(cidr, &r, &why) < 0 || ranges_override_check(&r, &why) < 0)
		die(EX_USAGE, "--allow-range %s: %s", cidr, why);
	if (p->nallow_range >= RANGES_ALLOW_MAX)
		die(EX_USAGE, "--allow-range: more than %d ranges", RANGES_ALLOW_MAX);
	p->allow_range[p->nallow_range++] = r;
}

static unsigned port_arg(const char *opt, const char *s, long long lo, long long hi)
{
	long long v;

	if (parse_ll(s, lo, hi, &v) < 0)
		die(EX_USAGE, "--%s %s: out of range %lld..%lld", opt, EXC(s), lo, hi);
	return (unsigned)v;
}

static void parse_args(struct broker *b, struct args *a, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "ledger", required_argument, NULL, 'L' },
		{ "ledger-fd", required_argument, NULL, 'F' },
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
		{ "expect-jail-chain", no_argument, NULL, 'J' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			a->listen = optarg;
			break;
		case 'L':
			a->ledger = optarg;
			break;
		case 'F':
			if (parse_ll(optarg, 3, 65535, &a->ledger_fd) < 0 ||
			    fcntl((int)a->ledger_fd, F_SETFD, FD_CLOEXEC) < 0)
				die(EX_USAGE, "--ledger-fd %s: not an open descriptor above 2",
				    EXC(optarg));
			break;
		case 'p':
			b->proxy_port = port_arg("proxy-port", optarg, 0, 65535);
			break;
		case 'd':
			b->dns_port = port_arg("dns-port", optarg, 0, 65535);
			break;
		case 'a':
			add_allow(&b->pol, optarg);
			break;
		case 'A':
			b->pol.allow_all = 1;
			break;
		case 'R':
			add_range(&b->pol, optarg);
			break;
		case 'n':
			b->no_proxy = 1;
			break;
		case 'r':
			a->resolver = optarg;
			break;
		case 'P':
			if (parse_ll(optarg, 1, 0x7fffffff, &a->parent) < 0)
				die(EX_USAGE, "--parent %s: not a pid", EXC(optarg));
			break;
		case 'v':
			b->ledger.vm = optarg;
			break;
		case 'c':
			b->canary.port = port_arg("canary", optarg, 1, 65534);
			break;
		case 'J':
			a->expect_jail_chain = 1;
			break;
		case 'h':
			puts("usage: " USAGE);
			exit(0);
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (!a->listen || !a->ledger)
		die_usage(USAGE, "--listen and --ledger are required");
	if (inet_pton(AF_INET, a->listen, &b->listen) != 1)
		die(EX_USAGE, "--listen %s: not an IPv4 address", EXC(a->listen));
	if (a->resolver)
		parse_resolver(b, a->resolver);
	else
		default_resolver(b);
}

/* The fds the broker may hold at once: every flow at its most, every
 * pending query's socket, and a few of its own (listeners, epoll, signalfd,
 * ledger, canary, stdio). */
#define FDS_NEEDED (PROXY_MAX_FLOWS * PROXY_FLOW_FDS + DNSFWD_MAX_PEND + 16)
#define FDS_WANTED 4096
_Static_assert(FDS_NEEDED <= FDS_WANTED, "the fd limit the broker asks for is too small");

/* Signals through a signalfd, blocked before PDEATHSIG can fire; the
 * parent's death (--parent) is a SIGTERM; room for every flow's fds (a
 * hard limit below that: flows past it get a 503, which is said once). */
static void set_up_process(struct broker *b, long long parent)
{
	struct rlimit rl;
	sigset_t ss;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0 ||
	    (b->sfd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		die(EX_SYS, "unable to set up signals:");
	if (parent) {
		int cur = 0;

		/* Jailed, the jail set one before the exec (lib/egress.c:
		 * SIGTERM), and its filter refuses PR_SET_PDEATHSIG
		 * (lib/jailchild.c): set ours only where none is. */
		if (prctl(PR_GET_PDEATHSIG, &cur) < 0 ||
		    (cur == 0 && prctl(PR_SET_PDEATHSIG, SIGTERM) < 0))
			die(EX_SYS, "unable to set the parent-death signal:");
		/* the parent may have died before prctl: then nobody would stop us.
		 * PID 1 of a pid namespace (the jail's) has its parent outside:
		 * getppid is 0; the jail checked the parent up to the exec, and
		 * had it died since, the ready line meets a closed pipe. */
		if (getppid() != (pid_t)parent && !(getpid() == 1 && getppid() == 0))
			die(EX_SYS, "parent %lld is gone", parent);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < FDS_WANTED && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < FDS_WANTED ? rl.rlim_max : FDS_WANTED;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < FDS_NEEDED)
		warn("the fd limit %llu is below the %d that %d flows need: flows past it get 503",
		     (unsigned long long)rl.rlim_cur, FDS_NEEDED, PROXY_MAX_FLOWS);
}

static int bind_or_die(struct broker *b, int type, unsigned *port)
{
	char msg[256];
	int fd = bk_bind(b->listen, type, port, msg, sizeof msg);

	if (fd < 0)
		die(errno == EADDRINUSE ? EX_CONFLICT : EX_SYS, "%s", msg);
	return fd;
}

/* The ledger, the sockets, epoll, and (--canary) the table's answer. */
static void set_up_sockets(struct broker *b, const struct args *a)
{
	const char *vm = b->ledger.vm;

	if (a->ledger_fd >= 0 ? ledger_open_fd(&b->ledger, (int)a->ledger_fd, vm) < 0
			      : ledger_open(&b->ledger, a->ledger, vm) < 0)
		die(EX_SYS, "unable to open the ledger %s:", a->ledger);
	/* before any flow: every later change of the host's addresses is
	 * announced on it (a failure only means no cache) */
	policy_host_open(&b->host);
	if (!b->no_proxy)
		b->lfd = bind_or_die(b, SOCK_STREAM, &b->proxy_port);
	b->ufd = bind_or_die(b, SOCK_DGRAM, &b->dns_port);
	if ((b->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die(EX_SYS, "unable to create an epoll instance:");
	if ((b->lfd >= 0 && bk_ep_add(b, b->lfd, &b->elisten, EPOLLIN) < 0) ||
	    bk_ep_add(b, b->ufd, &b->edns, EPOLLIN) < 0 ||
	    bk_ep_add(b, b->sfd, &b->esig, EPOLLIN) < 0)
		die(EX_SYS, "%s", b->fatal);
	if (b->canary.port) {
		char msg[512];
		unsigned port = b->canary.port + 1, cport = b->canary.port;
		int fd = bind_or_die(b, SOCK_DGRAM, &port);

		if (canary_open(&b->canary, fd, b->listen, cport) < 0)
			die(EX_SYS, "unable to connect the canary socket:");
		if (canary_start(&b->canary, msg, sizeof msg) < 0)
			die(EX_SYS, "%s", msg);
	}
}

/* nul: /dev/null, opened before bk_lock_down (which refuses every open). */
static void announce(const struct broker *b, int nul)
{
	char ab[INET_ADDRSTRLEN], rb[INET_ADDRSTRLEN], proxy[32], dns[32], res[32];
	char t[RANGES_TEXT_MAX];
	json_t *allow = json_array(), *ar = json_array(), *o;

	inet_ntop(AF_INET, &b->listen, ab, sizeof ab);
	inet_ntop(AF_INET, &b->resolver.sin_addr, rb, sizeof rb);
	snprintf(proxy, sizeof proxy, "%s:%u", ab, b->proxy_port);
	snprintf(dns, sizeof dns, "%s:%u", ab, b->dns_port);
	snprintf(res, sizeof res, "%s:%u", rb, ntohs(b->resolver.sin_port));
	for (size_t i = 0; i < b->pol.nallow; i++)
		json_array_append_new(allow, json_string(b->pol.allow[i]));
	for (size_t i = 0; i < b->pol.nallow_range; i++)
		json_array_append_new(ar, json_string(range_text(&b->pol.allow_range[i], t, sizeof t)));
	o = json_pack("{s:I, s:s?, s:s, s:s, s:o, s:b, s:o}", "pid", (json_int_t)getpid(), "proxy",
		      b->no_proxy ? NULL : proxy, "dns", dns, "resolver", res, "allow", allow,
		      "allow_all", b->pol.allow_all, "allow_ranges", ar);
	if (!o)
		die(EX_SYS, "unable to build the output");
	if (b->ledger.vm)
		json_object_set_new(o, "vm", json_string(b->ledger.vm));
	json_emit(o);
	json_decref(o);
	/* The parent reads to EOF: let go of stdout, keep fd 1 taken. */
	if (fclose(stdout) == EOF)
		die(EX_SYS, "unable to close standard output:");
	if (nul >= 0 && nul != 1) {
		dup2(nul, 1);
		close(nul);
	}
}

static void reap(struct broker *b)
{
	proxy_reap(b);
	dnsfwd_reap(b);
}

/* Every flow and query gets its line; then the one of suppressed refusals. */
static void shut_down(struct broker *b)
{
	proxy_stop(b);
	dnsfwd_stop(b);
	ledger_finish(&b->ledger);
	bk_ledger_check(b);
	reap(b);
}

/* One round of events; 1 when a signal asks the broker to stop.  Not one
 * more event once the broker must stop (a line it could not write): what
 * would follow (a connection, relayed bytes) would go unrecorded. */
static int round_of(struct broker *b, const struct epoll_event *evs, int n)
{
	int stop = 0;

	for (int i = 0; i < n && !b->fatal[0]; i++) {
		struct bk_ep *e = evs[i].data.ptr;
		struct signalfd_siginfo si;

		switch (e->kind) {
		case BK_LISTEN:
			proxy_on_accept(b);
			break;
		case BK_DNS:
			dnsfwd_on_query(b);
			break;
		case BK_SIG:
			while (read(b->sfd, &si, sizeof si) == (ssize_t)sizeof si)
				stop = 1;
			break;
		case BK_GUEST:
		case BK_UP:
		case BK_RES:
			proxy_on_event(e, evs[i].events);
			break;
		case BK_PEND:
			dnsfwd_on_answer(b, e);
			break;
		}
	}
	return stop;
}

/* Until a signal: events, deadlines, the canary.  Exits 111 when the
 * broker must stop (a ledger it cannot write, the table gone). */
static void serve(struct broker *b)
{
	struct epoll_event evs[64];
	char why[512];
	int stop = 0;

	while (!stop) {
		int n = epoll_wait(b->ep, evs, 64, TICK_MS);
		int64_t now;

		if (n < 0 && errno != EINTR)
			die(EX_SYS, "epoll_wait:");
		stop = round_of(b, evs, n < 0 ? 0 : n);
		/* before the sweeps: a connect timed out would try the next address */
		if (b->fatal[0])
			die(EX_SYS, "%s", b->fatal);
		now = mono_ms();
		proxy_sweep(b, now);
		dnsfwd_sweep(b, now);
		reap(b);
		if (b->fatal[0])
			die(EX_SYS, "%s", b->fatal);
		if (b->canary.port && canary_tick(&b->canary, mono_ms(), why, sizeof why) < 0) {
			ledger_policy_lost(&b->ledger, b->canary.port, why);
			shut_down(b);
			die(EX_SYS, "%s", why);
		}
	}
}

int main(int argc, char **argv)
{
	struct broker b = {
		.proxy_port = 3128,
		.dns_port = 1053,
		.ledger = { .fd = -1 },
		.ep = -1, .lfd = -1, .ufd = -1, .sfd = -1,
		.elisten = { .kind = BK_LISTEN },
		.edns = { .kind = BK_DNS },
		.esig = { .kind = BK_SIG },
		.canary = { .fd = -1 },
		.host = { .fd = -1 },
	};
	struct args a = { .parent = 0, .ledger_fd = -1 };
	char msg[512];
	int nul;

	progname = "isopod-broker";
	parse_args(&b, &a, argc, argv);
	set_up_process(&b, a.parent);
	set_up_sockets(&b, &a);
	/* the ready line promises the filter: it goes out after it */
	nul = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (bk_lock_down() < 0)
		die(EX_SYS, "unable to install the seccomp filter:");
	/* under the filter, as every later datagram: the kernel's jail egress
	 * chain holds this uid (isopod-broker(1), --expect-jail-chain) */
	if (a.expect_jail_chain && bk_jail_probe(msg, sizeof msg) < 0)
		die(EX_SYS, "%s", msg);
	announce(&b, nul);
	serve(&b);
	shut_down(&b);
	if (b.fatal[0])
		die(EX_SYS, "%s", b.fatal);
	policy_free(&b.pol);
	policy_host_close(&b.host);
	return 0;
}
