/* ruleset.c - isopod's live nftables tables, canonically (see ruleset.h). */
#include "ruleset.h"

#include <errno.h>
#include <inttypes.h>
#include <libmnl/libmnl.h>
#include <stdarg.h>
#include <libnftnl/chain.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
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

/* Keys sort as: family, table, kind (0 table, 1 chain, 2 rule), chain.
 * \x01 separates: it cannot occur in a kernel object's name. */
int canon_table(struct canon *c, const struct nftnl_table *t)
{
	const char *name = nftnl_table_get_str(t, NFTNL_TABLE_NAME);
	uint32_t f = nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY);
	char fb[16];
	const char *fam = fam_name(f, fb);

	if (!name || strcmp(name, RULESET_TABLE))
		return 0;
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
	size_t sz = 0;
	FILE *m;

	if (!table || !name || strcmp(table, RULESET_TABLE))
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
	if (nftnl_chain_is_set(ch, NFTNL_CHAIN_FLAGS))
		fprintf(m, " flags %" PRIu32, nftnl_chain_get_u32(ch, NFTNL_CHAIN_FLAGS));
	if (fclose(m) != 0) {
		free(text);
		return -1;
	}
	return add(c, strf("%s\x01%s\x01" "1%s", fam, table, name), text);
}

static void hexf(FILE *m, const void *p, uint32_t n)
{
	const unsigned char *b = p;
	uint32_t i;

	for (i = 0; i < n; i++)
		fprintf(m, "%02x", b[i]);
}

static void put_expr(FILE *m, const struct nftnl_expr *e)
{
	const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
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
	char fb[16], *text = NULL;
	const char *fam = fam_name(nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY), fb);
	struct nftnl_expr_iter *it;
	struct nftnl_expr *e;
	size_t sz = 0;
	uint32_t n;
	const void *p;
	FILE *m;

	if (!table || !chain || strcmp(table, RULESET_TABLE))
		return 0;
	if (!(m = open_memstream(&text, &sz)))
		return -1;
	fprintf(m, "rule %s %s %s", fam, table, chain);
	if (nftnl_rule_is_set(r, NFTNL_RULE_COMPAT_PROTO))
		fprintf(m, " compat %" PRIu32 "/%" PRIu32,
			nftnl_rule_get_u32(r, NFTNL_RULE_COMPAT_PROTO),
			nftnl_rule_get_u32(r, NFTNL_RULE_COMPAT_FLAGS));
	if ((it = nftnl_expr_iter_create(r))) {
		while ((e = nftnl_expr_iter_next(it)))
			put_expr(m, e);
		nftnl_expr_iter_destroy(it);
	} else {
		fclose(m);
		free(text);
		errno = ENOMEM;
		return -1;
	}
	/* Comments (userdata) are kept: tools find their rules by them. */
	if ((p = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &n)) && n) {
		fputs(" udata ", m);
		hexf(m, p, n);
	}
	if (fclose(m) != 0) {
		free(text);
		return -1;
	}
	return add(c, strf("%s\x01%s\x01" "2%s", fam, table, chain), text);
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
	*c = (struct canon){ 0 };
}

/* ---- reading over netlink ---------------------------------------------- */

struct dump {
	struct canon *c;
	int kind; /* NFT_MSG_GETTABLE, GETCHAIN, GETRULE */
	int err;
	uint32_t *fams; /* tables found: their families */
	size_t nfams;
};

static int dump_cb(const struct nlmsghdr *nlh, void *data)
{
	struct dump *d = data;
	int r = -1;

	switch (d->kind) {
	case NFT_MSG_GETTABLE: {
		struct nftnl_table *t = nftnl_table_alloc();

		if (t && nftnl_table_nlmsg_parse(nlh, t) == 0) {
			const char *name = nftnl_table_get_str(t, NFTNL_TABLE_NAME);

			r = canon_table(d->c, t);
			if (!r && name && !strcmp(name, RULESET_TABLE) && d->nfams < 8)
				d->fams[d->nfams++] = nftnl_table_get_u32(t, NFTNL_TABLE_FAMILY);
		}
		nftnl_table_free(t);
		break;
	}
	case NFT_MSG_GETCHAIN: {
		struct nftnl_chain *ch = nftnl_chain_alloc();

		if (ch && nftnl_chain_nlmsg_parse(nlh, ch) == 0)
			r = canon_chain(d->c, ch);
		nftnl_chain_free(ch);
		break;
	}
	default: {
		struct nftnl_rule *ru = nftnl_rule_alloc();

		if (ru && nftnl_rule_nlmsg_parse(nlh, ru) == 0)
			r = canon_rule(d->c, ru);
		nftnl_rule_free(ru);
		break;
	}
	}
	if (r < 0) {
		d->err = errno ? errno : EINVAL;
		return MNL_CB_ERROR;
	}
	return MNL_CB_OK;
}

/* One dump; rules of table RULESET_TABLE of one family (the kernel's rule
 * dump filtered by table name stops after the first table of that name). */
static int dump(struct mnl_socket *nl, struct dump *d, uint16_t family, uint32_t *seq)
{
	size_t bsz = MNL_SOCKET_BUFFER_SIZE;
	char *buf = malloc(bsz);
	uint32_t portid = mnl_socket_get_portid(nl), s = (*seq)++;
	struct nlmsghdr *nlh;
	ssize_t n;
	int r, e;

	if (!buf)
		return -1;
	nlh = nftnl_nlmsg_build_hdr(buf, (uint16_t)d->kind, family, NLM_F_DUMP, s);
	if (d->kind == NFT_MSG_GETRULE) {
		struct nftnl_rule *rr = nftnl_rule_alloc();

		if (!rr)
			goto fail;
		nftnl_rule_set_str(rr, NFTNL_RULE_TABLE, RULESET_TABLE);
		nftnl_rule_nlmsg_build_payload(nlh, rr);
		nftnl_rule_free(rr);
	}
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
	uint32_t fams[8], seq = (uint32_t)time(NULL);
	struct dump d = { .c = c, .fams = fams };
	const char *step = "open a netlink socket";
	size_t i;

	if (!nl)
		goto fail;
	step = "bind the netlink socket";
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		goto fail;
	step = "dump the tables";
	d.kind = NFT_MSG_GETTABLE;
	if (dump(nl, &d, NFPROTO_UNSPEC, &seq) < 0)
		goto fail;
	step = "dump the chains";
	d.kind = NFT_MSG_GETCHAIN;
	if (dump(nl, &d, NFPROTO_UNSPEC, &seq) < 0)
		goto fail;
	step = "dump the rules";
	d.kind = NFT_MSG_GETRULE;
	for (i = 0; i < d.nfams; i++)
		if (dump(nl, &d, (uint16_t)fams[i], &seq) < 0)
			goto fail;
	mnl_socket_close(nl);
	return 0;
fail:
	snprintf(why, whysz, "unable to %s: %s", step, strerror(errno));
	if (nl)
		mnl_socket_close(nl);
	return -1;
}
