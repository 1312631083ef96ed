/* isopod-stage - list, describe, remove and flatten stages.
 *
 *   ls              one JSON object per line, oldest first
 *   info REF        the stage, its chain (root first) and its dependents
 *   rm [-r] REF     refuses while dependents exist (naming each); -r
 *                   removes the dependents first, leaves first
 *   flatten REF --as LABEL
 *                   a new one-layer stage with identical content on the
 *                   same base: the remedy for the depth cap */
#include "stage.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "usage: isopod-stage ls\n" \
	      "       isopod-stage info REF\n" \
	      "       isopod-stage rm [--recursive] REF\n" \
	      "       isopod-stage flatten REF --as LABEL\n"

/* All complete stages, sorted by created then id. */
static json_t *all_stages(void)
{
	char dir[PATH_MAX];
	struct dirent **ents;
	json_t *a = json_array();
	int n;

	pathf(dir, sizeof dir, "%s/stages", store_home());
	n = scandir(dir, &ents, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		json_t *m = strncmp(ents[i]->d_name, "st-", 3) ? NULL : stage_meta(ents[i]->d_name);

		if (m)
			json_array_append_new(a, m);
		free(ents[i]);
	}
	if (n > 0)
		free(ents);
	/* insertion sort by "created" (small n; stable for equal times) */
	for (size_t i = 1; i < json_array_size(a); i++)
		for (size_t j = i; j > 0; j--) {
			const char *x = json_string_value(json_object_get(json_array_get(a, j - 1), "created"));
			const char *y = json_string_value(json_object_get(json_array_get(a, j), "created"));

			if (!x || !y || strcmp(x, y) <= 0)
				break;
			json_t *t = json_incref(json_array_get(a, j - 1));
			json_array_set(a, j - 1, json_array_get(a, j));
			json_array_set_new(a, j, t);
		}
	return a;
}

static json_t *children_of(json_t *all, const char *id)
{
	json_t *c = json_array(), *m;
	size_t i;

	json_array_foreach(all, i, m) {
		const char *p = json_string_value(json_object_get(m, "parent"));

		if (p && !strcmp(p, id))
			json_array_append_new(c, json_string(json_string_value(json_object_get(m, "id"))));
	}
	return c;
}

static void cmd_ls(void)
{
	json_t *all = all_stages(), *m;
	size_t i;

	json_array_foreach(all, i, m) {
		json_object_set_new(m, "dependents",
				    children_of(all, json_string_value(json_object_get(m, "id"))));
		json_emit(m);
	}
}

static void cmd_info(const char *ref)
{
	char id[64], cur[64];
	json_t *all = all_stages(), *m, *chain = json_array();

	stage_resolve(ref, id, sizeof id);
	m = stage_meta(id);
	if (!m)
		die(EX_SYS, "unable to read stage %s:", id);
	snprintf(cur, sizeof cur, "%s", id);
	for (int hops = 0; cur[0] && hops < 64; hops++) {
		json_t *cm = stage_meta(cur);
		const char *p = cm ? json_string_value(json_object_get(cm, "parent")) : NULL;

		json_array_insert_new(chain, 0, json_string(cur));
		snprintf(cur, sizeof cur, "%.63s", p ? p : "");
		json_decref(cm);
	}
	json_object_set_new(m, "layers", chain);
	json_object_set_new(m, "dependents", children_of(all, id));
	json_emit(m);
}

static void remove_stage(const char *id)
{
	char p[PATH_MAX];

	pathf(p, sizeof p, "%s/stages/%s/meta.json", store_home(), id);
	/* meta.json goes first: a half-removed stage is no longer listed. */
	if (unlink(p) < 0 && errno != ENOENT)
		die(EX_SYS, "unable to remove %s:", p);
	pathf(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id);
	if (unlink(p) < 0 && errno != ENOENT)
		die(EX_SYS, "unable to remove %s:", p);
	pathf(p, sizeof p, "%s/stages/%s", store_home(), id);
	if (rmdir(p) < 0)
		die(EX_SYS, "unable to remove %s:", p);
}

static void rm_tree(json_t *all, const char *id, json_t *removed)
{
	json_t *kids = children_of(all, id), *k;
	size_t i;

	json_array_foreach(kids, i, k)
		rm_tree(all, json_string_value(k), removed);
	json_decref(kids);
	remove_stage(id);
	json_array_append_new(removed, json_string(id));
}

static void cmd_rm(const char *ref, int recursive)
{
	char id[64];
	int lk = store_lock();
	json_t *all = all_stages(), *kids, *removed = json_array();

	stage_resolve(ref, id, sizeof id);
	kids = children_of(all, id);
	if (json_array_size(kids) && !recursive) {
		size_t i;
		json_t *k;

		fprintf(stderr, "%s: fatal: stage %s has dependents; remove them first or use "
			"--recursive:", progname, id);
		json_array_foreach(kids, i, k)
			fprintf(stderr, " %s", json_string_value(k));
		fputc('\n', stderr);
		exit(EX_CONFLICT);
	}
	rm_tree(all, id, removed);
	close(lk);
	json_emit(json_pack("{s:o}", "removed", removed));
}

static void cmd_flatten(const char *ref, const char *label)
{
	char id[64], hex[13], stid[64], tmp[PATH_MAX], dst[PATH_MAX], src[PATH_MAX], out[PATH_MAX],
		base[PATH_MAX], rel[PATH_MAX], holder[64], now[32];
	const char *why = label_invalid(label), *bsha;
	json_t *m, *sm;
	struct stat st;
	int64_t t0 = mono_ms();
	int lk;

	if (why)
		die(EX_USAGE, "label %s: %s", EXC(label), why);
	stage_resolve(ref, id, sizeof id);
	stage_verify_chain(id);
	m = stage_meta(id);
	if (!m)
		die(EX_SYS, "unable to read stage %s:", id);
	bsha = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));
	if (label_taken(label, holder, sizeof holder))
		die(EX_CONFLICT, "label %s is taken by stage %s", EXC(label), holder);
	rand_hex(hex, 6);
	snprintf(stid, sizeof stid, "st-%s", hex);
	pathf(tmp, sizeof tmp, "%s/stages/.tmp-%s.%ld", store_home(), stid, (long)getpid());
	pathf(dst, sizeof dst, "%s/stages/%s", store_home(), stid);
	pathf(src, sizeof src, "%s/stages/%s/layer.qcow2", store_home(), id);
	pathf(base, sizeof base, "%s/images/base-%s.img", store_home(), bsha ? bsha : "none");
	pathf(out, sizeof out, "%s/layer.qcow2", tmp);
	pathf(rel, sizeof rel, "../../images/base-%s.img", bsha ? bsha : "none");
	if (mkdir(tmp, 0755) < 0)
		die(EX_SYS, "unable to create %s:", tmp);
	{
		/* -B: the output holds exactly what differs from the base, so
		 * it is one layer on the same base, with the same content. */
		char *qa[] = {"qemu-img", "convert", "-q", "-O", "qcow2", "-B", base, "-F", "raw",
			      src, out, NULL};
		char *ra[] = {"qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "raw", "-b", rel,
			      out, NULL};

		if (run_prog(qa, 0) != 0 || run_prog(ra, 0) != 0 || chmod(out, 0444) < 0) {
			unlink(out);
			rmdir(tmp);
			die(EX_SYS, "flatten of stage %s failed (no space left?); nothing was created",
			    id);
		}
	}
	if (stat(out, &st) < 0)
		die(EX_SYS, "unable to stat %s:", out);
	sm = json_pack("{s:s, s:s, s:s, s:n, s:i, s:O, s:I, s:s, s:s}", "id", stid,
		       "name", label, "label", label, "parent", "depth", 1, "base",
		       json_object_get(m, "base"), "size", (json_int_t)st.st_blocks * 512, "created",
		       iso_now(now, sizeof now), "flattened_from", id);
	json_object_set_new(sm, "flatten_ms", json_integer(mono_ms() - t0));
	pathf(src, sizeof src, "%s/meta.json", tmp);
	lk = store_lock();
	if (label_taken(label, holder, sizeof holder)) {
		unlink(out);
		rmdir(tmp);
		die(EX_CONFLICT, "label %s is taken by stage %s", EXC(label), holder);
	}
	if (json_write_atomic(src, sm) < 0 || rename(tmp, dst) < 0) {
		int e = errno;

		unlink(src);
		unlink(out);
		rmdir(tmp);
		errno = e;
		die(EX_SYS, "unable to complete the flattened stage (nothing was created):");
	}
	close(lk);
	json_emit(json_pack("{s:o}", "stage", sm));
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"recursive", no_argument, 0, 'r'},
					   {"as", required_argument, 0, 'a'},
					   {"help", no_argument, 0, 'h'},
					   {0, 0, 0, 0}};
	const char *as = NULL, *verb;
	int ch, recursive = 0;

	progname = "isopod-stage";
	if (argc < 2)
		die(EX_USAGE, "%s", USAGE);
	verb = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "hr", lo, NULL)) != -1) {
		switch (ch) {
		case 'r': recursive = 1; break;
		case 'a': as = optarg; break;
		case 'h': fputs(USAGE, stdout); return 0;
		default: fputs(USAGE, stderr); return EX_USAGE;
		}
	}
	if (!strcmp(verb, "-h") || !strcmp(verb, "--help")) {
		fputs(USAGE, stdout);
		return 0;
	}
	if (!strcmp(verb, "ls") && optind == argc)
		cmd_ls();
	else if (!strcmp(verb, "info") && argc - optind == 1)
		cmd_info(argv[optind]);
	else if (!strcmp(verb, "rm") && argc - optind == 1)
		cmd_rm(argv[optind], recursive);
	else if (!strcmp(verb, "flatten") && argc - optind == 1 && as)
		cmd_flatten(argv[optind], as);
	else
		die(EX_USAGE, "%s", USAGE);
	return 0;
}
