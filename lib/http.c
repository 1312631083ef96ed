/* http.c - see http.h.  libc only. */

#include "http.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 tchar */
static int tchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int hostchar(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '-' || c == '_';
}

size_t http_head_len(const char *p, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		if (p[i] != '\n')
			continue;
		if (p[i + 1] == '\n')
			return i + 2;
		if (p[i + 1] == '\r' && i + 2 < n && p[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

size_t http_head_len_more(const char *p, size_t n, size_t seen)
{
	/* an end ("\n\n" or "\n\r\n") not within p[0..seen) starts at
	 * seen - 2 or later */
	size_t from = seen > 2 ? seen - 2 : 0, k;

	if (from >= n)
		return 0;
	k = http_head_len(p + from, n - from);
	return k ? from + k : 0;
}

/* The end of the line starting at p (before "\r\n" or "\n"), its next
 * line in *next; NULL when there is no '\n' or a bare CR inside. */
static const char *line_end(const char *p, const char *end, const char **next)
{
	const char *nl = memchr(p, '\n', (size_t)(end - p)), *e;

	if (!nl)
		return NULL;
	e = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
	if (memchr(p, '\r', (size_t)(e - p)))
		return NULL;
	*next = nl + 1;
	return e;
}

static int parse_port(const char *s, size_t n, unsigned *port)
{
	unsigned v = 0;

	if (n == 0 || n > 5)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*port = v;
	return 0;
}

/* host[:port] or [v6][:port] in s[0..n); dflt 0: a port is required. */
static int parse_authority(const char *s, size_t n, struct http_req *r, unsigned dflt,
			   const char **why)
{
	const char *h = s, *colon;
	size_t hn;

	if (memchr(s, '@', n)) {
		*why = "user info in the target";
		return -1;
	}
	if (n && s[0] == '[') {
		const char *rb = memchr(s, ']', n);

		if (!rb) {
			*why = "bad IPv6 literal";
			return -1;
		}
		h = s + 1;
		hn = (size_t)(rb - h);
		colon = rb + 1 < s + n ? rb + 1 : NULL;
		if (colon && *colon != ':') {
			*why = "bad IPv6 literal";
			return -1;
		}
		for (size_t i = 0; i < hn; i++)
			if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f') ||
			      (h[i] >= 'A' && h[i] <= 'F') || h[i] == ':' || h[i] == '.')) {
				*why = "bad IPv6 literal";
				return -1;
			}
		r->ipv6 = 1;
	} else {
		colon = memchr(s, ':', n);
		hn = colon ? (size_t)(colon - s) : n;
		for (size_t i = 0; i < hn; i++)
			if (!hostchar((unsigned char)h[i])) {
				*why = "bad character in the host";
				return -1;
			}
	}
	if (hn == 0 || hn > HTTP_HOST_MAX) {
		*why = hn ? "host too long" : "no host in the target";
		return -1;
	}
	memcpy(r->host, h, hn);
	r->host[hn] = '\0';
	if (colon) {
		if (parse_port(colon + 1, (size_t)(s + n - colon - 1), &r->port) < 0) {
			*why = "bad port";
			return -1;
		}
	} else if (dflt) {
		r->port = dflt;
	} else {
		*why = "CONNECT needs host:port";
		return -1;
	}
	return 0;
}

int http_parse_request(const char *p, size_t n, struct http_req *r, const char **why)
{
	const char *end = p + n, *e, *next, *sp1, *sp2, *t, *c;
	size_t ml, tl;
	struct http_hdr h;

	memset(r, 0, sizeof *r);
	*why = "malformed request line";
	if (n > HTTP_HEAD_MAX) {
		*why = "request head too large";
		return -1;
	}
	if (!(e = line_end(p, end, &next)))
		return -1;
	if (!(sp1 = memchr(p, ' ', (size_t)(e - p))))
		return -1;
	ml = (size_t)(sp1 - p);
	if (ml == 0 || ml >= sizeof r->method)
		return -1;
	for (size_t i = 0; i < ml; i++)
		if (!tchar((unsigned char)p[i]))
			return -1;
	memcpy(r->method, p, ml);
	r->method[ml] = '\0';
	t = sp1 + 1;
	if (!(sp2 = memchr(t, ' ', (size_t)(e - t))))
		return -1;
	tl = (size_t)(sp2 - t);
	if (tl == 0)
		return -1;
	for (size_t i = 0; i < tl; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			return -1;
	if ((size_t)(e - sp2 - 1) == 8 && !memcmp(sp2 + 1, "HTTP/1.1", 8))
		r->version = "HTTP/1.1";
	else if ((size_t)(e - sp2 - 1) == 8 && !memcmp(sp2 + 1, "HTTP/1.0", 8))
		r->version = "HTTP/1.0";
	else {
		*why = "not HTTP/1.0 or HTTP/1.1";
		return -1;
	}

	if (!strcmp(r->method, "CONNECT")) {
		r->connect = 1;
		if (parse_authority(t, tl, r, 0, why) < 0)
			return -1;
	} else if (tl >= 7 && !strncasecmp(t, "http://", 7)) {
		const char *a = t + 7, *ae = a;

		while (ae < t + tl && *ae != '/' && *ae != '?' && *ae != '#')
			ae++;
		if (parse_authority(a, (size_t)(ae - a), r, 80, why) < 0)
			return -1;
		r->path = ae;
		r->path_len = (size_t)(t + tl - ae);
	} else if (tl >= 8 && !strncasecmp(t, "https://", 8)) {
		*why = "an https:// URI in a plain request (use CONNECT)";
		return -1;
	} else {
		*why = "not a proxy request (CONNECT or an absolute http:// URI)";
		return -1;
	}

	r->hdrs = next;
	/* The head ends with its empty line: the headers are what precedes it. */
	if (end - next >= 2 && end[-2] == '\r' && end[-1] == '\n' && end - next >= 2)
		r->hdrs_len = (size_t)(end - next) - 2;
	else if (end - next >= 1 && end[-1] == '\n')
		r->hdrs_len = (size_t)(end - next) - 1;
	else
		return -1;
	/* The empty line itself: "\r\n" or "\n" right after the last header
	 * (or the request line); otherwise the head was cut in the middle. */
	if (r->hdrs_len && r->hdrs[r->hdrs_len - 1] != '\n') {
		*why = "malformed header";
		return -1;
	}
	c = r->hdrs;
	while (c < r->hdrs + r->hdrs_len) {
		int k = http_next_header(&c, r->hdrs + r->hdrs_len, &h);

		if (k < 0) {
			*why = "malformed header";
			return -1;
		}
		if (k == 0)
			break;
	}
	return 0;
}

int http_next_header(const char **cur, const char *end, struct http_hdr *h)
{
	const char *p = *cur, *e, *next, *colon, *v, *ve;

	if (p >= end)
		return 0;
	if (!(e = line_end(p, end, &next)) || e == p)
		return -1;
	if (*p == ' ' || *p == '\t') /* obsolete line folding */
		return -1;
	if (!(colon = memchr(p, ':', (size_t)(e - p))) || colon == p)
		return -1;
	for (const char *q = p; q < colon; q++)
		if (!tchar((unsigned char)*q))
			return -1;
	for (const char *q = colon + 1; q < e; q++)
		if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
			return -1;
	v = colon + 1;
	ve = e;
	while (v < ve && (*v == ' ' || *v == '\t'))
		v++;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	h->name = p;
	h->name_len = (size_t)(colon - p);
	h->value = v;
	h->value_len = (size_t)(ve - v);
	*cur = next;
	return 1;
}

int http_hdr_is(const struct http_hdr *h, const char *name)
{
	return strlen(name) == h->name_len && !strncasecmp(h->name, name, h->name_len);
}

int http_hdr_prefix(const struct http_hdr *h, const char *prefix)
{
	size_t n = strlen(prefix);

	return h->name_len >= n && !strncasecmp(h->name, prefix, n);
}
