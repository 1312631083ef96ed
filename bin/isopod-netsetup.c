/* isopod-netsetup - the host side of isopod's network: one persistent tap per
 * slot, one /30 per slot, IPv4 forwarding, and the nftables tables
 * `inet isopod` and `arp isopod` (plus, where Docker's DOCKER-USER chain
 * exists, two tagged rules there), written in one netlink batch and read
 * back to verify.
 *
 * Addressing (man isopod-netsetup): slot k uses the /30 at BASE + 4k;
 * gateway (the tap's host address) = BASE + 4k + 1, guest = BASE + 4k + 2,
 * guest MAC 02:69:73:00:KH:KL ("is", slot number big endian).
 *
 * Modes: slots 0..N-1 are filtered, N..N+M-1 open, fixed here and enforced
 * by the kernel per tap, because runs have no privilege to change nftables.
 * Each tap carries its mode in its ifalias ("isopod filtered"), which is
 * how lib/net.c picks a slot of the mode a VM asks for.
 *
 * The only tool that needs CAP_NET_ADMIN: it runs once per host boot, and the
 * taps it leaves behind are owned by the user who runs VMs, so runs need no
 * root. */

#include "net.h"
#include "netstate.h"
#include "ranges.h"
#include "tcfilter.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <linux/if_tun.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/x_tables.h>
#include <linux/netfilter/xt_conntrack.h>
#include <linux/netfilter_arp.h>
#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>

#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <libnftnl/udata.h>

#define USAGE "isopod-netsetup [--slots N] [--open-slots M] [--base ADDR] [--user UID] [--conn-limit N] [--no-docker-user] [--remove]"

#define TABLE "isopod"
#define TAP_PREFIX NET_TAP_PREFIX
#define MAX_SLOTS NET_MAX_SLOTS
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

/* Fail closed (man isopod-netsetup, FAIL CLOSED): per tap, a policy
 * routing rule at RULE_PREF blackholes everything from the tap unless its
 * packet carries FWMARK, which only `inet isopod` sets (open slots, in its
 * prerouting chain).  A flushed, deleted or replaced table leaves the
 * rule, so nothing from a guest is routed on.  RULE_PREF is low so
 * that no ordinary rule of the host's routes a guest's packet before the
 * blackhole; the bit is one that Docker, kube-proxy, Cilium, Tailscale
 * and WireGuard leave alone.
 *
 * Local delivery is routing too, and the kernel's `local` rule (priority
 * 0) came before the blackhole: a packet the tc filter passed for a
 * forwarded or a gateway destination, then DNATed or REDIRECTed by
 * another tool's ruleset to a host address, or sent to a host's port 53
 * with the table gone (nothing redirects it to the broker), was
 * delivered.  So the tc filter marks every IPv4 packet it passes with
 * TAPMARK and `inet isopod` clears the bit on what it accepts; the
 * kernel's `local` rule gives way to one at LOCAL_PREF that looks up only
 * packets without the bit (everything not from a tap, and a tap's packets
 * the table judged, whose input chain then judges them after any NAT).  A
 * marked packet meets the per-tap rules instead: ICMP to its own gateway
 * (ping, the errors the filter checked; no NAT makes ICMP a service) is
 * local, the rest blackholed at RULE_PREF; what is left with the bit (the
 * host's own traffic another tool marked so) is looked up at
 * LOCAL_LATE_PREF.  Both at the kernel's protocol, the first at priority
 * 0: `ip rule flush` (which spares 0) and a network manager deleting
 * every rule not the kernel's leave the host its local delivery.  The
 * filter's own route lookup carries no
 * mark, so it still sees the host's addresses as local.  Chosen over
 * marking what the table accepts and blackholing the rest: ARP's route
 * lookup (whether to answer for the gateway) carries no mark either, and
 * would fail with the table gone, taking the gateway's ping with it.
 * `--remove` puts the kernel's `local` rule back before it deletes ours,
 * so the host never goes without one. */
#define RULE_PREF NET_RULE_PREF
#define FWMARK NET_FWMARK
#define TAPMARK TCFILTER_TAPMARK
#define LOCAL_PREF NET_LOCAL_PREF
#define LOCAL_LATE_PREF NET_LOCAL_LATE_PREF

/* Destinations a guest never reaches through the host (forward path) are
 * lib/ranges.c's list, less the host's overrides (`allow_range` lines of
 * its config file, read once here).  The host's own addresses are local,
 * so they meet the input chain instead, whatever the overrides say. */
static struct range allow_ranges[RANGES_ALLOW_MAX];
static size_t nallow_ranges;

static unsigned nslots = 16;       /* filtered: 0..nslots-1 */
static unsigned nopen;             /* open: nslots..total-1 */
/* Connections one guest may have in the host's conntrack table at once:
 * new ones beyond are dropped, so a flood from one VM cannot fill the
 * table every other flow of the host needs. */
static unsigned conn_limit = 4096;
static unsigned total;
static int docker_opt = 1;         /* --no-docker-user clears it */
static uint32_t base = 0x0ad50000; /* 10.213.0.0, host order */
static int prefix;                 /* of the whole slot range */
static long owner = -1;

static void slot_ip(unsigned k, unsigned host, char *out)
{
	struct in_addr a = { htonl(base + 4 * k + host) };

	inet_ntop(AF_INET, &a, out, INET_ADDRSTRLEN);
}

static void slot_mac(unsigned k, uint8_t mac[6])
{
	mac[0] = 0x02, mac[1] = 0x69, mac[2] = 0x73, mac[3] = 0x00;
	mac[4] = (uint8_t)(k >> 8), mac[5] = (uint8_t)k;
}

static void tap_name(unsigned k, char out[IFNAMSIZ])
{
	snprintf(out, IFNAMSIZ, TAP_PREFIX "%u", k % MAX_SLOTS);
}

static const char *slot_mode(unsigned k)
{
	return k < nslots ? "filtered" : "open";
}

/* ---- rtnetlink -------------------------------------------------------- */

static struct mnl_socket *rtnl;
static uint32_t rtnl_seq;

/* Send one request and wait for its ack.  0 or -errno. */
static int rtnl_talk(struct nlmsghdr *nlh)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t portid = mnl_socket_get_portid(rtnl);
	ssize_t n;
	int r;

	nlh->nlmsg_flags |= NLM_F_ACK;
	nlh->nlmsg_seq = ++rtnl_seq;
	if (mnl_socket_sendto(rtnl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	for (;;) {
		n = mnl_socket_recvfrom(rtnl, buf, sizeof buf);
		if (n < 0)
			return -errno;
		r = mnl_cb_run(buf, (size_t)n, rtnl_seq, portid, NULL, NULL);
		if (r == MNL_CB_ERROR)
			return -errno;
		if (r == MNL_CB_STOP)
			return 0;
	}
}

/* Up, with its mode in its ifalias (readable by anybody in sysfs; "":
 * none, NULL: the alias as it is). */
static int link_set(int ifindex, const char *alias)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifi;

	nlh->nlmsg_type = RTM_NEWLINK;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	ifi->ifi_change = IFF_UP;
	ifi->ifi_flags = IFF_UP;
	if (alias && *alias)
		mnl_attr_put_strz(nlh, IFLA_IFALIAS, alias);
	else if (alias) /* empty: the kernel drops the alias (NULL: kept) */
		mnl_attr_put(nlh, IFLA_IFALIAS, 0, alias);
	return rtnl_talk(nlh);
}

static int link_del(int ifindex)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifi;

	nlh->nlmsg_type = RTM_DELLINK;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	return rtnl_talk(nlh);
}

/* gw/30 on the tap; NLM_F_REPLACE makes a second run a no-op. */
static int addr_set(int ifindex, unsigned k)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifaddrmsg *ifa;
	uint32_t gw = htonl(base + 4 * k + 1), bc = htonl(base + 4 * k + 3);

	nlh->nlmsg_type = RTM_NEWADDR;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE;
	ifa = mnl_nlmsg_put_extra_header(nlh, sizeof *ifa);
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = 30;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (unsigned)ifindex;
	mnl_attr_put_u32(nlh, IFA_LOCAL, gw);
	mnl_attr_put_u32(nlh, IFA_ADDRESS, gw);
	mnl_attr_put_u32(nlh, IFA_BROADCAST, bc);
	return rtnl_talk(nlh);
}

/* ---- taps --------------------------------------------------------------- */

static int is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A persistent tap, owned by `owner`.  Returns 1 created, 0 existed,
 * and sets *busy when a VM has it open now (TUNSETIFF says EBUSY: the
 * existing device is left as it is). */
static int tap_make(const char *name, int *busy)
{
	char p[PATH_MAX];
	struct ifreq ifr;
	int fd, existed;

	*busy = 0;
	pathf(p, sizeof p, "/sys/class/net/%s", name);
	existed = is_dir(p);
	if (existed) {
		pathf(p, sizeof p, "/sys/class/net/%s/tun_flags", name);
		if (access(p, F_OK))
			die(EX_CONFLICT, "unable to use %s: an interface of that name exists and is not a tap",
			    name);
	}
	fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		die(EX_SYS, "unable to open /dev/net/tun:");
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		if (errno == EBUSY && existed) {
			close(fd);
			*busy = 1;
			return 0;
		}
		die(EX_SYS, "unable to create tap %s (TUNSETIFF):", name);
	}
	if (owner >= 0 && ioctl(fd, TUNSETOWNER, (unsigned long)owner) < 0)
		die(EX_SYS, "unable to set the owner of %s:", name);
	if (ioctl(fd, TUNSETPERSIST, 1L) < 0)
		die(EX_SYS, "unable to make %s persistent:", name);
	close(fd);
	return !existed;
}

/* IPv6 off on the tap: no link-local address, nothing for a guest to talk
 * to over v6 (the table drops it too).  Read back (lib/net.c, as a claim
 * reads it): 1 off or no IPv6 here, 0 not (the tap is not advertised). */
static int tap_no_ipv6(const char *name)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
	if ((fd = open(p, O_WRONLY | O_CLOEXEC)) >= 0) {
		if (write(fd, "1", 1) != 1)
			warn("unable to disable IPv6 on %s: %s", name, strerror(errno));
		close(fd);
	}
	if (net_tap_ipv6_off(name))
		return 1;
	warn("verify: IPv6 is not off on %s", name);
	return 0;
}

static void sysctl_write(const char *p, const char *v)
{
	int fd = open(p, O_WRONLY | O_CLOEXEC);

	if (fd < 0 || write(fd, v, strlen(v)) != (ssize_t)strlen(v))
		die(EX_SYS, "unable to write %s:", p);
	close(fd);
}

/* IPv4 settings of a tap.  ARP: answer only for the tap's own address
 * (the gateway) and ask only from it, so a guest cannot list the host's
 * other addresses (uplink, docker0, other gateways) by ARP, nor learn
 * them from the host's requests.  The rest is kept by the kernel even
 * without our tables: no ICMP redirects or source routes accepted from
 * a guest, and strict reverse-path filtering (a source that does not
 * route back through the tap is dropped). */
static void tap_ipv4(const char *name)
{
	static const char *const set[][2] = {
		{ "arp_ignore", "1" },
		{ "arp_announce", "2" },
		{ "accept_redirects", "0" },
		{ "accept_source_route", "0" },
		{ "rp_filter", "1" },
	};
	char p[PATH_MAX];
	size_t i;

	for (i = 0; i < sizeof set / sizeof set[0]; i++) {
		pathf(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/%s", name, set[i][0]);
		sysctl_write(p, set[i][1]);
	}
}

/* ---- nftables: expressions ------------------------------------------------ */

static struct nftnl_expr *expr_new(struct nftnl_rule *r, const char *name)
{
	struct nftnl_expr *e = nftnl_expr_alloc(name);

	if (!e)
		die(EX_SYS, "unable to allocate memory:");
	nftnl_rule_add_expr(r, e);
	return e;
}

static void x_meta(struct nftnl_rule *r, uint32_t key)
{
	struct nftnl_expr *e = expr_new(r, "meta");

	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
}

static void x_cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len)
{
	struct nftnl_expr *e = expr_new(r, "cmp");

	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
	nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

static void x_payload(struct nftnl_rule *r, uint32_t pbase, uint32_t off, uint32_t len)
{
	struct nftnl_expr *e = expr_new(r, "payload");

	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, pbase);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
}

static void x_bitwise(struct nftnl_rule *r, const void *mask, uint32_t len)
{
	struct nftnl_expr *e = expr_new(r, "bitwise");
	static const uint8_t zero[16];

	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, zero, len);
}

/* A port (host order) into register 1, for redir and the canary's
 * rewrite. */
static void x_port_reg1(struct nftnl_rule *r, uint16_t port_host)
{
	struct nftnl_expr *e = expr_new(r, "immediate");
	uint16_t port = htons(port_host);

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
	nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &port, sizeof port);
}

static void x_counter(struct nftnl_rule *r)
{
	expr_new(r, "counter");
}

/* Terminal verdict; chain for jump/goto. */
static void x_verdict(struct nftnl_rule *r, int verdict, const char *chain)
{
	struct nftnl_expr *e = expr_new(r, "immediate");

	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
	nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
	if (chain)
		nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
}

/* iifname/oifname: exact (16 bytes, NUL padded) or prefix ("isopod-tap*",
 * compared without the NUL, which is how nft spells a wildcard). */
static void m_ifname(struct nftnl_rule *r, uint32_t key, uint32_t op, const char *name, int wildcard)
{
	char b[IFNAMSIZ] = { 0 };

	memcpy(b, name, strlen(name));
	x_meta(r, key);
	x_cmp(r, op, b, wildcard ? (uint32_t)strlen(name) : IFNAMSIZ);
}

static void m_nfproto(struct nftnl_rule *r, uint8_t proto)
{
	x_meta(r, NFT_META_NFPROTO);
	x_cmp(r, NFT_CMP_EQ, &proto, 1);
}

static void m_l4proto(struct nftnl_rule *r, uint8_t proto)
{
	x_meta(r, NFT_META_L4PROTO);
	x_cmp(r, NFT_CMP_EQ, &proto, 1);
}

/* ip saddr (off 12) / daddr (off 16) op net/len; addr in host order. */
static void m_ip(struct nftnl_rule *r, uint32_t off, uint32_t op, uint32_t addr, int len)
{
	uint32_t mask = len ? htonl(~0u << (32 - len)) : 0, net = htonl(addr) & mask;

	m_nfproto(r, NFPROTO_IPV4);
	x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, off, 4);
	if (len != 32)
		x_bitwise(r, &mask, 4);
	x_cmp(r, op, &net, 4);
}

/* ip6 daddr (off 24) op net/len. */
static void m_ip6_daddr(struct nftnl_rule *r, uint32_t op, const uint8_t net[16], int len)
{
	uint8_t mask[16] = { 0 }, n[16];

	for (int i = 0; i < len; i++)
		mask[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	for (int i = 0; i < 16; i++)
		n[i] = net[i] & mask[i];
	m_nfproto(r, NFPROTO_IPV6);
	x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 24, 16);
	if (len != 128)
		x_bitwise(r, mask, 16);
	x_cmp(r, op, n, 16);
}

/* ether saddr == mac, guarded by iiftype ether as nft does. */
static void m_ether_saddr(struct nftnl_rule *r, const uint8_t mac[6])
{
	uint16_t type = ARPHRD_ETHER;

	x_meta(r, NFT_META_IIFTYPE);
	x_cmp(r, NFT_CMP_EQ, &type, 2);
	x_payload(r, NFT_PAYLOAD_LL_HEADER, 6, 6);
	x_cmp(r, NFT_CMP_EQ, mac, 6);
}

static void m_dport(struct nftnl_rule *r, uint8_t proto, uint16_t port)
{
	uint16_t p = htons(port);

	m_l4proto(r, proto);
	x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
	x_cmp(r, NFT_CMP_EQ, &p, 2);
}

/* Raw bytes at a network header offset (the ARP header in family arp). */
static void m_net_bytes(struct nftnl_rule *r, uint32_t off, const void *data, uint32_t len)
{
	x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, off, len);
	x_cmp(r, NFT_CMP_EQ, data, len);
}

/* ---- nftables: the batch ------------------------------------------------- */

static struct mnl_nlmsg_batch *batch;
static uint32_t nft_seq;
static unsigned nmsgs;            /* messages expecting an ack */

/* What our tables should contain, for the read-back. */
#define MAX_CHAINS 24
static struct {
	uint16_t family;
	const char *name;
	unsigned rules, seen_rules;
	int seen;
} chains[MAX_CHAINS];
static unsigned nchains, nrules;

/* Our rules in Docker's DOCKER-USER chain: found before the batch (to be
 * replaced), expected after it. */
static uint64_t *dk_handles;
static unsigned dk_n, dk_want, dk_seen;
static int dk_chain;              /* DOCKER-USER exists */

static const char *family_name(uint16_t f)
{
	return f == NFPROTO_ARP ? "arp" : f == NFPROTO_IPV4 ? "ip" : "inet";
}

static void batch_next(void)
{
	if (!mnl_nlmsg_batch_next(batch))
		die(EX_SYS, "unable to build the nftables batch: too large (%u slots)", total);
}

static struct nlmsghdr *batch_hdr(uint16_t type, uint16_t family, uint16_t flags)
{
	nmsgs++;
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(batch), type, family,
				     flags | NLM_F_ACK, nft_seq++);
}

static void put_table(uint16_t family, uint16_t type, uint16_t flags)
{
	struct nftnl_table *t = nftnl_table_alloc();

	if (!t)
		die(EX_SYS, "unable to allocate memory:");
	nftnl_table_set_str(t, NFTNL_TABLE_NAME, TABLE);
	nftnl_table_nlmsg_build_payload(batch_hdr(type, family, flags), t);
	nftnl_table_free(t);
	batch_next();
}

/* Replacing a table is atomic: add (so the delete cannot fail on a first
 * run), delete, add again; its chains and rules follow in the batch. */
static void put_fresh_table(uint16_t family)
{
	put_table(family, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(family, NFT_MSG_DELTABLE, 0);
	put_table(family, NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_EXCL);
}

/* A chain; hook < 0 for a regular (jump target) chain. */
static void put_chain(uint16_t family, const char *name, int hook, int prio, const char *type)
{
	struct nftnl_chain *c = nftnl_chain_alloc();

	if (!c)
		die(EX_SYS, "unable to allocate memory:");
	if (nchains == MAX_CHAINS)
		die(EX_SYS, "unable to build the table: too many chains");
	chains[nchains].family = family;
	chains[nchains++].name = name;
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, TABLE);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	if (hook >= 0) {
		nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t)hook);
		nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
		nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, type);
		nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
	}
	nftnl_chain_nlmsg_build_payload(batch_hdr(NFT_MSG_NEWCHAIN, family, NLM_F_CREATE), c);
	nftnl_chain_free(c);
	batch_next();
}

static uint16_t cur_family = NFPROTO_INET; /* of the rules rule_new makes */

static struct nftnl_rule *rule_new(const char *chain)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	unsigned i;

	if (!r)
		die(EX_SYS, "unable to allocate memory:");
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, cur_family);
	for (i = 0; i < nchains; i++)
		if (chains[i].family == cur_family && !strcmp(chains[i].name, chain))
			chains[i].rules++;
	nrules++;
	return r;
}

static void rule_put(struct nftnl_rule *r)
{
	nftnl_rule_nlmsg_build_payload(batch_hdr(NFT_MSG_NEWRULE, cur_family,
						 NLM_F_CREATE | NLM_F_APPEND), r);
	nftnl_rule_free(r);
	batch_next();
}

/* `<iif|oif>name "isopod-tap*" [counter] verdict [chain]` */
static void rule_taps(const char *chain, uint32_t key, int verdict, const char *target)
{
	struct nftnl_rule *r = rule_new(chain);

	m_ifname(r, key, NFT_CMP_EQ, TAP_PREFIX, 1);
	if (verdict == NF_DROP)
		x_counter(r);
	x_verdict(r, verdict, target);
	rule_put(r);
}

static void rule_drop_all(const char *chain)
{
	struct nftnl_rule *r = rule_new(chain);

	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	rule_put(r);
}

/* `ct state MASK` (op NEQ: any of those states; EQ: none of them) */
static void m_ct_state(struct nftnl_rule *r, uint32_t ctmask, uint32_t op)
{
	struct nftnl_expr *e = expr_new(r, "ct");
	uint32_t zero = 0;

	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
	x_bitwise(r, &ctmask, 4);
	x_cmp(r, op, &zero, 4);
}

#define CT_REPLY (NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED))

/* `ct state established,related` */
static void m_ct_reply(struct nftnl_rule *r)
{
	m_ct_state(r, CT_REPLY, NFT_CMP_NEQ);
}

/* `ct original ip daddr addr` (host order) */
static void m_ct_orig_daddr(struct nftnl_rule *r, uint32_t addr)
{
	struct nftnl_expr *e;
	uint32_t a = htonl(addr);

	m_nfproto(r, NFPROTO_IPV4);
	e = expr_new(r, "ct");
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_DST_IP);
	nftnl_expr_set_u8(e, NFTNL_EXPR_CT_DIR, IP_CT_DIR_ORIGINAL);
	nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
	x_cmp(r, NFT_CMP_EQ, &a, 4);
}

/* `[<key> "isopod-tap*"] ct state established,related accept` */
static void rule_ct_reply(const char *chain, uint32_t key, const char *ifname)
{
	struct nftnl_rule *r = rule_new(chain);

	if (ifname)
		m_ifname(r, key, NFT_CMP_EQ, ifname, 1);
	m_ct_reply(r);
	x_verdict(r, NF_ACCEPT, NULL);
	rule_put(r);
}

static void rule_icmp_echo(const char *chain)
{
	struct nftnl_rule *r = rule_new(chain);
	uint8_t type = 8; /* icmp echo-request */

	m_nfproto(r, NFPROTO_IPV4);
	m_l4proto(r, IPPROTO_ICMP);
	x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 0, 1);
	x_cmp(r, NFT_CMP_EQ, &type, 1);
	x_verdict(r, NF_ACCEPT, NULL);
	rule_put(r);
}

static void rule_port(const char *chain, uint8_t proto, uint16_t port)
{
	struct nftnl_rule *r = rule_new(chain);

	m_dport(r, proto, port);
	x_verdict(r, NF_ACCEPT, NULL);
	rule_put(r);
}

/* `iifname "isopod-tap*" meta nfproto ipv4 <proto> dport 53 redirect to :1053` */
static void rule_dns_redirect(uint8_t proto)
{
	struct nftnl_rule *r = rule_new("dns");
	struct nftnl_expr *e;

	m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	m_nfproto(r, NFPROTO_IPV4);
	m_dport(r, proto, PORT_DNS);
	x_port_reg1(r, PORT_BROKER_DNS);
	e = expr_new(r, "redir");
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MAX, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
	rule_put(r);
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
static void rules_deny(const char *chain)
{
	const struct range_def *l;
	struct nftnl_rule *r;
	struct range b;
	const char *why;
	size_t n, i;

	for (i = 0; i < nallow_ranges; i++) {
		r = rule_new(chain);
		if (allow_ranges[i].af == 4)
			m_ip(r, 16, NFT_CMP_EQ, range_v4(&allow_ranges[i]), allow_ranges[i].len);
		else
			m_ip6_daddr(r, NFT_CMP_EQ, allow_ranges[i].a, allow_ranges[i].len);
		x_counter(r);
		x_verdict(r, NFT_RETURN, NULL);
		rule_put(r);
	}
	l = ranges_list(&n);
	for (i = 0; i < n; i++) {
		if (range_parse(l[i].cidr, &b, &why) < 0)
			die(EX_SYS, "unable to parse the deny list's %s: %s", l[i].cidr, why);
		r = rule_new(chain);
		if (b.af == 4)
			m_ip(r, 16, NFT_CMP_EQ, range_v4(&b), b.len);
		else
			m_ip6_daddr(r, NFT_CMP_EQ, b.a, b.len);
		x_counter(r);
		x_verdict(r, NF_DROP, NULL);
		rule_put(r);
	}
}

/* The table `inet isopod`. */
static void build_inet(void)
{
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	uint8_t mac[6];
	unsigned k;

	cur_family = NFPROTO_INET;
	put_fresh_table(NFPROTO_INET);

	/* Hook order for a packet from a tap: conntrack (-200), then
	 * prerouting (-150, anti-spoof), then dns (-100, dstnat: the redirect
	 * sees only what passed anti-spoof), routing, then input or forward
	 * (-10, which see the redirected port 1053). */
	put_chain(NFPROTO_INET, "prerouting", NF_INET_PRE_ROUTING, -150, "filter");
	put_chain(NFPROTO_INET, "vm_pre", -1, 0, NULL);
	put_chain(NFPROTO_INET, "dns", NF_INET_PRE_ROUTING, -100, "nat");
	put_chain(NFPROTO_INET, "input", NF_INET_LOCAL_IN, -10, "filter");
	put_chain(NFPROTO_INET, "vm_in", -1, 0, NULL);
	put_chain(NFPROTO_INET, "gw_filtered", -1, 0, NULL);
	put_chain(NFPROTO_INET, "gw_open", -1, 0, NULL);
	put_chain(NFPROTO_INET, "forward", NF_INET_FORWARD, -10, "filter");
	put_chain(NFPROTO_INET, "vm_fwd", -1, 0, NULL);
	put_chain(NFPROTO_INET, "fwd_open", -1, 0, NULL);
	put_chain(NFPROTO_INET, "postrouting", NF_INET_POST_ROUTING, 100, "nat");

	/* Anti-spoof, before routing so it covers input and forward alike:
	 * a frame from tap K passes only with slot K's MAC and IPv4 source,
	 * and an IPv4 header without options (version 4, length 5 words:
	 * no router alert reaching the host's raw sockets before any hook
	 * of ours, no source routes).  Everything else from any isopod tap —
	 * IPv6 (no policy allows it yet), spoofed addresses, IP options, a
	 * tap left over from a larger setup — is dropped. */
	rule_taps("prerouting", NFT_META_IIFNAME, NFT_JUMP, "vm_pre");
	for (k = 0; k < total; k++) {
		static const uint8_t v4ihl5 = 0x45;

		tap_name(k, name);
		slot_mac(k, mac);
		r = rule_new("vm_pre");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ct_state(r, NF_CT_STATE_BIT(IP_CT_NEW), NFT_CMP_NEQ);
		{
			struct nftnl_expr *e = expr_new(r, "connlimit");

			nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_COUNT, conn_limit);
			nftnl_expr_set_u32(e, NFTNL_EXPR_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV);
		}
		x_counter(r);
		x_verdict(r, NF_DROP, NULL);
		rule_put(r);
		r = rule_new("vm_pre");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ether_saddr(r, mac);
		m_ip(r, 12, NFT_CMP_EQ, base + 4 * k + 2, 32);
		x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, 0, 1);
		x_cmp(r, NFT_CMP_EQ, &v4ihl5, 1);
		x_verdict(r, NFT_RETURN, NULL);
		rule_put(r);
	}
	rule_drop_all("vm_pre");

	/* DNS: a guest asks port 53 of any address; it lands on its own
	 * gateway's port 1053, where its broker (unprivileged, so not on
	 * 53) answers.  `redirect` takes the tap's own address, the gateway,
	 * and conntrack maps the replies back to port 53. */
	rule_dns_redirect(IPPROTO_UDP);
	rule_dns_redirect(IPPROTO_TCP);

	/* The host itself: only slot K's own gateway address, and there only
	 * the gateway services of the slot's mode.  Any other host address
	 * (uplink, docker0, another slot's gateway, broadcast) is dropped. */
	rule_taps("input", NFT_META_IIFNAME, NFT_JUMP, "vm_in");
	/* The gateway addresses belong to the taps: from anywhere else but
	 * the host itself (lo) only replies to what the host started reach
	 * them, so the brokers serve their guests, not the uplink's
	 * neighbours (nothing is anti-spoofed there). */
	r = rule_new("input");
	m_ifname(r, NFT_META_IIFNAME, NFT_CMP_NEQ, "lo", 0);
	m_ip(r, 16, NFT_CMP_EQ, base, prefix);
	m_ct_state(r, CT_REPLY, NFT_CMP_EQ);
	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	rule_put(r);
	/* Per slot: replies to what the host itself started towards slot K's
	 * guest (a test probing a guest's listener, say) come back, ICMP
	 * errors about them included.  Only those: conntrack calls an ICMP
	 * error RELATED to whatever connection its quoted header names, so an
	 * unbound `ct state related accept` would let a guest inject errors
	 * into any of the host's connections (uplink, loopback with
	 * route_localnet, other slots).  Then its own gateway's services. */
	for (k = 0; k < total; k++) {
		tap_name(k, name);
		r = rule_new("vm_in");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ct_orig_daddr(r, base + 4 * k + 2);
		m_ct_reply(r);
		x_verdict(r, NF_ACCEPT, NULL);
		rule_put(r);
		r = rule_new("vm_in");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ip(r, 16, NFT_CMP_EQ, base + 4 * k + 1, 32);
		x_verdict(r, NFT_GOTO, k < nslots ? "gw_filtered" : "gw_open");
		rule_put(r);
	}
	rule_drop_all("vm_in");
	/* filtered: the broker's DNS and HTTP proxy; open: DNS only (the
	 * broker resolves for every VM; open VMs connect directly). */
	rule_icmp_echo("gw_filtered");
	rule_port("gw_filtered", IPPROTO_TCP, PORT_BROKER_HTTP);
	rule_port("gw_filtered", IPPROTO_UDP, PORT_BROKER_DNS);
	rule_port("gw_filtered", IPPROTO_TCP, PORT_BROKER_DNS);
	rule_drop_all("gw_filtered");
	rule_icmp_echo("gw_open");
	rule_port("gw_open", IPPROTO_UDP, PORT_BROKER_DNS);
	rule_port("gw_open", IPPROTO_TCP, PORT_BROKER_DNS);
	rule_drop_all("gw_open");

	/* Forwarding: only open slots, listed one by one, so a filtered slot
	 * (or any tap without a slot) falls to the final drop: filtered VMs
	 * forward nothing at all, their egress is the broker's.  Open slots
	 * never to another VM nor a denied range; to a VM only replies. */
	rule_taps("forward", NFT_META_IIFNAME, NFT_JUMP, "vm_fwd");
	rule_ct_reply("forward", NFT_META_OIFNAME, TAP_PREFIX);
	rule_taps("forward", NFT_META_OIFNAME, NF_DROP, NULL);
	for (k = nslots; k < total; k++) {
		tap_name(k, name);
		r = rule_new("vm_fwd");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		x_verdict(r, NFT_GOTO, "fwd_open");
		rule_put(r);
	}
	rule_drop_all("vm_fwd");
	/* What conntrack cannot track (invalid: a SYN|FIN, an ICMP error
	 * about nothing) is never masqueraded: it would leave with the
	 * guest's own 10.x source. */
	r = rule_new("fwd_open");
	m_ct_state(r, NF_CT_STATE_INVALID_BIT | NF_CT_STATE_UNTRACKED_BIT, NFT_CMP_NEQ);
	x_counter(r);
	x_verdict(r, NF_DROP, NULL);
	rule_put(r);
	rule_taps("fwd_open", NFT_META_OIFNAME, NF_DROP, NULL);
	rules_deny("fwd_open");

	/* open mode: NAT out of the slot range to anything but a tap, nor
	 * lo: the host's own datagrams from a gateway address to itself (the
	 * brokers' canaries) stay as they are. */
	r = rule_new("postrouting");
	m_ip(r, 12, NFT_CMP_EQ, base, prefix);
	m_ifname(r, NFT_META_OIFNAME, NFT_CMP_NEQ, TAP_PREFIX, 1);
	m_ifname(r, NFT_META_OIFNAME, NFT_CMP_NEQ, "lo", 0);
	expr_new(r, "masq");
	rule_put(r);
}

/* The table `arp isopod`.  ARP is not IP: the inet family's hooks (ingress
 * included) never see it, so it needs a table of the arp family.  From tap
 * K only slot K's own ARP passes — Ethernet/IPv4 ARP whose frame source and
 * sender hardware address are slot K's MAC and whose sender IP is slot K's
 * guest address — so a guest cannot claim its gateway's address, another
 * slot's, or another MAC in the host's neighbour table. */
static void build_arp(void)
{
	static const uint8_t eth_ipv4[6] = { 0, 1, 8, 0, 6, 4 }; /* htype ptype hlen plen */
	struct nftnl_rule *r;
	char name[IFNAMSIZ];
	uint8_t sender[10];
	unsigned k;

	cur_family = NFPROTO_ARP;
	put_fresh_table(NFPROTO_ARP);
	put_chain(NFPROTO_ARP, "input", NF_ARP_IN, 0, "filter");
	put_chain(NFPROTO_ARP, "vm_arp", -1, 0, NULL);
	rule_taps("input", NFT_META_IIFNAME, NFT_JUMP, "vm_arp");
	for (k = 0; k < total; k++) {
		uint32_t ip = htonl(base + 4 * k + 2);

		tap_name(k, name);
		slot_mac(k, sender);
		memcpy(sender + 6, &ip, 4);
		r = rule_new("vm_arp");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		m_ether_saddr(r, sender);
		m_net_bytes(r, 0, eth_ipv4, sizeof eth_ipv4);
		m_net_bytes(r, 8, sender, sizeof sender); /* sha, spa */
		x_verdict(r, NF_ACCEPT, NULL);
		rule_put(r);
	}
	rule_drop_all("vm_arp");
	cur_family = NFPROTO_INET;
}

/* ---- Docker's DOCKER-USER ------------------------------------------------ */

static void rule_tag(struct nftnl_rule *r)
{
	struct nftnl_udata_buf *u = nftnl_udata_buf_alloc(NFT_USERDATA_MAXLEN);

	if (!u || !nftnl_udata_put_strz(u, NFTNL_UDATA_RULE_COMMENT, DOCKER_TAG))
		die(EX_SYS, "unable to allocate memory:");
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

static struct nftnl_rule *docker_rule(void)
{
	struct nftnl_rule *r = nftnl_rule_alloc();

	if (!r)
		die(EX_SYS, "unable to allocate memory:");
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, DOCKER_TABLE);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, DOCKER_CHAIN);
	nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_IPV4);
	return r;
}

/* Delete our earlier rules there (by handle, found by docker_scan). */
static void docker_del(void)
{
	unsigned i;

	for (i = 0; i < dk_n; i++) {
		struct nftnl_rule *r = docker_rule();

		nftnl_rule_set_u64(r, NFTNL_RULE_HANDLE, dk_handles[i]);
		nftnl_rule_nlmsg_build_payload(batch_hdr(NFT_MSG_DELRULE, NFPROTO_IPV4, 0), r);
		nftnl_rule_free(r);
		batch_next();
	}
}

/* `-m conntrack --ctstate RELATED,ESTABLISHED` as iptables-nft writes it:
 * an xtables match run by nft_compat.  (iptables-nft 1.8.9 cannot read
 * nft's native `ct state` and then refuses the whole table: Docker's own
 * iptables calls would fail.) */
static void x_xt_ctstate(struct nftnl_rule *r)
{
	struct nftnl_expr *e = expr_new(r, "match");
	size_t len = XT_ALIGN(sizeof(struct xt_conntrack_mtinfo3));
	struct xt_conntrack_mtinfo3 *ct = calloc(1, len); /* the expr owns it */

	if (!ct)
		die(EX_SYS, "unable to allocate memory:");
	ct->match_flags = XT_CONNTRACK_STATE;
	ct->state_mask = XT_CONNTRACK_STATE_BIT(IP_CT_ESTABLISHED) |
			 XT_CONNTRACK_STATE_BIT(IP_CT_RELATED);
	nftnl_expr_set_str(e, NFTNL_EXPR_MT_NAME, "conntrack");
	nftnl_expr_set_u32(e, NFTNL_EXPR_MT_REV, 3);
	nftnl_expr_set(e, NFTNL_EXPR_MT_INFO, ct, (uint32_t)len);
}

/* At the head of DOCKER-USER (Docker ends it with a RETURN), in the forms
 * iptables-nft itself writes, so `iptables -S` still reads the chain:
 *   -i isopod-tap+ -m comment --comment isopod -j ACCEPT
 *   -o isopod-tap+ -m conntrack --ctstate RELATED,ESTABLISHED
 *      -m comment --comment isopod -j ACCEPT
 * (the comment is rule userdata, as both nft and iptables-nft keep it).
 * Accepting there is safe: `inet isopod` (priority -10, before Docker's 0)
 * has already dropped whatever a VM may not send or receive. */
static void docker_add(void)
{
	struct nftnl_rule *r;

	/* Each goes to the head: the second one first. */
	r = docker_rule();
	m_ifname(r, NFT_META_OIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_xt_ctstate(r);
	x_counter(r);
	x_verdict(r, NF_ACCEPT, NULL);
	rule_tag(r);
	nftnl_rule_nlmsg_build_payload(batch_hdr(NFT_MSG_NEWRULE, NFPROTO_IPV4, NLM_F_CREATE), r);
	nftnl_rule_free(r);
	batch_next();
	r = docker_rule();
	m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_counter(r);
	x_verdict(r, NF_ACCEPT, NULL);
	rule_tag(r);
	nftnl_rule_nlmsg_build_payload(batch_hdr(NFT_MSG_NEWRULE, NFPROTO_IPV4, NLM_F_CREATE), r);
	nftnl_rule_free(r);
	batch_next();
}

/* Send the batch; read one ack (or error) per message.  0, or dies. */
static void nft_send(struct mnl_socket *nl)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	unsigned replies = 0;
	int err = 0;
	uint32_t errseq = 0;
	ssize_t n;

	if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(batch), mnl_nlmsg_batch_size(batch)) < 0)
		die(EX_SYS, "unable to send the nftables batch:");
	while (replies < nmsgs) {
		struct nlmsghdr *nlh;
		int len;

		n = mnl_socket_recvfrom(nl, buf, sizeof buf);
		if (n < 0) {
			if (errno == EAGAIN && err)
				break; /* the kernel stops acking after an abort */
			die(EX_SYS, "unable to read the nftables acks (%u of %u):", replies, nmsgs);
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
		die(EX_SYS, "unable to load tables inet/arp " TABLE " (message %u of the batch):", errseq);
	}
}

/* ---- nftables: read back ------------------------------------------------- */

static int chain_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	const char *t, *n;
	uint32_t f;
	unsigned i;

	(void)data;
	if (!c || nftnl_chain_nlmsg_parse(nlh, c) < 0)
		die(EX_SYS, "unable to parse a chain:");
	t = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
	n = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
	f = nftnl_chain_get_u32(c, NFTNL_CHAIN_FAMILY);
	if (!strcmp(t, TABLE))
		for (i = 0; i < nchains; i++)
			if (chains[i].family == f && !strcmp(chains[i].name, n))
				chains[i].seen++;
	if (f == NFPROTO_IPV4 && !strcmp(t, DOCKER_TABLE) && !strcmp(n, DOCKER_CHAIN))
		dk_chain = 1;
	nftnl_chain_free(c);
	return MNL_CB_OK;
}

static int rule_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	unsigned i, *count = data;
	uint32_t f;

	if (!r || nftnl_rule_nlmsg_parse(nlh, r) < 0)
		die(EX_SYS, "unable to parse a rule:");
	f = nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY);
	if (!strcmp(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), TABLE)) {
		++*count;
		for (i = 0; i < nchains; i++)
			if (chains[i].family == f &&
			    !strcmp(chains[i].name, nftnl_rule_get_str(r, NFTNL_RULE_CHAIN)))
				chains[i].seen_rules++;
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* Our tagged rules in DOCKER-USER: counted, their handles kept. */
static int docker_cb(const struct nlmsghdr *nlh, void *data)
{
	struct nftnl_rule *r = nftnl_rule_alloc();

	(void)data;
	if (!r || nftnl_rule_nlmsg_parse(nlh, r) < 0)
		die(EX_SYS, "unable to parse a rule:");
	if (nftnl_rule_get_u32(r, NFTNL_RULE_FAMILY) == NFPROTO_IPV4 &&
	    !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_TABLE), DOCKER_TABLE) &&
	    !strcmp(nftnl_rule_get_str(r, NFTNL_RULE_CHAIN), DOCKER_CHAIN) && rule_tagged(r)) {
		if (!(dk_handles = realloc(dk_handles, (dk_seen + 1) * sizeof *dk_handles)))
			die(EX_SYS, "unable to allocate memory:");
		dk_handles[dk_seen++] = nftnl_rule_get_u64(r, NFTNL_RULE_HANDLE);
	}
	nftnl_rule_free(r);
	return MNL_CB_OK;
}

/* Dump chains or rules of a family (rules: of table `table` only; the
 * kernel's dump stops after the first table of that name, so one family
 * per dump). */
static void nft_dump(struct mnl_socket *nl, uint16_t type, uint16_t family, const char *table,
		     mnl_cb_t cb, void *data)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t seq = nft_seq++, portid = mnl_socket_get_portid(nl);
	struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, type, family, NLM_F_DUMP, seq);
	ssize_t n;
	int r;

	if (type == NFT_MSG_GETRULE) {
		struct nftnl_rule *rr = nftnl_rule_alloc();

		if (!rr)
			die(EX_SYS, "unable to allocate memory:");
		nftnl_rule_set_str(rr, NFTNL_RULE_TABLE, table);
		nftnl_rule_nlmsg_build_payload(nlh, rr);
		nftnl_rule_free(rr);
	}
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		die(EX_SYS, "unable to ask for the tables back:");
	do {
		n = mnl_socket_recvfrom(nl, buf, sizeof buf);
		if (n < 0)
			die(EX_SYS, "unable to read the tables back:");
		r = mnl_cb_run(buf, (size_t)n, seq, portid, cb, data);
		if (r == MNL_CB_ERROR)
			die(EX_SYS, "unable to read the tables back:");
	} while (r > MNL_CB_STOP);
}

/* Does DOCKER-USER exist, and which of its rules are ours?  Sets
 * dk_chain, dk_seen and dk_handles. */
static void docker_scan(struct mnl_socket *nl)
{
	unsigned i;

	dk_chain = 0, dk_seen = 0;
	for (i = 0; i < nchains; i++)
		chains[i].seen = 0;
	nft_dump(nl, NFT_MSG_GETCHAIN, NFPROTO_UNSPEC, NULL, chain_cb, NULL);
	if (dk_chain)
		nft_dump(nl, NFT_MSG_GETRULE, NFPROTO_IPV4, DOCKER_TABLE, docker_cb, NULL);
}

/* Chains and per-chain rule counts as built, and our DOCKER-USER rules as
 * wanted?  0 yes, else -1 (warned). */
static int nft_verify(struct mnl_socket *nl)
{
	unsigned i, count = 0;
	int ok = 0;

	docker_scan(nl); /* the chains too */
	nft_dump(nl, NFT_MSG_GETRULE, NFPROTO_INET, TABLE, rule_cb, &count);
	nft_dump(nl, NFT_MSG_GETRULE, NFPROTO_ARP, TABLE, rule_cb, &count);
	for (i = 0; i < nchains; i++)
		if (chains[i].seen != 1 || chains[i].seen_rules != chains[i].rules) {
			warn("verify: chain %s %s: found %d, %u rules (want 1, %u)",
			     family_name(chains[i].family), chains[i].name, chains[i].seen,
			     chains[i].seen_rules, chains[i].rules);
			ok = -1;
		}
	if (count != nrules) {
		warn("verify: tables inet/arp " TABLE " have %u rules, want %u", count, nrules);
		ok = -1;
	}
	if (dk_seen != dk_want) {
		warn("verify: chain ip " DOCKER_TABLE " " DOCKER_CHAIN " has %u isopod rules, want %u",
		     dk_seen, dk_want);
		ok = -1;
	}
	return ok;
}

static struct mnl_socket *nft_open(void)
{
	struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
	struct timeval tv = { 5, 0 };
	int sz = 8 << 20;

	if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
		die(EX_SYS, "unable to open a netfilter netlink socket:");
	/* A big batch needs room; replies must not hang forever. */
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz);
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz);
	setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	return nl;
}

static void batch_begin(void)
{
	static char *buf;

	if (!buf && !(buf = malloc(BATCH_BUF)))
		die(EX_SYS, "unable to allocate memory:");
	batch = mnl_nlmsg_batch_start(buf, BATCH_BUF);
	nft_seq = (uint32_t)time(NULL);
	nftnl_batch_begin(mnl_nlmsg_batch_current(batch), nft_seq++);
	batch_next();
}

static void batch_end(void)
{
	nftnl_batch_end(mnl_nlmsg_batch_current(batch), nft_seq++);
	batch_next();
}

/* ---- fail closed ------------------------------------------------------------
 *
 * Two things that do not depend on `inet isopod` staying loaded (man
 * isopod-netsetup, FAIL CLOSED): routing rules that blackhole every tap's
 * traffic the table has not marked, and a canary in the table that each
 * VM's broker (unprivileged: it cannot read nftables) sends a nonce
 * through, so it notices within seconds that the table is gone. */

/* `meta mark set meta mark | bit` when set, `meta mark set meta mark & ~bit`
 * when not: one bitwise expression, mask ~bit, xor bit or 0. */
static void x_mark_bit(struct nftnl_rule *r, uint32_t bit, int set)
{
	struct nftnl_expr *e;
	uint32_t mask = ~bit, xor = set ? bit : 0;

	x_meta(r, NFT_META_MARK);
	e = expr_new(r, "bitwise");
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
	nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
	nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &xor, 4);
	e = expr_new(r, "meta");
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, NFT_META_MARK);
	nftnl_expr_set_u32(e, NFTNL_EXPR_META_SREG, NFT_REG_1);
}

/* The table's part, in the same batch as the rest of `inet isopod`. */
static void build_failclosed(void)
{
	struct nftnl_rule *r;
	struct nftnl_expr *e;
	char name[IFNAMSIZ];
	unsigned k;

	/* Every slot: what passed anti-spoof loses the tc filter's TAPMARK,
	 * so the routing looks the host's addresses up for it again (after
	 * the dns chain's redirect; the input chain then judges it).  With
	 * this table gone the bit stays and only the per-tap rules apply. */
	r = rule_new("prerouting");
	m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, TAP_PREFIX, 1);
	x_mark_bit(r, TAPMARK, 0);
	rule_put(r);

	/* Open slots: what passed anti-spoof (vm_pre returned) carries the
	 * mark the routing rules ask for; the forward chain still decides
	 * what may go.  Filtered slots are never marked: they forward
	 * nothing, and now the routing says so too. */
	for (k = nslots; k < total; k++) {
		tap_name(k, name);
		r = rule_new("prerouting");
		m_ifname(r, NFT_META_IIFNAME, NFT_CMP_EQ, name, 0);
		x_mark_bit(r, FWMARK, 1);
		rule_put(r);
	}
	/* The canary: `ip daddr GW udp dport 1054 udp dport set 1055` per
	 * slot, for the host's own datagrams only (output hook; the input
	 * chain drops a guest's to either port).  Stateless
	 * on purpose: a NAT rule would be remembered by conntrack and keep
	 * rewriting an old flow after the table is gone. */
	put_chain(NFPROTO_INET, "canary", NF_INET_LOCAL_OUT, 0, "filter");
	for (k = 0; k < total; k++) {
		r = rule_new("canary");
		m_ip(r, 16, NFT_CMP_EQ, base + 4 * k + 1, 32);
		m_dport(r, IPPROTO_UDP, PORT_CANARY);
		x_port_reg1(r, PORT_CANARY + 1);
		e = expr_new(r, "payload");
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 2);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 2);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_TYPE, NFT_PAYLOAD_CSUM_INET);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_CSUM_OFFSET, 6); /* udp checksum */
		rule_put(r);
	}
}

/* A policy routing rule as the kernel reports it (every field this file
 * writes; ours are at LOCAL_PREF, RULE_PREF - 1, RULE_PREF and
 * LOCAL_LATE_PREF). */
struct frule {
	uint8_t family, action, ipproto, dst_len, proto; /* proto: FRA_PROTOCOL */
	uint32_t pref, table, dst; /* dst: network order */
	int has_mark;
	uint32_t mark, mask;
	char ifname[IFNAMSIZ];
};

struct frules {
	struct frule *v;
	unsigned n;
};

static int frule_attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_type_valid(a, FRA_MAX) >= 0)
		tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

static int frule_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct nlattr *tb[FRA_MAX + 1] = { 0 };
	const struct fib_rule_hdr *h = mnl_nlmsg_get_payload(nlh);
	struct frules *fs = data;
	struct frule f = { .family = h->family, .action = h->action, .table = h->table,
			   .dst_len = h->dst_len };

	if (nlh->nlmsg_type != RTM_NEWRULE ||
	    mnl_attr_parse(nlh, sizeof *h, frule_attr_cb, tb) != MNL_CB_OK)
		return MNL_CB_OK;
	f.pref = tb[FRA_PRIORITY] ? mnl_attr_get_u32(tb[FRA_PRIORITY]) : 0;
	if (tb[FRA_TABLE])
		f.table = mnl_attr_get_u32(tb[FRA_TABLE]);
	if (tb[FRA_IIFNAME])
		snprintf(f.ifname, sizeof f.ifname, "%.*s", (int)mnl_attr_get_payload_len(tb[FRA_IIFNAME]),
			 (const char *)mnl_attr_get_payload(tb[FRA_IIFNAME]));
	if (tb[FRA_IP_PROTO])
		f.ipproto = mnl_attr_get_u8(tb[FRA_IP_PROTO]);
	if (tb[FRA_PROTOCOL])
		f.proto = mnl_attr_get_u8(tb[FRA_PROTOCOL]);
	if (tb[FRA_DST] && mnl_attr_get_payload_len(tb[FRA_DST]) == 4)
		memcpy(&f.dst, mnl_attr_get_payload(tb[FRA_DST]), 4);
	if (tb[FRA_FWMARK] || tb[FRA_FWMASK]) {
		f.has_mark = 1;
		f.mark = tb[FRA_FWMARK] ? mnl_attr_get_u32(tb[FRA_FWMARK]) : 0;
		f.mask = tb[FRA_FWMASK] ? mnl_attr_get_u32(tb[FRA_FWMASK]) : 0;
	}
	if (!(fs->v = realloc(fs->v, (fs->n + 1) * sizeof *fs->v)))
		die(EX_SYS, "unable to allocate memory:");
	fs->v[fs->n++] = f;
	return MNL_CB_OK;
}

/* Every rule of one family, appended to fs. */
static void frule_dump(uint8_t family, struct frules *fs)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct fib_rule_hdr *h;
	uint32_t portid = mnl_socket_get_portid(rtnl);
	ssize_t n;
	int r;

	nlh->nlmsg_type = RTM_GETRULE;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = ++rtnl_seq;
	h = mnl_nlmsg_put_extra_header(nlh, sizeof *h);
	h->family = family;
	if (mnl_socket_sendto(rtnl, nlh, nlh->nlmsg_len) < 0)
		die(EX_SYS, "unable to ask for the routing rules:");
	do {
		n = mnl_socket_recvfrom(rtnl, buf, sizeof buf);
		if (n < 0)
			die(EX_SYS, "unable to read the routing rules:");
		r = mnl_cb_run(buf, (size_t)n, rtnl_seq, portid, frule_cb, fs);
		if (r == MNL_CB_ERROR) {
			if (errno == EAFNOSUPPORT) /* no IPv6 in this kernel */
				return;
			die(EX_SYS, "unable to read the routing rules:");
		}
	} while (r > MNL_CB_STOP);
}

/* A rule, added or deleted.  0 or -errno. */
static int frule_put(uint16_t type, uint16_t flags, const struct frule *f)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct fib_rule_hdr *h;

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST | flags;
	h = mnl_nlmsg_put_extra_header(nlh, sizeof *h);
	h->family = f->family;
	h->action = f->action;
	h->table = f->table < 256 ? (uint8_t)f->table : RT_TABLE_UNSPEC;
	h->dst_len = f->dst_len;
	mnl_attr_put_u32(nlh, FRA_PRIORITY, f->pref);
	if (f->table >= 256)
		mnl_attr_put_u32(nlh, FRA_TABLE, f->table);
	if (*f->ifname)
		mnl_attr_put_strz(nlh, FRA_IIFNAME, f->ifname);
	if (f->dst_len)
		mnl_attr_put(nlh, FRA_DST, 4, &f->dst);
	if (f->ipproto)
		mnl_attr_put_u8(nlh, FRA_IP_PROTO, f->ipproto);
	if (f->proto)
		mnl_attr_put_u8(nlh, FRA_PROTOCOL, f->proto);
	if (f->has_mark) {
		mnl_attr_put_u32(nlh, FRA_FWMARK, f->mark);
		mnl_attr_put_u32(nlh, FRA_FWMASK, f->mask);
	}
	return rtnl_talk(nlh);
}

static int frule_eq(const struct frule *a, const struct frule *b)
{
	return a->family == b->family && a->action == b->action && a->pref == b->pref &&
	       a->table == b->table && a->ipproto == b->ipproto && a->dst_len == b->dst_len &&
	       a->dst == b->dst && a->has_mark == b->has_mark && a->mark == b->mark &&
	       a->mask == b->mask && a->proto == b->proto && !strcmp(a->ifname, b->ifname);
}

/* The kernel's own `local` rule: priority 0, nothing else to match.
 * RTPROT_KERNEL as the kernel makes it: the kernel's duplicate check
 * compares the protocol (--remove adds it back and must find the one
 * there), and a network manager (systemd-networkd's
 * ManageForeignRoutingPolicyRules) deletes every rule that is not the
 * kernel's. */
static struct frule frule_local0(void)
{
	return (struct frule){ .family = AF_INET, .action = FR_ACT_TO_TBL, .table = RT_TABLE_LOCAL,
			       .proto = RTPROT_KERNEL };
}

/* Ours in its place: `fwmark 0/TAPMARK lookup local` at LOCAL_PREF (0,
 * the priority `ip rule flush` spares), the kernel's protocol (a network
 * manager spares it). */
static struct frule frule_local(void)
{
	struct frule f = frule_local0();

	f.pref = LOCAL_PREF, f.has_mark = 1, f.mark = 0, f.mask = TAPMARK;
	return f;
}

/* The local lookup of what carries TAPMARK, after the per-tap rules
 * (LOCAL_LATE_PREF): a tap's packet the table did not judge is
 * blackholed before it, and the host's own traffic that another tool
 * marked with the same bit is still delivered. */
static struct frule frule_local_late(void)
{
	struct frule f = frule_local0();

	f.pref = LOCAL_LATE_PREF, f.has_mark = 1, f.mark = TAPMARK, f.mask = TAPMARK;
	return f;
}

/* Is f the unconditional `lookup local` at priority 0 (the kernel's, or
 * one like it)? */
static int frule_is_local0(const struct frule *f)
{
	return f->family == AF_INET && !f->pref && f->action == FR_ACT_TO_TBL &&
	       f->table == RT_TABLE_LOCAL && !(f->has_mark && f->mask) && !*f->ifname &&
	       !f->dst_len && !f->ipproto;
}

/* Rules per tap and family: IPv4 two, IPv6 one. */
static unsigned frule_nwant(uint8_t family)
{
	return family == AF_INET ? 2 : 1;
}

/* Rule i of slot k of this family: IPv4 ICMP to the own gateway local
 * (RULE_PREF - 1), then everything blackholed unless marked (RULE_PREF);
 * IPv6 always blackholed (no policy allows it, and the table drops it
 * too). */
static struct frule frule_want(uint8_t family, unsigned k, unsigned i)
{
	struct frule f = { .family = family, .action = FR_ACT_BLACKHOLE, .pref = RULE_PREF };

	tap_name(k, f.ifname);
	if (family == AF_INET && i == 0) {
		f.pref = RULE_PREF - 1, f.action = FR_ACT_TO_TBL, f.table = RT_TABLE_LOCAL;
		f.ipproto = IPPROTO_ICMP, f.dst_len = 32, f.dst = htonl(base + 4 * k + 1);
	} else if (family == AF_INET) {
		f.has_mark = 1, f.mark = 0, f.mask = FWMARK;
	}
	return f;
}

/* Is f a per-tap rule of ours (RULE_PREF - 1 or RULE_PREF, iif isopod-tap*)?
 * Its slot in *k. */
static int frule_ours(const struct frule *f, long long *k)
{
	size_t pl = strlen(TAP_PREFIX);

	return (f->pref == RULE_PREF || f->pref == RULE_PREF - 1) && !strncmp(f->ifname, TAP_PREFIX, pl) &&
	       parse_ll(f->ifname + pl, 0, MAX_SLOTS - 1, k) == 0;
}

/* Is f one we want now (slot < total, exactly as frule_want makes it)? */
static int frule_wanted(const struct frule *f)
{
	long long k;
	unsigned i;

	if (!frule_ours(f, &k) || (unsigned)k >= total)
		return 0;
	for (i = 0; i < frule_nwant(f->family); i++) {
		struct frule w = frule_want(f->family, (unsigned)k, i);

		if (frule_eq(&w, f))
			return 1;
	}
	return 0;
}

/* Delete every copy of f (the kernel deletes the first match only).
 * Only for a rule with a mask: the kernel's delete ignores an attribute
 * that is zero, so without one it could match the unconditional rule. */
static void frule_del_all(const struct frule *f)
{
	int r, n;

	for (n = 0; n < 64 && (r = frule_put(RTM_DELRULE, 0, f)) == 0; n++)
		;
	if (r < 0 && r != -ENOENT) {
		errno = -r;
		die(EX_SYS, "unable to delete the local routing rule at priority %u:", f->pref);
	}
}

/* The host's `local` lookups as wanted: ours at LOCAL_PREF and
 * LOCAL_LATE_PREF, the unconditional one at 0 gone (remove: the other
 * way round).  Adding before deleting, so the host is never without a
 * local lookup.  The unconditional rule is deleted only while a dump
 * shows it first among the rules the kernel's loose delete match would
 * take (it ignores our rule's zero mark, and on a rerun, with the
 * kernel's rule gone, would take ours); when ours comes first, ours goes
 * and is added again after it.  1 when all is as wanted afterwards (read
 * back), 0 when not. */
static int local_rule(int remove)
{
	struct frule l0 = frule_local0(), ours = frule_local(), late = frule_local_late();
	struct frules fs = { 0 };
	int r, has0 = 0, hasours = 0, haslate = 0, early = 0, done = 0;
	unsigned i, n;

	if (remove) {
		/* Added only when none is there: a second copy (of another
		 * protocol, say) would be left behind. */
		for (n = 0; n < 2 && !has0; n++) {
			if (n && (r = frule_put(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &l0)) < 0 && r != -EEXIST) {
				errno = -r;
				die(EX_SYS, "unable to add the local routing rule at priority 0:");
			}
			frule_dump(AF_INET, &fs);
			for (i = 0; i < fs.n; i++)
				has0 |= frule_is_local0(&fs.v[i]);
			free(fs.v);
			fs = (struct frules){ 0 };
		}
		if (has0) {
			frule_del_all(&ours);
			frule_del_all(&late);
		}
		has0 = 0;
	} else {
		struct frule *o[2] = { &ours, &late };

		for (i = 0; i < 2; i++)
			if ((r = frule_put(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, o[i])) < 0 && r != -EEXIST) {
				errno = -r;
				die(EX_SYS, "unable to add the local routing rule at priority %u:", o[i]->pref);
			}
		for (n = 0; !done && n < 4; n++) {
			const struct frule *first = NULL, *u = NULL;

			frule_dump(AF_INET, &fs);
			for (i = 0; i < fs.n && !u; i++) {
				const struct frule *f = &fs.v[i];

				if (frule_is_local0(f))
					u = f;
				else if (!first && !f->pref && f->action == FR_ACT_TO_TBL && f->table == RT_TABLE_LOCAL)
					first = f; /* a loose delete of u would take it */
			}
			if (!u) {
				done = 1;
			} else if (!first) {
				if ((r = frule_put(RTM_DELRULE, 0, u)) < 0 && r != -ENOENT) {
					errno = -r;
					die(EX_SYS, "unable to delete the local routing rule at priority 0:");
				}
			} else if (frule_eq(first, &ours)) {
				/* u still delivers everything while ours is away */
				frule_del_all(&ours);
				if ((r = frule_put(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &ours)) < 0) {
					errno = -r;
					die(EX_SYS, "unable to add the local routing rule at priority 0:");
				}
			} else {
				done = 1; /* another tool's rule there: verify says so */
			}
			free(fs.v);
			fs = (struct frules){ 0 };
		}
	}
	frule_dump(AF_INET, &fs);
	for (i = 0; i < fs.n; i++) {
		const struct frule *f = &fs.v[i];

		has0 |= frule_is_local0(f);
		hasours |= frule_eq(f, &ours);
		haslate |= frule_eq(f, &late);
		/* any other lookup of the local table before the per-tap rules */
		early |= f->pref < RULE_PREF - 1 && f->action == FR_ACT_TO_TBL && f->table == RT_TABLE_LOCAL &&
			 !frule_eq(f, &ours);
	}
	free(fs.v);
	if (remove)
		return has0 && !hasours && !haslate;
	return hasours && haslate && !early;
}

/* Make the per-tap rules as wanted (remove: none of ours whose tap is
 * gone) and read them back.  Adding first (NLM_F_EXCL: a rerun finds them
 * there) and deleting only what is not wanted, so a rerun never opens a
 * gap.  A rule of a tap beyond the slots that still exists (busy:
 * netsetup left it to its VM) stays, and so, when removing, does the rule
 * of any tap that still exists (remove_all deletes the taps first; one it
 * could not delete keeps its rule).  Returns the number deleted; *v4, *v6:
 * the taps with every wanted rule of the family found. */
static unsigned route_rules(int remove, unsigned *v4, unsigned *v6, int *has_v6, unsigned char *tapok)
{
	static const uint8_t fams[] = { AF_INET, AF_INET6 };
	struct frules fs = { 0 };
	unsigned i, j, k, gone = 0, *per;
	int r;

	for (k = 0; !remove && k < total; k++)
		for (i = 0; i < sizeof fams; i++)
			for (j = 0; j < frule_nwant(fams[i]); j++) {
				struct frule w = frule_want(fams[i], k, j);

				r = frule_put(RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &w);
				if (r == -EAFNOSUPPORT && fams[i] == AF_INET6) {
					*has_v6 = 0; /* a kernel without IPv6 routes none */
					continue;
				}
				if (r < 0 && r != -EEXIST) {
					errno = -r;
					die(EX_SYS, "unable to add the routing rule of %s (%s):", w.ifname,
					    fams[i] == AF_INET ? "IPv4" : "IPv6");
				}
			}
	for (i = 0; i < sizeof fams; i++)
		frule_dump(fams[i], &fs);
	for (i = 0; i < fs.n; i++) {
		long long k2;

		if (!frule_ours(&fs.v[i], &k2))
			continue;
		if (!remove && (frule_wanted(&fs.v[i]) ||
				((unsigned)k2 >= total && if_nametoindex(fs.v[i].ifname))))
			continue;
		if (remove && if_nametoindex(fs.v[i].ifname))
			continue;
		if ((r = frule_put(RTM_DELRULE, 0, &fs.v[i])) < 0 && r != -ENOENT) {
			errno = -r;
			die(EX_SYS, "unable to delete the routing rule of %s:", fs.v[i].ifname);
		}
		gone++;
	}
	free(fs.v);
	fs = (struct frules){ 0 };
	*v4 = *v6 = 0;
	if (!(per = calloc(2 * (size_t)MAX_SLOTS, sizeof *per)))
		die(EX_SYS, "unable to allocate memory:");
	for (i = 0; i < sizeof fams; i++)
		frule_dump(fams[i], &fs);
	for (i = 0; i < fs.n; i++) {
		long long k2;

		if (frule_wanted(&fs.v[i]) && frule_ours(&fs.v[i], &k2))
			per[2 * k2 + (fs.v[i].family != AF_INET)]++;
	}
	for (k = 0; k < total; k++) {
		int ok4 = per[2 * k] == frule_nwant(AF_INET), ok6 = per[2 * k + 1] == frule_nwant(AF_INET6);

		*v4 += (unsigned)ok4;
		*v6 += (unsigned)ok6;
		if (tapok)
			tapok[k] = (unsigned char)(ok4 && (ok6 || !*has_v6));
	}
	free(per);
	free(fs.v);
	return gone;
}

/* ---- the taps' tc filter -------------------------------------------------- */

/* The tc ingress filter of every slot's tap (lib/tcfilter.c; man
 * isopod-netsetup, FAIL CLOSED), then read back: *good counts the taps
 * whose ingress holds ours alone, in direct-action mode, not skip_sw,
 * with our program's name and tag.  The report's "tc_filter"; its
 * direct_action is the flag read back, on every tap. */
static json_t *tc_filters(unsigned *good, unsigned char *tapok)
{
	char name[IFNAMSIZ], msg[256], hex[17];
	uint8_t tag[8] = { 0 };
	unsigned k;
	int da = 1; /* every tap's filter read back with its da flag */

	for (*good = 0, k = 0; k < total; k++) {
		struct tapcfg cfg;
		struct tcfilter_state st = { 0 };
		int idx, r;

		tcfilter_slot_cfg(k, base + 4 * k + 1, k >= nslots, &cfg);
		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)) ||
		    (r = tcfilter_install(idx, &cfg, tag, &st, msg, sizeof msg)) < 0)
			die(EX_SYS, "%s: %s", name, idx ? msg : "gone");
		da = da && st.ours && st.direct_action;
		if (r)
			++*good;
		else
			warn("verify: %s %s", name, msg);
		tapok[k] = tapok[k] && r;
	}
	for (k = 0; k < 8; k++)
		snprintf(hex + 2 * k, 3, "%02x", tag[k]);
	return json_pack("{s:s, s:s, s:i, s:b}", "program", TCFILTER_PROG, "tag", hex, "taps", (int)*good,
			 "direct_action", da);
}

/* ---- main -------------------------------------------------------------- */

/* Tests kill netsetup between two steps: ISOPOD_TEST_KILL_AT=<point>
 * (rules, filter, alias, table), as a crash or SIGKILL would. */
static void test_point(const char *name)
{
	const char *k = getenv("ISOPOD_TEST_KILL_AT");

	if (k && !strcmp(k, name))
		raise(SIGKILL);
}

static void remove_all(void)
{
	struct mnl_socket *nl = nft_open();
	json_t *out, *gone = json_array();
	char name[IFNAMSIZ];
	unsigned k, rules_gone, v4, v6;
	int idx, r, has_v6 = 1;

	docker_scan(nl);
	dk_n = dk_seen;
	batch_begin();
	put_table(NFPROTO_INET, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(NFPROTO_INET, NFT_MSG_DELTABLE, 0);
	put_table(NFPROTO_ARP, NFT_MSG_NEWTABLE, NLM_F_CREATE);
	put_table(NFPROTO_ARP, NFT_MSG_DELTABLE, 0);
	docker_del();
	batch_end();
	nft_send(nl);
	mnl_socket_close(nl);
	/* The taps before their rules: a tap that cannot be deleted (and then
	 * every one after it: this dies) keeps its rule, so a failed removal
	 * never leaves a live tap with neither table nor rule. */
	for (k = 0; k < MAX_SLOTS; k++) {
		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)))
			continue;
		if ((r = link_del(idx)) < 0) {
			errno = -r;
			die(EX_SYS, "unable to delete %s:", name);
		}
		json_array_append_new(gone, json_string(name));
	}
	rules_gone = route_rules(1, &v4, &v6, &has_v6, NULL);
	/* The kernel's `local` rule back at priority 0, ours out. */
	if (!local_rule(1))
		die(EX_SYS, "unable to verify the local routing rule back at priority 0");
	out = json_pack("{s:s, s:[s, s], s:b, s:o, s:i}", "table", "inet " TABLE, "tables",
			"inet " TABLE, "arp " TABLE, "removed", 1, "taps", gone,
			"docker_user_rules_removed", (int)dk_n);
	json_object_set_new(out, "route_rules_removed", json_integer(rules_gone));
	json_emit(out);
	json_decref(out);
}

/* The overrides in force, each with the listed block it opens a hole in:
 * [{"range": "198.51.100.0/24", "in": "198.51.100.0/24", "name": "..."}]. */
static json_t *allow_ranges_json(void)
{
	const struct range_def *l;
	json_t *a = json_array();
	size_t n, i;

	l = ranges_list(&n);
	for (i = 0; i < nallow_ranges; i++) {
		char t[RANGES_TEXT_MAX];
		const char *why;
		int k = ranges_override_check(&allow_ranges[i], &why);

		json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "range",
			range_text(&allow_ranges[i], t, sizeof t), "in", k >= 0 ? l[k].cidr : "?",
			"name", k >= 0 ? l[k].name : "?"));
	}
	return a;
}

static int read_forwarding(void)
{
	char c = '0';
	int fd = open("/proc/sys/net/ipv4/ip_forward", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &c, 1) != 1)
			c = '0';
		close(fd);
	}
	return c == '1';
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "slots", required_argument, NULL, 's' },
		{ "open-slots", required_argument, NULL, 'o' },
		{ "base", required_argument, NULL, 'b' },
		{ "user", required_argument, NULL, 'u' },
		{ "conn-limit", required_argument, NULL, 'c' },
		{ "no-docker-user", no_argument, NULL, 'D' },
		{ "remove", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct mnl_socket *nl;
	struct in_addr a;
	json_t *taps, *out, *tc;
	char name[IFNAMSIZ], gw[INET_ADDRSTRLEN], guest[INET_ADDRSTRLEN], macs[18], alias[32];
	char was[16], msg[512];
	const char *e;
	long long v;
	unsigned k, created = 0, rules_v4, rules_v6, tc_good, v6bad = 0;
	int c, remove = 0, verified, rules_ok, local_ok, has_v6 = 1;
	char markhex[16];
	uint8_t mac[6];
	static int made[MAX_SLOTS], busy[MAX_SLOTS];
	static unsigned char tapok[MAX_SLOTS], v6off[MAX_SLOTS];

	progname = "isopod-netsetup";
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (parse_ll(optarg, 0, MAX_SLOTS, &v) < 0)
				die(EX_USAGE, "bad --slots %.40s: want 0..%d", optarg, MAX_SLOTS);
			nslots = (unsigned)v;
			break;
		case 'o':
			if (parse_ll(optarg, 0, MAX_SLOTS, &v) < 0)
				die(EX_USAGE, "bad --open-slots %.40s: want 0..%d", optarg, MAX_SLOTS);
			nopen = (unsigned)v;
			break;
		case 'b':
			if (inet_pton(AF_INET, optarg, &a) != 1)
				die(EX_USAGE, "bad --base %.40s: want an IPv4 address", optarg);
			base = ntohl(a.s_addr);
			break;
		case 'u':
			if (parse_ll(optarg, 0, 0x7fffffff, &v) < 0)
				die(EX_USAGE, "bad --user %.40s: want a numeric uid", optarg);
			owner = (long)v;
			break;
		case 'c':
			if (parse_ll(optarg, 1, 1000000, &v) < 0)
				die(EX_USAGE, "bad --conn-limit %.40s: want 1..1000000", optarg);
			conn_limit = (unsigned)v;
			break;
		case 'D':
			docker_opt = 0;
			break;
		case 'R':
			remove = 1;
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (optind != argc)
		die(EX_USAGE, "usage: %s", USAGE);
	total = nslots + nopen;
	if (!remove && (total < 1 || total > MAX_SLOTS))
		die(EX_USAGE, "bad --slots %u --open-slots %u: want 1..%d slots in all", nslots, nopen,
		    MAX_SLOTS);
	if (owner < 0 && (e = getenv("SUDO_UID")) && parse_ll(e, 0, 0x7fffffff, &v) == 0)
		owner = (long)v;
	/* The slot range is one aligned prefix (for the NAT rule). */
	for (prefix = 30; prefix > 0 && (1u << (32 - prefix)) < 4 * total; prefix--)
		;
	if (base & ~(~0u << (32 - prefix)))
		die(EX_USAGE, "bad --base: %u slots need a /%d-aligned base", total, prefix);

	/* The host's overrides of the deny list: the same lines every run's
	 * broker and result read (there is no flag, so they cannot differ). */
	if (!remove && (c = ranges_load_config(ranges_config_path(), allow_ranges, RANGES_ALLOW_MAX,
					       &nallow_ranges, msg, sizeof msg)) < 0)
		die(c == -1 ? EX_USAGE : EX_SYS, "%s", msg);

	if (!(rtnl = mnl_socket_open(NETLINK_ROUTE)) || mnl_socket_bind(rtnl, 0, MNL_SOCKET_AUTOPID) < 0)
		die(EX_SYS, "unable to open a route netlink socket:");
	if (remove) {
		remove_all();
		if (netstate_remove(msg, sizeof msg) < 0)
			die(EX_SYS, "%s", msg);
		return 0;
	}

	/* The taps first; a running VM's tap keeps its mode: changing it
	 * under the VM would change what that VM may reach mid-run. */
	for (k = 0; k < total; k++) {
		tap_name(k, name);
		made[k] = tap_make(name, &busy[k]);
		created += (unsigned)made[k];
		if (busy[k] && *net_tap_mode((int)k, was, sizeof was) && strcmp(was, slot_mode(k)))
			die(EX_CONFLICT, "unable to make %s %s: a VM is using it in %s mode now", name,
			    slot_mode(k), was);
	}
	taps = json_array();
	for (k = 0; k < total; k++) {
		int idx, r;

		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)))
			die(EX_SYS, "unable to find %s after creating it:", name);
		v6off[k] = (unsigned char)tap_no_ipv6(name);
		v6bad += !v6off[k];
		tap_ipv4(name);
		if ((r = addr_set(idx, k)) < 0) {
			errno = -r;
			die(EX_SYS, "unable to set the address of %s:", name);
		}
		slot_ip(k, 1, gw);
		slot_ip(k, 2, guest);
		slot_mac(k, mac);
		snprintf(macs, sizeof macs, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
			 mac[3], mac[4], mac[5]);
		json_array_append_new(taps, json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:b, s:b}",
			"name", name, "slot", (int)k, "mode", slot_mode(k), "gateway", gw, "guest", guest,
			"mac", macs, "prefix", 30, "created", made[k], "busy", busy[k]));
	}
	/* Taps beyond the slots (left by a larger earlier run) go, unless busy. */
	for (k = total; k < MAX_SLOTS; k++) {
		int idx;

		tap_name(k, name);
		if ((idx = (int)if_nametoindex(name)) && link_del(idx) < 0)
			warn("unable to delete the extra tap %s (in use?)", name);
	}
	/* The routing rules before the table: an open slot is blackholed
	 * until the table that marks its packets is in.  Then the tc filter,
	 * the table, and last the alias that advertises a tap as a slot and
	 * brings it up: a netsetup that dies before leaves no new slot
	 * without all three. */
	route_rules(0, &rules_v4, &rules_v6, &has_v6, tapok);
	rules_ok = rules_v4 == total && rules_v6 == (has_v6 ? total : 0);
	if (!rules_ok)
		warn("verify: %u IPv4 and %u IPv6 taps with their routing rules at priority %d, want %u each",
		     rules_v4, rules_v6, RULE_PREF, total);
	if (!(local_ok = local_rule(0)))
		warn("verify: the local routing rules are not (only) at priority %d with fwmark 0/0x%08x and %d "
		     "with fwmark 0x%08x/0x%08x", LOCAL_PREF, TAPMARK, LOCAL_LATE_PREF, TAPMARK, TAPMARK);
	rules_ok = rules_ok && local_ok;
	test_point("rules");
	tc = tc_filters(&tc_good, tapok);
	test_point("filter");
	/* Only open slots forward; filtered ones talk to the host alone.  The
	 * kernel keeps that even without our tables (a `flush ruleset`, say):
	 * a filtered tap's own forwarding flag is off, so nothing it receives
	 * is routed on.  After ip_forward, which sets every interface's flag. */
	if (nopen)
		sysctl_write("/proc/sys/net/ipv4/ip_forward", "1");
	for (k = 0; k < total; k++) {
		char p[PATH_MAX];

		tap_name(k, name);
		pathf(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/forwarding", name);
		sysctl_write(p, k < nslots ? "0" : "1");
	}

	test_point("table");
	nl = nft_open();
	docker_scan(nl);
	dk_n = dk_seen;
	dk_want = docker_opt && dk_chain ? 2 : 0;
	batch_begin();
	build_inet();
	build_failclosed();
	build_arp();
	docker_del();
	if (dk_want)
		docker_add();
	batch_end();
	nft_send(nl);
	verified = nft_verify(nl) == 0 && rules_ok && tc_good == total && !v6bad;
	mnl_socket_close(nl);
	/* A tap is advertised only with its rules, its filter and the table
	 * read back as wanted (and the local rule in place), so last: one
	 * without, or any when the read-back failed, loses a previous run's
	 * alias, so a slot is never offered without them. */
	for (k = 0; k < total; k++) {
		int idx, r;

		tap_name(k, name);
		snprintf(alias, sizeof alias, NET_ALIAS_PREFIX "%s", slot_mode(k));
		if (!tapok[k] || !v6off[k] || !verified)
			*alias = 0;
		/* A VM's tap keeps its alias: its mode is what the next run
		 * checks before it changes a busy tap, and without one
		 * --open-slots would open a running filtered VM's slot.  Its
		 * lock keeps it from a claim. */
		if (!(idx = (int)if_nametoindex(name)) ||
		    (r = link_set(idx, busy[k] && !*alias ? NULL : alias)) < 0) {
			errno = idx ? -r : ENODEV;
			die(EX_SYS, "unable to bring %s up:", name);
		}
	}
	test_point("alias");

	mnl_socket_close(rtnl);

	a.s_addr = htonl(base);
	inet_ntop(AF_INET, &a, gw, sizeof gw);
	out = json_pack("{s:s, s:[s, s], s:i, s:i, s:s, s:i, s:o, s:i, s:i, s:i, s:b, s:b, s:b, s:s}",
		"table", "inet " TABLE, "tables", "inet " TABLE, "arp " TABLE, "slots", (int)nslots,
		"open_slots", (int)nopen, "base", gw, "prefix", prefix, "taps", taps, "taps_created",
		(int)created, "chains", (int)nchains, "rules", (int)nrules, "verified", verified,
		"forwarding", read_forwarding(), "docker_user", dk_want > 0, "ipv6", "dropped");
	json_object_set_new(out, "owner", owner >= 0 ? json_integer(owner) : json_null());
	json_object_set_new(out, "conn_limit", json_integer(conn_limit));
	snprintf(markhex, sizeof markhex, "0x%08x", FWMARK);
	json_object_set_new(out, "fail_closed", json_pack("{s:i, s:s, s:{s:i, s:i}, s:i}",
		"rule_priority", RULE_PREF, "fwmark", markhex, "route_rules", "ipv4", (int)rules_v4,
		"ipv6", (int)rules_v6, "canary_port", PORT_CANARY));
	json_object_set_new(json_object_get(out, "fail_closed"), "tc_filter", tc);
	snprintf(markhex, sizeof markhex, "0x%08x", TAPMARK);
	json_object_set_new(json_object_get(out, "fail_closed"), "local_rule",
			    json_pack("{s:i, s:i, s:s, s:b}", "priority", LOCAL_PREF, "late_priority",
				      LOCAL_LATE_PREF, "tapmark", markhex, "verified", local_ok));
	json_object_set_new(out, "allow_ranges", allow_ranges_json());
	json_emit(out);
	json_decref(out);
	if (!verified) {
		die(EX_SYS, "unable to verify the tables, routing rules and tc filters after loading them "
		    "(no slot is offered until a rerun verifies)");
	}
	/* What was verified, recorded for the doctor to compare (lib/netstate.h). */
	if (netstate_write(msg, sizeof msg) < 0)
		die(EX_SYS, "%s", msg);
	return 0;
}
