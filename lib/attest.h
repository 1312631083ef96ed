/* attest.h - isopod's host attestation (isopod-attest(1)) as a library:
 * the key directory, the live host's subjects, signing a doctor's report
 * into a DSSE envelope around an in-toto Statement v1, and verifying one
 * against the live host.  isopod-attest is main and dispatch around it; the
 * runner calls attest_verify before a job.
 *
 * Libraries return errors: every function returns 0 or one of the
 * negative ATTEST_E* classes with a one-line reason in why (what the tool
 * prints after "fatal: "); the caller decides the exit status
 * (isopod-attest: ESYS 111, ENOTFOUND 101, EINPUT 100, EREFUSED 1,
 * ECONFLICT 102).  A few non-fatal findings (a subject that differs, a
 * digest cache ignored) are warned on stderr as they are found. */
#ifndef ISOPOD_ATTEST_H
#define ISOPOD_ATTEST_H

#include <jansson.h>
#include <limits.h>
#include <stddef.h>

#define ATTEST_DEFAULT_DIR "/etc/isopod/attest"
#define ATTEST_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define ATTEST_PREDICATE_TYPE "urn:isopod:predicate:containment:v1"
#define ATTEST_EXPIRES_DEFAULT (24 * 3600)
#define ATTEST_EXPIRES_MAX (30 * 24 * 3600)

enum {
	ATTEST_ESYS = -1,      /* a system call failed, or out of memory */
	ATTEST_ENOTFOUND = -2, /* the key directory, a key, a report or an envelope is missing */
	ATTEST_EINPUT = -3,    /* a malformed report */
	ATTEST_EREFUSED = -4,  /* a well-formed report that must not be signed */
	ATTEST_ECONFLICT = -5  /* keygen over an existing key without force */
};

/* Times as the predicate writes them, exactly YYYY-MM-DDTHH:MM:SSZ (UTC);
 * lib/util.c iso_parse reads them back. */
char *attest_iso(long long t, char buf[32]);
/* The host's id (/etc/machine-id, its first line): what the doctor's
 * report and the signed predicates name.  0, or -1 with errno. */
int attest_machine_id(char out[64]);

/* The key directory (private key, counter, verify state, digest cache):
 * root's alone, mode 0700, no symlink.  Opened once with O_DIRECTORY |
 * O_NOFOLLOW and checked by fstat on that descriptor; every file in it is
 * then reached through the descriptor, so a rename or a symlink swapped in
 * after the check cannot send a read or a write elsewhere. */
struct attest_dir {
	int fd;
	char path[PATH_MAX]; /* as given: what diagnostics name */
};
int attest_dir_open(struct attest_dir *d, const char *path, char *why, size_t whysz);
void attest_dir_close(struct attest_dir *d);

/* The host's signing key (DIR/key, root's 0600): the key pair libsodium
 * signs with.  And a public key: path (root's regular file, not group- or
 * world-writable, no symlink), or NULL for DIR/key.pub.  0 or a class.
 * isopod-provenance signs and verifies with the same keys. */
int attest_load_keypair(const struct attest_dir *d, unsigned char pk[32], unsigned char sk[64],
			char *why, size_t whysz);
int attest_load_pubkey(const struct attest_dir *d, const char *path, unsigned char pk[32],
		       char *why, size_t whysz);

/* ISOPOD_ATTEST_DIR, else ATTEST_DEFAULT_DIR, unless opt names one. */
const char *attest_key_dir(const char *opt);

/* The live subjects: {name, digest:{sha256}, annotations?} in *list, and
 * {subject, why} in *errors for each that cannot be read now (the caller
 * decides whether that is fatal).  The directory's digest cache is used
 * and brought up to date. */
int attest_subjects(const struct attest_dir *d, json_t **list, json_t **errors, char *why,
		    size_t whysz);
/* Warn each of attest_subjects' errors; returns how many there were. */
size_t attest_subjects_warn(json_t *errors);

/* keygen: make dir (0700; its parent 0755) and an Ed25519 key pair in it;
 * *out is isopod-attest keygen's JSON. */
int attest_keygen(const char *dir, int force, json_t **out, char *why, size_t whysz);

/* sign: check rep (a doctor's report: pass, every probe passed with its
 * five steps, this host, recent, its subjects the live ones), take the next
 * sequence number, and sign the Statement.  *env is the DSSE envelope;
 * *info what isopod-attest sign -o summarises. */
struct attest_sign_opts {
	const char *dir;
	long long expires_s;   /* from the report's finish */
	long long max_age_s;   /* how old the report may be */
};
struct attest_signed {
	char key_id[65];
	long long sequence;
	char expires[32];      /* YYYY-MM-DDTHH:MM:SSZ */
	size_t subjects;
};
int attest_sign(const struct attest_sign_opts *o, json_t *rep, json_t **env,
		struct attest_signed *info, char *why, size_t whysz);

/* verify: the envelope against the pinned key and the live host now.
 * Returns 0 with *verdict the JSON isopod-attest verify prints:
 * {valid, key_id, sequence, expires, failures:[{field|subject, why}]}, valid
 * true only when every check ran and passed (then the sequence is recorded
 * in the state file, so an older envelope is refused as a replay).  A
 * negative class with why when the verdict cannot be reached (key
 * directory, pinned key or state not root's, envelope unreadable, lock). */
struct attest_opts {
	const char *dir;        /* the key directory (attest_key_dir) */
	const char *pubkey;     /* NULL: dir/key.pub */
	const char *state;      /* NULL: dir/verified-<key id>.json */
	const char *envelope;   /* a file, or NULL or "-" for standard input */
	const char *envelope_buf; /* else its bytes, read once by the caller, who */
	size_t envelope_len;      /* hashes those same bytes (no second read) */
	long long max_validity_s; /* how far after the report's finish it may expire */
};
int attest_verify(const struct attest_opts *o, json_t **verdict, char *why, size_t whysz);

#endif
