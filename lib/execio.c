/* execio.c - one command in a booted VM over its agent (execio.h). */
#include "execio.h"
#include "qmp.h"
#include "treeio.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Record the failure; EXEC_FAILED. */
int exec_fail(struct exec_session *s, int code, const char *kind, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->err, sizeof s->err, fmt, ap);
	va_end(ap);
	s->err_code = code;
	snprintf(s->err_kind, sizeof s->err_kind, "%s", kind);
	/* A failure ends the exec: the lane's bytes go now, under the VM's
	 * lock (the caller exits, or exec_free, without another transfer). */
	exec_bulk_punch(s);
	return EXEC_FAILED;
}

int exec_init(struct exec_session *s)
{
	memset(s, 0, sizeof *s);
	s->watchdog_ms = EXEC_WATCHDOG_MS_DEFAULT;
	s->ping_ms = EXEC_WATCHDOG_MS_DEFAULT / 6;
	s->copy_out_max = EXEC_COPY_OUT_MAX_DEFAULT;
	s->log_max = EXEC_LOG_MAX_DEFAULT;
	s->c.fd = -1;
	s->out[0] = (struct exec_stream){.name = "stdout", .fd = -1};
	s->out[1] = (struct exec_stream){.name = "stderr", .fd = -1};
	s->lock_fd = -1;
	s->bulk_fd = -1;
	s->tree_json_left = EXEC_TREE_JSON_MAX;
	s->tree_holes_left = EXEC_TREE_HOLES_MAX;
	s->warnings = json_array();
	return s->warnings ? 0 : -1;
}

size_t exec_json_cost(const json_t *j)
{
	/* json_dumpb with no buffer: the size json_emit writes it in */
	return json_dumpb(j, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) + 1;
}

void exec_free(struct exec_session *s)
{
	conn_close(&s->c);
	for (int i = 0; i < 2; i++) {
		if (s->out[i].fd >= 0)
			close(s->out[i].fd);
		s->out[i].fd = -1;
		free(s->out[i].inband);
		s->out[i].inband = NULL;
	}
	/* The lane punched before the lock goes: once it is gone the next
	 * exec may fill slot 0, and a punch after would zero its bytes under
	 * it (the guest reading zeros, the host recording their digest). */
	if (s->bulk_fd >= 0) {
		exec_bulk_punch(s);
		close(s->bulk_fd);
	}
	s->bulk_fd = -1;
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	s->lock_fd = -1;
	free(s->bulk_buf);
	s->bulk_buf = NULL;
	json_decref(s->warnings);
	s->warnings = NULL;
}

/* A pidfd opened before the lock is checked: a lock still held after the
 * pidfd was opened proves the pid was not recycled in between. */
int exec_stop_vm(struct exec_session *s)
{
	char err[256];
	int pfd;

	if (qmp_simple(s->qmp_sock, "quit", mono_ms() + 2000, err, sizeof err) < 0)
		warn("vm %s: QMP quit: %s", s->vm_id, err);
	else if (vm_wait_stopped(s->vm_id, mono_ms() + 5000) == 0)
		return 0;
	if (!vm_running(s->vm_id))
		return 0;
	/* A QEMU that does not quit on QMP (wedged, SIGSTOPped) gets SIGKILL. */
	if (s->qemu_pid > 0 && s->qemu_pid <= INT_MAX &&
	    (pfd = pidfd_open_((pid_t)s->qemu_pid)) >= 0) {
		if (vm_running(s->vm_id) && pidfd_kill(pfd, SIGKILL) < 0 && errno != ESRCH)
			warn("vm %s: unable to kill qemu %lld: %s", s->vm_id, s->qemu_pid,
			     strerror(errno));
		close(pfd);
	}
	if (vm_wait_stopped(s->vm_id, mono_ms() + 5000) == 0)
		return 0;
	warn("unable to stop vm %s (qemu %lld)", s->vm_id, s->qemu_pid);
	return -1;
}

/* The vm could not be stopped: whatever the command did, the result is the
 * infrastructure's failure, never a timeout with a vm still running. */
int exec_fail_not_stopped(struct exec_session *s, const char *when)
{
	return exec_fail(s, EX_SYS, "not_stopped", "vm %s: %s, and the host could not stop the vm",
		    s->vm_id, when);
}

static int deadline_over(const struct exec_session *s, int64_t now)
{
	return s->deadline_ms && now >= s->deadline_ms + EXEC_DEADLINE_GRACE_MS;
}

/* The watchdog fired: before the deadline it is the infrastructure's failure
 * (unresponsive, 111); once the deadline has passed it is the command's
 * timeout, whatever kept the agent from saying so. */
static int watchdog_fired(struct exec_session *s)
{
	if (s->deadline_ms && mono_ms() >= s->deadline_ms)
		return EXEC_DEADLINE;
	if (exec_stop_vm(s) < 0)
		return exec_fail_not_stopped(s, "the guest agent stopped answering");
	return exec_fail(s, EX_SYS, "unresponsive",
		    "vm %s: the guest agent stopped answering for %lld ms; the vm was stopped",
		    s->vm_id, (long long)s->watchdog_ms);
}

/* After EXIT the agent keeps lent slots: an honest one returns them as
 * soon as their BULK arrives (it no longer reads them), so a guest that
 * answers PINGs but holds a slot is not kept waiting for by the watchdog
 * (its PONGs reset it): this bound is.  The vm is stopped first: its
 * lane is punched after, and no later exec finds a slot still out. */
static int slots_overdue(struct exec_session *s)
{
	if (exec_stop_vm(s) < 0)
		return exec_fail_not_stopped(s, "the guest agent kept bulk slots after EXIT");
	return exec_fail(s, EX_SYS, "protocol",
		    "vm %s: bulk slots 0x%x not returned within %lld ms of EXIT; the vm was stopped",
		    s->vm_id, s->bulk_lent, (long long)s->watchdog_ms);
}

int64_t exec_next_tick(const struct exec_session *s, int64_t now)
{
	int64_t until = now + s->ping_ms;

	if (until > s->last_rx + s->watchdog_ms)
		until = s->last_rx + s->watchdog_ms;
	if (s->deadline_ms && until > s->deadline_ms + EXEC_DEADLINE_GRACE_MS)
		until = s->deadline_ms + EXEC_DEADLINE_GRACE_MS;
	if (s->copy_deadline_ms && until > s->copy_deadline_ms)
		until = s->copy_deadline_ms;
	if (s->slots_due_ms && until > s->slots_due_ms)
		until = s->slots_due_ms;
	return until;
}

/* now + ms, but no later than the deadline's grace. */
static int64_t before_deadline(const struct exec_session *s, int64_t ms)
{
	int64_t until = mono_ms() + ms;

	if (s->deadline_ms && until > s->deadline_ms + EXEC_DEADLINE_GRACE_MS)
		until = s->deadline_ms + EXEC_DEADLINE_GRACE_MS;
	return until;
}

/* Wait for a frame; a silent agent gets PINGs and, after watchdog_ms of
 * silence, the VM is stopped: a hung guest must not hang the caller.  1 a
 * frame; 0 (only while copying out) the copy-out must end: s->copy_why says
 * why; or a failure.  The deadline and the watchdog are checked after every
 * frame, not only when none came: a steady stream of frames (PONGs,
 * CREDITs) must not keep them from being seen. */
int exec_wait_frame(struct exec_session *s, struct frame *fr)
{
	for (;;) {
		int r = conn_wait(&s->c, fr, exec_next_tick(s, mono_ms()));
		int64_t now = mono_ms();

		if (r == 1)
			s->last_rx = now;
		else if (r != -3)
			return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
		if (deadline_over(s, now))
			return EXEC_DEADLINE;
		if (s->copy_deadline_ms && now >= s->copy_deadline_ms) {
			s->copy_why = "the time left of --timeout-ms, and its copy-out allowance, ran out";
			return 0;
		}
		if (s->slots_due_ms && now >= s->slots_due_ms)
			return slots_overdue(s);
		if (now >= s->last_rx + s->watchdog_ms) {
			if (s->copying_out) {
				s->copy_why = "the guest agent stopped answering";
				return 0;
			}
			return watchdog_fired(s);
		}
		if (r == 1 && fr->type != F_PONG)
			return 1;
		if (r != 1)
			conn_queue(&s->c, F_PING, STREAM_CTL, NULL, 0);
	}
}

/* An ERROR (or an unexpected frame) in answer to `what`. */
int exec_fail_frame(struct exec_session *s, const struct frame *fr, const char *what)
{
	char kind[64], msg[512];

	/* what may be a path from the command line: escaped like the guest's
	 * text, which frame_error_text escapes. */
	if (fr->type != F_ERROR)
		return exec_fail(s, EX_SYS, "protocol", "vm %s: %s: unexpected frame type %u", s->vm_id,
			    EXC(what), fr->type);
	frame_error_text(fr, kind, sizeof kind, msg, sizeof msg);
	return exec_fail(s, !strcmp(kind, "bad_request") ? EX_USAGE : EX_SYS, kind, "vm %s: %s: %s",
		    s->vm_id, EXC(what), msg);
}

int exec_open_logs(struct exec_session *s, const char *dir)
{
	struct exec_stream *o = s->out;
	char lp[PATH_MAX];
	int n;

	/* Exec numbers come from the files already there, under a lock that
	 * also serialises execs in one VM (one agent client at a time). */
	if (pathn(lp, sizeof lp, "%s/exec.lock", dir) < 0)
		return exec_fail(s, EX_SYS, "io", "%s/exec.lock: %s", dir, strerror(errno));
	s->lock_fd = lock_open(lp, LOCK_EX | LOCK_NB);
	if (s->lock_fd < 0) {
		if (errno == EWOULDBLOCK)
			return exec_fail(s, EX_CONFLICT, "busy",
				    "vm %s: another isopod-exec is running in it", s->vm_id);
		return exec_fail(s, EX_SYS, "io", "%s: %s", lp, strerror(errno));
	}
	for (n = 1;; n++) {
		if (pathn(o[0].path, sizeof o[0].path, "%s/exec-%d.stdout", dir, n) < 0 ||
		    pathn(o[1].path, sizeof o[1].path, "%s/exec-%d.stderr", dir, n) < 0)
			return exec_fail(s, EX_SYS, "io", "%s: %s", dir, strerror(errno));
		o[0].fd = open(o[0].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (o[0].fd >= 0)
			break;
		if (errno != EEXIST || n > 100000)
			return exec_fail(s, EX_SYS, "io", "%s: %s", o[0].path, strerror(errno));
	}
	/* The VM's directory is the jail's to write too: an exec-N.stderr it
	 * planted (a FIFO that would block us, a hard link to a root file we
	 * would truncate) goes, and ours is a new file or nothing. */
	if (unlink(o[1].path) < 0 && errno != ENOENT)
		return exec_fail(s, EX_SYS, "io", "%s: %s", o[1].path, strerror(errno));
	o[1].fd = open(o[1].path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (o[1].fd < 0)
		return exec_fail(s, EX_SYS, "io", "%s: %s", o[1].path, strerror(errno));
	for (int i = 0; i < 2; i++) {
		o[i].inband = malloc(EXEC_INBAND_MAX);
		if (!o[i].inband)
			return exec_fail(s, EX_SYS, "io", "out of memory");
	}
	return 0;
}

/* Connecting and the handshake wait no longer than the deadline's grace
 * either: past it, as for copy-in, the budget is spent (a timeout, the vm
 * stopped); before it, a failure is the infrastructure's. */
int exec_connect(struct exec_session *s, const char *agent_sock)
{
	struct hello h = {0};

	if (conn_open(&s->c, agent_sock, before_deadline(s, 10000)) < 0) {
		if (deadline_over(s, mono_ms()))
			return EXEC_DEADLINE;
		return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
	}
	s->last_rx = mono_ms();
	if (conn_hello(&s->c, &h, before_deadline(s, s->watchdog_ms)) < 0) {
		if (deadline_over(s, mono_ms()))
			return EXEC_DEADLINE;
		return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
	}
	s->last_rx = mono_ms();
	s->bulk_agent = h.bulk_bytes;
	return 0;
}

/* Send a file's bytes (or, with walk, a directory's tree stream) on
 * `stream` under the agent's credit.  With h, every byte sent is hashed
 * into it as it goes and counted in *sent: the digest a copy-in records
 * is of the bytes the guest got, read once (a second read of the file by
 * name could meet other bytes: a file replaced or rewritten meanwhile). */
static int send_stream(struct exec_session *s, int fd, struct ts_walk *walk, uint32_t stream,
		       const char *what, struct sha256_stream *h, uint64_t *sent)
{
	uint8_t buf[FRAME_DATA_CHUNK];
	uint64_t credit = FRAME_INITIAL_CREDIT;
	struct frame fr;
	int r;

	for (;;) {
		size_t want = credit < sizeof buf ? (size_t)credit : sizeof buf;
		ssize_t n;

		if (want == 0 || s->c.wlen - s->c.woff > 4 * FRAME_DATA_CHUNK) {
			if ((r = exec_wait_frame(s, &fr)) < 0)
				return r;
			if (r && fr.type == F_CREDIT && fr.stream == stream) {
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
			return exec_fail_frame(s, &fr, what); /* an ERROR, or unexpected */
		}
		n = walk ? ts_walk_read(walk, buf, want) : read(fd, buf, want);
		if (n < 0 && !walk && errno == EINTR)
			continue;
		if (n < 0 && walk)
			return exec_fail(s, EX_USAGE, "io", "--copy-in %s: %s", EXC(what), walk->err);
		if (n < 0)
			return exec_fail(s, EX_SYS, "io", "%s: read: %s", EXC(what), strerror(errno));
		if (n == 0)
			break;
		if (conn_queue(&s->c, F_DATA, stream, buf, (size_t)n) < 0)
			return exec_fail(s, EX_SYS, "io", "out of memory");
		if (h) {
			sha256_add(h, buf, (size_t)n);
			*sent += (uint64_t)n;
		}
		credit -= (uint64_t)n;
		if (conn_flush_some(&s->c) < 0)
			return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
	}
	conn_queue(&s->c, F_EOF, stream, NULL, 0);
	return 0;
}

/* Each entry a copy-in leaves out (a device, a hard link): onto the list. */
static void tree_note(void *ctx, const char *path, const char *why)
{
	json_t *skipped = ctx;

	json_array_append_new(skipped, json_pack("{s:o, s:s}", "path",
		utf8_json((const uint8_t *)path, strlen(path), 0), "why", why));
}

/* A host directory (open at fd, taken) into the guest as a tree stream:
 * the agent makes GUEST, which must not exist, and all below it. */
static int tree_in(struct exec_session *s, const struct exec_copy *cp, int fd, json_t *list)
{
	struct ts_walk *walk = malloc(sizeof *walk);
	json_t *skipped = json_array();
	uint8_t buf[4200];
	struct tlv_w w;
	struct frame fr;
	int r;

	if (!walk || !skipped) {
		/* ts_walk_open never ran: fd is still ours, walk->err unset */
		close(fd);
		free(walk);
		json_decref(skipped);
		return exec_fail(s, EX_SYS, "io", "--copy-in %s: out of memory", EXC(cp->host));
	}
	if (ts_walk_open(walk, fd) < 0) {
		r = exec_fail(s, EX_USAGE, "io", "--copy-in %s: %s", EXC(cp->host), walk->err);
		free(walk);
		json_decref(skipped);
		return r;
	}
	walk->note = tree_note;
	walk->ctx = skipped;
	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_PATH, cp->guest);
	tlv_put_u32(&w, T_TREE, 1);
	conn_queue(&s->c, F_FILE_PUT, STREAM_CTL, buf, w.len);
	r = send_stream(s, -1, walk, STREAM_FILE, cp->host, NULL, NULL);
	ts_walk_close(walk);
	free(walk);
	/* CREDITs for the stream's last bytes are passed over (the first
	 * one used to end the loop: r was 1 then, and the CREDIT taken for
	 * the reply) */
	if (r == 0)
		while ((r = exec_wait_frame(s, &fr)) == 1 && fr.type == F_CREDIT)
			;
	if (r < 0 || (r == 1 && fr.type != F_FILE_DONE)) {
		json_decref(skipped);
		return r < 0 ? r : exec_fail_frame(s, &fr, cp->guest);
	}
	json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:b, s:o}", "host", cp->host,
					      "guest", cp->guest, "bytes",
					      (json_int_t)frame_tlv_u64(&fr, T_BYTES), "tree", 1,
					      "skipped", skipped));
	return 0;
}

int exec_copy_in(struct exec_session *s, const struct exec_copy *in, int n, json_t *list)
{
	for (int i = 0; i < n; i++) {
		uint8_t buf[4200];
		struct tlv_w w;
		struct stat st;
		struct frame fr;
		struct sha256_stream h;
		unsigned char md[crypto_hash_sha256_BYTES];
		uint64_t sent = 0;
		char sha[65];
		int r, hr, fd = open(in[i].host, O_RDONLY | O_CLOEXEC);

		if (fd < 0 || fstat(fd, &st) < 0) {
			r = exec_fail(s, EX_USAGE, "io", "--copy-in %s: %s", EXC(in[i].host),
				 strerror(errno));
			if (fd >= 0)
				close(fd);
			return r;
		}
		if (S_ISDIR(st.st_mode)) {
			if ((r = tree_in(s, &in[i], fd, list)) < 0)
				return r;
			continue;
		}
		tlv_init(&w, buf, sizeof buf);
		tlv_put_str(&w, T_PATH, in[i].guest);
		tlv_put_u32(&w, T_MODE, st.st_mode & 0777);
		conn_queue(&s->c, F_FILE_PUT, STREAM_CTL, buf, w.len);
		sha256_begin(&h);
		r = s->bulk_fd >= 0 ? exec_bulk_send_file(s, fd, STREAM_FILE, in[i].host, &h, &sent)
				    : send_stream(s, fd, NULL, STREAM_FILE, in[i].host, &h, &sent);
		close(fd);
		/* ended here, whatever comes: it frees libcrypto's state */
		hr = sha256_end(&h, md);
		if (r < 0)
			return r;
		if (hr < 0)
			return exec_fail(s, EX_SYS, "io", "--copy-in %s: the SHA-256 of its bytes failed",
				    EXC(in[i].host));
		/* the lane's slots come back before FILE_DONE */
		for (;;) {
			if ((r = exec_wait_frame(s, &fr)) < 0)
				return r;
			if (fr.type == F_BULK_DONE && s->bulk_fd >= 0) {
				if (exec_bulk_take(s, &fr) < 0)
					return EXEC_FAILED;
				continue;
			}
			if (fr.type != F_CREDIT)
				break;
		}
		if (fr.type != F_FILE_DONE)
			return exec_fail_frame(s, &fr, in[i].guest);
		/* The agent returns each slot before it reads the next frame,
		 * and EOF came after the last BULK: none may be out now. */
		if (s->bulk_lent)
			return exec_fail(s, EX_SYS, "protocol", "vm %s: copy-in %s: FILE_DONE with bulk "
				    "slots not returned (0x%x)", s->vm_id, EXC(in[i].guest),
				    s->bulk_lent);
		/* The digest names what the guest holds only if it wrote all
		 * that was sent. */
		if (frame_tlv_u64(&fr, T_BYTES) != sent)
			return exec_fail(s, EX_SYS, "protocol", "vm %s: copy-in %s: the agent wrote %llu "
				    "of the %llu bytes sent", s->vm_id, EXC(in[i].guest),
				    (unsigned long long)frame_tlv_u64(&fr, T_BYTES),
				    (unsigned long long)sent);
		sodium_bin2hex(sha, sizeof sha, md, sizeof md);
		json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s}", "host", in[i].host,
						      "guest", in[i].guest, "bytes", (json_int_t)sent,
						      "sha256", sha));
	}
	exec_bulk_punch(s);
	return 0;
}

int exec_send(struct exec_session *s, const struct exec_request *r)
{
	struct exec_request req = *r;
	uint8_t *buf = malloc(FRAME_MAX_PAYLOAD);
	long len;

	if (!buf)
		return exec_fail(s, EX_SYS, "io", "out of memory");
	/* The agent's timer gets what is left of the host's deadline. */
	if (s->deadline_ms) {
		int64_t left = s->deadline_ms - mono_ms();

		req.timeout_ms = (uint64_t)(left > 1 ? left : 1);
	}
	len = exec_request_encode(&req, buf, FRAME_MAX_PAYLOAD);
	if (len < 0) {
		free(buf);
		return exec_fail(s, EX_USAGE, "bad_request",
			    "the command line and environment exceed %u bytes", FRAME_MAX_PAYLOAD);
	}
	conn_queue(&s->c, F_EXEC, STREAM_CTL, buf, (size_t)len);
	free(buf);
	s->t_exec = mono_ms();
	return 0;
}

/* Past log_max the bytes are still taken (the guest never blocks on a full
 * pipe) and counted, not written: the log cannot fill the host's store. */
static int take_output(struct exec_session *s, struct exec_stream *o, const struct frame *fr)
{
	uint64_t cap = s->log_max > 0 ? (uint64_t)s->log_max : 0;
	size_t w = o->bytes >= cap ? 0 : cap - o->bytes < fr->len ? (size_t)(cap - o->bytes) : fr->len;

	if (o->inlen < EXEC_INBAND_MAX) {
		size_t k = fr->len < EXEC_INBAND_MAX - o->inlen ? fr->len : EXEC_INBAND_MAX - o->inlen;

		memcpy(o->inband + o->inlen, fr->payload, k);
		o->inlen += k;
	}
	if (w && write_all(o->fd, fr->payload, w) < 0)
		return exec_fail(s, EX_SYS, "io", "%s: %s", o->path, strerror(errno));
	o->bytes += fr->len;
	return 0;
}

/* The frames received so far: output to the logs, credit for stdin.  1
 * once EXIT came (ex filled), 0 not yet, or a failure. */
static int take_frames(struct exec_session *s, uint64_t *credit, struct exec_status *ex)
{
	struct frame fr;
	int r;

	while ((r = conn_next(&s->c, &fr)) == 1) {
		s->last_rx = mono_ms();
		switch (fr.type) {
		case F_DATA:
			if ((fr.stream == STREAM_STDOUT || fr.stream == STREAM_STDERR) &&
			    take_output(s, &s->out[fr.stream - STREAM_STDOUT], &fr) < 0)
				return EXEC_FAILED;
			break;
		case F_EOF:
			if (fr.stream == STREAM_STDOUT || fr.stream == STREAM_STDERR)
				s->out[fr.stream - STREAM_STDOUT].eof = 1;
			break;
		case F_CREDIT:
			if (fr.stream == STREAM_STDIN)
				*credit += frame_tlv_u64(&fr, T_BYTES);
			break;
		case F_BULK_DONE:
			if (s->bulk_fd < 0)
				return exec_fail(s, EX_SYS, "protocol", "vm %s: a bulk slot returned, "
					    "none lent", s->vm_id);
			if (exec_bulk_take(s, &fr) < 0)
				return EXEC_FAILED;
			break;
		case F_PONG:
			break;
		case F_EXIT:
			if (exec_status_decode(&fr, ex) < 0)
				return exec_fail(s, EX_SYS, "protocol",
					    "vm %s: the agent reported exit code %d, signal %u, "
					    "timed_out %u (want 0..255, 0..64, 0|1)", s->vm_id,
					    (int)ex->code, ex->sig, ex->timed_out);
			return 1;
		case F_ERROR:
			return exec_fail_frame(s, &fr, "exec");
		default:
			return exec_fail(s, EX_SYS, "protocol",
				    "vm %s: unexpected frame type %u during exec", s->vm_id, fr.type);
		}
	}
	if (r < 0)
		return exec_fail(s, EX_SYS, "protocol", "vm %s: %s", s->vm_id, s->c.err);
	return 0;
}

/* stdin is readable: pass what it has, within the credit; EOF (or a read
 * error, warned) ends the guest's stdin. */
static void feed_stdin(struct exec_session *s, int fd, int *eof, uint64_t *credit)
{
	uint8_t buf[FRAME_DATA_CHUNK];
	size_t want = *credit < sizeof buf ? (size_t)*credit : sizeof buf;
	ssize_t n = read(fd, buf, want);

	if (n > 0) {
		conn_queue(&s->c, F_DATA, STREAM_STDIN, buf, (size_t)n);
		*credit -= (uint64_t)n;
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		if (n < 0)
			json_array_append_new(s->warnings,
					      json_sprintf("stdin: read: %s", strerror(errno)));
		conn_queue(&s->c, F_EOF, STREAM_STDIN, NULL, 0);
		*eof = 1;
	}
}

int exec_run(struct exec_session *s, int stdin_fd, struct exec_status *ex)
{
	int stdin_eof = stdin_fd < 0;
	uint64_t credit = FRAME_INITIAL_CREDIT;
	int r;

	while (!(r = take_frames(s, &credit, ex))) {
		struct pollfd p[2];
		int np = 1;
		int64_t now = mono_ms(), tick;

		/* stdin, under credit, and only while our queue is short. */
		if (!stdin_eof && (s->bulk_fd >= 0 ? exec_bulk_free_slot(s) >= 0 : credit > 0) &&
		    s->c.wlen - s->c.woff < 4 * FRAME_DATA_CHUNK) {
			p[1].fd = stdin_fd;
			p[1].events = POLLIN;
			p[1].revents = 0;
			np = 2;
		}
		if (conn_flush_some(&s->c) < 0)
			return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
		p[0].fd = s->c.fd;
		p[0].events = POLLIN | (s->c.woff < s->c.wlen ? POLLOUT : 0);
		p[0].revents = 0;
		if (deadline_over(s, now))
			return EXEC_DEADLINE;
		if (now - s->last_rx >= s->watchdog_ms)
			return watchdog_fired(s);
		tick = exec_next_tick(s, mono_ms());
		if (poll(p, (nfds_t)np, (int)(tick - now > 0 ? tick - now : 0)) < 0 && errno != EINTR)
			return exec_fail(s, EX_SYS, "io", "poll: %s", strerror(errno));
		if (mono_ms() - s->last_rx >= s->ping_ms)
			conn_queue(&s->c, F_PING, STREAM_CTL, NULL, 0);
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			r = conn_fill(&s->c);
			if (r == -2)
				return exec_fail(s, EX_SYS, "agent", "vm %s: the guest agent closed the "
					    "connection during exec (did the vm stop?)", s->vm_id);
			if (r < 0)
				return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
		}
		if (np == 2 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (s->bulk_fd < 0)
				feed_stdin(s, stdin_fd, &stdin_eof, &credit);
			else if (exec_bulk_feed_stdin(s, stdin_fd, &stdin_eof) < 0)
				return EXEC_FAILED;
		}
	}
	if (r == 1 && s->bulk_lent) {
		s->slots_due_ms = before_deadline(s, s->watchdog_ms);
		r = exec_bulk_after_exit(s);
		s->slots_due_ms = 0;
		if (r < 0)
			return r;
	}
	exec_bulk_punch(s);
	return r < 0 ? r : 0;
}

/* One copy-out that did not happen: an error entry and a warning. */
void exec_copy_out_failed(struct exec_session *s, json_t *list, const char *guest,
			  const char *dst, const char *why)
{
	char w[1400];

	/* why may carry the guest's path (bytes that are not UTF-8, or a
	 * character cut by a %.400s): json_pack "s" would return NULL and
	 * the entry vanish, so each text is made valid here. */
	json_array_append_new(list, json_pack("{s:o, s:o, s:o}",
		"guest", utf8_json((const uint8_t *)guest, strlen(guest), 0),
		"host", utf8_json((const uint8_t *)dst, strlen(dst), 0),
		"error", utf8_json((const uint8_t *)why, strlen(why), 0)));
	snprintf(w, sizeof w, "copy-out %s failed: %s", guest, why);
	json_array_append_new(s->warnings, utf8_json((const uint8_t *)w, strlen(w), 1));
}

/* One file from the guest into dst (NAME in the directory dfd), within
 * room bytes: 0 copied (*bytes, sha), 1 not copied and recorded on list
 * (the vm stopped when stopped[0] is now set), 2 the guest path is a
 * directory (nothing recorded, nothing sent), or a failure.  NAME is
 * never followed: the command may have made it a symlink meanwhile (to a
 * directory, say, where the file would land outside what was named). */
static int copy_one(struct exec_session *s, const struct exec_copy *cp, const char *dst,
		    int dfd, const char *name, uint64_t room, json_t *list, char *stopped,
		    size_t ssz, uint64_t *bytes)
{
	char tmp[NAME_MAX + 1], sha[65], why[600];
	struct stat sb;
	uint8_t buf[4200];
	unsigned char h[crypto_hash_sha256_BYTES];
	struct sha256_stream st;
	struct tlv_w w;
	struct frame fr;
	int fd, got, hr, oe = 0;

	if (pathn(tmp, sizeof tmp, "%.200s.isopod-tmp.%ld", name, (long)getpid()) < 0) {
		exec_copy_out_failed(s, list, cp->guest, dst, strerror(ENAMETOOLONG));
		return 1;
	}
	/* BYTES: the agent refuses a larger file before sending any of it. */
	tlv_init(&w, buf, sizeof buf);
	tlv_put_str(&w, T_PATH, cp->guest);
	tlv_put_u64(&w, T_BYTES, room);
	conn_queue(&s->c, F_FILE_GET, STREAM_CTL, buf, w.len);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	/* why it failed, said once the guest's bytes are taken (the frames
	 * between would leave errno to chance) */
	oe = fd < 0 ? errno : 0;
	sha256_begin(&st);
	why[0] = 0;
	while ((got = exec_wait_frame(s, &fr)) == 1) {
		if (fr.type == F_DATA && fr.stream == STREAM_FILE) {
			/* More than the agent may send (the host's own cap: a
			 * guest controls the agent) ends the copy-out here. */
			if (fr.len > room - *bytes) {
				snprintf(why, sizeof why, "the guest sent more than the %llu bytes "
					 "allowed (--copy-out-max %lld)", (unsigned long long)room,
					 s->copy_out_max);
				break;
			}
			if (fd >= 0 && write_all(fd, fr.payload, fr.len) < 0) {
				oe = errno;
				close(fd);
				fd = -1;
			}
			sha256_add(&st, fr.payload, fr.len);
			*bytes += fr.len;
			continue;
		}
		/* A CREDIT an older agent sent after EXIT or FILE_DONE (for an
		 * operation already over) answers nothing here: taken as this
		 * FILE_GET's reply it would end it, and put the next file's
		 * bytes under the next path.  (A PONG never comes this far:
		 * exec_wait_frame takes them.) */
		if (fr.type == F_EOF || fr.type == F_CREDIT)
			continue;
		/* none is lent after EXIT (exec_run took them all): a failure */
		if (fr.type == F_BULK_DONE && (got = exec_bulk_take(s, &fr)) < 0)
			break;
		if (fr.type == F_BULK_DONE)
			continue;
		break;
	}
	/* ended here, whatever comes: it frees libcrypto's state */
	hr = sha256_end(&st, h);
	if (got < 0) {
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, tmp, 0);
		return got;
	}
	if (got == 0)
		snprintf(why, sizeof why, "%s", s->copy_why);
	if (why[0]) {
		/* Nothing can cancel a FILE_GET: the vm is stopped, which ends
		 * this copy-out and the ones after it. */
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, tmp, 0);
		if (exec_stop_vm(s) < 0)
			return exec_fail_not_stopped(s, "a copy-out had to be ended");
		snprintf(stopped, ssz, "not copied: the vm was stopped during copy-out (%.180s)",
			 why);
		exec_copy_out_failed(s, list, cp->guest, dst, why);
		return 1;
	}
	if (fr.type != F_FILE_DONE) {
		char kind[64], msg[512];

		frame_error_text(&fr, kind, sizeof kind, msg, sizeof msg);
		if (fd >= 0)
			close(fd);
		unlinkat(dfd, tmp, 0);
		if (fr.type == F_ERROR && !strcmp(kind, "is_dir"))
			return 2; /* a directory: asked for again as a tree */
		exec_copy_out_failed(s, list, cp->guest, dst, msg);
		return 1;
	}
	if (fd >= 0 && fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    !S_ISREG(sb.st_mode)) {
		/* renameat would replace a symlink, not follow it; refusing
		 * says so rather than removing what the command made. */
		close(fd);
		unlinkat(dfd, tmp, 0);
		exec_copy_out_failed(s, list, cp->guest, dst, S_ISLNK(sb.st_mode) ?
				"the destination is a symlink (not followed); not replaced" :
				"the destination is not a regular file; not replaced");
		return 1;
	}
	if (fd >= 0 && hr < 0) {
		close(fd);
		unlinkat(dfd, tmp, 0);
		exec_copy_out_failed(s, list, cp->guest, dst, "the SHA-256 of its bytes failed");
		return 1;
	}
	if (fd < 0 || fchmod(fd, (mode_t)frame_tlv_u64(&fr, T_MODE) & 0777) < 0 || fsync(fd) < 0 ||
	    close(fd) < 0 || renameat(dfd, tmp, dfd, name) < 0) {
		int e = fd < 0 ? oe : errno;

		unlinkat(dfd, tmp, 0);
		json_array_append_new(list, json_pack("{s:s, s:s, s:s}", "guest", cp->guest,
						      "host", dst, "error", strerror(e)));
		json_array_append_new(s->warnings, json_sprintf("copy-out %s to %s failed: %s",
								cp->guest, dst, strerror(e)));
		return 1;
	}
	for (int k = 0; k < 32; k++)
		sprintf(sha + 2 * k, "%02x", h[k]);
	json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s}", "guest", cp->guest,
					      "host", dst, "bytes", (json_int_t)*bytes,
					      "sha256", sha));
	return 0;
}

/* A copy-out's destination as opened before any copy-out ran. */
struct dest_at {
	struct exec_dest d;
	int r;                  /* exec_dest_open's */
	char why[512];
};

static void dests_close(struct dest_at *dest, int n)
{
	for (int i = 0; i < n; i++)
		if (dest[i].r == 0)
			close(dest[i].d.dfd);
	free(dest);
}

int exec_copy_out(struct exec_session *s, const struct exec_copy *out, int n, json_t *list)
{
	char stopped[256] = ""; /* set once the vm was stopped: nothing more comes */
	struct dest_at *dest;
	int r;
	uint64_t total = 0;
	int64_t now = mono_ms();
	size_t used = 0;

	/* The command has ended: copy-out gets what is left of its budget and
	 * a fixed allowance, no more. */
	if (s->deadline_ms)
		s->copy_deadline_ms = (now > s->deadline_ms ? now : s->deadline_ms) +
				      EXEC_COPY_OUT_GRACE_MS;
	s->deadline_ms = 0;
	s->copying_out = 1;
	/* The lists share the result with the output kept in it, which the
	 * guest chose too: 64 KiB of control bytes a stream is 384 KiB as
	 * JSON.  What is left of the readers' 1 MiB, less EXEC_RESULT_SLACK
	 * for the rest (names, warnings), bounds the lists as well. */
	for (int i = 0; i < 2; i++) {
		json_t *j = utf8_json(s->out[i].inband, s->out[i].inlen, 0);
		size_t c = j ? exec_json_cost(j) : EXEC_INBAND_MAX * 6;

		json_decref(j);
		used += c;
	}
	if (used + EXEC_RESULT_SLACK >= JSON_MAX_BYTES)
		s->tree_json_left = 0;
	else if (s->tree_json_left > JSON_MAX_BYTES - EXEC_RESULT_SLACK - used)
		s->tree_json_left = JSON_MAX_BYTES - EXEC_RESULT_SLACK - used;
	/* Every destination is opened before the first copy-out writes
	 * anything: a tree copied out brings the guest's symlinks to the
	 * host, and a later HOST resolved through one of them (HOST/link/x)
	 * would land where the guest chose.  Opened now, a path into a tree
	 * this exec is about to make has no directory yet and is refused,
	 * as --check refuses it (isopod-exec(1)). */
	dest = calloc((size_t)n ? (size_t)n : 1, sizeof *dest);
	if (!dest)
		return exec_fail(s, EX_SYS, "io", "out of memory");
	for (int i = 0; i < n; i++) {
		/* Every spelling of HOST through the one open (execopt.h):
		 * its last component never followed, a trailing slash
		 * included. */
		dest[i].r = exec_dest_open(out[i].host, out[i].guest, &dest[i].d, dest[i].why,
					   sizeof dest[i].why);
		if (dest[i].r < 0) {
			r = exec_fail(s, EX_USAGE, "usage", "%s", dest[i].why);
			dests_close(dest, i);
			return r;
		}
	}
	for (int i = 0; i < n; i++) {
		struct exec_dest *d = &dest[i].d;
		uint64_t bytes = 0;

		if (dest[i].r > 0 || stopped[0]) {
			exec_copy_out_failed(s, list, out[i].guest, d->path,
					     stopped[0] ? stopped : dest[i].why);
			continue;
		}
		r = copy_one(s, &out[i], d->path, d->dfd, d->name, (uint64_t)s->copy_out_max - total,
			     list, stopped, sizeof stopped, &bytes);
		if (r == 2)
			r = exec_tree_out(s, &out[i], d->path, d->dfd, d->name,
					  (uint64_t)s->copy_out_max - total, list, stopped,
					  sizeof stopped, &bytes);
		if (r < 0) {
			dests_close(dest, n);
			return r;
		}
		/* What the guest sent counts, copied or not. */
		total += bytes;
	}
	dests_close(dest, n);
	if (stopped[0])
		s->c.wlen = s->c.woff = 0; /* nothing to flush to a stopped vm */
	if (conn_flush(&s->c, mono_ms() + 5000) < 0)
		json_array_append_new(s->warnings, json_sprintf("agent: %s", s->c.err));
	conn_close(&s->c);
	return 0;
}

int exec_at_deadline(struct exec_session *s, const struct exec_copy *out, int n,
		     json_t **copied_out)
{
	if (exec_stop_vm(s) < 0)
		return exec_fail_not_stopped(s, "the --timeout-ms deadline passed");
	json_array_append_new(s->warnings,
		json_sprintf("the guest did not report the command's end within %d ms of the "
			     "--timeout-ms deadline; the host stopped the vm",
			     EXEC_DEADLINE_GRACE_MS));
	*copied_out = json_array();
	for (int i = 0; i < n; i++) {
		json_array_append_new(*copied_out,
				      json_pack("{s:s, s:s, s:s}", "guest", out[i].guest, "host",
						out[i].host, "error",
						"not copied: the vm was stopped at the deadline"));
		json_array_append_new(s->warnings,
				      json_sprintf("copy-out %s not done: the vm was stopped at "
						   "the deadline", out[i].guest));
	}
	return 0;
}

json_t *exec_result(struct exec_session *s, const char *vm_name, const struct exec_status *ex,
		    json_t *copied_in, json_t *copied_out, int64_t exec_ms)
{
	json_t *res;

	for (int i = 0; i < 2; i++)
		if (s->out[i].fd >= 0 && fsync(s->out[i].fd) < 0 && errno != EINVAL) {
			exec_fail(s, EX_SYS, "io", "%s: %s", s->out[i].path, strerror(errno));
			json_decref(copied_in);
			json_decref(copied_out);
			return NULL;
		}
	res = json_pack("{s:b, s:{s:s, s:s}, s:i, s:o, s:b}", "ok", 1, "vm", "id", s->vm_id,
			"name", vm_name, "exit_code", (int)ex->code,
			"signal", ex->sig ? json_integer(ex->sig) : json_null(),
			"timed_out", (int)ex->timed_out);
	if (ex->kind[0]) {
		json_object_set_new(res, "error_kind",
				    utf8_json((const uint8_t *)ex->kind, strlen(ex->kind), 0));
		json_object_set_new(res, "error",
				    utf8_json((const uint8_t *)ex->msg, strlen(ex->msg), 0));
	}
	for (int i = 0; i < 2; i++) {
		struct exec_stream *o = &s->out[i];
		char k[32];

		json_object_set_new(res, o->name, utf8_json(o->inband, o->inlen, o->bytes > o->inlen));
		snprintf(k, sizeof k, "%s_bytes", o->name);
		json_object_set_new(res, k, json_integer((json_int_t)o->bytes));
		snprintf(k, sizeof k, "%s_truncated", o->name);
		json_object_set_new(res, k, json_boolean(o->bytes > o->inlen));
		snprintf(k, sizeof k, "%s_log", o->name);
		json_object_set_new(res, k, json_string(o->path));
		snprintf(k, sizeof k, "%s_log_truncated", o->name);
		json_object_set_new(res, k, json_boolean(o->bytes > (uint64_t)s->log_max));
		if (!o->eof)
			json_array_append_new(s->warnings,
					      json_sprintf("%s: no end-of-stream from the agent",
							   o->name));
	}
	/* which way stdin and copy-in went: tests tell the lane from the
	 * port by it (both must stay tested), a reader of figures too */
	json_object_set_new(res, "bulk", json_boolean(s->bulk_fd >= 0));
	json_object_set_new(res, "copied_in", copied_in ? copied_in : json_array());
	json_object_set_new(res, "copied_out", copied_out);
	json_object_set(res, "warnings", s->warnings);
	json_object_set_new(res, "exec_ms", json_integer(exec_ms));
	return res;
}
