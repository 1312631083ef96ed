/* jailwalk_test.c - lib/jailchild.c's walk_step: the memory of the jail's
 * path walks keeps at most WALK_MAX components, none whose path or link
 * target is WALK_PATH characters or more, only directories and symlinks;
 * a component seen is answered from memory, others from lstat/readlink. */
#include "../../lib/jailchild.c"
#include "../../lib/proc.c"

#include "tap.h"

#include <limits.h>

static struct walk_memo memo; /* (~33 KB: not on the stack) */

int main(void)
{
	char dir[] = "/tmp/isopod-jailwalk-test.XXXXXX", path[PATH_MAX], key[WALK_PATH + 8],
	     link[PATH_MAX], target[WALK_PATH + 8], cmd[64];
	struct walk_seen *seen;
	int isdir, i, r, kept = 1;
	char failed;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}

	/* a directory: kept, and then answered from memory (the directory
	 * gone meanwhile: the memory still says what it saw) */
	snprintf(path, sizeof path, "%s/d", dir);
	mkdir(path, 0755);
	r = walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && !link[0] && seen == &memo.e[0] && memo.n == 1,
	   "a directory: kept (n %zu)", memo.n);
	rmdir(path);
	r = walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && seen == &memo.e[0] && memo.n == 1,
	   "the same key again: from memory, no lstat (the directory is gone)");

	/* a regular file: answered, not kept */
	snprintf(path, sizeof path, "%s/f", dir);
	close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
	r = walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && !isdir && !link[0] && !seen && memo.n == 1, "a file: not kept");

	/* a missing component: -1, lstat's */
	snprintf(path, sizeof path, "%s/none", dir);
	r = walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed);
	ok(r < 0 && errno == ENOENT && failed == 'l' && !seen && memo.n == 1,
	   "a missing component: ENOENT from lstat, not kept");

	/* a key of WALK_PATH - 1 characters is kept, one of WALK_PATH not */
	memset(key, 'k', WALK_PATH - 1);
	key[WALK_PATH - 1] = '\0';
	r = walk_step(&memo, key, dir, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && seen && memo.n == 2, "a key of %d characters: kept", WALK_PATH - 1);
	memset(key, 'K', WALK_PATH);
	key[WALK_PATH] = '\0';
	r = walk_step(&memo, key, dir, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && !seen && memo.n == 2, "a key of %d characters: answered, not kept",
	   WALK_PATH);

	/* a link target of WALK_PATH - 1 characters is kept, of WALK_PATH not
	 * (but answered whole) */
	memset(target, 't', WALK_PATH - 1);
	target[WALK_PATH - 1] = '\0';
	snprintf(path, sizeof path, "%s/l255", dir);
	r = symlink(target, path) == 0 ?
		    walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed) :
		    -2;
	ok(r == 0 && !isdir && !strcmp(link, target) && seen && !strcmp(seen->link, target) &&
		   memo.n == 3,
	   "a link target of %d characters: kept", WALK_PATH - 1);
	memset(target, 'T', WALK_PATH);
	target[WALK_PATH] = '\0';
	snprintf(path, sizeof path, "%s/l256", dir);
	r = symlink(target, path) == 0 ?
		    walk_step(&memo, path, path, &isdir, link, sizeof link, &seen, &failed) :
		    -2;
	ok(r == 0 && !isdir && !strcmp(link, target) && !seen && memo.n == 3,
	   "a link target of %d characters: answered whole, not kept", WALK_PATH);

	/* a kept link asked with a buffer too small for it: neither answered
	 * from memory cut short, nor from readlink cut short (and kept so) */
	snprintf(path, sizeof path, "%s/l255", dir);
	{
		char small[16];

		r = walk_step(&memo, path, path, &isdir, small, sizeof small, &seen, &failed);
		ok(r < 0 && errno == ENAMETOOLONG && failed == 'r' && !seen && memo.n == 3,
		   "a target longer than the caller's buffer: ENAMETOOLONG, not cut short");
	}

	/* an empty link target: the kernel refuses to make one (so the walk's
	 * n == 0 branch cannot be reached from here) */
	snprintf(path, sizeof path, "%s/empty", dir);
	ok(symlink("", path) < 0 && errno == ENOENT,
	   "(an empty link target cannot be made: symlink says ENOENT)");

	/* WALK_MAX entries at most: the rest answered, not kept */
	for (i = 0; memo.n < WALK_MAX && i < 2 * WALK_MAX; i++) {
		snprintf(key, sizeof key, "/fill/%d", i);
		if (walk_step(&memo, key, dir, &isdir, link, sizeof link, &seen, &failed) < 0 || !seen)
			kept = 0;
	}
	ok(kept && memo.n == WALK_MAX, "filled to %d entries", WALK_MAX);
	snprintf(key, sizeof key, "/fill/over");
	r = walk_step(&memo, key, dir, &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && !seen && memo.n == WALK_MAX, "entry %d: answered, not kept (n %zu)",
	   WALK_MAX + 1, memo.n);
	snprintf(key, sizeof key, "/fill/0");
	r = walk_step(&memo, key, "/nonexistent", &isdir, link, sizeof link, &seen, &failed);
	ok(r == 0 && isdir && seen, "a full memory still answers what it kept");

	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		printf("# unable to remove %s\n", dir);
	return tap_done();
}
