/* cgroup_test.c - lib/cgroup.c: the caller's cgroup limits read from fake
 * trees (v1 as on the test host, v2, a container's bind of its own cgroup),
 * "max", absent files, garbage; and a VM's size fitted into them. */
#include "../../lib/cgroup.c"

#include "faketree.h"
#include "tap.h"

#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

static char top[256];

static const char *fresh(const char *name)
{
	static char root[PATH_MAX];
	char cmd[PATH_MAX + 16];

	snprintf(root, sizeof root, "%s/%s", top, name);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return root;
	mkdir(root, 0755);
	return root;
}

#define V1_MOUNTS                                                                              \
	"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"                  \
	"32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n" \
	"34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"           \
	"35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"           \
	"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"               \
	"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"

static void test_v1(void)
{
	const char *r = fresh("v1");
	char why[1024] = "", want[PATH_MAX];
	struct cg_limits l;

	put_file(r, "proc/self/mountinfo", V1_MOUNTS);
	put_file(r, "proc/self/cgroup", "8:pids:/a/b\n4:memory:/a/b\n3:cpuset:/a/b\n"
		 "2:cpu,cpuacct:/a/b\n0::/\n");
	put_file(r, "sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
	put_file(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
	put_file(r, "sys/fs/cgroup/memory/a/memory.limit_in_bytes", "1073741824\n");
	put_file(r, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "2147483648\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_quota_us", "350000\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_quota_us", "250000\n");
	put_file(r, "sys/fs/cgroup/cpu,cpuacct/a/b/cpu.cfs_period_us", "100000\n");
	put_file(r, "sys/fs/cgroup/cpuset/a/b/cpuset.cpus", "0-7\n");
	put_file(r, "sys/fs/cgroup/cpuset/a/b/cpuset.effective_cpus", "0-3,6\n");
	put_file(r, "sys/fs/cgroup/pids/a/pids.max", "50\n");
	put_file(r, "sys/fs/cgroup/pids/a/b/pids.max", "max\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0, "v1: read (%s)", why);
	ok(l.version == 1, "v1: version 1 (memory is not bound to the v2 mount)");
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/memory/a", r);
	ok(l.mem.v == 1073741824 && !strcmp(l.mem.dir, want),
	   "v1: memory: the smallest on the path, the parent's 1 GiB (%lld, %s)", l.mem.v, l.mem.dir);
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/cpu,cpuacct/a/b", r);
	ok(l.cpu.v == 2 && l.quota_us == 250000 && l.period_us == 100000 && !strcmp(l.cpu.dir, want),
	   "v1: cpu: the smallest quota, 2.5 CPUs as 2, in a co-mounted cpu,cpuacct (%lld, %s)",
	   l.cpu.v, l.cpu.dir);
	ok(l.cpuset.v == 5, "v1: cpuset: effective_cpus 0-3,6 is 5 CPUs (%lld)", l.cpuset.v);
	ok(cg_cpus(&l) == 2, "v1: the CPUs allowed: min(quota's 2, cpuset's 5)");
	ok(l.pids.v == 50, "v1: pids: the parent's 50 below a \"max\" (%lld)", l.pids.v);
	ok(!l.warning[0], "v1: no warning");

	/* the memory root's "unlimited" (2^63 - 1 to a page) and no limit below */
	put_file(r, "sys/fs/cgroup/memory/a/memory.limit_in_bytes", "9223372036854710272\n");
	put_file(r, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == -1,
	   "v1: values of 2^62 and more are no limit (%lld)", l.mem.v);

	/* absent files: no limit, not an error */
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/cpuset/a/b/cpuset.effective_cpus", r);
	unlink(want);
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/pids/a/pids.max", r);
	unlink(want);
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.pids.v == -1 && l.cpuset.v == 8,
	   "v1: absent pids.max is no limit; absent effective_cpus falls back to cpuset.cpus (%lld, %lld)",
	   l.pids.v, l.cpuset.v);

	/* one reader of a number (rd_num): "max" is none in a *.max file (v1's
	 * pids.max above), garbage in v1's memory.limit_in_bytes */
	put_file(r, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "max\n");
	errno = 0;
	ok(cg_limits_read(r, &l, why, sizeof why) == -1 && errno == EINVAL &&
	   strstr(why, "memory.limit_in_bytes"), "v1: \"max\" in memory.limit_in_bytes is refused: %s", why);
	put_file(r, "sys/fs/cgroup/memory/a/b/memory.limit_in_bytes", "9223372036854771712\n");

	/* our cgroup's directory is not there: no limit, a warning */
	put_file(r, "proc/self/cgroup", "8:pids:/a/b\n4:memory:/gone\n3:cpuset:/a/b\n2:cpu,cpuacct:/a/b\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == -1 &&
	   strstr(l.warning, "memory") && strstr(l.warning, "/gone"),
	   "v1: a cgroup directory that is not there: no limit, a warning (%s)", l.warning);
}

static void test_v2(void)
{
	const char *r = fresh("v2");
	char why[1024] = "", want[PATH_MAX];
	struct cg_limits l;

	put_file(r, "proc/self/mountinfo",
		 "25 30 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
	put_file(r, "proc/self/cgroup", "0::/job_7/step_0/user/task_0\n");
	put_file(r, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
	put_file(r, "sys/fs/cgroup/job_7/memory.max", "1073741824\n");
	put_file(r, "sys/fs/cgroup/job_7/cpu.max", "max 100000\n");
	put_file(r, "sys/fs/cgroup/job_7/step_0/memory.max", "max\n");
	put_file(r, "sys/fs/cgroup/job_7/step_0/user/task_0/memory.max", "2147483648\n");
	put_file(r, "sys/fs/cgroup/job_7/step_0/user/task_0/cpu.max", "100000 100000\n");
	put_file(r, "sys/fs/cgroup/job_7/step_0/user/task_0/cpuset.cpus.effective", "2-3\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0, "v2: read (%s)", why);
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/job_7", r);
	ok(l.version == 2 && l.mem.v == 1073741824 && !strcmp(l.mem.dir, want),
	   "v2: the job's memory.max applies to its step's task (%lld, %s)", l.mem.v, l.mem.dir);
	ok(l.cpu.v == 1 && l.quota_us == 100000 && l.cpuset.v == 2 && cg_cpus(&l) == 1,
	   "v2: cpu.max 1 CPU, \"max\" above it; cpuset.cpus.effective 2 (%lld, %lld)", l.cpu.v,
	   l.cpuset.v);
	ok(l.pids.v == -1, "v2: no pids.max anywhere: no limit");

	/* the cpuset's effective list is ours, already within every
	 * ancestor's (not their minimum: a parent's 0-7 does not count) */
	put_file(r, "sys/fs/cgroup/job_7/cpuset.cpus.effective", "0-7\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.cpuset.v == 2,
	   "v2: cpuset.cpus.effective at our level, not a parent's larger one (%lld)", l.cpuset.v);
	/* cpuset not enabled below the job (its subtree_control): no file at
	 * our level, our tasks run on the job's CPUs */
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/job_7/step_0/user/task_0/cpuset.cpus.effective", r);
	unlink(want);
	put_file(r, "sys/fs/cgroup/job_7/cpuset.cpus.effective", "4-6\n");
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/job_7", r);
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.cpuset.v == 3 && !strcmp(l.cpuset.dir, want) &&
	   cg_cpus(&l) == 1,
	   "v2: no cpuset.cpus.effective at our level: the nearest ancestor's, 3 CPUs (%lld, %s)",
	   l.cpuset.v, l.cpuset.dir);
	put_file(r, "sys/fs/cgroup/job_7/step_0/user/task_0/cpuset.cpus.effective", "2-3\n");

	put_file(r, "sys/fs/cgroup/job_7/cpu.max", "50000 100000\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.cpu.v == 1 && l.quota_us == 50000,
	   "v2: half a CPU is 1 CPU, and is the smaller quota (%lld, %lld)", l.cpu.v, l.quota_us);

	/* a container's view: the mount is its own cgroup, named from the root */
	r = fresh("bind");
	put_file(r, "proc/self/mountinfo",
		 "40 31 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n");
	put_file(r, "proc/self/cgroup", "4:memory:/docker/abc\n");
	put_file(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 536870912 && !l.warning[0],
	   "a bind of the container's own cgroup: its limit (%lld; %s)", l.mem.v, l.warning);
}

/* Which mount: the one whose root shows our cgroup (mountinfo's 4th
 * field is our path or above it), not the first of its type. */
static void test_mounts(void)
{
	const char *r = fresh("mounts");
	char why[1024] = "", want[PATH_MAX], dir[PATH_MAX];
	struct cg_limits l;
	size_t mlen;

	/* a bind of another subtree mounted first, then the whole tree */
	put_file(r, "proc/self/mountinfo",
		 "50 30 0:23 /other /mnt/other rw - cgroup2 cgroup2 rw\n"
		 "51 30 0:23 /job_7 /mnt/job rw - cgroup2 cgroup2 rw\n"
		 "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(r, "proc/self/cgroup", "0::/job_7/step_0\n");
	put_file(r, "mnt/other/cgroup.controllers", "memory\n");
	put_file(r, "mnt/other/memory.max", "4096\n");
	put_file(r, "mnt/other/job_7/step_0/memory.max", "8192\n");
	put_file(r, "mnt/job/cgroup.controllers", "memory\n");
	put_file(r, "mnt/job/step_0/memory.max", "max\n");
	put_file(r, "sys/fs/cgroup/cgroup.controllers", "memory\n");
	put_file(r, "sys/fs/cgroup/memory.max", "max\n");
	put_file(r, "sys/fs/cgroup/job_7/memory.max", "1073741824\n");
	put_file(r, "sys/fs/cgroup/job_7/step_0/memory.max", "max\n");
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/job_7", r);
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 1073741824 &&
	   !strcmp(l.mem.dir, want) && !l.warning[0],
	   "mounts: a bind of another subtree (and a narrower one) mounted first is passed over: the "
	   "whole tree's (%lld, %s; %s)", l.mem.v, l.mem.dir, l.warning);
	snprintf(want, sizeof want, "%s/sys/fs/cgroup/job_7/step_0", r);
	ok(cg_dir(r, NULL, dir, sizeof dir, &mlen, why, sizeof why) == 0 && !strcmp(dir, want) &&
	   mlen == strlen(r) + strlen("/sys/fs/cgroup"), "mounts: cg_dir is the whole tree's (%s)", dir);

	/* only a bind of an ancestor: our path below its root */
	put_file(r, "proc/self/mountinfo",
		 "50 30 0:23 /other /mnt/other rw - cgroup2 cgroup2 rw\n"
		 "51 30 0:23 /job_7 /mnt/job rw - cgroup2 cgroup2 rw\n");
	put_file(r, "mnt/job/memory.max", "2147483648\n");
	snprintf(want, sizeof want, "%s/mnt/job", r);
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 2147483648LL &&
	   !strcmp(l.mem.dir, want) && !l.warning[0],
	   "mounts: a bind of our job's cgroup, another's first: our path below its root (%lld, %s; %s)",
	   l.mem.v, l.mem.dir, l.warning);

	/* no mount shows our cgroup: no limit known, a warning */
	put_file(r, "proc/self/mountinfo", "50 30 0:23 /other /mnt/other rw - cgroup2 cgroup2 rw\n"
		 "51 30 0:23 /job_77 /mnt/job rw - cgroup2 cgroup2 rw\n");
	errno = 0;
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == -1 && l.version == 0 &&
	   strstr(l.warning, "below no mount") && strstr(l.warning, "/job_7/step_0"),
	   "mounts: none shows our cgroup (/job_77 is not /job_7's): no limit known, a warning: %s",
	   l.warning);
	ok(cg_dir(r, NULL, dir, sizeof dir, &mlen, why, sizeof why) == -1 && errno == ENOTDIR,
	   "mounts: cg_dir: ENOTDIR (%s)", why);

	/* v1: the controller's mount that shows us */
	put_file(r, "proc/self/mountinfo",
		 "40 31 0:32 /docker/other /mnt/mem rw - cgroup cgroup rw,memory\n"
		 "41 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
	put_file(r, "proc/self/cgroup", "4:memory:/docker/abc\n");
	put_file(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
	put_file(r, "mnt/mem/memory.limit_in_bytes", "4096\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 536870912 && !l.warning[0],
	   "mounts: v1: another container's bind first is passed over (%lld; %s)", l.mem.v, l.warning);

	/* a mountinfo field longer than the parser's 1023 bytes: the line
	 * skipped, never read cut (the mount point's first 1023 bytes as
	 * another directory, the rest as the next field); the limit not
	 * known, a warning; with another mount that shows us, that one */
	{
		char mi[4096], lim[PATH_MAX + 1500];
		int n;

		n = snprintf(mi, sizeof mi, "25 30 0:23 / /mnt/");
		memset(mi + n, 'a', 1100);
		snprintf(mi + n + 1100, sizeof mi - n - 1100, " rw - cgroup2 cgroup2 rw\n");
		put_file(r, "proc/self/mountinfo", mi);
		put_file(r, "proc/self/cgroup", "0::/job_7\n");
		snprintf(lim, sizeof lim, "mnt/%.1023s/cgroup.controllers", mi + n);
		put_file(r, lim, "memory\n");
		snprintf(lim, sizeof lim, "mnt/%.1023s/job_7/memory.max", mi + n);
		put_file(r, lim, "4096\n");
		errno = 0;
		ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == -1 &&
		   strstr(l.warning, "longer than 1023 bytes") && strstr(l.warning, "/job_7"),
		   "mounts: a mountinfo field over 1023 bytes: the line skipped, no limit known, a "
		   "warning (%lld; %.200s)", l.mem.v, l.warning);
		ok(cg_dir(r, NULL, dir, sizeof dir, &mlen, why, sizeof why) == -1 && errno == E2BIG,
		   "mounts: cg_dir: E2BIG (%.200s)", why);
		snprintf(mi + n + 1100, sizeof mi - n - 1100, " rw - cgroup2 cgroup2 rw\n"
			 "26 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
		put_file(r, "proc/self/mountinfo", mi);
		ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 1073741824 && !l.warning[0],
		   "mounts: an over-long line, then a mount that shows us: that one's limit (%lld; %s)",
		   l.mem.v, l.warning);
	}

	/* a line longer than any fixed buffer: its tail, a directory name that
	 * reads "4:memory:/evil", is part of the line, never a line */
	{
		char cg[6000];
		int n = snprintf(cg, sizeof cg, "8:pids:/");

		memset(cg + n, 'a', 4100 - n);
		snprintf(cg + 4100, sizeof cg - 4100, "4:memory:/evil\n4:memory:/docker/abc\n");
		put_file(r, "proc/self/cgroup", cg);
		put_file(r, "proc/self/mountinfo",
			 "30 1 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n");
		ok(cg_dir(r, "memory", dir, sizeof dir, &mlen, why, sizeof why) == 0 &&
		   !strstr(dir, "evil") && strstr(dir, "/docker/abc"),
		   "cg_dir: a /proc/self/cgroup line past 4 KiB is read whole (%s; %s)", dir, why);
	}

	/* a path with ".." (a cgroup namespace over a bound host tree) */
	put_file(r, "proc/self/cgroup", "4:memory:/../../etc\n");
	errno = 0;
	ok(cg_dir(r, "memory", dir, sizeof dir, &mlen, why, sizeof why) == -1 && errno == EINVAL &&
	   strstr(why, "not a clean absolute path"), "cg_dir: a \"..\" path refused: %s", why);
}

/* Each garbage text in FILE (relative to the v2 tree) refused with EINVAL, naming it. */
static void garbage_in(const char *file, const char *const *texts, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *r = fresh("bad");
		char why[1024] = "";
		struct cg_limits l;
		int rc;

		put_file(r, "proc/self/mountinfo",
			 "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
		put_file(r, "proc/self/cgroup", "0::/j\n");
		put_file(r, "sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory pids\n");
		put_file(r, "sys/fs/cgroup/j/memory.max", "max\n");
		put_file(r, file, texts[i]);
		errno = 0;
		rc = cg_limits_read(r, &l, why, sizeof why);
		ok(rc == -1 && errno == EINVAL && strstr(why, strrchr(file, '/') + 1),
		   "garbage in %s (text %zu) refused, named: %s", file, i, why);
	}
}

static void test_garbage(void)
{
	static const char *const mem[] = { "12abc\n", "-5\n", "\n", "1 2\n", "1\n2\n",
					   "99999999999999999999\n", " 12\n", "0x10\n" };
	static const char *const cpu[] = { "100000\n", "100000 0\n", "0 100000\n", "max\n",
					   "1 2 3\n", "max max\n" };
	static const char *const cpuset[] = { "0-\n", "3-1\n", "0,,2\n", "a\n", "0,\n", "-1\n",
					      "0-99999999\n" };
	static const char *const pids[] = { "lots\n", "max \n" };
	const char *r;
	char why[1024] = "";
	struct cg_limits l;

	garbage_in("sys/fs/cgroup/j/memory.max", mem, sizeof mem / sizeof mem[0]);
	garbage_in("sys/fs/cgroup/j/cpu.max", cpu, sizeof cpu / sizeof cpu[0]);
	garbage_in("sys/fs/cgroup/j/cpuset.cpus.effective", cpuset, sizeof cpuset / sizeof cpuset[0]);
	garbage_in("sys/fs/cgroup/j/pids.max", pids, sizeof pids / sizeof pids[0]);

	r = fresh("dotdot");
	put_file(r, "proc/self/mountinfo", "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(r, "proc/self/cgroup", "0::/j/../../../etc\n");
	put_file(r, "sys/fs/cgroup/cgroup.controllers", "memory\n");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.version == 0 && l.mem.v == -1 &&
	   strstr(l.warning, "not a clean absolute path"),
	   "a cgroup path with \"..\" is no limit known, with a warning (never walked): %s", l.warning);
	r = fresh("bigcpuset");
	put_file(r, "proc/self/mountinfo", "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(r, "proc/self/cgroup", "0::/j\n");
	put_file(r, "sys/fs/cgroup/cgroup.controllers", "memory cpuset\n");
	put_file(r, "sys/fs/cgroup/j/memory.max", "1073741824\n");
	{
		char big[6000];
		size_t n = 0;

		for (int i = 0; n < sizeof big - 16; i += 2)
			n += (size_t)snprintf(big + n, sizeof big - n, "%d,", i);
		big[n - 1] = '\n';
		put_file(r, "sys/fs/cgroup/j/cpuset.cpus.effective", big);
	}
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 1073741824 && l.cpuset.v == -1,
	   "a cpuset list longer than a line we read (thousands of CPUs): not known, the rest read (%s)", why);

	r = fresh("none");
	ok(cg_limits_read(r, &l, why, sizeof why) == 0 && l.version == 0 && l.mem.v == -1 &&
	   l.cpu.v == -1 && l.cpuset.v == -1 && l.pids.v == -1 && cg_cpus(&l) == -1,
	   "no /proc/self/cgroup, no mounts: no limits, version 0");
}

static void test_fit(void)
{
	struct cg_limits l = { .version = 1, .mem.v = 1024LL << 20, .mem.dir = "/cg/job",
			       .cpu.v = 2, .cpu.dir = "/cg/cpu", .cpuset.v = -1, .pids.v = -1 };
	struct cg_fit f = { .mem_mib = 512, .vcpus = 1, .overhead_mib = 256, .min_mem_mib = 64 };
	char why[1024] = "";
	json_t *j;

	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.mem_mib == 512 && !f.mem_reduced,
	   "fit: 512 + 256 MiB fits 1 GiB as it is");
	f = (struct cg_fit){ .mem_mib = 512, .vcpus = 4, .overhead_mib = 256, .min_mem_mib = 64 };
	l.mem.v = 600LL << 20;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.mem_mib == 344 && f.mem_reduced &&
	   f.vcpus == 2 && f.vcpus_reduced,
	   "fit: the defaults lowered: 600 - 256 = 344 MiB, 2 vCPUs (%lld, %lld)", f.mem_mib, f.vcpus);
	j = cg_limits_json(&l, &f);
	ok(j && json_integer_value(json_object_get(j, "mem_mib")) == 344 &&
	   json_is_true(json_object_get(j, "mem_reduced")) &&
	   json_integer_value(json_object_get(j, "memory_bytes")) == 600LL << 20 &&
	   !strcmp(json_string_value(json_object_get(j, "memory_cgroup")), "/cg/job") &&
	   json_is_null(json_object_get(j, "pids")) && json_is_null(json_object_get(j, "pids_cgroup")) &&
	   json_integer_value(json_object_get(j, "qemu_overhead_mib")) == 256,
	   "limits JSON: the size applied, the limit and its cgroup, null for none");
	json_decref(j);
	f = (struct cg_fit){ .mem_mib = 512, .vcpus = 1, .mem_given = 1, .overhead_mib = 256,
			     .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == EINVAL && strstr(why, "/cg/job") &&
	   strstr(why, "--mem-mib 512") && strstr(why, "600 MiB") && strstr(why, "at most --mem-mib 344"),
	   "fit: a given size that does not fit is refused: %s", why);
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 3, .vcpus_given = 1, .overhead_mib = 256,
			     .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == EINVAL && strstr(why, "/cg/cpu") &&
	   strstr(why, "--vcpus 3"), "fit: --vcpus beyond the quota is refused: %s", why);
	/* a fractional quota, 1.5 CPUs: a given 2 runs throttled, 3 does not;
	 * the default is the whole CPUs, 1 */
	l.cpu.v = 1, l.quota_us = 150000, l.period_us = 100000;
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 2, .vcpus_given = 1, .overhead_mib = 256,
			     .min_mem_mib = 64 };
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.vcpus == 2 && f.vcpus_throttled &&
	   !f.vcpus_reduced, "fit: --vcpus 2 in a quota of 1.5 CPUs runs, throttled");
	j = cg_limits_json(&l, &f);
	ok(j && json_is_true(json_object_get(j, "vcpus_throttled")), "limits JSON: vcpus_throttled");
	json_decref(j);
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 3, .vcpus_given = 1, .overhead_mib = 256,
			     .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == EINVAL && strstr(why, "--vcpus 3") &&
	   strstr(why, "1.50 CPUs (CFS quota of /cg/cpu)") && strstr(why, "at most --vcpus 2"),
	   "fit: --vcpus 3 in a quota of 1.5 CPUs is refused: %s", why);
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 4, .overhead_mib = 256, .min_mem_mib = 64 };
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.vcpus == 1 && f.vcpus_reduced && !f.vcpus_throttled,
	   "fit: the default in a quota of 1.5 CPUs is 1, not throttled (%lld)", f.vcpus);
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 2, .vcpus_given = 1, .overhead_mib = 256,
			     .min_mem_mib = 64 };
	l.cpuset.v = 1, snprintf(l.cpuset.dir, sizeof l.cpuset.dir, "/cg/set");
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == EINVAL && strstr(why, "1 CPUs (cpuset of /cg/set)"),
	   "fit: --vcpus 2 in a quota of 1.5 CPUs and a cpuset of 1: the cpuset's whole CPUs: %s", why);
	l.cpuset.v = -1, l.quota_us = 50000;
	f = (struct cg_fit){ .mem_mib = 64, .vcpus = 4, .overhead_mib = 256, .min_mem_mib = 64 };
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.vcpus == 1 && f.vcpus_throttled,
	   "fit: the default in a quota of half a CPU is 1, throttled");
	l.cpu.v = 2, l.quota_us = l.period_us = -1;

	/* TCG: 1280 MiB for QEMU at most, 256 fixed; 600 MiB of limit */
	f = (struct cg_fit){ .mem_mib = 320, .vcpus = 1, .mem_given = 1, .overhead_mib = 1280,
			     .base_mib = 256, .min_mem_mib = 64 };
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.mem_mib == 320 && f.mem_tight && !f.mem_reduced &&
	   f.tb_mib == 24,
	   "fit: a given 320 + 256 fixed in 600 MiB under TCG: kept, tight");
	f = (struct cg_fit){ .mem_mib = 345, .vcpus = 1, .mem_given = 1, .overhead_mib = 1280,
			     .base_mib = 256, .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == EINVAL && !f.mem_tight,
	   "fit: a given 345 + 256 fixed in 600 MiB: refused: %s", why);
	f = (struct cg_fit){ .mem_mib = 512, .vcpus = 1, .overhead_mib = 1280, .base_mib = 256,
			     .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == ENOSPC && !f.mem_tight &&
	   strstr(why, "a given --mem-mib up to 344 runs"),
	   "fit: a default under TCG gets no leeway: %s", why);
	l.mem.v = 300LL << 20;
	f = (struct cg_fit){ .mem_mib = 512, .vcpus = 1, .overhead_mib = 256, .min_mem_mib = 64 };
	errno = 0;
	ok(cg_fit_vm(&l, &f, why, sizeof why) == -1 && errno == ENOSPC && strstr(why, "smallest"),
	   "fit: not even 64 + 256 MiB in 300 MiB: %s", why);
	l = (struct cg_limits){ .mem.v = -1, .cpu.v = -1, .cpuset.v = 1, .pids.v = -1 };
	f = (struct cg_fit){ .mem_mib = 4096, .vcpus = 2, .overhead_mib = 1280, .min_mem_mib = 64 };
	ok(cg_fit_vm(&l, &f, why, sizeof why) == 0 && f.mem_mib == 4096 && f.vcpus == 1,
	   "fit: no memory limit, a cpuset of 1: 1 vCPU (%lld)", f.vcpus);
}

/* The limits read /proc/self/cgroup and /proc/self/mountinfo once, not
 * once per controller and hierarchy: here both are FIFOs a writer fills
 * once each, and a second open would wait for a writer that never comes
 * (the reader is under alarm(10): the test fails, not hangs). */
static void test_once(void)
{
	static const char cgroup[] = "8:pids:/a/b\n4:memory:/a/b\n3:cpuset:/a/b\n2:cpu,cpuacct:/a/b\n0::/\n";
	const char *r = fresh("once");
	char p[PATH_MAX], why[1024] = "";
	int st = -1, wst = -1;
	pid_t rd, wr;

	put_file(r, "proc/self/x", "");
	put_file(r, "sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n");
	put_file(r, "sys/fs/cgroup/memory/a/memory.limit_in_bytes", "1073741824\n");
	put_file(r, "sys/fs/cgroup/memory/a/b", NULL);
	put_file(r, "sys/fs/cgroup/pids/a/b/pids.max", "40\n");
	snprintf(p, sizeof p, "%s/proc/self/cgroup", r);
	mkfifo(p, 0600);
	snprintf(p, sizeof p, "%s/proc/self/mountinfo", r);
	mkfifo(p, 0600);
	if ((wr = fork()) == 0) {
		static const char *const leaf[] = { "cgroup", "mountinfo" };
		static const char *const text[] = { cgroup, V1_MOUNTS };
		int fd;

		alarm(10);
		for (int i = 0; i < 2; i++) {
			snprintf(p, sizeof p, "%s/proc/self/%s", r, leaf[i]);
			if ((fd = open(p, O_WRONLY)) < 0 || write(fd, text[i], strlen(text[i])) < 0)
				_exit(1);
			close(fd);
		}
		_exit(0);
	}
	if ((rd = fork()) == 0) {
		struct cg_limits l;

		alarm(10);
		_exit(cg_limits_read(r, &l, why, sizeof why) == 0 && l.mem.v == 1073741824 &&
		      l.pids.v == 40 ? 0 : 1);
	}
	if (rd > 0)
		waitpid(rd, &st, 0);
	if (wr > 0)
		waitpid(wr, &wst, 0);
	ok(rd > 0 && wr > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && WIFEXITED(wst) &&
	   WEXITSTATUS(wst) == 0, "cg_limits_read: /proc/self/cgroup and mountinfo read once each, "
	   "the limits from them (reader %#x, writer %#x)", st, wst);
}

int main(void)
{
	char cmd[PATH_MAX + 16];

	snprintf(top, sizeof top, "/tmp/isopod-cgroup-test.XXXXXX");
	if (!mkdtemp(top))
		return 1;
	test_v1();
	test_v2();
	test_mounts();
	test_garbage();
	test_fit();
	test_once();
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
	if (system(cmd) != 0)
		ok(0, "remove %s", top);
	return tap_done();
}
