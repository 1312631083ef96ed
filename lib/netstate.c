/* netstate.c - isopod-netsetup's state recorded and compared; see
 * netstate.h. */
#include "netstate.h"
#include "net.h"
#include "ruleset.h"
#include "tcfilter.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <linux/fib_rules.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int netstate_path(char *p, size_t sz, char *why, size_t whysz)
{
	const char *e = getenv("ISOPOD_NETSTATE");
	struct stat st;

	if (e && *e)
		return pathn(p, sz, "%s", e) < 0 ? (snprintf(why, whysz, "$ISOPOD_NETSTATE too long"), -1) : 0;
	if (stat("/proc/self/ns/net", &st) < 0)
		return snprintf(why, whysz, "unable to stat /proc/self/ns/net: %s", strerror(errno)), -1;
	return pathn(p, sz, NETSTATE_DIR "/netstate-%llu.json", (unsigned long long)st.st_ino);
}

/* Append one rtattr to a request. */
static void rta_add(struct nlmsghdr *n, unsigned short type, const void *d, size_t len)
{
	struct rtattr *a = (void *)((char *)n + NLMSG_ALIGN(n->nlmsg_len));

	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	memcpy(RTA_DATA(a), d, len);
	n->nlmsg_len = NLMSG_ALIGN(n->nlmsg_len) + RTA_ALIGN(a->rta_len);
}

static uint32_t a_u32(const struct rtattr *a)
{
	uint32_t v = 0;

	if (RTA_PAYLOAD(a) >= 4)
		memcpy(&v, RTA_DATA(a), 4);
	return v;
}

/* One routing rule, canonically: the attributes that decide what it
 * matches and what it does, in a fixed order. */
static json_t *rule_line(const struct nlmsghdr *h)
{
	const struct fib_rule_hdr *f = NLMSG_DATA(h);
	const struct rtattr *a = (const void *)((const char *)f + NLMSG_ALIGN(sizeof *f));
	int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof *f);
	char iif[IFNAMSIZ + 1] = "", oif[IFNAMSIZ + 1] = "", src[INET6_ADDRSTRLEN] = "",
	     dst[INET6_ADDRSTRLEN] = "", l[512];
	uint32_t pref = 0, mark = 0, mask = 0, table = f->table, proto = 0;
	int has_mark = 0, has_mask = 0;

	for (; RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		switch (a->rta_type) {
		case FRA_PRIORITY: pref = a_u32(a); break;
		case FRA_IFNAME:
			snprintf(iif, sizeof iif, "%.*s", (int)RTA_PAYLOAD(a), (const char *)RTA_DATA(a));
			break;
		case FRA_OIFNAME:
			snprintf(oif, sizeof oif, "%.*s", (int)RTA_PAYLOAD(a), (const char *)RTA_DATA(a));
			break;
		case FRA_FWMARK: mark = a_u32(a), has_mark = 1; break;
		case FRA_FWMASK: mask = a_u32(a), has_mask = 1; break;
		case FRA_TABLE: table = a_u32(a); break;
		case FRA_SRC: inet_ntop(f->family, RTA_DATA(a), src, sizeof src); break;
		case FRA_DST: inet_ntop(f->family, RTA_DATA(a), dst, sizeof dst); break;
		case FRA_IP_PROTO: proto = *(const uint8_t *)RTA_DATA(a); break;
		default: break;
		}
	}
	/* Rules after isopod's last (priority 11) that name no tap of ours
	 * decide nothing for a guest (priority 10 blackholes first): other
	 * tools' churn there is not a difference. */
	if (pref > 11 && strncmp(iif, NET_TAP_PREFIX, strlen(NET_TAP_PREFIX)) &&
	    strncmp(oif, NET_TAP_PREFIX, strlen(NET_TAP_PREFIX)))
		return NULL;
	snprintf(l, sizeof l, "%s %u%s%s/%u%s%s/%u iif %s oif %s fwmark 0x%x/0x%x ipproto %u tos %u "
		 "action %u table %u flags 0x%x", f->family == AF_INET6 ? "inet6" : "inet", pref,
		 " from ", src[0] ? src : "all", f->src_len, " to ", dst[0] ? dst : "all", f->dst_len,
		 iif[0] ? iif : "-", oif[0] ? oif : "-", has_mark ? mark : 0,
		 has_mask ? mask : has_mark ? 0xffffffffu : 0, proto, f->tos, f->action,
		 f->action == FR_ACT_TO_TBL ? table : 0, f->flags & FIB_RULE_INVERT);
	return json_string(l);
}

/* The routing rules of the netns, IPv4 and IPv6, in the kernel's order. */
static json_t *routing_rules(char *why, size_t whysz)
{
	static const int fams[] = { AF_INET, AF_INET6 };
	json_t *out = json_array();
	long buf[8192 / sizeof(long)];
	size_t fi;
	int fd;

	if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) < 0) {
		snprintf(why, whysz, "unable to open a route netlink socket: %s", strerror(errno));
		json_decref(out);
		return NULL;
	}
	for (fi = 0; fi < sizeof fams / sizeof *fams; fi++) {
		struct {
			struct nlmsghdr n;
			struct fib_rule_hdr f;
		} req = {
			.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETRULE,
			       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = (uint32_t)fi + 1 },
			.f = { .family = (uint8_t)fams[fi] },
		};
		int done = 0;
		ssize_t n = 0;

		if (send(fd, &req, sizeof req, 0) < 0)
			goto fail;
		while (!done && (n = recv(fd, buf, sizeof buf, 0)) > 0) {
			const struct nlmsghdr *h = (const void *)buf;
			size_t left = (size_t)n;

			for (; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
				if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
					done = 1;
					break;
				}
				if (h->nlmsg_type == RTM_NEWRULE &&
				    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct fib_rule_hdr))) {
					json_t *l = rule_line(h);

					if (l)
						json_array_append_new(out, l);
				}
			}
		}
		if (n < 0)
			goto fail;
	}
	close(fd);
	return out;
fail:
	snprintf(why, whysz, "unable to dump the routing rules: %s", strerror(errno));
	close(fd);
	json_decref(out);
	return NULL;
}

static void hex(const void *p, size_t n, char *out)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
}

/* Each tap's ingress filter: ours, its tag, its .rodata. */
static json_t *taps_json(char *why, size_t whysz)
{
	json_t *out = json_array();
	int k, nt = net_ntaps();

	for (k = 0; k < nt; k++) {
		char tap[32], tag[17], cfg[2 * sizeof(struct tapcfg) + 1] = "", msg[256];
		struct tcfilter_state st;
		int idx;

		snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
		idx = (int)if_nametoindex(tap);
		if (!idx || tcfilter_read(idx, &st, msg, sizeof msg) < 0) {
			snprintf(why, whysz, "%s: %s", tap, idx ? msg : "no such interface");
			json_decref(out);
			return NULL;
		}
		hex(st.tag, sizeof st.tag, tag);
		if (st.cfg_read)
			hex(&st.cfg, sizeof st.cfg, cfg);
		json_array_append_new(out, json_pack("{s:s, s:b, s:i, s:s, s:s}", "tap", tap, "ours",
						     st.ours && st.filters == 1, "filters",
						     (int)st.filters, "tag", tag, "cfg", cfg));
	}
	return out;
}

json_t *netstate_now(char *why, size_t whysz)
{
	struct canon c = { 0 };
	json_t *rs = json_array(), *rr = NULL, *tp = NULL, *o;
	char *text, *l, *nl;
	size_t len;

	if (ruleset_read(&c, why, whysz) < 0 || !(text = canon_text(&c, &len))) {
		if (!why[0])
			snprintf(why, whysz, "out of memory");
		canon_free(&c);
		json_decref(rs);
		return NULL;
	}
	canon_free(&c);
	for (l = text; *l; l = nl + 1) {
		if (!(nl = strchr(l, '\n')))
			break;
		*nl = 0;
		json_array_append_new(rs, json_string(l));
	}
	free(text);
	if (!(rr = routing_rules(why, whysz)) || !(tp = taps_json(why, whysz))) {
		json_decref(rs), json_decref(rr);
		return NULL;
	}
	o = json_pack("{s:o, s:o, s:o}", "ruleset", rs, "routing", rr, "taps", tp);
	if (!o)
		snprintf(why, whysz, "out of memory");
	return o;
}

int netstate_write(char *why, size_t whysz)
{
	char p[PATH_MAX], failed[PATH_MAX], *s, *slash;
	json_t *o;
	int r;

	if (netstate_path(p, sizeof p, why, whysz) < 0)
		return -1;
	if (!(o = netstate_now(why, whysz)))
		return -1;
	s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
	json_decref(o);
	if ((slash = strrchr(p, '/'))) {
		*slash = 0;
		if (mkdir_p(p, 0700, failed, sizeof failed) < 0) {
			snprintf(why, whysz, "unable to create %s: %s", failed, strerror(errno));
			free(s);
			return -1;
		}
		*slash = '/';
	}
	/* root-only: it tells which rules are the policy */
	r = s ? atomic_write(p, s, strlen(s), 0600) : (errno = ENOMEM, -1);
	if (r < 0)
		snprintf(why, whysz, "unable to write %s: %s", p, strerror(errno));
	free(s);
	return r;
}

json_t *netstate_load(char *why, size_t whysz)
{
	char p[PATH_MAX];
	json_error_t e;
	json_t *o;

	if (netstate_path(p, sizeof p, why, whysz) < 0)
		return NULL;
	if (!(o = json_load_file(p, JSON_REJECT_DUPLICATES, &e)))
		snprintf(why, whysz, "unable to read %s (isopod-netsetup writes it): %s", p, e.text);
	return o;
}

int netstate_remove(char *why, size_t whysz)
{
	char p[PATH_MAX];

	if (netstate_path(p, sizeof p, why, whysz) < 0)
		return -1;
	if (unlink(p) < 0 && errno != ENOENT)
		return snprintf(why, whysz, "unable to remove %s: %s", p, strerror(errno)), -1;
	return 0;
}

/* The first string of a not in b ("" none). */
static const char *first_missing(const json_t *a, const json_t *b)
{
	size_t i, j;
	json_t *x, *y;

	json_array_foreach(a, i, x) {
		int found = 0;

		json_array_foreach(b, j, y)
			if (json_equal(x, y)) {
				found = 1;
				break;
			}
		if (!found)
			return json_is_string(x) ? json_string_value(x) : "(an entry)";
	}
	return "";
}

int netstate_diff(const json_t *want, const json_t *have, char *diff, size_t dsz)
{
	static const char *const parts[] = { "ruleset", "routing", "taps" };
	size_t i, j;

	*diff = 0;
	for (i = 0; i < sizeof parts / sizeof *parts; i++) {
		json_t *w = json_object_get(want, parts[i]), *h = json_object_get(have, parts[i]);
		const char *gone, *added;
		json_t *x;

		if (json_equal(w, h))
			continue;
		gone = first_missing(w, h);
		added = first_missing(h, w);
		if (!strcmp(parts[i], "taps")) {
			/* name the tap whose filter changed */
			json_array_foreach(w, j, x)
				if (!json_equal(x, json_array_get(h, j))) {
					snprintf(diff, dsz, "taps: %s's tc filter is not the one netsetup attached",
						 json_string_value(json_object_get(x, "tap")) ?: "?");
					return 1;
				}
			snprintf(diff, dsz, "taps: %zu now, %zu recorded", json_array_size(h),
				 json_array_size(w));
		} else if (*gone) {
			snprintf(diff, dsz, "%s: missing: %s", parts[i], gone);
		} else if (*added) {
			snprintf(diff, dsz, "%s: added: %s", parts[i], added);
		} else {
			snprintf(diff, dsz, "%s: the same lines in another order or number", parts[i]);
		}
		return 1;
	}
	return 0;
}

int netstate_route(int ifindex, uint32_t src, uint32_t dst, uint32_t mark, int *type, int *err,
		   char *why, size_t whysz)
{
	struct {
		struct nlmsghdr n;
		struct rtmsg r;
		char a[128];
	} req = {
		.n = { .nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg)), .nlmsg_type = RTM_GETROUTE,
		       .nlmsg_flags = NLM_F_REQUEST, .nlmsg_seq = 1 },
		.r = { .rtm_family = AF_INET, .rtm_dst_len = 32, .rtm_src_len = 32 },
	};
	long buf[4096 / sizeof(long)];
	const struct nlmsghdr *h = (const void *)buf;
	ssize_t n;
	int fd;

	*type = 0, *err = 0;
	rta_add(&req.n, RTA_DST, &dst, 4);
	rta_add(&req.n, RTA_SRC, &src, 4);
	rta_add(&req.n, RTA_IIF, &ifindex, 4);
	rta_add(&req.n, RTA_MARK, &mark, 4);
	if ((fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) < 0 ||
	    send(fd, &req, req.n.nlmsg_len, 0) < 0 || (n = recv(fd, buf, sizeof buf, 0)) < 0) {
		snprintf(why, whysz, "unable to ask for a route: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	if (!NLMSG_OK(h, (size_t)n)) {
		snprintf(why, whysz, "a short route answer");
		return -1;
	}
	if (h->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(h);

		*err = -e->error;
		return 0;
	}
	if (h->nlmsg_type != RTM_NEWROUTE) {
		snprintf(why, whysz, "an unexpected route answer (type %u)", h->nlmsg_type);
		return -1;
	}
	*type = ((const struct rtmsg *)NLMSG_DATA(h))->rtm_type;
	return 0;
}
