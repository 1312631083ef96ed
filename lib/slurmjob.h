/* slurmjob.h - one job handed to Slurm instead of run here
 * (isopod-runner --backend slurm, man isopod-runner.8 SLURM): `sbatch
 * --export=NONE` (nothing of the caller's environment reaches the job)
 * of a two-line script that execs the front end's argv as the local
 * backend would run it, its stdout and stderr written by the node into
 * the job's directory (a file system the nodes share), its state read
 * back with `scontrol -o show job`, `scancel` to stop it.  sbatch,
 * scontrol and scancel are Slurm's, found in PATH, each killed (SIGKILL,
 * its process group) past SJOB_CMD_MS, 30 s: a slurmctld that does not
 * answer makes an error that names the command, never a hung worker.  No
 * die(): errors come back as text. */
#ifndef ISOPOD_SLURMJOB_H
#define ISOPOD_SLURMJOB_H

#include <jansson.h>
#include <stddef.h>

/* each sbatch, scontrol, scancel (and isopod-slurm's own scontrol): killed
 * past it */
#ifndef SJOB_CMD_MS
#define SJOB_CMD_MS 30000
#endif
#include <stdint.h>

struct sjob {
	const char *dir;    /* the job's directory: slurm.sh, stdout, stderr.log */
	char *const *argv;  /* the front end's argv */
	const char *name;   /* the Slurm job's name (-J) */
	const char *net;    /* the job's net mode: filtered and open ask one slot (GRES) */
	const char *prefer; /* NULL, or a node feature the job prefers (--prefer) */
	int cpus;           /* 0, or --cpus-per-task (the VM's vCPUs) */
	long long mem_mib;  /* 0, or --mem in MiB (the VM's memory: QEMU's own is on top) */
	long long time_s;   /* 0, or the job's limit in Slurm (--time, whole minutes up) */
	char id[32];        /* set by sjob_submit: Slurm's job id */
	/* sjob_run's bounds besides its deadline_ms (added for issue 16's
	 * review: a job's time in Slurm's queue is not its run's) */
	int64_t run_ms;     /* 0, or the budget counted from when Slurm starts the job
			       (now - RunTime): past it, cancelled ("outlived its budget") */
	int64_t queue_ms;   /* 0, or how long it may wait in Slurm's queue (PENDING):
			       past it, cancelled, s->queue_timeout set */
	int cancel_returns; /* 1: a signal's scancel that succeeded ends sjob_run (-1)
			       without waiting for Slurm's final state (isopod-slurm
			       run: its caller SIGKILLs it soon; its cleanup must run) */
	int progress_fd;    /* > 0: sjob_run writes a line there at each change of what
			       Slurm says of the job ("Slurm job ID: STATE[ on NODE][
			       (REASON)]"; isopod-slurm run: isopod-mcp's progress);
			       0: none */
};

/* What Slurm says of a job: its state (COMPLETED, RUNNING, ...), the node
 * its batch script ran on ("" before one), the reason, the exit status as
 * one number (its code, or 128+signal), and whether the state is final. */
struct sjob_state {
	char state[32], node[128], reason[128];
	int exit, final;
	int restarts; /* Restarts=: > 0, Slurm requeued it (infra, never a second run reported) */
	long long run_s;    /* RunTime= in seconds (Slurm's now - StartTime, suspended time
			       aside): 0 before it starts, -1 when not given */
	int64_t queued_ms;  /* sjob_run: sbatch to Slurm's start (or to the end: never started) */
	int queue_timeout;  /* sjob_run: 1, it cancelled the job for waiting past j->queue_ms */
	int budget_timeout; /* sjob_run: 1, it cancelled the job past deadline_ms or j->run_ms
			       (sjob_result: timeout, as a local run's own deadline) */
};

struct proc_spec;
/* Slurm's environment for ps (sbatch, scontrol, scancel): the caller's
 * less every variable that sets one of their options (SBATCH_*,
 * SCANCEL_*, SCONTROL_*) and every SLURM_* but SLURM_CONF (which
 * slurm.conf: where the controller is); conf (two entries) holds the
 * caller's SLURM_CONF entry that ps->env then points at. */
void sjob_env(struct proc_spec *ps, char *conf[2]);
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
/* scancel --name=NAME --user=EUID: the job of a submission whose id never
 * came back (sbatch killed past SJOB_CMD_MS; the name is the job
 * directory's, unique).  Same return as sjob_cancel_why, why set when it
 * did not exit 0; -1 EINVAL for an empty name or one with a ','. */
int sjob_cancel_name(const char *name, char *why, size_t whysz);
/* sjob_cancel, and when scancel did not exit 0 (refused, failed, hung and
 * killed past SJOB_CMD_MS: -1 ETIMEDOUT), why names the job and scancel's
 * words.  Same return as sjob_cancel. */
int sjob_cancel_why(const char *id, char *why, size_t whysz);
/* A job whose worker is gone: cancel the Slurm job the JSON object at
 * state_path names ("slurm_job", as sjob_run writes it).  0: none named,
 * or scancel took it, or Slurm says it has ended; -1 with why (scancel's
 * error, naming the job): it may still be running. */
int sjob_abandon(const char *state_path, char *why, size_t whysz);
/* The feature of the local store's stage ref (`isopod-slurm feature` of
 * the tools in dir) into out: 0, or -1 (no such stage here: no preference). */
int sjob_feature(const char *dir, const char *ref, char *out, size_t sz);
/* Submit, then poll until Slurm says the job is final: every second,
 * the gap doubling to 10 s while its state stays the same, back to 1 s
 * when it changes (a 30 s job: 7 scontrol calls).  A signal on sfd
 * (SIGCHLD aside), mono_ms() past deadline_ms (INT64_MAX: none), j->run_ms
 * past Slurm's start or j->queue_ms in the queue cancels it first (each
 * bound after one more scontrol: the job may have moved on), saying why in
 * why (else why is left empty); a failed scancel is tried again at each
 * poll, and named in why if the job is still not final 120 s on.  The job id goes into
 * the JSON object at state_path ("slurm_job") once known: a runner that
 * finds the job's worker dead cancels it.  0 with *s final, or -1 with why
 * (the submission failed, or scontrol failed for a minute on end: the job
 * is cancelled). */
int sjob_run(struct sjob *j, int sfd, int64_t deadline_ms, const char *state_path, struct sjob_state *s,
	     char *why, size_t whysz);
/* The runner's result for a job sjob_run returned (s NULL: it failed,
 * why says how): the step's own result (res, taken) when Slurm ran it to
 * its end (COMPLETED, FAILED) and it has an "ok", else a failure saying
 * what Slurm did (CANCELLED: interrupted, or queue_timeout when sjob_run
 * cancelled it in the queue, or timeout when it cancelled it past its
 * budget; TIMEOUT, DEADLINE: timeout; the rest, and any
 * job Slurm restarted: infra), never a success; with "slurm": {job_id,
 * node, state, exit, and, given s, queued_s and run_s}. */
json_t *sjob_result(json_t *res, const struct sjob *j, const struct sjob_state *s, const char *why);

#endif
