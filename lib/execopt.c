/* execopt.c - the parts of one command in a VM that need no VM (execopt.h). */
#include "execopt.h"
#include "util.h"
#include <ctype.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int exec_copy_split(char *spec, const char *opt, struct exec_copy *cp, int host_first,
		    char *why, size_t wsz)
{
	/* HOST:GUEST — the guest side is absolute, so split at the last ':'
	 * that is followed by '/' on the guest side. */
	char *colon = host_first ? strstr(spec, ":/") : strchr(spec, ':');

	if (!colon || colon == spec || !colon[1]) {
		snprintf(why, wsz, "%s %s: expected %s", opt, EXC(spec),
			 host_first ? "HOST:/GUEST/PATH" : "/GUEST/PATH:HOST");
		return -1;
	}
	*colon = 0;
	cp->host = host_first ? spec : colon + 1;
	cp->guest = host_first ? colon + 1 : spec;
	if (cp->guest[0] != '/') {
		snprintf(why, wsz, "%s: guest path %s must be absolute", opt, EXC(cp->guest));
		return -1;
	}
	if (strlen(cp->guest) >= 4096) {
		snprintf(why, wsz, "%s: guest path too long", opt);
		return -1;
	}
	return 0;
}

const char *exec_env_invalid(const char *kv)
{
	const char *eq = strchr(kv, '=');

	if (!eq)
		return "expected NAME=VALUE";
	if (eq == kv)
		return "empty variable name";
	/* One rule for the CLI and isopod-mcp's schema: a name a shell can
	 * use (POSIX's portable grammar), not one that could be an option
	 * or split into two lines. */
	if (!(isalpha((unsigned char)kv[0]) || kv[0] == '_'))
		return "a variable name starts with a letter or '_'";
	for (const char *c = kv + 1; c < eq; c++)
		if (!(isalnum((unsigned char)*c) || *c == '_'))
			return "a variable name is letters, digits and '_' ([A-Za-z_][A-Za-z0-9_]*)";
	return NULL;
}

/* A filtered (or learn) VM reaches the outside only through the egress
 * broker on its gateway: every command gets the proxy variables (both spellings: curl
 * reads http_proxy lower-case only, others the upper case). */
int exec_proxy_env(const json_t *net, char env[EXEC_PROXY_MAX][EXEC_PROXY_SZ])
{
	static const char *const names[] = { "http_proxy", "HTTP_PROXY", "https_proxy",
					     "HTTPS_PROXY" };
	const char *mode = json_string_value(json_object_get(net, "mode"));
	const char *gw = json_string_value(json_object_get(net, "gateway"));
	int n = 0;

	if (!mode || (strcmp(mode, "filtered") && strcmp(mode, "learn")) || !gw || strlen(gw) > 15)
		return 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		snprintf(env[n++], EXEC_PROXY_SZ, "%s=http://%s:3128", names[i], gw);
	snprintf(env[n++], EXEC_PROXY_SZ, "no_proxy=localhost,127.0.0.1,::1");
	snprintf(env[n++], EXEC_PROXY_SZ, "NO_PROXY=localhost,127.0.0.1,::1");
	return n;
}

int exec_dest_trim(const char *host, char *buf, size_t bsz)
{
	size_t n = strlen(host);

	while (n > 1 && host[n - 1] == '/')
		n--;
	if (n >= bsz)
		return -1;
	memcpy(buf, host, n);
	buf[n] = 0;
	return host[n] != 0;
}

/* A name a copy-out may make: one component, not "." or ".." (a name
 * for a directory that is there, never one to make or replace), with
 * room for a temporary name's suffix. */
static int dest_name_ok(const char *n)
{
	return *n && strcmp(n, ".") && strcmp(n, "..") && strlen(n) <= NAME_MAX - 40;
}

int exec_dest_open(const char *host, const char *guest, struct exec_dest *d, char *why,
		   size_t wsz)
{
	char h[PATH_MAX], dir[PATH_MAX];
	const char *base = strrchr(guest, '/'), *sl;
	int want_dir = exec_dest_trim(host, h, sizeof h), oe, r;

	d->dfd = -1;
	d->name = NULL;
	if (want_dir < 0) {
		snprintf(why, wsz, "path too long: %.64s...", host);
		return -1;
	}
	base = base ? base + 1 : guest;
	/* Opened once, as a directory, its last component not followed
	 * (a symlink there is no directory to copy into).  Never a look at
	 * the name and then an open of it: whoever can write beside HOST
	 * could swap a directory for a symlink in between and have the file
	 * land where that points. */
	d->dfd = open(h, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	oe = errno;
	if (d->dfd >= 0) {
		r = pathn(d->path, sizeof d->path, "%s%s%s", h, strcmp(h, "/") ? "/" : "",
			  *base ? base : "out");
		if (r < 0) {
			close(d->dfd);
			d->dfd = -1;
			snprintf(why, wsz, "path too long: %.64s...", host);
			return -1;
		}
		d->name = strrchr(d->path, '/') + 1;
		if (!dest_name_ok(d->name)) {
			close(d->dfd);
			d->dfd = -1;
			snprintf(why, wsz, "names no file (., .., or too long a name)");
			return 1;
		}
		return 0;
	}
	if (pathn(d->path, sizeof d->path, "%s", h) < 0) {
		snprintf(why, wsz, "path too long: %.64s...", host);
		return -1;
	}
	if (want_dir) {
		/* HOST/ names a directory: the same descriptor or nothing, never
		 * HOST as a file, never what a symlink there points to. */
		snprintf(why, wsz, "%s", oe == ENOTDIR || oe == ELOOP ?
			 "not a directory (a symlink there is not followed; name its target, "
			 "or HOST/.)" : strerror(oe));
		return 1;
	}
	/* Not a directory (or a symlink, or absent): NAME in HOST's parent,
	 * which the copy never follows (isopod-exec(1)). */
	sl = strrchr(h, '/');
	d->name = sl ? d->path + (sl - h) + 1 : d->path;
	if (!dest_name_ok(d->name)) {
		snprintf(why, wsz, "names no file (., .., or too long a name)");
		return 1;
	}
	if (oe != ENOTDIR && oe != ELOOP && oe != ENOENT) {
		snprintf(why, wsz, "%s", strerror(oe));
		return 1;
	}
	snprintf(dir, sizeof dir, "%.*s", sl ? (int)(sl - h) : 1, sl ? h : ".");
	if (!dir[0])
		strcpy(dir, "/");
	if ((d->dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		snprintf(why, wsz, "no directory %s on the host: %s", dir, strerror(errno));
		return 1;
	}
	return 0;
}

int exec_check_paths(const char *stdin_file, const struct exec_copy *in, int nin,
		     const struct exec_copy *out, int nout, char *why, size_t wsz)
{
	struct exec_dest dest;
	struct stat st;
	char w[512];
	int fd;

	if (stdin_file && strcmp(stdin_file, "-")) {
		fd = open(stdin_file, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) {
			if (fd >= 0)
				close(fd);
			snprintf(why, wsz, "--stdin-file '%s': not a readable file", EXC(stdin_file));
			return -1;
		}
		close(fd);
	}
	for (int i = 0; i < nin; i++)
		if (access(in[i].host, R_OK) < 0) {
			snprintf(why, wsz, "--copy-in %s: not readable: %s", EXC(in[i].host),
				 strerror(errno));
			return -1;
		}
	/* The destination as the copy-out will open it: a HOST/ that is a
	 * symlink is refused now, not after the command ran. */
	for (int i = 0; i < nout; i++) {
		if (exec_dest_open(out[i].host, out[i].guest, &dest, w, sizeof w) != 0) {
			snprintf(why, wsz, "--copy-out %s: %s", EXC(out[i].host), w);
			return -1;
		}
		close(dest.dfd);
	}
	return 0;
}

long exec_request_encode(const struct exec_request *r, uint8_t *buf, size_t cap)
{
	struct tlv_w w;

	tlv_init(&w, buf, cap);
	if (r->shell) {
		tlv_put_str(&w, T_ARG, "/bin/sh");
		tlv_put_str(&w, T_ARG, "-c");
	}
	for (int i = 0; i < r->argc; i++)
		tlv_put_str(&w, T_ARG, r->argv[i]);
	for (int i = 0; i < r->nproxy; i++)
		tlv_put_str(&w, T_ENV, r->proxy[i]);
	for (int i = 0; i < r->nenv; i++)
		tlv_put_str(&w, T_ENV, r->env[i]);
	if (r->cwd)
		tlv_put_str(&w, T_CWD, r->cwd);
	if (r->timeout_ms)
		tlv_put_u64(&w, T_TIMEOUT_MS, r->timeout_ms);
	tlv_put_u32(&w, T_STDIN, (uint32_t)r->has_stdin);
	return w.err ? -1 : (long)w.len;
}

int exec_status_decode(const struct frame *fr, struct exec_status *ex)
{
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l, u;

	tlv_rinit(&rd, fr->payload, fr->len);
	while (tlv_next(&rd, &tag, &v, &l) == 1) {
		if (tag == T_EXIT_CODE && tlv_u32(v, l, &u) == 0)
			ex->code = (int32_t)u;
		else if (tag == T_SIGNAL)
			tlv_u32(v, l, &ex->sig);
		else if (tag == T_TIMED_OUT)
			tlv_u32(v, l, &ex->timed_out);
		else if (tag == T_ERROR_KIND && tlv_str(v, l, ex->kind, sizeof ex->kind) < 0)
			ex->kind[0] = 0;
		else if (tag == T_MESSAGE && tlv_str(v, l, ex->msg, sizeof ex->msg) < 0)
			ex->msg[0] = 0;
	}
	if (ex->code < 0 || ex->code > 255 || ex->sig > 64 || ex->timed_out > 1)
		return -1;
	return 0;
}

uint64_t frame_tlv_u64(const struct frame *fr, uint8_t want)
{
	struct tlv_r rd;
	uint8_t tag;
	const uint8_t *v;
	uint32_t l, v32;
	uint64_t v64 = 0;

	tlv_rinit(&rd, fr->payload, fr->len);
	while (tlv_next(&rd, &tag, &v, &l) == 1) {
		if (tag != want)
			continue;
		if (tlv_u64(v, l, &v64) == 0)
			return v64;
		if (tlv_u32(v, l, &v32) == 0)
			return v32;
	}
	return 0;
}
