/* util_test.c - unit tests of lib/util.c: atomic writes, JSON files, number
 * parsing, random ids.  Built by t/run-unit with ASan + UBSan. */
#include "util.h"
#include "tap.h"
#include "fsyncs.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <getopt.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[] = "/tmp/isopod-util-test.XXXXXX";

/* fstat, ours over libc's for the whole program (the linker binds
 * lib/jsonio.c's call here): fails with fstat_errno when that is set, to
 * test what a caller says of an fstat that failed (it cannot be made to
 * fail on a file just opened); counted, so a test sees it ran. */
static int fstat_errno, fstat_calls;

int fstat(int fd, struct stat *st)
{
	fstat_calls++;
	if (fstat_errno) {
		errno = fstat_errno;
		return -1;
	}
	return fstatat(fd, "", st, AT_EMPTY_PATH);
}

/* Number of entries in dir other than . and .., or of those whose name
 * holds sub (".tmp.": a staging file) */
static int entries_with(const char *sub)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && (!sub || strstr(de->d_name, sub)))
			n++;
	closedir(d);
	return n;
}

static int entries(void)
{
	return entries_with(NULL);
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

/* boot_id_of: the shape of /proc/sys/kernel/random/boot_id, nothing
 * else; host_boot_id: this host's, as /proc says */
static void test_boot_id(void)
{
	char b[37], want[64] = "";
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	ok(boot_id_of("0123abcd-4567-89ab-cdef-0123456789ab\n", b) == 0 &&
		   !strcmp(b, "0123abcd-4567-89ab-cdef-0123456789ab"),
	   "boot_id_of: an id and its newline: the id");
	ok(boot_id_of("0123ABCD-4567-89ab-cdef-0123456789ab", b) < 0 &&
		   boot_id_of("0123abcd-4567-89ab-cdef-0123456789a", b) < 0 &&
		   boot_id_of("0123abcd-4567-89ab-cdef-0123456789abc", b) < 0 &&
		   boot_id_of("0123abcd+4567-89ab-cdef-0123456789ab", b) < 0 && boot_id_of("", b) < 0,
	   "boot_id_of: upper case, short, long, a wrong separator, empty: refused");
	if (f) {
		if (!fgets(want, sizeof want, f))
			want[0] = 0;
		fclose(f);
	}
	want[strcspn(want, "\n")] = 0;
	ok(host_boot_id(b) == 0 && strlen(want) == 36 && !strcmp(b, want), "host_boot_id: %s", b);
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
	ok(atomic_write(p, "cache\n", 6, 0600 | ATOMIC_NOSYNC) == 0 && file_is(p, "cache\n", 6) &&
	   stat(p, &st) == 0 && (st.st_mode & 07777) == 0600 && entries() == 1,
	   "atomic_write with ATOMIC_NOSYNC: the content, mode 0600 (the flag no mode bit), no tmp file");
	ok(atomic_write(p, "note\n", 5, 0640 | ATOMIC_NODIRSYNC) == 0 && file_is(p, "note\n", 5) &&
	   stat(p, &st) == 0 && (st.st_mode & 07777) == 0640 && entries() == 1,
	   "atomic_write with ATOMIC_NODIRSYNC: the content, mode 0640 (the flag no mode bit), no tmp file");
	/* Which fsyncs each flag leaves: ATOMIC_NODIRSYNC drops only the
	 * directory's (the bytes stay synced before the rename: a crash never
	 * puts a torn file in place of a whole one), ATOMIC_NOSYNC both */
	{
		static const struct {
			unsigned flags;
			int file, dir;
			const char *what;
		} fs[] = {
			{ .flags = 0, .file = 1, .dir = 1, .what = "no flag" },
			{ .flags = ATOMIC_NOSYNC, .file = 0, .dir = 0, .what = "ATOMIC_NOSYNC" },
			{ .flags = ATOMIC_NODIRSYNC, .file = 1, .dir = 0, .what = "ATOMIC_NODIRSYNC" },
			{ .flags = ATOMIC_NOSYNC | ATOMIC_NODIRSYNC, .file = 0, .dir = 0,
			  .what = "ATOMIC_NOSYNC | ATOMIC_NODIRSYNC" },
		};
		json_t *empty = json_object();

		for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) {
			fsyncs_reset();
			ok(atomic_write(p, "s\n", 2, 0644 | fs[i].flags) == 0 && file_is(p, "s\n", 2) &&
				   fsyncs_file == fs[i].file && fsyncs_dir == fs[i].dir,
			   "atomic_write with %s: %d file fsync(s), %d of the directory (want %d, %d)",
			   fs[i].what, fsyncs_file, fsyncs_dir, fs[i].file, fs[i].dir);
			fsyncs_reset();
			ok(json_write_atomic_flags(p, empty, fs[i].flags) == 0 &&
				   file_is(p, "{}\n", 3) && stat(p, &st) == 0 && (st.st_mode & 07777) == 0644 &&
				   fsyncs_file == fs[i].file && fsyncs_dir == fs[i].dir,
			   "json_write_atomic_flags with %s: 0644, %d file fsync(s), %d of the directory",
			   fs[i].what, fsyncs_file, fsyncs_dir);
		}
		ok(entries() == 1, "... and no tmp file left");
		/* a mode passed where flags go: refused, not a 0000 file */
		errno = 0;
		ok(json_write_atomic_flags(p, empty, 0600) == -1 && errno == EINVAL &&
			   file_is(p, "{}\n", 3) && entries() == 1,
		   "json_write_atomic_flags with permission bits for flags: EINVAL, the file kept");
		json_decref(empty);
	}
	snprintf(p, sizeof p, "%s/no/such/dir/file", dir);
	errno = 0;
	ok(atomic_write(p, "x", 1, 0644) == -1 && errno == ENOENT,
	   "atomic_write into a missing directory fails with ENOENT");
	ok(entries() == 1, "a failed atomic_write leaves nothing behind");
	/* A library function returns an error, it does not exit: a path whose
	 * temporary name does not fit, and a VM whose lock path does not. */
	{
		char lp[PATH_MAX];

		memset(lp, 'a', sizeof lp - 10);
		lp[0] = '/';
		lp[sizeof lp - 10] = 0;
		errno = 0;
		ok(atomic_write(lp, "x", 1, 0644) == -1 && errno == ENAMETOOLONG,
		   "atomic_write whose temporary name does not fit: -1 ENAMETOOLONG, no exit");
		errno = 0;
		ok(vm_wait_stopped(lp + 1, mono_ms()) == -1 && errno == ENAMETOOLONG,
		   "vm_wait_stopped whose lock path does not fit: -1 ENAMETOOLONG, no exit");
	}
	ok(entries() == 1, "still nothing behind");

	/* A file planted at the name the temporary file once had (path.tmp.<pid>,
	 * predictable) is neither written through nor renamed into place. */
	{
		char planted[300];
		int fd;

		snprintf(p, sizeof p, "%s/file", dir);
		snprintf(planted, sizeof planted, "%s.tmp.%ld", p, (long)getpid());
		fd = open(planted, O_WRONLY | O_CREAT | O_EXCL, 0666);
		ok(fd >= 0 && write(fd, "mine", 4) == 4 && close(fd) == 0, "planted %s", planted);
		ok(atomic_write(p, "new\n", 4, 0644) == 0 && file_is(p, "new\n", 4),
		   "atomic_write with a file planted at path.tmp.<pid>: written");
		ok(file_is(planted, "mine", 4), "the planted file is untouched (not used, not renamed)");
		unlink(planted);
		ok(symlink(p, planted) == 0, "planted a symlink instead");
		ok(atomic_write(p, "new2\n", 5, 0644) == 0 && file_is(p, "new2\n", 5),
		   "atomic_write with a symlink planted at path.tmp.<pid>: written");
		unlink(planted);
		ok(entries() == 1, "no tmp file left");
	}
}

/* A group's SIGTERM (isopod-mcp's cancel) that reaches a tool between
 * atomic_write's temporary file and its rename: the file is written whole
 * and the signal ends the tool after it; no path.*.tmp.<pid> is left for
 * isopod-gc to report as leaked. */
static void test_atomic_write_signal(void)
{
	char p[256];
	int st = 0, n0 = entries();
	pid_t pid;

	snprintf(p, sizeof p, "%s/signalled", dir);
	pid = fork();
	if (pid == 0) {
		setenv("ISOPOD_TEST_PAUSE_AT", "atomic-write", 1);
		(void)atomic_write(p, "whole\n", 6, 0644);
		_exit(0);
	}
	ok(pid > 0 && waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st),
	   "the writer stopped between its temporary file and the rename");
	ok(entries() == n0 + 1 && entries_with(".tmp.") == 1, "its temporary file is there");
	kill(pid, SIGTERM);
	kill(pid, SIGCONT);
	ok(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
	   "the SIGTERM that came meanwhile ended it (status %#x)", st);
	ok(file_is(p, "whole\n", 6), "after the file was written whole");
	ok(entries() == n0 + 1 && entries_with(".tmp.") == 0, "and renamed: no temporary file left");
	unlink(p);
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

	/* json_load_ours: an fstat that failed says its own errno, not the
	 * EPERM of a file refused (a caller reports it as it is) */
	snprintf(p, sizeof p, "%s/ours.json", dir);
	atomic_write(p, "{\"a\":1}", 7, 0600);
	o = json_load_ours(p);
	ok(o != NULL, "json_load_ours of a file of ours, 0600");
	json_decref(o);
	fstat_errno = EIO;
	fstat_calls = 0;
	errno = 0;
	o = json_load_ours(p);
	ok(o == NULL && errno == EIO && fstat_calls == 1,
	   "json_load_ours when fstat fails: NULL, fstat's errno (%s), %d call", strerror(errno),
	   fstat_calls);
	fstat_errno = 0;
	json_decref(o);
	chmod(p, 0620);
	errno = 0;
	ok(json_load_ours(p) == NULL && errno == EPERM, "json_load_ours of a group-writable file: EPERM");
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
	ok(rand_hex(a, 6) == 0 && strlen(a) == 12 && all_hex(a), "rand_hex 6 bytes -> 12 lower-case hex digits (%s)", a);
	rand_hex(b, 6);
	ok(strcmp(a, b) != 0, "two rand_hex draws differ");
	rand_hex(a, 1);
	ok(strlen(a) == 2 && all_hex(a), "rand_hex 1 byte -> 2 digits");
	rand_hex(a, 0);
	ok(a[0] == 0, "rand_hex 0 bytes -> empty string");
	rand_hex(a, 64);
	ok(strlen(a) == 128 && all_hex(a), "rand_hex 64 bytes -> 128 digits");
}

/* The one JSON loader: duplicate keys refused (named), size bounded. */
static void test_json_strict(void)
{
	char p[256], why[512];
	json_t *j;
	char *big;
	size_t n;
	const char dup[] = "{\"vm\":{\"id\":\"vm-aaaaaaaaaaaa\"},\"vm\":{\"id\":\"vm-bbbbbbbbbbbb\"}}";
	const char deep[] = "{\"vm\":{\"id\":\"x\",\"id\":\"y\"}}";
	const char esc[] = "{\"a\\\"b\":1,\"a\\\"b\":2}";

	snprintf(p, sizeof p, "%s/dup.json", dir);
	atomic_write(p, dup, sizeof dup - 1, 0644);
	errno = 0;
	ok(json_load_path(p) == NULL && errno == EINVAL, "json_load_path refuses a duplicate key");
	ok(json_parse(dup, sizeof dup - 1, 0, why, sizeof why) == NULL &&
	   strstr(why, "duplicate key \"vm\"") != NULL, "json_parse names the duplicate key: %s", why);
	ok(json_parse(deep, sizeof deep - 1, 0, why, sizeof why) == NULL &&
	   strstr(why, "duplicate key \"id\"") != NULL, "a nested duplicate is refused too: %s", why);
	ok(json_parse(esc, sizeof esc - 1, 0, why, sizeof why) == NULL &&
	   strstr(why, "duplicate key \"a\\x5c\"b\"") != NULL, "an escaped quote in the key: %s", why);
	j = json_parse("{\"a\":1,\"b\":{\"a\":2}}", 19, 0, why, sizeof why);
	ok(j != NULL, "the same key in two objects is not a duplicate");
	json_decref(j);
	ok(json_parse("[1]", 3, 0, why, sizeof why) == NULL && strstr(why, "not a JSON object"),
	   "json_parse wants an object");
	ok(json_parse("{} x", 4, 0, why, sizeof why) == NULL, "trailing bytes refused");
	j = json_parse("{} x", 4, JSON_DISABLE_EOF_CHECK, why, sizeof why);
	ok(j != NULL, "... unless JSON_DISABLE_EOF_CHECK");
	json_decref(j);

	/* the bound: an object of exactly JSON_MAX_BYTES loads, one byte more not */
	big = malloc(JSON_MAX_BYTES + 2);
	n = JSON_MAX_BYTES;
	memcpy(big, "{\"a\":\"", 6);
	memset(big + 6, 'x', n - 8);
	memcpy(big + n - 2, "\"}", 2);
	snprintf(p, sizeof p, "%s/big.json", dir);
	atomic_write(p, big, n, 0644);
	j = json_load_path(p);
	ok(j != NULL, "a %u-byte object loads", JSON_MAX_BYTES);
	json_decref(j);
	memcpy(big + n - 2, "x\"}", 3);
	atomic_write(p, big, n + 1, 0644);
	errno = 0;
	ok(json_load_path(p) == NULL && errno == EFBIG, "one byte more: EFBIG");
	ok(json_parse(big, n + 1, 0, why, sizeof why) == NULL && strstr(why, "more than"),
	   "json_parse has the same bound: %s", why);
	free(big);
	unlink(p);
	snprintf(p, sizeof p, "%s/dup.json", dir);
	unlink(p);
}

static void test_ids(void)
{
	char h64[66];

	memset(h64, 'a', 64);
	h64[64] = 0;
	ok(hex64_ok(h64), "hex64_ok: 64 hex");
	h64[63] = 'A';
	ok(!hex64_ok(h64), "hex64_ok: upper case refused");
	h64[63] = 'a';
	h64[64] = 'a';
	h64[65] = 0;
	ok(!hex64_ok(h64), "hex64_ok: 65 digits refused");
	h64[63] = 0;
	ok(!hex64_ok(h64) && !hex64_ok(NULL) && !hex64_ok(""), "hex64_ok: 63 digits, NULL, empty");
	ok(hex_span("0af9g") == 4 && hex_span("") == 0 && hex_span(NULL) == 0, "hex_span");
	ok(id_vm_ok("vm-0123456789ab"), "id_vm_ok: vm- + 12 hex");
	ok(!id_vm_ok("vm-0123456789a") && !id_vm_ok("vm-0123456789abc") &&
	   !id_vm_ok("vm-0123456789aB") && !id_vm_ok("st-0123456789ab") &&
	   !id_vm_ok("vm-badagent0001") && !id_vm_ok("vm-0123456789a/") && !id_vm_ok(NULL),
	   "id_vm_ok: short, long, upper, stage, non-hex, slash, NULL refused");
	ok(id_stage_ok("st-0123456789ab") && !id_stage_ok("vm-0123456789ab") &&
	   !id_stage_ok("st-../../etc") && !id_stage_ok("st-"), "id_stage_ok");
	ok(vm_ref_ok("vm-0123456789ab") && vm_ref_ok("0123") && vm_ref_ok("brave-otter") &&
	   vm_ref_ok("vm-"), "vm_ref_ok: id, prefix, name");
	ok(!vm_ref_ok("") && !vm_ref_ok("..") && !vm_ref_ok("a/b") && !vm_ref_ok("Brave") &&
	   !vm_ref_ok("a b") && !vm_ref_ok(NULL) &&
	   !vm_ref_ok("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
	   "vm_ref_ok: empty, dots, slash, upper case, space, NULL, 64 bytes refused");
}

static void test_excerpt(void)
{
	char b[EXCERPT_SZ], *big;
	size_t n = 100u * 1024 * 1024;

	ok(!strcmp(excerpt(b, "abc", 3), "abc"), "excerpt: short printable text as is");
	ok(!strcmp(excerpt(b, "a\nb\x1b[2J\\\xc3\xa9", 10), "a\\x0ab\\x1b[2J\\x5c\\xc3\\xa9"),
	   "excerpt: control, escape, backslash and non-ASCII bytes as \\xHH: %s", b);
	ok(!strcmp(excerpt(b, "a\0b", 3), "a\\x00b"), "excerpt: NUL");
	big = malloc(n);
	memset(big, 'x', n);
	excerpt(b, big, n);
	ok(strlen(b) < 300 && strstr(b, "…(104857600 bytes)") && !strncmp(b, "xxxx", 4),
	   "excerpt of 100 MB: %zu bytes, says how long the input was", strlen(b));
	memset(big, '\x01', EXCERPT_MAX + 1);
	excerpt(b, big, EXCERPT_MAX + 1);
	ok(strlen(b) < EXCERPT_SZ && strstr(b, "(201 bytes)"), "worst case fits EXCERPT_SZ");
	big[EXCERPT_MAX] = 0;
	ok(strlen(EXC(big)) == 4 * EXCERPT_MAX, "EXC of a C string, no cut at EXCERPT_MAX");
	free(big);
}

/* The UTF-8 check of labels and the sanitiser of guest text share one decoder. */
static void test_utf8(void)
{
	static const struct {
		const char *s;
		size_t n;
		int valid;
		const char *json; /* utf8_json without cut */
	} c[] = {
		{"abc", 3, 1, "abc"},
		{"\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80", 9, 1, "\xc3\xa9\xe2\x98\x83\xf0\x9f\x98\x80"},
		{"a\xff" "b", 3, 0, "a\xef\xbf\xbd" "b"},
		{"\xc0\xaf", 2, 0, "\xef\xbf\xbd\xef\xbf\xbd"},        /* overlong '/' */
		{"\xed\xa0\x80", 3, 0, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* surrogate */
		{"\xf4\x90\x80\x80", 4, 0,
		 "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
		{"x\xc3", 2, 0, "x\xef\xbf\xbd"},                      /* truncated */
		{"a\0b", 3, 1, "a\xef\xbf\xbd" "b"},
	};
	json_t *j;

	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		char b[EXCERPT_SZ];

		j = utf8_json((const uint8_t *)c[i].s, c[i].n, 0);
		ok(utf8_valid(c[i].s, c[i].n) == c[i].valid &&
			   !strcmp(json_string_value(j), c[i].json),
		   "utf8_valid %d and utf8_json of %s", c[i].valid, excerpt(b, c[i].s, c[i].n));
		json_decref(j);
	}
	j = utf8_json((const uint8_t *)"ab\xe2\x98", 4, 1);
	ok(!strcmp(json_string_value(j), "ab"), "utf8_json with cut drops a character cut at the end");
	json_decref(j);
}

/* The failure contract: run this program again as "status-child" with
 * ISOPOD_STATUS_FD set to a pipe; the child checks that the variable is gone
 * and the descriptor close-on-exec before main (so nothing it starts
 * inherits either), then dies 102; we read the one status object. */
static void status_child(void)
{
	const char *fd = getenv("ISOPOD_STATUS_PIPE");
	int flags = fd ? fcntl(atoi(fd), F_GETFD) : -1;

	if (getenv("ISOPOD_STATUS_FD"))
		exit(3); /* a child would inherit it */
	if (flags < 0 || !(flags & FD_CLOEXEC))
		exit(4); /* nor the descriptor */
	progname = "util_test";
	die(EX_CONFLICT, "lock %s held", "x\x01y");
}

static void test_status_fd(const char *self)
{
	int p[2], st = 0;
	char buf[1024], env[32];
	ssize_t n;
	pid_t pid;
	json_t *j;

	ok(!strcmp(exit_kind(99), "timeout") && !strcmp(exit_kind(100), "usage") &&
	   !strcmp(exit_kind(101), "not_found") && !strcmp(exit_kind(102), "busy") &&
	   !strcmp(exit_kind(111), "infra") && !strcmp(exit_kind(7), "infra"),
	   "exit_kind: the one status -> kind table");
	if (pipe(p) < 0)
		return;
	snprintf(env, sizeof env, "%d", p[1]);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		setenv("ISOPOD_STATUS_FD", env, 1);
		setenv("ISOPOD_STATUS_PIPE", env, 1);
		if (freopen("/dev/null", "w", stderr) == NULL)
			_exit(5);
		execl(self, self, "status-child", (char *)NULL);
		_exit(6);
	}
	close(p[1]);
	n = read(p[0], buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	close(p[0]);
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == EX_CONFLICT,
	   "die exits with its status, the variable gone and the fd close-on-exec (%d)",
	   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	j = json_parse(buf, (size_t)(n > 0 ? n : 0), 0, NULL, 0);
	ok(j && !strcmp(json_string_value(json_object_get(j, "error")) ?: "",
			"util_test: fatal: lock x\x01y held") &&
	   !strcmp(json_string_value(json_object_get(j, "error_kind")) ?: "", "busy") &&
	   json_integer_value(json_object_get(j, "exit")) == EX_CONFLICT && n > 0 &&
	   buf[n - 1] == '\n' && !strchr(buf, '\n')[1],
	   "one status line: {error: the diagnostic, error_kind, exit}: %s", buf);
	json_decref(j);
}

/* run_options_json: what a tool tells the front end, and a refusal when its
 * run-option table and its getopt table drift apart. */
static void test_run_options(void)
{
	static const struct option lo[] = {
		{"vcpus", required_argument, NULL, 'c'},
		{"cold", no_argument, NULL, 'C'},
		{NULL, 0, NULL, 0},
	};
	static const struct run_option good[] = {
		{.name = "vcpus", .arg = "N", .repeat = 1}, {.name = "cold"}, {.name = NULL}};
	static const struct run_option absent[] = {{.name = "hostname", .arg = "NAME"}, {.name = NULL}};
	static const struct run_option noval[] = {{.name = "vcpus"}, {.name = NULL}};
	static const struct run_option val[] = {{.name = "cold", .arg = "X"}, {.name = NULL}};
	static const struct run_option blank[] = {{.name = "vcpus", .arg = "N M"}, {.name = NULL}};
	static const struct run_option dash[] = {{.name = "vcpus", .arg = "-"}, {.name = NULL}};
	char err[200] = "", *s;
	json_t *j;

	j = run_options_json(good, lo, err, sizeof err);
	s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	ok(s && !strcmp(s, "{\"tool\":\"isopod\",\"run_options\":["
			   "{\"option\":\"--vcpus\",\"arg\":\"N\",\"repeat\":true},"
			   "{\"option\":\"--cold\",\"arg\":null,\"repeat\":false}]}"),
	   "run_options_json: option, arg (null without a value), repeat: %s", s ? s : "NULL");
	free(s);
	json_decref(j);
	ok(!run_options_json(absent, lo, err, sizeof err) && strstr(err, "--hostname: not in"),
	   "run_options_json: an option not in the getopt table is refused: %s", err);
	ok(!run_options_json(noval, lo, err, sizeof err) && strstr(err, "--vcpus: takes a value"),
	   "run_options_json: a value the getopt table requires is declared: %s", err);
	ok(!run_options_json(val, lo, err, sizeof err) && strstr(err, "--cold: takes a value"),
	   "run_options_json: no value where the getopt table takes none: %s", err);
	/* =text: the same entries as lines a shell's `read` takes apart */
	s = run_options_text(good, lo, err, sizeof err);
	ok(s && !strcmp(s, "--vcpus N 1\n--cold - 0\n"),
	   "run_options_text: option, placeholder ('-' without a value), repeat: %s", s ? s : "NULL");
	free(s);
	ok(!run_options_text(noval, lo, err, sizeof err) && strstr(err, "--vcpus: takes a value"),
	   "run_options_text: the drift run_options_json refuses: %s", err);
	ok(!run_options_text(blank, lo, err, sizeof err) && strstr(err, "would not read back"),
	   "run_options_text: a placeholder with a blank is refused: %s", err);
	ok(!run_options_text(dash, lo, err, sizeof err) && strstr(err, "would not read back"),
	   "run_options_text: a placeholder '-' (no value) is refused: %s", err);
}

/* vm_running: 0 only when it can tell (no lock file, or a free lock); a
 * lock it cannot open is -1 (taken as running), never "not running". */
static void test_vm_running(void)
{
	char home[300], p[400];
	const char *old = getenv("ISOPOD_HOME");
	char *keep = old ? strdup(old) : NULL;

	snprintf(home, sizeof home, "%s/vmrun", dir);
	setenv("ISOPOD_HOME", home, 1);
	snprintf(p, sizeof p, "%s/vms/vm-0123456789ab", home);
	mkdir_p(p, 0755, NULL, 0);
	ok(vm_running("vm-0123456789ab") == 0, "vm_running: no lock file: 0");
	snprintf(p, sizeof p, "%s/vms/vm-0123456789ab/lock", home);
	close(open(p, O_CREAT | O_WRONLY, 0644));
	ok(vm_running("vm-0123456789ab") == 0, "vm_running: a free lock: 0");
	unlink(p);
	mkdir(p, 0755);
	errno = 0;
	ok(vm_running("vm-0123456789ab") == -1 && errno == EISDIR,
	   "vm_running: a lock it cannot open: -1 (%s), not 0", strerror(errno));
	/* vm_wait_stopped_fd: its wake fd only ends a wait early; "stopped" is
	 * the lock free, whatever the fd says.  A child holds the lock as a
	 * supervisor does, until its exit. */
	{
		int held[2], go[2], wake[2], pfd;
		char c = 0;
		pid_t pid;

		snprintf(p, sizeof p, "%s/vms/vm-aaaaaaaaaaaa", home);
		mkdir_p(p, 0755, NULL, 0);
		snprintf(p, sizeof p, "%s/vms/vm-aaaaaaaaaaaa/lock", home);
		if (pipe(held) < 0 || pipe(go) < 0 || pipe(wake) < 0)
			abort();
		pid = fork();
		if (pid == 0) {
			int fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC, 0644);

			if (fd < 0 || flock(fd, LOCK_EX) < 0 || write(held[1], "h", 1) != 1)
				_exit(1);
			if (read(go[0], &c, 1) < 0)
				_exit(1);
			_exit(0);
		}
		ok(pid > 0 && read(held[0], &c, 1) == 1, "vm_wait_stopped_fd: a child holds the lock");
		pfd = pidfd_open_(pid);
		if (write(wake[1], "w", 1) != 1)
			abort();
		errno = 0;
		ok(vm_wait_stopped_fd("vm-aaaaaaaaaaaa", mono_ms() + 50, wake[0]) == -1 &&
		   errno == ETIMEDOUT,
		   "vm_wait_stopped_fd: a readable wake fd, the lock held: -1 ETIMEDOUT, not stopped");
		if (write(go[1], "g", 1) != 1)
			abort();
		ok(pfd >= 0 && vm_wait_stopped_fd("vm-aaaaaaaaaaaa", mono_ms() + 5000, pfd) == 0,
		   "vm_wait_stopped_fd: the holder's pidfd, the holder gone: 0");
		ok(vm_running("vm-aaaaaaaaaaaa") == 0, "vm_wait_stopped_fd: its 0 is a free lock");
		waitpid(pid, NULL, 0);
		if (pfd >= 0)
			close(pfd);
		close(held[0]), close(held[1]), close(go[0]), close(go[1]);
		close(wake[0]), close(wake[1]);
	}
	if (keep) {
		setenv("ISOPOD_HOME", keep, 1);
		free(keep);
	} else {
		unsetenv("ISOPOD_HOME");
	}
}

/* The child of test_store_home, a new process (store_home keeps its first
 * answer): as a user (the HOME fallback is not root's), HOME from argv.
 * Exit 0 when store_home is HOME/.isopod whole and, with want_long,
 * vm_running is -1 ENAMETOOLONG -- all without exiting elsewhere. */
static void home_child(const char *home, int want_long)
{
	char want[16384];
	const char *h;
	int r;

	if (geteuid() == 0 && (setgid(65534) < 0 || setuid(65534) < 0))
		_exit(9);
	unsetenv("ISOPOD_HOME");
	setenv("HOME", home, 1);
	snprintf(want, sizeof want, "%s/.isopod", home);
	h = store_home();
	if (strcmp(h, want))
		_exit(1);
	errno = 0;
	r = vm_running("vm-0123456789ab");
	if (want_long && (r != -1 || errno != ENAMETOOLONG))
		_exit(2);
	if (!want_long && r != 0)
		_exit(3);
	_exit(0);
}

/* store_home never exits (a library path): a HOME too long for any path
 * gives a root that long, and vm_running then -1 ENAMETOOLONG (which its
 * callers take as running) instead of dying in pathf. */
static void test_store_home(void)
{
	static char home[8192];
	char *av[] = { "/proc/self/exe", "home-child", home, "long", NULL };
	int i, st;
	pid_t pid;

	memset(home, 'h', sizeof home - 1);
	home[0] = '/';
	for (i = 0; i < 2; i++) {
		if (i == 1) {
			snprintf(home, sizeof home, "/h");
			av[3] = "short";
		}
		st = -1;
		if ((pid = fork()) == 0) {
			execv(av[0], av);
			_exit(8);
		}
		ok(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
		   "store_home as a user, HOME of %zu bytes: HOME/.isopod whole, vm_running %s "
		   "(child status %d)", strlen(home), i ? "0" : "-1 ENAMETOOLONG, no exit", st);
	}
}

/* iso_parse: the one reader of isopod's times (attest, attcheck, prov,
 * report): the exact shape, and a real time. */
static void test_iso_parse(void)
{
	static const char *bad[] = { "2026-02-31T00:00:00Z", "2026-01-01T25:00:00Z",
				     "2026-01-01 00:00:00Z", "2026-1-01T00:00:00Z",
				     "2026-01-01T00:00:00", "2026-01-01T00:00:00+00:00",
				     " 2026-01-01T00:00:00Z", "", NULL };
	char now[32];
	size_t i;

	ok(iso_parse("1970-01-01T00:00:01Z") == 1, "iso_parse: the epoch's second 1");
	ok(iso_parse("2026-12-03T13:00:00Z") == 1796302800LL, "iso_parse: 2026-12-03T13:00:00Z");
	ok(iso_parse(iso_now(now, sizeof now)) >= 0, "iso_parse reads iso_now: %s", now);
	for (i = 0; i < sizeof bad / sizeof *bad; i++)
		ok(iso_parse(bad[i]) == -1, "iso_parse refuses \"%s\"", bad[i] ? bad[i] : "(null)");
}

/* sha256_fd: holes are hashed as zeros without being read, and the digest
 * is the one of every byte, against the sha256 of the same bytes in memory:
 * hole, data, hole, data (not block-aligned), trailing hole (a sparse base
 * image's shape); data from the first byte; only a hole; one byte of hole;
 * from an offset; a pipe (no SEEK_DATA: read). */
static void test_sha256_fd(void)
{
	static const struct {
		long long len;
		int data, head;
	} cs[] = { { .len = 5 << 20, .data = 1 },
		   { .len = (3 << 20) + 200000, .data = 1, .head = 1 },
		   { .len = 3 << 20 },
		   { .len = 1 } };
	char path[sizeof dir + 16], want[65], got[65];
	unsigned char *mem = calloc(1, 5 << 20);
	size_t i;
	int fd, p[2];

	snprintf(path, sizeof path, "%s/sparse", dir);
	for (i = 0; i < sizeof cs / sizeof *cs && mem; i++) {
		memset(mem, 0, 5 << 20);
		unlink(path);
		fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
		if (cs[i].head)
			memset(mem, 'h', 1 << 20);
		if (cs[i].data) {
			memset(mem + (1 << 20), 'a', 4096);
			memset(mem + (2 << 20) + 7, 'z', 70000);
		}
		ok(fd >= 0 && (!cs[i].head || pwrite(fd, mem, 1 << 20, 0) == 1 << 20) &&
			   (!cs[i].data || (pwrite(fd, mem + (1 << 20), 4096, 1 << 20) == 4096 &&
					    pwrite(fd, mem + (2 << 20) + 7, 70000, (2 << 20) + 7) == 70000)) &&
			   ftruncate(fd, (off_t)cs[i].len) == 0 && lseek(fd, 0, SEEK_SET) == 0,
		   "sparse file %zu: %lld bytes", i, cs[i].len);
		sha256_hex(mem, (size_t)cs[i].len, want);
		ok(sha256_fd(fd, got) == 0 && !strcmp(got, want), "sha256_fd of it: %s", got);
		ok(lseek(fd, 0, SEEK_CUR) == (off_t)cs[i].len, "the offset left at the end");
		ok(sha256_file(path, got) == 0 && !strcmp(got, want), "sha256_file agrees");
		if (i == 0) {
			sha256_hex(mem + 4096, (size_t)cs[i].len - 4096, want);
			ok(lseek(fd, 4096, SEEK_SET) == 4096 && sha256_fd(fd, got) == 0 &&
				   !strcmp(got, want),
			   "sha256_fd from an offset: what is left");
		}
		close(fd);
	}
	ok(pipe(p) == 0 && write(p[1], "abc", 3) == 3 && close(p[1]) == 0, "a pipe");
	ok(sha256_fd(p[0], got) == 0 &&
		   !strcmp(got, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
	   "sha256_fd of a pipe reads it");
	close(p[0]);
	errno = 0;
	ok(sha256_fd(-1, got) == -1 && errno == EBADF, "sha256_fd of a bad fd: -1, EBADF");
	unlink(path);
	free(mem);
}

/* dir_own_open: ours and written by no one else, else refused naming it
 * (isopod-slurm run --dir, isopod-mcp --slurm-dir) */
static void test_dir_own_open(void)
{
	char p[PATH_MAX], l[PATH_MAX], f[PATH_MAX], why[PATH_MAX + 256];
	int fd;

	snprintf(p, sizeof p, "%s/own", dir);
	mkdir(p, 0700);
	fd = dir_own_open(p, why, sizeof why);
	ok(fd >= 0, "dir_own_open: a 0700 directory of ours");
	if (fd >= 0)
		close(fd);
	chmod(p, 0755);
	fd = dir_own_open(p, why, sizeof why);
	ok(fd >= 0, "dir_own_open: 0755 (others read it: the nodes)");
	if (fd >= 0)
		close(fd);
	chmod(p, 0775);
	ok(dir_own_open(p, why, sizeof why) < 0 && errno == EPERM && strstr(why, p) && strstr(why, "0775"),
	   "dir_own_open: group-writable refused, naming it: %s", why);
	chmod(p, 0707);
	ok(dir_own_open(p, why, sizeof why) < 0 && errno == EPERM, "dir_own_open: other-writable refused");
	chmod(p, 0700);
	snprintf(l, sizeof l, "%s/link", dir);
	ok(symlink(p, l) == 0 && dir_own_open(l, why, sizeof why) < 0 && (errno == ELOOP || errno == ENOTDIR) &&
	   strstr(why, "symbolic link"), "dir_own_open: a link to our own directory refused: %s", why);
	snprintf(f, sizeof f, "%s/file", dir);
	close(open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	ok(dir_own_open(f, why, sizeof why) < 0 && errno == ENOTDIR, "dir_own_open: a file refused");
	snprintf(f, sizeof f, "%s/none", dir);
	ok(dir_own_open(f, why, sizeof why) < 0 && errno == ENOENT && strstr(why, f), "dir_own_open: absent: ENOENT");
	if (geteuid() == 0) {
		ok(chown(p, 65534, 65534) == 0 && dir_own_open(p, why, sizeof why) < 0 && errno == EPERM &&
		   strstr(why, "uid 65534"), "dir_own_open: another user's directory refused: %s", why);
		chown(p, 0, 0);
	}
}

/* reason_code: the one "status + message" helper (bootopt's refusals,
 * attest's classes, reason_fail's -1): die's wording, errno kept. */
static void test_reason_code(void)
{
	char buf[128];
	int r;

	errno = ENOENT;
	r = reason_code(102, buf, sizeof buf, "open %s:", "/x");
	ok(r == 102 && errno == ENOENT && !strcmp(buf, "open /x: No such file or directory"),
	   "reason_code: the code back, a trailing ':' gets strerror, errno kept (%s)", buf);
	errno = EACCES;
	r = reason_code(100, buf, sizeof buf, "bad %s", "option");
	ok(r == 100 && errno == EACCES && !strcmp(buf, "bad option"),
	   "reason_code: no ':' at the end, no strerror (%s)", buf);
	errno = EIO;
	r = reason_fail(buf, sizeof buf, "read:");
	ok(r == -1 && errno == EIO && !strcmp(buf, "read: Input/output error"),
	   "reason_fail is reason_code's -1 (%s)", buf);
	errno = ENOENT;
	r = reason_code(111, buf, 8, "a long reason %d:", 1);
	ok(r == 111 && strlen(buf) == 7 && !strncmp(buf, "a long ", 7),
	   "reason_code: cut to the buffer, never past it (%s)", buf);
}

/* stat_identity: st's dev, ino, size, mtime and ctime in ns, in that
 * order, the bytes the three caches keyed by it compare (a change of any
 * would make every stored key stale, or worse, let two files agree) */
static void test_stat_identity(void)
{
	static const struct {
		long long msec, mnsec, csec, cnsec;
		int64_t mns, cns;
	} cs[] = {
		{ .msec = 1700000000, .mnsec = 123456789, .csec = 1700000001, .cnsec = 987654321,
		  .mns = 1700000000123456789LL, .cns = 1700000001987654321LL },
		/* before 1970: the same bytes as the signed product's */
		{ .msec = -1, .mnsec = 500000000, .csec = -2, .cnsec = 1,
		  .mns = -500000000LL, .cns = -1999999999LL },
		/* past 2262 (touch -d @10000000000, anyone may): int64 ns
		 * overflow, wrapped modulo 2^64 rather than undefined */
		{ .msec = 10000000000LL, .mnsec = 0, .csec = 10000000000LL, .cnsec = 7,
		  .mns = -8446744073709551616LL, .cns = -8446744073709551609LL },
	};
	char path[sizeof dir + 16];
	struct timespec ts[2] = { { .tv_sec = 1600000000, .tv_nsec = 123456789 },
				  { .tv_sec = 1600000000, .tv_nsec = 123456789 } };
	struct stat st;
	int64_t v[STAT_IDENTITY_N];
	size_t i;
	int fd;

	for (i = 0; i < sizeof cs / sizeof *cs; i++) {
		st = (struct stat){ .st_dev = 0x0102030405060708ULL, .st_ino = 0x1112131415161718ULL,
				    .st_size = 0x2122232425262728LL };
		st.st_mtim = (struct timespec){ .tv_sec = cs[i].msec, .tv_nsec = cs[i].mnsec };
		st.st_ctim = (struct timespec){ .tv_sec = cs[i].csec, .tv_nsec = cs[i].cnsec };
		stat_identity(&st, v);
		ok(v[0] == 0x0102030405060708LL && v[1] == 0x1112131415161718LL &&
			   v[2] == 0x2122232425262728LL && v[3] == cs[i].mns && v[4] == cs[i].cns,
		   "stat_identity of a made-up stat %zu: %lld %lld %lld %lld %lld", i,
		   (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
		   (long long)v[4]);
	}

	/* a real file: its mtime set back (ctime stays now: the two differ),
	 * with nanoseconds, then past 2262 */
	snprintf(path, sizeof path, "%s/ident", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ok(fd >= 0 && write(fd, "seven b", 7) == 7 && futimens(fd, ts) == 0 &&
		   fstat(fd, &st) == 0 && st.st_size == 7 && st.st_mtim.tv_nsec == 123456789 &&
		   st.st_mtim.tv_sec != st.st_ctim.tv_sec,
	   "a file of 7 bytes, its mtime 1600000000.123456789");
	stat_identity(&st, v);
	ok(v[0] == (int64_t)st.st_dev && v[1] == (int64_t)st.st_ino && v[2] == 7 &&
		   v[3] == 1600000000123456789LL &&
		   v[4] == (int64_t)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec,
	   "stat_identity of it: dev, ino, size, mtime ns, ctime ns");
	ts[0].tv_sec = ts[1].tv_sec = 10000000000LL;
	ts[0].tv_nsec = ts[1].tv_nsec = 0;
	ok(fd >= 0 && futimens(fd, ts) == 0 && fstat(fd, &st) == 0 &&
		   st.st_mtim.tv_sec == 10000000000LL,
	   "its mtime @10000000000 (%lld)", (long long)st.st_mtim.tv_sec);
	stat_identity(&st, v);
	ok(v[3] == -8446744073709551616LL, "stat_identity of it: mtime wrapped, %lld",
	   (long long)v[3]);
	if (fd >= 0)
		close(fd);
	unlink(path);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "status-child"))
		status_child();
	if (argc > 3 && !strcmp(argv[1], "home-child"))
		home_child(argv[2], !strcmp(argv[3], "long"));
	umask(022);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_boot_id();
	test_atomic_write();
	test_atomic_write_signal();
	test_json_write();
	test_parse_ll();
	test_rand_hex();
	test_json_strict();
	test_ids();
	test_excerpt();
	test_utf8();
	test_store_home();
	test_vm_running();
	test_iso_parse();
	test_status_fd(argv[0]);
	test_run_options();
	test_sha256_fd();
	test_dir_own_open();
	test_reason_code();
	test_stat_identity();
	{
		char cmd[300];

		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "warning: could not remove %s\n", dir);
	}
	return tap_done();
}
