/* isopod-doctor - what this host can do, as one JSON object.
 *
 * Checks what a run needs -- the kernel and base image in the store, QEMU,
 * the tools, flock, network slots of the default mode -- says which
 * accelerator a run gets and why (lib/accel.c decides it, as for every
 * boot: the doctor never probes, it reports the cached verdict or that
 * none exists yet), lists the host config's allow_range overrides
 * (lib/ranges.c) as warnings, and, without --quick, does one real
 * `isopod run -- true`.  Exit 0 only when a run can work.
 *
 * With --adverse, instead: the adverse suite of issue 10 (below), real
 * guests attacking the host's containment, its report what isopod-attest
 * signs. */
#include "accel.h"
#include "adverse.h"
#include "attcheck.h"
#include "image.h"
#include "jail.h"
#include "net.h"
#include "pool.h"
#include "proc.h"
#include "qemu.h"
#include "qjail.h"
#include "ranges.h"
#include "tsc.h"
#include "util.h"
#include "vm.h"
#include "warm.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-doctor [--quick] [--net none|filtered|open] [--shell PATH] [--front-end PATH] | " \
	"isopod-doctor --adverse [--vm REF] [--modes LIST] [--metadata ADDR] [--host-gateway ADDR] " \
	"[--host-addr ADDR]... [--public ADDR] [--open-control ADDR:PORT] [--udp-port N] " \
	"[--probe-timeout-s N] [--nc PROGRAM] [--allow NAME] [--ipv6-ula ADDR] [--ipv6-global ADDR] " \
	"[--class LIST]"
#define RUN_TIMEOUT_S "300"

/* The doctor's findings, gathered before the report is built. */
struct diag {
	json_t *missing, *warnings;
	const char *accel;
	char reason[1024];
	int probed;
	struct img im;
	int kpresent, bpresent;
};

static void miss(struct diag *d, const char *what)
{
	json_array_append_new(d->missing, json_string(what));
}

/* kvm:{device, present, usable, pvm}: what the host has (the verdict
 * itself is lib/accel.c's). */
static json_t *kvm_facts(int *usable)
{
	const char *dev = getenv("ISOPOD_KVM_DEV");
	struct stat st;
	char line[256];
	int present, pvm = 0;
	FILE *f;

	if (!dev || !*dev)
		dev = "/dev/kvm";
	present = stat(dev, &st) == 0 && S_ISCHR(st.st_mode);
	*usable = present && access(dev, R_OK | W_OK) == 0;
	/* PVM's KVM opens fine and cannot run an unmodified guest kernel */
	if ((f = fopen("/proc/modules", "re"))) {
		while (!pvm && fgets(line, sizeof line, f))
			pvm = !strncmp(line, "kvm_pvm ", 8);
		fclose(f);
	}
	return json_pack("{s:s, s:b, s:b, s:b}", "device", dev, "present", present, "usable", *usable,
			 "pvm", pvm);
}

/* The TSC rate a TCG guest is told here (tsc_early_khz): the store's
 * kept one (accel/tsc.json, lib/tsc.h), never measured by the doctor
 * (the first TCG boot measures it); null with why when there is none. */
static json_t *tsc_of(char *why, size_t wsz)
{
	long long khz = 0;
	char w[256];

	if (!tsc_kept(&khz, w, sizeof w))
		snprintf(why, wsz, "%s%s%s", w[0] ? "accel/tsc.json: " : "not measured yet",
			 w, w[0] ? "; the next TCG boot measures it again" : ": the first TCG boot measures it");
	else
		snprintf(why, wsz, "%s", khz > 0 ? "" : w);
	return khz > 0 ? json_integer(khz) : json_null();
}

/* The accelerator a boot gets here, without booting: lib/accel.c's
 * verdict, or "unknown" when only the first boot's probe can tell. */
static void accel_of(struct diag *d, int pvm)
{
	const char *f = getenv("ISOPOD_ACCEL"), *dev = getenv("ISOPOD_KVM_DEV");
	char err[1024];

	if (f && strcmp(f, "kvm") && strcmp(f, "tcg"))
		f = NULL; /* as isopod-boot: anything else is not forcing */
	if (accel_known(f, "ISOPOD_ACCEL", &d->im, &d->accel, &d->probed, d->reason,
			sizeof d->reason, err, sizeof err)) {
		/* forced kvm that does not open: every boot fails (111) */
		d->accel = "kvm";
		snprintf(d->reason, sizeof d->reason, "%s", err);
		miss(d, "kvm(forced-by-ISOPOD_ACCEL:unusable)");
		return;
	}
	if (d->accel)
		return;
	d->accel = "unknown";
	snprintf(d->reason, sizeof d->reason, "not probed yet: %s is present; the first boot probes "
		 "whether KVM can run the guest kernel%s", dev && *dev ? dev : "/dev/kvm",
		 pvm ? " (the host KVM is PVM, which usually cannot: expect tcg)" : "");
}

/* qemu:{binary, version}: the version token of `qemu --version` (lib/warm.c
 * caches it by the binary's identity). */
static json_t *qemu_facts(struct diag *d)
{
	char v[256], err[512], path[PATH_MAX], *e;

	if (proc_path_find(QEMU, path, sizeof path) < 0) {
		miss(d, "qemu(" QEMU ")");
		return json_pack("{s:s, s:n}", "binary", QEMU, "version");
	}
	if (qemu_version(v, sizeof v, err, sizeof err) < 0)
		return json_pack("{s:s, s:s}", "binary", QEMU, "version", "unknown");
	/* "QEMU emulator version 7.2.22 (Debian ...)" */
	memmove(v, v + 22, strlen(v + 22) + 1);
	if ((e = strchr(v, ' ')))
		*e = 0;
	return json_pack("{s:s, s:s}", "binary", QEMU, "version", v[0] ? v : "unknown");
}

/* net:{default_mode, filtered_slots, open_slots, allow_ranges, config} */
static json_t *net_facts(struct diag *d, const char *defnet)
{
	struct range r[RANGES_ALLOW_MAX];
	char mode[32], msg[1024], t[RANGES_TEXT_MAX], w[RANGES_TEXT_MAX + PATH_MAX + 128];
	const char *conf = ranges_config_path();
	int k, nt = net_ntaps(), nfilt = 0, nopen = 0;
	size_t n = 0, i;
	json_t *ranges = json_array();

	/* Only a tap netsetup verified counts for its mode: an unaliased one
	 * takes no claim, nor does one marked "isopod unverified MODE" (a
	 * rerun whose check failed while a VM ran on it), which is named. */
	for (k = 0; k < nt; k++) {
		int unverified = 0;

		net_tap_kept_mode(k, mode, sizeof mode, &unverified);
		if (unverified) {
			char item[96];

			snprintf(item, sizeof item, "network(unverified-slot-%d:sudo-isopod-netsetup)", k);
			miss(d, item);
		} else if (!strcmp(mode, "open")) {
			nopen++;
		} else if (!strcmp(mode, "filtered")) {
			nfilt++;
		}
	}
	if (!strcmp(defnet, "filtered") && !nfilt)
		miss(d, "network(no-filtered-slots:sudo-isopod-netsetup)");
	if (!strcmp(defnet, "open") && !nopen)
		miss(d, "network(no-open-slots:sudo-isopod-netsetup--open-slots-N)");
	if (ranges_load_config(conf, r, RANGES_ALLOW_MAX, &n, msg, sizeof msg) < 0) {
		/* a networked boot refuses this config: say so */
		warn("%s", msg);
		json_array_append_new(d->warnings, json_string(msg));
		miss(d, "host-config(allow_range)");
		n = 0;
	}
	for (i = 0; i < n; i++) {
		range_text(&r[i], t, sizeof t);
		json_array_append_new(ranges, json_string(t));
		json_array_append_new(d->warnings,
				      json_string(ranges_warning(t, conf, w, sizeof w)));
	}
	return json_pack("{s:s, s:i, s:i, s:o, s:s}", "default_mode", defnet, "filtered_slots", nfilt,
			 "open_slots", nopen, "allow_ranges", ranges, "config", conf);
}

/* The run pool as it stands, read only (lib/pool.c pool_df, as isopod
 * gc --df reports it: shapes, ready and filling VMs, their QEMUs' PSS)
 * with its settings; a bad setting is a warning (a run with the pool on
 * would refuse it, 100), not missing: the pool is off by default. */
static json_t *pool_facts(struct diag *d)
{
	struct pool_cfg pc;
	char msg[512];
	json_t *o = pool_df();

	if (!o)
		die(EX_SYS, "unable to build the report");
	if (pool_config(&pc, msg, sizeof msg) < 0) {
		json_array_append_new(d->warnings, json_sprintf("pool: %s", msg));
		return o;
	}
	json_object_set_new(o, "size", json_integer(pc.size));
	json_object_set_new(o, "max", json_integer(pc.max));
	json_object_set_new(o, "idle_s", json_integer(pc.idle_s));
	return o;
}

/* cgroup:{hierarchy, limits, paths, ok, warnings}: where a run's jail
 * would put its limits, tried for real by the jail's own code (lib/jail.c
 * jail_cg_check: an empty isopod-doctor-<pid> made with a qemu-img
 * jail's limits, then removed).  What could not be done is a warning, as
 * in a run's result (the run goes on without that limit), not missing. */
static json_t *cgroup_facts(struct diag *d)
{
	char name[32];
	json_t *o, *w;
	size_t i;

	snprintf(name, sizeof name, JAIL_CG_CHECK_NAME "%ld", (long)getpid());
	if (!(o = jail_cg_check(name, (long long)QJAIL_IMG_MEM_MIB << 20, QJAIL_PIDS_BASE)))
		die(EX_SYS, "out of memory");
	json_array_foreach(json_object_get(o, "warnings"), i, w)
		json_array_append(d->warnings, w);
	return o;
}

/* One `isopod run -- true` through the front end: its result (or
 * {"ok":false} when it printed none), and whether it exited 0. */
static json_t *real_run(const char *front, const char *defnet, int *ok)
{
	char *av[] = { (char *)front, "run", "--json-only", "--timeout-s", RUN_TIMEOUT_S, "--net",
		       (char *)defnet, "--", "true", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	char home[PATH_MAX + 16], *env[] = { home, NULL }, why[512], *buf;
	json_t *out = NULL;
	size_t len;
	int st;

	*ok = 0;
	/* the run uses this very store, however the doctor found it */
	if (pathn(home, sizeof home, "ISOPOD_HOME=%s", store_home()) < 0)
		die(EX_USAGE, "path too long: %.64s...", store_home());
	if (!(buf = malloc(JSON_MAX_BYTES + 1)))
		die(EX_SYS, "unable to set up the test run:");
	ps.out = PROC_PIPE;
	ps.err = PROC_INHERIT;
	ps.env = env;
	if ((st = proc_capture(&ps, buf, JSON_MAX_BYTES + 1, &len)) < 0)
		die(EX_SYS, "unable to run %s:", front);
	/* more than JSON_MAX_BYTES: json_parse refuses it */
	if (len)
		out = json_parse(buf, len > JSON_MAX_BYTES ? JSON_MAX_BYTES + 1 : len, 0, why, sizeof why);
	free(buf);
	*ok = st == 0;
	return out ? out : json_pack("{s:b}", "ok", 0);
}

static void emit(json_t *o)
{
	if (!isatty(1)) {
		json_emit(o);
		return;
	}
	/* a person reading: indented, as jq . printed it */
	if (json_dumpf(o, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 ||
	    fputc('\n', stdout) == EOF || fflush(stdout) == EOF)
		die(EX_SYS, "unable to write to standard output:");
}

/* A readable table for a person at a terminal (stderr: stdout is data). */
static void table(json_t *probes)
{
	size_t i;
	json_t *p;

	json_array_foreach(probes, i, p)
		fprintf(stderr, "%-6s %-22s %-48s %s\n",
			json_string_value(json_object_get(p, "verdict")),
			json_string_value(json_object_get(p, "class")),
			json_string_value(json_object_get(p, "name")),
			json_string_value(json_object_get(p, "why")) ?: "");
}

/* Option values that end up in the guest's shell: IPv4 literals, words. */
static const char *adv_ipv4(const char *s, const char *opt)
{
	struct in_addr ia;

	if (inet_pton(AF_INET, s, &ia) != 1)
		die(EX_USAGE, "%s %s: want an IPv4 address", opt, EXC(s));
	return s;
}

static const char *adv_ipv4port(const char *s)
{
	const char *c = strrchr(s, ':');
	char h[64];
	long long p;

	if (!c || (size_t)(c - s) >= sizeof h || parse_ll(c + 1, 1, 65535, &p) < 0)
		die(EX_USAGE, "--open-control %s: want ADDR:PORT", EXC(s));
	snprintf(h, sizeof h, "%.*s", (int)(c - s), s);
	adv_ipv4(h, "--open-control");
	return s;
}

static const char *adv_ipv6(const char *s, const char *opt)
{
	struct in6_addr ia;

	if (inet_pton(AF_INET6, s, &ia) != 1)
		die(EX_USAGE, "%s %s: want an IPv6 address", opt, EXC(s));
	return s;
}

/* --class: a comma-separated list of class names. */
static const char *adv_classes(const char *s)
{
	if (!*s || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-,") != strlen(s) || strlen(s) > 400)
		die(EX_USAGE, "--class %s: want a comma-separated list of class names", EXC(s));
	return s;
}

static const char *adv_word(const char *s, const char *opt)
{
	if (!*s || strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-._/") != strlen(s) || strlen(s) > 100)
		die(EX_USAGE, "%s %s: want 1..100 of [a-z0-9-._/]", opt, EXC(s));
	return s;
}

/* The command line, parsed. */
struct cli {
	const char *defnet, *shell, *front;
	int quick, adv_on, hostset, gwset;
	struct adv a;
	struct adv_opts op;
};

/* Parse the options into c: -1 to go on, else main's exit status. */
static int parse(int argc, char **argv, struct cli *c)
{
	static const struct option lo[] = { { "quick", no_argument, 0, 'q' },
					    { "net", required_argument, 0, 'n' },
					    { "shell", required_argument, 0, 's' },
					    { "front-end", required_argument, 0, 'f' },
					    { "help", no_argument, 0, 'h' },
					    { "adverse", no_argument, 0, 'A' },
					    { "vm", required_argument, 0, 'V' },
					    { "modes", required_argument, 0, 'M' },
					    { "metadata", required_argument, 0, 'm' },
					    { "host-gateway", required_argument, 0, 'g' },
					    { "host-addr", required_argument, 0, 'H' },
					    { "public", required_argument, 0, 'P' },
					    { "open-control", required_argument, 0, 'O' },
					    { "udp-port", required_argument, 0, 'u' },
					    { "probe-timeout-s", required_argument, 0, 't' },
					    { "nc", required_argument, 0, 'c' },
					    { "allow", required_argument, 0, 'a' },
					    { "ipv6-ula", required_argument, 0, 'U' },
					    { "ipv6-global", required_argument, 0, 'G' },
					    { "class", required_argument, 0, 'C' },
					    { 0, 0, 0, 0 } };
	struct adv *a = &c->a;
	long long lv;
	int ch;

	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'q': c->quick = 1; break;
		case 'n': c->defnet = optarg; break;
		case 's': c->shell = optarg; break;
		case 'f': c->front = optarg; break;
		case 'h': printf("usage: %s\n", USAGE); return 0;
		case 'A': c->adv_on = 1; break;
		case 'V': c->op.vmref = optarg; break;
		case 'M': c->op.modes = optarg; break;
		case 'm': a->meta = adv_ipv4(optarg, "--metadata"); break;
		case 'g':
			snprintf(a->gwhost, sizeof a->gwhost, "%s", adv_ipv4(optarg, "--host-gateway"));
			c->gwset = 1;
			break;
		case 'H':
			if (a->nhost >= 8)
				die(EX_USAGE, "--host-addr: at most 8");
			snprintf(a->hostaddr[a->nhost++], sizeof a->hostaddr[0], "%s",
				 adv_ipv4(optarg, "--host-addr"));
			c->hostset = 1;
			break;
		case 'P': a->public_addr = adv_ipv4(optarg, "--public"); break;
		case 'O': a->open_control = adv_ipv4port(optarg); break;
		case 'u':
			if (parse_ll(optarg, 1, 65535, &lv) < 0)
				die(EX_USAGE, "--udp-port %s: want 1..65535", EXC(optarg));
			a->udp_port = (int)lv;
			break;
		case 't':
			if (parse_ll(optarg, 1, 30, &lv) < 0)
				die(EX_USAGE, "--probe-timeout-s %s: want 1..30", EXC(optarg));
			a->tmo = (int)lv;
			break;
		case 'c': a->nc = adv_word(optarg, "--nc"); break;
		case 'a': a->allow = adv_word(optarg, "--allow"); break;
		case 'U': a->v6_ula = adv_ipv6(optarg, "--ipv6-ula"); break;
		case 'G': a->v6_global = adv_ipv6(optarg, "--ipv6-global"); break;
		case 'C': a->classes = adv_classes(optarg); break;
		default: die_usage(USAGE, "bad option (usage above)");
		}
	}
	if (optind < argc)
		die_usage(USAGE, "unknown argument %s", EXC(argv[optind]));
	if (!c->adv_on && (c->op.vmref || c->op.modes || c->hostset || c->gwset || a->allow ||
			   a->open_control || a->classes))
		die_usage(USAGE, "those options are the adverse suite's: add --adverse");
	return -1;
}

/* --adverse: the suite's report on stdout (the table on a terminal's
 * stderr); 0 pass, EX_GUEST fail, EX_SYS error, as its verdict. */
static int adverse(struct cli *c)
{
	struct adv *a = &c->a;
	json_t *o, *hc, *v;
	const char *verdict, *step;
	size_t j;
	int hbad = 0, rc;

	if (c->quick)
		die_usage(USAGE, "--quick and --adverse: one or the other");
	if (c->op.vmref && !vm_ref_ok(c->op.vmref))
		die(EX_USAGE, "--vm %s: not a VM reference", EXC(c->op.vmref));
	if (c->op.modes && strspn(c->op.modes, "nonefilteredopen,") != strlen(c->op.modes))
		die(EX_USAGE, "--modes %s: a comma-separated list of none, filtered, open",
		    EXC(c->op.modes));
	if (!(a->probes = json_array()) || !(a->warnings = json_array()))
		die(EX_SYS, "out of memory");
	if (proc_tools_dir(a->libexec, sizeof a->libexec) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	if (!c->gwset)
		adv_default_gateway(a->gwhost, sizeof a->gwhost);
	if (!c->hostset)
		adv_host_addrs(a);
	if (adv_run(a, &c->op, &o) < 0)
		die(a->fatal_code, "%s", a->fatal);
	verdict = json_string_value(json_object_get(o, "verdict"));
	rc = !strcmp(verdict, "error") ? EX_SYS : !strcmp(verdict, "fail") ? EX_GUEST : 0;
	hc = json_object_get(o, "host_checks");
	json_array_foreach(hc, j, v)
		hbad += !json_is_true(json_object_get(v, "ok"));
	if (isatty(2))
		table(a->probes);
	emit(o);
	step = json_string_value(json_object_get(json_object_get(o, "setup"), "step"));
	if (step)
		warn("setup failed at %s: %s; no attestation is possible", step,
		     json_string_value(json_object_get(json_object_get(o, "setup"), "why")));
	else if (rc)
		warn("%d probe(s) failed, %d could not show they ran (error), %d host check(s) failed",
		     a->fail, a->error, hbad);
	json_decref(o);
	return rc;
}

/* The tools a run needs, each found in libexec or missing. */
static json_t *tools_have(struct diag *d, const char *libexec)
{
	static const char *const tools[] = { "claim", "boot", "exec", "stop", "gc", "broker" };
	json_t *have = json_array();
	char p[PATH_MAX];
	size_t i;

	if (!have)
		die(EX_SYS, "out of memory");
	for (i = 0; i < sizeof tools / sizeof tools[0]; i++) {
		char name[32];

		snprintf(name, sizeof name, "isopod-%s", tools[i]);
		if (pathn(p, sizeof p, "%s/%s", libexec, name) == 0 && access(p, X_OK) == 0)
			json_array_append_new(have, json_string(tools[i]));
		else
			miss(d, name);
	}
	return have;
}

/* The host's attestation state, asked the way isopod-runner and isopod-mcp
 * ask it (lib/attcheck.c: isopod-attest verify beside us):
 * {path, required, valid[, error]} for the attestation in force
 * ($ISOPOD_ATTESTATION, which isopod-mcp sets to its --attestation, else
 * ATTESTATION_DEFAULT) when it exists or the host config requires one;
 * NULL otherwise.  A config that cannot be read is a warning, not a
 * verdict. */
static json_t *attestation_state(struct diag *d, const char *libexec)
{
	const char *e = getenv("ISOPOD_ATTESTATION");
	char tool[PATH_MAX], why[1024];
	struct attcheck a = { .att = e && *e ? e : ATTESTATION_DEFAULT, .tool = tool };
	int req = 0, valid;

	if (attcheck_required(ranges_config_path(), &req, why, sizeof why) < 0) {
		json_array_append_new(d->warnings, json_string(why));
		req = 0;
	}
	if (!req && access(a.att, F_OK) < 0)
		return NULL;
	if (pathn(tool, sizeof tool, "%s/isopod-attest", libexec) < 0) {
		snprintf(why, sizeof why, "the path of isopod-attest is too long");
		valid = 0;
	} else {
		valid = attcheck_verify(&a, NULL, why, sizeof why);
	}
	return json_pack("{s:s, s:b, s:b, s:s?}", "path", a.att, "required", req, "valid", valid,
			 "error", valid ? NULL : why);
}

/* What this host can do: 0 when a run can work. */
static int doctor(const struct cli *c)
{
	struct diag d = { .missing = json_array(), .warnings = json_array() };
	const char *defnet = c->defnet, *shell = c->shell;
	char libexec[PATH_MAX], err[1024], tsc_why[512];
	json_t *kvm, *qemu, *net, *have, *run = NULL, *o, *att, *cg, *pool, *tsc;
	int usable, run_ok;
	size_t i;

	if (!d.missing || !d.warnings)
		die(EX_SYS, "out of memory");
	if (!defnet || !*defnet)
		defnet = "filtered";
	/* --net is the configured default, and learn is never one */
	if (!net_mode_valid(defnet) || !strcmp(defnet, "learn"))
		die(EX_USAGE, "--net %s: want none, filtered or open (learn is never a default)",
		    EXC(defnet));

	/* the kernel and base image a run boots */
	/* a kernel whose agent speaks another protocol boots nothing */
	d.kpresent = resolve_kernel(&d.im, err, sizeof err) == 0 &&
		     kernel_agent_ok(&d.im, err, sizeof err) == 0;
	if (!d.kpresent)
		miss(&d, "kernel");
	d.bpresent = resolve_base(&d.im, "base", NULL, err, sizeof err) == 0;
	if (!d.bpresent)
		miss(&d, "base-image");
	qemu = qemu_facts(&d);
	kvm = kvm_facts(&usable);
	accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));

	if (proc_tools_dir(libexec, sizeof libexec) < 0)
		die(EX_SYS, "unable to find the tools' directory:");
	have = tools_have(&d, libexec);
	if (proc_path_find("flock", err, sizeof err) < 0)
		miss(&d, "flock");
	net = net_facts(&d, defnet);
	cg = cgroup_facts(&d);
	pool = pool_facts(&d);

	if (!c->quick && json_array_size(d.missing) == 0) {
		run = real_run(c->front, defnet, &run_ok);
		if (!run_ok)
			miss(&d, "working-run");
		/* the run's boot probed KVM: report its verdict */
		if (run_ok && !strcmp(d.accel, "unknown"))
			accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));
	}

	/* after the run: its boot (TCG) kept the rate */
	tsc = tsc_of(tsc_why, sizeof tsc_why);
	o = json_pack("{s:b, s:s, s:s, s:s?, s:b, s:o, s:s?, s:o, s:o, s:{s:b, s:s?}, s:{s:b, s:s, s:s?},"
		      " s:{s:s?, s:b}, s:s, s:s, s:o, s:o, s:o, s:o, s:O, s:O}",
		      "ok", json_array_size(d.missing) == 0, "version", ISOPOD_VERSION, "accel",
		      d.accel, "accel_reason", d.reason[0] ? d.reason : NULL, "accel_probed", d.probed,
		      "tsc_khz", tsc, "tsc_reason", tsc_why[0] ? tsc_why : NULL, "kvm", kvm, "qemu",
		      qemu, "kernel", "present", d.kpresent, "sha256",
		      d.im.ksha[0] ? d.im.ksha : NULL, "base", "present", d.bpresent, "flavor", "base",
		      "sha256", d.im.bsha[0] ? d.im.bsha : NULL, "shell", "path", shell, "pipefail",
		      shell != NULL, "home", store_home(), "libexec", libexec, "tools", have, "net",
		      net, "cgroup", cg, "pool", pool, "warnings", d.warnings, "missing", d.missing);
	if (!o)
		die(EX_SYS, "unable to build the report");
	if (run)
		json_object_set_new(o, "run", run);
	if ((att = attestation_state(&d, libexec)))
		json_object_set_new(o, "attestation", att);
	emit(o);
	if (json_array_size(d.missing)) {
		char list[2048] = "";
		size_t used = 0;
		json_t *v;

		json_array_foreach(d.missing, i, v)
			if (used + strlen(json_string_value(v)) + 2 < sizeof list)
				used += (size_t)snprintf(list + used, sizeof list - used, " %s",
							 json_string_value(v));
		die(EX_SYS, "a run cannot work here; missing:%s", list);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct cli c = { .defnet = getenv("ISOPOD_NET"), .front = "isopod",
			 .a = { .meta = "169.254.169.254", .public_addr = "1.1.1.1", .nc = "nc",
				.v6_ula = "fd00::1", .v6_global = "2606:4700:4700::1111",
				.udp_port = 53, .tmo = 2, .sniff = -1 } };
	int rc;

	progname = "isopod-doctor";
	if ((rc = parse(argc, argv, &c)) >= 0)
		return rc;
	return c.adv_on ? adverse(&c) : doctor(&c);
}
