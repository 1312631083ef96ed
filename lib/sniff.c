/* sniff.c - see sniff.h. */
#include "sniff.h"

#include <net/if_arp.h>
#include <netinet/in.h>
#include <string.h>

static unsigned be16(const uint8_t *p)
{
	return (unsigned)p[0] << 8 | p[1];
}

/* Ports (or the ICMP type) and the payload of a transport header t[0..n). */
static void transport(struct sniff_pkt *pk, const uint8_t *t, size_t n)
{
	pk->payload = t;
	pk->plen = n;
	switch (pk->proto) {
	case IPPROTO_TCP:
		if (n >= 20) {
			size_t off = (size_t)(t[12] >> 4) * 4;

			pk->sport = (int)be16(t);
			pk->dport = (int)be16(t + 2);
			if (off < 20 || off > n)
				off = n;
			pk->payload = t + off, pk->plen = n - off;
		}
		break;
	case IPPROTO_UDP:
		if (n >= 8) {
			pk->sport = (int)be16(t);
			pk->dport = (int)be16(t + 2);
			pk->payload = t + 8, pk->plen = n - 8;
		}
		break;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		if (n >= 4) {
			pk->sport = t[0];
			pk->payload = t + 4, pk->plen = n - 4;
		}
		break;
	default:
		break;
	}
}

int sniff_parse(const uint8_t *p, size_t n, unsigned hatype, struct sniff_pkt *pk)
{
	memset(pk, 0, sizeof *pk);
	pk->sport = pk->dport = -1;
	if (hatype == ARPHRD_ETHER || hatype == ARPHRD_LOOPBACK) {
		unsigned et;

		if (n < 14)
			return -1;
		et = be16(p + 12);
		p += 14, n -= 14;
		if (et == 0x8100) {
			if (n < 4)
				return -1;
			et = be16(p + 2);
			p += 4, n -= 4;
		}
		if (et != 0x0800 && et != 0x86dd)
			return -1;
	}
	if (n < 1)
		return -1;
	if (p[0] >> 4 == 4) {
		size_t hl = (size_t)(p[0] & 15) * 4, tot;

		if (n < 20 || hl < 20 || hl > n)
			return -1;
		tot = be16(p + 2);
		if (tot < hl || tot > n)
			tot = n; /* a lying length: only what was captured */
		pk->af = 4;
		pk->proto = p[9];
		memcpy(pk->src, p + 12, 4);
		memcpy(pk->dst, p + 16, 4);
		/* a later fragment carries no transport header */
		if ((be16(p + 6) & 0x1fff) == 0)
			transport(pk, p + hl, tot - hl);
		else
			pk->payload = p + hl, pk->plen = tot - hl;
		return 0;
	}
	if (p[0] >> 4 == 6) {
		size_t tot;

		if (n < 40)
			return -1;
		tot = 40 + (size_t)be16(p + 4);
		if (tot > n)
			tot = n;
		pk->af = 6;
		pk->proto = p[6];
		memcpy(pk->src, p + 8, 16);
		memcpy(pk->dst, p + 24, 16);
		transport(pk, p + 40, tot - 40);
		return 0;
	}
	return -1;
}

int sniff_payload_has(const struct sniff_pkt *pk, const void *needle, size_t nn)
{
	return nn && pk->payload && pk->plen >= nn && memmem(pk->payload, pk->plen, needle, nn);
}
