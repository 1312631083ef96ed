/* isopod-doctor - what this host can do, as one JSON object.
 *
 * Checks what a run needs -- the kernel and base image in the store, QEMU,
 * the tools, flock, network slots of the default mode -- says which
 * accelerator a run gets and why (lib/accel.c decides it, as for every
 * boot: the doctor never probes, it reports the cached verdict or that
 * none exists yet), lists the host config's allow_range overrides
 * (lib/ranges.c) as warnings, and, without --quick, does one real
 * `isopod run -- true`.  Exit 0 only when a run can work.
 *
 * With --adverse, instead: the adverse suite of issue 10 (below), real
 * guests attacking the host's containment, its report what isopod-attest
 * signs. */
#include "accel.h"
#include "image.h"
#include "net.h"
#include "proc.h"
#include "qemu.h"
#include "ranges.h"
#include "sniff.h"
#include "util.h"
#include "vm.h"
#include "warm.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-doctor [--quick] [--net none|filtered|open] [--shell PATH] [--front-end PATH] | " \
	"isopod-doctor --adverse [--vm REF] [--modes LIST] [--metadata ADDR] [--host-gateway ADDR] " \
	"[--host-addr ADDR]... [--public ADDR] [--open-control ADDR:PORT] [--udp-port N] " \
	"[--probe-timeout-s N] [--nc PROGRAM] [--allow NAME]"
#define RUN_TIMEOUT_S "300"

/* The doctor's findings, gathered before the report is built. */
struct diag {
	json_t *missing, *warnings;
	const char *accel;
	char reason[1024];
	int probed;
	struct img im;
	int kpresent, bpresent;
};

static void miss(struct diag *d, const char *what)
{
	json_array_append_new(d->missing, json_string(what));
}

/* Is there an executable `name` in $PATH (what `command -v` finds)? */
static int in_path(const char *name)
{
	const char *path = getenv("PATH"), *p, *e;
	char f[PATH_MAX];

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path;; p = e + 1) {
		size_t n;

		e = strchr(p, ':');
		n = e ? (size_t)(e - p) : strlen(p);
		if (pathn(f, sizeof f, "%.*s/%s", (int)n, n ? p : ".", name) == 0 &&
		    access(f, X_OK) == 0)
			return 1;
		if (!e)
			return 0;
	}
}

/* The directory of the tools: $ISOPOD_LIBEXEC, else our own. */
static void tools_dir(char *out, size_t sz)
{
	char *slash;

	proc_sibling(out, sz, "isopod-doctor", "ISOPOD_LIBEXEC");
	if ((!getenv("ISOPOD_LIBEXEC") || !*getenv("ISOPOD_LIBEXEC")) && (slash = strrchr(out, '/')))
		*slash = 0;
}

/* kvm:{device, present, usable, pvm}: what the host has (the verdict
 * itself is lib/accel.c's). */
static json_t *kvm_facts(int *usable)
{
	const char *dev = getenv("ISOPOD_KVM_DEV");
	struct stat st;
	char line[256];
	int present, pvm = 0;
	FILE *f;

	if (!dev || !*dev)
		dev = "/dev/kvm";
	present = stat(dev, &st) == 0 && S_ISCHR(st.st_mode);
	*usable = present && access(dev, R_OK | W_OK) == 0;
	/* PVM's KVM opens fine and cannot run an unmodified guest kernel */
	if ((f = fopen("/proc/modules", "re"))) {
		while (!pvm && fgets(line, sizeof line, f))
			pvm = !strncmp(line, "kvm_pvm ", 8);
		fclose(f);
	}
	return json_pack("{s:s, s:b, s:b, s:b}", "device", dev, "present", present, "usable", *usable,
			 "pvm", pvm);
}

/* The accelerator a boot gets here, without booting: lib/accel.c's
 * verdict, or "unknown" when only the first boot's probe can tell. */
static void accel_of(struct diag *d, int pvm)
{
	const char *f = getenv("ISOPOD_ACCEL"), *dev = getenv("ISOPOD_KVM_DEV");
	char err[1024];

	if (f && strcmp(f, "kvm") && strcmp(f, "tcg"))
		f = NULL; /* as isopod-boot: anything else is not forcing */
	if (accel_known(f, "ISOPOD_ACCEL", &d->im, &d->accel, &d->probed, d->reason,
			sizeof d->reason, err, sizeof err)) {
		/* forced kvm that does not open: every boot fails (111) */
		d->accel = "kvm";
		snprintf(d->reason, sizeof d->reason, "%s", err);
		miss(d, "kvm(forced-by-ISOPOD_ACCEL:unusable)");
		return;
	}
	if (d->accel)
		return;
	d->accel = "unknown";
	snprintf(d->reason, sizeof d->reason, "not probed yet: %s is present; the first boot probes "
		 "whether KVM can run the guest kernel%s", dev && *dev ? dev : "/dev/kvm",
		 pvm ? " (the host KVM is PVM, which usually cannot: expect tcg)" : "");
}

/* qemu:{binary, version}: the version token of `qemu --version` (lib/warm.c
 * caches it by the binary's identity). */
static json_t *qemu_facts(struct diag *d)
{
	char v[256], err[512], *e;

	if (!in_path(QEMU)) {
		miss(d, "qemu(" QEMU ")");
		return json_pack("{s:s, s:n}", "binary", QEMU, "version");
	}
	if (qemu_version(v, sizeof v, err, sizeof err) < 0)
		return json_pack("{s:s, s:s}", "binary", QEMU, "version", "unknown");
	/* "QEMU emulator version 7.2.22 (Debian ...)" */
	memmove(v, v + 22, strlen(v + 22) + 1);
	if ((e = strchr(v, ' ')))
		*e = 0;
	return json_pack("{s:s, s:s}", "binary", QEMU, "version", v[0] ? v : "unknown");
}

/* net:{default_mode, filtered_slots, open_slots, allow_ranges, config} */
static json_t *net_facts(struct diag *d, const char *defnet)
{
	struct range r[RANGES_ALLOW_MAX];
	char mode[32], msg[1024], t[RANGES_TEXT_MAX], w[RANGES_TEXT_MAX + PATH_MAX + 128];
	const char *conf = ranges_config_path();
	int k, nt = net_ntaps(), nfilt = 0, nopen = 0;
	size_t n = 0, i;
	json_t *ranges = json_array();

	for (k = 0; k < nt; k++) {
		if (!strcmp(net_tap_mode(k, mode, sizeof mode), "open"))
			nopen++;
		else
			nfilt++;
	}
	if (!strcmp(defnet, "filtered") && !nfilt)
		miss(d, "network(no-filtered-slots:sudo-isopod-netsetup)");
	if (!strcmp(defnet, "open") && !nopen)
		miss(d, "network(no-open-slots:sudo-isopod-netsetup--open-slots-N)");
	if (ranges_load_config(conf, r, RANGES_ALLOW_MAX, &n, msg, sizeof msg) < 0) {
		/* a networked boot refuses this config: say so */
		warn("%s", msg);
		json_array_append_new(d->warnings, json_string(msg));
		miss(d, "host-config(allow_range)");
		n = 0;
	}
	for (i = 0; i < n; i++) {
		range_text(&r[i], t, sizeof t);
		json_array_append_new(ranges, json_string(t));
		json_array_append_new(d->warnings,
				      json_string(ranges_warning(t, conf, w, sizeof w)));
	}
	return json_pack("{s:s, s:i, s:i, s:o, s:s}", "default_mode", defnet, "filtered_slots", nfilt,
			 "open_slots", nopen, "allow_ranges", ranges, "config", conf);
}

/* One `isopod run -- true` through the front end: its result (or
 * {"ok":false} when it printed none), and whether it exited 0. */
static json_t *real_run(const char *front, const char *defnet, int *ok)
{
	char *av[] = { (char *)front, "run", "--json-only", "--timeout-s", RUN_TIMEOUT_S, "--net",
		       (char *)defnet, "--", "true", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	int pfd[2], st = 0;
	json_t *out;
	pid_t pid;

	*ok = 0;
	/* the run uses this very store, however the doctor found it */
	if (setenv("ISOPOD_HOME", store_home(), 1) < 0 || pipe2(pfd, O_CLOEXEC) < 0)
		die(EX_SYS, "unable to set up the test run:");
	ps.out = pfd[1];
	ps.err = PROC_INHERIT;
	if ((pid = proc_spawn(&ps)) < 0)
		die(EX_SYS, "unable to start %s:", front);
	close(pfd[1]);
	out = json_load_fd(pfd[0]);
	close(pfd[0]);
	if (proc_wait(pid, &st) < 0)
		die(EX_SYS, "unable to wait for %s:", front);
	*ok = proc_status(st) == 0;
	return out ? out : json_pack("{s:b}", "ok", 0);
}

static void emit(json_t *o)
{
	if (!isatty(1)) {
		json_emit(o);
		return;
	}
	/* a person reading: indented, as jq . printed it */
	if (json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF)
		die(EX_SYS, "unable to write to standard output:");
}

/* ---- the adverse suite (--adverse) --------------------------------------
 *
 * Real guests attack the host's real enforcement.  Each probe is five
 * recorded steps (doc/INTERFACES.md "Doctor report"): liveness right before
 * (the VM's lock held, the agent runs `true`), tooling (the guest program
 * exists and neither it nor its control exits 126/127, by a signal or by
 * the exec's timeout), a control the policy allows through the same tool,
 * the attempt, and the host's evidence: the doctor's packet socket saw the
 * probe arrive on the VM's tap and saw nothing for the target leave any
 * interface (nor an answer go back to the guest), the doctor's own
 * listeners got no hit, and the broker's ledger has its refusal where one
 * is due.  PASS only with liveness, tooling and control ok, the attempt
 * failed and the evidence present; a probe that could not show it ran is
 * ERROR, never a pass. */

#define ADV_MAXVM 4
#define ADV_MAXOWN 16
#define ADV_LISTEN_PORT 9 /* the doctor's own listeners (discard) */

struct avm {
	char id[VM_ID_SZ], mode[16], tap[IFNAMSIZ], gw[16], guest[16];
	int slot, ifindex, ours;
};

/* A socket the doctor owns on a target: any hit on it is the probe arriving. */
struct own {
	char addr[64];
	int port, proto, fd;
	long hits;
};

struct adv {
	struct avm vm[ADV_MAXVM];
	int nvm;
	struct own own[ADV_MAXOWN];
	int nown;
	int sniff;                 /* AF_PACKET, every interface of this netns */
	char libexec[PATH_MAX];
	const char *meta, *public_addr, *open_control, *nc, *allow;
	char gwhost[64];           /* the host's default gateway */
	char hostaddr[8][64];
	int nhost, udp_port, tmo;  /* tmo: a probe program's own timeout, s */
	json_t *probes, *warnings;
	int pass, fail, error;
};

/* What the sniffer counted for one probe. */
struct seen {
	long in, out, back, payload, drops;
};

static int adv_addr(const char *s, int *af, uint8_t a[16])
{
	if (inet_pton(AF_INET, s, a) == 1)
		return *af = 4, 0;
	if (inet_pton(AF_INET6, s, a) == 1)
		return *af = 6, 0;
	return -1;
}

/* Drain the packet socket: everything up to now belongs to no probe. */
static void sniff_drain(int fd)
{
	uint8_t b[2048];
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	while (recv(fd, b, sizeof b, MSG_DONTWAIT) >= 0)
		;
	getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl); /* resets them */
}

/* Count what the packet socket saw since the last drain, for a probe from
 * vm (its tap) to addr (proto, port; port -1: any).  needle: bytes that
 * must not leave (DNS exfiltration), else NULL. */
static struct seen sniff_count(int fd, const struct avm *vm, const char *addr, int proto, int port,
			       const char *needle)
{
	struct seen s = { 0 };
	uint8_t b[4096], ta[16], ga[16];
	int taf = 0, gaf = 0;
	struct tpacket_stats ts;
	socklen_t sl = sizeof ts;

	if (addr && adv_addr(addr, &taf, ta) < 0)
		taf = 0;
	adv_addr(vm->guest, &gaf, ga);
	for (;;) {
		struct sockaddr_ll ll;
		socklen_t ls = sizeof ll;
		struct sniff_pkt pk;
		ssize_t n = recvfrom(fd, b, sizeof b, MSG_DONTWAIT, (struct sockaddr *)&ll, &ls);
		int alen, to_t, from_t, pmatch;

		if (n < 0)
			break;
		if (sniff_parse(b, (size_t)n, ll.sll_hatype, &pk) < 0)
			continue;
		alen = pk.af == 4 ? 4 : 16;
		to_t = taf && pk.af == taf && !memcmp(pk.dst, ta, (size_t)alen);
		from_t = taf && pk.af == taf && !memcmp(pk.src, ta, (size_t)alen);
		pmatch = pk.proto == proto && (port < 0 || pk.dport == port);
		if (ll.sll_pkttype != PACKET_OUTGOING && ll.sll_ifindex == vm->ifindex) {
			/* from the guest, on its tap: the probe reached the host */
			if (pk.af == gaf && !memcmp(pk.src, ga, 4) && (needle ? pmatch : to_t && pmatch))
				s.in++;
		} else if (ll.sll_pkttype == PACKET_OUTGOING) {
			if (ll.sll_ifindex == vm->ifindex) {
				/* an answer from the target's probed port back to the guest */
				if (from_t && pk.proto == proto && (port < 0 || pk.sport == port))
					s.back++;
			} else if (to_t && pmatch) {
				/* (the port too: the brokers' canaries go to their
				 * gateways every second) */
				s.out++;
			}
			if (needle && ll.sll_ifindex != vm->ifindex &&
			    sniff_payload_has(&pk, needle, strlen(needle)))
				s.payload++;
		}
	}
	if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &ts, &sl) == 0)
		s.drops = ts.tp_drops;
	return s;
}

/* The doctor's own listener on addr:port (TCP and UDP).  -1 with errno. */
static int own_open(struct adv *a, const char *addr, int port, int proto)
{
	struct own *o;
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} u = { 0 };
	int af, one = 1, fd;
	uint8_t b[16];
	socklen_t sl;

	if (a->nown >= ADV_MAXOWN || adv_addr(addr, &af, b) < 0)
		return errno = EINVAL, -1;
	if (af == 4) {
		u.in.sin_family = AF_INET, u.in.sin_port = htons((uint16_t)port);
		memcpy(&u.in.sin_addr, b, 4);
		sl = sizeof u.in;
	} else {
		u.in6.sin6_family = AF_INET6, u.in6.sin6_port = htons((uint16_t)port);
		memcpy(&u.in6.sin6_addr, b, 16);
		sl = sizeof u.in6;
	}
	fd = socket(af == 4 ? AF_INET : AF_INET6,
		    (proto == IPPROTO_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* a gateway address that is not (yet) up still binds */
	setsockopt(fd, IPPROTO_IP, IP_FREEBIND, &one, sizeof one);
	if (bind(fd, &u.sa, sl) < 0 || (proto == IPPROTO_TCP && listen(fd, 8) < 0)) {
		int e = errno;

		close(fd);
		return errno = e, -1;
	}
	o = &a->own[a->nown++];
	*o = (struct own){ .port = port, .proto = proto, .fd = fd };
	snprintf(o->addr, sizeof o->addr, "%s", addr);
	return 0;
}

/* Take what arrived on the doctor's own sockets, counting each hit; a TCP
 * connection gets a line and is closed, so a probe that got in ends at
 * once with an answer instead of waiting out its timeout. */
static void own_service(struct adv *a)
{
	static const char hello[] = "isopod-doctor: you reached a listener the doctor owns\n";
	char b[512];
	int i, c;

	for (i = 0; i < a->nown; i++) {
		struct own *o = &a->own[i];

		if (o->proto == IPPROTO_TCP)
			while ((c = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
				if (write(c, hello, sizeof hello - 1) < 0) {
					/* the hit counts all the same */
				}
				close(c), o->hits++;
			}
		else
			while (recv(o->fd, b, sizeof b, MSG_DONTWAIT) >= 0)
				o->hits++;
	}
}

/* Hits on the doctor's own sockets for addr/proto since the last call. */
static long own_hits(struct adv *a, const char *addr, int proto)
{
	long n = 0;
	int i;

	own_service(a);
	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			n += a->own[i].hits, a->own[i].hits = 0;
	return n;
}

static int own_has(const struct adv *a, const char *addr, int proto)
{
	int i;

	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			return 1;
	return 0;
}

/* A tool's stdout (at most 4 MiB) as one JSON value, the doctor's own
 * listeners served while it runs (a guest connecting to one must get in
 * and out while the probe runs, not wait for it to end); NULL if none. */
static json_t *read_serving(struct adv *a, int fd)
{
	size_t n = 0, cap = 0;
	char *buf = NULL;
	json_t *j;

	for (;;) {
		struct pollfd pf[1 + ADV_MAXOWN] = { { .fd = fd, .events = POLLIN } };
		int i, np = 1;
		ssize_t r;

		for (i = 0; i < a->nown; i++)
			pf[np++] = (struct pollfd){ .fd = a->own[i].fd, .events = POLLIN };
		if (poll(pf, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			die(EX_SYS, "unable to poll:");
		}
		own_service(a);
		if (!pf[0].revents)
			continue;
		if (n + 65536 > cap) {
			if (cap >= (4u << 20))
				break;
			cap = cap ? cap * 2 : 65536;
			if (!(buf = realloc(buf, cap)))
				die(EX_SYS, "out of memory");
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	j = buf ? json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(buf);
	return j;
}

/* Run a tool of ours with stdin from in (PROC_NULL: none) and its stdout
 * read as one JSON object (NULL when it printed none); *st its status. */
static json_t *tool_json(struct adv *a, char **av, int in, int *st)
{
	char path[PATH_MAX];
	struct proc_spec ps = PROC_SPEC(av);
	int pfd[2], w = 0;
	json_t *out;
	pid_t pid;

	pathf(path, sizeof path, "%s/%s", a->libexec, av[0]);
	ps.file = path;
	ps.in = in;
	ps.err = PROC_INHERIT;
	if (pipe2(pfd, O_CLOEXEC) < 0)
		die(EX_SYS, "unable to make a pipe:");
	ps.out = pfd[1];
	if ((pid = proc_spawn(&ps)) < 0)
		die(EX_SYS, "unable to start %s:", path);
	close(pfd[1]);
	out = read_serving(a, pfd[0]);
	close(pfd[0]);
	if (proc_wait(pid, &w) < 0)
		die(EX_SYS, "unable to wait for %s:", path);
	*st = proc_status(w);
	return out;
}

/* isopod-exec --vm ID -- sh -c SCRIPT: its result, or NULL. */
static json_t *guest_sh(struct adv *a, const struct avm *vm, const char *script, int tmo_ms, int *st)
{
	char t[32];
	char *av[] = { "isopod-exec", "--vm", (char *)vm->id, "--timeout-ms", t, "--", "sh", "-c",
		       (char *)script, NULL };

	snprintf(t, sizeof t, "%d", tmo_ms);
	return tool_json(a, av, PROC_NULL, st);
}

/* The ledger of vm has a line refusing `name` (kind dns or http). */
static int ledger_refused(const struct avm *vm, const char *name, const char *kind)
{
	char p[PATH_MAX], line[4096];
	FILE *f;
	int found = 0;

	pathf(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), vm->id);
	if (!(f = fopen(p, "re")))
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		json_t *j = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
		const char *n = json_string_value(json_object_get(j, "name"));
		const char *k = json_string_value(json_object_get(j, "kind"));
		const char *v = json_string_value(json_object_get(j, "verdict"));

		found = n && k && v && !strcmp(n, name) && !strcmp(k, kind) && !strcmp(v, "denied");
		json_decref(j);
	}
	fclose(f);
	return found;
}

/* A probe: what the guest runs and what the host must see. */
struct probe {
	const char *cls;
	char name[128];
	int proto;              /* IPPROTO_TCP/UDP/ICMP; 0: no network (none) */
	char addr[64];
	int port;               /* TCP/UDP port; -1 any */
	const char *tool;       /* the guest program */
	char control[1024], attempt[1024];
	char ledger_name[128];  /* a refusal due in the ledger ("" none) */
	const char *ledger_kind;
	char needle[64];        /* bytes that must not leave ("" none) */
	int nonic;              /* class none: host evidence from the record */
	int broker;             /* the target is the slot's broker: its answer (a refusal) is due */
};

/* Shell for one guest request: "R A" lines (status, answered 0/1). */
#define SH_TCP "o=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | %s -w %d %s %d 2>/dev/null); r=$?; " \
	       "if [ -n \"$o\" ]; then a=1; else a=0; fi; echo \"%s $r $a\""
#define SH_UDP "o=$(nslookup -port=%d -timeout=%d -retry=1 doctor-probe.invalid %s 2>&1); r=$?; " \
	       "case $o in *NXDOMAIN*|*REFUSED*|*Name:*) a=1;; *) a=0;; esac; echo \"%s $r $a\""
#define SH_ICMP "ping -c1 -W%d %s >/dev/null 2>&1; r=$?; " \
		"if [ $r = 0 ]; then a=1; else a=0; fi; echo \"%s $r $a\""

static void sh_tcp(char *b, size_t n, const char *nc, int tmo, const char *addr, int port,
		   const char *tag)
{
	snprintf(b, n, SH_TCP, nc, tmo, addr, port, tag);
}

/* The control of a protocol from vm: what its mode allows. */
static int control_for(struct adv *a, const struct avm *vm, struct probe *p)
{
	switch (p->proto) {
	case IPPROTO_TCP:
		if (!strcmp(vm->mode, "filtered")) {
			/* the broker's proxy answers (a refusal is an answer) */
			snprintf(p->control, sizeof p->control,
				 "o=$(printf 'GET http://doctor-control.invalid/ HTTP/1.0\\r\\n\\r\\n' | "
				 "%s -w %d %s 3128 2>/dev/null); r=$?; case $o in HTTP/*) a=1;; *) a=0;; "
				 "esac; echo \"control $r $a\"", a->nc, a->tmo + 1, vm->gw);
			return 0;
		}
		if (a->open_control) {
			char h[64];
			const char *c = strrchr(a->open_control, ':');

			snprintf(h, sizeof h, "%.*s", (int)(c - a->open_control), a->open_control);
			sh_tcp(p->control, sizeof p->control, a->nc, a->tmo + 1, h, atoi(c + 1),
			       "control");
			return 0;
		}
		return -1;
	case IPPROTO_UDP:
		/* the gateway's DNS (the broker) answers, a refusal included */
		snprintf(p->control, sizeof p->control, SH_UDP, 53, a->tmo + 1, vm->gw, "control");
		return 0;
	case IPPROTO_ICMP:
		snprintf(p->control, sizeof p->control, SH_ICMP, a->tmo + 1, vm->gw, "control");
		return 0;
	default:
		return -1;
	}
}

static json_t *step(const char *name, int ok, json_t *ev)
{
	json_t *s = json_pack("{s:s, s:b}", "step", name, "ok", ok);

	if (ev) {
		json_object_update(s, ev);
		json_decref(ev);
	}
	return s;
}

/* "tag R A" out of the guest's output; -1 when the line is missing. */
static int line_of(const char *out, const char *tag, int *r, int *ans)
{
	const char *l = out;
	size_t tl = strlen(tag);

	while (l && *l) {
		if (!strncmp(l, tag, tl) && l[tl] == ' ' && sscanf(l + tl, " %d %d", r, ans) == 2)
			return 0;
		l = strchr(l, '\n');
		l = l ? l + 1 : NULL;
	}
	return -1;
}

/* Does the VM's QEMU have no NIC?  The record's net is null and its
 * command line has no -netdev/-nic.  *why on failure. */
static int no_nic(const struct avm *vm, char *why, size_t wsz)
{
	json_t *rec = vm_read(vm->id);
	json_int_t qp = json_integer_value(json_object_get(rec, "qemu_pid"));
	char p[64], b[16384];
	ssize_t n, i;
	int fd, bad = 0;

	if (!rec)
		return snprintf(why, wsz, "no record"), -1;
	if (json_string_value(json_object_get(json_object_get(rec, "net"), "tap"))) {
		json_decref(rec);
		return snprintf(why, wsz, "the record has a network"), -1;
	}
	json_decref(rec);
	snprintf(p, sizeof p, "/proc/%lld/cmdline", (long long)qp);
	if (qp <= 0 || (fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return snprintf(why, wsz, "its QEMU (pid %lld) is not there", (long long)qp), -1;
	n = read(fd, b, sizeof b - 1);
	close(fd);
	if (n <= 0)
		return snprintf(why, wsz, "its QEMU's command line is unreadable"), -1;
	b[n] = 0;
	for (i = 0; i < n; i += (ssize_t)strlen(b + i) + 1)
		bad |= !strcmp(b + i, "-netdev") || !strcmp(b + i, "-nic") || !strcmp(b + i, "-net");
	if (bad)
		return snprintf(why, wsz, "its QEMU has a network device"), -1;
	return 0;
}

static void run_probe(struct adv *a, const struct avm *vm, struct probe *p)
{
	char script[4096], why[256] = "";
	json_t *steps = json_array(), *res = NULL, *ev;
	int st = 0, live, tool_ok, cr = -1, ca = 0, ar = -1, aa = 0, ok_ctl, att_blocked, ev_ok;
	const char *out = "", *verdict;
	long hits = 0;
	struct seen s = { 0 };
	int64_t t0 = mono_ms();

	/* 1. liveness, right before: the lock held, the agent runs `true` */
	live = vm_running(vm->id);
	if (live) {
		res = guest_sh(a, vm, "true", 30000, &st);
		live = st == 0 && json_integer_value(json_object_get(res, "exit_code")) == 0 &&
		       json_is_integer(json_object_get(res, "exit_code"));
		json_decref(res);
		res = NULL;
	}
	json_array_append_new(steps, step("liveness", live,
					  json_pack("{s:s, s:b, s:i}", "vm", vm->id, "lock_held",
						    vm_running(vm->id), "noop_status", st)));
	if (!live) {
		json_array_append_new(steps, step("tooling", 0, NULL));
		json_array_append_new(steps, step("control", 0, NULL));
		json_array_append_new(steps, step("attempt", 0, NULL));
		json_array_append_new(steps, step("evidence", 0, NULL));
		verdict = "error";
		snprintf(why, sizeof why, "the VM is not running (lock free or agent silent)");
		goto done;
	}
	/* 2-4 in one request: the tool, the control, the attempt */
	snprintf(script, sizeof script,
		 "command -v %s >/dev/null 2>&1; echo \"tooling $?\"\n%s\n%s\n", p->tool, p->control,
		 p->attempt);
	sniff_drain(a->sniff);
	if (p->proto)
		own_hits(a, p->addr, p->proto);
	res = guest_sh(a, vm, script, (a->tmo * 3 + 20) * 1000, &st);
	s = sniff_count(a->sniff, vm, p->proto ? p->addr : NULL, p->proto, p->port,
			p->needle[0] ? p->needle : NULL);
	if (p->proto)
		hits = own_hits(a, p->addr, p->proto);
	out = json_string_value(json_object_get(res, "stdout"));
	if (!out)
		out = "";
	tool_ok = res && !json_is_true(json_object_get(res, "timed_out")) &&
		  strstr(out, "tooling 0\n") != NULL;
	if (line_of(out, "control", &cr, &ca) < 0 || line_of(out, "attempt", &ar, &aa) < 0)
		tool_ok = 0;
	/* the program itself must have run: not 126/127, not a signal */
	if (cr == 126 || cr == 127 || cr > 128 || ar == 126 || ar == 127 || ar > 128)
		tool_ok = 0;
	json_array_append_new(steps, step("tooling", tool_ok,
					  json_pack("{s:s, s:b, s:i, s:i}", "program", p->tool,
						    "exec_timed_out",
						    json_is_true(json_object_get(res, "timed_out")),
						    "control_status", cr, "attempt_status", ar)));
	ok_ctl = tool_ok && ca == 1;
	json_array_append_new(steps, step("control", ok_ctl, json_pack("{s:i, s:b}", "status", cr,
									"answered", ca == 1)));
	att_blocked = aa != 1;
	json_array_append_new(steps, step("attempt", tool_ok && !att_blocked,
					  json_pack("{s:s, s:i, s:b}", "target", p->addr, "status", ar,
						    "answered", aa == 1)));
	/* 5. the host's evidence */
	if (p->nonic) {
		ev_ok = no_nic(vm, why, sizeof why) == 0;
		ev = json_pack("{s:b, s:s?}", "no_nic", ev_ok, "why", ev_ok ? NULL : why);
	} else {
		int led = !p->ledger_name[0] || ledger_refused(vm, p->ledger_name, p->ledger_kind);

		ev_ok = s.in > 0 && s.out == 0 && (p->broker || s.back == 0) && s.payload == 0 &&
			hits == 0 && s.drops == 0 && led;
		ev = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "tap", vm->tap, "in_from_guest",
			       (json_int_t)s.in, "out_to_target", (json_int_t)s.out, "back_to_guest",
			       (json_int_t)s.back, "own_listener_hits", (json_int_t)hits,
			       "capture_drops", (json_int_t)s.drops, "leaked_payload",
			       (json_int_t)s.payload);
		if (p->ledger_name[0])
			json_object_set_new(ev, "ledger_refusal", json_boolean(led));
	}
	json_array_append_new(steps, step("evidence", ev_ok, ev));
	if (!tool_ok) {
		verdict = "error";
		snprintf(why, sizeof why, "the probe program %s did not run (missing, 126/127, a signal or a timeout)", p->tool);
	} else if (!ok_ctl) {
		verdict = "error";
		snprintf(why, sizeof why, "the control failed: the probe would prove nothing");
	} else if (!att_blocked) {
		verdict = "fail";
		snprintf(why, sizeof why, "the attempt got an answer");
	} else if (!p->nonic && s.drops) {
		verdict = "error";
		snprintf(why, sizeof why, "the capture dropped frames");
	} else if (!p->nonic && s.in == 0) {
		verdict = "error";
		snprintf(why, sizeof why, "the attempt never reached the host (nothing on %s)", vm->tap);
	} else if (!ev_ok) {
		verdict = "fail";
		if (!p->nonic)
			snprintf(why, sizeof why, "%s",
				 s.out || s.payload ? "the probe left the host (seen on the way out)" :
				 s.back && !p->broker ? "the target answered the guest" :
				 hits ? "the doctor's listener got a hit" :
				 "no refusal in the broker's ledger");
	} else {
		verdict = "pass";
	}
done:
	if (!strcmp(verdict, "pass"))
		a->pass++;
	else if (!strcmp(verdict, "fail"))
		a->fail++;
	else
		a->error++;
	json_array_append_new(a->probes,
			      json_pack("{s:s, s:s, s:s, s:s, s:s?, s:o, s:I}", "name", p->name, "class",
					p->cls, "vm", vm->id, "verdict", verdict, "why",
					why[0] ? why : NULL, "steps", steps, "ms",
					(json_int_t)(mono_ms() - t0)));
	json_decref(res);
}

static struct probe *probe_new(struct probe *p, const char *cls, int proto, const char *addr,
			       int port, const char *tool)
{
	*p = (struct probe){ .cls = cls, .proto = proto, .port = port, .tool = tool };
	snprintf(p->addr, sizeof p->addr, "%s", addr ? addr : "");
	return p;
}

/* One probe of protocol proto against addr (port for TCP/UDP), with the
 * mode's control. */
static void probe_ip(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		     int proto, const char *addr, int port)
{
	struct probe p;

	probe_new(&p, cls, proto, addr, port,
		  proto == IPPROTO_TCP ? a->nc : proto == IPPROTO_UDP ? "nslookup" : "ping");
	snprintf(p.name, sizeof p.name, "%s/%s", vm->mode, name);
	if (control_for(a, vm, &p) < 0) {
		/* no control: the probe cannot tell "blocked" from "broken" */
		snprintf(p.control, sizeof p.control, "echo 'control 0 0'");
	}
	if (proto == IPPROTO_TCP)
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, addr, port, "attempt");
	else if (proto == IPPROTO_UDP)
		snprintf(p.attempt, sizeof p.attempt, SH_UDP, port, a->tmo, addr, "attempt");
	else
		snprintf(p.attempt, sizeof p.attempt, SH_ICMP, a->tmo, addr, "attempt");
	if (proto == IPPROTO_ICMP)
		p.port = -1;
	run_probe(a, vm, &p);
}

static void probes_net(struct adv *a, const struct avm *vm, const struct range *allow, size_t nallow,
		       int again)
{
	const struct range_def *rl;
	size_t nr, i;
	char n[128], gwn[96];
	int k;

	if (again)
		goto other_vm; /* a second VM of a mode: the same policy, but the way back */
	probe_ip(a, vm, "metadata", "metadata-tcp", IPPROTO_TCP, a->meta, 80);
	probe_ip(a, vm, "metadata", "metadata-udp", IPPROTO_UDP, a->meta, a->udp_port);
	probe_ip(a, vm, "metadata", "metadata-icmp", IPPROTO_ICMP, a->meta, -1);
	/* one address of every denied IPv4 block: its first host */
	rl = ranges_list(&nr);
	for (i = 0; i < nr; i++) {
		struct range r;
		const char *why;
		char t[64];
		uint8_t h[4];
		size_t j;
		int opened = 0;

		if (range_parse(rl[i].cidr, &r, &why) < 0 || r.af != 4)
			continue;
		/* the guest's own kernel keeps these (0/8, 127/8) or will not
		 * send them unasked (the limited broadcast): not the host's to block */
		if (r.a[0] == 0 || r.a[0] == 127 || r.len == 32)
			continue;
		memcpy(h, r.a, 4);
		h[3] |= 1;
		for (j = 0; j < nallow; j++)
			opened |= range_has(&allow[j], 4, h);
		if (opened && !strcmp(vm->mode, "open"))
			continue; /* the host opened it (allow_range): a warning already says so */
		inet_ntop(AF_INET, h, t, sizeof t);
		snprintf(n, sizeof n, "range-%s", rl[i].cidr);
		/* multicast takes no TCP: a datagram */
		if (r.a[0] >= 224 && r.a[0] < 240)
			probe_ip(a, vm, "denied-range", n, IPPROTO_UDP, t, a->udp_port);
		else
			probe_ip(a, vm, "denied-range", n, IPPROTO_TCP, t, 80);
	}
	/* the host's own addresses: the doctor's listener on each */
	for (k = 0; k < a->nhost; k++) {
		snprintf(n, sizeof n, "host-%s-tcp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_TCP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-udp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_UDP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-icmp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_ICMP, a->hostaddr[k], -1);
	}
	/* the gateway's ports other than the broker's */
	snprintf(gwn, sizeof gwn, "gateway-%s-port-%d", vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-tcp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_TCP, vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-udp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_UDP, vm->gw, ADV_LISTEN_PORT);
	/* the host's default gateway */
	if (a->gwhost[0]) {
		snprintf(n, sizeof n, "host-gateway-%s-tcp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_TCP, a->gwhost, 80);
		snprintf(n, sizeof n, "host-gateway-%s-icmp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_ICMP, a->gwhost, -1);
	}
	/* another VM, this way (the other VM probes back in its own turn) */
other_vm:
	for (k = 0; k < a->nvm; k++) {
		const struct avm *o = &a->vm[k];

		if (o == vm || !o->guest[0])
			continue;
		snprintf(n, sizeof n, "other-vm-%s-to-%s-tcp", vm->guest, o->guest);
		probe_ip(a, vm, "other-vm", n, IPPROTO_TCP, o->guest, 80);
		snprintf(n, sizeof n, "other-vm-%s-to-%s-icmp", vm->guest, o->guest);
		probe_ip(a, vm, "other-vm", n, IPPROTO_ICMP, o->guest, -1);
	}
	if (again || strcmp(vm->mode, "filtered"))
		return;
	/* filtered forwards nothing: an IP literal, without and with the proxy */
	{
		struct probe p;

		/* without the proxy variables: nc honours none */
		probe_new(&p, "filtered-forwarding", IPPROTO_TCP, a->public_addr, 80, a->nc);
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-direct", a->public_addr);
		control_for(a, vm, &p);
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, a->public_addr, 80, "attempt");
		run_probe(a, vm, &p);

		probe_new(&p, "filtered-forwarding", IPPROTO_TCP, vm->gw, 3128, "wget");
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-proxy", a->public_addr);
		control_for(a, vm, &p);
		/* with them (isopod-exec sets them): the broker's refusal is quick;
		 * no -T: busybox 1.35's wget crashes with it */
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(wget -q -O- http://%s/ 2>/dev/null); r=$?; if [ -n \"$o\" ]; then "
			 "a=1; else a=0; fi; echo \"attempt $r $a\"", a->public_addr);
		p.broker = 1;
		/* the evidence: the broker refused it, nothing left for the address */
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", a->public_addr);
		p.ledger_kind = "http";
		run_probe(a, vm, &p);
	}
	/* DNS exfiltration: an unlisted name never leaves the host */
	{
		struct probe p;
		char tag[17], qn[96];

		rand_hex(tag, 8);
		snprintf(qn, sizeof qn, "x%s.exfil.invalid", tag);
		probe_new(&p, "dns-exfiltration", IPPROTO_UDP, vm->gw, 53, "nslookup");
		snprintf(p.name, sizeof p.name, "filtered/dns-exfiltration");
		control_for(a, vm, &p);
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(nslookup -timeout=%d -retry=1 %s %s 2>&1); r=$?; case $o in "
			 "*Name:*x%s*) a=1;; *) a=0;; esac; echo \"attempt $r $a\"",
			 a->tmo, qn, vm->gw, tag);
		snprintf(p.needle, sizeof p.needle, "x%s", tag);
		p.broker = 1;
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", qn);
		p.ledger_kind = "dns";
		run_probe(a, vm, &p);
	}
}

static void probes_none(struct adv *a, const struct avm *vm)
{
	struct probe p;

	probe_new(&p, "none", 0, a->meta, -1, "ping");
	snprintf(p.name, sizeof p.name, "none/no-nic");
	snprintf(p.control, sizeof p.control, SH_ICMP, a->tmo, "127.0.0.1", "control");
	/* any interface but loopback and the kernel's idle tunnel devices, or
	 * an answer from the metadata address, is a way out */
	snprintf(p.attempt, sizeof p.attempt,
		 "a=0; for i in /sys/class/net/*; do case ${i##*/} in lo|sit0|tunl0|ip6tnl0|'*') ;; "
		 "*) a=1;; esac; done; ping -c1 -W%d %s >/dev/null 2>&1; r=$?; [ $r != 0 ] || a=1; "
		 "echo \"attempt $r $a\"", a->tmo, a->meta);
	p.nonic = 1;
	run_probe(a, vm, &p);
}

/* The host's default gateway (IPv4, /proc/net/route) into out, or "". */
static void default_gateway(char *out, size_t sz)
{
	FILE *f = fopen("/proc/net/route", "re");
	char l[512], ifn[64];
	unsigned dst, gw, flags;

	*out = 0;
	if (!f)
		return;
	while (fgets(l, sizeof l, f))
		if (sscanf(l, "%63s %x %x %x", ifn, &dst, &gw, &flags) == 4 && dst == 0 && gw) {
			struct in_addr ia = { .s_addr = gw };

			inet_ntop(AF_INET, &ia, out, (socklen_t)sz);
			break;
		}
	fclose(f);
}

/* The host's own IPv4 addresses (not loopback, not a tap's gateway). */
static void host_addrs(struct adv *a)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i && a->nhost < 8; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
		    !strncmp(i->ifa_name, NET_TAP_PREFIX, strlen(NET_TAP_PREFIX)))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a->hostaddr[a->nhost],
			  sizeof a->hostaddr[0]);
		a->nhost++;
	}
	freeifaddrs(ifa);
}

/* The VM of record id as the probes need it. -1 with why. */
static int avm_of(struct avm *v, const char *id, char *why, size_t wsz)
{
	json_t *rec = vm_read(id), *net;

	if (!rec)
		return snprintf(why, wsz, "no record for %s: %s", id, strerror(errno)), -1;
	memset(v, 0, sizeof *v);
	snprintf(v->id, sizeof v->id, "%s", id);
	net = json_object_get(rec, "net");
	if (!json_is_object(net) || !json_string_value(json_object_get(net, "tap"))) {
		snprintf(v->mode, sizeof v->mode, "none");
		v->slot = -1;
	} else {
		snprintf(v->mode, sizeof v->mode, "%s",
			 json_string_value(json_object_get(net, "mode")) ?: "?");
		snprintf(v->tap, sizeof v->tap, "%s", json_string_value(json_object_get(net, "tap")));
		snprintf(v->gw, sizeof v->gw, "%s",
			 json_string_value(json_object_get(net, "gateway")) ?: "");
		snprintf(v->guest, sizeof v->guest, "%s",
			 json_string_value(json_object_get(net, "guest_ip")) ?: "");
		v->slot = (int)json_integer_value(json_object_get(net, "slot"));
		v->ifindex = (int)if_nametoindex(v->tap);
	}
	json_decref(rec);
	return 0;
}

/* claim | boot one VM of mode, as `isopod run` does.  -1 with why. */
static int boot_vm(struct adv *a, const char *mode, char *why, size_t wsz)
{
	char *cav[8] = { "isopod-claim" }, pid[32], *body;
	char *bav[] = { "isopod-boot", "--owner-pid", pid, "--timeout-ms", "240000", NULL };
	char *sav[] = { "isopod-stop", "--force", NULL, NULL };
	int n = 1, st = 0, fd;
	json_t *c, *b;
	const char *id;

	if (strcmp(mode, "none")) {
		cav[n++] = "--net", cav[n++] = (char *)mode;
		if (!strcmp(mode, "filtered") && a->allow)
			cav[n++] = "--allow", cav[n++] = (char *)a->allow;
	}
	c = tool_json(a, cav, PROC_NULL, &st);
	id = json_string_value(json_object_get(json_object_get(c, "vm"), "id"));
	if (st || !id) {
		json_decref(c);
		return snprintf(why, wsz, "isopod-claim --net %s failed (exit %d): %s", mode, st,
				st == 102 ? "no free slot" : "see its diagnostic"), -1;
	}
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	if ((fd = memfd_create("claim", MFD_CLOEXEC)) < 0 || !(body = json_dumps(c, JSON_COMPACT)) ||
	    write_all(fd, body, strlen(body)) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		die(EX_SYS, "unable to hand the claim to isopod-boot:");
	free(body);
	b = tool_json(a, bav, fd, &st);
	close(fd);
	json_decref(b);
	if (st) {
		sav[2] = (char *)id;
		json_decref(tool_json(a, sav, PROC_NULL, &n));
		snprintf(why, wsz, "isopod-boot of %s (--net %s) failed (exit %d)", id, mode, st);
		json_decref(c);
		return -1;
	}
	if (avm_of(&a->vm[a->nvm], id, why, wsz) < 0) {
		json_decref(c);
		return -1;
	}
	a->vm[a->nvm++].ours = 1;
	json_decref(c);
	return 0;
}

static void stop_ours(struct adv *a)
{
	int i, st;

	for (i = 0; i < a->nvm; i++)
		if (a->vm[i].ours) {
			char *sav[] = { "isopod-stop", "--force", a->vm[i].id, NULL };

			json_decref(tool_json(a, sav, PROC_NULL, &st));
			if (st)
				warn("unable to stop %s (isopod-stop exit %d); isopod gc will reap it",
				     a->vm[i].id, st);
		}
}

/* What a probe from inside cannot see, checked on the host: each tap's
 * forwarding flag as netsetup set it (filtered off, open on) and its
 * fail-closed routing rule (priority 10, blackhole) in place, read back
 * with ip(8).  Each check {check, tap, ok, want, have}. */
static json_t *host_checks(struct adv *a)
{
	json_t *out = json_array(), *rules = NULL, *r;
	char *av[] = { "ip", "-j", "-4", "rule", "show", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	int k, nt = net_ntaps(), pfd[2], w = 0;
	size_t i;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) == 0) {
		ps.out = pfd[1];
		if ((pid = proc_spawn(&ps)) >= 0) {
			close(pfd[1]);
			/* an array: jansson's own reader (json_load_fd wants an object) */
			rules = json_loadfd(pfd[0], 0, NULL);
			proc_wait(pid, &w);
		} else {
			close(pfd[1]);
		}
		close(pfd[0]);
	}
	for (k = 0; k < nt; k++) {
		char tap[32], p[PATH_MAX], mode[32], have[8] = "?";
		const char *want;
		int fd, rule = 0;
		ssize_t n;

		snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
		want = !strcmp(net_tap_mode(k, mode, sizeof mode), "open") ? "1" : "0";
		pathf(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/forwarding", tap);
		if ((fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
			n = read(fd, have, sizeof have - 1);
			have[n > 0 ? n : 0] = 0;
			have[strcspn(have, "\n")] = 0;
			close(fd);
		}
		json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:b, s:s, s:s}", "check",
						     "tap-forwarding", "tap", tap, "mode", mode, "ok",
						     !strcmp(have, want), "want", want, "have", have));
		json_array_foreach(rules, i, r)
			rule |= json_integer_value(json_object_get(r, "priority")) == 10 &&
				!strcmp(json_string_value(json_object_get(r, "iif")) ?: "", tap) &&
				!strcmp(json_string_value(json_object_get(r, "action")) ?: "", "blackhole");
		json_array_append_new(out, json_pack("{s:s, s:s, s:b}", "check", "fail-closed-rule",
						     "tap", tap, "ok", rule));
	}
	json_decref(rules);
	(void)a;
	return out;
}

/* A readable table for a person at a terminal (stderr: stdout is data). */
static void table(json_t *probes)
{
	size_t i;
	json_t *p;

	json_array_foreach(probes, i, p)
		fprintf(stderr, "%-6s %-22s %-48s %s\n",
			json_string_value(json_object_get(p, "verdict")),
			json_string_value(json_object_get(p, "class")),
			json_string_value(json_object_get(p, "name")),
			json_string_value(json_object_get(p, "why")) ?: "");
}

struct adv_opts {
	const char *vmref, *modes;
};

static int adverse(struct adv *a, const struct adv_opts *op)
{
	char started[32], finished[32], why[1024] = "", mid[64] = "", host[256] = "", err[1024];
	const char *setup_step = NULL, *verdict;
	struct range allow[RANGES_ALLOW_MAX];
	size_t nallow = 0;
	int i, st, rc, nfilt = 0, nopen = 0, nt = net_ntaps(), want_none, want_filt, want_open;
	char mode[32];
	json_t *subj = NULL, *o, *vms = json_array(), *hc = json_array(), *c;
	size_t j;
	int hbad = 0;
	char *sav[] = { "isopod-attest", "subjects", NULL };
	int fd;
	ssize_t n;

	iso_now(started, sizeof started);
	if ((fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, mid, sizeof mid - 1);
		mid[n > 0 ? n : 0] = 0;
		mid[strcspn(mid, "\n")] = 0;
		close(fd);
	}
	gethostname(host, sizeof host - 1);
	for (i = 0; i < nt; i++) {
		if (!strcmp(net_tap_mode(i, mode, sizeof mode), "open"))
			nopen++;
		else if (!strcmp(mode, "filtered"))
			nfilt++;
	}
	want_none = !op->modes || strstr(op->modes, "none");
	want_filt = op->modes ? strstr(op->modes, "filtered") != NULL : nfilt > 0;
	want_open = op->modes ? strstr(op->modes, "open") != NULL : nopen > 0;
	if (ranges_load_config(ranges_config_path(), allow, RANGES_ALLOW_MAX, &nallow, err,
			       sizeof err) < 0)
		nallow = 0;
	/* what is tested is recorded first: isopod-attest signs only these */
	subj = tool_json(a, sav, PROC_NULL, &st);
	if (st || !json_is_array(json_object_get(subj, "subjects"))) {
		json_array_append_new(a->warnings,
				      json_sprintf("isopod-attest subjects failed (exit %d): this report cannot be signed", st));
		json_decref(subj);
		subj = NULL;
	}
	if ((a->sniff = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL))) < 0) {
		setup_step = "capture";
		snprintf(why, sizeof why, "unable to open a packet socket: %s (root needed)", strerror(errno));
		goto report;
	} else {
		int big = 8 << 20;

		setsockopt(a->sniff, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	}
	if (op->vmref) {
		char id[VM_ID_SZ];

		if (vm_resolve(op->vmref, id, why, sizeof why) < 0 ||
		    avm_of(&a->vm[0], id, why, sizeof why) < 0) {
			setup_step = "vm";
			goto report;
		}
		a->nvm = 1;
	} else {
		if ((want_filt || want_open) && nt == 0) {
			setup_step = "network";
			snprintf(why, sizeof why, "no isopod taps: host networking is not set up (sudo isopod-netsetup)");
			goto report;
		}
		if (want_open && !a->open_control) {
			setup_step = "targets";
			snprintf(why, sizeof why, "open slots exist but no --open-control ADDR:PORT (a TCP service an open guest may reach) was given");
			goto report;
		}
		if (want_none && boot_vm(a, "none", why, sizeof why) < 0)
			setup_step = "boot";
		for (i = 0; !setup_step && want_filt && i < (nfilt >= 2 ? 2 : 1); i++)
			if (boot_vm(a, "filtered", why, sizeof why) < 0)
				setup_step = "boot";
		if (!setup_step && want_open && boot_vm(a, "open", why, sizeof why) < 0)
			setup_step = "boot";
		if (setup_step)
			goto report;
	}
	/* the doctor's own listeners: host addresses and each gateway */
	for (i = 0; i < a->nvm; i++)
		if (a->vm[i].gw[0] && !own_has(a, a->vm[i].gw, IPPROTO_TCP) &&
		    (own_open(a, a->vm[i].gw, ADV_LISTEN_PORT, IPPROTO_TCP) < 0 ||
		     own_open(a, a->vm[i].gw, ADV_LISTEN_PORT, IPPROTO_UDP) < 0)) {
			setup_step = "listeners";
			snprintf(why, sizeof why, "unable to listen on %s:%d: %s", a->vm[i].gw,
				 ADV_LISTEN_PORT, strerror(errno));
			goto report;
		}
	for (i = 0; i < a->nhost; i++)
		if (own_open(a, a->hostaddr[i], ADV_LISTEN_PORT, IPPROTO_TCP) < 0 ||
		    own_open(a, a->hostaddr[i], ADV_LISTEN_PORT, IPPROTO_UDP) < 0) {
			setup_step = "listeners";
			snprintf(why, sizeof why, "unable to listen on %s:%d: %s", a->hostaddr[i],
				 ADV_LISTEN_PORT, strerror(errno));
			goto report;
		}
	/* the host side, once (not with --vm: that VM's own probes only) */
	if (!op->vmref) {
		json_decref(hc);
		hc = host_checks(a);
	}
	json_array_foreach(hc, j, c)
		hbad += !json_is_true(json_object_get(c, "ok"));
	for (i = 0; i < a->nvm; i++) {
		if (!strcmp(a->vm[i].mode, "none"))
			probes_none(a, &a->vm[i]);
		else
			probes_net(a, &a->vm[i], allow, nallow,
				   i > 0 && !strcmp(a->vm[i - 1].mode, a->vm[i].mode));
	}
report:
	for (i = 0; i < a->nvm; i++)
		json_array_append_new(vms, json_pack("{s:s, s:s, s:s?, s:s?, s:b}", "id", a->vm[i].id,
						     "mode", a->vm[i].mode, "tap",
						     a->vm[i].tap[0] ? a->vm[i].tap : NULL, "guest",
						     a->vm[i].guest[0] ? a->vm[i].guest : NULL,
						     "booted_by_doctor", a->vm[i].ours));
	stop_ours(a);
	iso_now(finished, sizeof finished);
	if (setup_step || a->error)
		verdict = "error", rc = EX_SYS;
	else if (a->fail || hbad || !json_array_size(a->probes))
		verdict = "fail", rc = EX_GUEST;
	else
		verdict = "pass", rc = 0;
	o = json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:s, s:s, s:O?, s:{s:b, s:s?, s:s?}, s:o, s:s,"
		      " s:{s:i, s:i, s:i, s:i}, s:O, s:O}",
		      "doctor", "version", ISOPOD_VERSION, "suite", "adverse", "host", "id", mid,
		      "hostname", host, "started", started, "finished", finished, "subjects",
		      subj ? json_object_get(subj, "subjects") : NULL, "setup", "ok", !setup_step,
		      "step", setup_step, "why", setup_step ? why : NULL, "vms", vms, "verdict",
		      verdict, "counts", "probes", (int)json_array_size(a->probes), "pass", a->pass,
		      "fail", a->fail, "error", a->error, "probes", a->probes, "warnings", a->warnings);
	if (!o)
		die(EX_SYS, "unable to build the report");
	json_object_set_new(o, "host_checks", hc);
	json_object_set_new(o, "targets",
			    json_pack("{s:s, s:s, s:s?, s:i, s:s?}", "metadata", a->meta, "public",
				      a->public_addr, "host_gateway", a->gwhost[0] ? a->gwhost : NULL,
				      "udp_port", a->udp_port, "open_control", a->open_control));
	{
		json_t *ha = json_array();

		for (i = 0; i < a->nhost; i++)
			json_array_append_new(ha, json_string(a->hostaddr[i]));
		json_object_set_new(json_object_get(o, "targets"), "host_addresses", ha);
	}
	if (isatty(2))
		table(a->probes);
	emit(o);
	json_decref(o);
	json_decref(subj);
	if (setup_step)
		warn("setup failed at %s: %s; no attestation is possible", setup_step, why);
	else if (rc)
		warn("%d probe(s) failed, %d could not show they ran (error), %d host check(s) failed",
		     a->fail, a->error, hbad);
	return rc;
}

/* Option values that end up in the guest's shell: IPv4 literals, words. */
static const char *adv_ipv4(const char *s, const char *opt)
{
	struct in_addr ia;

	if (inet_pton(AF_INET, s, &ia) != 1)
		die(EX_USAGE, "%s %s: want an IPv4 address", opt, EXC(s));
	return s;
}

static const char *adv_ipv4port(const char *s)
{
	const char *c = strrchr(s, ':');
	char h[64];
	long long p;

	if (!c || (size_t)(c - s) >= sizeof h || parse_ll(c + 1, 1, 65535, &p) < 0)
		die(EX_USAGE, "--open-control %s: want ADDR:PORT", EXC(s));
	snprintf(h, sizeof h, "%.*s", (int)(c - s), s);
	adv_ipv4(h, "--open-control");
	return s;
}

static const char *adv_word(const char *s, const char *opt)
{
	if (!*s || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-._/") != strlen(s) || strlen(s) > 100)
		die(EX_USAGE, "%s %s: want 1..100 of [a-z0-9-._/]", opt, EXC(s));
	return s;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "quick", no_argument, 0, 'q' },
					    { "net", required_argument, 0, 'n' },
					    { "shell", required_argument, 0, 's' },
					    { "front-end", required_argument, 0, 'f' },
					    { "help", no_argument, 0, 'h' },
					    { "adverse", no_argument, 0, 'A' },
					    { "vm", required_argument, 0, 'V' },
					    { "modes", required_argument, 0, 'M' },
					    { "metadata", required_argument, 0, 'm' },
					    { "host-gateway", required_argument, 0, 'g' },
					    { "host-addr", required_argument, 0, 'H' },
					    { "public", required_argument, 0, 'P' },
					    { "open-control", required_argument, 0, 'O' },
					    { "udp-port", required_argument, 0, 'u' },
					    { "probe-timeout-s", required_argument, 0, 't' },
					    { "nc", required_argument, 0, 'c' },
					    { "allow", required_argument, 0, 'a' },
					    { 0, 0, 0, 0 } };
	static const char *const tools[] = { "claim", "boot", "exec", "stop", "gc", "broker" };
	struct diag d = { .missing = json_array(), .warnings = json_array() };
	const char *defnet = getenv("ISOPOD_NET"), *shell = NULL, *front = "isopod";
	char libexec[PATH_MAX], p[PATH_MAX], err[1024];
	json_t *kvm, *qemu, *net, *have = json_array(), *run = NULL, *o;
	int ch, quick = 0, usable, run_ok, adv_on = 0, hostset = 0, gwset = 0;
	struct adv a = { .meta = "169.254.169.254", .public_addr = "1.1.1.1", .nc = "nc",
			 .udp_port = 53, .tmo = 2, .sniff = -1 };
	struct adv_opts op = { 0 };
	long long lv;
	size_t i;

	progname = "isopod-doctor";
	if (!d.missing || !d.warnings || !have)
		die(EX_SYS, "out of memory");
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'q': quick = 1; break;
		case 'n': defnet = optarg; break;
		case 's': shell = optarg; break;
		case 'f': front = optarg; break;
		case 'h': printf("usage: %s\n", USAGE); return 0;
		case 'A': adv_on = 1; break;
		case 'V': op.vmref = optarg; break;
		case 'M': op.modes = optarg; break;
		case 'm': a.meta = adv_ipv4(optarg, "--metadata"); break;
		case 'g':
			snprintf(a.gwhost, sizeof a.gwhost, "%s", adv_ipv4(optarg, "--host-gateway"));
			gwset = 1;
			break;
		case 'H':
			if (a.nhost >= 8)
				die(EX_USAGE, "--host-addr: at most 8");
			snprintf(a.hostaddr[a.nhost++], sizeof a.hostaddr[0], "%s",
				 adv_ipv4(optarg, "--host-addr"));
			hostset = 1;
			break;
		case 'P': a.public_addr = adv_ipv4(optarg, "--public"); break;
		case 'O': a.open_control = adv_ipv4port(optarg); break;
		case 'u':
			if (parse_ll(optarg, 1, 65535, &lv) < 0)
				die(EX_USAGE, "--udp-port %s: want 1..65535", EXC(optarg));
			a.udp_port = (int)lv;
			break;
		case 't':
			if (parse_ll(optarg, 1, 30, &lv) < 0)
				die(EX_USAGE, "--probe-timeout-s %s: want 1..30", EXC(optarg));
			a.tmo = (int)lv;
			break;
		case 'c': a.nc = adv_word(optarg, "--nc"); break;
		case 'a': a.allow = adv_word(optarg, "--allow"); break;
		default: fprintf(stderr, "usage: %s\n", USAGE); return EX_USAGE;
		}
	}
	if (optind < argc)
		die(EX_USAGE, "unknown argument %s\nusage: %s", EXC(argv[optind]), USAGE);
	if (!adv_on && (op.vmref || op.modes || hostset || gwset || a.allow || a.open_control))
		die(EX_USAGE, "those options are the adverse suite's: add --adverse\nusage: %s", USAGE);
	if (adv_on) {
		if (quick)
			die(EX_USAGE, "--quick and --adverse: one or the other\nusage: %s", USAGE);
		if (op.vmref && !vm_ref_ok(op.vmref))
			die(EX_USAGE, "--vm %s: not a VM reference", EXC(op.vmref));
		if (op.modes && strspn(op.modes, "nonefilteredopen,") != strlen(op.modes))
			die(EX_USAGE, "--modes %s: a comma-separated list of none, filtered, open",
			    EXC(op.modes));
		if (!(a.probes = json_array()) || !(a.warnings = json_array()))
			die(EX_SYS, "out of memory");
		tools_dir(a.libexec, sizeof a.libexec);
		if (!gwset)
			default_gateway(a.gwhost, sizeof a.gwhost);
		if (!hostset)
			host_addrs(&a);
		return adverse(&a, &op);
	}
	if (!defnet || !*defnet)
		defnet = "filtered";
	if (!net_mode_valid(defnet))
		die(EX_USAGE, "--net %s: want none, filtered or open", EXC(defnet));

	/* the kernel and base image a run boots */
	d.kpresent = resolve_kernel(&d.im, err, sizeof err) == 0;
	if (!d.kpresent)
		miss(&d, "kernel");
	d.bpresent = resolve_base(&d.im, "base", NULL, err, sizeof err) == 0;
	if (!d.bpresent)
		miss(&d, "base-image");
	qemu = qemu_facts(&d);
	kvm = kvm_facts(&usable);
	accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));

	tools_dir(libexec, sizeof libexec);
	for (i = 0; i < sizeof tools / sizeof tools[0]; i++) {
		char name[32];

		snprintf(name, sizeof name, "isopod-%s", tools[i]);
		if (pathn(p, sizeof p, "%s/%s", libexec, name) == 0 && access(p, X_OK) == 0)
			json_array_append_new(have, json_string(tools[i]));
		else
			miss(&d, name);
	}
	if (!in_path("flock"))
		miss(&d, "flock");
	net = net_facts(&d, defnet);

	if (!quick && json_array_size(d.missing) == 0) {
		run = real_run(front, defnet, &run_ok);
		if (!run_ok)
			miss(&d, "working-run");
		/* the run's boot probed KVM: report its verdict */
		if (run_ok && !strcmp(d.accel, "unknown"))
			accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));
	}

	o = json_pack("{s:b, s:s, s:s, s:s?, s:b, s:o, s:o, s:{s:b, s:s?}, s:{s:b, s:s, s:s?},"
		      " s:{s:s?, s:b}, s:s, s:s, s:o, s:o, s:O, s:O}",
		      "ok", json_array_size(d.missing) == 0, "version", ISOPOD_VERSION, "accel",
		      d.accel, "accel_reason", d.reason[0] ? d.reason : NULL, "accel_probed", d.probed,
		      "kvm", kvm, "qemu", qemu, "kernel", "present", d.kpresent, "sha256",
		      d.im.ksha[0] ? d.im.ksha : NULL, "base", "present", d.bpresent, "flavor", "base",
		      "sha256", d.im.bsha[0] ? d.im.bsha : NULL, "shell", "path", shell, "pipefail",
		      shell != NULL, "home", store_home(), "libexec", libexec, "tools", have, "net",
		      net, "warnings", d.warnings, "missing", d.missing);
	if (!o)
		die(EX_SYS, "unable to build the report");
	if (run)
		json_object_set_new(o, "run", run);
	emit(o);
	if (json_array_size(d.missing)) {
		char list[2048] = "";
		size_t used = 0;
		json_t *v;

		json_array_foreach(d.missing, i, v)
			if (used + strlen(json_string_value(v)) + 2 < sizeof list)
				used += (size_t)snprintf(list + used, sizeof list - used, " %s",
							 json_string_value(v));
		die(EX_SYS, "a run cannot work here; missing:%s", list);
	}
	return 0;
}
