/* config.h - the configuration files, read by the tools that need a key.
 *
 * The host's file ($ISOPOD_SYSCONFIG, default /etc/isopod/config), then the
 * user's ($ISOPOD_CONFIG, else $XDG_CONFIG_HOME/isopod/config, else
 * ~/.config/isopod/config): lines `key = value`, `#` comments, the last
 * line of a key winning.  The front end (sh/isopod) checks every line's
 * shape and key; a reader here looks only at the keys it asks for. */
#ifndef ISOPOD_CONFIG_H
#define ISOPOD_CONFIG_H

#include <stddef.h>

/* The value of `key`: 1 and val filled, where = "FILE:LINE" (for a
 * diagnostic about the value); 0 when no file sets it; -1 when a file that
 * exists cannot be read (errno, where = the file). */
int config_value(const char *key, char *val, size_t vsz, char *where, size_t wsz);

#endif
