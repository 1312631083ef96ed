/* taphold.h - an isopod tap held open by a process that is not an isopod
 * VM (issue 14; doc/DECISIONS.md "A tap someone else holds").
 *
 * isopod-netsetup's taps are persistent and single-queue, so the kernel
 * attaches one file at a time: while any process holds a tap open (QEMU,
 * or a stray one), a second TUNSETIFF on it fails with EBUSY.  lib/net.c
 * skips such a slot; lib/qjail.c names the holder when QEMU's own open
 * meets one. */
#ifndef ISOPOD_TAPHOLD_H
#define ISOPOD_TAPHOLD_H

#include <stddef.h>
#include <stdint.h>

/* Does any file hold tap (isopod-tapK) open?  Asked by attaching one and
 * letting go, which only the tap's owner (or CAP_NET_ADMIN) may do; the
 * caller holds slot K's lock, so no isopod VM is opening it meanwhile.  1 held,
 * 0 free or unable to tell (QEMU's own open is then the last word). */
int taphold_busy(const char *tap);
/* The processes holding tap open (a /dev/net/tun file attached to it, as
 * /proc/PID/fdinfo says "iff:\tTAP"), "pid N (comm), ..." in out; those of
 * this network namespace only, since tap names are per namespace.  Only
 * the processes this user may inspect are seen.  The number found; 0 with
 * out saying what is known ("a process this user cannot see", or the
 * holders of a tap of that name in other namespaces). */
int taphold_who(const char *tap, char *out, size_t sz);

/* A slot's broker ports held by another socket (doc/DECISIONS.md "A port
 * someone else holds"): the broker listens on the slot's gateway on ports
 * any local user may bind (UDP TCFILTER_PORT_BROKER_DNS, UDP
 * NET_CANARY_PORT + 1, TCP TCFILTER_PORT_BROKER_HTTP but in open mode,
 * where it has no proxy); a user who binds one first would make every
 * broker on that slot fail (102); canary is the broker's canary answer
 * port (NET_CANARY_PORT + 1, lib/net.h).  Asked by binding each as the broker
 * does and letting go: the caller holds the slot's lock, so no isopod
 * broker is binding them meanwhile.  gw in network order.  1 when one is
 * held, with the sentence naming port, uid and processes in why; 0 free
 * or unable to tell (the broker's own bind is then the last word). */
int taphold_ports_held(uint32_t gw, int open_mode, unsigned canary, char *why, size_t sz);
/* Who holds gw:port (type SOCK_DGRAM or SOCK_STREAM; a socket bound to
 * 0.0.0.0 holds it too): "uid U, pid N (comm), ..." in out, from
 * /proc/net/udp or tcp and the /proc/PID/fd this user may read.  The
 * number of sockets found; 0 with out saying so. */
int taphold_port_who(uint32_t gw, int type, unsigned port, char *out, size_t sz);

#endif
