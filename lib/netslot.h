/* netslot.h - isopod-netsetup's slots on the host, short of nftables
 * (lib/nftbuild.h): the plan of one run (struct netplan, which
 * lib/nftbuild.c reads too), and over one rtnetlink socket (struct rtnl)
 * the persistent taps, their addresses, sysctls and tc filters, and the
 * fail-closed policy routing rules.  Root only; lib/net.c is the
 * unprivileged reader of what this leaves.
 *
 * Addressing (man isopod-netsetup): slot k uses the /30 at base + 4k;
 * gateway (the tap's host address) = base + 4k + 1, guest = base + 4k + 2,
 * guest MAC 02:69:73:00:KH:KL ("is", slot number big endian).
 *
 * Errors: -1 with the reason in rt->err, worded as isopod-netsetup prints
 * it (no function here exits). */
#ifndef ISOPOD_NETSLOT_H
#define ISOPOD_NETSLOT_H

#include "ranges.h"

#include <net/if.h>
#include <stddef.h>
#include <stdint.h>

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
 * so the host never goes without one.  (RULE_PREF, FWMARK, LOCAL_PREF and
 * LOCAL_LATE_PREF are lib/net.h's NET_*, TAPMARK lib/tcfilter.h's
 * TCFILTER_TAPMARK.) */

/* One run's slots, as its options and the host's config file make them. */
struct netplan {
	unsigned nslots;          /* filtered: 0..nslots-1 */
	unsigned nopen;           /* open: nslots..total-1 */
	unsigned total;
	/* Connections one guest may have in the host's conntrack table at
	 * once: new ones beyond are dropped, so a flood from one VM cannot
	 * fill the table every other flow of the host needs. */
	unsigned conn_limit;
	int docker;               /* DOCKER-USER rules wanted (--no-docker-user clears it) */
	uint32_t base;            /* of slot 0, host order */
	int prefix;               /* of the whole slot range */
	long owner;               /* of the taps; -1: none */
	/* Destinations a guest never reaches through the host (forward
	 * path) are lib/ranges.c's list, less the host's overrides
	 * (`allow_range` lines of its config file, read once by netsetup).
	 * The host's own addresses are local, so they meet the input chain
	 * instead, whatever the overrides say. */
	struct range allow[RANGES_ALLOW_MAX];
	size_t nallow;
	/* The jail egress chain (isopod-netsetup(8), JAIL EGRESS): the jail
	 * identities' uids (lib/jail.h, the host config), and the resolver
	 * their brokers ask (host order; port 0: none known, no rule). */
	uint32_t jail_first, jail_last;
	uint32_t resolver;
	uint16_t resolver_port;
};

struct mnl_socket;

struct rtnl {
	const struct netplan *plan;
	struct mnl_socket *nl;
	uint32_t seq;
	char err[512];            /* why the last call returned -1 */
};

/* Slot k's address base + 4k + host, as text (INET_ADDRSTRLEN). */
void slot_ip(const struct netplan *p, unsigned k, unsigned host, char *out);
void slot_mac(unsigned k, uint8_t mac[6]);
void tap_name(unsigned k, char out[IFNAMSIZ]);
/* "filtered" or "open" */
const char *slot_mode(const struct netplan *p, unsigned k);

int rtnl_open(struct rtnl *rt, const struct netplan *plan);
void rtnl_close(struct rtnl *rt);
/* Up, with its mode in its ifalias (readable by anybody in sysfs; "":
 * none, NULL: the alias as it is).  0 or -errno (rt->err not set). */
int link_set(struct rtnl *rt, int ifindex, const char *alias);
/* 0 or -errno (rt->err not set). */
int link_del(struct rtnl *rt, int ifindex);
/* Slot k's gateway/30 on the tap (NLM_F_REPLACE: a rerun is a no-op).
 * 0 or -errno (rt->err not set). */
int addr_set(struct rtnl *rt, int ifindex, unsigned k);
/* A persistent tap owned by the plan's owner: 1 created, 0 existed (*busy:
 * a VM has it open), -2 the name is not a tap's, -1 any other failure
 * (rt->err set either way). */
int tap_make(struct rtnl *rt, const char *name, int *busy);
/* IPv6 off on the tap, read back: 1 off (or no IPv6 here), 0 not (warned). */
int tap_no_ipv6(const char *name);
/* The tap's IPv4 sysctls (ARP, redirects, source routes, rp_filter). */
int tap_ipv4(struct rtnl *rt, const char *name);
int sysctl_write(struct rtnl *rt, const char *path, const char *value);
/* ip_forward on when a slot is open; each tap's own forwarding flag by
 * its mode. */
int slots_forwarding(struct rtnl *rt);
/* The per-tap routing rules (remove: ours whose tap is gone deleted), read
 * back: the number deleted, -1; *v4, *v6 the taps with all of the family's;
 * *has_v6 cleared on a kernel without IPv6; tapok[k] (when not NULL) slot
 * k's rules all there. */
int route_rules(struct rtnl *rt, int remove, unsigned *v4, unsigned *v6, int *has_v6,
		unsigned char *tapok);
/* The host's `local` routing rules moved (remove: put back): 1 as wanted
 * read back, 0 not, -1 unable. */
int local_rule(struct rtnl *rt, int remove);
/* Each slot's tc ingress filter (lib/tcfilter.c) installed and read back:
 * *good counts the taps whose ingress holds ours alone, in direct-action
 * mode, not skip_sw, with our program's name and tag (others warned,
 * their tapok cleared); tag the program's; *da: every tap's read back
 * with its direct-action flag.  0 or -1. */
int tap_filters(struct rtnl *rt, unsigned *good, unsigned char *tapok, uint8_t tag[8], int *da);

#endif
