/* qjail.c - a VM's QEMU in the jail (see qjail.h). */
#include "config.h"
#include "image.h"
#include "taphold.h"
#include "qjail.h"
#include "proc.h"
#include "qemu.h"
#include "ranges.h"
#include "util.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* QEMU's module directory and data files: dlopen'd (accel-tcg-x86_64.so)
 * and read at start (bios-microvm.bin), so not in ldd's list. */
static const char *const qemu_data[] = { "/usr/lib/x86_64-linux-gnu/qemu", "/usr/share/qemu" };

json_t *qjail_result(int on, const char *why, const char *id, json_t *warnings)
{
	json_t *rec = vm_read(id), *j, *v;
	size_t i;

	if (!on) {
		/* a VM with a network has a broker, under the same switch */
		const char *mode = json_string_value(json_object_get(json_object_get(rec, "net"),
								     "mode"));
		int broker = mode && strcmp(mode, "none");

		json_decref(rec);
		json_array_append_new(warnings,
				      json_sprintf("QEMU %s unjailed (%s)",
						   broker ? "and its egress broker run" : "runs", why));
		return json_pack("{s:b, s:s}", "enabled", 0, "why", why);
	}
	j = qjail_summary(json_object_get(rec, "jail"));
	json_decref(rec);
	if (!j) {
		json_array_append_new(warnings, json_string("the jail's record is missing"));
		return json_pack("{s:b}", "enabled", 1);
	}
	json_array_foreach(json_object_get(j, "warnings"), i, v)
		json_array_append(warnings, v);
	return j;
}

json_t *qjail_summary(const json_t *applied)
{
	json_t *j = json_is_object(applied) ? json_deep_copy(applied) : NULL;

	if (!j)
		return NULL;
	json_object_set_new(j, "enabled", json_true());
	json_object_set_new(j, "read_only", json_integer((json_int_t)json_array_size(
						      json_object_get(j, "read_only"))));
	return j;
}

/* The value after opt in av, or NULL. */
static const char *arg_of(char *const *av, const char *opt)
{
	for (; *av && av[1]; av++)
		if (!strcmp(*av, opt))
			return av[1];
	return NULL;
}

static int add(struct qjail *qj, const char *p, char *err, size_t errsz)
{
	for (size_t n = 0; n < qj->nro; n++)
		if (!strcmp(qj->ro[n], p)) /* a base named twice: one bind */
			return 0;
	if (qj->nro >= JAIL_PATHS_MAX) {
		errno = E2BIG;
		return reason_fail(err, errsz, "more than %d read-only paths for QEMU", JAIL_PATHS_MAX);
	}
	if (!(qj->ro[qj->nro] = strdup(p)))
		return reason_fail(err, errsz, "strdup: %s", strerror(errno));
	qj->nro++;
	return 0;
}

/* The disk's backing chain, as the store has it: disk_chain reads the
 * headers (a chain of stage layers over a base image, or a refusal), and
 * the paths bound are the store's own, so a header naming another file
 * finds nothing in the jail. */
static int chain(struct qjail *qj, const char *disk, char *err, size_t errsz)
{
	json_t *layers = json_array(), *v;
	char bsha[65], p[PATH_MAX];
	size_t i;
	int r = -1;

	if (!layers)
		return reason_fail(err, errsz, "out of memory");
	if (disk_chain(disk, layers, bsha) < 0) {
		errno = EINVAL;
		reason_fail(err, errsz, "%s: not a chain of stage layers over a base image", disk);
		goto out;
	}
	if (pathn(p, sizeof p, "%s/images/base-%s.img", store_home(), bsha) < 0 ||
	    add(qj, p, err, errsz) < 0)
		goto out;
	json_array_foreach(layers, i, v) {
		if (pathn(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(),
			  json_string_value(v)) < 0 || add(qj, p, err, errsz) < 0)
			goto out;
	}
	r = 0;
out:
	json_decref(layers);
	return r;
}

/* PROG as execvp would find it. */
static int which(const char *prog, char *out, char *err, size_t errsz)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	for (path = path ? path : "/usr/bin:/bin"; *path;) {
		size_t n = strcspn(path, ":");

		if (n && pathn(buf, sizeof buf, "%.*s/%s", (int)n, path, prog) == 0 &&
		    access(buf, X_OK) == 0 && realpath(buf, out))
			return 0;
		path += n + (path[n] == ':');
	}
	errno = ENOENT;
	return reason_fail(err, errsz, "%s: not found in PATH", prog);
}

/* The NIC's tap, opened here: QEMU gets the descriptor, not the device. */
static int tap(struct qjail *qj, char *err, size_t errsz)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
	const char *p;
	size_t n;
	int i;

	for (i = 0; qj->av[i]; i++)
		if (!strncmp(qj->av[i], "tap,", 4) && i > 0 && !strcmp(qj->av[i - 1], "-netdev"))
			break;
	if (!qj->av[i])
		return 0;
	if (!(p = strstr(qj->av[i], ",ifname=")) || (n = strcspn(p += 8, ",")) == 0 ||
	    n >= IFNAMSIZ) {
		errno = EINVAL;
		return reason_fail(err, errsz, "QEMU's -netdev %s: no ifname", qj->av[i]);
	}
	memcpy(ifr.ifr_name, p, n);
	/* the spawn's plan dups it to QEMU's fd 4 (dup2 clears CLOEXEC) */
	if ((qj->tapfd = open("/dev/net/tun", O_RDWR | O_CLOEXEC)) < 0)
		return reason_fail(err, errsz, "/dev/net/tun: %s", strerror(errno));
	if (ioctl(qj->tapfd, TUNSETIFF, &ifr) < 0) {
		char who[256];
		int e = errno;

		if (e != EBUSY)
			return reason_fail(err, errsz, "TUNSETIFF %s: %s", ifr.ifr_name, strerror(e));
		/* Taken since isopod-boot found the slot's tap free (lib/taphold.c
		 * taphold_busy): this run fails, the next one skips the slot. */
		taphold_who(ifr.ifr_name, who, sizeof who);
		errno = e;
		return reason_fail(err, errsz, "the network slot's tap %s is held open by %s, not by this VM "
			           "(TUNSETIFF: %s): the next run skips this slot", ifr.ifr_name, who, strerror(e));
	}
	snprintf(qj->netdev, sizeof qj->netdev, "tap,id=net0,fd=%d", QJAIL_TAP_FD);
	qj->av[i] = qj->netdev;
	return 0;
}

static long long phys_mib(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	return pages > 0 && psz > 0 ? (long long)pages * psz >> 20 : 0;
}

long long qjail_mem_mib(long long mib, int tcg)
{
	long long t = phys_mib() / 8 < QJAIL_TCG_MAX_MIB ? phys_mib() / 8 : QJAIL_TCG_MAX_MIB;

	return mib + QJAIL_MEM_BASE_MIB + (tcg ? t : 0);
}

/* qjail_plan's, and qjail_plan_over's with over: the disk in dir lies
 * over the VM disk over, bound read-only with its chain. */
static int plan(struct qjail *qj, const char *id, const char *dir, const char *over,
		char *const *av, char *err, size_t errsz)
{
	const char *m = arg_of(av, "-m"), *smp = arg_of(av, "-smp"), *acc = arg_of(av, "-accel");
	const char *k = arg_of(av, "-kernel"), *i = arg_of(av, "-initrd");
	long long mib, vcpus, tcg;
	char disk[PATH_MAX], why[PATH_MAX + 128];
	size_t n;
	int c;

	*qj = (struct qjail){ .tapfd = -1, .dirfd = -1 };
	for (n = 0; av[n] && n + 1 < sizeof qj->av / sizeof qj->av[0]; n++)
		qj->av[n] = av[n];
	if (av[n] || !m || !smp || !acc || !k || !i || parse_ll(m, 1, 1 << 20, &mib) < 0 ||
	    parse_ll(smp, 1, 1024, &vcpus) < 0) {
		errno = EINVAL;
		return reason_fail(err, errsz, "QEMU's command line is not qemu_argv's");
	}
	tcg = !strcmp(acc, "tcg") || !strncmp(acc, "tcg,", 4); /* tcg,tb-size=N */
	if (which(av[0], qj->prog, err, errsz) < 0 || add(qj, qj->prog, err, errsz) < 0 ||
	    jail_deps(qj->prog, qj->ro, &qj->nro, JAIL_PATHS_MAX, err, errsz) < 0)
		return -1;
	for (n = 0; n < sizeof qemu_data / sizeof qemu_data[0]; n++)
		if (access(qemu_data[n], F_OK) == 0 && add(qj, qemu_data[n], err, errsz) < 0)
			return -1;
	if (add(qj, k, err, errsz) < 0 || add(qj, i, err, errsz) < 0)
		return -1;
	/* the chain the disk's own (over's: a VM's disk, itself bound) */
	if (over ? pathn(disk, sizeof disk, "%s", over) < 0 || add(qj, over, err, errsz) < 0
		 : pathn(disk, sizeof disk, "%s/disk.qcow2", dir) < 0)
		return -1;
	if (chain(qj, disk, err, errsz) < 0)
		return -1;
	/* a clone's RAM file read-only (lib/memro.c): its library in too */
	if ((c = qemu_clone_env(av, qj->preload, sizeof qj->preload, why, sizeof why)) < 0) {
		qj->preload[0] = '\0';
		return reason_fail(err, errsz, "%s (a warm clone's QEMU needs it)", why);
	}
	if (c && add(qj, QEMU_CLONE_ENV_PATH(qj->preload), err, errsz) < 0)
		return -1;
	if (tap(qj, err, errsz) < 0)
		return -1;
	qj->js = (struct jail_spec){
		.name = id,
		.vm_dir = dir,
		.ro = (const char *const *)qj->ro,
		.nro = qj->nro,
		.kvm = !tcg,
		.mem_bytes = qjail_mem_mib(mib, (int)tcg) << 20,
		.pids = QJAIL_PIDS_BASE + vcpus,
	};
	if (geteuid() == 0 && jail_identity(id, &qj->js.uid, &qj->js.gid, err, errsz) < 0)
		return -1;
	return 0;
}

int qjail_plan(struct qjail *qj, const char *id, const char *dir, char *const *av, char *err,
	       size_t errsz)
{
	return plan(qj, id, dir, NULL, av, err, errsz);
}

int qjail_plan_over(struct qjail *qj, const char *id, const char *dir, const char *over,
		    char *const *av, char *err, size_t errsz)
{
	return plan(qj, id, dir, over, av, err, errsz);
}

void qjail_free(struct qjail *qj)
{
	for (size_t n = 0; n < qj->nro; n++)
		free(qj->ro[n]);
	qj->nro = 0;
	if (qj->tapfd >= 0)
		close(qj->tapfd);
	qj->tapfd = -1;
	if (qj->dirfd >= 0)
		close(qj->dirfd);
	qj->dirfd = -1;
}

/* A sysctl's value as a number (/proc/sys/fs/protected_hardlinks: the
 * jail's handover relies on 1); -1 when unreadable or not a number. */
static long sysctl_value(const char *path)
{
	char b[32] = "", *e;
	long v;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);

	if (fd >= 0)
		close(fd);
	v = n > 0 ? strtol(b, &e, 10) : -1;
	return n > 0 && e != b && (*e == '\n' || !*e) ? v : -1;
}

int qjail_give(struct qjail *qj, const char *dir, char *err, size_t errsz)
{
	if (geteuid() != 0) /* a user's jail is the user: nothing to hand over */
		return 0;
	/* The jail's uid writes in the directory: without this sysctl it could
	 * hard-link a root file there for root to write through. */
	if (sysctl_value("/proc/sys/fs/protected_hardlinks") != 1)
		return reason_fail(err, errsz, "the jail needs fs.protected_hardlinks = 1 "
			           "(/proc/sys/fs/protected_hardlinks); ISOPOD_JAIL=0 runs without the jail");
	qj->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (qj->dirfd < 0 || fchown(qj->dirfd, 0, qj->js.gid) < 0 || fchmod(qj->dirfd, 01770) < 0)
		return reason_fail(err, errsz, "handing %s to the jail: %s", dir, strerror(errno));
	/* root's file, the jail's group: written in place, never replaced */
	if (fchownat(qj->dirfd, "disk.qcow2", 0, qj->js.gid, AT_SYMLINK_NOFOLLOW) < 0 ||
	    fchmodat(qj->dirfd, "disk.qcow2", 0660, 0) < 0)
		return reason_fail(err, errsz, "handing %s/disk.qcow2 to the jail: %s", dir, strerror(errno));
	/* the bulk lane's file likewise, to read only (its drive is
	 * readonly=on: the lane is host to guest, the guest stores nothing in
	 * the host's file); none when this QEMU has no lane (the KVM probe) */
	if (fchownat(qj->dirfd, QEMU_BULK_FILE, 0, qj->js.gid, AT_SYMLINK_NOFOLLOW) < 0
	    ? errno != ENOENT : fchmodat(qj->dirfd, QEMU_BULK_FILE, 0640, 0) < 0)
		return reason_fail(err, errsz, "handing %s/%s to the jail: %s", dir, QEMU_BULK_FILE,
				   strerror(errno));
	return 0;
}

void qjail_reclaim(struct qjail *qj)
{
	struct dirent *de;
	struct stat st;
	DIR *d;
	int fd;

	if (qj->dirfd < 0)
		return;
	if ((fd = dup(qj->dirfd)) >= 0 && (d = fdopendir(fd))) {
		while ((de = readdir(d)))
			if (fstatat(qj->dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    st.st_uid == qj->js.uid && !S_ISREG(st.st_mode) && !S_ISSOCK(st.st_mode) &&
			    !S_ISDIR(st.st_mode))
				unlinkat(qj->dirfd, de->d_name, 0);
		closedir(d);
	} else if (fd >= 0) {
		close(fd);
	}
	/* by its descriptor: a name the jail could have made a link never
	 * chmods what it points at */
	if ((fd = openat(qj->dirfd, "disk.qcow2",
			 O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) >= 0) {
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && fchown(fd, 0, 0) == 0)
			fchmod(fd, 0600);
		close(fd);
	}
	/* QEMU is gone: the lane's bytes (this VM's stdin and files) with it;
	 * the next QEMU of this directory gets a new file (bulk_file_new) */
	unlinkat(qj->dirfd, QEMU_BULK_FILE, 0);
	if (fchmod(qj->dirfd, 0700) < 0 || fchown(qj->dirfd, 0, 0) < 0)
		warn("unable to take the VM directory back from the jail:");
	close(qj->dirfd);
	qj->dirfd = -1;
}

/* A file qemu-img reads: itself, and (chained) when it is a qcow2 its
 * backing chain (disk_chain reads the headers here, in C; the paths bound
 * are the store's own). */
static int img_read(struct qjail *qj, const char *path, int chained, char *err, size_t errsz)
{
	char magic[4] = "";
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	ssize_t n = fd < 0 ? -1 : pread(fd, magic, sizeof magic, 0);

	if (fd >= 0)
		close(fd);
	if (fd < 0)
		return reason_fail(err, errsz, "%s: %s", path, strerror(errno));
	if (add(qj, path, err, errsz) < 0)
		return -1;
	return chained && n == 4 && !memcmp(magic, "QFI\xfb", 4) ? chain(qj, path, err, errsz) : 0;
}

/* The file qemu-img writes: root's, the jail's group may write it for the
 * run (as qjail_give hands a VM's disk over); its owner and mode are kept
 * for qjail_img_wait. */
static int img_write(struct qimg *qi, const char *path, char *err, size_t errsz)
{
	struct stat st = { .st_mode = S_IFREG, .st_nlink = 1 };
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);

	if (fd < 0)
		return reason_fail(err, errsz, "%s: %s", path, strerror(errno));
	/* A second link (a VM's QEMU can link its 0660 disk in its own
	 * directory) would keep the inode in the jail's reach after the run:
	 * only a file with one name is handed over. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
		int e = !S_ISREG(st.st_mode) ? EINVAL : st.st_nlink != 1 ? EMLINK : errno;

		close(fd);
		errno = e;
		return reason_fail(err, errsz, "%s: %s", path, e == EINVAL ? "not a regular file"
							       : e == EMLINK ? "has more than one link"
								             : strerror(e));
	}
	/* from here img_giveback puts owner and mode back */
	qi->wfd = fd;
	qi->wuid = st.st_uid;
	qi->wgid = st.st_gid;
	qi->wmode = st.st_mode & 07777;
	if (geteuid() == 0 && (fchown(qi->wfd, 0, qi->qj.js.gid) < 0 || fchmod(qi->wfd, 0660) < 0))
		return reason_fail(err, errsz, "handing %s to the jail: %s", path, strerror(errno));
	qi->rw[0] = path;
	qi->qj.js.rw = qi->rw;
	qi->qj.js.nrw = 1;
	return 0;
}

static void img_giveback(struct qimg *qi)
{
	if (qi->wfd < 0)
		return;
	if (geteuid() == 0 &&
	    (fchown(qi->wfd, qi->wuid, qi->wgid) < 0 || fchmod(qi->wfd, qi->wmode) < 0))
		warn("unable to take %s back from qemu-img's jail:", qi->rw[0] ? qi->rw[0] : "a file");
	close(qi->wfd);
	qi->wfd = -1;
}

long long qjail_img_owner(const char *name)
{
	static const char *const pre[] = { QJAIL_IMG_NAME, JAIL_CG_CHECK_NAME, JAIL_TOOL_NAME };
	long long pid;

	for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
		if (!strncmp(name, pre[i], strlen(pre[i])))
			return parse_ll(name + strlen(pre[i]), 1, INT_MAX, &pid) < 0 ? 0 : pid;
	return 0;
}

pid_t qjail_img_spawn(struct qimg *qi, const struct qimg_req *rq, char *err, size_t errsz)
{
	struct proc_spec ps = PROC_SPEC(rq->av);
	char why[256];
	size_t n;
	int on = jail_wanted(why, sizeof why);

	*qi = (struct qimg){ .qj = { .tapfd = -1, .dirfd = -1 }, .wfd = -1, .pid = -1 };
	ps.out = rq->outfd;
	ps.err = rq->errfd;
	ps.umask = 0177; /* as qemu_spawn's: what it makes is 0600 */
	/* a caller killed (commit, fork, flatten under the store lock) takes
	 * its qemu-img along; it may run no longer than the deadline either */
	ps.pdeathsig = SIGKILL;
	qi->until = mono_ms() + (rq->timeout_ms > 0 ? rq->timeout_ms : QJAIL_IMG_TIMEOUT_MS);
	if (on < 0)
		return reason_fail(err, errsz, "%s", why);
	if (!on) {
		warn("qemu-img %s runs unjailed (%s)", rq->av[1], why);
		if ((qi->pid = proc_spawn(&ps)) < 0)
			reason_fail(err, errsz, "unable to start qemu-img: %s", strerror(errno));
		return qi->pid;
	}
	qi->jailed = 1;
	/* the cgroup's name: one per caller (a caller runs one at a time) */
	snprintf(qi->name, sizeof qi->name, QJAIL_IMG_NAME "%ld", (long)getpid());
	qi->qj.js = (struct jail_spec){
		.name = qi->name,
		.mem_bytes = (long long)QJAIL_IMG_MEM_MIB << 20,
		.pids = QJAIL_PIDS_BASE + 1, /* the init's own */
		/* qemu-img has no filter of its own against execve (QEMU's
		 * -sandbox spawn=deny): a thread's exec would clear its
		 * parent-death signal; an init of ours keeps it (jail.h) */
		.init = 1,
	};
	if (geteuid() == 0 &&
	    jail_identity("qemu-img", &qi->qj.js.uid, &qi->qj.js.gid, err, errsz) < 0)
		goto fail;
	if (which(rq->av[0], qi->qj.prog, err, errsz) < 0 ||
	    add(&qi->qj, qi->qj.prog, err, errsz) < 0 ||
	    jail_deps(qi->qj.prog, qi->qj.ro, &qi->qj.nro, JAIL_PATHS_MAX, err, errsz) < 0)
		goto fail;
	for (n = 0; n < rq->nreads; n++)
		if (img_read(&qi->qj, rq->reads[n], rq->chain, err, errsz) < 0)
			goto fail;
	/* the chain is read from the header before the file is handed over */
	if (rq->writes && rq->wchain && chain(&qi->qj, rq->writes, err, errsz) < 0)
		goto fail;
	if (rq->writes && img_write(qi, rq->writes, err, errsz) < 0)
		goto fail;
	qi->qj.js.ro = (const char *const *)qi->qj.ro;
	qi->qj.js.nro = qi->qj.nro;
	ps.file = qi->qj.prog;
	if ((qi->pid = jail_spawn(&qi->qj.js, &ps, &qi->j, err, errsz)) >= 0)
		return qi->pid;
fail:
	img_giveback(qi);
	qjail_free(&qi->qj);
	return -1;
}

/* What is left of qi's deadline, in ms for poll: 0 once it has passed. */
static int img_left_ms(const struct qimg *qi)
{
	int64_t left = qi->until - mono_ms();

	return left <= 0 ? 0 : left < INT32_MAX ? (int)left : INT32_MAX;
}

int qjail_img_wait(struct qimg *qi, char *err, size_t errsz)
{
	char why[256];
	int st, r;

	if (!proc_exited_within(qi->pid, &st, img_left_ms(qi))) {
		/* jailed, the pid is its namespace's init: all of it goes */
		kill(qi->pid, SIGKILL);
		r = proc_wait(qi->pid, &st) < 0 ? -1 : 0;
		errno = ETIMEDOUT;
		r = reason_fail(err, errsz, "qemu-img killed at its deadline%s", r < 0 ? " (not reaped)" : "");
	} else {
		r = proc_status(st);
	}
	if (qi->jailed && jail_release(&qi->j, why, sizeof why) < 0)
		warn("qemu-img's jail: %s", why);
	img_giveback(qi);
	qjail_free(&qi->qj);
	return r;
}

int qjail_img(const struct qimg_req *rq, char *err, size_t errsz)
{
	struct qimg qi;

	if (qjail_img_spawn(&qi, rq, err, errsz) < 0)
		return -1;
	return qjail_img_wait(&qi, err, errsz);
}

int qjail_img_capture(const struct qimg_req *rq, char *buf, size_t sz, char *err, size_t errsz)
{
	struct qimg_req r = *rq;
	struct qimg qi;
	size_t len = 0;
	ssize_t n;
	char skip[512];
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return reason_fail(err, errsz, "pipe: %s", strerror(errno));
	r.outfd = p[1];
	if (r.errfd == PROC_PIPE)
		r.errfd = p[1];
	pid = qjail_img_spawn(&qi, &r, err, errsz);
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	/* all of it: a qemu-img blocked on a full pipe would never exit; until
	 * its deadline (qjail_img_wait kills it then) */
	for (;;) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		int left = img_left_ms(&qi);

		if (left == 0 || poll(&pf, 1, left) == 0)
			break;
		n = read(p[0], len + 1 < sz ? buf + len : skip,
			 len + 1 < sz ? sz - 1 - len : sizeof skip);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			break;
		if (n > 0 && len + 1 < sz)
			len += (size_t)n;
	}
	close(p[0]);
	if (sz)
		buf[len] = '\0';
	return qjail_img_wait(&qi, err, errsz);
}
