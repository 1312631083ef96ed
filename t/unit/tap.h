/* tap.h - the smallest test harness: TAP-ish "ok N - what" lines and a final
 * "N passed, N failed" line (t/run-unit adds them up).  Header-only, so every
 * test in t/unit/ is one self-contained program. */
#ifndef ISOPOD_TAP_H
#define ISOPOD_TAP_H

#include <stdio.h>

static int tap_n, tap_fail;

#define ok(cond, ...)                                                              \
	do {                                                                       \
		int ok_c_ = !!(cond);                                              \
		tap_n++;                                                           \
		if (!ok_c_)                                                        \
			tap_fail++;                                                \
		printf("%sok %d - ", ok_c_ ? "" : "not ", tap_n);                  \
		printf(__VA_ARGS__);                                               \
		if (!ok_c_)                                                        \
			printf("  # %s:%d: %s", __FILE__, __LINE__, #cond);       \
		putchar('\n');                                                     \
	} while (0)

static inline int tap_done(void)
{
	printf("%d passed, %d failed\n", tap_n - tap_fail, tap_fail);
	return tap_fail ? 1 : 0;
}

#endif
