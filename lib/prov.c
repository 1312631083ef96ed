/* prov.c - the reader of provenance Statements (prov.h).  Its input is a
 * file the verifier did not make: every member is checked for its type
 * before it is used, nothing is trusted to be there, and what is returned
 * is copied (json_deep_copy) out of the Statement, never borrowed. */
#include "prov.h"
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 4))) static void fail(json_t *fails, const char *field,
							const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	/* why made UTF-8 (a name may not be): a failure that fails to encode
	 * is lost, and a lost failure can make an invalid artifact valid */
	json_array_append_new(fails, json_pack("{s:s, s:o}", "field", field, "why",
					       utf8_json((const uint8_t *)why, strlen(why), 1)));
}

static json_t *get(json_t *o, const char *k)
{
	return json_is_object(o) ? json_object_get(o, k) : NULL;
}

static const char *gets(json_t *o, const char *k)
{
	return json_string_value(get(o, k));
}

/* digest.sha256 of a ResourceDescriptor when it is 64 lower-case hex. */
static const char *sha_of(json_t *rd)
{
	const char *s = gets(get(rd, "digest"), "sha256");

	return s && hex64_ok(s) ? s : NULL;
}

/* A copy of v, or null. */
static json_t *copy(json_t *v)
{
	return v ? json_deep_copy(v) : json_null();
}

/* An array of strings (each passing ok when given); NULL when not. */
static json_t *strings(json_t *a, int (*ok)(const char *))
{
	json_t *v;
	size_t i;

	if (!json_is_array(a))
		return NULL;
	json_array_foreach(a, i, v)
		if (!json_is_string(v) || (ok && !ok(json_string_value(v))))
			return NULL;
	return a;
}

static int env_name_ok(const char *s)
{
	return *s && !strchr(s, '=');
}

static void read_subject(json_t *stmt, const char *sha, json_t *out, json_t *fails)
{
	json_t *subj = get(stmt, "subject"), *e, *match = NULL;
	size_t i;

	if (!json_is_array(subj) || json_array_size(subj) == 0) {
		fail(fails, "subject", "missing, not an array, or empty");
		return;
	}
	json_array_foreach(subj, i, e) {
		const char *s = sha_of(e);

		if (!s) {
			fail(fails, "subject", "entry %zu has no digest.sha256 of 64 lower-case hex digits", i);
			continue;
		}
		if (!match && sha && !strcmp(s, sha))
			match = e;
	}
	if (!sha)
		return; /* a tree: prov_tree_entries names its subjects */
	if (!match)
		fail(fails, "subject", "the artifact's sha256 %s is not one of the %zu subject(s)", sha,
		     json_array_size(subj));
	else
		json_object_set_new(out, "subject", json_pack("{s:o, s:{s:s}}", "name",
							   copy(get(match, "name")), "digest", "sha256", sha));
}

static void read_external(json_t *bd, json_t *out, json_t *fails)
{
	json_t *ext = get(bd, "externalParameters"), *net, *v;

	if (!json_is_object(ext)) {
		fail(fails, "externalParameters", "missing or not an object");
		return;
	}
	v = get(ext, "command");
	if (!strings(v, NULL) || json_array_size(v) == 0)
		fail(fails, "externalParameters.command", "missing, empty, or not an array of strings");
	else
		json_object_set_new(out, "command", copy(v));
	v = get(ext, "envNames");
	if (!strings(v, env_name_ok))
		fail(fails, "externalParameters.envNames", "missing, or not an array of names (no '=')");
	else
		json_object_set_new(out, "envNames", copy(v));
	v = get(ext, "cwd");
	if (v && !json_is_null(v) && !json_is_string(v))
		fail(fails, "externalParameters.cwd", "neither a string nor null");
	else
		json_object_set_new(out, "cwd", copy(v));
	v = get(ext, "stage");
	if (v && !json_is_null(v) && !json_is_string(v))
		fail(fails, "externalParameters.stage", "neither a string nor null");
	else
		json_object_set_new(out, "stage", copy(v));
	/* What the command read on stdin: null none, a file's digest, or a
	 * pipe the front end forwarded without keeping (nothing binds it). */
	v = get(ext, "stdin");
	if (!v || (!json_is_null(v) &&
		   !(json_is_string(v) && !strcmp(json_string_value(v), PROV_STDIN_PIPE)) &&
		   !(hex64_ok(gets(v, "sha256") ?: "") && json_is_integer(get(v, "bytes")) &&
		     json_integer_value(get(v, "bytes")) >= 0)))
		fail(fails, "externalParameters.stdin",
		     "missing, or not null, \"" PROV_STDIN_PIPE "\" or {sha256, bytes}");
	else
		json_object_set_new(out, "stdin", copy(v));
	net = get(ext, "network");
	v = get(net, "mode");
	if (!json_is_string(v) || (strcmp(json_string_value(v), "none") &&
				   strcmp(json_string_value(v), "filtered") &&
				   strcmp(json_string_value(v), "open") &&
				   strcmp(json_string_value(v), "learn")))
		fail(fails, "externalParameters.network.mode",
		     "missing, or not none, filtered, open or learn");
	else if (!strings(get(net, "allow"), NULL))
		fail(fails, "externalParameters.network.allow", "missing, or not an array of strings");
	else
		json_object_set_new(out, "network", json_pack("{s:O, s:o}", "mode", v, "allow",
							   copy(get(net, "allow"))));
}

/* The kernel, the base image and the stage layers, as signed. */
static void read_deps(json_t *bd, json_t *out, json_t *fails)
{
	json_t *deps = get(bd, "resolvedDependencies"), *e, *layers = json_array();
	json_t *vml = NULL, *ird = NULL, *base = NULL;
	size_t i, nimg = 0;

	if (!json_is_array(deps)) {
		fail(fails, "resolvedDependencies", "missing or not an array");
		json_decref(layers);
		return;
	}
	json_array_foreach(deps, i, e) {
		const char *name = gets(e, "name"), *s = sha_of(e);

		if (!name || !s) {
			fail(fails, "resolvedDependencies", "entry %zu has no name or no digest.sha256", i);
			continue;
		}
		if (!strcmp(name, PROV_DEP_VMLINUX)) {
			if (vml)
				fail(fails, "resolvedDependencies", "%s twice", PROV_DEP_VMLINUX);
			vml = e;
		} else if (!strcmp(name, PROV_DEP_INITRAMFS)) {
			if (ird)
				fail(fails, "resolvedDependencies", "%s twice", PROV_DEP_INITRAMFS);
			ird = e;
		} else if (!strncmp(name, "image/", 6)) {
			nimg++;
			base = e;
		} else if (!strncmp(name, "stage/", 6)) {
			if (!id_stage_ok(name + 6))
				fail(fails, "resolvedDependencies", "entry %zu: %s is not stage/st-<12 hex>",
				     i, EXC(name));
			else
				json_array_append_new(layers, json_pack("{s:s, s:s}", "stage", name + 6,
									"sha256", s));
		}
	}
	if (!vml || !ird)
		fail(fails, "resolvedDependencies", "no %s", !vml ? PROV_DEP_VMLINUX : PROV_DEP_INITRAMFS);
	if (nimg != 1)
		fail(fails, "resolvedDependencies", "%zu base images (image/FLAVOR), not one", nimg);
	json_object_set_new(out, "chain", json_pack("{s:o, s:o, s:o}",
		"kernel", vml && ird ? json_pack("{s:s, s:s}", "vmlinux", sha_of(vml),
						 "initramfs", sha_of(ird)) : json_null(),
		"base", nimg == 1 ? json_pack("{s:s, s:s}", "flavor", gets(base, "name") + 6,
					      "sha256", sha_of(base)) : json_null(),
		"layers", layers));
}

/* A ResourceDescriptor of list named name (the first), or NULL. */
static json_t *named(json_t *list, const char *name)
{
	json_t *e;
	size_t i;

	json_array_foreach(list, i, e)
		if (json_is_string(get(e, "name")) && !strcmp(gets(e, "name"), name))
			return e;
	return NULL;
}

static void read_run(json_t *pred, json_t *out, json_t *fails)
{
	json_t *rd = get(pred, "runDetails"), *b = get(rd, "builder"), *md = get(rd, "metadata");
	json_t *att, *led, *v;
	const char *id = gets(b, "id"), *s0 = gets(md, "startedOn"), *s1 = gets(md, "finishedOn");

	if (!id || strncmp(id, PROV_BUILDER_PREFIX, strlen(PROV_BUILDER_PREFIX)) ||
	    !id[strlen(PROV_BUILDER_PREFIX)])
		fail(fails, "runDetails.builder.id", "missing, or not %sHOST", PROV_BUILDER_PREFIX);
	else
		json_object_set_new(out, "builder", json_pack("{s:s}", "id", id));
	if (!json_is_string(get(md, "invocationId")))
		fail(fails, "runDetails.metadata.invocationId", "missing or not a string");
	else
		json_object_set_new(out, "invocationId", copy(get(md, "invocationId")));
	if (iso_parse(s0) < 0 || iso_parse(s1) < 0)
		fail(fails, "runDetails.metadata", "startedOn or finishedOn missing or not YYYY-MM-DDTHH:MM:SSZ");
	else if (strcmp(s0, s1) > 0)
		fail(fails, "runDetails.metadata.finishedOn", "before startedOn");
	else if (json_object_set_new(out, "startedOn", json_string(s0)) == 0)
		json_object_set_new(out, "finishedOn", json_string(s1));
	v = get(md, "isopod_exit");
	json_object_set_new(out, "exit", json_is_object(v) ? copy(v) : json_null());
	v = get(md, "isopod_timings");
	json_object_set_new(out, "timings", json_is_object(v) ? copy(v) : json_null());
	led = named(get(rd, "byproducts"), "egress-ledger");
	json_object_set_new(out, "ledger", led && sha_of(led) ?
			    json_pack("{s:s}", "sha256", sha_of(led)) : json_null());
	att = named(get(b, "builderDependencies"), "host-attestation");
	if (att && !sha_of(att))
		fail(fails, "runDetails.builder.builderDependencies", "host-attestation has no digest.sha256");
	json_object_set_new(out, "attestation", att && sha_of(att) ?
		json_pack("{s:s, s:b, s:o, s:o}", "sha256", sha_of(att),
			  "valid", json_is_true(get(get(att, "annotations"), "isopod_valid")),
			  "keyId", copy(get(get(att, "annotations"), "isopod_keyId")),
			  "sequence", copy(get(get(att, "annotations"), "isopod_sequence")))
		: json_null());
}

json_t *prov_read(json_t *stmt, const char *sha, json_t *fails)
{
	json_t *out = json_pack("{s:n, s:n, s:n, s:n}", "subject", "builder", "buildType",
				"invocationId");
	json_t *pred = get(stmt, "predicate"), *bd = get(pred, "buildDefinition"), *acc;

	if (!out)
		return NULL;
	if (!json_is_object(stmt)) {
		fail(fails, "payload", "not a JSON object");
		return out;
	}
	if (!json_is_string(get(stmt, "_type")) || strcmp(gets(stmt, "_type"), PROV_STATEMENT_TYPE))
		fail(fails, "_type", "not %s", PROV_STATEMENT_TYPE);
	if (!json_is_string(get(stmt, "predicateType")) ||
	    strcmp(gets(stmt, "predicateType"), PROV_PREDICATE_TYPE))
		fail(fails, "predicateType", "not %s", PROV_PREDICATE_TYPE);
	read_subject(stmt, sha, out, fails);
	if (!json_is_object(bd)) {
		fail(fails, "predicate.buildDefinition", "missing or not an object");
	} else {
		if (!json_is_string(get(bd, "buildType")) || strcmp(gets(bd, "buildType"), PROV_BUILD_TYPE))
			fail(fails, "buildType", "not %s (another builder's provenance)", PROV_BUILD_TYPE);
		else
			json_object_set_new(out, "buildType", json_string(PROV_BUILD_TYPE));
		read_external(bd, out, fails);
		read_deps(bd, out, fails);
		acc = get(get(bd, "internalParameters"), "accelerator");
		json_object_set_new(out, "accelerator", json_is_object(acc) ? copy(acc) : json_null());
	}
	read_run(pred, out, fails);
	return out;
}

/* Each entry of list named top/PATH, as {PATH: what(entry)} into out; a
 * PATH twice is a failure on field. */
static void tree_add(json_t *out, json_t *list, const char *top, const char *field,
		     json_t *(*what)(json_t *e), json_t *fails)
{
	size_t tl = strlen(top), i;
	json_t *e, *w;

	json_array_foreach(list, i, e) {
		const char *n = gets(e, "name");

		if (!n || strncmp(n, top, tl) || n[tl] != '/' || !n[tl + 1])
			continue;
		if (!(w = what(e)))
			fail(fails, field, "%s: recorded without a %s", n,
			     !strcmp(field, "subject") ? "digest.sha256" : "target");
		else if (json_object_get(out, n + tl + 1))
			fail(fails, field, "%s: named twice", n);
		/* malformed: an object all the same, met and refused by the walk */
		json_object_set_new(out, n + tl + 1, w ? w : json_object());
	}
}

static json_t *file_of(json_t *e)
{
	return sha_of(e) ? json_pack("{s:s}", "sha256", sha_of(e)) : NULL;
}

/* A symlink byproduct's target: its isopod_symlink annotation (the base64
 * content as text, both signed), a string without NUL; NULL when not. */
static json_t *link_of(json_t *e)
{
	json_t *t = get(get(e, "annotations"), "isopod_symlink");

	if (!json_is_string(t) || !*json_string_value(t) ||
	    json_string_length(t) != strlen(json_string_value(t)))
		return NULL;
	return json_pack("{s:O}", "target", t);
}

json_t *prov_tree_entries(json_t *stmt, const char *top, json_t *fails)
{
	json_t *out = json_object(), *links = json_array(), *e;
	json_t *byp = get(get(get(stmt, "predicate"), "runDetails"), "byproducts");
	size_t i;

	if (!out || !links) {
		json_decref(out);
		json_decref(links);
		return NULL;
	}
	json_array_foreach(byp, i, e)
		if (json_is_string(get(e, "mediaType")) && !strcmp(gets(e, "mediaType"), "inode/symlink"))
			json_array_append(links, e);
	tree_add(out, get(stmt, "subject"), top, "subject", file_of, fails);
	tree_add(out, links, top, "byproducts", link_of, fails);
	json_decref(links);
	if (json_object_size(out) == 0)
		fail(fails, "subject", "no subject or symlink is named %s/…: not a directory this "
		     "Statement records", top);
	return out;
}

int prov_chain_compare(json_t *have, json_t *want, json_t *fails)
{
	json_t *hl = get(have, "layers"), *wl = get(want, "layers");
	const char *hb = gets(get(have, "base"), "sha256"), *wb = gets(get(want, "base"), "sha256");
	size_t i, n0 = json_array_size(fails);

	if (!hb || !wb || strcmp(hb, wb))
		fail(fails, "chain", "base image %.16s… was signed, %.16s… expected", hb ? hb : "(none)",
		     wb ? wb : "(none)");
	if (json_array_size(hl) != json_array_size(wl))
		fail(fails, "chain", "%zu stage layer(s) signed, %zu expected", json_array_size(hl),
		     json_array_size(wl));
	for (i = 0; i < json_array_size(hl) && i < json_array_size(wl); i++) {
		json_t *h = json_array_get(hl, i), *w = json_array_get(wl, i);
		const char *hs = gets(h, "sha256"), *ws = gets(w, "sha256");

		if (!hs || !ws || strcmp(hs, ws) || !json_equal(get(h, "stage"), get(w, "stage")))
			fail(fails, "chain", "layer %zu: %s (%.16s…) signed, %s (%.16s…) expected", i,
			     gets(h, "stage") ? gets(h, "stage") : "?", hs ? hs : "?",
			     gets(w, "stage") ? gets(w, "stage") : "?", ws ? ws : "?");
	}
	return (int)(json_array_size(fails) - n0);
}

int prov_exit_check(json_t *ex, json_t *fails)
{
	json_t *code = get(ex, "exitCode");

	if (!json_is_integer(code) || json_integer_value(code) != 0 || !json_is_false(get(ex, "timedOut")) ||
	    !json_is_null(get(ex, "signal"))) {
		char c[32];

		if (json_is_integer(code))
			snprintf(c, sizeof c, "%lld", (long long)json_integer_value(code));
		else
			snprintf(c, sizeof c, "missing");
		fail(fails, "exit", "the run did not succeed (exitCode %s%s%s): what it copied out is a "
		     "failed run's (--allow-failed accepts it)", c,
		     json_is_null(get(ex, "signal")) ? "" : ", killed by a signal",
		     json_is_false(get(ex, "timedOut")) ? "" : ", timed out or timedOut missing");
		return 1;
	}
	return 0;
}
