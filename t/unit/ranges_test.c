/* ranges_test.c - the deny list and its overrides (lib/ranges.c), with a
 * cross-check of the list against python3's ipaddress. */
#include "../../lib/ranges.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/config.c"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"

static int parses(const char *s, const char *want)
{
	struct range r;
	const char *why;
	char t[RANGES_TEXT_MAX];

	return range_parse(s, &r, &why) == 0 && !strcmp(range_text(&r, t, sizeof t), want);
}

static const char *parse_why(const char *s)
{
	struct range r;
	const char *why = NULL;

	return range_parse(s, &r, &why) < 0 ? why : NULL;
}

static struct range R(const char *s)
{
	struct range r;
	const char *why;

	if (range_parse(s, &r, &why) < 0) {
		printf("# bad test range %s: %s\n", s, why);
		abort();
	}
	return r;
}

/* The verdict on one address literal. */
static const char *verdict(const char *a, const struct range *allow, size_t n)
{
	uint8_t b[16];

	if (inet_pton(AF_INET, a, b) == 1)
		return ranges_denied(4, b, allow, n);
	if (inet_pton(AF_INET6, a, b) == 1)
		return ranges_denied(6, b, allow, n);
	printf("# bad test address %s\n", a);
	abort();
}

/* Address i of a block: first (0), last (1), middle (2), just before (3),
 * just after (4).  0, or -1 when there is no such address. */
static int sample(const struct range *r, int which, uint8_t out[16])
{
	int max = r->af == 4 ? 32 : 128, nb = max / 8;

	memcpy(out, r->a, 16);
	if (which == 1 || which == 4)
		for (int i = r->len; i < max; i++)
			out[i / 8] |= (uint8_t)(0x80 >> (i % 8));
	if (which == 2) {
		if (r->len >= max)
			return -1;
		out[r->len / 8] |= (uint8_t)(0x80 >> (r->len % 8));
	}
	if (which == 3) { /* minus one, with borrow */
		int i;

		for (i = nb - 1; i >= 0 && out[i] == 0; i--)
			out[i] = 0xff;
		if (i < 0)
			return -1;
		out[i]--;
	}
	if (which == 4) { /* plus one, with carry */
		int i;

		for (i = nb - 1; i >= 0 && out[i] == 0xff; i--)
			out[i] = 0;
		if (i < 0)
			return -1;
		out[i]++;
	}
	return 0;
}

/* Blocks where the list and python3's is_global may differ, on purpose. */
static const char *const DIFFER[][2] = {
	{ "224.0.0.0/4", "multicast: not unicast, denied though not in the registry" },
	{ "ff00::/8", "multicast: not unicast, denied though not in the registry" },
	{ "192.0.0.0/24", "the registry's False block, whole (python <3.12.4 knows parts of it)" },
	{ "2001::/23", "the registry's False block, whole (python >=3.12.4 exempts parts)" },
	{ "64:ff9b:1::/48", "registry False since RFC 8215; older python says global" },
	{ "3fff::/20", "registry False since RFC 9637 (2024); older python says global" },
	{ "5f00::/16", "registry False since RFC 9602 (2024); older python says global" },
	{ "64:ff9b::/96", "NAT64: judged by the IPv4 address it carries too" },
	{ "2002::/16", "6to4: judged by the IPv4 address it carries (python: by version)" },
	{ "::/96", "IPv4-compatible: deprecated, denied whole (python: global)" },
};

static const char *differs(const char *addr)
{
	struct range a = R(strchr(addr, ':') ? "::/0" : "0.0.0.0/0");
	uint8_t b[16];

	inet_pton(a.af == 4 ? AF_INET : AF_INET6, addr, b);
	for (size_t i = 0; i < sizeof DIFFER / sizeof DIFFER[0]; i++) {
		struct range d = R(DIFFER[i][0]);

		if (range_has(&d, a.af, b))
			return DIFFER[i][1];
	}
	return NULL;
}

/* python3: one line "ADDR global|local" per address of the file; an
 * IPv4-mapped address is judged as its IPv4 address (as the broker does). */
static const char PY[] =
	"import ipaddress, sys\n"
	"for l in open(sys.argv[1]):\n"
	"    a = ipaddress.ip_address(l.strip())\n"
	"    g = a.is_global\n"
	"    if a.version == 6 and a.ipv4_mapped:\n"
	"        g = a.ipv4_mapped.is_global\n"
	"    print(l.strip(), 'global' if g else 'local')\n";

static void cross_check(void)
{
	char path[] = "/tmp/ranges_test.XXXXXX", cmd[256], line[256];
	size_t n, nsamples = 0, agree = 0, deliberate = 0, bad = 0;
	const struct range_def *l = ranges_list(&n);
	static const char *const extra[] = {
		"8.8.8.8", "1.1.1.1", "2606:4700::1111", "2a00:1450::1", "::ffff:8.8.8.8",
		"::ffff:169.254.169.254", "::ffff:10.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::808:808",
		"2002:808:808::1", "2002:a00::1", "2002:a9fe:a9fe::", "::808:808", "::a00:1",
		"192.0.0.9", "192.0.0.10", "2001:1::1", "2001:4:112::1", "2001:20::1", "100.100.100.200",
		/* one of each block python knows, whatever the list says (so a
		 * block dropped from the list is caught here) */
		"0.1.2.3", "10.20.30.40", "127.0.0.53", "169.254.169.254", "172.20.0.1", "192.0.0.8",
		"192.0.2.7", "192.168.77.1", "198.18.0.1", "198.19.200.1", "198.51.100.10",
		"203.0.113.9", "240.1.2.3", "255.255.255.255", "::", "::1", "100::1", "2001:2::1",
		"2001:db8:1::1", "2001:10::1", "fc00::1", "fdff::1", "fe80::1", "febf::1",
	};
	int fd = mkstemp(path);
	FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL, *py;

	if (!fp) {
		ok(0, "cross-check: a temporary file");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct range r = R(l[i].cidr);
		int af = r.af == 4 ? AF_INET : AF_INET6;

		for (int w = 0; w < 5; w++) {
			uint8_t b[16];
			char t[INET6_ADDRSTRLEN];

			if (sample(&r, w, b) == 0 && inet_ntop(af, b, t, sizeof t)) {
				fprintf(fp, "%s\n", t);
				nsamples++;
			}
		}
	}
	for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++, nsamples++)
		fprintf(fp, "%s\n", extra[i]);
	fclose(fp);
	snprintf(cmd, sizeof cmd, "python3 -c \"$RANGES_PY\" %s", path);
	setenv("RANGES_PY", PY, 1);
	if (!(py = popen(cmd, "r"))) {
		ok(0, "cross-check: python3 runs");
		unlink(path);
		return;
	}
	while (fgets(line, sizeof line, py)) {
		char addr[128], g[16];
		const char *ours, *why;

		if (sscanf(line, "%127s %15s", addr, g) != 2)
			continue;
		ours = verdict(addr, NULL, 0);
		if ((ours != NULL) == !strcmp(g, "local")) {
			agree++;
		} else if ((why = differs(addr))) {
			deliberate++;
			printf("# %s: python %s, list %s (deliberate: %s)\n", addr, g,
			       ours ? "denies" : "allows", why);
		} else {
			bad++;
			printf("# %s: python says %s, the list %s\n", addr, g,
			       ours ? ours : "allows it");
		}
	}
	ok(pclose(py) == 0, "cross-check: python3 ran to the end");
	unlink(path);
	ok(agree + deliberate == nsamples && !bad,
	   "cross-check with python3 ipaddress: %zu addresses, %zu agree, %zu deliberate, %zu not",
	   nsamples, agree, deliberate, bad);
}

int main(void)
{
	struct range r, allow[4];
	const char *why;
	char msg[512], path[] = "/tmp/ranges_cfg.XXXXXX";
	size_t n;
	int fd;
	FILE *fp;

	ok(parses("198.18.0.0/15", "198.18.0.0/15"), "an IPv4 block");
	ok(parses("FC00::/7", "fc00::/7"), "an IPv6 block, canonical text");
	ok(parses("::ffff:0.0.0.0/96", "::ffff:0.0.0.0/96"), "IPv4-mapped");
	ok(parses("0.0.0.0/0", "0.0.0.0/0"), "length 0");
	ok(parses("255.255.255.255/32", "255.255.255.255/32"), "length 32");
	ok((why = parse_why("198.18.0.0")) && strstr(why, "PREFIX"), "no length: %s", why);
	ok((why = parse_why("198.18.0.1/15")) && strstr(why, "host bits"), "host bits: %s", why);
	ok((why = parse_why("198.18.0.0/33")) && strstr(why, "0..32"), "/33: %s", why);
	ok((why = parse_why("fc00::/129")) && strstr(why, "0..128"), "/129: %s", why);
	ok(parse_why("198.18.0.0/015") != NULL, "a leading zero in the length");
	ok(parse_why("198.18.0.0/") != NULL, "an empty length");
	ok(parse_why("198.18.0.0/1x") != NULL, "junk in the length");
	ok(parse_why("198.18.0.0/-1") != NULL, "a negative length");
	ok(parse_why("198.18.0/15") != NULL, "three octets");
	ok(parse_why("pkg.test/24") != NULL, "a name");
	ok(parse_why("/8") != NULL, "no address");
	ok(parse_why("") != NULL, "empty");

	/* every listed block parses, and its name is there */
	{
		const struct range_def *l = ranges_list(&n);
		int all = 1;

		for (size_t i = 0; i < n; i++)
			all &= range_parse(l[i].cidr, &r, &why) == 0 && l[i].name && *l[i].name;
		ok(all && n >= 27, "the list: %zu blocks, all parse, all named", n);
	}

	/* the hole, and every class of the old list */
	ok(verdict("198.18.0.1", NULL, 0) && !strcmp(verdict("198.19.255.254", NULL, 0), "Benchmarking"),
	   "198.18.0.0/15 is denied (Benchmarking)");
	ok(verdict("169.254.169.254", NULL, 0) && verdict("10.1.2.3", NULL, 0) &&
		   verdict("172.31.0.1", NULL, 0) && verdict("192.168.1.1", NULL, 0) &&
		   verdict("100.64.0.1", NULL, 0) && verdict("127.0.0.1", NULL, 0) &&
		   verdict("0.1.2.3", NULL, 0) && verdict("224.0.0.1", NULL, 0) &&
		   verdict("240.0.0.1", NULL, 0) && verdict("255.255.255.255", NULL, 0),
	   "metadata, RFC 1918, CGNAT, loopback, this network, multicast, reserved, broadcast");
	ok(verdict("192.0.2.1", NULL, 0) && verdict("198.51.100.10", NULL, 0) &&
		   verdict("203.0.113.1", NULL, 0) && verdict("192.0.0.170", NULL, 0),
	   "TEST-NETs and 192.0.0.0/24");
	ok(!verdict("8.8.8.8", NULL, 0) && !verdict("198.17.255.255", NULL, 0) &&
		   !verdict("198.20.0.0", NULL, 0) && !verdict("100.128.0.0", NULL, 0),
	   "public addresses, and the neighbours of 198.18/15 and 100.64/10, pass");
	ok(verdict("fd00::1", NULL, 0) && verdict("fe80::1", NULL, 0) && verdict("::1", NULL, 0) &&
		   verdict("2001:db8::1", NULL, 0) && verdict("ff02::1", NULL, 0) &&
		   verdict("3fff::1", NULL, 0) && verdict("5f00::1", NULL, 0) && verdict("::", NULL, 0),
	   "IPv6: ULA, link-local, loopback, documentation, multicast, SRv6, unspecified");
	ok(!verdict("2606:4700::1111", NULL, 0), "a public IPv6 address passes");
	ok(verdict("::ffff:169.254.169.254", NULL, 0) && verdict("::ffff:198.18.0.1", NULL, 0) &&
		   !verdict("::ffff:8.8.8.8", NULL, 0),
	   "IPv4-mapped: judged as the IPv4 address");
	ok(verdict("64:ff9b::a9fe:a9fe", NULL, 0) && !verdict("64:ff9b::808:808", NULL, 0),
	   "NAT64: the IPv4 address it carries counts");
	ok(verdict("2002:a00::1", NULL, 0) && verdict("2002:aff:ffff:1::1", NULL, 0) &&
		   verdict("2002:a9fe:a9fe::1", NULL, 0) && verdict("2002:7f00:1::", NULL, 0) &&
		   verdict("2002:c633:640a::1", NULL, 0) && !verdict("2002:808:808::1", NULL, 0) &&
		   !verdict("2002:b00::1", NULL, 0),
	   "6to4: judged by the IPv4 address it carries (2002:0a00::/24 is 10/8)");
	ok(verdict("::808:808", NULL, 0) && verdict("::a00:1", NULL, 0) && verdict("::1", NULL, 0) &&
		   verdict("::", NULL, 0) && !verdict("::1:0:0:808:808", NULL, 0),
	   "IPv4-compatible ::/96: denied");
	ok(!strcmp(verdict("::1", NULL, 0), "Loopback Address") &&
		   !strcmp(verdict("::", NULL, 0), "Unspecified Address"),
	   "::1 and :: keep their names inside ::/96");
	allow[0] = R("198.51.100.0/24");
	ok(!verdict("2002:c633:6400::1", allow, 1) && verdict("2002:c612:1::1", allow, 1),
	   "6to4: an override of the IPv4 block counts");

	/* overrides */
	r = R("198.51.100.0/24");
	ok(ranges_override_check(&r, &why) >= 0, "an override of a whole listed block");
	r = R("198.18.0.0/24");
	ok(ranges_override_check(&r, &why) >= 0, "an override of a part of one");
	r = R("198.16.0.0/12");
	ok(ranges_override_check(&r, &why) < 0 && strstr(why, "deny list"),
	   "a block wider than the listed one is refused: %s", why);
	r = R("8.8.8.0/24");
	ok(ranges_override_check(&r, &why) < 0, "a public block is refused");
	r = R("0.0.0.0/0");
	ok(ranges_override_check(&r, &why) < 0, "everything is refused");
	r = R("fd00::/8");
	ok(ranges_override_check(&r, &why) >= 0, "an IPv6 part of fc00::/7");
	allow[0] = R("198.18.0.0/24");
	allow[1] = R("198.51.100.0/24");
	ok(!verdict("198.18.0.5", allow, 2) && verdict("198.18.1.5", allow, 2) &&
		   !verdict("198.51.100.10", allow, 2) && verdict("203.0.113.1", allow, 2),
	   "an override takes its block out, and only it");
	ok(!verdict("::ffff:198.18.0.5", allow, 2) && verdict("::ffff:198.18.1.5", allow, 2),
	   "an override applies to IPv4-mapped addresses too");
	ok(verdict("169.254.169.254", allow, 2) != NULL, "metadata stays denied");
	{
		static const char *const host[] = {
			"0.0.0.0/8", "0.0.0.0/32", "127.0.0.0/8", "127.0.0.2/32", "127.0.0.0/24",
			"::/128", "::1/128", "::ffff:0:0/96", "::ffff:127.0.0.0/104",
			"::ffff:0.0.0.0/128",
		};
		int all = 1;

		for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) {
			why = NULL;
			r = R(host[i]);
			if (ranges_override_check(&r, &why) >= 0 || !strstr(why, "the host itself")) {
				printf("# override %s accepted\n", host[i]);
				all = 0;
			}
		}
		ok(all, "no override of the host itself (0/8, 127/8, ::, ::1, IPv4-mapped)");
	}
	/* even when one slips past the check (a caller that does not run it) */
	allow[0] = R("127.0.0.0/8");
	allow[1] = R("0.0.0.0/8");
	allow[2] = R("::1/128");
	allow[3] = R("::ffff:0:0/96");
	ok(verdict("127.0.0.2", allow, 4) && verdict("0.0.0.0", allow, 4) &&
		   verdict("::1", allow, 4) && verdict("::ffff:127.0.0.1", allow, 4) &&
		   verdict("::ffff:0.0.0.0", allow, 4) && verdict("::", allow, 4),
	   "the host's blocks stay denied whatever the overrides");

	/* the config file */
	fd = mkstemp(path);
	fp = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (fp) {
		fputs("# host config\nnet = open\nallow = pkg.test\n  allow_range =  198.51.100.0/24  # lab\n"
		      "allow_range=198.18.0.0/24\n\n",
		      fp);
		fclose(fp);
	}
	ok(ranges_load_config(path, allow, 4, &n, msg, sizeof msg) == 0 && n == 2 &&
		   !strcmp(range_text(&allow[0], msg, sizeof msg), "198.51.100.0/24") &&
		   !strcmp(range_text(&allow[1], msg, sizeof msg), "198.18.0.0/24"),
	   "config: two allow_range lines, other keys left alone");
	ok(ranges_load_config(path, allow, 1, &n, msg, sizeof msg) < 0 && strstr(msg, ":5: more than"),
	   "config: more lines than room: %s", msg);
	fp = fopen(path, "w");
	if (fp) {
		fputs("net = open\nallow_range = 8.8.8.0/24\n", fp);
		fclose(fp);
	}
	ok(ranges_load_config(path, allow, 4, &n, msg, sizeof msg) < 0 && strstr(msg, path) &&
		   strstr(msg, ":2: allow_range 8.8.8.0/24: not a denied range"),
	   "config: a range outside the list names FILE:LINE: %s", msg);
	fp = fopen(path, "w");
	if (fp) {
		fputs("allow_range = 198.18.0.1/15\n", fp);
		fclose(fp);
	}
	ok(ranges_load_config(path, allow, 4, &n, msg, sizeof msg) < 0 && strstr(msg, ":1:") &&
		   strstr(msg, "host bits"),
	   "config: a bad block: %s", msg);
	fp = fopen(path, "w");
	if (fp) {
		fputs("allow_range = 198.51.100.0/24\nallow_range = 127.0.0.0/8\n", fp);
		fclose(fp);
	}
	ok(ranges_load_config(path, allow, 4, &n, msg, sizeof msg) < 0 && strstr(msg, path) &&
		   strstr(msg, ":2: allow_range 127.0.0.0/8: the host itself"),
	   "config: loopback names FILE:LINE: %s", msg);
	unlink(path);
	ok(ranges_load_config(path, allow, 4, &n, msg, sizeof msg) == 0 && n == 0,
	   "config: a missing file has no overrides");
	ok(ranges_load_config("/dev/null", allow, 4, &n, msg, sizeof msg) == 0 && n == 0,
	   "config: /dev/null has none");

	cross_check();
	return tap_done();
}
