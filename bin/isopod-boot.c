/* isopod-boot - boot a claimed VM under a supervisor and wait for its agent.
 *
 * Process shape:
 *   isopod-boot ──fork──> supervisor ──fork+exec──> qemu-system-x86_64
 * The supervisor holds vms/<id>/lock (LOCK_EX) for its whole life: that lock
 * IS "the VM is running".  It watches QEMU, the owner and its signals through
 * pidfds and a signalfd, and kills QEMU (the pid it forked itself, never a
 * pid read from a file) when the owner goes away.  QEMU carries
 * PDEATHSIG=SIGKILL, so a SIGKILLed supervisor takes QEMU with it. */

#include "host.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-boot [--vcpus N] [--mem-mib N] [--disk-mib N] [--timeout-ms N] " \
	      "[--owner-pid PID] [--keep] [--accel kvm|tcg]"

#define QEMU "qemu-system-x86_64"
#define PROBE_MS 10000
#define MIB (1024LL * 1024)

struct cfg {
	long long vcpus, mem_mib, disk_mib, timeout_ms;
	long long owner;
	int keep, disk_given;
	const char *accel;        /* forced accelerator or NULL */
	const char *accel_src;    /* who forced it */
};

struct img {
	char ksha[65], vmlinux[PATH_MAX], initrd[PATH_MAX];
	char flavor[64], bsha[65], base[PATH_MAX];
	long long base_size;
};

/* The files of one QEMU instance (a VM, or the KVM probe). */
struct inst {
	char dir[PATH_MAX], disk[PATH_MAX], agent[PATH_MAX], qmp[PATH_MAX];
	char console[PATH_MAX], qlog[PATH_MAX];
};

static struct conn conn; /* 130 KiB of buffers: not on the stack */

static void inst_paths(struct inst *in, const char *dir)
{
	pathf(in->dir, sizeof in->dir, "%s", dir);
	pathf(in->disk, sizeof in->disk, "%s/disk.qcow2", dir);
	pathf(in->agent, sizeof in->agent, "%s/agent.sock", dir);
	pathf(in->qmp, sizeof in->qmp, "%s/qmp.sock", dir);
	pathf(in->console, sizeof in->console, "%s/console.log", dir);
	pathf(in->qlog, sizeof in->qlog, "%s/qemu.log", dir);
}

/* ---- small helpers ---------------------------------------------------- */

static long long mem_available_mib(void)
{
	char line[256];
	long long kb = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		die(EX_SYS, "unable to open /proc/meminfo:");
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	fclose(f);
	if (kb < 0)
		die(EX_SYS, "unable to read MemAvailable from /proc/meminfo");
	return kb / 1024;
}

/* Read "<64 hex>\n" from a pointer file.  0, or -1 (errno; EINVAL if bad). */
static int read_sha(const char *path, char out[65])
{
	char buf[80];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), i;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 64)
		goto bad;
	for (i = 0; i < 64; i++)
		if (!((buf[i] >= '0' && buf[i] <= '9') || (buf[i] >= 'a' && buf[i] <= 'f')))
			goto bad;
	if (n > 64 && buf[64] != '\n')
		goto bad;
	memcpy(out, buf, 64);
	out[64] = 0;
	return 0;
bad:
	errno = EINVAL;
	return -1;
}

static void resolve_kernel(struct img *im)
{
	const char *h = store_home();
	char p[PATH_MAX];

	pathf(p, sizeof p, "%s/kernels/current", h);
	if (read_sha(p, im->ksha) < 0) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "no kernel registered in %s; run `make images`", h);
		die(EX_SYS, "unable to read %s:", p);
	}
	pathf(im->vmlinux, sizeof im->vmlinux, "%s/kernels/%s/vmlinux", h, im->ksha);
	pathf(im->initrd, sizeof im->initrd, "%s/kernels/%s/initramfs.cpio", h, im->ksha);
	if (access(im->vmlinux, R_OK) < 0 || access(im->initrd, R_OK) < 0)
		die(EX_NOTFOUND, "kernel %.12s is registered but %s is missing; run `make images`",
		    im->ksha, access(im->vmlinux, R_OK) < 0 ? im->vmlinux : im->initrd);
}

/* The base image: the one a fork recorded (sha given), else the current
 * build of the flavor. */
static void resolve_base(struct img *im, const char *flavor, const char *sha)
{
	const char *h = store_home();
	char p[PATH_MAX];
	struct stat st;
	size_t i;

	if (strlen(flavor) >= sizeof im->flavor || !*flavor || strchr(flavor, '/'))
		die(EX_USAGE, "bad base flavor in the record: %.64s", flavor);
	snprintf(im->flavor, sizeof im->flavor, "%s", flavor);
	if (sha) {
		for (i = 0; sha[i]; i++)
			if (!((sha[i] >= '0' && sha[i] <= '9') || (sha[i] >= 'a' && sha[i] <= 'f')))
				break;
		if (i != 64 || sha[i])
			die(EX_USAGE, "bad base sha256 in the record: %.80s", sha);
		memcpy(im->bsha, sha, 65);
	} else {
		pathf(p, sizeof p, "%s/images/current-%s", h, flavor);
		if (read_sha(p, im->bsha) < 0) {
			if (errno == ENOENT)
				die(EX_NOTFOUND, "no %s image registered in %s; run `make images`",
				    flavor, h);
			die(EX_SYS, "unable to read %s:", p);
		}
	}
	pathf(im->base, sizeof im->base, "%s/images/base-%s.img", h, im->bsha);
	if (stat(im->base, &st) < 0) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "base image %s is missing; run `make images`", im->base);
		die(EX_SYS, "unable to stat %s:", im->base);
	}
	im->base_size = (long long)st.st_size;
}

/* Virtual size of a qcow2 image from its header (big-endian u64 at 24). */
static long long qcow2_size(const char *path)
{
	unsigned char hd[32];
	long long v = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), i;
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, hd, sizeof hd);
	close(fd);
	if (n != (ssize_t)sizeof hd || memcmp(hd, "QFI\xfb", 4)) {
		errno = EINVAL;
		return -1;
	}
	for (i = 24; i < 32; i++)
		v = v << 8 | hd[i];
	return v;
}

/* Last non-empty line of a file, with control and non-ASCII bytes replaced:
 * console.log is guest output and ends up on a terminal. */
static const char *last_line(const char *path, char *out, size_t sz)
{
	char buf[2048];
	ssize_t n;
	char *e, *s, *p;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	out[0] = 0;
	if (fd < 0)
		return out;
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

/* Does the file contain needle?  (qemu.log is small: QEMU's own messages.) */
static int file_has(const char *path, const char *needle)
{
	static char buf[1 << 16];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
}

/* Close every fd except 0-2 and those in keep[] (fd hygiene before the
 * supervisor's long life: it must not pin the caller's pipes). */
static void close_except(int *keep, int n)
{
	int i, j, lo = 3;

	for (i = 1; i < n; i++) /* insertion sort, n is tiny */
		for (j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (i = 0; i < n; i++) {
		if (keep[i] < lo)
			continue;
		if (keep[i] > lo)
			close_range((unsigned)lo, (unsigned)keep[i] - 1, 0);
		lo = keep[i] + 1;
	}
	close_range((unsigned)lo, ~0U, 0);
}

/* ---- QEMU ------------------------------------------------------------- */

/* The command line.  Device order is fixed: memory snapshots are only
 * restorable into an identical machine. */
struct qargs {
	char machine[128], mem[32], smp[32], con[PATH_MAX + 32], drive[PATH_MAX + 64];
	char agent[PATH_MAX + 64], qmp[PATH_MAX + 32];
	char *av[64];
};

static void qemu_argv(struct qargs *q, const struct inst *in, const struct img *im,
		      const char *accel, long long mem, long long vcpus)
{
	int tcg = !strcmp(accel, "tcg"), n = 0;

	/* Under TCG the minimal kernel needs the PIT for its timer. */
	snprintf(q->machine, sizeof q->machine, "microvm,acpi=off,x-option-roms=off%s",
		 tcg ? ",pit=on" : "");
	snprintf(q->mem, sizeof q->mem, "%lld", mem);
	snprintf(q->smp, sizeof q->smp, "%lld", vcpus);
	pathf(q->con, sizeof q->con, "file,id=con,path=%s", in->console);
	pathf(q->drive, sizeof q->drive,
	      "id=root,file=%s,format=qcow2,if=none,discard=unmap", in->disk);
	pathf(q->agent, sizeof q->agent, "socket,id=agent,path=%s,server=on,wait=off", in->agent);
	pathf(q->qmp, sizeof q->qmp, "unix:%s,server=on,wait=off", in->qmp);
#define A(s) (q->av[n++] = (char *)(s))
	A(QEMU);
	A("-M"); A(q->machine);
	A("-accel"); A(tcg ? "tcg" : "kvm");
	A("-cpu"); A(tcg ? "max" : "host");
	A("-m"); A(q->mem);
	A("-smp"); A(q->smp);
	A("-nodefaults"); A("-no-user-config"); A("-nographic"); A("-no-reboot");
	/* seccomp: no setuid/capset (QEMU may run as root), no affinity or
	 * scheduler games; spawn stays allowed for `migrate exec:`. */
	A("-sandbox"); A("on,elevateprivileges=deny,resourcecontrol=deny");
	A("-kernel"); A(im->vmlinux);
	A("-initrd"); A(im->initrd);
	A("-append");
	A("console=ttyS0 quiet reboot=t panic=-1 rdinit=/init tsc_early_khz=2000000 lpj=4000000");
	A("-chardev"); A(q->con);
	A("-serial"); A("chardev:con");
	A("-drive"); A(q->drive);
	A("-device"); A("virtio-blk-device,drive=root");
	A("-device"); A("virtio-serial-device");
	A("-chardev"); A(q->agent);
	A("-device"); A("virtserialport,chardev=agent,name=isopod.agent");
	A("-device"); A("virtio-rng-device");
	A("-qmp"); A(q->qmp);
	q->av[n] = NULL;
#undef A
}

/* Fork a child that execs av with stdin /dev/null and stdout+stderr on
 * outfd, umask 077 (the sockets QEMU creates are 0600), nothing else open.
 * With pdeath, the child is SIGKILLed when the calling thread dies. */
static pid_t spawn(char *const av[], int outfd, int pdeath)
{
	pid_t parent = getpid(), pid;
	sigset_t none;

	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0)
		return pid;
	if (pdeath) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			_exit(126);
		if (getppid() != parent) /* the parent died before prctl */
			_exit(126);
	}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	umask(077);
	int nul = open("/dev/null", O_RDONLY);

	if (nul < 0 || dup2(nul, 0) < 0 || dup2(outfd, 1) < 0 || dup2(outfd, 2) < 0)
		_exit(126);
	close_range(3, ~0U, 0);
	execvp(av[0], av);
	dprintf(2, "%s: fatal: unable to exec %s: %s\n", progname, av[0], strerror(errno));
	_exit(127);
}

/* Exit status as one number: the code, or 128+sig when signalled. */
static int status_code(int st)
{
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* Reap our child pid if it exits within ms milliseconds.  1 reaped. */
static int exited_within(pid_t pid, int *st, int ms)
{
	int64_t until = mono_ms() + ms;

	for (;;) {
		if (waitpid(pid, st, WNOHANG) == pid)
			return 1;
		if (mono_ms() >= until)
			return 0;
		usleep(10 * 1000);
	}
}

/* qemu-img create -q -f qcow2 -F raw -b <base> <disk> <size>; qemu-img's
 * own messages go to our stderr, stdout stays JSON-only. */
static int make_overlay(const struct img *im, const char *disk, long long bytes, char *err,
			size_t errsz)
{
	char size[32];
	char *av[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
		       (char *)im->base, (char *)disk, size, NULL };
	pid_t pid;
	int st;

	snprintf(size, sizeof size, "%lld", bytes);
	unlink(disk);
	pid = spawn(av, 2, 0);
	if (pid < 0) {
		snprintf(err, errsz, "unable to fork qemu-img: %s", strerror(errno));
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			snprintf(err, errsz, "unable to wait for qemu-img: %s", strerror(errno));
			return -1;
		}
	if (st != 0) {
		snprintf(err, errsz, "qemu-img create %s failed (status %d)", disk,
			 status_code(st));
		return -1;
	}
	return 0;
}

/* qemu-img resize -q <disk> <bytes>: a forked disk asked to be larger. */
static int grow_disk(const char *disk, long long bytes, char *err, size_t errsz)
{
	char size[32];
	char *av[] = { "qemu-img", "resize", "-q", (char *)disk, size, NULL };
	pid_t pid;
	int st;

	snprintf(size, sizeof size, "%lld", bytes);
	if ((pid = spawn(av, 2, 0)) < 0) {
		snprintf(err, errsz, "unable to fork qemu-img: %s", strerror(errno));
		return -1;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR) {
			snprintf(err, errsz, "unable to wait for qemu-img: %s", strerror(errno));
			return -1;
		}
	if (st != 0) {
		snprintf(err, errsz, "qemu-img resize %s failed (status %d)", disk,
			 status_code(st));
		return -1;
	}
	return 0;
}

/* ---- accelerator ---------------------------------------------------- */

/* Boot the real kernel with KVM on a throwaway overlay and see whether the
 * agent answers within PROBE_MS.  On PVM hosts /dev/kvm opens fine and an
 * unmodified guest dies late with "KVM internal error": only a real boot
 * tells.  Returns 1 (kvm works) or 0, reason filled. */
static int probe_kvm(const struct img *im, char *reason, size_t rsz)
{
	char dir[PATH_MAX], err[PATH_MAX + 128], line[256], keep[PATH_MAX];
	struct inst in;
	struct qargs q;
	struct hello h = { 0 };
	const char *files[] = { in.disk, in.agent, in.qmp, in.console, in.qlog };
	int64_t t0 = mono_ms(), deadline = t0 + PROBE_MS;
	int logfd, ok = 0, st, r = -1;
	size_t i;
	pid_t pid;

	pathf(dir, sizeof dir, "%s/accel/probe-%s", store_home(), im->ksha);
	inst_paths(&in, dir);
	for (i = 0; i < sizeof files / sizeof files[0]; i++)
		unlink(files[i]);
	mkdirs(dir, 0700);
	if (make_overlay(im, in.disk, im->base_size, err, sizeof err) < 0)
		die(EX_SYS, "kvm probe: %s", err);
	logfd = open(in.qlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (logfd < 0)
		die(EX_SYS, "unable to create %s:", in.qlog);
	qemu_argv(&q, &in, im, "kvm", 256, 1);
	pid = spawn(q.av, logfd, 1);
	if (pid < 0)
		die(EX_SYS, "unable to fork:");
	close(logfd);
	for (;;) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			snprintf(reason, rsz, "kvm: qemu exited with status %d: %s", status_code(st),
				 last_line(in.qlog, line, sizeof line));
			pid = -1;
			goto done;
		}
		if (mono_ms() >= deadline)
			break;
		if (conn_open(&conn, in.agent, mono_ms() + 200) == 0) {
			r = conn_hello(&conn, &h, deadline);
			conn_close(&conn);
			break;
		}
	}
	/* Any HELLO_ACK, even one carrying a guest error (a bad root disk, a
	 * protocol mismatch), proves the kernel ran to the agent under KVM. */
	if (r == 0 || h.root[0] || h.guest_error[0] || h.uptime_ms) {
		ok = 1;
		snprintf(reason, rsz, "kvm: the agent answered in %lld ms",
			 (long long)(mono_ms() - t0));
	} else if (exited_within(pid, &st, r == -3 ? 0 : 1000)) {
		/* The socket closes while QEMU exits: give it a moment. */
		snprintf(reason, rsz, "kvm: qemu exited with status %d: %s", status_code(st),
			 last_line(in.qlog, line, sizeof line));
		pid = -1;
	} else if (file_has(in.qlog, "KVM internal error")) {
		/* PVM-style hosts: the guest dies late in emulation failure and
		 * QEMU pauses it; the log ends in a register dump. */
		snprintf(reason, rsz, "kvm: guest kernel did not reach the agent in %d s "
			 "(KVM internal error in qemu.log)", PROBE_MS / 1000);
	} else {
		last_line(in.qlog, line, sizeof line);
		snprintf(reason, rsz, "kvm: guest kernel did not reach the agent in %d s%s%s%s",
			 PROBE_MS / 1000, line[0] ? " (qemu.log: " : "", line, line[0] ? ")" : "");
	}
done:
	if (pid > 0) { /* our own child, not yet reaped: the pid is still ours */
		kill(pid, SIGKILL);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	/* Keep the probe's QEMU log beside the verdict, for whoever doubts it. */
	pathf(keep, sizeof keep, "%s/accel/%s.log", store_home(), im->ksha);
	if (rename(in.qlog, keep) < 0)
		warn("unable to keep the probe's log as %s:", keep);
	for (i = 0; i < sizeof files / sizeof files[0]; i++)
		unlink(files[i]);
	rmdir(dir);
	return ok;
}

/* Pick kvm or tcg; reason says why (set for tcg; for kvm only when probed). */
static const char *choose_accel(const struct cfg *cf, const struct img *im, char *reason,
				size_t rsz)
{
	const char *dev = getenv("ISOPOD_KVM_DEV");
	char p[PATH_MAX], now[32];
	json_t *v;
	int fd, lk, ok;

	reason[0] = 0;
	if (!dev || !*dev)
		dev = "/dev/kvm";
	if (cf->accel) {
		if (!strcmp(cf->accel, "tcg")) {
			snprintf(reason, rsz, "forced by %s", cf->accel_src);
			return "tcg";
		}
		if ((fd = open(dev, O_RDWR | O_CLOEXEC)) < 0)
			die(EX_SYS, "kvm forced by %s but unable to open %s:", cf->accel_src, dev);
		close(fd);
		return "kvm";
	}
	if ((fd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
		snprintf(reason, rsz, "%s: %s", dev, strerror(errno));
		return "tcg";
	}
	close(fd);

	pathf(p, sizeof p, "%s/accel", store_home());
	mkdirs(p, 0700);
	/* One probe per kernel at a time; others wait for its verdict. */
	pathf(p, sizeof p, "%s/accel/%s.lock", store_home(), im->ksha);
	if ((lk = lock_open(p, LOCK_EX)) < 0)
		die(EX_SYS, "unable to lock %s:", p);
	pathf(p, sizeof p, "%s/accel/%s.json", store_home(), im->ksha);
	if ((v = json_load_path(p))) {
		const char *a = json_string_value(json_object_get(v, "accel"));
		const char *r = json_string_value(json_object_get(v, "reason"));

		if (a && (!strcmp(a, "kvm") || !strcmp(a, "tcg"))) {
			snprintf(reason, rsz, "%s", r ? r : "");
			a = !strcmp(a, "kvm") ? "kvm" : "tcg";
			json_decref(v);
			close(lk);
			return a;
		}
		json_decref(v);
	}
	ok = probe_kvm(im, reason, rsz);
	v = json_pack("{s:s, s:s, s:s}", "accel", ok ? "kvm" : "tcg", "reason", reason,
		      "probed", iso_now(now, sizeof now));
	if (!v || json_write_atomic(p, v) < 0)
		warn("unable to record the kvm verdict in %s:", p);
	json_decref(v);
	close(lk);
	return ok ? "kvm" : "tcg";
}

/* ---- the supervisor --------------------------------------------------- */

/* Runs in the forked child; never returns.  lockfd is the open file
 * description holding vms/<id>/lock (inherited, so the lock never had a
 * gap), ctlfd reads 'r' from the parent once the boot succeeded (EOF before
 * that = the boot failed or its process died: kill QEMU), repfd gets
 * "<qemu pid>\n" or an error line, ownerfd is the owner's pidfd or -1. */
static void supervise(const char *id, const struct inst *in, char *const *av, int lockfd,
		      int ctlfd, int repfd, int ownerfd)
{
	static const char *const live[] = { "booting", "running", NULL };
	struct pollfd pf[4];
	sigset_t set;
	int nul, logfd, sfd, qfd, st = 0, ready = 0, killed = 0;
	const char *why = "qemu";
	char now[32];
	pid_t q;
	json_t *m;

	/* A session of its own: a terminal's Ctrl-C reaches the front end,
	 * which stops the VM cleanly, instead of killing QEMU under it.  The
	 * owner pidfd still ends the VM when the front end dies. */
	setsid();
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	/* Let go of the caller's stdio: a $(isopod-boot) must see EOF when
	 * isopod-boot exits, not when the VM does. */
	nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	logfd = open(in->qlog, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
		     0600);
	if (sfd < 0 || nul < 0 || logfd < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 ||
	    dup2(logfd, 2) < 0) {
		dprintf(repfd, "error: supervisor setup: %s\n", strerror(errno));
		_exit(111);
	}
	{
		int keep[] = { lockfd, ctlfd, repfd, ownerfd, sfd };

		close_except(keep, 5); /* logfd too: it lives on as fd 2 */
	}
	q = spawn(av, 2, 1);
	if (q < 0) {
		dprintf(repfd, "error: unable to fork: %s\n", strerror(errno));
		_exit(111);
	}
	qfd = pidfd_open_(q); /* our unreaped child: cannot be a recycled pid */
	if (qfd < 0) {
		kill(q, SIGKILL);
		dprintf(repfd, "error: pidfd_open: %s\n", strerror(errno));
		_exit(111);
	}
	dprintf(repfd, "%ld\n", (long)q);
	close(repfd);

	for (;;) {
		int n = 0, iq, is, io = -1, ic = -1;

		pf[iq = n++] = (struct pollfd){ qfd, POLLIN, 0 };
		pf[is = n++] = (struct pollfd){ sfd, POLLIN, 0 };
		if (ownerfd >= 0)
			pf[io = n++] = (struct pollfd){ ownerfd, POLLIN, 0 };
		if (ctlfd >= 0)
			pf[ic = n++] = (struct pollfd){ ctlfd, POLLIN, 0 };
		if (poll(pf, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			warn("supervisor: poll:");
			why = "error";
			kill(q, SIGKILL);
			break;
		}
		if (pf[iq].revents)
			break;
		if (pf[is].revents) {
			struct signalfd_siginfo si;

			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
				if (!killed) {
					warn("supervisor: signal %u: killing qemu", si.ssi_signo);
					why = "signal";
					killed = 1;
					kill(q, SIGKILL);
				}
		}
		if (io >= 0 && pf[io].revents) {
			if (!killed) {
				warn("supervisor: owner exited: killing qemu");
				why = "owner";
				killed = 1;
				kill(q, SIGKILL);
			}
			close(ownerfd);
			ownerfd = -1;
		}
		if (ic >= 0 && pf[ic].revents) {
			char b = 0;
			ssize_t r = read(ctlfd, &b, 1);

			if (r == 1 && b == 'r') {
				ready = 1;
			} else if (r < 0 && errno == EINTR) {
				continue;
			} else if (!ready && !killed) {
				/* no log line: the last line of qemu.log is the
				 * parent's diagnostic material */
				why = "boot";
				killed = 1;
				kill(q, SIGKILL);
			}
			if (r != 1 || ready) {
				close(ctlfd);
				ctlfd = -1;
			}
		}
	}
	while (waitpid(q, &st, 0) < 0 && errno == EINTR)
		;
	m = json_pack("{s:s, s:i, s:s}", "stopped_at", iso_now(now, sizeof now), "qemu_exit",
		      status_code(st), "stopped_by", why);
	if (!m || vm_meta_update(id, NULL, m) < 0)
		warn("supervisor: unable to update the record of %s:", id);
	json_decref(m);
	/* Before the parent confirmed the boot this is a failed boot; the
	 * parent, if alive, overwrites error with the specific reason. */
	if (ready)
		m = json_pack("{s:s}", "state", "stopped");
	else
		m = json_pack("{s:s, s:s}", "state", "failed", "error",
			      !strcmp(why, "boot") ? "isopod-boot failed or died before the agent answered"
						   : "qemu stopped before the agent answered");
	if (!m || vm_meta_update(id, live, m) < 0)
		warn("supervisor: unable to update the record of %s:", id);
	json_decref(m);
	/* Exiting closes lockfd: the VM is no longer running. */
	_exit(status_code(st) & 0xff);
}

/* ---- boot ------------------------------------------------------------- */

static struct {
	const char *id;
	pid_t sup;
	int supfd, ctlfd, lockfd;
} B = { NULL, -1, -1, -1, -1 };

/* Undo what was started, record state failed with the message, exit.
 * The supervisor is our child (not reaped), so signalling it by pid is safe. */
__attribute__((noreturn, format(printf, 2, 3))) static void fail(int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *m;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (B.ctlfd >= 0) { /* EOF without 'r': the supervisor kills QEMU */
		close(B.ctlfd);
		B.ctlfd = -1;
	}
	if (B.sup > 0) {
		struct pollfd p = { B.supfd, POLLIN, 0 };
		int st;

		if (B.supfd < 0 || poll(&p, 1, 3000) <= 0) {
			kill(B.sup, SIGTERM);
			p.revents = 0;
			if (B.supfd < 0 || poll(&p, 1, 2000) <= 0)
				kill(B.sup, SIGKILL);
		}
		while (waitpid(B.sup, &st, 0) < 0 && errno == EINTR)
			;
		if (vm_wait_stopped(B.id, mono_ms() + 5000) < 0)
			warn("vm %s: lock still held after its supervisor exited", B.id);
	}
	if (B.id) {
		m = json_pack("{s:s, s:s}", "state", "failed", "error", msg);
		if (!m || vm_meta_update(B.id, NULL, m) < 0)
			warn("unable to record the failure of %s:", B.id);
		json_decref(m);
	}
	die(code, "%s", msg);
}

static void range(const char *opt, const char *arg, long long lo, long long hi, const char *why,
		  long long *out)
{
	if (parse_ll(arg, lo, hi, out) < 0) {
		if (lo > hi)
			die(EX_USAGE, "%s %s: no valid value on this host (%s)", opt, arg, why);
		die(EX_USAGE, "%s %s: out of range %lld..%lld (%s)", opt, arg, lo, hi, why);
	}
}

static int valid_id(const char *s)
{
	size_t i, n = s ? strlen(s) : 0;

	if (n != 15 || strncmp(s, "vm-", 3))
		return 0;
	for (i = 3; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "vcpus", required_argument, NULL, 'c' },
		{ "mem-mib", required_argument, NULL, 'm' },
		{ "disk-mib", required_argument, NULL, 'd' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "owner-pid", required_argument, NULL, 'o' },
		{ "keep", no_argument, NULL, 'k' },
		{ "accel", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const booting[] = { "booting", NULL };
	const char *a_vcpus = NULL, *a_mem = NULL, *a_disk = NULL, *a_to = NULL, *a_owner = NULL;
	struct cfg cf = { 1, 512, 0, 60000, 0, 0, 0, NULL, NULL };
	char why[256], reason[512], meta[PATH_MAX], lockp[PATH_MAX], err[PATH_MAX + 128];
	char l1[256], l2[256];
	char line[64], *end;
	const char *id, *name, *state, *accel, *env;
	struct img im;
	struct inst in;
	struct qargs q;
	struct hello h = { 0 };
	json_t *claim, *rec, *m, *out;
	long ncpu;
	long long avail, memmax, disk_bytes, cur_bytes, v;
	int forked;
	int64_t t0 = mono_ms(), deadline;
	int c, ownerfd = -1, ctl[2], rep[2], r, st;
	ssize_t n;
	size_t got = 0;
	struct sockaddr_un sa;

	progname = "isopod-boot";
	signal(SIGPIPE, SIG_IGN); /* a dead supervisor or reader is an error, not a kill */
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'c': a_vcpus = optarg; break;
		case 'm': a_mem = optarg; break;
		case 'd': a_disk = optarg; break;
		case 't': a_to = optarg; break;
		case 'o': a_owner = optarg; break;
		case 'k': cf.keep = 1; break;
		case 'a':
			if (strcmp(optarg, "kvm") && strcmp(optarg, "tcg"))
				die(EX_USAGE, "--accel %s: want kvm or tcg", optarg);
			cf.accel = optarg;
			cf.accel_src = "--accel";
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (optind != argc)
		die(EX_USAGE, "usage: %s", USAGE);
	if (!cf.accel && (env = getenv("ISOPOD_ACCEL")) && *env) {
		if (strcmp(env, "kvm") && strcmp(env, "tcg"))
			die(EX_USAGE, "ISOPOD_ACCEL=%s: want kvm or tcg", env);
		cf.accel = env;
		cf.accel_src = "ISOPOD_ACCEL";
	}

	/* Ranges first, naming the host's headroom, before anything changes. */
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 1)
		ncpu = 1;
	if (a_vcpus) {
		snprintf(why, sizeof why, "the host has %ld CPUs", ncpu);
		range("--vcpus", a_vcpus, 1, ncpu, why, &cf.vcpus);
	}
	avail = mem_available_mib();
	memmax = avail * 3 / 4 < 16384 ? avail * 3 / 4 : 16384;
	snprintf(why, sizeof why, "host headroom: 75%% of %lld MiB available = %lld MiB", avail,
		 avail * 3 / 4);
	if (a_mem)
		range("--mem-mib", a_mem, 64, memmax, why, &cf.mem_mib);
	else if (cf.mem_mib > memmax)
		die(EX_USAGE, "default memory %lld MiB exceeds the host headroom (%s); pass --mem-mib",
		    cf.mem_mib, why);
	if (a_to)
		range("--timeout-ms", a_to, 1, 86400000, "milliseconds", &cf.timeout_ms);
	if (a_owner) {
		range("--owner-pid", a_owner, 1, INT_MAX, "a process id", &cf.owner);
	} else {
		cf.owner = getppid();
	}
	if (!cf.keep) {
		ownerfd = pidfd_open_((pid_t)cf.owner);
		if (ownerfd < 0) {
			if (errno == ESRCH)
				die(EX_USAGE, "owner pid %lld: no such process", cf.owner);
			die(EX_SYS, "unable to watch owner pid %lld:", cf.owner);
		}
	}

	claim = json_read_stdin();
	id = json_string_value(json_object_get(json_object_get(claim, "vm"), "id"));
	if (!valid_id(id))
		die(EX_USAGE, "standard input: want the JSON of isopod-claim with vm.id = vm-<12 hex>");
	pathf(meta, sizeof meta, "%s/vms/%s", store_home(), id);
	inst_paths(&in, meta);
	pathf(meta, sizeof meta, "%s/meta.json", in.dir);
	if (!(rec = json_load_path(meta))) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "no such vm: %s", id);
		die(EX_SYS, "unable to read %s:", meta);
	}
	resolve_kernel(&im);
	/* isopod-fork leaves the disk (over a stage chain) and the base it
	 * rests on in the record; boot then boots that disk as it is. */
	forked = access(in.disk, F_OK) == 0;
	if (forked) {
		json_t *b = json_object_get(rec, "base");
		const char *fl = json_string_value(json_object_get(b, "flavor"));
		const char *sh = json_string_value(json_object_get(b, "sha256"));

		if (!fl || !sh)
			die(EX_SYS, "vm %s has a disk but its record names no base", id);
		resolve_base(&im, fl, sh);
		if ((cur_bytes = qcow2_size(in.disk)) < 0)
			die(EX_SYS, "unable to read the qcow2 header of %s:", in.disk);
	} else {
		resolve_base(&im, "base", NULL);
		cur_bytes = im.base_size;
	}
	{
		long long minmib = (cur_bytes + MIB - 1) / MIB;

		if (a_disk) {
			snprintf(why, sizeof why, "the %s is %lld MiB",
				 forked ? "forked disk" : "base image", minmib);
			range("--disk-mib", a_disk, minmib, 1048576, why, &cf.disk_mib);
			cf.disk_given = 1;
		} else {
			cf.disk_mib = minmib;
		}
	}
	disk_bytes = cf.disk_given ? cf.disk_mib * MIB : cur_bytes;

	/* QEMU splits option values at ',' and unix sockets have a short path
	 * limit: refuse a store that cannot work rather than fail obscurely. */
	if (strchr(in.dir, ','))
		die(EX_USAGE, "store path %s contains ','; QEMU options cannot carry it", in.dir);
	if (strlen(in.agent) >= sizeof sa.sun_path || strlen(in.qmp) >= sizeof sa.sun_path)
		die(EX_USAGE, "store path %s is too long for a unix socket (max %zu bytes)", in.dir,
		    sizeof sa.sun_path - 1);
	/* The vm lock, taken here and handed down to the supervisor by fork:
	 * from now until QEMU is gone, gc sees the VM as running. */
	pathf(lockp, sizeof lockp, "%s/lock", in.dir);
	B.lockfd = lock_open(lockp, LOCK_EX | LOCK_NB);
	if (B.lockfd < 0) {
		if (errno == EWOULDBLOCK)
			die(EX_CONFLICT, "vm %s is already running", id);
		die(EX_SYS, "unable to lock %s:", lockp);
	}
	/* Decide on the record as it is under the lock, not as first read. */
	json_decref(rec);
	if (!(rec = json_load_path(meta)))
		die(EX_SYS, "unable to read %s:", meta);
	state = json_string_value(json_object_get(rec, "state"));
	if (!state || strcmp(state, "claimed"))
		die(EX_CONFLICT, "vm %s is %s, not claimed; claim a new one", id,
		    state ? state : "unknown");
	name = json_string_value(json_object_get(rec, "name"));
	if (!name)
		name = id;
	B.id = id;

	accel = choose_accel(&cf, &im, reason, sizeof reason);
	m = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s?, s:{s:s}, s:{s:s, s:s}, s:s, s:s, s:I, s:b}",
		      "state", "booting", "vcpus", (json_int_t)cf.vcpus, "mem_mib",
		      (json_int_t)cf.mem_mib, "disk_mib", (json_int_t)cf.disk_mib, "accel", accel,
		      "accel_reason", !strcmp(accel, "tcg") ? reason : NULL, "kernel", "sha256",
		      im.ksha, "base", "flavor", im.flavor, "sha256", im.bsha, "agent_sock", in.agent,
		      "qmp_sock", in.qmp, "owner_pid", (json_int_t)cf.owner, "keep", cf.keep);
	if (!m || vm_meta_update(id, NULL, m) < 0)
		die(EX_SYS, "unable to update %s:", meta);
	json_decref(m);

	if (!forked && make_overlay(&im, in.disk, disk_bytes, err, sizeof err) < 0)
		fail(EX_SYS, "%s", err);
	if (forked && disk_bytes > cur_bytes && grow_disk(in.disk, disk_bytes, err, sizeof err) < 0)
		fail(EX_SYS, "%s", err);
	unlink(in.agent);
	unlink(in.qmp);
	unlink(in.console);
	qemu_argv(&q, &in, &im, accel, cf.mem_mib, cf.vcpus);

	if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		fail(EX_SYS, "unable to create a pipe: %s", strerror(errno));
	fflush(NULL);
	B.sup = fork();
	if (B.sup < 0)
		fail(EX_SYS, "unable to fork: %s", strerror(errno));
	if (B.sup == 0) {
		close(ctl[1]);
		close(rep[0]);
		supervise(id, &in, q.av, B.lockfd, ctl[0], rep[1], ownerfd);
	}
	/* The supervisor's copy now carries the lock alone. */
	close(B.lockfd);
	B.lockfd = -1;
	close(ctl[0]);
	close(rep[1]);
	if (ownerfd >= 0)
		close(ownerfd);
	B.ctlfd = ctl[1];
	B.supfd = pidfd_open_(B.sup);

	while (got < sizeof line - 1 && (n = read(rep[0], line + got, sizeof line - 1 - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	close(rep[0]);
	line[got] = 0;
	if (got > 0 && line[got - 1] == '\n')
		line[got - 1] = 0;
	errno = 0;
	v = strtoll(line, &end, 10);
	if (!got || errno || *end || v <= 0)
		fail(EX_SYS, "supervisor failed to start qemu: %s", got ? line : "no report");
	m = json_pack("{s:I, s:I}", "supervisor_pid", (json_int_t)B.sup, "qemu_pid", (json_int_t)v);
	if (!m || vm_meta_update(id, booting, m) < 0)
		warn("unable to update %s:", meta);
	json_decref(m);

	/* Wait for the agent.  conn_open in short slices so that a QEMU that
	 * died before creating its socket is noticed at once. */
	deadline = t0 + cf.timeout_ms;
	for (;;) {
		struct pollfd p = { B.supfd, POLLIN, 0 };
		int64_t slice = mono_ms() + 100;

		if (conn_open(&conn, in.agent, slice < deadline ? slice : deadline) == 0)
			break;
		if (errno != ETIMEDOUT)
			fail(EX_SYS, "unable to connect to the agent: %s", conn.err);
		if (B.supfd >= 0 && poll(&p, 1, 0) > 0)
			break;
		if (mono_ms() >= deadline)
			break;
	}
	h.hostname = name;
	h.set_time = 1;
	h.seed = 1;
	h.grow = disk_bytes > cur_bytes;
	r = conn.fd >= 0 ? conn_hello(&conn, &h, deadline) : -1;
	if (r == 0) {
		B.ctlfd = -1;
		if (write(ctl[1], "r", 1) != 1) /* the supervisor is gone: QEMU is too */
			r = -1;
		close(ctl[1]);
	}
	if (r != 0) {
		struct pollfd p = { B.supfd, POLLIN, 0 };

		/* QEMU gone?  Give the supervisor a moment to notice and exit. */
		if (B.supfd >= 0 && poll(&p, 1, r == -3 ? 0 : 1000) > 0 &&
		    waitpid(B.sup, &st, 0) == B.sup) {
			B.sup = -1;
			last_line(in.qlog, l1, sizeof l1);
			last_line(in.console, l2, sizeof l2);
			fail(EX_SYS, "qemu exited with status %d before the agent answered%s%s%s%s",
			     status_code(st), l1[0] ? ": " : "", l1, l2[0] ? "; console: " : "", l2);
		}
		last_line(in.console, l2, sizeof l2);
		if (h.guest_error[0])
			fail(EX_SYS, "the guest agent reported: %s", h.guest_error);
		if (r == -3 || conn.fd < 0)
			fail(EX_TIMEOUT, "the guest agent did not answer within %lld ms%s%s",
			     cf.timeout_ms, l2[0] ? "; console: " : "", l2);
		fail(EX_SYS, "agent handshake failed: %s", conn.err);
	}
	conn_close(&conn);

	{
		int64_t boot_ms = mono_ms() - t0;
		static const char *const live[] = { "booting", NULL };

		m = json_pack("{s:s, s:I}", "state", "running", "boot_ms", (json_int_t)boot_ms);
		if (!m || vm_meta_update(id, live, m) < 0)
			warn("unable to update %s:", meta);
		json_decref(m);
		out = json_pack("{s:{s:s, s:s, s:s}, s:s, s:s, s:s, s:s, s:I, s:{s:s},"
				" s:{s:s, s:s}, s:s}",
				"vm", "id", id, "name", name, "dir", in.dir, "agent_sock", in.agent,
				"qmp_sock", in.qmp, "path", "cold", "accel", accel, "boot_ms",
				(json_int_t)boot_ms, "kernel", "sha256", im.ksha, "base", "flavor",
				im.flavor, "sha256", im.bsha, "root", h.root[0] ? h.root : "ro");
		if (!out)
			die(EX_SYS, "unable to build the output");
		if (!strcmp(accel, "tcg"))
			json_object_set_new(out, "accel_reason", json_string(reason));
		json_emit(out);
	}
	return 0;
}
