/* agent_bulk_test.c - the agent's side of the bulk lane: a BULK names a
 * slot of the lane (here a plain file standing for the drive), the agent
 * reads it into the command's stdin or the FILE_PUT's file and returns the
 * slot (BULK_DONE); a slot or length outside the lane, or no lane, is
 * ERROR{protocol} and nothing is read. */
#include "agentharness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>

static char lane[64], outp[64];
/* write() as the agent sees it: on short_fd, the next write of more than
 * 1000 bytes writes 1000 (buffered, as O_DIRECT could not) and says so:
 * a short write that is not whole sectors */
static int short_fd = -1;

ssize_t write(int fd, const void *p, size_t n)
{
	if (fd == short_fd && n > 1000) {
		int fl = fcntl(fd, F_GETFL);
		long r;

		short_fd = -1;
		fcntl(fd, F_SETFL, fl & ~O_DIRECT);
		r = syscall(SYS_write, fd, p, (size_t)1000);
		fcntl(fd, F_SETFL, fl);
		return r;
	}
	return syscall(SYS_write, fd, p, n);
}

/* Send BULK{slot, len} on stream, as a host would. */
static void bulk(uint32_t stream, uint32_t slot, uint32_t len)
{
	req();
	W.len = BULK_PAYLOAD;
	bulk_encode(W.buf, slot, len);
	send_req(F_BULK, stream);
}

/* The frames queued: exactly one, a BULK_DONE for slot on stream. */
static int returned(uint32_t stream, uint32_t slot)
{
	size_t used;
	struct frame fr;
	uint32_t s;

	if (A->out.len - A->out.off == 0 ||
	    frame_parse(A->out.p + A->out.off, A->out.len - A->out.off, &fr, &used) != 1)
		return 0;
	return used == A->out.len - A->out.off && fr.type == F_BULK_DONE && fr.stream == stream &&
	       bulk_done_decode(&fr, A->bulk.n, &s) == 0 && s == slot;
}

/* A session with the lane: 4 slots, slot i full of bytes i*31 + offset. */
static void with_lane(void)
{
	static uint8_t b[BULK_SLOT];
	int fd;

	fresh();
	fd = open(lane, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	for (uint32_t s = 0; fd >= 0 && s < 4; s++) {
		for (size_t i = 0; i < sizeof b; i++)
			b[i] = (uint8_t)(s * 31 + i + i / 251);
		if (pwrite(fd, b, sizeof b, (off_t)s * BULK_SLOT) != (ssize_t)sizeof b)
			abort();
	}
	if (fd < 0)
		abort();
	A->bulk.fd = fd;
	A->bulk.bytes = 4ull * BULK_SLOT;
	A->bulk.n = 4;
}

static int slot_is(const uint8_t *p, uint32_t s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(s * 31 + i + i / 251))
			return 0;
	return 1;
}

static void test_stdin(void)
{
	static uint8_t got[BULK_SLOT];
	char k[64], m[1100];
	uint8_t t;
	int p[2];
	ssize_t n;

	signal(SIGPIPE, SIG_IGN);
	with_lane();
	if (pipe2(p, O_NONBLOCK) < 0)
		abort();
	fcntl(p[1], F_SETPIPE_SZ, BULK_SLOT);
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	A->ex.in_fd = p[1];
	bulk(STREAM_STDIN, 2, 5000);
	n = read(p[0], got, sizeof got);
	ok(returned(STREAM_STDIN, 2) && n == 5000 && slot_is(got, 2, 5000),
	   "stdin: slot 2's 5000 bytes into the pipe, the slot returned (%zd)", n);
	bulk(STREAM_STDIN, 3, 777);
	n = read(p[0], got, sizeof got);
	ok(returned(STREAM_STDIN, 3) && n == 777 && slot_is(got, 3, 777),
	   "stdin: 777 bytes (not whole sectors) of slot 3 (%zd)", n);
	ok(A->credit_due[STREAM_STDIN] == 0,
	   "stdin: no CREDIT for the lane's bytes (BULK_DONE is their credit): %llu due",
	   (unsigned long long)A->credit_due[STREAM_STDIN]);
	/* the command closed its stdin: the slot comes back unread */
	close(p[0]);
	bulk(STREAM_STDIN, 1, BULK_SLOT);
	ok(returned(STREAM_STDIN, 1) && A->ex.in_fd < 0 && A->ex.bq_len == 0,
	   "stdin: a closed pipe returns the slot");
	bulk(STREAM_STDIN, 0, 10);
	ok(returned(STREAM_STDIN, 0), "stdin: after the pipe closed, slots come back at once");
	op_abort(A);

	/* out of the lane, or a bad length: refused, nothing read */
	with_lane();
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	if (pipe2(p, O_NONBLOCK) < 0)
		abort();
	A->ex.in_fd = p[1];
	bulk(STREAM_STDIN, 4, 10);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol") &&
	   A->port.poisoned && A->ex.bq_len == 0 && read(p[0], got, 1) < 0,
	   "stdin: slot 4 of 4 is ERROR{protocol}, nothing read (%s)", m);
	A->port.poisoned = 0;
	bulk(STREAM_STDIN, 0, BULK_SLOT + 1);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol") &&
	   A->port.poisoned, "stdin: a length over a slot is ERROR{protocol}");
	A->port.poisoned = 0;
	bulk(STREAM_STDIN, 0, 0);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol"),
	   "stdin: length 0 is ERROR{protocol}");
	A->port.poisoned = 0;
	close_fd(&A->bulk.fd);
	bulk(STREAM_STDIN, 0, 10);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol") &&
	   read(p[0], got, 1) < 0, "stdin: no lane, a BULK is ERROR{protocol}");
	op_abort(A);
	close(p[0]);

	/* a host lending more slots than the lane has while the pipe is
	 * full: one is in the ring, at most the lane's count wait; the next
	 * is refused, and the queue never grows past the lane */
	with_lane();
	if (pipe2(p, O_NONBLOCK) < 0)
		abort();
	fcntl(p[1], F_SETPIPE_SZ, 4096);
	A->op = OP_EXEC;
	A->ex.with_stdin = 1;
	A->ex.in_fd = p[1];
	for (uint32_t s = 0; s < 5; s++)
		bulk(STREAM_STDIN, s % 4, BULK_SLOT);
	ok(!A->port.poisoned && A->ex.bq_len == 4, "stdin: one slot in the ring, 4 waiting");
	bulk(STREAM_STDIN, 1, BULK_SLOT);
	ok(answer(&t, k, m, sizeof m) >= 1 && t == F_ERROR && !strcmp(k, "protocol") &&
	   A->ex.bq_len == 4, "stdin: a sixth slot lent on a lane of 4 is ERROR{protocol} (%s)",
	   m);
	op_abort(A);
	close(p[0]);
	close_fd(&A->bulk.fd);
}

static void test_file(void)
{
	static uint8_t got[2 * BULK_SLOT];
	int fd;
	ssize_t n;

	with_lane();
	fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	A->op = OP_PUT;
	A->put.fd = fd;
	A->put.failed = 0;
	A->put.bytes = 0;
	snprintf(A->put.path, sizeof A->put.path, "%s", outp);
	bulk(STREAM_FILE, 1, BULK_SLOT);
	ok(returned(STREAM_FILE, 1), "file: slot 1 returned");
	bulk(STREAM_FILE, 3, 1001);
	ok(returned(STREAM_FILE, 3), "file: slot 3 returned");
	ok(A->put.bytes == BULK_SLOT + 1001, "file: %llu bytes written",
	   (unsigned long long)A->put.bytes);
	close_fd(&A->put.fd);
	A->op = OP_NONE;
	fd = open(outp, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, got, sizeof got) : -1;
	ok(n == BULK_SLOT + 1001 && slot_is(got, 1, BULK_SLOT) && slot_is(got + BULK_SLOT, 3, 1001),
	   "file: the bytes are slot 1's then slot 3's first 1001 (%zd)", n);
	if (fd >= 0)
		close(fd);
	/* an O_DIRECT write that wrote 1000 bytes, not whole sectors: those
	 * count, the rest goes buffered after them, nothing written twice */
	fd = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	A->op = OP_PUT;
	A->put.fd = fd;
	A->put.failed = 0;
	A->put.bytes = 0;
	short_fd = fd;
	bulk(STREAM_FILE, 2, BULK_SLOT);
	ok(returned(STREAM_FILE, 2) && short_fd < 0 && A->put.bytes == BULK_SLOT,
	   "file: a short O_DIRECT write (1000 bytes): %llu bytes counted",
	   (unsigned long long)A->put.bytes);
	close_fd(&A->put.fd);
	A->op = OP_NONE;
	fd = open(outp, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, got, sizeof got) : -1;
	ok(n == BULK_SLOT && slot_is(got, 2, BULK_SLOT),
	   "file: after a short O_DIRECT write the file is slot 2's bytes, once (%zd)", n);
	if (fd >= 0)
		close(fd);
	/* no operation: left over, returned unread */
	bulk(STREAM_FILE, 2, 10);
	ok(returned(STREAM_FILE, 2), "file: a BULK with no FILE_PUT returns the slot");
	close_fd(&A->bulk.fd);
}

int main(void)
{
	int fd;

	if (harness_start() < 0)
		return 1;
	snprintf(lane, sizeof lane, "/tmp/agent_bulk.XXXXXX");
	snprintf(outp, sizeof outp, "/tmp/agent_bulk_out.XXXXXX");
	if ((fd = mkstemp(lane)) < 0)
		return 1;
	close(fd);
	if ((fd = mkstemp(outp)) < 0)
		return 1;
	close(fd);
	test_stdin();
	test_file();
	unlink(lane);
	unlink(outp);
	return harness_done();
}
