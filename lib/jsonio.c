/* jsonio.c - the tools' one JSON loader (declared in util.h): a file, a
 * descriptor, stdin or a buffer, at most JSON_MAX_BYTES, duplicate keys
 * refused and named.  Split from util.c (its size). */

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The bytes handed to jansson, kept (at most JSON_MAX_BYTES of them) so that
 * a duplicate key can be named from the error's position. */
struct jin {
	int fd;
	char *buf;
	size_t len;
	int over, rerr;
};

static size_t jin_read(void *out, size_t n, void *arg)
{
	struct jin *in = arg;
	ssize_t r;

	if (in->len >= JSON_MAX_BYTES) {
		char c;

		/* Exactly JSON_MAX_BYTES then EOF is fine; one byte more is not. */
		do
			r = read(in->fd, &c, 1);
		while (r < 0 && errno == EINTR);
		if (r == 0)
			return 0;
		in->over = 1;
		return (size_t)-1;
	}
	if (n > JSON_MAX_BYTES - in->len)
		n = JSON_MAX_BYTES - in->len;
	/* read(2), not stdio: a pipe's writer may keep it open after the
	 * object, and jansson stops at the object's end (stdin). */
	do
		r = read(in->fd, out, n);
	while (r < 0 && errno == EINTR);
	if (r < 0) {
		in->rerr = errno;
		return (size_t)-1;
	}
	memcpy(in->buf + in->len, out, (size_t)r);
	in->len += (size_t)r;
	return (size_t)r;
}

/* The reason a parse failed, bounded: a duplicate key by name (its JSON
 * text, which ends just before err->position). */
static void json_why(const json_error_t *err, const char *buf, size_t len, char *why,
		     size_t whysz)
{
	size_t end = err->position > 0 ? (size_t)err->position : 0, b, bs;

	if (!why || !whysz)
		return;
	if (json_error_code(err) == json_error_duplicate_key && end >= 2 && end <= len &&
	    buf[end - 1] == '"') {
		/* back to the opening quote: one not escaped by an odd run of '\' */
		for (b = end - 1; b-- > 0;) {
			if (buf[b] != '"')
				continue;
			for (bs = 0; bs < b && buf[b - 1 - bs] == '\\'; bs++)
				;
			if (bs % 2 == 0) {
				snprintf(why, whysz, "duplicate key \"%s\" (line %d, column %d)",
					 excerpt((char[EXCERPT_SZ]){0}, buf + b + 1, end - 2 - b),
					 err->line, err->column);
				return;
			}
		}
	}
	snprintf(why, whysz, "%s (line %d, column %d)",
		 json_error_code(err) == json_error_duplicate_key ? "duplicate key" : EXC(err->text),
		 err->line, err->column);
}

static json_t *json_load_jin(struct jin *in, size_t flags, char *why, size_t whysz)
{
	json_error_t err;
	json_t *j;

	in->buf = malloc(JSON_MAX_BYTES);
	if (!in->buf) {
		snprintf(why, whysz, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	j = json_load_callback(jin_read, in, flags | JSON_REJECT_DUPLICATES, &err);
	/* jansson reads the callback's error as EOF: an object followed by
	 * whitespace past the cap parses, and must be refused all the same. */
	if (j && in->over) {
		json_decref(j);
		j = NULL;
	}
	if (!j) {
		if (in->over) {
			snprintf(why, whysz, "more than %u bytes of JSON", JSON_MAX_BYTES);
			errno = EFBIG;
		} else if (in->rerr) {
			snprintf(why, whysz, "read: %s", strerror(in->rerr));
			errno = in->rerr;
		} else {
			json_why(&err, in->buf, in->len, why, whysz);
			errno = EINVAL;
		}
	} else if (!json_is_object(j)) {
		snprintf(why, whysz, "not a JSON object");
		json_decref(j);
		j = NULL;
		errno = EINVAL;
	}
	free(in->buf);
	in->buf = NULL;
	return j;
}

json_t *json_load_fd(int fd)
{
	struct jin in = {.fd = fd};
	char why[512];

	return json_load_jin(&in, 0, why, sizeof why);
}

json_t *json_load_close(int fd)
{
	json_t *j;
	int e;

	if (fd < 0)
		return NULL;
	j = json_load_fd(fd);
	e = errno;
	close(fd);
	errno = e;
	return j;
}

json_t *json_load_path(const char *path)
{
	return json_load_close(open(path, O_RDONLY | O_CLOEXEC));
}

json_t *json_load_ours(const char *path)
{
	/* O_NOFOLLOW: not a link; O_NONBLOCK: a FIFO would hold the open */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (fd < 0)
		return NULL;
	/* fstat's own error, not the EPERM of a file refused below */
	if (fstat(fd, &st) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return NULL;
	}
	/* A regular file of ours that nobody else may write: one another user
	 * could have put here, or changed, is no answer. */
	if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
		close(fd);
		errno = EPERM;
		return NULL;
	}
	return json_load_close(fd);
}

json_t *json_parse(const char *buf, size_t n, size_t flags, char *why, size_t whysz)
{
	json_error_t err;
	json_t *j;

	if (n > JSON_MAX_BYTES) {
		snprintf(why, whysz, "more than %u bytes of JSON", JSON_MAX_BYTES);
		return NULL;
	}
	j = json_loadb(buf, n, flags | JSON_REJECT_DUPLICATES, &err);
	if (!j) {
		json_why(&err, buf, n, why, whysz);
		return NULL;
	}
	if (!json_is_object(j)) {
		if (why && whysz)
			snprintf(why, whysz, "not a JSON object");
		json_decref(j);
		return NULL;
	}
	return j;
}

json_t *json_load_stdin(char *why, size_t whysz)
{
	struct jin in = { .fd = STDIN_FILENO };

	return json_load_jin(&in, JSON_DISABLE_EOF_CHECK, why, whysz);
}
