/* nftbuild.c - isopod-netsetup's nftables: the tables `inet isopod` and
 * `arp isopod` and our two rules in Docker's DOCKER-USER chain, built as
 * one netlink batch (libnftnl), sent, and read back.  See nftbuild.h.
 * Nothing here exits: a builder that fails marks the batch failed (the
 * first reason in b->err) and the rest build nothing; it is never sent. */

#include "nftbuild.h"
#include "nftexpr.h"
#include "net.h"
#include "tcfilter.h"
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
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter/xt_conntrack.h>
#include <linux/netfilter_arp.h>

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>

#define TABLE NFTB_TABLE
#define TAP_PREFIX NET_TAP_PREFIX
#define BATCH_BUF (4u << 20)

/* Docker's hook for user rules (iptables-nft: table ip filter).  Its
 * FORWARD policy is DROP, which would drop open slots' traffic after our
 * table accepted it; our rules there carry this comment (rule userdata,
 * as nft and iptables-nft store comments), so they are found again. */
#define DOCKER_TABLE "filter"
#define DOCKER_CHAIN "DOCKER-USER"
#define DOCKER_TAG "isopod"

/* Gateway services a guest may reach on its own gateway address (the only
 * host address it can reach at all), served by its VM's egress broker, an
 * unprivileged process: DNS on 1053 (guests ask port 53, which the dns
 * chain redirects there) and, for filtered slots, the HTTP proxy on 3128;
 * and ping.  Everything else is dropped. */
#define PORT_DNS TCFILTER_PORT_DNS
#define PORT_BROKER_DNS TCFILTER_PORT_BROKER_DNS
#define PORT_BROKER_HTTP TCFILTER_PORT_BROKER_HTTP
#define PORT_CANARY NET_CANARY_PORT

/* The fail-closed marks (lib/netslot.h, FAIL CLOSED). */
#define FWMARK NET_FWMARK
#define TAPMARK TCFILTER_TAPMARK

/* ---- nftables: the batch ------------------------------------------------- */

static const char *family_name(uint16_t f)
{
	return f == NFPROTO_ARP ? "arp" : f == NFPROTO_IPV4 ? "ip" : "inet";
}

static void batch_next(struct nftb *b)
{
	if (!mnl_nlmsg_batch_next(b->batch))
		nftb_fail(b, "unable to build the nftables batch: too large (%u slots)", b->plan->total);
}

static struct nlmsghdr *batch_hdr(struct nftb *b, uint16_t type, uint16_t family, uint16_t flags)
{
	b->nmsgs++;
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(b->batch), type, family,
				     flags | NLM_F_ACK, b->seq++);
}

static void put_table(struct nftb *b, uint16_t family, uint16_t type, uint16_t flags)
{
	struct nftnl_table *t;

	if (b->failed)
		return;
	if (!(t = nftnl_table_alloc())) {
		nftb_fail(b, "unable to allocate memory:");
		return;
	}
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, TABLE);
	nftnl_table_nlmsg_build_payload(batch_hdr(b, type, family, flags), t);
	nftnl_table_free(t);
	batch_next(b);
}

/* Replacing a table is atomic: add (so the delete cannot fail on a first
 * run), delete, add again; its chains and rules follow in the batch. */
static void put_fresh_table(struct nftb *b, uint16_t family)
{
	put_table(b, family, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(b, family, NFT_MSG_DELTABLE, 0);
	put_table(b, family, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL);
}

/* A chain; hook < 0 for a regular (jump target) chain. */
void nftb_put_chain(struct nftb *b, uint16_t family, const char *name, int hook, int prio, const char *type)
{
	struct nftnl_chain *c;

	if (b->failed)
		return;
	if (b->nchains == NFTB_MAX_CHAINS) {
		nftb_fail(b, "unable to build the table: too many chains");
		return;
	}
	if (!(c = nftnl_chain_alloc())) {
		nftb_fail(b, "unable to allocate memory:");
		return;
	}
	b->chains[b->nchains].family = family;
	b->chains[b->nchains++].name = name;
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, TABLE);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	if (hook >= 0) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	}
	nftnl_chain_nlmsg_build_payload(batch_hdr(b, NFT_MSG_NEWCHAIN, family, NLM_F_CREATE), c);
	nftnl_chain_free(c);
	batch_next(b);
}

/* A rule for chain of our table in b->family; NULL once the batch has
 * failed (the helpers then build nothing). */
struct nftnl_rule *nftb_rule_new(struct nftb *b, const char *chain)
{
	struct nftnl_rule *r;
	unsigned i;

	if (b->failed)
		return NULL;
	if (!(r = nftnl_rule_alloc())) {
		nftb_fail(b, "unable to allocate memory:");
		return NULL;
	}
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, b->family);
	for (i = 0; i < b->nchains; i++)
		if (b->chains[i].family == b->family && !strcmp(b->chains[i].name, chain))
			b->chains[i].rules++;
	b->nrules++;
	return r;
}

void nftb_rule_put(struct nftb *b, struct nftnl_rule *r)
{
	if (!r)
		return;
	if (b->failed) {
		nftnl_rule_free(r);
		return;
	}
	nftnl_rule_nlmsg_build_payload(batch_hdr(b, NFT_MSG_NEWRULE, b->family,
						 NLM_F_CREATE | NLM_F_APPEND), r);
	nftnl_rule_free(r);
	batch_next(b);
}

/* `<iif|oif>name "isopod-tap*" [counter] verdict [chain]` */
void nftb_rule_taps(struct nftb *b, const char *chain, uint32_t key, int verdict, const char *target)
{
	struct nftnl_rule *r = nftb_rule_new(b, chain);

	m_ifname(b, r, key, NFT_CMP_EQ, TAP_PREFIX, 1);
	if (verdict == NF_DROP)
		x_counter(b, r);
	x_verdict(b, r, verdict, target);
	nftb_rule_put(b, r);
}

void nftb_rule_drop_all(struct nftb *b, const char *chain)
{
	struct nftnl_rule *r = nftb_rule_new(b, chain);

	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
}

/* `[<key> "isopod-tap*"] ct state established,related accept` */
void nftb_rule_ct_reply(struct nftb *b, const char *chain, uint32_t key, const char *ifname)
{
	struct nftnl_rule *r = nftb_rule_new(b, chain);

	if (ifname)
		m_ifname(b, r, key, NFT_CMP_EQ, ifname, 1);
	m_ct_reply(b, r);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
}

static void rule_icmp_echo(struct nftb *b, const char *chain)
{
	struct nftnl_rule *r = nftb_rule_new(b, chain);
	uint8_t type = 8; /* icmp echo-request */

	m_nfproto(b, r, NFPROTO_IPV4);
	m_l4proto(b, r, IPPROTO_ICMP);
	x_payload(b, r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1);
	x_cmp(b, r, NFT_CMP_EQ, &type, 1);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
}

static void rule_port(struct nftb *b, const char *chain, uint8_t proto, uint16_t port)
{
	struct nftnl_rule *r = nftb_rule_new(b, chain);

	m_dport(b, r, proto, port);
	x_verdict(b, r, NF_ACCEPT, NULL);
	nftb_rule_put(b, r);
}

/* `iifname "isopod-tap*" meta nfproto ipv4 <proto> dport 53 redirect to :1053` */
static void rule_dns_redirect(struct nftb *b, uint8_t proto)
{
	struct nftnl_rule *r = nftb_rule_new(b, "dns");
	struct nftnl_expr *e;

	m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	m_nfproto(b, r, NFPROTO_IPV4);
	m_dport(b, r, proto, PORT_DNS);
	x_port_reg1(b, r, PORT_BROKER_DNS);
	if ((e = expr_new(b, r, "redir"))) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MAX, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
	}
	nftb_rule_put(b, r);
}

static uint32_t range_v4(const struct range *b)
{
	uint32_t a;

	memcpy(&a, b->a, 4);
	return ntohl(a);
}

/* `daddr <block> counter drop` for each block of the deny list, after a
 * `daddr <override> return` for each of the host's overrides (so an
 * override takes its block out of every listed block that holds it).
 * IPv6 too: nothing IPv6 passes prerouting today, and when a policy lets
 * it, the same list is already here. */
void nftb_rules_deny(struct nftb *b, const char *chain)
{
	const struct range_def *l;
	struct nftnl_rule *r;
	struct range rb;
	const char *why;
	size_t n, i;

	for (i = 0; i < b->plan->nallow; i++) {
		r = nftb_rule_new(b, chain);
		if (b->plan->allow[i].af == 4)
			m_ip(b, r, 16, NFT_CMP_EQ, range_v4(&b->plan->allow[i]), b->plan->allow[i].len);
		else
			m_ip6_daddr(b, r, NFT_CMP_EQ, b->plan->allow[i].a, b->plan->allow[i].len);
		x_counter(b, r);
		x_verdict(b, r, NFT_RETURN, NULL);
		nftb_rule_put(b, r);
	}
	l = ranges_list(&n);
	for (i = 0; i < n; i++) {
		if (range_parse(l[i].cidr, &rb, &why) < 0) {
			nftb_fail(b, "unable to parse the deny list's %s: %s", l[i].cidr, why);
			return;
		}
		r = nftb_rule_new(b, chain);
		if (rb.af == 4)
			m_ip(b, r, 16, NFT_CMP_EQ, range_v4(&rb), rb.len);
		else
			m_ip6_daddr(b, r, NFT_CMP_EQ, rb.a, rb.len);
		x_counter(b, r);
		x_verdict(b, r, NF_DROP, NULL);
		nftb_rule_put(b, r);
	}
}

/* The table `inet isopod`: its chains, anti-spoof and the DNS redirect;
 * then build_inet_input and build_inet_forward. */
static void build_inet(struct nftb *b)
{
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	uint8_t mac[6];
	unsigned k;

	b->family = NFPROTO_INET;
	put_fresh_table(b, NFPROTO_INET);

	/* Hook order for a packet from a tap: conntrack (-200), then
	 * prerouting (-150, anti-spoof), then dns (-100, dstnat: the redirect
	 * sees only what passed anti-spoof), routing, then input or forward
	 * (-10, which see the redirected port 1053). */
	nftb_put_chain(b, NFPROTO_INET, "prerouting", NF_INET_PRE_ROUTING, -150, "filter");
	nftb_put_chain(b, NFPROTO_INET, "vm_pre", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "dns", NF_INET_PRE_ROUTING, -100, "nat");
	nftb_put_chain(b, NFPROTO_INET, "input", NF_INET_LOCAL_IN, -10, "filter");
	nftb_put_chain(b, NFPROTO_INET, "vm_in", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "gw_filtered", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "gw_open", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "forward", NF_INET_FORWARD, -10, "filter");
	nftb_put_chain(b, NFPROTO_INET, "vm_fwd", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "fwd_open", -1, 0, NULL);
	nftb_put_chain(b, NFPROTO_INET, "postrouting", NF_INET_POST_ROUTING, 100, "nat");

	/* Anti-spoof, before routing so it covers input and forward alike:
	 * a frame from tap K passes only with slot K's MAC and IPv4 source,
	 * and an IPv4 header without options (version 4, length 5 words:
	 * no router alert reaching the host's raw sockets before any hook
	 * of ours, no source routes).  Everything else from any isopod tap —
	 * IPv6 (no policy allows it yet), spoofed addresses, IP options, a
	 * tap left over from a larger setup — is dropped. */
	nftb_rule_taps(b, "prerouting", NFT_META_IIFNAME, NFT_JUMP, "vm_pre");
	for (k = 0; k < b->plan->total; k++) {
		static const uint8_t v4ihl5 = 0x45;

		tap_name(k, name);
		slot_mac(k, mac);
		r = nftb_rule_new(b, "vm_pre");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ct_state(b, r, NF_CT_STATE_BIT(IP_CT_NEW), NFT_CMP_NEQ);
		{
			struct nftnl_expr *e = expr_new(b, r, "connlimit");

			if (e)
				nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_COUNT, b->plan->conn_limit);
			if (e)
				nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV);
		}
		x_counter(b, r);
		x_verdict(b, r, NF_DROP, NULL);
		nftb_rule_put(b, r);
		r = nftb_rule_new(b, "vm_pre");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ether_saddr(b, r, mac);
		m_ip(b, r, 12, NFT_CMP_EQ, b->plan->base + 4 * k + 2, 32);
		x_payload(b, r, NFT_PAYLOAD_NETWORK_HEADER, 0, 1);
		x_cmp(b, r, NFT_CMP_EQ, &v4ihl5, 1);
		x_verdict(b, r, NFT_RETURN, NULL);
		nftb_rule_put(b, r);
	}
	nftb_rule_drop_all(b, "vm_pre");

	/* DNS: a guest asks port 53 of any address; it lands on its own
	 * gateway's port 1053, where its broker (unprivileged, so not on
	 * 53) answers.  `redirect` takes the tap's own address, the gateway,
	 * and conntrack maps the replies back to port 53. */
	rule_dns_redirect(b, IPPROTO_UDP);
	rule_dns_redirect(b, IPPROTO_TCP);
}

/* `inet isopod`'s input side: what a guest may reach on the host. */
static void build_inet_input(struct nftb *b)
{
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	unsigned k;

	/* The host itself: only slot K's own gateway address, and there only
	 * the gateway services of the slot's mode.  Any other host address
	 * (uplink, docker0, another slot's gateway, broadcast) is dropped. */
	nftb_rule_taps(b, "input", NFT_META_IIFNAME, NFT_JUMP, "vm_in");
	/* The gateway addresses belong to the taps: from anywhere else but
	 * the host itself (lo) only replies to what the host started reach
	 * them, so the brokers serve their guests, not the uplink's
	 * neighbours (nothing is anti-spoofed there). */
	r = nftb_rule_new(b, "input");
	m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_NEQ, "lo", 0);
	m_ip(b, r, 16, NFT_CMP_EQ, b->plan->base, b->plan->prefix);
	m_ct_state(b, r, CT_REPLY, NFT_CMP_EQ);
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
	/* Per slot: replies to what the host itself started towards slot K's
	 * guest (a test probing a guest's listener, say) come back, ICMP
	 * errors about them included.  Only those: conntrack calls an ICMP
	 * error RELATED to whatever connection its quoted header names, so an
	 * unbound `ct state related accept` would let a guest inject errors
	 * into any of the host's connections (uplink, loopback with
	 * route_localnet, other slots).  Then its own gateway's services. */
	for (k = 0; k < b->plan->total; k++) {
		tap_name(k, name);
		r = nftb_rule_new(b, "vm_in");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ct_orig_daddr(b, r, b->plan->base + 4 * k + 2);
		m_ct_reply(b, r);
		x_verdict(b, r, NF_ACCEPT, NULL);
		nftb_rule_put(b, r);
		r = nftb_rule_new(b, "vm_in");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ip(b, r, 16, NFT_CMP_EQ, b->plan->base + 4 * k + 1, 32);
		x_verdict(b, r, NFT_GOTO, k < b->plan->nslots ? "gw_filtered" : "gw_open");
		nftb_rule_put(b, r);
	}
	nftb_rule_drop_all(b, "vm_in");
	/* filtered: the broker's DNS and HTTP proxy; open: DNS only (the
	 * broker resolves for every VM; open VMs connect directly). */
	rule_icmp_echo(b, "gw_filtered");
	rule_port(b, "gw_filtered", IPPROTO_TCP, PORT_BROKER_HTTP);
	rule_port(b, "gw_filtered", IPPROTO_UDP, PORT_BROKER_DNS);
	rule_port(b, "gw_filtered", IPPROTO_TCP, PORT_BROKER_DNS);
	nftb_rule_drop_all(b, "gw_filtered");
	rule_icmp_echo(b, "gw_open");
	rule_port(b, "gw_open", IPPROTO_UDP, PORT_BROKER_DNS);
	rule_port(b, "gw_open", IPPROTO_TCP, PORT_BROKER_DNS);
	nftb_rule_drop_all(b, "gw_open");
}

/* `inet isopod`'s forward side and the NAT of open slots. */
static void build_inet_forward(struct nftb *b)
{
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	unsigned k;

	/* Forwarding: only open slots, listed one by one, so a filtered slot
	 * (or any tap without a slot) falls to the final drop: filtered VMs
	 * forward nothing at all, their egress is the broker's.  Open slots
	 * never to another VM nor a denied range; to a VM only replies. */
	nftb_rule_taps(b, "forward", NFT_META_IIFNAME, NFT_JUMP, "vm_fwd");
	nftb_rule_ct_reply(b, "forward", NFT_META_OIFNAME, TAP_PREFIX);
	nftb_rule_taps(b, "forward", NFT_META_OIFNAME, NF_DROP, NULL);
	for (k = b->plan->nslots; k < b->plan->total; k++) {
		tap_name(k, name);
		r = nftb_rule_new(b, "vm_fwd");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		x_verdict(b, r, NFT_GOTO, "fwd_open");
		nftb_rule_put(b, r);
	}
	nftb_rule_drop_all(b, "vm_fwd");
	/* What conntrack cannot track (invalid: a SYN|FIN, an ICMP error
	 * about nothing) is never masqueraded: it would leave with the
	 * guest's own 10.x source. */
	r = nftb_rule_new(b, "fwd_open");
	m_ct_state(b, r, NF_CT_STATE_INVALID_BIT | NF_CT_STATE_UNTRACKED_BIT, NFT_CMP_NEQ);
	x_counter(b, r);
	x_verdict(b, r, NF_DROP, NULL);
	nftb_rule_put(b, r);
	nftb_rule_taps(b, "fwd_open", NFT_META_OIFNAME, NF_DROP, NULL);
	nftb_rules_deny(b, "fwd_open");

	/* open mode: NAT out of the slot range to anything but a tap, nor
	 * lo: the host's own datagrams from a gateway address to itself (the
	 * brokers' canaries) stay as they are. */
	r = nftb_rule_new(b, "postrouting");
	m_ip(b, r, 12, NFT_CMP_EQ, b->plan->base, b->plan->prefix);
	m_ifname(b, r, NFT_META_OIFNAME, NFT_CMP_NEQ, TAP_PREFIX, 1);
	m_ifname(b, r, NFT_META_OIFNAME, NFT_CMP_NEQ, "lo", 0);
	expr_new(b, r, "masq");
	nftb_rule_put(b, r);
}

/* The table `arp isopod`.  ARP is not IP: the inet family's hooks (ingress
 * included) never see it, so it needs a table of the arp family.  From tap
 * K only slot K's own ARP passes — Ethernet/IPv4 ARP whose frame source and
 * sender hardware address are slot K's MAC and whose sender IP is slot K's
 * guest address — so a guest cannot claim its gateway's address, another
 * slot's, or another MAC in the host's neighbour table. */
static void build_arp(struct nftb *b)
{
	static const uint8_t eth_ipv4[6] = { 0, 1, 8, 0, 6, 4 }; /* htype ptype hlen plen */
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	uint8_t sender[10];
	unsigned k;

	b->family = NFPROTO_ARP;
	put_fresh_table(b, NFPROTO_ARP);
	nftb_put_chain(b, NFPROTO_ARP, "input", NF_ARP_IN, 0, "filter");
	nftb_put_chain(b, NFPROTO_ARP, "vm_arp", -1, 0, NULL);
	nftb_rule_taps(b, "input", NFT_META_IIFNAME, NFT_JUMP, "vm_arp");
	for (k = 0; k < b->plan->total; k++) {
		uint32_t ip = htonl(b->plan->base + 4 * k + 2);

		tap_name(k, name);
		slot_mac(k, sender);
		memcpy(sender + 6, &ip, 4);
		r = nftb_rule_new(b, "vm_arp");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ether_saddr(b, r, sender);
		m_net_bytes(b, r, 0, eth_ipv4, sizeof eth_ipv4);
		m_net_bytes(b, r, 8, sender, sizeof sender); /* sha, spa */
		x_verdict(b, r, NF_ACCEPT, NULL);
		nftb_rule_put(b, r);
	}
	nftb_rule_drop_all(b, "vm_arp");
	b->family = NFPROTO_INET;
}

/* ---- Docker's DOCKER-USER ------------------------------------------------ */

static void rule_tag(struct nftb *b, struct nftnl_rule *r)
{
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN);

	if (!u || !nftnl_udata_put_strz(u, NFTNL_UDATA_RULE_COMMENT, DOCKER_TAG)) {
		nftb_fail(b, "unable to allocate memory:");
		nftnl_udata_buf_free(u);
		return;
	}
	nftnl_rule_set_data(r, NFTNL_RULE_USERDATA, nftnl_udata_buf_data(u), nftnl_udata_buf_len(u));
	nftnl_udata_buf_free(u);
}

static int tag_cb(const struct nftnl_udata *attr, void *data)
{
	const char *v = nftnl_udata_get(attr);
	uint8_t len = nftnl_udata_len(attr);

	if (nftnl_udata_type(attr) == NFTNL_UDATA_RULE_COMMENT && len == sizeof DOCKER_TAG &&
	    !memcmp(v, DOCKER_TAG, sizeof DOCKER_TAG))
		*(int *)data = 1;
	return 0;
}

static int rule_tagged(const struct nftnl_rule *r)
{
	const void *d;
	uint32_t len;
	int tagged = 0;

	if (!nftnl_rule_is_set(r, NFTNL_RULE_USERDATA))
		return 0;
	d = nftnl_rule_get_data(r, NFTNL_RULE_USERDATA, &len);
	nftnl_udata_parse(d, len, tag_cb, &tagged);
	return tagged;
}

/* A rule of DOCKER-USER; NULL once the batch has failed. */
static struct nftnl_rule *docker_rule(struct nftb *b)
{
	struct nftnl_rule *r;

	if (b->failed)
		return NULL;
	if (!(r = nftnl_rule_alloc())) {
		nftb_fail(b, "unable to allocate memory:");
		return NULL;
	}
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, DOCKER_TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, DOCKER_CHAIN);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_IPV4);
	return r;
}

/* r into the batch as a message of this type and flags (family ip). */
static void docker_put(struct nftb *b, struct nftnl_rule *r, uint16_t type, uint16_t flags)
{
	if (!r)
		return;
	if (!b->failed) {
		nftnl_rule_nlmsg_build_payload(batch_hdr(b, type, NFPROTO_IPV4, flags), r);
		batch_next(b);
	}
	nftnl_rule_free(r);
}

/* Delete our earlier rules there (by handle, found by nftb_docker_scan). */
static void docker_del(struct nftb *b)
{
	unsigned i;

	for (i = 0; i < b->dk_n; i++) {
		struct nftnl_rule *r = docker_rule(b);

		if (r)
			nftnl_rule_set_u64(r, NFTNL_RULE_HANDLE, b->dk_handles[i]);
		docker_put(b, r, NFT_MSG_DELRULE, 0);
	}
}

/* At the head of DOCKER-USER (Docker ends it with a RETURN), in the forms
 * iptables-nft itself writes, so `iptables -S` still reads the chain:
 *   -i isopod-tap+ -m comment --comment isopod -j ACCEPT
 *   -o isopod-tap+ -m conntrack --ctstate RELATED,ESTABLISHED
 *      -m comment --comment isopod -j ACCEPT
 * (the comment is rule userdata, as both nft and iptables-nft keep it).
 * Accepting there is safe: `inet isopod` (priority -10, before Docker's 0)
 * has already dropped whatever a VM may not send or receive. */
static void docker_add(struct nftb *b)
{
	struct nftnl_rule *r;

	/* Each goes to the head: the second one first. */
	r = docker_rule(b);
	m_ifname(b, r, NFT_META_OIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_xt_ctstate(b, r);
	x_counter(b, r);
	x_verdict(b, r, NF_ACCEPT, NULL);
	if (r)
		rule_tag(b, r);
	docker_put(b, r, NFT_MSG_NEWRULE, NLM_F_CREATE);
	r = docker_rule(b);
	m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_counter(b, r);
	x_verdict(b, r, NF_ACCEPT, NULL);
	if (r)
		rule_tag(b, r);
	docker_put(b, r, NFT_MSG_NEWRULE, NLM_F_CREATE);
}

/* Send the batch; read one ack (or error) per message.  0 or -1. */
static int nft_send(struct nftb *b)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	unsigned replies = 0;
	int err = 0;
	uint32_t errseq = 0;
	ssize_t n;

	if (b->failed)
		return -1;
	if (mnl_socket_sendto(b->nl, mnl_nlmsg_batch_head(b->batch), mnl_nlmsg_batch_size(b->batch)) < 0)
		return nftb_fail(b, "unable to send the nftables batch:");
	while (replies < b->nmsgs) {
		struct nlmsghdr *nlh;
		int len;

		n = mnl_socket_recvfrom(b->nl, buf, sizeof buf);
		if (n < 0) {
			if (errno == EAGAIN && err)
				break; /* the kernel stops acking after an abort */
			return nftb_fail(b, "unable to read the nftables acks (%u of %u):", replies, b->nmsgs);
		}
		len = (int)n;
		for (nlh = (struct nlmsghdr *)buf; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
			if (nlh->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);

				replies++;
				if (e->error && !err)
					err = -e->error, errseq = nlh->nlmsg_seq;
			}
		}
	}
	if (err) {
		errno = err;
		return nftb_fail(b, "unable to load tables inet/arp " TABLE " (message %u of the batch):", errseq);
	}
	return 0;
}

/* ---- nftables: read back ------------------------------------------------- */

/* The chain (c) or the rule (r, c NULL) in one message of a dump, allocated
 * and parsed, for a callback below to free; -1 with b's reason.  (libnftnl's
 * free functions dereference their argument: NULL is not theirs to free.) */
static int dump_parse(struct nftb *b, const struct nlmsghdr *nlh, struct nftnl_chain **c,
		      struct nftnl_rule **r)
{
	if (c ? !(*c = nftnl_chain_alloc()) : !(*r = nftnl_rule_alloc()))
		return nftb_fail(b, "unable to allocate memory:");
	if ((c ? nftnl_chain_nlmsg_parse(nlh, *c) : nftnl_rule_nlmsg_parse(nlh, *r)) >= 0)
		return 0;
	nftb_fail(b, "unable to parse a %s:", c ? "chain" : "rule");
	if (c)
		nftnl_chain_free(*c);
	else
		nftnl_rule_free(*r);
	return -1;
}

static int chain_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftb *b = data;
	struct nftnl_chain *c;
	const char *t, *n;
	uint32_t f;
	unsigned i;

	if (dump_parse(b, nlh, &c, NULL) < 0)
		return MNL_CB_ERROR;
	t = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
	n = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
	f = nftnl_chain_get_u32(c, NFTNL_CHAIN_FAMILY);
	if (!strcmp(t, TABLE))
		for (i = 0; i < b->nchains; i++)
			if (b->chains[i].family == f && !strcmp(b->chains[i].name, n))
				b->chains[i].seen++;
	if (f == NFPROTO_IPV4 && !strcmp(t, DOCKER_TABLE) && !strcmp(n, DOCKER_CHAIN))
		b->dk_chain = 1;
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int rule_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftb *b = data;
	struct nftnl_rule *r;
	uint32_t f;
	unsigned i;

	if (dump_parse(b, nlh, NULL, &r) < 0)
		return MNL_CB_ERROR;
	f = nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY);
	if (!strcmp(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), TABLE)) {
		b->seen_rules++;
		for (i = 0; i < b->nchains; i++)
			if (b->chains[i].family == f &&
			    !strcmp(b->chains[i].name, nftnl_rule_get_str(r, NFTNL_RULE_CHAIN)))
				b->chains[i].seen_rules++;
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* Our tagged rules in DOCKER-USER: counted, their handles kept. */
static int docker_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftb *b = data;
	struct nftnl_rule *r;
	uint64_t *h;

	if (dump_parse(b, nlh, NULL, &r) < 0)
		return MNL_CB_ERROR;
	if (nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY) == NFPROTO_IPV4 &&
	    !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), DOCKER_TABLE) &&
	    !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), DOCKER_CHAIN) && rule_tagged(r)) {
		if (!(h = realloc(b->dk_handles, (b->dk_seen + 1) * sizeof *b->dk_handles))) {
			nftb_fail(b, "unable to allocate memory:");
			nftnl_rule_free(r);
			return MNL_CB_ERROR;
		}
		b->dk_handles = h;
		b->dk_handles[b->dk_seen++] = nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE);
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* Dump chains or rules of a family (rules: of table `table` only; the
 * kernel's dump stops after the first table of that name, so one family
 * per dump) through cb (data: b).  0 or -1. */
static int nft_dump(struct nftb *b, uint16_t type, uint16_t family, const char *table, mnl_cb_t cb)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t seq = b->seq++, portid = mnl_socket_get_portid(b->nl);
	struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, type, family, NLM_F_DUMP, seq);
	ssize_t n;
	int r;

	if (type == NFT_MSG_GETRULE) {
		struct nftnl_rule *rr = nftnl_rule_alloc();

		if (!rr)
			return nftb_fail(b, "unable to allocate memory:");
		nftnl_rule_set_str(rr, NFTNL_RULE_TABLE, table);
		nftnl_rule_nlmsg_build_payload(nlh, rr);
		nftnl_rule_free(rr);
	}
	if (mnl_socket_sendto(b->nl, nlh, nlh->nlmsg_len) < 0)
		return nftb_fail(b, "unable to ask for the tables back:");
	do {
		n = mnl_socket_recvfrom(b->nl, buf, sizeof buf);
		if (n < 0)
			return nftb_fail(b, "unable to read the tables back:");
		r = mnl_cb_run(buf, (size_t)n, seq, portid, cb, b);
		if (r == MNL_CB_ERROR)
			return nftb_fail(b, "unable to read the tables back:"); /* a callback's reason stays */
	} while (r > MNL_CB_STOP);
	return 0;
}

int nftb_docker_scan(struct nftb *b)
{
	unsigned i;

	b->dk_chain = 0, b->dk_seen = 0;
	for (i = 0; i < b->nchains; i++)
		b->chains[i].seen = 0;
	if (nft_dump(b, NFT_MSG_GETCHAIN, NFPROTO_UNSPEC, NULL, chain_cb) < 0)
		return -1;
	if (b->dk_chain && nft_dump(b, NFT_MSG_GETRULE, NFPROTO_IPV4, DOCKER_TABLE, docker_cb) < 0)
		return -1;
	return 0;
}

int nftb_verify(struct nftb *b)
{
	unsigned i;
	int ok = 1;

	if (nftb_docker_scan(b) < 0 || /* the chains too */
	    nft_dump(b, NFT_MSG_GETRULE, NFPROTO_INET, TABLE, rule_cb) < 0 ||
	    nft_dump(b, NFT_MSG_GETRULE, NFPROTO_ARP, TABLE, rule_cb) < 0)
		return -1;
	for (i = 0; i < b->nchains; i++)
		if (b->chains[i].seen != 1 || b->chains[i].seen_rules != b->chains[i].rules) {
			warn("verify: chain %s %s: found %d, %u rules (want 1, %u)",
			     family_name(b->chains[i].family), b->chains[i].name, b->chains[i].seen,
			     b->chains[i].seen_rules, b->chains[i].rules);
			ok = 0;
		}
	if (b->seen_rules != b->nrules) {
		warn("verify: tables inet/arp " TABLE " have %u rules, want %u", b->seen_rules, b->nrules);
		ok = 0;
	}
	if (b->dk_seen != b->dk_want) {
		warn("verify: chain ip " DOCKER_TABLE " " DOCKER_CHAIN " has %u isopod rules, want %u",
		     b->dk_seen, b->dk_want);
		ok = 0;
	}
	return ok;
}

int nftb_open(struct nftb *b, const struct netplan *plan)
{
	struct timeval tv = { .tv_sec = 5, .tv_usec = 0 };
	int sz = 8 << 20;

	*b = (struct nftb){ .plan = plan, .family = NFPROTO_INET };
	if (!(b->nl = mnl_socket_open(NETLINK_NETFILTER)) || mnl_socket_bind(b->nl, 0, MNL_SOCKET_AUTOPID) < 0)
		return nftb_fail(b, "unable to open a netfilter netlink socket:");
	/* A big batch needs room; replies must not hang forever. */
	setsockopt(mnl_socket_get_fd(b->nl), SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
	setsockopt(mnl_socket_get_fd(b->nl), SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
	setsockopt(mnl_socket_get_fd(b->nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return 0;
}

void nftb_close(struct nftb *b)
{
	if (b->nl)
		mnl_socket_close(b->nl);
	free(b->buf);
	free(b->dk_handles);
	b->nl = NULL, b->buf = NULL, b->dk_handles = NULL;
}

static int batch_begin(struct nftb *b)
{
	if (!b->buf && !(b->buf = malloc(BATCH_BUF)))
		return nftb_fail(b, "unable to allocate memory:");
	b->batch = mnl_nlmsg_batch_start(b->buf, BATCH_BUF);
	b->seq = (uint32_t)time(NULL);
	nftnl_batch_begin(mnl_nlmsg_batch_current(b->batch), b->seq++);
	batch_next(b);
	return 0;
}

/* End the batch (unless a builder failed) and send it.  0 or -1. */
static int batch_send(struct nftb *b)
{
	int r;

	if (!b->failed) {
		nftnl_batch_end(mnl_nlmsg_batch_current(b->batch), b->seq++);
		batch_next(b);
	}
	r = nft_send(b);
	mnl_nlmsg_batch_stop(b->batch);
	b->batch = NULL;
	return r;
}

/* ---- fail closed ------------------------------------------------------------
 *
 * Two things that do not depend on `inet isopod` staying loaded (man
 * isopod-netsetup, FAIL CLOSED): routing rules that blackhole every tap's
 * traffic the table has not marked, and a canary in the table that each
 * VM's broker (unprivileged: it cannot read nftables) sends a nonce
 * through, so it notices within seconds that the table is gone. */

/* The table's part, in the same batch as the rest of `inet isopod`. */
static void build_failclosed(struct nftb *b)
{
	struct nftnl_rule *r;
	struct nftnl_expr *e;
	char name[IFNAMSIZ];
	unsigned k;

	/* Every slot: what passed anti-spoof loses the tc filter's TAPMARK,
	 * so the routing looks the host's addresses up for it again (after
	 * the dns chain's redirect; the input chain then judges it).  With
	 * this table gone the bit stays and only the per-tap rules apply. */
	r = nftb_rule_new(b, "prerouting");
	m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_mark_bit(b, r, TAPMARK, 0);
	nftb_rule_put(b, r);

	/* Open slots: what passed anti-spoof (vm_pre returned) carries the
	 * mark the routing rules ask for; the forward chain still decides
	 * what may go.  Filtered slots are never marked: they forward
	 * nothing, and now the routing says so too. */
	for (k = b->plan->nslots; k < b->plan->total; k++) {
		tap_name(k, name);
		r = nftb_rule_new(b, "prerouting");
		m_ifname(b, r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		x_mark_bit(b, r, FWMARK, 1);
		nftb_rule_put(b, r);
	}
	/* The canary: `ip daddr GW udp dport 1054 udp dport set 1055` per
	 * slot, for the host's own datagrams only (output hook; the input
	 * chain drops a guest's to either port).  Stateless
	 * on purpose: a NAT rule would be remembered by conntrack and keep
	 * rewriting an old flow after the table is gone. */
	nftb_put_chain(b, NFPROTO_INET, "canary", NF_INET_LOCAL_OUT, 0, "filter");
	for (k = 0; k < b->plan->total; k++) {
		r = nftb_rule_new(b, "canary");
		m_ip(b, r, 16, NFT_CMP_EQ, b->plan->base + 4 * k + 1, 32);
		m_dport(b, r, IPPROTO_UDP, PORT_CANARY);
		x_port_reg1(b, r, PORT_CANARY + 1);
		if ((e = expr_new(b, r, "payload"))) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_SREG, NFT_REG_1);
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 2);
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 2);
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_TYPE, NFT_PAYLOAD_CSUM_INET);
			nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_OFFSET, 6); /* udp checksum */
		}
		nftb_rule_put(b, r);
	}
}

int nftb_load(struct nftb *b)
{
	if (nftb_docker_scan(b) < 0)
		return -1;
	b->dk_n = b->dk_seen;
	b->dk_want = b->plan->docker && b->dk_chain ? 2 : 0;
	if (batch_begin(b) < 0)
		return -1;
	build_inet(b);
	build_inet_input(b);
	build_inet_forward(b);
	build_failclosed(b);
	nftb_build_jail(b);
	build_arp(b);
	docker_del(b);
	if (b->dk_want)
		docker_add(b);
	return batch_send(b);
}

int nftb_remove(struct nftb *b)
{
	if (nftb_docker_scan(b) < 0)
		return -1;
	b->dk_n = b->dk_seen;
	if (batch_begin(b) < 0)
		return -1;
	put_table(b, NFPROTO_INET, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(b, NFPROTO_INET, NFT_MSG_DELTABLE, 0);
	put_table(b, NFPROTO_ARP, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(b, NFPROTO_ARP, NFT_MSG_DELTABLE, 0);
	docker_del(b);
	return batch_send(b);
}
