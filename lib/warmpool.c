/* warmpool.c - the warm pool as a boot uses it (see warmpool.h).
 *
 * Every path built here lies under the store root or a VM directory,
 * which isopod-boot has checked to be short (a unix socket path must fit
 * 108 bytes), so none is ever cut short. */
#include "host.h"
#include "qmp.h"
#include "proc.h"
#include "qjail.h"
#include "tree.h"
#include "util.h"
#include "warm.h"
#include "warmpool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUILD_MAX_MS 120000  /* a template boot, at most (bounded by --timeout-ms too) */
#define RETIRE_WAIT_MS 5000
#define MIB (1024LL * 1024)

/* Has the owner exited, or were we asked to stop?  Then no run wants this
 * VM: stop building or waiting for a snapshot.  A stop signal is seen
 * pending: isopod-boot blocks them while it prepares the snapshot, so that
 * the build's own cleanup (the template's jail and its cgroups, the lent
 * disk, tpl/, the staging directory) runs before the signal ends it --
 * a whole process tree signalled at once (Slurm's scancel) would
 * otherwise leave all of that to isopod-gc. */
int owner_gone(const struct pool *w)
{
	struct pollfd p = { .fd = w->ownerfd, .events = POLLIN };
	sigset_t pend;

	if (sigpending(&pend) == 0 && (sigismember(&pend, SIGTERM) == 1 ||
				       sigismember(&pend, SIGINT) == 1 || sigismember(&pend, SIGHUP) == 1))
		return 1;
	return w->ownerfd >= 0 && poll(&p, 1, 0) > 0;
}

/* A warning for the result (and stderr, which the front end relays). */
void warm_warn(struct pool *w, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	warn("%s", msg);
	json_array_append_new(w->warnings, json_string(msg));
}

/* The key: sha256 over everything a resume depends on.  The QEMU command
 * line goes in whole, with this VM's paths, tap and MAC replaced, so any
 * change to the machine (a device, an option, the kernel command line)
 * moves the key.  The net mode goes in by name: filtered and open VMs have
 * the same NIC but never share a snapshot.  0, or -1 when this VM cannot
 * be keyed (the pool is then off, with a warning). */
int warm_setup(struct pool *w, json_t *rec, long long disk_bytes, const char *forked_disk,
	       const char *net_mode)
{
	const struct img *im = w->im;
	const char *accel = w->vm->accel;
	char err[512], **a, bsha[65];
	struct qemu_argv q;
	json_t *v, *l, *chain;
	size_t i, tlen = 0;
	FILE *f;

	if (qemu_version(w->qver, sizeof w->qver, err, sizeof err) < 0) {
		warm_warn(w, "warm pool not used: %s", err);
		return -1;
	}
	v = json_object_get(rec, "layers");
	if (json_object_get(rec, "stage") && json_is_string(json_object_get(rec, "stage")) &&
	    !json_array_size(v)) {
		warm_warn(w, "warm pool not used: the record names a stage but no layers");
		return -1;
	}
	w->layers = json_array();
	json_array_foreach(v, i, l) {
		const char *s = json_string_value(l);

		if (!s || strncmp(s, "st-", 3) || strchr(s, '/') || strchr(s, '\n') ||
		    strlen(s) > 64) {
			warm_warn(w, "warm pool not used: bad stage id in the record's layers");
			return -1;
		}
		json_array_append_new(w->layers, json_string(s));
	}
	/* Resuming over another chain than the template's would show the
	 * guest a disk that disagrees with the file system it has cached:
	 * the key names the chain the disk really has, read from the qcow2
	 * headers, and it must be the one the record says. */
	if (forked_disk) {
		chain = json_array();
		if (disk_chain(forked_disk, chain, bsha) < 0 || !json_equal(chain, w->layers) ||
		    strcmp(bsha, im->bsha)) {
			warm_warn(w, "warm pool not used: the backing chain of %s is not the one its record "
			      "names", forked_disk);
			json_decref(chain);
			return -1;
		}
		json_decref(chain);
	} else if (json_array_size(w->layers)) {
		warm_warn(w, "warm pool not used: the record names stages but boot makes the disk");
		return -1;
	}
	w->disk_bytes = disk_bytes;
	w->net = net_mode;
	/* The per-VM parts (paths, tap, MAC) are placeholders: a key names
	 * a shape, not a VM. */
	if (qemu_shape_argv(&q, accel, w->vm->mem_mib, w->vm->vcpus, w->vm->tap != NULL,
			    w->vm->tsc_khz, w->vm->lapic_khz) < 0) {
		warm_warn(w, "warm pool not used: unable to build the QEMU command line");
		return -1;
	}

	if (!(f = open_memstream(&w->text, &tlen))) {
		warm_warn(w, "warm pool not used: unable to allocate memory");
		return -1;
	}
	fprintf(f, "isopod-warm %d\nkernel %s\nbase %s\nlayers", WARM_FORMAT, im->ksha, im->bsha);
	json_array_foreach(w->layers, i, v)
		fprintf(f, " %s", json_string_value(v));
	fprintf(f, "\ndisk_bytes %lld\nvcpus %lld\nmem_mib %lld\nnet %s\naccel %s\nqemu %s\n",
		disk_bytes, w->vm->vcpus, w->vm->mem_mib, net_mode, accel, w->qver);
	for (a = q.av; *a; a++)
		fprintf(f, "arg %s\n", *a);
	if (fclose(f) != 0) {
		warm_warn(w, "warm pool not used: unable to allocate memory");
		return -1;
	}
	sha256_hex(w->text, tlen, w->key);
	{
		char failed[PATH_MAX];

		if (!warm_root(0)) {
			warm_warn(w, "warm pool not used: %s/warm: %s", store_home(), strerror(errno));
			return -1;
		}
		if (mkdir_p(warm_root(0), 0700, failed, sizeof failed) < 0) {
			warm_warn(w, "warm pool not used: unable to create %s: %s", failed,
				  strerror(errno));
			return -1;
		}
	}
	snprintf(w->dir, sizeof w->dir, "%s/%s", warm_root(0), w->key);
	qemu_fingerprint(w->argv_fp);
	/* (boot refused a store path with ',' before: QEMU options cannot
	 * carry it) */
	return 0;
}

static int published(const struct pool *w)
{
	char p[PATH_MAX];

	pathn(p, sizeof p, "%s/meta.json", w->dir);
	return access(p, F_OK) == 0;
}

/* Copy a small file (a VM's empty overlay): 0 or -1. */
int copy_small(const char *from, const char *to)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out, e;
	ssize_t n;

	if (in < 0)
		return -1;
	unlink(to);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		e = errno;
		close(in);
		errno = e;
		return -1;
	}
	while ((n = read(in, buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write_all(out, buf, (size_t)n) < 0) {
			e = errno;
			close(in);
			close(out);
			unlink(to);
			errno = e;
			return -1;
		}
	}
	close(in);
	return close(out);
}

/* Take warm/<key>.lock without blocking for longer than until.  fd or -1. */
static int lock_until(const struct pool *w, int64_t until)
{
	for (;;) {
		int fd = warm_lock(w->key, LOCK_EX | LOCK_NB);

		if (fd >= 0 || errno != EWOULDBLOCK || mono_ms() >= until || owner_gone(w))
			return fd;
		usleep(20 * 1000);
	}
}

/* Hold the key's lock shared for as long as this boot may resume from the
 * snapshot, and make sure it is (still) published.  isopod-gc evicts and
 * isopod-warm removes a snapshot only holding the lock exclusively (then,
 * gc, only when no running VM's record names it): a snapshot this boot is
 * about to resume, or resuming, or runs on before its record names the key,
 * stays.  GOT_PUBLISHED, or GOT_NONE with a warning. */
static int hold_published(struct pool *w)
{
	int64_t until = mono_ms() + RETIRE_WAIT_MS;

	for (;;) {
		w->hold = warm_lock(w->key, LOCK_SH | LOCK_NB);
		if (w->hold >= 0 || errno != EWOULDBLOCK || mono_ms() >= until || owner_gone(w))
			break;
		usleep(20 * 1000);
	}
	if (w->hold < 0) {
		warm_warn(w, "warm snapshot %.12s busy (being removed?); booted cold", w->key);
		return GOT_NONE;
	}
	if (!published(w)) {
		close(w->hold);
		w->hold = -1;
		warm_warn(w, "warm snapshot %.12s was removed before it could be resumed; booted cold",
			  w->key);
		return GOT_NONE;
	}
	test_pause("warm-resume");
	return GOT_PUBLISHED;
}

/* Make sure a snapshot of this shape exists: one run builds it under the
 * key's lock, runs that find the lock held wait for it (bounded) and then
 * use what was published.  Returns GOT_BUILT (we built it), GOT_PUBLISHED
 * (it exists), or GOT_NONE (boot cold; a warning says why). */
int warm_get(struct pool *w, const struct inst *in, int plain, int64_t deadline)
{
	char sd[PATH_MAX], msg[1024];
	int64_t t0 = mono_ms(), until;
	int lk, built = 0;

	if (published(w))
		return hold_published(w);
	lk = warm_lock(w->key, LOCK_EX | LOCK_NB);
	if (lk < 0 && errno != EWOULDBLOCK) {
		warm_warn(w, "warm pool not used: unable to lock %s.lock: %s", w->dir, strerror(errno));
		return GOT_NONE;
	}
	if (lk < 0) {
		/* Someone is building it: wait, then use theirs; half of
		 * what is left at most, a cold boot may follow. */
		until = t0 + w->wait_ms < t0 + (deadline - t0) / 2 ? t0 + w->wait_ms
								   : t0 + (deadline - t0) / 2;
		/* The builder holds the lock on (shared) while it resumes
		 * from what it published: stop waiting once it is there. */
		for (;;) {
			lk = warm_lock(w->key, LOCK_EX | LOCK_NB);
			if (lk >= 0 || errno != EWOULDBLOCK || published(w) || mono_ms() >= until ||
			    owner_gone(w))
				break;
			usleep(20 * 1000);
		}
		if (lk >= 0)
			close(lk);
		if (published(w))
			return hold_published(w);
		if (lk >= 0)
			warm_warn(w, "the run that was building the warm snapshot %.12s failed; booted cold",
			      w->key);
		else
			warm_warn(w, "waited %lld ms for another run to build the warm snapshot %.12s; "
			      "booted cold", (long long)(mono_ms() - t0), w->key);
		return GOT_NONE;
	}
	if (published(w)) { /* it was published while we took the lock */
		close(lk);
		return hold_published(w);
	}
	/* A directory without meta.json was never published by us (that is
	 * one rename of a complete one): whatever it is, it goes. */
	if (access(w->dir, F_OK) == 0 && warm_remove(w->key, NULL) < 0 && errno != ENOENT)
		warn("unable to remove the unpublished %s:", w->dir);
	/* Ours to build.  The staging name carries our pid: no other run
	 * ever writes or removes it, and gc knows when it is stale. */
	pathn(sd, sizeof sd, "%s/.staging-%s.%ld", warm_root(0), w->key, (long)getpid());
	tree_remove(sd, NULL, NULL, 0);
	if (mkdir(sd, 0700) < 0) {
		warm_warn(w, "warm snapshot not built: unable to create %s: %s; booted cold", sd,
		      strerror(errno));
		close(lk);
		return GOT_NONE;
	}
	/* Half of what is left at most, so that a failed build still leaves
	 * the cold boot the other half. */
	until = mono_ms() + (deadline - mono_ms()) / 2;
	if (until > mono_ms() + BUILD_MAX_MS)
		until = mono_ms() + BUILD_MAX_MS;
	if (warm_build(w, in, plain, sd, until, msg, sizeof msg) < 0) {
		char a[PATH_MAX], b[PATH_MAX];

		warm_warn(w, "warm snapshot %.12s not built: %s; booted cold", w->key, msg);
		/* The template's logs stay with the VM, for whoever wonders why. */
		pathn(a, sizeof a, "%s/qemu.log", sd);
		pathn(b, sizeof b, "%s/template-qemu.log", in->dir);
		rename(a, b);
		pathn(a, sizeof a, "%s/console.log", sd);
		pathn(b, sizeof b, "%s/template-console.log", in->dir);
		rename(a, b);
	} else if (test_kill("warm-publish"), rename(sd, w->dir) < 0) {
		/* Publishing is this one rename: whole or absent. */
		warm_warn(w, "warm snapshot %.12s not published: rename %s: %s; booted cold", w->key, sd,
		      strerror(errno));
	} else {
		int dfd = open(warm_root(0), O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd < 0 || fsync(dfd) < 0)
			warn("unable to sync %s:", warm_root(0));
		if (dfd >= 0)
			close(dfd);
		built = 1;
	}
	if (!built && tree_remove(sd, NULL, msg, sizeof msg) < 0)
		warn("unable to remove %s: %s", sd, msg);
	/* What we built we resume from: keep the lock, shared (a downgrade
	 * conflicts with nobody: no one else holds it). */
	if (built && flock(lk, LOCK_SH) == 0) {
		w->hold = lk;
		return GOT_BUILT;
	}
	close(lk);
	if (!built)
		return GOT_NONE;
	return hold_published(w) == GOT_PUBLISHED ? GOT_BUILT : GOT_NONE;
}

/* Take the published snapshot out of use (the next run rebuilds it), but
 * only the very one we resumed from or checked: under the key's lock, a
 * newer build in its place is left alone. */
void warm_retire(struct pool *w)
{
	struct stat st;
	int lk;

	/* Our own shared hold would stand in our way. */
	if (w->hold >= 0)
		close(w->hold);
	w->hold = -1;
	lk = lock_until(w, mono_ms() + RETIRE_WAIT_MS);

	if (lk < 0) {
		warm_warn(w, "unable to retire the warm snapshot %.12s: its lock is busy", w->key);
		return;
	}
	if (stat(w->dir, &st) == 0 && st.st_ino == w->ino && st.st_dev == w->dev &&
	    warm_remove(w->key, NULL) < 0 && errno != ENOENT)
		warm_warn(w, "unable to remove the warm snapshot %s: %s", w->dir, strerror(errno));
	close(lk);
}

/* Open warm/<key>'s memory file read-only for the clone's QEMU (fd 3).
 * As root, through a read-only detached bind mount of the file alone
 * (open_tree, mount_setattr): every write path from that descriptor -- a
 * reopen of /proc/self/fd/3 O_RDWR, fchmod, ftruncate, fallocate -- fails
 * EROFS whatever the uid, so neither the mode nor isopod-memro.so is the
 * boundary.  The mount, never attached anywhere, lives as long as a
 * descriptor of it does.  Not root: the file itself (no mount then;
 * doc/DECISIONS.md says what that leaves). */
static int mem_open(int dfd)
{
	const struct mount_attr ro = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    MOUNT_ATTR_NOEXEC,
	};
	char p[64];
	int t, fd, e;

	if (geteuid() != 0)
		return openat(dfd, "mem", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	t = open_tree(dfd, "mem", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW);
	if (t < 0)
		return -1;
	/* a file-rooted tree: no name to openat beneath it, /proc reopens it */
	if (mount_setattr(t, "", AT_EMPTY_PATH, (struct mount_attr *)&ro, sizeof ro) < 0 ||
	    pathn(p, sizeof p, "/proc/self/fd/%d", t) < 0)
		fd = -1;
	else
		fd = open(p, O_RDONLY | O_CLOEXEC); /* a magic link: no O_NOFOLLOW */
	e = errno;
	close(t);
	errno = e;
	return fd;
}

/* Open warm/<key> for a resume and check it: its meta, the memory file
 * (size, inode, ctime, by fd: exactly what QEMU will map) and the state
 * file (size and sha256, by fd: exactly what QEMU will read).  0, or -1
 * with why (the caller retires it). */
int snap_open(struct pool *w, struct snap *sn, char *why, size_t wsz)
{
	struct stat ds, ms, ss;
	json_t *meta = NULL, *mm, *sm;
	char sha[65];
	const char *want;
	int dfd, fd, r = -1;

	sn->memfd = sn->statefd = -1;
	w->ino = 0;
	dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0 || fstat(dfd, &ds) < 0) {
		snprintf(why, wsz, "unable to open %.512s: %s", w->dir, strerror(errno));
		goto out;
	}
	w->dev = ds.st_dev;
	w->ino = ds.st_ino;
	if ((fd = openat(dfd, "meta.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		snprintf(why, wsz, "unable to read its meta.json: %s", strerror(errno));
		goto out;
	}
	meta = json_load_close(fd);
	mm = json_object_get(meta, "mem");
	sm = json_object_get(meta, "state");
	want = json_string_value(json_object_get(sm, "sha256"));
	if (!json_is_object(meta) || json_integer_value(json_object_get(meta, "format")) != WARM_FORMAT ||
	    !json_is_string(json_object_get(meta, "key")) ||
	    strcmp(json_string_value(json_object_get(meta, "key")), w->key) || !want) {
		snprintf(why, wsz, "its meta.json is unreadable or of another format");
		goto out;
	}
	/* The key is a hash; the text it hashes must be ours too. */
	if (!json_is_string(json_object_get(meta, "key_text")) ||
	    strcmp(json_string_value(json_object_get(meta, "key_text")), w->text)) {
		snprintf(why, wsz, "its key text is not this VM's");
		goto out;
	}
	if (!json_is_string(json_object_get(meta, "argv_fingerprint")) ||
	    strcmp(json_string_value(json_object_get(meta, "argv_fingerprint")), w->argv_fp)) {
		snprintf(why, wsz, "it was built by an isopod-boot that gave QEMU another command line");
		goto out;
	}
	sn->memfd = mem_open(dfd);
	if (sn->memfd < 0 || fstat(sn->memfd, &ms) < 0) {
		snprintf(why, wsz, "unable to open its memory file: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(ms.st_mode) || ms.st_size != w->vm->mem_mib * MIB ||
	    ms.st_size != json_integer_value(json_object_get(mm, "bytes"))) {
		snprintf(why, wsz, "its memory file is %lld bytes, not %lld", (long long)ms.st_size,
			 w->vm->mem_mib * MIB);
		goto out;
	}
	/* the mount's file is the directory's (same file system, inode) */
	if (ms.st_dev != ds.st_dev || (json_int_t)ms.st_ino != json_integer_value(json_object_get(mm, "ino")) ||
	    (json_int_t)ms.st_ctim.tv_sec != json_integer_value(json_object_get(mm, "ctime_s")) ||
	    (json_int_t)ms.st_ctim.tv_nsec != json_integer_value(json_object_get(mm, "ctime_ns"))) {
		snprintf(why, wsz, "its memory file was modified or replaced after the build");
		goto out;
	}
	/* Every clone of the shape maps it: no clone's QEMU (another uid) may
	 * write it.  A snapshot published 0606 (before isopod-memro.so) too. */
	if (ms.st_uid != geteuid() || (ms.st_mode & 0022) || ms.st_nlink != 1) {
		snprintf(why, wsz, "its memory file is uid %lld mode %04o with %lld links, not ours "
			 "0644 with one: another uid could write it", (long long)ms.st_uid,
			 (unsigned)(ms.st_mode & 07777), (long long)ms.st_nlink);
		goto out;
	}
	sn->statefd = openat(dfd, "state", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (sn->statefd < 0 || fstat(sn->statefd, &ss) < 0) {
		snprintf(why, wsz, "unable to open its state file: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(ss.st_mode) || ss.st_size != json_integer_value(json_object_get(sm, "bytes"))) {
		snprintf(why, wsz, "its state file is %lld bytes, not %lld (truncated?)",
			 (long long)ss.st_size, (long long)json_integer_value(json_object_get(sm, "bytes")));
		goto out;
	}
	if (sha256_fd(sn->statefd, sha) < 0 || lseek(sn->statefd, 0, SEEK_SET) < 0) {
		snprintf(why, wsz, "unable to read its state file: %s", strerror(errno));
		goto out;
	}
	if (strcmp(sha, want)) {
		snprintf(why, wsz, "its state file does not match its sha256 (corrupted)");
		goto out;
	}
	r = 0;
out:
	json_decref(meta);
	if (dfd >= 0)
		close(dfd);
	if (r < 0) {
		if (sn->memfd >= 0)
			close(sn->memfd);
		if (sn->statefd >= 0)
			close(sn->statefd);
		sn->memfd = sn->statefd = -1;
	}
	return r;
}

/* Usage figures in meta.json, under a flock on the snapshot directory. */
void warm_touch(struct pool *w, int hit)
{
	char p[PATH_MAX], now[32];
	json_t *m;
	int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

	if (dfd < 0)
		return; /* retired meanwhile */
	while (flock(dfd, LOCK_EX) < 0 && errno == EINTR)
		;
	pathn(p, sizeof p, "%s/meta.json", w->dir);
	if ((m = json_load_path(p))) {
		json_object_set_new(m, "last_used", json_string(iso_now(now, sizeof now)));
		json_object_set_new(m, "hits",
				    json_integer(json_integer_value(json_object_get(m, "hits")) + hit));
		/* The bytes synced (a torn meta.json would lose the template),
		 * the rename not waited for: a crash that undid it keeps the
		 * previous one, whole, a use fewer counted. */
		if (json_write_atomic_flags(p, m, ATOMIC_NODIRSYNC) < 0)
			warn("unable to update %s:", p);
		json_decref(m);
	}
	close(dfd);
}

/* Make this VM's disk a copy of the published snapshot's empty overlay,
 * when it is one over this very base path and of this size, and its bytes
 * are the ones the build recorded.  0, or -1 (then qemu-img makes one). */
int blank_copy(struct pool *w, const char *disk, long long bytes)
{
	const struct img *im = w->im;
	char p[PATH_MAX], sha[65];
	json_t *m, *b;
	int fd, r = -1;

	pathn(p, sizeof p, "%s/meta.json", w->dir);
	if (!(m = json_load_path(p)))
		return -1;
	b = json_object_get(m, "blank");
	if (!json_is_string(json_object_get(b, "backing")) ||
	    strcmp(json_string_value(json_object_get(b, "backing")), im->base) ||
	    json_integer_value(json_object_get(b, "bytes")) != bytes ||
	    !json_is_string(json_object_get(b, "sha256")))
		goto out;
	pathn(p, sizeof p, "%s/blank.qcow2", w->dir);
	if (copy_small(p, disk) < 0)
		goto out;
	if ((fd = open(disk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		goto out;
	if (sha256_fd(fd, sha) == 0 &&
	    !strcmp(sha, json_string_value(json_object_get(b, "sha256"))) &&
	    qcow2_size(disk) == bytes)
		r = 0;
	close(fd);
out:
	if (r < 0)
		unlink(disk);
	json_decref(m);
	return r;
}

