/* propose.h - the allowlist a learn run proposes (isopod run --net learn,
 * isopod-allow propose): computed from an isopod-broker ledger alone.
 *
 * The ledger is written by the broker from guest-chosen names, ports and
 * requests, so it is read as untrusted bytes: a line that is not a ledger
 * object is counted and skipped, names are checked again (lib/allow.c).
 *
 * A flow succeeded when the broker let it through and reached the far end:
 * a connect or http line with verdict "allowed" and an address; a dns line
 * with verdict "allowed" and no reason (the resolver's answer relayed).
 *
 * The proposal:
 * - "allow": entries {pattern, flows:[{kind,name,port,count}]}, sorted by
 *   pattern: every name a succeeded connect/http flow went to, as "NAME"
 *   (ports 80 and 443) or "NAME:PORT".  Exact names only, unless the folds
 *   are asked for (fold != 0): then each fold's pattern stands in allow for
 *   its names.  Never wider than what was observed by default: a fold
 *   trusts the public suffix list to name every parent where anyone may
 *   name a host, and no list does (doc/DECISIONS.md).  Each entry lists the
 *   flows it covers, the dns queries for its names among them;
 * - "folds": [{pattern, names, widens}], sorted by pattern, applied or not:
 *   the names of one port (80/443 as one) strictly below one registrable
 *   domain (its public suffix and one label more, lib/psl.h),
 *   PROPOSE_FOLD_MIN of them or more, fold to "*.P[:PORT]", P the deepest
 *   domain all of them are strictly below, when no rule of the list lies
 *   below P.  Never a fold to or above a public suffix, never one without
 *   the list.  "names": the names it stands for (at most PROPOSE_FOLD_NAMES,
 *   "names_omitted": N the rest), "widens": what it grants beyond them;
 * - "unservable": the succeeded flows filtered mode cannot serve, each with
 *   its "why": to an IP address (filtered serves names only), a query for
 *   an address, or a name resolved that no flow through the proxy went to
 *   (another protocol, or a client that ignores http_proxy/https_proxy);
 * - "lines", "skipped" (lines not ledger objects), "not_succeeded" (flow
 *   lines that did not succeed: refusals, connections that failed),
 *   "not_names" (succeeded flow lines whose name is neither a host name nor
 *   an IP address: counted, never listed, so never cut to a length);
 * - "fold": {public_suffixes: N rules, min_names: PROPOSE_FOLD_MIN, applied}
 *   when the list was read (applied: the folds are in "allow"),
 *   {public_suffixes: null, why, applied: false} when there was no list (no
 *   fold found). */
#ifndef ISOPOD_PROPOSE_H
#define ISOPOD_PROPOSE_H

#include <jansson.h>
#include <stddef.h>

/* Each list of a proposal ("allow"'s entries, "unservable"'s flows) holds
 * at most PROPOSE_LIST_MAX items and PROPOSE_NAMES_BYTES of their patterns
 * or names: the guest chooses how many names a ledger holds.  Past either,
 * the items with the most count are kept, in their order, and
 * "allow_omitted":{entries,count} / "unservable_omitted":{flows,count} /
 * "folds_omitted":{folds,count} says what was left out (absent: nothing
 * was).  A fold weighs as the flows of its names, and its bytes are its
 * pattern's and its listed names'. */
#define PROPOSE_LIST_MAX 256
#define PROPOSE_NAMES_BYTES 16384

/* A ledger larger than this is refused rather than read (the broker's cap
 * is 64 MiB unless ISOPOD_LEDGER_MAX says otherwise). */
#define PROPOSE_READ_MAX (1ll << 30)

/* The fewest names below one registrable domain that fold (see above):
 * one name is its own entry, and two exact names are a list as short as a
 * pattern and a name, for a grant far wider (every host the domain's owner
 * names, now or later); from three on, the names are shards or mirrors
 * whose set changes from run to run, and the list gets shorter. */
#define PROPOSE_FOLD_MIN 3

/* The most names a fold lists: enough to read what it stands for; its
 * names are in "allow" besides (unless applied: then in its flows). */
#define PROPOSE_FOLD_NAMES 16

struct psl; /* lib/psl.h */

/* The proposal of the ledger bytes buf[0..n) (JSON lines; a last line
 * without "\n" counts), its folds found with the public suffix list psl
 * and applied into "allow" when fold != 0; psl NULL: no fold, no_psl says
 * why in "fold" (NULL: a default text).  NULL only when out of memory. */
json_t *propose_ledger(const char *buf, size_t n, const struct psl *psl, const char *no_psl,
		       int fold);

/* The proposal of the ledger file at path, or NULL with *why set (a static
 * text; errno set when a call failed): unreadable, not a regular file (a
 * FIFO or a device is refused, never waited on), too large, no memory. */
json_t *propose_path(const char *path, const struct psl *psl, const char *no_psl, int fold,
		     const char **why);

#endif
