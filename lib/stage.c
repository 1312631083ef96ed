/* stage.c - the stage store (see stage.h). */
#include "image.h"
#include "proc.h"
#include "qjail.h"
#include "stage.h"
#include "util.h"
#include "warm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
	/* A label is shown on terminals and written into JSON: no control
	 * bytes (they could drive the terminal), and valid UTF-8 (jansson
	 * refuses anything else: the stage would list as nothing). */
	for (const char *s = label; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return "a label cannot contain control characters";
	if (!utf8_valid(label, n))
		return "a label must be valid UTF-8";
	if (label[0] == '-' || label[0] == '.')
		return "a label cannot start with '-' or '.'";
	return NULL;
}

const char *label_reserved(const char *label)
{
	char p[PATH_MAX];
	struct stat st;

	for (const char *const *f = image_flavors; *f; f++)
		if (!strcmp(label, *f))
			return "it is reserved: a base flavor has that name (--stage FLAVOR runs on the base)";
	if (!strchr(label, '/') && strcmp(label, ".") && strcmp(label, "..") &&
	    pathn(p, sizeof p, "%s/images/current-%s", store_home(), label) == 0 &&
	    lstat(p, &st) == 0)
		return "it is reserved: a base flavor of this store has that name (--stage FLAVOR runs on the base)";
	return NULL;
}

json_t *stage_meta(const char *id)
{
	char p[PATH_MAX];

	if (!id_stage_ok(id)) {
		errno = ENOENT;
		return NULL;
	}
	if (pathn(p, sizeof p, "%s/stages/%s/meta.json", store_home(), id) < 0)
		return NULL;
	return json_load_path(p);
}

/* Call fn for each complete stage (not .tmp-*). */
static void each_stage(void (*fn)(const char *id, json_t *m, void *arg), void *arg)
{
	char dir[PATH_MAX];
	DIR *d;
	struct dirent *de;

	d = pathn(dir, sizeof dir, "%s/stages", store_home()) < 0 ? NULL : opendir(dir);
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

static void on_base(const char *id, json_t *m, void *argp)
{
	json_t *a = argp;
	const char *b = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));

	if (b && !strcmp(b, json_string_value(json_array_get(a, 0))))
		json_array_append_new(a, json_string(id));
}

json_t *stages_on_base(const char *sha)
{
	json_t *a = json_pack("[s]", sha);
	size_t i, j;

	if (!a)
		return NULL;
	each_stage(on_base, a);
	json_array_remove(a, 0);
	/* readdir order is the file system's: sort by id (a handful) */
	for (i = 1; i < json_array_size(a); i++)
		for (j = i; j > 0 && strcmp(json_string_value(json_array_get(a, j - 1)),
					    json_string_value(json_array_get(a, j))) > 0; j--) {
			json_t *t = json_incref(json_array_get(a, j - 1));

			json_array_set(a, j - 1, json_array_get(a, j));
			json_array_set_new(a, j, t);
		}
	return a;
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

int stage_find(const char *ref, char *id, size_t idsz, char *why, size_t wsz)
{
	struct findarg a;

	memset(&a, 0, sizeof a);
	a.ref = ref;
	/* An id, id prefix, name and label all have a label's syntax: a ref
	 * that has not is refused before anything is looked up. */
	if (label_invalid(ref)) {
		snprintf(why, wsz, "bad stage reference %s: %s", EXC(ref), label_invalid(ref));
		errno = EINVAL;
		return -1;
	}
	each_stage(find_one, &a);
	if (a.exact[0]) {
		snprintf(id, idsz, "%s", a.exact);
		return 1;
	}
	if (a.n == 0)
		return 0;
	if (a.n > 1) {
		char list[DIAG_MAX / 2] = "";
		size_t k = 0;

		for (int i = 0; i < a.n && i < 16 && k < sizeof list; i++) {
			json_t *m = stage_meta(a.cand[i]);
			const char *l = m ? json_string_value(json_object_get(m, "label")) : NULL;

			k += (size_t)snprintf(list + k, sizeof list - k, " %s%s%s%s", a.cand[i],
					      l ? " (" : "", l ? l : "", l ? ")" : "");
			json_decref(m);
		}
		snprintf(why, wsz, "stage reference %s is ambiguous; candidates:%s", EXC(ref), list);
		errno = ENOTUNIQ;
		return -1;
	}
	snprintf(id, idsz, "%s", a.cand[0]);
	return 1;
}

int stage_resolve(const char *ref, char *id, size_t idsz, char *why, size_t wsz)
{
	int r = stage_find(ref, id, idsz, why, wsz);

	if (r == 0) {
		snprintf(why, wsz, "no such stage: %s", EXC(ref));
		errno = ENOENT;
	}
	return r == 1 ? 0 : -1;
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
	struct labelarg a = { .label = label, .holder = holder, .hsz = hsz, .found = 0 };

	each_stage(label_one, &a);
	return a.found;
}

int base_current(const char *flavor, char *sha, size_t shasz)
{
	char p[PATH_MAX], buf[128];
	FILE *f;

	f = pathn(p, sizeof p, "%s/images/current-%s", store_home(), flavor) < 0 ? NULL
										  : fopen(p, "re");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof buf, f)) {
		fclose(f);
		errno = EINVAL;
		return -1;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	if (!hex64_ok(buf)) {
		errno = EINVAL;
		return -1;
	}
	snprintf(sha, shasz, "%s", buf);
	return 0;
}

/* Errors as stage_verify_chain's. */
static int verify_layer(const char *id, json_t *meta, const char *path, char *why, size_t wsz)
{
	char msg[PATH_MAX + 512];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	char *argv[] = {"qemu-img", "check", "-q", "-f", "qcow2", (char *)path, NULL};
	int rc;

	if (fd < 0) {
		snprintf(why, wsz, "stage %s is broken: its layer %s: %s", id, path, strerror(errno));
		return -1;
	}
	/* The seal first: it is O(1), and a layer with flipped data bytes is
	 * still a qcow2 that `qemu-img check` accepts. */
	if (layer_sealed(id, meta, fd, path, msg, sizeof msg) < 0) {
		close(fd);
		snprintf(why, wsz, "%s", msg);
		return -1;
	}
	/* Before `qemu-img check` (root) opens it: no external data file. */
	if (qcow2_header_ok(fd, msg, sizeof msg) < 0) {
		close(fd);
		snprintf(why, wsz, "stage %s is broken: its layer %s: %s", id, path, msg);
		return -1;
	}
	close(fd);
	/* A jailed QEMU wrote this layer: `qemu-img check` parses it in the
	 * jail (lib/qjail.c qjail_img), the layer and its chain read-only. */
	rc = qjail_img(&(struct qimg_req){ .av = argv, .reads = &path, .nreads = 1, .chain = 1,
					.outfd = PROC_NULL, .errfd = PROC_NULL },
		       msg, sizeof msg);
	if (rc < 0) {
		snprintf(why, wsz, "stage %s: its layer %s could not be checked: %s", id, path, msg);
		return -1;
	}
	if (rc != 0) {
		snprintf(why, wsz, "stage %s is broken: its layer %s fails `qemu-img check` "
			 "(truncated or corrupt)", id, path);
		return -1;
	}
	return 0;
}

int stage_verify_chain(const char *id, char *why, size_t wsz)
{
	char cur[64], p[PATH_MAX];
	int hops = 0;

	snprintf(cur, sizeof cur, "%s", id);
	for (;;) {
		json_t *m = stage_meta(cur);
		const char *parent, *bsha;

		if (!m) {
			snprintf(why, wsz, "stage %s is broken: its meta.json is missing or unreadable",
				 cur);
			return -1;
		}
		if (pathn(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), cur) < 0 ||
		    verify_layer(cur, m, p, why, wsz) < 0) {
			if (!p[0])
				snprintf(why, wsz, "stage %s: its layer's path is too long", cur);
			json_decref(m);
			return -1;
		}
		parent = json_string_value(json_object_get(m, "parent"));
		if (!parent) {
			bsha = json_string_value(json_object_get(json_object_get(m, "base"), "sha256"));
			if (pathn(p, sizeof p, "%s/images/base-%s.img", store_home(),
				  bsha ? bsha : "none") < 0 || access(p, R_OK) < 0) {
				snprintf(why, wsz, "stage %s is broken: its base image %s: %s", cur, p,
					 strerror(errno));
				json_decref(m);
				return -1;
			}
			json_decref(m);
			return 0;
		}
		snprintf(p, sizeof p, "%.63s", parent);
		json_decref(m);
		snprintf(cur, sizeof cur, "%.63s", p);
		if (++hops > 64) {
			snprintf(why, wsz, "stage %s: the chain is longer than 64 (a loop?)", id);
			return -1;
		}
	}
}

json_t *seal_new(const struct stat *st)
{
	char now[32];

	/* The same identity as a warm snapshot's memory file (size, inode,
	 * ctime), and mtime as well. */
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:n}", "bytes",
			 (json_int_t)st->st_size, "ino", (json_int_t)st->st_ino, "ctime_s",
			 (json_int_t)st->st_ctim.tv_sec, "ctime_ns", (json_int_t)st->st_ctim.tv_nsec,
			 "mtime_s", (json_int_t)st->st_mtim.tv_sec, "mtime_ns",
			 (json_int_t)st->st_mtim.tv_nsec, "sealed", iso_now(now, sizeof now), "hash",
			 "pending", "sha256");
}

/* A seal member as an integer, or -1 when absent. */
static long long seal_int(json_t *seal, const char *key)
{
	json_t *v = json_object_get(seal, key);

	return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

int seal_matches(json_t *seal, const struct stat *st, char *why, size_t wsz)
{
	if (seal_int(seal, "bytes") != (long long)st->st_size) {
		snprintf(why, wsz, "it is %lld bytes, sealed at %lld", (long long)st->st_size,
			 seal_int(seal, "bytes"));
		return 0;
	}
	if (seal_int(seal, "ino") != (long long)st->st_ino) {
		snprintf(why, wsz, "it is inode %lld, sealed as %lld (the file was replaced)",
			 (long long)st->st_ino, seal_int(seal, "ino"));
		return 0;
	}
	if (seal_int(seal, "ctime_s") != (long long)st->st_ctim.tv_sec ||
	    seal_int(seal, "ctime_ns") != (long long)st->st_ctim.tv_nsec) {
		snprintf(why, wsz, "its ctime is %lld.%09ld, sealed as %lld.%09lld (written, "
			 "truncated, chmod'ed or chown'ed since)", (long long)st->st_ctim.tv_sec,
			 st->st_ctim.tv_nsec, seal_int(seal, "ctime_s"), seal_int(seal, "ctime_ns"));
		return 0;
	}
	if (seal_int(seal, "mtime_s") != (long long)st->st_mtim.tv_sec ||
	    seal_int(seal, "mtime_ns") != (long long)st->st_mtim.tv_nsec) {
		snprintf(why, wsz, "its mtime is %lld.%09ld, sealed as %lld.%09lld",
			 (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, seal_int(seal, "mtime_s"),
			 seal_int(seal, "mtime_ns"));
		return 0;
	}
	return 1;
}

int layer_sealed(const char *id, json_t *meta, int fd, const char *path, char *msg, size_t msz)
{
	json_t *seal = json_object_get(meta, "seal");
	const char *h = json_string_value(json_object_get(seal, "hash"));
	char why[256];
	struct stat st;

	if (!json_is_object(seal)) {
		/* Trust on first use stays the owner's decision, never a side
		 * effect of a fork. */
		snprintf(msg, msz, "stage %s: its layer %s has no seal (committed before isopod sealed "
			 "layers); check what it holds, then seal it as it is now with `isopod stage "
			 "verify --reseal %s`", id, path, id);
		return -1;
	}
	if (h && !strcmp(h, "changed")) {
		snprintf(msg, msz, "stage %s is broken: its layer %s changed after it was committed, "
			 "before its bytes were hashed (%s); remove the stage",
			 id, path, json_string_value(json_object_get(seal, "hash_error")) ?: "changed");
		return -1;
	}
	if (fstat(fd, &st) < 0) {
		snprintf(msg, msz, "stage %s: unable to stat its layer %s: %s", id, path, strerror(errno));
		return -1;
	}
	if (!seal_matches(seal, &st, why, sizeof why)) {
		snprintf(msg, msz, "stage %s is broken: its layer %s changed after it was sealed: %s; "
			 "`isopod stage verify %s` re-hashes the chain", id, path, why, id);
		return -1;
	}
	return 0;
}

int stage_chain_sealed(const char *id, char *msg, size_t msz)
{
	char cur[64], p[PATH_MAX];

	snprintf(cur, sizeof cur, "%.63s", id);
	for (int hops = 0; hops <= 64; hops++) {
		json_t *m = stage_meta(cur);
		const char *parent;
		int fd, r;

		if (!m) {
			snprintf(msg, msz, "stage %s is broken: its meta.json is missing or unreadable", cur);
			return -1;
		}
		fd = pathn(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), cur) < 0
			     ? -1 : open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0) {
			snprintf(msg, msz, "stage %s is broken: its layer %s: %s", cur, p, strerror(errno));
			json_decref(m);
			return -1;
		}
		r = layer_sealed(cur, m, fd, p, msg, msz);
		close(fd);
		parent = json_string_value(json_object_get(m, "parent"));
		if (r < 0 || !parent) {
			json_decref(m);
			return r;
		}
		snprintf(p, sizeof p, "%.63s", parent);
		json_decref(m);
		snprintf(cur, sizeof cur, "%.63s", p);
	}
	snprintf(msg, msz, "stage %s: the chain is longer than 64 (a loop?)", id);
	return -1;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

int layer_hash(int fd, char sha[65], struct stat *after)
{
	struct stat before;

	if (fstat(fd, &before) < 0 || lseek(fd, 0, SEEK_SET) < 0 || sha256_fd(fd, sha) < 0 ||
	    fstat(fd, after) < 0)
		return -1;
	return same_file(&before, after) ? 0 : 1;
}

struct seal_set {
	json_t *expect, *seal;
};

static int seal_edit(json_t *m, void *arg)
{
	const struct seal_set *ss = arg;

	if (ss->expect && !json_equal(json_object_get(m, "seal"), ss->expect))
		return 0;
	return json_object_set(m, "seal", ss->seal) < 0 ? (errno = ENOMEM, -1) : 1;
}

int seal_store(const char *id, json_t *expect, json_t *seal)
{
	char p[PATH_MAX], mp[PATH_MAX], ld[PATH_MAX];
	struct seal_set ss = {.expect = expect, .seal = seal};
	int r;

	if (!id_stage_ok(id))
		return 0; /* no such stage, as stage_meta says */
	if (pathn(mp, sizeof mp, "%s/stages/%s/meta.json", store_home(), id) < 0 ||
	    pathn(ld, sizeof ld, "%s/locks", store_home()) < 0 ||
	    pathn(p, sizeof p, "%s/locks/store", store_home()) < 0)
		return -1;
	/* Not store_lock(): that makes the directories, and a late hasher
	 * must not bring back a store removed meanwhile. */
	if (access(ld, F_OK) < 0) {
		if (access(mp, F_OK) < 0)
			return errno == ENOENT ? 0 : -1;
		if (mkdir(ld, 0700) < 0 && errno != EEXIST)
			return -1;
	}
	r = json_update_locked(p, mp, seal_edit, &ss, 0);
	return r < 0 && errno == ENOENT ? 0 : r;
}

/* The background hasher's body (never returns). */
__attribute__((noreturn)) static void seal_hasher(const char *id)
{
	char p[PATH_MAX], sha[65], why[256], now[32];
	const char *gate = getenv("ISOPOD_TEST_SEAL_WAIT");
	json_t *m = stage_meta(id), *seal, *done;
	struct stat st;
	int fd, r;

	if (!m || !json_is_object((seal = json_object_get(m, "seal"))))
		_exit(0);
	seal = json_deep_copy(seal);
	json_decref(m);
	done = json_deep_copy(seal);
	/* Below the foreground's work: it is a check, not a step of a run. */
	setpriority(PRIO_PROCESS, 0, 10);
	syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, 2 << 13 | 7 /* best effort, lowest */);
	/* Tests hold the window between seal and hash open until they have
	 * written into it (the file appears), never longer than 60 s: a poll,
	 * not a fixed delay that is either slow or too short under load. */
	if (gate && *gate) {
		int64_t end = mono_ms() + 60000;

		while (access(gate, F_OK) < 0 && mono_ms() < end)
			usleep(20 * 1000);
	}
	fd = pathn(p, sizeof p, "%s/stages/%s/layer.qcow2", store_home(), id) < 0
		     ? -1 : open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &st) < 0) {
		json_object_set_new(done, "hash", json_string("failed"));
		json_object_set_new(done, "hash_error", json_sprintf("open: %s", strerror(errno)));
	} else if (!seal_matches(seal, &st, why, sizeof why)) {
		/* Never seal bytes other than the committed ones. */
		json_object_set_new(done, "hash", json_string("changed"));
		json_object_set_new(done, "hash_error", json_sprintf("before the hash: %s", why));
	} else if ((r = layer_hash(fd, sha, &st)) < 0) {
		json_object_set_new(done, "hash", json_string("failed"));
		json_object_set_new(done, "hash_error", json_sprintf("read: %s", strerror(errno)));
	} else if (r > 0 || !seal_matches(seal, &st, why, sizeof why)) {
		json_object_set_new(done, "hash", json_string("changed"));
		json_object_set_new(done, "hash_error",
				    json_string("the file was written while it was hashed"));
	} else {
		json_object_set_new(done, "hash", json_string("done"));
		json_object_set_new(done, "sha256", json_string(sha));
		json_object_set_new(done, "hashed", json_string(iso_now(now, sizeof now)));
	}
	/* Only over the seal it started from: a reseal meanwhile wins. */
	seal_store(id, seal, done);
	_exit(0);
}

int stage_seal_spawn(const char *id)
{
	pid_t pid;
	int st;

	if (strncmp(id, "st-", 3) || strchr(id, '/')) {
		errno = EINVAL;
		return -1;
	}
	fflush(NULL); /* nothing buffered is written twice */
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* The middle child: a session of its own (no terminal's
		 * signals), forks the hasher and exits at once, so the caller
		 * reaps it now and the hasher, re-parented, leaves no zombie
		 * and outlives the caller. */
		struct proc_spec ps = PROC_SPEC(NULL);
		pid_t g;

		/* stdio /dev/null, every other fd closed: the store lock, a
		 * pipe the caller's caller reads to EOF, ... */
		ps.setsid = 1;
		if (proc_child_setup(&ps, getppid()) < 0)
			_exit(1);
		g = fork();
		if (g != 0)
			_exit(g < 0 ? 1 : 0);
		if (store_home()[0] == '/' && chdir("/") < 0)
			_exit(1);
		seal_hasher(id);
	}
	if (proc_wait(pid, &st) < 0)
		return -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		errno = ECHILD;
		return -1;
	}
	return 0;
}
