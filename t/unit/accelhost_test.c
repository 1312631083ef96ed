/* accelhost_test.c - the host-wide KVM verdict cache (lib/accelhost.c):
 * its key, where it lives and which directories and files it trusts, and
 * its parser fed garbage.  accel_test.c covers accel_choose's use of it;
 * t/20-run a second store reusing a real probe's verdict. */
#include "../../lib/accelhost.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/config.c"
#include "../../lib/proc.c"
#include "../../lib/qemu.c"

#include "tap.h"

#include <sys/stat.h>
#include <sys/time.h>

/* The probe's jail is the key's "jail" member: $STUB_JAIL (0 or 1) here. */
int jail_wanted(char *why, size_t wsz)
{
	const char *v = getenv("STUB_JAIL");

	snprintf(why, wsz, "unit test");
	return v && !strcmp(v, "1");
}

/* a setup step that fails shows as a comment (and its check fails) */
#define TRY(x)                                                                 \
	do {                                                                   \
		if ((x) < 0)                                                   \
			printf("# %s: %s\n", #x, strerror(errno));            \
	} while (0)

#define KSHA "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define BID "e20f729e-6955-4f12-a6dd-c4e7f9d77507"

static json_t *key_now(void)
{
	return accel_host_key(KSHA, "/dev/null");
}

/* key with boot id b: a key of the same parts but another boot */
static json_t *key_boot(const char *b)
{
	json_t *k;

	setenv("ISOPOD_TEST_BOOT_ID", b, 1);
	k = key_now();
	setenv("ISOPOD_TEST_BOOT_ID", BID, 1);
	return k;
}

/* key's file in the cache directory hc, as host_file names it */
static void key_path(char *p, size_t sz, const char *hc, const json_t *k)
{
	char q[160] = "";
	int d = open(hc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (d < 0 || host_file(q, sizeof q, d, k) < 0)
		printf("# no file name for the key in %s\n", hc);
	snprintf(p, sz, "%s/%s", hc, strrchr(q, '/') ? strrchr(q, '/') + 1 : "?");
	if (d >= 0)
		close(d);
}

static int hit(const json_t *key, char *reason, size_t rsz)
{
	const char *a = NULL;
	char probed[32];

	return accel_host_read(key, &a, reason, rsz, probed, sizeof probed) && a;
}

static void test_key(const char *qemu)
{
	json_t *k = key_now(), *k2;
	struct timeval tv[2] = { { .tv_sec = 1000000000 }, { .tv_sec = 1000000000 } };

	ok(k && json_integer_value(json_object_get(k, "version")) == ACCEL_HOST_VERSION &&
	   !strcmp(json_string_value(json_object_get(k, "kernel")), KSHA) &&
	   !strcmp(json_string_value(json_object_get(k, "boot_id")), BID) &&
	   !strcmp(json_string_value(json_object_get(json_object_get(k, "qemu"), "path")), qemu) &&
	   json_integer_value(json_object_get(json_object_get(k, "kvm"), "rdev")) != 0 &&
	   json_is_false(json_object_get(k, "jail")) &&
	   hex64_ok(json_string_value(json_object_get(k, "argv"))),
	   "key: version, kernel, boot id, QEMU's identity, the device's, jail, argv");
	k2 = key_now();
	ok(json_equal(k, k2), "key: the same twice");
	json_decref(k2);
	/* each part that decides the verdict moves the key */
	k2 = key_boot("e20f729e-6955-4f12-a6dd-c4e7f9d77508");
	ok(k2 && !json_equal(k, k2), "key: another boot id, another key");
	json_decref(k2);
	setenv("STUB_JAIL", "1", 1);
	k2 = key_now();
	ok(k2 && !json_equal(k, k2), "key: the probe jailed or not, another key");
	unsetenv("STUB_JAIL");
	json_decref(k2);
	k2 = accel_host_key(KSHA, "/dev/zero");
	ok(k2 && !json_equal(k, k2), "key: another device, another key");
	json_decref(k2);
	TRY(utimes(qemu, tv));
	k2 = key_now();
	ok(k2 && !json_equal(k, k2), "key: the QEMU binary changed (mtime), another key");
	json_decref(k2);
	k2 = accel_host_key("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdee",
			    "/dev/null");
	ok(k2 && !json_equal(k, k2), "key: another kernel, another key");
	json_decref(k2);
	json_decref(k);
	/* a part that cannot be known: no key, so no cache */
	ok(!accel_host_key("0123", "/dev/null") && !accel_host_key("../../etc/passwd", "/dev/null") &&
	   !accel_host_key(KSHA "0", "/dev/null"), "key: none for a kernel sha that is not one");
	ok(!accel_host_key(KSHA, "/nonexistent/kvm"), "key: none without the device");
	{
		static const char *const bad[] = { "", "x", "E20F729E-6955-4F12-A6DD-C4E7F9D77507",
			"e20f729e-6955-4f12-a6dd-c4e7f9d7750", "e20f729e-6955-4f12-a6dd-c4e7f9d775077",
			"e20f729e+6955-4f12-a6dd-c4e7f9d77507", "e20f729e-6955-4f12-a6dd-c4e7f9d7750g",
			"../../../../../../../../../../../../.." };
		int none = 1;

		for (size_t i = 1; i < sizeof bad / sizeof bad[0]; i++) {
			k2 = key_boot(bad[i]);
			none &= !k2;
			json_decref(k2);
		}
		ok(none, "key: none for a boot id not of the uuid shape");
	}
	{
		const char *path = getenv("PATH");
		char keep[PATH_MAX];

		snprintf(keep, sizeof keep, "%s", path);
		setenv("PATH", "/nonexistent", 1);
		ok(!key_now(), "key: none without QEMU in PATH");
		setenv("PATH", keep, 1);
	}
}

/* A good file for key, written by the cache itself, read back whole. */
static void test_roundtrip(const char *hc)
{
	char reason[256], p[PATH_MAX + 80], probed[32], big[600];
	const char *a = NULL;
	json_t *k = key_now(), *k2;
	struct stat st;

	setenv("ISOPOD_ACCEL_HOST_CACHE_DIR", hc, 1);
	ok(!hit(k, reason, sizeof reason), "read: an empty cache (no directory) misses");
	ok(stat(hc, &st) < 0 && errno == ENOENT, "read: makes nothing");
	accel_host_write(k, "tcg", "kvm: guest kernel did not reach the agent in 10 s",
			 "2026-12-04T08:00:00Z");
	key_path(p, sizeof p, hc, k);
	ok(strlen(p) == strlen(hc) + 39 && !strncmp(p + strlen(hc), "/0123456789abcdef-", 18) &&
	   hex_span(p + strlen(hc) + 18) == 16 && !strcmp(p + strlen(p) - 5, ".json"),
	   "write: the file <16 hex of the kernel>-<16 hex of the key>.json: %s", p + strlen(hc));
	ok(stat(hc, &st) == 0 && (st.st_mode & 07777) == 0700 && stat(p, &st) == 0 &&
	   (st.st_mode & 07777) == 0600, "write: the directory made 0700, the file 0600");
	ok(accel_host_read(k, &a, reason, sizeof reason, probed, sizeof probed) && !strcmp(a, "tcg") &&
	   !strcmp(reason, "kvm: guest kernel did not reach the agent in 10 s (host cache)") &&
	   !strcmp(probed, "2026-12-04T08:00:00Z"), "read: the verdict, its reason saying where from: %s",
	   reason);
	k2 = key_boot("00000000-0000-0000-0000-000000000001");
	ok(!hit(k2, reason, sizeof reason), "read: another key (a fake boot id) misses");
	accel_host_write(k2, "kvm", "kvm: the agent answered in 9 ms", "2026-12-04T08:00:01Z");
	ok(hit(k2, reason, sizeof reason) && !strcmp(reason, "kvm: the agent answered in 9 ms (host cache)") &&
	   hit(k, reason, sizeof reason) && !strcmp(reason, "kvm: guest kernel did not reach the agent in 10 s (host cache)"),
	   "write: one file per key, both kept");
	json_decref(k2);
	accel_host_write(k, "tcg", "kvm: no", "2026-12-04T08:00:00Z");
	/* a long reason is cut, its suffix never */
	memset(big, 'r', sizeof big - 1);
	big[sizeof big - 1] = 0;
	accel_host_write(k, "kvm", big, "2026-12-04T08:00:00Z");
	ok(accel_host_read(k, &a, reason, 100, probed, sizeof probed) && strlen(reason) == 99 &&
	   !strcmp(reason + 99 - strlen(HOST_SUFFIX), HOST_SUFFIX), "read: a long reason cut, the suffix kept");
	accel_host_write(k, "tcg", "kvm: no", "2026-12-04T08:00:00Z");
	/* the switch */
	setenv("ISOPOD_ACCEL_HOST_CACHE", "no", 1);
	ok(!hit(k, reason, sizeof reason), "off: ISOPOD_ACCEL_HOST_CACHE=no misses");
	setenv("ISOPOD_ACCEL_HOST_CACHE", "maybe", 1);
	ok(!hit(k, reason, sizeof reason), "off: a bad ISOPOD_ACCEL_HOST_CACHE is no");
	setenv("ISOPOD_ACCEL_HOST_CACHE", "yes", 1);
	ok(hit(k, reason, sizeof reason), "on: ISOPOD_ACCEL_HOST_CACHE=yes");
	unsetenv("ISOPOD_ACCEL_HOST_CACHE");
	json_decref(k);
}

/* The switch in a configuration file, the user's last. */
static void test_config(const char *home)
{
	char host[PATH_MAX], user[PATH_MAX], reason[256];
	json_t *k = key_now();
	FILE *f;

	snprintf(host, sizeof host, "%s/host.conf", home);
	snprintf(user, sizeof user, "%s/user.conf", home);
	setenv("ISOPOD_SYSCONFIG", host, 1);
	setenv("ISOPOD_CONFIG", user, 1);
	if ((f = fopen(host, "w")))
		fputs("accel_host_cache = no\n", f), fclose(f);
	ok(!hit(k, reason, sizeof reason), "config: accel_host_cache = no in the host's file");
	if ((f = fopen(user, "w")))
		fputs("accel_host_cache = yes # mine\n", f), fclose(f);
	ok(hit(k, reason, sizeof reason), "config: the user's yes wins");
	if ((f = fopen(user, "w")))
		fputs("accel_host_cache = sometimes\n", f), fclose(f);
	ok(!hit(k, reason, sizeof reason), "config: a bad value is no");
	setenv("ISOPOD_ACCEL_HOST_CACHE", "yes", 1);
	ok(hit(k, reason, sizeof reason), "config: the environment wins over the files");
	unsetenv("ISOPOD_ACCEL_HOST_CACHE");
	setenv("ISOPOD_SYSCONFIG", "/dev/null", 1);
	setenv("ISOPOD_CONFIG", "/dev/null", 1);
	ok(hit(k, reason, sizeof reason), "config: none says yes");
	json_decref(k);
}

/* What the cache refuses to trust: each a miss, never an error or a hang. */
static void test_refused(const char *hc, const char *home)
{
	char p[PATH_MAX + 80], q[PATH_MAX + 96], reason[256];
	json_t *k = key_now();

	key_path(p, sizeof p, hc, k);
	ok(hit(k, reason, sizeof reason), "refused: (the good file hits)");
	TRY(chmod(p, 0620));
	ok(!hit(k, reason, sizeof reason), "refused: a group-writable file");
	TRY(chmod(p, 0602));
	ok(!hit(k, reason, sizeof reason), "refused: a world-writable file");
	TRY(chmod(p, 0600));
	TRY(chmod(hc, 0770));
	ok(!hit(k, reason, sizeof reason), "refused: a group-writable directory");
	TRY(chmod(hc, 0707));
	ok(!hit(k, reason, sizeof reason), "refused: a world-writable directory");
	TRY(chmod(hc, 0755));
	ok(hit(k, reason, sizeof reason), "a directory others may read: still ours");
	TRY(chmod(hc, 0700));
	if (geteuid() == 0 && chown(p, 4242, 4242) == 0) {
		ok(!hit(k, reason, sizeof reason), "refused: a file of another uid");
		TRY(chown(p, 0, 4242));
		ok(hit(k, reason, sizeof reason), "a file of ours in another group, writable by no other: hits");
		TRY(chown(p, 0, 0));
		TRY(chown(hc, 4242, 0));
		ok(!hit(k, reason, sizeof reason), "refused: a directory of another uid");
		TRY(chown(hc, 0, 0));
	} else {
		ok(1, "# skip: another uid's file and directory need root");
	}
	/* a link to the good file, a link to the good directory */
	snprintf(q, sizeof q, "%s.real", p);
	TRY(rename(p, q));
	TRY(symlink(q, p));
	ok(!hit(k, reason, sizeof reason), "refused: the file a symbolic link");
	TRY(unlink(p));
	TRY(mkfifo(p, 0600));
	ok_bounded(10, !hit(k, reason, sizeof reason), "refused: a FIFO (and no hang)");
	TRY(unlink(p));
	TRY(rename(q, p));
	snprintf(q, sizeof q, "%s/link", home);
	TRY(symlink(hc, q));
	setenv("ISOPOD_ACCEL_HOST_CACHE_DIR", q, 1);
	ok(!hit(k, reason, sizeof reason), "refused: the directory a symbolic link");
	accel_host_write(k, "kvm", "planted", "2026-12-04T08:00:00Z");
	setenv("ISOPOD_ACCEL_HOST_CACHE_DIR", hc, 1);
	ok(hit(k, reason, sizeof reason) && !strstr(reason, "planted"),
	   "refused: nothing written through the link");
	TRY(unlink(q));
	json_decref(k);
}

/* step(): one component of /run/isopod/accel or $XDG_RUNTIME_DIR/isopod/accel */
static void test_step(const char *home)
{
	char base[PATH_MAX], p[PATH_MAX + 16], why[PATH_MAX + 256];
	int fd;

	snprintf(base, sizeof base, "%s/rt", home);
	TRY(mkdir(base, 0700));
	fd = step(open(base, O_RDONLY | O_DIRECTORY), "isopod", 0, why, sizeof why);
	ok(fd < 0 && !why[0], "step: missing and not to be made: none, no complaint");
	fd = step(open(base, O_RDONLY | O_DIRECTORY), "isopod", 1, why, sizeof why);
	snprintf(p, sizeof p, "%s/isopod", base);
	ok(fd >= 0, "step: made 0700 and opened");
	if (fd >= 0)
		close(fd);
	TRY(chmod(p, 0775));
	fd = step(open(base, O_RDONLY | O_DIRECTORY), "isopod", 1, why, sizeof why);
	ok(fd < 0 && strstr(why, "writable by no one else"), "step: group-writable refused: %s", why);
	TRY(rmdir(p));
	TRY(symlink("/tmp", p));
	fd = step(open(base, O_RDONLY | O_DIRECTORY), "isopod", 1, why, sizeof why);
	ok(fd < 0 && strstr(why, "symbolic link"), "step: a link refused: %s", why);
	TRY(unlink(p));
	ok(step(-1, "isopod", 1, why, sizeof why) < 0, "step: after a refused step, none");
	/* as root, $XDG_RUNTIME_DIR is never the base (sudo -E keeps a user's) */
	if (geteuid() == 0) {
		unsetenv("ISOPOD_ACCEL_HOST_CACHE_DIR");
		setenv("XDG_RUNTIME_DIR", base, 1);
		host_dir(0, p, sizeof p, why, sizeof why);
		ok(!strcmp(p, "/run/isopod/accel"), "root: /run/isopod/accel, not $XDG_RUNTIME_DIR: %s",
		   p);
	} else {
		setenv("XDG_RUNTIME_DIR", base, 1);
		fd = host_dir(1, p, sizeof p, why, sizeof why);
		ok(fd >= 0 && strstr(p, "/rt/isopod/accel"), "user: $XDG_RUNTIME_DIR/isopod/accel: %s", p);
		if (fd >= 0)
			close(fd);
	}
}

/* Garbage to the parser: every mutation of a good file misses, no crash. */
static void test_parse(void)
{
	char reason[128], probed[32];
	const char *a;
	json_t *k = key_now(), *good, *c;
	const char *mut[] = { "accel", "reason", "probed", "key" };
	json_t *bad[] = { json_null(), json_true(), json_integer(1), json_string(""),
			  json_string("KVM"), json_string("kvm "), json_array(), json_object(),
			  json_string("2026-02-31T00:00:00Z"), json_real(0.5) };
	int miss = 1, n = 0;
	unsigned seed = 12345;

	good = json_pack("{s:O, s:s, s:s, s:s}", "key", k, "accel", "kvm", "reason", "r", "probed",
			 "2026-12-04T08:00:00Z");
	ok(host_parse(good, k, &a, reason, sizeof reason, probed, sizeof probed),
	   "parse: (the good object hits)");
	for (size_t i = 0; i < sizeof mut / sizeof mut[0]; i++) {
		c = json_deep_copy(good);
		json_object_del(c, mut[i]);
		miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
		json_decref(c);
		for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++) {
			/* any text but "" is a reason */
			if (!strcmp(mut[i], "reason") && json_string_length(bad[j]))
				continue;
			n++;
			c = json_deep_copy(good);
			json_object_set(c, mut[i], bad[j]);
			miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
			json_decref(c);
		}
	}
	ok(miss, "parse: each member missing or of %d wrong values: a miss", n);
	/* each member of the key changed, removed, or one added */
	miss = 1;
	{
		const char *kk;
		json_t *kv;

		json_object_foreach(k, kk, kv) {
			c = json_deep_copy(good);
			json_object_set_new(json_object_get(c, "key"), kk, json_string("x"));
			miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
			json_object_del(json_object_get(c, "key"), kk);
			miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
			json_decref(c);
		}
		c = json_deep_copy(good);
		json_object_set_new(json_object_get(c, "key"), "extra", json_true());
		miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
		json_decref(c);
	}
	ok(miss, "parse: a key with a member changed, missing or added: a miss");
	/* random documents, and every cut of the good one's text */
	miss = 1;
	{
		static const char alpha[] = "{}[]\":,kvmtcgreasonprobedkey0123456789 -TZ";
		char *s = json_dumps(good, JSON_COMPACT), buf[512];
		size_t len = strlen(s);
		json_error_t e;

		for (size_t cut = 0; cut < len; cut++) {
			c = json_loadb(s, cut, 0, &e);
			miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
			json_decref(c);
		}
		for (int i = 0; i < 2000; i++) {
			size_t l = (seed = seed * 1103515245 + 12345) % (sizeof buf - 1) + 1;

			for (size_t j = 0; j < l; j++)
				buf[j] = alpha[((seed = seed * 1103515245 + 12345) >> 16) % (sizeof alpha - 1)];
			c = json_loadb(buf, l, 0, &e);
			miss &= !host_parse(c, k, &a, reason, sizeof reason, probed, sizeof probed);
			json_decref(c);
		}
		free(s);
	}
	ok(miss, "parse: every cut of a good file and 2000 random documents: misses, no crash");
	ok(!host_parse(good, NULL, &a, reason, sizeof reason, probed, sizeof probed) &&
	   !host_parse(good, k, &a, reason, sizeof HOST_SUFFIX, probed, sizeof probed),
	   "parse: no key, or no room for the suffix: a miss");
	for (size_t j = 0; j < sizeof bad / sizeof bad[0]; j++)
		json_decref(bad[j]);
	json_decref(good);
	json_decref(k);
}

int main(void)
{
	char home[64], hc[96], bin[96], qemu[128], cmd[128];
	FILE *f;

	snprintf(home, sizeof home, "/tmp/accelhost_test.%ld", (long)getpid());
	mkdirs(home, 0700);
	/* a QEMU of our own in PATH (its identity is in the key) */
	snprintf(bin, sizeof bin, "%s/bin", home);
	mkdirs(bin, 0700);
	snprintf(qemu, sizeof qemu, "%s/" QEMU, bin);
	if ((f = fopen(qemu, "w")))
		fputs("#!/bin/sh\nexit 1\n", f), fclose(f);
	TRY(chmod(qemu, 0755));
	setenv("PATH", bin, 1);
	setenv("ISOPOD_TEST_BOOT_ID", BID, 1);
	setenv("ISOPOD_SYSCONFIG", "/dev/null", 1);
	setenv("ISOPOD_CONFIG", "/dev/null", 1);
	unsetenv("ISOPOD_ACCEL_HOST_CACHE");
	snprintf(hc, sizeof hc, "%s/hc", home);
	setenv("ISOPOD_ACCEL_HOST_CACHE_DIR", hc, 1);

	test_key(qemu);
	test_roundtrip(hc);
	test_config(home);
	test_refused(hc, home);
	test_parse();
	test_step(home);

	snprintf(cmd, sizeof cmd, "rm -rf %s", home);
	setenv("PATH", "/usr/bin:/bin", 1);
	if (system(cmd) != 0)
		printf("# unable to remove %s\n", home);
	return tap_done();
}
