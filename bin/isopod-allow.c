/* isopod-allow - what an allowlist should be: `isopod-allow propose LEDGER`
 * prints the allowlist an isopod-broker ledger proposes, the one a
 * `--net learn` run's result carries (lib/propose.h), from any ledger: a
 * learn run's, or a filtered run's to see what it used.  Its "allow" holds
 * the names seen; `--fold` puts the "*.domain" folds it reports in their
 * place, a grant wider than what was seen (doc/DECISIONS.md).
 *
 * The ledger's lines come from guest-chosen names and requests; lib/propose.c
 * reads them as untrusted bytes (fuzz/propose_fuzz.c). */
#include "propose.h"
#include "psl.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE "isopod-allow propose [--fold] LEDGER"

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "fold", no_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	char nopsl[PATH_MAX + 256] = "";
	const char *why;
	struct psl *psl;
	json_t *p;
	int c, fold = 0;

	progname = "isopod-allow";
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1 || strcmp(argv[0], "propose"))
		die_usage(USAGE, "%s%s", argc < 1 ? "no command given" : "unknown command ",
			  argc < 1 ? "" : EXC(argv[0]));
	/* propose's own options, after the command word */
	optind = 1;
	opterr = 0; /* getopt would name "propose" as the program */
	while ((c = getopt_long(argc, argv, "+", lo + 1, NULL)) != -1) {
		if (c != 'f')
			die_usage(USAGE, "bad option (usage above)");
		fold = 1;
	}
	argc -= optind;
	argv += optind;
	if (argc != 1)
		die_usage(USAGE, "propose takes one LEDGER");
	/* a list that cannot be read: no fold, said in "fold" and here */
	if (!(psl = psl_open(getenv("ISOPOD_PUBLIC_SUFFIX_LIST"), nopsl, sizeof nopsl)))
		warn("%s", nopsl);
	p = propose_path(argv[0], psl, psl ? NULL : nopsl, fold, &why);
	psl_free(psl);
	if (!p) {
		int e = errno;

		die(e == ENOENT ? EX_NOTFOUND : e == ENOMEM || e == EIO ? EX_SYS : EX_USAGE,
		    "ledger %s: %s%s%s", EXC(argv[0]), why, e ? ": " : "", e ? strerror(e) : "");
	}
	json_emit(p);
	json_decref(p);
	return 0;
}
