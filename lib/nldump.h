/* nldump.h - one netlink dump over a raw socket (libc only, no libmnl),
 * the one loop behind the unprivileged readers every host tool links:
 * lib/net.c's routing rules and lib/tcread.c's tc filters. */
#ifndef ISOPOD_NLDUMP_H
#define ISOPOD_NLDUMP_H

#include <stddef.h>
#include <stdint.h>

#include <linux/netlink.h>

/* Called for every message of the reply but the final NLMSG_DONE or
 * NLMSG_ERROR. */
typedef void (*nl_dump_cb)(const struct nlmsghdr *h, void *data);

/* Send req (len bytes, a whole NLM_F_DUMP request) on a fresh socket of
 * netlink protocol proto, connected to the kernel (no other process can
 * reach it), and hand each message of the reply to cb, up to NLMSG_DONE
 * or NLMSG_ERROR.  Returns 0, or -errno when the socket failed or the
 * reply cannot be trusted whole: -EIO a datagram was truncated, -EINTR
 * the dump was interrupted by a change (NLM_F_DUMP_INTR; not retried:
 * the callers' state is partial, they fail closed), -EPROTO a malformed
 * message.  *nlerr is the kernel's error (a negative errno, from
 * NLMSG_ERROR or from an NLMSG_DONE ending a dump that failed part-way),
 * 0 when the dump ended well. */
int nl_dump(int proto, const void *req, size_t len, nl_dump_cb cb, void *data, int *nlerr);

/* A fresh netlink socket of protocol proto connected to the kernel (port
 * id 0): unicast from any other socket is refused.  The fd, or -errno. */
int nl_connect(int proto);

/* The walk over one datagram of the reply (n bytes at buf), for nl_dump
 * and the unit tests: messages of another sequence number or port id are
 * not ours and are skipped.  Returns 0 more to come, 1 the dump ended
 * (*nlerr set), or -errno as nl_dump. */
int nl_walk(const void *buf, size_t n, uint32_t seq, uint32_t portid, nl_dump_cb cb, void *data,
	    int *nlerr);

#endif
