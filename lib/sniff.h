/* sniff.h - what the doctor's packet socket saw, one frame at a time (host
 * tools only; libc only).
 *
 * isopod-doctor watches every interface of its netns with one AF_PACKET
 * socket while a guest probes: a frame from the guest on its tap is the
 * probe reaching the host (seen before tc ingress and netfilter, so it
 * counts even when the tap's filter drops it), and a frame to the target
 * leaving any interface is the probe getting out.  The frames are the
 * guest's bytes: this parser trusts no length in them. */
#ifndef ISOPOD_SNIFF_H
#define ISOPOD_SNIFF_H

#include <stddef.h>
#include <stdint.h>

struct sniff_pkt {
	int af;                  /* 4 or 6 */
	int proto;               /* IPPROTO_* of the (first) next header */
	uint8_t src[16], dst[16];/* network order; 4 bytes used for IPv4 */
	int sport, dport;        /* TCP/UDP ports; ICMP: type in sport; -1 none */
	const uint8_t *payload;  /* the transport payload (inside p), or NULL */
	size_t plen;
};

/* Parse frame p[0..n) captured on an interface of ARP hardware type
 * hatype (ARPHRD_ETHER and ARPHRD_LOOPBACK: an Ethernet header, one
 * 802.1Q tag skipped; anything else: the IP packet itself).  0, or -1
 * when it is not a whole IPv4/IPv6 header. */
int sniff_parse(const uint8_t *p, size_t n, unsigned hatype, struct sniff_pkt *out);

/* 1 when needle[0..nn) occurs in the packet's payload (or, for a
 * fragment or an unknown protocol, anywhere after the IP header). */
int sniff_payload_has(const struct sniff_pkt *pk, const void *needle, size_t nn);

#endif
