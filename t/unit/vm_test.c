/* vm_test.c - unit tests of lib/vm.c, the one reader and writer of VM
 * records: create/read/update, concurrent updates under meta.lock, records
 * refused (malformed, duplicate key, oversized, another id), ids and refs
 * checked, the listing (vm_list), and json_update_locked (util.c), which
 * stage seals share.  Built
 * by t/run-unit with ASan + UBSan. */
#include "../../lib/proc.c" /* vm_scratch_make: proc_ident */
#include "../../lib/vm.c" /* self-contained: t/run-unit links frame+util only */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "fsyncs.h"

static char home[] = "/tmp/isopod-vm-test.XXXXXX";

#define A "vm-0123456789ab"
#define B "vm-0123456789cd"
#define C "vm-fedcba987654"

static void rec_dir(const char *id)
{
	char p[PATH_MAX];

	snprintf(p, sizeof p, "%s/vms/%s", store_home(), id);
	mkdir_p(p, 0700, NULL, 0);
}

/* Write raw bytes as vms/<id>/meta.json, behind lib/vm.c's back. */
static void put_raw(const char *id, const char *text, size_t n)
{
	char p[PATH_MAX];
	FILE *f;

	rec_dir(id);
	snprintf(p, sizeof p, "%s/vms/%s/meta.json", store_home(), id);
	f = fopen(p, "wb");
	if (f) {
		fwrite(text, 1, n, f);
		fclose(f);
	}
}

static void put_str(const char *id, const char *text)
{
	put_raw(id, text, strlen(text));
}

static int read_fails(const char *id, int want_errno)
{
	json_t *j;

	errno = 0;
	j = vm_read(id);
	json_decref(j);
	return !j && errno == want_errno;
}

static void test_create_read(void)
{
	json_t *rec = json_pack("{s:s, s:s, s:s}", "id", A, "name", "brave-otter", "state",
				"claimed");
	json_t *other = json_pack("{s:s}", "id", B), *back;

	rec_dir(A);
	ok(read_fails(A, ENOENT), "vm_read: no record yet is ENOENT");
	errno = 0;
	ok(vm_create(A, other) < 0 && errno == EINVAL, "vm_create: a record naming another id is refused");
	ok(vm_create(A, rec) == 0, "vm_create writes the first record");
	back = vm_read(A);
	ok(back && json_equal(back, rec), "vm_read reads it back equal");
	json_decref(back);
	errno = 0;
	ok(vm_create(A, rec) < 0 && errno == EEXIST, "vm_create: a second record is refused (EEXIST)");
	errno = 0;
	ok(vm_create("vm-../../etc", rec) < 0 && errno == EINVAL, "vm_create: a bad id is refused");
	ok(read_fails("../" A, EINVAL) && read_fails("vm-0123456789AB", EINVAL) &&
	   read_fails("vm-0123456789abc", EINVAL) && read_fails(NULL, EINVAL) &&
	   read_fails("", EINVAL), "vm_read: path, upper case, long, NULL and empty ids refused");
	json_decref(rec);
	json_decref(other);
}

static void test_update(void)
{
	static const char *const live[] = {"booting", "running", NULL};
	json_t *set = json_pack("{s:s, s:i}", "state", "booting", "vcpus", 2), *r;
	json_t *bad = json_pack("{s:s}", "id", B);

	ok(vm_meta_update(A, live, set) == 0, "vm_meta_update: state claimed not in if_states: 0");
	r = vm_read(A);
	ok(r && !strcmp(json_string_value(json_object_get(r, "state")), "claimed") &&
	   !json_object_get(r, "vcpus"), "... and the record is unchanged");
	json_decref(r);
	ok(vm_meta_update(A, NULL, set) == 1, "vm_meta_update: unconditional merge: 1");
	r = vm_read(A);
	ok(r && !strcmp(json_string_value(json_object_get(r, "state")), "booting") &&
	   json_integer_value(json_object_get(r, "vcpus")) == 2 &&
	   !strcmp(json_string_value(json_object_get(r, "name")), "brave-otter"),
	   "... merged: new members set, others kept");
	json_decref(r);
	json_decref(set);
	set = json_pack("{s:s}", "state", "running");
	ok(vm_meta_update(A, live, set) == 1, "vm_meta_update: state in if_states: 1");
	json_decref(set);
	errno = 0;
	ok(vm_meta_update(A, NULL, bad) < 0 && errno == EINVAL, "vm_meta_update: a set renaming the record is refused");
	r = vm_read(A);
	ok(r && !strcmp(json_string_value(json_object_get(r, "id")), A), "... its id stays");
	json_decref(r);
	errno = 0;
	ok(vm_meta_update(C, NULL, bad) < 0 && errno == ENOENT, "vm_meta_update: no such vm is ENOENT");
	errno = 0;
	ok(vm_meta_update("vm-x/../" A, NULL, bad) < 0 && errno == EINVAL, "vm_meta_update: a bad id is EINVAL");
	/* the supervisor's final record: always merged, the state only from a live one */
	{
		static const char *const claimed[] = { "claimed", NULL };
		json_t *al = json_pack("{s:i}", "qemu_exit", 3), *st = json_pack("{s:s}", "state", "stopped");

		ok(vm_meta_update_also(A, al, claimed, st) == 1,
		   "vm_meta_update_also: state running not in if_states: still written (1)");
		r = vm_read(A);
		ok(r && json_integer_value(json_object_get(r, "qemu_exit")) == 3 &&
			   !strcmp(json_string_value(json_object_get(r, "state")), "running"),
		   "... always merged, the state kept");
		json_decref(r);
		json_object_set_new(al, "qemu_exit", json_integer(4));
		ok(vm_meta_update_also(A, al, live, st) == 1, "vm_meta_update_also: state in if_states: 1");
		r = vm_read(A);
		ok(r && json_integer_value(json_object_get(r, "qemu_exit")) == 4 &&
			   !strcmp(json_string_value(json_object_get(r, "state")), "stopped"),
		   "... both merged");
		json_decref(r);
		errno = 0;
		ok(vm_meta_update_also(A, bad, live, st) < 0 && errno == EINVAL,
		   "vm_meta_update_also: an always renaming the record is refused");
		json_object_set_new(st, "state", json_string("running"));
		vm_meta_update(A, NULL, st); /* as the tests below want it */
		json_decref(al);
		json_decref(st);
	}
	json_decref(bad);
}

/* Staging files (".tmp.") left in vms/<id> */
static int tmp_files(const char *id)
{
	char p[PATH_MAX];
	DIR *d;
	struct dirent *de;
	int n = 0;

	snprintf(p, sizeof p, "%s/vms/%s", store_home(), id);
	if (!(d = opendir(p)))
		return -1;
	while ((de = readdir(d)))
		n += strstr(de->d_name, ".tmp.") != NULL;
	closedir(d);
	return n;
}

/* vm_meta_note: vm_meta_update's answers, its record's mode, and of its
 * fsyncs only the file's (ATOMIC_NODIRSYNC): a note whose bytes were not
 * synced could leave a torn record after a crash (lib/vm.h) */
static void test_note(void)
{
	static const char *const live[] = { "booting", "running", NULL };
	static const char *const claimed[] = { "claimed", NULL };
	json_t *set = json_pack("{s:i}", "qemu_pid", 4242), *r;
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof p, "%s/vms/%s/meta.json", store_home(), A);
	fsyncs_reset();
	ok(vm_meta_update(A, NULL, set) == 1 && fsyncs_file == 1 && fsyncs_dir == 1,
	   "vm_meta_update: 1, the file's fsync and the directory's (%d, %d)", fsyncs_file,
	   fsyncs_dir);
	json_object_set_new(set, "qemu_pid", json_integer(4343));
	fsyncs_reset();
	ok(vm_meta_note(A, claimed, set) == 0 && fsyncs_file == 0 && fsyncs_dir == 0,
	   "vm_meta_note: state running not in if_states: 0, nothing written (%d, %d fsyncs)",
	   fsyncs_file, fsyncs_dir);
	r = vm_read(A);
	ok(r && json_integer_value(json_object_get(r, "qemu_pid")) == 4242, "... the record unchanged");
	json_decref(r);
	fsyncs_reset();
	ok(vm_meta_note(A, live, set) == 1, "vm_meta_note: state in if_states: 1");
	ok(fsyncs_file == 1 && fsyncs_dir == 0,
	   "... exactly one fsync, the file's, not the directory's (%d, %d)", fsyncs_file, fsyncs_dir);
	r = vm_read(A);
	ok(r && json_integer_value(json_object_get(r, "qemu_pid")) == 4343 &&
		   !strcmp(json_string_value(json_object_get(r, "state")), "running") &&
		   !strcmp(json_string_value(json_object_get(r, "id")), A),
	   "... merged, the others kept");
	json_decref(r);
	ok(stat(p, &st) == 0 && (st.st_mode & 07777) == 0644, "... meta.json still 0644 (%o)",
	   (unsigned)(st.st_mode & 07777));
	ok(tmp_files(A) == 0, "... no temporary file left");
	errno = 0;
	ok(vm_meta_note(C, NULL, set) < 0 && errno == ENOENT, "vm_meta_note: no such vm is ENOENT");
	json_decref(set);
}

/* Two processes each merge their own members into one record, interleaved:
 * with the lock every member survives; a bare read-modify-write loses some
 * (checked by hand: json_update_locked without its flock fails this). */
#define ROUNDS 150
static void updater(const char *tag)
{
	char k[16];

	for (int i = 0; i < ROUNDS; i++) {
		json_t *s;

		snprintf(k, sizeof k, "%s%d", tag, i);
		s = json_pack("{s:i}", k, i);
		if (!s || vm_meta_update(A, NULL, s) != 1)
			_exit(1);
		json_decref(s);
	}
	_exit(0);
}

static void test_concurrent(void)
{
	pid_t p1, p2;
	int st1 = -1, st2 = -1, lost = 0;
	char k[16];
	json_t *r;

	fflush(stdout);
	if ((p1 = fork()) == 0)
		updater("a");
	if ((p2 = fork()) == 0)
		updater("b");
	waitpid(p1, &st1, 0);
	waitpid(p2, &st2, 0);
	ok(p1 > 0 && p2 > 0 && st1 == 0 && st2 == 0, "two processes updated %d times each", ROUNDS);
	r = vm_read(A);
	for (int i = 0; i < ROUNDS; i++) {
		snprintf(k, sizeof k, "a%d", i);
		lost += !json_object_get(r, k);
		snprintf(k, sizeof k, "b%d", i);
		lost += !json_object_get(r, k);
	}
	ok(r && lost == 0, "concurrent updates lost no member (%d lost)", lost);
	ok(r && !strcmp(json_string_value(json_object_get(r, "name")), "brave-otter"),
	   "... and kept the record's own");
	json_decref(r);
}

static void test_refused(void)
{
	static const char dup[] = "{\"id\":\"" C "\",\"name\":\"x\",\"name\":\"y\"}";
	static const char other[] = "{\"id\":\"" B "\",\"name\":\"x\"}";
	static const char badname[] = "{\"id\":\"" C "\",\"name\":7}";
	static const char noid[] = "{\"name\":\"x\"}";
	size_t big = JSON_MAX_BYTES + 64;
	char *huge = malloc(big);
	json_t *set = json_pack("{s:s}", "state", "running");
	char p[PATH_MAX];
	struct stat a, b;

	put_raw(C, "{\"id\":", 6);
	ok(read_fails(C, EINVAL), "vm_read: truncated JSON refused");
	put_raw(C, "[1,2]", 5);
	ok(read_fails(C, EINVAL), "vm_read: an array refused");
	put_raw(C, dup, sizeof dup - 1);
	ok(read_fails(C, EINVAL), "vm_read: a duplicate key refused");
	put_raw(C, other, sizeof other - 1);
	ok(read_fails(C, EINVAL), "vm_read: a record naming another id refused");
	put_raw(C, noid, sizeof noid - 1);
	ok(read_fails(C, EINVAL), "vm_read: a record without id refused");
	put_raw(C, badname, sizeof badname - 1);
	ok(read_fails(C, EINVAL), "vm_read: a non-string name refused");
	/* the update refuses it too, and leaves the file as it was */
	snprintf(p, sizeof p, "%s/vms/%s/meta.json", home, C);
	stat(p, &a);
	errno = 0;
	ok(vm_meta_update(C, NULL, set) < 0 && errno == EINVAL, "vm_meta_update: a malformed record is not merged into");
	ok(stat(p, &b) == 0 && a.st_ino == b.st_ino && a.st_size == b.st_size, "... and not rewritten");
	if (huge) {
		memset(huge, ' ', big);
		memcpy(huge, "{\"id\":\"" C "\"}", strlen("{\"id\":\"" C "\"}"));
		put_raw(C, huge, big);
		ok(read_fails(C, EFBIG), "vm_read: a record over JSON_MAX_BYTES refused (EFBIG)");
		errno = 0;
		ok(vm_meta_update(C, NULL, set) < 0 && errno == EFBIG, "vm_meta_update: an oversized record is refused");
	}
	free(huge);
	json_decref(set);
	put_str(C, "{\"id\":\"" C "\",\"name\":\"calm-heron\"}");
}

static void test_resolve(void)
{
	char id[VM_ID_SZ], why[512];
	json_t *r = NULL;

	put_str(B, "{\"id\":\"" B "\"}");
	ok(vm_resolve(A, id, why, sizeof why) == 0 && !strcmp(id, A), "vm_resolve: an exact id");
	ok(vm_resolve("fedc", id, why, sizeof why) == 0 && !strcmp(id, C), "vm_resolve: a prefix without vm-");
	ok(vm_resolve("vm-fed", id, why, sizeof why) == 0 && !strcmp(id, C), "vm_resolve: a prefix with vm-");
	ok(vm_resolve("brave-otter", id, why, sizeof why) == 0 && !strcmp(id, A), "vm_resolve: a name");
	ok(vm_resolve("calm-heron", id, why, sizeof why) == 0 && !strcmp(id, C), "vm_resolve: another name");
	errno = 0;
	ok(vm_resolve("0123", id, why, sizeof why) < 0 && errno == ENOTUNIQ &&
	   strstr(why, "ambiguous") && strstr(why, A) && strstr(why, B),
	   "vm_resolve: an ambiguous prefix is ENOTUNIQ listing both (%s)", why);
	errno = 0;
	ok(vm_resolve("nosuch", id, why, sizeof why) < 0 && errno == ENOENT && strstr(why, "nosuch"),
	   "vm_resolve: no match is ENOENT naming it");
	errno = 0;
	ok(vm_resolve("../x", id, why, sizeof why) < 0 && errno == EINVAL &&
	   vm_resolve("Brave", id, why, sizeof why) < 0 && vm_resolve("", id, why, sizeof why) < 0 &&
	   vm_resolve(NULL, id, why, sizeof why) < 0, "vm_resolve: bad syntax is EINVAL");
	ok(vm_open("brave", id, &r, why, sizeof why) < 0 && errno == ENOENT,
	   "vm_open: a name prefix is not a name");
	ok(vm_open("brave-otter", id, &r, why, sizeof why) == 0 && r &&
	   !strcmp(json_string_value(json_object_get(r, "state")), "running"),
	   "vm_open: resolves and reads the record");
	json_decref(r);
	put_str(B, "{\"id\":\"" A "\"}");
	errno = 0;
	ok(vm_open(B, id, &r, why, sizeof why) < 0 && errno == EIO && strstr(why, "malformed"),
	   "vm_open: a malformed record behind a good ref is the store's failure (EIO: %s)", why);
	ok(vm_exit_code(EINVAL) == 100 && vm_exit_code(ENOENT) == 101 &&
	   vm_exit_code(ENOTUNIQ) == 102 && vm_exit_code(EIO) == 111, "vm_exit_code: 100/101/102/111");
}

/* An exact id is found without reading another record: every other
 * record of this store is a FIFO, which a read would block on (the walk
 * read each entry's record before the exact id came up, in readdir's
 * order).  Under ok_bounded (a hang fails), in a store of its own. */
static void test_resolve_exact(void)
{
	char h2[] = "/tmp/isopod-vm-test2.XXXXXX", p[PATH_MAX + 64], id[VM_ID_SZ], why[512];
	const char *target = "vm-0000000000ff";

	if (!mkdtemp(h2)) {
		ok(0, "vm_resolve: mkdtemp: %s", strerror(errno));
		return;
	}
	setenv("ISOPOD_HOME", h2, 1);
	for (int i = 0; i < 24; i++) {
		snprintf(p, sizeof p, "%s/vms/vm-0000000000%02x", h2, i);
		mkdir_p(p, 0700, NULL, 0);
		snprintf(p + strlen(p), 64, "/meta.json");
		mkfifo(p, 0600);
	}
	rec_dir(target);
	ok_bounded(10, vm_resolve(target, id, why, sizeof why) == 0 && !strcmp(id, target),
		   "vm_resolve: an exact id reads no other record");
	setenv("ISOPOD_HOME", home, 1);
	snprintf(p, sizeof p, "rm -rf %s", h2);
	if (system(p) != 0)
		fprintf(stderr, "unable to remove %s\n", h2);
}

/* isopod-claim's names before the cache (main's names_load), the
 * reference vm_names must agree with: every readdir entry "vm-*" whose
 * record vm_read reads, with a name.  {id: name}. */
static json_t *names_ref(void)
{
	char dir[PATH_MAX];
	json_t *o = json_object();
	struct dirent *de;
	DIR *d;

	snprintf(dir, sizeof dir, "%s/vms", store_home());
	if (!(d = opendir(dir)))
		return o;
	while ((de = readdir(d))) {
		const char *name;
		json_t *j;

		if (strncmp(de->d_name, "vm-", 3))
			continue;
		j = vm_read(de->d_name);
		name = j ? json_string_value(json_object_get(j, "name")) : NULL;
		if (name)
			json_object_set_new(o, de->d_name, json_string(name));
		json_decref(j);
	}
	closedir(d);
	return o;
}

/* vm_names against the reference, then saved (the claim's steps): 1 when
 * they agree and it read want_reads records. */
static int names_check(size_t want_reads)
{
	char why[512];
	size_t reads = 99;
	json_t *n = vm_names(&reads, why, sizeof why), *got = json_object(), *ref = names_ref(), *e;
	const char *id;
	int r;

	json_object_foreach(json_object_get(n, "vms"), id, e)
		json_object_set(got, id, json_array_get(e, 0));
	r = n && json_equal(got, ref) && reads == want_reads;
	if (!r)
		fprintf(stderr, "# vm_names read %zu (want %zu): %s\n", reads, want_reads, n ? "" : why);
	if (n && vm_names_save(n) < 0)
		r = 0;
	json_decref(n);
	json_decref(got);
	json_decref(ref);
	return r;
}

/* vms/<id>/meta.json replaced by rename, as lib/vm.c writes it: another
 * inode (the old one still existed), maybe the same mtime and size. */
static void put_renamed(const char *id, const char *text)
{
	char p[PATH_MAX], t[PATH_MAX + 8];

	snprintf(p, sizeof p, "%s/vms/%s/meta.json", store_home(), id);
	snprintf(t, sizeof t, "%s.new", p);
	if (atomic_write(t, text, strlen(text), 0644) < 0 || rename(t, p) < 0)
		fprintf(stderr, "unable to replace %s\n", p);
}

#define NA "vm-00000000000a"
#define NB "vm-00000000000b"
#define NC "vm-00000000000c"
#define ND "vm-00000000000d"
#define NE "vm-00000000000e"

/* A store of its own at h (a mkdtemp template) for a names test, with NA
 * named dusty-toad in it; and its removal, the tests' store back. */
static int names_home(char *h)
{
	if (!mkdtemp(h)) {
		ok(0, "vm_names: mkdtemp: %s", strerror(errno));
		return -1;
	}
	setenv("ISOPOD_HOME", h, 1);
	put_str(NA, "{\"id\":\"" NA "\",\"name\":\"dusty-toad\"}");
	return 0;
}

static void names_home_gone(const char *h)
{
	char p[PATH_MAX + 32];

	setenv("ISOPOD_HOME", home, 1);
	snprintf(p, sizeof p, "rm -rf %s", h);
	if (system(p) != 0)
		fprintf(stderr, "unable to remove %s\n", h);
}

/* vm_names: the names main's scan finds, the cached ones only while their
 * meta.json is the very file they were read from. */
static void test_names(void)
{
	char h[] = "/tmp/isopod-vm-names.XXXXXX", p[PATH_MAX + 64];
	struct stat st;
	DIR *d;
	int n = 0;

	if (names_home(h) < 0)
		return;
	put_str(NB, "{\"id\":\"" NB "\",\"name\":\"amber-yak\"}");
	put_str(NC, "{\"id\":\"" NC "\"}");				/* no name */
	put_str(ND, "{\"id\":\"" NE "\",\"name\":\"not-mine\"}");	/* another id */
	put_str(NE, "{\"id\":");					/* not JSON */
	rec_dir("vm-0000000000ff");					/* no meta.json */
	put_str("vm-notanid", "{\"id\":\"vm-notanid\",\"name\":\"bad-id\"}");
	ok(names_check(6), "vm_names: no cache: main's names, every record read");
	snprintf(p, sizeof p, "%s/names.json", h);
	ok(stat(p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600,
	   "vm_names_save: <store>/names.json, 0600");
	snprintf(p, sizeof p, "%s/vms", h);
	if ((d = opendir(p))) {
		for (struct dirent *de; (de = readdir(d));)
			n += de->d_name[0] != '.';
		closedir(d);
	}
	ok(n == 7, "vm_names_save: nothing new in vms/ (%d entries, 7 records)", n);
	ok(names_check(4), "vm_names: the cached names not read again (only the 4 without one)");
	/* the same size, a new inode (the old one existed still at the
	 * rename), perhaps the same mtime: the cache's name must not stand */
	put_renamed(NA, "{\"id\":\"" NA "\",\"name\":\"dusty-newt\"}");
	ok(names_check(5), "vm_names: a record replaced (rename) read again: its new name");
	/* written in place: the same inode, another size */
	put_str(NA, "{\"id\":\"" NA "\",\"name\":\"dusty-toad-2\"}");
	ok(names_check(5), "vm_names: a record written in place read again: its new name");
	/* its meta.json gone: no name, as main */
	snprintf(p, sizeof p, "%s/vms/%s/meta.json", h, NA);
	unlink(p);
	ok(names_check(5), "vm_names: a cached record whose meta.json is gone holds no name");
	put_str(NA, "{\"id\":\"" NA "\",\"name\":\"dusty-toad-3\"}");
	ok(names_check(5), "vm_names: its meta.json back, its name read");
	/* removed (gc, rm -rf) and made anew under the same id */
	snprintf(p, sizeof p, "rm -rf %s/vms/%s", h, NB);
	if (system(p) != 0)
		fprintf(stderr, "unable to remove %s\n", NB);
	ok(names_check(4), "vm_names: a removed record's cached name is gone with it");
	put_str(NB, "{\"id\":\"" NB "\",\"name\":\"amber-yak-again\"}");
	ok(names_check(5), "vm_names: an id made anew is read: its new name");
	ok(names_check(4), "vm_names: and cached from then on");
	names_home_gone(h);
}

/* names.json as another user could leave it: A's stamp, the name a lie.
 * mode and owner set on the file; link: names.json a link to it. */
static void names_lie(const char *h, mode_t mode, uid_t uid, int link, int version)
{
	char p[PATH_MAX + 32], l[PATH_MAX + 32], why[512], *s;
	size_t reads;
	json_t *n = vm_names(&reads, why, sizeof why);

	json_array_set_new(json_object_get(json_object_get(n, "vms"), NA), 0, json_string("a-lie"));
	json_object_set_new(n, "version", json_integer(version));
	snprintf(p, sizeof p, "%s/names.json", h);
	snprintf(l, sizeof l, "%s/lie.json", h);
	unlink(p);
	unlink(l);
	s = json_dumps(n, JSON_COMPACT);
	if (!s || atomic_write(link ? l : p, s, strlen(s), 0600) < 0 ||
	    chmod(link ? l : p, mode) < 0 || chown(link ? l : p, uid, (gid_t)-1) < 0 ||
	    (link && symlink(l, p) < 0))
		fprintf(stderr, "unable to write %s\n", p);
	free(s);
	json_decref(n);
}

/* the name vm_names gives NA, *reads its reads */
static const char *names_of_a(size_t *reads, json_t **n)
{
	char why[512];

	*n = vm_names(reads, why, sizeof why);
	return json_string_value(json_array_get(json_object_get(json_object_get(*n, "vms"), NA), 0)) ?: "";
}

static void test_names_trust(void)
{
	char h[] = "/tmp/isopod-vm-names.XXXXXX", p[PATH_MAX + 32];
	size_t reads;
	json_t *n;
	FILE *f;

	if (names_home(h) < 0)
		return;
	names_check(1);
	/* the control: the lie in a file that passes is believed (what the
	 * checks below keep out) */
	names_lie(h, 0600, geteuid(), 0, 1);
	ok(!strcmp(names_of_a(&reads, &n), "a-lie") && reads == 0,
	   "vm_names: a cache of ours, 0600, is believed (the control)");
	json_decref(n);
	names_lie(h, 0620, geteuid(), 0, 1);
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
	   "vm_names: a cache its group may write is ignored");
	json_decref(n);
	names_lie(h, 0602, geteuid(), 0, 1);
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
	   "vm_names: a cache others may write is ignored");
	json_decref(n);
	if (geteuid() == 0) {
		names_lie(h, 0600, 65534, 0, 1);
		ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
		   "vm_names: a cache of another user is ignored");
		json_decref(n);
	} else {
		ok(1, "# skip vm_names: another user's cache (needs root to chown)");
	}
	names_lie(h, 0600, geteuid(), 1, 1);
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
	   "vm_names: a cache that is a link (to a file that would pass) is ignored");
	json_decref(n);
	names_lie(h, 0600, geteuid(), 0, 2);
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
	   "vm_names: a cache of another version is ignored");
	/* and rewritten: the claim's save */
	ok(n && vm_names_save(n) == 0, "vm_names_save over a cache it ignored");
	json_decref(n);
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 0,
	   "vm_names: the rewritten cache is used");
	json_decref(n);
	snprintf(p, sizeof p, "%s/names.json", h);
	if ((f = fopen(p, "w"))) {
		fputs("{not json", f);
		fclose(f);
	}
	ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
	   "vm_names: a cache that is not JSON is ignored");
	json_decref(n);
	names_home_gone(h);
}

/* A FIFO at <store>/names.json (no writer): the open must not wait for
 * one, or every claim would hang under the store lock (ok_bounded: a hang
 * fails). */
static void test_names_fifo(void)
{
	char h[] = "/tmp/isopod-vm-names.XXXXXX", p[PATH_MAX + 32];
	size_t reads;
	json_t *n;

	if (names_home(h) < 0)
		return;
	snprintf(p, sizeof p, "%s/names.json", h);
	if (mkfifo(p, 0600) < 0)
		fprintf(stderr, "unable to make %s\n", p);
	ok_bounded(10, !strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
		   "vm_names: a FIFO as names.json is ignored, not waited on");
	names_home_gone(h);
}

/* names over JSON_MAX_BYTES (which names_load could not read back) are
 * not written, and an older names.json is removed. */
static void test_names_cap(void)
{
	char h[] = "/tmp/isopod-vm-names.XXXXXX", p[PATH_MAX + 32], id[VM_ID_SZ], name[256];
	struct stat st;
	json_t *n, *vms;
	int i;

	if (names_home(h) < 0)
		return;
	names_check(1);
	snprintf(p, sizeof p, "%s/names.json", h);
	ok(stat(p, &st) == 0, "vm_names_save: names.json written (the control)");
	/* 5000 entries of ~240 bytes: ~1.2 MB */
	n = json_pack("{s:i, s:{}}", "version", NAMES_VERSION, "vms");
	vms = json_object_get(n, "vms");
	memset(name, 'n', sizeof name - 1);
	name[sizeof name - 1] = 0;
	for (i = 0; i < 5000; i++) {
		snprintf(id, sizeof id, "vm-%012x", i);
		json_object_set_new(vms, id, json_pack("[s, i, i, i, i, i]", name, 1, 2, 3, 4, 5));
	}
	errno = 0;
	ok(vm_names_save(n) == 0 && stat(p, &st) < 0 && errno == ENOENT,
	   "vm_names_save: names over JSON_MAX_BYTES not written, the older names.json removed");
	ok(vm_names_save(n) == 0, "vm_names_save: over JSON_MAX_BYTES with no names.json: 0");
	json_decref(n);
	names_home_gone(h);
}

/* names.json as vm_names would write it, but NA's entry named "a-lie" and
 * its stamp's field k (1 dev .. 5 ctime_ns; 0: none) one off: a cache of
 * ours whose one difference from NA's meta.json is that field. */
static void names_off_by_one(size_t k)
{
	char why[512];
	size_t reads;
	json_t *n = vm_names(&reads, why, sizeof why),
	       *a = json_object_get(json_object_get(n, "vms"), NA);

	json_array_set_new(a, 0, json_string("a-lie"));
	if (k)
		json_array_set_new(a, k, json_integer(json_integer_value(json_array_get(a, k)) + 1));
	if (!a || vm_names_save(n) < 0)
		fprintf(stderr, "unable to write names.json\n");
	json_decref(n);
}

/* Each field of the stamp alone: a cache entry that matches NA's
 * meta.json in all but one is not used (every write a test can make
 * changes mtime and ctime together, so test_names alone would not see
 * one comparison of the five removed). */
static void test_names_fields(void)
{
	static const char *const field[] = { "none", "dev", "ino", "size", "mtime_ns", "ctime_ns" };
	char h[] = "/tmp/isopod-vm-names.XXXXXX";
	size_t reads, k;
	json_t *n;

	if (names_home(h) < 0)
		return;
	names_check(1);
	names_off_by_one(0);
	ok(!strcmp(names_of_a(&reads, &n), "a-lie") && reads == 0,
	   "vm_names: a stamp that matches in every field is used (the control)");
	json_decref(n);
	for (k = 1; k <= 5; k++) {
		names_off_by_one(k);
		ok(!strcmp(names_of_a(&reads, &n), "dusty-toad") && reads == 1,
		   "vm_names: a stamp off in %s alone is not used: the record is read", field[k]);
		json_decref(n);
	}
	names_home_gone(h);
}

static int edit_calls;
static int edit_skip(json_t *j, void *arg)
{
	(void)arg;
	edit_calls++;
	json_object_set_new(j, "touched", json_true());
	return 0;
}

static int edit_fail(json_t *j, void *arg)
{
	(void)j;
	(void)arg;
	errno = EPERM;
	return -1;
}

/* vm_scratch_make: runs/<id>.<pid>.<start>, 0700, the start the one
 * isopod-gc compares (proc_ident); a process gone is ESRCH, nothing made. */
static void test_scratch(void)
{
	char out[PATH_MAX], want[PATH_MAX];
	unsigned long long start = 0;
	struct stat st;
	pid_t c;
	int r;

	proc_ident(getpid(), &start, NULL, NULL);
	snprintf(want, sizeof want, "%s/runs/vm-00000000aaaa.%ld.%llu", home, (long)getpid(), start);
	r = vm_scratch_make("vm-00000000aaaa", getpid(), out, sizeof out);
	ok(r == 0 && !strcmp(out, want), "vm_scratch_make: %s", out);
	ok(stat(out, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700,
	   "vm_scratch_make: a directory, 0700");
	errno = 0;
	ok(vm_scratch_make("vm-00000000aaaa", getpid(), out, sizeof out) < 0 && errno == EEXIST,
	   "vm_scratch_make: made once (EEXIST)");
	if ((c = fork()) == 0)
		_exit(0);
	waitpid(c, NULL, 0);
	errno = 0;
	r = vm_scratch_make("vm-00000000bbbb", c, out, sizeof out);
	ok(r < 0 && errno == ESRCH, "vm_scratch_make: a process gone: ESRCH");
	errno = 0;
	ok(vm_scratch_make("../x", getpid(), out, sizeof out) < 0 && errno == EINVAL,
	   "vm_scratch_make: not a vm id: EINVAL");
}

static void test_update_locked(void)
{
	char lk[PATH_MAX], p[PATH_MAX];
	json_t *r;

	snprintf(lk, sizeof lk, "%s/x.lock", home);
	snprintf(p, sizeof p, "%s/x.json", home);
	errno = 0;
	ok(json_update_locked(lk, p, edit_skip, NULL, 0) < 0 && errno == ENOENT && edit_calls == 0,
	   "json_update_locked: no file is ENOENT, edit not called");
	r = json_pack("{s:i}", "n", 1);
	json_write_atomic(p, r);
	json_decref(r);
	ok(json_update_locked(lk, p, edit_skip, NULL, 0) == 0 && edit_calls == 1,
	   "json_update_locked: edit answering 0 gives 0");
	r = json_load_path(p);
	ok(r && !json_object_get(r, "touched"), "... and the file is not written");
	json_decref(r);
	errno = 0;
	ok(json_update_locked(lk, p, edit_fail, NULL, 0) < 0 && errno == EPERM,
	   "json_update_locked: edit's -1 and errno come back");
	snprintf(lk, sizeof lk, "%s/no/such/x.lock", home);
	errno = 0;
	ok(json_update_locked(lk, p, edit_skip, NULL, 0) < 0 && errno == ENOENT && edit_calls == 1,
	   "json_update_locked: a lock that cannot be taken fails before the edit");
}

/* The ids of a vm_list answer, space separated, and whether each record
 * carries a boolean "running". */
static int list_ids(json_t *a, char *out, size_t sz)
{
	size_t i, k = 0;
	int flags_ok = 1;

	out[0] = 0;
	for (i = 0; i < json_array_size(a); i++) {
		const json_t *r = json_array_get(a, i);

		flags_ok &= json_is_boolean(json_object_get(r, "running"));
		k += (size_t)snprintf(out + k, sz - k, "%s%s", i ? " " : "",
				      json_string_value(json_object_get(r, "id")));
	}
	return flags_ok;
}

static int nskipped;
static char skipped_id[VM_ID_SZ];
static void on_skip(const char *id, int err)
{
	nskipped++;
	snprintf(skipped_id, sizeof skipped_id, "%s", err == EINVAL ? id : "?");
}

static void test_list(void)
{
	char sub[PATH_MAX], why[512], ids[256], p[PATH_MAX + 64];
	json_t *a;
	int fd;

	/* a store of its own: no vms/ yet */
	snprintf(sub, sizeof sub, "%s/list", home);
	mkdir_p(sub, 0700, NULL, 0);
	setenv("ISOPOD_HOME", sub, 1);
	a = vm_list(on_skip, why, sizeof why);
	ok(a && json_is_array(a) && json_array_size(a) == 0, "vm_list: no vms/ is an empty list");
	json_decref(a);

	/* created out of id order, a tie, one without created (first), a
	 * malformed record (skipped, reported), a directory that is no id */
#define L1 "vm-00000000000a"
#define L2 "vm-00000000000b"
#define L3 "vm-00000000000c"
#define L4 "vm-00000000000d"
#define L5 "vm-00000000000e"
	put_str(L1, "{\"id\":\"" L1 "\",\"created\":\"2026-12-01T00:00:03Z\"}");
	put_str(L2, "{\"id\":\"" L2 "\",\"created\":\"2026-12-01T00:00:01Z\"}");
	put_str(L3, "{\"id\":\"" L3 "\",\"created\":\"2026-12-01T00:00:01Z\",\"running\":\"x\"}");
	put_str(L4, "{\"id\":\"" L4 "\",\"name\":\"no-created\"}");
	put_str(L5, "{\"id\":\"" L1 "\",\"created\":\"2026-12-01T00:00:00Z\"}");
	put_str("not-an-id", "{\"id\":\"not-an-id\"}");
	/* L1 is running: its lock held exclusively, as its supervisor holds it */
	snprintf(p, sizeof p, "%s/vms/%s/lock", sub, L1);
	fd = lock_open(p, LOCK_EX);
	nskipped = 0;
	a = vm_list(on_skip, why, sizeof why);
	ok(a && list_ids(a, ids, sizeof ids) && !strcmp(ids, L4 " " L2 " " L3 " " L1),
	   "vm_list: oldest first, no created first, ties by id, each with running (%s)", ids);
	ok(nskipped == 1 && !strcmp(skipped_id, L5), "vm_list: a malformed record is skipped and reported");
	ok(a && json_is_true(json_object_get(json_array_get(a, 3), "running")) &&
	   json_is_false(json_object_get(json_array_get(a, 0), "running")) &&
	   json_is_false(json_object_get(json_array_get(a, 2), "running")),
	   "vm_list: running is the lock held (a record's own \"running\" is overwritten)");
	json_decref(a);
	/* a shared probe of another lister does not make a VM look running */
	close(fd);
	snprintf(p, sizeof p, "%s/vms/%s/lock", sub, L2);
	fd = lock_open(p, LOCK_SH);
	ok(fd >= 0 && !vm_running(L2), "vm_running: another prober's shared lock is not a running VM");
	close(fd);
	setenv("ISOPOD_HOME", home, 1);
}

int main(void)
{
	char cmd[PATH_MAX + 16];

	if (!mkdtemp(home)) {
		perror("mkdtemp");
		return 1;
	}
	setenv("ISOPOD_HOME", home, 1);
	test_create_read();
	test_update();
	test_note();
	test_concurrent();
	test_refused();
	test_resolve();
	test_resolve_exact();
	test_names();
	test_names_trust();
	test_names_fields();
	test_names_fifo();
	test_names_cap();
	test_list();
	test_update_locked();
	test_scratch();
	snprintf(cmd, sizeof cmd, "rm -rf %s", home);
	if (system(cmd) != 0)
		fprintf(stderr, "unable to remove %s\n", home);
	return tap_done();
}
