/* job.h - isopod-runner's job files (man isopod-runner.8, JOBS): one JSON
 * object a writer drops into the spool's queue/, read here strictly, then
 * turned into the argv of `isopod run`.  The runner never interprets a
 * job's values beyond their JSON types: the front end checks them (its
 * --check steps, exit 100), so there is one set of rules, not two.
 * No die(): the bytes are untrusted; errors come back as text. */
#ifndef ISOPOD_JOB_H
#define ISOPOD_JOB_H

#include <jansson.h>
#include <stddef.h>

#define JOB_MAX_BYTES (64 * 1024) /* a job file; larger is refused unread */
#define JOB_ARGV_MAX 256          /* words of the command */
#define JOB_LIST_MAX 64           /* allow patterns, env entries */
#define JOB_ID_MAX 100            /* a job's name (its file name without .json) */
#define JOB_WHY_SZ 512

/* A job's name: 1..JOB_ID_MAX of [A-Za-z0-9._-], not starting with '.'
 * (writers' temporary files) nor '-'.  1 when s is one. */
int job_id_ok(const char *s);

/* Parse and check a job file's n bytes: one JSON object (no duplicate key,
 * at most JOB_MAX_BYTES), only the keys below, each of its type:
 *   argv       array of 1..JOB_ARGV_MAX strings, the first non-empty (required)
 *   net, stage, cwd, name, commit_as, stdin   strings
 *   allow      array of at most JOB_LIST_MAX strings
 *   env        object of at most JOB_LIST_MAX strings, keys without '='
 *   timeout_s, vcpus, mem_mib, disk_mib       integers 1..2^31-1
 *   cold, provenance                          booleans
 * The object, or NULL with a reason (naming the key) in why. */
json_t *job_parse(const char *buf, size_t n, char *why, size_t whysz);

/* The job file at path, read as untrusted bytes: a regular file (no
 * symlink, FIFO or device: O_NOFOLLOW, O_NONBLOCK), at most JOB_MAX_BYTES
 * read, then job_parse.  NULL with a reason in why. */
json_t *job_load(const char *path, char *why, size_t whysz);

/* The front end's argv for a parsed job: FRONT run --json-only [options]
 * -- ARGV..., NULL-terminated.  stdin_path: the file holding the job's
 * `stdin` (NULL when it has none); prov_path: where the envelope goes
 * (--provenance) when the job asks for provenance (the runner's choice,
 * never the job's: a job names no host path).  One malloc'd block: free() it.  NULL
 * with errno (ENOMEM). */
char **job_argv(const json_t *job, const char *front, const char *stdin_path, const char *prov_path);

/* `isopod run`'s result: its stdout and stderr excerpts and egress (at most
 * 256 groups a list) are bounded well below this; JSON_MAX_BYTES (1 MiB)
 * is not a bound the front end keeps, and a guest must not turn its
 * job's success into "no result" by being verbose. */
#define RESULT_MAX_BYTES (16u << 20)
/* The front end's result at path (its stdout, written by the runner's
 * worker or by Slurm's node): one JSON object, no duplicate key, within
 * RESULT_MAX_BYTES; NULL otherwise. */
json_t *job_result_load(const char *path);

/* The result of a job whose front end outlived its budget (its timeout
 * plus the runner's grace) and was stopped by the runner: error_kind
 * `timeout`, as a run past its own deadline reports, never `interrupted`
 * (no one asked it to stop; it overran).  res: the front end's result
 * (consumed; NULL when it gave none), kept when it is one (its output so
 * far), ok false, its error after why; else a failure naming rc, its exit
 * status.  NULL when out of memory. */
json_t *job_overrun_result(json_t *res, const char *why, int rc);

#endif
