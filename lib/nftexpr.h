/* nftexpr.h - the building blocks of isopod's nftables rules (lib/nftbuild.c):
 * x_* one expression, m_* a match (the expressions nft writes for it).
 * Each appends to rule r of batch b; with r NULL (a failed batch) it does
 * nothing, and one that fails marks b failed (nftb_fail), so a builder
 * checks b once, at the end.  Registers: every match loads register 1. */
#ifndef ISOPOD_NFTEXPR_H
#define ISOPOD_NFTEXPR_H

#include "nftbuild.h"

#include <stdint.h>

#include <linux/netfilter/nf_conntrack_common.h>

struct nftnl_rule;
struct nftnl_expr;

/* `ct state established,related` */
#define CT_REPLY (NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED))

/* The first failure's reason in b->err, as die() would print it (a format
 * ending in ':' gets errno's text); b failed.  -1. */
__attribute__((format(printf, 2, 3))) int nftb_fail(struct nftb *b, const char *fmt, ...);
struct nftnl_expr *expr_new(struct nftb *b, struct nftnl_rule *r, const char *name);
void x_meta(struct nftb *b, struct nftnl_rule *r, uint32_t key);
void x_cmp(struct nftb *b, struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len);
void x_payload(struct nftb *b, struct nftnl_rule *r, uint32_t pbase, uint32_t off, uint32_t len);
void x_bitwise(struct nftb *b, struct nftnl_rule *r, const void *mask, uint32_t len);
void x_port_reg1(struct nftb *b, struct nftnl_rule *r, uint16_t port_host);
void x_counter(struct nftb *b, struct nftnl_rule *r);
void x_verdict(struct nftb *b, struct nftnl_rule *r, int verdict, const char *chain);
void m_ifname(struct nftb *b, struct nftnl_rule *r, uint32_t key, uint32_t op, const char *name, int wildcard);
void m_nfproto(struct nftb *b, struct nftnl_rule *r, uint8_t proto);
void m_l4proto(struct nftb *b, struct nftnl_rule *r, uint8_t proto);
void m_ip(struct nftb *b, struct nftnl_rule *r, uint32_t off, uint32_t op, uint32_t addr, int len);
void m_ip6_daddr(struct nftb *b, struct nftnl_rule *r, uint32_t op, const uint8_t net[16], int len);
void m_ether_saddr(struct nftb *b, struct nftnl_rule *r, const uint8_t mac[6]);
void m_dport(struct nftb *b, struct nftnl_rule *r, uint8_t proto, uint16_t port);
void m_net_bytes(struct nftb *b, struct nftnl_rule *r, uint32_t off, const void *data, uint32_t len);
void m_ct_state(struct nftb *b, struct nftnl_rule *r, uint32_t ctmask, uint32_t op);
void m_ct_reply(struct nftb *b, struct nftnl_rule *r);
void m_ct_direction(struct nftb *b, struct nftnl_rule *r, uint8_t dir);
void m_ct_reply_sport(struct nftb *b, struct nftnl_rule *r, uint16_t port);
void m_ct_orig_daddr(struct nftb *b, struct nftnl_rule *r, uint32_t addr);
void x_xt_ctstate(struct nftb *b, struct nftnl_rule *r);
void x_mark_bit(struct nftb *b, struct nftnl_rule *r, uint32_t bit, int set);
/* `meta skuid first..last` (nft's encoding: the host-order uid turned big
 * endian, then a range); a packet without a full socket never matches. */
void m_skuid_range(struct nftb *b, struct nftnl_rule *r, uint32_t first, uint32_t last);
/* `fib daddr type local` */
void m_fib_daddr_local(struct nftb *b, struct nftnl_rule *r);

/* The builders lib/nftbuild.c shares with lib/nftjail.c: a chain of our
 * table (hook < 0: a regular one), a rule of b->family's table for chain
 * (NULL once failed) and its sending, `counter drop`, `[KEY IFNAME*] ct
 * state established,related accept`, and the deny list (overrides return,
 * listed blocks counter drop). */
void nftb_put_chain(struct nftb *b, uint16_t family, const char *name, int hook, int prio, const char *type);
struct nftnl_rule *nftb_rule_new(struct nftb *b, const char *chain);
void nftb_rule_put(struct nftb *b, struct nftnl_rule *r);
void nftb_rule_drop_all(struct nftb *b, const char *chain);
/* `<KEY> "isopod-tap*" [counter, for a drop] VERDICT [TARGET]` */
void nftb_rule_taps(struct nftb *b, const char *chain, uint32_t key, int verdict, const char *target);
void nftb_rule_ct_reply(struct nftb *b, const char *chain, uint32_t key, const char *ifname);
void nftb_rules_deny(struct nftb *b, const char *chain);
/* The jail egress chains (lib/nftjail.c; isopod-netsetup(8), JAIL EGRESS). */
void nftb_build_jail(struct nftb *b);

#endif
