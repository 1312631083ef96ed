/* stage.h - the stage store: immutable qcow2 layers in stages/st-<hex>/.
 *
 * stages/st-<hex>/layer.qcow2   read-only; backing = parent's layer or the
 *                               base image, as a path relative to the layer
 * stages/st-<hex>/meta.json     {id,name,label,parent,depth,base,size,seal,...}
 * stages/.tmp-*                 a commit or flatten in progress (or killed):
 *                               never listed, reclaimed by isopod-gc
 */
#ifndef ISOPOD_STAGE_H
#define ISOPOD_STAGE_H

#include <jansson.h>
#include <stddef.h>
#include <sys/stat.h>

#define STAGE_MAX_DEPTH_DEFAULT 16

/* The depth cap: $ISOPOD_MAX_DEPTH (1..64) or the default. */
int stage_max_depth(void);

/* Label syntax: 1..128 bytes, no '/', newline or NUL, not starting with '-'
 * or '.'.  NULL when valid, else the reason. */
const char *label_invalid(const char *label);

/* Is label a reserved name: a base flavor, built in (lib/image.h
 * image_flavors) or registered in the store (images/current-<label>)?  A
 * stage labelled so would take over `--stage FLAVOR`.  NULL when free, else
 * the reason. */
const char *label_reserved(const char *label);

/* Resolve REF (full id, unique id prefix, vanity name, label) to a stage
 * id.  Returns 1 and fills id; 0 when nothing matches; -1 with the reason
 * in why and errno EINVAL when REF has not a label's syntax, ENOTUNIQ
 * (listing the candidates) when ambiguous: exit_code_of(errno) is the
 * caller's exit status. */
int stage_find(const char *ref, char *id, size_t idsz, char *why, size_t wsz);
/* stage_find, nothing matching being -1 too (errno ENOENT, why naming REF).
 * 0 and id filled, or -1. */
int stage_resolve(const char *ref, char *id, size_t idsz, char *why, size_t wsz);

/* Load stages/<id>/meta.json (NULL with errno). */
json_t *stage_meta(const char *id);
/* The ids of the stages whose chain stands on base image sha (their
 * meta.json's base.sha256), sorted: what pins a base.  New reference, NULL
 * when out of memory. */
json_t *stages_on_base(const char *sha);
/* Is `label` used by any stage?  Fills the holder's id. */
int label_taken(const char *label, char *holder, size_t hsz);

/* Check that a stage's whole chain is usable before anything boots on it:
 * every layer present and matching its seal, a qcow2 that `qemu-img check`
 * accepts, and the base image present.  0, or -1 with why naming the broken
 * stage and file (the caller's exit status: EX_SYS). */
int stage_verify_chain(const char *id, char *why, size_t wsz);

/* Layer seals.  meta.json "seal" records what fstat(2) said of layer.qcow2
 * once its writer (isopod-commit, flatten) had made it read-only, and the
 * sha256 of its bytes once a detached background process has hashed them:
 *   {"bytes","ino","ctime_s","ctime_ns","mtime_s","mtime_ns","sealed",
 *    "hash":"pending|done|changed|failed","sha256":hex|null,"hashed",
 *    "hash_error"}
 * Every write, truncation or replacement of the file moves its ctime, which
 * no user can set back (chmod and chown move it too), so a stat check is an
 * O(1) proof that the bytes are still the ones hashed; `isopod-stage verify`
 * re-hashes.  A seal is not a signature: whoever can rewrite meta.json can
 * rewrite the seal (see isopod-stage(1)). */

/* A new seal of a file with this stat: hash pending.  New reference. */
json_t *seal_new(const struct stat *st);
/* Does st match the seal's stat part?  1 yes; 0 no, with what differs in
 * why. */
int seal_matches(json_t *seal, const struct stat *st, char *why, size_t wsz);
/* Check the layer of stage `id` (meta given) against its seal; fd is the
 * open layer.  0, or -1 with a message naming the stage and layer in msg. */
int layer_sealed(const char *id, json_t *meta, int fd, const char *path, char *msg,
		 size_t msz);
/* layer_sealed for every layer of id's chain (stat only, O(depth)).  0, or
 * -1 with the message. */
int stage_chain_sealed(const char *id, char *msg, size_t msz);
/* Hash the bytes on fd (from offset 0) and fstat it before and after.  0
 * and sha + *after; 1 when the file changed while being read; -1 errno. */
int layer_hash(int fd, char sha[65], struct stat *after);
/* Replace stages/<id>/meta.json's seal with `seal` under the store lock,
 * when the seal there is still json_equal to `expect` (NULL: any, even
 * none).  1 written; 0 the stage is gone or its seal moved on; -1 errno. */
int seal_store(const char *id, json_t *expect, json_t *seal);
/* Hash stages/<id>/layer.qcow2 in a detached process (double fork: no
 * zombie, it outlives the caller; stdio /dev/null, no other fd) and record
 * the outcome in the seal: the sha256, or "changed" when the file no longer
 * matches the seal (those bytes are never sealed).  0, or -1 (errno) when
 * it could not be started. */
int stage_seal_spawn(const char *id);

/* Base image paths: images/base-<sha>.img for a flavor's current build. */
int base_current(const char *flavor, char *sha, size_t shasz);

#endif
