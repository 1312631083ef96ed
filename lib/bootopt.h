/* bootopt.h - isopod-boot's options and the checks of them that need no VM:
 * the ranges, the host's headroom, the caller's cgroup limits, the
 * environment (ISOPOD_ACCEL, ISOPOD_WARM, ISOPOD_WARM_WAIT_MS).  isopod-boot
 * parses its command line here; isopod-claim --boot-check runs the same
 * parse and check on the boot's options before it claims anything, so that
 * a run starts one tool fewer (doc/SPEED.md, Goal 3, fifth round).
 * No exit, no output: a refusal comes back as an exit status and a message
 * worded as isopod-boot's die() words it (the caller dies with it). */
#ifndef ISOPOD_BOOTOPT_H
#define ISOPOD_BOOTOPT_H

#include "cgroup.h"
#include "conlog.h"
#include "qemu.h"

#include <getopt.h>
#include <jansson.h>
#include <stddef.h>

#define BOOT_USAGE "isopod-boot [--vm REF] [--vcpus N] [--mem-mib N] [--disk-mib N] [--timeout-ms N] " \
		   "[--owner-pid PID] [--keep] [--accel kvm|tcg] [--cold] [--console-max BYTES] [--check] " \
		   "[--run-options[=text]] [--pool-idle S] [--ephemeral]"

/* boot_opts_parse's answer for a command line of the wrong shape: the
 * caller dies with die_usage(BOOT_USAGE, msg) (exit 100, kind usage). */
#define BOOT_OPTS_SHAPE (-1)

/* --disk-mib's ceiling (1 TiB), the check's and the boot's */
#define BOOT_DISK_MIB_MAX 1048576

struct boot_opts {
	long long vcpus, mem_mib, disk_mib, timeout_ms, owner;
	long long console_max, pool_idle_s, wait_ms;
	int keep, cold, check, disk_given;
	int ephemeral;            /* --ephemeral: the disk is thrown away when the VM
				     stops (isopod-run's plain run): qemu_vm no_flush */
	int warm;                 /* the warm pool is consulted (not --cold, ISOPOD_WARM) */
	int help;                 /* -h: print BOOT_USAGE */
	int run_options;          /* --run-options: -1 not asked, 0 JSON, 1 text */
	const char *accel;        /* forced accelerator or NULL */
	const char *accel_src;    /* who forced it */
	const char *a_vm;         /* --vm REF */
	const char *a_disk;       /* --disk-mib, checked once the disk is known (or by --check) */
	const char *a_owner;      /* --owner-pid */
	struct cg_limits lim;     /* the caller's cgroup limits (lib/cgroup.c) */
	struct cg_fit fit;        /* the VM's size within them */
	long long want_mem, want_vcpus; /* the size before the fit */
	int tight_noted, throttle_noted; /* their warnings given once */
	json_t *warnings;         /* borrowed: the limits' warnings are appended (NULL: dropped) */
};

/* The defaults boot_opts_parse starts from (warnings set by the caller). */
#define BOOT_OPTS_INIT                                                                       \
	{ .vcpus = VM_VCPUS_DEFAULT, .mem_mib = VM_MEM_MIB_DEFAULT, .timeout_ms = 60000,      \
	  .console_max = CONSOLE_MAX_DEFAULT, .wait_ms = 60000, .run_options = -1 }

/* argv (argv[0] names the tool in getopt's messages) into o: the options,
 * then the environment, the host's headroom, the cgroup limits and
 * --timeout-ms, in isopod-boot's order.  0, BOOT_OPTS_SHAPE, or the exit
 * status (100 usage, 111) with msg.  --run-options and -h end the parse
 * at once (o->run_options, o->help: the caller answers them). */
int boot_opts_parse(struct boot_opts *o, int argc, char **argv, char *msg, size_t msz);
/* The size fitted again into the limits, tcg: with TCG's translation
 * buffer (once the accelerator is chosen).  0, or -1 with why. */
int boot_opts_fit(struct boot_opts *o, int tcg, char *why, size_t wsz);
/* isopod-boot --check's last check, after the parse: --disk-mib within
 * 64..BOOT_DISK_MIB_MAX (the base's size, a floor, is known only at boot).  0, or
 * the exit status with msg. */
int boot_opts_check(struct boot_opts *o, char *msg, size_t msz);
/* The tables --run-options answers from (lib/util.h run_options_print):
 * the options above, and those of them isopod run passes on. */
const struct option *boot_opts_long(void);
const struct run_option *boot_opts_run(void);

#endif
