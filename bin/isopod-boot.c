/* isopod-boot - boot a claimed VM under a supervisor and wait for its agent.
 *
 * Process shape:
 *   isopod-boot ──fork──> supervisor ──fork+exec──> qemu-system-x86_64
 * The supervisor holds vms/<id>/lock (LOCK_EX) for its whole life: that lock
 * IS "the VM is running".  It watches QEMU, the owner and its signals through
 * pidfds and a signalfd, and kills QEMU (the pid it forked itself, never a
 * pid read from a file) when the owner goes away.  QEMU carries
 * PDEATHSIG=SIGKILL, so a SIGKILLed supervisor takes QEMU with it. */

#include "accel.h"
#include "host.h"
#include "image.h"
#include "proc.h"
#include "qemu.h"
#include "qmp.h"
#include "egress.h"
#include "net.h"
#include "util.h"
#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-boot [--vcpus N] [--mem-mib N] [--disk-mib N] [--timeout-ms N] " \
	      "[--owner-pid PID] [--keep] [--accel kvm|tcg] [--cold]"

#define MIB (1024LL * 1024)

struct cfg {
	long long vcpus, mem_mib, disk_mib, timeout_ms;
	long long owner;
	int keep, disk_given, cold;
	long long warm_wait_ms;   /* ISOPOD_WARM_WAIT_MS */
	const char *accel;        /* forced accelerator or NULL */
	const char *accel_src;    /* who forced it */
};

static struct conn conn; /* 130 KiB of buffers: not on the stack */

/* ---- small helpers ---------------------------------------------------- */

static long long mem_available_mib(void)
{
	char line[256];
	long long kb = -1;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		die(EX_SYS, "unable to open /proc/meminfo:");
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	fclose(f);
	if (kb < 0)
		die(EX_SYS, "unable to read MemAvailable from /proc/meminfo");
	return kb / 1024;
}

/* ---- QEMU ------------------------------------------------------------- */

/* The network slot of this VM (--net open): taken before QEMU starts, its
 * lock held by the supervisor for the VM's whole life.  slot -1: no NIC,
 * and then the command line is exactly the one without networking. */
static struct netslot NET = { .slot = -1, .lock_fd = -1 };

/* This VM's NIC, or NULL. */
static const struct netslot *nic(void)
{
	return NET.slot >= 0 ? &NET : NULL;
}

/* The QEMU of this VM (or of its template) with its files at in: the
 * run's shape and NIC; RAM file and incoming are the caller's to add. */
static struct qemu_cfg vm_qemu(const struct inst *in, const struct img *im, const char *accel,
			       const struct cfg *cf, const struct netslot *ns)
{
	return (struct qemu_cfg){
		.accel = accel,
		.mem_mib = cf->mem_mib,
		.vcpus = cf->vcpus,
		.vmlinux = im->vmlinux,
		.initrd = im->initrd,
		.console = in->console,
		.disk = in->disk,
		.agent_sock = in->agent,
		.qmp_sock = in->qmp,
		.tap = ns ? ns->tap : NULL,
		.mac = ns ? ns->macs : NULL,
	};
}

/* Its network for the supervisor ({mode, gateway, allow}, or NULL): the
 * supervisor starts and ends its egress broker (filtered: proxy + DNS for
 * the allowlist; open: DNS) around QEMU. */
static json_t *SUPNET;

/* ---- boot ------------------------------------------------------------- */

static struct {
	const char *id;
	pid_t sup;
	int supfd, ctlfd, lockfd;
} B = { NULL, -1, -1, -1, -1 };

/* Stop what launch() started, before the boot was confirmed: EOF on ctl
 * without 'r' makes the supervisor kill QEMU, and it reaps QEMU before it
 * exits itself.  The supervisor is our child (not reaped), so signalling
 * it by pid is safe. */
static void abandon(void)
{
	if (B.ctlfd >= 0) {
		close(B.ctlfd);
		B.ctlfd = -1;
	}
	if (B.sup > 0) {
		struct pollfd p = { B.supfd, POLLIN, 0 };
		int st;

		if (B.supfd < 0 || poll(&p, 1, 3000) <= 0) {
			kill(B.sup, SIGTERM);
			p.revents = 0;
			if (B.supfd < 0 || poll(&p, 1, 2000) <= 0)
				kill(B.sup, SIGKILL);
		}
		while (waitpid(B.sup, &st, 0) < 0 && errno == EINTR)
			;
		B.sup = -1;
	}
	if (B.supfd >= 0) {
		close(B.supfd);
		B.supfd = -1;
	}
}

/* Undo what was started, record state failed with the message, exit. */
__attribute__((noreturn, format(printf, 2, 3))) static void fail(int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *m;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	abandon();
	/* Our own hold on the vm lock goes last: the record is final first. */
	if (B.id) {
		m = json_pack("{s:s, s:s}", "state", "failed", "error", msg);
		if (!m || vm_meta_update(B.id, NULL, m) < 0)
			warn("unable to record the failure of %s:", B.id);
		json_decref(m);
	}
	if (B.lockfd >= 0) {
		close(B.lockfd);
		B.lockfd = -1;
		if (vm_wait_stopped(B.id, mono_ms() + 5000) < 0)
			warn("vm %s: lock still held after its supervisor exited", B.id);
	}
	die(code, "%s", msg);
}

static void range(const char *opt, const char *arg, long long lo, long long hi, const char *why,
		  long long *out)
{
	if (parse_ll(arg, lo, hi, out) < 0) {
		if (lo > hi)
			die(EX_USAGE, "%s %s: no valid value on this host (%s)", opt, arg, why);
		die(EX_USAGE, "%s %s: out of range %lld..%lld (%s)", opt, arg, lo, hi, why);
	}
}

static int valid_id(const char *s)
{
	size_t i, n = s ? strlen(s) : 0;

	if (n != 15 || strncmp(s, "vm-", 3))
		return 0;
	for (i = 3; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

/* Start isopod-supervise with its fixed descriptors (isopod-supervise(1)):
 * it starts QEMU with av (keepfd, when >= 0, becomes QEMU's fd 3); read
 * back QEMU's pid.  It inherits the vm lock's open file description, so
 * the lock never has a gap; the parent keeps its own hold on it too
 * (B.lockfd): a failed attempt's supervisor can exit without the VM ever
 * looking free to gc.  0, or -1 with msg. */
static pid_t start_supervisor(const char *id, const struct inst *in, char *const *av,
			      int ownerfd, int keepfd, int ctlfd, int repfd, char *msg, size_t msz)
{
	char sup[PATH_MAX], *sav[8], *text;
	int k = 0, spec[2];
	json_t *j = json_pack("{s:s, s:s, s:[], s:O?}", "vm", id, "dir", in->dir, "qemu", "net",
			      SUPNET);
	struct proc_spec ps = PROC_SPEC(sav);
	pid_t pid;

	for (char *const *a = av; j && *a; a++)
		json_array_append_new(json_object_get(j, "qemu"), json_string(*a));
	text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text) {
		snprintf(msg, msz, "unable to build the supervisor's spec");
		return -1;
	}
	if (pipe2(spec, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		free(text);
		return -1;
	}
	sav[k++] = "isopod-supervise";
	if (ownerfd >= 0)
		sav[k++] = "--owner";
	if (keepfd >= 0)
		sav[k++] = "--mem";
	if (NET.lock_fd >= 0)
		sav[k++] = "--slot";
	sav[k] = NULL;
	ps.file = proc_sibling(sup, sizeof sup, "isopod-supervise", "ISOPOD_SUPERVISE");
	ps.in = spec[0];
	ps.err = PROC_INHERIT; /* until it has opened qemu.log */
	ps.setsid = 1;
	ps.keep[0] = B.lockfd;
	ps.keep[1] = ctlfd;
	ps.keep[2] = repfd;
	ps.keep[3] = ownerfd >= 0 ? ownerfd : PROC_NULL;
	ps.keep[4] = keepfd >= 0 ? keepfd : PROC_NULL;
	ps.keep[5] = NET.lock_fd >= 0 ? NET.lock_fd : PROC_NULL;
	ps.nkeep = 6;
	pid = proc_spawn(&ps);
	close(spec[0]);
	if (pid < 0)
		snprintf(msg, msz, "unable to fork: %s", strerror(errno));
	else if (write_all(spec[1], text, strlen(text)) < 0)
		warn("unable to write the supervisor's spec:"); /* it reports no pid */
	close(spec[1]);
	free(text);
	return pid;
}

/* Start the supervisor, which starts QEMU with av (keepfd, when >= 0,
 * becomes QEMU's fd 3), and read back QEMU's pid.  0, or -1 with msg. */
static int launch(const char *id, const struct inst *in, char *const *av, int ownerfd,
		  int keepfd, char *msg, size_t msz)
{
	static const char *const booting[] = { "booting", NULL };
	char line[256], *end;
	int ctl[2], rep[2];
	size_t got = 0;
	long long v;
	ssize_t n;
	json_t *m;

	if (pipe2(ctl, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		return -1;
	}
	if (pipe2(rep, O_CLOEXEC) < 0) {
		snprintf(msg, msz, "unable to create a pipe: %s", strerror(errno));
		close(ctl[0]);
		close(ctl[1]);
		return -1;
	}
	B.sup = start_supervisor(id, in, av, ownerfd, keepfd, ctl[0], rep[1], msg, msz);
	if (B.sup < 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(rep[0]);
		close(rep[1]);
		return -1;
	}
	close(ctl[0]);
	close(rep[1]);
	B.ctlfd = ctl[1];
	B.supfd = pidfd_open_(B.sup);

	while (got < sizeof line - 1 && (n = read(rep[0], line + got, sizeof line - 1 - got)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	close(rep[0]);
	line[got] = 0;
	if (got > 0 && line[got - 1] == '\n')
		line[got - 1] = 0;
	errno = 0;
	v = strtoll(line, &end, 10);
	if (!got || errno || *end || v <= 0) {
		snprintf(msg, msz, "supervisor failed to start qemu: %s", got ? line : "no report");
		return -1;
	}
	m = json_pack("{s:I, s:I}", "supervisor_pid", (json_int_t)B.sup, "qemu_pid", (json_int_t)v);
	if (!m || vm_meta_update(id, booting, m) < 0)
		warn("unable to update the record of %s:", id);
	json_decref(m);
	return 0;
}

/* Is the supervisor (and so QEMU) gone? */
static int sup_gone(void)
{
	struct pollfd p = { B.supfd, POLLIN, 0 };

	return B.supfd >= 0 && poll(&p, 1, 0) > 0;
}

/* Connect to the agent of what launch() started and shake hands (h), by
 * deadline.  0, or an exit code (EX_SYS, EX_TIMEOUT) with msg; `within`
 * names the bound in the timeout message. */
static int handshake(const struct inst *in, struct hello *h, int64_t deadline, long long within,
		     char *msg, size_t msz)
{
	char l1[256], l2[256];
	int r, st;

	for (;;) {
		int64_t slice = mono_ms() + 100;

		if (conn_open(&conn, in->agent, slice < deadline ? slice : deadline) == 0)
			break;
		if (errno != ETIMEDOUT) {
			snprintf(msg, msz, "unable to connect to the agent: %s", conn.err);
			return EX_SYS;
		}
		if (sup_gone() || mono_ms() >= deadline)
			break;
	}
	r = conn.fd >= 0 ? conn_hello(&conn, h, deadline) : -1;
	if (r == 0) {
		conn_close(&conn);
		return 0;
	}
	{
		struct pollfd p = { B.supfd, POLLIN, 0 };

		/* QEMU gone?  Give the supervisor a moment to notice and exit. */
		if (B.supfd >= 0 && poll(&p, 1, r == -3 ? 0 : 1000) > 0 &&
		    waitpid(B.sup, &st, 0) == B.sup) {
			B.sup = -1;
			conn_close(&conn);
			last_line(in->qlog, l1, sizeof l1);
			last_line(in->console, l2, sizeof l2);
			snprintf(msg, msz, "qemu exited with status %d before the agent answered%s%s%s%s",
				 proc_status(st), l1[0] ? ": " : "", l1, l2[0] ? "; console: " : "",
				 l2);
			return EX_SYS;
		}
	}
	last_line(in->console, l2, sizeof l2);
	if (h->guest_error[0])
		snprintf(msg, msz, "the guest agent reported: %s", h->guest_error);
	else if (r == -3 || conn.fd < 0)
		snprintf(msg, msz, "the guest agent did not answer within %lld ms%s%s", within,
			 l2[0] ? "; console: " : "", l2);
	else
		snprintf(msg, msz, "agent handshake failed: %s", conn.err);
	conn_close(&conn);
	return !h->guest_error[0] && (r == -3 || conn.fd < 0) ? EX_TIMEOUT : EX_SYS;
}

/* ---- the warm pool ---------------------------------------------------- */

#define BUILD_MAX_MS 120000  /* a template boot, at most (bounded by --timeout-ms too) */
#define RESUME_MAX_MS 20000  /* a resume, at most: then the snapshot is retired */
#define RETIRE_WAIT_MS 5000
#define STATE_FD "isopod-state"

static struct {
	int on;                  /* this boot consults the pool */
	char key[65], dir[PATH_MAX], argv_fp[65];
	char *text;              /* the canonical text hashed into key */
	char qver[256];
	const char *net;         /* the net mode: none, filtered or open */
	json_t *layers;          /* the disk chain's stages, root first */
	long long disk_bytes;
	json_t *warnings;
	const char *path;        /* "cold" | "warm" | "snapshot-build" */
	long long resume_ms, build_ms;
	dev_t dev;               /* the snapshot directory resumed from: */
	ino_t ino;               /*   retire that one, never a newer build */
} W = { .path = "cold", .resume_ms = -1, .build_ms = -1 };

static int W_ownerfd = -1; /* the owner's pidfd (-1 with --keep) */

/* Has the owner exited?  Then no run wants this VM: stop building or
 * waiting for a snapshot. */
static int owner_gone(void)
{
	struct pollfd p = { W_ownerfd, POLLIN, 0 };

	return W_ownerfd >= 0 && poll(&p, 1, 0) > 0;
}

/* A warning for the result (and stderr, which the front end relays). */
__attribute__((format(printf, 1, 2))) static void wwarn(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	warn("%s", msg);
	json_array_append_new(W.warnings, json_string(msg));
}

/* The key: sha256 over everything a resume depends on.  The QEMU command
 * line goes in whole, with this VM's paths, tap and MAC replaced, so any
 * change to the machine (a device, an option, the kernel command line)
 * moves the key.  The net mode goes in by name: filtered and open VMs have
 * the same NIC but never share a snapshot.  0, or -1 when this VM cannot
 * be keyed (the pool is then off, with a warning). */
static int warm_setup(const struct img *im, json_t *rec, const struct cfg *cf, const char *accel,
		      long long disk_bytes, const char *forked_disk, const char *net_mode)
{
	char err[512], **a, bsha[65];
	struct qemu_argv q;
	json_t *v, *l, *chain;
	size_t i, tlen = 0;
	FILE *f;

	if (qemu_version(W.qver, sizeof W.qver, err, sizeof err) < 0) {
		wwarn("warm pool not used: %s", err);
		return -1;
	}
	v = json_object_get(rec, "layers");
	if (json_object_get(rec, "stage") && json_is_string(json_object_get(rec, "stage")) &&
	    !json_array_size(v)) {
		wwarn("warm pool not used: the record names a stage but no layers");
		return -1;
	}
	W.layers = json_array();
	json_array_foreach(v, i, l) {
		const char *s = json_string_value(l);

		if (!s || strncmp(s, "st-", 3) || strchr(s, '/') || strchr(s, '\n') ||
		    strlen(s) > 64) {
			wwarn("warm pool not used: bad stage id in the record's layers");
			return -1;
		}
		json_array_append_new(W.layers, json_string(s));
	}
	/* Resuming over another chain than the template's would show the
	 * guest a disk that disagrees with the file system it has cached:
	 * the key names the chain the disk really has, read from the qcow2
	 * headers, and it must be the one the record says. */
	if (forked_disk) {
		chain = json_array();
		if (disk_chain(forked_disk, chain, bsha) < 0 || !json_equal(chain, W.layers) ||
		    strcmp(bsha, im->bsha)) {
			wwarn("warm pool not used: the backing chain of %s is not the one its record "
			      "names", forked_disk);
			json_decref(chain);
			return -1;
		}
		json_decref(chain);
	} else if (json_array_size(W.layers)) {
		wwarn("warm pool not used: the record names stages but boot makes the disk");
		return -1;
	}
	W.disk_bytes = disk_bytes;
	W.net = net_mode;
	/* The per-VM parts (paths, tap, MAC) are placeholders: a key names
	 * a shape, not a VM. */
	if (qemu_shape_argv(&q, accel, cf->mem_mib, cf->vcpus, nic() != NULL) < 0)
		die(EX_SYS, "unable to build the QEMU command line:");

	if (!(f = open_memstream(&W.text, &tlen)))
		die(EX_SYS, "unable to allocate memory:");
	fprintf(f, "isopod-warm %d\nkernel %s\nbase %s\nlayers", WARM_FORMAT, im->ksha, im->bsha);
	json_array_foreach(W.layers, i, v)
		fprintf(f, " %s", json_string_value(v));
	fprintf(f, "\ndisk_bytes %lld\nvcpus %lld\nmem_mib %lld\nnet %s\naccel %s\nqemu %s\n",
		disk_bytes, cf->vcpus, cf->mem_mib, net_mode, accel, W.qver);
	for (a = q.av; *a; a++)
		fprintf(f, "arg %s\n", *a);
	if (fclose(f) != 0)
		die(EX_SYS, "unable to allocate memory:");
	sha256_hex(W.text, tlen, W.key);
	pathf(W.dir, sizeof W.dir, "%s/%s", warm_root(1), W.key);
	qemu_fingerprint(W.argv_fp);
	if (strchr(W.dir, ','))
		die(EX_USAGE, "store path %s contains ','; QEMU options cannot carry it", W.dir);
	return 0;
}

static int published(void)
{
	char p[PATH_MAX];

	pathf(p, sizeof p, "%s/meta.json", W.dir);
	return access(p, F_OK) == 0;
}

/* Poll query-migrate (template) until the migration is over.  0 or -1. */
static int migrate_wait(struct qmp *qm, int64_t deadline, char *msg, size_t msz)
{
	for (;;) {
		json_t *ret = NULL;
		const char *s;
		int r = qmp_call(qm, "query-migrate", NULL, -1, &ret, deadline);

		if (r < 0) {
			snprintf(msg, msz, "%s", qm->err);
			return -1;
		}
		s = json_string_value(json_object_get(ret, "status"));
		if (s && !strcmp(s, "completed")) {
			json_decref(ret);
			return 0;
		}
		if (s && (!strcmp(s, "failed") || !strcmp(s, "cancelled"))) {
			const char *d = json_string_value(json_object_get(ret, "error-desc"));

			snprintf(msg, msz, "migration %s: %s", s, d ? d : "no reason given");
			json_decref(ret);
			return -1;
		}
		json_decref(ret);
		usleep(2000);
	}
}

/* Copy a small file (a VM's empty overlay): 0 or -1. */
static int copy_small(const char *from, const char *to)
{
	char buf[1 << 16];
	int in = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), out, e;
	ssize_t n;

	if (in < 0)
		return -1;
	unlink(to);
	out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0) {
		e = errno;
		close(in);
		errno = e;
		return -1;
	}
	while ((n = read(in, buf, sizeof buf)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || write_all(out, buf, (size_t)n) < 0) {
			e = errno;
			close(in);
			close(out);
			unlink(to);
			errno = e;
			return -1;
		}
	}
	close(in);
	return close(out);
}

/* Tests kill the build at a given step: ISOPOD_TEST_KILL_AT=<point>. */
static void test_point(const char *name)
{
	const char *k = getenv("ISOPOD_TEST_KILL_AT");

	if (k && !strcmp(k, name))
		raise(SIGKILL);
}

/* Wait until QEMU has seen our hang-up on the agent socket.  Its handling
 * writes a control message into guest RAM; with share=on that must happen
 * before the device state is saved, or the memory file and the state
 * would disagree about the virtqueue.  0, or -1 (qm->err). */
static int agent_hung_up(struct qmp *qm, int64_t deadline)
{
	for (;;) {
		json_t *ret = NULL, *v;
		size_t i;
		int down = 0;

		if (qmp_call(qm, "query-chardev", NULL, -1, &ret, deadline) < 0)
			return -1;
		json_array_foreach(ret, i, v) {
			const char *l = json_string_value(json_object_get(v, "label"));
			const char *f = json_string_value(json_object_get(v, "filename"));

			if (l && f && !strcmp(l, "agent"))
				down = !strncmp(f, "disconnected:", 13);
		}
		json_decref(ret);
		if (down)
			return 0;
		if (mono_ms() >= deadline) {
			snprintf(qm->err, sizeof qm->err, "the agent socket still looks connected");
			return -1;
		}
		usleep(2000);
	}
}

/* Boot the template of this shape in the staging directory sd and take
 * its snapshot there.  The template runs as our own child (PDEATHSIG: it
 * dies with us), on a throwaway overlay over this VM's still-empty disk
 * (the same chain and size), with guest RAM in sd/mem (share=on).  Once
 * its agent has answered a bare HELLO (root still read-only, nothing run)
 * we hang up, stop it, migrate its device state into sd/state with
 * x-ignore-shared (RAM stays in sd/mem) and quit it: a template is never
 * resumed.  Then everything is fsynced and described in sd/meta.json.
 * 0, or -1 with msg; sd is the caller's to remove. */
static int build_template(const struct inst *vin, const struct img *im, const struct cfg *cf,
			  const char *accel, int plain, const char *sd, int64_t deadline,
			  char *msg, size_t msz)
{
	char blank[PATH_MAX], bsha[65] = "";
	static struct qmp qm;
	char memp[PATH_MAX], statep[PATH_MAX], metap[PATH_MAX], sha[65], now[32], l1[256];
	char *av_img[] = { "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b",
			   (char *)vin->disk, NULL, NULL };
	struct inst t;
	struct qemu_argv q;
	struct hello th = { 0 };
	struct stat ms, ss;
	int64_t t0 = mono_ms();
	int logfd, sfd = -1, mfd = -1, r = -1, st;
	pid_t pid = -1;
	json_t *meta;

	qm.fd = -1;
	pathf(t.dir, sizeof t.dir, "%s", sd);
	pathf(t.disk, sizeof t.disk, "%s/disk.qcow2", sd);
	pathf(t.console, sizeof t.console, "%s/console.log", sd);
	pathf(t.qlog, sizeof t.qlog, "%s/qemu.log", sd);
	/* Its sockets beside the VM's (a short path, unlike sd); not the
	 * VM's own, so an isopod-stop meanwhile cannot reach the template. */
	pathf(t.agent, sizeof t.agent, "%s/tpl-agent.sock", vin->dir);
	pathf(t.qmp, sizeof t.qmp, "%s/tpl-qmp.sock", vin->dir);
	pathf(memp, sizeof memp, "%s/mem", sd);
	pathf(statep, sizeof statep, "%s/state", sd);
	pathf(metap, sizeof metap, "%s/meta.json", sd);
	if (strlen(t.agent) >= sizeof ((struct sockaddr_un *)0)->sun_path ||
	    strlen(t.qmp) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
		snprintf(msg, msz, "store path %.512s is too long for the template's sockets", vin->dir);
		return -1;
	}
	av_img[9] = t.disk;
	if (qemu_img(av_img, NULL, msg, msz) < 0)
		return -1;
	/* This VM's disk is still the empty overlay qemu-img made over the
	 * base: later runs of this shape copy it instead of running qemu-img. */
	pathf(blank, sizeof blank, "%s/blank.qcow2", sd);
	if (plain) {
		int bfd;

		if (copy_small(vin->disk, blank) < 0 ||
		    (bfd = open(blank, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
			snprintf(msg, msz, "unable to copy %.512s: %s", vin->disk, strerror(errno));
			return -1;
		}
		if (fsync(bfd) < 0 || warm_sha256_fd(bfd, bsha) < 0) {
			snprintf(msg, msz, "unable to read %.512s: %s", blank, strerror(errno));
			close(bfd);
			return -1;
		}
		close(bfd);
	}
	logfd = open(t.qlog, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (logfd < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", t.qlog, strerror(errno));
		return -1;
	}
	unlink(t.agent);
	unlink(t.qmp);
	{
		struct qemu_cfg qc = vm_qemu(&t, im, accel, cf, nic());

		qc.memfile = memp;
		qc.share = 1;
		if (qemu_argv(&q, &qc) < 0) {
			snprintf(msg, msz, "template: path too long in %.512s", sd);
			close(logfd);
			return -1;
		}
	}
	pid = qemu_spawn(q.av, logfd, 1, -1);
	close(logfd);
	if (pid < 0) {
		snprintf(msg, msz, "unable to fork: %s", strerror(errno));
		return -1;
	}

	for (;;) {
		int64_t slice = mono_ms() + 100;

		if (conn_open(&conn, t.agent, slice < deadline ? slice : deadline) == 0)
			break;
		if (errno != ETIMEDOUT) {
			snprintf(msg, msz, "template: %s", conn.err);
			goto out;
		}
		if (waitpid(pid, &st, WNOHANG) == pid) {
			pid = -1;
			snprintf(msg, msz, "template qemu exited with status %d: %s", proc_status(st),
				 last_line(t.qlog, l1, sizeof l1));
			goto out;
		}
		if (owner_gone()) {
			snprintf(msg, msz, "the owner exited");
			goto out;
		}
		if (mono_ms() >= deadline) {
			snprintf(msg, msz, "template: the guest agent did not answer in time");
			goto out;
		}
	}
	/* A bare HELLO: no hostname, clock or seed (each clone gets its own). */
	if (conn_hello(&conn, &th, deadline) != 0) {
		snprintf(msg, msz, "template: %s", th.guest_error[0] ? th.guest_error : conn.err);
		conn_close(&conn);
		goto out;
	}
	conn_close(&conn);
	test_point("warm-template");
	if (strcmp(th.root, "ro")) {
		snprintf(msg, msz, "template: the agent reports its root as %s, not ro", th.root);
		goto out;
	}

	if (qmp_open(&qm, t.qmp, deadline) < 0 || agent_hung_up(&qm, deadline) < 0 ||
	    qmp_call(&qm, "stop", NULL, -1, NULL, deadline) < 0 ||
	    qmp_call(&qm, "migrate-set-capabilities",
		     json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			       "state", 1),
		     -1, NULL, deadline) < 0) {
		snprintf(msg, msz, "template: %s", qm.err);
		goto out;
	}
	sfd = open(statep, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (sfd < 0) {
		snprintf(msg, msz, "unable to create %.512s: %s", statep, strerror(errno));
		goto out;
	}
	if (qmp_call(&qm, "getfd", json_pack("{s:s}", "fdname", STATE_FD), sfd, NULL, deadline) < 0 ||
	    qmp_call(&qm, "migrate", json_pack("{s:s}", "uri", "fd:" STATE_FD), -1, NULL,
		     deadline) < 0) {
		snprintf(msg, msz, "template: %s", qm.err);
		goto out;
	}
	if (migrate_wait(&qm, deadline, msg, msz) < 0)
		goto out;
	qmp_call(&qm, "quit", NULL, -1, NULL, mono_ms() + 3000);
	qmp_close(&qm);
	if (!proc_exited_within(pid, &st, 5000)) {
		snprintf(msg, msz, "template qemu did not quit");
		goto out;
	}
	pid = -1;

	/* Durable before it is published. */
	if ((mfd = open(memp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 || fsync(mfd) < 0 ||
	    fstat(mfd, &ms) < 0 || fsync(sfd) < 0 || fstat(sfd, &ss) < 0 ||
	    lseek(sfd, 0, SEEK_SET) < 0 || warm_sha256_fd(sfd, sha) < 0) {
		snprintf(msg, msz, "unable to sync the snapshot in %.512s: %s", sd, strerror(errno));
		goto out;
	}
	if (ms.st_size != cf->mem_mib * MIB || ss.st_size == 0) {
		snprintf(msg, msz, "template: memory file of %lld bytes, state of %lld bytes",
			 (long long)ms.st_size, (long long)ss.st_size);
		goto out;
	}
	unlink(t.disk);
	unlink(t.console);
	unlink(t.qlog);
	unlink(t.agent);
	unlink(t.qmp);
	W.build_ms = mono_ms() - t0;
	/* mem: identified by inode and ctime, which every write, truncation
	 * or hole punched changes (hashing 512 MiB per resume would cost
	 * more than the resume); state: small, hashed on every resume. */
	meta = json_pack("{s:i, s:s, s:s, s:{s:s, s:{s:s, s:s}, s:O, s:I, s:I, s:I, s:s, s:s, s:s},"
			 " s:s, s:n, s:i, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I}, s:{s:I, s:s}, s:s}",
			 "format", WARM_FORMAT, "key", W.key, "key_text", W.text, "shape", "kernel",
			 im->ksha, "base", "flavor", im->flavor, "sha256", im->bsha, "layers",
			 W.layers, "disk_bytes", (json_int_t)W.disk_bytes, "vcpus",
			 (json_int_t)cf->vcpus, "mem_mib", (json_int_t)cf->mem_mib, "net", W.net,
			 "accel", accel, "qemu", W.qver, "created", iso_now(now, sizeof now),
			 "last_used", "hits", 0, "size",
			 (json_int_t)(((long long)ms.st_blocks + ss.st_blocks) * 512), "build_ms",
			 (json_int_t)W.build_ms, "builder_pid", (json_int_t)getpid(), "mem", "bytes",
			 (json_int_t)ms.st_size, "ino", (json_int_t)ms.st_ino, "ctime_s",
			 (json_int_t)ms.st_ctim.tv_sec, "ctime_ns", (json_int_t)ms.st_ctim.tv_nsec, "state",
			 "bytes", (json_int_t)ss.st_size, "sha256", sha, "argv_fingerprint",
			 W.argv_fp);
	if (!meta) {
		snprintf(msg, msz, "out of memory");
		goto out;
	}
	if (plain) {
		json_t *b = json_pack("{s:s, s:I, s:s}", "backing", im->base, "bytes",
				      (json_int_t)W.disk_bytes, "sha256", bsha);

		if (!b || json_object_set_new(meta, "blank", b) < 0) {
			snprintf(msg, msz, "out of memory");
			json_decref(meta);
			goto out;
		}
	}
	if (json_write_atomic(metap, meta) < 0) {
		snprintf(msg, msz, "unable to write %.512s: %s", metap, strerror(errno));
		json_decref(meta);
		goto out;
	}
	json_decref(meta);
	r = 0;
out:
	if (pid > 0) { /* our own unreaped child */
		kill(pid, SIGKILL);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	qmp_close(&qm);
	if (sfd >= 0)
		close(sfd);
	if (mfd >= 0)
		close(mfd);
	if (r < 0) {
		unlink(t.agent);
		unlink(t.qmp);
	}
	return r;
}

/* Take warm/<key>.lock without blocking for longer than until.  fd or -1. */
static int lock_until(int64_t until)
{
	for (;;) {
		int fd = warm_lock(W.key, LOCK_EX | LOCK_NB);

		if (fd >= 0 || errno != EWOULDBLOCK || mono_ms() >= until || owner_gone())
			return fd;
		usleep(20 * 1000);
	}
}

enum { GOT_NONE, GOT_PUBLISHED, GOT_BUILT };

/* Make sure a snapshot of this shape exists: one run builds it under the
 * key's lock, runs that find the lock held wait for it (bounded) and then
 * use what was published.  Returns GOT_BUILT (we built it), GOT_PUBLISHED
 * (it exists), or GOT_NONE (boot cold; a warning says why). */
static int warm_get(const struct inst *in, const struct img *im, const struct cfg *cf,
		    const char *accel, int plain, int64_t deadline)
{
	char sd[PATH_MAX], msg[1024];
	int64_t t0 = mono_ms(), until;
	int lk, built = 0;

	if (published())
		return GOT_PUBLISHED;
	lk = warm_lock(W.key, LOCK_EX | LOCK_NB);
	if (lk < 0 && errno != EWOULDBLOCK) {
		wwarn("warm pool not used: unable to lock %s.lock: %s", W.dir, strerror(errno));
		return GOT_NONE;
	}
	if (lk < 0) {
		/* Someone is building it: wait, then use theirs; half of
		 * what is left at most, a cold boot may follow. */
		until = t0 + cf->warm_wait_ms < t0 + (deadline - t0) / 2 ? t0 + cf->warm_wait_ms
									   : t0 + (deadline - t0) / 2;
		lk = lock_until(until);
		if (lk >= 0)
			close(lk);
		if (published())
			return GOT_PUBLISHED;
		if (lk >= 0)
			wwarn("the run that was building the warm snapshot %.12s failed; booted cold",
			      W.key);
		else
			wwarn("waited %lld ms for another run to build the warm snapshot %.12s; "
			      "booted cold", (long long)(mono_ms() - t0), W.key);
		return GOT_NONE;
	}
	if (published()) { /* it was published while we took the lock */
		close(lk);
		return GOT_PUBLISHED;
	}
	/* A directory without meta.json was never published by us (that is
	 * one rename of a complete one): whatever it is, it goes. */
	if (access(W.dir, F_OK) == 0 && warm_remove(W.key, NULL) < 0 && errno != ENOENT)
		warn("unable to remove the unpublished %s:", W.dir);
	/* Ours to build.  The staging name carries our pid: no other run
	 * ever writes or removes it, and gc knows when it is stale. */
	pathf(sd, sizeof sd, "%s/.staging-%s.%ld", warm_root(1), W.key, (long)getpid());
	tree_remove(sd, NULL);
	if (mkdir(sd, 0700) < 0) {
		wwarn("warm snapshot not built: unable to create %s: %s; booted cold", sd,
		      strerror(errno));
		close(lk);
		return GOT_NONE;
	}
	/* Half of what is left at most, so that a failed build still leaves
	 * the cold boot the other half. */
	until = mono_ms() + (deadline - mono_ms()) / 2;
	if (until > mono_ms() + BUILD_MAX_MS)
		until = mono_ms() + BUILD_MAX_MS;
	if (build_template(in, im, cf, accel, plain, sd, until, msg, sizeof msg) < 0) {
		char a[PATH_MAX], b[PATH_MAX];

		wwarn("warm snapshot %.12s not built: %s; booted cold", W.key, msg);
		/* The template's logs stay with the VM, for whoever wonders why. */
		pathf(a, sizeof a, "%s/qemu.log", sd);
		pathf(b, sizeof b, "%s/template-qemu.log", in->dir);
		rename(a, b);
		pathf(a, sizeof a, "%s/console.log", sd);
		pathf(b, sizeof b, "%s/template-console.log", in->dir);
		rename(a, b);
	} else if (test_point("warm-publish"), rename(sd, W.dir) < 0) {
		/* Publishing is this one rename: whole or absent. */
		wwarn("warm snapshot %.12s not published: rename %s: %s; booted cold", W.key, sd,
		      strerror(errno));
	} else {
		int dfd = open(warm_root(1), O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd < 0 || fsync(dfd) < 0)
			warn("unable to sync %s:", warm_root(1));
		if (dfd >= 0)
			close(dfd);
		built = 1;
	}
	if (!built && tree_remove(sd, NULL) < 0)
		warn("unable to remove %s:", sd);
	close(lk);
	return built ? GOT_BUILT : GOT_NONE;
}

/* Take the published snapshot out of use (the next run rebuilds it), but
 * only the very one we resumed from or checked: under the key's lock, a
 * newer build in its place is left alone. */
static void warm_retire(void)
{
	struct stat st;
	int lk = lock_until(mono_ms() + RETIRE_WAIT_MS);

	if (lk < 0) {
		wwarn("unable to retire the warm snapshot %.12s: its lock is busy", W.key);
		return;
	}
	if (stat(W.dir, &st) == 0 && st.st_ino == W.ino && st.st_dev == W.dev &&
	    warm_remove(W.key, NULL) < 0 && errno != ENOENT)
		wwarn("unable to remove the warm snapshot %s: %s", W.dir, strerror(errno));
	close(lk);
}

struct snap {
	int memfd, statefd;
};

/* Open warm/<key> for a resume and check it: its meta, the memory file
 * (size, inode, ctime, by fd: exactly what QEMU will map) and the state
 * file (size and sha256, by fd: exactly what QEMU will read).  0, or -1
 * with why (the caller retires it). */
static int snap_open(struct snap *sn, const struct cfg *cf, char *why, size_t wsz)
{
	struct stat ds, ms, ss;
	json_t *meta = NULL, *mm, *sm;
	char sha[65];
	const char *want;
	int dfd, fd, r = -1;
	FILE *f;

	sn->memfd = sn->statefd = -1;
	W.ino = 0;
	dfd = open(W.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dfd < 0 || fstat(dfd, &ds) < 0) {
		snprintf(why, wsz, "unable to open %.512s: %s", W.dir, strerror(errno));
		goto out;
	}
	W.dev = ds.st_dev;
	W.ino = ds.st_ino;
	if ((fd = openat(dfd, "meta.json", O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
	    !(f = fdopen(fd, "r"))) {
		snprintf(why, wsz, "unable to read its meta.json: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		goto out;
	}
	meta = json_loadf(f, 0, NULL);
	fclose(f);
	mm = json_object_get(meta, "mem");
	sm = json_object_get(meta, "state");
	want = json_string_value(json_object_get(sm, "sha256"));
	if (!json_is_object(meta) || json_integer_value(json_object_get(meta, "format")) != WARM_FORMAT ||
	    !json_is_string(json_object_get(meta, "key")) ||
	    strcmp(json_string_value(json_object_get(meta, "key")), W.key) || !want) {
		snprintf(why, wsz, "its meta.json is unreadable or of another format");
		goto out;
	}
	/* The key is a hash; the text it hashes must be ours too. */
	if (!json_is_string(json_object_get(meta, "key_text")) ||
	    strcmp(json_string_value(json_object_get(meta, "key_text")), W.text)) {
		snprintf(why, wsz, "its key text is not this VM's");
		goto out;
	}
	if (!json_is_string(json_object_get(meta, "argv_fingerprint")) ||
	    strcmp(json_string_value(json_object_get(meta, "argv_fingerprint")), W.argv_fp)) {
		snprintf(why, wsz, "it was built by an isopod-boot that gave QEMU another command line");
		goto out;
	}
	sn->memfd = openat(dfd, "mem", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (sn->memfd < 0 || fstat(sn->memfd, &ms) < 0) {
		snprintf(why, wsz, "unable to open its memory file: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(ms.st_mode) || ms.st_size != cf->mem_mib * MIB ||
	    ms.st_size != json_integer_value(json_object_get(mm, "bytes"))) {
		snprintf(why, wsz, "its memory file is %lld bytes, not %lld", (long long)ms.st_size,
			 cf->mem_mib * MIB);
		goto out;
	}
	if ((json_int_t)ms.st_ino != json_integer_value(json_object_get(mm, "ino")) ||
	    (json_int_t)ms.st_ctim.tv_sec != json_integer_value(json_object_get(mm, "ctime_s")) ||
	    (json_int_t)ms.st_ctim.tv_nsec != json_integer_value(json_object_get(mm, "ctime_ns"))) {
		snprintf(why, wsz, "its memory file was modified or replaced after the build");
		goto out;
	}
	sn->statefd = openat(dfd, "state", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (sn->statefd < 0 || fstat(sn->statefd, &ss) < 0) {
		snprintf(why, wsz, "unable to open its state file: %s", strerror(errno));
		goto out;
	}
	if (!S_ISREG(ss.st_mode) || ss.st_size != json_integer_value(json_object_get(sm, "bytes"))) {
		snprintf(why, wsz, "its state file is %lld bytes, not %lld (truncated?)",
			 (long long)ss.st_size, (long long)json_integer_value(json_object_get(sm, "bytes")));
		goto out;
	}
	if (warm_sha256_fd(sn->statefd, sha) < 0 || lseek(sn->statefd, 0, SEEK_SET) < 0) {
		snprintf(why, wsz, "unable to read its state file: %s", strerror(errno));
		goto out;
	}
	if (strcmp(sha, want)) {
		snprintf(why, wsz, "its state file does not match its sha256 (corrupted)");
		goto out;
	}
	r = 0;
out:
	json_decref(meta);
	if (dfd >= 0)
		close(dfd);
	if (r < 0) {
		if (sn->memfd >= 0)
			close(sn->memfd);
		if (sn->statefd >= 0)
			close(sn->statefd);
		sn->memfd = sn->statefd = -1;
	}
	return r;
}

/* Resume this VM from the checked snapshot sn: the cold command line with
 * RAM as a private mapping of the snapshot's memory file (QEMU's fd 3,
 * from the supervisor) and `-incoming defer`; then over QMP
 * x-ignore-shared, the state file passed by getfd, migrate-incoming,
 * wait for "paused", cont; then the usual HELLO (hostname, clock, a fresh
 * RNG seed) to the agent.  0 with h filled and the supervisor waiting for
 * 'r', or an exit code with msg and nothing left running. */
static int resume(const char *id, const struct inst *in, const struct img *im,
		  const struct cfg *cf, const char *accel, struct snap *sn, struct hello *h,
		  int ownerfd, int64_t deadline, char *msg, size_t msz)
{
	static struct qmp qm;
	char l1[256], qerr[600];
	struct qemu_argv q;
	json_t *ret;
	int r;

	qm.fd = -1;
	{
		/* share=off: a private copy-on-write mapping of the checked
		 * memory file, which the supervisor hands QEMU as its fd 3. */
		struct qemu_cfg qc = vm_qemu(in, im, accel, cf, nic());

		qc.memfile = "/proc/self/fd/3";
		qc.incoming = 1;
		if (qemu_argv(&q, &qc) < 0) {
			snprintf(msg, msz, "path too long in %.512s", in->dir);
			close(sn->memfd);
			sn->memfd = -1;
			r = EX_SYS;
			goto bad;
		}
	}
	unlink(in->agent);
	unlink(in->qmp);
	unlink(in->console);
	r = launch(id, in, q.av, ownerfd, sn->memfd, msg, msz);
	close(sn->memfd);
	sn->memfd = -1;
	if (r < 0)
		goto bad;
	for (;;) {
		int64_t slice = mono_ms() + 100;

		r = qmp_open(&qm, in->qmp, slice < deadline ? slice : deadline);
		if (r == 0 || r != -3 || sup_gone() || mono_ms() >= deadline)
			break;
	}
	if (r < 0)
		goto qbad;
	if (qmp_call(&qm, "migrate-set-capabilities",
		     json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			       "state", 1),
		     -1, NULL, deadline) < 0 ||
	    qmp_call(&qm, "getfd", json_pack("{s:s}", "fdname", STATE_FD), sn->statefd, NULL,
		     deadline) < 0 ||
	    qmp_call(&qm, "migrate-incoming", json_pack("{s:s}", "uri", "fd:" STATE_FD), -1, NULL,
		     deadline) < 0)
		goto qbad;
	for (;;) {
		const char *s;

		if (qmp_call(&qm, "query-status", NULL, -1, &ret, deadline) < 0)
			goto qbad;
		s = json_string_value(json_object_get(ret, "status"));
		if (s && !strcmp(s, "paused")) {
			json_decref(ret);
			break;
		}
		if (!s || strcmp(s, "inmigrate")) {
			snprintf(qm.err, sizeof qm.err, "unexpected status %s after the state was loaded",
				 s ? s : "(none)");
			json_decref(ret);
			goto qbad;
		}
		json_decref(ret);
		usleep(2000);
	}
	if (qmp_call(&qm, "cont", NULL, -1, NULL, deadline) < 0)
		goto qbad;
	qmp_close(&qm);
	close(sn->statefd);
	sn->statefd = -1;
	if ((r = handshake(in, h, deadline, RESUME_MAX_MS, msg, msz)) != 0)
		goto bad2;
	if (strcmp(h->root, "ro")) {
		snprintf(msg, msz, "the resumed agent reports its root as %s, not ro", h->root);
		r = EX_SYS;
		goto bad2;
	}
	return 0;
qbad:
	snprintf(qerr, sizeof qerr, "%s", qm.err);
	qmp_close(&qm);
	abandon(); /* QEMU is gone after this: its log is complete */
	last_line(in->qlog, l1, sizeof l1);
	snprintf(msg, msz, "%s%s%s", qerr, l1[0] ? "; qemu: " : "", l1);
	r = strstr(qerr, "timed out") ? EX_TIMEOUT : EX_SYS;
	goto bad;
bad2:
	abandon();
bad:
	if (sn->statefd >= 0)
		close(sn->statefd);
	sn->statefd = -1;
	return r ? r : EX_SYS;
}

/* Did the supervisor end the VM on purpose (owner gone, signal)? */
static int killed_by_owner(const char *meta, char *why, size_t wsz)
{
	json_t *r = json_load_path(meta);
	const char *b = json_string_value(json_object_get(r, "stopped_by"));
	int yes = b && (!strcmp(b, "owner") || !strcmp(b, "signal"));

	if (yes)
		snprintf(why, wsz, "stopped_by %s", b);
	json_decref(r);
	return yes;
}

/* A failed resume left its QEMU's log and a record saying failed: keep the
 * log beside the next one, put the record back to booting. */
static void resume_undo(const char *id, const struct inst *in)
{
	char p[PATH_MAX];
	json_t *m;

	pathf(p, sizeof p, "%s/qemu-resume.log", in->dir);
	rename(in->qlog, p);
	m = json_pack("{s:s, s:n, s:n, s:n, s:n, s:n, s:n}", "state", "booting", "error",
		      "stopped_at", "qemu_exit", "stopped_by", "supervisor_pid", "qemu_pid");
	if (!m || vm_meta_update(id, NULL, m) < 0)
		warn("unable to update the record of %s:", id);
	json_decref(m);
}

/* Usage figures in meta.json, under a flock on the snapshot directory. */
static void warm_touch(int hit)
{
	char p[PATH_MAX], now[32];
	json_t *m;
	int dfd = open(W.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);

	if (dfd < 0)
		return; /* retired meanwhile */
	while (flock(dfd, LOCK_EX) < 0 && errno == EINTR)
		;
	pathf(p, sizeof p, "%s/meta.json", W.dir);
	if ((m = json_load_path(p))) {
		json_object_set_new(m, "last_used", json_string(iso_now(now, sizeof now)));
		json_object_set_new(m, "hits",
				    json_integer(json_integer_value(json_object_get(m, "hits")) + hit));
		if (json_write_atomic(p, m) < 0)
			warn("unable to update %s:", p);
		json_decref(m);
	}
	close(dfd);
}

/* Make this VM's disk a copy of the published snapshot's empty overlay,
 * when it is one over this very base path and of this size, and its bytes
 * are the ones the build recorded.  0, or -1 (then qemu-img makes one). */
static int blank_copy(const struct img *im, const char *disk, long long bytes)
{
	char p[PATH_MAX], sha[65];
	json_t *m, *b;
	int fd, r = -1;

	pathf(p, sizeof p, "%s/meta.json", W.dir);
	if (!(m = json_load_path(p)))
		return -1;
	b = json_object_get(m, "blank");
	if (!json_is_string(json_object_get(b, "backing")) ||
	    strcmp(json_string_value(json_object_get(b, "backing")), im->base) ||
	    json_integer_value(json_object_get(b, "bytes")) != bytes ||
	    !json_is_string(json_object_get(b, "sha256")))
		goto out;
	pathf(p, sizeof p, "%s/blank.qcow2", W.dir);
	if (copy_small(p, disk) < 0)
		goto out;
	if ((fd = open(disk, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		goto out;
	if (warm_sha256_fd(fd, sha) == 0 &&
	    !strcmp(sha, json_string_value(json_object_get(b, "sha256"))) &&
	    qcow2_size(disk) == bytes)
		r = 0;
	close(fd);
out:
	if (r < 0)
		unlink(disk);
	json_decref(m);
	return r;
}

/* The pool's settings from the environment, checked before anything
 * changes.  Is the pool wanted? */
static int pool_wanted(struct cfg *cf)
{
	const char *e = getenv("ISOPOD_WARM"), *w = getenv("ISOPOD_WARM_WAIT_MS");

	if (e && *e && strcmp(e, "0") && strcmp(e, "1"))
		die(EX_USAGE, "ISOPOD_WARM=%s: want 0 (no warm pool) or 1", e);
	cf->warm_wait_ms = 60000;
	if (w && *w && parse_ll(w, 0, 3600000, &cf->warm_wait_ms) < 0)
		die(EX_USAGE, "ISOPOD_WARM_WAIT_MS=%s: want milliseconds 0..3600000", w);
	return !cf->cold && !(e && !strcmp(e, "0"));
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "vcpus", required_argument, NULL, 'c' },
		{ "mem-mib", required_argument, NULL, 'm' },
		{ "disk-mib", required_argument, NULL, 'd' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "owner-pid", required_argument, NULL, 'o' },
		{ "keep", no_argument, NULL, 'k' },
		{ "accel", required_argument, NULL, 'a' },
		{ "cold", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *a_vcpus = NULL, *a_mem = NULL, *a_disk = NULL, *a_to = NULL, *a_owner = NULL;
	struct cfg cf = { 1, 512, 0, 60000, 0, 0, 0, 0, 60000, NULL, NULL };
	char why[256], reason[512], meta[PATH_MAX], lockp[PATH_MAX], err[PATH_MAX + 128];
	char msg[2048], pristine[PATH_MAX];
	const char *id, *name, *state, *accel, *env, *net_mode;
	struct img im;
	struct inst in;
	struct qemu_argv q;
	struct hello h = { 0 };
	json_t *claim, *rec, *m, *out;
	long ncpu;
	long long avail, memmax, disk_bytes, cur_bytes;
	int forked, resumed = 0;
	int64_t t0 = mono_ms(), deadline;
	int c, ownerfd = -1, r;
	struct sockaddr_un sa;

	progname = "isopod-boot";
	signal(SIGPIPE, SIG_IGN); /* a dead supervisor or reader is an error, not a kill */
	if (!(W.warnings = json_array()))
		die(EX_SYS, "unable to allocate memory:");
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'c': a_vcpus = optarg; break;
		case 'm': a_mem = optarg; break;
		case 'd': a_disk = optarg; break;
		case 't': a_to = optarg; break;
		case 'o': a_owner = optarg; break;
		case 'k': cf.keep = 1; break;
		case 'C': cf.cold = 1; break;
		case 'a':
			if (strcmp(optarg, "kvm") && strcmp(optarg, "tcg"))
				die(EX_USAGE, "--accel %s: want kvm or tcg", optarg);
			cf.accel = optarg;
			cf.accel_src = "--accel";
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (optind != argc)
		die(EX_USAGE, "usage: %s", USAGE);
	if (!cf.accel && (env = getenv("ISOPOD_ACCEL")) && *env) {
		if (strcmp(env, "kvm") && strcmp(env, "tcg"))
			die(EX_USAGE, "ISOPOD_ACCEL=%s: want kvm or tcg", env);
		cf.accel = env;
		cf.accel_src = "ISOPOD_ACCEL";
	}
	W.on = pool_wanted(&cf);

	/* Ranges first, naming the host's headroom, before anything changes. */
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 1)
		ncpu = 1;
	if (a_vcpus) {
		snprintf(why, sizeof why, "the host has %ld CPUs", ncpu);
		range("--vcpus", a_vcpus, 1, ncpu, why, &cf.vcpus);
	}
	avail = mem_available_mib();
	memmax = avail * 3 / 4 < 16384 ? avail * 3 / 4 : 16384;
	snprintf(why, sizeof why, "host headroom: 75%% of %lld MiB available = %lld MiB", avail,
		 avail * 3 / 4);
	if (a_mem)
		range("--mem-mib", a_mem, 64, memmax, why, &cf.mem_mib);
	else if (cf.mem_mib > memmax)
		die(EX_USAGE, "default memory %lld MiB exceeds the host headroom (%s); pass --mem-mib",
		    cf.mem_mib, why);
	if (a_to)
		range("--timeout-ms", a_to, 1, 86400000, "milliseconds", &cf.timeout_ms);
	if (a_owner) {
		range("--owner-pid", a_owner, 1, INT_MAX, "a process id", &cf.owner);
	} else {
		cf.owner = getppid();
	}
	if (!cf.keep) {
		ownerfd = W_ownerfd = pidfd_open_((pid_t)cf.owner);
		if (ownerfd < 0) {
			if (errno == ESRCH)
				die(EX_USAGE, "owner pid %lld: no such process", cf.owner);
			die(EX_SYS, "unable to watch owner pid %lld:", cf.owner);
		}
	}

	claim = json_read_stdin();
	id = json_string_value(json_object_get(json_object_get(claim, "vm"), "id"));
	if (!valid_id(id))
		die(EX_USAGE, "standard input: want the JSON of isopod-claim with vm.id = vm-<12 hex>");
	pathf(meta, sizeof meta, "%s/vms/%s", store_home(), id);
	if (inst_paths(&in, meta) < 0)
		die(EX_USAGE, "path too long: %.64s...", meta);
	pathf(meta, sizeof meta, "%s/meta.json", in.dir);
	if (!(rec = json_load_path(meta))) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "no such vm: %s", id);
		die(EX_SYS, "unable to read %s:", meta);
	}
	if ((r = resolve_kernel(&im, err, sizeof err)))
		die(r, "%s", err);
	/* isopod-fork leaves the disk (over a stage chain) and the base it
	 * rests on in the record; boot then boots that disk as it is. */
	forked = access(in.disk, F_OK) == 0;
	if (forked) {
		json_t *b = json_object_get(rec, "base");
		const char *fl = json_string_value(json_object_get(b, "flavor"));
		const char *sh = json_string_value(json_object_get(b, "sha256"));

		if (!fl || !sh)
			die(EX_SYS, "vm %s has a disk but its record names no base", id);
		if ((r = resolve_base(&im, fl, sh, err, sizeof err)))
			die(r, "%s", err);
		if ((cur_bytes = qcow2_size(in.disk)) < 0)
			die(EX_SYS, "unable to read the qcow2 header of %s:", in.disk);
	} else {
		if ((r = resolve_base(&im, "base", NULL, err, sizeof err)))
			die(r, "%s", err);
		cur_bytes = im.base_size;
	}
	{
		long long minmib = (cur_bytes + MIB - 1) / MIB;

		if (a_disk) {
			snprintf(why, sizeof why, "the %s is %lld MiB",
				 forked ? "forked disk" : "base image", minmib);
			range("--disk-mib", a_disk, minmib, 1048576, why, &cf.disk_mib);
			cf.disk_given = 1;
		} else {
			cf.disk_mib = minmib;
		}
	}
	disk_bytes = cf.disk_given ? cf.disk_mib * MIB : cur_bytes;

	/* QEMU splits option values at ',' and unix sockets have a short path
	 * limit: refuse a store that cannot work rather than fail obscurely. */
	if (strchr(in.dir, ','))
		die(EX_USAGE, "store path %s contains ','; QEMU options cannot carry it", in.dir);
	if (strlen(in.agent) >= sizeof sa.sun_path || strlen(in.qmp) >= sizeof sa.sun_path)
		die(EX_USAGE, "store path %s is too long for a unix socket (max %zu bytes)", in.dir,
		    sizeof sa.sun_path - 1);
	/* The vm lock, taken here and handed down to the supervisor by fork:
	 * from now until QEMU is gone, gc sees the VM as running. */
	pathf(lockp, sizeof lockp, "%s/lock", in.dir);
	B.lockfd = lock_open(lockp, LOCK_EX | LOCK_NB);
	if (B.lockfd < 0) {
		if (errno == EWOULDBLOCK)
			die(EX_CONFLICT, "vm %s is already running", id);
		die(EX_SYS, "unable to lock %s:", lockp);
	}
	/* Decide on the record as it is under the lock, not as first read. */
	json_decref(rec);
	if (!(rec = json_load_path(meta)))
		die(EX_SYS, "unable to read %s:", meta);
	state = json_string_value(json_object_get(rec, "state"));
	if (!state || strcmp(state, "claimed"))
		die(EX_CONFLICT, "vm %s is %s, not claimed; claim a new one", id,
		    state ? state : "unknown");
	name = json_string_value(json_object_get(rec, "name"));
	if (!name)
		name = id;
	B.id = id;

	/* The network slot, before anything boots: no taps (netsetup not run
	 * since the host booted) or no free slot fail here, fast. */
	net_mode = json_string_value(json_object_get(json_object_get(rec, "net"), "mode"));
	if (!net_mode)
		net_mode = "none";
	if (!net_mode_valid(net_mode))
		die(EX_USAGE, "vm %s: net mode %s is not supported", id, net_mode);
	if (strcmp(net_mode, "none")) {
		char bp[PATH_MAX], ledger[PATH_MAX];
		json_t *allow = json_object_get(json_object_get(rec, "net"), "allow");
		struct egress *eg = malloc(sizeof *eg);

		net_take_slot(&NET, net_mode);
		pathf(ledger, sizeof ledger, "%s/ledger.jsonl", in.dir);
		/* Both modes get a broker: filtered for everything, open for
		 * DNS (netsetup redirects every guest port 53 to it).  The
		 * supervisor plans it again from SUPNET; this plan checks it
		 * before anything boots. */
		if (!eg)
			die(EX_SYS, "unable to allocate memory:");
		if (egress_plan(eg, egress_broker_path(bp, sizeof bp), net_mode, NET.gw, allow, ledger,
				id, err, sizeof err) < 0)
			die(EX_USAGE, "vm %s: %s", id, err);
		free(eg);
		SUPNET = json_pack("{s:s, s:s, s:O?}", "mode", net_mode, "gateway", NET.gw, "allow",
				   json_is_array(allow) ? allow : NULL);
		if (!SUPNET)
			die(EX_SYS, "unable to allocate memory:");
	}

	if ((r = accel_choose(cf.accel, cf.accel_src, &im, &accel, reason, sizeof reason, err,
			      sizeof err)))
		die(r, "%s", err);
	m = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s?, s:{s:s}, s:{s:s, s:s}, s:s, s:s, s:I, s:b}",
		      "state", "booting", "vcpus", (json_int_t)cf.vcpus, "mem_mib",
		      (json_int_t)cf.mem_mib, "disk_mib", (json_int_t)cf.disk_mib, "accel", accel,
		      "accel_reason", !strcmp(accel, "tcg") ? reason : NULL, "kernel", "sha256",
		      im.ksha, "base", "flavor", im.flavor, "sha256", im.bsha, "agent_sock", in.agent,
		      "qmp_sock", in.qmp, "owner_pid", (json_int_t)cf.owner, "keep", cf.keep);
	if (m)
		json_object_set_new(m, "net", net_json(&NET, net_mode));
	if (!m || vm_meta_update(id, NULL, m) < 0)
		die(EX_SYS, "unable to update %s:", meta);
	json_decref(m);

	/* The warm pool: resume a snapshot of this shape, building it first
	 * when there is none.  Whatever goes wrong there ends in a cold boot
	 * with a warning, never in a failed run. */
	if (W.on && warm_setup(&im, rec, &cf, accel, disk_bytes, forked ? in.disk : NULL,
			       net_mode) < 0)
		W.on = 0;
	/* A published snapshot of a plain chain carries the empty overlay
	 * qemu-img made for its build: a copy of it spares a qemu-img run. */
	if (!forked && !(W.on && blank_copy(&im, in.disk, disk_bytes) == 0) &&
	    qemu_img_overlay(im.base, in.disk, disk_bytes, err, sizeof err) < 0)
		fail(EX_SYS, "%s", err);
	if (forked && disk_bytes > cur_bytes && qemu_img_grow(in.disk, disk_bytes, err, sizeof err) < 0)
		fail(EX_SYS, "%s", err);
	deadline = t0 + cf.timeout_ms;
	h.hostname = name;
	h.set_time = 1;
	h.seed = 1;
	h.grow = disk_bytes > cur_bytes;
	if (NET.slot >= 0) {
		h.net_addr = NET.addr;
		h.net_gw = NET.gw;
		h.net_mtu = NET.mtu;
		h.net_mac = NET.mac;
		/* The resolver is the broker, on the gateway (port 53 is
		 * redirected to its 1053 by isopod-netsetup's table). */
		h.net_dns = NET.gw;
		if ((env = getenv("ISOPOD_NET_DNS")) && *env)
			h.net_dns = env;
	}

	if (W.on) {
		int got = warm_get(&in, &im, &cf, accel, !forked, deadline);
		struct snap sn;

		/* A VM never outlives its owner: do not start one for nobody. */
		if (owner_gone())
			fail(EX_SYS, "the owner (pid %lld) exited while the warm snapshot was "
			     "prepared", cf.owner);

		if (got != GOT_NONE && snap_open(&sn, &cf, msg, sizeof msg) < 0) {
			wwarn("warm snapshot %.12s refused: %s; retired, booted cold", W.key, msg);
			warm_retire();
		} else if (got != GOT_NONE) {
			int64_t t1 = mono_ms();
			int64_t bound = t1 + RESUME_MAX_MS < deadline ? t1 + RESUME_MAX_MS : deadline;

			/* A resume that goes wrong may have let a broken guest
			 * near the disk: the cold boot gets a pristine one (a
			 * new overlay, or a copy of the fork's, kept now). */
			pathf(pristine, sizeof pristine, "%s.pristine", in.disk);
			if (forked && copy_small(in.disk, pristine) < 0)
				fail(EX_SYS, "unable to copy %s to %s: %s", in.disk, pristine,
				     strerror(errno));
			r = resume(id, &in, &im, &cf, accel, &sn, &h, ownerfd, bound, msg, sizeof msg);
			if (r == 0) {
				resumed = 1;
				W.resume_ms = mono_ms() - t1;
				W.path = got == GOT_BUILT ? "snapshot-build" : "warm";
				unlink(pristine);
			} else if (r == EX_TIMEOUT && bound == deadline) {
				/* The run's own budget ran out, not the snapshot. */
				unlink(pristine);
				fail(EX_TIMEOUT, "resuming the warm snapshot: %s (--timeout-ms %lld)",
				     msg, cf.timeout_ms);
			} else if (killed_by_owner(meta, why, sizeof why)) {
				/* The supervisor ended it (its owner exited, or a
				 * signal): not the snapshot's fault, and no run
				 * wants this VM any more. */
				unlink(pristine);
				fail(EX_SYS, "the VM was stopped while it resumed (%s): %s", why, msg);
			} else {
				wwarn("warm snapshot %.12s failed to resume: %s; retired, booted cold",
				      W.key, msg);
				warm_retire();
				resume_undo(id, &in);
				if (forked && rename(pristine, in.disk) < 0)
					fail(EX_SYS, "unable to restore %s: %s", in.disk,
					     strerror(errno));
				if (!forked && qemu_img_overlay(im.base, in.disk, disk_bytes, err,
							    sizeof err) < 0)
					fail(EX_SYS, "%s", err);
			}
		}
	}

	if (!resumed) {
		if (mono_ms() >= deadline)
			fail(EX_TIMEOUT, "the guest agent did not answer within %lld ms",
			     cf.timeout_ms);
		unlink(in.agent);
		unlink(in.qmp);
		unlink(in.console);
		{
			const struct qemu_cfg qc = vm_qemu(&in, &im, accel, &cf, nic());

			if (qemu_argv(&q, &qc) < 0)
				fail(EX_USAGE, "path too long: %.64s...", in.dir);
		}
		if (launch(id, &in, q.av, ownerfd, -1, msg, sizeof msg) < 0)
			fail(EX_SYS, "%s", msg);
		/* Wait for the agent: bounded by --timeout-ms, counted from our
		 * start. */
		if ((r = handshake(&in, &h, deadline, cf.timeout_ms, msg, sizeof msg)) != 0)
			fail(r, "%s", msg);
	}
	if (write(B.ctlfd, "r", 1) != 1) /* the supervisor is gone: QEMU is too */
		fail(EX_SYS, "the supervisor exited before the boot was confirmed");
	close(B.ctlfd);
	B.ctlfd = -1;
	if (ownerfd >= 0)
		close(ownerfd);
	if (resumed)
		warm_touch(!strcmp(W.path, "warm"));

	{
		int64_t boot_ms = mono_ms() - t0;
		static const char *const live[] = { "booting", NULL };

		m = json_pack("{s:s, s:I, s:s, s:s?}", "state", "running", "boot_ms",
			      (json_int_t)boot_ms, "path", W.path, "warm_key", W.on ? W.key : NULL);
		if (m && W.resume_ms >= 0)
			json_object_set_new(m, "resume_ms", json_integer(W.resume_ms));
		if (!m || vm_meta_update(id, live, m) < 0)
			warn("unable to update %s:", meta);
		json_decref(m);
		out = json_pack("{s:{s:s, s:s, s:s}, s:s, s:s, s:s, s:s, s:I, s:{s:s},"
				" s:{s:s, s:s}, s:s}",
				"vm", "id", id, "name", name, "dir", in.dir, "agent_sock", in.agent,
				"qmp_sock", in.qmp, "path", W.path, "accel", accel, "boot_ms",
				(json_int_t)boot_ms, "kernel", "sha256", im.ksha, "base", "flavor",
				im.flavor, "sha256", im.bsha, "root", h.root[0] ? h.root : "ro");
		if (!out)
			die(EX_SYS, "unable to build the output");
		if (!strcmp(accel, "tcg"))
			json_object_set_new(out, "accel_reason", json_string(reason));
		if (W.resume_ms >= 0)
			json_object_set_new(out, "resume_ms", json_integer(W.resume_ms));
		if (W.build_ms >= 0 && resumed && !strcmp(W.path, "snapshot-build"))
			json_object_set_new(out, "build_ms", json_integer(W.build_ms));
		if (W.on)
			json_object_set_new(out, "warm_key", json_string(W.key));
		json_object_set_new(out, "net", net_json(&NET, net_mode));
		json_object_set(out, "warnings", W.warnings);
		json_emit(out);
	}
	return 0;
}
