/* subjects.h - what an attestation is about (isopod-attest(1)): the live
 * host's enforcement and code, each subject {name, digest:{sha256},
 * annotations:{path}?}: ruleset/nftables (lib/ruleset.c's canonical text),
 * qemu, kernel/vmlinux, kernel/initramfs, image/<name>, bin/<tool>,
 * config/host and config/user.  Libraries return errors. */
#ifndef ISOPOD_SUBJECTS_H
#define ISOPOD_SUBJECTS_H

#include <jansson.h>
#include <stddef.h>

/* The live subjects in *list, and {subject, why} in *errors for each that
 * cannot be read now (the caller decides whether that is fatal).  cache
 * ({path: {dev, ino, size, mtime, ctime, sha256}}) spares re-reading a file
 * whose stat is the one recorded; it is brought up to date, and *dirty set
 * when it was.  It must be root's alone: a planted digest is believed.
 * 0, or -1 with why (out of memory, /proc/self/exe unreadable). */
int subjects_live(json_t *cache, int *dirty, json_t **list, json_t **errors, char *why,
		  size_t whysz);

#endif
