/* tree.h - measure or remove a directory tree that a jail's uid may still be
 * writing (a killed builder's staging directory, an old VM's record, the
 * trash): by descriptor, never following a link, never leaving the top's
 * filesystem, with a bounded number of descriptors (lib/tree.c). */
#ifndef ISOPOD_TREE_H
#define ISOPOD_TREE_H

#include <stddef.h>

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

#endif
