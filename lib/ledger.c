/* ledger.c - isopod-broker's ledger writer (see ledger.h). */
#include "ledger.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ledger_open_fd(struct ledger *l, int fd, const char *vm)
{
	const char *e = getenv("ISOPOD_LEDGER_MAX");
	struct stat st;
	long long lm;

	*l = (struct ledger){ .fd = fd, .vm = vm, .max = LEDGER_MAX_DEFAULT };
	if (e && *e && parse_ll(e, 1024, 1ll << 40, &lm) == 0)
		l->max = lm;
	if (fd < 0)
		return -1;
	if (fstat(l->fd, &st) == 0)
		l->bytes = (long long)st.st_size;
	return 0;
}

int ledger_open(struct ledger *l, const char *path, const char *vm)
{
	return ledger_open_fd(l, open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600),
			      vm);
}

char *ledger_time(char *buf, size_t sz)
{
	struct timespec ts;
	struct tm tm;
	char s[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf, sz, "%.20s.%03uZ", s, (unsigned)(ts.tv_nsec / 1000000) % 1000);
	return buf;
}

/* json_dumps of o (with vm) and a "\n", o released; NULL when either is
 * NULL. */
static char *line_of(json_t *o, const char *vm)
{
	char *s = NULL, *l = NULL;
	size_t n;

	if (o && vm)
		json_object_set_new(o, "vm", json_string(vm));
	if (o)
		s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (s && (l = realloc(s, (n = strlen(s)) + 2))) {
		l[n] = '\n';
		l[n + 1] = '\0';
		return l;
	}
	free(s);
	errno = ENOMEM;
	return NULL;
}

char *ledger_line(const struct ledger_rec *r, const char *vm, const char *ts)
{
	char ab[INET_ADDRSTRLEN];
	struct in_addr ia = { .s_addr = r->addr };
	json_t *o;

	o = json_pack("{s:s, s:s, s:s?, s:o, s:s?, s:I, s:I, s:s, s:s?, s:I}", "time", ts,
		      "kind", r->kind, "name", r->name, "port",
		      r->port ? json_integer(r->port) : json_null(), "address",
		      r->addr ? inet_ntop(AF_INET, &ia, ab, sizeof ab) : NULL, "up",
		      (json_int_t)r->up, "down", (json_int_t)r->down, "verdict",
		      r->allowed ? "allowed" : "denied", "reason", r->reason, "ms",
		      (json_int_t)(r->ms < 0 ? 0 : r->ms));
	if (o && !strcmp(r->kind, "dns")) /* null for a query too malformed to have one */
		json_object_set_new(o, "qtype", r->qtype ? json_string(r->qtype) : json_null());
	return line_of(o, vm);
}

static int failed(struct ledger *l, const char *what, int err)
{
	if (!l->failed) {
		l->failed = what;
		l->err = err;
	}
	return -1;
}

/* The whole line in one write(2) on the O_APPEND fd.  Nothing after a
 * failure: a write cut short leaves part of a line, which the next one
 * would complete into a line that says neither. */
static int put(struct ledger *l, char *s)
{
	size_t n = strlen(s);
	ssize_t w;
	int e;

	if (l->failed) {
		free(s);
		return -1;
	}
	w = write(l->fd, s, n);
	e = errno;
	free(s);
	if (w != (ssize_t)n)
		return failed(l, "unable to write the ledger", w < 0 ? e : EIO);
	l->bytes += (long long)n;
	return 0;
}

int ledger_write(struct ledger *l, const struct ledger_rec *r)
{
	char ts[64], *s = ledger_line(r, l->vm, ledger_time(ts, sizeof ts));

	if (!s)
		return failed(l, "unable to build a ledger line", 0);
	if (!r->allowed && strcmp(r->kind, "ledger") &&
	    l->bytes + (long long)strlen(s) > l->max) {
		l->suppressed++;
		free(s);
		return 1;
	}
	return put(l, s);
}

int ledger_full(const struct ledger *l)
{
	return l->bytes >= l->max || l->suppressed > 0 || l->failed;
}

int ledger_policy_lost(struct ledger *l, unsigned port, const char *reason)
{
	char ts[64], *s;

	s = line_of(json_pack("{s:s, s:s, s:n, s:i, s:s, s:s}", "time",
			      ledger_time(ts, sizeof ts), "kind", "policy", "name", "port",
			      (int)port, "verdict", "lost", "reason", reason),
		    l->vm);
	if (!s)
		return failed(l, "unable to build a ledger line", 0);
	return put(l, s);
}

int ledger_finish(struct ledger *l)
{
	char why[96];

	if (!l->suppressed)
		return 0;
	snprintf(why, sizeof why, "ledger full: %lld refusals not written", l->suppressed);
	return ledger_write(l, &(struct ledger_rec){ .kind = "ledger", .reason = why });
}
