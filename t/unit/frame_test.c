/* frame_test.c - unit tests of lib/frame.c: the parser a hostile guest talks to.
 * Built by t/run-unit with ASan + UBSan: every read past what a test hands the
 * parser is a failure, not luck. */
#include "frame.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

/* Each test copies exactly the bytes under test into a heap buffer of that
 * size, so ASan catches the parser reading one byte too far. */
static uint8_t *dup_exact(const uint8_t *p, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);

	if (!b)
		abort();
	memcpy(b, p, n);
	return b;
}

static int parse_exact(const uint8_t *p, size_t n, struct frame *fr, size_t *used)
{
	uint8_t *b = dup_exact(p, n);
	int r = frame_parse(b, n, fr, used);

	free(b);
	return r;
}

static size_t mkframe(uint8_t *buf, uint8_t type, uint32_t stream, const void *p, uint32_t len)
{
	frame_hdr(buf, type, stream, len);
	if (len)
		memcpy(buf + FRAME_HDR, p, len);
	return FRAME_HDR + len;
}

static void test_frames(void)
{
	uint8_t buf[256], *b;
	struct frame fr;
	size_t used = 99, n, n2, k;
	int r, all;

	/* a whole frame */
	n = mkframe(buf, F_DATA, STREAM_STDOUT, "abc", 3);
	ok(n == FRAME_HDR + 3, "frame_hdr + payload is 12 bytes");
	b = dup_exact(buf, n);
	r = frame_parse(b, n, &fr, &used);
	ok(r == 1 && used == n, "whole frame parses, used = %zu", used);
	ok(fr.type == F_DATA && fr.stream == STREAM_STDOUT && fr.len == 3 &&
		   fr.payload == b + FRAME_HDR && !memcmp(fr.payload, "abc", 3),
	   "whole frame: type, stream, len, payload");
	free(b);

	/* an empty payload (PING) */
	n = mkframe(buf, F_PING, STREAM_CTL, NULL, 0);
	r = parse_exact(buf, n, &fr, &used);
	ok(r == 1 && used == FRAME_HDR && fr.len == 0, "empty payload frame parses");

	/* partial header: every prefix shorter than the header needs more */
	n = mkframe(buf, F_DATA, STREAM_STDERR, "hello", 5);
	all = 1;
	for (k = 0; k < FRAME_HDR; k++) {
		used = 99;
		r = parse_exact(buf, k, &fr, &used);
		if (r != 0 || used != 0)
			all = 0;
	}
	ok(all, "partial header (0..8 bytes) -> 0, used 0");

	/* partial payload */
	all = 1;
	for (k = FRAME_HDR; k < n; k++) {
		used = 99;
		r = parse_exact(buf, k, &fr, &used);
		if (r != 0 || used != 0)
			all = 0;
	}
	ok(all, "partial payload -> 0, used 0");

	/* a length over the cap is rejected as soon as 4 bytes are there */
	put_le32(buf, FRAME_MAX_PAYLOAD + 1);
	r = parse_exact(buf, 4, &fr, &used);
	ok(r == -1, "over-cap length rejected at 4 bytes");
	put_le32(buf, 0xffffffffu);
	r = parse_exact(buf, 4, &fr, &used);
	ok(r == -1, "length 0xffffffff rejected at 4 bytes");
	put_le32(buf, FRAME_MAX_PAYLOAD);
	r = parse_exact(buf, 4, &fr, &used);
	ok(r == 0, "length exactly at the cap is not rejected (needs more)");
	frame_hdr(buf, F_DATA, STREAM_STDOUT, FRAME_MAX_PAYLOAD + 1);
	r = parse_exact(buf, FRAME_HDR, &fr, &used);
	ok(r == -1, "over-cap length rejected with a whole header");

	/* type 0, unknown type */
	frame_hdr(buf, 0, STREAM_CTL, 0);
	ok(parse_exact(buf, 5, &fr, &used) == -1, "type 0 rejected at 5 bytes");
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == -1, "type 0 rejected with a whole header");
	frame_hdr(buf, F_TYPE_MAX + 1, STREAM_CTL, 0);
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == -1, "type F_TYPE_MAX+1 rejected");
	frame_hdr(buf, 255, STREAM_CTL, 0);
	ok(parse_exact(buf, 5, &fr, &used) == -1, "type 255 rejected at 5 bytes");
	frame_hdr(buf, F_TYPE_MAX, STREAM_CTL, 0);
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == 1, "type F_TYPE_MAX accepted");

	/* stream out of range */
	frame_hdr(buf, F_DATA, STREAM_MAX + 1, 0);
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == -1, "stream 5 rejected");
	frame_hdr(buf, F_DATA, 0xffffffffu, 0);
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == -1, "stream 0xffffffff rejected");
	frame_hdr(buf, F_EOF, STREAM_MAX, 0);
	ok(parse_exact(buf, FRAME_HDR, &fr, &used) == 1, "stream 4 accepted");

	/* two frames back to back, and a third cut short */
	n = mkframe(buf, F_DATA, STREAM_STDOUT, "one", 3);
	n2 = mkframe(buf + n, F_EOF, STREAM_STDOUT, NULL, 0);
	n2 += mkframe(buf + n + n2, F_DATA, STREAM_STDERR, "three", 5) - 2;
	b = dup_exact(buf, n + n2);
	r = frame_parse(b, n + n2, &fr, &used);
	ok(r == 1 && used == n && fr.type == F_DATA && fr.len == 3, "first of two frames");
	k = used;
	r = frame_parse(b + k, n + n2 - k, &fr, &used);
	ok(r == 1 && used == FRAME_HDR && fr.type == F_EOF && fr.stream == STREAM_STDOUT,
	   "second frame right after the first");
	k += used;
	r = frame_parse(b + k, n + n2 - k, &fr, &used);
	ok(r == 0 && used == 0, "third frame, truncated, needs more");
	free(b);
}

static void test_tlv(void)
{
	uint8_t buf[512], *b;
	struct tlv_w w;
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *val;
	uint32_t len, u32;
	uint64_t u64;
	char s[64];
	int r;

	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_PATH, "/root/x y");
	tlv_put_u32(&w, T_MODE, 0644);
	tlv_put_u64(&w, T_BYTES, (uint64_t)1 << 40 | 7);
	tlv_put(&w, 200, "zz", 2); /* unknown tag: readers must be able to skip it */
	tlv_put_str(&w, T_ARG, "");
	ok(!w.err && w.len == (5 + 9) + (5 + 4) + (5 + 8) + (5 + 2) + 5, "tlv writer length %zu", w.len);

	b = dup_exact(buf, w.len);
	tlv_rinit(&rd, b, w.len);
	r = tlv_next(&rd, &tag, &val, &len);
	ok(r == 1 && tag == T_PATH && tlv_str(val, len, s, sizeof s) == 0 && !strcmp(s, "/root/x y"),
	   "str round trip");
	r = tlv_next(&rd, &tag, &val, &len);
	ok(r == 1 && tag == T_MODE && tlv_u32(val, len, &u32) == 0 && u32 == 0644, "u32 round trip");
	r = tlv_next(&rd, &tag, &val, &len);
	ok(r == 1 && tag == T_BYTES && tlv_u64(val, len, &u64) == 0 && u64 == ((uint64_t)1 << 40 | 7),
	   "u64 round trip");
	ok(tlv_u32(val, len, &u32) == -1, "tlv_u32 refuses an 8-byte value");
	r = tlv_next(&rd, &tag, &val, &len);
	ok(r == 1 && tag == 200 && len == 2, "unknown tag is returned, to be skipped");
	r = tlv_next(&rd, &tag, &val, &len);
	ok(r == 1 && tag == T_ARG && len == 0 && tlv_str(val, len, s, sizeof s) == 0 && s[0] == 0,
	   "empty string round trip");
	ok(tlv_next(&rd, &tag, &val, &len) == 0, "clean end -> 0");
	free(b);

	/* truncated: every cut inside the second item is -1 at that item */
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_MODE, 1);
	tlv_put_str(&w, T_PATH, "abcdef");
	{
		int all = 1;

		for (size_t cut = 9 + 1; cut < w.len; cut++) {
			b = dup_exact(buf, cut);
			tlv_rinit(&rd, b, cut);
			if (tlv_next(&rd, &tag, &val, &len) != 1 ||
			    tlv_next(&rd, &tag, &val, &len) != -1)
				all = 0;
			free(b);
		}
		ok(all, "truncated TLV (partial tag header, partial value) -> -1");
	}

	/* a TLV length larger than what is left */
	buf[0] = T_PATH;
	put_le32(buf + 1, 0xfffffff0u);
	b = dup_exact(buf, 8);
	tlv_rinit(&rd, b, 8);
	ok(tlv_next(&rd, &tag, &val, &len) == -1, "TLV length over the rest -> -1");
	free(b);

	/* tlv_str: NUL, too long, exact fit */
	ok(tlv_str((const uint8_t *)"a\0b", 3, s, sizeof s) == -1, "tlv_str refuses an embedded NUL");
	ok(tlv_str((const uint8_t *)"abcd", 4, s, 4) == -1, "tlv_str refuses a string that does not fit");
	ok(tlv_str((const uint8_t *)"abcd", 4, s, 5) == 0 && !strcmp(s, "abcd"), "tlv_str exact fit");

	/* writer overflow is sticky */
	tlv_init(&w, buf, 12);
	tlv_put_u32(&w, T_MODE, 1);
	tlv_put_u32(&w, T_MODE, 2);
	tlv_put(&w, T_MODE, "", 0);
	ok(w.err && w.len == 9, "tlv writer overflow sets err and stops writing");
}

/* The bulk lane's decoders: a slot or length outside the lane never
 * passes, whatever the peer sends. */
static void test_bulk(void)
{
	uint8_t pl[BULK_PAYLOAD + 1];
	struct frame fr = { .type = F_BULK, .stream = STREAM_FILE, .payload = pl,
			    .len = BULK_PAYLOAD };
	uint32_t slot = 99, len = 99;

	ok(bulk_nslots(0) == 0 && bulk_nslots(BULK_SLOT - 1) == 0 && bulk_nslots(BULK_SLOT) == 1 &&
	   bulk_nslots(BULK_FILE_BYTES) == 8 && bulk_nslots(1ull << 40) == BULK_SLOTS_MAX,
	   "bulk_nslots: whole slots, at most BULK_SLOTS_MAX");
	bulk_encode(pl, 7, BULK_SLOT);
	ok(bulk_decode(&fr, 8, &slot, &len) == 0 && slot == 7 && len == BULK_SLOT,
	   "BULK: the last slot, a whole slot's length");
	ok(bulk_decode(&fr, 7, &slot, &len) < 0, "BULK: slot == nslots refused");
	bulk_encode(pl, 0xffffffffu, 1);
	ok(bulk_decode(&fr, 0xffffffffu, &slot, &len) < 0, "BULK: a slot past BULK_SLOTS_MAX refused");
	bulk_encode(pl, 0, 0);
	ok(bulk_decode(&fr, 8, &slot, &len) < 0, "BULK: length 0 refused");
	bulk_encode(pl, 0, BULK_SLOT + 1);
	ok(bulk_decode(&fr, 8, &slot, &len) < 0, "BULK: a length over a slot refused");
	bulk_encode(pl, 0, 1);
	fr.len = BULK_PAYLOAD + 1;
	ok(bulk_decode(&fr, 8, &slot, &len) < 0, "BULK: a payload of 9 bytes refused");
	fr.len = BULK_PAYLOAD - 1;
	ok(bulk_decode(&fr, 8, &slot, &len) < 0, "BULK: a payload of 7 bytes refused");
	fr = (struct frame){ .type = F_BULK_DONE, .stream = STREAM_FILE, .payload = pl, .len = 4 };
	put_le32(pl, 7);
	ok(bulk_done_decode(&fr, 8, &slot) == 0 && slot == 7, "BULK_DONE: the last slot");
	ok(bulk_done_decode(&fr, 7, &slot) < 0, "BULK_DONE: slot == nslots refused");
	put_le32(pl, 16);
	ok(bulk_done_decode(&fr, 0xffffffffu, &slot) < 0, "BULK_DONE: a slot past BULK_SLOTS_MAX refused");
	fr.len = 3;
	ok(bulk_done_decode(&fr, 8, &slot) < 0, "BULK_DONE: a payload of 3 bytes refused");
}

int main(void)
{
	test_frames();
	test_bulk();
	test_tlv();
	return tap_done();
}
