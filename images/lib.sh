# shellcheck shell=sh
# images/lib.sh - helpers shared by the images/ scripts (sourced, not run).
# The sourcing script sets prog (its name) before sourcing this file.
# shellcheck disable=SC2154 # prog is set by the sourcing script

warn() {
	printf '%s: %s\n' "$prog" "$*" >&2
}

# Exit codes as in doc/INTERFACES.md: 100 usage or bad input, 101 not found,
# 111 system failure.
die_with() {
	_code=$1
	shift
	printf '%s: fatal: %s\n' "$prog" "$*" >&2
	exit "$_code"
}

die() {
	die_with 111 "$@"
}

usage() {
	printf 'usage: %s\n' "$1" >&2
	exit 100
}

# where KEY: the store or the build cache (doc/INTERFACES.md), as the tools
# decide it (isopod-image where): $ISOPOD_LIBEXEC's, else the tree's bin/
# (images/ in the source tree), else the one beside images/ (installed).
where() {
	_lib=$(cd "$(dirname "$0")" && pwd)
	for _t in ${ISOPOD_LIBEXEC:+"$ISOPOD_LIBEXEC/isopod-image"} "$_lib/../bin/isopod-image" \
		"$_lib/../isopod-image"; do
		if [ -x "$_t" ]; then
			_w=$("$_t" where) || die_with $? "isopod-image where failed"
			printf '%s\n' "$_w" | jq -r ".$1"
			return
		fi
	done
	die_with 101 "unable to find isopod-image (run make first, or set ISOPOD_LIBEXEC)"
}

cache_dir() {
	where cache
}

home_dir() {
	where store
}

# sha256_stdin: the hex sha256 of stdin.  OpenSSL's when it is installed: it
# uses the CPU's SHA instructions, ~5x coreutils' sha256sum here, and the
# content address of a base image reads its every byte, the sparse 2 GiB of
# free room included (~1.5 s instead of ~10 s of CPU).  Same digest.
sha256_stdin() {
	if command -v openssl >/dev/null 2>&1; then
		openssl dgst -sha256 -r | cut -d' ' -f1
	else
		sha256sum | cut -d' ' -f1
	fi
}

# sha256_file FILE (openssl reads a named file in larger blocks than stdin).
sha256_file() {
	if command -v openssl >/dev/null 2>&1; then
		openssl dgst -sha256 -r -- "$1" | cut -d' ' -f1
	else
		sha256sum <"$1" | cut -d' ' -f1
	fi
}

# place SRC DST: make DST the same bytes as SRC, atomically (a reader sees the
# old file or the new one, never a partial one).  Hard-link when SRC and DST
# share a filesystem, else copy.  Nothing to do when DST already is SRC.
place() {
	if [ -e "$2" ] &&
		[ "$(stat -Lc %d:%i "$1")" = "$(stat -Lc %d:%i "$2")" ]; then
		return 0
	fi
	_tmp=$2.tmp.$$
	rm -f "$_tmp"
	if ! ln "$1" "$_tmp" 2>/dev/null; then
		cp "$1" "$_tmp" || { rm -f "$_tmp"; die "unable to copy $1 to $_tmp"; }
	fi
	mv -f "$_tmp" "$2" || { rm -f "$_tmp"; die "unable to rename $_tmp to $2"; }
}
