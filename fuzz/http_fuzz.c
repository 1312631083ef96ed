/* http_fuzz.c - libFuzzer target for lib/http.c, the broker's parser of
 * proxy request heads: find the head, parse it, walk its headers, and check
 * that what the parser returns stays inside the input.  See fuzz/run. */
#include "http.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int inside(const char *p, size_t n, const char *b, size_t bn)
{
	return p >= b && p + n <= b + bn;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *why, *c, *end;
	size_t n = http_head_len(p, size);
	struct http_req r;
	struct http_hdr h;
	int k, guard = 0;

	if (n > size)
		abort();
	/* the broker's incremental scan, cut where the input says: it must find
	 * what a scan of the whole finds */
	if (size >= 2) {
		size_t seen = ((size_t)data[0] << 8 | data[1]) % (size + 1);

		if (!http_head_len(p, seen) && http_head_len_more(p, size, seen) != n)
			abort();
	}
	/* the broker parses only a complete head; the fuzzer tries both */
	if (http_parse_request(p, n ? n : size, &r, &why) < 0)
		return 0;
	if (!r.version || strlen(r.host) == 0 || strlen(r.host) > HTTP_HOST_MAX || r.port == 0 ||
	    r.port > 65535 || !inside(r.hdrs, r.hdrs_len, p, size) ||
	    (!r.connect && !inside(r.path, r.path_len, p, size)))
		abort();
	c = r.hdrs;
	end = r.hdrs + r.hdrs_len;
	while ((k = http_next_header(&c, end, &h)) == 1) {
		if (!inside(h.name, h.name_len, p, size) || !inside(h.value, h.value_len, p, size) ||
		    ++guard > 16384)
			abort();
		http_hdr_is(&h, "host");
		http_hdr_prefix(&h, "proxy-");
	}
	if (k < 0) /* the parser checked every header already */
		abort();
	return 0;
}
