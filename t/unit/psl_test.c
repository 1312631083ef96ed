/* psl_test.c - the Public Suffix List (lib/psl.c): publicsuffix.org's test
 * vectors (test_psl.txt, written out here from the spec; the A-label forms,
 * as the broker's ledger holds names), the punycode of UTF-8 rules, rules
 * below a name, and the loader's refusals. */
#include "../../lib/psl.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

/* The rules the vectors need, as the list spells them (UTF-8 labels
 * included), both sections' markers, and one rule with a wildcard that is
 * not leftmost (the spec allows it; the list has none today). */
static const char list_text[] =
	"// ===BEGIN ICANN DOMAINS===\n"
	"ac\ncom\nbiz\norg\nio\nuk\nco.uk\nus\nak.us\nk12.ak.us\n"
	"// mm : https://en.wikipedia.org/wiki/.mm\n*.mm\n"
	"jp\nac.jp\nkyoto.jp\nide.kyoto.jp\n*.kobe.jp\n!city.kobe.jp\n"
	"*.ck\n!www.ck\t// trailing text after whitespace is ignored\n"
	"cn\ncom.cn\n\xe5\x85\xac\xe5\x8f\xb8.cn\n\xe4\xb8\xad\xe5\x9b\xbd\n"
	"// ===END ICANN DOMAINS===\n// ===BEGIN PRIVATE DOMAINS===\n"
	"uk.com\r\ngithub.io\ns3.amazonaws.com\n*.compute.amazonaws.com\n"
	"foo.*.midwild\n"
	"bad..rule\n.leading\n\xff\xfe.bad\n"
	"// ===END PRIVATE DOMAINS===\n";

/* publicsuffix.org test_psl.txt: checkPublicSuffix(domain, registrable) */
static const char *const vectors[][2] = {
	{ "COM", NULL }, { "example.COM", "example.com" }, { "WwW.example.COM", "example.com" },
	{ ".com", NULL }, { ".example", NULL }, { ".example.com", NULL },
	{ ".example.example", NULL },
	{ "example", NULL }, { "example.example", "example.example" },
	{ "b.example.example", "example.example" }, { "a.b.example.example", "example.example" },
	{ "biz", NULL }, { "domain.biz", "domain.biz" }, { "b.domain.biz", "domain.biz" },
	{ "a.b.domain.biz", "domain.biz" },
	{ "com", NULL }, { "example.com", "example.com" }, { "b.example.com", "example.com" },
	{ "a.b.example.com", "example.com" }, { "uk.com", NULL },
	{ "example.uk.com", "example.uk.com" }, { "b.example.uk.com", "example.uk.com" },
	{ "a.b.example.uk.com", "example.uk.com" }, { "test.ac", "test.ac" },
	{ "mm", NULL }, { "c.mm", NULL }, { "b.c.mm", "b.c.mm" }, { "a.b.c.mm", "b.c.mm" },
	{ "jp", NULL }, { "test.jp", "test.jp" }, { "www.test.jp", "test.jp" }, { "ac.jp", NULL },
	{ "test.ac.jp", "test.ac.jp" }, { "www.test.ac.jp", "test.ac.jp" }, { "kyoto.jp", NULL },
	{ "test.kyoto.jp", "test.kyoto.jp" }, { "ide.kyoto.jp", NULL },
	{ "b.ide.kyoto.jp", "b.ide.kyoto.jp" }, { "a.b.ide.kyoto.jp", "b.ide.kyoto.jp" },
	{ "c.kobe.jp", NULL }, { "b.c.kobe.jp", "b.c.kobe.jp" }, { "a.b.c.kobe.jp", "b.c.kobe.jp" },
	{ "city.kobe.jp", "city.kobe.jp" }, { "www.city.kobe.jp", "city.kobe.jp" },
	{ "ck", NULL }, { "test.ck", NULL }, { "b.test.ck", "b.test.ck" },
	{ "a.b.test.ck", "b.test.ck" }, { "www.ck", "www.ck" }, { "www.www.ck", "www.ck" },
	{ "us", NULL }, { "test.us", "test.us" }, { "www.test.us", "test.us" }, { "ak.us", NULL },
	{ "test.ak.us", "test.ak.us" }, { "www.test.ak.us", "test.ak.us" }, { "k12.ak.us", NULL },
	{ "test.k12.ak.us", "test.k12.ak.us" }, { "www.test.k12.ak.us", "test.k12.ak.us" },
	/* IDN labels, punycoded (the form of the ledger's names) */
	{ "xn--85x722f.com.cn", "xn--85x722f.com.cn" },
	{ "xn--85x722f.xn--55qx5d.cn", "xn--85x722f.xn--55qx5d.cn" },
	{ "www.xn--85x722f.xn--55qx5d.cn", "xn--85x722f.xn--55qx5d.cn" },
	{ "shishi.xn--55qx5d.cn", "shishi.xn--55qx5d.cn" }, { "xn--55qx5d.cn", NULL },
	{ "xn--85x722f.xn--fiqs8s", "xn--85x722f.xn--fiqs8s" },
	{ "www.xn--85x722f.xn--fiqs8s", "xn--85x722f.xn--fiqs8s" },
	{ "shishi.xn--fiqs8s", "shishi.xn--fiqs8s" }, { "xn--fiqs8s", NULL },
	/* the PRIVATE section counts: anyone's hosts */
	{ "github.io", NULL }, { "alice.github.io", "alice.github.io" },
	{ "www.alice.github.io", "alice.github.io" }, { "co.uk", NULL },
	{ "bbc.co.uk", "bbc.co.uk" }, { "www.bbc.co.uk", "bbc.co.uk" },
};

static const char *const extra[][2] = {
	{ "foo.x.midwild", NULL }, { "z.foo.x.midwild", "z.foo.x.midwild" },
	{ "bar.x.midwild", "x.midwild" }, { "a.b.compute.amazonaws.com", "a.b.compute.amazonaws.com" },
	{ "x.amazonaws.com", "amazonaws.com" }, { "b.s3.amazonaws.com", "b.s3.amazonaws.com" },
	{ "*.x.midwild", "x.midwild" },
};

static int same(const char *got, const char *want)
{
	return got == want || (got && want && !strcasecmp(got, want));
}

/* every vector on list p: the number that fail, the first one in *first */
static int failures(const struct psl *p, const char *const (*v)[2], size_t n, const char **first)
{
	int bad = 0;

	*first = "";
	for (size_t i = 0; i < n; i++)
		if (!same(psl_registrable(p, v[i][0]), v[i][1]) && bad++ == 0)
			*first = v[i][0];
	return bad;
}

static void test_vectors(void)
{
	struct psl *p = psl_parse(list_text, sizeof list_text - 1), *real;
	const char *why, *first;
	int bad;

	ok(p && psl_rules(p) == 28 && psl_bad_lines(p) == 3,
	   "the excerpt: 28 rules, 3 lines no rule (an empty label, a leading dot, not UTF-8): "
	   "%zu, %zu", p ? psl_rules(p) : 0, p ? psl_bad_lines(p) : 0);
	bad = failures(p, vectors, sizeof vectors / sizeof vectors[0], &first);
	ok(bad == 0, "test_psl.txt's %zu vectors on the excerpt: %d fail (first: %s)",
	   sizeof vectors / sizeof vectors[0], bad, first);
	bad = failures(p, extra, sizeof extra / sizeof extra[0], &first);
	ok(bad == 0, "a wildcard not leftmost, private rules below a domain: %d fail (first: %s)",
	   bad, first);
	ok(psl_rule_below(p, "amazonaws.com") == 1 && psl_rule_below(p, "example.com") == 0 &&
		   psl_rule_below(p, "com") == 1 && psl_rule_below(p, "kobe.jp") == 1 &&
		   psl_rule_below(p, "city.kobe.jp") == 0 && psl_rule_below(p, "x.midwild") == 1 &&
		   psl_rule_below(p, "a..b") == -1,
	   "rules below: amazonaws.com (s3.), com, kobe.jp (*.), x.midwild (foo.*.); not "
	   "example.com, city.kobe.jp");
	psl_free(p);
	if (!(real = psl_load(PSL_DEFAULT_PATH, &why))) {
		printf("# %s: %s: skipped\n", PSL_DEFAULT_PATH, why);
		return;
	}
	bad = failures(real, vectors, sizeof vectors / sizeof vectors[0], &first);
	ok(bad == 0 && psl_rules(real) > 5000 && psl_bad_lines(real) == 0,
	   "the same vectors on Debian's list (%zu rules, every line read): %d fail (first: %s)", psl_rules(real),
	   bad, first);
	ok(!psl_registrable(real, "cloudfront.net") && psl_rule_below(real, "amazonaws.com") == 1,
	   "Debian's list: cloudfront.net is a suffix, amazonaws.com has suffixes below");
	psl_free(real);
}

static void test_alabel(void)
{
	static const char *const v[][2] = {
		{ "\xe5\x85\xac\xe5\x8f\xb8", "xn--55qx5d" }, { "\xe4\xb8\xad\xe5\x9b\xbd", "xn--fiqs8s" },
		{ "\xe9\xa3\x9f\xe7\x8b\xae", "xn--85x722f" }, { "b\xc3\xbc" "cher", "xn--bcher-kva" },
		{ "M\xc3\xbcnchen", "xn--mnchen-3ya" }, { "a\xc3\xa9roport", "xn--aroport-bya" },
	};
	char out[64];
	int bad = 0;

	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
		bad += alabel(out, v[i][0], strlen(v[i][0])) < 0 || strcmp(out, v[i][1]);
	ok(bad == 0, "RFC 3492 punycode of UTF-8 labels (RFC samples, the list's): %d wrong", bad);
	ok(alabel(out, "\xc0\xaf", 2) < 0 && alabel(out, "\xed\xa0\x80", 3) < 0 &&
		   alabel(out, "\xe4\xb8", 2) < 0,
	   "not UTF-8 (overlong, a surrogate, cut): refused");
}

static void test_load(void)
{
	char dir[] = "/tmp/isopod-psl-test.XXXXXX", f[64];
	const char *why = "";
	struct psl *p;
	FILE *o;

	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return;
	}
	snprintf(f, sizeof f, "%s/list", dir);
	ok(!psl_load(f, &why) && !strcmp(why, "unable to read it"), "no file: %s", why);
	ok(!psl_load(dir, &why) && !strcmp(why, "not a regular file"), "a directory: %s", why);
	if ((o = fopen(f, "w"))) {
		fputs("// ===BEGIN ICANN DOMAINS===\ncom\nio\n", o);
		fclose(o);
	}
	ok(!psl_load(f, &why) && strstr(why, "not the whole list"),
	   "a list without its PRIVATE section's end (cut, or ICANN alone): refused: %s", why);
	if ((o = fopen(f, "w"))) {
		fputs("// ===END PRIVATE DOMAINS===\n", o);
		fclose(o);
	}
	ok(!psl_load(f, &why) && !strcmp(why, "no rule in it"), "no rule: %s", why);
	if ((o = fopen(f, "w"))) {
		fputs(list_text, o);
		fclose(o);
	}
	p = psl_load(f, &why);
	ok(p && psl_rules(p) == 28, "a whole list is read");
	psl_free(p);
	unlink(f);
	rmdir(dir);
}

int main(void)
{
	test_vectors();
	test_alabel();
	test_load();
	return tap_done();
}
