/* qemu.h - the one QEMU command-line builder, and the little around it
 * that every QEMU instance needs (its files, qemu-img, its log).
 *
 * isopod-boot (cold boots, warm templates and clones), the KVM probe,
 * the warm key and the argv fingerprint isopod-warm and isopod-gc check
 * snapshots against all come from qemu_argv(): there is no second copy of
 * the machine to drift. */
#ifndef ISOPOD_QEMU_H
#define ISOPOD_QEMU_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define QEMU "qemu-system-x86_64"

/* A VM's size when neither the caller nor the configuration gives one:
 * isopod-boot's, and what isopod-mcp --backend slurm asks Slurm for then
 * (lib/mcptools.c mcp_slurm_defaults). */
#define VM_VCPUS_DEFAULT 1
#define VM_MEM_MIB_DEFAULT 512

/* QEMU's fd of the guest's serial console (-add-fd into fd set
 * QEMU_CONSOLE_FD, -chardev file at /dev/fdset/QEMU_CONSOLE_FD): a VM's
 * is the write end of a pipe its supervisor reads and caps into
 * console.log (lib/conlog.c), as is the warm template's, which its
 * builder reads (lib/warmtpl.c); the KVM probe's, thrown away, /dev/null.  Fd 3 is a
 * clone's memory file, fd 4 the jailed NIC's tap (QJAIL_TAP_FD). */
#define QEMU_CONSOLE_FD 5
#define QEMU_CONSOLE_FD_S "5"

/* One QEMU instance: what it boots, how big, where its files are, how its
 * RAM starts.  Fill it with designated initialisers; unset members are
 * off (no RAM file, no NIC, not incoming). */
struct qemu_cfg {
	const char *accel;              /* "kvm" or "tcg" */
	long long mem_mib, vcpus;
	const char *vmlinux, *initrd;
	const char *disk, *agent_sock, *qmp_sock;
	const char *bulk;               /* the bulk lane's raw file (QEMU_BULK_FILE), or NULL */
	const char *memfile;            /* guest RAM file (warm), or NULL */
	int share;                      /* with memfile: 1 a template, 0 a clone */
	int incoming;                   /* -incoming defer: a clone */
	const char *tap, *mac;          /* the NIC (last device), or NULL: none */
	long long tb_mib;               /* TCG's translation buffer (tb-size), 0: QEMU's own */
	long long tsc_khz;              /* TCG: the host's TSC rate (lib/tsc.h), 0: none known */
	int root_rw;                    /* a cold run's boot (isopod-boot's boot_cold):
					   isopod.root_rw=1, the agent mounts its root
					   read-write at once; never a template's or a
					   clone's (their root stays read-only) */
	int lapic_khz;                  /* TCG: 1 the kernel takes lapic_timer_khz= (its
					   record says so, lib/image.h kernel_lapic_khz),
					   0 it does not: noapictimer */
	int no_flush;                   /* the root's disk is thrown away when its VM
					   stops and nothing reads it again (qemu_vm's
					   no_flush): cache.no-flush=on, the guest's
					   flushes end in the host's page cache */
};

struct qemu_argv {
	char machine[160], accel[48], mem[32], smp[32], drive[PATH_MAX + 64];
	char bulk[PATH_MAX + 64];
	char agent[PATH_MAX + 64], qmp[PATH_MAX + 32], obj[PATH_MAX + 128];
	char netdev[96], nic[96], append[160];
	char *av[64];
};

/* Build the command line into q (q->av, NULL-terminated, points into q).
 * 0, or -1 with errno ENAMETOOLONG when a path does not fit. */
int qemu_argv(struct qemu_argv *q, const struct qemu_cfg *c);
/* The command line of a shape with every per-VM part replaced by a
 * placeholder (paths @vm/..., kernel @kernel/..., RAM file @mem share=on,
 * tap @tap, MAC @mac when nic): what the warm key hashes.  tsc_khz is
 * the store's (qemu_cfg's; lib/tsc.h), not a placeholder: a snapshot's
 * guest was told that rate; so is lapic_khz (the kernel's, qemu_cfg). */
int qemu_shape_argv(struct qemu_argv *q, const char *accel, long long mem_mib, long long vcpus,
		    int nic, long long tsc_khz, int lapic_khz);
/* A TSC rate that stands for any in the fingerprint (no host's: 1 MHz). */
#define QEMU_TSC_KHZ_SHAPE 1000LL
/* sha256 of the shape command lines of both accelerators, with and without
 * a NIC, TCG's with a TSC rate (QEMU_TSC_KHZ_SHAPE) and without, and with
 * and without lapic_timer_khz (a kernel without the patch): it changes
 * exactly when this build gives QEMU another command line, not with the
 * host's rate (it keys the host-wide KVM verdicts, lib/accelhost.h).
 * Snapshots record it; one built with another is orphaned. */
void qemu_fingerprint(char out[65]);

/* The files of one QEMU instance (a VM, or the KVM probe). */
struct inst {
	char dir[PATH_MAX], disk[PATH_MAX], agent[PATH_MAX], qmp[PATH_MAX];
	char console[PATH_MAX], qlog[PATH_MAX], bulk[PATH_MAX];
};

/* The bulk lane's file in a VM's directory (doc/PROTOCOL.md "Bulk lane"):
 * a second virtio-blk drive, serial QEMU_BULK_SERIAL, which the agent
 * finds by that serial.  bulk_file_new makes it afresh before every QEMU
 * start: BULK_FILE_BYTES of holes, never another VM's or run's bytes.  0,
 * or -1 with errno. */
#define QEMU_BULK_FILE "bulk.raw"
#define QEMU_BULK_SERIAL "isopod.bulk"
int bulk_file_new(const char *path);

/* dir's disk.qcow2, agent.sock, qmp.sock, console.log, qemu.log, bulk.raw.  0, or -1
 * (ENAMETOOLONG). */
int inst_paths(struct inst *in, const char *dir);
/* Before a QEMU starts in in's directory (a cold boot, a resume): the
 * last one's sockets and console gone, and a new lane (bulk_file_new).
 * 0, or -1 with errno (the lane could not be made). */
int inst_fresh(const struct inst *in);

/* What every QEMU of one VM shares -- its cold boot, its warm template and
 * its clone -- apart from its files and how its RAM starts. */
struct qemu_vm {
	const char *accel;              /* "kvm" or "tcg" */
	long long mem_mib, vcpus;
	const char *vmlinux, *initrd;
	const char *tap, *mac;          /* the NIC, or NULL */
	long long tb_mib;               /* TCG's translation buffer (tb-size), 0: QEMU's own
					   (1 GiB); set to fit a cgroup's limit (lib/cgroup.c) */
	long long tsc_khz;              /* TCG: the store's TSC rate (lib/tsc.h), 0: none */
	int lapic_khz;                  /* TCG: the kernel takes lapic_timer_khz= (qemu_cfg) */
	int no_flush;                   /* its cold boot's and its clone's root drive get
					   cache.no-flush=on: set by isopod-boot only for a
					   VM whose disk no one reads once it stops
					   (isopod-boot --ephemeral: isopod-run's plain
					   run, neither --keep nor --commit-as nor the
					   pool's); never its warm template's, whose
					   start clears it (lib/warmtpl.c) */
};

/* The configuration of vm's QEMU with its files at in (no RAM file, not
 * incoming: the caller adds those). */
struct qemu_cfg qemu_cfg_at(const struct qemu_vm *vm, const struct inst *in);

/* A warm clone's RAM file as its QEMU names it (qemu_cfg's memfile): its
 * fd 3, the snapshot's memory file the supervisor hands over. */
#define QEMU_CLONE_MEM "/proc/self/fd/3"
/* The library preloaded into a clone's QEMU (lib/memro.c): it opens
 * QEMU_CLONE_MEM read-only, which QEMU 7.2 cannot be told to do.  Built
 * beside the tools. */
#define QEMU_MEMRO_SO "isopod-memro.so"
/* When av (qemu_argv's) is a clone's -- its RAM QEMU_CLONE_MEM -- buf is
 * "LD_PRELOAD=<this program's directory>/" QEMU_MEMRO_SO, for its
 * environment, and 1; 0 when av is not a clone's; -1 with errno and why
 * (qemu_memro_ok's: no clone starts without the library, so none asks to
 * open the file for writing; ENAMETOOLONG). */
int qemu_clone_env(char *const av[], char *buf, size_t sz, char *why, size_t wsz);
/* so fit to preload: absolute with no ' ', ':' or tab (ld.so would split
 * it: EINVAL), a regular file (ENOENT), ours or root's and not group- or
 * other-writable (EPERM).  0, or -1 with errno and why. */
int qemu_memro_ok(const char *so, char *why, size_t wsz);
/* The library's path in qemu_clone_env's buf. */
#define QEMU_CLONE_ENV_PATH(buf) ((buf) + sizeof "LD_PRELOAD=" - 1)

/* Start QEMU (av): stdin /dev/null, stdout+stderr on outfd, umask 077
 * (the sockets it creates are 0600), keepfd (when >= 0) as fd 3 -- a
 * clone's memory file, which QEMU opens as QEMU_CLONE_MEM (the very
 * inode that was verified, not a path that may have changed since) read-
 * only (qemu_clone_env's library in its environment) -- confd (when >= 0)
 * as fd QEMU_CONSOLE_FD, nothing else open.  With pdeath, SIGKILLed when
 * the caller dies. */
pid_t qemu_spawn(char *const av[], int outfd, int pdeath, int keepfd, int confd);
/* 1 when av (qemu_argv's) runs its guest under TCG (`-accel tcg...`): such
 * a QEMU is started without transparent huge pages (proc_spec's nothp, set
 * by qemu_spawn and by each jailed start of a VM's QEMU).  A cold guest
 * touches its RAM a few KiB here and there: in 2 MiB pages its 24 MiB
 * took 38 of the host's, for no boot time saved (doc/SPEED.md, "THP off
 * for QEMU").  Under KVM huge pages also map the guest's RAM in the
 * second-level page tables, a gain not measurable here: left as it is. */
int qemu_nothp(char *const av[]);

/* qemu-img create -q -f qcow2 -F raw -b <base> <disk> <bytes>. */
int qemu_img_overlay(const char *base, const char *disk, long long bytes, char *err, size_t errsz);

/* The last non-empty line of a log (console.log is guest output: control
 * and non-ASCII bytes become '?'); "" unless a regular file with one link
 * (the jail owns it: no FIFO to block on, no hard link).  Returns out. */
const char *last_line(const char *path, char *out, size_t sz);
/* Does the (small) file contain needle? */
int file_has(const char *path, const char *needle);

#endif
