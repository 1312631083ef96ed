/* warm_test.c - warm_orphaned_by (lib/warm.c) in a made-up store: a
 * snapshot is orphaned by the command-line fingerprint computed from
 * lib/qemu.c, with no warm/argv.json to read (an old one is ignored), and
 * a TCG one by a TSC rate the store no longer keeps (lib/tsc.c). */
#include "../../lib/proc.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/qemu.c"
#include "../../lib/tree.c"
#include "../../lib/tsc.c"
#include "../../lib/warm.c"

#include "tap.h"

#define K "1111111111111111111111111111111111111111111111111111111111111111"
#define B "2222222222222222222222222222222222222222222222222222222222222222"

static void put(const char *home, const char *rel, const char *text)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof p, "%s/%s", home, rel);
	if ((f = fopen(p, "w"))) {
		fputs(text, f);
		fclose(f);
	}
}

static int has_reason(json_t *why, const char *needle)
{
	size_t i;
	json_t *v;

	json_array_foreach(why, i, v)
		if (strstr(json_string_value(v), needle))
			return 1;
	return 0;
}

/* TCG snapshot told rate: orphaned when the store keeps another. */
static int tsc_orphan(json_t *meta, const char *accel, const char *rate)
{
	char kt[512];
	json_t *why;
	int r;

	snprintf(kt, sizeof kt, "isopod-warm 1\nnet none\naccel %s\nqemu QEMU 7.2\narg -append\n"
		 "arg console=ttyS0 quiet reboot=t panic=-1 rdinit=/init %s\narg -add-fd\n", accel,
		 rate);
	json_object_set_new(meta, "key_text", json_string(kt));
	why = warm_orphaned_by(meta, "QEMU 7.2");
	r = has_reason(why, "built for a TSC rate");
	json_decref(why);
	json_object_del(meta, "key_text");
	return r;
}

static void keep_rate(const char *home, long long khz)
{
	char cpu[160], text[512];

	tsc_cpu(cpu, sizeof cpu);
	snprintf(text, sizeof text, "{\"format\":1,\"tsc_khz\":%lld,\"cpu\":\"%s\",\"reason\":\"r\"}",
		 khz, cpu);
	put(home, "accel/tsc.json", text);
}

static void test_tsc(const char *home, json_t *meta)
{
	const char *r = "tsc_early_khz=2096000 lpj=4000000 tsc=reliable";
	const char *old = "tsc_early_khz=2000000 lpj=4000000";
	char p[PATH_MAX];

	ok(!tsc_orphan(meta, "tcg", r), "no kept TSC rate: a TCG snapshot's is not judged");
	snprintf(p, sizeof p, "%s/accel", home);
	mkdirs(p, 0700);
	keep_rate(home, 2096000);
	ok(!tsc_orphan(meta, "tcg", r), "the rate the store keeps: not orphaned");
	ok(tsc_orphan(meta, "tcg", old), "the old line where the store keeps a rate: orphaned");
	keep_rate(home, 3000000);
	ok(tsc_orphan(meta, "tcg", r), "another rate than the store keeps: orphaned");
	ok(!tsc_orphan(meta, "kvm", old), "KVM's: never judged by the rate");
	keep_rate(home, 0);
	ok(!tsc_orphan(meta, "tcg", old), "the old line where the store keeps none: not orphaned");
	ok(tsc_orphan(meta, "tcg", r), "a rate where the store keeps none: orphaned");
	put(home, "accel/tsc.json", "garbage");
	ok(!tsc_orphan(meta, "tcg", r), "an invalid kept file: unknown, not orphaned");
	snprintf(p, sizeof p, "%s/accel/tsc.json", home);
	unlink(p);
}

int main(void)
{
	char home[64], p[PATH_MAX + 32], fp[65];
	json_t *meta, *why;

	snprintf(home, sizeof home, "/tmp/warm_test.%ld", (long)getpid());
	snprintf(p, sizeof p, "%s/kernels/" K, home);
	mkdirs(p, 0700);
	snprintf(p, sizeof p, "%s/images", home);
	mkdirs(p, 0700);
	snprintf(p, sizeof p, "%s/warm", home);
	mkdirs(p, 0700);
	setenv("ISOPOD_HOME", home, 1);
	put(home, "kernels/" K "/vmlinux", "");
	put(home, "kernels/current", K "\n");
	put(home, "images/base-" B ".img", "");
	put(home, "images/current-base", B "\n");

	qemu_fingerprint(fp);
	meta = json_pack("{s:{s:s, s:{s:s, s:s}, s:[], s:s, s:s}, s:s}", "shape", "kernel", K, "base",
			 "flavor", "base", "sha256", B, "layers", "net", "none", "qemu", "QEMU 7.2",
			 "argv_fingerprint", fp);
	why = warm_orphaned_by(meta, "QEMU 7.2");
	ok(json_array_size(why) == 0, "this build's fingerprint: not orphaned (%zu reasons)",
	   json_array_size(why));
	json_decref(why);

	/* An old warm/argv.json naming another fingerprint is not read. */
	put(home, "warm/argv.json", "{\"fingerprint\":\"" K "\"}\n");
	why = warm_orphaned_by(meta, "QEMU 7.2");
	ok(json_array_size(why) == 0, "a stale warm/argv.json is ignored");
	json_decref(why);

	test_tsc(home, meta);
	json_object_set_new(meta, "argv_fingerprint", json_string(B));
	why = warm_orphaned_by(meta, "QEMU 7.2");
	ok(has_reason(why, "gave QEMU another command line"), "another fingerprint: orphaned");
	json_decref(why);
	json_object_del(meta, "argv_fingerprint");
	why = warm_orphaned_by(meta, "QEMU 7.2");
	ok(has_reason(why, "gave QEMU another command line"), "no fingerprint: orphaned");
	json_decref(why);

	/* Library code returns its errors (a store path that does not fit, a
	 * warm/ that cannot be made): the caller, not lib/warm.c, decides
	 * whether that ends the process. */
	{
		char v[256], err[512], *big = malloc(PATH_MAX + 16);

		memset(big, 'x', PATH_MAX + 15);
		big[0] = '/';
		big[PATH_MAX + 15] = 0;
		setenv("ISOPOD_HOME", big, 1);
		errno = 0;
		ok(!warm_root(0) && errno == ENAMETOOLONG, "warm_root: a home too long is ENAMETOOLONG");
		errno = 0;
		ok(warm_lock(K, LOCK_EX | LOCK_NB) < 0 && errno == ENAMETOOLONG,
		   "warm_lock: -1 ENAMETOOLONG, no exit");
		errno = 0;
		ok(warm_remove(K, NULL) < 0 && errno == ENAMETOOLONG, "warm_remove: -1 ENAMETOOLONG");
		errno = 0;
		ok(!warm_meta(K) && errno == ENAMETOOLONG, "warm_meta: NULL ENAMETOOLONG");
		big[PATH_MAX - 40] = 0; /* warm/ fits, kernels/<64 hex>/vmlinux does not */
		setenv("ISOPOD_HOME", big, 1);
		json_object_set_new(meta, "argv_fingerprint", json_string(fp));
		errno = 0;
		ok(!warm_orphaned_by(meta, "QEMU 7.2") && errno == ENAMETOOLONG,
		   "warm_orphaned_by: NULL ENAMETOOLONG (the snapshot kept)");
		/* warm/ under a regular file: cannot be made */
		snprintf(p, sizeof p, "%s/file", home);
		put(home, "file", "");
		setenv("ISOPOD_HOME", p, 1);
		errno = 0;
		ok(!warm_root(1) && errno == ENOTDIR, "warm_root(1): an unmakeable warm/ is ENOTDIR");
		ok(warm_lock(K, LOCK_EX | LOCK_NB) < 0 && errno == ENOTDIR, "warm_lock: -1 ENOTDIR");
		err[0] = 0;
		ok(qemu_version(v, sizeof v, err, sizeof err) < 0 &&
		   (strstr(err, "unable to create") || strstr(err, "not found")),
		   "qemu_version: -1 with the reason (%s)", err);
		setenv("ISOPOD_HOME", home, 1);
		free(big);
	}
	json_decref(meta);

	{
		/* the template's jail name: of the key and the store, by the
		 * store's identity (another store: another name; the same
		 * store by another path: the same name) */
		char a[WARM_TPL_NAME_SZ], b[WARM_TPL_NAME_SZ], c[WARM_TPL_NAME_SZ], other[PATH_MAX],
			link[PATH_MAX];

		warm_tpl_name(K, a);
		snprintf(other, sizeof other, "%s/other", home);
		mkdirs(other, 0700);
		setenv("ISOPOD_HOME", other, 1);
		warm_tpl_name(K, b);
		snprintf(link, sizeof link, "%s/link", home);
		ok(symlink(home, link) == 0, "a link to the store");
		setenv("ISOPOD_HOME", link, 1);
		warm_tpl_name(K, c);
		setenv("ISOPOD_HOME", home, 1);
		ok(strlen(a) == 4 + 32 + 1 + 16 && !strncmp(a, "tpl-", 4) && !strncmp(a + 4, K, 32) &&
		   a[36] == '-' && hex_span(a + 37) == 16, "warm_tpl_name: tpl-<32 of the key>-<16 of the store> (%s)", a);
		ok(strcmp(a, b) != 0, "warm_tpl_name: another store's is another name (%s, %s)", a, b);
		ok(!strcmp(a, c), "warm_tpl_name: the same store by a link is the same name (%s)", c);
	}

	snprintf(p, sizeof p, "rm -rf %s", home);
	if (system(p) != 0)
		printf("# unable to remove %s\n", home);
	return tap_done();
}
