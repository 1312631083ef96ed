/* propose_test.c - the allowlist a learn run proposes (lib/propose.c):
 * which flows count as succeeded, names and ports into patterns, the
 * no wildcard fold (exact names only), the flows filtered cannot serve, and
 * ledger lines that are not ledger objects. */
#include "../../lib/propose.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/allow.c"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "tap.h"

#define OK(name, port, kind) \
	"{\"kind\":\"" kind "\",\"name\":\"" name "\",\"port\":" #port \
	",\"address\":\"198.51.100.10\",\"verdict\":\"allowed\",\"reason\":null}\n"
#define DNS(name) \
	"{\"kind\":\"dns\",\"name\":\"" name "\",\"port\":53,\"address\":\"198.51.100.53\"," \
	"\"verdict\":\"allowed\",\"reason\":null,\"qtype\":\"A\"}\n"

static json_t *run(const char *ledger)
{
	return propose_ledger(ledger, strlen(ledger));
}

/* The patterns of the proposal, joined with ' ' (into buf). */
static const char *pats(const json_t *p, char *buf, size_t sz)
{
	size_t i, o = 0;
	json_t *e;

	buf[0] = '\0';
	json_array_foreach(json_object_get(p, "allow"), i, e)
		o += (size_t)snprintf(buf + o, sz - o, "%s%s", i ? " " : "",
				      json_string_value(json_object_get(e, "pattern")));
	return buf;
}

static long long nflows(const json_t *p, size_t entry)
{
	json_t *e = json_array_get(json_object_get(p, "allow"), entry);

	return (long long)json_array_size(json_object_get(e, "flows"));
}

static void test_names(void)
{
	char b[512];
	json_t *p = run(DNS("pkg.test") OK("pkg.test", 443, "connect") OK("pkg.test", 443, "connect")
			DNS("files.test") OK("Files.Test.", 443, "connect")
			OK("pkg.test", 8443, "connect") OK("plain.test", 80, "http"));

	ok(p != NULL, "a proposal");
	ok(!strcmp(pats(p, b, sizeof b), "files.test pkg.test pkg.test:8443 plain.test"),
	   "names, normalised; another port its own entry: %s", b);
	ok(nflows(p, 1) == 2, "pkg.test covers its connects and its dns query");
	ok(json_integer_value(json_object_get(json_array_get(json_object_get(json_array_get(
		json_object_get(p, "allow"), 1), "flows"), 0), "count")) == 2 ||
	   json_integer_value(json_object_get(json_array_get(json_object_get(json_array_get(
		json_object_get(p, "allow"), 1), "flows"), 1), "count")) == 2,
	   "equal flows merged with their count");
	ok(json_array_size(json_object_get(p, "unservable")) == 0, "nothing unservable");
	json_decref(p);
}

static void test_succeeded(void)
{
	char b[256];
	json_t *p = run(
		"{\"kind\":\"connect\",\"name\":\"gone.test\",\"port\":443,\"address\":null,"
		"\"verdict\":\"allowed\",\"reason\":\"connection failed\"}\n"
		"{\"kind\":\"connect\",\"name\":\"no.test\",\"port\":443,\"verdict\":\"denied\","
		"\"address\":\"198.51.100.1\",\"reason\":\"not in the allowlist\"}\n"
		"{\"kind\":\"dns\",\"name\":\"slow.test\",\"port\":53,\"verdict\":\"allowed\","
		"\"reason\":\"resolver timed out\"}\n"
		"{\"kind\":\"policy\",\"verdict\":\"lost\"}\n"
		"not json\n[1]\n\n"
		OK("pkg.test", 443, "connect"));

	ok(!strcmp(pats(p, b, sizeof b), "pkg.test"),
	   "failed connects, refusals, failed queries propose nothing: %s", b);
	ok(json_integer_value(json_object_get(p, "not_succeeded")) == 3, "counted as not succeeded");
	ok(json_integer_value(json_object_get(p, "skipped")) == 2, "non-objects skipped");
	ok(json_integer_value(json_object_get(p, "lines")) == 7, "lines counted (empty ones not)");
	json_decref(p);
}

static void test_fold(void)
{
	char b[512];
	json_t *p = run(OK("a.cdn.example.org", 443, "connect") OK("b.cdn.example.org", 443, "connect")
			OK("c.cdn.example.org", 443, "connect") DNS("d.cdn.example.org")
			OK("x.test", 443, "connect") OK("y.test", 443, "connect")
			OK("z.test", 443, "connect") OK("a.two.org", 443, "connect")
			OK("b.two.org", 443, "connect") OK("cdn.example.org", 443, "connect"));

	ok(!strcmp(pats(p, b, sizeof b),
		   "a.cdn.example.org a.two.org b.cdn.example.org b.two.org c.cdn.example.org "
		   "cdn.example.org x.test y.test z.test"),
	   "no wildcard: three siblings stay exact names (github.io is a parent too): %s", b);
	ok(nflows(p, 0) == 1, "an exact name covers its own flow");
	json_decref(p);
	p = run(OK("a.cdn.example.org", 8443, "connect") OK("b.cdn.example.org", 8443, "connect")
		OK("c.cdn.example.org", 8443, "connect") DNS("b.cdn.example.org"));
	ok(!strcmp(pats(p, b, sizeof b),
		   "a.cdn.example.org:8443 b.cdn.example.org:8443 c.cdn.example.org:8443"),
	   "names with a port are not folded: %s", b);
	ok(nflows(p, 1) == 2, "a query goes with its name's port entry");
	json_decref(p);
}

static void test_unservable(void)
{
	char b[256];
	json_t *p = run(OK("198.51.100.7", 443, "connect") DNS("git.test") DNS("198.51.100.9")
			DNS("_srv.test") OK("pkg.test", 443, "connect")),
	       *u = json_object_get(p, "unservable");
	const char *w0 = json_string_value(json_object_get(json_array_get(u, 0), "why"));
	const char *w1 = json_string_value(json_object_get(json_array_get(u, 1), "why"));
	const char *w2 = json_string_value(json_object_get(json_array_get(u, 2), "why"));
	const char *n1 = json_string_value(json_object_get(json_array_get(u, 1), "name"));

	ok(!strcmp(pats(p, b, sizeof b), "pkg.test"), "only the name: %s", b);
	ok(json_array_size(u) == 3, "three unservable flows");
	ok(w0 && strstr(w0, "IP address"), "the address named as such: %s", w0);
	ok(w1 && strstr(w1, "not a host name") && n1 && !strcmp(n1, "198.51.100.9"),
	   "a query for an address: %s", w1);
	ok(w2 && strstr(w2, "another protocol"), "a name resolved and never fetched: %s", w2);
	ok(json_integer_value(json_object_get(p, "not_names")) == 1,
	   "a name neither a host name nor an address (_srv.test) is counted, not listed");
	json_decref(p);
}

static void test_edges(void)
{
	char b[64], big[600];
	json_t *p = run("");

	ok(p && json_array_size(json_object_get(p, "allow")) == 0, "an empty ledger: nothing");
	json_decref(p);
	p = propose_ledger("{\"kind\":\"dns\"", 13);
	ok(p && json_integer_value(json_object_get(p, "skipped")) == 1, "a cut line is skipped");
	json_decref(p);
	memset(big, 'a', sizeof big);
	memcpy(big, "{\"kind\":\"connect\",\"name\":\"", 26);
	snprintf(big + 500, sizeof big - 500,
		 "\",\"port\":443,\"address\":\"1.2.3.4\",\"verdict\":\"allowed\"}");
	p = run(big);
	ok(p && json_array_size(json_object_get(p, "unservable")) == 0 &&
		   json_integer_value(json_object_get(p, "not_names")) == 1,
	   "a name too long is counted, not listed");
	ok(!strcmp(pats(p, b, sizeof b), ""), "and proposes nothing");
	json_decref(p);
	/* a cut at any byte count could end inside the 2-byte U+00E9 */
	for (size_t at = 250; at < 320; at++) {
		memset(big, 'a', sizeof big);
		memcpy(big, "{\"kind\":\"dns\",\"name\":\"", 22);
		memcpy(big + 22 + at, "\xc3\xa9", 2);
		snprintf(big + 22 + at + 2, sizeof big - 24 - at,
			 ".test\",\"port\":53,\"verdict\":\"allowed\",\"reason\":null}");
		p = run(big);
		if (!p || json_integer_value(json_object_get(p, "not_names")) != 1 ||
		    json_array_size(json_object_get(p, "unservable")))
			break;
		json_decref(p);
		p = NULL;
	}
	ok(!p, "a non-ASCII name of any length is counted, never cut (a cut inside its "
	       "UTF-8 is not JSON text: the proposal failed)");
	json_decref(p);
}

/* A ledger of n succeeded connects: to names "<pad>NNN.test" (pad: a
 * prefix of labels), or to addresses 198.51.N.N; one to heavy.test more
 * (count 3) when heavy. */
static json_t *many(size_t n, const char *pad, int addresses, int heavy)
{
	size_t sz = (n + 3) * (strlen(pad) + 200), o = 0;
	char *buf = malloc(sz), name[300];
	json_t *p;

	if (!buf)
		return NULL;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (addresses)
			snprintf(name, sizeof name, "198.51.%zu.%zu", i / 250, i % 250 + 1);
		else
			snprintf(name, sizeof name, "%s%03zu.test", pad, i);
		o += (size_t)snprintf(buf + o, sz - o,
				      "{\"kind\":\"connect\",\"name\":\"%s\",\"port\":443,"
				      "\"address\":\"198.51.100.10\",\"verdict\":\"allowed\"}\n", name);
	}
	for (int i = 0; heavy && i < 3; i++)
		o += (size_t)snprintf(buf + o, sz - o, "%s", OK("heavy.test", 443, "connect"));
	p = propose_ledger(buf, o);
	free(buf);
	return p;
}

static long long omitted(const json_t *p, const char *list, const char *key)
{
	return json_integer_value(json_object_get(json_object_get(p, list), key));
}

/* The guest chooses how many names it looks up: a proposal's lists are
 * capped, the most counted kept, what was left out said. */
static void test_caps(void)
{
	char pad[200];
	size_t bytes = 0, i;
	json_t *p = many(PROPOSE_LIST_MAX, "", 0, 0), *e;

	ok(p && json_array_size(json_object_get(p, "allow")) == PROPOSE_LIST_MAX &&
		   !json_object_get(p, "allow_omitted") && !json_object_get(p, "unservable_omitted"),
	   "%d names: all proposed, nothing said omitted", PROPOSE_LIST_MAX);
	json_decref(p);
	p = many(PROPOSE_LIST_MAX + 44, "", 0, 1);
	ok(p && json_array_size(json_object_get(p, "allow")) == PROPOSE_LIST_MAX,
	   "%d names and one more counted: %d proposed", PROPOSE_LIST_MAX + 45, PROPOSE_LIST_MAX);
	ok(omitted(p, "allow_omitted", "entries") == 45 && omitted(p, "allow_omitted", "count") == 45,
	   "allow_omitted says 45 entries, their 45 flows");
	e = json_object_get(json_array_get(json_object_get(p, "allow"), PROPOSE_LIST_MAX - 1),
			    "pattern");
	ok(json_is_string(e) && !strcmp(json_string_value(e), "heavy.test"),
	   "the most counted name is kept (heavy.test, sorted last)");
	json_decref(p);
	/* 191-byte names: 85 fit in PROPOSE_NAMES_BYTES */
	memset(pad, 'a', 60);
	memcpy(pad + 60, ".", 1);
	memcpy(pad + 61, pad, 61);
	memcpy(pad + 122, pad, 61);
	pad[183] = '\0';
	p = many(100, pad, 0, 0);
	json_array_foreach(json_object_get(p, "allow"), i, e)
		bytes += strlen(json_string_value(json_object_get(e, "pattern")));
	ok(p && bytes <= PROPOSE_NAMES_BYTES && bytes + 192 > PROPOSE_NAMES_BYTES,
	   "long names: as many as fit in %d bytes (%zu)", PROPOSE_NAMES_BYTES, bytes);
	ok(omitted(p, "allow_omitted", "entries") == 100 - (long long)json_array_size(json_object_get(
								   p, "allow")),
	   "and the rest said omitted");
	json_decref(p);
	p = many(PROPOSE_LIST_MAX + 10, "", 1, 0);
	ok(p && json_array_size(json_object_get(p, "unservable")) == PROPOSE_LIST_MAX &&
		   omitted(p, "unservable_omitted", "flows") == 10 &&
		   omitted(p, "unservable_omitted", "count") == 10,
	   "unservable flows: %d, unservable_omitted says the 10 others", PROPOSE_LIST_MAX);
	json_decref(p);
}

/* propose_path in a child, bounded by time (a FIFO would hang a reader
 * that blocks on its open): 1 when it refused path as "not a regular
 * file", 0 when it did not, -1 when it was still in it after 10 s. */
static int refused_in_time(const char *path)
{
	struct timespec ms = { .tv_nsec = 10 * 1000 * 1000 };
	pid_t pid = fork(), w = 0;
	int st = 0;

	if (pid == 0) {
		const char *why;
		json_t *p = propose_path(path, &why);

		_exit(!p && !strcmp(why, "not a regular file") ? 0 : 1);
	}
	for (int i = 0; pid > 0 && i < 1000 && (w = waitpid(pid, &st, WNOHANG)) == 0; i++)
		nanosleep(&ms, NULL);
	if (pid > 0 && w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid > 0 && w == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void test_path(void)
{
	char dir[] = "/tmp/isopod-propose-test.XXXXXX", fifo[64], file[64];
	const char *why;
	json_t *p;
	FILE *f;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(fifo, sizeof fifo, "%s/fifo", dir);
	snprintf(file, sizeof file, "%s/ledger", dir);
	ok(mkfifo(fifo, 0600) == 0 && refused_in_time(fifo) == 1,
	   "a FIFO as the ledger is refused at once (no writer: an open without O_NONBLOCK hangs)");
	ok(refused_in_time("/dev/null") == 1, "a device as the ledger is refused");
	if ((f = fopen(file, "w"))) {
		fputs(OK("pkg.test", 443, "connect"), f);
		fclose(f);
	}
	p = propose_path(file, &why);
	ok(p && json_array_size(json_object_get(p, "allow")) == 1, "a regular file is read");
	json_decref(p);
	unlink(fifo);
	unlink(file);
	rmdir(dir);
}

int main(void)
{
	test_names();
	test_succeeded();
	test_fold();
	test_unservable();
	test_edges();
	test_caps();
	test_path();
	return tap_done();
}
