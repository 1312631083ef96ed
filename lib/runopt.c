/* runopt.c - a tool's run options as data: --run-options' JSON and its text
 * form (declared in util.h, beside run_options_print, which prints them and
 * so stays with the main-only helpers of util.c). */
#include "util.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *run_options_json(const struct run_option *ro, const struct option *lo, char *err,
			 size_t errsz)
{
	json_t *a = json_array(), *o;
	char opt[80];
	int i;

	for (; a && ro->name; ro++) {
		for (i = 0; lo[i].name && strcmp(lo[i].name, ro->name); i++)
			;
		if (!lo[i].name || (lo[i].has_arg == required_argument) != !!ro->arg) {
			snprintf(err, errsz, "run option --%s: %s the option table", ro->name,
				 lo[i].name ? "takes a value or not unlike in" : "not in");
			json_decref(a);
			return NULL;
		}
		snprintf(opt, sizeof opt, "--%s", ro->name);
		o = json_pack("{s:s, s:s?, s:b}", "option", opt, "arg", ro->arg, "repeat", ro->repeat);
		if (!o || json_array_append_new(a, o) < 0)
			break;
	}
	if (!a || ro->name) {
		snprintf(err, errsz, "out of memory");
		json_decref(a);
		return NULL;
	}
	o = json_pack("{s:s, s:o}", "tool", progname, "run_options", a);
	if (!o)
		snprintf(err, errsz, "out of memory");
	return o;
}

char *run_options_text(const struct run_option *ro, const struct option *lo, char *err,
		       size_t errsz)
{
	json_t *j = run_options_json(ro, lo, err, errsz);
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int bad;

	if (!j)
		return NULL;
	json_decref(j);
	if (!(f = open_memstream(&buf, &len))) {
		snprintf(err, errsz, "out of memory");
		return NULL;
	}
	for (; ro->name; ro++) {
		if (ro->arg && (!*ro->arg || !strcmp(ro->arg, "-") || strpbrk(ro->arg, " \t\n"))) {
			snprintf(err, errsz, "run option --%s: placeholder '%s' would not read back",
				 ro->name, ro->arg);
			break;
		}
		fprintf(f, "--%s %s %d\n", ro->name, ro->arg ? ro->arg : "-", !!ro->repeat);
	}
	bad = ro->name != NULL; /* stopped at a placeholder: err says which */
	if (fclose(f) != 0 && !bad) {
		snprintf(err, errsz, "out of memory");
		bad = 1;
	}
	if (!bad)
		return buf;
	free(buf);
	return NULL;
}
