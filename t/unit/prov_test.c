/* prov_test.c - lib/prov.c, the reader of provenance Statements that a
 * verifier did not make: the fixture t/attest/provenance-statement.json
 * (a real run's, with a stage layer and a ledger added) reads back whole;
 * each thing isopod-provenance verify must refuse is refused, naming its
 * field; every member replaced by a value of each wrong type reads without
 * a crash and never as a clean Statement when the member is required; the
 * chain comparison.  Built by t/run-unit with ASan + UBSan. */
#include "../../lib/prov.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/provtree.c" /* and a directory's check, with its walk */
#include "../../lib/tree.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

#define SHA "8748d29207a02184fdb6794bada9aef0e413b91431c93a1b00100cc371e56b47"
#define FIXTURE "t/attest/provenance-statement.json"

/* The failures' fields, joined with ',' (for messages and checks). */
static char *fields(json_t *fails, char *buf, size_t sz)
{
	json_t *f;
	size_t i, n = 0;

	buf[0] = 0;
	json_array_foreach(fails, i, f)
		n += (size_t)snprintf(buf + n, n < sz ? sz - n : 0, "%s%s", i ? "," : "",
				      json_string_value(json_object_get(f, "field")));
	return buf;
}

/* Read s (edited by the jansson path edit, when given) and return the
 * failures' fields; *out the summary when wanted. */
static int refused_as(json_t *base, void (*edit)(json_t *), const char *sha, const char *want)
{
	json_t *s = json_deep_copy(base), *fails = json_array(), *out;
	char got[1024];
	int r;

	if (edit)
		edit(s);
	out = prov_read(s, sha, fails);
	fields(fails, got, sizeof got);
	r = out && (want ? strstr(got, want) != NULL : json_array_size(fails) == 0);
	if (!r)
		printf("# failures: [%s]\n", got);
	json_decref(out);
	json_decref(fails);
	json_decref(s);
	return r;
}

static json_t *pred(json_t *s, const char *a, const char *b)
{
	json_t *p = json_object_get(json_object_get(s, "predicate"), a);

	return b ? json_object_get(p, b) : p;
}

static void e_type(json_t *s) { json_object_set_new(s, "_type", json_string("https://in-toto.io/Statement/v0.1")); }
static void e_ptype(json_t *s) { json_object_set_new(s, "predicateType", json_string("https://slsa.dev/provenance/v0.2")); }
static void e_btype(json_t *s) { json_object_set_new(pred(s, "buildDefinition", NULL), "buildType", json_string("https://example.org/other")); }
static void e_env(json_t *s)
{
	json_array_append_new(json_object_get(pred(s, "buildDefinition", "externalParameters"), "envNames"),
			      json_string("TOKEN=hunter2"));
}
static void e_nocmd(json_t *s) { json_object_set_new(pred(s, "buildDefinition", "externalParameters"), "command", json_array()); }
static void e_mode(json_t *s)
{
	json_object_set_new(json_object_get(pred(s, "buildDefinition", "externalParameters"), "network"),
			    "mode", json_string("closed"));
}
static void e_novml(json_t *s) { json_array_remove(pred(s, "buildDefinition", "resolvedDependencies"), 0); }
static void e_twoimg(json_t *s)
{
	json_array_append_new(pred(s, "buildDefinition", "resolvedDependencies"),
			      json_pack("{s:s, s:{s:s}}", "name", "image/debian", "digest", "sha256", SHA));
}
static void e_badstage(json_t *s)
{
	json_array_append_new(pred(s, "buildDefinition", "resolvedDependencies"),
			      json_pack("{s:s, s:{s:s}}", "name", "stage/../x", "digest", "sha256", SHA));
}
static void e_upper(json_t *s)
{
	json_object_set_new(json_object_get(json_array_get(json_object_get(s, "subject"), 0), "digest"),
			    "sha256", json_string("8748D29207A02184FDB6794BADA9AEF0E413B91431C93A1B00100CC371E56B47"));
}
static void e_times(json_t *s)
{
	json_object_set_new(pred(s, "runDetails", "metadata"), "finishedOn", json_string("2026-12-02T07:59:59Z"));
}
static void e_timefmt(json_t *s)
{
	json_object_set_new(pred(s, "runDetails", "metadata"), "startedOn", json_string("2026-12-02 08:00:00"));
}
static void e_builder(json_t *s)
{
	json_object_set_new(pred(s, "runDetails", "builder"), "id", json_string("https://github.com/actions/runner"));
}
static void e_nosubj(json_t *s) { json_object_set_new(s, "subject", json_array()); }
static void e_nostdin(json_t *s) { json_object_del(pred(s, "buildDefinition", "externalParameters"), "stdin"); }
static void e_stdin(json_t *s)
{
	json_object_set_new(pred(s, "buildDefinition", "externalParameters"), "stdin",
			    json_pack("{s:s, s:i}", "sha256", "ABC", "bytes", 3));
}

/* prov_exit_check of the fixture with isopod_exit's members replaced. */
static int exit_fails(const char *code, const char *sig, const char *to)
{
	json_t *ex = json_pack("{s:o, s:o, s:o}", "exitCode", json_loads(code, JSON_DECODE_ANY, NULL),
			       "signal", json_loads(sig, JSON_DECODE_ANY, NULL), "timedOut",
			       json_loads(to, JSON_DECODE_ANY, NULL));
	json_t *fails = json_array();
	int r = prov_exit_check(ex, fails);

	r = r == 1 && json_array_size(fails) == 1 &&
	    !strcmp(json_string_value(json_object_get(json_array_get(fails, 0), "field")) ?: "", "exit");
	json_decref(ex);
	json_decref(fails);
	return r;
}

/* Every member (recursively) replaced by each of null, 1, "x", [], {}:
 * read without a crash; a Statement with any required member broken is
 * never clean.  Returns how many edits read clean (optional members). */
static const char *wrong_json[] = { "null", "1", "\"x\"", "[]", "{}" };
static int sweep(json_t *root, json_t *node, int *runs)
{
	const char *k;
	json_t *v, *fails, *out;
	void *tmp;
	size_t i, w;
	int clean = 0;

	if (json_is_object(node)) {
		json_object_foreach_safe(node, tmp, k, v) {
			json_t *keep = json_incref(v);

			for (w = 0; w < sizeof wrong_json / sizeof *wrong_json; w++) {
				json_object_set_new(node, k, json_loads(wrong_json[w], JSON_DECODE_ANY, NULL));
				fails = json_array();
				out = prov_read(root, SHA, fails);
				(*runs)++;
				clean += out && json_array_size(fails) == 0;
				json_decref(out);
				json_decref(fails);
			}
			json_object_set_new(node, k, keep);
			clean += sweep(root, keep, runs);
		}
	} else if (json_is_array(node)) {
		json_array_foreach(node, i, v)
			clean += sweep(root, v, runs);
	}
	return clean;
}

/* The members a Statement cannot do without, as key paths. */
static const char *const required_paths[][6] = {
	{ "_type" }, { "subject" }, { "predicateType" }, { "predicate" },
	{ "predicate", "buildDefinition" }, { "predicate", "buildDefinition", "buildType" },
	{ "predicate", "buildDefinition", "externalParameters" },
	{ "predicate", "buildDefinition", "externalParameters", "command" },
	{ "predicate", "buildDefinition", "externalParameters", "envNames" },
	{ "predicate", "buildDefinition", "externalParameters", "network" },
	{ "predicate", "buildDefinition", "externalParameters", "network", "mode" },
	{ "predicate", "buildDefinition", "externalParameters", "network", "allow" },
	{ "predicate", "buildDefinition", "resolvedDependencies" },
	{ "predicate", "runDetails" }, { "predicate", "runDetails", "builder" },
	{ "predicate", "runDetails", "builder", "id" }, { "predicate", "runDetails", "metadata" },
	{ "predicate", "runDetails", "metadata", "invocationId" },
	{ "predicate", "runDetails", "metadata", "startedOn" },
	{ "predicate", "runDetails", "metadata", "finishedOn" },
};

static int required(json_t *s)
{
	static const char *const bad[] = { "null", "1", "{}" };
	size_t p, b, d;
	int good = 1;

	for (p = 0; p < sizeof required_paths / sizeof *required_paths; p++)
		for (b = 0; b < sizeof bad / sizeof *bad; b++) {
			json_t *c = json_deep_copy(s), *o = c, *fails = json_array(), *out;

			for (d = 0; required_paths[p][d + 1]; d++)
				o = json_object_get(o, required_paths[p][d]);
			json_object_set_new(o, required_paths[p][d], json_loads(bad[b], JSON_DECODE_ANY, NULL));
			out = prov_read(c, SHA, fails);
			if (!out || json_array_size(fails) == 0) {
				printf("# %s = %s read clean\n", required_paths[p][d], bad[b]);
				good = 0;
			}
			json_decref(out);
			json_decref(fails);
			json_decref(c);
		}
	return good;
}

/* A directory's entries (prov_tree_entries): its subjects and symlink
 * byproducts named TOP/PATH, nothing of another top or name; a malformed
 * or doubled one, or none at all, refused; prov_read of a tree (sha NULL)
 * asks no subject digest. */
static void tree_entries(json_t *base)
{
	json_t *s = json_deep_copy(base), *fails = json_array(), *out, *want;
	json_t *byp = pred(s, "runDetails", "byproducts");
	char got[1024];

	json_array_append_new(json_object_get(s, "subject"),
			      json_pack("{s:s, s:{s:s}}", "name", "tree/sub/b", "digest", "sha256", SHA));
	json_array_append_new(json_object_get(s, "subject"),
			      json_pack("{s:s, s:{s:s}}", "name", "treex/c", "digest", "sha256", SHA));
	json_array_append_new(byp, json_pack("{s:s, s:s, s:s, s:{s:s, s:s}}", "name", "tree/l",
					     "content", "YQ==", "mediaType", "inode/symlink",
					     "annotations", "isopod_guest", "/root/tree/l",
					     "isopod_symlink", "a"));
	json_array_append_new(byp, json_pack("{s:s, s:s, s:{s:s}}", "name", "tree/d", "mediaType",
					     "application/jsonl", "digest", "sha256", SHA));
	out = prov_tree_entries(s, "tree", fails);
	want = json_pack("{s:{s:s}, s:{s:s}}", "sub/b", "sha256", SHA, "l", "target", "a");
	ok(out && json_equal(out, want) && json_array_size(fails) == 0,
	   "a tree's entries: its file by digest, its symlink by target; not another top's, nor "
	   "a byproduct that is no symlink [%s]", fields(fails, got, sizeof got));
	json_decref(want);
	json_decref(out);
	out = prov_read(s, NULL, fails);
	ok(out && json_array_size(fails) == 0 && json_is_null(json_object_get(out, "subject")),
	   "prov_read of a tree: no subject digest asked, subject null [%s]",
	   fields(fails, got, sizeof got));
	json_decref(out);
	out = prov_tree_entries(s, "sub", fails);
	ok(out && json_object_size(out) == 0 && strstr(fields(fails, got, sizeof got), "subject"),
	   "a top the Statement names nothing under: refused (subject)");
	json_decref(out);
	json_array_clear(fails);
	json_object_del(json_object_get(json_array_get(byp, 1), "annotations"), "isopod_symlink");
	json_array_append_new(byp, json_pack("{s:s, s:s, s:{s:s}}", "name", "tree/sub/b",
					     "mediaType", "inode/symlink", "annotations",
					     "isopod_symlink", "x"));
	out = prov_tree_entries(s, "tree", fails);
	ok(out && json_array_size(fails) == 2 &&
		   strstr(json_string_value(json_object_get(json_array_get(fails, 0), "why")),
			  "tree/l: recorded without a target") &&
		   strstr(json_string_value(json_object_get(json_array_get(fails, 1), "why")),
			  "tree/sub/b: named twice"),
	   "a symlink without its target, a name both a file and a symlink: refused (byproducts)");
	json_decref(out);
	json_decref(fails);
	json_decref(s);
}

/* prov_tree_verify of a directory whose Statement records a file without
 * its digest: refused, the entry met and named malformed; never a failure
 * lost to a walk stopped as if out of memory (-1, exit 111). */
static void tree_malformed(json_t *base)
{
	json_t *s = json_deep_copy(base), *fails = json_array(), *art = json_object();
	char dir[] = "/tmp/prov_test.XXXXXX", top[64], f[80], got[1024];
	int r = -2;

	json_array_append_new(json_object_get(s, "subject"), json_pack("{s:s}", "name", "tree/a"));
	if (mkdtemp(dir) && snprintf(top, sizeof top, "%s/tree", dir) > 0 && mkdir(top, 0700) == 0 &&
	    snprintf(f, sizeof f, "%s/a", top) > 0 && close(open(f, O_CREAT | O_WRONLY, 0600)) == 0)
		r = prov_tree_verify(top, s, fails, art);
	fields(fails, got, sizeof got);
	ok(r == 0 && strstr(got, "subject") && json_array_size(fails) == 2 &&
		   strstr(json_string_value(json_object_get(json_array_get(fails, 1), "why")),
			  "tree/a: recorded malformed"),
	   "a file recorded without its digest: refused (subject, tree), not a stopped walk [%d: %s]", r,
	   got);
	/* a failure's words that are not UTF-8 (a top's name) are kept,
	 * made UTF-8: lost, a tree that records nothing would pass */
	json_array_clear(fails);
	json_decref(prov_tree_entries(s, "tr\377", fails));
	ok(json_array_size(fails) == 1 && strstr(fields(fails, got, sizeof got), "subject"),
	   "a top that is not UTF-8 and names nothing: refused, its failure not lost [%s]", got);
	unlink(f);
	rmdir(top);
	rmdir(dir);
	json_decref(art);
	json_decref(fails);
	json_decref(s);
}

/* The file the walk saw is the one hashed (review L2: provtree.c's fstat
 * of the opened fd against the walk's st_dev and st_ino).  The swap is a
 * race between the walk's fstatat and tree_entry's openat, so the entry is
 * handed to tree_entry as the walk would hand it (its stat taken), then the
 * name is swapped: for a FIFO (an O_NONBLOCK read of it hashes as empty,
 * the digest signed here), and for a regular file of the signed bytes
 * that is not the one the walk saw.  Each must be "replaced while it was
 * verified", never hashed; the control, the same file, verifies.  The
 * FIFO three ways: made after the file's unlink (its inode number may be
 * the file's again, or not: the filesystem's choice); made beside it and
 * renamed over it (a new inode on every filesystem: the dev/ino check's
 * case); and the walk's stat that of the FIFO's own inode, said regular
 * (a reused inode number for certain: only the S_ISREG check catches it). */
#define EMPTY_SHA "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* tree_entry on e: whether it verified the file (refused 0) or refused it
 * as replaced (refused 1), its why a note.  Under ok_bounded: the FIFOs'
 * open must not wait for a writer. */
static int entry_is(const struct tree_ent *e, struct tree_check *t, int refused)
{
	int r = tree_entry(e, t);
	const char *why = json_string_value(json_object_get(json_array_get(t->fails, 0), "why"));

	printf("# tree_entry: %s\n", why ?: "no failure");
	if (!refused)
		return r == 0 && json_array_size(t->fails) == 0 && t->files == 1;
	return r == 0 && json_array_size(t->fails) == 1 && why &&
	       !strcmp(why, "tree/a: replaced while it was verified");
}

static void tree_swapped(void)
{
	static const char *what[] = { "the file the walk saw (control)", "a FIFO swapped in",
				      "another regular file of the signed bytes swapped in",
				      "a FIFO made beside it renamed over it",
				      "a FIFO of the very inode the walk saw as regular" };
	char dir[] = "/tmp/prov_test.XXXXXX", a[80], b[80];
	struct stat seen;
	int dfd = -1, k;

	if (!mkdtemp(dir) || (dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		ok(0, "a directory for the swap");
		return;
	}
	snprintf(a, sizeof a, "%s/a", dir);
	snprintf(b, sizeof b, "%s/b", dir);
	for (k = 0; k < 5; k++) {
		json_t *want = json_pack("{s:{s:s}}", "a", "sha256", EMPTY_SHA), *fails = json_array();
		struct tree_check t = { .want = want, .fails = fails, .top = "tree", .nwant = 1 };
		struct tree_ent e = { .dfd = dfd, .name = "a", .path = "a", .depth = 1, .st = &seen };
		int made;

		unlink(a);
		made = close(open(a, O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) == 0 && lstat(a, &seen) == 0;
		if (k == 1)
			made = made && unlink(a) == 0 && mkfifo(a, 0600) == 0;
		if (k == 2)
			made = made && close(open(b, O_CREAT | O_WRONLY | O_CLOEXEC, 0600)) == 0 &&
			       rename(b, a) == 0;
		if (k == 3)
			made = made && mkfifo(b, 0600) == 0 && rename(b, a) == 0;
		if (k == 4) {
			made = made && unlink(a) == 0 && mkfifo(a, 0600) == 0 && lstat(a, &seen) == 0;
			seen.st_mode = S_IFREG | 0600;
		}
		ok_bounded(10, made && entry_is(&e, &t, k != 0), "tree_entry: %s %s", what[k],
			   k ? "is refused, not hashed" : "verifies");
		json_decref(fails);
		json_decref(want);
	}
	unlink(a);
	close(dfd);
	rmdir(dir);
}

int main(void)
{
	json_t *s = json_load_file(FIXTURE, JSON_REJECT_DUPLICATES, NULL), *fails, *out, *want;
	char got[1024];
	int runs = 0, clean;

	if (!s) {
		ok(0, "%s readable (run from the source root)", FIXTURE);
		return tap_done();
	}
	fails = json_array();
	out = prov_read(s, SHA, fails);
	ok(out && json_array_size(fails) == 0, "the fixture reads clean [%s]", fields(fails, got, sizeof got));
	ok(!strcmp(json_string_value(json_object_get(json_object_get(out, "subject"), "name")) ?: "", "app.bin"),
	   "subject: the artifact's name");
	ok(json_array_size(json_object_get(json_object_get(out, "chain"), "layers")) == 1 &&
		   !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(
			   json_object_get(out, "chain"), "layers"), 0), "stage")) ?: "", "st-0123456789ab"),
	   "chain: the stage layer, by id and digest");
	ok(!strcmp(json_string_value(json_object_get(json_object_get(json_object_get(out, "chain"), "base"),
						     "flavor")) ?: "", "base"), "chain: the base image's flavor");
	ok(json_is_string(json_object_get(json_object_get(out, "ledger"), "sha256")), "the ledger's digest");
	ok(json_is_null(json_object_get(out, "attestation")), "no attestation: null");
	want = json_pack("[s]", "SECRET");
	ok(json_equal(json_object_get(out, "envNames"), want), "env names");
	json_decref(want);

	/* the chain comparison */
	want = json_deep_copy(json_object_get(out, "chain"));
	json_array_clear(fails);
	ok(prov_chain_compare(json_object_get(out, "chain"), want, fails) == 0, "chain: equal to itself");
	json_object_set_new(json_object_get(want, "base"), "sha256", json_string(SHA));
	ok(prov_chain_compare(json_object_get(out, "chain"), want, fails) == 1, "chain: another base refused");
	json_decref(want);
	want = json_deep_copy(json_object_get(out, "chain"));
	json_array_clear(json_object_get(want, "layers"));
	json_array_clear(fails);
	ok(prov_chain_compare(json_object_get(out, "chain"), want, fails) == 1 &&
		   strstr(json_string_value(json_object_get(json_array_get(fails, 0), "why")), "1 stage layer(s) signed, 0 expected"),
	   "chain: a layer more than expected refused");
	json_decref(want);
	want = json_deep_copy(json_object_get(out, "chain"));
	json_object_set_new(json_array_get(json_object_get(want, "layers"), 0), "sha256", json_string(SHA));
	json_array_clear(fails);
	ok(prov_chain_compare(json_object_get(out, "chain"), want, fails) == 1, "chain: another layer digest refused");
	json_decref(want);
	json_decref(out);
	json_decref(fails);

	ok(refused_as(s, NULL, "0000000000000000000000000000000000000000000000000000000000000000", "subject"),
	   "an artifact whose sha256 is no subject: refused (subject)");
	ok(refused_as(s, e_nosubj, SHA, "subject"), "no subject at all: refused");
	ok(refused_as(s, e_upper, SHA, "subject"), "a subject digest in upper case: refused (not isopod's, not matched)");
	ok(refused_as(s, e_type, SHA, "_type"), "another Statement type: refused");
	ok(refused_as(s, e_ptype, SHA, "predicateType"), "SLSA provenance v0.2: refused");
	ok(refused_as(s, e_btype, SHA, "buildType"), "another build type: refused");
	ok(refused_as(s, e_env, SHA, "externalParameters.envNames"), "an env value among the names: refused");
	ok(refused_as(s, e_nocmd, SHA, "externalParameters.command"), "an empty command: refused");
	ok(refused_as(s, e_mode, SHA, "externalParameters.network.mode"), "an unknown network mode: refused");
	ok(refused_as(s, e_novml, SHA, "resolvedDependencies"), "no kernel: refused");
	ok(refused_as(s, e_twoimg, SHA, "resolvedDependencies"), "two base images: refused");
	ok(refused_as(s, e_badstage, SHA, "resolvedDependencies"), "a stage dependency not named st-<12 hex>: refused");
	ok(refused_as(s, e_times, SHA, "finishedOn"), "finished before it started: refused");
	ok(refused_as(s, e_timefmt, SHA, "runDetails.metadata"), "a time not YYYY-MM-DDTHH:MM:SSZ: refused");
	ok(refused_as(s, e_builder, SHA, "runDetails.builder.id"), "another builder: refused");
	ok(refused_as(s, e_nostdin, SHA, "externalParameters.stdin"), "no stdin member: refused (nothing binds it)");
	ok(refused_as(s, e_stdin, SHA, "externalParameters.stdin"), "a stdin digest not 64 hex: refused");

	/* the run's exit (isopod_exit as signed) */
	ok(!exit_fails("0", "null", "false"), "exit 0, no signal, not timed out: a success");
	ok(exit_fails("3", "null", "false"), "exit 3: a failed run (field exit)");
	ok(exit_fails("137", "null", "true"), "137 and timed out: a failed run");
	ok(exit_fails("0", "null", "true"), "exit 0 but timed out: a failed run");
	ok(exit_fails("0", "9", "false"), "a signal: a failed run");
	ok(exit_fails("\"0\"", "null", "false"), "exitCode a string: a failed run");
	fails = json_array();
	ok(prov_exit_check(NULL, fails) == 1, "no isopod_exit at all: a failed run");
	json_decref(fails);

	fails = json_array();
	want = json_pack("[i]", 1);
	out = prov_read(want, SHA, fails);
	ok(out && json_array_size(fails) == 1, "an array, not a Statement: one failure, no crash");
	json_decref(want);
	json_decref(out);
	json_decref(fails);

	tree_entries(s);
	tree_malformed(s);
	tree_swapped();
	clean = sweep(s, s, &runs);
	ok(runs > 200, "sweep: every member of the fixture replaced by each wrong type (%d reads, %d "
	   "clean: optional members), no crash", runs, clean);
	ok(required(s), "every required member replaced by null, 1 or {}: never clean");
	json_decref(s);
	return tap_done();
}
