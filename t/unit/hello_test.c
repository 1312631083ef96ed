/* hello_test.c - conn_hello's resends (lib/host.c) against a stand-in agent
 * on a socketpair: a HELLO the guest has not read yet is not said again
 * (QEMU passes a port's bytes on only once the guest opened it: a booting
 * guest would find every resend queued, and answer each); one it read and
 * left unanswered is. */
#include "../../lib/host.c" /* self-contained: t/run-unit links frame+util only */

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include "tap.h"

/* The stand-in agent: after wait_ms, read what the host sent (until a
 * pause of 50 ms), answer the newest HELLO's cookie, exit with the number
 * of HELLOs it found.  With drop_first, the first HELLO it reads is
 * dropped unanswered (a guest that saw EOF after it), as on a fresh warm
 * clone. */
static void agent(int fd, int wait_ms, int drop_first)
{
	uint8_t buf[8192], pay[64];
	size_t len = 0, off = 0, used;
	struct frame fr;
	struct tlv_w w;
	uint64_t cookie = 0;
	int hellos = 0;

	usleep((useconds_t)wait_ms * 1000);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 50) <= 0) {
			if (hellos && !(drop_first && hellos == 1))
				break;
			continue;
		}
		if ((n = read(fd, buf + len, sizeof buf - len)) <= 0)
			_exit(100);
		len += (size_t)n;
		while (frame_parse(buf + off, len - off, &fr, &used) == 1) {
			struct tlv_r r;
			uint8_t tag;
			const uint8_t *v;
			uint32_t l;

			off += used;
			if (fr.type != F_HELLO)
				continue;
			hellos++;
			tlv_rinit(&r, fr.payload, fr.len);
			while (tlv_next(&r, &tag, &v, &l) == 1)
				if (tag == T_COOKIE)
					tlv_u64(v, l, &cookie);
		}
	}
	tlv_init(&w, pay, sizeof pay);
	tlv_put_u32(&w, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&w, T_COOKIE, cookie);
	tlv_put_str(&w, T_ROOT, "ro");
	frame_hdr(buf, F_HELLO_ACK, STREAM_CTL, (uint32_t)w.len);
	memcpy(buf + FRAME_HDR, pay, w.len);
	if (write(fd, buf, FRAME_HDR + w.len) != (ssize_t)(FRAME_HDR + w.len))
		_exit(101);
	_exit(hellos); /* the answer is read before the close */
}

/* conn_hello against the agent; the number of HELLOs it found, or -1. */
static int hellos(int wait_ms, int drop_first)
{
	struct conn *c = calloc(1, sizeof *c);
	struct hello h = { .hostname = "t" };
	int sv[2], st, r;
	pid_t pid;

	if (!c || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(sv[0]);
		agent(sv[1], wait_ms, drop_first);
	}
	close(sv[1]);
	c->fd = sv[0];
	fcntl(c->fd, F_SETFL, O_NONBLOCK);
	r = conn_hello(c, &h, mono_ms() + 5000);
	conn_close(c);
	free(c);
	if (r < 0)
		kill(pid, SIGKILL);
	if (waitpid(pid, &st, 0) != pid || r < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(void)
{
	int n;

	n = hellos(750, 0);
	ok(n == 1, "a guest that reads only after 750 ms finds one HELLO, not the 100, 300 "
	   "and 700 ms resends queued behind it (%d)", n);
	n = hellos(0, 1);
	ok(n >= 2 && n < 100, "a HELLO read and left unanswered is said again (%d HELLOs)", n);
	return tap_done();
}
