/* broker_test.c - isopod-broker's shared helpers (lib/broker.c) and the
 * proxy's epoll interest (lib/proxy.c): a listen() that fails is a system
 * failure, not a taken port (only bind()'s EADDRINUSE is 102); an epoll
 * MOD that fails leaves the recorded interest as epoll has it. */
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
#undef listen
int listen(int fd, int backlog); /* its declaration was renamed above */

#include "tap.h"

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

int main(void)
{
	test_bind();
	test_interest();
	return tap_done();
}
