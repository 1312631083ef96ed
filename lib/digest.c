/* digest.c - randomness and sha256 (declared in util.h): libsodium's,
 * and one hash of a file descriptor that skips a sparse file's holes. */

#include "util.h"

#include <dlfcn.h>
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

/* A SHA-256 (util.h's sha256_stream) by OpenSSL's libcrypto when it
 * loads, else by libsodium's: the same digest.  libcrypto's uses the CPU's
 * SHA instructions, ~6x libsodium's portable code here (256 MiB: 0.28 s
 * against 1.6 s), and a base image is 2.2 GB hashed whole, holes included,
 * by each `isopod stage verify` and each attestation's subjects; every
 * byte of a copy-in or copy-out is hashed as it passes.  Loaded at run
 * time: the tools build without OpenSSL's headers (t/35's guest has none)
 * and work without the library. */
void sha256_begin(struct sha256_stream *f)
{
	void *(*ctx_new)(void);
	const void *(*md)(void);
	int (*init)(void *, const void *, void *);

	/* RTLD_NODELETE: sha256_end's dlclose leaves it mapped, so the next
	 * file's dlopen (attest's subjects, a chain's layers) loads nothing */
	*f = (struct sha256_stream){ .lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) };
	if (f->lib) {
		*(void **)&ctx_new = dlsym(f->lib, "EVP_MD_CTX_new");
		*(void **)&md = dlsym(f->lib, "EVP_sha256");
		*(void **)&init = dlsym(f->lib, "EVP_DigestInit_ex");
		*(void **)&f->update = dlsym(f->lib, "EVP_DigestUpdate");
		*(void **)&f->final = dlsym(f->lib, "EVP_DigestFinal_ex");
		*(void **)&f->free = dlsym(f->lib, "EVP_MD_CTX_free");
		if (ctx_new && md && init && f->update && f->final && f->free &&
		    (f->ctx = ctx_new()) && init(f->ctx, md(), NULL) == 1)
			return;
		if (f->ctx && f->free)
			f->free(f->ctx);
		dlclose(f->lib);
		*f = (struct sha256_stream){ 0 };
	}
	crypto_hash_sha256_init(&f->st);
}

void sha256_add(struct sha256_stream *f, const void *b, size_t n)
{
	if (f->ctx) {
		if (f->update(f->ctx, b, n) != 1)
			f->bad = 1;
	} else
		crypto_hash_sha256_update(&f->st, (const unsigned char *)b, (unsigned long long)n);
}

int sha256_end(struct sha256_stream *f, unsigned char h[32])
{
	unsigned int n = 0;
	int r = 0;

	if (!f->ctx)
		return crypto_hash_sha256_final(&f->st, h), 0;
	if (f->bad || f->final(f->ctx, h, &n) != 1 || n != crypto_hash_sha256_BYTES)
		r = -1;
	f->free(f->ctx);
	dlclose(f->lib);
	*f = (struct sha256_stream){ 0 };
	return r;
}

int sha256_fd(int fd, char out[65])
{
	static const unsigned char zero[1 << 16];
	struct sha256_stream st;
	unsigned char h[crypto_hash_sha256_BYTES], buf[1 << 16];
	struct stat sb;
	off_t pos, next, end = 0; /* [pos, end) is data, read without a seek; -1: to EOF */
	ssize_t r;
	size_t n;
	int seek, e;

	if (!(seek = (pos = lseek(fd, 0, SEEK_CUR)) >= 0)) {
		if (errno != ESPIPE)
			return -1;
		end = -1;
	}
	sha256_begin(&st);
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
					goto fail;
				next = sb.st_size > pos ? sb.st_size : pos;
				end = -1;
			} else { /* no SEEK_DATA here: read it all */
				next = pos;
				end = -1;
			}
			for (; pos < next; pos += (off_t)n) {
				n = next - pos < (off_t)sizeof zero ? (size_t)(next - pos) : sizeof zero;
				sha256_add(&st, zero, n);
			}
		}
		n = end >= 0 && end - pos < (off_t)sizeof buf ? (size_t)(end - pos) : sizeof buf;
		r = seek ? pread(fd, buf, n, pos) : read(fd, buf, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		if (r == 0)
			break;
		sha256_add(&st, buf, (size_t)r);
		pos += r;
	}
	if (seek && lseek(fd, pos, SEEK_SET) < 0)
		goto fail;
	if (sha256_end(&st, h) < 0)
		return errno = EIO, -1;
	hex32(h, out);
	return 0;
fail:
	e = errno; /* (sha256_end may change it) */
	sha256_end(&st, h);
	errno = e;
	return -1;
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
