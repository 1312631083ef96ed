/* http_test.c - unit tests of lib/http.c: the request-head parser of
 * isopod-broker, which reads what a guest sends.  Built by t/run-unit with
 * ASan + UBSan; every head is copied into a heap buffer of exactly its size.
 * (t/run-unit links frame.c and util.c only: the code under test is
 * included.) */
#include "http.c"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

static char *buf;

/* Parse s (a complete head, or not) from an exact-size copy. */
static int parse(const char *s, struct http_req *r, const char **why)
{
	size_t n = strlen(s);

	free(buf);
	buf = malloc(n ? n : 1);
	if (!buf)
		abort();
	memcpy(buf, s, n);
	return http_parse_request(buf, n, r, why);
}

static size_t head_len(const char *s)
{
	size_t n = strlen(s), r;
	char *b = malloc(n ? n : 1);

	if (!b)
		abort();
	memcpy(b, s, n);
	r = http_head_len(b, n);
	free(b);
	return r;
}

static void test_head_len(void)
{
	ok(head_len("GET http://a.test/ HTTP/1.1\r\nA: b\r\n\r\nBODY") == 37, "CRLF head");
	ok(head_len("GET http://a.test/ HTTP/1.1\nA: b\n\nBODY") == 34, "LF head");
	ok(head_len("GET http://a.test/ HTTP/1.1\r\nA: b\r\n\r") == 0, "incomplete: 0");
	ok(head_len("") == 0 && head_len("\n") == 0, "empty: 0");
	ok(head_len("\n\n") == 2, "a bare empty line is a (malformed) head");
}

/* A head read in pieces: for every cut where the first piece has no end
 * yet, the incremental scan finds the same end as a scan of the whole,
 * reading nothing outside the buffer. */
static void test_head_len_more(void)
{
	static const char *const heads[] = {
		"GET http://a.test/ HTTP/1.1\r\nA: b\r\n\r\nBODY",
		"GET http://a.test/ HTTP/1.1\nA: b\n\nBODY",
		"GET http://a.test/ HTTP/1.1\r\nA: b\r\n\r",
		"\n\n",
		"\n\r\n",
		"x\r\n\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nA: \r\r\n\n",
	};
	int all = 1;

	for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
		size_t n = strlen(heads[i]), want = head_len(heads[i]);
		char *b = malloc(n ? n : 1);

		if (!b)
			abort();
		memcpy(b, heads[i], n);
		for (size_t seen = 0; seen <= n; seen++) {
			if (http_head_len(b, seen))
				break; /* the broker would have stopped reading */
			for (size_t m = seen; m <= n; m++)
				if (http_head_len_more(b, m, seen) != http_head_len(b, m) ||
				    (m == n && http_head_len_more(b, m, seen) != want))
					all = 0;
		}
		free(b);
	}
	ok(all, "incremental head scan: the same end at every cut");
	ok(http_head_len_more("ab\n", 3, 3) == 0 && http_head_len_more("", 0, 5) == 0,
	   "incremental head scan: nothing new, nothing found");
}

static void test_requests(void)
{
	struct http_req r;
	struct http_hdr h;
	const char *why = NULL, *c;
	int n;

	ok(parse("CONNECT pkg.test:443 HTTP/1.1\r\nHost: pkg.test:443\r\n\r\n", &r, &why) == 0 &&
		   r.connect && !strcmp(r.host, "pkg.test") && r.port == 443 &&
		   !strcmp(r.version, "HTTP/1.1") && !strcmp(r.method, "CONNECT"),
	   "CONNECT host:port");
	ok(parse("GET http://Pkg.Test/a/b?c=d HTTP/1.0\r\n\r\n", &r, &why) == 0 && !r.connect &&
		   !strcmp(r.host, "Pkg.Test") && r.port == 80 && r.path_len == 8 &&
		   !memcmp(r.path, "/a/b?c=d", 8) && !strcmp(r.version, "HTTP/1.0") && r.hdrs_len == 0,
	   "absolute form, default port, case kept");
	ok(parse("POST HTTP://pkg.test:8080 HTTP/1.1\nX: 1\n\n", &r, &why) == 0 && r.port == 8080 &&
		   r.path_len == 0 && !strcmp(r.method, "POST") && r.hdrs_len == 5,
	   "any method, scheme case-insensitive, no path, LF lines");
	ok(parse("GET http://pkg.test?q HTTP/1.1\r\n\r\n", &r, &why) == 0 && r.path_len == 2 &&
		   r.path[0] == '?', "a query without a path");
	ok(parse("CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n", &r, &why) == 0 && r.ipv6 &&
		   !strcmp(r.host, "2001:db8::1") && r.port == 443, "an IPv6 literal is flagged");
	ok(parse("GET http://10.0.0.1/ HTTP/1.1\r\n\r\n", &r, &why) == 0 && !strcmp(r.host, "10.0.0.1"),
	   "an IPv4 literal is returned as is (the broker refuses it)");

	/* headers */
	ok(parse("GET http://a.test/ HTTP/1.1\r\nHost: x\r\nProxy-Authorization:  Basic  \t\r\n"
		 "Empty:\r\n\r\n", &r, &why) == 0, "headers parse");
	c = r.hdrs;
	n = http_next_header(&c, r.hdrs + r.hdrs_len, &h);
	ok(n == 1 && http_hdr_is(&h, "HOST") && h.value_len == 1 && h.value[0] == 'x', "header 1");
	n = http_next_header(&c, r.hdrs + r.hdrs_len, &h);
	ok(n == 1 && http_hdr_prefix(&h, "proxy-") && h.value_len == 5 && !memcmp(h.value, "Basic", 5),
	   "header 2, blanks trimmed");
	n = http_next_header(&c, r.hdrs + r.hdrs_len, &h);
	ok(n == 1 && h.value_len == 0 && !http_hdr_is(&h, "Empt"), "header 3, empty value");
	ok(http_next_header(&c, r.hdrs + r.hdrs_len, &h) == 0, "then the end");

	/* refusals, each with a reason */
	static const char *const bad[] = {
		"GET / HTTP/1.1\r\nHost: pkg.test\r\n\r\n",
		"GET https://pkg.test/ HTTP/1.1\r\n\r\n",
		"GET ftp://pkg.test/ HTTP/1.1\r\n\r\n",
		"CONNECT pkg.test HTTP/1.1\r\n\r\n",
		"CONNECT pkg.test:0 HTTP/1.1\r\n\r\n",
		"CONNECT pkg.test:65536 HTTP/1.1\r\n\r\n",
		"CONNECT pkg.test:44a HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\n\r\n",
		"GET http://user:pw@pkg.test/ HTTP/1.1\r\n\r\n",
		"GET http://pkg.test:/ HTTP/1.1\r\n\r\n",
		"GET http://pk%67.test/ HTTP/1.1\r\n\r\n",
		"GET http:/// HTTP/1.1\r\n\r\n",
		"GET http://pkg.test/ HTTP/2\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1 \r\n\r\n",
		"GET  http://pkg.test/ HTTP/1.1\r\n\r\n",
		"G@T http://pkg.test/ HTTP/1.1\r\n\r\n",
		"GET http://pkg.test/\x01 HTTP/1.1\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nNo colon\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\n: empty name\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nX: \x7f\r\n\r\n",
		"GET http://[::1/ HTTP/1.1\r\n\r\n",
		"CONNECT [::1]x:443 HTTP/1.1\r\n\r\n",
		"CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\n",
		"GET http://pkg.test/ HTTP/1.1\r\nX: y",
		"",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why = NULL;
		ok(parse(bad[i], &r, &why) == -1 && why && *why, "refused: %.*s -> %s",
		   (int)strcspn(bad[i], "\r\n"), bad[i], why ? why : "(no reason)");
	}
	{
		char *big = malloc(HTTP_HEAD_MAX + 2);

		memset(big, 'a', HTTP_HEAD_MAX + 1);
		big[HTTP_HEAD_MAX + 1] = '\0';
		ok(parse(big, &r, &why) == -1 && strstr(why, "too large"), "a head over 16 KiB");
		free(big);
	}
	{
		char host[300];

		snprintf(host, sizeof host, "GET http://%0254d/ HTTP/1.1\r\n\r\n", 0);
		ok(parse(host, &r, &why) == -1 && !strcmp(why, "host too long"), "a 254-byte host");
		snprintf(host, sizeof host, "GET http://%0253d/ HTTP/1.1\r\n\r\n", 0);
		ok(parse(host, &r, &why) == 0 && strlen(r.host) == 253, "a 253-byte host");
	}
}

int main(void)
{
	test_head_len();
	test_head_len_more();
	test_requests();
	free(buf);
	return tap_done();
}
