/* allow.c - egress allowlist patterns (see allow.h). */

#include "allow.h"

#include <stdio.h>
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

/* The ":PORT" of a pattern: its port, 0 when there is none, -1 when bad. */
static long pattern_port(const char *colon)
{
	long v = 0;

	if (!colon)
		return 0;
	if (!colon[1] || colon[1] == '0' || strlen(colon + 1) > 5)
		return -1;
	for (const char *p = colon + 1; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v >= 1 && v <= 65535 ? v : -1;
}

static int norm_name_part(char *out, size_t outsz, const char *pattern, const char **why)
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

int allow_norm(char *out, size_t outsz, const char *pattern, const char **why)
{
	const char *colon = strchr(pattern, ':');
	char name[ALLOW_NAME_MAX + 3];
	size_t n = colon ? (size_t)(colon - pattern) : strlen(pattern);
	long port = pattern_port(colon);
	int k;

	if (outsz)
		*out = '\0';
	if (port < 0) {
		*why = "bad port: want NAME:PORT with PORT 1..65535";
		return -1;
	}
	if (n >= sizeof name) {
		*why = "name longer than 253 characters";
		return -1;
	}
	memcpy(name, pattern, n);
	name[n] = '\0';
	if (norm_name_part(out, outsz, name, why) < 0)
		return -1;
	if (port) {
		size_t o = strlen(out);

		k = snprintf(out + o, outsz - o, ":%ld", port);
		if (k < 0 || (size_t)k >= outsz - o) {
			*out = '\0';
			*why = "name too long";
			return -1;
		}
	}
	return 0;
}

int allow_match(const char *pattern, const char *name)
{
	const char *colon = strchr(pattern, ':');
	size_t pl = colon ? (size_t)(colon - pattern) : strlen(pattern), pn, nn;

	if (pattern[0] != '*')
		return strlen(name) == pl && strncmp(pattern, name, pl) == 0;
	/* "*.example.org": name ends with ".example.org" and has more before */
	pn = pl - 1;
	nn = strlen(name);
	return nn > pn && strncmp(name + nn - pn, pattern + 1, pn) == 0;
}

int allow_port(const char *pattern, unsigned port)
{
	long p = pattern_port(strchr(pattern, ':'));

	return p > 0 ? (unsigned long)p == port : port == 80 || port == 443;
}
