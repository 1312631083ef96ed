/* tapfilter.bpf.c - the tc ingress filter of one isopod tap (man
 * isopod-netsetup, FAIL CLOSED).  Loaded per tap by lib/tcfilter.c with the
 * slot's parameters frozen in .rodata, attached with cls_bpf in
 * direct-action mode below netfilter, so no `nft flush` takes it away.
 *
 * It is an outer bound of `inet isopod`, never looser than the table: what
 * it passes, the table (when loaded) still judges; what it drops, the table
 * would have dropped too, except the few cases named in the man page.
 * Its job is what the routing rules cannot do: keep a guest away from the
 * host's own addresses (local delivery comes before any routing rule). */

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/socket.h>
#include <linux/tcp.h>
#include <linux/udp.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#ifndef AF_INET
#define AF_INET 2
#endif

/* Set by the loader before load (lib/tcfilter.h); the verifier then sees
 * constants.  Addresses and ports in network byte order. */
struct tapcfg {
	__u32 gw;        /* the slot's gateway (the tap's address) */
	__u32 bcast;     /* the slot's /30 broadcast */
	__u32 open;      /* 1: an open slot (forwards), 0: filtered */
	__u16 port_dns;  /* 53: redirected to the broker by the table */
	__u16 port_bdns; /* the broker's DNS port */
	__u16 port_http; /* the broker's proxy port (filtered) or 0 (open: none) */
	__u16 pad;
	__u32 guest;     /* the slot's guest address (gateway + 1) */
	__u8 mac[6];     /* the slot's guest MAC (02:69:73:00:KH:KL) */
	__u16 pad2;
	__u32 mark;      /* the bit set on every IPv4 packet passed (see pass()) */
};

const volatile struct tapcfg cfg = { 0 };

/* What the filter did, by verdict and reason (lib/tcfilter.h, TCF_*): the
 * doctor reads them around each probe (isopod-doctor(8), EVIDENCE) as the
 * proof that this filter, not something past it, stopped an attempt.  In
 * .bss, a map of its own beside .rodata: counting changes no verdict. */
__u64 counts[8] = { 0 };

#define TCF_PASSED 0  /* IPv4 passed on (marked) */
#define TCF_ARP 1     /* ARP passed on */
#define TCF_NONIP 2   /* dropped: VLAN, IPv6, other ethertypes, malformed */
#define TCF_SPOOF 3   /* dropped: another source address or MAC */
#define TCF_MARTIAN 4 /* dropped: 0/8, 127/8, broadcast, multicast */
#define TCF_LOCAL 5   /* dropped: for the host (gateway or another address) */
#define TCF_FORWARD 6 /* dropped: to be forwarded from a filtered slot */

static __always_inline int count(int why, int verdict)
{
	__sync_fetch_and_add(&counts[why], 1);
	return verdict;
}

#define TCP_LISTEN_STATE 10 /* BPF_TCP_LISTEN */

/* Pass an IPv4 packet on, marked: cfg.mark says "from an isopod tap, not
 * yet judged by `inet isopod`", which clears it on what it accepts.  The
 * routing rules look up the host's own addresses for packets with it only
 * after the tap's blackhole rule (man isopod-netsetup, FAIL CLOSED), so
 * what this filter judged before NAT cannot reach a host address after
 * another tool's DNAT or REDIRECT, nor any host port 53 with the table
 * gone. */
static __always_inline int pass(struct __sk_buff *skb)
{
	skb->mark |= cfg.mark;
	return count(TCF_PASSED, TC_ACT_OK);
}

/* Is this TCP or UDP segment a reply to a connection the host itself made
 * to the guest (a socket connected to exactly this packet's source)?  The
 * table lets those back in (ct state established,related with the guest as
 * original destination); a socket lookup says the same without conntrack,
 * and finds a listener or an unconnected socket (a tunnel's, bound on
 * 0.0.0.0) as what it is: not a reply. */
static __always_inline int host_reply(struct __sk_buff *skb, const struct iphdr *ip, __u16 sport,
				      __u16 dport)
{
	struct bpf_sock_tuple t = {
		.ipv4 = { .saddr = ip->saddr, .daddr = ip->daddr, .sport = sport, .dport = dport },
	};
	struct bpf_sock *sk;
	int ok;

	if (ip->protocol == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(skb, &t, sizeof t.ipv4, BPF_F_CURRENT_NETNS, 0);
	else
		sk = bpf_sk_lookup_udp(skb, &t, sizeof t.ipv4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return 0;
	/* Connected to this guest: the packet's source alone could be forged
	 * (anti-spoof above says it cannot, this says it twice). */
	ok = sk->dst_ip4 == cfg.guest && sk->dst_ip4 == ip->saddr && sk->dst_port == sport &&
	     !(ip->protocol == IPPROTO_TCP && sk->state == TCP_LISTEN_STATE);
	bpf_sk_release(sk);
	return ok;
}

/* A packet for the host itself (gw: to the slot's own gateway).  The
 * gateway: its mode's services, ping, and ICMP errors and replies to what
 * the host sent; any other host address: replies to the host's own
 * connections only.  Never a fragment (no service needs one, and a
 * fragment's ports cannot be judged). */
static __always_inline int local_ok(struct __sk_buff *skb, const struct iphdr *ip, void *l4,
				    void *end, int gw)
{
	if (ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)))
		return 0;
	if (ip->protocol == IPPROTO_ICMP) {
		__u8 *type = l4;

		if (!gw || (void *)(type + 1) > end)
			return 0;
		/* echo request and reply */
		if (*type == 8 || *type == 0)
			return 1;
		/* Unreachable, time exceeded, parameter problem: only about a
		 * packet the host sent to this guest (as the table's `ct
		 * original daddr`); a forged one about another flow would set a
		 * host-wide PMTU or fail the host's socket.  Redirects and the
		 * rest: dropped. */
		if (*type == 3 || *type == 11 || *type == 12) {
			struct iphdr *q = (void *)(type + 8);

			if ((void *)(q + 1) > end)
				return 0;
			return q->version == 4 && q->ihl == 5 && q->daddr == cfg.guest;
		}
		return 0;
	}
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		__u16 *ports = l4; /* source and destination port: the same in both */

		if ((void *)(ports + 2) > end)
			return 0;
		if (gw && (ports[1] == cfg.port_dns || ports[1] == cfg.port_bdns ||
			   (cfg.port_http && ip->protocol == IPPROTO_TCP && ports[1] == cfg.port_http)))
			return 1;
		return host_reply(skb, ip, ports[0], ports[1]);
	}
	return 0;
}

/* Would the host deliver this locally (or is the answer unknown)?  The
 * kernel's own lookup, from the tap, with no mark (bpf_fib_lookup takes
 * neither this program's TAPMARK nor the table's mark): isopod-netsetup's
 * `fwmark 0/TAPMARK lookup local` rule (priority 0, in place of the
 * kernel's, which it deletes) matches it and finds the host's addresses,
 * broadcast ones included (NOT_FWDED); anything else meets the tap's
 * rules (priorities 9 and 10) or a route.  Follows the host's addresses
 * as they change.  Unknown (forwarding off, an error): local. */
static __always_inline int fib_local(struct __sk_buff *skb, const struct iphdr *ip)
{
	struct bpf_fib_lookup p = {
		.family = AF_INET,
		.tos = ip->tos,
		.l4_protocol = ip->protocol,
		.tot_len = bpf_ntohs(ip->tot_len),
		.ifindex = skb->ingress_ifindex,
		.ipv4_src = ip->saddr,
		.ipv4_dst = ip->daddr,
	};
	long r = bpf_fib_lookup(skb, &p, sizeof p, 0);

	return r < 0 || r == BPF_FIB_LKUP_RET_NOT_FWDED || r == BPF_FIB_LKUP_RET_FWD_DISABLED;
}

SEC("tc")
int isopod_tap(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	void *l4;
	__u32 dst;

	/* A VLAN tag was taken off before this hook: a tagged frame is none
	 * of a guest's business (and a second tag shows as its ethertype). */
	if (skb->vlan_present)
		return count(TCF_NONIP, TC_ACT_SHOT);
	if ((void *)(eth + 1) > end)
		return count(TCF_NONIP, TC_ACT_SHOT);
	/* ARP: judged by `arp isopod` and the tap's arp_ignore/arp_announce. */
	if (eth->h_proto == bpf_htons(ETH_P_ARP))
		return count(TCF_ARP, TC_ACT_OK);
	/* IPv6 and every other ethertype: no policy allows them. */
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return count(TCF_NONIP, TC_ACT_SHOT);
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
		return count(TCF_NONIP, TC_ACT_SHOT);
	/* Anti-spoof, as the table's: the slot's own source address from the
	 * slot's own MAC, nothing else.  Without it a source of 0.0.0.0 to
	 * 0.0.0.0 is delivered as a broadcast to every host socket on
	 * 0.0.0.0 (a tunnel's too), and a forged source passes for a peer of
	 * a host socket. */
	if (ip->saddr != cfg.guest || eth->h_source[0] != cfg.mac[0] || eth->h_source[1] != cfg.mac[1] ||
	    eth->h_source[2] != cfg.mac[2] || eth->h_source[3] != cfg.mac[3] ||
	    eth->h_source[4] != cfg.mac[4] || eth->h_source[5] != cfg.mac[5])
		return count(TCF_SPOOF, TC_ACT_SHOT);
	l4 = (__u8 *)ip + ip->ihl * 4;
	dst = ip->daddr;
	/* "This network" and loopback: never a destination (the kernel's
	 * input path takes 0.0.0.0 for a broadcast). */
	if ((dst & bpf_htonl(0xff000000)) == 0 || (dst & bpf_htonl(0xff000000)) == bpf_htonl(0x7f000000))
		return count(TCF_MARTIAN, TC_ACT_SHOT);
	if (dst == cfg.gw)
		return local_ok(skb, ip, l4, end, 1) ? pass(skb) : count(TCF_LOCAL, TC_ACT_SHOT);
	/* Broadcast and multicast: never a guest's (the table's input chain
	 * drops them; the deny list covers 224/4 and 255.255.255.255). */
	if (dst == cfg.bcast || dst == 0xffffffff || (dst & bpf_htonl(0xf0000000)) == bpf_htonl(0xe0000000))
		return count(TCF_MARTIAN, TC_ACT_SHOT);
	/* Filtered: nothing is forwarded (the tap's forwarding flag is off, so
	 * no lookup can tell a host address from another), except DNS to any
	 * address, which the table redirects to the broker. */
	if (!cfg.open) {
		if (ip->ihl == 5 && !(ip->frag_off & bpf_htons(0x3fff)) &&
		    (ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP)) {
			__u16 *ports = l4;

			if ((void *)(ports + 2) <= end && ports[1] == cfg.port_dns)
				return pass(skb);
		}
		return count(TCF_FORWARD, TC_ACT_SHOT);
	}
	/* Open: forwarded traffic goes on to the table; a host address does not. */
	if (fib_local(skb, ip))
		return local_ok(skb, ip, l4, end, 0) ? pass(skb) : count(TCF_LOCAL, TC_ACT_SHOT);
	return pass(skb);
}

char LICENSE[] SEC("license") = "GPL";
