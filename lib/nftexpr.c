/* nftexpr.c - the expressions isopod's nftables rules are made of
 * (libnftnl), each as nft itself would encode it.  See nftexpr.h. */

#include "nftexpr.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter/xt_conntrack.h>
#include <linux/rtnetlink.h>

#include <libnftnl/expr.h>
#include <libnftnl/rule.h>

/* The first failure's reason in b->err, as die() would print it (a format
 * ending in ':' gets errno's text); the batch is failed.  -1. */
int nftb_fail(struct nftb *b, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	if (b->failed)
		return -1;
	b->failed = 1;
	va_start(ap, fmt);
	vreason(b->err, sizeof b->err, e, fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

/* ---- nftables: expressions ------------------------------------------------ */

/* A new expression at the end of r; NULL (and nothing more is built)
 * when r is NULL, as after a failure. */
struct nftnl_expr *expr_new(struct nftb *b, struct nftnl_rule *r, const char *name)
{
	struct nftnl_expr *e;

	if (!r)
		return NULL;
	if (!(e = nftnl_expr_alloc(name))) {
		nftb_fail(b, "unable to allocate memory:");
		return NULL;
	}
	nftnl_rule_add_expr(r, e);
	return e;
}

void x_meta(struct nftb *b, struct nftnl_rule *r, uint32_t key)
{
	struct nftnl_expr *e = expr_new(b, r, "meta");

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
}

void x_cmp(struct nftb *b, struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len)
{
	struct nftnl_expr *e = expr_new(b, r, "cmp");

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

void x_payload(struct nftb *b, struct nftnl_rule *r, uint32_t pbase, uint32_t off, uint32_t len)
{
	struct nftnl_expr *e = expr_new(b, r, "payload");

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, pbase);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
}

void x_bitwise(struct nftb *b, struct nftnl_rule *r, const void *mask, uint32_t len)
{
	struct nftnl_expr *e = expr_new(b, r, "bitwise");
	static const uint8_t zero[16];

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, len);
}

/* A port (host order) into register 1, for redir and the canary's
 * rewrite. */
void x_port_reg1(struct nftb *b, struct nftnl_rule *r, uint16_t port_host)
{
	struct nftnl_expr *e = expr_new(b, r, "immediate");
	uint16_t port = htons(port_host);

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
	nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &port, sizeof port);
}

void x_counter(struct nftb *b, struct nftnl_rule *r)
{
	expr_new(b, r, "counter");
}

/* Terminal verdict; chain for jump/goto. */
void x_verdict(struct nftb *b, struct nftnl_rule *r, int verdict, const char *chain)
{
	struct nftnl_expr *e = expr_new(b, r, "immediate");

	if (!e)
		return;

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
	if (chain)
		nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
}

/* iifname/oifname: exact (16 bytes, NUL padded) or prefix ("isopod-tap*",
 * compared without the NUL, which is how nft spells a wildcard). */
void m_ifname(struct nftb *b, struct nftnl_rule *r, uint32_t key, uint32_t op, const char *name, int wildcard)
{
	char n[IFNAMSIZ] = { 0 };

	memcpy(n, name, strlen(name));
	x_meta(b, r, key);
	x_cmp(b, r, op, n, wildcard ? (uint32_t)strlen(name) : IFNAMSIZ);
}

void m_nfproto(struct nftb *b, struct nftnl_rule *r, uint8_t proto)
{
	x_meta(b, r, NFT_META_NFPROTO);
	x_cmp(b, r, NFT_CMP_EQ, &proto, 1);
}

void m_l4proto(struct nftb *b, struct nftnl_rule *r, uint8_t proto)
{
	x_meta(b, r, NFT_META_L4PROTO);
	x_cmp(b, r, NFT_CMP_EQ, &proto, 1);
}

/* ip saddr (off 12) / daddr (off 16) op net/len; addr in host order. */
void m_ip(struct nftb *b, struct nftnl_rule *r, uint32_t off, uint32_t op, uint32_t addr, int len)
{
	uint32_t mask = len ? htonl(~0u << (32 - len)) : 0, net = htonl(addr) & mask;

	m_nfproto(b, r, NFPROTO_IPV4);
	x_payload(b, r, NFT_PAYLOAD_NETWORK_HEADER, off, 4);
	if (len != 32)
		x_bitwise(b, r, &mask, 4);
	x_cmp(b, r, op, &net, 4);
}

/* ip6 daddr (off 24) op net/len. */
void m_ip6_daddr(struct nftb *b, struct nftnl_rule *r, uint32_t op, const uint8_t net[16], int len)
{
	uint8_t mask[16] = { 0 }, n[16];

	for (int i = 0; i < len; i++)
		mask[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	for (int i = 0; i < 16; i++)
		n[i] = net[i] & mask[i];
	m_nfproto(b, r, NFPROTO_IPV6);
	x_payload(b, r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16);
	if (len != 128)
		x_bitwise(b, r, mask, 16);
	x_cmp(b, r, op, n, 16);
}

/* ether saddr == mac, guarded by iiftype ether as nft does. */
void m_ether_saddr(struct nftb *b, struct nftnl_rule *r, const uint8_t mac[6])
{
	uint16_t type = ARPHRD_ETHER;

	x_meta(b, r, NFT_META_IIFTYPE);
	x_cmp(b, r, NFT_CMP_EQ, &type, 2);
	x_payload(b, r, NFT_PAYLOAD_LL_HEADER, 6, 6);
	x_cmp(b, r, NFT_CMP_EQ, mac, 6);
}

void m_dport(struct nftb *b, struct nftnl_rule *r, uint8_t proto, uint16_t port)
{
	uint16_t p = htons(port);

	m_l4proto(b, r, proto);
	x_payload(b, r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
	x_cmp(b, r, NFT_CMP_EQ, &p, 2);
}

/* Raw bytes at a network header offset (the ARP header in family arp). */
void m_net_bytes(struct nftb *b, struct nftnl_rule *r, uint32_t off, const void *data, uint32_t len)
{
	x_payload(b, r, NFT_PAYLOAD_NETWORK_HEADER, off, len);
	x_cmp(b, r, NFT_CMP_EQ, data, len);
}

/* `ct KEY` loaded into register 1: the one ct load of the m_ct_*
 * matches.  The expression (a caller may set its direction), or NULL. */
static struct nftnl_expr *x_ct(struct nftb *b, struct nftnl_rule *r, uint32_t key)
{
	struct nftnl_expr *e = expr_new(b, r, "ct");

	if (!e)
		return NULL;
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
	return e;
}

/* `ct state MASK` (op NEQ: any of those states; EQ: none of them) */
void m_ct_state(struct nftb *b, struct nftnl_rule *r, uint32_t ctmask, uint32_t op)
{
	uint32_t zero = 0;

	if (!x_ct(b, r, NFT_CT_STATE))
		return;
	x_bitwise(b, r, &ctmask, 4);
	x_cmp(b, r, op, &zero, 4);
}

/* `ct state established,related` */
void m_ct_reply(struct nftb *b, struct nftnl_rule *r)
{
	m_ct_state(b, r, CT_REPLY, NFT_CMP_NEQ);
}

/* `ct direction original|reply` (dir: IP_CT_DIR_ORIGINAL or _REPLY) */
void m_ct_direction(struct nftb *b, struct nftnl_rule *r, uint8_t dir)
{
	if (!x_ct(b, r, NFT_CT_DIRECTION))
		return;
	x_cmp(b, r, NFT_CMP_EQ, &dir, 1);
}

/* `ct reply proto-src port` (host order): the port a flow's answers come
 * from, where its first packet went after any redirect. */
void m_ct_reply_sport(struct nftb *b, struct nftnl_rule *r, uint16_t port)
{
	struct nftnl_expr *e = x_ct(b, r, NFT_CT_PROTO_SRC);
	uint16_t p = htons(port);

	if (!e)
		return;
	nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR, IP_CT_DIR_REPLY);
	x_cmp(b, r, NFT_CMP_EQ, &p, 2);
}

/* `ct original ip daddr addr` (host order) */
void m_ct_orig_daddr(struct nftb *b, struct nftnl_rule *r, uint32_t addr)
{
	struct nftnl_expr *e;
	uint32_t a = htonl(addr);

	m_nfproto(b, r, NFPROTO_IPV4);
	if (!(e = x_ct(b, r, NFT_CT_DST_IP)))
		return;
	nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR, IP_CT_DIR_ORIGINAL);
	x_cmp(b, r, NFT_CMP_EQ, &a, 4);
}

/* `-m conntrack --ctstate RELATED,ESTABLISHED` as iptables-nft writes it:
 * an xtables match run by nft_compat.  (iptables-nft 1.8.9 cannot read
 * nft's native `ct state` and then refuses the whole table: Docker's own
 * iptables calls would fail.) */
void x_xt_ctstate(struct nftb *b, struct nftnl_rule *r)
{
	struct nftnl_expr *e = expr_new(b, r, "match");
	size_t len = XT_ALIGN(sizeof(struct xt_conntrack_mtinfo3));
	struct xt_conntrack_mtinfo3 *ct;

	if (!e)
		return;
	if (!(ct = calloc(1, len))) { /* the expr owns it */
		nftb_fail(b, "unable to allocate memory:");
		return;
	}
	ct->match_flags = XT_CONNTRACK_STATE;
	ct->state_mask = XT_CONNTRACK_STATE_BIT(IP_CT_ESTABLISHED) |
			 XT_CONNTRACK_STATE_BIT(IP_CT_RELATED);
	nftnl_expr_set_str(e, NFTNL_EXPR_MT_NAME, "conntrack");
	nftnl_expr_set_u32(e, NFTNL_EXPR_MT_REV, 3);
	nftnl_expr_set(e, NFTNL_EXPR_MT_INFO, ct, (uint32_t)len);
}

/* `meta mark set meta mark | bit` when set, `meta mark set meta mark & ~bit`
 * when not: one bitwise expression, mask ~bit, xor bit or 0. */
void x_mark_bit(struct nftb *b, struct nftnl_rule *r, uint32_t bit, int set)
{
	struct nftnl_expr *e;
	uint32_t mask = ~bit, xor = set ? bit : 0;

	x_meta(b, r, NFT_META_MARK);
	if (!(e = expr_new(b, r, "bitwise")))
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &xor, 4);
	if (!(e = expr_new(b, r, "meta")))
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, NFT_META_MARK);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_SREG, NFT_REG_1);
}


void m_skuid_range(struct nftb *b, struct nftnl_rule *r, uint32_t first, uint32_t last)
{
	struct nftnl_expr *e;
	uint32_t lo = htonl(first), hi = htonl(last);

	x_meta(b, r, NFT_META_SKUID);
	if ((e = expr_new(b, r, "byteorder"))) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_BYTEORDER_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BYTEORDER_DREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BYTEORDER_OP, NFT_BYTEORDER_HTON);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BYTEORDER_LEN, 4);
		nftnl_expr_set_u32(e, NFTNL_EXPR_BYTEORDER_SIZE, 4);
	}
	if (!(e = expr_new(b, r, "range")))
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_RANGE_OP, NFT_RANGE_EQ);
	nftnl_expr_set(e, NFTNL_EXPR_RANGE_FROM_DATA, &lo, 4);
	nftnl_expr_set(e, NFTNL_EXPR_RANGE_TO_DATA, &hi, 4);
}

void m_fib_daddr_local(struct nftb *b, struct nftnl_rule *r)
{
	struct nftnl_expr *e = expr_new(b, r, "fib");
	uint32_t local = RTN_LOCAL;

	if (!e)
		return;
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_DADDR);
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
	nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
	x_cmp(b, r, NFT_CMP_EQ, &local, 4);
}
