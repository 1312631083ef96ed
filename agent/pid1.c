/* pid1.c - the agent's duties as PID 1 and owner of the guest: boot (the
 * initramfs mounts, switching to the root disk, the console), the root disk
 * (read-write on first use, grown, resolv.conf) and SHUTDOWN. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* Kernel ioctls, spelled out: musl ships no linux headers. */
#ifndef BLKGETSIZE64
#define BLKGETSIZE64 _IOR(0x12, 114, size_t)
#endif
#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

/* ------------------------------------------------------------------ */
/* boot                                                                */

static int mnt(const char *src, const char *dst, const char *type,
	       unsigned long flags, const char *data)
{
	if (mount(src, dst, type, flags, data) == 0)
		return 0;
	logm("mount %s on %s: %s", type, dst, strerror(errno));
	return -1;
}

static void console_setup(void)
{
	int fd = open("/dev/console", O_RDWR | O_NOCTTY);

	if (fd < 0)
		fd = open("/dev/null", O_RDWR);
	if (fd < 0)
		return;
	dup2(fd, 0);
	dup2(fd, 1);
	dup2(fd, 2);
	if (fd > 2)
		close(fd);
}

/* What programs expect of /dev beyond the device nodes devtmpfs makes. */
static void dev_extras(void)
{
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" },
		{ "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" },
		{ "/proc/self/fd/2", "/dev/stderr" },
	};
	size_t i;

	for (i = 0; i < sizeof links / sizeof links[0]; i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			logm("symlink %s: %s", links[i][1], strerror(errno));
	if (mkdir("/dev/pts", 0755) < 0 && errno != EEXIST)
		logm("mkdir /dev/pts: %s", strerror(errno));
	mnt("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
	    "gid=5,mode=0620,ptmxmode=0666");
	if (mkdir("/dev/shm", 01777) < 0 && errno != EEXIST)
		logm("mkdir /dev/shm: %s", strerror(errno));
	mnt("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
}

static int cmdline_on(const char *key);

/* Mount the root disk read-only and make it / (the switch_root idiom:
 * pivot_root cannot leave an initramfs).  On failure we stay in the
 * initramfs and refuse to run anything: never run on a wrong root. */
static void root_switch(struct agent *a)
{
	int waited, rw;

	for (waited = 0; access(ROOT_DEV, F_OK) < 0; waited += 10) {
		if (waited >= WAIT_DEV_MS) {
			snprintf(a->root.err, sizeof a->root.err,
				 "root disk %s did not appear within %d s", ROOT_DEV,
				 WAIT_DEV_MS / 1000);
			return;
		}
		sleep_ms(10);
	}
	/* Read-only until the first command: a warm snapshot taken now can
	 * resume over any fresh overlay of the same disk chain.  Read-write
	 * at once when the host's command line says so (a cold run's boot,
	 * never a template's: lib/qemu.h root_rw), sparing the remount after
	 * the boot's HELLO_ACK. */
	rw = cmdline_on("isopod.root_rw");
	if (mount(ROOT_DEV, "/newroot", "ext4", rw ? 0 : MS_RDONLY, NULL) < 0) {
		snprintf(a->root.err, sizeof a->root.err, "mount %s (ext4, %s) on /newroot: %s",
			 ROOT_DEV, rw ? "read-write" : "read-only", strerror(errno));
		return;
	}
	if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0) {
		snprintf(a->root.err, sizeof a->root.err, "move /newroot to /: %s", strerror(errno));
		if (chdir("/") < 0 || umount2("/newroot", MNT_DETACH) < 0)
			logm("umount /newroot: %s", strerror(errno));
		return;
	}
	if (chroot(".") < 0 || chdir("/") < 0) {
		/* Half switched: not a root we can vouch for. */
		snprintf(a->root.err, sizeof a->root.err, "chroot to the root disk: %s", strerror(errno));
		return;
	}
	a->root.ok = 1;
	a->root.rw = rw;
	/* The initramfs /dev /proc /sys stay mounted underneath, unreachable
	 * and harmless; the root disk gets its own (its dirs exist: nothing
	 * is created on the root here, read-only or read-write). */
	mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt("run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	console_setup();
	dev_extras();
}

/* Is the last `key=` word of the line `buf` (split in place) `key=1`?
 * The last one wins, as for the kernel's own parameters (a line with
 * `key=1 key=0` is off); the host never writes a key twice. */
static int cmdline_flag(char *buf, const char *key)
{
	char *tok, *save = NULL;
	size_t kl = strlen(key);
	int on = 0;

	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strncmp(tok, key, kl) && tok[kl] == '=')
			on = !strcmp(tok + kl + 1, "1");
	return on;
}

/* The kernel's command line says `key=1` (last one winning)? */
static int cmdline_on(const char *key)
{
	char buf[2048];
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	return cmdline_flag(buf, key);
}

/* The protocol stamp images/register reads out of the initramfs (the agent
 * is stored there verbatim): kept though nothing here reads it. */
__attribute__((used)) static const char proto_stamp[] = ISOPOD_PROTO_STAMP;

void boot(struct agent *a)
{
	static const char *const dirs[] = { "/dev", "/proc", "/sys", "/newroot" };
	size_t i;

	umask(022);
	for (i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
		mkdir(dirs[i], 0755);
	mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	console_setup();
	mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	logm("starting, protocol %u", ISOPOD_PROTO_VERSION);
	root_switch(a);
	if (!a->root.ok)
		logm("%s: refusing to run commands", a->root.err);
	lo_up();
	/* make bench's baseline: the very same boot up to a mounted root,
	 * then power off, with no host in the loop. */
	if (cmdline_on("isopod.bench_exit")) {
		sync();
		reboot(RB_AUTOBOOT);
	}
}

/* ------------------------------------------------------------------ */
/* the root disk: read-write on first use, grown, resolv.conf          */

void grow_root(struct agent *a)
{
	uint64_t bytes = 0, blocks;
	struct statfs sf;
	int fd;

	fd = open(ROOT_DEV, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, BLKGETSIZE64, &bytes) < 0) {
		logm("grow: size of %s: %s", ROOT_DEV, strerror(errno));
		close_fd(&fd);
		return;
	}
	close(fd);
	if (statfs("/", &sf) < 0 || sf.f_bsize <= 0) {
		logm("grow: statfs /: %s", strerror(errno));
		return;
	}
	blocks = bytes / (uint64_t)sf.f_bsize;
	fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	/* ext4 answers a same-size request with success, a smaller one with
	 * EINVAL (no shrinking): both fine when the disk was not enlarged. */
	if (fd < 0 || ioctl(fd, EXT4_IOC_RESIZE_FS, &blocks) < 0)
		logm("grow / to %llu blocks: %s", (unsigned long long)blocks, strerror(errno));
	else
		logm("root grown to %llu blocks of %ld", (unsigned long long)blocks, (long)sf.f_bsize);
	close_fd(&fd);
	a->root.grow = 0;
}

/* tmp + rename: replaces a symlink (stub resolvers) instead of writing
 * through it. */
void write_resolv(struct agent *a)
{
	static const char tmp[] = "/etc/.resolv.conf.isopod";
	char buf[128];
	int fd, n;

	n = snprintf(buf, sizeof buf, "nameserver %s\n", a->root.dns);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || write(fd, buf, (size_t)n) != n || close(fd) < 0 ||
	    rename(tmp, "/etc/resolv.conf") < 0) {
		logm("write /etc/resolv.conf: %s", strerror(errno));
		unlink(tmp);
	}
	a->root.dns[0] = 0;
}

/* 0 when / is writable; else -1 with the reason in err. */
int root_make_rw(struct agent *a, char *err, size_t errsz)
{
	if (!a->root.ok) {
		snprintf(err, errsz, "%s", a->root.err);
		return -1;
	}
	if (!a->root.rw && mount(NULL, "/", NULL, MS_REMOUNT, NULL) < 0) {
		snprintf(err, errsz, "remount / read-write: %s", strerror(errno));
		return -1;
	}
	a->root.rw = 1;
	/* a HELLO's GROW and DNS wait for this, also on a root mounted
	 * read-write at boot (hello_apply: after the HELLO_ACK) */
	if (a->root.grow)
		grow_root(a);
	if (a->root.dns[0])
		write_resolv(a);
	return 0;
}

/* HELLO's ROOT_RW, once its HELLO_ACK is written: the first command's
 * remount (ext4's journal and superblock writes, the overlay's first
 * allocating writes and their flush) done while the host is still
 * between its boot and that command.  A failure is the first command's
 * to report (root_make_rw again); here it is only logged. */
void root_rw_soon(struct agent *a)
{
	char err[600];

	a->root.rw_soon = 0;
	if (a->root.ok && root_make_rw(a, err, sizeof err) < 0)
		logm("%s (the first command will try again)", err);
}

/* ------------------------------------------------------------------ */
/* SHUTDOWN                                                            */

static void reap_all(int ms)
{
	int64_t end = mono_ms() + ms;
	pid_t pid;

	for (;;) {
		pid = waitpid(-1, NULL, WNOHANG);
		if (pid > 0)
			continue;
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0 || mono_ms() >= end)
			return; /* ECHILD: all gone */
		sleep_ms(5);
	}
}

void on_shutdown(struct agent *a)
{
	char err[300] = "";
	uint8_t buf[400];
	struct tlv_w w;

	logm("shutdown requested");
	op_abort(a);
	kill(-1, SIGKILL); /* everything but us */
	reap_all(2000);
	sync();
	/* A clean read-only root is what makes the overlay committable. */
	if (a->root.ok && mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
		snprintf(err, sizeof err, "remount / read-only: %s", strerror(errno));
	else
		a->root.rw = 0;
	sync();
	tlv_init(&w, buf, sizeof buf);
	if (err[0]) {
		logm("%s", err);
		tlv_put_str(&w, T_ERROR, err);
	}
	out_tlv(a, F_SHUTDOWN_ACK, STREAM_CTL, &w);
	flush_wait(a, 2000);
	hangup_wait(a, 2000);
	reboot(RB_AUTOBOOT);
	logm("reboot: %s", strerror(errno));
	conn_reset(a, "was told to shut down");
}
