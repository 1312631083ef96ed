/* jaildeps.c - the shared libraries a jailed program loads (ldd), cached
 * by the identity of every file the answer depends on (see jail.h).
 *
 * ldd was ~20 ms of every jailed run (issue 12's bench: a warm run is
 * ~300 ms): it runs the dynamic loader over QEMU each time, for an answer
 * that changes only when QEMU, a library or the loader's cache does.  The
 * cache keeps that answer with a key made of the identity (device, inode,
 * size, mtime, ctime) of the program, /etc/ld.so.cache,
 * /etc/ld.so.preload, each library and each library's directory, hashed
 * into one stamp (deps_key); a hit needs every one unchanged.
 *
 * What a cache may not do is weaken the jail.  Its answer only names what
 * is bound read-only, and every path still goes through jail_spawn's
 * resolution and refusals (never /proc, /sys, /run, /dev, never below a
 * read-write path); the jail shows nothing but what is bound.  So a stale
 * answer can at worst bind a library QEMU no longer needs, or miss one it
 * now needs (QEMU then fails to start, loudly): still, any doubt is a
 * miss and ldd runs.  The file must be ours (the euid's), a regular file
 * writable by nobody else, or it is ignored; an environment with any LD_
 * variable (ldd honours LD_LIBRARY_PATH, LD_PRELOAD) is never cached. */
#include "jail.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEPS_MAX 256 /* more than any program we jail: QEMU loads ~50 */

extern char **environ;

/* ldd's answer for prog into out[*n..] (malloc'd strings, at most max). */
static int run_ldd(const char *prog, char **out, size_t *n, size_t max, char *err, size_t errsz)
{
	char *argv[] = { "ldd", (char *)prog, NULL }, buf[65536], *line, *save;
	struct proc_spec ps = PROC_SPEC(argv);
	size_t len = 0;
	int st;

	/* Both streams: "not a dynamic executable" is on stderr; a line that
	 * is not a path is skipped below. */
	ps.out = ps.err = PROC_PIPE;
	if ((st = proc_capture(&ps, buf, sizeof buf, &len)) < 0)
		return reason_fail(err, errsz, "ldd %s:", prog);
	/* A cut list would bind a cut path (a directory prefix) into the jail,
	 * or leave a library out: never a partial answer. */
	if (len >= sizeof buf) {
		errno = E2BIG;
		return reason_fail(err, errsz, "ldd %s: more than %zu bytes of output", prog,
				 sizeof buf - 1);
	}
	if (st != 0 && strstr(buf, "not a dynamic executable")) /* static: nothing to add */
		return 0;
	if (st != 0) {
		errno = EINVAL;
		return reason_fail(err, errsz, "ldd %s: exit status %d: %s", prog, st,
				 EXC(buf[0] ? buf : "(no output)"));
	}
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *p = strstr(line, "=> "), *e;

		p = p ? p + 3 : line + strspn(line, " \t");
		if (strstr(p, "not found")) {
			errno = ENOENT;
			return reason_fail(err, errsz, "ldd %s: %s", prog, EXC(line));
		}
		if (*p != '/') /* linux-vdso.so.1: in the kernel, not a file */
			continue;
		if ((e = strstr(p, " (")))
			*e = '\0';
		if (*n >= max) {
			errno = E2BIG;
			return reason_fail(err, errsz, "ldd %s: more than %zu paths", prog, max);
		}
		if (!(out[(*n)++] = strdup(p)))
			return reason_fail(err, errsz, "strdup:");
	}
	return 0;
}

/* The key of an answer, built up by stamp_add. */
struct stamp {
	char *buf;
	size_t len, cap;
	int doubt; /* a file that could not be read: no key */
};

/* One member of the key: path, then its identity (lib/util.c
 * file_identity's: device, inode, size, mtime and ctime), each number at
 * a fixed width after the path's NUL, so no two lists read the same; with
 * may_lack, a file that does not exist (/etc/ld.so.preload, usually) is
 * the path and a mark.  Any other failure, or a library that is gone
 * (ldd's answer is then already stale), is doubt. */
static void stamp_add(struct stamp *k, const char *path, int may_lack)
{
	struct stat st;
	int64_t v[STAT_IDENTITY_N];
	size_t pl = strlen(path) + 1, need;
	char *nb;

	if (k->doubt)
		return;
	if (stat(path, &st) < 0) {
		if (errno != ENOENT || !may_lack) {
			k->doubt = 1;
			return;
		}
		memset(v, 0xff, sizeof v);
	} else {
		stat_identity(&st, v);
	}
	need = k->len + pl + sizeof v;
	if (need > k->cap) {
		if (!(nb = realloc(k->buf, need * 2))) {
			k->doubt = 1;
			return;
		}
		k->buf = nb;
		k->cap = need * 2;
	}
	memcpy(k->buf + k->len, path, pl);
	memcpy(k->buf + k->len + pl, v, sizeof v);
	k->len = need;
}

/* path's directory ("/" for a file in the root) into dir. */
static int dir_of(const char *path, char dir[PATH_MAX])
{
	char *sl;

	if (pathn(dir, PATH_MAX, "%s", path) < 0 || !(sl = strrchr(dir, '/')))
		return -1;
	sl[sl == dir] = '\0';
	return 0;
}

/* The key of an answer as one stamp (sha256, hex, into out): prog, the
 * loader's cache and preload list, each library, then each library's
 * directory, once however many libraries it holds (a library added
 * beside one, which the loader could now pick first, moves the
 * directory's mtime).  The same files as a key of one identity per file
 * and per library (the stat of each, ~55 for QEMU, not ~100: its ~50
 * libraries are in one directory), hashed: no identity is read back from
 * the cache, only compared, so the stamp is all the file needs.  0, or -1
 * (doubt: any file unreadable or gone). */
static int deps_key(const char *prog, const char *ldcache, char *const *deps, size_t nd,
		    char out[65])
{
	struct stamp k = { .buf = NULL };
	char dir[PATH_MAX], other[PATH_MAX];
	size_t i, j;
	int r = -1;

	stamp_add(&k, prog, 0);
	stamp_add(&k, ldcache, 0);
	stamp_add(&k, "/etc/ld.so.preload", 1);
	for (i = 0; i < nd && !k.doubt; i++) {
		if (deps[i][0] != '/')
			goto out;
		stamp_add(&k, deps[i], 0);
	}
	for (i = 0; i < nd && !k.doubt; i++) {
		if (dir_of(deps[i], dir) < 0)
			goto out;
		/* each directory once, with its first library */
		for (j = 0; j < i; j++)
			if (dir_of(deps[j], other) == 0 && !strcmp(other, dir))
				break;
		if (j == i)
			stamp_add(&k, dir, 0);
	}
	if (!k.doubt && k.buf) {
		sha256_hex(k.buf, k.len, out);
		r = 0;
	}
out:
	free(k.buf);
	return r;
}

/* ldd's answer depends on these (GLIBC_TUNABLES: glibc.cpu.hwcaps picks
 * the loader's glibc-hwcaps directory); such an environment is never
 * cached. */
static int ld_env(void)
{
	for (char **e = environ; e && *e; e++)
		if (!strncmp(*e, "LD_", 3) || !strncmp(*e, "GLIBC_TUNABLES=", 15))
			return 1;
	return 0;
}

/* "deps-<sha256(prog):16>.json": the file of prog's answer. */
static void cache_name(const char *prog, char name[32])
{
	char sha[65];

	sha256_hex(prog, strlen(prog), sha);
	snprintf(name, 32, "deps-%.16s.json", sha);
}

/* The cache file's version: 2 keeps the key as one stamp (deps_key);
 * version 1 kept each identity, and is a miss (rewritten by the run). */
#define DEPS_VERSION 2

/* c (json_load_ours's, still the caller's) as the answer for prog: out[*n..]
 * filled and 1 when it holds and its key is still the files' own. */
static int cache_read(json_t *c, const char *prog, const char *ldcache, char **out, size_t *n,
		      size_t max)
{
	json_t *deps, *v;
	char *list[DEPS_MAX], key[65];
	const char *was;
	size_t i, nd;

	if (!c)
		return 0;
	deps = json_object_get(c, "deps");
	v = json_object_get(c, "prog");
	was = json_string_value(json_object_get(c, "key"));
	nd = json_array_size(deps);
	if (json_integer_value(json_object_get(c, "version")) != DEPS_VERSION ||
	    !json_is_string(v) || strcmp(json_string_value(v), prog) || !json_is_array(deps) ||
	    !was || nd > DEPS_MAX || *n + nd > max)
		return 0;
	json_array_foreach(deps, i, v) {
		if (!json_is_string(v))
			return 0;
		list[i] = (char *)json_string_value(v);
	}
	if (deps_key(prog, ldcache, list, nd, key) < 0 || strcmp(key, was))
		return 0;
	for (i = 0; i < nd; i++)
		if (!(out[*n + i] = strdup(list[i]))) {
			while (i > 0)
				free(out[*n + --i]);
			return 0;
		}
	*n += nd;
	return 1;
}

/* Keep ldd's answer deps[0..nd) for prog, when the key of prog and the
 * loader's files read before ldd ran (before) still holds: a file that
 * changed while ldd read it is not cached with its new identity.  A
 * failure costs only the next run's ldd. */
static void cache_write(const char *path, const char *prog, const char *ldcache,
			const char *before, char *const *deps, size_t nd)
{
	json_t *c = NULL, *list = json_array();
	char *s = NULL, key[65], now[65];
	size_t i;

	if (!list || deps_key(prog, ldcache, NULL, 0, now) < 0 || strcmp(now, before) ||
	    deps_key(prog, ldcache, deps, nd, key) < 0)
		goto out;
	for (i = 0; i < nd; i++)
		json_array_append_new(list, json_string(deps[i]));
	c = json_pack("{s:i, s:s, s:O, s:s}", "version", DEPS_VERSION, "prog", prog, "deps", list,
		      "key", key);
	if (c && (s = json_dumps(c, JSON_COMPACT)))
		atomic_write(path, s, strlen(s), 0600);
out:
	free(s);
	json_decref(c);
	json_decref(list);
}

/* Whether ldd's answer deps[0..nd) is settled enough to keep: the key of
 * it, a second ldd's answer and the key again all agree.  A library
 * replaced after ldd read it but before its identity was taken would
 * otherwise be kept with the new identity and the old answer (QEMU then
 * failing to start until the key moved); a change before the first key
 * shows in the second answer, one between the keys in the keys. */
static int settled(const char *prog, const char *ldcache, char *const *deps, size_t nd)
{
	char *again[DEPS_MAX], err[256], k1[65], k2[65];
	size_t n = 0, i;
	int same = 0;

	if (deps_key(prog, ldcache, deps, nd, k1) == 0 &&
	    run_ldd(prog, again, &n, DEPS_MAX, err, sizeof err) == 0 && n == nd) {
		for (same = 1, i = 0; i < nd; i++)
			same &= !strcmp(again[i], deps[i]);
		same = same && deps_key(prog, ldcache, deps, nd, k2) == 0 && !strcmp(k1, k2);
	}
	for (i = 0; i < n; i++)
		free(again[i]);
	return same;
}

int jail_deps_cached(const char *prog, const char *cache_dir, const char *ldcache, char **out,
		     size_t *n, size_t max, int *hit, char *err, size_t errsz)
{
	char path[PATH_MAX], name[32], before[65];
	size_t from = *n;
	json_t *c;
	int r, b;

	if (hit)
		*hit = 0;
	cache_name(prog, name);
	if (!cache_dir || ld_env() || pathn(path, sizeof path, "%s/%s", cache_dir, name) < 0)
		return run_ldd(prog, out, n, max, err, errsz);
	c = json_load_ours(path);
	r = c && cache_read(c, prog, ldcache, out, n, max);
	json_decref(c);
	if (r) {
		if (hit)
			*hit = 1;
		return 0;
	}
	b = deps_key(prog, ldcache, NULL, 0, before);
	if ((r = run_ldd(prog, out, n, max, err, errsz)) == 0 && b == 0 && *n - from <= DEPS_MAX &&
	    settled(prog, ldcache, out + from, *n - from))
		cache_write(path, prog, ldcache, before, out + from, *n - from);
	return r;
}

int jail_deps_valid(const char *path, const char *ldcache)
{
	json_t *c = json_load_ours(path);
	const char *prog = json_string_value(json_object_get(c, "prog")), *b = strrchr(path, '/');
	char *out[DEPS_MAX], name[32];
	size_t n = 0;
	int hit = 0;

	if (prog) {
		/* the name jail_deps_cached would look it up by */
		cache_name(prog, name);
		hit = !strcmp(b ? b + 1 : path, name) && cache_read(c, prog, ldcache, out, &n, DEPS_MAX);
	}
	while (n > 0)
		free(out[--n]);
	json_decref(c);
	return hit;
}

int jail_deps(const char *prog, char **out, size_t *n, size_t max, char *err, size_t errsz)
{
	char dir[PATH_MAX], why[PATH_MAX + 256];
	const char *cache = NULL;
	int fd;

	/* <store>/jail, made when the store exists (a tool run without one,
	 * isopod-jail by hand, only goes without the cache).  It must be a
	 * directory of ours that nobody else may write (not a link), or root,
	 * running on a user's store (sudo -E), would write the answer where
	 * that user's link points. */
	if (pathn(dir, sizeof dir, "%s/jail", store_home()) == 0 &&
	    (mkdir(dir, 0700) == 0 || errno == EEXIST) && (fd = dir_own_open(dir, why, sizeof why)) >= 0) {
		close(fd);
		cache = dir;
	}
	return jail_deps_cached(prog, cache, JAIL_LDCACHE, out, n, max, NULL, err, errsz);
}
