/* isopod-slurm - what this host offers Slurm: its network slots per mode as
 * generic resources (GRES), and the stages and bases of its store as node
 * features; `refresh` puts the features on the node with scontrol.
 *
 * Slurm never learns isopod's slots by itself: a site that lets Slurm place
 * networked runs on a host must tell slurmctld how many slots of each mode
 * the host has, or it schedules more runs than slots and the extra ones
 * fail with "all N filtered network slots busy" (exit 102) instead of
 * waiting in Slurm's queue.  The counts come from the taps isopod-netsetup
 * left in this network namespace (their ifalias names the mode, lib/net.c),
 * so the fragment printed here is the host as it is, not as configured. */

#include "net.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE "isopod-slurm conf [--node NAME] | refresh [--node NAME] [--dry-run]"

/* The GRES names, one per slot mode ("learn" runs on a filtered slot). */
static const char *const gres_modes[] = { "filtered", "open" };
#define NMODES (sizeof gres_modes / sizeof gres_modes[0])

/* A Slurm node name: what NodeName= takes without quoting, and short
 * enough for one argument.  1 valid, 0 not. */
static int node_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 64 || s[0] == '-')
		return 0;
	return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* This host's node name: --node, else the host name up to its first dot
 * (Slurm's own default for slurmd). */
static void node_name(char *out, size_t sz, const char *opt)
{
	char h[256];
	const char *src = opt;

	if (!src) {
		if (gethostname(h, sizeof h) < 0)
			die(EX_SYS, "gethostname:");
		h[sizeof h - 1] = '\0';
		h[strcspn(h, ".")] = '\0';
		src = h;
	}
	if (!node_ok(src))
		die(EX_USAGE, "node name '%s': want 1-64 of [A-Za-z0-9._-], not starting with '-'", EXC(src));
	snprintf(out, sz, "%.64s", src);
}

/* Slots per mode, from the taps present: {"isopod_filtered": N, "isopod_open": M}. */
static json_t *gres_counts(void)
{
	int n = net_ntaps(), c[NMODES] = { 0 };
	char m[16], name[32];
	json_t *o = json_object();

	for (int k = 0; k < n; k++) {
		net_tap_mode(k, m, sizeof m);
		for (size_t i = 0; i < NMODES; i++)
			c[i] += !strcmp(m, gres_modes[i]);
	}
	for (size_t i = 0; i < NMODES; i++) {
		snprintf(name, sizeof name, "isopod_%s", gres_modes[i]);
		json_object_set_new(o, name, json_integer(c[i]));
	}
	return o;
}

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* a's strings, sorted, as a new array (a is released). */
static json_t *sorted(json_t *a)
{
	size_t n = json_array_size(a);
	const char **v = calloc(n ? n : 1, sizeof *v);
	json_t *o = json_array();

	if (!v)
		die(EX_SYS, "out of memory");
	for (size_t i = 0; i < n; i++)
		v[i] = json_string_value(json_array_get(a, i));
	qsort(v, n, sizeof *v, cmp_str);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(o, json_string(v[i]));
	free(v);
	json_decref(a);
	return o;
}

/* The features of the store: isopod_st_<12 hex> for each stage,
 * isopod_base_<64 hex> for each base image.  Slurm's constraint parser
 * reserves & | , * [ ] ( ) : ! and more, so a content address is spelled
 * in [a-z0-9_] only (stage ids lose their '-').  Sorted, so that two
 * refreshes of the same store say the same thing. */
static json_t *store_features(void)
{
	char p[PATH_MAX], f[96];
	json_t *a = json_array();
	struct dirent *e;
	DIR *d;

	pathf(p, sizeof p, "%s/stages", store_home());
	if ((d = opendir(p))) {
		while ((e = readdir(d))) {
			char mp[PATH_MAX];

			if (!id_stage_ok(e->d_name))
				continue;
			pathf(mp, sizeof mp, "%s/%s/meta.json", p, e->d_name);
			if (access(mp, F_OK) < 0) /* a stage being removed or landed */
				continue;
			snprintf(f, sizeof f, "isopod_st_%s", e->d_name + 3);
			json_array_append_new(a, json_string(f));
		}
		closedir(d);
	} else if (errno != ENOENT) {
		die(EX_SYS, "unable to read %s:", p);
	}
	pathf(p, sizeof p, "%s/images", store_home());
	if ((d = opendir(p))) {
		while ((e = readdir(d))) {
			size_t n = strlen(e->d_name);

			/* base-<sha>.img: the image itself, not its .json */
			if (n != 5 + 64 + 4 || strncmp(e->d_name, "base-", 5) ||
			    strcmp(e->d_name + 69, ".img") || hex_span(e->d_name + 5) != 64)
				continue;
			snprintf(f, sizeof f, "isopod_base_%.64s", e->d_name + 5);
			json_array_append_new(a, json_string(f));
		}
		closedir(d);
	} else if (errno != ENOENT) {
		die(EX_SYS, "unable to read %s:", p);
	}
	return sorted(a);
}

/* The array's strings joined with ',' (Slurm's feature list). */
static char *joined(json_t *a)
{
	size_t n = json_array_size(a), len = 1;
	char *s;

	for (size_t i = 0; i < n; i++)
		len += strlen(json_string_value(json_array_get(a, i))) + 1;
	if (!(s = malloc(len)))
		die(EX_SYS, "out of memory");
	s[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (i)
			strcat(s, ",");
		strcat(s, json_string_value(json_array_get(a, i)));
	}
	return s;
}

static json_t *cmd_conf(const char *node)
{
	json_t *gres = gres_counts(), *feat = store_features(), *v;
	char *fl = joined(feat), *sc = NULL, *gc = NULL, *types = NULL, *line, *gt;
	const char *k;
	json_t *o;

	/* gres has one member per slot mode, so sc, gc and types are set */
	json_object_foreach(gres, k, v) {
		char *t;

		if (asprintf(&t, "%s%s%s:%lld", sc ? sc : "", sc ? "," : "", k,
			     json_integer_value(v)) < 0)
			die(EX_SYS, "out of memory");
		free(sc);
		sc = t;
		if (asprintf(&t, "%sNodeName=%s Name=%s Count=%lld\n", gc ? gc : "", node, k,
			     json_integer_value(v)) < 0)
			die(EX_SYS, "out of memory");
		free(gc);
		gc = t;
		if (asprintf(&t, "%s%s%s", types ? types : "", types ? "," : "", k) < 0)
			die(EX_SYS, "out of memory");
		free(types);
		types = t;
	}
	if (asprintf(&line, "NodeName=%s Gres=%s%s%s", node, sc, *fl ? " Feature=" : "", fl) < 0 ||
	    asprintf(&gt, "GresTypes=%s", types) < 0)
		die(EX_SYS, "out of memory");
	o = json_pack("{s:s, s:o, s:o, s:s, s:s, s:s}", "node", node, "gres", gres, "features", feat,
		      "gres_types", gt, "slurm_conf", line, "gres_conf", gc);
	if (!o)
		die(EX_SYS, "unable to build the JSON");
	free(line);
	free(gt);
	free(sc);
	free(gc);
	free(types);
	free(fl);
	return o;
}

/* scontrol update NodeName=NODE AvailableFeatures=F ActiveFeatures=F:
 * both lists, so a constraint on a stage (an active feature) is met on
 * exactly the nodes that hold it now.  scontrol is $ISOPOD_SCONTROL or the
 * one in PATH; its output goes to our stderr (stdout is JSON only). */
static json_t *cmd_refresh(const char *node, int dry)
{
	json_t *feat = store_features();
	char *fl = joined(feat), *a1, *a2, *a3;
	const char *sc = getenv("ISOPOD_SCONTROL");
	json_t *o;

	if (asprintf(&a1, "NodeName=%s", node) < 0 ||
	    asprintf(&a2, "AvailableFeatures=%s", fl) < 0 ||
	    asprintf(&a3, "ActiveFeatures=%s", fl) < 0)
		die(EX_SYS, "out of memory");
	{
		char *const av[] = { (char *)(sc && *sc ? sc : "scontrol"), "update", a1, a2, a3, NULL };
		int st;

		o = json_pack("{s:s, s:o, s:[sssss]}", "node", node, "features", feat, "command",
			      av[0], av[1], av[2], av[3], av[4]);
		if (!o)
			die(EX_SYS, "unable to build the JSON");
		if (!dry) {
			st = proc_run(av, 2, 2);
			if (st < 0)
				die(EX_SYS, "unable to start %s:", av[0]);
			if (st)
				die(EX_SYS, "%s update NodeName=%s failed (exit %d)", av[0], node, st);
		}
		json_object_set_new(o, "updated", json_boolean(!dry));
	}
	free(a1);
	free(a2);
	free(a3);
	free(fl);
	return o;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "node", required_argument, NULL, 'n' },
		{ "dry-run", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *opt_node = NULL, *verb;
	char node[65];
	json_t *out;
	int c, dry = 0;

	progname = "isopod-slurm";
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-')
		die(EX_USAGE, "usage: %s", USAGE);
	verb = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			opt_node = optarg;
			break;
		case 'd':
			dry = 1;
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die(EX_USAGE, "usage: %s", USAGE);
		}
	}
	if (optind != argc)
		die(EX_USAGE, "unexpected operand '%s'\nusage: %s", EXC(argv[optind]), USAGE);
	if (strcmp(verb, "conf") && strcmp(verb, "refresh"))
		die(EX_USAGE, "unknown verb '%s'\nusage: %s", EXC(verb), USAGE);
	if (dry && !strcmp(verb, "conf"))
		die(EX_USAGE, "--dry-run is refresh's\nusage: %s", USAGE);
	node_name(node, sizeof node, opt_node);
	out = !strcmp(verb, "conf") ? cmd_conf(node) : cmd_refresh(node, dry);
	json_emit(out);
	json_decref(out);
	return 0;
}
