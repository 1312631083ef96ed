/* bulk.c - the bulk lane (doc/PROTOCOL.md "Bulk lane"): a second
 * virtio-blk drive the host writes stdin and copy-in bytes into, slot by
 * slot, naming each slot in a BULK frame on the port.  The port moves
 * host-to-guest bytes 4 KiB per QEMU main-loop turn; the drive moves a
 * slot per request (doc/SPEED.md "Goal 4, the bulk lane").
 *
 * The device is read with O_DIRECT: the guest's page cache never holds a
 * slot, so a slot the host rewrote is never read stale.  A slot goes back
 * to the host (BULK_DONE) as soon as its bytes are out of it. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The lane, if entry is a virtio-blk disk whose serial is QEMU's
 * isopod.bulk (lib/qemu.h QEMU_BULK_SERIAL): opened.  0 ends the search
 * (found, or found and unusable). */
static int bulk_entry(struct agent *a, const char *entry)
{
	char path[300], val[64];
	unsigned long long sectors;
	int fd;

	if (strncmp(entry, "vd", 2) || strlen(entry) > 16)
		return -1;
	snprintf(path, sizeof path, "/sys/block/%s/serial", entry);
	if (sys_read(path, val, sizeof val) < 0 || strcmp(val, "isopod.bulk"))
		return -1;
	snprintf(path, sizeof path, "/sys/block/%s/size", entry);
	if (sys_read(path, val, sizeof val) < 0)
		return 0;
	sectors = strtoull(val, NULL, 10);
	snprintf(path, sizeof path, "/dev/%s", entry);
	fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		logm("open %s: %s: no bulk lane", path, strerror(errno));
		return 0;
	}
	a->bulk.fd = fd;
	a->bulk.bytes = (uint64_t)sectors * 512u;
	a->bulk.n = bulk_nslots(a->bulk.bytes);
	return 0;
}

/* The lane's drive, opened; nothing when there is none (a VM of an older
 * isopod): the host then keeps to the port. */
void bulk_find(struct agent *a)
{
	if (a->bulk.fd < 0)
		sys_each("/sys/block", bulk_entry, a);
}

void bulk_done(struct agent *a, uint32_t stream, uint32_t slot)
{
	uint8_t pl[4];

	put_le32(pl, slot);
	out_frame(a, F_BULK_DONE, stream, pl, sizeof pl);
}

ssize_t pread_full(int fd, uint8_t *buf, size_t len, off_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, off + (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int bulk_read(struct agent *a, uint32_t slot, uint32_t len, uint8_t *buf)
{
	/* O_DIRECT reads whole sectors into an aligned buffer: a slot is a
	 * whole number of them, so rounding up stays inside it. */
	size_t want = (len + BULK_SECTOR - 1) / BULK_SECTOR * BULK_SECTOR;
	ssize_t n = pread_full(a->bulk.fd, buf, want, (off_t)slot * BULK_SLOT);

	if (n < 0 || (size_t)n < want) {
		logm("bulk slot %u: %s", slot, n < 0 ? strerror(errno) : "short read");
		return -1;
	}
	return 0;
}

void on_bulk(struct agent *a, const struct frame *fr)
{
	uint32_t slot, len;

	/* The host names slot and length: both checked against the lane
	 * before anything is read.  A host that gets them wrong is broken:
	 * as for stdin beyond the window, an ERROR{protocol}, and the
	 * session's input is ignored until a new HELLO. */
	if (a->bulk.fd < 0 || bulk_decode(fr, a->bulk.n, &slot, &len) < 0 ||
	    (fr->stream != STREAM_STDIN && fr->stream != STREAM_FILE)) {
		send_error(a, "protocol", "BULK on stream %u: no such slot, length or lane",
			   fr->stream);
		a->port.poisoned = 1;
		return;
	}
	if (fr->stream == STREAM_STDIN)
		on_stdin_bulk(a, slot, len);
	else
		on_file_bulk(a, slot, len);
}
