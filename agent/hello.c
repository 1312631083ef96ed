/* hello.c - applying the host's HELLO: hostname, clock, RNG seed, the
 * network (eth0 from NET_*, and lo at boot), DNS and GROW for the root;
 * then HELLO_ACK. */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <net/route.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* Kernel ioctls, spelled out: musl ships no linux headers. */
#ifndef RNDADDENTROPY
#define RNDADDENTROPY _IOW('R', 0x03, int[2])
#endif
#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

static void set_sin(struct sockaddr *sa, in_addr_t a)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = a;
	memcpy(sa, &sin, sizeof sin);
}

void lo_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0) {
		logm("socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		logm("lo: SIOCGIFFLAGS: %s", strerror(errno));
		goto out;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		logm("lo: up: %s", strerror(errno));
	/* Linux gives lo 127.0.0.1/8 when it comes up; set it if it did not. */
	if (ioctl(s, SIOCGIFADDR, &ifr) == 0)
		goto out;
	set_sin(&ifr.ifr_addr, htonl(INADDR_LOOPBACK));
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		logm("lo: SIOCSIFADDR: %s", strerror(errno));
	set_sin(&ifr.ifr_netmask, htonl(0xff000000u));
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
		logm("lo: SIOCSIFNETMASK: %s", strerror(errno));
out:
	close(s);
}

static void add_entropy(const uint8_t *p, uint32_t len, char *err, size_t errsz)
{
	/* struct rand_pool_info: entropy_count (bits), buf_size, buf */
	struct {
		int entropy_count;
		int buf_size;
		uint8_t buf[512];
	} info;
	int fd;

	if (len > sizeof info.buf)
		len = sizeof info.buf;
	info.entropy_count = (int)len * 8;
	info.buf_size = (int)len;
	memcpy(info.buf, p, len);
	fd = open("/dev/urandom", O_RDWR | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, RNDADDENTROPY, &info) < 0) {
		/* Clones of one snapshot would share their RNG state. */
		errcat(err, errsz, "seed the RNG: %s", strerror(errno));
		close_fd(&fd);
		return;
	}
	/* Older kernels lack RNDRESEEDCRNG (EINVAL); the entropy is in. */
	if (ioctl(fd, RNDRESEEDCRNG) < 0 && errno != EINVAL)
		errcat(err, errsz, "reseed the RNG: %s", strerror(errno));
	close(fd);
	explicit_bzero(&info, sizeof info);
}

/* eth0 from HELLO's NET_*: MAC, MTU, address, up, default route.  A warm
 * clone wakes up with whatever its template had, and each of these
 * replaces that rather than adding to it:
 * - the MAC is set every time, even when eth0 has it already: Linux 6.1
 *   hands every SIOCSIFHWADDR to virtio_net, which sends
 *   VIRTIO_NET_CTRL_MAC_ADDR_SET on the control queue, and that is what
 *   moves QEMU's receive filter (its MAC came with the template's device
 *   state) to this VM's MAC; without it QEMU drops every unicast frame
 *   sent to the new MAC.  The link goes down for a new MAC, so that
 *   neighbours and the IPv6 link-local address are made afresh;
 * - SIOCSIFADDR replaces eth0's primary address (the kernel moves its
 *   prefix route along);
 * - every default route is deleted before ours is added.
 * Failures go to err: a run that asked for a network and has none must
 * fail, not carry on. */
static void net_config(const struct hello_req *h, char *err, size_t errsz)
{
	char dev[] = "eth0"; /* rt_dev is not const */
	struct ifreq ifr;
	struct rtentry rt;
	in_addr_t addr, mask;
	struct in_addr gw;
	int s, i;
	short flags;

	if (parse_cidr(h->net_addr, &addr, &mask) < 0) {
		errcat(err, errsz, "net: bad NET_ADDR \"%s\"", h->net_addr);
		return;
	}
	if (h->net_gw[0] && inet_pton(AF_INET, h->net_gw, &gw) != 1) {
		errcat(err, errsz, "net: bad NET_GW \"%s\"", h->net_gw);
		return;
	}
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		errcat(err, errsz, "net: socket: %s", strerror(errno));
		return;
	}
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, dev);
#define NET_IOCTL(req, what)                                                      \
	do {                                                                      \
		if (ioctl(s, req, &ifr) < 0) {                                    \
			errcat(err, errsz, "net: %s %s: %s", what, dev, strerror(errno)); \
			goto out;                                                 \
		}                                                                 \
	} while (0)
	NET_IOCTL(SIOCGIFFLAGS, "get flags of");
	flags = ifr.ifr_flags;
	if (h->have_mac) {
		NET_IOCTL(SIOCGIFHWADDR, "get MAC of");
		if (memcmp(ifr.ifr_hwaddr.sa_data, h->net_mac, 6) && (flags & IFF_UP)) {
			ifr.ifr_flags = (short)(flags & ~IFF_UP);
			NET_IOCTL(SIOCSIFFLAGS, "down");
		}
		ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
		memcpy(ifr.ifr_hwaddr.sa_data, h->net_mac, 6);
		NET_IOCTL(SIOCSIFHWADDR, "set MAC of");
	}
	if (h->net_mtu) {
		ifr.ifr_mtu = (int)h->net_mtu;
		NET_IOCTL(SIOCSIFMTU, "set MTU of");
	}
	set_sin(&ifr.ifr_addr, addr);
	NET_IOCTL(SIOCSIFADDR, "set address of");
	set_sin(&ifr.ifr_netmask, mask);
	NET_IOCTL(SIOCSIFNETMASK, "set netmask of");
	NET_IOCTL(SIOCGIFFLAGS, "get flags of");
	ifr.ifr_flags |= IFF_UP;
	NET_IOCTL(SIOCSIFFLAGS, "up");
#undef NET_IOCTL
	/* Whatever default route there is (a template's, or a previous
	 * HELLO's) goes; ESRCH: none left.  Bounded: a route table that
	 * keeps answering is not worth a hung PID 1. */
	for (i = 0; i < 16; i++) {
		memset(&rt, 0, sizeof rt);
		set_sin(&rt.rt_dst, INADDR_ANY);
		set_sin(&rt.rt_genmask, INADDR_ANY);
		rt.rt_flags = RTF_UP;
		if (ioctl(s, SIOCDELRT, &rt) < 0)
			break;
	}
	if (h->net_gw[0]) {
		memset(&rt, 0, sizeof rt);
		set_sin(&rt.rt_dst, INADDR_ANY);
		set_sin(&rt.rt_genmask, INADDR_ANY);
		set_sin(&rt.rt_gateway, gw.s_addr);
		rt.rt_flags = RTF_UP | RTF_GATEWAY;
		rt.rt_dev = dev;
		if (ioctl(s, SIOCADDRT, &rt) < 0)
			errcat(err, errsz, "net: default route via %s: %s", h->net_gw,
			       strerror(errno));
	}
out:
	close(s);
}

static void hello_apply(struct agent *a, const struct hello_req *h, char *err, size_t errsz)
{
	struct timespec ts;

	if (h->hostname[0] && sethostname(h->hostname, strlen(h->hostname)) < 0)
		logm("sethostname %s: %s", h->hostname, strerror(errno));
	if (h->have_time) {
		ts.tv_sec = (time_t)(h->time_ns / 1000000000u);
		ts.tv_nsec = (long)(h->time_ns % 1000000000u);
		if (clock_settime(CLOCK_REALTIME, &ts) < 0)
			logm("clock_settime: %s", strerror(errno));
	}
	if (h->seed)
		add_entropy(h->seed, h->seedlen, err, errsz);
	if (h->net_addr[0])
		net_config(h, err, errsz);
	else if (h->net_gw[0] || h->net_mtu || h->have_mac)
		errcat(err, errsz, "net: NET_* given without NET_ADDR");
	/* GROW and DNS on a writable root now; with ROOT_RW, after the
	 * HELLO_ACK (root_rw_soon), as on a read-only root: the resize
	 * stays off the boot's path on a root mounted read-write at boot.
	 * No test checks the `!h->root_rw` deferral: it changes only when
	 * the resize and resolv.conf happen (before or just after the
	 * HELLO_ACK), not what the guest ends up with, and tests assert no
	 * timing; the suites that grow a disk or resolve names cover the result. */
	if (h->net_dns[0]) {
		snprintf(a->root.dns, sizeof a->root.dns, "%s", h->net_dns);
		if (a->root.rw && !h->root_rw)
			write_resolv(a);
	}
	if (h->grow) {
		a->root.grow = 1;
		if (a->root.rw && !h->root_rw)
			grow_root(a);
	}
	/* Never cleared by a HELLO without it: what a host asked once of
	 * this boot stands (a template's host never asks). */
	if (h->root_rw)
		a->root.rw_soon = 1;
}

void on_hello(struct agent *a, const struct frame *fr)
{
	struct hello_req h;
	char err[1024] = "";
	uint8_t buf[1200];
	struct tlv_w w;

	memset(&h, 0, sizeof h);
	hello_parse(fr, &h, err, sizeof err);
	/* A HELLO starts a new session: whatever ran belongs to a host that
	 * is gone (we may have missed its hang-up), and so does the output
	 * still queued for it. */
	if (a->op != OP_NONE) {
		logm("HELLO during an operation: aborting it");
		op_abort(a);
	}
	a->out.off = a->out.len = a->out.split = 0;
	memset(a->credit_due, 0, sizeof a->credit_due);
	a->port.helloed = 0;
	if (!h.have_version || h.version != ISOPOD_PROTO_VERSION) {
		errcat(err, sizeof err, "protocol version mismatch: host %u, agent %u",
		       h.have_version ? h.version : 0, ISOPOD_PROTO_VERSION);
	} else {
		hello_apply(a, &h, err, sizeof err);
		a->port.helloed = 1;
	}
	if (!a->root.ok)
		errcat(err, sizeof err, "%s", a->root.err);
	tlv_init(&w, buf, sizeof buf);
	tlv_put_u32(&w, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&w, T_COOKIE, h.cookie);
	tlv_put_str(&w, T_ROOT, a->root.rw ? "rw" : "ro");
	tlv_put_u64(&w, T_UPTIME_MS, (uint64_t)clock_ms(CLOCK_BOOTTIME));
	/* The lane, when this VM has its drive: the host uses it then. */
	bulk_find(a);
	if (a->bulk.fd >= 0 && a->bulk.n)
		tlv_put_u64(&w, T_BULK, a->bulk.bytes);
	if (err[0]) {
		logm("HELLO_ACK error: %s", err);
		tlv_put_str(&w, T_ERROR, err);
	}
	out_tlv(a, F_HELLO_ACK, STREAM_CTL, &w);
}
