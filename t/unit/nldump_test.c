/* nldump_test.c - lib/nldump.c: the walk over a reply's datagram (ours
 * by sequence number and port id, the end of the dump, the kernel's error
 * at the end of a dump that failed part-way, an interrupted dump,
 * malformed lengths) and the socket's connection to the kernel alone (a
 * forged unicast reply from another local socket is refused). */
#include "../../lib/nldump.c" /* self-contained: t/run-unit links frame+util only */

#include <linux/rtnetlink.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

#define SEQ 7u
#define PID 4242u

struct dg {
	long buf[1024 / sizeof(long)];
	size_t n;
};

/* Append a message of type, flags, seq and pid with plen bytes of payload
 * p; returns it. */
static struct nlmsghdr *put(struct dg *d, uint16_t type, uint16_t flags, uint32_t seq, uint32_t pid,
			    const void *p, size_t plen)
{
	struct nlmsghdr *h = (void *)((char *)d->buf + d->n);

	*h = (struct nlmsghdr){ .nlmsg_len = (uint32_t)NLMSG_LENGTH(plen), .nlmsg_type = type,
				.nlmsg_flags = flags, .nlmsg_seq = seq, .nlmsg_pid = pid };
	if (plen)
		memcpy(NLMSG_DATA(h), p, plen);
	d->n += NLMSG_ALIGN(h->nlmsg_len);
	return h;
}

static void count(const struct nlmsghdr *h, void *data)
{
	(void)h;
	++*(int *)data;
}

static void walk(void)
{
	struct dg d = { .n = 0 };
	struct nlmsgerr e = { .error = -EPERM };
	int zero = 0, bad = -ENOBUFS, n = 0, nlerr = 99, r;
	uint32_t u = 1;

	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 0 && n == 2 && nlerr == 99, "two messages, no end yet: more to come (r %d, n %d)", r, n);
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ, PID, &zero, sizeof zero);
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	n = 0;
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 1 && n == 2 && nlerr == 0, "NLMSG_DONE 0 ends the dump well; nothing after it is read");

	d.n = 0;
	n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ, PID, &bad, sizeof bad);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 1 && nlerr == -ENOBUFS, "NLMSG_DONE carrying -ENOBUFS (failed part-way) is the kernel's error (nlerr %d)",
	   nlerr);

	d.n = 0;
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ, PID, NULL, 0);
	nlerr = 99;
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 1 && nlerr == 0, "an NLMSG_DONE without payload ends well");

	d.n = 0;
	put(&d, NLMSG_ERROR, 0, SEQ, PID, &e, sizeof e);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 1 && nlerr == -EPERM, "NLMSG_ERROR: its error (nlerr %d)", nlerr);

	d.n = 0;
	put(&d, NLMSG_ERROR, 0, SEQ, PID, &e, sizeof e.error);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == -EPROTO, "an NLMSG_ERROR too short for struct nlmsgerr is -EPROTO (r %d)", r);

	d.n = 0;
	n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	put(&d, RTM_NEWLINK, NLM_F_MULTI | NLM_F_DUMP_INTR, SEQ, PID, &u, sizeof u);
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ, PID, &zero, sizeof zero);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == -EINTR, "NLM_F_DUMP_INTR (a change mid-dump) is -EINTR (r %d)", r);

	/* Not ours: another port's or another request's; a forged end or
	 * message among them must change nothing. */
	d.n = 0;
	n = 0;
	nlerr = 99;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID + 1, &u, sizeof u);
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ, PID + 1, &zero, sizeof zero);
	put(&d, NLMSG_DONE, NLM_F_MULTI, SEQ + 1, PID, &zero, sizeof zero);
	put(&d, NLMSG_ERROR, 0, SEQ + 1, PID, &e, sizeof e);
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == 0 && n == 0 && nlerr == 99, "messages of another port id or sequence number are skipped (r %d, n %d)",
	   r, n);

	d.n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u)->nlmsg_len = 1000;
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == -EPROTO, "a message longer than the datagram is -EPROTO");
	d.n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u)->nlmsg_len = 4;
	r = nl_walk(d.buf, d.n, SEQ, PID, count, &n, &nlerr);
	ok(r == -EPROTO, "a message shorter than its header is -EPROTO");
	d.n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, &u, sizeof u);
	r = nl_walk(d.buf, d.n + 8, SEQ, PID, count, &n, &nlerr);
	ok(r == -EPROTO, "bytes after the last message, too few for a header, are -EPROTO");
	/* The last message's length unaligned and the datagram ending there:
	 * its aligned step overruns; the walk stops, it does not wrap. */
	d.n = 0;
	n = 0;
	put(&d, RTM_NEWLINK, NLM_F_MULTI, SEQ, PID, "ab", 2);
	r = nl_walk(d.buf, NLMSG_LENGTH(2), SEQ, PID, count, &n, &nlerr);
	ok(r == 0 && n == 1, "an unaligned last message is read once, then more to come (r %d, n %d)", r, n);
}

/* A real dump (the links: any user may) and the connection to the
 * kernel: another socket's unicast to our port id is refused. */
static void sock(void)
{
	struct {
		struct nlmsghdr n;
		struct ifinfomsg i;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETLINK,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 3 },
		.i = { .ifi_family = AF_UNSPEC },
	};
	struct {
		struct nlmsghdr n;
		int err;
	} forged = { .n = { .nlmsg_len = sizeof forged, .nlmsg_type = NLMSG_DONE, .nlmsg_flags = NLM_F_MULTI } };
	struct nlmsghdr noop = { .nlmsg_len = sizeof noop, .nlmsg_type = NLMSG_NOOP };
	struct sockaddr_nl me, to = { .nl_family = AF_NETLINK };
	socklen_t ml = sizeof me;
	char buf[256];
	int n = 0, nlerr = 99, r, fd, other;

	r = nl_dump(NETLINK_ROUTE, &req, sizeof req, count, &n, &nlerr);
	ok(r == 0 && nlerr == 0 && n >= 1, "a link dump from the kernel reads (r %d, nlerr %d, %d links)", r, nlerr,
	   n);

	fd = nl_connect(NETLINK_ROUTE);
	other = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	/* A no-op (no reply, no ack asked) binds the port whether or not
	 * connect() did: a forged message would have somewhere to go. */
	if (fd < 0 || other < 0 || send(fd, &noop, sizeof noop, 0) < 0 ||
	    getsockname(fd, (struct sockaddr *)&me, &ml) < 0 || !me.nl_pid) {
		ok(0, "sockets: %s", strerror(errno));
		return;
	}
	to.nl_pid = me.nl_pid;
	forged.n.nlmsg_seq = 3;
	forged.n.nlmsg_pid = me.nl_pid;
	r = (int)sendto(other, &forged, sizeof forged, 0, (struct sockaddr *)&to, sizeof to);
	ok(r < 0 && errno == ECONNREFUSED, "a forged unicast to the connected socket's port id %u is refused (%s)",
	   me.nl_pid, r < 0 ? strerror(errno) : "sent");
	r = (int)recv(fd, buf, sizeof buf, MSG_DONTWAIT);
	ok(r < 0 && errno == EAGAIN, "and nothing arrives");
	close(other);
	close(fd);
}

int main(void)
{
	walk();
	sock();
	return tap_done();
}
