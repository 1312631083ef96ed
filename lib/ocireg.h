/* ocireg.h - the few calls of the OCI distribution spec (v1.1) that push
 * and pull need, over libcurl.  Every call returns -1 with the reason in
 * r->err and errno: ENOENT (404), EACCES (401/403), EBADMSG (the registry's
 * bytes are not what was asked for: a digest or size that differs), EIO
 * (anything else).  A blob is never trusted: reg_blob_get hashes what it
 * writes and refuses more or fewer bytes than the descriptor says. */
#ifndef ISOPOD_OCIREG_H
#define ISOPOD_OCIREG_H

#include "oci.h"

#include <stddef.h>

struct reg_opts {
	int plain_http;        /* http:// (a test registry); else https:// */
	const char *ca_file;   /* TLS: trust these CAs (else the system's) */
	const char *auth_file; /* "basic USER:PASSWORD" or "bearer TOKEN" (one line) */
	long long timeout_ms;  /* > 0: every request ends by then (ETIMEDOUT) */
};

struct reg {
	void *curl;
	void *hdrs; /* struct curl_slist of every request: Authorization */
	char origin[300];
	char base[600]; /* ORIGIN/v2/REPO */
	char userpwd[600];
	char ca_file[4096];
	char err[512];
	long long bytes_up, bytes_down; /* blob bytes moved */
	long long deadline_ms;          /* mono_ms; 0: none */
};

/* 0, or -1 with r->err. */
int reg_open(struct reg *r, const struct oci_ref *ref, const struct reg_opts *o);
void reg_close(struct reg *r);

/* Is the blob there (HEAD)?  1 yes, 0 no, -1. */
int reg_blob_head(struct reg *r, const char *digest);
/* Upload size bytes of fd (from offset 0) as the blob digest (POST then
 * PUT: monolithic).  0 or -1. */
int reg_blob_put(struct reg *r, const char *digest, int fd, long long size);
/* The same from memory. */
int reg_blob_put_mem(struct reg *r, const char *digest, const char *buf, size_t n);
/* Download the blob into fd (from its current offset), exactly d->size
 * bytes hashing to d->digest.  0 or -1 (EBADMSG: a lie). */
int reg_blob_get(struct reg *r, const struct oci_desc *d, int fd);
/* The same into memory (d->size <= JSON_MAX_BYTES); *buf malloc'd. */
int reg_blob_get_mem(struct reg *r, const struct oci_desc *d, char **buf, size_t *n);

/* GET the manifest of ref (a tag or a digest): *buf malloc'd, digest its
 * sha256 (computed here, never the registry's word).  A ref that is a
 * digest must match it (EBADMSG). */
int reg_manifest_get(struct reg *r, const char *ref, char **buf, size_t *n,
		     char digest[OCI_DIGEST_SZ]);
/* HEAD: 1 there (digest = the registry's Docker-Content-Digest, or "" when
 * it gave none), 0 not, -1. */
int reg_manifest_head(struct reg *r, const char *ref, char digest[OCI_DIGEST_SZ]);
/* PUT the manifest under ref (a tag or its digest). */
int reg_manifest_put(struct reg *r, const char *ref, const char *buf, size_t n);

#endif
