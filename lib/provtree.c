/* provtree.c - verify-artifact of a directory copied out (provtree.h):
 * the tree walked (tree_visit, never through a symlink) and compared, entry
 * by entry, with what its Statement records below it (prov_tree_entries). */
#include "provtree.h"
#include "prov.h"
#include "tree.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A directory verified: what its Statement records below it (want, from
 * prov_tree_entries; each entry met is marked), the counts met, the
 * failures (field "tree", the entry named top/path).  A hostile tree (a
 * million unrecorded files, names of PATH_MAX) must not cost memory or
 * output in its size: at most TREE_FAILS failures are listed, then one
 * "...and more" and the walk stops (the verdict is invalid already), and
 * the walk stops too once it has met TREE_FAILS more files and symlinks
 * than the Statement records. */
#define TREE_FAILS 64
struct tree_check {
	json_t *want, *fails;
	const char *top;
	json_int_t files, links, seen, nwant;
	int nfail, stopped, oom;
};

/* One failure (or, past the cap, the last and the walk's stop: -1).  Its
 * path clipped and its bytes made UTF-8 (utf8_json): a name that is not
 * must not make the report fail to encode. */
static int tree_fail(struct tree_check *t, const char *path, const char *why)
{
	char msg[1400];
	json_t *f;
	int n;

	if (t->stopped)
		return -1;
	if (t->nfail++ == TREE_FAILS) {
		t->stopped = 1;
		n = snprintf(msg, sizeof msg, "%.128s/...: and more not listed (%d at most): not verified further",
			     t->top, TREE_FAILS);
	} else {
		n = snprintf(msg, sizeof msg, "%.128s/%.1024s: %s", t->top, path, why);
	}
	if (n < 0 || (size_t)n >= sizeof msg)
		n = (int)strlen(msg);
	/* out of memory: a failure lost would make an invalid tree valid,
	 * so the walk stops and the caller fails outright */
	f = json_pack("{s:s, s:o}", "field", "tree", "why", utf8_json((const uint8_t *)msg, (size_t)n, 1));
	if (!f || json_array_append_new(t->fails, f) < 0)
		t->oom = t->stopped = 1;
	return t->stopped ? -1 : 0;
}

/* One entry of the directory (tree_visit, never through a symlink): a
 * regular file the Statement names with its digest, a symlink with its
 * target; anything else it does not record (directories name nothing). */
static int tree_entry(const struct tree_ent *e, void *arg)
{
	struct tree_check *t = arg;
	json_t *x = json_object_get(t->want, e->path);
	const char *sha = json_string_value(json_object_get(x, "sha256"));
	const char *to = json_string_value(json_object_get(x, "target"));
	char now[PATH_MAX];
	struct stat fs;
	ssize_t n;
	int fd;

	if (S_ISDIR(e->st->st_mode))
		return 0;
	if (++t->seen > t->nwant + TREE_FAILS) {
		t->nfail = TREE_FAILS; /* the next failure is the last */
		return tree_fail(t, e->path, "");
	}
	if (!x)
		return tree_fail(t, e->path, "not recorded in the Statement (added since it was signed)");
	if (json_object_set_new(x, "met", json_true()) < 0) {
		t->oom = t->stopped = 1;
		return -1;
	}
	if (S_ISREG(e->st->st_mode) && sha) {
		t->files++;
		/* the file the walk saw, not one swapped in since (a FIFO
		 * would hash as empty): O_NONBLOCK so none hangs the open */
		fd = openat(e->dfd, e->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			tree_fail(t, e->path, strerror(errno));
		else if (fstat(fd, &fs) < 0 || !S_ISREG(fs.st_mode) || fs.st_dev != e->st->st_dev ||
			 fs.st_ino != e->st->st_ino)
			tree_fail(t, e->path, "replaced while it was verified");
		else if (sha256_fd(fd, now) < 0)
			tree_fail(t, e->path, strerror(errno));
		else if (strcmp(now, sha))
			tree_fail(t, e->path, "its sha256 is not the one signed");
		if (fd >= 0)
			close(fd);
	} else if (S_ISLNK(e->st->st_mode) && to) {
		t->links++;
		n = readlinkat(e->dfd, e->name, now, sizeof now);
		if (n < 0)
			tree_fail(t, e->path, strerror(errno));
		else if ((size_t)n != strlen(to) || memcmp(now, to, (size_t)n))
			tree_fail(t, e->path, "a symlink to another target than the one signed");
	} else {
		tree_fail(t, e->path, sha ? "not a regular file, as signed" :
				      to ? "not a symlink, as signed" : "recorded malformed");
	}
	return t->stopped ? -1 : 0;
}

/* verify of a directory copied out (FILE a directory): every regular file
 * and symlink below it is one the Statement records under its name, with
 * that digest or that target, and every one recorded is there.  dir without
 * trailing slashes. */
int prov_tree_verify(const char *dir, json_t *stmt, json_t *fails, json_t *art)
{
	char why[DIAG_MAX] = "";
	struct tree_check t = { .fails = fails };
	const char *k, *sl = strrchr(dir, '/');
	json_t *v;

	t.top = sl ? sl + 1 : dir; /* dir's trailing slashes are off (cmd_verify) */
	if (!(t.want = prov_tree_entries(stmt, t.top, fails)))
		return -1;
	t.nwant = (json_int_t)json_object_size(t.want);
	/* nothing recorded under top was refused by prov_tree_entries: no
	 * failure there means one was lost (memory), never a valid tree */
	if (!t.nwant && !json_array_size(fails))
		t.oom = 1;
	if (t.nwant && tree_visit(AT_FDCWD, dir, tree_entry, &t, why, sizeof why) < 0)
		tree_fail(&t, why[0] ? why : ".", "not all of the directory visited");
	json_object_foreach(t.want, k, v)
		if (!t.stopped && !json_object_get(v, "met"))
			tree_fail(&t, k, json_object_get(v, "target") ? "the symlink signed is missing" :
					 "the file signed is missing");
	json_decref(t.want);
	return t.oom || json_object_set_new(art, "tree", json_pack("{s:I, s:I}", "files", t.files,
								  "symlinks", t.links)) < 0 ? -1 : 0;
}
