/* agent_stdin_test.c - the agent's stdin flow: DATA straight into the
 * command's pipe (short writes, EAGAIN, EPIPE) and its credit, which is
 * never sent after the EXIT that ends the command (a CREDIT behind EXIT
 * would be taken as the reply to the host's next request). */
#include "agentharness.h"

#include <fcntl.h>
#include <signal.h>

/* Frames A queued, in order: the index of the first of type t (on stream
 * st, or any stream when st is -1) at or after `from`, or -1. */
static int frame_at(uint8_t t, int64_t st, int from)
{
	size_t off = A->out.off, used;
	struct frame fr;
	int i = 0;

	for (; off < A->out.len && frame_parse(A->out.p + off, A->out.len - off, &fr, &used) == 1;
	     off += used, i++)
		if (i >= from && fr.type == t && (st < 0 || fr.stream == (uint32_t)st))
			return i;
	return -1;
}

/* The straight-to-pipe path when the pipe takes part (a 4 KiB pipe,
 * O_NONBLOCK: a short write, then EAGAIN) or none of it (EPIPE). */
static void stdin_direct(void)
{
	static uint8_t big[10000];
	char k[64], m[1100];
	uint8_t t;
	int p[2], cap;

	signal(SIGPIPE, SIG_IGN); /* as the agent's main() has it: EPIPE, not a signal */
	fresh();
	if (pipe2(p, O_NONBLOCK) < 0)
		abort();
	cap = fcntl(p[1], F_SETPIPE_SZ, 4096);
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	A->ex.in_fd = p[1];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)i;
	req();
	tlv_put(&W, 0, big, sizeof big - 5); /* a frame of 10000 bytes */
	send_req(F_DATA, STREAM_STDIN);
	ok(cap == 4096 && A->credit_due[STREAM_STDIN] == 4096 && A->ex.rlen == sizeof big - 4096 &&
		   A->stdin_ring[0] == (uint8_t)(4096 - 5) && A->ex.in_fd == p[1],
	   "stdin into a 4 KiB pipe: 4096 bytes written and credited, the rest queued, not credited (%llu, %zu)",
	   (unsigned long long)A->credit_due[STREAM_STDIN], (size_t)A->ex.rlen);
	op_abort(A);
	close(p[0]);

	fresh();
	if (pipe(p) < 0)
		abort();
	close(p[0]); /* the command closed its stdin */
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	A->ex.in_fd = p[1];
	req();
	tlv_put(&W, 0, big, 100);
	send_req(F_DATA, STREAM_STDIN);
	ok(A->credit_due[STREAM_STDIN] == 105 && A->ex.rlen == 0 && A->ex.in_fd == -1 &&
		   answer(&t, k, m, sizeof m) == 0,
	   "stdin into a pipe whose reader is gone (EPIPE): discarded, all of it credited");
	op_abort(A);
}

/* After EXIT nothing is owed for stdin: a CREDIT behind EXIT would be
 * taken as the reply to the host's next request (a copy-out's FILE_GET).
 * Stdin discarded once the command was reaped is credited before EXIT. */
static void exit_then_credit(void)
{
	int ex;

	fresh();
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	A->ex.reaped = 1;
	A->ex.stdin_eof = 1;
	req();
	tlv_put(&W, 0, "", 0); /* 5 bytes the command will never read */
	send_req(F_DATA, STREAM_STDIN);
	A->out.off = A->out.len = 0;
	exec_maybe_finish(A, 0);
	credit_flush(A); /* what the loop turn runs next */
	ex = frame_at(F_EXIT, STREAM_CTL, 0);
	ok(ex >= 0 && frame_at(F_CREDIT, STREAM_STDIN, 0) >= 0 &&
		   frame_at(F_CREDIT, STREAM_STDIN, 0) < ex && frame_at(F_CREDIT, -1, ex) < 0 &&
		   A->op == OP_NONE,
	   "EXIT: the stdin discarded after the reap is credited before it, no CREDIT after it");
}

int main(void)
{
	if (harness_start() < 0)
		return 1;
	stdin_direct();
	exit_then_credit();
	return harness_done();
}
