/* agent_coldout_test.c - a copy-out (FILE_GET of one file) as get_pump
 * sends it (doc/SPEED.md "Goal 4, a cold copy-out"): a file not in the page
 * cache read with O_DIRECT into the ring and sent from it in place, a
 * cached one buffered; the port a nonblocking socket with a small send
 * buffer, so writes are taken in part.  Sizes around a page, the 32 KiB
 * frame and the ring's chunk, cold and hot; a file that shrinks during the
 * copy; the host gone (conn_reset) during it, leaving no mapping.  The
 * file is on /var/tmp (a disk: tmpfs refuses O_DIRECT). */
#include "agentharness.h"

#include <fcntl.h>
#include <sys/socket.h>

static char path[64];
static int host = -1;
static uint8_t want[3 * AGENT_WINDOW + 8192], got[sizeof want];
static size_t got_len;
static uint8_t rx[4 * PORT_WRITE_MAX];
static size_t rx_len;
static int eof_seen, done_seen, error_seen;

/* What the host's end holds now, as frames: DATA appended to got. */
static void drain(void)
{
	struct frame fr;
	size_t used, off = 0;
	ssize_t n;

	while ((n = read(host, rx + rx_len, sizeof rx - rx_len)) > 0)
		rx_len += (size_t)n;
	while (frame_parse(rx + off, rx_len - off, &fr, &used) == 1) {
		if (fr.type == F_DATA && fr.stream == STREAM_FILE && got_len + fr.len <= sizeof got) {
			memcpy(got + got_len, fr.payload, fr.len);
			got_len += fr.len;
		}
		eof_seen += fr.type == F_EOF;
		done_seen += fr.type == F_FILE_DONE;
		error_seen += fr.type == F_ERROR;
		off += used;
	}
	memmove(rx, rx + off, rx_len - off);
	rx_len -= off;
}

/* Pages of path the page cache holds. */
static long cached_pages(size_t size)
{
	static unsigned char vec[sizeof want / 4096 + 1];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *m = fd >= 0 && size ? mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
	long n = 0;

	if (m != MAP_FAILED) {
		if (mincore(m, size, vec) == 0)
			for (size_t i = 0; i < (size + 4095) / 4096; i++)
				n += vec[i] & 1;
		munmap(m, size);
	}
	if (fd >= 0)
		close(fd);
	return n;
}

/* A copy-out of a size-byte file, cold or cached; shrink: cut the file to
 * that many bytes once that many were received (0: never); reset: the host
 * goes away once a chunk was received.  The turns it took, or -1. */
static int copy(size_t size, int cold, size_t shrink, int reset)
{
	int sv[2], snd = 4096, fd, turns;

	for (size_t i = 0; i < size; i++)
		want[i] = (uint8_t)(i * 7 + i / 4096 + size);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, want, size) != (ssize_t)size || fsync(fd) < 0)
		abort();
	close(fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		abort();
	if (cold)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	else if (read(fd, got, size) < 0)
		abort();
	close(fd);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0 ||
	    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &snd, sizeof snd) < 0)
		abort();
	fresh();
	A->port.fd = sv[0];
	host = sv[1];
	got_len = rx_len = 0;
	eof_seen = done_seen = error_seen = 0;
	A->op = OP_GET;
	A->get.fd = open(path, O_RDONLY | O_CLOEXEC);
	A->get.size = size;
	A->get.mode = 0600;
	snprintf(A->get.path, sizeof A->get.path, "%s", path);
	for (turns = 0; turns < 100000; turns++) {
		if (A->op == OP_GET)
			get_pump(A);
		port_flush(A);
		drain();
		if (shrink && got_len >= shrink && A->op == OP_GET) {
			if (truncate(path, (off_t)shrink) < 0)
				abort();
			shrink = 0;
		}
		if (reset && got_len >= AGENT_WINDOW / 2) {
			conn_reset(A, "gone (a test)");
			break;
		}
		if (A->op == OP_NONE && !out_pending(A)) {
			drain();
			break;
		}
	}
	close(sv[0]);
	close(sv[1]);
	A->port.fd = -1;
	return turns < 100000 ? turns : -1;
}

static void test_sizes(void)
{
	static const size_t sizes[] = { 1, 4095, 4096, 4097, OUT_DATA_CHUNK - 1, OUT_DATA_CHUNK,
					OUT_DATA_CHUNK + 1, AGENT_WINDOW - 4096 - 1, AGENT_WINDOW - 4096,
					AGENT_WINDOW - 4096 + 1, 3 * AGENT_WINDOW + 1234 };

	for (int cold = 0; cold < 2; cold++)
		for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
			size_t n = sizes[i];
			int t = copy(n, cold, 0, 0);

			ok(t >= 0 && got_len == n && !memcmp(got, want, n) && eof_seen == 1 &&
			   done_seen == 1 && !error_seen && A->get.cold.map == NULL,
			   "%s %zu bytes: byte-identical, EOF and FILE_DONE (%zu received, %d turns)",
			   cold ? "cold" : "cached", n, got_len, t);
			if (cold && n >= 4096)
				ok(cached_pages(n) == 0,
				   "cold %zu bytes: read past the page cache (O_DIRECT): %ld pages cached after",
				   n, cached_pages(n));
		}
}

static void test_shrink(void)
{
	size_t n = 3 * AGENT_WINDOW + 1234, cut = AGENT_WINDOW + 5000;
	int t = copy(n, 1, cut, 0);

	/* the ring may hold bytes read before the cut: they are the file's
	 * as they were, as a buffered read in flight would give them */
	ok(t >= 0 && got_len >= cut && got_len < n && !memcmp(got, want, got_len) && eof_seen == 1 &&
	   !error_seen, "cold, cut to %zu during the copy: a prefix, %zu bytes, then EOF", cut,
	   got_len);
}

static void test_reset(void)
{
	int t = copy(3 * AGENT_WINDOW + 1234, 1, 0, 1);

	ok(t >= 0 && A->op == OP_NONE && A->get.fd < 0 && A->get.cold.map == NULL &&
	   A->get.cold.key == 0, "the host gone during a cold copy-out: no file, no mapping left");
}

int main(void)
{
	int fd;

	if (harness_start() < 0)
		return 1;
	snprintf(path, sizeof path, "/var/tmp/agent_coldout.XXXXXX");
	if ((fd = mkstemp(path)) < 0)
		return 1;
	close(fd);
	test_sizes();
	test_shrink();
	test_reset();
	unlink(path);
	return harness_done();
}
