/* net.c - network slots: taps left by isopod-netsetup, slot locks. */

#include "net.h"
#include "nldump.h"
#include "taphold.h"
#include "tcfilter.h"
#include "util.h"

#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int net_mode_valid(const char *mode)
{
	return !strcmp(mode, "none") || !strcmp(mode, "filtered") || !strcmp(mode, "open") ||
	       !strcmp(mode, "learn");
}

const char *net_slot_mode(const char *mode)
{
	return strcmp(mode, "learn") ? mode : "filtered";
}

int net_tap_ipv6_off(const char *tap)
{
	char p[PATH_MAX], c = 0;
	int fd;

	if (access("/proc/sys/net/ipv6", F_OK) < 0 && errno == ENOENT)
		return 1; /* no IPv6 here: nothing to turn off */
	if (pathn(p, sizeof p, "/proc/sys/net/ipv6/conf/%s/disable_ipv6", tap) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == '1';
}

int net_ntaps(void)
{
	char name[IFNAMSIZ];
	int k;

	for (k = 0; k < NET_MAX_SLOTS; k++) {
		snprintf(name, sizeof name, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
		if (!if_nametoindex(name))
			break;
	}
	return k;
}

int net_require_taps(char *err, size_t errsz)
{
	int n = net_ntaps();

	if (!n)
		snprintf(err, errsz, "unable to find the network taps (" NET_TAP_PREFIX "0 is missing): "
			 "run `sudo isopod-netsetup` once after each host boot, or use --net none");
	return n;
}

/* The directory of the slot locks, made when missing.  0, or an exit
 * class with err. */
static int lock_dir(char *d, size_t dsz, char *err, size_t errsz)
{
	const char *e = getenv("ISOPOD_NET_LOCKS");
	char failed[PATH_MAX];

	if ((e && *e) ? pathn(d, dsz, "%s", e) < 0 : pathn(d, dsz, "%s/locks", store_home()) < 0) {
		snprintf(err, errsz, "path too long: %.64s...", e && *e ? e : store_home());
		return EX_USAGE;
	}
	if (mkdir_p(d, 0700, failed, sizeof failed) < 0) {
		snprintf(err, errsz, "unable to create %.512s: %s", failed, strerror(errno));
		return EX_SYS;
	}
	return 0;
}

/* LOCK_EX|LOCK_NB on slot-k: the fd, -1 when held by another VM, -2 on
 * failure (err). */
static int try_slot(const char *dir, int k, char *err, size_t errsz)
{
	char p[PATH_MAX];
	int fd;

	if (pathn(p, sizeof p, "%s/slot-%d", dir, k) < 0) {
		snprintf(err, errsz, "path too long: %.64s...", dir);
		return -2;
	}
	fd = lock_open(p, LOCK_EX | LOCK_NB);
	if (fd < 0 && errno != EWOULDBLOCK) {
		snprintf(err, errsz, "unable to lock %.512s: %s", p, strerror(errno));
		return -2;
	}
	return fd;
}

const char *net_tap_kept_mode(int k, char *out, size_t sz, int *unverified)
{
	char p[PATH_MAX], buf[64];
	size_t n = strlen(NET_ALIAS_PREFIX), nu = strlen(NET_ALIAS_UNVERIFIED);
	const char *m;
	ssize_t r;
	int fd;

	*out = '\0';
	if (unverified)
		*unverified = 0;
	if (pathn(p, sizeof p, "/sys/class/net/" NET_TAP_PREFIX "%d/ifalias", k) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return out;
	r = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (r <= 0)
		return out;
	buf[r] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (strncmp(buf, NET_ALIAS_PREFIX, n))
		return out;
	m = strncmp(buf, NET_ALIAS_UNVERIFIED, nu) ? buf + n : buf + nu;
	if (!strcmp(m, "filtered") || !strcmp(m, "open")) {
		snprintf(out, sz, "%s", m);
		if (unverified)
			*unverified = m == buf + nu;
	}
	return out;
}

const char *net_tap_mode(int k, char *out, size_t sz)
{
	int unverified;

	net_tap_kept_mode(k, out, sz, &unverified);
	if (unverified)
		*out = '\0';
	return out;
}

/* Does tap k's ingress hold isopod-netsetup's tc filter (man
 * isopod-netsetup, FAIL CLOSED): exactly one filter, ours (priority and
 * handle 1, kind bpf, direct-action, the program isopod_tap), loaded with
 * this slot's parameters (its gateway, the tap's address now; its mode,
 * the tap's alias)?  The parameters only when the kernel hands the program
 * out (CAP_SYS_ADMIN); the dump needs no privilege.  1 yes, 0 no (err
 * says what is there), -1 unable to ask (err). */
/* The IPv4 address on tap k (host order), 0 for none. */
static uint32_t tap_gw(int k)
{
	struct ifreq ifr;
	uint32_t gw = 0;
	int s;

	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, IFNAMSIZ, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
	if ((s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0 && ioctl(s, SIOCGIFADDR, &ifr) == 0)
		gw = ntohl(((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr.s_addr);
	if (s >= 0)
		close(s);
	return gw;
}

static int tap_filtered(int k, const char *mode, char *err, size_t errsz)
{
	struct tcfilter_state st;
	struct tapcfg want;
	char name[IFNAMSIZ], msg[256];
	int idx;

	snprintf(name, sizeof name, NET_TAP_PREFIX "%d", k);
	if (!(idx = (int)if_nametoindex(name)))
		return 0;
	if (tcfilter_read(idx, &st, msg, sizeof msg) < 0) {
		snprintf(err, errsz, "%s: %s", name, msg);
		return -1;
	}
	tcfilter_slot_cfg((unsigned)k, tap_gw(k), !strcmp(mode, "open"), &want);
	if (tcfilter_judge(&st, &want, NULL, msg, sizeof msg))
		return 1;
	snprintf(err, errsz, "%s", msg);
	return 0;
}

/* One family's policy routing rules, as far as a claim judges them. */
struct rulecheck {
	const char *tap;
	uint32_t gw;               /* network order */
	int icmp, blackhole, local_ours, local_early;
};

static void rule_msg(const struct nlmsghdr *h, uint8_t family, struct rulecheck *rc)
{
	const struct fib_rule_hdr *f = NLMSG_DATA(h);
	const struct rtattr *a;
	size_t len;
	uint32_t pref = 0, table, mark = 0, mask = 0, dst = 0;
	uint8_t proto = 0;
	char iif[IFNAMSIZ] = "";
	int has_mark = 0;

	if (h->nlmsg_type != RTM_NEWRULE || h->nlmsg_len < NLMSG_LENGTH(sizeof *f) || f->family != family)
		return;
	table = f->table;
	len = h->nlmsg_len - NLMSG_LENGTH(sizeof *f);
	for (a = (const void *)((const char *)f + NLMSG_ALIGN(sizeof *f)); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		const void *d = RTA_DATA(a);
		size_t n = RTA_PAYLOAD(a);

		switch (a->rta_type & NLA_TYPE_MASK) {
		case FRA_PRIORITY: if (n >= 4) memcpy(&pref, d, 4); break;
		case FRA_TABLE: if (n >= 4) memcpy(&table, d, 4); break;
		case FRA_FWMARK: if (n >= 4) memcpy(&mark, d, 4); has_mark = 1; break;
		case FRA_FWMASK: if (n >= 4) memcpy(&mask, d, 4); has_mark = 1; break;
		case FRA_DST: if (n == 4) memcpy(&dst, d, 4); break;
		case FRA_IP_PROTO: if (n >= 1) proto = *(const uint8_t *)d; break;
		case FRA_IIFNAME: snprintf(iif, sizeof iif, "%.*s", (int)n, (const char *)d); break;
		default: break;
		}
	}
	if (f->action == FR_ACT_TO_TBL && table == RT_TABLE_LOCAL && pref < NET_RULE_PREF - 1 &&
	    family == AF_INET) {
		if (pref == NET_LOCAL_PREF && has_mark && mark == 0 && mask == TCFILTER_TAPMARK && !*iif &&
		    !f->dst_len && !proto)
			rc->local_ours = 1;
		else
			rc->local_early = 1; /* looks the host up before the tap's rules */
	}
	if (strcmp(iif, rc->tap))
		return;
	if (family == AF_INET && pref == NET_RULE_PREF - 1 && f->action == FR_ACT_TO_TBL &&
	    table == RT_TABLE_LOCAL && f->dst_len == 32 && dst == rc->gw && proto == IPPROTO_ICMP && !has_mark)
		rc->icmp = 1;
	if (pref == NET_RULE_PREF && f->action == FR_ACT_BLACKHOLE && !f->dst_len && !proto &&
	    (family == AF_INET ? has_mark && mark == 0 && mask == NET_FWMARK : !has_mark))
		rc->blackhole = 1;
}

struct rulemsg {
	uint8_t family;
	struct rulecheck *rc;
};

static void rule_cb(const struct nlmsghdr *h, void *data)
{
	const struct rulemsg *m = data;

	rule_msg(h, m->family, m->rc);
}

/* Read family's rules into rc.  0, -EAFNOSUPPORT (no such family here),
 * or -errno. */
static int rules_read(uint8_t family, struct rulecheck *rc)
{
	struct {
		struct nlmsghdr n;
		struct fib_rule_hdr f;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETRULE,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.f = { .family = family },
	};
	struct rulemsg m = { .family = family, .rc = rc };
	int nlerr, r;

	r = nl_dump(NETLINK_ROUTE, &req, sizeof req, rule_cb, &m, &nlerr);
	return r < 0 ? r : nlerr;
}

/* Does tap k (gateway gw, host order) have its fail-closed routing rules
 * (man isopod-netsetup, FAIL CLOSED), and is the host's `local` rule
 * where netsetup moved it?  A netsetup that died part-way, or a tool that
 * took a rule away or put the kernel's `local` rule back at 0, would
 * otherwise leave a slot usable without them.  1 yes, 0 no (err says
 * which), -1 unable to ask (err). */
static int tap_routed(int k, uint32_t gw, char *err, size_t errsz)
{
	char tap[IFNAMSIZ];
	struct rulecheck v4 = { 0 }, v6 = { 0 };
	int r;

	snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
	v4.tap = v6.tap = tap;
	v4.gw = htonl(gw);
	if ((r = rules_read(AF_INET, &v4)) < 0 || ((r = rules_read(AF_INET6, &v6)) < 0 && r != -EAFNOSUPPORT)) {
		snprintf(err, errsz, "unable to read the routing rules: %s", strerror(-r));
		return -1;
	}
	if (r == -EAFNOSUPPORT)
		v6.blackhole = 1; /* no IPv6 here: nothing to route */
	if (v4.icmp && v4.blackhole && v6.blackhole && v4.local_ours && !v4.local_early)
		return 1;
	snprintf(err, errsz, "%s lacks isopod's routing rules: run `sudo isopod-netsetup` again, or use "
		 "--net none (ICMP rule %s, IPv4 blackhole %s, IPv6 blackhole %s, local rule at %d %s%s)",
		 tap, v4.icmp ? "ok" : "missing", v4.blackhole ? "ok" : "missing",
		 v6.blackhole ? "ok" : "missing", NET_LOCAL_PREF, v4.local_ours ? "ok" : "missing",
		 v4.local_early ? ", another lookup of the local table before them" : "");
	return 0;
}

/* Slot k held by a process that is not isopod's -- its tap held open, or
 * one of its broker's ports on the gateway bound: never used, or every
 * later run would fail on it the same way (doc/DECISIONS.md "A tap someone
 * else holds", "A port someone else holds").  1 with the sentence naming
 * the holder in why, else 0. */
static int slot_held(int k, const char *mode, char *why, size_t sz)
{
	char tap[IFNAMSIZ], who[320];

	snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
	if (taphold_busy(tap)) {
		taphold_who(tap, who, sizeof who);
		if (snprintf(why, sz, "slot %d (%s) is held open by %s, not by an isopod VM", k, tap,
			     who) >= (int)sz)
			snprintf(why + sz - 4, 4, "...");
		return 1;
	}
	if (taphold_ports_held(htonl(tap_gw(k)), !strcmp(mode, "open"), NET_CANARY_PORT + 1, who,
			       sizeof who)) {
		if (snprintf(why, sz, "slot %d (%s): %s", k, tap, who) >= (int)sz)
			snprintf(why + sz - 4, 4, "...");
		return 1;
	}
	return 0;
}

/* The first free slot of this mode, locked (its fd in *fd, the slot in
 * *slot), skipping the slots whose tap something else holds open (one
 * warning each in warnings, when not NULL).  0, or an exit class with err:
 * 111 when there is no slot of the mode, 102 when all of them are busy or
 * held. */
static int find_slot(const char *asked, int *fd, int *slot, json_t *warnings, char *err, size_t errsz)
{
	char dir[PATH_MAX], m[16], why[400], held[400] = "";
	const char *mode = net_slot_mode(asked);
	int n = net_require_taps(err, errsz), k, nmode = 0, nheld = 0, r;

	if (!n)
		return EX_SYS;
	if ((r = lock_dir(dir, sizeof dir, err, errsz)))
		return r;
	for (k = 0; k < n; k++) {
		if (strcmp(net_tap_mode(k, m, sizeof m), mode))
			continue;
		nmode++;
		if ((*fd = try_slot(dir, k, err, errsz)) >= 0) {
			if (slot_held(k, mode, why, sizeof why)) {
				close(*fd);
				if (!nheld++)
					snprintf(held, sizeof held, "%s", why);
				if (warnings)
					json_array_append_new(warnings, json_sprintf("%s: skipped it", why));
				continue;
			}
			/* The tap must hold the fail-closed filter too (a
			 * netsetup that died part-way, a tool that took it). */
			if ((r = tap_filtered(k, mode, why, sizeof why)) != 1) {
				close(*fd);
				if (!r)
					snprintf(err, errsz, NET_TAP_PREFIX "%d lacks isopod's tc ingress filter: "
						 "run `sudo isopod-netsetup` again, or use --net none (%s)", k, why);
				else
					snprintf(err, errsz, "%s", why);
				return EX_SYS;
			}
			if ((r = tap_routed(k, tap_gw(k), err, errsz)) != 1) {
				close(*fd);
				return EX_SYS;
			}
			/* IPv6 on, the tap has a link-local address a guest
			 * talks to (the table and the filter drop it too). */
			snprintf(why, sizeof why, NET_TAP_PREFIX "%d", k);
			if (!net_tap_ipv6_off(why)) {
				close(*fd);
				snprintf(err, errsz, NET_TAP_PREFIX "%d has IPv6 on: run `sudo isopod-netsetup` "
					 "again, or use --net none", k);
				return EX_SYS;
			}
			*slot = k;
			return 0;
		}
		if (*fd == -2)
			return EX_SYS;
	}
	if (!nmode) {
		snprintf(err, errsz, "no %s slots%s: run `sudo isopod-netsetup %s N`, or use --net none",
			 mode, strcmp(asked, "learn") ? "" : " (--net learn runs on filtered slots)",
			 strcmp(mode, "open") ? "--slots" : "--open-slots");
		return EX_SYS;
	}
	if (nheld) {
		snprintf(err, errsz, "all %d %s network slots busy%s, %d of them held open by a process "
			 "that is not an isopod VM: %s%s; end it, or use --net none", nmode, mode,
			 strcmp(asked, "learn") ? "" : " (--net learn runs on them)", nheld, held,
			 nheld > 1 ? " (the first of them)" : "");
		return EX_CONFLICT;
	}
	snprintf(err, errsz, "all %d %s network slots busy%s: wait for a networked VM to end, or use "
		 "--net none", nmode, mode, strcmp(asked, "learn") ? "" : " (--net learn runs on them)");
	return EX_CONFLICT;
}

int net_check_free(const char *mode, char *err, size_t errsz)
{
	int fd, k, r = find_slot(mode, &fd, &k, NULL, err, errsz);

	if (!r)
		close(fd);
	return r;
}

/* The IPv4 address and MTU of the tap (set by isopod-netsetup).  0, or -1
 * with err. */
static int tap_info(struct netslot *ns, char *err, size_t errsz)
{
	struct ifreq ifr;
	struct in_addr gw, guest;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0) {
		snprintf(err, errsz, "unable to open a socket: %s", strerror(errno));
		return -1;
	}
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ns->tap);
	if (ioctl(s, SIOCGIFADDR, &ifr) < 0) {
		snprintf(err, errsz, "unable to read the address of %s (run `sudo isopod-netsetup`): %s",
			 ns->tap, strerror(errno));
		close(s);
		return -1;
	}
	gw = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
	ns->mtu = 1500;
	if (ioctl(s, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu >= 576)
		ns->mtu = (uint32_t)ifr.ifr_mtu;
	close(s);
	guest.s_addr = htonl(ntohl(gw.s_addr) + 1);
	inet_ntop(AF_INET, &gw, ns->gw, sizeof ns->gw);
	inet_ntop(AF_INET, &guest, ns->guest, sizeof ns->guest);
	snprintf(ns->addr, sizeof ns->addr, "%s/30", ns->guest);
	return 0;
}

int net_take_slot(struct netslot *ns, const char *mode, json_t *warnings, char *err, size_t errsz)
{
	int fd, k, r = find_slot(mode, &fd, &k, warnings, err, errsz);

	if (r)
		return r;
	memset(ns, 0, sizeof *ns);
	ns->slot = k;
	ns->lock_fd = fd;
	snprintf(ns->mode, sizeof ns->mode, "%s", net_slot_mode(mode));
	snprintf(ns->tap, sizeof ns->tap, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
	ns->mac[0] = 0x02, ns->mac[1] = 0x69, ns->mac[2] = 0x73, ns->mac[3] = 0x00;
	ns->mac[4] = (uint8_t)(k >> 8), ns->mac[5] = (uint8_t)k;
	snprintf(ns->macs, sizeof ns->macs, "%02x:%02x:%02x:%02x:%02x:%02x", ns->mac[0], ns->mac[1],
		 ns->mac[2], ns->mac[3], ns->mac[4], ns->mac[5]);
	if (tap_info(ns, err, errsz) < 0) {
		close(fd);
		ns->slot = -1;
		ns->lock_fd = -1;
		return EX_SYS;
	}
	return 0;
}

json_t *net_json(const struct netslot *ns, const char *mode)
{
	if (!ns || ns->slot < 0)
		return json_pack("{s:s, s:n, s:n, s:n}", "mode", mode, "slot", "guest_ip", "gateway");
	return json_pack("{s:s, s:i, s:s, s:s, s:s, s:s}", "mode", mode, "slot", ns->slot, "tap",
			 ns->tap, "guest_ip", ns->guest, "gateway", ns->gw, "mac", ns->macs);
}
