/* isopod-result - shape the result of `isopod run` from what its tools wrote.
 *
 * The front end composes claim, fork, boot, exec, commit and stop; this tool
 * turns their outputs (files in the run's scratch directory) into the one
 * result object and the run's exit status, so the schema lives in C next to
 * the tools that produce its parts, not in a jq program in the shell.  Three
 * modes: the merge of a run that got a result from isopod-exec, the failure
 * of a step (read through the failure contract of doc/INTERFACES.md), and a
 * failure the front end itself decided (usage, timeout, signal). */

#include "propose.h"
#include "psl.h"
#include "ranges.h"
#include "util.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "isopod-result [--pretty] [--vm ID --name NAME] [--usage TEXT] [--remove-dir]\n" \
	"       (--fail CODE --kind KIND [--dir DIR] MESSAGE | --failed STEP --rc N --dir DIR |\n" \
	"        --dir DIR [--net MODE [--fold]] [--start-ms N] [--commit-as LABEL [--commit-rc N]]\n" \
	"        [--provenance FILE [--provenance-rc N]] [--warning TEXT]...\n" \
	"        [--allow-ranges LINES --sysconfig PATH])"

/* What the front end quotes of a diagnostic (its clip 600): at most 600
 * bytes, each outside printable ASCII as '?', the length when cut. */
#define CLIP_MAX 600

struct opts {
	int pretty, fold, remove_dir;
	const char *vm, *name, *usage, *dir, *net, *commit_as, *ranges, *sysconf, *prov;
	const char *fail_kind, *fail_msg, *failed;
	long long fail_code, rc, start_ms, commit_rc, prov_rc;
	int have_fail, have_rc, have_commit_rc, have_start, have_prov_rc;
	json_t *warnings;
};

static void clip(char out[CLIP_MAX + 64], const char *s)
{
	size_t n = strlen(s), m = n < CLIP_MAX ? n : CLIP_MAX, i;

	for (i = 0; i < m; i++)
		out[i] = s[i] >= ' ' && s[i] <= '~' ? s[i] : '?';
	out[m] = 0;
	if (n > m)
		snprintf(out + m, 64, "…(%zu bytes)", n);
}

/* The status every step may end with, as the front end passes it on. */
static int norm_status(long long rc)
{
	switch (rc) {
	case EX_OK:
	case EX_TIMEOUT:
	case EX_USAGE:
	case EX_NOTFOUND:
	case EX_CONFLICT:
	case EX_SYS:
		return (int)rc;
	default:
		return EX_SYS;
	}
}

/* --remove-dir: the front end's scratch directory, once its result is out
 * (every mode reads the directory before that): the files its steps wrote,
 * then the directory, so that the front end needs no rm(1) process on
 * every run.  A directory in it is not removed (unlinkat without
 * AT_REMOVEDIR; the steps write none), nor then is DIR: nothing runs after
 * us (isopod-run execs us last), so it stays for isopod gc, which reaps
 * runs/ of a pid that is gone.  Best effort: the result is already out. */
static void remove_dir(const char *dir)
{
	DIR *d = dir ? opendir(dir) : NULL;
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	rmdir(dir);
}

static void emit(const struct opts *o, json_t *j)
{
	size_t fl = o->pretty ? JSON_INDENT(2) : JSON_COMPACT;

	if (!j)
		die(EX_SYS, "unable to build the result");
	if (json_dumpf(j, stdout, fl | JSON_PRESERVE_ORDER) < 0 || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF || ferror(stdout)) {
		/* no reader (a caller that died: isopod-mcp killed, SIGPIPE
		 * ignored): the directory goes all the same, since isopod-run
		 * exec'd us and nothing after us would remove it */
		int e = errno;

		if (o->remove_dir)
			remove_dir(o->dir);
		errno = e;
		die(EX_SYS, "unable to write to standard output:");
	}
	json_decref(j);
	if (o->remove_dir)
		remove_dir(o->dir);
}

static void add_vm(const struct opts *o, json_t *j)
{
	if (o->vm && *o->vm)
		json_object_set_new(j, "vm", json_pack("{s:s, s:s}", "id", o->vm, "name",
						       o->name ? o->name : ""));
}

/* An infrastructure failure of the run: diagnostic, result, status. */
__attribute__((noreturn)) static void run_fail(const struct opts *o, int code, const char *kind,
					      const char *msg)
{
	char c[CLIP_MAX + 64];
	json_t *j;

	clip(c, msg);
	/* the synopsis first, the diagnostic last (lib/util.c die_usage) */
	if (!strcmp(kind, "usage") && o->usage)
		fprintf(stderr, "usage: %s\n", o->usage);
	fprintf(stderr, "isopod: fatal: %s\n", c);
	j = json_pack("{s:b, s:s, s:s}", "ok", 0, "error", c, "error_kind", kind);
	add_vm(o, j);
	emit(o, j);
	exit(code);
}

static json_t *load(const char *dir, const char *name)
{
	char p[PATH_MAX];

	if (pathn(p, sizeof p, "%s/%s", dir, name) < 0)
		return NULL;
	return json_load_path(p);
}

/* The last line of a file that is not blank, into out; 0 when none. */
static int last_line(const char *path, char *out, size_t sz)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int found = 0;

	if (!f)
		return 0;
	while ((n = getline(&line, &cap, f)) >= 0) {
		while (n > 0 && line[n - 1] == '\n')
			line[--n] = 0;
		if (line[strspn(line, " \t\r\v\f")]) {
			snprintf(out, sz, "%s", line);
			found = 1;
		}
	}
	free(line);
	fclose(f);
	return found;
}

/* Why STEP failed: its ok:false object on stdout (isopod-exec's result, or a
 * tool that predates the contract), else its status object, else the last
 * line of its diagnostics, else its exit status. */
__attribute__((noreturn)) static void step_failed(const struct opts *o)
{
	int code = norm_status(o->rc);
	char f[64], p[PATH_MAX], line[DIAG_MAX + 512];
	json_t *j, *st;
	const char *e, *k;

	if (code == 0)
		code = EX_SYS;
	snprintf(f, sizeof f, "%s.json", o->failed);
	j = load(o->dir, f);
	if (j && json_is_false(json_object_get(j, "ok"))) {
		if (!json_object_get(j, "vm"))
			add_vm(o, j);
		emit(o, j);
		exit(code);
	}
	json_decref(j);
	snprintf(f, sizeof f, "%s.status", o->failed);
	st = load(o->dir, f);
	e = json_string_value(json_object_get(st, "error"));
	k = json_string_value(json_object_get(st, "error_kind"));
	if (e && *e)
		run_fail(o, code, k && *k ? k : exit_kind(code), e);
	if (pathn(p, sizeof p, "%s/%s.err", o->dir, o->failed) < 0 ||
	    !last_line(p, line, sizeof line))
		snprintf(line, sizeof line, "isopod-%s failed (exit %lld)", o->failed, o->rc);
	run_fail(o, code, exit_kind(code), line);
}

/* ---- egress: the broker's ledger summed up per kind, name and port ---- */

/* jq's order of values (null < false < true < numbers < strings < arrays <
 * objects), which group_by and unique sorted by in the shell's version. */
static int rank(const json_t *v)
{
	switch (v ? json_typeof(v) : JSON_NULL) {
	case JSON_NULL: return 0;
	case JSON_FALSE: return 1;
	case JSON_TRUE: return 2;
	case JSON_INTEGER:
	case JSON_REAL: return 3;
	case JSON_STRING: return 4;
	case JSON_ARRAY: return 5;
	case JSON_OBJECT: return 6;
	}
	return 0;
}

static int jcmp(const json_t *a, const json_t *b)
{
	int ra = rank(a), rb = rank(b);

	if (ra != rb)
		return ra < rb ? -1 : 1;
	if (ra == 3) {
		double x = json_number_value(a), y = json_number_value(b);

		return x < y ? -1 : x > y;
	}
	if (ra == 4) {
		size_t la = json_string_length(a), lb = json_string_length(b);
		int c = memcmp(json_string_value(a), json_string_value(b), la < lb ? la : lb);

		return c ? c : (la > lb) - (la < lb);
	}
	if (ra == 5) {
		size_t i, la = json_array_size(a), lb = json_array_size(b);

		for (i = 0; i < la && i < lb; i++) {
			int c = jcmp(json_array_get(a, i), json_array_get(b, i));

			if (c)
				return c;
		}
		return (la > lb) - (la < lb);
	}
	if (ra == 6) { /* not in a ledger we write: any fixed order will do */
		char *sa = json_dumps(a, JSON_SORT_KEYS | JSON_COMPACT);
		char *sb = json_dumps(b, JSON_SORT_KEYS | JSON_COMPACT);
		int c = sa && sb ? strcmp(sa, sb) : 0;

		free(sa);
		free(sb);
		return c;
	}
	return 0;
}

struct entry {
	json_t *line;
	size_t idx;
	int with_reason;
};

static int key_cmp(const struct entry *a, const struct entry *b)
{
	static const char *const keys[] = {"kind", "name", "port", "reason"};
	size_t i, nk = a->with_reason ? 4 : 3;

	for (i = 0; i < nk; i++) {
		int c = jcmp(json_object_get(a->line, keys[i]), json_object_get(b->line, keys[i]));

		if (c)
			return c;
	}
	return 0;
}

static int entry_cmp(const void *pa, const void *pb)
{
	const struct entry *a = pa, *b = pb;
	int c = key_cmp(a, b);

	/* stable, as jq's sort: a group's first line is its first in the ledger */
	return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

static int addr_cmp(const void *pa, const void *pb)
{
	return jcmp(*(json_t *const *)pa, *(json_t *const *)pb);
}

static json_t *or_null(json_t *v)
{
	return v ? json_incref(v) : json_null();
}

/* The sum of a member over a group, 0 for a missing one; an integer while
 * every term is one. */
static json_t *sum(const struct entry *g, size_t n, const char *key)
{
	json_int_t si = 0;
	double sd = 0;
	int real = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		json_t *v = json_object_get(g[i].line, key);

		if (json_is_real(v))
			real = 1;
		si += json_is_integer(v) ? json_integer_value(v) : 0;
		sd += json_number_value(v);
	}
	return real ? json_real(sd) : json_integer(si);
}

static json_t *group_allowed(struct entry *g, size_t n)
{
	json_t *addrs = json_array(), **v = calloc(n ? n : 1, sizeof *v);
	size_t i, k = 0;

	for (i = 0; v && i < n; i++) {
		json_t *a = json_object_get(g[i].line, "address");

		if (a && !json_is_null(a) && !json_is_false(a))
			v[k++] = a;
	}
	if (v)
		qsort(v, k, sizeof *v, addr_cmp);
	for (i = 0; v && i < k; i++)
		if (i == 0 || jcmp(v[i - 1], v[i]))
			json_array_append(addrs, v[i]);
	free(v);
	return json_pack("{s:o, s:o, s:o, s:o, s:I, s:o, s:o}",
			 "kind", or_null(json_object_get(g[0].line, "kind")),
			 "name", or_null(json_object_get(g[0].line, "name")),
			 "port", or_null(json_object_get(g[0].line, "port")),
			 "addresses", addrs, "flows", (json_int_t)n,
			 "up", sum(g, n, "up"), "down", sum(g, n, "down"));
}

static json_t *group_denied(struct entry *g, size_t n)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:I}",
			 "kind", or_null(json_object_get(g[0].line, "kind")),
			 "name", or_null(json_object_get(g[0].line, "name")),
			 "port", or_null(json_object_get(g[0].line, "port")),
			 "reason", or_null(json_object_get(g[0].line, "reason")),
			 "count", (json_int_t)n);
}

static json_t *groups(struct entry *e, size_t n, int denied)
{
	json_t *out = json_array();
	size_t i, start = 0;

	for (i = 0; i < n; i++)
		e[i].with_reason = denied;
	qsort(e, n, sizeof *e, entry_cmp);
	for (i = 1; i <= n; i++) {
		if (i < n && !key_cmp(&e[start], &e[i]))
			continue;
		json_array_append_new(out, denied ? group_denied(e + start, i - start)
						  : group_allowed(e + start, i - start));
		start = i;
	}
	return out;
}

/* The guest chooses how many groups there are (each DNS name it asks for
 * is one), and a result must stay small enough for its readers (the
 * runner, jq): past EGRESS_GROUPS_MAX of a list, the groups with the most
 * flows or count are kept, in their order, and <list>_omitted says what
 * was left out ({groups, <weight>}); without it nothing was. */
#define EGRESS_GROUPS_MAX 256

struct weighed {
	json_int_t w;
	size_t i;
};

static int weighed_cmp(const void *a, const void *b)
{
	const struct weighed *x = a, *y = b;

	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

static void cap_groups(json_t *eg, const char *list, const char *weight)
{
	json_t *a = json_object_get(eg, list), *kept;
	size_t n = json_array_size(a), i;
	struct weighed *v;
	char *keep;
	json_int_t gone = 0;
	char name[32];

	if (n <= EGRESS_GROUPS_MAX)
		return;
	v = calloc(n, sizeof *v);
	keep = calloc(n, 1);
	kept = json_array();
	if (!v || !keep || !kept)
		die(EX_SYS, "out of memory");
	for (i = 0; i < n; i++)
		v[i] = (struct weighed){ .w = json_integer_value(json_object_get(json_array_get(a, i), weight)),
					 .i = i };
	qsort(v, n, sizeof *v, weighed_cmp);
	for (i = 0; i < n; i++) {
		if (i < EGRESS_GROUPS_MAX)
			keep[v[i].i] = 1;
		else
			gone += v[i].w;
	}
	for (i = 0; i < n; i++)
		if (keep[i])
			json_array_append(kept, json_array_get(a, i));
	snprintf(name, sizeof name, "%s_omitted", list);
	json_object_set_new(eg, name, json_pack("{s:I, s:I}", "groups", (json_int_t)(n - EGRESS_GROUPS_MAX),
						 weight, gone));
	json_object_set_new(eg, list, kept);
	free(v);
	free(keep);
}

static const char *str(const json_t *j, const char *key)
{
	return json_string_value(json_object_get(j, key));
}

/* A learn run's proposal (lib/propose.h) from its ledger, its folds in
 * "allow" when fold asks, or null with a warning when the ledger cannot be
 * read; a warning too when the proposal is capped (an allowlist of it
 * would not serve every flow). */
static json_t *learned(const char *id, int fold, json_t *warnings)
{
	char p[PATH_MAX], w[PATH_MAX + 128], nopsl[PATH_MAX + 256] = "";
	const char *why = "no ledger";
	struct psl *psl = psl_open(getenv("ISOPOD_PUBLIC_SUFFIX_LIST"), nopsl, sizeof nopsl);
	json_t *j = NULL;
	json_int_t n;

	/* no list: no fold, said in "fold" and among the warnings */
	if (!psl)
		json_array_append_new(warnings, json_string(nopsl));
	if (id_vm_ok(id) && pathn(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), id) == 0 &&
	    (j = propose_path(p, psl, psl ? NULL : nopsl, fold, &why))) {
		psl_free(psl);
		n = json_integer_value(json_object_get(json_object_get(j, "allow_omitted"), "entries"));
		if (n)
			json_array_append_new(warnings,
					      json_sprintf("the proposed allowlist leaves out %lld "
							   "entries (it keeps at most %d, in %d bytes)",
							   (long long)n, PROPOSE_LIST_MAX,
							   PROPOSE_NAMES_BYTES));
		return j;
	}
	psl_free(psl);
	snprintf(w, sizeof w, "no proposed allowlist: the ledger of %s: %s", id, why);
	json_array_append_new(warnings, json_string(w));
	return json_null();
}

/* egress and the warnings of lost policy, from vms/<id>/ledger.jsonl.  A
 * line that is not a JSON object counts as a denied "ledger" entry. */
static json_t *egress(const char *id, json_t *warnings)
{
	char p[PATH_MAX], why[256];
	FILE *f = NULL;
	char *line = NULL;
	size_t cap = 0, nl = 0, na = 0, nd = 0, i;
	ssize_t n;
	json_t *lines = json_array(), *res;
	struct entry *al, *de;

	if (id_vm_ok(id) && pathn(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), id) == 0)
		f = fopen(p, "re");
	while (f && (n = getline(&line, &cap, f)) >= 0) {
		json_t *j;

		if (n > 0 && line[n - 1] == '\n')
			line[--n] = 0;
		if (n == 0)
			continue;
		j = json_parse(line, (size_t)n, 0, why, sizeof why);
		if (!j)
			j = json_pack("{s:s, s:s, s:s}", "kind", "ledger", "verdict", "denied",
				      "reason", "a ledger line is not JSON");
		json_array_append_new(lines, j);
	}
	free(line);
	if (f)
		fclose(f);
	nl = json_array_size(lines);
	al = calloc(nl + 1, sizeof *al);
	de = calloc(nl + 1, sizeof *de);
	if (!al || !de)
		die(EX_SYS, "out of memory");
	for (i = 0; i < nl; i++) {
		json_t *j = json_array_get(lines, i), *r;
		const char *kind = str(j, "kind"), *verdict = str(j, "verdict");

		if (kind && !strcmp(kind, "policy")) {
			if (!verdict || strcmp(verdict, "lost"))
				continue;
			r = json_object_get(j, "reason");
			if (json_is_string(r)) {
				json_array_append(warnings, r);
			} else if (!r || json_is_null(r) || json_is_false(r)) {
				json_array_append_new(warnings, json_string("network policy lost"));
			} else {
				char *s = json_dumps(r, JSON_COMPACT | JSON_ENCODE_ANY);

				json_array_append_new(warnings, json_string(s ? s : ""));
				free(s);
			}
			continue;
		}
		if (verdict && !strcmp(verdict, "allowed"))
			al[na++] = (struct entry){.line = j, .idx = i};
		else
			de[nd++] = (struct entry){.line = j, .idx = i};
	}
	res = json_pack("{s:o, s:o}", "allowed", groups(al, na, 0), "denied", groups(de, nd, 1));
	cap_groups(res, "allowed", "flows");
	cap_groups(res, "denied", "count");
	free(al);
	free(de);
	json_decref(lines);
	return res;
}

/* ---- the merge --------------------------------------------------------- */

static int truthy(const json_t *v)
{
	return v && !json_is_null(v) && !json_is_false(v);
}

/* jq's tostring: a string as it is, anything else as JSON text. */
static char *tostring(const json_t *v, char *buf, size_t sz)
{
	char *s;

	if (json_is_string(v)) {
		snprintf(buf, sz, "%s", json_string_value(v));
		return buf;
	}
	s = v ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	snprintf(buf, sz, "%s", s ? s : "null");
	free(s);
	return buf;
}

static void set_if(json_t *r, const char *key, json_t *v)
{
	if (v && !json_is_null(v))
		json_object_set(r, key, v);
}

/* The member of a step (commit, provenance) that ran with status rc: the
 * JSON it printed (STEP.json), else the error its status file names, else
 * the last line of its stderr, else its exit status. */
static json_t *step_member(const struct opts *o, const char *step, long long rc)
{
	char line[DIAG_MAX + 512], p[PATH_MAX], name[32];
	json_t *j, *st;
	const char *e;

	snprintf(name, sizeof name, "%s.%s", step, rc ? "status" : "json");
	if (rc == 0) {
		if (!(j = load(o->dir, name))) {
			snprintf(line, sizeof line, "unusable JSON from isopod-%s", step);
			run_fail(o, EX_SYS, "infra", line);
		}
		return j;
	}
	st = load(o->dir, name);
	e = json_string_value(json_object_get(st, "error"));
	if (e && *e)
		snprintf(line, sizeof line, "%s", e);
	else if (pathn(p, sizeof p, "%s/%s.err", o->dir, step) < 0 || !last_line(p, line, sizeof line))
		snprintf(line, sizeof line, "isopod-%s failed (exit %lld)", step, rc);
	json_decref(st);
	return json_pack("{s:s%}", "error", line, strlen(line));
}

/* The commit member: its result, why it was skipped, or why it failed (then
 * *crc is its status). */
static json_t *commit_member(const struct opts *o, const json_t *ex, int *crc)
{
	char line[DIAG_MAX + 512], b[64];

	*crc = 0;
	if (!o->commit_as)
		return NULL;
	if (!o->have_commit_rc) {
		json_t *ec = json_object_get(ex, "exit_code");

		if (truthy(json_object_get(ex, "timed_out")))
			return json_pack("{s:s}", "skipped", "timed out");
		snprintf(line, sizeof line, "exit_code %s", tostring(ec, b, sizeof b));
		if (json_is_integer(ec) && json_integer_value(ec) == 0)
			snprintf(line, sizeof line, "no usable result");
		return json_pack("{s:s}", "skipped", line);
	}
	*crc = o->commit_rc ? norm_status(o->commit_rc) : 0;
	return step_member(o, "commit", o->commit_rc);
}

/* The provenance member: what isopod-provenance sign printed, or why there
 * is none (then *prc is the status the run ends with: provenance was asked
 * for, and a run without it is not the run asked for). */
static json_t *prov_member(const struct opts *o, int *prc)
{
	*prc = 0;
	if (!o->prov)
		return NULL;
	if (!o->have_prov_rc) {
		*prc = EX_SYS;
		return json_pack("{s:s}", "error",
				 "provenance not signed: the vm was not stopped, so its egress ledger is not complete");
	}
	if (o->prov_rc)
		*prc = o->prov_rc == EX_GUEST ? EX_SYS : norm_status(o->prov_rc);
	return step_member(o, "provenance", o->prov_rc);
}

static json_t *range_warnings(const struct opts *o)
{
	json_t *w = json_array();
	const char *s = o->ranges ? o->ranges : "", *nl;

	for (; *s; s = *nl ? nl + 1 : nl) {
		char m[1024], r[128];

		nl = strchr(s, '\n');
		if (!nl)
			nl = s + strlen(s);
		if (nl == s)
			continue;
		snprintf(r, sizeof r, "%.*s", (int)(nl - s), s);
		/* the doctor's words: one text, lib/ranges.c */
		ranges_warning(r, o->sysconf ? o->sysconf : "", m, sizeof m);
		json_array_append_new(w, json_string(m));
	}
	return w;
}

/* The console's, from the VM's record (isopod-supervise writes it as the
 * VM stops, and console_log_truncated as soon as the cap cut the log):
 * console_bytes all the guest wrote to its console (null while a kept VM
 * runs), console_log_truncated whether console.log kept less. */
static void console_fields(json_t *r, const char *id)
{
	json_t *rec = id ? vm_read(id) : NULL, *b = json_object_get(rec, "console_bytes");

	json_object_set_new(r, "console_bytes", json_is_integer(b) ? json_incref(b) : json_null());
	json_object_set_new(r, "console_log_truncated",
			    json_boolean(json_is_true(json_object_get(rec, "console_log_truncated"))));
	json_decref(rec);
}

static void append_all(json_t *to, const json_t *from)
{
	if (json_is_array(from))
		json_array_extend(to, (json_t *)from);
}

__attribute__((noreturn)) static void merge(const struct opts *o)
{
	json_t *ex = load(o->dir, "exec.json"), *boot = load(o->dir, "boot.json");
	json_t *plan = load(o->dir, "fork.json");
	json_t *r, *t, *w, *et, *commit, *prov, *eg = NULL, *lost = json_array(), *ec;
	int crc, prc, networked = o->net && strcmp(o->net, "none");
	long long status;
	char b[128];

	if (!plan)
		plan = load(o->dir, "claim.json");
	if (!plan && boot && !strcmp(str(boot, "path") ?: "", "pool"))
		plan = json_object(); /* a pooled VM: its filler claimed it (isopod-pool(1)) */
	if (!ex || !boot || !plan ||
	    (json_object_get(ex, "warnings") && !json_is_null(json_object_get(ex, "warnings")) &&
	     !json_is_array(json_object_get(ex, "warnings"))))
		run_fail(o, EX_SYS, "infra", !boot ? "unusable JSON from isopod-boot"
				     : !plan ? "unusable JSON from isopod-claim or isopod-fork"
				     : "unusable JSON from isopod-exec");
	commit = commit_member(o, ex, &crc);
	prov = prov_member(o, &prc);
	r = json_pack("{s:b}", "ok", 1);
	json_object_update(r, ex);
	json_object_set_new(r, "vm", json_pack("{s:o, s:o}",
			"id", or_null(json_object_get(json_object_get(boot, "vm"), "id")),
			"name", or_null(json_object_get(json_object_get(boot, "vm"), "name"))));
	json_object_set_new(r, "accel", or_null(json_object_get(boot, "accel")));
	if (truthy(json_object_get(boot, "path")))
		json_object_set(r, "path", json_object_get(boot, "path"));
	else
		json_object_set_new(r, "path", json_string("cold"));
	set_if(r, "accel_reason", json_object_get(boot, "accel_reason"));
	/* TCG's guest's TSC rate: null kept (the host had none to tell it) */
	if (json_object_get(boot, "tsc_khz"))
		json_object_set(r, "tsc_khz", json_object_get(boot, "tsc_khz"));
	set_if(r, "resume_ms", json_object_get(boot, "resume_ms"));
	set_if(r, "warm_key", json_object_get(boot, "warm_key"));
	set_if(r, "net", json_object_get(boot, "net"));
	set_if(r, "jail", json_object_get(boot, "jail"));
	set_if(r, "limits", json_object_get(boot, "limits"));
	console_fields(r, str(json_object_get(boot, "vm"), "id"));
	if (networked) {
		const char *id = str(json_object_get(boot, "vm"), "id");

		eg = egress(id ? id : "", lost);
		json_object_set_new(r, "egress", eg);
		if (!strcmp(o->net, "learn"))
			json_object_set_new(r, "proposed_allowlist", learned(id ? id : "", o->fold, lost));
	}
	et = json_object_get(ex, "timings");
	t = json_is_object(et) ? json_deep_copy(et) : json_object();
	json_object_set_new(t, "boot_ms", or_null(json_object_get(boot, "boot_ms")));
	json_object_set_new(t, "exec_ms", or_null(truthy(json_object_get(et, "exec_ms"))
						  ? json_object_get(et, "exec_ms")
						  : json_object_get(ex, "exec_ms")));
	json_object_set_new(t, "total_ms", json_integer(o->have_start ? wall_ms() - o->start_ms : 0));
	set_if(t, "resume_ms", json_object_get(boot, "resume_ms"));
	set_if(t, "snapshot_build_ms", json_object_get(boot, "build_ms"));
	json_object_set_new(r, "timings", t);
	w = json_array();
	append_all(w, json_object_get(ex, "warnings"));
	append_all(w, json_object_get(boot, "warnings"));
	append_all(w, o->warnings);
	append_all(w, lost);
	t = range_warnings(o);
	json_array_extend(w, t);
	json_decref(t);
	json_object_set_new(r, "warnings", w);
	if (truthy(json_object_get(plan, "base")))
		json_object_set_new(r, "on", json_pack("{s:o, s:o, s:o}",
			"stage", or_null(json_object_get(plan, "stage")),
			"base", or_null(json_object_get(plan, "base")),
			"layers", or_null(json_object_get(plan, "layers"))));
	if (commit)
		json_object_set_new(r, "commit", commit);
	if (prov)
		json_object_set_new(r, "provenance", prov);
	if (crc) {
		json_object_set_new(r, "ok", json_false());
		json_object_set(r, "error", json_object_get(commit, "error"));
		json_object_set_new(r, "error_kind", json_string(exit_kind(crc)));
	} else if (prc) {
		json_object_set_new(r, "ok", json_false());
		json_object_set(r, "error", json_object_get(prov, "error"));
		json_object_set_new(r, "error_kind", json_string(exit_kind(prc)));
		crc = prc;
	}
	json_object_del(r, "exec_ms");
	ec = json_object_get(r, "exit_code");
	status = crc;
	if (!crc && !(json_is_integer(ec) && json_integer_value(ec) >= 0 &&
		      json_integer_value(ec) <= 255)) {
		char m[256];

		snprintf(m, sizeof m, "isopod-exec reported no usable exit_code (%s)",
			 tostring(ec, b, sizeof b));
		run_fail(o, EX_SYS, "infra", m);
	}
	if (!crc)
		status = json_integer_value(ec);
	emit(o, r);
	exit((int)status);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{"pretty", no_argument, NULL, 'p'},
		{"vm", required_argument, NULL, 'v'},
		{"name", required_argument, NULL, 'n'},
		{"usage", required_argument, NULL, 'u'},
		{"fail", required_argument, NULL, 'f'},
		{"kind", required_argument, NULL, 'k'},
		{"failed", required_argument, NULL, 'F'},
		{"rc", required_argument, NULL, 'r'},
		{"dir", required_argument, NULL, 'd'},
		{"net", required_argument, NULL, 'N'},
		{"fold", no_argument, NULL, 'o'},
		{"start-ms", required_argument, NULL, 's'},
		{"commit-as", required_argument, NULL, 'c'},
		{"commit-rc", required_argument, NULL, 'C'},
		{"warning", required_argument, NULL, 'w'},
		{"provenance", required_argument, NULL, 'P'},
		{"provenance-rc", required_argument, NULL, 'R'},
		{"allow-ranges", required_argument, NULL, 'a'},
		{"sysconfig", required_argument, NULL, 'S'},
		{"remove-dir", no_argument, NULL, 'D'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.warnings = json_array()};
	int c;

	progname = "isopod-result";
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'p': o.pretty = 1; break;
		case 'v': o.vm = optarg; break;
		case 'n': o.name = optarg; break;
		case 'u': o.usage = optarg; break;
		case 'f':
			if (parse_ll(optarg, 0, 255, &o.fail_code) < 0)
				die(EX_USAGE, "--fail %s: want a status 0..255", EXC(optarg));
			o.have_fail = 1;
			break;
		case 'k': o.fail_kind = optarg; break;
		case 'F': o.failed = optarg; break;
		case 'r':
			if (parse_ll(optarg, 0, 255, &o.rc) < 0)
				die(EX_USAGE, "--rc %s: want a status 0..255", EXC(optarg));
			o.have_rc = 1;
			break;
		case 'd': o.dir = optarg; break;
		case 'N': o.net = optarg; break;
		case 'o': o.fold = 1; break;
		case 's':
			if (parse_ll(optarg, 0, (long long)1 << 60, &o.start_ms) < 0)
				die(EX_USAGE, "--start-ms %s: want milliseconds", EXC(optarg));
			o.have_start = 1;
			break;
		case 'c': o.commit_as = optarg; break;
		case 'C':
			if (parse_ll(optarg, 0, 255, &o.commit_rc) < 0)
				die(EX_USAGE, "--commit-rc %s: want a status 0..255", EXC(optarg));
			o.have_commit_rc = 1;
			break;
		case 'w': json_array_append_new(o.warnings, json_string(optarg)); break;
		case 'P': o.prov = optarg; break;
		case 'R':
			if (parse_ll(optarg, 0, 255, &o.prov_rc) < 0)
				die(EX_USAGE, "--provenance-rc %s: want a status 0..255", EXC(optarg));
			o.have_prov_rc = 1;
			break;
		case 'a': o.ranges = optarg; break;
		case 'S': o.sysconf = optarg; break;
		case 'D': o.remove_dir = 1; break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (o.have_fail) {
		if (optind != argc - 1 || !o.fail_kind)
			die_usage(USAGE, "--fail wants --kind KIND and one MESSAGE");
		run_fail(&o, (int)o.fail_code, o.fail_kind, argv[optind]);
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (!o.dir)
		die_usage(USAGE, "no --dir DIR (nor --fail)");
	if (o.failed) {
		if (!o.have_rc || strchr(o.failed, '/'))
			die_usage(USAGE, "--failed wants a STEP name and --rc N");
		step_failed(&o);
	}
	merge(&o);
}
