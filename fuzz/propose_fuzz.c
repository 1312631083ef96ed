/* propose_fuzz.c - libFuzzer target for lib/propose.c, which reads the
 * broker's ledger (written from guest-chosen names and requests) and
 * proposes an allowlist, its names folded with the public suffix list
 * (lib/psl.c).  The input is a ledger, or a list's text, a NUL byte and a
 * ledger (the list is root's file, the names the guest's: both parsers
 * see arbitrary bytes).  Beyond no crash: every entry's pattern is one
 * isopod-claim would take, and it serves every flow it says it covers (its
 * name, and for connect/http its port); a "*.P" fold is never to or above
 * a public suffix (P has a registrable domain, no rule lies below P) and
 * its names share P's registrable domain.  The input's length picks
 * whether the folds are asked for (odd: applied): when not, "allow" holds
 * no fold; either way every fold reported in "folds" is sound over the
 * names it lists, and lists at most PROPOSE_FOLD_NAMES.  See fuzz/run. */
#include "allow.h"
#include "propose.h"
#include "psl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char rules[] = "com\norg\nio\nuk\nco.uk\n*.mm\n*.ck\n!www.ck\ngithub.io\n"
			    "s3.amazonaws.com\n*.compute.amazonaws.com\nfoo.*.bar\n";

/* the fold of pattern pat (a wildcard) over the flow's name is sound */
static int fold_ok(const struct psl *psl, const char *pat, const char *name)
{
	char p[ALLOW_PATTERN_MAX];
	const char *colon, *rp, *rn;

	snprintf(p, sizeof p, "%s", pat + 2);
	if ((colon = strchr(p, ':')))
		p[colon - p] = '\0';
	rp = psl_registrable(psl, p);
	rn = psl_registrable(psl, name);
	return rp && rn && !strcmp(rp, rn) && psl_rule_below(psl, p) == 0;
}

/* Every fold reported is a pattern isopod-claim would take, sound over
 * its names, which it matches. */
static int folds_ok(const struct psl *psl, const json_t *folds)
{
	char norm[ALLOW_PATTERN_MAX];
	const char *why;
	size_t i, k;
	json_t *e, *n;

	json_array_foreach(folds, i, e) {
		const char *pat = json_string_value(json_object_get(e, "pattern"));
		const json_t *names = json_object_get(e, "names");

		if (!pat || strncmp(pat, "*.", 2) || allow_norm(norm, sizeof norm, pat, &why) < 0 ||
		    strcmp(norm, pat) || json_array_size(names) < 1 ||
		    json_array_size(names) > PROPOSE_FOLD_NAMES ||
		    !json_is_string(json_object_get(e, "widens")))
			return 0;
		json_array_foreach(names, k, n) {
			const char *name = json_string_value(n);

			if (!name || !allow_match(pat, name) || !fold_ok(psl, pat, name))
				return 0;
		}
	}
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data, *nul = memchr(in, '\0', size);
	struct psl *psl = nul ? psl_parse(in, (size_t)(nul - in)) : psl_parse(rules, sizeof rules - 1);
	size_t off = nul ? (size_t)(nul - in) + 1 : 0, i, k;
	json_t *p, *e, *f;
	char norm[ALLOW_PATTERN_MAX];
	const char *why;
	int apply = (int)(size & 1);

	if (!psl || !(p = propose_ledger(in + off, size - off, psl, NULL, apply)) ||
	    !folds_ok(psl, json_object_get(p, "folds")))
		abort();
	json_array_foreach(json_object_get(p, "allow"), i, e) {
		const char *pat = json_string_value(json_object_get(e, "pattern"));

		if (!pat || allow_norm(norm, sizeof norm, pat, &why) < 0 || strcmp(norm, pat) ||
		    (!apply && pat[0] == '*'))
			abort();
		json_array_foreach(json_object_get(e, "flows"), k, f) {
			const char *name = json_string_value(json_object_get(f, "name"));
			const char *kind = json_string_value(json_object_get(f, "kind"));
			json_int_t port = json_integer_value(json_object_get(f, "port"));

			if (!name || !kind || !allow_match(pat, name) ||
			    (strcmp(kind, "dns") && !allow_port(pat, (unsigned)port)) ||
			    (pat[0] == '*' && !fold_ok(psl, pat, name)))
				abort();
		}
	}
	json_decref(p);
	psl_free(psl);
	return 0;
}
