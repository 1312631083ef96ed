/* isopod-provenance - sign where a run's copied-out files came from, and
 * check such a signature.
 *
 *   sign     the run's result (copied_out: each file's sha256) and its VM
 *            record (kernel, base, stage layers, network, accelerator) ->
 *            a DSSE envelope around an in-toto Statement v1 whose
 *            predicate is SLSA provenance v1, signed with the host's
 *            attestation key (isopod-attest's, lib/attest.c)
 *   verify   a file and an envelope: the signature against the host's (or
 *            a given) public key, the file's sha256 one of the subjects,
 *            and, when asked, the chain it was made on the one a stage has
 *
 * The Statement's reader is lib/prov.c; the envelope lib/dsse.c.  This is
 * the command line, what is read from the store, and the exit statuses.
 * man isopod-provenance. */
#include "attest.h"
#include "dsse.h"
#include "execio.h"
#include "execopt.h"
#include "prov.h"
#include "provtree.h"
#include "stage.h"
#include "tree.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define USAGE "isopod-provenance sign [--dir DIR] [--attestation FILE] [--check] --vm ID " \
	      "--result FILE [--commit FILE] [--start-ms N] [--stage REF] [--env-name NAME]... " \
	      "[--cwd DIR] [--stdin-file FILE|--stdin-pipe] " \
	      "-o FILE -- CMD [ARG]... | " \
	      "isopod-provenance verify [--dir DIR] [--key FILE] [--stage REF] [--allow-failed] " \
	      "[--require-attestation] [--kernel FILE|SHA256] FILE PROVENANCE"

/* The attestation isopod-runner reads by default: the one in force. */
#define ATTESTATION_DEFAULT "/etc/isopod/attestation.json"

struct opts {
	const char *dir, *att, *vm, *result, *out, *stage, *cwd, *key, *commit, *stdin_file;
	const char *kernel; /* verify --kernel: a vmlinux file or its sha256 */
	long long start_ms;
	int have_start, check, stdin_pipe, allow_failed, require_att;
	json_t *env_names;
	char **cmd;
	int ncmd;
};

/* lib/attest.c's classes -> the exit-status table (as isopod-attest). */
__attribute__((noreturn)) static void fail(int cls, const char *why)
{
	switch (cls) {
	case ATTEST_ENOTFOUND: die(EX_NOTFOUND, "%s", why);
	case ATTEST_EINPUT: die(EX_USAGE, "%s", why);
	case ATTEST_EREFUSED: die(EX_GUEST, "%s", why);
	case ATTEST_ECONFLICT: die(EX_CONFLICT, "%s", why);
	default: die(EX_SYS, "%s", why);
	}
}

static json_t *need(json_t *j)
{
	if (!j)
		die(EX_SYS, "out of memory");
	return j;
}

static json_t *rd(const char *name, const char *sha)
{
	return need(json_pack("{s:s, s:{s:s}}", "name", name, "digest", "sha256", sha));
}

/* ---- what the store says a chain is ------------------------------------ */

/* The sha256 of stage id's layer: its seal's when the hasher finished and
 * the file still matches the seal (one fstat: a write moves its ctime),
 * else hashed now, the file checked against the seal after.  *meta gets the
 * stage's meta.json. */
static void layer_digest(const char *id, char sha[65], json_t **meta)
{
	char p[PATH_MAX], msg[DIAG_MAX], why[256];
	json_t *m = stage_meta(id), *seal;
	struct stat st;
	int fd, r;

	if (!m)
		die(EX_SYS, "stage %s is broken: its meta.json is missing or unreadable", id);
	pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		die(EX_SYS, "stage %s: unable to open its layer %s:", id, p);
	if (layer_sealed(id, m, fd, p, msg, sizeof msg) < 0)
		die(EX_SYS, "%s", msg);
	seal = json_object_get(m, "seal");
	if (!strcmp(json_string_value(json_object_get(seal, "hash")) ?: "", "done") &&
	    hex64_ok(json_string_value(json_object_get(seal, "sha256")) ?: "")) {
		snprintf(sha, 65, "%s", json_string_value(json_object_get(seal, "sha256")));
	} else if ((r = layer_hash(fd, sha, &st)) != 0 || !seal_matches(seal, &st, why, sizeof why)) {
		die(EX_SYS, "stage %s: unable to hash its layer %s%s", id, p,
		    r < 0 ? ": read error" : ": it changed while being read");
	}
	close(fd);
	*meta = m;
}

/* The chain of stage id, root first: [{stage, sha256, label, depth}]. */
static json_t *stage_layers(const char *id)
{
	json_t *layers = need(json_array()), *m;
	char cur[64], sha[65];
	int hops;

	snprintf(cur, sizeof cur, "%.63s", id);
	for (hops = 0; hops <= 64; hops++) {
		const char *parent;

		layer_digest(cur, sha, &m);
		json_array_insert_new(layers, 0, need(json_pack("{s:s, s:s, s:O?, s:O?}", "stage", cur,
			"sha256", sha, "label", json_object_get(m, "label"), "depth",
			json_object_get(m, "depth"))));
		parent = json_string_value(json_object_get(m, "parent"));
		if (!parent) {
			json_decref(m);
			return layers;
		}
		snprintf(cur, sizeof cur, "%.63s", parent);
		json_decref(m);
	}
	die(EX_SYS, "stage %s: the chain is longer than 64 (a loop?)", id);
}

/* The chain REF names now ({base, layers}): a stage's, or a base flavor's
 * current image alone. */
static json_t *chain_of(const char *ref)
{
	char id[64], sha[72], why[DIAG_MAX];
	json_t *m, *out;
	int r;

	if ((r = stage_find(ref, id, sizeof id, why, sizeof why)) < 0)
		die(exit_code_of(errno), "%s", why);
	if (r) {
		if (!(m = stage_meta(id)))
			die(EX_SYS, "unable to read stage %s:", id);
		out = need(json_pack("{s:O, s:o}", "base", json_object_get(m, "base"), "layers",
				     stage_layers(id)));
		json_decref(m);
		return out;
	}
	if (base_current(ref, sha, sizeof sha) == 0)
		return need(json_pack("{s:{s:s, s:s}, s:[]}", "base", "flavor", ref, "sha256", sha,
				      "layers"));
	die(EX_NOTFOUND, "no such stage or base flavor: %s", EXC(ref));
}

/* ---- sign -------------------------------------------------------------- */

/* The tree's symlinks (review L5): a symlink has no bytes, so no digest
 * to be a subject by (in-toto: every subject has one, and a digest of
 * its target would let a file of those bytes verify as the link); each
 * is checked again on the host (still a symlink, the same target, below
 * the top) and recorded among runDetails.byproducts as a
 * ResourceDescriptor: name <top>/<path> as a file's, content its target
 * (base64: what readlink gives), mediaType inode/symlink (review LOW-2:
 * the spec's MIME type of the resource, shared-mime-info's name for a
 * symlink, so a generic reader does not take the content for a file's
 * bytes), annotations the guest's path and the target as text.  A
 * listed tree without the list (an older exec) is refused: its symlinks
 * would be left out unsaid. */
static void tree_links(json_t *e, int dfd, const char *host, const char *top,
		       const char *guest, json_t *links)
{
	json_t *ls = json_object_get(e, "symlinks"), *l;
	size_t i;

	if (!json_is_array(ls))
		die(EX_USAGE, "--result: copied_out %s: a tree's files listed without its symlinks "
		    "(a result of an older isopod-exec?): nothing is signed", EXC(guest));
	json_array_foreach(ls, i, l) {
		const char *p = json_string_value(json_object_get(l, "path"));
		const char *to = json_string_value(json_object_get(l, "target"));
		const char *sl = p ? strrchr(p, '/') : NULL;
		struct open_how how = { .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
						   RESOLVE_NO_MAGICLINKS };
		char parent[PATH_MAX], now[PATH_MAX], name[2 * PATH_MAX], gp[2 * PATH_MAX];
		char b64[sodium_base64_ENCODED_LEN(PATH_MAX, sodium_base64_VARIANT_ORIGINAL)];
		ssize_t n = -1;
		int pfd, er;

		if (!p || !*p || *p == '/' || !to || !*to || strlen(p) >= PATH_MAX ||
		    strlen(to) >= PATH_MAX)
			die(EX_USAGE, "--result: copied_out %s: symlinks[%zu] has no relative path or "
			    "no target", EXC(guest), i);
		snprintf(parent, sizeof parent, "%.*s", sl ? (int)(sl - p) : 1, sl ? p : ".");
		pfd = (int)syscall(SYS_openat2, dfd, parent, &how, sizeof how);
		if (pfd >= 0) {
			n = readlinkat(pfd, sl ? sl + 1 : p, now, sizeof now - 1);
			close(pfd);
		}
		/* as a file's (tree_subjects): gone is 101; not a symlink
		 * (EINVAL), or a symlink or a way out on the path (ELOOP,
		 * EXDEV), or a directory on it no longer one (ENOTDIR), is
		 * changed; anything else (EACCES, EMFILE) is the host's */
		er = n < 0 ? errno : 0;
		if (n < 0 && er != EINVAL && er != ELOOP && er != EXDEV && er != ENOTDIR)
			die(er == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read the copied-out symlink "
			    "%s/%s (nothing signed): %s", host, EXC(p), strerror(er));
		if (n < 0 || (size_t)n != strlen(to) || memcmp(now, to, (size_t)n))
			die(EX_GUEST, "the copied-out symlink %s/%s changed since the run copied it "
			    "(to %s; now %s): not signed", host, EXC(p), EXC(to),
			    er == EINVAL ? "not a symlink" : n < 0 ? strerror(er) : "another target");
		snprintf(name, sizeof name, "%s/%s", top, p);
		snprintf(gp, sizeof gp, "%s/%s", guest, p);
		sodium_bin2base64(b64, sizeof b64, (const unsigned char *)to, strlen(to),
				  sodium_base64_VARIANT_ORIGINAL);
		json_array_append_new(links, need(json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "name",
			name, "content", b64, "mediaType", "inode/symlink", "annotations",
			"isopod_guest", gp, "isopod_symlink", to)));
	}
}

/* A directory copied out: one subject per regular file it listed (exec
 * hashed each as its bytes arrived, lib/exectree.c), each checked again
 * in the tree on the host as a copied-out file is, named <top>/<path>
 * (top: the tree's own name on the host, as a file's subject is its
 * name).  Every file is named or nothing is signed: a tree whose files
 * were not listed (past exec's bounds) is refused, as a directory
 * copy-in is, rather than signed in part. */
static void tree_subjects(json_t *e, const char *host, const char *guest, json_t *list,
			  json_t *links)
{
	json_t *files = json_object_get(e, "files"), *f;
	const char *top = strrchr(host, '/') ? strrchr(host, '/') + 1 : host;
	size_t i;
	int dfd;

	if (!json_is_array(files))
		die(EX_GUEST, "copy-out %s is a directory whose files were not listed (not run for "
		    "provenance, more than %d, one not UTF-8, or past the result's bounds: %u bytes "
		    "of lists, %llu MiB of holes): it cannot be signed file by file, so nothing is "
		    "signed; copy out an archive of it", EXC(guest), EXEC_TREE_FILES_MAX,
		    EXEC_TREE_JSON_MAX, (unsigned long long)(EXEC_TREE_HOLES_MAX >> 20));
	if ((dfd = open(host, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to open the copied-out directory %s:",
		    host);
	json_array_foreach(files, i, f) {
		const char *p = json_string_value(json_object_get(f, "path"));
		const char *sha = json_string_value(json_object_get(f, "sha256"));
		/* below the tree's top only, never through a symlink (the
		 * guest's are copied as symlinks; a file is never reached
		 * through one) */
		struct open_how how = { .flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
					.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
						   RESOLVE_NO_MAGICLINKS };
		char now[65], name[2 * PATH_MAX], gp[2 * PATH_MAX];
		struct stat st;
		int fd;

		if (!p || !*p || *p == '/' || !sha || !hex64_ok(sha))
			die(EX_USAGE, "--result: copied_out %s: files[%zu] has no relative path or no "
			    "sha256 of 64 hex digits", EXC(guest), i);
		fd = (int)syscall(SYS_openat2, dfd, p, &how, sizeof how);
		/* ELOOP / EXDEV: a symlink or a way out on the path; ENOTDIR:
		 * a directory on it is no longer one; anything else (EACCES,
		 * EMFILE) is the host's: each said as it is */
		if (fd < 0) {
			int er = errno, moved = er == ELOOP || er == EXDEV || er == ENOTDIR;

			die(er == ENOENT ? EX_NOTFOUND : moved ? EX_GUEST : EX_SYS, "unable to open the "
			    "copied-out %s/%s (nothing signed%s): %s", host, EXC(p), er == ENOTDIR ? "" :
			    moved ? "; not followed through a symlink" : "", strerror(er));
		}
		if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
			die(EX_GUEST, "the copied-out %s/%s is no longer a regular file: not signed",
			    host, EXC(p));
		if (sha256_fd(fd, now) < 0)
			die(EX_SYS, "unable to read the copied-out %s/%s:", host, EXC(p));
		close(fd);
		if (strcmp(now, sha))
			die(EX_GUEST, "the copied-out %s/%s changed since the run copied it (sha256 "
			    "%.16s…, now %.16s…): not signed", host, EXC(p), sha, now);
		snprintf(name, sizeof name, "%s/%s", top, p);
		snprintf(gp, sizeof gp, "%s/%s", guest, p);
		json_array_append_new(list, need(json_pack("{s:s, s:{s:s}, s:{s:s, s:O?}}", "name",
			name, "digest", "sha256", sha, "annotations", "isopod_guest", gp,
			"isopod_bytes", json_object_get(f, "bytes"))));
	}
	tree_links(e, dfd, host, top, guest, links);
	close(dfd);
}

/* The subjects: each copied-out file that arrived, checked again now (the
 * digest signed is the bytes on the host, not only what the run said);
 * each regular file of a directory copied out. */
static json_t *subjects(json_t *res, json_t *outs, json_t *links)
{
	json_t *list = need(json_array()), *e, *co = json_object_get(res, "copied_out");
	size_t i;

	json_array_foreach(co, i, e) {
		const char *host = json_string_value(json_object_get(e, "host"));
		const char *guest = json_string_value(json_object_get(e, "guest"));
		const char *sha = json_string_value(json_object_get(e, "sha256")), *base;
		char now[65];

		if (!host || !guest)
			die(EX_USAGE, "--result: copied_out entry %zu has no host or guest", i);
		json_array_append_new(outs, need(json_pack("{s:s}", "guest", guest)));
		if (!json_object_get(e, "error") && json_is_true(json_object_get(e, "tree"))) {
			tree_subjects(e, host, guest, list, links);
			continue;
		}
		if (json_object_get(e, "error") || !sha) {
			warn("copy-out %s was not copied: not a subject", EXC(guest));
			continue;
		}
		if (!hex64_ok(sha))
			die(EX_USAGE, "--result: copied_out entry %zu: sha256 is not 64 hex digits", i);
		if (sha256_file(host, now) < 0)
			die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read the copied-out %s:", host);
		if (strcmp(now, sha))
			die(EX_GUEST, "the copied-out %s changed since the run copied it (sha256 %.16s…, now %.16s…): not signed",
			    host, sha, now);
		base = strrchr(host, '/') ? strrchr(host, '/') + 1 : host;
		json_array_append_new(list, need(json_pack("{s:s, s:{s:s}, s:{s:s, s:O?}}", "name", base,
			"digest", "sha256", sha, "annotations", "isopod_guest", guest, "isopod_bytes",
			json_object_get(e, "bytes"))));
	}
	return list;
}

/* Each name once among the subjects and the trees' symlinks (byproducts
 * by the same <top>/<path>), and none under stage/, the commit's own
 * (commit_subject, added after): a tree's names are <top>/<path>, the
 * path the guest's, so two copy-outs to the same name in two directories,
 * or a tree named stage, could name two artifacts alike (a file one
 * tree's, a symlink the other's: review LOW-1), or pass one for a
 * committed stage.  Nothing is signed then. */
static void names_distinct(json_t *subj, json_t *links)
{
	json_t *seen = need(json_object()), *e, *was;
	json_t *lists[] = { subj, links };
	size_t i;

	for (int k = 0; k < 2; k++)
		json_array_foreach(lists[k], i, e) {
			const char *n = json_string_value(json_object_get(e, "name"));

			if (!strncmp(n, "stage/", 6))
				die(EX_USAGE, "a copy-out's %s would be named %s: stage/ names a committed "
				    "stage; nothing is signed (copy the directory out under another name)",
				    k ? "symlink" : "subject", EXC(n));
			if ((was = json_object_get(seen, n)))
				die(EX_USAGE, "%s would be named %s (copy-outs to one name in two "
				    "directories): nothing is signed; copy them out under distinct names",
				    !k ? "two subjects" : json_is_true(was) ? "a subject and a symlink" :
				    "two symlinks", EXC(n));
			json_object_set_new(seen, n, json_boolean(!k));
		}
	json_decref(seen);
}

/* The stage the run committed (isopod-commit's output): its layer, by the
 * digest a fork of it will stand on. */
static void commit_subject(const char *path, json_t *list)
{
	json_t *c = json_load_path(path), *m;
	const char *id = json_string_value(json_object_get(json_object_get(c, "stage"), "id"));
	char name[80], sha[65];

	if (!c)
		die(errno == ENOENT ? EX_NOTFOUND : errno == EINVAL || errno == EFBIG ? EX_USAGE : EX_SYS,
		    "unable to read the commit %s:", path);
	if (!id || !id_stage_ok(id))
		die(EX_USAGE, "--commit %s: no stage.id", path);
	layer_digest(id, sha, &m);
	snprintf(name, sizeof name, "stage/%s", id);
	json_array_append_new(list, need(json_pack("{s:s, s:{s:s}, s:{s:O?, s:O?}}", "name", name,
		"digest", "sha256", sha, "annotations", "isopod_label", json_object_get(m, "label"),
		"isopod_depth", json_object_get(m, "depth"))));
	json_decref(m);
	json_decref(c);
}

/* The kernel and initramfs of the record's kernel (kernels/<ksha>/meta.json,
 * checked against ksha = sha256 of "<vmlinux>\n<initramfs>\n"). */
static void kernel_deps(json_t *rec, json_t *deps)
{
	const char *k = json_string_value(json_object_get(json_object_get(rec, "kernel"), "sha256"));
	const char *v, *i;
	char p[PATH_MAX], text[160], back[65];
	json_t *m;

	if (!k || !hex64_ok(k))
		die(EX_SYS, "the VM's record names no kernel");
	pathf(p, sizeof p, "%s/kernels/%s/meta.json", store_home(), k);
	if (!(m = json_load_path(p)))
		die(EX_SYS, "unable to read %s:", p);
	v = json_string_value(json_object_get(json_object_get(m, "vmlinux"), "sha256"));
	i = json_string_value(json_object_get(json_object_get(m, "initramfs"), "sha256"));
	if (!v || !i || !hex64_ok(v) || !hex64_ok(i))
		die(EX_SYS, "%s names no vmlinux or initramfs sha256", p);
	snprintf(text, sizeof text, "%s\n%s\n", v, i);
	sha256_hex(text, strlen(text), back);
	if (strcmp(back, k))
		die(EX_SYS, "%s does not describe kernel %.16s… (its files hash to %.16s…)", p, k, back);
	json_array_append_new(deps, rd(PROV_DEP_VMLINUX, v));
	json_array_append_new(deps, rd(PROV_DEP_INITRAMFS, i));
	json_decref(m);
}

/* The base image and the stage layers the VM's disk stood on. */
static void chain_deps(json_t *rec, json_t *deps)
{
	json_t *base = json_object_get(rec, "base"), *ids = json_object_get(rec, "layers"), *id;
	const char *fl = json_string_value(json_object_get(base, "flavor"));
	const char *sha = json_string_value(json_object_get(base, "sha256"));
	char name[160], s[65];
	size_t i;

	if (!fl || !sha || !hex64_ok(sha))
		die(EX_SYS, "the VM's record names no base image");
	snprintf(name, sizeof name, "image/%.100s", fl);
	json_array_append_new(deps, need(json_pack("{s:s, s:{s:s}}", "name", name, "digest",
						   "sha256", sha)));
	json_array_foreach(ids, i, id) {
		json_t *m;

		if (!json_is_string(id) || !id_stage_ok(json_string_value(id)))
			die(EX_SYS, "the VM's record: layers[%zu] is not a stage id", i);
		layer_digest(json_string_value(id), s, &m);
		snprintf(name, sizeof name, "stage/%s", json_string_value(id));
		json_array_append_new(deps, need(json_pack("{s:s, s:{s:s}, s:{s:O?, s:O?}}", "name", name,
			"digest", "sha256", s, "annotations", "isopod_label", json_object_get(m, "label"),
			"isopod_depth", json_object_get(m, "depth"))));
		json_decref(m);
	}
}

/* The host attestation in force: the file (its digest), and whether it
 * verifies now against this host (isopod-attest verify's verdict).  Read
 * once: the bytes hashed are the bytes verified (a file replaced between
 * a hash and a second read would pair one digest with another's verdict). */
static json_t *attestation(const struct opts *o)
{
	const char *e = getenv("ISOPOD_ATTESTATION");
	const char *p = o->att ? o->att : e && *e ? e : ATTESTATION_DEFAULT;
	char sha[65], why[DIAG_MAX], *buf;
	struct attest_opts ao = { .dir = o->dir, .envelope = p,
				  .max_validity_s = ATTEST_EXPIRES_DEFAULT };
	json_t *v = NULL, *a;
	size_t n;
	int fd;

	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0 && errno == ENOENT && !o->att)
		return NULL;
	if (fd < 0 || !(buf = fd_text(fd, JSON_MAX_BYTES + 1, &n)))
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read the attestation %s:", p);
	close(fd);
	if (n > JSON_MAX_BYTES)
		die(EX_SYS, "the attestation %s is over %u bytes", p, JSON_MAX_BYTES);
	sha256_hex(buf, n, sha);
	ao.envelope_buf = buf, ao.envelope_len = n;
	if (attest_verify(&ao, &v, why, sizeof why) < 0)
		warn("the attestation %s cannot be verified: %s", p, why);
	free(buf);
	a = need(json_pack("{s:s, s:{s:s}, s:{s:s, s:b, s:O?, s:O?, s:O?, s:I}}", "name",
		"host-attestation", "digest", "sha256", sha, "annotations", "isopod_path", p,
		"isopod_valid", json_is_true(json_object_get(v, "valid")), "isopod_keyId",
		json_object_get(v, "key_id"), "isopod_sequence", json_object_get(v, "sequence"),
		"isopod_expires", json_object_get(v, "expires"),
		"isopod_failures", (json_int_t)json_array_size(json_object_get(v, "failures"))));
	json_decref(v);
	return a;
}

/* What the command read on stdin (externalParameters.stdin): null none; a
 * file's {sha256, bytes} (the front end's private copy of --stdin-file,
 * the bytes isopod-exec sent); a pipe forwarded as it streamed is not
 * kept, and the Statement says so (PROV_STDIN_PIPE). */
static json_t *stdin_param(const struct opts *o)
{
	struct stat st;
	char sha[65];
	int fd, r;

	if (o->stdin_pipe)
		return need(json_string(PROV_STDIN_PIPE));
	if (!o->stdin_file)
		return json_null();
	if ((fd = open(o->stdin_file, O_RDONLY | O_CLOEXEC)) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to open the stdin file %s:", o->stdin_file);
	if ((r = layer_hash(fd, sha, &st)) != 0)
		die(EX_SYS, "unable to hash the stdin file %s%s", o->stdin_file,
		    r < 0 ? ": read error" : ": it changed while being read");
	close(fd);
	return need(json_pack("{s:s, s:I}", "sha256", sha, "bytes", (json_int_t)st.st_size));
}

static json_t *ms_or_null(json_t *v)
{
	return json_is_integer(v) ? json_incref(v) : json_null();
}

static json_t *statement(const struct opts *o, json_t *res, json_t *rec, const char *mid)
{
	json_t *outs = need(json_array()), *ins = need(json_array()), *deps = need(json_array());
	json_t *byp = need(json_array()), *subj = subjects(res, outs, byp);
	json_t *bdeps = need(json_array());
	json_t *net = json_object_get(rec, "net"), *e, *att, *cmd = need(json_array()), *tm;
	const char *mode = json_string_value(json_object_get(net, "mode")) ?: "none";
	char p[PATH_MAX], sha[65], builder[128], t0[32], t1[32];
	size_t i;
	int k;

	names_distinct(subj, byp);
	if (o->commit)
		commit_subject(o->commit, subj);
	if (json_array_size(subj) == 0)
		die(EX_GUEST, "nothing was copied out or committed (a directory copy-out of no "
		    "regular file has no subject): there is nothing to sign");
	kernel_deps(rec, deps);
	chain_deps(rec, deps);
	json_array_foreach(json_object_get(res, "copied_in"), i, e) {
		const char *g = json_string_value(json_object_get(e, "guest"));
		const char *s = json_string_value(json_object_get(e, "sha256"));
		char name[PATH_MAX + 16];

		/* Every input is named, or nothing is signed: a statement that
		 * left one out (a directory, copied as a tree, has no sha256)
		 * would say the outputs came of less than they did. */
		if (!g)
			die(EX_USAGE, "a malformed result: a copied_in entry without its guest path");
		if (!s || !hex64_ok(s))
			die(EX_GUEST, "copy-in %s has no sha256 (a directory is copied as a tree, "
			    "which has none): it cannot be named in the statement, so nothing is "
			    "signed; copy in an archive of it", EXC(g));
		snprintf(name, sizeof name, "copy-in:%s", g);
		json_array_append_new(deps, rd(name, s));
		json_array_append_new(ins, need(json_pack("{s:s}", "guest", g)));
	}
	/* The ledger is complete once the VM has stopped (its broker ends
	 * before the VM lock goes): the front end signs after isopod-stop. */
	if (strcmp(mode, "none")) {
		pathf(p, sizeof p, "%s/vms/%s/ledger.jsonl", store_home(), o->vm);
		if (sha256_file(p, sha) == 0)
			json_array_append_new(byp, need(json_pack("{s:s, s:{s:s}, s:s}", "name",
				"egress-ledger", "digest", "sha256", sha, "mediaType", "application/jsonl")));
		else
			warn("no egress ledger %s: %s", p, strerror(errno));
	}
	if ((att = attestation(o)))
		json_array_append_new(bdeps, att);
	for (k = 0; k < o->ncmd; k++)
		json_array_append_new(cmd, need(json_string(o->cmd[k])));
	snprintf(builder, sizeof builder, "%s%s", PROV_BUILDER_PREFIX, mid);
	if (o->have_start)
		attest_iso(o->start_ms / 1000, t0);
	else
		snprintf(t0, sizeof t0, "%s", json_string_value(json_object_get(rec, "created")) ?: "");
	attest_iso(wall_ms() / 1000, t1);
	tm = json_object_get(res, "timings");
	return need(json_pack(
		"{s:s, s:o, s:s, s:{s:{s:s, s:{s:o, s:O, s:s?, s:s?, s:{s:s, s:o}, s:{s:O?, s:O?, s:O?},"
		" s:o, s:o, s:o}, s:{s:{s:O?, s:O?}, s:O?}, s:o},"
		" s:{s:{s:s, s:{s:s}, s:o}, s:{s:s, s:s, s:s, s:{s:O?, s:O?, s:O?}, s:{s:o, s:o}},"
		" s:o}}}",
		"_type", PROV_STATEMENT_TYPE, "subject", subj, "predicateType", PROV_PREDICATE_TYPE,
		"predicate", "buildDefinition", "buildType", PROV_BUILD_TYPE, "externalParameters",
		"command", cmd, "envNames", o->env_names, "cwd", o->cwd, "stage", o->stage,
		"network", "mode", mode, "allow",
		json_is_array(json_object_get(net, "allow")) ? json_incref(json_object_get(net, "allow"))
							     : need(json_array()),
		"resources", "vcpus", json_object_get(rec, "vcpus"), "memMib",
		json_object_get(rec, "mem_mib"), "diskMib", json_object_get(rec, "disk_mib"),
		"copyIn", ins, "copyOut", outs, "stdin", stdin_param(o),
		"internalParameters", "accelerator", "name", json_object_get(rec, "accel"), "reason",
		json_object_get(rec, "accel_reason"), "bootPath", json_object_get(rec, "path"),
		"resolvedDependencies", deps,
		"runDetails", "builder", "id", builder, "version", "isopod", ISOPOD_VERSION,
		"builderDependencies", bdeps, "metadata", "invocationId", o->vm, "startedOn", t0,
		"finishedOn", t1, "isopod_exit", "exitCode", json_object_get(res, "exit_code"),
		"signal", json_object_get(res, "signal"), "timedOut", json_object_get(res, "timed_out"),
		"isopod_timings", "bootMs", ms_or_null(json_object_get(rec, "boot_ms")), "execMs",
		ms_or_null(json_object_get(res, "exec_ms") ?: json_object_get(tm, "exec_ms")),
		"byproducts", byp));
}

static int cmd_sign(const struct opts *o)
{
	unsigned char pk[32], sk[64];
	char why[DIAG_MAX], kid[65], mid[64], sha[65], *body, *envs, vmid[VM_ID_SZ];
	const char *st;
	struct attest_dir d;
	json_t *res, *rec, *stmt, *env, *sum, *names, *e;
	size_t n, i;
	int r;

	if (o->check) {
		if ((r = attest_dir_open(&d, o->dir, why, sizeof why)) < 0 ||
		    (r = attest_load_keypair(&d, pk, sk, why, sizeof why)) < 0) {
			sodium_memzero(sk, sizeof sk);
			fail(r, why);
		}
		attest_dir_close(&d);
		sodium_memzero(sk, sizeof sk);
		dsse_keyid(pk, kid);
		char parent[PATH_MAX], *sl;

		/* the envelope's directory, where atomic_write makes its file */
		snprintf(parent, sizeof parent, "%s", o->out);
		if (!(sl = strrchr(parent, '/')))
			snprintf(parent, sizeof parent, ".");
		else
			sl[sl == parent] = 0;
		if (access(parent, W_OK) < 0)
			die(errno == ENOENT ? EX_NOTFOUND : EX_USAGE, "--provenance %s: its directory is not writable:", o->out);
		sum = need(json_pack("{s:b, s:s}", "ok", 1, "key_id", kid));
		json_emit(sum);
		json_decref(sum);
		return 0;
	}
	if (!(res = json_load_path(o->result)))
		die(errno == ENOENT ? EX_NOTFOUND : errno == EINVAL || errno == EFBIG ? EX_USAGE : EX_SYS,
		    "unable to read the result %s:", o->result);
	if (vm_resolve(o->vm, vmid, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	/* Only a stopped VM: its egress ledger is complete (the broker ends
	 * before the lock goes) and nothing more will be copied or run.  The
	 * lock first, then the record: the supervisor writes the final state
	 * before it lets the lock go. */
	if (vm_running(vmid))
		die(EX_CONFLICT, "vm %s is running: sign after it stopped (isopod vm stop)", vmid);
	if (vm_open(vmid, vmid, &rec, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	st = json_string_value(json_object_get(rec, "state")) ?: "(none)";
	if (strcmp(st, "stopped") && strcmp(st, "failed"))
		die(EX_CONFLICT, "vm %s is in state %s, not stopped or failed: nothing is signed before it stopped",
		    vmid, EXC(st));
	if (attest_machine_id(mid) < 0)
		die(EX_SYS, "unable to read /etc/machine-id:");
	stmt = statement(o, res, rec, mid);
	if (!(body = json_dumps(stmt, JSON_COMPACT)))
		die(EX_SYS, "out of memory");
	/* The key is read only now, the Statement whole: none of the dies
	 * above leaves it in memory. */
	if ((r = attest_dir_open(&d, o->dir, why, sizeof why)) < 0 ||
	    (r = attest_load_keypair(&d, pk, sk, why, sizeof why)) < 0) {
		sodium_memzero(sk, sizeof sk);
		fail(r, why);
	}
	attest_dir_close(&d);
	dsse_keyid(pk, kid);
	env = dsse_sign(sk, kid, DSSE_INTOTO_TYPE, body, strlen(body));
	sodium_memzero(sk, sizeof sk);
	if (!env || !(envs = json_dumps(env, JSON_COMPACT)))
		die(EX_SYS, "out of memory");
	n = strlen(envs);
	/* verify reads an envelope of JSON_MAX_BYTES at most: a larger one
	 * (a directory copy-out's many subjects) would be signed and never
	 * verify */
	if (n + 1 > JSON_MAX_BYTES)
		die(EX_GUEST, "the signed envelope would be %zu bytes, over the %u that verify reads: "
		    "nothing is signed (copy out an archive instead of the directories)", n + 1,
		    JSON_MAX_BYTES);
	if (!(envs = realloc(envs, n + 2)))
		die(EX_SYS, "out of memory");
	envs[n] = '\n', envs[n + 1] = 0;
	if (atomic_write(o->out, envs, n + 1, 0644) < 0)
		die(EX_SYS, "unable to write %s:", o->out);
	sha256_hex(envs, n + 1, sha);
	names = need(json_array());
	json_array_foreach(json_object_get(stmt, "subject"), i, e)
		json_array_append_new(names, need(json_pack("{s:O, s:O}", "name", json_object_get(e, "name"),
			"sha256", json_object_get(json_object_get(e, "digest"), "sha256"))));
	sum = need(json_pack("{s:s, s:s, s:s, s:o}", "path", o->out, "sha256", sha, "key_id", kid,
			     "subjects", names));
	json_emit(sum);
	json_decref(sum);
	free(envs);
	free(body);
	json_decref(env);
	json_decref(stmt);
	json_decref(rec);
	json_decref(res);
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

/* --require-attestation: the run was signed while a host attestation was
 * in force and verified (isopod-attest verify at signing, recorded in the
 * signed statement): provenance from a host whose containment nobody
 * proved is refused, not only marked. */
static void require_attestation(json_t *att, json_t *fails)
{
	if (!json_is_object(att))
		json_array_append_new(fails, need(json_pack("{s:s, s:s}", "field", "attestation", "why",
			"no host attestation was in force when the run was signed")));
	else if (!json_is_true(json_object_get(att, "valid")))
		json_array_append_new(fails, need(json_pack("{s:s, s:s}", "field", "attestation", "why",
			"the host attestation in force did not verify when the run was signed")));
}

/* --kernel: the signed chain's kernel (its vmlinux digest) is the one the
 * caller trusts. */
static void kernel_check(json_t *k, const char *want, json_t *fails)
{
	const char *have = json_string_value(json_object_get(k, "vmlinux"));

	if (!have || strcmp(have, want))
		json_array_append_new(fails, need(json_pack("{s:s, s:s+}", "field", "chain.kernel", "why",
			"the run's kernel is not the one given: vmlinux sha256 ", have ? have : "missing")));
}

static int cmd_verify(const struct opts *o, const char *file, const char *provp)
{
	unsigned char pk[32], *body = NULL;
	char sha[65], kid[65], kwant[65] = "", why[DIAG_MAX], msg[512], dir[PATH_MAX];
	const char *field = NULL, *type = NULL;
	json_t *fails = need(json_array()), *env, *stmt = NULL, *sum = NULL, *want = NULL, *out;
	json_t *art = need(json_pack("{s:o}", "path", utf8_json((const uint8_t *)file, strlen(file), 1)));
	struct attest_dir d = { .fd = -1 };
	struct stat st = { .st_mode = 0 };
	size_t blen;
	int r, valid, tree;

	/* a directory (not a link to one): a tree copied out, checked entry
	 * by entry (prov_tree_verify); else a file, by its digest.  Its trailing
	 * slashes off first (exec_dest_trim): lstat("link/") follows the
	 * link, and a tree must not be reached through one.  A symlink to a
	 * directory is refused outright: followed, a file's check would fail
	 * to read it (111), and a tree's would be the link's target's. */
	/* FILE quoted (EXC): a name need not be text, nor short */
	if (exec_dest_trim(file, dir, sizeof dir) < 0)
		die(EX_USAGE, "%s: a name too long", EXC(file));
	tree = lstat(dir, &st) == 0 && S_ISDIR(st.st_mode);
	if (!tree && S_ISLNK(st.st_mode) && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		die(EX_GUEST, "%s is a symlink to a directory: not followed (verify the directory itself)",
		    EXC(dir));
	if (!tree && sha256_file(file, sha) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read %s:", EXC(file));
	/* --kernel: a digest as given, or the file's */
	if (o->kernel && hex64_ok(o->kernel))
		snprintf(kwant, sizeof kwant, "%s", o->kernel);
	else if (o->kernel && sha256_file(o->kernel, kwant) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "--kernel %s: unable to read it:", EXC(o->kernel));
	if (!o->key && (r = attest_dir_open(&d, o->dir, why, sizeof why)) < 0)
		fail(r, why);
	if ((r = attest_load_pubkey(&d, o->key, pk, why, sizeof why)) < 0)
		fail(r, why);
	attest_dir_close(&d);
	dsse_keyid(pk, kid);
	/* What the chain must be is read before the envelope: a --stage REF
	 * that names nothing is the caller's error, whatever was signed. */
	if (o->stage)
		want = chain_of(o->stage);
	if (!(env = json_load_path(provp))) {
		if (errno != EINVAL && errno != EFBIG)
			die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "unable to read %s:", EXC(provp));
		json_array_append_new(fails, need(json_pack("{s:s, s:s}", "field", "envelope", "why",
			"not one JSON object (or a duplicate key, or over 1 MiB)")));
		goto done;
	}
	/* Signature first: nothing of the payload is believed before it. */
	if (dsse_open(env, pk, &body, &blen, &type, &field, msg, sizeof msg) < 0) {
		json_array_append_new(fails, need(json_pack("{s:s, s:s}", "field", field, "why", msg)));
		goto done;
	}
	if (strcmp(type, DSSE_INTOTO_TYPE)) {
		json_array_append_new(fails, need(json_pack("{s:s, s:s}", "field", "payloadType", "why",
							    "not " DSSE_INTOTO_TYPE)));
		goto done;
	}
	if (!(stmt = json_parse((const char *)body, blen, 0, msg, sizeof msg))) {
		json_array_append_new(fails, need(json_pack("{s:s, s:s+}", "field", "payload", "why",
							    "not a JSON object: ", msg)));
		goto done;
	}
	sum = need(prov_read(stmt, tree ? NULL : sha, fails));
	if (tree)
		if (prov_tree_verify(dir, stmt, fails, art) < 0)
			die(EX_SYS, "out of memory");
	if (want)
		prov_chain_compare(json_object_get(sum, "chain"), want, fails);
	/* A failed or timed-out run's files are signed (the record exists)
	 * but are not what a build made unless the caller says so. */
	if (!o->allow_failed)
		prov_exit_check(json_object_get(sum, "exit"), fails);
	if (o->require_att)
		require_attestation(json_object_get(sum, "attestation"), fails);
	if (o->kernel)
		kernel_check(json_object_get(json_object_get(sum, "chain"), "kernel"), kwant, fails);
done:
	json_decref(env);
	valid = json_array_size(fails) == 0;
	if (!tree)
		json_object_set_new(art, "sha256", need(json_string(sha)));
	out = need(json_pack("{s:b, s:O, s:s}", "valid", valid, "artifact", art, "key_id", kid));
	json_decref(art);
	if (sum)
		json_object_update(out, sum);
	if (want)
		json_object_set_new(out, "expected_chain", want);
	json_object_set_new(out, "failures", fails);
	json_emit(out);
	json_decref(out);
	json_decref(sum);
	json_decref(stmt);
	free(body);
	return valid ? 0 : EX_GUEST;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'd' },
		{ "attestation", required_argument, NULL, 'a' },
		{ "check", no_argument, NULL, 'c' },
		{ "vm", required_argument, NULL, 'v' },
		{ "result", required_argument, NULL, 'r' },
		{ "start-ms", required_argument, NULL, 's' },
		{ "stage", required_argument, NULL, 'S' },
		{ "env-name", required_argument, NULL, 'e' },
		{ "cwd", required_argument, NULL, 'C' },
		{ "key", required_argument, NULL, 'k' },
		{ "commit", required_argument, NULL, 'm' },
		{ "stdin-file", required_argument, NULL, 'i' },
		{ "stdin-pipe", no_argument, NULL, 'p' },
		{ "allow-failed", no_argument, NULL, 'F' },
		{ "require-attestation", no_argument, NULL, 'A' },
		{ "kernel", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .env_names = json_array() };
	const char *verb;
	int c, sign;

	progname = "isopod-provenance";
	umask(022);
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2)
		die_usage(USAGE, "no command given");
	verb = argv[1];
	if (strcmp(verb, "sign") && strcmp(verb, "verify"))
		die_usage(USAGE, "unknown command %s", EXC(verb));
	sign = !strcmp(verb, "sign");
	optind = 2;
	while ((c = getopt_long(argc, argv, "+ho:", lo, NULL)) != -1) {
		switch (c) {
		case 'd': o.dir = optarg; break;
		case 'a': o.att = optarg; break;
		case 'c': o.check = 1; break;
		case 'v': o.vm = optarg; break;
		case 'r': o.result = optarg; break;
		case 's':
			if (parse_ll(optarg, 0, (long long)1 << 50, &o.start_ms) < 0)
				die(EX_USAGE, "--start-ms %s: want milliseconds since the epoch", EXC(optarg));
			o.have_start = 1;
			break;
		case 'S': o.stage = optarg; break;
		case 'e':
			/* names only: a value never reaches the predicate */
			if (!*optarg || strchr(optarg, '='))
				die(EX_USAGE, "--env-name %s: a name, without '=' or a value", EXC(optarg));
			json_array_append_new(o.env_names, need(json_string(optarg)));
			break;
		case 'C': o.cwd = optarg; break;
		case 'k': o.key = optarg; break;
		case 'm': o.commit = optarg; break;
		case 'i': o.stdin_file = optarg; break;
		case 'p': o.stdin_pipe = 1; break;
		case 'F': o.allow_failed = 1; break;
		case 'A': o.require_att = 1; break;
		case 'K': o.kernel = optarg; break;
		case 'o': o.out = optarg; break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (sodium_init() < 0)
		die(EX_SYS, "unable to initialise libsodium");
	o.dir = attest_key_dir(o.dir);
	if (sign) {
		if (o.key || !o.out || o.allow_failed || o.require_att || o.kernel ||
		    (o.stdin_file && o.stdin_pipe))
			die_usage(USAGE, "sign: an option verify's, no -o FILE, or both stdin options");
		if (!o.check) {
			if (!o.vm || !o.result || optind >= argc || !id_vm_ok(o.vm))
				die_usage(USAGE, "sign: want --vm ID (an id), --result FILE and -- CMD");
			o.cmd = argv + optind;
			o.ncmd = argc - optind;
		}
		c = cmd_sign(&o);
		json_decref(o.env_names);
		return c;
	}
	if (o.att || o.check || o.vm || o.result || o.have_start || o.cwd || o.out || o.commit ||
	    o.stdin_file || o.stdin_pipe ||
	    json_array_size(o.env_names) || argc - optind != 2)
		die_usage(USAGE, "verify: an option sign's, or not FILE PROVENANCE");
	json_decref(o.env_names);
	return cmd_verify(&o, argv[optind], argv[optind + 1]);
}
