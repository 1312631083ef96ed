/* json_fuzz.c - libFuzzer target for the tools' one JSON loader (lib/jsonio.c
 * json_parse: jansson with JSON_REJECT_DUPLICATES and a size bound, and the
 * code that names a duplicate key from the error's position) and for
 * excerpt(), which quotes untrusted bytes in diagnostics.  See fuzz/run. */
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	char why[512], buf[EXCERPT_SZ];
	json_t *strict, *loose;
	json_error_t err;

	memset(why, 0xff, sizeof why);
	strict = json_parse(p, size, 0, why, sizeof why);
	loose = json_loadb(p, size, 0, &err);
	if (strict) {
		/* what the strict loader takes, the loose one reads the same */
		if (!loose || !json_equal(strict, loose))
			abort();
	} else if (!memchr(why, 0, sizeof why)) {
		abort(); /* the reason is always a C string */
	}
	json_decref(strict);
	json_decref(loose);
	excerpt(buf, data, size);
	if (strlen(buf) >= EXCERPT_SZ)
		abort();
	for (const char *c = buf; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
			abort(); /* never a control byte on a terminal */
	return 0;
}
