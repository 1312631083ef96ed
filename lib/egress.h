/* egress.h - the VM supervisor's side of isopod-broker (host tools only).
 *
 * A networked VM's supervisor starts one isopod-broker on the slot's
 * gateway before QEMU starts and ends it after QEMU is gone, so the
 * ledger is complete when the VM lock is released (isopod-stop waits for
 * exactly that).  The broker inherits the slot lock: the slot stays busy
 * while any process of this VM uses its addresses. */
#ifndef ISOPOD_EGRESS_H
#define ISOPOD_EGRESS_H

#include "jail.h"
#include "ranges.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

struct egress {
	pid_t pid;     /* -1: none */
	int pidfd;     /* -1: none */
	char *argv[80 + 2 * RANGES_ALLOW_MAX];
	char arg[8][4096];
	char range[RANGES_ALLOW_MAX][RANGES_TEXT_MAX]; /* --allow-range values */
	int argc;
	struct jail jail; /* jail.pid > 0: the broker runs jailed (jail_release after the reap) */
	/* Jail the broker?  egress_plan sets 1; the caller sets what it
	 * decided once for the whole VM (isopod-boot's jail_wanted, passed to
	 * the supervisor in its spec), so QEMU and its broker never differ. */
	int jailed;
	char jail_why[PATH_MAX + 64]; /* when not jailed: why (the broker's log says it) */
};

/* Plan the broker's command line (in the parent, before the supervisor
 * forks): mode "filtered" (proxy + DNS for the allowlist), "learn" (proxy
 * + DNS, every name) or "open" (DNS only, every name).  broker: the isopod-broker to run.  allow: the VM
 * record's net.allow (array of normalised patterns) or NULL.  The host's
 * overrides of the deny list (allow_range lines of its config file,
 * ranges_config_path()) become --allow-range: the broker re-checks
 * addresses against the same list the kernel's table was built from.
 * 0; -1 with msg for bad input (a bad allow_range line: a usage error);
 * -2 with msg when the config file cannot be read. */
int egress_plan(struct egress *e, const char *broker, const char *mode, const char *gw,
		const json_t *allow, const char *ledger, const char *vmid, char *msg, size_t msz);

/* Start it (in the supervisor): stderr to logfd, lockfd inherited as its
 * fd 3, its ledger opened here and handed over as fd 4, pdeath to us; wait
 * (<= timeout_ms) for its ready line.  Unless jail_wanted() says no, in a
 * jail (lib/jail.c) of its own: uid jail_identity("broker-<VM id>"), no
 * capabilities, new mount/pid/ipc/uts/cgroup namespaces but the host's
 * network, its binary and libraries read-only and nothing writable,
 * Landlock, limits (isopod-broker(1), JAIL), unless e->jailed is 0 (the
 * environment and the host's file are not read again here).  What the jail
 * applied (or why none) is a line in logfd.  0, or -1 with msg. */
int egress_start(struct egress *e, int logfd, int lockfd, int timeout_ms, char *msg, size_t msz);

/* The broker's jail (its identity, its cgroup: JAIL_CG_PREFIX) is named
 * EGRESS_JAIL_NAME followed by its VM's id. */
#define EGRESS_JAIL_NAME "broker-"
/* The VM id in such a name (a pointer into it), or NULL. */
const char *egress_jail_vm(const char *name);

/* SIGTERM, wait <= 3 s for it to flush its ledger, then SIGKILL; reaps. */
void egress_stop(struct egress *e);

/* Append ": <the broker's last line in its log at path>" to msg (its reason
 * for failing to start, e.g. no network policy: run isopod-netsetup); the
 * jail line egress_start writes there is never the reason. */
void egress_log_reason(const char *path, char *msg, size_t msz);

/* The first IPv4 nameserver of /etc/resolv.conf into out (the broker's
 * default upstream, read before it is jailed).  0, or -1: none. */
int egress_default_resolver(char *out, size_t sz);

#endif
