/* propose.c - the allowlist a learn run proposes, from a ledger (see
 * propose.h).  Pure: bytes in, JSON out.  Every step sorts rather than
 * searches a list, so a ledger of many distinct names (a guest in learn mode
 * may name as many as it likes) costs n log n, not n squared. */
#include "propose.h"
#include "allow.h"
#include "psl.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct pflow {
	const char *kind; /* "connect", "http", "dns": static */
	char *name;       /* normalised when valid, else an IP address as written */
	unsigned port;
	int valid;        /* a host name (lib/allow.c), not an address */
	long long count;
	long entry;       /* the allow entry that covers it, or -1 */
	long cand;        /* the fold its name is in (applied or not), or -1 */
};

struct plist {
	struct pflow *v;
	size_t n, cap;
};

/* The ledger's lines, as the proposal counts them (see propose.h). */
struct tally {
	long long lines, skipped, failed, not_names;
};

static int push(struct plist *l, const struct pflow *f)
{
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 64;
		struct pflow *nv = realloc(l->v, nc * sizeof *nv);

		if (!nv)
			return -1;
		l->v = nv;
		l->cap = nc;
	}
	l->v[l->n++] = *f;
	return 0;
}

static const char *kind_of(const char *k)
{
	static const char *const kinds[] = { "connect", "http", "dns" };

	for (size_t i = 0; k && i < sizeof kinds / sizeof kinds[0]; i++)
		if (!strcmp(k, kinds[i]))
			return kinds[i];
	return NULL;
}

/* Is name an IPv4 or IPv6 address (what the broker writes for a flow to
 * an address rather than a name)? */
static int is_address(const char *name)
{
	unsigned char a[16];

	return strlen(name) < INET6_ADDRSTRLEN &&
	       (inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1);
}

/* One line: 1 a succeeded flow (into f), 0 a line of no flow (a policy or
 * ledger line), 2 a flow that did not succeed, 3 a succeeded flow whose
 * name is neither a host name nor an address, -1 not a ledger object. */
static int read_line(const char *p, size_t n, struct pflow *f)
{
	char norm[ALLOW_NAME_MAX + 1];
	json_t *j = json_parse(p, n, 0, NULL, 0), *port, *reason;
	const char *verdict, *name, *addr;
	int allowed, r = -1;

	if (!j || !json_is_object(j))
		goto out;
	r = 0;
	*f = (struct pflow){ .kind = kind_of(json_string_value(json_object_get(j, "kind"))),
			     .count = 1, .entry = -1, .cand = -1 };
	if (!f->kind)
		goto out;
	verdict = json_string_value(json_object_get(j, "verdict"));
	name = json_string_value(json_object_get(j, "name"));
	addr = json_string_value(json_object_get(j, "address"));
	port = json_object_get(j, "port");
	allowed = verdict && !strcmp(verdict, "allowed");
	r = 2;
	if (!allowed || !name || !*name)
		goto out;
	reason = json_object_get(j, "reason");
	if (f->kind[0] == 'd' ? reason && !json_is_null(reason) : !addr)
		goto out;
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535)
		goto out;
	f->port = (unsigned)json_integer_value(port);
	/* Any other name is counted, never listed: the guest chose its bytes,
	 * and a name cut to a length could end inside a UTF-8 sequence (no
	 * longer JSON text). */
	f->valid = allow_name_norm(norm, sizeof norm, name) == 0;
	r = 3;
	if (!f->valid && !is_address(name))
		goto out;
	f->name = strdup(f->valid ? norm : name);
	r = f->name ? 1 : -2;
out:
	json_decref(j);
	return r;
}

static int flow_cmp(const void *pa, const void *pb)
{
	const struct pflow *a = pa, *b = pb;
	int c = strcmp(a->kind, b->kind);

	if (!c)
		c = strcmp(a->name, b->name);
	return c ? c : (a->port > b->port) - (a->port < b->port);
}

/* Sorted by kind, name and port, equal ones merged (their counts added). */
static void merge(struct plist *l)
{
	size_t k = 0;

	if (!l->n)
		return;
	qsort(l->v, l->n, sizeof *l->v, flow_cmp);
	for (size_t i = 1; i < l->n; i++) {
		if (!flow_cmp(&l->v[k], &l->v[i])) {
			l->v[k].count += l->v[i].count;
			free(l->v[i].name);
		} else {
			l->v[++k] = l->v[i];
		}
	}
	l->n = k + 1;
}

struct strs {
	char **v;
	size_t n, cap;
};

static int add_str(struct strs *s, char *str)
{
	if (!str)
		return -1;
	if (s->n == s->cap) {
		size_t nc = s->cap ? s->cap * 2 : 32;
		char **nv = realloc(s->v, nc * sizeof *nv);

		if (!nv) {
			free(str);
			return -1;
		}
		s->v = nv;
		s->cap = nc;
	}
	s->v[s->n++] = str;
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void strs_free(struct strs *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
}

/* sorted and unique */
static void uniq(struct strs *s)
{
	size_t k = 0;

	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof *s->v, str_cmp);
	for (size_t i = 1; i < s->n; i++) {
		if (!strcmp(s->v[k], s->v[i]))
			free(s->v[i]);
		else
			s->v[++k] = s->v[i];
	}
	s->n = k + 1;
}

/* A name a succeeded connect/http flow went to, at a port key (0: ports
 * 80/443, which a pattern without a port allows; else the port), and the
 * pattern of the entry that serves it. */
struct pname {
	const char *name; /* the flow's */
	unsigned pk;
	const char *reg;  /* its registrable domain when below it, else NULL */
	const char *cand; /* the "*.domain" fold of its group (owned by a struct
			   * strs of folds), NULL: none */
	const char *fold; /* cand when folds are applied (its entry's pattern),
			   * NULL: its exact name is its entry */
};

static int pname_cmp(const void *pa, const void *pb)
{
	const struct pname *a = pa, *b = pb;
	int c = strcmp(a->name, b->name);

	return c ? c : (a->pk > b->pk) - (a->pk < b->pk);
}

/* by registrable domain, port key, name: a fold's group is a run */
static int group_cmp(const void *pa, const void *pb)
{
	const struct pname *a = pa, *b = pb;
	int c = strcmp(a->reg, b->reg);

	if (!c)
		c = (a->pk > b->pk) - (a->pk < b->pk);
	return c ? c : strcmp(a->name, b->name);
}

static char *pattern_of(const char *name, unsigned pk, int wild)
{
	char buf[ALLOW_PATTERN_MAX];

	snprintf(buf, sizeof buf, pk ? "%s%s:%u" : "%s%s", wild ? "*." : "", name, pk);
	return strdup(buf);
}

/* Is s a label suffix of name (name itself, or name ends with "." s)? */
static int under(const char *name, const char *s)
{
	size_t n = strlen(name), k = strlen(s);

	return k <= n && !strcmp(name + n - k, s) && (k == n || name[n - k - 1] == '.');
}

/* The fold of the group v[0..n) (one registrable domain and port key, each
 * name strictly below it): "*.P", P the deepest domain every name is
 * strictly below, when the group has PROPOSE_FOLD_MIN names or more and
 * no rule of the list lies below P (s3.amazonaws.com below amazonaws.com:
 * "*.amazonaws.com" would reach anyone's buckets).  P is never above the
 * registrable domain, so never a public suffix.  NULL: no fold (the names
 * stay exact); *err when out of memory. */
static char *fold_of(const struct psl *psl, const struct pname *v, size_t n, int *err)
{
	const char *p = strchr(v[0].name, '.') + 1;
	char *pat;

	if (n < PROPOSE_FOLD_MIN)
		return NULL;
	for (size_t i = 1; i < n; i++)
		while (!under(strchr(v[i].name, '.') + 1, p))
			p = strchr(p, '.') + 1; /* stops at reg: every parent is under it */
	if (!strchr(p, '.') || psl_rule_below(psl, p) != 0)
		return NULL;
	if (!(pat = pattern_of(p, v[0].pk, 1)))
		*err = 1;
	return pat;
}

/* The folds (into folds, sorted: one per group, so unique), each name's
 * (v[i].cand), and the patterns of the proposal (into pats, sorted,
 * unique): the exact names, or with apply their folds in their place
 * (v[i].fold).  v sorted by name and port key on return. */
static int patterns(const struct psl *psl, struct pname *v, size_t n, int apply,
		    struct strs *pats, struct strs *folds)
{
	size_t i, j;
	int err = 0;

	for (i = 0; i < n; i++) {
		const char *r = psl ? psl_registrable(psl, v[i].name) : NULL;

		v[i].reg = r && r != v[i].name ? r : NULL;
		v[i].cand = v[i].fold = NULL;
	}
	/* the names below a registrable domain first, grouped (reg NULL last) */
	for (i = 0, j = n; i < j;)
		if (v[i].reg) {
			i++;
		} else {
			struct pname t = v[i];

			v[i] = v[--j];
			v[j] = t;
		}
	qsort(v, j, sizeof *v, group_cmp);
	for (i = 0; i < j;) {
		size_t k = i + 1;
		char *pat;

		while (k < j && !strcmp(v[k].reg, v[i].reg) && v[k].pk == v[i].pk)
			k++;
		if ((pat = fold_of(psl, v + i, k - i, &err))) {
			if (add_str(folds, pat) < 0 || (apply && add_str(pats, strdup(pat)) < 0))
				return -1;
			for (size_t m = i; m < k; m++) {
				v[m].cand = pat;
				v[m].fold = apply ? pat : NULL;
			}
		}
		if (err)
			return -1;
		i = k;
	}
	for (i = 0; i < n; i++)
		if (!v[i].fold && add_str(pats, pattern_of(v[i].name, v[i].pk, 0)) < 0)
			return -1;
	qsort(v, n, sizeof *v, pname_cmp);
	uniq(pats);
	if (folds->n) /* the strings stay where v[].cand points */
		qsort(folds->v, folds->n, sizeof *folds->v, str_cmp);
	return 0;
}

static long find(const struct strs *pats, const char *key)
{
	char *const *hit = pats->n ? bsearch(&key, pats->v, pats->n, sizeof *pats->v, str_cmp) : NULL;

	return hit ? (long)(hit - pats->v) : -1;
}

/* The name of v that serves f: its name at its port key; a dns flow (no
 * port): its name at ports 80/443, else at any port (the first: names
 * sorted by name and port key, 0 first).  -1: none (no flow through the
 * proxy went to the name). */
static long locate(const struct pname *v, size_t n, const struct pflow *f)
{
	unsigned pk = f->port == 80 || f->port == 443 ? 0 : f->port;
	size_t a = 0, b = n;

	/* the lower bound of (name, pk; a dns flow: 0) */
	while (a < b) {
		size_t m = a + (b - a) / 2;
		int c = strcmp(v[m].name, f->name);

		if (c < 0 || (!c && f->kind[0] != 'd' && v[m].pk < pk))
			a = m + 1;
		else
			b = m;
	}
	if (a == n || strcmp(v[a].name, f->name) || (f->kind[0] != 'd' && v[a].pk != pk))
		return -1;
	return (long)a;
}

/* The entry covering the name v (-1: none). */
static long cover(const struct strs *pats, const struct pname *v)
{
	char key[ALLOW_PATTERN_MAX];

	if (!v)
		return -1;
	if (v->fold)
		return find(pats, v->fold);
	snprintf(key, sizeof key, v->pk ? "%s:%u" : "%s", v->name, v->pk);
	return find(pats, key);
}

static json_t *flow_json(const struct pflow *f)
{
	return json_pack("{s:s, s:s, s:i, s:I}", "kind", f->kind, "name", f->name, "port",
			 (int)f->port, "count", (json_int_t)f->count);
}

static json_t *unservable(const struct pflow *f)
{
	json_t *o = flow_json(f);
	const char *why;

	if (f->kind[0] != 'd')
		why = "to an IP address: filtered serves names only";
	else if (!f->valid)
		why = "an address, not a host name: filtered refuses the query";
	else
		why = "resolved, and no flow through the proxy went to it: another protocol, or a "
		      "client that ignores http_proxy/https_proxy (filtered cannot serve it)";
	if (o)
		json_object_set_new(o, "why", json_string(why));
	return o;
}

/* A candidate for a capped list: its weight (the count of the flows it
 * stands for), the bytes of its name or pattern, its place in the list. */
struct weigh {
	long long w;
	size_t len, i;
};

static int weigh_cmp(const void *pa, const void *pb)
{
	const struct weigh *a = pa, *b = pb;

	if (a->w != b->w)
		return a->w > b->w ? -1 : 1;
	return (a->i > b->i) - (a->i < b->i);
}

/* The guest chooses how many names a ledger holds (each name it looks up
 * is one), and a proposal must stay small enough for its readers (people,
 * jq over a run's result): of a list's n candidates v, the heaviest first
 * are kept (keep[i] = 1) while the list holds fewer than PROPOSE_LIST_MAX
 * and their names fit in PROPOSE_NAMES_BYTES; *omitted says how many were
 * left out ({what: N, count: their weight}), or stays NULL: none were. */
static int cap(struct weigh *v, size_t n, char *keep, const char *what, json_t **omitted)
{
	size_t kept = 0, bytes = 0;
	long long gone = 0, w = 0;

	qsort(v, n, sizeof *v, weigh_cmp);
	for (size_t i = 0; i < n; i++) {
		if (kept < PROPOSE_LIST_MAX && v[i].len <= PROPOSE_NAMES_BYTES - bytes) {
			keep[v[i].i] = 1;
			kept++;
			bytes += v[i].len;
		} else {
			gone++;
			w += v[i].w;
		}
	}
	*omitted = NULL;
	if (gone && !(*omitted = json_pack("{s:I, s:I}", what, (json_int_t)gone, "count",
					   (json_int_t)w)))
		return -1;
	return 0;
}

/* Which patterns and which unservable flows the proposal keeps (cap):
 * keep_pat[pats->n], keep_flow[l->n] (an unservable flow's own; a covered
 * flow goes with its entry), and what was left out of each. */
static int keep_of(const struct plist *l, const struct strs *pats, char *keep_pat,
		   char *keep_flow, json_t **pat_gone, json_t **flow_gone)
{
	struct weigh *pw = calloc(pats->n + 1, sizeof *pw), *fw = calloc(l->n + 1, sizeof *fw);
	size_t i, nf = 0;
	int r = -1;

	if (!pw || !fw)
		goto out;
	for (i = 0; i < pats->n; i++)
		pw[i] = (struct weigh){ .len = strlen(pats->v[i]), .i = i };
	for (i = 0; i < l->n; i++) {
		const struct pflow *f = &l->v[i];

		if (f->entry >= 0)
			pw[f->entry].w += f->count;
		else
			fw[nf++] = (struct weigh){ .w = f->count, .len = strlen(f->name), .i = i };
	}
	if (cap(pw, pats->n, keep_pat, "entries", pat_gone) == 0 &&
	    cap(fw, nf, keep_flow, "flows", flow_gone) == 0)
		r = 0;
out:
	free(pw);
	free(fw);
	return r;
}

/* Each flow's entry and fold (l->v[i].entry, .cand), the entries'
 * patterns (pats), the folds (folds) and the names of each (fnames: one
 * array per fold, in name order): the names the succeeded connect/http
 * flows went to, distinct by name and port key, folded as patterns() says. */
static int entries(struct plist *l, const struct psl *psl, int apply, struct strs *pats,
		   struct strs *folds, json_t *fnames)
{
	struct pname *v = calloc(l->n + 1, sizeof *v);
	size_t n = 0, k = 0, i;
	int r = -1;

	if (!v)
		return -1;
	for (i = 0; i < l->n; i++) {
		const struct pflow *f = &l->v[i];

		if (f->kind[0] != 'd' && f->valid)
			v[n++] = (struct pname){ .name = f->name,
						 .pk = f->port == 80 || f->port == 443 ? 0 : f->port };
	}
	/* connect and http to one name, ports 80 and 443: one name each */
	if (n)
		qsort(v, n, sizeof *v, pname_cmp);
	for (i = 1; i < n; i++)
		if (pname_cmp(&v[k], &v[i]))
			v[++k] = v[i];
	n = n ? k + 1 : 0;
	if (patterns(psl, v, n, apply, pats, folds) < 0)
		goto out;
	for (i = 0; i < folds->n; i++)
		if (json_array_append_new(fnames, json_array()) < 0)
			goto out;
	for (i = 0; i < n; i++)
		if (v[i].cand && json_array_append_new(json_array_get(fnames, (size_t)find(folds, v[i].cand)),
						       json_string(v[i].name)) < 0)
			goto out;
	for (i = 0; i < l->n; i++) {
		struct pflow *f = &l->v[i];
		long a = f->valid ? locate(v, n, f) : -1;

		f->entry = cover(pats, a >= 0 ? &v[a] : NULL);
		f->cand = a >= 0 && v[a].cand ? find(folds, v[a].cand) : -1;
	}
	r = 0;
out:
	free(v);
	return r;
}

/* What the fold pat ("*.P" or "*.P:PORT") of n names grants beyond them. */
static json_t *widens(const char *pat, size_t n)
{
	const char *p = pat + 2, *colon = strchr(p, ':');
	int len = colon ? (int)(colon - p) : (int)strlen(p);

	return json_sprintf("every name below %.*s (%s%s), not only the %zu seen: any its owner "
			    "adds later, and anyone's if %.*s is shared hosting the public suffix "
			    "list does not name (Debian's lacks blob.core.windows.net, on.aws)",
			    len, p, colon ? "port " : "ports 80 and 443", colon ? colon + 1 : "", n,
			    len, p);
}

/* The "folds" of the proposal (see propose.h), capped as the other lists
 * (*gone: what was left out); NULL when out of memory. */
static json_t *folds_json(const struct plist *l, const struct strs *folds, const json_t *fnames,
			  json_t **gone)
{
	struct weigh *w = calloc(folds->n + 1, sizeof *w);
	char *keep = calloc(folds->n + 1, 1);
	json_t *out = json_array(), *o;
	size_t i, j;

	*gone = NULL;
	if (!w || !keep || !out)
		goto fail;
	for (i = 0; i < folds->n; i++) {
		const json_t *names = json_array_get(fnames, i);

		w[i] = (struct weigh){ .len = strlen(folds->v[i]), .i = i };
		for (j = 0; j < json_array_size(names) && j < PROPOSE_FOLD_NAMES; j++)
			w[i].len += strlen(json_string_value(json_array_get(names, j)));
	}
	for (i = 0; i < l->n; i++)
		if (l->v[i].cand >= 0)
			w[l->v[i].cand].w += l->v[i].count;
	if (cap(w, folds->n, keep, "folds", gone) < 0)
		goto fail;
	for (i = 0; i < folds->n; i++) {
		const json_t *names = json_array_get(fnames, i);
		size_t nn = json_array_size(names);

		if (!keep[i])
			continue;
		o = json_pack("{s:s, s:[], s:o}", "pattern", folds->v[i], "names", "widens",
			      widens(folds->v[i], nn));
		if (!o || json_array_append_new(out, o) < 0)
			goto fail;
		for (j = 0; j < nn && j < PROPOSE_FOLD_NAMES; j++)
			if (json_array_append(json_object_get(o, "names"), json_array_get(names, j)) < 0)
				goto fail;
		if (nn > PROPOSE_FOLD_NAMES &&
		    json_object_set_new(o, "names_omitted", json_integer((json_int_t)(nn - PROPOSE_FOLD_NAMES))) < 0)
			goto fail;
	}
	free(w);
	free(keep);
	return out;
fail:
	free(w);
	free(keep);
	json_decref(out);
	json_decref(*gone);
	*gone = NULL;
	return NULL;
}

/* What found the folds: the list's rule count and the fold's threshold,
 * and whether they are in "allow"; or why there is none (no list: never a
 * fold without one). */
static json_t *fold_json(const struct psl *psl, const char *no_psl, int apply)
{
	if (psl)
		return json_pack("{s:I, s:i, s:b}", "public_suffixes", (json_int_t)psl_rules(psl),
				 "min_names", PROPOSE_FOLD_MIN, "applied", apply);
	return json_pack("{s:n, s:s, s:b}", "public_suffixes", "why",
			 no_psl ? no_psl : "no public suffix list: no name folded", "applied", 0);
}

/* The proposal of the merged flows (see propose.h).  A fold needs the
 * public suffix list: "*.PARENT" over three shards, by a rule of labels,
 * read well until a review found the parents it cannot tell apart:
 * github.io, cloudfront.net, co.uk are public suffixes, where anyone may
 * register a host, so a folded "*.github.io" would let a later filtered
 * run reach an attacker's.  Without the list, no fold.  With it, a later
 * review found the parents the list lacks (blob.core.windows.net, on.aws):
 * so the folds are only reported beside "allow", and go into it only when
 * apply asks (doc/DECISIONS.md). */
static json_t *build(struct plist *l, const struct tally *t, const struct psl *psl,
		     const char *no_psl, int apply)
{
	struct strs pats = { .n = 0 }, folds = { .n = 0 };
	json_t *allow = json_array(), *un = json_array(), *out = NULL, **ent = NULL;
	json_t *pat_gone = NULL, *flow_gone = NULL, *fold_gone = NULL, *fnames = json_array();
	json_t *fl = NULL;
	char *keep_pat = NULL, *keep_flow = NULL;
	size_t i;

	if (!fnames || entries(l, psl, apply, &pats, &folds, fnames) < 0 ||
	    !(fl = folds_json(l, &folds, fnames, &fold_gone)))
		goto out;
	if (!allow || !un || !(ent = calloc(pats.n + 1, sizeof *ent)) ||
	    !(keep_pat = calloc(pats.n + 1, 1)) || !(keep_flow = calloc(l->n + 1, 1)) ||
	    keep_of(l, &pats, keep_pat, keep_flow, &pat_gone, &flow_gone) < 0)
		goto out;
	for (i = 0; i < pats.n; i++) {
		if (!keep_pat[i])
			continue;
		ent[i] = json_pack("{s:s, s:[]}", "pattern", pats.v[i], "flows");
		if (!ent[i] || json_array_append_new(allow, ent[i]) < 0)
			goto out;
	}
	for (i = 0; i < l->n; i++) {
		const struct pflow *f = &l->v[i];

		if (f->entry >= 0 ? keep_pat[f->entry] &&
					    json_array_append_new(json_object_get(ent[f->entry], "flows"),
								  flow_json(f))
				  : keep_flow[i] && json_array_append_new(un, unservable(f)))
			goto out;
	}
	out = json_pack("{s:O, s:O, s:O, s:I, s:I, s:I, s:I, s:o}", "allow", allow, "folds", fl,
			"unservable", un, "lines", (json_int_t)t->lines, "skipped",
			(json_int_t)t->skipped, "not_succeeded", (json_int_t)t->failed, "not_names",
			(json_int_t)t->not_names, "fold", fold_json(psl, no_psl, apply));
	if (out && ((pat_gone && json_object_set(out, "allow_omitted", pat_gone) < 0) ||
		    (flow_gone && json_object_set(out, "unservable_omitted", flow_gone) < 0) ||
		    (fold_gone && json_object_set(out, "folds_omitted", fold_gone) < 0))) {
		json_decref(out);
		out = NULL;
	}
out:
	free(ent);
	free(keep_pat);
	free(keep_flow);
	json_decref(pat_gone);
	json_decref(flow_gone);
	json_decref(fold_gone);
	json_decref(fl);
	json_decref(fnames);
	json_decref(allow);
	json_decref(un);
	strs_free(&pats);
	strs_free(&folds);
	return out;
}

json_t *propose_ledger(const char *buf, size_t n, const struct psl *psl, const char *no_psl,
		       int fold)
{
	struct plist l = { .n = 0 };
	struct tally t = { .lines = 0 };
	json_t *out = NULL;
	size_t i = 0;

	while (i < n) {
		const char *nl = memchr(buf + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (buf + i)) : n - i;
		struct pflow f;
		int r;

		if (len) {
			t.lines++;
			r = read_line(buf + i, len, &f);
			if (r == -2 || (r == 1 && push(&l, &f) < 0)) {
				if (r == 1)
					free(f.name);
				goto out;
			}
			t.skipped += r == -1;
			t.failed += r == 2;
			t.not_names += r == 3;
		}
		i += len + 1;
	}
	merge(&l);
	out = build(&l, &t, psl, no_psl, fold);
out:
	for (i = 0; i < l.n; i++)
		free(l.v[i].name);
	free(l.v);
	return out;
}

json_t *propose_path(const char *path, const struct psl *psl, const char *no_psl, int fold,
		     const char **why)
{
	/* O_NONBLOCK: a FIFO in the ledger's place must not hang the reader
	 * before fstat can refuse it */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	size_t got = 0;
	char *buf = NULL;
	json_t *out = NULL;

	*why = "unable to read it";
	if (fd < 0 || fstat(fd, &st) < 0)
		goto out;
	if (!S_ISREG(st.st_mode) || st.st_size > PROPOSE_READ_MAX) {
		*why = S_ISREG(st.st_mode) ? "larger than 1 GiB" : "not a regular file";
		errno = 0;
		goto out;
	}
	/* a ledger still being appended to: what was there at fstat; short
	 * only at its end (kept) or at a read error (refused) */
	errno = 0;
	if (!(buf = fd_text(fd, (size_t)st.st_size, &got)))
		goto nomem;
	if (got < (size_t)st.st_size && errno)
		goto out;
	if ((out = propose_ledger(buf, got, psl, no_psl, fold)))
		goto out;
nomem:
	*why = "out of memory";
	errno = ENOMEM;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return out;
}
