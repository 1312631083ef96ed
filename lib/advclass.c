/* advclass.c - the adverse suite's classes of spoofing, ARP, IPv6 and DNS
 * rebinding (their own packet socket, the neighbour table, the doctor's
 * resolver); see advprobe.h. */
#include "advprobe.h"
#include "dns.h"
#include "net.h"
#include "sniff.h"

#include <arpa/inet.h>
#include <linux/if_arp.h>
#include <linux/if_packet.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/ethernet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- spoofing, ARP, IPv6 and DNS rebinding --------------------------------
 *
 * What these probes send is not the guest's own IPv4 to a target (what
 * adv_sniff_count matches): a spoofed source, another MAC, ARP, IPv6, and a
 * flow the broker makes itself.  Each brings its own packet socket, opened
 * right before the guest runs, and its own match (struct xmatch). */

/* Big enough to mark a probe's own ICMP echo (the controls' are 56). */
#define SPOOF_SIZE 1000

/* A frame the xev sockets match: which way, on which interface. */
struct xmatch {
	uint16_t ethertype;     /* ETH_P_IP, ETH_P_ARP, ETH_P_IPV6 */
	int ifindex;            /* the VM's tap */
	int icmp_big;           /* IPv4: only ICMP of SPOOF_SIZE or more */
	uint8_t in_mac[6];      /* in: the frame's source MAC (all zero: any) */
	int in_af;              /* in: the source address (0: any) */
	uint8_t in_src[16];
	int in_proto, in_port;  /* in: to this protocol/port (0: any) */
	int out_af;             /* out: to this address, leaving any other interface */
	uint8_t out_dst[16];
	int out_proto, out_port;/* out: only this protocol/port (0: any) */
	int out_any_if;         /* out: on the tap too (an answer is as bad as a leak) */
	int back_any;           /* back: anything of this ethertype to the guest */
};

void adv_xev_before(struct xev *x)
{
	int big = 8 << 20;

	x->fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, htons(ETH_P_ALL));
	if (x->fd >= 0)
		setsockopt(x->fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
}

static void xev_end(struct xev *x)
{
	if (x->fd >= 0)
		close(x->fd);
	x->fd = -1;
	json_decref(x->ev);
	x->ev = NULL;
}

/* Count the frames of m since adv_xev_before into x (in, out, back); -1 when
 * the socket was never opened or dropped frames. */
static int xev_count(struct xev *x, const struct xmatch *m)
{
	uint8_t b[4096];
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	x->in = x->out = x->back = 0;
	if (x->fd < 0)
		return snprintf(x->why, sizeof x->why, "no packet socket: %s", strerror(errno)), -1;
	usleep(200 * 1000); /* what is still on its way */
	for (;;) {
		struct sockaddr_ll ll;
		socklen_t ls = sizeof ll;
		struct sniff_pkt pk;
		ssize_t n = recvfrom(x->fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&ll, &ls);
		int eth = ll.sll_hatype == ARPHRD_ETHER, alen, outgoing, ok;

		if (n < 0)
			break;
		if (ntohs(ll.sll_protocol) != m->ethertype)
			continue;
		outgoing = ll.sll_pkttype == PACKET_OUTGOING;
		if (m->ethertype == ETH_P_ARP) {
			/* Ethernet/IPv4 ARP: sha at 8, spa at 14, tpa at 24 (after the
			 * 14-byte Ethernet header) */
			if (!eth || n < 14 + 28 || ll.sll_ifindex != m->ifindex)
				continue;
			if (!outgoing) {
				/* from the guest, a sender address not its own */
				x->in += memcmp(b + 14 + 14, m->in_src, 4) != 0;
			} else if (!memcmp(b + 14 + 24, m->out_dst, 4)) {
				x->back++; /* the host answered the claimed sender */
			}
			continue;
		}
		if (sniff_parse(b, (size_t)n, ll.sll_hatype, &pk) < 0)
			continue;
		alen = pk.af == 4 ? 4 : 16;
		if (m->icmp_big && (pk.proto != IPPROTO_ICMP || pk.plen < SPOOF_SIZE))
			continue;
		if (!outgoing && ll.sll_ifindex == m->ifindex) {
			static const uint8_t zero[6];

			ok = (!memcmp(m->in_mac, zero, 6) || (eth && n >= 14 && !memcmp(b + 6, m->in_mac, 6))) &&
			     (!m->in_af || (pk.af == m->in_af && !memcmp(pk.src, m->in_src, (size_t)alen))) &&
			     (!m->in_proto || (pk.proto == m->in_proto && (!m->in_port || pk.dport == m->in_port)));
			x->in += ok;
		} else if (outgoing) {
			int to = m->out_af && pk.af == m->out_af && !memcmp(pk.dst, m->out_dst, (size_t)alen) &&
				 (!m->out_proto || (pk.proto == m->out_proto && (!m->out_port || pk.dport == m->out_port)));

			if (ll.sll_ifindex == m->ifindex) {
				if (m->back_any || (to && m->out_any_if))
					x->back++;
			} else if (to) {
				x->out++;
			}
		}
	}
	if (getsockopt(x->fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl) == 0 && ts.tp_drops)
		return snprintf(x->why, sizeof x->why, "the capture dropped frames"), -1;
	return 0;
}

static int mac_parse(const char *s, uint8_t m[6])
{
	unsigned v[6];
	int i;

	if (sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6)
		return -1;
	for (i = 0; i < 6; i++)
		m[i] = (uint8_t)v[i];
	return 0;
}

/* An address of another slot (the next one's guest): what a guest spoofs. */
static void spoof_addr(const struct avm *vm, char *out, size_t sz)
{
	struct in_addr ia;

	inet_pton(AF_INET, vm->guest, &ia);
	ia.s_addr = htonl(ntohl(ia.s_addr) + 4);
	inet_ntop(AF_INET, &ia, out, (socklen_t)sz);
}

/* The tap's own MAC (the guest's gateway's), as text.  -1 if unreadable. */
static int tap_mac(const struct avm *vm, char *out, size_t sz)
{
	char p[PATH_MAX];
	uint8_t m[6];
	int fd;
	ssize_t n;

	if (pathn(p, sizeof p, "/sys/class/net/%s/address", vm->tap) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, out, sz - 1);
	close(fd);
	out[n > 0 ? n : 0] = 0;
	out[strcspn(out, "\n")] = 0;
	return mac_parse(out, m);
}

/* ---- spoofed source IP and MAC ---- */

struct spoof_ctx {
	struct xmatch m;
};

static int spoof_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct spoof_ctx *c = x->ctx;

	(void)a, (void)vm;
	if (xev_count(x, &c->m) < 0)
		return -1;
	x->ev = json_pack("{s:b}", "spoofed_frames_seen", x->in > 0);
	if (x->out || x->back)
		return snprintf(x->why, sizeof x->why, "the spoofed echo (or its answer) left the tap"), -1;
	return 0;
}

/* From vm: an ICMP echo to its gateway (which answers the control) from
 * another slot's address, then from another MAC; the marked size tells
 * the attempt's frames from the control's. */
static void probe_spoof(struct adv *a, const struct avm *vm, int mac)
{
	struct probe p;
	struct spoof_ctx c = { .m = { .ethertype = ETH_P_IP, .ifindex = vm->ifindex, .icmp_big = 1,
				      .out_any_if = 1 } };
	struct xev x = { .after = spoof_after, .fd = -1, .ctx = &c, .tc_reason = TCF_SPOOF, .by = "tc" };
	char sa[16], m2[18], tm[32];
	uint8_t gmac[6];

	adv_probe_new(&p, mac ? "spoof-mac" : "spoof-ip", IPPROTO_ICMP, vm->gw, -1, "ping");
	p.x = &x;
	adv_control_for(a, vm, &p);
	spoof_addr(vm, sa, sizeof sa);
	if (mac) {
		if (mac_parse(vm->mac, gmac) < 0) {
			adv_probe_missing(a, vm, p.cls, "spoof-mac", "the VM's record has no MAC");
			return;
		}
		/* another slot's MAC (the last byte's low bit flipped) */
		snprintf(m2, sizeof m2, "%.15s%02x", vm->mac, gmac[5] ^ 1);
		memcpy(c.m.in_mac, gmac, 5);
		c.m.in_mac[5] = gmac[5] ^ 1;
		snprintf(p.name, sizeof p.name, "%s/spoof-mac-%s", vm->mode, m2);
		if (tap_mac(vm, tm, sizeof tm) < 0) {
			adv_probe_missing(a, vm, p.cls, "spoof-mac", "unable to read the tap's MAC");
			return;
		}
		/* a new MAC flushes the guest's neighbours, and its ARP from that
		 * MAC is dropped: the gateway's MAC is set by hand, so the echo
		 * itself goes out */
		snprintf(p.attempt, sizeof p.attempt,
			 "ip link set eth0 address %s && arp -i eth0 -s %s %s && "
			 "{ ping -c1 -s %d -W%d %s >/dev/null 2>&1; r=$?; }; ip link set eth0 address %s; "
			 "arp -i eth0 -d %s >/dev/null 2>&1; "
			 "if [ \"${r:-1}\" = 0 ]; then a=1; else a=0; fi; echo \"attempt ${r:-1} $a\"",
			 m2, vm->gw, tm, SPOOF_SIZE, a->tmo, vm->gw, vm->mac, vm->gw);
	} else {
		inet_pton(AF_INET, sa, c.m.in_src);
		c.m.in_af = 4;
		snprintf(p.name, sizeof p.name, "%s/spoof-ip-%s", vm->mode, sa);
		snprintf(p.attempt, sizeof p.attempt,
			 "ping -c1 -W1 %s >/dev/null 2>&1; ip addr add %s/32 dev eth0 2>/dev/null; "
			 "ping -c1 -s %d -W%d -I %s %s >/dev/null 2>&1; r=$?; ip addr del %s/32 dev eth0 2>/dev/null; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
			 vm->gw, sa, SPOOF_SIZE, a->tmo, sa, vm->gw, sa);
	}
	/* where its answer would go (the spoofed address; with another MAC,
	 * the guest itself), on any interface, the tap included */
	inet_pton(AF_INET, mac ? vm->guest : sa, c.m.out_dst);
	c.m.out_af = 4;
	adv_run_probe(a, vm, &p);
	xev_end(&x);
}

/* ---- ARP claiming the gateway ---- */

#define NEIGH_MAX 256

struct neigh {
	int ifindex;
	uint8_t ip[4], ll[6];
	int has_ll;
};

struct arp_ctx {
	struct xmatch m;
	uint8_t watch[2][4];    /* the claimed addresses: another slot's, the gateway */
	uint8_t guest[4], gmac[6];
	struct neigh before[NEIGH_MAX];
	int nbefore;
};

/* The host's IPv4 neighbour table (RTM_GETNEIGH), entries with a link
 * address.  -1 with errno. */
static int neigh_dump(struct neigh *out, int max, int *n)
{
	struct {
		struct nlmsghdr h;
		struct ndmsg nd;
	} req = { .h = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETNEIGH,
			 .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		  .nd = { .ndm_family = AF_INET } };
	char buf[16384];
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), done = 0;

	*n = 0;
	if (fd < 0)
		return -1;
	if (send(fd, &req, sizeof req, 0) < 0) {
		close(fd);
		return -1;
	}
	while (!done) {
		ssize_t r = recv(fd, buf, sizeof buf, 0);
		struct nlmsghdr *h;

		if (r <= 0) {
			close(fd);
			return -1;
		}
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned)r); h = NLMSG_NEXT(h, r)) {
			struct ndmsg *nd = NLMSG_DATA(h);
			struct rtattr *at;
			int len;
			struct neigh e = { 0 };
			int has_ip = 0;

			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				done = 1;
				break;
			}
			if (h->nlmsg_type != RTM_NEWNEIGH || nd->ndm_family != AF_INET)
				continue;
			e.ifindex = nd->ndm_ifindex;
			len = (int)RTM_PAYLOAD(h);
			for (at = RTM_RTA(nd); RTA_OK(at, len); at = RTA_NEXT(at, len)) {
				if (at->rta_type == NDA_DST && RTA_PAYLOAD(at) == 4)
					memcpy(e.ip, RTA_DATA(at), 4), has_ip = 1;
				if (at->rta_type == NDA_LLADDR && RTA_PAYLOAD(at) == 6)
					memcpy(e.ll, RTA_DATA(at), 6), e.has_ll = 1;
			}
			if (has_ip && e.has_ll && !(nd->ndm_state & (NUD_FAILED | NUD_INCOMPLETE)) &&
			    *n < max)
				out[(*n)++] = e;
		}
	}
	close(fd);
	return 0;
}

static const struct neigh *neigh_find(const struct neigh *t, int n, int ifindex, const uint8_t ip[4])
{
	int i;

	for (i = 0; i < n; i++)
		if (t[i].ifindex == ifindex && !memcmp(t[i].ip, ip, 4))
			return &t[i];
	return NULL;
}

static int arp_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct arp_ctx *c = x->ctx;
	struct neigh now[NEIGH_MAX];
	int nnow, i, k, changed = 0, own_bad = 0;
	char t[INET_ADDRSTRLEN];
	json_t *ch = json_array();

	(void)a;
	if (xev_count(x, &c->m) < 0 || neigh_dump(now, NEIGH_MAX, &nnow) < 0) {
		if (!x->why[0])
			snprintf(x->why, sizeof x->why, "unable to read the neighbour table: %s", strerror(errno));
		json_decref(ch);
		return -1;
	}
	/* a claimed address: on any interface, no entry that was not there
	 * before, none that changed its link address */
	for (i = 0; i < nnow; i++)
		for (k = 0; k < 2; k++) {
			const struct neigh *b;

			if (memcmp(now[i].ip, c->watch[k], 4))
				continue;
			b = neigh_find(c->before, c->nbefore, now[i].ifindex, now[i].ip);
			if (!b || memcmp(b->ll, now[i].ll, 6)) {
				changed++;
				json_array_append_new(ch, json_pack("{s:s, s:i}", "address",
								    inet_ntop(AF_INET, now[i].ip, t, sizeof t),
								    "ifindex", now[i].ifindex));
			}
		}
	/* and the guest's own address keeps its own MAC */
	{
		const struct neigh *g = neigh_find(now, nnow, vm->ifindex, c->guest);

		own_bad = g && memcmp(g->ll, c->gmac, 6);
	}
	x->ev = json_pack("{s:b, s:o, s:b}", "neighbours_unchanged", !changed, "neighbours_changed", ch,
			  "guest_neighbour_ok", !own_bad);
	if (changed || own_bad)
		return snprintf(x->why, sizeof x->why, "the host's neighbour table took the claim"), -1;
	if (x->back)
		return snprintf(x->why, sizeof x->why, "the host answered the claimed sender"), -1;
	return 0;
}

/* From vm: an ARP request for its gateway from another slot's address,
 * then a gratuitous ARP claiming the gateway's own address. */
static void probe_arp(struct adv *a, const struct avm *vm)
{
	struct probe p;
	struct arp_ctx *c = calloc(1, sizeof *c);
	struct xev x = { .after = arp_after, .fd = -1, .ctx = c, .tc_reason = TCF_ARP,
			  .by = "neighbours" };
	char sa[16];

	if (!c) {
		adv_fatal(a, EX_SYS, "out of memory");
		return;
	}
	spoof_addr(vm, sa, sizeof sa);
	adv_probe_new(&p, "arp-gateway", 0, vm->gw, -1, "arping");
	p.x = &x;
	snprintf(p.name, sizeof p.name, "%s/arp-claim-%s-and-gateway-%s", vm->mode, sa, vm->gw);
	c->m = (struct xmatch){ .ethertype = ETH_P_ARP, .ifindex = vm->ifindex, .in_af = 4 };
	inet_pton(AF_INET, vm->guest, c->m.in_src);
	inet_pton(AF_INET, sa, c->m.out_dst);
	inet_pton(AF_INET, sa, c->watch[0]);
	inet_pton(AF_INET, vm->gw, c->watch[1]);
	inet_pton(AF_INET, vm->guest, c->guest);
	if (mac_parse(vm->mac, c->gmac) < 0) {
		adv_probe_missing(a, vm, p.cls, "arp-gateway", "the VM's record has no MAC");
		free(c);
		return;
	}
	/* the control: an honest request for the gateway is answered */
	snprintf(p.control, sizeof p.control,
		 "arping -c1 -w%d -I eth0 %s >/dev/null 2>&1; r=$?; if [ $r = 0 ]; then a=1; else a=0; fi; "
		 "echo \"control $r $a\"", a->tmo + 1, vm->gw);
	/* the answer to the request from another address is the claim taken */
	snprintf(p.attempt, sizeof p.attempt,
		 "ip addr add %s/32 dev eth0 2>/dev/null; arping -c1 -w%d -I eth0 -s %s %s >/dev/null 2>&1; "
		 "r=$?; ip addr del %s/32 dev eth0 2>/dev/null; ip addr add %s/32 dev eth0 2>/dev/null; "
		 "arping -U -c1 -w1 -I eth0 -s %s %s >/dev/null 2>&1; ip addr del %s/32 dev eth0 2>/dev/null; "
		 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
		 sa, a->tmo, sa, vm->gw, sa, vm->gw, vm->gw, vm->gw, vm->gw);
	if (neigh_dump(c->before, NEIGH_MAX, &c->nbefore) < 0) {
		adv_probe_missing(a, vm, p.cls, "arp-gateway", "unable to read the host's neighbour table");
		free(c);
		return;
	}
	adv_run_probe(a, vm, &p);
	xev_end(&x);
	free(c);
}

/* ---- IPv6 ---- */

struct v6_ctx {
	struct xmatch m;
};

static int v6_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct v6_ctx *c = x->ctx;

	(void)a, (void)vm;
	if (xev_count(x, &c->m) < 0)
		return -1;
	x->ev = json_pack("{s:b}", "ipv6_from_guest_seen", x->in > 0);
	if (x->back)
		return snprintf(x->why, sizeof x->why, "the host sent IPv6 to the guest"), -1;
	return 0;
}

/* The link-local address the tap would have (EUI-64 of its MAC): what a
 * guest on that link tries first.  -1 when the MAC is unreadable. */
static int tap_ll(const struct avm *vm, char *out, size_t sz)
{
	char s[32] = "";
	uint8_t m[6], a6[16] = { 0xfe, 0x80 };

	if (tap_mac(vm, s, sizeof s) < 0 || mac_parse(s, m) < 0)
		return -1;
	a6[8] = m[0] ^ 2, a6[9] = m[1], a6[10] = m[2], a6[11] = 0xff;
	a6[12] = 0xfe, a6[13] = m[3], a6[14] = m[4], a6[15] = m[5];
	inet_ntop(AF_INET6, a6, out, (socklen_t)sz);
	return 0;
}

/* From vm: ping6 to the tap's link-local address, and to a ULA and a
 * global address routed through it. */
static void probe_v6(struct adv *a, const struct avm *vm, const char *what, const char *target)
{
	struct probe p;
	struct v6_ctx c = { .m = { .ethertype = ETH_P_IPV6, .ifindex = vm->ifindex, .back_any = 1 } };
	struct xev x = { .after = v6_after, .fd = -1, .ctx = &c, .tc_reason = TCF_NONIP, .by = "tc" };
	char ll[INET6_ADDRSTRLEN];

	adv_probe_new(&p, "ipv6", 0, target, -1, "ping6");
	p.x = &x;
	snprintf(p.name, sizeof p.name, "%s/ipv6-%s-%s", vm->mode, what, target ? target : "?");
	if (tap_ll(vm, ll, sizeof ll) < 0) {
		adv_probe_missing(a, vm, p.cls, p.name + strlen(vm->mode) + 1, "unable to read the tap's MAC");
		return;
	}
	if (!target) {
		target = ll;
		snprintf(p.name, sizeof p.name, "%s/ipv6-%s-%s", vm->mode, what, ll);
		snprintf(p.addr, sizeof p.addr, "%s", ll);
	}
	c.m.out_af = 6;
	inet_pton(AF_INET6, target, c.m.out_dst);
	/* the control: the guest's own IPv6 works (its loopback) */
	snprintf(p.control, sizeof p.control,
		 "ping6 -c1 -W%d ::1 >/dev/null 2>&1; r=$?; if [ $r = 0 ]; then a=1; else a=0; fi; "
		 "echo \"control $r $a\"", a->tmo + 1);
	if (!strcmp(target, ll))
		snprintf(p.attempt, sizeof p.attempt,
			 "ip -6 neigh flush dev eth0 >/dev/null 2>&1; ping6 -c1 -W%d -I eth0 %s >/dev/null 2>&1; r=$?; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"", a->tmo, ll);
	else
		/* routed through the host's link-local address, as a router */
		snprintf(p.attempt, sizeof p.attempt,
			 "ip -6 neigh flush dev eth0 >/dev/null 2>&1; ip -6 route add %s/128 via %s dev eth0 2>/dev/null; "
			 "ping6 -c1 -W%d %s >/dev/null 2>&1; "
			 "r=$?; ip -6 route del %s/128 via %s dev eth0 2>/dev/null; "
			 "if [ $r = 0 ]; then a=1; else a=0; fi; echo \"attempt $r $a\"",
			 target, ll, a->tmo, target, target, ll);
	adv_run_probe(a, vm, &p);
	xev_end(&x);
}

/* ---- DNS rebinding ---- */

/* As root on NET_DOCTOR_DNS_PORT: the one loopback port the brokers' uids
 * may reach besides the host's resolver (isopod-netsetup(8), JAIL EGRESS),
 * privileged.  Not root: any free port (the user's brokers run as the user,
 * outside that chain, and could not bind a privileged one). */
int adv_rebind_open(struct adv *a)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(geteuid() ? 0 : NET_DOCTOR_DNS_PORT),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	struct own *o;
	int fd;

	if (a->nown >= ADV_MAXOWN)
		return errno = ENOSPC, -1;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0) {
		int e = errno;

		close(fd);
		return errno = e, -1;
	}
	o = &a->own[a->nown++];
	/* proto 0: no probe's target, so own_hits never counts it */
	*o = (struct own){ .port = ntohs(sa.sin_port), .proto = 0, .fd = fd, .rebind = 1 };
	snprintf(o->addr, sizeof o->addr, "127.0.0.1");
	a->rebind_port = ntohs(sa.sin_port);
	return 0;
}

/* Answer the brokers' queries: A for ip-A-B-C-D.ADV_REBIND_ZONE is
 * A.B.C.D (TTL 0); anything else REFUSED.  The query is parsed by
 * lib/dns.c (fuzzed), the answer is one record after the question. */
void adv_rebind_serve(struct adv *a, int fd)
{
	uint8_t q[512], r[600];
	struct sockaddr_in from;
	socklen_t fl;
	ssize_t n;

	while (fl = sizeof from,
	       (n = recvfrom(fd, q, sizeof q, MSG_DONTWAIT, (struct sockaddr *)&from, &fl)) >= 0) {
		struct dns_query dq;
		unsigned v[4];
		char tail[DNS_NAME_MAX + 1];
		int pr = dns_parse_query(q, (size_t)n, &dq), ok;
		size_t len;

		if (pr < 0)
			continue;
		ok = pr == 0 && dq.qtype == DNS_T_A &&
		     sscanf(dq.name, "ip-%3u-%3u-%3u-%3u.%1024s", &v[0], &v[1], &v[2], &v[3], tail) == 5 &&
		     !strcmp(tail, ADV_REBIND_ZONE) && v[0] < 256 && v[1] < 256 && v[2] < 256 && v[3] < 256;
		len = dns_reply_rcode(r, sizeof r, q, &dq, pr > 0 ? pr : ok ? DNS_RC_NOERROR : DNS_RC_REFUSED);
		if (!len)
			continue;
		if (ok && len + 16 <= sizeof r) {
			static const uint8_t rr[12] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4 };

			memcpy(r + len, rr, sizeof rr);
			r[len + 12] = (uint8_t)v[0], r[len + 13] = (uint8_t)v[1];
			r[len + 14] = (uint8_t)v[2], r[len + 15] = (uint8_t)v[3];
			len += 16;
			r[7] = 1; /* ANCOUNT */
			a->rebind_answers++;
		}
		sendto(fd, r, len, 0, (struct sockaddr *)&from, fl);
	}
}

struct rebind_ctx {
	struct xmatch m;
	long answers0;
	char name[128];
};

/* The ledger's refusal of name says why: the address, not the name. */
static int ledger_rebind(const struct avm *vm, const char *name)
{
	char p[PATH_MAX], line[4096];
	FILE *f;
	int found = 0;

	if (pathn(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), vm->id) < 0 ||
	    !(f = fopen(p, "re")))
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		const char *n = json_string_value(json_object_get(j, "name"));
		const char *r = json_string_value(json_object_get(j, "reason"));

		found = n && r && !strcmp(n, name) && strstr(r, "denied address");
		json_decref(j);
	}
	fclose(f);
	return found;
}

static int rebind_after(struct adv *a, const struct avm *vm, struct xev *x)
{
	struct rebind_ctx *c = x->ctx;
	long asked = a->rebind_answers - c->answers0, leaked;
	int led;

	if (xev_count(x, &c->m) < 0)
		return -1;
	leaked = x->out + x->back;
	led = ledger_rebind(vm, c->name);
	x->ev = json_pack("{s:I, s:I, s:b}", "resolver_answers", (json_int_t)asked,
			  "to_denied_address", (json_int_t)leaked, "ledger_says_denied_address", led);
	if (!asked)
		return snprintf(x->why, sizeof x->why, "the broker never asked the doctor's resolver for %s", c->name), -1;
	if (leaked)
		return snprintf(x->why, sizeof x->why, "a connection to the rebound address left"), -1;
	if (!led)
		return snprintf(x->why, sizeof x->why, "no ledger line refusing %s for its denied address", c->name), -1;
	return 0;
}

/* From a filtered vm: an allowed name (*.ADV_REBIND_ZONE) that resolves to
 * a denied address, through the proxy: the broker must refuse it. */
static void probe_rebind(struct adv *a, const struct avm *vm, const char *what, const char *addr)
{
	struct probe p;
	struct rebind_ctx c = { .answers0 = a->rebind_answers };
	struct xev x = { .after = rebind_after, .fd = -1, .ctx = &c, .tc_reason = -1 };
	unsigned v[4];

	adv_probe_new(&p, "dns-rebinding", IPPROTO_TCP, vm->gw, 3128, "wget");
	p.x = &x;
	if (sscanf(addr, "%u.%u.%u.%u", &v[0], &v[1], &v[2], &v[3]) != 4)
		return;
	snprintf(c.name, sizeof c.name, "ip-%u-%u-%u-%u." ADV_REBIND_ZONE, v[0], v[1], v[2], v[3]);
	snprintf(p.name, sizeof p.name, "%s/dns-rebinding-%s-%s", vm->mode, what, addr);
	if (!a->rebind_port) {
		adv_probe_missing(a, vm, p.cls, p.name + strlen(vm->mode) + 1, "the doctor's resolver is not running");
		return;
	}
	adv_control_for(a, vm, &p);
	snprintf(p.attempt, sizeof p.attempt,
		 "o=$(wget -q -O- http://%s/ 2>/dev/null); r=$?; if [ -n \"$o\" ]; then "
		 "a=1; else a=0; fi; echo \"attempt $r $a\"", c.name);
	p.broker = 1;
	snprintf(p.ledger_name, sizeof p.ledger_name, "%s", c.name);
	p.ledger_kind = "http";
	/* in: the guest's request to the proxy; out: the broker's own
	 * connection to the address's port 80 (on lo for loopback, where the
	 * broker's queries to the doctor's resolver go too), any interface */
	c.m = (struct xmatch){ .ethertype = ETH_P_IP, .ifindex = vm->ifindex, .in_af = 4,
			       .in_proto = IPPROTO_TCP, .in_port = 3128, .out_af = 4,
			       .out_proto = IPPROTO_TCP, .out_port = 80, .out_any_if = 1 };
	inet_pton(AF_INET, vm->guest, c.m.in_src);
	inet_pton(AF_INET, addr, c.m.out_dst);
	adv_run_probe(a, vm, &p);
	xev_end(&x);
}

void adv_probes_net2(struct adv *a, const struct avm *vm)
{
	probe_spoof(a, vm, 0);
	probe_spoof(a, vm, 1);
	probe_arp(a, vm);
	probe_v6(a, vm, "link-local", NULL);
	probe_v6(a, vm, "ula", a->v6_ula);
	probe_v6(a, vm, "global", a->v6_global);
	if (strcmp(vm->mode, "filtered"))
		return;
	probe_rebind(a, vm, "metadata", a->meta);
	probe_rebind(a, vm, "loopback", "127.0.0.1");
	probe_rebind(a, vm, "private", "10.0.0.1");
	if (a->nhost)
		probe_rebind(a, vm, "host", a->hostaddr[0]);
}
