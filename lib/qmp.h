/* qmp.h - a small QMP client for commands with arguments (glibc tools only).
 *
 * One connection, commands sent one at a time, each built with jansson and
 * tagged with an "id" so that its reply is told apart from events (which
 * are skipped).  An fd can ride along with a command (SCM_RIGHTS), as QMP's
 * getfd wants.  The one QMP client of the host tools. */
#ifndef ISOPOD_QMP_H
#define ISOPOD_QMP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct qmp {
	int fd;
	unsigned id;
	size_t len;
	char buf[1 << 16];
	char err[512];
};

/* Connect to a QMP socket (retrying while it is absent or refuses, until
 * deadline, mono ms), read the greeting and negotiate capabilities.
 * 0, or -1 (q->err); -3 when the deadline passed. */
int qmp_open(struct qmp *q, const char *sock_path, int64_t deadline_ms);
void qmp_close(struct qmp *q);

/* Execute cmd with args (stolen; NULL for none), optionally passing fd
 * (-1 for none) in the same message.  On success *ret (when ret is not
 * NULL) gets the "return" member (new reference).  0 ok, -1 error or QEMU
 * replied "error" (q->err says which), -2 the connection closed, -3 timed
 * out. */
int qmp_call(struct qmp *q, const char *cmd, json_t *args, int fd, json_t **ret,
	     int64_t deadline_ms);

/* Run one argument-less QMP command ("quit", "stop", "cont", ...) on the
 * VM's QMP socket: one connection attempt (no waiting for a socket that is
 * not there), then qmp_capabilities and the command, both sent before
 * the greeting is read; then the greeting (a first line that is not one
 * fails, "no greeting"), the capabilities' reply, the command's.  0 when
 * QEMU answered "return", or, for quit, when the connection closed at any
 * point after those writes, before the greeting included.  -1 with err set;
 * the command may have been sent, and even run, all the same: a failure
 * (a timeout included) after the writes does not mean "not sent".  The
 * tree's callers use it for quit only. */
int qmp_simple(const char *sock_path, const char *command, int64_t deadline_ms,
	       char *err, size_t errsz);

#endif
