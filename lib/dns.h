/* dns.h - the little DNS isopod-broker needs (libc only, fuzzed by
 * fuzz/dns_fuzz.c): parse a guest's query, answer it with an error code
 * locally, build the broker's own query, check a resolver's reply and pull
 * the A records (after CNAMEs) out of it.
 *
 * Everything here reads bytes a guest or the internet chose: every length
 * is bounded by the buffer it came in, compression pointers must point
 * strictly backwards (so a name always ends), and names longer than 255
 * wire bytes are malformed.  Names come out in presentation form,
 * lowercased, without the trailing dot; a byte that has no place in a host
 * name ('.', '\\', controls, non-ASCII) is written as \DDD, so such a name
 * can never pass a host-name check by accident. */
#ifndef ISOPOD_DNS_H
#define ISOPOD_DNS_H

#include <stddef.h>
#include <stdint.h>

#define DNS_HDR 12
#define DNS_NAME_MAX 1024 /* presentation form, escapes included; + NUL */
#define DNS_QUESTION_MAX (DNS_HDR + 255 + 4)

enum {
	DNS_T_A = 1,
	DNS_T_NS = 2,
	DNS_T_CNAME = 5,
	DNS_T_SOA = 6,
	DNS_T_PTR = 12,
	DNS_T_MX = 15,
	DNS_T_TXT = 16,
	DNS_T_AAAA = 28,
	DNS_T_SRV = 33,
	DNS_T_OPT = 41,
	DNS_T_HTTPS = 65,
	DNS_T_ANY = 255
};
#define DNS_CLASS_IN 1

enum {
	DNS_RC_NOERROR = 0,
	DNS_RC_FORMERR = 1,
	DNS_RC_SERVFAIL = 2,
	DNS_RC_NXDOMAIN = 3,
	DNS_RC_NOTIMP = 4,
	DNS_RC_REFUSED = 5
};

struct dns_query {
	uint16_t id, flags, qtype, qclass;
	size_t qend;                /* offset just past the question; 0 if none */
	char name[DNS_NAME_MAX + 1];
};

/* Parse a query of n bytes.  -1: drop it silently (shorter than a header,
 * or a response: answering those could make two servers loop); 0: one
 * well-formed standard query in q; > 0: the rcode to answer with
 * (FORMERR, NOTIMP) through dns_reply_rcode, q->id and q->qend set. */
int dns_parse_query(const uint8_t *p, size_t n, struct dns_query *q);

/* The local answer to a query: its header (id, opcode, RD kept; QR, RA
 * set; rcode), its question when q->qend > 0, no records.  Returns the
 * length, 0 when out is too small. */
size_t dns_reply_rcode(uint8_t *out, size_t outsz, const uint8_t *query,
		       const struct dns_query *q, int rcode);

/* A recursive query (RD) for name (presentation form, no escapes, labels
 * of 1..63 bytes, 255 wire bytes at most), class IN.  Length, or 0 when the
 * name cannot be encoded or out is too small. */
size_t dns_build_query(uint8_t *out, size_t outsz, uint16_t id, const char *name, uint16_t qtype);

/* 0 when p is a well-formed reply to our query (id, QR, one question equal
 * to name/qtype/IN); -1 otherwise (ignore it: it may be forged). */
int dns_check_reply(const uint8_t *p, size_t n, uint16_t id, const char *name, uint16_t qtype);

/* The IPv4 addresses (network byte order) that a checked reply to an A
 * query for name gives, following CNAME records inside the answer section
 * (8 hops at most).  Returns how many (at most max) with *rcode set, or
 * -1 when the reply is malformed. */
int dns_parse_a(const uint8_t *p, size_t n, uint16_t id, const char *name, uint32_t *addrs,
		int max, int *rcode);

/* "A", "AAAA", ... or "TYPE<n>", into buf (>= 12 bytes). */
const char *dns_type_name(uint16_t t, char *buf, size_t sz);

#endif
