/* tree.h - measure or remove a directory tree that a jail's uid may still be
 * writing (a killed builder's staging directory, an old VM's record, the
 * trash): by descriptor, never following a link, never leaving the top's
 * filesystem, with a bounded number of descriptors (lib/tree.c). */
#ifndef ISOPOD_TREE_H
#define ISOPOD_TREE_H

#include <stddef.h>

/* Bytes the tree at path takes on disk (st_blocks), links counted as links,
 * another filesystem mounted in it not counted.  A missing path: 0. */
long long tree_bytes(const char *path);
/* Remove the tree at path, what a directory holds before it; a link (also
 * at the top) is removed as a link.  Adds the bytes it freed to *bytes when
 * not NULL (also those of a removal that failed part-way).  0 when it is
 * gone (a missing path too), else -1 with errno and, when why is not NULL,
 * the first thing left, by its path below the top ("a/b: a mount point:
 * left, not entered"). */
int tree_remove(const char *path, long long *bytes, char *why, size_t whysz);

#endif
