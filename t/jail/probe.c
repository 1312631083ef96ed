/* probe - what a program in the jail tries (t/17-jail.bats), static musl.
 *
 *   probe id                 identity, no_new_privs and capability sets
 *   probe write PATH         write PATH (a file; a directory: a new file in
 *                            it); refused, try to remount it writable first
 *   probe kill PID           SIGTERM to PID
 *   probe ptrace PID         PTRACE_ATTACH to PID
 *   probe procs              the pids /proc shows
 *   probe net                the network interfaces
 *   probe forkbomb MAX       fork until refused or MAX children
 *   probe mem MIB            allocate and touch MIB MiB
 *   probe session            its session id; whether it can find the key
 *                            withkey put in its caller's session keyring
 *   probe withkey CMD...     CMD with a key "isopod-jail-test" in a new
 *                            session keyring (run outside the jail)
 *   probe userns             unshare(CLONE_NEWUSER), then a new mount and
 *                            network namespace and a tmpfs mount in them
 *   probe read PATH          PATH's first line
 *   probe core               RLIMIT_CORE's soft and hard limits
 *   probe ls DIR             the names in DIR, sorted by the kernel's order
 *   probe mounts             the mount points /proc/self/mountinfo lists
 *   probe tapexec NAME CMD...  CMD with fd 0 a new tap NAME, attached (run
 *                            outside the jail, in a network namespace)
 *   probe tap                on fd 0, a tap: TUNGETIFF (the control), then
 *                            the setters QEMU never needs: persist, owner,
 *                            group, carrier, MAC; worked if any one did
 *   probe prctl              PR_GET_PDEATHSIG, then the prctl options the
 *                            jail refuses: the parent-death signal cleared,
 *                            subreaper, dumpable, ptracer, PR_SET_MM (its
 *                            harmless MAP_SIZE query); PR_SET_NAME the
 *                            control; the signal read back; worked if any
 *                            refused one did
 *   probe thread-exec SECS   a thread (not the main one) execs the probe
 *                            itself as "pdsleep SECS" (the kernel clears
 *                            the parent-death signal of such an exec)
 *   probe pdsleep SECS       "pdeathsig S" (PR_GET_PDEATHSIG), then sleep
 *                            SECS seconds (bounded: a leak ends by itself)
 * As "qemu-img" (a copy of it by that name: t/30's stand-in for the real
 * one), one line on stderr, "imgprobe ARG1 uid=U CapEff=X NoNewPrivs=N
 * store=written|E", store the result of writing $IMGPROBE_WRITE (a
 * directory: a new file in it); exit 0, or 3 when it could write there
 * (a caller that discards stderr, `qemu-img check`'s, then fails);
 * with $IMGPROBE_SLEEP, it then sleeps that many seconds before it exits
 * (with $IMGPROBE_SLEEP_ON too, only as that subcommand).
 * Run as root with $IMGPROBE_REAL set, it is that qemu-img instead,
 * silently: t/50 boots a VM, whose overlay and grow stay root's on
 * purpose, and only the jailed calls are the probe's.
 * Exit 0: it worked ("written", "sent", "attached", a bomb or allocation
 * that reached MAX); 1: refused (the reason's errno name on stdout). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <pthread.h>

static const char *ename(int e)
{
	switch (e) {
	case ESRCH: return "ESRCH";
	case EPERM: return "EPERM";
	case EROFS: return "EROFS";
	case EACCES: return "EACCES";
	case ENOENT: return "ENOENT";
	case EAGAIN: return "EAGAIN";
	case EINVAL: return "EINVAL";
	default: return strerror(e);
	}
}

/* <linux/if_tun.h>'s numbers (musl has no kernel headers here). */
#define TUNSETIFF 0x400454caU
#define TUNSETPERSIST 0x400454cbU
#define TUNSETOWNER 0x400454ccU
#define TUNSETGROUP 0x400454ceU
#define TUNGETIFF 0x800454d2U
#define TUNSETCARRIER 0x400454e2U
#define TAP_FLAGS 0x1002 /* IFF_TAP | IFF_NO_PI */

static int refused(const char *what, const char *arg, int e)
{
	printf("refused %s %s: %s\n", what, arg, ename(e));
	return 1;
}

static int tap(void)
{
	struct ifreq r = { .ifr_flags = 0 };
	int on = 1, worked = 0;
	struct {
		const char *name;
		unsigned long req;
		void *arg;
	} t[] = {
		{ .name = "persist", .req = TUNSETPERSIST, .arg = (void *)1 },
		{ .name = "owner", .req = TUNSETOWNER, .arg = (void *)12345 },
		{ .name = "group", .req = TUNSETGROUP, .arg = (void *)12345 },
		{ .name = "carrier", .req = TUNSETCARRIER, .arg = &on },
		{ .name = "mac", .req = SIOCSIFHWADDR, .arg = &r },
	};

	if (ioctl(0, TUNGETIFF, &r) < 0)
		return refused("TUNGETIFF", "fd 0", errno) + 1;
	printf("tap %s", r.ifr_name);
	r.ifr_hwaddr.sa_family = 1; /* ARPHRD_ETHER */
	memcpy(r.ifr_hwaddr.sa_data, "\x02\0\0\0\0\x01", 6);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		int ok = ioctl(0, t[i].req, t[i].arg) == 0;

		printf(" %s=%s", t[i].name, ok ? "ok" : ename(errno));
		worked |= ok;
	}
	printf("\n");
	return !worked;
}

/* "pdeathsig S set=R subreaper=R dumpable=R ptracer=R mm=R name=R now S"
 * (S a signal number, R "ok" or why not).  Each setter leaves the state as
 * an escaped QEMU would want it, or as it was (dumpable 1: what the exec
 * left). */
static int prctls(void)
{
	int before = -1, after = -1, worked = 0;
	unsigned int mapsz = 0;
	struct {
		const char *name;
		int opt;
		unsigned long arg;
	} t[] = {
		{ .name = "set", .opt = PR_SET_PDEATHSIG, .arg = 0 },
		{ .name = "subreaper", .opt = PR_SET_CHILD_SUBREAPER, .arg = 1 },
		{ .name = "dumpable", .opt = PR_SET_DUMPABLE, .arg = 1 },
		{ .name = "ptracer", .opt = PR_SET_PTRACER, .arg = (unsigned long)-1 },
		{ .name = "mm", .opt = PR_SET_MM, .arg = PR_SET_MM_MAP_SIZE },
	};

	if (prctl(PR_GET_PDEATHSIG, &before) < 0)
		return refused("prctl", "PR_GET_PDEATHSIG", errno) + 1;
	printf("pdeathsig %d", before);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		int ok = (t[i].opt == PR_SET_MM ? prctl(t[i].opt, t[i].arg, &mapsz, 0, 0)
						 : prctl(t[i].opt, t[i].arg, 0, 0, 0)) == 0;

		printf(" %s=%s", t[i].name, ok ? "ok" : ename(errno));
		worked |= ok;
	}
	printf(" name=%s", prctl(PR_SET_NAME, "probe-named", 0, 0, 0) == 0 ? "ok" : ename(errno));
	prctl(PR_GET_PDEATHSIG, &after);
	printf(" now %d\n", after);
	return !worked;
}

static int try_write(const char *path)
{
	char p[4096];
	struct stat st;
	int fd;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(p, sizeof p, "%s/.probe-%d", path, (int)getpid());
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	} else
		fd = open(path, O_WRONLY | O_APPEND);
	if (fd < 0)
		return -1;
	if (write(fd, "x", 1) != 1) {
		close(fd);
		return -1;
	}
	return close(fd);
}

/* An attacker's next step: make the mount writable again (needs
 * CAP_SYS_ADMIN), trying each mount point from path up. */
static void try_remount(const char *path)
{
	char p[4096], *s;

	snprintf(p, sizeof p, "%s", path);
	for (;;) {
		mount(NULL, p, NULL, MS_REMOUNT | MS_BIND, NULL);
		if (!(s = strrchr(p, '/')) || s == p)
			break;
		*s = '\0';
	}
}

static int forkbomb(long max)
{
	long n = 0;

	for (; n < max; n++) {
		pid_t pid = fork();

		if (pid < 0) {
			printf("contained after %ld: %s\n", n, ename(errno));
			return 1;
		}
		if (pid == 0) { /* bounded even outside a jail */
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			alarm(30);
			pause();
			_exit(0);
		}
	}
	printf("not contained: %ld children\n", n);
	return 0;
}

static int mem(long mib)
{
	long i;

	for (i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);

		if (!p) {
			printf("contained after %ld MiB: ENOMEM\n", i);
			return 1;
		}
		memset(p, (int)i | 1, 1 << 20);
		if (i % 16 == 0)
			fprintf(stderr, "%ld MiB\n", i);
	}
	printf("not contained: %ld MiB\n", i);
	return 0;
}

/* As "qemu-system-x86_64" (t/20's stand-in for the KVM probe's QEMU):
 * one line on stderr (its log), "qemuprobe uid=U CapEff=X NoNewPrivs=N
 * kvm=opened|E" (E: why /dev/kvm would not open, then QEMU's words for
 * it, "failed to initialize kvm": a verdict lib/accel.c shares with the
 * host's other stores), and exit 1. */
static int as_qemu(void)
{
	char line[256], cap[64] = "?", nnp[16] = "?";
	FILE *fp = fopen("/proc/self/status", "r");
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC), e = errno;

	while (fp && fgets(line, sizeof line, fp)) {
		sscanf(line, "CapEff: %63s", cap);
		sscanf(line, "NoNewPrivs: %15s", nnp);
	}
	if (fp)
		fclose(fp);
	fprintf(stderr, "qemuprobe uid=%d CapEff=%s NoNewPrivs=%s kvm=%s%s\n", (int)getuid(), cap, nnp,
		fd >= 0 ? "opened" : ename(e), fd >= 0 ? "" : ": failed to initialize kvm (stand-in)");
	return 1;
}

/* Who runs qemu-img: see the top. */
static int as_qemu_img(const char *sub)
{
	char line[256], cap[64] = "?", nnp[16] = "?";
	const char *w = getenv("IMGPROBE_WRITE");
	FILE *fp = fopen("/proc/self/status", "r");
	int wr = w ? try_write(w) : -1, e = errno;

	while (fp && fgets(line, sizeof line, fp)) {
		sscanf(line, "CapEff: %63s", cap);
		sscanf(line, "NoNewPrivs: %15s", nnp);
	}
	if (fp)
		fclose(fp);
	fprintf(stderr, "imgprobe %s uid=%d CapEff=%s NoNewPrivs=%s store=%s\n", sub, (int)getuid(),
		cap, nnp, !w ? "unasked" : wr == 0 ? "written" : ename(e));
	/* a slow qemu-img: its caller is killed meanwhile (only in the
	 * subcommand $IMGPROBE_SLEEP_ON when set: a flatten checks its chain
	 * before it creates its layer) */
	if (getenv("IMGPROBE_SLEEP") &&
	    (!getenv("IMGPROBE_SLEEP_ON") || !strcmp(sub, getenv("IMGPROBE_SLEEP_ON"))))
		sleep((unsigned)atoi(getenv("IMGPROBE_SLEEP")));
	return wr == 0 ? 3 : 0;
}

/* thread-exec's thread: the probe again, as pdsleep SECS. */
static void *exec_self(void *secs)
{
	char *av[] = { "probe", "pdsleep", secs, NULL };

	execv("/proc/self/exe", av);
	_exit(refused("exec", "/proc/self/exe", errno));
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "", *arg = argc > 2 ? argv[2] : "";
	const char *me = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];

	setvbuf(stdout, NULL, _IONBF, 0);
	if (!strcmp(me, "qemu-system-x86_64"))
		return as_qemu();
	if (!strcmp(me, "qemu-img")) {
		const char *real = getenv("IMGPROBE_REAL");

		if (real && getuid() == 0) {
			execv(real, argv);
			return refused("exec", real, errno);
		}
		return as_qemu_img(cmd);
	}
	if (!strcmp(cmd, "id")) {
		char line[256];
		FILE *fp = fopen("/proc/self/status", "r");

		printf("uid=%d gid=%d euid=%d egid=%d\n", (int)getuid(), (int)getgid(), (int)geteuid(),
		       (int)getegid());
		while (fp && fgets(line, sizeof line, fp))
			if (!strncmp(line, "Cap", 3) || !strncmp(line, "NoNewPrivs", 10))
				fputs(line, stdout);
		return fp ? 0 : refused("read", "/proc/self/status", errno);
	}
	if (!strcmp(cmd, "write")) {
		if (try_write(arg) == 0) {
			printf("written %s\n", arg);
			return 0;
		}
		try_remount(arg);
		if (try_write(arg) == 0) {
			printf("written %s (after a remount)\n", arg);
			return 0;
		}
		return refused("write", arg, errno);
	}
	if (!strcmp(cmd, "kill")) {
		if (kill(atoi(arg), SIGTERM) < 0)
			return refused("kill", arg, errno);
		printf("sent %s\n", arg);
		return 0;
	}
	if (!strcmp(cmd, "ptrace")) {
		if (ptrace(PTRACE_ATTACH, atoi(arg), 0, 0) < 0)
			return refused("ptrace", arg, errno);
		printf("attached %s\n", arg);
		waitpid(atoi(arg), NULL, __WALL);
		ptrace(PTRACE_DETACH, atoi(arg), 0, 0);
		return 0;
	}
	if (!strcmp(cmd, "procs")) {
		DIR *d = opendir("/proc");
		struct dirent *e;

		if (!d)
			return refused("opendir", "/proc", errno);
		while ((e = readdir(d)))
			if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
				printf("%s\n", e->d_name);
		return 0;
	}
	if (!strcmp(cmd, "net")) {
		struct if_nameindex *ifs = if_nameindex(), *i;

		if (!ifs)
			return refused("if_nameindex", "", errno);
		for (i = ifs; i->if_index; i++)
			printf("%s\n", i->if_name);
		return 0;
	}
	/* keyctl: KEYCTL_JOIN_SESSION_KEYRING 1, KEYCTL_SEARCH 10;
	 * KEY_SPEC_SESSION_KEYRING -3. */
	if (!strcmp(cmd, "session")) {
		long k = syscall(SYS_keyctl, 10, -3, "user", "isopod-jail-test", 0);

		printf("sid=%d key=%s\n", (int)getsid(0), k >= 0 ? "found" : ename(errno));
		return 0;
	}
	if (!strcmp(cmd, "withkey") && argc > 2) {
		if (syscall(SYS_keyctl, 1, NULL) < 0 ||
		    syscall(SYS_add_key, "user", "isopod-jail-test", "secret", 6, -3) < 0)
			return refused("add_key", "isopod-jail-test", errno);
		execvp(argv[2], argv + 2);
		return refused("exec", argv[2], errno);
	}
	if (!strcmp(cmd, "tapexec") && argc > 3) {
		struct ifreq r = { .ifr_flags = TAP_FLAGS };
		int fd = open("/dev/net/tun", O_RDWR);

		snprintf(r.ifr_name, sizeof r.ifr_name, "%s", arg);
		if (fd < 0 || ioctl(fd, TUNSETIFF, &r) < 0 || dup2(fd, 0) < 0)
			return refused("tap", arg, errno) + 1;
		execvp(argv[3], argv + 3);
		return refused("exec", argv[3], errno);
	}
	if (!strcmp(cmd, "tap"))
		return tap();
	if (!strcmp(cmd, "prctl"))
		return prctls();
	if (!strcmp(cmd, "userns")) {
		if (unshare(CLONE_NEWUSER) < 0)
			return refused("unshare", "CLONE_NEWUSER", errno);
		if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0)
			return refused("unshare", "CLONE_NEWNS|CLONE_NEWNET", errno);
		if (mount("tmpfs", "/tmp", "tmpfs", 0, NULL) < 0 &&
		    mount("tmpfs", "/", "tmpfs", 0, NULL) < 0)
			return refused("mount", "tmpfs", errno);
		printf("unshared and mounted\n");
		return 0;
	}
	if (!strcmp(cmd, "read")) {
		char line[256] = "";
		FILE *fp = fopen(arg, "r");

		if (!fp)
			return refused("read", arg, errno);
		if (!fgets(line, sizeof line, fp))
			line[0] = '\0';
		fclose(fp);
		printf("read %s: %s", arg, line);
		return 0;
	}
	if (!strcmp(cmd, "thread-exec")) {
		pthread_t t;
		int e = pthread_create(&t, NULL, exec_self, (void *)arg);

		if (e)
			return refused("pthread_create", arg, e);
		pause(); /* the exec replaces us */
		return 1;
	}
	if (!strcmp(cmd, "pdsleep")) {
		int sig = -1;

		prctl(PR_GET_PDEATHSIG, &sig);
		printf("pdeathsig %d\n", sig);
		sleep((unsigned)atoi(arg));
		return 0;
	}
	if (!strcmp(cmd, "core")) {
		struct rlimit r;

		if (getrlimit(RLIMIT_CORE, &r) < 0)
			return refused("getrlimit", "RLIMIT_CORE", errno);
		printf("core=%llu %llu\n", (unsigned long long)r.rlim_cur,
		       (unsigned long long)r.rlim_max);
		return 0;
	}
	if (!strcmp(cmd, "ls")) {
		DIR *d = opendir(arg);
		struct dirent *e;

		if (!d)
			return refused("opendir", arg, errno);
		while ((e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				printf("%s\n", e->d_name);
		return 0;
	}
	if (!strcmp(cmd, "mounts")) {
		char line[4096], mnt[4096];
		FILE *fp = fopen("/proc/self/mountinfo", "r");

		if (!fp)
			return refused("read", "/proc/self/mountinfo", errno);
		while (fgets(line, sizeof line, fp))
			if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1)
				printf("%s\n", mnt);
		return 0;
	}
	if (!strcmp(cmd, "forkbomb"))
		return forkbomb(atol(arg));
	if (!strcmp(cmd, "mem"))
		return mem(atol(arg));
	fprintf(stderr, "probe: unknown command %s\n", cmd);
	return 2;
}
