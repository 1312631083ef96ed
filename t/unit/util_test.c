/* util_test.c - unit tests of lib/util.c: atomic writes, JSON files, number
 * parsing, random ids.  Built by t/run-unit with ASan + UBSan. */
#include "util.h"
#include "tap.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/isopod-util-test.XXXXXX";

/* Number of entries in dir other than . and .. */
static int entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static int file_is(const char *path, const char *want, size_t n)
{
	char buf[4096];
	FILE *f = fopen(path, "rb");
	size_t got;

	if (!f)
		return 0;
	got = fread(buf, 1, sizeof buf, f);
	fclose(f);
	return got == n && !memcmp(buf, want, n);
}

static void test_atomic_write(void)
{
	char p[256];
	struct stat st;
	const char bin[] = "a\0b\nc";

	snprintf(p, sizeof p, "%s/file", dir);
	ok(atomic_write(p, "hello\n", 6, 0640) == 0, "atomic_write returns 0");
	ok(file_is(p, "hello\n", 6), "atomic_write wrote the content");
	ok(stat(p, &st) == 0 && (st.st_mode & 0777) == (0640 & ~(mode_t)022 & 0777),
	   "atomic_write honours the mode (under umask 022)");
	ok(entries() == 1, "atomic_write leaves no tmp file");
	ok(atomic_write(p, bin, sizeof bin - 1, 0644) == 0 && file_is(p, bin, sizeof bin - 1),
	   "atomic_write replaces the file, binary-safe");
	ok(atomic_write(p, "", 0, 0644) == 0 && file_is(p, "", 0), "atomic_write of 0 bytes");
	ok(entries() == 1, "still no tmp file after replacing");
	snprintf(p, sizeof p, "%s/no/such/dir/file", dir);
	errno = 0;
	ok(atomic_write(p, "x", 1, 0644) == -1 && errno == ENOENT,
	   "atomic_write into a missing directory fails with ENOENT");
	ok(entries() == 1, "a failed atomic_write leaves nothing behind");
}

static void test_json_write(void)
{
	char p[256];
	json_t *o, *back;
	struct stat st;

	snprintf(p, sizeof p, "%s/meta.json", dir);
	o = json_pack("{s:s, s:i, s:b, s:s}", "id", "vm-0123456789ab", "mem_mib", 256, "keep", 0,
		      "name", "quo\"te\n\\ \xc3\xa9");
	ok(o != NULL, "json_pack");
	ok(json_write_atomic(p, o) == 0, "json_write_atomic returns 0");
	back = json_load_path(p);
	ok(back != NULL && json_equal(o, back), "json_write_atomic content reads back equal");
	ok(stat(p, &st) == 0 && st.st_size > 0, "json file is not empty");
	{
		char buf[1024];
		FILE *f = fopen(p, "rb");
		size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;

		if (f)
			fclose(f);
		ok(n > 0 && buf[n - 1] == '\n', "json file ends with a newline");
	}
	ok(entries() == 2, "json_write_atomic leaves no tmp file");
	json_decref(o);
	json_decref(back);

	/* json_load_path: missing file -> ENOENT, bad JSON / non-object -> EINVAL */
	snprintf(p, sizeof p, "%s/missing.json", dir);
	errno = 0;
	ok(json_load_path(p) == NULL && errno == ENOENT, "json_load_path of a missing file: ENOENT");
	snprintf(p, sizeof p, "%s/bad.json", dir);
	atomic_write(p, "{\"a\":", 5, 0644);
	errno = 0;
	ok(json_load_path(p) == NULL && errno == EINVAL, "json_load_path of bad JSON: EINVAL");
	atomic_write(p, "[1,2]", 5, 0644);
	errno = 0;
	ok(json_load_path(p) == NULL && errno == EINVAL, "json_load_path of a non-object: EINVAL");
	unlink(p);
}

static void test_parse_ll(void)
{
	long long v = 0;

	ok(parse_ll("5", 1, 10, &v) == 0 && v == 5, "parse_ll 5 in 1..10");
	ok(parse_ll("1", 1, 10, &v) == 0 && v == 1, "parse_ll low bound inclusive");
	ok(parse_ll("10", 1, 10, &v) == 0 && v == 10, "parse_ll high bound inclusive");
	v = 42;
	ok(parse_ll("0", 1, 10, &v) == -1 && v == 42, "parse_ll below range -> -1, out untouched");
	ok(parse_ll("11", 1, 10, &v) == -1, "parse_ll above range -> -1");
	ok(parse_ll("-3", -5, 5, &v) == 0 && v == -3, "parse_ll negative in range");
	ok(parse_ll("", 0, 10, &v) == -1, "parse_ll empty -> -1");
	ok(parse_ll(NULL, 0, 10, &v) == -1, "parse_ll NULL -> -1");
	ok(parse_ll(" 5", 0, 10, &v) == -1, "parse_ll leading space -> -1");
	ok(parse_ll("5 ", 0, 10, &v) == -1, "parse_ll trailing space -> -1");
	ok(parse_ll("5x", 0, 10, &v) == -1, "parse_ll trailing junk -> -1");
	ok(parse_ll("0x10", 0, 100, &v) == -1, "parse_ll hex -> -1 (decimal only)");
	ok(parse_ll("99999999999999999999", 0, 10, &v) == -1, "parse_ll overflow -> -1");
	ok(parse_ll("86400000", 1, 86400000, &v) == 0 && v == 86400000, "parse_ll ms budget bound");
}

static int all_hex(const char *s)
{
	for (; *s; s++)
		if (!isxdigit((unsigned char)*s) || isupper((unsigned char)*s))
			return 0;
	return 1;
}

static void test_rand_hex(void)
{
	char a[129], b[129];

	memset(a, 'Z', sizeof a);
	rand_hex(a, 6);
	ok(strlen(a) == 12 && all_hex(a), "rand_hex 6 bytes -> 12 lower-case hex digits (%s)", a);
	rand_hex(b, 6);
	ok(strcmp(a, b) != 0, "two rand_hex draws differ");
	rand_hex(a, 1);
	ok(strlen(a) == 2 && all_hex(a), "rand_hex 1 byte -> 2 digits");
	rand_hex(a, 0);
	ok(a[0] == 0, "rand_hex 0 bytes -> empty string");
	rand_hex(a, 64);
	ok(strlen(a) == 128 && all_hex(a), "rand_hex 64 bytes -> 128 digits");
}

int main(void)
{
	umask(022);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_atomic_write();
	test_json_write();
	test_parse_ll();
	test_rand_hex();
	{
		char cmd[300];

		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", dir);
	}
	return tap_done();
}
