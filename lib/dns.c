/* dns.c - see dns.h.  libc only. */

#include "dns.h"

#include <stdio.h>
#include <string.h>

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* Read the name at *off (following compression pointers) into out;
 * *off moves past the name where it was written.  0, or -1 if malformed. */
static int read_name(const uint8_t *p, size_t n, size_t *off, char *out, size_t outsz)
{
	size_t pos = *off, o = 0, wire = 1;
	int jumped = 0;

	for (;;) {
		uint8_t l;

		if (pos >= n)
			return -1;
		l = p[pos];
		if (l == 0) {
			pos++;
			break;
		}
		if ((l & 0xc0) == 0xc0) {
			size_t tgt;

			if (pos + 1 >= n)
				return -1;
			tgt = (size_t)(l & 0x3f) << 8 | p[pos + 1];
			/* strictly backwards: every jump lowers pos, so this ends */
			if (tgt >= pos)
				return -1;
			if (!jumped)
				*off = pos + 2;
			jumped = 1;
			pos = tgt;
			continue;
		}
		if (l & 0xc0) /* 0x40, 0x80: obsolete label types */
			return -1;
		if (pos + 1 + l > n)
			return -1;
		wire += 1 + (size_t)l;
		if (wire > 255)
			return -1;
		if (o) {
			if (o + 1 >= outsz)
				return -1;
			out[o++] = '.';
		}
		for (size_t i = 0; i < l; i++) {
			uint8_t c = p[pos + 1 + i];

			if (c > 0x20 && c < 0x7f && c != '.' && c != '\\') {
				if (o + 1 >= outsz)
					return -1;
				out[o++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
			} else {
				if (o + 4 >= outsz)
					return -1;
				out[o++] = '\\';
				out[o++] = (char)('0' + c / 100);
				out[o++] = (char)('0' + c / 10 % 10);
				out[o++] = (char)('0' + c % 10);
			}
		}
		pos += 1 + (size_t)l;
	}
	if (!outsz)
		return -1;
	out[o] = '\0';
	if (!jumped)
		*off = pos;
	return 0;
}

int dns_parse_query(const uint8_t *p, size_t n, struct dns_query *q)
{
	size_t off = DNS_HDR;

	memset(q, 0, sizeof *q);
	if (n < DNS_HDR)
		return -1;
	q->id = get16(p);
	q->flags = get16(p + 2);
	if (q->flags & 0x8000) /* QR: a response, never answer it */
		return -1;
	if ((q->flags >> 11 & 0xf) != 0) /* opcode other than QUERY */
		return DNS_RC_NOTIMP;
	if (get16(p + 4) != 1)
		return DNS_RC_FORMERR;
	/* Answer and authority sections have no place in a query; additional
	 * records (EDNS OPT) are allowed and ignored. */
	if (get16(p + 6) || get16(p + 8))
		return DNS_RC_FORMERR;
	if (read_name(p, n, &off, q->name, sizeof q->name) < 0 || off + 4 > n) {
		q->name[0] = '\0';
		return DNS_RC_FORMERR;
	}
	q->qtype = get16(p + off);
	q->qclass = get16(p + off + 2);
	off += 4;
	if (off > DNS_QUESTION_MAX) { /* a question with pointers into junk */
		q->name[0] = '\0';
		return DNS_RC_FORMERR;
	}
	q->qend = off;
	return 0;
}

size_t dns_reply_rcode(uint8_t *out, size_t outsz, const uint8_t *query,
		       const struct dns_query *q, int rcode)
{
	size_t len = q->qend ? q->qend : DNS_HDR;
	uint16_t fl;

	if (outsz < len || q->qend > DNS_QUESTION_MAX)
		return 0;
	if (q->qend)
		memcpy(out, query, q->qend);
	put16(out, q->id);
	/* QR, the query's opcode and RD, RA, rcode */
	fl = (uint16_t)(0x8000 | (q->flags & 0x7900) | 0x0080 | (rcode & 0xf));
	put16(out + 2, fl);
	put16(out + 4, q->qend ? 1 : 0);
	put16(out + 6, 0);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return len;
}

size_t dns_build_query(uint8_t *out, size_t outsz, uint16_t id, const char *name, uint16_t qtype)
{
	size_t o = DNS_HDR, nl = strlen(name);
	const char *s = name;

	if (outsz < DNS_HDR + nl + 2 + 4 || nl + 2 > 255)
		return 0;
	memset(out, 0, DNS_HDR);
	put16(out, id);
	put16(out + 2, 0x0100); /* RD */
	put16(out + 4, 1);
	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);

		if (l == 0 || l > 63)
			return 0;
		for (size_t i = 0; i < l; i++)
			if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f || s[i] == '\\')
				return 0;
		out[o++] = (uint8_t)l;
		memcpy(out + o, s, l);
		o += l;
		s += l;
		if (*s == '.') {
			s++;
			if (!*s) /* a trailing dot: not in our form */
				return 0;
		}
	}
	out[o++] = 0;
	put16(out + o, qtype);
	put16(out + o + 2, DNS_CLASS_IN);
	return o + 4;
}

/* Header and question of a reply to (id, name, qtype); the offset past
 * the question, or 0. */
static size_t reply_question(const uint8_t *p, size_t n, uint16_t id, const char *name,
			     uint16_t qtype)
{
	char qn[DNS_NAME_MAX + 1];
	size_t off = DNS_HDR;

	if (n < DNS_HDR || get16(p) != id || !(p[2] & 0x80) || (p[2] >> 3 & 0xf) != 0 ||
	    get16(p + 4) != 1)
		return 0;
	if (read_name(p, n, &off, qn, sizeof qn) < 0 || off + 4 > n)
		return 0;
	if (strcmp(qn, name) != 0 || get16(p + off) != qtype || get16(p + off + 2) != DNS_CLASS_IN)
		return 0;
	return off + 4;
}

int dns_check_reply(const uint8_t *p, size_t n, uint16_t id, const char *name, uint16_t qtype)
{
	return reply_question(p, n, id, name, qtype) ? 0 : -1;
}

/* One resource record at *off: owner, type, rdata bounds. */
struct rr {
	char owner[DNS_NAME_MAX + 1];
	uint16_t type, class;
	size_t rdata, rdlen;
};

static int read_rr(const uint8_t *p, size_t n, size_t *off, struct rr *r)
{
	if (read_name(p, n, off, r->owner, sizeof r->owner) < 0 || *off + 10 > n)
		return -1;
	r->type = get16(p + *off);
	r->class = get16(p + *off + 2);
	r->rdlen = get16(p + *off + 8);
	r->rdata = *off + 10;
	if (r->rdata + r->rdlen > n)
		return -1;
	*off = r->rdata + r->rdlen;
	return 0;
}

int dns_parse_a(const uint8_t *p, size_t n, uint16_t id, const char *name, uint32_t *addrs,
		int max, int *rcode)
{
	char cur[DNS_NAME_MAX + 1], tgt[DNS_NAME_MAX + 1];
	size_t start = reply_question(p, n, id, name, DNS_T_A), off;
	unsigned an, i;
	int hops, found = 0;
	struct rr r;

	if (!start || strlen(name) > DNS_NAME_MAX)
		return -1;
	*rcode = p[3] & 0xf;
	an = get16(p + 6);
	/* Validate the whole answer section once. */
	off = start;
	for (i = 0; i < an; i++)
		if (read_rr(p, n, &off, &r) < 0)
			return -1;
	/* Follow the CNAME chain from name, one pass per hop. */
	strcpy(cur, name);
	for (hops = 0; hops < 8; hops++) {
		int moved = 0;

		off = start;
		for (i = 0; i < an && !moved; i++) {
			read_rr(p, n, &off, &r);
			if (r.type == DNS_T_CNAME && r.class == DNS_CLASS_IN && !strcmp(r.owner, cur)) {
				size_t t = r.rdata;

				if (read_name(p, r.rdata + r.rdlen, &t, tgt, sizeof tgt) < 0)
					return -1;
				strcpy(cur, tgt);
				moved = 1;
			}
		}
		if (!moved)
			break;
	}
	off = start;
	for (i = 0; i < an && found < max; i++) {
		read_rr(p, n, &off, &r);
		if (r.type == DNS_T_A && r.class == DNS_CLASS_IN && r.rdlen == 4 &&
		    !strcmp(r.owner, cur)) {
			uint32_t a;

			memcpy(&a, p + r.rdata, 4);
			addrs[found++] = a;
		}
	}
	return found;
}

const char *dns_type_name(uint16_t t, char *buf, size_t sz)
{
	static const struct {
		uint16_t t;
		const char *s;
	} names[] = {
		{ DNS_T_A, "A" },     { DNS_T_NS, "NS" },     { DNS_T_CNAME, "CNAME" },
		{ DNS_T_SOA, "SOA" }, { DNS_T_PTR, "PTR" },   { DNS_T_MX, "MX" },
		{ DNS_T_TXT, "TXT" }, { DNS_T_AAAA, "AAAA" }, { DNS_T_SRV, "SRV" },
		{ DNS_T_OPT, "OPT" }, { DNS_T_HTTPS, "HTTPS" }, { DNS_T_ANY, "ANY" },
	};

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].t == t) {
			snprintf(buf, sz, "%s", names[i].s);
			return buf;
		}
	snprintf(buf, sz, "TYPE%u", (unsigned)t);
	return buf;
}
