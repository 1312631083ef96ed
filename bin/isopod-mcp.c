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
 * notifications/message, to the client.  The tools, their schemas and
 * argv, and the I/O root are lib/mcptools.c; the schema check lib/jschema.c;
 * a call's lifecycle (attestation gate, host files, progress, stop,
 * answer) lib/mcpcall.c. */

#include "attcheck.h"
#include "jschema.h"
#include "jsonrpc.h"
#include "mcpcall.h"
#include "mcptools.h"
#include "proc.h"
#include "ranges.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-mcp [--io-root DIR] [--max-concurrent N] [--line-max BYTES] " \
	      "[--require-attestation] [--attestation FILE] [--attest-dir DIR] [--pubkey FILE] " \
	      "[--recheck-s N] [--backend local|slurm] [--slurm-dir DIR]"

/* The revisions we speak: the newest the pinned SDK client sends
 * (t/mcp/package.json) and the one before it.  Newest first. */
static const char *const versions[] = { "2025-11-25", "2025-06-18" };
#define NVERSIONS (sizeof versions / sizeof versions[0])

#define ERR_LINE_MAX 600           /* a stderr line relayed (the front end's clip) */

static const char *const levels[] = { "debug", "info", "notice", "warning", "error",
				      "critical", "alert", "emergency" };
#define NLEVELS (sizeof levels / sizeof levels[0])


/* ---- output ------------------------------------------------------------------ */

/* One message, one line, one write: a line is never interleaved.  A
 * client that is gone (EPIPE) is -1 for the caller to return up to the
 * poll loop, which ends the server. */
int send_msg(json_t *msg)
{
	size_t n;
	char *line = rpc_line(msg, &n);
	int rc;

	json_decref(msg);
	if (!line) { /* a message that did not build: never a reason to stop */
		fprintf(stderr, "%s: error: unable to encode a message\n", progname);
		return 0;
	}
	rc = write_all(1, line, n);
	free(line); /* errno kept (glibc's free, POSIX.1-2024) */
	return rc < 0 ? -1 : 0;
}

__attribute__((format(printf, 3, 4))) int logmsg(struct server *s, int level,
							const char *fmt, ...)
{
	char m[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	if (level >= 1 || s->level == 0)
		fprintf(stderr, "%s: %s: %s\n", progname, levels[level], m);
	if (!s->initialized || level < s->level)
		return 0;
	return send_msg(rpc_notification("notifications/message",
					 json_pack("{s:s, s:s, s:s}", "level", levels[level],
						   "logger", "isopod-mcp", "data", m)));
}

int reply_error(json_t *id, int code, const char *msg, json_t *data)
{
	return send_msg(rpc_error(id, code, msg ? msg : "invalid params", data));
}

/* A tool's answer: structuredContent, and the same JSON as text. */
int reply_tool(json_t *id, json_t *sc, int is_error)
{
	char *text = json_dumps(sc, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_t *r;

	if (!text) {
		json_decref(sc);
		errno = ENOMEM;
		return -1;
	}
	r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text", text,
		      "structuredContent", sc, "isError", is_error);
	free(text);
	return send_msg(rpc_result(id, r));
}


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

	for (size_t i = 0; i < mcp_ntools; i++)
		json_array_append_new(a, json_pack("{s:s, s:s, s:o, s:o}", "name", mcp_tools[i].name,
						   "description", mcp_tools[i].desc, "inputSchema",
						   schema(mcp_tools[i].in), "outputSchema",
						   schema(mcp_tools[i].out)));
	return json_pack("{s:o}", "tools", a);
}

/* 0, or -1 when a message could not be sent (the call is answered or
 * running all the same). */
static int start_call(struct server *s, struct call *c)
{
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 };
	struct proc_spec ps = PROC_SPEC(c->argv);
	char status_env[] = "ISOPOD_STATUS_FD=3", vmid_env[] = "ISOPOD_VM_ID_FD=9", *envv[4];
	char progress_env[] = "ISOPOD_PROGRESS_FD=9", att_env[PATH_MAX + 32];
	int ne = 0;
	pid_t pid;
	int rc;

	if ((rc = attested(s, c)) != 0 || (rc = build_call(s, c)) != 0) {
		call_free(c);
		return rc < 0 ? -1 : 0;
	}
	ps.argv = c->argv;
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
	    (c->tool->runner == R_TOOL &&
	     (c->status_fd = memfd_create("isopod-mcp-status", MFD_CLOEXEC)) < 0) ||
	    (HAS_NOTES(c->tool) && (c->notes_fd = memfd_create("isopod-mcp-notes", MFD_CLOEXEC)) < 0)) {
		int e = errno;

		for (int i = 0; i < 2; i++) {
			if (po[i] >= 0)
				close(po[i]);
			if (pe[i] >= 0)
				close(pe[i]);
		}
		rc = logmsg(s, 4, "unable to start %s: %s", c->tool->name, strerror(e));
		if (rc == 0)
			rc = reply_tool(c->id, json_failure("infra", "unable to start %s: %s", c->argv[0],
							    strerror(e)), 1);
		call_free(c);
		return rc;
	}
	ps.file = c->argv[0];
	ps.in = c->in_fd >= 0 ? c->in_fd : PROC_NULL;
	ps.out = po[1], ps.err = pe[1];
	/* a session of its own: a cancellation signals the whole group; our
	 * death signals the front end, which stops its VM (isopod(1)). */
	ps.setsid = 1, ps.pdeathsig = SIGTERM;
	if (c->status_fd >= 0) {
		ps.keep[0] = c->status_fd, ps.nkeep = 1;
		envv[ne++] = status_env;
	}
	if (c->notes_fd >= 0) {
		for (int i = ps.nkeep; i < NOTES_FD - 3; i++)
			ps.keep[i] = PROC_NULL;
		ps.keep[NOTES_FD - 3] = c->notes_fd, ps.nkeep = NOTES_FD - 2;
		/* the local front end's VM id and steps; else progress lines */
		c->notes_relay = s->slurm || strcmp(c->tool->name, "sandbox_run");
		envv[ne++] = c->notes_relay ? progress_env : vmid_env;
	}
	/* doctor_status reports the attestation this server checks */
	if (!strcmp(c->tool->name, "doctor_status") &&
	    pathn(att_env, sizeof att_env, "ISOPOD_ATTESTATION=%s", s->att.att) == 0)
		envv[ne++] = att_env;
	envv[ne] = NULL;
	ps.env = ne ? envv : NULL; /* the child's, through the spawn (lib/proc.h) */
	pid = proc_spawn(&ps);
	close(po[1]), close(pe[1]);
	c->out_fd = po[0], c->err_fd = pe[0];
	fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
	fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
	if (pid < 0) {
		rc = reply_tool(c->id, json_failure("infra", "unable to start %s: %s", c->argv[0],
						    strerror(errno)), 1);
		call_free(c);
		return rc;
	}
	c->pid = pid, c->started = 1;
	c->deadline = mono_ms() + (c->budget_s + BUDGET_GRACE_S) * 1000;
	s->running++;
	if (logmsg(s, 0, "call %s: started %s (pid %d)", c->tool->name, c->argv[0], (int)pid) < 0)
		return -1;
	return progress(c, "started");
}

static int start_queued(struct server *s)
{
	while (s->running < s->max_conc && !s->eof) {
		struct call *next = NULL;

		for (int i = 0; i < MAX_CALLS; i++)
			if (s->calls[i].used && !s->calls[i].started &&
			    (!next || s->calls[i].seq < next->seq) && !awaits_verdict(s, &s->calls[i]))
				next = &s->calls[i];
		if (!next)
			return 0;
		if (start_call(s, next) < 0)
			return -1;
	}
	return 0;
}

/* Read what a child wrote; relay stderr lines to ours and, at debug
 * level, to the client.  0, or -1 when a message could not be sent (the
 * rest is read at the next turn). */
static int drain(struct server *s, struct call *c, int which)
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
			if (!which && stop_call(s, c, "too much output") < 0)
				return -1;
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

			b->n += (size_t)k;
			if (send_msg(rpc_notification("notifications/message",
						      json_pack("{s:s, s:s, s:{s:s, s:s}}", "level", "debug",
								"logger", "isopod-mcp", "data", "tool",
								c->tool->name, "stderr", e))) < 0)
				return -1;
			continue;
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
	return 0;
}

/* ---- requests ----------------------------------------------------------------- */

/* Each request's handler: 0, or -1 when a message could not be sent. */
static int do_call(struct server *s, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	json_t *args = json_object_get(params, "arguments"), *err = NULL, *sch;
	const struct tool *t = NULL;
	struct call *c = NULL;

	for (size_t i = 0; name && i < mcp_ntools; i++)
		if (!strcmp(mcp_tools[i].name, name))
			t = &mcp_tools[i];
	if (!t)
		return reply_error(id, RPC_INVALID_PARAMS,
				   name ? "unknown tool" : "params.name: want a tool name",
				   json_pack("{s:s, s:s?}", "field", "name", "name", name));
	if (!args)
		args = json_object();
	else if (!json_is_object(args))
		return reply_error(id, RPC_INVALID_PARAMS, "arguments: want an object",
				   json_pack("{s:s}", "field", "arguments"));
	else
		json_incref(args);
	sch = schema(t->in);
	if (jschema_validate(sch, args, "", &err) < 0) {
		json_decref(sch);
		json_decref(args);
		return reply_error(id, RPC_INVALID_PARAMS,
				   json_string_value(json_object_get(err, "message")), err);
	}
	json_decref(sch);
	for (int i = 0; i < MAX_CALLS && !c; i++)
		if (!s->calls[i].used)
			c = &s->calls[i];
	if (!c) {
		json_decref(args);
		return reply_tool(id, json_failure("busy", "%d calls in flight or queued already",
						   MAX_CALLS), 1);
	}
	*c = (struct call){ .used = 1, .seq = ++s->seq, .id = json_incref(id), .tool = t,
			    .hostmap = json_object(), .args = json_incref(args), .arrived = mono_ms(),
			    .progress = json_incref(json_object_get(json_object_get(params, "_meta"),
								    "progressToken")),
			    .budget_s = json_is_integer(json_object_get(args, "timeout_s")) ?
					(long long)json_integer_value(json_object_get(args, "timeout_s")) :
					BUDGET_DEFAULT_S,
			    .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1, .notes_fd = -1 };
	json_decref(args);
	return start_queued(s);
}

static int do_cancel(struct server *s, json_t *params)
{
	json_t *rid = json_object_get(params, "requestId");

	for (int i = 0; rid && i < MAX_CALLS; i++) {
		struct call *c = &s->calls[i];

		if (!c->used || !json_equal(c->id, rid) || c->cancelled)
			continue;
		c->cancelled = 1;
		if (!c->started) {
			call_free(c);
			return 0;
		}
		return stop_call(s, c, "cancelled");
	}
	return 0;
}

static int do_initialize(json_t *id, json_t *params)
{
	const char *want = json_string_value(json_object_get(params, "protocolVersion"));
	const char *v = versions[0];

	if (!want)
		return reply_error(id, RPC_INVALID_PARAMS, "params.protocolVersion: want a string",
				   json_pack("{s:s}", "field", "protocolVersion"));
	for (size_t i = 0; i < NVERSIONS; i++)
		if (!strcmp(want, versions[i]))
			v = versions[i];
	return send_msg(rpc_result(id, json_pack("{s:s, s:{s:{s:b}, s:{}}, s:{s:s, s:s}, s:s}",
						 "protocolVersion", v, "capabilities", "tools",
						 "listChanged", 0, "logging", "serverInfo", "name",
						 "isopod-mcp", "version", ISOPOD_VERSION, "instructions",
						 "sandbox_run runs a command in a fresh microVM. A result with "
						 "isError false is the command's (see exit_code); isError true "
						 "means the sandbox failed (see error_kind). Host paths are "
						 "relative to the server's I/O root.")));
}

/* A request (it has an id): its answer.  0, or -1 when a message could
 * not be sent. */
static int do_request(struct server *s, struct rpc_msg *m)
{
	const char *l;
	size_t i;

	if (!strcmp(m->method, "initialize"))
		return do_initialize(m->id, m->params);
	if (!strcmp(m->method, "ping"))
		return send_msg(rpc_result(m->id, json_object()));
	if (!strcmp(m->method, "tools/list"))
		return send_msg(rpc_result(m->id, tool_list()));
	if (!strcmp(m->method, "tools/call")) {
		if (!json_is_object(m->params))
			return reply_error(m->id, RPC_INVALID_PARAMS, "params: want an object", NULL);
		return do_call(s, m->id, m->params);
	}
	if (strcmp(m->method, "logging/setLevel"))
		return reply_error(m->id, RPC_METHOD_NOT_FOUND, "method not found",
				   json_pack("{s:s}", "method", m->method));
	l = json_string_value(json_object_get(m->params, "level"));
	for (i = 0; l && i < NLEVELS && strcmp(l, levels[i]); i++)
		;
	if (!l || i == NLEVELS)
		return reply_error(m->id, RPC_INVALID_PARAMS,
				   "level: want debug, info, notice, warning, error, critical, alert or emergency",
				   json_pack("{s:s}", "field", "level"));
	s->level = (int)i;
	return send_msg(rpc_result(m->id, json_object()));
}

/* 0, or -1 when a message could not be sent: rpc_lines_feed stops and
 * returns it to the poll loop. */
static int on_line(void *arg, const char *line, size_t n, int oversized)
{
	struct server *s = arg;
	struct rpc_msg m;
	char why[128];
	int rc = 0;

	if (oversized) {
		snprintf(why, sizeof why, "a message of %zu bytes; at most %zu", n,
			 s->lines.max ? s->lines.max : (size_t)RPC_LINE_MAX_DEFAULT);
		if (logmsg(s, 3, "%s", why) < 0)
			return -1;
		return reply_error(NULL, RPC_INVALID_REQUEST, why, NULL);
	}
	/* Blank means every one of the n bytes: a line starting with NUL is
	 * not blank but unparseable (-32700), not dropped unanswered. */
	if (strspn(line, " \t\r") == n)
		return 0;
	switch (rpc_parse(line, n, &m)) {
	case RPC_INVALID:
		rc = logmsg(s, 3, "refused a message: %s", m.why);
		if (rc == 0)
			rc = reply_error(m.id, m.code, m.why, NULL);
		break;
	case RPC_RESPONSE: /* we send no requests: nothing awaits it */
		rc = logmsg(s, 0, "ignored a response");
		break;
	case RPC_NOTIFICATION:
		if (!strcmp(m.method, "notifications/initialized"))
			s->initialized = 1;
		else if (!strcmp(m.method, "notifications/cancelled"))
			rc = do_cancel(s, m.params);
		else
			rc = logmsg(s, 0, "ignored notification %s", EXC(m.method));
		break;
	case RPC_REQUEST:
		rc = do_request(s, &m);
		break;
	}
	rpc_msg_free(&m);
	return rc;
}

/* ---- main loop ---------------------------------------------------------------- */

static int active(const struct server *s)
{
	for (int i = 0; i < MAX_CALLS; i++)
		if (s->calls[i].used)
			return 1;
	return 0;
}

/* Every call stopped (each one even when a log of it cannot be sent).
 * 0, or -1 when a log could not be sent. */
static int shutdown_calls(struct server *s, const char *why)
{
	int rc = 0;

	s->eof = 1;
	for (int i = 0; i < MAX_CALLS; i++) {
		struct call *c = &s->calls[i];

		if (!c->used)
			continue;
		c->cancelled = 1; /* nobody is there to answer */
		if (!c->started)
			call_free(c);
		else if (stop_call(s, c, why) < 0)
			rc = -1;
	}
	return rc;
}

/* What a step of the loop returned (rc): on the first message that could
 * not be sent (errno EPIPE: the client is gone; ENOMEM), every call is
 * stopped as at stdin's end, and *err keeps the errno the server ends with
 * (111, main) once they have exited.  Nobody reads us any more: later
 * failures add nothing. */
static void check_sent(struct server *s, int rc, int *err)
{
	if (rc == 0 || *err)
		return;
	*err = errno ? errno : EIO;
	fprintf(stderr, "%s: error: unable to write to the client: %s: stopping every call\n",
		progname, strerror(*err));
	(void)shutdown_calls(s, "the client is gone");
}

/* Until stdin ends (or a stop signal, or the client is gone) and every
 * call has exited: 0, or the errno of the first message that could not be
 * sent. */
static int loop(struct server *s)
{
	int64_t next_tick = 0;
	int err = 0;

	for (;;) {
		struct pollfd pf[2 + 2 * MAX_CALLS];
		struct call *who[2 + 2 * MAX_CALLS];
		int which[2 + 2 * MAX_CALLS], n = 0;
		int64_t now;

		if (s->eof && !active(s))
			return err;
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
						check_sent(s, logmsg(s, 3, "got SIG%s: stopping every call",
								     sigabbrev_np((int)si.ssi_signo)), &err);
						check_sent(s, shutdown_calls(s, "the server is stopping"), &err);
					}
			} else if (!who[i]) {
				char buf[65536];
				ssize_t k = read(0, buf, sizeof buf);

				/* (rpc_lines_feed: -1 ENOMEM, or on_line's -1) */
				if (k > 0) {
					check_sent(s, rpc_lines_feed(&s->lines, buf, (size_t)k, on_line, s), &err);
				} else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
					check_sent(s, rpc_lines_end(&s->lines, on_line, s), &err);
					check_sent(s, shutdown_calls(s, "stdin closed"), &err);
				}
			} else if (who[i]->used) {
				check_sent(s, drain(s, who[i], which[i]), &err);
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
					check_sent(s, drain(s, c, 0), &err);
				if (c->err_fd >= 0)
					check_sent(s, drain(s, c, 1), &err);
			}
			if (!c->exited && !c->kill_at && now > c->deadline)
				check_sent(s, stop_call(s, c, "it outlived its budget"), &err);
			if (!c->exited && c->kill_at && now > c->kill_at) {
				kill(-c->pid, SIGKILL);
				c->kill_at = 0;
				check_sent(s, logmsg(s, 3, "call %s (pid %d) outlived SIGTERM by %lld ms: SIGKILL",
						     c->tool->name, (int)c->pid, (long long)kill_grace_ms(s, c)), &err);
			}
			/* A grandchild may hold a pipe open: the exit decides. */
			if (c->exited)
				check_sent(s, finish_call(s, c), &err);
		}
		check_sent(s, verify_reap(s), &err);
		check_sent(s, start_queued(s), &err);
		if (now >= next_tick) {
			check_sent(s, progress_tick(s), &err);
			next_tick = now + PROGRESS_MS;
		}
	}
}

static void find_tools(struct server *s)
{
	if (proc_tools_dir(s->libexec, sizeof s->libexec) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	/* The front end beside the tools (installed), else ../sh/isopod (the
	 * source tree), as isopod-runner finds it. */
	if (proc_front_end(s->libexec, s->front, sizeof s->front) < 0)
		die(EX_SYS, "unable to find the front end isopod in %s or %s/../sh", s->libexec,
		    s->libexec);
}

/* The host requires an attestation (--require-attestation, or the host
 * config's require_attestation, the key lib/attcheck.c reads): none that
 * verifies, no start (111).  isopod-attest is the one beside our tools, as
 * isopod-runner runs it. */
static void require_attestation(struct server *s, char *why, size_t wsz)
{
	const char *conf = ranges_config_path();
	int req = 0, rc = attcheck_required(conf, &req, why, wsz);
	json_t *verdict = NULL;

	if (rc < 0)
		die(rc == -1 ? EX_USAGE : EX_SYS, "%s", why);
	s->att_required |= req;
	if (!s->att.att)
		s->att.att = ATTESTATION_DEFAULT;
	if (!*s->att.att)
		die(EX_USAGE, "--attestation: want a file");
	/* Under Slurm the gate is each node's (isopod-slurm refresh drains a
	 * node whose attestation fails), as for isopod-runner: no command
	 * runs here (vm_exec is refused) */
	if (s->slurm && s->att_required) {
		fprintf(stderr, "%s: info: --backend slurm: the attestation is each node's (isopod-slurm "
			"refresh); none is verified here\n", progname);
		s->att_required = 0;
	}
	if (!s->att_required)
		return;
	if (pathn(s->attest, sizeof s->attest, "%s/isopod-attest", s->libexec) < 0 ||
	    access(s->attest, X_OK) < 0)
		die(EX_SYS, "unable to find isopod-attest in %s:", s->libexec);
	s->att.tool = s->attest;
	s->att.timeout_ms = VERIFY_MS;
	if (pathn(s->stale_path, sizeof s->stale_path, "%s/attest-stale.json", store_home()) < 0)
		die(EX_USAGE, "the store's path is too long: %s", store_home());
	/* the store may not exist yet (its first run makes it): a change
	 * seen now must still be recorded */
	mkdirs(store_home(), 0700);
	if (attstale_load(s->stale_path, &s->stale, why, wsz) < 0)
		die(EX_SYS, "refusing to start: unable to read what this store's servers saw: %s", why);
	s->v_of = mono_ms();
	s->v_valid = attcheck_verify(&s->att, &verdict, s->v_why, sizeof s->v_why);
	s->v_valid = att_fresh(s, verdict, s->v_valid);
	json_decref(verdict);
	if (!s->v_valid)
		die(EX_SYS, "refusing to start: this host requires an attestation: %s", s->v_why);
	fprintf(stderr, "%s: info: the attestation %s verifies; sandbox_run and vm_exec start only "
		"while it does (verified again for each, --recheck-s %lld)\n", progname, s->att.att,
		(long long)(s->recheck_ms / 1000));
}

/* The default bound on calls at once: the host's CPUs, and no more than
 * its available memory holds at a default VM each -- 512 MiB of guest, 256
 * MiB for QEMU and, for TCG, its translation buffer, min(1 GiB, RAM / 8),
 * as the jail's memory limit counts a VM (doc/DECISIONS.md): on a host with
 * more cores than memory, memory binds.  $ISOPOD_MEMINFO names another
 * /proc/meminfo (for tests). */
static int default_conc(long *avail_mib)
{
	const char *e = getenv("ISOPOD_MEMINFO");
	FILE *f = fopen(e && *e ? e : "/proc/meminfo", "re");
	long n = get_nprocs(), avail = -1, total = -1, v, per;
	char line[256];

	while (f && fgets(line, sizeof line, f)) {
		if (sscanf(line, "MemAvailable: %ld kB", &v) == 1)
			avail = v;
		else if (sscanf(line, "MemTotal: %ld kB", &v) == 1)
			total = v;
	}
	if (f)
		fclose(f);
	*avail_mib = avail >= 0 ? avail / 1024 : -1;
	if (n < 1)
		n = 1;
	if (avail >= 0 && total > 0) {
		per = (512 + 256) * 1024L + (total / 8 < 1048576 ? total / 8 : 1048576);
		if (avail / per < n)
			n = avail / per > 0 ? avail / per : 1;
	}
	return n > MAX_CALLS ? MAX_CALLS : (int)n;
}

/* --slurm-dir, when it exists, as isopod-slurm run checks it (ours, not a
 * link, written by no one else): a bad one is refused at the start, not
 * at each call; one not made yet is isopod-slurm run's to make. */
static void slurm_dir_check(const char *dir)
{
	char why[PATH_MAX + 256];
	int fd;

	if (!dir || ((fd = dir_own_open(dir, why, sizeof why)) < 0 && errno == ENOENT))
		return;
	if (fd < 0)
		die(errno == EPERM || errno == ELOOP || errno == ENOTDIR ? EX_USAGE : EX_SYS, "--slurm-dir %s", why);
	close(fd);
}

int main(int argc, char **argv)
{
	static struct server srv;
	struct server *s = &srv;
	static const struct option lo[] = { { "io-root", required_argument, 0, 'r' },
					    { "max-concurrent", required_argument, 0, 'm' },
					    { "line-max", required_argument, 0, 'l' },
					    { "require-attestation", no_argument, 0, 'R' },
					    { "attestation", required_argument, 0, 'a' },
					    { "attest-dir", required_argument, 0, 'd' },
					    { "pubkey", required_argument, 0, 'p' },
					    { "recheck-s", required_argument, 0, 'c' },
					    { "backend", required_argument, 0, 'b' },
					    { "slurm-dir", required_argument, 0, 'D' },
					    { "help", no_argument, 0, 'h' },
					    { 0, 0, 0, 0 } };
	const char *root = ".";
	char why[2048];
	long long v;
	sigset_t m;
	long avail_mib;
	int o, err, conc_set = 0;

	progname = "isopod-mcp";
	s->level = 3; /* warning, until the client sets it */
	s->v_of = -1;
	s->max_conc = default_conc(&avail_mib);
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (o) {
		case 'r': root = optarg; break;
		case 'm':
			if (parse_ll(optarg, 1, MAX_CALLS, &v) < 0)
				die(EX_USAGE, "--max-concurrent %s: want 1..%d", EXC(optarg), MAX_CALLS);
			s->max_conc = (int)v;
			conc_set = 1;
			break;
		case 'l':
			if (parse_ll(optarg, 1024, 1LL << 30, &v) < 0)
				die(EX_USAGE, "--line-max %s: want 1024..%lld", EXC(optarg), 1LL << 30);
			s->lines.max = (size_t)v;
			break;
		case 'R': s->att_required = 1; break;
		case 'a': s->att.att = optarg; break;
		case 'd': s->att.dir = optarg; break;
		case 'p': s->att.pubkey = optarg; break;
		case 'c':
			if (parse_ll(optarg, 0, 86400, &v) < 0)
				die(EX_USAGE, "--recheck-s %s: want 0..86400 seconds", EXC(optarg));
			s->recheck_ms = v * 1000;
			break;
		case 'b':
			if (strcmp(optarg, "local") && strcmp(optarg, "slurm"))
				die(EX_USAGE, "--backend: local or slurm, not %s", EXC(optarg));
			s->slurm = !strcmp(optarg, "slurm");
			break;
		case 'D':
			if (optarg[0] != '/')
				die(EX_USAGE, "--slurm-dir %s: want an absolute path (the nodes see it at the same path)",
				    EXC(optarg));
			s->slurm_dir = optarg;
			break;
		case 'h':
			printf("usage: %s\n", USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected argument %s", EXC(argv[optind]));
	if (s->slurm_dir && !s->slurm)
		die(EX_USAGE, "--slurm-dir is --backend slurm's");
	slurm_dir_check(s->slurm_dir);
	/* Slurm queues what its nodes cannot take yet: each call here is one
	 * isopod-slurm watching its job, not a VM */
	if (s->slurm && !conc_set)
		s->max_conc = MAX_CALLS;
	if (s->slurm && mcp_slurm_defaults(s, why, sizeof why) < 0)
		die(EX_USAGE, "--backend slurm: the front end's default: %s", why);
	if (!realpath(root, s->root))
		die(EX_USAGE, "--io-root %s:", EXC(root));
	if ((s->root_fd = open(s->root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		die(EX_USAGE, "--io-root %s: not a directory:", EXC(root));
	find_tools(s);
	logmsg(s, 1, "at most %d calls at once (%s; %d CPUs, %ld MiB available)%s", s->max_conc,
	       conc_set ? "--max-concurrent" : "the default", get_nprocs(), avail_mib,
	       s->slurm ? "; sandbox_run goes to Slurm (--backend slurm)" : "");
	require_attestation(s, why, sizeof why);
	for (int i = 0; i < MAX_CALLS; i++)
		s->calls[i] = (struct call){ .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1, .notes_fd = -1 };
	sigemptyset(&m);
	sigaddset(&m, SIGCHLD), sigaddset(&m, SIGTERM), sigaddset(&m, SIGINT), sigaddset(&m, SIGHUP);
	sigprocmask(SIG_BLOCK, &m, NULL);
	if ((s->sfd = signalfd(-1, &m, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		die(EX_SYS, "signalfd:");
	/* a client gone mid-write is EPIPE, not a silent death */
	signal(SIGPIPE, SIG_IGN);
	err = loop(s);
	stop_kept(s);
	rpc_lines_free(&s->lines);
	if (err) { /* every call stopped, every kept VM too: now the status */
		errno = err;
		die(EX_SYS, "unable to write to the client:");
	}
	return 0;
}
