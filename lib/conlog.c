/* conlog.c - a VM's console.log, capped (see conlog.h). */
#include "conlog.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int conlog_open(struct conlog *c, const char *path, long long max, int *qemu_fd)
{
	int p[2], e;

	*c = (struct conlog){ .rfd = -1, .logfd = -1, .max = max };
	/* root's, made here before QEMU runs: in a jailed VM's sticky
	 * directory the jail's uid cannot replace it */
	c->logfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
			0600);
	if (c->logfd < 0)
		return -1;
	if (pipe2(p, O_CLOEXEC) < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		e = errno;
		conlog_close(c);
		errno = e;
		return -1;
	}
	/* room for the supervisor's batching (CONSOLE_BATCH_MS) at any
	 * UART rate; best effort: 64 KiB is what a failure leaves */
	fcntl(p[0], F_SETPIPE_SZ, 1 << 20);
	c->rfd = p[0];
	*qemu_fd = p[1];
	return 0;
}

int conlog_drain(struct conlog *c, uint64_t budget)
{
	char buf[65536];
	uint64_t got = 0;

	while (c->rfd >= 0 && got < budget) {
		ssize_t n = read(c->rfd, buf, sizeof buf);
		uint64_t cap = c->max > 0 ? (uint64_t)c->max : 0, w;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			close(c->rfd);
			c->rfd = -1;
			return 1;
		}
		/* the cap: what is past it is counted, not written */
		w = c->bytes >= cap ? 0 : cap - c->bytes < (uint64_t)n ? cap - c->bytes : (uint64_t)n;
		if (w && !c->werr) {
			if (write_all(c->logfd, buf, (size_t)w) < 0)
				c->werr = errno ? errno : EIO;
			else
				c->kept += w;
		}
		c->bytes += (uint64_t)n;
		got += (uint64_t)n;
	}
	return c->rfd < 0;
}

int conlog_truncated(const struct conlog *c)
{
	return c->bytes > c->kept;
}

const char *conlog_cut(const struct conlog *c, char *buf, size_t sz)
{
	if (c->werr)
		snprintf(buf, sz, "console.log: %s after %llu bytes: %llu bytes written, the rest counted, "
			 "not kept", strerror(c->werr), (unsigned long long)c->kept, (unsigned long long)c->bytes);
	else
		snprintf(buf, sz, "console.log reached its cap of %lld bytes (--console-max): %llu bytes "
			 "written, the rest counted, not kept", c->max, (unsigned long long)c->bytes);
	return buf;
}

void conlog_close(struct conlog *c)
{
	if (c->rfd >= 0)
		close(c->rfd);
	if (c->logfd >= 0)
		close(c->logfd);
	c->rfd = c->logfd = -1;
}
