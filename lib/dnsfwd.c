/* dnsfwd.c - isopod-broker's DNS forwarder (see dnsfwd.h). */
#include "dnsfwd.h"
#include "allow.h"
#include "dns.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

/* One guest DNS query forwarded to the resolver. */
struct pend {
	struct bk_ep e;
	int fd;
	struct sockaddr_in from;
	uint16_t gid, qid, qtype;
	struct dns_query q;       /* for the SERVFAIL of a timeout */
	uint8_t qraw[DNS_QUESTION_MAX];
	char name[DNS_NAME_MAX + 1];
	int64_t start, deadline;
	size_t up;
	int dead;
	struct pend *prev, *next;
};

static void answer(struct broker *b, const struct sockaddr_in *to, const uint8_t *query,
		   const struct dns_query *q, int rcode)
{
	uint8_t out[DNS_QUESTION_MAX];
	size_t n = dns_reply_rcode(out, sizeof out, query, q, rcode);

	if (n)
		(void)!sendto(b->ufd, out, n, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof *to);
}

/* A query's ledger line: allowed ones name the resolver. */
static void note(struct broker *b, const char *name, uint32_t addr, uint64_t up, uint64_t down,
		 int allowed, const char *reason, int64_t ms, const char *qtype)
{
	bk_ledger(b, &(struct ledger_rec){ .kind = "dns", .name = name, .port = 53, .addr = addr,
					   .up = up, .down = down, .allowed = allowed,
					   .reason = reason, .ms = ms, .qtype = qtype });
}

static void pend_end(struct broker *b, struct pend *p)
{
	bk_closefd(&p->fd);
	p->dead = 1;
	if (p->prev)
		p->prev->next = p->next;
	else
		b->pends = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->next = b->dead_pends;
	b->dead_pends = p;
	b->npend--;
}

static void pend_fail(struct broker *b, struct pend *p, const char *reason)
{
	char tn[16];

	answer(b, &p->from, p->qraw, &p->q, DNS_RC_SERVFAIL);
	note(b, p->name, b->resolver.sin_addr.s_addr, p->up, 0, 1, reason, mono_ms() - p->start,
	     dns_type_name(p->qtype, tn, sizeof tn));
	pend_end(b, p);
}

void dnsfwd_on_answer(struct broker *b, struct bk_ep *e)
{
	struct pend *p = e->obj;
	uint8_t buf[4096];
	ssize_t n;
	char tn[16];

	if (p->dead)
		return;
	n = recv(p->fd, buf, sizeof buf, MSG_TRUNC);
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			pend_fail(b, p, "resolver failed");
		return;
	}
	if ((size_t)n > sizeof buf ||
	    dns_check_reply(buf, (size_t)n, p->qid, p->name, p->qtype) < 0)
		return; /* not our answer (or cut): keep waiting until the deadline */
	buf[0] = (uint8_t)(p->gid >> 8);
	buf[1] = (uint8_t)p->gid;
	(void)!sendto(b->ufd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&p->from,
		      sizeof p->from);
	note(b, p->name, b->resolver.sin_addr.s_addr, p->up, (uint64_t)n, 1, NULL,
	     mono_ms() - p->start, dns_type_name(p->qtype, tn, sizeof tn));
	pend_end(b, p);
}

static void forward(struct broker *b, const struct sockaddr_in *from, const uint8_t *raw,
		    const struct dns_query *q, const char *name)
{
	uint8_t out[DNS_QUESTION_MAX];
	struct pend *p = calloc(1, sizeof *p);
	size_t n;

	if (!p) {
		answer(b, from, raw, q, DNS_RC_SERVFAIL);
		return;
	}
	*p = (struct pend){ .e = { .kind = BK_PEND, .obj = p }, .from = *from, .gid = q->id,
			    .qtype = q->qtype, .q = *q, .start = mono_ms() };
	memcpy(p->qraw, raw, q->qend);
	snprintf(p->name, sizeof p->name, "%s", name);
	p->deadline = p->start + BK_RESOLVE_MS;
	/* The broker's own query: only the checked name and the type leave
	 * (no random id: no query, the failure below). */
	n = rand_bytes(&p->qid, sizeof p->qid) < 0
		    ? 0 : dns_build_query(out, sizeof out, p->qid, name, q->qtype);
	p->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	p->next = b->pends;
	if (b->pends)
		b->pends->prev = p;
	b->pends = p;
	b->npend++;
	if (!n || p->fd < 0 ||
	    connect(p->fd, (struct sockaddr *)&b->resolver, sizeof b->resolver) < 0 ||
	    send(p->fd, out, n, 0) != (ssize_t)n) {
		pend_fail(b, p, "resolver failed");
		return;
	}
	p->up = n;
	if (bk_ep_add(b, p->fd, &p->e, EPOLLIN) < 0)
		pend_fail(b, p, "resolver failed");
}

/* One query from the guest: refused here, or forwarded. */
static void on_query(struct broker *b, const struct sockaddr_in *from, const uint8_t *buf,
		     size_t n)
{
	struct dns_query q;
	char name[DNS_NAME_MAX + 1], tn[16];
	const char *reason = NULL;
	int rc = dns_parse_query(buf, n, &q);

	if (rc < 0)
		return;
	if (rc > 0) {
		answer(b, from, buf, &q, rc);
		note(b, q.name[0] ? q.name : NULL, 0, 0, 0, 0, "malformed query", 0,
		     q.qend ? dns_type_name(q.qtype, tn, sizeof tn) : NULL);
		return;
	}
	dns_type_name(q.qtype, tn, sizeof tn);
	if (q.qclass != DNS_CLASS_IN)
		reason = "not class IN";
	else if (allow_name_norm(name, sizeof name, q.name) < 0)
		reason = "not a host name";
	else if (!policy_name_allowed(&b->pol, name))
		reason = "not in the allowlist";
	if (reason) {
		/* answered here, never forwarded: nothing of it leaves */
		answer(b, from, buf, &q, DNS_RC_REFUSED);
		note(b, q.name, 0, 0, 0, 0, reason, 0, tn);
		return;
	}
	if (bk_full(b)) {
		answer(b, from, buf, &q, DNS_RC_REFUSED);
		note(b, name, 0, 0, 0, 0, "ledger full", 0, tn);
		return;
	}
	if (b->npend >= DNSFWD_MAX_PEND) {
		answer(b, from, buf, &q, DNS_RC_SERVFAIL);
		note(b, name, 0, 0, 0, 1, "too many pending queries", 0, tn);
		return;
	}
	forward(b, from, buf, &q, name);
}

void dnsfwd_on_query(struct broker *b)
{
	for (int k = 0; k < 64; k++) {
		uint8_t buf[4096];
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(b->ufd, buf, sizeof buf, MSG_TRUNC, (struct sockaddr *)&from, &fl);

		if (n < 0)
			return;
		if (fl != sizeof from || from.sin_family != AF_INET)
			continue;
		on_query(b, &from, buf, (size_t)n > sizeof buf ? sizeof buf : (size_t)n);
	}
}

void dnsfwd_sweep(struct broker *b, int64_t now)
{
	struct pend *p, *pn;

	for (p = b->pends; p; p = pn) {
		pn = p->next;
		if (now >= p->deadline)
			pend_fail(b, p, "resolver timed out");
	}
}

void dnsfwd_stop(struct broker *b)
{
	while (b->pends)
		pend_fail(b, b->pends, "broker stopped");
}

void dnsfwd_reap(struct broker *b)
{
	while (b->dead_pends) {
		struct pend *p = b->dead_pends;

		b->dead_pends = p->next;
		free(p);
	}
}
