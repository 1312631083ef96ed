/* config_test.c - unit tests of lib/config.c, the one reader of the
 * `key = value` configuration files (config_each, config_value).  Built by
 * t/run-unit with ASan + UBSan. */
#include "../../lib/config.c" /* self-contained: t/run-unit links frame+util only */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

static char dir[] = "/tmp/config-test.XXXXXX";

static const char *file(const char *name, const char *text)
{
	static char p[4][512];
	static int k;
	char *q = p[k++ % 4];
	FILE *f;

	snprintf(q, 512, "%s/%s", dir, name);
	if ((f = fopen(q, "w"))) {
		fputs(text, f);
		fclose(f);
	}
	return q;
}

/* Every line a callback saw, "VALUE@WHERE;" after another. */
struct seen {
	char all[16384];
	size_t longest;
	int stop_at; /* stop (return 1) at this call, 1-based; 0: never */
	int calls;
};

static int see(const char *val, const char *where, void *arg)
{
	struct seen *s = arg;
	size_t n = strlen(s->all);

	s->calls++;
	if (strlen(val) > s->longest)
		s->longest = strlen(val);
	snprintf(s->all + n, sizeof s->all - n, "%.100s@%s;", val, strrchr(where, '/') + 1);
	return s->stop_at == s->calls;
}

static int each(const char *path, const char *key, struct seen *s, char *msg, size_t msz)
{
	memset(s, 0, sizeof *s);
	return config_each(path, key, see, s, msg, msz);
}

int main(void)
{
	char msg[512], val[64], where[512], *big;
	struct seen s;
	const char *p, *q;
	int rc;

	if (!mkdtemp(dir))
		return 111;

	/* config_each: every line of the key, in order, FILE:LINE each: the
	 * file's text, the key, the lines seen ("VALUE@FILE:LINE;" each) */
	static const struct {
		const char *text, *key, *want, *what;
	} cases[] = {
		{ "# a comment\nnet = open\nk = one\n\n  k=two  \nk = three # why\n", "k",
		  "one@c:3;two@c:5;three@c:6;", "each line of the key, FILE:LINE" },
		{ "# a comment\nnet = open\nk = one\n", "net", "open@c:2;", "another key" },
		{ "net = open\n", "absent", "", "a key no line has" },
		/* from the first # on, wherever it is (the front end's ${line%%#*}) */
		{ "# k = commented\nk # = not a key line\nk = v#tail\nk#x = y\nk = # empty\n", "k",
		  "v@c:3;@c:5;", "# anywhere starts a comment" },
		/* blanks, tabs, CR, VT/FF around key and value; none inside */
		{ "\t k \t=\t a b \r\n\vk\f=\vc\v\nk\nkk = no\n k2 = no\n", "k", "a b@c:1;c@c:2;",
		  "blanks around key and value trimmed (isspace), inner kept; no = is no line" },
		{ "k = a = b\n", "k", "a = b@c:1;", "the value is all after the first =" },
		{ "k = last", "k", "last@c:1;", "a last line without a newline" },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int n = 0;

		for (const char *c = cases[i].want; (c = strchr(c, ';')); c++)
			n++;
		p = file("c", cases[i].text);
		ok(each(p, cases[i].key, &s, msg, sizeof msg) == n && !strcmp(s.all, cases[i].want),
		   "%s: %s", cases[i].what, s.all);
	}

	/* the callback stops it: -1, later lines unseen */
	p = file("c", "k = 1\nk = 2\nk = 3\n");
	memset(&s, 0, sizeof s);
	s.stop_at = 2;
	ok(config_each(p, "k", see, &s, msg, sizeof msg) == -1 && s.calls == 2,
	   "the callback's non-zero stops it: -1 after %d calls", s.calls);

	/* missing: 0, no call; missing below a file (ENOTDIR) as well */
	snprintf(where, sizeof where, "%s/none", dir);
	ok(each(where, "k", &s, msg, sizeof msg) == 0 && s.calls == 0, "a missing file: 0");
	snprintf(where, sizeof where, "%s/c/below", dir);
	ok(each(where, "k", &s, msg, sizeof msg) == 0 && s.calls == 0,
	   "a path below a file (ENOTDIR): 0, as the front end's [ -f ]");

	/* unreadable (root reads any mode: a directory is what cannot be read) */
	errno = 0;
	rc = each(dir, "k", &s, msg, sizeof msg);
	ok(rc == -2 && errno == EISDIR && !strncmp(msg, "unable to read ", 15) && strstr(msg, dir) &&
		   strstr(msg, strerror(EISDIR)),
	   "a file that cannot be read: -2, errno, \"%s\"", msg);

	/* a line longer than any buffer is one line: its tail is never a line
	 * of its own (with a 4096-byte fgets, "k = evil" below was one) */
	big = malloc(20000);
	if (!big)
		return 111;
	memset(big, 'x', 20000);
	memcpy(big, "# ", 2);
	memcpy(big + 4095, "k = evil\nk = good\nk = ", 22);
	big[19998] = '\n';
	big[19999] = '\0';
	p = file("c", big);
	ok(each(p, "k", &s, msg, sizeof msg) == 2 && !strncmp(s.all, "good@c:2;", 9) &&
		   s.longest == 19999 - 4095 - 22 - 1,
	   "a long comment's tail is no line (%.40s), a long value whole (%zu bytes)", s.all,
	   s.longest);
	free(big);

	/* config_value: the host's file, then the user's, the last line winning */
	p = file("host", "k = h1\nk = h2\nonlyhost = yes\n");
	q = file("user", "\n\nk = u1 # mine\n");
	setenv("ISOPOD_SYSCONFIG", p, 1);
	setenv("ISOPOD_CONFIG", q, 1);
	ok(config_value("k", val, sizeof val, where, sizeof where) == 1 && !strcmp(val, "u1") &&
		   !strcmp(strrchr(where, '/'), "/user:3"),
	   "the user's line wins: %s at %s", val, where);
	ok(config_value("onlyhost", val, sizeof val, where, sizeof where) == 1 && !strcmp(val, "yes") &&
		   !strcmp(strrchr(where, '/'), "/host:3"),
	   "the host's line when the user has none: %s at %s", val, where);
	ok(config_value("none", val, sizeof val, where, sizeof where) == 0, "no file sets it: 0");
	p = file("host", "k = a value longer than the caller's buffer of sixty-four bytes, cut\n");
	unsetenv("ISOPOD_CONFIG");
	setenv("HOME", "/nonexistent", 1);
	unsetenv("XDG_CONFIG_HOME");
	ok(config_value("k", val, 16, where, sizeof where) == 1 && !strcmp(val, "a value longer "),
	   "a value past vsz is cut: \"%s\"", val);
	setenv("ISOPOD_CONFIG", dir, 1);
	errno = 0;
	ok(config_value("k", val, sizeof val, where, sizeof where) == -1 && errno == EISDIR &&
		   !strcmp(where, dir),
	   "an unreadable user file: -1, errno, where = the file (%s)", where);
	setenv("ISOPOD_SYSCONFIG", dir, 1);
	unsetenv("ISOPOD_CONFIG");
	ok(config_value("k", val, sizeof val, where, sizeof where) == -1 && !strcmp(where, dir),
	   "an unreadable host file: -1 (%s)", where);

	/* Where the files are: the one decision (isopod-image where prints
	 * it); a path that does not fit is -1 ENAMETOOLONG and "", never a
	 * shorter, other path */
	{
		char out[64];

		unsetenv("ISOPOD_CONFIG");
		unsetenv("XDG_CONFIG_HOME");
		setenv("HOME", "/hh", 1);
		ok(config_user_file(out, sizeof out) == 0 && !strcmp(out, "/hh/.config/isopod/config"),
		   "user file: $HOME/.config/isopod/config (%s)", out);
		setenv("XDG_CONFIG_HOME", "/x", 1);
		ok(config_user_file(out, sizeof out) == 0 && !strcmp(out, "/x/isopod/config"),
		   "user file: $XDG_CONFIG_HOME/isopod/config (%s)", out);
		setenv("ISOPOD_CONFIG", "", 1);
		unsetenv("XDG_CONFIG_HOME");
		unsetenv("HOME");
		ok(config_user_file(out, sizeof out) == 0 &&
			   !strcmp(out, "/nonexistent/.config/isopod/config"),
		   "user file: an empty ISOPOD_CONFIG is unset; no HOME: /nonexistent (%s)", out);
		setenv("ISOPOD_CONFIG", "/a/path/longer/than/the/sixty-four/bytes/of/this/buffer/here/and/more", 1);
		errno = 0;
		ok(config_user_file(out, sizeof out) == -1 && errno == ENAMETOOLONG && !out[0],
		   "user file: too long: -1 ENAMETOOLONG, \"\"");
		big = malloc(5000);
		if (!big)
			return 111;
		memset(big, 'u', 4999);
		big[0] = '/';
		big[4999] = 0;
		setenv("ISOPOD_CONFIG", big, 1);
		unsetenv("ISOPOD_SYSCONFIG");
		ok(config_value("k", val, sizeof val, where, sizeof where) == -1 &&
			   strstr(where, "too long"),
		   "config_value with a user file over 4096 bytes: -1, not a shorter file (%s)", where);
		free(big);
		unsetenv("ISOPOD_CONFIG");
		setenv("ISOPOD_CACHE", "/cc", 1);
		ok(cache_home(out, sizeof out) == 0 && !strcmp(out, "/cc"), "cache: $ISOPOD_CACHE (%s)",
		   out);
		setenv("ISOPOD_CACHE", "/a/path/longer/than/the/sixty-four/bytes/of/this/buffer/here/and/more", 1);
		errno = 0;
		ok(cache_home(out, sizeof out) == -1 && errno == ENAMETOOLONG && !out[0],
		   "cache: too long: -1 ENAMETOOLONG, \"\"");
		unsetenv("ISOPOD_CACHE");
		setenv("ISOPOD_SYSCONFIG", "", 1);
		ok(!strcmp(config_host_file(), "/etc/isopod/config"), "host file: default (%s)",
		   config_host_file());
	}

	snprintf(where, sizeof where, "rm -rf '%s'", dir);
	if (system(where) != 0)
		return 111;
	return tap_done();
}
