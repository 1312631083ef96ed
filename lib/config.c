/* config.c - the configuration files (see config.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Blanks off both ends, as the front end's [[:space:]] trims. */
static char *trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int config_each(const char *path, const char *key, config_fn *fn, void *arg, char *msg,
		size_t msz)
{
	FILE *fp = fopen(path, "re");
	char *line = NULL, where[4200];
	size_t cap = 0;
	unsigned ln = 0;
	int n = 0, e;

	if (!fp) {
		/* Not there: as the front end's `[ -f FILE ] || return 0`. */
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		e = errno;
		snprintf(msg, msz, "unable to read %s: %s", path, strerror(e));
		errno = e;
		return -2;
	}
	/* getline, not a fixed buffer: the tail of a long line (a long
	 * comment, say) must not be read as a line of its own. */
	while (getline(&line, &cap, fp) >= 0) {
		char *hash = strchr(line, '#'), *eq;

		ln++;
		if (hash)
			*hash = '\0';
		if (!(eq = strchr(line, '=')))
			continue; /* the front end reports malformed lines */
		*eq = '\0';
		if (strcmp(trim(line), key))
			continue;
		snprintf(where, sizeof where, "%s:%u", path, ln);
		n++;
		if (fn(trim(eq + 1), where, arg)) {
			n = -1;
			break;
		}
	}
	if (n >= 0 && ferror(fp)) {
		e = errno;
		snprintf(msg, msz, "unable to read %s: %s", path, strerror(e));
		n = -2;
	}
	e = errno;
	free(line);
	fclose(fp);
	errno = e;
	return n;
}

struct last {
	char *val, *where;
	size_t vsz, wsz;
};

static int keep_last(const char *val, const char *where, void *arg)
{
	struct last *l = arg;

	snprintf(l->val, l->vsz, "%s", val);
	snprintf(l->where, l->wsz, "%s", where);
	return 0;
}

/* One file: 1 found (the last line of key), 0 not, -1 unreadable. */
static int scan(const char *path, const char *key, struct last *l)
{
	char msg[256];
	int n = config_each(path, key, keep_last, l, msg, sizeof msg);

	if (n == -2) {
		int e = errno;

		snprintf(l->where, l->wsz, "%s", path);
		errno = e;
		return -1;
	}
	return n > 0;
}

/* snprintf that never leaves a shorter, other path: 0, or -1 (ENAMETOOLONG)
 * and out "". */
static int fits(char *out, size_t sz, const char *a, const char *b)
{
	int n = snprintf(out, sz, "%s%s", a, b);

	if (n < 0 || (size_t)n >= sz) {
		out[0] = 0;
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

/* $name when set and not empty, else NULL. */
static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int config_bool(const char *v)
{
	if (!strcmp(v, "yes") || !strcmp(v, "1") || !strcmp(v, "on"))
		return 1;
	if (!strcmp(v, "no") || !strcmp(v, "0") || !strcmp(v, "off"))
		return 0;
	return -1;
}

const char *config_host_file(void)
{
	return env("ISOPOD_SYSCONFIG") ?: "/etc/isopod/config";
}

int config_user_file(char *out, size_t sz)
{
	const char *v;

	if ((v = env("ISOPOD_CONFIG")))
		return fits(out, sz, v, "");
	if ((v = env("XDG_CONFIG_HOME")))
		return fits(out, sz, v, "/isopod/config");
	return fits(out, sz, env("HOME") ?: "/nonexistent", "/.config/isopod/config");
}

int cache_home(char *out, size_t sz)
{
	const char *v;

	if ((v = env("ISOPOD_CACHE")))
		return fits(out, sz, v, "");
	if (geteuid() == 0)
		return fits(out, sz, "/var/cache/isopod", "");
	if ((v = env("XDG_CACHE_HOME")))
		return fits(out, sz, v, "/isopod");
	return fits(out, sz, env("HOME") ?: "/nonexistent", "/.cache/isopod");
}

int config_value(const char *key, char *val, size_t vsz, char *where, size_t wsz)
{
	const char *h = config_host_file();
	char user[4096];
	struct last l = { .val = val, .vsz = vsz, .where = where, .wsz = wsz };
	int a, b;

	if (config_user_file(user, sizeof user) < 0) {
		snprintf(where, wsz, "the user's configuration file (path too long)");
		return -1;
	}
	if ((a = scan(h, key, &l)) < 0)
		return -1;
	/* The user's file comes second: its line wins. */
	if ((b = scan(user, key, &l)) < 0)
		return -1;
	return a || b;
}
