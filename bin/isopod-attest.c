/* isopod-attest - sign and verify what the doctor proved, about this host.
 *
 *   keygen   an Ed25519 key pair in a root-owned 0700 directory
 *   sign     a passing doctor report -> a DSSE envelope around an in-toto
 *            Statement v1 whose subjects are the live host's enforcement
 *            and code (ruleset, QEMU, kernel, bases, isopod's binaries,
 *            config) and whose predicate is the report's evidence
 *   verify   an envelope against a pinned public key and the live host now
 *
 * A containment check that cannot fail is worse than none: sign refuses an
 * empty report, any probe that did not pass and a report that is not
 * itself "pass"; verify is valid only when every check ran and passed, and
 * names the subject or field of every refusal.  The work is lib/attest.c;
 * this is the command line and the exit statuses.  man isopod-attest. */
#include "attest.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define USAGE "isopod-attest keygen [--dir DIR] [--force] | " \
	      "isopod-attest subjects [--dir DIR] | " \
	      "isopod-attest sign [--dir DIR] [--expires-s N] [--max-report-age-s N] [-o FILE] [REPORT] | " \
	      "isopod-attest verify [--dir DIR] [--pubkey FILE] [--state FILE] [--max-validity-s N] [ENVELOPE]"

/* How old a doctor's report may be when signed: the host it tested is the
 * host signed only if little could change in between (and the subjects it
 * recorded are checked too).  --max-report-age-s sets it, up to a day. */
#define REPORT_AGE_DEFAULT 3600
#define REPORT_AGE_MAX (24 * 3600)

/* The library's error classes -> the exit-status table (man page). */
__attribute__((noreturn)) static void fail(int cls, const char *why)
{
	switch (cls) {
	case ATTEST_ENOTFOUND: die(EX_NOTFOUND, "%s", why);
	case ATTEST_EINPUT: die(EX_USAGE, "%s", why);
	case ATTEST_EREFUSED: die(EX_GUEST, "%s", why);
	case ATTEST_ECONFLICT: die(EX_CONFLICT, "%s", why);
	default: die(EX_SYS, "%s", why);
	}
}

static int cmd_keygen(const char *dir, int force)
{
	char why[DIAG_MAX];
	json_t *out;
	int r;

	if ((r = attest_keygen(dir, force, &out, why, sizeof why)) < 0)
		fail(r, why);
	json_emit(out);
	json_decref(out);
	return 0;
}

static int cmd_sign(const char *dir, long long expires_s, long long max_age, const char *report,
		    const char *outp)
{
	const struct attest_sign_opts o = { .dir = dir, .expires_s = expires_s, .max_age_s = max_age };
	struct attest_signed info;
	char why[DIAG_MAX], *envs;
	json_t *rep, *env, *sum;
	size_t n;
	int r;

	if (!report || !strcmp(report, "-")) {
		rep = json_read_stdin();
	} else if (!(rep = json_load_path(report))) {
		die(errno == ENOENT ? EX_NOTFOUND : errno == EINVAL || errno == EFBIG ? EX_USAGE : EX_SYS,
		    "unable to read the report %s:", report);
	}
	if ((r = attest_sign(&o, rep, &env, &info, why, sizeof why)) < 0)
		fail(r, why);
	if (outp) {
		if (!(envs = json_dumps(env, JSON_COMPACT)))
			die(EX_SYS, "out of memory");
		n = strlen(envs);
		if (!(envs = realloc(envs, n + 2)))
			die(EX_SYS, "out of memory");
		envs[n] = '\n', envs[n + 1] = 0;
		if (atomic_write(outp, envs, n + 1, 0644) < 0)
			die(EX_SYS, "unable to write %s:", outp);
		free(envs);
		sum = json_pack("{s:s, s:s, s:I, s:s, s:i}", "envelope", outp, "key_id", info.key_id,
				"sequence", (json_int_t)info.sequence, "expires", info.expires,
				"subjects", (int)info.subjects);
		json_emit(sum);
		json_decref(sum);
	} else {
		json_emit(env);
	}
	json_decref(env);
	json_decref(rep);
	return 0;
}

/* What the doctor records before its probes, and sign compares. */
static int cmd_subjects(const char *dir)
{
	struct attest_dir d;
	char why[DIAG_MAX];
	json_t *list, *errors, *out;
	size_t n;
	int r;

	if ((r = attest_dir_open(&d, dir, why, sizeof why)) < 0 ||
	    (r = attest_subjects(&d, &list, &errors, why, sizeof why)) < 0)
		fail(r, why);
	attest_dir_close(&d);
	if ((n = attest_subjects_warn(errors)))
		die(EX_SYS, "%zu subject(s) cannot be read on this host now", n);
	if (!(out = json_pack("{s:o}", "subjects", list)))
		die(EX_SYS, "out of memory");
	json_emit(out);
	json_decref(out);
	json_decref(errors);
	return 0;
}

static int cmd_verify(const struct attest_opts *o)
{
	char why[DIAG_MAX];
	json_t *verdict;
	int r, valid;

	if ((r = attest_verify(o, &verdict, why, sizeof why)) < 0)
		fail(r, why);
	valid = json_is_true(json_object_get(verdict, "valid"));
	json_emit(verdict);
	json_decref(verdict);
	return valid ? 0 : EX_GUEST;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "force", no_argument, NULL, 'f' },
		{ "expires-s", required_argument, NULL, 'e' },
		{ "pubkey", required_argument, NULL, 'p' },
		{ "state", required_argument, NULL, 's' },
		{ "max-report-age-s", required_argument, NULL, 'm' },
		{ "max-validity-s", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *verb, *dir = NULL, *pubp = NULL, *statep = NULL, *outp = NULL;
	long long expires_s = ATTEST_EXPIRES_DEFAULT, max_age = REPORT_AGE_DEFAULT, max_valid = -1;
	int c, force = 0;

	progname = "isopod-attest";
	umask(077);
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2)
		die_usage(USAGE, "no command given");
	verb = argv[1];
	if (strcmp(verb, "keygen") && strcmp(verb, "sign") && strcmp(verb, "verify") &&
	    strcmp(verb, "subjects"))
		die_usage(USAGE, "unknown command %s", EXC(verb));
	optind = 2;
	while ((c = getopt_long(argc, argv, "+ho:", lo, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'f': force = 1; break;
		case 'e':
			if (parse_ll(optarg, 1, ATTEST_EXPIRES_MAX, &expires_s) < 0)
				die(EX_USAGE, "--expires-s: 1 to %d seconds, not %s", ATTEST_EXPIRES_MAX, EXC(optarg));
			break;
		case 'm':
			if (parse_ll(optarg, 1, REPORT_AGE_MAX, &max_age) < 0)
				die(EX_USAGE, "--max-report-age-s: 1 to %d seconds, not %s", REPORT_AGE_MAX,
				    EXC(optarg));
			break;
		case 'v':
			if (parse_ll(optarg, 1, ATTEST_EXPIRES_MAX, &max_valid) < 0)
				die(EX_USAGE, "--max-validity-s: 1 to %d seconds, not %s", ATTEST_EXPIRES_MAX, EXC(optarg));
			break;
		case 'o': outp = optarg; break;
		case 'p': pubp = optarg; break;
		case 's': statep = optarg; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (sodium_init() < 0)
		die(EX_SYS, "unable to initialise libsodium");
	dir = attest_key_dir(dir);
	if (!strcmp(verb, "keygen")) {
		if (optind != argc || pubp || statep || outp || expires_s != ATTEST_EXPIRES_DEFAULT ||
		    max_age != REPORT_AGE_DEFAULT || max_valid >= 0)
			die_usage(USAGE, "keygen takes --dir and --force only");
		return cmd_keygen(dir, force);
	}
	if (!strcmp(verb, "subjects")) {
		if (optind != argc || pubp || statep || outp || force || expires_s != ATTEST_EXPIRES_DEFAULT ||
		    max_age != REPORT_AGE_DEFAULT || max_valid >= 0)
			die_usage(USAGE, "subjects takes --dir only");
		return cmd_subjects(dir);
	}
	if (!strcmp(verb, "sign")) {
		if (argc - optind > 1 || pubp || statep || force || max_valid >= 0)
			die_usage(USAGE, "an option or operand sign does not take");
		return cmd_sign(dir, expires_s, max_age, optind < argc ? argv[optind] : NULL, outp);
	}
	if (argc - optind > 1 || outp || force || expires_s != ATTEST_EXPIRES_DEFAULT ||
	    max_age != REPORT_AGE_DEFAULT)
		die_usage(USAGE, "an option or operand verify does not take");
	return cmd_verify(&(const struct attest_opts){
		.dir = dir, .pubkey = pubp, .state = statep,
		.envelope = optind < argc ? argv[optind] : NULL,
		.max_validity_s = max_valid < 0 ? ATTEST_EXPIRES_DEFAULT : max_valid });
}
