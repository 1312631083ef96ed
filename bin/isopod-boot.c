/* isopod-boot - boot a claimed VM under a supervisor and wait for its agent.
 *
 * Process shape:
 *   isopod-boot ──spawn──> isopod-supervise ──jail_spawn──> qemu-system-x86_64
 * QEMU and its broker run jailed (lib/qjail.c) unless ISOPOD_JAIL=0 or `jail = no`.
 * The supervisor (isopod-supervise(1)), exec'd with fixed descriptors,
 * holds vms/<id>/lock (LOCK_EX) for its whole life: that lock IS "the VM
 * is running".  It watches QEMU, the owner and its signals through pidfds
 * and a signalfd, and kills QEMU (the pid it forked itself, never a pid
 * read from a file) when the owner goes away.  QEMU carries
 * PDEATHSIG=SIGKILL, so a SIGKILLed supervisor takes QEMU with it.
 * What boots comes from lib/: the image (image.c), the accelerator
 * (accel.c), the command line (qemu.c), the warm pool (warmpool.c), the
 * supervisor's start, the handshake and a resume (launch.c). */

#include "accel.h"
#include "bootopt.h"
#include "cgroup.h"
#include "host.h"
#include "image.h"
#include "launch.h"
#include "proc.h"
#include "qemu.h"
#include "ovtpl.h"
#include "qjail.h"
#include "stage.h"
#include "tsc.h"
#include "egress.h"
#include "net.h"
#include "util.h"
#include "vm.h"
#include "warm.h"
#include "warmpool.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define USAGE BOOT_USAGE

#define MIB (1024LL * 1024)

/* Everything one boot holds: what it took (the vm lock, the network slot),
 * what it started (to undo when it fails), and what it learnt on the way.
 * One per process, passed down: no file-scope state. */
struct boot {
	struct boot_opts cf;     /* the options, the limits and the fit (lib/bootopt.h) */
	const char *id, *name, *net_mode, *accel;
	char reason[512];         /* why this accelerator */
	char meta[PATH_MAX];      /* vms/<id>/meta.json */
	json_t *rec;              /* the record as read under the lock */
	struct inst in;
	struct img im;
	struct qemu_vm vm;        /* the shape every QEMU of this VM shares */
	int forked;               /* isopod-fork made the disk */
	const char *overlay;      /* what made the disk: meta.json's "overlay" */
	long long disk_bytes, cur_bytes;
	int64_t t0, deadline;
	int resumed;
	int recorded;             /* the record is ours: a failure goes in it */
	char idbuf[VM_ID_SZ];     /* the id --vm resolved to */
	/* The supervisor and QEMU (lib/launch.h): the vm lock and the owner's
	 * pidfd it is handed, the jail, the handshake; undone by fail(). */
	struct launch ln;
	/* The network slot (--net filtered|open): taken before QEMU starts,
	 * its lock held by the supervisor for the VM's whole life.  slot -1:
	 * no NIC, and then the command line is the one without networking. */
	struct netslot net;
	struct conn *conn;        /* 130 KiB of buffers: on the heap */
	struct pool w;
};

/* ---- small helpers ---------------------------------------------------- */

/* ---- boot ------------------------------------------------------------- */

/* Undo what was started, record state failed with the message, exit. */
__attribute__((noreturn, format(printf, 3, 4))) static void fail(struct boot *bt, int code,
							       const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *m;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	launch_abandon(&bt->ln);
	/* Our own hold on the vm lock goes last: the record is final first. */
	if (bt->recorded) {
		m = json_pack("{s:s, s:s}", "state", "failed", "error", msg);
		if (!m || vm_meta_update(bt->id, NULL, m) < 0)
			warn("unable to record the failure of %s:", bt->id);
		json_decref(m);
	}
	if (bt->ln.lockfd >= 0) {
		close(bt->ln.lockfd);
		bt->ln.lockfd = -1;
		if (vm_wait_stopped(bt->id, mono_ms() + 5000) < 0)
			warn("vm %s: lock still held after its supervisor exited", bt->id);
	}
	die(code, "%s", msg);
}

static void range(const char *opt, const char *arg, long long lo, long long hi, const char *why,
		  long long *out)
{
	char msg[EXCERPT_SZ + 256];

	if (range_check(opt, arg, lo, hi, why, out, msg, sizeof msg) < 0)
		die(EX_USAGE, "%s", msg);
}

/* ---- main, phase by phase -------------------------------------------- */

/* Options and environment, and the ranges that do not need the record,
 * naming the host's headroom, before anything changes (lib/bootopt.c:
 * isopod-claim --boot-check runs the same). */
static void parse_args(struct boot *bt, int argc, char **argv)
{
	struct boot_opts *cf = &bt->cf;
	char msg[2 * PATH_MAX + EXCERPT_SZ + 256];
	int r;

	if ((r = boot_opts_parse(cf, argc, argv, msg, sizeof msg)) == BOOT_OPTS_SHAPE)
		die_usage(USAGE, "%s", msg);
	if (r)
		die(r, "%s", msg);
	if (cf->run_options >= 0) {
		if (run_options_print(boot_opts_run(), boot_opts_long(), cf->run_options, msg,
				      sizeof msg) < 0)
			die(EX_SYS, "%s", msg);
		exit(0);
	}
	if (cf->help) {
		puts("usage: " USAGE);
		exit(0);
	}
	bt->w.on = cf->warm;
	bt->w.wait_ms = cf->wait_ms;
	bt->ln.console_max = cf->console_max;
	bt->ln.pool_idle_s = cf->pool_idle_s;
	if (cf->check) {
		/* The front end's refusal before anything is claimed: the disk's
		 * floor (the base's size) is checked again at boot. */
		if ((r = boot_opts_check(cf, msg, sizeof msg)) != 0)
			die(r, "%s", msg);
		json_emit(json_pack("{s:b}", "ok", 1));
		exit(0);
	}
	if (cf->a_owner) {
		range("--owner-pid", cf->a_owner, 1, INT_MAX, "a process id", &cf->owner);
	} else {
		cf->owner = getppid();
	}
	if (!cf->keep) {
		bt->ln.ownerfd = bt->w.ownerfd = pidfd_open_((pid_t)cf->owner);
		if (bt->ln.ownerfd < 0) {
			if (errno == ESRCH)
				die(EX_USAGE, "owner pid %lld: no such process", cf->owner);
			die(EX_SYS, "unable to watch owner pid %lld:", cf->owner);
		}
	}
}

/* The VM (--vm), the record, the kernel and base, the disk's size. */
static void load_vm(struct boot *bt)
{
	struct boot_opts *cf = &bt->cf;
	char dir[PATH_MAX], err[PATH_MAX + 128], why[512];
	struct sockaddr_un sa;
	long long minmib;
	int r;

	/* The record is the channel: a claim on stdin is not read. */
	if (!bt->cf.a_vm)
		die_usage(USAGE, "no VM: name it with --vm REF (standard input is not read)");
	if (vm_resolve(bt->cf.a_vm, bt->idbuf, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	bt->id = bt->idbuf;
	if ((bt->ln.jail = jail_wanted(bt->ln.jail_why, sizeof bt->ln.jail_why)) < 0)
		die(EX_USAGE, "%s", bt->ln.jail_why);
	bt->w.jail = bt->ln.jail; /* the warm template's QEMU too */
	bt->w.jail_why = bt->ln.jail_why;
	bt->w.console_max = bt->ln.console_max; /* the template's console too */
	pathf(dir, sizeof dir, "%s/vms/%s", store_home(), bt->id);
	if (inst_paths(&bt->in, dir) < 0)
		die(EX_USAGE, "path too long: %.64s...", dir);
	pathf(bt->meta, sizeof bt->meta, "%s/meta.json", bt->in.dir);
	if (!(bt->rec = vm_read(bt->id))) {
		if (errno == ENOENT)
			die(EX_NOTFOUND, "no such vm: %s", bt->id);
		die(EX_SYS, "unable to read %s:", bt->meta);
	}
	if ((r = resolve_kernel(&bt->im, err, sizeof err)) ||
	    (r = kernel_agent_ok(&bt->im, err, sizeof err)))
		die(r, "%s", err);
	/* isopod-fork leaves the disk (over a stage chain) and the base it
	 * rests on in the record; boot then boots that disk as it is. */
	bt->forked = access(bt->in.disk, F_OK) == 0;
	if (bt->forked) {
		json_t *b = json_object_get(bt->rec, "base");
		const char *fl = json_string_value(json_object_get(b, "flavor"));
		const char *sh = json_string_value(json_object_get(b, "sha256"));

		if (!fl || !sh)
			die(EX_SYS, "vm %s has a disk but its record names no base", bt->id);
		/* isopod-fork checked the chain's seals; QEMU opens the layers
		 * now, so check them again (stat only) right before. */
		if (json_is_string(json_object_get(bt->rec, "stage"))) {
			char smsg[PATH_MAX + 512];

			if (stage_chain_sealed(json_string_value(json_object_get(bt->rec, "stage")),
					       smsg, sizeof smsg) < 0)
				die(EX_SYS, "%s", smsg);
		}
		if ((r = resolve_base(&bt->im, fl, sh, err, sizeof err)))
			die(r, "%s", err);
		if ((bt->cur_bytes = qcow2_size(bt->in.disk)) < 0)
			die(EX_SYS, "unable to read the qcow2 header of %s:", bt->in.disk);
	} else {
		if ((r = resolve_base(&bt->im, "base", NULL, err, sizeof err)))
			die(r, "%s", err);
		bt->cur_bytes = bt->im.base_size;
	}
	minmib = (bt->cur_bytes + MIB - 1) / MIB;
	if (bt->cf.a_disk) {
		snprintf(why, sizeof why, "the %s is %lld MiB",
			 bt->forked ? "forked disk" : "base image", minmib);
		range("--disk-mib", bt->cf.a_disk, minmib, BOOT_DISK_MIB_MAX, why, &cf->disk_mib);
		cf->disk_given = 1;
	} else {
		cf->disk_mib = minmib;
	}
	bt->disk_bytes = cf->disk_given ? cf->disk_mib * MIB : bt->cur_bytes;

	/* QEMU splits option values at ',' and unix sockets have a short path
	 * limit: refuse a store that cannot work rather than fail obscurely. */
	if (strchr(bt->in.dir, ','))
		die(EX_USAGE, "store path %s contains ','; QEMU options cannot carry it", bt->in.dir);
	if (strlen(bt->in.agent) >= sizeof sa.sun_path || strlen(bt->in.qmp) >= sizeof sa.sun_path)
		die(EX_USAGE, "store path %s is too long for a unix socket (max %zu bytes)", bt->in.dir,
		    sizeof sa.sun_path - 1);
}

/* The vm lock, taken here and handed down to the supervisor: from now
 * until QEMU is gone, gc sees the VM as running.  Then the record as it is
 * under the lock, not as first read. */
static void take_vm(struct boot *bt)
{
	char lockp[PATH_MAX];
	const char *state;

	pathf(lockp, sizeof lockp, "%s/lock", bt->in.dir);
	bt->ln.lockfd = lock_open(lockp, LOCK_EX | LOCK_NB);
	if (bt->ln.lockfd < 0) {
		if (errno == EWOULDBLOCK)
			die(EX_CONFLICT, "vm %s is already running", bt->id);
		die(EX_SYS, "unable to lock %s:", lockp);
	}
	json_decref(bt->rec);
	if (!(bt->rec = vm_read(bt->id)))
		die(EX_SYS, "unable to read %s:", bt->meta);
	state = json_string_value(json_object_get(bt->rec, "state"));
	if (!state || strcmp(state, "claimed"))
		die(EX_CONFLICT, "vm %s is %s, not claimed; claim a new one", bt->id,
		    state ? state : "unknown");
	bt->name = json_string_value(json_object_get(bt->rec, "name"));
	if (!bt->name)
		bt->name = bt->id;
	bt->recorded = 1; /* from here on a failure is recorded */
}

/* The network slot, before anything boots: no taps (netsetup not run
 * since the host booted) or no free slot fail here, fast. */
static void take_net(struct boot *bt)
{
	char bp[PATH_MAX], ledger[PATH_MAX], err[PATH_MAX + 256];
	json_t *allow = json_object_get(json_object_get(bt->rec, "net"), "allow");
	struct egress *eg;
	int r;

	bt->net_mode = json_string_value(json_object_get(json_object_get(bt->rec, "net"), "mode"));
	if (!bt->net_mode)
		bt->net_mode = "none";
	if (!net_mode_valid(bt->net_mode))
		die(EX_USAGE, "vm %s: net mode %s is not supported", bt->id, bt->net_mode);
	if (!strcmp(bt->net_mode, "none"))
		return;
	if ((r = net_take_slot(&bt->net, bt->net_mode, bt->w.warnings, err, sizeof err)))
		die(r, "%s", err);
	bt->ln.slotfd = bt->net.lock_fd;
	pathf(ledger, sizeof ledger, "%s/ledger.jsonl", bt->in.dir);
	/* Every mode gets a broker: filtered and learn for everything, open for DNS
	 * (netsetup redirects every guest port 53 to it).  The supervisor
	 * plans it again from supnet; this plan checks it before anything
	 * boots. */
	if (!(eg = malloc(sizeof *eg)))
		die(EX_SYS, "unable to allocate memory:");
	proc_sibling(bp, sizeof bp, "isopod-broker", "ISOPOD_BROKER");
	if ((r = egress_plan(eg, bp, bt->net_mode, bt->net.gw, allow, ledger, bt->id, err,
			     sizeof err)) < 0)
		die(r == -2 ? EX_SYS : EX_USAGE, "vm %s: %s", bt->id, err);
	free(eg);
	bt->ln.net = json_pack("{s:s, s:s, s:O?}", "mode", bt->net_mode, "gateway", bt->net.gw,
			       "allow", json_is_array(allow) ? allow : NULL);
	if (!bt->ln.net)
		die(EX_SYS, "unable to allocate memory:");
}

/* The accelerator, and the record says booting with the VM's shape. */
static void record_booting(struct boot *bt)
{
	const struct boot_opts *cf = &bt->cf;
	char err[PATH_MAX + 256];
	long long tsc_khz = 0;
	json_t *m;
	int r;

	if ((r = accel_choose(cf->accel, cf->accel_src, &bt->im, &bt->accel, bt->reason,
			      sizeof bt->reason, err, sizeof err)))
		die(r, "%s", err);
	if (boot_opts_fit(&bt->cf, !strcmp(bt->accel, "tcg"), err, sizeof err) < 0)
		fail(bt, EX_USAGE, "%s", err);
	/* TCG's guest is told the host's TSC rate, measured once per store
	 * (lib/tsc.h); without one it keeps the old line, a slower clock */
	if (!strcmp(bt->accel, "tcg") && tsc_store_khz(&tsc_khz, err, sizeof err) < 0)
		warn("the guest's TSC rate: %s (it is told 2 GHz, without tsc=reliable)", err);
	m = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s?, s:{s:s}, s:{s:s, s:s}, s:s, s:s, s:I, s:b, s:b}",
		      "state", "booting", "vcpus", (json_int_t)cf->vcpus, "mem_mib",
		      (json_int_t)cf->mem_mib, "disk_mib", (json_int_t)cf->disk_mib, "accel", bt->accel,
		      "accel_reason", !strcmp(bt->accel, "tcg") ? bt->reason : NULL, "kernel", "sha256",
		      bt->im.ksha, "base", "flavor", bt->im.flavor, "sha256", bt->im.bsha, "agent_sock",
		      bt->in.agent, "qmp_sock", bt->in.qmp, "owner_pid", (json_int_t)cf->owner, "keep",
		      cf->keep, "no_flush", cf->ephemeral);
	if (m) {
		json_t *nj = net_json(&bt->net, bt->net_mode);
		json_t *al = json_object_get(json_object_get(bt->rec, "net"), "allow");

		/* the claim's allowlist stays in the record: what the VM was
		 * allowed is asked of the record afterwards (isopod-provenance) */
		if (nj && json_is_array(al))
			json_object_set(nj, "allow", al);
		json_object_set_new(m, "net", nj);
	}
	if (!m || vm_meta_update(bt->id, NULL, m) < 0)
		die(EX_SYS, "unable to update %s:", bt->meta);
	json_decref(m);
	bt->vm = (struct qemu_vm){
		.accel = bt->accel,
		.mem_mib = cf->mem_mib,
		.vcpus = cf->vcpus,
		.vmlinux = bt->im.vmlinux,
		.initrd = bt->im.initrd,
		.tap = bt->net.slot >= 0 ? bt->net.tap : NULL,
		.mac = bt->net.slot >= 0 ? bt->net.macs : NULL,
		.tb_mib = bt->cf.fit.mem_tight ? bt->cf.fit.tb_mib : 0,
		.tsc_khz = tsc_khz,
		.lapic_khz = kernel_lapic_khz(&bt->im),
		/* the one place that decides: the caller said nothing reads
		 * this disk once the VM stops (--ephemeral, never with --keep) */
		.no_flush = cf->ephemeral,
	};
}

/* A forked disk grown: its header a jailed qemu-img wrote, over stage
 * layers guests' QEMUs wrote, and resize opens that chain (the size), so
 * in qemu-img's jail (lib/qjail.c), the disk its one writable file. */
static void grow_forked(struct boot *bt)
{
	char size[32], err[DIAG_MAX] = "";
	char *qa[] = { "qemu-img", "resize", "-q", bt->in.disk, size, NULL };
	int rc;

	snprintf(size, sizeof size, "%lld", bt->disk_bytes);
	rc = qjail_img(&(struct qimg_req){ .av = qa, .writes = bt->in.disk, .wchain = 1,
					   .outfd = PROC_NULL, .errfd = PROC_INHERIT },
		       err, sizeof err);
	if (rc != 0)
		fail(bt, EX_SYS, "qemu-img resize %s failed%s%s", bt->in.disk, rc < 0 ? ": " : "",
		     err);
}

/* A new empty overlay over the base: the store's template copied, else
 * qemu-img's (lib/ovtpl.c). */
static void new_overlay(struct boot *bt)
{
	char err[PATH_MAX + 128];
	int r = overlay_new(bt->im.base, bt->in.disk, bt->disk_bytes, err, sizeof err);

	if (r < 0)
		fail(bt, EX_SYS, "%s", err);
	bt->overlay = r ? "template" : "qemu-img";
}

/* The disk (a copy of a snapshot's empty overlay, a new overlay, or the
 * fork's, grown) and the HELLO this VM's agent gets. */
static void prepare_disk(struct boot *bt)
{
	const char *env;
	struct hello *h = &bt->ln.h;

	/* The warm pool: resume a snapshot of this shape, building it first
	 * when there is none.  Whatever goes wrong there ends in a cold boot
	 * with a warning, never in a failed run. */
	if (bt->w.on && warm_setup(&bt->w, bt->rec, bt->disk_bytes,
				   bt->forked ? bt->in.disk : NULL, net_slot_mode(bt->net_mode)) < 0)
		bt->w.on = 0;
	/* A published snapshot of a plain chain carries the empty overlay
	 * qemu-img made for its build: a copy of it spares a qemu-img run, as
	 * does the store's template (lib/ovtpl.c) for a cold boot.  A forked
	 * disk: isopod-fork's record says whether it copied the template. */
	if (bt->forked)
		bt->overlay = strcmp(json_string_value(json_object_get(bt->rec, "overlay")) ?: "",
				     "template") ? "fork" : "template";
	else if (bt->w.on && blank_copy(&bt->w, bt->in.disk, bt->disk_bytes) == 0)
		bt->overlay = "snapshot";
	else
		new_overlay(bt);
	if (bt->forked && bt->disk_bytes > bt->cur_bytes)
		grow_forked(bt);
	bt->deadline = bt->t0 + bt->cf.timeout_ms;
	h->hostname = bt->name;
	h->set_time = 1;
	h->seed = 1;
	h->grow = bt->disk_bytes > bt->cur_bytes;
	/* This VM's own (a cold boot, or a clone resumed: its HELLO_ACK still
	 * says ro, as launch_resume checks): its first command would make
	 * the root read-write anyway, and the agent does it while this
	 * boot exits and the command's isopod-exec starts. */
	h->root_rw = 1;
	if (bt->net.slot >= 0) {
		h->net_addr = bt->net.addr;
		h->net_gw = bt->net.gw;
		h->net_mtu = bt->net.mtu;
		h->net_mac = bt->net.mac;
		/* The resolver is the broker, on the gateway (port 53 is
		 * redirected to its 1053 by isopod-netsetup's table). */
		h->net_dns = bt->net.gw;
		if ((env = getenv("ISOPOD_NET_DNS")) && *env)
			h->net_dns = env;
	}
}

/* Resume a snapshot of this shape (building it first when there is
 * none); on any failure of the snapshot's own, retire it and leave the VM
 * to a cold boot on a pristine disk. */
static void try_warm(struct boot *bt)
{
	char msg[2048], why[256], pristine[PATH_MAX];
	struct snap sn;
	sigset_t stop, old;
	int64_t t1, bound;
	int got, r;

	/* No clone starts without the library: neither build nor retire a
	 * snapshot for that (the supervisor's setup, not the snapshot's). */
	if (launch_memro_ok(msg, sizeof msg) < 0) {
		warm_warn(&bt->w, "warm snapshots skipped: %s (a warm clone's QEMU needs %s); booted cold",
			  msg, QEMU_MEMRO_SO);
		return;
	}
	/* A stop signal waits while the snapshot is prepared (owner_gone sees
	 * it pending: the build stops and cleans up what it made, its
	 * template's jail cgroups, the lent disk, tpl/, the staging
	 * directory), then ends us as it would have at once. */
	sigemptyset(&stop);
	for (int i = 0; i < 3; i++) {
		/* an ignored one (nohup's HUP, a background job's INT) would be
		 * pending all the same, blocked, and abandon the build */
		static const int sigs[] = { SIGTERM, SIGINT, SIGHUP };
		struct sigaction sa;

		if (sigaction(sigs[i], NULL, &sa) == 0 && sa.sa_handler != SIG_IGN)
			sigaddset(&stop, sigs[i]);
	}
	sigprocmask(SIG_BLOCK, &stop, &old);
	got = warm_get(&bt->w, &bt->in, !bt->forked, bt->deadline);
	sigprocmask(SIG_SETMASK, &old, NULL);

	/* A VM never outlives its owner: do not start one for nobody. */
	if (owner_gone(&bt->w))
		fail(bt, EX_SYS, "the owner (pid %lld) exited while the warm snapshot was prepared",
		     bt->cf.owner);
	if (got == GOT_NONE)
		return;
	if (snap_open(&bt->w, &sn, msg, sizeof msg) < 0) {
		warm_warn(&bt->w, "warm snapshot %.12s refused: %s; retired, booted cold", bt->w.key,
			  msg);
		warm_retire(&bt->w);
		return;
	}
	t1 = mono_ms();
	bound = t1 + WARM_RESUME_MAX_MS < bt->deadline ? t1 + WARM_RESUME_MAX_MS : bt->deadline;
	/* A resume that goes wrong may have let a broken guest near the disk:
	 * the cold boot gets a pristine one (a new overlay, or a copy of the
	 * fork's, kept now). */
	pathf(pristine, sizeof pristine, "%s.pristine", bt->in.disk);
	if (bt->forked && copy_small(bt->in.disk, pristine) < 0)
		fail(bt, EX_SYS, "unable to copy %s to %s: %s", bt->in.disk, pristine,
		     strerror(errno));
	r = launch_resume(&bt->ln, &bt->vm, &sn, bound, msg, sizeof msg);
	if (r == 0) {
		bt->resumed = 1;
		bt->w.resume_ms = mono_ms() - t1;
		bt->w.path = got == GOT_BUILT ? "snapshot-build" : "warm";
		unlink(pristine);
	} else if (r == EX_TIMEOUT && bound == bt->deadline) {
		/* The run's own budget ran out, not the snapshot. */
		unlink(pristine);
		fail(bt, EX_TIMEOUT, "resuming the warm snapshot: %s (--timeout-ms %lld)", msg,
		     bt->cf.timeout_ms);
	} else if (vm_stopped_on_purpose(bt->id, why, sizeof why)) {
		/* The supervisor ended it (its owner exited, or a signal): not
		 * the snapshot's fault, and no run wants this VM any more. */
		unlink(pristine);
		fail(bt, EX_SYS, "the VM was stopped while it resumed (%s): %s", why, msg);
	} else {
		char keep[PATH_MAX];

		/* no QEMU started (the supervisor's setup, or the store's
		 * paths too long for its command line): not the snapshot */
		warm_warn(&bt->w, "warm snapshot %.12s failed to resume: %s; %s, booted cold",
			  bt->w.key, msg, bt->ln.start_failed ? "kept" : "retired");
		if (!bt->ln.start_failed)
			warm_retire(&bt->w);
		vm_resume_undo(bt->id, bt->in.qlog, pathf(keep, sizeof keep, "%s/qemu-resume.log",
							  bt->in.dir));
		if (bt->forked && rename(pristine, bt->in.disk) < 0)
			fail(bt, EX_SYS, "unable to restore %s: %s", bt->in.disk, strerror(errno));
		if (!bt->forked)
			new_overlay(bt);
	}
}

/* A cold boot, then the agent's HELLO_ACK, bounded by --timeout-ms counted
 * from our start. */
static void boot_cold(struct boot *bt)
{
	struct qemu_cfg qc = qemu_cfg_at(&bt->vm, &bt->in);
	struct qemu_argv q;
	char msg[2048];
	int r;

	/* Never a template (lib/warmtpl.c starts those) nor a clone
	 * (launch_resume): its root read-write from the start, as its first
	 * command would make it anyway (lib/qemu.h root_rw). */
	qc.root_rw = 1;

	if (mono_ms() >= bt->deadline)
		fail(bt, EX_TIMEOUT, "the guest agent did not answer within %lld ms",
		     bt->cf.timeout_ms);
	if (qemu_argv(&q, &qc) < 0) /* the store's paths (a resume keeps its snapshot) */
		fail(bt, EX_USAGE, "the VM's paths are too long for QEMU's command line (its disk %.512s...)",
		     bt->in.disk);
	if (inst_fresh(&bt->in) < 0)
		fail(bt, EX_SYS, "unable to create %s: %s", bt->in.bulk, strerror(errno));
	if (launch_start(&bt->ln, q.av, -1, msg, sizeof msg) < 0)
		fail(bt, EX_SYS, "%s", msg);
	if ((r = launch_handshake(&bt->ln, bt->deadline, bt->cf.timeout_ms, msg, sizeof msg)) != 0)
		fail(bt, r, "%s", msg);
}

/* The boot is confirmed to the supervisor; the record says running, and
 * the result goes to stdout. */
static void confirm_and_emit(struct boot *bt)
{
	static const char *const live[] = { "booting", NULL };
	const struct pool *w = &bt->w;
	int64_t boot_ms;
	json_t *m, *out;

	if (launch_confirm(&bt->ln) < 0) /* the supervisor is gone: QEMU is too */
		fail(bt, EX_SYS, "the supervisor exited before the boot was confirmed");
	if (bt->ln.ownerfd >= 0)
		close(bt->ln.ownerfd);
	if (bt->resumed)
		warm_touch(&bt->w, !strcmp(w->path, "warm"));
	boot_ms = mono_ms() - bt->t0;
	m = json_pack("{s:s, s:I, s:s, s:s?, s:s?}", "state", "running", "boot_ms",
		      (json_int_t)boot_ms, "path", w->path, "warm_key", w->on ? w->key : NULL,
		      "overlay", bt->resumed ? NULL : bt->overlay);
	if (m && w->resume_ms >= 0)
		json_object_set_new(m, "resume_ms", json_integer(w->resume_ms));
	if (m && bt->ln.pool_idle_s)
		json_object_set_new(m, "pool_idle_s", json_integer(bt->ln.pool_idle_s));
	/* A note (vm_meta_note): a crash that undid it leaves "booting",
	 * which isopod-gc fails as it would "running", of a VM the crash
	 * ended; the final record carries these fields again, synced. */
	if (!m || vm_meta_note(bt->id, live, m) < 0)
		warn("unable to update %s:", bt->meta);
	json_decref(m);
	out = json_pack("{s:{s:s, s:s, s:s}, s:s, s:s, s:s, s:s, s:I, s:{s:s}, s:{s:s, s:s}, s:s}",
			"vm", "id", bt->id, "name", bt->name, "dir", bt->in.dir, "agent_sock",
			bt->in.agent, "qmp_sock", bt->in.qmp, "path", w->path, "accel", bt->accel,
			"boot_ms", (json_int_t)boot_ms, "kernel", "sha256", bt->im.ksha, "base",
			"flavor", bt->im.flavor, "sha256", bt->im.bsha, "root",
			bt->ln.h.root[0] ? bt->ln.h.root : "ro");
	if (!out)
		die(EX_SYS, "unable to build the output");
	/* TCG's: why, and the TSC rate its guest was told (tsc_early_khz,
	 * the store's accel/tsc.json; null: none, told 2 GHz) */
	if (!strcmp(bt->accel, "tcg")) {
		json_object_set_new(out, "accel_reason", json_string(bt->reason));
		json_object_set_new(out, "tsc_khz", bt->vm.tsc_khz > 0 ? json_integer(bt->vm.tsc_khz)
									: json_null());
	}
	if (w->resume_ms >= 0)
		json_object_set_new(out, "resume_ms", json_integer(w->resume_ms));
	if (w->build_ms >= 0 && bt->resumed && !strcmp(w->path, "snapshot-build"))
		json_object_set_new(out, "build_ms", json_integer(w->build_ms));
	if (w->on)
		json_object_set_new(out, "warm_key", json_string(w->key));
	json_object_set_new(out, "net", net_json(&bt->net, bt->net_mode));
	json_object_set_new(out, "jail", qjail_result(bt->ln.jail, bt->ln.jail_why, bt->id, w->warnings));
	json_object_set_new(out, "limits", cg_limits_json(&bt->cf.lim, &bt->cf.fit));
	json_object_set(out, "warnings", w->warnings);
	json_emit(out);
}

int main(int argc, char **argv)
{
	struct boot *bt = calloc(1, sizeof *bt);

	progname = "isopod-boot";
	signal(SIGPIPE, SIG_IGN); /* a dead supervisor or reader is an error, not a kill */
	if (!bt || !(bt->conn = malloc(sizeof *bt->conn)))
		die(EX_SYS, "unable to allocate memory:");
	*bt = (struct boot){
		.cf = BOOT_OPTS_INIT,
		.t0 = mono_ms(),
		.ln = LAUNCH_INIT,
		.net = { .slot = -1, .lock_fd = -1 },
		.conn = bt->conn,
		.w = POOL_INIT,
	};
	bt->conn->fd = -1;
	bt->ln.id = bt->idbuf;
	bt->ln.in = &bt->in;
	bt->ln.conn = bt->conn;
	bt->w.vm = &bt->vm;
	bt->w.im = &bt->im;
	bt->w.conn = bt->conn;
	if (!(bt->w.warnings = json_array()))
		die(EX_SYS, "unable to allocate memory:");
	bt->cf.warnings = bt->w.warnings;
	parse_args(bt, argc, argv);
	load_vm(bt);
	take_vm(bt);
	take_net(bt);
	record_booting(bt);
	prepare_disk(bt);
	if (bt->w.on)
		try_warm(bt);
	if (!bt->resumed)
		boot_cold(bt);
	confirm_and_emit(bt);
	return 0;
}
