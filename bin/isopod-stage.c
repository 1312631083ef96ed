/* isopod-stage - list, describe, remove and flatten stages.
 *
 *   ls              one JSON object per line, oldest first
 *   info REF        the stage, its chain (root first) and its dependents
 *   rm [-r] REF     refuses while dependents exist (naming each); -r
 *                   removes the dependents first, leaves first
 *   flatten REF --as LABEL
 *                   a new one-layer stage with identical content on the
 *                   same base: the remedy for the depth cap
 *   verify [--reseal] REF
 *                   re-hash every layer of the chain (and the base) and
 *                   compare with the seals; --reseal records the seal of
 *                   a layer that has none, or whose bytes are proven the
 *                   sealed ones but whose stat moved (a copied store) */
#include "proc.h"
#include "qjail.h"
#include "stage.h"
#include "util.h"
#include "vm.h"
#include "warm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-stage ls\n" \
	      "       isopod-stage info REF\n" \
	      "       isopod-stage rm [--recursive] REF\n" \
	      "       isopod-stage flatten REF --as LABEL\n" \
	      "       isopod-stage verify [--reseal] REF"

/* All complete stages, sorted by created then id. */
static json_t *all_stages(void)
{
	char dir[PATH_MAX];
	struct dirent **ents;
	json_t *a = json_array();
	int n;

	pathf(dir, sizeof dir, "%s/stages", store_home());
	n = scandir(dir, &ents, NULL, alphasort);
	/* no stages/ yet is no stage; one that cannot be read is not "none" */
	if (n < 0 && errno != ENOENT)
		die(EX_SYS, "unable to read %s:", dir);
	for (int i = 0; i < n; i++) {
		json_t *m = strncmp(ents[i]->d_name, "st-", 3) ? NULL : stage_meta(ents[i]->d_name);

		if (m)
			json_array_append_new(a, m);
		free(ents[i]);
	}
	if (n > 0)
		free(ents);
	/* insertion sort by "created" (small n; stable for equal times) */
	for (size_t i = 1; i < json_array_size(a); i++)
		for (size_t j = i; j > 0; j--) {
			const char *x = json_string_value(json_object_get(json_array_get(a, j - 1), "created"));
			const char *y = json_string_value(json_object_get(json_array_get(a, j), "created"));

			if (!x || !y || strcmp(x, y) <= 0)
				break;
			json_t *t = json_incref(json_array_get(a, j - 1));
			json_array_set(a, j - 1, json_array_get(a, j));
			json_array_set_new(a, j, t);
		}
	return a;
}

static json_t *children_of(json_t *all, const char *id)
{
	json_t *c = json_array(), *m;
	size_t i;

	json_array_foreach(all, i, m) {
		const char *p = json_string_value(json_object_get(m, "parent"));

		if (p && !strcmp(p, id))
			json_array_append_new(c, json_string(json_string_value(json_object_get(m, "id"))));
	}
	return c;
}

/* base_current of a stage, derived at read time for its whole chain: true
 * when every layer stands on its flavor's current base (a fresh run would
 * start from the same one), false when any ancestor is on a base its
 * flavor has since replaced (the stage keeps working on its own), null
 * when a flavor has no current base to compare with.  New reference. */
static json_t *chain_base_current(const char *id)
{
	char cur[64], sha_cur[80];
	int unknown = 0;

	snprintf(cur, sizeof cur, "%s", id);
	for (int hops = 0; cur[0] && hops < 64; hops++) {
		json_t *cm = stage_meta(cur);
		json_t *b = json_object_get(cm, "base");
		const char *fl = json_string_value(json_object_get(b, "flavor"));
		const char *sha = json_string_value(json_object_get(b, "sha256"));
		const char *par = json_string_value(json_object_get(cm, "parent"));

		if (!fl || !sha || base_current(fl, sha_cur, sizeof sha_cur) < 0) {
			unknown = 1;
		} else if (strcmp(sha_cur, sha)) {
			json_decref(cm);
			return json_false();
		}
		snprintf(cur, sizeof cur, "%.63s", par ? par : "");
		json_decref(cm);
	}
	return unknown ? json_null() : json_true();
}

static void cmd_ls(void)
{
	json_t *all = all_stages(), *m;
	size_t i;

	json_array_foreach(all, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));

		json_object_set_new(m, "dependents", children_of(all, id));
		/* A base rebuild never invalidates a stage (it keeps its base). */
		json_object_set_new(m, "base_current", id ? chain_base_current(id) : json_null());
		json_emit(m);
	}
}

static void cmd_info(const char *ref)
{
	char serr[DIAG_MAX];
	char id[64], cur[64];
	json_t *all = all_stages(), *m, *chain = json_array();

	if (stage_resolve(ref, id, sizeof id, serr, sizeof serr) < 0)
		die(exit_code_of(errno), "%s", serr);
	m = stage_meta(id);
	if (!m)
		die(EX_SYS, "unable to read stage %s:", id);
	snprintf(cur, sizeof cur, "%s", id);
	for (int hops = 0; cur[0] && hops < 64; hops++) {
		json_t *cm = stage_meta(cur);
		const char *p = cm ? json_string_value(json_object_get(cm, "parent")) : NULL;

		json_array_insert_new(chain, 0, json_string(cur));
		snprintf(cur, sizeof cur, "%.63s", p ? p : "");
		json_decref(cm);
	}
	json_object_set_new(m, "layers", chain);
	json_object_set_new(m, "dependents", children_of(all, id));
	json_object_set_new(m, "base_current", chain_base_current(id));
	json_emit(m);
}

static void remove_stage(const char *id)
{
	char p[PATH_MAX];

	pathf(p, sizeof p, "%s/stages/%s/meta.json", store_home(), id);
	/* meta.json goes first: a half-removed stage is no longer listed. */
	if (unlink(p) < 0 && errno != ENOENT)
		die(EX_SYS, "unable to remove %s:", p);
	pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id);
	if (unlink(p) < 0 && errno != ENOENT)
		die(EX_SYS, "unable to remove %s:", p);
	pathf(p, sizeof p, "%s/stages/%s", store_home(), id);
	if (rmdir(p) < 0)
		die(EX_SYS, "unable to remove %s:", p);
}

static void rm_tree(json_t *all, const char *id, json_t *removed)
{
	json_t *kids = children_of(all, id), *k;
	size_t i;

	json_array_foreach(kids, i, k)
		rm_tree(all, json_string_value(k), removed);
	json_decref(kids);
	remove_stage(id);
	json_array_append_new(removed, json_string(id));
}

/* The stages rm would remove: id and, recursive, its dependents. */
static void subtree(json_t *all, const char *id, json_t *out)
{
	json_t *kids = children_of(all, id), *k;
	size_t i;

	json_array_append_new(out, json_string(id));
	json_array_foreach(kids, i, k)
		subtree(all, json_string_value(k), out);
	json_decref(kids);
}

/* A VM that runs (or is about to boot: claimed) on a disk whose chain
 * holds one of these stages would lose its backing file: refuse, naming
 * it.  Under the store lock, like the removal.  Booting and running are
 * the lock's (vm_list's "running"), not the record's: isopod-boot takes
 * the VM's lock before it writes "booting" and builds the disk, and
 * vm_list reads the record before it tries the lock, so a record read as
 * booting or running whose lock is then free is of a VM that is gone (a
 * killed boot, a host crash that undid the running note: isopod-gc marks
 * it failed), and refusing for it would fail `stage rm` until gc ran. */
static void refuse_in_use(json_t *ids)
{
	char why[DIAG_MAX];
	json_t *vms = vm_list(NULL, why, sizeof why), *v, *l, *s, *x;
	size_t i, j, k;

	if (!vms)
		die(EX_SYS, "%s", why);
	json_array_foreach(vms, i, v) {
		const char *st = json_string_value(json_object_get(v, "state"));

		if (!json_is_true(json_object_get(v, "running")) && (!st || strcmp(st, "claimed")))
			continue;
		l = json_object_get(v, "layers");
		json_array_foreach(l, j, s)
			json_array_foreach(ids, k, x)
				if (json_equal(s, x))
					die(EX_CONFLICT, "stage %s is in use by vm %s (%s, %s); stop it "
					    "first (isopod vm stop %s), or remove its record",
					    json_string_value(x),
					    json_string_value(json_object_get(v, "id")),
					    json_string_value(json_object_get(v, "name")) ?: "unnamed",
					    json_is_true(json_object_get(v, "running")) ? "running" : st,
					    json_string_value(json_object_get(v, "id")));
	}
	json_decref(vms);
}

static void cmd_rm(const char *ref, int recursive)
{
	char serr[DIAG_MAX];
	char id[64];
	int lk = store_lock();
	json_t *all = all_stages(), *kids, *removed = json_array();

	if (stage_resolve(ref, id, sizeof id, serr, sizeof serr) < 0)
		die(exit_code_of(errno), "%s", serr);
	kids = children_of(all, id);
	if (json_array_size(kids) && !recursive) {
		size_t i, n = 0;
		json_t *k;
		char list[DIAG_MAX / 2] = "";

		json_array_foreach(kids, i, k)
			if (n < sizeof list)
				n += (size_t)snprintf(list + n, sizeof list - n, " %s",
						      json_string_value(k));
		die(EX_CONFLICT, "stage %s has dependents; remove them first or use --recursive:%s",
		    id, list);
	}
	{
		json_t *ids = json_array();

		subtree(all, id, ids);
		refuse_in_use(ids);
		json_decref(ids);
	}
	rm_tree(all, id, removed);
	close(lk);
	json_emit(json_pack("{s:o}", "removed", removed));
}

/* The copy of the chain into one layer (qa: qemu-img rebase -q ..., the
 * safe one), in qemu-img's jail (qjail_img): it reads the chain (rd) and
 * writes out alone.  With a progress descriptor, rebase -p instead: its
 * "(P/100%)\r" records on stdout come back on a pipe and become a line
 * "flatten P%" there at each tenth (0 % and 100 % always: qemu-img prints
 * both).  Its exit status, or -1 with err. */
static int flatten_copy(char **qa, const char *const *rd, size_t nrd, const char *out, char *err,
			size_t errsz)
{
	struct qimg qi;
	int pfd = progress_fd(), p[2], tenth = -1, r;
	char *rec = NULL;
	size_t cap = 0;
	double pct;
	FILE *f;

	struct qimg_req rq = { .av = qa, .reads = rd, .nreads = nrd, .chain = 1, .writes = out,
			       .outfd = PROC_NULL, .errfd = PROC_INHERIT };

	if (pfd < 0)
		return qjail_img(&rq, err, errsz);
	qa[2] = "-p";
	if (pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, errsz, "pipe: %s", strerror(errno));
		return -1;
	}
	rq.outfd = p[1];
	r = qjail_img_spawn(&qi, &rq, err, errsz) < 0 ? -1 : 0;
	close(p[1]);
	if (r < 0) {
		close(p[0]);
		return -1;
	}
	if (!(f = fdopen(p[0], "r"))) {
		snprintf(err, errsz, "fdopen: %s", strerror(errno));
		close(p[0]);
		qjail_img_wait(&qi, err + strlen(err), errsz - strlen(err));
		return -1;
	}
	while (getdelim(&rec, &cap, '\r', f) > 0)
		if (sscanf(rec, " (%lf/100%%)", &pct) == 1 && pct >= 0 && pct <= 100 &&
		    (int)pct / 10 > tenth) {
			tenth = (int)pct / 10;
			dprintf(pfd, "flatten %d%%\n", tenth * 10);
		}
	free(rec);
	fclose(f);
	return qjail_img_wait(&qi, err, errsz);
}

static void cmd_flatten(const char *ref, const char *label)
{
	char serr[DIAG_MAX];
	char id[64], hex[13], stid[64], tmp[PATH_MAX], dst[PATH_MAX], src[PATH_MAX], out[PATH_MAX],
		base[PATH_MAX], rel[PATH_MAX], holder[64], now[32], srcabs[PATH_MAX], baseabs[PATH_MAX];
	const char *why = label_invalid(label), *bsha;
	json_t *m, *sm;
	struct stat st;
	int64_t t0 = mono_ms();
	int lk;

	if (!why)
		why = label_reserved(label);
	if (why)
		die(EX_USAGE, "label %s: %s", EXC(label), why);
	if (stage_resolve(ref, id, sizeof id, serr, sizeof serr) < 0)
		die(exit_code_of(errno), "%s", serr);
	if (stage_verify_chain(id, serr, sizeof serr) < 0)
		die(EX_SYS, "%s", serr);
	m = stage_meta(id);
	if (!m)
		die(EX_SYS, "unable to read stage %s:", id);
	bsha = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));
	if (label_taken(label, holder, sizeof holder))
		die(EX_CONFLICT, "label %s is taken by stage %s", EXC(label), holder);
	if (rand_hex(hex, 6) < 0)
		die(EX_SYS, "unable to get random bytes:");
	snprintf(stid, sizeof stid, "st-%s", hex);
	pathf(tmp, sizeof tmp, "%s/stages/.tmp-%s.%ld", store_home(), stid, (long)getpid());
	pathf(dst, sizeof dst, "%s/stages/%s", store_home(), stid);
	pathf(src, sizeof src, "%s/stages/%s/layer.qcow2", store_home(), id);
	pathf(base, sizeof base, "%s/images/base-%s.img", store_home(), bsha ? bsha : "none");
	pathf(out, sizeof out, "%s/layer.qcow2", tmp);
	pathf(rel, sizeof rel, "../../images/base-%s.img", bsha ? bsha : "none");
	/* qemu-img takes a relative backing path as relative to the layer's
	 * own directory: both by their absolute paths (the layer's base is
	 * made relative again below) */
	if (!realpath(src, srcabs))
		die(EX_SYS, "unable to resolve %s:", src);
	if (!realpath(base, baseabs))
		die(EX_SYS, "unable to resolve %s:", base);
	/* qcow2 holds a backing path of at most 1023 bytes */
	if (strlen(srcabs) > 1023 || strlen(baseabs) > 1023)
		die(EX_USAGE, "the store's path is too long for a qcow2 backing file (1023 bytes at "
			      "most): %s", strlen(srcabs) > 1023 ? srcabs : baseabs);
	if (mkdir(tmp, 0755) < 0)
		die(EX_SYS, "unable to create %s:", tmp);
	{
		/* An empty layer over the chain, then a safe rebase onto the
		 * base: it writes every cluster where the chain reads other
		 * than the base, so the layer holds all that the chain's
		 * layers changed, and the same content on one layer.  (Not
		 * `convert -B base`: with a target backing file convert copies
		 * only what the source's top layer holds itself -- QEMU takes
		 * -B for the source's own backing file -- and every older
		 * layer's data not in a cluster the top one rewrote was lost.) */
		char *ca[] = {"qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", srcabs,
			      out, NULL};
		char *qa[] = {"qemu-img", "rebase", "-q", "-f", "qcow2", "-F", "raw", "-b", baseabs,
			      out, NULL};
		char *ra[] = {"qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "raw", "-b", rel,
			      out, NULL};

		/* Each in qemu-img's jail: the chain is what jailed QEMUs wrote,
		 * and out is what the jailed qemu-img before wrote. */
		const char *rd[] = { srcabs, baseabs };
		char ierr[DIAG_MAX] = "";
		int rc;

		struct qimg_req rq = { .av = ca, .reads = rd, .nreads = 2, .chain = 1, .writes = out,
				       .outfd = PROC_NULL, .errfd = PROC_INHERIT };

		if ((rc = qjail_img(&rq, ierr, sizeof ierr)) == 0)
			rc = flatten_copy(qa, rd, 2, out, ierr, sizeof ierr);
		/* -u: out's header alone (and out is the jailed qemu-img's) */
		rq.av = ra, rq.nreads = 0;
		if (rc == 0)
			rc = qjail_img(&rq, ierr, sizeof ierr);
		if (rc != 0 || chmod(out, 0444) < 0) {
			unlink(out);
			rmdir(tmp);
			die(EX_SYS, "flatten of stage %s failed (%s); nothing was created", id,
			    ierr[0] ? ierr : "no space left?");
		}
	}
	{
		/* The chain was read for as long as the copy took: it must
		 * still be the sealed one. */
		char msg[PATH_MAX + 512];

		if (stage_chain_sealed(id, msg, sizeof msg) < 0) {
			unlink(out);
			rmdir(tmp);
			die(EX_SYS, "%s; nothing was created", msg);
		}
	}
	/* The seal: after the last chmod. */
	if (stat(out, &st) < 0)
		die(EX_SYS, "unable to stat %s:", out);
	sm = json_pack("{s:s, s:s, s:s, s:n, s:i, s:O, s:I, s:s, s:s}", "id", stid,
		       "name", label, "label", label, "parent", "depth", 1, "base",
		       json_object_get(m, "base"), "size", (json_int_t)st.st_blocks * 512, "created",
		       iso_now(now, sizeof now), "flattened_from", id);
	/* how: stages flattened before this field existed may lack data
	 * (isopod-stage verify compares them with their chain) */
	json_object_set_new(sm, "flattened_by", json_string("rebase"));
	json_object_set_new(sm, "seal", seal_new(&st));
	json_object_set_new(sm, "flatten_ms", json_integer(mono_ms() - t0));
	pathf(src, sizeof src, "%s/meta.json", tmp);
	lk = store_lock();
	if (label_taken(label, holder, sizeof holder)) {
		unlink(out);
		rmdir(tmp);
		die(EX_CONFLICT, "label %s is taken by stage %s", EXC(label), holder);
	}
	if (json_write_atomic(src, sm) < 0 || rename(tmp, dst) < 0) {
		int e = errno;

		unlink(src);
		unlink(out);
		rmdir(tmp);
		errno = e;
		die(EX_SYS, "unable to complete the flattened stage (nothing was created):");
	}
	close(lk);
	if (stage_seal_spawn(stid) < 0)
		warn("unable to start the background hash of stage %s: %s; `isopod stage verify %s` "
		     "records it", stid, strerror(errno), stid);
	json_emit(json_pack("{s:o}", "stage", sm));
}

/* Seal a layer anew with the sha256 just computed, when the caller has
 * decided its bytes may be sealed.  fd is the layer, `was` its stat when
 * hashed.  The seal is taken after the chmod (a chmod moves ctime). */
static const char *reseal(const char *id, json_t *old, int fd, const struct stat *was,
			  const char *sha, char *why, size_t wsz)
{
	char now[32];
	struct stat st;
	json_t *ns;
	int r;

	if ((was->st_mode & 0222) && fchmod(fd, 0444) < 0)
		die(EX_SYS, "unable to make the layer of stage %s read-only:", id);
	if (fstat(fd, &st) < 0)
		die(EX_SYS, "unable to stat the layer of stage %s:", id);
	if (st.st_ino != was->st_ino || st.st_size != was->st_size ||
	    st.st_mtim.tv_sec != was->st_mtim.tv_sec || st.st_mtim.tv_nsec != was->st_mtim.tv_nsec) {
		snprintf(why, wsz, "the layer was written while it was verified");
		return "mismatch";
	}
	ns = seal_new(&st);
	json_object_set_new(ns, "hash", json_string("done"));
	json_object_set_new(ns, "sha256", json_string(sha));
	json_object_set_new(ns, "hashed", json_string(iso_now(now, sizeof now)));
	json_object_set_new(ns, "resealed", json_string(now));
	r = seal_store(id, old, ns);
	json_decref(ns);
	if (r < 0)
		die(EX_SYS, "unable to record the seal of stage %s:", id);
	if (r == 0) {
		snprintf(why, wsz, "the stage was removed or resealed meanwhile");
		return "error";
	}
	why[0] = 0;
	return "resealed";
}

/* Re-hash one layer and judge it against its seal (see isopod-stage(1) for
 * each status).  Sets *bad unless the layer is as sealed. */
static json_t *verify_one(const char *id, int want_reseal, int *bad)
{
	char p[PATH_MAX], sha[65] = "", why[512] = "", now[32];
	json_t *m = stage_meta(id), *seal, *r;
	const char *rec, *hs, *status;
	struct stat st;
	int fd = -1, hr;

	pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id);
	seal = json_object_get(m, "seal");
	rec = json_string_value(json_object_get(seal, "sha256"));
	hs = json_string_value(json_object_get(seal, "hash"));
	if (!m) {
		status = "missing";
		snprintf(why, sizeof why, "its meta.json is missing or unreadable");
	} else if ((fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		status = "missing";
		snprintf(why, sizeof why, "%s", strerror(errno));
	} else if ((hr = layer_hash(fd, sha, &st)) < 0) {
		status = "error";
		snprintf(why, sizeof why, "read: %s", strerror(errno));
	} else if (hr > 0) {
		status = "mismatch";
		snprintf(why, sizeof why, "the layer was written while it was verified");
	} else if (!json_is_object(seal)) {
		/* Trust on first use, and only when asked. */
		status = "unsealed";
		snprintf(why, sizeof why, "no seal (committed before isopod sealed layers); "
			 "--reseal seals it as it is now");
		if (want_reseal)
			status = reseal(id, NULL, fd, &st, sha, why, sizeof why);
	} else if (hs && !strcmp(hs, "changed")) {
		/* Known to have changed, and the committed bytes unknown:
		 * nothing may be resealed. */
		status = "mismatch";
		snprintf(why, sizeof why, "it changed after it was committed, before it was hashed (%s)",
			 json_string_value(json_object_get(seal, "hash_error")) ?: "changed");
	} else if (rec && strcmp(rec, sha)) {
		status = "mismatch";
		snprintf(why, sizeof why, "its bytes no longer hash to the sealed sha256");
	} else if (!seal_matches(seal, &st, why, sizeof why)) {
		if (rec) {
			/* The very bytes sealed, in a file that moved (a copied or
			 * restored store): the seal's stat may follow. */
			status = "moved";
			if (want_reseal)
				status = reseal(id, seal, fd, &st, sha, why, sizeof why);
		} else {
			status = "mismatch";
			snprintf(why + strlen(why), sizeof why - strlen(why),
				 "; it changed after it was sealed, before it was hashed");
		}
	} else {
		status = "ok";
		why[0] = 0;
		if (!rec) {
			/* Unchanged since the seal, as the stat proves: finish
			 * the background hash's work. */
			json_t *ns = json_deep_copy(seal);

			json_object_set_new(ns, "hash", json_string("done"));
			json_object_set_new(ns, "sha256", json_string(sha));
			json_object_set_new(ns, "hashed", json_string(iso_now(now, sizeof now)));
			json_object_del(ns, "hash_error");
			if (seal_store(id, seal, ns) < 0)
				die(EX_SYS, "unable to record the seal of stage %s:", id);
			json_decref(ns);
		}
	}
	if (fd >= 0)
		close(fd);
	if (strcmp(status, "ok") && strcmp(status, "resealed")) {
		*bad = 1;
	} else {
		rec = sha; /* what the seal says now */
		hs = "done";
	}
	r = json_pack("{s:s, s:O?, s:s, s:s, s:s?, s:s?, s:s?}", "stage", id, "label",
		      json_object_get(m, "label"), "layer", p, "status", status, "sha256",
		      sha[0] ? sha : NULL, "sealed_sha256", rec, "hash", hs);
	if (why[0])
		json_object_set_new(r, "why", json_string(why));
	json_decref(m);
	return r;
}

/* A flattened stage against the chain it was flattened from, while that
 * chain exists: `qemu-img compare` of the two (every guest-visible byte).
 * Flatten before 23ffd0a (qemu-img convert -B) kept only the top layer's
 * clusters: those stages read the older layers' data as the base's, and
 * their seals sealed the wrong bytes, so only this comparison finds them.
 * New reference: {"stage","status":identical|differs|gone|unknown|error,
 * "why"?}; *bad set when it differs or cannot be compared. */
static json_t *verify_flat(json_t *m, const char *id, int *bad)
{
	const char *src = json_string_value(json_object_get(m, "flattened_from"));
	const char *by = json_string_value(json_object_get(m, "flattened_by"));
	char fl[PATH_MAX], sl[PATH_MAX], why[DIAG_MAX] = "", out[256] = "", *nl;
	const char *status;
	json_t *sm, *r;

	if (!src)
		return NULL;
	pathf(fl, sizeof fl, "%s/stages/%s/layer.qcow2", store_home(), id);
	pathf(sl, sizeof sl, "%s/stages/%s/layer.qcow2", store_home(), src);
	sm = stage_meta(src);
	if (!sm && errno == ENOENT) {
		/* Nothing to compare with.  A stage made by the fixed flatten
		 * says so; an older one may lack data, and nothing can tell. */
		status = by ? "gone" : "unknown";
		if (!by)
			snprintf(why, sizeof why, "flattened before isopod kept every layer's data "
				 "(flatten before 23ffd0a lost the older layers' clusters) and stage %s, "
				 "its chain, is gone: it may lack data; nothing can tell", src);
	} else if (!sm || stage_verify_chain(src, why, sizeof why) < 0) {
		status = "error";
		if (!why[0])
			snprintf(why, sizeof why, "unable to read stage %s: %s", src, strerror(errno));
		*bad = 1;
	} else {
		/* Both chains are what jailed QEMUs (and qemu-imgs) wrote. */
		char *ca[] = {"qemu-img", "compare", "-f", "qcow2", "-F", "qcow2", fl, sl, NULL};
		const char *rd[] = { fl, sl };
		char ierr[DIAG_MAX] = "";
		int rc;

		rc = qjail_img_capture(&(struct qimg_req){ .av = ca, .reads = rd, .nreads = 2,
							   .chain = 1, .errfd = PROC_PIPE },
				       out, sizeof out, ierr, sizeof ierr);
		if (rc < 0)
			snprintf(out, sizeof out, "%s", ierr);
		if ((nl = strchr(out, '\n')))
			*nl = 0;
		if (rc == 0) {
			status = "identical";
		} else if (rc == 1) {
			status = "differs";
			snprintf(why, sizeof why, "it reads other than stage %s, the chain it was flattened "
				 "from (%s): it lost data (flatten before 23ffd0a); flatten %s again and "
				 "remove this one", src, out, src);
			*bad = 1;
		} else {
			status = "error";
			snprintf(why, sizeof why, "qemu-img compare failed (exit %d): %s", rc,
				 out[0] ? out : "no output");
			*bad = 1;
		}
	}
	json_decref(sm);
	r = json_pack("{s:s, s:s}", "stage", src, "status", status);
	if (why[0])
		json_object_set_new(r, "why", json_string(why));
	return r;
}

static void cmd_verify(const char *ref, int want_reseal)
{
	char serr[DIAG_MAX];
	char id[64], cur[64], p[PATH_MAX], sha[65] = "", bsha[65] = "";
	json_t *layers = json_array(), *base, *m, *fr, *r;
	const char *status = "ok";
	int bad = 0, fd;

	if (stage_resolve(ref, id, sizeof id, serr, sizeof serr) < 0)
		die(exit_code_of(errno), "%s", serr);
	snprintf(cur, sizeof cur, "%s", id);
	for (int hops = 0; cur[0]; hops++) {
		json_t *cm = stage_meta(cur);
		const char *par = json_string_value(json_object_get(cm, "parent"));
		const char *b = json_string_value(json_object_get(json_object_get(cm, "base"), "sha256"));

		if (hops >= 64)
			die(EX_SYS, "stage %s: the chain is longer than 64 (a loop?)", id);
		json_array_insert_new(layers, 0, verify_one(cur, want_reseal, &bad));
		if (b && warm_key_valid(b))
			snprintf(bsha, sizeof bsha, "%s", b);
		snprintf(cur, sizeof cur, "%.63s", par ? par : "");
		json_decref(cm);
	}
	/* The base is content-addressed: its name is its sha256. */
	pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), bsha[0] ? bsha : "none");
	if ((fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0) {
		status = "missing";
	} else {
		if (sha256_fd(fd, sha) < 0)
			status = "error";
		else if (strcmp(sha, bsha))
			status = "mismatch";
		close(fd);
	}
	if (strcmp(status, "ok"))
		bad = 1;
	base = json_pack("{s:s, s:s, s:s?, s:s}", "image", p, "status", status, "sha256",
			 sha[0] ? sha : NULL, "named_sha256", bsha);
	m = stage_meta(id);
	fr = m ? verify_flat(m, id, &bad) : NULL;
	json_decref(m);
	if (fr && !strcmp(json_string_value(json_object_get(fr, "status")), "unknown"))
		warn("stage %s: %s", id, json_string_value(json_object_get(fr, "why")));
	r = json_pack("{s:s, s:b, s:o, s:o}", "stage", id, "ok", !bad, "layers", layers, "base", base);
	if (fr)
		json_object_set_new(r, "flattened_from", fr);
	json_emit(r);
	if (bad)
		exit(EX_GUEST);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"recursive", no_argument, 0, 'r'},
					   {"as", required_argument, 0, 'a'},
					   {"reseal", no_argument, 0, 'R'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	const char *as = NULL, *verb;
	int ch, recursive = 0, want_reseal = 0;

	progname = "isopod-stage";
	if (argc < 2)
		die_usage(USAGE, "no command given");
	verb = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "hr", lo, NULL)) != -1) {
		switch (ch) {
		case 'r': recursive = 1; break;
		case 'a': as = optarg; break;
		case 'R': want_reseal = 1; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help")) {
		puts("usage: " USAGE);
		return 0;
	}
	if (want_reseal && strcmp(verb, "verify"))
		die_usage(USAGE, "--reseal is verify's");
	if (!strcmp(verb, "ls") && optind == argc)
		cmd_ls();
	else if (!strcmp(verb, "info") && argc - optind == 1)
		cmd_info(argv[optind]);
	else if (!strcmp(verb, "rm") && argc - optind == 1)
		cmd_rm(argv[optind], recursive);
	else if (!strcmp(verb, "flatten") && argc - optind == 1 && as)
		cmd_flatten(argv[optind], as);
	else if (!strcmp(verb, "verify") && argc - optind == 1)
		cmd_verify(argv[optind], want_reseal);
	else if (strcmp(verb, "ls") && strcmp(verb, "info") && strcmp(verb, "rm") &&
		 strcmp(verb, "flatten") && strcmp(verb, "verify"))
		die_usage(USAGE, "unknown command %s", EXC(verb));
	else
		die_usage(USAGE, "%s: %s", verb, !strcmp(verb, "ls") ? "takes no operand" :
			  !strcmp(verb, "flatten") ? "takes REF and --as LABEL" : "takes one REF");
	return 0;
}
