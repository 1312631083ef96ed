/* isopod-commit - freeze a VM's writable layer as an immutable stage.
 *
 * The guest syncs and remounts its root read-only (agent SHUTDOWN), the VM
 * stops, and under the store lock the VM's overlay is renamed into a
 * staging directory, rebased onto its parent by a relative path, made
 * read-only, described, and the directory renamed into place.  The rename is
 * the commit point: a kill before it leaves only stages/.tmp-* (never
 * listed, reclaimed by isopod-gc), after it a complete stage.  O(1) in the
 * bytes the VM wrote: the layer is sealed by its stat after its last chmod,
 * and its sha256 is added to the seal by a detached background process.
 *
 * --check validates a planned commit before anything boots. */
#include "frame.h"
#include "host.h"
#include "image.h"
#include "proc.h"
#include "qjail.h"
#include "stage.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define USAGE "isopod-commit --check [--stage REF] LABEL\n" \
	      "       isopod-commit [--label LABEL] --vm REF"

/* Depth the new stage would have on top of `parent` (NULL = on a base). */
static int depth_on(const char *parent)
{
	json_t *m;
	int d;

	if (!parent)
		return 1;
	m = stage_meta(parent);
	if (!m)
		die(EX_NOTFOUND, "no such stage: %s", EXC(parent));
	d = (int)json_integer_value(json_object_get(m, "depth")) + 1;
	json_decref(m);
	return d;
}

static void check_label(const char *label, const char *parent)
{
	const char *why = label ? label_invalid(label) : NULL;
	char holder[64];
	int d = depth_on(parent);

	if (!why && label)
		why = label_reserved(label);
	if (why)
		die(EX_USAGE, "label %s: %s", EXC(label), why);
	if (label && label_taken(label, holder, sizeof holder))
		die(EX_CONFLICT, "label %s is taken by stage %s", EXC(label), holder);
	if (d > stage_max_depth())
		die(EX_CONFLICT,
		    "stage %s is at the chain depth cap (%d); run `isopod stage flatten %s --as LABEL` "
		    "and commit on top of the flattened stage", parent, stage_max_depth(), parent);
}

static void wait_unlocked(const char *id, int64_t deadline)
{
	while (vm_running(id)) {
		struct timespec ts = { .tv_nsec = 20 * 1000000 };

		if (mono_ms() > deadline)
			die(EX_TIMEOUT, "vm %s did not stop after its guest shut down", id);
		nanosleep(&ts, NULL);
	}
}

/* A failed commit on a full store should say so: the guest only sees its
 * writes fail, and QEMU's error stays in its log. */
static const char *space_hint(void)
{
	static char buf[160];
	struct statvfs sv;

	buf[0] = 0;
	if (statvfs(store_home(), &sv) == 0 && (uint64_t)sv.f_bavail * sv.f_frsize < (64u << 20))
		snprintf(buf, sizeof buf, " (the store's file system has only %llu KiB free: "
			 "no space left?)", (unsigned long long)sv.f_bavail * sv.f_frsize / 1024);
	return buf;
}

/* Ask the guest to sync and remount its root read-only, then power off. */
static int64_t shutdown_guest(const char *id, const char *sock)
{
	struct conn c;
	struct hello h = {0};
	struct frame fr;
	int64_t t0 = mono_ms(), dl = t0 + 120000;
	char kind[64], msg[512];

	if (conn_open(&c, sock, mono_ms() + 10000) < 0 || conn_hello(&c, &h, dl) < 0)
		die(EX_SYS, "vm %s: %s; nothing was committed%s", id, c.err, space_hint());
	conn_queue(&c, F_SHUTDOWN, STREAM_CTL, NULL, 0);
	for (;;) {
		int r = conn_wait(&c, &fr, dl);

		if (r < 0)
			die(r == -3 ? EX_TIMEOUT : EX_SYS, "vm %s: shutdown: %s; nothing was committed%s",
			    id, c.err, space_hint());
		if (fr.type == F_PONG)
			continue;
		if (fr.type == F_SHUTDOWN_ACK) {
			if (fr.len) {
				frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
				die(EX_SYS, "vm %s: the guest could not unmount its root cleanly: %s; "
				    "nothing was committed%s", id, msg, space_hint());
			}
			break;
		}
		if (fr.type == F_ERROR) {
			frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
			die(EX_SYS, "vm %s: shutdown refused: %s", id, msg);
		}
	}
	conn_close(&c);
	wait_unlocked(id, mono_ms() + 30000);
	return mono_ms() - t0;
}

static int fsync_path(const char *p)
{
	int fd = open(p, O_RDONLY | O_CLOEXEC), r;

	if (fd < 0)
		return -1;
	r = fsync(fd);
	close(fd);
	return r;
}

/* Under the store lock, the VM's overlay (layer) becomes the stage: moved
 * into a staging directory, rebased onto its parent by a relative path,
 * made read-only, sealed and described, then renamed into place.  Returns
 * the stage's meta; dies with nothing committed before the rename. */
static json_t *make_stage(const char *id, json_t *vm, const char *label, const char *layer,
			  int64_t shutdown_ms)
{
	const char *parent = json_string_value(json_object_get(vm, "stage"));
	const char *vname = json_string_value(json_object_get(vm, "name"));
	json_t *base = json_object_get(vm, "base"), *sm;
	char stid[64], hex[13], p[PATH_MAX], tmp[PATH_MAX], dst[PATH_MAX], rel[PATH_MAX], now[32];
	struct stat st;
	int lk, depth;
	int64_t t0;

	t0 = mono_ms();
	lk = store_lock();
	check_label(label, parent); /* again, now that we hold the lock */
	/* The VM stopped before we got the lock, so no running VM pinned its
	 * base meanwhile: `isopod image rm` (which decides under this lock)
	 * may have removed it.  A stage over a missing base is never made. */
	pathf(p, sizeof p, "%s/images/base-%s.img", store_home(),
	      json_string_value(json_object_get(base, "sha256")));
	if (access(p, F_OK) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "the base image of vm %s, %s, is gone%s; "
		    "nothing was committed", id, p, errno == ENOENT ? " (isopod image rm)" : ":");
	/* The VM ran on its parent's chain: a layer that changed meanwhile
	 * must not become the base of a new stage. */
	if (parent) {
		char msg[PATH_MAX + 512];

		if (stage_chain_sealed(parent, msg, sizeof msg) < 0)
			die(EX_SYS, "%s; nothing was committed", msg);
	}
	/* The guest's QEMU wrote this file: a header naming an external data
	 * file (a host path) must not reach the root qemu-img below nor any
	 * later one that opens the stage. */
	{
		char why[256];
		int fd = open(layer, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

		if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
			die(EX_SYS, "the disk of vm %s, %s: not a regular file; nothing was committed",
			    id, layer);
		if (qcow2_header_ok(fd, why, sizeof why) < 0)
			die(EX_SYS, "the disk of vm %s, %s, is refused: %s; nothing was committed", id,
			    layer, why);
		close(fd);
	}
	depth = depth_on(parent);
	if (rand_hex(hex, 6) < 0)
		die(EX_SYS, "unable to get random bytes:");
	snprintf(stid, sizeof stid, "st-%s", hex);
	pathf(p, sizeof p, "%s/stages", store_home());
	mkdirs(p, 0755);
	pathf(tmp, sizeof tmp, "%s/stages/.tmp-%s.%ld", store_home(), stid, (long)getpid());
	pathf(dst, sizeof dst, "%s/stages/%s", store_home(), stid);
	if (mkdir(tmp, 0755) < 0)
		die(EX_SYS, "unable to create %s:", tmp);
	test_kill("before-rename");
	pathf(p, sizeof p, "%s/layer.qcow2", tmp);
	if (rename(layer, p) < 0)
		die(EX_SYS, "unable to move %s into the store:", layer);
	test_kill("after-disk-rename");
	/* Relative backing: the store can move, the chain still resolves. */
	if (parent)
		pathf(rel, sizeof rel, "../%s/layer.qcow2", parent);
	else
		pathf(rel, sizeof rel, "../../images/base-%s.img",
		      json_string_value(json_object_get(base, "sha256")));
	{
		char *qa[] = {"qemu-img", "rebase", "-u", "-f", "qcow2", "-F", parent ? "qcow2" : "raw",
			      "-b", rel, p, NULL};
		/* The guest's QEMU wrote this header: qemu-img parses it in its
		 * jail (lib/qjail.c), the layer its one file (-u: the backing
		 * is named, not opened). */
		char ierr[DIAG_MAX] = "";
		int rc = qjail_img(&(struct qimg_req){ .av = qa, .writes = p, .outfd = PROC_NULL,
						       .errfd = PROC_INHERIT },
				   ierr, sizeof ierr);

		if (rc < 0)
			warn("%s", ierr);
		if (rc != 0 || chmod(p, 0444) < 0 || fsync_path(p) < 0) {
			int e = errno;

			rename(p, layer); /* give the VM its disk back */
			rmdir(tmp);
			errno = e;
			die(EX_SYS, "unable to seal the layer of vm %s", id);
		}
	}
	/* The seal: after the last chmod and rebase, which move ctime. */
	if (stat(p, &st) < 0)
		die(EX_SYS, "unable to stat %s:", p);
	sm = json_pack("{s:s, s:s, s:o, s:o, s:i, s:O, s:I, s:s, s:s}", "id", stid, "name",
		       vname ? vname : stid, "label", label ? json_string(label) : json_null(),
		       "parent", parent ? json_string(parent) : json_null(), "depth", depth,
		       "base", base, "size", (json_int_t)st.st_blocks * 512, "created",
		       iso_now(now, sizeof now), "from_vm", id);
	json_object_set_new(sm, "seal", seal_new(&st));
	json_object_set_new(sm, "commit_ms", json_integer(mono_ms() - t0));
	json_object_set_new(sm, "shutdown_ms", json_integer(shutdown_ms));
	pathf(p, sizeof p, "%s/meta.json", tmp);
	if (json_write_atomic(p, sm) < 0) {
		int e = errno;
		char lp[PATH_MAX];

		pathf(lp, sizeof lp, "%s/layer.qcow2", tmp);
		chmod(lp, 0600);
		rename(lp, layer);
		unlink(p);
		rmdir(tmp);
		errno = e;
		die(EX_SYS, "unable to write the stage's meta.json (nothing was committed):");
	}
	test_kill("before-commit-rename");
	if (rename(tmp, dst) < 0)
		die(EX_SYS, "unable to rename %s to %s:", tmp, dst);
	pathf(p, sizeof p, "%s/stages", store_home());
	fsync_path(p);
	test_kill("after-commit-rename");
	close(lk);
	if (stage_seal_spawn(stid) < 0)
		warn("unable to start the background hash of stage %s: %s; `isopod stage verify %s` "
		     "records it", stid, strerror(errno), stid);
	return sm;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"check", no_argument, 0, 'c'},
					   {"stage", required_argument, 0, 's'},
					   {"label", required_argument, 0, 'l'},
					   {"vm", required_argument, 0, 'v'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	const char *label = NULL, *sref = NULL, *vref = NULL, *parent;
	char id[VM_ID_SZ], why[512], layer[PATH_MAX], parent_id[64] = "";
	int ch, check = 0;
	json_t *vm, *sm;
	int64_t shutdown_ms;

	progname = "isopod-commit";
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'c': check = 1; break;
		case 's': sref = optarg; break;
		case 'l': label = optarg; break;
		case 'v': vref = optarg; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	/* --check's operand is the label; the VM is only ever --vm REF
	 * (one way to name a VM: an operand is refused, not guessed). */
	if (!check && argc != optind)
		die_usage(USAGE, "unexpected operand; name the VM with --vm REF");
	if (check && vref)
		die_usage(USAGE, "--check takes no --vm");
	if (check && argc - optind != 1)
		die_usage(USAGE, "--check takes one LABEL");
	if (!check && !vref)
		die_usage(USAGE, "no VM: name it with --vm REF");
	if (check) {
		/* A base flavor as --stage means depth 1 on that base. */
		if (sref) {
			char serr[DIAG_MAX];
			int r = stage_find(sref, parent_id, sizeof parent_id, serr, sizeof serr);

			if (r < 0)
				die(exit_code_of(errno), "%s", serr);
			if (r == 0)
				parent_id[0] = 0;
		}
		check_label(argv[optind], parent_id[0] ? parent_id : NULL);
		json_emit(json_pack("{s:b, s:s, s:i}", "ok", 1, "label", argv[optind], "depth",
				    depth_on(parent_id[0] ? parent_id : NULL)));
		return 0;
	}

	if (vm_open(vref, id, &vm, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	parent = json_string_value(json_object_get(vm, "stage"));
	if (!json_string_value(json_object_get(json_object_get(vm, "base"), "sha256")))
		die(EX_SYS, "vm %s has no base recorded in its meta.json", id);
	check_label(label, parent);
	if (!vm_running(id))
		die(EX_CONFLICT, "vm %s is not running; only a running VM's disk can be committed "
		    "(its guest must unmount the root cleanly)", id);
	pathf(layer, sizeof layer, "%s/vms/%s/disk.qcow2", store_home(), id);
	if (access(layer, F_OK) < 0)
		die(EX_NOTFOUND, "vm %s has no disk:", id);

	test_kill("before-shutdown");
	shutdown_ms = shutdown_guest(id, json_string_value(json_object_get(vm, "agent_sock")));

	sm = make_stage(id, vm, label, layer, shutdown_ms);
	json_decref(vm);
	/* Merged under meta.lock: the supervisor recorded the stop meanwhile. */
	vm = json_pack("{s:O}", "committed_as", json_object_get(sm, "id"));
	if (!vm || vm_meta_update(id, NULL, vm) < 0)
		warn("unable to record the commit in the record of vm %s:", id);
	json_emit(json_pack("{s:O}", "stage", sm));
	return 0;
}
