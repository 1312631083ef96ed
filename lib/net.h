/* net.h - the VM side of isopod's network slots (host tools only).
 *
 * isopod-netsetup (root, once per host boot) makes the taps isopod-tap0..N-1
 * and one /30 per slot; everything here works without privilege from what
 * it left: slot k's gateway is the address on isopod-tapK, its guest the
 * next address, its MAC 02:69:73:00:KH:KL (man isopod-netsetup).
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
#define NET_MAX_SLOTS 1024

struct netslot {
	int slot;                 /* -1: none */
	int lock_fd;              /* held flock on slot-K (O_CLOEXEC) */
	char tap[IFNAMSIZ];
	char gw[16], guest[16];
	char addr[20];            /* guest/30, for HELLO's NET_ADDR */
	uint8_t mac[6];
	char macs[18];            /* aa:bb:cc:dd:ee:ff */
	uint32_t mtu;
};

/* "none" or "open" (filtered: not implemented yet).  1 valid, 0 not. */
int net_mode_valid(const char *mode);
/* Number of consecutive taps isopod-tap0.. present (0: netsetup not run). */
int net_ntaps(void);
/* Dies 111 naming `sudo isopod-netsetup` and `--net none` when no tap is
 * there; returns the number of slots. */
int net_require_taps(void);
/* Dies 102 "all N slots busy" when every slot lock is held right now
 * (claim's early check; the slot itself is taken by net_take_slot). */
void net_check_free(void);
/* Take the first free slot (LOCK_EX|LOCK_NB, in order) and describe it;
 * dies 102 "all N slots busy", 111 when the tap has no address. */
void net_take_slot(struct netslot *ns);
/* {"mode", "slot", "tap", "guest_ip", "gateway", "mac"} */
json_t *net_json(const struct netslot *ns, const char *mode);

#endif
