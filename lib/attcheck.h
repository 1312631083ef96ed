/* attcheck.h - "does this host's attestation verify?", asked the one way
 * isopod-runner(8) and isopod-mcp(1) ask it: `isopod-attest verify` run as a
 * process (lib/attest.c's attest_verify behind it; a separate process so
 * that a test can stand a verifier in), bounded in time, its verdict read
 * back and its failures put in one line.  And whether the host requires an
 * attestation of the tools that serve clients (the host config's
 * `require_attestation`).  No die: errors are returned. */
#ifndef ISOPOD_ATTCHECK_H
#define ISOPOD_ATTCHECK_H

#include <jansson.h>
#include <stddef.h>

/* The attestation a host's tools check unless told otherwise
 * (isopod-runner --attestation, isopod-mcp --attestation). */
#define ATTESTATION_DEFAULT "/etc/isopod/attestation.json"
#define ATTCHECK_TIMEOUT_MS 120000

struct attcheck {
	const char *tool;   /* the isopod-attest to run */
	const char *att;    /* the envelope */
	const char *dir;    /* --dir, or NULL */
	const char *pubkey; /* --pubkey, or NULL */
	int timeout_ms;     /* 0: ATTCHECK_TIMEOUT_MS */
};

/* Run `TOOL verify [--dir DIR] [--pubkey FILE] ATT`.  1 when it exits 0
 * with {"valid":true}, why set to ""; 0 otherwise, why saying which subject
 * or field failed ("attestation ATT does not verify: ruleset/nftables: ...";
 * at most four) or how the verifier failed.  *verdict (when verdict is not
 * NULL) gets the verifier's JSON, or NULL. */
int attcheck_verify(const struct attcheck *a, json_t **verdict, char *why, size_t whysz);

/* The host config's `require_attestation` (yes/no, true/false, 1/0; the
 * last line wins; absent: no) from path (ranges_config_path()).  0 with
 * *req set, a missing file being "no"; -1 for a bad value (msg
 * "FILE:LINE: ..."); -2 when the file cannot be read. */
int attcheck_required(const char *path, int *req, char *msg, size_t msz);

#endif
