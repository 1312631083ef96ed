/* isopod-warm - list and remove warm snapshots (the warm pool's store).
 *
 *   ls                  one JSON object per line, oldest first
 *   rm KEY...           remove these (a key or a unique prefix of one)
 *   rm --orphaned       remove every snapshot that can never be resumed
 *                       again (its kernel, base or a stage is gone or no
 *                       longer current, or QEMU changed)
 *   rm --all            remove every snapshot
 *
 * Snapshots are built and resumed by isopod-boot; see lib/warm.h for the
 * layout.  Removal takes the key's lock, so a snapshot is never removed
 * while it is being built, published or retired; running clones keep
 * their private mapping of the removed memory file. */
#include "tree.h"
#include "util.h"
#include "warm.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define USAGE "isopod-warm ls | isopod-warm rm KEY... | isopod-warm rm --orphaned | " \
	      "isopod-warm rm --all"

/* warm/, or the usage error of a store path too long (lib/warm.c returns it). */
static const char *root(void)
{
	const char *r = warm_root(0);

	if (!r)
		die(EX_USAGE, "path too long: %.64s...", store_home());
	return r;
}

/* The published snapshots' keys, sorted by creation (then key). */
static json_t *all_keys(void)
{
	struct dirent **ents;
	json_t *a = json_array();
	int n, i;

	if (!a)
		die(EX_SYS, "out of memory");
	n = scandir(root(), &ents, NULL, alphasort);
	if (n < 0 && errno != ENOENT)
		die(EX_SYS, "unable to read %s:", root());
	for (i = 0; i < n; i++) {
		if (warm_key_valid(ents[i]->d_name))
			json_array_append_new(a, json_string(ents[i]->d_name));
		free(ents[i]);
	}
	if (n > 0)
		free(ents);
	/* insertion sort by created: small n */
	for (size_t k = 1; k < json_array_size(a); k++)
		for (size_t j = k; j > 0; j--) {
			json_t *x = warm_meta(json_string_value(json_array_get(a, j - 1)));
			json_t *y = warm_meta(json_string_value(json_array_get(a, j)));
			const char *cx = json_string_value(json_object_get(x, "created"));
			const char *cy = json_string_value(json_object_get(y, "created"));
			int keep = !cx || !cy || strcmp(cx, cy) <= 0;

			json_decref(x);
			json_decref(y);
			if (keep)
				break;
			json_t *t = json_incref(json_array_get(a, j - 1));
			json_array_set(a, j - 1, json_array_get(a, j));
			json_array_set_new(a, j, t);
		}
	return a;
}

static const char *cur_qemu(void)
{
	static char v[256], err[512];
	static int done, ok;

	if (!done) {
		ok = qemu_version(v, sizeof v, err, sizeof err) == 0;
		done = 1;
	}
	return ok ? v : NULL;
}

/* The ls line of one snapshot (new reference). */
static json_t *describe(const char *key)
{
	char p[PATH_MAX];
	json_t *m = warm_meta(key), *o, *why;

	pathf(p, sizeof p, "%s/%s", root(), key);
	if (!m)
		return json_pack("{s:s, s:n, s:I, s:n, s:n, s:i, s:b, s:[s]}", "key", key, "shape",
				 "size", (json_int_t)tree_bytes(p), "created", "last_used", "hits", 0,
				 "orphaned", 1, "orphaned_by", "unreadable meta.json");
	why = warm_orphaned_by(m, cur_qemu());
	o = json_pack("{s:s, s:O?, s:I, s:O?, s:O?, s:O?, s:O?, s:b, s:o}", "key", key, "shape",
		      json_object_get(m, "shape"), "size", (json_int_t)tree_bytes(p), "created",
		      json_object_get(m, "created"), "last_used", json_object_get(m, "last_used"),
		      "hits", json_object_get(m, "hits"), "build_ms",
		      json_object_get(m, "build_ms"), "orphaned", json_array_size(why) > 0,
		      "orphaned_by", why);
	json_decref(m);
	if (!o)
		die(EX_SYS, "out of memory");
	return o;
}

static int cmd_ls(void)
{
	json_t *keys = all_keys(), *k;
	size_t i;

	json_array_foreach(keys, i, k) {
		json_t *o = describe(json_string_value(k));

		json_emit(o);
		json_decref(o);
	}
	json_decref(keys);
	return 0;
}

/* The key's lock, not waited for: its fd, or -1 when a build, publish or
 * retire holds it (busy).  Any other failure dies. */
static int lock_key(const char *key)
{
	int lk = warm_lock(key, LOCK_EX | LOCK_NB);

	if (lk < 0 && errno != EWOULDBLOCK)
		die(EX_SYS, "unable to lock the warm snapshot %s:", key);
	return lk;
}

/* Remove one snapshot whose lock lk is held; lk is closed.  0, or -1
 * (warned: the caller fails once all are tried). */
static int remove_locked(const char *key, int lk, long long *bytes)
{
	char p[PATH_MAX];

	if (warm_remove(key, bytes) < 0 && errno != ENOENT) {
		warn("unable to remove the warm snapshot %s:", key);
		close(lk);
		return -1;
	}
	/* Unlinked while held: whoever waits on it re-takes the new file. */
	pathf(p, sizeof p, "%s/%s.lock", root(), key);
	unlink(p);
	close(lk);
	return 0;
}

/* rm KEY...: all or nothing.  Every key's lock is taken before anything
 * is removed, so a busy one (102) leaves the others too, and the failure
 * has nothing to report but its diagnostic (stdout stays empty). */
static void lock_named(json_t *keys, int *lks)
{
	json_t *k;
	size_t j, busy = 0;
	const char *first = NULL;

	json_array_foreach(keys, j, k)
		if ((lks[j] = lock_key(json_string_value(k))) < 0 && !busy++)
			first = json_string_value(k);
	if (!busy)
		return;
	json_array_foreach(keys, j, k)
		if (lks[j] >= 0)
			close(lks[j]);
	die(EX_CONFLICT, "warm snapshot %s is being built or retired (%zu of the %zu named are busy); "
	    "nothing removed", first, busy, json_array_size(keys));
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "orphaned", no_argument, NULL, 'o' },
		{ "all", no_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *keys, *removed, *busy, *k, *out;
	long long bytes = 0;
	int c, orphaned = 0, all = 0, failed = 0, i, *lks;
	size_t j;

	progname = "isopod-warm";
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2)
		die_usage(USAGE, "no command given");
	if (!strcmp(argv[1], "ls")) {
		if (argc != 2)
			die_usage(USAGE, "ls takes no operand");
		return cmd_ls();
	}
	if (strcmp(argv[1], "rm"))
		die_usage(USAGE, "unknown command %s", EXC(argv[1]));
	optind = 2;
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'o': orphaned = 1; break;
		case 'a': all = 1; break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (orphaned + all + (optind < argc) != 1)
		die_usage(USAGE, "rm wants KEY..., --orphaned or --all");
	if (!(removed = json_array()) || !(busy = json_array()))
		die(EX_SYS, "out of memory");
	keys = all_keys();

	if (optind < argc) {
		/* Resolve every KEY before removing anything. */
		json_t *want = json_array();

		for (i = optind; i < argc; i++) {
			const char *ref = argv[i], *hit = NULL;
			size_t n = strlen(ref), hits = 0;

			if (hex_span(ref) != n)
				die(EX_USAGE, "%s: a key is lower-case hex", EXC(ref));
			if (n == 0 || n > 64)
				die(EX_USAGE, "%s: a key is 1 to 64 hex digits", EXC(ref));
			json_array_foreach(keys, j, k)
				if (!strncmp(json_string_value(k), ref, n)) {
					hit = json_string_value(k);
					hits++;
				}
			if (!hits)
				die(EX_NOTFOUND, "no such warm snapshot: %s", ref);
			if (hits > 1)
				die(EX_CONFLICT, "warm snapshot key %s is ambiguous (%zu match)", ref, hits);
			/* a key named twice is one key (its lock taken once) */
			json_array_foreach(want, j, k)
				if (!strcmp(json_string_value(k), hit))
					break;
			if (j == json_array_size(want))
				json_array_append_new(want, json_string(hit));
		}
		json_decref(keys);
		keys = want;
	} else if (orphaned) {
		json_t *want = json_array();

		json_array_foreach(keys, j, k) {
			json_t *m = warm_meta(json_string_value(k));
			json_t *why = m ? warm_orphaned_by(m, cur_qemu()) : NULL;

			if (!m || json_array_size(why))
				json_array_append(want, k);
			json_decref(why);
			json_decref(m);
		}
		json_decref(keys);
		keys = want;
	}
	if (!(lks = calloc(json_array_size(keys) + 1, sizeof *lks)))
		die(EX_SYS, "out of memory");
	/* Named keys: all locked first, or none removed.  With --orphaned or
	 * --all a busy one is simply left for next time (and listed). */
	if (optind < argc)
		lock_named(keys, lks);
	json_array_foreach(keys, j, k) {
		const char *key = json_string_value(k);

		if (optind >= argc && (lks[j] = lock_key(key)) < 0)
			json_array_append(busy, k);
		else if (remove_locked(key, lks[j], &bytes) == 0)
			json_array_append(removed, k);
		else
			failed++;
	}
	free(lks);
	if (failed)
		die(EX_SYS, "%d of %zu warm snapshots not removed (above); %zu removed (%lld bytes)",
		    failed, json_array_size(keys), json_array_size(removed), bytes);
	out = json_pack("{s:o, s:o, s:I}", "removed", removed, "busy", busy, "reclaimed_bytes",
			(json_int_t)bytes);
	if (!out)
		die(EX_SYS, "out of memory");
	json_emit(out);
	json_decref(keys);
	return 0;
}
