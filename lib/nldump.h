/* nldump.h - one netlink dump over a raw socket (libc only, no libmnl),
 * the one loop behind the unprivileged readers every host tool links:
 * lib/net.c's routing rules and lib/tcread.c's tc filters. */
#ifndef ISOPOD_NLDUMP_H
#define ISOPOD_NLDUMP_H

#include <stddef.h>

#include <linux/netlink.h>

/* Called for every message of the reply but the final NLMSG_DONE or
 * NLMSG_ERROR. */
typedef void (*nl_dump_cb)(const struct nlmsghdr *h, void *data);

/* Send req (len bytes, a whole NLM_F_DUMP request) on a fresh socket of
 * netlink protocol proto and hand each message of the reply to cb, up to
 * NLMSG_DONE or NLMSG_ERROR.  Returns 0, or -errno when the socket
 * failed; *nlerr is the kernel's NLMSG_ERROR (a negative errno), 0 when
 * the dump ended with NLMSG_DONE (or the socket). */
int nl_dump(int proto, const void *req, size_t len, nl_dump_cb cb, void *data, int *nlerr);

#endif
