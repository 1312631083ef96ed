/* cgroup.h - the caller's own cgroups: where they are (the jail makes its
 * cgroups below them, lib/jail.c) and the limits they put on whatever runs
 * in them, QEMU included (isopod-boot sizes a VM within them, issue 16).
 *
 * root is "" for this system, or a directory standing for "/" (a test's
 * fake tree): /proc/self/cgroup, /proc/self/mountinfo and every mount point
 * they name are read below it.  What these files hold is the host's, but
 * it is parsed as untrusted bytes: a number that is not one, a path with a
 * "." or ".." component, is refused (EINVAL, the file named). */
#ifndef ISOPOD_CGROUP_H
#define ISOPOD_CGROUP_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

/* The mount point (below root) of the hierarchy of fstype: "cgroup2", or
 * "cgroup" with the v1 controller ctl among its options.  0, or -1. */
int cg_mount(const char *root, const char *fstype, const char *ctl, char *out, size_t sz);
/* Our own cgroup's directory (below root) in the hierarchy of ctl (NULL:
 * v2's, else v1's controller ctl): /proc/self/cgroup's path, checked (no
 * "", "." or ".." component: under a cgroup namespace over a bound host
 * tree it is "/../.."), below the mount that shows it (mountinfo's root
 * of that mount is the path or above it; a bind of another subtree
 * mounted first is passed over).  0 with dir and *mlen (the mount
 * point's length), or -1 with errno and a reason: ENOENT, no such
 * hierarchy or we are in none; EINVAL, a path that is not clean; ENOTDIR,
 * no mount shows our cgroup; E2BIG, none found but a mountinfo line of
 * the hierarchy with a field longer than 1023 bytes was skipped (it may
 * have been ours); ENAMETOOLONG.  The directory may not be
 * there (a cgroup removed under us): the caller's stat or mkdir says. */
int cg_dir(const char *root, const char *ctl, char *dir, size_t sz, size_t *mlen, char *why,
	   size_t wsz);

/* One limit: its value (-1: none on the path) and the cgroup directory
 * that sets it (the smallest along our path up to the mount's root: an
 * ancestor's limit applies to its descendants). */
struct cg_limit {
	long long v;
	char dir[PATH_MAX];
};

struct cg_limits {
	int version;             /* 2 or 1: the hierarchy memory's limit (else cpu's) is in; 0: none */
	struct cg_limit mem;     /* bytes: memory.max, v1 memory.limit_in_bytes (>= 2^62: none) */
	struct cg_limit cpu;     /* whole CPUs of the CFS quota: floor(quota / period), at least 1 */
	long long quota_us, period_us; /* that quota's (-1: none) */
	struct cg_limit cpuset;  /* CPUs in our cpuset (v2 cpuset.cpus.effective, v1 cpuset.effective_cpus or cpuset.cpus):
				    ours, or the nearest ancestor's where we have none */
	struct cg_limit pids;    /* pids.max */
	char warning[PATH_MAX + 128]; /* a hierarchy we are in but whose directory is not there */
};

/* Is w one of the words (space or newline apart) of the small control
 * file at path (cgroup.controllers, cgroup.subtree_control)?  0 when it
 * is not, or the file cannot be read. */
int cg_has_word(const char *path, const char *w);

/* Our limits as above.  0 (a missing hierarchy or file is no limit), or
 * -1 with errno and a reason (EINVAL: a file that is not what the kernel
 * writes, named, its bytes quoted). */
int cg_limits_read(const char *root, struct cg_limits *l, char *why, size_t wsz);
/* The CPUs the limits allow (min of the quota's and the cpuset's), -1: no limit. */
long long cg_cpus(const struct cg_limits *l);

/* A VM's size fitted into the limits.  In: the size wanted, whether each
 * was given (an option, the configuration) or is the default, QEMU's
 * budget beyond guest RAM (lib/qjail.c qjail_mem_mib) and the smallest
 * guest RAM.  Out: the size applied, and which defaults were lowered. */
struct cg_fit {
	long long mem_mib, vcpus;
	int mem_given, vcpus_given;
	long long overhead_mib, min_mem_mib;
	long long base_mib; /* QEMU's fixed cost alone (overhead_mib less TCG's
			       translation buffer; 0: no such leeway) */
	int mem_reduced, vcpus_reduced;
	int vcpus_throttled; /* more vCPUs than a fractional CFS quota's CPUs
				(quota / period): each runs, throttled */
	int mem_tight;      /* a given size that fits with base_mib only */
	long long tb_mib;   /* then TCG's translation buffer to fit (MiB, at least 16) */
};

/* 0 with f's size fitted (a default lowered to fit: guest RAM + overhead
 * <= the memory limit, vCPUs <= cg_cpus, at least 1; a given --vcpus may
 * be up to the ceiling of a fractional CFS quota, vcpus_throttled set,
 * as is a default of 1 above a quota below 1 CPU); -1 with a reason
 * naming the limit, its cgroup and the size: EINVAL, a given size that
 * does not fit; ENOSPC, not even the smallest VM fits.  A given size that
 * fits with base_mib but not overhead_mib is kept, f->mem_tight set. */
int cg_fit_vm(const struct cg_limits *l, struct cg_fit *f, char *why, size_t wsz);
/* The value arg of the option opt (NULL: not given, 0) parsed into *out
 * within lo..hi, or -1 with the usage error a boot gives (EINVAL):
 * "OPT ARG: out of range LO..HI (why)". */
int range_check(const char *opt, const char *arg, long long lo, long long hi, const char *why,
		long long *out, char *msg, size_t msz);
/* The VM's size against the host, before its cgroups (cg_fit_vm): a given
 * --vcpus (vcpus, NULL: the default) at most the online CPUs, guest RAM
 * (mem, or the default already in *mem_mib) at most 75 % of MemAvailable
 * and 16 GiB (/proc/meminfo, or $ISOPOD_MEMINFO's file, for tests).
 * isopod-boot checks a boot's with it, isopod-pool a take's, which
 * hands over a running VM whose guest RAM the run's command may still
 * touch, as a booted one's.  0 with *vcpus, *mem_mib set; -1 with why:
 * EINVAL a value refused (a usage error, the text isopod-boot gives),
 * else /proc/meminfo unreadable. */
int host_fit_vm(const char *vcpus, const char *mem, long long *vcpus_out, long long *mem_mib,
		char *why, size_t wsz);
/* The result's "limits" (doc/INTERFACES.md): the limits read and the size applied. */
json_t *cg_limits_json(const struct cg_limits *l, const struct cg_fit *f);

#endif
