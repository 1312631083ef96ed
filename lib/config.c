/* config.c - the configuration files (see config.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

/* One file: 1 found (the last line of key), 0 not, -1 unreadable. */
static int scan(const char *path, const char *key, char *val, size_t vsz, char *where,
		size_t wsz)
{
	FILE *fp = fopen(path, "re");
	char line[4096];
	unsigned ln = 0;
	int found = 0;

	if (!fp) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		snprintf(where, wsz, "%s", path);
		return -1;
	}
	while (fgets(line, sizeof line, fp)) {
		char *hash = strchr(line, '#'), *eq;

		ln++;
		if (hash)
			*hash = '\0';
		if (!(eq = strchr(line, '=')))
			continue; /* the front end reports malformed lines */
		*eq = '\0';
		if (strcmp(trim(line), key))
			continue;
		snprintf(val, vsz, "%s", trim(eq + 1));
		snprintf(where, wsz, "%s:%u", path, ln);
		found = 1;
	}
	if (ferror(fp)) {
		int e = errno;

		fclose(fp);
		snprintf(where, wsz, "%s", path);
		errno = e;
		return -1;
	}
	fclose(fp);
	return found;
}

int config_value(const char *key, char *val, size_t vsz, char *where, size_t wsz)
{
	const char *h = getenv("ISOPOD_SYSCONFIG"), *u = getenv("ISOPOD_CONFIG");
	char user[4096];
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
	if ((a = scan(h, key, val, vsz, where, wsz)) < 0)
		return -1;
	/* The user's file comes second: its line wins. */
	if ((b = scan(user, key, val, vsz, where, wsz)) < 0)
		return -1;
	return a || b;
}
