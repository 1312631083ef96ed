/* slurmjob.h - one job handed to Slurm instead of run here
 * (isopod-runner --backend slurm, man isopod-runner.8 SLURM): `sbatch`
 * of a two-line script that execs the front end's argv as the local
 * backend would run it, its stdout and stderr written by the node into
 * the job's directory (a file system the nodes share), its state read
 * back with `scontrol -o show job`, `scancel` to stop it.  sbatch,
 * scontrol and scancel are Slurm's, found in PATH.  No die(): errors come
 * back as text. */
#ifndef ISOPOD_SLURMJOB_H
#define ISOPOD_SLURMJOB_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct sjob {
	const char *dir;    /* the job's directory: slurm.sh, stdout, stderr.log */
	char *const *argv;  /* the front end's argv */
	char *const *env;   /* NULL or NAME=VALUEs set for sbatch (it exports them) */
	const char *name;   /* the Slurm job's name (-J) */
	const char *net;    /* the job's net mode: filtered and open ask one slot (GRES) */
	const char *prefer; /* NULL, or a node feature the job prefers (--prefer) */
	int cpus;           /* 0, or --cpus-per-task (the VM's vCPUs) */
	long long time_s;   /* 0, or the job's limit in Slurm (--time, whole minutes up) */
	char id[32];        /* set by sjob_submit: Slurm's job id */
};

/* What Slurm says of a job: its state (COMPLETED, RUNNING, ...), the node
 * its batch script ran on ("" before one), the reason, the exit status as
 * one number (its code, or 128+signal), and whether the state is final. */
struct sjob_state {
	char state[32], node[128], reason[128];
	int exit, final;
	int restarts; /* Restarts=: > 0, Slurm requeued it (infra, never a second run reported) */
};

/* Write DIR/slurm.sh and submit it.  0 with j->id set, or -1 with why
 * (sbatch's own words when it refused). */
int sjob_submit(struct sjob *j, char *why, size_t whysz);
/* scontrol -o show job ID into *s.  0, or -1 with why (scontrol failed,
 * or Slurm no longer knows the job: MinJobAge). */
int sjob_poll(const char *id, struct sjob_state *s, char *why, size_t whysz);
/* scancel -- ID (Slurm signals the job's processes, then kills them).
 * scancel's status, or -1 with errno (EINVAL: ID is not all digits, and
 * scancel is not run). */
int sjob_cancel(const char *id);
/* The feature of the local store's stage ref (`isopod-slurm feature` of
 * the tools in dir) into out: 0, or -1 (no such stage here: no preference). */
int sjob_feature(const char *dir, const char *ref, char *out, size_t sz);
/* Submit, then poll every tick until Slurm says the job is final; a
 * signal on sfd (SIGCHLD aside) or mono_ms() past deadline_ms cancels it
 * first, saying why in why (else why is left empty).  The job id goes into
 * the JSON object at state_path ("slurm_job") once known: a runner that
 * finds the job's worker dead cancels it.  0 with *s final, or -1 with why
 * (the submission failed, or scontrol failed for a minute on end: the job
 * is cancelled). */
int sjob_run(struct sjob *j, int sfd, int64_t deadline_ms, const char *state_path, struct sjob_state *s,
	     char *why, size_t whysz);
/* The runner's result for a job sjob_run returned (s NULL: it failed,
 * why says how): the step's own result (res, taken) when Slurm ran it to
 * its end (COMPLETED, FAILED) and it has an "ok", else a failure saying
 * what Slurm did (CANCELLED: interrupted; TIMEOUT, DEADLINE: timeout; the
 * rest, and any job Slurm restarted: infra), never a success; with "slurm": {job_id, node, state, exit}. */
json_t *sjob_result(json_t *res, const struct sjob *j, const struct sjob_state *s, const char *why);

#endif
