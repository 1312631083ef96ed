/* qjail_test.c - lib/qjail.c: sysctl_value, what qjail_give compares
 * fs.protected_hardlinks with before it hands a VM directory to the jail. */
/* qjail.c and jail.c each have a static fail(); this program includes both */
#define fail qjail_fail
#include "../../lib/qjail.c" /* self-contained: t/run-unit links frame+util only */
#undef fail
#include "../../lib/config.c"
#include "../../lib/image.c"
#include "../../lib/jail.c"
#include "../../lib/jailchild.c"
#include "../../lib/proc.c"
#include "../../lib/ranges.c"
#include "../../lib/taphold.c"
#include "../../lib/vm.c"

#include "tap.h"

static void test_sysctl(const char *dir)
{
	static const char *const text[] = { "1\n", "0\n", "", "x\n", "12" };
	static const long want[] = { 1, 0, -1, -1, 12 };
	char p[PATH_MAX];

	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		FILE *f;

		snprintf(p, sizeof p, "%s/sysctl-%zu", dir, i);
		f = fopen(p, "w");
		if (f) {
			fputs(text[i], f);
			fclose(f);
		}
		ok(sysctl_value(p) == want[i], "sysctl_value of text %zu: %ld", i, want[i]);
		unlink(p);
	}
	snprintf(p, sizeof p, "%s/no-such-sysctl", dir);
	ok(sysctl_value(p) == -1, "sysctl_value of a missing file: -1");
	ok(sysctl_value("/proc/sys/fs/protected_hardlinks") == 1,
	   "this host protects hard links (the jail's handover needs it)");
}

int main(void)
{
	char dir[] = "/tmp/isopod-qjail-test.XXXXXX";

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_sysctl(dir);
	rmdir(dir);
	return tap_done();
}
