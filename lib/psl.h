/* psl.h - the Public Suffix List (publicsuffix.org), as learn mode's
 * proposal (lib/propose.c) folds names into "*.domain" patterns: a fold
 * must never reach a public suffix, where anyone may register a name
 * (github.io, co.uk, cloudfront.net).
 *
 * The list is read from its text form (Debian's publicsuffix package:
 * PSL_DEFAULT_PATH) exactly as https://publicsuffix.org/list/ says: one
 * rule a line, read up to its first whitespace, "//" lines are comments;
 * a rule's labels may be "*" (any one label) and a rule starting with "!"
 * is an exception.  The ICANN and the PRIVATE sections both count (a
 * private suffix such as github.io is anyone's hosts all the same).  A
 * label in UTF-8 is stored as its punycode A-label ("xn--..."), the form
 * host names have in the broker's ledger.  Compared case-insensitively. */
#ifndef ISOPOD_PSL_H
#define ISOPOD_PSL_H

#include <stddef.h>

#define PSL_DEFAULT_PATH "/usr/share/publicsuffix/public_suffix_list.dat"
/* A list file larger than this is refused (Debian's: 246 kB). */
#define PSL_READ_MAX (16u << 20)

struct psl;

/* The list of the text buf[0..n).  A line that is no rule (an empty label,
 * a UTF-8 label that is not UTF-8 or whose A-label is over 63 bytes) is
 * skipped and counted.  NULL only when out of memory (errno ENOMEM). */
struct psl *psl_parse(const char *buf, size_t n);

/* The list of the file at path; NULL with *why set (a static text; errno
 * set when a call failed): unreadable, not a regular file, larger than
 * PSL_READ_MAX, holding no rule, out of memory. */
struct psl *psl_load(const char *path, const char **why);

/* psl_load of path (NULL or "": PSL_DEFAULT_PATH, Debian's); NULL with the
 * whole reason, path and errno's text, in why (for a proposal's "fold"
 * and a warning). */
struct psl *psl_open(const char *path, char *why, size_t whysz);

void psl_free(struct psl *p);

/* The number of rules read, and of lines that were no rule. */
size_t psl_rules(const struct psl *p);
size_t psl_bad_lines(const struct psl *p);

/* The registrable domain of a host name (its public suffix and one label
 * more): a pointer into name, or NULL when name is a public suffix itself
 * (or is not a name: an empty label, more than 127 labels). */
const char *psl_registrable(const struct psl *p, const char *name);

/* 1 when some rule of the list lies strictly below name ("*.name" would
 * reach a name whose public suffix is below name: another registrant's),
 * 0 when none does, -1 when name is not a name. */
int psl_rule_below(const struct psl *p, const char *name);

#endif
