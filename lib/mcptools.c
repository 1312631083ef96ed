/* mcptools.c - isopod-mcp's tools (mcptools.h): argv building, the I/O
 * root, the tool table. */
#include "config.h"
#include "execopt.h"
#include "jschema.h"
#include "mcptools.h"
#include "qemu.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- argv --------------------------------------------------------------------- */

static int arg(struct call *c, const char *a)
{
	char **av = realloc(c->argv, (size_t)(c->argc + 2) * sizeof *av);

	if (!av)
		return -1;
	c->argv = av;
	if (!(av[c->argc] = strdup(a)))
		return -1;
	av[++c->argc] = NULL;
	return 0;
}

/* Allocated to fit: an env value may be as long as an argument may be. */
__attribute__((format(printf, 2, 3))) static int argf(struct call *c, const char *fmt, ...)
{
	char *b;
	va_list ap;
	int n, r;

	va_start(ap, fmt);
	n = vasprintf(&b, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	r = arg(c, b);
	free(b);
	return r;
}

/* What execve takes: each string at most MAX_ARG_STRLEN (32 pages, with
 * its NUL), and all of them with our environment within ARG_MAX.  Half of
 * that is the budget: the front end adds its own arguments and passes
 * these on.  Checked before exec so that too much is the client's -32602,
 * not an E2BIG reported as an infrastructure failure. */
#define ARG_STR_MAX 131071
int mcp_argv_fits(const struct call *c, json_t **err)
{
	long amax = sysconf(_SC_ARG_MAX);
	size_t total = 0, budget = (size_t)(amax > 0 ? amax : 131072) / 2;

	for (char **e = environ; *e; e++)
		total += strlen(*e) + 1 + sizeof *e;
	for (int i = 0; i < c->argc; i++) {
		size_t n = strlen(c->argv[i]);

		if (n > ARG_STR_MAX)
			return jschema_bad(err, "argv", "command, argv or env: an argument of %zu bytes; "
				   "at most %d each", n, ARG_STR_MAX);
		total += n + 1 + sizeof c->argv[i];
	}
	if (total > budget)
		return jschema_bad(err, "argv", "command, argv, env and paths: %zu bytes together; "
			   "at most %zu", total, budget);
	return 0;
}

/* ---- the I/O root -------------------------------------------------------------- */

/* path (relative to the root, or absolute inside it) opened beneath the
 * root: `..` that climbs out, an absolute path elsewhere, a symlink whose
 * target leaves the root and /proc magic links are refused by the kernel
 * (RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), not by string checks. */
static int beneath(struct server *s, const char *path, const char *shown, int flags,
		   const char *field, json_t **err)
{
	size_t rl = strlen(s->root);
	const char *rel = path;
	struct open_how how = { .flags = (unsigned long long)(flags | O_CLOEXEC),
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
	int fd;

	if (path[0] == '/') {
		if (rl == 1)
			rel = path + 1;
		else if (!strncmp(path, s->root, rl) && (path[rl] == '/' || !path[rl]))
			rel = path + rl;
		else
			return jschema_bad(err, field, "%s: %s is outside the I/O root %s", field, EXC(shown),
				   EXC(s->root));
		while (*rel == '/')
			rel++;
	}
	if (!*rel)
		rel = ".";
	fd = (int)syscall(SYS_openat2, s->root_fd, rel, &how, sizeof how);
	if (fd >= 0)
		return fd;
	/* Out of descriptors or memory: the server's failure, not the path's
	 * (-1 without *err: the call's isError, error_kind infra). */
	if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
		return -1;
	if (errno == EXDEV)
		return jschema_bad(err, field, "%s: %s leaves the I/O root %s (.. or a symlink out of it)",
			   field, EXC(shown), EXC(s->root));
	if (errno == ELOOP)
		return jschema_bad(err, field, "%s: %s: a magic link or too many symlinks", field, EXC(shown));
	return jschema_bad(err, field, "%s: %s: %s", field, EXC(shown), strerror(errno));
}

static int hold(struct call *c, int fd)
{
	if (c->nhold >= HOLD_MAX) {
		close(fd);
		return -1;
	}
	c->hold[c->nhold++] = fd;
	return fd;
}

/* A regular file beneath the root, for reading (a FIFO must not block us),
 * or with dir_ok (copy_in) a directory.  A directory's descriptor is what
 * the tool walks: isopod-exec reopens /proc/<pid>/fd/N (the same
 * directory, whatever its path has become) and reads below it with openat
 * O_NOFOLLOW, a symlink inside sent as a symlink (lib/treeio.c ts_walk):
 * nothing below it is resolved by name, so nothing beyond the root is
 * read through a link in it. */
static int open_in(struct server *s, const char *path, const char *field, int dir_ok,
		   int *is_dir, json_t **err)
{
	struct stat st;
	int fd = beneath(s, path, path, O_RDONLY | O_NONBLOCK, field, err);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !(S_ISREG(st.st_mode) || (dir_ok && S_ISDIR(st.st_mode)))) {
		close(fd);
		return jschema_bad(err, field, "%s: %s is not a regular file%s", field, EXC(path),
			   dir_ok ? " or a directory" : "");
	}
	/* A file with a second name may be one from outside the root linked
	 * in (whoever can write there can link a file they can read, or one
	 * left there long ago): the root confines by names, and it cannot
	 * see that one.  Refused, as a directory copy_in's walk skips hard
	 * links (lib/treeio.c); asked of the descriptor, not the name. */
	if (S_ISREG(st.st_mode) && st.st_nlink > 1) {
		close(fd);
		return jschema_bad(err, field, "%s: %s has more than one name (a hard link): "
			   "refused", field, EXC(path));
	}
	fcntl(fd, F_SETFL, 0);
	if (is_dir)
		*is_dir = S_ISDIR(st.st_mode);
	return fd;
}

/* A copy_out destination: a directory beneath the root, or a name in one
 * that is absent or a regular file (a guest directory then goes to
 * DIR/NAME or NAME, which isopod-exec makes, refusing one that exists).  The destination handed on is
 * /proc/<pid>/fd/N/{.,NAME} with N our descriptor of that directory: its
 * path can no longer be swapped.  The last component is never followed,
 * here as in isopod-exec(1) (lib/execopt.c exec_dest_open): a symlink
 * there, even to a directory beneath the root, is no directory to copy
 * into, and a trailing slash (which the kernel resolves through a symlink
 * even under O_NOFOLLOW) is taken off first and then demands a directory.
 * NAME made a symlink after this check is not followed either (hence "/."
 * for a directory: fd/N itself is a symlink). */
static int dest_out(struct server *s, struct call *c, const char *path, const char *field,
		    char *dst, size_t dsz, json_t **err)
{
	char parent[PATH_MAX], trimmed[PATH_MAX];
	const char *base;
	struct stat st;
	json_t *ignored = NULL;
	int want_dir = exec_dest_trim(path, trimmed, sizeof trimmed), fd;

	if (want_dir < 0)
		return jschema_bad(err, field, "%s: path too long", field);
	fd = beneath(s, trimmed, path, O_PATH | O_DIRECTORY | O_NOFOLLOW, field, &ignored);
	json_decref(ignored);
	if (fd < 0 && want_dir)
		return jschema_bad(err, field, "%s: %s names no directory beneath the I/O root "
			   "(absent, not one, or a symlink: not followed)", field, EXC(path));
	if (fd >= 0) {
		if (hold(c, fd) < 0)
			return jschema_bad(err, field, "%s: too many host paths", field);
		snprintf(dst, dsz, "/proc/%d/fd/%d/.", (int)getpid(), fd);
		json_object_set_new(c->hostmap, dst, json_string(path));
		return 0;
	}
	memcpy(parent, trimmed, sizeof parent);
	base = strrchr(parent, '/');
	if (base) {
		parent[base - parent] = 0;
		base = trimmed + (base - parent) + 1;
		if (!parent[0])
			strcpy(parent, "/");
	} else {
		strcpy(parent, ".");
		base = trimmed;
	}
	if (!*base || !strcmp(base, ".") || !strcmp(base, ".."))
		return jschema_bad(err, field, "%s: %s names no file", field, EXC(path));
	if ((fd = beneath(s, parent, path, O_PATH | O_DIRECTORY, field, err)) < 0)
		return -1;
	if (fstatat(fd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
		close(fd);
		return jschema_bad(err, field, "%s: %s exists and is not a regular file or a directory "
			   "beneath the I/O root", field, EXC(path));
	}
	if (hold(c, fd) < 0)
		return jschema_bad(err, field, "%s: too many host paths", field);
	if (snprintf(dst, dsz, "/proc/%d/fd/%d/%s", (int)getpid(), fd, base) >= (int)dsz)
		return jschema_bad(err, field, "%s: path too long", field);
	json_object_set_new(c->hostmap, dst, json_string(path));
	return 0;
}

/* ---- the tools ---------------------------------------------------------------- */

static int build_copies(struct server *s, struct call *c, json_t *args, const char *opt_in,
			const char *opt_out, json_t **err)
{
	char f[64], p[PATH_MAX + 32];
	size_t i;
	json_t *e;

	json_array_foreach(json_object_get(args, "copy_in"), i, e) {
		int fd, dir;

		snprintf(f, sizeof f, "copy_in[%zu].host", i);
		if ((fd = open_in(s, json_string_value(json_object_get(e, "host")), f, 1, &dir, err)) < 0)
			return -1;
		/* provenance names each input by its sha256, and a directory
		 * (a tree) has none: refused before anything runs, as the
		 * front end would (isopod-exec --check --for-provenance). */
		if (dir && json_is_true(json_object_get(args, "provenance"))) {
			close(fd);
			return jschema_bad(err, f, "%s: %s is a directory; provenance signs regular-file "
				   "inputs only (copy in an archive of it)", f,
				   EXC(json_string_value(json_object_get(e, "host"))));
		}
		if (hold(c, fd) < 0)
			return jschema_bad(err, f, "%s: too many host paths", f);
		if (arg(c, opt_in) < 0 || argf(c, "/proc/%d/fd/%d:%s", (int)getpid(), fd,
					      json_string_value(json_object_get(e, "guest"))) < 0)
			return jschema_bad(err, f, "%s: path too long", f);
		snprintf(p, sizeof p, "/proc/%d/fd/%d", (int)getpid(), fd);
		json_object_set_new(c->hostmap, p, json_string(json_string_value(json_object_get(e, "host"))));
	}
	json_array_foreach(json_object_get(args, "copy_out"), i, e) {
		snprintf(f, sizeof f, "copy_out[%zu].host", i);
		if (dest_out(s, c, json_string_value(json_object_get(e, "host")), f, p, sizeof p,
			     err) < 0)
			return -1;
		if (arg(c, opt_out) < 0 || argf(c, "%s:%s", json_string_value(json_object_get(e, "guest")),
						p) < 0)
			return jschema_bad(err, f, "%s: path too long", f);
	}
	return 0;
}

/* stdin (text, through a memfd) or stdin_file (beneath the root): the
 * child's standard input, which the front end forwards to the command. */
static int build_stdin(struct server *s, struct call *c, json_t *args, json_t **err)
{
	json_t *text = json_object_get(args, "stdin");
	json_t *file = json_object_get(args, "stdin_file");

	if (text && file)
		return jschema_bad(err, "stdin_file", "stdin and stdin_file: give one of them");
	if (file) {
		if ((c->in_fd = open_in(s, json_string_value(file), "stdin_file", 0, NULL, err)) < 0)
			return -1;
	} else if (text) {
		c->in_fd = memfd_create("isopod-mcp-stdin", MFD_CLOEXEC);
		if (c->in_fd < 0 ||
		    write_all(c->in_fd, json_string_value(text), json_string_length(text)) < 0 ||
		    lseek(c->in_fd, 0, SEEK_SET) < 0)
			return -1; /* the server's failure (errno), not the client's */
	}
	return 0;
}

static int add_env(struct call *c, json_t *args)
{
	const char *k;
	json_t *v;

	json_object_foreach(json_object_get(args, "env"), k, v)
		if (arg(c, "--env") < 0 || argf(c, "%s=%s", k, json_string_value(v)) < 0)
			return -1;
	return 0;
}

static int add_command(struct call *c, json_t *args, json_t **err)
{
	json_t *argv = json_object_get(args, "argv"), *cmd = json_object_get(args, "command"), *e;
	size_t i;

	if (!!argv == !!cmd)
		return jschema_bad(err, "argv", "argv or command: give exactly one");
	if (arg(c, "--") < 0)
		return -1;
	if (cmd)
		return arg(c, "sh") < 0 || arg(c, "-c") < 0 || arg(c, json_string_value(cmd)) < 0 ? -1 : 0;
	json_array_foreach(argv, i, e)
		if (arg(c, json_string_value(e)) < 0)
			return -1;
	return 0;
}

/* provenance:true: the front end signs its envelope (--provenance) into a
 * directory of this call's own (0700, made here; call_free removes it), and
 * the answer carries the envelope itself: a client names no host path for
 * it.  The front end refuses it without copy_out or commit_as (100). */
static int build_prov(struct call *c, json_t *args)
{
	const char *t = getenv("TMPDIR");

	if (!json_is_true(json_object_get(args, "provenance")))
		return 0;
	if (snprintf(c->prov_dir, sizeof c->prov_dir, "%s/isopod-mcp-prov.XXXXXX",
		     t && *t && strlen(t) < sizeof c->prov_dir - 32 ? t : "/tmp") >= (int)sizeof c->prov_dir ||
	    !mkdtemp(c->prov_dir)) {
		c->prov_dir[0] = 0;
		return -1; /* the server's failure (errno) */
	}
	return arg(c, "--provenance") < 0 || argf(c, "%s/" PROV_ENVELOPE, c->prov_dir) < 0 ? -1 : 0;
}

static int tool_path(struct server *s, struct call *c, const char *name);

/* --backend slurm (isopod-mcp(1) Slurm): the job runs on a Slurm node,
 * where a path of ours (beneath the I/O root, a descriptor of this
 * server), a VM kept here or an envelope written here mean nothing:
 * refused with -32602, naming the field and the backend, before anything
 * is submitted.  The tools that act on a kept VM are refused whole. */
static int slurm_refuses(struct server *s, struct call *c, json_t *args, json_t **err)
{
	static const struct {
		const char *key, *why;
	} here[] = { { "keep", "a kept VM would stay on the Slurm node, out of vm_exec's reach" },
		     { "stdin_file", "a host path of this server; the job runs on a Slurm node (stdin: give the text)" },
		     { "copy_in", "host paths of this server; the job runs on a Slurm node" },
		     { "copy_out", "host paths of this server; the job runs on a Slurm node" },
		     { "provenance", "the envelope would be signed and written on the Slurm node, not here" } };
	const char *n = c->tool->name;
	json_t *v;

	if (!s->slurm)
		return 0;
	if (!strcmp(n, "vm_exec") || !strcmp(n, "vm_stop") || !strcmp(n, "vm_rm"))
		return jschema_bad(err, "name", "%s: refused under --backend slurm: sandbox_run's VMs run on "
			   "Slurm's nodes and none is kept (keep is refused)", n);
	for (size_t i = 0; i < sizeof here / sizeof here[0]; i++)
		if ((v = json_object_get(args, here[i].key)) && !json_is_false(v) &&
		    !(json_is_array(v) && !json_array_size(v)))
			return jschema_bad(err, here[i].key, "%s: refused under --backend slurm: %s",
				   here[i].key, here[i].why);
	return 0;
}

/* One default as the front end picks it: the variable when set and not
 * empty, else the configuration's key, else dflt.  1 from the variable or
 * a file (where names it), 0 dflt, -1 a file unreadable. */
static int front_default(const char *env, const char *key, const char *dflt, char *val, size_t vsz,
			 char *where, size_t wsz)
{
	const char *e = getenv(env);
	int r;

	if (e && *e) {
		snprintf(val, vsz, "%s", e), snprintf(where, wsz, "%s", env);
		return 1;
	}
	if ((r = config_value(key, val, vsz, where, wsz)) != 0)
		return r;
	snprintf(val, vsz, "%s", dflt), snprintf(where, wsz, "the default");
	return 0;
}

int mcp_slurm_defaults(struct server *s, char *why, size_t wsz)
{
	char v[64], w[PATH_MAX + 32], d[2][24];
	long long *out[2] = { &s->def_vcpus, &s->def_mem_mib };
	static const char *const keys[2][2] = { { "ISOPOD_VCPUS", "vcpus" }, { "ISOPOD_MEM_MIB", "mem_mib" } };
	static const long long lo[2] = { 1, 64 }, hi[2] = { 1024, 1 << 24 };

	snprintf(d[0], sizeof d[0], "%d", VM_VCPUS_DEFAULT), snprintf(d[1], sizeof d[1], "%d", VM_MEM_MIB_DEFAULT);
	if (front_default("ISOPOD_NET", "net", "filtered", v, sizeof v, w, sizeof w) < 0)
		return snprintf(why, wsz, "unable to read %s: %s", w, strerror(errno)), -1;
	/* learn is never a default (sh/isopod): the front end refuses it */
	if (strcmp(v, "none") && strcmp(v, "filtered") && strcmp(v, "open"))
		return snprintf(why, wsz, "%s: net '%s': want none, filtered or open", w, EXC(v)), -1;
	snprintf(s->def_net, sizeof s->def_net, "%s", v);
	for (int i = 0; i < 2; i++) {
		if (front_default(keys[i][0], keys[i][1], d[i], v, sizeof v, w, sizeof w) < 0)
			return snprintf(why, wsz, "unable to read %s: %s", w, strerror(errno)), -1;
		if (parse_ll(v, lo[i], hi[i], out[i]) < 0)
			return snprintf(why, wsz, "%s: %s '%s': want %lld..%lld", w, keys[i][1], EXC(v), lo[i],
					hi[i]), -1;
	}
	return 0;
}

/* --backend slurm: `isopod-slurm run` first, with what Slurm must know of
 * the run (its net slot, its stage's nodes, its vCPUs, its time), then the
 * very argv a local run has, which it submits; `stdin` goes through the
 * job's directory (--stdin: its copy there, the front end's
 * --stdin-file stdin, relative to the job's working directory). */
static int build_slurm(struct server *s, struct call *c, json_t *args, json_t **err)
{
	json_t *v;

	if (slurm_refuses(s, c, args, err) < 0 || tool_path(s, c, "isopod-slurm") < 0 || arg(c, "run") < 0 ||
	    (s->slurm_dir && (arg(c, "--dir") < 0 || arg(c, s->slurm_dir) < 0)))
		return -1;
	/* what the node's VM gets is what Slurm reserved: the call's, else
	 * the defaults resolved here (slurm_sizes gives the front end the same) */
	if (arg(c, "--net") < 0 || arg(c, (v = json_object_get(args, "net")) ? json_string_value(v) : s->def_net) < 0 ||
	    argf(c, "--vcpus=%lld", (v = json_object_get(args, "vcpus")) ? (long long)json_integer_value(v) : s->def_vcpus) < 0 ||
	    argf(c, "--mem-mib=%lld",
		 (v = json_object_get(args, "mem_mib")) ? (long long)json_integer_value(v) : s->def_mem_mib) < 0)
		return -1;
	if (((v = json_object_get(args, "stage")) && (arg(c, "--stage") < 0 || arg(c, json_string_value(v)) < 0)) ||
	    ((v = json_object_get(args, "timeout_s")) &&
	     argf(c, "--timeout-s=%lld", (long long)json_integer_value(v)) < 0))
		return -1;
	if (json_object_get(args, "stdin") && arg(c, "--stdin") < 0)
		return -1;
	return arg(c, "--");
}

static int build_run(struct server *s, struct call *c, json_t *args, json_t **err)
{
	static const struct {
		const char *key, *opt;
	} strs[] = { { "cwd", "--cwd" }, { "stage", "--stage" }, { "commit_as", "--commit-as" },
		     { "net", "--net" }, { "name", "--name" } },
	  ints[] = { { "timeout_s", "--timeout-s" }, { "vcpus", "--vcpus" },
		     { "mem_mib", "--mem-mib" }, { "disk_mib", "--disk-mib" } };
	json_t *v;
	size_t i;

	if ((s->slurm && build_slurm(s, c, args, err) < 0) || arg(c, s->front) < 0 || arg(c, "run") < 0 ||
	    arg(c, "--json-only") < 0)
		return -1;
	if (s->slurm && json_object_get(args, "stdin") && (arg(c, "--stdin-file") < 0 || arg(c, "stdin") < 0))
		return -1;
	for (i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if ((v = json_object_get(args, strs[i].key)) &&
		    (arg(c, strs[i].opt) < 0 || arg(c, json_string_value(v)) < 0))
			return -1;
	for (i = 0; i < sizeof ints / sizeof ints[0]; i++)
		if ((v = json_object_get(args, ints[i].key)) &&
		    argf(c, "%s=%lld", ints[i].opt, (long long)json_integer_value(v)) < 0)
			return -1;
	/* --backend slurm: the node's front end gets the sizes and net mode
	 * Slurm was asked for (build_slurm), not the node's own defaults */
	if (s->slurm && ((!json_object_get(args, "net") && (arg(c, "--net") < 0 || arg(c, s->def_net) < 0)) ||
			 (!json_object_get(args, "vcpus") && argf(c, "--vcpus=%lld", s->def_vcpus) < 0) ||
			 (!json_object_get(args, "mem_mib") && argf(c, "--mem-mib=%lld", s->def_mem_mib) < 0)))
		return -1;
	json_array_foreach(json_object_get(args, "allow"), i, v)
		if (arg(c, "--allow") < 0 || arg(c, json_string_value(v)) < 0)
			return -1;
	if ((json_is_true(json_object_get(args, "keep")) && arg(c, "--keep") < 0) ||
	    (json_is_true(json_object_get(args, "cold")) && arg(c, "--cold") < 0) || add_env(c, args) < 0)
		return -1;
	if (build_stdin(s, c, args, err) < 0 ||
	    build_copies(s, c, args, "--copy-in", "--copy-out", err) < 0 || build_prov(c, args) < 0)
		return -1;
	return add_command(c, args, err);
}

static int tool_path(struct server *s, struct call *c, const char *name)
{
	return argf(c, "%s/%s", s->libexec, name);
}

static int build_exec(struct server *s, struct call *c, json_t *args, json_t **err)
{
	json_t *v;

	if (slurm_refuses(s, c, args, err) < 0 || tool_path(s, c, "isopod-exec") < 0 || arg(c, "--vm") < 0 ||
	    arg(c, json_string_value(json_object_get(args, "vm"))) < 0 ||
	    argf(c, "--timeout-ms=%lld", (v = json_object_get(args, "timeout_s")) ?
			(long long)json_integer_value(v) * 1000 : 600000LL) < 0 ||
	    add_env(c, args) < 0)
		return -1;
	if ((v = json_object_get(args, "cwd")) && (arg(c, "--cwd") < 0 || arg(c, json_string_value(v)) < 0))
		return -1;
	if (build_stdin(s, c, args, err) < 0)
		return -1;
	if (c->in_fd >= 0 && (arg(c, "--stdin-file") < 0 || arg(c, "-") < 0))
		return -1;
	if (build_copies(s, c, args, "--copy-in", "--copy-out", err) < 0)
		return -1;
	return add_command(c, args, err);
}

static int build_simple(struct server *s, struct call *c, json_t *args, json_t **err)
{
	const char *n = c->tool->name;
	json_t *v = json_object_get(args, "vm"), *st = json_object_get(args, "stage");
	json_t *e;
	size_t i;

	if (slurm_refuses(s, c, args, err) < 0)
		return -1;
	if (!strcmp(n, "vm_list"))
		return tool_path(s, c, "isopod-vm") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "vm_stop"))
		return tool_path(s, c, "isopod-stop") < 0 ||
		       (json_is_true(json_object_get(args, "force")) && arg(c, "--force") < 0) ||
		       arg(c, "--vm") < 0 || arg(c, json_string_value(v)) < 0 ? -1 : 0;
	if (!strcmp(n, "vm_rm")) {
		if (arg(c, s->front) < 0 || arg(c, "vm") < 0 || arg(c, "rm") < 0 ||
		    (json_is_true(json_object_get(args, "force")) && arg(c, "--force") < 0) ||
		    arg(c, "--") < 0)
			return -1;
		json_array_foreach(json_object_get(args, "vms"), i, e)
			if (arg(c, json_string_value(e)) < 0)
				return -1;
		return 0;
	}
	if (!strcmp(n, "stage_list"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "stage_info"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "info") < 0 ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "stage_rm"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "rm") < 0 ||
		       (json_is_true(json_object_get(args, "recursive")) && arg(c, "--recursive") < 0) ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "stage_flatten"))
		return tool_path(s, c, "isopod-stage") < 0 || arg(c, "flatten") < 0 ||
		       arg(c, "--as") < 0 ||
		       arg(c, json_string_value(json_object_get(args, "as"))) < 0 ||
		       arg(c, "--") < 0 || arg(c, json_string_value(st)) < 0 ? -1 : 0;
	if (!strcmp(n, "warm_list"))
		return tool_path(s, c, "isopod-warm") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "warm_rm")) {
		json_t *keys = json_object_get(args, "keys");
		int orph = json_is_true(json_object_get(args, "orphaned"));
		int all = json_is_true(json_object_get(args, "all"));

		if ((keys ? 1 : 0) + orph + all != 1)
			return jschema_bad(err, "keys", "keys, orphaned or all: give exactly one");
		if (tool_path(s, c, "isopod-warm") < 0 || arg(c, "rm") < 0 ||
		    (orph && arg(c, "--orphaned") < 0) || (all && arg(c, "--all") < 0))
			return -1;
		json_array_foreach(keys, i, e)
			if (arg(c, json_string_value(e)) < 0)
				return -1;
		return 0;
	}
	if (!strcmp(n, "image_list"))
		return tool_path(s, c, "isopod-image") < 0 || arg(c, "ls") < 0 ? -1 : 0;
	if (!strcmp(n, "gc")) {
		if (tool_path(s, c, "isopod-gc") < 0 ||
		    (json_is_true(json_object_get(args, "dry_run")) && arg(c, "--dry-run") < 0) ||
		    (json_is_true(json_object_get(args, "all")) && arg(c, "--all") < 0) ||
		    ((v = json_object_get(args, "keep_last")) &&
		     argf(c, "--keep-last=%lld", (long long)json_integer_value(v)) < 0) ||
		    ((v = json_object_get(args, "older_than")) &&
		     argf(c, "--older-than=%s", json_string_value(v)) < 0))
			return -1;
		return 0;
	}
	if (!strcmp(n, "doctor_status"))
		return arg(c, s->front) < 0 || arg(c, "doctor") < 0 || arg(c, "--quick") < 0 ? -1 : 0;
	return -1;
}

/* Result schemas: every structuredContent has "ok"; a failure is
 * {ok:false, error, error_kind[, exit]} (doc/INTERFACES.md's kinds). */
#define OUT_FAIL "\"ok\":{\"type\":\"boolean\"},\"error\":{\"type\":\"string\"}," \
	"\"error_kind\":{\"type\":\"string\"},\"exit\":{\"type\":\"integer\"}"
#define OUT_OBJ(extra) "{\"type\":\"object\",\"required\":[\"ok\"],\"properties\":{" OUT_FAIL extra "}}"
#define OUT_LIST(key) OUT_OBJ(",\"" key "\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}}")
#define HOSTCOPY(gpat, what) "{\"type\":\"array\",\"maxItems\":32,\"description\":\"" what "\"," \
	"\"items\":{\"type\":\"object\"," \
	"\"additionalProperties\":false,\"required\":[\"host\",\"guest\"],\"properties\":{" \
	"\"host\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,\"description\":\"a host path beneath the I/O root\"}," \
	"\"guest\":{\"type\":\"string\",\"pattern\":\"" gpat "\",\"maxLength\":4000,\"description\":\"an absolute guest path\"}}}}"
#define COPY_IN_DESC "host files or directories copied to guest before the command (guest must not " \
	"exist for a directory); a directory goes whole: modes, mtimes, empty directories, holes, " \
	"symlinks as symlinks (never followed); devices, FIFOs, sockets and hard links skipped " \
	"(copied_in[].skipped)"
#define COPY_OUT_DESC "guest files or directories copied to host after the command: to host, or into " \
	"it under the same name when host is a directory; a guest directory goes whole as tar " \
	"would (symlinks as symlinks, modes masked by the umask), only to a name that does " \
	"not exist (nothing on the host replaced; copied_out[].error says so); skipped " \
	"entries in copied_out[].skipped"
#define CMD_PROPS \
	"\"argv\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":256,\"items\":{\"type\":\"string\",\"maxLength\":131071},\"description\":\"the command as words (no shell)\"}," \
	"\"command\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":131071,\"description\":\"a shell command, run as sh -c COMMAND: a pipeline's status is its last command's unless it starts with set -o pipefail\"}," \
	"\"env\":{\"type\":\"object\",\"maxProperties\":64,\"propertyNames\":{\"pattern\":\"^[A-Za-z_][A-Za-z0-9_]*$\"},\"additionalProperties\":{\"type\":\"string\",\"maxLength\":131000}}," \
	"\"cwd\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000}," \
	"\"stdin\":{\"type\":\"string\",\"maxLength\":1048576,\"description\":\"text for the command's standard input\"}," \
	"\"stdin_file\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4000,\"description\":\"a host file beneath the I/O root for the command's standard input\"}," \
	"\"copy_in\":" HOSTCOPY("^/", COPY_IN_DESC) "," \
	"\"copy_out\":" HOSTCOPY("^/[^:]*$", COPY_OUT_DESC) ","
#define REF "{\"type\":\"string\",\"minLength\":1,\"maxLength\":200}"
/* A stage passed positionally has a label's grammar (label_invalid in
 * lib/stage.c): not starting with '-' or '.' (never an option), no '/', no
 * control bytes; and comes after "--".  Option arguments (stage,
 * commit_as, as) keep REF: the tool's own message says what is wrong. */
#define POSREF "{\"type\":\"string\",\"minLength\":1,\"maxLength\":200," \
	"\"pattern\":\"^[^-./\\u0001-\\u001f\\u007f][^/\\u0001-\\u001f\\u007f]*$\"}"

/* sandbox_run's answer: `isopod run`'s result (isopod(1) JSON RESULT), each
 * member typed, none but ok required (a failed run has only what it got
 * to), members not listed allowed (new ones may be added). */
#define INT_OR_NULL "{\"type\":[\"integer\",\"null\"]}"
#define STR_OR_NULL "{\"type\":[\"string\",\"null\"]}"
#define OBJ "{\"type\":\"object\"}"
#define RUN_OUT \
	",\"vm\":{\"type\":\"object\",\"properties\":{\"id\":" STR_OR_NULL ",\"name\":" STR_OR_NULL "}}," \
	"\"accel\":{\"type\":[\"string\",\"null\"],\"enum\":[\"kvm\",\"tcg\",null]},\"accel_reason\":" STR_OR_NULL "," \
	"\"tsc_khz\":" INT_OR_NULL "," \
	"\"path\":{\"type\":\"string\",\"enum\":[\"cold\",\"warm\",\"snapshot-build\",\"pool\"]}," \
	"\"resume_ms\":" INT_OR_NULL ",\"warm_key\":" STR_OR_NULL "," \
	"\"exit_code\":" INT_OR_NULL ",\"signal\":" INT_OR_NULL ",\"timed_out\":{\"type\":\"boolean\"}," \
	"\"stdout\":{\"type\":\"string\"},\"stderr\":{\"type\":\"string\"}," \
	"\"stdout_bytes\":{\"type\":\"integer\",\"minimum\":0},\"stderr_bytes\":{\"type\":\"integer\",\"minimum\":0}," \
	"\"stdout_truncated\":{\"type\":\"boolean\"},\"stderr_truncated\":{\"type\":\"boolean\"}," \
	"\"stdout_log\":" STR_OR_NULL ",\"stderr_log\":" STR_OR_NULL "," \
	"\"stdout_log_truncated\":{\"type\":\"boolean\"},\"stderr_log_truncated\":{\"type\":\"boolean\"}," \
	"\"console_bytes\":" INT_OR_NULL ",\"console_log_truncated\":{\"type\":\"boolean\"}," \
	"\"copied_in\":{\"type\":\"array\",\"items\":" OBJ "},\"copied_out\":{\"type\":\"array\",\"items\":" OBJ "}," \
	"\"warnings\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}," \
	"\"on\":" OBJ ",\"commit\":" OBJ ",\"provenance\":" OBJ ",\"net\":" OBJ ",\"egress\":" OBJ "," \
	"\"limits\":" OBJ "," \
	"\"proposed_allowlist\":" OBJ "," \
	"\"timings\":{\"type\":\"object\",\"properties\":{\"boot_ms\":" INT_OR_NULL ",\"exec_ms\":" INT_OR_NULL \
	",\"total_ms\":" INT_OR_NULL "}}"

const struct tool mcp_tools[] = {
	{ .name = "sandbox_run", .runner = R_FRONT, .build = build_run,
	  .desc = "Run a command in a fresh isopod microVM (QEMU; egress denied at the host unless "
		  "net/allow say otherwise) and return `isopod run`'s result: exit_code, signal, "
		  "timed_out, stdout/stderr (capped, with exact sizes and log paths), commit, egress, "
		  "warnings, timings.  A command that fails is a normal result (ok true, its "
		  "exit_code); isError means the sandbox failed (error_kind).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{" CMD_PROPS
		"\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400}," 
		"\"vcpus\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1024},"
		"\"mem_mib\":{\"type\":\"integer\",\"minimum\":64,\"maximum\":1048576},"
		"\"disk_mib\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1048576},"
		"\"stage\":" REF ",\"commit_as\":" REF ",\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":63},"
		"\"net\":{\"type\":\"string\",\"enum\":[\"none\",\"filtered\",\"open\"],\"description\":\"none, filtered or open\"},"
		"\"allow\":{\"type\":\"array\",\"maxItems\":64,\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":300}},"
		"\"keep\":{\"type\":\"boolean\"},\"cold\":{\"type\":\"boolean\"},"
		"\"provenance\":{\"type\":\"boolean\",\"description\":\"sign what copy_out brings back "
		"and a commit_as stage (in-toto/SLSA, the host key): the answer's provenance.envelope\"}}}",
	  .out = OUT_OBJ(RUN_OUT) },
	{ .name = "vm_exec", .runner = R_TOOL, .build = build_exec,
	  .desc = "Run another command in a VM kept with sandbox_run keep:true (isopod-exec).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vm\"],\"properties\":{"
		"\"vm\":" REF "," CMD_PROPS
		"\"timeout_s\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":86400}}}",
	  .out = OUT_OBJ(",\"exit_code\":{\"type\":[\"integer\",\"null\"]}") },
	{ .name = "vm_list", .runner = R_TOOL, .build = build_simple, .list_key = "vms",
	  .desc = "The VM records, oldest first, each with whether it is running (isopod vm ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("vms") },
	{ .name = "vm_stop", .runner = R_TOOL, .build = build_simple,
	  .desc = "Stop a VM (isopod-stop).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vm\"],\"properties\":{"
		"\"vm\":" REF ",\"force\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "vm_rm", .runner = R_FRONT, .build = build_simple,
	  .desc = "Remove VM records (isopod vm rm; force stops running ones).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"vms\"],\"properties\":{"
		"\"vms\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":64,\"items\":" REF "},\"force\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ(",\"removed\":{\"type\":\"array\"}") },
	{ .name = "stage_list", .runner = R_TOOL, .build = build_simple, .list_key = "stages",
	  .desc = "The committed stages (isopod-stage ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("stages") },
	{ .name = "stage_info", .runner = R_TOOL, .build = build_simple,
	  .desc = "One stage's record and chain (isopod-stage info).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\"],\"properties\":{\"stage\":" POSREF "}}",
	  .out = OUT_OBJ("") },
	{ .name = "stage_rm", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove a stage (isopod-stage rm).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\"],\"properties\":{"
		"\"stage\":" POSREF ",\"recursive\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "stage_flatten", .runner = R_TOOL, .build = build_simple,
	  .desc = "Flatten a stage's chain into one layer on the same base, as a new stage (isopod-stage flatten).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"stage\",\"as\"],\"properties\":{"
		"\"stage\":" POSREF ",\"as\":" REF "}}",
	  .out = OUT_OBJ("") },
	{ .name = "warm_list", .runner = R_TOOL, .build = build_simple, .list_key = "snapshots",
	  .desc = "The warm snapshots (isopod-warm ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("snapshots") },
	{ .name = "warm_rm", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove warm snapshots: by key, the orphaned ones, or all (isopod-warm rm).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
		"\"keys\":{\"type\":\"array\",\"minItems\":1,\"maxItems\":64,\"items\":{\"type\":\"string\",\"pattern\":\"^[0-9a-f]{64}$\"}},"
		"\"orphaned\":{\"type\":\"boolean\"},\"all\":{\"type\":\"boolean\"}}}",
	  .out = OUT_OBJ("") },
	{ .name = "image_list", .runner = R_TOOL, .build = build_simple, .list_key = "images",
	  .desc = "The kernels and base images (isopod-image ls).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_LIST("images") },
	{ .name = "gc", .runner = R_TOOL, .build = build_simple,
	  .desc = "Remove stopped VM records by the retention policy (the newest 20 and any younger "
		  "than 1h stay, unless keep_last/older_than say otherwise; all: every stopped one), "
		  "reap leaked VMs and locks (isopod-gc).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{"
		"\"dry_run\":{\"type\":\"boolean\"},\"all\":{\"type\":\"boolean\"},\"keep_last\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1000000},"
		"\"older_than\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":32}}}",
	  .out = OUT_OBJ("") },
	{ .name = "doctor_status", .runner = R_FRONT, .build = build_simple,
	  .desc = "What this host can do: accelerator, QEMU, images, and the host's attestation "
		  "(whether it verifies now) when one exists or is required (isopod doctor --quick).",
	  .in = "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{}}",
	  .out = OUT_OBJ(",\"attestation\":{\"type\":\"object\",\"required\":[\"path\",\"required\",\"valid\"],"
			 "\"properties\":{\"path\":{\"type\":\"string\"},\"required\":{\"type\":\"boolean\"},"
			 "\"valid\":{\"type\":\"boolean\"},\"error\":{\"type\":\"string\"}}}") },
};
const size_t mcp_ntools = sizeof mcp_tools / sizeof mcp_tools[0];

/* The result names the client's host paths, not our /proc/<pid>/fd/N:
 * wherever one of the paths we handed on (a hostmap key) starts, up to a
 * byte that cannot continue a name, it becomes the client's path: a
 * copied_in/copied_out entry's "host" (a copy into a directory is
 * /proc/<pid>/fd/N/./NAME: DIR/NAME), its "error", the result's "error"
 * and "warnings" (which name the destination that could not be made).
 * NULL: nothing to change (or out of memory: the text stays as it was). */
static json_t *unmap_text(struct call *c, const char *t)
{
	char *b = NULL;
	size_t bsz = 0;
	json_t *r;
	FILE *o;
	int changed = 0;

	if (!t || !strstr(t, "/proc/") || !(o = open_memstream(&b, &bsz)))
		return NULL;
	while (*t) {
		const char *k, *best = NULL;
		size_t bl = 0;
		json_t *m, *bm = NULL;

		if (!strncmp(t, "/proc/", 6))
			json_object_foreach(c->hostmap, k, m) {
				size_t kl = strlen(k);
				char n;

				/* t[kl] is read only once t holds all of k */
				if (kl <= bl || strncmp(t, k, kl))
					continue;
				n = t[kl];
				if (!(n == '.' || n == '_' || n == '-' || (n >= '0' && n <= '9') ||
				      (n >= 'A' && n <= 'Z') || (n >= 'a' && n <= 'z')))
					best = k, bl = kl, bm = m;
			}
		if (best) {
			fputs(json_string_value(bm), o);
			t += bl;
			changed = 1;
		} else {
			fputc(*t++, o);
		}
	}
	r = fclose(o) == 0 && changed ? json_string(b) : NULL;
	free(b);
	return r;
}

static void unmap_member(struct call *c, json_t *obj, const char *key)
{
	json_t *v = unmap_text(c, json_string_value(json_object_get(obj, key)));

	if (v)
		json_object_set_new(obj, key, v);
}

void mcp_unmap_hosts(struct call *c, json_t *res)
{
	static const char *const lists[] = { "copied_in", "copied_out" };
	json_t *e, *v;
	size_t i;

	for (size_t l = 0; l < 2; l++)
		json_array_foreach(json_object_get(res, lists[l]), i, e) {
			unmap_member(c, e, "host");
			unmap_member(c, e, "error");
		}
	unmap_member(c, res, "error");
	json_array_foreach(json_object_get(res, "warnings"), i, e)
		if ((v = unmap_text(c, json_string_value(e))))
			json_array_set_new(json_object_get(res, "warnings"), i, v);
}
