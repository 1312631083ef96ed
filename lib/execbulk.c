/* execbulk.c - the host's side of the bulk lane (doc/PROTOCOL.md "Bulk
 * lane"): stdin and copy-in bytes written into slots of the VM's
 * bulk.raw, each named to the agent in a BULK frame; the agent's BULK_DONE
 * returns a slot, checked (in range, lent) before it is reused. */
#include "execio.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The lane's bytes are this exec's stdin and files: none stays in the
 * VM's directory (nor on the store's disk) once a transfer is over, nor
 * after a failure (exec_fail, isopod-exec's fail and finish), always while
 * this exec holds the VM's lock: a punch after it would zero the next
 * exec's bytes.  An exec killed outright leaves them to the next exec's
 * open (below) or QEMU's end (the supervisor unlinks the file). */
void exec_bulk_punch(struct exec_session *s)
{
	if (s->bulk_fd >= 0 && s->bulk_dirty &&
	    fallocate(s->bulk_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      (off_t)s->bulk_n * BULK_SLOT) == 0)
		s->bulk_dirty = 0;
}

int exec_bulk_open(struct exec_session *s, const char *path)
{
	struct stat st;
	uint64_t bytes;
	int fd;

	if (s->no_bulk || !s->bulk_agent)
		return 0; /* an older agent or template, or told not to */
	/* A VM booted before the lane existed has no file: the port then. */
	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return exec_fail(s, EX_SYS, "io", "%s: %s", path, strerror(e));
	}
	/* Ours, and its only name: the lane's bytes are the caller's stdin
	 * and files, never written into a file someone else owns or reaches
	 * by another name (a hard link planted in the VM's directory). */
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_nlink != 1) {
		close(fd);
		return exec_fail(s, EX_SYS, "io", "%s: %s", path,
				 !S_ISREG(st.st_mode) ? "not a regular file" :
				 st.st_uid != geteuid() ? "not owned by this user" :
				 "has more than one name (hard links)");
	}
	/* The smaller of what each side has: the agent's device is the file
	 * QEMU opened at start, which is this one unless someone replaced it. */
	bytes = (uint64_t)st.st_size < s->bulk_agent ? (uint64_t)st.st_size : s->bulk_agent;
	if (!(s->bulk_n = bulk_nslots(bytes))) {
		close(fd);
		return 0;
	}
	if (!(s->bulk_buf = malloc(BULK_SLOT))) {
		close(fd);
		return exec_fail(s, EX_SYS, "io", "out of memory");
	}
	s->bulk_fd = fd;
	s->bulk_lent = 0;
	/* what an exec killed before its punch left (we hold the lock) */
	s->bulk_dirty = 1;
	exec_bulk_punch(s);
	return 0;
}

int exec_bulk_take(struct exec_session *s, const struct frame *fr)
{
	uint32_t slot = 0;

	/* The guest names the slot: in bounds and lent, or the transfer
	 * ends.  Nothing is read or written here; a slot wrongly freed
	 * would only let the host overwrite bytes the agent still reads, but
	 * a slot out of bounds must never reach a pwrite's offset. */
	if (bulk_done_decode(fr, s->bulk_n, &slot) < 0 || !(s->bulk_lent & (1u << slot)))
		return exec_fail(s, EX_SYS, "protocol", "vm %s: the agent returned bulk slot %u, "
			    "not one lent (%u slots, payload %u bytes)", s->vm_id,
			    fr->len == 4 ? get_le32(fr->payload) : 0, s->bulk_n, fr->len);
	s->bulk_lent &= ~(1u << slot);
	return 0;
}

/* A free slot, or -1 when all are lent. */
int exec_bulk_free_slot(const struct exec_session *s)
{
	for (uint32_t i = 0; i < s->bulk_n; i++)
		if (!(s->bulk_lent & (1u << i)))
			return (int)i;
	return -1;
}

/* bulk_buf[0..len) into the slot, then the frame naming it: the agent
 * reads the slot only after the frame, and the file's page cache is
 * QEMU's too (cache=writeback), so the bytes are there when it does. */
static int bulk_send(struct exec_session *s, uint32_t stream, int slot, size_t len)
{
	uint8_t pl[BULK_PAYLOAD];
	size_t off = 0;

	while (off < len) {
		ssize_t n = pwrite(s->bulk_fd, s->bulk_buf + off, len - off,
				   (off_t)slot * BULK_SLOT + (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return exec_fail(s, EX_SYS, "io", "vm %s: the bulk lane: %s", s->vm_id,
				    n < 0 ? strerror(errno) : "wrote nothing");
		s->bulk_dirty = 1;
		off += (size_t)n;
	}
	bulk_encode(pl, (uint32_t)slot, (uint32_t)len);
	/* lent only once the frame naming it is queued */
	if (conn_queue(&s->c, F_BULK, stream, pl, sizeof pl) < 0)
		return exec_fail(s, EX_SYS, "io", "vm %s: the bulk lane: %s", s->vm_id,
				 strerror(errno));
	s->bulk_lent |= 1u << slot;
	if (conn_flush_some(&s->c) < 0)
		return exec_fail(s, EX_SYS, "agent", "vm %s: %s", s->vm_id, s->c.err);
	return 0;
}

/* A file's bytes through the bulk lane, a slot at a time, hashed and
 * counted as send_stream does. */
int exec_bulk_send_file(struct exec_session *s, int fd, uint32_t stream, const char *what,
			struct sha256_stream *h, uint64_t *sent)
{
	struct frame fr;
	int r, slot;

	for (;;) {
		size_t have = 0;

		while ((slot = exec_bulk_free_slot(s)) < 0) {
			if ((r = exec_wait_frame(s, &fr)) < 0)
				return r;
			if (r && fr.type == F_BULK_DONE && fr.stream == stream) {
				if (exec_bulk_take(s, &fr) < 0)
					return EXEC_FAILED;
				continue;
			}
			if (r && fr.type == F_CREDIT)
				continue; /* the port's window: not ours to use */
			return exec_fail_frame(s, &fr, what); /* an ERROR, or unexpected */
		}
		while (have < BULK_SLOT) {
			ssize_t n = read(fd, s->bulk_buf + have, BULK_SLOT - have);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return exec_fail(s, EX_SYS, "io", "%s: read: %s", EXC(what), strerror(errno));
			if (n == 0)
				break;
			have += (size_t)n;
		}
		if (have == 0)
			break;
		sha256_add(h, s->bulk_buf, have);
		*sent += have;
		if ((r = bulk_send(s, stream, slot, have)) < 0)
			return r;
		if (have < BULK_SLOT)
			break;
	}
	conn_queue(&s->c, F_EOF, stream, NULL, 0);
	return 0;
}

/* stdin is readable, and a slot free: fill it with what stdin has now
 * (one read per readiness, so a blocking stdin never blocks us), send it;
 * EOF as feed_stdin. */
int exec_bulk_feed_stdin(struct exec_session *s, int fd, int *eof)
{
	int slot = exec_bulk_free_slot(s), e = 0;
	size_t have = 0;
	ssize_t n = 0;

	if (slot < 0)
		return 0; /* all lent: the caller polls stdin only with one free */
	while (have < BULK_SLOT) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (have && poll(&p, 1, 0) <= 0)
			break;
		n = read(fd, s->bulk_buf + have, BULK_SLOT - have);
		e = n < 0 ? errno : 0; /* before bulk_send's calls change it */
		if (n < 0 && e == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
	}
	if (have && bulk_send(s, STREAM_STDIN, slot, have) < 0)
		return EXEC_FAILED;
	if (n == 0 || (n < 0 && e != EAGAIN && e != EINTR)) {
		if (n < 0)
			json_array_append_new(s->warnings,
					      json_sprintf("stdin: read: %s", strerror(e)));
		conn_queue(&s->c, F_EOF, STREAM_STDIN, NULL, 0);
		*eof = 1;
	}
	return 0;
}


/* After EXIT every slot lent comes back before the exec goes on: a BULK
 * sent as the command ended reaches the agent after its EXIT and is
 * returned then, unread.  Anything else now is the agent's fault; so is a
 * slot still out at s->slots_due_ms (exec_wait_frame stops the vm). */
int exec_bulk_after_exit(struct exec_session *s)
{
	while (s->bulk_lent) {
		struct frame fr;
		int g = exec_wait_frame(s, &fr);

		if (g < 0)
			return g;
		if (g == 0)
			return exec_fail(s, EX_SYS, "protocol", "vm %s: no frame after EXIT", s->vm_id);
		if (fr.type == F_BULK_DONE) {
			if (exec_bulk_take(s, &fr) < 0)
				return EXEC_FAILED;
		} else if (fr.type != F_CREDIT && fr.type != F_EOF) {
			return exec_fail(s, EX_SYS, "protocol", "vm %s: frame type %u after EXIT, "
				    "bulk slots not returned (0x%x)", s->vm_id, fr.type, s->bulk_lent);
		}
	}
	return 1;
}
