/* canary.h - isopod-broker's fail-closed probe of isopod-netsetup's table.
 *
 * The broker cannot read nftables (that needs CAP_NET_ADMIN), so it asks
 * the table for positive evidence: `inet isopod` turns a datagram from the
 * host to GW:PORT into one to GW:PORT+1, where the canary socket is bound
 * and sends from (isopod-netsetup(8), FAIL CLOSED).  A socket of its own,
 * not the DNS one: a guest flooding DNS cannot crowd the nonces out, and
 * the table drops whatever a guest sends to PORT+1.  No answer before the
 * announce (canary_start): the broker refuses to start, naming
 * isopod-netsetup.  CANARY_MISSES probes in a row unanswered, the last one
 * for a whole CANARY_EVERY_MS, while serving (canary_tick): the broker
 * writes a "policy" ledger line, stops serving and exits 111; the routing
 * rules isopod-netsetup leaves outside the table cut what the table no
 * longer filters. */
#ifndef ISOPOD_CANARY_H
#define ISOPOD_CANARY_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#define CANARY_START_MS 2000 /* no answer before the announce: refuse to start */
#define CANARY_EVERY_MS 1000
#define CANARY_MISSES 3      /* that many probes unanswered: the table is gone */
#define CANARY_NONCE 16

struct canary {
	struct in_addr gw;
	unsigned port;            /* the table's canary port (GW:PORT) */
	int fd;                   /* bound to GW:PORT+1, connected to itself */
	uint8_t nonce[2][CANARY_NONCE]; /* the last one sent, and the one before */
	int64_t sent, ok;         /* monotonic ms of the last probe / answer */
	unsigned unanswered;      /* probes sent since the last answer */
};

/* Take fd (a UDP socket bound to gw:port+1, non-blocking; the canary owns
 * it from now) and connect it to its own address: see canary_drain.
 * 0, or -1 with errno. */
int canary_open(struct canary *c, int fd, struct in_addr gw, unsigned port);

/* Before the announce: probe until the table answers, CANARY_START_MS at
 * most.  0 answered; -1 with the reason (naming isopod-netsetup) in msg. */
int canary_start(struct canary *c, char *msg, size_t msz);

/* A probe with a fresh nonce, at now.  A failed send (EPERM from some
 * output drop) is just no answer. */
void canary_send(struct canary *c, int64_t now);

/* Does a datagram of n bytes answer one of the last two probes?  1 (then
 * the count of misses starts again, at now), 0 not. */
int canary_answer(struct canary *c, const void *buf, size_t n, int64_t now);

/* Read and check what came back (bounded: a tick is never spent here). */
void canary_drain(struct canary *c, int64_t now);

/* Every tick while serving: drain, then probe when one is due.  0 fine;
 * -1 the table is gone (the reason in msg). */
int canary_tick(struct canary *c, int64_t now, char *msg, size_t msz);

void canary_close(struct canary *c);

#endif
