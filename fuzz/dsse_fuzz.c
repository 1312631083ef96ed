/* dsse_fuzz.c - libFuzzer target for lib/dsse.c, which reads envelopes a
 * verifier did not make: the input as an envelope (through the tools' JSON
 * loader) must never crash dsse_open nor verify with a key that signed
 * nothing; as a payload it must come back byte for byte after sign + open;
 * as base64 it must decode within the bound.  See fuzz/run. */
#include "dsse.h"
#include "util.h"

#include <sodium.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned char seed[32] = { 7 };
	unsigned char pk[32], sk[64], *body = NULL, out[64];
	const char *field, *type;
	char why[256], *s;
	size_t blen, n;
	json_t *env;

	if (sodium_init() < 0)
		abort();
	crypto_sign_seed_keypair(pk, sk, seed);
	if ((env = json_parse((const char *)data, size, 0, why, sizeof why))) {
		/* Nothing signed with sk can be in a fuzzer's input unless it
		 * learnt a signature: an open that succeeds must give a body. */
		if (dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) == 0 && !body)
			abort();
		free(body);
		body = NULL;
		json_decref(env);
	}
	if (!(env = dsse_sign(sk, "k", DSSE_INTOTO_TYPE, data, size)))
		abort();
	if (dsse_open(env, pk, &body, &blen, &type, &field, why, sizeof why) != 0 || blen != size ||
	    (size && memcmp(body, data, size)) || strcmp(type, DSSE_INTOTO_TYPE))
		abort();
	free(body);
	json_decref(env);
	if ((s = malloc(size + 1))) {
		memcpy(s, data, size);
		s[size] = 0;
		if (dsse_b64_decode(s, out, sizeof out, &n) == 0 && n > sizeof out)
			abort();
		free(s);
	}
	return 0;
}
