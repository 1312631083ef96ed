/* advprobe.c - the adverse suite's probes: the doctor's own listeners, the
 * tools it runs, the probe classes of lib/suite.h and the run of one probe
 * (its five steps, its verdict); see advprobe.h. */
#include "advprobe.h"
#include "proc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void adv_fatal(struct adv *a, int code, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	if (a->fatal[0])
		return;
	va_start(ap, fmt);
	vreason(a->fatal, sizeof a->fatal, e, fmt, ap);
	va_end(ap);
	a->fatal_code = code;
}

int adv_addr(const char *s, int *af, uint8_t a[16])
{
	if (inet_pton(AF_INET, s, a) == 1)
		return *af = 4, 0;
	if (inet_pton(AF_INET6, s, a) == 1)
		return *af = 6, 0;
	return -1;
}

int adv_own_open(struct adv *a, const char *addr, int port, int proto)
{
	struct own *o;
	union {
		struct sockaddr sa;
		struct sockaddr_in in;
		struct sockaddr_in6 in6;
	} u = { 0 };
	int af, one = 1, fd;
	uint8_t b[16];
	socklen_t sl;

	if (a->nown >= ADV_MAXOWN || adv_addr(addr, &af, b) < 0)
		return errno = EINVAL, -1;
	if (af == 4) {
		u.in.sin_family = AF_INET, u.in.sin_port = htons((uint16_t)port);
		memcpy(&u.in.sin_addr, b, 4);
		sl = sizeof u.in;
	} else {
		u.in6.sin6_family = AF_INET6, u.in6.sin6_port = htons((uint16_t)port);
		memcpy(&u.in6.sin6_addr, b, 16);
		sl = sizeof u.in6;
	}
	fd = socket(af == 4 ? AF_INET : AF_INET6,
		    (proto == IPPROTO_TCP ? SOCK_STREAM : SOCK_DGRAM) | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* No IP_FREEBIND: the bind must fail for an address that is not this
	 * host's, or a "host address" target could be any silent address. */
	if (bind(fd, &u.sa, sl) < 0 || (proto == IPPROTO_TCP && listen(fd, 8) < 0)) {
		int e = errno;

		close(fd);
		return errno = e, -1;
	}
	o = &a->own[a->nown++];
	*o = (struct own){ .port = port, .proto = proto, .fd = fd };
	snprintf(o->addr, sizeof o->addr, "%s", addr);
	return 0;
}

/* Take what arrived on the doctor's own sockets, counting each hit; a TCP
 * connection gets a line and is closed, so a probe that got in ends at
 * once with an answer instead of waiting out its timeout. */
static void own_service(struct adv *a)
{
	static const char hello[] = "isopod-doctor: you reached a listener the doctor owns\n";
	char b[512];
	int i, c;

	for (i = 0; i < a->nown; i++) {
		struct own *o = &a->own[i];

		if (o->proto == IPPROTO_TCP)
			while ((c = accept4(o->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
				if (write(c, hello, sizeof hello - 1) < 0) {
					/* the hit counts all the same */
				}
				close(c), o->hits++;
			}
		else if (o->rebind)
			adv_rebind_serve(a, o->fd);
		else
			while (recv(o->fd, b, sizeof b, MSG_DONTWAIT) >= 0)
				o->hits++;
	}
}

/* Hits on the doctor's own sockets for addr/proto since the last call. */
static long own_hits(struct adv *a, const char *addr, int proto)
{
	long n = 0;
	int i;

	own_service(a);
	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			n += a->own[i].hits, a->own[i].hits = 0;
	return n;
}

int adv_own_has(const struct adv *a, const char *addr, int proto)
{
	int i;

	for (i = 0; i < a->nown; i++)
		if (!strcmp(a->own[i].addr, addr) && a->own[i].proto == proto)
			return 1;
	return 0;
}

/* A tool's stdout (at most 4 MiB) as one JSON value, the doctor's own
 * listeners served while it runs (a guest connecting to one must get in
 * and out while the probe runs, not wait for it to end); NULL if none. */
static json_t *read_serving(struct adv *a, int fd)
{
	size_t n = 0, cap = 0;
	char *buf = NULL;
	json_t *j;

	for (;;) {
		struct pollfd pf[1 + ADV_MAXOWN] = { { .fd = fd, .events = POLLIN } };
		int i, np = 1;
		ssize_t r;

		for (i = 0; i < a->nown; i++)
			pf[np++] = (struct pollfd){ .fd = a->own[i].fd, .events = POLLIN };
		if (poll(pf, (nfds_t)np, -1) < 0) {
			if (errno == EINTR)
				continue;
			adv_fatal(a, EX_SYS, "unable to poll:");
			break;
		}
		own_service(a);
		if (!pf[0].revents)
			continue;
		if (n + 65536 > cap) {
			char *nb;

			if (cap >= (4u << 20))
				break;
			cap = cap ? cap * 2 : 65536;
			if (!(nb = realloc(buf, cap))) {
				adv_fatal(a, EX_SYS, "out of memory");
				break;
			}
			buf = nb;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	j = buf && !a->fatal[0] ? json_loadb(buf, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
	free(buf);
	return j;
}

json_t *adv_tool_json(struct adv *a, char **av, int in, int *st)
{
	return adv_tool_json_env(a, av, NULL, in, st);
}

json_t *adv_tool_json_env(struct adv *a, char **av, char *const *env, int in, int *st)
{
	char path[PATH_MAX];
	struct proc_spec ps = PROC_SPEC(av);
	int rfd, w = 0;
	json_t *out;
	pid_t pid;

	*st = EX_SYS;
	if (a->fatal[0])
		return NULL;
	/* (a path over PATH_MAX: its first 64 bytes are libexec's) */
	if (pathn(path, sizeof path, "%s/%s", a->libexec, av[0]) < 0)
		return adv_fatal(a, EX_USAGE, "path too long: %.64s...", a->libexec), NULL;
	ps.file = path;
	ps.in = in;
	ps.err = PROC_INHERIT;
	ps.env = env;
	ps.out = PROC_PIPE;
	if ((pid = proc_spawn_pipe(&ps, &rfd)) < 0)
		return adv_fatal(a, EX_SYS, "unable to start %s:", path), NULL;
	out = read_serving(a, rfd);
	close(rfd);
	if (proc_wait(pid, &w) < 0) {
		adv_fatal(a, EX_SYS, "unable to wait for %s:", path);
		json_decref(out);
		return NULL;
	}
	if (a->fatal[0]) {
		json_decref(out);
		return NULL;
	}
	*st = proc_status(w);
	return out;
}

/* isopod-exec --vm ID -- sh -c SCRIPT: its result, or NULL. */
static json_t *guest_sh(struct adv *a, const struct avm *vm, const char *script, int tmo_ms, int *st)
{
	char t[32];
	char *av[] = { "isopod-exec", "--vm", (char *)vm->id, "--timeout-ms", t, "--", "sh", "-c",
		       (char *)script, NULL };

	snprintf(t, sizeof t, "%d", tmo_ms);
	return adv_tool_json(a, av, PROC_NULL, st);
}

/* Shell for one guest request: "R A" lines (status, answered 0/1).
 * SH_UDP asks for A alone: without a type, busybox nslookup sends A and
 * AAAA back to back and waits until both are answered, though one already
 * says "answered".  A guest whose clock moved in whole ticks gave both one
 * id and nslookup dropped the second answer: its whole timeout (fixed at
 * the cause, doc/DECISIONS.md "TSC under TCG"; one query cannot meet it).
 * An answer to the one query counts as before; no answer at all is still
 * no answer. */
#define SH_TCP "o=$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | %s -w %d %s %d 2>/dev/null); r=$?; " \
	       "if [ -n \"$o\" ]; then a=1; else a=0; fi; echo \"%s $r $a\""
#define SH_UDP "o=$(nslookup -type=a -port=%d -timeout=%d -retry=1 doctor-probe.invalid %s 2>&1); r=$?; " \
	       "case $o in *NXDOMAIN*|*REFUSED*|*Name:*) a=1;; *) a=0;; esac; echo \"%s $r $a\""
#define SH_ICMP "ping -c1 -W%d %s >/dev/null 2>&1; r=$?; " \
		"if [ $r = 0 ]; then a=1; else a=0; fi; echo \"%s $r $a\""

static void sh_tcp(char *b, size_t n, const char *nc, int tmo, const char *addr, int port,
		   const char *tag)
{
	snprintf(b, n, SH_TCP, nc, tmo, addr, port, tag);
}

/* The control of a protocol from vm: what its mode allows. */
int adv_control_for(struct adv *a, const struct avm *vm, struct probe *p)
{
	switch (p->proto) {
	case IPPROTO_TCP:
		if (!strcmp(vm->mode, "filtered")) {
			/* the broker's proxy answers (a refusal is an answer) */
			snprintf(p->control, sizeof p->control,
				 "o=$(printf 'GET http://doctor-control.invalid/ HTTP/1.0\\r\\n\\r\\n' | "
				 "%s -w %d %s 3128 2>/dev/null); r=$?; case $o in HTTP/*) a=1;; *) a=0;; "
				 "esac; echo \"control $r $a\"", a->nc, a->tmo + 1, vm->gw);
			return 0;
		}
		if (a->open_control) {
			char h[64];
			const char *c = strrchr(a->open_control, ':');

			snprintf(h, sizeof h, "%.*s", (int)(c - a->open_control), a->open_control);
			sh_tcp(p->control, sizeof p->control, a->nc, a->tmo + 1, h, atoi(c + 1),
			       "control");
			return 0;
		}
		return -1;
	case IPPROTO_UDP:
		/* the gateway's DNS (the broker) answers, a refusal included */
		snprintf(p->control, sizeof p->control, SH_UDP, 53, a->tmo + 1, vm->gw, "control");
		return 0;
	case IPPROTO_ICMP:
		snprintf(p->control, sizeof p->control, SH_ICMP, a->tmo + 1, vm->gw, "control");
		return 0;
	default:
		return -1;
	}
}

static json_t *step(const char *name, int ok, json_t *ev)
{
	json_t *s = json_pack("{s:s, s:b}", "step", name, "ok", ok);

	if (ev) {
		json_object_update(s, ev);
		json_decref(ev);
	}
	return s;
}

/* "tag R A" out of the guest's output; -1 when the line is missing. */
static int line_of(const char *out, const char *tag, int *r, int *ans)
{
	const char *l = out;
	size_t tl = strlen(tag);

	while (l && *l) {
		if (!strncmp(l, tag, tl) && l[tl] == ' ' && sscanf(l + tl, " %d %d", r, ans) == 2)
			return 0;
		l = strchr(l, '\n');
		l = l ? l + 1 : NULL;
	}
	return -1;
}

/* Serve the doctor's listeners for ms more: a packet still on its way when
 * the guest's program gave up is counted (the capture and the hits). */
static void grace(struct adv *a, int ms)
{
	int64_t end = mono_ms() + ms, left;

	while ((left = end - mono_ms()) > 0) {
		struct pollfd pf[ADV_MAXOWN];
		int i;

		for (i = 0; i < a->nown; i++)
			pf[i] = (struct pollfd){ .fd = a->own[i].fd, .events = POLLIN };
		if (poll(pf, (nfds_t)a->nown, (int)left) < 0 && errno != EINTR)
			break;
		own_service(a);
	}
}

/* One run of a probe: what each step found, for the next ones and the
 * verdict. */
struct run {
	char why[256];
	json_t *steps, *res;
	int st, tool_ok, cr, ca, ar, aa, ok_ctl, att_blocked, ev_ok;
	int xok;
	char xwhy[96];
	const char *out;
	long hits;
	struct seen s;
	struct counters cb, ce;
	long tc_pass, tc_drop, nft_drop;
	long long lfrom;
	int enforced, led, tc_absent, routed;
	const char *by;
};

/* 1. liveness, right before: the lock held, the agent runs `true`.  0 when
 * not: the other steps are recorded failed and r->why says why. */
static int probe_liveness(struct adv *a, const struct avm *vm, struct run *r)
{
	int live;

	live = vm_running(vm->id);
	if (live) {
		r->res = guest_sh(a, vm, "true", 30000, &r->st);
		live = r->st == 0 && json_integer_value(json_object_get(r->res, "exit_code")) == 0 &&
		       json_is_integer(json_object_get(r->res, "exit_code"));
		json_decref(r->res);
		r->res = NULL;
	}
	json_array_append_new(r->steps, step("liveness", live,
					  json_pack("{s:s, s:b, s:i}", "vm", vm->id, "lock_held",
						    vm_running(vm->id), "noop_status", r->st)));
	if (!live) {
		json_array_append_new(r->steps, step("tooling", 0, NULL));
		json_array_append_new(r->steps, step("control", 0, NULL));
		json_array_append_new(r->steps, step("attempt", 0, NULL));
		json_array_append_new(r->steps, step("evidence", 0, NULL));
		snprintf(r->why, sizeof r->why, "the VM is not running (lock free or agent silent)");
	}
	return live;
}

/* 2-4 in one request: the tool, the control, the attempt; around it the
 * host's counters, ledger, capture and listeners for the evidence. */
static void probe_request(struct adv *a, const struct avm *vm, struct probe *p, struct run *r)
{
	char script[4096];

	snprintf(script, sizeof script,
		 "command -v %s >/dev/null 2>&1; echo \"tooling $?\"\n%s\n%s\n", p->tool, p->control,
		 p->attempt);
	if (!p->nonic) {
		adv_counters_read(vm, &r->cb);
		r->lfrom = adv_ledger_size(a, vm);
	}
	adv_sniff_drain(a->sniff);
	if (p->proto)
		own_hits(a, p->addr, p->proto);
	if (p->x)
		adv_xev_before(p->x);
	r->res = guest_sh(a, vm, script, (a->tmo * 3 + 20) * 1000, &r->st);
	grace(a, ADV_GRACE_MS);
	r->s = adv_sniff_count(a->sniff, vm, p->proto ? p->addr : NULL, p->proto, p->port,
			p->needle[0] ? p->needle : NULL, p->leak[0] ? p->leak : NULL);
	if (!p->nonic)
		adv_counters_read(vm, &r->ce);
	if (p->x) {
		r->xok = p->x->after(a, vm, p->x) == 0;
		r->s.in = p->x->in, r->s.out = p->x->out, r->s.back = p->x->back;
	}
	if (p->proto)
		r->hits = own_hits(a, p->addr, p->proto);
	r->out = json_string_value(json_object_get(r->res, "stdout"));
	if (!r->out)
		r->out = "";
}

/* 2. tooling: the program exists and it ran, its control too. */
static void probe_tooling(const struct probe *p, struct run *r)
{
	r->tool_ok = r->res && !json_is_true(json_object_get(r->res, "timed_out")) &&
		  strstr(r->out, "tooling 0\n") != NULL;
	if (line_of(r->out, "control", &r->cr, &r->ca) < 0 || line_of(r->out, "attempt", &r->ar, &r->aa) < 0)
		r->tool_ok = 0;
	/* the program itself must have run: not 126/127, not a signal */
	if (r->cr == 126 || r->cr == 127 || r->cr > 128 || r->ar == 126 || r->ar == 127 || r->ar > 128)
		r->tool_ok = 0;
	json_array_append_new(r->steps, step("tooling", r->tool_ok,
					  json_pack("{s:s, s:b, s:i, s:i}", "program", p->tool,
						    "exec_timed_out",
						    json_is_true(json_object_get(r->res, "timed_out")),
						    "control_status", r->cr, "attempt_status", r->ar)));
}

/* 3. the control: what the policy allows got its answer. */
static void probe_control(struct run *r)
{
	r->ok_ctl = r->tool_ok && r->ca == 1;
	json_array_append_new(r->steps, step("control", r->ok_ctl, json_pack("{s:i, s:b}", "status", r->cr,
									"answered", r->ca == 1)));
}

/* 4. the attempt: it got no answer. */
static void probe_attempt(const struct probe *p, struct run *r)
{
	r->att_blocked = r->aa != 1;
	json_array_append_new(r->steps, step("attempt", r->tool_ok && !r->att_blocked,
					  json_pack("{s:s, s:i, s:b}", "target", p->addr, "status", r->ar,
						    "answered", r->aa == 1)));
}

/* 5. the host's evidence */
static void probe_evidence(struct adv *a, const struct avm *vm, const struct probe *p, struct run *r)
{
	json_t *ev;

	if (p->nonic) {
		r->ev_ok = adv_no_nic(vm, r->why, sizeof r->why) == 0;
		ev = json_pack("{s:b, s:s?}", "no_nic", r->ev_ok, "why", r->ev_ok ? NULL : r->why);
	} else {
		json_t *cev = adv_counters_delta(&r->cb, &r->ce, &r->tc_pass, &r->tc_drop, &r->nft_drop);

		r->led = !p->ledger_name[0] ||
		      adv_ledger_refused(a, vm, r->lfrom, p->ledger_name, p->ledger_kind, p->ledger_port);
		/* isopod's enforcement took the attempt: its tap's filter (ours,
		 * read before and after) dropped it or passed it to a drop rule
		 * of the table that moved; a broker's refusal: passed to it.  An
		 * open VM's packet for another VM is dropped by the routing
		 * before any rule (the reverse-path lookup meets the other tap's
		 * fail-closed rule; its host check tests that it works): passed
		 * by the filter, and nothing out, is its evidence. */
		r->tc_absent = !json_is_object(json_object_get(cev, "tc_filter"));
		r->routed = !strcmp(p->cls, "other-vm") && !strcmp(vm->mode, "open");
		r->by = r->tc_absent ? NULL : p->broker ? (r->tc_pass > 0 ? "broker" : NULL) :
		     r->tc_drop > 0 ? "tc" : r->nft_drop > 0 ? "nft" : r->routed && r->tc_pass > 0 ? "routing" : NULL;
		/* a class with evidence of its own: its filter counter, by name */
		if (p->x && !p->broker && !r->tc_absent) {
			int k = p->x->tc_reason;

			r->by = k >= 0 && r->ce.tc[k] > r->cb.tc[k] && (k != TCF_ARP || r->xok) ? p->x->by : NULL;
			snprintf(r->xwhy, sizeof r->xwhy, "the tap filter's %s counter did not move",
				 k >= 0 ? tcfilter_count_names[k] : "?");
		}
		r->enforced = r->by != NULL;
		r->ev_ok = r->s.in > 0 && r->s.out == 0 && (p->broker || r->s.back == 0) && r->s.payload == 0 &&
			r->hits == 0 && r->s.drops == 0 && r->led && r->enforced;
		ev = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "tap", vm->tap, "in_from_guest",
			       (json_int_t)r->s.in, "out_to_target", (json_int_t)r->s.out, "back_to_guest",
			       (json_int_t)r->s.back, "own_listener_hits", (json_int_t)r->hits,
			       "capture_drops", (json_int_t)r->s.drops, "leaked_payload",
			       (json_int_t)r->s.payload);
		if (p->ledger_name[0])
			json_object_set_new(ev, "ledger_refusal", json_boolean(r->led));
		json_object_update(ev, cev);
		json_decref(cev);
		json_object_set_new(ev, "enforced", json_boolean(r->enforced));
		json_object_set_new(ev, "enforced_by", r->by ? json_string(r->by) : json_null());
		if (p->x) {
			json_object_update(ev, p->x->ev);
			r->ev_ok = r->ev_ok && r->xok;
		}
	}
	json_array_append_new(r->steps, step("evidence", r->ev_ok, ev));
}

/* The verdict of a live probe's steps; r->why says why it is not a pass. */
static const char *probe_verdict(const struct avm *vm, const struct probe *p, struct run *r)
{
	const char *verdict;

	if (!r->tool_ok) {
		verdict = "error";
		snprintf(r->why, sizeof r->why, "the probe program %s did not run (missing, 126/127, a signal or a timeout)", p->tool);
	} else if (!r->ok_ctl) {
		verdict = "error";
		snprintf(r->why, sizeof r->why, "the control failed: the probe would prove nothing");
	} else if (!r->att_blocked) {
		verdict = "fail";
		snprintf(r->why, sizeof r->why, "the attempt got an answer");
	} else if (!p->nonic && r->s.drops) {
		verdict = "error";
		snprintf(r->why, sizeof r->why, "the capture dropped frames");
	} else if (!p->nonic && r->s.in == 0) {
		verdict = "error";
		snprintf(r->why, sizeof r->why, "the attempt never reached the host (nothing on %s)", vm->tap);
	} else if (!r->ev_ok) {
		verdict = "fail";
		if (!p->nonic)
			snprintf(r->why, sizeof r->why, "%s",
				 r->s.out || r->s.payload ? "the probe left the host (seen on the way out)" :
				 r->s.back && !p->broker ? "the target answered the guest" :
				 r->hits ? "the doctor's listener got a hit" :
				 !r->led ? "no refusal in the broker's ledger" :
				 p->x && !r->xok ? p->x->why :
				 r->tc_absent ?
				 "the tap's tc filter counters are absent (no filter of ours to read)" :
				 p->x && r->xwhy[0] ? r->xwhy :
				 "no enforcement counter moved (neither the tap's filter nor an isopod drop rule)");
	} else {
		verdict = "pass";
	}
	return verdict;
}

void adv_run_probe(struct adv *a, const struct avm *vm, struct probe *p)
{
	struct run r = { .steps = json_array(), .cr = -1, .ar = -1, .xok = 1, .out = "", .led = 1 };
	const char *verdict;
	int64_t t0 = mono_ms();

	if (a->fatal[0] || !adv_class_on(a, p->cls)) {
		json_decref(r.steps);
		return; /* the suite ends without a report; or --class left it out */
	}
	if (!probe_liveness(a, vm, &r)) {
		verdict = "error";
		goto done;
	}
	probe_request(a, vm, p, &r);
	probe_tooling(p, &r);
	probe_control(&r);
	probe_attempt(p, &r);
	probe_evidence(a, vm, p, &r);
	verdict = probe_verdict(vm, p, &r);
done:
	if (!strcmp(verdict, "pass"))
		a->pass++;
	else if (!strcmp(verdict, "fail"))
		a->fail++;
	else
		a->error++;
	json_array_append_new(a->probes,
			      json_pack("{s:s, s:s, s:s, s:s, s:s?, s:o, s:I}", "name", p->name, "class",
					p->cls, "vm", vm->id, "verdict", verdict, "why",
					r.why[0] ? r.why : NULL, "steps", r.steps, "ms",
					(json_int_t)(mono_ms() - t0)));
	json_decref(r.res);
	free(r.cb.nft);
	free(r.ce.nft);
}

struct probe *adv_probe_new(struct probe *p, const char *cls, int proto, const char *addr,
			       int port, const char *tool)
{
	*p = (struct probe){ .cls = cls, .proto = proto, .port = port, .tool = tool };
	snprintf(p->addr, sizeof p->addr, "%s", addr ? addr : "");
	return p;
}

/* One probe of protocol proto against addr (port for TCP/UDP), with the
 * mode's control. */
static void probe_ip(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		     int proto, const char *addr, int port)
{
	struct probe p;

	adv_probe_new(&p, cls, proto, addr, port,
		  proto == IPPROTO_TCP ? a->nc : proto == IPPROTO_UDP ? "nslookup" : "ping");
	snprintf(p.name, sizeof p.name, "%s/%s", vm->mode, name);
	if (adv_control_for(a, vm, &p) < 0) {
		/* no control: the probe cannot tell "blocked" from "broken" */
		snprintf(p.control, sizeof p.control, "echo 'control 0 0'");
	}
	if (proto == IPPROTO_TCP)
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, addr, port, "attempt");
	else if (proto == IPPROTO_UDP)
		snprintf(p.attempt, sizeof p.attempt, SH_UDP, port, a->tmo, addr, "attempt");
	else
		snprintf(p.attempt, sizeof p.attempt, SH_ICMP, a->tmo, addr, "attempt");
	if (proto == IPPROTO_ICMP)
		p.port = -1;
	adv_run_probe(a, vm, &p);
}

/* The other VM of an other-vm probe alive right before it (its lock held,
 * its agent runs `true`): a dead target answers nothing, which is no
 * proof.  0, with an ERROR probe named name, when it is not. */
static int peer_alive(struct adv *a, const struct avm *vm, const struct avm *o, const char *name)
{
	json_t *res;
	int st = 0, live = vm_running(o->id);
	char why[160];

	if (live) {
		res = guest_sh(a, o, "true", 30000, &st);
		live = st == 0 && json_is_integer(json_object_get(res, "exit_code")) &&
		       json_integer_value(json_object_get(res, "exit_code")) == 0;
		json_decref(res);
	}
	if (live)
		return 1;
	snprintf(why, sizeof why, "the other VM %s is not running (lock free or agent silent)", o->id);
	adv_probe_missing(a, vm, "other-vm", name, why);
	return 0;
}

/* The probe just added: its liveness step names the other VM too. */
static void peer_note(struct adv *a, const struct avm *o)
{
	json_t *p = json_array_get(a->probes, json_array_size(a->probes) - 1);
	json_t *l = json_array_get(json_object_get(p, "steps"), 0);

	json_object_set_new(l, "peer", json_string(o->id));
	json_object_set_new(l, "peer_alive", json_true());
}

/* One address of every denied IPv4 block: its first host. */
static void probes_ranges(struct adv *a, const struct avm *vm, const struct range *allow,
			  size_t nallow)
{
	const struct range_def *rl;
	size_t nr, i;
	char n[128];

	rl = ranges_list(&nr);
	for (i = 0; i < nr; i++) {
		struct range r;
		const char *why;
		char t[64];
		uint8_t h[4];
		size_t j;
		int opened = 0;

		if (range_parse(rl[i].cidr, &r, &why) < 0 || r.af != 4)
			continue;
		/* the guest's own kernel keeps these (0/8, 127/8) or will not
		 * send them unasked (the limited broadcast): not the host's to block */
		if (r.a[0] == 0 || r.a[0] == 127 || r.len == 32)
			continue;
		memcpy(h, r.a, 4);
		h[3] |= 1;
		for (j = 0; j < nallow; j++)
			opened |= range_has(&allow[j], 4, h);
		if (opened && !strcmp(vm->mode, "open"))
			continue; /* the host opened it (allow_range): a warning already says so */
		inet_ntop(AF_INET, h, t, sizeof t);
		snprintf(n, sizeof n, "range-%s", rl[i].cidr);
		/* multicast takes no TCP: a datagram */
		if (r.a[0] >= 224 && r.a[0] < 240)
			probe_ip(a, vm, "denied-range", n, IPPROTO_UDP, t, a->udp_port);
		else
			probe_ip(a, vm, "denied-range", n, IPPROTO_TCP, t, 80);
	}
}

/* The host's own addresses, the gateway's ports other than the broker's,
 * the host's default gateway. */
static void probes_host(struct adv *a, const struct avm *vm)
{
	char n[128], gwn[96];
	int k;

	/* the host's own addresses: the doctor's listener on each */
	if (!a->nhost)
		adv_probe_missing(a, vm, "host", "host-none", "no host address to probe: the class would pass empty (give --host-addr)");
	for (k = 0; k < a->nhost; k++) {
		snprintf(n, sizeof n, "host-%s-tcp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_TCP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-udp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_UDP, a->hostaddr[k], ADV_LISTEN_PORT);
		snprintf(n, sizeof n, "host-%s-icmp", a->hostaddr[k]);
		probe_ip(a, vm, "host", n, IPPROTO_ICMP, a->hostaddr[k], -1);
	}
	/* the gateway's ports other than the broker's */
	snprintf(gwn, sizeof gwn, "gateway-%s-port-%d", vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-tcp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_TCP, vm->gw, ADV_LISTEN_PORT);
	snprintf(n, sizeof n, "%s-udp", gwn);
	probe_ip(a, vm, "gateway-port", n, IPPROTO_UDP, vm->gw, ADV_LISTEN_PORT);
	/* the host's default gateway */
	if (!a->gwhost[0])
		adv_probe_missing(a, vm, "host-gateway", "host-gateway-none", "no default gateway to probe: the class would pass empty (give --host-gateway)");
	if (a->gwhost[0]) {
		snprintf(n, sizeof n, "host-gateway-%s-tcp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_TCP, a->gwhost, 80);
		snprintf(n, sizeof n, "host-gateway-%s-icmp", a->gwhost);
		probe_ip(a, vm, "host-gateway", n, IPPROTO_ICMP, a->gwhost, -1);
	}
}

/* Another VM, this way (the other VM probes back in its own turn). */
static void probes_other_vm(struct adv *a, const struct avm *vm)
{
	char n[128];
	size_t i;
	int k;

	for (k = 0, i = 0; k < a->nvm; k++) {
		const struct avm *o = &a->vm[k];

		if (o == vm || !o->guest[0])
			continue;
		i++;
		if (!adv_class_on(a, "other-vm"))
			continue;
		snprintf(n, sizeof n, "other-vm-%s-to-%s-tcp", vm->guest, o->guest);
		if (peer_alive(a, vm, o, n)) {
			probe_ip(a, vm, "other-vm", n, IPPROTO_TCP, o->guest, 80);
			peer_note(a, o);
		}
		snprintf(n, sizeof n, "other-vm-%s-to-%s-icmp", vm->guest, o->guest);
		if (peer_alive(a, vm, o, n)) {
			probe_ip(a, vm, "other-vm", n, IPPROTO_ICMP, o->guest, -1);
			peer_note(a, o);
		}
	}
	if (!i && a->want_peers)
		adv_probe_missing(a, vm, "other-vm", "other-vm-none", "no other networked VM to probe: the class would pass empty");
}

/* Filtered forwards nothing (an IP literal, without and with the proxy),
 * and an unlisted name never leaves the host. */
static void probes_filtered(struct adv *a, const struct avm *vm)
{
	/* filtered forwards nothing: an IP literal, without and with the proxy */
	{
		struct probe p;

		/* without the proxy variables: nc honours none */
		adv_probe_new(&p, "filtered-forwarding", IPPROTO_TCP, a->public_addr, 80, a->nc);
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-direct", a->public_addr);
		adv_control_for(a, vm, &p);
		sh_tcp(p.attempt, sizeof p.attempt, a->nc, a->tmo, a->public_addr, 80, "attempt");
		adv_run_probe(a, vm, &p);

		adv_probe_new(&p, "filtered-forwarding", IPPROTO_TCP, vm->gw, 3128, "wget");
		snprintf(p.name, sizeof p.name, "filtered/literal-%s-proxy", a->public_addr);
		adv_control_for(a, vm, &p);
		/* with them (isopod-exec sets them): the broker's refusal is quick;
		 * no -T: busybox 1.35's wget crashes with it */
		/* a port of its own: the probe's token in the ledger */
		{
			char rh[9];

			rand_hex(rh, 4);
			p.ledger_port = 20000 + (int)(strtoul(rh, NULL, 16) % 40000);
		}
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(wget -q -O- http://%s:%d/ 2>/dev/null); r=$?; if [ -n \"$o\" ]; then "
			 "a=1; else a=0; fi; echo \"attempt $r $a\"", a->public_addr, p.ledger_port);
		p.broker = 1;
		/* the evidence: the broker refused it (a line written since the
		 * probe began, with its port), nothing left for the address */
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", a->public_addr);
		snprintf(p.leak, sizeof p.leak, "%s", a->public_addr);
		p.ledger_kind = "http";
		adv_run_probe(a, vm, &p);
	}
	/* DNS exfiltration: an unlisted name never leaves the host */
	{
		struct probe p;
		char tag[17], qn[96];

		rand_hex(tag, 8);
		snprintf(qn, sizeof qn, "x%s.exfil.invalid", tag);
		adv_probe_new(&p, "dns-exfiltration", IPPROTO_UDP, vm->gw, 53, "nslookup");
		snprintf(p.name, sizeof p.name, "filtered/dns-exfiltration");
		adv_control_for(a, vm, &p);
		snprintf(p.attempt, sizeof p.attempt,
			 "o=$(nslookup -timeout=%d -retry=1 %s %s 2>&1); r=$?; case $o in "
			 "*Name:*x%s*) a=1;; *) a=0;; esac; echo \"attempt $r $a\"",
			 a->tmo, qn, vm->gw, tag);
		snprintf(p.needle, sizeof p.needle, "x%s", tag);
		p.broker = 1;
		snprintf(p.ledger_name, sizeof p.ledger_name, "%s", qn);
		p.ledger_kind = "dns";
		adv_run_probe(a, vm, &p);
	}
}

void adv_probes_net(struct adv *a, const struct avm *vm, const struct range *allow, size_t nallow,
		    int again)
{
	/* a second VM of a mode: the same policy, but the way back */
	if (!again) {
		probe_ip(a, vm, "metadata", "metadata-tcp", IPPROTO_TCP, a->meta, 80);
		probe_ip(a, vm, "metadata", "metadata-udp", IPPROTO_UDP, a->meta, a->udp_port);
		probe_ip(a, vm, "metadata", "metadata-icmp", IPPROTO_ICMP, a->meta, -1);
		probes_ranges(a, vm, allow, nallow);
		probes_host(a, vm);
	}
	probes_other_vm(a, vm);
	if (again || strcmp(vm->mode, "filtered"))
		return;
	probes_filtered(a, vm);
}

void adv_probes_none(struct adv *a, const struct avm *vm)
{
	struct probe p;

	adv_probe_new(&p, "none", 0, a->meta, -1, "ping");
	snprintf(p.name, sizeof p.name, "none/no-nic");
	snprintf(p.control, sizeof p.control, SH_ICMP, a->tmo, "127.0.0.1", "control");
	/* any interface but loopback and the kernel's idle tunnel devices, or
	 * an answer from the metadata address, is a way out */
	snprintf(p.attempt, sizeof p.attempt,
		 "a=0; for i in /sys/class/net/*; do case ${i##*/} in lo|sit0|tunl0|ip6tnl0|'*') ;; "
		 "*) a=1;; esac; done; ping -c1 -W%d %s >/dev/null 2>&1; r=$?; [ $r != 0 ] || a=1; "
		 "echo \"attempt $r $a\"", a->tmo, a->meta);
	p.nonic = 1;
	adv_run_probe(a, vm, &p);
}

int adv_class_on(const struct adv *a, const char *cls)
{
	const char *s = a->classes;
	size_t n = strlen(cls);

	if (!s)
		return 1;
	for (; *s; s += strcspn(s, ","), s += *s == ',')
		if (!strncmp(s, cls, n) && (s[n] == ',' || !s[n]))
			return 1;
	return 0;
}

void adv_probe_missing(struct adv *a, const struct avm *vm, const char *cls, const char *name,
		       const char *why)
{
	json_t *steps = json_array();
	static const char *const sn[] = { "liveness", "tooling", "control", "attempt", "evidence" };
	char n[160];
	size_t i;

	if (a->fatal[0] || !adv_class_on(a, cls))
		return;
	for (i = 0; i < sizeof sn / sizeof *sn; i++)
		json_array_append_new(steps, step(sn[i], 0, i ? NULL : json_pack("{s:s, s:b}", "vm", vm->id,
										  "lock_held", vm_running(vm->id))));
	snprintf(n, sizeof n, "%s/%s", vm->mode, name);
	a->error++;
	json_array_append_new(a->probes,
			      json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:i}", "name", n, "class", cls,
					"vm", vm->id, "verdict", "error", "why", why, "steps", steps,
					"ms", 0));
}
