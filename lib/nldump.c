/* nldump.c - one netlink dump over a raw socket.  See nldump.h. */

#include "nldump.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int nl_walk(const void *buf, size_t n, uint32_t seq, uint32_t portid, nl_dump_cb cb, void *data,
	    int *nlerr)
{
	const char *p = buf;
	size_t left = n;

	/* By hand, not NLMSG_OK/NLMSG_NEXT: their size_t arithmetic wraps on
	 * a last message whose aligned length overruns the datagram. */
	while (left >= sizeof(struct nlmsghdr)) {
		struct nlmsghdr h;
		size_t step;

		memcpy(&h, p, sizeof h);
		if (h.nlmsg_len < sizeof h || h.nlmsg_len > left)
			return -EPROTO;
		if (h.nlmsg_seq == seq && h.nlmsg_pid == portid) {
			if (h.nlmsg_flags & NLM_F_DUMP_INTR)
				return -EINTR;
			if (h.nlmsg_type == NLMSG_DONE) {
				int e = 0;

				/* The kernel's dump_done_errno: negative when the
				 * dump failed part-way. */
				if (h.nlmsg_len >= NLMSG_LENGTH(sizeof e))
					memcpy(&e, p + NLMSG_HDRLEN, sizeof e);
				*nlerr = e < 0 ? e : 0;
				return 1;
			}
			if (h.nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr e;

				if (h.nlmsg_len < NLMSG_LENGTH(sizeof e))
					return -EPROTO;
				memcpy(&e, p + NLMSG_HDRLEN, sizeof e);
				*nlerr = e.error;
				return 1;
			}
			cb((const struct nlmsghdr *)(const void *)p, data);
		}
		step = NLMSG_ALIGN(h.nlmsg_len);
		if (step >= left)
			return 0;
		p += step;
		left -= step;
	}
	return left ? -EPROTO : 0;
}

int nl_connect(int proto)
{
	/* nl_pid 0: the kernel.  Connected, the socket refuses unicast from
	 * any other port (ECONNREFUSED to the sender), so no local process
	 * can forge the reply a claim trusts. */
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	int fd, r;

	if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto)) < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)&kernel, sizeof kernel) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

int nl_dump(int proto, const void *req, size_t len, nl_dump_cb cb, void *data, int *nlerr)
{
	long buf[8192 / sizeof(long)];
	struct sockaddr_nl me;
	socklen_t ml = sizeof me;
	const struct nlmsghdr *rq = req;
	int fd, r = 0;

	*nlerr = 0;
	if (len < sizeof *rq)
		return -EINVAL;
	if ((fd = nl_connect(proto)) < 0)
		return fd;
	/* The port id the kernel bound at connect(), which its replies carry. */
	if (send(fd, req, len, 0) < 0 || getsockname(fd, (struct sockaddr *)&me, &ml) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	while (r == 0) {
		struct sockaddr_nl from = { .nl_family = 0 };
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
		struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov,
				    .msg_iovlen = 1 };
		ssize_t n = recvmsg(fd, &m, 0);

		if (n < 0)
			r = -errno;
		else if (m.msg_namelen < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid)
			continue; /* not the kernel's (connect() keeps them out; this too) */
		else if (n == 0)
			r = -EPROTO; /* the reply ended without NLMSG_DONE */
		else if (m.msg_flags & MSG_TRUNC)
			r = -EIO;
		else
			r = nl_walk(buf, (size_t)n, rq->nlmsg_seq, me.nl_pid, cb, data, nlerr);
	}
	close(fd);
	return r < 0 ? r : 0;
}
