/* oci.h - stages and bases as OCI artifacts: the manifest codec.
 *
 * One OCI image manifest (image-spec v1.1) per stage and per base:
 *   {"schemaVersion":2, "mediaType":OCI_MT_MANIFEST, "artifactType":OCI_AT_*,
 *    "config":{mediaType OCI_MT_*_CONFIG, digest, size},
 *    "layers":[{mediaType OCI_MT_*_LAYER, digest, size}],
 *    "subject":{mediaType OCI_MT_MANIFEST, digest, size},   a stage: its parent's
 *                                                          manifest (a stage or the base)
 *    "annotations":{"dev.isopod.id": "st-<hex>" | "base-<sha>"}}
 * A stage's config is its meta.json without what only this host knows
 * (oci_stage_config), its one layer the layer.qcow2 bytes; a base's config
 * is images/base-<sha>.json, its layer the raw image (digest = its name).
 * Built with sorted keys and no spaces, so the same stage gives the same
 * bytes, hence the same digest, on every host.  No I/O here: the fuzzer
 * (fuzz/oci_fuzz.c) links it with lib/util.c only. */
#ifndef ISOPOD_OCI_H
#define ISOPOD_OCI_H

#include <jansson.h>
#include <stddef.h>

#define OCI_MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define OCI_AT_STAGE "application/vnd.isopod.stage.v1"
#define OCI_AT_BASE "application/vnd.isopod.base.v1"
#define OCI_MT_STAGE_CONFIG "application/vnd.isopod.stage.config.v1+json"
#define OCI_MT_BASE_CONFIG "application/vnd.isopod.base.config.v1+json"
#define OCI_MT_STAGE_LAYER "application/vnd.isopod.stage.layer.v1.qcow2"
#define OCI_MT_BASE_LAYER "application/vnd.isopod.base.image.v1.raw"
/* What a reader accepts: a manifest or config as any JSON document a tool
 * reads (JSON_MAX_BYTES: ours are a few hundred bytes; the distribution
 * spec allows 4 MiB); a blob at most 1 TiB. */
#define OCI_MANIFEST_MAX (1u << 20)
#define OCI_BLOB_MAX (1LL << 40)
/* "sha256:" + 64 hex + NUL */
#define OCI_DIGEST_SZ 72

enum oci_kind { OCI_STAGE = 1, OCI_BASE = 2 };

struct oci_desc {
	char digest[OCI_DIGEST_SZ];
	long long size;
};

struct oci_manifest {
	enum oci_kind kind;
	struct oci_desc config, layer;
	int has_parent;
	struct oci_desc parent; /* the subject: a stage's parent manifest */
	char id[80];            /* annotation dev.isopod.id (informative) */
};

/* REGISTRY/REPO[:TAG|@sha256:HEX].  REGISTRY is host[:port]; REPO is the
 * distribution spec's path of lower-case components. */
struct oci_ref {
	char host[256];
	char repo[256];
	char tag[129];
	char digest[OCI_DIGEST_SZ];
};

/* "sha256:" + 64 lower-case hex? */
int oci_digest_ok(const char *d);
/* A tag's syntax: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}. */
int oci_tag_ok(const char *t);
/* Parse a reference; without a tag or digest the tag is "latest".  0, or
 * -1 with why. */
int oci_ref_parse(const char *s, struct oci_ref *r, char *why, size_t wsz);

/* The manifest's bytes (malloc'd, *len set; NULL when out of memory). */
char *oci_manifest_build(const struct oci_manifest *m, size_t *len);
/* Parse and check an untrusted manifest: the shape above exactly (media
 * types, one layer, digests' syntax, sizes in range, a subject for a stage
 * and none for a base).  0, or -1 with why. */
int oci_manifest_parse(const char *buf, size_t n, struct oci_manifest *m, char *why, size_t wsz);

/* A stage's config: its meta without "seal" and "pulled" (this host's).
 * New reference, NULL when out of memory. */
json_t *oci_stage_config(json_t *meta);
/* Check an untrusted stage config: id st-<hex>; parent null or an id;
 * depth 1..64 (1 exactly when parent is null); label and name null or
 * strings; base {flavor string, sha256 hex}.  0, or -1 with why. */
int oci_stage_config_check(json_t *cfg, char *why, size_t wsz);
/* Check an untrusted base config: {flavor: [a-z0-9-]{1,32}, sha256: sha}. */
int oci_base_config_check(json_t *cfg, const char *sha, char *why, size_t wsz);
/* Canonical bytes of a config (sorted keys, compact).  malloc'd. */
char *oci_json_bytes(json_t *j, size_t *len);

#endif
