/* tcfilter.c - load lib/tapfilter.bpf.c per tap and attach it to the tap's
 * clsact ingress (libbpf), and read the tap's ingress filters back
 * (rtnetlink, libmnl).  See tcfilter.h. */

#include "tcfilter.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <linux/pkt_cls.h>
#include <linux/rtnetlink.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <libmnl/libmnl.h>

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

/* ---- read back ------------------------------------------------------------ */

static int opt_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_type_valid(a, TCA_BPF_MAX) >= 0)
		tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

static int attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;

	if (mnl_attr_type_valid(a, TCA_MAX) >= 0)
		tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

/* One filter of the dump.  The dump also lists each priority's classifier
 * itself (handle 0): not a filter. */
static int filter_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct nlattr *tb[TCA_MAX + 1] = { 0 }, *ob[TCA_BPF_MAX + 1] = { 0 };
	const struct tcmsg *t = mnl_nlmsg_get_payload(nlh);
	struct tcfilter_state *st = data;

	if (nlh->nlmsg_type != RTM_NEWTFILTER || !t->tcm_handle ||
	    mnl_attr_parse(nlh, sizeof *t, attr_cb, tb) != MNL_CB_OK)
		return MNL_CB_OK;
	st->filters++;
	if (t->tcm_handle != TCFILTER_HANDLE || TC_H_MAJ(t->tcm_info) >> 16 != TCFILTER_PRIO ||
	    !tb[TCA_KIND] || strcmp(mnl_attr_get_str(tb[TCA_KIND]), "bpf") || !tb[TCA_OPTIONS] ||
	    mnl_attr_parse_nested(tb[TCA_OPTIONS], opt_cb, ob) != MNL_CB_OK)
		return MNL_CB_OK;
	st->ours = 1;
	if (ob[TCA_BPF_FLAGS])
		st->direct_action = !!(mnl_attr_get_u32(ob[TCA_BPF_FLAGS]) & TCA_BPF_FLAG_ACT_DIRECT);
	if (ob[TCA_BPF_FLAGS_GEN])
		st->skip_sw = !!(mnl_attr_get_u32(ob[TCA_BPF_FLAGS_GEN]) & TCA_CLS_FLAGS_SKIP_SW);
	if (ob[TCA_BPF_ID])
		st->prog_id = mnl_attr_get_u32(ob[TCA_BPF_ID]);
	if (ob[TCA_BPF_TAG] && mnl_attr_get_payload_len(ob[TCA_BPF_TAG]) == sizeof st->tag)
		memcpy(st->tag, mnl_attr_get_payload(ob[TCA_BPF_TAG]), sizeof st->tag);
	return MNL_CB_OK;
}

/* The name the kernel keeps for program id (the filter's own name is
 * libbpf's choice, the program's is ours). */
static void prog_name(uint32_t id, char name[16])
{
	struct bpf_prog_info info = { 0 };
	uint32_t ilen = sizeof info;
	int fd = bpf_prog_get_fd_by_id(id);

	name[0] = 0;
	if (fd < 0)
		return;
	if (bpf_obj_get_info_by_fd(fd, &info, &ilen) == 0)
		snprintf(name, 16, "%s", info.name);
	close(fd);
}

int tcfilter_read(int ifindex, struct tcfilter_state *st, char *msg, size_t len)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct mnl_socket *nl;
	struct nlmsghdr *nlh;
	struct tcmsg *t;
	uint32_t seq = (uint32_t)time(NULL), portid;
	ssize_t n;
	int r = 0;

	*st = (struct tcfilter_state){ 0 };
	if (!(nl = mnl_socket_open(NETLINK_ROUTE)) || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		r = -errno;
		snprintf(msg, len, "unable to open a route netlink socket: %s", strerror(-r));
		if (nl)
			mnl_socket_close(nl);
		return r;
	}
	portid = mnl_socket_get_portid(nl);
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_GETTFILTER;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
	nlh->nlmsg_seq = seq;
	t = mnl_nlmsg_put_extra_header(nlh, sizeof *t);
	t->tcm_family = AF_UNSPEC;
	t->tcm_ifindex = ifindex;
	t->tcm_parent = TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		r = -errno;
	while (!r) {
		if ((n = mnl_socket_recvfrom(nl, buf, sizeof buf)) < 0) {
			r = -errno;
			break;
		}
		r = mnl_cb_run(buf, (size_t)n, seq, portid, filter_cb, st);
		if (r == MNL_CB_ERROR)
			r = -errno;
		else if (r == MNL_CB_STOP)
			break;
		else
			r = 0;
	}
	mnl_socket_close(nl);
	if (r == -EINVAL || r == -ENOENT) /* no clsact qdisc: no filters */
		r = 0;
	if (r < 0) {
		snprintf(msg, len, "unable to read the tc filters: %s", strerror(-r));
		return r;
	}
	if (st->ours && st->prog_id)
		prog_name(st->prog_id, st->name);
	return 0;
}

int tcfilter_install(int ifindex, const struct tapcfg *cfg, uint8_t tag[8], struct tcfilter_state *st,
		     char *msg, size_t len)
{
	int r;

	if ((r = tcfilter_attach(ifindex, cfg, tag, msg, len)) < 0 ||
	    (r = tcfilter_read(ifindex, st, msg, len)) < 0)
		return r;
	if (st->filters == 1 && st->ours && st->direct_action && !st->skip_sw &&
	    !strcmp(st->name, TCFILTER_PROG) && !memcmp(st->tag, tag, sizeof st->tag))
		return 1;
	snprintf(msg, len, "ingress: %u filters, ours %s, da %d, skip_sw %d, program %s", st->filters,
		 st->ours ? "found" : "missing", st->direct_action, st->skip_sw, *st->name ? st->name : "?");
	return 0;
}
