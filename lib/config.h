/* config.h - the configuration files, read by the tools that need a key.
 *
 * The host's file ($ISOPOD_SYSCONFIG, default /etc/isopod/config), then the
 * user's ($ISOPOD_CONFIG, else $XDG_CONFIG_HOME/isopod/config, else
 * ~/.config/isopod/config): lines `key = value`, `#` comments, the last
 * line of a key winning.  The front end (sh/isopod load_config) checks
 * every line's shape and key; a reader here looks only at the keys it asks
 * for, and reads a line as the front end does: everything from the first
 * `#` on is a comment (wherever it is), the key is what comes before the
 * first `=`, the value what comes after it, both without the blanks
 * around them (isspace); a line with no `=` is skipped; a line is a line
 * however long it is (no buffer splits one in two). */
#ifndef ISOPOD_CONFIG_H
#define ISOPOD_CONFIG_H

#include <stddef.h>

/* One line of the key: its value and "FILE:LINE" (for a diagnostic about
 * the value).  0 to go on, anything else to stop there. */
typedef int config_fn(const char *val, const char *where, void *arg);

/* Each line of `key` in the file at path, in order, to fn (so a caller
 * keeping the last one has the last line winning; one that keeps all has
 * a multi-valued key).  The number of lines (0 too for a missing file);
 * -1 when fn stopped it (fn's diagnostic is the caller's); -2 when the
 * file exists but cannot be read (msg "unable to read FILE: strerror",
 * errno kept). */
int config_each(const char *path, const char *key, config_fn *fn, void *arg, char *msg,
		size_t msz);

/* The value of `key` in the host's file, then the user's: 1 and val
 * filled, where = "FILE:LINE" (for a diagnostic about the value); 0 when
 * no file sets it; -1 when a file that exists cannot be read (errno,
 * where = the file). */
int config_value(const char *key, char *val, size_t vsz, char *where, size_t wsz);
/* A switch's value (jail, accel_host_cache, and their ISOPOD_* variables;
 * sh/isopod checks the same words): "yes", "1", "on" 1; "no", "0",
 * "off" 0; anything else -1. */
int config_bool(const char *v);

/* Where the files are, decided here alone (lib/subjects.c hashes them,
 * `isopod-image where` prints them for sh/isopod and images/): the host's
 * file; the user's into out (0, or -1 with errno ENAMETOOLONG and out "").
 * An unset or empty variable counts as unset; with no HOME, the user's
 * file is under /nonexistent (none). */
const char *config_host_file(void);
int config_user_file(char *out, size_t sz);

/* The build cache (images/: kernels, bases, tools by input hash):
 * $ISOPOD_CACHE, else /var/cache/isopod as root, else
 * $XDG_CACHE_HOME/isopod, else $HOME/.cache/isopod (/nonexistent with no
 * HOME).  0, or -1 with errno ENAMETOOLONG and out "". */
int cache_home(char *out, size_t sz);

#endif
