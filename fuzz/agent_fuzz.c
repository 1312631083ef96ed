/* agent_fuzz.c - libFuzzer target for the guest agent's decoders of what
 * the host sends (agent/request.c): the input is one request's TLV payload,
 * read as HELLO, EXEC, FILE_PUT and FILE_GET alike, and its first bytes as
 * a NET_ADDR.  What a decoder accepts must be what the agent relies on
 * afterwards: argv and envp NULL-terminated, every ENV "K=V" with a
 * non-empty K, absolute CWD and PATH shorter than PATH_MAX, messages always
 * C strings.  See fuzz/run. */
#include "agent.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_exec(const struct frame *fr)
{
	static struct exec_req rq; /* 270 KiB: not on the stack */
	char why[1024];
	size_t i;

	memset(why, 0xff, sizeof why);
	if (exec_parse(fr, &rq, why, sizeof why) < 0) {
		if (!memchr(why, 0, sizeof why))
			abort();
		return;
	}
	if (!rq.argv || !rq.argv[0] || !rq.envp || !rq.cwd || rq.cwd[0] != '/')
		abort();
	for (i = 0; rq.argv[i]; i++)
		if (i > MAX_ITEMS)
			abort();
	for (i = 0; rq.envp[i]; i++) {
		const char *eq = strchr(rq.envp[i], '=');

		if (!eq || eq == rq.envp[i] || i > MAX_ITEMS + 4)
			abort();
	}
}

static void check_file(const struct frame *fr)
{
	char path[PATH_MAX], why[1024];
	uint32_t mode = 0644, tree;
	uint64_t max;

	memset(why, 0xff, sizeof why);
	if (put_parse(fr, path, &mode, why, sizeof why) == 0) {
		if (path[0] != '/' || strlen(path) >= PATH_MAX)
			abort();
	} else if (!memchr(why, 0, sizeof why)) {
		abort();
	}
	memset(why, 0xff, sizeof why);
	if (get_parse(fr, path, &max, why, sizeof why) == 0) {
		if (path[0] != '/' || strlen(path) >= PATH_MAX)
			abort();
	} else if (!memchr(why, 0, sizeof why)) {
		abort();
	}
	memset(why, 0xff, sizeof why);
	if (tree_parse(fr, &tree, why, sizeof why) == 0) {
		if (tree > 1)
			abort();
	} else if (!memchr(why, 0, sizeof why)) {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame fr = { .type = F_EXEC, .stream = STREAM_CTL, .payload = data };
	struct hello_req h;
	char err[1024], cidr[64];
	in_addr_t addr, mask;

	if (size > FRAME_MAX_PAYLOAD)
		return 0; /* frame_parse never hands over more */
	fr.len = (uint32_t)size;
	check_exec(&fr);
	check_file(&fr);
	memset(&h, 0, sizeof h);
	err[0] = 0;
	hello_parse(&fr, &h, err, sizeof err);
	if (!memchr(err, 0, sizeof err) || !memchr(h.hostname, 0, sizeof h.hostname) ||
	    !memchr(h.net_addr, 0, sizeof h.net_addr) || (h.seed && h.seed + h.seedlen > data + size))
		abort();
	fr.type = F_HELLO;
	hello_plausible(&fr);
	memcpy(cidr, data, size < sizeof cidr - 1 ? size : sizeof cidr - 1);
	cidr[size < sizeof cidr - 1 ? size : sizeof cidr - 1] = 0;
	if (parse_cidr(cidr, &addr, &mask) == 0 && mask && (ntohl(mask) & 0x80000000u) == 0)
		abort(); /* a non-zero mask is a prefix */
	return 0;
}
