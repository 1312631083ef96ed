/* advevid.c - the host's evidence the adverse suite's probes read: the
 * packet socket's counts, the broker's ledger, a VM's missing NIC and the
 * enforcement counters (the tap's filter, isopod's drop rules); see
 * advprobe.h. */
#include "advprobe.h"
#include "sniff.h"

#include <linux/if_packet.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Drain the packet socket: everything up to now belongs to no probe. */
void adv_sniff_drain(int fd)
{
	uint8_t b[2048];
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	while (recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0)
		;
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl); /* resets them */
}

/* Count what the packet socket saw since the last drain, for a probe from
 * vm (its tap) to addr (proto, port; port -1: any).  needle: bytes that
 * must not leave (DNS exfiltration), else NULL. */
struct seen adv_sniff_count(int fd, const struct avm *vm, const char *addr, int proto, int port,
			       const char *needle, const char *leak)
{
	struct seen s = { 0 };
	uint8_t b[4096], ta[16], ga[16], la[16];
	int taf = 0, gaf = 0, laf = 0;
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	if (addr && adv_addr(addr, &taf, ta) < 0)
		taf = 0;
	if (leak && adv_addr(leak, &laf, la) < 0)
		laf = 0;
	adv_addr(vm->guest, &gaf, ga);
	for (;;) {
		struct sockaddr_ll ll;
		socklen_t ls = sizeof ll;
		struct sniff_pkt pk;
		ssize_t n = recvfrom(fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&ll, &ls);
		int alen, to_t, from_t, pmatch;

		if (n < 0)
			break;
		if (sniff_parse(b, (size_t)n, ll.sll_hatype, &pk) < 0)
			continue;
		alen = pk.af == 4 ? 4 : 16;
		to_t = taf && pk.af == taf && !memcmp(pk.dst, ta, (size_t)alen);
		from_t = taf && pk.af == taf && !memcmp(pk.src, ta, (size_t)alen);
		pmatch = pk.proto == proto && (port < 0 || pk.dport == port);
		if (ll.sll_pkttype != PACKET_OUTGOING && ll.sll_ifindex == vm->ifindex) {
			/* from the guest, on its tap: the probe reached the host */
			if (pk.af == gaf && !memcmp(pk.src, ga, 4) && (needle ? pmatch : to_t && pmatch))
				s.in++;
		} else if (ll.sll_pkttype == PACKET_OUTGOING) {
			if (ll.sll_ifindex == vm->ifindex) {
				/* an answer from the target's probed port back to the guest */
				if (from_t && pk.proto == proto && (port < 0 || pk.sport == port))
					s.back++;
			} else if (to_t && pmatch) {
				/* (the port too: the brokers' canaries go to their
				 * gateways every second) */
				s.out++;
			} else if (laf && pk.af == laf && !memcmp(pk.dst, la, (size_t)alen)) {
				/* anything for the address the broker was asked for */
				s.out++;
			}
			if (needle && ll.sll_ifindex != vm->ifindex &&
			    sniff_payload_has(&pk, needle, strlen(needle)))
				s.payload++;
		}
	}
	if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl) == 0)
		s.drops = ts.tp_drops;
	return s;
}

/* The ledger of vm: its path into p. */
static int ledger_path(struct adv *a, const struct avm *vm, char *p, size_t psz)
{
	/* (a path over PATH_MAX: its first 64 bytes are the store's) */
	if (pathn(p, psz, "%s/vms/%s/ledger.jsonl", store_home(), vm->id) < 0)
		return adv_fatal(a, EX_USAGE, "path too long: %.64s...", store_home()), -1;
	return 0;
}

/* The ledger's size now: where a probe's lines will start (0 none yet). */
long long adv_ledger_size(struct adv *a, const struct avm *vm)
{
	char p[PATH_MAX];
	struct stat st;

	if (ledger_path(a, vm, p, sizeof p) < 0 || stat(p, &st) < 0)
		return 0;
	return (long long)st.st_size;
}

/* The ledger of vm has a line, written at or after byte from, refusing
 * `name` (kind dns or http) on port (0: any). */
int adv_ledger_refused(struct adv *a, const struct avm *vm, long long from, const char *name,
			  const char *kind, int port)
{
	char p[PATH_MAX], line[4096];
	FILE *f;
	int found = 0;

	if (ledger_path(a, vm, p, sizeof p) < 0 || !(f = fopen(p, "re")))
		return 0;
	if (fseeko(f, (off_t)from, SEEK_SET) < 0) {
		fclose(f);
		return 0;
	}
	while (!found && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		const char *n = json_string_value(json_object_get(j, "name"));
		const char *k = json_string_value(json_object_get(j, "kind"));
		const char *v = json_string_value(json_object_get(j, "verdict"));

		found = n && k && v && !strcmp(n, name) && !strcmp(k, kind) && !strcmp(v, "denied") &&
			(!port || json_integer_value(json_object_get(j, "port")) == port);
		json_decref(j);
	}
	fclose(f);
	return found;
}

/* Does the VM's QEMU have no NIC?  The record's net is null and its
 * command line has no -netdev/-nic.  *why on failure. */
int adv_no_nic(const struct avm *vm, char *why, size_t wsz)
{
	json_t *rec = vm_read(vm->id);
	json_int_t qp = json_integer_value(json_object_get(rec, "qemu_pid"));
	char p[64], b[16384];
	ssize_t n, i;
	int fd, bad = 0;

	if (!rec)
		return snprintf(why, wsz, "no record"), -1;
	if (json_string_value(json_object_get(json_object_get(rec, "net"), "tap"))) {
		json_decref(rec);
		return snprintf(why, wsz, "the record has a network"), -1;
	}
	json_decref(rec);
	snprintf(p, sizeof p, "/proc/%lld/cmdline", (long long)qp);
	if (qp <= 0 || (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return snprintf(why, wsz, "its QEMU (pid %lld) is not there", (long long)qp), -1;
	n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return snprintf(why, wsz, "its QEMU's command line is unreadable"), -1;
	b[n] = 0;
	for (i = 0; i < n; i += (ssize_t)strlen(b + i) + 1)
		bad |= !strcmp(b + i, "-netdev") || !strcmp(b + i, "-nic") || !strcmp(b + i, "-net");
	if (bad)
		return snprintf(why, wsz, "its QEMU has a network device"), -1;
	return 0;
}

void adv_counters_read(const struct avm *vm, struct counters *c)
{
	struct tcfilter_state st;
	char msg[256];

	*c = (struct counters){ 0 };
	if (vm->ifindex > 0 && tcfilter_read(vm->ifindex, &st, msg, sizeof msg) == 0 && st.ours &&
	    st.filters == 1 && st.counts_read) {
		c->tc_ok = 1;
		memcpy(c->tc, st.counts, sizeof c->tc);
	}
	c->nft_ok = ruleset_drops(&c->nft, &c->nnft, msg, sizeof msg) == 0;
}

/* What moved between b and e: the evidence's "tc_filter" (null when the
 * tap's filter could not be read both times) and "nft_drops" (the isopod
 * drop rules whose counters moved); *passed, *dropped (IPv4 drops: not the
 * guest's own IPv6 or other chatter) and *ndrop their sums. */
json_t *adv_counters_delta(const struct counters *b, const struct counters *e, long *passed,
			      long *dropped, long *ndrop)
{
	json_t *ev = json_object(), *tc = json_null(), *nd = json_array();
	size_t i, j;
	int r;

	*passed = *dropped = *ndrop = 0;
	if (b->tc_ok && e->tc_ok) {
		tc = json_object();
		for (r = 0; r < TCFILTER_NCOUNT; r++) {
			long d = (long)(e->tc[r] - b->tc[r]);

			if (!tcfilter_count_names[r][0])
				continue;
			json_object_set_new(tc, tcfilter_count_names[r], json_integer(d));
			if (r == TCF_PASSED)
				*passed += d;
			else if (r != TCF_ARP && r != TCF_NONIP)
				*dropped += d;
		}
	}
	for (i = 0; i < e->nnft; i++)
		for (j = 0; j < b->nnft; j++)
			if (e->nft[i].handle == b->nft[j].handle && !strcmp(e->nft[i].chain, b->nft[j].chain) &&
			    e->nft[i].packets > b->nft[j].packets) {
				long d = (long)(e->nft[i].packets - b->nft[j].packets);

				*ndrop += d;
				json_array_append_new(nd, json_pack("{s:s, s:I, s:I}", "chain", e->nft[i].chain,
								    "handle", (json_int_t)e->nft[i].handle,
								    "packets", (json_int_t)d));
			}
	json_object_set_new(ev, "tc_filter", tc);
	json_object_set_new(ev, "nft_drops", b->nft_ok && e->nft_ok ? nd : (json_decref(nd), json_null()));
	return ev;
}
