/* launch_test.c - launch_resume (lib/launch.c) when the VM's paths do not
 * fit QEMU's command line: the host's doing, not the snapshot's.  The
 * resume fails as infrastructure (EX_SYS) naming the paths, starts
 * nothing, closes the snapshot's descriptors and sets start_failed, which
 * makes isopod-boot keep the snapshot and boot cold (as when the
 * supervisor fails to start) instead of retiring it. */
#include "../../lib/launch.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/proc.c"
#include "../../lib/qemu.c"
#include "../../lib/qmp.c"
#include "../../lib/vm.c"
#define remaining host_remaining /* qmp.c has its own */
#include "../../lib/host.c"
#undef remaining

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"

int main(void)
{
	struct inst in;
	struct qemu_vm vm = { .accel = "tcg", .mem_mib = 256, .vcpus = 1,
			      .vmlinux = "/nonexistent/vmlinux", .initrd = "/nonexistent/initrd" };
	struct launch l = LAUNCH_INIT;
	struct snap sn = { .memfd = open("/dev/null", O_RDONLY | O_CLOEXEC),
			   .statefd = open("/dev/null", O_RDONLY | O_CLOEXEC) };
	struct qemu_argv q;
	struct qemu_cfg qc;
	int memfd = sn.memfd, statefd = sn.statefd, r;
	size_t n;
	char msg[2048];

	ok(inst_paths(&in, "/nonexistent/vms/vm-000000000001") == 0, "the VM's paths");
	/* a disk path that fits the record (PATH_MAX) but not -drive's value */
	n = strlen(in.dir);
	in.disk[n] = '/';
	memset(in.disk + n + 1, 'd', sizeof in.disk - n - 2);
	in.disk[sizeof in.disk - 1] = '\0';
	l.in = &in;
	l.id = "vm-000000000001";
	qc = qemu_cfg_at(&vm, &in);
	qc.memfile = QEMU_CLONE_MEM;
	qc.incoming = 1;
	errno = 0;
	ok(qemu_argv(&q, &qc) < 0 && errno == ENAMETOOLONG,
	   "the control: the clone's command line does not fit (ENAMETOOLONG)");

	r = launch_resume(&l, &vm, &sn, mono_ms() + 5000, msg, sizeof msg);
	ok(r == EX_SYS, "a resume whose paths are too long is infrastructure (111): %d", r);
	ok(l.start_failed == 1, "start_failed: isopod-boot keeps the snapshot, boots cold");
	ok(strstr(msg, "too long for QEMU's command line") && strstr(msg, "no QEMU started") &&
		   strstr(msg, in.dir),
	   "the message names the paths and says nothing started: %.120s", msg);
	ok(l.sup == -1 && l.supfd == -1 && l.ctlfd == -1, "no supervisor was started");
	ok(sn.memfd == -1 && sn.statefd == -1 && fcntl(memfd, F_GETFD) < 0 &&
		   fcntl(statefd, F_GETFD) < 0,
	   "the snapshot's descriptors are closed");
	return tap_done();
}
