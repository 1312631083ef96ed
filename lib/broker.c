/* broker.c - isopod-broker's shared helpers (see broker.h). */
#include "bpfdeny.h"
#include "broker.h"
#include "proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

void bk_fail(struct broker *b, const char *fmt, ...)
{
	va_list ap;

	if (b->fatal[0])
		return;
	va_start(ap, fmt);
	vsnprintf(b->fatal, sizeof b->fatal, fmt, ap);
	va_end(ap);
}

void bk_ledger(struct broker *b, const struct ledger_rec *r)
{
	ledger_write(&b->ledger, r);
	bk_ledger_check(b);
}

void bk_ledger_check(struct broker *b)
{
	if (!b->ledger.failed)
		return;
	if (b->ledger.err)
		bk_fail(b, "%s: %s", b->ledger.failed, strerror(b->ledger.err));
	else
		bk_fail(b, "%s", b->ledger.failed);
}

int bk_full(const struct broker *b)
{
	return ledger_full(&b->ledger) || b->fatal[0];
}

static int ep_ctl(struct broker *b, int op, int fd, struct bk_ep *e, uint32_t ev)
{
	struct epoll_event ee = { .events = ev, .data.ptr = e };

	if (epoll_ctl(b->ep, op, fd, &ee) == 0)
		return 0;
	bk_fail(b, "unable to %s epoll: %s", op == EPOLL_CTL_ADD ? "add to" : "modify",
		strerror(errno));
	return -1;
}

int bk_ep_add(struct broker *b, int fd, struct bk_ep *e, uint32_t ev)
{
	return ep_ctl(b, EPOLL_CTL_ADD, fd, e, ev);
}

int bk_ep_mod(struct broker *b, int fd, struct bk_ep *e, uint32_t ev)
{
	return ep_ctl(b, EPOLL_CTL_MOD, fd, e, ev);
}

void bk_closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

int bk_bind(struct in_addr addr, int type, unsigned *port, char *msg, size_t msz)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = addr,
				  .sin_port = htons((uint16_t)*port) };
	socklen_t sl = sizeof sa;
	char ab[INET_ADDRSTRLEN];
	int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1, e;

	if (fd < 0) {
		e = errno;
		snprintf(msg, msz, "unable to create a socket: %s", strerror(e));
		errno = e;
		return -1;
	}
	/* TCP only: on UDP, SO_REUSEADDR would let two brokers share the port */
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		e = errno;
		snprintf(msg, msz, "unable to bind %s %s:%u: %s", type == SOCK_STREAM ? "TCP" : "UDP",
			 inet_ntop(AF_INET, &addr, ab, sizeof ab), *port, strerror(e));
		goto fail;
	}
	/* a backlog for as many flows as may be open, should they all
	 * connect at once (beyond it a SYN waits for its retransmission) */
	if (type == SOCK_STREAM && listen(fd, PROXY_MAX_FLOWS) < 0) {
		e = errno;
		snprintf(msg, msz, "unable to listen: %s", strerror(e));
		/* EADDRINUSE (the port is taken: 102) is bind()'s answer alone;
		 * a listen() that fails is a system failure (111) */
		if (e == EADDRINUSE)
			e = EIO;
		goto fail;
	}
	if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		*port = ntohs(sa.sin_port);
	return fd;
fail:
	close(fd);
	errno = e;
	return -1;
}

/* The filter for what the broker never does again -- open a file (its ledger
 * and log are descriptors already), run or fork a program, look into
 * another process, open a socket other than IPv4 and the route netlink
 * that reads the host's addresses, bind or listen on a socket -- nor the kernel surfaces no broker
 * needs (io_uring, userfaultfd, perf, bpf, keyrings, namespaces, mounts).
 * It stacks on the jail's (lib/jailchild.c); without the jail it is still
 * applied.  Foreign architectures' calls are killed. */
#define BK_ARG(n) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[n]))
int bk_lock_down(void)
{
	struct sock_filter f[] = {
		SECCOMP_ARCH_CHECK,
#ifdef __x86_64__
		DENY(SYS_open), DENY(SYS_creat), DENY(SYS_fork), DENY(SYS_vfork),
#endif
		DENY(SYS_openat), DENY(SYS_openat2), DENY(SYS_open_by_handle_at),
		DENY(SYS_execve), DENY(SYS_execveat), DENY(SYS_clone), DENY(SYS_clone3),
		DENY(SYS_ptrace), DENY(SYS_process_vm_readv), DENY(SYS_process_vm_writev),
		DENY(SYS_socketpair), DENY(SYS_io_uring_setup), DENY(SYS_userfaultfd),
		DENY(SYS_perf_event_open), DENY(SYS_bpf), DENY(SYS_keyctl),
		DENY(SYS_add_key), DENY(SYS_request_key), DENY(SYS_unshare),
		DENY(SYS_setns), DENY(SYS_mount), DENY(SYS_pivot_root),
		DENY(SYS_memfd_create),
		/* review (broker jail): the slot lock's flock is the supervisor's
		 * too (LOCK_UN would free the slot); prctl could drop the
		 * parent-death signal; ftruncate/fallocate/pwritev2 would rewrite
		 * the ledger behind O_APPEND; pidfds and kcmp reach other
		 * processes when the jail is off */
		DENY(SYS_flock), DENY(SYS_prctl), DENY(SYS_ftruncate),
		DENY(SYS_fallocate), DENY(SYS_pwritev2), DENY(SYS_pidfd_open),
		DENY(SYS_pidfd_getfd), DENY(SYS_pidfd_send_signal), DENY(SYS_kcmp),
		/* review (broker bind): its listeners are bound already; a bind or
		 * listen now could take another slot's gateway:3128 (or :1053)
		 * before that slot's broker does, and its guest's traffic with it.
		 * Sockets made since get a port at connect/sendto, chosen by the
		 * kernel; the host's addresses are read without a bind
		 * (policy_own_addr) */
		DENY(SYS_bind), DENY(SYS_listen),
		/* fcntl(F_SETFL) would clear the ledger's O_APPEND (nothing here
		 * sets a flag after this point: sockets and pipes are made
		 * non-blocking at birth) */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fcntl, 0, 4),
		BK_ARG(1),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETFL, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* socket(): AF_INET, or AF_NETLINK with NETLINK_ROUTE only */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 6),
		BK_ARG(0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 4, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_NETLINK, 0, 2),
		BK_ARG(2),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NETLINK_ROUTE, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -1;
	return 0;
}

int bk_jail_probe(char *msg, size_t msz)
{
	static const char probe[] = "isopod jail egress probe";
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(BK_JAIL_PROBE_PORT) };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), e;
	ssize_t n;

	if (fd < 0) {
		snprintf(msg, msz, "the jail egress probe: unable to create a socket: %s",
			 strerror(errno));
		return -1;
	}
	n = sendto(fd, probe, sizeof probe - 1, MSG_DONTWAIT, (const struct sockaddr *)&to,
		   sizeof to);
	e = errno;
	close(fd);
	if (n < 0 && e == EPERM)
		return 0;
	if (n >= 0)
		snprintf(msg, msz, "this broker's uid %u is not in the host's jail egress chain: "
			 "the jail uid range changed since isopod-netsetup ran, or netsetup "
			 "predates it; run isopod-netsetup again", (unsigned)getuid());
	else
		snprintf(msg, msz, "the jail egress probe (udp 127.0.0.1:%d) failed with %s, not "
			 "the chain's EPERM: this broker's uid %u is not known to be in the host's "
			 "jail egress chain; run isopod-netsetup again", BK_JAIL_PROBE_PORT,
			 strerror(e), (unsigned)getuid());
	return -1;
}
