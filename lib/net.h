/* net.h - the VM side of isopod's network slots (host tools only).
 *
 * isopod-netsetup (root, once per host boot) makes the taps isopod-tap0..
 * and one /30 per slot; everything here works without privilege from what
 * it left: slot k's gateway is the address on isopod-tapK, its guest the
 * next address, its MAC 02:69:73:00:KH:KL (man isopod-netsetup).
 *
 * The slots are partitioned by mode at netsetup time: the kernel enforces
 * a slot's mode per tap, so a run (no root) picks a slot of its mode and
 * cannot change what that tap may do.  A tap's mode is its ifalias,
 * "isopod filtered" or "isopod open", readable by anybody in
 * /sys/class/net/TAP/ifalias.
 *
 * A slot is in use exactly while its lock file is flock-held: the lock
 * lives on the VM supervisor's fd, so it dies with the VM (no pid files, no
 * timing).  Lock files: $ISOPOD_NET_LOCKS/slot-K, default
 * $ISOPOD_HOME/locks/slot-K; every store that uses the same taps must share
 * the directory. */
#ifndef ISOPOD_NET_H
#define ISOPOD_NET_H

#include <jansson.h>
#include <net/if.h>
#include <stdint.h>

#define NET_TAP_PREFIX "isopod-tap"
#define NET_ALIAS_PREFIX "isopod " /* ifalias = prefix + mode */
#define NET_MAX_SLOTS 1024
/* The canary of `inet isopod`: a UDP datagram a slot's broker sends from
 * gateway:NET_CANARY_PORT+1 to gateway:NET_CANARY_PORT is turned by the
 * table (output hook, stateless) into one to gateway:NET_CANARY_PORT+1,
 * the broker's own canary socket.  It comes back only while the table is loaded: positive evidence
 * an unprivileged process can get (isopod-netsetup(8), FAIL CLOSED). */
#define NET_CANARY_PORT 1054
/* The doctor's own resolver (its DNS rebinding probes) on 127.0.0.1: the
 * one loopback port besides the host's resolver the jail egress chain lets
 * a broker's uid reach (isopod-netsetup(8), JAIL EGRESS).  Privileged
 * (below net.ipv4.ip_unprivileged_port_start, which netsetup checks), and
 * unassigned: only root can listen there, so no local user hears the
 * brokers' queries when no doctor runs (review L3; it was 1052). */
#define NET_DOCTOR_DNS_PORT 952
/* The fail-closed routing rules (isopod-netsetup(8), FAIL CLOSED): per tap
 * at NET_RULE_PREF - 1 (ICMP to its gateway: local) and NET_RULE_PREF
 * (blackholed unless the table set NET_FWMARK); the kernel's `local` rule
 * replaced at NET_LOCAL_PREF by one for packets without the tc filter's
 * mark only, and one for packets with it at NET_LOCAL_LATE_PREF, after
 * the per-tap rules.  A claim checks them (no privilege needed to read
 * rules). */
#define NET_RULE_PREF 10
#define NET_FWMARK 0x10000000u
#define NET_LOCAL_PREF 0
#define NET_LOCAL_LATE_PREF (NET_RULE_PREF + 1)

struct netslot {
	int slot;                 /* -1: none */
	int lock_fd;              /* held flock on slot-K (O_CLOEXEC) */
	char mode[16];            /* "filtered" or "open" (the tap's) */
	char tap[IFNAMSIZ];
	char gw[16], guest[16];
	char addr[20];            /* guest/30, for HELLO's NET_ADDR */
	uint8_t mac[6];
	char macs[18];            /* aa:bb:cc:dd:ee:ff */
	uint32_t mtu;
};

/* "none", "filtered", "open" or "learn".  1 valid, 0 not.  (Never a
 * default: the front end and the doctor refuse "learn" there.) */
int net_mode_valid(const char *mode);
/* The kind of slot a mode runs on: "learn" runs on a filtered slot (its
 * broker lets every name through and records it); the others on their own. */
const char *net_slot_mode(const char *mode);
/* Is IPv6 off on this tap (its disable_ipv6 reads 1, as isopod-netsetup
 * leaves it), or absent from the kernel?  1 yes, 0 no (or unreadable). */
int net_tap_ipv6_off(const char *tap);
/* Number of consecutive taps isopod-tap0.. present (0: netsetup not run). */
int net_ntaps(void);
/* The number of slots (of every mode); 0 with err naming `sudo
 * isopod-netsetup` and `--net none` when no tap is there. */
int net_require_taps(char *err, size_t errsz);
/* The mode of tap k per its ifalias ("filtered", "open"), or "" when it
 * has none (not made by this isopod-netsetup, or not advertised: see
 * NET_ALIAS_UNVERIFIED).  Returns out. */
const char *net_tap_mode(int k, char *out, size_t sz);
/* A busy tap (a VM runs on it) that a failed netsetup could not verify:
 * ifalias "isopod unverified MODE".  No claim takes it (net_tap_mode says
 * ""), and netsetup still knows its running VM's mode (net_tap_kept_mode)
 * until a run verifies it again. */
#define NET_ALIAS_UNVERIFIED NET_ALIAS_PREFIX "unverified "
/* The mode tap k's ifalias names, advertised or unverified; *unverified
 * (when not NULL) set to which.  Returns out. */
const char *net_tap_kept_mode(int k, char *out, size_t sz, int *unverified);
/* 0 when a slot of this mode is free right now (claim's early check; the
 * slot itself is taken by net_take_slot); else an exit class with err:
 * 111 when no tap is there or none has this mode ("no open slots: run
 * `sudo isopod-netsetup --open-slots N`"), 102 "all N open network slots
 * busy" when every slot of the mode is held: its lock by an isopod VM, or
 * its tap open in a process that is not one (err then names the first
 * such slot, its tap and the holder). */
int net_check_free(const char *mode, char *err, size_t errsz);
/* Take the first free slot of that mode (LOCK_EX|LOCK_NB, in order; a
 * slot whose tap another process holds open is skipped, with a warning
 * naming slot, tap and holder appended to warnings when it is not NULL)
 * and describe it.  0, or an exit class with err as net_check_free, and
 * 111 when the tap has no address. */
int net_take_slot(struct netslot *ns, const char *mode, json_t *warnings, char *err, size_t errsz);
/* {"mode", "slot", "tap", "guest_ip", "gateway", "mac"} */
json_t *net_json(const struct netslot *ns, const char *mode);

#endif
