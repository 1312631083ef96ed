/* pool.c - the run pool's store and its owner hand-over (lib/pool.h).
 *
 * Why a pidfd over a socket and not a FIFO the run holds open: the
 * supervisor already watches an owner's pidfd for a booted VM (--owner),
 * so a pooled VM ends by the very path a booted one does; the run (a
 * shell) need keep no descriptor open, which every program it starts
 * would inherit and hold past the run's own death; and a pidfd names the
 * run's process itself, never a recycled pid. */
#include "config.h"
#include "pool.h"
#include "util.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define ACK_MS 2000 /* the supervisor's answer to a take, at most */

static int cfg_ll(const char *key, const char *env, long long lo, long long hi, long long *v,
		  char *msg, size_t msz)
{
	char val[64], where[PATH_MAX + 32];
	const char *e = getenv(env);
	int r;

	if (e && *e) {
		if (parse_ll(e, lo, hi, v) < 0) {
			snprintf(msg, msz, "%s=%.64s: want %lld..%lld", env, e, lo, hi);
			return -1;
		}
		return 0;
	}
	r = config_value(key, val, sizeof val, where, sizeof where);
	if (r < 0) {
		snprintf(msg, msz, "unable to read %s: %s", where, strerror(errno));
		return -1;
	}
	if (r > 0 && parse_ll(val, lo, hi, v) < 0) {
		snprintf(msg, msz, "%s: %s = %.64s: want %lld..%lld", where, key, val, lo, hi);
		return -1;
	}
	return 0;
}

int pool_config(struct pool_cfg *pc, char *msg, size_t msz)
{
	pc->size = 0;
	pc->idle_s = POOL_IDLE_DEFAULT;
	pc->max = POOL_MAX_DEFAULT;
	if (cfg_ll("pool_size", "ISOPOD_POOL_SIZE", 0, POOL_SIZE_MAX, &pc->size, msg, msz) < 0 ||
	    cfg_ll("pool_max", "ISOPOD_POOL_MAX", 0, POOL_SIZE_MAX * 4, &pc->max, msg, msz) < 0)
		return -1;
	return cfg_ll("pool_idle_s", "ISOPOD_POOL_IDLE_S", 1, 86400, &pc->idle_s, msg, msz);
}

int pool_path(char *out, size_t sz, const char *key)
{
	if (key && !hex64_ok(key)) {
		errno = EINVAL;
		return -1;
	}
	return key ? pathn(out, sz, "%s/pool/%s", store_home(), key)
		   : pathn(out, sz, "%s/pool", store_home());
}

/* An entry's VM id: "ready-<id>" or "filling-<id>", else NULL. */
static const char *entry_vm(const char *name, int *ready)
{
	const char *id = NULL;

	if (!strncmp(name, "ready-", 6))
		id = name + 6, *ready = 1;
	else if (!strncmp(name, "filling-", 8))
		id = name + 8, *ready = 0;
	return id && id_vm_ok(id) ? id : NULL;
}

int pool_count(const char *key, int count_filling)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct dirent *d;
	int n = 0, ready;
	DIR *D;

	if (pool_path(dir, sizeof dir, key) < 0)
		return -1;
	if (!(D = opendir(dir)))
		return errno == ENOENT ? 0 : -1;
	while ((d = readdir(D))) {
		const char *id = entry_vm(d->d_name, &ready);

		if (!id || (!ready && !count_filling))
			continue;
		if (vm_running(id) != 0) {
			n++;
		} else if (ready && pathn(p, sizeof p, "%s/%s", dir, d->d_name) == 0) {
			unlink(p); /* gone: it serves nobody */
		} else if (!ready) {
			/* a filler boots it: counted until the filler says */
			n++;
		}
	}
	closedir(D);
	return n;
}

static int each_shape(int (*fn)(const char *key, const char *dir, void *arg), void *arg);

/* The lock file p locked (op) as it is now: gc removes an idle shape's
 * fill.lock while it holds it (sweep_shape), and a lock on the unlinked
 * file locks nothing (warm_lock's rule).  The fd, or -1 with errno. */
static int lock_current(const char *p, int op)
{
	struct stat a, b;
	int fd;

	for (int i = 0; i < 100; i++) {
		if ((fd = lock_open(p, op)) < 0)
			return -1;
		if (i == 0)
			test_pause("pool-lock"); /* t/52: its file unlinked meanwhile */
		if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev)
			return fd;
		close(fd);
	}
	errno = EAGAIN;
	return -1;
}

int pool_fill_lock(const char *key, int op)
{
	char dir[PATH_MAX], p[PATH_MAX], failed[PATH_MAX];
	int fd = -1;

	if (pool_path(dir, sizeof dir, key) < 0 || pathn(p, sizeof p, "%s/fill.lock", dir) < 0)
		return -1;
	/* the directory gc removed between our mkdir and our open: again */
	for (int i = 0; i < 100 && fd < 0; i++)
		if (mkdir_p(dir, 0700, failed, sizeof failed) < 0 ||
		    ((fd = lock_current(p, op)) < 0 && errno != ENOENT))
			return -1;
	return fd;
}

struct all {
	const char *mine;
	int n;
};

static int count_shape(const char *key, const char *dir, void *arg)
{
	struct all *a = arg;
	char lk[PATH_MAX];
	int n, fd, live;

	if ((n = pool_count(key, 0)) < 0)
		return -1;
	a->n += n;
	/* its filler lives: its VM being filled counts (one at a time) */
	if (a->mine && !strcmp(key, a->mine))
		return 0;
	if (pathn(lk, sizeof lk, "%s/fill.lock", dir) < 0)
		return -1;
	fd = lock_open(lk, LOCK_EX | LOCK_NB);
	live = fd < 0 && errno == EWOULDBLOCK;
	if (fd >= 0)
		close(fd);
	if (live && (n = pool_count(key, 1) - pool_count(key, 0)) > 0)
		a->n += n;
	return 0;
}

int pool_count_all(const char *mine)
{
	struct all a = { .mine = mine };

	return each_shape(count_shape, &a) < 0 ? -1 : a.n;
}

/* A pooled VM's owner socket: pool/.own/<id>.sock, in the store owner's
 * directory -- never in the VM's, which its jailed QEMU can write (a
 * socket of QEMU's there would be handed the run's pidfd). */
static int sock_path(char *out, size_t sz, const char *id)
{
	return pathn(out, sz, "%s/pool/.own/%s.sock", store_home(), id);
}

/* Hand the owner's pidfd to the supervisor of id; 0 when it answered 'k'
 * (we are its one owner), -1 with msg. */
static int hand_over(const char *id, int ownerfd, char *msg, size_t msz)
{
	char sp[PATH_MAX], b = 0;
	struct ucred cr;
	socklen_t crl = sizeof cr;
	struct pollfd pf;
	int fd, r = -1;

	if (sock_path(sp, sizeof sp, id) < 0)
		return reason_fail(msg, msz, "vm %s: socket path too long", id);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return reason_fail(msg, msz, "socket:");
	if (unix_connect_nofollow(fd, sp) < 0) {
		reason_fail(msg, msz, "vm %s: connect %s:", id, sp);
		goto out;
	}
	/* the store owner's supervisor, no one else's socket */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) < 0 || cr.uid != geteuid()) {
		snprintf(msg, msz, "vm %s: %s is not our supervisor's", id, sp);
		goto out;
	}
	if (fd_send(fd, "o", 1, ownerfd) != 1) {
		reason_fail(msg, msz, "vm %s: sendmsg:", id);
		goto out;
	}
	pf = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(&pf, 1, ACK_MS) == 1 && read(fd, &b, 1) == 1 && b == 'k')
		r = 0;
	else
		snprintf(msg, msz, "vm %s: its supervisor did not take the owner", id);
out:
	close(fd);
	return r;
}

int pool_take(const char *key, int ownerfd, char id[VM_ID_SZ], json_t **boot, char *msg,
	      size_t msz)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct dirent *d;
	int ready, got = 0;
	DIR *D;

	*boot = NULL;
	if (pool_path(dir, sizeof dir, key) < 0)
		return reason_fail(msg, msz, "pool path:");
	if (!(D = opendir(dir)))
		return errno == ENOENT ? 0 : reason_fail(msg, msz, "unable to open %s:", dir);
	while (!got && (d = readdir(D))) {
		const char *vid = entry_vm(d->d_name, &ready);
		json_t *j;
		struct stat sb;
		int fd;

		if (!vid || !ready || pathn(p, sizeof p, "%s/%s", dir, d->d_name) < 0)
			continue;
		/* a regular file of ours: a FIFO planted there would block
		 * the run's take (O_NONBLOCK; reads of a file never block) */
		if ((fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)) < 0)
			continue;
		if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
			close(fd);
			continue;
		}
		/* The one unlink that succeeds is the take: no other taker
		 * gets this VM, whatever happens next. */
		if (unlink(p) < 0) {
			close(fd);
			continue;
		}
		j = json_load_close(fd);
		snprintf(id, VM_ID_SZ, "%s", vid);
		/* t/52: a taker killed between its take and the hand-over */
		test_kill("pool-take");
		test_pause("pool-take");
		if (!j || hand_over(id, ownerfd, msg, msz) < 0) {
			/* taken, not handed over: its supervisor saw the entry
			 * go and stops it within POOL_TAKE_MS (review L2) */
			json_decref(j);
			continue;
		}
		*boot = j;
		got = 1;
	}
	closedir(D);
	return got;
}

int pool_publish(const char *key, const char *id, json_t *boot, char *msg, size_t msz)
{
	char dir[PATH_MAX], p[PATH_MAX], failed[PATH_MAX], *text;
	int r;

	if (pool_path(dir, sizeof dir, key) < 0 || pathn(p, sizeof p, "%s/ready-%s", dir, id) < 0)
		return reason_fail(msg, msz, "pool path:");
	if (mkdir_p(dir, 0700, failed, sizeof failed) < 0)
		return reason_fail(msg, msz, "unable to create %s:", failed);
	/* 0600, not json_write_atomic's 0644: the store owner's alone, as
	 * its directory (t/52 checks both) */
	if (!(text = json_dumps(boot, JSON_COMPACT)))
		return reason_fail(msg, msz, "unable to allocate memory");
	r = atomic_write(p, text, strlen(text), 0600);
	free(text);
	if (r < 0)
		return reason_fail(msg, msz, "unable to write %s:", p);
	return 0;
}

int pool_listen(const char *id, char *msg, size_t msz)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[PATH_MAX], failed[PATH_MAX];
	int fd;

	/* bind(2) takes no longer path (the take's connect would, through
	 * /proc/self/fd): said, not cut (review L6) */
	if (sock_path(sa.sun_path, sizeof sa.sun_path, id) < 0)
		return reason_fail(msg, msz, "vm %s: the owner socket %s/pool/.own/%s.sock is longer "
				   "than a socket's path may be (%zu bytes): a shorter ISOPOD_HOME",
				   id, store_home(), id, sizeof sa.sun_path - 1);
	if (pathn(dir, sizeof dir, "%s/pool/.own", store_home()) < 0 ||
	    mkdir_p(dir, 0700, failed, sizeof failed) < 0)
		return reason_fail(msg, msz, "unable to create %s:", failed);
	unlink(sa.sun_path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
		return reason_fail(msg, msz, "socket:");
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || chmod(sa.sun_path, 0600) < 0 ||
	    listen(fd, 4) < 0) {
		reason_fail(msg, msz, "unable to listen on %s:", sa.sun_path);
		close(fd);
		return -1;
	}
	return fd;
}

void pool_unlisten(const char *id)
{
	char p[PATH_MAX];

	if (sock_path(p, sizeof p, id) == 0)
		unlink(p);
}

int pool_accept(int lfd, int *conn)
{
	struct pollfd pf;
	char b = 0;
	int cfd, pfd = -1;

	*conn = -1;
	if ((cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
		return -1;
	pf = (struct pollfd){ .fd = cfd, .events = POLLIN };
	if (poll(&pf, 1, ACK_MS) != 1 || fd_recv(cfd, &b, 1, &pfd) != 1 || b != 'o')
		goto refuse;
	/* a pidfd, nothing else: pidfd_send_signal with signal 0 says so */
	if (pfd >= 0 && pidfd_kill(pfd, 0) < 0 && errno != ESRCH)
		goto refuse;
	if (pfd < 0)
		goto refuse;
	*conn = cfd;
	return pfd;
refuse:
	if (pfd >= 0)
		close(pfd);
	close(cfd);
	return -1;
}

int pool_ack(int conn)
{
	int r = write(conn, "k", 1) == 1 ? 0 : -1;

	close(conn);
	return r;
}

/* The shape directory whose entry (filling-<id> or ready-<id>) names id:
 * the supervisor's, found once at its start (the filler made filling-<id>
 * before the boot).  0, or -1. */
static int entry_dir(const char *id, char *out, size_t sz)
{
	char root[PATH_MAX], p[PATH_MAX];
	struct dirent *d;
	int r = -1;
	DIR *D;

	if (pool_path(root, sizeof root, NULL) < 0 || !(D = opendir(root)))
		return -1;
	while (r < 0 && (d = readdir(D)))
		for (int k = 0; r < 0 && k < 2 && hex64_ok(d->d_name); k++)
			if (pathn(p, sizeof p, "%s/%s/%s-%s", root, d->d_name, k ? "ready" : "filling",
				  id) == 0 &&
			    access(p, F_OK) == 0 &&
			    pathn(out, sz, "%s/%s", root, d->d_name) == 0)
				r = 0;
	closedir(D);
	return r;
}

int pool_watch(const char *id, char *msg, size_t msz)
{
	char dir[PATH_MAX];
	int fd;

	if (entry_dir(id, dir, sizeof dir) < 0) {
		snprintf(msg, msz, "vm %s: no entry of it in any shape of the pool", id);
		return -1;
	}
	if ((fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) < 0)
		return reason_fail(msg, msz, "inotify_init1:");
	if (inotify_add_watch(fd, dir, IN_DELETE | IN_MOVED_FROM) < 0) {
		reason_fail(msg, msz, "unable to watch %s:", dir);
		close(fd);
		return -1;
	}
	return fd;
}

int pool_watch_taken(int ifd, const char *id)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	char name[VM_ID_SZ + 8];
	ssize_t n;
	int taken = 0;

	snprintf(name, sizeof name, "ready-%s", id);
	while ((n = read(ifd, buf, sizeof buf)) > 0)
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *e = (const struct inotify_event *)p;

			if (e->len && !strcmp(e->name, name))
				taken = 1;
			p += sizeof *e + e->len;
		}
	return taken;
}

/* Each shape directory under pool/, to fn. */
static int each_shape(int (*fn)(const char *key, const char *dir, void *arg), void *arg)
{
	char root[PATH_MAX], dir[PATH_MAX];
	struct dirent *d;
	DIR *D;
	int r = 0;

	if (pool_path(root, sizeof root, NULL) < 0)
		return -1;
	if (!(D = opendir(root)))
		return errno == ENOENT ? 0 : -1;
	while ((d = readdir(D)))
		if (hex64_ok(d->d_name) && pathn(dir, sizeof dir, "%s/%s", root, d->d_name) == 0 &&
		    fn(d->d_name, dir, arg) < 0)
			r = -1;
	closedir(D);
	return r;
}

struct sweep {
	int dry;
	json_t *out, *shapes;
};

/* An idle shape's directory removed, under its fill lock (fl): what is
 * left in it is no entry's (fill.log, a killed filler's claim.* or
 * publish temporary), fill.lock last.  A filler that opens fill.lock
 * after its unlink makes another, and rmdir fails; one that opened it
 * before locks the unlinked file, sees it (lock_current) and makes the
 * directory again.  1 when removed. */
static int drop_shape(const char *dir, const char *lk)
{
	struct dirent *d;
	char p[PATH_MAX];
	DIR *D;

	if (!(D = opendir(dir)))
		return 0;
	while ((d = readdir(D)))
		if (d->d_name[0] != '.' && strcmp(d->d_name, "fill.lock") &&
		    pathn(p, sizeof p, "%s/%s", dir, d->d_name) == 0)
			unlink(p);
	closedir(D);
	unlink(lk);
	return rmdir(dir) == 0;
}

static int sweep_shape(const char *key, const char *dir, void *arg)
{
	struct sweep *sw = arg;
	char p[PATH_MAX], lk[PATH_MAX];
	struct dirent *d;
	int ready, left = 0, fl;
	DIR *D;

	if (!(D = opendir(dir)))
		return -1;
	/* the filler's lock free: no filler, its filling-* entries are stale */
	pathn(lk, sizeof lk, "%s/fill.lock", dir);
	fl = lock_current(lk, LOCK_EX | LOCK_NB);
	while ((d = readdir(D))) {
		const char *id = entry_vm(d->d_name, &ready);

		if (!id)
			continue;
		if (vm_running(id) != 0 && (ready || fl < 0)) {
			left++;
			continue;
		}
		if (pathn(p, sizeof p, "%s/%s", dir, d->d_name) < 0)
			continue;
		json_array_append_new(sw->out, json_pack("{s:s, s:s, s:b}", "key", key, "vm", id,
							 "removed", !sw->dry && unlink(p) == 0));
	}
	closedir(D);
	/* no entry left and no filler: the shape goes (each refused or
	 * unused one would stay forever otherwise); a take of it finds
	 * nothing, as in an empty one, and its filler makes it again */
	if (fl >= 0 && left == 0)
		json_array_append_new(sw->shapes, json_pack("{s:s, s:b}", "key", key, "removed",
							    !sw->dry && drop_shape(dir, lk)));
	if (fl >= 0)
		close(fl);
	return 0;
}

int pool_sweep(int dry, json_t *out, json_t *shapes)
{
	struct sweep sw = { .dry = dry, .out = out, .shapes = shapes };

	return each_shape(sweep_shape, &sw);
}

/* QEMU's PSS in bytes, from /proc/PID/smaps_rollup; 0 when unknown. */
static long long pss_bytes(long long pid)
{
	char p[64], line[256];
	long long kb = 0;
	FILE *f;

	snprintf(p, sizeof p, "/proc/%lld/smaps_rollup", pid);
	if (!(f = fopen(p, "re")))
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "Pss: %lld kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

struct df {
	long long shapes, ready, filling, pss;
};

static int df_shape(const char *key, const char *dir, void *arg)
{
	struct df *df = arg;
	struct dirent *d;
	int ready;
	DIR *D;

	(void)key;
	if (!(D = opendir(dir)))
		return 0;
	df->shapes++;
	while ((d = readdir(D))) {
		const char *id = entry_vm(d->d_name, &ready);
		json_t *rec;

		if (!id || vm_running(id) != 1)
			continue;
		*(ready ? &df->ready : &df->filling) += 1;
		if ((rec = vm_read(id))) {
			df->pss += pss_bytes(json_integer_value(json_object_get(rec, "qemu_pid")));
			json_decref(rec);
		}
	}
	closedir(D);
	return 0;
}

json_t *pool_df(void)
{
	struct df df = { 0 };

	each_shape(df_shape, &df);
	return json_pack("{s:I, s:I, s:I, s:I}", "shapes", (json_int_t)df.shapes, "ready",
			 (json_int_t)df.ready, "filling", (json_int_t)df.filling, "pss_bytes",
			 (json_int_t)df.pss);
}
