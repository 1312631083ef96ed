/* image_test.c - qcow2_header_ok and disk_chain (lib/image.c): the header check every
 * layer passes before a root qemu-img opens it.  Images made by qemu-img
 * itself, then bytes set as a compromised QEMU would set them in its disk. */
#include <unistd.h>

/* image.c's reads go through test_pread: with flip set, the first read of
 * a header (offset 0) sees the external data file bit, as a QEMU still
 * writing the file could show it, and later ones see the file; preads
 * counts them all. */
static ssize_t test_pread(int fd, void *buf, size_t n, off_t off);
#define pread test_pread
#include "../../lib/image.c"
#undef pread

#include "tap.h"

#include <stdlib.h>
#include <sys/stat.h>

static char dir[] = "/tmp/isopod-image-test.XXXXXX";
static int flip;
static unsigned preads;

static ssize_t test_pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t r = pread(fd, buf, n, off);

	preads++;
	if (flip && off == 0 && r >= 80) {
		((unsigned char *)buf)[79] |= 4;
		flip = 0;
	}
	return r;
}

/* PATH made by `qemu-img create -f qcow2 OPTS` (OPTS may be ""). */
static int create(const char *path, const char *opts)
{
	char cmd[1024];

	snprintf(cmd, sizeof cmd, "qemu-img create -q -f qcow2 %s %s 1M >/dev/null", opts, path);
	return system(cmd) == 0 ? 0 : -1;
}

static void poke(const char *path, off_t off, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || pwrite(fd, b, n, off) != (ssize_t)n)
		printf("# poke %s failed\n", path);
	close(fd);
}

/* The check's verdict on path: 0, or -1 with why (printed). */
static int check(const char *path)
{
	char why[256] = "";
	int fd = open(path, O_RDONLY), r;

	r = qcow2_header_ok(fd, why, sizeof why);
	close(fd);
	if (r < 0)
		printf("# %s: %s\n", strrchr(path, '/') + 1, why);
	return r;
}

#define SHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* A qcow2 at PATH over BACKING (named, not opened: -u). */
static int over(const char *path, const char *fmt, const char *backing)
{
	char cmd[3 * PATH_MAX];

	snprintf(cmd, sizeof cmd, "qemu-img create -q -f qcow2 -u -F %s -b '%s' '%s' 1M >/dev/null",
		 fmt, backing, path);
	return system(cmd) == 0 ? 0 : -1;
}

/* disk_chain of a VM disk over BACKING: 0, or -1 (a FIFO's test runs it
 * under ok_bounded: a hang fails). */
static int chain_of(const char *backing, json_t *layers)
{
	char disk[PATH_MAX], b[65];

	snprintf(disk, sizeof disk, "%s/disk.qcow2", dir);
	unlink(disk);
	if (over(disk, "qcow2", backing) < 0)
		return -2;
	json_array_clear(layers);
	return disk_chain(disk, layers, b);
}

/* disk_chain follows the names a guest's QEMU may have written: only store
 * layers and a store base, each a regular file reached without a link. */
static void test_chain(void)
{
	char h[256], p[PATH_MAX], q[PATH_MAX];
	json_t *l = json_array();
	FILE *f;

	snprintf(h, sizeof h, "%s/store", dir);
	setenv("ISOPOD_HOME", h, 1);
	snprintf(p, sizeof p, "mkdir -p %s/images %s/stages/st-a %s/stages/st-fifo "
		 "%s/stages/st-link %s/st-out", h, h, h, h, dir);
	if (system(p) != 0)
		printf("# mkdir failed\n");
	snprintf(p, sizeof p, "%s/images/base-" SHA ".img", h);
	if ((f = fopen(p, "w"))) {
		fputs("raw base bytes, not a qcow2 header", f);
		fclose(f);
	}
	snprintf(p, sizeof p, "%s/stages/st-a/layer.qcow2", h);
	ok(over(p, "raw", "../../images/base-" SHA ".img") == 0, "a store layer over the base");
	ok(chain_of(p, l) == 0 && json_array_size(l) == 1 &&
	   !strcmp(json_string_value(json_array_get(l, 0)), "st-a"),
	   "the control: a disk over it is a chain [st-a]");
	snprintf(q, sizeof q, "%s/stages/st-fifo/layer.qcow2", h);
	ok_bounded(10, mkfifo(q, 0600) == 0 && chain_of(q, l) == -1, "a FIFO as a layer: refused, no hang");
	snprintf(q, sizeof q, "%s/stages/st-link/layer.qcow2", h);
	ok(symlink(p, q) == 0 && chain_of(q, l) == -1, "a symlink as a layer: refused");
	snprintf(q, sizeof q, "%s/st-out/layer.qcow2", dir);
	snprintf(p, sizeof p, "%s/images/base-" SHA ".img", h);
	ok(over(q, "raw", p) == 0 && chain_of(q, l) == -1,
	   "a layer outside the store (its name of the store's form, over the store's base): refused");
	snprintf(q, sizeof q, "%s/stages/st-a/../../../st-out/layer.qcow2", h);
	ok(chain_of(q, l) == -1, "and by .. from inside the store: refused");
	unsetenv("ISOPOD_HOME");
	json_decref(l);
}

/* qcow2_hdr_read, the one reader of a header's fields (image.c, ovtpl.c):
 * the fields of an image qemu-img made, at the offsets the spec gives;
 * a version 2 header's (no v3 fields); a header cut short or without the
 * magic refused, and a v3 one cut before its v3 fields read with them 0. */
static void test_hdr_read(void)
{
	char p[PATH_MAX], b[PATH_MAX], cmd[2 * PATH_MAX + 128];
	unsigned char hd[1024];
	struct qcow2_hdr q = { .version = 99 };
	unsigned type = 0, len = 0;
	ssize_t n = -1;
	int fd;

	snprintf(b, sizeof b, "%s/back.qcow2", dir);
	snprintf(p, sizeof p, "%s/over.qcow2", dir);
	snprintf(cmd, sizeof cmd, "qemu-img create -q -f qcow2 -u -F qcow2 -b '%s' '%s' 3M >/dev/null", b, p);
	if (system(cmd) == 0 && (fd = open(p, O_RDONLY)) >= 0) {
		n = pread(fd, hd, sizeof hd, 0);
		close(fd);
	}
	ok(n == (ssize_t)sizeof hd && qcow2_hdr_read(hd, (size_t)n, &q) == 0 && q.version == 3 &&
		   q.size == 3 << 20 && q.cluster_bits == 16 && q.backing_len == strlen(b) &&
		   q.backing_off + q.backing_len <= sizeof hd &&
		   !memcmp(hd + q.backing_off, b, strlen(b)) && q.header_len >= 104 &&
		   q.header_len % 8 == 0 && q.incompatible == 0 && q.crypt == 0 && q.snapshots == 0 &&
		   q.l1_size >= 1 && q.l1_off == 3 * 65536,
	   "qcow2_hdr_read: v3 over a backing file (size, cluster bits, backing name, header length, L1)");
	if (n == (ssize_t)sizeof hd)
		qcow2_ext_read(hd + q.header_len, &type, &len);
	ok(type == 0xe2792aca && len == 5 && !memcmp(hd + q.header_len + 8, "qcow2", 5),
	   "qcow2_ext_read: the first extension, the backing format (%#x, %u)", type, len);
	ok(qcow2_hdr_read(hd, 104, &q) == 0 && q.header_len >= 104 &&
		   qcow2_hdr_read(hd, 103, &q) == 0 && q.header_len == 0 && q.incompatible == 0 &&
		   q.size == 3 << 20,
	   "a v3 header cut before byte 104: its v3 fields 0 (a header length no check takes)");
	hd[7] = 4;
	hd[79] = 4;
	ok(qcow2_hdr_read(hd, 104, &q) == 0 && q.version == 4 && q.incompatible == 4 &&
		   q.header_len >= 104,
	   "version 4: v3's fields read, not left 0 and 72 (incompatible %#llx, length %u)",
	   q.incompatible, q.header_len);
	hd[7] = 3;
	hd[79] = 0;
	ok(qcow2_hdr_read(hd, 71, &q) < 0, "fewer than 72 bytes: no header");
	hd[3] = 0;
	ok(qcow2_hdr_read(hd, sizeof hd, &q) < 0, "no magic: no header");
	hd[3] = 0xfb;
	hd[7] = 2;
	hd[79] = 1;
	ok(qcow2_hdr_read(hd, sizeof hd, &q) == 0 && q.version == 2 && q.header_len == 72 &&
		   q.incompatible == 0,
	   "version 2: no v3 fields read (bytes 72.. are not a header's)");
	memset(hd + 8, 0xff, 8);
	memset(hd + 24, 0xff, 8);
	ok(qcow2_hdr_read(hd, sizeof hd, &q) == 0 && q.backing_off == ~0ULL && q.size == ~0ULL,
	   "an offset and a size of 2^64-1 read as numbers");
	/* the file's own size field past LLONG_MAX: no size (was negative) */
	poke(p, 24, hd + 24, 8);
	ok(check(p) == 0 && qcow2_size(p) == -1 && errno == EINVAL,
	   "qcow2_size: a size past LLONG_MAX is no size, not a negative one");
	unlink(p);
}

/* 1024 small extensions, then a data-file one QEMU would read (it reads
 * to the area's end): the check's cap is a refusal, never a pass. */
static void test_many_ext(void)
{
	unsigned char e[1025 * 8] = { 0 }, hd[QCOW2_HDR_MAX];
	struct qcow2_hdr q = { .header_len = 0 };
	char p[PATH_MAX];
	int fd, i;

	for (i = 0; i < 1024; i++)
		e[i * 8 + 3] = 1; /* type 1, length 0 */
	memcpy(e + 1024 * 8, "DATA", 4);
	snprintf(p, sizeof p, "%s/many.qcow2", dir);
	if (create(p, "") == 0 && (fd = open(p, O_RDONLY)) >= 0) {
		if (pread(fd, hd, sizeof hd, 0) != (ssize_t)sizeof hd || qcow2_hdr_read(hd, sizeof hd, &q) < 0)
			q.header_len = 0;
		close(fd);
	}
	ok(q.header_len >= 104, "an image with room for 1025 extensions in its first cluster");
	poke(p, q.header_len, e, sizeof e);
	ok(check(p) < 0, "a data-file extension after 1024 others: refused (too many)");
	memset(e + 1023 * 8, 0, 16);
	poke(p, q.header_len, e, sizeof e);
	ok(check(p) == 0, "the control: 1023 extensions and the end mark pass (the cap's 1024th)");
	unlink(p);
}

/* qcow2_size and disk_chain take their fields from the bytes the check
 * read: a first read showing the data-file bit and a second one clean
 * (the file written between) is a refusal, not a size or a chain. */
static void test_one_read(void)
{
	char p[PATH_MAX], h[256], b[65];
	json_t *l = json_array();
	int r;

	snprintf(p, sizeof p, "%s/flip.qcow2", dir);
	ok(create(p, "") == 0 && qcow2_size(p) == 1 << 20, "the control: a clean image's size");
	flip = 1;
	ok(qcow2_size(p) == -1, "qcow2_size: the size of the header read is the header checked");
	flip = 0;
	snprintf(h, sizeof h, "%s/store", dir);
	setenv("ISOPOD_HOME", h, 1);
	snprintf(p, sizeof p, "%s/stages/st-a/layer.qcow2", h);
	r = chain_of(p, l);
	ok(r == 0, "the control: the disk over st-a is a chain");
	snprintf(p, sizeof p, "%s/disk.qcow2", dir);
	flip = 1;
	ok(r == 0 && disk_chain(p, l, b) == -1,
	   "disk_chain: the backing name of the header read is the header checked");
	flip = 0;
	snprintf(p, sizeof p, "%s/fifo", dir);
	preads = 0;
	ok_bounded(10, mkfifo(p, 0600) == 0 && qcow2_size(p) == -1 && errno == EINVAL && preads == 0,
		   "qcow2_size of a FIFO: refused before any read, no hang");
	unsetenv("ISOPOD_HOME");
	json_decref(l);
}

/* kernel_lapic_khz: a kernel's record (kernels/<ksha>/meta.json under
 * ISOPOD_HOME=dir) holding meta, or no record when meta is NULL. */
static int lapic_of(const char *meta)
{
	char p[PATH_MAX];
	struct img im = { .ksha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" };
	FILE *f;

	setenv("ISOPOD_HOME", dir, 1);
	mkdir(dir, 0700);
	snprintf(p, sizeof p, "%s/kernels", dir);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/kernels/%s", dir, im.ksha);
	mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/kernels/%s/meta.json", dir, im.ksha);
	unlink(p);
	if (meta && (f = fopen(p, "w"))) {
		fputs(meta, f);
		fclose(f);
	}
	return kernel_lapic_khz(&im);
}

static void test_lapic(void)
{
	ok(lapic_of("{\"agent_protocol\": 3, \"inputs\": {\"key\": \"k\", \"patches_sha256\": "
		    "{\"kernel-lapic-timer-khz.patch\": \"ab\"}}}") == 1,
	   "a kernel whose record lists the patch takes lapic_timer_khz");
	ok(lapic_of("{\"agent_protocol\": 3, \"inputs\": {\"key\": \"k\", "
		    "\"build-kernel_sha256\": \"cd\"}}") == 0,
	   "a kernel built before the patch (no patches_sha256): noapictimer");
	ok(lapic_of("{\"agent_protocol\": 3, \"inputs\": {\"patches_sha256\": {}}}") == 0,
	   "a record with no patches: noapictimer");
	ok(lapic_of("{\"agent_protocol\": 3, \"inputs\": {}}") == 0,
	   "a record without inputs (register found none): noapictimer");
	ok(lapic_of(NULL) == 0, "no record: noapictimer");
	ok(lapic_of("not json") == 0, "a record that is not JSON: noapictimer");
}

int main(void)
{
	char p[PATH_MAX], d[PATH_MAX];
	static const unsigned char bit0[] = { 1 }, bit1[] = { 2 }, bit2[] = { 4 }, none[] = { 0 },
				   v4[] = { 4 };

	if (!mkdtemp(dir))
		return 1;
	snprintf(p, sizeof p, "%s/v3.qcow2", dir);
	ok(create(p, "") == 0 && check(p) == 0 && qcow2_size(p) == 1 << 20,
	   "a fresh qcow2 v3 passes (its size read)");
	/* incompatible_features: bytes 72..79, its low byte at 79 */
	poke(p, 79, bit0, 1);
	ok(check(p) == 0, "the dirty bit passes (a QEMU that was killed)");
	poke(p, 79, bit1, 1);
	ok(check(p) < 0, "the corrupt bit is refused");
	poke(p, 79, bit2, 1);
	ok(check(p) < 0, "the external data file bit is refused");
	poke(p, 79, none, 1);
	poke(p, 7, v4, 1);
	ok(check(p) < 0, "version 4 is refused");
	snprintf(p, sizeof p, "%s/v2.qcow2", dir);
	ok(create(p, "-o compat=0.10") == 0 && check(p) == 0, "a qcow2 v2 passes");
	snprintf(p, sizeof p, "%s/data.qcow2", dir);
	snprintf(d, sizeof d, "-o data_file=%s/host-file", dir);
	ok(create(p, d) == 0 && check(p) < 0, "qemu-img's own external data file is refused");
	ok(qcow2_size(p) == -1, "qcow2_size (boot's resize) refuses it too");
	poke(p, 79, none, 1);
	ok(check(p) < 0, "the data file extension without its bit is refused");
	snprintf(p, sizeof p, "%s/host-file", dir);
	ok(check(p) < 0, "a raw file is not a qcow2 image");
	test_many_ext();
	test_chain();
	test_one_read();
	test_hdr_read();
	test_lapic();
	snprintf(d, sizeof d, "rm -rf %s", dir);
	if (system(d) != 0)
		printf("# unable to remove %s\n", dir);
	return tap_done();
}
