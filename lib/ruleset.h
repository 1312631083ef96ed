/* ruleset.h - isopod's live nftables tables, read back over netlink
 * (libnftnl) and serialised canonically, so that a digest of the text says
 * "the same policy" whatever the rule handles and the counters' values:
 * an attestation's subject (isopod-attest(1)).  Libraries return errors. */
#ifndef ISOPOD_RULESET_H
#define ISOPOD_RULESET_H

#include <stddef.h>
#include <stdint.h>

struct nftnl_table;
struct nftnl_chain;
struct nftnl_rule;
struct nftnl_set;
struct nftnl_obj;
struct nftnl_flowtable;

/* The tables read: every family's table of this name (inet and arp today). */
#define RULESET_TABLE "isopod"

/* The canonicaliser: lines are added in any order as objects arrive; text
 * sorts them (tables, then chains by name, then each chain's rules in the
 * order they were added, which is the kernel's evaluation order). */
struct canon_line {
	char *key;      /* family, table, kind, chain: what orders the lines */
	unsigned seq;   /* arrival: keeps a chain's rules in their order */
	char *text;
};
/* An anonymous set ("__set%d", its name the kernel's choice) is written
 * into each rule that looks it up, by its contents, not by its name. */
struct canon_anon {
	char *scope;    /* family \x01 table \x01 name */
	char *text;     /* "{...}": the set's header and sorted elements */
};
struct canon {
	struct canon_line *v;
	size_t n, cap;
	unsigned tables;  /* how many table lines (isopod's tables present) */
	struct canon_anon *anon;
	size_t nanon;
};

/* Add a table, chain or rule of any table (others than RULESET_TABLE are
 * ignored: 0, nothing added).  What is left out: handles, positions, ids,
 * a chain's use count and counters, a counter expression's packets and
 * bytes.  0, or -1 (ENOMEM). */
int canon_table(struct canon *c, const struct nftnl_table *t);
int canon_chain(struct canon *c, const struct nftnl_chain *ch);
int canon_rule(struct canon *c, const struct nftnl_rule *r);
/* A set with its elements (added before the rules that use it, so that an
 * anonymous set is known by its contents): flags, key and data types and
 * lengths, object type, timeout, userdata, and the elements sorted (key,
 * key end, flags, verdict and chain, data, object, timeout, userdata; not
 * their expiration, which counts down, nor their expressions' state).
 * Stateful objects: type and configuration, not a counter's values nor a
 * quota's consumption.  Flowtables: hook, priority, flags, sorted devices. */
int canon_set(struct canon *c, const struct nftnl_set *s);
int canon_obj(struct canon *c, struct nftnl_obj *o);
int canon_flowtable(struct canon *c, const struct nftnl_flowtable *f);
/* Whether a table is covered whole (tables, chains, rules, sets, objects,
 * flowtables): isopod's, of any family, and every netdev table.  Of every
 * other table only the base chains' headers are added (canon_chain). */
int canon_covered(uint32_t family, const char *table);
/* The canonical text, one line per object, each ending "\n"; malloc'd
 * (*len without the NUL), NULL on ENOMEM.  Sorts c. */
char *canon_text(struct canon *c, size_t *len);
void canon_free(struct canon *c);

/* Read isopod's tables of the current network namespace (needs
 * CAP_NET_ADMIN there) into c.  0, or -1 with why. */
int ruleset_read(struct canon *c, char *why, size_t whysz);

/* The drop rules of `inet isopod` that carry a counter (the doctor reads
 * them around each probe, isopod-doctor(8) EVIDENCE): chain, handle and
 * the counter's packets, in the kernel's order.  *v malloc'd (free it).
 * 0, or -1 with why (no table: 0 rules, ENOENT). */
struct ruleset_drop {
	char chain[64];
	uint64_t handle, packets;
};
int ruleset_drops(struct ruleset_drop **v, size_t *n, char *why, size_t whysz);

#endif
