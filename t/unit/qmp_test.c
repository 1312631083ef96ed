/* qmp_test.c - the one QMP client (lib/qmp.c) against a stand-in QEMU
 * monitor: greeting, capabilities, events between replies, errors, quit,
 * a first line that is no greeting. */
#include "../../lib/qmp.c" /* self-contained: t/run-unit links frame+util only */

#include <signal.h>
#include <sys/wait.h>

#include "tap.h"

/* A monitor that answers every command by its id: "return" for
 * qmp_capabilities and "cont" (after an event), an error for "stop",
 * and for "quit" it closes the connection without answering.  Its last
 * connection gets the greeting only once two requests came: a client that
 * waits for the greeting before it sends the command never gets it.  hello
 * is its first line: the greeting, or (the greeting check's test) a line
 * that is not one, after which it answers as always, so that a client
 * that skipped the check would succeed. */
static void monitor(int lfd, int conns, const char *hello)
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
		dprintf(fd, "%s\n", hello);
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

/* The stand-in monitor on sa for conns connections, its first line hello:
 * its pid, -1 when the socket could not be made. */
static pid_t serve(const struct sockaddr_un *sa, int conns, const char *hello)
{
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	pid_t pid;

	unlink(sa->sun_path);
	if (lfd < 0 || bind(lfd, (const struct sockaddr *)sa, sizeof *sa) < 0 || listen(lfd, 4) < 0) {
		if (lfd >= 0)
			close(lfd);
		return -1;
	}
	fflush(stdout);
	if ((pid = fork()) == 0)
		monitor(lfd, conns, hello);
	close(lfd);
	return pid;
}

int main(void)
{
	static const char *const not_greeting[] = {
		"{\"return\": {}, \"id\": 999999}",
		"{\"event\": \"RESUME\", \"timestamp\": {}}",
	};
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char err[512];
	int st;
	size_t i;
	int64_t t0;
	pid_t pid;

	snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/qmp_test.%ld.sock", (long)getpid());
	if ((pid = serve(&sa, 3, "{\"QMP\": {\"version\": {}, \"capabilities\": []}}")) < 0) {
		ok(0, "a listening socket");
		return tap_done();
	}

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
	for (i = 0; i < sizeof not_greeting / sizeof not_greeting[0]; i++) {
		if ((pid = serve(&sa, 1, not_greeting[i])) < 0) {
			ok(0, "a listening socket");
			break;
		}
		ok(qmp_simple(sa.sun_path, "cont", mono_ms() + 3000, err, sizeof err) < 0 &&
		   strstr(err, "no greeting"), "a first line that is no greeting (%s) fails: %s",
		   not_greeting[i], err);
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		unlink(sa.sun_path);
	}
	return tap_done();
}
