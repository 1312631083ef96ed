/* isopod-exec - run one command in a booted VM through its guest agent.
 *
 * Copy-in, the command, copy-out, over one agent connection.  The output
 * goes byte-exact to vms/<id>/exec-<n>.{stdout,stderr}, up to --log-max
 * bytes a stream (the rest counted, not kept); the result
 * JSON carries at most 64 KiB of each, cut on a UTF-8 boundary.  The
 * session itself (the pumping, the deadline and the watchdog) is
 * lib/execio.c; what needs no VM is lib/execopt.c. */
#include "execio.h"
#include "execopt.h"
#include "qemu.h"
#include "util.h"
#include "vm.h"
#include "vmstop.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-exec [--vm REF] [--timeout-ms N] [--env K=V]... [--cwd DIR]\n" \
	"                   [--stdin-file FILE|-] [--copy-in HOST:GUEST]...\n" \
	"                   [--copy-out GUEST:HOST]... [--copy-out-max BYTES] [--shell]\n" \
	"                   [--log-max BYTES] [--check] [--for-provenance] [--pool-warm-up]\n" \
	"                   [--stop FILE] [--run-options[=text]]\n" \
	"                   -- CMD [ARG]..."

#define MAX_ITEMS 256

/* The command line and the vm record (main's, passed down); s is main's
 * session, which fail reads the warnings of. */
struct opts {
	char id[64], name[128], dir[PATH_MAX], agent_sock[PATH_MAX], qmp_sock[PATH_MAX];
	char proxy_env[EXEC_PROXY_MAX][EXEC_PROXY_SZ]; /* filtered mode: the broker, before --env */
	int nproxy;
	long long timeout_ms;
	char *env[MAX_ITEMS];
	int nenv;
	const char *cwd, *stdin_file;
	struct exec_copy in[MAX_ITEMS], out[MAX_ITEMS];
	int nin, nout;
	int shell, check;
	int for_prov;             /* --for-provenance: --check refuses a directory copy-in;
				   * a run lists a copied-out tree's files */
	int pool_warm_up;         /* --pool-warm-up: isopod-pool's filler, before it publishes */
	const char *stop_mark;    /* --stop FILE: stop the VM after the command; FILE once stopped */
	char **argv;
	int argc;
	long long watchdog_ms, copy_out_max, log_max;
	long long qemu_pid;       /* from the vm record, for the last resort */
	struct exec_session *s;
};

/* Emit {"ok":false,...} on stdout and exit: stdout stays JSON even when the
 * infrastructure fails, so a caller can always parse it (the failure
 * contract's one exception: the output so far and the vm are data); the
 * status descriptor gets its kind too. */
__attribute__((noreturn, format(printf, 4, 5))) static void fail(const struct opts *o, int code,
								  const char *kind, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: fatal: %s\n", progname, msg);
	{
		char line[sizeof msg + 64];

		snprintf(line, sizeof line, "%s: fatal: %s", progname, msg);
		status_report(code, kind, line);
	}
	/* Guest text reaches msg escaped (frame_error_text); utf8_json all the
	 * same, so that no byte can make the object NULL and stdout empty. */
	j = json_pack("{s:b, s:o, s:o, s:{s:s, s:s}}", "ok", 0, "error",
		      utf8_json((const uint8_t *)msg, strlen(msg), 0), "error_kind",
		      utf8_json((const uint8_t *)kind, strlen(kind), 0), "vm", "id", o->id, "name",
		      o->name);
	if (j && o->s && o->s->warnings)
		json_object_set(j, "warnings", o->s->warnings);
	/* under the VM's lock, which exit lets go (exec_bulk_punch) */
	if (o->s)
		exec_bulk_punch(o->s);
	if (j)
		json_emit(j);
	exit(code);
}

/* A step of the session failed: its own status, kind and message. */
static __attribute__((noreturn)) void fail_session(const struct opts *o,
						   const struct exec_session *s)
{
	fail(o, s->err_code, s->err_kind, "%s", s->err);
}

static void load_vm(struct opts *o, const char *ref)
{
	char why[512];
	json_t *m;
	const char *s;

	if (vm_open(ref, o->id, &m, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	pathf(o->dir, sizeof o->dir, "%s/vms/%s", store_home(), o->id);
	s = json_string_value(json_object_get(m, "name"));
	snprintf(o->name, sizeof o->name, "%s", s ? s : "");
	s = json_string_value(json_object_get(m, "agent_sock"));
	pathf(o->agent_sock, sizeof o->agent_sock, "%s", s ? s : "");
	s = json_string_value(json_object_get(m, "qmp_sock"));
	pathf(o->qmp_sock, sizeof o->qmp_sock, "%s", s ? s : "");
	o->qemu_pid = json_is_integer(json_object_get(m, "qemu_pid"))
			     ? json_integer_value(json_object_get(m, "qemu_pid")) : 0;
	/* A pooled VM serves the ONE run that takes it: before the take
	 * (pool_taken, set by its supervisor) only its filler's warm-up
	 * reaches it.  Else anything that may name a VM (isopod-mcp's
	 * sandbox_exec, listed by vm_list) could leave a process or a file in
	 * a VM another run then gets as fresh. */
	if (json_object_get(m, "pool_idle_s") && !json_is_true(json_object_get(m, "pool_taken")) &&
	    !o->pool_warm_up) {
		json_decref(m);
		fail(o, EX_CONFLICT, "pooled",
		     "vm %s (%s) is a pooled VM no run has taken: it serves one run only", o->id,
		     o->name);
	}
	/* Every command of a filtered vm gets the proxy variables, ahead of
	 * the caller's --env, which may override them. */
	o->nproxy = exec_proxy_env(json_object_get(m, "net"), o->proxy_env);
	json_decref(m);
	if (!o->agent_sock[0])
		fail(o, EX_CONFLICT, "not_running", "vm %s (%s) has not been booted", o->id, o->name);
}

static void add_copy(char *spec, const char *opt, struct exec_copy *list, int *n, int host_first)
{
	char why[2048];

	if (*n == MAX_ITEMS)
		die(EX_USAGE, "too many %s", opt);
	if (exec_copy_split(spec, opt, &list[*n], host_first, why, sizeof why) < 0)
		die(EX_USAGE, "%s", why);
	(*n)++;
}

/* The options; then the copy-in sources, checked before anything touches
 * the VM; then --check, or the vm. */
static const char *parse_opts(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{"vm", required_argument, 0, 'v'},
		{"timeout-ms", required_argument, 0, 't'},
		{"env", required_argument, 0, 'e'},
		{"cwd", required_argument, 0, 'C'},
		{"stdin-file", required_argument, 0, 'i'},
		{"copy-in", required_argument, 0, 'I'},
		{"copy-out", required_argument, 0, 'O'},
		{"copy-out-max", required_argument, 0, 'M'},
		{"log-max", required_argument, 0, 'L'},
		{"shell", no_argument, 0, 's'},
		{"check", no_argument, 0, 'K'},
		{"for-provenance", no_argument, 0, 'F'},
		{"pool-warm-up", no_argument, 0, 'P'},
		{"stop", required_argument, 0, 'S'},
		{"run-options", optional_argument, 0, 'R'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	/* The options isopod run takes and passes on as given (isopod-exec(1),
	 * "run options"; --stdin-file is the front end's: it owns stdin). */
	static const struct run_option ro[] = {
		{.name = "env", .arg = "K=V", .repeat = 1},
		{.name = "cwd", .arg = "DIR"},
		{.name = "copy-in", .arg = "HOST:GUEST", .repeat = 1},
		{.name = "copy-out", .arg = "GUEST:HOST", .repeat = 1},
		{.name = NULL},
	};
	char err[256];
	const char *vm = NULL, *w, *bad;
	int ch;
	long long v;

	while ((ch = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (ch) {
		case 'v': vm = optarg; break;
		case 't':
			if (parse_ll(optarg, 1, 86400000, &o->timeout_ms) < 0)
				die(EX_USAGE, "--timeout-ms %s: expected 1..86400000", EXC(optarg));
			break;
		case 'e':
			if (o->nenv == MAX_ITEMS)
				die(EX_USAGE, "too many --env");
			if ((bad = exec_env_invalid(optarg)))
				die(EX_USAGE, "--env '%s': %s", EXC(optarg), bad);
			o->env[o->nenv++] = optarg;
			break;
		case 'C':
			if (optarg[0] != '/')
				die(EX_USAGE, "--cwd %s: must be an absolute path", EXC(optarg));
			o->cwd = optarg;
			break;
		case 'i': o->stdin_file = optarg; break;
		case 'I': add_copy(optarg, "--copy-in", o->in, &o->nin, 1); break;
		case 'O': add_copy(optarg, "--copy-out", o->out, &o->nout, 0); break;
		case 'M':
			if (parse_ll(optarg, 0, 1LL << 50, &o->copy_out_max) < 0)
				die(EX_USAGE, "--copy-out-max %s: expected 0..%lld", EXC(optarg),
				    1LL << 50);
			break;
		case 'L':
			if (parse_ll(optarg, 0, 1LL << 50, &o->log_max) < 0)
				die(EX_USAGE, "--log-max %s: expected 0..%lld", EXC(optarg), 1LL << 50);
			break;
		case 's': o->shell = 1; break;
		case 'K': o->check = 1; break;
		case 'F': o->for_prov = 1; break;
		case 'P': o->pool_warm_up = 1; break;
		case 'S': o->stop_mark = optarg; break;
		case 'R':
			/* =text: the lines isopod run reads (util.h) */
			if (optarg && strcmp(optarg, "text"))
				die_usage(USAGE, "--run-options=%s: want text, or no value for JSON",
					  EXC(optarg));
			if (run_options_print(ro, lo, !!optarg, err, sizeof err) < 0)
				die(EX_SYS, "%s", err);
			exit(0);
		case 'h': puts("usage: " USAGE); exit(0);
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	o->argv = argv + optind;
	o->argc = argc - optind;
	if (o->argc < 1)
		die_usage(USAGE, "no command given");
	if (o->shell && o->argc != 1)
		die(EX_USAGE, "--shell takes exactly one script argument");
	if ((w = getenv("ISOPOD_WATCHDOG_MS")) && parse_ll(w, 100, 86400000, &v) == 0)
		o->watchdog_ms = v;
	return vm;
}

static void parse_args(struct opts *o, int argc, char **argv)
{
	const char *vm = parse_opts(o, argc, argv);

	/* Copy-in sources are checked before anything touches the VM. */
	for (int i = 0; i < o->nin; i++) {
		struct stat st;

		if (stat(o->in[i].host, &st) < 0)
			die(EX_USAGE, "--copy-in %s:", EXC(o->in[i].host));
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			die(EX_USAGE, "--copy-in %s: only regular files and directories can be copied",
			    EXC(o->in[i].host));
		/* A signed statement names each input by its sha256; a tree
		 * has none, and an input left out would be a statement that
		 * lies by omission (isopod-provenance(1) refuses one too, but
		 * only after the run: here it costs no VM). */
		if (o->for_prov && S_ISDIR(st.st_mode))
			die(EX_USAGE, "--copy-in %s: a directory; --provenance signs regular-file "
			    "inputs only (each named by its sha256): copy in an archive of it",
			    EXC(o->in[i].host));
	}
	/* --check: what the command would be given, checked before a VM exists
	 * (isopod run refuses a bad value before anything is claimed or booted). */
	if (o->check) {
		char why[4096];

		if (exec_check_paths(o->stdin_file, o->in, o->nin, o->out, o->nout, why, sizeof why) < 0)
			die(EX_USAGE, "%s", why);
		json_emit(json_pack("{s:b}", "ok", 1));
		exit(0);
	}
	/* The record is the channel: boot's JSON on stdin is not read. */
	if (!vm)
		die_usage(USAGE, "no VM: name it with --vm REF (standard input is not read)");
	load_vm(o, vm);
}

/* --stdin-file: the command's stdin, or -1 (none: EOF at once). */
static int open_stdin(const struct opts *o)
{
	int fd;

	if (!o->stdin_file)
		return -1;
	fd = strcmp(o->stdin_file, "-") ? open(o->stdin_file, O_RDONLY | O_CLOEXEC) : dup(0);
	if (fd < 0)
		fail(o, EX_USAGE, "io", "--stdin-file %s: %s", EXC(o->stdin_file), strerror(errno));
	/* No O_NONBLOCK: on a dup of fd 0 it would change the caller's own
	 * stdin.  We read only after poll says readable, and one read returns
	 * what a pipe or tty has without waiting for more. */
	return fd;
}

/* --stop FILE: the VM stopped once the command and its copies are done, as
 * isopod-stop --force does (lib/vmstop.c), so that isopod run starts no
 * isopod-stop; FILE is created once it has stopped.  A VM the deadline
 * stopped already is stopped.  A failure is a warning in the result, and
 * no FILE: the front end then stops the VM itself, as before. */
static void stop_vm(const struct opts *o, struct exec_session *s)
{
	struct vm_stop st = {.how = "not running"};
	json_t *meta;
	int r = 0, fd;

	if (!o->stop_mark)
		return;
	if (vm_running(o->id) != 0) {
		meta = vm_read(o->id);
		r = vm_stop_quit(o->id, o->qmp_sock, meta, 10000, &st);
		json_decref(meta);
		if (st.note[0])
			warn("%s", st.note);
	}
	fd = r < 0 ? -1 : open(o->stop_mark, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd >= 0) {
		close(fd);
		return;
	}
	/* Each warning says what this stop did, and only that: the front end
	 * retries with isopod-stop and says what the retry did (sh/isopod
	 * run_stop), so "unable to stop" must not stand for a VM that stopped. */
	if (r == 0)
		snprintf(st.err, sizeof st.err, "vm %s stopped (%s) but %s not made: %s", o->id, st.how,
			 o->stop_mark, strerror(errno));
	warn("%s", st.err);
	json_array_append_new(s->warnings, json_sprintf("isopod-exec --stop: %s%s", r == 0 ? "" :
							  "unable to stop the vm after the command: ",
							  st.err));
}

/* Print the result and exit with the command's verdict. */
static __attribute__((noreturn)) void finish(const struct opts *o, struct exec_session *s,
					     const struct exec_status *ex, json_t *copied_in,
					     json_t *copied_out, int64_t exec_ms)
{
	json_t *res;

	stop_vm(o, s);
	res = exec_result(s, o->name, ex, copied_in, copied_out, exec_ms);
	if (!res)
		fail_session(o, s);
	exec_bulk_punch(s); /* a deadline's end too; before the lock goes */
	json_emit(res);
	exit(ex->code == 0 && !ex->timed_out ? EX_OK : EX_GUEST);
}

/* A session step's verdict: go on (0), or end the exec.  The deadline passed
 * and its grace too, with no EXIT from the agent: the guest is too starved
 * (or too broken) to end the command, so the host ends it, by stopping the
 * VM: a timeout like any other (timed_out, signal 9, 137, the output
 * received so far), with a warning saying the guest did not answer.
 * Copy-outs are not attempted: their VM is gone. */
static void step(const struct opts *o, struct exec_session *s, int r, json_t *copied_in)
{
	static const struct exec_status killed = {.code = 128 + 9, .sig = 9, .timed_out = 1};
	json_t *copied_out;

	if (r == 0)
		return;
	if (r != EXEC_DEADLINE || exec_at_deadline(s, o->out, o->nout, &copied_out) < 0)
		fail_session(o, s);
	finish(o, s, &killed, copied_in, copied_out, s->t_exec ? mono_ms() - s->t_exec : 0);
}

int main(int argc, char **argv)
{
	static struct exec_session s;
	struct opts o = {.watchdog_ms = EXEC_WATCHDOG_MS_DEFAULT,
			 .copy_out_max = EXEC_COPY_OUT_MAX_DEFAULT,
			 .log_max = EXEC_LOG_MAX_DEFAULT};
	struct exec_status ex = {.code = -1};
	json_t *copied_in = NULL, *copied_out;
	int stdin_fd;
	int64_t exec_ms;

	progname = "isopod-exec";
	signal(SIGPIPE, SIG_IGN);
	if (sodium_init() < 0)
		die(EX_SYS, "unable to initialise libsodium");
	if (exec_init(&s) < 0)
		die(EX_SYS, "out of memory");
	o.s = &s;
	parse_args(&o, argc, argv);
	s.vm_id = o.id;
	s.qmp_sock = o.qmp_sock;
	s.qemu_pid = o.qemu_pid;
	s.watchdog_ms = o.watchdog_ms;
	s.ping_ms = o.watchdog_ms / 6 > 0 ? o.watchdog_ms / 6 : 1;
	s.copy_out_max = o.copy_out_max;
	s.log_max = o.log_max;
	/* only a run to be signed pays for a tree's file list (exectree.c) */
	s.list_files = o.for_prov;
	/* The budget starts once the vm is known (the front end passes --vm
	 * and what is left of its own budget).  The agent enforces the timeout in the guest; the host enforces it too,
	 * from this start: a guest too starved to act on its timer (a fork bomb)
	 * must not stretch the caller's budget into the watchdog's. */
	if (o.timeout_ms)
		s.deadline_ms = mono_ms() + o.timeout_ms;
	stdin_fd = open_stdin(&o);
	step(&o, &s, exec_open_logs(&s, o.dir), NULL);
	step(&o, &s, exec_connect(&s, o.agent_sock), NULL);
	{
		/* ISOPOD_BULK=0: the serial port even when the lane is there
		 * (tests of that path, a comparison) */
		const char *b = getenv("ISOPOD_BULK");
		char lane[PATH_MAX];

		s.no_bulk = b && !strcmp(b, "0");
		pathf(lane, sizeof lane, "%s/" QEMU_BULK_FILE, o.dir);
		step(&o, &s, exec_bulk_open(&s, lane), NULL);
	}
	copied_in = json_array();
	step(&o, &s, exec_copy_in(&s, o.in, o.nin, copied_in), copied_in);
	step(&o, &s, exec_send(&s, &(struct exec_request){
			.argv = o.argv, .argc = o.argc, .shell = o.shell,
			.proxy = (const char (*)[EXEC_PROXY_SZ])o.proxy_env, .nproxy = o.nproxy,
			.env = o.env, .nenv = o.nenv, .cwd = o.cwd, .has_stdin = stdin_fd >= 0}),
	     copied_in);
	step(&o, &s, exec_run(&s, stdin_fd, &ex), copied_in);
	exec_ms = mono_ms() - s.t_exec;
	copied_out = json_array();
	step(&o, &s, exec_copy_out(&s, o.out, o.nout, copied_out), copied_in);
	finish(&o, &s, &ex, copied_in, copied_out, exec_ms);
}
