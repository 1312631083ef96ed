/* bpfdeny.h - what the two seccomp filters share: the jail's
 * (lib/jailchild.c, installed before the exec) and the broker's own
 * (lib/broker.c bk_lock_down, after its listeners).  Both are deny lists
 * over the native architecture; one preamble, written once, so a fix to it
 * (another ABI to kill) reaches both.
 *
 * SECCOMP_ARCH_CHECK, first in a filter (then a comma): a call of another
 * architecture (i386's int 0x80 on x86-64) kills the process; then the
 * syscall number is loaded; on x86-64 a number of the x32 ABI (bit 30)
 * kills the process too.  DENY(k): the loaded word equal to k is EPERM,
 * else on to the next instruction (2 instructions). */
#ifndef ISOPOD_BPFDENY_H
#define ISOPOD_BPFDENY_H

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>

#if defined(__x86_64__)
#define SECCOMP_NATIVE_ARCH AUDIT_ARCH_X86_64
#define SECCOMP_X32_KILL                                                                           \
	, BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1),                                   \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
#elif defined(__aarch64__)
#define SECCOMP_NATIVE_ARCH AUDIT_ARCH_AARCH64
#define SECCOMP_X32_KILL
#else
#error "lib/bpfdeny.h: no seccomp filter for this architecture"
#endif

#define SECCOMP_ARCH_CHECK                                                                         \
	BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),                    \
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SECCOMP_NATIVE_ARCH, 1, 0),                     \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),                                \
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))               \
			SECCOMP_X32_KILL

#define DENY(k)                                                                                    \
	BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), 0, 1),                                             \
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

#endif
