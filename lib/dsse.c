/* dsse.c - DSSE v1 envelopes with Ed25519 (see dsse.h). */
#include "dsse.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

unsigned char *dsse_pae(const char *type, size_t tlen, const void *body, size_t blen,
			size_t *len)
{
	char head[64], mid[32];
	int hn = snprintf(head, sizeof head, "DSSEv1 %zu ", tlen);
	int mn = snprintf(mid, sizeof mid, " %zu ", blen);
	size_t n;
	unsigned char *p;

	if (hn < 0 || mn < 0 || (size_t)hn >= sizeof head || (size_t)mn >= sizeof mid)
		return NULL;
	n = (size_t)hn + tlen + (size_t)mn + blen;
	if (!(p = malloc(n ? n : 1)))
		return NULL;
	memcpy(p, head, (size_t)hn);
	memcpy(p + hn, type, tlen);
	memcpy(p + hn + tlen, mid, (size_t)mn);
	if (blen)
		memcpy(p + hn + tlen + mn, body, blen);
	*len = n;
	return p;
}

void dsse_keyid(const unsigned char pk[DSSE_PK_BYTES], char out[65])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, pk, DSSE_PK_BYTES);
	sodium_bin2hex(out, 65, h, sizeof h);
}

static json_t *b64_json(const void *p, size_t n)
{
	size_t sz = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(sz);
	json_t *j;

	if (!s)
		return NULL;
	sodium_bin2base64(s, sz, p, n, sodium_base64_VARIANT_ORIGINAL);
	j = json_string(s);
	free(s);
	return j;
}

json_t *dsse_sign(const unsigned char sk[DSSE_SK_BYTES], const char *keyid, const char *type,
		  const void *body, size_t blen)
{
	unsigned char sig[crypto_sign_BYTES];
	size_t plen;
	unsigned char *pae = dsse_pae(type, strlen(type), body, blen, &plen);
	json_t *env;

	if (!pae)
		return NULL;
	crypto_sign_detached(sig, NULL, pae, plen, sk);
	free(pae);
	/* The member order of envelope.md; json_pack keeps it (jansson >= 2.8
	 * preserves insertion order), so the bytes are reproducible. */
	env = json_pack("{s:o, s:s, s:[{s:s, s:o}]}", "payload", b64_json(body, blen),
			"payloadType", type, "signatures", "keyid", keyid, "sig",
			b64_json(sig, sizeof sig));
	return env;
}

int dsse_b64_decode(const char *s, unsigned char *out, size_t max, size_t *len)
{
	static const int variants[] = {
		sodium_base64_VARIANT_ORIGINAL, sodium_base64_VARIANT_URLSAFE,
		sodium_base64_VARIANT_ORIGINAL_NO_PADDING, sodium_base64_VARIANT_URLSAFE_NO_PADDING,
	};
	size_t i, n = strlen(s);
	const char *end;

	for (i = 0; i < sizeof variants / sizeof *variants; i++)
		if (sodium_base642bin(out, max, s, n, NULL, len, &end, variants[i]) == 0 &&
		    end == s + n)
			return 0;
	return -1;
}

int dsse_open(json_t *env, const unsigned char pk[DSSE_PK_BYTES], unsigned char **body,
	      size_t *blen, const char **type, const char **field, char *why, size_t whysz)
{
	json_t *jp = json_object_get(env, "payload"), *jt = json_object_get(env, "payloadType");
	json_t *js = json_object_get(env, "signatures"), *s;
	unsigned char *b = NULL, *pae = NULL, sig[crypto_sign_BYTES + 1];
	size_t n, max, plen, i, siglen, good = 0;

	*body = NULL;
	if (!json_is_object(env)) {
		*field = "envelope";
		snprintf(why, whysz, "not a JSON object");
		return -1;
	}
	if (!json_is_string(jp)) {
		*field = "payload";
		snprintf(why, whysz, "missing or not a string");
		return -1;
	}
	if (!json_is_string(jt)) {
		*field = "payloadType";
		snprintf(why, whysz, "missing or not a string");
		return -1;
	}
	if (!json_is_array(js) || json_array_size(js) == 0) {
		*field = "signatures";
		snprintf(why, whysz, "missing, not an array, or empty");
		return -1;
	}
	max = json_string_length(jp) / 4 * 3 + 3;
	if (!(b = malloc(max + 1))) {
		*field = "payload";
		snprintf(why, whysz, "out of memory");
		return -1;
	}
	if (dsse_b64_decode(json_string_value(jp), b, max, &n) < 0) {
		*field = "payload";
		snprintf(why, whysz, "not base64");
		free(b);
		return -1;
	}
	b[n] = 0;
	if (!(pae = dsse_pae(json_string_value(jt), json_string_length(jt), b, n, &plen))) {
		*field = "payload";
		snprintf(why, whysz, "out of memory");
		free(b);
		return -1;
	}
	json_array_foreach(js, i, s) {
		json_t *sg = json_object_get(s, "sig");

		if (!json_is_string(sg) ||
		    dsse_b64_decode(json_string_value(sg), sig, sizeof sig, &siglen) < 0 ||
		    siglen != crypto_sign_BYTES)
			continue;
		if (crypto_sign_verify_detached(sig, pae, plen, pk) == 0) {
			good = 1;
			break;
		}
	}
	free(pae);
	if (!good) {
		char id[65];

		dsse_keyid(pk, id);
		*field = "signatures";
		snprintf(why, whysz, "no signature verifies with the pinned key %.16s…", id);
		free(b);
		return -1;
	}
	*body = b;
	*blen = n;
	*type = json_string_value(jt);
	return 0;
}
