/* utf8.c - guest bytes as text: UTF-8 validated, never trusted (the
 * declarations are in util.h, beside the other JSON helpers).  Apart from
 * lib/util.c so that it stays under the 1000-line lint. */
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length of the UTF-8 character at p (n bytes left), 0 when it is not a
 * valid one (overlong, surrogate, beyond U+10FFFF, truncated); *want gets the
 * length its first byte announces (0 for a byte that starts none). */
static size_t utf8_char(const uint8_t *p, size_t n, size_t *want)
{
	uint8_t b = p[0];
	size_t len = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3
		   : (b & 0xf8) == 0xf0 ? 4 : 0;
	size_t m;
	int ok = len > 0 && len <= n;

	*want = len;
	for (m = 1; ok && m < len; m++)
		ok = (p[m] & 0xc0) == 0x80;
	if (ok && len == 2 && b < 0xc2)
		ok = 0; /* overlong */
	if (ok && len == 3) {
		uint32_t cp = (uint32_t)(b & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 |
			      (p[2] & 0x3f);
		ok = cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff);
	}
	if (ok && len == 4) {
		uint32_t cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 |
			      (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
		ok = cp >= 0x10000 && cp <= 0x10ffff;
	}
	return ok ? len : 0;
}

int utf8_valid(const void *p, size_t n)
{
	const uint8_t *s = p;
	size_t i = 0, want, len;

	while (i < n) {
		if (!(len = utf8_char(s + i, n - i, &want)))
			return 0;
		i += len;
	}
	return 1;
}

/* utf8_json: the in-band copy of guest output: valid UTF-8 (jansson requires it), cut on a character
 * boundary when `cut` says the bytes were cut by a cap, invalid bytes and NUL
 * replaced by U+FFFD.  The log keeps the bytes. */
json_t *utf8_json(const uint8_t *p, size_t n, int cut)
{
	char *out = malloc(n * 3 + 1);
	size_t i = 0, k = 0;
	json_t *j;

	if (!out)
		return json_string("");
	while (i < n) {
		uint8_t b = p[i];
		size_t want, len = utf8_char(p + i, n - i, &want);

		if (!len && cut && want > 0 && i + want > n)
			break; /* a character cut by the cap: drop the tail */
		if (!len || b == 0) {
			/* NUL is valid UTF-8 but C strings end there: U+FFFD too */
			memcpy(out + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
			continue;
		}
		memcpy(out + k, p + i, len);
		k += len;
		i += len;
	}
	out[k] = 0;
	j = json_stringn(out, k);
	free(out);
	return j ? j : json_string("");
}
