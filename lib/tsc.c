/* tsc.c - the host's TSC rate, measured once per store (see tsc.h). */
#include "tsc.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

enum {
	SAMPLES = 5,      /* per round; the median is taken */
	ROUNDS = 3,       /* rounds tried before giving up */
	SAMPLE_NS = 20 * 1000 * 1000,
	STAMP_TRIES = 8,  /* reads per end of a sample; the tightest is kept */
	AGREE_PPM = 100,  /* a round's middle three samples within this of the median */
};

void tsc_cpu(char *out, size_t sz)
{
#if defined(__x86_64__)
	unsigned int a, b, c, d, brand[12] = { 0 }, sig = 0;
	char vendor[13];
	size_t i;

	__cpuid(0, a, b, c, d);
	memcpy(vendor, &b, 4);
	memcpy(vendor + 4, &d, 4);
	memcpy(vendor + 8, &c, 4);
	vendor[12] = 0;
	if (a >= 1) {
		__cpuid(1, a, b, c, d);
		sig = a;
	}
	__cpuid(0x80000000, a, b, c, d);
	if (a >= 0x80000004)
		for (i = 0; i < 3; i++)
			__cpuid(0x80000002 + (unsigned)i, brand[4 * i], brand[4 * i + 1],
				brand[4 * i + 2], brand[4 * i + 3]);
	{
		char *s = (char *)brand, *e;

		((char *)brand)[sizeof brand - 1] = 0;
		while (*s == ' ')
			s++;
		for (e = s; *e; e++)
			if ((unsigned char)*e < 0x20 || (unsigned char)*e >= 0x7f || *e == '"')
				*e = '?';
		while (e > s && e[-1] == ' ')
			*--e = 0;
		snprintf(out, sz, "%s %08x %s", vendor, sig, s);
	}
#else
	snprintf(out, sz, "%s", "");
#endif
}

#if defined(__x86_64__)
/* One end of a sample: the TSC and CLOCK_MONOTONIC_RAW read together.  Of
 * STAMP_TRIES reads the one with the fewest ticks between the TSC before
 * and after the clock's, so an interrupt or a preemption between the two
 * reads is not taken for time; the TSC is their middle. */
static int stamp(unsigned long long *tsc, long long *ns)
{
	unsigned long long best = ~0ULL, t0, t1;
	struct timespec ts;
	int i;

	for (i = 0; i < STAMP_TRIES; i++) {
		t0 = __rdtsc();
		if (clock_gettime(CLOCK_MONOTONIC_RAW, &ts) < 0)
			return -1;
		t1 = __rdtsc();
		if (t1 >= t0 && t1 - t0 < best) {
			best = t1 - t0;
			*tsc = t0 + (t1 - t0) / 2;
			*ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
		}
	}
	return best == ~0ULL ? -1 : 0;
}

/* One sample's rate in kHz over SAMPLE_NS, or -1. */
static long long sample(void)
{
	unsigned long long t0, t1;
	long long n0, n1;
	struct timespec w = { .tv_sec = 0, .tv_nsec = SAMPLE_NS };

	if (stamp(&t0, &n0) < 0)
		return -1;
	while (nanosleep(&w, &w) < 0 && errno == EINTR)
		;
	if (stamp(&t1, &n1) < 0 || t1 <= t0 || n1 - n0 < SAMPLE_NS / 2)
		return -1;
	/* ticks * 10^6 / ns: 20 ms of a 20 GHz TSC is 4e8 ticks, 4e14 here */
	return (long long)(((t1 - t0) * 1000000ULL + (unsigned long long)(n1 - n0) / 2) /
			   (unsigned long long)(n1 - n0));
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/* Does the kernel call this CPU's TSC constant-rate (constant_tsc in
 * /proc/cpuinfo's first flags line)?  The kernel knows the families whose
 * TSC runs at a fixed rate without the invariant-TSC CPUID bit, which
 * hypervisors often hide. */
static int constant_tsc(void)
{
	char line[8192];
	FILE *f = fopen("/proc/cpuinfo", "re");
	int yes = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "flags", 5)) {
			yes = strstr(line, " constant_tsc") != NULL;
			break;
		}
	fclose(f);
	return yes;
}
#endif

/* Measured, not asked: rdtsc against CLOCK_MONOTONIC_RAW over 20 ms,
 * five samples, the median, in whole MHz.
 *  - CPUID 0x15 (crystal ratio) is Intel's only and often has no crystal
 *    frequency (client parts), 0x16 is the marketing base frequency in
 *    MHz, not the TSC's; under a hypervisor both may be the physical
 *    host's while the TSC the VM (and so QEMU) reads is scaled.  Linux
 *    has no sysfs file of tsc_khz, and dmesg may be closed to us.  A
 *    measurement is what every x86_64 host answers the same way.
 *  - CLOCK_MONOTONIC_RAW, not CLOCK_MONOTONIC: NTP does not slew it (up to
 *    500 ppm while it catches up), so a rerun measures the same rate.  It
 *    is the host kernel's own clock, so the guest keeps the host's time.
 *  - Each end of a sample is the tightest of eight rdtsc/clock pairs, so
 *    a preemption between the reads is not counted (one within the 20 ms
 *    costs nothing); the median drops a sample that was unlucky anyway.
 *    A round whose middle three samples are not within 100 ppm is tried
 *    again (three rounds).  This host: samples within 20 ppm.
 *  - Whole MHz: a rerun (a store's file lost, a new store) then gives the
 *    same rate and so the same warm keys, except when the rate is within
 *    noise of a half MHz.  It costs at most 0.5 MHz: 250 ppm of a 2 GHz
 *    TSC, under a second an hour of the guest's clock, which the agent
 *    sets from the host's at every HELLO anyway.
 * About 0.1 s, once per store. */
int tsc_measure(long long *khz, long long *samples, size_t max, size_t *n, char *why,
		size_t wsz)
{
#if defined(__x86_64__)
	long long s[SAMPLES], m, tol;
	int round, i;

	*n = 0;
	if (!constant_tsc()) {
		snprintf(why, wsz, "the host kernel does not call its TSC constant-rate "
			 "(no constant_tsc in /proc/cpuinfo)");
		return errno = EOPNOTSUPP, -1;
	}
	for (round = 0; round < ROUNDS; round++) {
		for (i = 0; i < SAMPLES; i++)
			if ((s[i] = sample()) < 0)
				break;
		if (i < SAMPLES)
			continue;
		qsort(s, SAMPLES, sizeof s[0], cmp_ll);
		m = s[SAMPLES / 2];
		tol = m / (1000000 / AGREE_PPM);
		if (s[SAMPLES / 2 - 1] < m - tol || s[SAMPLES / 2 + 1] > m + tol)
			continue;
		for (i = 0; i < SAMPLES && (size_t)i < max; i++)
			samples[(*n)++] = s[i];
		*khz = (m + TSC_GRAIN_KHZ / 2) / TSC_GRAIN_KHZ * TSC_GRAIN_KHZ;
		if (*khz < TSC_MIN_KHZ || *khz > TSC_MAX_KHZ) {
			snprintf(why, wsz, "the TSC measured at %lld kHz, outside %lld-%lld kHz", m,
				 TSC_MIN_KHZ, TSC_MAX_KHZ);
			return errno = EAGAIN, -1;
		}
		return 0;
	}
	snprintf(why, wsz, "the TSC's rate did not hold still over %d rounds of %d samples "
		 "(a loaded host?)", ROUNDS, SAMPLES);
	return errno = EAGAIN, -1;
#else
	(void)khz, (void)samples, (void)max;
	*n = 0;
	snprintf(why, wsz, "not an x86_64 host: a TCG guest's TSC is not the host's TSC");
	return errno = ENOTSUP, -1;
#endif
}

int tsc_cache_ok(const json_t *v, const char *cpu, long long *khz, char *why, size_t wsz)
{
	const json_t *k = json_object_get(v, "tsc_khz"), *f = json_object_get(v, "format");
	const char *c = json_string_value(json_object_get(v, "cpu"));
	const char *r = json_string_value(json_object_get(v, "reason"));
	long long x;

	if (!json_is_object(v))
		return snprintf(why, wsz, "not a JSON object"), 0;
	if (!json_is_integer(f) || json_integer_value(f) != TSC_FORMAT)
		return snprintf(why, wsz, "not format %d", TSC_FORMAT), 0;
	if (!c || strcmp(c, cpu))
		return snprintf(why, wsz, "measured on another CPU"), 0;
	if (!json_is_integer(k))
		return snprintf(why, wsz, "tsc_khz is not an integer"), 0;
	x = json_integer_value(k);
	if (x == 0) {
		if (!r || !*r)
			return snprintf(why, wsz, "tsc_khz 0 without a reason"), 0;
		snprintf(why, wsz, "%s", r);
		return *khz = 0, 1;
	}
	if (x < TSC_MIN_KHZ || x > TSC_MAX_KHZ || x % TSC_GRAIN_KHZ)
		return snprintf(why, wsz, "tsc_khz %lld is not a multiple of %lld in %lld-%lld", x,
				TSC_GRAIN_KHZ, TSC_MIN_KHZ, TSC_MAX_KHZ), 0;
	return *khz = x, 1;
}

/* accel/tsc.json read and checked: 1 valid (*khz, why), 0 not. */
static int kept(const char *path, const char *cpu, long long *khz, char *why, size_t wsz)
{
	json_t *v = json_load_path(path);
	int ok = v && tsc_cache_ok(v, cpu, khz, why, wsz);

	json_decref(v);
	return ok;
}

int tsc_kept(long long *khz, char *why, size_t wsz)
{
	char p[PATH_MAX], cpu[160];

	why[0] = 0;
	tsc_cpu(cpu, sizeof cpu);
	if (pathn(p, sizeof p, "%s/accel/tsc.json", store_home()) < 0)
		return 0;
	if (kept(p, cpu, khz, why, wsz))
		return 1;
	if (!why[0] && access(p, F_OK) == 0)
		snprintf(why, wsz, "not readable as JSON");
	return 0;
}

int tsc_store_khz(long long *khz, char *why, size_t wsz)
{
	long long s[SAMPLES];
	size_t n = 0;

	*khz = 0;
	why[0] = 0;
#if !defined(__x86_64__)
	/* nothing to measure or keep: why says so */
	(void)tsc_measure(khz, s, SAMPLES, &n, why, wsz);
	*khz = 0;
	return 0;
#else
	char p[PATH_MAX], lp[PATH_MAX], dir[PATH_MAX], failed[PATH_MAX], cpu[160], now[32];
	size_t i;
	json_t *v, *a;
	int lk, r;

	tsc_cpu(cpu, sizeof cpu);
	if (pathn(p, sizeof p, "%s/accel/tsc.json", store_home()) < 0 ||
	    pathn(lp, sizeof lp, "%s/accel/tsc.lock", store_home()) < 0) {
		snprintf(why, wsz, "the store's path is too long");
		return -1;
	}
	if (kept(p, cpu, khz, why, wsz))
		return 0;
	if (pathn(dir, sizeof dir, "%s/accel", store_home()) < 0 ||
	    mkdir_p(dir, 0700, failed, sizeof failed) < 0) {
		snprintf(why, wsz, "unable to create %.512s: %s", failed, strerror(errno));
		return -1;
	}
	/* one measurement per store: another boot's may be under way */
	if ((lk = lock_open(lp, LOCK_EX)) < 0) {
		snprintf(why, wsz, "unable to lock %.512s: %s", lp, strerror(errno));
		return -1;
	}
	if (kept(p, cpu, khz, why, wsz)) {
		close(lk);
		return 0;
	}
	why[0] = 0; /* what was wrong with the file: measured again, no matter */
	r = tsc_measure(khz, s, SAMPLES, &n, why, wsz);
	if (r < 0 && errno != EOPNOTSUPP) {
		/* a loaded host's: not kept, the next boot measures again */
		*khz = 0;
		close(lk);
		return -1;
	}
	/* kept: a rate, or the host's lasting "none" with its reason */
	iso_now(now, sizeof now);
	a = json_array();
	for (i = 0; i < n; i++)
		json_array_append_new(a, json_integer(s[i]));
	v = json_pack("{s:i, s:I, s:s, s:s, s:o, s:s?}", "format", TSC_FORMAT, "tsc_khz",
		      (json_int_t)(r < 0 ? 0 : *khz), "cpu", cpu, "measured", now, "samples_khz", a,
		      "reason", r < 0 ? why : NULL);
	if (!v || json_write_atomic(p, v) < 0)
		warn("unable to keep the host's TSC rate in %s:", p);
	json_decref(v);
	close(lk);
	if (r < 0)
		*khz = 0;
	return 0;
#endif
}
