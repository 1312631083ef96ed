/* slurmjob_test.c - unit tests of lib/slurmjob.c (isopod-runner --backend
 * slurm) against stand-ins for sbatch and scontrol on PATH: what sbatch is
 * given (the argv as its own words, the GRES per net mode), what is read
 * back from `scontrol -o show job`, and that a job Slurm did not run to
 * its end is never a success.  Built by t/run-unit with ASan + UBSan. */
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
		 "--parsable\n--no-requeue\n--job-name=j1\n--chdir=%s\n--output=%s/stdout\n--error=%s/stderr.log\n"
		 "--gres=isopod_filtered:1\n--prefer=isopod_st_ab12\n--cpus-per-task=2\n--time=3\n%s/slurm.sh\n"
		 "x/opt/isopod/isopod\nxrun\nx--json-only\nx--\nxsh\nx-c\nxecho \"$HOME\" 'a b'\n",
		 p, p, p, p);
	ok(!strcmp(slurp("args"), want), "submit: stdout/stderr in the job's directory, GRES, prefer, CPUs, time up to the minute, the argv as words");
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
	stand_in("sbatch", "echo 'Submitted batch job 42'");
	ok(sjob_submit(&j, why, sizeof why) < 0, "submit: output that is no id is an error");
	j.dir = "/tmp/a%jb";
	ok(sjob_submit(&j, why, sizeof why) < 0 && strstr(why, "pattern"), "submit: a '%%' in the directory is refused");
	j.dir = p;

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
	stand_in("scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
	ok(sjob_poll("42", &s, why, sizeof why) < 0 && strstr(why, "Invalid job id"), "poll: a job Slurm forgot is an error: %s", why);

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

	snprintf(why, sizeof why, "rm -rf %s", dir);
	if (system(why) != 0)
		return 1;
	return tap_done();
}
