/* warmtpl.c - the warm pool's template: a shape's snapshot built (see
 * warmpool.h warm_build).  Its QEMU runs on a chain of layers guests'
 * QEMUs wrote, so it runs in the jail every VM's QEMU gets (issue 12),
 * unless the jail is off.
 *
 * Every path built here lies under the store root or a VM directory,
 * which isopod-boot has checked to be short (a unix socket path must fit
 * 108 bytes), so none is ever cut short. */
#include "conlog.h"
#include "host.h"
#include "jail.h"
#include "proc.h"
#include "qjail.h"
#include "qmp.h"
#include "util.h"
#include "warm.h"
#include "warmpool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1024LL * 1024)
/* What the template's console pipe gives up per wait below: as
 * isopod-supervise's rounds, so the deadline stays in view. */
#define CON_BUDGET (4u << 20)

/* Poll query-migrate (template) until the migration is over, reading its
 * console meanwhile.  0 or -1. */
static int migrate_wait(struct qmp *qm, struct conlog *con, int64_t deadline, char *msg,
			size_t msz)
{
	for (;;) {
		json_t *ret = NULL;
		const char *s;
		int r = qmp_call(qm, "query-migrate", NULL, -1, &ret, deadline);

		if (r < 0) {
			snprintf(msg, msz, "%s", qm->err);
			return -1;
		}
		s = json_string_value(json_object_get(ret, "status"));
		if (s && !strcmp(s, "completed")) {
			json_decref(ret);
			return 0;
		}
		if (s && (!strcmp(s, "failed") || !strcmp(s, "cancelled"))) {
			const char *d = json_string_value(json_object_get(ret, "error-desc"));

			snprintf(msg, msz, "migration %s: %s", s, d ? d : "no reason given");
			json_decref(ret);
			return -1;
		}
		json_decref(ret);
		conlog_drain(con, CON_BUDGET);
		usleep(2000);
	}
}

/* Wait until QEMU has seen our hang-up on the agent socket.  Its handling
 * writes a control message into guest RAM; with share=on that must happen
 * before the device state is saved, or the memory file and the state
 * would disagree about the virtqueue.  Its console is read meanwhile.  0,
 * or -1 (qm->err). */
static int agent_hung_up(struct qmp *qm, struct conlog *con, int64_t deadline)
{
	for (;;) {
		json_t *ret = NULL, *v;
		size_t i;
		int down = 0;

		if (qmp_call(qm, "query-chardev", NULL, -1, &ret, deadline) < 0)
			return -1;
		json_array_foreach(ret, i, v) {
			const char *l = json_string_value(json_object_get(v, "label"));
			const char *f = json_string_value(json_object_get(v, "filename"));

			if (l && f && !strcmp(l, "agent"))
				down = !strncmp(f, "disconnected:", 13);
		}
		json_decref(ret);
		if (down)
			return 0;
		if (mono_ms() >= deadline) {
			snprintf(qm->err, sizeof qm->err, "the agent socket still looks connected");
			return -1;
		}
		conlog_drain(con, CON_BUDGET);
		usleep(2000);
	}
}

/* This VM's disk is still the empty overlay qemu-img made over the base:
 * a copy of it goes with the snapshot (blank), its sha256 into bsha, so
 * that later runs of this shape copy it instead of running qemu-img.  0,
 * or -1 with msg. */
static int template_blank(const char *disk, const char *blank, char bsha[65], char *msg,
			  size_t msz)
{
	int bfd;

	if (copy_small(disk, blank) < 0 ||
	    (bfd = open(blank, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		snprintf(msg, msz, "unable to copy %.512s: %s", disk, strerror(errno));
		return -1;
	}
	if (fsync(bfd) < 0 || sha256_fd(bfd, bsha) < 0) {
		snprintf(msg, msz, "unable to read %.512s: %s", blank, strerror(errno));
		close(bfd);
		return -1;
	}
	close(bfd);
	return 0;
}

/* Wait for the template's agent, reading its console meanwhile (the
 * boot is what writes there), and shake hands: a bare HELLO (no hostname,
 * clock or seed: each clone gets its own); its root must still be
 * read-only.  0, or -1 with msg (*pid -1 when QEMU exited). */
static int template_hello(struct pool *w, const struct inst *t, struct conlog *con, pid_t *pid,
			  int64_t deadline, char *msg, size_t msz)
{
	struct hello th = { 0 };
	char l1[256];
	int st;

	for (;;) {
		int64_t slice = mono_ms() + 100;

		conlog_drain(con, CON_BUDGET);
		if (conn_open(w->conn, t->agent, slice < deadline ? slice : deadline) == 0)
			break;
		if (errno != ETIMEDOUT) {
			snprintf(msg, msz, "template: %s", w->conn->err);
			return -1;
		}
		if (waitpid(*pid, &st, WNOHANG) == *pid) {
			*pid = -1;
			snprintf(msg, msz, "template qemu exited with status %d: %s", proc_status(st),
				 last_line(t->qlog, l1, sizeof l1));
			return -1;
		}
		if (owner_gone(w)) {
			snprintf(msg, msz, "the owner exited");
			return -1;
		}
		if (mono_ms() >= deadline) {
			snprintf(msg, msz, "template: the guest agent did not answer in time");
			return -1;
		}
	}
	if (conn_hello(w->conn, &th, deadline) != 0) {
		snprintf(msg, msz, "template: %s", th.guest_error[0] ? th.guest_error : w->conn->err);
		conn_close(w->conn);
		return -1;
	}
	conn_close(w->conn);
	test_kill("warm-template");
	test_pause("warm-template");
	if (strcmp(th.root, "ro")) {
		snprintf(msg, msz, "template: the agent reports its root as %s, not ro", th.root);
		return -1;
	}
	return 0;
}

/* Describe the snapshot in its meta.json (metap): the shape, the
 * identity of its files, the template's jail (tj: what it applied, or
 * {"enabled":false,"why"}), its console (con, drained to QEMU's exit: as
 * a VM record's console_bytes and console_log_truncated).  bsha: the
 * blank overlay's sha256, or NULL.  0, or -1 with msg. */
static int template_meta(struct pool *w, const struct stat *msb, const struct stat *ssb,
			 const char *sha, const char *bsha, json_t *tj, const struct conlog *con,
			 const char *metap, char *msg, size_t msz)
{
	const struct img *im = w->im;
	const struct stat ms = *msb, ss = *ssb;
	char now[32];
	json_t *meta;

	/* mem: identified by inode and ctime, which every write, truncation
	 * or hole punched changes (hashing 512 MiB per resume would cost
	 * more than the resume); state: small, hashed on every resume. */
	meta = json_pack("{s:i, s:s, s:s, s:{s:s, s:{s:s, s:s}, s:O, s:I, s:I, s:I, s:s, s:s, s:s},"
			 " s:s, s:n, s:i, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:s}, s:s}",
			 "format", WARM_FORMAT, "key", w->key, "key_text", w->text, "shape", "kernel",
			 im->ksha, "base", "flavor", im->flavor, "sha256", im->bsha, "layers",
			 w->layers, "disk_bytes", (json_int_t)w->disk_bytes, "vcpus",
			 (json_int_t)w->vm->vcpus, "mem_mib", (json_int_t)w->vm->mem_mib, "net", w->net,
			 "accel", w->vm->accel, "qemu", w->qver, "created", iso_now(now, sizeof now),
			 "last_used", "hits", 0, "size",
			 (json_int_t)(((long long)ms.st_blocks + ss.st_blocks) * 512), "build_ms",
			 (json_int_t)w->build_ms, "builder_pid", (json_int_t)getpid(), "mem", "bytes",
			 (json_int_t)ms.st_size, "ino", (json_int_t)ms.st_ino, "ctime_s",
			 (json_int_t)ms.st_ctim.tv_sec, "ctime_ns", (json_int_t)ms.st_ctim.tv_nsec, "state",
			 "bytes", (json_int_t)ss.st_size, "sha256", sha, "argv_fingerprint",
			 w->argv_fp);
	if (!meta || json_object_set(meta, "template_jail", tj) < 0 ||
	    json_object_set_new(meta, "console_bytes", json_integer((json_int_t)con->bytes)) < 0 ||
	    json_object_set_new(meta, "console_log_truncated",
				json_boolean(conlog_truncated(con))) < 0) {
		snprintf(msg, msz, "out of memory");
		json_decref(meta);
		return -1;
	}
	if (bsha) {
		json_t *b = json_pack("{s:s, s:I, s:s}", "backing", im->base, "bytes",
				      (json_int_t)w->disk_bytes, "sha256", bsha);

		if (!b || json_object_set_new(meta, "blank", b) < 0) {
			snprintf(msg, msz, "out of memory");
			json_decref(meta);
			return -1;
		}
	}
	if (json_write_atomic(metap, meta) < 0) {
		snprintf(msg, msz, "unable to write %.512s: %s", metap, strerror(errno));
		json_decref(meta);
		return -1;
	}
	json_decref(meta);
	return 0;
}


/* The template's disk: an overlay over the VM's disk (lent readable by
 * the caller).  create -b opens that disk's chain (its size): stage layers
 * jailed QEMUs wrote, so in qemu-img's jail (lib/qjail.c), the chain
 * read-only, the template's disk its one file.  0, or -1 with msg. */
static int template_overlay(const char *vdisk, const char *tdisk, char *msg, size_t msz)
{
	char *av[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
		       (char *)vdisk, (char *)tdisk, NULL };
	const char *rd[] = { vdisk };
	int rc = qjail_img(&(struct qimg_req){ .av = av, .reads = rd, .nreads = 1, .chain = 1,
					       .writes = tdisk, .outfd = PROC_NULL,
					       .errfd = PROC_INHERIT },
			   msg, msz);

	if (rc > 0)
		snprintf(msg, msz, "qemu-img create failed (status %d)", rc);
	return rc != 0 ? -1 : 0;
}

/* The template's QEMU while it runs, and what it was lent. */
struct tpl {
	pid_t pid;                 /* our unreaped child, or -1 */
	int jailed;                /* j and qj are live: release and reclaim */
	struct qjail qj;
	struct jail j;
	char name[WARM_TPL_NAME_SZ];
	char sockdir[PATH_MAX];    /* vms/<id>/tpl: its sockets ("" once gone) */
	const char *rw[1];
	json_t *tj;                /* meta.json's "template_jail" */
	int lendfd;                /* the VM's disk, while lent */
	mode_t lendmode;
};

/* The VM's disk is root's 0600 fresh overlay (no QEMU ran on it yet) in
 * its 0700 directory: 0644 while the template is built lets the jail's uid
 * (qemu-img's, the template QEMU's) read the one copy bound into its jail,
 * and no one else reach it; tpl_end puts its mode back.  0, or -1. */
static int tpl_lend(struct tpl *tp, const char *vdisk, char *msg, size_t msz)
{
	struct stat st;
	int fd = open(vdisk, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0 || (!S_ISREG(st.st_mode) && (errno = EINVAL)) ||
	    fchmod(fd, WARM_TPL_LEND_MODE) < 0) {
		snprintf(msg, msz, "unable to lend %.512s to the template: %s", vdisk,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	tp->lendfd = fd;
	tp->lendmode = st.st_mode & 07777;
	return 0;
}

/* vdir's tpl/ (vfd its descriptor) as the builder made it: a directory,
 * not a link to one, of our own uid (tpl_sockdir's mkdir); its fd, or -1
 * (ENOENT: none; ELOOP, ENOTDIR, EPERM: not the builder's, left alone). */
static int tpl_open(int vfd)
{
	struct stat st;
	int fd = openat(vfd, WARM_TPL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) ||
			(st.st_uid != geteuid() && (errno = EPERM)))) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int warm_tpl_unlend(const char *vdir, int dry)
{
	struct stat st;
	int vfd, fd, r = 0;

	if ((vfd = open(vdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : -1;
	/* only where the lend's sign is (tpl/): a stopped VM's disk at 0644
	 * for another reason is not the template's to give back */
	if ((fd = tpl_open(vfd)) < 0) {
		close(vfd);
		return 0;
	}
	close(fd);
	/* by its descriptor: a link planted in its place is never followed */
	fd = openat(vfd, "disk.qcow2", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	close(vfd);
	if (fd < 0)
		return errno == ENOENT ? 0 : -1;
	/* our own, and its only name: a hard link to another file does not
	 * make that one ours to change */
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_nlink == 1 && (st.st_mode & 07777) == WARM_TPL_LEND_MODE)
		r = dry || fchmod(fd, 0600) == 0 ? 1 : -1;
	close(fd);
	return r;
}

/* tpl/'s entries, by its descriptor: each that is not a directory
 * unlinked (a socket; a link as a link, never followed), none descended
 * into: the jail's uid may have made any of them, and a template QEMU
 * may outlive its killed builder, so no walk by path.  The first entry
 * that stays named in left; 1 when nothing stays, 2 when something does. */
static int tpl_empty(int dfd, int dry, char *left, size_t lsz)
{
	struct dirent *de;
	struct stat st;
	DIR *d = fdopendir(dfd);
	int r = 1;

	if (!d) {
		close(dfd);
		return -1;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
		} else if (!S_ISDIR(st.st_mode) &&
			   (dry || unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT)) {
			continue;
		}
		if (r == 1)
			snprintf(left, lsz, "%s", de->d_name);
		r = 2;
	}
	closedir(d);
	return r;
}

int warm_tpl_clear(const char *vdir, int dry, char *left, size_t lsz)
{
	int vfd, dfd, r;

	left[0] = '\0';
	if ((vfd = open(vdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? 0 : -1;
	if ((dfd = tpl_open(vfd)) < 0) {
		r = errno == ENOENT || errno == ELOOP || errno == ENOTDIR || errno == EPERM ? 0 : -1;
		close(vfd);
		return r;
	}
	/* rmdir by name, below our own fd of the VM's directory: it removes
	 * an empty directory and nothing else (ENOTEMPTY: made meanwhile) */
	if ((r = tpl_empty(dfd, dry, left, lsz)) == 1 && !dry &&
	    unlinkat(vfd, WARM_TPL_DIR, AT_REMOVEDIR) < 0 && errno != ENOENT) {
		snprintf(left, lsz, "(%s)", strerror(errno));
		r = 2;
	}
	close(vfd);
	return r;
}

/* Its sockets' directory: vms/<id>/tpl, beside the VM's own sockets (a
 * short path, unlike sd: sun_path), not the VM's, so an isopod-stop
 * meanwhile cannot reach the template.  Jailed, it is the jail's second
 * read-write path, handed over as a VM's directory is (root:<jail gid>
 * 01770).  0, or -1. */
static int tpl_sockdir(struct tpl *tp, const char *vdir, char *msg, size_t msz)
{
	char left[PATH_MAX];

	/* one a killed build left: cleared as gc would, never walked */
	if (pathn(tp->sockdir, sizeof tp->sockdir, "%s/" WARM_TPL_DIR, vdir) < 0 ||
	    warm_tpl_clear(vdir, 0, left, sizeof left) < 0 || mkdir(tp->sockdir, 0700) < 0) {
		snprintf(msg, msz, "unable to make %.512s/tpl: %s", vdir, strerror(errno));
		tp->sockdir[0] = '\0';
		return -1;
	}
	return 0;
}

/* Start the template's QEMU (av, qemu_argv's; stdout and stderr logfd,
 * its console confd: the write end of warm_build's conlog pipe):
 * with the jail on (isopod-boot's jail_wanted), in the jail every VM's
 * QEMU gets (lib/qjail.c, as isopod-supervise's sup_jailed): its uid and
 * cgroup named by warm_tpl_name, the staging directory sd its VM
 * directory (handed over with its disk), the VM's disk vdisk and its chain
 * read-only, tp->sockdir read-write, the NIC's tap as fd 4.  Off: as root,
 * as before.  Dies with us (PDEATHSIG; jailed, its pid namespace goes
 * along).  0, or -1 with msg (tpl_end undoes what was done). */
static int tpl_start(struct tpl *tp, const struct pool *w, const char *sd, const char *vdisk,
		     char *const *av, int logfd, int confd, char *msg, size_t msz)
{
	struct proc_spec ps = PROC_SPEC(tp->qj.av);
	int dfd;

	if (!w->jail) {
		tp->tj = json_pack("{s:b, s:s}", "enabled", 0, "why", w->jail_why);
		if ((tp->pid = qemu_spawn(av, logfd, 1, -1, confd)) < 0)
			snprintf(msg, msz, "unable to fork: %s", strerror(errno));
		return tp->pid < 0 ? -1 : 0;
	}
	warm_tpl_name(w->key, tp->name);
	if (qjail_plan_over(&tp->qj, tp->name, sd, vdisk, av, msg, msz) < 0)
		return -1;
	tp->jailed = 1; /* from here tpl_end reclaims sd */
	tp->rw[0] = tp->sockdir;
	tp->qj.js.rw = tp->rw;
	tp->qj.js.nrw = 1;
	if (geteuid() == 0) {
		int e = 0;

		if ((dfd = open(tp->sockdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
		    fchown(dfd, 0, tp->qj.js.gid) < 0 || fchmod(dfd, 01770) < 0)
			e = errno;
		if (dfd >= 0)
			close(dfd);
		if (e) {
			snprintf(msg, msz, "handing %.512s to the jail: %s", tp->sockdir, strerror(e));
			return -1;
		}
	}
	if (qjail_give(&tp->qj, sd, msg, msz) < 0)
		return -1;
	ps.file = tp->qj.prog;
	ps.out = ps.err = logfd;
	ps.keep[0] = PROC_NULL; /* fd 3: a clone's memory file; the template's is a path */
	ps.keep[1] = tp->qj.tapfd;
	ps.keep[2] = confd;
	ps.nkeep = 3;
	ps.pdeathsig = SIGKILL;
	ps.umask = 0177; /* as qemu_spawn: its sockets 0600 from the start */
	ps.nothp = qemu_nothp(av); /* as qemu_spawn */
	if (jail_spawn(&tp->qj.js, &ps, &tp->j, msg, msz) < 0)
		return -1;
	tp->pid = tp->j.pid;
	if (tp->qj.tapfd >= 0)
		close(tp->qj.tapfd); /* QEMU's now, as its fd 4 */
	tp->qj.tapfd = -1;
	if (!(tp->tj = qjail_summary(tp->j.applied))) {
		snprintf(msg, msz, "out of memory");
		return -1;
	}
	return 0;
}

/* QEMU gone (killed and reaped here if it is not yet), its jail released,
 * sd root's again (qjail_reclaim: what the jail's uid left as links goes),
 * its sockets' directory removed, the VM's disk's mode put back.  Again
 * and again: what is done is not redone.  0, or -1 with msg when its
 * jail's cgroup was still busy or the disk's mode could not be restored. */
static int tpl_end(struct tpl *tp, char *msg, size_t msz)
{
	char why[512];
	int st, r = 0;

	if (tp->pid > 0) { /* our own unreaped child */
		kill(tp->pid, SIGKILL);
		while (waitpid(tp->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	tp->pid = -1;
	if (tp->jailed) {
		/* (j.pid 0: jail_spawn failed and released what it made.)  A
		 * cgroup still busy: something of the jail's may still write in
		 * sd (I/O in flight in the kernel) after our checks of it: not
		 * a snapshot to publish. */
		if (tp->j.pid > 0 && jail_release(&tp->j, why, sizeof why) < 0) {
			warn("the warm template's jail: %s", why);
			snprintf(msg, msz, "the template's jail did not end (%s): not published", why);
			r = -1;
		}
		qjail_reclaim(&tp->qj);
		tp->jailed = 0;
	}
	qjail_free(&tp->qj);
	/* the mode first: tpl/ is the sign gc's warm_tpl_unlend needs to
	 * give the disk back if we are killed between the two */
	if (tp->lendfd >= 0) {
		if (fchmod(tp->lendfd, tp->lendmode) < 0) {
			snprintf(msg, msz, "unable to restore the mode of the VM's disk: %s",
				 strerror(errno));
			r = -1;
		}
		close(tp->lendfd);
		tp->lendfd = -1;
	}
	if (tp->sockdir[0]) {
		char vdir[PATH_MAX], left[PATH_MAX], *sl;

		snprintf(vdir, sizeof vdir, "%s", tp->sockdir);
		if ((sl = strrchr(vdir, '/')))
			*sl = '\0';
		if (warm_tpl_clear(vdir, 0, left, sizeof left) < 0)
			warn("unable to remove %s:", tp->sockdir);
		else if (left[0])
			warn("%s left: %s in it is not the template's to remove", tp->sockdir, left);
	}
	tp->sockdir[0] = '\0';
	return r;
}

/* What the template's QEMU (the jail's uid) left in sd, once it is gone
 * and sd is root's again: exactly the files this command line makes it
 * make, each a regular file, or nothing is published -- a QEMU that did
 * more than that was not the QEMU its snapshot can be trusted from, and
 * root writes meta.json into sd next.  The memory file, then, root's
 * (the clones map it) with one link.  The memory file's fd, or -1 with
 * msg. */
static int tpl_take_back(const char *sd, int plain, char *msg, size_t msz)
{
	static const char *const want[] = { "disk.qcow2", "console.log", "qemu.log", "mem",
					    "state", "blank.qcow2" };
	int dfd = open(sd, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), fd = -1, d2;
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (dfd < 0 || (d2 = dup(dfd)) < 0 || !(d = fdopendir(d2))) {
		snprintf(msg, msz, "unable to read %.512s: %s", sd, strerror(errno));
		goto out;
	}
	while ((de = readdir(d))) {
		size_t i, n = sizeof want / sizeof want[0] - !plain;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		for (i = 0; i < n && strcmp(de->d_name, want[i]); i++)
			;
		if (i == n || fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode)) {
			snprintf(msg, msz, "template: its QEMU left %.256s in %.512s: not published",
				 EXC(de->d_name), sd);
			closedir(d);
			goto out;
		}
	}
	closedir(d);
	fd = openat(dfd, "mem", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(msg, msz, "unable to open %.512s/mem: %s", sd, strerror(errno));
	} else if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
		snprintf(msg, msz, "template: its memory file has %lu links: not published",
			 (unsigned long)st.st_nlink);
	} else if (geteuid() == 0 && fchown(fd, 0, 0) < 0) {
		snprintf(msg, msz, "unable to take back %.512s/mem: %s", sd, strerror(errno));
	} else {
		close(dfd);
		return fd;
	}
	if (fd >= 0)
		close(fd);
out:
	if (dfd >= 0)
		close(dfd);
	return -1;
}

/* The stopped template's device state into sd/state (sfd, root's, made
 * here): migrated with x-ignore-shared (RAM stays in sd/mem), then QEMU
 * is told to quit; its console con read meanwhile.  The state's fd, or -1
 * with msg. */
static int template_snapshot(struct qmp *qm, struct conlog *con, const char *statep,
			     int64_t deadline, char *msg, size_t msz)
{
	int sfd;

	if (agent_hung_up(qm, con, deadline) < 0 || qmp_call(qm, "stop", NULL, -1, NULL, deadline) < 0 ||
	    qmp_call(qm, "migrate-set-capabilities",
		     json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			       "state", 1),
		     -1, NULL, deadline) < 0) {
		snprintf(msg, msz, "template: %s", qm->err);
		return -1;
	}
	/* O_EXCL, O_NOFOLLOW: sd is the jail's to write in meanwhile */
	sfd = open(statep, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (sfd < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", statep, strerror(errno));
		return -1;
	}
	if (qmp_call(qm, "getfd", json_pack("{s:s}", "fdname", WARM_STATE_FD), sfd, NULL, deadline) < 0 ||
	    qmp_call(qm, "migrate", json_pack("{s:s}", "uri", "fd:" WARM_STATE_FD), -1, NULL,
		     deadline) < 0) {
		snprintf(msg, msz, "template: %s", qm->err);
		close(sfd);
		return -1;
	}
	if (migrate_wait(qm, con, deadline, msg, msz) < 0) {
		close(sfd);
		return -1;
	}
	qmp_call(qm, "quit", NULL, -1, NULL, mono_ms() + 3000);
	return sfd;
}

/* The template's console once its QEMU is gone: what is left in the pipe,
 * then closed; a cut is a warning, as isopod-supervise's. */
static void template_console_end(struct pool *w, struct conlog *con)
{
	char why[256];

	if (con->logfd < 0) /* never opened, or ended */
		return;
	conlog_drain(con, UINT64_MAX);
	if (conlog_truncated(con))
		warm_warn(w, "the warm template's %s", conlog_cut(con, why, sizeof why));
	conlog_close(con);
}

/* Boot the template of this shape in the staging directory sd and take
 * its snapshot there.  The template runs as our own child (PDEATHSIG: it
 * dies with us), jailed as a VM's QEMU is when the jail is on (tpl_start),
 * on a throwaway overlay over this VM's still-empty disk (the same chain
 * and size), with guest RAM in sd/mem (share=on).  Once its agent has
 * answered a bare HELLO (root still read-only, nothing run) we hang up,
 * stop it, migrate its device state into sd/state and quit it: a template
 * is never resumed.  Then sd is taken back (tpl_take_back), everything is
 * fsynced and described in sd/meta.json.  0, or -1 with msg; sd is the
 * caller's to remove. */
int warm_build(struct pool *w, const struct inst *vin, int plain, const char *sd,
	       int64_t deadline, char *msg, size_t msz)
{
	char blank[PATH_MAX], bsha[65] = "", memp[PATH_MAX], statep[PATH_MAX], metap[PATH_MAX];
	char sha[65], scratch[256];
	struct qmp *qm = malloc(sizeof *qm); /* 64 KiB of buffer */
	struct tpl tp = { .pid = -1, .qj = { .tapfd = -1, .dirfd = -1 }, .lendfd = -1 };
	struct conlog con = { .rfd = -1, .logfd = -1 };
	struct inst t = { .dir = "" }; /* out: reads t.bulk */
	struct qemu_argv q;
	struct stat ms, ss;
	int64_t t0 = mono_ms();
	int logfd, confd = -1, sfd = -1, mfd = -1, r = -1, st;

	if (!qm) {
		snprintf(msg, msz, "out of memory");
		return -1;
	}
	qm->fd = -1;
	snprintf(t.dir, sizeof t.dir, "%s", sd);
	pathn(t.disk, sizeof t.disk, "%s/disk.qcow2", sd);
	pathn(t.console, sizeof t.console, "%s/console.log", sd);
	pathn(t.qlog, sizeof t.qlog, "%s/qemu.log", sd);
	pathn(t.bulk, sizeof t.bulk, "%s/" QEMU_BULK_FILE, sd);
	pathn(memp, sizeof memp, "%s/mem", sd);
	pathn(statep, sizeof statep, "%s/state", sd);
	pathn(metap, sizeof metap, "%s/meta.json", sd);
	if (tpl_sockdir(&tp, vin->dir, msg, msz) < 0 ||
	    pathn(t.agent, sizeof t.agent, "%s/agent.sock", tp.sockdir) < 0 ||
	    pathn(t.qmp, sizeof t.qmp, "%s/qmp.sock", tp.sockdir) < 0 ||
	    strlen(t.agent) >= sizeof ((struct sockaddr_un *)0)->sun_path ||
	    strlen(t.qmp) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
		if (tp.sockdir[0])
			snprintf(msg, msz, "store path %.512s is too long for the template's sockets",
				 vin->dir);
		goto out;
	}
	if (tpl_lend(&tp, vin->disk, msg, msz) < 0 || template_overlay(vin->disk, t.disk, msg, msz) < 0)
		goto out;
	/* This VM's disk is still the empty overlay qemu-img made over the
	 * base: later runs of this shape copy it instead of running qemu-img. */
	pathn(blank, sizeof blank, "%s/blank.qcow2", sd);
	if (plain && template_blank(vin->disk, blank, bsha, msg, msz) < 0)
		goto out;
	/* Its console as a VM's: a pipe read into console.log up to the cap
	 * (lib/conlog.c), here in the waits below.  The template runs no
	 * command, but its guest kernel and agent write there, and a bad base
	 * image could write without end. */
	logfd = open(t.qlog, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (logfd >= 0 && conlog_open(&con, t.console, w->console_max, &confd) < 0)
		confd = -1; /* (errno is conlog_open's) */
	if (logfd < 0 || confd < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", logfd < 0 ? t.qlog : t.console,
			 strerror(errno));
		if (logfd >= 0)
			close(logfd);
		goto out;
	}
	/* the template's guest has the lane too (a clone resumes into the
	 * same machine); its agent reads nothing from it before the snapshot */
	if (bulk_file_new(t.bulk) < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", t.bulk, strerror(errno));
		close(logfd);
		close(confd);
		goto out;
	}
	{
		struct qemu_cfg qc = qemu_cfg_at(w->vm, &t);

		qc.memfile = memp;
		qc.share = 1;
		/* the template's disk belongs to the snapshot it builds,
		 * not to the run that asked for it: its flushes stay, whatever
		 * the builder's own VM is (lib/qemu.h qemu_vm no_flush) */
		qc.no_flush = 0;
		if (qemu_argv(&q, &qc) < 0) {
			snprintf(msg, msz, "template: path too long in %.512s", sd);
			close(logfd);
			close(confd);
			goto out;
		}
	}
	st = tpl_start(&tp, w, sd, vin->disk, q.av, logfd, confd, msg, msz);
	close(logfd);
	close(confd);
	if (st < 0 || template_hello(w, &t, &con, &tp.pid, deadline, msg, msz) < 0)
		goto out;
	if (qmp_open(qm, t.qmp, deadline) < 0) {
		snprintf(msg, msz, "template: %s", qm->err);
		goto out;
	}
	if ((sfd = template_snapshot(qm, &con, statep, deadline, msg, msz)) < 0)
		goto out;
	qmp_close(qm);
	if (!proc_exited_within(tp.pid, &st, 5000)) {
		snprintf(msg, msz, "template qemu did not quit");
		goto out;
	}
	tp.pid = -1;
	template_console_end(w, &con);
	unlink(t.bulk); /* not part of the snapshot: tpl_take_back admits no such file */
	if (tpl_end(&tp, msg, msz) < 0 || (mfd = tpl_take_back(sd, plain, msg, msz)) < 0)
		goto out;

	/* Durable before it is published.  Mode 0644, never writable by
	 * another uid: every clone of the shape maps it.  A jailed clone's
	 * QEMU (the jail's uid, lib/qjail.c) reopens its fd 3 as
	 * QEMU_CLONE_MEM, which checks the inode's mode: read is all it gets,
	 * and isopod-memro.so (lib/memro.c) makes QEMU 7.2 ask only that (it
	 * asks O_RDWR whatever share= is).  Only that descriptor reaches the
	 * file: the pool's directories are root's 0700. */
	if (fsync(mfd) < 0 || fchmod(mfd, 0644) < 0 || fstat(mfd, &ms) < 0 || fsync(sfd) < 0 ||
	    fstat(sfd, &ss) < 0 || lseek(sfd, 0, SEEK_SET) < 0 || sha256_fd(sfd, sha) < 0) {
		snprintf(msg, msz, "unable to sync the snapshot in %.512s: %s", sd, strerror(errno));
		goto out;
	}
	if (ms.st_size != w->vm->mem_mib * MIB || ss.st_size == 0) {
		snprintf(msg, msz, "template: memory file of %lld bytes, state of %lld bytes",
			 (long long)ms.st_size, (long long)ss.st_size);
		goto out;
	}
	unlink(t.disk);
	unlink(t.console);
	unlink(t.qlog);
	w->build_ms = mono_ms() - t0;
	if (template_meta(w, &ms, &ss, sha, plain ? bsha : NULL, tp.tj, &con, metap, msg,
			  msz) < 0)
		goto out;
	r = 0;
out:
	/* holes only, and never published (each clone gets its own): gone
	 * before tpl_end's look for what QEMU left in the staging directory */
	if (t.bulk[0])
		unlink(t.bulk);
	if (tpl_end(&tp, r < 0 ? scratch : msg, r < 0 ? sizeof scratch : msz) < 0 && r == 0)
		r = -1;
	template_console_end(w, &con); /* QEMU is gone: what it left, for the kept log */
	json_decref(tp.tj);
	qmp_close(qm);
	free(qm);
	if (sfd >= 0)
		close(sfd);
	if (mfd >= 0)
		close(mfd);
	return r;
}
