/* qemu_test.c - the one QEMU command-line builder (lib/qemu.c): golden
 * command lines per mode.  The goldens were printed by the builder as it
 * was in bin/isopod-boot.c before it moved: a change here changes every
 * warm key, and it must be on purpose. */
#include "../../lib/proc.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/qemu.c"

#include "tap.h"

#define VM "/store/vms/vm-0123456789ab"
#define TAP "isopod-tap3"
#define MAC "02:69:73:00:00:03"
/* A VM's files; FILES's kernel takes lapic_timer_khz= (its record lists
 * the patch), OLDKERNEL's predates the patch. */
#define OLDKERNEL .vmlinux = "/store/kernels/K/vmlinux", .initrd = "/store/kernels/K/initramfs.cpio", \
	      .disk = VM "/disk.qcow2", .agent_sock = VM "/agent.sock", \
	      .qmp_sock = VM "/qmp.sock"
#define FILES OLDKERNEL, .lapic_khz = 1

/* The command line, one argument per line. */
static const char *joined(const struct qemu_argv *q)
{
	static char buf[8192];
	size_t n = 0;

	buf[0] = 0;
	for (char *const *a = q->av; *a && n < sizeof buf; a++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "%s\n", *a);
	return buf;
}

static int same(const struct qemu_cfg *c, const char *want)
{
	struct qemu_argv q;
	const char *got;

	if (qemu_argv(&q, c) < 0)
		return 0;
	got = joined(&q);
	if (strcmp(got, want))
		printf("# got:\n%s# want:\n%s", got, want);
	return !strcmp(got, want);
}

static int has(const struct qemu_cfg *c, const char *arg)
{
	struct qemu_argv q;

	if (qemu_argv(&q, c) < 0)
		return -1;
	for (char *const *a = q.av; *a; a++)
		if (!strcmp(*a, arg))
			return 1;
	return 0;
}

/* last_line on what a jail could plant as console.log: a FIFO (without
 * O_NONBLOCK the open blocks: ok_bounded fails the test) and a hard link. */
static void test_last_line(void)
{
	char d[] = "/tmp/qemu_test.XXXXXX", p[64], q[64], out[128];
	int fd;

	if (!mkdtemp(d))
		return;
	snprintf(p, sizeof p, "%s/console.log", d);
	snprintf(q, sizeof q, "%s/other", d);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	ok(fd >= 0 && write(fd, "boot\nlast words\n", 16) == 16, "a console log written");
	close(fd);
	ok(!strcmp(last_line(p, out, sizeof out), "last words"), "its last line: %s", out);
	ok(link(p, q) == 0 && !strcmp(last_line(p, out, sizeof out), ""),
	   "a hard-linked log reads as empty: %s", out);
	unlink(p);
	unlink(q);
	ok_bounded(10, mkfifo(p, 0600) == 0 && !strcmp(last_line(p, out, sizeof out), ""),
		   "a FIFO in its place neither blocks nor reads");
	unlink(p);
	rmdir(d);
}

/* qemu_clone_env: only a clone's command line (its RAM QEMU_CLONE_MEM)
 * gets the preload library, and none when the library is missing. */
static void test_clone_env(void)
{
	const struct qemu_cfg tpl = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
				      .memfile = VM "/mem", .share = 1 };
	const struct qemu_cfg near = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
				       .memfile = QEMU_CLONE_MEM "0", .incoming = 1 };
	const struct qemu_cfg clone = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
					.memfile = QEMU_CLONE_MEM, .incoming = 1 };
	struct qemu_argv q;
	char buf[PATH_MAX + 16], so[PATH_MAX], want[PATH_MAX + 16], why[PATH_MAX + 128];
	int fd, r;

	proc_sibling(so, sizeof so, QEMU_MEMRO_SO, NULL);
	snprintf(want, sizeof want, "LD_PRELOAD=%s", so);
	ok(qemu_argv(&q, &tpl) == 0 && qemu_clone_env(q.av, buf, sizeof buf, why, sizeof why) == 0,
	   "a template's command line: no preload");
	ok(qemu_argv(&q, &near) == 0 && qemu_clone_env(q.av, buf, sizeof buf, why, sizeof why) == 0,
	   "RAM at %s0: no preload", QEMU_CLONE_MEM);
	unlink(so);
	errno = 0;
	ok(qemu_argv(&q, &clone) == 0 && qemu_clone_env(q.av, buf, sizeof buf, why, sizeof why) == -1 &&
	   errno == ENOENT && strstr(why, QEMU_MEMRO_SO), "a clone's, the library missing: ENOENT (%s)", why);
	fd = open(so, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	r = fd >= 0 ? qemu_clone_env(q.av, buf, sizeof buf, why, sizeof why) : -2;
	ok(r == 1 && !strcmp(buf, want) && !strcmp(QEMU_CLONE_ENV_PATH(buf), so),
	   "a clone's: %s", r == 1 ? buf : "(none)");
	if (fd >= 0) {
		close(fd);
		unlink(so);
	}
}

/* qemu_memro_ok: a path ld.so would split, a file another could write or
 * that is not ours or root's, is refused. */
static void test_memro_ok(void)
{
	char dir[] = "/tmp/qemu_test.XXXXXX", p[PATH_MAX], why[PATH_MAX + 128];
	const char *bad[] = { "a b.so", "a:b.so", "a\tb.so" };
	int fd;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, bad[i]);
		fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		errno = 0;
		ok(fd >= 0 && qemu_memro_ok(p, why, sizeof why) == -1 && errno == EINVAL,
		   "split by ld.so: %s", why);
		if (fd >= 0)
			close(fd);
		unlink(p);
	}
	ok(qemu_memro_ok("isopod-memro.so", why, sizeof why) == -1 && errno == EINVAL,
	   "relative: %s", why);
	snprintf(p, sizeof p, "%s/m.so", dir);
	ok(qemu_memro_ok(p, why, sizeof why) == -1 && errno == ENOENT, "missing: %s", why);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	ok(fd >= 0 && qemu_memro_ok(p, why, sizeof why) == 0, "ours, 0644: fit");
	ok(fchmod(fd, 0664) == 0 && qemu_memro_ok(p, why, sizeof why) == -1 && errno == EPERM,
	   "group-writable: %s", why);
	ok(fchmod(fd, 0646) == 0 && qemu_memro_ok(p, why, sizeof why) == -1 && errno == EPERM,
	   "other-writable: %s", why);
	if (geteuid() == 0) {
		ok(fchmod(fd, 0644) == 0 && fchown(fd, 65534, 65534) == 0 &&
		   qemu_memro_ok(p, why, sizeof why) == -1 && errno == EPERM, "another's: %s", why);
	}
	close(fd);
	unlink(p);
	rmdir(dir);
}

int main(void)
{
	char fp[65], longp[PATH_MAX + 16];
	struct qemu_argv q;

	{
		const struct qemu_cfg c = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off,pit=on\n"
	"-accel\n"
	"tcg\n"
	"-cpu\n"
	"max,erms=off,fsrm=off\n"
	"-m\n"
	"512\n"
	"-smp\n"
	"1\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"),
		   "the base line (TCG, no NIC, root_rw off: what a template's boot gets, less its memory file)");
	}

	{
		/* a cold run's boot (isopod-boot's boot_cold): the base line
		 * with isopod.root_rw=1 last on the kernel's line */
		const struct qemu_cfg c = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES, .root_rw = 1 };

		ok(qemu_argv(&q, &c) == 0 &&
		   strstr(joined(&q), "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				      "tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000 "
				      "isopod.root_rw=1\n-add-fd\n"),
		   "cold, TCG, no NIC (--net none): isopod.root_rw=1 on the kernel's line");
	}

	{
		/* root_rw with a memory file or -incoming (a template's or a
		 * clone's line): refused, their root stays read-only */
		const struct qemu_cfg tpl = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
					      .memfile = VM "/mem", .share = 1, .root_rw = 1 };
		const struct qemu_cfg clone = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
						.memfile = QEMU_CLONE_MEM, .incoming = 1, .root_rw = 1 };
		const struct qemu_cfg inc = { .accel = "tcg", .mem_mib = 64, .vcpus = 1, FILES,
					      .incoming = 1, .root_rw = 1 };

		errno = 0;
		ok(qemu_argv(&q, &tpl) == -1 && errno == EINVAL, "root_rw with a memory file (a template): EINVAL");
		errno = 0;
		ok(qemu_argv(&q, &clone) == -1 && errno == EINVAL, "root_rw on a clone's line: EINVAL");
		errno = 0;
		ok(qemu_argv(&q, &inc) == -1 && errno == EINVAL, "root_rw with -incoming alone: EINVAL");
	}

	{
		/* no_flush: only the root's drive of a VM whose disk is thrown
		 * away gets cache.no-flush=on; a kept VM's (--keep, a commit,
		 * the pool's, a template's) keeps QEMU's flushes */
		const struct qemu_cfg eph = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES,
					      .bulk = VM "/bulk.raw", .root_rw = 1, .no_flush = 1 };
		const struct qemu_cfg kept = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES,
					       .bulk = VM "/bulk.raw", .root_rw = 1 };
		const struct qemu_vm vm = { .accel = "tcg", .mem_mib = 512, .vcpus = 1,
					    .vmlinux = "/k", .initrd = "/i", .no_flush = 1 };
		struct inst in;
		struct qemu_cfg at;

		ok(qemu_argv(&q, &eph) == 0 &&
		   strstr(joined(&q), "\n-drive\nid=root,file=" VM "/disk.qcow2,format=qcow2,if=none,"
				      "discard=unmap,werror=report,rerror=report,cache.no-flush=on\n-device\n") &&
		   strstr(joined(&q), "id=bulk,") && !strstr(strstr(joined(&q), "id=bulk,"), "no-flush"),
		   "a throwaway VM's root drive: cache.no-flush=on, its bulk lane's not");
		ok(qemu_argv(&q, &kept) == 0 && !strstr(joined(&q), "no-flush"),
		   "a kept VM's: no cache.no-flush anywhere");
		ok(inst_paths(&in, VM) == 0 && (at = qemu_cfg_at(&vm, &in)).no_flush == 1,
		   "qemu_cfg_at carries the VM's no_flush (its cold boot's and its clone's line)");
		ok(qemu_shape_argv(&q, "tcg", 512, 1, 0, 0, 1) == 0 && !strstr(joined(&q), "no-flush"),
		   "the shape (the warm key, the fingerprint) has no cache.no-flush");
	}

	{
		/* tb-size (a cgroup's limit, lib/cgroup.c): under TCG only */
		const struct qemu_cfg t = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, .tb_mib = 88, FILES };
		const struct qemu_cfg k = { .accel = "kvm", .mem_mib = 512, .vcpus = 1, .tb_mib = 88, FILES };

		ok(qemu_argv(&q, &t) == 0 && strstr(joined(&q), "\n-accel\ntcg,tb-size=88\n-cpu\n"),
		   "TCG with tb_mib: -accel tcg,tb-size=88");
		ok(qemu_argv(&q, &k) == 0 && strstr(joined(&q), "\n-accel\nkvm\n-cpu\n"),
		   "KVM with tb_mib: -accel kvm, no tb-size");
	}

	{
		/* THP off for a TCG QEMU only (its -accel, with or without
		 * options), never for KVM's or a program without -accel */
		const struct qemu_cfg t = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES };
		const struct qemu_cfg tb = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, .tb_mib = 88, FILES };
		const struct qemu_cfg k = { .accel = "kvm", .mem_mib = 512, .vcpus = 1, FILES };
		char *img[] = { "qemu-img", "create", "-q", "-f", "qcow2", "x", NULL };
		char *odd[] = { "qemu-system-x86_64", "-accel", "tcgx", NULL };
		char *last[] = { "qemu-system-x86_64", "-accel", NULL };

		ok(qemu_argv(&q, &t) == 0 && qemu_nothp(q.av) == 1 && qemu_argv(&q, &tb) == 0 &&
		   qemu_nothp(q.av) == 1, "qemu_nothp: -accel tcg and tcg,tb-size=88");
		ok(qemu_argv(&q, &k) == 0 && qemu_nothp(q.av) == 0 && qemu_nothp(img) == 0 &&
		   qemu_nothp(odd) == 0 && qemu_nothp(last) == 0,
		   "qemu_nothp: not KVM, qemu-img, -accel tcgx, nor -accel without a value");
	}

	{
		/* the host's TSC rate (lib/tsc.c): TCG's guest is told it and
		 * keeps its TSC clocksource (tsc=reliable); KVM's line is as it
		 * was (kvm-clock), and so is TCG's without a rate */
		const struct qemu_cfg t = { .accel = "tcg", .mem_mib = 512, .vcpus = 1,
					    .tsc_khz = 2096000, FILES };
		const struct qemu_cfg k = { .accel = "kvm", .mem_mib = 512, .vcpus = 1,
					    .tsc_khz = 2096000, FILES };
		const char *tline = "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				    "tsc_early_khz=2096000 lpj=4000000 tsc=reliable lapic_timer_khz=1000000\n-add-fd\n";
		const char *old = "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				  "tsc_early_khz=2000000 lpj=4000000\n-add-fd\n";

		ok(qemu_argv(&q, &t) == 0 && strstr(joined(&q), tline),
		   "TCG with the host's TSC rate: tsc_early_khz=<rate> tsc=reliable lapic_timer_khz=1000000");
		ok(qemu_argv(&q, &k) == 0 && strstr(joined(&q), old),
		   "KVM with a TSC rate: the line as it was (kvm-clock)");
	}

	{
		/* the line by what the kernel is: one without the patch
		 * (lapic_khz 0: its record does not list it) ignores
		 * lapic_timer_khz=, so it is told noapictimer; KVM's line
		 * has neither word either way */
		const struct qemu_cfg o = { .accel = "tcg", .mem_mib = 512, .vcpus = 1,
					    .tsc_khz = 2096000, OLDKERNEL };
		const struct qemu_cfg o2 = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, OLDKERNEL };
		const struct qemu_cfg n2 = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES };
		const struct qemu_cfg k = { .accel = "kvm", .mem_mib = 512, .vcpus = 1,
					    .tsc_khz = 2096000, FILES };
		const char *oline = "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				    "tsc_early_khz=2096000 lpj=4000000 tsc=reliable noapictimer\n-add-fd\n";
		const char *o2line = "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				     "tsc_early_khz=2000000 lpj=4000000 noapictimer\n-add-fd\n";
		const char *n2line = "\n-append\nconsole=ttyS0 quiet reboot=t panic=-1 rdinit=/init "
				     "tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000\n-add-fd\n";

		ok(qemu_argv(&q, &o) == 0 && strstr(joined(&q), oline) &&
		   !strstr(joined(&q), "lapic_timer_khz"),
		   "TCG, a kernel without the patch, with a TSC rate: noapictimer, no lapic_timer_khz");
		ok(qemu_argv(&q, &o2) == 0 && strstr(joined(&q), o2line) &&
		   !strstr(joined(&q), "lapic_timer_khz"),
		   "TCG, a kernel without the patch, no TSC rate: noapictimer, no lapic_timer_khz");
		ok(qemu_argv(&q, &n2) == 0 && strstr(joined(&q), n2line) &&
		   !strstr(joined(&q), "noapictimer"),
		   "TCG, a kernel with the patch, no TSC rate: lapic_timer_khz=1000000, no noapictimer");
		ok(qemu_argv(&q, &k) == 0 && !strstr(joined(&q), "lapic_timer_khz") &&
		   !strstr(joined(&q), "noapictimer"),
		   "KVM, a kernel with the patch: neither word");
		ok(qemu_shape_argv(&q, "tcg", 352, 1, 0, 3500000, 0) == 0 &&
		   strstr(joined(&q), " tsc=reliable noapictimer\n"),
		   "the shape command line carries the kernel's timer word (warm keys differ by it)");
	}

	{
		/* root_rw (a cold run's boot): isopod.root_rw=1 last on the
		 * line, TCG or KVM; the lines above (root_rw 0: templates,
		 * clones, the probe) end without it */
		const struct qemu_cfg t = { .accel = "tcg", .mem_mib = 512, .vcpus = 1,
					    .tsc_khz = 2096000, .root_rw = 1, FILES };
		const struct qemu_cfg n = { .accel = "tcg", .mem_mib = 512, .vcpus = 1,
					    .root_rw = 1, FILES };
		const struct qemu_cfg k = { .accel = "kvm", .mem_mib = 512, .vcpus = 1,
					    .root_rw = 1, FILES };

		ok(qemu_argv(&q, &t) == 0 &&
		   strstr(joined(&q), " tsc=reliable lapic_timer_khz=1000000 isopod.root_rw=1\n-add-fd\n") &&
		   qemu_argv(&q, &n) == 0 &&
		   strstr(joined(&q), " lpj=4000000 lapic_timer_khz=1000000 isopod.root_rw=1\n-add-fd\n") &&
		   qemu_argv(&q, &k) == 0 && strstr(joined(&q), " lpj=4000000 isopod.root_rw=1\n-add-fd\n"),
		   "root_rw: isopod.root_rw=1 ends the kernel's line (TCG with and without a rate, KVM)");
	}

	{
		const struct qemu_cfg c = { .accel = "kvm", .mem_mib = 512, .vcpus = 2, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off\n"
	"-accel\n"
	"kvm\n"
	"-cpu\n"
	"host\n"
	"-m\n"
	"512\n"
	"-smp\n"
	"2\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"), "cold, KVM, 2 vCPUs");
	}

	{
		const struct qemu_cfg c = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, .tap = TAP, .mac = MAC, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off,pit=on\n"
	"-accel\n"
	"tcg\n"
	"-cpu\n"
	"max,erms=off,fsrm=off\n"
	"-m\n"
	"512\n"
	"-smp\n"
	"1\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-netdev\n"
	"tap,id=net0,ifname=isopod-tap3,script=no,downscript=no\n"
	"-device\n"
	"virtio-net-device,netdev=net0,mac=02:69:73:00:00:03\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"), "cold, TCG, a NIC (--net filtered or open: the same device)");
	}

	{
		const struct qemu_cfg c = { .accel = "tcg", .mem_mib = 352, .vcpus = 1, .memfile = "/store/warm/.staging-x/mem", .share = 1, .tap = TAP, .mac = MAC, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off,pit=on,memory-backend=mem0\n"
	"-accel\n"
	"tcg\n"
	"-cpu\n"
	"max,erms=off,fsrm=off\n"
	"-m\n"
	"352\n"
	"-object\n"
	"memory-backend-file,id=mem0,size=352M,mem-path=/store/warm/.staging-x/mem,share=on\n"
	"-smp\n"
	"1\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-netdev\n"
	"tap,id=net0,ifname=isopod-tap3,script=no,downscript=no\n"
	"-device\n"
	"virtio-net-device,netdev=net0,mac=02:69:73:00:00:03\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"), "warm template: RAM in a file, share=on");
	}

	{
		const struct qemu_cfg c = { .accel = "tcg", .mem_mib = 352, .vcpus = 1, .memfile = "/proc/self/fd/3", .incoming = 1, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off,pit=on,memory-backend=mem0\n"
	"-accel\n"
	"tcg\n"
	"-cpu\n"
	"max,erms=off,fsrm=off\n"
	"-m\n"
	"352\n"
	"-object\n"
	"memory-backend-file,id=mem0,size=352M,mem-path=/proc/self/fd/3,share=off\n"
	"-smp\n"
	"1\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000 lapic_timer_khz=1000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"
	"-incoming\n"
	"defer\n"), "warm clone: RAM a private mapping of fd 3, -incoming defer");
	}

	{
		const struct qemu_cfg c = { .accel = "kvm", .mem_mib = 352, .vcpus = 1, .memfile = "/proc/self/fd/3", .incoming = 1, .tap = TAP, .mac = MAC, FILES };

		ok(same(&c,
	"qemu-system-x86_64\n"
	"-M\n"
	"microvm,acpi=off,x-option-roms=off,memory-backend=mem0\n"
	"-accel\n"
	"kvm\n"
	"-cpu\n"
	"host\n"
	"-m\n"
	"352\n"
	"-object\n"
	"memory-backend-file,id=mem0,size=352M,mem-path=/proc/self/fd/3,share=off\n"
	"-smp\n"
	"1\n"
	"-nodefaults\n"
	"-no-user-config\n"
	"-nographic\n"
	"-no-reboot\n"
	"-sandbox\n"
	"on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny\n"
	"-kernel\n"
	"/store/kernels/K/vmlinux\n"
	"-initrd\n"
	"/store/kernels/K/initramfs.cpio\n"
	"-append\n"
	"console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000\n"
	"-add-fd\n"
	"fd=5,set=5,opaque=console\n"
	"-chardev\n"
	"file,id=con,path=/dev/fdset/5,append=on\n"
	"-serial\n"
	"chardev:con\n"
	"-drive\n"
	"id=root,file=/store/vms/vm-0123456789ab/disk.qcow2,format=qcow2,if=none,discard=unmap,werror=report,rerror=report\n"
	"-device\n"
	"virtio-blk-device,drive=root,opt_io_size=1048576\n"
	"-device\n"
	"virtio-serial-device,max_ports=2\n"
	"-chardev\n"
	"socket,id=agent,path=/store/vms/vm-0123456789ab/agent.sock,server=on,wait=off\n"
	"-device\n"
	"virtserialport,chardev=agent,name=isopod.agent\n"
	"-device\n"
	"virtio-rng-device\n"
	"-netdev\n"
	"tap,id=net0,ifname=isopod-tap3,script=no,downscript=no\n"
	"-device\n"
	"virtio-net-device,netdev=net0,mac=02:69:73:00:00:03\n"
	"-qmp\n"
	"unix:/store/vms/vm-0123456789ab/qmp.sock,server=on,wait=off\n"
	"-incoming\n"
	"defer\n"), "warm clone, KVM, a NIC");
	}

	{
		const struct qemu_cfg none = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES };
		const struct qemu_cfg net = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES,
					      .tap = TAP, .mac = MAC };

		ok(has(&none, "-netdev") == 0 && has(&none, "-incoming") == 0 && has(&none, "-object") == 0,
		   "no NIC, no RAM file, not incoming unless asked");
		ok(has(&net, "-netdev") == 1, "a tap gives -netdev");
	}
	{
		struct qemu_cfg c = { .accel = "tcg", .mem_mib = 512, .vcpus = 1, FILES };

		memset(longp, 'x', sizeof longp - 1);
		longp[sizeof longp - 1] = 0;
		c.disk = longp;
		errno = 0;
		ok(qemu_argv(&q, &c) < 0 && errno == ENAMETOOLONG, "a path that does not fit: -1 ENAMETOOLONG");
	}
	ok(qemu_shape_argv(&q, "tcg", 352, 1, 1, 0, 1) == 0 && strstr(joined(&q), "@vm/disk.qcow2") &&
	   strstr(joined(&q), "mem-path=@mem,share=on") && strstr(joined(&q), "ifname=@tap") &&
	   strstr(joined(&q), "mac=@mac") && !strstr(joined(&q), "/store"),
	   "the shape command line has placeholders for every per-VM part");
	/* the bulk lane's drive is in every warm shape (templates and clones
	 * must match), after the root: the root stays /dev/vda */
	ok(qemu_shape_argv(&q, "tcg", 352, 1, 0, 0, 1) == 0 &&
	   strstr(joined(&q), "virtio-blk-device,drive=root,opt_io_size=1048576\n-drive\nid=bulk,file=@vm/bulk.raw,"
			      "format=raw,if=none,readonly=on,cache=writeback,") &&
	   strstr(joined(&q), "\n-device\nvirtio-blk-device,drive=bulk,serial=isopod.bulk\n"),
	   "the shape command line has the bulk lane's drive, read-only, after the root's");
	ok(qemu_shape_argv(&q, "tcg", 352, 1, 0, 3500000, 1) == 0 &&
	   strstr(joined(&q), " tsc_early_khz=3500000 lpj=4000000 tsc=reliable lapic_timer_khz=1000000\n"),
	   "the shape command line carries the store's TSC rate (warm keys differ by it)");
	test_last_line();
	test_clone_env();
	test_memro_ok();
	qemu_fingerprint(fp);
	ok(!strcmp(fp, "368ea5490d3112e126d12809a6b29acf7bb564b47299c2dd87a9f99f8e5c2612"),
	   "the argv fingerprint is the one isopod-boot wrote to warm/argv.json: %s", fp);
	return tap_done();
}
