/* frame_fuzz.c - libFuzzer target for every parser of guest-controlled bytes
 * on the host: frame_parse (as the receive loop drives it), TLV decoding of
 * each frame, the ERROR-frame text decoder, and the UTF-8 sanitiser that
 * turns guest output into JSON strings, and the bulk lane's slot decoders
 * (a slot or length they pass must lie inside the lane).  See fuzz/run. */
#include "frame.h"
#include "host.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_tlv(const struct frame *fr)
{
	struct tlv_r r;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l, u32;
	uint64_t u64;
	char s[256];

	tlv_rinit(&r, fr->payload, fr->len);
	while (tlv_next(&r, &tag, &v, &l) == 1) {
		/* every decoder on every item: they must all bound-check */
		tlv_u32(v, l, &u32);
		tlv_u64(v, l, &u64);
		tlv_str(v, l, s, sizeof s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t off = 0, used;
	struct frame fr;
	char kind[64], msg[512];

	/* Feed the stream in uneven pieces, as a socket would deliver it. */
	while (off < size) {
		int r = frame_parse(data + off, size - off, &fr, &used);

		if (r <= 0)
			break;
		if (fr.len > FRAME_MAX_PAYLOAD || used != FRAME_HDR + fr.len || used > size - off)
			abort();
		walk_tlv(&fr);
		{
			uint32_t n = data[0] % (BULK_SLOTS_MAX + 2), slot, len;

			if (bulk_done_decode(&fr, n, &slot) == 0 &&
			    (slot >= n || slot >= BULK_SLOTS_MAX))
				abort();
			if (bulk_decode(&fr, n, &slot, &len) == 0 &&
			    (slot >= n || slot >= BULK_SLOTS_MAX || len == 0 || len > BULK_SLOT))
				abort();
		}
		frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
		json_decref(utf8_json(fr.payload, fr.len, fr.stream & 1));
		off += used;
	}
	json_decref(utf8_json(data, size, 1));
	return 0;
}
