/* sniff_test.c - the doctor's frame parser (lib/sniff.c) on whole, cut and
 * lying frames: guest bytes, so every length in them is checked. */
#include "../../lib/sniff.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <stdlib.h>

#include "tap.h"

/* An Ethernet + IPv4 + UDP frame to 169.254.169.254:53, payload "xexfilx". */
static size_t udp4(uint8_t *f)
{
	static const uint8_t h[] = {
		2, 0, 0, 0, 0, 1, 2, 0x69, 0x73, 0, 0, 0, 0x08, 0x00, /* eth */
		0x45, 0, 0, 35, 0, 1, 0, 0, 64, 17, 0, 0, 10, 213, 0, 2, 169, 254, 169, 254,
		0x30, 0x39, 0, 53, 0, 15, 0, 0, 'x', 'e', 'x', 'f', 'i', 'l', 'x',
	};
	memcpy(f, h, sizeof h);
	return sizeof h;
}

int main(void)
{
	uint8_t f[128], g[128];
	struct sniff_pkt pk;
	size_t n = udp4(f), k;
	static const uint8_t meta[4] = { 169, 254, 169, 254 };
	int bad = 0;

	ok(sniff_parse(f, n, ARPHRD_ETHER, &pk) == 0 && pk.af == 4 && pk.proto == IPPROTO_UDP &&
		   pk.dport == 53 && pk.sport == 12345 && !memcmp(pk.dst, meta, 4),
	   "an Ethernet IPv4 UDP frame: addresses and ports");
	ok(sniff_payload_has(&pk, "exfil", 5) && !sniff_payload_has(&pk, "exfilxx", 7),
	   "its payload is searched, and only its payload");
	ok(sniff_parse(f + 14, n - 14, ARPHRD_NONE, &pk) == 0 && pk.dport == 53,
	   "the same packet on an L3 device (no Ethernet header)");
	/* every cut: never read past the end (ASan), never a port from a cut header */
	for (k = 0; k < n; k++) {
		uint8_t *c = malloc(k ? k : 1);

		memcpy(c, f, k);
		if (sniff_parse(c, k, ARPHRD_ETHER, &pk) == 0 && k < 14 + 20)
			bad++;
		if (k < 14 + 28 && pk.dport == 53)
			bad++;
		free(c);
	}
	ok(!bad, "a frame cut anywhere: no header from bytes that are not there");
	memcpy(g, f, n);
	g[14 + 2] = 0xff, g[14 + 3] = 0xff; /* total length 65535 */
	ok(sniff_parse(g, n, ARPHRD_ETHER, &pk) == 0 && pk.payload + pk.plen <= g + n,
	   "a lying total length: only the captured bytes");
	memcpy(g, f, n);
	g[14] = 0x4f; /* IHL 60 > what is there */
	ok(sniff_parse(g, n, ARPHRD_ETHER, &pk) == -1, "an IHL past the frame: refused");
	memcpy(g, f, n);
	g[14 + 6] = 0x00, g[14 + 7] = 0x10; /* a later fragment */
	ok(sniff_parse(g, n, ARPHRD_ETHER, &pk) == 0 && pk.dport == -1,
	   "a later fragment: no ports read from its data");
	memcpy(g, f, n);
	g[12] = 0x08, g[13] = 0x06; /* ARP */
	ok(sniff_parse(g, n, ARPHRD_ETHER, &pk) == -1, "not IP: refused");
	return tap_done();
}
