/* mcpcall.h - isopod-mcp(1)'s call lifecycle (lib/mcpcall.c): on a host
 * that requires an attestation, the verdict a call waits for and its
 * refusal; its argv built and host files opened when it starts; its
 * progress polled; stopped when cancelled or past its budget; answered
 * from what the child wrote once it exited.  bin/isopod-mcp.c keeps main,
 * the requests, the queue and the spawn (start_call sets the child's
 * ISOPOD_*_FD through the spawn's env), the poll loop that drains the
 * children's pipes and reaps them, and the output to the client, declared
 * below.  An output that fails (EPIPE: the client is gone) is returned,
 * here as there, up to the poll loop, which alone decides: it stops every
 * call and the server ends (111).  Nothing here exits. */
#ifndef ISOPOD_MCPCALL_H
#define ISOPOD_MCPCALL_H

#include "mcptools.h"
#include "slurmjob.h"

#include <jansson.h>

#define OUT_MAX (16u << 20)        /* a tool's stdout (the runner's bound too) */
#define KILL_GRACE_MS 5000         /* SIGTERM to the group, then SIGKILL */
/* --backend slurm's sandbox_run (isopod-slurm run): a SIGTERM may find it
 * in sbatch (SJOB_CMD_MS at most), then it runs scancel (as long) and one
 * scontrol, then removes its job directory: a SIGKILL before that loses
 * the job's id or leaves the job queued and its directory behind. */
#define SLURM_KILL_GRACE_MS (3 * SJOB_CMD_MS + 10000)
/* The front end keeps a run's budget (timeout_s, default 600) itself; a
 * call still there this long after it is stopped, as isopod-runner does. */
#define BUDGET_GRACE_S 60
#define BUDGET_DEFAULT_S 600
#define PROGRESS_MS 500
#define NOTES_FD 9 /* the front end keeps 3 and 4 for its steps */
/* The tools that write progress lines on NOTES_FD (see struct call). */
#define HAS_NOTES(t) (!strcmp((t)->name, "sandbox_run") || !strcmp((t)->name, "stage_flatten"))
#define VERIFY_MS 60000 /* isopod-attest verify hashes the images: seconds */

/* The output to the client (bin/isopod-mcp.c): 0, or -1 with errno (EPIPE:
 * the client is gone; ENOMEM) when the message could not be sent. */
int send_msg(json_t *msg);
__attribute__((format(printf, 3, 4))) int logmsg(struct server *s, int level,
						 const char *fmt, ...);
int reply_error(json_t *id, int code, const char *msg, json_t *data);
int reply_tool(json_t *id, json_t *sc, int is_error);

/* Each int below that sends: -1 when a message could not be sent (errno),
 * for the poll loop. */
void call_free(struct call *c);
int progress(struct call *c, const char *msg);
int awaits_verdict(struct server *s, const struct call *c);
int att_fresh(struct server *s, json_t *verdict, int valid);
int attested(struct server *s, struct call *c);   /* 0 go, 1 refused (answered) */
int build_call(struct server *s, struct call *c); /* 0 built, 1 refused (answered) */
int progress_tick(struct server *s);
int verify_reap(struct server *s);
/* How long a stopped call has between SIGTERM and SIGKILL. */
int64_t kill_grace_ms(const struct server *s, const struct call *c);
int stop_call(struct server *s, struct call *c, const char *why);
void stop_kept(struct server *s);
int finish_call(struct server *s, struct call *c);

#endif
