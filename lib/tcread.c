/* tcread.c - read an isopod tap's tc ingress filters back (rtnetlink dump,
 * no privilege) and, where the kernel lets us (CAP_SYS_ADMIN), the
 * program's name and its .rodata, the slot parameters it was loaded with.
 * The one reader of a tap's filter: isopod-netsetup verifies what it
 * attached with it, and a claim (lib/net.c) what it is about to use.  Raw
 * syscalls only (no libmnl, no libbpf), so every host tool can link it.
 * See tcfilter.h. */

#include "nldump.h"
#include "tcfilter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <linux/bpf.h>
#include <linux/netlink.h>
#include <linux/pkt_cls.h>
#include <linux/rtnetlink.h>

void tcfilter_slot_cfg(unsigned k, uint32_t gw, int open, struct tapcfg *cfg)
{
	*cfg = (struct tapcfg){
		.gw = htonl(gw), .bcast = htonl(gw + 2), .open = !!open,
		.port_dns = htons(TCFILTER_PORT_DNS), .port_bdns = htons(TCFILTER_PORT_BROKER_DNS),
		.port_http = open ? 0 : htons(TCFILTER_PORT_BROKER_HTTP),
		.guest = htonl(gw + 1), .mac = { 0x02, 0x69, 0x73, 0x00, (uint8_t)(k >> 8), (uint8_t)k },
		.mark = TCFILTER_TAPMARK,
	};
}

const char *const tcfilter_count_names[TCFILTER_NCOUNT] = {
	"passed", "arp", "dropped_nonip", "dropped_spoof", "dropped_martian", "dropped_local",
	"dropped_forward", "",
};

static long sys_bpf(int cmd, union bpf_attr *a)
{
	return syscall(SYS_bpf, cmd, a, sizeof *a);
}

/* The one element of an array map into v (the map's value size).  0 or -errno. */
static int map_get(int mfd, void *v)
{
	union bpf_attr a;
	uint32_t key = 0;

	memset(&a, 0, sizeof a);
	a.map_fd = (uint32_t)mfd;
	a.key = (uintptr_t)&key;
	a.value = (uintptr_t)v;
	return sys_bpf(BPF_MAP_LOOKUP_ELEM, &a) < 0 ? -errno : 0;
}

/* The program's name, its .rodata (the one array map of one element
 * whose name ends in ".rodata", of our cfg's size) and its counters (the
 * one ending in ".bss", of the counters' size).  0, or -errno (EPERM
 * without CAP_SYS_ADMIN: the kernel hands out no program by id). */
static int prog_read(uint32_t id, struct tcfilter_state *st)
{
	union bpf_attr a;
	struct bpf_prog_info pi;
	uint32_t maps[8], i;
	int pfd, mfd, r = -ENOENT;

	memset(&a, 0, sizeof a);
	a.prog_id = id;
	if ((pfd = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a)) < 0)
		return -errno;
	memset(&pi, 0, sizeof pi);
	pi.nr_map_ids = sizeof maps / sizeof *maps;
	pi.map_ids = (uintptr_t)maps;
	memset(&a, 0, sizeof a);
	a.info.bpf_fd = (uint32_t)pfd;
	a.info.info_len = sizeof pi;
	a.info.info = (uintptr_t)&pi;
	if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0) {
		r = -errno;
		close(pfd);
		return r;
	}
	close(pfd);
	snprintf(st->name, sizeof st->name, "%s", pi.name);
	for (i = 0; i < pi.nr_map_ids && i < sizeof maps / sizeof *maps; i++) {
		struct bpf_map_info mi;
		size_t nl;

		memset(&a, 0, sizeof a);
		a.map_id = maps[i];
		a.open_flags = BPF_F_RDONLY;
		if ((mfd = (int)sys_bpf(BPF_MAP_GET_FD_BY_ID, &a)) < 0)
			return -errno;
		memset(&mi, 0, sizeof mi);
		memset(&a, 0, sizeof a);
		a.info.bpf_fd = (uint32_t)mfd;
		a.info.info_len = sizeof mi;
		a.info.info = (uintptr_t)&mi;
		nl = 0;
		if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) == 0)
			nl = strnlen(mi.name, sizeof mi.name);
		if (nl >= 7 && !strncmp(mi.name + nl - 7, ".rodata", 7) && mi.type == BPF_MAP_TYPE_ARRAY &&
		    mi.max_entries == 1 && mi.value_size == sizeof st->cfg && !st->cfg_read) {
			r = map_get(mfd, &st->cfg);
			st->cfg_read = r == 0;
		} else if (nl >= 4 && !strncmp(mi.name + nl - 4, ".bss", 4) &&
			   mi.type == BPF_MAP_TYPE_ARRAY && mi.max_entries == 1 &&
			   mi.value_size == sizeof st->counts && !st->counts_read) {
			st->counts_read = map_get(mfd, st->counts) == 0;
		}
		close(mfd);
	}
	return st->cfg_read ? 0 : r;
}

/* One attribute of a netlink message: the first of type in [a, end), or
 * NULL. */
static const struct rtattr *rta_find(const struct rtattr *a, size_t len, unsigned short type)
{
	for (; RTA_OK(a, len); a = RTA_NEXT(a, len))
		if ((a->rta_type & NLA_TYPE_MASK) == type)
			return a;
	return NULL;
}

static uint32_t rta_u32(const struct rtattr *a)
{
	uint32_t v = 0;

	if (a && RTA_PAYLOAD(a) >= sizeof v)
		memcpy(&v, RTA_DATA(a), sizeof v);
	return v;
}

/* One filter of the dump.  The dump also lists each priority's classifier
 * itself (handle 0): not a filter. */
static void filter_msg(const struct nlmsghdr *h, void *data)
{
	struct tcfilter_state *st = data;
	const struct tcmsg *t = NLMSG_DATA(h);
	const struct rtattr *a0 = (const void *)((const char *)t + NLMSG_ALIGN(sizeof *t));
	const struct rtattr *kind, *opt, *o;
	size_t alen, ol;

	if (h->nlmsg_type != RTM_NEWTFILTER || h->nlmsg_len < NLMSG_LENGTH(sizeof *t) || !t->tcm_handle)
		return;
	st->filters++;
	alen = h->nlmsg_len - NLMSG_LENGTH(sizeof *t);
	kind = rta_find(a0, alen, TCA_KIND);
	opt = rta_find(a0, alen, TCA_OPTIONS);
	if (t->tcm_handle != TCFILTER_HANDLE || TC_H_MAJ(t->tcm_info) >> 16 != TCFILTER_PRIO || !kind ||
	    RTA_PAYLOAD(kind) != 4 || memcmp(RTA_DATA(kind), "bpf", 4) || !opt)
		return;
	st->ours = 1;
	o = RTA_DATA(opt);
	ol = RTA_PAYLOAD(opt);
	st->direct_action = !!(rta_u32(rta_find(o, ol, TCA_BPF_FLAGS)) & TCA_BPF_FLAG_ACT_DIRECT);
	st->skip_sw = !!(rta_u32(rta_find(o, ol, TCA_BPF_FLAGS_GEN)) & TCA_CLS_FLAGS_SKIP_SW);
	st->prog_id = rta_u32(rta_find(o, ol, TCA_BPF_ID));
	if ((o = rta_find(RTA_DATA(opt), ol, TCA_BPF_TAG)) && RTA_PAYLOAD(o) == sizeof st->tag)
		memcpy(st->tag, RTA_DATA(o), sizeof st->tag);
	/* The attach name libbpf gives ("isopod_tap:[ID]"): the program's
	 * name as far as an unprivileged reader can tell. */
	if ((o = rta_find(RTA_DATA(opt), ol, TCA_BPF_NAME)))
		snprintf(st->name, sizeof st->name, "%.*s",
			 (int)strcspn(RTA_DATA(o), ":"), (const char *)RTA_DATA(o));
}

int tcfilter_read(int ifindex, struct tcfilter_state *st, char *msg, size_t len)
{
	struct {
		struct nlmsghdr n;
		struct tcmsg t;
	} req = {
		.n = { .nlmsg_len = sizeof req, .nlmsg_type = RTM_GETTFILTER,
		       .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = 1 },
		.t = { .tcm_family = AF_UNSPEC, .tcm_ifindex = ifindex,
		       .tcm_parent = TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS) },
	};
	int nlerr, r;

	*st = (struct tcfilter_state){ 0 };
	/* No clsact qdisc is an empty dump, not an error; the kernel's error
	 * (NLMSG_ERROR, or an NLMSG_DONE ending a dump that failed part-way)
	 * is one: a partial list must not pass for the whole, nor no list for
	 * "no filter". */
	if ((r = nl_dump(NETLINK_ROUTE, &req, sizeof req, filter_msg, st, &nlerr)) < 0 ||
	    (r = nlerr) < 0) {
		snprintf(msg, len, "unable to read the tc filters: %s", strerror(-r));
		return r;
	}
	/* Without the privilege the dump's name stands and cfg_read stays 0. */
	if (st->ours && st->prog_id)
		prog_read(st->prog_id, st);
	return 0;
}

int tcfilter_judge(const struct tcfilter_state *st, const struct tapcfg *want, const uint8_t *tag,
		   char *msg, size_t len)
{
	if (st->filters == 1 && st->ours && st->direct_action && !st->skip_sw &&
	    !strcmp(st->name, TCFILTER_PROG) && (!tag || !memcmp(st->tag, tag, sizeof st->tag)) &&
	    (!st->cfg_read || !memcmp(&st->cfg, want, sizeof *want)))
		return 1;
	if (st->filters == 1 && st->ours && st->cfg_read && memcmp(&st->cfg, want, sizeof *want)) {
		char g[INET_ADDRSTRLEN] = "?", w[INET_ADDRSTRLEN] = "?";

		inet_ntop(AF_INET, &st->cfg.gw, g, sizeof g);
		inet_ntop(AF_INET, &want->gw, w, sizeof w);
		snprintf(msg, len, "ingress: our filter was loaded for another slot (gateway %s, %s, "
			 "mark 0x%08x; want %s, %s, 0x%08x)", g, st->cfg.open ? "open" : "filtered",
			 st->cfg.mark, w, want->open ? "open" : "filtered", want->mark);
		return 0;
	}
	snprintf(msg, len, "ingress: %u filters, ours %s, da %d, skip_sw %d, program %s", st->filters,
		 st->ours ? "found" : "missing", st->direct_action, st->skip_sw, *st->name ? st->name : "?");
	return 0;
}
