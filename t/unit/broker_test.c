/* broker_test.c - isopod-broker's shared helpers (lib/broker.c) and the
 * proxy's epoll interest (lib/proxy.c): a listen() that fails is a system
 * failure, not a taken port (only bind()'s EADDRINUSE is 102); an epoll
 * MOD that fails leaves the recorded interest as epoll has it; the
 * broker's seccomp filter (bk_lock_down), installed in a child, refuses
 * bind and listen while the host-address checks still work under it; the
 * jail egress probe (bk_jail_probe) works under it too, and passes only
 * when the kernel refuses its datagram (a netns of its own with a drop
 * rule, as root). */
#define listen fake_listen /* to make listen() fail as it may (EADDRINUSE) */
#include "../../lib/allow.c"
#include "../../lib/broker.c"
#include "../../lib/dns.c"
#include "../../lib/http.c"
#include "../../lib/ledger.c"
#include "../../lib/policy.c"
#include "../../lib/proxy.c"
#include "../../lib/ranges.c"
#include "../../lib/config.c"
#include "../../lib/nldump.c"
#undef listen
int listen(int fd, int backlog); /* its declaration was renamed above */

#include "tap.h"

#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>

static int listen_errno; /* 0: the real listen() */

int fake_listen(int fd, int backlog)
{
	if (!listen_errno)
		return listen(fd, backlog);
	errno = listen_errno;
	return -1;
}

static void test_bind(void)
{
	struct in_addr lo = { .s_addr = htonl(INADDR_LOOPBACK) };
	unsigned port = 0, again;
	char msg[256];
	int fd, fd2;

	fd = bk_bind(lo, SOCK_DGRAM, &port, msg, sizeof msg);
	ok(fd >= 0 && port > 0, "a UDP port bound: %u", port);
	again = port;
	fd2 = bk_bind(lo, SOCK_DGRAM, &again, msg, sizeof msg);
	ok(fd2 < 0 && errno == EADDRINUSE && strstr(msg, "unable to bind UDP 127.0.0.1"),
	   "bind() on a taken port: EADDRINUSE (102): %s", msg);
	if (fd2 >= 0)
		close(fd2);
	close(fd);
	listen_errno = EADDRINUSE;
	port = 0;
	fd = bk_bind(lo, SOCK_STREAM, &port, msg, sizeof msg);
	ok(fd < 0 && errno != EADDRINUSE && !strcmp(msg, "unable to listen: Address already in use"),
	   "listen() failing with EADDRINUSE: not a taken port (111): %s (errno %s)", msg,
	   strerrorname_np(errno) ? strerrorname_np(errno) : "?");
	if (fd >= 0)
		close(fd);
	listen_errno = 0;
	port = 0;
	fd = bk_bind(lo, SOCK_STREAM, &port, msg, sizeof msg);
	ok(fd >= 0, "the real listen(): a TCP listener on %u", port);
	if (fd >= 0)
		close(fd);
}

static void test_interest(void)
{
	struct broker b = { .ep = epoll_create1(EPOLL_CLOEXEC) };
	struct bk_ep e = { .kind = BK_GUEST };
	int sv[2];
	uint32_t cur = EPOLLIN;

	socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
	ok(bk_ep_add(&b, sv[0], &e, EPOLLIN) == 0, "a socket in epoll for EPOLLIN");
	set_interest(&b, sv[0], &e, &cur, EPOLLOUT);
	ok(cur == EPOLLOUT && !b.fatal[0], "a MOD that works: the interest recorded");
	epoll_ctl(b.ep, EPOLL_CTL_DEL, sv[0], NULL);
	set_interest(&b, sv[0], &e, &cur, EPOLLIN);
	ok(cur == EPOLLOUT && b.fatal[0],
	   "a MOD that fails: the interest kept as epoll has it (%s); fatal: %s",
	   cur == EPOLLOUT ? "EPOLLOUT" : "changed", b.fatal);
	close(sv[0]);
	close(sv[1]);
	close(b.ep);
}

/* fn(wfd) in a child (it writes n bytes there and exits), read into buf;
 * waited for, its wait status in *st.  0, 1 when its answer was short
 * (buf partly written: the caller's sentinel is to be set again), or -1
 * with errno when no child ran. */
static int in_child(void (*fn)(int), void *buf, size_t n, int *st)
{
	int p[2], r;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	if ((pid = fork()) < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		close(p[0]);
		fn(p[1]);
	}
	close(p[1]);
	r = read(p[0], buf, n) != (ssize_t)n;
	close(p[0]);
	waitpid(pid, st, 0);
	return r;
}

/* What a child under the filter saw: each a return value, then errno. */
struct locked {
	int installed, own, route, bind_tcp, bind_udp, listen_auto, open, probe, e[5];
	char pmsg[512];
};

static void locked_child(int wfd)
{
	struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct locked r = { .installed = bk_lock_down() };
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int t2 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	r.own = policy_own_addr(htonl(INADDR_LOOPBACK));
	r.route = policy_local_route(htonl(0x7f000002));
	r.bind_tcp = bind(t, (struct sockaddr *)&lo, sizeof lo);
	r.e[0] = errno;
	r.bind_udp = bind(u, (struct sockaddr *)&lo, sizeof lo);
	r.e[1] = errno;
	/* listen() on an unbound socket would bind one itself (a port on
	 * every address) */
	r.listen_auto = listen(t2, 1);
	r.e[2] = errno;
	r.open = openat(AT_FDCWD, "/dev/null", O_RDONLY | O_CLOEXEC);
	r.e[3] = errno;
	/* socket() and sendto() of a datagram: allowed (no chain here holds
	 * this uid: the datagram goes out, the probe fails) */
	r.probe = bk_jail_probe(r.pmsg, sizeof r.pmsg);
	if (write(wfd, &r, sizeof r) != (ssize_t)sizeof r)
		_exit(2);
	/* _exit: LeakSanitizer's exit check clones and ptraces, which the
	 * filter refuses */
	_exit(0);
}

static void test_lock_down(void)
{
	struct locked r = { .installed = -2 };
	char want[512];
	int st = -1, got = in_child(locked_child, &r, sizeof r, &st);

	if (got < 0) {
		ok(0, "a child for the filter: %s", strerror(errno));
		return;
	}
	if (got == 1)
		r.installed = -2;
	ok(r.installed == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "the filter installed in a child (%d, status %#x)", r.installed, st);
	ok(r.own == 1, "under it, 127.0.0.1 is still the host's own (%d): no bind to read them",
	   r.own);
	ok(r.route == 1, "under it, 127.0.0.2 is still routed to the host (%d)", r.route);
	ok(r.bind_tcp == -1 && r.e[0] == EPERM, "under it, bind() of TCP 127.0.0.1: EPERM (%d, %s)",
	   r.bind_tcp, strerror(r.e[0]));
	ok(r.bind_udp == -1 && r.e[1] == EPERM, "under it, bind() of UDP 127.0.0.1: EPERM (%d, %s)",
	   r.bind_udp, strerror(r.e[1]));
	ok(r.listen_auto == -1 && r.e[2] == EPERM,
	   "under it, listen() of an unbound TCP socket: EPERM (%d, %s)", r.listen_auto,
	   strerror(r.e[2]));
	ok(r.open == -1 && r.e[3] == EPERM, "under it, openat: EPERM (%d, %s)", r.open,
	   strerror(r.e[3]));
	snprintf(want, sizeof want, "this broker's uid %u is not in the host's jail egress chain: "
		 "the jail uid range changed since isopod-netsetup ran, or netsetup predates it; "
		 "run isopod-netsetup again", (unsigned)getuid());
	ok(r.probe == -1 && !strcmp(r.pmsg, want),
	   "under it, the jail egress probe runs; its datagram went out: refused: %s", r.pmsg);
}

/* lo up in this network namespace, by ioctl (t/35's guest has no ip(8)). */
static int lo_up(void)
{
	struct ifreq ifr = { .ifr_name = "lo" };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), r = -1;

	if (fd < 0)
		return -1;
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	close(fd);
	return r;
}

/* In a child of its own network namespace (root only): the probe without
 * and with a rule that drops it on the output path, as jail_out does. */
static void netns_child(int wfd)
{
	int res[2] = { 9, 9 };
	char msg[512];

	if (unshare(CLONE_NEWNET) < 0)
		res[0] = res[1] = 7; /* no netns here (a container): skipped */
	else if (lo_up() == 0) {
		res[0] = bk_jail_probe(msg, sizeof msg);
		if (system("nft add table inet l1u && nft add chain inet l1u o "
			   "'{ type filter hook output priority 0; }' && "
			   "nft add rule inet l1u o ip daddr 127.0.0.0/8 udp dport 9 counter drop") == 0)
			res[1] = bk_jail_probe(msg, sizeof msg);
		else
			res[1] = 6; /* no nft, or a kernel without nf_tables (t/35's guest) */
	}
	if (write(wfd, res, sizeof res) != (ssize_t)sizeof res)
		_exit(2);
	_exit(0);
}

static void test_jail_probe(void)
{
	int res[2] = { 8, 8 }, st = -1, got;

	if (geteuid() != 0) {
		ok(1, "# skip the jail egress probe in a netns: needs root");
		return;
	}
	if ((got = in_child(netns_child, res, sizeof res, &st)) < 0) {
		ok(0, "a child for the netns: %s", strerror(errno));
		return;
	}
	if (got == 1)
		res[0] = res[1] = 8;
	if (res[0] == 7) {
		ok(1, "# skip the jail egress probe in a netns: unshare(CLONE_NEWNET) refused");
		return;
	}
	ok(res[0] == -1, "a netns without the chain: the datagram goes out, the probe fails (%d)",
	   res[0]);
	if (res[1] == 6) {
		ok(1, "# skip the probe under a drop rule: nft could not make one here");
		return;
	}
	ok(res[1] == 0, "a rule dropping it on the output path: sendto's EPERM, the probe passes (%d)",
	   res[1]);
}

int main(void)
{
	test_bind();
	test_interest();
	test_lock_down();
	test_jail_probe();
	return tap_done();
}
