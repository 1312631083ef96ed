/* bootopt.c - isopod-boot's options and their checks before a VM (bootopt.h). */

#include "bootopt.h"

#include "accel.h"
#include "image.h"
#include "qjail.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct option boot_lo[] = {
	{ "vm", required_argument, NULL, 'v' },
	{ "vcpus", required_argument, NULL, 'c' },
	{ "mem-mib", required_argument, NULL, 'm' },
	{ "disk-mib", required_argument, NULL, 'd' },
	{ "timeout-ms", required_argument, NULL, 't' },
	{ "owner-pid", required_argument, NULL, 'o' },
	{ "keep", no_argument, NULL, 'k' },
	{ "accel", required_argument, NULL, 'a' },
	{ "cold", no_argument, NULL, 'C' },
	{ "console-max", required_argument, NULL, 'M' },
	{ "check", no_argument, NULL, 'K' },
	{ "run-options", optional_argument, NULL, 'R' },
	{ "pool-idle", required_argument, NULL, 'P' },
	{ "ephemeral", no_argument, NULL, 'E' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* The options isopod run takes and passes on as given (isopod-boot(1),
 * "run options"): a new one here needs no change to the front end. */
static const struct run_option boot_ro[] = {
	{ .name = "vcpus", .arg = "N" },
	{ .name = "mem-mib", .arg = "N" },
	{ .name = "disk-mib", .arg = "N" },
	{ .name = "cold" },
	{ .name = "console-max", .arg = "BYTES" },
	{ .name = NULL },
};

int boot_opts_fit(struct boot_opts *o, int tcg, char *why, size_t wsz)
{
	struct cg_fit *f = &o->fit;

	f->mem_mib = o->want_mem;
	f->vcpus = o->want_vcpus;
	f->overhead_mib = qjail_mem_mib(0, tcg);
	f->base_mib = qjail_mem_mib(0, 0);
	f->min_mem_mib = 64;
	if (cg_fit_vm(&o->lim, f, why, wsz) < 0)
		return -1;
	if (f->mem_tight && !o->tight_noted && (o->tight_noted = 1) && o->warnings)
		json_array_append_new(o->warnings,
				       json_sprintf("cgroup limits: --mem-mib %lld and QEMU's fixed %lld MiB fit the "
						    "memory limit of %lld MiB (%s), TCG's translation buffer's budget "
						    "(%lld MiB) does not: the buffer is capped at %lld MiB (tb-size), "
						    "a guest that runs much new code runs slower",
						    f->mem_mib, f->base_mib, o->lim.mem.v >> 20, o->lim.mem.dir,
						    f->overhead_mib - f->base_mib, f->tb_mib));
	if (f->vcpus_throttled && !o->throttle_noted && (o->throttle_noted = 1) && o->warnings)
		json_array_append_new(o->warnings,
				       json_sprintf("cgroup limits: %lld vCPUs in a CFS quota of %lld.%02lld CPUs "
						    "(%s): each runs, throttled to share the quota (a guest's "
						    "CPU-bound threads run slower, its timing jitters)",
						    f->vcpus, o->lim.quota_us / o->lim.period_us,
						    o->lim.quota_us % o->lim.period_us * 100 / o->lim.period_us,
						    o->lim.cpu.dir));
	o->mem_mib = f->mem_mib;
	o->vcpus = f->vcpus;
	return 0;
}

/* The limits read (garbage there: 111), their warnings, the first fit.
 * TCG's budget is known here only when TCG is forced or /dev/kvm does not
 * open (lib/accel.c accel_known): isopod-boot fits again once it chose. */
static int read_limits(struct boot_opts *o, int mem_given, int vcpus_given, char *msg, size_t msz)
{
	char why[2 * PATH_MAX + 256], err[PATH_MAX + 256];
	const char *acc = NULL;
	struct img im = { 0 };
	int cached, tcg;

	if (cg_limits_read("", &o->lim, why, sizeof why) < 0)
		return reason_code(EX_SYS, msg, msz, "unable to read this process's cgroup limits: %s", why);
	if (o->lim.warning[0] && o->warnings)
		json_array_append_new(o->warnings, json_string(o->lim.warning));
	o->fit.mem_given = mem_given;
	o->fit.vcpus_given = vcpus_given;
	o->want_mem = o->mem_mib;
	o->want_vcpus = o->vcpus;
	tcg = accel_known(o->accel, o->accel_src, &im, &acc, &cached, why, sizeof why, err,
			  sizeof err) == 0 && acc && !strcmp(acc, "tcg");
	if (boot_opts_fit(o, tcg, why, sizeof why) < 0)
		return reason_code(EX_USAGE, msg, msz, "%s", why);
	if (o->lim.pids.v >= 0 && o->lim.pids.v < QJAIL_PIDS_BASE + o->vcpus && o->warnings)
		json_array_append_new(o->warnings,
				       json_sprintf("cgroup limits: pids.max %lld of %s is below the "
						    "%lld threads QEMU's jail allows",
						    o->lim.pids.v, o->lim.pids.dir,
						    (long long)QJAIL_PIDS_BASE + o->vcpus));
	return 0;
}

/* The pool's settings from the environment: is the pool wanted? */
static int pool_wanted(struct boot_opts *o, char *msg, size_t msz)
{
	const char *e = getenv("ISOPOD_WARM"), *w = getenv("ISOPOD_WARM_WAIT_MS");

	if (e && *e && strcmp(e, "0") && strcmp(e, "1"))
		return reason_code(EX_USAGE, msg, msz, "ISOPOD_WARM=%s: want 0 (no warm pool) or 1", EXC(e));
	if (w && *w && parse_ll(w, 0, 3600000, &o->wait_ms) < 0)
		return reason_code(EX_USAGE, msg, msz, "ISOPOD_WARM_WAIT_MS=%s: want milliseconds 0..3600000",
				   EXC(w));
	o->warm = !o->cold && !(e && !strcmp(e, "0"));
	return 0;
}

int boot_opts_parse(struct boot_opts *o, int argc, char **argv, char *msg, size_t msz)
{
	const char *a_vcpus = NULL, *a_mem = NULL, *a_to = NULL, *env;
	int c;

	/* 0, not 1: glibc starts afresh (isopod-claim parsed its own first) */
	optind = 0;
	while ((c = getopt_long(argc, argv, "+h", boot_lo, NULL)) != -1) {
		switch (c) {
		case 'v': o->a_vm = optarg; break;
		case 'c': a_vcpus = optarg; break;
		case 'm': a_mem = optarg; break;
		case 'd': o->a_disk = optarg; break;
		case 't': a_to = optarg; break;
		case 'o': o->a_owner = optarg; break;
		case 'k': o->keep = 1; break;
		case 'C': o->cold = 1; break;
		case 'K': o->check = 1; break;
		case 'E': o->ephemeral = 1; break;
		case 'P':
			/* isopod-pool fill's: kept until a run takes it (lib/pool.h) */
			if (range_check("--pool-idle", optarg, 1, 86400, "seconds", &o->pool_idle_s, msg,
					msz) < 0)
				return EX_USAGE;
			o->keep = 1;
			break;
		case 'M':
			if (range_check("--console-max", optarg, 0, CONSOLE_MAX_LIMIT, "bytes",
					&o->console_max, msg, msz) < 0)
				return EX_USAGE;
			break;
		case 'a':
			if (strcmp(optarg, "kvm") && strcmp(optarg, "tcg"))
				return reason_code(EX_USAGE, msg, msz, "--accel %s: want kvm or tcg", EXC(optarg));
			o->accel = optarg;
			o->accel_src = "--accel";
			break;
		case 'R':
			/* =text: the lines isopod run reads (util.h) */
			if (optarg && strcmp(optarg, "text"))
				return reason_code(BOOT_OPTS_SHAPE, msg, msz,
						   "--run-options=%s: want text, or no value for JSON", EXC(optarg));
			o->run_options = !!optarg;
			return 0;
		case 'h':
			o->help = 1;
			return 0;
		default:
			return reason_code(BOOT_OPTS_SHAPE, msg, msz, "bad option (usage above)");
		}
	}
	if (optind != argc)
		return reason_code(BOOT_OPTS_SHAPE, msg, msz, "unexpected operand %s", EXC(argv[optind]));
	/* a kept VM outlives its run: its disk may be committed or booted
	 * again, its flushes are kept (qemu_vm no_flush) */
	if (o->ephemeral && o->keep)
		return reason_code(EX_USAGE, msg, msz, "--ephemeral: not with --%s: a kept VM's disk "
				   "is read again", o->pool_idle_s ? "pool-idle" : "keep");
	if (!o->accel && (env = getenv("ISOPOD_ACCEL")) && *env) {
		if (strcmp(env, "kvm") && strcmp(env, "tcg"))
			return reason_code(EX_USAGE, msg, msz, "ISOPOD_ACCEL=%s: want kvm or tcg", EXC(env));
		o->accel = env;
		o->accel_src = "ISOPOD_ACCEL";
	}
	if ((c = pool_wanted(o, msg, msz)) != 0)
		return c;
	/* the host's CPUs and memory (lib/cgroup.c, as isopod-pool's take) */
	if (host_fit_vm(a_vcpus, a_mem, &o->vcpus, &o->mem_mib, msg, msz) < 0)
		return errno == EINVAL ? EX_USAGE : EX_SYS;
	if ((c = read_limits(o, !!a_mem, !!a_vcpus, msg, msz)) != 0)
		return c;
	if (a_to && range_check("--timeout-ms", a_to, 1, 86400000, "milliseconds", &o->timeout_ms,
				msg, msz) < 0)
		return EX_USAGE;
	return 0;
}

int boot_opts_check(struct boot_opts *o, char *msg, size_t msz)
{
	if (o->a_disk && range_check("--disk-mib", o->a_disk, 64, BOOT_DISK_MIB_MAX,
				     "at least the base image's size", &o->disk_mib, msg, msz) < 0)
		return EX_USAGE;
	return 0;
}

const struct option *boot_opts_long(void)
{
	return boot_lo;
}

const struct run_option *boot_opts_run(void)
{
	return boot_ro;
}
