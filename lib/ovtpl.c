/* ovtpl.c - a VM's new empty overlay copied from a template (ovtpl.h). */

#include "ovtpl.h"

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
/* The backing file format header extension (qcow2 spec) */
#define EXT_BACKING_FMT 0xe2792acaULL

static unsigned long long be(const unsigned char *p, int n)
{
	unsigned long long v = 0;

	while (n-- > 0)
		v = v << 8 | *p++;
	return v;
}

int overlay_header_is(const unsigned char *buf, size_t n, const char *base, const char *fmt,
		      long long bytes)
{
	unsigned long long boff, bsz, l1n, l1off, off, hlen;
	size_t blen = strlen(base), flen = strlen(fmt);
	int fmt_ok = 0;

	if (n < 104 || memcmp(buf, "QFI\xfb", 4) || be(buf + 4, 4) != 3 || bytes < 0 ||
	    be(buf + 24, 8) != (unsigned long long)bytes || be(buf + 32, 4) /* encrypted */ ||
	    be(buf + 60, 4) /* snapshots */ || be(buf + 72, 8) /* incompatible: not even dirty */)
		return 0;
	boff = be(buf + 8, 8);
	bsz = be(buf + 16, 4);
	hlen = be(buf + 100, 4);
	if (bsz != blen || boff > n || n - boff < bsz || memcmp(buf + boff, base, blen) ||
	    hlen < 104 || hlen % 8 || hlen > boff)
		return 0;
	/* the extensions, between the header and the backing name: the
	 * format must be the backing file's (raw: no header of a base is
	 * ever parsed; qcow2: a stage's layer, parsed by a jailed QEMU) */
	for (off = hlen; off + 8 <= boff;) {
		unsigned long long type = be(buf + off, 4), len = be(buf + off + 4, 4);

		if (type == 0)
			break;
		if (len > boff - off - 8)
			return 0;
		if (type == EXT_BACKING_FMT)
			fmt_ok = len == flen && !memcmp(buf + off + 8, fmt, flen);
		off += 8 + ((len + 7) & ~7ULL);
	}
	/* empty: an L1 table of zeros, wholly in the file */
	l1n = be(buf + 36, 4);
	l1off = be(buf + 40, 8);
	if (!fmt_ok || l1off > n || (n - l1off) / 8 < l1n)
		return 0;
	for (unsigned long long i = 0; i < l1n * 8; i++)
		if (buf[l1off + i])
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
	unsigned long long boff, bsz;
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
	boff = got >= 104 ? be(h + 8, 8) : 0;
	bsz = got >= 104 ? be(h + 16, 4) : 0;
	if (got < 104 || memcmp(h, "QFI\xfb", 4) || be(h + 24, 8) > LLONG_MAX || bsz == 0 ||
	    bsz >= sizeof base || boff > (unsigned long long)got - bsz)
		return 1;
	memcpy(base, h + boff, bsz);
	base[bsz] = 0;
	if (strlen(base) != bsz || backing_kind(base, pre, sizeof pre, &fmt) < 0 ||
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
	if (tpl_path(base, &bst, (long long)be(h + 24, 8), cur, sizeof cur, NULL, 0, &fmt) < 0)
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
