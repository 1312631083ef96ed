#!/usr/bin/env bats
# isopod-supervise against a stand-in QEMU (t/fake/qemu-system-x86_64),
# driven the way isopod-boot drives it (t/fake/supervise-drive): the lock,
# the control and report pipes, the owner, signals, the record it leaves,
# and what QEMU inherits.  No VM boots here.

load helpers

setup_file() { isopod_setup_file; }
teardown_file() { isopod_teardown_file; }

setup() {
	ID=vm-$(printf '%012x' "$BATS_TEST_NUMBER")
	VDIR=$ISOPOD_HOME/vms/$ID
	mkdir -p "$VDIR"
	jq -n --arg id "$ID" '{id: $id, name: "sup-test", state: "booting"}' >"$VDIR/meta.json"
	export FAKE_QEMU_DIR=$BATS_TEST_TMPDIR
	FAKE=$ISOPOD_SRC/t/fake/qemu-system-x86_64
	DRIVE=$ISOPOD_SRC/t/fake/supervise-drive
}

rec() { jq -e "$1" "$VDIR/meta.json"; }

@test "supervise: -h prints the man page's SYNOPSIS; started without its descriptors or spec: 100" {
	run isopod-supervise -h
	[ "$status" -eq 0 ]
	syn=$(sed -n '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/p' "$ISOPOD_SRC/man/isopod-supervise.1")
	for w in '--owner' '--mem' '--slot'; do
		[[ "$output" == *"[$w]"* ]]
		[[ "$syn" == *"${w#--}"* ]]
	done
	run --separate-stderr isopod-supervise 3<&- 4<&- 5<&- </dev/null
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"fd 3 is not open"* ]]
	run --separate-stderr isopod-supervise --bogus
	[ "$status" -eq 100 ]
	run --separate-stderr sh -c 'echo "{\"vm\":\"../x\",\"dir\":\"/tmp\",\"qemu\":[\"q\"]}" |
		isopod-supervise 3</dev/null 4</dev/null 5>/dev/null'
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"vm-<12 hex>"* ]]
	run --separate-stderr sh -c "echo '{\"vm\":\"$ID\",\"dir\":\"$VDIR\",\"qemu\":[]}' |
		isopod-supervise 3</dev/null 4</dev/null 5>/dev/null"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'"qemu": [ARGV...]'* ]]
	run --separate-stderr sh -c "echo not json | isopod-supervise 3</dev/null 4</dev/null 5>/dev/null"
	[ "$status" -eq 100 ]
}

@test "supervise: QEMU that exits by itself after the boot was confirmed: stopped, its status, lock free" {
	# it exits once the boot is confirmed (at once, it raced the 'r': the
	# record said failed under load)
	FAKE_QEMU=exit-confirmed:3 run "$DRIVE" "$ISOPOD_HOME" "$ID" confirm wait lock-held -- "$FAKE" -M microvm
	[ "$status" -eq 0 ]
	[[ "$output" == *"report: $(cat "$FAKE_QEMU_DIR/qemu.pid")"* ]]
	[[ "$output" == *"exit: 3"* ]]
	[[ "$output" == *"lock: free"* ]]
	rec '.state == "stopped" and .qemu_exit == 3 and .stopped_by == "qemu" and (.stopped_at | length > 0)'
	# QEMU's start beside the host's boot (isopod-gc's still_ours: a
	# start in ticks since boot names nothing after a reboot)
	rec ".qemu_start > 0 and .boot_id == \"$(cat /proc/sys/kernel/random/boot_id)\""
	[ "$(sed -n 1,2p "$FAKE_QEMU_DIR/qemu.argv" | tr '\n' ' ')" = "-M microvm " ]
}

@test "supervise: the boot's control pipe closes before 'r': QEMU killed, the record failed, stopped_by boot" {
	run "$DRIVE" "$ISOPOD_HOME" "$ID" lock-held close-ctl wait lock-held -- "$FAKE"
	[ "$status" -eq 0 ]
	[[ "$output" == *"lock: held"*"exit: 137"*"lock: free"* ]]
	rec '.state == "failed" and .qemu_exit == 137 and .stopped_by == "boot"'
	rec '.error == "isopod-boot failed or died before the agent answered"'
	run kill -0 "$(cat "$FAKE_QEMU_DIR/qemu.pid")"
	[ "$status" -ne 0 ]
}

@test "supervise: the owner exits: QEMU killed, stopped_by owner" {
	run "$DRIVE" "$ISOPOD_HOME" "$ID" --owner-sleep confirm qemu-ready kill-owner wait -- "$FAKE"
	[ "$status" -eq 0 ]
	[[ "$output" == *"exit: 137"* ]]
	rec '.state == "stopped" and .qemu_exit == 137 and .stopped_by == "owner"'
	grep -q 'owner exited: killing qemu' "$VDIR/qemu.log"
}

@test "supervise: SIGTERM: QEMU killed, stopped_by signal; the lock is held exactly while it lives" {
	run "$DRIVE" "$ISOPOD_HOME" "$ID" confirm qemu-ready lock-held term wait lock-held -- "$FAKE"
	[ "$status" -eq 0 ]
	[[ "$output" == *"lock: held"*"exit: 137"*"lock: free"* ]]
	rec '.state == "stopped" and .stopped_by == "signal"'
	grep -q 'signal 15: killing qemu' "$VDIR/qemu.log"
	grep -q 'fake qemu: running' "$VDIR/qemu.log" # QEMU's stderr: qemu.log
}

@test "supervise: QEMU inherits only 0 1 2 and its console pipe as 5 (none of the lock, pipes, pidfds or signalfd) and runs in the supervisor's session" {
	run "$DRIVE" "$ISOPOD_HOME" "$ID" --owner-sleep confirm qemu-ready term wait -- "$FAKE"
	[ "$status" -eq 0 ]
	[ "$(cat "$FAKE_QEMU_DIR/qemu.fds")" = "0 1 2 5 " ]
	[[ "$(cat "$FAKE_QEMU_DIR/qemu.fd5")" == pipe:* ]]
	sid=$(cat "$FAKE_QEMU_DIR/qemu.sid")
	[ "$sid" != "$(cut -d' ' -f6 /proc/$$/stat)" ] # a session of its own, not ours
	[ "$sid" != "$(cat "$FAKE_QEMU_DIR/qemu.pid")" ]
}

@test "supervise: --mem: the memory file becomes QEMU's fd 3, and nothing else but the console (5)" {
	echo snapshot >"$BATS_TEST_TMPDIR/mem"
	FAKE_QEMU=mem run "$DRIVE" "$ISOPOD_HOME" "$ID" --mem "$BATS_TEST_TMPDIR/mem" confirm qemu-ready term wait -- "$FAKE"
	[ "$status" -eq 0 ]
	[ "$(cat "$FAKE_QEMU_DIR/qemu.fds")" = "0 1 2 3 5 " ]
	[ "$(cat "$FAKE_QEMU_DIR/qemu.fd3")" = "$BATS_TEST_TMPDIR/mem" ]
}

@test "supervise: a QEMU that cannot be executed: 127 in the record, the reason in qemu.log" {
	run "$DRIVE" "$ISOPOD_HOME" "$ID" wait -- /nonexistent/qemu-system-x86_64
	[ "$status" -eq 0 ]
	[[ "$output" == *"exit: 127"* ]]
	rec '.state == "failed" and .qemu_exit == 127 and .stopped_by == "qemu"'
	rec '.error == "qemu stopped before the agent answered"'
	grep -q 'unable to exec /nonexistent/qemu-system-x86_64' "$VDIR/qemu.log"
}

@test "supervise: the console: console.log keeps the first console_max bytes of QEMU's fd 5, byte-exact; the rest is counted; the record says so" {
	# 300000 bytes through a 100000-byte cap (not a multiple of the pipe's 64 KiB)
	SUP_CONSOLE_MAX=100000 FAKE_QEMU=console:300000 run "$DRIVE" "$ISOPOD_HOME" "$ID" wait -- "$FAKE"
	[ "$status" -eq 0 ]
	[[ "$output" == *"exit: 0"* ]]
	rec '.console_bytes == 300000 and .console_log_truncated == true'
	[ "$(stat -c %s "$VDIR/console.log")" -eq 100000 ]
	cmp "$VDIR/console.log" <(seq 1 200000 | head -c 100000)
	grep -q 'console.log reached its cap of 100000 bytes' "$VDIR/qemu.log"
	# under the cap: all of it, the field false
	SUP_CONSOLE_MAX=100000 FAKE_QEMU=console:99999 run "$DRIVE" "$ISOPOD_HOME" "$ID" wait -- "$FAKE"
	[ "$status" -eq 0 ]
	rec '.console_bytes == 99999 and .console_log_truncated == false'
	cmp "$VDIR/console.log" <(seq 1 200000 | head -c 99999)
	# no console_max in the spec: 16 MiB
	FAKE_QEMU=console:300000 run "$DRIVE" "$ISOPOD_HOME" "$ID" wait -- "$FAKE"
	rec '.console_bytes == 300000 and .console_log_truncated == false'
	cmp "$VDIR/console.log" <(seq 1 200000 | head -c 300000)
	run --separate-stderr sh -c "echo '{\"vm\":\"$ID\",\"dir\":\"$VDIR\",\"qemu\":[\"q\"],\"console_max\":-1}' |
		isopod-supervise 3</dev/null 4</dev/null 5>/dev/null"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'"console_max": 0..'* ]]
}
