/* tsc_test.c - the host's TSC rate kept per store (lib/tsc.c): what
 * accel/tsc.json must hold to be used, that a bad one is measured again
 * and rewritten, and that a good one is used without measuring. */
#include "../../lib/tsc.c" /* self-contained: t/run-unit links frame+util only */

#include "tap.h"

#include <sys/stat.h>

/* tsc_cache_ok on text for cpu: 1 valid (*khz), 0 not, -1 not JSON. */
static int cache_ok(const char *text, const char *cpu, long long *khz)
{
	char why[256];
	json_t *v = json_loads(text, 0, NULL);
	int r;

	if (!v)
		return -1;
	r = tsc_cache_ok(v, cpu, khz, why, sizeof why);
	json_decref(v);
	return r;
}

static void test_parse(void)
{
	long long k = -1;

	ok(cache_ok("{\"format\":1,\"tsc_khz\":2096000,\"cpu\":\"C\"}", "C", &k) == 1 && k == 2096000,
	   "a rate in whole MHz on this CPU: used");
	k = -1;
	ok(cache_ok("{\"format\":1,\"tsc_khz\":0,\"cpu\":\"C\",\"reason\":\"no constant_tsc\"}", "C",
		    &k) == 1 && k == 0,
	   "0 with a reason (the host has no rate to give): used, as none");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":0,\"cpu\":\"C\"}", "C", &k) == 0,
	   "0 without a reason: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":2096000,\"cpu\":\"D\"}", "C", &k) == 0,
	   "another CPU's rate: invalid (a store moved measures again)");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":2096000}", "C", &k) == 0, "no cpu: invalid");
	ok(cache_ok("{\"format\":2,\"tsc_khz\":2096000,\"cpu\":\"C\"}", "C", &k) == 0,
	   "another format: invalid");
	ok(cache_ok("{\"tsc_khz\":2096000,\"cpu\":\"C\"}", "C", &k) == 0, "no format: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":2096017,\"cpu\":\"C\"}", "C", &k) == 0,
	   "not whole MHz: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":\"2096000\",\"cpu\":\"C\"}", "C", &k) == 0,
	   "a string: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":2096000.0,\"cpu\":\"C\"}", "C", &k) == 0,
	   "a real: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":-2000000,\"cpu\":\"C\"}", "C", &k) == 0,
	   "negative: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":50000,\"cpu\":\"C\"}", "C", &k) == 0,
	   "under 100 MHz: invalid");
	ok(cache_ok("{\"format\":1,\"tsc_khz\":21000000,\"cpu\":\"C\"}", "C", &k) == 0,
	   "over 20 GHz: invalid");
	ok(cache_ok("[1]", "C", &k) == 0, "not an object: invalid");
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* The store's file: missing or bad, measured and kept; good, used as it
 * is (a rate no host has proves it was not measured). */
static void test_store(void)
{
	char home[] = "/tmp/tsc_test.XXXXXX", p[PATH_MAX], l[PATH_MAX], d[PATH_MAX], cpu[160];
	char why[512], text[512];
	const char *bad[] = { "", "not json", "{\"format\":1,\"tsc_khz\":2096017,\"cpu\":\"x\"}",
			      "{\"format\":1,\"tsc_khz\":1234000,\"cpu\":\"another CPU\"}" };
	long long k = -1, m = -1;
	json_t *v;
	size_t i;

	if (!mkdtemp(home)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	setenv("ISOPOD_HOME", home, 1);
	snprintf(p, sizeof p, "%s/accel/tsc.json", home);
	snprintf(l, sizeof l, "%s/accel/tsc.lock", home);
	snprintf(d, sizeof d, "%s/accel", home);
	tsc_cpu(cpu, sizeof cpu);
	ok(tsc_store_khz(&m, why, sizeof why) == 0 && m >= TSC_MIN_KHZ && m <= TSC_MAX_KHZ &&
	   m % TSC_GRAIN_KHZ == 0, "no file: measured, %lld kHz (%s)", m, why);
	v = json_load_path(p);
	ok(v && tsc_cache_ok(v, cpu, &k, why, sizeof why) && k == m &&
	   json_array_size(json_object_get(v, "samples_khz")) == SAMPLES,
	   "and kept in accel/tsc.json with its samples");
	json_decref(v);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		put(p, bad[i]);
		k = -1;
		v = NULL;
		ok(tsc_store_khz(&k, why, sizeof why) == 0 && k >= TSC_MIN_KHZ &&
		   k != 1234000 && k % TSC_GRAIN_KHZ == 0 && (v = json_load_path(p)) &&
		   tsc_cache_ok(v, cpu, &k, why, sizeof why),
		   "a bad file (%.40s): measured again (%lld kHz) and rewritten", bad[i], k);
		json_decref(v);
	}
	snprintf(text, sizeof text, "{\"format\":1,\"tsc_khz\":1234000,\"cpu\":\"%s\"}", cpu);
	put(p, text);
	ok(tsc_store_khz(&k, why, sizeof why) == 0 && k == 1234000,
	   "a valid file: its rate, not measured (%lld kHz)", k);
	snprintf(text, sizeof text,
		 "{\"format\":1,\"tsc_khz\":0,\"cpu\":\"%s\",\"reason\":\"kept none\"}", cpu);
	put(p, text);
	k = -1;
	ok(tsc_store_khz(&k, why, sizeof why) == 0 && k == 0 && !strcmp(why, "kept none"),
	   "a kept none: 0, its reason (%s)", why);
	unlink(p);
	unlink(l);
	rmdir(d);
	rmdir(home);
}

int main(void)
{
	char cpu[160], why[256];
	long long k = -1, s[8];
	size_t n = 0;

	test_parse();
	tsc_cpu(cpu, sizeof cpu);
	ok(cpu[0] && !strchr(cpu, '"'), "this CPU: %s", cpu);
	ok(tsc_measure(&k, s, 8, &n, why, sizeof why) == 0 && n == SAMPLES &&
	   llabs(s[SAMPLES / 2] - k) <= TSC_GRAIN_KHZ / 2,
	   "measured: %lld kHz, its median within half a MHz (%s)", k, n ? "" : why);
	test_store();
	return tap_done();
}
