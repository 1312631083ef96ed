/* taphold.c - who holds an isopod tap open (see taphold.h). */

#include "taphold.h"
#include "tcfilter.h"
#include "util.h"

#include <linux/if_tun.h>
#include <linux/if.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Asking is attaching: with QEMU's own flags (lib/qjail.c), let go at
 * once. */
int taphold_busy(const char *tap)
{
	struct ifreq ifr = { .ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR };
	int fd, held;

	if (strlen(tap) >= IFNAMSIZ)
		return 0;
	memcpy(ifr.ifr_name, tap, strlen(tap));
	if ((fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC)) < 0)
		return 0;
	held = ioctl(fd, TUNSETIFF, &ifr) < 0 && errno == EBUSY;
	close(fd);
	return held;
}

/* Does /proc/PID hold a descriptor whose link reads link (and, with info,
 * whose fdinfo holds info)?  1 yes, 0 no or not ours to read. */
static int pid_holds(const char *pid, const char *link, const char *info)
{
	char p[PATH_MAX], l[64], buf[1024];
	struct dirent *e;
	DIR *d;
	ssize_t n;
	int fd, found = 0;

	if (pathn(p, sizeof p, "/proc/%s/fd", pid) < 0 || !(d = opendir(p)))
		return 0;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.' || pathn(p, sizeof p, "/proc/%s/fd/%s", pid, e->d_name) < 0 ||
		    (n = readlink(p, l, sizeof l - 1)) < 0)
			continue;
		l[n] = '\0';
		if (strcmp(l, link))
			continue;
		if (!info) {
			found = 1;
			continue;
		}
		if (pathn(p, sizeof p, "/proc/%s/fdinfo/%s", pid, e->d_name) < 0 ||
		    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		found = strstr(buf, info) != NULL;
	}
	closedir(d);
	return found;
}

/* Does /proc/PID hold a /dev/net/tun file attached to tap (its fdinfo
 * says "iff:\tTAP")? */
static int pid_holds_tap(const char *pid, const char *tap)
{
	char want[IFNAMSIZ + 8];

	snprintf(want, sizeof want, "iff:\t%s\n", tap);
	return pid_holds(pid, "/dev/net/tun", want);
}

/* /proc/PID/comm, printable: the holder names itself (prctl
 * PR_SET_NAME), so only printable ASCII, never control bytes for a
 * terminal or a break in the UTF-8 of a result's warning. */
static void comm_of(const char *pid, char *comm, size_t sz)
{
	char p[PATH_MAX];
	ssize_t n;
	int fd;

	snprintf(comm, sz, "?");
	if (pathn(p, sizeof p, "/proc/%s/comm", pid) == 0 && (fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
		if ((n = read(fd, comm, sz - 1)) > 0)
			comm[strcspn(comm, "\n") < (size_t)n ? strcspn(comm, "\n") : (size_t)n] = '\0';
		close(fd);
	}
	for (char *c = comm; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
}

int taphold_who(const char *tap, char *out, size_t sz)
{
	struct stat self, ns;
	char p[PATH_MAX], comm[32], other[256] = "";
	struct dirent *e;
	size_t len = 0, olen = 0;
	DIR *d;
	int nfound = 0, sameok = stat("/proc/self/ns/net", &self) == 0;

	*out = '\0';
	if (!(d = opendir("/proc")))
		goto none;
	while ((e = readdir(d))) {
		int same;

		if (strspn(e->d_name, "0123456789") != strlen(e->d_name) || !pid_holds_tap(e->d_name, tap))
			continue;
		comm_of(e->d_name, comm, sizeof comm);
		/* Tap names are per network namespace: a holder in another
		 * one may hold another tap of the same name. */
		same = !sameok || (pathn(p, sizeof p, "/proc/%s/ns/net", e->d_name) == 0 &&
				   stat(p, &ns) == 0 && ns.st_ino == self.st_ino && ns.st_dev == self.st_dev);
		if (same && len < sz)
			len += (size_t)snprintf(out + len, sz - len, "%spid %s (%s)", len ? ", " : "",
						e->d_name, comm);
		else if (!same && olen < sizeof other)
			olen += (size_t)snprintf(other + olen, sizeof other - olen, "%spid %s (%s)",
						 olen ? ", " : "", e->d_name, comm);
		nfound += same;
	}
	closedir(d);
	if (nfound)
		return nfound;
	if (*other) {
		snprintf(out, sz, "a process of another network namespace, perhaps: %s", other);
		return 0;
	}
none:
	snprintf(out, sz, "a process this user cannot see");
	return 0;
}


/* ---- the broker's ports ------------------------------------------------- */

/* Bind gw:port as the broker does (lib/broker.c bk_bind: SO_REUSEADDR on
 * TCP only) and let go: 1 when the address is in use. */
static int port_busy(uint32_t gw, int type, unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr = { .s_addr = gw },
				  .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0), one = 1, busy;

	if (fd < 0)
		return 0;
	if (type == SOCK_STREAM)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	busy = bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno == EADDRINUSE;
	close(fd);
	return busy;
}

/* The processes with socket inode ino among their descriptors, appended
 * to out as ", pid N (comm)". */
static size_t socket_pids(unsigned long ino, char *out, size_t len, size_t sz)
{
	char want[64], comm[32];
	struct dirent *e;
	DIR *d;

	snprintf(want, sizeof want, "socket:[%lu]", ino);
	if (!(d = opendir("/proc")))
		return len;
	while ((e = readdir(d)) && len < sz) {
		if (strspn(e->d_name, "0123456789") != strlen(e->d_name) ||
		    !pid_holds(e->d_name, want, NULL))
			continue;
		comm_of(e->d_name, comm, sizeof comm);
		len += (size_t)snprintf(out + len, sz - len, ", pid %s (%s)", e->d_name, comm);
	}
	closedir(d);
	return len;
}

int taphold_port_who(uint32_t gw, int type, unsigned port, char *out, size_t sz)
{
	FILE *fp = fopen(type == SOCK_STREAM ? "/proc/net/tcp" : "/proc/net/udp", "re");
	char line[512];
	size_t len = 0;
	int found = 0;

	*out = '\0';
	while (fp && fgets(line, sizeof line, fp) && len < sz) {
		unsigned addr, lport, st, uid;
		unsigned long ino;

		/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode; the
		 * address as the kernel's u32 (network order) in hex */
		if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %u %*d %lu", &addr, &lport,
			   &st, &uid, &ino) != 5 || lport != port || (addr != gw && addr != 0) ||
		    (type == SOCK_STREAM && st != 0x0A)) /* TCP: a listener */
			continue;
		len += (size_t)snprintf(out + len, sz - len, "%suid %u", found ? "; " : "", uid);
		len = socket_pids(ino, out, len, sz);
		found++;
	}
	if (fp)
		fclose(fp);
	if (!found)
		snprintf(out, sz, "a socket this user cannot see");
	else if (len >= sz)
		snprintf(out + sz - 4, 4, "...");
	return found;
}

int taphold_ports_held(uint32_t gw, int open_mode, unsigned canary, char *why, size_t sz)
{
	const struct {
		int type;
		unsigned port;
		const char *name;
	} ports[] = {
		{ .type = SOCK_DGRAM, .port = TCFILTER_PORT_BROKER_DNS, .name = "UDP" },
		{ .type = SOCK_DGRAM, .port = canary, .name = "UDP" },
		{ .type = SOCK_STREAM, .port = TCFILTER_PORT_BROKER_HTTP, .name = "TCP" },
	};
	char ab[INET_ADDRSTRLEN], who[256];
	size_t i;

	for (i = 0; i < sizeof ports / sizeof ports[0]; i++) {
		if ((open_mode && ports[i].type == SOCK_STREAM) ||
		    !port_busy(gw, ports[i].type, ports[i].port))
			continue;
		taphold_port_who(gw, ports[i].type, ports[i].port, who, sizeof who);
		inet_ntop(AF_INET, &gw, ab, sizeof ab);
		if (snprintf(why, sz, "%s port %s:%u is bound by %s, not by an isopod broker",
			     ports[i].name, ab, ports[i].port, who) >= (int)sz)
			snprintf(why + sz - 4, 4, "...");
		return 1;
	}
	return 0;
}
