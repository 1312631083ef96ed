/* qemu.c - the one QEMU command-line builder (see qemu.h). */
#include "frame.h"
#include "proc.h"
#include "qemu.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The guest kernel's command line, for TCG or KVM. */
static void kernel_line(char *buf, size_t sz, const struct qemu_cfg *c, int tcg)
{
	/* Under TCG the guest's TSC is the host's, unscaled (QEMU 7.2
	 * cpu_get_ticks -> cpu_get_host_ticks): told the host's real rate
	 * (lib/tsc.c, kept per store) its TSC clocksource keeps the host's
	 * time, and tsc=reliable keeps it there -- no watchdog against
	 * refined-jiffies, whose PIT ticks TCG loses, and which moves in
	 * whole ticks: busybox nslookup's A and AAAA queries then got one
	 * DNS id and waited out its timeout (doc/DECISIONS.md "TSC under
	 * TCG").  Without a rate (not x86_64, a TSC the host does not call
	 * constant) the line stays as it was: told 2 GHz, a guest on
	 * tsc=reliable would run at the host's rate / 2 GHz.  KVM's guests
	 * use kvm-clock: their line is unchanged.
	 * TCG's guests are told their local APIC timer's rate
	 * (lapic_timer_khz=1000000: QEMU's emulated APIC counts one per ns of
	 * QEMU_CLOCK_VIRTUAL before its divider, hw/intc/apic_common.c
	 * apic_next_timer), a parameter our kernel carries as a patch
	 * (images/kernel-lapic-timer-khz.patch): 6.1 upstream learns the
	 * rate only by calibrating against the TSC at every boot (a 100 ms
	 * busy wait of guest time, ~230 ms of this host's), then checks it
	 * for 100 ms more against the PIT's jiffies, which TCG, losing PIT
	 * ticks, can fail.  Before, the line said noapictimer and the PIT
	 * was the clock event device: its one-shot reach is 0x7fff ticks of
	 * 1.193182 MHz, 27.5 ms, so an idle tickless guest still woke QEMU
	 * ~36 times a second, for a VM that waits for its host N times
	 * longer when N run at once (doc/SPEED.md "Goal 6, fourth round";
	 * "Goal 1, third round" for the calibration).  The APIC timer's
	 * one-shot reach is 34 s.  Only a kernel with the patch is told
	 * (c->lapic_khz, from its record: lib/image.h kernel_lapic_khz): an
	 * older one in a store not rebuilt would ignore the word, pass it to
	 * PID 1's environment and calibrate at every boot; its line keeps
	 * noapictimer.
	 * KVM's guests have the TSC-deadline timer: their line is unchanged.
	 */
	const char *timer = !tcg ? "" : c->lapic_khz ? " lapic_timer_khz=1000000" : " noapictimer";
	/* A cold run's guest mounts its root read-write at boot: the remount
	 * its first command needs (~6.5 ms under TCG) was the floor of the
	 * hand-off from isopod-boot to isopod-exec (doc/SPEED.md, "the
	 * boot-to-exec hand-off").  Only a VM that is neither a warm template
	 * nor its clone is told: a template's root must stay read-only (its
	 * snapshot resumes over any fresh overlay of the chain). */
	const char *rw = c->root_rw ? " isopod.root_rw=1" : "";

	if (tcg && c->tsc_khz > 0)
		snprintf(buf, sz,
			 "console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=%lld "
			 "lpj=4000000 tsc=reliable%s%s", c->tsc_khz, timer, rw);
	else
		snprintf(buf, sz, "%s%s%s",
			 "console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 "
			 "lpj=4000000", timer, rw);
}

/* The command line.  Device order is fixed: memory snapshots are only
 * restorable into an identical machine.  With memfile, guest RAM is that
 * file (memory-backend-file): share=1 for a warm template (its RAM lands
 * in the file), share=0 for a clone (a private copy-on-write mapping of
 * it: clones share its clean pages; the file is root's 0644 and the
 * clone's QEMU opens it read-only, qemu_clone_env); incoming adds
 * `-incoming defer`.
 * Everything else is the same for cold boots, templates and clones.
 * Never add a device that discards guest RAM (virtio-balloon, virtio-mem):
 * QEMU 7.2 discards file-backed RAM with fallocate(PUNCH_HOLE) on the
 * file even for share=off, i.e. a clone's guest could punch holes in the
 * snapshot every clone maps (the ctime check would then retire it). */
int qemu_argv(struct qemu_argv *q, const struct qemu_cfg *c)
{
	int tcg = !strcmp(c->accel, "tcg"), n = 0;
	const char *memfile = c->memfile;

	/* A template's or a clone's root must stay read-only until a host
	 * sends ROOT_RW (DESIGN: read-only until the first command, so a warm
	 * snapshot resumes over any fresh overlay of the same chain);
	 * isopod.root_rw=1 is a cold run's word only (doc/DECISIONS.md), so a
	 * caller that combines them has made a mistake: refuse it here. */
	if (c->root_rw && (memfile || c->incoming)) {
		errno = EINVAL;
		return -1;
	}

	/* Under TCG the PIT: a kernel told lapic_timer_khz stops it at boot,
	 * but one without the patch (noapictimer) has it as its clock event
	 * device, and checks its APIC timer's calibration against it. */
	snprintf(q->machine, sizeof q->machine, "microvm,acpi=off,x-option-roms=off%s%s",
		 tcg ? ",pit=on" : "", memfile ? ",memory-backend=mem0" : "");
	snprintf(q->mem, sizeof q->mem, "%lld", c->mem_mib);
	snprintf(q->smp, sizeof q->smp, "%lld", c->vcpus);
	/* cache.no-flush=on: the guest's flushes (ext4's journal commits and
	 * superblock writes with PREFLUSH/FUA; a cold boot's read-write mount
	 * issues 4-5, one after another, and waits for each) stop at the
	 * host's page cache instead of fdatasync(2) on the overlay: 1-2 ms a
	 * run on this host, ~9 when it is loaded (doc/SPEED.md "The root's
	 * flushes").  Only for a disk nobody reads again once its VM stops:
	 * after a host crash it is garbage either way (doc/DECISIONS.md).
	 * QEMU's block layer only (BDRV_O_NO_FLUSH): the guest still sees a
	 * write-back cache (cache.writeback is unchanged), so a clone's
	 * device matches its template's.  Not in the shape (the warm key,
	 * qemu_fingerprint): qemu_shape_argv never sets it. */
	if (pathn(q->drive, sizeof q->drive,
		 "id=root,file=%s,format=qcow2,if=none,discard=unmap,werror=report,rerror=report%s",
		 c->disk, c->no_flush ? ",cache.no-flush=on" : "") < 0 ||
	    pathn(q->agent, sizeof q->agent, "socket,id=agent,path=%s,server=on,wait=off",
		 c->agent_sock) < 0 ||
	    pathn(q->qmp, sizeof q->qmp, "unix:%s,server=on,wait=off", c->qmp_sock) < 0)
		return -1;
	/* cache=writeback (QEMU's default, said here because the lane
	 * depends on it): QEMU reads the file through the host's page cache,
	 * where isopod-exec's pwrite put the bytes before it named the slot.
	 * readonly=on: the lane carries bytes to the guest only; a guest that
	 * writes its device stores nothing in the host's file */
	if (c->bulk &&
	    pathn(q->bulk, sizeof q->bulk,
		 "id=bulk,file=%s,format=raw,if=none,readonly=on,cache=writeback,werror=report,rerror=report",
		 c->bulk) < 0)
		return -1;
	if (memfile &&
	    pathn(q->obj, sizeof q->obj,
		 "memory-backend-file,id=mem0,size=%lldM,mem-path=%s,share=%s", c->mem_mib, memfile,
		 c->share ? "on" : "off") < 0)
		return -1;
#define A(s) (q->av[n++] = (char *)(s))
	A(QEMU);
	A("-M"); A(q->machine);
	/* tb-size: a cgroup's limit that leaves QEMU less than its 1 GiB
	 * default; a full buffer is flushed and refilled, never grown */
	if (tcg && c->tb_mib > 0)
		snprintf(q->accel, sizeof q->accel, "tcg,tb-size=%lld", c->tb_mib);
	else
		snprintf(q->accel, sizeof q->accel, "%s", tcg ? "tcg" : "kvm");
	A("-accel"); A(q->accel);
	/* erms=off: with ERMS the guest kernel copies to and from user
	 * space (and memcpy, clear_page) with `rep movsb`, which TCG runs one
	 * byte per translated-block turn; without it, `rep movsq`, 8 bytes a
	 * turn.  Those copies were most of the guest's time moving stdin and
	 * files over the agent's channel: 64 MiB of stdin 850 -> 440 ms of
	 * vCPU time, copy-out 380 -> 110 ms (doc/SPEED.md, "Goal 4, where a
	 * transfer's time goes").  The flag is CPUID only: TCG still runs a
	 * `rep movsb` the guest does issue.  fsrm=off for the same reason:
	 * 7.2's TCG does not offer FSRM, a later QEMU's `max` may, and Linux
	 * then takes `rep movsb` for its copies whatever ERMS says. */
	A("-cpu"); A(tcg ? "max,erms=off,fsrm=off" : "host");
	A("-m"); A(q->mem);
	if (memfile) {
		A("-object"); A(q->obj);
	}
	A("-smp"); A(q->smp);
	A("-nodefaults"); A("-no-user-config"); A("-nographic"); A("-no-reboot");
	/* seccomp: no setuid/capset (QEMU may run as root), no affinity or
	 * scheduler games, no fork/exec (snapshots travel over fds passed with
	 * QMP getfd, never `migrate exec:`). */
	A("-sandbox"); A("on,elevateprivileges=deny,resourcecontrol=deny,spawn=deny");
	A("-kernel"); A(c->vmlinux);
	A("-initrd"); A(c->initrd);
	A("-append");
	kernel_line(q->append, sizeof q->append, c, tcg);
	A(q->append);
	/* The console is a descriptor (QEMU_CONSOLE_FD), not a path QEMU
	 * writes as much as the guest likes to: QEMU 7.2's file chardev opens
	 * /dev/fdset/N by dup'ing the set's fd of the same access mode
	 * (O_WRONLY, qemu_dup_flags) and sets it O_NONBLOCK; a full pipe
	 * stalls the guest's UART (the 16550 retries on G_IO_OUT), never
	 * QEMU's main loop.  append=on: without it the chardev asks O_TRUNC,
	 * and qemu_dup_flags ftruncate()s the dup -- EINVAL on a pipe. */
	A("-add-fd"); A("fd=" QEMU_CONSOLE_FD_S ",set=" QEMU_CONSOLE_FD_S ",opaque=console");
	A("-chardev"); A("file,id=con,path=/dev/fdset/" QEMU_CONSOLE_FD_S ",append=on");
	A("-serial"); A("chardev:con");
	A("-drive"); A(q->drive);
	/* opt_io_size: the root says its optimal request is 1 MiB, so the
	 * guest's readahead on it is 2 MiB (Linux 6.1 blk_queue_io_opt:
	 * ra_pages = max(io_opt * 2, 128 KiB)) instead of 128 KiB.  Under TCG
	 * each virtio-blk request costs the guest an exit, an interrupt and
	 * first-time kernel paths; the first command's exec faults in its
	 * binary a readaround window at a time: a cold `true` (busybox, 2 MB)
	 * took 13 ms less in exec_ms, 25 interleaved pairs (doc/SPEED.md
	 * "Goal 1: the root's readahead").  The page cache it fills is the
	 * guest's own RAM; a program read whole is read in fewer requests,
	 * a random reader's misses read up to 2 MiB around them. */
	A("-device"); A("virtio-blk-device,drive=root,opt_io_size=1048576");
	/* The bulk lane: after the root, so the root stays /dev/vda. */
	if (c->bulk) {
		A("-drive"); A(q->bulk);
		A("-device"); A("virtio-blk-device,drive=bulk,serial=" QEMU_BULK_SERIAL);
	}
	/* Two ports, not QEMU's 31: the agent's is the only one, and port 0
	 * is kept for a console (max_ports=1 leaves virtserialport no
	 * number).  QEMU then keeps 6 virtqueues instead of 64 and the guest
	 * rings for 6: 0.4-0.6 MiB less of QEMU's own memory per VM, cold
	 * or resumed (doc/SPEED.md "Goal 7"). */
	A("-device"); A("virtio-serial-device,max_ports=2");
	A("-chardev"); A(q->agent);
	A("-device"); A("virtserialport,chardev=agent,name=isopod.agent");
	A("-device"); A("virtio-rng-device");
	if (c->tap) {
		/* Last device: the order of the others never depends on it.
		 * Templates, clones and cold boots all have this very device;
		 * only the tap and the MAC are the VM's own.  A clone's QEMU
		 * takes the template's MAC and receive filter from the
		 * migration stream, whatever mac= says: the agent's
		 * SIOCSIFHWADDR moves it to the slot's (virtio-net
		 * CTRL_MAC_ADDR_SET on the control queue). */
		if (pathn(q->netdev, sizeof q->netdev,
			 "tap,id=net0,ifname=%s,script=no,downscript=no", c->tap) < 0 ||
		    pathn(q->nic, sizeof q->nic, "virtio-net-device,netdev=net0,mac=%s", c->mac) < 0)
			return -1;
		A("-netdev"); A(q->netdev);
		A("-device"); A(q->nic);
	}
	A("-qmp"); A(q->qmp);
	if (c->incoming) {
		A("-incoming"); A("defer");
	}
	q->av[n] = NULL;
#undef A
	return 0;
}


int qemu_shape_argv(struct qemu_argv *q, const char *accel, long long mem_mib, long long vcpus,
		    int nic, long long tsc_khz, int lapic_khz)
{
	const struct qemu_cfg c = {
		.accel = accel,
		.mem_mib = mem_mib,
		.vcpus = vcpus,
		.vmlinux = "@kernel/vmlinux",
		.initrd = "@kernel/initramfs.cpio",
		.disk = "@vm/disk.qcow2",
		.agent_sock = "@vm/agent.sock",
		.qmp_sock = "@vm/qmp.sock",
		.bulk = "@vm/" QEMU_BULK_FILE,
		.memfile = "@mem",
		.share = 1,
		.tap = nic ? "@tap" : NULL,
		.mac = nic ? "@mac" : NULL,
		.tsc_khz = tsc_khz,
		.lapic_khz = lapic_khz,
	};

	return qemu_argv(q, &c);
}

void qemu_fingerprint(char out[65])
{
	static const char *const accels[] = { "tcg", "kvm" };
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES];
	struct qemu_argv q;
	char **a;
	size_t i;

	crypto_hash_sha256_init(&st);
	for (i = 0; i < 4; i++) {
		qemu_shape_argv(&q, accels[i % 2], 64, 1, i >= 2, 0, 1); /* placeholders: always fit */
		for (a = q.av; *a; a++)
			crypto_hash_sha256_update(&st, (const unsigned char *)*a, strlen(*a) + 1);
	}
	/* TCG's line with a rate, after the four lines as they were */
	for (i = 0; i < 2; i++) {
		qemu_shape_argv(&q, "tcg", 64, 1, (int)i, QEMU_TSC_KHZ_SHAPE, 1);
		for (a = q.av; *a; a++)
			crypto_hash_sha256_update(&st, (const unsigned char *)*a, strlen(*a) + 1);
	}
	/* and for a kernel without lapic_timer_khz= (noapictimer) */
	for (i = 0; i < 2; i++) {
		qemu_shape_argv(&q, "tcg", 64, 1, 0, i ? QEMU_TSC_KHZ_SHAPE : 0, 0);
		for (a = q.av; *a; a++)
			crypto_hash_sha256_update(&st, (const unsigned char *)*a, strlen(*a) + 1);
	}
	crypto_hash_sha256_final(&st, h);
	for (i = 0; i < sizeof h; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
}

int inst_paths(struct inst *in, const char *dir)
{
	if (pathn(in->dir, sizeof in->dir, "%s", dir) < 0 ||
	    pathn(in->disk, sizeof in->disk, "%s/disk.qcow2", dir) < 0 ||
	    pathn(in->agent, sizeof in->agent, "%s/agent.sock", dir) < 0 ||
	    pathn(in->qmp, sizeof in->qmp, "%s/qmp.sock", dir) < 0 ||
	    pathn(in->console, sizeof in->console, "%s/console.log", dir) < 0 ||
	    pathn(in->qlog, sizeof in->qlog, "%s/qemu.log", dir) < 0 ||
	    pathn(in->bulk, sizeof in->bulk, "%s/" QEMU_BULK_FILE, dir) < 0)
		return -1;
	return 0;
}

int bulk_file_new(const char *path)
{
	int fd, e;

	/* unlink first: a file another process still holds open (an earlier
	 * QEMU of this directory) keeps its bytes, this one starts empty */
	if (unlink(path) < 0 && errno != ENOENT)
		return -1;
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	e = ftruncate(fd, (off_t)BULK_FILE_BYTES) < 0 ? errno : 0;
	close(fd);
	if (e) {
		unlink(path);
		return errno = e, -1;
	}
	return 0;
}

int inst_fresh(const struct inst *in)
{
	unlink(in->agent);
	unlink(in->qmp);
	unlink(in->console);
	return bulk_file_new(in->bulk);
}

struct qemu_cfg qemu_cfg_at(const struct qemu_vm *vm, const struct inst *in)
{
	return (struct qemu_cfg){
		.accel = vm->accel,
		.mem_mib = vm->mem_mib,
		.vcpus = vm->vcpus,
		.vmlinux = vm->vmlinux,
		.initrd = vm->initrd,
		.disk = in->disk,
		.agent_sock = in->agent,
		.qmp_sock = in->qmp,
		.bulk = in->bulk,
		.tap = vm->tap,
		.mac = vm->mac,
		.tb_mib = vm->tb_mib,
		.tsc_khz = vm->tsc_khz,
		.lapic_khz = vm->lapic_khz,
		.no_flush = vm->no_flush,
	};
}

int qemu_memro_ok(const char *so, char *why, size_t wsz)
{
	struct stat st;

	/* ld.so splits LD_PRELOAD at ' ', ':' and tab, and skips an entry it
	 * cannot load: QEMU would run without it */
	if (so[0] != '/' || strpbrk(so, " :\t")) {
		snprintf(why, wsz, "%.512s: not an absolute path free of ' ', ':' and tab", so);
		return errno = EINVAL, -1;
	}
	if (stat(so, &st) < 0) {
		snprintf(why, wsz, "%.512s: %s", so, strerror(errno));
		return errno = ENOENT, -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, wsz, "%.512s: not a regular file", so);
		return errno = ENOENT, -1;
	}
	/* it runs inside QEMU, as root when unjailed (jaildeps' cache rule) */
	if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		snprintf(why, wsz, "%.512s: uid %lld mode %04o: must be ours or root's, writable "
			 "by no other", so, (long long)st.st_uid, (unsigned)(st.st_mode & 07777));
		return errno = EPERM, -1;
	}
	return 0;
}

int qemu_clone_env(char *const av[], char *buf, size_t sz, char *why, size_t wsz)
{
	char so[PATH_MAX];

	for (; *av && av[1]; av++)
		if (!strcmp(*av, "-object") && strstr(av[1], ",mem-path=" QEMU_CLONE_MEM ","))
			break;
	if (!*av || !av[1])
		return 0;
	/* beside this program (the supervisor), never found through PATH or
	 * the environment: it runs inside QEMU, as root when unjailed */
	proc_sibling(so, sizeof so, QEMU_MEMRO_SO, NULL);
	if (pathn(buf, sz, "LD_PRELOAD=%s", so) < 0) {
		snprintf(why, wsz, "%.512s: path too long", so);
		return -1;
	}
	return qemu_memro_ok(so, why, wsz) < 0 ? -1 : 1;
}

int qemu_nothp(char *const av[])
{
	for (; *av && av[1]; av++)
		if (!strcmp(*av, "-accel"))
			return !strncmp(av[1], "tcg", 3) && (!av[1][3] || av[1][3] == ',');
	return 0;
}

pid_t qemu_spawn(char *const av[], int outfd, int pdeath, int keepfd, int confd)
{
	struct proc_spec ps = PROC_SPEC(av);
	char env[PATH_MAX + 16], *envv[] = { env, NULL }, why[PATH_MAX + 128];
	int is_clone = qemu_clone_env(av, env, sizeof env, why, sizeof why);

	if (is_clone < 0)
		return -1;
	if (is_clone)
		ps.env = envv;
	ps.out = ps.err = outfd;
	ps.keep[0] = keepfd >= 0 ? keepfd : PROC_NULL;
	ps.keep[1] = PROC_NULL; /* fd 4: the jailed NIC's tap */
	ps.keep[2] = confd >= 0 ? confd : PROC_NULL;
	ps.nkeep = confd >= 0 ? 3 : keepfd >= 0;
	ps.pdeathsig = pdeath ? SIGKILL : 0;
	/* bind() makes a unix socket 0777 & ~umask: 0177 gives QEMU's sockets
	 * (qmp.sock, agent.sock) 0600 from the start, with no window a chmod
	 * after the bind would leave.  The files QEMU and qemu-img create are
	 * 0600 under 077 too; neither makes a directory. */
	ps.umask = 0177;
	ps.nothp = qemu_nothp(av);
	return proc_spawn(&ps);
}

/* Run qemu-img (av) to completion, unjailed; its messages go to our
 * stderr.  0, or -1 with err naming the verb (av[1]) and, when given, the
 * disk.  Only qemu_img_overlay's: every other qemu-img is lib/qjail.c's. */
static int qemu_img(char *const av[], const char *disk, char *err, size_t errsz)
{
	pid_t pid;
	int st;

	if ((pid = qemu_spawn(av, 2, 0, -1, -1)) < 0) {
		snprintf(err, errsz, "unable to fork qemu-img: %s", strerror(errno));
		return -1;
	}
	if (proc_wait(pid, &st) < 0) {
		snprintf(err, errsz, "unable to wait for qemu-img: %s", strerror(errno));
		return -1;
	}
	if (st != 0) {
		snprintf(err, errsz, "qemu-img %s%s%s failed (status %d)", av[1], disk ? " " : "",
			 disk ? disk : "", proc_status(st));
		return -1;
	}
	return 0;
}

/* Unjailed on purpose (issue 12; the files a jailed QEMU wrote go through
 * lib/qjail.c qjail_img): the backing is a raw base image root built,
 * opened -F raw (no header to parse), and the overlay is new. */
int qemu_img_overlay(const char *base, const char *disk, long long bytes, char *err,
		     size_t errsz)
{
	char size[32];
	char *av[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
		       (char *)base, (char *)disk, size, NULL };

	snprintf(size, sizeof size, "%lld", bytes);
	unlink(disk);
	return qemu_img(av, disk, err, errsz);
}

const char *last_line(const char *path, char *out, size_t sz)
{
	char buf[2048];
	ssize_t n;
	char *e, *s, *p;
	struct stat st;
	/* console.log is the jail's file, QEMU may still run: a FIFO in its
	 * place must not block us, a hard link must not show another file. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	out[0] = 0;
	if (fd < 0)
		return out;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		close(fd);
		return out;
	}
	n = lseek(fd, 0, SEEK_END);
	if (n > (ssize_t)sizeof buf - 1)
		lseek(fd, n - (ssize_t)(sizeof buf - 1), SEEK_SET);
	else
		lseek(fd, 0, SEEK_SET);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return out;
	buf[n] = 0;
	e = buf + n;
	while (e > buf && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
		e--;
	*e = 0;
	s = e;
	while (s > buf && s[-1] != '\n')
		s--;
	for (p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
			*p = '?';
	n = (ssize_t)strlen(s);
	if ((size_t)n >= sz) /* keep the end: that is where the error is */
		s += (size_t)n - (sz - 1), n = (ssize_t)sz - 1;
	memcpy(out, s, (size_t)n + 1);
	return out;
}

int file_has(const char *path, const char *needle)
{
	enum { CAP = 1 << 16 };
	char *buf = malloc(CAP);
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), r;

	if (fd < 0 || !buf) {
		if (fd >= 0)
			close(fd);
		free(buf);
		return 0;
	}
	n = read(fd, buf, CAP - 1);
	close(fd);
	r = n > 0 && memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
	free(buf);
	return r;
}
