/* nftbuild_test.c - lib/nftbuild.c's read-back callbacks when libnftnl
 * cannot allocate: the diagnostic and MNL_CB_ERROR, not a crash (libnftnl's
 * free functions dereference NULL).  The allocators are this test's,
 * failing on demand. */
#include <errno.h>

#include <libnftnl/chain.h>
#include <libnftnl/rule.h>

static int fail_alloc;

static struct nftnl_chain *test_chain_alloc(void)
{
	if (fail_alloc) {
		errno = ENOMEM; /* calloc's */
		return NULL;
	}
	return nftnl_chain_alloc();
}

static struct nftnl_rule *test_rule_alloc(void)
{
	if (fail_alloc) {
		errno = ENOMEM;
		return NULL;
	}
	return nftnl_rule_alloc();
}

#define nftnl_chain_alloc test_chain_alloc
#define nftnl_rule_alloc test_rule_alloc
#include "../../lib/nftbuild.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/nftexpr.c"
#include "../../lib/nftjail.c"
#include "../../lib/ranges.c"
#include "../../lib/config.c"
#undef nftnl_chain_alloc
#undef nftnl_rule_alloc

#include <stdio.h>
#include <string.h>

#include "tap.h"

/* lib/netslot.c's, which would bring libbpf along; never called here. */
void slot_mac(unsigned k, uint8_t mac[6])
{
	(void)k;
	memset(mac, 0, 6);
}

void tap_name(unsigned k, char out[IFNAMSIZ])
{
	snprintf(out, IFNAMSIZ, "stub%u", k);
}

int main(void)
{
	struct nftb b = { .family = 0 };
	struct nlmsghdr h = { .nlmsg_len = sizeof h };

	fail_alloc = 1;
	ok(chain_cb(&h, &b) == MNL_CB_ERROR && b.failed && strstr(b.err, "unable to allocate memory"),
	   "chain_cb: no chain allocated: MNL_CB_ERROR, \"%s\"", b.err);
	b = (struct nftb){ .family = 0 };
	ok(rule_cb(&h, &b) == MNL_CB_ERROR && b.failed && strstr(b.err, "unable to allocate memory"),
	   "rule_cb: no rule allocated: MNL_CB_ERROR, \"%s\"", b.err);
	b = (struct nftb){ .family = 0 };
	ok(docker_cb(&h, &b) == MNL_CB_ERROR && b.failed && strstr(b.err, "unable to allocate memory"),
	   "docker_cb: no rule allocated: MNL_CB_ERROR, \"%s\"", b.err);
	return tap_done();
}
