/* dns_fuzz.c - libFuzzer target for lib/dns.c, the broker's parser of
 * guest queries and resolver answers: the input is parsed as a query (and
 * answered), then as an answer to a query for the name it carries and for
 * fixed names, and the builder is run on the parsed name.  See fuzz/run. */
#include "dns.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "pkg.test", "alias.test", "" };
	struct dns_query q;
	uint8_t out[DNS_QUESTION_MAX];
	uint32_t addrs[16];
	uint16_t id = size >= 2 ? (uint16_t)(data[0] << 8 | data[1]) : 0;
	int r = dns_parse_query(data, size, &q), rc, n;
	char tn[16];

	if (r >= 0) {
		size_t k = dns_reply_rcode(out, sizeof out, data, &q, r ? r : DNS_RC_REFUSED);

		if (k > sizeof out || (q.qend && k != q.qend) || strlen(q.name) > DNS_NAME_MAX)
			abort();
		dns_type_name(q.qtype, tn, sizeof tn);
	}
	if (r == 0) {
		size_t k = dns_build_query(out, sizeof out, id, q.name, q.qtype);

		if (k > sizeof out)
			abort();
		/* a query the broker builds parses back to the same name */
		if (k && (dns_parse_query(out, k, &q) != 0 || q.qend != k))
			abort();
		n = dns_parse_a(data, size, id, q.name, addrs, 16, &rc);
		if (n > 16)
			abort();
		dns_check_reply(data, size, id, q.name, DNS_T_A);
	}
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		n = dns_parse_a(data, size, id, names[i], addrs, 16, &rc);
		if (n > 16 || (n >= 0 && dns_check_reply(data, size, id, names[i], DNS_T_A) != 0))
			abort();
	}
	return 0;
}
