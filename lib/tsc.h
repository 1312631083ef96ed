/* tsc.h - the host's TSC rate, which a TCG guest is told (lib/qemu.c).
 *
 * Under TCG (QEMU 7.2, an x86_64 host) the guest's RDTSC is the host's
 * TSC, unscaled (cpu_get_ticks -> cpu_get_host_ticks).  Told the host's
 * real rate (tsc_early_khz) the guest's TSC clocksource keeps the host's
 * time, and tsc=reliable may keep it on the TSC (no watchdog against the
 * PIT's ticks, which TCG loses): doc/DECISIONS.md "TSC under TCG".
 *
 * The rate is on the QEMU command line every warm key hashes, so it is
 * measured once per store and kept in accel/tsc.json {format, tsc_khz,
 * cpu, measured, samples_khz, reason}: read when valid (tsc_cache_ok),
 * else measured again under accel/tsc.lock and rewritten atomically. */
#ifndef ISOPOD_TSC_H
#define ISOPOD_TSC_H

#include <jansson.h>
#include <stddef.h>

#define TSC_FORMAT 1
/* The rate is kept in whole MHz: see tsc.c's tsc_measure for the error
 * that costs and what it buys. */
#define TSC_GRAIN_KHZ 1000LL
/* Outside these no x86 TSC ticks: a value there is a broken measurement. */
#define TSC_MIN_KHZ 100000LL
#define TSC_MAX_KHZ 20000000LL

/* The identity of the CPU a rate belongs to (CPUID vendor, signature and
 * brand string) into out; "" when not on x86_64.  A store moved to
 * another CPU measures again. */
void tsc_cpu(char *out, size_t sz);
/* Measure the host's TSC rate: 0 with *khz (a multiple of TSC_GRAIN_KHZ in
 * [TSC_MIN_KHZ, TSC_MAX_KHZ]) and the samples (kHz, unrounded, n of them
 * up to max) in samples; -1 with why (not x86_64, ENOTSUP; the kernel does
 * not call the TSC constant-rate, EOPNOTSUPP; samples that disagree, EAGAIN). */
int tsc_measure(long long *khz, long long *samples, size_t max, size_t *n, char *why,
		size_t wsz);
/* A kept rate v valid for cpu (tsc_cpu's)?  1 with *khz -- in range and a
 * multiple of TSC_GRAIN_KHZ, or 0 with a reason string (the host has no
 * rate to give) --, else 0 (why says what is wrong). */
int tsc_cache_ok(const json_t *v, const char *cpu, long long *khz, char *why, size_t wsz);
/* The store's rate: accel/tsc.json when valid, else measured and kept
 * there.  0 with *khz (0: the host has none to give, why says why -- not
 * x86_64, a TSC the kernel does not call constant-rate); -1 with *khz 0
 * and why when it could not be measured now (the next boot tries again).
 * A failure to keep it is a warning: the rate measured is still used. */
int tsc_store_khz(long long *khz, char *why, size_t wsz);
/* The store's kept rate, never measured: 1 with *khz (0: none, why the
 * kept reason) when accel/tsc.json is valid for this CPU, else 0 (unknown:
 * why what is wrong with it, "" when there is none). */
int tsc_kept(long long *khz, char *why, size_t wsz);

#endif
