/* broker.c - isopod-broker's shared helpers (see broker.h). */
#include "broker.h"
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

void bk_fail(struct broker *b, const char *fmt, ...)
{
	va_list ap;

	if (b->fatal[0])
		return;
	va_start(ap, fmt);
	vsnprintf(b->fatal, sizeof b->fatal, fmt, ap);
	va_end(ap);
}

void bk_ledger(struct broker *b, const struct ledger_rec *r)
{
	ledger_write(&b->ledger, r);
	bk_ledger_check(b);
}

void bk_ledger_check(struct broker *b)
{
	if (!b->ledger.failed)
		return;
	if (b->ledger.err)
		bk_fail(b, "%s: %s", b->ledger.failed, strerror(b->ledger.err));
	else
		bk_fail(b, "%s", b->ledger.failed);
}

int bk_full(const struct broker *b)
{
	return ledger_full(&b->ledger) || b->fatal[0];
}

static int ep_ctl(struct broker *b, int op, int fd, struct bk_ep *e, uint32_t ev)
{
	struct epoll_event ee = { .events = ev, .data.ptr = e };

	if (epoll_ctl(b->ep, op, fd, &ee) == 0)
		return 0;
	bk_fail(b, "unable to %s epoll: %s", op == EPOLL_CTL_ADD ? "add to" : "modify",
		strerror(errno));
	return -1;
}

int bk_ep_add(struct broker *b, int fd, struct bk_ep *e, uint32_t ev)
{
	return ep_ctl(b, EPOLL_CTL_ADD, fd, e, ev);
}

int bk_ep_mod(struct broker *b, int fd, struct bk_ep *e, uint32_t ev)
{
	return ep_ctl(b, EPOLL_CTL_MOD, fd, e, ev);
}

void bk_closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int bk_bind(struct in_addr addr, int type, unsigned *port, char *msg, size_t msz)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = addr,
				  .sin_port = htons((uint16_t)*port) };
	socklen_t sl = sizeof sa;
	char ab[INET_ADDRSTRLEN];
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, e;

	if (fd < 0) {
		e = errno;
		snprintf(msg, msz, "unable to create a socket: %s", strerror(e));
		errno = e;
		return -1;
	}
	/* TCP only: on UDP, SO_REUSEADDR would let two brokers share the port */
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		e = errno;
		snprintf(msg, msz, "unable to bind %s %s:%u: %s", type == SOCK_STREAM ? "TCP" : "UDP",
			 inet_ntop(AF_INET, &addr, ab, sizeof ab), *port, strerror(e));
		goto fail;
	}
	/* a backlog for as many flows as may be open, should they all
	 * connect at once (beyond it a SYN waits for its retransmission) */
	if (type == SOCK_STREAM && listen(fd, PROXY_MAX_FLOWS) < 0) {
		e = errno;
		snprintf(msg, msz, "unable to listen: %s", strerror(e));
		/* EADDRINUSE (the port is taken: 102) is bind()'s answer alone;
		 * a listen() that fails is a system failure (111) */
		if (e == EADDRINUSE)
			e = EIO;
		goto fail;
	}
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		*port = ntohs(sa.sin_port);
	return fd;
fail:
	close(fd);
	errno = e;
	return -1;
}
