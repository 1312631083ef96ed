/* ledger_test.c - isopod-broker's ledger (lib/ledger.c): the line of each
 * kind of record, the cap (refusals past it counted, not written; flows
 * and the closing line always written), and a ledger that cannot be
 * written (full from then on, and nothing more written: fail closed). */
#include "../../lib/ledger.c" /* self-contained: t/run-unit links frame+util only */

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tap.h"

static char dir[] = "/tmp/isopod-ledger-test.XXXXXX";

static int same(char *got, const char *want)
{
	int r = got && !strcmp(got, want);

	if (!r)
		printf("# got  %s# want %s", got ? got : "(null)\n", want);
	free(got);
	return r;
}

/* How many lines path holds, its last one into last. */
static int lines(const char *path, char *last, size_t sz)
{
	FILE *fp = fopen(path, "re");
	char line[1024];
	int n = 0;

	last[0] = '\0';
	if (!fp)
		return -1;
	while (fgets(line, sizeof line, fp)) {
		n++;
		line[strcspn(line, "\n")] = '\0';
		snprintf(last, sz, "%s", line);
	}
	fclose(fp);
	return n;
}

static const char T[] = "2026-12-01T21:30:00.123Z";

static void test_lines(void)
{
	struct ledger_rec r = { .kind = "connect", .name = "pkg.test", .port = 443,
				.addr = htonl(0xc6336410), .up = 10, .down = 20, .allowed = 1,
				.ms = 7 };

	ok(same(ledger_line(&r, NULL, T),
		"{\"time\":\"2026-12-01T21:30:00.123Z\",\"kind\":\"connect\",\"name\":\"pkg.test\","
		"\"port\":443,\"address\":\"198.51.100.16\",\"up\":10,\"down\":20,"
		"\"verdict\":\"allowed\",\"reason\":null,\"ms\":7}\n"),
	   "a flow's line: every member in order, reason null");
	r = (struct ledger_rec){ .kind = "http", .reason = "too many flows", .ms = -5 };
	ok(same(ledger_line(&r, "vm-0123456789ab", T),
		"{\"time\":\"2026-12-01T21:30:00.123Z\",\"kind\":\"http\",\"name\":null,"
		"\"port\":null,\"address\":null,\"up\":0,\"down\":0,\"verdict\":\"denied\","
		"\"reason\":\"too many flows\",\"ms\":0,\"vm\":\"vm-0123456789ab\"}\n"),
	   "a refusal: nulls for what it lacks, a negative time as 0, the vm last");
	r = (struct ledger_rec){ .kind = "dns", .name = "x.test", .port = 53, .qtype = "AAAA",
				 .reason = "not in the allowlist" };
	ok(same(ledger_line(&r, NULL, T),
		"{\"time\":\"2026-12-01T21:30:00.123Z\",\"kind\":\"dns\",\"name\":\"x.test\","
		"\"port\":53,\"address\":null,\"up\":0,\"down\":0,\"verdict\":\"denied\","
		"\"reason\":\"not in the allowlist\",\"ms\":0,\"qtype\":\"AAAA\"}\n"),
	   "a DNS line has its qtype");
	r.qtype = NULL;
	ok(same(ledger_line(&r, NULL, T),
		"{\"time\":\"2026-12-01T21:30:00.123Z\",\"kind\":\"dns\",\"name\":\"x.test\","
		"\"port\":53,\"address\":null,\"up\":0,\"down\":0,\"verdict\":\"denied\","
		"\"reason\":\"not in the allowlist\",\"ms\":0,\"qtype\":null}\n"),
	   "a DNS query too malformed to have a type: qtype null");
	r = (struct ledger_rec){ .kind = "http", .name = "a\"b\n", .allowed = 1 };
	ok(same(ledger_line(&r, NULL, T),
		"{\"time\":\"2026-12-01T21:30:00.123Z\",\"kind\":\"http\",\"name\":\"a\\\"b\\n\","
		"\"port\":null,\"address\":null,\"up\":0,\"down\":0,\"verdict\":\"allowed\","
		"\"reason\":null,\"ms\":0}\n"),
	   "a name is escaped, never spliced");
}

static void test_cap(void)
{
	char path[64], last[1024], *one;
	struct ledger l;
	struct ledger_rec deny = { .kind = "http", .name = "no.test", .reason = "not in the allowlist" };
	struct ledger_rec flow = { .kind = "connect", .name = "pkg.test", .port = 443, .allowed = 1 };
	size_t len;
	int n;

	snprintf(path, sizeof path, "%s/cap", dir);
	setenv("ISOPOD_LEDGER_MAX", "1024", 1);
	ok(ledger_open(&l, path, "vm-0123456789ab") == 0 && l.max == 1024 && l.bytes == 0,
	   "opened with the cap of ISOPOD_LEDGER_MAX");
	one = ledger_line(&deny, l.vm, T);
	len = strlen(one);
	free(one);
	n = 0;
	while (ledger_write(&l, &deny) == 0)
		n++;
	ok(n == (int)(1024 / len) && ledger_full(&l) && l.suppressed == 1,
	   "refusals up to the cap (%d of %zu bytes), the next one counted", n, len);
	ok(ledger_write(&l, &deny) == 1 && l.suppressed == 2, "and the one after");
	ok(ledger_full(&l), "full: nothing new is served");
	ok(ledger_write(&l, &flow) == 0, "a flow already open still gets its line");
	ok(ledger_finish(&l) == 0 && lines(path, last, sizeof last) == n + 2 &&
	   strstr(last, "\"kind\":\"ledger\"") &&
	   strstr(last, "\"reason\":\"ledger full: 2 refusals not written\""),
	   "the last line says how many were suppressed: %s", last);
	close(l.fd);
	ok(ledger_open(&l, path, NULL) == 0 && l.bytes > 1024 && ledger_full(&l),
	   "reopened: what the file holds counts against the cap");
	close(l.fd);
	setenv("ISOPOD_LEDGER_MAX", "12", 1);
	ok(ledger_open(&l, path, NULL) == 0 && l.max == LEDGER_MAX_DEFAULT,
	   "a cap under 1024 is ignored: the default");
	close(l.fd);
	unsetenv("ISOPOD_LEDGER_MAX");
	ok(ledger_open(&l, path, NULL) == 0 && ledger_policy_lost(&l, 1054, "gone") == 0 &&
	   lines(path, last, sizeof last) > 0 &&
	   strstr(last, "\"kind\":\"policy\",\"name\":null,\"port\":1054,\"verdict\":\"lost\","
			"\"reason\":\"gone\"}"),
	   "the policy line: %s", last);
	close(l.fd);
}

/* A write cut short (RLIMIT_FSIZE: part of a line on disk), then the
 * limit lifted: nothing more is appended, else the next line would
 * complete the part into one line that says neither. */
static void test_failed_stays(void)
{
	char path[64];
	struct ledger l;
	struct ledger_rec flow = { .kind = "connect", .name = "pkg.test", .allowed = 1 };
	struct ledger_rec deny = { .kind = "http", .name = "no.test", .reason = "not in the allowlist" };
	struct rlimit old, cap;
	struct stat st;
	off_t part;

	snprintf(path, sizeof path, "%s/partial", dir);
	signal(SIGXFSZ, SIG_IGN); /* a short write, not a signal */
	getrlimit(RLIMIT_FSIZE, &old);
	cap = (struct rlimit){ .rlim_cur = 40, .rlim_max = old.rlim_max };
	ok(ledger_open(&l, path, NULL) == 0 && setrlimit(RLIMIT_FSIZE, &cap) == 0,
	   "a ledger under a 40-byte file size limit");
	ok(ledger_write(&l, &flow) < 0 && l.failed && stat(path, &st) == 0 && st.st_size == 40,
	   "a line cut short: failed (%s), %lld bytes of it on disk", l.failed ? l.failed : "-",
	   (long long)st.st_size);
	part = st.st_size;
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, SIG_DFL);
	ok(ledger_write(&l, &flow) < 0 && ledger_write(&l, &deny) != 0 &&
	   ledger_policy_lost(&l, 1054, "gone") < 0, "the limit lifted: every write still fails");
	l.suppressed = 1; /* so ledger_finish has its closing line to write */
	ok(ledger_finish(&l) < 0, "and the closing line");
	ok(stat(path, &st) == 0 && st.st_size == part,
	   "nothing appended after the failure: %lld bytes (%lld)", (long long)st.st_size,
	   (long long)part);
	close(l.fd);
	unlink(path);
}

static void test_failed(void)
{
	struct ledger l;
	struct ledger_rec flow = { .kind = "connect", .name = "pkg.test", .allowed = 1 };

	ok(ledger_open(&l, "/dev/full", NULL) == 0, "a ledger on /dev/full");
	ok(!ledger_full(&l), "not full before a write");
	ok(ledger_write(&l, &flow) < 0 && l.failed && l.err == ENOSPC,
	   "a write that fails: %s (%s)", l.failed ? l.failed : "-", strerror(l.err));
	ok(ledger_full(&l), "then it counts as full: fail closed");
	close(l.fd);
	test_failed_stays();
	ok(ledger_open(&l, "/nonexistent/dir/ledger", NULL) < 0 && errno == ENOENT,
	   "an unopenable ledger: -1 with errno");
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	test_lines();
	test_cap();
	test_failed();
	{
		char p[64];

		snprintf(p, sizeof p, "%s/cap", dir);
		unlink(p);
		rmdir(dir);
	}
	return tap_done();
}
