/* provtree.h - verify-artifact of a directory copied out (lib/provtree.c). */
#ifndef ISOPOD_PROVTREE_H
#define ISOPOD_PROVTREE_H

#include <jansson.h>

/* dir (its trailing slashes off) is a tree copied out as its base name
 * TOP: every regular file and symlink below it must be one stmt records
 * under TOP/PATH, with that digest or that target, and every one recorded
 * must be there.  Each difference one failure {field "tree", why} appended
 * to fails (at most 64, then one "and more not listed" and the walk stops);
 * none recorded under TOP/ a failure "subject" (prov_tree_entries); the
 * counts met set as art's "tree" {files, symlinks}.  0, or -1 when out of
 * memory (failures may be missing then: the verdict is not to be used). */
int prov_tree_verify(const char *dir, json_t *stmt, json_t *fails, json_t *art);

#endif
