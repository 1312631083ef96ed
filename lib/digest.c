/* digest.c - randomness and sha256 (declared in util.h): libsodium's,
 * and one hash of a file descriptor that skips a sparse file's holes. */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int rand_bytes(void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = getrandom(p, n, 0);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int rand_hex(char *out, size_t nbytes)
{
	unsigned char b[64];
	size_t i;

	if (nbytes > sizeof b)
		nbytes = sizeof b;
	if (rand_bytes(b, nbytes) < 0) {
		out[0] = 0;
		return -1;
	}
	for (i = 0; i < nbytes; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * nbytes] = 0;
	return 0;
}

static void hex32(const unsigned char *h, char out[65])
{
	int i;

	for (i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", h[i]);
	out[64] = 0;
}

void sha256_hex(const void *data, size_t n, char out[65])
{
	unsigned char h[crypto_hash_sha256_BYTES];

	crypto_hash_sha256(h, data, n);
	hex32(h, out);
}

int sha256_fd(int fd, char out[65])
{
	static const unsigned char zero[1 << 16];
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES], buf[1 << 16];
	struct stat sb;
	off_t pos, next, end = 0; /* [pos, end) is data, read without a seek; -1: to EOF */
	ssize_t r;
	size_t n;
	int seek;

	if (!(seek = (pos = lseek(fd, 0, SEEK_CUR)) >= 0)) {
		if (errno != ESPIPE)
			return -1;
		end = -1;
	}
	crypto_hash_sha256_init(&st);
	for (;;) {
		/* A hole reads as zeros: they are hashed, not read (a base is
		 * 2 GiB of holes: read, ~6 s of kernel time, cold, and 2 GiB of
		 * zero pages cached).  Two seeks per extent: a file without
		 * holes (a warm state, hashed at each resume) costs two more. */
		if (end >= 0 && pos >= end) {
			if ((next = lseek(fd, pos, SEEK_DATA)) >= 0) {
				if ((end = lseek(fd, next, SEEK_HOLE)) <= next)
					end = -1; /* no SEEK_HOLE, or a race: read */
			} else if (errno == ENXIO) { /* a hole up to the end */
				if (fstat(fd, &sb) < 0)
					return -1;
				next = sb.st_size > pos ? sb.st_size : pos;
				end = -1;
			} else { /* no SEEK_DATA here: read it all */
				next = pos;
				end = -1;
			}
			for (; pos < next; pos += (off_t)n) {
				n = next - pos < (off_t)sizeof zero ? (size_t)(next - pos) : sizeof zero;
				crypto_hash_sha256_update(&st, zero, n);
			}
		}
		n = end >= 0 && end - pos < (off_t)sizeof buf ? (size_t)(end - pos) : sizeof buf;
		r = seek ? pread(fd, buf, n, pos) : read(fd, buf, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		crypto_hash_sha256_update(&st, buf, (unsigned long long)r);
		pos += r;
	}
	if (seek && lseek(fd, pos, SEEK_SET) < 0)
		return -1;
	crypto_hash_sha256_final(&st, h);
	hex32(h, out);
	return 0;
}

int sha256_file(const char *path, char out[65])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), e;

	if (fd < 0)
		return -1;
	if (sha256_fd(fd, out) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	return 0;
}
