/* isopod-vm - the VM records: list them, show or resolve the ones references
 * name.
 *
 * `isopod vm ls` and every VM reference the front end takes come through
 * here, so that lib/vm.c stays the one reader of vms/<id>/meta.json and the
 * one resolution of a reference (an id, a unique id prefix, a name): the
 * shell no longer reads records with a jq per record. */
#include "util.h"
#include "vm.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define USAGE "isopod-vm ls | isopod-vm show REF... | isopod-vm resolve REF..."

static void skipped(const char *id, int err)
{
	/* A directory without its meta.json yet (isopod-claim between its
	 * mkdir and the record) or any more (a removal under way): a record
	 * coming or going, no damage to warn of (`vm ls` beside every claim). */
	if (err == ENOENT)
		return;
	warn("skipping unreadable record of %s: %s", id,
	     err == EINVAL ? "malformed (not one object naming its id)" : strerror(err));
}

/* One line per record, oldest first. */
static int ls(void)
{
	char why[512];
	json_t *all = vm_list(skipped, why, sizeof why);
	size_t i;

	if (!all)
		die(EX_SYS, "%s", why);
	for (i = 0; i < json_array_size(all); i++)
		json_emit(json_array_get(all, i));
	json_decref(all);
	return 0;
}

/* Every reference resolved and read before anything is printed: a bad one
 * fails the whole call with its status and an empty stdout. */
static int show(int n, char **refs)
{
	char id[VM_ID_SZ], why[512];
	json_t *recs = json_array(), *rec;
	int i;

	if (!recs)
		die(EX_SYS, "unable to allocate memory:");
	for (i = 0; i < n; i++) {
		if (vm_open(refs[i], id, &rec, why, sizeof why) < 0)
			die(vm_exit_code(errno), "%s", why);
		if (json_object_set_new(rec, "running", json_boolean(vm_running(id))) < 0 ||
		    json_array_append_new(recs, rec) < 0)
			die(EX_SYS, "unable to allocate memory:");
	}
	for (i = 0; i < n; i++)
		json_emit(json_array_get(recs, (size_t)i));
	json_decref(recs);
	return 0;
}

/* The ids and their directories: what a caller that removes VMs needs,
 * even a VM whose record can no longer be read (resolution reads only
 * names). */
static int resolve(int n, char **refs)
{
	char id[VM_ID_SZ], why[512], dir[PATH_MAX];
	json_t *out = json_array();
	int i;

	if (!out)
		die(EX_SYS, "unable to allocate memory:");
	for (i = 0; i < n; i++) {
		if (vm_resolve(refs[i], id, why, sizeof why) < 0)
			die(vm_exit_code(errno), "%s", why);
		if (pathn(dir, sizeof dir, "%s/vms/%s", store_home(), id) < 0)
			die(EX_USAGE, "the store's path is too long: %s...", EXC(store_home()));
		if (json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "ref", refs[i], "id", id,
							 "dir", dir)) < 0)
			die(EX_SYS, "unable to allocate memory:");
	}
	for (i = 0; i < n; i++)
		json_emit(json_array_get(out, (size_t)i));
	json_decref(out);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	progname = "isopod-vm";
	while ((c = getopt_long(argc, argv, "+h", lo, NULL)) != -1) {
		switch (c) {
		case 'h':
			puts("usage: " USAGE);
			return 0;
		default:
			die_usage(USAGE, "bad option (usage above)");
		}
	}
	argc -= optind;
	argv += optind;
	if (argc == 1 && !strcmp(argv[0], "ls"))
		return ls();
	if (argc >= 2 && !strcmp(argv[0], "show"))
		return show(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[0], "resolve"))
		return resolve(argc - 1, argv + 1);
	if (argc == 0)
		die_usage(USAGE, "no command given");
	if (strcmp(argv[0], "ls") && strcmp(argv[0], "show") && strcmp(argv[0], "resolve"))
		die_usage(USAGE, "unknown command %s", EXC(argv[0]));
	die_usage(USAGE, "%s %s", argv[0], argc > 1 ? "takes no operand" : "takes REF...");
}
