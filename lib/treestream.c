/* treestream.c - the tree stream's records (treestream.h).  No I/O. */
#include "treestream.h"
#include "frame.h"

#include <stdio.h>
#include <string.h>

enum { ST_TOP, ST_HDR, ST_SEG, ST_DATA, ST_END };

void ts_dec_init(struct ts_dec *d)
{
	memset(d, 0, sizeof *d);
	d->max_bytes = UINT64_MAX;
	d->max_entries = TS_ENTRIES_DEFAULT;
	d->st = ST_TOP;
}

int ts_dec_done(const struct ts_dec *d)
{
	return d->st == ST_END;
}

int ts_path_ok(const char *p, size_t len)
{
	size_t i, c = 0, n = 0; /* start of the current component, their count */

	if (len == 0 || len > TS_PATH_MAX || memchr(p, 0, len))
		return 0;
	for (i = 0; i <= len; i++) {
		if (i < len && p[i] != '/')
			continue;
		/* the component p[c..i): not empty (a leading, trailing or
		 * doubled '/'), not "." or "..", not over NAME_MAX, not
		 * past TS_DEPTH_MAX of them */
		if (i == c || i - c > TS_NAME_MAX || (i - c == 1 && p[c] == '.') ||
		    (i - c == 2 && p[c] == '.' && p[c + 1] == '.') || ++n > TS_DEPTH_MAX)
			return 0;
		c = i + 1;
	}
	return 1;
}

static int bad(struct ts_dec *d, const char *why)
{
	snprintf(d->why, sizeof d->why, "%s", why);
	return -1;
}

/* A u16-prefixed string at p (n bytes there) into dst: the bytes it took,
 * 0 when more are needed, -1 when too long. */
static long take_str(const uint8_t *p, size_t n, char *dst, size_t *slen)
{
	size_t l;

	if (n < 2)
		return 0;
	l = (size_t)p[0] | (size_t)p[1] << 8;
	if (l > TS_PATH_MAX)
		return -1;
	if (n < 2 + l)
		return 0;
	memcpy(dst, p + 2, l);
	dst[l] = 0;
	*slen = l;
	return (long)(2 + l);
}

static int entry(struct ts_dec *d, const uint8_t *buf, size_t n, struct ts_item *it,
		 size_t *used)
{
	const size_t fixed = 1 + 4 + 8 + 4;
	size_t off = fixed, plen, tlen;
	long k;

	if (n < 1)
		return 0;
	if (buf[0] == 'e' && d->st == ST_HDR) {
		it->type = TS_END;
		*used = 1;
		d->st = ST_END;
		return 1;
	}
	if (buf[0] != 'd' && buf[0] != 'f' && buf[0] != 'l' && buf[0] != 'n')
		return bad(d, "unknown record kind");
	if (n < fixed)
		return 0;
	if ((k = take_str(buf + off, n - off, it->path, &plen)) < 0)
		return bad(d, "path too long");
	if (k == 0)
		return 0;
	off += (size_t)k;
	it->kind = (char)buf[0];
	it->mode = get_le32(buf + 1) & 07777;
	it->mtime_sec = (int64_t)get_le64(buf + 5);
	it->mtime_nsec = get_le32(buf + 13);
	if (it->mtime_nsec > 999999999u)
		it->mtime_nsec = 0;
	it->size = 0;
	it->target[0] = 0;
	if (d->st == ST_TOP) {
		if (it->kind != 'd' || strcmp(it->path, ".") != 0)
			return bad(d, "the first record is not the top directory \".\"");
	} else if (!ts_path_ok(it->path, plen)) {
		return bad(d, "a path that is empty, absolute, has an empty, \".\" or \"..\" "
			      "component, a NUL, or a name over 255 bytes");
	}
	if (it->kind == 'f') {
		if (n < off + 8)
			return 0;
		it->size = get_le64(buf + off);
		off += 8;
		if (it->size > TS_FILE_SIZE_MAX)
			return bad(d, "a file larger than 1 TiB");
		if (it->size > d->max_bytes - d->sizes)
			return bad(d, "files larger in all (holes counted) than allowed");
		d->sizes += it->size;
	} else if (it->kind == 'l' || it->kind == 'n') {
		if ((k = take_str(buf + off, n - off, it->target, &tlen)) < 0)
			return bad(d, "symlink target too long");
		if (k == 0)
			return 0;
		if (memchr(it->target, 0, tlen) || (it->kind == 'l' && tlen == 0))
			return bad(d, "symlink target empty or with a NUL");
		off += (size_t)k;
	}
	if (++d->entries > d->max_entries)
		return bad(d, "more entries than allowed");
	it->type = TS_ENTRY;
	*used = off;
	if (it->kind == 'f') {
		d->size = it->size;
		d->next = 0;
		d->st = ST_SEG;
	} else {
		d->st = ST_HDR;
	}
	return 1;
}

/* A data item of what of the current segment is in data[0..n): its
 * length. */
static size_t seg_data(struct ts_dec *d, struct ts_item *it, const uint8_t *data, size_t n)
{
	size_t k = n < d->seg_left ? n : (size_t)d->seg_left;

	it->type = TS_DATA;
	it->off = d->seg_off;
	it->data = data;
	it->len = k;
	d->seg_off += k;
	d->seg_left -= k;
	if (d->seg_left == 0)
		d->st = ST_SEG;
	return k;
}

int ts_next(struct ts_dec *d, const uint8_t *buf, size_t n, struct ts_item *it, size_t *used)
{
	*used = 0;
	switch (d->st) {
	case ST_TOP:
	case ST_HDR:
		return entry(d, buf, n, it, used);
	case ST_SEG: {
		uint64_t off;
		uint32_t len;

		if (n < 12)
			return 0;
		off = get_le64(buf);
		len = get_le32(buf + 8);
		*used = 12;
		if (len == 0) {
			it->type = TS_FILE_END;
			d->st = ST_HDR;
			return 1;
		}
		/* ascending, apart, within the size: nothing written twice,
		 * nothing past the end */
		if (len > TS_SEG_MAX || off < d->next || off > d->size || len > d->size - off)
			return bad(d, "a segment out of order, overlapping or past the file's size");
		if (len > d->max_bytes - d->bytes)
			return bad(d, "more data than allowed");
		d->bytes += len;
		d->next = off + len;
		d->seg_off = off;
		d->seg_left = len;
		/* The data follows the head: what of it is here comes with
		 * it (an item of length 0 when none is yet). */
		d->st = ST_DATA;
		*used = 12 + seg_data(d, it, buf + 12, n - 12);
		return 1;
	}
	case ST_DATA:
		if (!n || !d->seg_left)
			return 0;
		*used = seg_data(d, it, buf, n);
		return 1;
	case ST_END:
	default:
		return n ? bad(d, "bytes after the end record") : 0;
	}
}

size_t ts_put_entry(uint8_t *buf, char kind, uint32_t mode, int64_t sec, uint32_t nsec,
		    const char *path, uint64_t size, const char *target)
{
	size_t plen = strlen(path), off = 0, tlen;

	if (plen > TS_PATH_MAX)
		return 0;
	buf[off++] = (uint8_t)kind;
	put_le32(buf + off, mode & 07777);
	put_le64(buf + off + 4, (uint64_t)sec);
	put_le32(buf + off + 12, nsec);
	off += 16;
	buf[off] = (uint8_t)plen;
	buf[off + 1] = (uint8_t)(plen >> 8);
	memcpy(buf + off + 2, path, plen);
	off += 2 + plen;
	if (kind == 'f') {
		put_le64(buf + off, size);
		off += 8;
	} else if (kind == 'l' || kind == 'n') {
		tlen = strlen(target);
		if (tlen > TS_PATH_MAX)
			return 0;
		buf[off] = (uint8_t)tlen;
		buf[off + 1] = (uint8_t)(tlen >> 8);
		memcpy(buf + off + 2, target, tlen);
		off += 2 + tlen;
	}
	return off;
}

size_t ts_put_seg(uint8_t *buf, uint64_t off, uint32_t len)
{
	put_le64(buf, off);
	put_le32(buf + 8, len);
	return 12;
}
