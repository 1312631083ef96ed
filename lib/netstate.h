/* netstate.h - what isopod-netsetup left in place, recorded and checked
 * (host tools that link libnftnl: isopod-netsetup, isopod-doctor).
 *
 * After its own verify, isopod-netsetup records the state it wrote (the
 * canonical text of its tables as lib/ruleset.c reads them back, without
 * counters or handles; the routing rules of the netns, canonically; and
 * each tap's tc filter: ours, its tag and its .rodata) in a root-only file
 * per network namespace.  The doctor reads the same state live and
 * compares (isopod-doctor(8), HOST CHECKS): a rule deleted, added, or
 * attached to another interface is a difference.  It also asks the kernel
 * how a tap's packet would be routed (netstate_route), which tests the
 * fail-closed routing by what it does, not by what is listed.
 * Functions return 0 or -1 with why; they never exit. */
#ifndef ISOPOD_NETSTATE_H
#define ISOPOD_NETSTATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The record's directory (root-owned, 0700) and file name pattern. */
#define NETSTATE_DIR "/run/isopod"

/* The record of this network namespace: NETSTATE_DIR/netstate-<inode of
 * /proc/self/ns/net>.json, or $ISOPOD_NETSTATE when set (tests). */
int netstate_path(char *p, size_t sz, char *why, size_t whysz);

/* The live state: {"ruleset": [lines], "routing": [lines], "taps":
 * [{tap, ours, tag, cfg}]}.  NULL with why. */
json_t *netstate_now(char *why, size_t whysz);

/* netstate_now() written to the record (atomic, 0600).  0 or -1. */
int netstate_write(char *why, size_t whysz);

/* The record, or NULL with why (ENOENT: never written). */
json_t *netstate_load(char *why, size_t whysz);

/* Delete the record (isopod-netsetup --remove); no record is fine. */
int netstate_remove(char *why, size_t whysz);

/* 1 when want and have differ (diff names the first difference: the part,
 * and the first line present in one and not in the other), 0 when equal. */
int netstate_diff(const json_t *want, const json_t *have, char *diff, size_t dsz);

/* How the kernel routes an IPv4 packet arriving on ifindex from src to
 * dst (network order) with mark: 0 and *type (RTN_*) when it routes it,
 * else the errno of the refusal (EINVAL: a blackhole rule, EHOSTUNREACH:
 * not forwarded, ENETUNREACH, EACCES: unreachable or prohibit).  -1 and
 * why when it could not be asked. */
int netstate_route(int ifindex, uint32_t src, uint32_t dst, uint32_t mark, int *type, int *err,
		   char *why, size_t whysz);

#endif
