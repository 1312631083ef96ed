/* isopod-oci - move a stage with its whole chain through an OCI registry.
 *
 *   push REF REGISTRY/REPO[:TAG]
 *        every layer of REF's chain and its base, each an OCI artifact
 *        (lib/oci.h): blobs the registry lacks (HEAD first), then one
 *        manifest per stage, root first, each naming its parent's manifest
 *        by digest (subject) and tagged with the stage's id (the base with
 *        base-<sha>), so the registry keeps every one; the leaf also under
 *        TAG.
 *   pull REGISTRY/REPO[:TAG|@sha256:HEX]
 *        the leaf's manifest, then its parents by digest down to the first
 *        stage this store holds (same id, same layer digest) or to the base;
 *        every manifest, config and blob checked against its digest and
 *        size, every config and layer against its child (ids, depth, base,
 *        the layer's backing file), before anything is written; then the
 *        missing blobs into staging names, and under the store lock the
 *        base and the stages, root first, each renamed into place as
 *        isopod-commit publishes one (same id, same layout, 0444, a seal
 *        whose sha256 is the verified digest).  A refusal writes nothing. */
#include "image.h"
#include "oci.h"
#include "ocireg.h"
#include "proc.h"
#include "qjail.h"
#include "stage.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-oci push [--plain-http] [--ca-file FILE] [--auth-file FILE] [--timeout-ms N] REF REGISTRY/REPO[:TAG]\n" \
	      "       isopod-oci pull [--plain-http] [--ca-file FILE] [--auth-file FILE] [--timeout-ms N] REGISTRY/REPO[:TAG|@sha256:HEX]"

#define CHAIN_MAX 64

/* What moved, for the tool's JSON. */
struct counts {
	int blobs_moved, blobs_present, manifests_moved, manifests_present;
	long long bytes_moved, bytes_present;
};

static json_t *counts_json(const struct counts *c, const char *verb)
{
	return json_pack("{s:i, s:i, s:I, s:I, s:i, s:i}", verb, c->blobs_moved, "present",
			 c->blobs_present, "bytes", (json_int_t)c->bytes_moved, "bytes_present",
			 (json_int_t)c->bytes_present, "manifests", c->manifests_moved,
			 "manifests_present", c->manifests_present);
}

static int reg_exit(int e)
{
	return e == ENOENT ? EX_NOTFOUND : e == EINVAL ? EX_USAGE : e == ETIMEDOUT ? EX_TIMEOUT : EX_SYS;
}

/* ---- push ---- */

/* A blob the registry may lack: HEAD, then upload from fd or memory. */
static void push_blob(struct reg *r, struct counts *c, const char *digest, int fd, const char *mem,
		      long long size)
{
	int h = reg_blob_head(r, digest);

	if (h < 0)
		die(reg_exit(errno), "%s", r->err);
	if (h) {
		c->blobs_present++;
		c->bytes_present += size;
		return;
	}
	if ((fd >= 0 ? reg_blob_put(r, digest, fd, size)
		     : reg_blob_put_mem(r, digest, mem, (size_t)size)) < 0)
		die(reg_exit(errno), "%s", r->err);
	c->blobs_moved++;
	c->bytes_moved += size;
}

/* The manifest under tag, unless the registry has it there already. */
static void push_manifest(struct reg *r, struct counts *c, const char *tag, const char *buf,
			  size_t n, const char *digest)
{
	char have[OCI_DIGEST_SZ] = "";
	int h = reg_manifest_head(r, tag, have);

	if (h < 0)
		die(reg_exit(errno), "%s", r->err);
	if (h && !strcmp(have, digest)) {
		c->manifests_present++;
		return;
	}
	if (reg_manifest_put(r, tag, buf, n) < 0)
		die(reg_exit(errno), "%s", r->err);
	c->manifests_moved++;
}

/* Push one artifact: config (memory) and layer (file) blobs, then its
 * manifest under tag.  Fills out (the manifest's descriptor); returns the
 * manifest's bytes (malloc'd). */
static char *push_artifact(struct reg *r, struct counts *c, struct oci_manifest *m, json_t *cfg,
			   const char *layer_path, const char *tag, struct oci_desc *out)
{
	size_t cn, mn;
	char *cb = oci_json_bytes(cfg, &cn), *mb, hex[65];
	int fd;

	if (!cb)
		die(EX_SYS, "out of memory");
	sha256_hex(cb, cn, hex);
	snprintf(m->config.digest, sizeof m->config.digest, "sha256:%s", hex);
	m->config.size = (long long)cn;
	push_blob(r, c, m->config.digest, -1, cb, m->config.size);
	free(cb);
	fd = open(layer_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		die(EX_SYS, "unable to open %s:", layer_path);
	push_blob(r, c, m->layer.digest, fd, NULL, m->layer.size);
	close(fd);
	if (!(mb = oci_manifest_build(m, &mn)))
		die(EX_SYS, "out of memory");
	sha256_hex(mb, mn, hex);
	snprintf(out->digest, sizeof out->digest, "sha256:%s", hex);
	out->size = (long long)mn;
	push_manifest(r, c, tag, mb, mn, out->digest);
	return mb;
}

/* The sha256 of a stage's layer: its seal's, when the hash is done and the
 * file is still the one sealed (an O(1) proof), else hashed now and the
 * seal checked around it.  Fills size.  0, or -1 with msg. */
static int layer_digest(const char *id, json_t *meta, char digest[OCI_DIGEST_SZ], long long *size,
			char *msg, size_t msz)
{
	char p[PATH_MAX], sha[65];
	json_t *seal = json_object_get(meta, "seal");
	const char *rec = json_string_value(json_object_get(seal, "sha256"));
	const char *hs = json_string_value(json_object_get(seal, "hash"));
	struct stat st;
	int fd, r = 0;

	pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id);
	fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		snprintf(msg, msz, "stage %s: unable to open its layer %.3000s: %s", id, p,
			 strerror(errno));
		return -1;
	}
	if (layer_sealed(id, meta, fd, p, msg, msz) < 0 || fstat(fd, &st) < 0) {
		close(fd);
		return -1;
	}
	if (hs && !strcmp(hs, "done") && hex64_ok(rec)) {
		snprintf(sha, sizeof sha, "%s", rec);
	} else if (layer_hash(fd, sha, &st) != 0 || layer_sealed(id, meta, fd, p, msg, msz) < 0) {
		snprintf(msg, msz, "stage %s: its layer changed while it was hashed", id);
		r = -1;
	}
	close(fd);
	snprintf(digest, OCI_DIGEST_SZ, "sha256:%s", sha);
	*size = (long long)st.st_size;
	return r;
}

static void cmd_push(const char *sref, const char *dst, const struct reg_opts *o)
{
	char id[64], why[DIAG_MAX], chain[CHAIN_MAX][64], p[PATH_MAX], *leaf = NULL;
	const char *bsha;
	struct oci_ref ref;
	struct reg r;
	struct counts c = {0};
	struct oci_desc parent = {{0}, 0};
	json_t *metas[CHAIN_MAX], *layers = json_array(), *bcfg;
	int n = 0;
	int64_t t0 = mono_ms();
	struct stat st;

	if (oci_ref_parse(dst, &ref, why, sizeof why) < 0)
		die(EX_USAGE, "%s", why);
	if (stage_resolve(sref, id, sizeof id, why, sizeof why) < 0)
		die(exit_code_of(errno), "%s", why);
	if (stage_chain_sealed(id, why, sizeof why) < 0)
		die(EX_SYS, "%s; nothing was pushed", why);
	/* the chain, leaf first */
	snprintf(chain[0], sizeof chain[0], "%s", id);
	for (;;) {
		const char *par;

		if (!(metas[n] = stage_meta(chain[n])))
			die(EX_SYS, "stage %s: unable to read its meta.json:", chain[n]);
		par = json_string_value(json_object_get(metas[n], "parent"));
		if (!par)
			break;
		if (++n >= CHAIN_MAX)
			die(EX_SYS, "stage %s: the chain is longer than %d (a loop?)", id, CHAIN_MAX);
		snprintf(chain[n], sizeof chain[n], "%.63s", par);
	}
	bsha = json_string_value(json_object_get(json_object_get(metas[n], "base"), "sha256"));
	if (!hex64_ok(bsha))
		die(EX_SYS, "stage %s: its meta.json names no base sha256", chain[n]);
	if (reg_open(&r, &ref, o) < 0)
		die(reg_exit(errno), "%s", r.err);
	/* the base: its sidecar as the config (or what the stage says of it) */
	pathf(p, sizeof p, "%s/images/base-%s.json", store_home(), bsha);
	if (!(bcfg = json_load_path(p)))
		bcfg = json_deep_copy(json_object_get(metas[n], "base"));
	pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), bsha);
	if (stat(p, &st) < 0)
		die(EX_SYS, "the base image %s:", p);
	{
		struct oci_manifest m = {.kind = OCI_BASE, .layer = {.size = st.st_size}};
		json_t *b;

		snprintf(m.layer.digest, sizeof m.layer.digest, "sha256:%s", bsha);
		snprintf(m.id, sizeof m.id, "base-%s", bsha);
		free(push_artifact(&r, &c, &m, bcfg, p, m.id, &parent));
		b = json_pack("{s:s, s:s, s:I}", "sha256", bsha, "digest", parent.digest, "bytes",
			      (json_int_t)st.st_size);
		json_decref(bcfg);
		bcfg = b;
	}
	/* the stages, root first: each names the manifest just pushed */
	for (int i = n; i >= 0; i--) {
		struct oci_manifest m = {.kind = OCI_STAGE, .has_parent = 1, .parent = parent};
		json_t *cfg = oci_stage_config(metas[i]);

		if (layer_digest(chain[i], metas[i], m.layer.digest, &m.layer.size, why,
				 sizeof why) < 0)
			die(EX_SYS, "%s; the chain was not pushed whole", why);
		snprintf(m.id, sizeof m.id, "%s", chain[i]);
		pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), chain[i]);
		free(leaf);
		leaf = push_artifact(&r, &c, &m, cfg, p, chain[i], &parent);
		json_array_append_new(layers, json_pack("{s:s, s:O, s:s, s:s, s:I}", "stage", chain[i],
							"label", json_object_get(metas[i], "label"),
							"digest", parent.digest, "layer", m.layer.digest,
							"bytes", (json_int_t)m.layer.size));
		json_decref(cfg);
		json_decref(metas[i]);
	}
	if (ref.digest[0] && strcmp(ref.digest, parent.digest))
		die(EX_CONFLICT, "stage %s's manifest is %s, not the %s asked for", id, parent.digest,
		    ref.digest);
	if (ref.tag[0])
		push_manifest(&r, &c, ref.tag, leaf, (size_t)parent.size, parent.digest);
	free(leaf);
	reg_close(&r);
	json_emit(json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:I}", "pushed", dst, "stage", id,
			    "digest", parent.digest, "layers", layers, "base", bcfg, "blobs",
			    counts_json(&c, "uploaded"), "ms", (json_int_t)(mono_ms() - t0)));
}

/* ---- pull ---- */

struct pstage {
	char id[64];
	struct oci_manifest m;
	char mdigest[OCI_DIGEST_SZ];
	json_t *cfg;
	int present; /* this store holds it (same id, same layer digest) */
	char tmp[PATH_MAX];
};

struct pull {
	const char *src;
	struct reg r;
	struct pstage st[CHAIN_MAX]; /* leaf first */
	int n;
	int base_needed, base_present;
	struct oci_manifest bm;
	char bdigest[OCI_DIGEST_SZ], bsha[65];
	json_t *bcfg;
	char btmp[PATH_MAX], bjtmp[PATH_MAX];
	struct counts c;
};

/* Remove stage s's staging directory. */
static void unstage(struct pstage *s)
{
	char p[PATH_MAX];

	if (!s->tmp[0])
		return;
	snprintf(p, sizeof p, "%.4000s/layer.qcow2", s->tmp);
	unlink(p);
	snprintf(p, sizeof p, "%.4000s/meta.json", s->tmp);
	unlink(p);
	rmdir(s->tmp);
	s->tmp[0] = 0;
}

/* Remove whatever this pull staged, then die: a refusal writes nothing. */
__attribute__((noreturn, format(printf, 3, 4))) static void pull_fail(struct pull *pl, int code,
								      const char *fmt, ...)
{
	char msg[DIAG_MAX];
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vreason(msg, sizeof msg, e, fmt, ap);
	va_end(ap);
	for (int i = 0; i < pl->n; i++)
		unstage(&pl->st[i]);
	if (pl->btmp[0])
		unlink(pl->btmp);
	if (pl->bjtmp[0])
		unlink(pl->bjtmp);
	die(code, "%s; nothing was written", msg);
}

/* GET a manifest (by tag or digest) and parse it; dies on any refusal. */
static void pull_manifest(struct pull *pl, const char *ref, long long want_size,
			  struct oci_manifest *m, char digest[OCI_DIGEST_SZ])
{
	char *buf, why[512];
	size_t n;

	if (reg_manifest_get(&pl->r, ref, &buf, &n, digest) < 0) {
		if (errno == ENOENT && pl->n)
			pull_fail(pl, EX_SYS, "%s: the registry lies: manifest %s names a parent %s "
				  "it does not have", pl->src, pl->st[pl->n - 1].mdigest, ref);
		pull_fail(pl, errno == ENOENT ? EX_NOTFOUND : errno == ETIMEDOUT ? EX_TIMEOUT : EX_SYS, "%s: %s",
			  pl->src, pl->r.err);
	}
	if (want_size >= 0 && (long long)n != want_size) {
		free(buf);
		pull_fail(pl, EX_SYS, "%s: manifest %s is %zu bytes, its child says %lld", pl->src, ref,
			  n, want_size);
	}
	if (oci_manifest_parse(buf, n, m, why, sizeof why) < 0) {
		free(buf);
		pull_fail(pl, EX_SYS, "%s: manifest %s: %s", pl->src, digest, why);
	}
	free(buf);
}

/* A config blob, verified and parsed. */
static json_t *pull_config(struct pull *pl, const struct oci_desc *d)
{
	char *buf, why[256];
	size_t n;
	json_t *j;

	if (reg_blob_get_mem(&pl->r, d, &buf, &n) < 0)
		pull_fail(pl, errno == ETIMEDOUT ? EX_TIMEOUT : EX_SYS, "%s: %s%s", pl->src,
			  errno == EBADMSG ? "the registry lies: " : "", pl->r.err);
	j = json_parse(buf, n, 0, why, sizeof why);
	free(buf);
	if (!j)
		pull_fail(pl, EX_SYS, "%s: config %s: %s", pl->src, d->digest, why);
	return j;
}

/* Check stage i's config against this store: a stage of the same id must
 * be the same layer (then it and its chain are present); a label must be
 * free.  Returns 1 when present. */
static int pull_local(struct pull *pl, int i)
{
	struct pstage *s = &pl->st[i];
	const char *label = json_string_value(json_object_get(s->cfg, "label")), *why;
	char holder[64], msg[DIAG_MAX], dg[OCI_DIGEST_SZ];
	json_t *lm = stage_meta(s->id);
	long long sz;

	if (lm) {
		if (layer_digest(s->id, lm, dg, &sz, msg, sizeof msg) < 0)
			pull_fail(pl, EX_SYS, "%s", msg);
		json_decref(lm);
		if (strcmp(dg, s->m.layer.digest))
			pull_fail(pl, EX_CONFLICT, "stage %s is here already with another layer (%s, "
				  "the registry's %s)", s->id, dg, s->m.layer.digest);
		return 1;
	}
	if (label) {
		if ((why = label_invalid(label)))
			pull_fail(pl, EX_SYS, "stage %s: its label %s: %s", s->id, EXC(label), why);
		if ((why = label_reserved(label)))
			pull_fail(pl, EX_CONFLICT, "stage %s: its label %s: %s", s->id, EXC(label), why);
		if (label_taken(label, holder, sizeof holder) && strcmp(holder, s->id))
			pull_fail(pl, EX_CONFLICT, "stage %s: its label %s is taken here by stage %s",
				  s->id, EXC(label), holder);
		for (int k = 0; k < i; k++)
			if (json_equal(json_object_get(pl->st[k].cfg, "label"),
				       json_object_get(s->cfg, "label")))
				pull_fail(pl, EX_SYS, "stages %s and %s have the same label %s", s->id,
					  pl->st[k].id, EXC(label));
	}
	if (json_string_value(json_object_get(s->cfg, "name"))) {
		const char *nm = json_string_value(json_object_get(s->cfg, "name"));

		if ((why = label_invalid(nm)))
			pull_fail(pl, EX_SYS, "stage %s: its name: %s", s->id, why);
		/* A name is a reference too (stage_find): a label's syntax, not
		 * a flavor's (`--stage debian` would run the registry's) nor a
		 * label here (review) */
		if ((why = label_reserved(nm)))
			pull_fail(pl, EX_CONFLICT, "stage %s: its name %s: %s", s->id, EXC(nm), why);
		if (label_taken(nm, holder, sizeof holder) && strcmp(holder, s->id))
			pull_fail(pl, EX_CONFLICT, "stage %s: its name %s is a label here of stage %s",
				  s->id, EXC(nm), holder);
	}
	return 0;
}

/* Stage i's config against its child's (i - 1): the chain must hold. */
static void pull_link(struct pull *pl, int i)
{
	json_t *c = pl->st[i - 1].cfg, *p = pl->st[i].cfg;
	const char *cp = json_string_value(json_object_get(c, "parent"));

	if (!cp || strcmp(cp, pl->st[i].id))
		pull_fail(pl, EX_SYS, "%s: stage %s names parent %s, but its parent manifest is stage %s",
			  pl->src, pl->st[i - 1].id, cp ? cp : "null", pl->st[i].id);
	if (json_integer_value(json_object_get(c, "depth")) !=
	    json_integer_value(json_object_get(p, "depth")) + 1)
		pull_fail(pl, EX_SYS, "%s: stage %s: its depth is not its parent's + 1", pl->src,
			  pl->st[i - 1].id);
	if (!json_equal(json_object_get(json_object_get(c, "base"), "sha256"),
			json_object_get(json_object_get(p, "base"), "sha256")))
		pull_fail(pl, EX_SYS, "%s: stage %s: its base is not its parent's", pl->src,
			  pl->st[i - 1].id);
}

/* Every manifest and config, leaf to the first stage present here or to
 * the base: all checked before a blob is fetched. */
static void pull_walk(struct pull *pl, const struct oci_ref *ref)
{
	struct oci_manifest m;
	char dg[OCI_DIGEST_SZ], why[512], p[PATH_MAX];
	const char *want = ref->digest[0] ? ref->digest : ref->tag;
	long long want_size = -1;

	for (;;) {
		struct pstage *s;

		pull_manifest(pl, want, want_size, &m, dg);
		if (m.kind == OCI_BASE)
			break;
		if (pl->n >= CHAIN_MAX)
			pull_fail(pl, EX_SYS, "%s: the chain is longer than %d", pl->src, CHAIN_MAX);
		s = &pl->st[pl->n];
		s->m = m;
		snprintf(s->mdigest, sizeof s->mdigest, "%s", dg);
		pl->n++;
		s->cfg = pull_config(pl, &m.config);
		if (oci_stage_config_check(s->cfg, why, sizeof why) < 0)
			pull_fail(pl, EX_SYS, "%s: %s", pl->src, why);
		snprintf(s->id, sizeof s->id, "%s", json_string_value(json_object_get(s->cfg, "id")));
		if (pl->n > 1)
			pull_link(pl, pl->n - 1);
		if ((s->present = pull_local(pl, pl->n - 1)))
			return;
		want = s->m.parent.digest;
		want_size = s->m.parent.size;
	}
	if (pl->n == 0)
		pull_fail(pl, EX_USAGE, "%s is a base, not a stage", pl->src);
	/* the base: the root stage's, by digest */
	if (json_string_value(json_object_get(pl->st[pl->n - 1].cfg, "parent")))
		pull_fail(pl, EX_SYS, "%s: stage %s names a parent, but its parent manifest is a base",
			  pl->src, pl->st[pl->n - 1].id);
	pl->bm = m;
	snprintf(pl->bdigest, sizeof pl->bdigest, "%s", dg);
	snprintf(pl->bsha, sizeof pl->bsha, "%s",
		 json_string_value(json_object_get(json_object_get(pl->st[pl->n - 1].cfg, "base"),
						   "sha256")));
	if (strcmp(m.layer.digest + 7, pl->bsha))
		pull_fail(pl, EX_SYS, "%s: stage %s stands on base %s, its parent manifest is base %s",
			  pl->src, pl->st[pl->n - 1].id, pl->bsha, m.layer.digest);
	pl->bcfg = pull_config(pl, &m.config);
	if (oci_base_config_check(pl->bcfg, pl->bsha, why, sizeof why) < 0)
		pull_fail(pl, EX_SYS, "%s: %s", pl->src, why);
	pl->base_needed = 1;
	pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), pl->bsha);
	pl->base_present = access(p, F_OK) == 0;
}

/* A layer from elsewhere is a qcow2 whose backing file is exactly its
 * parent's, by the relative path a commit writes, and has no external data
 * file: anything else would let a stage read a host file as its disk.  0,
 * or -1 with why. */
static int layer_shape_ok(const char *path, const char *backing, const char *bfmt, char *why,
			  size_t wsz)
{
	char *qa[] = {"qemu-img", "info", "-f", "qcow2", "--output=json", (char *)path, NULL};
	const char *rd[] = { path };
	unsigned char magic[4];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf = NULL;
	size_t len;
	json_t *j, *fs;
	const char *b, *f;

	if (fd < 0 || read(fd, magic, 4) != 4 || memcmp(magic, "QFI\xfb", 4)) {
		if (fd >= 0)
			close(fd);
		snprintf(why, wsz, "it is not a qcow2 image");
		return -1;
	}
	/* The header in C before any qemu-img opens it: a qemu-img without
	 * the CVE-2024-4467 fix opens an external data file even for `info`
	 * (review). */
	if (qcow2_header_ok(fd, why, wsz) < 0) {
		close(fd);
		return -1;
	}
	close(fd);
	/* A registry's file: qemu-img reads it in its jail (lib/qjail.c), the
	 * layer alone (info opens no backing file). */
	if (!(buf = malloc(JSON_MAX_BYTES + 1)) ||
	    qjail_img_capture(&(struct qimg_req){ .av = qa, .reads = rd, .nreads = 1,
						   .errfd = PROC_NULL }, buf,
			      JSON_MAX_BYTES + 1, why, wsz) != 0 ||
	    (len = strlen(buf)) > JSON_MAX_BYTES || !(j = json_parse(buf, len, 0, why, wsz))) {
		free(buf);
		snprintf(why, wsz, "`qemu-img info` refuses it");
		return -1;
	}
	free(buf);
	b = json_string_value(json_object_get(j, "backing-filename"));
	f = json_string_value(json_object_get(j, "backing-filename-format"));
	fs = json_object_get(json_object_get(j, "format-specific"), "data");
	if (!b || strcmp(b, backing) || !f || strcmp(f, bfmt)) {
		snprintf(why, wsz, "its backing file is %s (%s), not %.200s (%s)", b ? EXC(b) : "none",
			 f ? EXC(f) : "no format", backing, bfmt);
		json_decref(j);
		return -1;
	}
	if (json_object_get(fs, "data-file")) {
		snprintf(why, wsz, "it has an external data file");
		json_decref(j);
		return -1;
	}
	json_decref(j);
	return 0;
}

/* Open path for a blob: a new file, never an existing one. */
static int blob_file(struct pull *pl, const char *path, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);

	if (fd < 0)
		pull_fail(pl, EX_SYS, "unable to create %s:", path);
	return fd;
}

static void fetch_blob(struct pull *pl, const struct oci_desc *d, int fd)
{
	if (reg_blob_get(&pl->r, d, fd) < 0) {
		int e = errno;

		close(fd);
		pull_fail(pl, e == ETIMEDOUT ? EX_TIMEOUT : EX_SYS, "%s: %s%s", pl->src,
			  e == EBADMSG ? "the registry lies: " : "", pl->r.err);
	}
	if (fsync(fd) < 0 || fchmod(fd, 0444) < 0) {
		close(fd);
		pull_fail(pl, EX_SYS, "unable to write blob %s:", d->digest);
	}
	pl->c.blobs_moved++;
	pl->c.bytes_moved += d->size;
}

/* Stage i's layer into its staging directory, checked, sealed, described. */
static void fetch_stage(struct pull *pl, int i)
{
	struct pstage *s = &pl->st[i];
	const char *par = json_string_value(json_object_get(s->cfg, "parent"));
	char p[PATH_MAX], back[PATH_MAX], why[512], now[32];
	json_t *meta, *seal;
	struct stat st;
	int fd;

	pathf(s->tmp, sizeof s->tmp, "%s/stages/.tmp-%s.%ld", store_home(), s->id, (long)getpid());
	if (mkdir(s->tmp, 0755) < 0) {
		s->tmp[0] = 0;
		pull_fail(pl, EX_SYS, "unable to create the staging directory of stage %s:", s->id);
	}
	pathf(p, sizeof p, "%s/layer.qcow2", s->tmp);
	fd = blob_file(pl, p, 0600);
	fetch_blob(pl, &s->m.layer, fd);
	if (fstat(fd, &st) < 0)
		pull_fail(pl, EX_SYS, "unable to stat %s:", p);
	close(fd);
	if (par)
		pathf(back, sizeof back, "../%s/layer.qcow2", par);
	else
		pathf(back, sizeof back, "../../images/base-%s.img", pl->bsha);
	if (layer_shape_ok(p, back, par ? "qcow2" : "raw", why, sizeof why) < 0)
		pull_fail(pl, EX_SYS, "%s: stage %s: its layer is refused: %s", pl->src, s->id, why);
	/* The seal: this file's stat after its last chmod, and the digest
	 * just verified (the bytes are the ones hashed). */
	seal = seal_new(&st);
	json_object_set_new(seal, "hash", json_string("done"));
	json_object_set_new(seal, "sha256", json_string(s->m.layer.digest + 7));
	json_object_set_new(seal, "hashed", json_string(iso_now(now, sizeof now)));
	meta = json_deep_copy(s->cfg);
	json_object_set_new(meta, "seal", seal);
	json_object_set_new(meta, "pulled", json_pack("{s:s, s:s, s:s}", "from", pl->src,
						      "digest", s->mdigest, "at", now));
	pathf(p, sizeof p, "%s/meta.json", s->tmp);
	if (json_write_atomic(p, meta) < 0)
		pull_fail(pl, EX_SYS, "unable to write %s:", p);
	json_decref(meta);
}

static void fetch_base(struct pull *pl)
{
	char p[PATH_MAX];
	int fd;

	pathf(p, sizeof p, "%s/images", store_home());
	mkdirs(p, 0755);
	pathf(pl->btmp, sizeof pl->btmp, "%s/images/base-%s.img.tmp.%ld", store_home(), pl->bsha,
	      (long)getpid());
	fd = blob_file(pl, pl->btmp, 0644);
	fetch_blob(pl, &pl->bm.layer, fd);
	close(fd);
	pathf(pl->bjtmp, sizeof pl->bjtmp, "%s/images/base-%s.json.tmp.%ld", store_home(), pl->bsha,
	      (long)getpid());
	if (json_dump_file(pl->bcfg, pl->bjtmp, JSON_INDENT(2) | JSON_SORT_KEYS) < 0)
		pull_fail(pl, EX_SYS, "unable to write %s:", pl->bjtmp);
}

/* Under the store lock: the base, then the stages root first, each renamed
 * into place (the commit point of each, as in isopod-commit). */
static void land(struct pull *pl)
{
	char p[PATH_MAX], holder[64];
	int lk = store_lock();

	if (pl->btmp[0]) {
		pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), pl->bsha);
		if (access(p, F_OK) == 0) {
			unlink(pl->btmp); /* another pull landed it meanwhile */
			unlink(pl->bjtmp);
		} else {
			pathf(p, sizeof p, "%s/images/base-%s.json", store_home(), pl->bsha);
			if (rename(pl->bjtmp, p) < 0)
				pull_fail(pl, EX_SYS, "unable to rename %s:", pl->bjtmp);
			pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), pl->bsha);
			if (rename(pl->btmp, p) < 0)
				pull_fail(pl, EX_SYS, "unable to rename %s:", pl->btmp);
		}
		pl->btmp[0] = pl->bjtmp[0] = 0;
	}
	for (int i = pl->n - 1; i >= 0; i--) {
		struct pstage *s = &pl->st[i];
		const char *label = json_string_value(json_object_get(s->cfg, "label"));

		if (s->present)
			continue;
		if (label && label_taken(label, holder, sizeof holder) && strcmp(holder, s->id))
			pull_fail(pl, EX_CONFLICT, "stage %s: its label %s was taken meanwhile by "
				  "stage %s", s->id, EXC(label), holder);
		pathf(p, sizeof p, "%s/stages/%s", store_home(), s->id);
		if (rename(s->tmp, p) < 0) {
			int e = errno;

			/* Another pull landed it meanwhile: the same layer is
			 * the same stage. */
			if ((e == EEXIST || e == ENOTEMPTY) && pull_local(pl, i)) {
				unstage(s);
				s->present = 1;
				continue;
			}
			errno = e;
			pull_fail(pl, EX_SYS, "unable to publish stage %s:", s->id);
		}
		s->tmp[0] = 0;
	}
	pathf(p, sizeof p, "%s/stages", store_home());
	{
		int fd = open(p, O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	close(lk);
}

static void cmd_pull(const char *src, const struct reg_opts *o)
{
	struct pull pl = {.src = src};
	struct oci_ref ref;
	char why[512], p[PATH_MAX];
	json_t *layers = json_array(), *base = json_null();
	int64_t t0 = mono_ms();

	if (oci_ref_parse(src, &ref, why, sizeof why) < 0)
		die(EX_USAGE, "%s", why);
	if (reg_open(&pl.r, &ref, o) < 0)
		die(reg_exit(errno), "%s", pl.r.err);
	pull_walk(&pl, &ref);
	pl.c.manifests_moved = pl.n + pl.base_needed;
	pathf(p, sizeof p, "%s/stages", store_home());
	mkdirs(p, 0755);
	if (pl.base_needed && !pl.base_present)
		fetch_base(&pl);
	else if (pl.base_needed) {
		pl.c.blobs_present++;
		pl.c.bytes_present += pl.bm.layer.size;
	}
	for (int i = pl.n - 1; i >= 0; i--) {
		if (pl.st[i].present) {
			pl.c.blobs_present++;
			pl.c.bytes_present += pl.st[i].m.layer.size;
		} else {
			fetch_stage(&pl, i);
		}
	}
	land(&pl);
	for (int i = pl.n - 1; i >= 0; i--) {
		struct pstage *s = &pl.st[i];

		json_array_append_new(layers, json_pack("{s:s, s:O, s:s, s:s, s:I, s:s}", "stage",
							s->id, "label", json_object_get(s->cfg, "label"),
							"digest", s->mdigest, "layer", s->m.layer.digest,
							"bytes", (json_int_t)s->m.layer.size, "status",
							s->present ? "present" : "pulled"));
		json_decref(s->cfg);
	}
	if (pl.base_needed)
		base = json_pack("{s:s, s:s, s:I, s:s}", "sha256", pl.bsha, "digest", pl.bdigest,
				 "bytes", (json_int_t)pl.bm.layer.size, "status",
				 pl.base_present ? "present" : "pulled");
	json_decref(pl.bcfg);
	reg_close(&pl.r);
	json_emit(json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:I}", "pulled", src, "stage",
			    pl.st[0].id, "digest", pl.st[0].mdigest, "layers", layers, "base", base,
			    "blobs", counts_json(&pl.c, "fetched"), "ms", (json_int_t)(mono_ms() - t0)));
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"plain-http", no_argument, 0, 'p'},
					   {"ca-file", required_argument, 0, 'c'},
					   {"auth-file", required_argument, 0, 'a'},
					   {"timeout-ms", required_argument, 0, 't'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	struct reg_opts o = {0};
	const char *verb;
	int ch;

	progname = "isopod-oci";
	if (argc < 2)
		die_usage(USAGE, "no command given");
	verb = argv[1];
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help")) {
		puts("usage: " USAGE);
		return 0;
	}
	optind = 2;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'p': o.plain_http = 1; break;
		case 'c': o.ca_file = optarg; break;
		case 'a': o.auth_file = optarg; break;
		case 't':
			if (parse_ll(optarg, 1, 86400000LL, &o.timeout_ms) < 0)
				die(EX_USAGE, "--timeout-ms %s: want 1..86400000", EXC(optarg));
			break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (!strcmp(verb, "push") && argc - optind == 2)
		cmd_push(argv[optind], argv[optind + 1], &o);
	else if (!strcmp(verb, "pull") && argc - optind == 1)
		cmd_pull(argv[optind], &o);
	else if (strcmp(verb, "push") && strcmp(verb, "pull"))
		die_usage(USAGE, "unknown command %s", EXC(verb));
	else
		die_usage(USAGE, "%s takes %s", verb, !strcmp(verb, "push") ? "REF REGISTRY/REPO[:TAG]" :
			  "one REGISTRY/REPO");
	return 0;
}
