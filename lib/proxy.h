/* proxy.h - isopod-broker's HTTP(S) proxy: one connection from the guest
 * from its request head to its end (a CONNECT tunnel or one plain HTTP
 * request), through the states head → resolve → connect → relay → drain.
 *
 * A name outside the allowlist (or a port no entry names) is refused
 * before anything leaves the host.  Every address the name resolves to is
 * checked at connect time against the deny ranges and the host's own
 * addresses (read again for every connect), so an allowed name that
 * resolves, or is rebound, to metadata, private ranges or the host itself
 * gets nowhere.  A plain HTTP request's Host header is the broker's,
 * written from the checked target: the guest's own Host is dropped (RFC
 * 9112 3.2.2), so it cannot pick another virtual host on an allowed
 * server.  One ledger line per flow, at its end (a refusal: at once). */
#ifndef ISOPOD_PROXY_H
#define ISOPOD_PROXY_H

#include "broker.h"

#define PROXY_MAX_FLOWS 256
/* The most fds a flow holds: the guest's and the target's sockets and, in
 * its relay, a pipe each way (the resolver's socket is closed by then). */
#define PROXY_FLOW_FDS 6

/* b->lfd is readable: accept what is waiting (a round's worth). */
void proxy_on_accept(struct broker *b);

/* An event on one of a flow's sockets (e->kind BK_GUEST, BK_UP, BK_RES). */
void proxy_on_event(struct bk_ep *e, uint32_t ev);

/* Deadlines: heads, resolves, connects, idle relays, drains; and the
 * listener back after a pause for lack of fds. */
void proxy_sweep(struct broker *b, int64_t now);

/* End every flow ("broker stopped"). */
void proxy_stop(struct broker *b);

/* Free the flows ended this round. */
void proxy_reap(struct broker *b);

#endif
