/* jsonrpc_fuzz.c - libFuzzer target for isopod-mcp's reader of client bytes
 * (lib/jsonrpc.c): the input is fed to the line splitter in two pieces
 * (split where the first byte says) with a small cap, and every line is
 * classified.  Checks: an oversized line never grows the buffer past the
 * cap, a classification is one of the four kinds with a C-string reason,
 * an invalid message's code is -32700 or -32600, and every error answer
 * encodes as one line.  See fuzz/run. */
#include "jsonrpc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP 4096

static int on_line(void *arg, const char *line, size_t n, int oversized)
{
	struct rpc_msg m;
	json_t *e;
	char *out;
	size_t k;

	(void)arg;
	if (oversized) {
		if (n <= CAP)
			abort();
		return 0;
	}
	if (n > CAP || line[n] != 0)
		abort();
	switch (rpc_parse(line, n, &m)) {
	case RPC_REQUEST:
	case RPC_NOTIFICATION:
		if (!m.method || !*m.method)
			abort();
		if (m.params && !json_is_object(m.params) && !json_is_array(m.params))
			abort();
		break;
	case RPC_RESPONSE:
		if (!m.id)
			abort();
		break;
	case RPC_INVALID:
		if (m.code != RPC_PARSE_ERROR && m.code != RPC_INVALID_REQUEST)
			abort();
		if (!memchr(m.why, 0, sizeof m.why))
			abort();
		e = rpc_error(m.id, m.code, m.why, NULL);
		out = rpc_line(e, &k);
		/* an answer to garbage is one line of JSON all the same,
		 * whatever bytes its reason quotes */
		if (!out || k == 0 || out[k - 1] != '\n' || memchr(out, '\n', k - 1))
			abort();
		free(out);
		json_decref(e);
		break;
	}
	rpc_msg_free(&m);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rpc_lines l = { .max = CAP };
	size_t cut = size ? data[0] % (size + 1) : 0;

	if (rpc_lines_feed(&l, (const char *)data, cut, on_line, NULL) < 0 ||
	    rpc_lines_feed(&l, (const char *)data + cut, size - cut, on_line, NULL) < 0)
		abort();
	if (l.cap > CAP + 1)
		abort();
	rpc_lines_end(&l, on_line, NULL);
	rpc_lines_free(&l);
	return 0;
}
