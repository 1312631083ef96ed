/* jail.h - the room QEMU (and later the broker) runs in (issue 12).
 *
 * jail_spawn starts a program the way proc_spawn does (the same descriptor
 * plan), but in a child that has, before its exec:
 *   - new mount, pid, ipc, uts, cgroup and network namespaces (and a user
 *     namespace when the caller is not root); the program is PID 1 of its
 *     pid namespace, so when it exits everything it started dies with it;
 *   - a root of its own: a small tmpfs entered with pivot_root, holding only
 *     the paths the spec names (read-only unless listed read-write), the
 *     devices asked for and a /proc of its pid namespace; read-only is applied
 *     to each whole mount tree with mount_setattr(AT_RECURSIVE), before the
 *     tree is attached;
 *   - an unprivileged identity: as root, spec->uid/gid (jail_identity); as a
 *     user, that user inside a user namespace; no capabilities in any set,
 *     the bounding set emptied, no_new_privs;
 *   - memory and pids limits through a cgroup of its own (v2, else the v1
 *     memory and pids controllers; a hierarchy we cannot write is a warning).
 * Nothing here exits or dies: errors come back as -1 with a reason.
 * Linux 5.12 or later (mount_setattr); older kernels are refused. */
#ifndef ISOPOD_JAIL_H
#define ISOPOD_JAIL_H

#include "proc.h"

#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

#define JAIL_PATHS_MAX 256

struct jail_spec {
	const char *name;       /* the cgroup's and the hostname's: e.g. the VM id */
	const char *vm_dir;     /* read-write, and the program's cwd; NULL: none, cwd / */
	const char *const *ro;  /* read-only at their own paths: the program, its
				 * libraries and data files, kernel, initramfs, base, layers */
	size_t nro;
	const char *const *rw;  /* read-write at their own paths (besides vm_dir) */
	size_t nrw;
	int kvm;                /* 1: /dev/kvm as well as /dev/null and /dev/urandom */
	uid_t uid;              /* as root: the identity (jail_identity); else unused */
	gid_t gid;
	long long mem_bytes;    /* memory limit; 0: none */
	long long pids;         /* process/thread limit; 0: none */
	int hostnet;            /* 1: keep the caller's network namespace (the
				 * broker: it listens on the gateway, connects out) */
	int landlock;           /* 1: Landlock before the exec: read and execute
				 * the ro paths, write only the rw ones and the
				 * devices; no signals or abstract sockets outside */
	int init;               /* 1: a trusted PID 1 of the jail's between the
				 * jail and the program (jail_spawn) */
};

/* A jail's cgroup is JAIL_CG_PREFIX followed by its name (jail_spec's),
 * in each hierarchy it uses, below its creator's own cgroup there. */
#define JAIL_CG_PREFIX "isopod-"

/* What jail_spawn made, for jail_release once the program was reaped. */
struct jail {
	pid_t pid;
	int ncg;
	char cg[2][PATH_MAX];   /* cgroup directories we created (rmdir'd by release) */
	json_t *applied;        /* the result's future "jail": {...} */
};

/* Start ps's program jailed by js.  The caller is single-threaded (the
 * child is a raw clone, as bubblewrap's: it must not find a lock another
 * thread held).  The descriptors of ps's plan enter the jail as they are:
 * a directory among them would be a way out (QEMU gets sockets, a tap,
 * files). ps->setsid is forced: the program always has a session of its own.  The pid (also in j->pid), or -1 with a
 * reason in err (nothing left behind).  A program that cannot be executed
 * inside exits 127, as with proc_spawn; ps->pdeathsig and ps->env
 * (a clone QEMU's LD_PRELOAD) are honoured.
 *
 * With js->init, the pid is not the program's but a small init of ours,
 * PID 1 of the jail's pid namespace, that never execs (bubblewrap's
 * design): the program is its child, PID 2.  ps->pdeathsig is the init's,
 * and stays set whatever the program does (the kernel clears a process's
 * parent-death signal when a thread other than its main one execs); when
 * the init dies the kernel kills the whole namespace.  The init forwards
 * SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program,
 * reaps every orphan, and exits when the program ends with its exit code,
 * or 128 + the signal's number when a signal killed it (so the caller's
 * proc_status reads the same either way; only WIFSIGNALED differs).
 * The init is not dumpable: the program (same uid) cannot ptrace it. */
pid_t jail_spawn(const struct jail_spec *js, const struct proc_spec *ps, struct jail *j,
		 char *err, size_t errsz);
/* After the program was reaped: remove its cgroups, free j->applied.
 * 0, or -1 with a reason (a cgroup still busy after 2 s). */
int jail_release(struct jail *j, char *err, size_t errsz);

/* Every jail cgroup (JAIL_CG_PREFIX NAME) in the hierarchies jail_spawn
 * makes them in (v2, the v1 memory and pids controllers; each below the
 * mount lib/cgroup.c cg_dir places them under), wherever its creator's
 * cgroup was: fn(dir, NAME, dir's stat, arg) for each; a
 * nonzero return of fn stops the walk and is returned.  0 when there is
 * no hierarchy. */
int jail_cg_each(int (*fn)(const char *dir, const char *name, const struct stat *st, void *arg),
		 void *arg);
/* Remove the jail cgroup dir when no process is in it (its cgroup.procs
 * empty; the kernel refuses a populated one too); with dry, only say
 * whether it would go.  0, or -1 with errno (EBUSY: a member). */
int jail_cg_remove(const char *dir, int dry);

/* isopod-doctor's cgroup check: jail_spawn's own cgroup step (the
 * hierarchy it picks: v2, else the v1 memory and pids controllers) done
 * for real for a jail named name (JAIL_CG_PREFIX name, empty, with the
 * limits mem_bytes and pids written), then removed.
 * {hierarchy:"v2"|"v1"|"none", limits:["memory"?,"pids"?] (applied),
 * paths:[the cgroups made], ok, warnings:[the run's own words for each
 * limit not applied, naming the path and errno; a cgroup not removed]};
 * ok when every limit applied and every cgroup went.  NULL: out of memory,
 * or a bad name.  isopod doctor's is JAIL_CG_CHECK_NAME and its pid: a
 * doctor killed between the two leaves it, which isopod-gc judges as a
 * qemu-img caller's (lib/qjail.h qjail_img_owner). */
#define JAIL_CG_CHECK_NAME "doctor-"
/* isopod-jail's own name for a jail (no DIR, no --name): JAIL_TOOL_NAME
 * and its pid.  Killed, it leaves that cgroup, judged as a qemu-img
 * caller's too. */
#define JAIL_TOOL_NAME "jail-"
json_t *jail_cg_check(const char *name, long long mem_bytes, long long pids);

/* 1 when path is vm_dir or a rw path, or lies below one: already in the
 * jail, read-write (jail_spawn refuses to bind such a path again). */
int jail_covers(const struct jail_spec *js, const char *path);

/* As root, the per-VM identity: uid = gid = base + (FNV-1a(name) mod count),
 * from the host config's jail_uid_base and jail_uid_count (defaults
 * JAIL_UID_BASE, JAIL_UID_COUNT).  0, or -1 with a reason (a bad config). */
/* The default range, 0x78000000..0x7800FFFF (2013265920..2013331455), lies
 * where no one allocates by default (review L7):
 * - above systemd's container ranges 0x00080000..0x6FFFFFFF (524288..
 *   1879048191, systemd docs/UIDS-GIDS.md, nspawn's --private-users=pick)
 *   and below its "foreign" range 0x7FFE0000..0x7FFEFFFF (2147352576..
 *   2147418111, the same document; userdbctl's foreign-N users);
 * - below 2^31: UIDS-GIDS.md asks to stay away from 2147483648..4294967294
 *   (devpts and setfsuid() take uids as signed);
 * - above sssd's default ID-mapping range, ldap_idmap_range_min 200000 ..
 *   ldap_idmap_range_max 2000200000 (sssd-ldap(5)), where the old default
 *   2000000000 + 65536 lay: an AD/LDAP user mapped there would have been a
 *   broker's uid to the jail egress chain;
 * - 64K-aligned, a whole 16-bit block, as UIDS-GIDS.md recommends.
 * A site whose ID mapping or subuid ranges reach it sets jail_uid_base
 * (doc/DECISIONS.md, jail uids). */
#define JAIL_UID_BASE 0x78000000u
#define JAIL_UID_COUNT 65536u
int jail_identity(const char *name, uid_t *uid, gid_t *gid, char *err, size_t errsz);
/* The whole range those identities come from: *first .. *first + *count - 1
 * (isopod-netsetup's jail egress chain matches it).  0, or -1 with a reason. */
int jail_uid_range(uid_t *first, uid_t *count, char *err, size_t errsz);

/* Whether QEMU and the broker are jailed: 1, or 0 with why filled (env
 * ISOPOD_JAIL=0, or the host config's `jail = no`).  A bad value in either
 * is -1 with why (a usage error). */
int jail_wanted(char *why, size_t wsz);

/* The Landlock ABI the kernel offers (landlock_create_ruleset's version);
 * 0 when it has none (not built in, or off at boot). */
int jail_landlock_abi(void);

/* The shared libraries prog loads (ldd, resolved), appended to out[*n]
 * (prog is the host's own: ldd runs its dynamic loader)
 * (malloc'd strings, at most max).  0, or -1 with a reason.  The answer is
 * cached in <store>/jail/deps-<sha256(prog):16>.json (lib/jaildeps.c),
 * valid while prog, /etc/ld.so.cache, /etc/ld.so.preload, every library
 * and its directory keep their identity (one stamp of them all). */
int jail_deps(const char *prog, char **out, size_t *n, size_t max, char *err, size_t errsz);
/* jail_deps with the cache in cache_dir (NULL: none, ldd every time) and
 * the loader's cache at ldcache (a stand-in in tests); *hit (may be NULL)
 * is 1 when the answer came from the cache. */
int jail_deps_cached(const char *prog, const char *cache_dir, const char *ldcache, char **out,
		     size_t *n, size_t max, int *hit, char *err, size_t errsz);
/* The loader's cache jail_deps keys its answers by. */
#define JAIL_LDCACHE "/etc/ld.so.cache"
/* Whether the cache file at path (jail_deps_cached's, named for its prog)
 * would still be a hit: 1; 0 when it is stale (a file of its key changed
 * or is gone), not ours alone, not a cache file, or unreadable.  What
 * isopod-gc removes from <store>/jail (the next run rebuilds it). */
int jail_deps_valid(const char *path, const char *ldcache);

#endif
