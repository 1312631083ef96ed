/* cgroup.c - the caller's own cgroups and their limits (cgroup.h).
 *
 * A Slurm job step, a container, a systemd service: whatever put us in a
 * cgroup with limits put QEMU there too (jail_spawn's cgroups are made
 * below ours, and a hierarchy the jail makes none in is inherited), so a
 * VM bigger than the limit is killed by the OOM killer or starved, late.
 * isopod-boot reads the limits first and fits the VM into them. */
#include "cgroup.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* v1's "no limit" is 2^63 - 1 rounded down to a page; any page size. */
#define CG_V1_UNLIMITED (1LL << 62)

/* /proc/self/cgroup and /proc/self/mountinfo as cg_limits_read read them
 * once: its four controllers each placed ourselves in v2 and then in v1,
 * up to eight reads of each file (the kernel formats mountinfo's every
 * mount on each), on every boot's check and every boot.  A NULL text (or
 * no snapshot): the file is read where it is parsed, as cg_dir does. */
struct cg_snap {
	char *cgroup, *mountinfo;
	size_t ncgroup, nmountinfo;
};

#define SNAP_MAX (4u << 20)

/* The whole file root/proc/self/leaf into *buf (malloc'd, *n bytes);
 * NULL when it cannot be read (the parse then opens it itself). */
static void snap_read(const char *root, const char *leaf, char **buf, size_t *n)
{
	char p[PATH_MAX];
	size_t cap = 0;
	ssize_t r = -1;
	int fd;

	*buf = NULL;
	*n = 0;
	if (pathn(p, sizeof p, "%s/proc/self/%s", root, leaf) < 0 ||
	    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	for (;;) {
		if (*n == cap) {
			char *nb;

			/* A host's mountinfo is KiBs; a bigger one (a fake root's,
			 * a container host's) is parsed from the file, a line at a
			 * time, as before: no snapshot of unbounded size. */
			if (cap >= SNAP_MAX) {
				r = -1;
				break;
			}
			if (!(nb = realloc(*buf, cap = cap ? 2 * cap : 16384))) {
				r = -1;
				break;
			}
			*buf = nb;
		}
		if ((r = read(fd, *buf + *n, cap - *n)) <= 0)
			break;
		*n += (size_t)r;
	}
	close(fd);
	/* a failed read, or nothing (fmemopen wants a size): the parse opens
	 * the file itself, and says what it finds there */
	if (r < 0 || !*n) {
		free(*buf);
		*buf = NULL;
		*n = 0;
	}
}

/* The file root/proc/self/leaf to parse: the snapshot's text when there
 * is one, else the file itself. */
static FILE *snap_open(const char *root, const char *leaf, const char *text, size_t n)
{
	char p[PATH_MAX];

	if (text)
		return fmemopen((void *)text, n, "r");
	if (pathn(p, sizeof p, "%s/proc/self/%s", root, leaf) < 0)
		return NULL;
	return fopen(p, "re");
}

/* Does a mount whose root (mountinfo's 4th field) is mr show the cgroup
 * self: mr is "/" or self's ancestor (whole components) or self? */
static int covers(const char *mr, const char *self)
{
	size_t n = strlen(mr);

	return !strcmp(mr, "/") || (!strncmp(self, mr, n) && (self[n] == '/' || !self[n]));
}

/* The next space-separated field of *s, moved past: into out (NULL: only
 * skipped, any length).  0; -1 when there is none; -2 when it is longer
 * than sz - 1 (not cut: the rest of a cut field would be read as the next
 * one, another mount point or root than the line's). */
static int field(const char **s, char *out, size_t sz)
{
	size_t n;

	*s += strspn(*s, " ");
	if (!(n = strcspn(*s, " \n")))
		return -1;
	if (out && n >= sz)
		return -2;
	if (out) {
		memcpy(out, *s, n);
		out[n] = '\0';
	}
	*s += n;
	return 0;
}

/* The mount point (below root) of fstype's hierarchy (ctl among a v1
 * mount's options), and the mount's own root inside the hierarchy
 * (mountinfo's 4th field: "/" but in a container's bind of its cgroup).
 * With self (our cgroup there, as /proc/self/cgroup names it) only a mount
 * that shows it: one whose root is self or above it (a bind of another
 * subtree, mounted first, would put self somewhere it is not), the widest
 * of them (the walk up sees the most ancestors).  A line of fstype with a
 * field longer than our buffers (1023 bytes) is skipped, never read cut.
 * 0; -1, no mount of it; -2, none shows self; -3, none found but such a
 * line was skipped (it may have been ours: not known). */
static int mount_of(const char *root, const struct cg_snap *sn, const char *fstype, const char *ctl,
		    const char *self, char *out, size_t sz, char *mroot, size_t msz)
{
	char *line = NULL;
	size_t lsz = 0, best = 0;
	int found = -1, skipped = 0;
	FILE *fp = snap_open(root, "mountinfo", sn ? sn->mountinfo : NULL, sn ? sn->nmountinfo : 0);

	if (!fp)
		return -1;
	while ((found != 0 || self) && getline(&line, &lsz, fp) > 0) {
		char mnt[1024], mr[1024], fs[64], opts[1024], *tok, *save;
		const char *dash = strstr(line, " - "), *f = dash ? dash + 3 : NULL;
		int hit = !ctl, fo;

		if (!f || field(&f, fs, sizeof fs) < 0 || strcmp(fs, fstype) || field(&f, NULL, 0) < 0)
			continue;
		/* a v1 controller's name is among the options: needed only then */
		if ((fo = field(&f, opts, sizeof opts)) == -2 && ctl) {
			skipped = 1;
			continue;
		}
		for (tok = ctl && fo == 0 ? strtok_r(opts, ",", &save) : NULL; tok && !hit;
		     tok = strtok_r(NULL, ",", &save))
			hit = !strcmp(tok, ctl);
		if (!hit)
			continue;
		f = line;
		fo = 0;
		if (field(&f, NULL, 0) < 0 || field(&f, NULL, 0) < 0 || field(&f, NULL, 0) < 0 ||
		    (fo = field(&f, mr, sizeof mr)) < 0 || (fo = field(&f, mnt, sizeof mnt)) < 0) {
			skipped |= fo == -2;
			continue;
		}
		if (strchr(mnt, '\\') || strchr(mr, '\\'))
			continue;
		if (self && !covers(mr, self)) {
			found = found == 0 ? 0 : -2;
			continue;
		}
		if (found == 0 && strlen(mr) >= best)
			continue;
		if (pathn(out, sz, "%s%s", root, mnt) == 0 && (!mroot || pathn(mroot, msz, "%s", mr) == 0)) {
			found = 0;
			best = strlen(mr);
		}
	}
	free(line);
	fclose(fp);
	return found != 0 && skipped ? -3 : found;
}

int cg_mount(const char *root, const char *fstype, const char *ctl, char *out, size_t sz)
{
	return mount_of(root, NULL, fstype, ctl, NULL, out, sz, NULL, 0);
}

int cg_has_word(const char *path, const char *w)
{
	char buf[1024], *tok, *save;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strcmp(tok, w))
			return 1;
	return 0;
}

/* A control file's text, NUL-terminated, one line at most (its newline
 * dropped).  Its length; -1 with ENOENT when absent, EINVAL when longer
 * than sz - 1 or more than one line. */
static ssize_t read_line(const char *path, char *buf, size_t sz, char *why, size_t wsz)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, m;

	if (fd < 0)
		return errno == ENOENT ? -1 : reason_fail(why, wsz, "%s:", path);
	n = read(fd, buf, sz - 1);
	m = n == (ssize_t)sz - 1 ? read(fd, (char[1]){ 0 }, 1) : 0;
	close(fd);
	if (n < 0 || m < 0)
		return reason_fail(why, wsz, "%s:", path);
	buf[n] = '\0';
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (m > 0 || strlen(buf) != (size_t)n || strchr(buf, '\n')) {
		errno = EINVAL;
		return reason_fail(why, wsz, "%s: not one line of at most %zu bytes", path, sz - 2);
	}
	return n;
}

static int garbage(const char *path, const char *text, const char *want, char *why, size_t wsz)
{
	errno = EINVAL;
	return reason_fail(why, wsz, "%s: %s is not %s", path, EXC(text), want);
}

/* A number the kernel writes: digits only, or "max" (*v = -1) when
 * max_ok.  0, or -1 (EINVAL, named). */
static int number(const char *path, const char *s, int max_ok, long long *v, char *why, size_t wsz)
{
	if (max_ok && !strcmp(s, "max")) {
		*v = -1;
		return 0;
	}
	if (!*s || strspn(s, "0123456789") != strlen(s) || parse_ll(s, 0, LLONG_MAX, v) < 0)
		return garbage(path, s, max_ok ? "a number or \"max\"" : "a number", why, wsz);
	return 0;
}

/* The number of CPUs in a list ("0-3,8,10-11"); -1 (EINVAL) otherwise. */
static long long cpu_count(const char *path, const char *s, char *why, size_t wsz)
{
	long long n = 0, lo, hi;
	char *e;

	while (*s) {
		if (*s < '0' || *s > '9')
			return garbage(path, s, "a CPU list", why, wsz);
		lo = hi = strtoll(s, &e, 10);
		if (*e == '-') {
			if (e[1] < '0' || e[1] > '9')
				return garbage(path, s, "a CPU list", why, wsz);
			hi = strtoll(e + 1, &e, 10);
		}
		if (lo > hi || hi >= 1 << 20 || (*e && *e != ','))
			return garbage(path, s, "a CPU list", why, wsz);
		n += hi - lo + 1;
		s = *e ? e + 1 : e;
		if (*e && !*s)
			return garbage(path, s, "a CPU list", why, wsz);
	}
	return n;
}

/* A path /proc/self/cgroup gave: absolute, no "." or ".." component. */
static int path_ok(const char *p)
{
	const char *c;

	if (p[0] != '/')
		return 0;
	for (c = p; c; c = strchr(c + 1, '/'))
		if (!strncmp(c, "/./", 3) || !strcmp(c, "/.") || !strncmp(c, "/../", 4) ||
		    !strcmp(c, "/..") || !strncmp(c, "//", 2))
			return 0;
	return 1;
}

/* Our own cgroup in the hierarchy of ctl (NULL: v2's "0::" line), as
 * /proc/self/cgroup says it (relative to that hierarchy's root, or our
 * cgroup namespace's).  0, or -1. */
static int cg_self(const char *root, const struct cg_snap *sn, const char *ctl, char *out, size_t sz)
{
	char *line = NULL;
	size_t lsz = 0;
	int found = -1;
	FILE *fp = snap_open(root, "cgroup", sn ? sn->cgroup : NULL, sn ? sn->ncgroup : 0);

	if (!fp)
		return -1;
	/* whole lines (getline): a fixed buffer read a long path's tail as a
	 * line of its own, and a cgroup's name may hold "N:memory:/..." */
	while (found < 0 && getline(&line, &lsz, fp) > 0) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL, *tok, *save;

		if (!b)
			continue;
		*b = '\0';
		b[1 + strcspn(b + 1, "\n")] = '\0';
		if (!ctl) {
			/* "0::PATH" (this was "0:" compared with "0" until
			 * issue 16: the jail's v2 cgroups were never made) */
			if (a == line + 1 && line[0] == '0' && b == a + 1)
				found = pathn(out, sz, "%s", b + 1);
			continue;
		}
		for (tok = strtok_r(a + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			if (!strcmp(tok, ctl))
				found = pathn(out, sz, "%s", b + 1);
	}
	free(line);
	fclose(fp);
	return found;
}

/* cg_dir, its two files from the snapshot sn when there is one. */
static int cg_snap_dir(const char *root, const struct cg_snap *sn, const char *ctl, char *dir, size_t sz,
		  size_t *mlen, char *why, size_t wsz)
{
	char mnt[PATH_MAX], mr[PATH_MAX], self[PATH_MAX];
	const char *rel;
	int r;

	if (cg_self(root, sn, ctl, self, sizeof self) < 0) {
		errno = ENOENT;
		return reason_fail(why, wsz, "we are in no %s hierarchy", ctl ? ctl : "cgroup v2");
	}
	/* "/../.." (a cgroup namespace over the host's bound tree), "//deleted":
	 * a layout we cannot place ourselves in */
	if (!path_ok(self)) {
		errno = EINVAL;
		return reason_fail(why, wsz, "our %s cgroup %s is not a clean absolute path",
				   ctl ? ctl : "v2", EXC(self));
	}
	if ((r = mount_of(root, sn, ctl ? "cgroup" : "cgroup2", ctl, self, mnt, sizeof mnt, mr, sizeof mr)) < 0) {
		errno = r == -1 ? ENOENT : r == -2 ? ENOTDIR : E2BIG;
		return reason_fail(why, wsz, r == -1 ? "no %s hierarchy is mounted" : r == -2 ? "our %s cgroup "
				   "%s is below no mount of its hierarchy (each a bind of another subtree)" :
				   "our %s cgroup %s: a line of its hierarchy in /proc/self/mountinfo has a field "
				   "longer than 1023 bytes (skipped: its mount not known)",
				   ctl ? ctl : "cgroup v2", EXC(self));
	}
	if (!path_ok(mr)) {
		errno = EINVAL;
		return reason_fail(why, wsz, "our %s cgroup %s: its mount's root %s is not a clean "
				   "absolute path", ctl ? ctl : "v2", EXC(self), EXC(mr));
	}
	/* A container's view without a cgroup namespace: the mount is its own
	 * cgroup (or an ancestor), which /proc/self/cgroup names from the
	 * hierarchy's root. */
	rel = strcmp(mr, "/") ? self + strlen(mr) : self;
	*mlen = strlen(mnt);
	if (pathn(dir, sz, "%s%s", mnt, strcmp(rel, "/") ? rel : "") < 0) {
		errno = ENAMETOOLONG;
		return reason_fail(why, wsz, "cgroup path too long");
	}
	return 0;
}

int cg_dir(const char *root, const char *ctl, char *dir, size_t sz, size_t *mlen, char *why,
	   size_t wsz)
{
	return cg_snap_dir(root, NULL, ctl, dir, sz, mlen, why, wsz);
}

/* Our cgroup's directory for controller ctl: v2's when the controller is
 * bound there (listed in the v2 mount's cgroup.controllers), else v1's.
 * 2 or 1 (the version) with dir and *mlen (the mount point's length: the
 * walk's end), 0 when we are in no hierarchy of ctl or cannot place
 * ourselves in it (a warning: no limit known, never a run refused, as it
 * booted before limits were read). */
static int ctl_dir(const char *root, const struct cg_snap *sn, const char *ctl, char *dir, size_t *mlen,
		   struct cg_limits *l)
{
	char p[PATH_MAX + 32], w2[PATH_MAX + 128], w1[PATH_MAX + 128];
	int v = 0, e2 = ENOENT, e1 = ENOENT;
	struct stat st;

	if (cg_snap_dir(root, sn, NULL, dir, PATH_MAX, mlen, w2, sizeof w2) < 0)
		e2 = errno;
	else if (pathn(p, sizeof p, "%.*s/cgroup.controllers", (int)*mlen, dir) == 0 &&
		 cg_has_word(p, ctl))
		v = 2;
	if (!v && cg_snap_dir(root, sn, ctl, dir, PATH_MAX, mlen, w1, sizeof w1) == 0)
		v = 1;
	else if (!v)
		e1 = errno;
	if (!v) {
		/* v1's reason when it has ctl, else v2's (where ctl may be) */
		const char *w = e1 != ENOENT ? w1 : e2 != ENOENT ? w2 : NULL;

		if (w && !l->warning[0])
			snprintf(l->warning, sizeof l->warning, "cgroup limits: %.1200s: its %s limits are "
				 "not known", w, ctl);
		return 0;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		if (!l->warning[0])
			snprintf(l->warning, sizeof l->warning, "cgroup limits: our %s cgroup %.1024s is "
				 "not there: its limits are not known", ctl, dir);
		return 0;
	}
	return v;
}

/* What one cgroup directory's control file (file, the one of version
 * ver) limits: *v (-1 none), *q and *p for cpu. */
typedef int (*cg_reader)(const char *dir, const char *file, int ver, long long *v, long long *q,
			 long long *p, char *why, size_t wsz);

/* A file of one number: memory.max, pids.max (v1's too),
 * memory.limit_in_bytes.  "max" is what the kernel writes in a *.max
 * file for none (and nowhere else); v1's memory has no "max", its none is
 * 2^62 or more. */
static int rd_num(const char *dir, const char *file, int ver, long long *v, long long *q,
		  long long *p, char *why, size_t wsz)
{
	char f[PATH_MAX + 32], b[64];
	size_t n = strlen(file);

	(void)q, (void)p;
	*v = -1;
	if (pathn(f, sizeof f, "%s/%s", dir, file) < 0)
		return reason_fail(why, wsz, "cgroup path too long");
	if (read_line(f, b, sizeof b, why, wsz) < 0)
		return errno == ENOENT ? 0 : -1;
	if (number(f, b, n > 4 && !strcmp(file + n - 4, ".max"), v, why, wsz) < 0)
		return -1;
	if (ver == 1 && *v >= CG_V1_UNLIMITED)
		*v = -1;
	return 0;
}

/* cpu.max "QUOTA PERIOD" ("max PERIOD"), or v1's cfs_quota_us (-1: none)
 * and cfs_period_us.  *v the whole CPUs (at least 1). */
static int rd_cpu(const char *dir, const char *file, int ver, long long *v, long long *q,
		  long long *p, char *why, size_t wsz)
{
	char f[PATH_MAX + 32], b[64], *sp;

	*v = *q = *p = -1;
	if (pathn(f, sizeof f, "%s/%s", dir, file) < 0)
		return reason_fail(why, wsz, "cgroup path too long");
	if (read_line(f, b, sizeof b, why, wsz) < 0)
		return errno == ENOENT ? 0 : -1;
	if (ver == 2) {
		if (!(sp = strchr(b, ' ')))
			return garbage(f, b, "\"QUOTA PERIOD\"", why, wsz);
		*sp = '\0';
		if (number(f, b, 1, q, why, wsz) < 0 || number(f, sp + 1, 0, p, why, wsz) < 0)
			return -1;
	} else {
		if (!strcmp(b, "-1"))
			return 0;
		if (number(f, b, 0, q, why, wsz) < 0)
			return -1;
		if (pathn(f, sizeof f, "%s/cpu.cfs_period_us", dir) < 0)
			return reason_fail(why, wsz, "cgroup path too long");
		if (read_line(f, b, sizeof b, why, wsz) < 0)
			return errno == ENOENT ? 0 : -1;
		if (number(f, b, 0, p, why, wsz) < 0)
			return -1;
	}
	if (*q < 0)
		return *q = *p = -1, 0;
	if (*p == 0 || *q == 0)
		return garbage(f, b, "a quota and a period above 0", why, wsz);
	*v = *q / *p > 0 ? *q / *p : 1;
	return 0;
}

/* The smallest limit (by value, for cpu by quota/period) from dir up to
 * the mount point (its first mlen bytes) into out. */
static int walk(char *dir, size_t mlen, int ver, const char *file, cg_reader rd,
		struct cg_limit *out, long long *bq, long long *bp, char *why, size_t wsz)
{
	long long v, q, p;
	char *slash;

	for (;;) {
		if (rd(dir, file, ver, &v, &q, &p, why, wsz) < 0)
			return -1;
		if (v >= 0 && (out->v < 0 ||
			       (bq ? (double)q / (double)p < (double)*bq / (double)*bp : v < out->v))) {
			out->v = v;
			snprintf(out->dir, sizeof out->dir, "%s", dir);
			if (bq)
				*bq = q, *bp = p;
		}
		if (strlen(dir) <= mlen || !(slash = strrchr(dir, '/')) || (size_t)(slash - dir) < mlen)
			return 0;
		*slash = '\0';
	}
}

/* Our CPUs: the cpuset's effective list, at our level or, where there is
 * none, the nearest ancestor's (dir cut as walk does, mlen its end).  Not
 * a minimum along the path, as the other limits are: the effective list
 * already is one.  v2's cpuset.cpus.effective is "the onlined CPUs that
 * are actually granted to this cgroup by its parent" (cgroup-v2.rst):
 * cpuset.cpus and the parent's effective list, so every ancestor's.  It
 * "exists on all cpuset-enabled cgroups": a cgroup whose parent did not
 * enable cpuset in its subtree_control (a Slurm step below a job that
 * did, a service) has no such file and its tasks run on the nearest
 * enabled ancestor's CPUs, which is the file read then.  v1's
 * cpuset.effective_cpus is the same list; without it (an old kernel)
 * cpuset.cpus, which v1 keeps a subset of the parent's. */
static int rd_cpuset(char *dir, size_t mlen, int ver, struct cg_limit *out, char *why, size_t wsz)
{
	static const char *const f2[] = { "cpuset.cpus.effective", NULL },
				 *const f1[] = { "cpuset.effective_cpus", "cpuset.cpus", NULL };
	char p[PATH_MAX + 32], b[4096], *slash;
	long long n;

	for (;;) {
		for (const char *const *f = ver == 2 ? f2 : f1; *f; f++) {
			if (pathn(p, sizeof p, "%s/%s", dir, *f) < 0)
				return reason_fail(why, wsz, "cgroup path too long");
			if (read_line(p, b, sizeof b, why, wsz) < 0) {
				/* a list longer than b (thousands of CPUs,
				 * sparse): not known, as the vCPUs it could
				 * cap are few */
				if (errno != ENOENT)
					return 0;
				continue;
			}
			if (!*b) /* a v1 cpuset not set up: holds no process, not ours */
				return 0;
			if ((n = cpu_count(p, b, why, wsz)) < 0)
				return -1;
			out->v = n;
			snprintf(out->dir, sizeof out->dir, "%s", dir);
			return 0;
		}
		if (strlen(dir) <= mlen || !(slash = strrchr(dir, '/')) || (size_t)(slash - dir) < mlen)
			return 0;
		*slash = '\0';
	}
}

static int limits_read(const char *root, const struct cg_snap *sn, struct cg_limits *l, char *why,
		       size_t wsz)
{
	char dir[PATH_MAX];
	size_t mlen;
	int v;

	*l = (struct cg_limits){ .mem.v = -1, .cpu.v = -1, .cpuset.v = -1, .pids.v = -1,
				 .quota_us = -1, .period_us = -1 };
	if ((v = ctl_dir(root, sn, "memory", dir, &mlen, l)) &&
	    (walk(dir, mlen, v, v == 2 ? "memory.max" : "memory.limit_in_bytes", rd_num,
		       &l->mem, NULL, NULL, why, wsz) < 0))
		return -1;
	l->version = v;
	if ((v = ctl_dir(root, sn, "cpu", dir, &mlen, l)) &&
	    (walk(dir, mlen, v, v == 2 ? "cpu.max" : "cpu.cfs_quota_us", rd_cpu, &l->cpu,
		       &l->quota_us, &l->period_us, why, wsz) < 0))
		return -1;
	if (!l->version)
		l->version = v;
	if ((v = ctl_dir(root, sn, "cpuset", dir, &mlen, l)) &&
	    (rd_cpuset(dir, mlen, v, &l->cpuset, why, wsz) < 0))
		return -1;
	if ((v = ctl_dir(root, sn, "pids", dir, &mlen, l)) &&
	    (walk(dir, mlen, v, "pids.max", rd_num, &l->pids, NULL, NULL, why, wsz) < 0))
		return -1;
	return 0;
}

int cg_limits_read(const char *root, struct cg_limits *l, char *why, size_t wsz)
{
	struct cg_snap sn = { 0 };
	int r;

	snap_read(root, "cgroup", &sn.cgroup, &sn.ncgroup);
	snap_read(root, "mountinfo", &sn.mountinfo, &sn.nmountinfo);
	r = limits_read(root, &sn, l, why, wsz);
	free(sn.cgroup);
	free(sn.mountinfo);
	return r;
}

long long cg_cpus(const struct cg_limits *l)
{
	if (l->cpu.v < 0 || (l->cpuset.v >= 0 && l->cpuset.v < l->cpu.v))
		return l->cpuset.v;
	return l->cpu.v;
}

int cg_fit_vm(const struct cg_limits *l, struct cg_fit *f, char *why, size_t wsz)
{
	long long cpus = cg_cpus(l), room, over = f->overhead_mib, most = cpus;
	const struct cg_limit *cl = l->cpu.v == cpus ? &l->cpu : &l->cpuset;
	int quota = l->cpu.v >= 0 && l->quota_us > 0 && l->period_us > 0;

	f->mem_reduced = f->vcpus_reduced = f->mem_tight = f->vcpus_throttled = 0;
	f->tb_mib = 0;
	/* A fractional CFS quota (1.5 CPUs) runs as many vCPUs as its ceiling
	 * (2), each throttled to share it: a given --vcpus up to that runs,
	 * flagged (its warning is the caller's); a default stays at the whole
	 * CPUs (at least 1).  A cpuset's CPUs are whole: at most that many. */
	if (quota) {
		most = (l->quota_us + l->period_us - 1) / l->period_us;
		if (l->cpuset.v >= 0 && l->cpuset.v < most)
			most = l->cpuset.v, cl = &l->cpuset;
		else
			cl = &l->cpu;
	}
	if (cpus >= 0 && f->vcpus > (f->vcpus_given ? most : cpus)) {
		if (f->vcpus_given) {
			errno = EINVAL;
			if (quota && cl == &l->cpu)
				return reason_fail(why, wsz, "--vcpus %lld does not fit the cgroup's CPU limit: "
						   "%lld.%02lld CPUs (CFS quota of %s): at most --vcpus %lld",
						   f->vcpus, l->quota_us / l->period_us,
						   l->quota_us % l->period_us * 100 / l->period_us, cl->dir, most);
			return reason_fail(why, wsz, "--vcpus %lld does not fit the cgroup's CPU limit: "
					   "%lld CPUs (%s of %s)", f->vcpus, most,
					   cl == &l->cpu ? "CFS quota" : "cpuset", cl->dir);
		}
		f->vcpus = cpus > 0 ? cpus : 1;
		f->vcpus_reduced = 1;
	}
	if (quota && f->vcpus * l->period_us > l->quota_us)
		f->vcpus_throttled = 1;
	if (l->mem.v < 0)
		return 0;
	room = (l->mem.v >> 20) - f->overhead_mib;
	if (f->mem_mib <= room)
		return 0;
	/* a given size that fits with QEMU's fixed cost but not with TCG's
	 * translation buffer (base_mib < overhead_mib), which grows only as
	 * the guest runs new code: kept, with a warning (f->mem_tight), so
	 * a scheduler's request of guest RAM + the fixed cost (isopod-slurm
	 * run's --mem) is honoured on a TCG node too; a default is lowered
	 * to fit the whole budget */
	if (f->mem_given && f->base_mib > 0 && f->base_mib < f->overhead_mib) {
		over = f->base_mib;
		room = (l->mem.v >> 20) - over;
		/* the buffer capped to what is left (QEMU's tb-size;
		 * below 16 MiB it re-translates 4-9x slower: doc/SPEED.md) */
		if (f->mem_mib <= room) {
			f->tb_mib = room - f->mem_mib > 16 ? room - f->mem_mib : 16;
			return f->mem_tight = 1, 0;
		}
	}
	if (room < f->min_mem_mib) {
		char hint[96] = "";

		/* a default under TCG: what a given size could still do */
		if (!f->mem_given && f->base_mib > 0 && f->base_mib < over &&
		    (l->mem.v >> 20) - f->base_mib >= f->min_mem_mib)
			snprintf(hint, sizeof hint, "; a given --mem-mib up to %lld runs, with a warning",
				 (l->mem.v >> 20) - f->base_mib);
		errno = ENOSPC;
		return reason_fail(why, wsz, "not even the smallest VM fits the cgroup's memory limit: "
				   "%lld MiB of guest RAM + %lld MiB for QEMU > %lld MiB (%lld bytes, "
				   "%s)%s", f->min_mem_mib, over, l->mem.v >> 20, l->mem.v, l->mem.dir, hint);
	}
	if (f->mem_given) {
		errno = EINVAL;
		return reason_fail(why, wsz, "--mem-mib %lld does not fit the cgroup's memory limit: "
				   "%lld MiB + %lld MiB for QEMU > %lld MiB (%lld bytes, %s); at most "
				   "--mem-mib %lld", f->mem_mib, f->mem_mib, over,
				   l->mem.v >> 20, l->mem.v, l->mem.dir, room);
	}
	f->mem_mib = room;
	f->mem_reduced = 1;
	return 0;
}

static json_t *lim(const struct cg_limit *c)
{
	return c->v < 0 ? json_null() : json_integer(c->v);
}

static json_t *limdir(const struct cg_limit *c)
{
	return c->v < 0 ? json_null() : json_string(c->dir);
}

json_t *cg_limits_json(const struct cg_limits *l, const struct cg_fit *f)
{
	json_t *j = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:b, s:b, s:b, s:o}",
			      "cgroup", l->version ? json_integer(l->version) : json_null(),
			      "memory_bytes", lim(&l->mem), "memory_cgroup", limdir(&l->mem),
			      "cpus", lim(&l->cpu), "cpu_cgroup", limdir(&l->cpu),
			      "cpuset_cpus", lim(&l->cpuset), "cpuset_cgroup", limdir(&l->cpuset),
			      "pids", lim(&l->pids), "pids_cgroup", limdir(&l->pids),
			      "vcpus", (json_int_t)f->vcpus, "mem_mib", (json_int_t)f->mem_mib,
			      "qemu_overhead_mib", (json_int_t)f->overhead_mib,
			      "vcpus_reduced", f->vcpus_reduced, "vcpus_throttled", f->vcpus_throttled,
			      "mem_reduced", f->mem_reduced,
			      "tcg_tb_mib", f->mem_tight ? json_integer(f->tb_mib) : json_null());

	return j;
}

int range_check(const char *opt, const char *arg, long long lo, long long hi, const char *why,
		long long *out, char *msg, size_t msz)
{
	if (!arg || parse_ll(arg, lo, hi, out) == 0)
		return 0;
	errno = EINVAL;
	if (lo > hi)
		return reason_fail(msg, msz, "%s %s: no valid value on this host (%s)", opt, EXC(arg),
				   why);
	return reason_fail(msg, msz, "%s %s: out of range %lld..%lld (%s)", opt, EXC(arg), lo, hi,
			   why);
}

int host_fit_vm(const char *vcpus, const char *mem, long long *vcpus_out, long long *mem_mib,
		char *why, size_t wsz)
{
	const char *mi = getenv("ISOPOD_MEMINFO");
	char line[256], host[160];
	long long kb = -1, avail, most;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	FILE *f;

	if (ncpu < 1)
		ncpu = 1;
	snprintf(host, sizeof host, "the host has %ld CPUs", ncpu);
	if (range_check("--vcpus", vcpus, 1, ncpu, host, vcpus_out, why, wsz) < 0)
		return -1;
	if (!(f = fopen(mi && *mi ? mi : "/proc/meminfo", "re")))
		return reason_fail(why, wsz, "unable to open %s:", mi && *mi ? mi : "/proc/meminfo");
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	fclose(f);
	if (kb < 0) {
		errno = ENODATA;
		return reason_fail(why, wsz, "unable to read MemAvailable from /proc/meminfo");
	}
	avail = kb / 1024;
	most = avail * 3 / 4 < 16384 ? avail * 3 / 4 : 16384;
	snprintf(host, sizeof host, "host headroom: 75%% of %lld MiB available = %lld MiB", avail,
		 avail * 3 / 4);
	if (mem)
		return range_check("--mem-mib", mem, 64, most, host, mem_mib, why, wsz);
	if (*mem_mib > most) {
		errno = EINVAL;
		return reason_fail(why, wsz, "default memory %lld MiB exceeds the host headroom (%s); "
				   "pass --mem-mib", *mem_mib, host);
	}
	return 0;
}
