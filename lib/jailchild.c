/* jailchild.c - the jail's child (jail.c is the parent's side): what runs
 * after the clone, in the new namespaces, until the exec.  It waits for the
 * parent's first go (its maps written), joins its cgroup v1 hierarchies
 * itself, builds its root on a tmpfs (the spec's paths bound as the parent
 * resolved them, the device nodes, a /proc of its pid namespace) and pivots
 * into it while the parent places it in its v2 cgroup, waits for the second
 * go (it is in them), then gives up its
 * identity and capabilities, installs the seccomp filter and execs.  Any
 * failure before the exec is written to the error pipe (cdie). */
#include "bpfdeny.h"
#include "jailchild.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/if_tun.h>
#include <linux/sockios.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the child ---------------------------------------------------------- */

/* The child's failure: its reason to the error pipe, then exit. */
__attribute__((noreturn, format(printf, 2, 3))) static void cdie(int errfd, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vreason(why, sizeof why, errno, fmt, ap);
	va_end(ap);
	(void)!write(errfd, why, strlen(why));
	_exit(126);
}

int walk_step(struct walk_memo *m, const char *key, const char *host, int *dir, char *link,
	      size_t lsz, struct walk_seen **seen, char *failed)
{
	struct walk_seen *e;
	struct stat st;
	ssize_t n;
	size_t i;

	*seen = NULL;
	for (i = 0; i < m->n; i++)
		if (!strcmp(m->e[i].path, key)) {
			*dir = m->e[i].dir;
			if (pathn(link, lsz, "%s", m->e[i].link) < 0)
				break; /* (never: a kept target fits any caller's buffer) */
			*seen = &m->e[i];
			return 0;
		}
	*failed = 'l';
	if (lstat(host, &st) < 0)
		return -1;
	*dir = S_ISDIR(st.st_mode);
	link[0] = '\0';
	if (S_ISLNK(st.st_mode)) {
		*failed = 'r';
		if ((n = readlink(host, link, lsz)) < 0)
			return -1;
		if ((size_t)n == lsz) { /* (cut short: readlink does not say) */
			errno = ENAMETOOLONG;
			return -1;
		}
		link[n] = '\0';
		if (n == 0) { /* (no such link: the kernel refuses an empty target) */
			errno = ENOENT;
			return -1;
		}
	}
	/* only what another path may walk through again: a directory, a link */
	if (m->n < WALK_MAX && (*dir || link[0]) && strlen(key) < WALK_PATH &&
	    strlen(link) < WALK_PATH) {
		e = &m->e[m->n++];
		*e = (struct walk_seen){ .dir = *dir };
		memcpy(e->path, key, strlen(key) + 1);
		memcpy(e->link, link, strlen(link) + 1);
		*seen = e;
	}
	return 0;
}

/* Recreate path's parents under /newroot as they are on the host (now at
 * /oldroot): directories as directories, symlinks as the same symlinks, each
 * followed, so merged-/usr links and /lib64/ld-linux-x86-64.so.2 resolve
 * inside as outside.  The host path the last component finally names (its
 * symlinks resolved) goes to real.  m: what this child's earlier walks saw
 * (walk_step), and made in the new root. */
static int mirror(const char *path, char *real, size_t rsz, struct walk_memo *m, int errfd)
{
	char todo[PATH_MAX], done[PATH_MAX] = "", host[PATH_MAX + 16], in[PATH_MAX + 16];
	char link[PATH_MAX], rest[PATH_MAX];
	int hops = 0;

	if (pathn(todo, sizeof todo, "%s", path) < 0)
		cdie(errfd, "%s: path too long", path);
	for (;;) {
		char *p = todo, *c, cand[PATH_MAX], failed = 0;
		struct walk_seen *seen;
		int dir;

		while (*p == '/')
			p++;
		if (!*p)
			return pathn(real, rsz, "%s", *done ? done : "/");
		c = p;
		p += strcspn(p, "/");
		snprintf(rest, sizeof rest, "%s", p);
		*p = '\0';
		if (!strcmp(c, ".")) {
			memmove(todo, rest, strlen(rest) + 1);
			continue;
		}
		if (!strcmp(c, "..")) {
			char *s = strrchr(done, '/');

			if (s)
				*s = '\0';
			memmove(todo, rest, strlen(rest) + 1);
			continue;
		}
		if (pathn(cand, sizeof cand, "%s/%s", done, c) < 0 ||
		    pathn(host, sizeof host, "/oldroot%s", cand) < 0 ||
		    pathn(in, sizeof in, "/newroot%s", cand) < 0)
			cdie(errfd, "%s: path too long", path);
		if (walk_step(m, cand, host, &dir, link, sizeof link, &seen, &failed) < 0) {
			if (failed == 'r')
				cdie(errfd, "readlink %s:", cand);
			cdie(errfd, "%s: %s:", path, cand);
		}
		if (link[0]) {
			if (++hops > 40) {
				errno = ELOOP;
				cdie(errfd, "%s:", path);
			}
			if (!(seen && seen->made) && symlink(link, in) < 0 && errno != EEXIST)
				cdie(errfd, "symlink %s in the jail:", cand);
			if (seen)
				seen->made = 1;
			if (link[0] == '/')
				done[0] = '\0';
			if (pathn(todo, sizeof todo, "%s%s", link, rest) < 0)
				cdie(errfd, "%s: path too long", path);
			continue;
		}
		snprintf(done, sizeof done, "%s", cand);
		memmove(todo, rest, strlen(rest) + 1);
		if (todo[strspn(todo, "/")] == '\0')
			return pathn(real, rsz, "%s", done);
		if (!dir) {
			errno = ENOTDIR;
			cdie(errfd, "%s: %s:", path, cand);
		}
		if (!(seen && seen->made) && mkdir(in, 0755) < 0 && errno != EEXIST)
			cdie(errfd, "mkdir %s in the jail:", cand);
		if (seen)
			seen->made = 1;
	}
}

enum { B_RO, B_RW, B_DEV };
struct bindreq {
	const char *path, *real; /* real: the parent's resolution of path */
	int kind;
};

/* Bind the host's path at the same path in the new root.  The host file is
 * the one the parent resolved and checked (real): mirror's walk must come to
 * the same, and it is opened with no symlink followed on the way
 * (openat2 RESOLVE_NO_SYMLINKS below /oldroot), then cloned from that
 * descriptor, so nothing swapped in after the check is bound.  The tree is
 * cloned detached (open_tree), its attributes set on the whole tree at once
 * (mount_setattr, AT_RECURSIVE: a submount -- a tmpfs, another disk -- is
 * read-only too), and only then attached: it is never visible writable. */
/* Wait for the parent's go `want` on syncfd.  EOF: the parent failed (its
 * reason is its own) or died: a silent exit, nothing of the program ran.
 * Anything else is said on errfd, so the parent never reads an empty
 * verdict as "exec reached" for a child that stopped here. */
static void await_go(int syncfd, char want, int errfd)
{
	char go = 0;
	ssize_t n;

	while ((n = read(syncfd, &go, 1)) < 0 && errno == EINTR)
		;
	if (n == 0)
		_exit(126);
	if (n < 0)
		cdie(errfd, "waiting for the parent's go:");
	if (go != want) {
		errno = EPROTO;
		cdie(errfd, "the parent's go was '%c', not '%c':", go, want);
	}
}

static void bind_path(const char *path, const char *want, int kind, int root, struct walk_memo *m,
		      int errfd)
{
	char real[PATH_MAX], in[PATH_MAX + 16];
	struct mount_attr a = { .attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV };
	struct open_how how = { .flags = O_PATH | O_CLOEXEC,
				.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
					   RESOLVE_BENEATH };
	unsigned rec = mutant() & MUT_NO_RECURSIVE ? 0 : AT_RECURSIVE;
	struct stat st;
	int fd, src;

	if (mirror(path, real, sizeof real, m, errfd) < 0 ||
	    pathn(in, sizeof in, "/newroot%s", real) < 0)
		cdie(errfd, "%s: path too long", path);
	if (mutant() & MUT_NO_RESOLVE)
		want = real;
	if (strcmp(real, want)) {
		errno = ESTALE;
		cdie(errfd, "%s: resolved to %s, now to %s: changed while the jail was made", path,
		     want, real);
	}
	src = (int)syscall(SYS_openat2, root, want[1] ? want + 1 : ".", &how, sizeof how);
	if (src < 0)
		cdie(errfd, "%s: opening %s (no symlink followed):", path, want);
	if (fstat(src, &st) < 0)
		cdie(errfd, "%s:", path);
	/* The mount point: it may exist already, below a bind made before.
	 * A file's is made by mknod (a regular file needs no privilege):
	 * open and close were two calls for the same empty file. */
	if (S_ISDIR(st.st_mode) ? mkdir(in, 0755) < 0 && errno != EEXIST
				: mknod(in, S_IFREG | 0444, 0) < 0 && errno != EEXIST)
		cdie(errfd, "%s: mount point in the jail:", path);
	if (kind == B_RO)
		a.attr_set |= MOUNT_ATTR_RDONLY;
	/* A device node: nodev off; read-only still (the node's own writes go
	 * to the device, not to the file system). */
	if (kind == B_DEV)
		a.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
	fd = open_tree(src, "", AT_EMPTY_PATH | OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
	if (fd < 0)
		cdie(errfd, "open_tree %s:", path);
	close(src);
	if (mount_setattr(fd, "", AT_EMPTY_PATH | rec, &a, sizeof a) < 0)
		cdie(errfd, "mount_setattr %s:", path);
	if (move_mount(fd, "", AT_FDCWD, in, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		cdie(errfd, "move_mount %s:", path);
	close(fd);
}

/* Give up everything (bubblewrap's drop_privs, then its re-check): the
 * bounding and ambient sets emptied, no_new_privs, the identity changed,
 * every capability set cleared, and each verified.  As root the uid change
 * clears permitted and effective by itself; in a user namespace it does
 * not (the uid stays), so the capset is what drops them there. */
/* The one supplementary group a root jail keeps: the group of the bound
 * /dev/kvm when that group may use it and is not root's.  1 (and *g), or 0. */
static size_t kvm_group(const struct jail_spec *js, gid_t *g)
{
	struct stat st;

	if (!js->kvm || stat("/dev/kvm", &st) < 0 || !S_ISCHR(st.st_mode) ||
	    (st.st_mode & 0060) != 0060 || st.st_gid == 0)
		return 0;
	*g = st.st_gid;
	return 1;
}

/* The capabilities there can be: kernel_cap_t is 64 bits (capget and
 * capset below, with their d[2], assume it); a kernel that still knew a
 * capability at 64 is not one this code was written for, and the loops
 * over the bounding set stop there rather than never. */
enum { CAP_BITS = 64 };

static void drop_privs(const struct jail_spec *js, int userns, int errfd)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2] = { { 0 } };
	int keep = mutant() & MUT_KEEP_CAP ? CAP_SYS_ADMIN : -1;
	uid_t uid = userns ? getuid() : js->uid;
	gid_t gid = userns ? getgid() : js->gid, kg = 0;
	int c, r;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		cdie(errfd, "PR_SET_NO_NEW_PRIVS:");
	/* Each capability dropped up to the first the kernel does not know:
	 * PR_CAPBSET_DROP checks CAP_SETPCAP first (EPERM), then the number
	 * (EINVAL), as PR_CAPBSET_READ does; one call each, not a READ
	 * before each DROP (there is no bulk form).  The re-check below reads
	 * the whole set back. */
	for (c = 0; c < CAP_BITS; c++)
		if (c != keep && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno == EINVAL && c > 0)
				break;
			cdie(errfd, "PR_CAPBSET_DROP %d:", c);
		}
	if (c == CAP_BITS) {
		errno = ERANGE;
		cdie(errfd, "PR_CAPBSET_DROP: no end by capability %d", CAP_BITS);
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		cdie(errfd, "PR_CAP_AMBIENT_CLEAR_ALL:");
	if (keep >= 0 && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		cdie(errfd, "PR_SET_KEEPCAPS:");
	/* In a user namespace setgroups is denied (we wrote "deny"); the
	 * supplementary groups there are the caller's own.  As root, no group
	 * but /dev/kvm's when KVM is bound: the node is usually root:kvm 0660,
	 * and without its group a jailed QEMU (and the jailed KVM probe) could
	 * not open it where KVM is real. */
	if (!userns && setgroups(kvm_group(js, &kg), &kg) < 0)
		cdie(errfd, "setgroups:");
	if (setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0)
		cdie(errfd, "unable to become %u:%u:", (unsigned)uid, (unsigned)gid);
	if (keep >= 0) { /* the mutant: the capability kept through exec */
		d[0].effective = d[0].permitted = d[0].inheritable = 1u << keep;
		if (syscall(SYS_capset, &h, d) < 0 ||
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, keep, 0, 0) < 0)
			cdie(errfd, "mutant keep-cap:");
		return;
	}
	if (syscall(SYS_capset, &h, d) < 0)
		cdie(errfd, "capset:");
	/* Re-check, as bubblewrap does: each set empty, root not regainable. */
	if (syscall(SYS_capget, &h, d) < 0)
		cdie(errfd, "capget:");
	if (d[0].effective | d[0].permitted | d[0].inheritable | d[1].effective | d[1].permitted |
	    d[1].inheritable) {
		errno = EPERM;
		cdie(errfd, "capabilities left after the drop");
	}
	for (c = 0; c < CAP_BITS && (r = prctl(PR_CAPBSET_READ, c, 0, 0, 0)) >= 0; c++)
		if (r == 1) {
			errno = EPERM;
			cdie(errfd, "capability %d left in the bounding set", c);
		}
	if (c == CAP_BITS) {
		errno = ERANGE;
		cdie(errfd, "PR_CAPBSET_READ: no end by capability %d", CAP_BITS);
	}
	if (c == 0 || errno != EINVAL)
		cdie(errfd, "PR_CAPBSET_READ %d:", c);
	if (prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1 || setresuid(0, 0, 0) == 0 ||
	    getuid() != uid || geteuid() != uid || getgid() != gid || getegid() != gid) {
		errno = EPERM;
		cdie(errfd, "identity not dropped");
	}
}

/* Landlock (js->landlock), once the identity is dropped (it needs
 * no_new_privs): the file system as the jail's mounts already allow it, a
 * second time by another mechanism -- read and execute the ro paths, read and
 * write (never execute) the rw ones, the devices -- and nothing else, not even
 * the jail's /proc; from ABI 6 no signal and no abstract unix socket outside
 * the domain (the broker shares the host's network namespace, where those
 * sockets live).  The ABI's own bits only; none offered: the parent warned. */
#define LL_FILE (LL_EXEC | LL_WRITE | LL_READ | (1ull << 14) | (1ull << 15))
#define LL_EXEC (1ull << 0)
#define LL_WRITE (1ull << 1)
#define LL_READ (1ull << 2)
#define LL_READ_DIR (1ull << 3)
struct ll_attr { /* landlock_ruleset_attr of ABI 6; zeros past what a kernel knows */
	uint64_t fs, net, scoped;
};
struct ll_beneath {
	uint64_t allowed;
	int32_t fd;
} __attribute__((packed));

static void ll_rule(int rs, const char *path, uint64_t file, uint64_t dir, uint64_t handled,
		    int errfd)
{
	struct stat st;
	struct ll_beneath b = { .fd = open(path, O_PATH | O_CLOEXEC) };

	if (b.fd < 0 || fstat(b.fd, &st) < 0)
		cdie(errfd, "landlock: %s:", path);
	b.allowed = (S_ISDIR(st.st_mode) ? dir : file & LL_FILE) & handled;
	if (syscall(SYS_landlock_add_rule, rs, 1 /* PATH_BENEATH */, &b, 0) < 0)
		cdie(errfd, "landlock_add_rule %s:", path);
	close(b.fd);
}

static void landlock_jail(const struct jail_spec *js, realpath_t *rp, int errfd)
{
	int abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0, 1u /* VERSION */), rs;
	struct ll_attr a = { .fs = (1ull << 13) - 1 };
	static const char *const dev[] = { "/dev/null", "/dev/urandom", "/dev/kvm" };
	size_t i;

	if (!js->landlock || abi <= 0 || (mutant() & MUT_NO_LANDLOCK))
		return;
	a.fs |= (abi >= 2 ? 1ull << 13 : 0) | (abi >= 3 ? 1ull << 14 : 0) |
		(abi >= 5 ? 1ull << 15 : 0);
	a.scoped = abi >= 6 ? 3 : 0; /* ABSTRACT_UNIX_SOCKET | SIGNAL */
	if ((rs = (int)syscall(SYS_landlock_create_ruleset, &a, sizeof a, 0)) < 0)
		cdie(errfd, "landlock_create_ruleset (ABI %d):", abi);
	for (i = 0; i < js->nro; i++)
		ll_rule(rs, rp[i], LL_EXEC | LL_READ, LL_EXEC | LL_READ | LL_READ_DIR, a.fs, errfd);
	for (i = js->nro; i < js->nro + js->nrw + (js->vm_dir ? 1 : 0); i++)
		ll_rule(rs, rp[i], LL_FILE & ~LL_EXEC, a.fs & ~LL_EXEC, a.fs, errfd);
	for (i = 0; i < (js->kvm ? 3u : 2u); i++)
		ll_rule(rs, dev[i], LL_FILE & ~LL_EXEC, 0, a.fs, errfd);
	if (syscall(SYS_landlock_restrict_self, rs, 0) < 0)
		cdie(errfd, "landlock_restrict_self:");
	close(rs);
}

/* The last thing before the exec: a seccomp filter refusing what would give
 * the jailed program a kernel surface of its own to attack -- a new user
 * namespace (and with it CAP_SYS_ADMIN and CAP_NET_ADMIN there: nf_tables,
 * mounts), the other namespaces, setns, every mount call, the keyring and
 * bpf.  clone3 passes its flags in memory a filter cannot read: ENOSYS, so
 * the C library falls back to clone (Flatpak's filter does the same).
 * Another architecture's calls (i386's int 0x80, x32) are killed.  Filters
 * stack: QEMU's own -sandbox adds to this one.
 *
 * The tap descriptor QEMU is handed takes ioctls without any capability
 * once attached: its owner, group, persistence, carrier, link type, MAC
 * and queue would be the guest's to change after an escape.  QEMU 7.2's
 * -netdev tap,fd= uses only TUNGETIFF, TUNGETFEATURES, TUNSETOFFLOAD,
 * TUNSETSNDBUF, TUNSET/GETVNETHDRSZ and TUNSETVNETLE/BE (net/tap-linux.c;
 * TUNSETQUEUE only with queues > 1, steering eBPF only with RSS): the rest
 * of the tap's setters are EPERM.  The kernel takes ioctl's request as an
 * unsigned int: its low 32 bits are the whole of it.
 *
 * prctl's options that undo what the host set up or relies on are EPERM
 * too (the option is an int: args[0]'s low word): PR_SET_PDEATHSIG (set
 * to 0, or to a signal it ignores, the program outlives its supervisor),
 * PR_SET_CHILD_SUBREAPER (orphans of its own would stay its, not the pid
 * namespace's), PR_SET_DUMPABLE (whether its uid may ptrace it and read
 * /proc/PID/mem, whether a core holding the guest's memory is written:
 * the exec's choice, not the program's), PR_SET_PTRACER (Yama's
 * exception: any process of its uid could attach) and PR_SET_MM (its
 * /proc/PID/cmdline, environ and exe link, which name it to the host).
 * Debian's QEMU 7.2 calls prctl at six places: PR_SET_NAME (its threads,
 * -name process=), PR_MCE_KILL (SIGBUS handling), PR_SET_TIMERSLACK (its
 * timers), PR_SET_NO_NEW_PRIVS (-sandbox's elevateprivileges=children)
 * and, only under -async-teardown (never passed), PR_SET_PDEATHSIG in
 * its clean-up child; a traced boot makes only the MCE, timer-slack and
 * no_new_privs calls. */
#define NS_FLAGS                                                                                   \
	(CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |             \
	 CLONE_NEWPID | CLONE_NEWNET)
/* nr with any of mask in its first argument: EPERM (5 instructions). */
#define DENY_FLAGS(nr, mask)                                                                       \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 4),                                            \
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),         \
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, (mask), 0, 1),                                 \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),                               \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
/* The ioctl requests and prctl options refused, each a DENY() of two
 * instructions; the jump over a list counts it, so the list is its own
 * count (a DENY added without the count would fall into the next block). */
#define TAP_DENIES                                                                                 \
	DENY(TUNSETIFF), DENY(TUNSETPERSIST), DENY(TUNSETOWNER), DENY(TUNSETGROUP),                \
		DENY(TUNSETLINK), DENY(TUNSETCARRIER), DENY(TUNSETQUEUE), DENY(TUNSETIFINDEX),     \
		DENY(TUNSETSTEERINGEBPF), DENY(TUNSETFILTEREBPF), DENY(SIOCSIFHWADDR)
#define PRCTL_DENIES                                                                               \
	DENY(PR_SET_PDEATHSIG), DENY(PR_SET_CHILD_SUBREAPER), DENY(PR_SET_DUMPABLE),               \
		DENY(PR_SET_PTRACER), DENY(PR_SET_MM)
#define NINSN(...) (sizeof((struct sock_filter[]){ __VA_ARGS__ }) / sizeof(struct sock_filter))
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lib/jailchild.c: the ioctl request is read as args[1]'s first (low) word"
#endif
static void seccomp_jail(int errfd)
{
	struct sock_filter f[] = {
		SECCOMP_ARCH_CHECK,
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		DENY(SYS_setns), DENY(SYS_mount), DENY(SYS_umount2), DENY(SYS_pivot_root),
		DENY(SYS_open_tree), DENY(SYS_move_mount), DENY(SYS_fsopen), DENY(SYS_fsconfig),
		DENY(SYS_fsmount), DENY(SYS_fspick), DENY(SYS_mount_setattr), DENY(SYS_keyctl),
		DENY(SYS_add_key), DENY(SYS_request_key), DENY(SYS_bpf),
		DENY_FLAGS(SYS_unshare, NS_FLAGS | 0x80 /* CLONE_NEWTIME */),
		/* clone's low byte is the exit signal: CLONE_NEWTIME is clone3's */
		DENY_FLAGS(SYS_clone, NS_FLAGS),
		/* prctl: skip its option checks and their allow unless it is one */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 2 + NINSN(PRCTL_DENIES)),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
		PRCTL_DENIES,
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* ioctl: skip the request checks below unless it is one */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 1 + NINSN(TAP_DENIES)),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		TAP_DENIES,
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };

	if (mutant() & MUT_NO_SECCOMP)
		return;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		cdie(errfd, "seccomp:");
}

/* js->init: fork; the parent stays the jail's PID 1 and never execs, so the
 * parent-death signal set on it stays set whatever the program does (a
 * thread of the program that execs clears the program's own: the kernel
 * gives the new leader a fresh one).  When the init dies the kernel kills
 * every process of the pid namespace.  The child returns and goes on to the
 * exec, its parent-death signal set again (fork clears it), now for the
 * init's death.  The init is made non-dumpable before the fork, so the
 * program (same uid) can neither ptrace it nor read its memory; the exec
 * gives the program its own dumpability back.  The forwarded signals are
 * blocked across the fork (the child restores the mask): none is lost, and
 * as PID 1 the init gets only those it has a handler for. */
static void on_signal(int sig)
{
	(void)sig;
}

static void jail_init(int pdeathsig, int errfd)
{
	static const int fwd[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD };
	sigset_t set, old;
	size_t i;
	pid_t child;

	sigemptyset(&set);
	for (i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
		sigaddset(&set, fwd[i]);
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		cdie(errfd, "PR_SET_DUMPABLE for the jail's init:");
	if (sigprocmask(SIG_BLOCK, &set, &old) < 0)
		cdie(errfd, "sigprocmask:");
	if ((child = fork()) < 0)
		cdie(errfd, "fork of the jail's init:");
	if (child == 0) {
		if (sigprocmask(SIG_SETMASK, &old, NULL) < 0)
			cdie(errfd, "sigprocmask:");
		if (pdeathsig && prctl(PR_SET_PDEATHSIG, pdeathsig) < 0)
			cdie(errfd, "PR_SET_PDEATHSIG:");
		return;
	}
	/* The init takes the filter too (it needs none of what it refuses): a
	 * failure is reported as the child's would be, and the init's exit
	 * takes the child along. */
	seccomp_jail(errfd);
	/* Nothing of the program's plan: its descriptors (the caller's pipes,
	 * the error pipe, the sync socket) are the program's alone. */
	/* Checked: an error pipe the init still held would read as the exec
	 * never reached, the caller's pipes as never closed. */
	if (close_range(0, ~0U, 0) < 0) {
		struct rlimit rl;
		int fd, n = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
				    ? (int)rl.rlim_cur : 65536;

		for (fd = 0; fd < n; fd++)
			close(fd);
	}
	/* Belt and braces: blocked signals are queued for sigwaitinfo even
	 * to a PID 1, but one without a handler would be dropped were the
	 * mask ever lifted.  A program stopped (SIGSTOP from its own
	 * children) keeps the init waiting: the caller's deadline kills it. */
	for (i = 0; i < sizeof fwd / sizeof fwd[0]; i++)
		sigaction(fwd[i], &(struct sigaction){ .sa_handler = on_signal }, NULL);
	for (;;) {
		int sig = sigwaitinfo(&set, NULL), st;
		pid_t w;

		if (sig > 0 && sig != SIGCHLD)
			kill(child, sig);
		while ((w = waitpid(-1, &st, WNOHANG)) > 0)
			if (w == child)
				_exit(WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st));
	}
}

__attribute__((noreturn)) void jail_child(const struct jail_spec *js, const struct proc_spec *ps,
					  char **envp, realpath_t *rp, int userns, int syncfd,
					  int errfd, const int *cgfd, int ncgfd)
{
	struct mount_attr ro = { .attr_set = MOUNT_ATTR_RDONLY };
	struct proc_spec p = *ps;
	struct pollfd pf = { .fd = syncfd, .events = POLLIN };
	struct bindreq b[2 * JAIL_PATHS_MAX + 1];
	struct walk_memo m = { .n = 0 };
	size_t i, nb = 0;
	int root;

	for (i = 0; i < js->nro; i++, nb++)
		b[nb] = (struct bindreq){ .path = js->ro[i], .real = rp[nb], .kind = B_RO };
	for (i = 0; i < js->nrw; i++, nb++)
		b[nb] = (struct bindreq){ .path = js->rw[i], .real = rp[nb], .kind = B_RW };
	if (js->vm_dir) {
		b[nb] = (struct bindreq){ .path = js->vm_dir, .real = rp[nb], .kind = B_RW };
		nb++;
	}
	/* The root's directories and nodes are made with this umask: the
	 * caller's (isopod's 077) would leave them root's alone, and the
	 * jailed uid unable to reach /dev/null.  ps->umask is the program's. */
	umask(022);
	/* The first go: the parent wrote our user namespace's maps (the
	 * tmpfs below makes inodes: our uid must be mapped there).  EOF here
	 * means it failed or died. */
	await_go(syncfd, JAIL_GO_MAPS, errfd);
	/* Our v1 cgroups, joined by us: "0" to each `tasks` file the parent
	 * opened (it chose them; the write is checked against its credentials,
	 * those of the open).  We are one thread (a raw clone copies only the
	 * calling thread, whatever the caller's count), so moving it moves the
	 * whole process, and
	 * everything started from here on (the init, the program, its threads)
	 * is born inside.  A thread moving itself is the one migration the
	 * kernel makes without cgroup_threadgroup_rwsem's write side, whose
	 * RCU grace period made the parent's cgroup.procs write 8-16 ms of
	 * every start (doc/SPEED.md).  Before the root is built, so its tmpfs
	 * is charged inside too; the second go still comes after. */
	for (i = 0; i < (size_t)ncgfd && !(mutant() & MUT_NO_CG_JOIN); i++)
		if (write(cgfd[i], "0", 1) != 1)
			cdie(errfd, "joining the jail's cgroup (its tasks file):");
	for (i = 0; i < (size_t)ncgfd; i++)
		close(cgfd[i]);
	/* Nothing mounted below propagates back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		cdie(errfd, "making / private:");
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0700,size=64k") < 0 ||
	    mkdir("/tmp/oldroot", 0700) < 0 || mkdir("/tmp/newroot", 0755) < 0)
		cdie(errfd, "the jail's staging tmpfs:");
	if (syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") < 0 || chdir("/") < 0)
		cdie(errfd, "pivot_root to the staging tmpfs:");
	if (mount("tmpfs", "/newroot", "tmpfs", MS_NOSUID | MS_NODEV,
		  "mode=0755,size=1m,nr_inodes=4096") < 0)
		cdie(errfd, "the jail's root tmpfs:");
	/* The host's root, where every bind is opened from (no symlink
	 * followed): a way out of the jail, closed once the binds are made
	 * (and close-on-exec). */
	if ((root = open("/oldroot", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		cdie(errfd, "/oldroot:");
	/* Shorter host paths first: a parent is bound before what lies below
	 * it, which then covers it (a mount point below a read-only bind
	 * already exists). */
	for (i = 0; i < nb; i++) {
		size_t k, best = i;

		for (k = i + 1; k < nb; k++)
			if (strlen(b[k].real) < strlen(b[best].real))
				best = k;
		bind_path(b[best].path, b[best].real, b[best].kind, root, &m, errfd);
		b[best] = b[i];
	}
	bind_path("/dev/null", "/dev/null", B_DEV, root, &m, errfd);
	bind_path("/dev/urandom", "/dev/urandom", B_DEV, root, &m, errfd);
	if (js->kvm)
		bind_path("/dev/kvm", "/dev/kvm", B_DEV, root, &m, errfd);
	if (close(root) < 0)
		cdie(errfd, "close /oldroot:");
	/* The jail's own pid namespace's processes, and nothing else of /proc
	 * (subset=pid: no /proc/sys, /proc/kcore, ...). */
	if ((mkdir("/newroot/proc", 0555) < 0 && errno != EEXIST) ||
	    mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid") < 0)
		cdie(errfd, "/proc in the jail:");
	/* pivot_root(".", "."): the new root goes under the staging one, which
	 * (with the host at /oldroot in it) is then detached (pivot_root(2)). */
	if (chdir("/newroot") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		cdie(errfd, "pivot_root into the jail:");
	/* The root tmpfs itself read-only: only it, its binds keep their own. */
	if (mount_setattr(AT_FDCWD, "/", 0, &ro, sizeof ro) < 0)
		cdie(errfd, "mount_setattr /:");
	if (sethostname(js->name, strlen(js->name)) < 0)
		cdie(errfd, "sethostname:");
	if (chdir(js->vm_dir ? js->vm_dir : "/") < 0)
		cdie(errfd, "chdir %s:", js->vm_dir);
	/* The second go: we are in our cgroups (v1: joined above; v2: the
	 * parent's write to cgroup.procs, which waits for an RCU grace period,
	 * which is why the root above was built meanwhile).  Only our own steps ran
	 * before: nothing of the program, no fork (the init's is below), and
	 * the namespace below is rooted at the jail's cgroup.  EOF: the
	 * parent failed or died. */
	if (!(mutant() & MUT_NO_CG_WAIT))
		await_go(syncfd, JAIL_GO_CGROUPS, errfd);
	if (unshare(CLONE_NEWCGROUP) < 0)
		cdie(errfd, "unshare(CLONE_NEWCGROUP):");
	drop_privs(js, userns, errfd);
	landlock_jail(js, rp, errfd);
	/* The parent-death signal is cleared by the uid change: set it now, then
	 * make sure the parent did not die before (its end of the sync socket
	 * is open until we exec, and it sends nothing more: any event is its
	 * end closing). */
	if (ps->pdeathsig) {
		if (prctl(PR_SET_PDEATHSIG, ps->pdeathsig) < 0)
			cdie(errfd, "PR_SET_PDEATHSIG:");
		if (poll(&pf, 1, 0) != 0)
			_exit(126);
	}
	/* Not the caller's session keyring: keys in it would be "possessed"
	 * here, whatever the uid.  A new anonymous one, the jail's own. */
	if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS)
		cdie(errfd, "keyctl(KEYCTL_JOIN_SESSION_KEYRING):");
	/* A session of its own, always: no controlling terminal to push input
	 * into with TIOCSTI (bubblewrap's --new-session, CVE-2017-5226). */
	p.setsid = 1;
	p.pdeathsig = 0;
	/* No core file: a jailed QEMU's would hold the guest's memory. */
	if (setrlimit(RLIMIT_CORE, &(struct rlimit){ .rlim_cur = 0, .rlim_max = 0 }) < 0)
		cdie(errfd, "setrlimit(RLIMIT_CORE):");
	/* Its failure is the caller's too: a bare exit would close errfd
	 * unwritten, which reads as the exec reached. */
	if (proc_child_setup(&p, 0) < 0)
		cdie(errfd, "setting up the jailed program's descriptors:");
	/* After every other step, before the filter (it refuses the init's
	 * PR_SET_DUMPABLE and the child's PR_SET_PDEATHSIG); each installs it
	 * after the fork. */
	if (js->init && !(mutant() & MUT_NO_INIT))
		jail_init(ps->pdeathsig, errfd);
	seccomp_jail(errfd);
	if (p.file)
		execve(p.file, p.argv, envp ? envp : environ);
	else
		execvpe(p.argv[0], p.argv, envp ? envp : environ);
	dprintf(2, "%s: fatal: unable to exec %s in the jail: %s\n", progname ? progname : "isopod",
		p.file ? p.file : p.argv[0], strerror(errno));
	_exit(127);
}
