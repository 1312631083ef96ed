/* qjail_test.c - lib/qjail.c: sysctl_value, what qjail_give compares
 * fs.protected_hardlinks with before it hands a VM directory to the jail. */
/* qjail.c and jail.c each have a static fail(); this program includes both */
#define fail qjail_fail
#include "../../lib/qjail.c" /* self-contained: t/run-unit links frame+util only */
#undef fail
#include "../../lib/config.c"
#include "../../lib/image.c"
#include "../../lib/jail.c"
#include "../../lib/jaildeps.c"
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

/* jail_deps: what the jail binds for a program (ldd): every path of a
 * dynamic one, nothing for a static one, and an error, never a partial or
 * empty list, when ldd fails. */
static void test_deps(void)
{
	char *out[256], err[512];
	size_t n = 0, i;
	int r, libc = 0;

	r = jail_deps("/bin/sh", out, &n, 256, err, sizeof err);
	for (i = 0; i < n; i++) {
		libc |= strstr(out[i], "libc.so") != NULL;
		free(out[i]);
	}
	ok(r == 0 && n >= 2 && libc, "deps of /bin/sh: %zu paths, libc among them", n);
	n = 0;
	r = jail_deps("agent/isopod-agent", out, &n, 256, err, sizeof err);
	ok(access("agent/isopod-agent", X_OK) != 0 || (r == 0 && n == 0),
	   "deps of the static agent: none (%d, %zu)", r, n);
	n = 0;
	r = jail_deps("/nonexistent/prog", out, &n, 256, err, sizeof err);
	ok(r < 0 && n == 0, "deps of a missing program: an error, no list (%s)", err);
}

/* img_write: the file qemu-img writes is handed over only when it has one
 * name (a second link would keep the inode in the jail's reach); the
 * refused file keeps its owner and mode. */
static void test_img_write(const char *dir)
{
	char p[PATH_MAX], l[PATH_MAX], err[512] = "";
	struct qimg qi = { .wfd = -1 };
	struct stat st;
	int fd, r;

	snprintf(p, sizeof p, "%s/disk.qcow2", dir);
	snprintf(l, sizeof l, "%s/link", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
	ok(link(p, l) == 0, "a second link to the disk");
	r = img_write(&qi, p, err, sizeof err);
	ok(r < 0 && qi.wfd < 0 && strstr(err, "more than one link"),
	   "img_write refuses a file with 2 links (%s)", err);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "its mode kept: %o",
	   (unsigned)(st.st_mode & 07777));
	unlink(l);
	r = img_write(&qi, p, err, sizeof err);
	ok(r == 0 && qi.wfd >= 0, "the control: one link, handed over (%d)", r);
	img_giveback(&qi);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0600, "and given back 0600");
	unlink(p);
}

/* The deadline of a qemu-img (here unjailed: the same wait): killed at
 * it, reaped, an error; captured output read only until then. */
static void test_deadline(void)
{
	char *slow[] = { "sleep", "30", NULL }, *quick[] = { "true", "info", NULL };
	char err[512] = "", buf[64];
	int64_t t0;
	int r;

	setenv("ISOPOD_JAIL", "0", 1);
	t0 = mono_ms();
	r = qjail_img(&(struct qimg_req){ .av = slow, .outfd = PROC_NULL, .errfd = PROC_INHERIT,
					  .timeout_ms = 300 }, err, sizeof err);
	ok(r == -1 && errno == ETIMEDOUT && strstr(err, "deadline") && mono_ms() - t0 < 5000,
	   "a qemu-img past its deadline is killed: %d, %s, %lld ms", r, err,
	   (long long)(mono_ms() - t0));
	t0 = mono_ms();
	r = qjail_img_capture(&(struct qimg_req){ .av = slow, .errfd = PROC_INHERIT,
						  .timeout_ms = 300 }, buf, sizeof buf, err, sizeof err);
	ok(r == -1 && mono_ms() - t0 < 5000, "and captured, too: %d, %lld ms", r,
	   (long long)(mono_ms() - t0));
	r = qjail_img(&(struct qimg_req){ .av = quick, .outfd = PROC_NULL, .errfd = PROC_INHERIT,
					  .timeout_ms = 300 }, err, sizeof err);
	ok(r == 0, "the control: one that ends in time: 0 (%d)", r);
	unsetenv("ISOPOD_JAIL");
}

int main(void)
{
	char dir[] = "/tmp/isopod-qjail-test.XXXXXX";

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_sysctl(dir);
	test_deps();
	test_img_write(dir);
	test_deadline();
	rmdir(dir);
	return tap_done();
}
