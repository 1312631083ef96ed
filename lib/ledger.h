/* ledger.h - isopod-broker's ledger: one JSON line per flow or refusal,
 * appended to a file the VM's record points at (isopod-broker(1), LEDGER).
 *
 * A guest can make refusals as fast as it likes, so the ledger is capped
 * (ISOPOD_LEDGER_MAX bytes, default 64 MiB).  Past the cap, refusals are
 * counted, not written, and nothing new is served (a flow that could not be
 * recorded is not served); flows already open still get their lines, and
 * one last line (ledger_finish) says how many were suppressed.  A ledger
 * that cannot be written counts as full from then on: it fails closed. */
#ifndef ISOPOD_LEDGER_H
#define ISOPOD_LEDGER_H

#include <stddef.h>
#include <stdint.h>

#define LEDGER_MAX_DEFAULT (64ll << 20)

struct ledger {
	int fd;                   /* O_APPEND; -1 when not open */
	const char *vm;           /* the "vm" member of every line, or NULL */
	long long bytes, max, suppressed;
	/* The first failure (then the ledger is full): what failed, and its
	 * errno (0 when there is none to name, e.g. a line not built). */
	const char *failed;
	int err;
};

/* One line: a flow at its end, or a refusal at once. */
struct ledger_rec {
	const char *kind;         /* "http", "connect", "dns", "ledger" */
	const char *name;         /* NULL: null */
	unsigned port;            /* 0: null */
	uint32_t addr;            /* IPv4, network order; 0: null */
	uint64_t up, down;
	int allowed;              /* verdict allowed / denied */
	const char *reason;       /* NULL: null */
	int64_t ms;               /* < 0 is written as 0 */
	const char *qtype;        /* dns only: its "qtype" (NULL: null) */
};

/* Open path for appending (0600, created), its size counted against the
 * cap; the cap from $ISOPOD_LEDGER_MAX when that is a number in
 * 1024..2^40.  0, or -1 with errno. */
int ledger_open(struct ledger *l, const char *path, const char *vm);
/* The same with a descriptor opened for appending by the caller (the
 * jailed broker's: it has no writable path); fd is the ledger's now. */
int ledger_open_fd(struct ledger *l, int fd, const char *vm);

/* The line of r at time ts, with vm when not NULL: a malloc'd string
 * ending in "\n" (the caller frees it), or NULL (ENOMEM). */
char *ledger_line(const struct ledger_rec *r, const char *vm, const char *ts);

/* ISO-8601 UTC time of now with milliseconds, into buf (>= 32 bytes). */
char *ledger_time(char *buf, size_t sz);

/* Append r's line with one write(2), so a reader tailing the file always
 * sees whole lines.  0 written; 1 a refusal past the cap (counted in
 * suppressed); -1 failed (failed and err set, the ledger full from now). */
int ledger_write(struct ledger *l, const struct ledger_rec *r);

/* Past the cap, or failed: nothing new is served. */
int ledger_full(const struct ledger *l);

/* The "policy" line of a lost netsetup table (canary port, reason):
 * written whatever the cap.  0, or -1 (failed set). */
int ledger_policy_lost(struct ledger *l, unsigned port, const char *reason);

/* At the end: when refusals were suppressed, the one line that says how
 * many.  0, or -1 (failed set). */
int ledger_finish(struct ledger *l);

#endif
