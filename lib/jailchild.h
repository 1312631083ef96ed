/* jailchild.h - between the jail's two halves: the parent's (lib/jail.c:
 * the checks, the resolution of the spec's paths, the cgroups, the clone)
 * and the child's (lib/jailchild.c: from the clone to the exec); see
 * jail.h.  Internal to the two. */
#ifndef ISOPOD_JAILCHILD_H
#define ISOPOD_JAILCHILD_H

#include "jail.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Mutations for the test suite only (t/17-jail.bats): compiled in with
 * -DJAIL_MUTANT into a separate test binary, never into bin/.  In a
 * production build mutant() is the constant 0 and every test below folds
 * away, so no environment can weaken a real jail. */
enum {
	MUT_NO_RECURSIVE = 1,
	MUT_NO_PIDNS = 2,
	MUT_KEEP_CAP = 4,
	MUT_OLD_KERNEL = 8,
	MUT_NO_SECCOMP = 16,
	MUT_NO_RESOLVE = 32,
	MUT_NO_LANDLOCK = 64,
	MUT_NO_INIT = 128,
	MUT_NO_CG_WAIT = 256,
	MUT_SLOW_PARENT = 512,
	MUT_NO_CG_JOIN = 1024,
	MUT_PARENT_ATTACH = 2048,
};
#ifdef JAIL_MUTANT
static unsigned mutant(void)
{
	const char *e = getenv("ISOPOD_JAIL_MUTANT");
	unsigned m = 0;

	if (e && strstr(e, "no-recursive"))
		m |= MUT_NO_RECURSIVE;
	if (e && strstr(e, "no-pidns"))
		m |= MUT_NO_PIDNS;
	if (e && strstr(e, "keep-cap"))
		m |= MUT_KEEP_CAP;
	if (e && strstr(e, "old-kernel")) /* not a weakening: the refusal's test */
		m |= MUT_OLD_KERNEL;
	if (e && strstr(e, "no-seccomp"))
		m |= MUT_NO_SECCOMP;
	if (e && strstr(e, "no-resolve"))
		m |= MUT_NO_RESOLVE;
	if (e && strstr(e, "no-landlock"))
		m |= MUT_NO_LANDLOCK;
	if (e && strstr(e, "no-init"))
		m |= MUT_NO_INIT;
	if (e && strstr(e, "no-cg-wait"))
		m |= MUT_NO_CG_WAIT;
	if (e && strstr(e, "slow-parent")) /* not a weakening: the parent's steps late */
		m |= MUT_SLOW_PARENT;
	if (e && strstr(e, "no-cg-join"))
		m |= MUT_NO_CG_JOIN;
	/* not a weakening: v2's order (the parent's cgroup.procs write, the
	 * child's second await) on a v1 host, so that t/17 tests it there */
	if (e && strstr(e, "parent-attach"))
		m |= MUT_PARENT_ATTACH;
	return m;
}
#else
#define mutant() 0u
#endif

/* The parent's two messages on the sync socket, in this order: the user
 * namespace's maps are written (the child joins its v1 cgroups and may
 * build its root), then the child is in every cgroup of the jail (it may
 * go on to its init and the program). */
#define JAIL_GO_MAPS '1'
#define JAIL_GO_CGROUPS '2'

/* The host path each of the spec's paths finally names, symlinks resolved
 * (resolve_all: ro, then rw, then vm_dir). */
typedef char realpath_t[PATH_MAX];

/* What the jail's two path walks (jail.c's resolve in the parent,
 * jailchild.c's mirror in the child) learnt of the components they went
 * through: a directory, or a symlink and its target.  The ~60 paths of a
 * QEMU jail lie below the same few directories (its ~50 libraries in
 * one), so each walk asked lstat and readlink again what the previous one
 * had just been told: ~5 syscalls per path, ~300 per walk.  A walk's memory
 * lives for one walk of all the paths (one resolve_all, one child's
 * binds: a few milliseconds) and changes no verdict: each step's checks
 * (the parent's against the read-write paths, the child's comparison
 * with the parent's resolution) are still made for every component, and
 * what is bound is still opened by the parent's resolution with no
 * symlink followed (openat2, RESOLVE_NO_SYMLINKS), so a host path changed
 * meanwhile is refused, as before, never bound.  Components longer than
 * WALK_PATH, and past WALK_MAX of them, are walked as before. */
#define WALK_MAX 64
#define WALK_PATH 256
struct walk_seen {
	char path[WALK_PATH]; /* the component's path on the host, as walked */
	char link[WALK_PATH]; /* a symlink's target; "" for a directory */
	int dir;
	int made; /* the child's: made in its new root (mkdir or symlink) */
};
struct walk_memo {
	size_t n;
	struct walk_seen e[WALK_MAX];
};
/* lstat(host) as the walk needs it, from m when key was seen: *dir, or
 * the symlink's target in link (a symlink: *dir 0 and link non-empty;
 * anything else: *dir 0, link ""), and the memory's entry (NULL: not
 * kept).  0, or -1 with errno from lstat (*failed 'l') or readlink ('r'). */
int walk_step(struct walk_memo *m, const char *key, const char *host, int *dir, char *link,
	      size_t lsz, struct walk_seen **seen, char *failed);

/* The clone's child: waits for the maps on syncfd, joins the cgroups whose
 * `tasks` files the parent opened (cgfd[0..ncgfd): cgroup v1's, see
 * jail.c release), builds the root, waits for the cgroups, drops
 * privileges, execs ps with envp (proc_env's for ps->env), or NULL: ours. */
__attribute__((noreturn)) void jail_child(const struct jail_spec *js, const struct proc_spec *ps,
					  char **envp, realpath_t *rp, int userns, int syncfd,
					  int errfd, const int *cgfd, int ncgfd);

#endif
