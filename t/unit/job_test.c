/* job_test.c - unit tests of lib/job.c, isopod-runner's job files: names,
 * the strict reader (every refusal names its key), and the `isopod run`
 * argv a job maps to.  Built by t/run-unit with ASan + UBSan. */
#include "../../lib/job.c" /* self-contained: t/run-unit links frame+util only */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"

static char why[JOB_WHY_SZ];

static json_t *parse(const char *s)
{
	why[0] = 0;
	return job_parse(s, strlen(s), why, sizeof why);
}

/* refused(JSON, TEXT): not parsed, and why contains TEXT */
static int refused(const char *s, const char *text)
{
	json_t *j = parse(s);

	if (j) {
		json_decref(j);
		return 0;
	}
	if (!strstr(why, text)) {
		printf("# why: %s\n", why);
		return 0;
	}
	return 1;
}

/* The argv joined with '|' for comparison. */
static char *joined(char **av)
{
	static char buf[4096];
	size_t k = 0;

	buf[0] = 0;
	for (int i = 0; av && av[i]; i++)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", i ? "|" : "", av[i]);
	return buf;
}

int main(void)
{
	json_t *j;
	char **av, *big;

	ok(job_id_ok("j01") && job_id_ok("A.b_c-9") && job_id_ok("x"), "names: letters, digits, . _ -");
	ok(!job_id_ok("") && !job_id_ok(".tmp") && !job_id_ok("-x") && !job_id_ok("a b") &&
	   !job_id_ok("a/b") && !job_id_ok("é") && !job_id_ok(NULL), "names: empty, hidden, -x, space, /, non-ASCII refused");
	big = malloc(JOB_ID_MAX + 2);
	memset(big, 'a', JOB_ID_MAX + 1);
	big[JOB_ID_MAX + 1] = 0;
	ok(!job_id_ok(big), "names: over %d bytes refused", JOB_ID_MAX);
	big[JOB_ID_MAX] = 0;
	ok(job_id_ok(big), "names: %d bytes taken", JOB_ID_MAX);
	free(big);

	j = parse("{\"argv\":[\"echo\",\"hi\"]}");
	ok(j != NULL, "a minimal job parses");
	av = job_argv(j, "/x/isopod", NULL, "/p");
	ok(av && !strcmp(joined(av), "/x/isopod|run|--json-only|--|echo|hi"), "minimal argv: %s", joined(av));
	free(av);
	json_decref(j);

	j = parse("{\"cold\":true,\"env\":{\"A\":\"x y\",\"B\":\"\"},\"argv\":[\"sh\",\"-c\",\"--net\"],"
		  "\"net\":\"filtered\",\"allow\":[\"a.test\",\"*.b.test:8443\"],\"stage\":\"--keep\","
		  "\"commit_as\":\"l\",\"name\":\"n\",\"timeout_s\":60,\"vcpus\":2,\"mem_mib\":512,"
		  "\"disk_mib\":1024,\"cwd\":\"/tmp\",\"stdin\":\"in\",\"provenance\":true}");
	ok(j != NULL, "every key parses: %s", why);
	av = job_argv(j, "isopod", "/s/stdin", "/s/prov.json");
	ok(av && !strcmp(joined(av), "isopod|run|--json-only|--net|filtered|--allow|a.test|--allow|*.b.test:8443|"
			  "--stage|--keep|--commit-as|l|--name|n|--timeout-s|60|--vcpus|2|--mem-mib|512|"
			  "--disk-mib|1024|--env|A=x y|--env|B=|--cwd|/tmp|--cold|--stdin-file|/s/stdin|"
			  "--provenance|/s/prov.json|--|"
			  "sh|-c|--net"),
	   "full argv, values as separate words, the command after --: %s", joined(av));
	free(av);
	json_decref(j);
	j = parse("{\"argv\":[\"true\"],\"cold\":false,\"provenance\":false,\"allow\":[],\"env\":{}}");
	av = job_argv(j, "isopod", NULL, "/p");
	ok(av && !strcmp(joined(av), "isopod|run|--json-only|--|true"), "cold false, empty lists: no options");
	free(av);
	json_decref(j);

	ok(refused("{\"argv\":[\"a\"],\"argv\":[\"b\"]}", "duplicate key \"argv\""), "duplicate key refused, named");
	ok(refused("{\"argv\":[\"a\"],\"env\":{\"A\":\"1\",\"A\":\"2\"}}", "duplicate key"), "duplicate env name refused");
	ok(refused("{\"argv\":[\"a\"],\"timeout\":5}", "unknown key timeout"), "unknown key refused, named");
	ok(refused("{\"argv\":[\"a\"],\"copy_in\":[\"/etc/shadow:/x\"]}", "unknown key copy_in"),
	   "copy_in (host paths) is not a job key");
	ok(refused("{}", "argv: missing"), "argv required");
	ok(refused("{\"argv\":[]}", "argv: want an array of 1"), "empty argv refused");
	ok(refused("{\"argv\":[\"\"]}", "argv[0]: empty"), "empty argv[0] refused");
	ok(refused("{\"argv\":\"true\"}", "argv: want an array"), "argv as a string refused");
	ok(refused("{\"argv\":[\"a\",1]}", "argv[1]: not a string"), "a number in argv refused");
	ok(refused("{\"argv\":[\"a\"],\"net\":1}", "net: not a string"), "net as a number refused");
	ok(refused("{\"argv\":[\"a\"],\"timeout_s\":0}", "timeout_s: want an integer"), "timeout_s 0 refused");
	ok(refused("{\"argv\":[\"a\"],\"timeout_s\":1.5}", "timeout_s"), "timeout_s 1.5 refused");
	ok(refused("{\"argv\":[\"a\"],\"vcpus\":2147483648}", "vcpus"), "vcpus over 2^31-1 refused");
	ok(refused("{\"argv\":[\"a\"],\"timeout_s\":\"60\"}", "timeout_s"), "timeout_s as a string refused");
	ok(refused("{\"argv\":[\"a\"],\"cold\":1}", "cold: not true or false"), "cold as 1 refused");
	ok(refused("{\"argv\":[\"a\"],\"provenance\":\"/etc/x\"}", "provenance: not true or false"),
	   "provenance as a path refused: the runner picks where the envelope goes");
	ok(refused("{\"argv\":[\"a\"],\"env\":{\"A=B\":\"c\"}}", "env: bad name A=B"), "env name with = refused");
	ok(refused("{\"argv\":[\"a\"],\"env\":{\"\":\"c\"}}", "env: bad name"), "empty env name refused");
	ok(refused("{\"argv\":[\"a\"],\"env\":{\"A\":1}}", "env.A: not a string"), "env value 1 refused");
	ok(refused("{\"argv\":[\"a\"],\"env\":[\"A=1\"]}", "env: want an object"), "env as an array refused");
	ok(refused("{\"argv\":[\"a\"],\"allow\":\"x\"}", "allow: want an array"), "allow as a string refused");
	ok(refused("{\"argv\":[\"a\\u0000b\"]}", "not one JSON object"), "NUL in a string refused");
	ok(refused("[\"argv\"]", "not a JSON object"), "an array refused");
	ok(refused("{\"argv\":[\"a\"]} {}", "not one JSON object"), "two objects refused");
	ok(refused("{\"argv\":[\"a\"]", "not one JSON object"), "truncated refused");
	ok(refused("", "not one JSON object"), "empty refused");

	/* bounds: argv words, list entries, the file's size */
	{
		char *s = malloc(8 * (JOB_ARGV_MAX + 2) + 64);
		size_t k = (size_t)sprintf(s, "{\"argv\":[");

		for (int i = 0; i < JOB_ARGV_MAX + 1; i++)
			k += (size_t)sprintf(s + k, "%s\"a\"", i ? "," : "");
		strcpy(s + k, "]}");
		ok(refused(s, "argv: want an array of 1 to 256"), "%d argv words refused", JOB_ARGV_MAX + 1);
		k = (size_t)sprintf(s, "{\"argv\":[\"a\"],\"allow\":[");
		for (int i = 0; i < JOB_LIST_MAX + 1; i++)
			k += (size_t)sprintf(s + k, "%s\"a\"", i ? "," : "");
		strcpy(s + k, "]}");
		ok(refused(s, "allow: want an array of 0 to 64"), "%d allow patterns refused", JOB_LIST_MAX + 1);
		free(s);
	}
	{
		size_t n = JOB_MAX_BYTES + 1;
		char *s = malloc(n + 1);

		memset(s, ' ', n);
		memcpy(s + n - 14, "{\"argv\":[\"a\"]}", 14);
		s[n] = 0;
		ok(!job_parse(s, n, why, sizeof why) && strstr(why, "over 65536 bytes"), "a file over %d bytes refused unread", JOB_MAX_BYTES);
		j = job_parse(s + 1, n - 1, why, sizeof why);
		ok(j != NULL, "%d bytes (spaces and a job) taken", JOB_MAX_BYTES);
		json_decref(j);
		free(s);
	}
	return tap_done();
}
