/* execio.h - one command in a booted VM, over one agent connection: the
 * logs, the handshake, copy-in, the command (output in, stdin out, pings),
 * copy-out, and the result object; the host's own deadline and the
 * unresponsive-agent watchdog throughout, stopping the VM when the agent
 * cannot end what it runs.
 *
 * Every step returns 0, EXEC_FAILED (s->err_code, err_kind and err say
 * what: the exit status, the error kind and the message a tool prints) or
 * EXEC_DEADLINE: --timeout-ms and its grace passed with no word from the
 * agent; the caller ends the exec with exec_at_deadline, a timeout like any
 * other.  Nothing here exits. */
#ifndef ISOPOD_EXECIO_H
#define ISOPOD_EXECIO_H

#include "execopt.h"
#include "host.h"

#include <jansson.h>
#include <limits.h>
#include <stdint.h>

struct sha256_stream;

/* The result carries at most this much of each output stream. */
#define EXEC_INBAND_MAX (64u * 1024u)
#define EXEC_WATCHDOG_MS_DEFAULT 30000

/* How long after the deadline the host waits for the agent's EXIT before it
 * ends the exec itself.  The agent's own timer starts when it receives EXEC,
 * after the host's start (copy-in, the frame's trip), then it kills the
 * group, reaps and drains the pipes before EXIT (250 ms, 1 s at most, after
 * a timeout): under TCG on a loaded 2-core host a healthy guest reported
 * 90-160 ms after the deadline, 340-920 ms when a setsid() child held its
 * pipes or output was pending.  1.5 s covers that and keeps the overrun of
 * a starved guest (a fork bomb, a real-time hog) under 2 s; the agent
 * cannot extend it. */
#define EXEC_DEADLINE_GRACE_MS 1500

/* Copy-out comes after the command, within what is left of --timeout-ms plus
 * this allowance (a command that used all of its budget still gets its
 * results copied when they are small); then the host stops the vm and the
 * copy-outs not finished are errors.  Without --timeout-ms, copy-out is
 * bounded by size only (copy_out_max; the agent sends at most the size a
 * file had when it was opened). */
#define EXEC_COPY_OUT_GRACE_MS 2000

enum { EXEC_FAILED = -1, EXEC_DEADLINE = -2 };

/* One output stream of the command: the complete log and the in-band part. */
struct exec_stream {
	const char *name;
	int fd;
	char path[PATH_MAX];
	uint8_t *inband;        /* first EXEC_INBAND_MAX bytes */
	size_t inlen;
	uint64_t bytes;         /* all the guest sent; the log holds the first log_max */
	int eof;
};

struct exec_session {
	/* Set by the caller (exec_init gives the defaults). */
	const char *vm_id;      /* for messages */
	const char *qmp_sock;   /* to stop the vm */
	long long qemu_pid;     /* the last resort: SIGKILL through a pidfd */
	int64_t watchdog_ms;    /* silence after which the vm is stopped */
	int64_t ping_ms;        /* silence after which the agent is pinged */
	int64_t deadline_ms;    /* monotonic end of --timeout-ms; 0 = none */
	long long copy_out_max; /* bytes, all copy-outs together */
	long long log_max;      /* bytes each stream's log keeps (--log-max) */
	json_t *warnings;       /* exec_init's array; the caller may add */
	int list_files;         /* a tree copied out lists its files (--for-provenance) */
	/* What the result may still carry of the trees' lists ("files" and
	 * "skipped"), as serialised (escapes counted), and of holes hashed
	 * for "files": exec_init gives EXEC_TREE_JSON_MAX, EXEC_TREE_HOLES_MAX. */
	size_t tree_json_left;
	uint64_t tree_holes_left;
	/* The bulk lane (exec_bulk_open; doc/PROTOCOL.md "Bulk lane"):
	 * stdin and copy-in go through vms/<id>/bulk.raw when the agent
	 * announced the lane and the file is there; else over the port. */
	int no_bulk;                /* the caller's: never use the lane */
	uint64_t bulk_agent;        /* the HELLO_ACK's BULK: the lane's size, 0: none */
	int bulk_fd;                /* the lane's file, or -1: serial */
	uint32_t bulk_n;            /* slots in use of it (<= BULK_SLOTS_MAX) */
	uint32_t bulk_lent;         /* bit i: slot i holds bytes the agent has not returned */
	uint8_t *bulk_buf;          /* one slot's bytes, BULK_SLOT */
	int bulk_dirty;             /* bytes written since the last punch */
	/* The session's own. */
	struct conn c;
	struct exec_stream out[2];  /* stdout, stderr */
	int lock_fd;                /* vms/<id>/exec.lock, held until exec_free */
	int64_t last_rx;            /* when the agent last said something */
	int64_t t_exec;             /* EXEC sent; 0 = not yet */
	int64_t copy_deadline_ms;   /* while copying out: its end; 0 = none */
	int64_t slots_due_ms;       /* after EXIT: the lent slots' latest return; 0 = none */
	int copying_out;            /* the command has ended; copy-out runs */
	const char *copy_why;       /* why a copy-out had to end */
	/* The failure, when a step returned EXEC_FAILED. */
	int err_code;
	char err_kind[64];
	char err[1024];
};

/* Defaults, the warnings array; no descriptor open yet.  0, or -1 (memory). */
int exec_init(struct exec_session *s);
/* Close what is open (the connection, the logs, the lock); free. */
void exec_free(struct exec_session *s);

/* The logs vms/<id>/exec-<n>.{stdout,stderr} in dir, numbered after those
 * there, under dir/exec.lock, which also keeps a second exec out of the
 * vm (EX_CONFLICT, "busy"). */
int exec_open_logs(struct exec_session *s, const char *dir);
/* Connect to the agent and shake hands, within the deadline's grace. */
int exec_connect(struct exec_session *s, const char *agent_sock);
/* After exec_connect: use the bulk lane at path (the VM's bulk.raw) when
 * the agent announced it and no_bulk is unset.  0 (the lane or the
 * serial path: bulk_fd says which), or a failure. */
int exec_bulk_open(struct exec_session *s, const char *path);
/* A BULK_DONE the agent sent: the slot must be one lent (bounds and
 * ownership checked), and is free again.  0, or EXEC_FAILED. */
int exec_bulk_take(struct exec_session *s, const struct frame *fr);
/* Copy host files in; one {host,guest,bytes,sha256} per file onto list. */
int exec_copy_in(struct exec_session *s, const struct exec_copy *in, int n, json_t *list);
/* Send the EXEC request (its timeout: what is left of deadline_ms). */
int exec_send(struct exec_session *s, const struct exec_request *r);
/* Run the command until the agent's EXIT (into ex): its output to the
 * logs, stdin_fd (-1: none) under the agent's credit, pings, the watchdog
 * and the deadline. */
int exec_run(struct exec_session *s, int stdin_fd, struct exec_status *ex);
/* The command has ended: copy files out, within what is left of the
 * deadline plus EXEC_COPY_OUT_GRACE_MS and copy_out_max; one entry per
 * file onto list ({guest,host,bytes,sha256} or {guest,host,error}).  A
 * copy-out the agent cannot finish stops the vm, and is an error entry, as
 * are those after it.  Then the connection is flushed and closed. */
int exec_copy_out(struct exec_session *s, const struct exec_copy *out, int n, json_t *list);
/* The deadline passed with no EXIT: stop the vm, warn, and fill
 * *copied_out with an error entry per copy-out (none was attempted). */
int exec_at_deadline(struct exec_session *s, const struct exec_copy *out, int n,
		     json_t **copied_out);
/* The result object: the vm, the status, each stream's in-band part, size,
 * truncation, log and whether the log stopped at log_max, the copies
 * (references stolen), the warnings and exec_ms; the logs are fsynced
 * first.  NULL on failure (s->err). */
json_t *exec_result(struct exec_session *s, const char *vm_name, const struct exec_status *ex,
		    json_t *copied_in, json_t *copied_out, int64_t exec_ms);

/* Stop a vm whose agent cannot end what it runs, and wait until it is
 * stopped.  0, or -1 (said on stderr): the vm may still be running. */
int exec_stop_vm(struct exec_session *s);
/* The failure of a vm that could not be stopped (when: why it had to be). */
int exec_fail_not_stopped(struct exec_session *s, const char *when);
/* Wait for the agent's next frame: 1 a frame, 0 (copying out) the
 * copy-out must end (s->copy_why), or a failure; pings and the watchdog
 * meanwhile. */
int exec_wait_frame(struct exec_session *s, struct frame *fr);
/* A copy-out that did not happen: an error entry on list and a warning. */
void exec_copy_out_failed(struct exec_session *s, json_t *list, const char *guest,
			  const char *dst, const char *why);

/* A tree copied out lists its regular files ({path, sha256, bytes}, the
 * digest of the bytes as they arrived) when list_files is set and it has
 * at most EXEC_TREE_FILES_MAX of them: what isopod-provenance signs a
 * directory copy-out by.  All the trees' lists (files and skipped) are
 * held to EXEC_TREE_JSON_MAX bytes of the result's JSON, escapes counted
 * (readers take 1 MiB, JSON_MAX_BYTES), and the holes hashed for the
 * lists to EXEC_TREE_HOLES_MAX bytes (zeros hashed on the host, for no
 * byte the guest sent); past either a tree's list is given up
 * (doc/DECISIONS.md). */
#define EXEC_TREE_FILES_MAX 1000
#define EXEC_TREE_JSON_MAX (256u * 1024u)
/* What exec_copy_out keeps of the 1 MiB for the result's other members
 * when the in-band output takes much of it (the lists get less then). */
#define EXEC_RESULT_SLACK (128u * 1024u)
#define EXEC_TREE_HOLES_MAX (256ull << 20)
/* What an entry of a list costs: its compact JSON, plus a comma. */
size_t exec_json_cost(const json_t *j);

/* Record a failure (the exit status, the error kind, the message);
 * EXEC_FAILED.  For execio.c's siblings (exectree.c, execbulk.c). */
int exec_fail(struct exec_session *s, int code, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* An ERROR (or an unexpected frame) in answer to `what`: EXEC_FAILED. */
int exec_fail_frame(struct exec_session *s, const struct frame *fr, const char *what);

/* execbulk.c: the lane's free slot (-1: all lent); a file's bytes through
 * the lane, a slot at a time, hashed into h and counted in *sent, then
 * EOF; stdin's bytes now readable into a free slot (EOF at its end, *eof
 * set); the lane's blocks punched (no transfer's bytes stay in it). */
int exec_bulk_free_slot(const struct exec_session *s);
int exec_bulk_send_file(struct exec_session *s, int fd, uint32_t stream, const char *what,
			struct sha256_stream *h, uint64_t *sent);
int exec_bulk_feed_stdin(struct exec_session *s, int fd, int *eof);
void exec_bulk_punch(struct exec_session *s);
int exec_bulk_after_exit(struct exec_session *s);

/* exectree.c: a guest directory copied out as a tree stream into NAME in
 * the directory dfd (it must not exist: it is made, and all the stream
 * makes is below it, see treeio.h), within room bytes of the stream; the
 * same returns as a file's copy-out (0 copied, 1 recorded on list, the vm
 * stopped when stopped[0] is set, or a failure). */
int exec_tree_out(struct exec_session *s, const struct exec_copy *cp, const char *dst, int dfd,
		  const char *name, uint64_t room, json_t *list, char *stopped, size_t ssz,
		  uint64_t *bytes);
/* The next moment something must happen without the agent: a ping, the
 * watchdog, the end of the deadline's grace or of copy-out. */
int64_t exec_next_tick(const struct exec_session *s, int64_t now);

#endif
