/* isopod-exec - run one command in a booted VM through its guest agent.
 *
 * Copy-in, the command, copy-out, over one agent connection.  The complete
 * output goes byte-exact to vms/<id>/exec-<n>.{stdout,stderr}; the result
 * JSON carries at most 64 KiB of each, cut on a UTF-8 boundary. */
#include "frame.h"
#include "host.h"
#include "qmp.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: isopod-exec [--vm REF] [--timeout-ms N] [--env K=V]... [--cwd DIR]\n" \
	"                   [--stdin-file FILE|-] [--copy-in HOST:GUEST]...\n" \
	"                   [--copy-out GUEST:HOST]... [--copy-out-max BYTES] [--shell]\n" \
	"                   [--check] -- CMD [ARG]...\n"

#define INBAND_MAX (64u * 1024u)
/* What all --copy-out of one exec may bring to the host by default: generous
 * for build artefacts, finite so that a guest cannot fill the host's disk. */
#define COPY_OUT_MAX_DEFAULT (4LL << 30)
#define MAX_ITEMS 256

struct copy {
	char *host, *guest;
};

struct outstream {
	const char *name;
	int fd;                 /* the complete log */
	char path[PATH_MAX];
	uint8_t *inband;        /* first INBAND_MAX bytes */
	size_t inlen;
	uint64_t bytes;
	int eof;
};

static struct {
	char id[64], name[128], dir[PATH_MAX], agent_sock[PATH_MAX], qmp_sock[PATH_MAX];
	char proxy_env[8][96]; /* filtered mode: the broker, before --env */
	int nproxy;
	long long timeout_ms;
	char *env[MAX_ITEMS];
	int nenv;
	const char *cwd, *stdin_file;
	struct copy in[MAX_ITEMS], out[MAX_ITEMS];
	int nin, nout;
	int shell;
	char **argv;
	int argc;
	int64_t watchdog_ms, ping_ms;
	int64_t t0;          /* the arguments and the vm read: --timeout-ms counts from here */
	int64_t deadline_ms; /* t0 + --timeout-ms while the command may run; 0 = none */
	int64_t copy_deadline_ms; /* while copying out: its end; 0 = none */
	int copying_out;          /* the command has ended; copy-out runs */
	const char *copy_why;     /* why wait_frame gave up on a copy-out */
	long long copy_out_max;   /* bytes, all --copy-out together */
	long long qemu_pid;       /* from the vm record, for the last resort */
} o = {.watchdog_ms = 30000, .ping_ms = 5000, .copy_out_max = COPY_OUT_MAX_DEFAULT};

/* How long after the deadline the host waits for the agent's EXIT before it
 * ends the exec itself.  The agent's own timer starts when it receives EXEC,
 * after our t0 (copy-in, the frame's trip), then it kills the group, reaps and
 * drains the pipes before EXIT (250 ms, 1 s at most, after a timeout): under
 * TCG on a loaded 2-core host a healthy guest reported 90-160 ms after our
 * deadline, 340-920 ms when a setsid() child held its pipes or output was
 * pending.  1.5 s covers that and keeps the overrun of a starved guest (a
 * fork bomb, a real-time hog) under 2 s; the agent cannot extend it. */
#define DEADLINE_GRACE_MS 1500

/* Copy-out comes after the command, within what is left of --timeout-ms plus
 * this allowance (a command that used all of its budget still gets its
 * results copied when they are small); then the host stops the vm and the
 * copy-outs not finished are errors.  Without --timeout-ms, copy-out is
 * bounded by size only (--copy-out-max; the agent sends at most the size a
 * file had when it was opened). */
#define COPY_OUT_GRACE_MS 2000

static struct conn c;
static json_t *warnings;
/* What the result is made of, also when the deadline cuts the exec short. */
static struct outstream out[2] = {{.name = "stdout", .fd = -1}, {.name = "stderr", .fd = -1}};
static json_t *copied_in;
static int64_t t_exec;

/* Emit {"ok":false,...} on stdout and exit: stdout stays JSON even when the
 * infrastructure fails, so a caller can always parse it (the failure
 * contract's one exception: the output so far and the vm are data); the
 * status descriptor gets its kind too. */
__attribute__((noreturn, format(printf, 3, 4))) static void fail(int code, const char *kind,
								  const char *fmt, ...)
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
		      utf8_json((const uint8_t *)kind, strlen(kind), 0), "vm", "id", o.id, "name",
		      o.name);
	if (j && warnings)
		json_object_set(j, "warnings", warnings);
	if (j)
		json_emit(j);
	exit(code);
}

/* Stop a VM whose agent cannot end what it runs, and wait until it is
 * stopped (its lock free, as isopod-stop waits).  A QEMU that does not quit
 * on QMP (wedged, SIGSTOPped) gets SIGKILL, through a pidfd opened before
 * the lock is checked: a lock still held after the pidfd was opened proves
 * the pid was not recycled in between.  0, or -1 (said on stderr): the vm
 * may still be running. */
static int kill_vm(void)
{
	char err[256];
	int pfd;

	if (qmp_simple(o.qmp_sock, "quit", mono_ms() + 2000, err, sizeof err) < 0)
		warn("vm %s: QMP quit: %s", o.id, err);
	else if (vm_wait_stopped(o.id, mono_ms() + 5000) == 0)
		return 0;
	if (!vm_running(o.id))
		return 0;
	if (o.qemu_pid > 0 && o.qemu_pid <= INT_MAX && (pfd = pidfd_open_((pid_t)o.qemu_pid)) >= 0) {
		if (vm_running(o.id) && pidfd_kill(pfd, SIGKILL) < 0 && errno != ESRCH)
			warn("vm %s: unable to kill qemu %lld: %s", o.id, o.qemu_pid, strerror(errno));
		close(pfd);
	}
	if (vm_wait_stopped(o.id, mono_ms() + 5000) == 0)
		return 0;
	warn("unable to stop vm %s (qemu %lld)", o.id, o.qemu_pid);
	return -1;
}

/* The vm could not be stopped: whatever the command did, the result is the
 * infrastructure's failure, never a timeout with a vm still running. */
static __attribute__((noreturn)) void fail_not_stopped(const char *when)
{
	fail(EX_SYS, "not_stopped", "vm %s: %s, and the host could not stop the vm", o.id, when);
}

static void proxy_env(const json_t *net);

static void load_vm(const char *ref)
{
	char why[512];
	json_t *m;
	const char *s;

	if (vm_open(ref, o.id, &m, why, sizeof why) < 0)
		die(vm_exit_code(errno), "%s", why);
	pathf(o.dir, sizeof o.dir, "%s/vms/%s", store_home(), o.id);
	s = json_string_value(json_object_get(m, "name"));
	snprintf(o.name, sizeof o.name, "%s", s ? s : "");
	s = json_string_value(json_object_get(m, "agent_sock"));
	pathf(o.agent_sock, sizeof o.agent_sock, "%s", s ? s : "");
	s = json_string_value(json_object_get(m, "qmp_sock"));
	pathf(o.qmp_sock, sizeof o.qmp_sock, "%s", s ? s : "");
	o.qemu_pid = json_is_integer(json_object_get(m, "qemu_pid"))
			     ? json_integer_value(json_object_get(m, "qemu_pid")) : 0;
	proxy_env(json_object_get(m, "net"));
	json_decref(m);
	if (!o.agent_sock[0])
		fail(EX_CONFLICT, "not_running", "vm %s (%s) has not been booted", o.id, o.name);
}

/* A filtered VM reaches the outside only through the egress broker on its
 * gateway: every command gets the proxy variables (both spellings: curl
 * reads http_proxy lower-case only, others the upper case), ahead of the
 * caller's --env, which may override them. */
static void proxy_env(const json_t *net)
{
	static const char *const names[] = { "http_proxy", "HTTP_PROXY", "https_proxy",
					     "HTTPS_PROXY" };
	const char *mode = json_string_value(json_object_get(net, "mode"));
	const char *gw = json_string_value(json_object_get(net, "gateway"));
	size_t i;

	if (!mode || strcmp(mode, "filtered") || !gw || strlen(gw) > 15)
		return;
	for (i = 0; i < sizeof names / sizeof names[0]; i++)
		snprintf(o.proxy_env[o.nproxy++], sizeof o.proxy_env[0], "%s=http://%s:3128",
			 names[i], gw);
	snprintf(o.proxy_env[o.nproxy++], sizeof o.proxy_env[0],
		 "no_proxy=localhost,127.0.0.1,::1");
	snprintf(o.proxy_env[o.nproxy++], sizeof o.proxy_env[0],
		 "NO_PROXY=localhost,127.0.0.1,::1");
}

static void split_copy(char *spec, const char *opt, struct copy *cp, int host_first)
{
	/* HOST:GUEST — the guest side is absolute, so split at the last ':'
	 * that is followed by '/' on the guest side. */
	char *colon = host_first ? strstr(spec, ":/") : strchr(spec, ':');

	if (!colon || colon == spec || !colon[1])
		die(EX_USAGE, "%s %s: expected %s", opt, EXC(spec),
		    host_first ? "HOST:/GUEST/PATH" : "/GUEST/PATH:HOST");
	*colon = 0;
	cp->host = host_first ? spec : colon + 1;
	cp->guest = host_first ? colon + 1 : spec;
	if (cp->guest[0] != '/')
		die(EX_USAGE, "%s: guest path %s must be absolute", opt, EXC(cp->guest));
	if (strlen(cp->guest) >= 4096)
		die(EX_USAGE, "%s: guest path too long", opt);
}

static void check_env(const char *kv)
{
	const char *eq = strchr(kv, '=');

	if (!eq)
		die(EX_USAGE, "--env '%s': expected NAME=VALUE", EXC(kv));
	if (eq == kv)
		die(EX_USAGE, "--env '%s': empty variable name", EXC(kv));
}

/* --check: what the command would be given, checked before a VM exists
 * (isopod run refuses a bad value before anything is claimed or booted):
 * the stdin file readable, every copy-in source readable, every copy-out
 * destination's directory there. */
__attribute__((noreturn)) static void check_only(void)
{
	struct stat st;
	char d[PATH_MAX], *slash;
	int fd;

	if (o.stdin_file && strcmp(o.stdin_file, "-")) {
		fd = open(o.stdin_file, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode))
			die(EX_USAGE, "--stdin-file '%s': not a readable file", EXC(o.stdin_file));
		close(fd);
	}
	for (int i = 0; i < o.nin; i++)
		if (access(o.in[i].host, R_OK) < 0)
			die(EX_USAGE, "--copy-in %s: not readable:", EXC(o.in[i].host));
	for (int i = 0; i < o.nout; i++) {
		if (stat(o.out[i].host, &st) == 0 && S_ISDIR(st.st_mode))
			continue;
		if (pathn(d, sizeof d, "%s", o.out[i].host) < 0)
			die(EX_USAGE, "--copy-out %s: path too long", EXC(o.out[i].host));
		slash = strrchr(d, '/');
		if (!slash)
			strcpy(d, ".");
		else if (slash == d)
			d[1] = 0;
		else
			*slash = 0;
		if (stat(d, &st) < 0 || !S_ISDIR(st.st_mode))
			die(EX_USAGE, "--copy-out %s: no directory %s on the host", EXC(o.out[i].host),
			    EXC(d));
	}
	json_emit(json_pack("{s:b}", "ok", 1));
	exit(0);
}

static void parse_args(int argc, char **argv)
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
		{"shell", no_argument, 0, 's'},
		{"check", no_argument, 0, 'K'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0}};
	const char *vm = NULL;
	int ch, check = 0;
	long long v;
	const char *w;

	while ((ch = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (ch) {
		case 'v': vm = optarg; break;
		case 't':
			if (parse_ll(optarg, 1, 86400000, &o.timeout_ms) < 0)
				die(EX_USAGE, "--timeout-ms %s: expected 1..86400000", EXC(optarg));
			break;
		case 'e':
			if (o.nenv == MAX_ITEMS)
				die(EX_USAGE, "too many --env");
			check_env(optarg);
			o.env[o.nenv++] = optarg;
			break;
		case 'C':
			if (optarg[0] != '/')
				die(EX_USAGE, "--cwd %s: must be an absolute path", EXC(optarg));
			o.cwd = optarg;
			break;
		case 'i': o.stdin_file = optarg; break;
		case 'I':
			if (o.nin == MAX_ITEMS)
				die(EX_USAGE, "too many --copy-in");
			split_copy(optarg, "--copy-in", &o.in[o.nin++], 1);
			break;
		case 'O':
			if (o.nout == MAX_ITEMS)
				die(EX_USAGE, "too many --copy-out");
			split_copy(optarg, "--copy-out", &o.out[o.nout++], 0);
			break;
		case 'M':
			if (parse_ll(optarg, 0, 1LL << 50, &o.copy_out_max) < 0)
				die(EX_USAGE, "--copy-out-max %s: expected 0..%lld", EXC(optarg),
				    1LL << 50);
			break;
		case 's': o.shell = 1; break;
		case 'K': check = 1; break;
		case 'h': fputs(USAGE, stdout); exit(0);
		default: fputs(USAGE, stderr); die(EX_USAGE, "bad option (usage above)");
		}
	}
	o.argv = argv + optind;
	o.argc = argc - optind;
	if (o.argc < 1)
		die(EX_USAGE, "no command given\n%s", USAGE);
	if (o.shell && o.argc != 1)
		die(EX_USAGE, "--shell takes exactly one script argument");
	if ((w = getenv("ISOPOD_WATCHDOG_MS")) && parse_ll(w, 100, 86400000, &v) == 0)
		o.watchdog_ms = v;
	o.ping_ms = o.watchdog_ms / 6 > 0 ? o.watchdog_ms / 6 : 1;
	/* Copy-in sources are checked before anything touches the VM. */
	for (int i = 0; i < o.nin; i++) {
		struct stat st;

		if (stat(o.in[i].host, &st) < 0)
			die(EX_USAGE, "--copy-in %s:", EXC(o.in[i].host));
		if (!S_ISREG(st.st_mode))
			die(EX_USAGE, "--copy-in %s: only regular files can be copied", EXC(o.in[i].host));
	}
	if (check)
		check_only();
	if (vm) {
		load_vm(vm);
	} else {
		json_t *j = json_read_stdin();
		const char *id = json_string_value(json_object_get(json_object_get(j, "vm"), "id"));

		if (!id)
			die(EX_USAGE, "standard input has no vm.id (expected isopod-boot's output)");
		if (!id_vm_ok(id))
			die(EX_USAGE, "standard input: bad vm.id %s: want vm-<12 hex>", EXC(id));
		load_vm(id);
		json_decref(j);
	}
}

/* Wait for a frame; a silent agent gets PINGs and, after watchdog_ms of
 * silence, the VM is killed: a hung guest must not hang the caller. */
static int64_t last_rx;

static __attribute__((noreturn)) void deadline_passed(void);

/* The watchdog fired: before the deadline it is the infrastructure's failure
 * (unresponsive, 111); once the deadline has passed it is the command's
 * timeout, whatever kept the agent from saying so. */
static __attribute__((noreturn)) void watchdog_fired(void)
{
	if (o.deadline_ms && mono_ms() >= o.deadline_ms)
		deadline_passed();
	if (kill_vm() < 0)
		fail_not_stopped("the guest agent stopped answering");
	fail(EX_SYS, "unresponsive",
	     "vm %s: the guest agent stopped answering for %lld ms; the vm was stopped", o.id,
	     (long long)o.watchdog_ms);
}

/* The next moment something must happen without the agent: a ping, the
 * watchdog, the end of the deadline's grace. */
static int64_t next_tick(void)
{
	int64_t until = mono_ms() + o.ping_ms;

	if (until > last_rx + o.watchdog_ms)
		until = last_rx + o.watchdog_ms;
	if (o.deadline_ms && until > o.deadline_ms + DEADLINE_GRACE_MS)
		until = o.deadline_ms + DEADLINE_GRACE_MS;
	if (o.copy_deadline_ms && until > o.copy_deadline_ms)
		until = o.copy_deadline_ms;
	return until;
}

/* now + ms, but no later than the deadline's grace. */
static int64_t before_deadline(int64_t ms)
{
	int64_t until = mono_ms() + ms;

	if (o.deadline_ms && until > o.deadline_ms + DEADLINE_GRACE_MS)
		until = o.deadline_ms + DEADLINE_GRACE_MS;
	return until;
}

/* 1 a frame; 0 (only while copying out) the copy-out must end: o.copy_why
 * says why.  The deadline and the watchdog are checked after every frame,
 * not only when none came: a steady stream of frames (PONGs, CREDITs) must
 * not keep them from being seen. */
static int wait_frame(struct frame *fr)
{
	for (;;) {
		int r = conn_wait(&c, fr, next_tick());
		int64_t now = mono_ms();

		if (r == 1)
			last_rx = now;
		else if (r != -3)
			fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
		if (o.deadline_ms && now >= o.deadline_ms + DEADLINE_GRACE_MS)
			deadline_passed();
		if (o.copy_deadline_ms && now >= o.copy_deadline_ms) {
			o.copy_why = "the time left of --timeout-ms, and its copy-out allowance, ran out";
			return 0;
		}
		if (now >= last_rx + o.watchdog_ms) {
			if (o.copying_out) {
				o.copy_why = "the guest agent stopped answering";
				return 0;
			}
			watchdog_fired();
		}
		if (r == 1 && fr->type != F_PONG)
			return 1;
		if (r != 1)
			conn_queue(&c, F_PING, STREAM_CTL, NULL, 0);
	}
}

static __attribute__((noreturn)) void fail_frame(const struct frame *fr, const char *what)
{
	char kind[64], msg[512];

	/* what may be a path from the command line: escaped like the guest's
	 * text, which frame_error_text escapes. */
	if (fr->type != F_ERROR)
		fail(EX_SYS, "protocol", "vm %s: %s: unexpected frame type %u", o.id, EXC(what),
		     fr->type);
	frame_error_text(fr, kind, sizeof kind, msg, sizeof msg);
	fail(!strcmp(kind, "bad_request") ? EX_USAGE : EX_SYS, kind, "vm %s: %s: %s", o.id,
	     EXC(what), msg);
}

/* Send a file's bytes on `stream` under the agent's credit. */
static void send_stream(int fd, uint32_t stream, const char *what)
{
	static uint8_t buf[FRAME_DATA_CHUNK];
	uint64_t credit = FRAME_INITIAL_CREDIT;
	struct frame fr;

	for (;;) {
		size_t want = credit < sizeof buf ? (size_t)credit : sizeof buf;
		ssize_t r;

		if (want == 0 || c.wlen - c.woff > 4 * FRAME_DATA_CHUNK) {
			if (wait_frame(&fr) && fr.type == F_CREDIT && fr.stream == stream) {
				uint64_t b = 0;
				struct tlv_r rd;
				uint8_t tag;
				const uint8_t *v;
				uint32_t l;

				tlv_rinit(&rd, fr.payload, fr.len);
				while (tlv_next(&rd, &tag, &v, &l) == 1)
					if (tag == T_BYTES)
						tlv_u64(v, l, &b);
				credit += b;
				continue;
			}
			if (fr.type == F_ERROR)
				fail_frame(&fr, what);
			fail(EX_SYS, "protocol", "vm %s: %s: unexpected frame %u", o.id, what, fr.type);
		}
		r = read(fd, buf, want);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fail(EX_SYS, "io", "%s: read: %s", EXC(what), strerror(errno));
		if (r == 0)
			break;
		if (conn_queue(&c, F_DATA, stream, buf, (size_t)r) < 0)
			fail(EX_SYS, "io", "out of memory");
		credit -= (uint64_t)r;
		if (conn_flush_some(&c) < 0)
			fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
	}
	conn_queue(&c, F_EOF, stream, NULL, 0);
}

static uint64_t tlv_get_u64(const struct frame *fr, uint8_t want)
{
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l, v32;
	uint64_t v64 = 0;

	tlv_rinit(&rd, fr->payload, fr->len);
	while (tlv_next(&rd, &tag, &v, &l) == 1) {
		if (tag != want)
			continue;
		if (tlv_u64(v, l, &v64) == 0)
			return v64;
		if (tlv_u32(v, l, &v32) == 0)
			return v32;
	}
	return 0;
}

static void copy_in(json_t *list)
{
	for (int i = 0; i < o.nin; i++) {
		uint8_t buf[4200];
		struct tlv_w w;
		struct stat st;
		struct frame fr;
		char sha[65];
		int fd = open(o.in[i].host, O_RDONLY | O_CLOEXEC);

		if (fd < 0 || fstat(fd, &st) < 0)
			fail(EX_USAGE, "io", "--copy-in %s: %s", EXC(o.in[i].host), strerror(errno));
		tlv_init(&w, buf, sizeof buf);
		tlv_put_str(&w, T_PATH, o.in[i].guest);
		tlv_put_u32(&w, T_MODE, st.st_mode & 0777);
		conn_queue(&c, F_FILE_PUT, STREAM_CTL, buf, w.len);
		send_stream(fd, STREAM_FILE, o.in[i].host);
		close(fd);
		do
			wait_frame(&fr);
		while (fr.type == F_CREDIT);
		if (fr.type != F_FILE_DONE)
			fail_frame(&fr, o.in[i].guest);
		if (sha256_file(o.in[i].host, sha) < 0)
			sha[0] = 0;
		json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s}", "host", o.in[i].host,
						      "guest", o.in[i].guest,
						      "bytes", (json_int_t)tlv_get_u64(&fr, T_BYTES),
						      "sha256", sha));
	}
}

/* One copy-out that did not happen: an error entry and a warning. */
static void copy_out_failed(json_t *list, const char *guest, const char *dst, const char *why)
{
	json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "guest", guest, "host", dst,
					      "error", why));
	json_array_append_new(warnings, json_sprintf("copy-out %s failed: %s", guest, why));
}

static void copy_out(json_t *list)
{
	char stopped[256] = ""; /* set once the vm was stopped: nothing more comes */
	uint64_t total = 0;

	for (int i = 0; i < o.nout; i++) {
		char dst[PATH_MAX], tmp[PATH_MAX], sha[65], why[600];
		const char *base = strrchr(o.out[i].guest, '/') + 1;
		uint8_t buf[4200];
		unsigned char h[crypto_hash_sha256_BYTES];
		crypto_hash_sha256_state st;
		struct tlv_w w;
		struct stat sb;
		struct frame fr;
		uint64_t bytes = 0, room = (uint64_t)o.copy_out_max - total;
		int fd, got;

		if (stat(o.out[i].host, &sb) == 0 && S_ISDIR(sb.st_mode))
			pathf(dst, sizeof dst, "%s/%s", o.out[i].host, *base ? base : "out");
		else
			pathf(dst, sizeof dst, "%s", o.out[i].host);
		if (stopped[0]) {
			copy_out_failed(list, o.out[i].guest, dst, stopped);
			continue;
		}
		pathf(tmp, sizeof tmp, "%s.isopod-tmp.%ld", dst, (long)getpid());
		/* BYTES: the agent refuses a larger file before sending any of it. */
		tlv_init(&w, buf, sizeof buf);
		tlv_put_str(&w, T_PATH, o.out[i].guest);
		tlv_put_u64(&w, T_BYTES, room);
		conn_queue(&c, F_FILE_GET, STREAM_CTL, buf, w.len);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		crypto_hash_sha256_init(&st);
		why[0] = 0;
		while ((got = wait_frame(&fr)) == 1) {
			if (fr.type == F_DATA && fr.stream == STREAM_FILE) {
				/* More than the agent may send (the host's own cap: a
				 * guest controls the agent) ends the copy-out here. */
				if (fr.len > room - bytes) {
					snprintf(why, sizeof why, "the guest sent more than the %llu bytes "
						 "allowed (--copy-out-max %lld)", (unsigned long long)room,
						 o.copy_out_max);
					break;
				}
				if (fd >= 0 && write_all(fd, fr.payload, fr.len) < 0) {
					close(fd);
					fd = -1;
				}
				crypto_hash_sha256_update(&st, fr.payload, fr.len);
				bytes += fr.len;
				continue;
			}
			if (fr.type == F_EOF)
				continue;
			break;
		}
		if (got == 0)
			snprintf(why, sizeof why, "%s", o.copy_why);
		if (why[0]) {
			/* Nothing can cancel a FILE_GET: the vm is stopped, which ends
			 * this copy-out and the ones after it. */
			if (fd >= 0)
				close(fd);
			unlink(tmp);
			if (kill_vm() < 0)
				fail_not_stopped("a copy-out had to be ended");
			snprintf(stopped, sizeof stopped, "not copied: the vm was stopped during "
				 "copy-out (%.180s)", why);
			copy_out_failed(list, o.out[i].guest, dst, why);
			continue;
		}
		total += bytes;
		if (fr.type != F_FILE_DONE) {
			char kind[64], msg[512];

			frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
			if (fd >= 0)
				close(fd);
			unlink(tmp);
			copy_out_failed(list, o.out[i].guest, dst, msg);
			continue;
		}
		if (fd < 0 || fchmod(fd, (mode_t)tlv_get_u64(&fr, T_MODE) & 0777) < 0 || fsync(fd) < 0 ||
		    close(fd) < 0 || rename(tmp, dst) < 0) {
			int e = errno;

			unlink(tmp);
			json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "guest", o.out[i].guest,
							      "host", dst, "error", strerror(e)));
			json_array_append_new(warnings, json_sprintf("copy-out %s to %s failed: %s",
								     o.out[i].guest, dst, strerror(e)));
			continue;
		}
		crypto_hash_sha256_final(&st, h);
		for (int k = 0; k < 32; k++)
			sprintf(sha + 2 * k, "%02x", h[k]);
		json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s}", "guest", o.out[i].guest,
						      "host", dst, "bytes", (json_int_t)bytes,
						      "sha256", sha));
	}
	if (stopped[0])
		c.wlen = c.woff = 0; /* nothing to flush to a stopped vm */
}

static void open_logs(struct outstream *s)
{
	int n, lk;
	char lp[PATH_MAX];

	/* Exec numbers come from the files already there, under a lock that
	 * also serialises execs in one VM (one agent client at a time). */
	pathf(lp, sizeof lp, "%s/exec.lock", o.dir);
	lk = lock_open(lp, LOCK_EX | LOCK_NB);
	if (lk < 0) {
		if (errno == EWOULDBLOCK)
			fail(EX_CONFLICT, "busy", "vm %s: another isopod-exec is running in it", o.id);
		fail(EX_SYS, "io", "%s: %s", lp, strerror(errno));
	}
	for (n = 1;; n++) {
		pathf(s[0].path, sizeof s[0].path, "%s/exec-%d.stdout", o.dir, n);
		pathf(s[1].path, sizeof s[1].path, "%s/exec-%d.stderr", o.dir, n);
		s[0].fd = open(s[0].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s[0].fd >= 0)
			break;
		if (errno != EEXIST || n > 100000)
			fail(EX_SYS, "io", "%s: %s", s[0].path, strerror(errno));
	}
	s[1].fd = open(s[1].path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (s[1].fd < 0)
		fail(EX_SYS, "io", "%s: %s", s[1].path, strerror(errno));
	for (int i = 0; i < 2; i++) {
		s[i].inband = malloc(INBAND_MAX);
		if (!s[i].inband)
			fail(EX_SYS, "io", "out of memory");
	}
	/* lk stays open (CLOEXEC) until we exit. */
}

static void take_output(struct outstream *s, const struct frame *fr)
{
	if (s->inlen < INBAND_MAX) {
		size_t k = fr->len < INBAND_MAX - s->inlen ? fr->len : INBAND_MAX - s->inlen;

		memcpy(s->inband + s->inlen, fr->payload, k);
		s->inlen += k;
	}
	s->bytes += fr->len;
	if (write_all(s->fd, fr->payload, fr->len) < 0)
		fail(EX_SYS, "io", "%s: %s", s->path, strerror(errno));
}

/* Print the result: the command's status and what came of its output. */
static void emit_result(int32_t exit_code, uint32_t sig, uint32_t timed_out, const char *kind,
			const char *msg, json_t *copied_out, int64_t exec_ms)
{
	json_t *res;

	for (int i = 0; i < 2; i++)
		if (fsync(out[i].fd) < 0 && errno != EINVAL)
			fail(EX_SYS, "io", "%s: %s", out[i].path, strerror(errno));
	res = json_pack("{s:b, s:{s:s, s:s}, s:i, s:o, s:b}", "ok", 1, "vm", "id", o.id, "name",
			o.name, "exit_code", (int)exit_code,
			"signal", sig ? json_integer(sig) : json_null(),
			"timed_out", (int)timed_out);
	if (kind[0]) {
		json_object_set_new(res, "error_kind",
				    utf8_json((const uint8_t *)kind, strlen(kind), 0));
		json_object_set_new(res, "error", utf8_json((const uint8_t *)msg, strlen(msg), 0));
	}
	for (int i = 0; i < 2; i++) {
		struct outstream *s = &out[i];
		char k[32];

		json_object_set_new(res, s->name, utf8_json(s->inband, s->inlen, s->bytes > s->inlen));
		snprintf(k, sizeof k, "%s_bytes", s->name);
		json_object_set_new(res, k, json_integer((json_int_t)s->bytes));
		snprintf(k, sizeof k, "%s_truncated", s->name);
		json_object_set_new(res, k, json_boolean(s->bytes > s->inlen));
		snprintf(k, sizeof k, "%s_log", s->name);
		json_object_set_new(res, k, json_string(s->path));
		if (!s->eof)
			json_array_append_new(warnings, json_sprintf("%s: no end-of-stream from the agent",
								     s->name));
	}
	json_object_set_new(res, "copied_in", copied_in ? copied_in : json_array());
	json_object_set_new(res, "copied_out", copied_out);
	json_object_set(res, "warnings", warnings);
	json_object_set_new(res, "exec_ms", json_integer(exec_ms));
	json_emit(res);
}

/* The deadline passed and its grace too, with no EXIT from the agent: the
 * guest is too starved (or too broken) to end the command, so the host ends
 * it, by stopping the VM: a timeout like any other (timed_out, signal 9,
 * 137, the output received so far), with a warning saying the guest did not
 * answer.  Copy-outs are not attempted: their VM is gone. */
static void deadline_passed(void)
{
	json_t *copied_out = json_array();

	if (kill_vm() < 0)
		fail_not_stopped("the --timeout-ms deadline passed");
	json_array_append_new(warnings,
		json_sprintf("the guest did not report the command's end within %d ms of the "
			     "--timeout-ms deadline; the host stopped the vm", DEADLINE_GRACE_MS));
	for (int i = 0; i < o.nout; i++) {
		json_array_append_new(copied_out, json_pack("{s:s, s:s, s:s}", "guest", o.out[i].guest,
							    "host", o.out[i].host, "error",
							    "not copied: the vm was stopped at the deadline"));
		json_array_append_new(warnings, json_sprintf("copy-out %s not done: the vm was stopped "
							     "at the deadline", o.out[i].guest));
	}
	emit_result(128 + 9, 9, 1, "", "", copied_out, t_exec ? mono_ms() - t_exec : 0);
	exit(EX_GUEST);
}

/* --stdin-file: the command's stdin, or -1 (none: EOF at once). */
static int open_stdin(void)
{
	int fd;

	if (!o.stdin_file)
		return -1;
	fd = strcmp(o.stdin_file, "-") ? open(o.stdin_file, O_RDONLY | O_CLOEXEC) : dup(0);
	if (fd < 0)
		fail(EX_USAGE, "io", "--stdin-file %s: %s", EXC(o.stdin_file), strerror(errno));
	/* No O_NONBLOCK: on a dup of fd 0 it would change the caller's own
	 * stdin.  We read only after poll says readable, and one read returns
	 * what a pipe or tty has without waiting for more. */
	return fd;
}

/* Connecting and the handshake wait no longer than the deadline's grace
 * either: past it, as for copy-in, the budget is spent (a timeout, the vm
 * stopped); before it, a failure is the infrastructure's. */
static void connect_agent(void)
{
	struct hello h = {0};

	if (conn_open(&c, o.agent_sock, before_deadline(10000)) < 0) {
		if (o.deadline_ms && mono_ms() >= o.deadline_ms + DEADLINE_GRACE_MS)
			deadline_passed();
		fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
	}
	last_rx = mono_ms();
	if (conn_hello(&c, &h, before_deadline(o.watchdog_ms)) < 0) {
		if (o.deadline_ms && mono_ms() >= o.deadline_ms + DEADLINE_GRACE_MS)
			deadline_passed();
		fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
	}
	last_rx = mono_ms();
}

/* The request: argv, env, cwd, timeout, stdin.  Sized from the arguments;
 * the frame cap bounds it. */
static void send_exec(int has_stdin)
{
	uint8_t *req = malloc(FRAME_MAX_PAYLOAD);
	struct tlv_w w;

	if (!req)
		fail(EX_SYS, "io", "out of memory");
	tlv_init(&w, req, FRAME_MAX_PAYLOAD);
	if (o.shell) {
		tlv_put_str(&w, T_ARG, "/bin/sh");
		tlv_put_str(&w, T_ARG, "-c");
	}
	for (int i = 0; i < o.argc; i++)
		tlv_put_str(&w, T_ARG, o.argv[i]);
	for (int i = 0; i < o.nproxy; i++)
		tlv_put_str(&w, T_ENV, o.proxy_env[i]);
	for (int i = 0; i < o.nenv; i++)
		tlv_put_str(&w, T_ENV, o.env[i]);
	if (o.cwd)
		tlv_put_str(&w, T_CWD, o.cwd);
	if (o.timeout_ms) {
		int64_t left = o.timeout_ms - (mono_ms() - o.t0);

		tlv_put_u64(&w, T_TIMEOUT_MS, (uint64_t)(left > 1 ? left : 1));
	}
	tlv_put_u32(&w, T_STDIN, has_stdin);
	if (w.err)
		fail(EX_USAGE, "bad_request", "the command line and environment exceed %u bytes",
		     FRAME_MAX_PAYLOAD);
	conn_queue(&c, F_EXEC, STREAM_CTL, req, w.len);
	free(req);
}

/* What the agent's EXIT said. */
struct exit_status {
	int32_t code;
	uint32_t sig, timed_out;
	char kind[64], msg[1024];
};

/* An exit status is 0..255 and a signal 1..64: anything else is a broken
 * (or lying) agent, not a result to pass on. */
static void take_exit(const struct frame *fr, struct exit_status *ex)
{
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l, u;

	tlv_rinit(&rd, fr->payload, fr->len);
	while (tlv_next(&rd, &tag, &v, &l) == 1) {
		if (tag == T_EXIT_CODE && tlv_u32(v, l, &u) == 0)
			ex->code = (int32_t)u;
		else if (tag == T_SIGNAL)
			tlv_u32(v, l, &ex->sig);
		else if (tag == T_TIMED_OUT)
			tlv_u32(v, l, &ex->timed_out);
		else if (tag == T_ERROR_KIND && tlv_str(v, l, ex->kind, sizeof ex->kind) < 0)
			ex->kind[0] = 0;
		else if (tag == T_MESSAGE && tlv_str(v, l, ex->msg, sizeof ex->msg) < 0)
			ex->msg[0] = 0;
	}
	if (ex->code < 0 || ex->code > 255 || ex->sig > 64 || ex->timed_out > 1)
		fail(EX_SYS, "protocol", "vm %s: the agent reported exit code %d, signal %u, "
		     "timed_out %u (want 0..255, 0..64, 0|1)", o.id, (int)ex->code, ex->sig,
		     ex->timed_out);
}

/* The frames received so far: output to the logs, credit for stdin.  1
 * once EXIT came (ex filled), else 0. */
static int take_frames(uint64_t *credit, struct exit_status *ex)
{
	struct frame fr;
	int r;

	while ((r = conn_next(&c, &fr)) == 1) {
		last_rx = mono_ms();
		switch (fr.type) {
		case F_DATA:
			if (fr.stream == STREAM_STDOUT || fr.stream == STREAM_STDERR)
				take_output(&out[fr.stream - STREAM_STDOUT], &fr);
			break;
		case F_EOF:
			if (fr.stream == STREAM_STDOUT || fr.stream == STREAM_STDERR)
				out[fr.stream - STREAM_STDOUT].eof = 1;
			break;
		case F_CREDIT:
			if (fr.stream == STREAM_STDIN)
				*credit += tlv_get_u64(&fr, T_BYTES);
			break;
		case F_PONG:
			break;
		case F_EXIT:
			take_exit(&fr, ex);
			return 1;
		case F_ERROR:
			fail_frame(&fr, "exec");
		default:
			fail(EX_SYS, "protocol", "vm %s: unexpected frame type %u during exec",
			     o.id, fr.type);
		}
	}
	if (r < 0)
		fail(EX_SYS, "protocol", "vm %s: %s", o.id, c.err);
	return 0;
}

/* stdin is readable: pass what it has, within the credit; EOF (or a read
 * error, warned) ends the guest's stdin. */
static void feed_stdin(int fd, int *eof, uint64_t *credit)
{
	uint8_t buf[FRAME_DATA_CHUNK];
	size_t want = *credit < sizeof buf ? (size_t)*credit : sizeof buf;
	ssize_t n = read(fd, buf, want);

	if (n > 0) {
		conn_queue(&c, F_DATA, STREAM_STDIN, buf, (size_t)n);
		*credit -= (uint64_t)n;
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		if (n < 0)
			json_array_append_new(warnings, json_sprintf("stdin: read: %s", strerror(errno)));
		conn_queue(&c, F_EOF, STREAM_STDIN, NULL, 0);
		*eof = 1;
	}
}

/* The command runs: output in, stdin out, pings, the deadline and the
 * watchdog, until the agent's EXIT. */
static void run_command(int stdin_fd, struct exit_status *ex)
{
	int stdin_eof = stdin_fd < 0;
	uint64_t credit = FRAME_INITIAL_CREDIT;

	while (!take_frames(&credit, ex)) {
		struct pollfd p[2];
		int np = 1, r;
		int64_t now = mono_ms();

		/* stdin, under credit, and only while our queue is short. */
		if (!stdin_eof && credit > 0 && c.wlen - c.woff < 4 * FRAME_DATA_CHUNK) {
			p[1].fd = stdin_fd;
			p[1].events = POLLIN;
			p[1].revents = 0;
			np = 2;
		}
		if (conn_flush_some(&c) < 0)
			fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
		p[0].fd = c.fd;
		p[0].events = POLLIN | (c.woff < c.wlen ? POLLOUT : 0);
		p[0].revents = 0;
		if (o.deadline_ms && now >= o.deadline_ms + DEADLINE_GRACE_MS)
			deadline_passed();
		if (now - last_rx >= o.watchdog_ms)
			watchdog_fired();
		if (poll(p, (nfds_t)np, (int)(next_tick() - now > 0 ? next_tick() - now : 0)) < 0 &&
		    errno != EINTR)
			fail(EX_SYS, "io", "poll: %s", strerror(errno));
		if (mono_ms() - last_rx >= o.ping_ms)
			conn_queue(&c, F_PING, STREAM_CTL, NULL, 0);
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = conn_fill(&c);
			if (r == -2)
				fail(EX_SYS, "agent", "vm %s: the guest agent closed the connection "
				     "during exec (did the vm stop?)", o.id);
			if (r < 0)
				fail(EX_SYS, "agent", "vm %s: %s", o.id, c.err);
		}
		if (np == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			feed_stdin(stdin_fd, &stdin_eof, &credit);
	}
}

int main(int argc, char **argv)
{
	struct exit_status ex = {.code = -1};
	json_t *copied_out;
	int stdin_fd;
	int64_t exec_ms;

	progname = "isopod-exec";
	signal(SIGPIPE, SIG_IGN);
	if (sodium_init() < 0)
		die(EX_SYS, "unable to initialise libsodium");
	warnings = json_array();
	parse_args(argc, argv);
	/* The budget starts once the vm is known: in `claim | boot | exec` the
	 * JSON on stdin arrives after the boot, which is not the command's time
	 * (the front end passes --vm and what is left of its own budget).  The
	 * agent enforces the timeout in the guest; the host enforces it too,
	 * from this start: a guest too starved to act on its timer (a fork bomb)
	 * must not stretch the caller's budget into the watchdog's. */
	o.t0 = mono_ms();
	if (o.timeout_ms)
		o.deadline_ms = o.t0 + o.timeout_ms;
	stdin_fd = open_stdin();
	open_logs(out);
	connect_agent();
	copied_in = json_array();
	copy_in(copied_in);
	send_exec(stdin_fd >= 0);
	t_exec = mono_ms();
	run_command(stdin_fd, &ex);
	exec_ms = mono_ms() - t_exec;

	/* The command has ended: copy-out gets what is left of its budget and a
	 * fixed allowance, no more. */
	if (o.deadline_ms)
		o.copy_deadline_ms = (mono_ms() > o.deadline_ms ? mono_ms() : o.deadline_ms) +
				     COPY_OUT_GRACE_MS;
	o.deadline_ms = 0;
	o.copying_out = 1;
	copied_out = json_array();
	copy_out(copied_out);
	if (conn_flush(&c, mono_ms() + 5000) < 0)
		json_array_append_new(warnings, json_sprintf("agent: %s", c.err));
	conn_close(&c);
	emit_result(ex.code, ex.sig, ex.timed_out, ex.kind, ex.msg, copied_out, exec_ms);
	return ex.code == 0 && !ex.timed_out ? EX_OK : EX_GUEST;
}
