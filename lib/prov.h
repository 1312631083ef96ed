/* prov.h - provenance for what a run copied out (isopod-provenance(1)):
 * an in-toto Statement v1 whose predicate is SLSA provenance v1
 * (https://slsa.dev/provenance/v1), in a DSSE envelope signed with the
 * host's attestation key (lib/dsse.c, lib/attest.c).
 *
 * This is the part that needs no store, key or host: the reader of a
 * Statement that a verifier did not make (after its signature held, but the
 * signer may be another host, or a key the verifier was handed), and the
 * comparison of its chain with the one a verifier expects.  Pure: no exit,
 * no I/O; t/unit/prov_test.c and fuzz/prov_fuzz.c drive it. */
#ifndef ISOPOD_PROV_H
#define ISOPOD_PROV_H

#include <jansson.h>

#define PROV_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define PROV_PREDICATE_TYPE "https://slsa.dev/provenance/v1"
/* The template a run follows, documented in isopod-provenance(1). */
#define PROV_BUILD_TYPE "urn:isopod:buildtype:run:v1"
/* builder.id = this prefix + the host's /etc/machine-id. */
#define PROV_BUILDER_PREFIX "urn:isopod:builder:"

/* Dependency names (resolvedDependencies[].name): the kernel's two files,
 * the base image ("image/" + flavor), each stage layer ("stage/" + id, root
 * first), each copy-in ("copy-in:" + guest path). */
#define PROV_DEP_VMLINUX "kernel/vmlinux"
#define PROV_DEP_INITRAMFS "kernel/initramfs"

/* Read a Statement for an artifact whose sha256 is sha (64 lower-case
 * hex; NULL: a directory's Statement, whose entries prov_tree_entries
 * names, subject then null).  Every check runs; each failure is appended to fails as
 * {field, why}.  Returns what the Statement says (a new object, also when
 * there are failures: the fields it could read):
 *   {subject:{name,digest}|null, builder:{id}, buildType, invocationId,
 *    startedOn, finishedOn, command, envNames, cwd, stage, stdin, network:{mode,
 *    allow}, chain:{kernel:{vmlinux,initramfs}, base:{flavor,sha256},
 *    layers:[{stage,sha256}]}, ledger:{sha256}|null, accelerator, exit,
 *    timings, attestation:{sha256,valid,keyId,sequence}|null}
 * NULL only when out of memory. */
json_t *prov_read(json_t *stmt, const char *sha, json_t *fails);

/* What a Statement records of a directory copied out as top (its name on
 * the host): {PATH: {sha256}} for each subject named top/PATH, {PATH:
 * {target}} for each byproduct of mediaType inode/symlink so named (its
 * isopod_symlink).  A name recorded twice, one without its digest or
 * target, or no entry at all is a failure (field "subject" or
 * "byproducts").  A new object; NULL only when out of memory. */
json_t *prov_tree_entries(json_t *stmt, const char *top, json_t *fails);

/* externalParameters.stdin when the run's stdin was a pipe the front end
 * forwarded as it streamed: its bytes are not recorded (a file's are:
 * {sha256, bytes}; no stdin is null). */
#define PROV_STDIN_PIPE "pipe, not recorded"

/* The run succeeded: exit (prov_read's "exit", isopod_exit as signed) says
 * exitCode 0, no signal, timedOut false.  Otherwise one failure on field
 * "exit" is appended and 1 returned (a failed or timed-out run's copied-out
 * files are signed, so that the record exists, but do not verify unless
 * the caller accepts a failed run). */
int prov_exit_check(json_t *ex, json_t *fails);

/* Compare a chain prov_read returned with the one expected ({base:{flavor,
 * sha256}, layers:[{stage,sha256}]}, the same shape): each difference is a
 * failure on field "chain".  Returns how many were added. */
int prov_chain_compare(json_t *have, json_t *want, json_t *fails);

#endif
