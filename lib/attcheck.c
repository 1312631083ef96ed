/* attcheck.c - the attestation check of the tools that serve clients
 * (attcheck.h): isopod-runner and isopod-mcp. */
#include "attcheck.h"
#include "config.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

int attcheck_start(const struct attcheck *a, struct attcheck_run *r, char *why, size_t whysz)
{
	char *av[10];
	int n = 0;
	struct proc_spec ps = PROC_SPEC(av);

	av[n++] = (char *)a->tool;
	av[n++] = "verify";
	if (a->dir)
		av[n++] = "--dir", av[n++] = (char *)a->dir;
	if (a->pubkey)
		av[n++] = "--pubkey", av[n++] = (char *)a->pubkey;
	av[n++] = (char *)a->att;
	av[n] = NULL;
	r->pid = -1;
	r->out = memfd_create("verify-out", MFD_CLOEXEC);
	r->err = memfd_create("verify-err", MFD_CLOEXEC);
	ps.file = a->tool, ps.out = r->out, ps.err = r->err, ps.pdeathsig = SIGKILL;
	if (r->out >= 0 && r->err >= 0)
		r->pid = proc_spawn(&ps);
	if (r->pid >= 0)
		return 0;
	snprintf(why, whysz, "unable to start %.300s: %s", a->tool, strerror(errno));
	if (r->out >= 0)
		close(r->out);
	if (r->err >= 0)
		close(r->err);
	r->out = r->err = -1;
	return -1;
}

int attcheck_finish(const struct attcheck *a, struct attcheck_run *r, int st, json_t **verdict,
		    char *why, size_t whysz)
{
	char *out, *err, w[512], *nl;
	size_t on = 0, en = 0, i, off;
	json_t *v = NULL, *f;
	int rc = proc_status(st);

	out = fd_text(r->out, JSON_MAX_BYTES, &on);
	err = fd_text(r->err, 4096, &en);
	if (out && on)
		v = json_parse(out, on, 0, w, sizeof w);
	while (err && en && err[en - 1] == '\n')
		err[--en] = 0;
	nl = err ? strrchr(err, '\n') : NULL;
	if (rc == 0 && v && json_is_true(json_object_get(v, "valid"))) {
		why[0] = 0;
	} else if (v && json_array_size(json_object_get(v, "failures"))) {
		off = (size_t)snprintf(why, whysz, "attestation %s does not verify:", a->att);
		json_array_foreach(json_object_get(v, "failures"), i, f) {
			const char *what = json_string_value(json_object_get(f, "subject"));

			if (off >= whysz || i == 4)
				break;
			if (!what)
				what = json_string_value(json_object_get(f, "field"));
			off += (size_t)snprintf(why + off, whysz - off, "%s %s: %s", i ? ";" : "",
						what ? what : "?",
						json_string_value(json_object_get(f, "why")) ?: "?");
		}
	} else {
		snprintf(why, whysz, "attestation %s does not verify: %s (isopod-attest exit %d)",
			 a->att, nl ? nl + 1 : err && *err ? err : "no verdict", rc);
	}
	close(r->out);
	close(r->err);
	r->out = r->err = -1, r->pid = -1;
	free(out);
	free(err);
	if (verdict)
		*verdict = v;
	else
		json_decref(v);
	return why[0] == 0;
}

int attcheck_verify(const struct attcheck *a, json_t **verdict, char *why, size_t whysz)
{
	struct attcheck_run r;
	int st;

	if (verdict)
		*verdict = NULL;
	if (attcheck_start(a, &r, why, whysz) < 0)
		return 0;
	if (!proc_exited_within(r.pid, &st, a->timeout_ms > 0 ? a->timeout_ms : ATTCHECK_TIMEOUT_MS)) {
		kill(r.pid, SIGKILL);
		proc_wait(r.pid, &st);
	}
	return attcheck_finish(a, &r, st, verdict, why, whysz);
}

/* YYYY-MM-DDTHH:MM:SSZ, the only shape compared here: as text, in time
 * order. */
static int iso_shape(const char *s)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
	size_t i;

	if (!s || strlen(s) != sizeof shape - 1)
		return 0;
	for (i = 0; shape[i]; i++)
		if (shape[i] == 'd' ? s[i] < '0' || s[i] > '9' : s[i] != shape[i])
			return 0;
	return 1;
}

int attstale_load(const char *path, struct attstale *s, char *why, size_t whysz)
{
	json_t *j, *q, *t;

	s->seq = 0, s->seen[0] = 0;
	if (!(j = json_load_path(path))) {
		if (errno == ENOENT)
			return 0;
		snprintf(why, whysz, "%.300s: %s", path,
			 errno == EINVAL || errno == EFBIG ? "not one JSON object" : strerror(errno));
		return -1;
	}
	q = json_object_get(j, "sequence");
	t = json_object_get(j, "seen");
	if (!json_is_object(j) || json_object_size(j) != 2 || !json_is_integer(q) ||
	    json_integer_value(q) < 0 || !iso_shape(json_string_value(t))) {
		snprintf(why, whysz, "%.300s: not a record of {sequence, seen}", path);
		json_decref(j);
		return -1;
	}
	s->seq = (long long)json_integer_value(q);
	snprintf(s->seen, sizeof s->seen, "%s", json_string_value(t));
	json_decref(j);
	return 0;
}

int attstale_save(const char *path, const struct attstale *s)
{
	json_t *j = json_pack("{s:I, s:s}", "sequence", (json_int_t)s->seq, "seen", s->seen);
	int r;

	if (!j) {
		errno = ENOMEM;
		return -1;
	}
	r = json_write_atomic(path, j);
	json_decref(j);
	return r;
}

int attstale_apply(struct attstale *s, json_t *verdict, int *valid, const char *att, const char *now,
		   char *why, size_t whysz)
{
	json_t *q = json_object_get(verdict, "sequence"), *f;
	const char *started = json_string_value(json_object_get(verdict, "started"));
	long long seq = json_is_integer(q) ? (long long)json_integer_value(q) : 0;
	size_t i;

	/* A subject that no longer matched: the host changed after the doctor
	 * proved it.  Putting the bytes back (netsetup) makes that attestation
	 * verify again, and its report could be signed again (a higher
	 * sequence), but what happened meanwhile is unproved: only a doctor
	 * run that started after the change was last seen resumes. */
	if (!*valid) {
		json_array_foreach(json_object_get(verdict, "failures"), i, f)
			if (json_object_get(f, "subject") && iso_shape(now)) {
				if (seq > s->seq)
					s->seq = seq;
				snprintf(s->seen, sizeof s->seen, "%s", now);
				return 1;
			}
		return 0;
	}
	if (!s->seen[0])
		return 0;
	if (seq <= s->seq) {
		*valid = 0;
		snprintf(why, whysz, "attestation %s (sequence %lld) verifies again, but the host changed "
			 "after it was signed: waiting for a fresh one (isopod doctor --adverse, then "
			 "isopod-attest sign)", att, seq);
	} else if (!iso_shape(started) || strcmp(started, s->seen) <= 0) {
		*valid = 0;
		snprintf(why, whysz, "attestation %s (sequence %lld) is of a doctor run started %s, not "
			 "after the host changed under the last one (seen %s): waiting for a fresh one "
			 "(isopod doctor --adverse, then isopod-attest sign)", att, seq,
			 started ? started : "(not said)", s->seen);
	}
	return 0;
}

struct required {
	int *req;
	char *msg;
	size_t msz;
};

static int required(const char *v, const char *where, void *arg)
{
	struct required *r = arg;

	if (!strcasecmp(v, "yes") || !strcasecmp(v, "true") || !strcmp(v, "1")) {
		*r->req = 1;
	} else if (!strcasecmp(v, "no") || !strcasecmp(v, "false") || !strcmp(v, "0")) {
		*r->req = 0;
	} else {
		snprintf(r->msg, r->msz, "%s: require_attestation: yes or no, not %s", where, EXC(v));
		return -1;
	}
	return 0;
}

int attcheck_required(const char *path, int *req, char *msg, size_t msz)
{
	struct required r = { .req = req, .msg = msg, .msz = msz };
	int rc;

	*req = 0;
	rc = config_each(path, "require_attestation", required, &r, msg, msz);
	return rc < 0 ? rc : 0;
}
