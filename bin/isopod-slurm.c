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

#include "attcheck.h"
#include "job.h"
#include "net.h"
#include "proc.h"
#include "ranges.h"
#include "slurmjob.h"
#include "stage.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-slurm conf [--node NAME] [--attestation FILE] | " \
	      "refresh [--node NAME] [--attestation FILE] [--dry-run] | feature REF | " \
	      "run [--dir DIR] [--net MODE] [--stage REF] [--vcpus N] [--mem-mib N] [--timeout-s N] [--stdin] -- ARGV..."

/* run: the front end's own budget when no --timeout-s is given (isopod(1)) */
#define RUN_BUDGET_DEFAULT_S 600
/* run: past its budget (from the submission: the caller waits in the
 * queue too, unlike the runner's) by this much the job is cancelled; below
 * isopod-mcp's own grace (60 s), which then stops us */
#define RUN_GRACE_S 30
#define RUN_LOG_MAX 65536 /* the job's stderr.log relayed to ours: its tail */

/* The GRES names, one per slot mode ("learn" runs on a filtered slot). */
static const char *const gres_modes[] = { "filtered", "open" };
#define NMODES (sizeof gres_modes / sizeof gres_modes[0])

/* A Slurm node name: what NodeName= takes without quoting, and short
 * enough for one argument; one node, never many: no nodeset ("a[1-4]",
 * "a,b": no '[' or ','), not "ALL", which scontrol update takes as every
 * node (any case).  1 valid, 0 not. */
static int node_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 64 || s[0] == '-' || !strcasecmp(s, "ALL"))
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
		die(EX_USAGE, "node name '%s': want one node: 1-64 of [A-Za-z0-9._-], not starting "
		    "with '-', not ALL", EXC(src));
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

/* Stage id st-<hex>'s feature, isopod_st_<hex>: the one spelling of it,
 * for the store's list and for `feature`. */
static void stage_feature(const char *id, char *f, size_t fsz)
{
	snprintf(f, fsz, "isopod_st_%s", id + 3);
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
			stage_feature(e->d_name, f, sizeof f);
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

/* The host's gate: does it require an attestation (the host config's
 * require_attestation, as isopod-mcp reads it) and does that verify
 * (isopod-attest verify, the one beside our tools, as isopod-runner runs
 * it)?  A bad config line: 100; the config unreadable: 111. */
struct gate {
	int required, valid;
	char why[1024];
};

static void gate_check(const char *att, struct gate *g)
{
	char tool[PATH_MAX], dir[PATH_MAX];
	struct attcheck a = { .tool = tool, .att = att };
	int rc = attcheck_required(ranges_config_path(), &g->required, g->why, sizeof g->why);

	if (rc < 0)
		die(rc == -1 ? EX_USAGE : EX_SYS, "%s", g->why);
	g->valid = 1;
	g->why[0] = '\0';
	if (!g->required)
		return;
	if (proc_tools_dir(dir, sizeof dir) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	pathf(tool, sizeof tool, "%s/isopod-attest", dir);
	g->valid = attcheck_verify(&a, NULL, g->why, sizeof g->why);
}

static json_t *gate_json(const struct gate *g, const char *att)
{
	return g->required ? json_pack("{s:b, s:s, s:b, s:s*}", "required", 1, "path", att, "valid",
				       g->valid, "why", g->valid ? NULL : g->why)
			   : json_pack("{s:b}", "required", 0);
}

/* conf: refused (111) when the host requires an attestation and it does
 * not verify, rather than a fragment that offers its slots. */
static json_t *cmd_conf(const char *node, const char *att)
{
	json_t *gres, *feat, *v;
	char *fl, *sc = NULL, *gc = NULL, *types = NULL, *line, *gt;
	const char *k;
	struct gate g = { 0 };
	json_t *o;

	gate_check(att, &g);
	if (!g.valid)
		die(EX_SYS, "refusing: this host requires an attestation: %s", g.why);
	gres = gres_counts();
	feat = store_features();
	fl = joined(feat);

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
	o = json_pack("{s:s, s:o, s:o, s:s, s:s, s:s, s:o}", "node", node, "gres", gres, "features",
		      feat, "gres_types", gt, "slurm_conf", line, "gres_conf", gc, "attestation",
		      gate_json(&g, att));
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

#define SCONTROL_MAX (1 << 20) /* what we read of scontrol's stdout */

/* scontrol ARGS... ($ISOPOD_SCONTROL or the one in PATH): its stderr is
 * ours; its stdout goes to out when not NULL, else to our stderr (stdout
 * is JSON only).  Bounded as lib/slurmjob.c bounds its Slurm commands
 * (SJOB_CMD_MS, then SIGKILL to its process group): a refresh in an
 * Epilog or a health check must not hang on a slurmctld that does not
 * answer.  Failing to start, failing, hanging, or printing more than
 * SCONTROL_MAX bytes: 111. */
static void scontrol(char *const av[], char **out)
{
	struct proc_spec ps = PROC_SPEC(av);
	char cmd[256] = "", *b = malloc(SCONTROL_MAX + 1), *conf[2];
	size_t off = 0, n = 0;
	int st, e;

	if (!b)
		die(EX_SYS, "unable to read what %s printed:", av[0]);
	ps.out = PROC_PIPE, ps.err = 2;
	ps.setsid = 1; /* killed as a group at the deadline */
	sjob_env(&ps, conf); /* no SLURM_CLUSTERS, SCONTROL_* of the caller's: this cluster, as asked */
	st = proc_capture_within(&ps, b, SCONTROL_MAX + 1, &n, SJOB_CMD_MS);
	e = errno;
	if (out) {
		*out = b;
	} else {
		if (st >= 0 && n)
			fprintf(stderr, "%s", b);
		free(b);
	}
	for (size_t i = 0; av[i] && (i < 3 || !strchr(av[i], '=')) && off < sizeof cmd; i++)
		off += (size_t)snprintf(cmd + off, sizeof cmd - off, "%s%s", i ? " " : "", av[i]);
	if (st < 0 && e == ETIMEDOUT)
		die(EX_SYS, "%s did not end within %d s: killed", EXC(cmd), SJOB_CMD_MS / 1000);
	errno = e;
	if (st < 0)
		die(EX_SYS, "unable to start %s:", av[0]);
	if (st)
		die(EX_SYS, "%s failed (exit %d)", EXC(cmd), st);
	if (n > SCONTROL_MAX)
		die(EX_SYS, "%s printed more than %d bytes", EXC(cmd), SCONTROL_MAX);
}

/* What slurmctld says of the node (`scontrol -o show node NODE`, one line
 * per node): its features other than ours (the site's, e.g. Feature=intel
 * in slurm.conf), which a refresh keeps, and whether it is drained and by
 * whom (a Reason of ours starts "isopod:"). */
struct node_now {
	json_t *avail, *active; /* the site's features, in Slurm's order */
	int drained, ours;
};

/* The value of " KEY=" in line, to the next space; NULL if absent. */
static char *field(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	return p ? strndup(p + strlen(key), strcspn(p + strlen(key), " \n")) : NULL;
}

/* The features of list v (Slurm's "a,b" or "(null)") not named isopod_*. */
static json_t *site_features(char *v)
{
	json_t *a = json_array();
	char *sv = NULL;

	for (char *t = v ? strtok_r(v, ",", &sv) : NULL; t; t = strtok_r(NULL, ",", &sv))
		if (strcmp(t, "(null)") && strncmp(t, "isopod_", 7))
			json_array_append_new(a, json_string(t));
	free(v);
	return a;
}

static void node_read(const char *sc, const char *node, struct node_now *n)
{
	char *const av[] = { (char *)sc, "-o", "show", "node", (char *)node, NULL };
	char *out, *st, want[80];
	const char *r;
	size_t lines = 0;

	scontrol(av, &out);
	for (const char *p = out; *p; lines++) {
		size_t k = strcspn(p, "\n");

		p += k + (p[k] == '\n');
	}
	/* a name Slurm expands (a nodeset, ALL) is refused before this; a
	 * name that is not exactly this one node is refused here */
	snprintf(want, sizeof want, "NodeName=%s ", node);
	if (lines != 1 || strncmp(out, want, strlen(want)))
		die(EX_USAGE, "node name '%s': scontrol -o show node gives %zu node(s), not that one",
		    node, lines);
	n->avail = site_features(field(out, " AvailableFeatures="));
	n->active = site_features(field(out, " ActiveFeatures="));
	st = field(out, " State=");
	n->drained = st && strstr(st, "DRAIN");
	r = strstr(out, " Reason=");
	n->ours = r && !strncmp(r + 8, "isopod:", 7);
	free(st);
	free(out);
}

/* a's strings then b's, joined with ',' (a and b are released). */
static char *merged(json_t *a, json_t *b)
{
	char *s;

	json_array_extend(a, b);
	s = joined(a);
	json_decref(a);
	return s;
}

/* The arguments of scontrol update NodeName=NODE State=DRAIN
 * Reason="isopod: WHY" (WHY without the attestation's path, cut to fit a
 * reason, printable ASCII only), or State=RESUME (*a3 NULL). */
static void state_args(const char *why, char **a2, char **a3)
{
	const char *t = why ? strstr(why, " does not verify: ") : NULL;
	char r[160];

	if (t)
		snprintf(r, sizeof r, "Reason=isopod: attestation does not verify: %.100s", t + 18);
	else
		snprintf(r, sizeof r, "Reason=isopod: %.140s", why ? why : "");
	for (size_t i = 0; r[i]; i++)
		if (r[i] < 0x20 || r[i] > 0x7e)
			r[i] = '?';
	*a3 = NULL;
	if (asprintf(a2, "State=%s", why ? "DRAIN" : "RESUME") < 0 || (why && !(*a3 = strdup(r))))
		die(EX_SYS, "out of memory");
}

/* argv (NULL-ended) as a JSON array. */
static json_t *argv_json(char *const av[])
{
	json_t *a = json_array();

	for (size_t i = 0; av[i]; i++)
		json_array_append_new(a, json_string(av[i]));
	return a;
}

/* refresh: the gate first, then the node's state and features.  A host
 * whose attestation fails is drained (unless someone else drained it: their
 * reason stays), first, so that no feature update can fail before it; a
 * node drained by us is resumed once the gate passes, last.  The features:
 * AvailableFeatures= and ActiveFeatures= the node's own (not isopod_*) and
 * the store's, so a constraint on a stage (an active feature) is met on
 * exactly the nodes that hold it now, and the site's features stay. */
static json_t *cmd_refresh(const char *node, const char *att, int dry)
{
	json_t *feat = store_features(), *o, *sj = json_null();
	const char *env = getenv("ISOPOD_SCONTROL"), *sc = env && *env ? env : "scontrol";
	char *a1, *a2, *a3, *s2 = NULL, *s3 = NULL, *fa, *fb;
	struct node_now n = { 0 };
	struct gate g = { 0 };
	int drain, resume;

	gate_check(att, &g);
	node_read(sc, node, &n);
	drain = !g.valid && (!n.drained || n.ours);
	resume = g.valid && n.drained && n.ours;
	if (!g.valid && !drain)
		warn("node %s is drained by someone else: its reason stays", node);
	fa = merged(n.avail, json_deep_copy(feat));
	fb = merged(n.active, json_deep_copy(feat));
	if (asprintf(&a1, "NodeName=%s", node) < 0 || asprintf(&a2, "AvailableFeatures=%s", fa) < 0 ||
	    asprintf(&a3, "ActiveFeatures=%s", fb) < 0)
		die(EX_SYS, "out of memory");
	if (drain || resume)
		state_args(drain ? g.why : NULL, &s2, &s3);
	{
		char *const av[] = { (char *)sc, "update", a1, a2, a3, NULL };
		char *const sv[] = { (char *)sc, "update", a1, s2, s3, NULL };

		if (s2) {
			json_decref(sj);
			sj = argv_json(sv);
		}
		if (!dry && drain)
			scontrol(sv, NULL);
		if (!dry)
			scontrol(av, NULL);
		if (!dry && resume)
			scontrol(sv, NULL);
		o = json_pack("{s:s, s:o, s:[sssss], s:o, s:o, s:b, s:s*, s:b, s:b}", "node", node,
			      "features", feat, "command", av[0], av[1], av[2], av[3], av[4],
			      "state_command", sj, "attestation", gate_json(&g, att), "drained",
			      !g.valid, "why", g.valid ? NULL : g.why, "resumed", resume, "updated", !dry);
	}
	if (!o)
		die(EX_SYS, "unable to build the JSON");
	free(a1);
	free(a2);
	free(a3);
	free(s2);
	free(s3);
	free(fa);
	free(fb);
	return o;
}

/* feature REF: the feature of stage REF of this store (id, id prefix,
 * name or label, as isopod-stage resolves it), so that a site's job
 * script can ask `--prefer` or `-C` for it without knowing how
 * isopod-slurm spells it.  No such stage: 101; ambiguous or a bad REF: as
 * stage_resolve says (100). */
static json_t *cmd_feature(const char *ref)
{
	char id[64], f[96], why[DIAG_MAX];
	json_t *o;

	if (stage_resolve(ref, id, sizeof id, why, sizeof why) < 0)
		die(exit_code_of(errno), "%s", why);
	stage_feature(id, f, sizeof f);
	if (!(o = json_pack("{s:s, s:s}", "stage", id, "feature", f)))
		die(EX_SYS, "unable to build the JSON");
	return o;
}


/* ---- run: one `isopod run` handed to Slurm -------------------------------- */

struct run_opts {
	const char *dir, *net, *stage;
	int vcpus, use_stdin;
	long long timeout_s, mem_mib;
};

/* Our stdin (isopod-mcp's memfd of the call's `stdin`) into the job's
 * directory as "stdin": the argv's --stdin-file names it relative to the
 * job's working directory (sbatch --chdir), since a node never sees our
 * descriptors.  Copied as it comes, 64 KiB at a time (no buffer of the
 * whole, no length cut).  0, or -1 with errno (the caller removes the
 * directory before it dies). */
static int run_stdin(const char *jd)
{
	char p[PATH_MAX], b[1 << 16];
	ssize_t k;
	int fd, e;

	if (pathn(p, sizeof p, "%s/stdin", jd) < 0 ||
	    (fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0)
		return -1;
	while ((k = read(0, b, sizeof b)) != 0) {
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 || write_all(fd, b, (size_t)k) < 0)
			break;
	}
	e = k == 0 ? 0 : errno;
	if (close(fd) < 0 && !e)
		e = errno;
	errno = e;
	return e ? -1 : 0;
}

/* The tail of the job's stderr.log (isopod run's diagnostics, written by
 * the node) to our stderr: the caller's log of it (isopod-mcp relays it). */
static void run_relay_log(const char *jd)
{
	char p[PATH_MAX], b[4096];
	struct stat st;
	ssize_t k;
	int fd;

	pathf(p, sizeof p, "%s/stderr.log", jd);
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	if (fstat(fd, &st) == 0 && st.st_size > RUN_LOG_MAX)
		lseek(fd, st.st_size - RUN_LOG_MAX, SEEK_SET);
	while ((k = read(fd, b, sizeof b)) > 0)
		if (write_all(2, b, (size_t)k) < 0)
			break;
	close(fd);
}

/* The job's directory and what Slurm left in it, once the result is
 * printed: removed, failure or not.  What it held is the answer (stdout)
 * and our stderr (stderr.log, relayed first): kept, it would pile up, one
 * per cancelled call, with nobody to read it. */
static void run_cleanup(const char *jd)
{
	static const char *const files[] = { "slurm.sh", "stdout", "stderr.log", "stdin", "state.json" };
	char p[PATH_MAX];

	for (size_t i = 0; i < sizeof files / sizeof *files; i++)
		if (pathn(p, sizeof p, "%s/%s", jd, files[i]) == 0)
			unlink(p);
	if (rmdir(jd) < 0)
		warn("unable to remove %s: %s", jd, strerror(errno));
}

/* run: sbatch of ARGV (lib/slurmjob.c, as isopod-runner --backend slurm
 * does), watched until Slurm says it ended; the result on stdout is the
 * front end's own with "slurm" added, or a failure saying what Slurm did
 * (sjob_result).  SIGTERM, SIGINT, SIGHUP or the budget: scancel first. */
static int cmd_run(const struct run_opts *o, char **av)
{
	char jd[PATH_MAX], st[PATH_MAX], feat[96], id[64], why[1024];
	long long budget = o->timeout_s ? o->timeout_s : RUN_BUDGET_DEFAULT_S;
	/* isopod-mcp's progress descriptor: Slurm's state of the job, each change */
	struct sjob j = { .argv = av, .net = o->net, .cpus = o->vcpus, .mem_mib = o->mem_mib, .cancel_returns = 1,
			  .time_s = o->timeout_s ? o->timeout_s + RUN_GRACE_S : 0, .progress_fd = progress_fd() };
	struct sjob_state s = { .exit = -1 };
	json_t *res, *state;
	sigset_t m;
	int sfd, sfd2, rc, ok;

	sigemptyset(&m);
	sigaddset(&m, SIGTERM), sigaddset(&m, SIGINT), sigaddset(&m, SIGHUP), sigaddset(&m, SIGCHLD);
	sigprocmask(SIG_BLOCK, &m, NULL);
	if ((sfd = signalfd(-1, &m, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		die(EX_SYS, "signalfd:");
	mkdirs(o->dir, 0700);
	/* the job's files are written there and its result read back: a
	 * directory another user may write (or a link to one) lets them swap
	 * them; refused before anything is submitted */
	if ((sfd2 = dir_own_open(o->dir, why, sizeof why)) < 0)
		die(errno == EPERM || errno == ELOOP || errno == ENOTDIR ? EX_USAGE : EX_SYS, "--dir %s", why);
	close(sfd2);
	pathf(jd, sizeof jd, "%s/isopod-run.XXXXXX", o->dir);
	if (!mkdtemp(jd))
		die(EX_SYS, "unable to make a job directory in %s:", o->dir);
	j.dir = jd, j.name = strrchr(jd, '/') + 1;
	if (o->use_stdin && run_stdin(jd) < 0) {
		int e = errno;

		run_cleanup(jd);
		errno = e;
		die(EX_SYS, "unable to copy standard input to %s/stdin:", jd);
	}
	/* sjob_run records the job's id there once known */
	pathf(st, sizeof st, "%s/state.json", jd);
	if (!(state = json_pack("{s:s}", "job", j.name)) || json_write_atomic(st, state) < 0)
		die(EX_SYS, "unable to write %s:", st);
	json_decref(state);
	/* a stage this host holds: the job prefers the nodes that hold it
	 * (as `feature REF` spells it); one this host lacks: no preference */
	if (o->stage && stage_resolve(o->stage, id, sizeof id, why, sizeof why) == 0) {
		stage_feature(id, feat, sizeof feat);
		j.prefer = feat;
	}
	rc = sjob_run(&j, sfd, mono_ms() + (budget + RUN_GRACE_S) * 1000, st, &s, why, sizeof why);
	pathf(st, sizeof st, "%s/stdout", jd);
	res = sjob_result(rc < 0 ? NULL : job_result_load(st), &j, rc < 0 ? NULL : &s, why);
	if (!res)
		die(EX_SYS, "unable to build the result");
	run_relay_log(jd);
	ok = json_is_true(json_object_get(res, "ok"));
	json_emit(res);
	run_cleanup(jd);
	/* the front end's status when Slurm ran it to its end, once (the
	 * command's, or the front end's own failure's: isopod(1)); else what
	 * the failure's kind maps to (a success never exits 0 by accident) */
	if (rc == 0 && !s.restarts && (!strcmp(s.state, "COMPLETED") || !strcmp(s.state, "FAILED")) &&
	    (s.exit != 0 || ok))
		rc = s.exit;
	else
		rc = !strcmp(json_string_value(json_object_get(res, "error_kind")) ?: "", "timeout") ? EX_TIMEOUT : EX_SYS;
	json_decref(res);
	return rc;
}

static int main_run(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "dir", required_argument, NULL, 'D' },
		{ "net", required_argument, NULL, 'N' },
		{ "stage", required_argument, NULL, 'S' },
		{ "vcpus", required_argument, NULL, 'c' },
		{ "mem-mib", required_argument, NULL, 'm' },
		{ "timeout-s", required_argument, NULL, 't' },
		{ "stdin", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct run_opts o = { 0 };
	char dflt[PATH_MAX];
	const char *last = NULL;
	long long v;
	int c;

	optind = 2;
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		last = optarg;
		switch (c) {
		case 'D': o.dir = optarg; break;
		case 'N': o.net = optarg; break;
		case 'S': o.stage = optarg; break;
		case 'c':
			if (parse_ll(optarg, 1, 1024, &v) < 0)
				die(EX_USAGE, "--vcpus %s: want 1..1024", EXC(optarg));
			o.vcpus = (int)v;
			break;
		case 'm':
			if (parse_ll(optarg, 64, 1 << 24, &o.mem_mib) < 0)
				die(EX_USAGE, "--mem-mib %s: want 64..16777216", EXC(optarg));
			break;
		case 't':
			if (parse_ll(optarg, 1, 86400, &v) < 0)
				die(EX_USAGE, "--timeout-s %s: want 1..86400", EXC(optarg));
			o.timeout_s = v;
			break;
		case 'i': o.use_stdin = 1; break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	/* the "--" getopt stopped at, not an option's value (--dir --) */
	if (optind >= argc || strcmp(argv[optind - 1], "--") || argv[optind - 1] == last)
		die_usage(USAGE, "run: want -- ARGV (the front end's: isopod run --json-only ...)");
	if (!o.dir) {
		pathf(dflt, sizeof dflt, "%s/slurm-jobs", store_home());
		o.dir = dflt;
	}
	/* the nodes find the job's files by this path */
	if (o.dir[0] != '/')
		die(EX_USAGE, "--dir %s: want an absolute path (the nodes see it at the same path)", EXC(o.dir));
	return cmd_run(&o, argv + optind);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "node", required_argument, NULL, 'n' },
		{ "dry-run", no_argument, NULL, 'd' },
		{ "attestation", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *opt_node = NULL, *verb, *att = ATTESTATION_DEFAULT;
	char node[65];
	json_t *out;
	int c, dry = 0, opts = 0;

	progname = "isopod-slurm";
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		puts("usage: " USAGE);
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-')
		die_usage(USAGE, "no verb given (conf, refresh, feature or run first)");
	verb = argv[1];
	if (!strcmp(verb, "run"))
		return main_run(argc, argv);
	optind = 2;
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		opts += c != 'h';
		switch (c) {
		case 'n':
			opt_node = optarg;
			break;
		case 'd':
			dry = 1;
			break;
		case 'a':
			if (!*optarg)
				die(EX_USAGE, "--attestation: want a file");
			att = optarg;
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (strcmp(verb, "conf") && strcmp(verb, "refresh") && strcmp(verb, "feature"))
		die_usage(USAGE, "unknown verb '%s'", EXC(verb));
	if (!strcmp(verb, "feature")) {
		if (opts)
			die_usage(USAGE, "feature takes no option");
		if (argc - optind != 1)
			die_usage(USAGE, "feature: want one stage REF");
		out = cmd_feature(argv[optind]);
		json_emit(out);
		json_decref(out);
		return 0;
	}
	if (optind != argc)
		die_usage(USAGE, "unexpected operand '%s'", EXC(argv[optind]));
	if (dry && !strcmp(verb, "conf"))
		die_usage(USAGE, "--dry-run is refresh's");
	node_name(node, sizeof node, opt_node);
	out = !strcmp(verb, "conf") ? cmd_conf(node, att) : cmd_refresh(node, att, dry);
	json_emit(out);
	json_decref(out);
	return 0;
}
