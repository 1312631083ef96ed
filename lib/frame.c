/* frame.c - framing and TLV codec shared by the agent and the host tools.
 * libc only; no allocation; every length read from the wire is checked
 * against what is actually present before it is used. */
#include "frame.h"

#include <string.h>

uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

uint64_t get_le64(const uint8_t *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}

int frame_parse(const uint8_t *buf, size_t n, struct frame *fr, size_t *used)
{
	uint32_t len, stream;
	uint8_t type;

	*used = 0;
	if (n < FRAME_HDR) {
		/* Reject an impossible length as soon as it is readable, so a
		 * peer cannot make us wait for 4 GiB that will never be valid. */
		if (n >= 4 && get_le32(buf) > FRAME_MAX_PAYLOAD)
			return -1;
		if (n >= 5 && (buf[4] == 0 || buf[4] > F_TYPE_MAX))
			return -1;
		return 0;
	}
	len = get_le32(buf);
	type = buf[4];
	stream = get_le32(buf + 5);
	if (len > FRAME_MAX_PAYLOAD || type == 0 || type > F_TYPE_MAX ||
	    stream > STREAM_MAX)
		return -1;
	if (n - FRAME_HDR < len)
		return 0;
	fr->type = type;
	fr->stream = stream;
	fr->len = len;
	fr->payload = buf + FRAME_HDR;
	*used = FRAME_HDR + (size_t)len;
	return 1;
}

void frame_hdr(uint8_t hdr[FRAME_HDR], uint8_t type, uint32_t stream, uint32_t len)
{
	put_le32(hdr, len);
	hdr[4] = type;
	put_le32(hdr + 5, stream);
}

void tlv_init(struct tlv_w *w, uint8_t *buf, size_t cap)
{
	w->buf = buf;
	w->len = 0;
	w->cap = cap;
	w->err = 0;
}

void tlv_put(struct tlv_w *w, uint8_t tag, const void *val, size_t len)
{
	if (w->err || len > FRAME_MAX_PAYLOAD || w->cap - w->len < 5 + len) {
		w->err = 1;
		return;
	}
	w->buf[w->len] = tag;
	put_le32(w->buf + w->len + 1, (uint32_t)len);
	if (len)
		memcpy(w->buf + w->len + 5, val, len);
	w->len += 5 + len;
}

void tlv_put_str(struct tlv_w *w, uint8_t tag, const char *s)
{
	tlv_put(w, tag, s, strlen(s));
}

void tlv_put_u32(struct tlv_w *w, uint8_t tag, uint32_t v)
{
	uint8_t b[4];

	put_le32(b, v);
	tlv_put(w, tag, b, sizeof b);
}

void tlv_put_u64(struct tlv_w *w, uint8_t tag, uint64_t v)
{
	uint8_t b[8];

	put_le64(b, v);
	tlv_put(w, tag, b, sizeof b);
}

void tlv_rinit(struct tlv_r *r, const uint8_t *p, size_t n)
{
	r->p = p;
	r->n = n;
}

int tlv_next(struct tlv_r *r, uint8_t *tag, const uint8_t **val, uint32_t *len)
{
	uint32_t l;

	if (r->n == 0)
		return 0;
	if (r->n < 5)
		return -1;
	l = get_le32(r->p + 1);
	if (r->n - 5 < l)
		return -1;
	*tag = r->p[0];
	*len = l;
	*val = r->p + 5;
	r->p += 5 + (size_t)l;
	r->n -= 5 + (size_t)l;
	return 1;
}

int tlv_u32(const uint8_t *val, uint32_t len, uint32_t *out)
{
	if (len != 4)
		return -1;
	*out = get_le32(val);
	return 0;
}

int tlv_u64(const uint8_t *val, uint32_t len, uint64_t *out)
{
	if (len != 8)
		return -1;
	*out = get_le64(val);
	return 0;
}

int tlv_str(const uint8_t *val, uint32_t len, char *dst, size_t dstsz)
{
	if ((size_t)len >= dstsz || memchr(val, 0, len))
		return -1;
	memcpy(dst, val, len);
	dst[len] = 0;
	return 0;
}

uint32_t bulk_nslots(uint64_t bytes)
{
	uint64_t n = bytes / BULK_SLOT;

	return n > BULK_SLOTS_MAX ? BULK_SLOTS_MAX : (uint32_t)n;
}

void bulk_encode(uint8_t out[BULK_PAYLOAD], uint32_t slot, uint32_t len)
{
	put_le32(out, slot);
	put_le32(out + 4, len);
}

int bulk_decode(const struct frame *fr, uint32_t nslots, uint32_t *slot, uint32_t *len)
{
	if (fr->len != BULK_PAYLOAD)
		return -1;
	*slot = get_le32(fr->payload);
	*len = get_le32(fr->payload + 4);
	if (*slot >= nslots || *slot >= BULK_SLOTS_MAX || *len == 0 || *len > BULK_SLOT)
		return -1;
	return 0;
}

int bulk_done_decode(const struct frame *fr, uint32_t nslots, uint32_t *slot)
{
	if (fr->len != 4)
		return -1;
	*slot = get_le32(fr->payload);
	if (*slot >= nslots || *slot >= BULK_SLOTS_MAX)
		return -1;
	return 0;
}
