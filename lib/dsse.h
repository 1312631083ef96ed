/* dsse.h - DSSE v1 envelopes (github.com/secure-systems-lab/dsse, protocol.md
 * and envelope.md) signed with Ed25519 (libsodium).  Libraries return errors:
 * nothing here exits.  The caller has called sodium_init(). */
#ifndef ISOPOD_DSSE_H
#define ISOPOD_DSSE_H

#include <jansson.h>
#include <stddef.h>

#define DSSE_INTOTO_TYPE "application/vnd.in-toto+json"
#define DSSE_PK_BYTES 32
#define DSSE_SEED_BYTES 32
#define DSSE_SK_BYTES 64

/* PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, LEN
 * in ASCII decimal without leading zeros.  Malloc'd, its length in *len;
 * NULL when out of memory. */
unsigned char *dsse_pae(const char *type, size_t tlen, const void *body, size_t blen,
			size_t *len);

/* The key id: lower-case hex sha256 of the 32 raw public key bytes. */
void dsse_keyid(const unsigned char pk[DSSE_PK_BYTES], char out[65]);

/* The JSON envelope {"payload","payloadType","signatures":[{"keyid","sig"}]}
 * (payload and sig in standard base64 with padding) over body, signed with
 * sk (libsodium's 64-byte secret key).  New reference, or NULL (ENOMEM). */
json_t *dsse_sign(const unsigned char sk[DSSE_SK_BYTES], const char *keyid, const char *type,
		  const void *body, size_t blen);

/* Verify env against pk as the protocol says: decode (standard or URL-safe
 * base64, padded or not), then some signature must verify over PAE; only
 * then is the body handed out (malloc'd, *blen; NUL-terminated for
 * convenience) with *type pointing into env.  The keyid is a hint only and
 * never decides anything.  0, or -1 with the failing field ("envelope",
 * "payload", "payloadType", "signatures") in *field and the reason in why. */
int dsse_open(json_t *env, const unsigned char pk[DSSE_PK_BYTES], unsigned char **body,
	      size_t *blen, const char **type, const char **field, char *why, size_t whysz);

/* Decode base64 in any of the four forms DSSE verifiers must accept.  0, or
 * -1 (not base64, or longer than max). */
int dsse_b64_decode(const char *s, unsigned char *out, size_t max, size_t *len);

#endif
