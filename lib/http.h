/* http.h - the request head of a forward proxy (libc only, fuzzed by
 * fuzz/http_fuzz.c): isopod-broker's parser of what a guest sends it.
 *
 * Accepted: a request line "METHOD SP TARGET SP HTTP/1.0|HTTP/1.1" where
 * TARGET is the authority "host:port" of a CONNECT or an absolute
 * "http://host[:port][/path]" URI (any method), then header lines
 * "Name: value", then an empty line; lines end in CRLF or LF.  Anything
 * else (origin-form targets, https:// URIs, user info, obsolete line
 * folding, control bytes, a head over HTTP_HEAD_MAX) is refused with a
 * short reason.  host is returned as written (case kept): a name, an IPv4
 * literal, or (ipv6 set) the inside of a bracketed IPv6 literal. */
#ifndef ISOPOD_HTTP_H
#define ISOPOD_HTTP_H

#include <stddef.h>

#define HTTP_HEAD_MAX 16384
#define HTTP_HOST_MAX 253

struct http_req {
	char method[32];
	char host[HTTP_HOST_MAX + 1];
	unsigned port;
	int connect;           /* CONNECT host:port */
	int ipv6;              /* host was [..] */
	const char *path;      /* absolute form: what follows the authority ("" when nothing) */
	size_t path_len;
	const char *version;   /* "HTTP/1.0" or "HTTP/1.1" (static) */
	const char *hdrs;      /* the header lines, up to the empty line */
	size_t hdrs_len;
};

struct http_hdr {
	const char *name, *value;
	size_t name_len, value_len; /* value without surrounding blanks */
};

/* The length of the head in p[0..n) through its empty line, or 0 when it
 * is not complete yet. */
size_t http_head_len(const char *p, size_t n);

/* The same for a head read in pieces, when p[0..seen) held no end of head
 * yet: only the bytes from seen - 2 on are looked at, so a guest that sends
 * its head a byte at a time costs a constant amount of work per byte, not
 * the whole head again. */
size_t http_head_len_more(const char *p, size_t n, size_t seen);

/* Parse a complete head (its length from http_head_len).  0, or -1 with
 * *why a short static reason.  r points into p. */
int http_parse_request(const char *p, size_t n, struct http_req *r, const char **why);

/* Iterate the header lines in [*cur, end): 1 with the next one in h, 0 at
 * the end, -1 on a malformed line.  Start with *cur = r->hdrs, end =
 * r->hdrs + r->hdrs_len. */
int http_next_header(const char **cur, const char *end, struct http_hdr *h);

/* Does the header's name equal name (ASCII case-insensitive)? prefix: does
 * it start with it? */
int http_hdr_is(const struct http_hdr *h, const char *name);
int http_hdr_prefix(const struct http_hdr *h, const char *prefix);

#endif
