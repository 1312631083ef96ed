/* accel_test.c - the accelerator choice (lib/accel.c) without booting:
 * forced either way, /dev/kvm absent, and a cached verdict -- the store's
 * or the host's (lib/accelhost.c, accelhost_test.c) -- that spares the
 * probe.  (The probe itself boots a kernel: t/20-run covers it.) */
#include "../../lib/accel.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/accelhost.c"
#include "../../lib/config.c"
#include "../../lib/host.c"
#include "../../lib/proc.c"
#include "../../lib/ovtpl.c"
#include "../../lib/image.c" /* ovtpl's qcow2 header reader */
#include "../../lib/qemu.c"

#include "tap.h"

/* The probe's jail (lib/qjail.c, lib/jail.c) is never reached here (no
 * probe runs: the verdicts are forced or cached); stubs keep this test
 * linking frame+util only.  The jailed probe: t/20-run. */
int jail_wanted(char *why, size_t wsz)
{
	snprintf(why, wsz, "unit test");
	return 0;
}
int qjail_plan(struct qjail *qj, const char *id, const char *dir, char *const *av, char *err,
	       size_t errsz)
{
	(void)qj, (void)id, (void)dir, (void)av;
	snprintf(err, errsz, "stub");
	return -1;
}
int qjail_give(struct qjail *qj, const char *dir, char *err, size_t errsz)
{
	(void)qj, (void)dir;
	snprintf(err, errsz, "stub");
	return -1;
}
void qjail_reclaim(struct qjail *qj) { (void)qj; }
void qjail_free(struct qjail *qj) { (void)qj; }
pid_t jail_spawn(const struct jail_spec *js, const struct proc_spec *ps, struct jail *j,
		 char *err, size_t errsz)
{
	(void)js, (void)ps, (void)j;
	snprintf(err, errsz, "stub");
	return -1;
}
int jail_release(struct jail *j, char *err, size_t errsz)
{
	(void)j, (void)err, (void)errsz;
	return 0;
}

/* The host's verdict for im, when the store has none: taken without a
 * probe (one would fail here: PATH has QEMU only, no qemu-img), kept in
 * the store with its reason saying where it came from; the store's own
 * verdict first; another key probes. */
static void test_host(const char *home, const struct img *im)
{
	char bin[PATH_MAX], p[PATH_MAX + 80], s[PATH_MAX + 80], reason[512], err[512], path[4096];
	const char *a = NULL;
	json_t *key, *v;
	int r, cached = -1;
	FILE *f;

	snprintf(path, sizeof path, "%s", getenv("PATH"));
	snprintf(bin, sizeof bin, "%s/bin", home);
	mkdirs(bin, 0700);
	snprintf(p, sizeof p, "%s/" QEMU, bin);
	if ((f = fopen(p, "w")))
		fputs("#!/bin/sh\nexit 1\n", f), fclose(f);
	chmod(p, 0755);
	setenv("PATH", bin, 1);
	setenv("ISOPOD_TEST_BOOT_ID", "e20f729e-6955-4f12-a6dd-c4e7f9d77507", 1);
	snprintf(s, sizeof s, "%s/accel/%s.json", home, im->ksha);
	unlink(s);
	key = accel_host_key(im->ksha, "/dev/null");
	accel_host_write(key, "tcg", "kvm: guest kernel did not reach the agent in 10 s",
			 "2026-12-04T08:00:00Z");
	json_decref(key);
	r = accel_known(NULL, NULL, im, &a, &cached, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && a && !strcmp(a, "tcg") && cached == 1 &&
	   !strcmp(reason, "kvm: guest kernel did not reach the agent in 10 s (host cache)") &&
	   access(s, F_OK) < 0, "host: accel_known takes the host's verdict, writes nothing: %s",
	   reason);
	r = accel_choose(NULL, NULL, im, &a, reason, sizeof reason, err, sizeof err);
	v = json_load_path(s);
	ok(r == 0 && !strcmp(a, "tcg") &&
	   !strcmp(reason, "kvm: guest kernel did not reach the agent in 10 s (host cache)") &&
	   !strcmp(json_string_value(json_object_get(v, "reason")) ?: "", reason) &&
	   !strcmp(json_string_value(json_object_get(v, "probed")) ?: "", "2026-12-04T08:00:00Z"),
	   "host: accel_choose takes it without a probe, into the store, the probe's time kept: %s",
	   r ? err : reason);
	json_decref(v);
	/* the store's verdict wins; the host's is asked only without one */
	v = json_pack("{s:s, s:s, s:s}", "accel", "kvm", "reason", "kvm: mine", "probed",
		      "2026-12-01T00:00:00Z");
	json_write_atomic(s, v);
	json_decref(v);
	r = accel_choose(NULL, NULL, im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "kvm") && !strcmp(reason, "kvm: mine"), "host: the store's verdict first");
	unlink(s);
	/* another boot: the host's verdict is not this key's, the probe runs
	 * (and fails here: no qemu-img) */
	setenv("ISOPOD_TEST_BOOT_ID", "e20f729e-6955-4f12-a6dd-c4e7f9d77508", 1);
	r = accel_choose(NULL, NULL, im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == EX_SYS && strstr(err, "kvm probe") && access(s, F_OK) < 0,
	   "host: another key probes (here: EX_SYS, nothing cached): %s", err);
	setenv("ISOPOD_TEST_BOOT_ID", "e20f729e-6955-4f12-a6dd-c4e7f9d77507", 1);
	setenv("ISOPOD_ACCEL_HOST_CACHE", "no", 1);
	r = accel_choose(NULL, NULL, im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == EX_SYS && strstr(err, "kvm probe"), "host: off, the probe runs");
	unsetenv("ISOPOD_ACCEL_HOST_CACHE");
	unsetenv("ISOPOD_TEST_BOOT_ID");
	setenv("PATH", path, 1);
	unlink(s);
}

int main(void)
{
	char home[64], p[PATH_MAX], reason[512], err[512];
	struct img im = { .ksha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" };
	const char *a = NULL;
	json_t *v;
	int r;

	snprintf(home, sizeof home, "/tmp/accel_test.%ld", (long)getpid());
	mkdirs(home, 0700);
	setenv("ISOPOD_HOME", home, 1);
	/* the host's cache of our own, never /run/isopod/accel */
	snprintf(p, sizeof p, "%s/hostcache", home);
	setenv("ISOPOD_ACCEL_HOST_CACHE_DIR", p, 1);
	setenv("ISOPOD_SYSCONFIG", "/dev/null", 1);
	setenv("ISOPOD_CONFIG", "/dev/null", 1);
	unsetenv("ISOPOD_ACCEL_HOST_CACHE");

	r = accel_choose("tcg", "--accel", &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "tcg") && !strcmp(reason, "forced by --accel"), "forced tcg: %s", reason);
	setenv("ISOPOD_KVM_DEV", "/nonexistent/kvm", 1);
	r = accel_choose("kvm", "ISOPOD_ACCEL", &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == EX_SYS && strstr(err, "kvm forced by ISOPOD_ACCEL but unable to open /nonexistent/kvm"),
	   "forced kvm without a device: EX_SYS, not a silent tcg: %s", err);
	r = accel_choose(NULL, NULL, &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "tcg") && strstr(reason, "/nonexistent/kvm: No such file"),
	   "no device: tcg, saying why: %s", reason);

	/* A device that opens (/dev/null stands in) and a cached verdict: no
	 * probe runs (it would need a kernel and fail here). */
	setenv("ISOPOD_KVM_DEV", "/dev/null", 1);
	snprintf(p, sizeof p, "%s/accel", home);
	mkdirs(p, 0700);
	snprintf(p, sizeof p, "%s/accel/%s.json", home, im.ksha);
	v = json_pack("{s:s, s:s, s:s}", "accel", "kvm", "reason", "kvm: the agent answered in 9 ms",
		      "probed", "2026-12-01T00:00:00Z");
	json_write_atomic(p, v);
	json_decref(v);
	r = accel_choose(NULL, NULL, &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "kvm") && !strcmp(reason, "kvm: the agent answered in 9 ms"),
	   "the cached verdict: kvm, its reason: %s", reason);
	v = json_pack("{s:s, s:s}", "accel", "tcg", "reason", "kvm: cached no");
	json_write_atomic(p, v);
	json_decref(v);
	r = accel_choose(NULL, NULL, &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "tcg") && !strcmp(reason, "kvm: cached no"), "a cached tcg: %s", reason);
	r = accel_choose("tcg", "--accel", &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == 0 && !strcmp(a, "tcg") && !strcmp(reason, "forced by --accel"), "forcing wins over the cache");

	/* accel_known: the same decisions without a probe (the doctor's view). */
	{
		struct img nok = { .ksha = "" };
		int cached = -1;

		r = accel_known(NULL, NULL, &im, &a, &cached, reason, sizeof reason, err, sizeof err);
		ok(r == 0 && a && !strcmp(a, "tcg") && cached == 1 && !strcmp(reason, "kvm: cached no"),
		   "accel_known: the cached verdict, marked cached");
		r = accel_known("kvm", "ISOPOD_ACCEL", &im, &a, &cached, reason, sizeof reason, err,
				sizeof err);
		ok(r == 0 && a && !strcmp(a, "kvm") && cached == 0 &&
		   !strcmp(reason, "forced by ISOPOD_ACCEL"), "accel_known: forced kvm says so: %s",
		   reason);
		unlink(p);
		r = accel_known(NULL, NULL, &im, &a, &cached, reason, sizeof reason, err, sizeof err);
		ok(r == 0 && a == NULL && cached == 0, "accel_known: no verdict: undecided, no probe");
		snprintf(p, sizeof p, "%s/accel/%s.lock", home, im.ksha);
		unlink(p);
		r = accel_known(NULL, NULL, &nok, &a, &cached, reason, sizeof reason, err, sizeof err);
		ok(r == 0 && a == NULL && access(p, F_OK) < 0,
		   "accel_known: no kernel: undecided, nothing written");
		snprintf(p, sizeof p, "%s/accel/%s.json", home, im.ksha);
	}

	unlink(p);
	test_host(home, &im);

	/* No verdict and nothing to boot: the probe cannot run, and says so
	 * instead of guessing either way. */
	setenv("PATH", "/nonexistent", 1);
	r = accel_choose(NULL, NULL, &im, &a, reason, sizeof reason, err, sizeof err);
	ok(r == EX_SYS && strstr(err, "kvm probe"), "a probe that cannot run: EX_SYS: %s", err);
	snprintf(p, sizeof p, "rm -rf %s", home);
	setenv("PATH", "/usr/bin:/bin", 1);
	if (system(p) != 0)
		printf("# unable to remove %s\n", home);
	return tap_done();
}
