/* execopt.h - what one command in a VM is made of, before and after it runs:
 * the copy specs, --env and the filtered mode's proxy variables, the checks
 * a tool makes before a VM exists, the EXEC request and the agent's EXIT.
 * Pure: no connection, no exit; errors come back with a reason.  The session
 * that runs the command is lib/execio.h. */
#ifndef ISOPOD_EXECOPT_H
#define ISOPOD_EXECOPT_H

#include "frame.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* What all --copy-out of one exec may bring to the host by default: generous
 * for build artefacts, finite so that a guest cannot fill the host's disk. */
#define EXEC_COPY_OUT_MAX_DEFAULT (4LL << 30)
/* What each output stream's log (vms/<id>/exec-<n>.stdout, .stderr) keeps
 * by default; past it the bytes are counted, not written (DECISIONS.md). */
#define EXEC_LOG_MAX_DEFAULT (1LL << 30)
/* The proxy variables of a filtered VM: at most this many, this long. */
#define EXEC_PROXY_MAX 8
#define EXEC_PROXY_SZ 96

/* One --copy-in (host -> guest) or --copy-out (guest -> host). */
struct exec_copy {
	char *host, *guest;
};

/* Split a copy spec in place: HOST:/GUEST when host_first (--copy-in), else
 * /GUEST:HOST (--copy-out); opt names the option in the reason.  0, or -1
 * with why (the guest path is not absolute, is too long, a side is empty). */
int exec_copy_split(char *spec, const char *opt, struct exec_copy *cp, int host_first,
		    char *why, size_t wsz);
/* An --env value: NAME=VALUE with a name.  NULL, or the reason. */
const char *exec_env_invalid(const char *kv);
/* The proxy variables a command in a VM gets from its record's "net": for
 * a filtered VM, http(s)_proxy (both spellings) at the gateway's broker and
 * no_proxy for loopback; none otherwise.  The count written to env. */
int exec_proxy_env(const json_t *net, char env[EXEC_PROXY_MAX][EXEC_PROXY_SZ]);
/* HOST of a copy-out with its trailing slashes taken off, into buf[bsz]
 * ("/" stays "/").  1 when there were some (HOST then names a directory
 * that must be there), 0 when not, -1 when it does not fit. */
int exec_dest_trim(const char *host, char *buf, size_t bsz);
/* A copy-out destination, opened the one way whatever HOST's spelling
 * (isopod-exec(1)): its last component never followed, a trailing slash
 * included (the kernel follows a symlink before a trailing slash even
 * under O_NOFOLLOW, so the slashes are taken off first and HOST must then
 * be a directory).  HOST a directory: the copy lands in it as the guest
 * path's last component; else as HOST's last component in HOST's parent. */
struct exec_dest {
	int dfd;                 /* O_PATH descriptor of the directory it lands in */
	const char *name;        /* its name there (in path) */
	char path[PATH_MAX];     /* where it lands, as shown */
};
/* 0 (d->dfd open), 1 the destination cannot be used (why: recorded as the
 * copy-out's failure, nothing open), -1 a path too long (why). */
int exec_dest_open(const char *host, const char *guest, struct exec_dest *d, char *why,
		   size_t wsz);
/* --check: the stdin file (NULL or "-": none) a readable file, every
 * copy-in source readable, every copy-out destination usable as
 * exec_dest_open finds it then.  0, or -1 with why. */
int exec_check_paths(const char *stdin_file, const struct exec_copy *in, int nin,
		     const struct exec_copy *out, int nout, char *why, size_t wsz);

/* The EXEC request: argv (as /bin/sh -c's script when shell), the proxy
 * variables ahead of env (so --env may override them), cwd (NULL: the
 * agent's), timeout_ms (0: none), stdin streamed or not. */
struct exec_request {
	char *const *argv;
	int argc;
	int shell;
	const char (*proxy)[EXEC_PROXY_SZ];
	int nproxy;
	char *const *env;
	int nenv;
	const char *cwd;
	uint64_t timeout_ms;
	int has_stdin;
};
/* Encode r as EXEC's TLV payload into buf[cap].  The length, or -1 when it
 * does not fit. */
long exec_request_encode(const struct exec_request *r, uint8_t *buf, size_t cap);

/* What the agent's EXIT said. */
struct exec_status {
	int32_t code;
	uint32_t sig, timed_out;
	char kind[64], msg[1024];
};
/* Decode EXIT into ex (members not sent keep their value).  0, or -1 when
 * the values are out of range (exit 0..255, signal 0..64, timed_out 0|1):
 * a broken or lying agent, not a result to pass on. */
int exec_status_decode(const struct frame *fr, struct exec_status *ex);
/* The first TLV `want` of a frame as u64 (a u32 widened); 0 when absent. */
uint64_t frame_tlv_u64(const struct frame *fr, uint8_t want);

#endif
