/* isopod-claim - reserve a new VM record: id, vanity name, directory. */

#include "allow.h"
#include "bootopt.h"
#include "gcauto.h"
#include "net.h"
#include "proc.h"
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define USAGE "isopod-claim [--name NAME] [--net none|filtered|open] [--allow PATTERN]... [--id-file FILE] [--gc-auto]\n" \
	"       [--scratch PID] [--boot-check -- [BOOT-OPTION]...]"

static const char *const adjectives[] = {
	"amber", "brave", "calm", "dapper", "eager", "fancy", "gentle", "happy",
	"icy", "jolly", "keen", "lively", "mellow", "nimble", "odd", "plucky",
	"quiet", "rapid", "shy", "tidy", "upbeat", "vivid", "witty", "young",
	"zesty", "bold", "crisp", "dusty", "fuzzy", "glossy", "humble", "lucky",
	"misty", "proud", "rusty", "sunny",
};

static const char *const nouns[] = {
	"otter", "badger", "crane", "dingo", "egret", "ferret", "gecko", "heron",
	"ibis", "jackal", "koala", "lemur", "marmot", "newt", "ocelot", "panda",
	"quail", "raven", "stoat", "tapir", "urchin", "vole", "walrus", "yak",
	"zebra", "bison", "cobra", "finch", "gopher", "hare", "lynx", "moose",
	"puffin", "shrew", "toad", "wombat",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Names already taken by records in the store. */
struct names {
	char **v;
	size_t n, cap;
};

/* Every name in the store (lib/vm.c vm_names: a record's name from the
 * last claim's cache while its meta.json is unchanged, else read).  The
 * names and the identities they were read with, for vm_names_save. */
static json_t *names_load(struct names *ns)
{
	char why[PATH_MAX + 256];
	const char *id;
	size_t reads;
	json_t *nj = vm_names(&reads, why, sizeof why), *e;

	if (!nj)
		die(EX_SYS, "%s", why);
	json_object_foreach(json_object_get(nj, "vms"), id, e) {
		if (ns->n == ns->cap) {
			ns->cap = ns->cap ? 2 * ns->cap : 64;
			ns->v = realloc(ns->v, ns->cap * sizeof *ns->v);
			if (!ns->v)
				die(EX_SYS, "unable to allocate memory:");
		}
		if (!(ns->v[ns->n++] = strdup(json_string_value(json_array_get(e, 0)))))
			die(EX_SYS, "unable to allocate memory:");
	}
	return nj;
}

/* The next claim's names (names_load's nj, released), written under the
 * store lock after our record (itself not in it: boot rewrites it, so the
 * next claim reads it anyway).  A cache only: failing, the next claim
 * finds an older one or none, and reads each record it does not vouch
 * for, as it reads one changed or removed since (gc, rm -rf: vm_names
 * checks each cached name against its record's meta.json). */
static void names_save(json_t *nj)
{
	if (vm_names_save(nj) < 0)
		warn("unable to write the names' cache %s/names.json:", store_home());
	json_decref(nj);
}

static int names_has(const struct names *ns, const char *name)
{
	size_t i;

	for (i = 0; i < ns->n; i++)
		if (!strcmp(ns->v[i], name))
			return 1;
	return 0;
}

static unsigned rnd(unsigned n)
{
	uint32_t r;

	if (rand_bytes(&r, sizeof r) < 0)
		die(EX_SYS, "unable to get random bytes:");
	return r % n; /* the bias of a 32-bit modulo by < 64 does not matter here */
}

/* adjective-noun, unique; after 20 collisions adjective-noun-N.  Words are
 * at most 8 letters, so out (64 bytes) always has room. */
static void vanity(const struct names *ns, char *out, size_t sz)
{
	const char *a = NULL, *b = NULL;
	int i, n;

	for (i = 0; i < 20; i++) {
		a = adjectives[rnd(NELEM(adjectives))];
		b = nouns[rnd(NELEM(nouns))];
		snprintf(out, sz, "%s-%s", a, b);
		if (!names_has(ns, out))
			return;
	}
	for (n = 2; n < 1000000; n++) {
		snprintf(out, sz, "%s-%s-%d", a, b, n);
		if (!names_has(ns, out))
			return;
	}
	die(EX_CONFLICT, "unable to find a free name");
}

/* 1..63 of [a-z0-9-], not starting with '-'.  "vm-" is reserved: a name
 * must never read as an id (prefix) to vm_resolve. */
static int valid_name(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 1 || n > 63 || s[0] == '-' || !strncmp(s, "vm-", 3))
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
			return 0;
	return 1;
}

/* --gc-auto: the store looks after itself (isopod-gc --auto), started here
 * once the record is written and the store lock released, and only when
 * an automatic gc is due (lib/gcauto.c: a stat), so that a run when none
 * is costs no process.  A setting gc cannot read starts it too: its report
 * says so (isopod df).  Never the claim's failure: gc's stdio is
 * /dev/null, and it returns at once (it detaches to collect). */
static void gc_auto(int lk)
{
	char dir[PATH_MAX], gc[PATH_MAX], err[512];
	char *av[] = { gc, "--auto", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	long long every;
	pid_t pid;
	int st;

	close(lk);
	if (!gc_auto_interval(&every, err, sizeof err) && !gc_auto_due(every))
		return;
	if (proc_tools_dir(dir, sizeof dir) < 0 || pathn(gc, sizeof gc, "%s/isopod-gc", dir) < 0 ||
	    access(gc, X_OK) < 0)
		return;
	ps.file = gc;
	if ((pid = proc_spawn(&ps)) > 0)
		proc_wait(pid, &st);
}

/* The VM's directory vms/<id>, id a fresh random one (into id, dir). */
static void make_dir(const char *vmsdir, char id[3 + 12 + 1], char dir[PATH_MAX])
{
	char hex[13];

	for (int tries = 0;; tries++) {
		if (rand_hex(hex, 6) < 0)
			die(EX_SYS, "unable to get random bytes:");
		snprintf(id, 3 + 12 + 1, "vm-%s", hex);
		pathf(dir, PATH_MAX, "%s/%s", vmsdir, id);
		if (mkdir(dir, 0700) == 0)
			return;
		if (errno != EEXIST || tries > 100)
			die(EX_SYS, "unable to create %s:", dir);
	}
}

/* Undo a claim before its record is written: the scratch directory (and
 * its claim.json) when made, and the VM's directory; errno kept. */
static void undo(const char *dir, const char *scratch)
{
	char p[PATH_MAX];
	int e = errno;

	if (scratch[0] && pathn(p, sizeof p, "%s/claim.json", scratch) == 0)
		unlink(p);
	if (scratch[0])
		rmdir(scratch);
	rmdir(dir);
	errno = e;
}

/* --scratch: the JSON output into the scratch directory, as claim.json
 * (isopod-result reads it there), before the record: when it fails,
 * nothing is claimed.  No fsync (ATOMIC_NOSYNC): it is read back in this
 * boot of the host and removed with its directory at the run's end; after
 * a crash of the host its front end is dead and isopod-gc removes the
 * directory (run_sweep) whatever claim.json holds.  Its two fsyncs held
 * the store lock, which every claim queues on, for nothing
 * (doc/SPEED.md, "A run's fsyncs, audited", #1-2). */
static void scratch_json(const char *dir, const char *scratch, json_t *out)
{
	char p[PATH_MAX];

	if (pathn(p, sizeof p, "%s/claim.json", scratch) < 0 ||
	    json_write_atomic_flags(p, out, ATOMIC_NOSYNC) < 0) {
		undo(dir, scratch);
		die(EX_SYS, "unable to write %s/claim.json:", scratch);
	}
}

/* --scratch PID: the scratch directory of isopod run (the front end, PID),
 * lib/vm.c vm_scratch_make; a failure undoes the claim's directory dir. */
static void scratch_make(const char *dir, const char *id, long long pid, char *out, size_t sz)
{
	if (vm_scratch_make(id, pid, out, sz) == 0)
		return;
	undo(dir, "");
	if (errno == ESRCH)
		die(EX_USAGE, "--scratch %lld: no such process", pid);
	die(EX_SYS, "unable to create the scratch directory %s:", out);
}

/* --net and --allow checked; the record's "net" (NULL: none).  Fails
 * fast, before any record exists: no taps, no slot of the mode, or every
 * such slot busy.  The slot itself is taken by isopod-boot, whose
 * supervisor holds it. */
static json_t *net_record(const char *net, int nallow, json_t *allow)
{
	char err[PATH_MAX + 256];
	json_t *netj;
	int r;

	if (!net_mode_valid(net))
		die(EX_USAGE, "invalid --net %s: want none, filtered, open or learn", EXC(net));
	/* An allowlist means something only to the broker of a filtered VM:
	 * with none there is no network, with open no filter to apply it. */
	if (nallow && strcmp(net, "filtered"))
		die(EX_USAGE, "--allow needs --net filtered (not %s)", net);
	if (!strcmp(net, "none"))
		return NULL;
	if ((r = net_check_free(net, err, sizeof err)))
		die(r, "%s", err);
	if (!(netj = json_pack("{s:s, s:O}", "mode", net, "allow", allow)))
		die(EX_SYS, "unable to build the net record");
	return netj;
}

/* A shape refusal (an option this build does not know) is not final: the
 * front end learnt the boot's options from the isopod-boot it runs, which
 * may be of another build than ours.  That boot's --check has the last
 * word, its refusal passed on as it is (stderr, status object, status);
 * it passes and the claim goes on.  Only a refusal costs the process.
 * Its status; 126 or 127 (no isopod-boot there to ask): the caller's own
 * refusal stands. */
static int boot_ask(int argc, char **argv)
{
	char dir[PATH_MAX], boot[PATH_MAX], fdenv[] = "ISOPOD_STATUS_FD=3";
	char **av = calloc((size_t)argc + 3, sizeof *av);
	char *env[] = { fdenv, NULL };
	struct proc_spec ps = PROC_SPEC(av);
	pid_t pid;
	int st, fd;

	if (!av)
		die(EX_SYS, "unable to allocate memory:");
	if (proc_tools_dir(dir, sizeof dir) < 0 || pathn(boot, sizeof boot, "%s/isopod-boot", dir) < 0)
		die(EX_SYS, "unable to find isopod-boot:");
	av[0] = "isopod-boot"; /* as the front end names it in getopt's line */
	av[1] = "--check";
	memcpy(av + 2, argv, (size_t)argc * sizeof *av);
	ps.file = boot;
	ps.err = PROC_INHERIT;
	/* its status object goes where ours would: our fd N is its fd 3 */
	if ((fd = status_fd()) >= 0) {
		ps.keep[0] = fd;
		ps.nkeep = 1;
		ps.env = env;
	}
	if ((pid = proc_spawn(&ps)) < 0 || proc_wait(pid, &st) < 0)
		die(EX_SYS, "unable to run %s --check:", boot);
	free(av);
	return proc_status(st);
}

/* --boot-check -- BOOT-OPTION...: isopod-boot --check of the boot's
 * options (lib/bootopt.c, the one parse), before anything is claimed, so
 * that isopod run starts one tool fewer.  A refusal is the boot's, word for
 * word (its name in the diagnostic and the status object, its usage): the
 * front end's caller sees what isopod-boot --check said before the fold. */
static void boot_check(int argc, char **argv)
{
	struct boot_opts o = BOOT_OPTS_INIT;
	char msg[2 * PATH_MAX + EXCERPT_SZ + 256];
	char **bv = calloc((size_t)argc + 2, sizeof *bv);
	int r, st;

	if (!bv)
		die(EX_SYS, "unable to allocate memory:");
	bv[0] = "isopod-boot"; /* getopt's own line names the tool whose option it is */
	memcpy(bv + 1, argv, (size_t)argc * sizeof *bv);
	opterr = 0; /* getopt's line on an unknown option is the boot's to say */
	r = boot_opts_parse(&o, argc + 1, bv, msg, sizeof msg);
	if (!r && (o.help || o.run_options >= 0))
		die_usage(USAGE, "--boot-check: -h and --run-options are not checks");
	if (!r)
		r = boot_opts_check(&o, msg, sizeof msg);
	if (r == BOOT_OPTS_SHAPE && (st = boot_ask(argc, argv)) != 126 && st != 127) {
		if (st)
			exit(st);
	} else if (r) {
		progname = "isopod-boot";
		if (r == BOOT_OPTS_SHAPE)
			die_usage(BOOT_USAGE, "%s", msg);
		die(r, "%s", msg);
	}
	free(bv);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "name", required_argument, NULL, 'n' },
		{ "net", required_argument, NULL, 'N' },
		{ "allow", required_argument, NULL, 'a' },
		{ "id-file", required_argument, NULL, 'i' },
		{ "gc-auto", no_argument, NULL, 'g' },
		{ "scratch", required_argument, NULL, 's' },
		{ "boot-check", no_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct names ns = { 0 };
	char vmsdir[PATH_MAX], dir[PATH_MAX], scratch[PATH_MAX] = "";
	char id[3 + 12 + 1], name[64], now[32];
	const char *want = NULL, *net = "none", *idfile = NULL;
	json_t *rec, *out, *netj = NULL, *allow = json_array(), *nj;
	char pat[ALLOW_PATTERN_MAX];
	const char *why;
	size_t i;
	long long owner = 0;
	int c, nallow = 0, gc = 0, bcheck = 0, lk;
	sigset_t held;

	progname = "isopod-claim";
	/* after --boot-check, parsing stops at a "--" of its own (not an
	 * option's value "--", which getopt would take for the end) */
	while (!(bcheck && optind < argc && !strcmp(argv[optind], "--")) &&
	       (c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'n':
			want = optarg;
			break;
		case 'N':
			net = optarg;
			break;
		case 'i':
			idfile = optarg;
			break;
		case 'g':
			gc = 1;
			break;
		case 'B':
			bcheck = 1;
			break;
		case 's':
			if (parse_ll(optarg, 1, INT_MAX, &owner) < 0)
				die(EX_USAGE, "invalid --scratch %s: want a process id", EXC(optarg));
			break;
		case 'a':
			/* Normalised here, once: the broker and the record read the
			 * same spelling.  Duplicates are dropped. */
			nallow++;
			if (allow_norm(pat, sizeof pat, optarg, &why) < 0)
				die(EX_USAGE, "invalid --allow %s: %s", EXC(optarg), why);
			for (i = 0; i < json_array_size(allow); i++)
				if (!strcmp(json_string_value(json_array_get(allow, i)), pat))
					break;
			if (i == json_array_size(allow))
				json_array_append_new(allow, json_string(pat));
			break;
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	/* the boot's options after --, checked first: as when the front end
	 * ran isopod-boot --check before the claim */
	if (bcheck && (optind >= argc || strcmp(argv[optind], "--")))
		die_usage(USAGE, "--boot-check: the boot's options follow --");
	if (bcheck)
		boot_check(argc - optind - 1, argv + optind + 1);
	else if (optind != argc)
		die_usage(USAGE, "unexpected operand %s", EXC(argv[optind]));
	if (want && !valid_name(want))
		die(EX_USAGE, "invalid name %s: want 1..63 of [a-z0-9-], not starting with '-' or 'vm-'",
		    EXC(want));

	netj = net_record(net, nallow, allow);

	/* Name uniqueness is read-decide-write: hold the store lock. */
	lk = store_lock();
	pathf(vmsdir, sizeof vmsdir, "%s/vms", store_home());
	mkdirs(vmsdir, 0700);
	nj = names_load(&ns);
	if (want) {
		if (names_has(&ns, want))
			die(EX_CONFLICT, "name %s is taken", want);
		snprintf(name, sizeof name, "%s", want);
	} else {
		vanity(&ns, name, sizeof name);
	}

	/* From the VM's directory to the report, the group's SIGTERM (an
	 * isopod-mcp cancel, a ^C) waits: it left a scratch directory the
	 * front end never learnt of (4 runs in 40, SIGTERMed 36-56 ms in);
	 * it ends us after the report, whose directory the front end removes. */
	if (stop_signals_hold(&held) < 0)
		die(EX_SYS, "unable to hold signals:");
	make_dir(vmsdir, id, dir);

	if (owner)
		scratch_make(dir, id, owner, scratch, sizeof scratch);

	/* The id and the name as two lines, for isopod run's `read` (no JSON
	 * parser, a process, on every run); both of [a-z0-9-] (valid_name, the
	 * id's hex).  Written before the record: failing, nothing is claimed. */
	if (idfile) {
		char ids[sizeof id + sizeof name + 2];
		int n = snprintf(ids, sizeof ids, "%s\n%s\n", id, name);

		if (atomic_write(idfile, ids, (size_t)n, 0600) < 0) {
			undo(dir, scratch);
			die(EX_SYS, "unable to write --id-file %s:", idfile);
		}
	}
	out = json_pack("{s:{s:s, s:s, s:s}, s:o}", "vm", "id", id, "name", name, "dir", dir,
			"net", netj ? json_incref(netj) : json_null());
	rec = json_pack("{s:s, s:s, s:s, s:s}", "id", id, "name", name, "created",
			iso_now(now, sizeof now), "state", "claimed");
	if (!out || !rec)
		die(EX_SYS, "unable to build the VM record");
	if (netj)
		json_object_set(rec, "net", netj);
	if (scratch[0])
		scratch_json(dir, scratch, out);
	if (vm_create(id, rec) < 0) {
		undo(dir, scratch);
		die(EX_SYS, "unable to write %s/meta.json:", dir);
	}
	names_save(nj);
	test_pause("claim-report"); /* t/20: a SIGTERM here waits for the report */
	/* --scratch: id, name and directory, a line each, for a shell's read */
	if (!scratch[0])
		json_emit(out);
	else if (printf("%s\n%s\n%s\n", id, name, scratch) < 0 || fflush(stdout) == EOF)
		die(EX_SYS, "unable to write to standard output:");
	else
		json_decref(out);
	stop_signals_release(&held);
	if (gc)
		gc_auto(lk);
	return 0;
}
