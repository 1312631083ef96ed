/* isopod-doctor - what this host can do, as one JSON object.
 *
 * Checks what a run needs -- the kernel and base image in the store, QEMU,
 * the tools, flock, network slots of the default mode -- says which
 * accelerator a run gets and why (lib/accel.c decides it, as for every
 * boot: the doctor never probes, it reports the cached verdict or that
 * none exists yet), lists the host config's allow_range overrides
 * (lib/ranges.c) as warnings, and, without --quick, does one real
 * `isopod run -- true`.  Exit 0 only when a run can work. */
#include "accel.h"
#include "image.h"
#include "net.h"
#include "proc.h"
#include "qemu.h"
#include "ranges.h"
#include "util.h"
#include "warm.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-doctor [--quick] [--net none|filtered|open] [--shell PATH] [--front-end PATH]"
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

/* Is there an executable `name` in $PATH (what `command -v` finds)? */
static int in_path(const char *name)
{
	const char *path = getenv("PATH"), *p, *e;
	char f[PATH_MAX];

	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	for (p = path;; p = e + 1) {
		size_t n;

		e = strchr(p, ':');
		n = e ? (size_t)(e - p) : strlen(p);
		if (pathn(f, sizeof f, "%.*s/%s", (int)n, n ? p : ".", name) == 0 &&
		    access(f, X_OK) == 0)
			return 1;
		if (!e)
			return 0;
	}
}

/* The directory of the tools: $ISOPOD_LIBEXEC, else our own. */
static void tools_dir(char *out, size_t sz)
{
	char *slash;

	proc_sibling(out, sz, "isopod-doctor", "ISOPOD_LIBEXEC");
	if ((!getenv("ISOPOD_LIBEXEC") || !*getenv("ISOPOD_LIBEXEC")) && (slash = strrchr(out, '/')))
		*slash = 0;
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
	char v[256], err[512], *e;

	if (!in_path(QEMU)) {
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

	for (k = 0; k < nt; k++) {
		if (!strcmp(net_tap_mode(k, mode, sizeof mode), "open"))
			nopen++;
		else
			nfilt++;
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

/* One `isopod run -- true` through the front end: its result (or
 * {"ok":false} when it printed none), and whether it exited 0. */
static json_t *real_run(const char *front, const char *defnet, int *ok)
{
	char *av[] = { (char *)front, "run", "--json-only", "--timeout-s", RUN_TIMEOUT_S, "--net",
		       (char *)defnet, "--", "true", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	int pfd[2], st = 0;
	json_t *out;
	pid_t pid;

	*ok = 0;
	/* the run uses this very store, however the doctor found it */
	if (setenv("ISOPOD_HOME", store_home(), 1) < 0 || pipe2(pfd, O_CLOEXEC) < 0)
		die(EX_SYS, "unable to set up the test run:");
	ps.out = pfd[1];
	ps.err = PROC_INHERIT;
	if ((pid = proc_spawn(&ps)) < 0)
		die(EX_SYS, "unable to start %s:", front);
	close(pfd[1]);
	out = json_load_fd(pfd[0]);
	close(pfd[0]);
	if (proc_wait(pid, &st) < 0)
		die(EX_SYS, "unable to wait for %s:", front);
	*ok = proc_status(st) == 0;
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

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "quick", no_argument, 0, 'q' },
					    { "net", required_argument, 0, 'n' },
					    { "shell", required_argument, 0, 's' },
					    { "front-end", required_argument, 0, 'f' },
					    { "help", no_argument, 0, 'h' },
					    { 0, 0, 0, 0 } };
	static const char *const tools[] = { "claim", "boot", "exec", "stop", "gc", "broker" };
	struct diag d = { .missing = json_array(), .warnings = json_array() };
	const char *defnet = getenv("ISOPOD_NET"), *shell = NULL, *front = "isopod";
	char libexec[PATH_MAX], p[PATH_MAX], err[1024];
	json_t *kvm, *qemu, *net, *have = json_array(), *run = NULL, *o;
	int ch, quick = 0, usable, run_ok;
	size_t i;

	progname = "isopod-doctor";
	if (!d.missing || !d.warnings || !have)
		die(EX_SYS, "out of memory");
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'q': quick = 1; break;
		case 'n': defnet = optarg; break;
		case 's': shell = optarg; break;
		case 'f': front = optarg; break;
		case 'h': printf("usage: %s\n", USAGE); return 0;
		default: fprintf(stderr, "usage: %s\n", USAGE); return EX_USAGE;
		}
	}
	if (optind < argc)
		die(EX_USAGE, "unknown argument %s\nusage: %s", EXC(argv[optind]), USAGE);
	if (!defnet || !*defnet)
		defnet = "filtered";
	if (!net_mode_valid(defnet))
		die(EX_USAGE, "--net %s: want none, filtered or open", EXC(defnet));

	/* the kernel and base image a run boots */
	d.kpresent = resolve_kernel(&d.im, err, sizeof err) == 0;
	if (!d.kpresent)
		miss(&d, "kernel");
	d.bpresent = resolve_base(&d.im, "base", NULL, err, sizeof err) == 0;
	if (!d.bpresent)
		miss(&d, "base-image");
	qemu = qemu_facts(&d);
	kvm = kvm_facts(&usable);
	accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));

	tools_dir(libexec, sizeof libexec);
	for (i = 0; i < sizeof tools / sizeof tools[0]; i++) {
		char name[32];

		snprintf(name, sizeof name, "isopod-%s", tools[i]);
		if (pathn(p, sizeof p, "%s/%s", libexec, name) == 0 && access(p, X_OK) == 0)
			json_array_append_new(have, json_string(tools[i]));
		else
			miss(&d, name);
	}
	if (!in_path("flock"))
		miss(&d, "flock");
	net = net_facts(&d, defnet);

	if (!quick && json_array_size(d.missing) == 0) {
		run = real_run(front, defnet, &run_ok);
		if (!run_ok)
			miss(&d, "working-run");
		/* the run's boot probed KVM: report its verdict */
		if (run_ok && !strcmp(d.accel, "unknown"))
			accel_of(&d, json_is_true(json_object_get(kvm, "pvm")));
	}

	o = json_pack("{s:b, s:s, s:s, s:s?, s:b, s:o, s:o, s:{s:b, s:s?}, s:{s:b, s:s, s:s?},"
		      " s:{s:s?, s:b}, s:s, s:s, s:o, s:o, s:O, s:O}",
		      "ok", json_array_size(d.missing) == 0, "version", ISOPOD_VERSION, "accel",
		      d.accel, "accel_reason", d.reason[0] ? d.reason : NULL, "accel_probed", d.probed,
		      "kvm", kvm, "qemu", qemu, "kernel", "present", d.kpresent, "sha256",
		      d.im.ksha[0] ? d.im.ksha : NULL, "base", "present", d.bpresent, "flavor", "base",
		      "sha256", d.im.bsha[0] ? d.im.bsha : NULL, "shell", "path", shell, "pipefail",
		      shell != NULL, "home", store_home(), "libexec", libexec, "tools", have, "net",
		      net, "warnings", d.warnings, "missing", d.missing);
	if (!o)
		die(EX_SYS, "unable to build the report");
	if (run)
		json_object_set_new(o, "run", run);
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
