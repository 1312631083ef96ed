/* slurmjob_test.c - unit tests of lib/slurmjob.c (isopod-runner --backend
 * slurm) against stand-ins for sbatch and scontrol on PATH: what sbatch is
 * given (the argv as its own words, the GRES per net mode), what is read
 * back from `scontrol -o show job`, and that a job Slurm did not run to
 * its end is never a success.  Built by t/run-unit with ASan + UBSan. */
/* Slurm's times ten times faster: a tick of 100 ms, gaps up to 1 s; each
 * command's deadline 1 s */
#define SJOB_TICK_MS 100
#define SJOB_POLL_MAX_MS 1000
#define SJOB_CANCEL_WAIT_MS 2000
#define SJOB_POLL_FAIL_MS 1500
#define SJOB_CMD_MS 1000
#include "../../lib/proc.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/slurmjob.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tap.h"

static char dir[] = "/tmp/slurmjob_test.XXXXXX";

/* PATH's stand-in NAME: a shell script */
static void stand_in(const char *name, const char *body)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof p, "%s/bin/%s", dir, name);
	f = fopen(p, "w");
	fprintf(f, "#!/bin/sh\n%s\n", body);
	fclose(f);
	chmod(p, 0755);
}

static char *slurp(const char *name)
{
	static char buf[8192];
	char p[PATH_MAX];
	FILE *f;
	size_t n = 0;

	snprintf(p, sizeof p, "%s/%s", dir, name);
	buf[0] = 0;
	if ((f = fopen(p, "r"))) {
		n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return buf;
}

/* scontrol printing LINE for `-o show job ID` */
static int poll_of(const char *line, struct sjob_state *s, char *why, size_t whysz)
{
	char body[2048];

	snprintf(body, sizeof body, "printf '%%s\\n' '%s'", line);
	stand_in("scontrol", body);
	memset(s, 0, sizeof *s);
	return sjob_poll("42", s, why, whysz);
}

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)) ?: ""; }

/* scontrol from a script of times since its first call: "ms" is the
 * milliseconds since then, cancelled whether scancel (touch) ran */
static void scontrol_by_time(const char *body)
{
	char sc[4096];

	snprintf(sc, sizeof sc,
		 "now=$(($(date +%%s%%N) / 1000000)); [ -s %s/t0 ] || echo $now >%s/t0; echo >>%s/calls\n"
		 "ms=$((now - $(cat %s/t0))); if [ -e %s/cancelled ]; then c=1; else c=0; fi\n%s",
		 dir, dir, dir, dir, dir, body);
	stand_in("scontrol", sc);
}

static void fresh(const char *state)
{
	char p[PATH_MAX];

	snprintf(p, sizeof p, "rm -f %s/t0 %s/calls %s/cancelled", dir, dir, dir);
	if (system(p) != 0)
		return;
	atomic_write(state, "{}", 2, 0600);
	snprintf(p, sizeof p, "touch %s/cancelled", dir);
	stand_in("scancel", p);
	stand_in("sbatch", "echo 42");
}

static int lines(const char *name)
{
	const char *b = slurp(name);
	int n = 0;

	for (; *b; b++)
		n += *b == '\n';
	return n;
}

/* sjob_run's bounds (ten times faster: 100 ms a "second"). */
static void run_tests(struct sjob *j)
{
	char state[PATH_MAX], why[1024];
	struct sjob_state s;
	sigset_t m;
	json_t *r;
	int sfd, rc;
	int64_t t0;

	/* SIGCHLD on the worker's signalfd, as the runner's worker has it:
	 * each scontrol's end wakes the loop, which must not poll again */
	sigemptyset(&m);
	sigaddset(&m, SIGCHLD);
	sigprocmask(SIG_BLOCK, &m, NULL);
	sfd = signalfd(-1, &m, SFD_NONBLOCK | SFD_CLOEXEC);
	snprintf(state, sizeof state, "%s/state.json", dir);
	j->prefer = NULL, j->time_s = 0;

	/* a "30 s" job: RUNNING 3 s, then COMPLETED; a poll each tick was 31
	 * scontrol calls (and the SIGCHLD of each woke the loop at once:
	 * thousands); the back-off is 1 2 4 8 10 10 ticks: 7 */
	fresh(state);
	scontrol_by_time("if [ $ms -lt 3000 ]; then s=RUNNING; else s=COMPLETED; fi\n"
			 "echo \"JobId=42 JobState=$s Reason=None BatchHost=a RunTime=00:00:0$((ms / 1000)) ExitCode=0:0\"");
	j->run_ms = 60000, j->queue_ms = 60000;
	t0 = mono_ms();
	rc = sjob_run(j, sfd, INT64_MAX, state, &s, why, sizeof why);
	ok(rc == 0 && !strcmp(s.state, "COMPLETED") && !why[0] && lines("calls") <= 10 && lines("calls") >= 3,
	   "run: a 3 s job, %d scontrol calls (was one a tick: 31, or one per SIGCHLD), seen ended after %lld ms",
	   lines("calls"), (long long)(mono_ms() - t0));

	/* a job that waits in the queue longer than its budget, then runs
	 * within it: its budget runs from Slurm's start, so it completes */
	fresh(state);
	scontrol_by_time("if [ $ms -lt 2500 ]; then s=PENDING r=00:00:00; elif [ $ms -lt 3100 ]; then s=RUNNING r=00:00:00; "
			 "else s=COMPLETED r=00:00:01; fi\n[ $c = 0 ] || s=CANCELLED\n"
			 "echo \"JobId=42 JobState=$s Reason=Resources BatchHost=a RunTime=$r ExitCode=0:0\"");
	j->run_ms = 1500, j->queue_ms = 60000;
	rc = sjob_run(j, sfd, mono_ms() + 20000, state, &s, why, sizeof why);
	r = sjob_result(json_pack("{s:b, s:i}", "ok", 1, "exit_code", 0), j, &s, why);
	ok(rc == 0 && !strcmp(s.state, "COMPLETED") && !why[0] && json_is_true(json_object_get(r, "ok")) &&
	   s.queued_ms >= 2000 && json_integer_value(json_object_get(json_object_get(r, "slurm"), "queued_s")) >= 2,
	   "run: 2.5 s in the queue, a budget of 1.5 s from Slurm's start: completed, queued %lld ms (%s)",
	   (long long)s.queued_ms, why);
	json_decref(r);

	/* progress_fd (isopod-mcp's progress through isopod-slurm run): one
	 * line at each change of state, node or reason, none at a poll that
	 * found nothing new; each phase outlasts the longest gap (1 s here) */
	fresh(state);
	scontrol_by_time("if [ $ms -lt 1200 ]; then s=PENDING r=None h='(null)'; elif [ $ms -lt 2400 ]; then s=PENDING r=Resources h='(null)'; "
			 "elif [ $ms -lt 3600 ]; then s=RUNNING r=None h=a; else s=COMPLETED r=None h=a; fi\n"
			 "echo \"JobId=42 JobState=$s Reason=$r BatchHost=$h RunTime=00:00:00 ExitCode=0:0\"");
	j->run_ms = 60000, j->queue_ms = 60000;
	j->progress_fd = memfd_create("notes", MFD_CLOEXEC);
	rc = sjob_run(j, sfd, mono_ms() + 20000, state, &s, why, sizeof why);
	{
		char notes[512] = "";
		ssize_t k = pread(j->progress_fd, notes, sizeof notes - 1, 0);

		notes[k > 0 ? k : 0] = 0;
		ok(rc == 0 && !strcmp(notes, "Slurm job 42: PENDING\nSlurm job 42: PENDING (Resources)\n"
					    "Slurm job 42: RUNNING on a\nSlurm job 42: COMPLETED on a\n") && lines("calls") > 4,
		   "run: progress, a line a change (%d polls): %s", lines("calls"), notes);
	}
	close(j->progress_fd);
	j->progress_fd = 0;

	/* the queue's own bound: PENDING past queue_ms is cancelled, as
	 * queue_timeout (never timeout: it never ran), and fails */
	fresh(state);
	scontrol_by_time("[ $c = 0 ] && s=PENDING || s=CANCELLED\n"
			 "echo \"JobId=42 JobState=$s Reason=Resources BatchHost=(null) RunTime=00:00:00 ExitCode=0:0\"");
	j->run_ms = 600000, j->queue_ms = 800;
	rc = sjob_run(j, sfd, mono_ms() + 5000, state, &s, why, sizeof why);
	r = sjob_result(NULL, j, &s, why);
	ok(rc == 0 && s.queue_timeout && !strcmp(s.state, "CANCELLED") && !strcmp(str(r, "error_kind"), "queue_timeout") &&
	   strstr(str(r, "error"), "queue") && strstr(str(r, "error"), "Resources") &&
	   json_is_null(json_object_get(json_object_get(r, "slurm"), "node")),
	   "run: past the queue timeout while PENDING: cancelled, queue_timeout: %s", str(r, "error"));
	json_decref(r);
	/* a running job is not bound by the queue's timeout, only its budget */
	fresh(state);
	scontrol_by_time("[ $c = 0 ] && s=RUNNING || s=CANCELLED\n"
			 "echo \"JobId=42 JobState=$s Reason=None BatchHost=a RunTime=00:00:00 ExitCode=0:15\"");
	j->run_ms = 1500, j->queue_ms = 300;
	t0 = mono_ms();
	rc = sjob_run(j, sfd, mono_ms() + 10000, state, &s, why, sizeof why);
	ok(rc == 0 && !s.queue_timeout && strstr(why, "outlived its budget") && mono_ms() - t0 >= 1500,
	   "run: running past the queue timeout is no queue timeout; its budget cancels it: %s", why);
	/* cancelled for its budget: a timeout, as a local run past its own
	 * deadline (was interrupted, and isopod-slurm run's 111) */
	r = sjob_result(NULL, j, &s, why);
	ok(s.budget_timeout && !strcmp(str(r, "error_kind"), "timeout") && strstr(str(r, "error"), "outlived its budget") &&
	   strstr(str(r, "error"), "CANCELLED"), "result: cancelled past its budget (from Slurm's start) is timeout: %s",
	   str(r, "error"));
	json_decref(r);
	/* the caller's deadline (isopod-slurm run's, time in the queue
	 * included) passing while it is PENDING: a timeout too */
	fresh(state);
	scontrol_by_time("[ $c = 0 ] && s=PENDING || s=CANCELLED\n"
			 "echo \"JobId=42 JobState=$s Reason=Resources BatchHost=(null) RunTime=00:00:00 ExitCode=0:0\"");
	j->run_ms = 0, j->queue_ms = 0;
	rc = sjob_run(j, sfd, mono_ms() + 500, state, &s, why, sizeof why);
	r = sjob_result(NULL, j, &s, why);
	ok(rc == 0 && s.budget_timeout && !s.queue_timeout && !strcmp(str(r, "error_kind"), "timeout"),
	   "result: the caller's deadline passing in the queue is timeout: %s", str(r, "error"));
	json_decref(r);
	/* a signal's cancel stays interrupted */
	s = (struct sjob_state){ .state = "CANCELLED", .node = "a", .exit = 143, .final = 1 };
	r = sjob_result(NULL, j, &s, "the worker got SIGTERM");
	ok(!strcmp(str(r, "error_kind"), "interrupted"), "result: a cancel without the budget's flag is interrupted");
	json_decref(r);

	/* the budget cancels it, scancel fails and the job runs on: never
	 * "stopped": an error naming the job and scancel's words */
	fresh(state);
	stand_in("scancel", "echo 'scancel: error: Kill job error on job id 42: Access/permission denied' >&2; exit 1");
	scontrol_by_time("echo \"JobId=42 JobState=RUNNING Reason=None BatchHost=a RunTime=00:00:00 ExitCode=0:0\"");
	j->run_ms = 300, j->queue_ms = 0;
	rc = sjob_run(j, sfd, INT64_MAX, state, &s, why, sizeof why);
	r = sjob_result(NULL, j, rc < 0 ? NULL : &s, why);
	ok(rc < 0 && !strcmp(str(r, "error_kind"), "infra") && strstr(str(r, "error"), "still RUNNING") &&
	   strstr(str(r, "error"), "scancel of Slurm job 42 exited 1") && strstr(str(r, "error"), "Access/permission denied"),
	   "run: scancel failed, the job still RUNNING: infra, naming it: %s", str(r, "error"));
	json_decref(r);
	/* scontrol hanging on end: given up at SJOB_POLL_FAIL_MS, naming it */
	fresh(state);
	stand_in("scontrol", "exec sleep 30");
	j->run_ms = 0;
	rc = sjob_run(j, sfd, INT64_MAX, state, &s, why, sizeof why);
	ok(rc < 0 && strstr(why, "scontrol show job 42 hung"), "run: scontrol hanging: given up, named: %s", why);
	close(sfd);
	sigprocmask(SIG_UNBLOCK, &m, NULL);
	j->run_ms = j->queue_ms = 0;
}

int main(void)
{
	char p[64], why[512], want[1024], path[8192];
	char *av[] = { "/opt/isopod/isopod", "run", "--json-only", "--", "sh", "-c", "echo \"$HOME\" 'a b'", NULL };
	struct sjob j = { .argv = av, .name = "j1", .net = "filtered", .prefer = "isopod_st_ab12", .cpus = 2,
			  .time_s = 150 };
	struct sjob_state s;
	json_t *r;

	if (!mkdtemp(dir))
		return 1;
	snprintf(p, sizeof p, "%s/bin", dir);
	mkdir(p, 0700);
	snprintf(path, sizeof path, "%s:%s", p, getenv("PATH") ?: "/usr/bin:/bin");
	setenv("PATH", path, 1);
	snprintf(p, sizeof p, "%s/job", dir);
	mkdir(p, 0700);
	j.dir = p;

	/* sbatch: its words, one a line, into DIR/args; says "42;lab" */
	snprintf(why, sizeof why, "for a; do printf '%%s\\n' \"$a\"; done >%s/args; echo '42;lab'", dir);
	stand_in("sbatch", why);
	ok(sjob_submit(&j, why, sizeof why) == 0 && !strcmp(j.id, "42"), "submit: the id of --parsable's ID;CLUSTER");
	snprintf(want, sizeof want,
		 "--parsable\n--no-requeue\n--export=NONE\n--job-name=j1\n--chdir=%s\n--output=%s/stdout\n--error=%s/stderr.log\n"
		 "--gres=isopod_filtered:1\n--prefer=isopod_st_ab12\n--cpus-per-task=2\n--time=3\n%s/slurm.sh\n"
		 "x/opt/isopod/isopod\nxrun\nx--json-only\nx--\nxsh\nx-c\nxecho \"$HOME\" 'a b'\n",
		 p, p, p, p);
	ok(!strcmp(slurp("args"), want), "submit: --export=NONE (nothing of the submitter's environment), stdout/stderr in the job's directory, GRES, prefer, CPUs, time up to the minute, the argv as words");
	ok(strstr(slurp("job/slurm.sh"), "exec \"$@\"") != NULL, "submit: the script execs its arguments");
	/* sbatch as the real one: every word ":" removed from its argv (its
	 * het-job separator, src/sbatch/opt.c), then the script run with the
	 * words after it; the job's words must reach the front end as given */
	char *colon[] = { "printf", "[%s]\n", ":", "-n", "", "a b", "x\ny", ":", "--", "x", NULL };
	struct sjob jc = { .argv = colon, .name = "j2", .dir = p };

	snprintf(why, sizeof why,
		 "for a do shift; [ \"$a\" = : ] || set -- \"$@\" \"$a\"; done\n"
		 "while [ \"${1#--}\" != \"$1\" ]; do shift; done\n\"$@\" >%s/ran; echo 43", dir);
	stand_in("sbatch", why);
	ok(sjob_submit(&jc, why, sizeof why) == 0 &&
	   !strcmp(slurp("ran"), "[:]\n[-n]\n[]\n[a b]\n[x\ny]\n[:]\n[--]\n[x]\n"),
	   "submit: words ':', '-n', empty, 'a b', a newline reach the front end as given though sbatch drops ':' words: %s",
	   slurp("ran"));
	snprintf(why, sizeof why, "for a; do printf '%%s\\n' \"$a\"; done >%s/args; echo '42;lab'", dir);
	stand_in("sbatch", why);
	j.net = "none", j.prefer = NULL, j.cpus = 0, j.time_s = 0;
	sjob_submit(&j, why, sizeof why);
	ok(!strstr(slurp("args"), "--gres") && !strstr(slurp("args"), "--prefer") && !strstr(slurp("args"), "--time"),
	   "submit: net none asks no slot; no preference, no time when not given");
	j.net = "open";
	sjob_submit(&j, why, sizeof why);
	ok(strstr(slurp("args"), "--gres=isopod_open:1\n") != NULL, "submit: net open asks an open slot");
	stand_in("sbatch", "echo 'sbatch: error: Batch job submission failed: Requested node configuration is not available' >&2; exit 1");
	ok(sjob_submit(&j, why, sizeof why) < 0 && strstr(why, "sbatch exited 1") && strstr(why, "not available"),
	   "submit: a refusal is an error with sbatch's words: %s", why);
	stand_in("sbatch", "echo 'sbatch: warning: --cpus-per-task is deprecated here' >&2; echo 44");
	ok(sjob_submit(&j, why, sizeof why) == 0 && !strcmp(j.id, "44"),
	   "submit: a warning on stderr before the id is no refusal: the id is stdout's (%s)", j.id);
	stand_in("sbatch", "echo 'sbatch: warning: w' >&2; echo 'sbatch: error: Batch job submission failed: Invalid account' >&2; exit 1");
	ok(sjob_submit(&j, why, sizeof why) < 0 && strstr(why, "sbatch exited 1: sbatch: warning: w sbatch: error: Batch job submission failed: Invalid account"),
	   "submit: a refusal says all of stderr, on one line: %s", why);
	stand_in("sbatch", "echo 'Submitted batch job 42'");
	ok(sjob_submit(&j, why, sizeof why) < 0, "submit: output that is no id is an error");
	j.dir = "/tmp/a%jb";
	ok(sjob_submit(&j, why, sizeof why) < 0 && strstr(why, "pattern"), "submit: a '%%' in the directory is refused");
	j.dir = p;
	/* Slurm's option variables in the caller's environment reach none of
	 * sbatch, scontrol, scancel (sjob_env); SLURM_CONF does */
	{
		static const char *const vars[][2] = { { "SBATCH_PARTITION", "nonexistent" }, { "SBATCH_TIMELIMIT", "1" },
						       { "SBATCH_EXPORT", "ALL" }, { "SBATCH_NEWONE", "x" },
						       { "SLURM_CLUSTERS", "other" }, { "SLURM_UMASK", "000" },
						       { "SCANCEL_STATE", "PENDING" }, { "SCONTROL_LOCAL", "1" },
						       { "SLURM_CONF", "/x/slurm.conf" } };
		static const char *const cmds[] = { "sbatch", "scontrol", "scancel" };
		char body[512];
		struct sjob_state s2;

		for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
			setenv(vars[i][0], vars[i][1], 1);
		for (int with_conf = 1; with_conf >= 0; with_conf--) {
			if (!with_conf)
				unsetenv("SLURM_CONF");
			for (size_t i = 0; i < 3; i++) {
				snprintf(body, sizeof body,
					 "env | grep -E '^(SBATCH|SLURM|SCANCEL|SCONTROL)_' | LC_ALL=C sort | tr '\\n' ' ' >%s/env.%s; echo 45",
					 dir, cmds[i]);
				stand_in(cmds[i], body);
			}
			sjob_submit(&j, why, sizeof why);
			sjob_poll("45", &s2, why, sizeof why);
			sjob_cancel("45");
			for (size_t i = 0; i < 3; i++) {
				char f[32];

				snprintf(f, sizeof f, "env.%s", cmds[i]);
				ok(!strcmp(slurp(f), with_conf ? "SLURM_CONF=/x/slurm.conf " : ""),
				   "%s: none of the caller's SBATCH_*, SCANCEL_*, SCONTROL_*, SLURM_*%s: [%s]", cmds[i],
				   with_conf ? " but SLURM_CONF" : " (no SLURM_CONF set)", slurp(f));
			}
		}
		ok(!strcmp(getenv("SBATCH_PARTITION") ?: "", "nonexistent"), "env: the caller's own is unchanged");
		for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
			unsetenv(vars[i][0]);
	}

	ok(poll_of("JobId=42 JobName=j1 JobState=RUNNING Reason=None Dependency=(null) BatchHost=b DerivedExitCode=3:0 ExitCode=0:0",
		   &s, why, sizeof why) == 0 && !strcmp(s.state, "RUNNING") && !s.final && !strcmp(s.node, "b") && s.exit == 0,
	   "poll: running on b, not final, ExitCode not DerivedExitCode");
	ok(poll_of("JobId=42 JobState=PENDING Reason=Resources ExitCode=0:0", &s, why, sizeof why) == 0 &&
	   !s.final && !s.node[0] && !strcmp(s.reason, "Resources"), "poll: pending, no node yet, its reason");
	ok(poll_of("JobId=42 JobState=CANCELLED Reason=None BatchHost=a ExitCode=0:15", &s, why, sizeof why) == 0 &&
	   s.final && s.exit == 143 && !strcmp(s.node, "a"), "poll: cancelled is final, exit 128+15");
	ok(poll_of("JobId=42 JobState=FAILED Reason=NonZeroExitCode BatchHost=a ExitCode=7:0", &s, why, sizeof why) == 0 &&
	   s.final && s.exit == 7, "poll: failed, its code");
	ok(poll_of("JobId=42 JobState=RUNNING Reason=None Requeue=0 Restarts=1 BatchHost=a ExitCode=0:0", &s, why, sizeof why) == 0 &&
	   s.restarts == 1 && !s.final, "poll: Restarts=1 read");
	ok(poll_of("JobId=42 JobState=RUNNING Reason=None Requeue=0 Restarts=0 BatchHost=a ExitCode=0:0", &s, why, sizeof why) == 0 &&
	   s.restarts == 0, "poll: Restarts=0 read");
	/* requeued despite --no-requeue (scontrol requeue): the worker cancels
	 * the second run and reports infra, never that run's result */
	{
		char state[PATH_MAX], body[1024];
		sigset_t none;
		int sfd;

		sigemptyset(&none);
		sfd = signalfd(-1, &none, SFD_NONBLOCK);
		snprintf(state, sizeof state, "%s/state.json", dir);
		atomic_write(state, "{}", 2, 0600);
		stand_in("sbatch", "echo 42");
		snprintf(body, sizeof body, "touch %s/cancelled", dir);
		stand_in("scancel", body);
		snprintf(body, sizeof body,
			 "if [ -e %s/cancelled ]; then s=CANCELLED; else s=RUNNING; fi\n"
			 "echo \"JobId=42 JobState=$s Reason=None Requeue=0 Restarts=1 BatchHost=b ExitCode=0:0\"", dir);
		stand_in("scontrol", body);
		memset(&s, 0, sizeof s);
		ok(sjob_run(&j, sfd, mono_ms() + 5000, state, &s, why, sizeof why) == 0 && !strcmp(s.state, "CANCELLED") &&
		   strstr(why, "requeued"), "run: a job Slurm restarted is cancelled: %s", why);
		r = sjob_result(json_pack("{s:b}", "ok", 1), &j, &s, why);
		ok(json_is_false(json_object_get(r, "ok")) && !strcmp(str(r, "error_kind"), "infra") && strstr(str(r, "error"), "Restarts=1"),
		   "result: a restarted job is infra: %s", str(r, "error"));
		json_decref(r);
		s = (struct sjob_state){ .state = "COMPLETED", .node = "a", .exit = 0, .final = 1, .restarts = 1 };
		r = sjob_result(json_pack("{s:b, s:i}", "ok", 1, "exit_code", 0), &j, &s, "");
		ok(json_is_false(json_object_get(r, "ok")) && !strcmp(str(r, "error_kind"), "infra"),
		   "result: a restarted job that completed is infra, never its second run's success");
		json_decref(r);
		close(sfd);
	}
	/* a job's words in Command= (its argv) or SubmitLine=: never read as fields */
	ok(poll_of("JobId=42 JobName=j1 JobState=CANCELLED Reason=None Requeue=0 Restarts=0 ExitCode=0:0 NodeList=(null) "
		   "Command=/s/slurm.sh x/isopod xrun x-- xecho x BatchHost=evil Restarts=0 JobState=COMPLETED "
		   "WorkDir=/s StdOut=/s/stdout SubmitLine=sbatch x BatchHost=evil2 ExitCode=0:0",
		   &s, why, sizeof why) == 0 && !s.node[0] && !strcmp(s.state, "CANCELLED"),
	   "poll: BatchHost= in Command= or SubmitLine= of a job cancelled while pending is no node: '%s'", s.node);
	ok(poll_of("JobId=42 JobState=PENDING Reason=None ExitCode=0:0 SubmitLine=sbatch x BatchHost=evil2 Restarts=3",
		   &s, why, sizeof why) == 0 && !s.node[0] && !s.restarts,
	   "poll: nor in SubmitLine= alone (later Slurm): '%s', restarts %d", s.node, s.restarts);
	ok(poll_of("JobId=42 JobState=RUNNING Reason=None RunTime=1-02:03:04 TimeLimit=00:05:00 BatchHost=a ExitCode=0:0",
		   &s, why, sizeof why) == 0 && s.run_s == 93784, "poll: RunTime= D-HH:MM:SS read (%lld)", s.run_s);
	ok(poll_of("JobId=42 JobState=PENDING Reason=None RunTime=00:00:00 ExitCode=0:0", &s, why, sizeof why) == 0 &&
	   s.run_s == 0 && poll_of("JobId=42 JobState=PENDING Reason=None RunTime=x ExitCode=0:0", &s, why, sizeof why) == 0 &&
	   s.run_s == -1, "poll: RunTime 0 while pending; not a time: -1");
	stand_in("scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
	ok(sjob_poll("42", &s, why, sizeof why) < 0 && strstr(why, "Invalid job id"), "poll: a job Slurm forgot is an error: %s", why);

	/* a hung sbatch, scontrol or scancel (slurmctld not answering) is
	 * killed at its deadline (SJOB_CMD_MS, 1 s here) and named */
	{
		int64_t t0 = mono_ms();
		int rc;

		stand_in("sbatch", "echo 'sbatch: waiting'; exec sleep 30");
		ok(sjob_submit(&j, why, sizeof why) < 0 && strstr(why, "sbatch hung: killed after 1 s") &&
		   strstr(why, "j1") && mono_ms() - t0 < 5000, "submit: a hung sbatch is killed and named: %s", why);
		stand_in("scontrol", "exec sleep 30");
		t0 = mono_ms();
		ok(sjob_poll("42", &s, why, sizeof why) < 0 && strstr(why, "scontrol show job 42 hung") && mono_ms() - t0 < 5000,
		   "poll: a hung scontrol is killed and named: %s", why);
		stand_in("scancel", "exec sleep 30");
		t0 = mono_ms();
		errno = 0;
		rc = sjob_cancel_why("42", why, sizeof why);
		ok(rc == -1 && errno == ETIMEDOUT && strstr(why, "scancel of Slurm job 42 hung") && mono_ms() - t0 < 5000,
		   "cancel: a hung scancel is killed and named: %d %s", rc, why);
		stand_in("scancel", "echo 'scancel: error: Kill job error on job id 42: Access/permission denied' >&2; exit 1");
		ok(sjob_cancel_why("42", why, sizeof why) == 1 && strstr(why, "scancel of Slurm job 42 exited 1") &&
		   strstr(why, "Access/permission denied") && sjob_cancel("42") == 1,
		   "cancel: scancel's refusal, its status and words: %s", why);
	}
	/* a hung sbatch (killed): the job it may have queued is cancelled by
	 * its name, its id never having come back */
	{
		char state[PATH_MAX], body[512], want2[128];
		sigset_t m;
		int64_t t0;
		int sfd, rc;

		sigemptyset(&m);
		sfd = signalfd(-1, &m, SFD_NONBLOCK);
		snprintf(state, sizeof state, "%s/state.json", dir);
		atomic_write(state, "{}", 2, 0600);
		stand_in("sbatch", "exec sleep 30");
		snprintf(body, sizeof body, "echo \"$*\" >%s/scancel.args", dir);
		stand_in("scancel", body);
		ok(sjob_run(&j, sfd, mono_ms() + 5000, state, &s, why, sizeof why) < 0 && strstr(why, "sbatch hung") &&
		   strstr(why, "scancel --name: done"), "run: a hung sbatch's job is cancelled by its name: %s", why);
		snprintf(want2, sizeof want2, "--name=j1 --user=%u\n", (unsigned)geteuid());
		ok(!strcmp(slurp("scancel.args"), want2), "run: scancel --name=NAME --user=EUID: %s", slurp("scancel.args"));
		ok(sjob_cancel_name("a,b", why, sizeof why) < 0 && errno == EINVAL, "cancel by name: a list is refused");
		close(sfd);
		/* cancel_returns (isopod-slurm run): a signal's scancel that
		 * succeeded ends the run at once, Slurm still saying RUNNING */
		sigaddset(&m, SIGUSR1);
		sigprocmask(SIG_BLOCK, &m, NULL);
		sfd = signalfd(-1, &m, SFD_NONBLOCK);
		stand_in("sbatch", "echo 42");
		stand_in("scontrol", "echo 'JobId=42 JobState=RUNNING Reason=None BatchHost=a ExitCode=0:0'");
		raise(SIGUSR1);
		j.cancel_returns = 1;
		t0 = mono_ms();
		rc = sjob_run(&j, sfd, mono_ms() + 5000, state, &s, why, sizeof why);
		ok(rc < 0 && strstr(why, "SIGUSR1") && strstr(why, "Slurm job 42 cancelled (scancel)") && mono_ms() - t0 < 1500 &&
		   strstr(slurp("scancel.args"), "-- 42"), "run: cancel_returns: back at once after scancel (%lld ms): %s",
		   (long long)(mono_ms() - t0), why);
		j.cancel_returns = 0;
		close(sfd);
		sigprocmask(SIG_UNBLOCK, &m, NULL);
		/* the refusing scancel the tests below expect */
		stand_in("scancel", "echo 'scancel: error: Kill job error on job id 42: Access/permission denied' >&2; exit 1");
	}
	/* settle's cancel (the worker is gone): a failed scancel is never
	 * "stopped", unless Slurm says the job has ended */
	{
		char state[PATH_MAX], body[256];

		snprintf(state, sizeof state, "%s/abandon.json", dir);
		atomic_write(state, "{\"slurm_job\": \"42\"}", 19, 0600);
		stand_in("scontrol", "echo 'JobId=42 JobState=RUNNING Reason=None BatchHost=a ExitCode=0:0'");
		ok(sjob_abandon(state, why, sizeof why) < 0 && strstr(why, "Slurm job 42") && strstr(why, "Access/permission denied") &&
		   strstr(why, "may still be running"), "abandon: scancel failed, the job runs: -1 naming it: %s", why);
		stand_in("scancel", "exec sleep 30");
		ok(sjob_abandon(state, why, sizeof why) < 0 && strstr(why, "hung"), "abandon: scancel hung: -1: %s", why);
		stand_in("scontrol", "echo 'JobId=42 JobState=COMPLETED Reason=None BatchHost=a ExitCode=0:0'");
		ok(sjob_abandon(state, why, sizeof why) == 0, "abandon: scancel failed on a job that has ended: stopped");
		snprintf(body, sizeof body, "touch %s/cancelled2", dir);
		stand_in("scancel", body);
		stand_in("scontrol", "echo 'JobId=42 JobState=RUNNING Reason=None BatchHost=a ExitCode=0:0'");
		ok(sjob_abandon(state, why, sizeof why) == 0 && !access(strcat(strcpy(body, dir), "/cancelled2"), F_OK),
		   "abandon: scancel took it: 0");
		atomic_write(state, "{}", 2, 0600);
		unlink(body);
		ok(sjob_abandon(state, why, sizeof why) == 0 && access(body, F_OK) < 0, "abandon: no Slurm job named: 0, no scancel");
	}

	/* scancel: a job id only, after "--" (state.json's slurm_job is read back) */
	snprintf(why, sizeof why, "for a; do printf '%%s\\n' \"$a\"; done >%s/args", dir);
	stand_in("scancel", why);
	snprintf(want, sizeof want, "%s/args", dir);
	unlink(want);
	ok(sjob_cancel("-u") < 0 && errno == EINVAL && sjob_cancel("") < 0 && sjob_cancel("42 -u") < 0 &&
	   sjob_cancel("--") < 0 && access(want, F_OK) < 0, "cancel: an id not all digits is refused, scancel not run");
	ok(sjob_cancel("42") == 0 && !strcmp(slurp("args"), "--\n42\n"), "cancel: scancel -- ID: %s", slurp("args"));
	/* isopod-slurm feature -- REF: a ref that looks like an option is a ref */
	snprintf(why, sizeof why, "for a; do printf '%%s\\n' \"$a\"; done >%s/args; echo '{\"feature\": \"isopod_st_ab\"}'", dir);
	stand_in("isopod-slurm", why);
	snprintf(want, sizeof want, "%s/bin", dir);
	char feat[64] = "";

	ok(sjob_feature(want, "--help", feat, sizeof feat) == 0 && !strcmp(feat, "isopod_st_ab") &&
	   !strcmp(slurp("args"), "feature\n--\n--help\n"),
	   "feature: isopod-slurm feature -- REF: %s", slurp("args"));

	snprintf(j.id, sizeof j.id, "42");
	s = (struct sjob_state){ .state = "CANCELLED", .node = "a", .exit = 143, .final = 1 };
	r = sjob_result(json_pack("{s:b, s:i}", "ok", 1, "exit_code", 0), &j, &s, "");
	ok(json_is_false(json_object_get(r, "ok")) && !strcmp(str(r, "error_kind"), "interrupted") &&
	   !strcmp(str(json_object_get(r, "slurm"), "node"), "a") && !strcmp(str(json_object_get(r, "slurm"), "state"), "CANCELLED"),
	   "result: cancelled is interrupted, never the step's success");
	json_decref(r);
	s = (struct sjob_state){ .state = "TIMEOUT", .node = "b", .exit = 143, .final = 1 };
	r = sjob_result(NULL, &j, &s, "");
	ok(!strcmp(str(r, "error_kind"), "timeout"), "result: TIMEOUT is timeout");
	json_decref(r);
	s = (struct sjob_state){ .state = "NODE_FAIL", .exit = 0, .final = 1 };
	r = sjob_result(json_pack("{s:b}", "ok", 1), &j, &s, "");
	ok(json_is_false(json_object_get(r, "ok")) && !strcmp(str(r, "error_kind"), "infra") &&
	   json_is_null(json_object_get(json_object_get(r, "slurm"), "node")) && strstr(str(r, "error"), "before it ran"),
	   "result: a node failure is infra, exit 0 notwithstanding");
	json_decref(r);
	s = (struct sjob_state){ .state = "FAILED", .node = "a", .exit = 7, .final = 1 };
	r = sjob_result(json_pack("{s:b, s:i}", "ok", 1, "exit_code", 7), &j, &s, "");
	ok(json_is_true(json_object_get(r, "ok")) && json_integer_value(json_object_get(r, "exit_code")) == 7 &&
	   json_integer_value(json_object_get(json_object_get(r, "slurm"), "exit")) == 7,
	   "result: a step run to its end keeps its own result (the guest's exit), plus slurm");
	json_decref(r);
	r = sjob_result(NULL, &j, &s, "");
	ok(!strcmp(str(r, "error_kind"), "infra") && strstr(str(r, "error"), "without a result"),
	   "result: a step that printed no result is infra");
	json_decref(r);
	j.id[0] = 0;
	r = sjob_result(NULL, &j, NULL, "sbatch exited 1: no");
	ok(!strcmp(str(r, "error_kind"), "infra") && strstr(str(r, "error"), "sbatch exited 1") && !json_object_get(r, "slurm"),
	   "result: a failed submission is infra, no slurm member");
	json_decref(r);

	run_tests(&j);

	snprintf(why, sizeof why, "rm -rf %s", dir);
	if (system(why) != 0)
		return 1;
	return tap_done();
}
