/* agent.c - the isopod guest agent: /init, PID 1 of every isopod microVM.
 *
 * It mounts the root disk read-only and switches to it, finds the
 * virtio-serial port named isopod.agent and serves doc/PROTOCOL.md on it:
 * one host at a time, one operation at a time, all of it in one poll() loop
 * over the port, a signalfd, a timerfd and the running command's pipes.
 *
 * PID 1 must never die: the kernel would panic and the host would see a
 * hang instead of an error.  So nothing here exits or aborts: every failure
 * is reported to the host (ERROR or EXIT frame, T_ERROR of HELLO_ACK) and
 * on the console, and the loop goes on.
 *
 * Flow control.  Toward the host, frames go through one output buffer; the
 * command's pipes (and FILE_GET) are not read while it holds more than
 * OUT_HIGH bytes, so a slow host slows the command down instead of growing
 * the buffer.  Toward the command, the host never has more than
 * FRAME_INITIAL_CREDIT bytes in flight on a stream: each byte we hand to the
 * command's stdin (or the file) is given back as F_CREDIT, so the stdin ring
 * below can never overflow and the port is always read (PING, EOF, the next
 * frame are never stuck behind stdin data).
 */
#include "frame.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Kernel ioctls, spelled out: musl ships no linux headers. */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif
#ifndef BLKGETSIZE64
#define BLKGETSIZE64 _IOR(0x12, 114, size_t)
#endif
#ifndef EXT4_IOC_RESIZE_FS
#define EXT4_IOC_RESIZE_FS _IOW('f', 16, uint64_t)
#endif

#define AGENT "isopod-agent: "
#define ROOT_DEV "/dev/vda"
#define PORT_NAME "isopod.agent"
#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* Stop reading command output / FILE_GET above this much queued output. */
#define OUT_HIGH (256u * 1024u)
/* Stop reading the port above this: only a host that sends requests (PING)
 * without ever reading could get here; never reached by the data paths. */
#define OUT_STOP_INPUT (4u * 1024u * 1024u)
/* Frames beyond this are dropped (logged) rather than kill PID 1. */
#define OUT_MAX (16u * 1024u * 1024u)
#define RBUF_SZ (2u * (FRAME_HDR + FRAME_MAX_PAYLOAD))
/* virtio_console turns each write() into one buffer of at most 32 KiB, and
 * QEMU drops the unsent rest of a buffer when its client hangs up.  Writing
 * whole frames only, each write at most this long, keeps every buffer
 * frame-aligned: a host that connects right after another one vanished
 * sees whole stale frames, never the tail of one. */
#define PORT_WRITE_MAX (32u * 1024u)
/* So a DATA frame, header included, fits in one write. */
#define OUT_DATA_CHUNK (PORT_WRITE_MAX - FRAME_HDR)
/* Bytes read from the port per loop turn, so pipes and timers get a turn. */
#define READ_BUDGET (512u * 1024u)
/* Bigger pipes: fewer wake-ups per MiB under TCG, where syscalls are dear. */
#define PIPE_SZ (1024 * 1024)
/* After the main process exits: wait this long for its pipes to hit EOF
 * (the clock only runs while the host keeps up), never longer than MAX. */
#define DRAIN_MS 2000
#define DRAIN_MAX_MS 30000
/* The same after a timeout: the budget is spent, what the pipes hold is read
 * at once, and a process that left the group is not waited for: EXIT must
 * reach the host within its grace (1.5 s after the deadline, isopod-exec),
 * or the host stops the VM. */
#define DRAIN_TIMEOUT_MS 250
#define DRAIN_TIMEOUT_MAX_MS 1000
#define WAIT_DEV_MS 10000
/* A read of 0 right after data is a hang-up only once it has lasted this
 * long (see port_read). */
#define HANGUP_CONFIRM_MS 250

/* ------------------------------------------------------------------ */
/* diagnostics and time                                                */

static void logm(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logm(const char *fmt, ...)
{
	char buf[1024];
	size_t len = sizeof AGENT - 1, room;
	va_list ap;
	int n;

	memcpy(buf, AGENT, len);
	room = sizeof buf - len - 1; /* keep one byte for the newline */
	va_start(ap, fmt);
	n = vsnprintf(buf + len, room, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	len += (size_t)n < room ? (size_t)n : room - 1;
	buf[len++] = '\n';
	/* The console is diagnostics only; nothing to do if it fails. */
	if (write(2, buf, len) < 0)
		return;
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Append "; text" (or "text") to a NUL-terminated message buffer. */
static void errcat(char *buf, size_t sz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errcat(char *buf, size_t sz, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	if (len && len + 2 < sz) {
		memcpy(buf + len, "; ", 3);
		len += 2;
	}
	if (len + 1 >= sz)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, sz - len, fmt, ap);
	va_end(ap);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int clear_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* ------------------------------------------------------------------ */
/* state                                                               */

static struct {
	int fd;          /* the virtio-serial port, -1 until found */
	char dev[300];
	int64_t retry_at;/* no host (or no port yet): look again at this time */
	int active;      /* a host sent bytes since the last reset */
	int poisoned;    /* malformed input: ignore all until hang-up or HELLO */
	int helloed;     /* a HELLO with our version was answered */
	int64_t eof_since; /* a read said "no host" after data: since when */
	size_t rlen, roff;
	uint8_t rbuf[RBUF_SZ];
} port;

static struct {
	uint8_t *p;
	size_t off, len, cap;
	size_t split; /* rest of a write the driver took only in part */
} out;

static struct {
	int ok;          /* the root disk is mounted at / */
	int rw;
	int grow;        /* HELLO asked to grow the fs to the disk on remount rw */
	char err[512];   /* why it is not ok */
	char dns[64];    /* T_NET_DNS, written to /etc/resolv.conf once rw */
} root;

enum op { OP_NONE, OP_EXEC, OP_PUT, OP_GET };
static enum op op;

enum { STAGE_OK, STAGE_SETUP, STAGE_CWD, STAGE_EXEC };

static struct {
	pid_t pid;          /* main process; also its process group and session */
	int reaped, wstatus;
	int in_fd, out_fd, err_fd, st_fd; /* our ends of stdin/out/err/status */
	int with_stdin;     /* the host streams STREAM_STDIN */
	int stdin_eof;      /* the host sent EOF on stdin */
	int timed_out;
	int st_stage, st_errno; /* spawn failure reported by the child */
	int64_t drain_until, drain_cap;
	size_t rhead, rlen; /* stdin ring */
	char argv0[256], cwd[PATH_MAX];
} ex;
/* Exactly the credit window: the host can never have more in flight. */
static uint8_t stdin_ring[FRAME_INITIAL_CREDIT];

static struct {
	int fd;
	int failed;      /* error reported: drop stream-4 data until EOF */
	uint64_t bytes;
	char path[PATH_MAX];
} put;

static struct {
	int fd;
	uint64_t bytes;
	uint64_t size;   /* st_size at open: never more is sent */
	uint32_t mode;
	char path[PATH_MAX];
} get;

static uint64_t credit_due[STREAM_MAX + 1];
static int sigfd = -1, tfd = -1;

/* fds start closed; done at run time so the buffers above stay in .bss. */
static void state_init(void)
{
	port.fd = -1;
	ex.in_fd = ex.out_fd = ex.err_fd = ex.st_fd = -1;
	put.fd = -1;
	get.fd = -1;
}

/* ------------------------------------------------------------------ */
/* output toward the host                                              */

static size_t out_pending(void)
{
	return out.len - out.off;
}

/* Room for n more bytes at the end of the output buffer; NULL when memory
 * ran out (the caller drops the frame: PID 1 must not die for a buffer). */
static uint8_t *out_reserve(size_t n)
{
	size_t need, cap;
	uint8_t *p;

	if (out.off == out.len)
		out.off = out.len = 0;
	if (out.cap - out.len >= n)
		return out.p + out.len;
	if (out.off) {
		memmove(out.p, out.p + out.off, out.len - out.off);
		out.len -= out.off;
		out.off = 0;
		if (out.cap - out.len >= n)
			return out.p + out.len;
	}
	need = out.len + n;
	if (need > OUT_MAX)
		return NULL;
	for (cap = out.cap ? out.cap : 64 * 1024; cap < need; cap *= 2)
		;
	p = realloc(out.p, cap);
	if (!p)
		return NULL;
	out.p = p;
	out.cap = cap;
	return out.p + out.len;
}

static void out_frame(uint8_t type, uint32_t stream, const void *payload, size_t n)
{
	uint8_t *dst = FRAME_HDR + n <= PORT_WRITE_MAX ? out_reserve(FRAME_HDR + n) : NULL;

	if (!dst) {
		logm("no room for a frame of type %u (%zu bytes): dropped", type, n);
		return;
	}
	frame_hdr(dst, type, stream, (uint32_t)n);
	if (n)
		memcpy(dst + FRAME_HDR, payload, n);
	out.len += FRAME_HDR + n;
}

static void out_tlv(uint8_t type, uint32_t stream, const struct tlv_w *w)
{
	if (w->err) {
		logm("frame of type %u does not fit: dropped", type);
		return;
	}
	out_frame(type, stream, w->buf, w->len);
}

static void send_error(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_error(const char *kind, const char *fmt, ...)
{
	char msg[1024];
	uint8_t buf[1100];
	struct tlv_w w;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	logm("error %s: %s", kind, msg);
	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_ERROR_KIND, kind);
	tlv_put_str(&w, T_MESSAGE, msg);
	out_tlv(F_ERROR, STREAM_CTL, &w);
}

/* One F_CREDIT per stream and loop turn, for what was consumed meanwhile. */
static void credit_flush(void)
{
	uint8_t buf[16];
	struct tlv_w w;
	uint32_t s;

	for (s = 0; s <= STREAM_MAX; s++) {
		if (!credit_due[s])
			continue;
		tlv_init(&w, buf, sizeof buf);
		tlv_put_u64(&w, T_BYTES, credit_due[s]);
		out_tlv(F_CREDIT, s, &w);
		credit_due[s] = 0;
	}
}

/* Queue a DATA frame of at most `max` bytes read straight from fd into the
 * output buffer.  Returns the read() result (-1 with errno; -2 when out of
 * memory). */
static ssize_t out_read_data(int fd, uint32_t stream, uint64_t max)
{
	uint8_t *dst = out_reserve(FRAME_HDR + OUT_DATA_CHUNK);
	ssize_t n;

	if (!dst)
		return -2;
	n = read(fd, dst + FRAME_HDR, max < OUT_DATA_CHUNK ? (size_t)max : OUT_DATA_CHUNK);
	if (n > 0) {
		frame_hdr(dst, F_DATA, stream, (uint32_t)n);
		out.len += FRAME_HDR + (size_t)n;
	}
	return n;
}

/* ------------------------------------------------------------------ */
/* connection                                                          */

static void op_abort(void);

/* The host is gone (or started over): nothing of its session survives. */
static void conn_reset(const char *why)
{
	if (port.active)
		logm("host %s: connection state reset", why);
	op_abort();
	out.off = out.len = out.split = 0;
	port.rlen = port.roff = 0;
	memset(credit_due, 0, sizeof credit_due);
	port.active = port.poisoned = port.helloed = 0;
	port.eof_since = 0;
}

/* Length of the next write: whole queued frames, at most PORT_WRITE_MAX
 * (out_frame never queues a bigger frame; if one were, it would go alone
 * and the driver's partial writes would be finished through out.split). */
static size_t out_next_write(void)
{
	size_t n = 0, f, pend = out_pending();

	if (out.split)
		return out.split;
	while (pend - n >= FRAME_HDR) {
		f = FRAME_HDR + (size_t)get_le32(out.p + out.off + n);
		if (n && n + f > PORT_WRITE_MAX)
			break;
		n += f;
	}
	return n;
}

static void port_flush(void)
{
	size_t want;
	ssize_t n;

	while (port.fd >= 0 && (want = out_next_write()) > 0) {
		n = write(port.fd, out.p + out.off, want);
		if (n > 0) {
			out.off += (size_t)n;
			out.split = want - (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		/* 0: the driver could not queue the buffer; it says EAGAIN
		 * (or POLLOUT) once it can. */
		if (n == 0 || errno == EAGAIN)
			return;
		logm("write %s: %s", port.dev, strerror(errno));
		conn_reset("unwritable");
		port.retry_at = mono_ms() + 10;
		return;
	}
}

/* Read the name files under /sys/class/virtio-ports; open the port whose
 * name is isopod.agent.  0 when open. */
static int port_try_open(void)
{
	char path[600], name[64];
	struct dirent *de;
	DIR *d;
	ssize_t n;
	int fd;

	d = opendir("/sys/class/virtio-ports");
	if (!d)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, name, sizeof name - 1);
		close(fd);
		if (n <= 0)
			continue;
		name[n] = 0;
		name[strcspn(name, "\n")] = 0;
		if (strcmp(name, PORT_NAME) != 0)
			continue;
		snprintf(port.dev, sizeof port.dev, "/dev/%s", de->d_name);
		port.fd = open(port.dev, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (port.fd < 0)
			continue; /* the node may lag the sysfs entry */
		closedir(d);
		logm("serving on %s", port.dev);
		return 0;
	}
	closedir(d);
	return -1;
}

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

/* Mount the root disk read-only and make it / (the switch_root idiom:
 * pivot_root cannot leave an initramfs).  On failure we stay in the
 * initramfs and refuse to run anything: never run on a wrong root. */
static void root_switch(void)
{
	int waited;

	for (waited = 0; access(ROOT_DEV, F_OK) < 0; waited += 10) {
		if (waited >= WAIT_DEV_MS) {
			snprintf(root.err, sizeof root.err,
				 "root disk %s did not appear within %d s", ROOT_DEV,
				 WAIT_DEV_MS / 1000);
			return;
		}
		sleep_ms(10);
	}
	/* Read-only until the first command: a warm snapshot taken now can
	 * resume over any fresh overlay of the same disk chain. */
	if (mount(ROOT_DEV, "/newroot", "ext4", MS_RDONLY, NULL) < 0) {
		snprintf(root.err, sizeof root.err, "mount %s (ext4, read-only) on /newroot: %s",
			 ROOT_DEV, strerror(errno));
		return;
	}
	if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0) {
		snprintf(root.err, sizeof root.err, "move /newroot to /: %s", strerror(errno));
		if (chdir("/") < 0 || umount2("/newroot", MNT_DETACH) < 0)
			logm("umount /newroot: %s", strerror(errno));
		return;
	}
	if (chroot(".") < 0 || chdir("/") < 0) {
		/* Half switched: not a root we can vouch for. */
		snprintf(root.err, sizeof root.err, "chroot to the root disk: %s", strerror(errno));
		return;
	}
	root.ok = 1;
	/* The initramfs /dev /proc /sys stay mounted underneath, unreachable
	 * and harmless; the root disk gets its own (its dirs exist: the root
	 * is read-only now, so nothing can be created on it). */
	mnt("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mnt("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	mnt("run", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	console_setup();
	dev_extras();
}

static void set_sin(struct sockaddr *sa, in_addr_t a)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = a;
	memcpy(sa, &sin, sizeof sin);
}

static void lo_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0) {
		logm("socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		logm("lo: SIOCGIFFLAGS: %s", strerror(errno));
		goto out;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		logm("lo: up: %s", strerror(errno));
	/* Linux gives lo 127.0.0.1/8 when it comes up; set it if it did not. */
	if (ioctl(s, SIOCGIFADDR, &ifr) == 0)
		goto out;
	set_sin(&ifr.ifr_addr, htonl(INADDR_LOOPBACK));
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		logm("lo: SIOCSIFADDR: %s", strerror(errno));
	set_sin(&ifr.ifr_netmask, htonl(0xff000000u));
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
		logm("lo: SIOCSIFNETMASK: %s", strerror(errno));
out:
	close(s);
}

/* Is `word` one of the kernel command line's words? */
static int cmdline_has(const char *word)
{
	char buf[2048], *tok, *save = NULL;
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strcmp(tok, word))
			return 1;
	return 0;
}

static void boot(void)
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
	root_switch();
	if (!root.ok)
		logm("%s: refusing to run commands", root.err);
	lo_up();
	/* make bench's baseline: the very same boot up to a mounted root,
	 * then power off, with no host in the loop. */
	if (cmdline_has("isopod.bench_exit=1")) {
		sync();
		reboot(RB_AUTOBOOT);
	}
}

/* ------------------------------------------------------------------ */
/* the root disk: read-write on first use, grown, resolv.conf          */

static void grow_root(void)
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
	root.grow = 0;
}

/* tmp + rename: replaces a symlink (stub resolvers) instead of writing
 * through it. */
static void write_resolv(void)
{
	static const char tmp[] = "/etc/.resolv.conf.isopod";
	char buf[128];
	int fd, n;

	n = snprintf(buf, sizeof buf, "nameserver %s\n", root.dns);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || write(fd, buf, (size_t)n) != n || close(fd) < 0 ||
	    rename(tmp, "/etc/resolv.conf") < 0) {
		logm("write /etc/resolv.conf: %s", strerror(errno));
		unlink(tmp);
	}
	root.dns[0] = 0;
}

/* 0 when / is writable; else -1 with the reason in err. */
static int root_make_rw(char *err, size_t errsz)
{
	if (!root.ok) {
		snprintf(err, errsz, "%s", root.err);
		return -1;
	}
	if (root.rw)
		return 0;
	if (mount(NULL, "/", NULL, MS_REMOUNT, NULL) < 0) {
		snprintf(err, errsz, "remount / read-write: %s", strerror(errno));
		return -1;
	}
	root.rw = 1;
	if (root.grow)
		grow_root();
	if (root.dns[0])
		write_resolv();
	return 0;
}

/* ------------------------------------------------------------------ */
/* HELLO                                                               */

struct hello_req {
	uint32_t version;
	int have_version;
	uint64_t cookie;
	char hostname[65];
	int have_time;
	uint64_t time_ns;
	const uint8_t *seed;
	uint32_t seedlen;
	int grow;
	char net_addr[64], net_gw[64], net_dns[64];
	uint32_t net_mtu;
	uint8_t net_mac[6];
	int have_mac;
};

static void add_entropy(const uint8_t *p, uint32_t len, char *err, size_t errsz)
{
	/* struct rand_pool_info: entropy_count (bits), buf_size, buf */
	struct {
		int entropy_count;
		int buf_size;
		uint8_t buf[512];
	} info;
	int fd;

	if (len > sizeof info.buf)
		len = sizeof info.buf;
	info.entropy_count = (int)len * 8;
	info.buf_size = (int)len;
	memcpy(info.buf, p, len);
	fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, RNDADDENTROPY, &info) < 0) {
		/* Clones of one snapshot would share their RNG state. */
		errcat(err, errsz, "seed the RNG: %s", strerror(errno));
		close_fd(&fd);
		return;
	}
	/* Older kernels lack RNDRESEEDCRNG (EINVAL); the entropy is in. */
	if (ioctl(fd, RNDRESEEDCRNG) < 0 && errno != EINVAL)
		errcat(err, errsz, "reseed the RNG: %s", strerror(errno));
	close(fd);
	explicit_bzero(&info, sizeof info);
}

static int parse_cidr(const char *s, in_addr_t *addr, in_addr_t *mask)
{
	char ip[64], *slash, *end;
	struct in_addr a;
	unsigned long pfx = 32;

	snprintf(ip, sizeof ip, "%s", s);
	slash = strchr(ip, '/');
	if (slash) {
		*slash = 0;
		errno = 0;
		pfx = strtoul(slash + 1, &end, 10);
		if (errno || *end || end == slash + 1 || pfx > 32)
			return -1;
	}
	if (inet_pton(AF_INET, ip, &a) != 1)
		return -1;
	*addr = a.s_addr;
	*mask = pfx ? htonl(0xffffffffu << (32 - pfx)) : 0;
	return 0;
}

/* eth0 from HELLO's NET_*: MAC, MTU, address, up, default route.  A warm
 * clone wakes up with whatever its template had, and each of these
 * replaces that rather than adding to it:
 * - the MAC is set every time, even when eth0 has it already: Linux 6.1
 *   hands every SIOCSIFHWADDR to virtio_net, which sends
 *   VIRTIO_NET_CTRL_MAC_ADDR_SET on the control queue, and that is what
 *   moves QEMU's receive filter (its MAC came with the template's device
 *   state) to this VM's MAC; without it QEMU drops every unicast frame
 *   sent to the new MAC.  The link goes down for a new MAC, so that
 *   neighbours and the IPv6 link-local address are made afresh;
 * - SIOCSIFADDR replaces eth0's primary address (the kernel moves its
 *   prefix route along);
 * - every default route is deleted before ours is added.
 * Failures go to err: a run that asked for a network and has none must
 * fail, not carry on. */
static void net_config(const struct hello_req *h, char *err, size_t errsz)
{
	static char dev[] = "eth0";
	struct ifreq ifr;
	struct rtentry rt;
	in_addr_t addr, mask;
	struct in_addr gw;
	int s, i;
	short flags;

	if (parse_cidr(h->net_addr, &addr, &mask) < 0) {
		errcat(err, errsz, "net: bad NET_ADDR \"%s\"", h->net_addr);
		return;
	}
	if (h->net_gw[0] && inet_pton(AF_INET, h->net_gw, &gw) != 1) {
		errcat(err, errsz, "net: bad NET_GW \"%s\"", h->net_gw);
		return;
	}
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		errcat(err, errsz, "net: socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, dev);
#define NET_IOCTL(req, what)                                                      \
	do {                                                                      \
		if (ioctl(s, req, &ifr) < 0) {                                    \
			errcat(err, errsz, "net: %s %s: %s", what, dev, strerror(errno)); \
			goto out;                                                 \
		}                                                                 \
	} while (0)
	NET_IOCTL(SIOCGIFFLAGS, "get flags of");
	flags = ifr.ifr_flags;
	if (h->have_mac) {
		NET_IOCTL(SIOCGIFHWADDR, "get MAC of");
		if (memcmp(ifr.ifr_hwaddr.sa_data, h->net_mac, 6) && (flags & IFF_UP)) {
			ifr.ifr_flags = (short)(flags & ~IFF_UP);
			NET_IOCTL(SIOCSIFFLAGS, "down");
		}
		ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
		memcpy(ifr.ifr_hwaddr.sa_data, h->net_mac, 6);
		NET_IOCTL(SIOCSIFHWADDR, "set MAC of");
	}
	if (h->net_mtu) {
		ifr.ifr_mtu = (int)h->net_mtu;
		NET_IOCTL(SIOCSIFMTU, "set MTU of");
	}
	set_sin(&ifr.ifr_addr, addr);
	NET_IOCTL(SIOCSIFADDR, "set address of");
	set_sin(&ifr.ifr_netmask, mask);
	NET_IOCTL(SIOCSIFNETMASK, "set netmask of");
	NET_IOCTL(SIOCGIFFLAGS, "get flags of");
	ifr.ifr_flags |= IFF_UP;
	NET_IOCTL(SIOCSIFFLAGS, "up");
#undef NET_IOCTL
	/* Whatever default route there is (a template's, or a previous
	 * HELLO's) goes; ESRCH: none left.  Bounded: a route table that
	 * keeps answering is not worth a hung PID 1. */
	for (i = 0; i < 16; i++) {
		memset(&rt, 0, sizeof rt);
		set_sin(&rt.rt_dst, INADDR_ANY);
		set_sin(&rt.rt_genmask, INADDR_ANY);
		rt.rt_flags = RTF_UP;
		if (ioctl(s, SIOCDELRT, &rt) < 0)
			break;
	}
	if (h->net_gw[0]) {
		memset(&rt, 0, sizeof rt);
		set_sin(&rt.rt_dst, INADDR_ANY);
		set_sin(&rt.rt_genmask, INADDR_ANY);
		set_sin(&rt.rt_gateway, gw.s_addr);
		rt.rt_flags = RTF_UP | RTF_GATEWAY;
		rt.rt_dev = dev;
		if (ioctl(s, SIOCADDRT, &rt) < 0)
			errcat(err, errsz, "net: default route via %s: %s", h->net_gw,
			       strerror(errno));
	}
out:
	close(s);
}

/* Decode HELLO into h; problems go to err (they make HELLO_ACK fail). */
static void hello_parse(const struct frame *fr, struct hello_req *h, char *err, size_t errsz)
{
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len;
	uint8_t tag;
	int rc, bad;

	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		bad = 0;
		switch (tag) {
		case T_VERSION:
			bad = tlv_u32(val, len, &h->version);
			h->have_version = !bad;
			break;
		case T_COOKIE:
			bad = tlv_u64(val, len, &h->cookie);
			break;
		case T_HOSTNAME:
			bad = tlv_str(val, len, h->hostname, sizeof h->hostname);
			break;
		case T_TIME_NS:
			bad = tlv_u64(val, len, &h->time_ns);
			h->have_time = !bad;
			break;
		case T_SEED:
			h->seed = val;
			h->seedlen = len;
			break;
		case T_GROW: {
			uint32_t g;

			bad = tlv_u32(val, len, &g);
			h->grow = !bad && g;
			break;
		}
		case T_NET_ADDR:
			bad = tlv_str(val, len, h->net_addr, sizeof h->net_addr);
			break;
		case T_NET_GW:
			bad = tlv_str(val, len, h->net_gw, sizeof h->net_gw);
			break;
		case T_NET_DNS:
			bad = tlv_str(val, len, h->net_dns, sizeof h->net_dns);
			break;
		case T_NET_MTU:
			bad = tlv_u32(val, len, &h->net_mtu);
			break;
		case T_NET_MAC:
			bad = len != 6;
			if (!bad) {
				memcpy(h->net_mac, val, 6);
				h->have_mac = 1;
			}
			break;
		default:
			break; /* unknown tags are skipped */
		}
		if (bad)
			errcat(err, errsz, "HELLO: bad value for tag %u", tag);
	}
	if (rc < 0)
		errcat(err, errsz, "HELLO: truncated TLV");
}

static void hello_apply(const struct hello_req *h, char *err, size_t errsz)
{
	struct timespec ts;

	if (h->hostname[0] && sethostname(h->hostname, strlen(h->hostname)) < 0)
		logm("sethostname %s: %s", h->hostname, strerror(errno));
	if (h->have_time) {
		ts.tv_sec = (time_t)(h->time_ns / 1000000000u);
		ts.tv_nsec = (long)(h->time_ns % 1000000000u);
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			logm("clock_settime: %s", strerror(errno));
	}
	if (h->seed)
		add_entropy(h->seed, h->seedlen, err, errsz);
	if (h->net_addr[0])
		net_config(h, err, errsz);
	else if (h->net_gw[0] || h->net_mtu || h->have_mac)
		errcat(err, errsz, "net: NET_* given without NET_ADDR");
	if (h->net_dns[0]) {
		snprintf(root.dns, sizeof root.dns, "%s", h->net_dns);
		if (root.rw)
			write_resolv();
	}
	if (h->grow) {
		root.grow = 1;
		if (root.rw)
			grow_root();
	}
}

static void on_hello(const struct frame *fr)
{
	struct hello_req h;
	char err[1024] = "";
	uint8_t buf[1200];
	struct tlv_w w;

	memset(&h, 0, sizeof h);
	hello_parse(fr, &h, err, sizeof err);
	/* A HELLO starts a new session: whatever ran belongs to a host that
	 * is gone (we may have missed its hang-up), and so does the output
	 * still queued for it. */
	if (op != OP_NONE) {
		logm("HELLO during an operation: aborting it");
		op_abort();
	}
	out.off = out.len = out.split = 0;
	memset(credit_due, 0, sizeof credit_due);
	port.helloed = 0;
	if (!h.have_version || h.version != ISOPOD_PROTO_VERSION) {
		errcat(err, sizeof err, "protocol version mismatch: host %u, agent %u",
		       h.have_version ? h.version : 0, ISOPOD_PROTO_VERSION);
	} else {
		hello_apply(&h, err, sizeof err);
		port.helloed = 1;
	}
	if (!root.ok)
		errcat(err, sizeof err, "%s", root.err);
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&w, T_COOKIE, h.cookie);
	tlv_put_str(&w, T_ROOT, root.rw ? "rw" : "ro");
	tlv_put_u64(&w, T_UPTIME_MS, (uint64_t)clock_ms(CLOCK_BOOTTIME));
	if (err[0]) {
		logm("HELLO_ACK error: %s", err);
		tlv_put_str(&w, T_ERROR, err);
	}
	out_tlv(F_HELLO_ACK, STREAM_CTL, &w);
}

/* ------------------------------------------------------------------ */
/* EXEC: request                                                       */

struct spawn {
	char **argv, **envp;
	const char *cwd;
	uint64_t timeout_ms;
	int with_stdin;
};

/* Every string of one EXEC lives here: the payload is at most
 * FRAME_MAX_PAYLOAD and each item costs at least 5 bytes of TLV header,
 * so the copies (plus NULs) and the pointer arrays always fit. */
#define MAX_ITEMS (FRAME_MAX_PAYLOAD / 5 + 1)
static char arena[FRAME_MAX_PAYLOAD + 16];
static char *xargv[MAX_ITEMS + 1];
static char *xenvp[MAX_ITEMS + 8];
static char env_path[] = "PATH=" DEFAULT_PATH, env_home[] = "HOME=/root",
	    env_lang[] = "LANG=C.UTF-8", env_term[] = "TERM=dumb";

/* Replace the entry with kv's key, or append it. */
static void env_set(size_t *n, char *kv)
{
	size_t klen = (size_t)(strchr(kv, '=') - kv) + 1, i;

	for (i = 0; i < *n; i++) {
		if (strncmp(xenvp[i], kv, klen) == 0) {
			xenvp[i] = kv;
			return;
		}
	}
	xenvp[(*n)++] = kv;
}

/* 0, or -1 after sending ERROR{bad_request} naming the bad item. */
static int exec_parse(const struct frame *fr, struct spawn *sp)
{
	size_t used = 0, nargs = 0, nenv = 0, nenv_items = 0;
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len, u;
	uint8_t tag;
	char *s, *eq;
	int rc;

	memset(sp, 0, sizeof *sp);
	sp->cwd = "/root";
	xenvp[nenv++] = env_path;
	xenvp[nenv++] = env_home;
	xenvp[nenv++] = env_lang;
	xenvp[nenv++] = env_term;
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		switch (tag) {
		case T_ARG:
		case T_ENV:
		case T_CWD:
			s = arena + used;
			if (tlv_str(val, len, s, sizeof arena - used) < 0) {
				send_error("bad_request", "%s %zu contains a NUL byte",
					   tag == T_ARG ? "ARG" : tag == T_ENV ? "ENV" : "CWD",
					   tag == T_ARG ? nargs : tag == T_ENV ? nenv_items : 0);
				return -1;
			}
			used += (size_t)len + 1;
			if (tag == T_ARG) {
				xargv[nargs++] = s;
			} else if (tag == T_ENV) {
				eq = strchr(s, '=');
				if (!eq || eq == s) {
					send_error("bad_request",
						   "ENV \"%.200s\" is not K=V with a non-empty K", s);
					return -1;
				}
				env_set(&nenv, s);
				nenv_items++;
			} else {
				if (s[0] != '/') {
					send_error("bad_request", "CWD \"%.200s\" is not absolute", s);
					return -1;
				}
				sp->cwd = s;
			}
			break;
		case T_TIMEOUT_MS:
			if (tlv_u64(val, len, &sp->timeout_ms) < 0) {
				send_error("bad_request", "TIMEOUT_MS is not a u64");
				return -1;
			}
			break;
		case T_STDIN:
			if (tlv_u32(val, len, &u) < 0) {
				send_error("bad_request", "STDIN is not a u32");
				return -1;
			}
			sp->with_stdin = u != 0;
			break;
		default:
			break;
		}
	}
	if (rc < 0) {
		send_error("bad_request", "EXEC: truncated TLV");
		return -1;
	}
	if (!nargs) {
		send_error("bad_request", "EXEC without ARG");
		return -1;
	}
	xargv[nargs] = NULL;
	xenvp[nenv] = NULL;
	sp->argv = xargv;
	sp->envp = xenvp;
	return 0;
}

/* ------------------------------------------------------------------ */
/* EXEC: the child (between fork and exec)                             */

static const char *env_get(char *const envp[], const char *key)
{
	size_t klen = strlen(key);

	for (; *envp; envp++)
		if (strncmp(*envp, key, klen) == 0 && (*envp)[klen] == '=')
			return *envp + klen + 1;
	return NULL;
}

/* execvp with the PATH of the command's environment (musl's execvpe
 * searches the caller's PATH instead).  No sh fallback on ENOEXEC: that is
 * reported as not executable.  Returns the errno to report. */
static int exec_search(const char *file, char *const argv[], char *const envp[])
{
	const char *path, *p, *colon;
	char buf[PATH_MAX];
	size_t dlen, flen = strlen(file);
	int eacces = 0;

	if (!*file)
		return ENOENT;
	if (strchr(file, '/')) {
		execve(file, argv, envp);
		return errno;
	}
	path = env_get(envp, "PATH");
	if (!path)
		path = DEFAULT_PATH;
	for (p = path;; p = colon + 1) {
		colon = strchr(p, ':');
		if (!colon)
			colon = p + strlen(p);
		dlen = (size_t)(colon - p);
		if (dlen + 1 + flen < sizeof buf) {
			/* An empty entry means the current directory. */
			if (dlen)
				memcpy(buf, p, dlen);
			else
				buf[dlen++] = '.';
			buf[dlen] = '/';
			memcpy(buf + dlen + 1, file, flen + 1);
			execve(buf, argv, envp);
			switch (errno) {
			case EACCES:
				eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ENAMETOOLONG:
			case ELOOP:
			case ESTALE:
			case ENODEV:
				break;
			default:
				return errno; /* found it but cannot run it */
			}
		}
		if (!*colon)
			break;
	}
	return eacces ? EACCES : ENOENT;
}

static void child_fail(int st, int stage, int err, int code) __attribute__((noreturn));
static void child_fail(int st, int stage, int err, int code)
{
	uint8_t b[1 + sizeof(int)];

	b[0] = (uint8_t)stage;
	memcpy(b + 1, &err, sizeof err);
	if (write(st, b, sizeof b) < 0)
		_exit(code);
	_exit(code);
}

/* Keep fds 0..2 free for dup2: move a low fd up (CLOEXEC stays). */
static int fd_high(int fd)
{
	int n;

	if (fd > 2)
		return fd;
	n = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return n < 0 ? fd : n;
}

/* Close every fd from 3 up but keep. */
static void close_others(int keep)
{
	int fd;

#ifdef SYS_close_range
	if ((keep <= 3 || syscall(SYS_close_range, 3u, (unsigned)keep - 1, 0u) == 0) &&
	    syscall(SYS_close_range, (unsigned)keep + 1, ~0u, 0u) == 0)
		return;
#endif
	for (fd = 3; fd < 4096; fd++)
		if (fd != keep)
			close(fd);
}

static void child(const struct spawn *sp, int in, int o, int e, int st) __attribute__((noreturn));
static void child(const struct spawn *sp, int in, int o, int e, int st)
{
	sigset_t none;
	int sig;

	/* The agent blocks signals (signalfd) and ignores SIGPIPE; both
	 * would be inherited across exec. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL);
	/* Its own session and process group: the whole group can be killed
	 * at exit and on timeout. */
	setsid();
	st = fd_high(st);
	if (in < 0)
		in = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (in < 0)
		child_fail(st, STAGE_SETUP, errno, 125);
	in = fd_high(in);
	o = fd_high(o);
	e = fd_high(e);
	if (dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
		child_fail(st, STAGE_SETUP, errno, 125);
	close_others(st);
	if (chdir(sp->cwd) < 0)
		child_fail(st, STAGE_CWD, errno, 125);
	sig = exec_search(sp->argv[0], sp->argv, sp->envp);
	child_fail(st, STAGE_EXEC, sig, sig == ENOENT || sig == ENOTDIR ? 127 : 126);
}

/* ------------------------------------------------------------------ */
/* EXEC: the parent                                                    */

static void timer_arm(uint64_t ms)
{
	struct itimerspec it;

	memset(&it, 0, sizeof it);
	it.it_value.tv_sec = (time_t)(ms / 1000);
	it.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	if (tfd >= 0 && timerfd_settime(tfd, 0, &it, NULL) < 0)
		logm("timerfd_settime: %s", strerror(errno));
}

static void exec_clear(void)
{
	close_fd(&ex.in_fd);
	close_fd(&ex.out_fd);
	close_fd(&ex.err_fd);
	close_fd(&ex.st_fd);
	timer_arm(0);
	ex.pid = 0;
	op = OP_NONE;
}

static void exec_abort(void)
{
	/* Reaped later by the SIGCHLD loop, which ignores unknown pids.
	 * Never kill(0) or kill(-0): that is our own process group. */
	if (ex.pid > 0) {
		kill(-ex.pid, SIGKILL);
		if (!ex.reaped)
			kill(ex.pid, SIGKILL);
	}
	exec_clear();
}

static int spawn(const struct spawn *sp)
{
	int in[2] = { -1, -1 }, o[2] = { -1, -1 }, e[2] = { -1, -1 }, st[2] = { -1, -1 };
	int i, err;
	pid_t pid;

	if ((sp->with_stdin && pipe2(in, O_CLOEXEC) < 0) || pipe2(o, O_CLOEXEC) < 0 ||
	    pipe2(e, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0) {
		err = errno;
		goto fail;
	}
	/* Best effort: the default 64 KiB works too, only slower. */
	if (in[1] >= 0)
		fcntl(in[1], F_SETPIPE_SZ, PIPE_SZ);
	fcntl(o[0], F_SETPIPE_SZ, PIPE_SZ);
	fcntl(e[0], F_SETPIPE_SZ, PIPE_SZ);
	pid = fork();
	if (pid < 0) {
		err = errno;
		goto fail;
	}
	if (pid == 0)
		child(sp, in[0], o[1], e[1], st[1]);
	close(o[1]);
	close(e[1]);
	close(st[1]);
	if (in[0] >= 0)
		close(in[0]);
	memset(&ex, 0, sizeof ex);
	ex.pid = pid;
	ex.in_fd = in[1];
	ex.out_fd = o[0];
	ex.err_fd = e[0];
	ex.st_fd = st[0];
	ex.with_stdin = sp->with_stdin;
	snprintf(ex.argv0, sizeof ex.argv0, "%s", sp->argv[0]);
	snprintf(ex.cwd, sizeof ex.cwd, "%s", sp->cwd);
	if (ex.in_fd >= 0)
		set_nonblock(ex.in_fd);
	set_nonblock(ex.out_fd);
	set_nonblock(ex.err_fd);
	set_nonblock(ex.st_fd);
	op = OP_EXEC;
	timer_arm(sp->timeout_ms);
	return 0;
fail:
	for (i = 0; i < 2; i++) {
		close_fd(&in[i]);
		close_fd(&o[i]);
		close_fd(&e[i]);
		close_fd(&st[i]);
	}
	send_error("io", "spawn %.200s: %s", sp->argv[0], strerror(err));
	return -1;
}

static void on_exec(const struct frame *fr)
{
	struct spawn sp;
	char err[600];

	if (exec_parse(fr, &sp) < 0)
		return;
	if (root_make_rw(err, sizeof err) < 0) {
		send_error("root_unavailable", "%s", err);
		return;
	}
	spawn(&sp);
}

/* The child's spawn report: 5 bytes on failure, EOF once exec succeeded. */
static void exec_read_status(void)
{
	uint8_t b[1 + sizeof(int)];
	ssize_t n;

	if (ex.st_fd < 0)
		return;
	n = read(ex.st_fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n == (ssize_t)sizeof b) {
		ex.st_stage = b[0];
		memcpy(&ex.st_errno, b + 1, sizeof ex.st_errno);
	}
	close_fd(&ex.st_fd);
}

static void pipe_close(int *fd, uint32_t stream)
{
	if (*fd < 0)
		return;
	close_fd(fd);
	out_frame(F_EOF, stream, NULL, 0);
}

/* Command output into DATA frames, until EAGAIN, EOF or backpressure. */
static void pipe_pump(int *fd, uint32_t stream)
{
	ssize_t n;

	while (*fd >= 0 && out_pending() <= OUT_HIGH) {
		n = out_read_data(*fd, stream, OUT_DATA_CHUNK);
		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n == -2)
			return; /* out of memory: try again next turn */
		if (n < 0)
			logm("read stream %u: %s", stream, strerror(errno));
		pipe_close(fd, stream);
	}
}

/* Stdin data the command will never read is still credited, so the host
 * never stalls on a window that cannot open. */
static void stdin_close(void)
{
	close_fd(&ex.in_fd);
	credit_due[STREAM_STDIN] += ex.rlen;
	ex.rlen = ex.rhead = 0;
}

static void stdin_pump(void)
{
	size_t chunk;
	ssize_t n;

	while (ex.in_fd >= 0 && ex.rlen) {
		chunk = sizeof stdin_ring - ex.rhead;
		if (chunk > ex.rlen)
			chunk = ex.rlen;
		n = write(ex.in_fd, stdin_ring + ex.rhead, chunk);
		if (n > 0) {
			ex.rhead = (ex.rhead + (size_t)n) % sizeof stdin_ring;
			ex.rlen -= (size_t)n;
			credit_due[STREAM_STDIN] += (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0 && errno != EPIPE)
			logm("write to stdin: %s", strerror(errno));
		stdin_close(); /* EPIPE: the command closed its stdin */
		return;
	}
	if (ex.in_fd >= 0 && ex.stdin_eof)
		close_fd(&ex.in_fd);
}

static void on_stdin_data(const struct frame *fr)
{
	size_t tail, first;

	if (op != OP_EXEC || !ex.with_stdin)
		return; /* left over from a command that already exited */
	if (ex.in_fd < 0 || ex.stdin_eof) {
		credit_due[STREAM_STDIN] += fr->len;
		return;
	}
	if (fr->len > sizeof stdin_ring - ex.rlen) {
		send_error("protocol", "stdin beyond the credit window");
		port.poisoned = 1;
		return;
	}
	tail = (ex.rhead + ex.rlen) % sizeof stdin_ring;
	first = sizeof stdin_ring - tail;
	if (first > fr->len)
		first = fr->len;
	memcpy(stdin_ring + tail, fr->payload, first);
	memcpy(stdin_ring, fr->payload + first, fr->len - first);
	ex.rlen += fr->len;
}

static void exec_on_timer(void)
{
	uint64_t ticks;

	if (read(tfd, &ticks, sizeof ticks) < 0)
		return;
	if (op != OP_EXEC || ex.reaped)
		return;
	logm("command %.100s timed out: killing its process group", ex.argv0);
	ex.timed_out = 1;
	kill(-ex.pid, SIGKILL);
	kill(ex.pid, SIGKILL); /* in case it has not reached setsid() yet */
}

static void reap(void)
{
	int64_t now;
	pid_t pid;
	int wst;

	while ((pid = waitpid(-1, &wst, WNOHANG)) > 0) {
		if (op != OP_EXEC || ex.reaped || pid != ex.pid)
			continue; /* an orphan reparented to us, or an aborted command */
		ex.reaped = 1;
		ex.wstatus = wst;
		/* The rest of its process group goes with it. */
		kill(-pid, SIGKILL);
		stdin_close();
		now = mono_ms();
		ex.drain_until = now + (ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		ex.drain_cap = now + (ex.timed_out ? DRAIN_TIMEOUT_MAX_MS : DRAIN_MAX_MS);
	}
}

static void send_exit(void)
{
	const char *kind = NULL;
	char msg[600] = "";
	uint8_t buf[800];
	struct tlv_w w;
	int code = 0, sig = 0, e = ex.st_errno;

	switch (ex.st_stage) {
	case STAGE_CWD:
		code = 125;
		kind = "cwd_missing";
		snprintf(msg, sizeof msg, "cwd %.400s: %s", ex.cwd, strerror(e));
		break;
	case STAGE_EXEC:
		if (e == ENOENT || e == ENOTDIR) {
			code = 127;
			kind = "not_found";
			if (e == ENOENT && !strchr(ex.argv0, '/'))
				snprintf(msg, sizeof msg, "%s: command not found", ex.argv0);
			else
				snprintf(msg, sizeof msg, "%s: %s", ex.argv0, strerror(e));
		} else {
			code = 126;
			kind = "not_executable";
			snprintf(msg, sizeof msg, "%s: %s", ex.argv0, strerror(e));
		}
		break;
	case STAGE_SETUP:
		code = 125;
		kind = "io";
		snprintf(msg, sizeof msg, "setting up %s: %s", ex.argv0, strerror(e));
		break;
	default:
		if (WIFEXITED(ex.wstatus)) {
			code = WEXITSTATUS(ex.wstatus);
		} else if (WIFSIGNALED(ex.wstatus)) {
			sig = WTERMSIG(ex.wstatus);
			code = 128 + sig;
		}
		break;
	}
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_EXIT_CODE, (uint32_t)code);
	tlv_put_u32(&w, T_SIGNAL, (uint32_t)sig);
	tlv_put_u32(&w, T_TIMED_OUT, (uint32_t)ex.timed_out);
	if (kind) {
		tlv_put_str(&w, T_ERROR_KIND, kind);
		tlv_put_str(&w, T_MESSAGE, msg);
	}
	out_tlv(F_EXIT, STREAM_CTL, &w);
}

/* EXIT goes out once the main process is reaped and its output is
 * drained: EOF on both pipes, or DRAIN_MS without EOF (a process that left
 * the group still holds them) while the host keeps up, DRAIN_MAX_MS at most. */
static void exec_maybe_finish(int64_t now)
{
	if (op != OP_EXEC || !ex.reaped)
		return;
	exec_read_status(); /* the child is gone: its report (or EOF) is there */
	if (ex.out_fd >= 0 || ex.err_fd >= 0) {
		if (out_pending() > OUT_HIGH && now < ex.drain_cap)
			ex.drain_until = now + (ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		if (now < ex.drain_until && (!ex.timed_out || now < ex.drain_cap))
			return;
		logm("output of %.100s still open %d ms after it exited: closed",
		     ex.argv0, ex.timed_out ? DRAIN_TIMEOUT_MS : DRAIN_MS);
		pipe_close(&ex.out_fd, STREAM_STDOUT);
		pipe_close(&ex.err_fd, STREAM_STDERR);
	}
	send_exit();
	exec_clear();
}

/* ------------------------------------------------------------------ */
/* FILE_PUT / FILE_GET                                                 */

/* T_PATH (absolute) into path, optional T_MODE into *mode; 0 or -1 after
 * sending ERROR{bad_request}. */
static int path_parse(const struct frame *fr, const char *what, char *path, uint32_t *mode)
{
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len;
	uint8_t tag;
	int rc;

	path[0] = 0;
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		if (tag == T_PATH && tlv_str(val, len, path, PATH_MAX) < 0) {
			send_error("bad_request", "%s: PATH too long or contains a NUL byte", what);
			return -1;
		}
		if (tag == T_MODE && mode && tlv_u32(val, len, mode) < 0) {
			send_error("bad_request", "%s: MODE is not a u32", what);
			return -1;
		}
	}
	if (rc < 0) {
		send_error("bad_request", "%s: truncated TLV", what);
		return -1;
	}
	if (path[0] != '/') {
		send_error("bad_request", "%s: PATH \"%.200s\" is not absolute", what, path);
		return -1;
	}
	return 0;
}

/* mkdir -p of path's parents, 0755. */
static int mkdir_parents(const char *path, char *err, size_t errsz)
{
	char buf[PATH_MAX];
	size_t i;

	snprintf(buf, sizeof buf, "%s", path);
	for (i = 1; buf[i]; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
			snprintf(err, errsz, "mkdir %s: %s", buf, strerror(errno));
			return -1;
		}
		buf[i] = '/';
	}
	return 0;
}

static void put_fail(void)
{
	if (put.fd >= 0) {
		close_fd(&put.fd);
		unlink(put.path); /* no half-written file left behind */
	}
	put.failed = 1;
}

static void on_file_put(const struct frame *fr)
{
	char err[PATH_MAX + 100];
	uint32_t mode = 0644;
	struct stat sb;
	int fd;

	/* Whatever happens, the host's DATA/EOF on stream 4 follow: drain them. */
	op = OP_PUT;
	put.fd = -1;
	put.failed = 1;
	put.bytes = 0;
	if (path_parse(fr, "FILE_PUT", put.path, &mode) < 0)
		return;
	mode &= 07777;
	if (root_make_rw(err, sizeof err) < 0) {
		send_error("root_unavailable", "%s", err);
		return;
	}
	if (mkdir_parents(put.path, err, sizeof err) < 0) {
		send_error("io", "%s", err);
		return;
	}
	/* O_NONBLOCK: a FIFO at that path must not hang PID 1. */
	fd = open(put.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
		  mode);
	if (fd < 0) {
		send_error("io", "open %s: %s", put.path, strerror(errno));
		return;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		send_error("io", "%s: not a regular file", put.path);
		return;
	}
	if (clear_nonblock(fd) < 0 || fchmod(fd, mode) < 0) {
		send_error("io", "chmod %s: %s", put.path, strerror(errno));
		close(fd);
		return;
	}
	put.fd = fd;
	put.failed = 0;
}

static void on_file_data(const struct frame *fr)
{
	const uint8_t *p = fr->payload;
	size_t left = fr->len;
	ssize_t n;

	if (op != OP_PUT)
		return;
	credit_due[STREAM_FILE] += fr->len;
	while (!put.failed && left) {
		n = write(put.fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			send_error("io", "write %s: %s", put.path,
				   n < 0 ? strerror(errno) : "wrote nothing");
			put_fail();
			return;
		}
		p += n;
		left -= (size_t)n;
		put.bytes += (uint64_t)n;
	}
}

static void on_file_eof(void)
{
	uint8_t buf[32];
	struct tlv_w w;

	if (op != OP_PUT)
		return;
	op = OP_NONE;
	if (put.failed)
		return;
	if (close(put.fd) < 0) {
		put.fd = -1;
		send_error("io", "close %s: %s", put.path, strerror(errno));
		unlink(put.path);
		return;
	}
	put.fd = -1;
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u64(&w, T_BYTES, put.bytes);
	out_tlv(F_FILE_DONE, STREAM_CTL, &w);
}

static void on_file_get(const struct frame *fr)
{
	struct stat sb;
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len;
	uint8_t tag;
	uint64_t max = UINT64_MAX;
	int fd;

	if (path_parse(fr, "FILE_GET", get.path, NULL) < 0)
		return;
	/* BYTES: the most the host takes (path_parse checked the TLVs). */
	tlv_rinit(&r, fr->payload, fr->len);
	while (tlv_next(&r, &tag, &val, &len) == 1)
		if (tag == T_BYTES && tlv_u64(val, len, &max) < 0) {
			send_error("bad_request", "FILE_GET: BYTES is not a u64");
			return;
		}
	if (!root.ok) {
		send_error("root_unavailable", "%s", root.err);
		return;
	}
	fd = open(get.path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			send_error("not_found", "%s: %s", get.path, strerror(errno));
		else
			send_error("io", "open %s: %s", get.path, strerror(errno));
		return;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		send_error("io", "%s: not a regular file", get.path);
		return;
	}
	if ((uint64_t)sb.st_size > max) {
		close(fd);
		send_error("too_large", "%s: %lld bytes, more than the %llu the host takes", get.path,
			   (long long)sb.st_size, (unsigned long long)max);
		return;
	}
	clear_nonblock(fd);
	get.fd = fd;
	get.bytes = 0;
	/* The size at open bounds what is sent: a file that a survivor of the
	 * command keeps growing (or a sparse one extended) cannot stretch the
	 * copy-out past what the host was told it could take. */
	get.size = (uint64_t)sb.st_size;
	get.mode = sb.st_mode & 07777;
	op = OP_GET;
}

/* File content into DATA frames while the host keeps up. */
static void get_pump(void)
{
	uint8_t buf[32];
	struct tlv_w w;
	ssize_t n;

	while (op == OP_GET && out_pending() <= OUT_HIGH) {
		n = get.bytes < get.size ? out_read_data(get.fd, STREAM_FILE, get.size - get.bytes) : 0;
		if (n > 0) {
			get.bytes += (uint64_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -2)
			return;
		close_fd(&get.fd);
		op = OP_NONE;
		if (n < 0) {
			/* after some DATA: the host takes ERROR as the answer */
			send_error("io", "read %s: %s", get.path, strerror(errno));
			return;
		}
		out_frame(F_EOF, STREAM_FILE, NULL, 0);
		tlv_init(&w, buf, sizeof buf);
		tlv_put_u64(&w, T_BYTES, get.bytes);
		tlv_put_u32(&w, T_MODE, get.mode);
		out_tlv(F_FILE_DONE, STREAM_CTL, &w);
	}
}

static void op_abort(void)
{
	switch (op) {
	case OP_EXEC:
		exec_abort();
		break;
	case OP_PUT:
		put_fail();
		break;
	case OP_GET:
		close_fd(&get.fd);
		break;
	case OP_NONE:
		break;
	}
	op = OP_NONE;
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

/* Write out what is queued, waiting up to ms for the host to take it. */
static void flush_wait(int ms)
{
	int64_t end = mono_ms() + ms, now;
	struct pollfd pf;

	while (port.fd >= 0 && out_pending() && (now = mono_ms()) < end) {
		port_flush();
		if (!out_pending() || port.fd < 0)
			return;
		pf.fd = port.fd;
		pf.events = POLLOUT;
		if (poll(&pf, 1, (int)(end - now)) > 0 && (pf.revents & POLLHUP))
			return;
	}
}

/* Wait up to ms for the host to hang up (read returns 0). */
static void hangup_wait(int ms)
{
	int64_t end = mono_ms() + ms, now;
	struct pollfd pf;
	uint8_t junk[4096];
	ssize_t n;

	while (port.fd >= 0 && (now = mono_ms()) < end) {
		pf.fd = port.fd;
		pf.events = POLLIN;
		if (poll(&pf, 1, (int)(end - now)) <= 0)
			continue;
		n = read(port.fd, junk, sizeof junk);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return;
	}
}

static void on_shutdown(void)
{
	char err[300] = "";
	uint8_t buf[400];
	struct tlv_w w;

	logm("shutdown requested");
	op_abort();
	kill(-1, SIGKILL); /* everything but us */
	reap_all(2000);
	sync();
	/* A clean read-only root is what makes the overlay committable. */
	if (root.ok && mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
		snprintf(err, sizeof err, "remount / read-only: %s", strerror(errno));
	else
		root.rw = 0;
	sync();
	tlv_init(&w, buf, sizeof buf);
	if (err[0]) {
		logm("%s", err);
		tlv_put_str(&w, T_ERROR, err);
	}
	out_tlv(F_SHUTDOWN_ACK, STREAM_CTL, &w);
	flush_wait(2000);
	hangup_wait(2000);
	reboot(RB_AUTOBOOT);
	logm("reboot: %s", strerror(errno));
	conn_reset("was told to shut down");
}

/* ------------------------------------------------------------------ */
/* frames from the host                                                */

static int need_hello(void)
{
	if (port.helloed)
		return 0;
	send_error("bad_request", "HELLO (with protocol version %u) first", ISOPOD_PROTO_VERSION);
	return -1;
}

/* New operations: refused while one runs.  A FILE_PUT that failed and
 * whose host gave up streaming it does not count as running. */
static int need_idle(void)
{
	if (op == OP_PUT && put.failed)
		op = OP_NONE;
	if (op == OP_NONE)
		return 0;
	send_error("busy", "another operation is running");
	return -1;
}

static void on_frame(const struct frame *fr)
{
	switch (fr->type) {
	case F_HELLO:
		on_hello(fr);
		return;
	case F_PING:
		out_frame(F_PONG, STREAM_CTL, NULL, 0);
		return;
	case F_EXEC:
	case F_FILE_PUT:
	case F_FILE_GET:
		if (need_hello() < 0 || need_idle() < 0)
			return;
		if (fr->type == F_EXEC)
			on_exec(fr);
		else if (fr->type == F_FILE_PUT)
			on_file_put(fr);
		else
			on_file_get(fr);
		return;
	case F_SHUTDOWN:
		on_shutdown();
		return;
	case F_DATA:
	case F_EOF:
		/* Stray stdin / file data is dropped: it races with the end of
		 * the operation it belonged to. */
		if (fr->stream == STREAM_STDIN) {
			if (fr->type == F_DATA)
				on_stdin_data(fr);
			else if (op == OP_EXEC)
				ex.stdin_eof = 1;
			return;
		}
		if (fr->stream == STREAM_FILE) {
			if (fr->type == F_DATA)
				on_file_data(fr);
			else
				on_file_eof();
			return;
		}
		break;
	default:
		break;
	}
	send_error("bad_request", "unexpected frame type %u on stream %u", fr->type, fr->stream);
}

/* A HELLO from a new host: well-formed TLVs with VERSION and COOKIE. */
static int hello_plausible(const struct frame *fr)
{
	int have_version = 0, have_cookie = 0, rc;
	const uint8_t *val;
	struct tlv_r r;
	uint32_t len;
	uint8_t tag;

	if (fr->type != F_HELLO || fr->stream != STREAM_CTL)
		return 0;
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		have_version |= tag == T_VERSION && len == 4;
		have_cookie |= tag == T_COOKIE && len == 8;
	}
	return rc == 0 && have_version && have_cookie;
}

/* After malformed input, look for a new host's HELLO in what follows.
 * The agent cannot always see a hang-up: when a host closes and the next
 * one connects before the agent runs, the port never reads 0.  Returns 1
 * with roff at the HELLO, 0 with roff past what can never start one. */
static int port_resync(void)
{
	size_t i, keep = SIZE_MAX, used;
	struct frame fr;
	int r;

	for (i = port.roff; i + FRAME_HDR <= port.rlen; i++) {
		if (port.rbuf[i + 4] != F_HELLO)
			continue;
		r = frame_parse(port.rbuf + i, port.rlen - i, &fr, &used);
		if (r == 0 && keep == SIZE_MAX)
			keep = i; /* may be one once the rest arrives */
		if (r == 1 && hello_plausible(&fr)) {
			logm("resynchronised on a HELLO");
			port.roff = i;
			port.poisoned = 0;
			return 1;
		}
	}
	port.roff = keep != SIZE_MAX ? keep : i;
	return 0;
}

static void port_parse(void)
{
	struct frame fr;
	size_t used;
	int r;

	while (port.roff < port.rlen) {
		if (port.poisoned && !port_resync())
			break;
		r = frame_parse(port.rbuf + port.roff, port.rlen - port.roff, &fr, &used);
		if (r == 0)
			break;
		if (r < 0) {
			send_error("protocol", "malformed frame");
			port.poisoned = 1;
			continue; /* a new host's HELLO may follow */
		}
		port.roff += used;
		on_frame(&fr); /* may reset the buffer; fr stays readable */
	}
	if (port.roff) {
		memmove(port.rbuf, port.rbuf + port.roff, port.rlen - port.roff);
		port.rlen -= port.roff;
		port.roff = 0;
	}
}

/* Each read() returns one virtio buffer, and QEMU starts a new buffer for
 * each chunk (≤ 4 KiB) it reads from its socket, so a new host's first
 * bytes begin a read; and since a host sends HELLO alone and waits for the
 * answer, that read holds exactly the HELLO.  If a partial frame of a
 * vanished host is pending and a read is exactly a whole HELLO, the partial
 * frame is dropped (hosts never send HELLO twice on one connection; stdin
 * or file data would have to hold a whole HELLO frame ending exactly at a
 * read boundary to look like one). */
static void port_cut_stale(size_t n)
{
	struct frame fr;
	size_t used;

	if (port.rlen == 0 ||
	    frame_parse(port.rbuf + port.rlen, n, &fr, &used) != 1 || used != n ||
	    !hello_plausible(&fr))
		return;
	logm("a new host's HELLO follows %zu bytes of an unfinished frame: dropped them",
	     port.rlen);
	memmove(port.rbuf, port.rbuf + port.rlen, n);
	port.rlen = port.roff = 0;
	port.poisoned = 0;
}

static void port_read(void)
{
	size_t budget = READ_BUDGET;
	ssize_t n;

	while (port.fd >= 0 && budget) {
		n = read(port.fd, port.rbuf + port.rlen, sizeof port.rbuf - port.rlen);
		if (n != 0)
			port.eof_since = 0; /* a host is there after all */
		if (n > 0) {
			port.active = 1;
			budget = (size_t)n < budget ? budget - (size_t)n : 0;
			port_cut_stale((size_t)n);
			port.rlen += (size_t)n;
			port_parse();
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		/* 0: no host (it hung up, or none came yet); the port keeps
		 * saying so at once until one connects, so look again later
		 * instead of spinning.  A 0 right after a host's data may be
		 * spurious: the guest can take in a new connection's bytes
		 * before it has processed the port's host-connected event (seen
		 * on freshly resumed warm clones), and reads 0 until it has.
		 * Dropping the session then would drop the answer the host
		 * waits for: it is a hang-up only when it lasts. */
		if (n < 0) {
			logm("read %s: %s", port.dev, strerror(errno));
		} else if (port.active) {
			int64_t now = mono_ms();

			if (!port.eof_since)
				port.eof_since = now ? now : 1;
			if (now - port.eof_since < HANGUP_CONFIRM_MS) {
				port.retry_at = now + 10;
				return;
			}
		}
		conn_reset("hung up");
		port.retry_at = mono_ms() + 10;
		return;
	}
}

/* ------------------------------------------------------------------ */
/* main loop                                                           */

static void signals_setup(void)
{
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT,
				    SIGUSR1, SIGUSR2, SIGPWR };
	sigset_t set;
	size_t i;

	/* EPIPE from a closed stdin pipe instead of a signal. */
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	for (i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0)
		logm("signalfd: %s: reaping by polling", strerror(errno));
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (tfd < 0)
		logm("timerfd_create: %s: command timeouts disabled", strerror(errno));
}

static void on_signals(void)
{
	struct signalfd_siginfo si;

	while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
		if (si.ssi_signo != SIGCHLD)
			logm("ignoring signal %u", si.ssi_signo);
	reap();
}

static int ms_until(int64_t t, int64_t now, int cur)
{
	int64_t d = t > now ? t - now : 0;

	if (d > INT_MAX)
		d = INT_MAX;
	return cur < 0 || d < cur ? (int)d : cur;
}

enum { P_PORT, P_SIG, P_TIMER, P_OUT, P_ERR, P_IN, P_ST, P_N };

static void loop_once(void)
{
	struct pollfd pf[P_N];
	int64_t now = mono_ms();
	int timeout = -1, i;

	for (i = 0; i < P_N; i++) {
		pf[i].fd = -1;
		pf[i].events = POLLIN;
		pf[i].revents = 0;
	}
	if (port.fd < 0 && now >= port.retry_at && port_try_open() < 0)
		port.retry_at = now + 1000;
	if (port.fd < 0 || port.retry_at > now) {
		timeout = ms_until(port.retry_at, now, timeout);
	} else {
		pf[P_PORT].fd = port.fd;
		pf[P_PORT].events = (out_pending() < OUT_STOP_INPUT ? POLLIN : 0) |
				    (out_pending() ? POLLOUT : 0);
	}
	pf[P_SIG].fd = sigfd;
	if (sigfd < 0)
		timeout = ms_until(now + 100, now, timeout);
	pf[P_TIMER].fd = tfd;
	if (op == OP_EXEC) {
		if (out_pending() <= OUT_HIGH) {
			pf[P_OUT].fd = ex.out_fd;
			pf[P_ERR].fd = ex.err_fd;
		}
		if (ex.rlen) {
			pf[P_IN].fd = ex.in_fd;
			pf[P_IN].events = POLLOUT;
		}
		pf[P_ST].fd = ex.st_fd;
		if (ex.reaped)
			timeout = ms_until(ex.drain_until, now, timeout);
	}
	if (op == OP_GET && out_pending() <= OUT_HIGH)
		timeout = 0;

	if (poll(pf, P_N, timeout) < 0 && errno != EINTR) {
		logm("poll: %s", strerror(errno));
		sleep_ms(10);
		return;
	}
	if (pf[P_SIG].revents)
		on_signals();
	else if (sigfd < 0)
		reap();
	if (pf[P_TIMER].revents)
		exec_on_timer();
	if (pf[P_ST].revents)
		exec_read_status();
	if (pf[P_OUT].revents)
		pipe_pump(&ex.out_fd, STREAM_STDOUT);
	if (pf[P_ERR].revents)
		pipe_pump(&ex.err_fd, STREAM_STDERR);
	if (pf[P_PORT].revents & (POLLIN | POLLHUP | POLLERR))
		port_read();
	if (op == OP_EXEC)
		stdin_pump();
	if (op == OP_GET)
		get_pump();
	exec_maybe_finish(mono_ms());
	credit_flush();
	port_flush();
}

#ifdef ISOPOD_AGENT_NO_MAIN
/* A unit or fuzz harness that #includes this file drives on_frame() and
 * friends itself; these stay reachable for it (and warning-free). */
static void (*const agent_entry[])(void) __attribute__((unused)) = { boot, signals_setup,
								      loop_once };
#else
int main(void)
{
	int64_t end;

	state_init();
	boot();
	signals_setup();
	/* The port shows up with the virtio devices; give it a while before
	 * complaining (the loop keeps looking every second after that). */
	for (end = mono_ms() + WAIT_DEV_MS; port_try_open() < 0 && mono_ms() < end;)
		sleep_ms(10);
	if (port.fd < 0)
		logm("no virtio port named %s yet: still looking", PORT_NAME);
	for (;;)
		loop_once();
}
#endif
