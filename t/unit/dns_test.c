/* dns_test.c - unit tests of lib/dns.c: the parser of guest queries and
 * resolver answers in isopod-broker.  Built by t/run-unit with ASan + UBSan;
 * every message is copied into a heap buffer of exactly its size, so a read
 * one byte too far is a failure.  (t/run-unit links frame.c and util.c
 * only: the code under test is included.) */
#include "dns.c"
#include "tap.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *dup_exact(const void *p, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);

	if (!b)
		abort();
	memcpy(b, p, n);
	return b;
}

static int parse_q(const void *p, size_t n, struct dns_query *q)
{
	uint8_t *b = dup_exact(p, n);
	int r = dns_parse_query(b, n, q);

	free(b);
	return r;
}

static int parse_a(const void *p, size_t n, uint16_t id, const char *name, uint32_t *a, int max,
		   int *rc)
{
	uint8_t *b = dup_exact(p, n);
	int r = dns_parse_a(b, n, id, name, a, max, rc);

	free(b);
	return r;
}

#define HDR(id, fl, qd, an, ns, ar)                                                           \
	(id) >> 8, (id) & 0xff, (fl) >> 8, (fl) & 0xff, 0, (qd), 0, (an), 0, (ns), 0, (ar)
#define QPKG 3, 'p', 'k', 'g', 4, 't', 'e', 's', 't', 0

static void test_query(void)
{
	static const uint8_t ok1[] = { HDR(0x1234, 0x0100, 1, 0, 0, 0), QPKG, 0, 1, 0, 1 };
	static const uint8_t upper[] = { HDR(1, 0x0100, 1, 0, 0, 0), 3, 'P', 'k', 'G', 4, 'T', 'E',
					 'S', 'T', 0, 0, 28, 0, 1 };
	static const uint8_t edns[] = { HDR(7, 0x0100, 1, 0, 0, 1), QPKG, 0, 1, 0, 1,
					0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0, 0 };
	static const uint8_t resp[] = { HDR(1, 0x8180, 1, 0, 0, 0), QPKG, 0, 1, 0, 1 };
	static const uint8_t two[] = { HDR(1, 0x0100, 2, 0, 0, 0), QPKG, 0, 1, 0, 1, QPKG, 0, 1, 0, 1 };
	static const uint8_t notify[] = { HDR(1, 0x2000, 1, 0, 0, 0), QPKG, 0, 1, 0, 1 };
	static const uint8_t loop[] = { HDR(1, 0x0100, 1, 0, 0, 0), 0xc0, 12, 0, 1, 0, 1 };
	static const uint8_t fwd[] = { HDR(1, 0x0100, 1, 0, 0, 0), 0xc0, 14, 0, 1, 0, 1 };
	static const uint8_t ext[] = { HDR(1, 0x0100, 1, 0, 0, 0), 0x41, 'a', 0, 0, 1, 0, 1 };
	static const uint8_t odd[] = { HDR(1, 0x0100, 1, 0, 0, 0), 5, 'a', '.', 'b', 0, '\\', 0, 0,
				       1, 0, 1 };
	static const uint8_t root[] = { HDR(1, 0x0100, 1, 0, 0, 0), 0, 0, 2, 0, 1 };
	uint8_t big[12 + 4 * 64 + 5] = { HDR(1, 0x0100, 1, 0, 0, 0) }, out[600];
	struct dns_query q;
	size_t n, k;
	int all;

	ok(parse_q(ok1, sizeof ok1, &q) == 0 && q.id == 0x1234 && !strcmp(q.name, "pkg.test") &&
		   q.qtype == DNS_T_A && q.qclass == DNS_CLASS_IN && q.qend == sizeof ok1,
	   "a plain A query");
	ok(parse_q(upper, sizeof upper, &q) == 0 && !strcmp(q.name, "pkg.test") && q.qtype == 28,
	   "names are lowercased");
	ok(parse_q(edns, sizeof edns, &q) == 0 && q.qend == 12 + 10 + 4, "an EDNS OPT record is ignored");
	ok(parse_q(resp, sizeof resp, &q) == -1, "a response is dropped");
	ok(parse_q(two, sizeof two, &q) == DNS_RC_FORMERR, "two questions: FORMERR");
	ok(parse_q(notify, sizeof notify, &q) == DNS_RC_NOTIMP && q.id == 1, "opcode 4: NOTIMP");
	ok(parse_q(loop, sizeof loop, &q) == DNS_RC_FORMERR && q.qend == 0, "a pointer to itself");
	ok(parse_q(fwd, sizeof fwd, &q) == DNS_RC_FORMERR, "a forward pointer");
	ok(parse_q(ext, sizeof ext, &q) == DNS_RC_FORMERR, "label type 0x40");
	ok(parse_q(odd, sizeof odd, &q) == 0 && !strcmp(q.name, "a\\046b\\000\\092"),
	   "'.', NUL and '\\' inside a label are escaped: %s", q.name);
	ok(parse_q(root, sizeof root, &q) == 0 && q.name[0] == '\0' && q.qtype == 2, "the root name");

	all = 1;
	for (k = 0; k < sizeof ok1; k++) {
		int r = parse_q(ok1, k, &q);

		if (k < DNS_HDR ? r != -1 : r != DNS_RC_FORMERR)
			all = 0;
	}
	ok(all, "every truncation: dropped (no header) or FORMERR");

	/* 4 labels of 63: 257 wire bytes, over 255 */
	for (k = 0, n = 12; k < 4; k++) {
		big[n++] = 63;
		memset(big + n, 'a', 63);
		n += 63;
	}
	big[n++] = 0;
	big[n++] = 0, big[n++] = 1, big[n++] = 0, big[n++] = 1;
	ok(parse_q(big, n, &q) == DNS_RC_FORMERR, "a name over 255 bytes");
	big[12 + 3 * 64] = 0; /* 3 labels: 193 bytes */
	ok(parse_q(big, 12 + 3 * 64 + 5, &q) == 0 && strlen(q.name) == 3 * 63 + 2, "a 193-byte name");

	/* answers */
	parse_q(ok1, sizeof ok1, &q);
	n = dns_reply_rcode(out, sizeof out, ok1, &q, DNS_RC_REFUSED);
	ok(n == sizeof ok1 && out[0] == 0x12 && out[1] == 0x34 && out[2] == 0x81 && out[3] == 0x85 &&
		   out[5] == 1 && out[7] == 0 && out[11] == 0 && !memcmp(out + 12, ok1 + 12, n - 12),
	   "REFUSED: id, QR|RD, RA|5, the question, no records");
	parse_q(edns, sizeof edns, &q);
	n = dns_reply_rcode(out, sizeof out, edns, &q, DNS_RC_SERVFAIL);
	ok(n == 12 + 14 && out[3] == 0x82 && out[11] == 0, "SERVFAIL drops the OPT record");
	parse_q(loop, sizeof loop, &q);
	n = dns_reply_rcode(out, sizeof out, loop, &q, DNS_RC_FORMERR);
	ok(n == 12 && out[3] == 0x81 && out[5] == 0, "FORMERR without a question");
	ok(dns_reply_rcode(out, 11, loop, &q, 1) == 0, "a reply that does not fit -> 0");
}

static void test_build(void)
{
	uint8_t out[600];
	size_t n;
	char name[300];

	n = dns_build_query(out, sizeof out, 0xbeef, "pkg.test", DNS_T_A);
	ok(n == 12 + 10 + 4 && out[0] == 0xbe && out[1] == 0xef && out[2] == 1 && out[3] == 0 &&
		   out[5] == 1 && !memcmp(out + 12, "\3pkg\4test\0\0\1\0\1", 14),
	   "build: header with RD, the question");
	ok(dns_build_query(out, sizeof out, 1, "a..b", 1) == 0, "build: empty label refused");
	ok(dns_build_query(out, sizeof out, 1, "a.", 1) == 0, "build: trailing dot refused");
	ok(dns_build_query(out, sizeof out, 1, "a\\046b", 1) == 0, "build: an escaped name refused");
	ok(dns_build_query(out, 20, 1, "pkg.test", 1) == 0, "build: out too small");
	memset(name, 'a', 64);
	name[64] = '\0';
	ok(dns_build_query(out, sizeof out, 1, name, 1) == 0, "build: a 64-byte label refused");
	memset(name, 'a', sizeof name);
	for (int i = 63; i < 299; i += 64)
		name[i] = '.';
	name[254] = '\0';
	ok(dns_build_query(out, sizeof out, 1, name, 1) == 0, "build: 256 wire bytes refused");
	name[253] = '\0';
	ok(dns_build_query(out, sizeof out, 1, name, 1) == 12 + 255 + 4, "build: 255 wire bytes");
}

static void test_answers(void)
{
	/* alias.test CNAME pkg.test (compressed), pkg.test A 198.51.100.10,
	 * an unrelated A, an AAAA */
	static const uint8_t cname[] = {
		HDR(0x4242, 0x8180, 1, 4, 0, 0),
		5, 'a', 'l', 'i', 'a', 's', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1, /* q at 12 */
		0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 3, 'p', 'k', 'g', 0xc0, 18, /* at 28 */
		0xc0, 40, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 10,
		3, 'x', 'y', 'z', 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 0, 0, 1,
		0xc0, 40, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
	};
	static const uint8_t two[] = {
		HDR(9, 0x8180, 1, 2, 0, 0), QPKG, 0, 1, 0, 1,
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 99, 0, 5,
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 51, 100, 10,
	};
	static const uint8_t nx[] = { HDR(9, 0x8183, 1, 0, 0, 0), QPKG, 0, 1, 0, 1 };
	static const uint8_t cloop[] = {
		HDR(9, 0x8180, 1, 1, 0, 0), QPKG, 0, 1, 0, 1,
		0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 2, 0xc0, 12,
	};
	static const uint8_t cut[] = {
		HDR(9, 0x8180, 1, 1, 0, 0), QPKG, 0, 1, 0, 1,
		0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 40, 1, 2, 3, 4,
	};
	uint32_t a[4];
	int rc = -1, n, all;
	size_t k;

	n = parse_a(cname, sizeof cname, 0x4242, "alias.test", a, 4, &rc);
	ok(n == 1 && rc == 0 && a[0] == htonl(0xc633640a), "CNAME followed to its A: %d", n);
	ok(dns_check_reply(cname, sizeof cname, 0x4242, "alias.test", DNS_T_A) == 0, "check: ours");
	ok(dns_check_reply(cname, sizeof cname, 0x4243, "alias.test", DNS_T_A) == -1, "check: other id");
	ok(dns_check_reply(cname, sizeof cname, 0x4242, "pkg.test", DNS_T_A) == -1, "check: other name");
	ok(dns_check_reply(cname, sizeof cname, 0x4242, "alias.test", DNS_T_AAAA) == -1,
	   "check: other type");
	n = parse_a(two, sizeof two, 9, "pkg.test", a, 4, &rc);
	ok(n == 2 && a[0] == htonl(0x0a630005) && a[1] == htonl(0xc633640a), "two A records, in order");
	n = parse_a(two, sizeof two, 9, "pkg.test", a, 1, &rc);
	ok(n == 1, "max is respected");
	n = parse_a(nx, sizeof nx, 9, "pkg.test", a, 4, &rc);
	ok(n == 0 && rc == DNS_RC_NXDOMAIN, "NXDOMAIN: no address, rcode 3");
	n = parse_a(cloop, sizeof cloop, 9, "pkg.test", a, 4, &rc);
	ok(n == 0, "a CNAME to itself ends (no address)");
	ok(parse_a(cut, sizeof cut, 9, "pkg.test", a, 4, &rc) == -1, "rdlength past the end: malformed");
	all = 1;
	for (k = 0; k < sizeof cname; k++) {
		n = parse_a(cname, k, 0x4242, "alias.test", a, 4, &rc);
		if (n > 0)
			all = 0;
	}
	ok(all, "every truncation of the CNAME answer yields no address");
}

int main(void)
{
	char b[16];

	test_query();
	test_build();
	test_answers();
	ok(!strcmp(dns_type_name(28, b, sizeof b), "AAAA") &&
		   !strcmp(dns_type_name(999, b, sizeof b), "TYPE999"),
	   "type names");
	return tap_done();
}
