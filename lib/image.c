/* image.c - the kernel and base image a VM boots (see image.h). */
#include "image.h"
#include "frame.h"
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const image_flavors[] = { "base", "debian", NULL };

int read_pointer(const char *path, char *out, size_t sz)
{
	char buf[256];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	if (strlen(buf) >= sz) {
		errno = EINVAL;
		return -1;
	}
	memcpy(out, buf, strlen(buf) + 1);
	return 0;
}

int read_sha(const char *path, char out[65])
{
	char buf[80];

	if (read_pointer(path, buf, sizeof buf) < 0)
		return -1;
	if (!hex64_ok(buf)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(out, buf, 65);
	return 0;
}

/* Refused here, before QEMU starts, rather than as a failed handshake
 * after a whole boot.  A record without the stamp is one from before it:
 * nothing says what its agent speaks, so it is refused too.  Not found
 * (101), as a missing kernel is: the kernel these tools can boot is not
 * in the store, and the fix is the same. */
int kernel_agent_ok(const struct img *im, char *err, size_t errsz)
{
	char p[PATH_MAX];
	json_t *meta, *v;
	json_int_t got;

	if (pathn(p, sizeof p, "%s/kernels/%s/meta.json", store_home(), im->ksha) < 0) {
		snprintf(err, errsz, "store path %.512s is too long", store_home());
		return EX_USAGE;
	}
	meta = json_load_path(p);
	v = json_object_get(meta, "agent_protocol");
	if (!json_is_integer(v)) {
		json_decref(meta);
		snprintf(err, errsz,
			 "kernel %.12s's record (%.512s) states no agent protocol version (these tools "
			 "speak %u): run `make images` (or images/register) again to stamp it",
			 im->ksha, p, ISOPOD_PROTO_VERSION);
		return EX_NOTFOUND;
	}
	got = json_integer_value(v);
	json_decref(meta);
	if (got != (json_int_t)ISOPOD_PROTO_VERSION) {
		snprintf(err, errsz,
			 "kernel %.12s's agent speaks protocol %lld, these tools speak %u: run `make "
			 "images` to build and register the agent of this tree",
			 im->ksha, (long long)got, ISOPOD_PROTO_VERSION);
		return EX_NOTFOUND;
	}
	return 0;
}

int kernel_lapic_khz(const struct img *im)
{
	char p[PATH_MAX];
	json_t *meta;
	int r;

	if (pathn(p, sizeof p, "%s/kernels/%s/meta.json", store_home(), im->ksha) < 0)
		return 0;
	meta = json_load_path(p);
	r = json_is_string(json_object_get(
		json_object_get(json_object_get(meta, "inputs"), "patches_sha256"),
		"kernel-lapic-timer-khz.patch"));
	json_decref(meta);
	return r;
}

int resolve_kernel(struct img *im, char *err, size_t errsz)
{
	const char *h = store_home();
	char p[PATH_MAX];

	if (pathn(p, sizeof p, "%s/kernels/current", h) < 0) {
		snprintf(err, errsz, "store path %.512s is too long", h);
		return EX_USAGE;
	}
	if (read_sha(p, im->ksha) < 0) {
		if (errno == ENOENT) {
			snprintf(err, errsz, "no kernel registered in %.512s; run `make images`", h);
			return EX_NOTFOUND;
		}
		snprintf(err, errsz, "unable to read %.512s: %s", p, strerror(errno));
		return EX_SYS;
	}
	if (pathn(im->vmlinux, sizeof im->vmlinux, "%s/kernels/%s/vmlinux", h, im->ksha) < 0 ||
	    pathn(im->initrd, sizeof im->initrd, "%s/kernels/%s/initramfs.cpio", h, im->ksha) < 0) {
		snprintf(err, errsz, "store path %.512s is too long", h);
		return EX_USAGE;
	}
	if (access(im->vmlinux, R_OK) < 0 || access(im->initrd, R_OK) < 0) {
		snprintf(err, errsz, "kernel %.12s is registered but %.512s is missing; run `make images`",
			 im->ksha, access(im->vmlinux, R_OK) < 0 ? im->vmlinux : im->initrd);
		return EX_NOTFOUND;
	}
	return 0;
}

int resolve_base(struct img *im, const char *flavor, const char *sha, char *err, size_t errsz)
{
	const char *h = store_home();
	char p[PATH_MAX];
	struct stat st;

	if (strlen(flavor) >= sizeof im->flavor || !*flavor || strchr(flavor, '/')) {
		snprintf(err, errsz, "bad base flavor in the record: %.64s", flavor);
		return EX_USAGE;
	}
	snprintf(im->flavor, sizeof im->flavor, "%s", flavor);
	if (sha) {
		if (!hex64_ok(sha)) {
			snprintf(err, errsz, "bad base sha256 in the record: %s", EXC(sha));
			return EX_USAGE;
		}
		memcpy(im->bsha, sha, 65);
	} else {
		if (pathn(p, sizeof p, "%s/images/current-%s", h, flavor) < 0) {
			snprintf(err, errsz, "store path %.512s is too long", h);
			return EX_USAGE;
		}
		if (read_sha(p, im->bsha) < 0) {
			if (errno == ENOENT) {
				snprintf(err, errsz, "no %s image registered in %.512s; run `make images`",
					 flavor, h);
				return EX_NOTFOUND;
			}
			snprintf(err, errsz, "unable to read %.512s: %s", p, strerror(errno));
			return EX_SYS;
		}
	}
	if (pathn(im->base, sizeof im->base, "%s/images/base-%s.img", h, im->bsha) < 0) {
		snprintf(err, errsz, "store path %.512s is too long", h);
		return EX_USAGE;
	}
	if (stat(im->base, &st) < 0) {
		if (errno == ENOENT) {
			snprintf(err, errsz, "base image %.512s is missing; run `make images`", im->base);
			return EX_NOTFOUND;
		}
		snprintf(err, errsz, "unable to stat %.512s: %s", im->base, strerror(errno));
		return EX_SYS;
	}
	im->base_size = (long long)st.st_size;
	return 0;
}

long long qcow2_size(const char *path)
{
	unsigned char hd[QCOW2_HDR_MAX];
	struct qcow2_hdr q;
	char why[160];
	/* a FIFO would hang us, a device be opened (as in disk_chain) */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY), r = -1;
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	/* boot's root `qemu-img resize` follows on this size: the header
	 * first, the size from the very bytes checked (a jailed QEMU may
	 * still be writing the file) */
	n = pread(fd, hd, sizeof hd, 0);
	if (n >= 0)
		r = qcow2_header_check(fd, hd, (size_t)n, &q, why, sizeof why);
	close(fd);
	if (r < 0 || q.size > LLONG_MAX) {
		errno = EINVAL;
		return -1;
	}
	return (long long)q.size;
}

static unsigned long long be(const unsigned char *p, int n)
{
	unsigned long long v = 0;

	while (n-- > 0)
		v = v << 8 | *p++;
	return v;
}

int qcow2_hdr_read(const unsigned char *buf, size_t n, struct qcow2_hdr *h)
{
	if (n < 72 || memcmp(buf, "QFI\xfb", 4))
		return -1;
	*h = (struct qcow2_hdr){
		.version = (unsigned)be(buf + 4, 4),
		.backing_off = be(buf + 8, 8),
		.backing_len = (unsigned)be(buf + 16, 4),
		.cluster_bits = (unsigned)be(buf + 20, 4),
		.size = be(buf + 24, 8),
		.crypt = (unsigned)be(buf + 32, 4),
		.l1_size = (unsigned)be(buf + 36, 4),
		.l1_off = be(buf + 40, 8),
		.snapshots = (unsigned)be(buf + 60, 4),
		.header_len = 72,
	};
	/* a later version keeps v3's fields (its callers refuse it anyway) */
	if (h->version >= 3) {
		h->incompatible = n >= QCOW2_HDR_MAX ? be(buf + 72, 8) : 0;
		h->header_len = n >= QCOW2_HDR_MAX ? (unsigned)be(buf + 100, 4) : 0;
	}
	return 0;
}

void qcow2_ext_read(const unsigned char p[8], unsigned *type, unsigned *len)
{
	*type = (unsigned)be(p, 4);
	*len = (unsigned)be(p + 4, 4);
}

int qcow2_header_ok(int fd, char *why, size_t wsz)
{
	unsigned char hd[QCOW2_HDR_MAX];
	struct qcow2_hdr q;
	ssize_t n = pread(fd, hd, sizeof hd, 0);

	if (n < 0) {
		snprintf(why, wsz, "not a qcow2 image");
		return -1;
	}
	return qcow2_header_check(fd, hd, (size_t)n, &q, why, wsz);
}

int qcow2_header_check(int fd, const unsigned char *hd, size_t n, struct qcow2_hdr *h, char *why,
		       size_t wsz)
{
	unsigned char ext[8];
	unsigned long long off, end;
	struct qcow2_hdr q;
	unsigned i;

	if (qcow2_hdr_read(hd, n, &q) < 0) {
		snprintf(why, wsz, "not a qcow2 image");
		return -1;
	}
	*h = q;
	if ((q.version != 2 && q.version != 3) || q.cluster_bits < 9 || q.cluster_bits > 21) {
		snprintf(why, wsz, "qcow2 version %u, cluster bits %u: not one qemu-img makes",
			 q.version, q.cluster_bits);
		return -1;
	}
	/* Only dirty (bit 0) and the compression type (bit 3): the corrupt
	 * bit (1) and the external data file (2) are a guest's doing. */
	if (q.incompatible & ~(1ULL | 8ULL)) {
		snprintf(why, wsz, "qcow2 incompatible features %#llx (%s)", q.incompatible,
			 q.incompatible & 4 ? "an external data file" : "not dirty or compression type");
		return -1;
	}
	if (q.version == 3 && (q.header_len < 104 || q.header_len % 8)) {
		snprintf(why, wsz, "qcow2 header length %u", q.header_len);
		return -1;
	}
	/* The header extensions, where QEMU reads them: up to the backing
	 * file's name, else the first cluster.  The data-file extension names
	 * a host path QEMU would open, whatever the feature bit says. */
	end = q.backing_off ? q.backing_off : 1ULL << q.cluster_bits;
	for (off = q.header_len, i = 0; off + sizeof ext <= end && i < 1024; i++) {
		unsigned type, len;

		if (pread(fd, ext, sizeof ext, (off_t)off) != (ssize_t)sizeof ext) {
			snprintf(why, wsz, "qcow2 header extension at %llu: unreadable", off);
			return -1;
		}
		qcow2_ext_read(ext, &type, &len);
		if (!type)
			return 0;
		if (type == QCOW2_EXT_DATA_FILE) {
			snprintf(why, wsz, "qcow2 external data file extension");
			return -1;
		}
		off += sizeof ext + ((len + 7ULL) & ~7ULL);
	}
	/* QEMU reads on to the area's end: past the cap a data-file
	 * extension would go unseen, so the cap is a refusal, not a pass. */
	if (off + sizeof ext <= end) {
		snprintf(why, wsz, "qcow2: too many header extensions");
		return -1;
	}
	return 0; /* QEMU stops where the area ends too */
}

/* A backing name a header gave, before it is opened: the store's own
 * form (<store>/stages/st-ID/layer.qcow2 or <store>/images/base-SHA.img),
 * its directory resolving (".." and linked directories applied) to that
 * directory of the store.  A guest's QEMU wrote the header. */
static int backing_in_store(const char *path)
{
	char dir[PATH_MAX], want[PATH_MAX], rd[PATH_MAX], rw[PATH_MAX];
	const char *b = strrchr(path, '/'), *id;

	if (!b || b == path || (size_t)(b - path) >= sizeof dir)
		return -1;
	memcpy(dir, path, (size_t)(b - path));
	dir[b - path] = 0;
	b++;
	id = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	if (!strcmp(b, "layer.qcow2")) {
		if (strncmp(id, "st-", 3) ||
		    pathn(want, sizeof want, "%s/stages/%s", store_home(), id) < 0)
			return -1;
	} else if (!strncmp(b, "base-", 5) && strlen(b) == 5 + 64 + 4 && !strcmp(b + 69, ".img")) {
		if (pathn(want, sizeof want, "%s/images", store_home()) < 0)
			return -1;
	} else {
		return -1;
	}
	if (!realpath(dir, rd) || !realpath(want, rw) || strcmp(rd, rw)) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

int disk_chain(const char *disk, json_t *layers, char bsha[65])
{
	char cur[PATH_MAX], name[PATH_MAX], nxt[PATH_MAX];
	unsigned char hd[QCOW2_HDR_MAX];
	int depth;

	if (pathn(cur, sizeof cur, "%s", disk) < 0)
		return -1;
	for (depth = 0; depth < 80; depth++) {
		const char *b = strrchr(cur, '/') ? strrchr(cur, '/') + 1 : cur;
		struct qcow2_hdr q;
		ssize_t n;
		/* a FIFO would hang us, a device be opened, a link lead out */
		int fd = open(cur, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
		struct stat st;

		if (fd < 0)
			return -1;
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			errno = EINVAL;
			return -1;
		}
		n = pread(fd, hd, sizeof hd, 0);
		if (n < 20 || memcmp(hd, "QFI\xfb", 4)) {
			/* raw: the base image */
			close(fd);
			if (depth == 0 || strncmp(b, "base-", 5) || strlen(b) != 5 + 64 + 4 ||
			    strcmp(b + 69, ".img"))
				return -1;
			memcpy(bsha, b + 5, 64);
			bsha[64] = 0;
			return hex64_ok(bsha) ? 0 : -1;
		}
		/* the fields used below are those of the bytes checked */
		if (qcow2_header_check(fd, hd, (size_t)n, &q, name, sizeof name) < 0) {
			close(fd);
			errno = EINVAL;
			return -1;
		}
		if (depth > 0) {
			/* .../stages/<id>/layer.qcow2 */
			char d[PATH_MAX], *id;

			snprintf(d, sizeof d, "%s", cur); /* cur fits d: same size */
			if (strcmp(b, "layer.qcow2") || (b - cur) < 2) {
				close(fd);
				return -1;
			}
			d[b - cur - 1] = 0;
			id = strrchr(d, '/') ? strrchr(d, '/') + 1 : d;
			if (strncmp(id, "st-", 3)) {
				close(fd);
				return -1;
			}
			json_array_insert_new(layers, 0, json_string(id));
		}
		if (!q.backing_off || !q.backing_len || q.backing_len >= sizeof name ||
		    q.backing_off > LLONG_MAX ||
		    pread(fd, name, q.backing_len, (off_t)q.backing_off) != (ssize_t)q.backing_len) {
			close(fd);
			return -1;
		}
		close(fd);
		name[q.backing_len] = 0;
		if (name[0] == '/') {
			snprintf(nxt, sizeof nxt, "%s", name); /* len < sizeof name */
		} else {
			int dl = (int)(b - cur);

			if (pathn(nxt, sizeof nxt, "%.*s%s", dl, cur, name) < 0)
				return -1;
		}
		if (backing_in_store(nxt) < 0)
			return -1;
		memcpy(cur, nxt, sizeof cur);
	}
	return -1;
}
