/* ovtpl.c - a VM's new empty overlay copied from a template (ovtpl.h). */

#include "ovtpl.h"

#include "image.h"
#include "proc.h"
#include "qemu.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An empty overlay is a few clusters (196648 bytes for a 2 GiB disk with
 * 64 KiB clusters); one of more than this is not one qemu-img made. */
#define TPL_MAX (4 << 20)

int overlay_header_is(const unsigned char *buf, size_t n, const char *base, const char *fmt,
		      long long bytes)
{
	unsigned long long off;
	size_t blen = strlen(base), flen = strlen(fmt);
	struct qcow2_hdr q;
	int fmt_ok = 0;

	if (n < QCOW2_HDR_MAX || qcow2_hdr_read(buf, n, &q) < 0 || q.version != 3 || bytes < 0 ||
	    q.size != (unsigned long long)bytes || q.crypt || q.snapshots ||
	    q.incompatible /* not even dirty */ || q.cluster_bits < 9 || q.cluster_bits > 21)
		return 0;
	if (q.backing_len != blen || q.backing_off > n || n - q.backing_off < q.backing_len ||
	    memcmp(buf + q.backing_off, base, blen) || q.header_len < 104 || q.header_len % 8 ||
	    q.header_len > q.backing_off)
		return 0;
	/* the extensions, between the header and the backing name: the
	 * format must be the backing file's (raw: no header of a base is
	 * ever parsed; qcow2: a stage's layer, parsed by a jailed QEMU) */
	for (off = q.header_len; off + 8 <= q.backing_off;) {
		unsigned type, len;

		qcow2_ext_read(buf + off, &type, &len);
		if (type == 0)
			break;
		/* never one qcow2_header_ok refuses (fuzz/qcow2_fuzz.c) */
		if (len > q.backing_off - off - 8 || type == QCOW2_EXT_DATA_FILE)
			return 0;
		if (type == QCOW2_EXT_BACKING_FMT)
			fmt_ok = len == flen && !memcmp(buf + off + 8, fmt, flen);
		off += 8 + ((len + 7ULL) & ~7ULL);
	}
	/* empty: an L1 table of zeros, wholly in the file */
	if (!fmt_ok || q.l1_off > n || (n - q.l1_off) / 8 < q.l1_size)
		return 0;
	for (unsigned long long i = 0; i < q.l1_size * 8ULL; i++)
		if (buf[q.l1_off + i])
			return 0;
	return 1;
}

/* A file's identity for the key: device, inode, size, mtime; from *at
 * when given (isopod-gc's own look at the store), else stat(path).  0 or
 * -1. */
static int ident(const char *path, const struct stat *at, char *out, size_t sz)
{
	struct stat st;

	if (at)
		st = *at;
	else if (stat(path, &st) < 0)
		return -1;
	snprintf(out, sz, "%llu:%llu:%lld:%lld.%09ld", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
		 st.st_mtim.tv_nsec);
	return 0;
}

/* The template's name prefix and the backing format of a backing file,
 * both from its place in the store: images/base-<sha>.img is a base (raw,
 * prefix <sha>), stages/<st-id>/layer.qcow2 a stage's top layer (qcow2,
 * prefix <st-id>).  The format never comes from the caller: a layer's
 * template always says qcow2, a base's raw.  0, or -1 for any other. */
static int backing_kind(const char *backing, char *pre, size_t psz, const char **fmt)
{
	const char *b = strrchr(backing, '/'), *d;

	if (!b || b == backing)
		return -1;
	b++;
	if (!strncmp(b, "base-", 5) && hex_span(b + 5) == 64 && !strcmp(b + 69, ".img")) {
		*fmt = "raw";
		return snprintf(pre, psz, "%.64s", b + 5) == 64 ? 0 : -1;
	}
	/* the layer's directory: "st-" and 12 hex digits */
	for (d = b - 1; d > backing && d[-1] != '/'; d--)
		;
	if (strcmp(b, "layer.qcow2") || b - 1 - d != 15 || strncmp(d, "st-", 3) ||
	    hex_span(d + 3) != 12)
		return -1;
	*fmt = "qcow2";
	return snprintf(pre, psz, "%.15s", d) == 15 ? 0 : -1;
}

/* overlay_tpl_path, with the backing format (static, never NULL on 0). */
static int tpl_path(const char *base, const struct stat *bst, long long bytes, char *tpl,
		    size_t tsz, char *sha, size_t ssz, const char **fmt)
{
	char img[PATH_MAX], bid[128], iid[128], key[65], pre[65];
	char *in = NULL;
	int n;

	if (backing_kind(base, pre, sizeof pre, fmt) < 0 ||
	    proc_path_find("qemu-img", img, sizeof img) < 0 || ident(base, bst, bid, sizeof bid) < 0 ||
	    ident(img, NULL, iid, sizeof iid) < 0)
		return -1;
	n = asprintf(&in, "isopod overlay template 1\n%s\n%s\n%lld\n%s\n%s\n%s\n", base, bid,
		     bytes, *fmt, img, iid);
	if (n < 0)
		return -1;
	sha256_hex(in, (size_t)n, key);
	free(in);
	if (pathn(tpl, tsz, "%s/overlays/%s-%.32s.qcow2", store_home(), pre, key) < 0 ||
	    (sha && pathn(sha, ssz, "%s/overlays/%s-%.32s.sha256", store_home(), pre, key) < 0))
		return -1;
	return 0;
}

int overlay_tpl_path(const char *base, long long bytes, char *tpl, size_t tsz, char *sha,
		     size_t ssz)
{
	const char *fmt;

	return tpl_path(base, NULL, bytes, tpl, tsz, sha, ssz, &fmt);
}

int overlay_tpl_stale(int dfd, const char *name)
{
	char base[PATH_MAX], cur[PATH_MAX], own[128], pre[65];
	unsigned char h[4096];
	struct stat bst;
	struct qcow2_hdr q;
	const char *fmt, *c;
	size_t pl = hex_span(name) == 64 ? 64 : 15;
	ssize_t got;
	int fd;

	if (pl == 15 && (strncmp(name, "st-", 3) || hex_span(name + 3) != 12))
		return 0;
	if (name[pl] != '-' || hex_span(name + pl + 1) != 32 ||
	    (strcmp(name + pl + 33, ".qcow2") && strcmp(name + pl + 33, ".sha256")))
		return 0;
	snprintf(own, sizeof own, "%.*s.qcow2", (int)pl + 33, name);
	/* The size and the backing path from the template's own header: the
	 * key is per size and per path as the boots named the base (their
	 * ISOPOD_HOME, not gc's /proc/self/fd/N/.), and only the template
	 * says which.  A digest whose template is gone, a template that is a
	 * symlink, has no qcow2 header or names another backing file than
	 * its name's, is nothing a boot or a fork would use. */
	fd = openat(dfd, own, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ELOOP;
	got = pread(fd, h, sizeof h, 0);
	close(fd);
	if (got < 0)
		return 0;
	/* the name wholly in the bytes read: a length past them would make
	 * got - length wrap, and the copy read beyond h */
	if (got < QCOW2_HDR_MAX || qcow2_hdr_read(h, (size_t)got, &q) < 0 || q.size > LLONG_MAX ||
	    q.backing_len == 0 || q.backing_len >= sizeof base || q.backing_len > (size_t)got ||
	    q.backing_off > (unsigned long long)got - q.backing_len)
		return 1;
	memcpy(base, h + q.backing_off, q.backing_len);
	base[q.backing_len] = 0;
	if (strlen(base) != q.backing_len || backing_kind(base, pre, sizeof pre, &fmt) < 0 ||
	    strncmp(pre, name, pl))
		return 1;
	/* The backing file's identity from the store gc holds (store_home:
	 * its pinned /proc/self/fd/N/.), its last component not followed: a
	 * symlink there is no file a boot names by this key for sure.  No
	 * current key to compare (that file gone, prune_overlays' other case;
	 * a symlink; no qemu-img on our PATH): kept. */
	if (pathn(cur, sizeof cur, pl == 64 ? "%s/images/base-%.64s.img" : "%s/stages/%.15s/layer.qcow2",
		  store_home(), name) < 0 || lstat(cur, &bst) < 0 || S_ISLNK(bst.st_mode))
		return 0;
	if (tpl_path(base, &bst, (long long)q.size, cur, sizeof cur, NULL, 0, &fmt) < 0)
		return 0;
	c = strrchr(cur, '/') + 1;
	return strcmp(c, own) != 0;
}

/* Read a small regular file whole (at most max bytes).  Its bytes
 * (malloc'd, *n long), or NULL. */
static unsigned char *slurp(const char *path, size_t max, size_t *n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	unsigned char *buf = NULL;
	struct stat st;
	size_t got = 0;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (unsigned long long)st.st_size > max || !(buf = malloc((size_t)st.st_size + 1)))
		goto out;
	while (got <= (size_t)st.st_size) { /* one byte more: a file that grew */
		ssize_t r = read(fd, buf + got, (size_t)st.st_size + 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got != (size_t)st.st_size) {
		free(buf);
		buf = NULL;
	}
	*n = got;
out:
	close(fd);
	return buf;
}

/* The template's bytes when they verify (its digest, its header), else
 * NULL. */
static unsigned char *tpl_load(const char *tpl, const char *shap, const char *base,
			       const char *fmt, long long bytes, size_t *n)
{
	char want[80], got[65];
	unsigned char *buf;
	size_t sn;
	char *s = (char *)slurp(shap, 79, &sn);

	if (!s)
		return NULL;
	memcpy(want, s, sn);
	free(s);
	want[sn] = 0;
	if (sn != 65 || want[64] != '\n' || (want[64] = 0, !hex64_ok(want)) ||
	    !(buf = slurp(tpl, TPL_MAX, n)))
		return NULL;
	sha256_hex(buf, *n, got);
	if (strcmp(got, want) || !overlay_header_is(buf, *n, base, fmt, bytes)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* disk, new, 0600, holding buf.  0, or -1 (nothing left).  Written under a
 * staging name and renamed: a fork or boot SIGKILLed meanwhile leaves no
 * short disk.qcow2 that a second fork would refuse ("already has a disk"),
 * and the stop signals are held (as atomic_write holds them) so that a
 * SIGTERM leaves no staging file either.  No fsync: a VM's disk does not
 * outlive a crash of its host. */
static int put(const char *disk, const unsigned char *buf, size_t n)
{
	char tmp[PATH_MAX];
	sigset_t old;
	int fd, e = 0;

	if (pathn(tmp, sizeof tmp, "%s.tmp.%ld", disk, (long)getpid()) < 0 ||
	    stop_signals_hold(&old) < 0)
		return -1;
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0) {
		e = errno;
	} else {
		if (write_all(fd, buf, n) < 0)
			e = errno;
		if (close(fd) < 0 && !e)
			e = errno;
		if (!e && rename(tmp, disk) < 0)
			e = errno;
		if (e)
			unlink(tmp);
	}
	stop_signals_release(&old);
	errno = e;
	return e ? -1 : 0;
}

int overlay_copy(const char *base, const char *disk, long long bytes)
{
	char tpl[PATH_MAX], shap[PATH_MAX];
	const char *fmt;
	unsigned char *buf;
	size_t n;
	int r;

	if (tpl_path(base, NULL, bytes, tpl, sizeof tpl, shap, sizeof shap, &fmt) < 0 ||
	    !(buf = tpl_load(tpl, shap, base, fmt, bytes, &n)))
		return 0;
	r = put(disk, buf, n);
	free(buf);
	return r == 0;
}

void overlay_keep(const char *base, const char *disk, long long bytes)
{
	char dir[PATH_MAX], tpl[PATH_MAX], shap[PATH_MAX], sha[66];
	const char *fmt;
	unsigned char *buf;
	size_t n;

	if (tpl_path(base, NULL, bytes, tpl, sizeof tpl, shap, sizeof shap, &fmt) < 0 ||
	    !(buf = slurp(disk, TPL_MAX, &n)))
		return;
	/* only what this code would accept: no template that is never used */
	if (overlay_header_is(buf, n, base, fmt, bytes) &&
	    pathn(dir, sizeof dir, "%s/overlays", store_home()) == 0 &&
	    (mkdir(dir, 0700) == 0 || errno == EEXIST) && atomic_write(tpl, buf, n, 0600) == 0) {
		sha256_hex(buf, n, sha);
		sha[64] = '\n';
		atomic_write(shap, sha, 65, 0600);
	}
	free(buf);
}

int overlay_new(const char *base, const char *disk, long long bytes, char *err, size_t errsz)
{
	char pre[PATH_MAX];
	const char *fmt;

	/* qemu_img_overlay runs qemu-img unjailed with -F raw: never over a
	 * stage's layer (a jailed QEMU wrote it: isopod-fork's jailed
	 * qemu-img makes those). */
	if (backing_kind(base, pre, sizeof pre, &fmt) == 0 && strcmp(fmt, "raw")) {
		snprintf(err, errsz, "%s is not a base image of the store", base);
		return -1;
	}
	if (overlay_copy(base, disk, bytes))
		return 1;
	if (qemu_img_overlay(base, disk, bytes, err, errsz) < 0)
		return -1;
	overlay_keep(base, disk, bytes);
	return 0;
}
