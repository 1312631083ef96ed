/* gcauto.c - the retention settings' words and the automatic gc's schedule
 * (gcauto.h). */
#include "gcauto.h"

#include "config.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* 4096, 512K, 100M, 4G, 1T (binary units) -> bytes; "off" -> -2 (no
 * budget); -1 if malformed. */
long long parse_size(const char *s)
{
	char num[32];
	size_t n = strlen(s);
	long long v, mul = 1;

	if (!strcmp(s, "off"))
		return -2;
	if (n < 1 || n >= sizeof num)
		return -1;
	switch (s[n - 1]) {
	case 'K': mul = 1LL << 10; break;
	case 'M': mul = 1LL << 20; break;
	case 'G': mul = 1LL << 30; break;
	case 'T': mul = 1LL << 40; break;
	default: break;
	}
	memcpy(num, s, n);
	num[mul > 1 ? n - 1 : n] = 0;
	if (parse_ll(num, 0, (1LL << 50) / mul, &v) < 0)
		return -1;
	return v * mul;
}

/* 30s, 10m, 2h, 7d -> seconds; -1 if malformed. */
long long parse_dur(const char *s)
{
	char num[32];
	size_t n = strlen(s);
	long long v, mul;

	if (n < 2 || n >= sizeof num)
		return -1;
	switch (s[n - 1]) {
	case 's': mul = 1; break;
	case 'm': mul = 60; break;
	case 'h': mul = 3600; break;
	case 'd': mul = 86400; break;
	default: return -1;
	}
	memcpy(num, s, n - 1);
	num[n - 1] = 0;
	if (parse_ll(num, 0, 100LL * 365 * 86400 / mul, &v) < 0)
		return -1;
	return v * mul;
}

const char *gc_set_want(int kind)
{
	static const char *const want[] = {
		[SET_COUNT] = "a count (or off)",
		[SET_DUR] = "a duration like 30s, 10m, 2h, 7d (or 0, or off)",
		[SET_SIZE] = "a size like 512M, 4G (or 0, or off)",
		[SET_INTERVAL] = "a duration like 5m (or 0: every run, or off)",
	};

	return kind >= SET_COUNT && kind <= SET_INTERVAL ? want[kind] : "?";
}

int gc_set_parse(int kind, const char *v, long long *out)
{
	if (!strcmp(v, "off")) {
		*out = kind == SET_SIZE || kind == SET_INTERVAL ? SET_OFF : 0;
		return 0;
	}
	if (!strcmp(v, "0") && kind != SET_COUNT) {
		*out = 0;
		return 0;
	}
	switch (kind) {
	case SET_COUNT: return parse_ll(v, 0, INT_MAX, out);
	case SET_SIZE: return (*out = parse_size(v)) < 0 ? -1 : 0;
	default: return (*out = parse_dur(v)) < 0 ? -1 : 0;
	}
}

int gc_policy(long long opt, const char *key, int kind, long long dflt, long long *out,
	      char *err, size_t esz)
{
	char v[256], where[4200];
	int r;

	*out = opt;
	if (opt != -1)
		return 0;
	if ((r = config_value(key, v, sizeof v, where, sizeof where)) < 0) {
		snprintf(err, esz, "unable to read %s: %s", where, strerror(errno));
		return EX_SYS;
	}
	*out = dflt;
	if (r && gc_set_parse(kind, v, out) < 0) {
		snprintf(err, esz, "config %s: %s %s: want %s", where, key, EXC(v),
			 gc_set_want(kind));
		return EX_USAGE;
	}
	return 0;
}

int gc_auto_interval(long long *every, char *err, size_t esz)
{
	const char *e = getenv("ISOPOD_GC_INTERVAL");

	if (!e || !*e)
		return gc_policy(-1, "gc_interval", SET_INTERVAL, GC_AUTO_INTERVAL_DEFAULT_S, every,
				 err, esz);
	if (gc_set_parse(SET_INTERVAL, e, every) < 0) {
		snprintf(err, esz, "ISOPOD_GC_INTERVAL %s: want %s", EXC(e),
			 gc_set_want(SET_INTERVAL));
		return EX_USAGE;
	}
	return 0;
}

int gc_auto_due(long long every)
{
	char stamp[PATH_MAX];
	struct stat st;
	time_t now = time(NULL);

	if (every == SET_OFF)
		return 0;
	if (pathn(stamp, sizeof stamp, "%s/locks/gc-auto", store_home()) < 0)
		return 1;
	return !(stat(stamp, &st) == 0 && now - st.st_mtime < every && st.st_mtime <= now);
}
