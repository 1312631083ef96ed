/* qmp_test.c - the one QMP client (lib/qmp.c) against a stand-in QEMU
 * monitor: greeting, capabilities, events between replies, errors, quit. */
#include "../../lib/qmp.c" /* self-contained: t/run-unit links frame+util only */

#include <signal.h>
#include <sys/wait.h>

#include "tap.h"

/* A monitor that answers every command by its id: "return" for
 * qmp_capabilities and "cont" (after an event), an error for "stop",
 * and for "quit" it closes the connection without answering.  Its last
 * connection gets the greeting only once two requests came: a client that
 * waits for the greeting before it sends the command never gets it. */
static void monitor(int lfd, int conns)
{
	while (conns-- > 0) {
		char buf[4096];
		size_t len = 0;
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0)
			_exit(1);
		while (!conns) { /* the last: both requests first */
			char *a;
			ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);

			if (n <= 0)
				_exit(1);
			len += (size_t)n;
			buf[len] = 0;
			if ((a = strchr(buf, '\n')) && strchr(a + 1, '\n'))
				break;
		}
		dprintf(fd, "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n");
		for (;;) {
			char *nl;
			ssize_t n;
			json_t *j, *id;
			const char *cmd;

			/* every whole line already read first, as QEMU does: a
			 * client may send several requests in one write */
			buf[len] = 0;
			if (!(nl = strchr(buf, '\n'))) {
				if ((n = read(fd, buf + len, sizeof buf - 1 - len)) <= 0)
					break;
				len += (size_t)n;
				continue;
			}
			*nl = 0;
			j = json_loads(buf, 0, NULL);
			memmove(buf, nl + 1, len - (size_t)(nl + 1 - buf));
			len -= (size_t)(nl + 1 - buf);
			cmd = json_string_value(json_object_get(j, "execute"));
			id = json_object_get(j, "id");
			if (cmd && !strcmp(cmd, "quit")) {
				json_decref(j);
				break;
			}
			if (cmd && !strcmp(cmd, "stop"))
				dprintf(fd, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}, "
					    "\"id\": %lld}\n", (long long)json_integer_value(id));
			else {
				if (cmd && !strcmp(cmd, "cont"))
					dprintf(fd, "{\"event\": \"RESUME\", \"timestamp\": {}}\n");
				dprintf(fd, "{\"return\": {}, \"id\": %lld}\n",
					(long long)json_integer_value(id));
			}
			json_decref(j);
		}
		close(fd);
	}
	_exit(0);
}

int main(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char err[512];
	int lfd, st;
	int64_t t0;
	pid_t pid;

	snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/qmp_test.%ld.sock", (long)getpid());
	unlink(sa.sun_path);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 4) < 0) {
		ok(0, "a listening socket");
		return tap_done();
	}
	fflush(stdout);
	if ((pid = fork()) == 0)
		monitor(lfd, 3);
	close(lfd);

	ok(qmp_simple(sa.sun_path, "cont", mono_ms() + 3000, err, sizeof err) == 0,
	   "cont: an event before the reply is skipped (%s)", err);
	ok(qmp_simple(sa.sun_path, "stop", mono_ms() + 3000, err, sizeof err) < 0 &&
	   strstr(err, "qmp stop: no"), "an error reply fails, naming the command: %s", err);
	ok(qmp_simple(sa.sun_path, "quit", mono_ms() + 3000, err, sizeof err) == 0,
	   "quit: the monitor closing without a reply is success; capabilities and the command "
	   "go before the greeting is read (%s)", err);
	waitpid(pid, &st, 0);
	unlink(sa.sun_path);
	t0 = mono_ms();
	ok(qmp_simple(sa.sun_path, "quit", mono_ms() + 3000, err, sizeof err) < 0 &&
	   mono_ms() - t0 < 1000 && strstr(err, "connect"),
	   "no socket: fails at once, no waiting for one to appear: %s", err);
	return tap_done();
}
