/* fsyncs.h - fsync, ours over libc's for the whole test program (the
 * linker binds lib/util.c's calls here, util.unit.o being linked in):
 * counts a file's fsyncs and a directory's apart, then makes the real
 * call.  What a write makes durable cannot be seen short of a crash of the
 * host; which fsyncs it asks for can (util_test.c: atomic_write's flags;
 * vm_test.c: vm_meta_note).  A test reads both counters after a reset
 * (fsyncs_reset) and checks one plain write gives 1 and 1 first: a count
 * of 0 from a counter that never ran proves nothing. */
#ifndef FSYNCS_H
#define FSYNCS_H
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static int fsyncs_file, fsyncs_dir;

static void fsyncs_reset(void)
{
	fsyncs_file = fsyncs_dir = 0;
}

int fsync(int fd)
{
	struct stat st;

	/* fstatat, not fstat: a test may interpose fstat too (util_test.c) */
	if (fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode))
		fsyncs_dir++;
	else
		fsyncs_file++;
	return (int)syscall(SYS_fsync, fd);
}
#endif
