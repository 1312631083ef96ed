/* vm.c - VM records vms/<id>/meta.json (vm.h): read, create, update under
 * meta.lock, and the resolution of a VM reference.  No die(): the tools
 * decide their exit status. */
#include "vm.h"
#include "proc.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rec_path(char *buf, size_t sz, const char *id, const char *leaf)
{
	if (!id_vm_ok(id)) {
		errno = EINVAL;
		return -1;
	}
	return pathn(buf, sz, "%s/vms/%s/%s", store_home(), id, leaf);
}

/* A record is ours when it names itself: a record copied or renamed into
 * another VM's directory must not be read as that VM. */
static int rec_ok(const json_t *j, const char *id)
{
	const json_t *name = json_object_get(j, "name"), *state = json_object_get(j, "state");

	return json_is_object(j) && json_is_string(json_object_get(j, "id")) &&
	       !strcmp(json_string_value(json_object_get(j, "id")), id) &&
	       (!name || json_is_string(name)) && (!state || json_is_string(state));
}

/* vm_read, and when st is not NULL the fstat of the very file it read
 * (vm_names keeps it with the name). */
static json_t *rec_load(const char *id, struct stat *st)
{
	char p[PATH_MAX];
	json_t *j;
	int fd, e;

	if (rec_path(p, sizeof p, id, "meta.json") < 0)
		return NULL;
	/* json_load_path's open: a link followed, a FIFO waited on */
	if ((fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0 && st && fstat(fd, st) < 0) {
		e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	if (!(j = json_load_close(fd)))
		return NULL;
	if (!rec_ok(j, id)) {
		json_decref(j);
		errno = EINVAL;
		return NULL;
	}
	return j;
}

json_t *vm_read(const char *id)
{
	return rec_load(id, NULL);
}

int vm_create(const char *id, json_t *rec)
{
	char p[PATH_MAX];

	if (rec_path(p, sizeof p, id, "meta.json") < 0)
		return -1;
	if (!rec_ok(rec, id)) {
		errno = EINVAL;
		return -1;
	}
	if (access(p, F_OK) == 0) {
		errno = EEXIST;
		return -1;
	}
	return json_write_atomic(p, rec);
}

struct update {
	const char *id;
	const char *const *if_states;
	json_t *set;
	json_t *always; /* merged whatever the state, before set */
};

static int update_edit(json_t *j, void *arg)
{
	const struct update *u = arg;
	const char *st = json_string_value(json_object_get(j, "state"));
	const char *const *s = NULL;
	int match = 1;

	if (!rec_ok(j, u->id)) {
		errno = EINVAL;
		return -1;
	}
	if (u->if_states) {
		for (s = u->if_states; *s; s++)
			if (st && !strcmp(st, *s))
				break;
		match = *s != NULL;
		if (!match && !u->always)
			return 0;
	}
	/* the state as it was before always (st is the record's, borrowed) */
	if (u->always) {
		struct update a = { .id = u->id, .set = u->always };
		int r = update_edit(j, &a);

		if (r < 0 || !match)
			return r;
	}
	/* The id is the directory's: a set cannot rename the record. */
	if (json_object_get(u->set, "id") && !json_equal(json_object_get(u->set, "id"),
							 json_object_get(j, "id"))) {
		errno = EINVAL;
		return -1;
	}
	return json_object_update(j, u->set) < 0 ? (errno = ENOMEM, -1) : 1;
}

/* All below: always NULL (vm_meta_update) or an object; flags the write's
 * (json_update_locked). */
static int meta_update(const char *id, json_t *always, const char *const *if_states, json_t *set,
		       unsigned flags)
{
	char lk[PATH_MAX], p[PATH_MAX];
	struct update u = { .id = id, .if_states = if_states, .set = set, .always = always };

	if (!json_is_object(set) || (always && !json_is_object(always))) {
		errno = EINVAL;
		return -1;
	}
	if (rec_path(lk, sizeof lk, id, "meta.lock") < 0 ||
	    rec_path(p, sizeof p, id, "meta.json") < 0)
		return -1;
	return json_update_locked(lk, p, update_edit, &u, flags);
}

int vm_meta_update(const char *id, const char *const *if_states, json_t *set)
{
	return meta_update(id, NULL, if_states, set, 0);
}

int vm_meta_note(const char *id, const char *const *if_states, json_t *set)
{
	return meta_update(id, NULL, if_states, set, ATOMIC_NODIRSYNC);
}

int vm_meta_update_also(const char *id, json_t *always, const char *const *if_states,
			json_t *set)
{
	if (!always) {
		errno = EINVAL;
		return -1;
	}
	return meta_update(id, always, if_states, set, 0);
}

/* Does the record in vms/<d_name> go by the name ref? */
static int name_is(const char *d_name, const char *ref)
{
	json_t *j = vm_read(d_name);
	const char *name = j ? json_string_value(json_object_get(j, "name")) : NULL;
	int r = name && !strcmp(name, ref);

	json_decref(j);
	return r;
}

int vm_resolve(const char *ref, char id[VM_ID_SZ], char *why, size_t wsz)
{
	char dir[PATH_MAX], cands[8][VM_ID_SZ];
	size_t ncand = 0, reflen, i, k;
	DIR *d;
	struct dirent *de;

	if (!vm_ref_ok(ref)) {
		snprintf(why, wsz, "bad vm reference %s: want an id, an id prefix or a name "
			 "(1..63 of [a-z0-9-])", ref ? EXC(ref) : "(none)");
		errno = EINVAL;
		return -1;
	}
	reflen = strlen(ref);
	/* An exact id wins outright (the walk below breaks on it): one lstat,
	 * not a record read for every entry readdir gives before it (each
	 * VM's tool resolves the id it was given; gc keeps stopped records
	 * for an hour, and the newest 20 always, ~4 KiB of JSON each).  Anything else (ENOENT,
	 * an unreadable store) is the walk's to decide and to word. */
	if (id_vm_ok(ref) && pathn(dir, sizeof dir, "%s/vms/%s", store_home(), ref) == 0 &&
	    lstat(dir, &(struct stat){ 0 }) == 0) {
		memcpy(id, ref, VM_ID_SZ);
		return 0;
	}
	if (pathn(dir, sizeof dir, "%s/vms", store_home()) < 0 || !(d = opendir(dir))) {
		int e = errno;

		if (e == ENOENT)
			snprintf(why, wsz, "no such vm: %s", ref);
		else
			snprintf(why, wsz, "unable to open %s: %s", dir, strerror(e));
		errno = e;
		return -1;
	}
	while ((de = readdir(d))) {
		int match;

		if (!id_vm_ok(de->d_name))
			continue;
		if (!strcmp(de->d_name, ref)) { /* an exact id wins outright */
			ncand = 0;
			snprintf(cands[ncand++], sizeof cands[0], "%.15s", de->d_name);
			break;
		}
		match = !strncmp(de->d_name, ref, reflen) ||
			(strncmp(ref, "vm-", 3) && !strncmp(de->d_name + 3, ref, reflen)) ||
			name_is(de->d_name, ref);
		if (match && ncand < 8)
			snprintf(cands[ncand++], sizeof cands[0], "%.15s", de->d_name);
	}
	closedir(d);
	if (ncand == 0) {
		snprintf(why, wsz, "no such vm: %s", ref);
		errno = ENOENT;
		return -1;
	}
	if (ncand > 1) {
		k = (size_t)snprintf(why, wsz, "vm reference %s is ambiguous; candidates:", ref);
		for (i = 0; i < ncand && k < wsz; i++)
			k += (size_t)snprintf(why + k, wsz - k, " %s", cands[i]);
		errno = ENOTUNIQ;
		return -1;
	}
	memcpy(id, cands[0], VM_ID_SZ);
	return 0;
}

int vm_open(const char *ref, char id[VM_ID_SZ], json_t **rec, char *why, size_t wsz)
{
	if (vm_resolve(ref, id, why, wsz) < 0)
		return -1;
	if (!(*rec = vm_read(id))) {
		int e = errno;

		snprintf(why, wsz, "unable to read the record of vm %s: %s", id,
			 e == EINVAL ? "malformed (not one object naming its id)" : strerror(e));
		/* The reference was good: an unreadable record is the store's
		 * failure, not the caller's (111). */
		errno = EIO;
		return -1;
	}
	return 0;
}

/* <store>/names.json, the names vm_names found, for the next claim's:
 * {"version": 1, "vms": {ID: STAMP}}, STAMP [NAME, dev, ino, size,
 * mtime_ns, ctime_ns]: the name read from vms/ID/meta.json and the
 * identity of the very file it was read from (fstat of the fd).  Arrays,
 * not objects: 505 records made 49 KB and 0.8 ms CPU to parse, not 74 KB
 * and 1.4 ms.  Beside vms/, not in it: vms/ holds records only.
 * A cached name vouches for a verdict made when it was written: rec_load
 * read that file, rec_ok accepted it, and its "name" was that string (and
 * a record without one is left out).  Any change to what rec_ok accepts,
 * to how rec_load reads a record, or to how a name is taken from one must
 * bump NAMES_VERSION: a cache written under the old rules would keep
 * giving their answer for every record not written since. */
#define NAMES_VERSION 1

static int names_path(char *buf, size_t sz)
{
	return pathn(buf, sz, "%s/names.json", store_home());
}

static json_t *names_stamp(const char *name, const struct stat *st)
{
	int64_t v[STAT_IDENTITY_N];

	stat_identity(st, v);
	return json_pack("[s, I, I, I, I, I]", name, (json_int_t)v[0], (json_int_t)v[1],
			 (json_int_t)v[2], (json_int_t)v[3], (json_int_t)v[4]);
}

/* Whether c, a cached stamp, is a name with st's identity. */
static int stamp_holds(const json_t *c, const struct stat *st)
{
	int64_t v[STAT_IDENTITY_N];
	size_t i;

	if (json_array_size(c) != 1 + STAT_IDENTITY_N || !json_is_string(json_array_get(c, 0)))
		return 0;
	stat_identity(st, v);
	for (i = 0; i < STAT_IDENTITY_N; i++)
		if (!json_is_integer(json_array_get(c, i + 1)) ||
		    json_integer_value(json_array_get(c, i + 1)) != (json_int_t)v[i])
			return 0;
	return 1;
}

/* The cache's "vms", or NULL: absent, unreadable, not JSON, another
 * version -- the records are read then, as without it.  Only a regular
 * file of our euid that no other user may write (opened without following
 * a link): a name another user planted could hide a record's name from the
 * check, and two VMs would then share it (json_load_ours, the rule of
 * the jail's deps cache and the host's accelerator verdict too). */
static json_t *names_load(void)
{
	char p[PATH_MAX];
	json_t *j, *vms;

	if (names_path(p, sizeof p) < 0)
		return NULL;
	j = json_load_ours(p);
	vms = json_object_get(j, "vms");
	if (json_integer_value(json_object_get(j, "version")) != NAMES_VERSION || !json_is_object(vms))
		vms = NULL;
	json_incref(vms);
	json_decref(j);
	return vms;
}

json_t *vm_names(size_t *reads, char *why, size_t wsz)
{
	char dir[PATH_MAX], meta[VM_ID_SZ + sizeof "/meta.json"];
	json_t *was = names_load(), *vms = json_object(), *out = NULL;
	struct dirent *de;
	struct stat st;
	DIR *d = NULL;
	int e = 0;

	*reads = 0;
	if (!vms || !(out = json_pack("{s:i, s:O}", "version", NAMES_VERSION, "vms", vms))) {
		e = ENOMEM;
		snprintf(why, wsz, "unable to allocate memory");
		goto out;
	}
	if (pathn(dir, sizeof dir, "%s/vms", store_home()) < 0 || !(d = opendir(dir))) {
		e = errno;
		snprintf(why, wsz, "unable to open %s: %s", dir, strerror(e));
		goto out;
	}
	/* readdir's end or error ends the scan, as isopod-claim's own did */
	while ((de = readdir(d))) {
		json_t *c = json_object_get(was, de->d_name), *s, *rec;
		const char *name;

		if (!id_vm_ok(de->d_name))
			continue;
		/* A cached name holds only while the record's meta.json is the
		 * very file it was read from, unchanged: every write of a
		 * record (rename of a new file: another inode; in place: mtime,
		 * ctime, size) and every record removed (gc, rm -rf) or made
		 * anew under the same id fails this, and is read again below.
		 * Ids the cache has and vms/ no longer has are never asked.
		 * fstatat follows a link as the read's open does.  One case
		 * passes unseen, accepted: on a filesystem whose timestamps
		 * are coarse (a second, not ns), a meta.json written in place,
		 * or replaced by a file that reuses the freed inode number,
		 * within one tick and at the same size.  isopod never rewrites
		 * a name after the claim, so only a hand edit of meta.json
		 * could be missed, until the record's next write. */
		snprintf(meta, sizeof meta, "%.15s/meta.json", de->d_name); /* an id is 15 */
		if (c && fstatat(dirfd(d), meta, &st, 0) == 0 && stamp_holds(c, &st)) {
			if (json_object_set(vms, de->d_name, c) < 0)
				e = ENOMEM;
		} else {
			++*reads;
			/* as vm_read: a record that cannot be read, or has no
			 * name, holds none */
			rec = rec_load(de->d_name, &st);
			name = json_string_value(json_object_get(rec, "name"));
			if (name && (!(s = names_stamp(name, &st)) ||
				     json_object_set_new(vms, de->d_name, s) < 0))
				e = ENOMEM;
			json_decref(rec);
		}
		if (e) {
			snprintf(why, wsz, "unable to allocate memory");
			break;
		}
	}
out:
	if (d)
		closedir(d);
	json_decref(was);
	json_decref(vms);
	if (e) {
		json_decref(out);
		errno = e;
		return NULL;
	}
	return out;
}

int vm_names_save(json_t *names)
{
	char p[PATH_MAX], *s;
	size_t n;
	int r;

	if (names_path(p, sizeof p) < 0)
		return -1;
	if (!(s = json_dumps(names, JSON_COMPACT))) {
		errno = ENOMEM;
		return -1;
	}
	/* Over the loaders' cap names_load could not read it back: not
	 * written at all (each claim in a store that large would otherwise
	 * write 1 MiB and more under the store lock for nothing; it reads
	 * every record, as without a cache), and an older one removed: never
	 * rewritten again, it would be parsed by every claim for ever fewer
	 * of the records (still right: each of its names is checked). */
	if ((n = strlen(s)) > JSON_MAX_BYTES) {
		free(s);
		return unlink(p) < 0 && errno != ENOENT ? -1 : 0;
	}
	/* No fsync: a cache needs no durability.  One a crash lost or tore
	 * is ignored (absent, not JSON) or, an older one, checked name by
	 * name as any cache is, and the next claim rebuilds it; the rename
	 * alone keeps a reader from half a file.  The two fsyncs held the
	 * store lock, which every claim waits on, for nothing. */
	r = atomic_write(p, s, n, 0600 | ATOMIC_NOSYNC);
	free(s);
	return r;
}

/* Oldest first; "created" missing (or not a string) sorts as "", as the
 * shell's `sort_by(.created // "")` did; ties by id (the directory order
 * the shell's glob gave). */
static const char *created_of(const json_t *rec)
{
	const char *c = json_string_value(json_object_get(rec, "created"));

	return c ? c : "";
}

static int rec_cmp(const void *a, const void *b)
{
	const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(created_of(x), created_of(y));

	return c ? c : strcmp(json_string_value(json_object_get(x, "id")),
			      json_string_value(json_object_get(y, "id")));
}

json_t *vm_list(void (*skip)(const char *id, int err), char *why, size_t wsz)
{
	char dir[PATH_MAX];
	json_t **v = NULL, *out;
	size_t n = 0, cap = 0, i;
	DIR *d;
	struct dirent *de;
	int e = 0;

	if (pathn(dir, sizeof dir, "%s/vms", store_home()) < 0 || !(d = opendir(dir))) {
		e = errno;
		if (e == ENOENT)
			return json_array();
		snprintf(why, wsz, "unable to open %s: %s", dir, strerror(e));
		errno = e;
		return NULL;
	}
	while ((errno = 0, de = readdir(d))) {
		json_t *rec;

		if (!id_vm_ok(de->d_name))
			continue;
		if (!(rec = vm_read(de->d_name))) {
			if (skip)
				skip(de->d_name, errno);
			continue;
		}
		if (json_object_set_new(rec, "running", json_boolean(vm_running(de->d_name))) < 0) {
			json_decref(rec);
			e = ENOMEM;
			break;
		}
		if (n == cap) {
			json_t **nv = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);

			if (!nv) {
				json_decref(rec);
				e = ENOMEM;
				break;
			}
			v = nv;
		}
		v[n++] = rec;
	}
	if (!e && errno)
		e = errno;
	closedir(d);
	if (!e && n)
		qsort(v, n, sizeof *v, rec_cmp);
	out = e ? NULL : json_array();
	for (i = 0; i < n; i++) {
		if (out && json_array_append(out, v[i]) < 0) {
			json_decref(out);
			out = NULL;
			e = ENOMEM;
		}
		json_decref(v[i]);
	}
	free(v);
	if (!out) {
		snprintf(why, wsz, "unable to list %s: %s", dir, strerror(e ? e : ENOMEM));
		errno = e ? e : ENOMEM;
	}
	return out;
}

int vm_exit_code(int err)
{
	return exit_code_of(err);
}

int vm_stopped_on_purpose(const char *id, char *why, size_t wsz)
{
	json_t *r = vm_read(id);
	const char *b = json_string_value(json_object_get(r, "stopped_by"));
	int yes = b && (!strcmp(b, "owner") || !strcmp(b, "signal"));

	if (yes)
		snprintf(why, wsz, "stopped_by %s", b);
	json_decref(r);
	return yes;
}

void vm_resume_undo(const char *id, const char *qlog, const char *keep)
{
	json_t *m;

	rename(qlog, keep);
	m = json_pack("{s:s, s:n, s:n, s:n, s:n, s:n, s:n}", "state", "booting", "error",
		      "stopped_at", "qemu_exit", "stopped_by", "supervisor_pid", "qemu_pid");
	if (!m || vm_meta_update(id, NULL, m) < 0)
		warn("unable to update the record of %s:", id);
	json_decref(m);
}

int vm_scratch_make(const char *id, long long pid, char *out, size_t sz)
{
	char runs[PATH_MAX];
	unsigned long long start;

	out[0] = 0;
	if (!id_vm_ok(id)) {
		errno = EINVAL;
		return -1;
	}
	if (proc_ident(pid, &start, NULL, NULL) < 0) {
		errno = ESRCH;
		return -1;
	}
	if (pathn(runs, sizeof runs, "%s/runs", store_home()) < 0 ||
	    pathn(out, sz, "%s/%s.%lld.%llu", runs, id, pid, start) < 0)
		return -1;
	if ((mkdir(runs, 0700) < 0 && errno != EEXIST) || mkdir(out, 0700) < 0)
		return -1;
	return 0;
}
