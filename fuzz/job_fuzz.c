/* job_fuzz.c - libFuzzer target for isopod-runner's job files (lib/job.c):
 * job_parse over arbitrary bytes, and for every job it takes, the argv of
 * `isopod run` it maps to: the front end and "run" first, and after the
 * first "--" exactly the job's argv, word for word (no value of a job can
 * become an option, nor an option part of the command).  See fuzz/run. */
#include "job.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[JOB_WHY_SZ];
	json_t *job, *cmd;
	char **av;
	size_t i, k, n;

	memset(why, 0xff, sizeof why);
	job = job_parse((const char *)data, size, why, sizeof why);
	if (!job) {
		if (!memchr(why, 0, sizeof why))
			abort(); /* the reason is always a C string */
		return 0;
	}
	cmd = json_object_get(job, "argv");
	n = json_array_size(cmd);
	if (!n || n > JOB_ARGV_MAX)
		abort();
	av = job_argv(job, "FRONT", json_object_get(job, "stdin") ? "/spool/stdin" : NULL, "/spool/p.json");
	if (!av || strcmp(av[0], "FRONT") || strcmp(av[1], "run") || strcmp(av[2], "--json-only"))
		abort();
	/* options come in pairs (or alone: --cold) up to the first "--" */
	for (k = 3; av[k] && strcmp(av[k], "--"); k++) {
		if (strncmp(av[k], "--", 2))
			abort();
		if (strcmp(av[k], "--cold"))
			k++;
		if (!av[k])
			abort();
	}
	if (!av[k])
		abort();
	for (i = 0; i < n; i++)
		if (!av[k + 1 + i] || strcmp(av[k + 1 + i], json_string_value(json_array_get(cmd, i))))
			abort();
	if (av[k + 1 + n])
		abort();
	free(av);
	json_decref(job);
	return 0;
}
