/* config.c - the configuration files (see config.h). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int config_value(const char *key, char *val, size_t vsz, char *where, size_t wsz)
{
	const char *h = getenv("ISOPOD_SYSCONFIG"), *u = getenv("ISOPOD_CONFIG");
	char user[4096];
	struct last l = { .val = val, .vsz = vsz, .where = where, .wsz = wsz };
	int a, b;

	if (!h || !*h)
		h = "/etc/isopod/config";
	if (u && *u) {
		snprintf(user, sizeof user, "%s", u);
	} else if ((u = getenv("XDG_CONFIG_HOME")) && *u) {
		snprintf(user, sizeof user, "%s/isopod/config", u);
	} else {
		u = getenv("HOME");
		snprintf(user, sizeof user, "%s/.config/isopod/config", u && *u ? u : "/nonexistent");
	}
	if ((a = scan(h, key, &l)) < 0)
		return -1;
	/* The user's file comes second: its line wins. */
	if ((b = scan(user, key, &l)) < 0)
		return -1;
	return a || b;
}
