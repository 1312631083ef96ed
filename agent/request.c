/* request.c - decoding and validating what the host sends: HELLO, EXEC,
 * FILE_PUT, FILE_GET, and the test for a new host's HELLO.  No I/O and no
 * agent state: a refusal comes back as its message, which the caller sends
 * as ERROR{bad_request} (HELLO's problems go to HELLO_ACK's ERROR), so
 * t/unit/agent_test.c and fuzz/agent_fuzz.c can drive these directly. */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append "; text" (or "text") to a NUL-terminated message buffer. */
void errcat(char *buf, size_t sz, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	if (len && len + 2 < sz) {
		memcpy(buf + len, "; ", 3);
		len += 2;
	}
	if (len + 1 >= sz)
		return;
	va_start(ap, fmt);
	vsnprintf(buf + len, sz - len, fmt, ap);
	va_end(ap);
}

int parse_cidr(const char *s, in_addr_t *addr, in_addr_t *mask)
{
	char ip[64], *slash, *end;
	struct in_addr a;
	unsigned long pfx = 32;

	snprintf(ip, sizeof ip, "%s", s);
	slash = strchr(ip, '/');
	if (slash) {
		*slash = 0;
		errno = 0;
		pfx = strtoul(slash + 1, &end, 10);
		if (errno || *end || end == slash + 1 || pfx > 32)
			return -1;
	}
	if (inet_pton(AF_INET, ip, &a) != 1)
		return -1;
	*addr = a.s_addr;
	*mask = pfx ? htonl(0xffffffffu << (32 - pfx)) : 0;
	return 0;
}

#define TAG_BIT(t) (1u << (t))
/* The tags each request takes at most once: all but ARG and ENV.  A
 * second value would be read one way here (the last wins) and maybe
 * another by some other reader of the same bytes, so it is refused
 * instead of guessed. */
#define HELLO_ONCE                                                                   \
	(TAG_BIT(T_VERSION) | TAG_BIT(T_COOKIE) | TAG_BIT(T_HOSTNAME) | TAG_BIT(T_TIME_NS) | \
	 TAG_BIT(T_SEED) | TAG_BIT(T_GROW) | TAG_BIT(T_NET_ADDR) | TAG_BIT(T_NET_GW) |      \
	 TAG_BIT(T_NET_DNS) | TAG_BIT(T_NET_MTU) | TAG_BIT(T_NET_MAC) | TAG_BIT(T_ROOT_RW))
#define EXEC_ONCE (TAG_BIT(T_CWD) | TAG_BIT(T_TIMEOUT_MS) | TAG_BIT(T_STDIN))

/* 1 when tag is one of `once` and was seen before. */
static int repeated(uint32_t *seen, uint32_t once, uint8_t tag)
{
	uint32_t bit = tag < 32 ? TAG_BIT(tag) : 0;

	if (!(once & bit))
		return 0;
	if (*seen & bit)
		return 1;
	*seen |= bit;
	return 0;
}

/* Decode HELLO into h; problems go to err (they make HELLO_ACK fail). */
void hello_parse(const struct frame *fr, struct hello_req *h, char *err, size_t errsz)
{
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len, seen = 0;
	uint8_t tag;
	int rc, bad;

	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		if (repeated(&seen, HELLO_ONCE, tag)) {
			errcat(err, errsz, "HELLO: tag %u given twice", tag);
			continue;
		}
		bad = 0;
		switch (tag) {
		case T_VERSION:
			bad = tlv_u32(val, len, &h->version);
			h->have_version = !bad;
			break;
		case T_COOKIE:
			bad = tlv_u64(val, len, &h->cookie);
			break;
		case T_HOSTNAME:
			bad = tlv_str(val, len, h->hostname, sizeof h->hostname);
			break;
		case T_TIME_NS:
			bad = tlv_u64(val, len, &h->time_ns);
			h->have_time = !bad;
			break;
		case T_SEED:
			h->seed = val;
			h->seedlen = len;
			break;
		case T_GROW: {
			uint32_t g;

			bad = tlv_u32(val, len, &g);
			h->grow = !bad && g;
			break;
		}
		case T_ROOT_RW: {
			uint32_t v;

			bad = tlv_u32(val, len, &v);
			h->root_rw = !bad && v;
			break;
		}
		case T_NET_ADDR:
			bad = tlv_str(val, len, h->net_addr, sizeof h->net_addr);
			break;
		case T_NET_GW:
			bad = tlv_str(val, len, h->net_gw, sizeof h->net_gw);
			break;
		case T_NET_DNS:
			bad = tlv_str(val, len, h->net_dns, sizeof h->net_dns);
			break;
		case T_NET_MTU:
			bad = tlv_u32(val, len, &h->net_mtu);
			break;
		case T_NET_MAC:
			bad = len != 6;
			if (!bad) {
				memcpy(h->net_mac, val, 6);
				h->have_mac = 1;
			}
			break;
		default:
			break; /* unknown tags are skipped */
		}
		if (bad)
			errcat(err, errsz, "HELLO: bad value for tag %u", tag);
	}
	if (rc < 0)
		errcat(err, errsz, "HELLO: truncated TLV");
}

/* ------------------------------------------------------------------ */
/* EXEC                                                                */

/* Only ever read (execve's envp is char *const[]); user ENV replaces
 * entries of the array, never the strings. */
static const char *const env_default[ENV_DEFAULTS] = {
	"PATH=" DEFAULT_PATH, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb",
};

/* Replace the entry with kv's key, or append it. */
static void env_set(struct exec_req *rq, size_t *n, char *kv)
{
	size_t klen = (size_t)(strchr(kv, '=') - kv) + 1, i;

	for (i = 0; i < *n; i++) {
		if (strncmp(rq->envp_buf[i], kv, klen) == 0) {
			rq->envp_buf[i] = kv;
			return;
		}
	}
	rq->envp_buf[(*n)++] = kv;
}

/* Decode EXEC into rq (its strings are copied into rq's arena): ARG+, ENV*
 * ("K=V", K non-empty), [CWD] (absolute), [TIMEOUT_MS], [STDIN]; unknown
 * tags are skipped.  0, or -1 with the refusal in why. */
int exec_parse(const struct frame *fr, struct exec_req *rq, char *why, size_t whysz)
{
	size_t used = 0, nargs = 0, nenv = 0, nenv_items = 0, i;
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len, u, seen = 0;
	uint8_t tag;
	char *s, *eq;
	int rc;

	rq->argv = rq->envp = NULL;
	rq->cwd = "/root";
	rq->timeout_ms = 0;
	rq->with_stdin = 0;
	for (i = 0; i < ENV_DEFAULTS; i++)
		rq->envp_buf[nenv++] = (char *)env_default[i];
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		if (repeated(&seen, EXEC_ONCE, tag)) {
			snprintf(why, whysz, "EXEC: %s given twice",
				 tag == T_CWD ? "CWD" : tag == T_STDIN ? "STDIN" : "TIMEOUT_MS");
			return -1;
		}
		switch (tag) {
		case T_ARG:
		case T_ENV:
		case T_CWD:
			s = rq->arena + used;
			if (tlv_str(val, len, s, sizeof rq->arena - used) < 0) {
				snprintf(why, whysz, "%s %zu contains a NUL byte",
					 tag == T_ARG ? "ARG" : tag == T_ENV ? "ENV" : "CWD",
					 tag == T_ARG ? nargs : tag == T_ENV ? nenv_items : 0);
				return -1;
			}
			used += (size_t)len + 1;
			if (tag == T_ARG) {
				rq->argv_buf[nargs++] = s;
			} else if (tag == T_ENV) {
				eq = strchr(s, '=');
				if (!eq || eq == s) {
					snprintf(why, whysz,
						 "ENV \"%.200s\" is not K=V with a non-empty K", s);
					return -1;
				}
				env_set(rq, &nenv, s);
				nenv_items++;
			} else {
				if (s[0] != '/') {
					snprintf(why, whysz, "CWD \"%.200s\" is not absolute", s);
					return -1;
				}
				rq->cwd = s;
			}
			break;
		case T_TIMEOUT_MS:
			if (tlv_u64(val, len, &rq->timeout_ms) < 0) {
				snprintf(why, whysz, "TIMEOUT_MS is not a u64");
				return -1;
			}
			break;
		case T_STDIN:
			if (tlv_u32(val, len, &u) < 0) {
				snprintf(why, whysz, "STDIN is not a u32");
				return -1;
			}
			rq->with_stdin = u != 0;
			break;
		default:
			break;
		}
	}
	if (rc < 0) {
		snprintf(why, whysz, "EXEC: truncated TLV");
		return -1;
	}
	if (!nargs) {
		snprintf(why, whysz, "EXEC without ARG");
		return -1;
	}
	rq->argv_buf[nargs] = NULL;
	rq->envp_buf[nenv] = NULL;
	rq->argv = rq->argv_buf;
	rq->envp = rq->envp_buf;
	return 0;
}

/* ------------------------------------------------------------------ */
/* FILE_PUT / FILE_GET                                                 */

/* T_PATH (absolute) into path, optional T_MODE into *mode; 0 or -1 with
 * the refusal in why. */
static int path_parse(const struct frame *fr, const char *what, char *path, uint32_t *mode,
		      char *why, size_t whysz)
{
	uint32_t once = TAG_BIT(T_PATH) | (mode ? TAG_BIT(T_MODE) : 0), len, seen = 0;
	struct tlv_r r;
	const uint8_t *val;
	uint8_t tag;
	int rc;

	path[0] = 0;
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		if (repeated(&seen, once, tag)) {
			snprintf(why, whysz, "%s: %s given twice", what, tag == T_PATH ? "PATH" : "MODE");
			return -1;
		}
		if (tag == T_PATH && tlv_str(val, len, path, PATH_MAX) < 0) {
			snprintf(why, whysz, "%s: PATH too long or contains a NUL byte", what);
			return -1;
		}
		if (tag == T_MODE && mode && tlv_u32(val, len, mode) < 0) {
			snprintf(why, whysz, "%s: MODE is not a u32", what);
			return -1;
		}
	}
	if (rc < 0) {
		snprintf(why, whysz, "%s: truncated TLV", what);
		return -1;
	}
	if (path[0] != '/') {
		snprintf(why, whysz, "%s: PATH \"%.200s\" is not absolute", what, path);
		return -1;
	}
	return 0;
}

/* FILE_PUT {PATH, [MODE]}: *mode keeps the caller's default when absent. */
int put_parse(const struct frame *fr, char path[PATH_MAX], uint32_t *mode, char *why,
	      size_t whysz)
{
	return path_parse(fr, "FILE_PUT", path, mode, why, whysz);
}

/* FILE_GET {PATH, [BYTES]}: *max is UINT64_MAX when BYTES is absent. */
int get_parse(const struct frame *fr, char path[PATH_MAX], uint64_t *max, char *why,
	      size_t whysz)
{
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len, seen = 0;
	uint8_t tag;

	*max = UINT64_MAX;
	if (path_parse(fr, "FILE_GET", path, NULL, why, whysz) < 0)
		return -1;
	/* BYTES: the most the host takes (path_parse checked the TLVs). */
	tlv_rinit(&r, fr->payload, fr->len);
	while (tlv_next(&r, &tag, &val, &len) == 1) {
		if (repeated(&seen, TAG_BIT(T_BYTES), tag)) {
			snprintf(why, whysz, "FILE_GET: BYTES given twice");
			return -1;
		}
		if (tag == T_BYTES && tlv_u64(val, len, max) < 0) {
			snprintf(why, whysz, "FILE_GET: BYTES is not a u64");
			return -1;
		}
	}
	return 0;
}

/* FILE_PUT / FILE_GET's TREE: *tree 0 when absent, else 0 or 1. */
int tree_parse(const struct frame *fr, uint32_t *tree, char *why, size_t whysz)
{
	struct tlv_r r;
	const uint8_t *val;
	uint32_t len, seen = 0;
	uint8_t tag;

	*tree = 0;
	tlv_rinit(&r, fr->payload, fr->len);
	while (tlv_next(&r, &tag, &val, &len) == 1) {
		if (repeated(&seen, TAG_BIT(T_TREE), tag)) {
			snprintf(why, whysz, "TREE given twice");
			return -1;
		}
		if (tag == T_TREE && (tlv_u32(val, len, tree) < 0 || *tree > 1)) {
			snprintf(why, whysz, "TREE is not a u32 0 or 1");
			return -1;
		}
	}
	return 0;
}

/* A HELLO from a new host: well-formed TLVs with VERSION and COOKIE. */
int hello_plausible(const struct frame *fr)
{
	int have_version = 0, have_cookie = 0, rc;
	const uint8_t *val;
	struct tlv_r r;
	uint32_t len;
	uint8_t tag;

	if (fr->type != F_HELLO || fr->stream != STREAM_CTL)
		return 0;
	tlv_rinit(&r, fr->payload, fr->len);
	while ((rc = tlv_next(&r, &tag, &val, &len)) == 1) {
		have_version |= tag == T_VERSION && len == 4;
		have_cookie |= tag == T_COOKIE && len == 8;
	}
	return rc == 0 && have_version && have_cookie;
}
