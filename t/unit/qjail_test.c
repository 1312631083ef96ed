/* qjail_test.c - lib/qjail.c: sysctl_value, what qjail_give compares
 * fs.protected_hardlinks with before it hands a VM directory to the jail;
 * and lib/jail.c's cgroups (cg_setup) made below a fake tree's. */
/* qjail.c and jail.c each have a static fail(); this program includes both */
#define fail qjail_fail
#include "../../lib/qjail.c" /* self-contained: t/run-unit links frame+util only */
#undef fail
#include "../../lib/config.c"
#include "../../lib/image.c"
#include "../../lib/cgroup.c"
#include "../../lib/jail.c"
#include "../../lib/jaildeps.c"
#include "../../lib/jailchild.c"
#include "../../lib/proc.c"
#include "../../lib/qemu.c"
#include "../../lib/ranges.c"
#include "../../lib/taphold.c"
#include "../../lib/vm.c"

#include "faketree.h"
#include "tap.h"

static void test_sysctl(const char *dir)
{
	static const char *const text[] = { "1\n", "0\n", "", "x\n", "12" };
	static const long want[] = { 1, 0, -1, -1, 12 };
	char p[PATH_MAX];

	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		FILE *f;

		snprintf(p, sizeof p, "%s/sysctl-%zu", dir, i);
		f = fopen(p, "w");
		if (f) {
			fputs(text[i], f);
			fclose(f);
		}
		ok(sysctl_value(p) == want[i], "sysctl_value of text %zu: %ld", i, want[i]);
		unlink(p);
	}
	snprintf(p, sizeof p, "%s/no-such-sysctl", dir);
	ok(sysctl_value(p) == -1, "sysctl_value of a missing file: -1");
	ok(sysctl_value("/proc/sys/fs/protected_hardlinks") == 1,
	   "this host protects hard links (the jail's handover needs it)");
}

/* jail_deps: what the jail binds for a program (ldd): every path of a
 * dynamic one, nothing for a static one, and an error, never a partial or
 * empty list, when ldd fails. */
static void test_deps(void)
{
	char *out[256], err[512];
	size_t n = 0, i;
	int r, libc = 0;

	r = jail_deps("/bin/sh", out, &n, 256, err, sizeof err);
	for (i = 0; i < n; i++) {
		libc |= strstr(out[i], "libc.so") != NULL;
		free(out[i]);
	}
	ok(r == 0 && n >= 2 && libc, "deps of /bin/sh: %zu paths, libc among them", n);
	n = 0;
	r = jail_deps("agent/isopod-agent", out, &n, 256, err, sizeof err);
	ok(access("agent/isopod-agent", X_OK) != 0 || (r == 0 && n == 0),
	   "deps of the static agent: none (%d, %zu)", r, n);
	n = 0;
	r = jail_deps("/nonexistent/prog", out, &n, 256, err, sizeof err);
	ok(r < 0 && n == 0, "deps of a missing program: an error, no list (%s)", err);
}

/* img_write: the file qemu-img writes is handed over only when it has one
 * name (a second link would keep the inode in the jail's reach); the
 * refused file keeps its owner and mode. */
static void test_img_write(const char *dir)
{
	char p[PATH_MAX], l[PATH_MAX], err[512] = "";
	struct qimg qi = { .wfd = -1 };
	struct stat st;
	int fd, r;

	snprintf(p, sizeof p, "%s/disk.qcow2", dir);
	snprintf(l, sizeof l, "%s/link", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	ok(link(p, l) == 0, "a second link to the disk");
	r = img_write(&qi, p, err, sizeof err);
	ok(r < 0 && qi.wfd < 0 && strstr(err, "more than one link"),
	   "img_write refuses a file with 2 links (%s)", err);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "its mode kept: %o",
	   (unsigned)(st.st_mode & 07777));
	unlink(l);
	r = img_write(&qi, p, err, sizeof err);
	ok(r == 0 && qi.wfd >= 0, "the control: one link, handed over (%d)", r);
	img_giveback(&qi);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "and given back 0600");
	unlink(p);
}

/* The deadline of a qemu-img (here unjailed: the same wait): killed at
 * it, reaped, an error; captured output read only until then. */
static void test_deadline(void)
{
	char *slow[] = { "sleep", "30", NULL }, *quick[] = { "true", "info", NULL };
	char err[512] = "", buf[64];
	int64_t t0;
	int r;

	setenv("ISOPOD_JAIL", "0", 1);
	t0 = mono_ms();
	r = qjail_img(&(struct qimg_req){ .av = slow, .outfd = PROC_NULL, .errfd = PROC_INHERIT,
					  .timeout_ms = 300 }, err, sizeof err);
	ok(r == -1 && errno == ETIMEDOUT && strstr(err, "deadline") && mono_ms() - t0 < 5000,
	   "a qemu-img past its deadline is killed: %d, %s, %lld ms", r, err,
	   (long long)(mono_ms() - t0));
	t0 = mono_ms();
	r = qjail_img_capture(&(struct qimg_req){ .av = slow, .errfd = PROC_INHERIT,
						  .timeout_ms = 300 }, buf, sizeof buf, err, sizeof err);
	ok(r == -1 && mono_ms() - t0 < 5000, "and captured, too: %d, %lld ms", r,
	   (long long)(mono_ms() - t0));
	r = qjail_img(&(struct qimg_req){ .av = quick, .outfd = PROC_NULL, .errfd = PROC_INHERIT,
					  .timeout_ms = 300 }, err, sizeof err);
	ok(r == 0, "the control: one that ends in time: 0 (%d)", r);
	unsetenv("ISOPOD_JAIL");
}

static int has_ro(const struct qjail *qj, const char *p)
{
	for (size_t i = 0; i < qj->nro; i++)
		if (!strcmp(qj->ro[i], p))
			return 1;
	return 0;
}

/* The warm template's plan: its disk lies over a VM's disk, not over a
 * stage layer, so qjail_plan refuses it; qjail_plan_over binds the VM's
 * disk and that disk's chain (the store's base), and the template's disk
 * is its directory's (read-write), never bound read-only. */
static void test_plan_over(const char *dir)
{
	char home[1024], vdir[2048], tdir[2048], base[PATH_MAX], vdisk[PATH_MAX], tdisk[PATH_MAX];
	char cmd[5 * PATH_MAX], err[1024] = "";
	char *av[] = { "qemu-system-x86_64", "-m", "256", "-smp", "1", "-accel", "tcg", "-kernel",
		       "/bin/true", "-initrd", "/bin/false", NULL };
	struct qjail qj;
	int r, fd;

	/* qjail_plan finds QEMU in PATH and the disks are qemu-img's: the
	 * self-build (t/35) runs these tests in a guest that has neither */
	if (system("command -v qemu-img >/dev/null && command -v qemu-system-x86_64 >/dev/null") != 0) {
		printf("# test_plan_over: qemu-img or qemu-system-x86_64 not in PATH: skipped\n");
		return;
	}
	snprintf(home, sizeof home, "%s/store", dir);
	setenv("ISOPOD_HOME", home, 1);
	snprintf(base, sizeof base, "%s/images", home);
	snprintf(vdir, sizeof vdir, "%s/vms/vm-1", home);
	snprintf(tdir, sizeof tdir, "%s/warm/.staging-t", home);
	snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' '%s'", base, vdir, tdir);
	ok(system(cmd) == 0, "a store with a VM directory and a staging directory");
	snprintf(base, sizeof base, "%s/images/base-%064d.img", home, 0);
	if ((fd = open(base, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) >= 0) {
		ok(ftruncate(fd, 1 << 20) == 0, "a raw base image");
		close(fd);
	}
	snprintf(vdisk, sizeof vdisk, "%s/disk.qcow2", vdir);
	snprintf(tdisk, sizeof tdisk, "%s/disk.qcow2", tdir);
	snprintf(cmd, sizeof cmd, "qemu-img create -q -f qcow2 -F raw -b '%s' '%s' 1M && "
		 "qemu-img create -q -f qcow2 -F qcow2 -b '%s' '%s' 1M", base, vdisk, vdisk, tdisk);
	ok(system(cmd) == 0, "a VM's disk over the base, a template's over the VM's");
	r = qjail_plan(&qj, "tpl-x", tdir, av, err, sizeof err);
	ok(r < 0 && strstr(err, "not a chain of stage layers"),
	   "qjail_plan refuses the template's disk (%s)", err);
	qjail_free(&qj);
	r = qjail_plan_over(&qj, "tpl-x", tdir, vdisk, av, err, sizeof err);
	ok(r == 0 && has_ro(&qj, vdisk) && has_ro(&qj, base) && !has_ro(&qj, tdisk) &&
	   !strcmp(qj.js.vm_dir, tdir) && !strcmp(qj.js.name, "tpl-x"),
	   "qjail_plan_over binds the VM's disk and the base, not the template's disk (%s)", err);
	ok(geteuid() != 0 || qj.js.uid >= JAIL_UID_BASE, "as root, the template's own identity (%u)",
	   (unsigned)qj.js.uid);
	ok(!qj.js.kvm, "-accel tcg: no /dev/kvm in the jail");
	qjail_free(&qj);
	/* a cgroup's limit caps TCG's buffer (lib/cgroup.c): still TCG */
	av[6] = "tcg,tb-size=88";
	r = qjail_plan_over(&qj, "tpl-x", tdir, vdisk, av, err, sizeof err);
	ok(r == 0 && !qj.js.kvm, "-accel tcg,tb-size=88: TCG, no /dev/kvm in the jail (%s)", err);
	qjail_free(&qj);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
	ok(system(cmd) == 0, "cleaned up");
	unsetenv("ISOPOD_HOME");
}

/* The cgroups named by their maker's pid: qemu-img's caller's and isopod
 * doctor's check's (one rule in isopod-gc); any other name has none. */
static void test_img_owner(void)
{
	ok(qjail_img_owner(QJAIL_IMG_NAME "1234") == 1234, "img-<pid>: its caller's pid");
	ok(qjail_img_owner(JAIL_CG_CHECK_NAME "4321") == 4321, "doctor-<pid>: the doctor's pid");
	ok(qjail_img_owner(JAIL_CG_CHECK_NAME "x1") == 0 && qjail_img_owner(JAIL_CG_CHECK_NAME "0") == 0,
	   "doctor- with no pid: none");
	ok(qjail_img_owner("vm-123456789abc") == 0 && qjail_img_owner("tpl-1") == 0,
	   "a VM's, a template's: none");
}

struct found {
	char path[PATH_MAX];
	int n;
};

static int found_t(const char *dir, const char *name, const struct stat *st, void *arg)
{
	struct found *f = arg;

	(void)st;
	if (!strcmp(name, "t")) {
		snprintf(f->path, sizeof f->path, "%s", dir);
		f->n++;
	}
	return 0;
}

/* gc's walk (cg_each_at) finds the jail's cgroups where the jail makes
 * them: below the mount cg_dir places ours under (cg_setup's), not the
 * first of its type (a bind of another subtree, mounted first, holding a
 * decoy of the name).  The fake tree's limit files cannot be written
 * (put() does not create them), so the jail's cgroup is planted where
 * cg_dir says cg_setup would make it. */
static void test_jail_cg_walk(const char *dir)
{
	struct found f = { .n = 0 };
	char root[PATH_MAX], ours[PATH_MAX], want[PATH_MAX + 64], why[PATH_MAX + 128];
	size_t ml;

	snprintf(root, sizeof root, "%s/cg-walk", dir);
	mkdir(root, 0755);
	put_file(root, "proc/self/mountinfo",
		 "24 30 0:23 /other /run/other rw - cgroup2 cgroup2 rw\n"
		 "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(root, "proc/self/cgroup", "0::/svc\n");
	put_file(root, "run/other/" JAIL_CG_PREFIX "t/cgroup.procs", "");
	if (cg_dir(root, NULL, ours, sizeof ours, &ml, why, sizeof why) < 0) {
		ok(0, "cg_dir places us in the fake tree (%s)", why);
		return;
	}
	snprintf(want, sizeof want, "%s/" JAIL_CG_PREFIX "t", ours);
	put_file(root, want + strlen(root) + 1, "");
	unlink(want);
	mkdir(want, 0755);
	cg_each_at(root, found_t, &f);
	ok(f.n == 1 && !strcmp(f.path, want),
	   "gc's walk finds the jail's cgroup where the jail makes it (%d: %s), not in the first "
	   "mount's (a bind of another subtree)", f.n, f.path);
}

/* The jail's cgroups on fake trees: what cg_setup makes, writes, warns. */
static void test_jail_cg(const char *dir)
{
	struct jail_spec js = { .name = "t", .mem_bytes = 1 << 20, .pids = 10 };
	struct jail j = { .pid = -1 };
	char root[PATH_MAX], p[PATH_MAX + 64];
	json_t *cg = json_object(), *w = json_array(), *v;
	size_t i, clean = 0;
	struct stat st;

	/* under a cgroup namespace over a bound host tree our path is
	 * "/../..": never placed (cg_dir's path check), as cgroup.c's limits
	 * are not; what it would name (the fake root's sys/) holds a
	 * subtree_control that would take a child */
	snprintf(root, sizeof root, "%s/cg-dotdot", dir);
	mkdir(root, 0755);
	put_file(root, "proc/self/mountinfo", "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(root, "proc/self/cgroup", "0::/../..\n");
	put_file(root, "sys/fs/cgroup/cgroup.controllers", "memory pids\n");
	put_file(root, "sys/cgroup.subtree_control", "memory pids\n");
	cg_setup(root, &js, &j, cg, w);
	json_array_foreach(w, i, v)
		clean += json_is_string(v) && strstr(json_string_value(v), "not a clean absolute path") &&
			 !strstr(json_string_value(v), JAIL_CG_PREFIX "t");
	snprintf(p, sizeof p, "%s/sys/" JAIL_CG_PREFIX "t", root);
	ok(j.ncg == 0 && json_array_size(w) == 2 && clean == 2 && lstat(p, &st) < 0,
	   "jail cgroups: our path \"/../..\" is refused (cg_dir's check), nothing made outside the "
	   "hierarchy, a warning for each limit (%zu of %zu: %s)", clean, json_array_size(w),
	   json_string_value(json_array_get(w, 0)));
	jail_release(&j, p, sizeof p);
	json_decref(cg);
	json_decref(w);

	/* the host's root cgroup (no cgroup.type): its subtree_control is
	 * not written (a host-wide change); a warning, no per-VM limits */
	for (int top = 1; top >= 0; top--) {
		char sc[PATH_MAX + 64], text[64] = "";
		FILE *f;

		snprintf(root, sizeof root, "%s/cg-%s", dir, top ? "root" : "svc");
		mkdir(root, 0755);
		put_file(root, "proc/self/mountinfo", "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
		put_file(root, "proc/self/cgroup", top ? "0::/\n" : "0::/svc\n");
		put_file(root, "sys/fs/cgroup/cgroup.controllers", "memory pids\n");
		put_file(root, top ? "sys/fs/cgroup/cgroup.subtree_control" : "sys/fs/cgroup/svc/cgroup.subtree_control", "");
		if (!top)
			put_file(root, "sys/fs/cgroup/svc/cgroup.type", "domain\n");
		cg = json_object();
		w = json_array();
		cg_setup(root, &js, &j, cg, w);
		snprintf(sc, sizeof sc, "%s/sys/fs/cgroup%s/cgroup.subtree_control", root, top ? "" : "/svc");
		if ((f = fopen(sc, "re"))) {
			if (!fgets(text, sizeof text, f))
				text[0] = '\0';
			fclose(f);
		}
		if (top)
			ok(j.ncg == 0 && !text[0] && json_array_size(w) == 2 &&
			   strstr(json_string_value(json_array_get(w, 0)), "host's root cgroup") &&
			   strstr(json_string_value(json_array_get(w, 0)), "host-wide change"),
			   "jail cgroups: in the host's root cgroup, its subtree_control is not written, a "
			   "warning (\"%s\"; %s)", text, json_string_value(json_array_get(w, 0)));
		else /* the control: a cgroup of ours below it is written */
			ok(!strcmp(text, "+memory +pids"),
			   "jail cgroups: below the root (cgroup.type there), controllers enabled in our "
			   "subtree_control (\"%s\")", text);
		jail_release(&j, p, sizeof p);
		json_decref(cg);
		json_decref(w);
	}

	/* our cgroup's directory is not there (removed under us): it has no
	 * cgroup.type either, but is not the host's root; the warning says so */
	snprintf(root, sizeof root, "%s/cg-gone", dir);
	mkdir(root, 0755);
	put_file(root, "proc/self/mountinfo", "25 30 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
	put_file(root, "proc/self/cgroup", "0::/gone\n");
	put_file(root, "sys/fs/cgroup/cgroup.controllers", "memory pids\n");
	put_file(root, "sys/fs/cgroup/cgroup.subtree_control", "");
	cg = json_object();
	w = json_array();
	cg_setup(root, &js, &j, cg, w);
	v = json_array_get(w, 0);
	ok(j.ncg == 0 && json_array_size(w) == 2 && json_is_string(v) &&
	   strstr(json_string_value(v), "/sys/fs/cgroup/gone is not there") &&
	   !strstr(json_string_value(v), "root cgroup"),
	   "jail cgroups: our cgroup's directory gone: the warning says it is not there, not the "
	   "host's root (%s)", json_string_value(v));
	jail_release(&j, p, sizeof p);
	json_decref(cg);
	json_decref(w);
}

int main(void)
{
	char dir[] = "/tmp/isopod-qjail-test.XXXXXX", cmd[64];

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_sysctl(dir);
	test_deps();
	test_img_write(dir);
	test_deadline();
	test_plan_over(dir);
	test_img_owner();
	test_jail_cg(dir);
	test_jail_cg_walk(dir);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		ok(0, "remove %s", dir);
	return tap_done();
}
