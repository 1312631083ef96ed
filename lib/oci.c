/* oci.c - the manifest codec of stages and bases as OCI artifacts (see oci.h). */
#include "oci.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int oci_digest_ok(const char *d)
{
	return d && !strncmp(d, "sha256:", 7) && hex64_ok(d + 7);
}

static int tag_char(char c, int first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || (!first && (c == '.' || c == '-'));
}

int oci_tag_ok(const char *t)
{
	size_t i;

	for (i = 0; t[i]; i++)
		if (i >= 128 || !tag_char(t[i], i == 0))
			return 0;
	return i > 0;
}

/* A repository: components of [a-z0-9]+ joined by '.', '_', '__' or '-'
 * runs, separated by '/' (the distribution spec's name grammar, kept
 * simple: separators never start or end a component). */
static int repo_ok(const char *r)
{
	size_t n = strlen(r);
	int prev_alnum = 0;

	if (n == 0 || n >= 256)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = r[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

		if (!alnum && c != '.' && c != '_' && c != '-' && c != '/')
			return 0;
		if (!alnum && !prev_alnum && c == '/')
			return 0;
		if (c == '/' && i + 1 < n && !((r[i + 1] >= 'a' && r[i + 1] <= 'z') ||
					       (r[i + 1] >= '0' && r[i + 1] <= '9')))
			return 0;
		prev_alnum = alnum;
	}
	return prev_alnum && ((r[0] >= 'a' && r[0] <= 'z') || (r[0] >= '0' && r[0] <= '9'));
}

static int host_ok(const char *h)
{
	size_t n = strlen(h);

	if (n == 0 || n >= 256 || h[0] == '-' || h[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = h[i];

		/* a name or IPv4 address with an optional :port; IPv6 in
		 * brackets */
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
			return 0;
	}
	return 1;
}

int oci_ref_parse(const char *s, struct oci_ref *r, char *why, size_t wsz)
{
	const char *slash = strchr(s, '/'), *at, *colon;
	char rest[512];

	memset(r, 0, sizeof *r);
	if (!slash || (size_t)(slash - s) >= sizeof r->host) {
		snprintf(why, wsz, "bad reference %s: want REGISTRY/REPO[:TAG|@sha256:HEX]", EXC(s));
		return -1;
	}
	memcpy(r->host, s, (size_t)(slash - s));
	if (strlen(slash + 1) >= sizeof rest) {
		snprintf(why, wsz, "bad reference %s: too long", EXC(s));
		return -1;
	}
	snprintf(rest, sizeof rest, "%s", slash + 1);
	if ((at = strchr(rest, '@'))) {
		if (!oci_digest_ok(at + 1)) {
			snprintf(why, wsz, "bad reference %s: the digest must be sha256:<64 hex>", EXC(s));
			return -1;
		}
		snprintf(r->digest, sizeof r->digest, "%s", at + 1);
		rest[at - rest] = 0;
	}
	colon = strrchr(rest, ':');
	if (colon && !strchr(colon, '/')) {
		if (!oci_tag_ok(colon + 1)) {
			snprintf(why, wsz, "bad reference %s: bad tag", EXC(s));
			return -1;
		}
		snprintf(r->tag, sizeof r->tag, "%s", colon + 1);
		rest[colon - rest] = 0;
	}
	if (!r->tag[0] && !r->digest[0])
		snprintf(r->tag, sizeof r->tag, "latest");
	if (!host_ok(r->host) || !repo_ok(rest)) {
		snprintf(why, wsz, "bad reference %s: want REGISTRY/REPO[:TAG|@sha256:HEX] "
			 "(REPO: lower-case [a-z0-9._-] components separated by '/')", EXC(s));
		return -1;
	}
	snprintf(r->repo, sizeof r->repo, "%.255s", rest); /* repo_ok: < 256 */
	return 0;
}

static json_t *desc_json(const char *mt, const struct oci_desc *d)
{
	return json_pack("{s:s, s:s, s:I}", "mediaType", mt, "digest", d->digest, "size",
			 (json_int_t)d->size);
}

char *oci_json_bytes(json_t *j, size_t *len)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);

	if (s && len)
		*len = strlen(s);
	return s;
}

char *oci_manifest_build(const struct oci_manifest *m, size_t *len)
{
	int st = m->kind == OCI_STAGE;
	json_t *j = json_pack("{s:i, s:s, s:s, s:o, s:[o], s:{s:s}}", "schemaVersion", 2,
			      "mediaType", OCI_MT_MANIFEST, "artifactType",
			      st ? OCI_AT_STAGE : OCI_AT_BASE, "config",
			      desc_json(st ? OCI_MT_STAGE_CONFIG : OCI_MT_BASE_CONFIG, &m->config),
			      "layers", desc_json(st ? OCI_MT_STAGE_LAYER : OCI_MT_BASE_LAYER, &m->layer),
			      "annotations", "dev.isopod.id", m->id);
	char *s;

	if (!j)
		return NULL;
	if (m->has_parent)
		json_object_set_new(j, "subject", desc_json(OCI_MT_MANIFEST, &m->parent));
	s = oci_json_bytes(j, len);
	json_decref(j);
	return s;
}

/* A descriptor of media type mt: digest and size checked. */
static int desc_parse(json_t *d, const char *what, const char *mt, struct oci_desc *out,
		      char *why, size_t wsz)
{
	const char *m = json_string_value(json_object_get(d, "mediaType"));
	const char *dg = json_string_value(json_object_get(d, "digest"));
	json_t *sz = json_object_get(d, "size");

	if (!json_is_object(d)) {
		snprintf(why, wsz, "the manifest's %s is not a descriptor", what);
		return -1;
	}
	if (!m || strcmp(m, mt)) {
		snprintf(why, wsz, "the manifest's %s has media type %s, not %s", what,
			 m ? EXC(m) : "(none)", mt);
		return -1;
	}
	if (!oci_digest_ok(dg)) {
		snprintf(why, wsz, "the manifest's %s digest is not sha256:<64 lower-case hex>", what);
		return -1;
	}
	if (!json_is_integer(sz) || json_integer_value(sz) < 0 ||
	    json_integer_value(sz) > OCI_BLOB_MAX) {
		snprintf(why, wsz, "the manifest's %s size is not an integer in 0..2^40", what);
		return -1;
	}
	snprintf(out->digest, sizeof out->digest, "%s", dg);
	out->size = (long long)json_integer_value(sz);
	return 0;
}

int oci_manifest_parse(const char *buf, size_t n, struct oci_manifest *m, char *why, size_t wsz)
{
	char jwhy[256];
	json_t *j = json_parse(buf, n, 0, jwhy, sizeof jwhy), *v, *layers;
	const char *at, *mt, *id;
	int st, r = -1;

	memset(m, 0, sizeof *m);
	if (!j) {
		snprintf(why, wsz, "the manifest is not a JSON object: %s", jwhy);
		return -1;
	}
	v = json_object_get(j, "schemaVersion");
	mt = json_string_value(json_object_get(j, "mediaType"));
	at = json_string_value(json_object_get(j, "artifactType"));
	layers = json_object_get(j, "layers");
	if (!json_is_integer(v) || json_integer_value(v) != 2 || !mt || strcmp(mt, OCI_MT_MANIFEST)) {
		snprintf(why, wsz, "not an OCI image manifest (schemaVersion 2, mediaType %s)",
			 OCI_MT_MANIFEST);
		goto out;
	}
	if (!at || (strcmp(at, OCI_AT_STAGE) && strcmp(at, OCI_AT_BASE))) {
		snprintf(why, wsz, "not an isopod stage or base (artifactType %s)",
			 at ? EXC(at) : "absent");
		goto out;
	}
	st = !strcmp(at, OCI_AT_STAGE);
	m->kind = st ? OCI_STAGE : OCI_BASE;
	if (desc_parse(json_object_get(j, "config"), "config",
		       st ? OCI_MT_STAGE_CONFIG : OCI_MT_BASE_CONFIG, &m->config, why, wsz) < 0)
		goto out;
	if (m->config.size > JSON_MAX_BYTES) {
		snprintf(why, wsz, "the manifest's config is larger than %u bytes", JSON_MAX_BYTES);
		goto out;
	}
	if (!json_is_array(layers) || json_array_size(layers) != 1) {
		snprintf(why, wsz, "the manifest must have exactly one layer");
		goto out;
	}
	if (desc_parse(json_array_get(layers, 0), "layer",
		       st ? OCI_MT_STAGE_LAYER : OCI_MT_BASE_LAYER, &m->layer, why, wsz) < 0)
		goto out;
	v = json_object_get(j, "subject");
	if (st != (v != NULL)) {
		snprintf(why, wsz, st ? "a stage's manifest must name its parent (subject)"
				      : "a base's manifest has no parent (subject)");
		goto out;
	}
	if (v) {
		if (desc_parse(v, "subject", OCI_MT_MANIFEST, &m->parent, why, wsz) < 0)
			goto out;
		m->has_parent = 1;
	}
	id = json_string_value(json_object_get(json_object_get(j, "annotations"), "dev.isopod.id"));
	snprintf(m->id, sizeof m->id, "%s", id && strlen(id) < sizeof m->id ? id : "");
	r = 0;
out:
	json_decref(j);
	return r;
}

json_t *oci_stage_config(json_t *meta)
{
	json_t *c = json_deep_copy(meta);

	if (c) {
		json_object_del(c, "seal");
		json_object_del(c, "pulled");
	}
	return c;
}

static int opt_string(json_t *cfg, const char *key)
{
	json_t *v = json_object_get(cfg, key);

	return !v || json_is_null(v) || json_is_string(v);
}

static int flavor_ok(const char *f)
{
	size_t n = f ? strlen(f) : 0;

	if (n == 0 || n > 32)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((f[i] >= 'a' && f[i] <= 'z') || (f[i] >= '0' && f[i] <= '9') || f[i] == '-'))
			return 0;
	return 1;
}

int oci_stage_config_check(json_t *cfg, char *why, size_t wsz)
{
	const char *id = json_string_value(json_object_get(cfg, "id"));
	json_t *par = json_object_get(cfg, "parent"), *d = json_object_get(cfg, "depth");
	json_t *b = json_object_get(cfg, "base");

	if (!json_is_object(cfg) || !id_stage_ok(id)) {
		snprintf(why, wsz, "the stage config has no id st-<12 hex>");
		return -1;
	}
	if (par && !json_is_null(par) && !id_stage_ok(json_string_value(par))) {
		snprintf(why, wsz, "stage %s: its config's parent is neither null nor a stage id", id);
		return -1;
	}
	if (!json_is_integer(d) || json_integer_value(d) < 1 || json_integer_value(d) > 64 ||
	    ((!par || json_is_null(par)) != (json_integer_value(d) == 1))) {
		snprintf(why, wsz, "stage %s: its config's depth is not 1..64 (1 exactly without a "
			 "parent)", id);
		return -1;
	}
	if (!opt_string(cfg, "label") || !opt_string(cfg, "name")) {
		snprintf(why, wsz, "stage %s: its config's label or name is not a string", id);
		return -1;
	}
	if (!json_is_object(b) || !flavor_ok(json_string_value(json_object_get(b, "flavor"))) ||
	    !hex64_ok(json_string_value(json_object_get(b, "sha256")))) {
		snprintf(why, wsz, "stage %s: its config's base is not {flavor, sha256}", id);
		return -1;
	}
	return 0;
}

int oci_base_config_check(json_t *cfg, const char *sha, char *why, size_t wsz)
{
	const char *s = json_string_value(json_object_get(cfg, "sha256"));

	if (!json_is_object(cfg) || !flavor_ok(json_string_value(json_object_get(cfg, "flavor")))) {
		snprintf(why, wsz, "the base config has no flavor [a-z0-9-]{1,32}");
		return -1;
	}
	if (!hex64_ok(s) || strcmp(s, sha)) {
		snprintf(why, wsz, "the base config's sha256 is not its image's digest");
		return -1;
	}
	return 0;
}
