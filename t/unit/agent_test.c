/* agent_test.c - the guest agent's decoding of what the host sends: valid
 * HELLO, EXEC, FILE_PUT, FILE_GET and PING, and each malformed request
 * (missing, wrong-sized, repeated or over-long fields, bad ENV/CWD/PATH)
 * refused with the frame the host sees (ERROR{kind, message}, or HELLO_ACK's
 * ERROR).  The agent's sources are included whole with
 * ISOPOD_AGENT_NO_MAIN, and frames go through on_frame() (or port_parse(),
 * for bytes that are not a frame) exactly as the loop hands them over.
 *
 * Nothing here may touch the machine it runs on (as root): the root disk is
 * "not mounted" (root.ok = 0), so a valid EXEC / FILE_PUT / FILE_GET stops
 * at ERROR{root_unavailable} right after its request was accepted, and
 * neither a HELLO that would set the hostname, clock, RNG or network nor a
 * SHUTDOWN (kill(-1)) is ever handed to on_frame(): hello_parse() alone
 * decodes those. */
#include "agentharness.h"



/* ------------------------------------------------------------------ */

static void put_zeros(uint8_t tag, size_t n)
{
	static const uint8_t zero[8];

	tlv_put(&W, tag, zero, n);
}

static void test_hello(void)
{
	static const uint8_t mac[6] = { 2, 0x69, 0x73, 0, 0, 3 }, seed[32] = { 1, 2, 3 };
	struct hello_req h;
	struct frame fr;
	char err[1024];

	req();
	tlv_put_u32(&W, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&W, T_COOKIE, 0x1122334455667788ull);
	tlv_put_str(&W, T_HOSTNAME, "pod-1");
	tlv_put_u64(&W, T_TIME_NS, 1700000000123456789ull);
	tlv_put(&W, T_SEED, seed, sizeof seed);
	tlv_put_u32(&W, T_GROW, 1);
	tlv_put_str(&W, T_NET_ADDR, "10.0.0.2/30");
	tlv_put_str(&W, T_NET_GW, "10.0.0.1");
	tlv_put_str(&W, T_NET_DNS, "10.0.0.1");
	tlv_put_u32(&W, T_NET_MTU, 1400);
	tlv_put(&W, T_NET_MAC, mac, sizeof mac);
	tlv_put_u32(&W, T_ROOT_RW, 1);
	tlv_put_str(&W, 200, "a tag from the future");
	fr = as_frame(F_HELLO);
	memset(&h, 0, sizeof h);
	err[0] = 0;
	hello_parse(&fr, &h, err, sizeof err);
	ok(!err[0] && h.have_version && h.version == 1 && h.cookie == 0x1122334455667788ull &&
		   !strcmp(h.hostname, "pod-1") && h.have_time &&
		   h.time_ns == 1700000000123456789ull && h.seedlen == 32 && h.seed &&
		   !memcmp(h.seed, seed, 32) && h.grow && !strcmp(h.net_addr, "10.0.0.2/30") &&
		   !strcmp(h.net_gw, "10.0.0.1") && !strcmp(h.net_dns, "10.0.0.1") &&
		   h.net_mtu == 1400 && h.have_mac && !memcmp(h.net_mac, mac, 6) && h.root_rw,
	   "HELLO with every field decodes (an unknown tag is skipped)");
	ok(hello_plausible(&fr), "... and is a new host's HELLO for a resync");

	/* Wrong-typed or oversized values: each named in HELLO_ACK's ERROR. */
	static const struct {
		uint8_t tag;
		size_t len;
		const char *what;
	} bad[] = {
		{ T_VERSION, 2, "VERSION of 2 bytes" },   { T_COOKIE, 4, "COOKIE of 4 bytes" },
		{ T_HOSTNAME, 65, "HOSTNAME of 65 bytes" }, { T_TIME_NS, 4, "TIME_NS of 4 bytes" },
		{ T_GROW, 1, "GROW of 1 byte" },          { T_NET_ADDR, 64, "NET_ADDR of 64 bytes" },
		{ T_NET_GW, 64, "NET_GW of 64 bytes" },   { T_NET_DNS, 64, "NET_DNS of 64 bytes" },
		{ T_NET_MTU, 8, "NET_MTU of 8 bytes" },   { T_NET_MAC, 5, "NET_MAC of 5 bytes" },
		{ T_ROOT_RW, 2, "ROOT_RW of 2 bytes" },
	};
	static char big[100];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char want[64];

		memset(big, 'a', sizeof big);
		req();
		if (bad[i].tag != T_VERSION)
			tlv_put_u32(&W, T_VERSION, 1);
		tlv_put(&W, bad[i].tag, big, bad[i].len);
		fr = as_frame(F_HELLO);
		memset(&h, 0, sizeof h);
		err[0] = 0;
		hello_parse(&fr, &h, err, sizeof err);
		snprintf(want, sizeof want, "HELLO: bad value for tag %u", bad[i].tag);
		ok(!strcmp(err, want), "HELLO with %s: \"%s\"", bad[i].what, err);
	}
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put(&W, T_HOSTNAME, "a\0b", 3);
	fr = as_frame(F_HELLO);
	memset(&h, 0, sizeof h);
	err[0] = 0;
	hello_parse(&fr, &h, err, sizeof err);
	ok(!strcmp(err, "HELLO: bad value for tag 3") && !h.hostname[0],
	   "HELLO with a NUL in HOSTNAME: refused, no hostname taken");

}

/* Through on_frame: only HELLOs with nothing to apply. */
static void test_hello_ack(void)
{
	struct frame fr;
	char k[64], m[1100];
	uint8_t t;

	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 42);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK && !strcmp(m, ROOT_ERR) &&
		   A->port.helloed,
	   "HELLO {VERSION, COOKIE}: HELLO_ACK (its ERROR: no root disk), session open");
	{
		struct tlv_r r;
		const uint8_t *v;
		uint32_t l, ver = 0;
		uint64_t cookie = 0;
		uint8_t tag;
		char root[8] = "";
		struct frame ack;
		size_t used;

		frame_parse(A->out.p, A->out.len, &ack, &used);
		tlv_rinit(&r, ack.payload, ack.len);
		while (tlv_next(&r, &tag, &v, &l) == 1) {
			if (tag == T_VERSION)
				tlv_u32(v, l, &ver);
			if (tag == T_COOKIE)
				tlv_u64(v, l, &cookie);
			if (tag == T_ROOT)
				tlv_str(v, l, root, sizeof root);
		}
		ok(ver == 1 && cookie == 42 && !strcmp(root, "ro"),
		   "HELLO_ACK carries VERSION 1, the host's COOKIE, ROOT ro");
	}
	ok(!A->root.rw_soon, "... and without ROOT_RW the root stays read-only until a command");

	/* ROOT_RW: the remount waits for the loop, after HELLO_ACK is out
	 * (it still says ro); a later HELLO without it (a command's host)
	 * does not take it back; ROOT_RW 0 asks nothing. */
	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 43);
	tlv_put_u32(&W, T_ROOT_RW, 1);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK && A->root.rw_soon && !A->root.rw,
	   "HELLO with ROOT_RW 1: HELLO_ACK first, the remount asked for after it");
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 44);
	send_req(F_HELLO, STREAM_CTL);
	ok(A->root.rw_soon, "... a second HELLO without ROOT_RW leaves it asked");
	root_rw_soon(A);
	ok(!A->root.rw_soon && !A->root.rw,
	   "... and with no root disk it is dropped, nothing mounted (the command reports why)");
	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 45);
	tlv_put_u32(&W, T_ROOT_RW, 0);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK && !A->root.rw_soon,
	   "HELLO with ROOT_RW 0: nothing asked");
	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 2);
	tlv_put_u64(&W, T_COOKIE, 46);
	tlv_put_u32(&W, T_ROOT_RW, 1);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK && !A->root.rw_soon,
	   "HELLO of another version with ROOT_RW: not applied");

	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 2);
	tlv_put_u64(&W, T_COOKIE, 42);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK &&
		   !strcmp(m, "protocol version mismatch: host 2, agent 1; " ROOT_ERR) &&
		   !A->port.helloed,
	   "HELLO of version 2: HELLO_ACK naming both versions, no session");

	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u64(&W, T_COOKIE, 42);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK &&
		   !strcmp(m, "protocol version mismatch: host 0, agent 1; " ROOT_ERR) &&
		   !A->port.helloed,
	   "HELLO without VERSION: version mismatch (host 0), no session");

	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 7);
	W.len -= 3; /* the COOKIE item is cut short */
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK &&
		   !strcmp(m, "HELLO: truncated TLV; " ROOT_ERR),
	   "HELLO with a truncated TLV: HELLO_ACK's ERROR says so");
	fr = as_frame(F_HELLO);
	ok(!hello_plausible(&fr), "... and it is not a HELLO to resync on");

	req();
	tlv_put_u32(&W, T_VERSION, 1);
	fr = as_frame(F_HELLO);
	ok(!hello_plausible(&fr), "a HELLO without COOKIE is not one to resync on");
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 7);
	fr = as_frame(F_EXEC);
	ok(!hello_plausible(&fr), "nor is an EXEC with VERSION and COOKIE");
}

/* ------------------------------------------------------------------ */

static int env_is(char *const *envp, const char *const *want)
{
	size_t i;

	for (i = 0; want[i]; i++)
		if (!envp[i] || strcmp(envp[i], want[i]))
			return 0;
	return envp[i] == NULL;
}

static void test_exec_valid(void)
{
	static const char *const defaults[] = {
		"PATH=" DEFAULT_PATH, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", NULL
	};
	static const char *const merged[] = {
		"PATH=/opt/bin", "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", "A=b=c", "EMPTY=", NULL
	};
	struct exec_req *rq = &A->req;
	struct frame fr;
	char why[1024] = "";
	size_t i, n;

	fresh();
	req();
	tlv_put_str(&W, T_ARG, "echo");
	fr = as_frame(F_EXEC);
	ok(exec_parse(&fr, rq, why, sizeof why) == 0 && !strcmp(rq->argv[0], "echo") &&
		   !rq->argv[1] && env_is(rq->envp, defaults) && !strcmp(rq->cwd, "/root") &&
		   rq->timeout_ms == 0 && !rq->with_stdin,
	   "EXEC {ARG}: the default env, cwd /root, no timeout, stdin /dev/null");
	ok(accepted(F_EXEC), "... accepted by on_frame (stops at the root disk)");

	req();
	tlv_put_str(&W, T_ARG, "sh");
	tlv_put_str(&W, T_ENV, "PATH=/opt/bin");
	tlv_put_str(&W, T_ARG, "-c");
	tlv_put_str(&W, T_ENV, "A=1");
	tlv_put_str(&W, T_ARG, "");
	tlv_put_str(&W, T_ENV, "A=b=c");
	tlv_put_str(&W, T_ENV, "EMPTY=");
	tlv_put_str(&W, T_CWD, "/tmp/x y");
	tlv_put_u64(&W, T_TIMEOUT_MS, 1500);
	tlv_put_u32(&W, T_STDIN, 1);
	tlv_put_str(&W, T_PATH, "/not/an/exec/tag");
	tlv_put_str(&W, 250, "unknown");
	fr = as_frame(F_EXEC);
	ok(exec_parse(&fr, rq, why, sizeof why) == 0 && !strcmp(rq->argv[0], "sh") &&
		   !strcmp(rq->argv[1], "-c") && !strcmp(rq->argv[2], "") && !rq->argv[3] &&
		   env_is(rq->envp, merged) && !strcmp(rq->cwd, "/tmp/x y") &&
		   rq->timeout_ms == 1500 && rq->with_stdin,
	   "EXEC with every field: argv in order, ENV overrides in place (the later A wins), "
	   "CWD, TIMEOUT_MS, STDIN; tags of other requests and unknown tags are skipped");
	ok(accepted(F_EXEC), "... accepted by on_frame");

	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_u32(&W, T_STDIN, 0);
	tlv_put_u64(&W, T_TIMEOUT_MS, 0);
	fr = as_frame(F_EXEC);
	ok(exec_parse(&fr, rq, why, sizeof why) == 0 && !rq->with_stdin && rq->timeout_ms == 0,
	   "EXEC with STDIN 0 and TIMEOUT_MS 0: /dev/null, no timeout");

	/* The most items one payload holds: every one an empty ARG. */
	req();
	for (n = 0; W.len + 5 <= FRAME_MAX_PAYLOAD; n++)
		tlv_put(&W, T_ARG, "", 0);
	fr = as_frame(F_EXEC);
	for (i = 0; exec_parse(&fr, rq, why, sizeof why) == 0 && i < n; i++)
		if (!rq->argv[i] || rq->argv[i][0])
			break;
	ok(i == n && !rq->argv[n] && n == FRAME_MAX_PAYLOAD / 5,
	   "EXEC of %zu empty ARGs (a full payload): all in argv", n);
	ok(accepted(F_EXEC), "... accepted by on_frame");

	static char big[FRAME_MAX_PAYLOAD - 5];

	memset(big, 'a', sizeof big);
	req();
	tlv_put(&W, T_ARG, big, sizeof big);
	fr = as_frame(F_EXEC);
	ok(exec_parse(&fr, rq, why, sizeof why) == 0 &&
		   strlen(rq->argv[0]) == FRAME_MAX_PAYLOAD - 5 && !rq->argv[1],
	   "EXEC with one ARG filling a full payload: taken whole");
}

static void test_exec_refused(void)
{
	char cwd[300];

	fresh();
	req();
	ok(refused(F_EXEC, "bad_request", "EXEC without ARG"), "EXEC with no fields: bad_request");
	req();
	tlv_put_str(&W, T_ENV, "A=1");
	tlv_put_str(&W, T_CWD, "/");
	ok(refused(F_EXEC, "bad_request", "EXEC without ARG"), "EXEC without ARG: bad_request");
	req();
	tlv_put(&W, T_ARG, "a\0b", 3);
	ok(refused(F_EXEC, "bad_request", "ARG 0 contains a NUL byte"), "NUL in ARG 0");
	req();
	tlv_put_str(&W, T_ARG, "ok");
	tlv_put(&W, T_ARG, "\0", 1);
	ok(refused(F_EXEC, "bad_request", "ARG 1 contains a NUL byte"), "NUL in ARG 1 (numbered)");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_ENV, "A=1");
	tlv_put(&W, T_ENV, "B=\0", 3);
	ok(refused(F_EXEC, "bad_request", "ENV 1 contains a NUL byte"), "NUL in ENV 1");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_ENV, "NOEQUALS");
	ok(refused(F_EXEC, "bad_request", "ENV \"NOEQUALS\" is not K=V with a non-empty K"),
	   "ENV without =");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_ENV, "=v");
	ok(refused(F_EXEC, "bad_request", "ENV \"=v\" is not K=V with a non-empty K"),
	   "ENV with an empty key");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_ENV, "");
	ok(refused(F_EXEC, "bad_request", "ENV \"\" is not K=V with a non-empty K"), "empty ENV");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_CWD, "tmp");
	ok(refused(F_EXEC, "bad_request", "CWD \"tmp\" is not absolute"), "relative CWD");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_CWD, "");
	ok(refused(F_EXEC, "bad_request", "CWD \"\" is not absolute"), "empty CWD");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put(&W, T_CWD, "/a\0", 3);
	ok(refused(F_EXEC, "bad_request", "CWD 0 contains a NUL byte"), "NUL in CWD");
	/* A long bad value is quoted cut at 200 bytes. */
	memset(cwd, 'c', sizeof cwd - 1);
	cwd[sizeof cwd - 1] = 0;
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_CWD, cwd);
	{
		char want[300];

		snprintf(want, sizeof want, "CWD \"%.200s\" is not absolute", cwd);
		ok(refused(F_EXEC, "bad_request", want), "a 299-byte relative CWD is quoted cut");
	}
	req();
	tlv_put_str(&W, T_ARG, "x");
	put_zeros(T_TIMEOUT_MS, 4);
	ok(refused(F_EXEC, "bad_request", "TIMEOUT_MS is not a u64"), "TIMEOUT_MS of 4 bytes");
	req();
	tlv_put_str(&W, T_ARG, "x");
	put_zeros(T_STDIN, 8);
	ok(refused(F_EXEC, "bad_request", "STDIN is not a u32"), "STDIN of 8 bytes");
	req();
	tlv_put_str(&W, T_ARG, "x");
	put_zeros(T_STDIN, 0);
	ok(refused(F_EXEC, "bad_request", "STDIN is not a u32"), "STDIN of 0 bytes");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_ARG, "y");
	W.len -= 1;
	ok(refused(F_EXEC, "bad_request", "EXEC: truncated TLV"), "EXEC whose last item is cut");
	req();
	tlv_put_str(&W, T_ARG, "x");
	W.len += 3; /* three bytes of a next item's header */
	memset(pay + W.len - 3, T_ARG, 3);
	ok(refused(F_EXEC, "bad_request", "EXEC: truncated TLV"), "EXEC ending in half a header");

	/* Order of checks: the first bad item wins. */
	req();
	tlv_put_str(&W, T_ENV, "bad");
	tlv_put_str(&W, T_CWD, "rel");
	ok(refused(F_EXEC, "bad_request", "ENV \"bad\" is not K=V with a non-empty K"),
	   "the first bad item is the one named");

	/* Session rules. */
	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_str(&W, T_ARG, "x");
	ok(refused(F_EXEC, "bad_request", "HELLO (with protocol version 1) first"),
	   "EXEC before HELLO: bad_request");
	ok(refused(F_FILE_PUT, "bad_request", "HELLO (with protocol version 1) first"),
	   "FILE_PUT before HELLO: bad_request");
	ok(refused(F_FILE_GET, "bad_request", "HELLO (with protocol version 1) first"),
	   "FILE_GET before HELLO: bad_request");
	fresh();
	A->op = OP_GET;
	ok(refused(F_EXEC, "busy", "another operation is running"), "EXEC while one runs: busy");
	A->op = OP_PUT;
	A->put.failed = 1;
	ok(accepted(F_EXEC), "EXEC after a failed FILE_PUT the host stopped streaming: taken");
}

/* ------------------------------------------------------------------ */

static void test_files(void)
{
	char path[PATH_MAX], why[1024], longp[PATH_MAX + 1];
	struct frame fr;
	uint32_t mode;
	uint64_t max;

	fresh();
	req();
	tlv_put_str(&W, T_PATH, "/root/in/file");
	tlv_put_u32(&W, T_MODE, 04755);
	tlv_put_u64(&W, T_BYTES, 7);
	tlv_put_str(&W, 99, "unknown");
	fr = as_frame(F_FILE_PUT);
	mode = 0644;
	ok(put_parse(&fr, path, &mode, why, sizeof why) == 0 && !strcmp(path, "/root/in/file") &&
		   mode == 04755,
	   "FILE_PUT {PATH, MODE}: both taken (BYTES and unknown tags skipped)");
	ok(accepted(F_FILE_PUT) && A->op == OP_PUT && A->put.failed,
	   "... accepted by on_frame; stream-4 data is then drained");
	on_frame(A, &(struct frame){ .type = F_DATA, .stream = STREAM_FILE, .len = 3,
				      .payload = (const uint8_t *)"abc" });
	ok(A->credit_due[STREAM_FILE] == 3, "... whose DATA is still credited");
	on_frame(A, &(struct frame){ .type = F_EOF, .stream = STREAM_FILE });
	ok(A->credit_due[STREAM_FILE] == 0 && A->op == OP_NONE,
	   "... and EOF ends it, with no CREDIT owed after it (it would count for the next copy-in)");

	req();
	tlv_put_str(&W, T_PATH, "/f");
	fr = as_frame(F_FILE_PUT);
	mode = 0644;
	ok(put_parse(&fr, path, &mode, why, sizeof why) == 0 && !strcmp(path, "/f") &&
		   mode == 0644,
	   "FILE_PUT {PATH}: the default mode stays");

	req();
	tlv_put_str(&W, T_PATH, "/var/log/x");
	tlv_put_u64(&W, T_BYTES, 1 << 20);
	put_zeros(T_MODE, 1); /* not FILE_GET's: never looked at */
	fr = as_frame(F_FILE_GET);
	ok(get_parse(&fr, path, &max, why, sizeof why) == 0 && !strcmp(path, "/var/log/x") &&
		   max == 1 << 20,
	   "FILE_GET {PATH, BYTES}: both taken (a MODE, even malformed, is skipped)");
	fresh();
	ok(accepted(F_FILE_GET) && A->op == OP_NONE, "... accepted by on_frame");
	req();
	tlv_put_str(&W, T_PATH, "/x");
	fr = as_frame(F_FILE_GET);
	ok(get_parse(&fr, path, &max, why, sizeof why) == 0 && max == UINT64_MAX,
	   "FILE_GET {PATH}: no limit");

	static const struct {
		uint8_t type;
		const char *name;
	} ops[] = { { F_FILE_PUT, "FILE_PUT" }, { F_FILE_GET, "FILE_GET" } };
	for (size_t i = 0; i < 2; i++) {
		char want[300];
		const char *nm = ops[i].name;

		fresh();
		req();
		snprintf(want, sizeof want, "%s: PATH \"\" is not absolute", nm);
		ok(refused(ops[i].type, "bad_request", want), "%s without PATH", nm);
		req();
		tlv_put_str(&W, T_PATH, "etc/passwd");
		snprintf(want, sizeof want, "%s: PATH \"etc/passwd\" is not absolute", nm);
		ok(refused(ops[i].type, "bad_request", want), "%s with a relative PATH", nm);
		req();
		tlv_put(&W, T_PATH, "/etc/\0x", 7);
		snprintf(want, sizeof want, "%s: PATH too long or contains a NUL byte", nm);
		ok(refused(ops[i].type, "bad_request", want), "%s with a NUL in PATH", nm);
		req();
		memset(longp, 'p', PATH_MAX);
		longp[0] = '/';
		tlv_put(&W, T_PATH, longp, PATH_MAX);
		ok(refused(ops[i].type, "bad_request", want), "%s with a PATH of PATH_MAX bytes", nm);
		req();
		longp[PATH_MAX - 1] = 0;
		tlv_put_str(&W, T_PATH, longp);
		ok(refused(ops[i].type, "root_unavailable", ROOT_ERR),
		   "%s with a PATH of PATH_MAX - 1 bytes: accepted", nm);
		req();
		tlv_put_str(&W, T_PATH, "/x");
		tlv_put_str(&W, T_ARG, "y");
		W.len -= 1;
		snprintf(want, sizeof want, "%s: truncated TLV", nm);
		ok(refused(ops[i].type, "bad_request", want), "%s with a truncated TLV", nm);
	}
	fresh();
	req();
	tlv_put_str(&W, T_PATH, "/x");
	put_zeros(T_MODE, 2);
	ok(refused(F_FILE_PUT, "bad_request", "FILE_PUT: MODE is not a u32"), "MODE of 2 bytes");
	req();
	tlv_put_str(&W, T_PATH, "/x");
	put_zeros(T_BYTES, 4);
	ok(refused(F_FILE_GET, "bad_request", "FILE_GET: BYTES is not a u64"), "BYTES of 4 bytes");
	req();
	put_zeros(T_BYTES, 4);
	tlv_put_str(&W, T_PATH, "rel");
	ok(refused(F_FILE_GET, "bad_request", "FILE_GET: PATH \"rel\" is not absolute"),
	   "FILE_GET: a bad PATH is named before a bad BYTES");
}

/* ------------------------------------------------------------------ */

/* Tags a request takes once, given twice: refused, never first- or
 * last-wins.  ARG and ENV are lists (a later ENV overrides, see above). */
static void test_duplicates(void)
{
	static const struct {
		uint8_t type, tag;
		int u64;
		const char *msg;
	} dup[] = {
		{ F_EXEC, T_CWD, -1, "EXEC: CWD given twice" },
		{ F_EXEC, T_TIMEOUT_MS, 1, "EXEC: TIMEOUT_MS given twice" },
		{ F_EXEC, T_STDIN, 0, "EXEC: STDIN given twice" },
		{ F_FILE_PUT, T_PATH, -1, "FILE_PUT: PATH given twice" },
		{ F_FILE_PUT, T_MODE, 0, "FILE_PUT: MODE given twice" },
		{ F_FILE_GET, T_PATH, -1, "FILE_GET: PATH given twice" },
		{ F_FILE_GET, T_BYTES, 1, "FILE_GET: BYTES given twice" },
	};
	struct hello_req h;
	struct frame fr;
	char err[1024], k[64], m[1100];
	uint8_t t;

	for (size_t i = 0; i < sizeof dup / sizeof dup[0]; i++) {
		fresh();
		req();
		if (dup[i].type == F_EXEC)
			tlv_put_str(&W, T_ARG, "x");
		else if (dup[i].tag != T_PATH)
			tlv_put_str(&W, T_PATH, "/x");
		for (int n = 0; n < 2; n++) {
			if (dup[i].u64 < 0)
				tlv_put_str(&W, dup[i].tag, n ? "/b" : "/a");
			else if (dup[i].u64)
				tlv_put_u64(&W, dup[i].tag, (uint64_t)n + 1);
			else
				tlv_put_u32(&W, dup[i].tag, (uint32_t)n + 1);
		}
		ok(refused(dup[i].type, "bad_request", dup[i].msg), "%s", dup[i].msg);
	}
	fresh();
	req();
	tlv_put_str(&W, T_PATH, "/x");
	tlv_put_u32(&W, T_MODE, 1);
	tlv_put_u32(&W, T_MODE, 2);
	ok(accepted(F_FILE_GET), "FILE_GET with MODE twice (not its tag): accepted");
	req();
	tlv_put_str(&W, T_ARG, "x");
	tlv_put_str(&W, T_PATH, "/a");
	tlv_put_str(&W, T_PATH, "/b");
	ok(accepted(F_EXEC), "EXEC with PATH twice (not its tag): accepted");

	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_str(&W, T_NET_DNS, "10.0.0.1");
	tlv_put_str(&W, T_NET_DNS, "10.0.0.9");
	fr = as_frame(F_HELLO);
	memset(&h, 0, sizeof h);
	err[0] = 0;
	hello_parse(&fr, &h, err, sizeof err);
	ok(!strcmp(err, "HELLO: tag 24 given twice") && !strcmp(h.net_dns, "10.0.0.1"),
	   "HELLO with NET_DNS twice: HELLO_ACK's ERROR names the tag");
	fresh();
	A->port.helloed = 0;
	req();
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 1);
	tlv_put_u64(&W, T_COOKIE, 2);
	send_req(F_HELLO, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK &&
		   !strcmp(m, "HELLO: tag 2 given twice; " ROOT_ERR),
	   "HELLO with COOKIE twice, through on_frame: HELLO_ACK with that ERROR");
}

static void test_frames(void)
{
	char k[64], m[1100];
	uint8_t t;

	fresh();
	req();
	send_req(F_PING, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_PONG, "PING: PONG");
	A->port.helloed = 0;
	send_req(F_PING, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_PONG, "PING before HELLO: PONG");

	fresh();
	req();
	ok(refused(F_HELLO_ACK, "bad_request", "unexpected frame type 2 on stream 0"),
	   "a HELLO_ACK from the host: bad_request");
	ok(refused(F_EXIT, "bad_request", "unexpected frame type 7 on stream 0"),
	   "an EXIT from the host: bad_request");
	tlv_put_str(&W, T_ARG, "x");
	send_req(F_DATA, STREAM_STDOUT);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "bad_request") &&
		   !strcmp(m, "unexpected frame type 4 on stream 2"),
	   "DATA on stream 2: bad_request");
	send_req(F_EOF, STREAM_CTL);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR &&
		   !strcmp(m, "unexpected frame type 5 on stream 0"),
	   "EOF on stream 0: bad_request");
	send_req(F_DATA, STREAM_STDIN);
	ok(answer(&t, k, m, sizeof m) == 0, "stray stdin DATA (no command): dropped silently");
	send_req(F_DATA, STREAM_FILE);
	ok(answer(&t, k, m, sizeof m) == 0, "stray file DATA (no FILE_PUT): dropped silently");

	/* stdin beyond the credit window: the host broke flow control. */
	{
		int p[2];

		fresh();
		if (pipe(p) < 0)
			abort();
		A->op = OP_EXEC;
		A->ex.with_stdin = 1;
		A->ex.in_fd = p[1];
		A->ex.rlen = AGENT_WINDOW - 2;
		req();
		tlv_put(&W, 0, "", 0); /* 5 bytes of stdin */
		send_req(F_DATA, STREAM_STDIN);
		ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol") &&
			   !strcmp(m, "stdin beyond the credit window") && A->port.poisoned,
		   "stdin beyond the credit window: ERROR{protocol}, input ignored until HELLO");
		A->ex.rlen = 0;
		A->port.poisoned = 0;
		A->credit_due[STREAM_STDIN] = 0;
		send_req(F_DATA, STREAM_STDIN);
		ok(answer(&t, k, m, sizeof m) == 0 && A->ex.rlen == 0 &&
			   A->credit_due[STREAM_STDIN] == 5 && read(p[0], m, sizeof m) == 5,
		   "... within it, nothing queued: straight into the pipe, and credited");
		A->ex.rlen = 1; /* a byte the pipe did not take yet */
		A->ex.rhead = 0;
		send_req(F_DATA, STREAM_STDIN);
		ok(answer(&t, k, m, sizeof m) == 0 && A->ex.rlen == 6 &&
			   A->credit_due[STREAM_STDIN] == 5,
		   "... behind bytes still queued: queued after them, not credited yet");
		op_abort(A); /* closes p[1]; pid 0 is never signalled */
		close(p[0]);
		ok(A->op == OP_NONE && A->ex.in_fd == -1, "... and the aborted command is gone");
	}
}

/* Bytes that are no frame, as port_read hands them to port_parse. */
static void feed(const uint8_t *b, size_t n)
{
	memcpy(A->port.rbuf + A->port.rlen, b, n);
	A->port.rlen += n;
	A->out.off = A->out.len = 0;
	port_parse(A);
}

static void test_port(void)
{
	uint8_t b[64], hello[64];
	size_t hlen;
	char k[64], m[1100];
	uint8_t t;

	fresh();
	frame_hdr(b, F_PING, STREAM_CTL, FRAME_MAX_PAYLOAD + 1);
	feed(b, FRAME_HDR);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol") &&
		   !strcmp(m, "malformed frame") && A->port.poisoned,
	   "a frame over FRAME_MAX_PAYLOAD: ERROR{protocol}, input ignored");
	frame_hdr(b, F_PING, STREAM_CTL, 0);
	feed(b, FRAME_HDR);
	ok(answer(&t, k, m, sizeof m) == 0, "... a PING after it is ignored");

	/* A new host's HELLO ends it. */
	tlv_init(&W, hello + FRAME_HDR, sizeof hello - FRAME_HDR);
	tlv_put_u32(&W, T_VERSION, 1);
	tlv_put_u64(&W, T_COOKIE, 9);
	frame_hdr(hello, F_HELLO, STREAM_CTL, (uint32_t)W.len);
	hlen = FRAME_HDR + W.len;
	feed(hello, hlen);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_HELLO_ACK && !A->port.poisoned &&
		   A->port.helloed,
	   "... until a new host's HELLO: HELLO_ACK");

	fresh();
	frame_hdr(b, 0, STREAM_CTL, 0);
	feed(b, FRAME_HDR);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(m, "malformed frame"),
	   "frame type 0: malformed");
	fresh();
	frame_hdr(b, F_TYPE_MAX + 1, STREAM_CTL, 0);
	feed(b, 5); /* refused as soon as the type byte is there */
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(m, "malformed frame"),
	   "frame type %u: malformed from its first 5 bytes", F_TYPE_MAX + 1);
	fresh();
	frame_hdr(b, F_DATA, STREAM_MAX + 1, 0);
	feed(b, FRAME_HDR);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_ERROR && !strcmp(k, "protocol"),
	   "stream %u: malformed", STREAM_MAX + 1);
	fresh();
	frame_hdr(b, F_PING, STREAM_CTL, 0);
	feed(b, 4);
	ok(answer(&t, k, m, sizeof m) == 0 && A->port.rlen == 4, "half a header: waits for more");
	feed(b + 4, FRAME_HDR - 4);
	ok(answer(&t, k, m, sizeof m) == 1 && t == F_PONG && A->port.rlen == 0,
	   "... the rest of it: PONG");
}

/* FILE_PUT and FILE_GET with TREE through on_frame and get_pump: a
 * directory in (its modes, setuid kept: the host is trusted; a symlink; a
 * hole), then out again as a tree stream that a host's sink takes whole;
 * a directory without TREE is is_dir; PUT onto a path that is there is
 * refused. */
static void test_tree(void)
{
	char top[64], src[96], dst[96], back[96], p[160], why[600];
	struct ts_walk *w = malloc(sizeof *w);
	struct ts_feed *f = malloc(sizeof *f);
	uint8_t chunk[5000];
	struct stat sb;
	long n;
	int fd;

	snprintf(top, sizeof top, "/tmp/agent_tree.XXXXXX");
	if (!mkdtemp(top))
		abort();
	snprintf(src, sizeof src, "%s/src", top);
	snprintf(dst, sizeof dst, "%s/in/dst", top);
	snprintf(back, sizeof back, "%s/back", top);
	mkdir(src, 0750);
	snprintf(p, sizeof p, "%s/suid", src);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	pwrite(fd, "x", 1, 3 << 20);
	fchmod(fd, 04711);
	close(fd);
	snprintf(p, sizeof p, "%s/l", src);
	symlink("/nowhere", p);

	fresh();
	A->root.ok = A->root.rw = 1;
	req();
	tlv_put_str(&W, T_PATH, dst);
	tlv_put_u32(&W, T_TREE, 1);
	send_req(F_FILE_PUT, STREAM_CTL);
	ok(A->op == OP_PUT && A->put.tree && !A->put.failed, "FILE_PUT TREE: a new directory");
	fd = open(src, O_RDONLY | O_DIRECTORY);
	ts_walk_open(w, fd);
	while ((n = ts_walk_read(w, chunk, sizeof chunk)) > 0)
		on_frame(A, &(struct frame){ .type = F_DATA, .stream = STREAM_FILE,
					     .len = (uint32_t)n, .payload = chunk });
	ts_walk_close(w);
	A->out.off = A->out.len = 0;
	on_frame(A, &(struct frame){ .type = F_EOF, .stream = STREAM_FILE });
	ok(A->op == OP_NONE && A->out.len > FRAME_HDR && A->out.p[4] == F_FILE_DONE,
	   "... FILE_DONE after EOF");
	snprintf(p, sizeof p, "%s/suid", dst);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 04711 && sb.st_size == (3 << 20) + 1 &&
	   sb.st_blocks < 64, "... the guest keeps setuid, the size and the hole");
	snprintf(p, sizeof p, "%s/l", dst);
	ok(readlink(p, why, sizeof why) == 8, "... and the symlink");
	ok(stat(dst, &sb) == 0 && (sb.st_mode & 07777) == 0750, "... and the top's mode");

	req();
	tlv_put_str(&W, T_PATH, dst);
	tlv_put_u32(&W, T_TREE, 1);
	send_req(F_FILE_PUT, STREAM_CTL);
	on_frame(A, &(struct frame){ .type = F_EOF, .stream = STREAM_FILE });
	ok(A->out.len > FRAME_HDR && A->out.p[4] == F_ERROR, "FILE_PUT TREE onto a directory that "
	   "is there: ERROR");

	req();
	tlv_put_str(&W, T_PATH, dst);
	send_req(F_FILE_GET, STREAM_CTL);
	ok(A->op == OP_NONE && A->out.len > FRAME_HDR && A->out.p[4] == F_ERROR &&
	   memmem(A->out.p, A->out.len, "is_dir", 6), "FILE_GET of a directory without TREE: is_dir");

	req();
	tlv_put_str(&W, T_PATH, dst);
	tlv_put_u32(&W, T_TREE, 1);
	send_req(F_FILE_GET, STREAM_CTL);
	ok(A->op == OP_GET && A->get.tree, "FILE_GET TREE: walking");
	mkdir(back, 0700);
	fd = open(back, O_RDONLY | O_DIRECTORY);
	ts_feed_init(f, fd, 0777);
	{
		int bad = 0, done = 0;

		while (A->op == OP_GET || A->out.off < A->out.len) {
			size_t used;
			struct frame fr;

			get_pump(A);
			while (frame_parse(A->out.p + A->out.off, A->out.len - A->out.off, &fr,
					   &used) == 1) {
				A->out.off += used;
				if (fr.type == F_DATA && ts_feed(f, fr.payload, fr.len, why,
								 sizeof why) < 0)
					bad = 1;
				done |= fr.type == F_FILE_DONE;
			}
			A->out.off = A->out.len = 0;
		}
		ok(!bad && done && ts_feed_end(f, why, sizeof why) == 0,
		   "... the stream a host's sink takes whole, then FILE_DONE");
	}
	ts_feed_free(f);
	close(fd);
	snprintf(p, sizeof p, "%s/suid", back);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0711 && sb.st_blocks < 64,
	   "... setuid masked by the host's sink, the hole a hole");
	snprintf(p, sizeof p, "rm -rf %s", top);
	system(p);
	free(w);
	free(f);
	fresh();
}

/* sys_each: every name once, no dot-entries, across several getdents
 * reads; stops at the callback's 0; -1 for no directory.  And the output
 * buffer: out_first until a frame needs more, then the heap, its bytes
 * kept. */
static int seen[300], stop_at = -1;
static int each_cb(struct agent *a, const char *name)
{
	int i;

	(void)a;
	if (sscanf(name, "entry-with-a-long-name-%d", &i) != 1 || i < 0 || i >= 300)
		return seen[0] = -1000, -1; /* "." or a stranger: fails the count */
	seen[i]++;
	return i == stop_at ? 0 : -1;
}
static void test_sys_each(void)
{
	char dir[] = "/tmp/agent_each.XXXXXX", p[200];
	int i, all = 1, fd;
	uint8_t big[OUT_FIRST];

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	for (i = 0; i < 300; i++) {
		snprintf(p, sizeof p, "%s/entry-with-a-long-name-%d", dir, i);
		fd = open(p, O_CREAT | O_WRONLY, 0600);
		if (fd >= 0)
			close(fd);
	}
	ok(sys_each(dir, each_cb, A) == -1, "sys_each: -1 when no callback said 0");
	for (i = 0; i < 300; i++)
		all &= seen[i] == 1;
	ok(all && seen[0] == 1, "sys_each: each of 300 names (~13 KiB of entries) once, no dot-entries");
	memset(seen, 0, sizeof seen);
	stop_at = 7;
	ok(sys_each(dir, each_cb, A) == 0 && seen[7] == 1, "sys_each: 0 at the callback's 0");
	for (i = 0; i < 300; i++) {
		snprintf(p, sizeof p, "%s/entry-with-a-long-name-%d", dir, i);
		unlink(p);
	}
	rmdir(dir);
	ok(sys_each(dir, each_cb, A) == -1, "sys_each: -1 for a missing directory");

	fresh();
	ok(A->out.p == A->out_first, "the output buffer starts in out_first");
	memset(big, 0x5a, sizeof big);
	out_frame(A, F_PING, STREAM_CTL, big, 1000);
	out_frame(A, F_PING, STREAM_CTL, big, 2000);
	ok(A->out.p == A->out_first && A->out.len == 3000 + 2 * FRAME_HDR,
	   "small frames stay in out_first");
	for (i = 0; i < 3; i++)
		out_frame(A, F_PING, STREAM_CTL, big, 30000);
	ok(A->out.p != A->out_first && A->out.cap >= A->out.len &&
		   A->out.len == 93000 + 5 * FRAME_HDR && A->out.p[4] == F_PING &&
		   A->out.p[FRAME_HDR] == 0x5a && A->out.p[FRAME_HDR + 1000 + 4] == F_PING &&
		   A->out.p[4 * FRAME_HDR + 63000 + 4] == F_PING,
	   "past out_first: the heap, the queued frames kept");
	fresh();
}

/* pid1.c's kernel command line words: `key=1` on, the last `key=` wins
 * (as the kernel's own parameters), a longer key is another key. */
static void test_cmdline_flag(void)
{
	char a[] = "console=ttyS0 quiet isopod.root_rw=1\n", b[] = "isopod.root_rw=1 isopod.root_rw=0",
	     c[] = "isopod.root_rw=0 isopod.root_rw=1", d[] = "isopod.root_rw=10 isopod.root_rwx=1",
	     e[] = "isopod.root_rw isopod.bench_exit=1";

	ok(cmdline_flag(a, "isopod.root_rw") == 1, "cmdline: key=1 at the line's end (newline) is on");
	ok(cmdline_flag(b, "isopod.root_rw") == 0, "cmdline: key=1 then key=0: the last wins, off");
	ok(cmdline_flag(c, "isopod.root_rw") == 1, "cmdline: key=0 then key=1: the last wins, on");
	ok(cmdline_flag(d, "isopod.root_rw") == 0, "cmdline: key=10 and a longer key=1: off");
	ok(cmdline_flag(e, "isopod.root_rw") == 0, "cmdline: the bare key and another key=1: off");
}

int main(void)
{
	test_cmdline_flag();
	if (harness_start() < 0)
		return 1;
	test_hello();
	test_hello_ack();
	test_exec_valid();
	test_exec_refused();
	test_files();
	test_tree();
	test_duplicates();
	test_frames();
	test_port();
	test_sys_each();
	return harness_done();
}
