/* attcheck.c - the attestation check of the tools that serve clients
 * (attcheck.h): isopod-runner and isopod-mcp. */
#include "attcheck.h"
#include "config.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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

/* the record at path, opened as attstale_load says: NULL with why */
static json_t *stale_read(const char *path, char *why, size_t whysz)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), e;
	struct stat st;
	json_t *j;

	/* not json_load_path: a FIFO there would hang the start, a symlink
	 * (dangling: "nothing seen") would let another file speak for it */
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		e = errno;
		snprintf(why, whysz, "%.300s: %s", path,
			 fd >= 0 ? "not a regular file" :
			 e == ELOOP ? "a symbolic link, not a regular file" : strerror(e));
		if (fd >= 0)
			close(fd);
		errno = fd < 0 ? e : EINVAL;
		return NULL;
	}
	j = json_load_close(fd);
	e = errno;
	if (!j)
		snprintf(why, whysz, "%.300s: %s", path,
			 e == EINVAL || e == EFBIG ? "not one JSON object" : strerror(e));
	errno = e;
	return j;
}

int attstale_load(const char *path, struct attstale *s, char *why, size_t whysz)
{
	json_t *j, *q, *t, *a;

	s->seq = 0, s->seen[0] = 0, s->after[0] = 0;
	if (!(j = stale_read(path, why, whysz)))
		return errno == ENOENT ? 0 : -1;
	q = json_object_get(j, "sequence");
	t = json_object_get(j, "seen");
	a = json_object_get(j, "after"); /* absent in records of older runners */
	if (!json_is_object(j) || json_object_size(j) != 2 + !!a || !json_is_integer(q) ||
	    json_integer_value(q) < 0 || json_integer_value(q) > ATTSTALE_SEQ_MAX ||
	    iso_parse(json_string_value(t)) < 0 || (a && iso_parse(json_string_value(a)) < 0)) {
		snprintf(why, whysz, "%.300s: not a record of {sequence, seen[, after]}", path);
		json_decref(j);
		return -1;
	}
	s->seq = (long long)json_integer_value(q);
	snprintf(s->seen, sizeof s->seen, "%s", json_string_value(t));
	if (a)
		snprintf(s->after, sizeof s->after, "%s", json_string_value(a));
	json_decref(j);
	return 0;
}

int attstale_save(const char *path, const struct attstale *s)
{
	json_t *j = json_pack("{s:I, s:s}", "sequence", (json_int_t)s->seq, "seen", s->seen);
	int r;

	if (j && s->after[0] && json_object_set_new(j, "after", json_string(s->after)) < 0)
		json_decref(j), j = NULL;
	if (!j) {
		errno = ENOMEM;
		return -1;
	}
	r = json_write_atomic(path, j);
	json_decref(j);
	return r;
}

/* *to = t when t is later (as text, both of one shape or ""): 1, else 0 */
static int later(char *to, size_t tosz, const char *t)
{
	if (strcmp(t, to) <= 0)
		return 0;
	snprintf(to, tosz, "%s", t);
	return 1;
}

int attstale_merge(struct attstale *into, const struct attstale *from)
{
	int changed = 0;

	if (from->seq > into->seq)
		into->seq = from->seq, changed = 1;
	changed |= later(into->seen, sizeof into->seen, from->seen);
	changed |= later(into->after, sizeof into->after, from->after);
	return changed;
}

/* not fresh: why, after a mark */
static void stale_why(const struct attstale *s, const char *att, long long seq, const char *started,
		      char *why, size_t whysz)
{
	if (seq <= s->seq)
		snprintf(why, whysz, "attestation %s (sequence %lld) verifies again, but the host changed "
			 "after it was signed: waiting for a fresh one (isopod doctor --adverse, then "
			 "isopod-attest sign)", att, seq);
	else
		snprintf(why, whysz, "attestation %s (sequence %lld) is of a doctor run started %s, not "
			 "after the host changed under the last one (seen %s%s%s): waiting for a fresh one "
			 "(isopod doctor --adverse, then isopod-attest sign)%s", att, seq,
			 started ? started : "(not said)", s->seen,
			 s->after[0] ? "; the failed attestation's doctor run finished " : "", s->after,
			 strcmp(s->seen, ATTSTALE_NEVER) ? ""
			 : "; the runner's clock could not say when: only removing stale.json resumes");
}

int attstale_apply(struct attstale *s, json_t *verdict, int *valid, const char *att, const char *now,
		   char *why, size_t whysz)
{
	json_t *q = json_object_get(verdict, "sequence"), *f;
	const char *started = json_string_value(json_object_get(verdict, "started"));
	const char *finished = json_string_value(json_object_get(verdict, "finished"));
	long long seq = json_is_integer(q) ? (long long)json_integer_value(q) : 0;
	size_t i;

	/* A subject that no longer matched: the host changed after the doctor
	 * proved it.  Putting the bytes back (netsetup) makes that attestation
	 * verify again, and its report could be signed again (a higher
	 * sequence), but what happened meanwhile is unproved: only a doctor
	 * run that started after the change was last seen resumes. */
	if (!*valid) {
		json_array_foreach(json_object_get(verdict, "failures"), i, f) {
			struct attstale mark = { .seq = seq };

			if (!json_object_get(f, "subject"))
				continue;
			/* The runner's clock says when; one that cannot say
			 * records a time no doctor run is after: failing
			 * closed (never "nothing seen"), until the operator
			 * removes the record. */
			snprintf(mark.seen, sizeof mark.seen, "%s", iso_parse(now) >= 0 ? now : ATTSTALE_NEVER);
			/* The doctor's clock too, not the runner's alone: the
			 * failing attestation's own run (signed) ended before a
			 * run that may resume began. */
			if (iso_parse(finished) >= 0)
				snprintf(mark.after, sizeof mark.after, "%s", finished);
			return attstale_merge(s, &mark);
		}
		return 0;
	}
	if (!s->seen[0])
		return 0;
	if (seq <= s->seq || iso_parse(started) < 0 || strcmp(started, s->seen) <= 0 ||
	    strcmp(started, s->after) <= 0) {
		*valid = 0;
		stale_why(s, att, seq, started, why, whysz);
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
