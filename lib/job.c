/* job.c - isopod-runner's job files: a strict reader and the `isopod run`
 * argv they map to (job.h).  A job's bytes come from whoever may write the
 * spool: everything here is bounded and returns errors, never dies. */
#include "job.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum jtype { J_STRING, J_INT, J_BOOL, J_STRINGS, J_ENV, J_ARGV };

/* One row per key a job may have; opt is the front end's option (NULL:
 * handled apart).  A key not listed is an error: a typo ("timeout" for
 * "timeout_s") must not silently run with a default. */
static const struct jkey {
	const char *key;
	enum jtype type;
	const char *opt;
} keys[] = {
	{ .key = "argv", .type = J_ARGV, .opt = NULL },
	{ .key = "net", .type = J_STRING, .opt = "--net" },
	{ .key = "allow", .type = J_STRINGS, .opt = "--allow" },
	{ .key = "stage", .type = J_STRING, .opt = "--stage" },
	{ .key = "commit_as", .type = J_STRING, .opt = "--commit-as" },
	{ .key = "name", .type = J_STRING, .opt = "--name" },
	{ .key = "timeout_s", .type = J_INT, .opt = "--timeout-s" },
	{ .key = "vcpus", .type = J_INT, .opt = "--vcpus" },
	{ .key = "mem_mib", .type = J_INT, .opt = "--mem-mib" },
	{ .key = "disk_mib", .type = J_INT, .opt = "--disk-mib" },
	{ .key = "env", .type = J_ENV, .opt = "--env" },
	{ .key = "cwd", .type = J_STRING, .opt = "--cwd" },
	{ .key = "cold", .type = J_BOOL, .opt = "--cold" },
	{ .key = "stdin", .type = J_STRING, .opt = NULL },
	{ .key = "provenance", .type = J_BOOL, .opt = NULL },
};
#define NKEYS (sizeof keys / sizeof keys[0])

int job_id_ok(const char *s)
{
	size_t n;

	if (!s || !*s || *s == '.' || *s == '-')
		return 0;
	n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-");
	return n <= JOB_ID_MAX && !s[n];
}

static const struct jkey *key_of(const char *k)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (!strcmp(keys[i].key, k))
			return &keys[i];
	return NULL;
}

static int check_strings(json_t *v, size_t lo, size_t hi, const char *k, char *why, size_t whysz)
{
	size_t i;
	json_t *e;

	if (!json_is_array(v) || json_array_size(v) < lo || json_array_size(v) > hi) {
		snprintf(why, whysz, "%s: want an array of %zu to %zu strings", k, lo, hi);
		return -1;
	}
	json_array_foreach(v, i, e) {
		if (!json_is_string(e)) {
			snprintf(why, whysz, "%s[%zu]: not a string", k, i);
			return -1;
		}
	}
	return 0;
}

static int check_value(const struct jkey *jk, json_t *v, char *why, size_t whysz)
{
	const char *k = jk->key, *ek;
	json_t *e;

	switch (jk->type) {
	case J_STRING:
		if (json_is_string(v))
			return 0;
		snprintf(why, whysz, "%s: not a string", k);
		return -1;
	case J_INT:
		if (json_is_integer(v) && json_integer_value(v) >= 1 &&
		    json_integer_value(v) <= INT32_MAX)
			return 0;
		snprintf(why, whysz, "%s: want an integer from 1 to %d", k, INT32_MAX);
		return -1;
	case J_BOOL:
		if (json_is_boolean(v))
			return 0;
		snprintf(why, whysz, "%s: not true or false", k);
		return -1;
	case J_STRINGS:
		return check_strings(v, 0, JOB_LIST_MAX, k, why, whysz);
	case J_ARGV:
		if (check_strings(v, 1, JOB_ARGV_MAX, k, why, whysz) < 0)
			return -1;
		if (!*json_string_value(json_array_get(v, 0))) {
			snprintf(why, whysz, "argv[0]: empty");
			return -1;
		}
		return 0;
	case J_ENV:
		if (!json_is_object(v) || json_object_size(v) > JOB_LIST_MAX) {
			snprintf(why, whysz, "env: want an object of at most %d strings", JOB_LIST_MAX);
			return -1;
		}
		json_object_foreach(v, ek, e) {
			/* K=V is how the front end takes it: a K with '=' would
			 * read as another variable. */
			if (!*ek || strchr(ek, '=')) {
				snprintf(why, whysz, "env: bad name %s (empty or with '=')", EXC(ek));
				return -1;
			}
			if (!json_is_string(e)) {
				snprintf(why, whysz, "env.%s: not a string", EXC(ek));
				return -1;
			}
		}
		return 0;
	}
	snprintf(why, whysz, "%s: unknown type", k);
	return -1;
}

json_t *job_parse(const char *buf, size_t n, char *why, size_t whysz)
{
	char w[JOB_WHY_SZ];
	const char *k;
	json_t *job, *v;

	if (n > JOB_MAX_BYTES) {
		snprintf(why, whysz, "the job file is over %d bytes", JOB_MAX_BYTES);
		return NULL;
	}
	if (!(job = json_parse(buf, n, 0, w, sizeof w))) {
		snprintf(why, whysz, "not one JSON object: %s", w);
		return NULL;
	}
	json_object_foreach(job, k, v) {
		const struct jkey *jk = key_of(k);

		if (!jk) {
			snprintf(why, whysz, "unknown key %s", EXC(k));
			goto bad;
		}
		if (check_value(jk, v, why, whysz) < 0)
			goto bad;
	}
	if (!json_object_get(job, "argv")) {
		snprintf(why, whysz, "argv: missing (the command, as an array of strings)");
		goto bad;
	}
	return job;
bad:
	json_decref(job);
	return NULL;
}

json_t *job_load(const char *path, char *why, size_t whysz)
{
	char *buf = malloc(JOB_MAX_BYTES + 1);
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), e = errno;
	size_t n = 0;
	struct stat st;
	json_t *j = NULL;
	ssize_t k;

	if (!buf) {
		snprintf(why, whysz, "out of memory");
	} else if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whysz, "not a regular file%s%s", fd < 0 ? ": " : "", fd < 0 ? strerror(e) : "");
	} else {
		while (n <= JOB_MAX_BYTES && (k = read(fd, buf + n, JOB_MAX_BYTES + 1 - n)) > 0)
			n += (size_t)k;
		j = job_parse(buf, n, why, whysz);
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	return j;
}

/* Words are laid out twice: once to size the block, once to fill it. */
struct words {
	char **av;   /* NULL while sizing */
	char *text;
	size_t n, bytes;
};

static void put(struct words *w, const char *a, const char *b)
{
	size_t la = strlen(a), lb = b ? strlen(b) : 0;

	if (w->av) {
		w->av[w->n] = w->text;
		memcpy(w->text, a, la);
		if (b) {
			w->text[la] = '=';
			memcpy(w->text + la + 1, b, lb);
		}
		w->text[la + (b ? lb + 1 : 0)] = 0;
		w->text += la + (b ? lb + 1 : 0) + 1;
	}
	w->n++;
	w->bytes += la + (b ? lb + 1 : 0) + 1;
}

static void lay_out(struct words *w, const json_t *job, const char *front, const char *stdin_path,
		    const char *prov_path)
{
	const char *k;
	json_t *v, *e;
	char num[24];
	size_t i;

	put(w, front, NULL);
	put(w, "run", NULL);
	put(w, "--json-only", NULL);
	for (i = 0; i < NKEYS; i++) {
		if (!keys[i].opt || !(v = json_object_get(job, keys[i].key)))
			continue;
		switch (keys[i].type) {
		case J_STRING:
			put(w, keys[i].opt, NULL);
			put(w, json_string_value(v), NULL);
			break;
		case J_INT:
			snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
			put(w, keys[i].opt, NULL);
			put(w, num, NULL);
			break;
		case J_BOOL:
			if (json_is_true(v))
				put(w, keys[i].opt, NULL);
			break;
		case J_STRINGS:
			for (size_t j = 0; j < json_array_size(v); j++) {
				put(w, keys[i].opt, NULL);
				put(w, json_string_value(json_array_get(v, j)), NULL);
			}
			break;
		case J_ENV:
			json_object_foreach((json_t *)v, k, e) {
				put(w, keys[i].opt, NULL);
				put(w, k, json_string_value(e));
			}
			break;
		case J_ARGV:
			break;
		}
	}
	if (stdin_path) {
		put(w, "--stdin-file", NULL);
		put(w, stdin_path, NULL);
	}
	if (prov_path && json_is_true(json_object_get(job, "provenance"))) {
		put(w, "--provenance", NULL);
		put(w, prov_path, NULL);
	}
	put(w, "--", NULL);
	v = json_object_get(job, "argv");
	for (i = 0; i < json_array_size(v); i++)
		put(w, json_string_value(json_array_get(v, i)), NULL);
}

char **job_argv(const json_t *job, const char *front, const char *stdin_path, const char *prov_path)
{
	struct words w = { .av = NULL };
	char **av;

	lay_out(&w, job, front, stdin_path, prov_path);
	if (!(av = malloc((w.n + 1) * sizeof *av + w.bytes))) {
		errno = ENOMEM;
		return NULL;
	}
	w = (struct words){ .av = av, .text = (char *)(av + w.n + 1) };
	lay_out(&w, job, front, stdin_path, prov_path);
	av[w.n] = NULL;
	return av;
}

json_t *job_result_load(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t n = 0;
	char *b = fd >= 0 ? fd_text(fd, RESULT_MAX_BYTES + 1, &n) : NULL;
	json_t *j = NULL;
	json_error_t e;

	if (b && n <= RESULT_MAX_BYTES)
		j = json_loadb(b, n, JSON_REJECT_DUPLICATES, &e);
	if (j && !json_is_object(j))
		json_decref(j), j = NULL;
	if (fd >= 0)
		close(fd);
	free(b);
	return j;
}

json_t *job_overrun_result(json_t *res, const char *why, int rc)
{
	json_t *ok = json_object_get(res, "ok"), *f;
	const char *e = json_string_value(json_object_get(res, "error"));

	if (!json_is_boolean(ok)) {
		json_decref(res);
		return json_failure("timeout", "%s; it exited %d without a result; its logs are beside this result",
				    why, rc);
	}
	f = json_failure("timeout", "%s; its own result said: %s", why, e ? e : json_is_true(ok) ? "ok" : "no error");
	if (!f || json_object_update(res, f) < 0)
		json_decref(res), res = NULL;
	json_decref(f);
	return res;
}
