/* vmstop.c - a running VM stopped through QMP, else its supervisor (vmstop.h). */
#include "vmstop.h"

#include "qmp.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int vm_stop_quit(const char *id, const char *qmp_sock, const json_t *meta, int64_t timeout_ms,
		 struct vm_stop *st)
{
	const json_t *v = meta ? json_object_get(meta, "supervisor_pid") : NULL;
	long long spid = json_is_integer(v) ? json_integer_value(v) : 0;
	int pfd, wfd, r = 0;

	st->how = NULL;
	st->note[0] = st->err[0] = '\0';
	/* The supervisor's pidfd wakes the wait below as it exits (it frees
	 * the lock then), where a poll of the lock saw it up to 2 ms late: on
	 * every run's critical path.  Only a wake-up: the lock is what is
	 * checked, so a recycled pid costs nothing but the polls of before. */
	wfd = spid > 0 && spid <= INT_MAX ? pidfd_open_((pid_t)spid) : -1;
	if (qmp_simple(qmp_sock, "quit", mono_ms() + 3000, st->note, sizeof st->note) == 0) {
		if (vm_wait_stopped_fd(id, mono_ms() + timeout_ms, wfd) == 0) {
			if (wfd >= 0)
				close(wfd);
			st->how = "qmp";
			return 0;
		}
	}
	if (wfd >= 0)
		close(wfd);
	/* Last resort: the supervisor kills QEMU on SIGTERM.  Open a pidfd
	 * first, then check the lock: a lock still held after the pidfd was
	 * opened proves the pid was not recycled in between. */
	st->code = EX_TIMEOUT;
	if (spid <= 0 || spid > INT_MAX) {
		snprintf(st->err, sizeof st->err, "vm %s did not stop and its record names no supervisor",
			 id);
		return -1;
	}
	pfd = pidfd_open_((pid_t)spid);
	if (pfd >= 0 && vm_running(id) && pidfd_kill(pfd, SIGTERM) < 0 && errno != ESRCH) {
		snprintf(st->err, sizeof st->err, "unable to signal supervisor %lld: %s", spid,
			 strerror(errno));
		st->code = EX_SYS;
		r = -1;
	}
	if (pfd >= 0)
		close(pfd);
	if (r < 0)
		return -1;
	if (vm_wait_stopped(id, mono_ms() + 5000) < 0) {
		snprintf(st->err, sizeof st->err, "vm %s did not stop (supervisor %lld)", id, spid);
		return -1;
	}
	st->how = "signal";
	return 0;
}
