/* tap.h - the smallest test harness: TAP-ish "ok N - what" lines and a final
 * "N passed, N failed" line (t/run-unit adds them up).  Header-only, so every
 * test in t/unit/ is one self-contained program. */
#ifndef ISOPOD_TAP_H
#define ISOPOD_TAP_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap_n, tap_fail;

/* One line for a verdict c_ already taken (so a message's arguments are
 * read after the condition ran, as they always were); on a failure, where
 * and what was checked, and how_ (ok_bounded's "hung ..."), else "". */
#define tap_line_(c_, what_, how_, ...)                                            \
	do {                                                                       \
		tap_n++;                                                           \
		if (!(c_))                                                         \
			tap_fail++;                                                \
		printf("%sok %d - ", (c_) ? "" : "not ", tap_n);                   \
		printf(__VA_ARGS__);                                               \
		if (!(c_))                                                         \
			printf("  # %s:%d: %s%s", __FILE__, __LINE__, what_, how_); \
		putchar('\n');                                                     \
	} while (0)

#define ok(cond, ...)                                                              \
	do {                                                                       \
		int ok_c_ = !!(cond);                                              \
		tap_line_(ok_c_, #cond, "", __VA_ARGS__);                          \
	} while (0)

/* ok() for a check that must not block (an open of a FIFO with no writer,
 * a read of what nobody writes): cond runs in a child under alarm(secs),
 * so a hang fails this one test, named ("hung: no answer within 10 s"),
 * and the rest of the program runs, rather than stalling the whole run.
 * Only the child sees what cond does to memory: a message must not print
 * what cond computes (its effects on files are seen, the child has gone by
 * then; its "# " notes on stdout are kept).  cond must not call ok(): the
 * child's count dies with it. */
#define ok_bounded(secs, cond, ...)                                                \
	do {                                                                       \
		char ok_how_[96];                                                  \
		pid_t ok_pid_;                                                     \
		int ok_c_;                                                         \
		fflush(stdout); /* nothing buffered to print twice */              \
		if ((ok_pid_ = fork()) == 0) {                                     \
			int ok_r_;                                                 \
			alarm(secs);                                               \
			ok_r_ = (cond) ? 0 : 2;                                    \
			fflush(stdout); /* cond's own "# ..." notes */             \
			_exit(ok_r_);                                              \
		}                                                                  \
		ok_c_ = tap_reaped_(ok_pid_, secs, ok_how_, sizeof ok_how_);       \
		tap_line_(ok_c_, #cond, ok_how_, __VA_ARGS__);                     \
	} while (0)

/* ok_bounded's child pid (-1: fork failed): 1 when it exited 0 (cond
 * held), else 0 with how: "" when it exited 2 (cond was false), else what
 * happened (" -- hung: ...", a signal, a sanitizer's exit 1). */
static inline int tap_reaped_(pid_t pid, unsigned secs, char *how, size_t howsz)
{
	int st = 0;

	*how = '\0';
	if (pid < 0) {
		snprintf(how, howsz, " -- unable to fork: %s", strerror(errno));
		return 0;
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			snprintf(how, howsz, " -- unable to wait for the child: %s", strerror(errno));
			return 0;
		}
	}
	if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
		snprintf(how, howsz, " -- hung: no answer within %u s (killed by the alarm)", secs);
	else if (WIFSIGNALED(st))
		snprintf(how, howsz, " -- the child died of signal %d", WTERMSIG(st));
	else if (WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 2)
		snprintf(how, howsz, " -- the child exited %d (a sanitizer?)", WEXITSTATUS(st));
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static inline int tap_done(void)
{
	printf("%d passed, %d failed\n", tap_n - tap_fail, tap_fail);
	return tap_fail ? 1 : 0;
}

#endif
