/* qmp.c - a small QMP client (see qmp.h). */
#include "qmp.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int remaining(int64_t deadline_ms)
{
	int64_t r = deadline_ms - mono_ms();

	if (r < 0)
		return 0;
	return r > 1000000 ? 1000000 : (int)r;
}

/* The next whole line as a JSON object (new reference), waiting for it.
 * NULL with rc: -1 error, -2 closed, -3 timeout.  Lines that are not JSON
 * objects are skipped (QEMU's socket is trusted, but never blindly). */
static json_t *next_msg(struct qmp *q, int64_t deadline_ms, int *rc)
{
	for (;;) {
		char *nl = memchr(q->buf, '\n', q->len);
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		ssize_t r;

		if (nl) {
			size_t ll = (size_t)(nl - q->buf) + 1;
			json_t *j = json_parse(q->buf, ll, 0, NULL, 0);

			memmove(q->buf, q->buf + ll, q->len - ll);
			q->len -= ll;
			if (j)
				return j;
			continue;
		}
		if (q->len == sizeof q->buf) {
			/* A line longer than 64 KiB: no reply we wait for is. */
			snprintf(q->err, sizeof q->err, "qmp: over-long message");
			*rc = -1;
			return NULL;
		}
		if (mono_ms() >= deadline_ms) {
			snprintf(q->err, sizeof q->err, "qmp: timed out");
			*rc = -3;
			return NULL;
		}
		if (poll(&p, 1, remaining(deadline_ms)) < 0 && errno != EINTR) {
			snprintf(q->err, sizeof q->err, "qmp: poll: %s", strerror(errno));
			*rc = -1;
			return NULL;
		}
		if (!p.revents)
			continue;
		r = read(q->fd, q->buf + q->len, sizeof q->buf - q->len);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0) {
			snprintf(q->err, sizeof q->err, "qmp: connection closed%s%s",
				 r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
			*rc = -2;
			return NULL;
		}
		q->len += (size_t)r;
	}
}

/* Write all of buf; the first chunk carries fd when fd >= 0. */
static int send_all(struct qmp *q, const char *buf, size_t n, int fd, int64_t deadline_ms)
{
	while (n) {
		struct pollfd p = { .fd = q->fd, .events = POLLOUT };
		ssize_t w = fd_send(q->fd, buf, n, fd);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				snprintf(q->err, sizeof q->err, "qmp: write: %s", strerror(errno));
				return -1;
			}
			if (mono_ms() >= deadline_ms) {
				snprintf(q->err, sizeof q->err, "qmp: write timed out");
				return -3;
			}
			poll(&p, 1, remaining(deadline_ms));
			continue;
		}
		fd = -1; /* passed with the first bytes */
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

/* The request line for cmd (args stolen; NULL for none) with the next id,
 * newline-terminated, malloc'd; NULL with q->err. */
static char *request(struct qmp *q, const char *cmd, json_t *args, unsigned *id)
{
	json_t *req;
	char *s, *line = NULL;

	*id = ++q->id;
	req = json_pack("{s:s, s:I}", "execute", cmd, "id", (json_int_t)*id);
	if (!req || (args && json_object_set_new(req, "arguments", args) < 0)) {
		json_decref(req);
		snprintf(q->err, sizeof q->err, "qmp: unable to build %s", cmd);
		return NULL;
	}
	s = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (s && (line = malloc(strlen(s) + 2)))
		sprintf(line, "%s\n", s);
	else
		snprintf(q->err, sizeof q->err, "qmp: unable to build %s", cmd);
	free(s);
	return line;
}

/* The reply to request id (cmd's), events and stale replies skipped. */
static int reply(struct qmp *q, const char *cmd, unsigned id, json_t **ret, int64_t deadline_ms)
{
	json_t *m;
	int rc = 0;

	for (;;) {
		json_t *e, *v;

		if (!(m = next_msg(q, deadline_ms, &rc))) {
			if (rc == -2 && !strcmp(cmd, "quit"))
				return 0; /* QEMU quit before it answered */
			return rc;
		}
		v = json_object_get(m, "id");
		if (!json_is_integer(v) || json_integer_value(v) != (json_int_t)id) {
			json_decref(m); /* an event, or a stale reply */
			continue;
		}
		if ((e = json_object_get(m, "error"))) {
			const char *d = json_string_value(json_object_get(e, "desc"));

			snprintf(q->err, sizeof q->err, "qmp %s: %.400s", cmd, d ? d : "error");
			json_decref(m);
			return -1;
		}
		if (ret) {
			*ret = json_object_get(m, "return");
			json_incref(*ret);
		}
		json_decref(m);
		return 0;
	}
}

int qmp_call(struct qmp *q, const char *cmd, json_t *args, int fd, json_t **ret,
	     int64_t deadline_ms)
{
	unsigned id;
	char *line;
	int rc;

	if (ret)
		*ret = NULL;
	if (!(line = request(q, cmd, args, &id)))
		return -1;
	/* One write with its newline: QEMU acts on a complete object at
	 * once, and after quit a separate newline would meet a closed socket. */
	rc = send_all(q, line, strlen(line), fd, deadline_ms);
	free(line);
	return rc ? rc : reply(q, cmd, id, ret, deadline_ms);
}

/* The greeting, QEMU's first message on a new connection. */
static int greeting(struct qmp *q, const char *sock_path, int64_t deadline_ms)
{
	json_t *g;
	int rc;

	if (!(g = next_msg(q, deadline_ms, &rc)))
		return rc;
	if (!json_object_get(g, "QMP")) {
		json_decref(g);
		snprintf(q->err, sizeof q->err, "qmp: no greeting on %s", sock_path);
		return -1;
	}
	json_decref(g);
	return 0;
}

/* Connect (retrying while absent or refused until retry_ms, when retry);
 * unless only (the caller pipelines them), read the greeting and negotiate
 * capabilities. */
static int qmp_open_(struct qmp *q, const char *sock_path, int retry, int only,
		     int64_t deadline_ms)
{
	struct sockaddr_un sa;
	int rc;

	q->fd = -1;
	q->id = 0;
	q->len = 0;
	q->err[0] = 0;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if (strlen(sock_path) >= sizeof sa.sun_path) {
		snprintf(q->err, sizeof q->err, "qmp: socket path too long: %s", sock_path);
		return -1;
	}
	strcpy(sa.sun_path, sock_path);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), e;
		struct timespec ts = { .tv_nsec = 5 * 1000000 };

		if (fd < 0) {
			snprintf(q->err, sizeof q->err, "qmp: socket: %s", strerror(errno));
			return -1;
		}
		if (unix_connect_nofollow(fd, sock_path) == 0) {
			q->fd = fd;
			break;
		}
		e = errno;
		close(fd);
		/* Absent until QEMU has started; refused while another client
		 * holds the monitor.  Both are transient. */
		if (!retry || (e != ENOENT && e != ECONNREFUSED && e != EAGAIN)) {
			snprintf(q->err, sizeof q->err, "qmp: connect %s: %s", sock_path, strerror(e));
			return -1;
		}
		if (mono_ms() >= deadline_ms) {
			snprintf(q->err, sizeof q->err, "qmp: connect %s: %s (timed out)", sock_path,
				 strerror(e));
			return -3;
		}
		nanosleep(&ts, NULL);
	}
	if (only)
		return 0;
	if ((rc = greeting(q, sock_path, deadline_ms)) < 0 ||
	    (rc = qmp_call(q, "qmp_capabilities", NULL, -1, NULL, deadline_ms)) < 0) {
		qmp_close(q);
		return rc;
	}
	return 0;
}

int qmp_open(struct qmp *q, const char *sock_path, int64_t deadline_ms)
{
	return qmp_open_(q, sock_path, 1, 0, deadline_ms);
}

int qmp_simple(const char *sock_path, const char *command, int64_t deadline_ms,
	       char *err, size_t errsz)
{
	struct qmp *q = malloc(sizeof *q); /* 64 KiB of buffer */
	int r;

	err[0] = 0;
	if (!q) {
		snprintf(err, errsz, "qmp: %s", strerror(errno));
		return -1;
	}
	r = qmp_open_(q, sock_path, 0, 1, deadline_ms);
	if (r == 0) {
		/* Both requests sent before the greeting is read: QEMU
		 * dispatches a connection's requests in order, and checks each
		 * against the commands of the monitor's mode when it runs it, so
		 * the command finds capabilities negotiated.  Two round trips
		 * fewer than greeting, capabilities, command (a stop's QMP quit
		 * took 3 on a busy TCG host, 5-10 ms each: doc/SPEED.md). */
		unsigned cid, id;
		char *cap = request(q, "qmp_capabilities", NULL, &cid), *cmd = request(q, command, NULL, &id);

		if (!cap || !cmd) {
			r = -1;
		} else {
			if ((r = send_all(q, cap, strlen(cap), -1, deadline_ms)) == 0 &&
			    (r = send_all(q, cmd, strlen(cmd), -1, deadline_ms)) == 0 &&
			    (r = greeting(q, sock_path, deadline_ms)) == 0 &&
			    (r = reply(q, "qmp_capabilities", cid, NULL, deadline_ms)) == 0)
				r = reply(q, command, id, NULL, deadline_ms);
			/* quit: QEMU gone before the capabilities' answer is quit done */
			if (r == -2 && !strcmp(command, "quit"))
				r = 0;
		}
		free(cap);
		free(cmd);
	}
	if (r < 0)
		snprintf(err, errsz, "%s", q->err);
	qmp_close(q);
	free(q);
	return r < 0 ? -1 : 0;
}

void qmp_close(struct qmp *q)
{
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
}
