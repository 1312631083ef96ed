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

/* What a runner remembers of the host changing under its attestation
 * (isopod-runner(8) FRESHNESS), kept across restarts in a file of its
 * spool: {"sequence": N, "seen": "YYYY-MM-DDTHH:MM:SSZ"[, "after": ...]}. */
struct attstale {
	long long seq;  /* the highest sequence that failed on a subject; 0 none */
	char seen[32];  /* the latest time (the runner's clock) a subject failure was seen; "" never */
	char after[32]; /* the latest signed predicate.finished (the doctor's clock) of an
			 * attestation that failed on a subject; "" not said (older records) */
};

/* The highest sequence the signer writes (lib/attest.c): 2^53-1. */
#define ATTSTALE_SEQ_MAX 9007199254740991LL
/* seen when the runner's clock could not say when (not a time): later than
 * any doctor run, so nothing resumes until the record is removed by hand. */
#define ATTSTALE_NEVER "9999-12-31T23:59:59Z"

/* Read the record at path: 0 with *s set (a missing file: nothing seen),
 * -1 with why when it cannot be read or is not such a record (the caller
 * fails closed: it must not forget).  Opened without following a symlink
 * and without blocking (a FIFO); it must be a regular file, of one object
 * with sequence (an integer 0..2^53-1), seen (a real UTC time to the
 * second) and optionally after (the same), nothing else. */
int attstale_load(const char *path, struct attstale *s, char *why, size_t whysz);

/* Write it atomically (temporary file, fsync, rename, fsync of the
 * directory).  0, or -1 with errno. */
int attstale_save(const char *path, const struct attstale *s);

/* Another record's marks into `into` (the highest sequence, the latest
 * seen and after): what two readers of one file each saw.  1 when into
 * changed. */
int attstale_merge(struct attstale *into, const struct attstale *from);

/* After a verification whose verdict (isopod-attest verify's JSON, may be
 * NULL) said *valid: a failed subject marks s (the highest sequence, the
 * latest of seen and now -- ATTSTALE_NEVER when now is not a time -- and
 * the latest of after and the verdict's signed "finished"); a valid verdict
 * after a mark stays valid only when fresh: a sequence above s->seq and a
 * doctor run (the verdict's "started") that began after s->seen and after
 * s->after; else *valid becomes 0 and why says so.  1 when s changed (to be
 * saved), else 0. */
int attstale_apply(struct attstale *s, json_t *verdict, int *valid, const char *att, const char *now,
		   char *why, size_t whysz);

/* The host config's `require_attestation` (yes/no, true/false, 1/0; the
 * last line wins; absent: no) from path (ranges_config_path(); read by
 * config_each, lib/config.c).  0 with
 * *req set, a missing file being "no"; -1 for a bad value (msg
 * "FILE:LINE: ..."); -2 when the file cannot be read. */
int attcheck_required(const char *path, int *req, char *msg, size_t msz);

#endif
