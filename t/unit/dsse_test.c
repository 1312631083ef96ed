/* dsse_test.c - lib/dsse.c: PAE byte for byte as the DSSE spec defines it
 * (its own test vector), the golden envelope (t/attest/golden, made by an
 * independent implementation, t/attest/dsse.py), and refusals. */
#include "../../lib/dsse.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <string.h>

#include "tap.h"

static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *b = malloc(1 << 16);
	size_t r;

	if (!f || !b) {
		if (f)
			fclose(f);
		free(b);
		return NULL;
	}
	r = fread(b, 1, (1 << 16) - 1, f);
	fclose(f);
	b[r] = 0;
	*n = r;
	return b;
}

static int pae_is(const char *type, const char *body, const char *want)
{
	size_t n;
	unsigned char *p = dsse_pae(type, strlen(type), body, strlen(body), &n);
	int r = p && n == strlen(want) && !memcmp(p, want, n);

	free(p);
	return r;
}

int main(void)
{
	unsigned char seed[32], pk[32], sk[64], pk2[32], sk2[64], *body = NULL;
	char *seedhex, *stmt, *golden, *got, id[65], why[256];
	const char *field = NULL, *type = NULL;
	size_t n, sn, gn, blen;
	json_t *env, *s0;

	if (sodium_init() < 0)
		return 1;
	ok(pae_is("http://example.com/HelloWorld", "hello world",
		  "DSSEv1 29 http://example.com/HelloWorld 11 hello world"),
	   "PAE: the spec's test vector");
	ok(pae_is("", "", "DSSEv1 0  0 "), "PAE: empty type and body");
	ok(pae_is(DSSE_INTOTO_TYPE, "{}", "DSSEv1 28 application/vnd.in-toto+json 2 {}"),
	   "PAE: the in-toto type, lengths in decimal without leading zeros");

	seedhex = slurp("t/attest/golden/seed", &n);
	stmt = slurp("t/attest/golden/statement.json", &sn);
	golden = slurp("t/attest/golden/envelope.json", &gn);
	if (!seedhex || !stmt || !golden || sodium_hex2bin(seed, 32, seedhex, 64, NULL, &n, NULL)) {
		ok(0, "golden vector files readable (run from the source root)");
		return tap_done();
	}
	crypto_sign_seed_keypair(pk, sk, seed);
	dsse_keyid(pk, id);
	ok(!strcmp(id, "21fe31dfa154a261626bf854046fd2271b7bed4b6abe45aa58877ef47f9721b9"),
	   "key id = sha256 of the raw public key (RFC 8032 test 1 key): %s", id);
	env = dsse_sign(sk, id, DSSE_INTOTO_TYPE, stmt, sn);
	got = json_dumps(env, JSON_COMPACT);
	ok(got && strlen(got) + 1 == gn && !memcmp(got, golden, gn - 1) && golden[gn - 1] == '\n',
	   "golden: fixed key + fixed payload give the committed envelope byte for byte");
	free(got);

	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) == 0 && blen == sn &&
		   !memcmp(body, stmt, sn) && !strcmp(type, DSSE_INTOTO_TYPE),
	   "open: the payload comes back after the signature verified");
	free(body);
	body = NULL;

	crypto_sign_seed_keypair(pk2, sk2, (unsigned char[32]){ 1 });
	ok(dsse_open(env, pk2, &body, &blen, &type, &field, why, sizeof why) < 0 && !body &&
		   !strcmp(field, "signatures"),
	   "open: another key is refused, naming signatures (%s)", why);

	/* The payloadType is authenticated: swapping it breaks the signature. */
	json_object_set_new(env, "payloadType", json_string("application/json"));
	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) < 0 &&
		   !strcmp(field, "signatures"),
	   "open: a swapped payloadType fails the signature");
	json_object_set_new(env, "payloadType", json_string(DSSE_INTOTO_TYPE));

	/* URL-safe base64 without padding is the same signature (a verifier
	 * MUST accept either encoding). */
	s0 = json_array_get(json_object_get(env, "signatures"), 0);
	{
		char *sg = strdup(json_string_value(json_object_get(s0, "sig"))), *c;

		for (c = sg; *c; c++)
			*c = *c == '+' ? '-' : *c == '/' ? '_' : *c;
		while (c > sg && c[-1] == '=')
			*--c = 0;
		json_object_set_new(s0, "sig", json_string(sg));
		free(sg);
	}
	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) == 0,
	   "open: URL-safe unpadded base64 accepted");
	free(body);
	body = NULL;

	json_object_set_new(s0, "sig", json_string("not base64!"));
	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) < 0 &&
		   !strcmp(field, "signatures"),
	   "open: a sig that is not base64 verifies nothing");
	json_object_set_new(env, "payload", json_string("%%%"));
	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) < 0 &&
		   !strcmp(field, "payload"),
	   "open: a payload that is not base64 is refused, naming payload");
	json_object_del(env, "signatures");
	ok(dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) < 0 &&
		   !strcmp(field, "signatures"),
	   "open: no signatures is refused");
	json_decref(env);
	free(seedhex);
	free(stmt);
	free(golden);
	return tap_done();
}
