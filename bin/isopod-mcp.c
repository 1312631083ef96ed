/* isopod-mcp - an MCP server on stdio: isopod's tools for coding agents.
 *
 * JSON-RPC 2.0, one message per line (lib/jsonrpc.c).  A tool call runs
 * the very tools the CLI runs: sandbox_run is `isopod run --json-only`
 * (the front end, beside this binary), the others the isopod-* tool the
 * front end would exec; their JSON comes back as the call's
 * structuredContent, so a result means exactly what the CLI's means.
 * Every call is a child process of its own (a session, so a cancellation
 * can signal its whole group); one poll loop reads their pipes, so calls
 * run concurrently and answer in the order they finish.  Host paths a call
 * names (stdin_file, copy_in, copy_out) are opened here beneath the I/O
 * root with openat2(RESOLVE_BENEATH) and handed to the tools as
 * /proc/<our pid>/fd/N, so what was checked is what they read or write.
 * stdout carries JSON-RPC only; diagnostics go to stderr and, as
 * notifications/message, to the client. */

#include "jsonrpc.h"
#include "proc.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-mcp [--io-root DIR] [--max-concurrent N] [--line-max BYTES]"

/* The revisions we speak: the newest the pinned SDK client sends
 * (t/mcp/package.json) and the one before it.  Newest first. */
static const char *const versions[] = { "2025-11-25", "2025-06-18" };
#define NVERSIONS (sizeof versions / sizeof versions[0])

#define MAX_CALLS 64               /* in flight + queued; more: busy */
#define OUT_MAX (16u << 20)        /* a tool's stdout (the runner's bound too) */
#define ERR_LINE_MAX 600           /* a stderr line relayed (the front end's clip) */
#define KILL_GRACE_MS 5000         /* SIGTERM to the group, then SIGKILL */
/* The front end keeps a run's budget (timeout_s, default 600) itself; a
 * call still there this long after it is stopped, as isopod-runner does. */
#define BUDGET_GRACE_S 60
#define BUDGET_DEFAULT_S 600
#define COPY_MAX 32                /* copy_in, copy_out entries per call */
#define HOLD_MAX (2 * COPY_MAX + 2)

static const char *const levels[] = { "debug", "info", "notice", "warning", "error",
				      "critical", "alert", "emergency" };
#define NLEVELS (sizeof levels / sizeof levels[0])

enum runner { R_FRONT, R_TOOL };

struct buf {
	char *p;
	size_t n, cap;
};

struct call {
	int used, started, cancelled, exited, outeof, erreof, st;
	unsigned long long seq;
	json_t *id;                 /* the request's id (owned) */
	json_t *hostmap;            /* "/proc/<pid>/fd/N" -> the client's path */
	const struct tool *tool;
	char **argv;                /* owned: each string and the array */
	int argc;
	int in_fd;                  /* the child's stdin (-1: /dev/null) */
	int hold[HOLD_MAX], nhold;  /* fds named as /proc/<pid>/fd/N */
	int status_fd;              /* R_TOOL: ISOPOD_STATUS_FD, a memfd */
	pid_t pid;
	int out_fd, err_fd;
	struct buf out, err;
	int64_t kill_at;
	int64_t deadline;           /* past it the call is stopped (a hung tool) */
	long long budget_s;         /* timeout_s, else BUDGET_DEFAULT_S */
	json_t *progress;           /* the request's _meta.progressToken, or NULL */
	int progress_n;             /* notifications sent (progress only grows) */
	char vm_state[64];          /* the last state reported */
};

struct server {
	struct rpc_lines lines;
	int initialized, level, eof, sfd, root_fd, max_conc, running;
	unsigned long long seq;
	char root[PATH_MAX], libexec[PATH_MAX], front[PATH_MAX];
	struct call calls[MAX_CALLS];
};

struct tool {
	const char *name, *desc, *in, *out;
	enum runner runner;
	const char *list_key; /* stdout is JSON lines, collected under this key */
	int (*build)(struct server *, struct call *, json_t *args, json_t **err);
};

/* ---- output ------------------------------------------------------------------ */

static void send_msg(json_t *msg)
{
	size_t n;
	char *line = rpc_line(msg, &n);

	json_decref(msg);
	if (!line) { /* a message that did not build: never a reason to die */
		fprintf(stderr, "%s: error: unable to encode a message\n", progname);
		return;
	}
	/* One write per message: a line is never interleaved.  A client that
	 * is gone ends the server (EPIPE), as stdin's end does. */
	if (write_all(1, line, n) < 0)
		die(EX_SYS, "unable to write to standard output:");
	free(line);
}

__attribute__((format(printf, 3, 4))) static void logmsg(struct server *s, int level,
							 const char *fmt, ...)
{
	char m[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (level >= 1 || s->level == 0)
		fprintf(stderr, "%s: %s: %s\n", progname, levels[level], m);
	if (s->initialized && level >= s->level)
		send_msg(rpc_notification("notifications/message",
					  json_pack("{s:s, s:s, s:s}", "level", levels[level],
						    "logger", "isopod-mcp", "data", m)));
}

static void reply_error(json_t *id, int code, const char *msg, json_t *data)
{
	send_msg(rpc_error(id, code, msg ? msg : "invalid params", data));
}

/* A tool's answer: structuredContent, and the same JSON as text. */
static void reply_tool(json_t *id, json_t *sc, int is_error)
{
	char *text = json_dumps(sc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_t *r;

	if (!text)
		die(EX_SYS, "unable to encode a result: out of memory");
	r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text,
		      "structuredContent", sc, "isError", is_error);
	free(text);
	send_msg(rpc_result(id, r));
}

/* ---- input validation: the tool's own inputSchema, read by a small
 * validator (the keywords below, nothing else), so the schema a client
 * sees and the rules we enforce are one text. */

/* printable ASCII only: a field name cut at a byte count (or quoted
 * client text) must not make the answer unencodable (invalid UTF-8). */
static char *ascii(char *t)
{
	for (char *c = t; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c > 0x7e)
			*c = '?';
	return t;
}

static int bad(json_t **err, const char *field, const char *fmt, ...)
{
	char m[600], f[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	snprintf(f, sizeof f, "%s", field);
	*err = json_pack("{s:s, s:s}", "field", ascii(f), "message", ascii(m));
	return -1;
}

static int validate(const json_t *sch, const json_t *v, const char *path, json_t **err)
{
	const char *type = json_string_value(json_object_get(sch, "type"));
	json_t *t, *e;
	const char *k;
	char sub[300];
	size_t i;

	if (!type)
		return 0;
	if (!strcmp(type, "object")) {
		json_t *props = json_object_get(sch, "properties");
		json_t *addl = json_object_get(sch, "additionalProperties");
		json_t *pn = json_object_get(json_object_get(sch, "propertyNames"), "pattern");

		if (!json_is_object(v))
			return bad(err, path, "%s: want an object", path);
		if ((t = json_object_get(sch, "maxProperties")) &&
		    json_object_size(v) > (size_t)json_integer_value(t))
			return bad(err, path, "%s: at most %lld members", path,
				   (long long)json_integer_value(t));
		json_array_foreach(json_object_get(sch, "required"), i, e)
			if (!json_object_get(v, json_string_value(e)))
				return bad(err, path, "%s%s%s: missing", path, *path ? "." : "",
					   json_string_value(e));
		json_object_foreach((json_t *)v, k, e) {
			json_t *ps = json_object_get(props, k);

			snprintf(sub, sizeof sub, "%s%s%.64s", path, *path ? "." : "", k);
			if (pn) {
				regex_t re;
				int no;

				if (regcomp(&re, json_string_value(pn), REG_EXTENDED | REG_NOSUB))
					return bad(err, path, "%s: bad schema pattern", path);
				no = regexec(&re, k, 0, NULL, 0);
				regfree(&re);
				if (no)
					return bad(err, sub, "%s: bad name %s; want %s", path, EXC(k),
						   json_string_value(pn));
			}
			if (!ps && json_is_false(addl))
				return bad(err, sub, "%s: unknown field", sub);
			if (!ps)
				ps = addl;
			if (json_is_object(ps) && validate(ps, e, sub, err) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "array")) {
		if (!json_is_array(v))
			return bad(err, path, "%s: want an array", path);
		if ((t = json_object_get(sch, "minItems")) &&
		    json_array_size(v) < (size_t)json_integer_value(t))
			return bad(err, path, "%s: at least %lld items", path,
				   (long long)json_integer_value(t));
		if ((t = json_object_get(sch, "maxItems")) &&
		    json_array_size(v) > (size_t)json_integer_value(t))
			return bad(err, path, "%s: at most %lld items", path,
				   (long long)json_integer_value(t));
		json_array_foreach(v, i, e) {
			snprintf(sub, sizeof sub, "%s[%zu]", path, i);
			if (validate(json_object_get(sch, "items"), e, sub, err) < 0)
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "string")) {
		json_t *en = json_object_get(sch, "enum");
		json_t *pat = json_object_get(sch, "pattern");

		if (!json_is_string(v))
			return bad(err, path, "%s: want a string", path);
		if ((t = json_object_get(sch, "minLength")) &&
		    json_string_length(v) < (size_t)json_integer_value(t))
			return bad(err, path, "%s: at least %lld characters", path,
				   (long long)json_integer_value(t));
		if ((t = json_object_get(sch, "maxLength")) &&
		    json_string_length(v) > (size_t)json_integer_value(t))
			return bad(err, path, "%s: at most %lld bytes", path,
				   (long long)json_integer_value(t));
		if (pat) {
			regex_t re;
			int no;

			if (regcomp(&re, json_string_value(pat), REG_EXTENDED | REG_NOSUB))
				return bad(err, path, "%s: bad schema pattern", path);
			no = regexec(&re, json_string_value(v), 0, NULL, 0);
			regfree(&re);
			if (no)
				return bad(err, path, "%s: %s does not match %s", path,
					   EXC(json_string_value(v)), json_string_value(pat));
		}
		if (en) {
			json_array_foreach(en, i, e)
				if (json_equal(e, v))
					return 0;
			return bad(err, path, "%s: %s; want one of %s", path,
				   EXC(json_string_value(v)), json_string_value(json_object_get(sch, "description")));
		}
		return 0;
	}
	if (!strcmp(type, "integer")) {
		json_t *lo = json_object_get(sch, "minimum"), *hi = json_object_get(sch, "maximum");

		if (!json_is_integer(v) ||
		    (lo && json_integer_value(v) < json_integer_value(lo)) ||
		    (hi && json_integer_value(v) > json_integer_value(hi)))
			return bad(err, path, "%s: want an integer from %lld to %lld", path,
				   lo ? (long long)json_integer_value(lo) : (long long)INT64_MIN,
				   hi ? (long long)json_integer_value(hi) : (long long)INT64_MAX);
		return 0;
	}
	if (!strcmp(type, "boolean")) {
		if (!json_is_boolean(v))
			return bad(err, path, "%s: want true or false", path);
		return 0;
	}
	return 0;
}

/* ---- argv --------------------------------------------------------------------- */

static int arg(struct call *c, const char *a)
{
	char **av = realloc(c->argv, (size_t)(c->argc + 2) * sizeof *av);

	if (!av)
		return -1;
	c->argv = av;
	if (!(av[c->argc] = strdup(a)))
		return -1;
	av[++c->argc] = NULL;
	return 0;
}

/* Allocated to fit: an env value may be as long as an argument may be. */
__attribute__((format(printf, 2, 3))) static int argf(struct call *c, const char *fmt, ...)
{
	char *b;
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vasprintf(&b, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	r = arg(c, b);
	free(b);
	return r;
}

/* What execve takes: each string at most MAX_ARG_STRLEN (32 pages, with
 * its NUL), and all of them with our environment within ARG_MAX.  Half of
 * that is the budget: the front end adds its own arguments and passes
 * these on.  Checked before exec so that too much is the client's -32602,
 * not an E2BIG reported as an infrastructure failure. */
#define ARG_STR_MAX 131071
static int argv_fits(const struct call *c, json_t **err)
{
	long amax = sysconf(_SC_ARG_MAX);
	size_t total = 0, budget = (size_t)(amax > 0 ? amax : 131072) / 2;

	for (char **e = environ; *e; e++)
		total += strlen(*e) + 1 + sizeof *e;
	for (int i = 0; i < c->argc; i++) {
		size_t n = strlen(c->argv[i]);

		if (n > ARG_STR_MAX)
			return bad(err, "argv", "command, argv or env: an argument of %zu bytes; "
				   "at most %d each", n, ARG_STR_MAX);
		total += n + 1 + sizeof c->argv[i];
	}
	if (total > budget)
		return bad(err, "argv", "command, argv, env and paths: %zu bytes together; "
			   "at most %zu", total, budget);
	return 0;
}

static void call_free(struct call *c)
{
	for (int i = 0; i < c->argc; i++)
		free(c->argv[i]);
	free(c->argv);
	for (int i = 0; i < c->nhold; i++)
		close(c->hold[i]);
	if (c->in_fd >= 0)
		close(c->in_fd);
	if (c->status_fd >= 0)
		close(c->status_fd);
	if (c->out_fd >= 0)
		close(c->out_fd);
	if (c->err_fd >= 0)
		close(c->err_fd);
	free(c->out.p);
	free(c->err.p);
	json_decref(c->id);
	json_decref(c->hostmap);
	json_decref(c->progress);
	*c = (struct call){ .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1 };
}

/* ---- the I/O root -------------------------------------------------------------- */

/* path (relative to the root, or absolute inside it) opened beneath the
 * root: `..` that climbs out, an absolute path elsewhere, a symlink whose
 * target leaves the root and /proc magic links are refused by the kernel
 * (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), not by string checks. */
static int beneath(struct server *s, const char *path, const char *shown, int flags,
		   const char *field, json_t **err)
{
	size_t rl = strlen(s->root);
	const char *rel = path;
	struct open_how how = { .flags = (unsigned long long)(flags | O_CLOEXEC),
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
	int fd;

	if (path[0] == '/') {
		if (rl == 1)
			rel = path + 1;
		else if (!strncmp(path, s->root, rl) && (path[rl] == '/' || !path[rl]))
			rel = path + rl;
		else
			return bad(err, field, "%s: %s is outside the I/O root %s", field, EXC(shown),
				   EXC(s->root));
		while (*rel == '/')
			rel++;
	}
	if (!*rel)
		rel = ".";
	fd = (int)syscall(SYS_openat2, s->root_fd, rel, &how, sizeof how);
	if (fd >= 0)
		return fd;
	if (errno == EXDEV)
		return bad(err, field, "%s: %s leaves the I/O root %s (.. or a symlink out of it)",
			   field, EXC(shown), EXC(s->root));
	if (errno == ELOOP)
		return bad(err, field, "%s: %s: a magic link or too many symlinks", field, EXC(shown));
	return bad(err, field, "%s: %s: %s", field, EXC(shown), strerror(errno));
}

static int hold(struct call *c, int fd)
{
	if (c->nhold >= HOLD_MAX) {
		close(fd);
		return -1;
	}
	c->hold[c->nhold++] = fd;
	return fd;
}

/* A regular file beneath the root, for reading (a FIFO must not block us). */
static int open_in(struct server *s, const char *path, const char *field, json_t **err)
{
	struct stat st;
	int fd = beneath(s, path, path, O_RDONLY | O_NONBLOCK, field, err);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return bad(err, field, "%s: %s is not a regular file", field, EXC(path));
	}
	fcntl(fd, F_SETFL, 0);
	return fd;
}

/* A copy_out destination: a directory beneath the root, or a name in one
 * that is absent or a regular file.  The destination handed on is
 * /proc/<pid>/fd/N/{.,NAME} with N our descriptor of that directory: its
 * path can no longer be swapped.  NAME made a symlink after this check is
 * not followed: isopod-exec(1) never follows a copy-out destination's last
 * component (hence "/." for a directory: fd/N itself is a symlink). */
static int dest_out(struct server *s, struct call *c, const char *path, const char *field,
		    char *dst, size_t dsz, json_t **err)
{
	char parent[PATH_MAX];
	const char *base;
	struct stat st;
	json_t *ignored = NULL;
	int fd = beneath(s, path, path, O_PATH | O_DIRECTORY, field, &ignored);

	json_decref(ignored);
	if (fd >= 0) {
		if (hold(c, fd) < 0)
			return bad(err, field, "%s: too many host paths", field);
		snprintf(dst, dsz, "/proc/%d/fd/%d/.", (int)getpid(), fd);
		json_object_set_new(c->hostmap, dst, json_string(path));
		return 0;
	}
	if (pathn(parent, sizeof parent, "%s", path) < 0)
		return bad(err, field, "%s: path too long", field);
	base = strrchr(parent, '/');
	if (base) {
		parent[base - parent] = 0;
		base = path + (base - parent) + 1;
		if (!parent[0])
			strcpy(parent, "/");
	} else {
		strcpy(parent, ".");
		base = path;
	}
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return bad(err, field, "%s: %s names no file", field, EXC(path));
	if ((fd = beneath(s, parent, path, O_PATH | O_DIRECTORY, field, err)) < 0)
		return -1;
	if (fstatat(fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
		close(fd);
		return bad(err, field, "%s: %s exists and is not a regular file or a directory "
			   "beneath the I/O root", field, EXC(path));
	}
	if (hold(c, fd) < 0)
		return bad(err, field, "%s: too many host paths", field);
	if (snprintf(dst, dsz, "/proc/%d/fd/%d/%s", (int)getpid(), fd, base) >= (int)dsz)
		return bad(err, field, "%s: path too long", field);
	json_object_set_new(c->hostmap, dst, json_string(path));
	return 0;
}

/* ---- the tools ---------------------------------------------------------------- */

static int build_copies(struct server *s, struct call *c, json_t *args, const char *opt_in,
			const char *opt_out, json_t **err)
{
	char f[64], p[PATH_MAX + 32];
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(args, "copy_in"), i, e) {
		int fd;

		snprintf(f, sizeof f, "copy_in[%zu].host", i);
		if ((fd = open_in(s, json_string_value(json_object_get(e, "host")), f, err)) < 0)
			return -1;
		if (hold(c, fd) < 0)
			return bad(err, f, "%s: too many host paths", f);
		if (arg(c, opt_in) < 0 || argf(c, "/proc/%d/fd/%d:%s", (int)getpid(), fd,
					      json_string_value(json_object_get(e, "guest"))) < 0)
			return bad(err, f, "%s: path too long", f);
		snprintf(p, sizeof p, "/proc/%d/fd/%d", (int)getpid(), fd);
		json_object_set_new(c->hostmap, p, json_string(json_string_value(json_object_get(e, "host"))));
	}
	json_array_foreach(json_object_get(args, "copy_out"), i, e) {
		snprintf(f, sizeof f, "copy_out[%zu].host", i);
		if (dest_out(s, c, json_string_value(json_object_get(e, "host")), f, p, sizeof p,
			     err) < 0)
			return -1;
		if (arg(c, opt_out) < 0 || argf(c, "%s:%s", json_string_value(json_object_get(e, "guest")),
						p) < 0)
			return bad(err, f, "%s: path too long", f);
	}
	return 0;
}

/* stdin (text, through a memfd) or stdin_file (beneath the root): the
 * child's standard input, which the front end forwards to the command. */
static int build_stdin(struct server *s, struct call *c, json_t *args, json_t **err)
{
	json_t *text = json_object_get(args, "stdin");
	json_t *file = json_object_get(args, "stdin_file");

	if (text && file)
		return bad(err, "stdin_file", "stdin and stdin_file: give one of them");
	if (file) {
		if ((c->in_fd = open_in(s, json_string_value(file), "stdin_file", err)) < 0)
			return -1;
	} else if (text) {
		c->in_fd = memfd_create("isopod-mcp-stdin", MFD_CLOEXEC);
		if (c->in_fd < 0 ||
		    write_all(c->in_fd, json_string_value(text), json_string_length(text)) < 0 ||
		    lseek(c->in_fd, 0, SEEK_SET) < 0)
			return bad(err, "stdin", "stdin: unable to buffer it: %s", strerror(errno));
	}
	return 0;
}

static int add_env(struct call *c, json_t *args)
{
	const char *k;
	json_t *v;

	json_object_foreach(json_object_get(args, "env"), k, v)
		if (arg(c, "--env") < 0 || argf(c, "%s=%s", k, json_string_value(v)) < 0)
			return -1;
	return 0;
}

static int add_command(struct call *c, json_t *args, json_t **err)
{
	json_t *argv = json_object_get(args, "argv"), *cmd = json_object_get(args, "command"), *e;
	size_t i;

	if (!!argv == !!cmd)
		return bad(err, "argv", "argv or command: give exactly one");
	if (arg(c, "--") < 0)
		return -1;
	if (cmd)
		return arg(c, "sh") < 0 || arg(c, "-c") < 0 || arg(c, json_string_value(cmd)) < 0 ? -1 : 0;
	json_array_foreach(argv, i, e)
		if (arg(c, json_string_value(e)) < 0)
			return -1;
	return 0;
}

static int build_run(struct server *s, struct call *c, json_t *args, json_t **err)
{
	static const struct {
		const char *key, *opt;
	} strs[] = { { "cwd", "--cwd" }, { "stage", "--stage" }, { "commit_as", "--commit-as" },
		     { "net", "--net" }, { "name", "--name" } },
	  ints[] = { { "timeout_s", "--timeout-s" }, { "vcpus", "--vcpus" },
		     { "mem_mib", "--mem-mib" }, { "disk_mib", "--disk-mib" } };
	json_t *v;
	size_t i;

	if (arg(c, s->front) < 0 || arg(c, "run") < 0 || arg(c, "--json-only") < 0)
		return -1;
	for (i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if ((v = json_object_get(args, strs[i].key)) &&
		    (arg(c, strs[i].opt) < 0 || arg(c, json_string_value(v)) < 0))
			return -1;
	for (i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if ((v = json_object_get(args, ints[i].key)) &&
		    argf(c, "%s=%lld", ints[i].opt, (long long)json_integer_value(v)) < 0)
			return -1;
	json_array_foreach(json_object_get(args, "allow"), i, v)
		if (arg(c, "--allow") < 0 || arg(c, json_string_value(v)) < 0)
			return -1;
	if ((json_is_true(json_object_get(args, "keep")) && arg(c, "--keep") < 0) ||
	    (json_is_true(json_object_get(args, "cold")) && arg(c, "--cold") < 0) || add_env(c, args) < 0)
		return -1;
	if (build_stdin(s, c, args, err) < 0 ||
	    build_copies(s, c, args, "--copy-in", "--copy-out", err) < 0)
		return -1;
	return add_command(c, args, err);
}

static int tool_path(struct server *s, struct call *c, const char *name)
{
	return argf(c, "%s/%s", s->libexec, name);
}

static int build_exec(struct server *s, struct call *c, json_t *args, json_t **err)
{
	json_t *v;

	if (tool_path(s, c, "isopod-exec") < 0 || arg(c, "--vm") < 0 ||
	    arg(c, json_string_value(json_object_get(args, "vm"))) < 0 ||
	    argf(c, "--timeout-ms=%lld", (v = json_object_get(args, "timeout_s")) ?
			(long long)json_integer_value(v) * 1000 : 600000LL) < 0 ||
	    add_env(c, args) < 0)
		return -1;
	if ((v = json_object_get(args, "cwd")) && (arg(c, "--cwd") < 0 || arg(c, json_string_value(v)) < 0))
		return -1;
	if (build_stdin(s, c, args, err) < 0)
		return -1;
	if (c->in_fd >= 0 && (arg(c, "--stdin-file") < 0 || arg(c, "-") < 0))
		return -1;
	if (build_copies(s, c, args, "--copy-in", "--copy-out", err) < 0)
		return -1;
	return add_command(c, args, err);
}

static int build_simple(struct server *s, struct call *c, json_t *args, json_t **err)
{
	const char *n = c->tool->name;
	json_t *v = json_object_get(args, "vm"), *st = json_object_get(args, "stage");
	json_t *e;
	size_t i;

	if (!strcmp(n, "vm_list"))
		return tool_path(s, c, "isopod-vm") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "vm_stop"))
		return tool_path(s, c, "isopod-stop") < 0 ||
		       (json_is_true(json_object_get(args, "force")) && arg(c, "--force") < 0) ||
		       arg(c, "--vm") < 0 || arg(c, json_string_value(v)) < 0 ? -1 : 0;
	if (!strcmp(n, "vm_rm")) {
		if (arg(c, s->front) < 0 || arg(c, "vm") < 0 || arg(c, "rm") < 0 ||
		    (json_is_true(json_object_get(args, "force")) && arg(c, "--force") < 0) ||
		    arg(c, "--") < 0)
			return -1;
		json_array_foreach(json_object_get(args, "vms"), i, e)
			if (arg(c, json_string_value(e)) < 0)
				return -1;
		return 0;
	}
	if (!strcmp(n, "stage_list"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "stage_info"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "info") < 0 ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "stage_rm"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "rm") < 0 ||
		       (json_is_true(json_object_get(args, "recursive")) && arg(c, "--recursive") < 0) ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "stage_flatten"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "flatten") < 0 ||
		       arg(c, "--as") < 0 ||
		       arg(c, json_string_value(json_object_get(args, "as"))) < 0 ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "warm_list"))
		return tool_path(s, c, "isopod-warm") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "warm_rm")) {
		json_t *keys = json_object_get(args, "keys");
		int orph = json_is_true(json_object_get(args, "orphaned"));
		int all = json_is_true(json_object_get(args, "all"));

		if ((keys ? 1 : 0) + orph + all != 1)
			return bad(err, "keys", "keys, orphaned or all: give exactly one");
		if (tool_path(s, c, "isopod-warm") < 0 || arg(c, "rm") < 0 ||
		    (orph && arg(c, "--orphaned") < 0) || (all && arg(c, "--all") < 0))
			return -1;
		json_array_foreach(keys, i, e)
			if (arg(c, json_string_value(e)) < 0)
				return -1;
		return 0;
	}
	if (!strcmp(n, "image_list"))
		return tool_path(s, c, "isopod-image") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "gc")) {
		if (tool_path(s, c, "isopod-gc") < 0 ||
		    (json_is_true(json_object_get(args, "dry_run")) && arg(c, "--dry-run") < 0) ||
		    ((v = json_object_get(args, "keep_last")) &&
		     argf(c, "--keep-last=%lld", (long long)json_integer_value(v)) < 0) ||
		    ((v = json_object_get(args, "older_than")) &&
		     argf(c, "--older-than=%s", json_string_value(v)) < 0))
			return -1;
		return 0;
	}
	if (!strcmp(n, "doctor_status"))
		return arg(c, s->front) < 0 || arg(c, "doctor") < 0 || arg(c, "--quick") < 0 ? -1 : 0;
	return -1;
}

/* Result schemas: every structuredContent has "ok"; a failure is
 * {ok:false, error, error_kind[, exit]} (doc/INTERFACES.md's kinds). */
#define OUT_FAIL "\"ok\":{\"type\":\"boolean\"},\"error\":{\"type\":\"string\"}," \
	"\"error_kind\":{\"type\":\"string\"},\"exit\":{\"type\":\"integer\"}"
#define OUT_OBJ(extra) "{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{" OUT_FAIL extra "}}"
#define OUT_LIST(key) OUT_OBJ(",\"" key "\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}")
#define HOSTCOPY(gpat) "{\"type\":\"array\",\"maxItems\":32,\"items\":{\"type\":\"object\"," \
	"\"additionalProperties\":false,\"required\":[\"host\",\"guest\"],\"properties\":{" \
	"\"host\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,\"description\":\"a host path beneath the I/O root\"}," \
	"\"guest\":{\"type\":\"string\",\"pattern\":\"" gpat "\",\"maxLength\":4000,\"description\":\"an absolute guest path\"}}}}"
#define CMD_PROPS \
	"\"argv\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":256,\"items\":{\"type\":\"string\",\"maxLength\":131071},\"description\":\"the command as words (no shell)\"}," \
	"\"command\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":131071,\"description\":\"a shell command, run as sh -c COMMAND: a pipeline's status is its last command's unless it starts with set -o pipefail\"}," \
	"\"env\":{\"type\":\"object\",\"maxProperties\":64,\"propertyNames\":{\"pattern\":\"^[A-Za-z_][A-Za-z0-9_]*$\"},\"additionalProperties\":{\"type\":\"string\",\"maxLength\":131000}}," \
	"\"cwd\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000}," \
	"\"stdin\":{\"type\":\"string\",\"maxLength\":1048576,\"description\":\"text for the command's standard input\"}," \
	"\"stdin_file\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,\"description\":\"a host file beneath the I/O root for the command's standard input\"}," \
	"\"copy_in\":" HOSTCOPY("^/") "," \
	"\"copy_out\":" HOSTCOPY("^/[^:]*$") ","
#define REF "{\"type\":\"string\",\"minLength\":1,\"maxLength\":200}"
/* A stage passed positionally has a label's grammar (label_invalid in
 * lib/stage.c): not starting with '-' or '.' (never an option), no '/', no
 * control bytes; and comes after "--".  Option arguments (stage,
 * commit_as, as) keep REF: the tool's own message says what is wrong. */
#define POSREF "{\"type\":\"string\",\"minLength\":1,\"maxLength\":200," \
	"\"pattern\":\"^[^-./\\u0001-\\u001f\\u007f][^/\\u0001-\\u001f\\u007f]*$\"}"

static const struct tool tools[] = {
	{ .name = "sandbox_run", .runner = R_FRONT, .build = build_run,
	  .desc = "Run a command in a fresh isopod microVM (QEMU; egress denied at the host unless "
		  "net/allow say otherwise) and return `isopod run`'s result: exit_code, signal, "
		  "timed_out, stdout/stderr (capped, with exact sizes and log paths), commit, egress, "
		  "warnings, timings.  A command that fails is a normal result (ok true, its "
		  "exit_code); isError means the sandbox failed (error_kind).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" CMD_PROPS
		"\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400}," 
		"\"vcpus\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1024},"
		"\"mem_mib\":{\"type\":\"integer\",\"minimum\":64,\"maximum\":1048576},"
		"\"disk_mib\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1048576},"
		"\"stage\":" REF ",\"commit_as\":" REF ",\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"
		"\"net\":{\"type\":\"string\",\"enum\":[\"none\",\"filtered\",\"open\"],\"description\":\"none, filtered or open\"},"
		"\"allow\":{\"type\":\"array\",\"maxItems\":64,\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":300}},"
		"\"keep\":{\"type\":\"boolean\"},\"cold\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ(",\"exit_code\":{\"type\":[\"integer\",\"null\"]},\"timed_out\":{\"type\":\"boolean\"},"
			 "\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"},"
			 "\"vm\":{},\"warnings\":{\"type\":\"array\"}") },
	{ .name = "vm_exec", .runner = R_TOOL, .build = build_exec,
	  .desc = "Run another command in a VM kept with sandbox_run keep:true (isopod-exec).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vm\"],\"properties\":{"
		"\"vm\":" REF "," CMD_PROPS
		"\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400}}}",
	  .out = OUT_OBJ(",\"exit_code\":{\"type\":[\"integer\",\"null\"]}") },
	{ .name = "vm_list", .runner = R_TOOL, .build = build_simple, .list_key = "vms",
	  .desc = "The VM records, oldest first, each with whether it is running (isopod vm ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("vms") },
	{ .name = "vm_stop", .runner = R_TOOL, .build = build_simple,
	  .desc = "Stop a VM (isopod-stop).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vm\"],\"properties\":{"
		"\"vm\":" REF ",\"force\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "vm_rm", .runner = R_FRONT, .build = build_simple,
	  .desc = "Remove VM records (isopod vm rm; force stops running ones).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vms\"],\"properties\":{"
		"\"vms\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":64,\"items\":" REF "},\"force\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ(",\"removed\":{\"type\":\"array\"}") },
	{ .name = "stage_list", .runner = R_TOOL, .build = build_simple, .list_key = "stages",
	  .desc = "The committed stages (isopod-stage ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("stages") },
	{ .name = "stage_info", .runner = R_TOOL, .build = build_simple,
	  .desc = "One stage's record and chain (isopod-stage info).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\"],\"properties\":{\"stage\":" POSREF "}}",
	  .out = OUT_OBJ("") },
	{ .name = "stage_rm", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove a stage (isopod-stage rm).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\"],\"properties\":{"
		"\"stage\":" POSREF ",\"recursive\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "stage_flatten", .runner = R_TOOL, .build = build_simple,
	  .desc = "Flatten a stage's chain into one layer on the same base, as a new stage (isopod-stage flatten).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\",\"as\"],\"properties\":{"
		"\"stage\":" POSREF ",\"as\":" REF "}}",
	  .out = OUT_OBJ("") },
	{ .name = "warm_list", .runner = R_TOOL, .build = build_simple, .list_key = "snapshots",
	  .desc = "The warm snapshots (isopod-warm ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("snapshots") },
	{ .name = "warm_rm", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove warm snapshots: by key, the orphaned ones, or all (isopod-warm rm).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
		"\"keys\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":64,\"items\":{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{64}$\"}},"
		"\"orphaned\":{\"type\":\"boolean\"},\"all\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "image_list", .runner = R_TOOL, .build = build_simple, .list_key = "images",
	  .desc = "The kernels and base images (isopod-image ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("images") },
	{ .name = "gc", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove old records, reap leaked VMs and locks (isopod-gc).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
		"\"dry_run\":{\"type\":\"boolean\"},\"keep_last\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000000},"
		"\"older_than\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":32}}}",
	  .out = OUT_OBJ("") },
	{ .name = "doctor_status", .runner = R_FRONT, .build = build_simple,
	  .desc = "What this host can do: accelerator, QEMU, images (isopod doctor --quick).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_OBJ("") },
};
#define NTOOLS (sizeof tools / sizeof tools[0])

static json_t *schema(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &e);

	if (!j) /* a constant of ours: a build-time mistake */
		die(EX_SYS, "bad built-in schema at %d: %s", e.position, e.text);
	return j;
}

static json_t *tool_list(void)
{
	json_t *a = json_array();

	for (size_t i = 0; i < NTOOLS; i++)
		json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:o}", "name", tools[i].name,
						   "description", tools[i].desc, "inputSchema",
						   schema(tools[i].in), "outputSchema",
						   schema(tools[i].out)));
	return json_pack("{s:o}", "tools", a);
}

/* ---- progress ---------------------------------------------------------------- */

static void progress(struct call *c, const char *msg)
{
	if (!c->progress || (!json_is_string(c->progress) && !json_is_integer(c->progress)))
		return;
	send_msg(rpc_notification("notifications/progress",
				  json_pack("{s:O, s:i, s:s}", "progressToken", c->progress,
					    "progress", ++c->progress_n, "message", msg)));
}

/* The VM a sandbox_run call's front end boots names it as its owner
 * (isopod-boot --owner-pid, in the record lib/vm.c keeps): each change of
 * that record's state (booting, running, stopped...) is a progress
 * notification.  Read through vm_list, the records' one reader, and only
 * for calls that asked (a progressToken), every PROGRESS_MS. */
#define PROGRESS_MS 500
static void progress_tick(struct server *s)
{
	json_t *list = NULL, *r;
	char why[256], m[160];
	size_t i;

	for (int k = 0; k < MAX_CALLS; k++) {
		struct call *c = &s->calls[k];
		const char *st, *id, *path;

		if (!c->used || !c->started || c->exited || !c->progress ||
		    c->tool->runner != R_FRONT || strcmp(c->tool->name, "sandbox_run"))
			continue;
		if (!list && !(list = vm_list(NULL, why, sizeof why)))
			return;
		json_array_foreach(list, i, r) {
			if (json_integer_value(json_object_get(r, "owner_pid")) != c->pid)
				continue;
			st = json_string_value(json_object_get(r, "state"));
			id = json_string_value(json_object_get(r, "id"));
			path = json_string_value(json_object_get(r, "path"));
			if (!st || !id || !strcmp(st, c->vm_state))
				continue;
			snprintf(c->vm_state, sizeof c->vm_state, "%s", st);
			snprintf(m, sizeof m, "%s: %s%s%s", id, st, path ? ", " : "", path ? path : "");
			progress(c, ascii(m));
		}
	}
	json_decref(list);
}

/* ---- calls ------------------------------------------------------------------- */

static void start_call(struct server *s, struct call *c)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	struct proc_spec ps = PROC_SPEC(c->argv);
	pid_t pid;

	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
	    (c->tool->runner == R_TOOL &&
	     (c->status_fd = memfd_create("isopod-mcp-status", MFD_CLOEXEC)) < 0)) {
		logmsg(s, 4, "unable to start %s: %s", c->tool->name, strerror(errno));
		reply_tool(c->id, json_failure("infra", "unable to start %s: %s", c->argv[0],
					  strerror(errno)), 1);
		for (int i = 0; i < 2; i++) {
			if (po[i] >= 0)
				close(po[i]);
			if (pe[i] >= 0)
				close(pe[i]);
		}
		call_free(c);
		return;
	}
	ps.file = c->argv[0];
	ps.in = c->in_fd >= 0 ? c->in_fd : PROC_NULL;
	ps.out = po[1], ps.err = pe[1];
	/* a session of its own: a cancellation signals the whole group; our
	 * death signals the front end, which stops its VM (isopod(1)). */
	ps.setsid = 1, ps.pdeathsig = SIGTERM;
	if (c->status_fd >= 0) {
		ps.keep[0] = c->status_fd, ps.nkeep = 1;
		setenv("ISOPOD_STATUS_FD", "3", 1);
	}
	pid = proc_spawn(&ps);
	unsetenv("ISOPOD_STATUS_FD");
	close(po[1]), close(pe[1]);
	c->out_fd = po[0], c->err_fd = pe[0];
	fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
	fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
	if (pid < 0) {
		reply_tool(c->id, json_failure("infra", "unable to start %s: %s", c->argv[0],
					  strerror(errno)), 1);
		call_free(c);
		return;
	}
	c->pid = pid, c->started = 1;
	c->deadline = mono_ms() + (c->budget_s + BUDGET_GRACE_S) * 1000;
	s->running++;
	logmsg(s, 0, "call %s: started %s (pid %d)", c->tool->name, c->argv[0], (int)pid);
	progress(c, "started");
}

static void start_queued(struct server *s)
{
	while (s->running < s->max_conc && !s->eof) {
		struct call *next = NULL;

		for (int i = 0; i < MAX_CALLS; i++)
			if (s->calls[i].used && !s->calls[i].started &&
			    (!next || s->calls[i].seq < next->seq))
				next = &s->calls[i];
		if (!next)
			return;
		start_call(s, next);
	}
}

static void stop_call(struct server *s, struct call *c, const char *why)
{
	if (!c->started || c->exited || c->kill_at)
		return;
	logmsg(s, 1, "call %s (pid %d): %s: SIGTERM to its group", c->tool->name, (int)c->pid, why);
	kill(-c->pid, SIGTERM);
	c->kill_at = mono_ms() + KILL_GRACE_MS;
}

static json_t *load_obj(const char *p, size_t n)
{
	json_error_t e;
	json_t *j = json_loadb(p, n, JSON_REJECT_DUPLICATES, &e);

	if (j && !json_is_object(j)) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* JSON lines (the ls tools) as an array; NULL when a line is no object. */
static json_t *load_lines(char *p, size_t n)
{
	json_t *a = json_array();
	size_t i = 0;

	while (i < n) {
		char *nl = memchr(p + i, '\n', n - i);
		size_t k = nl ? (size_t)(nl - (p + i)) : n - i;
		json_t *o;

		if (k) {
			if (!(o = load_obj(p + i, k))) {
				json_decref(a);
				return NULL;
			}
			json_array_append_new(a, o);
		}
		i += k + 1;
	}
	return a;
}

/* The last line of what the child wrote on stderr, for a failure without
 * a status object. */
static void last_err_line(struct call *c, char *out, size_t osz)
{
	size_t n = c->err.n;
	char *p = c->err.p;

	out[0] = 0;
	while (n && p[n - 1] == '\n')
		n--;
	if (!n)
		return;
	size_t b = n;
	while (b && p[b - 1] != '\n')
		b--;
	snprintf(out, osz, "%s", excerpt((char[EXCERPT_SZ]){ 0 }, p + b, n - b));
}

/* The refusal of a value before anything booted: JSON-RPC -32602 naming
 * the field (the tools name their option: --vcpus is vcpus). */
static void reply_invalid(struct call *c, json_t *res)
{
	static const struct {
		const char *opt, *field;
	} fields[] = { { "--vcpus", "vcpus" }, { "--mem-mib", "mem_mib" }, { "--disk-mib", "disk_mib" },
		       { "--timeout-s", "timeout_s" }, { "--timeout-ms", "timeout_s" },
		       { "--cwd", "cwd" }, { "--env", "env" }, { "--commit-as", "commit_as" },
		       { "isopod-commit", "commit_as" }, { "--name", "name" },
		       { "isopod-claim", "name" }, { "--stage", "stage" }, { "--net", "net" },
		       { "--allow", "allow" }, { "--copy-in", "copy_in" },
		       { "--copy-out", "copy_out" }, { "--stdin-file", "stdin_file" },
		       { "--vm", "vm" } };
	const char *msg = json_string_value(json_object_get(res, "error")), *f = NULL;

	msg = msg ? msg : "invalid params";
	for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !f; i++)
		if (strstr(msg, fields[i].opt))
			f = fields[i].field;
	reply_error(c->id, RPC_INVALID_PARAMS, msg,
		    json_pack("{s:s?, s:O}", "field", f, "result", res));
	json_decref(res);
}

/* The result names the client's host paths, not our /proc/<pid>/fd/N:
 * a copied_in/copied_out entry's "host" (a copy into a directory is
 * /proc/<pid>/fd/N/NAME: DIR/NAME). */
static void unmap_hosts(struct call *c, json_t *res)
{
	static const char *const lists[] = { "copied_in", "copied_out" };
	json_t *e, *h, *m;
	size_t i;

	for (size_t l = 0; l < 2; l++)
		json_array_foreach(json_object_get(res, lists[l]), i, e) {
			const char *hp = json_string_value(h = json_object_get(e, "host")), *k;
			char b[PATH_MAX + 64];

			if (!hp)
				continue;
			if ((m = json_object_get(c->hostmap, hp))) {
				json_object_set(e, "host", m);
				continue;
			}
			json_object_foreach(c->hostmap, k, m) {
				size_t kl = strlen(k);

				if (!strncmp(hp, k, kl) && hp[kl] == '/') {
					snprintf(b, sizeof b, "%s%s", json_string_value(m), hp + kl);
					json_object_set_new(e, "host", json_string(b));
					break;
				}
			}
		}
}

static void finish_call(struct server *s, struct call *c)
{
	int rc = proc_status(c->st);
	json_t *res = NULL, *stj = NULL;
	char line[EXCERPT_SZ + 64];

	s->running--;
	if (c->cancelled) { /* MCP: a cancelled request gets no answer */
		logmsg(s, 1, "call %s cancelled (exit %d)", c->tool->name, rc);
		call_free(c);
		return;
	}
	if (c->out.n > OUT_MAX) {
		res = json_failure("infra", "%s wrote more than %u bytes", c->argv[0], OUT_MAX);
	} else if (c->tool->list_key && rc == 0) {
		json_t *a = load_lines(c->out.p ? c->out.p : "", c->out.n);

		if (a)
			res = json_pack("{s:b, s:o}", "ok", 1, c->tool->list_key, a);
	} else if (c->out.n) {
		res = load_obj(c->out.p, c->out.n);
	}
	if (res && !json_object_get(res, "ok"))
		json_object_set_new(res, "ok", json_boolean(rc == 0 || rc == 1));
	if (!res && rc != 0 && c->status_fd >= 0 && lseek(c->status_fd, 0, SEEK_SET) == 0) {
		json_t *e;

		stj = json_load_fd(c->status_fd);
		if (stj && (e = json_object_get(stj, "error")) && json_is_string(e))
			res = json_pack("{s:b, s:O, s:O?, s:i}", "ok", 0, "error", e, "error_kind",
					json_object_get(stj, "error_kind"), "exit", rc);
		json_decref(stj);
	}
	if (!res) {
		last_err_line(c, line, sizeof line);
		res = json_failure(rc == 100 ? "usage" : rc == 101 ? "not_found" : rc == 102 ? "busy" : rc == 99 ? "timeout" : "infra",
			      "%s exited %d without a result%s%s", c->tool->name, rc,
			      line[0] ? ": " : "", line);
		json_object_set_new(res, "exit", json_integer(rc));
	}
	unmap_hosts(c, res);
	if (json_is_true(json_object_get(res, "ok"))) {
		reply_tool(c->id, res, 0);
	} else {
		const char *k = json_string_value(json_object_get(res, "error_kind"));
		json_t *vm = json_object_get(res, "vm");

		/* A usage refusal before any VM was claimed is bad input:
		 * -32602.  After (the tools' checks all run before the claim,
		 * so rarely), it is the run's failure like any other. */
		if (k && !strcmp(k, "usage") && (!vm || json_is_null(vm) ||
						 (json_is_string(vm) && !json_string_length(vm)) ||
						 (json_is_object(vm) && !json_object_size(vm))))
			reply_invalid(c, res);
		else
			reply_tool(c->id, res, 1);
	}
	call_free(c);
}

/* Read what a child wrote; relay stderr lines to ours and, at debug
 * level, to the client. */
static void drain(struct server *s, struct call *c, int which)
{
	int fd = which ? c->err_fd : c->out_fd;
	struct buf *b = which ? &c->err : &c->out;
	char tmp[65536];
	ssize_t k;

	while ((k = read(fd, tmp, sizeof tmp)) > 0) {
		if (which)
			fwrite(tmp, 1, (size_t)k, stderr);
		if (b->n + (size_t)k > OUT_MAX) { /* count it, keep no more */
			b->n = OUT_MAX + 1;
			if (!which)
				stop_call(s, c, "too much output");
			continue;
		}
		if (b->n + (size_t)k > b->cap) {
			size_t cap = b->cap ? b->cap : 65536;
			char *p;

			while (cap < b->n + (size_t)k)
				cap *= 2;
			if (!(p = realloc(b->p, cap)))
				die(EX_SYS, "out of memory");
			b->p = p, b->cap = cap;
		}
		memcpy(b->p + b->n, tmp, (size_t)k);
		if (which && s->initialized && s->level == 0) {
			char *e = excerpt((char[EXCERPT_SZ]){ 0 }, tmp, (size_t)k);

			send_msg(rpc_notification("notifications/message",
						  json_pack("{s:s, s:s, s:{s:s, s:s}}", "level", "debug",
							    "logger", "isopod-mcp", "data", "tool",
							    c->tool->name, "stderr", e)));
		}
		b->n += (size_t)k;
	}
	if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
		close(fd);
		if (which)
			c->err_fd = -1, c->erreof = 1;
		else
			c->out_fd = -1, c->outeof = 1;
	}
}

/* ---- requests ----------------------------------------------------------------- */

static void do_call(struct server *s, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *err = NULL, *sch;
	const struct tool *t = NULL;
	struct call *c = NULL;

	for (size_t i = 0; name && i < NTOOLS; i++)
		if (!strcmp(tools[i].name, name))
			t = &tools[i];
	if (!t) {
		reply_error(id, RPC_INVALID_PARAMS, name ? "unknown tool" : "params.name: want a tool name",
			    json_pack("{s:s, s:s?}", "field", "name", "name", name));
		return;
	}
	if (!args)
		args = json_object();
	else if (!json_is_object(args)) {
		reply_error(id, RPC_INVALID_PARAMS, "arguments: want an object",
			    json_pack("{s:s}", "field", "arguments"));
		return;
	} else
		json_incref(args);
	sch = schema(t->in);
	if (validate(sch, args, "", &err) < 0) {
		json_decref(sch);
		reply_error(id, RPC_INVALID_PARAMS, json_string_value(json_object_get(err, "message")),
			    err);
		json_decref(args);
		return;
	}
	json_decref(sch);
	for (int i = 0; i < MAX_CALLS && !c; i++)
		if (!s->calls[i].used)
			c = &s->calls[i];
	if (!c) {
		reply_tool(id, json_failure("busy", "%d calls in flight or queued already", MAX_CALLS), 1);
		json_decref(args);
		return;
	}
	*c = (struct call){ .used = 1, .seq = ++s->seq, .id = json_incref(id), .tool = t,
			    .hostmap = json_object(),
			    .progress = json_incref(json_object_get(json_object_get(params, "_meta"),
								    "progressToken")),
			    .budget_s = json_is_integer(json_object_get(args, "timeout_s")) ?
					(long long)json_integer_value(json_object_get(args, "timeout_s")) :
					BUDGET_DEFAULT_S,
			    .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1 };
	errno = 0;
	if (t->build(s, c, args, &err) < 0 || argv_fits(c, &err) < 0) {
		if (err) {
			reply_error(id, RPC_INVALID_PARAMS, json_string_value(json_object_get(err, "message")),
				    err);
		} else {
			reply_tool(id, json_failure("infra", "unable to build the command: %s",
					       strerror(errno ? errno : ENOMEM)), 1);
		}
		call_free(c);
	}
	json_decref(args);
	start_queued(s);
}

static void do_cancel(struct server *s, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");

	for (int i = 0; rid && i < MAX_CALLS; i++) {
		struct call *c = &s->calls[i];

		if (!c->used || !json_equal(c->id, rid) || c->cancelled)
			continue;
		c->cancelled = 1;
		if (!c->started) {
			call_free(c);
			return;
		}
		stop_call(s, c, "cancelled");
		return;
	}
}

static void do_initialize(json_t *id, json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = versions[0];

	if (!want) {
		reply_error(id, RPC_INVALID_PARAMS, "params.protocolVersion: want a string",
			    json_pack("{s:s}", "field", "protocolVersion"));
		return;
	}
	for (size_t i = 0; i < NVERSIONS; i++)
		if (!strcmp(want, versions[i]))
			v = versions[i];
	send_msg(rpc_result(id, json_pack("{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s}, s:s}",
					  "protocolVersion", v, "capabilities", "tools",
					  "listChanged", 0, "logging", "serverInfo", "name",
					  "isopod-mcp", "version", ISOPOD_VERSION, "instructions",
					  "sandbox_run runs a command in a fresh microVM. A result with "
					  "isError false is the command's (see exit_code); isError true "
					  "means the sandbox failed (see error_kind). Host paths are "
					  "relative to the server's I/O root.")));
}

static int on_line(void *arg, const char *line, size_t n, int oversized)
{
	struct server *s = arg;
	struct rpc_msg m;
	char why[128];

	if (oversized) {
		snprintf(why, sizeof why, "a message of %zu bytes; at most %zu", n,
			 s->lines.max ? s->lines.max : (size_t)RPC_LINE_MAX_DEFAULT);
		logmsg(s, 3, "%s", why);
		reply_error(NULL, RPC_INVALID_REQUEST, why, NULL);
		return 0;
	}
	/* Blank means every one of the n bytes: a line starting with NUL is
	 * not blank but unparseable (-32700), not dropped unanswered. */
	if (strspn(line, " \t\r") == n)
		return 0;
	switch (rpc_parse(line, n, &m)) {
	case RPC_INVALID:
		logmsg(s, 3, "refused a message: %s", m.why);
		reply_error(m.id, m.code, m.why, NULL);
		break;
	case RPC_RESPONSE: /* we send no requests: nothing awaits it */
		logmsg(s, 0, "ignored a response");
		break;
	case RPC_NOTIFICATION:
		if (!strcmp(m.method, "notifications/initialized"))
			s->initialized = 1;
		else if (!strcmp(m.method, "notifications/cancelled"))
			do_cancel(s, m.params);
		else
			logmsg(s, 0, "ignored notification %s", EXC(m.method));
		break;
	case RPC_REQUEST:
		if (!strcmp(m.method, "initialize")) {
			do_initialize(m.id, m.params);
		} else if (!strcmp(m.method, "ping")) {
			send_msg(rpc_result(m.id, json_object()));
		} else if (!strcmp(m.method, "tools/list")) {
			send_msg(rpc_result(m.id, tool_list()));
		} else if (!strcmp(m.method, "tools/call")) {
			if (!json_is_object(m.params))
				reply_error(m.id, RPC_INVALID_PARAMS, "params: want an object", NULL);
			else
				do_call(s, m.id, m.params);
		} else if (!strcmp(m.method, "logging/setLevel")) {
			const char *l = json_string_value(json_object_get(m.params, "level"));
			size_t i;

			for (i = 0; l && i < NLEVELS && strcmp(l, levels[i]); i++)
				;
			if (!l || i == NLEVELS) {
				reply_error(m.id, RPC_INVALID_PARAMS,
					    "level: want debug, info, notice, warning, error, critical, alert or emergency",
					    json_pack("{s:s}", "field", "level"));
			} else {
				s->level = (int)i;
				send_msg(rpc_result(m.id, json_object()));
			}
		} else {
			reply_error(m.id, RPC_METHOD_NOT_FOUND, "method not found",
				    json_pack("{s:s}", "method", m.method));
		}
		break;
	}
	rpc_msg_free(&m);
	return 0;
}

/* ---- main loop ---------------------------------------------------------------- */

static int active(const struct server *s)
{
	for (int i = 0; i < MAX_CALLS; i++)
		if (s->calls[i].used)
			return 1;
	return 0;
}

static void shutdown_calls(struct server *s, const char *why)
{
	for (int i = 0; i < MAX_CALLS; i++) {
		struct call *c = &s->calls[i];

		if (!c->used)
			continue;
		c->cancelled = 1; /* nobody is there to answer */
		if (!c->started)
			call_free(c);
		else
			stop_call(s, c, why);
	}
}

static void loop(struct server *s)
{
	int64_t next_tick = 0;

	for (;;) {
		struct pollfd pf[2 + 2 * MAX_CALLS];
		struct call *who[2 + 2 * MAX_CALLS];
		int which[2 + 2 * MAX_CALLS], n = 0;
		int64_t now;

		if (s->eof && !active(s))
			return;
		pf[n] = (struct pollfd){ .fd = s->sfd, .events = POLLIN }, who[n++] = NULL;
		if (!s->eof)
			pf[n] = (struct pollfd){ .fd = 0, .events = POLLIN }, who[n++] = NULL;
		for (int i = 0; i < MAX_CALLS; i++) {
			struct call *c = &s->calls[i];

			if (!c->used || !c->started)
				continue;
			if (c->out_fd >= 0)
				pf[n] = (struct pollfd){ .fd = c->out_fd, .events = POLLIN }, who[n] = c,
				which[n++] = 0;
			if (c->err_fd >= 0)
				pf[n] = (struct pollfd){ .fd = c->err_fd, .events = POLLIN }, who[n] = c,
				which[n++] = 1;
		}
		if (poll(pf, (nfds_t)n, 200) < 0 && errno != EINTR)
			die(EX_SYS, "poll:");
		for (int i = 0; i < n; i++) {
			if (!pf[i].revents)
				continue;
			if (pf[i].fd == s->sfd) {
				struct signalfd_siginfo si;

				while (read(s->sfd, &si, sizeof si) == sizeof si)
					if (si.ssi_signo != SIGCHLD && !s->eof) {
						logmsg(s, 3, "got SIG%s: stopping every call",
						       sigabbrev_np((int)si.ssi_signo));
						s->eof = 1;
						shutdown_calls(s, "the server is stopping");
					}
			} else if (!who[i]) {
				char buf[65536];
				ssize_t k = read(0, buf, sizeof buf);

				if (k > 0) {
					if (rpc_lines_feed(&s->lines, buf, (size_t)k, on_line, s) < 0)
						die(EX_SYS, "out of memory");
				} else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
					rpc_lines_end(&s->lines, on_line, s);
					s->eof = 1;
					shutdown_calls(s, "stdin closed");
				}
			} else if (who[i]->used) {
				drain(s, who[i], which[i]);
			}
		}
		/* reap, finish, escalate */
		now = mono_ms();
		for (int i = 0; i < MAX_CALLS; i++) {
			struct call *c = &s->calls[i];

			if (!c->used || !c->started)
				continue;
			if (!c->exited && waitpid(c->pid, &c->st, WNOHANG) == c->pid) {
				c->exited = 1;
				/* what is left in the pipes */
				if (c->out_fd >= 0)
					drain(s, c, 0);
				if (c->err_fd >= 0)
					drain(s, c, 1);
			}
			if (!c->exited && !c->kill_at && now > c->deadline)
				stop_call(s, c, "it outlived its budget");
			if (!c->exited && c->kill_at && now > c->kill_at) {
				logmsg(s, 3, "call %s (pid %d) outlived SIGTERM by %d ms: SIGKILL",
				       c->tool->name, (int)c->pid, KILL_GRACE_MS);
				kill(-c->pid, SIGKILL);
				c->kill_at = 0;
			}
			/* A grandchild may hold a pipe open: the exit decides. */
			if (c->exited)
				finish_call(s, c);
		}
		start_queued(s);
		if (now >= next_tick) {
			progress_tick(s);
			next_tick = now + PROGRESS_MS;
		}
	}
}

static void find_tools(struct server *s)
{
	char self[PATH_MAX], *slash;
	const char *le = getenv("ISOPOD_LIBEXEC");
	ssize_t k;

	if (le && *le) {
		snprintf(s->libexec, sizeof s->libexec, "%s", le);
	} else {
		if ((k = readlink("/proc/self/exe", self, sizeof self - 1)) < 0)
			die(EX_SYS, "unable to read /proc/self/exe:");
		self[k] = 0;
		slash = strrchr(self, '/');
		*slash = 0;
		snprintf(s->libexec, sizeof s->libexec, "%s", self);
	}
	/* The front end beside the tools (installed), else ../sh/isopod (the
	 * source tree), as isopod-runner finds it. */
	if (pathn(s->front, sizeof s->front, "%s/isopod", s->libexec) < 0 ||
	    access(s->front, X_OK) < 0) {
		if (pathn(self, sizeof self, "%s/../sh/isopod", s->libexec) < 0 ||
		    !realpath(self, s->front) || access(s->front, X_OK) < 0)
			die(EX_SYS, "unable to find the front end isopod in %s or %s/../sh",
			    s->libexec, s->libexec);
	}
}

int main(int argc, char **argv)
{
	static struct server srv;
	struct server *s = &srv;
	static const struct option lo[] = { { "io-root", required_argument, 0, 'r' },
					    { "max-concurrent", required_argument, 0, 'm' },
					    { "line-max", required_argument, 0, 'l' },
					    { "help", no_argument, 0, 'h' },
					    { 0, 0, 0, 0 } };
	const char *root = ".";
	long long v;
	sigset_t m;
	int o;

	progname = "isopod-mcp";
	s->level = 3; /* warning, until the client sets it */
	s->max_conc = get_nprocs() > 0 ? get_nprocs() : 1;
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case 'r': root = optarg; break;
		case 'm':
			if (parse_ll(optarg, 1, MAX_CALLS, &v) < 0)
				die(EX_USAGE, "--max-concurrent %s: want 1..%d", EXC(optarg), MAX_CALLS);
			s->max_conc = (int)v;
			break;
		case 'l':
			if (parse_ll(optarg, 1024, 1LL << 30, &v) < 0)
				die(EX_USAGE, "--line-max %s: want 1024..%lld", EXC(optarg), 1LL << 30);
			s->lines.max = (size_t)v;
			break;
		case 'h':
			printf("usage: %s\n", USAGE);
			return 0;
		default:
			fprintf(stderr, "usage: %s\n", USAGE);
			return EX_USAGE;
		}
	}
	if (optind != argc)
		die(EX_USAGE, "unexpected argument %s\nusage: %s", EXC(argv[optind]), USAGE);
	if (!realpath(root, s->root))
		die(EX_USAGE, "--io-root %s:", EXC(root));
	if ((s->root_fd = open(s->root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		die(EX_USAGE, "--io-root %s: not a directory:", EXC(root));
	find_tools(s);
	for (int i = 0; i < MAX_CALLS; i++)
		s->calls[i] = (struct call){ .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1 };
	sigemptyset(&m);
	sigaddset(&m, SIGCHLD), sigaddset(&m, SIGTERM), sigaddset(&m, SIGINT), sigaddset(&m, SIGHUP);
	sigprocmask(SIG_BLOCK, &m, NULL);
	if ((s->sfd = signalfd(-1, &m, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		die(EX_SYS, "signalfd:");
	/* a client gone mid-write is EPIPE, not a silent death */
	signal(SIGPIPE, SIG_IGN);
	loop(s);
	rpc_lines_free(&s->lines);
	return 0;
}
