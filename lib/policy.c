/* policy.c - isopod-broker's allowlist and deny checks (see policy.h). */
#include "policy.h"
#include "allow.h"
#include "nldump.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int policy_name_allowed(const struct policy *p, const char *name)
{
	if (p->allow_all)
		return 1;
	for (size_t i = 0; i < p->nallow; i++)
		if (allow_match(p->allow[i], name))
			return 1;
	return 0;
}

int policy_port_allowed(const struct policy *p, const char *name, unsigned port, char *rules,
			size_t sz)
{
	size_t o = 0;

	rules[0] = '\0';
	if (p->allow_all)
		return 1;
	for (size_t i = 0; i < p->nallow; i++) {
		int k;

		if (!allow_match(p->allow[i], name))
			continue;
		if (allow_port(p->allow[i], port))
			return 1;
		k = snprintf(rules + o, sz - o, "%s%s", o ? ", " : "", p->allow[i]);
		if (k < 0 || (size_t)k >= sz - o)
			break;
		o += (size_t)k;
	}
	return 0;
}

void policy_allow_text(const struct policy *p, char *out, size_t sz)
{
	size_t o = 0;

	out[0] = '\0';
	if (p->allow_all) {
		snprintf(out, sz, "every name");
		return;
	}
	if (!p->nallow) {
		snprintf(out, sz, "empty");
		return;
	}
	for (size_t i = 0; i < p->nallow; i++) {
		int k = snprintf(out + o, sz - o, "%s%s", i ? ", " : "", p->allow[i]);

		if (k < 0 || (size_t)k >= sz - o) {
			/* a long list is cut; the ledger and the man page have it all */
			if (sz > 5)
				snprintf(out + sz - 5, 5, " ...");
			return;
		}
		o += (size_t)k;
	}
}

/* lib/ranges.c's list (every special-purpose block that is not globally
 * reachable, and multicast), less the host's overrides. */
const char *policy_range_denied(const struct policy *p, uint32_t a)
{
	return ranges_denied(4, (const uint8_t *)&a, p->allow_range, p->nallow_range);
}

/* One address of the dump: IFA_LOCAL is the host's end (on a
 * point-to-point link IFA_ADDRESS is the peer's); without it, IFA_ADDRESS
 * (getifaddrs' reading). */
struct own_walk {
	uint32_t a;
	int own;
};

static void own_cb(const struct nlmsghdr *h, void *data)
{
	struct own_walk *w = data;
	const struct ifaddrmsg *ifa = NLMSG_DATA(h);
	const struct rtattr *rta;
	uint32_t local = 0, addr = 0;
	int has_local = 0, has_addr = 0, len;

	if (h->nlmsg_type != RTM_NEWADDR || h->nlmsg_len < NLMSG_LENGTH(sizeof *ifa) ||
	    ifa->ifa_family != AF_INET)
		return;
	len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *ifa));
	for (rta = IFA_RTA(ifa); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
		if (RTA_PAYLOAD(rta) < sizeof(uint32_t))
			continue;
		if (rta->rta_type == IFA_LOCAL) {
			memcpy(&local, RTA_DATA(rta), sizeof local);
			has_local = 1;
		} else if (rta->rta_type == IFA_ADDRESS) {
			memcpy(&addr, RTA_DATA(rta), sizeof addr);
			has_addr = 1;
		}
	}
	if (has_local ? local == w->a : has_addr && addr == w->a)
		w->own = 1;
}

/* An interface added since the broker started counts too, and so does
 * every address however many the host has (a fixed-size copy of the list
 * would let the ones past its end through).  An RTM_GETADDR dump of our
 * own, not getifaddrs: glibc's bind()s its netlink socket, and the
 * broker's filter (bk_lock_down) refuses bind; nl_dump's socket is bound
 * by the kernel at connect(). */
int policy_own_addr(uint32_t a)
{
	struct {
		struct nlmsghdr n;
		struct ifaddrmsg i;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETADDR,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.i = { .ifa_family = AF_INET },
	};
	struct own_walk w = { .a = a, .own = 0 };
	int nlerr;

	if (nl_dump(NETLINK_ROUTE, &req, sizeof req, own_cb, &w, &nlerr) < 0 || nlerr)
		return -1;
	return w.own;
}

/* Asked of the kernel's routing (RTM_GETROUTE, which needs no privilege),
 * as connect() would route it now: a local, broadcast, anycast or
 * multicast route is the host (or beyond any one flow), whatever
 * policy_own_addr's list of interface addresses says (a whole local route
 * such as 127/8 or one `ip route add local` made, a subnet's broadcast
 * address).  A destination with no route or an
 * unreachable/blackhole/prohibit one is 0: it just fails to connect.  The
 * answer is queued by the time send returns, so the recv never waits. */
int policy_local_route(uint32_t a)
{
	struct {
		struct nlmsghdr n;
		struct rtmsg r;
		struct rtattr at;
		uint32_t dst;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETROUTE,
		       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1 },
		.r = { .rtm_family = AF_INET, .rtm_dst_len = 32 },
		.at = { .rta_len = RTA_LENGTH(sizeof a), .rta_type = RTA_DST },
		.dst = a,
	};
	union {
		struct nlmsghdr n;
		char b[4096];
	} ans;
	struct sockaddr_nl k = { .nl_family = AF_NETLINK };
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE), ret = -1;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (sendto(fd, &req, sizeof req, 0, (struct sockaddr *)&k, sizeof k) != (ssize_t)sizeof req)
		goto out;
	n = recv(fd, &ans, sizeof ans, MSG_DONTWAIT);
	if (n < (ssize_t)NLMSG_HDRLEN || !NLMSG_OK(&ans.n, (size_t)n) || ans.n.nlmsg_seq != 1)
		goto out;
	if (ans.n.nlmsg_type == NLMSG_ERROR &&
	    ans.n.nlmsg_len >= NLMSG_LENGTH(sizeof(struct nlmsgerr))) {
		int e = -((struct nlmsgerr *)NLMSG_DATA(&ans.n))->error;

		if (e == ENETUNREACH || e == EHOSTUNREACH || e == EINVAL || e == EACCES)
			ret = 0;
	} else if (ans.n.nlmsg_type == RTM_NEWROUTE &&
		   ans.n.nlmsg_len >= NLMSG_LENGTH(sizeof(struct rtmsg))) {
		unsigned char t = ((struct rtmsg *)NLMSG_DATA(&ans.n))->rtm_type;

		ret = t == RTN_LOCAL || t == RTN_BROADCAST || t == RTN_ANYCAST || t == RTN_MULTICAST;
	}
out:
	close(fd);
	return ret;
}

void policy_host_open(struct policy_host *h)
{
	struct sockaddr_nl k = { .nl_family = AF_NETLINK,
				 .nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE |
					      RTMGRP_IPV4_RULE };
	int nh = RTNLGRP_NEXTHOP;

	h->n = h->next = 0;
	h->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (h->fd < 0)
		return;
	if (bind(h->fd, (struct sockaddr *)&k, sizeof k) < 0 ||
	    setsockopt(h->fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &nh, sizeof nh) < 0) {
		close(h->fd);
		h->fd = -1;
	}
}

void policy_host_close(struct policy_host *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	h->n = 0;
}

/* Forget every answer if anything changed since they were given. */
static void host_check(struct policy_host *h)
{
	char buf[8192];

	for (;;) {
		ssize_t n = recv(h->fd, buf, sizeof buf, MSG_DONTWAIT);

		if (n > 0 || (n < 0 && (errno == ENOBUFS || errno == EINTR))) {
			h->n = h->next = 0;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		/* the socket broke: no cache from now on */
		policy_host_close(h);
		return;
	}
}

int policy_host(struct policy_host *h, uint32_t a)
{
	int v;
	size_t i;

	if (h->fd >= 0)
		host_check(h);
	if (h->fd >= 0)
		for (i = 0; i < h->n; i++)
			if (h->addr[i] == a)
				return h->host[i];
	if ((v = policy_own_addr(a)) == 0)
		v = policy_local_route(a);
	if (v < 0 || h->fd < 0)
		return v;
	i = h->n < POLICY_HOST_CACHE ? h->n++ : h->next++ % POLICY_HOST_CACHE;
	h->addr[i] = a;
	h->host[i] = (unsigned char)v;
	return v;
}

void policy_free(struct policy *p)
{
	for (size_t i = 0; i < p->nallow; i++)
		free(p->allow[i]);
	p->nallow = 0;
}
