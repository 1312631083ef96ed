/* exec_test.c - one command's parts that need no VM (lib/execopt.c) and its
 * session (lib/execio.c) against a fake agent on a unix socket: output,
 * EXIT, copy-in/out, the host's copy-out cap, the watchdog and the
 * deadline, a lying EXIT (a directory copied out: exectree_test.c). */
#include "execfake.h"

static void test_session(void)
{
	struct exec_session s;
	struct exec_status ex = {.code = -1};
	json_t *res, *in = json_array(), *out = json_array();
	struct exec_copy cin = {.host = "/etc/hostname", .guest = "/tmp/h"};
	char host[128];
	struct exec_copy cout;
	pid_t pid;
	int r;

	snprintf(host, sizeof host, "%s/got", dir);
	cout = (struct exec_copy){.host = host, .guest = "/tmp/x"};
	r = start(&s, A_COPY, &pid);
	ok(r == 0, "session: logs opened, connected and shook hands (%d %s)", r, s.err);
	ok(exec_copy_in(&s, &cin, 1, in) == 0 && json_array_size(in) == 1,
	   "session: a copy-in is acknowledged and listed");
	ok(exec_send(&s, &req) == 0 && s.t_exec > 0, "session: EXEC sent");
	ok(exec_run(&s, -1, &ex) == 0 && ex.code == 3 && ex.sig == 0 && !ex.timed_out,
	   "session: the agent's EXIT is the status (code %d)", ex.code);
	ok(s.out[0].bytes == 3 && !memcmp(s.out[0].inband, "hi\n", 3) && s.out[0].eof &&
	   s.out[1].eof, "session: stdout reached the in-band buffer, both streams ended");
	ok(exec_copy_out(&s, &cout, 1, out) == 0 && access(host, F_OK) == 0,
	   "session: a copy-out lands at its host path");
	res = exec_result(&s, "name", &ex, in, out, 5);
	ok(res && json_integer_value(json_object_get(res, "exit_code")) == 3 &&
	   !strcmp(json_string_value(json_object_get(res, "stdout")), "hi\n") &&
	   json_integer_value(json_object_get(res, "stdout_bytes")) == 3 &&
	   json_is_false(json_object_get(res, "stdout_truncated")) &&
	   json_is_false(json_object_get(res, "stdout_log_truncated")) &&
	   json_is_null(json_object_get(res, "signal")) &&
	   json_integer_value(json_object_get(json_array_get(json_object_get(res, "copied_out"), 0),
					      "bytes")) == 4 &&
	   json_array_size(json_object_get(res, "warnings")) == 0,
	   "session: the result carries the status, the output, the copies, no warning");
	json_decref(res);
	stop(&s, pid);
	unlink(host);
}

/* The host's own cap on a copy-out: a guest that sends more than asked
 * ends the copy-out (the vm is stopped), nothing lands on the host. */
static void test_flood(void)
{
	struct exec_session s;
	struct exec_status ex = {.code = -1};
	json_t *out = json_array();
	char host[128];
	struct exec_copy cout;
	const char *err;
	pid_t pid;

	snprintf(host, sizeof host, "%s/flood", dir);
	cout = (struct exec_copy){.host = host, .guest = "/tmp/x"};
	start(&s, A_FLOOD, &pid);
	s.copy_out_max = 10;
	exec_send(&s, &req);
	exec_run(&s, -1, &ex);
	ok(exec_copy_out(&s, &cout, 1, out) == 0, "flood: copy-out ends without failing");
	err = json_string_value(json_object_get(json_array_get(out, 0), "error"));
	ok(err && strstr(err, "more than the 10 bytes") && access(host, F_OK) < 0,
	   "flood: over --copy-out-max is an error entry, no file (%s)", err ? err : "none");
	json_decref(out);
	stop(&s, pid);
}

/* An older agent's CREDIT for stdin after EXIT (and a stray PONG): not
 * the reply to the first FILE_GET, so each copy-out gets its own file. */
static void test_stale_credit(void)
{
	struct exec_copy cout[2];
	char h0[128], h1[128];
	struct stat s0, s1;
	json_t *out;
	int r;

	snprintf(h0, sizeof h0, "%s/stale0", dir);
	snprintf(h1, sizeof h1, "%s/stale1", dir);
	cout[0] = (struct exec_copy){.host = h0, .guest = "/tmp/a"};
	cout[1] = (struct exec_copy){.host = h1, .guest = "/tmp/b"};
	out = copy_out_run(A_STALE, cout, 2, 0, &r);
	ok(r == 0 && !entry_error(out, 0) && !entry_error(out, 1) && stat(h0, &s0) == 0 &&
		   s0.st_size == 4 && stat(h1, &s1) == 0 && s1.st_size == 4,
	   "a CREDIT and a PONG after EXIT: skipped, both copy-outs land (%s)",
	   entry_error(out, 0) ? entry_error(out, 0) : "no error");
	json_decref(out);
	unlink(h0);
	unlink(h1);
}

/* A copy-out's destination, HOST: a directory there is copied into (the
 * file under its own name), a file there replaced, and a symlink there
 * never followed, not even one swapped in for the directory after it was
 * looked at (the race a user who can write beside HOST could run). */
static void test_dest(void)
{
	json_t *out;
	char host[128], victim[128], p[200], slashed[208];
	struct exec_copy cout;
	const char *err;
	struct stat sb;
	int fd, r;

	snprintf(host, sizeof host, "%s/dest", dir);
	snprintf(victim, sizeof victim, "%s/victim", dir);
	mkdir(host, 0700);
	mkdir(victim, 0700);
	cout = (struct exec_copy){.host = host, .guest = "/tmp/x"};

	out = copy_out_run(A_COPY, &cout, 1, 0, &r);
	snprintf(p, sizeof p, "%s/x", host);
	ok(r == 0 && stat(p, &sb) == 0 && sb.st_size == 4 && !entry_error(out, 0),
	   "dest: into a directory, under the file's own name");
	json_decref(out);

	cout.host = p; /* HOST/x is a file now: replaced */
	fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd >= 0)
		close(fd);
	out = copy_out_run(A_COPY, &cout, 1, 0, &r);
	ok(r == 0 && stat(p, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 4 &&
	   !entry_error(out, 0), "dest: a file there is replaced");
	json_decref(out);

	/* the directory swapped for a symlink to victim as it is opened */
	cout.host = host;
	swap_path = host;
	swap_to = victim;
	out = copy_out_run(A_COPY, &cout, 1, 0, NULL);
	err = entry_error(out, 0);
	snprintf(p, sizeof p, "%s/x", victim);
	ok(!swap_path && access(p, F_OK) < 0 && lstat(host, &sb) == 0 && S_ISLNK(sb.st_mode) &&
	   err && strstr(err, "symlink"),
	   "dest: a directory made a symlink as it is opened is not entered, nothing in "
	   "its target, the symlink left (%s)", err ? err : "none");
	json_decref(out);

	/* a symlink to a directory there all along: the same */
	unlink(p);
	out = copy_out_run(A_COPY, &cout, 1, 0, NULL);
	err = entry_error(out, 0);
	ok(access(p, F_OK) < 0 && err && strstr(err, "symlink"),
	   "dest: a symlink to a directory is not entered (%s)", err ? err : "none");
	json_decref(out);

	/* the same symlink named with a trailing slash: the kernel resolves a
	 * symlink before a trailing slash even under O_NOFOLLOW, so "HOST/"
	 * must be taken as HOST, a directory, and refused the same */
	snprintf(slashed, sizeof slashed, "%s/", host);
	cout.host = slashed;
	out = copy_out_run(A_COPY, &cout, 1, 0, NULL);
	err = entry_error(out, 0);
	ok(access(p, F_OK) < 0 && lstat(host, &sb) == 0 && S_ISLNK(sb.st_mode) && err &&
	   strstr(err, "not a directory") && strstr(err, "symlink"),
	   "dest: HOST/ with HOST a symlink to a directory is not entered, nothing in its "
	   "target (%s)", err ? err : "none");
	json_decref(out);
	{
		struct exec_copy c2 = {.host = slashed, .guest = "/tmp/x"};
		char why[512];

		ok(exec_check_paths(NULL, NULL, 0, &c2, 1, why, sizeof why) < 0 &&
		   strstr(why, "not a directory"), "--check: HOST/ a symlink is refused before "
		   "the run (%s)", why);
	}

	/* HOST/ a real directory: into it, the path shown without "//" */
	snprintf(slashed, sizeof slashed, "%s//", victim);
	cout.host = slashed;
	out = copy_out_run(A_COPY, &cout, 1, 0, &r);
	ok(r == 0 && stat(p, &sb) == 0 && sb.st_size == 4 &&
	   !strcmp(json_string_value(json_object_get(json_array_get(out, 0), "host")) ?: "", p),
	   "dest: HOST// a directory: the file lands in it as %s",
	   json_string_value(json_object_get(json_array_get(out, 0), "host")) ?: "?");
	json_decref(out);
	unlink(p);

	/* HOST/ absent or a file: refused, nothing made there */
	snprintf(p, sizeof p, "%s/none", dir);
	snprintf(slashed, sizeof slashed, "%s/", p);
	cout.host = slashed;
	out = copy_out_run(A_COPY, &cout, 1, 0, NULL);
	err = entry_error(out, 0);
	ok(access(p, F_OK) < 0 && err, "dest: HOST/ absent: refused, no file HOST (%s)",
	   err ? err : "none");
	json_decref(out);
}

/* A destination directory the user cannot write (EACCES): tests run as
 * root, who writes anywhere, so the copy-out runs with the effective ids
 * of nobody (65534) against a root-owned 0755 directory: a file's and a
 * tree's copy-out each recorded with the errno said as it is, nothing
 * left there (no temporary file). */
static void test_dest_eacces(void)
{
	static const int modes[2] = { A_COPY, A_TREE };
	char ro[128];

	if (geteuid() != 0) {
		ok(1, "# SKIP dest EACCES: not root (the ids cannot be changed)");
		return;
	}
	snprintf(ro, sizeof ro, "%s/ro", dir);
	chmod(dir, 0711); /* nobody may pass through the test's directory */
	for (int i = 0; i < 2; i++) {
		struct exec_copy cout = {.host = ro, .guest = "/tmp/x"};
		const char *err;
		json_t *out;
		int r;

		mkdir(ro, 0755);
		out = copy_out_run(modes[i], &cout, 1, 1, &r);
		err = entry_error(out, 0);
		/* rmdir: the directory is empty, no file, no temporary */
		ok(r == 0 && err && strstr(err, strerror(EACCES)) && rmdir(ro) == 0,
		   "dest EACCES: a %s copy-out into a directory nobody cannot write is recorded "
		   "with that errno, nothing left there (%s)", i ? "tree" : "file",
		   err ? err : "none");
		json_decref(out);
	}
	chmod(dir, 0700);
}

/* A copy-in's file replaced on the host between its open and its send
 * (a racing writer renames other bytes over the path): the recorded
 * sha256 and bytes are those the guest received, the bytes sent, not
 * what the path holds by the time the copy is acknowledged. */
static void test_copy_in_race(void)
{
	struct exec_session s;
	json_t *in = json_array(), *e;
	char host[128], repl[128], got[128], want[65], now[65];
	struct exec_copy cin;
	pid_t pid;
	int fd, r;

	snprintf(host, sizeof host, "%s/in", dir);
	snprintf(repl, sizeof repl, "%s/in.new", dir);
	snprintf(got, sizeof got, "%s/guest-got", dir);
	fd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ok(fd >= 0 && write_all(fd, "the bytes sent\n", 15) == 0 && close(fd) == 0,
	   "race: the copy-in file");
	fd = open(repl, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ok(fd >= 0 && write_all(fd, "other bytes, put there after the open\n", 38) == 0 &&
	   close(fd) == 0, "race: the bytes the racing writer puts there");
	cin = (struct exec_copy){.host = host, .guest = "/tmp/in"};
	start(&s, A_COPY, &pid);
	swap_path = host;
	swap_to = repl;
	swap_after = 1;
	r = exec_copy_in(&s, &cin, 1, in);
	swap_after = 0;
	stop(&s, pid); /* the agent has written guest-got: it answered FILE_DONE */
	e = json_array_get(in, 0);
	ok(r == 0 && !swap_path && sha256_file(got, want) == 0 && sha256_file(host, now) == 0 &&
	   strcmp(want, now), "race: the path changed after the open (%d %s)", r, s.err);
	ok(!strcmp(json_string_value(json_object_get(e, "sha256")) ?: "", want) &&
	   json_integer_value(json_object_get(e, "bytes")) == 15,
	   "race: the recorded sha256 is of the bytes the guest received (%.16s, the guest's "
	   "%.16s, the path's now %.16s)", json_string_value(json_object_get(e, "sha256")) ?: "-",
	   want, now);
	json_decref(in);

	/* an agent that says it wrote less than was sent: the digest would
	 * not name what the guest holds, so the copy-in fails */
	in = json_array();
	start(&s, A_SHORT, &pid);
	r = exec_copy_in(&s, &cin, 1, in);
	ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") && json_array_size(in) == 0,
	   "race: an agent that wrote fewer bytes than sent is a protocol failure (%s)", s.err);
	stop(&s, pid);
	json_decref(in);
	unlink(host);
	unlink(got);
}

/* A directory copy-in whose FILE_DONE comes after CREDITs (the agent's
 * grants for the last bytes): the CREDITs are passed over, not taken as
 * the reply. */
static void test_tree_in_credit(void)
{
	struct exec_session s;
	char sub[128], f[160];
	struct exec_copy cin = {.host = sub, .guest = "/root/t"};
	json_t *in = json_array();
	pid_t pid;
	int fd, r;

	snprintf(sub, sizeof sub, "%s/tree-in", dir);
	snprintf(f, sizeof f, "%s/f", sub);
	if (mkdir(sub, 0700) < 0 || (fd = open(f, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
	    write_all(fd, "x", 1) < 0 || close(fd) < 0)
		abort();
	start(&s, A_CREDIT_LATE, &pid);
	r = exec_copy_in(&s, &cin, 1, in);
	ok(r == 0 && json_array_size(in) == 1,
	   "tree in: CREDITs before FILE_DONE are passed over (%d %s)", r, s.err);
	stop(&s, pid);
	json_decref(in);
	unlink(f);
	rmdir(sub);
}

static void *no_malloc(size_t n)
{
	(void)n;
	return NULL;
}

/* A directory copy-in whose list cannot be made (out of memory): the
 * directory's descriptor is closed, the error a fixed message (the walk,
 * never opened, has none to give). */
static void test_tree_in_nomem(void)
{
	struct exec_session s;
	struct exec_copy cin = {.host = "/etc", .guest = "/root/etc"};
	json_t *in = json_array();
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r;

	exec_init(&s);
	json_set_alloc_funcs(no_malloc, free);
	r = tree_in(&s, &cin, fd, in);
	json_set_alloc_funcs(malloc, free);
	ok(r == EXEC_FAILED && strstr(s.err, "out of memory") && fcntl(fd, F_GETFD) < 0 &&
	   errno == EBADF, "tree in: no memory for the list: the directory's fd closed, a fixed "
	   "message (%s)", s.err);
	json_decref(in);
	exec_free(&s);
}

/* --log-max: the log keeps the first log_max bytes, the count is all of
 * them, and the result says the log was cut (the stream under it not). */
static void test_log_max(void)
{
	struct exec_session s;
	struct exec_status ex = {.code = -1};
	char got[8] = {0};
	json_t *res;
	pid_t pid;
	int fd;

	start(&s, A_OK, &pid);
	s.log_max = 2;
	exec_send(&s, &req);
	ok(exec_run(&s, -1, &ex) == 0 && s.out[0].bytes == 3, "log-max: all 3 bytes counted");
	fd = open(s.out[0].path, O_RDONLY | O_CLOEXEC);
	ok(fd >= 0 && read(fd, got, sizeof got) == 2 && !strcmp(got, "hi"),
	   "log-max: the log holds the first 2 bytes only (%s)", got);
	if (fd >= 0)
		close(fd);
	res = exec_result(&s, "name", &ex, NULL, json_array(), 1);
	ok(res && json_integer_value(json_object_get(res, "stdout_bytes")) == 3 &&
	   json_is_true(json_object_get(res, "stdout_log_truncated")) &&
	   json_is_false(json_object_get(res, "stderr_log_truncated")),
	   "log-max: stdout_log_truncated true, stderr_log_truncated false");
	json_decref(res);
	stop(&s, pid);
}

static void test_failures(void)
{
	struct exec_session s;
	struct exec_status ex = {.code = -1};
	int64_t t0;
	pid_t pid;
	int r;

	start(&s, A_SILENT, &pid);
	s.watchdog_ms = 300;
	s.ping_ms = 50;
	exec_send(&s, &req);
	t0 = mono_ms();
	r = exec_run(&s, -1, &ex);
	ok(r == EXEC_FAILED && s.err_code == EX_SYS && !strcmp(s.err_kind, "unresponsive") &&
	   mono_ms() - t0 < 5000, "watchdog: a silent agent is unresponsive, 111 (%s)", s.err);
	stop(&s, pid);

	/* Once the deadline has passed, the same silence is the command's
	 * timeout (the caller ends the exec as timed out). */
	start(&s, A_SILENT, &pid);
	s.watchdog_ms = 300;
	s.ping_ms = 50;
	s.deadline_ms = mono_ms() + 10;
	exec_send(&s, &req);
	r = exec_run(&s, -1, &ex);
	ok(r == EXEC_DEADLINE, "deadline: silence after the deadline is a timeout (%d)", r);
	{
		json_t *co = NULL;
		struct exec_copy c = {.host = "/h", .guest = "/g"};

		ok(exec_at_deadline(&s, &c, 1, &co) == 0 && json_array_size(co) == 1 &&
		   json_array_size(s.warnings) == 2, "deadline: copy-outs are error entries, warned");
		json_decref(co);
	}
	stop(&s, pid);

	start(&s, A_BAD_EXIT, &pid);
	exec_send(&s, &req);
	r = exec_run(&s, -1, &ex);
	ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") && s.err_code == EX_SYS,
	   "a lying EXIT (code 256) is a protocol failure, not a result (%s)", s.err);
	stop(&s, pid);

	start(&s, A_REFUSE, &pid);
	exec_send(&s, &req);
	r = exec_run(&s, -1, &ex);
	ok(r == EXEC_FAILED && !strcmp(s.err_kind, "bad_request") && s.err_code == EX_USAGE,
	   "the agent's bad_request is a usage failure, 100 (%s)", s.err);
	stop(&s, pid);

	/* A second session in the same vm is refused while the first runs. */
	{
		struct exec_session a, b;

		exec_init(&a);
		exec_init(&b);
		a.vm_id = b.vm_id = "vm-000000000000";
		ok(exec_open_logs(&a, dir) == 0 && exec_open_logs(&b, dir) == EXEC_FAILED &&
		   b.err_code == EX_CONFLICT && !strcmp(b.err_kind, "busy"),
		   "the exec lock keeps a second exec out (busy, 102)");
		exec_free(&a);
		exec_free(&b);
	}
	/* What the jail could plant as the next stderr log: a hard link to a
	 * file root owns (truncated through it, before) and a FIFO (an open
	 * for writing blocks without a reader: ok_bounded fails the test). */
	{
		struct exec_session a;
		char d[PATH_MAX], p[PATH_MAX + 32], q[PATH_MAX + 32];
		struct stat st;
		int fd;

		snprintf(d, sizeof d, "%s/planted", dir);
		snprintf(p, sizeof p, "%s/exec-1.stderr", d);
		snprintf(q, sizeof q, "%s/precious", d);
		mkdir(d, 0700);
		fd = open(q, O_WRONLY | O_CREAT | O_EXCL, 0600);
		ok(fd >= 0 && write(fd, "keep", 4) == 4 && link(q, p) == 0, "a hard link planted");
		close(fd);
		exec_init(&a);
		a.vm_id = "vm-000000000000";
		ok(exec_open_logs(&a, d) == 0 && stat(q, &st) == 0 && st.st_size == 4 &&
		   st.st_nlink == 1, "the linked file is left whole (%lld bytes)",
		   (long long)st.st_size);
		exec_free(&a);
		unlink(p);
		snprintf(p, sizeof p, "%s/exec-2.stderr", d);
		ok(mkfifo(p, 0600) == 0, "a FIFO planted");
		exec_init(&a);
		a.vm_id = "vm-000000000000";
		ok_bounded(10, exec_open_logs(&a, d) == 0 && lstat(p, &st) == 0 && S_ISREG(st.st_mode),
			   "the FIFO is replaced by a regular file, without blocking");
		exec_free(&a);
	}
}

static void test_opts(void)
{
	char spec[5000], why[4096], env[EXEC_PROXY_MAX][EXEC_PROXY_SZ];
	struct exec_copy cp;
	json_t *net;
	int n;

	strcpy(spec, "a:b:/g/p");
	ok(exec_copy_split(spec, "--copy-in", &cp, 1, why, sizeof why) == 0 &&
	   !strcmp(cp.host, "a:b") && !strcmp(cp.guest, "/g/p"),
	   "copy-in splits at the first ':/' (host %s)", cp.host);
	strcpy(spec, "/g/p:h:x");
	ok(exec_copy_split(spec, "--copy-out", &cp, 0, why, sizeof why) == 0 &&
	   !strcmp(cp.guest, "/g/p") && !strcmp(cp.host, "h:x"), "copy-out splits at the first ':'");
	strcpy(spec, "nocolon");
	ok(exec_copy_split(spec, "--copy-in", &cp, 1, why, sizeof why) < 0 &&
	   strstr(why, "expected HOST:/GUEST/PATH"), "copy-in without ':/' refused: %s", why);
	strcpy(spec, "rel:host");
	ok(exec_copy_split(spec, "--copy-out", &cp, 0, why, sizeof why) < 0 &&
	   strstr(why, "must be absolute"), "copy-out of a relative guest path refused: %s", why);
	memset(spec, 'a', sizeof spec - 1);
	spec[sizeof spec - 1] = 0;
	spec[0] = 'h', spec[1] = ':', spec[2] = '/';
	ok(exec_copy_split(spec, "--copy-in", &cp, 1, why, sizeof why) < 0 &&
	   strstr(why, "too long"), "a guest path of 4096 bytes or more refused");

	ok(!exec_env_invalid("A=") && exec_env_invalid("A") && exec_env_invalid("=v"),
	   "--env: NAME=VALUE with a name");
	ok(!exec_env_invalid("_a1=x=y") && exec_env_invalid("1X=y") && exec_env_invalid("A B=c") &&
	   exec_env_invalid("-A\nB=c") && exec_env_invalid("A-B=c"),
	   "env names: [A-Za-z_][A-Za-z0-9_]*");

	net = json_pack("{s:s, s:s}", "mode", "filtered", "gateway", "10.0.0.1");
	n = exec_proxy_env(net, env);
	ok(n == 6 && !strcmp(env[0], "http_proxy=http://10.0.0.1:3128") &&
	   !strcmp(env[3], "HTTPS_PROXY=http://10.0.0.1:3128") &&
	   !strcmp(env[5], "NO_PROXY=localhost,127.0.0.1,::1"),
	   "a filtered vm's commands get the broker as their proxy (%d)", n);
	json_object_set_new(net, "mode", json_string("learn"));
	ok(exec_proxy_env(net, env) == 6, "a learn vm's commands get it too (its flows go through it)");
	json_object_set_new(net, "mode", json_string("open"));
	ok(exec_proxy_env(net, env) == 0, "an open vm's commands get no proxy");
	json_object_set_new(net, "mode", json_string("filtered"));
	json_object_set_new(net, "gateway", json_string("1234567890.123456"));
	ok(exec_proxy_env(net, env) == 0, "a gateway longer than an IPv4 address is ignored");
	json_decref(net);
	ok(exec_proxy_env(NULL, env) == 0, "no net: no proxy");
}

/* "." or ".." as the name a copy-out would make (the guest's base name
 * into a directory, or HOST's own last component): refused, nothing
 * opened to write. */
static void test_dest_dots(void)
{
	static const char *const cases[][2] = {
		{"/root/..", NULL}, {"/root/.", NULL}, {"/x", "/nonexistent/.."},
		{"/x", "/nonexistent/."}};
	struct exec_dest d;
	char why[256], host[128];

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int r;

		snprintf(host, sizeof host, "%s%s", dir, cases[i][1] ?: "");
		why[0] = 0;
		r = exec_dest_open(host, cases[i][0], &d, why, sizeof why);
		if (r == 0)
			close(d.dfd);
		ok(r == 1 && strstr(why, "names no file"),
		   "dest: %s into %s refused as no file's name (%d, %s)", cases[i][0], host, r, why);
	}
}

static void test_check(void)
{
	char why[4096], h[128];
	struct exec_copy in = {.host = "/nonexistent/in"},
			 out = {.host = "/nonexistent/d/f", .guest = "/g"};
	struct exec_copy ok_out = {.host = h, .guest = "/g"};

	snprintf(h, sizeof h, "%s/new-file", dir);
	ok(exec_check_paths("/nonexistent", NULL, 0, NULL, 0, why, sizeof why) < 0 &&
	   strstr(why, "not a readable file"), "--check: a missing stdin file: %s", why);
	ok(exec_check_paths(dir, NULL, 0, NULL, 0, why, sizeof why) < 0,
	   "--check: a directory as stdin file");
	ok(exec_check_paths("-", NULL, 0, NULL, 0, why, sizeof why) == 0, "--check: stdin '-'");
	ok(exec_check_paths(NULL, &in, 1, NULL, 0, why, sizeof why) < 0 &&
	   strstr(why, "not readable: No such file"), "--check: a missing copy-in: %s", why);
	ok(exec_check_paths(NULL, NULL, 0, &out, 1, why, sizeof why) < 0 &&
	   strstr(why, "no directory /nonexistent/d"), "--check: a copy-out without its directory");
	ok(exec_check_paths(NULL, NULL, 0, &ok_out, 1, why, sizeof why) == 0,
	   "--check: a copy-out to a new file in a directory that exists");
}

static void test_wire(void)
{
	static uint8_t buf[FRAME_MAX_PAYLOAD];
	char *argv[] = { "echo hi", NULL }, *env[] = { "http_proxy=mine", NULL };
	char proxy[1][EXEC_PROXY_SZ] = { "http_proxy=broker" };
	struct exec_request r = {.argv = argv, .argc = 1, .shell = 1,
				 .proxy = (const char (*)[EXEC_PROXY_SZ])proxy, .nproxy = 1,
				 .env = env, .nenv = 1, .cwd = "/w", .timeout_ms = 7, .has_stdin = 1};
	long n = exec_request_encode(&r, buf, sizeof buf);
	struct frame fr;
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l;
	char seq[256] = "", item[64];
	struct exec_status ex = {.code = -1};
	uint8_t eb[128];
	struct tlv_w w;

	tlv_rinit(&rd, buf, (size_t)n);
	while (n > 0 && tlv_next(&rd, &tag, &v, &l) == 1) {
		if (tag == T_ARG || tag == T_ENV || tag == T_CWD)
			snprintf(item, sizeof item, "%u:%.*s|", tag, (int)l, (const char *)v);
		else
			snprintf(item, sizeof item, "%u:%llu|", tag,
				 (unsigned long long)(l == 8 ? get_le64(v) : get_le32(v)));
		strncat(seq, item, sizeof seq - strlen(seq) - 1);
	}
	ok(!strcmp(seq, "9:/bin/sh|9:-c|9:echo hi|10:http_proxy=broker|10:http_proxy=mine|"
			"11:/w|12:7|13:1|"), "EXEC: sh -c, the proxy before --env, cwd, timeout, stdin: %s",
	   seq);
	ok(exec_request_encode(&r, buf, 20) == -1, "EXEC: a request over the cap is refused");

	tlv_init(&w, eb, sizeof eb);
	tlv_put_u32(&w, T_EXIT_CODE, 0);
	tlv_put_u32(&w, T_SIGNAL, 9);
	tlv_put_u32(&w, T_TIMED_OUT, 1);
	tlv_put_str(&w, T_ERROR_KIND, "k");
	fr = (struct frame){.type = F_EXIT, .payload = eb, .len = (uint32_t)w.len};
	ok(exec_status_decode(&fr, &ex) == 0 && ex.code == 0 && ex.sig == 9 && ex.timed_out == 1 &&
	   !strcmp(ex.kind, "k"), "EXIT decodes");
	tlv_put_u32(&w, T_SIGNAL, 65);
	fr.len = (uint32_t)w.len;
	ok(exec_status_decode(&fr, &ex) == -1, "EXIT with signal 65 is refused");
	tlv_init(&w, eb, sizeof eb);
	tlv_put_u32(&w, T_TIMED_OUT, 2);
	fr.len = (uint32_t)w.len;
	ex = (struct exec_status){.code = 0};
	ok(exec_status_decode(&fr, &ex) == -1, "EXIT with timed_out 2 is refused");
	ok(frame_tlv_u64(&fr, T_TIMED_OUT) == 2 && frame_tlv_u64(&fr, T_BYTES) == 0,
	   "a u32 TLV reads widened; an absent one as 0");
}

/* Copy-in through the bulk lane (a fake agent that announces one): the
 * guest gets the bytes, the digest is theirs; without the lane's file, or
 * with no_bulk, the port.  A guest that returns a slot past the lane, one
 * never lent, or one twice ends the copy-in with a protocol failure. */
static void test_bulk(void)
{
	static const size_t sizes[] = { 0, 1, 511, BULK_SLOT, BULK_SLOT + 1, 9 * BULK_SLOT + 13 };
	static const struct { int mode; const char *what; } bad[] = {
		{ A_BULK_OOB, "a slot past the lane" },
		{ A_BULK_UNLENT, "a slot never lent" },
		{ A_BULK_TWICE, "a slot returned twice" },
	};
	struct exec_session s;
	char host[128], lane[128], got[128], want[65], have[65];
	struct exec_copy cin;
	uint8_t *buf = malloc(9 * BULK_SLOT + 13);
	pid_t pid;
	json_t *in;
	int64_t t0;
	int fd, r;

	snprintf(host, sizeof host, "%s/in", dir);
	snprintf(lane, sizeof lane, "%s/bulk.raw", dir);
	snprintf(got, sizeof got, "%s/guest-got", dir);
	cin = (struct exec_copy){.host = host, .guest = "/tmp/in"};
	/* as lib/qemu.c's bulk_file_new makes it: BULK_FILE_BYTES of holes */
	fd = open(lane, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ok(buf && fd >= 0 && ftruncate(fd, (off_t)BULK_FILE_BYTES) == 0 && close(fd) == 0,
	   "bulk: the lane's file");
	for (size_t i = 0; buf && i < 9 * BULK_SLOT + 13; i++)
		buf[i] = (uint8_t)(i * 7 + i / 4099);
	for (size_t k = 0; buf && k < sizeof sizes / sizeof *sizes; k++) {
		fd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write_all(fd, buf, sizes[k]) < 0 || close(fd) < 0)
			abort();
		in = json_array();
		start(&s, A_BULK, &pid);
		r = exec_bulk_open(&s, lane);
		ok(r == 0 && s.bulk_fd >= 0 && s.bulk_n == 8, "bulk %zu: the lane is used", sizes[k]);
		r = exec_copy_in(&s, &cin, 1, in);
		stop(&s, pid);
		ok(r == 0 && sha256_file(got, want) == 0 && sha256_file(host, have) == 0 &&
		   !strcmp(want, have) &&
		   !strcmp(json_string_value(json_object_get(json_array_get(in, 0), "sha256")) ?: "",
			   want) &&
		   json_integer_value(json_object_get(json_array_get(in, 0), "bytes")) ==
			   (json_int_t)sizes[k],
		   "bulk %zu bytes: the guest got them, the digest is theirs (%d %s)", sizes[k], r,
		   s.err);
		json_decref(in);
	}
	{
		struct stat st;

		ok(stat(lane, &st) == 0 && st.st_size == (off_t)BULK_FILE_BYTES && st.st_blocks == 0,
		   "bulk: the lane is all holes again after the exec (%lld blocks)",
		   (long long)st.st_blocks);
	}
	for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
		fd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write_all(fd, buf, 3 * BULK_SLOT) < 0 || close(fd) < 0)
			abort();
		in = json_array();
		start(&s, bad[k].mode, &pid);
		exec_bulk_open(&s, lane);
		r = exec_copy_in(&s, &cin, 1, in);
		ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") && strstr(s.err, "bulk slot") &&
		   json_array_size(in) == 0,
		   "bulk: %s is a protocol failure (%s)", bad[k].what, s.err);
		{
			/* at the failure, still under the lock (before exec_free) */
			struct stat st;

			ok(stat(lane, &st) == 0 && st.st_blocks == 0,
			   "bulk: %s: the lane is punched at the failure (%lld blocks)", bad[k].what,
			   (long long)st.st_blocks);
		}
		stop(&s, pid);
		json_decref(in);
	}
	{
		/* every lent slot back: at FILE_DONE (one still out is the
		 * agent's fault), after EXIT (one lent as the command ended
		 * comes back after it: waited for), and none during copy-out */
		struct exec_request req = {.argv = (char *[]){"cat", NULL}, .argc = 1,
					   .has_stdin = 1};
		struct exec_status ex = {.code = -1};
		struct exec_copy cout = {.host = got, .guest = "/tmp/x"};
		json_t *out = json_array();
		struct stat st;

		fd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write_all(fd, buf, 3 * BULK_SLOT) < 0 || close(fd) < 0)
			abort();
		in = json_array();
		start(&s, A_BULK_LATE, &pid);
		exec_bulk_open(&s, lane);
		r = exec_copy_in(&s, &cin, 1, in);
		ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") && strstr(s.err, "not returned"),
		   "bulk: FILE_DONE with a slot still lent is a protocol failure (%s)", s.err);
		stop(&s, pid);
		json_decref(in);

		start(&s, A_BULK_STDIN, &pid);
		exec_bulk_open(&s, lane);
		fd = open(host, O_RDONLY | O_CLOEXEC);
		r = exec_send(&s, &req) == 0 ? exec_run(&s, fd, &ex) : -99;
		ok(r == 0 && ex.code == 0 && s.bulk_lent == 0 && stat(lane, &st) == 0 &&
		   st.st_blocks == 0,
		   "bulk: a stdin slot returned after EXIT is waited for, the lane punched after "
		   "(%d, lent 0x%x, %s)", r, s.bulk_lent, s.err);
		stop(&s, pid);
		close(fd);

		/* a guest that answers PINGs but keeps a slot after EXIT: the
		 * watchdog never fires, the slots' own bound does */
		start(&s, A_BULK_KEEP, &pid);
		s.watchdog_ms = 300;
		s.ping_ms = 50;
		exec_bulk_open(&s, lane);
		fd = open(host, O_RDONLY | O_CLOEXEC);
		t0 = mono_ms();
		r = exec_send(&s, &req) == 0 ? exec_run(&s, fd, &ex) : -99;
		ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") &&
		   strstr(s.err, "not returned within") && mono_ms() - t0 < 5000,
		   "bulk: a slot kept after EXIT by a guest that answers PINGs ends the exec "
		   "(%d, %s)", r, s.err);
		stop(&s, pid);
		close(fd);

		start(&s, A_BULK_STRAY, &pid);
		exec_bulk_open(&s, lane);
		r = exec_send(&s, &req) == 0 && exec_run(&s, -1, &ex) == 0 ?
			exec_copy_out(&s, &cout, 1, out) : -99;
		ok(r == EXEC_FAILED && !strcmp(s.err_kind, "protocol") && strstr(s.err, "bulk slot"),
		   "bulk: a BULK_DONE during copy-out (none lent) is a protocol failure (%d %s)", r,
		   s.err);
		stop(&s, pid);
		json_decref(out);
		unlink(got);
	}
	{
		/* what an exec killed before its punch left: gone at the next open */
		struct stat st;

		fd = open(lane, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || pwrite(fd, buf, BULK_SLOT, BULK_SLOT) != (ssize_t)BULK_SLOT ||
		    close(fd) < 0)
			abort();
		start(&s, A_BULK, &pid);
		r = exec_bulk_open(&s, lane);
		ok(r == 0 && s.bulk_fd >= 0 && stat(lane, &st) == 0 && st.st_blocks == 0,
		   "bulk: a lane left with bytes is punched when the next exec opens it (%lld blocks)",
		   (long long)st.st_blocks);
		stop(&s, pid);
	}
	{
		/* a lane with a second name, or someone else's: refused, nothing
		 * written into it */
		char lane2[140];

		snprintf(lane2, sizeof lane2, "%s.link", lane);
		start(&s, A_BULK, &pid);
		r = link(lane, lane2) == 0 ? exec_bulk_open(&s, lane) : -99;
		ok(r == EXEC_FAILED && s.bulk_fd < 0 && strstr(s.err, "hard links"),
		   "bulk: a lane with a hard link is refused (%d %s)", r, s.err);
		stop(&s, pid);
		unlink(lane2);
		start(&s, A_BULK, &pid);
		r = symlink(lane, lane2) == 0 ? exec_bulk_open(&s, lane2) : -99;
		ok(r == EXEC_FAILED && s.bulk_fd < 0 && strstr(s.err, "symbolic links"),
		   "bulk: a lane that is a symlink is not followed (%d %s)", r, s.err);
		stop(&s, pid);
		unlink(lane2);
		if (geteuid() == 0) {
			start(&s, A_BULK, &pid);
			r = chown(lane, 65534, 65534) == 0 ? exec_bulk_open(&s, lane) : -99;
			ok(r == EXEC_FAILED && s.bulk_fd < 0 && strstr(s.err, "not owned"),
			   "bulk: a lane another user owns is refused (%d %s)", r, s.err);
			stop(&s, pid);
			if (chown(lane, 0, 0) < 0)
				abort();
		}
	}
	/* the port: told not to, or no file (a VM older than the lane); within
	 * the port's first credit (the fake agent grants no more) */
	fd = open(host, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write_all(fd, buf, 5000) < 0 || close(fd) < 0)
		abort();
	in = json_array();
	start(&s, A_BULK_OOB, &pid);
	s.no_bulk = 1;
	r = exec_bulk_open(&s, lane);
	ok(r == 0 && s.bulk_fd < 0 && exec_copy_in(&s, &cin, 1, in) == 0,
	   "bulk: no_bulk keeps to the port (%s)", s.err);
	stop(&s, pid);
	json_decref(in);
	unlink(lane);
	in = json_array();
	start(&s, A_BULK_OOB, &pid);
	r = exec_bulk_open(&s, lane);
	ok(r == 0 && s.bulk_fd < 0 && exec_copy_in(&s, &cin, 1, in) == 0 &&
	   sha256_file(got, want) == 0 && sha256_file(host, have) == 0 && !strcmp(want, have),
	   "bulk: without the lane's file, the port (%s)", s.err);
	stop(&s, pid);
	json_decref(in);
	unlink(host);
	unlink(got);
	free(buf);
}

int main(void)
{
	if (fake_init("exec_test") < 0)
		return 1;
	test_opts();
	test_check();
	test_dest_dots();
	test_wire();
	test_session();
	test_copy_in_race();
	test_bulk();
	test_tree_in_credit();
	test_flood();
	test_stale_credit();
	test_dest();
	test_dest_eacces();
	test_tree_in_nomem();
	test_log_max();
	test_failures();
	return fake_done();
}
