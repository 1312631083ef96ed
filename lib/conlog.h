/* conlog.h - a VM's console.log, capped (issue 13).
 *
 * QEMU writes the guest's serial console into a pipe (its fd
 * QEMU_CONSOLE_FD, lib/qemu.c) whose read end the VM's supervisor holds
 * for the VM's whole life; the supervisor appends what it reads to
 * console.log up to max bytes, then counts the rest and drops it: the
 * guest, root inside, cannot fill the host's store through /dev/console
 * (~1.1 MB/s under TCG).  The guest never waits on the log: past max the
 * pipe is still read. */
#ifndef ISOPOD_CONLOG_H
#define ISOPOD_CONLOG_H

#include <stddef.h>
#include <stdint.h>

/* isopod-boot --console-max: its default and its range's top. */
#define CONSOLE_MAX_DEFAULT (16LL << 20)
#define CONSOLE_MAX_LIMIT (1LL << 50)

struct conlog {
	int rfd;        /* the pipe's read end (O_NONBLOCK); -1 once at EOF */
	int logfd;      /* console.log (O_APPEND) */
	long long max;  /* bytes the log keeps */
	uint64_t bytes; /* all the guest wrote */
	uint64_t kept;  /* what the log holds: min(bytes, max) unless a write failed */
	int werr;       /* errno of the first write that failed (nothing is written after) */
};

/* console.log at path made anew (O_TRUNC, O_NOFOLLOW, 0600) and the pipe;
 * *qemu_fd is the pipe's write end for QEMU (close-on-exec: proc_spawn
 * dups it to QEMU_CONSOLE_FD; close it once QEMU has it).  0, or -1 with
 * errno (nothing left open). */
int conlog_open(struct conlog *c, const char *path, long long max, int *qemu_fd);
/* Take what the pipe holds now, up to budget bytes (the caller's other
 * descriptors wait meanwhile): past max counted, not written.  1 at EOF
 * or on a read error (rfd closed and -1), 0 otherwise. */
int conlog_drain(struct conlog *c, uint64_t budget);
/* Did the log keep less than the guest wrote? */
int conlog_truncated(const struct conlog *c);
/* Why the log kept less than the guest wrote, in buf ("console.log
 * reached its cap ..."): one wording for a VM's supervisor and the warm
 * template's builder.  Returns buf. */
const char *conlog_cut(const struct conlog *c, char *buf, size_t sz);
/* Close both descriptors (safe twice). */
void conlog_close(struct conlog *c);

#endif
