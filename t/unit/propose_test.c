/* propose_test.c - the allowlist a learn run proposes (lib/propose.c):
 * which flows count as succeeded, names and ports into patterns, the folds
 * into "*.domain" with the public suffix list (never to or above a public
 * suffix; none without the list), reported beside "allow" and in it only
 * when asked, the flows filtered cannot serve, and ledger lines that are
 * not ledger objects. */
#include "../../lib/propose.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/allow.c"
#include "../../lib/psl.c"

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
	return propose_ledger(ledger, strlen(ledger), NULL, NULL, 0);
}

/* The rules the fold tests meet, as the list has them (publicsuffix.org,
 * both sections). */
static const char rules[] = "com\norg\nnet\nio\nuk\nco.uk\n*.mm\n*.ck\n!www.ck\n"
			    "// ===BEGIN PRIVATE DOMAINS===\ngithub.io\ns3.amazonaws.com\n"
			    "*.compute.amazonaws.com\n// ===END PRIVATE DOMAINS===\n";

/* with the list, its folds applied (fold 1) or only reported (0) */
static json_t *runp(const char *ledger, int fold)
{
	struct psl *psl = psl_parse(rules, sizeof rules - 1);
	json_t *p = psl ? propose_ledger(ledger, strlen(ledger), psl, NULL, fold) : NULL;

	psl_free(psl);
	return p;
}

/* The folds' patterns, joined with ' ' (into buf). */
static const char *fpats(const json_t *p, char *buf, size_t sz)
{
	size_t i, o = 0;
	json_t *e;

	buf[0] = '\0';
	json_array_foreach(json_object_get(p, "folds"), i, e)
		o += (size_t)snprintf(buf + o, sz - o, "%s%s", i ? " " : "",
				      json_string_value(json_object_get(e, "pattern")));
	return buf;
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

#define C3(a, b, c) OK(a, 443, "connect") OK(b, 443, "connect") OK(c, 443, "connect")

/* The folds as the list allows them, asked for (fold 1): each pattern in
 * "allow" in its names' place. */
static void test_fold(void)
{
	char b[512];
	json_t *p = runp(C3("a.example.com", "b.example.com", "c.example.com") DNS("b.example.com")
			 DNS("d.example.com") OK("pkg.test", 443, "connect"), 1);

	ok(!strcmp(pats(p, b, sizeof b), "*.example.com pkg.test"),
	   "three names under example.com: *.example.com: %s", b);
	ok(nflows(p, 0) == 4, "it covers their three connects and the query for one of them");
	ok(json_array_size(json_object_get(p, "unservable")) == 1,
	   "a name only resolved stays unservable under the fold (no proxied flow went to it)");
	ok(json_integer_value(json_object_get(json_object_get(p, "fold"), "min_names")) == 3 &&
		   json_integer_value(json_object_get(json_object_get(p, "fold"), "public_suffixes")) == 12 &&
		   json_is_true(json_object_get(json_object_get(p, "fold"), "applied")),
	   "fold says the list's 12 rules, the threshold and that the folds are applied");
	json_decref(p);
	p = runp(C3("a.github.io", "b.github.io", "c.github.io")
		 C3("a.co.uk", "b.co.uk", "c.co.uk"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "a.co.uk a.github.io b.co.uk b.github.io c.co.uk c.github.io"),
	   "github.io (PRIVATE section), co.uk: public suffixes, never folded: %s", b);
	json_decref(p);
	p = runp(C3("www.bbc.co.uk", "news.bbc.co.uk", "static.bbc.co.uk")
		 C3("a.x.mm", "b.x.mm", "c.x.mm") C3("a.b.x.mm", "b.b.x.mm", "c.b.x.mm"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "*.b.x.mm *.bbc.co.uk a.x.mm b.x.mm c.x.mm"),
	   "below co.uk and below *.mm's suffixes they fold, never to the suffix: %s", b);
	json_decref(p);
	p = runp(C3("a.www.ck", "b.www.ck", "c.www.ck") C3("a.t.ck", "b.t.ck", "c.t.ck"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "*.www.ck a.t.ck b.t.ck c.t.ck"),
	   "*.ck with !www.ck: www.ck is registrable (folds), t.ck a suffix (does not): %s", b);
	json_decref(p);
	p = runp(C3("a.amazonaws.com", "b.amazonaws.com", "c.amazonaws.com"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "a.amazonaws.com b.amazonaws.com c.amazonaws.com"),
	   "no fold over a suffix below (s3.amazonaws.com: anyone's buckets): %s", b);
	json_decref(p);
	p = runp(OK("a.example.net", 443, "connect") OK("b.example.net", 443, "connect")
		 OK("example.net", 443, "connect") C3("a.cdn.example.org", "b.cdn.example.org",
						       "c.cdn.example.org"), 1);
	ok(!strcmp(pats(p, b, sizeof b),
		   "*.cdn.example.org a.example.net b.example.net example.net"),
	   "two names below do not fold (the apex does not count: *.d does not match d); the "
	   "fold is to the deepest common parent: %s", b);
	json_decref(p);
	p = runp(C3("a.cdn.example.org", "b.cdn.example.org", "c.cdn.example.org")
		 OK("www.example.org", 443, "connect") OK("example.org", 80, "http"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "*.example.org example.org"),
	   "another name higher up: the fold is to the registrable domain; its apex exact: %s", b);
	json_decref(p);
	p = runp(OK("a.example.com", 8443, "connect") OK("b.example.com", 8443, "connect")
		 OK("c.example.com", 8443, "connect") OK("a.example.com", 443, "connect")
		 OK("b.example.com", 80, "http") DNS("a.example.com"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "*.example.com:8443 a.example.com b.example.com"),
	   "one fold per port (80/443 as one): %s", b);
	ok(nflows(p, 1) == 2, "a query goes with its name's 80/443 entry");
	json_decref(p);
	p = run(C3("a.example.com", "b.example.com", "c.example.com"));
	ok(!strcmp(pats(p, b, sizeof b), "a.example.com b.example.com c.example.com") &&
		   json_is_null(json_object_get(json_object_get(p, "fold"), "public_suffixes")) &&
		   strstr(json_string_value(json_object_get(json_object_get(p, "fold"), "why")),
			  "no public suffix list"),
	   "no list: no fold, and fold says why: %s", b);
	json_decref(p);
}

/* The text of f's member key, "" when it has none (strstr never gets NULL). */
static const char *text(const json_t *f, const char *key)
{
	const char *t = json_string_value(json_object_get(f, key));

	return t ? t : "";
}

/* A ledger of n groups of three names (a., b., c.dNNN.com): n folds. */
static json_t *many_folds(size_t n)
{
	size_t sz = n * 3 * 200, o = 0;
	char *buf = malloc(sz);
	json_t *p;

	if (!buf)
		return NULL;
	for (size_t i = 0; i < n; i++)
		for (const char *l = "abc"; *l; l++)
			o += (size_t)snprintf(buf + o, sz - o,
					      "{\"kind\":\"connect\",\"name\":\"%c.d%03zu.com\",\"port\":443,"
					      "\"address\":\"198.51.100.10\",\"verdict\":\"allowed\"}\n",
					      *l, i);
	buf[o] = '\0';
	p = runp(buf, 0);
	free(buf);
	return p;
}

static long long omitted(const json_t *p, const char *list, const char *key);

/* By default "allow" holds the names seen, never a fold: the list lacks
 * shared-hosting parents (blob.core.windows.net), so a fold may reach
 * anyone's host.  The folds the rule finds are reported beside it. */
static void test_fold_apart(void)
{
	char b[512];
	json_t *p = runp(C3("a.blob.core.windows.net", "b.blob.core.windows.net",
			    "c.blob.core.windows.net") DNS("c.blob.core.windows.net")
			 C3("a.github.io", "b.github.io", "c.github.io")
			 OK("a.example.com", 8443, "connect") OK("b.example.com", 8443, "connect")
			 OK("c.example.com", 8443, "connect"), 0), *f;
	const char *n0;

	ok(!strcmp(pats(p, b, sizeof b), "a.blob.core.windows.net a.example.com:8443 a.github.io "
		   "b.blob.core.windows.net b.example.com:8443 b.github.io c.blob.core.windows.net "
		   "c.example.com:8443 c.github.io"),
	   "not asked: allow holds the names seen, no fold: %s", b);
	ok(nflows(p, 6) == 2, "a name's entry covers its connect and its query");
	ok(!strcmp(fpats(p, b, sizeof b), "*.blob.core.windows.net *.example.com:8443"),
	   "the folds the rule finds are reported (github.io, a public suffix, none): %s", b);
	f = json_array_get(json_object_get(p, "folds"), 0);
	ok(json_array_size(json_object_get(f, "names")) == 3 &&
		   (n0 = json_string_value(json_array_get(json_object_get(f, "names"), 0))) &&
		   !strcmp(n0, "a.blob.core.windows.net") &&
		   !json_object_get(f, "names_omitted"),
	   "a fold names the names it stands for");
	ok(strstr(text(f, "widens"),
		  "every name below blob.core.windows.net (ports 80 and 443), not only the 3 seen") != NULL,
	   "and says what it grants beyond them: %s", text(f, "widens"));
	ok(strstr(text(json_array_get(json_object_get(p, "folds"), 1), "widens"), "(port 8443)") != NULL,
	   "a fold of one port says that port");
	ok(json_is_false(json_object_get(json_object_get(p, "fold"), "applied")),
	   "fold says the folds are not applied");
	json_decref(p);
	p = runp(C3("a.blob.core.windows.net", "b.blob.core.windows.net",
		    "c.blob.core.windows.net") DNS("c.blob.core.windows.net"), 1);
	ok(!strcmp(pats(p, b, sizeof b), "*.blob.core.windows.net") && nflows(p, 0) == 4 &&
		   !strcmp(fpats(p, b, sizeof b), "*.blob.core.windows.net"),
	   "asked: the fold in allow, covering the names' flows, and still reported");
	json_decref(p);
	p = runp(C3("n01.example.org", "n02.example.org", "n03.example.org")
		 C3("n04.example.org", "n05.example.org", "n06.example.org")
		 C3("n07.example.org", "n08.example.org", "n09.example.org")
		 C3("n10.example.org", "n11.example.org", "n12.example.org")
		 C3("n13.example.org", "n14.example.org", "n15.example.org")
		 C3("n16.example.org", "n17.example.org", "n18.example.org"), 0);
	f = json_array_get(json_object_get(p, "folds"), 0);
	ok(json_array_size(json_object_get(f, "names")) == PROPOSE_FOLD_NAMES &&
		   json_integer_value(json_object_get(f, "names_omitted")) == 18 - PROPOSE_FOLD_NAMES &&
		   strstr(text(f, "widens"), "not only the 18 seen"),
	   "a fold lists at most %d names, counts the rest, and widens counts them all",
	   PROPOSE_FOLD_NAMES);
	json_decref(p);
	p = many_folds(PROPOSE_LIST_MAX + 44);
	ok(p && json_array_size(json_object_get(p, "folds")) == PROPOSE_LIST_MAX &&
		   omitted(p, "folds_omitted", "folds") == 44 &&
		   omitted(p, "folds_omitted", "count") == 3 * 44,
	   "%d folds: %d reported, folds_omitted says 44 and their 132 flows",
	   PROPOSE_LIST_MAX + 44, PROPOSE_LIST_MAX);
	json_decref(p);
	p = run(C3("a.example.com", "b.example.com", "c.example.com"));
	ok(json_array_size(json_object_get(p, "folds")) == 0 &&
		   json_is_false(json_object_get(json_object_get(p, "fold"), "applied")),
	   "no list: no fold found, none applied");
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
	p = propose_ledger("{\"kind\":\"dns\"", 13, NULL, NULL, 0);
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
	p = propose_ledger(buf, o, NULL, NULL, 0);
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

/* Whether propose_path refused path as "not a regular file" (under
 * ok_bounded: a FIFO would hang a reader that blocks on its open). */
static int refused(const char *path)
{
	const char *why;
	json_t *p = propose_path(path, NULL, NULL, 0, &why);

	json_decref(p);
	return !p && !strcmp(why, "not a regular file");
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
	ok_bounded(10, mkfifo(fifo, 0600) == 0 && refused(fifo),
		   "a FIFO as the ledger is refused at once (no writer: an open without O_NONBLOCK hangs)");
	ok_bounded(10, refused("/dev/null"), "a device as the ledger is refused");
	if ((f = fopen(file, "w"))) {
		fputs(OK("pkg.test", 443, "connect"), f);
		fclose(f);
	}
	p = propose_path(file, NULL, NULL, 0, &why);
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
	test_fold_apart();
	test_unservable();
	test_edges();
	test_caps();
	test_path();
	return tap_done();
}
