/* policy.h - what isopod-broker lets through: names and ports from the
 * allowlist (lib/allow.c's patterns), and at connect time no address in
 * the deny ranges (lib/ranges.c, less the host's overrides) nor any the
 * host delivers to itself. */
#ifndef ISOPOD_POLICY_H
#define ISOPOD_POLICY_H

#include "ranges.h"

#include <stddef.h>
#include <stdint.h>

#define POLICY_ALLOW_MAX 1024

struct policy {
	char *allow[POLICY_ALLOW_MAX]; /* normalised patterns (allow_norm), malloc'd */
	size_t nallow;
	/* the host's overrides of the deny list (isopod-boot passes the
	 * allow_range lines of the host's config) */
	struct range allow_range[RANGES_ALLOW_MAX];
	size_t nallow_range;
	int allow_all;
};

/* Is name (normalised) in the allowlist? */
int policy_name_allowed(const struct policy *p, const char *name);

/* Does an entry that matches name allow port?  (allow_all: any port.)
 * When none does, rules gets the entries that match the name, for the
 * refusal. */
int policy_port_allowed(const struct policy *p, const char *name, unsigned port, char *rules,
			size_t sz);

/* The allowlist as text for a refusal ("every name", "empty", or the
 * patterns; a long list is cut with " ..."). */
void policy_allow_text(const struct policy *p, char *out, size_t sz);

/* Addresses no flow may reach, whatever the name: the name of a's deny
 * block (a in network order), or NULL. */
const char *policy_range_denied(const struct policy *p, uint32_t a);

/* Is a one of the host's own IPv4 addresses, as they are now?  1, 0, or
 * -1 when they cannot be read (then nothing is connected: fail closed). */
int policy_own_addr(uint32_t a);

/* Does the host deliver a to itself (a local, broadcast, anycast or
 * multicast route now)?  1, 0, or -1 when the kernel cannot be asked. */
int policy_local_route(uint32_t a);

/* The answers of policy_own_addr and policy_local_route kept per address,
 * for as long as the host's addresses, links, routes and rules stay as they
 * were: fd is an rtnetlink socket that every such change is announced on
 * (and a silent flush of routes, on a link going down or an address going,
 * follows an announced change), so one recv() that finds nothing says the
 * answers still hold; anything queued, or an overflow, forgets them all.
 * The kernel queues the announcement on fd within the system call that
 * makes the change, so a change made before a connect is seen by it, as
 * an uncached read would see it; no time-to-live is needed. */
#define POLICY_HOST_CACHE 64

struct policy_host {
	int fd;                   /* -1: no cache, every answer asked anew */
	size_t n, next;           /* entries; the one replaced next */
	uint32_t addr[POLICY_HOST_CACHE];
	unsigned char host[POLICY_HOST_CACHE]; /* 1: the host delivers it to itself */
};

/* Subscribe h (fd -1 on any failure: then nothing is cached). */
void policy_host_open(struct policy_host *h);
/* Is a the host's own (policy_own_addr) or delivered by the host to itself
 * (policy_local_route), as things are now?  1, 0, or -1 when they cannot be
 * read (fail closed). */
int policy_host(struct policy_host *h, uint32_t a);
void policy_host_close(struct policy_host *h);

void policy_free(struct policy *p);

#endif
