/* egress_test.c - lib/egress.c's egress_log_reason: the reason a broker
 * failed to start is its own last line in the log, never the jail line the
 * parent writes there after spawning it (which may come after the broker's
 * last words: CI saw the reason replaced by a jail description). */
#include "../../lib/egress.c" /* self-contained: t/run-unit links frame+util only */
#include "../../lib/config.c"
#include "../../lib/image.c"
#include "../../lib/cgroup.c"
#include "../../lib/jail.c"
#include "../../lib/jaildeps.c"
#include "../../lib/jailchild.c"
#include "../../lib/proc.c"
#include "../../lib/ranges.c"
#include "../../lib/taphold.c"

#include "tap.h"

static char dir[] = "/tmp/isopod-egress-test.XXXXXX";

/* the reason egress_log_reason appends to "start" for a log holding s */
static const char *reason(const char *s, size_t n, char *msg, size_t msz)
{
	char p[128];
	int fd;

	snprintf(p, sizeof p, "%s/broker.log", dir);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, s, n) != (ssize_t)n) {
		if (fd >= 0)
			close(fd);
		return "(unable to write the log)";
	}
	close(fd);
	snprintf(msg, msz, "start");
	egress_log_reason(p, msg, msz);
	return msg;
}

#define R(s) reason((s), strlen(s), msg, sizeof msg)

static void test_reason(void)
{
	char msg[512], big[40000];
	size_t k = 0;

	ok(!strcmp(R("isopod-broker: no policy; run isopod-netsetup\n"),
		   "start: isopod-broker: no policy; run isopod-netsetup"),
	   "reason: the broker's one line");
	ok(!strcmp(R("isopod-broker: jail: {\"uid\":1}\nisopod-broker: uid 5 not in chain\n"),
		   "start: isopod-broker: uid 5 not in chain"),
	   "reason: the broker's line after the jail line");
	ok(!strcmp(R("isopod-broker: uid 5 not in chain\nisopod-broker: jail: {\"uid\":1}\n\n"),
		   "start: isopod-broker: uid 5 not in chain"),
	   "reason: the broker's line before the jail line (the parent wrote it late)");
	ok(!strcmp(R("isopod-broker: jail: {\"uid\":1}\n"), "start"), "reason: none but the jail line: none");
	ok(!strcmp(R(""), "start"), "reason: an empty log: none");
	ok(!strcmp(R("a\r\n\r\nb"), "start: b"), "reason: the last line without its newline");
	/* a long log: the reason, then a jail line as long as a deep store's */
	k += (size_t)snprintf(big + k, sizeof big - k, "%s\n", "older line");
	memset(big + k, 'x', 30000);
	k += 30000;
	big[k++] = '\n';
	k += (size_t)snprintf(big + k, sizeof big - k, "isopod-broker: the reason\nisopod-broker: jail: {");
	memset(big + k, 'p', 3000);
	k += 3000;
	k += (size_t)snprintf(big + k, sizeof big - k, "}\n");
	ok(!strcmp(reason(big, k, msg, sizeof msg), "start: isopod-broker: the reason"),
	   "reason: past a 3000-byte jail line, in a 33 KB log");
	/* no whole line in the tail read: no reason rather than half of one */
	memset(big, 'y', 20000);
	ok(!strcmp(reason(big, 20000, msg, sizeof msg), "start"), "reason: a cut line is not a reason");
	/* a reason longer than msg: cut, terminated */
	memset(big, 'z', 1000);
	big[1000] = '\n';
	reason(big, 1001, msg, sizeof msg);
	ok(strlen(msg) == sizeof msg - 1 && !strncmp(msg, "start: zzz", 10), "reason: cut at msg's size");
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	test_reason();
	{
		char p[128];

		snprintf(p, sizeof p, "%s/broker.log", dir);
		unlink(p);
		rmdir(dir);
	}
	return tap_done();
}
