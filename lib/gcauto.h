/* gcauto.h - the retention settings' words and the automatic gc's schedule
 * (isopod-gc(1) CONFIGURATION): isopod-gc reads its policy with them, and
 * isopod-claim --gc-auto asks whether an automatic gc is due before it
 * starts one, so that a run when none is due costs a stat, not a process.
 * No exit: errors come back with a reason. */
#ifndef ISOPOD_GCAUTO_H
#define ISOPOD_GCAUTO_H

#include <stddef.h>

/* The kinds of setting, and what each accepts.  Across every gc key `off`
 * turns the setting off (it keeps, limits or starts nothing) and 0 is the
 * number zero: gc_keep_last and gc_grace off protect nothing, as 0 does;
 * warm_budget off sets no budget, 0 evicts every snapshot not in use;
 * gc_interval off starts no automatic gc, 0 one after every run. */
enum { SET_COUNT, SET_DUR, SET_SIZE, SET_INTERVAL };
#define SET_OFF (-2) /* warm_budget and gc_interval: off */
/* At most one automatic gc per store this often, unless configured. */
#define GC_AUTO_INTERVAL_DEFAULT_S 300

/* 4096, 512K, 100M, 4G, 1T (binary units) -> bytes; "off" -> -2 (no
 * budget); -1 if malformed. */
long long parse_size(const char *s);
/* 30s, 10m, 2h, 7d -> seconds; -1 if malformed. */
long long parse_dur(const char *s);
/* What a kind accepts, for a diagnostic ("a count (or off)"). */
const char *gc_set_want(int kind);
/* One value of a kind: 0 and *out, or -1. */
int gc_set_parse(int kind, const char *v, long long *out);
/* A setting: opt when given (not -1), else the configuration's key, else
 * dflt.  0, or the exit status (EX_SYS: a file unreadable; EX_USAGE: a bad
 * value) with err naming file:line. */
int gc_policy(long long opt, const char *key, int kind, long long dflt, long long *out,
	      char *err, size_t esz);
/* The automatic gc's interval in seconds (or SET_OFF): ISOPOD_GC_INTERVAL,
 * else gc_interval, else the default.  0, or an exit status as gc_policy. */
int gc_auto_interval(long long *every, char *err, size_t esz);
/* 1 when an automatic gc is due: every is not SET_OFF and the store's
 * stamp locks/gc-auto is missing, every seconds old or more, or in the
 * future; else 0.  One stat. */
int gc_auto_due(long long every);

#endif
