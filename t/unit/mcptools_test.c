/* mcptools_test.c - unit tests of lib/mcptools.c's host paths: copy_in of
 * a directory beneath the I/O root (held as a descriptor, handed on as
 * /proc/<pid>/fd/N, which a rename of the path cannot redirect), the
 * refusals (a FIFO, a symlink out, a directory as stdin_file, any host
 * path under --backend slurm), and
 * mcp_unmap_hosts putting the client's paths back wherever the tools named
 * ours.  Built by t/run-unit with ASan + UBSan. */
/* At -O1 gcc's range analysis flags snprintf calls the -O2 build proves
 * fit (as the Makefile's asan build says): not this test's subject. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "../../lib/mcptools.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/jschema.c"
#include "../../lib/config.c"
#include "../../lib/execopt.c"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

static const struct tool fake = { .name = "vm_exec" };

static void call_init(struct call *c)
{
	*c = (struct call){ .hostmap = json_object(), .tool = &fake, .in_fd = -1 };
}

static void call_done(struct call *c)
{
	for (int i = 0; i < c->nhold; i++)
		close(c->hold[i]);
	for (int i = 0; i < c->argc; i++)
		free(c->argv[i]);
	free(c->argv);
	json_decref(c->hostmap);
	if (c->in_fd >= 0)
		close(c->in_fd);
}

/* KEY [{host, guest}] (copy_in or copy_out) built for c: 0 or -1, the
 * refusal's message in m. */
static int copy_one(struct server *s, struct call *c, const char *key, const char *host,
		    const char *guest, char *m, size_t msz)
{
	json_t *args = json_pack("{s:[{s:s, s:s}]}", key, "host", host, "guest", guest);
	json_t *err = NULL;
	int r = build_copies(s, c, args, "--copy-in", "--copy-out", &err);

	snprintf(m, msz, "%s", err ? json_string_value(json_object_get(err, "message")) : "");
	json_decref(err);
	json_decref(args);
	return r;
}

/* copy_in [{host, guest:/g}] */
static int copy_in(struct server *s, struct call *c, const char *host, char *m, size_t msz)
{
	return copy_one(s, c, "copy_in", host, "/g", m, msz);
}

/* Whether directory path holds a file named name. */
static int holds(const char *path, const char *name)
{
	DIR *d = opendir(path);
	struct dirent *de;
	int found = 0;

	while (d && (de = readdir(d)))
		found |= !strcmp(de->d_name, name);
	if (d)
		closedir(d);
	return found;
}

static void test_copy_in(void)
{
	char top[] = "/tmp/isopod-mcptools.XXXXXX", p[PATH_MAX + 64], m[PATH_MAX + 64], want[64];
	struct server s = { .root_fd = -1 };
	struct call c;
	struct stat st;

	if (!mkdtemp(top)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(s.root, sizeof s.root, "%s/root", top);
	snprintf(p, sizeof p, "%s/outside", top), mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/outside/secret", top), close(open(p, O_CREAT | O_WRONLY, 0600));
	mkdir(s.root, 0700);
	snprintf(p, sizeof p, "%s/d", s.root), mkdir(p, 0700);
	snprintf(p, sizeof p, "%s/d/mine", s.root), close(open(p, O_CREAT | O_WRONLY, 0600));
	snprintf(p, sizeof p, "%s/d/esc", s.root), symlink("../../outside/secret", p);
	snprintf(p, sizeof p, "%s/out", s.root), symlink("../outside", p);
	snprintf(p, sizeof p, "%s/fifo", s.root), mkfifo(p, 0600);
	snprintf(p, sizeof p, "%s/one", s.root), close(open(p, O_CREAT | O_WRONLY, 0600));
	snprintf(m, sizeof m, "%s/outside/secret", top);
	snprintf(p, sizeof p, "%s/hard", s.root), link(m, p);
	s.root_fd = open(s.root, O_PATH | O_DIRECTORY | O_CLOEXEC);

	call_init(&c);
	ok(copy_in(&s, &c, "d", m, sizeof m) == 0, "copy_in: a directory beneath the root is taken");
	ok(c.nhold == 1 && fstat(c.hold[0], &st) == 0 && S_ISDIR(st.st_mode) &&
		   !(fcntl(c.hold[0], F_GETFL) & O_NONBLOCK),
	   "its descriptor is held: the directory, blocking");
	snprintf(want, sizeof want, "/proc/%d/fd/%d:/g", (int)getpid(), c.nhold ? c.hold[0] : -1);
	ok(c.argc == 2 && !strcmp(c.argv[0], "--copy-in") && !strcmp(c.argv[1], want),
	   "handed on as --copy-in /proc/<pid>/fd/N:/g (%s)", c.argc == 2 ? c.argv[1] : "?");
	snprintf(want, sizeof want, "/proc/%d/fd/%d", (int)getpid(), c.nhold ? c.hold[0] : -1);
	ok(!strcmp(json_string_value(json_object_get(c.hostmap, want)) ?: "", "d"),
	   "the hostmap names it as the client did");
	/* The path swapped for a symlink out of the root after the check:
	 * what the tool opens is still the directory we checked. */
	snprintf(p, sizeof p, "%s/d", s.root);
	snprintf(m, sizeof m, "%s/d2", s.root);
	rename(p, m);
	symlink("../outside", p);
	ok(holds(want, "mine") && !holds(want, "secret"),
	   "/proc/<pid>/fd/N is the directory checked, not what its path became");
	call_done(&c);

	call_init(&c);
	ok(copy_in(&s, &c, "d", m, sizeof m) == -1 && strstr(m, "leaves the I/O root"),
	   "copy_in: a symlink to a directory outside is refused (%s)", m);
	call_done(&c);
	call_init(&c);
	ok_bounded(10, copy_in(&s, &c, "fifo", m, sizeof m) == -1 && strstr(m, "is not a regular file or a directory"),
		   "copy_in: a FIFO is refused (\"is not a regular file or a directory\"), without blocking");
	call_done(&c);
	call_init(&c);
	ok(copy_in(&s, &c, "one", m, sizeof m) == 0 && c.nhold == 1,
	   "copy_in: a regular file with one name is taken (%s)", c.nhold ? "" : m);
	call_done(&c);
	call_init(&c);
	ok(copy_in(&s, &c, "hard", m, sizeof m) == -1 && strstr(m, "a hard link") && c.nhold == 0,
	   "copy_in: a file with a second name (outside the root) is refused (%s)", m);
	call_done(&c);
	{
		json_t *args = json_pack("{s:s}", "stdin_file", "hard"), *err = NULL;

		call_init(&c);
		ok(build_stdin(&s, &c, args, &err) == -1 &&
			   strstr(json_string_value(json_object_get(err, "message")) ?: "",
				  "a hard link") && c.in_fd < 0,
		   "stdin_file: a file with a second name is refused");
		json_decref(err);
		json_decref(args);
		call_done(&c);
	}
	{
		json_t *args = json_pack("{s:[{s:s, s:s}], s:b}", "copy_in", "host", "d2", "guest", "/g",
					 "provenance", 1), *err = NULL;

		call_init(&c);
		ok(build_copies(&s, &c, args, "--copy-in", "--copy-out", &err) == -1 &&
			   strstr(json_string_value(json_object_get(err, "message")) ?: "",
				  "d2 is a directory; provenance signs regular-file inputs only") &&
			   c.nhold == 0,
		   "copy_in of a directory with provenance: refused, nothing held");
		json_decref(err);
		json_decref(args);
		call_done(&c);
	}
	call_init(&c);
	ok(copy_in(&s, &c, "../outside", m, sizeof m) == -1 && strstr(m, "leaves the I/O root"),
	   "copy_in: .. out of the root is refused (%s)", m);
	call_done(&c);
	{
		json_t *args = json_pack("{s:s}", "stdin_file", "d2"), *err = NULL;

		call_init(&c);
		ok(build_stdin(&s, &c, args, &err) == -1 &&
			   strstr(json_string_value(json_object_get(err, "message")) ?: "",
				  "stdin_file: d2 is not a regular file") &&
			   !strstr(json_string_value(json_object_get(err, "message")) ?: "", "directory"),
		   "stdin_file: a directory is refused");
		json_decref(err);
		json_decref(args);
		call_done(&c);
	}
	/* --backend slurm (doc/slurm.md): refused before a path is opened */
	s.slurm = 1;
	for (int i = 0; i < 2; i++) {
		json_t *args = json_pack("{s:[s], s:[{s:s, s:s}]}", "argv", "true",
					 i ? "copy_out" : "copy_in", "host", "d2", "guest", "/g");
		json_t *err = NULL;

		call_init(&c);
		c.tool = &mcp_tools[0];
		ok(!strcmp(c.tool->name, "sandbox_run") && build_run(&s, &c, args, &err) == -1 &&
			   strstr(json_string_value(json_object_get(err, "message")) ?: "",
				  i ? "copy_out: refused under --backend slurm" : "copy_in: refused under --backend slurm") &&
			   c.nhold == 0,
		   "--backend slurm: %s of a directory refused, nothing opened", i ? "copy_out" : "copy_in");
		json_decref(err);
		json_decref(args);
		call_done(&c);
	}
	close(s.root_fd);
	snprintf(p, sizeof p, "rm -rf '%s'", top);
	if (system(p) != 0)
		fprintf(stderr, "# %s failed\n", p);
}

/* copy_out [{guest:/g/f, host}] */
static int copy_out(struct server *s, struct call *c, const char *host, char *m, size_t msz)
{
	return copy_one(s, c, "copy_out", host, "/g/f", m, msz);
}

/* A copy_out destination's last component is never followed, a trailing
 * slash included (the kernel resolves a symlink before one even under
 * O_NOFOLLOW): a symlink to a directory beneath the root is no directory
 * to copy into, spelled "lnk" or "lnk/"; "dest/" is dest itself. */
static void test_copy_out(void)
{
	char top[] = "/tmp/isopod-mcptools.XXXXXX", p[PATH_MAX + 64], m[PATH_MAX + 64], want[64];
	struct server s = { .root_fd = -1 };
	struct stat st, dst;
	struct call c;

	if (!mkdtemp(top)) {
		ok(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(s.root, sizeof s.root, "%s/root", top);
	mkdir(s.root, 0700);
	snprintf(p, sizeof p, "%s/dest", s.root), mkdir(p, 0700);
	stat(p, &dst);
	snprintf(p, sizeof p, "%s/lnk", s.root), symlink("dest", p);
	s.root_fd = open(s.root, O_PATH | O_DIRECTORY | O_CLOEXEC);

	for (int i = 0; i < 3; i++) {
		const char *h = i == 0 ? "lnk/" : i == 1 ? "lnk//" : "lnk";

		call_init(&c);
		ok(copy_out(&s, &c, h, m, sizeof m) == -1 && c.nhold == 0 && c.argc == 0,
		   "copy_out to %s (a symlink to a directory beneath the root): refused, nothing "
		   "held (%s)", h, m);
		call_done(&c);
	}
	call_init(&c);
	ok(copy_out(&s, &c, "dest/", m, sizeof m) == 0 && c.nhold == 1 &&
		   fstat(c.hold[0], &st) == 0 && st.st_ino == dst.st_ino && st.st_dev == dst.st_dev,
	   "copy_out to dest/: the directory itself is held (%s)", m);
	snprintf(want, sizeof want, "/g/f:/proc/%d/fd/%d/.", (int)getpid(), c.nhold ? c.hold[0] : -1);
	ok(c.argc == 2 && !strcmp(c.argv[1], want), "handed on as %s", c.argc == 2 ? c.argv[1] : "?");
	call_done(&c);
	call_init(&c);
	ok(copy_out(&s, &c, "new/", m, sizeof m) == -1 && c.nhold == 0 &&
		   strstr(m, "names no directory"),
	   "copy_out to new/ (absent): refused, not made a file (%s)", m);
	call_done(&c);
	close(s.root_fd);
	snprintf(p, sizeof p, "rm -rf '%s'", top);
	if (system(p) != 0)
		fprintf(stderr, "# %s failed\n", p);
}

static void test_unmap(void)
{
	struct call c;
	json_t *res;
	char *t;

	call_init(&c);
	json_object_set_new(c.hostmap, "/proc/1/fd/7", json_string("tree"));
	json_object_set_new(c.hostmap, "/proc/1/fd/8/.", json_string("into"));
	json_object_set_new(c.hostmap, "/proc/1/fd/9/back", json_string("sub/back"));
	res = json_pack("{s:s, s:[{s:s}], s:[{s:s}, {s:s, s:s}, {s:s}], s:[s, s, s, s]}",
			"error", "--copy-in /proc/1/fd/7: No such file",
			"copied_in", "host", "/proc/1/fd/7",
			"copied_out", "host", "/proc/1/fd/9/back",
			"host", "/proc/1/fd/8/./g", "error", "/proc/1/fd/8/./g: File exists",
			"host", "/proc/1/fd/71/x",
			"warnings", "copy-out /tmp/g failed: /proc/1/fd/8/./g: File exists",
			"/proc/1/fd/9/backup and /proc/1/fd/70", "no path", "/proc/1/fd/7/");
	mcp_unmap_hosts(&c, res);
	t = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
	ok(t && !strcmp(t, "{\"copied_in\":[{\"host\":\"tree\"}],"
			   "\"copied_out\":[{\"host\":\"sub/back\"},"
			   "{\"error\":\"into/g: File exists\",\"host\":\"into/g\"},"
			   "{\"host\":\"/proc/1/fd/71/x\"}],"
			   "\"error\":\"--copy-in tree: No such file\","
			   "\"warnings\":[\"copy-out /tmp/g failed: into/g: File exists\","
			   "\"/proc/1/fd/9/backup and /proc/1/fd/70\",\"no path\",\"tree/\"]}"),
	   "unmap: host, error and warnings name the client's paths; a longer name or "
	   "another descriptor is left (%s)", t ?: "?");
	free(t);
	json_decref(res);
	call_done(&c);
}

int main(void)
{
	test_copy_in();
	test_copy_out();
	test_unmap();
	return tap_done();
}
