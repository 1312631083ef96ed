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
/* The base image: the one a fork recorded (sha given), else the current
 * build of the flavor.  0, or an exit class with err. */
int resolve_base(struct img *im, const char *flavor, const char *sha, char *err, size_t errsz);
/* Virtual size of a qcow2 image from its header; -1 (errno) when it is not
 * one or fails qcow2_header_ok. */
long long qcow2_size(const char *path);
/* A qcow2 header no root qemu-img may be trusted to open unless it holds:
 * version 2 or 3, no incompatible feature but dirty and compression type,
 * no external data file extension (a host path QEMU would open).  The
 * guest's QEMU writes its disk: commit, fork, boot and stage check every
 * layer with this before a root qemu-img reads it.  0, or -1 with why. */
int qcow2_header_ok(int fd, char *why, size_t wsz);
/* The backing chain of a qcow2 disk from the images' headers: the stage
 * ids root first (appended to layers) and the sha256 of the raw base
 * image at its end.  0, or -1 when it is not a chain of stage layers
 * (or a layer's header fails qcow2_header_ok) over a store base image:
 * each backing name must be of the store's form and resolve into its
 * stages/ or images/ (store_home()) before it is opened, and be a
 * regular file reached without a symlink. */
int disk_chain(const char *disk, json_t *layers, char bsha[65]);

#endif
