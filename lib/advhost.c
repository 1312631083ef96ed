/* advhost.c - the adverse suite's host checks that need more than ip(8):
 * each tap's tc filter is ours, its fail-closed routing works, and the
 * tables, rules and filters are the ones isopod-netsetup recorded (see
 * adverse.h, lib/netstate.h). */
#include "adverse.h"
#include "dns.h"
#include "net.h"
#include "netstate.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

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

/* Is a VM's QEMU on tap (carrier on: a tun device has carrier exactly
 * while a queue is attached)?  -1 unreadable. */
static int tap_carrier(const char *tap)
{
	char p[PATH_MAX], b[8] = "";
	ssize_t n;
	int fd;

	if (pathn(p, sizeof p, "/sys/class/net/%s/carrier", tap) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return -1;
	return b[0] == '1';
}

/* One query to gw (network order) on the broker's DNS port: the reply's
 * rcode (0..15), or -1 with why. */
static int broker_ask(uint32_t gw, char *why, size_t wsz)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(TCFILTER_PORT_BROKER_DNS),
				  .sin_addr = { .s_addr = gw } };
	uint8_t q[512], r[512];
	uint16_t id;
	size_t ql;
	int fd, t, rc = -1;

	if (rand_bytes(&id, sizeof id) < 0)
		return snprintf(why, wsz, "getrandom: %s", strerror(errno)), -1;
	/* class CH: refused by the broker itself ("not class IN"), so
	 * nothing of the check leaves the host, whatever the allowlist */
	if (!(ql = dns_build_query(q, sizeof q, id, "broker-check.isopod-doctor.invalid", DNS_T_A)))
		return snprintf(why, wsz, "unable to build the query"), -1;
	q[ql - 1] = 3; /* the question's class, its last two bytes: IN (1) -> CH (3) */
	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		snprintf(why, wsz, "unable to reach the broker's port: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(why, wsz, "no reply from the broker (port %d) within 2 s, twice", TCFILTER_PORT_BROKER_DNS);
	for (t = 0; t < 2 && rc < 0; t++) {
		int64_t until = mono_ms() + 2000, left;

		if (send(fd, q, ql, 0) < 0) {
			/* ECONNREFUSED: nothing listens there */
			snprintf(why, wsz, "the broker's port %d: %s", TCFILTER_PORT_BROKER_DNS, strerror(errno));
			break;
		}
		while (rc < 0 && (left = until - mono_ms()) > 0) {
			struct pollfd pf = { .fd = fd, .events = POLLIN };
			ssize_t n;

			if (poll(&pf, 1, (int)left) <= 0)
				continue;
			if ((n = recv(fd, r, sizeof r, 0)) < 0) {
				snprintf(why, wsz, "the broker's port %d: %s", TCFILTER_PORT_BROKER_DNS,
					 strerror(errno));
				t = 2;
				break;
			}
			/* our id, a response */
			if (n >= 12 && r[0] == q[0] && r[1] == q[1] && (r[2] & 0x80))
				rc = r[3] & 0x0f;
		}
	}
	close(fd);
	return rc;
}

/* One request to gw (network order) on the broker's HTTP proxy port: the
 * reply's status code, or -1 with why.  The request line says HTTP/0.9,
 * which the broker refuses itself (400, "malformed request") before any
 * name is looked at: nothing leaves the host, whatever the allowlist, and
 * the refusal header says the answer is the broker's, not any listener's. */
static int broker_http(uint32_t gw, char *why, size_t wsz)
{
	static const char req[] = "GET /isopod-doctor-broker-check HTTP/0.9\r\n\r\n";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(TCFILTER_PORT_BROKER_HTTP),
				  .sin_addr = { .s_addr = gw } };
	struct timeval tv = { .tv_sec = 2 };
	char r[1024];
	size_t have = 0;
	ssize_t n;
	int fd, code = -1;

	/* bounded: connect, send and every read give up after 2 s */
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || write_all(fd, req, sizeof req - 1) < 0) {
		snprintf(why, wsz, "the broker's proxy port %d: %s", TCFILTER_PORT_BROKER_HTTP,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (have < sizeof r - 1 && (n = read(fd, r + have, sizeof r - 1 - have)) > 0) {
		have += (size_t)n;
		r[have] = 0;
		if (strstr(r, "\r\n\r\n"))
			break;
	}
	close(fd);
	r[have] = 0;
	if (sscanf(r, "HTTP/1.%*1[01] %3d ", &code) != 1 || !strcasestr(r, "\r\nX-Isopod-Refusal:")) {
		snprintf(why, wsz, "the broker's proxy port %d gave no refusal of its own within 2 s (%zu "
			 "bytes)", TCFILTER_PORT_BROKER_HTTP, have);
		return -1;
	}
	return code;
}

json_t *adv_broker_check(int k, const char *mode)
{
	char tap[32], why[256] = "";
	uint32_t gw;
	int busy, ok, rc = -1, http = -1, proxy = !strcmp(mode, "filtered");

	snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
	gw = tap_addr(tap);
	busy = tap_carrier(tap);
	if (busy < 0)
		snprintf(why, sizeof why, "%s: its carrier is unreadable", tap);
	else if (busy && !gw)
		snprintf(why, sizeof why, "%s: no IPv4 address", tap);
	else if (busy && (rc = broker_ask(gw, why, sizeof why)) >= 0 && proxy)
		/* a filtered slot's broker is its HTTP proxy too: a DNS answer
		 * alone does not say the guest's one way out is served */
		http = broker_http(gw, why, sizeof why);
	ok = busy == 0 || (rc >= 0 && (!proxy || http >= 0));
	return json_pack("{s:s, s:s, s:s, s:b, s:b, s:b, s:o, s:o?, s:s?}", "check", "broker", "tap",
			 tap, "mode", mode, "ok", ok, "vm_on_slot", busy > 0, "answered", rc >= 0,
			 "rcode", rc >= 0 ? json_integer(rc) : json_null(), "http_status",
			 !proxy || busy <= 0 ? NULL : http >= 0 ? json_integer(http) : json_null(),
			 "why", ok ? NULL : why);
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
