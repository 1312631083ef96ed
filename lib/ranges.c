/* ranges.c - the address ranges no guest reaches (see ranges.h). */

#include "ranges.h"
#include "config.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* IANA IPv4 and IPv6 Special-Purpose Address Registries, the blocks with
 * Globally Reachable = False (registry text of 2025; names as there), and
 * multicast, which is not in them.  Blocks inside a listed block (192.0.0.8/32
 * in 192.0.0.0/24, 2001:2::/48 in 2001::/23, ...) are covered by it and not
 * repeated.  Deliberately denied although the registry marks them globally
 * reachable, because they sit inside a False block and no guest needs them:
 * 192.0.0.9/32 (PCP anycast), 192.0.0.10/32 (TURN anycast), and within
 * 2001::/23: 2001:1::1-3/128, 2001:3::/32 (AMT), 2001:4:112::/48 (AS112-v6),
 * 2001:20::/28 (ORCHIDv2), 2001:30::/28 (Drone Remote ID).  Not in the
 * registry but denied: ::/96, the IPv4-compatible addresses RFC 4291
 * deprecated (a host that still tunnels them reaches the IPv4 address; it
 * holds ::/128 and ::1/128, listed before it for their names).
 * t/unit/ranges_test.c cross-checks the list against python3's ipaddress. */
static const struct range_def LIST[] = {
	{ "0.0.0.0/8", "\"This network\"" },
	{ "10.0.0.0/8", "Private-Use" },
	{ "100.64.0.0/10", "Shared Address Space" },
	{ "127.0.0.0/8", "Loopback" },
	{ "169.254.0.0/16", "Link Local" },
	{ "172.16.0.0/12", "Private-Use" },
	{ "192.0.0.0/24", "IETF Protocol Assignments" },
	{ "192.0.2.0/24", "Documentation (TEST-NET-1)" },
	{ "192.168.0.0/16", "Private-Use" },
	{ "198.18.0.0/15", "Benchmarking" },
	{ "198.51.100.0/24", "Documentation (TEST-NET-2)" },
	{ "203.0.113.0/24", "Documentation (TEST-NET-3)" },
	{ "224.0.0.0/4", "Multicast" },
	{ "240.0.0.0/4", "Reserved" },
	{ "255.255.255.255/32", "Limited Broadcast" },
	{ "::/128", "Unspecified Address" },
	{ "::1/128", "Loopback Address" },
	{ "::/96", "IPv4-compatible Address (deprecated)" },
	{ "::ffff:0:0/96", "IPv4-mapped Address" },
	{ "64:ff9b:1::/48", "IPv4-IPv6 Translat." },
	{ "100::/64", "Discard-Only Address Block" },
	{ "2001::/23", "IETF Protocol Assignments" },
	{ "2001:db8::/32", "Documentation" },
	{ "3fff::/20", "Documentation" },
	{ "5f00::/16", "Segment Routing (SRv6) SIDs" },
	{ "fc00::/7", "Unique-Local" },
	{ "fe80::/10", "Link-Local Unicast" },
	{ "ff00::/8", "Multicast" },
};

const struct range_def *ranges_list(size_t *n)
{
	*n = sizeof LIST / sizeof LIST[0];
	return LIST;
}

static int bit(const uint8_t *a, int i)
{
	return a[i / 8] >> (7 - i % 8) & 1;
}

int range_parse(const char *s, struct range *r, const char **why)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/'), *p;
	size_t hn;
	int len = 0, max;

	memset(r, 0, sizeof *r);
	if (!slash) {
		*why = "want ADDRESS/PREFIX-LENGTH";
		return -1;
	}
	hn = (size_t)(slash - s);
	if (!hn || hn >= sizeof host) {
		*why = "not an IPv4 or IPv6 address";
		return -1;
	}
	memcpy(host, s, hn);
	host[hn] = '\0';
	if (inet_pton(AF_INET, host, r->a) == 1)
		r->af = 4, max = 32;
	else if (inet_pton(AF_INET6, host, r->a) == 1)
		r->af = 6, max = 128;
	else {
		*why = "not an IPv4 or IPv6 address";
		return -1;
	}
	p = slash + 1;
	if (!*p || (p[0] == '0' && p[1]) || strspn(p, "0123456789") != strlen(p) ||
	    strlen(p) > 3 || (len = atoi(p)) > max) {
		*why = r->af == 4 ? "bad prefix length: want 0..32" : "bad prefix length: want 0..128";
		return -1;
	}
	r->len = (uint8_t)len;
	for (int i = len; i < max; i++)
		if (bit(r->a, i)) {
			*why = "host bits set after the prefix length";
			return -1;
		}
	return 0;
}

char *range_text(const struct range *r, char *out, size_t sz)
{
	char a[INET6_ADDRSTRLEN];

	if (!inet_ntop(r->af == 4 ? AF_INET : AF_INET6, r->a, a, sizeof a))
		snprintf(a, sizeof a, "?");
	snprintf(out, sz, "%s/%u", a, r->len);
	return out;
}

int range_has(const struct range *r, int af, const uint8_t *addr)
{
	if (af != r->af)
		return 0;
	for (int i = 0; i < r->len; i++)
		if (bit(r->a, i) != bit(addr, i))
			return 0;
	return 1;
}

int range_within(const struct range *outer, const struct range *inner)
{
	return outer->af == inner->af && inner->len >= outer->len &&
	       range_has(outer, inner->af, inner->a);
}

/* The list's block i, parsed (the list is ours: it always parses). */
static struct range listed(size_t i)
{
	struct range r;
	const char *why;

	if (range_parse(LIST[i].cidr, &r, &why) < 0)
		abort();
	return r;
}

/* Blocks that are the host itself whatever the host says: "this network"
 * (0.0.0.0 connects to the host), loopback, the unspecified address and the
 * IPv4-mapped block (judged as IPv4, but an override of it would open
 * ::ffff:127.0.0.1 through a dual-stack socket).  No override may touch
 * them (ranges_override_check), and ranges_denied denies them before it
 * looks at the overrides at all. */
static const char *const HOST[] = {
	"0.0.0.0/8", "127.0.0.0/8", "::/128", "::1/128", "::ffff:0:0/96",
};

static struct range host_block(size_t i)
{
	struct range r;
	const char *why;

	if (range_parse(HOST[i], &r, &why) < 0)
		abort();
	return r;
}

int ranges_override_check(const struct range *r, const char **why)
{
	for (size_t i = 0; i < sizeof HOST / sizeof HOST[0]; i++) {
		struct range h = host_block(i);

		if (range_within(&h, r) || range_within(r, &h)) {
			*why = "the host itself (this network, loopback, unspecified or IPv4-mapped): "
			       "never opened";
			return -1;
		}
	}
	for (size_t i = 0; i < sizeof LIST / sizeof LIST[0]; i++) {
		struct range l = listed(i);

		if (range_within(&l, r))
			return (int)i;
	}
	*why = "not a denied range nor inside one (an override can only take a block, or part "
	       "of one, out of the deny list)";
	return -1;
}

static const char *denied1(int af, const uint8_t *addr, const struct range *allow, size_t nallow)
{
	for (size_t i = 0; i < sizeof HOST / sizeof HOST[0]; i++) {
		struct range h = host_block(i);

		if (range_has(&h, af, addr))
			for (size_t j = 0; j < sizeof LIST / sizeof LIST[0]; j++) {
				struct range l = listed(j);

				if (range_has(&l, af, addr))
					return LIST[j].name;
			}
	}
	for (size_t i = 0; i < nallow; i++)
		if (range_has(&allow[i], af, addr))
			return NULL;
	for (size_t i = 0; i < sizeof LIST / sizeof LIST[0]; i++) {
		struct range l = listed(i);

		if (range_has(&l, af, addr))
			return LIST[i].name;
	}
	return NULL;
}

const char *ranges_denied(int af, const uint8_t *addr, const struct range *allow, size_t nallow)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	static const uint8_t nat64[12] = { 0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t sixto4[2] = { 0x20, 0x02 };
	const char *why;

	/* An IPv4 address in IPv6 clothing reaches that IPv4 address: through
	 * the host's own socket (IPv4-mapped, which never appears on a wire,
	 * so it is judged as the IPv4 address alone), through a NAT64
	 * gateway (64:ff9b::/96: judged as both) or through a 6to4 relay
	 * (2002:AABB:CCDD::/48 is the site behind A.B.C.D, RFC 3056: judged
	 * as both, so 2002:0a00::/24 is 10/8's).  The IPv4-compatible block
	 * (::/96) is denied whole by the list. */
	if (af == 6 && !memcmp(addr, mapped, 12))
		return denied1(4, addr + 12, allow, nallow);
	why = denied1(af, addr, allow, nallow);
	if (!why && af == 6 && !memcmp(addr, nat64, 12))
		why = denied1(4, addr + 12, allow, nallow);
	if (!why && af == 6 && !memcmp(addr, sixto4, 2))
		why = denied1(4, addr + 2, allow, nallow);
	return why;
}

const char *ranges_config_path(void)
{
	const char *e = getenv("ISOPOD_SYSCONFIG");

	return e && *e ? e : "/etc/isopod/config";
}

char *ranges_warning(const char *range, const char *path, char *out, size_t sz)
{
	snprintf(out, sz, "allow_range %s (%s): this host lets guests reach a range the deny list "
		 "blocks by default", range, path);
	return out;
}

struct overrides {
	struct range *out;
	size_t max, *n;
	char *msg;
	size_t msz;
};

static int override(const char *v, const char *where, void *arg)
{
	struct overrides *o = arg;
	const char *why;
	struct range r;

	if (range_parse(v, &r, &why) < 0 || ranges_override_check(&r, &why) < 0) {
		snprintf(o->msg, o->msz, "%s: allow_range %.80s: %s", where, v, why);
		return -1;
	}
	if (*o->n >= o->max) {
		snprintf(o->msg, o->msz, "%s: more than %zu allow_range lines", where, o->max);
		return -1;
	}
	o->out[(*o->n)++] = r;
	return 0;
}

int ranges_load_config(const char *path, struct range *out, size_t max, size_t *n, char *msg,
		       size_t msz)
{
	struct overrides o = { .out = out, .max = max, .n = n, .msg = msg, .msz = msz };
	int rc;

	*n = 0;
	rc = config_each(path, "allow_range", override, &o, msg, msz);
	return rc < 0 ? rc : 0;
}
