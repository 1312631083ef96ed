/* mcpcall.c - isopod-mcp(1)'s call lifecycle (lib/mcpcall.h). */

#include "mcpcall.h"
#include "jschema.h"
#include "jsonrpc.h"
#include "mcptools.h"
#include "proc.h"
#include "stage.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void call_free(struct call *c)
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
	if (c->notes_fd >= 0)
		close(c->notes_fd);
	free(c->out.p);
	free(c->err.p);
	json_decref(c->id);
	json_decref(c->hostmap);
	json_decref(c->args);
	json_decref(c->progress);
	if (c->prov_dir[0]) {
		char p[sizeof c->prov_dir + 32];

		snprintf(p, sizeof p, "%s/" PROV_ENVELOPE, c->prov_dir);
		unlink(p);
		rmdir(c->prov_dir);
	}
	*c = (struct call){ .in_fd = -1, .status_fd = -1, .out_fd = -1, .err_fd = -1, .notes_fd = -1 };
}
/* ---- progress ---------------------------------------------------------------- */

int progress(struct call *c, const char *msg)
{
	if (!c->progress || (!json_is_string(c->progress) && !json_is_integer(c->progress)))
		return 0;
	return send_msg(rpc_notification("notifications/progress",
					 json_pack("{s:O, s:i, s:s}", "progressToken", c->progress,
						   "progress", ++c->progress_n, "message", msg)));
}

/* What the call's child wrote on its notes descriptor since the last look,
 * each line a progress notification when relay is set.  sandbox_run's
 * front end (ISOPOD_VM_ID_FD, isopod(1)): first its VM's id, once claimed,
 * into c->vm_id ("" until then), then "step NAME" as each later step
 * (fork, boot, exec, commit) starts; the id, not an owner pid matched over
 * every record, names the call's own VM.  stage_flatten's isopod-stage
 * (ISOPOD_PROGRESS_FD): "flatten P%" lines; --backend slurm's sandbox_run
 * (isopod-slurm run, ISOPOD_PROGRESS_FD, c->notes_relay): "Slurm job ID:
 * STATE..." lines.  0, or -1 when a notification could not be sent (the
 * lines after it are read at the next look). */
static int call_notes(struct call *c, int relay)
{
	char b[512], *p, *nl;
	ssize_t k;
	int rc = 0, run = !c->notes_relay;

	if (c->notes_fd < 0 || (k = pread(c->notes_fd, b, sizeof b - 1, c->notes_off)) <= 0)
		return 0;
	b[k] = 0;
	for (p = b; rc == 0 && (nl = strchr(p, '\n')); p = nl + 1) {
		*nl = 0;
		if (!run)
			rc = relay && *p ? progress(c, jschema_ascii(p)) : 0;
		else if (!c->vm_id[0] && strlen(p) < sizeof c->vm_id && id_vm_ok(p))
			memcpy(c->vm_id, p, strlen(p) + 1);
		else if (relay && c->vm_id[0] && !strncmp(p, "step ", 5))
			rc = progress(c, jschema_ascii(p));
	}
	if (p == b && k == (ssize_t)sizeof b - 1)
		p = b + k; /* no line of ours is that long: skipped */
	c->notes_off += p - b;
	return rc;
}

/* For calls that asked (a progressToken), every PROGRESS_MS: the lines
 * on its notes descriptor (call_notes), and each change of a sandbox_run
 * call's VM's state (booting, running, stopped...) in its record
 * (lib/vm.c, the records' one reader), one record read each: progress
 * notifications. */
int progress_tick(struct server *s)
{
	char m[160];

	for (int k = 0; k < MAX_CALLS; k++) {
		struct call *c = &s->calls[k];
		const char *st, *path;
		json_t *r;
		int rc = 0;

		if (!c->used || !c->started || c->exited || !c->progress || c->cancelled ||
		    c->notes_fd < 0)
			continue;
		if (call_notes(c, 1) < 0)
			return -1;
		if (!c->vm_id[0] || !(r = vm_read(c->vm_id)))
			continue;
		st = json_string_value(json_object_get(r, "state"));
		path = json_string_value(json_object_get(r, "path"));
		if (st && strcmp(st, c->vm_state)) {
			snprintf(c->vm_state, sizeof c->vm_state, "%s", st);
			snprintf(m, sizeof m, "%s: %s%s%s", c->vm_id, st, path ? ", " : "", path ? path : "");
			rc = progress(c, jschema_ascii(m));
		}
		json_decref(r);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- calls ------------------------------------------------------------------- */

/* ---- the attestation ------------------------------------------------------------ */


/* A tool that runs a command, on a host that requires an attestation. */
static int needs_att(const struct server *s, const struct call *c)
{
	return s->att_required &&
	       (!strcmp(c->tool->name, "sandbox_run") || !strcmp(c->tool->name, "vm_exec"));
}

static void verify_start(struct server *s)
{
	if (s->verifying)
		return;
	s->v_began = mono_ms();
	/* A verifier that cannot run: refused (attested() says why). */
	if (attcheck_start(&s->att, &s->vrun, s->v_why, sizeof s->v_why) < 0) {
		s->v_valid = 0, s->v_of = s->v_began;
		return;
	}
	s->verifying = 1;
	s->v_deadline = s->v_began + VERIFY_MS;
}

/* A verdict (valid, its JSON) weighed against what this store's servers
 * saw (att_fresh): valid only when it is, and, after the host changed
 * under an attestation, only a fresh one (a sequence above the one that
 * failed, a doctor run that began after the change was last seen and
 * after the failed one's ended).  The record is read again first, so a
 * change another server of the store saw counts here too; one that
 * cannot be read refuses.  The change is on disk before a command may
 * start again.  1 valid, else 0 with s->v_why saying why. */
int att_fresh(struct server *s, json_t *verdict, int valid)
{
	struct attstale disk;
	char now[32], why[512];

	if (attstale_load(s->stale_path, &disk, why, sizeof why) < 0) {
		snprintf(s->v_why, sizeof s->v_why, "unable to read what this store's servers saw: %s", why);
		return 0;
	}
	/* another server's mark: weighed below (on disk already) */
	(void)attstale_merge(&s->stale, &disk);
	if (attstale_apply(&s->stale, verdict, &valid, s->att.att, iso_now(now, sizeof now), s->v_why,
			   sizeof s->v_why))
		s->stale_unsaved = 1;
	if (s->stale_unsaved) {
		if (attstale_save(s->stale_path, &s->stale) == 0) {
			s->stale_unsaved = 0;
		} else {
			/* A restart would read the old record and could take
			 * the old attestation again: nothing starts until the
			 * change is recorded. */
			size_t n = strlen(s->v_why);

			snprintf(s->v_why + n, sizeof s->v_why - n,
				 "%sunable to record %.300s (the host changed under an attestation): %s",
				 n ? "; and " : "", s->stale_path, strerror(errno));
			valid = 0;
		}
	}
	return valid;
}

/* The verification running, once it ended (or past its time: killed).
 * 0, or -1 when its log could not be sent. */
int verify_reap(struct server *s)
{
	int st, was = s->v_valid;
	json_t *verdict = NULL;
	pid_t r;

	if (!s->verifying)
		return 0;
	r = waitpid(s->vrun.pid, &st, WNOHANG);
	if (r < 0 && errno != EINTR) {
		/* Not ours to wait for any more (nothing else reaps it today):
		 * no verdict is a refusal, never a wait that does not end. */
		snprintf(s->v_why, sizeof s->v_why, "isopod-attest verify: waitpid: %s", strerror(errno));
		close(s->vrun.out);
		close(s->vrun.err);
		s->verifying = 0;
		s->v_valid = 0;
		s->v_of = s->v_began;
		return logmsg(s, 4, "%s", s->v_why);
	}
	if (r != s->vrun.pid) {
		if (mono_ms() <= s->v_deadline)
			return 0;
		kill(s->vrun.pid, SIGKILL);
		s->v_deadline = INT64_MAX; /* reaped at the next turn */
		return logmsg(s, 4, "isopod-attest verify outlived %d ms: SIGKILL", VERIFY_MS);
	}
	s->verifying = 0;
	s->v_valid = attcheck_finish(&s->att, &s->vrun, st, &verdict, s->v_why, sizeof s->v_why);
	s->v_valid = att_fresh(s, verdict, s->v_valid);
	json_decref(verdict);
	s->v_of = s->v_began;
	if (was == s->v_valid)
		return 0;
	return logmsg(s, s->v_valid ? 2 : 4, "%s", s->v_valid ? "the attestation verifies again" : s->v_why);
}

/* Whether c waits for a verdict (one is started when none runs): a
 * command call needs one that began after it arrived, or at most
 * --recheck-s before. */
int awaits_verdict(struct server *s, const struct call *c)
{
	if (!needs_att(s, c) || (s->v_of >= 0 && s->v_of >= c->arrived - s->recheck_ms))
		return 0;
	verify_start(s);
	return s->verifying;
}

/* c has its verdict (awaits_verdict said no): 0 valid, else 1 with the
 * call answered (isError, error_kind "attestation"), or -1 when the answer
 * could not be sent. */
int attested(struct server *s, struct call *c)
{
	if (!needs_att(s, c) || s->v_valid)
		return 0;
	if (logmsg(s, 4, "refusing %s: %s", c->tool->name, s->v_why) < 0)
		return -1;
	return reply_tool(c->id, json_failure("attestation", "refusing %s: this host requires an attestation: %s",
					      c->tool->name, s->v_why), 1) < 0 ? -1 : 1;
}

/* The call's argv, built from its arguments now that it starts: its host
 * files are opened here, not while it waits for a slot (64 queued calls of
 * 32 copies each would hold thousands of descriptors).  A refusal is the
 * client's -32602; running out of descriptors or memory is the server's
 * (isError, error_kind "infra").  0 built, 1 refused (answered), or -1 when
 * the refusal could not be sent. */
int build_call(struct server *s, struct call *c)
{
	json_t *err = NULL;
	int e;

	errno = 0;
	if (c->tool->build(s, c, c->args, &err) == 0 && mcp_argv_fits(c, &err) == 0)
		return 0;
	if (err)
		return reply_error(c->id, RPC_INVALID_PARAMS,
				   json_string_value(json_object_get(err, "message")), err) < 0 ? -1 : 1;
	e = errno ? errno : ENOMEM;
	if (logmsg(s, 4, "unable to prepare %s: %s", c->tool->name, strerror(e)) < 0)
		return -1;
	return reply_tool(c->id, json_failure("infra", "unable to prepare %s (its host files, its command): %s",
					      c->tool->name, strerror(e)), 1) < 0 ? -1 : 1;
}

int64_t kill_grace_ms(const struct server *s, const struct call *c)
{
	return s->slurm && !strcmp(c->tool->name, "sandbox_run") ? SLURM_KILL_GRACE_MS : KILL_GRACE_MS;
}

/* SIGTERM to the call's group (SIGKILL kill_grace_ms later, the poll
 * loop's).  0, or -1 when its log could not be sent (signalled all the
 * same). */
int stop_call(struct server *s, struct call *c, const char *why)
{
	if (!c->started || c->exited || c->kill_at)
		return 0;
	kill(-c->pid, SIGTERM);
	c->kill_at = mono_ms() + kill_grace_ms(s, c);
	return logmsg(s, 1, "call %s (pid %d): %s: SIGTERM to its group", c->tool->name, (int)c->pid, why);
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
static int reply_invalid(struct call *c, json_t *res)
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
	int rc;

	msg = msg ? msg : "invalid params";
	for (size_t i = 0; i < sizeof fields / sizeof fields[0] && !f; i++)
		if (strstr(msg, fields[i].opt))
			f = fields[i].field;
	rc = reply_error(c->id, RPC_INVALID_PARAMS, msg,
			 json_pack("{s:s?, s:O}", "field", f, "result", res));
	json_decref(res);
	return rc;
}


/* Whether c is a sandbox_run that asked --keep (before its "--"). */
static int asks_keep(const struct call *c)
{
	if (strcmp(c->tool->name, "sandbox_run"))
		return 0;
	for (int i = 0; i < c->argc && c->argv[i]; i++)
		if (!strcmp(c->argv[i], "--"))
			break;
		else if (!strcmp(c->argv[i], "--keep"))
			return 1;
	return 0;
}

/* A VM that sandbox_run kept outlives its call, not the server: the issue
 * has stdin's end stop every VM the server started.  (Cancelled calls
 * stop their own VM: the front end drops --keep on a signal, and
 * finish_call stops one that was kept all the same.) */
static void remember_kept(struct server *s, struct call *c, json_t *res)
{
	const char *id = json_string_value(json_object_get(json_object_get(res, "vm"), "id"));

	if (!asks_keep(c) || !id)
		return;
	if (!s->kept)
		s->kept = json_array();
	json_array_append_new(s->kept, json_string(id));
}

/* isopod-stop --force of VM id (one already stopped or removed with
 * vm_stop/vm_rm answers not found: nothing to do); 0, or -1 when its log
 * could not be sent. */
static int stop_one(struct server *s, const char *id, const char *when)
{
	char stop[PATH_MAX + 16];
	int rc;

	if (pathn(stop, sizeof stop, "%s/isopod-stop", s->libexec) < 0)
		return logmsg(s, 1, "isopod-stop --vm %s %s: path too long", id, when);
	rc = proc_run((char *[]){ stop, "--force", "--vm", (char *)id, NULL }, PROC_NULL, PROC_NULL);
	if (rc != 0 && rc != 101)
		return logmsg(s, 1, "isopod-stop --vm %s %s: exit %d", id, when, rc);
	return 0;
}

/* Each kept VM stopped.  The server is ending: a log the client cannot
 * be sent changes nothing (it is on stderr). */
void stop_kept(struct server *s)
{
	size_t i;
	json_t *v;

	if (!s->kept)
		return;
	json_array_foreach(s->kept, i, v)
		(void)stop_one(s, json_string_value(v), "at exit");
	json_decref(s->kept);
	s->kept = NULL;
}

/* A cancelled sandbox_run commits nothing, even when the cancel came
 * after its commit (the front end past isopod-commit, or done and not yet
 * reaped): the stage its VM became (commit_as, made from this call's VM)
 * is removed with isopod-stage rm.  A stage that another run forked from
 * in the meantime stays, with a warning.  0, or -1 when its log could not
 * be sent. */
static int uncommit(struct server *s, struct call *c)
{
	const char *label = json_string_value(json_object_get(c->args, "commit_as"));
	char id[64], why[512], rm[PATH_MAX + 16];
	json_t *meta;
	int rc;

	if (!label || strcmp(c->tool->name, "sandbox_run"))
		return 0;
	(void)call_notes(c, 0); /* reads only: sends nothing */
	if (!c->vm_id[0] || stage_find(label, id, sizeof id, why, sizeof why) != 1)
		return 0;
	meta = stage_meta(id);
	if (!meta || strcmp(json_string_value(json_object_get(meta, "from_vm")) ?: "", c->vm_id)) {
		json_decref(meta);
		return 0;
	}
	json_decref(meta);
	if (pathn(rm, sizeof rm, "%s/isopod-stage", s->libexec) < 0)
		return 0;
	rc = proc_run((char *[]){ rm, "rm", "--", id, NULL }, PROC_NULL, PROC_NULL);
	if (rc == 0)
		return logmsg(s, 3, "call %s cancelled after its commit: removed stage %s (%s)",
			      c->tool->name, id, label);
	return logmsg(s, 4, "call %s cancelled after its commit: isopod-stage rm %s: exit %d; "
		      "the stage stays", c->tool->name, id, rc);
}

/* sandbox_run provenance:true: the envelope the front end signed in the
 * call's private directory goes into the answer (provenance.envelope), the
 * path, which the client cannot reach and call_free removes, out of it. */
static void inline_provenance(struct call *c, json_t *res)
{
	json_t *prov = json_object_get(res, "provenance"), *env;
	char p[sizeof c->prov_dir + 32];

	if (!c->prov_dir[0] || !json_is_object(prov))
		return;
	snprintf(p, sizeof p, "%s/" PROV_ENVELOPE, c->prov_dir);
	if ((env = json_load_path(p))) {
		json_object_set_new(prov, "envelope", env);
		json_object_del(prov, "path");
	}
}

/* The call's answer, from what its child left; the call is freed.  0, or
 * -1 when the answer (or a log, a progress notification before it) could
 * not be sent. */
int finish_call(struct server *s, struct call *c)
{
	int rc = proc_status(c->st), sent, notes;
	json_t *res = NULL, *stj = NULL;
	char line[EXCERPT_SZ + 64];

	s->running--;
	if (c->cancelled) { /* MCP: a cancelled request gets no answer */
		sent = logmsg(s, 1, "call %s cancelled (exit %d)", c->tool->name, rc);
		sent |= uncommit(s, c);
		/* a --keep VM the run kept all the same (the cancel came once
		 * isopod-result, which Ctrl-C no longer ends, had the VM kept):
		 * nobody is told its id, so it stops now, not at our exit */
		(void)call_notes(c, 0);
		if (asks_keep(c) && c->vm_id[0])
			sent |= stop_one(s, c->vm_id, "of a cancelled call");
		call_free(c);
		return sent;
	}
	/* the steps since the last tick, before the answer (which is still
	 * made: a VM it kept must be known, to be stopped at the end) */
	notes = c->progress ? call_notes(c, 1) : 0;
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
	mcp_unmap_hosts(c, res);
	remember_kept(s, c, res);
	inline_provenance(c, res);
	if (json_is_true(json_object_get(res, "ok"))) {
		sent = reply_tool(c->id, res, 0);
	} else {
		const char *k = json_string_value(json_object_get(res, "error_kind"));
		json_t *vm = json_object_get(res, "vm");

		/* A usage refusal before any VM was claimed is bad input:
		 * -32602.  After (the tools' checks all run before the claim,
		 * so rarely), it is the run's failure like any other. */
		if (k && !strcmp(k, "usage") && (!vm || json_is_null(vm) ||
						 (json_is_string(vm) && !json_string_length(vm)) ||
						 (json_is_object(vm) && !json_object_size(vm))))
			sent = reply_invalid(c, res);
		else
			sent = reply_tool(c->id, res, 1);
	}
	call_free(c);
	return notes < 0 ? -1 : sent;
}
