/* advhost.c - the adverse suite's host checks that need more than ip(8):
 * each tap's tc filter is ours, its fail-closed routing works, and the
 * tables, rules and filters are the ones isopod-netsetup recorded (see
 * adverse.h, lib/netstate.h). */
#include "adverse.h"
#include "net.h"
#include "netstate.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

/* The tap's IPv4 address (its slot's gateway), network order; 0 none. */
static uint32_t tap_addr(const char *tap)
{
	struct ifaddrs *ifa, *i;
	uint32_t a = 0;

	if (getifaddrs(&ifa) < 0)
		return 0;
	for (i = ifa; i && !a; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !strcmp(i->ifa_name, tap))
			a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
	freeifaddrs(ifa);
	return a;
}

static const char *err_name(int e)
{
	switch (e) {
	case EINVAL: return "blackhole";
	case EHOSTUNREACH: return "not-forwarded";
	case ENETUNREACH: return "unreachable";
	case EACCES: return "prohibit";
	default: return NULL;
	}
}

json_t *adv_tc_check(int k, const char *mode)
{
	char tap[32], msg[512] = "";
	struct tcfilter_state st;
	struct tapcfg want;
	uint32_t gw;
	int idx, ok = 0;

	snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
	idx = (int)if_nametoindex(tap);
	gw = tap_addr(tap);
	if (!idx || !gw) {
		snprintf(msg, sizeof msg, "%s: %s", tap, idx ? "no IPv4 address" : "no such interface");
	} else if (tcfilter_read(idx, &st, msg, sizeof msg) == 0) {
		tcfilter_slot_cfg((unsigned)k, ntohl(gw), !strcmp(mode, "open"), &want);
		/* the doctor is root: the program's .rodata must be read */
		ok = tcfilter_judge(&st, &want, NULL, msg, sizeof msg) == 1 && st.cfg_read;
		if (!ok && !msg[0])
			snprintf(msg, sizeof msg, "our filter's parameters could not be read");
	}
	return json_pack("{s:s, s:s, s:s, s:b, s:s?}", "check", "tc-filter", "tap", tap, "mode", mode,
			 "ok", ok, "why", ok ? NULL : msg);
}

json_t *adv_route_check(const struct adv *a, int k, int listed)
{
	char tap[32], why[256] = "";
	json_t *routes = json_array();
	const char *dsts[2];
	uint32_t gw;
	int idx, i, n = 0, ok = listed;

	snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
	idx = (int)if_nametoindex(tap);
	gw = tap_addr(tap);
	/* a host address that is not this tap's gateway, and an outside one */
	if (a->nhost > 0)
		dsts[n++] = a->hostaddr[0];
	dsts[n++] = a->public_addr;
	if (!idx || !gw) {
		ok = 0;
		snprintf(why, sizeof why, "%s: %s", tap, idx ? "no IPv4 address" : "no such interface");
	}
	for (i = 0; i < n && idx && gw; i++) {
		struct in_addr d;
		int type = 0, err = 0, blocked;
		uint32_t guest = htonl(ntohl(gw) + 1);

		if (inet_pton(AF_INET, dsts[i], &d) != 1)
			continue;
		/* as the tap's filter passes it: its mark, not the table's */
		if (netstate_route(idx, guest, d.s_addr, TCFILTER_TAPMARK, &type, &err, why,
				   sizeof why) < 0) {
			ok = 0;
			break;
		}
		blocked = type == 0 && err_name(err) != NULL;
		ok &= blocked;
		json_array_append_new(routes, json_pack("{s:s, s:b, s:s?, s:i}", "dst", dsts[i], "blocked",
							blocked, "refusal", err_name(err), "rtm_type",
							type));
	}
	if (!ok && !why[0])
		snprintf(why, sizeof why, listed ? "a packet from the guest is routed (to a host address "
			 "or on) when the table did not mark it" :
			 "the blackhole rule (priority 10) for this tap is not listed");
	return json_pack("{s:s, s:s, s:b, s:b, s:o, s:s?}", "check", "fail-closed-rule", "tap", tap, "ok",
			 ok, "listed", listed, "routes", routes, "why", ok ? NULL : why);
}

json_t *adv_netstate_check(const char *when)
{
	char why[1024] = "", diff[1024] = "";
	json_t *want = netstate_load(why, sizeof why), *have = NULL, *c;
	int ok = 0;

	if (want && (have = netstate_now(why, sizeof why)))
		ok = !netstate_diff(want, have, diff, sizeof diff);
	c = json_pack("{s:s, s:s, s:b, s:s?}", "check", "netstate", "when", when, "ok", ok, "why",
		      ok ? NULL : diff[0] ? diff : why);
	json_decref(want);
	json_decref(have);
	return c;
}
