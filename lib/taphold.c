/* taphold.c - who holds an isopod tap open (see taphold.h). */

#include "taphold.h"
#include "util.h"

#include <linux/if_tun.h>
#include <linux/if.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
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

/* Does /proc/PID hold a /dev/net/tun file attached to tap (its fdinfo
 * says "iff:\tTAP")?  1 yes, 0 no or not ours to read. */
static int pid_holds_tap(const char *pid, const char *tap)
{
	char p[PATH_MAX], l[64], want[IFNAMSIZ + 8], buf[1024];
	struct dirent *e;
	DIR *d;
	ssize_t n;
	int fd, found = 0;

	snprintf(want, sizeof want, "iff:\t%s\n", tap);
	if (pathn(p, sizeof p, "/proc/%s/fd", pid) < 0 || !(d = opendir(p)))
		return 0;
	while (!found && (e = readdir(d))) {
		if (e->d_name[0] == '.' || pathn(p, sizeof p, "/proc/%s/fd/%s", pid, e->d_name) < 0 ||
		    (n = readlink(p, l, sizeof l - 1)) < 0)
			continue;
		l[n] = '\0';
		if (strcmp(l, "/dev/net/tun") ||
		    pathn(p, sizeof p, "/proc/%s/fdinfo/%s", pid, e->d_name) < 0 ||
		    (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		buf[n > 0 ? n : 0] = '\0';
		found = strstr(buf, want) != NULL;
	}
	closedir(d);
	return found;
}

int taphold_who(const char *tap, char *out, size_t sz)
{
	struct stat self, ns;
	char p[PATH_MAX], comm[32], other[256] = "";
	struct dirent *e;
	size_t len = 0, olen = 0;
	DIR *d;
	int fd, nfound = 0, sameok = stat("/proc/self/ns/net", &self) == 0;

	*out = '\0';
	if (!(d = opendir("/proc")))
		goto none;
	while ((e = readdir(d))) {
		ssize_t n;
		int same;

		if (strspn(e->d_name, "0123456789") != strlen(e->d_name) || !pid_holds_tap(e->d_name, tap))
			continue;
		snprintf(comm, sizeof comm, "?");
		if (pathn(p, sizeof p, "/proc/%s/comm", e->d_name) == 0 &&
		    (fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
			if ((n = read(fd, comm, sizeof comm - 1)) > 0)
				comm[strcspn(comm, "\n") < (size_t)n ? strcspn(comm, "\n") : (size_t)n] = '\0';
			close(fd);
		}
		/* The holder names itself (prctl PR_SET_NAME): printable ASCII
		 * only, so it never writes control bytes to a terminal or
		 * breaks the UTF-8 of a result's warning. */
		for (char *c = comm; *c; c++)
			if (*c < 0x20 || *c > 0x7e)
				*c = '?';
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

