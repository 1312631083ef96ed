/* qjail.h - a VM's QEMU in the jail (lib/jail.c): whether it is wanted,
 * what goes in (issue 12), and the VM directory handed over and back.
 *
 * isopod-boot decides (jail_wanted, once, for QEMU and its broker) and
 * tells its supervisor in its spec; the supervisor plans (qjail_plan) and
 * starts QEMU with jail_spawn (the broker with egress_start).  Inside,
 * QEMU finds its binary and the libraries and modules it loads, its data
 * files, the kernel, the initramfs and this disk's backing chain (stage
 * layers, base image) read-only; its VM directory read-write; its tap as
 * an open descriptor (its network namespace is empty). */
#ifndef ISOPOD_QJAIL_H
#define ISOPOD_QJAIL_H

#include "jail.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* QEMU's fd of its tap: the supervisor's keep[1] (fd 3 is a clone's
 * memory file, or closed). */
#define QJAIL_TAP_FD 4

/* What QEMU needs besides RAM: the TCG translation buffer (QEMU 7.2 sizes
 * it min(1 GiB, host RAM / 8), and touches it as it fills) plus
 * QJAIL_MEM_BASE_MIB for QEMU itself (measured: see doc/DECISIONS.md). */
#define QJAIL_MEM_BASE_MIB 256
#define QJAIL_TCG_MAX_MIB 1024
/* Threads: main, RCU, one per vCPU, up to 64 block-I/O workers, and room
 * to spare. */
#define QJAIL_PIDS_BASE 96

/* The memory limit of the jail of a QEMU with mib MiB of guest RAM (tcg:
 * under TCG): guest RAM + QEMU's own budget above.  isopod-boot fits it
 * into the caller's cgroup limit (lib/cgroup.c cg_fit_vm). */
long long qjail_mem_mib(long long mib, int tcg);

struct qjail {
	struct jail_spec js;
	char *ro[JAIL_PATHS_MAX];
	size_t nro;
	char prog[PATH_MAX];
	char netdev[96];
	char preload[PATH_MAX + 16]; /* a clone's: qemu_clone_env's, or "" */
	char *av[128];
	int tapfd;           /* -1: no NIC */
	int dirfd;           /* the VM directory, while handed to the jail */
};

/* The result's "jail" for VM id: what its supervisor recorded that the
 * jail applied (the read-only list as a count: it is QEMU's libraries),
 * its warnings appended to warnings; or, jail off (on 0),
 * {"enabled":false,"why":why} and the warning "QEMU runs unjailed (WHY)",
 * or "QEMU and its egress broker run unjailed (WHY)" when the record has a
 * network (isopod-boot's one jail_wanted decides for both). */
json_t *qjail_result(int on, const char *why, const char *id, json_t *warnings);
/* jail_spawn's applied as a result shows it: a copy with "enabled":true and
 * the read-only list as its count; NULL when applied is not an object. */
json_t *qjail_summary(const json_t *applied);

/* The jail of VM id's QEMU av (qemu_argv's), its directory dir: the
 * paths, the identity, the limits; the NIC's tap opened here (TUNSETIFF on
 * the persistent tap) and av rewritten to take it as fd QJAIL_TAP_FD; a
 * clone's preload library (qemu_clone_env) bound read-only, preload its
 * LD_PRELOAD for QEMU's environment.
 * 0, or -1 with err.  qjail_free after. */
int qjail_plan(struct qjail *qj, const char *id, const char *dir, char *const *av, char *err,
	       size_t errsz);
/* qjail_plan for a disk in dir that lies over another VM's disk over (a
 * warm template's throwaway overlay over its VM's disk): over is bound
 * read-only, with over's chain (disk_chain's: stage layers over a base),
 * instead of dir/disk.qcow2's.  The caller makes over readable to the
 * jail's uid for the run. */
int qjail_plan_over(struct qjail *qj, const char *id, const char *dir, const char *over,
		    char *const *av, char *err, size_t errsz);
void qjail_free(struct qjail *qj);

/* Hand dir to the jail's uid: the directory root:<jail gid> 01770 (the
 * sticky bit: the jail cannot rename or remove what is not its own), its
 * disk root:<jail gid> 0660.  0, or -1 with err. */
int qjail_give(struct qjail *qj, const char *dir, char *err, size_t errsz);
/* QEMU is gone: what the jail's uid left as links (or other non-regular,
 * non-socket files) is removed, the disk and the directory are root's
 * again (0600, 0700). */
void qjail_reclaim(struct qjail *qj);

/* qemu-img on files a jailed QEMU wrote (issue 12): a layer's header is the
 * guest's QEMU's to craft, and a root qemu-img would parse it.  So it runs
 * in a jail as QEMU does: the jail's uid ("qemu-img"'s jail_identity), no
 * network, its binary and libraries and the files it reads read-only, the
 * one file it writes read-write (made here when absent, refused with a
 * second link, handed to the
 * jail's group for the run, its owner and mode restored after), nothing
 * else of the store; no_new_privs, no capabilities, QJAIL_IMG_MEM_MIB and
 * QJAIL_PIDS_BASE as limits.  With the jail off (jail_wanted 0) it runs as
 * the caller, with the warning "qemu-img CMD runs unjailed (WHY)" on
 * stderr.
 * A caller SIGKILLed mid-run leaves the written file root:<jail gid> 0660.
 * Every qemu-img run has the one gid of "qemu-img" (a VM's QEMU its own,
 * unless its id hashes onto it), and a jail binds the rest of the store
 * read-only (EROFS whatever the mode), so only a host process of that gid
 * (none by design) could write it: the writers keep such a file out of
 * the store's life anyway.  Flatten's layer, commit's and the template's
 * overlay are staging files, and fork's disk is written under a staging
 * name (disk.qcow2.tmp.PID), all removed by isopod-gc; boot's grow resizes
 * a VM's disk in place, in its root 0700 directory, handed to the VM's own
 * gid (qjail_give) before any QEMU opens it. */
#define QJAIL_IMG_MEM_MIB 1024
struct qimg_req {
	char *const *av;           /* "qemu-img", ...: found in PATH */
	const char *const *reads;  /* the files it reads */
	size_t nreads;
	int chain;                 /* 1: each qcow2 read with its backing chain
				    * (disk_chain's: store layers over a base) */
	const char *writes;        /* the file it writes; NULL: none */
	int wchain;                /* 1: the written file is a qcow2 whose
				    * backing chain (disk_chain's) it reads:
				    * resize opens it for the size */
	int outfd, errfd;          /* its stdout, stderr: an fd (a pipe's write
				    * end: the caller closes it after),
				    * PROC_NULL or PROC_INHERIT */
	int timeout_ms;            /* then SIGKILL (commit and fork hold the
				    * store lock); 0: QJAIL_IMG_TIMEOUT_MS */
};
/* A flatten of GiBs of layers takes minutes on a slow disk: an hour. */
#define QJAIL_IMG_TIMEOUT_MS (60 * 60 * 1000)
struct qimg {
	struct qjail qj;
	struct jail j;
	const char *rw[1];
	char name[32];
	int wfd;             /* the written file, while handed to the jail */
	uid_t wuid;
	gid_t wgid;
	mode_t wmode;
	int jailed;
	pid_t pid;
	int64_t until;       /* mono_ms() deadline: killed then */
};
/* qemu-img's jail, and so its cgroup (JAIL_CG_PREFIX), is named
 * QJAIL_IMG_NAME followed by its caller's pid: one per caller, which runs
 * one at a time.  A caller killed leaves it (isopod-gc removes it). */
#define QJAIL_IMG_NAME "img-"
/* The caller's pid in such a name, or in isopod doctor's cgroup check's
 * (JAIL_CG_CHECK_NAME and its pid) or isopod-jail's own (JAIL_TOOL_NAME
 * and its pid): one per process, left by one killed, so the same rule:
 * its owner is gone when that pid is, or was reused; 0 when name is none
 * of them. */
long long qjail_img_owner(const char *name);
/* Start rq's qemu-img.  The pid, or -1 with err (nothing left over).
 * It dies with its caller (PR_SET_PDEATHSIG SIGKILL: jailed, its pid
 * namespace goes with it).  qjail_img_wait after. */
pid_t qjail_img_spawn(struct qimg *qi, const struct qimg_req *rq, char *err, size_t errsz);
/* Reap it (SIGKILLed at rq's deadline: -1 with err), release its jail,
 * give the written file back: its exit status (proc_status's), or -1
 * with err. */
int qjail_img_wait(struct qimg *qi, char *err, size_t errsz);
/* Both. */
int qjail_img(const struct qimg_req *rq, char *err, size_t errsz);
/* Both, its stdout (rq's outfd unused), and its stderr too when rq's
 * errfd is PROC_PIPE, into buf (NUL-terminated, cut at sz - 1). */
int qjail_img_capture(const struct qimg_req *rq, char *buf, size_t sz, char *err, size_t errsz);

#endif
