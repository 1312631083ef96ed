/* accelhost.c - the KVM probe's verdict shared by the stores of one user on
 * one host (see accelhost.h). */
#include "accelhost.h"
#include "config.h"
#include "jail.h"
#include "proc.h"
#include "qemu.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HOST_SUFFIX " (host cache)"

/* The host's boot id, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": a new one
 * after every boot, so a verdict never outlives the host kernel it was
 * probed on ($ISOPOD_TEST_BOOT_ID stands in for it in tests).  0, or -1
 * when it cannot be read or is not of that shape. */
static int boot_id(char out[37])
{
	const char *t = getenv("ISOPOD_TEST_BOOT_ID");

	/* only beside a cache directory of the test's own: the default ones
	 * (tmpfs) are emptied at boot, and a fake id must never make a
	 * verdict there outlive one */
	if (t && *t && getenv("ISOPOD_ACCEL_HOST_CACHE_DIR"))
		return boot_id_of(t, out);
	return host_boot_id(out);
}

json_t *accel_host_key(const char *ksha, const char *dev)
{
	char bin[PATH_MAX], fp[65], bid[37], why[PATH_MAX + 64];
	struct stat qs, ds;
	json_t *q, *k;
	int jail;

	if (!hex64_ok(ksha) || boot_id(bid) < 0 || (jail = jail_wanted(why, sizeof why)) < 0 ||
	    proc_path_find(QEMU, bin, sizeof bin) < 0 || stat(bin, &qs) < 0 || stat(dev, &ds) < 0)
		return NULL;
	qemu_fingerprint(fp);
	if (!(q = file_identity(dev, &ds)) ||
	    json_object_set_new(q, "rdev", json_integer((json_int_t)ds.st_rdev)) < 0) {
		json_decref(q);
		return NULL;
	}
	k = json_pack("{s:i, s:s, s:o, s:s, s:o, s:s, s:b}", "version", ACCEL_HOST_VERSION, "kernel",
		      ksha, "qemu", file_identity(bin, &qs), "argv", fp, "kvm", q, "boot_id", bid,
		      "jail", jail);
	return k;
}

/* Wanted: $ISOPOD_ACCEL_HOST_CACHE, else the configuration's
 * accel_host_cache (the user's line wins over the host's: the cache is the
 * user's own), else yes.  A bad value or an unreadable file: no (why), as
 * doubt costs only a probe. */
static int wanted(char *why, size_t wsz)
{
	const char *e = getenv("ISOPOD_ACCEL_HOST_CACHE");
	char v[64], where[PATH_MAX + 32];
	int r;

	if (e && *e) {
		if ((r = config_bool(e)) < 0)
			snprintf(why, wsz, "ISOPOD_ACCEL_HOST_CACHE=%s: want yes or no", EXC(e));
		return r > 0;
	}
	if ((r = config_value("accel_host_cache", v, sizeof v, where, sizeof where)) < 0) {
		snprintf(why, wsz, "unable to read %s: %s", where, strerror(errno));
		return 0;
	}
	if (!r)
		return 1;
	if ((r = config_bool(v)) < 0)
		snprintf(why, wsz, "%s: accel_host_cache %s: want yes or no", where, EXC(v));
	return r > 0;
}

/* name below the checked directory at (made 0700 first when mk), opened
 * only as dir_own_openat allows: our euid's, writable by nobody else, not a
 * link.  Each step is resolved in a directory no other user can change,
 * so nobody can swap a step for a directory of theirs between the check
 * and the use.  at is closed.  Its fd, or -1 (why; "" when it is merely
 * missing and not to be made). */
static int step(int at, const char *name, int mk, char *why, size_t wsz)
{
	int fd;

	if (at < 0)
		return -1;
	if (mk && mkdirat(at, name, 0700) < 0 && errno != EEXIST) {
		reason_fail(why, wsz, "unable to create %s:", name);
		close(at);
		return -1;
	}
	if ((fd = dir_own_openat(at, name, why, wsz)) < 0 && errno == ENOENT)
		why[0] = 0;
	close(at);
	return fd;
}

/* The cache's directory, opened (see accelhost.h), made when mk: its fd,
 * or -1 with why ("" when there is none: off, no runtime directory, not
 * made yet).  The base is itself checked as ours (root: /run is root's
 * 0755; a user's $XDG_RUNTIME_DIR is theirs, 0700): as root a user's
 * $XDG_RUNTIME_DIR (sudo -E) is never used.  $ISOPOD_ACCEL_HOST_CACHE_DIR
 * (tests) is taken by name: its last directory must be ours, writable by
 * no one else, but the path to it is not walked (whoever sets our
 * environment has PATH and ISOPOD_HOME too). */
static int host_dir(int mk, char *where, size_t wsz, char *why, size_t whysz)
{
	const char *d = getenv("ISOPOD_ACCEL_HOST_CACHE_DIR"), *base;
	int fd;

	why[0] = 0;
	if (!wanted(why, whysz))
		return -1;
	if (d && *d) {
		snprintf(where, wsz, "%s", d);
		if (mk && mkdir(d, 0700) < 0 && errno != EEXIST)
			return reason_fail(why, whysz, "unable to create %s:", EXC(d));
		if ((fd = dir_own_open(d, why, whysz)) < 0 && errno == ENOENT)
			why[0] = 0;
		return fd;
	}
	base = geteuid() == 0 ? "/run" : getenv("XDG_RUNTIME_DIR");
	if (!base || base[0] != '/')
		return -1;
	snprintf(where, wsz, "%s/isopod/accel", base);
	if ((fd = dir_own_open(base, why, whysz)) < 0)
		return -1;
	fd = step(step(fd, "isopod", mk, why, whysz), "accel", mk, why, whysz);
	if (fd < 0 && why[0]) { /* name the whole path: step names one part */
		char w[512];

		snprintf(w, sizeof w, "%s", why);
		snprintf(why, whysz, "%s: %s", where, w);
	}
	return fd;
}

/* c as the verdict for key: 1 and the verdict, else 0.  Every member
 * checked: an object with the same key, accel "kvm" or "tcg", a reason
 * and a real time of probing. */
static int host_parse(const json_t *c, const json_t *key, const char **accel, char *reason,
		      size_t rsz, char *probed, size_t psz)
{
	const char *a = json_string_value(json_object_get(c, "accel"));
	const char *r = json_string_value(json_object_get(c, "reason"));
	const char *p = json_string_value(json_object_get(c, "probed"));
	int keep = (int)(rsz > sizeof HOST_SUFFIX ? rsz - sizeof HOST_SUFFIX : 0);

	if (!json_is_object(c) || !key || !json_equal(json_object_get(c, "key"), key) || !a ||
	    (strcmp(a, "kvm") && strcmp(a, "tcg")) || !r || !*r || !p || iso_parse(p) < 0 ||
	    keep <= 0)
		return 0;
	*accel = !strcmp(a, "kvm") ? "kvm" : "tcg";
	/* cut the probe's reason, never the suffix: it says where this came from */
	snprintf(reason, rsz, "%.*s" HOST_SUFFIX, keep, r);
	snprintf(probed, psz, "%s", p);
	return 1;
}

/* The file of key in the directory dfd, "<16 hex of the kernel>-<16 hex
 * of sha256(key)>.json" (the key's text canonical: compact, sorted), as
 * "/proc/self/fd/N/NAME" so that atomic_write works through the checked
 * fd, not a path resolved again.  One file per key: the verdicts of
 * another QEMU, another boot or the probe jailed or not live side by side
 * (a host that runs both never trades one for the other); they go with
 * the next boot, /run being a tmpfs.  0, or -1. */
static int host_file(char *p, size_t sz, int dfd, const json_t *key)
{
	const char *k = json_string_value(json_object_get(key, "kernel"));
	char *s = json_dumps(key, JSON_COMPACT | JSON_SORT_KEYS), h[65];

	if (!s || !k || !hex64_ok(k)) {
		free(s);
		return -1;
	}
	sha256_hex(s, strlen(s), h);
	free(s);
	return pathn(p, sz, "/proc/self/fd/%d/%.16s-%.16s.json", dfd, k, h);
}

int accel_host_read(const json_t *key, const char **accel, char *reason, size_t rsz, char *probed,
		    size_t psz)
{
	char where[PATH_MAX], why[PATH_MAX + 256], p[64 + 80];
	json_t *c;
	int dfd, hit;

	if (!key || (dfd = host_dir(0, where, sizeof where, why, sizeof why)) < 0)
		return 0;
	if (host_file(p, sizeof p, dfd, key) < 0) {
		close(dfd);
		return 0;
	}
	/* not a link, a regular file of ours that nobody else may write: one
	 * another user could have put here, or changed, is no verdict */
	c = json_load_ours(p); /* bounded: JSON_MAX_BYTES */
	close(dfd);
	if (!c)
		return 0;
	hit = host_parse(c, key, accel, reason, rsz, probed, psz);
	json_decref(c);
	return hit;
}

void accel_host_write(const json_t *key, const char *accel, const char *reason,
		      const char *probed)
{
	char where[PATH_MAX], why[PATH_MAX + 256], p[64 + 80], *s = NULL;
	json_t *c = NULL;
	int dfd;

	if (!key)
		return;
	if ((dfd = host_dir(1, where, sizeof where, why, sizeof why)) < 0) {
		if (why[0])
			warn("the host's accel cache is not used: %s", why);
		return;
	}
	c = json_pack("{s:O, s:s, s:s, s:s}", "key", key, "accel", accel, "reason", reason, "probed",
		      probed);
	if (!c || !(s = json_dumps(c, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) ||
	    host_file(p, sizeof p, dfd, key) < 0 || atomic_write(p, s, strlen(s), 0600) < 0)
		warn("unable to keep the kvm verdict in %s:", where);
	free(s);
	json_decref(c);
	close(dfd);
}
