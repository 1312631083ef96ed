/* allow.c - egress allowlist patterns (see allow.h). */

#include "allow.h"

#include <string.h>

static int lower(int c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Normalise name into out; a reason, or NULL when it is a valid name. */
static const char *name_norm(char *out, size_t outsz, const char *name)
{
	size_t n = strlen(name), i, label = 0;
	int letter = 0;

	if (outsz)
		*out = '\0';
	if (n && name[n - 1] == '.')
		n--;
	if (!n)
		return "empty name";
	if (n > ALLOW_NAME_MAX)
		return "name longer than 253 characters";
	if (n >= outsz)
		return "name too long";
	for (i = 0; i < n; i++) {
		int c = lower((unsigned char)name[i]);

		if (c == '.') {
			if (!label)
				return "empty label";
			if (out[i - 1] == '-')
				return "label ends with '-'";
			label = 0;
		} else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') {
			if (c == '-' && !label)
				return "label starts with '-'";
			if (++label > 63)
				return "label longer than 63 characters";
			letter |= c >= 'a' && c <= 'z';
		} else {
			return "character not allowed in a host name";
		}
		out[i] = (char)c;
	}
	out[n] = '\0';
	if (!label) /* "x..": one trailing dot is dropped, not two */
		return "empty label";
	if (out[n - 1] == '-')
		return "label ends with '-'";
	if (!letter)
		return "an IP address, not a name";
	return NULL;
}

int allow_name_norm(char *out, size_t outsz, const char *name)
{
	if (name_norm(out, outsz, name)) {
		if (outsz)
			*out = '\0';
		return -1;
	}
	return 0;
}

int allow_norm(char *out, size_t outsz, const char *pattern, const char **why)
{
	const char *r;

	if (pattern[0] == '*') {
		if (pattern[1] != '.') {
			*why = "a wildcard is '*.' followed by a name";
			return -1;
		}
		if (outsz < 3) {
			*why = "name too long";
			return -1;
		}
		if ((r = name_norm(out + 2, outsz - 2, pattern + 2))) {
			*why = r;
			*out = '\0';
			return -1;
		}
		if (!strchr(out + 2, '.')) {
			*why = "a wildcard needs at least two labels after '*.'";
			*out = '\0';
			return -1;
		}
		out[0] = '*', out[1] = '.';
		return 0;
	}
	if ((r = name_norm(out, outsz, pattern))) {
		*why = r;
		return -1;
	}
	return 0;
}

int allow_match(const char *pattern, const char *name)
{
	size_t pn, nn;

	if (pattern[0] != '*')
		return strcmp(pattern, name) == 0;
	/* "*.example.org": name ends with ".example.org" and has more before */
	pn = strlen(pattern + 1);
	nn = strlen(name);
	return nn > pn && strcmp(name + nn - pn, pattern + 1) == 0;
}
