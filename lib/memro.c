/* memro.c - isopod-memro.so, preloaded into a warm clone's QEMU only
 * (lib/qemu.c qemu_clone_env): its RAM file opened read-only.
 *
 * A clone's guest RAM is a private (copy-on-write) mapping of the
 * snapshot's memory file, which every clone of the shape maps: it must
 * not be writable by a clone's QEMU (a jailed QEMU's uid, lib/qjail.c), so
 * it is root's 0644.  QEMU 7.2's file_ram_open (softmmu/physmem.c) opens
 * mem-path O_RDWR whatever share= says (only 8.2's readonly=on,rom=off
 * opens it O_RDONLY and still maps it writable), and the reopen of
 * QEMU_CLONE_MEM checks the inode's mode: EACCES.  So QEMU's open of
 * exactly that path, asking O_RDWR, is made O_RDONLY here; QEMU then maps
 * it MAP_PRIVATE with PROT_WRITE, which a read-only descriptor allows.
 * Nothing else of QEMU's changes.  ftruncate (only of an empty file) and
 * fallocate (a discard: no device of ours asks one) would fail EBADF.
 *
 * Without this library the jailed open fails (EACCES), the resume fails
 * and the run boots cold.  Neither it nor the mode is the boundary: as
 * root the descriptor is of a read-only mount (lib/warmpool.c mem_open).
 * QEMU 7.2 (Debian's build) imports open64, __open64_2 (the fortified
 * open of flags that are not a constant: file_ram_open's) and openat64;
 * open and openat (glib's; on x86_64 the same functions under other
 * names) and the other fortified forms are here too.  Each makes the
 * syscall itself: no dlsym, no recursion. */
#undef _FORTIFY_SOURCE
/* open64 and friends are macros to open under _FILE_OFFSET_BITS=64: the
 * definitions below must keep their own names whatever CFLAGS say */
#undef _FILE_OFFSET_BITS
#include "qemu.h"

#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

static int memro_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	/* and nothing that writes: truncating, creating, appending */
	if (path && !strcmp(path, QEMU_CLONE_MEM) && (flags & O_ACCMODE) == O_RDWR)
		flags = (flags & ~(O_ACCMODE | O_TRUNC | O_CREAT | O_APPEND)) | O_RDONLY;
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

/* The mode argument is there only with O_CREAT or O_TMPFILE (open(2)). */
#define MODE_ARG(flags, last)                                                      \
	mode_t mode = 0;                                                           \
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {               \
		va_list ap;                                                        \
		va_start(ap, last);                                                \
		mode = va_arg(ap, mode_t);                                         \
		va_end(ap);                                                        \
	}

int open(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	return memro_openat(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	return memro_openat(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	return memro_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG(flags, flags)
	return memro_openat(dirfd, path, flags, mode);
}

int __open_2(const char *path, int flags)
{
	return memro_openat(AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
	return memro_openat(AT_FDCWD, path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	return memro_openat(dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	return memro_openat(dirfd, path, flags, 0);
}
