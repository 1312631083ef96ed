/* stage.h - the stage store: immutable qcow2 layers in stages/st-<hex>/.
 *
 * stages/st-<hex>/layer.qcow2   read-only; backing = parent's layer or the
 *                               base image, as a path relative to the layer
 * stages/st-<hex>/meta.json     {id,name,label,parent,depth,base,size,...}
 * stages/.tmp-*                 a commit or flatten in progress (or killed):
 *                               never listed, reclaimed by isopod-gc
 */
#ifndef ISOPOD_STAGE_H
#define ISOPOD_STAGE_H

#include <jansson.h>
#include <stddef.h>

#define STAGE_MAX_DEPTH_DEFAULT 16

/* The depth cap: $ISOPOD_MAX_DEPTH (1..64) or the default. */
int stage_max_depth(void);

/* Label syntax: 1..128 bytes, no '/', newline or NUL, not starting with '-'
 * or '.'.  NULL when valid, else the reason. */
const char *label_invalid(const char *label);

/* Resolve REF (full id, unique id prefix, vanity name, label) to a stage
 * id.  Returns 1 and fills id; 0 when nothing matches; dies 100 when REF has
 * not a label's syntax, 102 listing the candidates when ambiguous. */
int stage_find(const char *ref, char *id, size_t idsz);
/* stage_find, dying 101 naming REF when nothing matches. */
void stage_resolve(const char *ref, char *id, size_t idsz);

/* Load stages/<id>/meta.json (NULL with errno). */
json_t *stage_meta(const char *id);
/* Is `label` used by any stage?  Fills the holder's id. */
int label_taken(const char *label, char *holder, size_t hsz);

/* Check that a stage's whole chain is usable before anything boots on it:
 * every layer present, a qcow2 that `qemu-img check` accepts, and the base
 * image present.  Dies 111 naming the broken stage and file. */
void stage_verify_chain(const char *id);

/* Run a program (argv), stdout/stderr to /dev/null unless quiet == 0 (then
 * stderr passes through).  Returns its exit status, or -1. */
int run_prog(char *const argv[], int quiet);

/* Base image paths: images/base-<sha>.img for a flavor's current build. */
int base_current(const char *flavor, char *sha, size_t shasz);

#endif
