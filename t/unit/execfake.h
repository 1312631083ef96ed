/* execfake.h - what exec_test.c and exectree_test.c share: lib/execio.c
 * and its parts built in, opens that can race a destination, and a fake
 * agent on a unix socket (modes A_*) with start and stop around it. */
#ifndef EXECFAKE_H
#define EXECFAKE_H
#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The race a local user can run beside a copy-out's destination: the
 * directory named there swapped for a symlink (to a directory elsewhere)
 * just before lib/execio.c opens it.  Armed (swap_path set), the first
 * open() of swap_path does the swap, then opens.  With swap_after, the
 * race a writer runs against a copy-in instead: the file opened, then
 * swap_to renamed over swap_path (the path holds other bytes from then
 * on, while the descriptor still reads the first). */
static const char *swap_path, *swap_to;
static int swap_after;

static int swap_open(const char *path, int flags, ...)
{
	char old[256];
	mode_t mode = 0;
	va_list ap;
	int fd;

	va_start(ap, flags);
	if (flags & (O_CREAT | O_TMPFILE))
		mode = va_arg(ap, mode_t);
	va_end(ap);
	if (swap_path && !swap_after && !strcmp(path, swap_path)) {
		snprintf(old, sizeof old, "%s.old", swap_path);
		if (rename(swap_path, old) < 0 || symlink(swap_to, swap_path) < 0)
			return -1;
		swap_path = NULL;
	}
	fd = open(path, flags, mode);
	if (fd >= 0 && swap_path && swap_after && !strcmp(path, swap_path)) {
		if (rename(swap_to, swap_path) < 0) {
			close(fd);
			return -1;
		}
		swap_path = NULL;
	}
	return fd;
}

#define open(...) swap_open(__VA_ARGS__)
#include "../../lib/execopt.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/execio.c"
#include "../../lib/execbulk.c"
#undef open
#include "../../lib/host.c"
#include "../../lib/exectree.c"
#include "../../lib/treeio.c"
#include "../../lib/treestream.c"
#include "../../lib/tree.c"

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "tap.h"

/* No QEMU here: QMP quit fails, and the vm (no record, no lock) counts as
 * stopped, as a vm whose QEMU is already gone. */
int qmp_simple(const char *sock_path, const char *command, int64_t deadline_ms, char *err,
	       size_t errsz)
{
	(void)sock_path, (void)command, (void)deadline_ms;
	snprintf(err, errsz, "no QEMU in a unit test");
	return -1;
}

static void put(int fd, uint8_t type, uint32_t stream, const void *p, size_t n)
{
	uint8_t hdr[FRAME_HDR];

	frame_hdr(hdr, type, stream, (uint32_t)n);
	if (write_all(fd, hdr, sizeof hdr) < 0 || (n && write_all(fd, p, n) < 0))
		_exit(2);
}

static void put_tlv(int fd, uint8_t type, const struct tlv_w *w)
{
	put(fd, type, STREAM_CTL, w->buf, w->len);
}

/* The fake agent's behaviour after the handshake. */
enum { A_OK, A_SILENT, A_BAD_EXIT, A_REFUSE, A_COPY, A_FLOOD, A_TREE, A_TREE_EVIL, A_TREE_BAD8,
       A_SHORT, A_TREE_CTL, A_TREE_LINK, A_TREE_LINKS_MAX, A_TREE_BAD8_TARGET, A_STALE,
       /* HELLO_ACK announces a bulk lane of 8 MiB (dir/bulk.raw); a BULK's
	* slot is read from it into guest-got and returned.  A_BULK_OOB
	* returns slot 16 instead (past any lane), A_BULK_UNLENT a slot in
	* range that was never lent, A_BULK_TWICE each slot twice,
	* A_BULK_LATE a copy-in's last slot only after its FILE_DONE.
	* A_BULK_STDIN: EXEC answered once a stdin BULK came, its slot
	* returned after the EXIT (a slot lent as the command ended).
	* A_BULK_STRAY: a BULK_DONE (slot 0, never lent) before a
	* copy-out's bytes.  A_BULK_KEEP: as A_BULK_STDIN, but the slot is
	* never returned (PINGs still answered). */
       A_BULK, A_BULK_OOB, A_BULK_UNLENT, A_BULK_TWICE, A_BULK_LATE, A_BULK_STDIN,
       A_BULK_STRAY, A_BULK_KEEP,
       /* not a lane's: two CREDITs for a copy-in's stream before its FILE_DONE */
       A_CREDIT_LATE };

static char dir[64], sock[96];

/* A guest directory's tree stream, in pieces of 7 bytes (record heads cut
 * anywhere).  A_TREE: a directory, a file with a hole of 512 KiB, a
 * symlink, a skipped device.  A_TREE_EVIL: a symlink to the test's
 * directory (outside the destination), then a file through it.
 * A_TREE_LINK: that symlink alone (a tree the sink takes whole).
 * A_TREE_LINKS_MAX: EXEC_TREE_FILES_MAX symlinks, then a file.
 * A_TREE_BAD8_TARGET: a symlink whose target is not UTF-8, then a file. */
static void send_tree(int fd, int mode)
{
	static uint8_t st[4 * TS_HDR_MAX];
	uint8_t tb[64];
	struct tlv_w w;
	size_t n = 0;

	n += ts_put_entry(st + n, 'd', 02755, 1, 0, ".", 0, NULL);
	if (mode == A_TREE) {
		n += ts_put_entry(st + n, 'd', 0750, 1, 0, "a", 0, NULL);
		n += ts_put_entry(st + n, 'f', 04755, 1, 0, "a/f", 1 << 20, NULL);
		n += ts_put_seg(st + n, 512 << 10, 4);
		memcpy(st + n, "data", 4), n += 4;
		n += ts_put_seg(st + n, 0, 0);
		n += ts_put_entry(st + n, 'l', 0777, 1, 0, "s", 0, "/etc");
		n += ts_put_entry(st + n, 'n', 0, 0, 0, "dev", 0, "a device: skipped");
	} else if (mode == A_TREE_CTL) {
		/* a file's path of 300 control bytes and a slash: 301 bytes raw, 1800 as
		 * JSON escapes them */
		char name[301];

		memset(name, 1, 300);
		name[200] = 0;
		n += ts_put_entry(st + n, 'd', 0755, 1, 0, name, 0, NULL);
		name[200] = '/';
		name[300] = 0;
		n += ts_put_entry(st + n, 'f', 0644, 1, 0, name, 4, NULL);
		n += ts_put_seg(st + n, 0, 4);
		memcpy(st + n, "data", 4), n += 4;
		n += ts_put_seg(st + n, 0, 0);
	} else if (mode == A_TREE_LINK) {
		n += ts_put_entry(st + n, 'l', 0777, 1, 0, "l", 0, dir);
	} else if (mode == A_TREE_LINKS_MAX || mode == A_TREE_BAD8_TARGET) {
		/* 26 bytes a symlink: the 1000 fit the buffer */
		char name[16];

		for (unsigned i = 0; i < (mode == A_TREE_LINKS_MAX ? EXEC_TREE_FILES_MAX : 1); i++) {
			snprintf(name, sizeof name, "l%03u", i);
			n += ts_put_entry(st + n, 'l', 0777, 1, 0, name, 0,
					  mode == A_TREE_LINKS_MAX ? "f" : "\xff\xfe");
		}
		n += ts_put_entry(st + n, 'f', 0644, 1, 0, "f", 4, NULL);
		n += ts_put_seg(st + n, 0, 4);
		memcpy(st + n, "data", 4), n += 4;
		n += ts_put_seg(st + n, 0, 0);
	} else if (mode == A_TREE_BAD8) {
		/* a name that is not UTF-8, sent twice: the error names it */
		n += ts_put_entry(st + n, 'd', 0755, 1, 0, "\xff\xfe", 0, NULL);
		n += ts_put_entry(st + n, 'd', 0755, 1, 0, "\xff\xfe", 0, NULL);
	} else {
		n += ts_put_entry(st + n, 'l', 0777, 1, 0, "l", 0, dir);
		n += ts_put_entry(st + n, 'f', 0644, 1, 0, "l/pwned", 4, NULL);
		n += ts_put_seg(st + n, 0, 4);
		memcpy(st + n, "evil", 4), n += 4;
		n += ts_put_seg(st + n, 0, 0);
	}
	st[n++] = 'e';
	for (size_t off = 0; off < n; off += 7)
		put(fd, F_DATA, STREAM_FILE, st + off, n - off < 7 ? n - off : 7);
	put(fd, F_EOF, STREAM_FILE, NULL, 0);
	tlv_init(&w, tb, sizeof tb);
	tlv_put_u64(&w, T_BYTES, n);
	tlv_put_u32(&w, T_TREE, 1);
	put_tlv(fd, F_FILE_DONE, &w);
}


/* Blocking read of the next frame (payload into buf). */
static int get(int fd, uint8_t *buf, size_t *have, struct frame *fr, uint8_t *pl)
{
	size_t used;

	for (;;) {
		int r = frame_parse(buf, *have, fr, &used);
		ssize_t n;

		if (r == 1) {
			memcpy(pl, fr->payload, fr->len);
			fr->payload = pl;
			memmove(buf, buf + used, *have - used);
			*have -= used;
			return 1;
		}
		if (r < 0)
			return -1;
		n = read(fd, buf + *have, CONN_RBUF - *have);
		if (n <= 0)
			return -1;
		*have += (size_t)n;
	}
}

static void agent(int lfd, int mode)
{
	static uint8_t buf[CONN_RBUF], pl[FRAME_MAX_PAYLOAD], tb[256];
	size_t have = 0;
	struct frame fr;
	struct tlv_w w;
	uint64_t cookie, got = 0;
	uint8_t late[4];
	int fd = accept(lfd, NULL, NULL), gfd = -1, held = 0;

	if (fd < 0)
		_exit(2);
	while (get(fd, buf, &have, &fr, pl) == 1 && fr.type != F_HELLO)
		;
	cookie = frame_tlv_u64(&fr, T_COOKIE);
	tlv_init(&w, tb, sizeof tb);
	tlv_put_u32(&w, T_VERSION, ISOPOD_PROTO_VERSION);
	tlv_put_u64(&w, T_COOKIE, cookie);
	tlv_put_str(&w, T_ROOT, "ro");
	if (mode >= A_BULK && mode != A_CREDIT_LATE)
		tlv_put_u64(&w, T_BULK, 8u * BULK_SLOT);
	put_tlv(fd, F_HELLO_ACK, &w);
	while (get(fd, buf, &have, &fr, pl) == 1) {
		if (mode == A_SILENT)
			continue;
		if (fr.type == F_PING)
			put(fd, F_PONG, STREAM_CTL, NULL, 0);
		/* what a copy-in brings, kept as the guest got it: dir/guest-got */
		if (fr.type == F_FILE_PUT) {
			char gp[128];

			got = 0;
			snprintf(gp, sizeof gp, "%s/guest-got", dir);
			if (gfd >= 0)
				close(gfd);
			gfd = open(gp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		}
		if (fr.type == F_DATA && fr.stream == STREAM_FILE) {
			got += fr.len;
			if (gfd >= 0 && write_all(gfd, fr.payload, fr.len) < 0)
				_exit(2);
		}
		if (fr.type == F_BULK && fr.stream == STREAM_FILE) {
			static uint8_t sb[BULK_SLOT];
			char lp[128];
			uint32_t slot, len;
			uint8_t rp[4];
			int lfd2;

			snprintf(lp, sizeof lp, "%s/bulk.raw", dir);
			if (bulk_decode(&fr, 8, &slot, &len) < 0 ||
			    (lfd2 = open(lp, O_RDONLY | O_CLOEXEC)) < 0 ||
			    pread(lfd2, sb, len, (off_t)slot * BULK_SLOT) != (ssize_t)len)
				_exit(2);
			close(lfd2);
			got += len;
			if (gfd >= 0 && write_all(gfd, sb, len) < 0)
				_exit(2);
			put_le32(rp, mode == A_BULK_OOB ? 16 : mode == A_BULK_UNLENT ? (slot + 1) % 8
										  : slot);
			if (mode == A_BULK_LATE)
				memcpy(late, rp, sizeof late), held = 1;
			else
				put(fd, F_BULK_DONE, STREAM_FILE, rp, sizeof rp);
			if (mode == A_BULK_TWICE)
				put(fd, F_BULK_DONE, STREAM_FILE, rp, sizeof rp);
		}
		if (fr.type == F_EOF && fr.stream == STREAM_FILE) {
			tlv_init(&w, tb, sizeof tb);
			/* A_SHORT: an agent that wrote a byte less than it got */
			tlv_put_u64(&w, T_BYTES, mode == A_SHORT && got ? got - 1 : got);
			if (mode == A_CREDIT_LATE) {
				put(fd, F_CREDIT, STREAM_FILE, w.buf, w.len);
				put(fd, F_CREDIT, STREAM_FILE, w.buf, w.len);
			}
			put_tlv(fd, F_FILE_DONE, &w);
			if (held)
				put(fd, F_BULK_DONE, STREAM_FILE, late, sizeof late), held = 0;
		}
		if (fr.type == F_BULK && fr.stream == STREAM_STDIN && mode == A_BULK_STDIN && held) {
			put(fd, F_BULK_DONE, STREAM_STDIN, fr.payload, 4);
			continue;
		}
		if (fr.type == F_BULK && fr.stream == STREAM_STDIN && mode == A_BULK_KEEP && held)
			continue;
		if (fr.type == F_BULK && fr.stream == STREAM_STDIN &&
		    (mode == A_BULK_STDIN || mode == A_BULK_KEEP)) {
			/* the command has ended meanwhile: EXIT, then the slot
			 * (A_BULK_KEEP: never) */
			held = 1; /* (EXIT sent) */
			tlv_init(&w, tb, sizeof tb);
			tlv_put_u32(&w, T_EXIT_CODE, 0);
			tlv_put_u32(&w, T_SIGNAL, 0);
			tlv_put_u32(&w, T_TIMED_OUT, 0);
			put(fd, F_EOF, STREAM_STDOUT, NULL, 0);
			put(fd, F_EOF, STREAM_STDERR, NULL, 0);
			put_tlv(fd, F_EXIT, &w);
			if (mode == A_BULK_STDIN)
				put(fd, F_BULK_DONE, STREAM_STDIN, fr.payload, 4);
			continue;
		}
		if (fr.type == F_FILE_GET && (mode == A_TREE || mode == A_TREE_EVIL || mode == A_TREE_BAD8 ||
					    mode == A_TREE_CTL || mode == A_TREE_LINK ||
					    mode == A_TREE_LINKS_MAX || mode == A_TREE_BAD8_TARGET)) {
			if (frame_tlv_u64(&fr, T_TREE) == 1) {
				send_tree(fd, mode);
				continue;
			}
			tlv_init(&w, tb, sizeof tb);
			tlv_put_str(&w, T_ERROR_KIND, "is_dir");
			tlv_put_str(&w, T_MESSAGE, "a directory");
			put_tlv(fd, F_ERROR, &w);
			continue;
		}
		if (fr.type == F_FILE_GET) {
			/* Four bytes, or (A_FLOOD) more than the host allows. */
			size_t n = mode == A_FLOOD ? 100 : 4;
			uint8_t data[100];

			memset(data, 'x', sizeof data);
			if (mode == A_BULK_STRAY) {
				memset(data, 0, 4);
				put(fd, F_BULK_DONE, STREAM_FILE, data, 4);
			}
			put(fd, F_DATA, STREAM_FILE, data, n);
			put(fd, F_EOF, STREAM_FILE, NULL, 0);
			tlv_init(&w, tb, sizeof tb);
			tlv_put_u64(&w, T_BYTES, n);
			tlv_put_u32(&w, T_MODE, 0640);
			put_tlv(fd, F_FILE_DONE, &w);
		}
		if (fr.type != F_EXEC || mode == A_BULK_STDIN || mode == A_BULK_KEEP)
			continue;
		if (mode == A_REFUSE) {
			tlv_init(&w, tb, sizeof tb);
			tlv_put_str(&w, T_ERROR_KIND, "bad_request");
			tlv_put_str(&w, T_MESSAGE, "no");
			put_tlv(fd, F_ERROR, &w);
			continue;
		}
		put(fd, F_DATA, STREAM_STDOUT, "hi\n", 3);
		put(fd, F_EOF, STREAM_STDOUT, NULL, 0);
		put(fd, F_EOF, STREAM_STDERR, NULL, 0);
		tlv_init(&w, tb, sizeof tb);
		tlv_put_u32(&w, T_EXIT_CODE, mode == A_BAD_EXIT ? 256 : 3);
		tlv_put_u32(&w, T_SIGNAL, 0);
		tlv_put_u32(&w, T_TIMED_OUT, 0);
		put_tlv(fd, F_EXIT, &w);
		if (mode == A_STALE) {
			/* an older agent: stdin it discarded, credited after EXIT;
			 * and a PONG nobody waits for */
			tlv_init(&w, tb, sizeof tb);
			tlv_put_u64(&w, T_BYTES, 5);
			put(fd, F_CREDIT, STREAM_STDIN, w.buf, w.len);
			put(fd, F_PONG, STREAM_CTL, NULL, 0);
		}
	}
	_exit(0);
}

/* A test program's start: its scratch dir (the fake agent's socket in it)
 * and a store without records; -1 when either cannot be had. */
static int fake_init(const char *name)
{
	char home[96];

	signal(SIGPIPE, SIG_IGN);
	progname = name;
	snprintf(dir, sizeof dir, "/tmp/%s.XXXXXX", name);
	if (!mkdtemp(dir))
		return -1;
	snprintf(sock, sizeof sock, "%s/agent.sock", dir);
	snprintf(home, sizeof home, "%s/home", dir);
	mkdir(home, 0700);
	setenv("ISOPOD_HOME", home, 1); /* no vm record: exec_stop_vm finds it stopped */
	return sodium_init() < 0 ? -1 : 0;
}

/* Its end: the scratch dir removed, the TAP summary's status. */
static int fake_done(void)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		ok(0, "cleanup");
	return tap_done();
}

/* A session on a fresh fake agent; its pid in *pid. */
static int start(struct exec_session *s, int mode, pid_t *pid)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	unlink(sock);
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1) < 0)
		return -1;
	if ((*pid = fork()) == 0)
		agent(lfd, mode);
	close(lfd);
	if (exec_init(s) < 0)
		return -1;
	s->vm_id = "vm-000000000000";
	s->qmp_sock = "/nonexistent/qmp.sock";
	if (exec_open_logs(s, dir) < 0)
		return -1;
	return exec_connect(s, sock);
}

static void stop(struct exec_session *s, pid_t pid)
{
	int st;

	exec_free(s);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
}

static char *av[] = { "echo", "hi", NULL };
static const struct exec_request req = {.argv = av, .argc = 2};

/* One exec on a fresh fake agent in mode: the command run, then the n
 * copy-outs, with the effective ids of nobody (65534) when nobody is set
 * (for the copy-out only: the session's logs are opened as the caller).
 * Their entries (the caller's to free); *r exec_copy_out's return, or -100
 * when the ids could not be changed and back. */
static json_t *copy_out_run(int mode, const struct exec_copy *cout, int n, int nobody, int *r)
{
	struct exec_session s;
	struct exec_status ex = {.code = -1};
	json_t *out = json_array();
	int rr, changed = 1;
	pid_t pid;

	start(&s, mode, &pid);
	exec_send(&s, &req);
	exec_run(&s, -1, &ex);
	if (nobody)
		changed = setegid(65534) == 0 && seteuid(65534) == 0;
	rr = exec_copy_out(&s, cout, n, out);
	if (nobody && (seteuid(0) < 0 || setegid(0) < 0))
		changed = 0;
	if (r)
		*r = changed ? rr : -100;
	stop(&s, pid);
	return out;
}

/* The error of a copy-out's entry i, or NULL. */
static const char *entry_error(json_t *out, size_t i)
{
	return json_string_value(json_object_get(json_array_get(out, i), "error"));
}

#endif
