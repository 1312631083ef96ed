/* allow_test.c - egress allowlist patterns (lib/allow.c). */
#include "../../lib/allow.c" /* self-contained: t/run-unit links frame+util only */

#include <string.h>

#include "tap.h"

static int norm_ok(const char *in, const char *want)
{
	char out[300];
	const char *why = NULL;

	return allow_norm(out, sizeof out, in, &why) == 0 && !strcmp(out, want);
}

static const char *norm_why(const char *in)
{
	static char out[300];
	const char *why = NULL;

	if (allow_norm(out, sizeof out, in, &why) == 0)
		return NULL;
	return why;
}

int main(void)
{
	char big[400], out[300];
	const char *why;

	ok(norm_ok("pkg.test", "pkg.test"), "a plain name");
	ok(norm_ok("PKG.Test.", "pkg.test"), "lowercased, trailing dot dropped");
	ok(norm_ok("*.Wild.Test", "*.wild.test"), "a wildcard");
	ok(norm_ok("a-b.c0.test", "a-b.c0.test"), "hyphens and digits inside labels");
	ok((why = norm_why("pkg..test")) && strstr(why, "empty label"), "empty label: %s", why);
	ok((why = norm_why("-pkg.test")) && strstr(why, "starts with"), "leading hyphen: %s", why);
	ok((why = norm_why("pkg-.test")) && strstr(why, "ends with"), "trailing hyphen: %s", why);
	ok((why = norm_why("pkg.test-")) && strstr(why, "ends with"), "trailing hyphen, last label: %s", why);
	ok((why = norm_why("pk g.test")) && strstr(why, "not allowed"), "a space: %s", why);
	ok((why = norm_why("pkg.test/x")) && strstr(why, "not allowed"), "a slash: %s", why);
	ok((why = norm_why("")) && strstr(why, "empty"), "empty: %s", why);
	ok((why = norm_why(".")) && strstr(why, "empty"), "a lone dot: %s", why);
	ok((why = norm_why("x..")) && strstr(why, "empty label"), "two trailing dots: %s", why);
	ok(allow_name_norm(out, sizeof out, "pkg.test..") < 0, "a name with two trailing dots");
	ok((why = norm_why("198.51.100.10")) && strstr(why, "IP address"), "an IPv4 literal: %s", why);
	ok((why = norm_why("*.test")) && strstr(why, "two labels"), "a wildcard of a TLD: %s", why);
	ok((why = norm_why("*pkg.test")) && strstr(why, "'*.'"), "a '*' not followed by '.': %s", why);
	ok((why = norm_why("a.*.test")) && strstr(why, "not allowed"), "'*' inside: %s", why);
	ok((why = norm_why("*.")) != NULL, "'*.' alone: %s", why);
	memset(big, 'a', sizeof big);
	big[64] = '\0';
	ok((why = norm_why(big)) && strstr(why, "63"), "a 64-character label: %s", why);
	big[63] = '\0';
	ok(norm_why(big) == NULL, "a 63-character label");
	for (int i = 0; i < 300; i += 2)
		big[i] = 'a', big[i + 1] = '.';
	big[253] = '\0';
	ok(norm_why(big) == NULL, "253 characters");
	big[253] = 'a', big[254] = '\0';
	ok((why = norm_why(big)) && strstr(why, "253"), "254 characters: %s", why);
	ok(allow_norm(out, 4, "pkg.test", &why) < 0, "a too small buffer is an error, not an overflow");

	ok(allow_match("pkg.test", "pkg.test"), "exact match");
	ok(!allow_match("pkg.test", "a.pkg.test"), "a name does not match below itself");
	ok(!allow_match("pkg.test", "xpkg.test"), "no suffix match of a plain name");
	ok(allow_match("*.wild.test", "a.wild.test"), "wildcard: one level below");
	ok(allow_match("*.wild.test", "a.b.wild.test"), "wildcard: two levels below");
	ok(!allow_match("*.wild.test", "wild.test"), "wildcard: not the domain itself");
	ok(!allow_match("*.wild.test", "xwild.test"), "wildcard: label boundary respected");
	ok(!allow_match("*.wild.test", ".wild.test"), "wildcard: an empty label does not match");

	ok(allow_name_norm(out, sizeof out, "Other.TEST.") == 0 && !strcmp(out, "other.test"),
	   "names normalise like patterns");
	ok(allow_name_norm(out, sizeof out, "*.wild.test") < 0 && !*out, "a name cannot be a wildcard");
	ok(allow_name_norm(out, sizeof out, "10.0.0.1") < 0, "an IPv4 literal is not a name");

	/* ports */
	ok(norm_ok("PKG.test:8443", "pkg.test:8443"), "a name with a port");
	ok(norm_ok("*.Wild.test:22", "*.wild.test:22"), "a wildcard with a port");
	ok(norm_ok("pkg.test.:443", "pkg.test:443"), "a trailing dot before the port");
	ok(norm_ok("pkg.test:1", "pkg.test:1") && norm_ok("pkg.test:65535", "pkg.test:65535"),
	   "ports 1 and 65535");
	ok((why = norm_why("pkg.test:0")) && strstr(why, "1..65535"), "port 0: %s", why);
	ok((why = norm_why("pkg.test:65536")) && strstr(why, "1..65535"), "port 65536: %s", why);
	ok(norm_why("pkg.test:99999999999999999999") != NULL, "a huge port");
	ok(norm_why("pkg.test:") != NULL, "an empty port");
	ok(norm_why("pkg.test:08443") != NULL, "a leading zero");
	ok(norm_why("pkg.test:84x3") != NULL, "junk in the port");
	ok(norm_why("pkg.test:-1") != NULL, "a negative port");
	ok(norm_why("pkg.test:+80") != NULL, "a signed port");
	ok(norm_why("pkg.test:80:81") != NULL, "two ports");
	ok(norm_why(":80") != NULL, "a port without a name");
	ok(norm_why("10.0.0.1:80") != NULL, "an IPv4 literal with a port");
	ok(allow_match("pkg.test:8443", "pkg.test") && !allow_match("pkg.test:8443", "pkg.test:8443"),
	   "the name part matches, the port aside");
	ok(allow_match("*.wild.test:22", "a.wild.test") && !allow_match("*.wild.test:22", "wild.test"),
	   "a wildcard with a port matches names below it");
	ok(!allow_match("pkg.test:80", "pkg.tes") && !allow_match("pkg.test:80", "pkg.test8"),
	   "no prefix match across the colon");
	ok(allow_port("pkg.test", 80) && allow_port("pkg.test", 443), "no port: 80 and 443");
	ok(!allow_port("pkg.test", 22) && !allow_port("pkg.test", 8080) && !allow_port("pkg.test", 0),
	   "no port: nothing else");
	ok(allow_port("pkg.test:8443", 8443) && !allow_port("pkg.test:8443", 443) &&
		   !allow_port("pkg.test:8443", 80),
	   "a port: exactly that one");
	ok(allow_port("*.wild.test:22", 22) && !allow_port("*.wild.test", 22), "wildcards alike");
	return tap_done();
}
