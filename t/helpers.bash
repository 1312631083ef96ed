# t/helpers.bash - common set-up of the bats files:  load helpers
#
#   setup_file()    { isopod_setup_file [--images]; }
#   teardown_file() { isopod_teardown_file; }
#
# Each file gets its own store ($ISOPOD_HOME, a short path under /tmp: unix
# socket paths are limited to 108 bytes) and, with --images, the built kernel
# and base image registered in it.  PATH starts with bin/ and sh/.  The
# teardown stops every VM still running in that store and asserts that
# `isopod gc --dry-run` reports nothing leaked.

bats_require_minimum_version 1.5.0

ISOPOD_SRC=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
export ISOPOD_SRC
PATH="$ISOPOD_SRC/bin:$ISOPOD_SRC/sh:$PATH"
# The system's python3 before any other on PATH: a version manager's shim
# (pyenv's) costs ~0.5 s a start, against 0.07 s, and the lab's suites
# start python hundreds of times (their probes, servers and stand-in
# guests, through ip netns exec and lab.sh, which look python3 up on PATH).
# Every script here needs the standard library only.
if [ -x /usr/bin/python3 ] && [ "$(command -v python3)" != /usr/bin/python3 ]; then
	# (made once per bats run: this file is loaded by every test)
	[ -L "$BATS_RUN_TMPDIR/py/python3" ] ||
		{ mkdir -p "$BATS_RUN_TMPDIR/py" && ln -sfn /usr/bin/python3 "$BATS_RUN_TMPDIR/py/python3"; }
	[ ! -L "$BATS_RUN_TMPDIR/py/python3" ] || PATH="$BATS_RUN_TMPDIR/py:$PATH"
fi
export PATH
# No host or user configuration leaks into a test; runs that do not ask for a
# network mode get none (the built-in default, filtered, needs isopod-netsetup:
# the network suites ask for it explicitly).
ISOPOD_SYSCONFIG=/dev/null ISOPOD_CONFIG=/dev/null ISOPOD_NET=none
export ISOPOD_SYSCONFIG ISOPOD_CONFIG ISOPOD_NET
# No automatic gc behind a test's back (a suite that leaks on purpose checks
# that gc finds it); the tests of the automatic gc turn it on themselves.
ISOPOD_GC_INTERVAL=off
export ISOPOD_GC_INTERVAL

# need_slurm: skip the file unless it runs as root (network namespaces)
# with Slurm and munge installed (.ci/setup): t/95, t/96, t/97's clusters.
need_slurm() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	local c
	for c in slurmctld slurmd munged; do
		command -v "$c" >/dev/null || skip "slurmctld, slurmd or munged not installed (.ci/setup)"
	done
}

# The host's cache of KVM verdicts (lib/accelhost.c; /run/isopod/accel as
# root) is deliberately not a per-file directory: each file's store takes
# the verdict the first store's probe left there (up to 10 s each saved).
# Only real probes write it, keyed by QEMU, kernel, boot and jail setting;
# a test that fakes a probe or plants a verdict points
# ISOPOD_ACCEL_HOST_CACHE_DIR at its own directory (t/20's probe_reason).
isopod_setup_file() {
	ISOPOD_HOME=$(mktemp -d "/tmp/isopod-t.$(basename "$BATS_TEST_FILENAME" .bats).XXXXXX")
	export ISOPOD_HOME
	if [ "${1-}" = --images ]; then
		# make check runs after make images; a missing image is a failure here,
		# not a skip: a suite that silently skips every boot proves nothing.
		isopod_register "$ISOPOD_HOME" || {
			echo "# images/register failed: run make images first" >&3
			return 1
		}
	fi
}

# isopod_register HOME: HOME (absent or empty) holds what images/register
# would put there, ISOPOD_FLAVORS honoured.  register reads every byte of
# every image to name it (base and debian: 5.5 GB, ~9 s a store, most of a
# file's set-up), so it runs once per build into a template store,
# build/test-store.FLAVORS, remade when an input's inode, size or mtime
# changed (what register links: the same inode is the same bytes).  HOME
# gets the template's files as register gives them: the kernel and the
# images hard links, every record and pointer a copy of its own (a test may
# edit its store's meta.json).  A store that has images or kernels already
# gets register itself; so does a test of register, or a store on another
# file system (no hard links there).
isopod_register() {
	local home=$1 b=$ISOPOD_SRC/build tpl stamp f
	tpl=$b/test-store.$(tr -c 'a-z0-9\n' + <<<"${ISOPOD_FLAVORS:-all}")
	# (a store with images or kernels already: register's own merge)
	if [ -n "$(ls -A "$home/kernels" "$home/images" 2>/dev/null)" ] ||
		! stamp=$(cd "$b" 2>/dev/null && stat -c '%n %i %s %Y' vmlinux initramfs.cpio ./*.inputs.json base-*.img 2>/dev/null); then
		sh "$ISOPOD_SRC/images/register" "$home" >/dev/null
		return
	fi
	[ -d "$home" ] || mkdir -m 0755 -- "$home" || return 1
	(
		flock 9 || exit 1
		if [ "$(cat "$tpl/stamp" 2>/dev/null)" != "$stamp" ]; then
			rm -rf -- "$tpl" "$tpl.tmp"
			mkdir -- "$tpl.tmp" || exit 1
			sh "$ISOPOD_SRC/images/register" "$tpl.tmp/home" >/dev/null || { rm -rf -- "$tpl.tmp"; exit 1; }
			printf '%s\n' "$stamp" >"$tpl.tmp/stamp"
			mv -T -- "$tpl.tmp" "$tpl" || exit 1
		fi
		cp -a -l -- "$tpl/home"/* "$home/" || exit 1
		cd "$tpl/home" || exit 1
		find . -type f ! -name vmlinux ! -name initramfs.cpio ! -name '*.img' -printf '%P\n' |
			while IFS= read -r f; do
				cp -p --remove-destination -- "$f" "$home/$f" || exit 1
			done
	) 9>"$tpl.lock"
}

# isopod_lab_up NAME [NETSETUP-OPTION...]: for setup_file, as root (network
# namespaces): the sealed lab NAME of t/lab/lab.sh, and isopod-netsetup
# with the options given run in its host netns, its JSON in
# $BATS_FILE_TMPDIR/netsetup.json.  The lab's pretend internet (TEST-NET-2)
# is opened the way a host opens a range: allow_range in the lab's host
# config (LAB_CONF, exported as ISOPOD_SYSCONFIG), read by netsetup, the
# brokers and every run.  Exports LAB (lab.sh), LAB_NAME, ISOPOD_LAB_STATE.
isopod_lab_up() {
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh"
	export LAB_NAME="$1"
	export ISOPOD_LAB_STATE="${BATS_FILE_TMPDIR}/lab"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" up "$LAB_NAME" >/dev/null
	LAB_CONF=$(sh "$LAB" config "$LAB_NAME")
	export LAB_CONF ISOPOD_SYSCONFIG=$LAB_CONF
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" "${@:2}" --user 0 \
		>"$BATS_FILE_TMPDIR/netsetup.json"
}

isopod_teardown_file() {
	local id out st=0 stop gc
	[ -n "${ISOPOD_HOME-}" ] && [ -d "$ISOPOD_HOME" ] || return 0
	stop="${ISOPOD_LIBEXEC:-$ISOPOD_SRC/bin}/isopod-stop"
	gc="${ISOPOD_LIBEXEC:-$ISOPOD_SRC/bin}/isopod-gc"
	if [ -d "$ISOPOD_HOME/vms" ]; then
		for id in $(isopod vm ls | jq -r 'select(.running) | .id'); do
			echo "# teardown: stopping $id, left running by a test" >&3
			"$stop" --force --vm "$id" >/dev/null 2>&1 || st=1
		done
		if [ -x "$gc" ]; then
			out=$("$gc" --dry-run) || st=1
			if ! jq -e '(.leaked // []) == []' >/dev/null <<<"$out"; then
				echo "# teardown: isopod gc --dry-run reports leaks: $out" >&2
				st=1
			fi
		else
			echo "# teardown: $gc not built; leak check skipped" >&3
		fi
	fi
	rm -rf "$ISOPOD_HOME"
	return "$st"
}

# run_isopod [-N|!] ARGS...: bats `run` of the front end, stderr kept apart
# ($output is the JSON, $stderr the diagnostics).
run_isopod() {
	local expect=()
	case "${1-}" in
	-[0-9]* | '!') expect=("$1"); shift ;;
	esac
	run "${expect[@]}" --separate-stderr isopod "$@"
}

# hold_lock FILE: a sleeping process holding flock FILE (its pid in $holder),
# returned once the lock is really held.
hold_lock() {
	mkdir -p "$(dirname "$1")"
	sh -c 'exec 9>"$1"; flock 9; exec sleep 120' sh "$1" </dev/null >/dev/null 2>&1 3>&- &
	# shellcheck disable=SC2034 # read by the caller
	holder=$!
	local i
	for i in $(seq 1 100); do
		flock -n "$1" true 2>/dev/null || return 0
		sleep 0.05
	done
	echo "hold_lock: $1 never held" >&2
	return 1
}

# wait_paused PID: until PID has stopped itself at its ISOPOD_TEST_PAUSE_AT
# point (state T; at most 120 s); 1 when it exited or never stopped.
wait_paused() {
	local i st
	for i in $(seq 1 1200); do
		st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
		case $st in
		T) return 0 ;;
		'' | Z | X) echo "wait_paused: $1 exited" >&2; return 1 ;;
		esac
		sleep 0.1
	done
	echo "wait_paused: $1 never stopped" >&2
	return 1
}

# exited_or_blocked PID: wait (at most 120 s) until PID has exited (0) or is
# waiting for an flock (1; its request shows as blocked in /proc/locks).
# Deterministic: which one it is never depends on how fast the host is.
exited_or_blocked() {
	local i st
	for i in $(seq 1 1200); do
		st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
		case $st in '' | Z | X) return 0 ;; esac
		grep -Eq -- "-> FLOCK +ADVISORY +(WRITE|READ) +$1 " /proc/locks && return 1
		sleep 0.1
	done
	echo "exited_or_blocked: $1 neither exited nor blocked" >&2
	return 2
}

# run_many DIR N BUSY_TEXT CMD...: start CMD N times at once (output of run
# i in DIR/i.json and DIR/i.err), wait for all, and count into ok, busy (exit
# 102 with BUSY_TEXT on stderr) and other (anything else, shown on stderr).
run_many() {
	local d=$1 n=$2 text=$3 i rc pids=()
	shift 3
	mkdir -p "$d"
	for i in $(seq 1 "$n"); do
		"$@" >"$d/$i.json" 2>"$d/$i.err" &
		pids+=($!)
	done
	ok=0 busy=0 other=0
	for i in $(seq 1 "$n"); do
		rc=0
		wait "${pids[$((i - 1))]}" || rc=$?
		case $rc in
		0) ok=$((ok + 1)) ;;
		102) if grep -q "$text" "$d/$i.err"; then busy=$((busy + 1)); else other=$((other + 1)); fi ;;
		*)
			other=$((other + 1))
			echo "run $i: exit $rc: $(tail -n 2 "$d/$i.err")" >&2
			;;
		esac
	done
	echo "ok=$ok busy=$busy other=$other" >&2
}

# file_sha256 FILE: its sha256, by OpenSSL when installed (as images/lib.sh:
# a base image is 2 GiB of mostly holes, ~5x faster than sha256sum here).
file_sha256() {
	if command -v openssl >/dev/null 2>&1; then
		openssl dgst -sha256 -r -- "$1" | cut -d' ' -f1
	else
		sha256sum <"$1" | cut -d' ' -f1
	fi
}

# The lock of a VM is held exactly while its supervisor lives.
vm_locked() {
	# Only "held by another" counts: a lock file that is gone (the VM
	# removed) or cannot be opened is not a running VM.
	local rc=0
	flock -n -E 75 -s "$ISOPOD_HOME/vms/$1/lock" true 2>/dev/null || rc=$?
	[ "$rc" -eq 75 ]
}

# jq 1.6 exits 0 under -e when it read no value at all (an empty input:
# jq 1.7 says 4, as documented), so a check on a command that printed
# nothing would pass.  Under -e here, no output value is exit 4.
jq() {
	local a e=0 rc=0 tmp
	for a in "$@"; do
		case $a in
		--exit-status) e=1 ;;
		--*) ;;
		-*e*) e=1 ;;
		esac
	done
	[ "$e" -eq 1 ] || { command jq "$@"; return; }
	tmp=$(mktemp "${BATS_TEST_TMPDIR:-/tmp}/jq.XXXXXX")
	command jq "$@" >"$tmp" || rc=$?
	if [ "$rc" -eq 0 ] && [ ! -s "$tmp" ]; then
		echo "jq -e: no value in its input" >&2
		rc=4
	fi
	cat "$tmp"
	rm -f "$tmp"
	return "$rc"
}

# json_is FILTER: assert a jq filter holds on $output (shows both on failure).
# shellcheck disable=SC2154  # $output is set by bats' run
json_is() {
	if ! jq -e "$1" >/dev/null <<<"$output"; then
		echo "json_is failed: $1" >&2
		echo "output: $output" >&2
		return 1
	fi
}

# adverse_coverage NETNS: what a full `isopod-doctor --adverse` run adds to a
# hand-made report for the taps live in NETNS now, as {vms, probes,
# host_checks}: a doctor-booted VM of each live mode (none always; filtered,
# open as the taps' ifalias say), one passing probe (five steps) of every
# class isopod-attest sign requires for that mode (lib/suite.c, spelt out
# here on purpose), the four host checks of every tap and, with taps, the
# netstate checks before and after.
adverse_coverage() {
	local taps
	# shellcheck disable=SC2016  # expanded by the inner sh
	taps=$(ip netns exec "$1" sh -c 'for a in /sys/class/net/isopod-tap*/ifalias; do
		[ -r "$a" ] || continue; t=${a%/ifalias}; printf "%s %s\n" "${t##*/}" "$(cat "$a")"; done')
	command jq -cn --arg taps "$taps" '
		def steps: [{step: "liveness", ok: true}, {step: "tooling", ok: true},
		            {step: "control", ok: true}, {step: "attempt", ok: false},
		            {step: "evidence", ok: true}];
		{none: ["none"],
		 filtered: ["metadata", "denied-range", "gateway-port", "filtered-forwarding",
		            "dns-exfiltration", "spoof-ip", "spoof-mac", "arp-gateway", "ipv6",
		            "dns-rebinding"],
		 open: ["metadata", "denied-range", "gateway-port", "spoof-ip", "spoof-mac",
		        "arp-gateway", "ipv6"]} as $cls |
		[$taps | split("\n")[] | select(length > 0) | split(" ") |
		 {tap: .[0], mode: (.[2] // "")}] as $t |
		[["none", "filtered", "open"][] as $m |
		 select($m == "none" or any($t[]; .mode == $m)) | $m] as $modes |
		{vms: [$modes[] | {id: "doctor-\(.)", mode: ., booted_by_doctor: true}],
		 probes: [$modes[] as $m | $cls[$m][] |
		          {name: "\($m)/\(.)", class: ., vm: "doctor-\($m)", verdict: "pass",
		           steps: steps}],
		 host_checks: ([$t[] | ({check: "tap-forwarding", tap: .tap, mode: .mode, ok: true},
		                        {check: "fail-closed-rule", tap: .tap, ok: true},
		                        {check: "tc-filter", tap: .tap, mode: .mode, ok: true},
		                        {check: "broker", tap: .tap, mode: .mode, ok: true, vm_on_slot: true,
		                         answered: true, rcode: 5})] +
		               if ($t | length) > 0 then [{check: "netstate", when: "before", ok: true},
		                                         {check: "netstate", when: "after", ok: true}]
		               else [] end)}'
}

# jail_check ID: the running VM's QEMU (its pid from the record) is in the
# jail (issue 12): the jail's uid in every slot, NoNewPrivs 1, no effective
# or bounding capability, a network namespace other than its supervisor's
# holding only lo, a pid namespace of its own (QEMU its PID 1), the jail's
# seccomp filter under QEMU's own (-sandbox alone is one filter), a mount
# namespace of its own whose root holds its kernel but no other VM's
# directory and no image but its base, and the cgroup limits the record
# says were applied.  Every failed check is named on stderr (the mutation
# test reads them).  Shared by the VM suites: it checks VMs they boot anyway.
jail_check() {
	local meta="$ISOPOD_HOME/vms/$1/meta.json" q s uid mem pids cm cp f r h k bad=0
	q=$(jq -r '.qemu_pid // 0' "$meta")
	s=$(jq -r '.supervisor_pid // 0' "$meta")
	uid=$(jq -r '.jail.uid // "none"' "$meta")
	f=/proc/$q/status
	if [ "$q" -le 0 ] || [ ! -d "/proc/$q" ]; then
		echo "jail_check: no live qemu pid" >&2
		return 1
	fi
	if ! awk -v u="$uid" '$1 == "Uid:" || $1 == "Gid:" {
		if ($2 != u || $3 != u || $4 != u || $5 != u) bad = 1 } END { exit bad }' "$f"; then
		echo "jail_check: uid/gid not the jail's ($uid)" >&2
		bad=1
	fi
	if ! grep -q '^NoNewPrivs:[[:space:]]*1$' "$f"; then
		echo "jail_check: no NoNewPrivs" >&2
		bad=1
	fi
	if ! grep -q '^CapEff:[[:space:]]*0*$' "$f" || ! grep -q '^CapBnd:[[:space:]]*0*$' "$f"; then
		echo "jail_check: capabilities left" >&2
		bad=1
	fi
	if [ "$(readlink "/proc/$q/ns/net")" = "$(readlink "/proc/$s/ns/net")" ] ||
		[ "$(awk 'NR > 2 { sub(":", "", $1); print $1 }' "/proc/$q/net/dev")" != lo ]; then
		echo "jail_check: the supervisor's net namespace, or interfaces other than lo" >&2
		bad=1
	fi
	if [ "$(readlink "/proc/$q/ns/pid")" = "$(readlink "/proc/$s/ns/pid")" ] ||
		! grep -q "^NSpid:[[:space:]]*${q}[[:space:]]*1$" "$f"; then
		echo "jail_check: not PID 1 of a pid namespace of its own" >&2
		bad=1
	fi
	if ! grep -q '^Seccomp:[[:space:]]*2$' "$f" ||
		[ "$(awk '$1 == "Seccomp_filters:" { print $2 }' "$f")" -lt 2 ]; then
		echo "jail_check: no seccomp filter of the jail's under QEMU's" >&2
		bad=1
	fi
	r=/proc/$q/root h=$(realpath "$ISOPOD_HOME")
	k=$(tr '\0' '\n' <"/proc/$q/cmdline" | awk 'p { print; exit } $0 == "-kernel" { p = 1 }')
	if [ "$(readlink "/proc/$q/ns/mnt")" = "$(readlink "/proc/$s/ns/mnt")" ] ||
		[ ! -f "$r$(realpath "$k")" ] || [ "$(ls -A "$r$h/vms")" != "$1" ] ||
		find "$r$h/images" -mindepth 1 -maxdepth 1 ! -name "base-$(jq -r .base.sha256 "$meta").img" \
			2>/dev/null | grep -q .; then
		echo "jail_check: the supervisor's mount namespace, or a root without its kernel ($k), with another VM or another image" >&2
		bad=1
	fi
	mem=$(jq -r '.jail.cgroup.memory_bytes // 0' "$meta")
	pids=$(jq -r '.jail.cgroup.pids // 0' "$meta")
	if [ "$(jq -r '.jail.cgroup.version // 0' "$meta")" = 2 ]; then
		cm=/sys/fs/cgroup$(awk -F: '$1 == "0" { print $3 }' "/proc/$q/cgroup")
		cm=$cm/memory.max cp=${cm%/*}/pids.max
	else
		cm=/sys/fs/cgroup/memory$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3 }' "/proc/$q/cgroup")/memory.limit_in_bytes
		cp=/sys/fs/cgroup/pids$(awk -F: '$2 ~ /(^|,)pids(,|$)/ { print $3 }' "/proc/$q/cgroup")/pids.max
	fi
	if [ "$mem" -le 0 ] || [ "$pids" -le 0 ] || [ "$(cat "$cm")" != "$mem" ] || [ "$(cat "$cp")" != "$pids" ]; then
		echo "jail_check: cgroup limits ($mem, $pids) not in force ($cm, $cp)" >&2
		bad=1
	fi
	return "$bad"
}

# jail_uid NAME: lib/jail.c jail_identity with the default range
# (0x78000000 + FNV-1a(NAME) mod 65536; the lab's config sets none).
jail_uid() {
	local h=2166136261 i c
	for ((i = 0; i < ${#1}; i++)); do
		printf -v c '%d' "'${1:i:1}"
		h=$(((h ^ c) * 16777619 & 0xffffffff))
	done
	echo $((0x78000000 + h % 65536))
}

# stopped_in_group PGID COMM: the pid of the process COMM stopped (SIGSTOP at
# an ISOPOD_TEST_PAUSE_AT point) in process group PGID, waited for up to 30 s;
# nothing printed when none came.
stopped_in_group() {
	local i p
	for i in $(seq 1 300); do
		p=$(ps -e -o pid=,pgid=,stat=,comm= | awk -v g="$1" -v c="$2" '$2 == g && $3 ~ /^T/ && $4 == c { print $1 }')
		[ -z "$p" ] || { echo "$p"; return 0; }
		sleep 0.1
	done
}

# term_paused PGID CPID: SIGTERM to the run's group PGID while its tool CPID
# is stopped at a pause point, then CPID let go: the run (whose stdout and
# stderr are $BATS_TEST_TMPDIR/out and err) ends 143, interrupted.
term_paused() {
	local rc=0
	kill -TERM -- "-$1"
	kill -CONT "$2"
	wait "$1" || rc=$?
	cat "$BATS_TEST_TMPDIR/err"
	[ "$rc" -eq 143 ]
	jq -e '.error_kind == "interrupted"' "$BATS_TEST_TMPDIR/out"
}

# gc_clean: `isopod gc --dry-run` reports nothing leaked (its JSON shown when
# it does, so a failure names what leaked).
gc_clean() {
	local out
	out=$(isopod gc --dry-run) || { echo "isopod gc --dry-run failed: $out" >&2; return 1; }
	jq -e '.leaked == []' >/dev/null <<<"$out" || { echo "leaked: $(jq -c .leaked <<<"$out")" >&2; return 1; }
}

# The overlay a run's record says made its disk (lib/ovtpl.c: template,
# qemu-img, snapshot, fork), the run's JSON in $output.
overlay_of() {
	jq -r .overlay "$ISOPOD_HOME/vms/$(jq -r .vm.id <<<"$output")/meta.json"
}

# await_running IDFILE: wait (60 s at most) until the VM whose id a run in
# the background writes to IDFILE (isopod(1) ISOPOD_VM_ID_FD) is running.
# Sets the caller's id and qpid (its QEMU's pid; empty if it never ran).
await_running() {
	local _
	id='' qpid=''
	for _ in $(seq 600); do
		id=$(head -n 1 "$1" 2>/dev/null) || id=''
		[ -z "$id" ] || qpid=$(jq -er 'select(.state == "running") | .qemu_pid' "$ISOPOD_HOME/vms/$id/meta.json" 2>/dev/null) || qpid=''
		[ -z "$qpid" ] || return 0
		sleep 0.1
	done
}
