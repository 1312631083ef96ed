/* slurmjob.c - one job handed to Slurm (slurmjob.h). */
#include "slurmjob.h"
#include "qjail.h"
#include "proc.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/param.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <unistd.h>

#define SJOB_ARGS_MAX 16 /* sbatch's own words before the script */
#define SJOB_OUT_MAX 65536
/* (each #ifndef: t/unit/slurmjob_test.c runs them ten times faster) */
#ifndef SJOB_TICK_MS
#define SJOB_TICK_MS 1000
#endif
/* the gap between two scontrol calls of one job grows to this while its
 * state stays the same (a worker per job: the workers' calls add up) */
#ifndef SJOB_POLL_MAX_MS
#define SJOB_POLL_MAX_MS 10000
#endif
/* a scancel not acted on (slurmctld down): the worker stops waiting */
#ifndef SJOB_CANCEL_WAIT_MS
#define SJOB_CANCEL_WAIT_MS 120000
#endif
/* scontrol failing this long (slurmctld restarting, or the job forgotten):
 * the worker gives up; a shorter outage is waited out, not a failed job */
#ifndef SJOB_POLL_FAIL_MS
#define SJOB_POLL_FAIL_MS 60000
#endif

/* The script: the front end's argv comes as its arguments, never through
 * a shell's parsing of job-supplied words.  Each word comes with an "x"
 * before it, taken off here: sbatch removes every word that is exactly
 * ":" (its heterogeneous-job separator) from its whole argv, the script's
 * arguments included, which would shift a job's word into an option's
 * place; "x:" is no such word. */
static const char script[] = "#!/bin/sh\n# isopod-runner --backend slurm: the front end's argv, each word after an x\n"
			     "for a do set -- \"$@\" \"${a#x}\"; shift; done\nexec \"$@\"\n";

/* The variables Slurm's commands read as options (sbatch(1) INPUT
 * ENVIRONMENT VARIABLES, scancel(1) and scontrol(1) ENVIRONMENT
 * VARIABLES) shape the job and the calls over isopod's own words: the
 * command line wins over them, but isopod gives no --partition,
 * --account, --qos, --constraint, ... (SBATCH_PARTITION would pick the
 * partition, SBATCH_TIMELIMIT the limit of a job without timeout_s,
 * SBATCH_WAIT hold sbatch to the job's end: killed past SJOB_CMD_MS, a
 * failed submission of a job that runs), SCANCEL_STATE=PENDING would leave
 * a running job uncancelled, SCANCEL_INTERACTIVE ask /dev/null, and
 * SCONTROL_FEDERATION/_LOCAL/_SIBLING change what scontrol shows.  Of
 * SLURM_*, the man pages' SLURM_CLUSTERS (another cluster), SLURM_HINT
 * (--hint), SLURM_UMASK (the mode of the job's stdout, the runner's
 * umask otherwise), SLURM_EXIT_ERROR (sbatch's status), SLURM_TIME_FORMAT
 * and SLURM_BITSTR_LEN (the scontrol output sjob_poll reads) do the same,
 * SLURM_DEBUG_FLAGS and SLURM_STEP_KILLED_MSG_NODE_ID only log, and
 * --export=NONE still defines every SLURM_* of the submitter's in the job
 * (sbatch(1) --export): all go but SLURM_CONF, the one that finds the
 * controller (slurm.conf's SlurmctldHost, AuthType, AuthInfo; without it
 * the built-in path or configless's DNS SRV, neither from the
 * environment).  Every SBATCH_* goes, not only those listed: each is an
 * option of sbatch's. */
void sjob_env(struct proc_spec *ps, char *conf[2])
{
	static char *const unset[] = { "SBATCH_*", "SCANCEL_*", "SCONTROL_*", "SLURM_*", NULL };

	conf[0] = conf[1] = NULL;
	for (char **e = environ; e && *e && !conf[0]; e++)
		if (!strncmp(*e, "SLURM_CONF=", 11))
			conf[0] = *e;
	ps->unset = unset;
	ps->env = conf[0] ? conf : NULL;
}

static void free_words(char **w)
{
	for (; *w; w++)
		free(*w);
}

int sjob_submit(struct sjob *j, char *why, size_t whysz)
{
	char sh[PATH_MAX], out[PATH_MAX], err[PATH_MAX], chdir_[PATH_MAX + 16], jn[160], gres[64],
		pref[300], cpus[32], mem[40], tm[32], buf[4096] = "", ebuf[4096] = "";
	const char *pre[SJOB_ARGS_MAX];
	char **av, *conf[2];
	size_t n = 0, k = 0, len = 0;
	int st, e, efd;

	/* sbatch's file names are patterns (%j, %N, ...): a '%' would name
	 * another file, so no such directory is handed over */
	if (strchr(j->dir, '%')) {
		snprintf(why, whysz, "%s: a '%%' in the spool's path is a pattern to sbatch", EXC(j->dir));
		return -1;
	}
	if (pathn(sh, sizeof sh, "%s/slurm.sh", j->dir) < 0 || pathn(out, sizeof out, "--output=%s/stdout", j->dir) < 0 ||
	    pathn(err, sizeof err, "--error=%s/stderr.log", j->dir) < 0 ||
	    pathn(chdir_, sizeof chdir_, "--chdir=%s", j->dir) < 0 ||
	    atomic_write(sh, script, sizeof script - 1, 0700) < 0) {
		snprintf(why, whysz, "unable to write %s: %s", sh, strerror(errno));
		return -1;
	}
	snprintf(jn, sizeof jn, "--job-name=%s", j->name);
	/* --no-requeue: Slurm's JobRequeue is 1 by default, and a requeued job
	 * (node failure, preemption, scontrol requeue) would run again from
	 * its start: a second VM, its egress, its commit.  --export=NONE:
	 * sbatch's default (ALL) hands the submitter's whole environment to
	 * the job, so an ISOPOD_JAIL=0 or a test hook (ISOPOD_TEST_*) in the
	 * runner's would turn the node's jail off; none of it travels (sbatch
	 * passes SLURM_* on: sjob_env leaves it only SLURM_CONF), and the
	 * node gives the job its own: the user's login environment there
	 * (Slurm loads it, as --get-user-env) and what slurm.conf's
	 * TaskProlog exports (doc/slurm.md) */
	pre[k++] = "sbatch", pre[k++] = "--parsable", pre[k++] = "--no-requeue", pre[k++] = "--export=NONE";
	pre[k++] = jn, pre[k++] = chdir_;
	pre[k++] = out, pre[k++] = err;
	if (j->net && (!strcmp(j->net, "filtered") || !strcmp(j->net, "open"))) {
		snprintf(gres, sizeof gres, "--gres=isopod_%s:1", j->net);
		pre[k++] = gres;
	}
	if (j->prefer && snprintf(pref, sizeof pref, "--prefer=%s", j->prefer) < (int)sizeof pref)
		pre[k++] = pref;
	if (j->cpus > 0)
		snprintf(cpus, sizeof cpus, "--cpus-per-task=%d", j->cpus), pre[k++] = cpus;
	/* guest RAM and QEMU's fixed cost: the node's isopod-boot fits the VM
	 * into the job's cgroup (lib/cgroup.c), and refuses a --mem-mib that
	 * does not leave QEMU that much (a TCG node warns of its translation
	 * buffer beyond it) */
	if (j->mem_mib > 0)
		snprintf(mem, sizeof mem, "--mem=%lldM", j->mem_mib + QJAIL_MEM_BASE_MIB), pre[k++] = mem;
	if (j->time_s > 0)
		snprintf(tm, sizeof tm, "--time=%lld", (j->time_s + 59) / 60), pre[k++] = tm;
	pre[k++] = sh;
	while (j->argv[n])
		n++;
	if (!(av = calloc(k + n + 1, sizeof *av))) {
		snprintf(why, whysz, "out of memory");
		return -1;
	}
	memcpy(av, pre, k * sizeof *av);
	for (size_t i = 0; i < n; i++)
		if (asprintf(&av[k + i], "x%s", j->argv[i]) < 0) {
			av[k + i] = NULL;
			free_words(av + k);
			free(av);
			snprintf(why, whysz, "out of memory");
			return -1;
		}
	struct proc_spec ps = PROC_SPEC(av);

	/* stdout alone holds the id: a warning sbatch writes on stderr before
	 * it (a deprecated option, a cgroup notice) is no refusal; stderr is
	 * kept apart, for the error's words */
	efd = memfd_create("sbatch-stderr", MFD_CLOEXEC);
	ps.out = PROC_PIPE, ps.err = efd >= 0 ? efd : PROC_NULL, ps.setsid = 1;
	sjob_env(&ps, conf);
	st = proc_capture_within(&ps, buf, sizeof buf, &len, SJOB_CMD_MS);
	e = errno;
	free_words(av + k);
	free(av);
	if (efd >= 0) {
		ssize_t r = pread(efd, ebuf, sizeof ebuf - 1, 0);

		ebuf[r > 0 ? r : 0] = 0;
		close(efd);
	}
	for (char *c = ebuf; (c = strchr(c, '\n'));)
		*c = c[1] ? ' ' : 0;
	errno = e;
	buf[strcspn(buf, "\n")] = 0;
	/* --parsable: "ID" or "ID;CLUSTER" */
	if (st == 0 && buf[0] && strspn(buf, "0123456789") == strcspn(buf, ";") &&
	    strcspn(buf, ";") < sizeof j->id) {
		snprintf(j->id, sizeof j->id, "%.*s", (int)strcspn(buf, ";"), buf);
		return 0;
	}
	if (st < 0 && errno == ETIMEDOUT) {
		snprintf(why, whysz, "sbatch hung: killed after %d s (a job named %s may have been submitted all the same)",
			 SJOB_CMD_MS / 1000, j->name);
		return errno = ETIMEDOUT, -1;
	}
	else if (st < 0)
		snprintf(why, whysz, "unable to start sbatch: %s", strerror(errno));
	else
		snprintf(why, whysz, "sbatch exited %d: %s", st, ebuf[0] ? EXC(ebuf) : buf[0] ? EXC(buf) : "(nothing said)");
	return -1;
}

/* The value of " KEY=" in line (or at its start), to the next space, into out. */
static int field(const char *line, const char *key, char *out, size_t sz)
{
	size_t kl = strlen(key);
	const char *p = line;

	while ((p = strstr(p, key)) && p != line && p[-1] != ' ')
		p += kl;
	if (!p)
		return -1;
	snprintf(out, sz, "%.*s", (int)strcspn(p + kl, " \n"), p + kl);
	return 0;
}

/* "[D-]HH:MM:SS" (RunTime=) in seconds; -1 when it is not that */
static long long dhms(const char *v)
{
	long long d = 0, h, m, sec;
	char more;
	int n = strchr(v, '-') ? sscanf(v, "%lld-%lld:%lld:%lld%c", &d, &h, &m, &sec, &more)
			       : sscanf(v, "%lld:%lld:%lld%c", &h, &m, &sec, &more) + 1;

	if (n != 4 || d < 0 || h < 0 || m < 0 || sec < 0)
		return -1;
	return ((d * 24 + h) * 60 + m) * 60 + sec;
}

int sjob_poll(const char *id, struct sjob_state *s, char *why, size_t whysz)
{
	static const char *const finals[] = { "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
					      "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY" };
	char *const av[] = { "scontrol", "-o", "show", "job", (char *)id, NULL };
	struct proc_spec ps = PROC_SPEC(av);
	static const char *const tail[] = { " Command=", " WorkDir=", " StdErr=", " StdIn=", " StdOut=",
					    " Comment=", " AdminComment=", " SubmitLine=" };
	char buf[SJOB_OUT_MAX], ec[32] = "", *t, *conf[2];
	int st, code = 0, sig = 0;

	ps.out = PROC_PIPE, ps.err = PROC_PIPE, ps.setsid = 1;
	sjob_env(&ps, conf);
	st = proc_capture_within(&ps, buf, sizeof buf, NULL, SJOB_CMD_MS);
	/* the fields a job's words reach (Command= holds the script's
	 * arguments, the argv; SubmitLine= in later Slurm) come after the ones
	 * read here (22.05: ... BatchHost= ... Command= WorkDir= StdErr= ...):
	 * the line is cut before the first of them, so a job's text never
	 * passes for a field (a BatchHost= of a job cancelled while pending) */
	if (st == 0)
		for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
			if ((t = strstr(buf, tail[i])))
				*t = 0;
	if (st < 0 && errno == ETIMEDOUT) {
		snprintf(why, whysz, "scontrol show job %s hung: killed after %d s", id, SJOB_CMD_MS / 1000);
		return -1;
	}
	if (st != 0 || field(buf, "JobState=", s->state, sizeof s->state) < 0) {
		buf[strcspn(buf, "\n")] = 0;
		snprintf(why, whysz, "scontrol show job %s: %s", id,
			 st < 0 ? strerror(errno) : buf[0] ? EXC(buf) : "no JobState");
		return -1;
	}
	if (field(buf, "BatchHost=", s->node, sizeof s->node) < 0 || !strcmp(s->node, "(null)"))
		s->node[0] = 0;
	if (field(buf, "Reason=", s->reason, sizeof s->reason) < 0)
		s->reason[0] = 0;
	s->restarts = field(buf, "Restarts=", ec, sizeof ec) == 0 ? atoi(ec) : 0;
	s->run_s = field(buf, "RunTime=", ec, sizeof ec) == 0 ? dhms(ec) : -1;
	ec[0] = 0;
	field(buf, "ExitCode=", ec, sizeof ec);
	sscanf(ec, "%d:%d", &code, &sig);
	s->exit = sig ? 128 + sig : code;
	s->final = 0;
	for (size_t i = 0; i < sizeof finals / sizeof *finals; i++)
		s->final |= !strcmp(s->state, finals[i]);
	return 0;
}

/* scancel av (its own session, killed past SJOB_CMD_MS), what is
 * cancelled named by what ("scancel of Slurm job 42"): its status, with
 * why filled when it is not 0; -1 with errno (ETIMEDOUT: it hung). */
static int scancel_run(char *const *av, const char *what, char *why, size_t whysz)
{
	struct proc_spec ps = PROC_SPEC(av);
	char buf[1024], *conf[2];
	int st, e;

	ps.out = PROC_PIPE, ps.err = PROC_PIPE, ps.setsid = 1;
	sjob_env(&ps, conf);
	st = proc_capture_within(&ps, buf, sizeof buf, NULL, SJOB_CMD_MS);
	e = errno;
	buf[strcspn(buf, "\n")] = 0;
	if (st < 0 && e == ETIMEDOUT)
		snprintf(why, whysz, "%s hung: killed after %d s", what, SJOB_CMD_MS / 1000);
	else if (st < 0)
		snprintf(why, whysz, "unable to run %s: %s", what, strerror(e));
	else if (st)
		snprintf(why, whysz, "%s exited %d: %s", what, st, buf[0] ? EXC(buf) : "(nothing said)");
	errno = e;
	return st;
}

int sjob_cancel_why(const char *id, char *why, size_t whysz)
{
	char *const av[] = { "scancel", "--", (char *)id, NULL };
	char what[160];

	/* the id may come back from state.json: only a job id, never an
	 * option or another selection (-u USER cancels all of theirs) */
	if (!id[0] || strspn(id, "0123456789") != strlen(id)) {
		snprintf(why, whysz, "Slurm job %s: not a job id, not cancelled", EXC(id));
		return errno = EINVAL, -1;
	}
	snprintf(what, sizeof what, "scancel of Slurm job %s", id);
	return scancel_run(av, what, why, whysz);
}

int sjob_cancel_name(const char *name, char *why, size_t whysz)
{
	char nm[200], user[32], what[216];
	char *const av[] = { "scancel", nm, user, NULL };

	/* scancel's --name takes a list: a ',' would name a second job */
	if (!name[0] || strchr(name, ',') || snprintf(nm, sizeof nm, "--name=%s", name) >= (int)sizeof nm) {
		snprintf(why, whysz, "Slurm job name %s: not cancelled", EXC(name));
		return errno = EINVAL, -1;
	}
	snprintf(user, sizeof user, "--user=%u", (unsigned)geteuid());
	snprintf(what, sizeof what, "scancel %s", nm);
	return scancel_run(av, what, why, whysz);
}

int sjob_cancel(const char *id)
{
	char why[512];

	return sjob_cancel_why(id, why, sizeof why);
}

int sjob_abandon(const char *state_path, char *why, size_t whysz)
{
	json_t *st = json_load_path(state_path);
	const char *id = json_string_value(json_object_get(st, "slurm_job"));
	struct sjob_state s = { .exit = -1 };
	char w[512];
	int rc = 0;

	/* scancel failing on a job that has ended (already done, forgotten
	 * since): scontrol says so, and it is stopped all the same */
	if (id && sjob_cancel_why(id, why, whysz) != 0 && (sjob_poll(id, &s, w, sizeof w) < 0 || !s.final)) {
		snprintf(why + strlen(why), whysz - strlen(why), ": it may still be running");
		rc = -1;
	}
	json_decref(st);
	return rc;
}

int sjob_feature(const char *dir, const char *ref, char *out, size_t sz)
{
	char tool[PATH_MAX], buf[4096];
	char *const av[] = { tool, "feature", "--", (char *)ref, NULL };
	struct proc_spec ps = PROC_SPEC(av);
	size_t len = 0;
	json_t *j;
	int rc = -1;

	if (pathn(tool, sizeof tool, "%s/isopod-slurm", dir) < 0)
		return -1;
	ps.file = tool, ps.out = PROC_PIPE, ps.setsid = 1;
	if (proc_capture_within(&ps, buf, sizeof buf, &len, SJOB_CMD_MS) != 0 || !(j = json_parse(buf, len, 0, NULL, 0)))
		return -1;
	if (json_is_string(json_object_get(j, "feature")) &&
	    snprintf(out, sz, "%s", json_string_value(json_object_get(j, "feature"))) < (int)sz)
		rc = 0;
	json_decref(j);
	return rc;
}

/* The first of j's bounds still ahead: deadline_ms, the queue's (not
 * started yet), the run's (from Slurm's start). */
static int64_t limit_at(const struct sjob *j, int64_t deadline_ms, int64_t submitted, int64_t started)
{
	int64_t t = deadline_ms;

	if (!started && j->queue_ms > 0 && submitted + j->queue_ms < t)
		t = submitted + j->queue_ms;
	if (started && j->run_ms > 0 && started + j->run_ms < t)
		t = started + j->run_ms;
	return t;
}

/* A bound passed (just after a poll): why, and the flag of the bound (the
 * budget's: a timeout, as a local run's own deadline says it). */
static void limit_why(const struct sjob *j, struct sjob_state *s, int64_t deadline_ms, int64_t now,
		      int64_t submitted, int64_t started, char *why, size_t whysz)
{
	if (now >= deadline_ms && (s->budget_timeout = 1))
		snprintf(why, whysz, "Slurm job %s outlived its budget", j->id);
	else if (started && (s->budget_timeout = 1))
		snprintf(why, whysz, "Slurm job %s outlived its budget: %lld s since Slurm started it", j->id,
			 (long long)(now - started) / 1000);
	else if ((s->queue_timeout = 1))
		snprintf(why, whysz, "Slurm job %s waited %lld s in Slurm's queue (reason %s), past the queue timeout of %lld s",
			 j->id, (long long)(now - submitted) / 1000, s->reason[0] ? s->reason : "none",
			 (long long)j->queue_ms / 1000);
}

/* j->progress_fd: a line at each change of what Slurm says of the job
 * (its state, node, reason), at most one a poll, so a caller's client
 * waiting on a queued job sees why it waits (PENDING (Resources)), then
 * where it runs.  last: the line written before ("" none). */
static void sjob_note(const struct sjob *j, const struct sjob_state *s, char *last, size_t lastsz)
{
	char m[sizeof s->state + sizeof s->node + sizeof s->reason + sizeof j->id + 32];
	int why = s->reason[0] && strcmp(s->reason, "None");

	if (j->progress_fd <= 0)
		return;
	snprintf(m, sizeof m, "Slurm job %s: %s%s%s%s%s%s", j->id, s->state, s->node[0] ? " on " : "", s->node,
		 why ? " (" : "", why ? s->reason : "", why ? ")" : "");
	if (!strcmp(m, last))
		return;
	snprintf(last, lastsz, "%s", m);
	dprintf(j->progress_fd, "%s\n", m);
}

int sjob_run(struct sjob *j, int sfd, int64_t deadline_ms, const char *state_path, struct sjob_state *s,
	     char *why, size_t whysz)
{
	json_t *st;
	struct signalfd_siginfo si;
	int64_t submitted, started = 0, cancelled = 0, failing = 0, next = 0, gap = SJOB_TICK_MS, now, wait;
	char w[1100], cw[512] = "", last[sizeof s->state] = "", note[512] = "";
	int signalled = 0;

	why[0] = 0;
	s->queue_timeout = 0, s->budget_timeout = 0, s->queued_ms = 0;
	if (sjob_submit(j, w, sizeof w) < 0) {
		/* an sbatch killed past its deadline may have queued the job: its
		 * id never came, its name (unique) cancels it */
		if (errno == ETIMEDOUT)
			snprintf(w + strlen(w), sizeof w - strlen(w), "; %s",
				 sjob_cancel_name(j->name, cw, sizeof cw) == 0 ? "scancel --name: done" : cw);
		snprintf(why, whysz, "%s", w);
		return -1;
	}
	submitted = mono_ms();
	if (!(st = json_load_path(state_path)) || json_object_set_new(st, "slurm_job", json_string(j->id)) < 0 ||
	    json_write_atomic(state_path, st) < 0)
		warn("unable to write %s: %s", state_path, strerror(errno));
	json_decref(st);
	for (;;) {
		struct pollfd pf = { .fd = sfd, .events = POLLIN };
		int64_t t0 = mono_ms();

		/* a poll when due, and before a bound is acted on */
		if (t0 >= next || (!cancelled && t0 >= limit_at(j, deadline_ms, submitted, started))) {
			if (sjob_poll(j->id, s, w, sizeof w) == 0) {
				failing = 0;
				sjob_note(j, s, note, sizeof note);
				/* the gap: 1 s at each change of state, doubling while it stays */
				gap = strcmp(last, s->state) ? SJOB_TICK_MS : MIN(gap * 2, SJOB_POLL_MAX_MS);
				snprintf(last, sizeof last, "%s", s->state);
				/* started: its budget runs from Slurm's start (RunTime
				 * ago), never before the submission (another clock) */
				if (strcmp(s->state, "PENDING") || s->run_s > 0) {
					int64_t at = s->run_s > 0 ? t0 - s->run_s * 1000 : started ? started : t0;

					started = at > submitted ? at : submitted;
				}
				if (s->final) {
					s->queued_ms = (started ? started : t0) - submitted;
					return 0;
				}
				/* requeued all the same (an admin's scontrol requeue
				 * despite --no-requeue): its second run is stopped,
				 * and sjob_result never reports one */
				if (s->restarts > 0 && !why[0])
					snprintf(why, whysz, "Slurm requeued job %s (Restarts=%d)", j->id, s->restarts);
			} else if (!failing) {
				failing = t0; /* since this call began: a hung one counts */
				gap = SJOB_TICK_MS;
			} else if (mono_ms() - failing >= SJOB_POLL_FAIL_MS) {
				if (sjob_cancel_why(j->id, cw, sizeof cw) == 0)
					cw[0] = 0;
				snprintf(why + strlen(why), whysz - strlen(why), "%s%s (for %d s)%s%s%s", why[0] ? "; " : "",
					 w, SJOB_POLL_FAIL_MS / 1000, cw[0] ? "; " : "", cw,
					 cw[0] ? ": it may still be running" : "");
				return -1;
			}
			/* a scancel that failed is tried again */
			if (cancelled && cw[0] && sjob_cancel_why(j->id, cw, sizeof cw) == 0)
				cw[0] = 0;
			next = mono_ms() + (cancelled ? SJOB_TICK_MS : gap);
		}
		now = mono_ms();
		if (!why[0] && now >= limit_at(j, deadline_ms, submitted, started))
			limit_why(j, s, deadline_ms, now, submitted, started, why, whysz);
		if (why[0] && !cancelled) {
			if (sjob_cancel_why(j->id, cw, sizeof cw) == 0)
				cw[0] = 0;
			cancelled = now;
			next = now + SJOB_TICK_MS;
			/* Slurm took the scancel: a caller about to be SIGKILLed
			 * returns now (COMPLETING may last), its cleanup to do */
			if (j->cancel_returns && signalled && !cw[0]) {
				snprintf(why + strlen(why), whysz - strlen(why), "; Slurm job %s cancelled (scancel)", j->id);
				return -1;
			}
		}
		if (cancelled && mono_ms() - cancelled > SJOB_CANCEL_WAIT_MS) {
			snprintf(why + strlen(why), whysz - strlen(why), "; Slurm job %s still %s %d s after scancel%s%s",
				 j->id, s->state, SJOB_CANCEL_WAIT_MS / 1000, cw[0] ? ": " : "", cw);
			return -1;
		}
		wait = (cancelled ? next : MIN(next, limit_at(j, deadline_ms, submitted, started))) - mono_ms();
		/* woken by a SIGCHLD (each scontrol's own end) or a signal: the
		 * loop waits on for the next poll, never polls at once */
		poll(&pf, 1, wait < 0 ? 0 : wait > SJOB_POLL_MAX_MS ? SJOB_POLL_MAX_MS : (int)wait);
		while (pf.revents && read(sfd, &si, sizeof si) == sizeof si)
			if (si.ssi_signo != SIGCHLD && !why[0] && (signalled = 1))
				snprintf(why, whysz, "the worker got SIG%s", sigabbrev_np((int)si.ssi_signo));
	}
}

json_t *sjob_result(json_t *res, const struct sjob *j, const struct sjob_state *s, const char *why)
{
	/* a job Slurm restarted ran (or began) twice: whatever its state, not
	 * the one run it was asked for */
	int ran = s && !s->restarts && (!strcmp(s->state, "COMPLETED") || !strcmp(s->state, "FAILED"));
	const char *kind = !s || s->restarts ? "infra"
			   : s->queue_timeout ? "queue_timeout" /* never the job's own timeout: it never ran */
			   : s->budget_timeout ? "timeout" /* cancelled for it: a local run past its deadline */
			   : !strcmp(s->state, "CANCELLED") || !strcmp(s->state, "PREEMPTED") ? "interrupted"
			   : !strcmp(s->state, "TIMEOUT") || !strcmp(s->state, "DEADLINE")    ? "timeout"
											       : "infra";
	json_t *sl;

	if (!ran || !json_is_boolean(json_object_get(res, "ok"))) {
		json_decref(res);
		if (!s)
			res = json_failure(kind, "Slurm: %s", why);
		else if (ran)
			res = json_failure("infra", "isopod run exited %d without a result (Slurm job %s on %s)",
					   s->exit, j->id, s->node[0] ? s->node : "no node");
		else if (s->restarts)
			res = json_failure(kind, "Slurm job %s was requeued and run again (Restarts=%d), then %s; its logs are beside this result",
					   j->id, s->restarts, s->state);
		else if (s->queue_timeout || s->budget_timeout)
			res = json_failure(kind, "%s: %s", why, s->state);
		else
			res = json_failure(kind, "Slurm job %s %s%s%s (reason %s, exit %d); its logs are beside this result",
					   j->id, s->state, s->node[0] ? " on " : " before it ran on a node", s->node,
					   s->reason[0] ? s->reason : "none", s->exit);
	}
	if (j->id[0] && (sl = json_pack("{s:s, s:s?, s:s?, s:i}", "job_id", j->id, "node", s && s->node[0] ? s->node : NULL,
					 "state", s ? s->state : NULL, "exit", s ? s->exit : -1))) {
		/* added: the wait in Slurm's queue, and the run Slurm counted */
		if (s) {
			json_object_set_new(sl, "queued_s", json_integer(s->queued_ms / 1000));
			json_object_set_new(sl, "run_s", s->run_s >= 0 ? json_integer(s->run_s) : json_null());
		}
		json_object_set_new(res, "slurm", sl);
	}
	return res;
}
