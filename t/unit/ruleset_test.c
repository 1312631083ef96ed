/* ruleset_test.c - lib/ruleset.c's canonical text: the same policy gives
 * the same bytes whatever the handles, the counters' values and the order
 * the kernel lists chains in; a rule added, removed, changed or moved, a
 * chain's policy and a table's flags change them; other tables are ignored. */
#include "../../lib/ruleset.c" /* self-contained: t/run-unit links frame+util only */

#include <linux/netfilter/nf_tables.h>
#include <stdio.h>
#include <string.h>

#include "tap.h"

static struct nftnl_rule *rule(const char *table, const char *chain, uint64_t handle,
			       uint32_t port, uint64_t pkts, int verdict)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	struct nftnl_expr *e;

	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nftnl_rule_set_u64(r, NFTNL_RULE_HANDLE, handle);
	nftnl_rule_set_u64(r, NFTNL_RULE_POSITION, handle + 3);
	e = nftnl_expr_alloc("payload");
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 2);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 2);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
	nftnl_rule_add_expr(r, e);
	e = nftnl_expr_alloc("cmp");
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, &port, sizeof port);
	nftnl_rule_add_expr(r, e);
	e = nftnl_expr_alloc("counter");
	nftnl_expr_set_u64(e, NFTNL_EXPR_CTR_PACKETS, pkts);
	nftnl_expr_set_u64(e, NFTNL_EXPR_CTR_BYTES, pkts * 84);
	nftnl_rule_add_expr(r, e);
	e = nftnl_expr_alloc("immediate");
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
	nftnl_rule_add_expr(r, e);
	return r;
}

static struct nftnl_chain *chain(const char *name, uint64_t handle, int base, uint32_t policy)
{
	struct nftnl_chain *c = nftnl_chain_alloc();

	nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, "isopod");
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_set_u64(c, NFTNL_CHAIN_HANDLE, handle);
	nftnl_chain_set_u32(c, NFTNL_CHAIN_USE, (uint32_t)handle);
	nftnl_chain_set_u64(c, NFTNL_CHAIN_PACKETS, handle * 7);
	if (base) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, NF_INET_FORWARD);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, -10);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, policy);
	}
	return c;
}

/* One ruleset as the kernel might list it.  v selects a variant:
 *  0 the reference;  1 other handles, counters, chain order, a foreign table;
 *  2 a rule added;  3 a rule removed;  4 a port changed;  5 two rules swapped;
 *  6 the base chain's policy drop;  7 the table dormant;  8 no table at all. */
static char *text(int v, size_t *n)
{
	struct canon c = { 0 };
	struct nftnl_table *t = nftnl_table_alloc(), *other = nftnl_table_alloc();
	struct nftnl_chain *fwd = chain("forward", v == 1 ? 90 : 1, 1, v == 6 ? NF_DROP : NF_ACCEPT);
	struct nftnl_chain *vm = chain("vm_fwd", v == 1 ? 91 : 2, 0, 0);
	struct nftnl_rule *r[4];
	uint64_t h = v == 1 ? 500 : 10, k = v == 1 ? 123456 : 0;
	char *s;
	int i;

	nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, "isopod");
	nftnl_table_set_u32(t, NFTNL_TABLE_FLAGS, v == 7 ? NFT_TABLE_F_DORMANT : 0);
	nftnl_table_set_u64(t, NFTNL_TABLE_HANDLE, h);
	nftnl_table_set_u32(other, NFTNL_TABLE_FAMILY, NFPROTO_INET);
	nftnl_table_set_str(other, NFTNL_TABLE_NAME, "othertool");
	r[0] = rule("isopod", "vm_fwd", h + 1, v == 4 ? 54 : 53, k, NF_ACCEPT);
	r[1] = rule("isopod", "vm_fwd", h + 2, 80, k * 2, NF_DROP);
	r[2] = rule("isopod", "forward", h + 3, 443, k + 1, NF_DROP);
	r[3] = rule("othertool", "forward", h + 4, 22, 0, NF_ACCEPT);
	if (v != 8)
		canon_table(&c, t);
	if (v == 1)
		canon_table(&c, other);
	if (v == 1) {
		canon_chain(&c, vm);
		canon_chain(&c, fwd);
	} else if (v != 8) {
		canon_chain(&c, fwd);
		canon_chain(&c, vm);
	}
	if (v == 1)
		canon_rule(&c, r[3]);
	if (v == 5) {
		canon_rule(&c, r[1]);
		canon_rule(&c, r[0]);
	} else if (v != 8) {
		canon_rule(&c, r[0]);
		if (v != 3)
			canon_rule(&c, r[1]);
	}
	if (v != 8)
		canon_rule(&c, r[2]);
	if (v == 2)
		canon_rule(&c, r[2]);
	s = canon_text(&c, n);
	canon_free(&c);
	for (i = 0; i < 4; i++)
		nftnl_rule_free(r[i]);
	nftnl_chain_free(fwd);
	nftnl_chain_free(vm);
	nftnl_table_free(t);
	nftnl_table_free(other);
	return s;
}

/* ruleset_drops' filter: a rule with a counter and a drop verdict is kept
 * with its chain, handle and packets; an accept, or a drop without a
 * counter, is not. */
static void drops(void)
{
	struct drops_dump d = { 0 };
	struct nftnl_rule *r1 = rule("isopod", "vm_in", 30, 9, 7, NF_DROP);
	struct nftnl_rule *r2 = rule("isopod", "vm_in", 31, 9, 5, NF_ACCEPT);
	struct nftnl_rule *r3 = nftnl_rule_alloc();
	struct nftnl_expr *e = nftnl_expr_alloc("immediate");

	nftnl_rule_set_str(r3, NFTNL_RULE_CHAIN, "fwd_open");
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)NF_DROP);
	nftnl_rule_add_expr(r3, e);
	ok(drop_rule(&d, r1) == 0 && drop_rule(&d, r2) == 0 && drop_rule(&d, r3) == 0,
	   "drop_rule reads three rules");
	ok(d.n == 1 && !strcmp(d.v[0].chain, "vm_in") && d.v[0].handle == 30 && d.v[0].packets == 7,
	   "only the counted drop is kept, with its chain, handle and packets");
	free(d.v);
	nftnl_rule_free(r1), nftnl_rule_free(r2), nftnl_rule_free(r3);
}

/* Objects and flowtables: isopod's table's (or a netdev table's) make a
 * line each; another inet table's make none. */
static void objects(void)
{
	struct canon c = { 0 };
	struct nftnl_obj *o = nftnl_obj_alloc(), *x = nftnl_obj_alloc();
	struct nftnl_flowtable *ft = nftnl_flowtable_alloc(), *fx = nftnl_flowtable_alloc();
	char *t;
	size_t n = 0;

	nftnl_obj_set_u32(o, NFTNL_OBJ_FAMILY, NFPROTO_INET);
	nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, RULESET_TABLE);
	nftnl_obj_set_str(o, NFTNL_OBJ_NAME, "q");
	nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_QUOTA);
	nftnl_obj_set_u64(o, NFTNL_OBJ_QUOTA_BYTES, 100);
	nftnl_obj_set_u32(x, NFTNL_OBJ_FAMILY, NFPROTO_INET);
	nftnl_obj_set_str(x, NFTNL_OBJ_TABLE, "othertool");
	nftnl_obj_set_str(x, NFTNL_OBJ_NAME, "q2");
	nftnl_obj_set_u32(x, NFTNL_OBJ_TYPE, NFT_OBJECT_QUOTA);
	nftnl_flowtable_set_u32(ft, NFTNL_FLOWTABLE_FAMILY, NFPROTO_INET);
	nftnl_flowtable_set_str(ft, NFTNL_FLOWTABLE_TABLE, RULESET_TABLE);
	nftnl_flowtable_set_str(ft, NFTNL_FLOWTABLE_NAME, "ft");
	nftnl_flowtable_set_u32(fx, NFTNL_FLOWTABLE_FAMILY, NFPROTO_INET);
	nftnl_flowtable_set_str(fx, NFTNL_FLOWTABLE_TABLE, "othertool");
	nftnl_flowtable_set_str(fx, NFTNL_FLOWTABLE_NAME, "fx");
	ok(canon_obj(&c, o) == 0 && canon_obj(&c, x) == 0 && canon_flowtable(&c, ft) == 0 &&
	   canon_flowtable(&c, fx) == 0 && c.n == 2, "an object and a flowtable of isopod's table: 2 lines, "
	   "another table's: none (%zu)", c.n);
	t = canon_text(&c, &n);
	ok(t && strstr(t, "object inet isopod q type 2 bytes 100") && strstr(t, "flowtable inet isopod ft") &&
	   !strstr(t, "othertool"), "their lines: %s", t ? t : "(none)");
	free(t);
	canon_free(&c);
	nftnl_obj_free(o);
	nftnl_obj_free(x);
	nftnl_flowtable_free(ft);
	nftnl_flowtable_free(fx);
}

int main(void)
{
	static const char *what[] = {
		"", "", "a rule added", "a rule removed", "a port changed", "two rules swapped",
		"a base chain's policy", "a dormant table", "no table",
	};
	size_t n0, n, i;
	char *ref = text(0, &n0), *s;

	ok(ref && strstr(ref, "[ counter ]") && !strstr(ref, "pkts") &&
		   !strstr(ref, "handle") && strstr(ref, "table inet isopod flags 0\n") == ref,
	   "the text: table first, counters without values, no handles");
	ok(ref && !strstr(ref, "othertool"), "other tables are not isopod's policy");
	s = text(1, &n);
	ok(s && n == n0 && !memcmp(s, ref, n),
	   "other handles, positions, counter values, use counts and chain order: the same text");
	if (s && ref && (n != n0 || memcmp(s, ref, n)))
		printf("# ref:\n%s# got:\n%s", ref, s);
	free(s);
	for (i = 2; i <= 8; i++) {
		s = text((int)i, &n);
		ok(s && (n != n0 || memcmp(s, ref, n)), "%s changes the text", what[i]);
		free(s);
	}
	free(ref);
	drops();
	objects();
	return tap_done();
}
