/* qcow2_fuzz.c - libFuzzer target for the qcow2 header readers
 * (lib/image.c qcow2_hdr_read, qcow2_ext_read, qcow2_header_ok;
 * lib/ovtpl.c overlay_header_is).  Every layer and overlay a boot, fork,
 * commit or gc reads was written by a guest's QEMU (jailed, but the
 * guest's): its header is untrusted bytes.  The input is the file: read
 * from memory; for qcow2_header_ok from a memfd holding it; for
 * overlay_tpl_stale (root's gc on a user's store) from a file under a
 * template's name in a store's overlays/ of our own.  What
 * must hold: a header is read iff there are 72 bytes and the magic; an
 * overlay_header_is yes is a header of the given size, backing name and
 * format wholly inside the input, and one qcow2_header_ok passes too; a
 * reason is always a C string.  abort() otherwise. */
#include "image.h"
#include "ovtpl.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The backing names overlay_header_is is asked about: a base's and a
 * stage layer's, as the store names them. */
static const char *const bases[] = {
	"/var/lib/isopod/images/base-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.img",
	"/var/lib/isopod/stages/st-0123456789ab/layer.qcow2",
};

/* The store stale_of writes in (tmpfs: a write per input), made once,
 * removed at exit; the template is unlinked after each input, so a crash
 * or a SIGINT (libFuzzer's _Exit: no atexit) leaves an empty directory at
 * most, never an input's bytes in /dev/shm. */
static char home[] = "/dev/shm/qcow2_fuzz.XXXXXX";
static const char name[] =
	"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef-0123456789abcdef0123456789abcdef.qcow2";

static void store_rm(void)
{
	char p[sizeof home + sizeof name + 16];

	snprintf(p, sizeof p, "%s/overlays/%s", home, name);
	unlink(p);
	snprintf(p, sizeof p, "%s/overlays", home);
	rmdir(p);
	rmdir(home);
}

/* The bytes as a base's template in that store: overlay_tpl_stale reads
 * its header for the backing name.  0 or 1. */
static void stale_of(const uint8_t *data, size_t size)
{
	static int dfd = -1;
	char d[sizeof home + 16];
	int fd, r;

	if (dfd < 0) {
		if (!mkdtemp(home) || atexit(store_rm) != 0 ||
		    snprintf(d, sizeof d, "%s/overlays", home) < 0 || mkdir(d, 0700) < 0 ||
		    (dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
		    setenv("ISOPOD_HOME", home, 1) < 0)
			abort();
	}
	fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	close(fd);
	r = overlay_tpl_stale(dfd, name);
	if (unlinkat(dfd, name, 0) < 0 || (r != 0 && r != 1))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int fd = -1;
	struct qcow2_hdr q;
	char why[256];
	int have, is, ok;
	size_t k;

	have = qcow2_hdr_read(data, size, &q) == 0;
	if (have != (size >= 72 && !memcmp(data, "QFI\xfb", 4)))
		abort();
	if (have && q.version < 3 && (q.incompatible || q.header_len != 72))
		abort();
	if (size >= 8) {
		unsigned type, len;

		qcow2_ext_read(data + size - 8, &type, &len);
	}
	if (fd < 0 && (fd = memfd_create("qcow2_fuzz", MFD_CLOEXEC)) < 0)
		abort();
	stale_of(data, size);
	if (ftruncate(fd, 0) < 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	why[0] = 0;
	ok = qcow2_header_ok(fd, why, sizeof why) == 0;
	if (!memchr(why, 0, sizeof why) || (!ok && !why[0]))
		abort();
	if (ok && !have)
		abort();
	for (k = 0; k < sizeof bases / sizeof *bases; k++) {
		const char *fmt = k ? "qcow2" : "raw";

		is = overlay_header_is(data, size, bases[k], fmt, have ? (long long)(q.size & 0x7fffffffffffffffULL) : 0);
		if (!is)
			continue;
		if (!have || q.version != 3 || q.size > (unsigned long long)INT64_MAX ||
		    q.backing_len != strlen(bases[k]) || q.backing_off > size ||
		    size - q.backing_off < q.backing_len ||
		    memcmp(data + q.backing_off, bases[k], q.backing_len) || !ok)
			abort();
	}
	return 0;
}
