/* agentharness.h - what agent_test.c and agent_stdin_test.c share: the
 * agent's sources built in (ISOPOD_AGENT_NO_MAIN), a session A, and the
 * helpers that send it a request and read its answer (nothing here touches
 * the machine: the root disk is "not mounted"). */
#ifndef AGENTHARNESS_H
#define AGENTHARNESS_H
#define ISOPOD_AGENT_NO_MAIN
/* lib/util.c, which t/run-unit links, has a mono_ms() of its own. */
#define mono_ms agent_mono_ms
#include "../../agent/bulk.c"
#include "../../agent/exec.c"
#include "../../agent/file.c"
#include "../../agent/hello.c"
#include "../../agent/main.c"
#include "../../agent/out.c"
#include "../../agent/pid1.c"
#include "../../agent/port.c"
#include "../../agent/request.c"
#include "../../lib/treeio.c"
#include "../../lib/treestream.c"

#include "tap.h"

#include <stdlib.h>

#define ROOT_ERR "root disk /dev/vda did not appear within 10 s"

static struct agent *A;
static uint8_t pay[FRAME_MAX_PAYLOAD + 64];
static struct tlv_w W;

/* A fresh session with a host that said HELLO. */
static inline void fresh(void)
{
	out_free(A);
	memset(A, 0, sizeof *A);
	agent_init(A);
	snprintf(A->root.err, sizeof A->root.err, "%s", ROOT_ERR);
	A->port.helloed = 1;
}

static inline void req(void)
{
	tlv_init(&W, pay, sizeof pay);
}

/* Hand the request built in W to on_frame() as a heap copy of exactly its
 * size (ASan sees any read past it). */
static inline void send_req(uint8_t type, uint32_t stream)
{
	uint8_t *p = malloc(W.len ? W.len : 1);
	struct frame fr = { .type = type, .stream = stream, .len = (uint32_t)W.len, .payload = p };

	if (!p || W.err)
		abort();
	memcpy(p, W.buf, W.len);
	A->out.off = A->out.len = 0;
	on_frame(A, &fr);
	free(p);
}

static inline struct frame as_frame(uint8_t type)
{
	return (struct frame){ .type = type, .stream = STREAM_CTL, .len = (uint32_t)W.len,
			       .payload = W.buf };
}

/* The frames the agent queued for the host: how many, and the type of the
 * last one, whose ERROR_KIND / MESSAGE / T_ERROR go to kind and msg. */
static inline int answer(uint8_t *type, char *kind, char *msg, size_t msgsz)
{
	size_t off = A->out.off, used;
	struct frame fr = { 0 };
	struct tlv_r r;
	const uint8_t *v;
	uint32_t l;
	uint8_t tag;
	int n = 0;

	*type = 0;
	kind[0] = msg[0] = 0;
	while (off < A->out.len && frame_parse(A->out.p + off, A->out.len - off, &fr, &used) == 1) {
		off += used;
		n++;
	}
	if (!n)
		return 0;
	*type = fr.type;
	tlv_rinit(&r, fr.payload, fr.len);
	while (tlv_next(&r, &tag, &v, &l) == 1) {
		if (tag == T_ERROR_KIND)
			tlv_str(v, l, kind, 64);
		if (tag == T_MESSAGE || tag == T_ERROR)
			tlv_str(v, l, msg, msgsz);
	}
	return n;
}

/* The request in W is answered by exactly one ERROR{kind, msg}. */
static inline int refused(uint8_t type, const char *kind, const char *msg)
{
	char k[64], m[1100];
	uint8_t t;
	int n;

	send_req(type, STREAM_CTL);
	n = answer(&t, k, m, sizeof m);
	if (n == 1 && t == F_ERROR && !strcmp(k, kind) && !strcmp(m, msg))
		return 1;
	printf("# got %d frame(s), last type %u: %s: %s\n", n, t, k, m);
	return 0;
}

/* Accepted: the request got as far as the root disk. */
static inline int accepted(uint8_t type)
{
	return refused(type, "root_unavailable", ROOT_ERR);
}
/* The session A: made before a file's tests, freed after (its tap_done). */
static inline int harness_start(void)
{
	/* the stdin ring is aligned for O_DIRECT (agent.h): calloc's 16 bytes
	 * are not enough */
	size_t al = _Alignof(struct agent), sz = (sizeof *A + al - 1) / al * al;

	A = aligned_alloc(al, sz);
	if (!A)
		return -1;
	memset(A, 0, sz);
	agent_init(A);
	return 0;
}

static inline int harness_done(void)
{
	out_free(A);
	free(A);
	return tap_done();
}
#endif
