/* psl.c - the Public Suffix List (see psl.h): a trie of the rules' labels
 * read from the right, its edges in one hash table ((parent, label) ->
 * node).  A lookup walks a name's labels from the right along both the
 * label's edge and the "*" edge; a trie node is reached by one path only,
 * so a lookup visits each node at most once, whatever the list holds (a
 * wildcard anywhere in a rule, as the spec allows, costs no blow-up). */
#include "psl.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* a name of 253 bytes has at most 127 labels */
#define PSL_LABELS 128

enum { RULE_NONE, RULE_NORMAL, RULE_EXCEPTION };

struct pnode {
	uint32_t parent, off; /* its label: pool[off..off+len), lower case */
	uint8_t len, rule;
	uint8_t below; /* a rule lies strictly below this node */
};

struct psl {
	char *pool;
	size_t pool_n, pool_cap;
	struct pnode *nodes; /* nodes[0]: the root, no label */
	size_t n, cap;
	uint32_t *slot; /* a child's node index; 0: empty (the root is no child) */
	size_t nslot;   /* a power of two, more than twice n */
	size_t rules, bad, end_private;
};

struct span {
	const char *s;
	size_t n;
};

static int lc(int c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* FNV-1a of the parent's index and the lower-cased label */
static size_t hash(uint32_t parent, const char *lab, size_t len)
{
	uint64_t h = 14695981039346656037ull;

	for (int i = 0; i < 4; i++) {
		h ^= (parent >> (8 * i)) & 0xff;
		h *= 1099511628211ull;
	}
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)lc((unsigned char)lab[i]);
		h *= 1099511628211ull;
	}
	return (size_t)h;
}

static uint32_t child(const struct psl *p, uint32_t parent, const char *lab, size_t len)
{
	size_t m = p->nslot - 1, i = hash(parent, lab, len) & m;

	for (; p->slot[i]; i = (i + 1) & m) {
		const struct pnode *x = &p->nodes[p->slot[i]];
		size_t k = 0;

		if (x->parent != parent || x->len != len)
			continue;
		while (k < len && p->pool[x->off + k] == lc((unsigned char)lab[k]))
			k++;
		if (k == len)
			return p->slot[i];
	}
	return 0;
}

static void place(struct psl *p, uint32_t id)
{
	const struct pnode *x = &p->nodes[id];
	size_t m = p->nslot - 1, i = hash(x->parent, p->pool + x->off, x->len) & m;

	while (p->slot[i])
		i = (i + 1) & m;
	p->slot[i] = id;
}

/* Room for one node more: nodes, pool (len bytes), a table under half full. */
static int room(struct psl *p, size_t len)
{
	if (p->n == p->cap) {
		size_t nc = p->cap * 2;
		struct pnode *nv = realloc(p->nodes, nc * sizeof *nv);

		if (!nv)
			return -1;
		p->nodes = nv;
		p->cap = nc;
	}
	if (p->pool_cap - p->pool_n < len) {
		size_t nc = p->pool_cap * 2 + len;
		char *nv = realloc(p->pool, nc);

		if (!nv)
			return -1;
		p->pool = nv;
		p->pool_cap = nc;
	}
	if (2 * (p->n + 1) >= p->nslot) {
		uint32_t *ns = calloc(p->nslot * 2, sizeof *ns);

		if (!ns)
			return -1;
		free(p->slot);
		p->slot = ns;
		p->nslot *= 2;
		for (size_t i = 1; i < p->n; i++)
			place(p, (uint32_t)i);
	}
	return 0;
}

/* The child of parent labelled lab, made when there is none: its index, 0
 * when out of memory. */
static uint32_t edge(struct psl *p, uint32_t parent, const char *lab, size_t len)
{
	uint32_t c = child(p, parent, lab, len);

	if (c || room(p, len) < 0)
		return c;
	for (size_t i = 0; i < len; i++)
		p->pool[p->pool_n + i] = (char)lc((unsigned char)lab[i]);
	c = (uint32_t)p->n++;
	p->nodes[c] = (struct pnode){ .parent = parent, .off = (uint32_t)p->pool_n,
				      .len = (uint8_t)len };
	p->pool_n += len;
	place(p, c);
	return c;
}

/* A label's code points from UTF-8 (strict: no overlong form, surrogate or
 * value past U+10FFFF): their number, -1 when not UTF-8 or more than max. */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp, int max)
{
	size_t i = 0;
	int k = 0;

	while (i < n) {
		uint32_t c = s[i], min = 0;
		size_t extra = 0;

		if (c >= 0x80) {
			if ((c & 0xe0) == 0xc0)
				c &= 0x1f, extra = 1, min = 0x80;
			else if ((c & 0xf0) == 0xe0)
				c &= 0x0f, extra = 2, min = 0x800;
			else if ((c & 0xf8) == 0xf0)
				c &= 0x07, extra = 3, min = 0x10000;
			else
				return -1;
		}
		if (n - i - 1 < extra || k == max)
			return -1;
		for (size_t j = 1; j <= extra; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return -1;
			c = c << 6 | (s[i + j] & 0x3f);
		}
		if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return -1;
		cp[k++] = (uint32_t)lc((int)c);
		i += extra + 1;
	}
	return k;
}

/* RFC 3492's bias adaptation */
static uint32_t adapt(uint32_t delta, uint32_t points, int first)
{
	uint32_t k = 0;

	delta = first ? delta / 700 : delta / 2;
	delta += delta / points;
	while (delta > (36 - 1) * 26 / 2) {
		delta /= 36 - 1;
		k += 36;
	}
	return k + 36 * delta / (delta + 38);
}

static int put(char *out, size_t *o, uint32_t d)
{
	if (*o >= 63)
		return -1;
	out[(*o)++] = (char)(d < 26 ? 'a' + d : '0' + d - 26);
	return 0;
}

/* The A-label ("xn--" + RFC 3492 punycode) of a UTF-8 label into out:
 * 0, or -1 when it is not UTF-8 or its A-label is longer than 63 bytes. */
static int alabel(char out[64], const char *s, size_t len)
{
	uint32_t cp[64], n = 128, delta = 0, bias = 72, h, b;
	int ncp = utf8_decode((const unsigned char *)s, len, cp, 60);
	size_t o = 4;

	if (ncp < 0)
		return -1;
	memcpy(out, "xn--", 4);
	for (int i = 0; i < ncp; i++) {
		if (cp[i] >= 0x80)
			continue;
		if (o >= 63)
			return -1;
		out[o++] = (char)cp[i];
	}
	h = b = (uint32_t)(o - 4);
	if (b && o < 63)
		out[o++] = '-';
	while (h < (uint32_t)ncp) {
		uint32_t m = UINT32_MAX;

		for (int i = 0; i < ncp; i++)
			if (cp[i] >= n && cp[i] < m)
				m = cp[i];
		if (m - n > (UINT32_MAX - delta) / (h + 1))
			return -1;
		delta += (m - n) * (h + 1);
		n = m;
		for (int i = 0; i < ncp; i++) {
			uint32_t q, t;

			if (cp[i] < n && ++delta == 0)
				return -1;
			if (cp[i] != n)
				continue;
			q = delta;
			for (uint32_t k = 36;; k += 36) {
				t = k <= bias ? 1 : k >= bias + 26 ? 26 : k - bias;
				if (q < t)
					break;
				if (put(out, &o, t + (q - t) % (36 - t)) < 0)
					return -1;
				q = (q - t) / (36 - t);
			}
			if (put(out, &o, q) < 0)
				return -1;
			bias = adapt(delta, h + 1, h == b);
			delta = 0;
			h++;
		}
		delta++;
		n++;
	}
	out[o] = '\0';
	return 0;
}

/* One rule line s[0..len) (its first whitespace already cut): into the
 * trie, or counted as bad.  -1 only when out of memory. */
static int add_rule(struct psl *p, const char *s, size_t len)
{
	char lab[PSL_LABELS][64]; /* A-labels of the UTF-8 ones */
	struct span sp[PSL_LABELS];
	uint8_t kind = RULE_NORMAL;
	uint32_t node = 0;
	size_t n = 0, i, k;

	if (len && s[0] == '!')
		kind = RULE_EXCEPTION, s++, len--;
	for (i = 0; i <= len; i = k + 1) {
		for (k = i; k < len && s[k] != '.'; k++)
			;
		if (k == i || k - i > 63 || n == PSL_LABELS)
			goto bad;
		sp[n++] = (struct span){ .s = s + i, .n = k - i };
	}
	for (i = 0; i < n; i++) {
		for (k = 0; k < sp[i].n && !((unsigned char)sp[i].s[k] & 0x80); k++)
			;
		if (k == sp[i].n)
			continue;
		if (alabel(lab[i], sp[i].s, sp[i].n) < 0)
			goto bad;
		sp[i] = (struct span){ .s = lab[i], .n = strlen(lab[i]) };
	}
	while (n--)
		if (!(node = edge(p, node, sp[n].s, sp[n].n)))
			return -1;
	/* listed both ways: the exception prevails, as it does in a match */
	if (p->nodes[node].rule < kind)
		p->nodes[node].rule = kind;
	p->rules++;
	return 0;
bad:
	p->bad++;
	return 0;
}

struct psl *psl_parse(const char *buf, size_t n)
{
	struct psl *p = calloc(1, sizeof *p);
	size_t i = 0;

	if (!p || !(p->nodes = calloc(64, sizeof *p->nodes)) || !(p->slot = calloc(128, sizeof *p->slot)))
		goto nomem;
	p->cap = 64;
	p->nslot = 128;
	p->n = 1;
	while (i < n) {
		const char *nl = memchr(buf + i, '\n', n - i), *s = buf + i;
		size_t len = nl ? (size_t)(nl - s) : n - i, k = 0;

		i += len + 1;
		if (len >= 2 && s[0] == '/' && s[1] == '/') {
			/* a comment; the end of the PRIVATE section says the list
			 * was read whole (psl_load) */
			if (memmem(s, len, "===END PRIVATE DOMAINS===", 25))
				p->end_private++;
			continue;
		}
		/* a rule is read up to its first whitespace */
		while (k < len && s[k] != ' ' && s[k] != '\t' && s[k] != '\r' && s[k] != '\v' &&
		       s[k] != '\f')
			k++;
		if (k && add_rule(p, s, k) < 0)
			goto nomem;
	}
	/* a rule below a node makes it and every node above it "below" */
	for (size_t j = 1; j < p->n; j++) {
		uint32_t up = p->nodes[j].parent;

		if (p->nodes[j].rule == RULE_NONE)
			continue;
		while (!p->nodes[up].below) {
			p->nodes[up].below = 1;
			if (!up)
				break;
			up = p->nodes[up].parent;
		}
	}
	return p;
nomem:
	psl_free(p);
	errno = ENOMEM;
	return NULL;
}

void psl_free(struct psl *p)
{
	if (!p)
		return;
	free(p->pool);
	free(p->nodes);
	free(p->slot);
	free(p);
}

size_t psl_rules(const struct psl *p)
{
	return p->rules;
}

size_t psl_bad_lines(const struct psl *p)
{
	return p->bad;
}

struct psl *psl_load(const char *path, const char **why)
{
	/* O_NONBLOCK: a FIFO in its place is refused by fstat, not waited on */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct psl *p = NULL;
	struct stat st;
	char *buf = NULL;
	size_t n = 0;

	*why = "unable to read it";
	if (fd < 0 || fstat(fd, &st) < 0)
		goto out;
	if (!S_ISREG(st.st_mode) || st.st_size > PSL_READ_MAX) {
		*why = S_ISREG(st.st_mode) ? "larger than 16 MiB" : "not a regular file";
		errno = 0;
		goto out;
	}
	if (!(buf = fd_text(fd, (size_t)st.st_size, &n)))
		goto out;
	if (n != (size_t)st.st_size) {
		*why = "read short (a list cut short would miss suffixes)";
		errno = errno ? errno : EIO;
		goto out;
	}
	if (!(p = psl_parse(buf, n))) {
		*why = "out of memory";
		goto out;
	}
	/* A list cut short, or one of the ICANN section alone, would fold
	 * names under github.io: the whole list or none. */
	if (!p->rules || !p->end_private) {
		*why = p->rules ? "no \"===END PRIVATE DOMAINS===\" line: not the whole list"
				: "no rule in it";
		errno = 0;
		psl_free(p);
		p = NULL;
	}
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return p;
}

/* The most labels of a matching normal rule and of a matching exception
 * rule (0: none), and whether a rule lies strictly below the whole name. */
struct hit {
	int normal, exc, below;
};

static void walk(const struct psl *p, uint32_t node, const struct span *lab, int n, int d,
		 struct hit *h)
{
	const struct pnode *x = &p->nodes[node];
	const struct span *l;
	uint32_t c;

	if (x->rule == RULE_NORMAL && d > h->normal)
		h->normal = d;
	if (x->rule == RULE_EXCEPTION && d > h->exc)
		h->exc = d;
	if (d == n) {
		h->below |= x->below;
		return;
	}
	l = &lab[n - 1 - d];
	/* a label "*" of the name is no wildcard: its own edge is the "*" one */
	if (!(l->n == 1 && l->s[0] == '*') && (c = child(p, node, l->s, l->n)))
		walk(p, c, lab, n, d + 1, h);
	if ((c = child(p, node, "*", 1)))
		walk(p, c, lab, n, d + 1, h);
}

/* The name's labels, left to right: their number, -1 when one is empty or
 * there are more than PSL_LABELS. */
static int split(const char *name, struct span *lab)
{
	int n = 0;

	for (const char *s = name;;) {
		const char *dot = strchr(s, '.');
		size_t len = dot ? (size_t)(dot - s) : strlen(s);

		if (!len || n == PSL_LABELS)
			return -1;
		lab[n++] = (struct span){ .s = s, .n = len };
		if (!dot)
			return n;
		s = dot + 1;
	}
}

const char *psl_registrable(const struct psl *p, const char *name)
{
	struct span lab[PSL_LABELS];
	struct hit h = { .normal = 0 };
	int n = split(name, lab), ps;

	if (n < 0)
		return NULL;
	walk(p, 0, lab, n, 0, &h);
	/* publicsuffix.org: an exception prevails, less its leftmost label;
	 * else the matching rule of most labels; none: the implicit "*" */
	ps = h.exc ? h.exc - 1 : h.normal ? h.normal : 1;
	return n > ps ? lab[n - ps - 1].s : NULL;
}

int psl_rule_below(const struct psl *p, const char *name)
{
	struct span lab[PSL_LABELS];
	struct hit h = { .normal = 0 };
	int n = split(name, lab);

	if (n < 0)
		return -1;
	walk(p, 0, lab, n, 0, &h);
	return h.below;
}

struct psl *psl_open(const char *path, char *why, size_t whysz)
{
	const char *w;
	struct psl *p;

	if (!path || !*path)
		path = PSL_DEFAULT_PATH;
	if ((p = psl_load(path, &w)))
		return p;
	snprintf(why, whysz, "the public suffix list %s: %s%s%s: no name folded into a *.domain pattern",
		 path, w, errno ? ": " : "", errno ? strerror(errno) : "");
	return NULL;
}
