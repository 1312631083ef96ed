/* canary_test.c - isopod-broker's probe of isopod-netsetup's table
 * (lib/canary.c): which datagrams count as an answer, the count of misses
 * that declares the table gone, and a start that fails closed when
 * nothing answers (no table on loopback here). */
#include "../../lib/canary.c" /* self-contained: t/run-unit links frame+util only */

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "tap.h"

/* A canary with no socket: every probe is lost, as when nothing answers. */
static struct canary blind(void)
{
	struct canary c = { .port = 1054, .fd = -1 };

	c.gw.s_addr = htonl(INADDR_LOOPBACK);
	rand_bytes(c.nonce, sizeof c.nonce);
	return c;
}

static void test_answers(void)
{
	struct canary c = blind();
	uint8_t first[CANARY_NONCE], wrong[CANARY_NONCE] = { 0 }, longer[CANARY_NONCE + 1];

	canary_send(&c, 1000);
	memcpy(first, c.nonce[0], sizeof first);
	ok(c.unanswered == 1 && c.sent == 1000, "a probe is counted as unanswered until answered");
	ok(!canary_answer(&c, wrong, sizeof wrong, 1001) && c.unanswered == 1,
	   "zero bytes are no answer");
	memcpy(longer, first, sizeof first);
	longer[CANARY_NONCE] = 'x';
	ok(!canary_answer(&c, longer, sizeof longer, 1001), "the nonce with a byte more is no answer");
	ok(!canary_answer(&c, first, sizeof first - 1, 1001), "a cut nonce is no answer");
	ok(canary_answer(&c, first, sizeof first, 1002) && c.unanswered == 0 && c.ok == 1002,
	   "the nonce sent is the answer");
	canary_send(&c, 2000);
	ok(canary_answer(&c, first, sizeof first, 2001) && c.unanswered == 0,
	   "the one before still counts (an answer late by one probe)");
	canary_send(&c, 3000);
	canary_send(&c, 4000);
	ok(!canary_answer(&c, first, sizeof first, 4001) && c.unanswered == 2,
	   "an older one does not (a replay)");
}

static void test_misses(void)
{
	struct canary c = blind();
	char msg[512] = "";
	int64_t t = 5000;
	int probes = 1, r;

	canary_send(&c, t);
	ok(canary_tick(&c, t + CANARY_EVERY_MS - 1, msg, sizeof msg) == 0 && c.unanswered == 1,
	   "no probe before CANARY_EVERY_MS");
	while ((r = canary_tick(&c, t += CANARY_EVERY_MS, msg, sizeof msg)) == 0 && probes < 10)
		probes++;
	ok(r < 0 && probes == CANARY_MISSES,
	   "lost after %d unanswered probes, a period apart (want %d)", probes, CANARY_MISSES);
	ok(strstr(msg, "127.0.0.1:1054") && strstr(msg, "run isopod-netsetup"), "the reason: %s",
	   msg);

	c = blind();
	t = 5000;
	canary_send(&c, t);
	for (int i = 0; i < 3 * CANARY_MISSES; i++) {
		uint8_t n[CANARY_NONCE];

		memcpy(n, c.nonce[0], sizeof n);
		canary_answer(&c, n, sizeof n, t + 1);
		if (canary_tick(&c, t += CANARY_EVERY_MS, msg, sizeof msg) < 0)
			break;
		probes = i + 1;
	}
	ok(probes == 3 * CANARY_MISSES && c.unanswered == 1,
	   "answered every time: never lost (%d ticks)", probes);

	c = blind();
	t = 5000;
	canary_send(&c, t);
	ok(canary_tick(&c, t + 60000, msg, sizeof msg) == 0 && c.unanswered == 2,
	   "a broker not scheduled for a minute sends a probe, it does not give up");
}

static void test_start(void)
{
	struct canary c;
	char msg[512] = "";
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof sa;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int64_t t0;
	unsigned port;

	/* any free port P+1 (P its neighbour): no table, so nothing answers */
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || ntohs(sa.sin_port) < 2) {
		ok(0, "a loopback socket: %s", strerror(errno));
		return;
	}
	port = ntohs(sa.sin_port) - 1u;
	ok(canary_open(&c, fd, sa.sin_addr, port) == 0, "open on 127.0.0.1:%u", port + 1);
	t0 = mono_ms();
	ok(canary_start(&c, msg, sizeof msg) < 0, "no table: the start fails");
	ok(mono_ms() - t0 >= CANARY_START_MS && mono_ms() - t0 < CANARY_START_MS + 1000,
	   "after CANARY_START_MS (%lld ms)", (long long)(mono_ms() - t0));
	ok(strstr(msg, "no network policy on 127.0.0.1") && strstr(msg, "run isopod-netsetup"),
	   "naming isopod-netsetup: %s", msg);
	ok(c.unanswered >= 5, "it kept probing meanwhile (%u probes)", c.unanswered);
	canary_close(&c);
	ok(c.fd == -1, "closed");
}

int main(void)
{
	test_answers();
	test_misses();
	test_start();
	return tap_done();
}
