/* stage.c - the stage store (see stage.h). */
#include "proc.h"
#include "stage.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int stage_max_depth(void)
{
	long long v;
	const char *s = getenv("ISOPOD_MAX_DEPTH");

	if (s && parse_ll(s, 1, 64, &v) == 0)
		return (int)v;
	return STAGE_MAX_DEPTH_DEFAULT;
}

const char *label_invalid(const char *label)
{
	size_t n = strlen(label);

	if (n == 0)
		return "a label cannot be empty";
	if (n > 128)
		return "a label is at most 128 bytes";
	if (strchr(label, '/'))
		return "a label cannot contain '/'";
	if (strchr(label, '\n') || strchr(label, '\r'))
		return "a label cannot contain a newline";
	if (label[0] == '-' || label[0] == '.')
		return "a label cannot start with '-' or '.'";
	return NULL;
}

json_t *stage_meta(const char *id)
{
	char p[PATH_MAX];

	if (strncmp(id, "st-", 3) || strchr(id, '/')) {
		errno = ENOENT;
		return NULL;
	}
	pathf(p, sizeof p, "%s/stages/%s/meta.json", store_home(), id);
	return json_load_path(p);
}

/* Call fn for each complete stage (not .tmp-*). */
static void each_stage(void (*fn)(const char *id, json_t *m, void *arg), void *arg)
{
	char dir[PATH_MAX];
	DIR *d;
	struct dirent *de;

	pathf(dir, sizeof dir, "%s/stages", store_home());
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		json_t *m;

		if (strncmp(de->d_name, "st-", 3))
			continue;
		m = stage_meta(de->d_name);
		if (!m)
			continue;
		fn(de->d_name, m, arg);
		json_decref(m);
	}
	closedir(d);
}

struct findarg {
	const char *ref;
	char exact[64];
	char cand[16][64];
	int n, by_label;
};

static void find_one(const char *id, json_t *m, void *argp)
{
	struct findarg *a = argp;
	const char *name = json_string_value(json_object_get(m, "name"));
	const char *label = json_string_value(json_object_get(m, "label"));
	size_t rl = strlen(a->ref);

	if (!strcmp(id, a->ref)) {
		snprintf(a->exact, sizeof a->exact, "%.63s", id);
		return;
	}
	if (!strncmp(id, a->ref, rl) || (strncmp(a->ref, "st-", 3) && !strncmp(id + 3, a->ref, rl)) ||
	    (name && !strcmp(name, a->ref)) || (label && !strcmp(label, a->ref))) {
		if (a->n < 16)
			snprintf(a->cand[a->n], sizeof a->cand[0], "%.63s", id);
		a->n++;
	}
}

int stage_find(const char *ref, char *id, size_t idsz)
{
	struct findarg a;

	memset(&a, 0, sizeof a);
	a.ref = ref;
	if (!*ref)
		return 0;
	each_stage(find_one, &a);
	if (a.exact[0]) {
		snprintf(id, idsz, "%s", a.exact);
		return 1;
	}
	if (a.n == 0)
		return 0;
	if (a.n > 1) {
		fprintf(stderr, "%s: fatal: stage reference %s is ambiguous; candidates:", progname, ref);
		for (int i = 0; i < a.n && i < 16; i++) {
			json_t *m = stage_meta(a.cand[i]);
			const char *l = m ? json_string_value(json_object_get(m, "label")) : NULL;

			fprintf(stderr, " %s%s%s%s", a.cand[i], l ? " (" : "", l ? l : "", l ? ")" : "");
			json_decref(m);
		}
		fputc('\n', stderr);
		exit(EX_CONFLICT);
	}
	snprintf(id, idsz, "%s", a.cand[0]);
	return 1;
}

void stage_resolve(const char *ref, char *id, size_t idsz)
{
	if (!stage_find(ref, id, idsz))
		die(EX_NOTFOUND, "no such stage: %s", ref);
}

struct labelarg {
	const char *label;
	char *holder;
	size_t hsz;
	int found;
};

static void label_one(const char *id, json_t *m, void *argp)
{
	struct labelarg *a = argp;
	const char *l = json_string_value(json_object_get(m, "label"));

	if (l && !strcmp(l, a->label) && !a->found) {
		a->found = 1;
		snprintf(a->holder, a->hsz, "%s", id);
	}
}

int label_taken(const char *label, char *holder, size_t hsz)
{
	struct labelarg a = {label, holder, hsz, 0};

	each_stage(label_one, &a);
	return a.found;
}

int run_prog(char *const argv[], int quiet)
{
	return proc_run(argv, PROC_NULL, quiet ? PROC_NULL : PROC_INHERIT);
}

int base_current(const char *flavor, char *sha, size_t shasz)
{
	char p[PATH_MAX], buf[128];
	FILE *f;

	pathf(p, sizeof p, "%s/images/current-%s", store_home(), flavor);
	f = fopen(p, "re");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof buf, f)) {
		fclose(f);
		errno = EINVAL;
		return -1;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	if (strlen(buf) != 64) {
		errno = EINVAL;
		return -1;
	}
	snprintf(sha, shasz, "%s", buf);
	return 0;
}

static void verify_layer(const char *id, const char *path)
{
	unsigned char magic[4];
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *argv[] = {"qemu-img", "check", "-q", "-f", "qcow2", (char *)path, NULL};

	if (fd < 0)
		die(EX_SYS, "stage %s is broken: its layer %s:", id, path);
	if (fstat(fd, &st) < 0 || read(fd, magic, 4) != 4 || memcmp(magic, "QFI\xfb", 4)) {
		close(fd);
		die(EX_SYS, "stage %s is broken: its layer %s is not a qcow2 image", id, path);
	}
	close(fd);
	if (run_prog(argv, 1) != 0)
		die(EX_SYS, "stage %s is broken: its layer %s fails `qemu-img check` "
		    "(truncated or corrupt)", id, path);
}

void stage_verify_chain(const char *id)
{
	char cur[64], p[PATH_MAX];
	int hops = 0;

	snprintf(cur, sizeof cur, "%s", id);
	for (;;) {
		json_t *m = stage_meta(cur);
		const char *parent, *bsha;

		if (!m)
			die(EX_SYS, "stage %s is broken: its meta.json is missing or unreadable", cur);
		pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), cur);
		verify_layer(cur, p);
		parent = json_string_value(json_object_get(m, "parent"));
		if (!parent) {
			bsha = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));
			pathf(p, sizeof p, "%s/images/base-%s.img", store_home(), bsha ? bsha : "none");
			json_decref(m);
			if (access(p, R_OK) < 0)
				die(EX_SYS, "stage %s is broken: its base image %s:", cur, p);
			return;
		}
		snprintf(p, sizeof p, "%.63s", parent);
		json_decref(m);
		snprintf(cur, sizeof cur, "%.63s", p);
		if (++hops > 64)
			die(EX_SYS, "stage %s: the chain is longer than 64 (a loop?)", id);
	}
}
