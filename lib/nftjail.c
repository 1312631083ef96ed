/* nftjail.c - the jail egress chains of `inet isopod` (isopod-netsetup(8),
 * JAIL EGRESS): what a socket owned by a jail identity (the egress brokers;
 * lib/jail.h) may send.  A broker keeps the host's network namespace and
 * serves its guest; subverted by that guest, its own checks (lib/policy.c)
 * are the guest's.  This chain is the same policy outside the process:
 *
 *   jail      output hook: meta skuid FIRST-LAST goto jail_out
 *   jail_out  ipv4 tcp ct direction original ct state established accept
 *                                     (the TCP flows it opened)
 *             oifname "isopod-tap*"|lo ip daddr SLOTS ct direction reply
 *               ct state established ct reply proto-src 1053|3128 accept
 *                                     (its service's answers to its guest,
 *                                      and to the doctor's check: DNS, proxy)
 *             oifname lo, the canary datagram (GW:1055 -> GW:1054) accept
 *             the doctor's resolver 127.0.0.1 udp 952 accept (privileged)
 *             the resolver udp/tcp accept    (before the local drops: the
 *                                             host's may be 127.0.0.53)
 *             fib daddr type local counter drop   (the host, every gateway)
 *             ip daddr 127.0.0.0/8 counter drop
 *             ip daddr SLOTS counter drop     (the guests, whatever the
 *             oifname "isopod-tap*" counter drop  deny list allows)
 *             ipv4 tcp ct state new jump jail_deny
 *             ipv4 tcp ct state new accept
 *             counter drop                   (UDP, ICMP, IPv6, the rest)
 *   jail_deny the deny list less the host's overrides (nftb_rules_deny:
 *             the forward chain's, so both layers agree)
 *
 * and, for every other local socket, in `jail` after the goto:
 *             ip daddr GW udp|tcp dport 1053, tcp dport 3128
 *               meta skuid != 0 counter drop
 *                                     (the brokers serve their guests and
 *                                      root's doctor, no other user)
 *             ip saddr GW udp|tcp sport 1053, tcp sport 3128
 *               meta skuid != 0 [meta skuid != OWNER] counter drop
 *                                     (no squatter on a broker's port
 *                                      answers a guest)
 *   GW: ip addr & 0.0.0.3 == 0.0.0.1 in SLOTS, a gateway's.
 *
 * Priority -5: before the canary chain (0) rewrites the canary's port. */

#include "net.h"
#include "nftexpr.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tuple_common.h>
#include <linux/netfilter/nf_tables.h>

#include <libnftnl/rule.h>

#define CHAIN "jail_out"

/* `udp sport port` (host order). */
static void m_udp_sport(struct nftb *b, struct nftnl_rule *r, uint16_t port)
{
	uint16_t p = htons(port);

	m_l4proto(b, r, IPPROTO_UDP);
	x_payload(b, r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 2);
	x_cmp(b, r, NFT_CMP_EQ, &p, 2);
}

/* `ip daddr addr/len <proto> dport port accept` */
static void rule_to(struct nftb *b, uint32_t addr, int len, uint8_t proto, uint16_t port)
{
	struct nftnl_rule *r = nftb_rule_new(b, CHAIN);

	m_ip(b, r, 16, NFT_CMP_EQ, addr, len);
	m_dport(b, r, proto, port);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
}

/* `meta nfproto ipv4 meta l4proto tcp ct state new <verdict> [chain]` */
static void rule_tcp_new(struct nftb *b, int verdict, const char *target)
{
	struct nftnl_rule *r = nftb_rule_new(b, CHAIN);

	m_nfproto(b, r, NFPROTO_IPV4);
	m_l4proto(b, r, IPPROTO_TCP);
	m_ct_state(b, r, NF_CT_STATE_BIT(IP_CT_NEW), NFT_CMP_NEQ);
	x_verdict(b, r, verdict, target);
	nftb_rule_put(b, r);
}

/* `oifname "isopod-tap*"|lo ip daddr SLOTS <proto> ct direction reply ct
 * state established ct reply proto-src port accept`: a broker's answer
 * from its gateway service on port (DNS: 53 is redirected to 1053 before
 * conntrack confirms the flow, so the reply tuple has the broker's port)
 * to its guest (a tap) or to a host process bound to a gateway address
 * (lo: the doctor's broker check, lib/advhost.c).  Not every reply to the
 * slot range: a local user bound to a gateway address who writes to a
 * broker's other sockets (an autobound port) would read its answers
 * (review L2). */
/* A broker's service ports: DNS (UDP, TCP) and the proxy. */
static const struct {
	uint8_t proto;
	uint16_t port;
} svc[] = {
	{ .proto = IPPROTO_UDP, .port = TCFILTER_PORT_BROKER_DNS },
	{ .proto = IPPROTO_TCP, .port = TCFILTER_PORT_BROKER_DNS },
	{ .proto = IPPROTO_TCP, .port = TCFILTER_PORT_BROKER_HTTP },
};

static void rule_answer(struct nftb *b, int lo, uint8_t proto, uint16_t port)
{
	struct nftnl_rule *r = nftb_rule_new(b, CHAIN);

	m_ifname(b, r, NFT_META_OIFNAME, NFT_CMP_EQ, lo ? "lo" : NET_TAP_PREFIX, !lo);
	m_ip(b, r, 16, NFT_CMP_EQ, b->plan->base, b->plan->prefix);
	m_l4proto(b, r, proto);
	m_ct_direction(b, r, IP_CT_DIR_REPLY);
	m_ct_state(b, r, NF_CT_STATE_BIT(IP_CT_ESTABLISHED), NFT_CMP_NEQ);
	m_ct_reply_sport(b, r, port);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
}

/* ip saddr (off 12) or daddr (16): a gateway's, the first host of its
 * slot's /30 (lib/net.c: base + 4k + 1; the base is aligned to the
 * range's prefix, netsetup checks). */
static void m_gateway(struct nftb *b, struct nftnl_rule *r, uint32_t off)
{
	uint32_t mask = htonl(3), one = htonl(1);

	m_ip(b, r, off, NFT_CMP_EQ, b->plan->base, b->plan->prefix);
	x_payload(b, r, NFT_PAYLOAD_NETWORK_HEADER, off, 4);
	x_bitwise(b, r, &mask, 4);
	x_cmp(b, r, NFT_CMP_EQ, &one, 4);
}

/* A broker's service port on a gateway, for local sockets (jail uids went
 * to jail_out above).  Guests come through their taps (the input path,
 * not this hook).
 *   to (client): from any uid but root's (the doctor's broker check; no
 *     other host tool asks a broker), dropped before its first packet
 *     leaves: otherwise any local user could use a VM's broker as a proxy
 *     of its own and write requests into that VM's egress ledger, which
 *     its provenance names and learn mode turns into a proposed allowlist.
 *   from (squatter): any uid but root's (an unjailed broker) and the
 *     taps' owner's (a user's store runs its brokers as that user): a local
 *     user who bound a gateway's port while its broker was not running
 *     never answers the guest (it still keeps the broker from starting).
 * A packet with no full socket (a TCP reset for a timewait one) has no
 * skuid: the rules do not match it. */
static void rule_local(struct nftb *b, int from, uint8_t proto, uint16_t port)
{
	const struct netplan *p = b->plan;
	struct nftnl_rule *r = nftb_rule_new(b, "jail");
	uint32_t root = 0, owner = from && p->owner > 0 ? (uint32_t)p->owner : 0;
	uint16_t pn = htons(port);

	m_gateway(b, r, from ? 12 : 16);
	m_l4proto(b, r, proto);
	x_payload(b, r, NFT_PAYLOAD_TRANSPORT_HEADER, from ? 0 : 2, 2);
	x_cmp(b, r, NFT_CMP_EQ, &pn, 2);
	x_meta(b, r, NFT_META_SKUID);
	x_cmp(b, r, NFT_CMP_NEQ, &root, 4);
	if (owner) {
		x_meta(b, r, NFT_META_SKUID);
		x_cmp(b, r, NFT_CMP_NEQ, &owner, 4);
	}
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
}

void nftb_build_jail(struct nftb *b)
{
	const struct netplan *p = b->plan;
	struct nftnl_rule *r;

	b->family = NFPROTO_INET;
	nftb_put_chain(b, NFPROTO_INET, "jail", NF_INET_LOCAL_OUT, -5, "filter");
	nftb_put_chain(b, NFPROTO_INET, CHAIN, -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "jail_deny", -1, 0, NULL);

	r = nftb_rule_new(b, "jail");
	m_skuid_range(b, r, p->jail_first, p->jail_last);
	x_verdict(b, r, NFT_GOTO, CHAIN);
	nftb_rule_put(b, r);
	for (int from = 0; from < 2; from++)
		for (size_t i = 0; i < sizeof svc / sizeof svc[0]; i++)
			rule_local(b, from, svc[i].proto, svc[i].port);

	/* Established, never "established,related" of any flow: a peer that
	 * starts a UDP or TCP flow to a broker's socket (an autobound port)
	 * would have its answers pass as replies (review L2).  A broker's
	 * own flows are TCP (the resolver's and the canary's datagrams have
	 * their own rules below); what it answers is its guest's. */
	r = nftb_rule_new(b, CHAIN);
	m_nfproto(b, r, NFPROTO_IPV4);
	m_l4proto(b, r, IPPROTO_TCP);
	m_ct_direction(b, r, IP_CT_DIR_ORIGINAL);
	m_ct_state(b, r, NF_CT_STATE_BIT(IP_CT_ESTABLISHED), NFT_CMP_NEQ);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
	for (int lo = 0; lo < 2; lo++)
		for (size_t i = 0; i < sizeof svc / sizeof svc[0]; i++)
			rule_answer(b, lo, svc[i].proto, svc[i].port);
	/* The canary (lib/canary.h): from a gateway's NET_CANARY_PORT+1 to a
	 * gateway's NET_CANARY_PORT, which the canary chain then rewrites.
	 * Another slot's canary socket is connected to itself: it never
	 * takes what a broker sends it from elsewhere.  Only on lo: a
	 * gateway-to-gateway datagram is local; without it a broker's
	 * sendto() reached another slot's guest on :1054 (review M1). */
	r = nftb_rule_new(b, CHAIN);
	m_ifname(b, r, NFT_META_OIFNAME, NFT_CMP_EQ, "lo", 0);
	m_ip(b, r, 12, NFT_CMP_EQ, p->base, p->prefix);
	m_ip(b, r, 16, NFT_CMP_EQ, p->base, p->prefix);
	m_udp_sport(b, r, NET_CANARY_PORT + 1);
	m_dport(b, r, IPPROTO_UDP, NET_CANARY_PORT);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
	rule_to(b, INADDR_LOOPBACK, 32, IPPROTO_UDP, NET_DOCTOR_DNS_PORT);
	if (p->resolver_port) {
		rule_to(b, p->resolver, 32, IPPROTO_UDP, p->resolver_port);
		rule_to(b, p->resolver, 32, IPPROTO_TCP, p->resolver_port);
	}
	r = nftb_rule_new(b, CHAIN);
	m_fib_daddr_local(b, r);
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
	r = nftb_rule_new(b, CHAIN);
	m_ip(b, r, 16, NFT_CMP_EQ, INADDR_LOOPBACK, 8);
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
	/* The guests: their slot range and the taps, whatever the deny list
	 * says (a host override may allow 10/8, or --base lie outside it),
	 * as the forward chain's fwd_open does (review M2). */
	r = nftb_rule_new(b, CHAIN);
	m_ip(b, r, 16, NFT_CMP_EQ, p->base, p->prefix);
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
	nftb_rule_taps(b, CHAIN, NFT_META_OIFNAME, NF_DROP, NULL);
	rule_tcp_new(b, NFT_JUMP, "jail_deny");
	rule_tcp_new(b, NF_ACCEPT, NULL);
	nftb_rule_drop_all(b, CHAIN);
	nftb_rules_deny(b, "jail_deny");
}
