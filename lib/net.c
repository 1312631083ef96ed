/* net.c - network slots: taps left by isopod-netsetup, slot locks. */

#include "net.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int net_mode_valid(const char *mode)
{
	return !strcmp(mode, "none") || !strcmp(mode, "filtered") || !strcmp(mode, "open");
}

int net_ntaps(void)
{
	char name[IFNAMSIZ];
	int k;

	for (k = 0; k < NET_MAX_SLOTS; k++) {
		snprintf(name, sizeof name, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
		if (!if_nametoindex(name))
			break;
	}
	return k;
}

int net_require_taps(void)
{
	int n = net_ntaps();

	if (!n)
		die(EX_SYS, "unable to find the network taps (" NET_TAP_PREFIX "0 is missing): "
		    "run `sudo isopod-netsetup` once after each host boot, or use --net none");
	return n;
}

static const char *lock_dir(void)
{
	static char d[PATH_MAX];
	const char *e = getenv("ISOPOD_NET_LOCKS");

	if (e && *e)
		pathf(d, sizeof d, "%s", e);
	else
		pathf(d, sizeof d, "%s/locks", store_home());
	mkdirs(d, 0700);
	return d;
}

/* LOCK_EX|LOCK_NB on slot-k: the fd, or -1 when held by another VM. */
static int try_slot(const char *dir, int k)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "%s/slot-%d", dir, k);
	fd = lock_open(p, LOCK_EX | LOCK_NB);
	if (fd < 0 && errno != EWOULDBLOCK)
		die(EX_SYS, "unable to lock %s:", p);
	return fd;
}

const char *net_tap_mode(int k, char *out, size_t sz)
{
	char p[PATH_MAX], buf[64];
	size_t n = strlen(NET_ALIAS_PREFIX);
	ssize_t r;
	int fd;

	*out = '\0';
	pathf(p, sizeof p, "/sys/class/net/" NET_TAP_PREFIX "%d/ifalias", k);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return out;
	r = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (r <= 0)
		return out;
	buf[r] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	if (!strncmp(buf, NET_ALIAS_PREFIX, n) && net_mode_valid(buf + n) && strcmp(buf + n, "none"))
		snprintf(out, sz, "%s", buf + n);
	return out;
}

/* The first free slot of this mode, locked (its fd in *fd), or dies: 111
 * when there is no slot of the mode, 102 when all of them are busy. */
static int find_slot(const char *mode, int *fd)
{
	const char *dir = lock_dir();
	char m[16];
	int n = net_require_taps(), k, nmode = 0;

	for (k = 0; k < n; k++) {
		if (strcmp(net_tap_mode(k, m, sizeof m), mode))
			continue;
		nmode++;
		if ((*fd = try_slot(dir, k)) >= 0)
			return k;
	}
	if (!nmode)
		die(EX_SYS, "no %s slots: run `sudo isopod-netsetup %s N`, or use --net none",
		    mode, strcmp(mode, "open") ? "--slots" : "--open-slots");
	die(EX_CONFLICT, "all %d %s network slots busy: wait for a networked VM to end, or use --net none",
	    nmode, mode);
}

void net_check_free(const char *mode)
{
	int fd;

	find_slot(mode, &fd);
	close(fd);
}

/* The IPv4 address and MTU of the tap (set by isopod-netsetup). */
static void tap_info(struct netslot *ns)
{
	struct ifreq ifr;
	struct in_addr gw, guest;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		die(EX_SYS, "unable to open a socket:");
	memset(&ifr, 0, sizeof ifr);
	snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ns->tap);
	if (ioctl(s, SIOCGIFADDR, &ifr) < 0)
		die(EX_SYS, "unable to read the address of %s (run `sudo isopod-netsetup`):", ns->tap);
	gw = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr;
	ns->mtu = 1500;
	if (ioctl(s, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu >= 576)
		ns->mtu = (uint32_t)ifr.ifr_mtu;
	close(s);
	guest.s_addr = htonl(ntohl(gw.s_addr) + 1);
	inet_ntop(AF_INET, &gw, ns->gw, sizeof ns->gw);
	inet_ntop(AF_INET, &guest, ns->guest, sizeof ns->guest);
	snprintf(ns->addr, sizeof ns->addr, "%s/30", ns->guest);
}

void net_take_slot(struct netslot *ns, const char *mode)
{
	int fd, k = find_slot(mode, &fd);

	memset(ns, 0, sizeof *ns);
	ns->slot = k;
	ns->lock_fd = fd;
	snprintf(ns->mode, sizeof ns->mode, "%s", mode);
	snprintf(ns->tap, sizeof ns->tap, NET_TAP_PREFIX "%d", k % NET_MAX_SLOTS);
	ns->mac[0] = 0x02, ns->mac[1] = 0x69, ns->mac[2] = 0x73, ns->mac[3] = 0x00;
	ns->mac[4] = (uint8_t)(k >> 8), ns->mac[5] = (uint8_t)k;
	snprintf(ns->macs, sizeof ns->macs, "%02x:%02x:%02x:%02x:%02x:%02x", ns->mac[0], ns->mac[1],
		 ns->mac[2], ns->mac[3], ns->mac[4], ns->mac[5]);
	tap_info(ns);
}

json_t *net_json(const struct netslot *ns, const char *mode)
{
	if (!ns || ns->slot < 0)
		return json_pack("{s:s, s:n, s:n, s:n}", "mode", mode, "slot", "guest_ip", "gateway");
	return json_pack("{s:s, s:i, s:s, s:s, s:s, s:s}", "mode", mode, "slot", ns->slot, "tap",
			 ns->tap, "guest_ip", ns->guest, "gateway", ns->gw, "mac", ns->macs);
}
