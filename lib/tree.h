/* tree.h - measure, remove or visit a directory tree that a jail's uid may still be
 * writing (a killed builder's staging directory, an old VM's record, the
 * trash): by descriptor, never following a link, never leaving the top's
 * filesystem, with a bounded number of descriptors (lib/tree.c). */
#ifndef ISOPOD_TREE_H
#define ISOPOD_TREE_H

#include <stddef.h>
#include <sys/stat.h>

/* Bytes the tree at path takes on disk (st_blocks; a file of n links
 * counts 1/n of its blocks), links counted as links, another filesystem
 * mounted in it not counted.  A missing path: 0.
 *
 * Both walk below the top by descriptor, but reach the top by path: its
 * parents must be ours (root's) alone, as the trash, vms/ and the warm
 * root are.  A process of the jail's uid still running can move a subtree
 * out of the top while it is walked (where it may write outside it), and
 * what is walked of it is emptied there: the callers make sure no process
 * of the uid lives (the VM's lock free, its cgroup empty) and a uid is
 * not given out again while one does. */
long long tree_bytes(const char *path);
/* Remove the tree at path, what a directory holds before it; a link (also
 * at the top) is removed as a link.  Adds the bytes it freed to *bytes when
 * not NULL (also those of a removal that failed part-way; a file with
 * links left elsewhere frees nothing).  0 when it is
 * gone (a missing path too), else -1 with errno and, when why is not NULL,
 * the first thing left, by its path below the top ("a/b: a mount point:
 * left, not entered"). */
int tree_remove(const char *path, long long *bytes, char *why, size_t whysz);
/* The same, for path relative to the directory at (AT_FDCWD: as above). */
long long tree_bytes_at(int at, const char *path);
int tree_remove_at(int at, const char *path, long long *bytes, char *why, size_t whysz);

/* One entry of a visit: what to decide on and act on relative to dfd
 * (fstatat, unlinkat), never by path. */
struct tree_ent {
	int dfd;               /* its parent directory, open */
	const char *name;      /* its name there */
	const char *path;      /* below the top, name included: for messages */
	int depth;             /* 1: an entry of the top */
	const struct stat *st; /* fstatat(dfd, name, AT_SYMLINK_NOFOLLOW) */
};
/* 0: go on (into it, a directory); 1: not into it; -1: stop the visit. */
typedef int (*tree_visit_fn)(const struct tree_ent *e, void *arg);
/* Hand every entry below the directory path (relative to at) to fn, a
 * directory before its entries, read-only: no link followed (the top
 * neither), no other mount entered, any depth with at most 16 descriptors
 * (deeper directories are queued by name and reached again from the top,
 * each step checked), at most 2^24 entries.  0, or -1 with errno and, in
 * why when not NULL, the first thing not visited, by its path below the top
 * ("a/b: a mount point: not entered"); the rest is still visited. */
int tree_visit(int at, const char *path, tree_visit_fn fn, void *arg, char *why, size_t whysz);

#endif
