/* ruleset.c - isopod's live nftables tables, canonically (see ruleset.h). */
#include "ruleset.h"

#include <errno.h>
#include <inttypes.h>
#include <libmnl/libmnl.h>
#include <stdarg.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/flowtable.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *fam_name(uint32_t f, char buf[16])
{
	switch (f) {
	case NFPROTO_INET: return "inet";
	case NFPROTO_IPV4: return "ip";
	case NFPROTO_IPV6: return "ip6";
	case NFPROTO_ARP: return "arp";
	case NFPROTO_BRIDGE: return "bridge";
	case NFPROTO_NETDEV: return "netdev";
	default:
		snprintf(buf, 16, "family-%" PRIu32, f);
		return buf;
	}
}

/* Append one line.  key and text are taken over (freed on failure). */
static int add(struct canon *c, char *key, char *text)
{
	if (!key || !text)
		goto fail;
	if (c->n == c->cap) {
		size_t cap = c->cap ? 2 * c->cap : 64;
		struct canon_line *v = realloc(c->v, cap * sizeof *v);

		if (!v)
			goto fail;
		c->v = v, c->cap = cap;
	}
	c->v[c->n] = (struct canon_line){ .key = key, .seq = (unsigned)c->n, .text = text };
	c->n++;
	return 0;
fail:
	free(key);
	free(text);
	errno = ENOMEM;
	return -1;
}

/* Close m, the memstream over *text, and append its text under key (both
 * taken over). */
static int add_stream(struct canon *c, FILE *m, char **text, char *key)
{
	if (fclose(m) != 0) {
		free(*text);
		free(key);
		return -1;
	}
	return add(c, key, *text);
}

static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&s, fmt, ap);
	va_end(ap);
	return r < 0 ? NULL : s;
}

static void put_devices(FILE *m, const char *const *devs);

/* isopod's tables, and every netdev table: an ingress/egress hook on a
 * device can redirect (fwd) or drop a VM's traffic before isopod's tables
 * see it.  Other tables (Docker's, the distribution's) change under other
 * tools; of those only the base chains' headers count (canon_chain). */
int canon_covered(uint32_t family, const char *table)
{
	return table && (!strcmp(table, RULESET_TABLE) || family == NFPROTO_NETDEV);
}

/* Keys sort as: family, table, kind (0 table, 1 chain, 2 rule, 3 set,
 * 4 object, 5 flowtable), name.
 * \x01 separates: it cannot occur in a kernel object's name. */
int canon_table(struct canon *c, const struct nftnl_table *t)
{
	const char *name = nftnl_table_get_str(t, NFTNL_TABLE_NAME);
	uint32_t f = nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY);
	char fb[16];
	const char *fam = fam_name(f, fb);

	if (!name || !canon_covered(f, name))
		return 0;
	if (!strcmp(name, RULESET_TABLE))
		c->tables++;
	/* flags: a dormant table enforces nothing, so they count. */
	return add(c, strf("%s\x01%s\x01" "0", fam, name),
		   strf("table %s %s flags %" PRIu32, fam, name,
			nftnl_table_is_set(t, NFTNL_TABLE_FLAGS) ?
				nftnl_table_get_u32(t, NFTNL_TABLE_FLAGS) : 0));
}

int canon_chain(struct canon *c, const struct nftnl_chain *ch)
{
	const char *table = nftnl_chain_get_str(ch, NFTNL_CHAIN_TABLE);
	const char *name = nftnl_chain_get_str(ch, NFTNL_CHAIN_NAME);
	char fb[16], *text = NULL;
	const char *fam = fam_name(nftnl_chain_get_u32(ch, NFTNL_CHAIN_FAMILY), fb);
	const char *const *devs;
	size_t sz = 0;
	FILE *m;

	if (!table || !name)
		return 0;
	/* Another table's base chain: its header (a new hook, priority or
	 * policy), not its rules, so Docker's rule churn leaves the digest be. */
	if (!canon_covered(nftnl_chain_get_u32(ch, NFTNL_CHAIN_FAMILY), table) &&
	    !nftnl_chain_is_set(ch, NFTNL_CHAIN_HOOKNUM))
		return 0;
	if (!(m = open_memstream(&text, &sz)))
		return -1;
	fprintf(m, "chain %s %s %s", fam, table, name);
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_TYPE))
		fprintf(m, " type %s", nftnl_chain_get_str(ch, NFTNL_CHAIN_TYPE));
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_HOOKNUM))
		fprintf(m, " hook %" PRIu32, nftnl_chain_get_u32(ch, NFTNL_CHAIN_HOOKNUM));
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_PRIO))
		fprintf(m, " prio %" PRId32, nftnl_chain_get_s32(ch, NFTNL_CHAIN_PRIO));
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_POLICY))
		fprintf(m, " policy %" PRIu32, nftnl_chain_get_u32(ch, NFTNL_CHAIN_POLICY));
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_DEV))
		fprintf(m, " dev %s", nftnl_chain_get_str(ch, NFTNL_CHAIN_DEV));
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_DEVICES) &&
	    (devs = nftnl_chain_get_array(ch, NFTNL_CHAIN_DEVICES)))
		put_devices(m, devs);
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_FLAGS))
		fprintf(m, " flags %" PRIu32, nftnl_chain_get_u32(ch, NFTNL_CHAIN_FLAGS));
	return add_stream(c, m, &text, strf("%s\x01%s\x01" "1%s", fam, table, name));
}

static void hexf(FILE *m, const void *p, uint32_t n)
{
	const unsigned char *b = p;
	uint32_t i;

	for (i = 0; i < n; i++)
		fprintf(m, "%02x", b[i]);
}

static const char *anon_text(const struct canon *c, const char *scope, const char *set)
{
	size_t i, l = strlen(scope);

	for (i = 0; set && i < c->nanon; i++)
		if (!strncmp(c->anon[i].scope, scope, l) && !strcmp(c->anon[i].scope + l, set))
			return c->anon[i].text;
	return NULL;
}

static void put_expr(FILE *m, const struct canon *c, const char *scope, const struct nftnl_expr *e)
{
	const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
	const char *set = NULL, *anon, *at;
	char buf[4096];
	uint32_t n;
	const void *p;

	/* A counter's values change with every packet: its presence is the
	 * policy (the doctor reads it as evidence), its numbers are not. */
	if (name && !strcmp(name, "counter")) {
		fputs(" [ counter ]", m);
		return;
	}
	if (nftnl_expr_snprintf(buf, sizeof buf, e, NFTNL_OUTPUT_DEFAULT, 0) < 0)
		buf[0] = 0;
	/* An anonymous set's name is the kernel's pick: its contents stand in. */
	if (name && !strcmp(name, "lookup"))
		set = nftnl_expr_get_str(e, NFTNL_EXPR_LOOKUP_SET);
	else if (name && !strcmp(name, "dynset"))
		set = nftnl_expr_get_str(e, NFTNL_EXPR_DYNSET_SET_NAME);
	if ((anon = anon_text(c, scope, set)) && (at = strstr(buf, set))) {
		fprintf(m, " [ %s %.*s%s%s ]", name, (int)(at - buf), buf, anon, at + strlen(set));
		return;
	}
	fprintf(m, " [ %s %s ]", name ? name : "?", buf);
	/* xt match/target: the text names them only; their info is the rule. */
	if (name && !strcmp(name, "match") && (p = nftnl_expr_get(e, NFTNL_EXPR_MT_INFO, &n))) {
		fputs(" info ", m);
		hexf(m, p, n);
	}
	if (name && !strcmp(name, "target") && (p = nftnl_expr_get(e, NFTNL_EXPR_TG_INFO, &n))) {
		fputs(" info ", m);
		hexf(m, p, n);
	}
}

int canon_rule(struct canon *c, const struct nftnl_rule *r)
{
	const char *table = nftnl_rule_get_str(r, NFTNL_RULE_TABLE);
	const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
	char fb[16], *text = NULL, *scope;
	const char *fam = fam_name(nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY), fb);
	struct nftnl_expr_iter *it;
	struct nftnl_expr *e;
	size_t sz = 0;
	uint32_t n;
	const void *p;
	FILE *m;

	if (!table || !chain || !canon_covered(nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY), table))
		return 0;
	if (!(scope = strf("%s\x01%s\x01", fam, table)))
		return -1;
	if (!(m = open_memstream(&text, &sz))) {
		free(scope);
		return -1;
	}
	fprintf(m, "rule %s %s %s", fam, table, chain);
	if (nftnl_rule_is_set(r, NFTNL_RULE_COMPAT_PROTO))
		fprintf(m, " compat %" PRIu32 "/%" PRIu32,
			nftnl_rule_get_u32(r, NFTNL_RULE_COMPAT_PROTO),
			nftnl_rule_get_u32(r, NFTNL_RULE_COMPAT_FLAGS));
	if ((it = nftnl_expr_iter_create(r))) {
		while ((e = nftnl_expr_iter_next(it)))
			put_expr(m, c, scope, e);
		nftnl_expr_iter_destroy(it);
		free(scope);
	} else {
		fclose(m);
		free(text);
		free(scope);
		errno = ENOMEM;
		return -1;
	}
	/* Comments (userdata) are kept: tools find their rules by them. */
	if ((p = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &n)) && n) {
		fputs(" udata ", m);
		hexf(m, p, n);
	}
	return add_stream(c, m, &text, strf("%s\x01%s\x01" "2%s", fam, table, chain));
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A device list, sorted: the kernel keeps them in no promised order. */
static void put_devices(FILE *m, const char *const *devs)
{
	const char *v[256];
	size_t n = 0, i;

	while (devs[n] && n < sizeof v / sizeof *v)
		v[n] = devs[n], n++;
	qsort(v, n, sizeof *v, str_cmp);
	fputs(" devices", m);
	for (i = 0; i < n; i++)
		fprintf(m, " %s", v[i]);
}

static char *elem_text(struct nftnl_set_elem *e)
{
	char *text = NULL;
	size_t sz = 0;
	uint32_t n;
	const void *p;
	FILE *m = open_memstream(&text, &sz);

	if (!m)
		return NULL;
	fputs("elem", m);
	if ((p = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &n)) && n)
		fputs(" key ", m), hexf(m, p, n);
	if ((p = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY_END, &n)) && n)
		fputs(" key_end ", m), hexf(m, p, n);
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_FLAGS))
		fprintf(m, " flags %" PRIu32, nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_FLAGS));
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_VERDICT))
		fprintf(m, " verdict %" PRId32, (int32_t)nftnl_set_elem_get_u32(e, NFTNL_SET_ELEM_VERDICT));
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN))
		fprintf(m, " chain %s", (const char *)nftnl_set_elem_get(e, NFTNL_SET_ELEM_CHAIN, &n));
	if ((p = nftnl_set_elem_get(e, NFTNL_SET_ELEM_DATA, &n)) && n)
		fputs(" data ", m), hexf(m, p, n);
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_OBJREF))
		fprintf(m, " obj %s", (const char *)nftnl_set_elem_get(e, NFTNL_SET_ELEM_OBJREF, &n));
	if (nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_TIMEOUT))
		fprintf(m, " timeout %" PRIu64, nftnl_set_elem_get_u64(e, NFTNL_SET_ELEM_TIMEOUT));
	if ((p = nftnl_set_elem_get(e, NFTNL_SET_ELEM_USERDATA, &n)) && n)
		fputs(" udata ", m), hexf(m, p, n);
	if (fclose(m) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

int canon_set(struct canon *c, const struct nftnl_set *s)
{
	const char *table = nftnl_set_get_str(s, NFTNL_SET_TABLE);
	const char *name = nftnl_set_get_str(s, NFTNL_SET_NAME);
	uint32_t f = nftnl_set_get_u32(s, NFTNL_SET_FAMILY), flags, n;
	char fb[16], *text = NULL, **ev = NULL, **nv;
	const char *fam = fam_name(f, fb);
	struct nftnl_set_elems_iter *it;
	struct nftnl_set_elem *e;
	size_t ne = 0, cap = 0, i, sz = 0;
	const void *p;
	FILE *m;
	int r = -1;

	if (!table || !name || !canon_covered(f, table))
		return 0;
	flags = nftnl_set_is_set(s, NFTNL_SET_FLAGS) ? nftnl_set_get_u32(s, NFTNL_SET_FLAGS) : 0;
	if (!(it = nftnl_set_elems_iter_create(s)))
		goto out;
	while ((e = nftnl_set_elems_iter_next(it))) {
		if (ne == cap) {
			cap = cap ? 2 * cap : 16;
			if (!(nv = realloc(ev, cap * sizeof *ev)))
				break;
			ev = nv;
		}
		if (!(ev[ne] = elem_text(e)))
			break;
		ne++;
	}
	nftnl_set_elems_iter_destroy(it);
	if (e)
		goto out;
	if (ne)
		qsort(ev, ne, sizeof *ev, str_cmp);
	if (!(m = open_memstream(&text, &sz)))
		goto out;
	if (flags & NFT_SET_ANONYMOUS)
		fputs("{", m);
	else
		fprintf(m, "set %s %s %s", fam, table, name);
	fprintf(m, " flags %" PRIu32, flags);
	if (nftnl_set_is_set(s, NFTNL_SET_KEY_TYPE))
		fprintf(m, " key %" PRIu32 "/%" PRIu32, nftnl_set_get_u32(s, NFTNL_SET_KEY_TYPE),
			nftnl_set_get_u32(s, NFTNL_SET_KEY_LEN));
	if (nftnl_set_is_set(s, NFTNL_SET_DATA_TYPE))
		fprintf(m, " data %" PRIu32 "/%" PRIu32, nftnl_set_get_u32(s, NFTNL_SET_DATA_TYPE),
			nftnl_set_get_u32(s, NFTNL_SET_DATA_LEN));
	if (nftnl_set_is_set(s, NFTNL_SET_OBJ_TYPE))
		fprintf(m, " objtype %" PRIu32, nftnl_set_get_u32(s, NFTNL_SET_OBJ_TYPE));
	if (nftnl_set_is_set(s, NFTNL_SET_TIMEOUT))
		fprintf(m, " timeout %" PRIu64, nftnl_set_get_u64(s, NFTNL_SET_TIMEOUT));
	if ((p = nftnl_set_get_data(s, NFTNL_SET_USERDATA, &n)) && n)
		fputs(" udata ", m), hexf(m, p, n);
	fputs(" elements", m);
	for (i = 0; i < ne; i++)
		fprintf(m, "%s %s", i ? ";" : "", ev[i]);
	if (flags & NFT_SET_ANONYMOUS)
		fputs(" }", m);
	if (fclose(m) != 0) {
		free(text);
		goto out;
	}
	if (flags & NFT_SET_ANONYMOUS) {
		struct canon_anon *av = realloc(c->anon, (c->nanon + 1) * sizeof *av);
		char *scope = strf("%s\x01%s\x01%s", fam, table, name);

		if (!av || !scope) {
			if (av)
				c->anon = av;
			free(scope);
			free(text);
			goto out;
		}
		c->anon = av;
		c->anon[c->nanon++] = (struct canon_anon){ .scope = scope, .text = text };
		r = 0;
	} else {
		r = add(c, strf("%s\x01%s\x01" "3%s", fam, table, name), text);
	}
out:
	for (i = 0; i < ne; i++)
		free(ev[i]);
	free(ev);
	if (r < 0)
		errno = ENOMEM;
	return r;
}

/* The stream for the line of a named thing of a covered table (family
 * f), over *text: NULL with *rc 0 when there is nothing to add (no table,
 * no name, a table not covered), NULL with *rc -1 when out of memory. */
static FILE *covered_line(uint32_t f, const char *table, const char *name, char **text,
			  size_t *sz, int *rc)
{
	FILE *m = NULL;

	*rc = 0;
	if (table && name && canon_covered(f, table) && !(m = open_memstream(text, sz)))
		*rc = -1;
	return m;
}

int canon_obj(struct canon *c, struct nftnl_obj *o)
{
	const char *table = nftnl_obj_get_str(o, NFTNL_OBJ_TABLE);
	const char *name = nftnl_obj_get_str(o, NFTNL_OBJ_NAME);
	uint32_t f = nftnl_obj_get_u32(o, NFTNL_OBJ_FAMILY), type = nftnl_obj_get_u32(o, NFTNL_OBJ_TYPE), n;
	char fb[16], buf[4096], *text = NULL;
	const char *fam = fam_name(f, fb);
	const void *p;
	size_t sz = 0;
	FILE *m;
	int rc;

	if (!(m = covered_line(f, table, name, &text, &sz, &rc)))
		return rc;
	fprintf(m, "object %s %s %s type %" PRIu32, fam, table, name, type);
	/* A counter's values and a quota's consumption move with traffic. */
	if (type == NFT_OBJECT_QUOTA)
		fprintf(m, " bytes %" PRIu64 " flags %" PRIu32,
			nftnl_obj_get_u64(o, NFTNL_OBJ_QUOTA_BYTES), nftnl_obj_get_u32(o, NFTNL_OBJ_QUOTA_FLAGS));
	else if (type != NFT_OBJECT_COUNTER &&
		 nftnl_obj_snprintf(buf, sizeof buf, o, NFTNL_OUTPUT_DEFAULT, 0) >= 0)
		fprintf(m, " %s", buf);
	if ((p = nftnl_obj_get_data(o, NFTNL_OBJ_USERDATA, &n)) && n)
		fputs(" udata ", m), hexf(m, p, n);
	return add_stream(c, m, &text, strf("%s\x01%s\x01" "4%s", fam, table, name));
}

int canon_flowtable(struct canon *c, const struct nftnl_flowtable *ft)
{
	const char *table = nftnl_flowtable_get_str(ft, NFTNL_FLOWTABLE_TABLE);
	const char *name = nftnl_flowtable_get_str(ft, NFTNL_FLOWTABLE_NAME);
	uint32_t f = nftnl_flowtable_get_u32(ft, NFTNL_FLOWTABLE_FAMILY);
	char fb[16], *text = NULL;
	const char *fam = fam_name(f, fb);
	const char *const *devs;
	size_t sz = 0;
	FILE *m;
	int rc;

	if (!(m = covered_line(f, table, name, &text, &sz, &rc)))
		return rc;
	fprintf(m, "flowtable %s %s %s hook %" PRIu32 " prio %" PRId32 " flags %" PRIu32, fam, table,
		name, nftnl_flowtable_get_u32(ft, NFTNL_FLOWTABLE_HOOKNUM),
		nftnl_flowtable_get_s32(ft, NFTNL_FLOWTABLE_PRIO),
		nftnl_flowtable_get_u32(ft, NFTNL_FLOWTABLE_FLAGS));
	if ((devs = nftnl_flowtable_get_array(ft, NFTNL_FLOWTABLE_DEVICES)))
		put_devices(m, devs);
	return add_stream(c, m, &text, strf("%s\x01%s\x01" "5%s", fam, table, name));
}

static int line_cmp(const void *a, const void *b)
{
	const struct canon_line *x = a, *y = b;
	int d = strcmp(x->key, y->key);

	return d ? d : (x->seq > y->seq) - (x->seq < y->seq);
}

char *canon_text(struct canon *c, size_t *len)
{
	char *text = NULL;
	size_t i, sz = 0;
	FILE *m;

	if (c->n)
		qsort(c->v, c->n, sizeof *c->v, line_cmp);
	if (!(m = open_memstream(&text, &sz)))
		return NULL;
	for (i = 0; i < c->n; i++)
		fprintf(m, "%s\n", c->v[i].text);
	if (fclose(m) != 0) {
		free(text);
		return NULL;
	}
	*len = sz;
	return text;
}

void canon_free(struct canon *c)
{
	size_t i;

	for (i = 0; i < c->n; i++) {
		free(c->v[i].key);
		free(c->v[i].text);
	}
	free(c->v);
	for (i = 0; i < c->nanon; i++) {
		free(c->anon[i].scope);
		free(c->anon[i].text);
	}
	free(c->anon);
	*c = (struct canon){ 0 };
}

/* ---- reading over netlink ---------------------------------------------- */

struct kind;

struct dump {
	struct canon *c;
	const struct kind *k; /* what is being dumped */
	int err;
	struct covered { uint32_t fam; char name[256]; } *tabs; /* tables covered whole */
	size_t ntabs;
	struct nftnl_set **sets; /* their sets, elements read into them */
	size_t nsets;
	struct nftnl_set *cur;   /* GETSETELEM: the set asked for */
	const struct covered *tab; /* GETRULE: the table asked for */
};

/* Kinds that are only canonicalised: parse one object of type T and hand
 * it to canon_T.  0, or -1 (errno). */
#define CANON_ONE(T)                                                          \
	static int parse_##T(struct dump *d, const struct nlmsghdr *nlh)     \
	{                                                                     \
		struct nftnl_##T *o = nftnl_##T##_alloc();                    \
		int r = -1;                                                   \
                                                                              \
		if (o && nftnl_##T##_nlmsg_parse(nlh, o) == 0)                \
			r = canon_##T(d->c, o);                               \
		nftnl_##T##_free(o);                                          \
		return r;                                                     \
	}
CANON_ONE(chain)
CANON_ONE(rule)
CANON_ONE(obj)
CANON_ONE(flowtable)

/* A table is canonicalised, and remembered when covered whole: its rules
 * are dumped per table (ruleset_read). */
static int parse_table(struct dump *d, const struct nlmsghdr *nlh)
{
	struct nftnl_table *t = nftnl_table_alloc();
	struct covered *v;
	int r = -1;

	if (t && nftnl_table_nlmsg_parse(nlh, t) == 0) {
		const char *name = nftnl_table_get_str(t, NFTNL_TABLE_NAME);
		uint32_t f = nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY);

		r = canon_table(d->c, t);
		if (!r && name && canon_covered(f, name)) {
			if (!(v = realloc(d->tabs, (d->ntabs + 1) * sizeof *v))) {
				r = -1;
			} else {
				d->tabs = v;
				v[d->ntabs].fam = f;
				snprintf(v[d->ntabs].name, sizeof v->name, "%s", name);
				d->ntabs++;
			}
		}
	}
	nftnl_table_free(t);
	return r;
}

/* A covered table's set is kept: its elements are dumped into it, then it
 * is canonicalised (ruleset_read). */
static int parse_set(struct dump *d, const struct nlmsghdr *nlh)
{
	struct nftnl_set *st = nftnl_set_alloc(), **v;
	int r = -1;

	if (st && nftnl_set_nlmsg_parse(nlh, st) == 0) {
		r = 0;
		if (canon_covered(nftnl_set_get_u32(st, NFTNL_SET_FAMILY),
				  nftnl_set_get_str(st, NFTNL_SET_TABLE))) {
			if (!(v = realloc(d->sets, (d->nsets + 1) * sizeof *v))) {
				r = -1;
			} else {
				d->sets = v;
				v[d->nsets++] = st;
				st = NULL;
			}
		}
	}
	if (st)
		nftnl_set_free(st);
	return r;
}

static int parse_elems(struct dump *d, const struct nlmsghdr *nlh)
{
	return nftnl_set_elems_nlmsg_parse(nlh, d->cur) < 0 ? -1 : 0;
}

/* The requests that name what they ask for: a table's rules, a set's
 * elements.  0, or -1 (ENOMEM). */
static int ask_rules(struct dump *d, struct nlmsghdr *nlh)
{
	struct nftnl_rule *rr = nftnl_rule_alloc();

	if (!rr)
		return -1;
	nftnl_rule_set_str(rr, NFTNL_RULE_TABLE, d->tab->name);
	nftnl_rule_nlmsg_build_payload(nlh, rr);
	nftnl_rule_free(rr);
	return 0;
}

static int ask_elems(struct dump *d, struct nlmsghdr *nlh)
{
	nftnl_set_elems_nlmsg_build_payload(nlh, d->cur);
	return 0;
}

/* One row per kind of object, in the order ruleset_read dumps them: each
 * set's elements, then the set, before the rules, which name anonymous
 * sets by their contents; rules per covered table, since the kernel's rule
 * dump filtered by table name alone stops after the first table of that
 * name. */
struct kind {
	uint16_t msg;       /* NFT_MSG_GET* */
	const char *step;   /* "unable to <step>" when it fails */
	enum { ONCE, PER_SET, PER_TABLE } per;
	int (*parse)(struct dump *d, const struct nlmsghdr *nlh);
	int (*ask)(struct dump *d, struct nlmsghdr *nlh); /* NULL: everything */
};

static const struct kind kinds[] = {
	{ .msg = NFT_MSG_GETTABLE, .step = "dump the tables", .per = ONCE, .parse = parse_table },
	{ .msg = NFT_MSG_GETCHAIN, .step = "dump the chains", .per = ONCE, .parse = parse_chain },
	{ .msg = NFT_MSG_GETSET, .step = "dump the sets", .per = ONCE, .parse = parse_set },
	{ .msg = NFT_MSG_GETSETELEM, .step = "dump a set's elements", .per = PER_SET,
	  .parse = parse_elems, .ask = ask_elems },
	{ .msg = NFT_MSG_GETOBJ, .step = "dump the stateful objects", .per = ONCE,
	  .parse = parse_obj },
	{ .msg = NFT_MSG_GETFLOWTABLE, .step = "dump the flowtables", .per = ONCE,
	  .parse = parse_flowtable },
	{ .msg = NFT_MSG_GETRULE, .step = "dump the rules", .per = PER_TABLE, .parse = parse_rule,
	  .ask = ask_rules },
};

static int dump_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dump *d = data;

	if (d->k->parse(d, nlh) < 0) {
		d->err = errno ? errno : EINVAL;
		return MNL_CB_ERROR;
	}
	return MNL_CB_OK;
}

/* One dump; rules of one covered table (d->tab), a set's elements (d->cur). */
static int dump(struct mnl_socket *nl, struct dump *d, uint16_t family, uint32_t *seq)
{
	size_t bsz = MNL_SOCKET_BUFFER_SIZE;
	char *buf = calloc(1, bsz);
	uint32_t portid = mnl_socket_get_portid(nl), s = (*seq)++;
	struct nlmsghdr *nlh;
	ssize_t n;
	int r, e;

	if (!buf)
		return -1;
	nlh = nftnl_nlmsg_build_hdr(buf, d->k->msg, family, NLM_F_DUMP, s);
	if (d->k->ask && d->k->ask(d, nlh) < 0)
		goto fail;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		goto fail;
	do {
		n = mnl_socket_recvfrom(nl, buf, bsz);
		if (n < 0)
			goto fail;
		r = mnl_cb_run(buf, (size_t)n, s, portid, dump_cb, d);
		if (r == MNL_CB_ERROR) {
			if (d->err)
				errno = d->err;
			goto fail;
		}
	} while (r > MNL_CB_STOP);
	free(buf);
	return 0;
fail:
	e = errno;
	free(buf);
	errno = e;
	return -1;
}

int ruleset_read(struct canon *c, char *why, size_t whysz)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	uint32_t seq = (uint32_t)time(NULL);
	struct dump d = { .c = c };
	const char *step = "open a netlink socket";
	const struct kind *k;
	size_t i, n;
	int r = -1;

	if (!nl)
		goto fail;
	step = "bind the netlink socket";
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	for (k = kinds; k < kinds + sizeof kinds / sizeof *kinds; k++) {
		step = k->step;
		d.k = k;
		n = k->per == PER_SET ? d.nsets : k->per == PER_TABLE ? d.ntabs : 1;
		for (i = 0; i < n; i++) {
			uint16_t fam = NFPROTO_UNSPEC;

			if (k->per == PER_SET) {
				d.cur = d.sets[i];
				fam = (uint16_t)nftnl_set_get_u32(d.cur, NFTNL_SET_FAMILY);
			} else if (k->per == PER_TABLE) {
				d.tab = &d.tabs[i];
				fam = (uint16_t)d.tab->fam;
			}
			if (dump(nl, &d, fam, &seq) < 0)
				goto fail;
			if (k->per == PER_SET && canon_set(c, d.cur) < 0)
				goto fail;
		}
	}
	r = 0;
fail:
	if (r < 0)
		snprintf(why, whysz, "unable to %s: %s", step, strerror(errno));
	if (nl)
		mnl_socket_close(nl);
	for (i = 0; i < d.nsets; i++)
		nftnl_set_free(d.sets[i]);
	free(d.sets);
	free(d.tabs);
	return r;
}

/* ---- the drop rules' counters (ruleset_drops) ---- */

struct drops_dump {
	struct ruleset_drop *v;
	size_t n;
	int err;
};

/* A rule of `inet isopod` with a counter and a drop verdict: kept. */
static int drop_rule(struct drops_dump *d, const struct nftnl_rule *r)
{
	struct nftnl_expr_iter *it = nftnl_expr_iter_create(r);
	struct nftnl_expr *e;
	uint64_t pk = 0;
	int ctr = 0, drop = 0;
	struct ruleset_drop *v;
	const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);

	if (!it)
		return -1;
	while ((e = nftnl_expr_iter_next(it))) {
		const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);

		if (name && !strcmp(name, "counter"))
			ctr = 1, pk = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS);
		else if (name && !strcmp(name, "immediate") &&
			 nftnl_expr_is_set(e, NFTNL_EXPR_IMM_VERDICT) &&
			 (int32_t)nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT) == NF_DROP)
			drop = 1;
	}
	nftnl_expr_iter_destroy(it);
	if (!ctr || !drop || !chain)
		return 0;
	if (!(v = realloc(d->v, (d->n + 1) * sizeof *v)))
		return -1;
	d->v = v;
	v[d->n] = (struct ruleset_drop){ .handle = nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE),
					 .packets = pk };
	snprintf(v[d->n].chain, sizeof v->chain, "%s", chain);
	d->n++;
	return 0;
}

static int drops_cb(const struct nlmsghdr *nlh, void *data)
{
	struct drops_dump *d = data;
	struct nftnl_rule *r = nftnl_rule_alloc();
	int bad = !r || nftnl_rule_nlmsg_parse(nlh, r) < 0 || drop_rule(d, r) < 0;

	if (r)
		nftnl_rule_free(r);
	if (bad) {
		d->err = errno ? errno : EINVAL;
		return MNL_CB_ERROR;
	}
	return MNL_CB_OK;
}

int ruleset_drops(struct ruleset_drop **out, size_t *n, char *why, size_t whysz)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	size_t bsz = MNL_SOCKET_BUFFER_SIZE;
	char *buf = calloc(1, bsz);
	uint32_t seq = (uint32_t)time(NULL), portid;
	struct drops_dump d = { 0 };
	struct nftnl_rule *rr = nftnl_rule_alloc();
	struct nlmsghdr *nlh;
	const char *step = "open a netlink socket";
	ssize_t k;
	int r = -1, cb;

	*out = NULL, *n = 0;
	if (!nl || !buf || !rr)
		goto fail;
	step = "bind the netlink socket";
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	portid = mnl_socket_get_portid(nl);
	step = "dump the rules";
	nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, seq);
	nftnl_rule_set_str(rr, NFTNL_RULE_TABLE, RULESET_TABLE);
	nftnl_rule_nlmsg_build_payload(nlh, rr);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		goto fail;
	do {
		if ((k = mnl_socket_recvfrom(nl, buf, bsz)) < 0)
			goto fail;
		cb = mnl_cb_run(buf, (size_t)k, seq, portid, drops_cb, &d);
		if (cb == MNL_CB_ERROR) {
			if (d.err)
				errno = d.err;
			goto fail;
		}
	} while (cb > MNL_CB_STOP);
	*out = d.v, *n = d.n;
	d.v = NULL;
	r = 0;
fail:
	if (r < 0)
		snprintf(why, whysz, "unable to %s: %s", step, strerror(errno));
	free(d.v);
	free(buf);
	if (rr)
		nftnl_rule_free(rr);
	if (nl)
		mnl_socket_close(nl);
	return r;
}
