#!/usr/bin/env bats
# The warm pool (issue #5): memory snapshots per VM shape, built once under a
# per-key lock, resumed over a fresh overlay; corrupt, orphaned and killed
# snapshots; isopod-warm ls/rm; the gc sweep.  Real VM boots (TCG here).
#
# Each test that needs a snapshot of its own picks a shape no other test uses
# (a --mem-mib of its own): the key covers the memory size.

load helpers

setup_file() {
	isopod_setup_file --images
	DATA="$(mktemp -d /tmp/isopod-t50-data.XXXXXX)"
	export DATA
	# Networked snapshots run inside the sealed lab of t/lab/lab.sh (network
	# namespaces only: no packet can leave this machine), root only.
	export LAB_NAME="t50w$$" ISOPOD_NET_LOCKS="$ISOPOD_HOME/locks" NETLAB=0
	: >"$DATA/holders"
	if [ "$(id -u)" -eq 0 ]; then
		export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab"
		sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
		sh "$LAB" up "$LAB_NAME" >/dev/null
		# The lab's host config: its allow_range opens the lab's pretend
		# internet (TEST-NET-2, in the deny list) as a host would, for
		# netsetup here and for the runs of vrun.
		LAB_CONF=$(sh "$LAB" config "$LAB_NAME")
		export LAB_CONF ISOPOD_SYSCONFIG=$LAB_CONF
		mkdir -p "$ISOPOD_NET_LOCKS"
		# A failure here fails the networked tests (with its message), not
		# the whole file.
		if sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 2 --open-slots 4 \
			--user 0 >"$DATA/netsetup.json" 2>"$DATA/netsetup.err"; then
			NETLAB=1
		else
			NETLAB=failed
		fi
	fi
}

teardown_file() {
	local pid
	while read -r pid; do kill "$pid" 2>/dev/null || :; done <"$DATA/holders"
	isopod_teardown_file || st=$?
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
	rm -rf "$DATA"
	return "${st:-0}"
}

isopod() { "$ISOPOD_SRC/sh/isopod" "$@"; }
W() { echo "$ISOPOD_HOME/warm"; }

# boot_vm [BOOT-OPTIONS...]: claim + boot a VM owned by this test's shell; the
# boot JSON in $output (stderr apart), its id in $vm.
boot_vm() {
	vm=$(isopod-claim | jq -er .vm.id)
	run --separate-stderr isopod-boot --vm "$vm" --owner-pid $$ "$@"
}

stop_vm() { isopod-stop --force --vm "$1" > /dev/null; }

# boot_as --cold|"": a VM booted cold, or resumed (the first of its shape
# builds the snapshot: that one is stopped and another resumed), its result
# in $output, its path the one asked for (else it is stopped, and this fails).
boot_as() {
	# shellcheck disable=SC2086 # "" is no option: the default, warm
	boot_vm $1
	[ "$status" -eq 0 ]
	if jq -e '.path == "snapshot-build"' <<<"$output" >/dev/null; then
		stop_vm "$vm"
		boot_vm
		[ "$status" -eq 0 ]
	fi
	if [ -n "$1" ]; then json_is '.path == "cold"'; else json_is '.path == "warm"'; fi ||
		{ stop_vm "$vm"; return 1; }
}

# ro_fds PID FILE: PID's descriptors of FILE's inode in fds; fails unless
# there are two or more (a clone's QEMU: fd 3, the supervisor's, and its
# own reopen of /proc/self/fd/3) and each is read-only (O_ACCMODE of the
# octal flags in /proc/PID/fdinfo, which are logged).
ro_fds() {
	local fd fl
	fds=()
	for fd in /proc/"$1"/fd/*; do
		[ "$(stat -L -c %d:%i "$fd" 2>/dev/null)" = "$(stat -c %d:%i "$2")" ] && fds+=("${fd##*/}")
	done
	for fd in "${fds[@]}"; do
		fl=$(awk '$1 == "flags:" { print $2 }' "/proc/$1/fdinfo/$fd")
		echo "pid $1 fd $fd: flags $fl" >&2
		[ -n "$fl" ] && [ $((8#$fl & 3)) -eq 0 ] || return 1
	done
	[ "${#fds[@]}" -ge 2 ]
}

# ro_mount PID: as root (whom no mode stops), each of fds (ro_fds's) of
# PID cannot be reopened for writing: its mount is read-only (EROFS,
# lib/warmpool.c mem_open), whatever the file's mode or isopod-memro.so.
ro_mount() {
	local fd err
	for fd in "${fds[@]}"; do
		err=$(sh -c "exec 9<>/proc/$1/fd/$fd && echo OPENED" 2>&1 || :)
		echo "root, pid $1 fd $fd: $err" >&2
		[[ "$err" == *"Read-only file system"* && "$err" != *OPENED* ]] || return 1
	done
}

# jout [JQ-OPTIONS...] FILTER: json_is with jq options (--arg ...).
jout() {
	if ! jq -e "$@" >/dev/null <<<"$output"; then
		echo "jout failed: $*" >&2
		echo "output: $output" >&2
		return 1
	fi
}

# held FILE: wait until someone holds FILE's flock (at most 5 s).
held() {
	for _ in $(seq 1 50); do
		flock -n "$1" true || return 0
		sleep 0.1
	done
	return 1
}

# key_of MEM: the key of the one snapshot of that memory size.
key_of() { isopod-warm ls | jq -r --argjson m "$1" 'select(.shape.mem_mib == $m) | .key'; }

# net_lab: skip without root; fail when isopod-netsetup failed in setup_file.
net_lab() {
	[ "$NETLAB" != 0 ] || skip "needs root: the network lab"
	[ "$NETLAB" = 1 ] || { echo "isopod-netsetup failed: $(cat "$DATA/netsetup.err")" >&2; return 1; }
}

# vrun ARGS...: isopod run inside the lab's host netns (where the taps are),
# with the lab's host config: every result warns of its allow_range (and
# of nothing else, in the tests that say so).
vrun() {
	ip netns exec "$LAB_NAME-host" sh "$BATS_TEST_DIRNAME/lab/cgexec" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_SYSCONFIG="$LAB_CONF" \
		ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" PATH="$PATH" isopod run --json-only "$@"
}

# hold_slot K: hold network slot K's lock (a background process, killed by
# release_slots) so that the next networked run gets another slot.
hold_slot() {
	(
		exec 8>>"$ISOPOD_NET_LOCKS/slot-$1"
		# -w, not -n: held's probe takes the lock for an instant too
		flock -w 10 8 && exec sleep 300
	) 3>&- </dev/null >/dev/null 2>&1 &
	echo $! >>"$DATA/holders"
	held "$ISOPOD_NET_LOCKS/slot-$1"
}

release_slots() {
	local pid
	while read -r pid; do kill "$pid" 2>/dev/null || :; done <"$DATA/holders"
	: >"$DATA/holders"
}

# What a networked clone says about itself, one item per line: hostname,
# its IPv4 addresses (one line each), MAC, 16 random bytes, default routes,
# then whether its gateway answers ping and the lab's internet host TCP 80.
NETID='hostname
ip -4 -o addr show dev eth0 | while read -r _ _ _ a _; do echo "addr $a"; done
echo "mac $(cat /sys/class/net/eth0/address)"
echo "rand $(head -c16 /dev/urandom | od -An -tx1 | tr -d " \n")"
ip route | grep "^default" | while read -r _ _ gw _; do echo "gw $gw"; done
gw=$(ip route | grep "^default" | cut -d" " -f3)
ping -c1 -W2 "$gw" >/dev/null && echo gw-ping-ok
printf "GET / HTTP/1.0\r\n\r\n" | nc -w 3 198.51.100.10 80 | tail -n 1'

# net_identity: $output (a NETID run) is a clone that is its slot's and
# nobody else's: hostname = vm name, exactly one address (the slot's), the
# slot's MAC, exactly one default route (the slot's gateway), and the data
# path works both ways.
net_identity() {
	jout '.ok and .exit_code == 0 and .net.mode == "open" and (.net.slot | type) == "number"'
	jout '(.stdout | split("\n")) as $l | $l[0] == .vm.name and
		([$l[] | select(startswith("addr "))] == ["addr \(.net.guest_ip)/30"]) and
		([$l[] | select(startswith("mac "))] == ["mac \(.net.mac)"]) and
		([$l[] | select(startswith("gw "))] == ["gw \(.net.gateway)"]) and
		([$l[] | select(startswith("rand ") and length == 37)] | length == 1) and
		any($l[]; . == "gw-ping-ok") and any($l[]; . == "lab 198.51.100.10")'
}
line() { jq -r --arg p "$2" '.stdout | split("\n")[] | select(startswith($p))' <<<"$1"; }

@test "warm: run -- true twice: first snapshot-build, then warm; the store holds one whole snapshot" {
	run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	json_is '.ok == true and .path == "snapshot-build"'
	id1=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	json_is '.ok == true and .path == "warm"'
	id2=$(echo "$output" | jq -r .vm.id)
	# the records say how they booted, and from which snapshot
	jq -e '.path == "snapshot-build" and .resume_ms > 0' "$ISOPOD_HOME/vms/$id1/meta.json"
	jq -e '.path == "warm" and .resume_ms > 0' "$ISOPOD_HOME/vms/$id2/meta.json"
	key=$(jq -r .warm_key "$ISOPOD_HOME/vms/$id2/meta.json")
	[ "$key" = "$(jq -r .warm_key "$ISOPOD_HOME/vms/$id1/meta.json")" ]
	run --separate-stderr isopod-warm ls
	[ "$status" -eq 0 ]
	jout -s --arg k "$key" '.[] | select(.key == $k) | .hits == 1 and .orphaned == false and .orphaned_by == [] and .size > 0'
	jout -s --arg k "$key" '.[] | select(.key == $k) | .shape.mem_mib == 512 and .shape.vcpus == 1 and .shape.net == "none" and .shape.layers == []'
	# guest RAM as a file of the guest's size (sparse), device state beside it
	[ "$(stat -c %s "$(W)/$key/mem")" -eq $((512 * 1024 * 1024)) ]
	# root's 0644, one link: every clone maps it, none may write it (a
	# jailed clone's QEMU reopens its fd 3 read-only: lib/memro.c); the
	# pool's directories (0700) keep every other path out
	[ "$(stat -c '%u %a %h' "$(W)/$key/mem")" = "0 644 1" ]
	[ "$(stat -c %a "$(W)")" = 700 ] && [ "$(stat -c %a "$(W)/$key")" = 700 ] || false
	[ -s "$(W)/$key/state" ]
	# the template's console, as a VM's (lib/conlog.c): a boot is quiet
	jq -e '.console_bytes >= 0 and .console_log_truncated == false' "$(W)/$key/meta.json"
	[ -z "$(ls -A "$(W)" | grep -E '^\.(staging|retired)-')" ]
}

@test "warm: the memory file is sparse: what the disk holds of it is well under its apparent size" {
	# Guest RAM is the file (share=on, no prealloc): only pages the guest
	# wrote get blocks (kernel, initramfs, struct pages = 1/64 of RAM,
	# slab, page cache), about 46 of 512 MiB measured under TCG, where
	# QEMU touches guest RAM only as the guest does.  The bound, a quarter,
	# leaves that ~2.8x of room; a preallocated or filled file is all of it.
	local key mem size alloc
	run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	key=$(jq -r .warm_key <<<"$output")
	mem=$(W)/$key/mem
	size=$(stat -c %s "$mem")
	alloc=$(($(stat -c '%b * %B' "$mem")))
	echo "mem $size bytes, $alloc allocated" >&2
	[ "$size" -eq $((512 * 1024 * 1024)) ]
	[ "$alloc" -lt $((size / 4)) ]
	# and it is the guest's RAM, not an empty file: the kernel is in it
	[ "$alloc" -gt $((4 * 1024 * 1024)) ]
}

@test "warm: a jailed clone's QEMU holds its RAM file read-only and its uid cannot open it for writing; without isopod-memro.so no clone starts" {
	local meta q uid gid key mem fd fds err
	boot_vm --mem-mib 440
	[ "$status" -eq 0 ]
	json_is '(.path == "warm" or .path == "snapshot-build") and .jail.enabled == true and .warnings == []'
	meta=$ISOPOD_HOME/vms/$vm/meta.json key=$(jq -r .warm_key <<<"$output")
	q=$(jq -r .qemu_pid "$meta") uid=$(jq -r .jail.uid "$meta") gid=$(jq -r .jail.gid "$meta")
	mem=$(W)/$key/mem
	[ "$(stat -c '%u %a %h' "$mem")" = "0 644 1" ]
	ro_fds "$q" "$mem"
	for fd in "${fds[@]}"; do
		# as QEMU's uid, through QEMU's own descriptor: reading is
		# allowed (so the path itself is open to that uid), writing EACCES
		err=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups sh -c \
			"exec 9</proc/$q/fd/$fd && echo OPENED" 2>&1 || :)
		[ "$err" = OPENED ]
		err=$(setpriv --reuid="$uid" --regid="$gid" --clear-groups sh -c \
			"exec 9<>/proc/$q/fd/$fd && echo OPENED" 2>&1 || :)
		echo "fd $fd: $err" >&2
		[[ "$err" == *"Permission denied"* && "$err" != *OPENED* ]]
	done
	ro_mount "$q"
	stop_vm "$vm"
	# Unjailed (root's QEMU, which the mode would not stop): the same
	# read-only descriptors
	ISOPOD_JAIL=0 boot_vm --mem-mib 440
	[ "$status" -eq 0 ]
	json_is '.path == "warm" and .jail.enabled == false'
	q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	ro_fds "$q" "$mem"
	ro_mount "$q"
	stop_vm "$vm"
	# The supervisor beside no isopod-memro.so: the clone does not start
	# (jailed, its QEMU could not open the file anyway; unjailed it would
	# not load the library), the run boots cold and says why, and the
	# snapshot stays (its fault it is not: no rebuild on every run).
	cp "$ISOPOD_SRC/bin/isopod-supervise" "$BATS_TEST_TMPDIR/"
	ISOPOD_SUPERVISE=$BATS_TEST_TMPDIR/isopod-supervise boot_vm --mem-mib 440
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and any(.warnings[]; test("skipped: .*isopod-memro.so: No such file"))'
	stop_vm "$vm"
	[ "$(stat -c '%u %a %h' "$mem")" = "0 644 1" ]
}

@test "warm: a memory file another uid could write (0606, as published before isopod-memro.so) is retired, not resumed" {
	local key d ct
	boot_vm --mem-mib 444
	[ "$status" -eq 0 ]
	key=$(jq -r .warm_key <<<"$output")
	d=$(W)/$key
	stop_vm "$vm"
	# the mode as it was, the record's ctime made to match (the ctime
	# check alone would retire a chmod'ed file)
	chmod 0606 "$d/mem"
	ct=$(stat -c %.9Z "$d/mem")
	jq --argjson s "${ct%.*}" --argjson n "$((10#${ct#*.}))" '.mem.ctime_s = $s | .mem.ctime_ns = $n' \
		"$d/meta.json" >"$d/meta.json.new"
	mv "$d/meta.json.new" "$d/meta.json"
	boot_vm --mem-mib 444
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and any(.warnings[]; test("refused: .*mode 0606"))'
	stop_vm "$vm"
	[ ! -e "$(W)/$key" ]
}

@test "warm: isopod-boot reports resume_ms, warm_key and warnings; the resumed QEMU is jailed; --cold and ISOPOD_WARM=0 boot cold" {
	boot_vm
	[ "$status" -eq 0 ]
	json_is '.path == "warm" and .resume_ms > 0 and (.warm_key | length) == 64 and .warnings == [] and .root == "ro"'
	json_is '.jail.enabled == true'
	# a clone's (and so its template's) kernel line never says
	# isopod.root_rw=1: only a cold boot's does (t/20); a template told it
	# would answer rw above, and launch_resume would refuse the clone
	qpid=$(jq -er .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -q -- '-append'
	! tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -q 'isopod\.root_rw' || false
	st=0
	jail_check "$vm" || st=1 # a warm resume runs jailed
	stop_vm "$vm"
	[ "$st" -eq 0 ]
	boot_vm --cold
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (has("resume_ms") | not) and (has("warm_key") | not) and .warnings == []'
	stop_vm "$vm"
	run --separate-stderr env ISOPOD_WARM=0 "$ISOPOD_SRC/sh/isopod" run --json-only -- true
	[ "$status" -eq 0 ]
	json_is '.path == "cold"'
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
	json_is '.path == "cold"'
	# a bad ISOPOD_WARM is a usage error before anything starts
	vm=$(isopod-claim | jq -er .vm.id)
	run --separate-stderr env ISOPOD_WARM=maybe isopod-boot --vm "$vm" --owner-pid $$
	[ "$status" -eq 100 ]
	[[ "$stderr" == *ISOPOD_WARM* ]]
	run --separate-stderr env ISOPOD_WARM_WAIT_MS=soon isopod-boot --vm "$vm" --owner-pid $$
	[ "$status" -eq 100 ]
	[[ "$stderr" == *ISOPOD_WARM_WAIT_MS* ]]
	jq -e '.state == "claimed"' "$ISOPOD_HOME/vms/$vm/meta.json"
}

@test "warm: cold and resumed QEMUs both get virtio-serial max_ports=2 (goal 7: 6 virtqueues, not 64); the agent still answers" {
	local q mode
	for mode in --cold ""; do
		boot_as "$mode"
		q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
		tr '\0' ' ' <"/proc/$q/cmdline" | grep -q -- ' -device virtio-serial-device,max_ports=2 ' ||
			{ stop_vm "$vm"; return 1; }
		run isopod-exec --vm "$vm" -- true
		stop_vm "$vm"
		[ "$status" -eq 0 ]
	done
}

# Goal 7: a TCG QEMU runs without transparent huge pages (PR_SET_THP_DISABLE
# as it starts, lib/qemu.c qemu_nothp; kept across execve and stronger than
# QEMU's own MADV_HUGEPAGE).  A cold guest's RAM in 2 MiB pages took 38 MiB
# of the host's for the 24 MiB it touched (doc/SPEED.md, "THP off for
# QEMU").  The kernel says so in /proc/PID/status (THP_enabled, 0 with the
# flag, 1 without on a kernel with THP), and smaps_rollup shows no huge
# page once the guest ran a command.
@test "warm: a TCG QEMU, cold or resumed, runs with transparent huge pages off (THP_enabled 0, no AnonHugePages)" {
	local q mode huge
	for mode in --cold ""; do
		boot_as "$mode"
		if [ "$(jq -r .accel <<<"$output")" != tcg ]; then
			stop_vm "$vm"
			skip "KVM: huge pages are left as the host has them"
		fi
		q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
		grep -qx 'THP_enabled:[[:space:]]*0' "/proc/$q/status" || { stop_vm "$vm"; return 1; }
		run isopod-exec --vm "$vm" -- true
		huge=$(awk '/^AnonHugePages:/ { print $2 }' "/proc/$q/smaps_rollup")
		stop_vm "$vm"
		[ "$status" -eq 0 ]
		[ "$huge" = 0 ]
	done
}

# The flag is the mm's, and a vfork child runs on its parent's until its
# exec: set there it landed on the parent too, and on all the parent
# started later (a KVM QEMU, qemu-img).  lib/proc.c forks for it.  Unjailed,
# QEMU's parent is the supervisor (qemu_spawn): it keeps the host's THP,
# as this shell has it (jailed, lib/jail.c's clone never shared the mm).
@test "warm: unjailed, a TCG QEMU's THP off is its own: the supervisor that started it keeps THP as the host has it" {
	local q s mine
	mine=$(grep '^THP_enabled:' /proc/$$/status)
	[ "$mine" = "$(printf 'THP_enabled:\t1')" ] ||
		skip "this shell runs with THP off ($mine): no difference to see"
	ISOPOD_JAIL=0 boot_vm --cold
	[ "$status" -eq 0 ]
	if [ "$(jq -r .accel <<<"$output")" != tcg ]; then
		stop_vm "$vm"
		skip "KVM: huge pages are left as the host has them"
	fi
	json_is '.path == "cold" and .jail.enabled == false' || { stop_vm "$vm"; return 1; }
	q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	s=$(jq -r .supervisor_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	grep '^THP_enabled:' "/proc/$q/status" "/proc/$s/status" >&2 || :
	if ! grep -qx 'THP_enabled:[[:space:]]*0' "/proc/$q/status" ||
		! grep -qx "$mine" "/proc/$s/status"; then
		stop_vm "$vm"
		return 1
	fi
	stop_vm "$vm"
}

# A TCG guest's clock event device is its local APIC timer, told its rate on
# the line (lapic_timer_khz, lib/qemu.c; the kernel's patch in images/), not
# the PIT, whose 27.5 ms reach woke an idle guest's QEMU ~36 times a second
# (doc/SPEED.md "Goal 6, fourth round").  With noapictimer the guest's tick
# device is the PIT and the IO-APIC's pin 2 counts; on a kernel without the
# patch the word is ignored and the kernel calibrates the timer (and may
# find it failing its check against the PIT).  A resumed guest runs on the
# timer its template booted with.
@test "warm: a TCG guest, cold or resumed, ticks on its local APIC timer (lapic_timer_khz), not the PIT" {
	local q mode
	for mode in --cold ""; do
		boot_as "$mode"
		if [ "$(jq -r .accel <<<"$output")" != tcg ]; then
			stop_vm "$vm"
			skip "KVM: its guests have the TSC-deadline timer, their line is unchanged"
		fi
		q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
		tr '\0' ' ' <"/proc/$q/cmdline" | grep -q -- ' lapic_timer_khz=1000000 ' ||
			{ stop_vm "$vm"; return 1; }
		# PID 1's environment too: a kernel that does not know the word
		# passes it to init there
		run --separate-stderr isopod-exec --vm "$vm" -- sh -c \
			'cat /proc/timer_list /proc/interrupts; sleep 1; cat /proc/interrupts
			echo "environ: $(tr "\0" " " </proc/1/environ)"'
		stop_vm "$vm"
		[ "$status" -eq 0 ]
		jq -r .stdout <<<"$output" >"$BATS_TEST_TMPDIR/timers"
		# the environment was read (the kernel always gives init TERM)
		# and does not have the word: the kernel took it
		grep '^environ: ' "$BATS_TEST_TMPDIR/timers"
		grep -q '^environ: .*TERM=' "$BATS_TEST_TMPDIR/timers"
		if grep -q '^environ: .*lapic_timer_khz' "$BATS_TEST_TMPDIR/timers"; then return 1; fi
		# CPU 0's tick device, how far ahead it can be set, and its rate
		# (mult / 2^shift counts per ns): the line's, 1 GHz / the kernel's
		# divider of 16, as told -- a kernel that calibrated the timer
		# instead (no patch: 200 ms of every boot) measures it within a
		# few 1e-5 at best
		awk '/^Per CPU device: 0$/ { p = 1; next }
			p && /^Clock Event Device:/ { dev = $4 }
			p && /max_delta_ns:/ { max = $2 }
			p && /mult:/ { mult = $2 }
			p && /shift:/ { shift = $2; exit }
			END { r = mult / 2 ^ shift * 16
				printf "CPU 0 tick device %s, max_delta_ns %s, %.9f of 1 GHz\n", dev, max, r
				exit !(dev == "lapic" && max >= 1e9 && r > 0.999999 && r < 1.000001) }' \
			"$BATS_TEST_TMPDIR/timers"
		# over the sleep: local timer interrupts, none on the PIT's pin,
		# and fewer than half a periodic tick's (CONFIG_HZ=250): an idle
		# tickless guest sets the timer for its next event, not each tick
		awk '$1 == "LOC:" { loc[++n] = $2 }
			/IO-APIC +2-edge +timer/ { pit[++m] = $2 }
			END { printf "LOC %s -> %s, PIT %s -> %s\n", loc[1], loc[2], pit[1], pit[m]
				exit !(n == 2 && loc[2] > loc[1] && loc[2] - loc[1] < 125 &&
				       pit[1] == pit[m]) }' "$BATS_TEST_TMPDIR/timers"
	done
}

# The line by what the kernel is (lib/image.c kernel_lapic_khz): a store
# whose kernel was built before the patch (its record's inputs list no
# patches: tools upgraded, `make images` not run) is told noapictimer, as
# before, not a word its kernel would ignore (into PID 1's environment)
# while calibrating its timer at every boot.  The record is changed in this
# test's store only, and put back before any assertion.
@test "warm: a kernel whose record lists no lapic_timer_khz patch is told noapictimer" {
	local k m q line="" st
	k=$(cat "$ISOPOD_HOME/kernels/current")
	m=$ISOPOD_HOME/kernels/$k/meta.json
	jq -e '.inputs.patches_sha256["kernel-lapic-timer-khz.patch"] | type == "string"' "$m"
	cp -p "$m" "$BATS_TEST_TMPDIR/meta.json"
	jq 'del(.inputs.patches_sha256)' "$BATS_TEST_TMPDIR/meta.json" >"$m.tmp"
	mv -f "$m.tmp" "$m"
	boot_vm --cold
	st=$status
	if [ "$st" -eq 0 ]; then
		q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
		line=$(tr '\0' ' ' <"/proc/$q/cmdline")
		stop_vm "$vm"
	fi
	cp -p "$BATS_TEST_TMPDIR/meta.json" "$m.tmp"
	mv -f "$m.tmp" "$m"
	[ "$st" -eq 0 ]
	json_is '.path == "cold"'
	[ "$(jq -r .accel <<<"$output")" = tcg ] ||
		skip "KVM: its guests have the TSC-deadline timer, their line has neither word"
	echo "line: $line"
	[[ "$line" == *" noapictimer "* ]]
	[[ "$line" != *lapic_timer_khz* ]]
	# with the record back, the same store's next VM is told the rate
	boot_vm --cold
	[ "$status" -eq 0 ]
	q=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	line=$(tr '\0' ' ' <"/proc/$q/cmdline")
	stop_vm "$vm"
	[[ "$line" == *" lapic_timer_khz=1000000 "* ]]
	[[ "$line" != *noapictimer* ]]
}

@test "warm: two resumed VMs differ in hostname and /dev/urandom; the clock is the host's" {
	cmd='hostname; head -c16 /dev/urandom | od -An -tx1 | tr -d " \n"; echo; date +%s'
	run --separate-stderr isopod run --json-only -- sh -c "$cmd"
	[ "$status" -eq 0 ]
	json_is '.path == "warm"'
	a=$output
	host_now=$(date +%s)
	run --separate-stderr isopod run --json-only -- sh -c "$cmd"
	[ "$status" -eq 0 ]
	json_is '.path == "warm"'
	b=$output
	[ "$(jq -r .stdout <<<"$a" | sed -n 1p)" = "$(jq -r .vm.name <<<"$a")" ]
	[ "$(jq -r .stdout <<<"$b" | sed -n 1p)" = "$(jq -r .vm.name <<<"$b")" ]
	[ "$(jq -r .vm.name <<<"$a")" != "$(jq -r .vm.name <<<"$b")" ]
	ra=$(jq -r .stdout <<<"$a" | sed -n 2p)
	rb=$(jq -r .stdout <<<"$b" | sed -n 2p)
	[ ${#ra} -eq 32 ] && [ ${#rb} -eq 32 ] || false
	[ "$ra" != "$rb" ]
	# the snapshot's clock is minutes old by now; the resumed guest's is not
	ta=$(jq -r .stdout <<<"$a" | sed -n 3p)
	d=$((ta - host_now))
	[ "${d#-}" -le 5 ]
}

@test "warm: 6 concurrent runs of a new shape: exactly one build, all 6 succeed, no leftovers" {
	pids=""
	for i in 1 2 3 4 5 6; do
		isopod run --json-only --mem-mib 320 -- sh -c "echo $i" > "$DATA/c$i.json" 2> "$DATA/c$i.err" &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p"; done
	for i in 1 2 3 4 5 6; do
		jq -e --arg i "$i" '.ok == true and .exit_code == 0 and .stdout == "\($i)\n"' "$DATA/c$i.json"
	done
	[ "$(cat "$DATA"/c?.json | jq -s 'map(select(.path == "snapshot-build")) | length')" -eq 1 ]
	[ "$(cat "$DATA"/c?.json | jq -s 'map(select(.path == "warm")) | length')" -eq 5 ]
	[ "$(isopod-warm ls | jq -s 'map(select(.shape.mem_mib == 320)) | length')" -eq 1 ]
	key=$(key_of 320)
	[ "$(isopod-warm ls | jq --arg k "$key" 'select(.key == $k) | .hits')" -eq 5 ]
	# nothing but whole snapshots and their lock files
	[ -z "$(ls -A "$(W)" | grep -vE '^[0-9a-f]{64}(\.lock)?$|^(qemu-version|argv)\.json$')" ]
	[ -z "$(find "$ISOPOD_HOME/vms" -name 'tpl' -o -name 'tpl-*' -o -name '*.pristine')" ]
}

@test "warm: a truncated or overwritten state file is refused, retired, and the run boots cold with a warning" {
	boot_vm --mem-mib 336
	[ "$status" -eq 0 ]
	json_is '.path == "snapshot-build" and .build_ms > 0'
	stop_vm "$vm"
	key=$(key_of 336)
	# truncated
	truncate -s 1000 "$(W)/$key/state"
	boot_vm --mem-mib 336
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings | length) == 1'
	json_is '.warnings[0] | test("refused: its state file is 1000 bytes.*retired, booted cold")'
	[[ "$stderr" == *"refused"* ]]
	run isopod-exec --vm "$vm" -- true
	[ "$status" -eq 0 ]
	stop_vm "$vm"
	[ ! -e "$(W)/$key" ]
	[ -z "$(key_of 336)" ]
	# the next run rebuilds it
	boot_vm --mem-mib 336
	json_is '.path == "snapshot-build" and .warnings == []'
	stop_vm "$vm"
	# same size, other bytes
	key=$(key_of 336)
	printf 'XXXXXXXXXXXXXXXX' | dd of="$(W)/$key/state" bs=1 seek=4000 conv=notrunc status=none
	boot_vm --mem-mib 336
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("does not match its sha256"))'
	stop_vm "$vm"
	[ ! -e "$(W)/$key" ]
}

@test "warm: a modified memory file is refused; a state QEMU cannot load fails the resume: retired, cold" {
	boot_vm --mem-mib 344
	json_is '.path == "snapshot-build"'
	stop_vm "$vm"
	key=$(key_of 344)
	printf 'garbage' | dd of="$(W)/$key/mem" bs=4096 seek=1000 conv=notrunc status=none
	boot_vm --mem-mib 344
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("memory file was modified"))'
	stop_vm "$vm"
	[ ! -e "$(W)/$key" ]
	# a forged snapshot: the checks pass (its sha256 updated), QEMU refuses the state
	boot_vm --mem-mib 344
	json_is '.path == "snapshot-build"'
	stop_vm "$vm"
	key=$(key_of 344)
	head -c 20000 /dev/urandom | dd of="$(W)/$key/state" bs=1 seek=100 conv=notrunc status=none
	sha=$(sha256sum < "$(W)/$key/state" | cut -d' ' -f1)
	jq --arg s "$sha" '.state.sha256 = $s' "$(W)/$key/meta.json" > "$DATA/meta.json"
	cat "$DATA/meta.json" > "$(W)/$key/meta.json"
	boot_vm --mem-mib 344
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("failed to resume.*retired, booted cold"))'
	# the failed resume's QEMU log is kept beside the cold boot's
	[ -s "$ISOPOD_HOME/vms/$vm/qemu-resume.log" ]
	run isopod-exec --vm "$vm" -- sh -c 'hostname; cat /proc/uptime'
	[ "$status" -eq 0 ]
	stop_vm "$vm"
	[ ! -e "$(W)/$key" ]
	jq -e '.state == "stopped" and .path == "cold"' "$ISOPOD_HOME/vms/$vm/meta.json"
}

@test "warm: SIGKILL of the builder never leaves a usable half snapshot; gc reclaims the staging" {
	for point in warm-template warm-publish; do
		vm=$(isopod-claim | jq -er .vm.id)
		run env ISOPOD_TEST_KILL_AT=$point isopod-boot --vm "$vm" --owner-pid $$ --mem-mib 352
		[ "$status" -eq 137 ]
		staging=$(ls -d "$(W)"/.staging-* 2>/dev/null)
		[ -n "$staging" ]
		[ -z "$(key_of 352)" ]
		# the template QEMU died with its builder
		for _ in $(seq 1 50); do pgrep -f "$staging" > /dev/null || break; sleep 0.1; done
		! pgrep -f "$staging" || false
		# its jail's cgroup (named by the key and the store: lib/warm.h warm_tpl_name):
		# left by a builder killed with the template running, which never
		# reached jail_release; gc's sweep of the staging removes it
		k=${staging##*/.staging-}
		k=${k:0:32}
		cgs=$(find /sys/fs/cgroup -maxdepth 8 -type d -name "isopod-tpl-$k-*")
		echo "$point: $cgs" >&2
		if [ "$point" = warm-template ]; then [ -n "$cgs" ]; else [ -z "$cgs" ]; fi
		# published or not, the VM's disk lent to the template is 0600 again
		# once the template is built; killed while it ran, the disk is
		# still lent (0644) and the template's sockets' directory is left
		vdir=$ISOPOD_HOME/vms/$vm
		if [ "$point" = warm-template ]; then
			[ "$(stat -c %a "$vdir/disk.qcow2")" = 644 ] && [ -d "$vdir/tpl" ] || false
		else
			[ "$(stat -c %a "$vdir/disk.qcow2")" = 600 ] && [ ! -e "$vdir/tpl" ] || false
		fi
		# a dry run says so and changes nothing
		run --separate-stderr isopod-gc --dry-run
		[ "$status" -eq 0 ]
		if [ "$point" = warm-template ]; then
			jout --arg t "$vdir/tpl" --arg d "$vdir/disk.qcow2" \
				'[.leaked[] | select(.kind == "tpl" or .kind == "lent")] == [{kind: "lent", path: $d, removed: false}, {kind: "tpl", path: $t, removed: false}]'
			[ "$(stat -c %a "$vdir/disk.qcow2")" = 644 ] && [ -d "$vdir/tpl" ] || false
		fi
		# gc, the VM's lock free (its boot, the builder, is gone): the
		# disk back to 0600, the directory removed, each reported
		run --separate-stderr isopod-gc
		[ "$status" -eq 0 ]
		jout --arg p "$staging" '[.leaked[] | select(.kind == "warm" and .path == $p and .removed)] | length == 1'
		[ ! -e "$staging" ]
		[ "$(stat -c %a "$vdir/disk.qcow2")" = 600 ] && [ ! -e "$vdir/tpl" ] || false
		if [ "$point" = warm-template ]; then
			jout --arg t "$vdir/tpl" --arg d "$vdir/disk.qcow2" \
				'[.leaked[] | select(.kind == "tpl" or .kind == "lent")] == [{kind: "lent", path: $d, removed: true}, {kind: "tpl", path: $t, removed: true}]'
		else
			jout '[.leaked[] | select(.kind == "tpl" or .kind == "lent")] == []'
		fi
		[ -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "isopod-tpl-$k-*")" ]
		[ "$point" != warm-template ] || jout --arg t "tpl-$k-" '[.cgroups[] | select((.template // "" | startswith($t)) and .removed)] | length >= 1'
	done
	# the shape still works, and is built afresh
	run --separate-stderr isopod run --json-only --mem-mib 352 -- true
	[ "$status" -eq 0 ]
	json_is '.path == "snapshot-build"'
	run --separate-stderr isopod-gc --dry-run
	json_is '.leaked == [] and .warm_removed == []'
}

@test "warm: a run that waits for another's build boots cold with a warning when it never comes" {
	boot_vm --mem-mib 360
	json_is '.path == "snapshot-build"'
	stop_vm "$vm"
	key=$(key_of 360)
	run --separate-stderr isopod-warm rm "$key"
	[ "$status" -eq 0 ]
	# someone holds the key's build lock and never publishes
	flock -o "$(W)/$key.lock" sleep 30 >/dev/null 2>&1 3>&- &
	holder=$!
	held "$(W)/$key.lock"
	run --separate-stderr isopod-warm rm "$key"
	[ "$status" -eq 101 ]
	export ISOPOD_WARM_WAIT_MS=1500
	boot_vm --mem-mib 360
	unset ISOPOD_WARM_WAIT_MS
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("waited [0-9]+ ms for another run"))'
	stop_vm "$vm"
	kill "$holder"
	wait "$holder" || true
	# the holder lets go without publishing: the waiter says so and boots cold
	flock -o "$(W)/$key.lock" sleep 2 >/dev/null 2>&1 3>&- &
	holder=$!
	held "$(W)/$key.lock"
	boot_vm --mem-mib 360
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("the run that was building the warm snapshot .* failed"))'
	stop_vm "$vm"
	wait "$holder" || true
}

@test "warm: a template build that fails boots cold with a warning and leaves nothing behind" {
	# a qemu-img that refuses to make the template's overlay (in the staging dir)
	mkdir -p "$DATA/bin"
	printf '#!/bin/sh\ncase "$*" in *"/.staging-"*) echo "qemu-img: no" >&2; exit 1 ;; esac\nexec /usr/bin/qemu-img "$@"\n' > "$DATA/bin/qemu-img"
	chmod 755 "$DATA/bin/qemu-img"
	# (unjailed: this create runs in qemu-img's jail, which has no shell
	# for a script; the jailed create is the next test's)
	ISOPOD_JAIL=0 PATH="$DATA/bin:$PATH" boot_vm --mem-mib 392
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("warm snapshot .* not built: qemu-img create failed"))'
	[ -z "$(key_of 392)" ]
	[ -z "$(ls -A "$(W)" | grep -E '^\.(staging|retired)-')" ]
	run isopod-exec --vm "$vm" -- true
	[ "$status" -eq 0 ]
	stop_vm "$vm"
	# a template QEMU that leaves a file of its own in the staging directory
	# (jailed, the jail's uid could): nothing it made is published
	rm -f "$DATA/bin/qemu-img"
	printf '#!/bin/sh\nfor a in "$@"; do case $a in *mem-path=*/.staging-*) p=${a#*mem-path=}; : > "${p%%%%/mem,*}/leftover" ;; esac; done\nexec /usr/bin/qemu-system-x86_64 "$@"\n' > "$DATA/bin/qemu-system-x86_64"
	chmod 755 "$DATA/bin/qemu-system-x86_64"
	ISOPOD_JAIL=0 PATH="$DATA/bin:$PATH" boot_vm --mem-mib 416
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("warm snapshot .* not built: template: its QEMU left leftover in .*: not published"))'
	[ -z "$(key_of 416)" ]
	[ -z "$(ls -A "$(W)" | grep -E '^\.(staging|retired)-')" ]
	stop_vm "$vm"
	# a QEMU whose version cannot be read: no pool, a warning, a cold boot
	printf '#!/bin/sh\n[ "$1" = --version ] && exit 1\nexec /usr/bin/qemu-system-x86_64 "$@"\n' > "$DATA/bin/qemu-system-x86_64"
	chmod 755 "$DATA/bin/qemu-system-x86_64"
	# (unjailed: the jail runs binaries, not a script whose shell it lacks)
	ISOPOD_JAIL=0 PATH="$DATA/bin:$PATH" boot_vm --mem-mib 392
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and any(.warnings[]; test("warm pool not used: .*--version failed")) and (has("warm_key") | not)'
	stop_vm "$vm"
	rm -f "$DATA/bin/qemu-system-x86_64"
	# the owner exits while the snapshot is built: no VM, no template, no staging
	sleep 60 &
	owner=$!
	vm=$(isopod-claim | jq -er .vm.id)
	isopod-boot --vm "$vm" --owner-pid "$owner" --mem-mib 400 > "$DATA/boot.json" 2> "$DATA/boot.err" &
	boot=$!
	for _ in $(seq 1 100); do [ -z "$(ls -d "$(W)"/.staging-* 2>/dev/null)" ] || break; sleep 0.1; done
	staging=$(ls -d "$(W)"/.staging-*)
	kill "$owner"
	rc=0
	wait "$boot" || rc=$?
	[ "$rc" -eq 111 ]
	grep -q "owner" "$DATA/boot.err"
	[ ! -s "$DATA/boot.json" ]
	[ ! -e "$staging" ]
	! pgrep -f "$staging" || false
	jq -e '.state == "failed"' "$ISOPOD_HOME/vms/$vm/meta.json"
	! vm_locked "$vm" || false
}

@test "warm: the template's console.log keeps the first --console-max bytes, byte-exact; the rest is counted: meta.json and a warning say so" {
	# a template QEMU whose guest writes 300000 bytes to its console
	# (QEMU's fd 5) before it boots; TPL_EXIT: then fails, its logs kept
	mkdir -p "$DATA/con"
	cat >"$DATA/con/qemu-system-x86_64" <<-'EOF'
	#!/bin/sh
	for a in "$@"; do
		case $a in
		*mem-path=*/.staging-*)
			seq 1 200000 | head -c 300000 >&5
			[ -z "${TPL_EXIT-}" ] || exit 1
			;;
		esac
	done
	exec /usr/bin/qemu-system-x86_64 "$@"
	EOF
	chmod 755 "$DATA/con/qemu-system-x86_64"
	# (unjailed: the jail runs binaries, not a script whose shell it lacks)
	ISOPOD_JAIL=0 PATH="$DATA/con:$PATH" boot_vm --mem-mib 448 --console-max 100000
	[ "$status" -eq 0 ]
	json_is '.path == "snapshot-build" and any(.warnings[]; test("the warm template.s console.log reached its cap of 100000 bytes .--console-max.: [0-9]+ bytes written"))'
	key=$(key_of 448)
	[ -n "$key" ]
	jq -e '.console_bytes >= 300000 and .console_log_truncated == true' "$(W)/$key/meta.json"
	stop_vm "$vm"
	# a build that fails keeps the template's console.log: the cap's bytes
	TPL_EXIT=1 ISOPOD_JAIL=0 PATH="$DATA/con:$PATH" boot_vm --mem-mib 456 --console-max 100000
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and any(.warnings[]; test("reached its cap of 100000 bytes .--console-max.: 300000 bytes written")) and any(.warnings[]; test("not built: template qemu exited"))'
	[ -z "$(key_of 456)" ]
	cmp "$ISOPOD_HOME/vms/$vm/template-console.log" <(seq 1 200000 | head -c 100000)
	stop_vm "$vm"
	rm -rf "$DATA/con"
}

# The template's `qemu-img create -b` opens the VM's disk's chain (stage
# layers jailed QEMUs wrote): it runs in qemu-img's jail (lib/qjail.c
# qjail_img).  The stand-in qemu-img is t/17's static probe under that name
# (t/30's): jailed, it says who runs it and whether it can write the store,
# and makes no image, so the template cannot boot and the run goes cold; run
# as root (boot's own overlay and grow, unjailed on purpose) it is the real
# qemu-img (IMGPROBE_REAL).
@test "warm: the template's qemu-img create runs as the jail's uid, no capabilities, no_new_privs, the store read-only" {
	local sb="$BATS_TEST_TMPDIR/imgbin" jail_uid
	mkdir -p "$sb"
	cp "$ISOPOD_SRC/build/jail/probe" "$sb/qemu-img"
	IMGPROBE_REAL=$(command -v qemu-img) IMGPROBE_WRITE=$ISOPOD_HOME PATH="$sb:$PATH" boot_vm --mem-mib 396
	echo "$stderr"
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and any(.warnings[]; test("warm snapshot .* not built"))'
	[ "$(grep -c '^imgprobe ' <<<"$stderr")" -eq 1 ]
	grep -q '^imgprobe create ' <<<"$stderr"
	jail_uid=$(sed -n 's/^imgprobe .* uid=\([0-9]*\) .*/\1/p' <<<"$stderr")
	[ "$jail_uid" -ge 2013265920 ] && [ "$jail_uid" -le 2013331455 ] || false
	grep '^imgprobe ' <<<"$stderr" | grep -q 'CapEff=0000000000000000 NoNewPrivs=1 store=EROFS$'
	[ -z "$(find "$ISOPOD_HOME" -maxdepth 1 -name '.probe-*')" ]
	[ -z "$(key_of 396)" ]
	[ -z "$(ls -A "$(W)" | grep -E '^\.(staging|retired)-')" ]
	stop_vm "$vm"
}

# The template's QEMU boots on the VM's disk chain (stage layers guests'
# QEMUs wrote; its block layer parses their headers): it runs in the jail
# every VM's QEMU gets (lib/warmtpl.c tpl_start).  ISOPOD_TEST_PAUSE_AT=
# warm-template stops isopod-boot once the template's agent has answered,
# the template still running, to look at it; with the jail off it is root's.
@test "warm: the template's QEMU runs jailed (not root, no_new_privs, no capabilities, its own pid and net namespaces, only its files); meta.json says so; ISOPOD_JAIL=0: root's" {
	local boot q f k r h st uid cg
	vm=$(isopod-claim | jq -er .vm.id)
	ISOPOD_TEST_PAUSE_AT=warm-template isopod-boot --vm "$vm" --owner-pid $$ --mem-mib 404 \
		>"$BATS_TEST_TMPDIR/boot.json" 2>"$BATS_TEST_TMPDIR/boot.err" &
	boot=$!
	for _ in $(seq 1 600); do
		[ "$(awk '{ print $3 }' "/proc/$boot/stat" 2>/dev/null)" = T ] && break
		sleep 0.1
	done
	q=$(pgrep -f -- "$(W)/\.staging-" || :)
	st=0
	if [ -z "$q" ] || [ "$(wc -w <<<"$q")" -ne 1 ]; then
		echo "no one template qemu: '$q'" >&2
		st=1
	else
		f=/proc/$q/status r=/proc/$q/root h=$(realpath "$ISOPOD_HOME")
		cat "$f" >&2
		awk '$1 == "Uid:" || $1 == "Gid:" { for (i = 2; i <= 5; i++) if ($i == 0) bad = 1 }
			END { exit bad }' "$f" || st=1
		uid=$(awk '$1 == "Uid:" { print $2 }' "$f")
		grep -q '^NoNewPrivs:[[:space:]]*1$' "$f" || st=1
		grep -q '^CapEff:[[:space:]]*0*$' "$f" && grep -q '^CapBnd:[[:space:]]*0*$' "$f" || st=1
		[ "$(readlink "/proc/$q/ns/net")" != "$(readlink /proc/self/ns/net)" ] || st=1
		[ "$(readlink "/proc/$q/ns/pid")" != "$(readlink /proc/self/ns/pid)" ] || st=1
		grep -q "^NSpid:[[:space:]]*${q}[[:space:]]*1$" "$f" || st=1
		# its root: of the VM's directory only the disk (read-only) and
		# the sockets' directory; no other VM, no snapshot but its staging
		ls -A "$r$h/vms/$vm" >&2 || :
		[ "$(ls -A "$r$h/vms" 2>/dev/null)" = "$vm" ] || st=1
		[ "$(ls -A "$r$h/vms/$vm" 2>/dev/null | tr '\n' ' ')" = "disk.qcow2 tpl " ] || st=1
		[ "$(ls -A "$r$h/warm" 2>/dev/null | grep -c .)" -eq 1 ] || st=1
		cg=$(awk -F: '$2 ~ /(^|,)pids(,|$)/ || $1 == "0" { print $3 }' "/proc/$q/cgroup")
		echo "cgroups: $cg" >&2
		grep -q '/isopod-tpl-[0-9a-f]\{32\}-[0-9a-f]\{16\}$' <<<"$cg" || st=1
	fi
	kill -CONT "$boot"
	wait "$boot" || st=1
	cat "$BATS_TEST_TMPDIR/boot.err"
	[ "$st" -eq 0 ]
	jq -e '.path == "snapshot-build"' "$BATS_TEST_TMPDIR/boot.json"
	k=$(key_of 404)
	jq -e --argjson u "$uid" '.template_jail | .enabled == true and .uid == $u and .no_new_privs and
		.capabilities == [] and (.namespaces | index("pid") and index("net")) and
		.cgroup.memory_bytes > 0 and .cgroup.pids > 0' "$(W)/$k/meta.json"
	# after the build: the sockets' directory is gone, the template's
	# cgroup too; the snapshot's files are root's
	[ ! -e "$ISOPOD_HOME/vms/$vm/tpl" ]
	[ -z "$(find /sys/fs/cgroup -maxdepth 8 -type d -name "isopod-tpl-${k:0:32}-*")" ]
	[ -z "$(find "$(W)/$k" ! -user 0)" ]
	stop_vm "$vm"
	# the control: the jail off, the template runs as root, and says so
	vm=$(isopod-claim | jq -er .vm.id)
	ISOPOD_JAIL=0 ISOPOD_TEST_PAUSE_AT=warm-template isopod-boot --vm "$vm" --owner-pid $$ \
		--mem-mib 412 >"$BATS_TEST_TMPDIR/boot.json" 2>"$BATS_TEST_TMPDIR/boot.err" &
	boot=$!
	for _ in $(seq 1 600); do
		[ "$(awk '{ print $3 }' "/proc/$boot/stat" 2>/dev/null)" = T ] && break
		sleep 0.1
	done
	q=$(pgrep -f -- "$(W)/\.staging-" || :)
	uid=$(awk '$1 == "Uid:" { print $2 }' "/proc/$q/status" 2>/dev/null || :)
	kill -CONT "$boot"
	wait "$boot"
	[ "$uid" = 0 ]
	jq -e '.template_jail == {"enabled": false, "why": "ISOPOD_JAIL=0"}' "$(W)/$(key_of 412)/meta.json"
	stop_vm "$vm"
}

@test "warm: a stage chain forked with isopod-fork resumes with the stage's files visible; removing the stage orphans it" {
	run --separate-stderr isopod run --json-only --commit-as warmstage -- sh -c 'echo staged > /root/f'
	[ "$status" -eq 0 ]
	st=$(echo "$output" | jq -r .commit.stage.id)
	for expect in snapshot-build warm; do
		isopod-fork --vm "$(isopod-claim | jq -er .vm.id)" --stage warmstage > "$DATA/fork.json"
		vm=$(jq -r .vm.id "$DATA/fork.json")
		run --separate-stderr isopod-boot --vm "$vm" --owner-pid $$
		[ "$status" -eq 0 ]
		jout --arg p "$expect" '.path == $p'
		jail_check "$vm" # a fork of a stage, its chain in the jail read-only
		run --separate-stderr isopod-exec --vm "$vm" -- sh -c 'cat /root/f; echo more >> /root/f; cat /root/f'
		[ "$status" -eq 0 ]
		json_is '.stdout == "staged\nstaged\nmore\n"'
		stop_vm "$vm"
	done
	key=$(isopod-warm ls | jq -r --arg s "$st" 'select(.shape.layers == [$s]) | .key')
	[ -n "$key" ]
	# a chain one stage longer is another shape: built afresh, both layers' files seen
	run --separate-stderr isopod run --json-only --stage warmstage --commit-as warmstage2 -- sh -c 'echo second > /root/g'
	[ "$status" -eq 0 ]
	st2=$(echo "$output" | jq -r .commit.stage.id)
	for expect in snapshot-build warm; do
		isopod-fork --vm "$(isopod-claim | jq -er .vm.id)" --stage warmstage2 > "$DATA/fork.json"
		vm=$(jq -r .vm.id "$DATA/fork.json")
		run --separate-stderr isopod-boot --vm "$vm" --owner-pid $$
		jout --arg p "$expect" '.path == $p'
		run --separate-stderr isopod-exec --vm "$vm" -- cat /root/f /root/g
		json_is '.exit_code == 0 and .stdout == "staged\nsecond\n"'
		stop_vm "$vm"
	done
	jq -e --arg a "$st" --arg b "$st2" '.shape.layers == [$a, $b]' "$(W)/$(jq -r .warm_key "$ISOPOD_HOME/vms/$vm/meta.json")/meta.json"
	# a record whose layers disagree with the disk's real backing chain is never resumed
	isopod-fork --vm "$(isopod-claim | jq -er .vm.id)" --stage warmstage2 > "$DATA/fork.json"
	vm=$(jq -r .vm.id "$DATA/fork.json")
	jq --arg s "$st" '.layers = [$s]' "$ISOPOD_HOME/vms/$vm/meta.json" > "$DATA/rec.json"
	cat "$DATA/rec.json" > "$ISOPOD_HOME/vms/$vm/meta.json"
	run --separate-stderr isopod-boot --vm "$vm" --owner-pid $$
	[ "$status" -eq 0 ]
	json_is '.path == "cold" and (.warnings[0] | test("backing chain .* is not the one its record names"))'
	run --separate-stderr isopod-exec --vm "$vm" -- cat /root/g
	json_is '.stdout == "second\n"'
	stop_vm "$vm"
	# the front end's --stage takes the same snapshot
	run --separate-stderr isopod run --json-only --stage warmstage -- cat /root/f
	json_is '.path == "warm" and .stdout == "staged\n"'
	run --separate-stderr isopod stage rm --recursive warmstage
	[ "$status" -eq 0 ]
	run --separate-stderr isopod-warm ls
	jout -s --arg k "$key" --arg s "$st" '.[] | select(.key == $k) | .orphaned and any(.orphaned_by[]; . == "stage \($s) was removed")'
	run --separate-stderr isopod-gc
	jout --arg k "$key" '[.warm_removed[] | select(.key == $k)] | length == 1'
	[ ! -e "$(W)/$key" ]
}

@test "warm: another kernel or base makes snapshots orphaned: never resumed, swept by gc" {
	run --separate-stderr isopod run --json-only --mem-mib 368 -- true
	json_is '.path == "snapshot-build"'
	old=$(key_of 368)
	ksha=$(cat "$ISOPOD_HOME/kernels/current")
	# a new kernel: same files, another content address
	new=$(echo "new $ksha" | sha256sum | cut -c1-64)
	mkdir "$ISOPOD_HOME/kernels/$new"
	ln "$ISOPOD_HOME/kernels/$ksha/vmlinux" "$ISOPOD_HOME/kernels/$ksha/initramfs.cpio" "$ISOPOD_HOME/kernels/$new/"
	# its record too: a boot wants the agent protocol stamp (lib/image.c)
	cp "$ISOPOD_HOME/kernels/$ksha/meta.json" "$ISOPOD_HOME/kernels/$new/"
	echo "$new" > "$ISOPOD_HOME/kernels/current"
	run --separate-stderr isopod-warm ls
	jout -s --arg k "$old" '.[] | select(.key == $k) | .orphaned and (.orphaned_by[0] | test("kernel .* is no longer current"))'
	run --separate-stderr isopod run --json-only --mem-mib 368 -- true
	json_is '.path == "snapshot-build"'
	[ "$(isopod-warm ls | jq -s 'map(select(.shape.mem_mib == 368)) | length')" -eq 2 ]
	run --separate-stderr isopod-gc --dry-run
	jout --arg k "$old" '([.warm_removed[] | select(.key == $k)] | length == 1) and .leaked == []'
	[ -d "$(W)/$old" ]
	run --separate-stderr isopod-gc
	jout --arg k "$old" 'any(.warm_removed[]; .key == $k)'
	[ ! -e "$(W)/$old" ]
	# nothing uses the first kernel any more (its snapshots swept): pruned;
	# registering the images again brings it back
	jout --arg k "$ksha" '[.kernels_removed[].sha256] == [$k]'
	[ ! -e "$ISOPOD_HOME/kernels/$ksha" ]
	# (the base flavor: the kernel is what comes back; debian is registered
	# already, and hashing its 3.2 GB again would change nothing)
	ISOPOD_FLAVORS=base sh "$ISOPOD_SRC/images/register" "$ISOPOD_HOME" >/dev/null
	[ -f "$ISOPOD_HOME/kernels/$ksha/vmlinux" ]
	# back to the first kernel: the other one's snapshot is orphaned now
	echo "$ksha" > "$ISOPOD_HOME/kernels/current"
	rm -rf "$ISOPOD_HOME/kernels/$new"
	run --separate-stderr isopod-warm ls
	jout -s --arg k "$ksha" 'map(select(.shape.kernel != $k)) | length > 0 and all(.[]; .orphaned and (.orphaned_by[0] | test("was removed")))'
	# a base that is no longer the current one orphans plain-chain snapshots
	bsha=$(cat "$ISOPOD_HOME/images/current-base")
	echo 0000000000000000000000000000000000000000000000000000000000000000 > "$ISOPOD_HOME/images/current-base"
	run --separate-stderr isopod-warm ls
	jout -s 'map(select(.shape.layers == [])) | length > 0 and all(.[]; .orphaned and (.orphaned_by | map(test("no longer the current base image")) | any))'
	echo "$bsha" > "$ISOPOD_HOME/images/current-base"
	run --separate-stderr isopod-gc
	[ "$status" -eq 0 ]
	[ -z "$(isopod-warm ls | jq -r 'select(.orphaned) | .key')" ]
}

@test "warm: isopod-warm rm KEY|--orphaned|--all, and its refusals" {
	run --separate-stderr isopod-warm
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-warm rm
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-warm rm --all 0123
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-warm rm XYZ
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-warm rm 0000000000000000000000000000000000000000000000000000000000000000
	[ "$status" -eq 101 ]
	[[ "$stderr" == *"no such warm snapshot"* ]]
	run --separate-stderr isopod-warm frobnicate
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-warm -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: isopod-warm ls"* ]]
	run --separate-stderr isopod run --json-only --mem-mib 376 -- true
	run --separate-stderr isopod run --json-only --mem-mib 384 -- true
	key=$(key_of 376)
	[ -n "$key" ]
	# a unique prefix names it; a held lock makes it busy (102): named keys
	# are all or nothing, so the free one named with it stays too; stdout
	# empty, the diagnostic last (the failure contract)
	flock -o "$(W)/$key.lock" sleep 30 >/dev/null 2>&1 3>&- &
	holder=$!
	held "$(W)/$key.lock"
	run --separate-stderr isopod-warm rm "${key:0:12}" "$(key_of 384)"
	[ "$status" -eq 102 ]
	[ -z "$output" ]
	[[ "${stderr##*$'\n'}" == "isopod-warm: fatal: warm snapshot $key is being built or retired (1 of the 2 named are busy); nothing removed" ]]
	[ -d "$(W)/$key" ] && [ -d "$(W)/$(key_of 384)" ] || false
	kill "$holder"
	wait "$holder" || true
	run --separate-stderr isopod-warm rm "${key:0:12}"
	[ "$status" -eq 0 ]
	jout --arg k "$key" '.removed == [$k] and .reclaimed_bytes > 0'
	[ ! -e "$(W)/$key" ] && [ ! -e "$(W)/$key.lock" ] || false
	run --separate-stderr isopod-warm rm --orphaned
	[ "$status" -eq 0 ]
	json_is '.removed == []'
	[ -n "$(key_of 384)" ]
	run --separate-stderr isopod-warm rm --all
	[ "$status" -eq 0 ]
	json_is '(.removed | length) > 0 and .busy == []'
	[ -z "$(isopod-warm ls)" ]
	[ -z "$(ls -A "$(W)" | grep -vE '^(qemu-version|argv)\.json$')" ]
}

@test "warm, networked: clones of one --net open snapshot each take their own slot's MAC, address, route, name and RNG, and reach gateway and internet" {
	net_lab
	run --separate-stderr vrun --net open --mem-mib 424 --timeout-s 120 -- sh -c "$NETID"
	[ "$status" -eq 0 ]
	json_is '.path == "snapshot-build" and .warnings == ["allow_range 198.51.100.0/24 (\($ENV.LAB_CONF)): this host lets guests reach a range the deny list blocks by default"]'
	net_identity
	a=$output
	# the next runs take other slots: the lock of each slot used is held
	hold_slot "$(jq -r .net.slot <<<"$a")"
	run --separate-stderr vrun --net open --mem-mib 424 --timeout-s 120 -- sh -c "$NETID"
	[ "$status" -eq 0 ]
	json_is '.path == "warm" and .warnings == ["allow_range 198.51.100.0/24 (\($ENV.LAB_CONF)): this host lets guests reach a range the deny list blocks by default"]'
	net_identity
	b=$output
	hold_slot "$(jq -r .net.slot <<<"$b")"
	run --separate-stderr vrun --net open --mem-mib 424 --timeout-s 120 -- sh -c "$NETID"
	release_slots
	[ "$status" -eq 0 ]
	json_is '.path == "warm" and .warnings == ["allow_range 198.51.100.0/24 (\($ENV.LAB_CONF)): this host lets guests reach a range the deny list blocks by default"]'
	net_identity
	c=$output
	# one snapshot, three slots, three identities
	[ "$(jq -r .warm_key <<<"$a")" = "$(jq -r .warm_key <<<"$b")" ]
	[ "$(jq -r .warm_key <<<"$b")" = "$(jq -r .warm_key <<<"$c")" ]
	[ "$(printf '%s\n' "$a" "$b" "$c" | jq -r .net.slot | sort -u | wc -l)" -eq 3 ]
	for p in "addr " "mac " "rand " "gw "; do
		[ "$(line "$b" "$p")" != "$(line "$c" "$p")" ]
		[ "$(line "$a" "$p")" != "$(line "$b" "$p")" ]
	done
	[ "$(jq -r .vm.name <<<"$b")" != "$(jq -r .vm.name <<<"$c")" ]
	run --separate-stderr isopod-warm ls
	jout -s --arg k "$(jq -r .warm_key <<<"$a")" '.[] | select(.key == $k) | .shape.net == "open" and .hits == 2 and .orphaned == false'
}

@test "warm, networked: a --net none snapshot never serves a networked run, nor the reverse" {
	net_lab
	local k_none k_open expect
	for expect in snapshot-build warm; do
		run --separate-stderr vrun --net none --mem-mib 432 --timeout-s 120 -- \
			sh -c 'ip link show eth0 >/dev/null 2>&1 && echo eth0; echo done'
		[ "$status" -eq 0 ]
		jout --arg p "$expect" '.path == $p and .stdout == "done\n" and .net.mode == "none"'
		k_none=$(jq -r .warm_key <<<"$output")
		run --separate-stderr vrun --net open --mem-mib 432 --timeout-s 120 -- \
			sh -c 'ip link show eth0 >/dev/null 2>&1 && echo eth0; echo done'
		[ "$status" -eq 0 ]
		jout --arg p "$expect" '.path == $p and .stdout == "eth0\ndone\n" and .net.mode == "open"'
		k_open=$(jq -r .warm_key <<<"$output")
		[ "$k_none" != "$k_open" ]
	done
	run --separate-stderr isopod-warm ls
	jout -s --arg k "$k_none" '.[] | select(.key == $k) | .shape.net == "none" and .hits == 1'
	jout -s --arg k "$k_open" '.[] | select(.key == $k) | .shape.net == "open" and .hits == 1'
	# the net mode is in the key's text by name
	jq -e '.key_text | test("\nnet none\n")' "$(W)/$k_none/meta.json"
	jq -e '.key_text | test("\nnet open\n") and test("ifname=@tap") and test("mac=@mac")' "$(W)/$k_open/meta.json"
}

@test "warm: gc keeps the pool within its byte budget, least recently used first, never a snapshot a running VM was resumed from, nor one a boot is resuming" {
	boot_vm --mem-mib 392
	[ "$status" -eq 0 ]
	busy=$(jq -r .warm_key <<<"$output")
	[ -d "$(W)/$busy" ]
	for m in 400 408; do
		run --separate-stderr isopod run --json-only --mem-mib "$m" -- true
		[ "$status" -eq 0 ]
	done
	# 400's snapshot used longest ago (as a run would have left it)
	old=$(key_of 400)
	jq '.last_used = "2000-01-01T00:00:00Z"' "$(W)/$old/meta.json" >"$BATS_TEST_TMPDIR/m.json"
	cat "$BATS_TEST_TMPDIR/m.json" >"$(W)/$old/meta.json"
	run --separate-stderr isopod-gc --dry-run --warm-budget off
	json_is '.warm_evicted == [] and .policy.warm_budget == null and .warm_bytes > 0'
	total=$(jq -r .warm_bytes <<<"$output")
	lru=$(isopod-warm ls | jq -rs --arg b "$busy" 'map(select(.key != $b and (.orphaned | not))) | sort_by(.last_used // .created, .key) | .[0].key')
	[ "$lru" = "$old" ]
	run --separate-stderr isopod-gc --dry-run --warm-budget $((total - 1))
	jout --arg k "$lru" '[.warm_evicted[].key] == [$k] and .dry_run'
	[ -d "$(W)/$lru" ]
	# budget 0: every snapshot goes but the one the running VM's RAM is
	run --separate-stderr isopod-gc --warm-budget 0
	[ "$status" -eq 0 ]
	jout --arg b "$busy" '(.warm_evicted | length) >= 1 and all(.warm_evicted[]; .key != $b and .bytes > 0) and .warm_bytes > 0'
	[ -d "$(W)/$busy" ]
	[ -z "$(isopod-warm ls | jq -r --arg b "$busy" 'select(.key != $b) | .key')" ]
	run --separate-stderr isopod-exec --vm "$vm" -- echo alive
	json_is '.stdout == "alive\n"'
	stop_vm "$vm"
	# a boot about to resume it (stopped at its pause point, the key's lock
	# held shared, its record not naming the key yet): never evicted
	vm2=$(isopod-claim | jq -er .vm.id)
	ISOPOD_TEST_PAUSE_AT=warm-resume isopod-boot --vm "$vm2" --owner-pid $$ --mem-mib 392 \
		>"$BATS_TEST_TMPDIR/b2.json" 2>"$BATS_TEST_TMPDIR/b2.err" 3>&- &
	bp=$!
	wait_paused "$bp"
	run --separate-stderr isopod-gc --warm-budget 0
	kill -CONT "$bp"
	wait "$bp"
	jout --arg b "$busy" 'all(.warm_evicted[]; .key != $b)'
	[ -d "$(W)/$busy" ]
	jq -e --arg b "$busy" '.path == "warm" and .warm_key == $b' "$BATS_TEST_TMPDIR/b2.json"
	stop_vm "$vm2"
	# a gc that read the records before a boot resumed from it (the gc
	# stopped after reading them): under the key's lock it reads them again
	vm3=$(isopod-claim | jq -er .vm.id)
	ISOPOD_TEST_PAUSE_AT=gc-records isopod-gc --warm-budget 0 >"$BATS_TEST_TMPDIR/gc.json" \
		2>"$BATS_TEST_TMPDIR/gc.err" 3>&- &
	gp=$!
	wait_paused "$gp"
	rc=0
	isopod-boot --vm "$vm3" --owner-pid $$ --mem-mib 392 >"$BATS_TEST_TMPDIR/b3.json" \
		2>"$BATS_TEST_TMPDIR/b3.err" 3>&- || rc=$?
	kill -CONT "$gp"
	wait "$gp"
	[ "$rc" -eq 0 ]
	jq -e --arg b "$busy" '.path == "warm" and .warm_key == $b' "$BATS_TEST_TMPDIR/b3.json"
	jq -e --arg b "$busy" 'all(.warm_evicted[]; .key != $b)' "$BATS_TEST_TMPDIR/gc.json"
	[ -d "$(W)/$busy" ]
	stop_vm "$vm3"
	run --separate-stderr isopod-gc --warm-budget 0
	jout --arg b "$busy" '[.warm_evicted[].key] == [$b] and .warm_bytes == 0'
	# the budget from the config file; a bad one names file and line
	printf 'warm_budget = lots\n' >"$BATS_TEST_TMPDIR/config"
	ISOPOD_CONFIG="$BATS_TEST_TMPDIR/config" run --separate-stderr isopod-gc --dry-run
	[ "$status" -eq 100 ] && [[ "$stderr" == *"config:1: warm_budget lots"* ]] || false
	printf 'warm_budget = 1G\n' >"$BATS_TEST_TMPDIR/config"
	ISOPOD_CONFIG="$BATS_TEST_TMPDIR/config" run --separate-stderr isopod-gc --dry-run
	json_is '.policy.warm_budget == 1073741824'
}

# A plain run's clone has its root drive's flushes dropped (cache.no-flush=on,
# lib/qemu.h qemu_vm no_flush, as t/20's cold run) and still resumes from a
# template whose QEMU had no such option (the guest cannot see it); a --keep
# clone has none.  Bounded waits, no timing asserted.
@test "warm: a plain run's clone has cache.no-flush=on on its root drive and resumes; a --keep clone has none" {
	local id qpid bg st=0 idf=$BATS_TEST_TMPDIR/vm.id
	run --separate-stderr isopod run --json-only --keep --net none -- true
	[ "$status" -eq 0 ]
	json_is '.path == "warm" or .path == "snapshot-build"'
	id=$(echo "$output" | jq -er .vm.id)
	qpid=$(jq -er .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -qx -- 'defer'
	! tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -q 'no-flush' || false
	isopod vm rm --force "$id" >/dev/null
	ISOPOD_VM_ID_FD=5 isopod run --json-only --net none -- sleep 60 5>"$idf" >/dev/null 2>&1 &
	bg=$!
	await_running "$idf"
	[ -n "$qpid" ] && tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -qx -- 'defer' || st=1
	tr '\0' '\n' <"/proc/$qpid/cmdline" |
		grep -qx -- 'id=root,file=.*/disk\.qcow2,format=qcow2,.*,cache\.no-flush=on' || st=1
	jq -e '.path == "warm" and .no_flush == true' "$ISOPOD_HOME/vms/$id/meta.json" || st=1
	isopod-stop --force --vm "$id" >/dev/null || st=1
	wait "$bg" || :
	! vm_locked "$id" || st=1
	[ "$st" -eq 0 ]
}
