/* isopod-image - the kernels and base images in the store.
 *
 *   ls              one JSON object per line: every kernel, then every base
 *   build [FLAVOR]  build a base with the images/ scripts and register it
 *   rm SHA256       remove a base no stage and no running VM stands on
 *   where           the store, the build cache, the configuration files
 *   version         {version, protocol}: isopod's and the agent protocol's
 *                   (lib/frame.h), what `isopod version` prints
 *
 * rm reads, decides and deletes under the store lock (locks/store), the
 * lock isopod-commit publishes a stage under: a commit either published
 * its stage before rm looked (rm refuses, naming it) or finds the base
 * gone when it gets the lock (it refuses, and nothing is committed).
 * Never a stage over a missing base. */
#include "config.h"
#include "frame.h"
#include "image.h"
#include "proc.h"
#include "stage.h"
#include "util.h"
#include "vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE \
	"isopod-image ls | isopod-image build [FLAVOR] | isopod-image rm SHA256 | isopod-image where " \
	"| isopod-image version"


/* The names in dir that start with prefix and end with suffix, sorted
 * (as the shell's glob was); dot files never.  New reference. */
static json_t *names(const char *dir, const char *prefix, const char *suffix)
{
	struct dirent **ents;
	json_t *a = json_array();
	size_t pl = strlen(prefix), sl = strlen(suffix);
	int n, i;

	if (!a)
		die(EX_SYS, "out of memory");
	n = scandir(dir, &ents, NULL, alphasort);
	if (n < 0 && errno != ENOENT)
		die(EX_SYS, "unable to read %s:", dir);
	for (i = 0; i < n; i++) {
		const char *s = ents[i]->d_name;
		size_t l = strlen(s);

		if (s[0] != '.' && l > pl + sl && !strncmp(s, prefix, pl) && !strcmp(s + l - sl, suffix))
			json_array_append_new(a, json_string(s));
		free(ents[i]);
	}
	if (n > 0)
		free(ents);
	return a;
}

/* Is the first line of the pointer file `name` under the store's dir sub
 * exactly sha? */
static int is_current(const char *sub, const char *name, const char *sha)
{
	char p[PATH_MAX], line[128];

	return pathn(p, sizeof p, "%s/%s/%s", store_home(), sub, name) == 0 &&
	       read_pointer(p, line, sizeof line) == 0 && !strcmp(line, sha);
}

/* {kind, sha256} + the sidecar's members + more: jq's `+`, which keeps a
 * member's place and takes the later value. */
static json_t *record(const char *kind, const char *sha, json_t *meta)
{
	json_t *o = json_pack("{s:s, s:s}", "kind", kind, "sha256", sha);

	if (!o || (meta && json_object_update(o, meta) < 0))
		die(EX_SYS, "out of memory");
	return o;
}

static void ls_kernels(void)
{
	char dir[PATH_MAX], k[PATH_MAX], p[PATH_MAX];
	json_t *all, *v;
	size_t i;

	pathf(dir, sizeof dir, "%s/kernels", store_home());
	all = names(dir, "", "");
	json_array_foreach(all, i, v) {
		const char *sha = json_string_value(v);
		json_t *meta = NULL, *o;
		struct stat st;

		pathf(k, sizeof k, "%s/%s", dir, sha);
		if (stat(k, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		pathf(p, sizeof p, "%s/meta.json", k);
		if (access(p, F_OK) == 0 && !(meta = json_load_path(p))) {
			warn("skipping unreadable %s", p);
			continue;
		}
		o = record("kernel", sha, meta);
		json_decref(meta);
		/* always there: null on a record from before the stamp (a boot
		 * refuses it, as it refuses another version than ours) */
		if (!json_object_get(o, "agent_protocol"))
			json_object_set_new(o, "agent_protocol", json_null());
		json_object_set_new(o, "path", json_string(k));
		json_object_set_new(o, "current", json_boolean(is_current("kernels", "current", sha)));
		json_emit(o);
		json_decref(o);
	}
	json_decref(all);
}

/* The ls line of base `sha` (its sidecar j), or NULL when the sidecar is
 * unreadable (warned). */
static json_t *base_line(const char *sha, const char *j)
{
	char img[PATH_MAX], cur[128];
	json_t *meta = json_load_path(j), *o, *pins;
	const char *flavor;

	if (!meta) {
		warn("skipping unreadable %s", j);
		return NULL;
	}
	flavor = json_string_value(json_object_get(meta, "flavor"));
	if (!flavor)
		flavor = "base";
	pathf(img, sizeof img, "%s/images/base-%s.img", store_home(), sha);
	o = record("base", sha, meta);
	/* a flavor is part of a file name: never one with a '/' */
	json_object_set_new(o, "path", json_string(img));
	json_object_set_new(o, "current",
			    json_boolean(!strchr(flavor, '/') &&
					 snprintf(cur, sizeof cur, "current-%s", flavor) < (int)sizeof cur &&
					 is_current("images", cur, sha)));
	if (!(pins = stages_on_base(sha)))
		die(EX_SYS, "out of memory");
	json_object_set_new(o, "stages", pins);
	json_decref(meta);
	return o;
}

/* Every base, or (flavor given) only the current one of that flavor, with
 * the members of `extra` (when not NULL) added to that line. */
static void ls_bases(const char *flavor, json_t *extra)
{
	char dir[PATH_MAX], j[PATH_MAX], sha[PATH_MAX];
	json_t *all, *v;
	size_t i;

	pathf(dir, sizeof dir, "%s/images", store_home());
	all = names(dir, "base-", ".json");
	json_array_foreach(all, i, v) {
		const char *f = json_string_value(v), *fl;
		json_t *o;

		snprintf(sha, sizeof sha, "%.*s", (int)(strlen(f) - 5 - 5), f + 5);
		pathf(j, sizeof j, "%s/%s", dir, f);
		if (!(o = base_line(sha, j)))
			continue;
		fl = json_string_value(json_object_get(o, "flavor"));
		if (!flavor || (json_is_true(json_object_get(o, "current")) && fl && !strcmp(fl, flavor))) {
			if (flavor && extra)
				json_object_update(o, extra);
			json_emit(o);
		}
		json_decref(o);
	}
	json_decref(all);
}

/* The images/ scripts: $ISOPOD_IMAGES, else beside the tools (a source
 * tree: bin/../images) or installed (bin/../lib/isopod/images). */
static void images_dir(char *out, size_t sz)
{
	const char *env = getenv("ISOPOD_IMAGES");
	char tools[PATH_MAX], p[PATH_MAX];
	const char *cand[3];
	int i;

	if (proc_tools_dir(tools, sizeof tools) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	cand[0] = env && *env ? env : NULL;
	cand[1] = "../images";
	cand[2] = "../lib/isopod/images";
	for (i = 0; i < 3; i++) {
		if (!cand[i])
			continue;
		if (i == 0)
			pathf(out, sz, "%s", cand[0]);
		else
			pathf(out, sz, "%s/%s", tools, cand[i]);
		if (pathn(p, sizeof p, "%s/build-base", out) == 0 && access(p, R_OK) == 0)
			return;
	}
	die(EX_SYS, "the image build scripts are not found; set ISOPOD_IMAGES");
}

static int cmd_build(int argc, char **argv)
{
	const char *flavor = argc > 0 ? argv[0] : "base";
	char dir[PATH_MAX], script[PATH_MAX], old[65], now[65];
	json_t *extra = NULL;
	int r;

	if (argc > 1)
		die_usage(USAGE, "image build takes one flavor");
	{
		const char *const *f = image_flavors;

		while (*f && strcmp(flavor, *f))
			f++;
		if (!*f)
			die(EX_USAGE, "unknown flavor '%s'; known: base, debian", EXC(flavor));
	}
	/* The base this build may replace: its stages keep working on it,
	 * and the caller learns which they are. */
	pathf(script, sizeof script, "%s/images/current-%s", store_home(), flavor);
	if (read_sha(script, old) < 0)
		old[0] = 0;
	images_dir(dir, sizeof dir);
	/* The scripts talk on stdout; ours is for the JSON line. */
	pathf(script, sizeof script, "%s/build-base", dir);
	{
		char *av[] = { "sh", script, (char *)flavor, NULL };

		if ((r = proc_run(av, 2, 2)) != 0)
			die(EX_SYS, "building the %s image failed%s", flavor,
			    r < 0 ? " (sh could not be started)" : "");
	}
	pathf(script, sizeof script, "%s/register", dir);
	{
		char *av[] = { "sh", script, (char *)store_home(), NULL };

		if ((r = proc_run(av, 2, 2)) != 0)
			die(EX_SYS, "registering the images in %s failed", store_home());
	}
	pathf(script, sizeof script, "%s/images/current-%s", store_home(), flavor);
	if (old[0] && read_sha(script, now) == 0 && strcmp(old, now)) {
		json_t *pins = stages_on_base(old);

		if (!pins)
			die(EX_SYS, "out of memory");
		extra = json_pack("{s:{s:s, s:o}}", "replaced", "sha256", old, "stages", pins);
	}
	ls_bases(flavor, extra);
	json_decref(extra);
	return 0;
}

/* The running VMs whose record names base sha: a space-separated list in
 * out ("" when none).  The records as lib/vm.c reads them; 0, or -1 with a
 * sentence in why when they cannot be read (rm then removes nothing). */
static int vms_on_base(const char *sha, char *out, size_t sz, char *why, size_t wsz)
{
	json_t *all, *v;
	size_t i, used = 0;

	out[0] = 0;
	if (!(all = vm_list(NULL, why, wsz)))
		return -1;
	json_array_foreach(all, i, v) {
		const char *id = json_string_value(json_object_get(v, "id"));
		const char *b = json_string_value(json_object_get(json_object_get(v, "base"), "sha256"));

		if (json_is_true(json_object_get(v, "running")) && b && !strcmp(b, sha) &&
		    used + strlen(id) + 2 < sz)
			used += (size_t)snprintf(out + used, sz - used, "%s%s", used ? " " : "", id);
	}
	json_decref(all);
	return 0;
}

static int cmd_rm(int argc, char **argv)
{
	char img[PATH_MAX], j[PATH_MAX], cur[PATH_MAX], p[PATH_MAX], line[128], running[1024];
	char why[512];
	const char *sha, *flavor;
	json_t *pins, *meta;
	int lk;

	if (argc != 1)
		die_usage(USAGE, "image rm takes one sha256");
	sha = argv[0];
	if (!hex64_ok(sha))
		die(EX_USAGE, "image rm: '%s' is not a sha256", EXC(sha));
	pathf(img, sizeof img, "%s/images/base-%s.img", store_home(), sha);
	pathf(j, sizeof j, "%s/images/base-%s.json", store_home(), sha);
	/* Before the lock too, which creates locks/: an unknown sha leaves an
	 * absent store absent. */
	if (access(img, F_OK) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "no such base image: %s", sha);
	/* Read, decide and delete under the lock a commit publishes under. */
	lk = store_lock();
	if (access(img, F_OK) < 0)
		die(errno == ENOENT ? EX_NOTFOUND : EX_SYS, "no such base image: %s", sha);
	if (!(pins = stages_on_base(sha)))
		die(EX_SYS, "out of memory");
	if (json_array_size(pins)) {
		char list[1024] = "";
		size_t i, used = 0;
		json_t *v;

		json_array_foreach(pins, i, v)
			if (used + strlen(json_string_value(v)) + 2 < sizeof list)
				used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
							 used ? " " : "", json_string_value(v));
		die(EX_CONFLICT, "base %s is pinned by stages %s; remove them first", sha, list);
	}
	json_decref(pins);
	if (vms_on_base(sha, running, sizeof running, why, sizeof why) < 0)
		die(EX_SYS, "image rm: %s", why);
	if (running[0])
		die(EX_CONFLICT, "base %s is in use by running VMs %s; stop them first", sha, running);
	meta = json_load_path(j);
	flavor = json_string_value(json_object_get(meta, "flavor"));
	if (!flavor)
		flavor = "base";
	if (!strchr(flavor, '/') && pathn(cur, sizeof cur, "%s/images/current-%s", store_home(),
					  flavor) == 0 &&
	    read_pointer(cur, line, sizeof line) == 0 && !strcmp(line, sha) && unlink(cur) < 0)
		die(EX_SYS, "unable to remove %s:", cur);
	json_decref(meta);
	if ((unlink(j) < 0 && errno != ENOENT) || unlink(img) < 0)
		die(EX_SYS, "unable to remove base %s:", sha);
	pathf(p, sizeof p, "%s/images", store_home());
	{
		int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (dfd >= 0) {
			fsync(dfd);
			close(dfd);
		}
	}
	close(lk);
	json_emit(json_pack("{s:[s]}", "removed", sha));
	return 0;
}

/* Where the store, the build cache and the configuration files are, as the
 * tools decide it (lib/util.c store_home, lib/config.c): sh/isopod and
 * images/ ask here rather than deciding it a second time. */
static int cmd_where(void)
{
	char cache[PATH_MAX], user[PATH_MAX];

	if (cache_home(cache, sizeof cache) < 0)
		die(EX_USAGE, "the build cache's path is too long (ISOPOD_CACHE, XDG_CACHE_HOME, HOME)");
	if (config_user_file(user, sizeof user) < 0)
		die(EX_USAGE, "the user's configuration file's path is too long "
		    "(ISOPOD_CONFIG, XDG_CONFIG_HOME, HOME)");
	if (strlen(store_home()) >= PATH_MAX)
		die(EX_USAGE, "the store's path is too long (ISOPOD_HOME, HOME)");
	json_emit(json_pack("{s:s, s:s, s:{s:s, s:s}}", "store", store_home(), "cache", cache,
			    "config", "host", config_host_file(), "user", user));
	return 0;
}

int main(int argc, char **argv)
{
	progname = "isopod-image";
	if (argc < 2)
		die_usage(USAGE, "image needs a subcommand");
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		printf("usage: %s\n", USAGE);
		return 0;
	}
	if (!strcmp(argv[1], "ls") || !strcmp(argv[1], "list")) {
		if (argc > 2)
			die_usage(USAGE, "image ls takes no arguments");
		ls_kernels();
		ls_bases(NULL, NULL);
		return 0;
	}
	if (!strcmp(argv[1], "where")) {
		if (argc > 2)
			die_usage(USAGE, "image where takes no arguments");
		return cmd_where();
	}
	if (!strcmp(argv[1], "version")) {
		if (argc > 2)
			die_usage(USAGE, "image version takes no arguments");
		/* the front end's version line: one source, the C headers */
		json_emit(json_pack("{s:s, s:i}", "version", ISOPOD_VERSION, "protocol",
				    (int)ISOPOD_PROTO_VERSION));
		return 0;
	}
	if (!strcmp(argv[1], "build"))
		return cmd_build(argc - 2, argv + 2);
	if (!strcmp(argv[1], "rm") || !strcmp(argv[1], "remove"))
		return cmd_rm(argc - 2, argv + 2);
	die_usage(USAGE, "unknown image subcommand '%s'", EXC(argv[1]));
}
