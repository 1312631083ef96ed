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
 * root.
 *
 * The work is lib/netslot.c (taps, addresses, sysctls, tc filters, the
 * fail-closed routing rules) and lib/nftbuild.c (the tables); this file
 * reads the options, runs the steps in the order that keeps a slot from
 * being offered half made, reports, and picks the exit status. */

#include "egress.h"
#include "jail.h"
#include "net.h"
#include "netstate.h"
#include "netslot.h"
#include "nftbuild.h"
#include "ranges.h"
#include "tcfilter.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "isopod-netsetup [--slots N] [--open-slots M] [--base ADDR] [--user UID] [--conn-limit N] [--resolver ADDR[:PORT]] [--no-docker-user] [--remove]"

#define TABLE NFTB_TABLE
#define MAX_SLOTS NET_MAX_SLOTS

/* One run: its plan, its two netlink contexts, and what each step found
 * per slot for the next (a tap is advertised only when all went well). */
struct nsctx {
	struct netplan plan;
	struct rtnl rt;
	struct nftb nb;
	int remove;
	const char *resolver;              /* --resolver, else as a run's broker finds it */
	int made[MAX_SLOTS], busy[MAX_SLOTS];
	char unverified[256];  /* the busy taps advertise() marked unverified */
	unsigned char tapok[MAX_SLOTS], v6off[MAX_SLOTS];
	unsigned created, v6bad, rules_v4, rules_v6, tc_good;
	int has_v6, rules_ok, local_ok, verified, tables_ok;
	json_t *taps, *tc;
	char err[512];
};

/* Tests kill netsetup between two steps: ISOPOD_TEST_KILL_AT=<point>
 * (rules, filter, alias, table), as a crash or SIGKILL would. */
static void test_point(const char *name)
{
	const char *k = getenv("ISOPOD_TEST_KILL_AT");

	if (k && !strcmp(k, name))
		raise(SIGKILL);
}

static void parse_args(struct nsctx *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "slots", required_argument, NULL, 's' },
		{ "open-slots", required_argument, NULL, 'o' },
		{ "base", required_argument, NULL, 'b' },
		{ "user", required_argument, NULL, 'u' },
		{ "conn-limit", required_argument, NULL, 'c' },
		{ "resolver", required_argument, NULL, 'r' },
		{ "no-docker-user", no_argument, NULL, 'D' },
		{ "remove", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct netplan *p = &c->plan;
	struct in_addr a;
	long long v;
	int o;

	while ((o = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (o) {
		case 's':
			if (parse_ll(optarg, 0, MAX_SLOTS, &v) < 0)
				die(EX_USAGE, "bad --slots %.40s: want 0..%d", optarg, MAX_SLOTS);
			p->nslots = (unsigned)v;
			break;
		case 'o':
			if (parse_ll(optarg, 0, MAX_SLOTS, &v) < 0)
				die(EX_USAGE, "bad --open-slots %.40s: want 0..%d", optarg, MAX_SLOTS);
			p->nopen = (unsigned)v;
			break;
		case 'b':
			if (inet_pton(AF_INET, optarg, &a) != 1)
				die(EX_USAGE, "bad --base %.40s: want an IPv4 address", optarg);
			p->base = ntohl(a.s_addr);
			break;
		case 'u':
			if (parse_ll(optarg, 0, 0x7fffffff, &v) < 0)
				die(EX_USAGE, "bad --user %.40s: want a numeric uid", optarg);
			p->owner = (long)v;
			break;
		case 'c':
			if (parse_ll(optarg, 1, 1000000, &v) < 0)
				die(EX_USAGE, "bad --conn-limit %.40s: want 1..1000000", optarg);
			p->conn_limit = (unsigned)v;
			break;
		case 'r':
			c->resolver = optarg;
			break;
		case 'D':
			p->docker = 0;
			break;
		case 'R':
			c->remove = 1;
			break;
		case 'h':
			puts("usage: " USAGE);
			exit(0);
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
}

/* The resolver the jail egress chain lets the brokers reach: --resolver,
 * else the one a run hands its broker (ISOPOD_RESOLVER, else the first
 * IPv4 nameserver of /etc/resolv.conf: lib/egress.c), port 53 unless
 * named.  None found: no rule (warned), the brokers' DNS is dropped. */
static void plan_resolver(struct nsctx *c)
{
	struct netplan *p = &c->plan;
	const char *s = c->resolver, *e = getenv("ISOPOD_RESOLVER");
	char buf[64], *colon;
	struct in_addr a;
	long long port = 53;

	if (!s && e && *e)
		s = e;
	if (!s && egress_default_resolver(buf, sizeof buf) == 0)
		s = buf;
	if (!s) {
		warn("no resolver (no --resolver, ISOPOD_RESOLVER nor IPv4 nameserver in /etc/resolv.conf): "
		     "the brokers' DNS will be dropped");
		return;
	}
	if (s != buf)
		snprintf(buf, sizeof buf, "%s", s);
	if ((colon = strchr(buf, ':'))) {
		*colon = 0;
		if (parse_ll(colon + 1, 1, 65535, &port) < 0)
			die(EX_USAGE, "bad resolver %.64s: want ADDR[:PORT]", s);
	}
	if (inet_pton(AF_INET, buf, &a) != 1)
		die(EX_USAGE, "bad resolver %.64s: want an IPv4 address", s);
	p->resolver = ntohl(a.s_addr);
	p->resolver_port = (uint16_t)port;
}

/* The plan's derived parts, checked; the host's overrides of the deny
 * list: the same lines every run's broker and result read (there is no
 * flag, so they cannot differ). */
static void plan_finish(struct nsctx *c)
{
	struct netplan *p = &c->plan;
	const char *e;
	char msg[512];
	long long v;
	int r;

	p->total = p->nslots + p->nopen;
	if (!c->remove && (p->total < 1 || p->total > MAX_SLOTS))
		die(EX_USAGE, "bad --slots %u --open-slots %u: want 1..%d slots in all", p->nslots, p->nopen,
		    MAX_SLOTS);
	if (p->owner < 0 && (e = getenv("SUDO_UID")) && parse_ll(e, 0, 0x7fffffff, &v) == 0)
		p->owner = (long)v;
	/* The slot range is one aligned prefix (for the NAT rule). */
	for (p->prefix = 30; p->prefix > 0 && (1u << (32 - p->prefix)) < 4 * p->total; p->prefix--)
		;
	if (p->base & ~(~0u << (32 - p->prefix)))
		die(EX_USAGE, "bad --base: %u slots need a /%d-aligned base", p->total, p->prefix);
	if (!c->remove && (r = ranges_load_config(ranges_config_path(), p->allow, RANGES_ALLOW_MAX,
					       &p->nallow, msg, sizeof msg)) < 0)
		die(r == -1 ? EX_USAGE : EX_SYS, "%s", msg);
	if (!c->remove) {
		uid_t first, count;

		/* the same lines jail_identity reads: one range for every broker */
		if (jail_uid_range(&first, &count, msg, sizeof msg) < 0)
			die(EX_USAGE, "%s", msg);
		p->jail_first = (uint32_t)first;
		p->jail_last = (uint32_t)(first + count - 1);
		plan_resolver(c);
	}
}

static void remove_all(struct nsctx *c)
{
	json_t *out, *gone = json_array();
	char name[IFNAMSIZ];
	unsigned k, v4, v6;
	int idx, r, rules_gone, has_v6 = 1;

	if (nftb_open(&c->nb, &c->plan) < 0 || nftb_remove(&c->nb) < 0)
		die(EX_SYS, "%s", c->nb.err);
	nftb_close(&c->nb);
	/* The taps before their rules: a tap that cannot be deleted (and then
	 * every one after it: this dies) keeps its rule, so a failed removal
	 * never leaves a live tap with neither table nor rule. */
	for (k = 0; k < MAX_SLOTS; k++) {
		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)))
			continue;
		if ((r = link_del(&c->rt, idx)) < 0) {
			errno = -r;
			die(EX_SYS, "unable to delete %s:", name);
		}
		json_array_append_new(gone, json_string(name));
	}
	if ((rules_gone = route_rules(&c->rt, 1, &v4, &v6, &has_v6, NULL)) < 0)
		die(EX_SYS, "%s", c->rt.err);
	/* The kernel's `local` rule back at priority 0, ours out. */
	if ((r = local_rule(&c->rt, 1)) < 0)
		die(EX_SYS, "%s", c->rt.err);
	if (!r)
		die(EX_SYS, "unable to verify the local routing rule back at priority 0");
	out = json_pack("{s:s, s:[s, s], s:b, s:o, s:i}", "table", "inet " TABLE, "tables",
			"inet " TABLE, "arp " TABLE, "removed", 1, "taps", gone,
			"docker_user_rules_removed", (int)c->nb.dk_n);
	json_object_set_new(out, "route_rules_removed", json_integer(rules_gone));
	json_emit(out);
	json_decref(out);
}

/* The taps first; a running VM's tap keeps its mode: changing it under
 * the VM would change what that VM may reach mid-run. */
static void make_taps(struct nsctx *c)
{
	const struct netplan *p = &c->plan;
	char name[IFNAMSIZ], was[16];
	unsigned k;

	for (k = 0; k < p->total; k++) {
		tap_name(k, name);
		if ((c->made[k] = tap_make(&c->rt, name, &c->busy[k])) < 0)
			die(c->made[k] == -2 ? EX_CONFLICT : EX_SYS, "%s", c->rt.err);
		c->created += (unsigned)c->made[k];
		/* an unverified alias too: the VM still runs in that mode */
		if (c->busy[k] && *net_tap_kept_mode((int)k, was, sizeof was, NULL) &&
		    strcmp(was, slot_mode(p, k)))
			die(EX_CONFLICT, "unable to make %s %s: a VM is using it in %s mode now", name,
			    slot_mode(p, k), was);
	}
}

/* Each tap's IPv6 off, IPv4 sysctls and address; the report's "taps". */
static void set_taps(struct nsctx *c)
{
	const struct netplan *p = &c->plan;
	char name[IFNAMSIZ], gw[INET_ADDRSTRLEN], guest[INET_ADDRSTRLEN], macs[18];
	uint8_t mac[6];
	unsigned k;

	c->taps = json_array();
	for (k = 0; k < p->total; k++) {
		int idx, r;

		tap_name(k, name);
		if (!(idx = (int)if_nametoindex(name)))
			die(EX_SYS, "unable to find %s after creating it:", name);
		c->v6off[k] = (unsigned char)tap_no_ipv6(name);
		c->v6bad += !c->v6off[k];
		if (tap_ipv4(&c->rt, name) < 0)
			die(EX_SYS, "%s", c->rt.err);
		if ((r = addr_set(&c->rt, idx, k)) < 0) {
			errno = -r;
			die(EX_SYS, "unable to set the address of %s:", name);
		}
		slot_ip(p, k, 1, gw);
		slot_ip(p, k, 2, guest);
		slot_mac(k, mac);
		snprintf(macs, sizeof macs, "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
			 mac[3], mac[4], mac[5]);
		json_array_append_new(c->taps, json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:b, s:b}",
			"name", name, "slot", (int)k, "mode", slot_mode(p, k), "gateway", gw, "guest", guest,
			"mac", macs, "prefix", 30, "created", c->made[k], "busy", c->busy[k]));
	}
	/* Taps beyond the slots (left by a larger earlier run) go, unless busy. */
	for (k = p->total; k < MAX_SLOTS; k++) {
		int idx;

		tap_name(k, name);
		if ((idx = (int)if_nametoindex(name)) && link_del(&c->rt, idx) < 0)
			warn("unable to delete the extra tap %s (in use?)", name);
	}
}

/* The routing rules, per tap and the host's `local` ones. */
static void set_rules(struct nsctx *c)
{
	unsigned total = c->plan.total;

	if (route_rules(&c->rt, 0, &c->rules_v4, &c->rules_v6, &c->has_v6, c->tapok) < 0)
		die(EX_SYS, "%s", c->rt.err);
	c->rules_ok = c->rules_v4 == total && c->rules_v6 == (c->has_v6 ? total : 0);
	if (!c->rules_ok)
		warn("verify: %u IPv4 and %u IPv6 taps with their routing rules at priority %d, want %u each",
		     c->rules_v4, c->rules_v6, NET_RULE_PREF, total);
	if ((c->local_ok = local_rule(&c->rt, 0)) < 0)
		die(EX_SYS, "%s", c->rt.err);
	if (!c->local_ok)
		warn("verify: the local routing rules are not (only) at priority %d with fwmark 0/0x%08x and %d "
		     "with fwmark 0x%08x/0x%08x", NET_LOCAL_PREF, TCFILTER_TAPMARK, NET_LOCAL_LATE_PREF,
		     TCFILTER_TAPMARK, TCFILTER_TAPMARK);
	c->rules_ok = c->rules_ok && c->local_ok;
}

/* The tc ingress filter of every slot's tap (lib/tcfilter.c; man
 * isopod-netsetup, FAIL CLOSED), read back: the report's "tc_filter"; its
 * direct_action is the flag read back, on every tap. */
static void set_filters(struct nsctx *c)
{
	uint8_t tag[8] = { 0 };
	char hex[17];
	unsigned k;
	int da;

	if (tap_filters(&c->rt, &c->tc_good, c->tapok, tag, &da) < 0)
		die(EX_SYS, "%s", c->rt.err);
	for (k = 0; k < 8; k++)
		snprintf(hex + 2 * k, 3, "%02x", tag[k]);
	c->tc = json_pack("{s:s, s:s, s:i, s:b}", "program", TCFILTER_PROG, "tag", hex, "taps",
			  (int)c->tc_good, "direct_action", da);
}

/* The tables, loaded and read back. */
static void set_tables(struct nsctx *c)
{
	int r;

	if (nftb_open(&c->nb, &c->plan) < 0 || nftb_load(&c->nb) < 0 || (r = nftb_verify(&c->nb)) < 0)
		die(EX_SYS, "%s", c->nb.err);
	c->verified = r && c->rules_ok && c->tc_good == c->plan.total && !c->v6bad;
	c->tables_ok = r;
	nftb_close(&c->nb);
}

/* A tap is advertised only with its rules, its filter and the table read
 * back as wanted (and the local rule in place), so last: one without, or
 * any when the read-back failed, loses a previous run's alias, so a slot
 * is never offered without them. */
static void advertise(struct nsctx *c)
{
	char name[IFNAMSIZ], alias[48], was[16];
	unsigned k;
	size_t u;

	for (k = 0; k < c->plan.total; k++) {
		int idx, r, ok = c->tapok[k] && c->v6off[k] && c->verified, keep = 0;

		tap_name(k, name);
		snprintf(alias, sizeof alias, "%s%s", ok ? NET_ALIAS_PREFIX : NET_ALIAS_UNVERIFIED,
			 slot_mode(&c->plan, k));
		/* A VM's tap keeps its mode, unverified: the mode is what the
		 * next run checks before it changes a busy tap (without one
		 * --open-slots would open a running filtered VM's slot), and
		 * "unverified" keeps it from every claim once that VM is gone,
		 * until a run verifies it (doc/DECISIONS.md).  An idle tap
		 * that did not verify loses its alias. */
		if (!ok && c->busy[k] && !*net_tap_kept_mode((int)k, was, sizeof was, NULL))
			keep = 1; /* never advertised (held by another program): as it is */
		else if (!ok && c->busy[k] &&
			 (u = strlen(c->unverified)) + IFNAMSIZ + 2 < sizeof c->unverified)
			snprintf(c->unverified + u, sizeof c->unverified - u, "%s%s", u ? ", " : "", name);
		if (!ok && !c->busy[k])
			*alias = 0;
		if (!(idx = (int)if_nametoindex(name)) ||
		    (r = link_set(&c->rt, idx, keep ? NULL : alias)) < 0) {
			errno = idx ? -r : ENODEV;
			die(EX_SYS, "unable to bring %s up:", name);
		}
	}
}

/* The overrides in force, each with the listed block it opens a hole in:
 * [{"range": "198.51.100.0/24", "in": "198.51.100.0/24", "name": "..."}]. */
static json_t *allow_ranges_json(const struct netplan *p)
{
	const struct range_def *l;
	json_t *a = json_array();
	size_t n, i;

	l = ranges_list(&n);
	for (i = 0; i < p->nallow; i++) {
		char t[RANGES_TEXT_MAX];
		const char *why;
		int k = ranges_override_check(&p->allow[i], &why);

		json_array_append_new(a, json_pack("{s:s, s:s, s:s}", "range",
			range_text(&p->allow[i], t, sizeof t), "in", k >= 0 ? l[k].cidr : "?",
			"name", k >= 0 ? l[k].name : "?"));
	}
	return a;
}

/* A /proc/sys/net/ipv4 value (this network namespace's) into buf, its
 * newline cut.  0, or -1 with errno. */
static int read_sysctl(const char *name, char *buf, size_t sz)
{
	char p[128];
	ssize_t n;
	int fd;

	snprintf(p, sizeof p, "/proc/sys/net/ipv4/%s", name);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, buf, sz - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* Is port in ip_local_reserved_ports' list ("1053,3128,5000-5010")? */
static int port_reserved(const char *list, unsigned port)
{
	for (const char *q = list; *q;) {
		char *e;
		unsigned long a = strtoul(q, &e, 10), b = a;

		if (e == q)
			return 0;
		if (*e == '-')
			b = strtoul(e + 1, &e, 10);
		if (port >= a && port <= b)
			return 1;
		q = *e == ',' ? e + 1 : e;
		if (*e && *e != ',')
			return 0;
	}
	return 0;
}

/* The ports every broker binds on its own gateway (lib/tcfilter.h, the
 * canary's in lib/net.h) must never be an autobound (ephemeral) port: a
 * broker's sendto/connect from a wildcard socket would take another
 * slot's gateway:1053 before that slot's broker binds it (review L4).
 * Refused rather than reserved: ip_local_reserved_ports and the port range
 * are the host's (per network namespace), and the default range
 * (32768-60999) never covers them.  And the doctor's resolver port must
 * stay privileged (net.h NET_DOCTOR_DNS_PORT, review L3). */
static void check_ports(void)
{
	static const unsigned fixed[] = { TCFILTER_PORT_BROKER_DNS, NET_CANARY_PORT, NET_CANARY_PORT + 1,
					  TCFILTER_PORT_BROKER_HTTP };
	char range[64], res[4096] = "", hit[64] = "";
	unsigned long lo, hi, unpriv;

	if (read_sysctl("ip_local_port_range", range, sizeof range) < 0 ||
	    sscanf(range, "%lu %lu", &lo, &hi) != 2)
		die(EX_SYS, "unable to read net.ipv4.ip_local_port_range:");
	if (read_sysctl("ip_local_reserved_ports", res, sizeof res) < 0)
		res[0] = 0;
	for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
		if (fixed[i] >= lo && fixed[i] <= hi && !port_reserved(res, fixed[i]))
			snprintf(hit + strlen(hit), sizeof hit - strlen(hit), "%s%u", *hit ? "," : "",
				 fixed[i]);
	if (*hit)
		die(EX_CONFLICT, "net.ipv4.ip_local_port_range is %lu-%lu: it covers the brokers' fixed "
		    "ports %s, which a broker's autobound socket could take from another slot; narrow "
		    "it (the default is 32768 60999) or add them to net.ipv4.ip_local_reserved_ports",
		    lo, hi, hit);
	if (read_sysctl("ip_unprivileged_port_start", range, sizeof range) == 0 &&
	    sscanf(range, "%lu", &unpriv) == 1 && unpriv <= NET_DOCTOR_DNS_PORT)
		die(EX_CONFLICT, "net.ipv4.ip_unprivileged_port_start is %lu: any user could listen on "
		    "127.0.0.1:%d, the doctor's resolver, which the jail egress chain lets every "
		    "broker reach; raise it above %d (the default is 1024)", unpriv, NET_DOCTOR_DNS_PORT,
		    NET_DOCTOR_DNS_PORT);
}

static int read_forwarding(void)
{
	char ch = '0';
	int fd = open("/proc/sys/net/ipv4/ip_forward", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		if (read(fd, &ch, 1) != 1)
			ch = '0';
		close(fd);
	}
	return ch == '1';
}

static void report(struct nsctx *c)
{
	const struct netplan *p = &c->plan;
	char gw[INET_ADDRSTRLEN], markhex[16];
	struct in_addr a = { .s_addr = htonl(p->base) };
	json_t *out, *fc;

	inet_ntop(AF_INET, &a, gw, sizeof gw);
	out = json_pack("{s:s, s:[s, s], s:i, s:i, s:s, s:i, s:o, s:i, s:i, s:i, s:b, s:b, s:b, s:s}",
		"table", "inet " TABLE, "tables", "inet " TABLE, "arp " TABLE, "slots", (int)p->nslots,
		"open_slots", (int)p->nopen, "base", gw, "prefix", p->prefix, "taps", c->taps, "taps_created",
		(int)c->created, "chains", (int)c->nb.nchains, "rules", (int)c->nb.nrules, "verified",
		c->verified, "forwarding", read_forwarding(), "docker_user", c->nb.dk_want > 0, "ipv6",
		"dropped");
	json_object_set_new(out, "owner", p->owner >= 0 ? json_integer(p->owner) : json_null());
	json_object_set_new(out, "conn_limit", json_integer(p->conn_limit));
	snprintf(markhex, sizeof markhex, "0x%08x", NET_FWMARK);
	json_object_set_new(out, "fail_closed", json_pack("{s:i, s:s, s:{s:i, s:i}, s:i}",
		"rule_priority", NET_RULE_PREF, "fwmark", markhex, "route_rules", "ipv4", (int)c->rules_v4,
		"ipv6", (int)c->rules_v6, "canary_port", NET_CANARY_PORT));
	fc = json_object_get(out, "fail_closed");
	json_object_set_new(fc, "tc_filter", c->tc);
	snprintf(markhex, sizeof markhex, "0x%08x", TCFILTER_TAPMARK);
	json_object_set_new(fc, "local_rule", json_pack("{s:i, s:i, s:s, s:b}", "priority",
		NET_LOCAL_PREF, "late_priority", NET_LOCAL_LATE_PREF, "tapmark", markhex, "verified",
		c->local_ok));
	json_object_set_new(out, "allow_ranges", allow_ranges_json(p));
	{
		struct in_addr ra = { .s_addr = htonl(p->resolver) };
		char rs[INET_ADDRSTRLEN + 8];

		inet_ntop(AF_INET, &ra, rs, INET_ADDRSTRLEN);
		snprintf(rs + strlen(rs), 8, ":%u", p->resolver_port);
		json_object_set_new(out, "jail_egress", json_pack("{s:s, s:I, s:I, s:o}", "chain", "jail",
			"uid_first", (json_int_t)p->jail_first, "uid_last", (json_int_t)p->jail_last,
			"resolver", p->resolver_port ? json_string(rs) : json_null()));
	}
	json_emit(out);
	json_decref(out);
}

int main(int argc, char **argv)
{
	struct nsctx c = {
		.plan = { .nslots = 16, .conn_limit = 4096, .docker = 1,
			  .base = 0x0ad50000 /* 10.213.0.0 */, .owner = -1 },
		.has_v6 = 1,
	};

	progname = "isopod-netsetup";
	parse_args(&c, argc, argv);
	plan_finish(&c);
	if (rtnl_open(&c.rt, &c.plan) < 0)
		die(EX_SYS, "%s", c.rt.err);
	if (c.remove) {
		remove_all(&c);
		rtnl_close(&c.rt);
		if (netstate_remove(c.err, sizeof c.err) < 0)
			die(EX_SYS, "%s", c.err);
		return 0;
	}
	check_ports();
	make_taps(&c);
	set_taps(&c);
	/* The routing rules before the table: an open slot is blackholed
	 * until the table that marks its packets is in.  Then the tc filter,
	 * the table, and last the alias that advertises a tap as a slot and
	 * brings it up: a netsetup that dies before leaves no new slot
	 * without all three. */
	set_rules(&c);
	test_point("rules");
	set_filters(&c);
	test_point("filter");
	if (slots_forwarding(&c.rt) < 0)
		die(EX_SYS, "%s", c.rt.err);
	test_point("table");
	set_tables(&c);
	advertise(&c);
	test_point("alias");
	rtnl_close(&c.rt);
	/* A failure leaves stdout empty (doc/INTERFACES.md): what did not
	 * verify is said here, not in a report. */
	if (!c.verified) {
		die(EX_SYS, "unable to verify the tables (%s), routing rules (%s), tc filters (%u of %u "
		    "taps) and IPv6 settings (%u taps failed) after loading them (no slot is offered "
		    "until a rerun verifies)%s%s", c.tables_ok ? "ok" : "differ",
		    c.rules_ok ? "ok" : "differ", c.tc_good, c.plan.total, c.v6bad,
		    *c.unverified ? "; a VM runs on a slot that did not verify, its tap marked "
				    "\"" NET_ALIAS_UNVERIFIED "MODE\" (no claim takes it after that VM): "
				  : "", c.unverified);
	}
	/* What was verified, recorded for the doctor to compare (lib/netstate.h),
	 * before the report: a failure to record leaves stdout empty too. */
	if (netstate_write(c.err, sizeof c.err) < 0)
		die(EX_SYS, "%s", c.err);
	report(&c);
	return 0;
}
