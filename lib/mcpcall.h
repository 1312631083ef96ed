/* mcpcall.h - isopod-mcp(1)'s call lifecycle (lib/mcpcall.c): on a host
 * that requires an attestation, the verdict a call waits for and its
 * refusal; its argv built and host files opened when it starts; its
 * progress polled; stopped when cancelled or past its budget; answered
 * from what the child wrote once it exited.  bin/isopod-mcp.c keeps main,
 * the requests, the queue and the spawn (start_call sets the child's
 * ISOPOD_*_FD in our environment, which no library does: t/10-cli.bats),
 * the poll loop that drains the children's pipes and reaps them, and the
 * output to the client, declared below: a client gone mid-write ends the
 * server (111), which is the program's decision, so nothing here calls
 * die. */
#ifndef ISOPOD_MCPCALL_H
#define ISOPOD_MCPCALL_H

#include "mcptools.h"

#include <jansson.h>

#define OUT_MAX (16u << 20)        /* a tool's stdout (the runner's bound too) */
#define KILL_GRACE_MS 5000         /* SIGTERM to the group, then SIGKILL */
/* The front end keeps a run's budget (timeout_s, default 600) itself; a
 * call still there this long after it is stopped, as isopod-runner does. */
#define BUDGET_GRACE_S 60
#define BUDGET_DEFAULT_S 600
#define PROGRESS_MS 500
#define VMID_FD 9 /* the front end keeps 3 and 4 for its steps */
#define VERIFY_MS 60000 /* isopod-attest verify hashes the images: seconds */

/* The output to the client (bin/isopod-mcp.c). */
void send_msg(json_t *msg);
__attribute__((format(printf, 3, 4))) void logmsg(struct server *s, int level,
						  const char *fmt, ...);
void reply_error(json_t *id, int code, const char *msg, json_t *data);
void reply_tool(json_t *id, json_t *sc, int is_error);

void call_free(struct call *c);
void progress(struct call *c, const char *msg);
int awaits_verdict(struct server *s, const struct call *c);
int attested(struct server *s, struct call *c);
int build_call(struct server *s, struct call *c);
void progress_tick(struct server *s);
void verify_reap(struct server *s);
void stop_call(struct server *s, struct call *c, const char *why);
void stop_kept(struct server *s);
void finish_call(struct server *s, struct call *c);

#endif
