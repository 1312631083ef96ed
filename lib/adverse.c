/* adverse.c - the adverse suite: its VMs, the host side and the report;
 * see adverse.h. */
#include "adverse.h"
#include "net.h"
#include "proc.h"
#include "suite.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void adv_default_gateway(char *out, size_t sz)
{
	FILE *f = fopen("/proc/net/route", "re");
	char l[512], ifn[64];
	unsigned dst, gw, flags;

	*out = 0;
	if (!f)
		return;
	while (fgets(l, sizeof l, f))
		if (sscanf(l, "%63s %x %x %x", ifn, &dst, &gw, &flags) == 4 && dst == 0 && gw) {
			struct in_addr ia = { .s_addr = gw };

			inet_ntop(AF_INET, &ia, out, (socklen_t)sz);
			break;
		}
	fclose(f);
}

void adv_host_addrs(struct adv *a)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		return;
	for (i = ifa; i && a->nhost < 8; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
		    !strncmp(i->ifa_name, NET_TAP_PREFIX, strlen(NET_TAP_PREFIX)))
			continue;
		inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a->hostaddr[a->nhost],
			  sizeof a->hostaddr[0]);
		a->nhost++;
	}
	freeifaddrs(ifa);
}

/* The VM of record id as the probes need it. -1 with why. */
static int avm_of(struct avm *v, const char *id, char *why, size_t wsz)
{
	json_t *rec = vm_read(id), *net;

	if (!rec)
		return snprintf(why, wsz, "no record for %s: %s", id, strerror(errno)), -1;
	memset(v, 0, sizeof *v);
	snprintf(v->id, sizeof v->id, "%s", id);
	net = json_object_get(rec, "net");
	if (!json_is_object(net) || !json_string_value(json_object_get(net, "tap"))) {
		snprintf(v->mode, sizeof v->mode, "none");
		v->slot = -1;
	} else {
		snprintf(v->mode, sizeof v->mode, "%s",
			 json_string_value(json_object_get(net, "mode")) ?: "?");
		snprintf(v->tap, sizeof v->tap, "%s", json_string_value(json_object_get(net, "tap")));
		snprintf(v->gw, sizeof v->gw, "%s",
			 json_string_value(json_object_get(net, "gateway")) ?: "");
		snprintf(v->guest, sizeof v->guest, "%s",
			 json_string_value(json_object_get(net, "guest_ip")) ?: "");
		v->slot = (int)json_integer_value(json_object_get(net, "slot"));
		snprintf(v->mac, sizeof v->mac, "%s", json_string_value(json_object_get(net, "mac")) ?: "");
		v->ifindex = (int)if_nametoindex(v->tap);
	}
	json_decref(rec);
	return 0;
}

/* claim | boot one VM of mode, as `isopod run` does.  -1 with why. */
static int boot_vm(struct adv *a, const char *mode, char *why, size_t wsz)
{
	char *cav[10] = { "isopod-claim" }, pid[32], res[48];
	char *env[] = { res, NULL };
	char *bav[] = { "isopod-boot", "--vm", NULL, "--owner-pid", pid, "--timeout-ms", "240000", NULL };
	char *sav[] = { "isopod-stop", "--force", "--vm", NULL, NULL };
	int n = 1, st = 0;
	json_t *c, *b;
	const char *id;

	if (strcmp(mode, "none")) {
		cav[n++] = "--net", cav[n++] = (char *)mode;
		if (!strcmp(mode, "filtered") && a->allow)
			cav[n++] = "--allow", cav[n++] = (char *)a->allow;
		/* the names of the DNS rebinding probes (the doctor's resolver) */
		if (!strcmp(mode, "filtered") && a->rebind_port)
			cav[n++] = "--allow", cav[n++] = "*." ADV_REBIND_ZONE;
	}
	c = adv_tool_json(a, cav, PROC_NULL, &st);
	id = json_string_value(json_object_get(json_object_get(c, "vm"), "id"));
	if (st || !id) {
		json_decref(c);
		return snprintf(why, wsz, "isopod-claim --net %s failed (exit %d): %s", mode, st,
				st == 102 ? "no free slot" : "see its diagnostic"), -1;
	}
	snprintf(pid, sizeof pid, "%d", (int)getpid());
	/* the record is the channel: boot is handed the VM by --vm */
	bav[2] = (char *)id;
	/* a filtered VM's broker asks the doctor's resolver (isopod-boot
	 * passes ISOPOD_RESOLVER on), so the rebinding probes need no
	 * outside DNS; nothing else of the doctor's VMs resolves a name.
	 * Set in boot's environment only, never in the doctor's. */
	snprintf(res, sizeof res, "ISOPOD_RESOLVER=127.0.0.1:%d", a->rebind_port);
	b = adv_tool_json_env(a, bav, !strcmp(mode, "filtered") && a->rebind_port ? env : NULL,
			      PROC_NULL, &st);
	json_decref(b);
	if (st) {
		sav[3] = (char *)id;
		json_decref(adv_tool_json(a, sav, PROC_NULL, &n));
		snprintf(why, wsz, "isopod-boot of %s (--net %s) failed (exit %d)", id, mode, st);
		json_decref(c);
		return -1;
	}
	if (avm_of(&a->vm[a->nvm], id, why, wsz) < 0) {
		json_decref(c);
		return -1;
	}
	a->vm[a->nvm++].ours = 1;
	json_decref(c);
	return 0;
}

static void stop_ours(struct adv *a)
{
	int i, st;

	for (i = 0; i < a->nvm; i++)
		if (a->vm[i].ours) {
			char *sav[] = { "isopod-stop", "--force", "--vm", a->vm[i].id, NULL };

			json_decref(adv_tool_json(a, sav, PROC_NULL, &st));
			if (st)
				warn("unable to stop %s (isopod-stop exit %d); isopod gc will reap it",
				     a->vm[i].id, st);
		}
}

/* What a probe from inside cannot see, checked on the host: each tap's
 * forwarding flag as netsetup set it (filtered off, open on) and its
 * fail-closed routing rule (priority 10, blackhole) in place, read back
 * with ip(8); its filter; the broker of the VM on its slot answering.
 * Each check {check, tap, ok, ...}. */
static json_t *host_checks(struct adv *a)
{
	json_t *out = json_array(), *rules = NULL, *r;
	char *av[] = { "ip", "-j", "-4", "rule", "show", NULL };
	struct proc_spec ps = PROC_SPEC(av);
	int k, nt = net_ntaps();
	char *buf = malloc(JSON_MAX_BYTES + 1);
	size_t i, len;

	ps.out = PROC_PIPE;
	/* an array: jansson's own parser (json_parse wants an object) */
	if (buf && proc_capture(&ps, buf, JSON_MAX_BYTES + 1, &len) >= 0 && len <= JSON_MAX_BYTES)
		rules = json_loadb(buf, len, 0, NULL);
	free(buf);
	for (k = 0; k < nt; k++) {
		char tap[32], p[PATH_MAX], mode[32], have[8] = "?";
		const char *want;
		int fd, rule = 0;
		ssize_t n;

		snprintf(tap, sizeof tap, NET_TAP_PREFIX "%d", k);
		want = !strcmp(net_tap_mode(k, mode, sizeof mode), "open") ? "1" : "0";
		if (pathn(p, sizeof p, "/proc/sys/net/ipv4/conf/%s/forwarding", tap) == 0 &&
		    (fd = open(p, O_RDONLY | O_CLOEXEC)) >= 0) {
			n = read(fd, have, sizeof have - 1);
			have[n > 0 ? n : 0] = 0;
			have[strcspn(have, "\n")] = 0;
			close(fd);
		}
		json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:b, s:s, s:s}", "check",
						     "tap-forwarding", "tap", tap, "mode", mode, "ok",
						     !strcmp(have, want), "want", want, "have", have));
		json_array_foreach(rules, i, r)
			rule |= json_integer_value(json_object_get(r, "priority")) == 10 &&
				!strcmp(json_string_value(json_object_get(r, "iif")) ?: "", tap) &&
				!strcmp(json_string_value(json_object_get(r, "action")) ?: "", "blackhole");
		json_array_append_new(out, adv_route_check(a, k, rule));
		json_array_append_new(out, adv_tc_check(k, mode));
		json_array_append_new(out, adv_broker_check(k, mode));
	}
	json_decref(rules);
	json_array_append_new(out, adv_netstate_check("before"));
	return out;
}

/* One run's setup: what is tested, and where it stopped. */
struct setup {
	const char *step;          /* the setup step that failed, or NULL */
	char why[1024];
	struct range allow[RANGES_ALLOW_MAX];
	size_t nallow;
	int nt, nfilt, nopen, want_none, want_filt, want_open;
};

/* The host the report is of: its machine id and name ("" unknown). */
static void host_id(char *mid, size_t msz, char *host, size_t hsz)
{
	int fd;
	ssize_t n;

	if ((fd = open("/etc/machine-id", O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, mid, msz - 1);
		mid[n > 0 ? n : 0] = 0;
		mid[strcspn(mid, "\n")] = 0;
		close(fd);
	}
	gethostname(host, hsz - 1);
}

/* The modes to test (--modes, else those the taps have) and the host's
 * allow_range overrides. */
static void plan(struct setup *su, const struct adv_opts *op)
{
	char mode[32], err[1024];
	int i;

	su->nt = net_ntaps();
	for (i = 0; i < su->nt; i++) {
		if (!strcmp(net_tap_mode(i, mode, sizeof mode), "open"))
			su->nopen++;
		else if (!strcmp(mode, "filtered"))
			su->nfilt++;
	}
	su->want_none = !op->modes || strstr(op->modes, "none");
	su->want_filt = op->modes ? strstr(op->modes, "filtered") != NULL : su->nfilt > 0;
	su->want_open = op->modes ? strstr(op->modes, "open") != NULL : su->nopen > 0;
	if (ranges_load_config(ranges_config_path(), su->allow, RANGES_ALLOW_MAX, &su->nallow, err,
			       sizeof err) < 0)
		su->nallow = 0;
}

/* isopod-attest subjects: what is tested, recorded first (isopod-attest
 * signs only these); NULL, with a warning, when it fails. */
static json_t *subjects(struct adv *a)
{
	char *sav[] = { "isopod-attest", "subjects", NULL };
	json_t *subj;
	int st;

	subj = adv_tool_json(a, sav, PROC_NULL, &st);
	if (st || !json_is_array(json_object_get(subj, "subjects"))) {
		json_array_append_new(a->warnings,
				      json_sprintf("isopod-attest subjects failed (exit %d): this report cannot be signed", st));
		json_decref(subj);
		subj = NULL;
	}
	return subj;
}

/* The VMs to probe: --vm's, or one booted per mode (two filtered ones
 * when two filtered slots exist).  -1 with su->step and su->why. */
static int setup_vms(struct adv *a, const struct adv_opts *op, struct setup *su)
{
	int i;

	if (op->vmref) {
		char id[VM_ID_SZ];

		if (vm_resolve(op->vmref, id, su->why, sizeof su->why) < 0 ||
		    avm_of(&a->vm[0], id, su->why, sizeof su->why) < 0)
			return su->step = "vm", -1;
		a->nvm = 1;
		return 0;
	}
	if ((su->want_filt || su->want_open) && su->nt == 0) {
		snprintf(su->why, sizeof su->why, "no isopod taps: host networking is not set up (sudo isopod-netsetup)");
		return su->step = "network", -1;
	}
	if (su->want_open && !a->open_control) {
		snprintf(su->why, sizeof su->why, "open slots exist but no --open-control ADDR:PORT (a TCP service an open guest may reach) was given");
		return su->step = "targets", -1;
	}
	if (su->want_none && boot_vm(a, "none", su->why, sizeof su->why) < 0)
		su->step = "boot";
	for (i = 0; !su->step && su->want_filt && i < (su->nfilt >= 2 ? 2 : 1); i++)
		if (boot_vm(a, "filtered", su->why, sizeof su->why) < 0)
			su->step = "boot";
	if (!su->step && su->want_open && boot_vm(a, "open", su->why, sizeof su->why) < 0)
		su->step = "boot";
	return su->step ? -1 : 0;
}

/* The doctor's own listeners: each gateway and the host addresses.  -1
 * with su->step and su->why. */
static int setup_listeners(struct adv *a, struct setup *su)
{
	int i;

	for (i = 0; i < a->nvm; i++)
		if (a->vm[i].gw[0] && !adv_own_has(a, a->vm[i].gw, IPPROTO_TCP) &&
		    (adv_own_open(a, a->vm[i].gw, ADV_LISTEN_PORT, IPPROTO_TCP) < 0 ||
		     adv_own_open(a, a->vm[i].gw, ADV_LISTEN_PORT, IPPROTO_UDP) < 0)) {
			snprintf(su->why, sizeof su->why, "unable to listen on %s:%d: %s", a->vm[i].gw,
				 ADV_LISTEN_PORT, strerror(errno));
			return su->step = "listeners", -1;
		}
	for (i = 0; i < a->nhost; i++)
		if (adv_own_open(a, a->hostaddr[i], ADV_LISTEN_PORT, IPPROTO_TCP) < 0 ||
		    adv_own_open(a, a->hostaddr[i], ADV_LISTEN_PORT, IPPROTO_UDP) < 0) {
			snprintf(su->why, sizeof su->why, "unable to listen on %s:%d: %s", a->hostaddr[i],
				 ADV_LISTEN_PORT, strerror(errno));
			return su->step = "listeners", -1;
		}
	return 0;
}

/* lib/suite.h's classes of vm's mode, each produced by vm (as
 * isopod-attest sign requires them): one it did not produce is an ERROR
 * probe here, so the doctor and sign cannot drift apart unseen. */
static void suite_check(struct adv *a, const struct avm *vm)
{
	size_t nm, m, c, i;
	const struct suite_mode *sm = suite_modes(&nm);
	json_t *p;

	for (m = 0; m < nm; m++) {
		if (strcmp(sm[m].mode, vm->mode))
			continue;
		for (c = 0; sm[m].classes[c]; c++) {
			int have = 0;
			char n[96], why[160];

			json_array_foreach(a->probes, i, p)
				have |= !strcmp(json_string_value(json_object_get(p, "vm")) ?: "", vm->id) &&
					!strcmp(json_string_value(json_object_get(p, "class")) ?: "", sm[m].classes[c]);
			if (have)
				continue;
			snprintf(n, sizeof n, "missing-class-%s", sm[m].classes[c]);
			snprintf(why, sizeof why, "the suite (lib/suite.h) has class %s for mode %s, and this VM produced no probe of it",
				 sm[m].classes[c], vm->mode);
			adv_probe_missing(a, vm, sm[m].classes[c], n, why);
		}
	}
}

/* A second VM of a mode runs the same probes: its names get the mode's
 * count ("filtered2/metadata-tcp"), as a report names each probe once. */
static void rename_again(struct adv *a, int i, size_t first)
{
	int k, nth = 1;
	size_t j, ml = strlen(a->vm[i].mode);
	json_t *p;

	for (k = 0; k < i; k++)
		nth += !strcmp(a->vm[k].mode, a->vm[i].mode);
	if (nth < 2)
		return;
	for (j = first; j < json_array_size(a->probes); j++) {
		const char *n;
		char nn[256];

		p = json_array_get(a->probes, j);
		n = json_string_value(json_object_get(p, "name"));
		if (!n || strncmp(n, a->vm[i].mode, ml) || n[ml] != '/')
			continue;
		snprintf(nn, sizeof nn, "%s%d%s", a->vm[i].mode, nth, n + ml);
		json_object_set_new(p, "name", json_string(nn));
	}
}

/* Capture, VMs, listeners, then every probe; *hc the host checks.  -1
 * when the setup failed (su->step). */
static int probe_all(struct adv *a, const struct adv_opts *op, struct setup *su, json_t **hc)
{
	int i;

	if ((a->sniff = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL))) < 0) {
		snprintf(su->why, sizeof su->why, "unable to open a packet socket: %s (root needed)", strerror(errno));
		return su->step = "capture", -1;
	} else {
		int big = 8 << 20;

		setsockopt(a->sniff, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	}
	if (su->want_filt && !op->vmref && adv_rebind_open(a) < 0) {
		snprintf(su->why, sizeof su->why, "unable to open the doctor's resolver on 127.0.0.1:%d: %s",
			 NET_DOCTOR_DNS_PORT, strerror(errno));
		return su->step = "listeners", -1;
	}
	/* (two networked VMs booted: each must probe the other) */
	a->want_peers = !op->vmref &&
			(su->want_filt ? (su->nfilt >= 2 ? 2 : 1) : 0) + su->want_open >= 2;
	if (setup_vms(a, op, su) < 0 || setup_listeners(a, su) < 0)
		return -1;
	/* the host side, once (not with --vm: that VM's own probes only) */
	if (!op->vmref) {
		json_decref(*hc);
		*hc = host_checks(a);
	}
	/* every VM the whole suite of its mode (a second one of a mode too:
	 * the same policy on another slot is not the same rules) */
	for (i = 0; i < a->nvm; i++) {
		size_t first = json_array_size(a->probes);

		if (!strcmp(a->vm[i].mode, "none")) {
			adv_probes_none(a, &a->vm[i]);
		} else {
			adv_probes_net(a, &a->vm[i], su->allow, su->nallow, 0);
			adv_probes_net2(a, &a->vm[i]);
		}
		suite_check(a, &a->vm[i]);
		rename_again(a, i, first);
	}
	/* and nothing changed while the probes ran */
	if (!op->vmref)
		json_array_append_new(*hc, adv_netstate_check("after"));
	return 0;
}

/* The report's VMs, each {id, mode, tap, guest, booted_by_doctor}. */
static json_t *vms_json(const struct adv *a)
{
	json_t *vms = json_array();
	int i;

	for (i = 0; i < a->nvm; i++)
		json_array_append_new(vms, json_pack("{s:s, s:s, s:s?, s:s?, s:b}", "id", a->vm[i].id,
						     "mode", a->vm[i].mode, "tap",
						     a->vm[i].tap[0] ? a->vm[i].tap : NULL, "guest",
						     a->vm[i].guest[0] ? a->vm[i].guest : NULL,
						     "booted_by_doctor", a->vm[i].ours));
	return vms;
}

/* The report's targets. */
static json_t *targets_json(const struct adv *a)
{
	json_t *t = json_pack("{s:s, s:s, s:s?, s:i, s:s?}", "metadata", a->meta, "public",
			      a->public_addr, "host_gateway", a->gwhost[0] ? a->gwhost : NULL,
			      "udp_port", a->udp_port, "open_control", a->open_control);
	json_t *ha = json_array();
	int i;

	for (i = 0; i < a->nhost; i++)
		json_array_append_new(ha, json_string(a->hostaddr[i]));
	json_object_set_new(t, "host_addresses", ha);
	return t;
}

int adv_run(struct adv *a, const struct adv_opts *op, json_t **report)
{
	char started[32], finished[32], mid[64] = "", host[256] = "";
	const char *verdict;
	struct setup su = { 0 };
	json_t *subj, *o, *vms, *hc = json_array(), *c;
	size_t j;
	int hbad = 0;

	*report = NULL;
	iso_now(started, sizeof started);
	host_id(mid, sizeof mid, host, sizeof host);
	plan(&su, op);
	subj = subjects(a);
	probe_all(a, op, &su, &hc);
	json_array_foreach(hc, j, c)
		hbad += !json_is_true(json_object_get(c, "ok"));
	vms = vms_json(a);
	if (!a->fatal[0])
		stop_ours(a);
	if (a->fatal[0]) {
		json_decref(subj), json_decref(vms), json_decref(hc);
		return -1;
	}
	iso_now(finished, sizeof finished);
	if (su.step || a->error)
		verdict = "error";
	else if (a->fail || hbad || !json_array_size(a->probes))
		verdict = "fail";
	else
		verdict = "pass";
	o = json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:s, s:s, s:O?, s:{s:b, s:s?, s:s?}, s:o, s:s,"
		      " s:{s:i, s:i, s:i, s:i}, s:O, s:O}",
		      "doctor", "version", ISOPOD_VERSION, "suite", "adverse", "host", "id", mid,
		      "hostname", host, "started", started, "finished", finished, "subjects",
		      subj ? json_object_get(subj, "subjects") : NULL, "setup", "ok", !su.step,
		      "step", su.step, "why", su.step ? su.why : NULL, "vms", vms, "verdict",
		      verdict, "counts", "probes", (int)json_array_size(a->probes), "pass", a->pass,
		      "fail", a->fail, "error", a->error, "probes", a->probes, "warnings", a->warnings);
	json_decref(subj);
	if (!o) {
		json_decref(hc);
		adv_fatal(a, EX_SYS, "unable to build the report");
		return -1;
	}
	json_object_set_new(o, "host_checks", hc);
	json_object_set_new(o, "targets", targets_json(a));
	*report = o;
	return 0;
}
