/* launch.h - one VM's QEMU under isopod-supervise, as isopod-boot starts
 * it: the supervisor exec'd with its fixed descriptors (isopod-supervise(1)),
 * QEMU's pid read back, the agent's handshake, a resume from a warm
 * snapshot over QMP, and the undoing of all that before the boot is
 * confirmed.
 *
 * Process shape:
 *   isopod-boot ──spawn──> isopod-supervise ──jail_spawn──> qemu-system-x86_64
 * The supervisor holds vms/<id>/lock for its whole life (it inherits the
 * caller's open file description: the lock never has a gap), watches
 * QEMU and the owner, and kills QEMU when ctl reaches EOF before 'r'.
 *
 * These functions return errors (a message in msg, and for the handshake
 * and the resume an exit code); the tool decides what to do with them. */
#ifndef ISOPOD_LAUNCH_H
#define ISOPOD_LAUNCH_H

#include "conlog.h"
#include "host.h"
#include "image.h"
#include "warmpool.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One VM's launch.  Initialise with LAUNCH_INIT; the caller sets the
 * inputs before launch_start, and owns lockfd and ownerfd (they stay
 * open here: the caller closes them). */
struct launch {
	/* inputs */
	const char *id;           /* the VM */
	const struct inst *in;    /* its paths */
	int lockfd;               /* vms/<id>/lock, held LOCK_EX */
	int ownerfd;              /* the owner's pidfd, or -1 (--keep) */
	int slotfd;               /* the network slot's lock, or -1 (no NIC) */
	json_t *net;              /* {mode, gateway, allow} for the supervisor, or NULL */
	int jail;                 /* QEMU and broker jailed? */
	char jail_why[PATH_MAX + 64]; /* why (jail_wanted) */
	long long console_max;    /* bytes console.log keeps (--console-max) */
	long long pool_idle_s;    /* a pooled VM's idle lifetime (lib/pool.h), or 0 */
	struct conn *conn;        /* the agent connection's buffers (large) */
	struct hello h;           /* what the agent is told, and what it answers */
	/* what launch_start started; launch_abandon undoes it */
	pid_t sup;                /* the supervisor, our child */
	int supfd;                /* its pidfd */
	int ctlfd;                /* its ctl pipe: 'r' confirms, EOF abandons */
	int start_failed;         /* launch_resume: no QEMU started (the supervisor, the paths) */
};

#define LAUNCH_INIT { .console_max = CONSOLE_MAX_DEFAULT, .lockfd = -1, .ownerfd = -1, .slotfd = -1, .sup = -1, .supfd = -1, .ctlfd = -1 }

/* Start the supervisor, which starts QEMU with av (keepfd, when >= 0,
 * becomes QEMU's fd 3), read back QEMU's pid and put both pids in the
 * record.  0, or -1 with msg. */
int launch_start(struct launch *l, char *const *av, int keepfd, char *msg, size_t msz);
/* Is the supervisor (and so QEMU) gone? */
int launch_gone(const struct launch *l);
/* Connect to the agent of what launch_start started and shake hands
 * (l->h), by deadline.  0, or an exit code (EX_SYS, EX_TIMEOUT) with msg;
 * `within` names the bound in the timeout message. */
int launch_handshake(struct launch *l, int64_t deadline, long long within, char *msg,
		     size_t msz);
/* Resume the VM of shape vm from the checked snapshot sn, then the
 * handshake.  0 with l->h filled and the supervisor waiting for 'r', or an
 * exit code with msg and nothing left running.  sn's descriptors are
 * closed here (but when the first allocation fails). */
int launch_resume(struct launch *l, const struct qemu_vm *vm, struct snap *sn, int64_t deadline,
		  char *msg, size_t msz);
/* The preload library beside the supervisor fit for a clone's QEMU
 * (qemu_memro_ok)?  0, or -1 with why. */
int launch_memro_ok(char *why, size_t wsz);
/* Confirm the boot to the supervisor ('r' on ctl, which is then closed).
 * 0, or -1 when the supervisor (and so QEMU) is gone. */
int launch_confirm(struct launch *l);
/* Stop what launch_start started, before the boot was confirmed: EOF on
 * ctl without 'r' makes the supervisor kill QEMU, and it reaps QEMU before
 * it exits itself.  Safe to call when nothing was started. */
void launch_abandon(struct launch *l);

#endif
