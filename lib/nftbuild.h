/* nftbuild.h - isopod-netsetup's nftables (libnftnl over one netfilter
 * netlink socket): the tables `inet isopod` (anti-spoof, the DNS
 * redirect, the gateway services, forwarding of open slots, NAT, the
 * fail-closed marks and canary) and `arp isopod`, and, where Docker's
 * DOCKER-USER chain exists, two tagged rules there; all in one batch,
 * atomically replacing what a previous run loaded, then read back.  The
 * rtnetlink side of a slot is lib/netslot.h.
 *
 * Errors: -1 with the reason in b->err, worded as isopod-netsetup prints
 * it; verify's mismatches are warned (stderr), not errors. */
#ifndef ISOPOD_NFTBUILD_H
#define ISOPOD_NFTBUILD_H

#include "netslot.h"

#include <stdint.h>

#define NFTB_TABLE "isopod"
#define NFTB_MAX_CHAINS 24

struct mnl_socket;
struct mnl_nlmsg_batch;

struct nftb {
	const struct netplan *plan;
	struct mnl_socket *nl;
	char *buf;                         /* the batch's (4 MiB) */
	struct mnl_nlmsg_batch *batch;
	uint32_t seq;
	unsigned nmsgs;                    /* messages expecting an ack */
	uint16_t family;                   /* of the rules rule_new makes */
	/* What our tables should contain, for the read-back. */
	struct nftb_chain {
		uint16_t family;
		const char *name;
		unsigned rules, seen_rules;
		int seen;
	} chains[NFTB_MAX_CHAINS];
	unsigned nchains, nrules;
	unsigned seen_rules;               /* of our tables, read back */
	/* Our rules in Docker's DOCKER-USER chain: found before the batch
	 * (to be replaced), expected after it. */
	uint64_t *dk_handles;
	unsigned dk_n, dk_want, dk_seen;
	int dk_chain;                      /* DOCKER-USER exists */
	int failed;                        /* a builder failed: not sent */
	char err[512];
};

/* b fresh, for this plan, with its socket.  0 or -1. */
int nftb_open(struct nftb *b, const struct netplan *plan);
void nftb_close(struct nftb *b);
/* Does DOCKER-USER exist (b->dk_chain), and which of its rules are ours
 * (b->dk_seen, b->dk_handles)?  0 or -1. */
int nftb_docker_scan(struct nftb *b);
/* Both tables built afresh and our DOCKER-USER rules replaced (b->dk_want:
 * 2 when the plan wants them and the chain exists, else 0), in one batch.
 * 0 or -1. */
int nftb_load(struct nftb *b);
/* Chains and per-chain rule counts as built, and our DOCKER-USER rules as
 * wanted?  1 yes, 0 no (warned), -1 unable to read them back. */
int nftb_verify(struct nftb *b);
/* Both tables and our DOCKER-USER rules (b->dk_n of them) deleted, in one
 * batch.  0 or -1. */
int nftb_remove(struct nftb *b);

#endif
