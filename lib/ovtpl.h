/* ovtpl.h - a VM's new empty overlay copied from a template in the store
 * rather than made by a qemu-img run (~85-130 ms of process start on every
 * cold boot on a loaded 2-core host; the copy is ~1 ms).  The backing file
 * is a base (isopod-boot's cold boot, raw) or a stage's top layer
 * (isopod-fork, qcow2, stages/<st-id>/layer.qcow2, whose template is
 * overlays/<st-id>-<key>.qcow2 and made from the jailed qemu-img's disk).
 *
 * <store>/overlays/<bsha>-<key>.qcow2 is the overlay `qemu-img create -f
 * qcow2 -F raw -b BASE DISK BYTES` made once, <bsha>-<key>.sha256 its
 * digest.  key is the sha256 of the base's path and identity (device,
 * inode, size, mtime), the virtual size, the backing format and the
 * qemu-img binary's identity: a replaced base, another size or another
 * qemu-img makes another template.  The overlay's bytes depend on the
 * base's path, not its contents (the header names it, absolute), so every
 * VM of that base and size gets the same bytes qemu-img would have made.
 * A template is used only when its bytes hash to its digest and its header
 * names this base, this size and raw; else qemu-img makes the disk, and the
 * template again from it.  Both files are written whole and renamed into
 * place (util.c atomic_write): concurrent boots that make the same
 * template write the same bytes, and a reader sees one or the other.
 * "base" below is either backing file; its format follows from its place
 * in the store, never from the caller. */
#ifndef ISOPOD_OVTPL_H
#define ISOPOD_OVTPL_H

#include <stddef.h>

/* Make disk the empty qcow2 overlay over base (raw) of bytes: copied from
 * the template when one verifies, else by qemu-img (lib/qemu.c
 * qemu_img_overlay), and then the template saved for the next boot
 * (quietly skipped when it cannot be).  1: copied, 0: made by qemu-img,
 * -1 with err (qemu-img failed). */
int overlay_new(const char *base, const char *disk, long long bytes, char *err, size_t errsz);

/* disk, new (0600), the template's copy for (base, bytes) when one
 * verifies (digest, header: this backing path and format, this size,
 * empty).  1: copied; 0: none (no template, refused, or not written). */
int overlay_copy(const char *base, const char *disk, long long bytes);

/* The overlay disk that qemu-img just made over base as the template of
 * (base, bytes), when its header passes overlay_header_is.  Quiet: without
 * it the next disk is qemu-img's again. */
void overlay_keep(const char *base, const char *disk, long long bytes);

/* The template's path for (base, bytes) (tpl, its digest's in sha when
 * sha is not NULL).  0, or -1 when base is neither a store base image
 * (".../base-<64 hex>.img") nor a stage's layer
 * (".../st-<12 hex>/layer.qcow2") or a path does not fit. */
int overlay_tpl_path(const char *base, long long bytes, char *tpl, size_t tsz, char *sha,
		     size_t ssz);

/* Is <name> in dfd (the store's overlays/, open: never reached through a
 * link), a template or its digest, one that no boot or fork would use
 * now?  Stale: its key is not the current key for the backing path and the
 * size its header records (made under another qemu-img, over a base or
 * layer since replaced); or a digest without its template; or a template
 * that is a symlink, has no qcow2 header or names another backing file
 * than its name's.  1 or 0 (not a template's name; no current key to
 * compare: its backing file gone, or a symlink in the store, whose entry
 * is lstat'ed for the key's identity, or no qemu-img on PATH; unreadable).
 * A current template is never stale, and a boot racing gc writes only the
 * current key's names. */
int overlay_tpl_stale(int dfd, const char *name);

/* Do buf[0..n) hold an empty qcow2 overlay's header over base (its
 * format fmt) of bytes?  1 or 0; never 1 for one qcow2_header_ok (image.h)
 * refuses.  Read with image.h's qcow2_hdr_read. */
int overlay_header_is(const unsigned char *buf, size_t n, const char *base, const char *fmt,
		      long long bytes);

#endif
