/* vmstop.h - stop a running VM without its agent: QMP "quit", then its
 * supervisor.  isopod-stop's --force path (and its fallback after the
 * agent), and isopod-exec --stop FILE's, which stops the VM of a run after
 * its command so that the front end need not start isopod-stop (issue 13,
 * goal 3).  "Stopped" means the VM's lock is free (its supervisor exited
 * after QEMU), as everywhere.  No exit: errors come back in the struct. */
#ifndef ISOPOD_VMSTOP_H
#define ISOPOD_VMSTOP_H

#include <jansson.h>
#include <stdint.h>
#include <stddef.h>

struct vm_stop {
	const char *how; /* "qmp" or "signal", once stopped */
	int code;        /* on -1: the exit status it means (EX_TIMEOUT, EX_SYS) */
	char note[256];  /* QMP's failure when the supervisor had to be signalled, or "" */
	char err[256];   /* on -1: a sentence */
};

/* Stop VM id (running: the caller has checked) whose QMP socket is
 * qmp_sock: "quit" and wait up to timeout_ms for its lock to be free; else
 * SIGTERM to the supervisor its record meta names (a pidfd opened first,
 * then the lock checked, so that a recycled pid is never signalled) and
 * wait 5 s.  0 stopped (st->how), or -1 (st->err, st->code). */
int vm_stop_quit(const char *id, const char *qmp_sock, const json_t *meta, int64_t timeout_ms,
		 struct vm_stop *st);

#endif
