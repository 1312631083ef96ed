/* jail.c - the jail of jail.h: namespaces, a pivot_root into a minimal
 * root, read-only by mount_setattr(AT_RECURSIVE), an unprivileged identity
 * with no capabilities, cgroup limits.
 *
 * The shape follows bubblewrap: the parent clones the child into its new
 * namespaces, writes its uid/gid maps when it is not root and lets it build
 * its root (a first go over a socket), places it in its cgroups meanwhile,
 * then lets it go on (a second go; the child waits for it before it drops
 * its identity, before its init's fork and the exec, so nothing of the
 * program runs outside them).  Under cgroup v1 the child joins them
 * itself right after the first go, through `tasks` files the parent opened
 * (release() says why).  The child builds its root on a
 * tmpfs at /tmp (bubblewrap's base), pivots into that so the host stays
 * reachable as /oldroot while it binds what the spec names into /newroot,
 * pivots again into /newroot and detaches the rest, then gives up its
 * identity and its capabilities and execs.  Any failure before the exec is
 * written to an error pipe (close-on-exec: EOF means it got that far) and
 * jail_spawn returns it.  The child's side is lib/jailchild.c. */
#include "jail.h"
#include "cgroup.h"
#include "config.h"
#include "jailchild.h"
#include "ranges.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <fts.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

/* mount_setattr(2) with AT_RECURSIVE is Linux 5.12. */
static int kernel_ok(char *err, size_t sz)
{
	struct utsname u;
	unsigned maj = 0, min = 0;

	if (uname(&u) < 0)
		return reason_fail(err, sz, "uname:");
	if (mutant() & MUT_OLD_KERNEL)
		snprintf(u.release, sizeof u.release, "5.11.22-mutant");
	if (sscanf(u.release, "%u.%u", &maj, &min) != 2 || maj < 5 || (maj == 5 && min < 12)) {
		errno = ENOSYS;
		return reason_fail(err, sz, "the jail needs Linux 5.12 or later (mount_setattr with "
			    "AT_RECURSIVE); this host runs %s; ISOPOD_JAIL=0 runs without the jail",
			    u.release);
	}
	return 0;
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 64 || s[0] == '.')
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

struct identity {
	long long *v, lo;
	const char *key;
	char *err;
	size_t errsz;
};

/* Clear of system and login users, and of the overflow uid 65534 and
 * (uid_t)-1 (checked with the count in jail_identity). */
static int identity(const char *v, const char *where, void *arg)
{
	struct identity *id = arg;

	if (parse_ll(v, id->lo, 4294967293ll, id->v) < 0) {
		errno = EINVAL;
		return reason_fail(id->err, id->errsz, "%s: %s: want a number in %lld..4294967293", where,
			    id->key, id->lo);
	}
	return 0;
}

int jail_uid_range(uid_t *first, uid_t *count, char *err, size_t errsz)
{
	const char *path = ranges_config_path();
	long long base = JAIL_UID_BASE, n = JAIL_UID_COUNT;
	struct identity ids[] = {
		{ .v = &base, .lo = 65536, .key = "jail_uid_base", .err = err, .errsz = errsz },
		{ .v = &n, .lo = 1, .key = "jail_uid_count", .err = err, .errsz = errsz },
	};
	char msg[256];

	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
		int rc = config_each(path, ids[i].key, identity, &ids[i], msg, sizeof msg);

		if (rc == -1)
			return -1;
		if (rc == -2)
			return reason_fail(err, errsz, "unable to read %s:", path);
	}
	if (base + n > 4294967294ll) {
		errno = EINVAL;
		return reason_fail(err, errsz, "%s: jail_uid_base %lld + jail_uid_count %lld: past uid "
			    "4294967293", path, base, n);
	}
	*first = (uid_t)base;
	*count = (uid_t)n;
	return 0;
}

int jail_identity(const char *name, uid_t *uid, gid_t *gid, char *err, size_t errsz)
{
	uint32_t h = 2166136261u;
	uid_t base, count;

	if (jail_uid_range(&base, &count, err, errsz) < 0)
		return -1;
	for (; *name; name++)
		h = (h ^ (unsigned char)*name) * 16777619u;
	*uid = (uid_t)(base + h % count);
	*gid = (gid_t)*uid;
	return 0;
}

struct wanted {
	int on;
	char *why;
	size_t wsz;
};

static int wanted_value(const char *v, const char *where, void *arg)
{
	struct wanted *w = arg;
	int on = config_bool(v);

	if (on < 0) {
		errno = EINVAL;
		return reason_fail(w->why, w->wsz, "%s: jail: yes or no, not %s", where, EXC(v));
	}
	w->on = on;
	if (strcmp(where, "ISOPOD_JAIL"))
		snprintf(w->why, w->wsz, "%s: jail = %s", where, v);
	return 0;
}

/* The one switch for QEMU's jail and the broker's: the environment first
 * (a run's own choice, e.g. a host without the kernel it needs), then the
 * host's file (the last `jail` line wins).  On by default.  why says which
 * ("ISOPOD_JAIL=0", "FILE:LINE: jail = no", "default"). */
int jail_wanted(char *why, size_t wsz)
{
	const char *e = getenv("ISOPOD_JAIL"), *path = ranges_config_path();
	struct wanted w = { .on = 1, .why = why, .wsz = wsz };
	char msg[256];
	int rc;

	snprintf(why, wsz, "default");
	if (e && *e) {
		if (wanted_value(e, "ISOPOD_JAIL", &w) < 0)
			return -1;
		snprintf(why, wsz, "ISOPOD_JAIL=%s", e);
		return w.on;
	}
	rc = config_each(path, "jail", wanted_value, &w, msg, sizeof msg);
	if (rc == -1)
		return -1;
	if (rc == -2)
		return reason_fail(why, wsz, "%s", msg);
	return w.on;
}

int jail_landlock_abi(void)
{
	/* LANDLOCK_CREATE_RULESET_VERSION: the ABI, no ruleset made */
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, 1u << 0);

	return v > 0 ? (int)v : 0;
}

/* Absolute, no "", "." or ".." component (so below() can compare strings). */
static int clean(const char *p)
{
	if (p[0] != '/')
		return 0;
	if (!strcmp(p, "/"))
		return 1;
	while (*p == '/') {
		size_t n = strcspn(++p, "/");

		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
	}
	return 1;
}

/* path is dir or below it (whole components; no trailing '/' in dir). */
static int below(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (n == 1 && dir[0] == '/')
		return 1;
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

int jail_covers(const struct jail_spec *js, const char *path)
{
	size_t i;

	if (js->vm_dir && below(path, js->vm_dir))
		return 1;
	for (i = 0; i < js->nrw; i++)
		if (below(path, js->rw[i]))
			return 1;
	return 0;
}

/* ---- cgroups ------------------------------------------------------------ */

static int put(const char *dir, const char *file, long long v)
{
	char p[PATH_MAX + 64], s[32];
	int fd, r;

	if (pathn(p, sizeof p, "%s/%s", dir, file) < 0)
		return -1;
	if ((fd = open(p, O_WRONLY | O_CLOEXEC)) < 0)
		return -1;
	snprintf(s, sizeof s, "%lld", v);
	r = write_all(fd, s, strlen(s));
	if (close(fd) < 0)
		r = -1;
	return r;
}

/* A cgroup of our own below ours (the directory ours, lib/cgroup.c
 * cg_dir's) in one hierarchy: mkdir, then the limit files.  0, or -1 with
 * a reason (the directory removed again). */
static int cg_make(struct jail *j, const char *ours, const char *name, const char *const *files,
		   const long long *vals, int nfile, char *why, size_t wsz)
{
	char *dir = j->cg[j->ncg];
	int i;

	if (pathn(dir, PATH_MAX, "%s/" JAIL_CG_PREFIX "%s", ours, name) < 0)
		return reason_fail(why, wsz, "cgroup path too long");
	/* One left by a caller that was killed (its jail's init died with it)
	 * is empty and goes; one still holding processes is not ours to share
	 * (its limits and its members would be).  ENOENT: another removed
	 * it meanwhile (isopod-gc, another store's maker): ours to make. */
	if (mkdir(dir, 0755) < 0 &&
	    (errno != EEXIST || (rmdir(dir) < 0 && errno != ENOENT) || mkdir(dir, 0755) < 0))
		return reason_fail(why, wsz, errno == EBUSY || errno == EEXIST
				   ? "mkdir %s (a cgroup of that name still in use?):" : "mkdir %s:", dir);
	for (i = 0; i < nfile; i++)
		if (vals[i] > 0 && put(dir, files[i], vals[i]) < 0) {
			reason_fail(why, wsz, "%s/%s:", dir, files[i]);
			rmdir(dir);
			return -1;
		}
	j->ncg++;
	return 0;
}

/* jail_cg_each's walk below root ("": this system; a test's fake tree).
 * Each hierarchy's mount is the one cg_dir places the jail's cgroups
 * below (the widest that shows our cgroup: a bind of another subtree
 * mounted first holds none of ours), else, where we cannot place
 * ourselves, the first of its type (another's jails may be there). */
static int cg_each_at(const char *root,
		      int (*fn)(const char *dir, const char *name, const struct stat *st, void *arg),
		      void *arg)
{
	static const char *const fs[] = { "cgroup2", "cgroup", "cgroup" }, *const ctl[] = { NULL, "memory", "pids" };
	char mnt[3][PATH_MAX] = { "" }, why[PATH_MAX + 128];
	size_t pl = strlen(JAIL_CG_PREFIX), ml;
	int i, k, r = 0;

	for (i = 0; i < 3 && r == 0; i++) {
		char *roots[] = { mnt[i], NULL };
		FTSENT *e;
		FTS *f;

		if (cg_dir(root, ctl[i], mnt[i], sizeof mnt[i], &ml, why, sizeof why) == 0)
			mnt[i][ml] = '\0';
		else if (cg_mount(root, fs[i], ctl[i], mnt[i], sizeof mnt[i]) < 0)
			continue;
		for (k = 0; k < i && strcmp(mnt[k], mnt[i]); k++)
			; /* co-mounted controllers: one walk */
		if (k < i || !(f = fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, NULL)))
			continue;
		/* A creator's cgroup may be anywhere (a service's, a session's,
		 * a job's): the whole tree, which holds only directories and
		 * their control files.  A jail cgroup is a leaf, but a name of
		 * ours is not always a jail's: isopod-runner.service holds the
		 * jails of its runs below it, so it is walked into too. */
		while (r == 0 && (e = fts_read(f))) {
			if (e->fts_info != FTS_D || e->fts_level == 0 ||
			    strncmp(e->fts_name, JAIL_CG_PREFIX, pl))
				continue;
			r = fn(e->fts_path, e->fts_name + pl, e->fts_statp, arg);
		}
		fts_close(f);
	}
	return r;
}

int jail_cg_each(int (*fn)(const char *dir, const char *name, const struct stat *st, void *arg),
		 void *arg)
{
	return cg_each_at("", fn, arg);
}

int jail_cg_remove(const char *dir, int dry)
{
	char p[PATH_MAX + 16], b[16];
	int fd;
	ssize_t n;

	if (pathn(p, sizeof p, "%s/cgroup.procs", dir) < 0)
		return -1;
	/* a reader's check: rmdir would refuse a member anyway (EBUSY) */
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = read(fd, b, sizeof b);
	close(fd);
	if (n != 0) {
		errno = n > 0 ? EBUSY : errno;
		return -1;
	}
	return dry ? 0 : rmdir(dir);
}

/* Make the cgroups (before the clone) below ours, as cg_dir finds them
 * below root ("": this system; a test's fake tree); what was applied into
 * cg, what could not be into warnings.  Our cgroup's path is checked
 * there (cg_dir: under a cgroup namespace over a bound host tree
 * /proc/self/cgroup says "/../..", which would put the jail's cgroup
 * outside the hierarchy, or on another's), and found below the mount that
 * shows it. */
static void cg_setup(const char *root, const struct jail_spec *js, struct jail *j, json_t *cg,
		     json_t *warnings)
{
	char ours[PATH_MAX], base[PATH_MAX + 32], why[PATH_MAX + 128], v2why[PATH_MAX + 160] = "";
	int want_mem = js->mem_bytes > 0, want_pids = js->pids > 0;
	size_t mlen;

	if (!want_mem && !want_pids)
		return;
	/* v2 when the controllers are available to a child of ours (enabled in
	 * our subtree_control, or enabled there by us now).  Why not, in v2:
	 * said with v1's own failure, so that a host with neither names both. */
	if (cg_dir(root, NULL, ours, sizeof ours, &mlen, why, sizeof why) < 0) {
		if (errno != ENOENT)
			snprintf(v2why, sizeof v2why, "; v2: %s", why);
	} else if (pathn(base, sizeof base, "%s/cgroup.subtree_control", ours) == 0) {
		int ok = (!want_mem || cg_has_word(base, "memory")) && (!want_pids || cg_has_word(base, "pids"));
		char sub[64], type[PATH_MAX + 16];

		snprintf(sub, sizeof sub, "%s%s", want_mem ? "+memory " : "", want_pids ? "+pids" : "");
		/* the host's root cgroup (the one without cgroup.type; a cgroup
		 * namespace's root has one): what its subtree_control enables,
		 * every cgroup of the host gets (a root-level service's limits,
		 * its accounting): not a jail's to change.  Skipped, as an
		 * unwritable hierarchy is (no per-VM limit, a warning).  A
		 * trade-off: on a v2 host without systemd, run as root from
		 * the root cgroup, no per-VM limit at all (doc/DECISIONS.md;
		 * the site runs isopod from a child cgroup).  Our own
		 * directory first: one removed under us, or hidden by a mount
		 * over it, has no cgroup.type either and is not the root. */
		if (!ok && access(ours, F_OK) < 0) {
			reason_fail(v2why, sizeof v2why, "; v2: our cgroup %.1024s is not there (removed, "
				    "or hidden by a mount over it):", ours);
		} else if (!ok && pathn(type, sizeof type, "%s/cgroup.type", ours) == 0 &&
			   access(type, F_OK) < 0 && errno == ENOENT) {
			snprintf(v2why, sizeof v2why, "; v2: our cgroup %.1024s is the host's root cgroup: "
				 "\"%s\" in its cgroup.subtree_control would be a host-wide change, not made",
				 ours, sub);
		} else if (!ok) {
			int fd = open(base, O_WRONLY | O_CLOEXEC);

			ok = fd >= 0 && write_all(fd, sub, strlen(sub)) == 0;
			if (fd >= 0 && close(fd) < 0)
				ok = 0;
			if (!ok)
				reason_fail(v2why, sizeof v2why, "; v2: writing \"%s\" to %s:", sub, base);
		}
		if (ok) {
			static const char *const f2[] = { "memory.max", "pids.max" };
			long long v2[] = { js->mem_bytes, js->pids };

			if (cg_make(j, ours, js->name, f2, v2, 2, why, sizeof why) == 0) {
				/* no swap beyond the limit: best effort (no swap, no file) */
				if (want_mem)
					put(j->cg[0], "memory.swap.max", 0);
				json_object_set_new(cg, "version", json_integer(2));
				if (want_mem)
					json_object_set_new(cg, "memory_bytes", json_integer(js->mem_bytes));
				if (want_pids)
					json_object_set_new(cg, "pids", json_integer(js->pids));
				return;
			}
			snprintf(v2why, sizeof v2why, "; v2: %.500s", why);
		}
	}
	/* v1: the memory and pids controllers, each in its own hierarchy. */
	json_object_set_new(cg, "version", json_integer(1));
	if (want_mem) {
		static const char *const f[] = { "memory.limit_in_bytes" };

		if (cg_dir(root, "memory", ours, sizeof ours, &mlen, why, sizeof why) < 0) {
			json_array_append_new(warnings, errno == ENOENT
					      ? json_sprintf("jail: no memory limit: no cgroup memory controller%s", v2why)
					      : json_sprintf("jail: no memory limit: %s%s", why, v2why));
		} else if (cg_make(j, ours, js->name, f, &js->mem_bytes, 1, why, sizeof why) < 0) {
			json_array_append_new(warnings, json_sprintf("jail: no memory limit: %s", why));
		} else {
			/* memory+swap capped at the same value: best effort (needs
			 * swap accounting). */
			put(j->cg[j->ncg - 1], "memory.memsw.limit_in_bytes", js->mem_bytes);
			json_object_set_new(cg, "memory_bytes", json_integer(js->mem_bytes));
		}
	}
	if (want_pids) {
		static const char *const f[] = { "pids.max" };

		if (cg_dir(root, "pids", ours, sizeof ours, &mlen, why, sizeof why) < 0) {
			json_array_append_new(warnings, errno == ENOENT
					      ? json_sprintf("jail: no pids limit: no cgroup pids controller%s", v2why)
					      : json_sprintf("jail: no pids limit: %s%s", why, v2why));
		} else if (cg_make(j, ours, js->name, f, &js->pids, 1, why, sizeof why) < 0) {
			json_array_append_new(warnings, json_sprintf("jail: no pids limit: %s", why));
		} else
			json_object_set_new(cg, "pids", json_integer(js->pids));
	}
}

json_t *jail_cg_check(const char *name, long long mem_bytes, long long pids)
{
	struct jail_spec js = { .name = name, .mem_bytes = mem_bytes, .pids = pids };
	struct jail j = { .pid = -1 };
	json_t *cg = json_object(), *warnings = json_array(), *paths = json_array(), *limits = json_array();
	const char *h;
	char why[PATH_MAX + 128];
	int i;

	if (!cg || !warnings || !paths || !limits || !name_ok(name)) {
		json_decref(cg);
		json_decref(warnings);
		json_decref(paths);
		json_decref(limits);
		return NULL;
	}
	cg_setup("", &js, &j, cg, warnings);
	for (i = 0; i < j.ncg; i++)
		json_array_append_new(paths, json_string(j.cg[i]));
	if (json_object_get(cg, "memory_bytes"))
		json_array_append_new(limits, json_string("memory"));
	if (json_object_get(cg, "pids"))
		json_array_append_new(limits, json_string("pids"));
	h = !j.ncg ? "none" : json_integer_value(json_object_get(cg, "version")) == 2 ? "v2" : "v1";
	/* the test cgroup goes again: a child we cannot remove is as bad as
	 * one we cannot make (every run would leave its own behind) */
	if (jail_release(&j, why, sizeof why) < 0)
		json_array_append_new(warnings, json_sprintf("jail: %s", why));
	json_decref(cg);
	return json_pack("{s:s, s:o, s:o, s:b, s:o}", "hierarchy", h, "limits", limits, "paths",
			 paths, "ok", json_array_size(warnings) == 0, "warnings", warnings);
}

/* ---- the parent --------------------------------------------------------- */

/* The `tasks` descriptors jail_spawn opened for its child (fd[0..*n)),
 * closed. */
static void cg_fds_close(int *fd, int *n)
{
	for (int i = 0; i < *n; i++)
		if (fd[i] >= 0) {
			close(fd[i]);
			fd[i] = -1;
		}
	*n = 0;
}

static int write_file(pid_t pid, const char *file, const char *text)
{
	char p[64];
	int fd, r;

	snprintf(p, sizeof p, "/proc/%d/%s", (int)pid, file);
	if ((fd = open(p, O_WRONLY | O_CLOEXEC)) < 0)
		return -1;
	r = write_all(fd, text, strlen(text));
	if (close(fd) < 0)
		r = -1;
	return r;
}

static json_t *strings(const char *const *v, size_t n)
{
	json_t *a = json_array();
	size_t i;

	for (i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

static json_t *applied(const struct jail_spec *js, int userns, json_t *cg, json_t *warnings)
{
	int ll = js->landlock ? jail_landlock_abi() : 0;

	json_t *o, *rw = strings(js->rw, js->nrw), *dev = json_array();

	if (js->vm_dir)
		json_array_append_new(rw, json_string(js->vm_dir));
	json_array_append_new(dev, json_string("/dev/null"));
	json_array_append_new(dev, json_string("/dev/urandom"));
	if (js->kvm)
		json_array_append_new(dev, json_string("/dev/kvm"));
	o = json_pack("{s:I, s:I, s:b, s:[sssss], s:b, s:[], s:s, s:o, s:o, s:o, s:o, s:o}",
		      "uid", (json_int_t)(userns ? getuid() : js->uid),
		      "gid", (json_int_t)(userns ? getgid() : js->gid), "user_namespace", userns,
		      "namespaces", "mount", "ipc", "uts", "cgroup", "net", "no_new_privs", 1,
		      "capabilities", "root", "tmpfs, pivot_root", "read_only",
		      strings(js->ro, js->nro), "read_write", rw, "devices", dev, "cgroup", cg,
		      "warnings", warnings);
	if (o && !(mutant() & MUT_NO_PIDNS))
		json_array_insert_new(json_object_get(o, "namespaces"), 1, json_string("pid"));
	if (o && userns)
		json_array_insert_new(json_object_get(o, "namespaces"), 0, json_string("user"));
	if (o && js->hostnet) /* "net" is the last */
		json_array_remove(json_object_get(o, "namespaces"),
				  json_array_size(json_object_get(o, "namespaces")) - 1);
	if (o && ll)
		json_object_set_new(o, "landlock_abi", json_integer(ll));
	else if (o && js->landlock)
		json_array_append_new(warnings, json_string("jail: no Landlock: the kernel offers "
							    "none (CONFIG_SECURITY_LANDLOCK, lsm=)"));
#ifdef JAIL_MUTANT
	if (o && mutant())
		json_object_set_new(o, "mutant", json_string(getenv("ISOPOD_JAIL_MUTANT")));
#endif
	return o;
}

/* The spec's refusals, before anything is made. */
static int spec_ok(const struct jail_spec *js, char *err, size_t errsz)
{
	size_t i;

	if (!js->name || !name_ok(js->name)) {
		errno = EINVAL;
		return reason_fail(err, errsz, "jail name %s: want 1-64 of [A-Za-z0-9._-]",
			    js->name ? EXC(js->name) : "(none)");
	}
	if (js->nro > JAIL_PATHS_MAX || js->nrw > JAIL_PATHS_MAX) {
		errno = E2BIG;
		return reason_fail(err, errsz, "more than %d paths", JAIL_PATHS_MAX);
	}
	if (js->vm_dir && !clean(js->vm_dir)) {
		errno = EINVAL;
		return reason_fail(err, errsz, "%s: not an absolute path without . or .. or empty components",
			    EXC(js->vm_dir));
	}
	for (i = 0; i < js->nro + js->nrw; i++) {
		const char *p = i < js->nro ? js->ro[i] : js->rw[i - js->nro];

		if (!clean(p)) {
			errno = EINVAL;
			return reason_fail(err, errsz, "%s: not an absolute path without . or .. or empty "
				    "components", EXC(p));
		}
		/* Below a read-write path, a path is the jail's own to change
		 * (a symlink planted there by a previous run would send the
		 * bind anywhere on the host): it is never bound again. */
		if (jail_covers(js, p) && (i < js->nro || strcmp(p, js->rw[i - js->nro]))) {
			errno = EINVAL;
			return reason_fail(err, errsz, "%s: below a read-write path of the jail", EXC(p));
		}
	}
	return 0;
}

/* ---- the spec's paths, resolved ------------------------------------------ */

/* Resolve path on the host as the kernel would (each symlink followed,
 * "."/".." of a link's target applied), into out.  Every step of the way is
 * checked against the resolved read-write paths in rw[0..nrw) but self: a
 * symlink planted in the VM's directory (the jail's own to change) that the
 * resolution passes through would let it name any host file, so passing
 * through one is refused, not only ending below one. */
static int resolve(const char *path, char *out, size_t sz, realpath_t *rw, size_t nrw, size_t self,
		   struct walk_memo *m, char *err, size_t errsz)
{
	char todo[PATH_MAX], done[PATH_MAX] = "", link[PATH_MAX], rest[PATH_MAX], cand[PATH_MAX];
	int hops = 0;
	size_t k;

	if (pathn(todo, sizeof todo, "%s", path) < 0) {
		errno = ENAMETOOLONG;
		return reason_fail(err, errsz, "jail: %s: path too long", path);
	}
	for (;;) {
		char *p = todo, *c, failed = 0;
		struct walk_seen *seen;
		int dir;

		while (*p == '/')
			p++;
		if (!*p)
			return pathn(out, sz, "%s", *done ? done : "/");
		c = p;
		p += strcspn(p, "/");
		snprintf(rest, sizeof rest, "%s", p);
		*p = '\0';
		if (!strcmp(c, ".") || !strcmp(c, "..")) {
			char *sl = strrchr(done, '/');

			if (c[1] == '.' && sl)
				*sl = '\0';
			memmove(todo, rest, strlen(rest) + 1);
			continue;
		}
		if (pathn(cand, sizeof cand, "%s/%s", done, c) < 0) {
			errno = ENAMETOOLONG;
			return reason_fail(err, errsz, "jail: %s: path too long", path);
		}
		for (k = 0; k < nrw; k++)
			if (k != self && below(cand, rw[k])) {
				errno = EINVAL;
				return reason_fail(err, errsz, "%s: passes through %s, below the jail's read-write "
					    "path %s", EXC(path), EXC(cand), EXC(rw[k]));
			}
		/* (after the checks above: they are made for every step, what
		 * the walk's memory saves is lstat and readlink) */
		if (walk_step(m, cand, cand, &dir, link, sizeof link, &seen, &failed) < 0)
			return failed == 'r' ? reason_fail(err, errsz, "jail: readlink %s:", cand)
					     : reason_fail(err, errsz, "jail: %s: %s:", path, cand);
		if (link[0]) {
			if (++hops > 40) {
				errno = ELOOP;
				return reason_fail(err, errsz, "jail: %s:", path);
			}
			if (link[0] == '/')
				done[0] = '\0';
			if (pathn(todo, sizeof todo, "%s%s", link, rest) < 0) {
				errno = ENAMETOOLONG;
				return reason_fail(err, errsz, "jail: %s: path too long", path);
			}
			continue;
		}
		snprintf(done, sizeof done, "%s", cand);
		memmove(todo, rest, strlen(rest) + 1);
		if (todo[strspn(todo, "/")] != '\0' && !dir) {
			errno = ENOTDIR;
			return reason_fail(err, errsz, "jail: %s: %s:", path, cand);
		}
	}
}

/* Host trees the jail must never see, whatever it is asked: the host's
 * root, its kernel interfaces, its runtime state and devices (the jail's
 * own /proc and device nodes are made by the jail). */
static const char *const forbidden[] = { "/proc", "/sys", "/run", "/dev" };

/* Resolve every path of the spec into real[], refusing what resolves
 * through a read-write path, what lands on a forbidden tree (or an
 * ancestor of one: "/"), and what is an ancestor of the VM's directory (the
 * other VMs' directories around it). */
static int resolve_all(const struct jail_spec *js, realpath_t *real, char *err, size_t errsz)
{
	size_t n = js->nro + js->nrw + (js->vm_dir ? 1 : 0), nw = n - js->nro, i, k;
	realpath_t *rw = real + js->nro;
	struct walk_memo *m;
	int r = -1;

	if (mutant() & MUT_NO_RESOLVE) { /* the strings as given: the old check */
		for (i = 0; i < n; i++)
			snprintf(real[i], PATH_MAX, "%s", i < js->nro ? js->ro[i] : i < js->nro + js->nrw
						       ? js->rw[i - js->nro] : js->vm_dir);
		return 0;
	}

	/* one memory for all the walks below (walk_step): the checks of
	 * each step do not depend on it */
	if (!(m = malloc(sizeof *m)))
		return reason_fail(err, errsz, "malloc:");
	m->n = 0;
	/* The read-write paths first, each by itself, then again each checked
	 * against the others. */
	for (i = 0; i < nw; i++) {
		const char *p = i < js->nrw ? js->rw[i] : js->vm_dir;

		if (resolve(p, rw[i], PATH_MAX, rw, 0, 0, m, err, errsz) < 0)
			goto out;
	}
	for (i = 0; i < n; i++) {
		const char *p = i < js->nro ? js->ro[i] : i < js->nro + js->nrw ? js->rw[i - js->nro]
										 : js->vm_dir;

		if (resolve(p, real[i], PATH_MAX, rw, nw, i < js->nro ? nw : i - js->nro, m, err,
			    errsz) < 0)
			goto out;
		for (k = 0; k < sizeof forbidden / sizeof forbidden[0]; k++)
			if (below(real[i], forbidden[k]) || below(forbidden[k], real[i])) {
				errno = EINVAL;
				reason_fail(err, errsz, "%s: resolves to %s: the host's %s is never "
					    "bound into the jail", EXC(p), EXC(real[i]),
					    strcmp(real[i], "/") ? forbidden[k] : "/");
				goto out;
			}
		if (js->vm_dir && i != n - 1 && below(rw[nw - 1], real[i])) {
			errno = EINVAL;
			reason_fail(err, errsz, "%s: resolves to %s, an ancestor of the VM's directory "
				    "%s", EXC(p), EXC(real[i]), EXC(rw[nw - 1]));
			goto out;
		}
	}
	r = 0;
out:
	free(m);
	return r;
}

/* A directory descriptor handed in would be a way out of the new root
 * (openat from it reaches the host's tree): refused. */
static int plan_ok(const struct proc_spec *ps, char *err, size_t errsz)
{
	int i, fd;
	struct stat st;

	for (i = 0; i < 3 + ps->nkeep && i < 3 + PROC_KEEP_MAX; i++) {
		fd = i == 0 ? ps->in : i == 1 ? ps->out : i == 2 ? ps->err : ps->keep[i - 3];
		if (fd == PROC_INHERIT)
			fd = i;
		if (fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
			errno = EINVAL;
			return reason_fail(err, errsz, "descriptor %d (the jail's fd %d) is a directory: a way "
				    "out of the jail", fd, i);
		}
	}
	return 0;
}

/* The child's verdict on errfd, up to EOF (its exec, or its death): its
 * reason's length (0: none), or -1. */
static ssize_t verdict(int errfd, char *why, size_t wsz)
{
	ssize_t n = 0, r;

	while (n < (ssize_t)wsz - 1 && (r = read(errfd, why + n, wsz - 1 - (size_t)n)) != 0) {
		if (r < 0 && errno != EINTR)
			return -1;
		n += r > 0 ? r : 0;
	}
	why[n] = '\0';
	return n;
}

/* The parent's side once the child exists: the user namespace's maps, the
 * first go, the cgroups, the second go; the child's verdict comes back on
 * errfd.  0: it is past every step (EOF: it closed the pipe at its exec), or
 * -1 with the reason in why (the child killed when it may be building its
 * root).  syncfd stays open throughout: the child's check that we are
 * alive.
 *
 * The order is what keeps the program inside its cgroups: the child builds
 * its root between the two goes (mounts, pivot_root: bounded work of ours,
 * charged to our cgroups), and waits for the second before its cgroup
 * namespace, its identity's drop, its init's fork and the exec.  The maps
 * come before the first: the child's tmpfs needs its uid mapped.
 *
 * With joins (cgroup v1) the child moved itself into each cgroup right
 * after the first go, checked, through the `tasks` files jail_spawn opened
 * (the cgroups ours, chosen here; the kernel checks the write against the
 * opener's credentials): a single thread moving itself is the one
 * migration the kernel makes without the write side of its global
 * cgroup_threadgroup_rwsem, whose RCU grace period made our write to
 * cgroup.procs take 8-16 ms on this host (doc/SPEED.md).  v2 has no such
 * path for a domain cgroup (cgroup.threads moves within a threaded
 * subtree only): there we write cgroup.procs, as before. */
static int release(pid_t pid, int userns, const struct jail *j, int joins, int syncfd, int errfd,
		   char *why, size_t wsz)
{
	char map[64], child[1024];
	const char go[] = { JAIL_GO_MAPS, JAIL_GO_CGROUPS };
	ssize_t n;
	int i, e;

	if (mutant() & MUT_SLOW_PARENT) /* the tests' window: a child not waiting acts first */
		usleep(300 * 1000);
	if (userns) { /* ourselves, and nobody else, inside */
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)getuid(), (unsigned)getuid());
		if (write_file(pid, "setgroups", "deny") < 0 || write_file(pid, "uid_map", map) < 0)
			return reason_fail(why, wsz, "writing the user namespace's uid map:");
		snprintf(map, sizeof map, "%u %u 1\n", (unsigned)getgid(), (unsigned)getgid());
		if (write_file(pid, "gid_map", map) < 0)
			return reason_fail(why, wsz, "writing the user namespace's gid map:");
	}
	if (send(syncfd, &go[0], 1, MSG_NOSIGNAL) != 1)
		return reason_fail(why, wsz, "releasing the jailed child:");
	if (mutant() & MUT_SLOW_PARENT)
		usleep(300 * 1000);
	/* joins: the child joins these itself (v1, jail_spawn); either way it
	 * is in them before it takes the second go */
	for (i = 0; i < j->ncg && !joins; i++)
		if (put(j->cg[i], "cgroup.procs", pid) < 0)
			break;
	if (!joins && i < j->ncg)
		reason_fail(why, wsz, "%s/cgroup.procs:", j->cg[i]);
	else if (!(mutant() & MUT_NO_CG_WAIT) && send(syncfd, &go[1], 1, MSG_NOSIGNAL) != 1)
		reason_fail(why, wsz, "releasing the jailed child:");
	else if ((n = verdict(errfd, why, wsz)) < 0)
		return reason_fail(why, wsz, "reading the jailed child's verdict:");
	else {
		errno = EPERM;
		return n ? -1 : 0;
	}
	/* Our failure, while the child may have failed on its own building its
	 * root (a dead child's pid is no cgroup's, its socket takes no go): its
	 * reason, when it gave one, is the one that tells.  Killed first, so its
	 * end of the pipe is closed and the read ends. */
	e = errno;
	kill(pid, SIGKILL);
	if (verdict(errfd, child, sizeof child) > 0) {
		snprintf(why, wsz, "%s", child);
		e = EPERM;
	}
	errno = e;
	return -1;
}

pid_t jail_spawn(const struct jail_spec *js, const struct proc_spec *ps, struct jail *j,
		 char *err, size_t errsz)
{
	int userns = geteuid() != 0, sync[2], ep[2], st, e, r;
	unsigned long flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET;
	json_t *cg = json_object(), *warnings = json_array();
	char why[1024] = "", **envp = NULL;
	realpath_t *real = NULL;
	int cgfd[sizeof j->cg / sizeof j->cg[0]], ncgfd = 0, joins; /* one per cgroup of ours */
	pid_t pid;

	*j = (struct jail){ .pid = -1 };
	if (kernel_ok(err, errsz) < 0 || spec_ok(js, err, errsz) < 0 || plan_ok(ps, err, errsz) < 0)
		goto out;
	if ((ps->env || ps->unset) && !(envp = proc_env(ps))) {
		reason_fail(err, errsz, "the jailed program's environment:");
		goto out;
	}
	if (!(real = calloc(js->nro + js->nrw + 1, sizeof *real))) {
		reason_fail(err, errsz, "calloc:");
		goto out;
	}
	if (resolve_all(js, real, err, errsz) < 0)
		goto out;
	if (userns)
		flags |= CLONE_NEWUSER;
	if (js->hostnet)
		flags &= ~(unsigned long)CLONE_NEWNET;
	if (mutant() & MUT_NO_PIDNS)
		flags &= ~(unsigned long)CLONE_NEWPID;
	cg_setup("", js, j, cg, warnings);
	/* cgroup v1: the child joins each of them itself (release); its
	 * `tasks` files are opened here, close-on-exec (the child closes them
	 * once written: the program never holds one).  The mutant's
	 * parent-attach leaves them closed: the parent writes cgroup.procs, as
	 * on v2, so that v2's order is tested on a v1 host too. */
	if (j->ncg && json_integer_value(json_object_get(cg, "version")) == 1 &&
	    !(mutant() & MUT_PARENT_ATTACH))
		for (ncgfd = 0; ncgfd < j->ncg; ncgfd++) {
			char t[PATH_MAX + 16];

			if (pathn(t, sizeof t, "%s/tasks", j->cg[ncgfd]) < 0 ||
			    (cgfd[ncgfd] = open(t, O_WRONLY | O_CLOEXEC)) < 0) {
				reason_fail(err, errsz, "%s/tasks:", j->cg[ncgfd]);
				goto out_cg;
			}
		}
	/* The go travels on a socket: a child already dead gets EPIPE from
	 * send(MSG_NOSIGNAL), never our caller a SIGPIPE. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) < 0) {
		reason_fail(err, errsz, "socketpair:");
		goto out_cg;
	}
	if (pipe2(ep, O_CLOEXEC) < 0) {
		reason_fail(err, errsz, "pipe:");
		close(sync[0]);
		close(sync[1]);
		goto out_cg;
	}
	fflush(NULL);
	/* A raw clone without a stack is a fork into new namespaces
	 * (bubblewrap's raw_clone). */
	pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, NULL);
	if (pid == 0) {
		close(sync[1]);
		close(ep[0]);
		jail_child(js, ps, envp, real, userns, sync[0], ep[1], cgfd, ncgfd);
	}
	e = errno;
	close(sync[0]);
	close(ep[1]);
	joins = ncgfd > 0;
	cg_fds_close(cgfd, &ncgfd);
	if (pid < 0) {
		close(sync[1]);
		close(ep[0]);
		errno = e;
		reason_fail(err, errsz, "clone into new namespaces:");
		goto out_cg;
	}
	r = release(pid, userns, j, joins, sync[1], ep[0], why, sizeof why);
	e = errno;
	close(sync[1]);
	close(ep[0]);
	if (r == 0) {
		j->pid = pid;
		j->applied = applied(js, userns, cg, warnings);
		free(real);
		free(envp);
		return pid;
	}
	kill(pid, SIGKILL);
	proc_wait(pid, &st);
	snprintf(err, errsz, "jail: %s", why);
	errno = e;
out_cg:
	e = errno;
	cg_fds_close(cgfd, &ncgfd);
	jail_release(j, why, sizeof why);
	errno = e;
out:
	e = errno;
	free(real);
	free(envp);
	errno = e;
	json_decref(cg);
	json_decref(warnings);
	return -1;
}

int jail_release(struct jail *j, char *err, size_t errsz)
{
	int i, r = 0;

	json_decref(j->applied);
	j->applied = NULL;
	for (i = 0; i < j->ncg; i++) {
		int64_t until = mono_ms() + 2000;
		int rc;

		/* The jail's last processes may still be exiting (the kernel kills
		 * a pid namespace's members after its init): EBUSY a moment. */
		while ((rc = rmdir(j->cg[i])) < 0 && errno == EBUSY && mono_ms() < until)
			usleep(10 * 1000);
		if (rc < 0 && errno != ENOENT)
			r = reason_fail(err, errsz, "rmdir %s:", j->cg[i]);
	}
	j->ncg = 0;
	return r;
}
