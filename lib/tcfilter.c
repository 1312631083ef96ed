/* tcfilter.c - load lib/tapfilter.bpf.c per tap and attach it to the tap's
 * clsact ingress (libbpf); lib/tcread.c reads it back.  See tcfilter.h. */

#include "tcfilter.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

extern const char tapfilter_obj[], tapfilter_obj_end[];

/* libbpf's own messages: its warnings (a verifier log on a failed load)
 * on stderr, the chatter not at all; stdout is the tool's JSON. */
static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level != LIBBPF_WARN)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

int tcfilter_attach(int ifindex, const struct tapcfg *cfg, uint8_t tag[8], char *msg, size_t len)
{
	LIBBPF_OPTS(bpf_object_open_opts, oo, .object_name = "isopod_tapfilter");
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = BPF_TC_INGRESS);
	LIBBPF_OPTS(bpf_tc_opts, to, .handle = TCFILTER_HANDLE, .priority = TCFILTER_PRIO,
		    .flags = BPF_TC_F_REPLACE);
	struct bpf_prog_info info = { 0 };
	uint32_t ilen = sizeof info;
	libbpf_print_fn_t prev;
	struct bpf_object *obj;
	struct bpf_program *prog;
	struct bpf_map *map;
	size_t rosz = 0;
	int r;

	libbpf_set_print(libbpf_log);
	obj = bpf_object__open_mem(tapfilter_obj, (size_t)(tapfilter_obj_end - tapfilter_obj), &oo);
	if (!obj) {
		r = -errno;
		snprintf(msg, len, "unable to open the tc program: %s", strerror(-r));
		return r;
	}
	/* The one .rodata map holds `cfg` alone. */
	for (map = bpf_object__next_map(obj, NULL); map; map = bpf_object__next_map(obj, map)) {
		const char *n = bpf_map__name(map);
		size_t nl = strlen(n);

		if (nl >= 7 && !strcmp(n + nl - 7, ".rodata"))
			break;
	}
	if (!map || !bpf_map__initial_value(map, &rosz) || rosz != sizeof *cfg ||
	    bpf_map__set_initial_value(map, cfg, sizeof *cfg) < 0) {
		snprintf(msg, len, "unable to set the tc program's parameters: no .rodata of %zu bytes",
			 sizeof *cfg);
		bpf_object__close(obj);
		return -EINVAL;
	}
	if ((r = bpf_object__load(obj)) < 0) {
		snprintf(msg, len, "unable to load the tc program: %s", strerror(-r));
		goto out;
	}
	prog = bpf_object__find_program_by_name(obj, TCFILTER_PROG);
	to.prog_fd = prog ? bpf_program__fd(prog) : -1;
	if (to.prog_fd < 0) {
		r = -ENOENT;
		snprintf(msg, len, "unable to find the tc program %s", TCFILTER_PROG);
		goto out;
	}
	if ((r = bpf_obj_get_info_by_fd(to.prog_fd, &info, &ilen)) < 0) {
		snprintf(msg, len, "unable to read the tc program's tag: %s", strerror(-r));
		goto out;
	}
	memcpy(tag, info.tag, 8);
	/* Quietly: libbpf would print the kernel's refusal of a second qdisc
	 * (EEXIST, the usual case on a rerun). */
	prev = libbpf_set_print(NULL);
	r = bpf_tc_hook_create(&hook);
	libbpf_set_print(prev);
	if (r < 0 && r != -EEXIST) {
		snprintf(msg, len, "unable to add the clsact qdisc: %s", strerror(-r));
		goto out;
	}
	/* Replace ours at its handle and priority in place (the kernel swaps
	 * the program atomically: no packet meets an empty hook). */
	if ((r = bpf_tc_attach(&hook, &to)) < 0)
		snprintf(msg, len, "unable to attach the tc program: %s", strerror(-r));
	else
		r = 0;
out:
	bpf_object__close(obj); /* the filter holds the program */
	return r;
}

int tcfilter_install(int ifindex, const struct tapcfg *cfg, uint8_t tag[8], struct tcfilter_state *st,
		     char *msg, size_t len)
{
	int r;

	if ((r = tcfilter_attach(ifindex, cfg, tag, msg, len)) < 0 ||
	    (r = tcfilter_read(ifindex, st, msg, len)) < 0)
		return r;
	/* netsetup holds the privilege: the .rodata must have been read */
	if (!st->cfg_read && st->ours) {
		snprintf(msg, len, "ingress: unable to read our filter's parameters back");
		return 0;
	}
	return tcfilter_judge(st, cfg, tag, msg, len);
}
