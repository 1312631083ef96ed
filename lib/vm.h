/* vm.h - VM records, vms/<id>/meta.json: the one reader and writer.
 *
 * A record is created once (isopod-claim, under the store lock) and from
 * then on only merged into under vms/<id>/meta.lock; every write is atomic
 * (tmp + fsync + rename), so a reader always sees a whole record and needs
 * no lock.  Nothing here exits: errors are -1/NULL with errno, and a
 * sentence in why where there is one; the tool decides its exit status
 * (vm_exit_code).  The record's members: doc/INTERFACES.md. */
#ifndef ISOPOD_VM_H
#define ISOPOD_VM_H

#include <jansson.h>
#include <stddef.h>

/* "vm-" + 12 lower-case hex + NUL */
#define VM_ID_SZ 16

/* The record of id: a JSON object whose "id" is id (and whose "name" and
 * "state", when present, are strings).  NULL with errno: EINVAL a bad id
 * or a malformed record (not JSON, not an object, a duplicate key, another
 * id), EFBIG over JSON_MAX_BYTES, ENOENT no such record. */
json_t *vm_read(const char *id);

/* Write the first record of id into the existing directory vms/<id>:
 * rec must carry "id" = id.  -1 with errno (EEXIST: it has a record). */
int vm_create(const char *id, json_t *rec);

/* Conditional read-modify-write under vms/<id>/meta.lock: when if_states is
 * NULL or lists the record's current state (NULL-terminated), every member
 * of set is merged into the record and it is written atomically.  1
 * updated, 0 state did not match, -1 errno (EINVAL as vm_read).  set is not
 * stolen. */
int vm_meta_update(const char *id, const char *const *if_states, json_t *set);
/* The same for a note of the running VM that the supervisor's final record
 * (a vm_meta_update_also, fully synced) carries again: its bytes are
 * fsynced before the rename (never a torn record), the directory not
 * (ATOMIC_NODIRSYNC).  A host crash may then keep the record as it was
 * before the note: whole, and in a state isopod-gc already handles (booting
 * or running with a free lock: failed), of a VM the crash ended; and beside
 * it, for a window of seconds (the next journal commit) rather than
 * milliseconds, the note's meta.json.<rnd>.tmp.<pid>, which isopod-gc's
 * tmp sweep removes and reports as leaked ("tmp"), or which goes with the
 * directory (one still handed to the jail is not swept).  Not for
 * the turn from claimed to booting (only a claimed record can be booted:
 * that one must be durable before the disk is written), nor for what a
 * caller is told of and a crash does not make untrue (a claim, a result). */
int vm_meta_note(const char *id, const char *const *if_states, json_t *set);
/* The same, with always merged first whatever the state, in the same one
 * locked write (a supervisor's final record: one write and its fsyncs, not
 * two).  1 written (always, and set when the state matched), -1 errno. */
int vm_meta_update_also(const char *id, json_t *always, const char *const *if_states,
			json_t *set);

/* Resolve ref (an id, a unique id prefix with or without "vm-", or a vanity
 * name; vm_ref_ok syntax) to an id.  0, or -1 with errno and a sentence in
 * why: EINVAL bad syntax, ENOENT nothing matches, ENOTUNIQ ambiguous (the
 * candidates listed), another errno the store could not be read. */
int vm_resolve(const char *ref, char id[VM_ID_SZ], char *why, size_t wsz);

/* vm_resolve then vm_read: the one way a per-VM tool finds its VM.  *rec
 * gets the record (the caller's reference).  0, or -1 as vm_resolve and
 * vm_read (a record that cannot be read is named in why). */
int vm_open(const char *ref, char id[VM_ID_SZ], json_t **rec, char *why, size_t wsz);

/* Every record in the store, oldest first: a JSON array of the records
 * (vm_read) of the directories vms/vm-<12 hex>, each with "running" set
 * (vm_running: its lock is held), sorted by "created" (a string; a record
 * without one first) and then by id.  A record vm_read refuses is left out
 * and, when skip is not NULL, passed to it with vm_read's errno.  No vms/
 * is an empty array.  NULL with errno and a sentence in why when vms/
 * cannot be read. */
json_t *vm_list(void (*skip)(const char *id, int err), char *why, size_t wsz);

/* The names of the store's records, for isopod-claim's uniqueness check
 * (under the store lock): {"version": 1, "vms": {ID: [NAME, dev, ino,
 * size, mtime_ns, ctime_ns]}}, a member for each vms/ID
 * whose record (vm_read) has a name: the name and the identity of the
 * meta.json it was read from.  The name is taken from <store>/names.json
 * (the last vm_names_save) without reading the record only while that
 * meta.json's identity is still the one the cache recorded; the cache
 * trusted only when ours (below).  The same names as vm_read of every
 * record; *reads the records it read.  NULL with errno and a sentence in
 * why when vms/ cannot be opened, or memory is short. */
json_t *vm_names(size_t *reads, char *why, size_t wsz);
/* names (vm_names's) written to <store>/names.json (0600, atomically, no
 * fsync), for the next vm_names; over JSON_MAX_BYTES (which vm_names could
 * not read) not written, and an older one removed.  0, or -1 with errno:
 * a cache only, the next vm_names then reads the records. */
int vm_names_save(json_t *names);

/* 1 when the supervisor ended VM id on purpose (its record's stopped_by
 * owner or signal: the owner gone, a signal), why saying which. */
int vm_stopped_on_purpose(const char *id, char *why, size_t wsz);

/* A failed resume left its QEMU's log (qlog) and a record saying failed:
 * keep the log beside the next one (renamed to keep), put the record back
 * to booting (a warning when it cannot). */
void vm_resume_undo(const char *id, const char *qlog, const char *keep);

/* The scratch directory of isopod run (the front end, process pid) for VM
 * id, made so that a run starts no mktemp(1) for it (isopod-claim and
 * isopod-pool take --scratch): runs/<id>.<pid>.<start> under the store,
 * 0700, its owner's start (clock ticks since boot, proc_ident) in its
 * name, so that isopod-gc knows it leaked once that process is gone (a
 * SIGKILLed front end's), a pid reused since included.  Its path in out
 * (also on failure, when known).  0, or -1 with errno: ESRCH no such
 * process, EINVAL a bad id, else mkdir's. */
int vm_scratch_make(const char *id, long long pid, char *out, size_t sz);

/* The exit status (doc/INTERFACES.md) for a failure of the above:
 * EINVAL 100, ENOENT 101, ENOTUNIQ 102, anything else 111. */
int vm_exit_code(int err);

#endif
