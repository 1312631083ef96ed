/* gcstore.c - isopod-gc's sweeps of the store's space (gcstore.h): the
 * warm pool over its byte budget, kernels nothing uses, the build cache
 * (--cache), and what each part of the store takes (--df).  isopod-gc's
 * main decides the order of the sweep and the exit status. */
#include "gcstore.h"
#include "config.h"
#include "ovtpl.h"
#include "tree.h"
#include "util.h"
#include "vm.h"
#include "warm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A path that does not fit (pathn): -1, errno ENAMETOOLONG, and g->err
 * naming it by its start, as pathf named it when it exited. */
static int too_long(struct gcstore *g, const char *start)
{
	snprintf(g->err, sizeof g->err, "path too long: %.64s...", start);
	errno = ENAMETOOLONG;
	return -1;
}

/* Remove in place, by descriptor: never following a link, never into
 * another mount (tree_remove); what is left is named. */
static void remove_now(int at, const char *path, const char *shown)
{
	char why[PATH_MAX + 128];

	if (tree_remove_at(at, path, NULL, why, sizeof why) < 0)
		warn("unable to remove %s: %s", EXC(shown), why);
}

int gcstore_trash_open(struct gcstore *g)
{
	char root[PATH_MAX], p[PATH_MAX], failed[PATH_MAX];
	const char *mine;
	struct dirent *de;
	DIR *d;

	if (pathn(root, sizeof root, "%s/trash", store_home()) < 0 ||
	    pathn(g->trash, sizeof g->trash, "%s/gc-XXXXXX", root) < 0)
		return -1;
	if (mkdir_p(root, 0700, failed, sizeof failed) < 0) {
		int e = errno;

		snprintf(g->err, sizeof g->err, "unable to create %s", failed);
		errno = e;
		return -2;
	}
	if (!mkdtemp(g->trash))
		return -1;
	g->trash_fd = open(g->trash, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (g->trash_fd < 0 || flock(g->trash_fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;

		if (g->trash_fd >= 0)
			close(g->trash_fd);
		g->trash_fd = -1;
		rmdir(g->trash);
		errno = e;
		return -1;
	}
	/* Trash directories are made and adopted under the store lock only,
	 * so one whose flock is free belongs to no live gc. */
	mine = strrchr(g->trash, '/') + 1;
	if (!(d = opendir(root)))
		return 0;
	while ((de = readdir(d))) {
		int fd;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    !strcmp(de->d_name, mine))
			continue;
		if (pathn(p, sizeof p, "%s/%s", root, de->d_name) < 0)
			continue;
		fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
			close(fd);
			continue; /* a live gc is emptying it */
		}
		if (gcstore_discard(g, p) < 0 && errno != ENOENT)
			warn("unable to discard %s:", p);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
	return 0;
}

long long gcstore_discard_at(struct gcstore *g, int at, const char *path, const char *shown)
{
	char to[NAME_MAX + 1];
	const char *b = strrchr(path, '/');
	struct stat st;
	long long bytes;

	if (fstatat(at, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -1;
	bytes = tree_bytes_at(at, path);
	g->reclaimed += bytes;
	if (g->dry_run)
		return bytes;
	/* into the trash by its descriptor: renameat, no path below it */
	if (g->trash_fd >= 0 &&
	    snprintf(to, sizeof to, "%lu-%s", g->ntrash++, b ? b + 1 : path) < (int)sizeof to &&
	    renameat(at, path, g->trash_fd, to) == 0)
		return bytes;
	remove_now(at, path, shown);
	return bytes;
}

long long gcstore_discard(struct gcstore *g, const char *path)
{
	return gcstore_discard_at(g, AT_FDCWD, path, path);
}

void gcstore_trash_empty(struct gcstore *g)
{
	if (g->trash_fd < 0)
		return;
	remove_now(AT_FDCWD, g->trash, g->trash);
	close(g->trash_fd);
	g->trash_fd = -1;
}

/* Count, then (unless dry run) remove a directory tree: into the trash
 * when there is one. */
void gcstore_remove_tree(struct gcstore *g, const char *dir)
{
	gcstore_remove_tree_at(g, AT_FDCWD, dir, dir);
}

void gcstore_remove_tree_at(struct gcstore *g, int at, const char *name, const char *shown)
{
	if (gcstore_discard_at(g, at, name, shown) < 0 && errno != ENOENT)
		warn("unable to remove %s:", EXC(shown));
}

int gcstore_warm_in_use(const char *key)
{
	char dir[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int used = 0;

	if (pathn(dir, sizeof dir, "%s/vms", store_home()) < 0 || !(d = opendir(dir)))
		return 0;
	while (!used && (de = readdir(d))) {
		json_t *j;

		if (strncmp(de->d_name, "vm-", 3) || strlen(de->d_name) >= 64 ||
		    !vm_running(de->d_name) || !(j = vm_read(de->d_name)))
			continue;
		used = !strcmp(json_string_value(json_object_get(j, "warm_key")) ?: "", key);
		json_decref(j);
	}
	closedir(d);
	return used;
}

/* Room for element n, zeroed, in an array of *cap elements of size sz
 * (doubling, from 16): the array to use from now on, or NULL (errno ENOMEM)
 * with v freed. */
static void *grow(void *v, size_t *cap, size_t n, size_t sz)
{
	size_t c = *cap ? 2 * *cap : 16;
	char *nv = v;

	if (n >= *cap) {
		if (!(nv = realloc(v, c * sz))) {
			free(v);
			errno = ENOMEM;
			return NULL;
		}
		*cap = c;
	}
	memset(nv + n * sz, 0, sz);
	return nv;
}

/* Is key one of the warm snapshots this sweep removed (or, dry, would)? */
static int swept_has(json_t *swept, const char *key)
{
	json_t *o;
	size_t i;

	json_array_foreach(swept, i, o)
		if (!strcmp(json_string_value(json_object_get(o, "key")) ?: "", key))
			return 1;
	return 0;
}

struct snap {
	char key[65], last_used[40];
	long long bytes;
};

static int lru_first(const void *a, const void *b)
{
	const struct snap *x = a, *y = b;
	int c = strcmp(x->last_used, y->last_used);

	return c ? c : strcmp(x->key, y->key);
}

/* The warm pool over its byte budget (what the sweep leaves): remove the least recently used
 * snapshots (meta.json last_used, else created) until it fits.  Never one
 * a running VM was resumed from (its record's warm_key: its memory file is
 * that VM's RAM), nor one whose key lock is held (being built, resumed or
 * removed).  Sets *total to the pool's bytes after (or, dry, as if).
 * 0, or -1 (errno ENOMEM) when out of memory. */
int warm_evict(struct gcstore *g, long long budget, const struct rec *recs, size_t nrec,
	       json_t *swept, json_t *evicted, long long *total)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct snap *v = NULL;
	size_t n = 0, cap = 0, i, j;
	struct dirent *de;
	DIR *d;

	*total = 0;
	if (pathn(dir, sizeof dir, "%s/warm", store_home()) < 0)
		return too_long(g, store_home());
	if (!(d = opendir(dir)))
		return 0;
	while ((de = readdir(d))) {
		json_t *m;
		const char *lu;

		/* Orphans the sweep removed (or, dry, would): not the pool's. */
		if (!warm_key_valid(de->d_name) || swept_has(swept, de->d_name))
			continue;
		if (!(v = grow(v, &cap, n, sizeof *v))) {
			closedir(d);
			return -1;
		}
		memcpy(v[n].key, de->d_name, 64); /* warm_key_valid: 64 hex */
		if (pathn(p, sizeof p, "%s/%s", dir, de->d_name) < 0) {
			closedir(d);
			free(v);
			return too_long(g, dir);
		}
		v[n].bytes = tree_bytes(p);
		m = warm_meta(de->d_name);
		lu = json_string_value(json_object_get(m, "last_used"));
		if (!lu)
			lu = json_string_value(json_object_get(m, "created"));
		snprintf(v[n].last_used, sizeof v[n].last_used, "%s", lu ? lu : "");
		json_decref(m);
		*total += v[n].bytes;
		n++;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof *v, lru_first);
	for (i = 0; i < n && budget >= 0 && *total > budget; i++) {
		int used = 0, lk;

		for (j = 0; j < nrec && !used; j++)
			used = recs[j].running && !strcmp(recs[j].warm_key, v[i].key);
		if (used || (lk = warm_lock(v[i].key, LOCK_EX | LOCK_NB)) < 0)
			continue;
		/* Under the key's lock, the records as they are now: a boot
		 * that resumed from it after we read them has named it in its
		 * record before it let the lock go. */
		if (gcstore_warm_in_use(v[i].key)) {
			close(lk);
			continue;
		}
		if (pathn(p, sizeof p, "%s/%s", dir, v[i].key) < 0) {
			close(lk);
			free(v);
			return too_long(g, dir);
		}
		if (gcstore_discard(g, p) < 0) {
			if (errno != ENOENT)
				warn("unable to remove the warm snapshot %s:", v[i].key);
			close(lk);
			continue;
		}
		if (!g->dry_run && pathn(p, sizeof p, "%s/%s.lock", dir, v[i].key) < 0) {
			close(lk);
			free(v);
			return too_long(g, dir);
		}
		if (!g->dry_run)
			unlink(p);
		close(lk);
		*total -= v[i].bytes;
		json_array_append_new(evicted, json_pack("{s:s, s:I, s:s}", "key", v[i].key, "bytes",
							 (json_int_t)v[i].bytes, "last_used",
							 v[i].last_used));
	}
	free(v);
	return 0;
}

/* Is kernel k in the shape of a warm snapshot the sweep kept?  1 or 0, or
 * -1 (too_long). */
static int warm_uses_kernel(struct gcstore *g, const char *k, json_t *swept)
{
	char wdir[PATH_MAX];
	struct dirent *we;
	DIR *wd;
	int used = 0;

	if (pathn(wdir, sizeof wdir, "%s/warm", store_home()) < 0)
		return too_long(g, store_home());
	if (!(wd = opendir(wdir)))
		return 0;
	while (!used && (we = readdir(wd))) {
		json_t *m;

		if (!warm_key_valid(we->d_name) || swept_has(swept, we->d_name) ||
		    !(m = warm_meta(we->d_name)))
			continue;
		used = !strcmp(json_string_value(json_object_get(json_object_get(m, "shape"),
								 "kernel")) ?: "", k);
		json_decref(m);
	}
	closedir(wd);
	return used;
}

/* Kernels nothing uses: not kernels/current, not the kernel of a running
 * VM (a warm resume of it needs the very files), not in the shape of a
 * warm snapshot the sweep kept.  Stages are disk layers: they name no
 * kernel.  Removed with the accelerator verdict cached for them. */
int prune_kernels(struct gcstore *g, const struct rec *recs, size_t nrec, json_t *swept,
		  json_t *out)
{
	char dir[PATH_MAX], p[PATH_MAX], cur[80] = "";
	struct dirent *de;
	DIR *d;
	FILE *fp;

	if (pathn(dir, sizeof dir, "%s/kernels", store_home()) < 0)
		return too_long(g, store_home());
	if (pathn(p, sizeof p, "%s/current", dir) < 0)
		return too_long(g, dir);
	if (!(fp = fopen(p, "re")))
		return 0; /* no current kernel: nothing can be told apart */
	if (!fgets(cur, sizeof cur, fp))
		cur[0] = 0;
	fclose(fp);
	cur[strcspn(cur, "\n")] = 0;
	if (!hex64_ok(cur) || !(d = opendir(dir)))
		return 0;
	while ((de = readdir(d))) {
		const char *k = de->d_name;
		int used = !strcmp(k, cur);
		size_t i;

		if (!hex64_ok(k))
			continue;
		for (i = 0; i < nrec && !used; i++)
			used = recs[i].running && !strcmp(recs[i].kernel, k);
		if (!used && (used = warm_uses_kernel(g, k, swept)) < 0) {
			closedir(d);
			return -1;
		}
		if (used)
			continue;
		if (pathn(p, sizeof p, "%s/%s", dir, k) < 0) {
			closedir(d);
			return too_long(g, dir);
		}
		{
			long long b = g->reclaimed;

			gcstore_remove_tree(g, p);
			json_array_append_new(out, json_pack("{s:s, s:I}", "sha256", k, "bytes",
							     (json_int_t)(g->reclaimed - b)));
		}
		if (g->dry_run)
			continue;
		for (const char *const *x = (const char *const[]){ "json", "log", NULL }; *x; x++) {
			if (pathn(p, sizeof p, "%s/accel/%s.%s", store_home(), k, *x) < 0) {
				closedir(d);
				return too_long(g, store_home());
			}
			unlink(p);
		}
	}
	closedir(d);
	return 0;
}

/* overlays/<bsha>-<key>.{qcow2,sha256} (lib/ovtpl.c) whose base,
 * images/base-<bsha>.img, is gone (isopod image rm), and
 * overlays/<st-id>-<key>.* whose layer, stages/<st-id>/layer.qcow2, is
 * (isopod stage rm): no boot or fork can use them; nor a stale one
 * (overlay_tpl_stale: made under an older key, such as another qemu-img's,
 * which no boot would ever look up again).  One {name, bytes} per file
 * onto out.  0, or -1 (too_long). */
int prune_overlays(struct gcstore *g, json_t *out)
{
	char dir[PATH_MAX], p[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int fd;

	if (pathn(dir, sizeof dir, "%s/overlays", store_home()) < 0)
		return too_long(g, store_home());
	/* not followed: a link there (root's gc on a user's store) would
	 * empty another directory of names like ours */
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		return 0;
	if (!(d = fdopendir(fd))) {
		close(fd);
		return 0;
	}
	while ((de = readdir(d))) {
		const char *n = de->d_name;
		long long b = g->reclaimed;
		int r;

		if (hex_span(n) == 64 && n[64] == '-')
			r = pathn(p, sizeof p, "%s/images/base-%.64s.img", store_home(), n);
		else if (!strncmp(n, "st-", 3) && hex_span(n + 3) == 12 && n[15] == '-')
			r = pathn(p, sizeof p, "%s/stages/%.15s/layer.qcow2", store_home(), n);
		else
			continue;
		/* a backing file still there: its template goes only when stale */
		if (r < 0 || (access(p, F_OK) == 0 ? !overlay_tpl_stale(dirfd(d), n) : errno != ENOENT))
			continue;
		if (pathn(p, sizeof p, "%s/%s", dir, n) < 0) {
			closedir(d);
			return too_long(g, dir);
		}
		gcstore_remove_tree_at(g, dirfd(d), n, p);
		json_array_append_new(out, json_pack("{s:s, s:I}", "name", n, "bytes",
						     (json_int_t)(g->reclaimed - b)));
	}
	closedir(d);
	return 0;
}

/* --df: what each part of the store takes on disk (allocated bytes; a
 * file hard-linked from the build cache counts here too), before this
 * (dry) collection.  The rest of the object says what it would reclaim. */
json_t *store_usage(struct gcstore *g)
{
	static const char *const parts[] = { "kernels", "images", "overlays", "stages", "vms",
					     "warm", "accel", "locks", "jail", NULL };
	json_t *u = json_object();
	long long all, sum = 0;
	char p[PATH_MAX];

	if (!u) {
		errno = ENOMEM;
		return NULL;
	}
	for (const char *const *q = parts; *q; q++) {
		long long b;

		if (pathn(p, sizeof p, "%s/%s", store_home(), *q) < 0) {
			json_decref(u);
			too_long(g, store_home());
			return NULL;
		}
		b = tree_bytes(p);
		sum += b;
		json_object_set_new(u, *q, json_integer(b));
	}
	all = tree_bytes(store_home());
	json_object_set_new(u, "other", json_integer(all > sum ? all - sum : 0));
	json_object_set_new(u, "total", json_integer(all));
	return u;
}

/* The build cache (lib/config.c cache_home).  0, or -1 (too_long). */
static int cache_dir(struct gcstore *g, char *out, size_t sz)
{
	const char *e = getenv("ISOPOD_CACHE");

	if (cache_home(out, sz) < 0)
		return too_long(g, e && *e ? e : getenv("XDG_CACHE_HOME") ?: getenv("HOME") ?: "");
	return 0;
}

/* Does any file in dir share an inode with path (images/register
 * hard-links what it registers)?  1 or 0, or -1 (too_long). */
static int linked_into(struct gcstore *g, const char *path, const char *dir)
{
	char p[PATH_MAX];
	struct stat a, b;
	struct dirent *de;
	DIR *d;
	int found = 0;

	if (lstat(path, &a) < 0 || !(d = opendir(dir)))
		return 0;
	while (!found && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (pathn(p, sizeof p, "%s/%s", dir, de->d_name) < 0) {
			closedir(d);
			return too_long(g, dir);
		}
		found = lstat(p, &b) == 0 && b.st_ino == a.st_ino && b.st_dev == a.st_dev;
	}
	closedir(d);
	return found;
}

struct centry {
	char name[65], group[80];
	time_t mtime;
	int keep;
};

static int newest_entry_first(const void *a, const void *b)
{
	const struct centry *x = a, *y = b;
	int c = strcmp(x->group, y->group);

	if (c)
		return c;
	return x->mtime != y->mtime ? (x->mtime < y->mtime ? 1 : -1) : strcmp(x->name, y->name);
}

/* Is the cache entry dir/name of kind k registered in the store (the same
 * inode: images/register hard-links it)?  1 or 0, or -1 (too_long). */
static int cache_registered(struct gcstore *g, const char *dir, const char *name, const char *k)
{
	char p[PATH_MAX], store_dir[PATH_MAX], kd[PATH_MAX];
	struct dirent *ke;
	DIR *kdir;
	int keep = 0;

	if (!strcmp(k, "base")) {
		if (pathn(p, sizeof p, "%s/%s/base.img", dir, name) < 0)
			return too_long(g, dir);
		if (pathn(store_dir, sizeof store_dir, "%s/images", store_home()) < 0)
			return too_long(g, store_home());
		return linked_into(g, p, store_dir);
	}
	if (strcmp(k, "kernel"))
		return 0;
	if (pathn(p, sizeof p, "%s/%s/vmlinux", dir, name) < 0)
		return too_long(g, dir);
	if (pathn(store_dir, sizeof store_dir, "%s/kernels", store_home()) < 0)
		return too_long(g, store_home());
	if (!(kdir = opendir(store_dir)))
		return 0;
	while (keep == 0 && (ke = readdir(kdir)))
		if (hex64_ok(ke->d_name)) {
			if (pathn(kd, sizeof kd, "%s/%s", store_dir, ke->d_name) < 0)
				keep = too_long(g, store_dir);
			else
				keep = linked_into(g, p, kd);
		}
	closedir(kdir);
	return keep;
}

/* The entries of one kind's cache directory (open as d, locked): into *vp
 * (*np of them, *capp allocated), each with its group and keep (younger
 * than grace at now, or registered).  0, or -1
 * (errno ENOMEM, or too_long) with *vp freed. */
static int cache_scan(struct gcstore *g, DIR *d, const char *dir, const char *k, time_t now,
		      long long grace, struct centry **vp, size_t *np, size_t *capp)
{
	char p[PATH_MAX];
	struct dirent *de;
	struct stat st;

	while ((de = readdir(d))) {
		struct centry *v;
		json_t *in;
		int r;

		if (!hex64_ok(de->d_name))
			continue;
		if (pathn(p, sizeof p, "%s/%s", dir, de->d_name) < 0)
			goto too_long;
		if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		if (!(*vp = grow(*vp, capp, *np, sizeof **vp)))
			return -1;
		v = *vp + *np;
		memcpy(v->name, de->d_name, 64);
		v->mtime = st.st_mtime;
		if (pathn(p, sizeof p, "%s/%s/inputs.json", dir, de->d_name) < 0)
			goto too_long;
		in = json_load_path(p);
		snprintf(v->group, sizeof v->group, "%.79s",
			 json_string_value(json_object_get(in, "flavor")) ?: "");
		json_decref(in);
		v->keep = now - v->mtime < grace;
		if ((r = cache_registered(g, dir, de->d_name, k)) < 0) {
			free(*vp);
			*vp = NULL;
			return -1;
		}
		v->keep |= r;
		(*np)++;
	}
	return 0;
too_long:
	free(*vp);
	*vp = NULL;
	return too_long(g, dir);
}

/* --cache: the build cache keeps, per kind (kernel, tools, and base per
 * flavor), its newest entry (what the next build of unchanged inputs hits;
 * images/build-base also falls back on it offline), every entry younger
 * than the grace period, and every entry whose artifact this store has
 * registered (the same inode).  The rest goes.  base/debs (the verified
 * package downloads) is left alone.  Each kind is swept holding its lock
 * (<kind>/.lock, which images/build-* hold while they build); a kind whose
 * build is running is left alone and named in busy.  0, or -1 (errno
 * ENOMEM, or ENAMETOOLONG: too_long). */
int cache_sweep(struct gcstore *g, long long grace, json_t *out, json_t *busy)
{
	static const char *const kinds[] = { "kernel", "base", "tools", NULL };
	char root[PATH_MAX], dir[PATH_MAX], p[PATH_MAX];
	time_t now = time(NULL);

	if (cache_dir(g, root, sizeof root) < 0)
		return -1;
	for (const char *const *k = kinds; *k; k++) {
		struct centry *v = NULL;
		size_t n = 0, cap = 0, i;
		DIR *d;
		int lk;

		if (pathn(dir, sizeof dir, "%s/%s", root, *k) < 0)
			return too_long(g, root);
		if (!(d = opendir(dir)))
			continue;
		if (pathn(p, sizeof p, "%s/.lock", dir) < 0) {
			closedir(d);
			return too_long(g, dir);
		}
		if ((lk = lock_open(p, LOCK_EX | LOCK_NB)) < 0) {
			closedir(d);
			json_array_append_new(busy, json_string(*k));
			continue;
		}
		if (cache_scan(g, d, dir, *k, now, grace, &v, &n, &cap) < 0) {
			closedir(d);
			close(lk);
			return -1;
		}
		closedir(d);
		if (n)
			qsort(v, n, sizeof *v, newest_entry_first);
		for (i = 0; i < n; i++) {
			long long b = g->reclaimed;

			if (v[i].keep || i == 0 || strcmp(v[i].group, v[i - 1].group))
				continue; /* kept, or the newest of its group */
			if (pathn(p, sizeof p, "%s/%s", dir, v[i].name) < 0) {
				free(v);
				close(lk);
				return too_long(g, dir);
			}
			gcstore_remove_tree(g, p);
			json_array_append_new(out, json_pack("{s:s, s:s, s:I}", "kind", *k, "key",
							     v[i].name, "bytes",
							     (json_int_t)(g->reclaimed - b)));
		}
		free(v);
		close(lk);
	}
	return 0;
}

int gcstore_lock_prefix(const char *dir, const char *prefix, int *fds, int max)
{
	char p[PATH_MAX];
	size_t pl = strlen(prefix);
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return errno == ENOENT ? 0 : -1; /* unreadable: unknown, as if held */
	while ((de = readdir(d))) {
		int fd;

		if (strlen(de->d_name) != 64 + 5 || strncmp(de->d_name, prefix, pl) ||
		    strcmp(de->d_name + 64, ".lock") || pathn(p, sizeof p, "%s/%s", dir, de->d_name) < 0)
			continue;
		/* never made here: a lock of gc's own making is always free */
		fd = n < max ? open(p, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK) : -1;
		if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0) {
			if (fd >= 0)
				close(fd);
			while (n > 0)
				close(fds[--n]);
			closedir(d);
			return -1;
		}
		fds[n++] = fd;
	}
	closedir(d);
	return n;
}
