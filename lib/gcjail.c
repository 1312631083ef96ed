/* gcjail.c - isopod-gc's sweeps of what jails leave behind (lib/gcstore.h):
 * the cgroups of jails whose owner is gone, and the ldd cache's answers
 * that no longer hold (<store>/jail, lib/jaildeps.c). */
#include "egress.h"
#include "gcstore.h"
#include "jail.h"
#include "proc.h"
#include "qjail.h"
#include "util.h"
#include "warm.h"

#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct cgsweep {
	struct gcstore *g;
	const struct rec *recs;
	size_t nrec;
	json_t *out;
};

static int rec_known(const struct cgsweep *s, const char *id)
{
	for (size_t i = 0; i < s->nrec; i++)
		if (!strcmp(s->recs[i].id, id))
			return 1;
	return 0;
}

/* A VM's cgroup (QEMU's or its broker's) whose id has no record: left by a
 * supervisor killed before its jail_release, in this store or another --
 * the name (isopod-vm-<12 hex>, isopod-broker-vm-<12 hex>) does not say
 * which store, nor can anything else: it sits below its maker's own cgroup
 * (a service's, a session's), which is no store's either.  So the rule is
 * one that is safe for any store's VM: an empty cgroup (no member; the
 * kernel refuses to remove a populated one anyway), of our own uid (cg_one),
 * whose ctime is CG_UNKNOWN_GRACE_S old.  A jail's cgroup is empty only
 * between its mkdir and its program's entry (milliseconds, in jail_spawn:
 * the child is in it before the second go, by release()'s write to
 * cgroup.procs or, v1, its own to tasks after the first) and after its program
 * exited (its maker's jail_release then finds it gone: ENOENT is success);
 * its ctime is its inode's, made at its first lookup and again after an
 * eviction, never before its mkdir.  So one that old is past any entry
 * window by orders of magnitude (a maker stopped, a swapping host) and
 * holds no process, no limit in force, nothing of anyone's: removing it
 * takes nothing.  Ten minutes, not less: the gap between a mkdir and the
 * join is the one time an empty cgroup is in use, and a host stalled for
 * minutes (a SIGSTOPped boot, ISOPOD_TEST_PAUSE_AT) must not lose a boot
 * of another store for it; not more: gc --auto runs every 5 minutes and
 * about 15 such cgroups were found on one test host.  The test's override,
 * ISOPOD_TEST_CG_GRACE_S, is read here and nowhere else. */
#define CG_UNKNOWN_GRACE_S 600

/* st's cgroup is older than the grace above (the rule's age; the rest of
 * it, empty and of our uid, is cg_one's and jail_cg_remove's) */
static int cg_old(const struct stat *st)
{
	const char *e = getenv("ISOPOD_TEST_CG_GRACE_S");
	long long grace = CG_UNKNOWN_GRACE_S, v;

	/* at least 1 s: a cgroup made this very second is never old */
	if (e && *e && parse_ll(e, 0, 86400, &v) == 0)
		grace = v < 1 ? 1 : v;
	return (long long)time(NULL) - (long long)st->st_ctime >= grace;
}

static int unknown_stale(const char *vm, const struct stat *st)
{
	char p[PATH_MAX];
	struct stat ds;

	/* a record made since gc read them (a claim meanwhile) is known */
	if (!id_vm_ok(vm) || pathn(p, sizeof p, "%s/vms/%s", store_home(), vm) < 0 ||
	    lstat(p, &ds) == 0 || errno != ENOENT)
		return 0;
	return cg_old(st);
}

/* A warm template's jail is "tpl-", the first 32 hex of its key and the
 * store's 16 (warm_tpl_name); its owner is the builder, which holds the
 * key's lock from before the cgroup is made until it is released.  1 when
 * name is this store's, 0 when it is a template's of another store (its
 * builder's lock is in that store, which this gc cannot see) or of the
 * older unsuffixed shape tpl-<32 hex> (a builder killed before the
 * upgrade: no store known), -1 when it is no template's name. */
static int tpl_ours(const char *name)
{
	char ours[WARM_TPL_NAME_SZ], key[33];
	size_t n = strlen(name);

	if (strncmp(name, "tpl-", 4) || hex_span(name + 4) < 32 ||
	    (n != 36 && (n != 53 || name[36] != '-' || hex_span(name + 37) != 16)))
		return -1;
	snprintf(key, sizeof key, "%.32s", name + 4);
	warm_tpl_name(key, ours);
	return !strcmp(name, ours);
}

/* Every existing warm/<key>.lock of our template name's prefix taken
 * (gcstore_lock_prefix) into fds: how many, or -1 when one is held (a
 * builder lives, the cgroup may be its, not yet joined). */
static int tpl_locks(const char *name, int *fds, int max)
{
	const char *root = warm_root(0);
	char key[33];

	if (!root)
		return -1;
	snprintf(key, sizeof key, "%.32s", name + 4);
	return gcstore_lock_prefix(root, key, fds, max);
}

/* dir is still the cgroup judged from st (the walk's): the same inode,
 * its ctime no newer.  Another store's maker may have removed that name
 * and made its own since (lib/jail.c cg_make): a new one is not the one
 * judged empty and old, nor owned by the same pid.  Checked last, just
 * before the rmdir; a cgroup that is not the same is left as one gone. */
static int cg_same(const char *dir, const struct stat *st)
{
	struct stat now;

	return lstat(dir, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino &&
	       now.st_ctime <= st->st_ctime;
}

/* One jail cgroup (jail_cg_each): it goes when it has no member and its
 * owner is gone.  A qemu-img jail's owner is its caller (the pid in its
 * name; as for a doctor's check and isopod-jail's own jail-<pid>: a
 * caller-chosen name cannot name another's pid, bin/isopod-jail.c),
 * gone when no process has that pid or the one that has it started
 * after the cgroup was made (a pid reused; 2 s of slack: btime jitters).
 * The cgroup's ctime is its inode's, made at its first lookup (kernfs:
 * the caller's limit files, at once), again after an eviction: never
 * before the cgroup was, so a live caller is never taken for a reuser;
 * a VM's QEMU's or broker's owner is the VM, gone when its lock is free
 * (held while the cgroup goes: a boot of it would make its own); a warm
 * template's of this store's owner is its builder, gone when no lock of
 * its key is held (tpl_locks, held while it goes); a VM's of no record
 * here (another store's, or one whose record went) when it is empty and
 * old (unknown_stale), and so another store's template's or an unsuffixed
 * one's (cg_old: a template's cgroup, as a VM's, is empty only between
 * its mkdir and its QEMU's entry, and after it exited).  Any other (a probe's, isopod-jail's of a name its
 * caller chose: no owner to prove gone) is left alone; but an
 * isopod-jail name of a VM's or a template's shape (vm-<hex>,
 * broker-vm-<hex>, tpl-<32 hex>[-<16 hex>]) is judged as theirs: fail-closed, as
 * rmdir refuses a cgroup with members and a jail whose cgroup went
 * before its program joined it fails to start, never runs unlimited. */
static int cg_one(const char *dir, const char *name, const struct stat *st, void *arg)
{
	struct cgsweep *s = arg;
	long long pid = qjail_img_owner(name);
	const char *vm = egress_jail_vm(name);
	char p[PATH_MAX];
	json_t *o;
	time_t t;
	int lk = -1, r, tl[4], ntl = -1;

	/* another user's, or root's seen by a user: not ours to judge */
	if (st->st_uid != geteuid())
		return 0;
	if (pid > 0) {
		if (proc_alive(pid) && ((t = proc_started(pid)) < 0 || t <= st->st_ctime + 2))
			return 0;
		o = json_pack("{s:s, s:I}", "path", dir, "pid", (json_int_t)pid);
	} else if (!strncmp(name, "tpl-", 4)) {
		if ((r = tpl_ours(name)) < 0 || (r == 0 && !cg_old(st)) ||
		    (r == 1 && (ntl = tpl_locks(name, tl, 4)) < 0))
			return 0;
		o = json_pack("{s:s, s:s}", "path", dir, "template", name);
	} else {
		vm = vm ? vm : name;
		if (!rec_known(s, vm)) {
			if (!unknown_stale(vm, st))
				return 0;
		} else {
			if (pathn(p, sizeof p, "%s/vms/%s/lock", store_home(), vm) < 0)
				return 0;
			/* ENOENT: the record went (this gc removed it): nobody boots it */
			if ((lk = lock_open(p, LOCK_EX | LOCK_NB)) < 0 && errno != ENOENT)
				return 0;
		}
		o = json_pack("{s:s, s:s}", "path", dir, "vm", vm);
	}
	r = cg_same(dir, st) ? jail_cg_remove(dir, s->g->dry_run) : (errno = ENOENT, -1);
	if (lk >= 0)
		close(lk);
	while (ntl > 0)
		close(tl[--ntl]);
	if (r < 0 && (errno == EBUSY || errno == ENOENT)) { /* in use, or gone meanwhile */
		json_decref(o);
		return 0;
	}
	if (r < 0)
		warn("unable to remove the jail's cgroup %s:", dir);
	json_object_set_new(o, "removed", json_boolean(r == 0 && !s->g->dry_run));
	json_array_append_new(s->out, o);
	return 0;
}

int jail_cgroups_sweep(struct gcstore *g, const struct rec *recs, size_t nrec, json_t *out)
{
	struct cgsweep s = { .g = g, .recs = recs, .nrec = nrec, .out = out };

	return jail_cg_each(cg_one, &s);
}

int jail_cache_sweep(struct gcstore *g, int all, json_t *out)
{
	char dir[PATH_MAX], p[PATH_MAX], why[PATH_MAX + 256];
	struct dirent *de;
	DIR *d;
	int fd;

	if (pathn(dir, sizeof dir, "%s/jail", store_home()) < 0)
		return 0;
	/* as lib/jaildeps.c uses it: our own directory, not a link, written by
	 * no one else (root's gc on a user's store removes nothing elsewhere) */
	if ((fd = dir_own_open(dir, why, sizeof why)) < 0)
		return 0;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return 0;
	}
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		long long b;
		int valid;

		/* deps-<16 hex>.json; atomic_write's staging files are the
		 * tmp sweep's */
		if (strncmp(de->d_name, "deps-", 5) || n < 10 || strcmp(de->d_name + n - 5, ".json") ||
		    pathn(p, sizeof p, "%s/%s", dir, de->d_name) < 0)
			continue;
		valid = jail_deps_valid(p, JAIL_LDCACHE);
		if (valid && !all)
			continue;
		if ((b = gcstore_discard(g, p)) < 0) {
			if (errno != ENOENT)
				warn("unable to remove %s:", p);
			continue;
		}
		json_array_append_new(out, json_pack("{s:s, s:I, s:b}", "name", de->d_name, "bytes",
						     (json_int_t)b, "stale", !valid));
	}
	closedir(d);
	return 0;
}
