#!/usr/bin/env bats
# The run pool (issue 13 goal 2, isopod-pool(1)): VMs already resumed and
# warmed up, each serving ONE run, its stop off the run's path; bounded,
# idle ones expire, killed runs stop theirs, gc sweeps dead entries, off by
# configuration.  Real VM boots (TCG here), --net none.

load helpers

setup_file() {
	isopod_setup_file --images
	export ISOPOD_POOL_SIZE=1 ISOPOD_POOL_IDLE_S=120
}

teardown_file() {
	# no filler may boot behind the store's removal: wait for them, stop
	# every ready VM
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null || st=$?
	isopod_teardown_file || st=$?
	return "${st:-0}"
}

isopod() { "$ISOPOD_SRC/sh/isopod" "$@"; }

# a filler a test stopped (ISOPOD_TEST_PAUSE_AT) is not left behind by its failure
teardown() {
	[ ! -s "$BATS_TEST_TMPDIR/filler.pid" ] || kill -9 "$(cat "$BATS_TEST_TMPDIR/filler.pid")" 2>/dev/null || :
}

# ready_ids: the ready pooled VMs that run, one id a line.
ready_ids() { isopod-pool ls | jq -r 'select(.state == "ready" and .running) | .vm'; }

# wait_ready N: until N pooled VMs are ready (a filler started by a take).
wait_ready() {
	local i
	for i in $(seq 600); do
		[ "$(ready_ids | wc -l)" -lt "$1" ] || return 0
		sleep 0.1
	done
	echo "pool: not $1 ready; fill.log:" >&2
	cat "$ISOPOD_HOME"/pool/*/fill.log >&2 || :
	return 1
}

# fill: start a filler (a take finds nothing, or takes for nobody) and
# wait for one ready VM.
fill() {
	[ "$(ready_ids | wc -l)" -ge 1 ] || isopod-pool take --owner-pid $$ \
		--id-file "$BATS_TEST_TMPDIR/none" 2>/dev/null || :
	wait_ready 1
}

# stopped ID [SECONDS]: wait until the VM ID no longer runs.
stopped() {
	local i
	for i in $(seq $((${2:-10} * 10))); do
		[ "$(isopod-vm show "$1" | jq -r .running)" = false ] && return 0
		sleep 0.1
	done
	return 1
}

# shape_of [BOOT OPTION]...: $key, the shape of the boot options, and its
# directory, which a stand-in filler (ISOPOD_POOL) makes as the real one
# does once the options are checked; the take finds nothing (101).
shape_of() {
	local f="$BATS_TEST_TMPDIR/mkshape" k="$BATS_TEST_TMPDIR/key"
	rm -f "$k"
	printf '#!/bin/sh\numask 077\nmkdir -p "%s/pool/$3" && echo "$3" >"%s.tmp" && mv "%s.tmp" "%s"\n' \
		"$ISOPOD_HOME" "$k" "$k" "$k" >"$f"
	chmod +x "$f"
	ISOPOD_POOL=$f isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/none" "$@" 2>/dev/null || :
	for _ in $(seq 50); do [ -s "$k" ] && break; sleep 0.1; done
	key=$(cat "$k")
	[ -d "$ISOPOD_HOME/pool/$key" ]
}

# fake_pooled ID IDLE: a pooled VM without a VM: isopod-supervise with
# `sleep` for QEMU (no jail), confirmed, published as ready under the key
# of no boot options (shape_of).  $key and $sup (its supervisor's pid) are
# set.
fake_pooled() {
	local d="$ISOPOD_HOME/vms/$1" f="$BATS_TEST_TMPDIR/ctl.$1"
	mkdir -p "$d"
	echo "{\"id\":\"$1\",\"state\":\"running\",\"name\":\"n-$1\",\"pool_idle_s\":$2}" >"$d/meta.json"
	shape_of
	mkfifo "$f"
	# as a filler does: the VM's entry before its boot (its supervisor
	# finds its shape by it, pool_watch), ready once booted
	: >"$ISOPOD_HOME/pool/$key/filling-$1"
	echo "{\"vm\":\"$1\",\"dir\":\"$d\",\"qemu\":[\"/bin/sleep\",\"60\"],\"jail\":false,\"pool_idle_s\":$2}" |
		(exec 3>"$d/lock" && flock 3 && exec isopod-supervise 4<"$f" 5>/dev/null >/dev/null 2>&1) &
	sup=$!
	printf r >"$f"
	for _ in $(seq 50); do [ -e "$ISOPOD_HOME/pool/.own/$1.sock" ] && break; sleep 0.1; done
	echo "{\"vm\":{\"id\":\"$1\"},\"path\":\"warm\"}" >"$ISOPOD_HOME/pool/$key/ready-$1"
	rm -f "$ISOPOD_HOME/pool/$key/filling-$1"
}

@test "pool (no VM): a take hands the owner over once: the entry and socket go, a second take is refused, the owner's exit stops the VM" {
	fake_pooled vm-00000000000a 30
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 0 ]
	json_is '.path == "pool" and .vm.id == "vm-00000000000a"'
	[ "$(head -1 "$BATS_TEST_TMPDIR/id")" = vm-00000000000a ]
	[ ! -e "$ISOPOD_HOME/pool/$key/ready-vm-00000000000a" ]
	[ ! -e "$ISOPOD_HOME/pool/.own/vm-00000000000a.sock" ]
	jq -e ".pool_taken == true and .owner_pid == $owner and .keep == false" "$ISOPOD_HOME/vms/vm-00000000000a/meta.json"
	# forged back: the supervisor takes no second owner
	echo '{"vm":{"id":"vm-00000000000a"}}' >"$ISOPOD_HOME/pool/$key/ready-vm-00000000000a"
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id2"
	[ "$status" -eq 101 ]
	[ "$(isopod-vm show vm-00000000000a | jq -r .running)" = true ]
	kill -9 "$owner"
	stopped vm-00000000000a 5
	jq -e '.stopped_by == "owner" and .state == "stopped"' "$ISOPOD_HOME/vms/vm-00000000000a/meta.json"
}

@test "pool (no VM): a taker killed between its take and the hand-over leaves no VM running and no entry; one paused there gets no VM once its supervisor has ended it" {
	fake_pooled vm-000000000012 60
	sleep 60 &
	owner=$!
	ISOPOD_TEST_KILL_AT=pool-take ISOPOD_POOL=true run --separate-stderr \
		isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 137 ]
	[ ! -e "$BATS_TEST_TMPDIR/id" ]
	# ended within POOL_TAKE_MS of the take, not at pool_idle_s (60)
	stopped vm-000000000012 10
	jq -e '.stopped_by == "pool-orphan" and (.pool_taken | not)' "$ISOPOD_HOME/vms/vm-000000000012/meta.json"
	[ -z "$(find "$ISOPOD_HOME/pool" -name '*vm-000000000012*')" ]
	# paused there (SIGSTOP) past the supervisor's end of the VM: continued,
	# it gets no VM
	fake_pooled vm-000000000013 60
	ISOPOD_TEST_PAUSE_AT=pool-take ISOPOD_POOL=true isopod-pool take --owner-pid "$owner" \
		--id-file "$BATS_TEST_TMPDIR/id2" >"$BATS_TEST_TMPDIR/out2" 2>&1 &
	taker=$!
	stopped vm-000000000013 10
	jq -e '.stopped_by == "pool-orphan"' "$ISOPOD_HOME/vms/vm-000000000013/meta.json"
	kill -CONT "$taker"
	wait "$taker" && st=0 || st=$?
	[ "$st" -eq 101 ]
	[ ! -e "$BATS_TEST_TMPDIR/id2" ]
	kill "$owner"
}

@test "pool (no VM): take --scratch makes the run's directory as isopod-claim --scratch does; a take whose record update fails is refused and its VM stopped" {
	fake_pooled vm-000000000016 30
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --scratch
	[ "$status" -eq 0 ]
	local lines d
	mapfile -t lines <<<"$output"
	[ "${#lines[@]}" -eq 3 ]
	[ "${lines[0]}" = vm-000000000016 ] && [ "${lines[1]}" = n-vm-000000000016 ] || false
	d=${lines[2]}
	[ "$d" = "$ISOPOD_HOME/runs/vm-000000000016.$owner.$(awk '{print $22}' "/proc/$owner/stat")" ]
	[ "$(stat -c %a "$d")" = 700 ]
	jq -e '.path == "pool" and .vm.id == "vm-000000000016"' "$d/boot.json"
	kill "$owner"
	stopped vm-000000000016 5
	# its owner gone: gc removes the directory, as a claim's
	run isopod-gc
	json_is ".leaked | map(select(.kind == \"run\" and .removed) | .path) == [\"$d\"]"
	[ ! -e "$d" ]
	# the record no longer says running when the take updates it: refused
	fake_pooled vm-000000000017 30
	jq --argjson s "$sup" '.state = "stopping" | .supervisor_pid = $s' "$ISOPOD_HOME/vms/vm-000000000017/meta.json" >"$BATS_TEST_TMPDIR/m"
	mv "$BATS_TEST_TMPDIR/m" "$ISOPOD_HOME/vms/vm-000000000017/meta.json"
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --scratch
	echo "$status $output $stderr"
	[ "$status" -eq 111 ]
	[ -z "$output" ]
	[[ "$stderr" == *"the take refused, the VM stopped"* ]]
	# stopped now, not when its run (still alive) exits
	stopped vm-000000000017 5
	kill "$owner"
	[ -z "$(find "$ISOPOD_HOME/runs" -name 'vm-000000000017.*')" ]
}

@test "pool (no VM): a SIGTERM to the run's group as isopod-pool take reports: the report is finished, the front end removes what it names" {
	fake_pooled vm-00000000001a 30
	local pid cpid d
	# (setsid in the background: its pid is the group's, the one signalled)
	ISOPOD_POOL=true ISOPOD_TEST_PAUSE_AT=pool-report setsid "$ISOPOD_SRC/sh/isopod" run --json-only -- true \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	cpid=$(stopped_in_group "$pid" isopod-pool)
	[ -n "$cpid" ]
	# the take stopped between the run's directory and its report
	d=$(echo "$ISOPOD_HOME"/runs/vm-00000000001a."$pid".*)
	[ -d "$d" ]
	term_paused "$pid" "$cpid"
	[ ! -e "$d" ]
	# the VM was the run's: its supervisor stops it as the run exits
	stopped vm-00000000001a 5
	jq -e '.stopped_by == "owner"' "$ISOPOD_HOME/vms/vm-00000000001a/meta.json"
}

@test "pool (no VM): modes: pool/, pool/.own, the shape and the owner socket the store owner's alone; a take sends no owner to a socket of another uid (SO_PEERCRED)" {
	fake_pooled vm-000000000014 30
	[ "$(stat -c %a "$ISOPOD_HOME/pool")" = 700 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/.own")" = 700 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/$key")" = 700 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/.own/vm-000000000014.sock")" = 600 ]
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null
	stopped vm-000000000014 5
	# a listener of uid 65534 on an entry's socket path: bound as root,
	# listening as 65534 (SO_PEERCRED names the listener's creds); it
	# writes what it received
	local id=vm-000000000015 got="$BATS_TEST_TMPDIR/got"
	python3 -c '
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
out, ready = open(sys.argv[2], "wb"), open(sys.argv[3], "w")
os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
s.listen(4)
ready.close()
s.settimeout(10)
try:
    c, _ = s.accept()
    c.settimeout(3)
    d = c.recv(16)
    c.send(b"k")
except OSError:
    d = b""
out.write(d)
' "$ISOPOD_HOME/pool/.own/$id.sock" "$got" "$BATS_TEST_TMPDIR/listening" &
	py=$!
	for _ in $(seq 50); do [ -e "$BATS_TEST_TMPDIR/listening" ] && break; sleep 0.1; done
	echo "{\"vm\":{\"id\":\"$id\"}}" >"$ISOPOD_HOME/pool/$key/ready-$id"
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id"
	kill "$owner"
	wait "$py" || :
	echo "$output"
	[ "$status" -eq 101 ]
	[[ "$stderr" == *"is not our supervisor's"* ]]
	[ ! -s "$got" ]
	rm -f "$ISOPOD_HOME/pool/.own/$id.sock"
}

@test "pool (no VM): of concurrent takers exactly one gets the VM" {
	fake_pooled vm-00000000000b 30
	local pids=()
	sleep 60 &
	owner=$!
	for i in 1 2 3 4 5 6; do
		ISOPOD_POOL=true isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id$i" \
			>"$BATS_TEST_TMPDIR/t$i" 2>/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}" || :
	[ "$(cat "$BATS_TEST_TMPDIR"/t? | jq -s 'map(select(.vm.id == "vm-00000000000b")) | length')" -eq 1 ]
	kill "$owner"
	stopped vm-00000000000b 5
}

@test "pool (no VM): no owner within pool_idle_s: the supervisor stops the VM (pool-idle); gc sweeps the entry" {
	fake_pooled vm-00000000000c 1
	stopped vm-00000000000c 5
	jq -e '.stopped_by == "pool-idle"' "$ISOPOD_HOME/vms/vm-00000000000c/meta.json"
	[ ! -e "$ISOPOD_HOME/pool/.own/vm-00000000000c.sock" ]
	run isopod-gc --dry-run
	json_is '.pool_removed == [{key: .pool_removed[0].key, vm: "vm-00000000000c", removed: false}] and .leaked == []'
	run isopod-gc
	json_is '.pool_removed | map(select(.removed) | .vm) == ["vm-00000000000c"]'
	[ ! -e "$ISOPOD_HOME/pool/$key/ready-vm-00000000000c" ]
	rm -rf "$ISOPOD_HOME"/vms/vm-00000000000? "${ISOPOD_HOME:?}/pool/$key"
}

@test "pool (no VM): exec in a pooled VM no run has taken is refused (102, pooled), its filler's --pool-warm-up is not; after the take the run's exec is not" {
	fake_pooled vm-00000000000d 30
	run --separate-stderr isopod-exec --vm vm-00000000000d -- true
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"is a pooled VM no run has taken"* ]]
	json_is '.ok == false and .error_kind == "pooled"'
	# past the check (the fake has no agent: "not booted", also 102)
	run --separate-stderr isopod-exec --vm vm-00000000000d --pool-warm-up -- true
	[[ "$stderr" != *"no run has taken"* ]]
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 0 ]
	run --separate-stderr isopod-exec --vm vm-00000000000d -- true
	[[ "$stderr" != *"no run has taken"* ]]
	kill "$owner"
	stopped vm-00000000000d 5
}

@test "pool (no VM): the shape's key holds the host's jail setting and the caller's cgroups: a VM pooled under another is not taken" {
	fake_pooled vm-00000000000e 30
	# the host configuration turns the jail off: another shape
	printf 'jail = no\n' >"$BATS_TEST_TMPDIR/sysconfig"
	ISOPOD_SYSCONFIG="$BATS_TEST_TMPDIR/sysconfig" ISOPOD_POOL=true run --separate-stderr \
		isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id1"
	[ "$status" -eq 101 ]
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-00000000000e" ]
	# a run in another cgroup (a v1 pids one made here, or v2's): another shape
	local cg
	if [ -d /sys/fs/cgroup/pids ]; then cg=/sys/fs/cgroup/pids/isopod-t52-$$; else cg=/sys/fs/cgroup/isopod-t52-$$; fi
	mkdir "$cg"
	(echo "$BASHPID" >"$cg/cgroup.procs" && ISOPOD_POOL=true exec isopod-pool take --owner-pid $$ \
		--id-file "$BATS_TEST_TMPDIR/id2" >"$BATS_TEST_TMPDIR/out2" 2>/dev/null) && st=0 || st=$?
	rmdir "$cg"
	[ "$st" -eq 101 ]
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-00000000000e" ]
	# the control: the same shape takes it
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id3"
	[ "$status" -eq 0 ]
	kill "$owner"
	stopped vm-00000000000e 5
}

@test "pool (no VM): pool_max bounds the pooled VMs of every shape together: another shape's filler makes none past it" {
	fake_pooled vm-00000000000f 30
	local n k1
	n=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 | wc -l)
	# another shape (--mem-mib 300): nothing ready, its filler starts
	ISOPOD_POOL_MAX=1 run --separate-stderr isopod-pool take --owner-pid $$ \
		--id-file "$BATS_TEST_TMPDIR/id" --mem-mib 300
	[ "$status" -eq 101 ]
	for _ in $(seq 100); do
		k1=$(grep -l "pool_max 1 reached" "$ISOPOD_HOME"/pool/*/fill.log 2>/dev/null | head -1) && [ -n "$k1" ] && break
		sleep 0.1
	done
	[ -n "$k1" ]
	[ "$k1" != "$ISOPOD_HOME/pool/$key/fill.log" ]
	# no VM claimed for it; the one of the first shape is still ready
	[ "$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 | wc -l)" -eq "$n" ]
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-00000000000f" ]
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null
	stopped vm-00000000000f 5
}

@test "pool (no VM): a FIFO as a ready entry never blocks a take; isopod-supervise refuses --owner with a pooled spec" {
	shape_of
	mkfifo "$ISOPOD_HOME/pool/$key/ready-vm-000000000010"
	ISOPOD_POOL=true run --separate-stderr timeout 10 isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 101 ]
	rm -f "$ISOPOD_HOME/pool/$key/ready-vm-000000000010"
	run --separate-stderr isopod-supervise --owner 6<&0 <<<'{"vm":"vm-000000000011","dir":"/nonexistent","qemu":["/bin/true"],"jail":false,"pool_idle_s":5}' 3>/dev/null 4</dev/null 5>/dev/null
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"pooled VM gets its owner from its take"* ]]
}

# no_headroom TEXT: TEXT without the host's headroom, which moves between runs
no_headroom() { sed -E 's/\(host headroom[^)]*\)//g' <<<"$1"; }

@test "pool (no VM): a bad boot option value is refused as without the pool, at the same step (after exec's check): the take refuses what the host cannot hold (100), a filler checks a new shape before its directory; no directory, no VM" {
	local n v before st0 err0 out0 w="$BATS_TEST_TMPDIR/pool-wrap" ends="$BATS_TEST_TMPDIR/ends"
	n=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	before=$(find "$ISOPOD_HOME/pool" -mindepth 1 -maxdepth 1 -type d -name '[0-9a-f]*' 2>/dev/null | sort)
	# the filler as a take starts it, its exit status written down
	printf '#!/bin/sh\n"%s" "$@"; echo "$?" >>"%s"\n' "$ISOPOD_SRC/bin/isopod-pool" "$ends" >"$w"
	chmod +x "$w"
	for v in "--mem-mib abc" "--mem-mib 99999999" "--mem-mib 1" "--vcpus 9999" "--disk-mib 1" \
		"--mem-mib abc --stdin-file /nonexistent"; do
		# shellcheck disable=SC2086 # $v: the options, split
		ISOPOD_POOL_SIZE=0 run --separate-stderr isopod run $v -- true
		st0=$status err0=$(no_headroom "$stderr") out0=$(no_headroom "$(jq -c 'del(.timings)' <<<"$output")")
		# shellcheck disable=SC2086
		ISOPOD_POOL=$w run --separate-stderr isopod run $v -- true
		echo "$v: $status $stderr $output"
		[ "$st0" -eq 100 ] || false
		[ "$status" -eq "$st0" ]
		[ "$(no_headroom "$stderr")" = "$err0" ]
		[ "$(no_headroom "$(jq -c 'del(.timings)' <<<"$output")")" = "$out0" ]
	done
	# the take itself: the host's CPUs and memory refused as isopod-boot
	# --check refuses them (its words), nothing filled
	for v in "--mem-mib abc" "--mem-mib 99999999" "--mem-mib 1" "--vcpus 9999"; do
		# shellcheck disable=SC2086
		run --separate-stderr isopod-boot --check $v
		err0=$(no_headroom "${stderr#isopod-boot: fatal: }")
		# shellcheck disable=SC2086
		ISOPOD_POOL=$w run --separate-stderr isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id" $v
		[ "$status" -eq 100 ]
		[ "$(no_headroom "${stderr#isopod-pool: fatal: }")" = "$err0" ]
	done
	# --disk-mib 1 (the host's room is not the question): a take that finds
	# nothing, its filler started once (the run's take); it refused the
	# shape before making its directory
	run --separate-stderr isopod-boot --check --disk-mib 1
	[ "$status" -eq 100 ]
	for _ in $(seq 100); do [ -s "$ends" ] && break; sleep 0.1; done
	[ "$(cat "$ends")" = 0 ]
	[ "$(find "$ISOPOD_HOME/pool" -mindepth 1 -maxdepth 1 -type d -name '[0-9a-f]*' 2>/dev/null | sort)" = "$before" ]
	[ "$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -eq "$n" ]
}

@test "pool (no VM): a take refuses a ready VM the host could not hold now, as a cold run's check would (MemAvailable), and leaves it ready; the run is refused as without the pool" {
	fake_pooled vm-000000000018 30
	local mi="$BATS_TEST_TMPDIR/meminfo"
	# 256 MiB available: 192 of headroom, the default 512 MiB does not fit
	printf 'MemTotal:       4000000 kB\nMemAvailable:    262144 kB\n' >"$mi"
	ISOPOD_MEMINFO=$mi run --separate-stderr isopod-boot --check
	[ "$status" -eq 100 ]
	local err0=${stderr#isopod-boot: fatal: }
	[[ "$err0" == "default memory 512 MiB exceeds the host headroom"* ]]
	ISOPOD_MEMINFO=$mi ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 100 ]
	[ "${stderr#isopod-pool: fatal: }" = "$err0" ]
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-000000000018" ]
	[ ! -e "$BATS_TEST_TMPDIR/id" ]
	# the front end: as a run without the pool
	ISOPOD_MEMINFO=$mi ISOPOD_POOL_SIZE=0 run --separate-stderr isopod run -- true
	local st0=$status out0 e0=$stderr
	out0=$(jq -c 'del(.timings)' <<<"$output")
	ISOPOD_MEMINFO=$mi ISOPOD_POOL=true run --separate-stderr isopod run -- true
	[ "$st0" -eq 100 ] && [ "$status" -eq 100 ] || false
	[ "$stderr" = "$e0" ]
	[ "$(jq -c 'del(.timings)' <<<"$output")" = "$out0" ]
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-000000000018" ]
	# the control: with the host's own figures the take gets it
	sleep 60 &
	owner=$!
	ISOPOD_POOL=true run --separate-stderr isopod-pool take --owner-pid "$owner" --id-file "$BATS_TEST_TMPDIR/id"
	[ "$status" -eq 0 ]
	json_is '.vm.id == "vm-000000000018"'
	kill "$owner"
	stopped vm-000000000018 5
}

@test "pool (no VM): isopod-doctor reports the pool, read only: its settings, shapes, ready VMs; a bad setting is a warning" {
	fake_pooled vm-000000000019 30
	run --separate-stderr isopod-doctor --quick
	json_is '.pool.ready >= 1 and .pool.shapes >= 1 and .pool.size == 1 and .pool.max == 4 and .pool.idle_s == 120'
	[ -e "$ISOPOD_HOME/pool/$key/ready-vm-000000000019" ]
	ISOPOD_POOL_MAX=x run --separate-stderr isopod-doctor --quick
	json_is '(.pool | has("max") | not) and (.warnings | any(startswith("pool: ISOPOD_POOL_MAX=x")))'
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null
	stopped vm-000000000019 5
}

@test "pool (no VM): gc removes a shape's directory left without entries and without a filler, not one whose filler runs" {
	local w="$BATS_TEST_TMPDIR/pool-wrap" pidf="$BATS_TEST_TMPDIR/filler.pid" k0 d i
	# an idle one: no entry, no filler (a killed filler's log and claim file)
	k0=$(printf 'shape-%s' "$$" | sha256sum | cut -c1-64)
	mkdir -p "$ISOPOD_HOME/pool/$k0"
	: >"$ISOPOD_HOME/pool/$k0/fill.log"
	: >"$ISOPOD_HOME/pool/$k0/claim.1"
	run isopod-gc --dry-run
	json_is ".pool_shapes_removed | map(select(.key == \"$k0\")) == [{key: \"$k0\", removed: false}]"
	[ -d "$ISOPOD_HOME/pool/$k0" ]
	# a filler of a new shape, paused (pool-fill) while it holds its lock
	printf '#!/bin/sh\necho $$ >"%s"\nexec "%s" "$@"\n' "$pidf" "$ISOPOD_SRC/bin/isopod-pool" >"$w"
	chmod +x "$w"
	ISOPOD_TEST_PAUSE_AT=pool-fill ISOPOD_POOL=$w run --separate-stderr isopod-pool take --owner-pid $$ \
		--id-file "$BATS_TEST_TMPDIR/id" --mem-mib 208
	[ "$status" -eq 101 ]
	for i in $(seq 100); do
		[ -s "$pidf" ] && [ "$(awk '{print $3}' "/proc/$(cat "$pidf")/stat" 2>/dev/null)" = T ] && break
		sleep 0.1
	done
	local fp
	fp=$(cat "$pidf")
	[ "$(awk '{print $3}' "/proc/$fp/stat")" = T ]
	d=$(dirname "$(readlink -f "/proc/$fp/fd/2")")
	[ -e "$d/fill.lock" ]
	# made by the filler, once it had checked the shape: the store owner's alone
	[ "$(stat -c %a "$d")" = 700 ] && [ "$(stat -c %a "$d/fill.log")" = 600 ] || false
	run isopod-gc
	json_is ".pool_shapes_removed | map(select(.key == \"$k0\") | .removed) == [true]"
	json_is ".pool_shapes_removed | map(select(.key == \"$(basename "$d")\")) == []"
	[ ! -e "$ISOPOD_HOME/pool/$k0" ]
	[ -d "$d" ] && [ -e "$d/fill.lock" ] || false
	# the filler gone (killed): its shape goes at the next gc
	kill -9 "$fp"
	for i in $(seq 50); do flock -n "$d/fill.lock" true && break; sleep 0.1; done
	run isopod-gc
	json_is ".pool_shapes_removed | map(select(.key == \"$(basename "$d")\") | .removed) == [true]"
	[ ! -e "$d" ]
}

@test "pool (no VM): a filler whose fill.lock was unlinked (gc's removal) after it locked it locks the one there now" {
	local w="$BATS_TEST_TMPDIR/pool-wrap" pidf="$BATS_TEST_TMPDIR/filler.pid" fp d st
	printf '#!/bin/sh\necho $$ >"%s"\nexec "%s" "$@"\n' "$pidf" "$ISOPOD_SRC/bin/isopod-pool" >"$w"
	chmod +x "$w"
	# a new shape's filler, stopped right after its flock (pool-lock);
	# pool_max 0: it makes no VM once it has its lock
	ISOPOD_POOL_MAX=0 ISOPOD_TEST_PAUSE_AT=pool-lock ISOPOD_POOL=$w run --separate-stderr \
		isopod-pool take --owner-pid $$ --id-file "$BATS_TEST_TMPDIR/id" --mem-mib 216
	[ "$status" -eq 101 ]
	for _ in $(seq 100); do
		[ -s "$pidf" ] && [ "$(awk '{print $3}' "/proc/$(cat "$pidf")/stat" 2>/dev/null)" = T ] && break
		sleep 0.1
	done
	fp=$(cat "$pidf")
	[ "$(awk '{print $3}' "/proc/$fp/stat")" = T ]
	d=$(dirname "$(readlink -f "/proc/$fp/fd/"* 2>/dev/null | grep '/fill.lock$' | head -1)")
	[ -e "$d/fill.lock" ]
	# its file unlinked, as gc does (under the lock it holds in the real race)
	rm "$d/fill.lock"
	kill -CONT "$fp"
	for _ in $(seq 100); do [ -e "/proc/$fp" ] || break; sleep 0.1; done
	[ ! -e "/proc/$fp" ]
	# it locked the file there now (made again), then went on: pool_max
	[ -e "$d/fill.lock" ]
	grep -q "pool_max 0 reached" "$d/fill.log"
}

@test "pool: off by configuration (pool_size 0, the default): nothing served, nothing filled" {
	local n
	n=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	ISOPOD_POOL_SIZE=0 run --separate-stderr isopod run -- true
	[ "$status" -eq 0 ]
	json_is '.ok == true and .path != "pool"'
	run --separate-stderr env -u ISOPOD_POOL_SIZE isopod run -- true
	json_is '.ok == true and .path != "pool"'
	sleep 1
	# two runs, two VMs: no filler claimed one, none is pooled
	[ "$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 | wc -l)" -eq $((n + 2)) ]
	[ -z "$(isopod-pool ls)" ]
}

@test "pool: a run is served by a ready VM (path pool), which its supervisor stops after the run; the entry is gone" {
	fill
	id=$(ready_ids)
	key=$(isopod-pool ls | jq -r --arg id "$id" 'select(.vm == $id) | .key')
	# the filler's files: the store owner's alone
	[ "$(stat -c %a "$ISOPOD_HOME/pool/$key/ready-$id")" = 600 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/$key/fill.lock")" = 600 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/$key/fill.log")" = 600 ]
	[ "$(stat -c %a "$ISOPOD_HOME/pool/.own/$id.sock")" = 600 ]
	run --separate-stderr isopod run -- hostname
	[ "$status" -eq 0 ]
	json_is ".ok == true and .path == \"pool\" and .vm.id == \"$id\""
	# the filler's boot's TSC rate, the store's (TCG)
	json_is "if .accel == \"tcg\" then .tsc_khz == $(jq .tsc_khz "$ISOPOD_HOME/accel/tsc.json" 2>/dev/null || echo null) else true end"
	name=$(jq -r .vm.name <<<"$output")
	[ "$(jq -r .stdout <<<"$output")" = "$name" ]
	# the one unlink that was the take: never ready again
	[ -z "$(isopod-pool ls | jq -r --arg id "$id" 'select(.vm == $id) | .vm')" ]
	stopped "$id"
	jq -e '.stopped_by == "owner" and .pool_taken == true and .keep == false and .state == "stopped"' \
		"$ISOPOD_HOME/vms/$id/meta.json"
}

@test "pool: a pooled run starts no isopod-boot (the take before any --check: a ready VM proves its boot options)" {
	fill
	id=$(ready_ids)
	local lx="$BATS_TEST_TMPDIR/libexec" log="$BATS_TEST_TMPDIR/boot.log" f
	mkdir "$lx"
	for f in "$ISOPOD_SRC"/bin/isopod-*; do ln -s "$f" "$lx/"; done
	rm "$lx/isopod-boot"
	# the front end's calls logged (not the filler's: isopod-pool's child)
	printf '#!/bin/sh
[ "$(cat /proc/$PPID/comm)" = isopod-pool ] || echo "$*" >>"%s"
exec "%s" "$@"
' \
		"$log" "$ISOPOD_SRC/bin/isopod-boot" >"$lx/isopod-boot"
	chmod +x "$lx/isopod-boot"
	ISOPOD_LIBEXEC=$lx run --separate-stderr isopod run -- true
	json_is ".ok == true and .path == \"pool\" and .vm.id == \"$id\""
	[ ! -e "$log" ]
	stopped "$id"
	# the control: without the pool the same front end boots (the boot's
	# options checked by the claim, --boot-check: no isopod-boot --check)
	ISOPOD_POOL_SIZE=0 ISOPOD_LIBEXEC=$lx run --separate-stderr isopod run -- true
	json_is '.ok == true and .path != "pool"'
	grep -q -- '^--vm ' "$log"
	! grep -q -- '^--check' "$log" || false
}

@test "pool: with pool_size 2, two pooled VMs and two more runs, four at once: all succeed on four VMs of their own, each with its own hostname and RNG" {
	export ISOPOD_POOL_SIZE=2
	fill
	# the one ready may be the last test's refill (pool_size 1 then): a
	# filler of the shape for the second
	key=$(isopod-pool ls | jq -r .key | head -1)
	flock "$ISOPOD_HOME/pool/$key/fill.lock" true # that filler done
	(isopod-pool fill --key "$key" >/dev/null 2>>"$ISOPOD_HOME/pool/$key/fill.log" &)
	wait_ready 2
	local i
	for i in 1 2 3 4; do
		isopod run -- sh -c 'hostname; head -c16 /dev/urandom | od -An -tx1 | tr -d " \n"' \
			>"$BATS_TEST_TMPDIR/r$i.json" 2>/dev/null &
	done
	wait
	run jq -s -c '[.[] | {ok, path, id: .vm.id, out: .stdout}]' "$BATS_TEST_TMPDIR"/r?.json
	echo "$output"
	json_is 'length == 4 and all(.ok) and ([.[].id] | unique | length) == 4'
	json_is '([.[].out | split("\n")[0]] | unique | length) == 4 and ([.[].out | split("\n")[1]] | unique | length) == 4'
	json_is '([.[] | select(.path == "pool")] | length) >= 2'
	for i in $(jq -r '.[].id' <<<"$output"); do stopped "$i"; done
	# back to one: the fillers done, the pool's extra VM stopped
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null
}

@test "pool: a taken VM accepts no second owner (its socket is gone; a forged entry serves nobody)" {
	fill
	id=$(ready_ids)
	key=$(isopod-pool ls | jq -r --arg id "$id" 'select(.vm == $id) | .key')
	cp "$ISOPOD_HOME/pool/$key/ready-$id" "$BATS_TEST_TMPDIR/entry"
	"$ISOPOD_SRC/sh/isopod" run -- sleep 30 >/dev/null 2>&1 &
	run_pid=$!
	for i in $(seq 100); do
		jq -e '.pool_taken == true' "$ISOPOD_HOME/vms/$id/meta.json" >/dev/null && break
		sleep 0.1
	done
	jq -e '.pool_taken == true' "$ISOPOD_HOME/vms/$id/meta.json"
	[ ! -e "$ISOPOD_HOME/pool/.own/$id.sock" ]
	# the entry put back: a second take must not get this running VM
	cp "$BATS_TEST_TMPDIR/entry" "$ISOPOD_HOME/pool/$key/ready-$id"
	sleep 30 &
	other=$!
	run --separate-stderr isopod-pool take --owner-pid "$other" --id-file "$BATS_TEST_TMPDIR/id2"
	kill "$other" || :
	[ "$status" -ne 0 ] || jq -e --arg id "$id" '.vm.id != $id' <<<"$output"
	kill "$run_pid" || :
	wait "$run_pid" || :
	stopped "$id"
}

@test "pool: SIGKILL of the run's front end stops its pooled VM (the supervisor watches the run's pidfd); gc removes its scratch directory, none in TMPDIR" {
	fill
	export TMPDIR="$BATS_TEST_TMPDIR/tmp"
	mkdir "$TMPDIR"
	id=$(ready_ids)
	"$ISOPOD_SRC/sh/isopod" run -- sleep 60 >/dev/null 2>&1 &
	run_pid=$!
	for i in $(seq 100); do
		jq -e '.pool_taken == true' "$ISOPOD_HOME/vms/$id/meta.json" >/dev/null && break
		sleep 0.1
	done
	jq -e --arg p "$run_pid" '.pool_taken == true and .owner_pid == ($p | tonumber)' \
		"$ISOPOD_HOME/vms/$id/meta.json"
	kill -9 "$run_pid"
	stopped "$id" 10
	jq -e '.stopped_by == "owner"' "$ISOPOD_HOME/vms/$id/meta.json"
	wait "$run_pid" || :
	# its scratch directory, the one leak, is the store's (take --scratch,
	# as a claim's): gc removes it; nothing of it in TMPDIR
	local d
	d=$(find "$ISOPOD_HOME/runs" -mindepth 1 -maxdepth 1 -name "$id.$run_pid.*")
	[ -d "$d" ]
	run isopod-gc
	json_is ".leaked | map(select(.kind == \"run\" and .removed) | .path) == [\"$d\"]"
	[ ! -e "$d" ]
	[ -z "$(ls -A "$TMPDIR")" ]
}

@test "pool: gc sweeps an entry whose supervisor died; a run is then not served by it" {
	fill
	id=$(ready_ids)
	sup=$(jq -r .supervisor_pid "$ISOPOD_HOME/vms/$id/meta.json")
	kill -9 "$sup"
	stopped "$id"
	run isopod-gc --dry-run
	json_is ".pool_removed | map({vm, removed}) == [{vm: \"$id\", removed: false}]"
	run isopod-gc
	json_is ".pool_removed | map(select(.removed) | .vm) == [\"$id\"]"
	[ -z "$(isopod-pool ls | jq -r --arg id "$id" 'select(.vm == $id) | .vm')" ]
}

@test "pool: an idle VM expires (pool_idle_s): its supervisor stops it, stopped_by pool-idle; df reports the pool" {
	ISOPOD_POOL_SIZE=0 isopod-pool drain >/dev/null
	ISOPOD_POOL_IDLE_S=8 fill
	id=$(ready_ids)
	run isopod-gc --df
	json_is '.usage.pool.ready == 1 and .usage.pool.pss_bytes > 0'
	# and the doctor's report, read only, with the settings
	run --separate-stderr isopod-doctor --quick
	json_is '.pool.ready == 1 and .pool.pss_bytes > 0 and .pool.size == 1 and .pool.idle_s == 120'
	[ -n "$(ready_ids)" ]
	stopped "$id" 30
	jq -e '.stopped_by == "pool-idle"' "$ISOPOD_HOME/vms/$id/meta.json"
	run isopod-gc
	json_is ".pool_removed | map(.vm) == [\"$id\"]"
}
