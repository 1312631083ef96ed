/* netslot.c - the host side of isopod's network slots that is not
 * nftables (lib/nftbuild.c has the tables): persistent taps, their
 * addresses, sysctls and tc filters, and the fail-closed policy routing
 * rules, over one rtnetlink socket.  isopod-netsetup's; see netslot.h.
 * Errors: -1 with the reason in rt->err, as the tool prints it. */

#include "netslot.h"
#include "net.h"
#include "tcfilter.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/if_tun.h>
#include <linux/fib_rules.h>
#include <linux/rtnetlink.h>

#include <libmnl/libmnl.h>

#define TAP_PREFIX NET_TAP_PREFIX
#define MAX_SLOTS NET_MAX_SLOTS
#define RULE_PREF NET_RULE_PREF
#define FWMARK NET_FWMARK
#define TAPMARK TCFILTER_TAPMARK
#define LOCAL_PREF NET_LOCAL_PREF
#define LOCAL_LATE_PREF NET_LOCAL_LATE_PREF

/* The reason in rt->err, as die() would print it (a format ending in ':'
 * gets errno's text); -1, errno kept. */
#define fail(rt, ...) reason_fail((rt)->err, sizeof (rt)->err, __VA_ARGS__)

void slot_ip(const struct netplan *p, unsigned k, unsigned host, char *out)
{
	struct in_addr a = { .s_addr = htonl(p->base + 4 * k + host) };

	inet_ntop(AF_INET, &a, out, INET_ADDRSTRLEN);
}

void slot_mac(unsigned k, uint8_t mac[6])
{
	mac[0] = 0x02, mac[1] = 0x69, mac[2] = 0x73, mac[3] = 0x00;
	mac[4] = (uint8_t)(k >> 8), mac[5] = (uint8_t)k;
}

void tap_name(unsigned k, char out[IFNAMSIZ])
{
	snprintf(out, IFNAMSIZ, TAP_PREFIX "%u", k % MAX_SLOTS);
}

const char *slot_mode(const struct netplan *p, unsigned k)
{
	return k < p->nslots ? "filtered" : "open";
}

/* ---- rtnetlink -------------------------------------------------------- */

int rtnl_open(struct rtnl *rt, const struct netplan *plan)
{
	rt->plan = plan;
	if (!(rt->nl = mnl_socket_open(NETLINK_ROUTE)) || mnl_socket_bind(rt->nl, 0, MNL_SOCKET_AUTOPID) < 0)
		return fail(rt, "unable to open a route netlink socket:");
	return 0;
}

void rtnl_close(struct rtnl *rt)
{
	if (rt->nl)
		mnl_socket_close(rt->nl);
	rt->nl = NULL;
}

/* Send one request and wait for its ack.  0 or -errno. */
static int rtnl_talk(struct rtnl *rt, struct nlmsghdr *nlh)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	uint32_t portid = mnl_socket_get_portid(rt->nl);
	ssize_t n;
	int r;

	nlh->nlmsg_flags |= NLM_F_ACK;
	nlh->nlmsg_seq = ++rt->seq;
	if (mnl_socket_sendto(rt->nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	for (;;) {
		n = mnl_socket_recvfrom(rt->nl, buf, sizeof buf);
		if (n < 0)
			return -errno;
		r = mnl_cb_run(buf, (size_t)n, rt->seq, portid, NULL, NULL);
		if (r == MNL_CB_ERROR)
			return -errno;
		if (r == MNL_CB_STOP)
			return 0;
	}
}

/* A request of type about link ifindex, its header in buf. */
static struct nlmsghdr *link_msg(char *buf, uint16_t type, int ifindex)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifinfomsg *ifi;

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	ifi = mnl_nlmsg_put_extra_header(nlh, sizeof *ifi);
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	return nlh;
}

/* Up, with its mode in its ifalias (readable by anybody in sysfs; "":
 * none, NULL: the alias as it is). */
int link_set(struct rtnl *rt, int ifindex, const char *alias)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = link_msg(buf, RTM_NEWLINK, ifindex);
	struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);

	ifi->ifi_change = IFF_UP;
	ifi->ifi_flags = IFF_UP;
	if (alias && *alias)
		mnl_attr_put_strz(nlh, IFLA_IFALIAS, alias);
	else if (alias) /* empty: the kernel drops the alias (NULL: kept) */
		mnl_attr_put(nlh, IFLA_IFALIAS, 0, alias);
	return rtnl_talk(rt, nlh);
}

int link_del(struct rtnl *rt, int ifindex)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];

	return rtnl_talk(rt, link_msg(buf, RTM_DELLINK, ifindex));
}

/* gw/30 on the tap; NLM_F_REPLACE makes a second run a no-op. */
int addr_set(struct rtnl *rt, int ifindex, unsigned k)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct ifaddrmsg *ifa;
	uint32_t gw = htonl(rt->plan->base + 4 * k + 1), bc = htonl(rt->plan->base + 4 * k + 3);

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
	return rtnl_talk(rt, nlh);
}

/* ---- taps --------------------------------------------------------------- */

static int is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A persistent tap, owned by the plan's owner.  Returns 1 created, 0
 * existed, and sets *busy when a VM has it open now (TUNSETIFF says EBUSY:
 * the existing device is left as it is); -2 when an interface of that
 * name is not a tap (a conflict: the caller's exit status differs), -1 on
 * any other failure. */
int tap_make(struct rtnl *rt, const char *name, int *busy)
{
	char p[PATH_MAX];
	struct ifreq ifr;
	int fd, existed;

	*busy = 0;
	snprintf(p, sizeof p, "/sys/class/net/%s", name);
	existed = is_dir(p);
	if (existed) {
		snprintf(p, sizeof p, "/sys/class/net/%s/tun_flags", name);
		if (access(p, F_OK)) {
			fail(rt, "unable to use %s: an interface of that name exists and is not a tap", name);
			return -2;
		}
	}
	fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return fail(rt, "unable to open /dev/net/tun:");
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		if (errno == EBUSY && existed) {
			close(fd);
			*busy = 1;
			return 0;
		}
		fail(rt, "unable to create tap %s (TUNSETIFF):", name);
		close(fd);
		return -1;
	}
	if (rt->plan->owner >= 0 && ioctl(fd, TUNSETOWNER, (unsigned long)rt->plan->owner) < 0) {
		fail(rt, "unable to set the owner of %s:", name);
		close(fd);
		return -1;
	}
	if (ioctl(fd, TUNSETPERSIST, 1L) < 0) {
		fail(rt, "unable to make %s persistent:", name);
		close(fd);
		return -1;
	}
	close(fd);
	return !existed;
}

/* IPv6 off on the tap: no link-local address, nothing for a guest to talk
 * to over v6 (the table drops it too).  Read back (lib/net.c, as a claim
 * reads it): 1 off or no IPv6 here, 0 not (the tap is not advertised). */
int tap_no_ipv6(const char *name)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof p, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
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

int sysctl_write(struct rtnl *rt, const char *p, const char *v)
{
	int fd = open(p, O_WRONLY | O_CLOEXEC), r = 0;

	if (fd < 0 || write(fd, v, strlen(v)) != (ssize_t)strlen(v))
		r = fail(rt, "unable to write %s:", p);
	if (fd >= 0)
		close(fd);
	return r;
}

/* IPv4 settings of a tap.  ARP: answer only for the tap's own address
 * (the gateway) and ask only from it, so a guest cannot list the host's
 * other addresses (uplink, docker0, other gateways) by ARP, nor learn
 * them from the host's requests.  The rest is kept by the kernel even
 * without our tables: no ICMP redirects or source routes accepted from
 * a guest, and strict reverse-path filtering (a source that does not
 * route back through the tap is dropped). */
int tap_ipv4(struct rtnl *rt, const char *name)
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
		snprintf(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/%s", name, set[i][0]);
		if (sysctl_write(rt, p, set[i][1]) < 0)
			return -1;
	}
	return 0;
}

/* Only open slots forward; filtered ones talk to the host alone.  The
 * kernel keeps that even without our tables (a `flush ruleset`, say):
 * a filtered tap's own forwarding flag is off, so nothing it receives
 * is routed on.  After ip_forward, which sets every interface's flag. */
int slots_forwarding(struct rtnl *rt)
{
	char name[IFNAMSIZ], p[PATH_MAX];
	unsigned k;

	if (rt->plan->nopen && sysctl_write(rt, "/proc/sys/net/ipv4/ip_forward", "1") < 0)
		return -1;
	for (k = 0; k < rt->plan->total; k++) {
		tap_name(k, name);
		snprintf(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/forwarding", name);
		if (sysctl_write(rt, p, k < rt->plan->nslots ? "0" : "1") < 0)
			return -1;
	}
	return 0;
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
	int oom;
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
	struct frule *v, f = { .family = h->family, .action = h->action, .table = h->table,
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
	if (!(v = realloc(fs->v, (fs->n + 1) * sizeof *fs->v))) {
		fs->oom = 1;
		return MNL_CB_ERROR;
	}
	fs->v = v;
	fs->v[fs->n++] = f;
	return MNL_CB_OK;
}

/* Every rule of one family, appended to fs.  0 or -1 (fs->v stays the
 * caller's to free). */
static int frule_dump(struct rtnl *rt, uint8_t family, struct frules *fs)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	struct fib_rule_hdr *h;
	uint32_t portid = mnl_socket_get_portid(rt->nl);
	ssize_t n;
	int r;

	nlh->nlmsg_type = RTM_GETRULE;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = ++rt->seq;
	h = mnl_nlmsg_put_extra_header(nlh, sizeof *h);
	h->family = family;
	if (mnl_socket_sendto(rt->nl, nlh, nlh->nlmsg_len) < 0)
		return fail(rt, "unable to ask for the routing rules:");
	do {
		n = mnl_socket_recvfrom(rt->nl, buf, sizeof buf);
		if (n < 0)
			return fail(rt, "unable to read the routing rules:");
		r = mnl_cb_run(buf, (size_t)n, rt->seq, portid, frule_cb, fs);
		if (r == MNL_CB_ERROR && fs->oom) {
			errno = ENOMEM;
			return fail(rt, "unable to allocate memory:");
		}
		if (r == MNL_CB_ERROR) {
			if (errno == EAFNOSUPPORT) /* no IPv6 in this kernel */
				return 0;
			return fail(rt, "unable to read the routing rules:");
		}
	} while (r > MNL_CB_STOP);
	return 0;
}

/* A rule, added or deleted.  0 or -errno. */
static int frule_put(struct rtnl *rt, uint16_t type, uint16_t flags, const struct frule *f)
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
	return rtnl_talk(rt, nlh);
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
static struct frule frule_want(struct rtnl *rt, uint8_t family, unsigned k, unsigned i)
{
	struct frule f = { .family = family, .action = FR_ACT_BLACKHOLE, .pref = RULE_PREF };

	tap_name(k, f.ifname);
	if (family == AF_INET && i == 0) {
		f.pref = RULE_PREF - 1, f.action = FR_ACT_TO_TBL, f.table = RT_TABLE_LOCAL;
		f.ipproto = IPPROTO_ICMP, f.dst_len = 32, f.dst = htonl(rt->plan->base + 4 * k + 1);
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
static int frule_wanted(struct rtnl *rt, const struct frule *f)
{
	long long k;
	unsigned i;

	if (!frule_ours(f, &k) || (unsigned)k >= rt->plan->total)
		return 0;
	for (i = 0; i < frule_nwant(f->family); i++) {
		struct frule w = frule_want(rt, f->family, (unsigned)k, i);

		if (frule_eq(&w, f))
			return 1;
	}
	return 0;
}

/* Delete every copy of f (the kernel deletes the first match only).
 * Only for a rule with a mask: the kernel's delete ignores an attribute
 * that is zero, so without one it could match the unconditional rule. */
static int frule_del_all(struct rtnl *rt, const struct frule *f)
{
	int r, n;

	for (n = 0; n < 64 && (r = frule_put(rt, RTM_DELRULE, 0, f)) == 0; n++)
		;
	if (r < 0 && r != -ENOENT) {
		errno = -r;
		return fail(rt, "unable to delete the local routing rule at priority %u:", f->pref);
	}
	return 0;
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
/* --remove's half of local_rule: the kernel's rule back (added only when
 * none is there: a second copy, of another protocol say, would be left
 * behind), then ours out once it is.  0 or -1. */
static int local_rule_back(struct rtnl *rt, const struct frule *l0, const struct frule *ours,
			   const struct frule *late)
{
	struct frules fs = { 0 };
	int r, has0 = 0;
	unsigned i, n;

	for (n = 0; n < 2 && !has0; n++) {
		if (n && (r = frule_put(rt, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, l0)) < 0 && r != -EEXIST) {
			errno = -r;
			return fail(rt, "unable to add the local routing rule at priority 0:");
		}
		r = frule_dump(rt, AF_INET, &fs);
		for (i = 0; i < fs.n; i++)
			has0 |= frule_is_local0(&fs.v[i]);
		free(fs.v);
		fs = (struct frules){ 0 };
		if (r < 0)
			return -1;
	}
	if (has0 && (frule_del_all(rt, ours) < 0 || frule_del_all(rt, late) < 0))
		return -1;
	return 0;
}

/* The other half: ours in, then the unconditional rule out (see
 * local_rule).  0 or -1. */
static int local_rule_move(struct rtnl *rt, const struct frule *ours, const struct frule *late)
{
	const struct frule *o[2] = { ours, late };
	struct frules fs = { 0 };
	int r, done = 0;
	unsigned i, n;

	for (i = 0; i < 2; i++)
		if ((r = frule_put(rt, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, o[i])) < 0 && r != -EEXIST) {
			errno = -r;
			return fail(rt, "unable to add the local routing rule at priority %u:", o[i]->pref);
		}
	for (n = 0; !done && n < 4; n++) {
		const struct frule *first = NULL, *u = NULL;

		if (frule_dump(rt, AF_INET, &fs) < 0)
			goto fail;
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
			if ((r = frule_put(rt, RTM_DELRULE, 0, u)) < 0 && r != -ENOENT) {
				errno = -r;
				fail(rt, "unable to delete the local routing rule at priority 0:");
				goto fail;
			}
		} else if (frule_eq(first, ours)) {
			/* u still delivers everything while ours is away */
			if (frule_del_all(rt, ours) < 0)
				goto fail;
			if ((r = frule_put(rt, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, ours)) < 0) {
				errno = -r;
				fail(rt, "unable to add the local routing rule at priority 0:");
				goto fail;
			}
		} else {
			done = 1; /* another tool's rule there: verify says so */
		}
		free(fs.v);
		fs = (struct frules){ 0 };
	}
	return 0;
fail:
	free(fs.v);
	return -1;
}

/* The host's `local` lookups as wanted: ours at LOCAL_PREF and
 * LOCAL_LATE_PREF, the unconditional one at 0 gone (remove: the other
 * way round).  Adding before deleting, so the host is never without a
 * local lookup.  The unconditional rule is deleted only while a dump
 * shows it first among the rules the kernel's loose delete match would
 * take (it ignores our rule's zero mark, and on a rerun, with the
 * kernel's rule gone, would take ours); when ours comes first, ours goes
 * and is added again after it.  1 when all is as wanted afterwards (read
 * back), 0 when not, -1 when unable. */
int local_rule(struct rtnl *rt, int remove)
{
	struct frule l0 = frule_local0(), ours = frule_local(), late = frule_local_late();
	struct frules fs = { 0 };
	int has0 = 0, hasours = 0, haslate = 0, early = 0;
	unsigned i;

	if ((remove ? local_rule_back(rt, &l0, &ours, &late) : local_rule_move(rt, &ours, &late)) < 0)
		return -1;
	if (frule_dump(rt, AF_INET, &fs) < 0) {
		free(fs.v);
		return -1;
	}
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

static const uint8_t fams[] = { AF_INET, AF_INET6 };

/* Both families' rules into fs.  0 or -1 (fs->v the caller's to free). */
static int frule_dump_all(struct rtnl *rt, struct frules *fs)
{
	unsigned i;

	for (i = 0; i < sizeof fams; i++)
		if (frule_dump(rt, fams[i], fs) < 0)
			return -1;
	return 0;
}

/* route_rules' adding: every wanted rule, NLM_F_EXCL (a rerun finds them
 * there).  0 or -1. */
static int route_rules_add(struct rtnl *rt, int *has_v6)
{
	unsigned i, j, k;
	int r;

	for (k = 0; k < rt->plan->total; k++)
		for (i = 0; i < sizeof fams; i++)
			for (j = 0; j < frule_nwant(fams[i]); j++) {
				struct frule w = frule_want(rt, fams[i], k, j);

				r = frule_put(rt, RTM_NEWRULE, NLM_F_CREATE | NLM_F_EXCL, &w);
				if (r == -EAFNOSUPPORT && fams[i] == AF_INET6) {
					*has_v6 = 0; /* a kernel without IPv6 routes none */
					continue;
				}
				if (r < 0 && r != -EEXIST) {
					errno = -r;
					return fail(rt, "unable to add the routing rule of %s (%s):", w.ifname,
						    fams[i] == AF_INET ? "IPv4" : "IPv6");
				}
			}
	return 0;
}

/* route_rules' deleting (see there).  The number deleted, or -1. */
static int route_rules_del(struct rtnl *rt, int remove)
{
	struct frules fs = { 0 };
	int r, gone = 0;
	unsigned i;

	if (frule_dump_all(rt, &fs) < 0)
		goto fail;
	for (i = 0; i < fs.n; i++) {
		long long k2;

		if (!frule_ours(&fs.v[i], &k2))
			continue;
		if (!remove && (frule_wanted(rt, &fs.v[i]) ||
				((unsigned)k2 >= rt->plan->total && if_nametoindex(fs.v[i].ifname))))
			continue;
		if (remove && if_nametoindex(fs.v[i].ifname))
			continue;
		if ((r = frule_put(rt, RTM_DELRULE, 0, &fs.v[i])) < 0 && r != -ENOENT) {
			errno = -r;
			fail(rt, "unable to delete the routing rule of %s:", fs.v[i].ifname);
			goto fail;
		}
		gone++;
	}
	free(fs.v);
	return gone;
fail:
	free(fs.v);
	return -1;
}

/* Make the per-tap rules as wanted (remove: none of ours whose tap is
 * gone) and read them back.  Adding first (NLM_F_EXCL: a rerun finds them
 * there) and deleting only what is not wanted, so a rerun never opens a
 * gap.  A rule of a tap beyond the slots that still exists (busy:
 * netsetup left it to its VM) stays, and so, when removing, does the rule
 * of any tap that still exists (remove_all deletes the taps first; one it
 * could not delete keeps its rule).  Returns the number deleted, or -1;
 * *v4, *v6: the taps with every wanted rule of the family found. */
int route_rules(struct rtnl *rt, int remove, unsigned *v4, unsigned *v6, int *has_v6, unsigned char *tapok)
{
	struct frules fs = { 0 };
	unsigned i, k, *per;
	int gone;

	if ((!remove && route_rules_add(rt, has_v6) < 0) || (gone = route_rules_del(rt, remove)) < 0)
		return -1;
	*v4 = *v6 = 0;
	if (!(per = calloc(2 * (size_t)MAX_SLOTS, sizeof *per)))
		return fail(rt, "unable to allocate memory:");
	if (frule_dump_all(rt, &fs) < 0) {
		free(fs.v);
		free(per);
		return -1;
	}
	for (i = 0; i < fs.n; i++) {
		long long k2;

		if (frule_wanted(rt, &fs.v[i]) && frule_ours(&fs.v[i], &k2))
			per[2 * k2 + (fs.v[i].family != AF_INET)]++;
	}
	for (k = 0; k < rt->plan->total; k++) {
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

int tap_filters(struct rtnl *rt, unsigned *good, unsigned char *tapok, uint8_t tag[8], int *da)
{
	char name[IFNAMSIZ], msg[256];
	unsigned k;

	*da = 1; /* every tap's filter read back with its da flag */
	for (*good = 0, k = 0; k < rt->plan->total; k++) {
		struct tapcfg cfg;
		struct tcfilter_state st = { 0 };
		int idx, r;

		tcfilter_slot_cfg(k, rt->plan->base + 4 * k + 1, k >= rt->plan->nslots, &cfg);
		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)) ||
		    (r = tcfilter_install(idx, &cfg, tag, &st, msg, sizeof msg)) < 0)
			return fail(rt, "%s: %s", name, idx ? msg : "gone");
		*da = *da && st.ours && st.direct_action;
		if (r)
			++*good;
		else
			warn("verify: %s %s", name, msg);
		tapok[k] = tapok[k] && r;
	}
	return 0;
}
