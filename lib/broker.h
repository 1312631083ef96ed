/* broker.h - isopod-broker's state, passed explicitly to its modules: the
 * HTTP(S) proxy (lib/proxy.c), the DNS forwarder (lib/dnsfwd.c), the
 * ledger (lib/ledger.c), the canary (lib/canary.c) and the policy
 * (lib/policy.c).  bin/isopod-broker.c owns one, its event loop and its
 * exit status.
 *
 * One process, one epoll loop, no threads and no blocking call after
 * start.  Every table is bounded (flows, pending queries, buffers) and
 * every state has a deadline, so a guest can slow its own egress down but
 * never grow the broker.
 *
 * The modules return no status for what must stop the broker (the ledger
 * cannot be written, epoll fails): they record it with bk_fail, which
 * also stops anything new from being served (ledger_full), and the loop
 * exits 111 with it at the end of the round. */
#ifndef ISOPOD_BROKER_H
#define ISOPOD_BROKER_H

#include "canary.h"
#include "ledger.h"
#include "policy.h"

#include <netinet/in.h>
#include <stdint.h>

#define BK_RESOLVE_MS 3000

/* What an epoll event is about: data.ptr points at one of these. */
enum bk_kind { BK_LISTEN, BK_DNS, BK_SIG, BK_GUEST, BK_UP, BK_RES, BK_PEND };

struct bk_ep {
	enum bk_kind kind;
	void *obj;
};

struct flow;
struct pend;

struct broker {
	struct in_addr listen;
	unsigned proxy_port, dns_port;
	struct sockaddr_in resolver;
	struct policy pol;
	struct policy_host host;  /* the host's own addresses, cached */
	int no_proxy;
	struct ledger ledger;
	int ep, lfd, ufd, sfd;    /* epoll, proxy listener, DNS, signals (-1) */
	int lfd_paused;           /* out of fds: not accepting until lfd_resume */
	int64_t lfd_resume;
	struct flow *flows, *dead_flows; /* dead: freed at the end of a round */
	struct pend *pends, *dead_pends;
	int nflows, npend;
	int bulk_pipes;           /* relay pipes grown to their bulk size (proxy.c) */
	struct bk_ep elisten, edns, esig;
	struct canary canary;     /* canary.port 0: no canary */
	char fatal[512];          /* the first reason to stop (exit 111), or "" */
};

/* Record the first reason to stop; the broker serves nothing new after it. */
__attribute__((format(printf, 2, 3))) void bk_fail(struct broker *b, const char *fmt, ...);

/* One ledger line; a failure to write it is fatal (bk_fail). */
void bk_ledger(struct broker *b, const struct ledger_rec *r);
/* A failure of the ledger (ledger.failed) becomes the reason to stop. */
void bk_ledger_check(struct broker *b);

/* Nothing new is served: the ledger is full, or the broker is stopping. */
int bk_full(const struct broker *b);

/* epoll_ctl ADD / MOD of fd for e; 0, or -1 (and bk_fail). */
int bk_ep_add(struct broker *b, int fd, struct bk_ep *e, uint32_t ev);
int bk_ep_mod(struct broker *b, int fd, struct bk_ep *e, uint32_t ev);

/* close(*fd) when open; *fd = -1. */
void bk_closefd(int *fd);

/* A non-blocking socket of type (SOCK_STREAM: listening) bound to
 * addr:*port (0: any; *port gets the one bound).  The fd, or -1 with errno
 * kept (EADDRINUSE: the port is taken, bind()'s answer only: listen()'s
 * becomes EIO) and the failure in msg. */
int bk_bind(struct in_addr addr, int type, unsigned *port, char *msg, size_t msz);

/* Once listening, before the first byte of the guest's is read: the
 * broker's own seccomp filter (no_new_privs first), for the rest of its
 * life.  0, or -1 with errno. */
int bk_lock_down(void);

/* The jail egress chain's proof, by behaviour (isopod-netsetup(8), JAIL
 * EGRESS): one datagram to BK_JAIL_PROBE_PORT on 127.0.0.1, which the
 * chain's jail_out drops for a jail uid (NF_DROP on the local output path:
 * sendto fails with EPERM).  0 when the kernel refused it; -1 with msg when
 * it went out (this uid is not in the chain: the range changed since
 * isopod-netsetup ran, or netsetup predates it) or failed otherwise. */
#define BK_JAIL_PROBE_PORT 9 /* discard */
int bk_jail_probe(char *msg, size_t msz);

#endif
