/* nldump.c - one netlink dump over a raw socket.  See nldump.h. */

#include "nldump.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

int nl_dump(int proto, const void *req, size_t len, nl_dump_cb cb, void *data, int *nlerr)
{
	long buf[8192 / sizeof(long)];
	int fd, done = 0, r;
	ssize_t n = 0;

	*nlerr = 0;
	if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto)) < 0 || send(fd, req, len, 0) < 0) {
		r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	while (!done && (n = recv(fd, buf, sizeof buf, 0)) > 0) {
		const struct nlmsghdr *h = (const void *)buf;
		size_t left = (size_t)n;

		for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
			if (h->nlmsg_type == NLMSG_DONE) {
				done = 1;
				break;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				const struct nlmsgerr *e = NLMSG_DATA(h);

				*nlerr = e->error;
				done = 1;
				break;
			}
			cb(h, data);
		}
	}
	r = n < 0 ? -errno : 0;
	close(fd);
	return r;
}
