/* policy_test.c - isopod-broker's policy (lib/policy.c): names and ports
 * of the allowlist, its text in a refusal, and the address checks made at
 * connect time (deny ranges less the host's overrides, the host's own
 * addresses, what the host routes to itself). */
#include "../../lib/policy.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/allow.c"
#include "../../lib/ranges.c"
#include "../../lib/config.c"
#include "../../lib/nldump.c"

#include <arpa/inet.h>
#include <string.h>

#include "tap.h"

static uint32_t A(const char *s)
{
	struct in_addr ia = { .s_addr = 0 };

	inet_pton(AF_INET, s, &ia);
	return ia.s_addr;
}

static void add(struct policy *p, const char *pattern)
{
	p->allow[p->nallow++] = strdup(pattern);
}

static void test_names(void)
{
	struct policy p = { .nallow = 0 };
	char rules[256], text[64];

	ok(!policy_name_allowed(&p, "pkg.test"), "an empty allowlist allows nothing");
	policy_allow_text(&p, text, sizeof text);
	ok(!strcmp(text, "empty"), "its text: %s", text);
	add(&p, "pkg.test");
	add(&p, "*.wild.test");
	add(&p, "ssh.test:22");
	ok(policy_name_allowed(&p, "pkg.test"), "a listed name");
	ok(policy_name_allowed(&p, "a.wild.test"), "a name under a wildcard");
	ok(!policy_name_allowed(&p, "wild.test"), "not the wildcard's domain itself");
	ok(!policy_name_allowed(&p, "other.test"), "an unlisted name");
	ok(policy_port_allowed(&p, "pkg.test", 443, rules, sizeof rules) &&
	   policy_port_allowed(&p, "pkg.test", 80, rules, sizeof rules), "80 and 443 without a port");
	ok(!policy_port_allowed(&p, "pkg.test", 22, rules, sizeof rules) &&
	   !strcmp(rules, "pkg.test"), "not 22: the entries for the name: %s", rules);
	ok(policy_port_allowed(&p, "ssh.test", 22, rules, sizeof rules), "a port the entry names");
	ok(!policy_port_allowed(&p, "ssh.test", 443, rules, sizeof rules) &&
	   !strcmp(rules, "ssh.test:22"), "only that port: %s", rules);
	policy_allow_text(&p, text, sizeof text);
	ok(!strcmp(text, "pkg.test, *.wild.test, ssh.test:22"), "the list: %s", text);
	for (int i = 0; i < 8; i++)
		add(&p, "more.test");
	policy_allow_text(&p, text, sizeof text);
	ok(strlen(text) == sizeof text - 1 && !strcmp(text + sizeof text - 5, " ..."),
	   "a long list is cut with ' ...': %s", text);
	p.allow_all = 1;
	ok(policy_name_allowed(&p, "anything.test") &&
	   policy_port_allowed(&p, "anything.test", 22, rules, sizeof rules),
	   "--allow-all: every name, every port");
	policy_allow_text(&p, text, sizeof text);
	ok(!strcmp(text, "every name"), "its text: %s", text);
	policy_free(&p);
	ok(p.nallow == 0, "freed");
}

static void test_addresses(void)
{
	struct policy p = { .nallow = 0 };
	const char *why, *blk;

	ok(policy_range_denied(&p, A("8.8.8.8")) == NULL, "8.8.8.8 passes");
	ok((blk = policy_range_denied(&p, A("169.254.169.254"))) != NULL, "metadata: %s", blk ? blk : "-");
	ok((blk = policy_range_denied(&p, A("10.1.2.3"))) != NULL, "private: %s", blk ? blk : "-");
	ok((blk = policy_range_denied(&p, A("127.0.0.1"))) != NULL, "loopback: %s", blk ? blk : "-");
	ok(range_parse("10.1.0.0/16", &p.allow_range[0], &why) == 0 &&
	   ranges_override_check(&p.allow_range[0], &why) >= 0, "an override 10.1.0.0/16");
	p.nallow_range = 1;
	ok(policy_range_denied(&p, A("10.1.2.3")) == NULL, "lets 10.1.2.3 through");
	ok(policy_range_denied(&p, A("10.2.0.1")) != NULL, "not 10.2.0.1");
	ok(policy_range_denied(&p, A("169.254.169.254")) != NULL, "nor the metadata address");
	ok(policy_own_addr(A("127.0.0.1")) == 1, "127.0.0.1 is the host's own");
	ok(policy_own_addr(A("192.0.2.77")) == 0, "192.0.2.77 is not");
	ok(policy_local_route(A("127.0.0.2")) == 1, "127.0.0.2 is routed to the host (127/8 local)");
	{
		struct policy_host h = { .fd = -1 };
		int k;

		policy_host_open(&h);
		ok(h.fd >= 0, "the host cache subscribes to rtnetlink");
		/* twice each: the second answer is the cache's */
		for (k = 0; k < 2; k++) {
			ok(policy_host(&h, A("127.0.0.2")) == 1, "127.0.0.2 is the host's (%d)", k);
			ok(policy_host(&h, A("192.0.2.77")) == 0, "192.0.2.77 is not (%d)", k);
		}
		ok(h.n == 2, "two answers kept");
		policy_host_close(&h);
		ok(h.fd < 0 && policy_host(&h, A("127.0.0.1")) == 1, "closed: asked anew");
	}
}

int main(void)
{
	test_names();
	test_addresses();
	return tap_done();
}
