/* canary.c - the probe of isopod-netsetup's table (see canary.h). */
#include "canary.h"
#include "util.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int canary_open(struct canary *c, int fd, struct in_addr gw, unsigned port)
{
	/* to itself: see canary_drain; sendto still names GW:PORT */
	struct sockaddr_in self = { .sin_family = AF_INET, .sin_addr = gw,
				    .sin_port = htons((uint16_t)(port + 1)) };

	*c = (struct canary){ .gw = gw, .port = port, .fd = fd };
	/* no zero nonce that a datagram of zeros could match before a probe */
	if (rand_bytes(c->nonce, sizeof c->nonce) < 0)
		return -1;
	return connect(fd, (struct sockaddr *)&self, sizeof self);
}

void canary_send(struct canary *c, int64_t now)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr = c->gw,
				  .sin_port = htons((uint16_t)c->port) };

	uint8_t fresh[sizeof c->nonce[0]];

	memcpy(c->nonce[1], c->nonce[0], sizeof c->nonce[0]);
	/* getrandom failing (never seen) repeats the last nonce, still one
	 * the guest cannot know; the probe goes out all the same. */
	if (rand_bytes(fresh, sizeof fresh) == 0)
		memcpy(c->nonce[0], fresh, sizeof fresh);
	c->sent = now;
	c->unanswered++;
	(void)!sendto(c->fd, c->nonce[0], sizeof c->nonce[0], MSG_DONTWAIT,
		      (const struct sockaddr *)&to, sizeof to);
}

/* Only one of the last two nonces counts (random, and they never leave the
 * host's loopback path, so a guest cannot send one). */
int canary_answer(struct canary *c, const void *buf, size_t n, int64_t now)
{
	if (n != sizeof c->nonce[0] ||
	    (memcmp(buf, c->nonce[0], sizeof c->nonce[0]) &&
	     memcmp(buf, c->nonce[1], sizeof c->nonce[1])))
		return 0;
	c->ok = now;
	c->unanswered = 0;
	return 1;
}

/* fd is connected to its own address (canary_open), so the kernel hands it
 * only datagrams from GW:PORT+1, which only this socket holds: a host
 * process that binds *:PORT while the table is gone and sends the nonce
 * back cannot fake an answer, and one flooding GW:PORT while it is up (the
 * table turns that into GW:PORT+1 too) cannot crowd the nonces out.
 * Drained to the end all the same. */
void canary_drain(struct canary *c, int64_t now)
{
	for (int k = 0; k < 4096; k++) {
		uint8_t buf[64];
		ssize_t n = recv(c->fd, buf, sizeof buf, MSG_TRUNC);

		if (n < 0)
			return;
		canary_answer(c, buf, (size_t)n, now);
	}
}

int canary_start(struct canary *c, char *msg, size_t msz)
{
	int64_t end = mono_ms() + CANARY_START_MS;
	char ab[INET_ADDRSTRLEN];

	c->ok = 0;
	while (!c->ok && mono_ms() < end) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int64_t until = mono_ms() + 200;

		canary_send(c, mono_ms());
		while (!c->ok && mono_ms() < until && poll(&p, 1, (int)(until - mono_ms())) > 0)
			canary_drain(c, mono_ms());
	}
	if (c->ok)
		return 0;
	snprintf(msg, msz, "no network policy on %s: the canary of isopod-netsetup's table inet "
		 "isopod (udp %u) did not answer; run isopod-netsetup",
		 inet_ntop(AF_INET, &c->gw, ab, sizeof ab), c->port);
	return -1;
}

/* Counted in probes, not in time since the last answer: a broker that was
 * not scheduled for a while (a loaded host) has sent nothing meanwhile,
 * and the answer to a probe is there as soon as its sendto returns. */
int canary_tick(struct canary *c, int64_t now, char *msg, size_t msz)
{
	char ab[INET_ADDRSTRLEN];

	canary_drain(c, now);
	if (now - c->sent < CANARY_EVERY_MS)
		return 0;
	if (c->unanswered >= CANARY_MISSES) {
		snprintf(msg, msz, "network policy lost: isopod-netsetup's table inet isopod "
			 "stopped answering its canary on %s:%u; the VM's network is cut (run "
			 "isopod-netsetup)", inet_ntop(AF_INET, &c->gw, ab, sizeof ab), c->port);
		return -1;
	}
	canary_send(c, now);
	return 0;
}

void canary_close(struct canary *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}
