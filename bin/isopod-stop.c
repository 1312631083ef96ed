/* isopod-stop - stop a VM: ask the agent, then QEMU, then the supervisor.
 *
 * "Stopped" means the VM's lock is free (its supervisor exited after QEMU);
 * every step below waits for exactly that, never for a pid to vanish.  The
 * steps after the agent are lib/vmstop.c (isopod-exec --stop's too). */

#include "host.h"
#include "qmp.h"
#include "util.h"
#include "vm.h"
#include "vmstop.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "isopod-stop [--force] [--timeout-ms N] --vm REF"

/* HELLO, SHUTDOWN, wait for SHUTDOWN_ACK (at most 10 s), hang up: the agent
 * then syncs, leaves the root read-only and powers off. */
static int agent_shutdown(struct conn *c, const char *sock, int64_t deadline)
{
	struct hello h = { 0 };
	struct frame fr;
	int64_t ack = mono_ms() + 10000;
	int r;

	if (ack > deadline)
		ack = deadline;
	if (conn_open(c, sock, mono_ms() + 1000) < 0) {
		warn("agent: %s", c->err);
		return -1;
	}
	/* A busy agent (another client holds the port) never answers: keep
	 * this short and fall back to QMP. */
	if (conn_hello(c, &h, mono_ms() + 2000) < 0 ||
	    conn_queue(c, F_SHUTDOWN, STREAM_CTL, NULL, 0) < 0) {
		warn("agent: %s", c->err[0] ? c->err : "unable to queue SHUTDOWN");
		conn_close(c);
		return -1;
	}
	for (;;) {
		r = conn_wait(c, &fr, ack);
		if (r < 0) {
			warn("agent: %s", c->err);
			conn_close(c);
			return -1;
		}
		if (fr.type == F_SHUTDOWN_ACK) {
			char kind[32], msg[256];

			if (fr.len) { /* ACK{ERROR}: the root may not be clean */
				frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
				warn("agent: shutdown: %s", msg);
			}
			break;
		}
		if (fr.type == F_ERROR) {
			char kind[32], msg[256];

			frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
			warn("agent: shutdown refused: %s: %s", kind, msg);
			conn_close(c);
			return -1;
		}
	}
	conn_close(c);
	return 0;
}

/* The same with the connection's buffers (130 KiB) on the heap. */
static int via_agent(const char *sock, int64_t deadline)
{
	struct conn *c = malloc(sizeof *c);
	int r;

	if (!c) {
		warn("agent: out of memory");
		return -1;
	}
	r = agent_shutdown(c, sock, deadline);
	free(c);
	return r;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "vm", required_argument, NULL, 'v' },
		{ "force", no_argument, NULL, 'f' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char id[VM_ID_SZ], dir[PATH_MAX], p[PATH_MAX], err[256];
	const char *name, *how = NULL, *ref = NULL;
	long long timeout = 10000;
	json_t *meta, *out;
	int c, force = 0;

	progname = "isopod-stop";
	signal(SIGPIPE, SIG_IGN);
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'v':
			ref = optarg;
			break;
		case 'f':
			force = 1;
			break;
		case 't':
			if (parse_ll(optarg, 1, 86400000, &timeout) < 0)
				die(EX_USAGE, "--timeout-ms %s: out of range 1..86400000", EXC(optarg));
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	/* One way to name a VM: a REF as an operand is refused, not guessed. */
	if (argc != optind)
		die_usage(USAGE, "unexpected operand; name the VM with --vm REF");
	if (!ref)
		die_usage(USAGE, "no VM: name it with --vm REF");
	if (vm_resolve(ref, id, err, sizeof err) < 0)
		die(vm_exit_code(errno), "%s", err);
	pathf(dir, sizeof dir, "%s/vms/%s", store_home(), id);
	meta = vm_read(id); /* a VM without a readable record can still be stopped */
	name = meta ? json_string_value(json_object_get(meta, "name")) : NULL;

	if (!vm_running(id)) {
		out = json_pack("{s:{s:s, s:s?}, s:b, s:b}", "vm", "id", id, "name", name,
				"stopped", 0, "was_running", 0);
		if (!out)
			die(EX_SYS, "unable to build the output");
		json_emit(out);
		return 0;
	}

	pathf(p, sizeof p, "%s/agent.sock", dir);
	if (!force && via_agent(p, mono_ms() + timeout) == 0 &&
	    vm_wait_stopped(id, mono_ms() + timeout) == 0)
		how = "agent";
	if (!how) {
		struct vm_stop st;
		int r;

		pathf(p, sizeof p, "%s/qmp.sock", dir);
		r = vm_stop_quit(id, p, meta, timeout, &st);
		if (st.note[0])
			warn("%s", st.note);
		if (r < 0)
			die(st.code, "%s", st.err);
		how = st.how;
	}
	out = json_pack("{s:{s:s, s:s?}, s:b, s:b, s:s}", "vm", "id", id, "name", name, "stopped",
			1, "was_running", 1, "how", how);
	if (!out)
		die(EX_SYS, "unable to build the output");
	json_emit(out);
	return 0;
}
