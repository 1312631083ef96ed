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

# One way to name a VM: a tool not given --vm refuses (100, naming --vm)
# without reading stdin, even a JSON naming a VM there (once the deprecated
# spelling, read and refused only for its duplicate key).
@test "exec: a VM on stdin (even a duplicate-key one) is refused (100) unread, naming --vm; no command runs in either VM" {
	fake_vm "$A"
	la=$listener
	fake_vm "$B"
	lb=$listener
	run --separate-stderr isopod-exec -- true <<<"{\"vm\":{\"id\":\"$A\"},\"vm\":{\"id\":\"$B\"}}"
	kill "$la" "$lb" 2>/dev/null || :
	wait "$la" "$lb" 2>/dev/null || :
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--vm REF"* ]]
	[[ "$stderr" != *"duplicate key"* ]]
	[ ! -e "$BATS_TEST_TMPDIR/$A.connected" ]
	[ ! -e "$BATS_TEST_TMPDIR/$B.connected" ]
	# a single VM on stdin too
	run --separate-stderr isopod-exec -- true <<<"{\"vm\":{\"id\":\"$A\"}}"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--vm REF"* ]]
	rm -rf "${ISOPOD_HOME:?}/vms/$A" "${ISOPOD_HOME:?}/vms/$B"
}

@test "boot and fork: a claim on stdin (even a duplicate-key one) is refused (100) unread, naming --vm" {
	dup="{\"vm\":{\"id\":\"$A\"},\"vm\":{\"id\":\"$B\"}}"
	run --separate-stderr isopod-boot <<<"$dup"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--vm REF"* && "$stderr" != *"duplicate key"* ]]
	run --separate-stderr isopod-fork --stage base <<<"$dup"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--vm REF"* && "$stderr" != *"duplicate key"* ]]
	# a well-formed claim for a VM that exists: refused all the same
	id=$(isopod-claim | jq -er .vm.id)
	for t in boot fork; do
		if [ $t = boot ]; then
			run --separate-stderr isopod-boot <<<"{\"vm\":{\"id\":\"$id\"}}"
		else
			run --separate-stderr isopod-fork --stage base <<<"{\"vm\":{\"id\":\"$id\"}}"
		fi
		[ "$status" -eq 100 ]
		[[ "$stderr" == *"--vm REF"* ]]
	done
	jq -e '.state == "claimed" and (has("base") | not)' "$ISOPOD_HOME/vms/$id/meta.json"
	[ ! -e "$ISOPOD_HOME/vms/$id/disk.qcow2" ]
	rm -rf "${ISOPOD_HOME:?}/vms/$id"
}

@test "stop and commit: a REF as an operand is refused (100) naming --vm; the record untouched" {
	id=$(isopod-claim | jq -er .vm.id)
	for ref in "$id" nosuchvm; do
		for i in 1 2 3; do
			case $i in
			1) run --separate-stderr isopod-stop "$ref" ;;
			2) run --separate-stderr isopod-stop --force "$ref" ;;
			3) run --separate-stderr isopod-commit --label l "$ref" ;;
			esac
			if [ "$status" -ne 100 ] || [[ "$stderr" != *"--vm REF"* ]]; then
				echo "case $i ($ref): status $status: ${stderr:0:300}" >&2
				return 1
			fi
		done
	done
	jq -e '.state == "claimed"' "$ISOPOD_HOME/vms/$id/meta.json"
	rm -rf "${ISOPOD_HOME:?}/vms/$id"
}

# The datum on one channel: a tool given --vm reads nothing about its VM on
# stdin.  A duplicate-key document there is not even read: the --vm REF
# decides, here 101.
@test "claim: --id-file holds the id and the name of its JSON, one a line (what isopod run reads); unwritable, 111" {
	local f="$BATS_TEST_TMPDIR/ids" id
	run --separate-stderr isopod-claim --id-file "$f" --name idfile-box
	[ "$status" -eq 0 ]
	id=$(jq -er .vm.id <<<"$output")
	[ "$(cat "$f")" = "$id
idfile-box" ]
	rm -rf "${ISOPOD_HOME:?}/vms/$id"
	# unwritable: nothing claimed (no record left behind)
	local before after
	before=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 | wc -l)
	run --separate-stderr isopod-claim --id-file "$BATS_TEST_TMPDIR/no/such/dir/ids"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"--id-file"* ]]
	after=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 | wc -l)
	[ "$before" = "$after" ]
}

@test "claim --gc-auto: starts isopod-gc --auto only when one is due (its stamp missing or as old as gc_interval), after the claim; off starts none; a bad setting starts it, to report" {
	local home="$BATS_TEST_TMPDIR/gchome" stamp
	stamp=$home/locks/gc-auto
	export ISOPOD_HOME=$home ISOPOD_CONFIG=/dev/null ISOPOD_SYSCONFIG=/dev/null ISOPOD_GC_INTERVAL=1h
	# without the option, no gc
	run --separate-stderr isopod-claim
	[ "$status" -eq 0 ]
	[ ! -e "$stamp" ]
	# off: none either
	ISOPOD_GC_INTERVAL=off run --separate-stderr isopod-claim --gc-auto
	[ "$status" -eq 0 ]
	[ ! -e "$stamp" ]
	# due (no stamp): gc stamped the store before the claim returned, and
	# the claim's output is the claim's alone
	run --separate-stderr isopod-claim --gc-auto
	[ "$status" -eq 0 ]
	[ -e "$stamp" ]
	jq -e '.vm.id | startswith("vm-")' <<<"$output"
	for _ in $(seq 1 100); do [ -e "$home/locks/gc-auto.json" ] && break; sleep 0.1; done
	jq -e '.auto' "$home/locks/gc-auto.json"
	# not due (10 minutes old, the interval 1 h): the stamp stays as it was
	touch -d '10 minutes ago' "$stamp"
	local before
	before=$(stat -c %Y "$stamp")
	run --separate-stderr isopod-claim --gc-auto
	[ "$status" -eq 0 ]
	[ "$(stat -c %Y "$stamp")" = "$before" ]
	# due again (2 hours old)
	touch -d '2 hours ago' "$stamp"
	run --separate-stderr isopod-claim --gc-auto
	[ "$status" -eq 0 ]
	[ "$(stat -c %Y "$stamp")" -gt "$before" ]
	for _ in $(seq 1 100); do [ "$home/locks/gc-auto.json" -nt "$stamp" ] && break; sleep 0.1; done
	# a setting gc cannot read: the claim stands, gc's report says why
	ISOPOD_GC_INTERVAL=soon run --separate-stderr isopod-claim --gc-auto
	[ "$status" -eq 0 ]
	jq -e '.started == false and (.error | contains("ISOPOD_GC_INTERVAL"))' "$home/locks/gc-auto.json"
}

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

@test "a 100 MB vm id on stdin: not read, refused (100) at once, stderr under 1 KiB" {
	for i in 1 2 3; do
		case $i in
		1) run --separate-stderr isopod-exec -- true <"$BATS_FILE_TMPDIR/id100m.json" ;;
		2) run --separate-stderr isopod-boot <"$BATS_FILE_TMPDIR/id100m.json" ;;
		3) run --separate-stderr isopod-fork --stage base <"$BATS_FILE_TMPDIR/id100m.json" ;;
		esac
		[ "$status" -eq 100 ]
		small_stderr
		[[ "$stderr" == *"--vm REF"* ]]
	done
	# under the old 1 MiB bound: the same
	run --separate-stderr isopod-exec -- true <"$BATS_FILE_TMPDIR/id500k.json"
	[ "$status" -eq 100 ]
	small_stderr
	[[ "$stderr" == *"--vm REF"* ]]
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
			2) run --separate-stderr isopod-stop --force --vm "$ref" ;;
			3) run --separate-stderr isopod-commit --vm "$ref" ;;
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
