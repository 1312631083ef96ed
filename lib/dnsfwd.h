/* dnsfwd.h - isopod-broker's DNS forwarder: the guest's queries on the
 * gateway's DNS port, answered REFUSED here for a name outside the
 * allowlist (never forwarded, so queries cannot carry data out), else
 * sent on as the broker's own query (only the checked name and the type
 * leave) from a fresh socket (a random source port as well as a random
 * id), and the resolver's answer handed back.  One ledger line per query. */
#ifndef ISOPOD_DNSFWD_H
#define ISOPOD_DNSFWD_H

#include "broker.h"

#define DNSFWD_MAX_PEND 256

/* b->ufd is readable: take up to a round's worth of queries. */
void dnsfwd_on_query(struct broker *b);

/* A pending query's socket is readable (e->obj is the struct pend). */
void dnsfwd_on_answer(struct broker *b, struct bk_ep *e);

/* SERVFAIL for every query past its deadline. */
void dnsfwd_sweep(struct broker *b, int64_t now);

/* SERVFAIL for every pending query ("broker stopped"). */
void dnsfwd_stop(struct broker *b);

/* Free the queries ended this round. */
void dnsfwd_reap(struct broker *b);

#endif
