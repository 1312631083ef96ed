/* ranges.h - the address ranges no guest reaches, in one list (libc only;
 * used by isopod-netsetup for the kernel's table, by isopod-broker for its
 * connect-time re-check, by isopod-boot to hand the host's overrides to the
 * broker, and by their tests).
 *
 * The list is every block of IANA's IPv4 and IPv6 Special-Purpose Address
 * Registries whose "Globally Reachable" is False, plus multicast (224/4,
 * ff00::/8): nothing a guest has a reason to reach through the host.  A
 * host that really routes one of them (a proxy's fake-IP range, a test
 * lab's pretend internet) names it, or a part of it, as an override
 * (`allow_range = CIDR` in the host's config file); an override can only
 * take away from the list, never add a destination that is not in it.
 * The host's own addresses are not in the list: each layer denies them on
 * its own (netsetup's input chain, the broker's getifaddrs check), whatever
 * the overrides say. */
#ifndef ISOPOD_RANGES_H
#define ISOPOD_RANGES_H

#include <stddef.h>
#include <stdint.h>

#define RANGES_ALLOW_MAX 32     /* overrides a host may name */
#define RANGES_TEXT_MAX 64      /* "ffff:...:ffff/128" and more */

/* One CIDR block.  af is 4 or 6; a holds the address in network order
 * (4 or 16 bytes used); host bits are zero. */
struct range {
	uint8_t af, len;
	uint8_t a[16];
};

/* The list: the block as text and the registry's name for it. */
struct range_def {
	const char *cidr;
	const char *name;
};

/* The list itself (static, never changes) and its length. */
const struct range_def *ranges_list(size_t *n);

/* Parse "A.B.C.D/N" or "X:...:Y/N" (the /N is required; host bits must be
 * zero, so a typo cannot silently widen or move a block).  0, or -1 with
 * *why a short reason (static string). */
int range_parse(const char *s, struct range *r, const char **why);

/* Canonical text of r ("198.51.100.0/24", "fc00::/7") into out (>=
 * RANGES_TEXT_MAX); returns out. */
char *range_text(const struct range *r, char *out, size_t sz);

/* 1 when inner lies wholly inside outer (same family), else 0. */
int range_within(const struct range *outer, const struct range *inner);

/* 1 when the address (af 4 or 6, network order) lies in r, else 0. */
int range_has(const struct range *r, int af, const uint8_t *addr);

/* An override must be one of the list's blocks or lie inside one, and
 * must not touch the host's own blocks (0.0.0.0/8, 127.0.0.0/8, ::/128,
 * ::1/128, ::ffff:0:0/96), which stay denied whatever the overrides (also
 * in ranges_denied).  The index of the (first) listed block that holds it,
 * or -1 with *why. */
int ranges_override_check(const struct range *r, const char **why);

/* Is the address (af 4 or 6, network order) denied by the list, once the
 * overrides allow[0..nallow) are taken away?  The name of the listed block
 * that denies it, or NULL when the list lets it through.  An IPv6 address
 * that carries an IPv4 one is judged by it: an IPv4-mapped one
 * (::ffff:a.b.c.d) as that IPv4 address alone, one of the NAT64 prefix
 * 64:ff9b::/96 or of 6to4 (2002:AABB:CCDD::/48, A.B.C.D) as both (denied
 * when either is); the IPv4-compatible block ::/96 is in the list. */
const char *ranges_denied(int af, const uint8_t *addr, const struct range *allow, size_t nallow);

/* The overrides of a config file: its `allow_range = CIDR` lines (other
 * keys, blank lines and # comments are left to their readers; read by
 * config_each, lib/config.c), each checked with ranges_override_check.  A missing file has none.  0 with
 * *n set; -1 for a bad line (a usage error: msg "FILE:LINE: ..."); -2 when
 * the file cannot be read (msg "unable to read FILE: strerror"). */
int ranges_load_config(const char *path, struct range *out, size_t max, size_t *n, char *msg,
		       size_t msz);

/* The warning every report of this host carries for one override (the
 * canonical range text, the config file it came from), into out; returns
 * out. */
char *ranges_warning(const char *range, const char *path, char *out, size_t sz);

/* The host's config file: $ISOPOD_SYSCONFIG, else /etc/isopod/config. */
const char *ranges_config_path(void);

#endif
