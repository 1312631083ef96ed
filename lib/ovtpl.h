/* ovtpl.h - a VM's new empty overlay copied from a template in the store
 * rather than made by a qemu-img run (~85-130 ms of process start on every
 * cold boot on a loaded 2-core host; the copy is ~1 ms).
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
 * template write the same bytes, and a reader sees one or the other. */
#ifndef ISOPOD_OVTPL_H
#define ISOPOD_OVTPL_H

#include <stddef.h>

/* Make disk the empty qcow2 overlay over base (raw) of bytes: copied from
 * the template when one verifies, else by qemu-img (lib/qemu.c
 * qemu_img_overlay), and then the template saved for the next boot
 * (quietly skipped when it cannot be).  1: copied, 0: made by qemu-img,
 * -1 with err (qemu-img failed). */
int overlay_new(const char *base, const char *disk, long long bytes, char *err, size_t errsz);

/* The template's path for (base, bytes) (tpl, its digest's in sha when
 * sha is not NULL).  0, or -1 when base is not a store base image
 * (".../base-<64 hex>.img") or a path does not fit. */
int overlay_tpl_path(const char *base, long long bytes, char *tpl, size_t tsz, char *sha,
		     size_t ssz);

/* Do buf[0..n) hold an empty qcow2 overlay's header over base (raw) of
 * bytes?  1 or 0. */
int overlay_header_is(const unsigned char *buf, size_t n, const char *base, long long bytes);

#endif
