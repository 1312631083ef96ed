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

/* The clone's child: waits for the maps on syncfd, joins the cgroups whose
 * `tasks` files the parent opened (cgfd[0..ncgfd): cgroup v1's, see
 * jail.c release), builds the root, waits for the cgroups, drops
 * privileges, execs ps with envp (proc_env's for ps->env), or NULL: ours. */
__attribute__((noreturn)) void jail_child(const struct jail_spec *js, const struct proc_spec *ps,
					  char **envp, realpath_t *rp, int userns, int syncfd,
					  int errfd, const int *cgfd, int ncgfd);

#endif
