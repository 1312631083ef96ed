/* mcptools.h - isopod-mcp(1)'s calls and tools: the server's and a call's
 * state (lib/mcpcall.c runs them), and the tool table (lib/mcptools.c):
 * each tool's name, description, input and output schemas and the argv
 * that runs it, built from the call's arguments once they passed the
 * inputSchema (lib/jschema.h).  Host paths a call names are opened there
 * beneath the I/O root and held by the call.  No die: a builder returns -1
 * with *err set (the client's -32602) or with errno (an infrastructure
 * failure). */
#ifndef ISOPOD_MCPTOOLS_H
#define ISOPOD_MCPTOOLS_H

#include "attcheck.h"
#include "jsonrpc.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_CALLS 64               /* in flight + queued; more: busy */
#define COPY_MAX 32                /* copy_in, copy_out entries per call */
#define HOLD_MAX (2 * COPY_MAX + 2)
#define PROV_ENVELOPE "provenance.json" /* sandbox_run provenance:true, in its call's directory */

enum runner { R_FRONT, R_TOOL };

struct buf {
	char *p;
	size_t n, cap;
};

struct call {
	int used, started, cancelled, exited, outeof, erreof, st;
	unsigned long long seq;
	json_t *id;                 /* the request's id (owned) */
	json_t *args;               /* its arguments (owned): built into argv, and
				     * its host files opened, when it starts */
	json_t *hostmap;            /* "/proc/<pid>/fd/N" -> the client's path */
	const struct tool *tool;
	char **argv;                /* owned: each string and the array */
	int argc;
	int in_fd;                  /* the child's stdin (-1: /dev/null) */
	int hold[HOLD_MAX], nhold;  /* fds named as /proc/<pid>/fd/N */
	int status_fd;              /* R_TOOL: ISOPOD_STATUS_FD, a memfd */
	pid_t pid;
	int out_fd, err_fd;
	struct buf out, err;
	int64_t kill_at;
	int64_t deadline;           /* past it the call is stopped (a hung tool) */
	long long budget_s;         /* timeout_s, else BUDGET_DEFAULT_S */
	int64_t arrived;            /* when its request came (mono_ms) */
	json_t *progress;           /* the request's _meta.progressToken, or NULL */
	int progress_n;             /* notifications sent (progress only grows) */
	char vm_state[64];          /* the last state reported */
	int notes_fd;               /* a memfd on the child's fd 9, or -1: sandbox_run's
				     * front end writes its VM's id and its steps
				     * there (ISOPOD_VM_ID_FD), stage_flatten its
				     * progress (ISOPOD_PROGRESS_FD) */
	int notes_relay;            /* 1: each line there is a progress message
				     * (ISOPOD_PROGRESS_FD: stage_flatten, and
				     * sandbox_run's isopod-slurm run, which says
				     * what Slurm says of its job) */
	char vm_id[24];             /* what it wrote, once read ("" until then) */
	off_t notes_off;            /* how much of it was read */
	char prov_dir[64];          /* sandbox_run provenance:true: the private
				     * directory its envelope is written to, read
				     * into the answer, then removed ("" none) */
};

struct server {
	struct rpc_lines lines;
	int initialized, level, eof, sfd, root_fd, max_conc, running;
	unsigned long long seq;
	char root[PATH_MAX], libexec[PATH_MAX], front[PATH_MAX];
	/* --backend slurm: sandbox_run is `isopod-slurm run ... -- FRONT run
	 * ...` (sbatch; its job directory in slurm_dir, "" the tool's
	 * default), and what means a VM or a path here is refused */
	int slurm;
	const char *slurm_dir;
	/* --backend slurm: the front end's defaults (ISOPOD_NET, ..., the
	 * configuration, the built-in ones), resolved once at start: a call
	 * that sets none asks Slurm for these and hands the same to the node's
	 * front end (mcp_slurm_defaults) */
	char def_net[16];
	long long def_vcpus, def_mem_mib;
	struct call calls[MAX_CALLS];
	json_t *kept; /* ids of VMs sandbox_run kept: stopped when the server ends */
	/* The host requires an attestation (attcheck.h): a command call
	 * (sandbox_run, vm_exec) starts only on a verdict begun after it
	 * arrived, or at most recheck_ms before; one verification at a time
	 * runs beside the calls and serves every call waiting for it. */
	int att_required, verifying, v_valid;
	int64_t recheck_ms;
	int64_t v_began;    /* when the verification running began */
	int64_t v_of;       /* when the one v_valid is of began (-1: none) */
	int64_t v_deadline; /* the one running is killed past it */
	struct attcheck att;
	struct attcheck_run vrun;
	char attest[PATH_MAX], v_why[2048];
	/* What this store's servers saw of the host changing under the
	 * attestation (attstale, isopod-runner(8) FRESHNESS): the record,
	 * where it is kept, and whether a mark is not on disk yet (then no
	 * command starts, and each verdict tries to write it again). */
	struct attstale stale;
	char stale_path[PATH_MAX];
	int stale_unsaved;
};

struct tool {
	const char *name, *desc, *in, *out;
	enum runner runner;
	const char *list_key; /* stdout is JSON lines, collected under this key */
	int (*build)(struct server *, struct call *, json_t *args, json_t **err);
};

extern const struct tool mcp_tools[];
extern const size_t mcp_ntools;

/* Whether c's argv (with our environment) fits what execve takes: 0, or
 * -1 with *err (field "argv"). */
int mcp_argv_fits(const struct call *c, json_t **err);

/* res's copied_in/copied_out "host" back to the client's paths. */
void mcp_unmap_hosts(struct call *c, json_t *res);

/* --backend slurm: the front end's defaults for net, vcpus and mem_mib
 * (sh/isopod run_parse: ISOPOD_NET, ISOPOD_VCPUS, ISOPOD_MEM_MIB, then the
 * configuration's net, vcpus, mem_mib, then filtered and isopod-boot's
 * size) into s.  0, or -1 with why (a value the front end would refuse, a
 * configuration file that cannot be read). */
int mcp_slurm_defaults(struct server *s, char *why, size_t wsz);

#endif
