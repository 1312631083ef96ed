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
#include <sys/types.h>

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

/* A verification running (attcheck_start), for a caller that must not
 * wait for it (isopod-mcp's poll loop): its process and output. */
struct attcheck_run {
	pid_t pid;
	int out, err;
};

/* Start `TOOL verify [--dir DIR] [--pubkey FILE] ATT` (its parent's death
 * kills it).  0, or -1 with why set and nothing to finish. */
int attcheck_start(const struct attcheck *a, struct attcheck_run *r, char *why, size_t whysz);

/* The verdict of r, whose process ended with wait status st (SIGKILLed by
 * the caller past its time: a failure like any other), as
 * attcheck_verify; r's descriptors are closed. */
int attcheck_finish(const struct attcheck *a, struct attcheck_run *r, int st, json_t **verdict,
		    char *why, size_t whysz);

/* Run `TOOL verify [--dir DIR] [--pubkey FILE] ATT`.  1 when it exits 0
 * with {"valid":true}, why set to ""; 0 otherwise, why saying which subject
 * or field failed ("attestation ATT does not verify: ruleset/nftables: ...";
 * at most four) or how the verifier failed.  *verdict (when verdict is not
 * NULL) gets the verifier's JSON, or NULL. */
int attcheck_verify(const struct attcheck *a, json_t **verdict, char *why, size_t whysz);

/* The host config's `require_attestation` (yes/no, true/false, 1/0; the
 * last line wins; absent: no) from path (ranges_config_path(); read by
 * config_each, lib/config.c).  0 with
 * *req set, a missing file being "no"; -1 for a bad value (msg
 * "FILE:LINE: ..."); -2 when the file cannot be read. */
int attcheck_required(const char *path, int *req, char *msg, size_t msz);

#endif
