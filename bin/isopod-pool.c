/* isopod-pool - the run pool: VMs already resumed and warmed up, each
 * serving ONE run (lib/pool.h, isopod-pool(1)).
 *
 *   take --owner-pid PID --id-file FILE|--scratch [BOOT RUN OPTIONS]
 *       a ready VM of the shape, handed to PID (its supervisor stops the
 *       VM when PID exits); its boot's JSON on stdout with "path":"pool"
 *       (--scratch: into PID's scratch directory, made as isopod-claim
 *       --scratch makes it, and the id, name, directory on stdout); then
 *       a filler started in the background.  101 when none is ready.
 *   fill --key KEY [BOOT RUN OPTIONS]
 *       (take's, detached) claim, boot --pool-idle, warm up (one exec of
 *       `true`), publish; until the shape holds pool_size ready VMs.
 *   ls      one JSON line per entry {key, vm, state, running}
 *   drain   every ready VM stopped, after the fillers have finished
 *
 * The shape's key: sha256 of the boot run options as given and the
 * environment that changes a boot (ISOPOD_ACCEL, ISOPOD_JAIL, ISOPOD_WARM):
 * a VM is only ever taken by a run that would have booted the same one. */

#include "cgroup.h"
#include "image.h"
#include "jail.h"
#include "pool.h"
#include "proc.h"
#include "qemu.h"
#include "util.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define USAGE "isopod-pool take --owner-pid PID --id-file FILE|--scratch [BOOT OPTION]... | " \
	      "isopod-pool fill --key KEY [BOOT OPTION]... | isopod-pool ls | isopod-pool drain"

#define BOOT_MAX 16      /* boot run options, at most (argv words) */
#define FILL_BOOT_MS 120000
#define DRAIN_WAIT_MS 180000

/* One invocation: the boot options of the shape and its key. */
struct tool {
	char *boot[BOOT_MAX + 1];
	const char *vcpus, *mem; /* --vcpus, --mem-mib as given, or NULL */
	int nboot, cold;
	char key[65];
	struct pool_cfg pc;
};

/* The boot run options (isopod-boot(1)) as the front end passes them,
 * kept for the filler's boot and hashed into the key with the
 * environment a boot reads. */
static void shape(struct tool *t, int argc, char **argv)
{
	static const char *const takes[] = { "--vcpus", "--mem-mib", "--disk-mib", "--console-max",
					     NULL };
	/* each one a boot refuses a bad value of: no VM is ready under it */
	static const char *const envs[] = { "ISOPOD_ACCEL", "ISOPOD_JAIL", "ISOPOD_WARM",
					    "ISOPOD_WARM_WAIT_MS", NULL };
	char *text = NULL;
	size_t tlen = 0;
	FILE *f = open_memstream(&text, &tlen);

	if (!f)
		die(EX_SYS, "unable to allocate memory:");
	fprintf(f, "isopod-pool 1\nnet none\n");
	/* the current kernel and base: a replaced one is another shape (the
	 * pooled VMs of the old one are never taken and expire) */
	for (int k = 0; k < 2; k++) {
		char p[PATH_MAX], v[128] = "";

		if (pathn(p, sizeof p, "%s/%s", store_home(),
			  k ? "images/current-base" : "kernels/current") == 0)
			read_pointer(p, v, sizeof v);
		fprintf(f, "%s %s\n", k ? "base" : "kernel", v);
	}
	for (int i = 0; i < argc; i++) {
		int k;

		if (!strcmp(argv[i], "--cold")) {
			t->cold = 1;
			continue;
		}
		for (k = 0; takes[k] && strcmp(argv[i], takes[k]); k++)
			;
		if (!takes[k] || i + 1 >= argc) {
			/* a run option the pool does not know (a newer
			 * isopod-boot's): such a run is not served, it boots */
			warn("%s: not a boot run option the pool serves", EXC(argv[i]));
			t->cold = 1;
			break;
		}
		if (t->nboot + 2 > BOOT_MAX)
			die_usage(USAGE, "too many boot options");
		if (!strcmp(argv[i], "--vcpus"))
			t->vcpus = argv[i + 1];
		if (!strcmp(argv[i], "--mem-mib"))
			t->mem = argv[i + 1];
		t->boot[t->nboot++] = argv[i];
		t->boot[t->nboot++] = argv[++i];
		fprintf(f, "%s %s\n", argv[i - 1], argv[i]);
	}
	t->boot[t->nboot] = NULL;
	for (int k = 0; envs[k]; k++)
		fprintf(f, "%s=%s\n", envs[k], getenv(envs[k]) ?: "");
	/* The decisions a boot takes from more than the environment (review
	 * M1, M2): the jail as the host's configuration sets it (a host that
	 * turns it on serves no VM booted without it), and the cgroups the
	 * filler starts in, which are the taking run's: a VM filled in one
	 * Slurm job (charged to it, ended with it) never serves another's. */
	{
		char why[PATH_MAX + 64], *cg = NULL;
		size_t n = 0;
		FILE *c = fopen("/proc/self/cgroup", "re");

		fprintf(f, "jail %d\n", jail_wanted(why, sizeof why));
		if (c) {
			while (getline(&cg, &n, c) > 0)
				fprintf(f, "cgroup %s", cg);
			free(cg);
			fclose(c);
		} else {
			fprintf(f, "cgroup unknown\n");
		}
	}
	if (fclose(f) != 0)
		die(EX_SYS, "unable to allocate memory:");
	sha256_hex(text, tlen, t->key);
	free(text);
}

/* A tool beside us, run to its end: stdout into out (when not NULL).
 * Its status, or -1. */
static int tool(const char *name, char **av, char *out, size_t osz)
{
	char dir[PATH_MAX], prog[PATH_MAX];
	static char *const unset[] = { "ISOPOD_STATUS_FD", "ISOPOD_PROGRESS_FD", "ISOPOD_VM_ID_FD",
				       NULL };
	struct proc_spec ps = PROC_SPEC(av);

	if (proc_tools_dir(dir, sizeof dir) < 0 || pathn(prog, sizeof prog, "%s/%s", dir, name) < 0)
		return -1;
	ps.file = prog;
	ps.err = 2;
	ps.unset = unset;
	if (out) {
		ps.out = PROC_PIPE;
		return proc_capture(&ps, out, osz, NULL);
	}
	{
		pid_t p = proc_spawn(&ps);
		int st;

		return p < 0 || proc_wait(p, &st) < 0 ? -1 : proc_status(st);
	}
}

/* Make one VM of the shape ready: claim, boot kept for the pool, one
 * exec (the warm-up: QEMU's translation cache filled on the path every
 * run's exec takes), publish.  0, or -1 (what failed is stopped). */
static int fill_one(struct tool *t, const char *dir, int allfd)
{
	char idf[PATH_MAX], fp[PATH_MAX], id[VM_ID_SZ] = "", idle[24], tmo[24], msg[512];
	char *out = malloc(1 << 16);
	char *cav[] = { "isopod-claim", "--id-file", idf, NULL };
	char *bav[8 + BOOT_MAX] = { "isopod-boot", "--vm", id, "--pool-idle", idle, "--timeout-ms",
				    tmo, NULL };
	char *xav[] = { "isopod-exec", "--vm", id, "--pool-warm-up", "--", "true", NULL };
	char *sav[] = { "isopod-stop", "--force", "--vm", id, NULL };
	json_t *boot = NULL;
	int r = -1, fd;
	FILE *f;

	if (!out) {
		close(allfd);
		return -1;
	}
	snprintf(idle, sizeof idle, "%lld", t->pc.idle_s);
	snprintf(tmo, sizeof tmo, "%d", FILL_BOOT_MS);
	for (int i = 0; i < t->nboot; i++)
		bav[7 + i] = t->boot[i];
	bav[7 + t->nboot] = NULL;
	pathf(idf, sizeof idf, "%s/claim.%ld", dir, (long)getpid());
	if (tool("isopod-claim", cav, out, 1 << 16) != 0 || !(f = fopen(idf, "re"))) {
		warn("pool %.12s: isopod-claim failed", t->key);
		goto out;
	}
	if (!fgets(id, sizeof id, f))
		id[0] = 0;
	fclose(f);
	unlink(idf);
	id[strcspn(id, "\n")] = 0;
	if (!id_vm_ok(id)) {
		warn("pool %.12s: isopod-claim gave no vm id", t->key);
		goto out;
	}
	/* counted (and seen by isopod df) while it boots */
	pathf(fp, sizeof fp, "%s/filling-%s", dir, id);
	if ((fd = open(fp, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0)
		close(fd);
	close(allfd); /* counted now: another shape's filler may count it */
	allfd = -1;
	if (tool("isopod-boot", bav, out, 1 << 16) != 0 ||
	    !(boot = json_parse(out, strlen(out), JSON_DISABLE_EOF_CHECK, NULL, 0))) {
		warn("pool %.12s: isopod-boot of %s failed", t->key, id);
		goto out;
	}
	if (tool("isopod-exec", xav, out, 1 << 16) != 0) {
		warn("pool %.12s: the warm-up exec in %s failed", t->key, id);
		goto out;
	}
	if (pool_publish(t->key, id, boot, msg, sizeof msg) < 0) {
		warn("pool %.12s: %s", t->key, msg);
		goto out;
	}
	r = 0;
out:
	if (allfd >= 0)
		close(allfd);
	if (r < 0 && id_vm_ok(id))
		tool("isopod-stop", sav, out, 1 << 16);
	if (id[0])
		unlink(fp);
	json_decref(boot);
	free(out);
	return r;
}

/* The shape's boot options checked before anything is claimed for them
 * (once a fill, and only when it is about to make a VM): a run takes
 * before its own isopod-boot --check (isopod(1): a ready VM proves its
 * options good), so a take may start the filler of a shape a boot refuses
 * (--mem-mib abc), which then claims nothing.  1: bootable. */
static int shape_bootable(struct tool *t)
{
	char *cav[3 + BOOT_MAX] = { "isopod-boot", "--check" };

	for (int i = 0; i < t->nboot; i++)
		cav[2 + i] = t->boot[i];
	if (tool("isopod-boot", cav, NULL, 0) == 0)
		return 1;
	warn("pool %.12s: isopod-boot --check refused the shape's options", t->key);
	return 0;
}

/* The filler of the shape: one at a time (fill.lock), never more ready
 * VMs than pool_size, the one it makes counted before it starts.  It
 * stops at the first failure (the next take starts another). */
static int cmd_fill(struct tool *t)
{
	char dir[PATH_MAX], lg[PATH_MAX], all[PATH_MAX], msg[512];
	int fd, checked = 0;

	if (pool_path(dir, sizeof dir, t->key) < 0)
		die(EX_SYS, "pool path:");
	/* a shape not made yet: its options checked before its directory,
	 * so a shape no boot takes leaves none (review) */
	if (access(dir, F_OK) < 0 && errno == ENOENT) {
		if (!shape_bootable(t))
			return 0;
		checked = 1;
	}
	if ((fd = pool_fill_lock(t->key, LOCK_EX | LOCK_NB)) < 0) {
		if (errno == EWOULDBLOCK)
			return 0; /* another filler fills it */
		die(EX_SYS, "unable to lock the pool's shape %.12s:", t->key);
	}
	/* the shape's log from here (start_filler found no directory to
	 * open it in, or one gc has removed since) */
	pathf(lg, sizeof lg, "%s/fill.log", dir);
	{
		int lfd = open(lg, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);

		if (lfd >= 0 && lfd != 2) {
			dup2(lfd, 2);
			close(lfd);
		}
	}
	pathf(all, sizeof all, "%s/../fill.lock", dir);
	/* at most pool_size VMs an invocation: where VMs expire as fast as
	 * they are made (pool_idle_s near a fill's time) it ends; the next
	 * take starts another (review L4) */
	for (long long made = 0; made < t->pc.size; made++) {
		int n, afd;

		if (pool_config(&t->pc, msg, sizeof msg) < 0)
			die(EX_USAGE, "%s", msg);
		if ((n = pool_count(t->key, 0)) < 0 || n >= t->pc.size)
			break;
		if (made == 0 && !checked && !shape_bootable(t))
			break;
		/* pool_max, of every shape together (review M3: any --mem-mib
		 * is a shape of its own), counted and our VM's entry made under
		 * one lock: two shapes' fillers never both take the last one */
		if ((afd = lock_open(all, LOCK_EX)) < 0)
			break;
		if ((n = pool_count_all(t->key)) < 0 || n >= t->pc.max) {
			if (n >= 0)
				warn("pool %.12s: pool_max %lld reached (%d pooled VMs of every shape)",
				     t->key, t->pc.max, n);
			close(afd);
			break;
		}
		test_pause("pool-fill");
		if (fill_one(t, dir, afd) < 0)
			break;
	}
	close(fd);
	return 0;
}

/* The filler, detached: a session of its own, no stdio of the run's (its
 * diagnostics to pool/<key>/fill.log; none while a new shape's options
 * are checked: the filler makes its directory only for a shape a boot
 * takes, and the run reports its refusal), not waited for. */
static void start_filler(struct tool *t)
{
	char self[PATH_MAX], dir[PATH_MAX], log[PATH_MAX], *av[8 + BOOT_MAX];
	struct proc_spec ps = PROC_SPEC(av);
	int k = 0, lfd;

	if (pool_path(dir, sizeof dir, t->key) < 0 || pathn(log, sizeof log, "%s/fill.log", dir) < 0 ||
	    proc_sibling(self, sizeof self, "isopod-pool", "ISOPOD_POOL") == NULL)
		return;
	av[k++] = "isopod-pool";
	av[k++] = "fill";
	av[k++] = "--key";
	av[k++] = t->key;
	for (int i = 0; i < t->nboot; i++)
		av[k++] = t->boot[i];
	av[k] = NULL;
	lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	ps.file = self;
	ps.setsid = 1;
	ps.err = lfd >= 0 ? lfd : PROC_NULL;
	if (proc_spawn(&ps) < 0)
		warn("unable to start the pool's filler:");
	if (lfd >= 0)
		close(lfd);
}

/* A take that cannot be completed after the hand-over (the record not
 * updated, the scratch directory or the id not written) is refused: the
 * VM, the run's now, is stopped (not left to run until the run exits)
 * and the run boots one of its own.  The warning first (errno). */
static int refuse(const char *id, const char *scratch, const char *what)
{
	char *sav[] = { "isopod-stop", "--force", "--vm", (char *)id, NULL };
	char p[PATH_MAX];

	warn("%s %s (the take refused, the VM stopped):", what, id);
	if (tool("isopod-stop", sav, NULL, 0) != 0)
		warn("unable to stop %s; its supervisor stops it when its run exits", id);
	if (scratch[0] && pathn(p, sizeof p, "%s/boot.json", scratch) == 0)
		unlink(p);
	if (scratch[0])
		rmdir(scratch);
	return EX_SYS;
}

/* The taken VM given to its run: the id and name to idfile (two lines),
 * or with scratch (idfile NULL) the run's scratch directory made as
 * isopod-claim --scratch makes it (lib/vm.c), boot.json in it and the id,
 * name and directory on stdout (three lines).  0, or refused. */
static int hand_out(const char *id, long long owner, const char *idfile, json_t *boot)
{
	static const char *const live[] = { "running", NULL };
	char line[128 + PATH_MAX], dir[PATH_MAX] = "", p[PATH_MAX];
	json_t *rec, *m;
	int r;

	/* The run owns it now: its record says so (gc pins it while the run
	 * lives, as a booted VM's); a VM no longer running serves nobody. */
	m = json_pack("{s:I, s:b}", "owner_pid", (json_int_t)owner, "keep", 0);
	r = m ? vm_meta_update(id, live, m) : -1;
	json_decref(m);
	if (r != 1) {
		if (r == 0)
			errno = ESTALE;
		return refuse(id, "", "unable to update the record of");
	}
	rec = vm_read(id);
	snprintf(line, sizeof line, "%s\n%s\n", id,
		 json_string_value(json_object_get(rec, "name")) ?: id);
	json_decref(rec);
	if (idfile) {
		if (atomic_write(idfile, line, strlen(line), 0600) < 0)
			return refuse(id, "", "unable to write the --id-file of");
		json_emit(boot);
		return 0;
	}
	if (vm_scratch_make(id, owner, dir, sizeof dir) < 0)
		return refuse(id, "", "unable to create the scratch directory of");
	if (pathn(p, sizeof p, "%s/boot.json", dir) < 0 || json_write_atomic(p, boot) < 0)
		return refuse(id, dir, "unable to write boot.json of");
	test_pause("pool-report"); /* t/52: a SIGTERM here waits for the report */
	if (printf("%s%s\n", line, dir) < 0 || fflush(stdout) == EOF)
		return refuse(id, dir, "unable to write to standard output for");
	return 0;
}

static int cmd_take(struct tool *t, long long owner, const char *idfile)
{
	char id[VM_ID_SZ], msg[1024] = "";
	json_t *boot = NULL;
	int64_t t0 = mono_ms();
	int ofd, got, r;
	sigset_t held;

	if (t->cold || t->pc.size == 0) {
		warn("no pooled VM: %s", t->cold ? "a shape the pool does not serve" : "the pool is off (pool_size 0)");
		return EX_NOTFOUND;
	}
	/* The host's room for the run, as a cold run's boot checks it, asked
	 * again now (doc/DECISIONS.md): a ready VM holds its QEMU and the
	 * pages its guest touched, but the run's command may touch the rest
	 * of its guest RAM.  Refused (100, the message isopod-boot --check
	 * gives; isopod(1) asks it for the result) before anything is taken
	 * or filled: no VM ever, and no directory, for values no boot takes. */
	{
		long long v = VM_VCPUS_DEFAULT, m = VM_MEM_MIB_DEFAULT;

		if (host_fit_vm(t->vcpus, t->mem, &v, &m, msg, sizeof msg) < 0)
			die(errno == EINVAL ? EX_USAGE : EX_SYS, "%s", msg);
	}
	if ((ofd = pidfd_open_((pid_t)owner)) < 0)
		die(errno == ESRCH ? EX_USAGE : EX_SYS, "unable to watch owner pid %lld:", owner);
	/* the run that started us is older than we are: a process under a
	 * reused pid (the run gone before our pidfd_open) is younger (review
	 * L8); alive after the read, so the read was of the pidfd's process */
	{
		unsigned long long os = 0, ms = 0;

		if (proc_ident(owner, &os, NULL, NULL) < 0 || proc_ident(getpid(), &ms, NULL, NULL) < 0 ||
		    pidfd_kill(ofd, 0) < 0 || os > ms)
			die(EX_USAGE, "owner pid %lld: not a process that started before this take", owner);
	}
	got = pool_take(t->key, ofd, id, &boot, msg, sizeof msg);
	close(ofd);
	if (got < 0 || (got == 0 && msg[0])) /* an entry taken but not handed over says why */
		warn("%s", msg);
	start_filler(t); /* the one taken replaced, or the pool filled */
	if (got <= 0) {
		warn("no pooled VM ready");
		return got < 0 ? EX_SYS : EX_NOTFOUND;
	}
	/* what the run paid for its VM is the take; the resume was the
	 * filler's, off the run's path (kept as pool_boot_ms) */
	json_object_set(boot, "pool_boot_ms", json_object_get(boot, "boot_ms"));
	json_object_set_new(boot, "boot_ms", json_integer(mono_ms() - t0));
	json_object_del(boot, "resume_ms");
	json_object_del(boot, "build_ms");
	json_object_set_new(boot, "path", json_string("pool"));
	json_object_set_new(boot, "pool_key", json_string(t->key));
	/* From the hand-over to the report, as isopod-claim from its
	 * directory: the group's SIGTERM (a cancelled isopod-mcp call, a ^C)
	 * cut in between left the run's scratch directory behind, which its
	 * front end never learnt of.  It ends us once the report is out (or
	 * the take refused, its directory removed).  Before the hand-over a
	 * killed take leaves no directory, and the VM's supervisor stops a
	 * VM taken and not handed over (pool_take). */
	if (stop_signals_hold(&held) < 0) {
		json_decref(boot);
		return refuse(id, "", "unable to hold signals for");
	}
	r = hand_out(id, owner, idfile, boot);
	stop_signals_release(&held);
	json_decref(boot);
	return r;
}

/* Each entry of every shape, as `ls` shows it. */
static int cmd_ls(void)
{
	char root[PATH_MAX], dir[PATH_MAX];
	struct dirent *s, *d;
	DIR *R, *D;

	if (pool_path(root, sizeof root, NULL) < 0 || !(R = opendir(root)))
		return 0;
	while ((s = readdir(R))) {
		if (!hex64_ok(s->d_name) || pathn(dir, sizeof dir, "%s/%s", root, s->d_name) < 0 ||
		    !(D = opendir(dir)))
			continue;
		while ((d = readdir(D))) {
			const char *st = !strncmp(d->d_name, "ready-", 6)	  ? "ready"
					 : !strncmp(d->d_name, "filling-", 8) ? "filling"
									      : NULL;
			const char *id = st ? strchr(d->d_name, '-') + 1 : NULL;

			if (id && id_vm_ok(id))
				json_emit(json_pack("{s:s, s:s, s:s, s:b}", "key", s->d_name, "vm", id,
						    "state", st, "running", vm_running(id) != 0));
		}
		closedir(D);
	}
	closedir(R);
	return 0;
}

/* Every ready VM stopped: the fillers waited for (each shape's fill.lock),
 * then each ready VM taken for an owner that has already exited (a child
 * of ours, `true`, its pidfd opened before we reap it: no pid reuse): its
 * supervisor stops it at once, as after a run; each waited for. */
static int cmd_drain(void)
{
	char root[PATH_MAX], p[PATH_MAX], id[VM_ID_SZ], msg[512];
	char *av[] = { "true", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	int n = 0, st, rc = 0, me;
	struct dirent *s;
	json_t *b;
	pid_t c;
	DIR *R;

	if (pool_path(root, sizeof root, NULL) < 0 || !(R = opendir(root)))
		return 0;
	while ((s = readdir(R))) {
		int fd;

		if (!hex64_ok(s->d_name) || pathn(p, sizeof p, "%s/%s/fill.lock", root, s->d_name) < 0)
			continue;
		for (int64_t until = mono_ms() + DRAIN_WAIT_MS;
		     (fd = lock_open(p, LOCK_EX | LOCK_NB)) < 0 && errno == EWOULDBLOCK &&
		     mono_ms() < until;)
			usleep(100 * 1000);
		if (fd >= 0)
			close(fd);
	}
	if ((c = proc_spawn(&ps)) < 0 || (me = pidfd_open_(c)) < 0)
		die(EX_SYS, "unable to start the drain's owner:");
	proc_wait(c, &st); /* exited; its pidfd still names it */
	rewinddir(R);
	while ((s = readdir(R)))
		while (hex64_ok(s->d_name) && pool_take(s->d_name, me, id, &b, msg, sizeof msg) == 1) {
			json_decref(b);
			n++;
			if (vm_wait_stopped(id, mono_ms() + 10000) < 0)
				rc = 111;
		}
	close(me);
	closedir(R);
	json_emit(json_pack("{s:i}", "stopped", n));
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "owner-pid", required_argument, NULL, 'o' },
		{ "id-file", required_argument, NULL, 'i' },
		{ "scratch", no_argument, NULL, 's' },
		{ "key", required_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct tool t = { .nboot = 0 };
	const char *idfile = NULL, *key = NULL, *cmd;
	long long owner = 0;
	char msg[PATH_MAX + 128];
	int c, scratch = 0;

	progname = "isopod-pool";
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2)
		die_usage(USAGE, "no command");
	cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		puts("usage: " USAGE);
		return 0;
	}
	argc--, argv++;
	/* ours first; the rest, from the first other one, are the boot's run
	 * options (shape() checks them) */
	while (optind < argc && (!strncmp(argv[optind], "--owner-pid", 11) ||
				 !strncmp(argv[optind], "--id-file", 9) ||
				 !strcmp(argv[optind], "--scratch") ||
				 !strncmp(argv[optind], "--key", 5) || !strcmp(argv[optind], "--help") ||
				 !strcmp(argv[optind], "-h")) &&
	       (c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'o':
			if (parse_ll(optarg, 1, INT_MAX, &owner) < 0)
				die(EX_USAGE, "--owner-pid %s: want a process id", EXC(optarg));
			break;
		case 'i': idfile = optarg; break;
		case 's': scratch = 1; break;
		case 'k': key = optarg; break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (pool_config(&t.pc, msg, sizeof msg) < 0)
		die(EX_USAGE, "%s", msg);
	if (!strcmp(cmd, "ls") || !strcmp(cmd, "drain")) {
		if (optind != argc)
			die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
		return !strcmp(cmd, "ls") ? cmd_ls() : cmd_drain();
	}
	shape(&t, argc - optind, argv + optind);
	if (!strcmp(cmd, "take")) {
		if (!owner || !idfile == !scratch)
			die_usage(USAGE, "take needs --owner-pid and one of --id-file, --scratch");
		return cmd_take(&t, owner, idfile);
	}
	if (!strcmp(cmd, "fill")) {
		if (!key || strcmp(key, t.key))
			die_usage(USAGE, "fill --key: want the key of the boot options given");
		return cmd_fill(&t);
	}
	die_usage(USAGE, "unknown command %s", EXC(cmd));
}
