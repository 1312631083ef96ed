/* image.h - the kernel and base image a VM boots, resolved in the store.
 *
 * kernels/current names the kernel (kernels/<ksha>/{vmlinux,
 * initramfs.cpio}); images/current-<flavor> the current base of a flavor
 * (images/base-<sha>.img).  Errors come back as the exit class they are
 * (EX_NOTFOUND: not registered, run `make images`; EX_USAGE: a bad record;
 * EX_SYS) with a message; the tool decides what to do with them. */
#ifndef ISOPOD_IMAGE_H
#define ISOPOD_IMAGE_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

struct img {
	char ksha[65], vmlinux[PATH_MAX], initrd[PATH_MAX];
	char flavor[64], bsha[65], base[PATH_MAX];
	long long base_size;
};

/* The flavors images/build-base knows (isopod image build FLAVOR), NULL
 * ended.  Their names are reserved: no stage may take one as its label. */
extern const char *const image_flavors[];

/* The first line of a small pointer file (kernels/current,
 * images/current-<flavor>) without its newline, as it is: 0, or -1 (errno;
 * EINVAL when it does not fit out). */
int read_pointer(const char *path, char *out, size_t sz);
/* Read "<64 hex>\n" from a pointer file.  0, or -1 (errno; EINVAL if bad). */
int read_sha(const char *path, char out[65]);
/* kernels/current.  0, or an exit class with err. */
int resolve_kernel(struct img *im, char *err, size_t errsz);
/* The agent in the resolved kernel's initramfs speaks these tools'
 * protocol: its record's agent_protocol (kernels/<ksha>/meta.json, stamped
 * by images/register) is ISOPOD_PROTO_VERSION (lib/frame.h).  What boots
 * checks it (isopod-boot, the doctor); the files alone (attest) need not.
 * 0, or an exit class with err (EX_NOTFOUND naming both versions and the
 * fix, `make images`, when another version or none is recorded). */
int kernel_agent_ok(const struct img *im, char *err, size_t errsz);
/* The patch a kernel carries for its local APIC timer's rate (the boot
 * parameter lapic_timer_khz=, images/kernel-lapic-timer-khz.patch): 1 when
 * the resolved kernel's record (kernels/<ksha>/meta.json) lists it among
 * the inputs images/build-kernel recorded (inputs.patches_sha256), 0 when
 * not (a kernel built before the patch, or a record without inputs).  An
 * unpatched kernel ignores the word (it lands in PID 1's environment) and
 * calibrates its timer at every boot: its line says noapictimer
 * (lib/qemu.h qemu_cfg.lapic_khz). */
int kernel_lapic_khz(const struct img *im);
/* The base image: the one a fork recorded (sha given), else the current
 * build of the flavor.  0, or an exit class with err. */
int resolve_base(struct img *im, const char *flavor, const char *sha, char *err, size_t errsz);
/* A qcow2 header's fields (qcow2 spec, big-endian on disk), as
 * qcow2_hdr_read found them; every field a number, nothing checked.  The
 * version 3 fields (incompatible, header_len) are read for any version 3
 * or later (a later one's, whatever they mean there, for its caller to
 * refuse); 0 in such a header cut before byte 104, and 0 and 72 in a
 * version 2 (or older) one. */
struct qcow2_hdr {
	unsigned version, cluster_bits, backing_len, crypt, l1_size, snapshots, header_len;
	unsigned long long backing_off, size, l1_off, incompatible;
};
#define QCOW2_HDR_MAX 104 /* the bytes qcow2_hdr_read reads: a version 3 header */
/* The header at buf[0..n): 0, or -1 when buf has no qcow2 magic or
 * fewer than the 72 bytes of a version 2 header.  buf is a guest's: its
 * QEMU wrote every layer and template (fuzz/qcow2_fuzz.c). */
int qcow2_hdr_read(const unsigned char *buf, size_t n, struct qcow2_hdr *h);
/* Header extension types (qcow2 spec): the backing file's format; the
 * external data file's name (a host path QEMU would open). */
#define QCOW2_EXT_BACKING_FMT 0xe2792acaU
#define QCOW2_EXT_DATA_FILE 0x44415441U
/* A header extension's type and length from its first 8 bytes. */
void qcow2_ext_read(const unsigned char p[8], unsigned *type, unsigned *len);
/* Virtual size of a qcow2 image from its header; -1 (errno) when it is not
 * a regular file (a FIFO is not waited on, a tty not made ours), not a
 * qcow2 image, or fails qcow2_header_ok. */
long long qcow2_size(const char *path);
/* A qcow2 header no root qemu-img may be trusted to open unless it holds:
 * version 2 or 3, no incompatible feature but dirty and compression type,
 * no external data file extension (a host path QEMU would open), and
 * the extensions' end reached within 1024 of them (QEMU reads on).  The
 * guest's QEMU writes its disk: commit, fork, boot and stage check every
 * layer with this before a root qemu-img reads it.  0, or -1 with why. */
int qcow2_header_ok(int fd, char *why, size_t wsz);
/* The same check of a header already read, hd[0..n) from fd's offset 0
 * (fd for its extensions), its fields into *h (set when hd holds a header
 * at all): a caller that uses a field checks the bytes it took it from,
 * not a second read a QEMU still writing the file could change between. */
int qcow2_header_check(int fd, const unsigned char *hd, size_t n, struct qcow2_hdr *h, char *why,
		       size_t wsz);
/* The backing chain of a qcow2 disk from the images' headers: the stage
 * ids root first (appended to layers) and the sha256 of the raw base
 * image at its end.  0, or -1 when it is not a chain of stage layers
 * (or a layer's header fails qcow2_header_ok) over a store base image:
 * each backing name must be of the store's form and resolve into its
 * stages/ or images/ (store_home()) before it is opened, and be a
 * regular file reached without a symlink. */
int disk_chain(const char *disk, json_t *layers, char bsha[65]);

#endif
