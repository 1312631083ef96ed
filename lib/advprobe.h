/* advprobe.h - between the adverse suite's probe runner (lib/advprobe.c),
 * its classes of spoofing, ARP, IPv6 and DNS rebinding (lib/advclass.c)
 * and the readers of the host's evidence (lib/advevid.c); see adverse.h. */
#ifndef ISOPOD_ADVPROBE_H
#define ISOPOD_ADVPROBE_H

#include "adverse.h"
#include "ruleset.h"
#include "tcfilter.h"

#include <stdint.h>

/* What the sniffer counted for one probe. */
struct seen {
	long in, out, back, payload, drops;
};

/* A probe: what the guest runs and what the host must see. */
struct probe {
	const char *cls;
	char name[128];
	int proto;              /* IPPROTO_TCP/UDP/ICMP; 0: no network (none) */
	char addr[64];
	int port;               /* TCP/UDP port; -1 any */
	const char *tool;       /* the guest program */
	char control[1024], attempt[1024];
	char ledger_name[128];  /* a refusal due in the ledger ("" none) */
	const char *ledger_kind;
	int ledger_port;        /* its port, the probe's own token (0: any) */
	char leak[64];          /* nothing at all may leave for it ("" none) */
	char needle[64];        /* bytes that must not leave ("" none) */
	int nonic;              /* class none: host evidence from the record */
	int broker;             /* the target is the slot's broker: its answer (a refusal) is due */
	struct xev *x;          /* a class with evidence of its own (spoofing, ARP, IPv6,
				 * rebinding): its counts stand for the packet socket's */
};

/* The evidence of the classes that the packet socket's match (the guest's
 * own IPv4 source to the target) cannot see: its own packet socket
 * (before: opened; after: counted), and whatever else after() checks. */
struct xev {
	int (*after)(struct adv *a, const struct avm *vm, struct xev *x); /* 0: evidence present */
	int fd;
	long in, out, back;
	json_t *ev;             /* merged into the evidence step */
	char why[200];          /* why after() found the evidence missing */
	void *ctx;
	/* The tap filter's counter (TCF_*) the class's frames must move, -1
	 * none (the broker's flow: passed to it, as any broker probe).  by
	 * names the enforcement when it moved: "tc" where the filter drops
	 * them (spoofed sources: TCF_SPOOF; IPv6: TCF_NONIP); ARP passes the
	 * filter by design (TCF_ARP), so its enforcement is the host's
	 * neighbour table that after() reads ("neighbours"). */
	int tc_reason;
	const char *by;
};
/* The enforcement counters of a tap, read around a probe: its tc filter's
 * (by verdict and reason) and isopod's drop rules'. */
struct counters {
	int tc_ok;                       /* the tap's filter is ours and its counters read */
	uint64_t tc[TCFILTER_NCOUNT];
	int nft_ok;
	struct ruleset_drop *nft;
	size_t nnft;
};

/* ---- lib/advprobe.c ---- */

/* s as an IPv4 (*af 4) or IPv6 (*af 6) address into a; -1 neither. */
int adv_addr(const char *s, int *af, uint8_t a[16]);
/* p zeroed, of class cls, to addr (proto, port), run by the guest's tool. */
struct probe *adv_probe_new(struct probe *p, const char *cls, int proto, const char *addr,
			    int port, const char *tool);
/* p's control for its protocol from vm: what its mode allows.  -1 none. */
int adv_control_for(struct adv *a, const struct avm *vm, struct probe *p);
/* Run p from vm: its five steps and its verdict into a->probes (nothing
 * after a system failure, nor for a class --class left out). */
void adv_run_probe(struct adv *a, const struct avm *vm, struct probe *p);

/* ---- lib/advclass.c ---- */

/* Open x's own packet socket, right before the guest runs. */
void adv_xev_before(struct xev *x);
/* Answer what waits on the doctor's resolver (fd, an own socket). */
void adv_rebind_serve(struct adv *a, int fd);

/* ---- lib/advevid.c ---- */

void adv_sniff_drain(int fd);
struct seen adv_sniff_count(int fd, const struct avm *vm, const char *addr, int proto, int port,
			    const char *needle, const char *leak);
long long adv_ledger_size(struct adv *a, const struct avm *vm);
int adv_ledger_refused(struct adv *a, const struct avm *vm, long long from, const char *name,
		       const char *kind, int port);
int adv_no_nic(const struct avm *vm, char *why, size_t wsz);
void adv_counters_read(const struct avm *vm, struct counters *c);
json_t *adv_counters_delta(const struct counters *b, const struct counters *e, long *passed,
			   long *dropped, long *ndrop);

#endif
