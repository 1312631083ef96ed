/* ocireg.c - a registry client over libcurl (see ocireg.h). */
#include "ocireg.h"
#include "util.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* What one request collects. */
struct xfer {
	/* body into memory (cap) or into fd, hashed */
	char *mem;
	size_t n, cap;
	int fd;
	long long got, want; /* want < 0: no size to hold the body to */
	int too_long, werr;
	crypto_hash_sha256_state sha;
	/* upload from fd or memory */
	int in_fd;
	const char *in_mem;
	size_t in_n, in_off;
	/* headers we read */
	char location[1024];
	char digest[OCI_DIGEST_SZ];
};

static int fail(struct reg *r, int e, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(struct reg *r, int e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof r->err, fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	size_t n = sz * nm;

	/* Never more than the descriptor says: a registry that sends more is
	 * lying, and it must not fill the disk first. */
	if (x->want >= 0 && x->got + (long long)n > x->want) {
		x->too_long = 1;
		return 0;
	}
	crypto_hash_sha256_update(&x->sha, (const unsigned char *)p, n);
	x->got += (long long)n;
	if (x->fd >= 0) {
		if (write_all(x->fd, p, n) < 0) {
			x->werr = errno;
			return 0;
		}
		return n;
	}
	if (x->n + n > x->cap) {
		x->too_long = 1;
		return 0;
	}
	memcpy(x->mem + x->n, p, n);
	x->n += n;
	return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	size_t n = sz * nm, k = n;
	const char *v;

	while (k && (p[k - 1] == '\n' || p[k - 1] == '\r'))
		k--;
	if (k > 9 && !strncasecmp(p, "Location:", 9)) {
		v = p + 9;
		while (v < p + k && *v == ' ')
			v++;
		snprintf(x->location, sizeof x->location, "%.*s", (int)(p + k - v), v);
	} else if (k > 22 && !strncasecmp(p, "Docker-Content-Digest:", 22)) {
		v = p + 22;
		while (v < p + k && *v == ' ')
			v++;
		if (p + k - v == 71)
			snprintf(x->digest, sizeof x->digest, "%.71s", v);
		if (!oci_digest_ok(x->digest))
			x->digest[0] = 0;
	}
	return n;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *arg)
{
	struct xfer *x = arg;
	size_t n = sz * nm;

	if (x->in_mem) {
		if (n > x->in_n - x->in_off)
			n = x->in_n - x->in_off;
		memcpy(p, x->in_mem + x->in_off, n);
		x->in_off += n;
		return n;
	}
	for (;;) {
		ssize_t k = read(x->in_fd, p, n);

		if (k >= 0)
			return (size_t)k;
		if (errno != EINTR)
			return CURL_READFUNC_ABORT;
	}
}

int reg_open(struct reg *r, const struct oci_ref *ref, const struct reg_opts *o)
{
	CURL *c;
	FILE *f;
	char line[600];
	struct curl_slist *h = NULL;

	memset(r, 0, sizeof *r);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || !(c = curl_easy_init()))
		return fail(r, EIO, "unable to start libcurl");
	r->curl = c;
	snprintf(r->origin, sizeof r->origin, "%s://%s", o->plain_http ? "http" : "https", ref->host);
	snprintf(r->base, sizeof r->base, "%s/v2/%s", r->origin, ref->repo);
	if (o->auth_file) {
		size_t k;

		if (!(f = fopen(o->auth_file, "re")))
			return fail(r, errno, "unable to open the credential file %s: %s",
				    o->auth_file, strerror(errno));
		if (!fgets(line, sizeof line, f))
			line[0] = 0;
		fclose(f);
		k = strcspn(line, "\r\n");
		line[k] = 0;
		if (!strncasecmp(line, "basic ", 6) && strchr(line + 6, ':')) {
			snprintf(r->userpwd, sizeof r->userpwd, "%s", line + 6);
		} else if (!strncasecmp(line, "bearer ", 7) && line[7]) {
			char hv[620];

			snprintf(hv, sizeof hv, "Authorization: Bearer %s", line + 7);
			h = curl_slist_append(NULL, hv);
		} else {
			sodium_memzero(line, sizeof line);
			return fail(r, EINVAL, "the credential file %s: want one line, "
				    "\"basic USER:PASSWORD\" or \"bearer TOKEN\"", o->auth_file);
		}
		sodium_memzero(line, sizeof line);
	}
	r->hdrs = h;
	if (o->ca_file)
		snprintf(r->ca_file, sizeof r->ca_file, "%s", o->ca_file);
	if (o->timeout_ms > 0)
		r->deadline_ms = mono_ms() + o->timeout_ms;
	return 0;
}

void reg_close(struct reg *r)
{
	if (r->curl)
		curl_easy_cleanup(r->curl);
	curl_slist_free_all(r->hdrs);
	sodium_memzero(r->userpwd, sizeof r->userpwd);
	r->curl = NULL;
	r->hdrs = NULL;
}

/* One request.  method: "GET", "HEAD", "POST", "PUT".  Returns the HTTP
 * status, or -1 with r->err (transport). */
static long request(struct reg *r, const char *method, const char *url, const char *ctype,
		    const char *accept, struct xfer *x, int follow)
{
	CURL *c = r->curl;
	struct curl_slist *h = NULL, *s;
	char hv[300];
	long status = 0;
	long long left = 0;
	CURLcode rc;

	/* Each request from a clean handle (the connection stays). */
	curl_easy_reset(c);
	if (r->deadline_ms) {
		left = r->deadline_ms - mono_ms();
		if (left <= 0) {
			fail(r, ETIMEDOUT, "%s %s: out of time (the caller's deadline)", method, url);
			return -1;
		}
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)left);
	}
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	/* A redirect keeps the registry's scheme: an https registry never
	 * sends us to plain http. */
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, strncmp(r->origin, "https:", 6) ? "http" : "https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 15L);
	/* A registry that stops sending for 60 s is gone. */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	/* No proxy from the environment: the registry is named, not routed. */
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	if (r->ca_file[0])
		curl_easy_setopt(c, CURLOPT_CAINFO, r->ca_file);
	curl_easy_setopt(c, CURLOPT_URL, url);
	for (s = r->hdrs; s; s = s->next)
		h = curl_slist_append(h, s->data);
	if (r->userpwd[0]) {
		curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
		curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
	}
	if (accept) {
		snprintf(hv, sizeof hv, "Accept: %s", accept);
		h = curl_slist_append(h, hv);
	}
	if (ctype) {
		snprintf(hv, sizeof hv, "Content-Type: %s", ctype);
		h = curl_slist_append(h, hv);
	}
	h = curl_slist_append(h, "Expect:"); /* no 100-continue round trip */
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	/* A blob GET may be redirected to storage (never with our
	 * credentials: libcurl keeps them to the first host). */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	if (!strcmp(method, "HEAD")) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (!strcmp(method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	} else if (!strcmp(method, "PUT")) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(c, CURLOPT_READDATA, x);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(x->in_mem ? (long long)x->in_n : x->want));
	}
	rc = curl_easy_perform(c);
	curl_slist_free_all(h);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	/* Ours, not curl's connect or stall timeout: curl measures on a clock
	 * of its own, which may run a little ahead of ours (slack: 100 ms and
	 * 1 per mille of what was left). */
	if (rc == CURLE_OPERATION_TIMEDOUT && r->deadline_ms &&
	    mono_ms() + 100 + left / 1000 >= r->deadline_ms) {
		fail(r, ETIMEDOUT, "%s %s: out of time (the caller's deadline)", method, url);
		return -1;
	}
	if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && (x->too_long || x->werr))) {
		fail(r, EIO, "%s %s: %s", method, url, curl_easy_strerror(rc));
		return -1;
	}
	return status;
}

static void xfer_init(struct xfer *x)
{
	memset(x, 0, sizeof *x);
	x->fd = -1;
	x->in_fd = -1;
	x->want = -1;
	crypto_hash_sha256_init(&x->sha);
}

static void xfer_digest(struct xfer *x, char out[OCI_DIGEST_SZ])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256_final(&x->sha, h);
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", h[i]);
}

static int status_fail(struct reg *r, const char *what, long st)
{
	return fail(r, st == 404 ? ENOENT : st == 401 || st == 403 ? EACCES : EIO,
		    "%s: the registry answered HTTP %ld", what, st);
}

/* method ("HEAD" or "GET") r->base/what/name (what: "blobs" or
 * "manifests"), into x: 1 on HTTP 200; 0 on a HEAD's 404 (not there); -1
 * with r->err (transport, or the status).  Redirects are followed for
 * blobs only (a registry may keep them in other storage); a manifest
 * comes from the registry named. */
static int retrieve(struct reg *r, const char *method, const char *what, const char *name,
		    const char *accept, struct xfer *x)
{
	char url[800];
	long st;

	snprintf(url, sizeof url, "%s/%s/%s", r->base, what, name);
	st = request(r, method, url, NULL, accept, x, !strcmp(what, "blobs"));
	if (st < 0)
		return -1;
	if (st == 200)
		return 1;
	if (st == 404 && !strcmp(method, "HEAD"))
		return 0;
	return status_fail(r, url, st);
}

int reg_blob_head(struct reg *r, const char *digest)
{
	struct xfer x;

	xfer_init(&x);
	return retrieve(r, "HEAD", "blobs", digest, NULL, &x);
}

static int blob_put(struct reg *r, const char *digest, struct xfer *x, long long size)
{
	char url[1600], loc[1400];
	long st;

	snprintf(url, sizeof url, "%s/blobs/uploads/", r->base);
	st = request(r, "POST", url, NULL, NULL, x, 0);
	if (st < 0)
		return -1;
	if (st != 202 || !x->location[0])
		return status_fail(r, "starting an upload", st);
	/* The upload goes where the registry says, with our credential: only
	 * to the registry itself (a path, or an address on its own origin);
	 * anywhere else would hand the credential to another host (review). */
	if (x->location[0] == '/' && x->location[1] != '/')
		snprintf(loc, sizeof loc, "%s%s", r->origin, x->location);
	else if (!strncmp(x->location, r->origin, strlen(r->origin)) &&
		 x->location[strlen(r->origin)] == '/')
		snprintf(loc, sizeof loc, "%s", x->location);
	else
		return fail(r, EIO, "the registry sent the upload elsewhere (not %s): refused", r->origin);
	snprintf(url, sizeof url, "%s%cdigest=%s", loc, strchr(loc, '?') ? '&' : '?', digest);
	x->want = size;
	st = request(r, "PUT", url, "application/octet-stream", NULL, x, 0);
	if (st < 0)
		return -1;
	if (st != 201)
		return status_fail(r, "uploading a blob", st);
	r->bytes_up += size;
	return 0;
}

int reg_blob_put(struct reg *r, const char *digest, int fd, long long size)
{
	struct xfer x;

	xfer_init(&x);
	x.in_fd = fd;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return fail(r, errno, "lseek: %s", strerror(errno));
	return blob_put(r, digest, &x, size);
}

int reg_blob_put_mem(struct reg *r, const char *digest, const char *buf, size_t n)
{
	struct xfer x;

	xfer_init(&x);
	x.in_mem = buf;
	x.in_n = n;
	return blob_put(r, digest, &x, (long long)n);
}

/* GET url into x, then hold it to d. */
static int blob_get(struct reg *r, const struct oci_desc *d, struct xfer *x)
{
	char got[OCI_DIGEST_SZ];
	int ok;

	x->want = d->size;
	ok = retrieve(r, "GET", "blobs", d->digest, NULL, x);
	/* a write error aborts the transfer as a write error, never a
	 * transport failure: it is named before the status */
	if (x->werr)
		return fail(r, x->werr, "writing blob %s: %s", d->digest, strerror(x->werr));
	if (ok < 0)
		return -1;
	if (x->too_long)
		return fail(r, EBADMSG, "blob %s: the registry sent more than its %lld bytes",
			    d->digest, d->size);
	if (x->got != d->size)
		return fail(r, EBADMSG, "blob %s: the registry sent %lld bytes of %lld (truncated)",
			    d->digest, x->got, d->size);
	xfer_digest(x, got);
	if (strcmp(got, d->digest))
		return fail(r, EBADMSG, "blob %s: the registry sent bytes whose digest is %s",
			    d->digest, got);
	r->bytes_down += d->size;
	return 0;
}

int reg_blob_get(struct reg *r, const struct oci_desc *d, int fd)
{
	struct xfer x;

	xfer_init(&x);
	x.fd = fd;
	return blob_get(r, d, &x);
}

int reg_blob_get_mem(struct reg *r, const struct oci_desc *d, char **buf, size_t *n)
{
	struct xfer x;

	if (d->size > JSON_MAX_BYTES)
		return fail(r, EBADMSG, "blob %s: %lld bytes, more than a config may be", d->digest,
			    d->size);
	xfer_init(&x);
	x.cap = (size_t)d->size;
	x.mem = malloc(x.cap + 1);
	if (!x.mem)
		return fail(r, ENOMEM, "out of memory");
	if (blob_get(r, d, &x) < 0) {
		free(x.mem);
		return -1;
	}
	x.mem[x.n] = 0;
	*buf = x.mem;
	*n = x.n;
	return 0;
}

int reg_manifest_get(struct reg *r, const char *ref, char **buf, size_t *n,
		     char digest[OCI_DIGEST_SZ])
{
	struct xfer x;

	xfer_init(&x);
	x.cap = OCI_MANIFEST_MAX;
	x.mem = malloc(x.cap + 1);
	if (!x.mem)
		return fail(r, ENOMEM, "out of memory");
	/* too long is a write error, never a transport failure: it is named
	 * before the status */
	if (retrieve(r, "GET", "manifests", ref, OCI_MT_MANIFEST, &x) < 0 || x.too_long) {
		free(x.mem);
		if (x.too_long)
			return fail(r, EBADMSG, "manifest %s: more than %u bytes", ref,
				    OCI_MANIFEST_MAX);
		return -1;
	}
	x.mem[x.n] = 0;
	xfer_digest(&x, digest);
	if (oci_digest_ok(ref) && strcmp(ref, digest)) {
		free(x.mem);
		return fail(r, EBADMSG, "manifest %s: the registry sent a manifest whose digest is %s",
			    ref, digest);
	}
	*buf = x.mem;
	*n = x.n;
	return 0;
}

int reg_manifest_head(struct reg *r, const char *ref, char digest[OCI_DIGEST_SZ])
{
	struct xfer x;
	int ok;

	xfer_init(&x);
	ok = retrieve(r, "HEAD", "manifests", ref, OCI_MT_MANIFEST, &x);
	if (ok == 1)
		snprintf(digest, OCI_DIGEST_SZ, "%s", x.digest);
	return ok;
}

int reg_manifest_put(struct reg *r, const char *ref, const char *buf, size_t n)
{
	char url[800];
	struct xfer x;
	long st;

	xfer_init(&x);
	x.in_mem = buf;
	x.in_n = n;
	snprintf(url, sizeof url, "%s/manifests/%s", r->base, ref);
	st = request(r, "PUT", url, OCI_MT_MANIFEST, NULL, &x, 0);
	if (st < 0)
		return -1;
	if (st != 201)
		return status_fail(r, "putting a manifest", st);
	return 0;
}
