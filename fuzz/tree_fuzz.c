/* tree_fuzz.c - libFuzzer target for the tree stream decoder (ts_next,
 * lib/treestream.c), the parser of a guest's directory copy-out on the
 * host.  The input is fed in uneven pieces as DATA frames would bring it,
 * through the same carry-over a feed keeps (a record head cut in two), and
 * what comes out must hold what the sink relies on: every path but the
 * top's passes ts_path_ok, data lies within its file's size, in order, and
 * adds up to no more than the bound; abort() otherwise. */
#include "treestream.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[TS_HDR_MAX + 4096];
	static struct ts_item it;
	struct ts_dec d;
	size_t len = 0, off = 0, used;
	uint64_t fsize = 0, next = 0, total = 0;
	int first = 1;

	ts_dec_init(&d);
	d.max_bytes = 1u << 16;
	d.max_entries = 64;
	while (off < size) {
		/* a piece: its length from the input itself */
		size_t k = 1 + data[off] % 97, pos = 0;
		int r;

		off++;
		if (k > size - off)
			k = size - off;
		if (k > sizeof buf - len)
			k = sizeof buf - len;
		memcpy(buf + len, data + off, k);
		len += k;
		off += k;
		while ((r = ts_next(&d, buf + pos, len - pos, &it, &used)) == 1) {
			if (used == 0 || used > len - pos)
				abort();
			pos += used;
			if (it.type == TS_ENTRY) {
				if (first ? strcmp(it.path, ".") != 0 || it.kind != 'd'
					  : !ts_path_ok(it.path, strlen(it.path)))
					abort();
				if (it.mode & ~07777u)
					abort();
				first = 0;
				fsize = it.size;
				next = 0;
			} else if (it.type == TS_DATA) {
				if (it.off < next || it.off > fsize || it.len > fsize - it.off)
					abort();
				next = it.off + it.len;
				total += it.len;
				if (total > d.max_bytes)
					abort();
			}
		}
		if (r < 0)
			return 0;
		memmove(buf, buf + pos, len - pos);
		len -= pos;
		if (len >= TS_HDR_MAX)
			abort(); /* a record head never needs more */
	}
	return 0;
}
