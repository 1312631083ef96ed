/* isopod-runner - run jobs from a spool directory without a person
 * watching, and only while this host's containment attestation verifies.
 *
 *   SPOOL/queue/NAME.json       a writer writes a job elsewhere, then renames it here
 *   SPOOL/running/NAME/         claimed: job.json, lock (flock held by its worker),
 *                               state.json once started, stdout, stderr.log
 *   SPOOL/{done,failed,interrupted}/NAME/   the same directory, moved whole,
 *                               with result.json (`isopod run`'s result shape)
 *   SPOOL/status.json           what the runner does and why (paused: which
 *                               subject or field of the attestation failed)
 *   SPOOL/stale.json            the host changed under an attestation: the
 *                               sequence and when (lib/attcheck.c attstale)
 *
 * A job runs as `isopod run` (the front end the attestation covers, beside
 * this program), one worker process per job, at most --workers at once.
 * `isopod-attest verify` runs at start (refused: exit 111), before every
 * job and every --recheck-s; while it fails no job is taken.  Every state
 * change is a rename, so a SIGKILL anywhere leaves each job queued,
 * running under a live lock, or in a final state; a running/ job whose lock
 * is free is settled at once: requeued when it never started, interrupted
 * (at most once: a job may have effects) when it did.  man isopod-runner. */
#include "attcheck.h"
#include "job.h"
#include "proc.h"
#include "slurmjob.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-runner [--spool DIR] [--workers N] [--attestation FILE] " \
	      "[--attest-dir DIR] [--pubkey FILE] [--recheck-s N] [--net-max MODE] [--backend local|slurm] " \
	      "[--queue-timeout-s N]"
#define SPOOL_DEFAULT "/var/spool/isopod"
#define WORKERS_MAX 64
#define RECHECK_DEFAULT 60
#define VERIFY_TIMEOUT_MS 120000
/* The front end enforces a job's budget itself; past it by this much, a
 * worker stops a front end that hangs (SIGTERM, then SIGKILL). */
#define BUDGET_DEFAULT_S 86400
#define GRACE_S 120
/* --backend slurm: how long a job may wait in Slurm's queue (its budget
 * runs from Slurm's start) */
#define QUEUE_DEFAULT_S 3600
#define STOP_GRACE_MS 20000
#define TICK_MS 1000
#define DNAME_MAX (JOB_ID_MAX + 24)

static const char *const final_states[] = { "done", "failed", "interrupted" };
/* --net-max: net modes by how much they let out */
static const char *const nets[] = { "none", "filtered", "open" };

struct slot {
	pid_t pid;   /* 0: free; -1: its worker died, its front end is stopping */
	pid_t front; /* then: the front end (its process group) */
	int64_t kill_at;
	char dname[DNAME_MAX], why[64]; /* why: how its worker died */
};

struct runner {
	char spool[PATH_MAX], attest[PATH_MAX], front[PATH_MAX], tools[PATH_MAX], att_base[NAME_MAX + 1];
	const char *att, *att_dir, *pubkey;
	int workers, recheck_s, busy, draining, valid, sfd, ifd, wd_att, spool_lock;
	int net_max; /* index in nets */
	int slurm;   /* --backend slurm: jobs go to sbatch, the attestation is each node's */
	long long queue_s; /* --queue-timeout-s */
	pid_t pid;
	struct slot *slots;
	const char *state;
	char reason[2048];
	json_t *verdict; /* isopod-attest verify's last JSON, or NULL */
	char checked[32];
	int64_t next_check;
	int64_t hold_until; /* no job taken before: a worker just died */
	struct attstale stale; /* SPOOL/stale.json: the host changed under an attestation */
};

/* Tests kill the runner or a worker at a given step: ISOPOD_TEST_KILL_AT. */
static void test_point(const char *name)
{
	const char *k = getenv("ISOPOD_TEST_KILL_AT");

	if (name && k && !strcmp(k, name))
		raise(SIGKILL);
}

static void fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* SPOOL/<rel>: every path of the runner is under its spool; too long is
 * refused at start (the longest name is checked there). */
__attribute__((format(printf, 3, 4))) static char *sp(const struct runner *r, char buf[PATH_MAX],
							 const char *fmt, ...)
{
	char rel[PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof rel, fmt, ap);
	va_end(ap);
	if (pathn(buf, PATH_MAX, "%s/%s", r->spool, rel) < 0)
		buf[0] = 0;
	return buf;
}

static int exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

/* ---- status ------------------------------------------------------------ */

static void status_write(struct runner *r)
{
	char p[PATH_MAX], now[32];
	json_t *run = json_array(), *st;
	int i;

	for (i = 0; run && i < r->workers; i++)
		if (r->slots[i].pid)
			json_array_append_new(run, json_string(r->slots[i].dname));
	st = json_pack("{s:i, s:s, s:s?, s:s, s:{s:i, s:i}, s:o, s:s, s:o}",
		       "pid", (int)r->pid, "state", r->state, "reason", r->reason[0] ? r->reason : NULL,
		       "updated", iso_now(now, sizeof now), "workers", "max", r->workers, "busy",
		       r->busy, "running", run ? run : json_array(), "backend", r->slurm ? "slurm" : "local",
		       "attestation", r->slurm ? json_null() /* each node's: isopod-slurm refresh */ :
		       json_pack("{s:s, s:b, s:s?, s:O?}", "path", r->att, "valid", r->valid, "checked",
				 r->checked[0] ? r->checked : NULL, "verify", r->verdict));
	if (!st || json_write_atomic(sp(r, p, "status.json"), st) < 0)
		warn("unable to write %s: %s", p, strerror(errno));
	json_decref(st);
}

static void set_state(struct runner *r, const char *state, const char *reason)
{
	if (strcmp(r->state, state) || strcmp(r->reason, reason ? reason : ""))
		warn("%s%s%s", state, reason ? ": " : "", reason ? reason : "");
	r->state = state;
	snprintf(r->reason, sizeof r->reason, "%s", reason ? reason : "");
	status_write(r);
}

/* ---- attestation ------------------------------------------------------- */

/* isopod-attest verify of the attestation (lib/attcheck.c), bounded in
 * time.  r->valid, r->verdict and, when it fails, why in r->reason's
 * style into why. */
static int verify(struct runner *r, char *why, size_t whysz)
{
	struct attcheck a = { .tool = r->attest, .att = r->att, .dir = r->att_dir,
			      .pubkey = r->pubkey, .timeout_ms = VERIFY_TIMEOUT_MS };
	char now[32], p[PATH_MAX];

	json_decref(r->verdict);
	r->valid = attcheck_verify(&a, &r->verdict, why, whysz);
	iso_now(r->checked, sizeof r->checked);
	/* After the host changed under an attestation only a fresh one (a
	 * doctor run started since, signed) resumes; what the runner saw is
	 * on disk before it acts on it.  When it cannot be recorded the
	 * runner stops (111): a restart would read the old record and could
	 * take the stale attestation again (isopod-runner(8) FRESHNESS). */
	if (attstale_apply(&r->stale, r->verdict, &r->valid, r->att, iso_now(now, sizeof now), why, whysz) &&
	    attstale_save(sp(r, p, "stale.json"), &r->stale) < 0) {
		snprintf(why, whysz, "unable to record %.300s (the host changed under an attestation): %s", p,
			 strerror(errno));
		r->valid = 0;
		set_state(r, "refused", why);
		die(EX_SYS, "refusing to go on: %s", why);
	}
	r->next_check = mono_ms() + (int64_t)r->recheck_s * 1000;
	return r->valid;
}

/* Verify and move between running and paused, saying why. */
static int recheck(struct runner *r)
{
	char why[sizeof r->reason];

	if (verify(r, why, sizeof why))
		set_state(r, "running", "taking jobs: the attestation verifies");
	else
		set_state(r, "paused", why);
	return r->valid;
}

/* ---- job directories ---------------------------------------------------- */

/* running/D -> STATE/D, after result.json (when given) and state.json:
 * the directory moves whole, so a reader sees a job with its result or
 * not at all.  kill: a test's kill point once the result is written. */
static int finish(struct runner *r, const char *d, const char *state, json_t *result,
		  const char *reason, int rc, int kill)
{
	char p[PATH_MAX], q[PATH_MAX], now[32];
	json_t *st;

	/* a job's provenance (provenance: true) is written in its directory,
	 * which moves whole: the result names where it ends */
	if (json_is_object(json_object_get(result, "provenance")) &&
	    !strcmp(json_string_value(json_object_get(json_object_get(result, "provenance"), "path")) ?: "",
		    sp(r, p, "running/%s/provenance.json", d)))
		json_object_set_new(json_object_get(result, "provenance"), "path",
				    json_string(sp(r, q, "%s/%s/provenance.json", state, d)));
	if (result && json_write_atomic(sp(r, p, "running/%s/result.json", d), result) < 0) {
		warn("unable to write %s: %s", p, strerror(errno));
		return -1;
	}
	if (kill)
		raise(SIGKILL);
	if (!(st = json_load_path(sp(r, p, "running/%s/state.json", d))))
		st = json_object();
	json_object_set_new(st, "job", json_string(d));
	json_object_set_new(st, "state", json_string(state));
	json_object_set_new(st, "finished", json_string(iso_now(now, sizeof now)));
	if (reason)
		json_object_set_new(st, "reason", json_string(reason));
	if (rc >= 0)
		json_object_set_new(st, "exit", json_integer(rc));
	if (json_write_atomic(p, st) < 0) {
		warn("unable to write %s: %s", p, strerror(errno));
		json_decref(st);
		return -1;
	}
	json_decref(st);
	sp(r, p, "running/%s", d);
	sp(r, q, "%s/%s", state, d);
	/* (a name is single-use, so STATE/D exists only if made by hand) */
	if (renameat2(AT_FDCWD, p, AT_FDCWD, q, RENAME_NOREPLACE) < 0 &&
	    (errno != EEXIST || !sp(r, q, "%s/%s~%lld", state, d, (long long)wall_ms())[0] ||
	     rename(p, q) < 0)) {
		warn("unable to move %s to %s: %s", p, q, strerror(errno));
		return -1;
	}
	fsync_dir(sp(r, p, "running"));
	fsync_dir(sp(r, p, "%s", state));
	unlink(pathf(p, sizeof p, "%s/lock", q));
	return 0;
}

/* running/D/<name>.tmp.<pid>: atomic_write's temporary files, left by a
 * kill mid-write (stdin, state.json, job.json); a requeued job's directory
 * must be empty to go. */
static void rm_tmps(struct runner *r, const char *d)
{
	char p[PATH_MAX];
	struct dirent *e;
	DIR *dp = opendir(sp(r, p, "running/%s", d));

	if (!dp)
		return;
	while ((e = readdir(dp)))
		if (strstr(e->d_name, ".tmp.") && unlinkat(dirfd(dp), e->d_name, 0) < 0)
			warn("unable to remove %s/%s: %s", p, e->d_name, strerror(errno));
	closedir(dp);
}

/* running/D whose worker is gone (its lock free): finish it as far as it
 * got.  A result written: done or failed by it.  Started (state.json):
 * interrupted.  Claimed, never started: back to the queue.  Else (a claim
 * cut short): removed.  0 settled or nothing to do, -1 lock held. */
static int settle(struct runner *r, const char *d, const char *why)
{
	char p[PATH_MAX], q[PATH_MAX], id[DNAME_MAX];
	struct stat a, b;
	json_t *res;
	int lk;

	if ((lk = lock_open(sp(r, p, "running/%s/lock", d), LOCK_EX | LOCK_NB)) < 0)
		return errno == EWOULDBLOCK ? -1 : 0;
	/* the directory may have moved on between open and flock */
	if (fstat(lk, &a) < 0 || stat(p, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		goto out;
	warn("job %s: %s; settling it", d, why);
	if ((res = json_load_path(sp(r, p, "running/%s/result.json", d)))) {
		finish(r, d, json_is_true(json_object_get(res, "ok")) ? "done" : "failed", NULL, why,
		       -1, 0);
		json_decref(res);
	} else if (exists(sp(r, p, "running/%s/state.json", d))) {
		char w[768];
		/* its Slurm job (--backend slurm) is not left running unwatched;
		 * one scancel did not stop is not reported stopped */
		int gone = sjob_abandon(p, w, sizeof w) == 0;

		res = gone ? json_failure("interrupted", "interrupted: %s; its logs are beside this result", why)
			   : json_failure("infra", "%s; %s", why, w);
		finish(r, d, gone ? "interrupted" : "failed", res, why, -1, 0);
		json_decref(res);
	} else {
		/* its name: D, or what precedes "~" (a name used twice, claim) */
		snprintf(id, sizeof id, "%.*s", (int)strcspn(d, "~"), d);
		if (exists(sp(r, p, "running/%s/job.json", d)) &&
		    renameat2(AT_FDCWD, p, AT_FDCWD, sp(r, q, "queue/%s.json", id), RENAME_NOREPLACE) < 0) {
			res = json_failure("usage", "job %s: another job of that name was queued meanwhile", id);
			finish(r, d, "failed", res, "a name queued twice", -1, 0);
			json_decref(res);
			goto out;
		}
		unlink(sp(r, p, "running/%s/stdin", d));
		unlink(sp(r, p, "running/%s/lock", d));
		rm_tmps(r, d);
		if (rmdir(sp(r, p, "running/%s", d)) < 0)
			warn("unable to remove %s: %s", p, strerror(errno));
		fsync_dir(sp(r, p, "queue"));
		fsync_dir(sp(r, p, "running"));
	}
out:
	close(lk);
	return 0;
}

/* Every running/ job that no worker of ours holds: left by a runner or a
 * worker that was killed.  Jobs still locked (a worker of a killed runner
 * finishing up) are looked at again at the next tick. */
static void scan_running(struct runner *r)
{
	char p[PATH_MAX];
	struct dirent *e;
	DIR *dp = opendir(sp(r, p, "running"));
	int i;

	if (!dp)
		return;
	while ((e = readdir(dp))) {
		if (e->d_name[0] == '.')
			continue;
		for (i = 0; i < r->workers; i++)
			if (r->slots[i].pid && !strcmp(r->slots[i].dname, e->d_name))
				break;
		if (i == r->workers)
			settle(r, e->d_name, "its runner or worker was killed");
	}
	closedir(dp);
}

/* The oldest job in queue/ (by mtime, then name): 1 with its name in id. */
static int next_job(struct runner *r, char id[DNAME_MAX])
{
	char p[PATH_MAX], best[DNAME_MAX] = "";
	struct timespec bt = { 0 };
	struct dirent *e;
	struct stat st;
	DIR *dp = opendir(sp(r, p, "queue"));
	size_t n;

	if (!dp)
		return 0;
	while ((e = readdir(dp))) {
		n = strlen(e->d_name);
		if (n < 6 || n - 5 > JOB_ID_MAX || strcmp(e->d_name + n - 5, ".json"))
			continue;
		snprintf(id, DNAME_MAX, "%.*s", (int)(n - 5), e->d_name);
		if (!job_id_ok(id) || fstatat(dirfd(dp), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!best[0] || st.st_mtim.tv_sec < bt.tv_sec ||
		    (st.st_mtim.tv_sec == bt.tv_sec &&
		     (st.st_mtim.tv_nsec < bt.tv_nsec ||
		      (st.st_mtim.tv_nsec == bt.tv_nsec && strcmp(id, best) < 0)))) {
			snprintf(best, sizeof best, "%s", id);
			bt = st.st_mtim;
		}
	}
	closedir(dp);
	snprintf(id, DNAME_MAX, "%s", best);
	return best[0] != 0;
}

/* queue/ID.json -> running/D/job.json under running/D/lock (held: its fd
 * in *lk).  D is ID, or ID~<ms> when ID was used before (that job then
 * fails: names are single-use, a result is never overwritten).  1
 * claimed, 0 gone meanwhile, -1 error. */
static int claim(struct runner *r, const char *id, char d[DNAME_MAX], int *lk)
{
	char p[PATH_MAX], q[PATH_MAX];
	int taken = exists(sp(r, p, "running/%s", id));

	for (size_t i = 0; i < 3; i++)
		taken |= exists(sp(r, p, "%s/%s", final_states[i], id));
	snprintf(d, DNAME_MAX, "%s", id);
	if (taken)
		snprintf(d, DNAME_MAX, "%.*s~%lld", JOB_ID_MAX, id, (long long)wall_ms());
	if (mkdir(sp(r, p, "running/%s", d), 0700) < 0 ||
	    (*lk = lock_open(sp(r, p, "running/%s/lock", d), LOCK_EX | LOCK_NB)) < 0) {
		warn("unable to claim %s: %s: %s", id, p, strerror(errno));
		return -1;
	}
	test_point("runner-claiming");
	if (rename(sp(r, p, "queue/%s.json", id), sp(r, q, "running/%s/job.json", d)) < 0) {
		int e = errno;

		unlink(sp(r, p, "running/%s/lock", d));
		rmdir(sp(r, p, "running/%s", d));
		close(*lk);
		if (e == ENOENT)
			return 0;
		warn("unable to claim %s: %s", id, strerror(e));
		return -1;
	}
	fsync_dir(sp(r, p, "running/%s", d));
	fsync_dir(sp(r, p, "queue"));
	test_point("runner-claimed");
	return 1;
}

/* ---- the worker: one job, one `isopod run` ------------------------------ */

/* state.json: the job started (settle's test: interrupted, never requeued).
 * ISOPOD_TEST_FAIL_AT=worker-state: the write fails (a full disk). */
static int worker_state(struct runner *r, const char *d, pid_t front)
{
	char p[PATH_MAX], now[32];
	const char *f = getenv("ISOPOD_TEST_FAIL_AT");
	json_t *st = json_pack("{s:s, s:s, s:s, s:i, s:i}", "job", d, "state", "running", "started",
			       iso_now(now, sizeof now), "worker_pid", (int)getpid(), "front_pid",
			       (int)front);
	int rc = -1;

	sp(r, p, "running/%s/state.json", d);
	if (f && !strcmp(f, "worker-state"))
		errno = EIO;
	else if (st)
		rc = json_write_atomic(p, st);
	if (rc < 0)
		warn("unable to write %s: %s", p, strerror(errno));
	json_decref(st);
	return rc;
}

/* The worker of --backend slurm: the same argv and job directory, run by
 * Slurm on a node (sbatch; lib/slurmjob.c), its stdout read back from the
 * directory the nodes share; a signal or the budget cancels it (scancel). */
__attribute__((noreturn)) static void worker_slurm(struct runner *r, const char *d, char **av, const json_t *job,
						   int sfd, long long budget_s, int kill_result)
{
	char p[PATH_MAX], dir[PATH_MAX], why[512], feat[256];
	const char *stage = json_string_value(json_object_get(job, "stage"));
	/* no ISOPOD_ATTESTATION: the attestation is the node's, and sbatch
	 * carries none of our environment (lib/slurmjob.c) */
	struct sjob j = { .dir = sp(r, dir, "running/%s", d), .argv = av, .name = d,
			  .net = json_string_value(json_object_get(job, "net")),
			  .prefer = stage && sjob_feature(r->tools, stage, feat, sizeof feat) == 0 ? feat : NULL,
			  .cpus = (int)json_integer_value(json_object_get(job, "vcpus")),
			  .mem_mib = json_integer_value(json_object_get(job, "mem_mib")),
			  .time_s = json_object_get(job, "timeout_s") ? budget_s + GRACE_S : 0,
			  .run_ms = (budget_s + GRACE_S) * 1000, .queue_ms = r->queue_s * 1000 };
	struct sjob_state s = { .exit = -1 };
	json_t *res;
	int rc;

	if (getppid() != r->pid) /* the runner died before PDEATHSIG was set */
		kill(getpid(), SIGTERM);
	/* the budget runs from Slurm's start, the queue has its own bound */
	rc = sjob_run(&j, sfd, INT64_MAX, sp(r, p, "running/%s/state.json", d), &s, why, sizeof why);
	res = sjob_result(rc < 0 ? NULL : job_result_load(sp(r, p, "running/%s/stdout", d)), &j, rc < 0 ? NULL : &s, why);
	/* cancelled past its budget (a timeout) or its queue wait: failed, as
	 * a local run past its own deadline; a signal's cancel: interrupted */
	if (finish(r, d, rc < 0 || s.queue_timeout ? "failed" : why[0] && !s.budget_timeout ? "interrupted" : json_is_true(json_object_get(res, "ok")) ? "done" : "failed",
		   res, why[0] ? why : NULL, rc < 0 ? -1 : s.exit, kill_result) < 0)
		_exit(EX_SYS);
	_exit(0);
}

/* Runs in the forked child; holds the job's lock (lk) for its whole life.
 * A SIGTERM (its runner died: PDEATHSIG, or an operator) interrupts the
 * job: the front end gets SIGTERM (it stops its VM and says so), then
 * SIGKILL after STOP_GRACE_MS. */
__attribute__((noreturn)) static void worker(struct runner *r, const char *d, char **av,
					     const json_t *job, long long budget_s)
{
	char p[PATH_MAX], why[256] = "", attenv[PATH_MAX + 32];
	char *const envs[] = { attenv, NULL };
	sigset_t m;
	int sfd, out, err, st = 0, rc, done = 0, kill_result, overrun = 0;
	/* ISOPOD_TEST_GRACE_S (t/85): a shorter grace, to see an overrun */
	const char *tg = getenv("ISOPOD_TEST_GRACE_S");
	long long tgv;
	int grace = tg && parse_ll(tg, 1, GRACE_S - 1, &tgv) == 0 ? (int)tgv : GRACE_S;
	int64_t deadline = mono_ms() + (budget_s + grace) * 1000, kill_at = 0;
	struct proc_spec ps = PROC_SPEC(av);
	struct signalfd_siginfo si;
	json_t *res;
	pid_t pid;

	close(r->sfd);
	close(r->ifd);
	close(r->spool_lock);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	sigemptyset(&m);
	sigaddset(&m, SIGTERM), sigaddset(&m, SIGINT), sigaddset(&m, SIGHUP), sigaddset(&m, SIGCHLD);
	sfd = signalfd(-1, &m, SFD_CLOEXEC | SFD_NONBLOCK);
	/* terminal signals are for the runner, which decides (drain) */
	setpgid(0, 0);
	/* Without state.json a dead worker's job reads as never started and is
	 * requeued: so nothing may start unless it is written (this exit is
	 * that requeue, at once). */
	if (worker_state(r, d, 0) < 0)
		_exit(EX_SYS);
	test_point("worker-started");
	kill_result = getenv("ISOPOD_TEST_KILL_AT") && !strcmp(getenv("ISOPOD_TEST_KILL_AT"), "worker-result");
	unsetenv("ISOPOD_TEST_KILL_AT"); /* the front end's tools have kill points too */
	if (r->slurm)
		worker_slurm(r, d, av, job, sfd, budget_s, kill_result);
	out = open(sp(r, p, "running/%s/stdout", d), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	err = open(sp(r, p, "running/%s/stderr.log", d), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	/* a job's provenance names the attestation this runner checks */
	if (pathn(attenv, sizeof attenv, "ISOPOD_ATTESTATION=%s", r->att) == 0)
		ps.env = envs;
	ps.file = av[0], ps.out = out, ps.err = err, ps.pdeathsig = SIGTERM, ps.setsid = 1;
	if (sfd < 0 || out < 0 || err < 0 || (pid = proc_spawn(&ps)) < 0) {
		res = json_failure("infra", "unable to start %s: %s", av[0], strerror(errno));
		_exit(finish(r, d, "failed", res, NULL, -1, 0) < 0 ? EX_SYS : 0);
	}
	worker_state(r, d, pid);
	if (getppid() != r->pid) /* the runner died before PDEATHSIG was set */
		kill(getpid(), SIGTERM);
	while (!done) {
		struct pollfd pf = { .fd = sfd, .events = POLLIN };
		int64_t now;

		poll(&pf, 1, TICK_MS);
		while (pf.revents && read(sfd, &si, sizeof si) == sizeof si)
			if (si.ssi_signo != SIGCHLD && !why[0]) {
				snprintf(why, sizeof why, "the worker got SIG%s", sigabbrev_np((int)si.ssi_signo));
				kill(pid, SIGTERM);
				kill_at = mono_ms() + STOP_GRACE_MS;
			}
		done = waitpid(pid, &st, WNOHANG) == pid;
		now = mono_ms();
		if (!done && !why[0] && now > deadline && (overrun = 1)) {
			snprintf(why, sizeof why, "isopod run outlived its budget (%lld s + %d s) and the runner stopped it",
				 budget_s, grace);
			kill(pid, SIGTERM);
			kill_at = now + STOP_GRACE_MS;
		}
		if (!done && kill_at && now > kill_at)
			kill(pid, SIGKILL), kill_at = 0;
	}
	rc = proc_status(st);
	res = job_result_load(sp(r, p, "running/%s/stdout", d));
	/* past its budget: a timeout (failed), as a run past its deadline */
	if (overrun)
		res = job_overrun_result(res, why, rc);
	else if (!json_is_boolean(json_object_get(res, "ok"))) {
		json_decref(res);
		res = json_failure(why[0] ? "interrupted" : "infra", "isopod run exited %d without a result%s%s",
			      rc, why[0] ? ": " : "", why);
	}
	if (finish(r, d, overrun ? "failed" : why[0] ? "interrupted" : json_is_true(json_object_get(res, "ok")) ? "done" : "failed",
		   res, why[0] ? why : NULL, rc, kill_result) < 0)
		_exit(EX_SYS);
	_exit(0);
}

/* running/D/job.json is still the writer's inode (the claim is a rename):
 * a writer keeping a link or an open fd could edit it during the run or in
 * done/ after.  It is replaced by a copy of its bytes, its times kept (the
 * queue's order if it is requeued).  What is not a regular file within
 * JOB_MAX_BYTES is left for job_load to refuse.  0, or -1 with errno. */
static int own_copy(struct runner *r, const char *d)
{
	char p[PATH_MAX], *buf = NULL;
	int fd = open(sp(r, p, "running/%s/job.json", d), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	size_t n = 0;
	ssize_t k;
	int rc = 0, e = 0;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= JOB_MAX_BYTES &&
	    (buf = malloc(JOB_MAX_BYTES + 1))) {
		while (n <= JOB_MAX_BYTES && (k = read(fd, buf + n, JOB_MAX_BYTES + 1 - n)) > 0)
			n += (size_t)k;
		if (n <= JOB_MAX_BYTES) {
			struct timespec t[2] = { st.st_atim, st.st_mtim };

			rc = atomic_write(p, buf, n, 0600);
			e = errno;
			if (rc == 0)
				utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW);
		}
	}
	close(fd);
	free(buf);
	errno = e;
	return rc;
}

static int net_rank(const char *s)
{
	for (int i = 0; s && i < 3; i++)
		if (!strcmp(s, nets[i]))
			return i;
	return -1;
}

/* The operator's ceiling on a job's net mode (--net-max): 1 and why when
 * the job asks for more.  A job without net gets filtered (none under
 * --net-max none), never the front end's configured default, which could
 * be open.  A value that is no mode is the front end's to refuse. */
static int net_over(const struct runner *r, json_t *job, char *why, size_t whysz)
{
	json_t *n = json_object_get(job, "net");
	int k;

	if (!n) {
		json_object_set_new(job, "net", json_string(nets[r->net_max < 1 ? r->net_max : 1]));
		return 0;
	}
	/* learn (every name through the broker) and any other mode this
	 * runner does not rank are refused here: a rank of -1 must never pass
	 * as "below" the ceiling (review: learn under --net-max none). */
	if ((k = net_rank(json_string_value(n))) < 0) {
		snprintf(why, whysz, "net %s: not a mode a runner job may ask for (none, filtered, open)",
			 json_is_string(n) ? EXC(json_string_value(n)) : "(not a string)");
		return 1;
	}
	if (k <= r->net_max)
		return 0;
	snprintf(why, whysz, "net %s: above this runner's --net-max %s", nets[k], nets[r->net_max]);
	return 1;
}

/* Claim the oldest queued job, parse it, verify the attestation and start
 * its worker.  A job that does not parse fails at once, without a verify
 * (a flood of bad files is not a flood of verifies) and never reaches a
 * worker; a job that parses while the attestation no longer verifies goes
 * back to the queue.  0 started or failed, -1 error or paused. */
static int dispatch(struct runner *r, const char *id)
{
	char d[DNAME_MAX], p[PATH_MAX], q[PATH_MAX], why[JOB_WHY_SZ], **av = NULL;
	json_t *job = NULL, *res, *in;
	int lk, slot, c, infra = 0;
	long long budget;
	pid_t pid;

	if ((c = claim(r, id, d, &lk)) <= 0)
		return c;
	if ((infra = own_copy(r, d) < 0))
		snprintf(why, sizeof why, "unable to copy %.300s: %s", sp(r, p, "running/%s/job.json", d),
			 strerror(errno));
	else
		job = job_load(sp(r, p, "running/%s/job.json", d), why, sizeof why);
	if (job && strcmp(d, id)) {
		snprintf(why, sizeof why, "the name %s was used before: names are single-use", id);
		json_decref(job), job = NULL;
	}
	if (job && net_over(r, job, why, sizeof why))
		json_decref(job), job = NULL;
	if (job && !r->slurm && !recheck(r)) {
		/* (settle needs the lock: it is ours, taken again there) */
		json_decref(job);
		close(lk);
		settle(r, d, "the attestation no longer verifies");
		return -1;
	}
	in = json_object_get(job, "stdin");
	if (job && in &&
	    atomic_write(sp(r, p, "running/%s/stdin", d), json_string_value(in), json_string_length(in), 0600) < 0)
		snprintf(why, sizeof why, "unable to write %.300s: %s", p, strerror(errno));
	else if (job && !(av = job_argv(job, r->front, in ? p : NULL,
					sp(r, q, "running/%s/provenance.json", d))))
		snprintf(why, sizeof why, "out of memory");
	if (!av) {
		warn("job %s failed: %s", d, why);
		res = json_failure(job || infra ? "infra" : "usage", "job %s: %s", id, why);
		finish(r, d, "failed", res, why, -1, 0);
		json_decref(res);
		json_decref(job);
		close(lk);
		return 0;
	}
	budget = json_integer_value(json_object_get(job, "timeout_s")) ?: BUDGET_DEFAULT_S;
	for (slot = 0; r->slots[slot].pid; slot++)
		;
	if ((pid = fork()) < 0) {
		warn("unable to fork a worker for %s: %s", d, strerror(errno));
		json_decref(job);
		close(lk);
		free(av);
		settle(r, d, "no worker could be started");
		return -1;
	}
	if (pid == 0)
		worker(r, d, av, job, budget);
	json_decref(job);
	close(lk); /* the worker alone holds it now */
	free(av);
	r->slots[slot].pid = pid;
	snprintf(r->slots[slot].dname, sizeof r->slots[slot].dname, "%s", d);
	r->busy++;
	status_write(r);
	return 0;
}

static void slot_free(struct runner *r, struct slot *s)
{
	s->pid = 0, s->front = 0;
	r->busy--;
	status_write(r);
}

/* The front end of a worker that died: it got SIGTERM then (its
 * PDEATHSIG) and stops its VM; past STOP_GRACE_MS its process group (the
 * front end's own: started with setsid by our worker) gets SIGKILL.  Its
 * slot stays busy until the group is gone: never more VMs than --workers.
 * Then the job is settled (interrupted: it started). */
static void stop_fronts(struct runner *r)
{
	for (int i = 0; i < r->workers; i++) {
		struct slot *s = &r->slots[i];

		if (s->pid != -1)
			continue;
		if (kill(-s->front, 0) == 0 || errno == EPERM) {
			if (s->kill_at && mono_ms() >= s->kill_at) {
				warn("job %s: its front end (pid %d) outlived its worker by %d ms: SIGKILL",
				     s->dname, (int)s->front, STOP_GRACE_MS);
				kill(-s->front, SIGKILL);
				s->kill_at = 0;
			}
			continue;
		}
		settle(r, s->dname, s->why);
		slot_free(r, s);
	}
}

static void reap(struct runner *r)
{
	char why[64], p[PATH_MAX];
	json_t *st_j;
	pid_t pid;
	int st, i;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		for (i = 0; i < r->workers && r->slots[i].pid != pid; i++)
			;
		if (i == r->workers)
			continue;
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			json_int_t f;

			snprintf(why, sizeof why, "its worker died (%s %d)",
				 WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			/* a job requeued by a worker that cannot start (a full
			 * disk) is not retried in a tight loop */
			r->hold_until = mono_ms() + TICK_MS;
			st_j = json_load_path(sp(r, p, "running/%s/state.json", r->slots[i].dname));
			f = json_integer_value(json_object_get(st_j, "front_pid"));
			json_decref(st_j);
			if (f > 1 && f <= INT32_MAX && kill(-(pid_t)f, 0) == 0) {
				r->slots[i].pid = -1;
				r->slots[i].front = (pid_t)f;
				r->slots[i].kill_at = mono_ms() + STOP_GRACE_MS;
				snprintf(r->slots[i].why, sizeof r->slots[i].why, "%s", why);
				warn("job %s: its worker died; waiting for its front end (pid %d) to stop",
				     r->slots[i].dname, (int)f);
				continue;
			}
			settle(r, r->slots[i].dname, why);
		}
		slot_free(r, &r->slots[i]);
	}
	stop_fronts(r);
}

/* ---- set-up and the loop ----------------------------------------------- */

/* The front end and isopod-attest that the attestation covers:
 * $ISOPOD_LIBEXEC, else this program's directory (isopod there, or the
 * source tree's ../sh/isopod), as isopod-attest lists its subjects. */
static void find_tools(struct runner *r)
{
	char dir[PATH_MAX];

	if (proc_tools_dir(dir, sizeof dir) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	pathf(r->tools, sizeof r->tools, "%s", dir);
	pathf(r->attest, sizeof r->attest, "%s/isopod-attest", dir);
	if (!r->slurm && access(r->attest, X_OK) < 0)
		die(EX_SYS, "unable to find isopod-attest in %s:", dir);
	if (proc_front_end(dir, r->front, sizeof r->front) < 0)
		die(EX_SYS, "unable to find the front end isopod in %s or %s/../sh", dir, dir);
}

static void setup(struct runner *r)
{
	static const char *const dirs[] = { "queue", "running", "done", "failed", "interrupted" };
	char p[PATH_MAX], d[PATH_MAX + 256];
	sigset_t m;
	int fd;

	if (mkdir_p(r->spool, 0700, p, sizeof p) < 0)
		die(EX_SYS, "unable to create %s:", p);
	/* jobs, their results and stale.json live there: a spool another
	 * user may write (or a link to one, or theirs) lets them swap a job
	 * or a result, or the record that keeps the runner paused; refused
	 * as isopod-slurm run --dir and isopod-mcp --slurm-dir are */
	if ((fd = dir_own_open(r->spool, d, sizeof d)) < 0)
		die(errno == EPERM || errno == ELOOP || errno == ENOTDIR ? EX_USAGE : EX_SYS, "--spool %s", d);
	close(fd);
	/* the longest path: <spool>/interrupted/<name>~<ms>/result.json.<16 hex>.tmp.<n> */
	if (strlen(r->spool) + DNAME_MAX + 96 >= PATH_MAX)
		die(EX_USAGE, "--spool %s: too long", EXC(r->spool));
	for (size_t i = 0; i < 5; i++)
		if (mkdir(sp(r, p, "%s", dirs[i]), 0700) < 0 && errno != EEXIST)
			die(EX_SYS, "unable to create %s:", p);
	if ((r->spool_lock = lock_open(sp(r, p, "runner.lock"), LOCK_EX | LOCK_NB)) < 0)
		die(errno == EWOULDBLOCK ? EX_CONFLICT : EX_SYS, "%s: %s", p,
		    errno == EWOULDBLOCK ? "another isopod-runner serves this spool" : strerror(errno));
	/* never forgotten: a record that cannot be read refuses the start */
	if (attstale_load(sp(r, p, "stale.json"), &r->stale, d, sizeof d) < 0) {
		snprintf(r->reason, sizeof r->reason, "unable to read what this spool's runner saw: %.1500s", d);
		r->state = "refused";
		status_write(r);
		die(EX_SYS, "refusing to start: %s", r->reason);
	}
	sigemptyset(&m);
	sigaddset(&m, SIGTERM), sigaddset(&m, SIGINT), sigaddset(&m, SIGHUP), sigaddset(&m, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &m, NULL) < 0 || (r->sfd = signalfd(-1, &m, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		die(EX_SYS, "unable to set up signals:");
	/* A job dropped or an attestation re-signed is seen at once; the tick
	 * and the recheck timer do without inotify. */
	if ((r->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK)) < 0)
		die(EX_SYS, "unable to start inotify:");
	if (inotify_add_watch(r->ifd, sp(r, p, "queue"), IN_MOVED_TO | IN_CLOSE_WRITE) < 0)
		warn("unable to watch %s: %s", p, strerror(errno));
	pathf(d, sizeof d, "%s", r->att);
	pathf(r->att_base, sizeof r->att_base, "%s", basename(d));
	pathf(d, sizeof d, "%s", r->att);
	r->wd_att = inotify_add_watch(r->ifd, dirname(d),
				      IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM);
}

/* Events: the attestation's name touched -> verify at once. */
static void drain_inotify(struct runner *r)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;

	while ((n = read(r->ifd, buf, sizeof buf)) > 0)
		for (char *p = buf; p < buf + n;) {
			struct inotify_event *ev = (struct inotify_event *)p;

			if (ev->wd == r->wd_att && ev->len && !strcmp(ev->name, r->att_base))
				r->next_check = 0;
			p += sizeof *ev + ev->len;
		}
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "spool", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "attestation", required_argument, NULL, 'a' },
		{ "attest-dir", required_argument, NULL, 'd' },
		{ "pubkey", required_argument, NULL, 'p' },
		{ "recheck-s", required_argument, NULL, 'r' },
		{ "net-max", required_argument, NULL, 'n' },
		{ "backend", required_argument, NULL, 'b' },
		{ "queue-timeout-s", required_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct runner r = { .att = ATTESTATION_DEFAULT, .workers = 2, .recheck_s = RECHECK_DEFAULT,
			    .state = "starting", .net_max = 1, .queue_s = QUEUE_DEFAULT_S, .sfd = -1, .ifd = -1, .wd_att = -1, .spool_lock = -1 };
	struct signalfd_siginfo si;
	char id[DNAME_MAX], why[sizeof r.reason], p[PATH_MAX];
	long long v;
	int c;
	int64_t last_scan = 0;

	progname = "isopod-runner";
	umask(077);
	pathf(r.spool, sizeof r.spool, "%s", SPOOL_DEFAULT);
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's': pathf(r.spool, sizeof r.spool, "%s", optarg); break;
		case 'w':
			if (parse_ll(optarg, 1, WORKERS_MAX, &v) < 0)
				die(EX_USAGE, "--workers: 1 to %d, not %s", WORKERS_MAX, EXC(optarg));
			r.workers = (int)v;
			break;
		case 'a': r.att = optarg; break;
		case 'd': r.att_dir = optarg; break;
		case 'p': r.pubkey = optarg; break;
		case 'r':
			if (parse_ll(optarg, 1, 86400, &v) < 0)
				die(EX_USAGE, "--recheck-s: 1 to 86400 seconds, not %s", EXC(optarg));
			r.recheck_s = (int)v;
			break;
		case 'n':
			if ((r.net_max = net_rank(optarg)) < 0)
				die(EX_USAGE, "--net-max: none, filtered or open, not %s", EXC(optarg));
			break;
		case 'b':
			if (strcmp(optarg, "local") && strcmp(optarg, "slurm"))
				die(EX_USAGE, "--backend: local or slurm, not %s", EXC(optarg));
			r.slurm = !strcmp(optarg, "slurm");
			break;
		case 'q':
			if (parse_ll(optarg, 1, 31 * 86400, &r.queue_s) < 0)
				die(EX_USAGE, "--queue-timeout-s: 1 to %d seconds, not %s", 31 * 86400, EXC(optarg));
			break;
		case 'h': puts("usage: " USAGE); return 0;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (!r.spool[0] || !*r.att)
		die_usage(USAGE, "--spool and --attestation take a non-empty value");
	if (!(r.slots = calloc((size_t)r.workers, sizeof *r.slots)))
		die(EX_SYS, "out of memory");
	r.pid = getpid();
	find_tools(&r);
	setup(&r);
	/* No valid attestation, no start: exit 111, the reason on stderr and in
	 * status.json.  Under Slurm the gate is each node's (isopod-slurm
	 * refresh drains a node whose attestation fails): this host runs no VM. */
	if (r.slurm)
		r.valid = 1;
	else if (!verify(&r, why, sizeof why)) {
		set_state(&r, "refused", why);
		die(EX_SYS, "refusing to start: %s", why);
	}
	set_state(&r, "running", r.slurm ? "taking jobs: Slurm runs them; each node's attestation gates its own"
					 : "taking jobs: the attestation verifies");
	for (;;) {
		struct pollfd pf[2] = { { .fd = r.sfd, .events = POLLIN }, { .fd = r.ifd, .events = POLLIN } };
		int64_t now = mono_ms(), t = r.slurm ? TICK_MS : r.next_check - now;

		if (now - last_scan >= TICK_MS) {
			scan_running(&r);
			last_scan = now;
		}
		if (!r.draining && r.valid && now >= r.hold_until)
			while (r.busy < r.workers && next_job(&r, id))
				if (dispatch(&r, id) < 0) /* re-verifies before every job */
					break;
		if (r.draining && r.busy == 0) {
			set_state(&r, "stopped", "drained after SIGTERM");
			return 0;
		}
		poll(pf, 2, t < 0 ? 0 : t > TICK_MS ? TICK_MS : (int)t);
		while (pf[0].revents && read(r.sfd, &si, sizeof si) == sizeof si) {
			if (si.ssi_signo == SIGCHLD)
				continue;
			if (si.ssi_signo == SIGHUP) {
				r.next_check = 0;
			} else if (!r.draining) {
				r.draining = 1;
				snprintf(p, sizeof p, "SIG%s: finishing %d running job(s), taking no new ones",
					 sigabbrev_np((int)si.ssi_signo), r.busy);
				set_state(&r, "draining", p);
			}
		}
		drain_inotify(&r);
		reap(&r);
		if (!r.draining && !r.slurm && mono_ms() >= r.next_check)
			recheck(&r);
	}
}
