/* accel.c - kvm or tcg: the probe and its cached verdict (see accel.h). */
#include "accel.h"
#include "accelhost.h"
#include "host.h"
#include "proc.h"
#include "ovtpl.h"
#include "qemu.h"
#include "qjail.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROBE_MS 10000

/* The probe's QEMU (av, qemu_argv's, over dir): in QEMU's jail as boot's
 * are (lib/qjail.c: qjail_plan binds /dev/kvm for accel=kvm, qjail_give
 * hands dir, accel/probe-<16 hex>, over), unless jail_wanted says no (then as ourselves, with
 * the warning "the kvm probe's QEMU runs unjailed (WHY)").  *jailed says
 * which, for probe_reap.  Its console is confd (QEMU_CONSOLE_FD).  The
 * pid, or -1 with err (dir root's again). */
static pid_t probe_spawn(struct qjail *qj, struct jail *j, int *jailed, char *const *av,
			 const char *dir, int logfd, int confd, char *err, size_t esz)
{
	char why[PATH_MAX + 64];
	struct proc_spec ps;
	int w = jail_wanted(why, sizeof why);

	*jailed = 0;
	if (w < 0) {
		snprintf(err, esz, "%s", why);
		return -1;
	}
	if (!w) {
		warn("the kvm probe's QEMU runs unjailed (%s)", why);
		return qemu_spawn(av, logfd, 1, -1, confd);
	}
	/* named as its directory, probe-<16 hex of the kernel's sha>: a
	 * cgroup and an identity per kernel, as probes of two kernels may
	 * run at once (one lock per kernel) */
	if (qjail_plan(qj, strrchr(dir, '/') + 1, dir, av, err, esz) < 0 ||
	    qjail_give(qj, dir, err, esz) < 0) {
		qjail_reclaim(qj);
		qjail_free(qj);
		return -1;
	}
	ps = (struct proc_spec)PROC_SPEC(qj->av);
	ps.file = qj->prog;
	ps.out = ps.err = logfd;
	ps.keep[0] = ps.keep[1] = PROC_NULL; /* no memory file, no NIC */
	ps.keep[2] = confd;
	ps.nkeep = 3;
	ps.pdeathsig = SIGKILL;
	ps.umask = 0177; /* as qemu_spawn: its sockets 0600 from the start */
	if (jail_spawn(&qj->js, &ps, j, err, esz) < 0) {
		qjail_reclaim(qj);
		qjail_free(qj);
		return -1;
	}
	*jailed = 1;
	return j->pid;
}

/* The probe's QEMU was reaped: its jail released, dir root's again. */
static void probe_reap(struct qjail *qj, struct jail *j, int jailed)
{
	char why[512];

	if (!jailed)
		return;
	if (jail_release(j, why, sizeof why) < 0)
		warn("the kvm probe's jail: %s", why);
	qjail_reclaim(qj);
	qjail_free(qj);
}

/* Boot the real kernel with KVM on a throwaway overlay and see whether the
 * agent answers within PROBE_MS.  On PVM hosts /dev/kvm opens fine and an
 * unmodified guest dies late with "KVM internal error": only a real boot
 * tells.  Returns 1 (kvm works) or 0, reason filled. */
int accel_probe(const struct img *im, char *reason, size_t rsz, char *err_out, size_t esz)
{
	char dir[PATH_MAX], err[PATH_MAX + 128], line[256], keep[PATH_MAX];
	struct inst in;
	struct qemu_argv q;
	struct qjail qj;
	struct jail j;
	struct hello h = { 0 };
	struct conn *conn = malloc(sizeof *conn); /* 130 KiB of buffers */
	const char *files[] = { in.disk, in.agent, in.qmp, in.console, in.qlog };
	int64_t t0 = mono_ms(), deadline = t0 + PROBE_MS;
	int logfd, confd, ok = 0, st, r = -1, jailed = 0;
	size_t i;
	pid_t pid;

	if (!conn) {
		snprintf(err_out, esz, "unable to allocate memory: %s", strerror(errno));
		return -1;
	}
	/* 16 hex digits of the kernel's sha, not 64: the probe's unix sockets
	 * live here, and with the whole sha a store under /tmp/<20 chars>
	 * already passed the 108-byte limit, so the probe failed on the path
	 * ("Path must be less than 108 bytes") and that became the verdict. */
	snprintf(dir, sizeof dir, "%s/accel/probe-%.16s", store_home(), im->ksha);
	if (inst_paths(&in, dir) < 0) {
		snprintf(err_out, esz, "path too long: %.64s...", dir);
		free(conn);
		return -1;
	}
	for (i = 0; i < sizeof files / sizeof files[0]; i++)
		unlink(files[i]);
	if (mkdir_p(dir, 0700, keep, sizeof keep) < 0) {
		snprintf(err_out, esz, "unable to create %.512s: %s", keep, strerror(errno));
		free(conn);
		return -1;
	}
	if (overlay_new(im->base, in.disk, im->base_size, err, sizeof err) < 0) {
		snprintf(err_out, esz, "kvm probe: %s", err);
		free(conn);
		return -1;
	}
	logfd = open(in.qlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	/* the probe's console is thrown away with its directory: /dev/null,
	 * as bounded as it gets */
	confd = logfd < 0 ? -1 : open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (logfd < 0 || confd < 0) {
		snprintf(err_out, esz, "unable to create %.512s: %s",
			 logfd < 0 ? in.qlog : "/dev/null", strerror(errno));
		if (logfd >= 0)
			close(logfd);
		free(conn);
		return -1;
	}
	{
		const struct qemu_cfg qc = {
			.accel = "kvm",
			.mem_mib = 256,
			.vcpus = 1,
			.vmlinux = im->vmlinux,
			.initrd = im->initrd,
			.disk = in.disk,
			.agent_sock = in.agent,
			.qmp_sock = in.qmp,
		};

		err[0] = 0;
		pid = qemu_argv(&q, &qc) < 0 ? (errno = ENAMETOOLONG, -1)
					      : probe_spawn(&qj, &j, &jailed, q.av, dir, logfd, confd,
							    err, sizeof err);
	}
	close(logfd);
	close(confd);
	if (pid < 0) {
		snprintf(err_out, esz, "unable to start the kvm probe: %s",
			 err[0] ? err : strerror(errno));
		free(conn);
		return -1;
	}
	for (;;) {
		if (waitpid(pid, &st, WNOHANG) == pid) {
			snprintf(reason, rsz, "kvm: qemu exited with status %d: %s", proc_status(st),
				 last_line(in.qlog, line, sizeof line));
			pid = -1;
			goto done;
		}
		if (mono_ms() >= deadline)
			break;
		if (conn_open(conn, in.agent, mono_ms() + 200) == 0) {
			r = conn_hello(conn, &h, deadline);
			conn_close(conn);
			break;
		}
	}
	/* Any HELLO_ACK, even one carrying a guest error (a bad root disk, a
	 * protocol mismatch), proves the kernel ran to the agent under KVM. */
	if (r == 0 || h.root[0] || h.guest_error[0] || h.uptime_ms) {
		ok = 1;
		snprintf(reason, rsz, "kvm: the agent answered in %lld ms",
			 (long long)(mono_ms() - t0));
	} else if (proc_exited_within(pid, &st, r == -3 ? 0 : 1000)) {
		/* The socket closes while QEMU exits: give it a moment. */
		snprintf(reason, rsz, "kvm: qemu exited with status %d: %s", proc_status(st),
			 last_line(in.qlog, line, sizeof line));
		pid = -1;
	} else if (file_has(in.qlog, "KVM internal error")) {
		/* PVM-style hosts: the guest dies late in emulation failure and
		 * QEMU pauses it; the log ends in a register dump. */
		snprintf(reason, rsz, "kvm: guest kernel did not reach the agent in %d s "
			 "(KVM internal error in qemu.log)", PROBE_MS / 1000);
	} else {
		last_line(in.qlog, line, sizeof line);
		snprintf(reason, rsz, "kvm: guest kernel did not reach the agent in %d s%s%s%s",
			 PROBE_MS / 1000, line[0] ? " (qemu.log: " : "", line, line[0] ? ")" : "");
	}
done:
	if (pid > 0) { /* our own child, not yet reaped: the pid is still ours */
		kill(pid, SIGKILL);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	probe_reap(&qj, &j, jailed);
	/* Keep the probe's QEMU log beside the verdict, for whoever doubts it. */
	snprintf(keep, sizeof keep, "%s/accel/%s.log", store_home(), im->ksha);
	if (rename(in.qlog, keep) < 0)
		warn("unable to keep the probe's log as %s:", keep);
	for (i = 0; i < sizeof files / sizeof files[0]; i++)
		unlink(files[i]);
	rmdir(dir);
	free(conn);
	return ok;
}

/* The cached verdict for kernel ksha: 1 found (*accel, reason), else 0. */
static int cache_read(const char *ksha, const char **accel, char *reason, size_t rsz)
{
	char p[PATH_MAX];
	json_t *v;
	const char *a, *r;
	int found = 0;

	if (pathn(p, sizeof p, "%s/accel/%s.json", store_home(), ksha) < 0 ||
	    !(v = json_load_path(p)))
		return 0;
	a = json_string_value(json_object_get(v, "accel"));
	r = json_string_value(json_object_get(v, "reason"));
	if (a && (!strcmp(a, "kvm") || !strcmp(a, "tcg"))) {
		snprintf(reason, rsz, "%s", r ? r : "");
		*accel = !strcmp(a, "kvm") ? "kvm" : "tcg";
		found = 1;
	}
	json_decref(v);
	return found;
}

/* $ISOPOD_KVM_DEV, else /dev/kvm: the device whose opening decides. */
static const char *kvm_dev(void)
{
	const char *dev = getenv("ISOPOD_KVM_DEV");

	return dev && *dev ? dev : "/dev/kvm";
}

/* accel_known's decision; with host, the host's cache asked too when the
 * store has no verdict (*from 2; 1 the store's, 0 neither). */
static int decide(const char *forced, const char *forced_by, const struct img *im, int host,
		  const char **accel, int *from, char *reason, size_t rsz, char *err, size_t errsz)
{
	const char *dev = kvm_dev();
	char probed[32];
	json_t *key;
	int fd;

	reason[0] = 0;
	*from = 0;
	*accel = "tcg";
	if (forced) {
		snprintf(reason, rsz, "forced by %s", forced_by);
		if (!strcmp(forced, "tcg"))
			return 0;
		if ((fd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
			snprintf(err, errsz, "kvm forced by %s but unable to open %s: %s", forced_by, dev,
				 strerror(errno));
			return EX_SYS;
		}
		close(fd);
		*accel = "kvm";
		return 0;
	}
	if ((fd = open(dev, O_RDWR | O_CLOEXEC)) < 0) {
		snprintf(reason, rsz, "%s: %s", dev, strerror(errno));
		return 0;
	}
	close(fd);
	*accel = NULL;
	if (!im->ksha[0])
		return 0;
	if (cache_read(im->ksha, accel, reason, rsz)) {
		*from = 1;
		return 0;
	}
	if (host && (key = accel_host_key(im->ksha, dev))) {
		if (accel_host_read(key, accel, reason, rsz, probed, sizeof probed))
			*from = 2;
		json_decref(key);
	}
	return 0;
}

int accel_known(const char *forced, const char *forced_by, const struct img *im,
		const char **accel, int *cached, char *reason, size_t rsz, char *err, size_t errsz)
{
	int r = decide(forced, forced_by, im, 1, accel, cached, reason, rsz, err, errsz);

	*cached = *cached != 0;
	return r;
}

/* The verdict into the store's accel/<ksha>.json (under its lock). */
static void cache_write(const char *ksha, const char *accel, const char *reason,
			const char *probed)
{
	char p[PATH_MAX];
	json_t *v;

	snprintf(p, sizeof p, "%s/accel/%s.json", store_home(), ksha);
	v = json_pack("{s:s, s:s, s:s}", "accel", accel, "reason", reason, "probed", probed);
	if (!v || json_write_atomic(p, v) < 0)
		warn("unable to record the kvm verdict in %s:", p);
	json_decref(v);
}

int accel_choose(const char *forced, const char *forced_by, const struct img *im,
		 const char **accel, char *reason, size_t rsz, char *err, size_t errsz)
{
	char p[PATH_MAX], f[PATH_MAX], now[32];
	json_t *key;
	int lk, ok, from, r;

	/* the store's verdict only: the host's is asked under the lock below,
	 * where a hit is copied into the store */
	if ((r = decide(forced, forced_by, im, 0, accel, &from, reason, rsz, err, errsz)) || *accel)
		return r;
	*accel = "tcg";
	snprintf(p, sizeof p, "%s/accel", store_home());
	if (mkdir_p(p, 0700, f, sizeof f) < 0) {
		snprintf(err, errsz, "unable to create %.512s: %s", f, strerror(errno));
		return EX_SYS;
	}
	/* One probe per kernel at a time; others wait for its verdict. */
	snprintf(p, sizeof p, "%s/accel/%s.lock", store_home(), im->ksha);
	if ((lk = lock_open(p, LOCK_EX)) < 0) {
		snprintf(err, errsz, "unable to lock %.512s: %s", p, strerror(errno));
		return EX_SYS;
	}
	/* Again under the lock: the probe we waited for may have decided. */
	if (cache_read(im->ksha, accel, reason, rsz)) {
		close(lk);
		return 0;
	}
	/* Another store's probe on this host, for this very key: its verdict,
	 * kept in this store too (with its reason saying where it came from,
	 * and the time of that probe). */
	key = accel_host_key(im->ksha, kvm_dev());
	if (accel_host_read(key, accel, reason, rsz, now, sizeof now)) {
		cache_write(im->ksha, *accel, reason, now);
		json_decref(key);
		close(lk);
		return 0;
	}
	if ((ok = accel_probe(im, reason, rsz, err, errsz)) < 0) {
		json_decref(key);
		close(lk);
		return EX_SYS;
	}
	*accel = ok ? "kvm" : "tcg";
	iso_now(now, sizeof now);
	cache_write(im->ksha, *accel, reason, now);
	/* shared with the host's other stores only when it holds for them:
	 * KVM works, QEMU could not start KVM at all (no right to the
	 * device, no VT-x), or KVM itself failed the guest ("KVM internal
	 * error" in QEMU's log: a PVM host); a bare timeout, a socket path
	 * too long or a QEMU that died of something else may be this store's
	 * or this moment's (a loaded host), and stays the store's alone */
	if (ok || strstr(reason, "failed to initialize kvm") || strstr(reason, "(KVM internal error"))
		accel_host_write(key, *accel, reason, now);
	json_decref(key);
	close(lk);
	return 0;
}
