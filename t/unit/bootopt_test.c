/* bootopt_test.c - unit tests of lib/bootopt.c, isopod-boot's option parse
 * and its checks before a VM, which isopod-boot and isopod-claim
 * --boot-check share: a refusal comes back (status, message), the process
 * goes on; a second parse in one process starts afresh (the claim parses
 * its own options first).  Built by t/run-unit with ASan + UBSan. */
#include "../../lib/bootopt.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/cgroup.c"

#include <stdlib.h>
#include <string.h>

#include "tap.h"

/* The accelerator and QEMU's budget are lib/accel.c's and lib/qjail.c's
 * (their own tests): here, nothing known, and a fixed budget. */
int accel_known(const char *forced, const char *forced_by, const struct img *im, const char **accel,
		int *cached, char *reason, size_t rsz, char *err, size_t errsz)
{
	(void)forced_by, (void)im, (void)cached, (void)reason, (void)rsz, (void)err, (void)errsz;
	*accel = forced;
	return forced ? 0 : -1;
}

long long qjail_mem_mib(long long mib, int tcg)
{
	return mib + (tcg ? 256 : 64);
}

/* boot_opts_parse of the words (argv[0] "isopod-boot") into o; its status. */
static int parse(struct boot_opts *o, char *msg, size_t msz, const char *words)
{
	static char buf[512], *av[32]; /* o borrows the words (--disk-mib, --vm) */
	char *save = NULL;
	int ac = 0;

	snprintf(buf, sizeof buf, "%s", words);
	av[ac++] = "isopod-boot";
	for (char *w = strtok_r(buf, " ", &save); w && ac < 31; w = strtok_r(NULL, " ", &save))
		av[ac++] = w;
	av[ac] = NULL;
	*o = (struct boot_opts)BOOT_OPTS_INIT;
	msg[0] = 0;
	return boot_opts_parse(o, ac, av, msg, msz);
}

int main(void)
{
	char home[] = "/tmp/bootopt-test.XXXXXX", msg[2048];
	struct boot_opts o;
	json_t *rj;
	int r;

	if (!mkdtemp(home))
		return 1;
	setenv("ISOPOD_HOME", home, 1);
	unsetenv("ISOPOD_WARM");
	unsetenv("ISOPOD_WARM_WAIT_MS");
	unsetenv("ISOPOD_ACCEL");
	opterr = 0; /* getopt's own line is the caller's stderr, not this test's */

	r = parse(&o, msg, sizeof msg, "--vcpus 0");
	ok(r == EX_USAGE && strstr(msg, "--vcpus 0: out of range 1.."), "--vcpus 0: 100, returned (%d: %s)", r, msg);
	r = parse(&o, msg, sizeof msg, "--cold --vcpus 1 --mem-mib 64 --timeout-ms 5 --console-max 7");
	ok(r == 0 && o.vcpus == 1 && o.mem_mib == 64 && o.timeout_ms == 5 && o.console_max == 7 && o.cold &&
		   !o.warm && !o.check,
	   "values parsed, after a refusal in the same process (%d: %s)", r, msg);
	r = parse(&o, msg, sizeof msg, "--frob");
	ok(r == BOOT_OPTS_SHAPE && !strcmp(msg, "bad option (usage above)"), "an unknown option: the shape (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--vcpus 1 x");
	ok(r == BOOT_OPTS_SHAPE && !strcmp(msg, "unexpected operand x"), "an operand: the shape (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--run-options=text --vcpus 0");
	ok(r == 0 && o.run_options == 1, "--run-options=text ends the parse (%d)", o.run_options);
	r = parse(&o, msg, sizeof msg, "--run-options=x");
	ok(r == BOOT_OPTS_SHAPE && strstr(msg, "--run-options=x: want text"), "--run-options=x: the shape (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--accel x");
	ok(r == EX_USAGE && !strcmp(msg, "--accel x: want kvm or tcg"), "--accel x (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--timeout-ms 0");
	ok(r == EX_USAGE && strstr(msg, "--timeout-ms 0: out of range 1..86400000"), "--timeout-ms 0 (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--pool-idle 5");
	ok(r == 0 && o.pool_idle_s == 5 && o.keep, "--pool-idle keeps the VM");
	r = parse(&o, msg, sizeof msg, "--ephemeral");
	ok(r == 0 && o.ephemeral && !o.keep, "--ephemeral: a throwaway disk");
	r = parse(&o, msg, sizeof msg, "--keep --ephemeral");
	ok(r == EX_USAGE && strstr(msg, "--ephemeral: not with --keep"), "--ephemeral with --keep: 100 (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--ephemeral --pool-idle 5");
	ok(r == EX_USAGE && strstr(msg, "--ephemeral: not with --pool-idle"),
	   "--ephemeral with --pool-idle: 100 (%s)", msg);
	setenv("ISOPOD_WARM", "x", 1);
	r = parse(&o, msg, sizeof msg, "");
	ok(r == EX_USAGE && strstr(msg, "ISOPOD_WARM=x: want 0"), "ISOPOD_WARM=x (%s)", msg);
	setenv("ISOPOD_WARM", "0", 1);
	r = parse(&o, msg, sizeof msg, "");
	ok(r == 0 && !o.warm, "ISOPOD_WARM=0: no pool");
	unsetenv("ISOPOD_WARM");
	r = parse(&o, msg, sizeof msg, "");
	ok(r == 0 && o.warm && o.wait_ms == 60000, "the pool by default, its wait 60 s");
	setenv("ISOPOD_ACCEL", "tcg", 1);
	r = parse(&o, msg, sizeof msg, "");
	ok(r == 0 && !strcmp(o.accel, "tcg") && !strcmp(o.accel_src, "ISOPOD_ACCEL"), "ISOPOD_ACCEL=tcg");
	r = parse(&o, msg, sizeof msg, "--accel kvm");
	ok(r == 0 && !strcmp(o.accel, "kvm") && !strcmp(o.accel_src, "--accel"), "--accel beats ISOPOD_ACCEL");
	unsetenv("ISOPOD_ACCEL");
	r = parse(&o, msg, sizeof msg, "--check --disk-mib 63");
	ok(r == 0 && o.check && boot_opts_check(&o, msg, sizeof msg) == EX_USAGE &&
		   strstr(msg, "--disk-mib 63: out of range 64..1048576"),
	   "--disk-mib 63: refused by the check, not the parse (%s)", msg);
	r = parse(&o, msg, sizeof msg, "--disk-mib 64");
	ok(r == 0 && boot_opts_check(&o, msg, sizeof msg) == 0 && o.disk_mib == 64, "--disk-mib 64 passes");
	/* every run option is one of the parse's, taking a value as it does
	 * (run_options_json refuses a drift: what --run-options answers) */
	rj = run_options_json(boot_opts_run(), boot_opts_long(), msg, sizeof msg);
	ok(boot_opts_run()[0].name && rj, "boot_opts_run() names only options of boot_opts_long() (%s)",
	   rj ? "agree" : msg);
	json_decref(rj);
	rmdir(home);
	return tap_done();
}
