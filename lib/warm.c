/* warm.c - the warm pool's store (see warm.h). */
#include "proc.h"
#include "qemu.h"
#include "tree.h"
#include "warm.h"
#include "tsc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>


int warm_key_valid(const char *s)
{
	return hex64_ok(s);
}

const char *warm_root(int mk)
{
	static char p[PATH_MAX];
	char failed[PATH_MAX];

	if (pathn(p, sizeof p, "%s/warm", store_home()) < 0)
		return NULL;
	if (mk && mkdir_p(p, 0700, failed, sizeof failed) < 0)
		return NULL;
	return p;
}

/* warm/<name> in buf, the directory made: 0, or -1 (errno). */
static int warm_path(char *buf, size_t sz, const char *name)
{
	const char *root = warm_root(1);

	return root ? pathn(buf, sz, "%s/%s", root, name) : -1;
}

/* ---- the QEMU version, cached by the binary's identity --------------- */

static int run_version(const char *bin, char *out, size_t sz, char *err, size_t errsz)
{
	char *av[] = { QEMU, "--version", NULL }, buf[512], *nl;
	struct proc_spec ps = PROC_SPEC(av);
	int st;

	ps.file = bin;
	ps.out = PROC_PIPE;
	if ((st = proc_capture(&ps, buf, sizeof buf, NULL)) < 0) {
		snprintf(err, errsz, "%s --version: %s", bin, strerror(errno));
		return -1;
	}
	if ((nl = strchr(buf, '\n')))
		*nl = 0;
	if (st != 0 || strncmp(buf, "QEMU emulator version ", 22)) {
		snprintf(err, errsz, "%s --version failed or printed no version", bin);
		return -1;
	}
	snprintf(out, sz, "%s", buf);
	return 0;
}

int qemu_version(char *out, size_t sz, char *err, size_t errsz)
{
	char bin[PATH_MAX], cache[PATH_MAX];
	struct stat st;
	json_t *c, *n;
	const char *v;

	if (proc_path_find(QEMU, bin, sizeof bin) < 0 || stat(bin, &st) < 0) {
		snprintf(err, errsz, "%s not found in PATH", QEMU);
		return -1;
	}
	if (warm_path(cache, sizeof cache, "qemu-version.json") < 0) {
		snprintf(err, errsz, "unable to create %s/warm: %s", store_home(), strerror(errno));
		return -1;
	}
	/* The cache is valid for this very file: path, inode, size and both
	 * times (a package upgrade replaces the inode; ctime cannot be set). */
	if (!(n = file_identity(bin, &st))) {
		snprintf(err, errsz, "out of memory");
		return -1;
	}
	if ((c = json_load_path(cache))) {
		json_t *id = json_object_get(c, "binary");

		v = json_string_value(json_object_get(c, "version"));
		if (v && id && json_equal(id, n) && !strncmp(v, "QEMU emulator version ", 22)) {
			snprintf(out, sz, "%s", v);
			json_decref(c);
			json_decref(n);
			return 0;
		}
		json_decref(c);
	}
	if (run_version(bin, out, sz, err, errsz) < 0) {
		json_decref(n);
		return -1;
	}
	c = json_pack("{s:o, s:s}", "binary", n, "version", out);
	if (!c || json_write_atomic(cache, c) < 0)
		warn("unable to cache the QEMU version in %s:", cache);
	json_decref(c);
	return 0;
}

/* ---- locks, meta, orphans --------------------------------------------- */

int warm_lock(const char *key, int op)
{
	const char *root = warm_root(1);
	char p[PATH_MAX];
	struct stat a, b;
	int fd;

	if (!root || pathn(p, sizeof p, "%s/%s.lock", root, key) < 0)
		return -1;
	for (;;) {
		if ((fd = lock_open(p, op)) < 0)
			return -1;
		/* A remover unlinks the lock file while holding it: a lock on
		 * an unlinked file locks nothing.  Take the one there now. */
		if (fstat(fd, &a) == 0 && stat(p, &b) == 0 && a.st_ino == b.st_ino &&
		    a.st_dev == b.st_dev)
			return fd;
		close(fd);
	}
}

json_t *warm_meta(const char *key)
{
	char p[PATH_MAX];

	if (!warm_key_valid(key)) {
		errno = EINVAL;
		return NULL;
	}
	if (pathn(p, sizeof p, "%s/warm/%s/meta.json", store_home(), key) < 0)
		return NULL;
	return json_load_path(p);
}

/* "<64 hex>" from a pointer file, else out[0] = 0. */
static void read_ptr(const char *path, char out[65])
{
	char buf[80];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	out[0] = 0;
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 64)
		return;
	buf[64] = 0;
	if (warm_key_valid(buf))
		memcpy(out, buf, 65);
}

static int safe_name(const char *s)
{
	return s && *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") && strlen(s) < 128;
}

json_t *warm_orphaned_by(json_t *meta, const char *cur_qemu)
{
	const char *h = store_home();
	json_t *why = json_array(), *shape = json_object_get(meta, "shape"), *v;
	const char *ksha = json_string_value(json_object_get(shape, "kernel"));
	json_t *base = json_object_get(shape, "base"), *layers = json_object_get(shape, "layers");
	const char *bsha = json_string_value(json_object_get(base, "sha256"));
	const char *flavor = json_string_value(json_object_get(base, "flavor"));
	const char *q = json_string_value(json_object_get(shape, "qemu"));
	const char *net = json_string_value(json_object_get(shape, "net"));
	char p[PATH_MAX], cur[65];
	struct stat st;
	size_t i;

	if (!why)
		return NULL;
	if (!warm_key_valid(ksha) || !warm_key_valid(bsha) || !json_is_array(layers) || !net ||
	    (strcmp(net, "none") && strcmp(net, "filtered") && strcmp(net, "open"))) {
		json_array_append_new(why, json_string("unreadable shape"));
		return why;
	}
	/* A path that does not fit (ENAMETOOLONG): NULL, the snapshot kept,
	 * as when out of memory. */
	if (pathn(p, sizeof p, "%s/kernels/%s/vmlinux", h, ksha) < 0)
		goto toolong;
	if (stat(p, &st) < 0) {
		json_array_append_new(why, json_sprintf("kernel %.12s was removed", ksha));
	} else {
		/* Boots always take kernels/current: another one makes this
		 * snapshot unreachable. */
		if (pathn(p, sizeof p, "%s/kernels/current", h) < 0)
			goto toolong;
		read_ptr(p, cur);
		if (strcmp(cur, ksha))
			json_array_append_new(why,
					      json_sprintf("kernel %.12s is no longer current", ksha));
	}
	if (pathn(p, sizeof p, "%s/images/base-%s.img", h, bsha) < 0)
		goto toolong;
	if (stat(p, &st) < 0) {
		json_array_append_new(why, json_sprintf("base %.12s was removed", bsha));
	} else if (json_array_size(layers) == 0 && safe_name(flavor)) {
		/* A plain chain is the current image of its flavor; forks of
		 * stages keep their own base. */
		if (pathn(p, sizeof p, "%s/images/current-%s", h, flavor) < 0)
			goto toolong;
		read_ptr(p, cur);
		if (strcmp(cur, bsha))
			json_array_append_new(why, json_sprintf("base %.12s is no longer the current %s image",
								bsha, flavor));
	}
	json_array_foreach(layers, i, v) {
		const char *s = json_string_value(v);

		if (!id_stage_ok(s)) {
			json_array_append_new(why, json_string("unreadable stage id"));
			continue;
		}
		if (pathn(p, sizeof p, "%s/stages/%s/layer.qcow2", h, s) < 0)
			goto toolong;
		if (stat(p, &st) < 0)
			json_array_append_new(why, json_sprintf("stage %s was removed", s));
	}
	if (cur_qemu && (!q || strcmp(q, cur_qemu)))
		json_array_append_new(why, json_sprintf("qemu changed (now %s)", cur_qemu));
	/* A snapshot built from another QEMU command line than lib/qemu.c
	 * builds now has a key that can never come up again.  (warm/argv.json,
	 * where older isopod-boots recorded this, is no longer read.) */
	{
		char now[65];
		const char *was = json_string_value(json_object_get(meta, "argv_fingerprint"));

		qemu_fingerprint(now);
		if (!was || strcmp(now, was))
			json_array_append_new(why, json_string("built by an isopod-boot that gave "
							       "QEMU another command line"));
	}
	/* A TCG snapshot's guest was told the store's TSC rate (lib/tsc.h):
	 * one told another than the store keeps now (accel/tsc.json measured
	 * again) has a key that never comes up again, with the same
	 * fingerprint.  No kept rate: unknown, kept. */
	{
		const char *kt = json_string_value(json_object_get(meta, "key_text")), *t;
		long long now, was = 0;
		char tw[256];

		if (kt && strstr(kt, "\naccel tcg\n") && tsc_kept(&now, tw, sizeof tw)) {
			if ((t = strstr(kt, " tsc_early_khz=")) && strstr(kt, " tsc=reliable"))
				was = strtoll(t + sizeof " tsc_early_khz=" - 1, NULL, 10);
			if (was != now)
				json_array_append_new(why, json_sprintf("built for a TSC rate of %lld kHz "
									"(the store's is %lld)", was, now));
		}
	}
	return why;
toolong:
	json_decref(why);
	errno = ENAMETOOLONG;
	return NULL;
}

/* ---- removal ---------------------------------------------------------- */

int warm_remove(const char *key, long long *bytes)
{
	char from[PATH_MAX], to[PATH_MAX], name[96];

	if (!warm_key_valid(key)) {
		errno = EINVAL;
		return -1;
	}
	snprintf(name, sizeof name, ".retired-%s.%ld", key, (long)getpid());
	if (warm_path(from, sizeof from, key) < 0 || warm_path(to, sizeof to, name) < 0)
		return -1;
	/* One rename takes it out of use; running clones keep their mapping
	 * of the (now unlinked) memory file. */
	if (rename(from, to) < 0)
		return -1;
	return tree_remove(to, bytes, NULL, 0);
}

int warm_stale_name(const char *name, char key[65], long long *pid)
{
	const char *p;

	if (!strncmp(name, ".staging-", 9))
		p = name + 9;
	else if (!strncmp(name, ".retired-", 9))
		p = name + 9;
	else
		return 0;
	if (strlen(p) < 66 || p[64] != '.')
		return 0;
	memcpy(key, p, 64);
	key[64] = 0;
	if (!warm_key_valid(key) || parse_ll(p + 65, 1, INT_MAX, pid) < 0)
		return 0;
	return 1;
}

void warm_tpl_name(const char *key, char out[WARM_TPL_NAME_SZ])
{
	const char *home = store_home();
	char id[64], h[65];
	struct stat st;

	/* the store by its directory's identity, not its path: one store
	 * reached by two paths (a link, a bind) is one name */
	if (stat(home, &st) == 0)
		snprintf(id, sizeof id, "%llx:%llx", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
	else
		snprintf(id, sizeof id, "%.63s", home);
	sha256_hex(id, strlen(id), h);
	snprintf(out, WARM_TPL_NAME_SZ, "tpl-%.32s-%.16s", key, h);
}
