/* isopod-gc - remove old VM records; find and end what leaked.
 *
 * A running VM (its lock held) is never touched, nor a stopped one whose
 * owner (the isopod run that booted it) is still alive: that run is still
 * reading its logs.  Records go by a retention policy (the newest N and
 * anything younger than a grace period stay; config file keys gc_keep_last,
 * gc_grace).  A process is only killed when the record says it should be
 * gone (state booting/running with a free lock) and the process is still
 * the one it names (start time, uid: still_ours).  --auto is what every
 * run starts: at most once per gc_interval, never waiting for a lock,
 * detached from its caller. */

#include "config.h"
#include "gcauto.h"
#include "gcstore.h"
#include "pool.h"
#include "jail.h"
#include "proc.h"
#include "tree.h"
#include "util.h"
#include "vm.h"
#include "warm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define USAGE "isopod-gc [--keep-last N] [--older-than DUR] [--all] [--warm-budget SIZE] [--cache] [--auto] [--dry-run] [--df]"

/* A claim is a VM about to boot; leave young ones alone. */
#define CLAIM_GRACE_S 3600
/* A staging file whose writer's pid is alive is left alone for this long. */
#define TMP_GRACE_S 3600
/* The retention policy when no option and no config file says otherwise:
 * a result printed a moment ago keeps its logs. */
#define KEEP_LAST_DEFAULT 20
#define GRACE_DEFAULT_S 3600
/* The warm pool's byte budget (disk actually allocated). */
#define WARM_BUDGET_DEFAULT (4LL << 30)

/* isopod-gc's state: main's, passed down.  gs: the sweep's (lib/gcstore.h:
 * dry run, bytes reclaimed, the trash); leaked: what was found leaked; the
 * options (-1: not given). */
struct gc {
	struct gcstore gs;
	json_t *leaked;
	long long keep_last, older, budget, every;
	int all, is_auto, df, cache;
};

static time_t parse_iso(const char *s, time_t dflt)
{
	struct tm tm;
	const char *e;

	if (!s)
		return dflt;
	memset(&tm, 0, sizeof tm);
	e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!e)
		return dflt;
	return timegm(&tm);
}

/* Is the run that booted this record still alive?  Its front end passed
 * its own pid as the owner; while it lives it may still read the record's
 * logs (isopod-result), so the record is in use even when the VM stopped.
 * A pid reused since is a process that started after the owner died, so
 * after the record was created: only a process started before then (2 s
 * of slack: `created` has a second's resolution, btime jitters) counts.
 * A --keep VM outlives its owner by design: its owner does not pin it. */
static int owner_alive(const struct rec *r)
{
	time_t t;

	if (r->keep || !proc_alive(r->owner_pid))
		return 0;
	t = proc_started(r->owner_pid);
	return t >= 0 && t <= r->created + 2;
}

/* --auto with a setting it cannot read: the report says so (isopod df
 * shows it), stdout too; a usage error. */
static void auto_failed(int code, const char *msg)
{
	char p[PATH_MAX], now[32];
	json_t *r = json_pack("{s:b, s:b, s:s, s:s}", "auto", 1, "started", 0, "error", msg,
			      "at", iso_now(now, sizeof now));

	pathf(p, sizeof p, "%s/locks", store_home());
	mkdirs(p, 0700);
	pathf(p, sizeof p, "%s/locks/gc-auto.json", store_home());
	if (!r || json_write_atomic(p, r) < 0)
		warn("unable to write %s:", p);
	json_emit(r);
	die(code, "%s", msg);
}

/* --df: the last automatic gc's error (a bad setting), else null: nobody reads its stderr. */
static json_t *auto_error(void)
{
	char p[PATH_MAX];
	json_t *r, *e;

	pathf(p, sizeof p, "%s/locks/gc-auto.json", store_home());
	r = json_load_path(p);
	e = json_incref(json_object_get(r, "error"));
	json_decref(r);
	return e ? e : json_null();
}

/* --auto: 1 when this process should go on and collect (detached from its
 * caller, holding locks/gc), 0 when it is not due or another gc runs.
 * Costs a stat when not due (isopod-claim --gc-auto asks the same first,
 * lib/gcauto.c, and starts us only when due). */
static int auto_start(long long every)
{
	char p[PATH_MAX], stamp[PATH_MAX], v[64];
	pid_t pid;
	int lk, fd;

	if (!gc_auto_due(every))
		return 0;
	pathf(stamp, sizeof stamp, "%s/locks/gc-auto", store_home());
	pathf(p, sizeof p, "%s/locks", store_home());
	mkdirs(p, 0700);
	pathf(p, sizeof p, "%s/locks/gc", store_home());
	/* Never wait: a gc already at work is as good as ours. */
	if ((lk = lock_open(p, LOCK_EX | LOCK_NB)) < 0)
		return 0;
	/* Checked again under the lock: another may have just finished. */
	if (!gc_auto_due(every))
		return 0;
	snprintf(v, sizeof v, "%lld\n", (long long)time(NULL));
	if (atomic_write(stamp, v, strlen(v), 0600) < 0)
		die(EX_SYS, "unable to write %s:", stamp);
	/* The store by an absolute path: we leave the caller's directory. */
	if (store_home()[0] != '/') {
		char *abs = realpath(store_home(), NULL);

		if (!abs || setenv("ISOPOD_HOME", abs, 1) < 0)
			die(EX_SYS, "unable to resolve %s:", store_home());
		free(abs);
	}
	/* Detach: the run that started us goes on at once; we outlive it,
	 * in a session of our own, at low priority, holding locks/gc (the
	 * lock is on the open file, which the child keeps). */
	if ((pid = fork()) < 0)
		die(EX_SYS, "unable to fork:");
	if (pid > 0) {
		json_emit(json_pack("{s:b, s:I}", "started", 1, "pid", (json_int_t)pid));
		exit(0);
	}
	setsid();
	/* Hold no directory of the caller's busy (an unmount, a removal). */
	if (chdir("/") < 0)
		die(EX_SYS, "unable to chdir to /:");
	if (nice(10) == -1) {
		/* best effort: a gc at normal priority is still correct */
	}
	/* stdin and stdout: /dev/null; stderr: locks/gc-auto.log, so that
	 * whatever stops a detached gc can still be read. */
	pathf(p, sizeof p, "%s/locks/gc-auto.log", store_home());
	if ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	if ((fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0) {
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	/* Nothing of the caller's but the lock (e.g. a test harness's pipe). */
	for (fd = 3; fd < 1024; fd++)
		if (fd != lk)
			close(fd);
	return 1;
}

/* Does /proc/<pid>/cmdline carry an argument containing dir + "/"? */
static int cmdline_names(int pid, const char *dir)
{
	char p[64], needle[PATH_MAX], *buf;
	size_t len = 0, cap = 1 << 16, nl;
	ssize_t r;
	int fd, found = 0;

	snprintf(p, sizeof p, "/proc/%d/cmdline", pid);
	pathf(needle, sizeof needle, "%s/", dir);
	nl = strlen(needle);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	if (!(buf = malloc(cap)))
		die(EX_SYS, "unable to allocate memory:");
	while (len < cap && (r = read(fd, buf + len, cap - len)) > 0)
		len += (size_t)r;
	close(fd);
	if (len >= nl) {
		size_t i;

		for (i = 0; i + nl <= len && !found; i++)
			found = !memcmp(buf + i, needle, nl);
	}
	free(buf);
	return found;
}

static void load_rec(struct rec *r, const char *vmsdir, const char *id)
{
	char p[PATH_MAX];
	struct stat st;
	json_t *j, *v;
	const char *s;

	memset(r, 0, sizeof *r);
	snprintf(r->id, sizeof r->id, "%s", id);
	pathf(p, sizeof p, "%s/%s", vmsdir, id);
	r->created = stat(p, &st) == 0 ? st.st_mtime : 0;
	j = vm_read(id);
	s = j ? json_string_value(json_object_get(j, "state")) : NULL;
	snprintf(r->state, sizeof r->state, "%s", s ? s : "broken");
	if (j) {
		r->created = parse_iso(json_string_value(json_object_get(j, "created")), r->created);
		v = json_object_get(j, "qemu_pid");
		r->qemu_pid = json_is_integer(v) ? json_integer_value(v) : 0;
		v = json_object_get(j, "qemu_start");
		r->qemu_start = json_is_integer(v) && json_integer_value(v) > 0
					? (unsigned long long)json_integer_value(v) : 0;
		v = json_object_get(j, "broker_pid");
		r->broker_pid = json_is_integer(v) ? json_integer_value(v) : 0;
		v = json_object_get(j, "broker_start");
		r->broker_start = json_is_integer(v) && json_integer_value(v) > 0
					  ? (unsigned long long)json_integer_value(v) : 0;
		v = json_object_get(j, "broker_uid");
		r->broker_uid = json_is_integer(v) ? json_integer_value(v) : -1;
		s = json_string_value(json_object_get(j, "boot_id"));
		if (!s || boot_id_of(s, r->boot_id) < 0)
			r->boot_id[0] = 0;
		v = json_object_get(j, "owner_pid");
		r->owner_pid = json_is_integer(v) ? json_integer_value(v) : 0;
		r->keep = json_is_true(json_object_get(j, "keep"));
		snprintf(r->warm_key, sizeof r->warm_key, "%s",
			 json_string_value(json_object_get(j, "warm_key")) ?: "");
		snprintf(r->kernel, sizeof r->kernel, "%s",
			 json_string_value(json_object_get(json_object_get(j, "kernel"), "sha256")) ?: "");
	}
	r->ref = parse_iso(j ? json_string_value(json_object_get(j, "stopped_at")) : NULL,
			   r->created);
	r->running = vm_running(id);
	json_decref(j);
}

/* The store as one object (review L6): opened once, before any record is
 * read, and from then on reached only through that descriptor (its
 * /proc/self/fd path becomes ISOPOD_HOME, so lib/ reads the records, takes
 * the locks and sweeps through it), so a store swapped for a symlink to
 * another afterwards changes nothing gc sees.  Returns the store's owner
 * for store_uid: of its vms/ (a user's store may be a directory root made
 * for it), unless someone else could swap vms/ for their own: a store
 * directory of another non-root uid (its owner, then), or one writable by
 * group or others without the sticky bit (-1: nobody's, nothing killed).
 * The path the user gave goes to orig (diagnostics, cmdlines). */
static long long store_pin(char *orig, size_t osz)
{
	char fdp[32];
	struct stat st, vs;
	int fd, vfd;

	pathf(orig, osz, "%s", store_home());
	mkdirs(orig, 0700);
	if ((fd = open(orig, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0)
		die(EX_SYS, "unable to open the store %s:", orig);
	/* "/.": the directory itself, also to what does not follow a
	 * symlink at the top (tree_visit's O_NOFOLLOW: the tmp sweep;
	 * tree_bytes's: df's total) */
	snprintf(fdp, sizeof fdp, "/proc/self/fd/%d/.", fd);
	if (setenv("ISOPOD_HOME", fdp, 1) < 0)
		die(EX_SYS, "unable to set ISOPOD_HOME:");
	if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX))
		return -1;
	if ((vfd = openat(fd, "vms", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return errno == ENOENT ? (long long)st.st_uid : -1;
	if (fstat(vfd, &vs) < 0)
		vs.st_uid = (uid_t)-1;
	close(vfd);
	if (vs.st_uid == (uid_t)-1 || (st.st_uid != 0 && vs.st_uid != st.st_uid))
		return st.st_uid == 0 ? -1 : (long long)st.st_uid;
	return vs.st_uid;
}

/* A path in the store as the user named the store (c->gs.store), not as gc
 * reaches it (store_pin's /proc/self/fd path): what reports show. */
static const char *as_given(const struct gc *c, char *buf, size_t sz, const char *p)
{
	size_t n = strlen(store_home());

	if (strncmp(p, store_home(), n))
		return p;
	pathf(buf, sz, "%s%s", c->gs.store, p + n);
	return buf;
}

/* May this store (its owner: store_pin) have started a process of uid u?
 * Its owner runs its VMs as itself (a user's jail maps the user's own
 * uid), and only root's store runs them as jail identities (lib/jail.h).
 * A record is the store owner's to write: forged in a user's store, it
 * must not have a root gc kill root's or another user's process (review
 * L6). */
static int store_uid(long long u, long long owner)
{
	uid_t first, count;
	char err[256];

	if (u < 0 || owner < 0)
		return 0;
	if (u == owner)
		return 1;
	return owner == 0 && jail_uid_range(&first, &count, err, sizeof err) == 0 &&
	       u >= (long long)first && u - (long long)first < (long long)count;
}

/* Is pid still the process the record names?  By what the kernel says and
 * the process cannot change: the start time the supervisor recorded at
 * spawn, the broker's uid when recorded, and a uid this store can have
 * started (store_uid).  1 yes; 0 no; -1 unknown: no start recorded (a
 * supervisor that could not read it, or an older isopod) and its cmdline,
 * which a process can rewrite, names dir/: never killed on that alone
 * (review L5), reported.  The start is ticks since the host booted: a
 * record of another boot (boot_id, the host's when the supervisor wrote
 * it) names no process of this one, whatever has that pid and start now
 * (a record left by a host crash).  A record without one (an older
 * isopod, an unreadable boot id) goes by the start alone. */
static int still_ours(long long pid, unsigned long long start, long long uid, const char *boot,
		      const char *dir, long long owner)
{
	unsigned long long t;
	long long ru, eu;
	char now[37];

	if (*boot && host_boot_id(now) == 0 && strcmp(boot, now))
		return 0;
	if (!start)
		return cmdline_names((int)pid, dir) ? -1 : 0;
	if (proc_ident(pid, &t, &ru, &eu) < 0 || t != start || (uid >= 0 && (ru != uid || eu != uid)))
		return 0;
	if (store_uid(ru, owner) && store_uid(eu, owner))
		return 1;
	warn("the record of %s names pid %lld (uid %lld), which this store cannot have started: left alone",
	     dir, pid, ru);
	return 0;
}

/* Kill what pid names if it is still a process of the VM in dir
 * (still_ours): pidfd first, then verify, so a recycled pid cannot slip
 * in between.  kind: "qemu" or "broker". */
static void reap_pid(struct gc *c, const char *kind, long long pid, unsigned long long start, long long uid,
		     const char *boot, const char *id, long long owner)
{
	int pfd = pid > 0 && pid <= INT_MAX ? pidfd_open_((pid_t)pid) : -1;
	char dir[PATH_MAX];
	int ours;

	/* the store by the path given: what cmdlines and the user name */
	pathf(dir, sizeof dir, "%s/vms/%s", c->gs.store, id);
	ours = pfd >= 0 ? still_ours(pid, start, uid, boot, dir, owner) : 0;
	if (ours < 0) {
		warn("leaked %s %lld of %s not killed: its start time was not recorded, and a "
		     "cmdline naming the VM does not prove it is the VM's", kind, pid, id);
		json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:I, s:b, s:s}", "kind", kind, "vm",
							id, "pid", (json_int_t)pid, "killed", 0,
							"why", "start time unknown"));
	} else if (ours) {
		int killed = 0;

		if (!c->gs.dry_run) {
			if (pidfd_kill(pfd, SIGKILL) == 0)
				killed = 1;
			else
				warn("unable to kill leaked %s %lld of %s:", kind, pid, id);
		}
		json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:I, s:b}", "kind", kind, "vm",
							id, "pid", (json_int_t)pid, "killed",
							killed));
	}
	if (pfd >= 0)
		close(pfd);
}

/* A record that says booting/running but whose lock is free: its supervisor
 * is gone.  Kill a surviving QEMU or egress broker (verified: still_ours),
 * mark it failed. */
static void reap_stale(struct gc *c, struct rec *r, long long owner)
{
	static const char *const live[] = { "booting", "running", NULL };
	char now[32];
	json_t *m;

	if (strcmp(r->state, "booting") && strcmp(r->state, "running"))
		return;
	reap_pid(c, "qemu", r->qemu_pid, r->qemu_start, -1, r->boot_id, r->id, owner);
	reap_pid(c, "broker", r->broker_pid, r->broker_start, r->broker_uid, r->boot_id, r->id, owner);
	if (c->gs.dry_run)
		return;
	m = json_pack("{s:s, s:s, s:s}", "state", "failed", "error",
		      "the supervisor vanished (found by isopod-gc)", "stopped_at",
		      iso_now(now, sizeof now));
	if (!m || vm_meta_update(r->id, live, m) < 0)
		warn("unable to update the record of %s:", r->id);
	json_decref(m);
	snprintf(r->state, sizeof r->state, "failed");
}

static int newest_first(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	if (x->created != y->created)
		return x->created < y->created ? 1 : -1;
	return strcmp(y->id, x->id);
}

/* The writer's pid from a staging name: "<name>.tmp.<pid>" (util.c
 * atomic_write, images/register files) or ".tmp-<name>.<pid>" (directories
 * images/register renames into place).  0 when the name is not one. */
static long long staging_pid(const char *b, int isdir)
{
	const char *t = NULL, *q;
	long long pid;

	if (isdir) {
		if (strncmp(b, ".tmp-", 5) || !(t = strrchr(b, '.')) || t == b)
			return 0;
		return parse_ll(t + 1, 1, INT_MAX, &pid) < 0 ? 0 : pid;
	}
	for (q = b; (q = strstr(q, ".tmp.")); q++)
		t = q;
	if (!t || parse_ll(t + 5, 1, INT_MAX, &pid) < 0)
		return 0;
	return pid;
}

/* One entry of the store's walk (tmp_sweep, a tree_visit callback): a
 * staging file or directory whose writer is gone goes, decided on its
 * fstatat relative to its parent's descriptor and removed by that
 * descriptor and its name, never by a path a jail could swap a link into.
 * 1: do not descend into it. */
static int tmp_one(const struct tree_ent *e, void *arg)
{
	struct gc *c = arg;
	const struct stat *st = e->st;
	int isdir = S_ISDIR(st->st_mode);
	char path[PATH_MAX], shown[PATH_MAX];
	long long pid;

	if (!S_ISREG(st->st_mode) && !S_ISLNK(st->st_mode) && !isdir)
		return 0;
	/* The trash is emptied by its own gc (or adopted by the next). */
	if (isdir && e->depth == 1 && !strcmp(e->name, "trash"))
		return 1;
	/* Only our own: a jail's uid writes in a running VM's directory (and
	 * a building template's), and could plant a ".tmp-x.<dead pid>" there.
	 * Every staging name isopod writes is the euid's; a directory handed
	 * to a jail (group- or other-writable, not our group: qjail_give) is
	 * not walked at all while it is handed over. */
	if (st->st_uid != geteuid())
		return isdir;
	if (isdir && (((st->st_mode & 0022) && st->st_gid != getegid()) ||
		      ((st->st_mode & S_IWOTH) && !(st->st_mode & S_ISVTX))))
		return 1; /* others could rename our entries in it */
	if (!(pid = staging_pid(e->name, isdir)))
		return 0;
	if (proc_alive(pid) && time(NULL) - st->st_mtime < TMP_GRACE_S)
		return isdir;
	if (pathn(path, sizeof path, "%s/%s", store_home(), e->path) < 0)
		snprintf(path, sizeof path, ".../%s", e->name);
	test_pause("gc-tmp"); /* t/30: the parent swapped for a link here */
	if (isdir) {
		gcstore_remove_tree_at(&c->gs, e->dfd, e->name, path);
	} else {
		if (st->st_nlink == 1) /* another link: frees nothing */
			c->gs.reclaimed += (long long)st->st_blocks * 512;
		if (!c->gs.dry_run && unlinkat(e->dfd, e->name, 0) < 0 && errno != ENOENT)
			warn("unable to remove %s:", EXC(path));
	}
	if (pathn(shown, sizeof shown, "%s/%s", c->gs.store, e->path) < 0)
		snprintf(shown, sizeof shown, "%s", path);
	json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "tmp", "path", shown,
						   "removed", !c->gs.dry_run));
	return isdir;
}

/* Staging files and directories whose writer is gone, anywhere in the
 * store: lib/tree.c's visit (by descriptor: a directory swapped for a link
 * is not followed, another mount not entered).  What it could not visit
 * is not ours to report: it was not walked, as before. */
static void tmp_sweep(struct gc *c)
{
	struct stat st; /* a store others may rename in (not sticky): not swept */

	if (stat(store_home(), &st) == 0 && !((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) &&
	    !((st.st_mode & S_IWGRP) && st.st_gid != getegid()))
		tree_visit(AT_FDCWD, store_home(), tmp_one, c, NULL, 0);
}

/* accel/probe-<16 hex of ksha>: the KVM probe's scratch dir, left by a killed boot. */
static void stale_probes(struct gc *c)
{
	char dir[PATH_MAX], p[PATH_MAX], shown[PATH_MAX];
	struct dirent *de;
	DIR *d;

	pathf(dir, sizeof dir, "%s/accel", store_home());
	if (!(d = opendir(dir)))
		return;
	while ((de = readdir(d))) {
		int fds[8], n;

		if (strncmp(de->d_name, "probe-", 6) || strlen(de->d_name) != 6 + 16)
			continue;
		/* The probe holds accel/<64 hex of ksha>.lock while it uses
		 * its dir, named by the first 16 (a unix socket path limit,
		 * lib/accel.c): every such lock, never one of gc's own making
		 * (<16 hex>.lock, always free: gc once moved a running probe's
		 * dir to the trash under it, and a fresh store's first run
		 * failed in its KVM probe, its gc --auto racing it).  They
		 * stay held while the dir goes. */
		if ((n = gcstore_lock_prefix(dir, de->d_name + 6, fds, 8)) < 0)
			continue; /* a probe is running */
		pathf(p, sizeof p, "%s/%s", dir, de->d_name);
		gcstore_remove_tree(&c->gs, p);
		json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "probe", "path",
							as_given(c, shown, sizeof shown, p),
							"removed", !c->gs.dry_run));
		while (n > 0)
			close(fds[--n]);
	}
	closedir(d);
}

/* runs/<id>.<pid>.<start>: the scratch directory of an isopod run
 * (isopod-claim --scratch) whose front end was killed before it removed
 * it.  Its owner is gone when no process pid has that start (clock ticks
 * since boot, lib/proc.c proc_ident): a pid reused since started later.
 * Only a directory of ours, removed by the descriptor of runs/ and its
 * name. */
static void run_sweep(struct gc *c)
{
	char dir[PATH_MAX], p[PATH_MAX], shown[PATH_MAX], num[24];
	unsigned long long now;
	long long pid, start;
	const char *a, *b;
	struct stat st, rs;
	struct dirent *de;
	DIR *d;
	int fd;

	/* runs/ itself not followed (root's gc on a user's store: a link
	 * there to another store's runs/), its entries only its owner's */
	pathf(dir, sizeof dir, "%s/runs", store_home());
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return;
	if (fstat(fd, &rs) < 0 || !(d = fdopendir(fd))) {
		close(fd);
		return;
	}
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "vm-", 3) || !(a = strchr(de->d_name, '.')) ||
		    !(b = strchr(a + 1, '.')) || (size_t)(b - a - 1) >= sizeof num)
			continue;
		memcpy(num, a + 1, (size_t)(b - a - 1));
		num[b - a - 1] = 0;
		if (parse_ll(num, 1, INT_MAX, &pid) < 0 || parse_ll(b + 1, 0, LLONG_MAX, &start) < 0)
			continue;
		errno = 0;
		if (proc_ident(pid, &now, NULL, NULL) == 0 ? now == (unsigned long long)start
							   : errno != ENOENT)
			continue; /* its run is still going, or we cannot tell (EMFILE) */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
		    st.st_uid != rs.st_uid)
			continue;
		pathf(p, sizeof p, "%s/%s", dir, de->d_name);
		gcstore_remove_tree_at(&c->gs, dirfd(d), de->d_name, p);
		json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "run", "path",
							as_given(c, shown, sizeof shown, p),
							"removed", !c->gs.dry_run));
	}
	closedir(d);
}

/* What a warm template's builder killed mid-build left in its VM's
 * directory (lib/warm.h): its sockets' directory tpl/, which the jail's
 * uid writes (emptied by its fd, never walked; a directory in it stays,
 * named), and the VM's disk still lent at 0644.  tpl/ is the sign of
 * both.  Each record not running, under its lock (the builder's boot
 * holds it throughout, and none starts meanwhile), taken only when there
 * is something to undo: a claimed VM's boot (gc --auto runs beside every
 * run's) would fail "already running" while gc held it. */
static void tpl_leftovers(struct gc *c, const struct rec *recs, size_t nrec)
{
	char dir[PATH_MAX], p[PATH_MAX], t[PATH_MAX], shown[PATH_MAX], left[PATH_MAX];
	size_t i;
	int lk, r;

	for (i = 0; i < nrec; i++) {
		pathf(dir, sizeof dir, "%s/vms/%s", store_home(), recs[i].id);
		pathf(p, sizeof p, "%s/lock", dir);
		/* a record removed by this gc is gone: ENOENT */
		if (recs[i].running || warm_tpl_clear(dir, 1, left, sizeof left) <= 0 ||
		    (lk = lock_open(p, LOCK_EX | LOCK_NB)) < 0)
			continue;
		pathf(p, sizeof p, "%s/disk.qcow2", dir);
		if ((r = warm_tpl_unlend(dir, c->gs.dry_run)) < 0)
			warn("unable to put the mode of %s back to 0600:", p);
		if (r)
			json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "lent", "path",
								as_given(c, shown, sizeof shown, p),
								"removed", r > 0 && !c->gs.dry_run));
		pathf(t, sizeof t, "%s/" WARM_TPL_DIR, dir);
		if ((r = warm_tpl_clear(dir, c->gs.dry_run, left, sizeof left)) < 0)
			warn("unable to remove %s:", t);
		else if (r == 2)
			warn("left %s: %s in it is not the template's to remove",
			     as_given(c, shown, sizeof shown, t), left);
		if (r > 0)
			json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "tpl", "path",
								as_given(c, shown, sizeof shown, t),
								"removed", r == 1 && !c->gs.dry_run));
		close(lk);
	}
}

/* The warm pool (lib/warm.h): snapshots that can never be resumed again
 * (orphans), staging and retired directories whose writer is gone, lock
 * files of keys that have no snapshot.  Everything is done holding the
 * key's lock (LOCK_NB: a key busy building is left alone), so nothing a
 * live builder or resumer uses is touched. */
static void warm_sweep(struct gc *c, json_t *warm_removed)
{
	char dir[PATH_MAX], p[PATH_MAX], shown[PATH_MAX], key[65], qv[256], qerr[512];
	const char *cur_qemu = NULL;
	struct dirent *de;
	struct stat st;
	long long pid;
	DIR *d;

	pathf(dir, sizeof dir, "%s/warm", store_home());
	if (!(d = opendir(dir)))
		return;
	if (qemu_version(qv, sizeof qv, qerr, sizeof qerr) == 0)
		cur_qemu = qv;
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		int lk;

		pathf(p, sizeof p, "%s/%s", dir, n);
		if (warm_stale_name(n, key, &pid)) {
			/* A builder or retirer holds the key's lock for as long
			 * as its directory exists; a free lock or a dead pid
			 * means nobody will ever finish or remove it. */
			lk = warm_lock(key, LOCK_EX | LOCK_NB);
			if (lk < 0 && proc_alive(pid))
				continue;
			if (gcstore_discard(&c->gs, p) < 0 && errno != ENOENT)
				warn("unable to remove %s:", p);
			json_array_append_new(c->leaked, json_pack("{s:s, s:s, s:b}", "kind", "warm",
								"path", as_given(c, shown, sizeof shown, p),
								"removed", !c->gs.dry_run));
			if (lk >= 0)
				close(lk);
		} else if (warm_key_valid(n)) {
			json_t *m = warm_meta(n);
			json_t *why = m ? warm_orphaned_by(m, cur_qemu)
					: json_pack("[s]", "no readable meta.json");

			json_decref(m);
			if (!why || !json_array_size(why)) {
				json_decref(why);
				continue;
			}
			if ((lk = warm_lock(n, LOCK_EX | LOCK_NB)) < 0) {
				json_decref(why);
				continue;
			}
			if (gcstore_discard(&c->gs, p) < 0 && errno != ENOENT)
				warn("unable to remove the warm snapshot %s:", p);
			if (!c->gs.dry_run) {
				pathf(p, sizeof p, "%s/%s.lock", dir, n);
				unlink(p);
			}
			close(lk);
			json_array_append_new(warm_removed, json_pack("{s:s, s:o}", "key", n,
								      "orphaned_by", why));
		} else if (strlen(n) == 69 && !strcmp(n + 64, ".lock")) {
			/* Litter of a key that has no snapshot (any more). */
			memcpy(key, n, 64);
			key[64] = 0;
			pathf(p, sizeof p, "%s/%s", dir, key);
			if (!warm_key_valid(key) || stat(p, &st) == 0 || c->gs.dry_run)
				continue;
			if ((lk = warm_lock(key, LOCK_EX | LOCK_NB)) < 0)
				continue;
			/* Unlinked while held: whoever waits on it re-takes the
			 * new file (lib/warm.c warm_lock). */
			pathf(p, sizeof p, "%s/%s", dir, n);
			unlink(p);
			close(lk);
		}
	}
	closedir(d);
}

/* The VM records: read them all, end what leaked from a stale one, and
 * remove (holding its lock) each the retention policy lets go.  Returns
 * the records (*nrecp of them) for the store sweeps; *keptp counts those
 * that stay.  owner: store_pin's, fixed before the first record is read. */
static struct rec *sweep_records(struct gc *c, time_t now, long long owner, json_t *removed,
				 size_t *nrecp, long long *keptp)
{
	char vmsdir[PATH_MAX], p[PATH_MAX];
	long long kept = 0;
	struct rec *recs = NULL;
	size_t nrec = 0, cap = 0, i, ncand;
	struct dirent *de;
	DIR *d;


	pathf(vmsdir, sizeof vmsdir, "%s/vms", store_home());
	if ((d = opendir(vmsdir))) {
		while ((de = readdir(d))) {
			if (strncmp(de->d_name, "vm-", 3) || strlen(de->d_name) >= 64)
				continue;
			if (nrec == cap) {
				cap = cap ? 2 * cap : 64;
				if (!(recs = realloc(recs, cap * sizeof *recs)))
					die(EX_SYS, "unable to allocate memory:");
			}
			load_rec(&recs[nrec++], vmsdir, de->d_name);
		}
		closedir(d);
	} else if (errno != ENOENT) {
		die(EX_SYS, "unable to open %s:", vmsdir);
	}

	for (i = 0; i < nrec; i++) {
		struct rec *r = &recs[i];

		if (r->running)
			continue;
		reap_stale(c, r, owner);
		if ((r->in_use = owner_alive(r)))
			continue;
		if (!strcmp(r->state, "claimed") && now - r->created < CLAIM_GRACE_S)
			continue;
		r->candidate = now - r->ref >= c->older;
	}
	/* --keep-last N: the N newest records that are not running survive. */
	if (nrec) /* qsort's base must not be NULL, even for no element */
		qsort(recs, nrec, sizeof *recs, newest_first);
	for (i = 0, ncand = 0; i < nrec; i++) {
		struct rec *r = &recs[i];
		int fd;

		if (r->running || r->in_use) {
			kept++;
			continue;
		}
		if ((long long)ncand++ < c->keep_last)
			r->candidate = 0;
		if (!r->candidate) {
			kept++;
			continue;
		}
		/* Hold the vm lock while removing: a boot racing with us then
		 * fails with "busy" instead of running on a half-deleted dir. */
		pathf(p, sizeof p, "%s/%s/lock", vmsdir, r->id);
		fd = lock_open(p, LOCK_EX | LOCK_NB);
		if (fd < 0) {
			kept++;
			continue;
		}
		pathf(p, sizeof p, "%s/%s", vmsdir, r->id);
		gcstore_remove_tree(&c->gs, p);
		close(fd);
		json_array_append_new(removed, json_string(r->id));
	}
	*nrecp = nrec;
	*keptp = kept;
	return recs;
}

/* A sweep's -1 (lib/gcstore.h): a path too long is a usage error (100), as
 * pathf made it; out of memory is 111. */
static __attribute__((noreturn)) void sweep_failed(const struct gcstore *g)
{
	if (errno == ENAMETOOLONG)
		die(EX_USAGE, "%s", g->err);
	die(EX_SYS, "unable to allocate memory:");
}

/* The options, then the settings they leave to the config file (policy);
 * a bad one is a usage error (--auto: reported, auto_failed). */
static void parse_opts(struct gc *c, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "keep-last", required_argument, NULL, 'k' },
		{ "older-than", required_argument, NULL, 'o' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "all", no_argument, NULL, 'a' },
		{ "auto", no_argument, NULL, 'A' },
		{ "warm-budget", required_argument, NULL, 'w' },
		{ "df", no_argument, NULL, 'D' },
		{ "cache", no_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char err[4600];
	int ch, r;

	while ((ch = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (ch) {
		case 'k':
			if (gc_set_parse(SET_COUNT, optarg, &c->keep_last) < 0)
				die(EX_USAGE, "--keep-last %s: want %s", EXC(optarg), gc_set_want(SET_COUNT));
			break;
		case 'o':
			if (gc_set_parse(SET_DUR, optarg, &c->older) < 0)
				die(EX_USAGE, "--older-than %s: want %s", EXC(optarg), gc_set_want(SET_DUR));
			break;
		case 'n':
			c->gs.dry_run = 1;
			break;
		case 'a':
			c->all = 1;
			break;
		case 'A':
			c->is_auto = 1;
			break;
		case 'D':
			c->df = c->gs.dry_run = 1;
			break;
		case 'c':
			c->cache = 1;
			break;
		case 'w':
			if (gc_set_parse(SET_SIZE, optarg, &c->budget) < 0)
				die(EX_USAGE, "--warm-budget %s: want %s", EXC(optarg), gc_set_want(SET_SIZE));
			break;
		case 'h':
			puts("usage: " USAGE);
			exit(0);
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (c->all && (c->keep_last >= 0 || c->older >= 0))
		die(EX_USAGE, "--all is --keep-last 0 --older-than 0s; it takes neither");
	if (c->is_auto && (c->all || c->gs.dry_run || c->df))
		die(EX_USAGE, "--auto applies the configured policy; it takes no --all or --dry-run");
	if (c->all)
		c->keep_last = c->older = 0;
	if ((r = gc_policy(c->keep_last, "gc_keep_last", SET_COUNT, KEEP_LAST_DEFAULT, &c->keep_last,
			err, sizeof err)) ||
	    (r = gc_policy(c->older, "gc_grace", SET_DUR, GRACE_DEFAULT_S, &c->older, err,
			sizeof err)) ||
	    (r = gc_policy(c->budget, "warm_budget", SET_SIZE, WARM_BUDGET_DEFAULT, &c->budget, err,
			sizeof err)) ||
	    (c->is_auto && (r = gc_auto_interval(&c->every, err, sizeof err)))) {
		if (c->is_auto)
			auto_failed(r, err);
		die(r, "%s", err);
	}
}

int main(int argc, char **argv)
{
	struct gc c = { .gs = { .trash_fd = -1 }, .keep_last = -1, .older = -1, .budget = -1 };
	char p[PATH_MAX];
	long long kept = 0, owner;
	struct rec *recs = NULL;
	size_t nrec = 0;
	long long warm_total = 0;
	json_t *evicted, *kernels_removed, *overlays_removed, *usage = NULL, *cache_removed = NULL, *cache_busy = NULL;
	json_t *removed, *out, *warm_removed, *cgroups, *jcache, *pooled, *shapes;
	time_t now = time(NULL);
	int r = 0, lk;

	progname = "isopod-gc";
	parse_opts(&c, argc, argv);
	if (c.is_auto && !auto_start(c.every)) {
		json_emit(json_pack("{s:b}", "started", 0));
		return 0;
	}
	if (!(removed = json_array()) || !(c.leaked = json_array()) ||
	    !(warm_removed = json_array()) || !(evicted = json_array()) ||
	    !(kernels_removed = json_array()) || !(cgroups = json_array()) ||
	    !(jcache = json_array()) || !(overlays_removed = json_array()) ||
	    !(pooled = json_array()) || !(shapes = json_array()))
		die(EX_SYS, "unable to allocate memory:");

	owner = store_pin(c.gs.store, sizeof c.gs.store);
	test_pause("gc-pinned");
	if (c.df && !(usage = store_usage(&c.gs)))
		sweep_failed(&c.gs);
	/* Decide and take victims out of the store (renames) under the store
	 * lock; delete them after it is released, so that claims, commits and
	 * stage rm never wait for the deletion of a large file. */
	lk = store_lock();
	if (!c.gs.dry_run && (r = gcstore_trash_open(&c.gs)) == -2)
		die(EX_SYS, "%s:", c.gs.err);
	if (r == -1)
		warn("unable to make a trash directory in %s/trash (removing in place):",
		     store_home());
	recs = sweep_records(&c, now, owner, removed, &nrec, &kept);
	test_pause("gc-records");

	stale_probes(&c);
	run_sweep(&c);
	tpl_leftovers(&c, recs, nrec);
	warm_sweep(&c, warm_removed);
	if (warm_evict(&c.gs, c.budget, recs, nrec, warm_removed, evicted, &warm_total) < 0 ||
	    prune_kernels(&c.gs, recs, nrec, warm_removed, kernels_removed) < 0 ||
	    prune_overlays(&c.gs, overlays_removed) < 0)
		sweep_failed(&c.gs);
	if (c.cache) {
		if (!(cache_removed = json_array()))
			die(EX_SYS, "unable to allocate memory:");
		if (!(cache_busy = json_array()) ||
		    cache_sweep(&c.gs, c.older, cache_removed, cache_busy) < 0)
			sweep_failed(&c.gs);
	}
	tmp_sweep(&c);
	/* after the records: a leaked QEMU reap_stale killed has left its cgroup (or is leaving it) */
	jail_cgroups_sweep(&c.gs, recs, nrec, cgroups);
	jail_cache_sweep(&c.gs, c.cache, jcache);
	if (pool_sweep(c.gs.dry_run, pooled, shapes) < 0) /* entries whose VM is gone, idle shapes */
		warn("unable to sweep %s/pool:", store_home());
	close(lk);
	test_pause("gc-trash");
	gcstore_trash_empty(&c.gs);

	out = json_pack("{s:o, s:I, s:o, s:o, s:o, s:I, s:o, s:I, s:b, s:{s:I, s:I, s:o}}", "removed",
			removed, "kept", (json_int_t)kept, "leaked", c.leaked, "warm_removed",
			warm_removed, "warm_evicted", evicted, "warm_bytes", (json_int_t)warm_total,
			"kernels_removed", kernels_removed,
			"reclaimed_bytes", (json_int_t)c.gs.reclaimed, "dry_run", c.gs.dry_run, "policy",
			"keep_last", (json_int_t)c.keep_last, "older_than_s", (json_int_t)c.older,
			"warm_budget", c.budget >= 0 ? json_integer(c.budget) : json_null());
	if (!out || json_object_set_new(out, "cgroups", cgroups) < 0 ||
	    json_object_set_new(out, "jail_cache_removed", jcache) < 0 ||
	    json_object_set_new(out, "overlays_removed", overlays_removed) < 0 ||
	    json_object_set_new(out, "pool_removed", pooled) < 0 ||
	    json_object_set_new(out, "pool_shapes_removed", shapes) < 0)
		die(EX_SYS, "unable to build the output");
	if (cache_removed) {
		json_object_set_new(out, "cache_removed", cache_removed);
		json_object_set_new(out, "cache_busy", cache_busy);
	}
	if (usage) {
		json_object_set_new(out, "store", json_string(c.gs.store));
		json_object_set_new(usage, "pool", pool_df()); /* the pool's VMs and their PSS */
		json_object_set_new(out, "usage", usage);
		json_object_set_new(out, "auto_error", auto_error());
	}
	if (c.is_auto) {
		/* Our stdout is /dev/null: the report goes beside the stamp. */
		pathf(p, sizeof p, "%s/locks/gc-auto.json", store_home());
		json_object_set_new(out, "auto", json_true());
		if (json_write_atomic(p, out) < 0)
			die(EX_SYS, "unable to write %s:", p);
		return 0;
	}
	json_emit(out);
	return 0;
}
