/* isopod-fork - plan a claimed VM on a stage chain (or a base flavor).
 *
 * Finds the VM by --vm REF (lib/vm.c; nothing is read on stdin), verifies the whole chain (every layer a sound
 * qcow2, the base present), and creates the VM's empty copy-on-write
 * overlay over the stage's top layer.  isopod-boot then boots that disk.
 * O(1): nothing of the chain is copied. */
#include "image.h"
#include "ovtpl.h"
#include "proc.h"
#include "qjail.h"
#include "stage.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-fork --vm REF --stage REF"

static json_t *orjnull(json_t *j)
{
	return j ? j : json_null();
}

/* The chain's stages into layers, root first, each still present (meta
 * and layer: a `stage rm` may have run since the chain was verified).
 * The caller holds the store lock. */
static void chain_layers(const char *stid, json_t *layers)
{
	char cur[64], p[PATH_MAX];

	snprintf(cur, sizeof cur, "%s", stid);
	for (;;) {
		json_t *cm = stage_meta(cur);
		const char *par;

		pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), cur);
		if (!cm || access(p, R_OK) < 0)
			die(EX_NOTFOUND, "stage %s was removed while the fork was prepared", cur);
		json_array_insert_new(layers, 0, json_string(cur));
		par = json_string_value(json_object_get(cm, "parent"));
		if (!par) {
			json_decref(cm);
			return;
		}
		snprintf(cur, sizeof cur, "%.63s", par);
		json_decref(cm);
	}
}

/* disk, the VM's new empty overlay over backing (a stage's top layer
 * when stid is not empty, else a base).  What made it: "template" or
 * "qemu-img".  Dies on failure.  The caller holds the store lock. */
static const char *new_disk(const char *stid, char *backing, const char *disk)
{
	long long vsize = -1;
	struct stat bst;
	char tmp[PATH_MAX];
	char *qa[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-F",
		      stid[0] ? "qcow2" : "raw", "-b", backing, tmp, NULL};
	const char *rd[] = { backing };
	char ierr[DIAG_MAX] = "";
	int rc;

	/* The store's template of the overlay (lib/ovtpl.c): the very bytes
	 * the jailed qemu-img made for this layer (or base) and its virtual
	 * size (a layer's read from its header here), spares the jail and the
	 * qemu-img.  Without a template that verifies, qemu-img makes the disk
	 * and the template is kept from it. */
	if (stid[0])
		vsize = qcow2_size(backing);
	else if (stat(backing, &bst) == 0)
		vsize = (long long)bst.st_size; /* a base is raw: its size */
	if (vsize >= 0 && overlay_copy(backing, disk, vsize))
		return "template";
	/* create -b opens the backing chain (its size): stage layers
	 * jailed QEMUs wrote, so in qemu-img's jail (lib/qjail.c).  It
	 * writes a staging name, renamed once qemu-img gave it back: a
	 * fork killed meanwhile leaves a file the jail's group may write
	 * (and no disk.qcow2 that a second fork would refuse), which
	 * isopod-gc removes as it does every staging file. */
	pathf(tmp, sizeof tmp, "%s.tmp.%ld", disk, (long)getpid());
	/* ours, new: a file already there (planted) is never the one
	 * handed over and renamed into place */
	if ((rc = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		die(EX_SYS, "unable to create %s:", tmp);
	close(rc);
	rc = qjail_img(&(struct qimg_req){ .av = qa, .reads = rd, .nreads = 1, .chain = 1,
					   .writes = tmp, .outfd = PROC_NULL,
					   .errfd = PROC_INHERIT },
		       ierr, sizeof ierr);
	if (rc != 0 || rename(tmp, disk) < 0) {
		int e = errno;

		unlink(tmp);
		errno = e;
		if (rc == 0)
			die(EX_SYS, "unable to rename %s to %s:", tmp, disk);
		die(EX_SYS, "qemu-img create %s failed%s%s", disk, rc < 0 ? ": " : "", ierr);
	}
	if (vsize >= 0)
		overlay_keep(backing, disk, vsize);
	return "qemu-img";
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"vm", required_argument, 0, 'v'},
					   {"stage", required_argument, 0, 's'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	const char *ref = NULL, *vmref = NULL, *vmid, *flavor = NULL, *bsha = NULL;
	char stid[64] = "", sha[65], backing[PATH_MAX], disk[PATH_MAX], id[VM_ID_SZ], why[512];
	json_t *m = NULL, *vm, *layers, *out, *base;
	char serr[DIAG_MAX];
	const char *made;
	int ch, depth = 0, r, lk;
	int64_t t0 = mono_ms();

	progname = "isopod-fork";
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'v': vmref = optarg; break;
		case 's': ref = optarg; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (!ref)
		die_usage(USAGE, "no stage: name it with --stage REF");
	/* The record is the channel: a claim on stdin is not read. */
	if (!vmref)
		die_usage(USAGE, "no VM: name it with --vm REF (standard input is not read)");
	if (vm_open(vmref, id, &vm, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	vmid = id;

	layers = json_array();
	if ((r = stage_find(ref, stid, sizeof stid, serr, sizeof serr)) < 0)
		die(exit_code_of(errno), "%s", serr);
	if (r) {
		if (stage_verify_chain(stid, serr, sizeof serr) < 0)
			die(EX_SYS, "%s", serr);
		m = stage_meta(stid);
		if (!m)
			die(EX_SYS, "unable to read stage %s:", stid);
		depth = (int)json_integer_value(json_object_get(m, "depth"));
		flavor = json_string_value(json_object_get(json_object_get(m, "base"), "flavor"));
		bsha = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));
		pathf(backing, sizeof backing, "%s/stages/%s/layer.qcow2", store_home(), stid);
	} else if (base_current(ref, sha, sizeof sha) == 0) {
		flavor = ref;
		bsha = sha;
		pathf(backing, sizeof backing, "%s/images/base-%s.img", store_home(), sha);
		if (access(backing, R_OK) < 0)
			die(EX_SYS, "base image %s:", backing);
	} else {
		die(EX_NOTFOUND, "no such stage or base flavor: %s", EXC(ref));
	}
	if (!flavor || !bsha)
		die(EX_SYS, "stage %s has no base in its meta.json", stid);

	/* Decide and record under the store lock: `stage rm` and `image rm`
	 * decide under it too, and refuse a stage a claimed VM's record names;
	 * the chain checked above must still be there once we hold it, and the
	 * record names it before the lock goes. */
	lk = store_lock();
	if (stid[0])
		chain_layers(stid, layers);
	else if (access(backing, R_OK) < 0)
		die(EX_NOTFOUND, "base image %s was removed while the fork was prepared", backing);
	pathf(disk, sizeof disk, "%s/vms/%s/disk.qcow2", store_home(), vmid);
	if (access(disk, F_OK) == 0)
		die(EX_CONFLICT, "vm %s already has a disk", vmid);
	made = new_disk(stid, backing, disk);
	test_pause("fork-created");
	base = json_pack("{s:s, s:s}", "flavor", flavor, "sha256", bsha);
	/* The VM record learns what it runs on: boot reads it, commit
	 * records it as the new stage's parent. */
	{
		json_t *set = json_pack("{s:o, s:O, s:O, s:i, s:s}", "stage",
					stid[0] ? json_string(stid) : json_null(), "base", base,
					"layers", layers, "depth", depth, "overlay", made);

		if (!set || vm_meta_update(vmid, NULL, set) < 0) {
			if (errno == ENOENT)
				die(EX_NOTFOUND, "no such vm: %s", vmid);
			die(EX_SYS, "unable to update the record of vm %s:", vmid);
		}
		json_decref(set);
	}
	close(lk);
	{
		char dir[PATH_MAX];

		pathf(dir, sizeof dir, "%s/vms/%s", store_home(), vmid);
		out = json_pack("{s:{s:s, s:O, s:s}}", "vm", "id", vmid, "name",
				orjnull(json_object_get(vm, "name")), "dir", dir);
		json_decref(vm);
	}
	if (!out)
		die(EX_SYS, "unable to build the output");
	json_object_set_new(out, "stage",
			    stid[0] ? json_pack("{s:s, s:O, s:O, s:i}", "id", stid, "name",
						orjnull(json_object_get(m, "name")), "label",
						orjnull(json_object_get(m, "label")), "depth", depth)
				    : json_null());
	json_object_set_new(out, "base", base);
	json_object_set_new(out, "layers", layers);
	json_object_set_new(out, "overlay", json_string(made));
	json_object_set_new(out, "fork_ms", json_integer(mono_ms() - t0));
	json_emit(out);
	return 0;
}
