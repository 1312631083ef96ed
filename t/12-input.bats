#!/usr/bin/env bats
# Untrusted input to the tools, no VM needed: JSON with a duplicate key is
# refused by name (100) before anything is looked up; ids and references are
# checked for syntax first; no diagnostic echoes more than a few hundred bytes
# of its input, nor a control byte of it.

load helpers

setup_file() {
	isopod_setup_file
	# A 100 MB vm.id (over the 1 MiB bound of every JSON input) and a
	# 500 KB one (under it: the id check sees it).
	{
		printf '{"vm":{"id":"vm-'
		head -c 100000000 /dev/zero | tr '\0' a
		printf '"}}'
	} >"$BATS_FILE_TMPDIR/id100m.json"
	{
		printf '{"vm":{"id":"vm-'
		head -c 500000 /dev/zero | tr '\0' a
		printf '"}}'
	} >"$BATS_FILE_TMPDIR/id500k.json"
}

teardown_file() { isopod_teardown_file; }

A=vm-aaaaaaaaaaaa
B=vm-bbbbbbbbbbbb

# fake_vm ID: a record whose agent socket is a listener that notes a
# connection in $BATS_TEST_TMPDIR/ID.connected (pid in $listener).
fake_vm() {
	local d="$ISOPOD_HOME/vms/$1"
	mkdir -p "$d"
	jq -n --arg id "$1" --arg s "$d/agent.sock" --arg q "$d/qmp.sock" \
		'{id: $id, name: "fake", state: "running", agent_sock: $s, qmp_sock: $q}' >"$d/meta.json"
	timeout 30 python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept(); open(sys.argv[2], "w").write("connected\n"); c.close()
' "$d/agent.sock" "$BATS_TEST_TMPDIR/$1.connected" 3>&- &
	listener=$!
	for _ in $(seq 1 50); do [ -S "$d/agent.sock" ] && break; sleep 0.1; done
}

# shellcheck disable=SC2154  # $stderr is set by bats' run
small_stderr() {
	local n=${#stderr}
	if [ "$n" -ge 1024 ]; then
		echo "stderr is $n bytes: ${stderr:0:300}" >&2
		return 1
	fi
}

@test "exec: a duplicate key on stdin is refused by name (100) and no command runs in either VM" {
	fake_vm "$A"
	la=$listener
	fake_vm "$B"
	lb=$listener
	run --separate-stderr isopod-exec -- true <<<"{\"vm\":{\"id\":\"$A\"},\"vm\":{\"id\":\"$B\"}}"
	kill "$la" "$lb" 2>/dev/null || :
	wait "$la" "$lb" 2>/dev/null || :
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'duplicate key "vm"'* ]]
	[ ! -e "$BATS_TEST_TMPDIR/$A.connected" ]
	[ ! -e "$BATS_TEST_TMPDIR/$B.connected" ]
	# a nested duplicate too
	run --separate-stderr isopod-exec -- true <<<"{\"vm\":{\"id\":\"$A\",\"id\":\"$B\"}}"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'duplicate key "id"'* ]]
	rm -rf "${ISOPOD_HOME:?}/vms/$A" "${ISOPOD_HOME:?}/vms/$B"
}

@test "boot and fork: a duplicate key on stdin is refused by name (100)" {
	dup="{\"vm\":{\"id\":\"$A\"},\"vm\":{\"id\":\"$B\"}}"
	run --separate-stderr isopod-boot <<<"$dup"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'duplicate key "vm"'* ]]
	run --separate-stderr isopod-fork --stage base <<<"$dup"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'duplicate key "vm"'* ]]
}

# The datum on one channel: a tool given --vm reads nothing about its VM on
# stdin.  A duplicate-key document there (which the deprecated stdin path
# refuses with 100) is not even read: the --vm REF decides, here 101.
@test "--vm: the VM comes from the REF and its record; stdin is not read for it" {
	dup="{\"vm\":{\"id\":\"$A\"},\"vm\":{\"id\":\"$B\"}}"
	for i in 1 2 3; do
		case $i in
		1) run --separate-stderr isopod-exec --vm nosuchvm -- true <<<"$dup" ;;
		2) run --separate-stderr isopod-boot --vm nosuchvm <<<"$dup" ;;
		3) run --separate-stderr isopod-fork --vm nosuchvm --stage base <<<"$dup" ;;
		esac
		if [ "$status" -ne 101 ] || [[ "$stderr" != *"no such vm: nosuchvm"* ]]; then
			echo "case $i: status $status: ${stderr:0:300}" >&2
			return 1
		fi
	done
}

@test "a 100 MB vm id on stdin: refused (100) before any lookup, stderr under 1 KiB" {
	for i in 1 2 3; do
		case $i in
		1) run --separate-stderr isopod-exec -- true <"$BATS_FILE_TMPDIR/id100m.json" ;;
		2) run --separate-stderr isopod-boot <"$BATS_FILE_TMPDIR/id100m.json" ;;
		3) run --separate-stderr isopod-fork --stage base <"$BATS_FILE_TMPDIR/id100m.json" ;;
		esac
		[ "$status" -eq 100 ]
		small_stderr
		[[ "$stderr" == *"more than 1048576 bytes"* ]]
	done
	# under the bound, the id's syntax is what refuses it
	run --separate-stderr isopod-exec -- true <"$BATS_FILE_TMPDIR/id500k.json"
	[ "$status" -eq 100 ]
	small_stderr
	[[ "$stderr" == *"bad vm.id vm-aaaa"*"(500003 bytes)"* ]]
	run --separate-stderr isopod-boot <"$BATS_FILE_TMPDIR/id500k.json"
	[ "$status" -eq 100 ]
	small_stderr
}

@test "a 100 KB or control-byte reference: 100, bounded and escaped, in every tool and the front end" {
	big=$(head -c 100000 /dev/zero | tr '\0' x)
	esc=$(printf 'x\033[2Jy')
	for ref in "$big" "$esc" "../vms" ""; do
		for i in 1 2 3 4 5 6 7 8 9 10; do
			case $i in
			1) run --separate-stderr isopod-exec --vm "$ref" -- true ;;
			2) run --separate-stderr isopod-stop "$ref" ;;
			3) run --separate-stderr isopod-commit --label l "$ref" ;;
			4) run --separate-stderr isopod vm rm "$ref" ;;
			5) run --separate-stderr isopod vm stop "$ref" ;;
			6) run --separate-stderr isopod-stop --vm "$ref" ;;
			7) run --separate-stderr isopod-commit --label l --vm "$ref" ;;
			8) run --separate-stderr isopod-boot --vm "$ref" </dev/null ;;
			9) run --separate-stderr isopod-fork --vm "$ref" --stage base </dev/null ;;
			10) run --separate-stderr isopod-vm show "$ref" ;;
			esac
			if [ "$status" -ne 100 ] || [[ "$stderr" != *"bad vm reference"* ]]; then
				echo "case $i: status $status: ${stderr:0:300}" >&2
				return 1
			fi
			small_stderr
			[[ "$stderr" != *$'\033'* ]]
		done
	done
	for ref in "$big" "../vms" ""; do
		run --separate-stderr isopod-stage info "$ref"
		[ "$status" -eq 100 ]
		small_stderr
	done
	run --separate-stderr isopod-stage info "$esc"
	# a label is valid UTF-8 without control bytes: refused before any lookup
	[ "$status" -eq 100 ]
	[[ "$stderr" == *'x\x1b[2Jy'* ]]
	run --separate-stderr isopod-warm rm "$big"
	[ "$status" -eq 100 ]
	small_stderr
	run --separate-stderr isopod run --env "$big" -- true
	[ "$status" -eq 100 ]
	small_stderr
}
