/* adverse.h - the doctor's adverse suite (isopod-doctor --adverse): real
 * guests attacking the host's containment (host tools only).
 *
 * lib/adverse.c boots the VMs, checks the host side and builds the report;
 * lib/advprobe.c runs the probes (lib/advclass.c the classes of spoofing,
 * ARP, IPv6 and DNS rebinding) and lib/advevid.c reads the host's evidence
 * (lib/advprobe.h between them).  None exits: a system failure is latched
 * in struct adv (fatal, fatal_code) and adv_run returns -1; the tool
 * reports it and picks the exit status. */
#ifndef ISOPOD_ADVERSE_H
#define ISOPOD_ADVERSE_H

#include "ranges.h"
#include "util.h"
#include "vm.h"

#include <jansson.h>
#include <limits.h>
#include <net/if.h>
#include <stddef.h>

/* ---- the adverse suite (--adverse) --------------------------------------
 *
 * Real guests attack the host's real enforcement.  Each probe is five
 * recorded steps (doc/INTERFACES.md "Doctor report"): liveness right before
 * (the VM's lock held, the agent runs `true`), tooling (the guest program
 * exists and neither it nor its control exits 126/127, by a signal or by
 * the exec's timeout), a control the policy allows through the same tool,
 * the attempt, and the host's evidence: the doctor's packet socket saw the
 * probe arrive on the VM's tap and saw nothing for the target leave any
 * interface (nor an answer go back to the guest), the doctor's own
 * listeners got no hit, and the broker's ledger has its refusal where one
 * is due.  PASS only with liveness, tooling and control ok, the attempt
 * failed and the evidence present; a probe that could not show it ran is
 * ERROR, never a pass. */

#define ADV_MAXVM 4
#define ADV_MAXOWN 24
#define ADV_LISTEN_PORT 9 /* the doctor's own listeners (discard) */
#define ADV_GRACE_MS 200  /* the capture's wait after an attempt ends */

struct avm {
	char id[VM_ID_SZ], mode[16], tap[IFNAMSIZ], gw[16], guest[16];
	int slot, ifindex, ours;
	char mac[18];             /* the slot's MAC (aa:bb:...), "" without a NIC */
};

/* A socket the doctor owns on a target: any hit on it is the probe arriving. */
struct own {
	char addr[64];
	int port, proto, fd;
	long hits;
	int rebind;                /* the doctor's resolver (DNS rebinding), not a target */
};

struct adv {
	struct avm vm[ADV_MAXVM];
	int nvm;
	struct own own[ADV_MAXOWN];
	int nown;
	int sniff;                 /* AF_PACKET, every interface of this netns */
	char libexec[PATH_MAX];
	const char *meta, *public_addr, *open_control, *nc, *allow;
	char gwhost[64];           /* the host's default gateway */
	char hostaddr[8][64];
	int nhost, udp_port, tmo;  /* tmo: a probe program's own timeout, s */
	json_t *probes, *warnings;
	int pass, fail, error;
	char fatal[1024];          /* the first system failure ("" none) */
	int fatal_code;            /* its exit status class (EX_SYS, EX_USAGE) */
	const char *classes;       /* --class: the classes to run (NULL: all) */
	const char *v6_ula, *v6_global; /* the IPv6 class's ULA and global targets */
	int want_peers;            /* two networked VMs are due: other-vm may not be empty */
	int rebind_port;           /* the doctor's resolver on 127.0.0.1 (0: none) */
	long rebind_answers;       /* rebind names it answered */
};

struct adv_opts {
	const char *vmref, *modes;
};

/* Run the suite: *report the doctor's report ("verdict": pass, fail or
 * error).  -1 (nothing reported) on a system failure, a->fatal saying it.
 * a: the targets and options filled in, probes and warnings arrays. */
int adv_run(struct adv *a, const struct adv_opts *op, json_t **report);

/* The host's default gateway (IPv4, /proc/net/route) into out, or "". */
void adv_default_gateway(char *out, size_t sz);

/* The host's own IPv4 addresses (not loopback, not a tap's gateway). */
void adv_host_addrs(struct adv *a);

/* ---- between lib/adverse.c and lib/advprobe.c ---- */

/* Latch the first system failure (message as die's: a trailing ':' adds
 * strerror(errno)); later ones are dropped. */
__attribute__((format(printf, 3, 4))) void adv_fatal(struct adv *a, int code, const char *fmt, ...);

/* Run a tool of ours with stdin from in (PROC_NULL: none) and its stdout
 * read as one JSON object (NULL when it printed none); *st its status.
 * After a failure (a->fatal set) it runs nothing: NULL, *st EX_SYS. */
json_t *adv_tool_json(struct adv *a, char **av, int in, int *st);
/* The same, with env ("NAME=VALUE"s, NULL-ended, or NULL) added to the
 * tool's environment (struct proc_spec's env), the doctor's own unchanged. */
json_t *adv_tool_json_env(struct adv *a, char **av, char *const *env, int in, int *st);

/* The doctor's own listener on addr:port (TCP and UDP).  -1 with errno. */
int adv_own_open(struct adv *a, const char *addr, int port, int proto);
int adv_own_has(const struct adv *a, const char *addr, int proto);

/* The probes of a VM with a network (again: a second VM of its mode, the
 * way back only) and of a VM without one. */
void adv_probes_net(struct adv *a, const struct avm *vm, const struct range *allow, size_t nallow,
		    int again);
void adv_probes_none(struct adv *a, const struct avm *vm);

/* ---- lib/advhost.c: host checks ---- */

/* Tap k's ingress filter is ours, loaded for its slot (mode). */
json_t *adv_tc_check(int k, const char *mode);
/* Tap k's fail-closed routing by what it does: the kernel asked how a
 * guest's packet with the filter's mark alone (the table did not judge
 * it) to a host address and to the public target is routed must refuse
 * it.  listed: the blackhole rule was found in the listing. */
json_t *adv_route_check(const struct adv *a, int k, int listed);
/* Tap k's broker answers, when a VM is on the slot (its QEMU holds the tap:
 * carrier on; any VM, the doctor's or not): a DNS query of class CH (which
 * a broker refuses itself, never forwards) to the gateway's broker port
 * gets a reply within 2 s (one retry).  A free slot has no broker: ok. */
json_t *adv_broker_check(int k, const char *mode);
/* The live tables, routing rules and filters against isopod-netsetup's
 * record (lib/netstate.h); when: "before" or "after" the probes. */
json_t *adv_netstate_check(const char *when);

/* ---- the classes of spoofing, ARP, IPv6 and DNS rebinding (advclass.c;
 * adv_class_on and adv_probe_missing: advprobe.c) ---- */

/* The names the doctor's resolver answers: ip-A-B-C-D.ADV_REBIND_ZONE is
 * A.B.C.D.  Its filtered VMs allow *.ADV_REBIND_ZONE and their brokers ask
 * it (ISOPOD_RESOLVER), so no outside DNS is involved. */
#define ADV_REBIND_ZONE "rebind.isopod.invalid"

/* Is class cls to run (--class)? */
int adv_class_on(const struct adv *a, const char *cls);

/* Open the doctor's resolver on 127.0.0.1 (an own socket, served while a
 * tool runs): a->rebind_port.  -1 with errno. */
int adv_rebind_open(struct adv *a);

/* The new classes' probes of a VM with a network. */
void adv_probes_net2(struct adv *a, const struct avm *vm);

/* An ERROR probe of class cls that could not run (no target, a class of
 * lib/suite.h the VM never produced): never a silent pass. */
void adv_probe_missing(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		       const char *why);

#endif
