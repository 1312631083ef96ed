/* faketree.h - a file in a fake tree under a test's root directory, for the
 * unit tests that read /proc and /sys through a root prefix (cgroup_test,
 * qjail_test).  Header-only, as tap.h. */
#ifndef ISOPOD_FAKETREE_H
#define ISOPOD_FAKETREE_H

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* root/REL with text (its directories made); text NULL: a directory. */
static inline void put_file(const char *root, const char *rel, const char *text)
{
	char p[PATH_MAX], *s;
	FILE *f;

	if (snprintf(p, sizeof p, "%s/%s", root, rel) >= (int)sizeof p)
		return; /* too long: the test's own checks then fail */
	for (s = p + strlen(root) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
	if (!text) {
		mkdir(p, 0755);
		return;
	}
	if ((f = fopen(p, "w"))) {
		fputs(text, f);
		fclose(f);
	}
}

#endif
