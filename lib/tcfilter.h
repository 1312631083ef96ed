/* tcfilter.h - the tc ingress filter of isopod's taps (man isopod-netsetup,
 * FAIL CLOSED): an eBPF program (lib/tapfilter.bpf.c, built into this
 * library) attached with cls_bpf in direct-action mode to each tap's
 * clsact ingress, below netfilter, so flushing or replacing nftables does
 * not take it away.  Attached by isopod-netsetup only (CAP_NET_ADMIN,
 * CAP_BPF; lib/tcfilter.c, libbpf); read back by it and by every claim of a
 * slot (lib/tcread.c, raw syscalls, linked into every host tool).
 * Functions return 0 or -errno and write the reason to msg; they never
 * exit. */
#ifndef ISOPOD_TCFILTER_H
#define ISOPOD_TCFILTER_H

#include <stddef.h>
#include <stdint.h>

#define TCFILTER_PROG "isopod_tap"  /* the program's name, as the kernel keeps it */
#define TCFILTER_PRIO 1             /* our filter's priority and handle on ingress */
#define TCFILTER_HANDLE 1
/* A slot's gateway services as the filter knows them (isopod-netsetup's
 * table redirects port 53 to the broker's DNS port), and the bit it sets
 * on every IPv4 packet it passes (man isopod-netsetup, FAIL CLOSED). */
#define TCFILTER_PORT_DNS 53
#define TCFILTER_PORT_BROKER_DNS 1053
#define TCFILTER_PORT_BROKER_HTTP 3128
#define TCFILTER_TAPMARK 0x20000000u

/* One slot's parameters, frozen into the program's .rodata before load
 * (addresses and ports in network byte order).  The same layout is the
 * program's `cfg`. */
struct tapcfg {
	uint32_t gw;        /* the slot's gateway address */
	uint32_t bcast;     /* the slot's /30 broadcast */
	uint32_t open;      /* 1 open slot, 0 filtered */
	uint16_t port_dns;  /* 53, which the table redirects to the broker */
	uint16_t port_bdns; /* the broker's DNS port */
	uint16_t port_http; /* the broker's HTTP proxy port, 0 for none */
	uint16_t pad;
	uint32_t guest;     /* the slot's guest address: the only source let in */
	uint8_t mac[6];     /* the slot's guest MAC: the only frame source let in */
	uint16_t pad2;
	uint32_t mark;      /* or'ed into every IPv4 packet passed (host order) */
};

/* The filter's counters (its .bss `counts`, by verdict and reason; the
 * same numbering as lib/tapfilter.bpf.c's TCF_*). */
#define TCFILTER_NCOUNT 8
enum {
	TCF_PASSED = 0, /* IPv4 passed on (marked) */
	TCF_ARP,        /* ARP passed on */
	TCF_NONIP,      /* dropped: VLAN, IPv6, other ethertypes, malformed */
	TCF_SPOOF,      /* dropped: another source address or MAC */
	TCF_MARTIAN,    /* dropped: 0/8, 127/8, broadcast, multicast */
	TCF_LOCAL,      /* dropped: for the host (its gateway's other ports, another address) */
	TCF_FORWARD,    /* dropped: to be forwarded from a filtered slot */
};
/* Their names in reports, indexed as above ("" past the last). */
extern const char *const tcfilter_count_names[TCFILTER_NCOUNT];

/* What the tap's ingress hook holds, read back from the kernel. */
struct tcfilter_state {
	unsigned filters;   /* filters on the tap's ingress (ours should be the only one) */
	int ours;           /* one at TCFILTER_PRIO/HANDLE, kind bpf */
	int direct_action;  /* its da flag */
	int skip_sw;        /* its skip_sw flag (offloaded only: not ours) */
	uint32_t prog_id;
	uint8_t tag[8];
	char name[16];      /* the program's name (unprivileged: as the dump names it) */
	int cfg_read;       /* 1: cfg is the program's .rodata (the kernel lets only
			       CAP_SYS_ADMIN have the program, so 0 otherwise) */
	struct tapcfg cfg;
	int counts_read;    /* 1: counts is the program's .bss (CAP_SYS_ADMIN too) */
	uint64_t counts[TCFILTER_NCOUNT];
};

/* The parameters of slot k whose gateway is gw (host order): the one
 * definition, used to load the filter and to check it. */
void tcfilter_slot_cfg(unsigned k, uint32_t gw, int open, struct tapcfg *cfg);

/* Load the program for one tap with cfg and attach it to ifindex's clsact
 * ingress (the qdisc made if missing), replacing ours in place: a rerun
 * never stacks a second one nor leaves the tap without one. */
int tcfilter_attach(int ifindex, const struct tapcfg *cfg, uint8_t tag[8], char *msg, size_t len);

/* Read the tap's ingress filters back into st (lib/tcread.c). */
int tcfilter_read(int ifindex, struct tcfilter_state *st, char *msg, size_t len);

/* Is st ours alone: one filter, direct-action, not skip_sw, our program's
 * name, the tag (unless NULL), and, when st->cfg_read, loaded with want?
 * 1 yes; 0 no, msg says what is there instead. */
int tcfilter_judge(const struct tcfilter_state *st, const struct tapcfg *want, const uint8_t *tag,
		   char *msg, size_t len);

/* Both, and judge: 1 when the tap's ingress holds ours alone, in
 * direct-action mode, not skip_sw, with our program's name, the tag
 * just loaded (tag) and cfg in its .rodata; 0 when not (msg says what is
 * there); -errno on failure.  *st: what was read back. */
int tcfilter_install(int ifindex, const struct tapcfg *cfg, uint8_t tag[8], struct tcfilter_state *st,
		     char *msg, size_t len);

#endif
