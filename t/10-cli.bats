#!/usr/bin/env bats
# The front end (sh/isopod) without a VM: option checking before boot, exit
# codes, the shell guard, vm/image/doctor verbs, and the run flow driven
# through stand-in tools (t/fake/isopod-*) that speak the same JSON.

load helpers

setup_file() { isopod_setup_file; }

teardown_file() {
	# The fake supervisors (sleeping lock holders) are ours: end them by pid.
	local f
	for f in "$ISOPOD_HOME"/vms/*/holder.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
	done
	isopod_teardown_file
}

# Drive `isopod run` through t/fake: each test gets its own log and records.
use_fake() {
	export ISOPOD_LIBEXEC="$ISOPOD_SRC/t/fake"
	export FAKE_DIR="$BATS_TEST_TMPDIR"
	export FAKE_LOG="$BATS_TEST_TMPDIR/fake.log"
}

no_claim() {
	[ ! -e "$FAKE_LOG" ] || ! grep -q '^claim' "$FAKE_LOG"
}

# ---- the shell guard ------------------------------------------------------------

@test "shell: without pipefail, bash or busybox, a clear refusal" {
	stub="$BATS_TEST_TMPDIR/stub"
	mkdir -p "$stub"
	run --separate-stderr env PATH="$stub" "$(command -v dash)" "$ISOPOD_SRC/sh/isopod" version
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"this shell lacks 'set -o pipefail'"* ]]
	[[ "$stderr" == *"install bash"* ]]
	[ -z "$output" ]
}

@test "shell: under dash, isopod starts again under bash" {
	run --separate-stderr dash "$ISOPOD_SRC/sh/isopod" version
	[ "$status" -eq 0 ]
	[[ "$output" == "isopod "* ]]
	run --separate-stderr dash "$ISOPOD_SRC/sh/isopod" doctor --quick
	json_is '.shell.path | endswith("/bash")'
	json_is '.shell.pipefail == true'
}

@test "shell: with busybox but no bash, isopod starts again under busybox sh" {
	command -v busybox >/dev/null || skip "busybox not installed"
	stub="$BATS_TEST_TMPDIR/stub"
	mkdir -p "$stub"
	ln -s "$(command -v busybox)" "$stub/busybox"
	run --separate-stderr env PATH="$stub" "$(command -v dash)" "$ISOPOD_SRC/sh/isopod" version
	[ "$status" -eq 0 ]
	[[ "$output" == "isopod "* ]]
}

# ---- usage errors, all before anything boots ------------------------------------

@test "run: bad env names are refused with 100 before boot, naming them" {
	use_fake
	for bad in '=x' '' 'noequals' '=' '1X=y' 'A B=c' '-A=b' 'A.B=c'; do
		run_isopod -100 run --env "$bad" -- true
		[[ "$stderr" == *"--env '$bad'"* ]]
		json_is '.ok == false and .error_kind == "usage"'
	done
	[ ! -d "$ISOPOD_HOME/vms" ] || [ -z "$(ls -A "$ISOPOD_HOME/vms")" ]
	no_claim
}

@test "run: --env A=B is accepted and reaches isopod-exec in order" {
	use_fake
	run_isopod -0 run --json-only --env A=B --env 'C=d e=f' --env 'E=' -- true
	grep -A1 -x -- --env "$FAKE_DIR/args" | grep -vx -- --env | grep -vx -- -- >"$BATS_TEST_TMPDIR/envs"
	[ "$(cat "$BATS_TEST_TMPDIR/envs")" = "A=B
C=d e=f
E=" ]
}

@test "run: a timeout out of 1..86400 is refused with 100 naming the range" {
	use_fake
	for t in 0 86401 abc -5 '' 1.5 99999999999; do
		run_isopod -100 run --timeout-s "$t" -- true
		[[ "$stderr" == *"1..86400"* ]]
	done
	run_isopod -100 run --timeout-s=0 -- true
	run_isopod -100 run --timeout-s 000 -- true
	[[ "$stderr" == *"--timeout-s 0: out of range"* ]]
	no_claim
}

@test "run: --timeout-s with leading zeros is decimal: 08 runs (bash's arithmetic took it as a bad octal), 0600 is 600 s" {
	use_fake
	run_isopod -0 run --json-only --timeout-s 08 -- true
	json_is '.ok == true'
	rm -f "$FAKE_LOG"
	run_isopod -0 run --json-only --timeout-s 0600 -- true
	ms=$(sed -n 's/^boot .*--timeout-ms \([0-9]*\).*/\1/p' "$FAKE_LOG")
	[ -n "$ms" ] && [ "$ms" -gt 384000 ] && [ "$ms" -le 600000 ] || { echo "boot --timeout-ms $ms"; false; }
}

@test "run: other bad options are refused with 100 before boot" {
	use_fake
	run_isopod -100 run --vcpus 0 -- true
	[[ "$stderr" == *"isopod-boot: fatal: --vcpus 0"*"CPUs"* ]]
	json_is '.ok == false and .error_kind == "usage" and (.error | startswith("isopod-boot: fatal: --vcpus 0"))'
	no_claim
	run_isopod -100 run --vcpus 100000 -- true
	run_isopod -100 run --mem-mib 1 -- true
	[[ "$stderr" == *"--mem-mib"*"available"* ]]
	run_isopod -100 run --disk-mib 1 -- true
	run_isopod -100 run --cwd relative/dir -- true
	[[ "$stderr" == *"relative/dir"* ]]
	run_isopod -100 run --stdin-file /no/such/file -- cat
	[[ "$stderr" == *"/no/such/file"* ]]
	run_isopod -100 run --copy-in /no/such/file:/root/x -- true
	[[ "$stderr" == *"/no/such/file"* ]]
	run_isopod -100 run --copy-in "$ISOPOD_SRC/Makefile:relative" -- true
	run_isopod -100 run --copy-out /root/x:/no/such/dir/x -- true
	[[ "$stderr" == *"/no/such/dir"* ]]
	run_isopod -100 run --bogus -- true
	[[ "$stderr" == *"--bogus"* ]]
	run_isopod -100 run --timeout-s
	run_isopod -100 run --keep=1 -- true
	run_isopod -100 run --json-only
	[[ "$stderr" == *"no command"* ]]
	json_is '.ok == false and .error_kind == "usage"'
	no_claim
}

@test "cli: unknown verb, no verb -> 100; help and version -> 0" {
	run_isopod -100 frobnicate
	[[ "$stderr" == *"frobnicate"* ]]
	run_isopod -100
	run_isopod -100 vm frob
	run_isopod -0 help
	[[ "$output" == *"isopod run"* ]]
	run_isopod -0 version
	[[ "$output" == "isopod "* ]]
	run_isopod -0 run --help
	[[ "$output" == "usage: isopod run"* ]]
}

# ---- vm, image, doctor ------------------------------------------------------------

@test "vm ls: an empty store prints nothing and exits 0" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/empty"
	run_isopod -0 vm ls
	[ -z "$output" ]
	mkdir -p "$ISOPOD_HOME/vms"
	run_isopod -0 vm ls
	[ -z "$output" ]
}

@test "vm rm: an unknown vm is 101 naming it; an ambiguous prefix is 102" {
	run_isopod -101 vm rm nosuchvm
	[[ "$stderr" == *"nosuchvm"* ]]
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	mkdir -p "$ISOPOD_HOME/vms/vm-abc000000001" "$ISOPOD_HOME/vms/vm-abc000000002"
	echo '{"id":"vm-abc000000001","name":"one"}' >"$ISOPOD_HOME/vms/vm-abc000000001/meta.json"
	echo '{"id":"vm-abc000000002","name":"two"}' >"$ISOPOD_HOME/vms/vm-abc000000002/meta.json"
	run_isopod -102 vm rm abc
	[[ "$stderr" == *"ambiguous"* ]]
	# nothing removed when one of several references is unknown
	run_isopod -101 vm rm one nosuchvm
	[ -d "$ISOPOD_HOME/vms/vm-abc000000001" ]
	run_isopod -0 vm rm two vm-abc000000001
	json_is '.removed == ["vm-abc000000002", "vm-abc000000001"]'
	[ -z "$(ls -A "$ISOPOD_HOME/vms")" ]
}

@test "vm ls: isopod-vm prints what the shell's jq per record printed: every record + running, oldest first" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local i id
	for i in 3 1 2 4; do
		id=vm-00000000000$i
		mkdir -p "$ISOPOD_HOME/vms/$id"
		jq -n --arg id "$id" --arg c "2026-12-01T00:00:0${i/4/1}Z" \
			'{id: $id, name: ("n" + $id[-1:]), created: $c, state: "stopped", vcpus: 1, base: {flavor: "base"}, net: null}' \
			>"$ISOPOD_HOME/vms/$id/meta.json"
	done
	# one without created (first), one malformed (left out, with a warning)
	mkdir -p "$ISOPOD_HOME/vms/vm-000000000005" "$ISOPOD_HOME/vms/vm-000000000006" "$ISOPOD_HOME/vms/vm-000000000007"
	echo '{"id":"vm-000000000005","name":"five"}' >"$ISOPOD_HOME/vms/vm-000000000005/meta.json"
	echo '{"id":"vm-000000000001","name":"six"}' >"$ISOPOD_HOME/vms/vm-000000000006/meta.json"
	hold_lock "$ISOPOD_HOME/vms/vm-000000000002/lock"
	run_isopod -0 vm ls
	kill "$holder"
	# the reference: the front end's old pipeline (a jq per record, then a sort)
	want=$(for m in "$ISOPOD_HOME"/vms/vm-00000000000[12345]/meta.json; do
		r=false
		[ "$m" != "$ISOPOD_HOME/vms/vm-000000000002/meta.json" ] || r=true
		jq -c --argjson running "$r" '. + {running: $running}' "$m"
	done | jq -c -s 'sort_by(.created // "") | .[]')
	[ "$output" = "$want" ]
	[ "$(jq -r .id <<<"$output" | tr '\n' ' ')" = "vm-000000000005 vm-000000000001 vm-000000000004 vm-000000000002 vm-000000000003 " ]
	[[ "$stderr" == *"isopod-vm: warning: skipping unreadable record of vm-000000000006"* ]]
	# (7 has no meta.json yet: a claim under way, left out without a word)
	[[ "$stderr" != *"vm-000000000007"* ]]
	run_isopod -100 vm ls extra
}

@test "isopod-vm show: every REF resolved before anything is printed; 100 / 101 / 102 as every tool" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	mkdir -p "$ISOPOD_HOME/vms/vm-abc000000001" "$ISOPOD_HOME/vms/vm-abc000000002"
	echo '{"id":"vm-abc000000001","name":"one"}' >"$ISOPOD_HOME/vms/vm-abc000000001/meta.json"
	echo '{"id":"vm-abc000000002","name":"two"}' >"$ISOPOD_HOME/vms/vm-abc000000002/meta.json"
	run --separate-stderr isopod-vm show two vm-abc000000001 abc000000002
	[ "$status" -eq 0 ]
	[ "$(jq -r .id <<<"$output" | tr '\n' ' ')" = "vm-abc000000002 vm-abc000000001 vm-abc000000002 " ]
	json_is '.running == false'
	run --separate-stderr isopod-vm show one abc
	[ "$status" -eq 102 ] && [ -z "$output" ] || false
	[ "$stderr" = "isopod-vm: fatal: vm reference abc is ambiguous; candidates: vm-abc000000001 vm-abc000000002" ] ||
		[ "$stderr" = "isopod-vm: fatal: vm reference abc is ambiguous; candidates: vm-abc000000002 vm-abc000000001" ]
	run --separate-stderr isopod-vm show one nosuchvm
	[ "$status" -eq 101 ] && [ -z "$output" ] || false
	[ "$stderr" = "isopod-vm: fatal: no such vm: nosuchvm" ]
	run --separate-stderr isopod-vm show one 'Bad!'
	[ "$status" -eq 100 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"bad vm reference"* ]]
	run --separate-stderr isopod-vm show
	[ "$status" -eq 100 ]
	run --separate-stderr isopod-vm -h
	[ "$status" -eq 0 ] && [ "$output" = "usage: isopod-vm ls | isopod-vm show REF... | isopod-vm resolve REF..." ] || false
	# resolve: ids and directories only, the same statuses; a record that cannot be read
	# still resolves by id (show refuses it: 111), and vm rm removes it
	echo '{"id":"vm-abc000000001","name":"one","name":"dup"}' >"$ISOPOD_HOME/vms/vm-abc000000002/meta.json"
	run --separate-stderr isopod-vm resolve one vm-abc000000002
	[ "$status" -eq 0 ]
	[ "$output" = '{"ref":"one","id":"vm-abc000000001","dir":"'"$ISOPOD_HOME"'/vms/vm-abc000000001"}'$'\n''{"ref":"vm-abc000000002","id":"vm-abc000000002","dir":"'"$ISOPOD_HOME"'/vms/vm-abc000000002"}' ]
	run --separate-stderr isopod-vm resolve one abc
	[ "$status" -eq 102 ] && [ -z "$output" ] || false
	run --separate-stderr isopod-vm resolve nosuchvm
	[ "$status" -eq 101 ] && [ -z "$output" ] || false
	run --separate-stderr isopod-vm show vm-abc000000002
	[ "$status" -eq 111 ] && [ -z "$output" ] || false
	[[ "$stderr" == *"unable to read the record of vm vm-abc000000002"* ]]
	run_isopod -0 vm rm vm-abc000000002
	json_is '.removed == ["vm-abc000000002"]'
	[ ! -e "$ISOPOD_HOME/vms/vm-abc000000002" ]
}

@test "vm stop: the REF reaches isopod-stop as --vm REF, its options as they are" {
	use_fake
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	mkdir -p "$ISOPOD_HOME/vms/vm-abc000000001"
	echo '{"id":"vm-abc000000001","name":"one"}' >"$ISOPOD_HOME/vms/vm-abc000000001/meta.json"
	run_isopod -0 vm stop --force vm-abc000000001
	grep -qx "stop --force --vm vm-abc000000001" "$FAKE_LOG"
}

@test "image ls: one line per kernel and base image, the current ones marked" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	mkdir -p "$ISOPOD_HOME/images" "$ISOPOD_HOME/kernels/k1" "$ISOPOD_HOME/kernels/k2"
	echo '{"flavor":"base","sha256":"aaa","size":1}' >"$ISOPOD_HOME/images/base-aaa.json"
	echo '{"flavor":"base","sha256":"bbb","size":2}' >"$ISOPOD_HOME/images/base-bbb.json"
	echo bbb >"$ISOPOD_HOME/images/current-base"
	echo '{"note":"x"}' >"$ISOPOD_HOME/kernels/k1/meta.json"
	echo '{"agent_protocol":7}' >"$ISOPOD_HOME/kernels/k2/meta.json"
	echo k1 >"$ISOPOD_HOME/kernels/current"
	run_isopod -0 image ls
	[ "$(wc -l <<<"$output")" -eq 4 ]
	# the agent protocol the kernel's initramfs speaks: null before the stamp
	[ "$(jq -sc 'map(select(.kind == "kernel")) | map(.agent_protocol)' <<<"$output")" = '[null,7]' ]
	[ "$(jq -s 'map(select(.current)) | map(.kind + ":" + .sha256) | sort | join(",")' <<<"$output")" = '"base:bbb,kernel:k1"' ]
	[ "$(jq -s 'map(select(.current | not)) | length' <<<"$output")" -eq 2 ]
	run_isopod -0 image version
	json_is '.version == "'"$(sed -n 's/^#define ISOPOD_VERSION "\(.*\)"$/\1/p' "$ISOPOD_SRC/lib/util.h")"'" and .protocol == '"$(sed -n 's/^#define ISOPOD_PROTO_NUM //p' "$ISOPOD_SRC/lib/frame.h")"
}

@test "doctor --quick: JSON with an accel field; 0 only when a run can work" {
	run --separate-stderr isopod doctor --quick
	[ "$status" -eq 0 ] || [ "$status" -eq 111 ]
	json_is 'has("accel") and (.accel | type == "string")'
	json_is '(.qemu | has("version")) and (.kernel | has("present")) and (.base | has("present"))'
	json_is '.shell.pipefail == true'
	if [ "$status" -eq 111 ]; then
		json_is '.ok == false and (.missing | length > 0)'
		[[ "$stderr" == *"missing"* ]]
	else
		json_is '.ok == true and .missing == []'
	fi
}

# fake_base SHA: a registered base image (its bytes do not matter here).
fake_base() {
	mkdir -p "$ISOPOD_HOME/images"
	echo "image $1" >"$ISOPOD_HOME/images/base-$1.img"
	jq -n --arg s "$1" '{flavor: "base", sha256: $s, size: 6}' >"$ISOPOD_HOME/images/base-$1.json"
}

# fake_stage ID SHA: a stage record standing on base SHA.
fake_stage() {
	mkdir -p "$ISOPOD_HOME/stages/$1"
	jq -n --arg id "$1" --arg s "$2" '{id: $id, name: $id, label: null, parent: null, depth: 1,
		base: {flavor: "base", sha256: $s}}' >"$ISOPOD_HOME/stages/$1/meta.json"
}

# images/mkinitramfs writes the newc archive itself (no linux-source, no
# compiler, no cache): with a PATH of only the commands it may use, twice.
@test "mkinitramfs: with a shell, wc, cat and mv alone; the same bytes twice; /init the agent, the entries gen_init_cpio wrote; the protocol stamp inside" {
	local d=$BATS_TEST_TMPDIR t
	mkdir "$d/bin"
	for t in sh dirname wc cat mv rm; do ln -s "$(command -v "$t")" "$d/bin/$t"; done
	for i in 1 2; do
		run --separate-stderr env PATH="$d/bin" ISOPOD_CACHE="$d/c$i" \
			sh "$ISOPOD_SRC/images/mkinitramfs" "$ISOPOD_SRC/agent/isopod-agent" "$d/$i.cpio"
		[ "$status" -eq 0 ] || { echo "$stderr" >&2; false; }
	done
	[ ! -e "$d/c1" ] && [ ! -e "$d/c2" ] || false
	cmp "$d/1.cpio" "$d/2.cpio"
	[ "$(($(stat -c %s "$d/1.cpio") % 512))" -eq 0 ]
	# the archive the kernel's usr/gen_init_cpio -t 0 wrote for this list
	[ "$(cpio -itv <"$d/1.cpio" 2>/dev/null | awk '{print $1, $2, $3, $4, $NF}' | tr '\n' ';')" = \
		"drwxr-xr-x 2 root root dev;crw------- 1 root root dev/console;drwxr-xr-x 2 root root mnt;drwxr-xr-x 2 root root newroot;dr-xr-xr-x 2 root root proc;dr-xr-xr-x 2 root root sys;-rwxr-xr-x 1 root root init;" ]
	cpio -itv <"$d/1.cpio" 2>/dev/null | grep -q ' 5, *1 .* dev/console$'
	[ -z "$(cpio -itv <"$d/1.cpio" 2>/dev/null | grep -v ' 1970 ')" ]
	mkdir "$d/x"
	(cd "$d/x" && cpio -id init <"$d/1.cpio" 2>/dev/null)
	cmp "$d/x/init" "$ISOPOD_SRC/agent/isopod-agent"
	# what images/register stamps into the kernel's record
	[ "$(LC_ALL=C grep -ao 'isopod-agent-protocol=[0-9]*;' "$d/1.cpio")" = \
		"isopod-agent-protocol=$(sed -n 's/^#define ISOPOD_PROTO_NUM //p' "$ISOPOD_SRC/lib/frame.h");" ]
}

@test "image rm: a bad sha is 100, an unknown one 101; a free base goes with its current pointer" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local a b
	a=$(printf a | sha256sum | cut -d' ' -f1) b=$(printf b | sha256sum | cut -d' ' -f1)
	run_isopod -100 image rm 'abc'
	[[ "$stderr" == *"'abc' is not a sha256"* ]]
	run_isopod -100 image rm "${a^^}"
	run_isopod -101 image rm "$a"
	[[ "$stderr" == *"no such base image: $a"* ]]
	[ ! -e "$ISOPOD_HOME" ]     # an unknown sha leaves an absent store absent
	fake_base "$a"
	fake_base "$b"
	echo "$a" >"$ISOPOD_HOME/images/current-base"
	run_isopod -0 image rm "$a"
	json_is '.removed == ["'"$a"'"]'
	[ "$(jq -c . <<<"$output")" = '{"removed":["'"$a"'"]}' ]
	[ ! -e "$ISOPOD_HOME/images/base-$a.img" ] && [ ! -e "$ISOPOD_HOME/images/base-$a.json" ] || false
	[ ! -e "$ISOPOD_HOME/images/current-base" ]
	[ -e "$ISOPOD_HOME/images/base-$b.img" ]
	run_isopod -0 image ls
	[ "$(jq -r .sha256 <<<"$output")" = "$b" ]
}

@test "image rm: refused (102, naming them) while a stage or a running VM stands on the base" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local a vm=vm-0123456789ab
	a=$(printf a | sha256sum | cut -d' ' -f1)
	fake_base "$a"
	fake_stage st-00000000000b "$a"
	fake_stage st-00000000000a "$a"
	run_isopod -102 image rm "$a"
	[[ "$stderr" == *"base $a is pinned by stages st-00000000000a st-00000000000b; remove them first"* ]]
	run_isopod -0 image ls
	[ "$(jq -c .stages <<<"$output")" = '["st-00000000000a","st-00000000000b"]' ]
	rm -rf "$ISOPOD_HOME/stages"
	# a running VM (its lock held) booted on it
	mkdir -p "$ISOPOD_HOME/vms/$vm"
	jq -n --arg id "$vm" --arg s "$a" '{id: $id, name: "busy-vm", state: "running",
		base: {flavor: "base", sha256: $s}}' >"$ISOPOD_HOME/vms/$vm/meta.json"
	hold_lock "$ISOPOD_HOME/vms/$vm/lock"
	run_isopod -102 image rm "$a"
	kill "$holder"
	wait "$holder" 2>/dev/null || true
	[[ "$stderr" == *"base $a is in use by running VMs $vm; stop them first"* ]]
	[ -e "$ISOPOD_HOME/images/base-$a.img" ]
	# stopped, the record no longer pins it
	run_isopod -0 image rm "$a"
	[ ! -e "$ISOPOD_HOME/images/base-$a.img" ]
}

@test "stage rm: a record booting or running is in use only while its VM's lock is held; a claimed one always (102, naming it)" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local a st=st-00000000000c vm=vm-0123456789ab s
	a=$(printf a | sha256sum | cut -d' ' -f1)
	fake_base "$a"
	mkdir -p "$ISOPOD_HOME/vms/$vm"
	for s in claimed booting running; do
		fake_stage "$st" "$a"
		jq -n --arg id "$vm" --arg st "$st" --arg s "$s" '{id: $id, name: "on-stage", state: $s,
			layers: [$st]}' >"$ISOPOD_HOME/vms/$vm/meta.json"
		hold_lock "$ISOPOD_HOME/vms/$vm/lock"
		run_isopod -102 stage rm "$st"
		kill "$holder"
		wait "$holder" 2>/dev/null || true
		[[ "$stderr" == *"stage $st is in use by vm $vm (on-stage, "* ]]
		[ -e "$ISOPOD_HOME/stages/$st/meta.json" ]
		if [ "$s" = claimed ]; then
			# claimed, about to boot: refused with its lock free
			run_isopod -102 stage rm "$st"
			[[ "$stderr" == *"stage $st is in use by vm $vm (on-stage, claimed)"* ]]
			rm -rf "${ISOPOD_HOME:?}/stages/$st"
			continue
		fi
		# the lock free: a boot that was killed, or a host crash that
		# undid the running note; gone, whatever the record says
		run_isopod -0 stage rm "$st"
		json_is '.removed == ["'"$st"'"]'
		[ ! -e "$ISOPOD_HOME/stages/$st" ]
	done
}

@test "image rm: decides under the store lock; a stage published meanwhile (as a commit does, under that lock) pins the base" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local a pid rc=0
	a=$(printf a | sha256sum | cut -d' ' -f1)
	fake_base "$a"
	hold_lock "$ISOPOD_HOME/locks/store"
	isopod image rm "$a" >"$BATS_TEST_TMPDIR/rm.json" 2>"$BATS_TEST_TMPDIR/rm.err" &
	pid=$!
	sleep 1
	# still waiting for the lock, nothing removed
	kill -0 "$pid"
	[ -e "$ISOPOD_HOME/images/base-$a.img" ]
	fake_stage st-0000000000c1 "$a"
	kill "$holder"
	wait "$holder" 2>/dev/null || true
	wait "$pid" || rc=$?
	[ "$rc" -eq 102 ]
	grep -q "pinned by stages st-0000000000c1" "$BATS_TEST_TMPDIR/rm.err"
	[ ! -s "$BATS_TEST_TMPDIR/rm.json" ]
	[ -e "$ISOPOD_HOME/images/base-$a.img" ]
}

@test "image where: the store, cache and config files as the tools decide them; the front end and images/ ask it" {
	# root: the fixed places, each variable first
	run --separate-stderr env -u ISOPOD_HOME -u ISOPOD_CACHE -u ISOPOD_CONFIG -u XDG_CONFIG_HOME \
		-u ISOPOD_SYSCONFIG HOME=/r "$ISOPOD_SRC/bin/isopod-image" where
	[ "$status" -eq 0 ]
	json_is '.store == "/var/lib/isopod" and .cache == "/var/cache/isopod"
		and .config.host == "/etc/isopod/config" and .config.user == "/r/.config/isopod/config"'
	run --separate-stderr env ISOPOD_HOME=/s ISOPOD_CACHE=/c ISOPOD_CONFIG=/u ISOPOD_SYSCONFIG=/y \
		"$ISOPOD_SRC/bin/isopod-image" where
	json_is '.store == "/s" and .cache == "/c" and .config.user == "/u" and .config.host == "/y"'
	# a user: HOME, else the password database's home (nobody's: /nonexistent)
	local as_user=(setpriv --reuid 65534 --regid 65534 --clear-groups env -u ISOPOD_HOME -u ISOPOD_CACHE
		-u XDG_CACHE_HOME -u ISOPOD_CONFIG -u XDG_CONFIG_HOME)
	run --separate-stderr "${as_user[@]}" HOME=/h "$ISOPOD_SRC/bin/isopod-image" where
	json_is '.store == "/h/.isopod" and .cache == "/h/.cache/isopod"'
	run --separate-stderr "${as_user[@]}" -u HOME "$ISOPOD_SRC/bin/isopod-image" where
	json_is '.store == "/nonexistent/.isopod" and .cache == "/nonexistent/.cache/isopod"'
	# images/ (register's default store, every build's cache) and the front end's help agree;
	# $0 is an images/ script's, as when one sources lib.sh
	run --separate-stderr "${as_user[@]}" HOME=/h sh -c \
		'prog=t; . "${0%/*}/lib.sh"; printf "%s|%s\n" "$(home_dir)" "$(cache_dir)"' "$ISOPOD_SRC/images/x"
	[ "$status" -eq 0 ]
	[ "$output" = "/h/.isopod|/h/.cache/isopod" ]
	run --separate-stderr "${as_user[@]}" -u HOME sh -c \
		'prog=t; . "${0%/*}/lib.sh"; printf "%s|%s\n" "$(home_dir)" "$(cache_dir)"' "$ISOPOD_SRC/images/x"
	[ "$output" = "/nonexistent/.isopod|/nonexistent/.cache/isopod" ]
	run --separate-stderr "${as_user[@]}" HOME=/h "$ISOPOD_SRC/sh/isopod" help
	[[ "$output" == *"Store: /h/.isopod (ISOPOD_HOME)"* ]]
	# a path too long to use: 100, stdout empty
	run --separate-stderr env ISOPOD_CACHE="/$(printf 'c%.0s' $(seq 1 5000))" "$ISOPOD_SRC/bin/isopod-image" where
	[ "$status" -eq 100 ] && [ -z "$output" ] && [[ "$stderr" == *"too long"* ]] || false
}

@test "image: usage errors are 100 with the usage line; an unknown flavor is 100" {
	run_isopod -100 image
	[[ "$stderr" == *"usage: isopod-image ls | isopod-image build [FLAVOR] | isopod-image rm SHA256"* ]]
	run_isopod -100 image frob
	[[ "$stderr" == *"unknown image subcommand 'frob'"* ]]
	run_isopod -100 image ls extra
	run_isopod -100 image rm
	run_isopod -100 image build base debian
	run_isopod -100 image build nosuch
	[[ "$stderr" == *"unknown flavor 'nosuch'; known: base, debian"* ]]
	[ -z "$output" ]
	run_isopod -0 image -h
	[[ "$output" == "usage: isopod-image "* ]]
}

# doctor_json ARGS...: run_isopod, and the doctor printed its report (jq 1.6's
# -e passes on empty input: json_is alone would pass on nothing).
doctor_json() {
	run_isopod "$@"
	[ -n "$output" ]
}

@test "doctor --quick: every field, the accelerator as lib/accel.c decides it, 111 naming what is missing" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	# the host's verdict cache of this test's own: none for this kernel
	export ISOPOD_ACCEL_HOST_CACHE_DIR="$BATS_TEST_TMPDIR/hostcache"
	local ksha=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef v
	# an empty store: kernel and base missing, exit 111 naming them
	ISOPOD_KVM_DEV=/nonexistent/kvm doctor_json -111 doctor --quick
	[[ "$stderr" == *"a run cannot work here; missing: kernel base-image"* ]]
	json_is '.ok == false and (.missing | index("kernel") and index("base-image"))'
	json_is '.accel == "tcg" and (.accel_reason | startswith("/nonexistent/kvm: "))'
	json_is '.accel_probed == false and .kvm == {device: "/nonexistent/kvm", present: false, usable: false, pvm: .kvm.pvm}'
	json_is '(.kvm.pvm | type == "boolean") and .qemu.binary == "qemu-system-x86_64"'
	json_is '.kernel == {present: false, sha256: null} and .base == {present: false, flavor: "base", sha256: null}'
	json_is '(.shell.path | startswith("/")) and .shell.pipefail == true'
	json_is '.home == "'"$ISOPOD_HOME"'" and (.libexec | type == "string")'
	json_is '.tools == ["claim", "boot", "exec", "stop", "gc", "broker"]'
	json_is '.net.default_mode == "none" and (.net.filtered_slots | type == "number") and (.net.open_slots | type == "number")'
	json_is '.warnings == [] and (has("run") | not)'
	# the store's TSC rate: none kept yet (the doctor never measures it)
	json_is '.tsc_khz == null and .tsc_reason == "not measured yet: the first TCG boot measures it"'
	[ "$(jq -r 'keys_unsorted | join(",")' <<<"$output")" = ok,version,accel,accel_reason,accel_probed,tsc_khz,tsc_reason,kvm,qemu,kernel,base,shell,home,libexec,tools,net,cgroup,pool,warnings,missing ]
	# the version is the front end's
	# and the protocol lib/frame.h's (the front end keeps no copy of either)
	proto=$(sed -n 's/^#define ISOPOD_PROTO_NUM \([0-9]*\)$/\1/p' "$ISOPOD_SRC/lib/frame.h")
	[ -n "$proto" ]
	v=$(isopod version)
	[ "$v" = "isopod $(jq -r .version <<<"$output") (protocol $proto)" ]
	! grep -n 'PROTOCOL_VERSION=\|ISOPOD_VERSION=' "$ISOPOD_SRC/sh/isopod" || false
	# a kernel and a base: present, with their sha256
	mkdir -p "$ISOPOD_HOME/kernels/$ksha" "$ISOPOD_HOME/accel"
	: >"$ISOPOD_HOME/kernels/$ksha/vmlinux"
	: >"$ISOPOD_HOME/kernels/$ksha/initramfs.cpio"
	echo "$ksha" >"$ISOPOD_HOME/kernels/current"
	fake_base "$ksha"
	echo "$ksha" >"$ISOPOD_HOME/images/current-base"
	# a kernel whose agent speaks another protocol (or whose record has no
	# stamp) is no kernel a run can boot
	echo '{"agent_protocol": 999}' >"$ISOPOD_HOME/kernels/$ksha/meta.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json -111 doctor --quick
	json_is '.kernel.present == false and (.missing | index("kernel"))'
	echo '{}' >"$ISOPOD_HOME/kernels/$ksha/meta.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json -111 doctor --quick
	json_is '.kernel.present == false and (.missing | index("kernel"))'
	echo "{\"agent_protocol\": $proto}" >"$ISOPOD_HOME/kernels/$ksha/meta.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json doctor --quick
	json_is '.kernel == {present: true, sha256: "'"$ksha"'"} and .base.present == true and .base.sha256 == "'"$ksha"'"'
	json_is '(.missing | index("kernel") | not) and (.missing | index("base-image") | not)'
	# a device that opens and no verdict: unknown, never a probe from the doctor
	json_is '.accel == "unknown" and (.accel_reason | startswith("not probed yet: /dev/null is present")) and .accel_probed == false'
	[ ! -e "$ISOPOD_HOME/accel/$ksha.json" ] && [ ! -e "$ISOPOD_HOME/accel/$ksha.lock" ] || false
	# the cached verdict of the probe a boot made
	echo '{"accel":"kvm","reason":"kvm: the agent answered in 9 ms","probed":"2026-12-01T00:00:00Z"}' >"$ISOPOD_HOME/accel/$ksha.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json doctor --quick
	json_is '.accel == "kvm" and .accel_reason == "kvm: the agent answered in 9 ms" and .accel_probed == true'
	# forced
	ISOPOD_ACCEL=tcg ISOPOD_KVM_DEV=/dev/null doctor_json doctor --quick
	json_is '.accel == "tcg" and .accel_reason == "forced by ISOPOD_ACCEL" and .accel_probed == false'
	ISOPOD_ACCEL=kvm ISOPOD_KVM_DEV=/nonexistent/kvm doctor_json -111 doctor --quick
	json_is '.accel == "kvm" and (.accel_reason | contains("unable to open /nonexistent/kvm"))'
	json_is '.missing | index("kvm(forced-by-ISOPOD_ACCEL:unusable)")'
	# a kept TSC rate of another CPU is none
	echo '{"format":1,"tsc_khz":2000000,"cpu":"another","measured":"2026-12-01T00:00:00Z"}' >"$ISOPOD_HOME/accel/tsc.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json doctor --quick
	json_is '.tsc_khz == null and .tsc_reason == "accel/tsc.json: measured on another CPU; the next TCG boot measures it again"'
	echo '{"format":1,' >"$ISOPOD_HOME/accel/tsc.json"
	ISOPOD_KVM_DEV=/dev/null doctor_json doctor --quick
	json_is '.tsc_khz == null and .tsc_reason == "accel/tsc.json: not readable as JSON; the next TCG boot measures it again"'
	rm "$ISOPOD_HOME/accel/tsc.json"
	# the default mode is the front end's (environment, then config)
	ISOPOD_NET=open doctor_json doctor --quick
	json_is '.net.default_mode == "open"'
	run_isopod -100 doctor --frob
	run_isopod -0 doctor -h
	[[ "$output" == "usage: isopod-doctor "* ]]
}

# cgroup_ro CMD...: CMD in a private mount namespace whose cgroup
# hierarchies (every cgroup and cgroup2 mount) are read-only: a host where
# none is writable, as the jail and the doctor both find it (mountinfo).
cgroup_ro() {
	unshare -m --propagation private sh -c '
		for m in $(awk "\$9 ~ /^cgroup2?\$/ {print \$5}" /proc/self/mountinfo); do
			mount -o remount,bind,ro "$m" || exit 99
		done
		exec "$@"' sh "$@"
}

# The doctor's cgroup check is the jail's own cgroup step (lib/jail.c
# jail_cg_check, cg_setup), done for real: an empty isopod-doctor-<pid>
# made where a run's jail would make its cgroups, then removed.  A
# hierarchy it cannot write is the run's own warning, naming the path and
# the error, and never what a run misses: runs proceed without the limit.
@test "doctor --quick: the cgroup check makes and removes a child where the jail would; none writable (read-only, or unmounted) is a warning naming path and errno, not missing" {
	[ "$(id -u)" -eq 0 ] || skip "needs root: a mount namespace, the host's cgroups"
	[ -d /sys/fs/cgroup/pids ] || [ -e /sys/fs/cgroup/cgroup.controllers ] || skip "no cgroup hierarchy"
	local st0
	run --separate-stderr isopod-doctor --quick --net none
	st0=$status
	echo "$output" | jq -c .cgroup
	json_is '.cgroup.ok == true and .cgroup.warnings == [] and (.cgroup.hierarchy == "v1" or .cgroup.hierarchy == "v2")'
	json_is '.cgroup.limits == ["memory", "pids"] and (.cgroup.paths | length >= 1)'
	json_is '[.cgroup.paths[] | test("/isopod-doctor-[0-9]+$")] | all'
	json_is '[.warnings[] | select(startswith("jail:"))] == []'
	# made and removed again
	for p in $(jq -r '.cgroup.paths[]' <<<"$output"); do
		[ -d "$(dirname "$p")" ] && [ ! -e "$p" ] || false
	done
	# every hierarchy read-only: the run's warning for each limit
	run --separate-stderr cgroup_ro isopod-doctor --quick --net none
	echo "$output" | jq -c .cgroup
	# the same exit status: a warning, never what a run misses
	[ "$status" -eq "$st0" ]
	json_is '.cgroup.ok == false and .cgroup.hierarchy == "none" and .cgroup.limits == [] and .cgroup.paths == []'
	json_is '(.cgroup.warnings | length == 2) and .cgroup.warnings == [.warnings[] | select(startswith("jail:"))]'
	json_is '.cgroup.warnings[0] | test("^jail: no memory limit: mkdir /sys/fs/cgroup/.*/isopod-doctor-[0-9]+: Read-only file system$")'
	json_is '.cgroup.warnings[1] | test("^jail: no pids limit: mkdir /sys/fs/cgroup/.*/isopod-doctor-[0-9]+: Read-only file system$")'
	json_is '.missing | map(select(test("cgroup|jail"))) == []'
	# no hierarchy mounted at all
	run --separate-stderr unshare -m --propagation private sh -c 'umount -R /sys/fs/cgroup && exec "$@"' sh \
		isopod-doctor --quick --net none
	json_is '.cgroup == {hierarchy: "none", limits: [], paths: [], ok: false, warnings: ["jail: no memory limit: no cgroup memory controller", "jail: no pids limit: no cgroup pids controller"]}'
}

# ---- the run flow, through stand-in tools -----------------------------------------

@test "run: boot and exec JSON merged; exit status is the command's; VM stopped" {
	use_fake
	FAKE_EXIT=3 run_isopod -3 run --json-only -- sh -c 'exit 3'
	json_is '.ok == true and .exit_code == 3 and .stdout == "fake out\n"'
	json_is '(.vm.id | startswith("vm-")) and .vm.name == "fake-vm"'
	json_is '.accel == "tcg" and .accel_reason == "fake: no usable KVM" and .path == "cold"'
	json_is '.timings.boot_ms == 42 and .timings.exec_ms == 7 and (.timings.total_ms | type == "number")'
	json_is '.warnings == []'
	[ "$(wc -l <<<"$output")" -eq 1 ]
	id=$(jq -r .vm.id <<<"$output")
	grep -q "^boot --vm $id --owner-pid [0-9]* --ephemeral --timeout-ms [0-9]*$" "$FAKE_LOG"
	# exec's --stop stopped it (the file made): the front end stopped nothing
	grep -qx "exec-stop --vm $id" "$FAKE_LOG"
	! grep -q '^stop' "$FAKE_LOG" || false
	! vm_locked "$id" || false
	FAKE_EXIT=0 run_isopod -0 run --json-only -- true
	FAKE_EXIT=137 run_isopod -137 run --json-only -- true
	json_is '.signal == 9'
}

@test "run: the scratch directory is gone after the run, whether it succeeded, a step failed or the front end refused" {
	use_fake
	local t="$BATS_TEST_TMPDIR/tmp"
	mkdir "$t"
	TMPDIR=$t run_isopod -0 run --json-only -- true
	[ -z "$(ls -A "$t")" ]
	TMPDIR=$t FAKE_CLAIM_FAIL=1 run_isopod -102 run --json-only -- true
	[ -z "$(ls -A "$t")" ]
	TMPDIR=$t run_isopod -100 run --json-only --timeout-s 0 -- true
	[ -z "$(ls -A "$t")" ]
	[ -z "$(ls -A "$ISOPOD_HOME/runs")" ]
}

@test "run: the scratch directory is isopod-claim's (runs/ in the store, 0700, no mktemp); gc sweeps a SIGKILLed run's, never a live one's" {
	use_fake
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	# no TMPDIR to make one in: the run needs none
	TMPDIR="$BATS_TEST_TMPDIR/none" run_isopod -0 run --json-only -- true
	[ -z "$(ls -A "$ISOPOD_HOME/runs")" ]
	# a live owner's (this shell's) stays through gc
	live=$(isopod-claim --scratch $$ | sed -n 3p)
	[ "$(stat -c %a "$live")" = 700 ]
	rm "$FAKE_LOG"
	FAKE_EXEC_SLEEP=30 isopod run --json-only -- sleep 30 >/dev/null 2>&1 3>&- &
	pid=$!
	for _ in $(seq 1 200); do
		grep -q '^exec-sleeping' "$FAKE_LOG" 2>/dev/null && break
		sleep 0.05
	done
	d=$(echo "$ISOPOD_HOME"/runs/vm-*."$pid".*)
	[ -d "$d" ]
	[ "$(stat -c %a "$d")" = 700 ]
	[ -f "$d/claim.json" ]
	kids=$(pgrep -P "$pid") || :
	kill -KILL "$pid"
	wait "$pid" || :
	[ -z "$kids" ] || kill $kids 2>/dev/null || :
	id=${d##*/}
	"$ISOPOD_SRC/t/fake/isopod-stop" --force --vm "${id%%.*}" >/dev/null
	[ -d "$d" ]
	run --separate-stderr isopod-gc
	[ "$status" -eq 0 ]
	jq -e --arg d "$d" '[.leaked[] | select(.kind == "run" and .path == $d and .removed)] | length == 1' <<<"$output"
	[ ! -e "$d" ]
	[ -d "$live" ]
}

@test "claim: names stay unique with the names cache (<store>/names.json, 0600, not in vms/): a record renamed or removed behind it frees its name" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	local a b
	a=$(isopod-claim --name cache-a | jq -r .vm.id)
	b=$(isopod-claim --name cache-b | jq -r .vm.id)
	[ "$(stat -c %a "$ISOPOD_HOME/names.json")" = 600 ]
	[ -z "$(ls -A "$ISOPOD_HOME/vms" | grep -v '^vm-[0-9a-f]\{12\}$')" ]
	jq -e --arg a "$a" '.vms[$a][0] == "cache-a"' "$ISOPOD_HOME/names.json"
	run --separate-stderr isopod-claim --name cache-a
	[ "$status" -eq 102 ] && [ "$stderr" = "isopod-claim: fatal: name cache-a is taken" ] || false
	# a's record another file now (as lib/vm.c writes one), named otherwise
	jq '.name = "cache-c"' "$ISOPOD_HOME/vms/$a/meta.json" >"$BATS_TEST_TMPDIR/m"
	mv "$BATS_TEST_TMPDIR/m" "$ISOPOD_HOME/vms/$a/meta.json"
	run --separate-stderr isopod-claim --name cache-c
	[ "$status" -eq 102 ]
	run --separate-stderr isopod-claim --name cache-a
	[ "$status" -eq 0 ] && [ -z "$stderr" ] || false
	# b removed (as gc does): its name free again
	rm -r "${ISOPOD_HOME:?}/vms/$b"
	run --separate-stderr isopod-claim --name cache-b
	[ "$status" -eq 0 ]
}

@test "gc: a runs/ that is a symbolic link is not followed (root's gc on a user's store); a dead run's directory there stays" {
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	mkdir -p "$ISOPOD_HOME" "$BATS_TEST_TMPDIR/other/vm-000000000000.99999999.1"
	ln -s "$BATS_TEST_TMPDIR/other" "$ISOPOD_HOME/runs"
	run --separate-stderr isopod-gc
	[ "$status" -eq 0 ]
	jq -e '[.leaked[] | select(.kind == "run")] | length == 0' <<<"$output"
	[ -d "$BATS_TEST_TMPDIR/other/vm-000000000000.99999999.1" ]
}

@test "run: resources and --keep reach isopod-boot; the owner pid is isopod's own" {
	use_fake
	run_isopod -0 run --json-only --vcpus 1 --mem-mib 128 --disk-mib 100 -- true
	grep -q "^boot --vm vm-[0-9a-f]\{12\} --owner-pid [0-9]* --vcpus 1 --mem-mib 128 --disk-mib 100 --ephemeral --timeout-ms [0-9]*$" "$FAKE_LOG"
	owner=$(grep '^boot' "$FAKE_LOG" | sed 's/^boot --vm [^ ]* --owner-pid \([0-9]*\).*/\1/')
	[ "$owner" = "$(cat "$FAKE_DIR/boot.ppid")" ]
	ISOPOD_MEM_MIB=96 run_isopod -0 run --json-only -- true
	grep -q -- "--mem-mib 96 --ephemeral --timeout-ms" "$FAKE_LOG"
	id=$(jq -r .vm.id <<<"$output")
	! vm_locked "$id" || false
}

@test "run: the run options are the tools' own (--run-options): each reaches its tool as given" {
	use_fake
	# every option a tool declares is one of run's, its arity as declared
	local opt arg
	while IFS=$'\t' read -r opt arg; do
		if [ -n "$arg" ]; then
			run_isopod -100 run --json-only "$opt"
			[[ "$stderr" == *"$opt needs a value"* ]]
		else
			run_isopod -100 run --json-only "$opt=1" -- true
			[[ "$stderr" == *"$opt takes no value"* ]]
		fi
	done < <(isopod-boot --run-options | jq -r '.run_options[] | [.option, .arg // ""] | @tsv'
		isopod-exec --run-options | jq -r '.run_options[] | [.option, .arg // ""] | @tsv')
	run_isopod -0 run --help
	[[ "$output" == *"[--cold]"*"[--env K=V]..."* ]]
	run_isopod -0 run --json-only --cold --cwd /tmp --env 'A=b c' -- true
	grep -q "^boot --vm vm-[0-9a-f]\{12\} --owner-pid [0-9]* --cold --ephemeral --timeout-ms [0-9]*$" "$FAKE_LOG"
	[[ "$(tr '\n' '|' <"$FAKE_DIR/args")" == *"|--cwd|/tmp|--env|A=b c|--|true|" ]]
	# an option the front end has never heard of, declared by isopod-boot,
	# reaches it; undeclared, it is unknown
	local lx="$BATS_TEST_TMPDIR/libexec" t
	mkdir "$lx"
	for t in claim exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	cat >"$lx/isopod-boot" <<'B'
#!/bin/sh
case $1 in
--run-options=text)
	echo '--frob X 0'
	exit 0 ;;
--check) echo '{"ok":true}'; exit 0 ;;
esac
exec "$ISOPOD_SRC/t/fake/isopod-boot" "$@"
B
	chmod +x "$lx/isopod-boot"
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --frob 'x y' -- true
	grep -q -- "--owner-pid [0-9]* --frob x y --ephemeral --timeout-ms" "$FAKE_LOG"
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --json-only --vcpus 1 -- true
	[[ "$stderr" == *"unknown option --vcpus"* ]]
	# a tool is asked for its table only for an option in none learnt so
	# far: boot's options alone ask boot alone (one process less a run);
	# exec --check only when it has something to check (its options, a
	# --stdin-file)
	rm "$lx/isopod-exec"
	cat >"$lx/isopod-exec" <<'X'
#!/bin/sh
case $1 in --run-options=text | --check) echo "$1" >>"$FAKE_DIR/exec-asked" ;; esac
exec "$ISOPOD_SRC/t/fake/isopod-exec" "$@"
X
	chmod +x "$lx/isopod-exec"
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --frob x -- true
	[ ! -e "$FAKE_DIR/exec-asked" ]
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --frob x --env A=b -- true
	[ "$(cat "$FAKE_DIR/exec-asked")" = "--run-options=text
--check" ]
	rm "$FAKE_DIR/exec-asked"
	echo in >"$BATS_TEST_TMPDIR/in"
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --stdin-file "$BATS_TEST_TMPDIR/in" -- true
	[ "$(cat "$FAKE_DIR/exec-asked")" = --check ]
	grep -q -- "--owner-pid [0-9]* --frob x --ephemeral --timeout-ms" "$FAKE_LOG"
	rm "$FAKE_LOG"
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --json-only --stdin-file "$BATS_TEST_TMPDIR/none" -- true
	no_claim
}

@test "run: a run option's table is read from the file make wrote beside its tool (no process), unless the tool is newer" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" t
	# make's tables are the tools' own
	diff <(isopod-boot --run-options=text) "$ISOPOD_SRC/bin/isopod-boot.run-options"
	diff <(isopod-exec --run-options=text) "$ISOPOD_SRC/bin/isopod-exec.run-options"
	mkdir "$lx"
	for t in claim exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	cat >"$lx/isopod-boot" <<'B'
#!/bin/sh
case $1 in
--run-options=text)
	echo asked >>"$FAKE_DIR/boot-asked"
	echo '--frob X 0'
	exit 0 ;;
--check) echo '{"ok":true}'; exit 0 ;;
esac
exec "$ISOPOD_SRC/t/fake/isopod-boot" "$@"
B
	chmod +x "$lx/isopod-boot"
	echo '--zap X 0' >"$lx/isopod-boot.run-options"
	touch -d '1 minute ago' "$lx/isopod-boot"
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --zap 'x y' -- true
	grep -q -- "--owner-pid [0-9]* --zap x y --ephemeral --timeout-ms" "$FAKE_LOG"
	[ ! -e "$FAKE_DIR/boot-asked" ]
	# a tool newer than its table: the table is stale, the tool is asked
	touch "$lx/isopod-boot"
	touch -d '1 minute ago' "$lx/isopod-boot.run-options"
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --json-only --zap x -- true
	[[ "$stderr" == *"unknown option --zap"* ]]
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --frob x -- true
	grep -q -- "--owner-pid [0-9]* --frob x --ephemeral --timeout-ms" "$FAKE_LOG"
	[ -s "$FAKE_DIR/boot-asked" ]
}

@test "run: exec output that is not JSON is an infrastructure failure (111)" {
	use_fake
	FAKE_EXEC=garbage run_isopod -111 run --json-only -- true
	json_is '.ok == false and .error_kind == "infra"'
	id=$(jq -r .vm.id <<<"$output")
	! vm_locked "$id" || false
}

@test "run: the command's argv reaches isopod-exec intact, with or without --" {
	use_fake
	run_isopod -0 run --json-only -- sh -c 'echo "$1"' x 'a b' '*' --env ''
	sed -n '/^--$/,$p' "$FAKE_DIR/args" | tail -n +2 >"$BATS_TEST_TMPDIR/got"
	printf '%s\n' sh -c 'echo "$1"' x 'a b' '*' --env '' >"$BATS_TEST_TMPDIR/want"
	diff "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/got"
	run_isopod -0 run --json-only --name box-1 echo hi
	[ "$(cat "$FAKE_DIR/argv")" = "echo
hi" ]
	grep -qx "claim --name box-1" "$FAKE_LOG"
}

@test "run: the budget reaches boot and exec as remaining milliseconds" {
	use_fake
	# 10 s, not less: under load the front end's own steps (jq, the fake
	# tools) have taken over 2 s, and the run then ends 99 before exec.
	run_isopod -0 run --json-only --timeout-s 10 -- true
	ms=$(grep '^boot' "$FAKE_LOG" | sed 's/.*--timeout-ms \([0-9]*\).*/\1/')
	[ "$ms" -gt 0 ] && [ "$ms" -le 10000 ] || false
	ms2=$(grep -A1 -x -- --timeout-ms "$FAKE_DIR/args" | tail -n1)
	[ "$ms2" -gt 0 ] && [ "$ms2" -le "$ms" ] || false
}

@test "run: stdin from a pipe is forwarded; --stdin-file passes; closed stdin is not" {
	use_fake
	run --separate-stderr bash -c 'printf "abc\n" | isopod run --json-only -- cat'
	[ "$status" -eq 0 ]
	[ "$(cat "$FAKE_DIR/stdin")" = abc ]
	grep -A1 -x -- --stdin-file "$FAKE_DIR/args" | grep -qx -- -
	printf 'from-file' >"$BATS_TEST_TMPDIR/in"
	run_isopod -0 run --json-only --stdin-file "$BATS_TEST_TMPDIR/in" -- cat
	grep -A1 -x -- --stdin-file "$FAKE_DIR/args" | grep -qx -- "$BATS_TEST_TMPDIR/in"
	run --separate-stderr bash -c 'isopod run --json-only -- cat <&-'
	[ "$status" -eq 0 ]
	! grep -qx -- --stdin-file "$FAKE_DIR/args" || false
}

@test "run: a tool's failure JSON passes through with its exit code" {
	use_fake
	FAKE_BOOT=fail-json run_isopod -111 run --json-only -- true
	json_is '.ok == false and .error == "fake boot failure" and .error_kind == "boot"'
	json_is '.vm.id | startswith("vm-")'
	[[ "$stderr" == *"isopod-boot: fatal: fake boot failure"* ]]
	FAKE_BOOT=fail-text run_isopod -111 run --json-only -- true
	json_is '.ok == false and .error == "isopod-boot: fatal: unable to start qemu: fake" and .error_kind == "infra"'
	FAKE_BOOT=timeout run_isopod -99 run --json-only -- true
	json_is '.ok == false and .error_kind == "timeout"'
	FAKE_CLAIM_FAIL=1 run_isopod -102 run --json-only -- true
	json_is '.ok == false and .error_kind == "busy" and (.error | contains("no free name"))'
	! grep -q '^exec' "$FAKE_LOG" || false
}

@test "run: an exec infrastructure failure exits 111 and still stops the VM" {
	use_fake
	FAKE_EXEC=infra run_isopod -111 run --json-only -- true
	json_is '.ok == false and .error_kind == "protocol"'
	id=$(jq -r .vm.id <<<"$output")
	# exec died before its stop: the front end's isopod-stop did it
	! grep -q '^exec-stop' "$FAKE_LOG" || false
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	! vm_locked "$id" || false
}

@test "run --keep: the VM stays; vm ls says running; vm rm refuses unless --force" {
	use_fake
	run_isopod -0 run --json-only --keep --name kept-one -- true
	id=$(jq -r .vm.id <<<"$output")
	! grep -q '^stop' "$FAKE_LOG" || false
	vm_locked "$id"
	grep -q -- '--keep' <(grep '^boot' "$FAKE_LOG")
	# a kept VM's disk may be read again: its QEMU keeps the flushes
	! grep -q -- '--ephemeral' <(grep '^boot' "$FAKE_LOG") || false
	run_isopod -0 vm ls
	[ "$(jq -r --arg id "$id" 'select(.id == $id) | .running' <<<"$output")" = true ]
	run_isopod -102 vm rm kept-one
	[[ "$stderr" == *"$id"*"running"* ]]
	[ -d "$ISOPOD_HOME/vms/$id" ]
	run_isopod -0 vm rm --force kept-one
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	[ ! -d "$ISOPOD_HOME/vms/$id" ]
	run_isopod -0 vm ls
	[ "$(jq -r --arg id "$id" 'select(.id == $id) | .id' <<<"$output")" = "" ]
}

@test "run: SIGTERM during exec stops the VM and exits 143 with ok:false" {
	use_fake
	export FAKE_EXEC_SLEEP=30
	start=$(date +%s)
	isopod run --json-only -- sleep 30 >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	pid=$!
	for _ in $(seq 1 200); do
		grep -q '^exec-sleeping' "$FAKE_LOG" 2>/dev/null && break
		sleep 0.05
	done
	sleep 0.3
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ]
	[ $(($(date +%s) - start)) -lt 20 ]
	output=$(cat "$BATS_TEST_TMPDIR/out")
	json_is '.ok == false and .error_kind == "interrupted"'
	id=$(jq -r .vm.id <<<"$output")
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	! vm_locked "$id" || false
}

# wait_log PATTERN: until a line of $FAKE_LOG matches (20 s at most); fails if none.
wait_log() {
	for _ in $(seq 1 400); do
		grep -q "$1" "$FAKE_LOG" 2>/dev/null && return 0
		sleep 0.05
	done
	grep -q "$1" "$FAKE_LOG"
}

# signal_run SIG STEP [RUN-ARGS...]: isopod run in the background, SIG once the
# fake STEP (boot-sleeping or exec-sleeping) is logged; the run's status in $st, its
# result in $output, its VM's id in $id, the step it ran then in $kid.
signal_run() {
	local sig=$1 at=$2 pid
	shift 2
	rm -f "$FAKE_LOG"
	# (bash starts a job in the background with SIGINT ignored, which the run keeps)
	perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die' isopod run --json-only "$@" -- sleep 30 \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	pid=$!
	wait_log "^$at"
	# the run's process is the driver by now (sh/isopod exec'd it: the same pid)
	[ "$(cat "/proc/$pid/comm")" = isopod-run ]
	kid=$(pgrep -P "$pid")
	[ -n "$kid" ]
	kill "-$sig" "$pid"
	st=0
	wait "$pid" || st=$?
	output=$(cat "$BATS_TEST_TMPDIR/out")
	id=$(jq -r .vm.id <<<"$output")
}

@test "run: SIGTERM, SIGINT or SIGHUP during boot or exec (isopod-run's) stops the VM, --keep or not: 143, 130, 129, interrupted" {
	use_fake
	local st id kid
	export FAKE_BOOT_SLEEP=30 FAKE_EXEC_SLEEP=30
	signal_run TERM boot-sleeping
	[ "$st" -eq 143 ]
	json_is '.ok == false and .error_kind == "interrupted" and .error == "interrupted by SIGTERM"'
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	! grep -q '^exec' "$FAKE_LOG" || false
	! vm_locked "$id" || false
	# the step was ended too (SIGTERM, waited for), not left running
	grep -qx "boot-term --vm $id" "$FAKE_LOG"
	! kill -0 "$kid" 2>/dev/null || false
	signal_run INT boot-sleeping --keep
	[ "$st" -eq 130 ]
	json_is '.error == "interrupted by SIGINT"'
	! vm_locked "$id" || false
	unset FAKE_BOOT_SLEEP
	signal_run HUP exec-sleeping --keep
	[ "$st" -eq 129 ]
	json_is '.error_kind == "interrupted" and .error == "interrupted by SIGHUP"'
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	! vm_locked "$id" || false
	grep -qx "exec-term --vm $id" "$FAKE_LOG"
	! kill -0 "$kid" 2>/dev/null || false
	# the scratch directory went with the result
	[ -z "$(ls -A "$ISOPOD_HOME/runs")" ]
}

@test "run: a second SIGINT to the run's process group (Ctrl-C twice) does not end the stop the first asked for: the VM stopped, 130" {
	use_fake
	local pid st id
	export FAKE_EXEC_SLEEP=30 FAKE_STOP_SLEEP=1
	rm -f "$FAKE_LOG"
	# a process group of its own, as a terminal's foreground job, INT at its default
	perl -e 'setpgrp(0, 0); $SIG{INT} = "DEFAULT"; exec @ARGV or die' isopod run --json-only --keep -- sleep 30 \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	pid=$!
	wait_log '^exec-sleeping'
	kill -INT "$pid"
	wait_log '^stop-sleeping'
	kill -INT -- "-$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 130 ]
	output=$(cat "$BATS_TEST_TMPDIR/out")
	json_is '.error == "interrupted by SIGINT"'
	id=$(jq -r .vm.id <<<"$output")
	! grep -q "unable to stop" "$BATS_TEST_TMPDIR/err" || false
	! vm_locked "$id" || false
}

@test "run: isopod-run that cannot be exec'd: the run's result all the same (111 infra), the VM stopped, no scratch directory left" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" f
	mkdir "$lx"
	for f in "$ISOPOD_SRC"/t/fake/*; do ln -s "$f" "$lx/"; done
	printf '#!/nonexistent/interpreter\n' >"$lx/isopod-run"
	chmod +x "$lx/isopod-run"
	export ISOPOD_LIBEXEC="$lx" ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	run_isopod -111 run --json-only -- true
	json_is '.ok == false and .error_kind == "infra"'
	[[ "$(jq -r .error <<<"$output")" == "unable to run $lx/isopod-run"* ]]
	id=$(jq -r .vm.id <<<"$output")
	grep -qx "stop --force --vm $id" "$FAKE_LOG"
	! vm_locked "$id" || false
	[ -z "$(ls -A "$ISOPOD_HOME/runs")" ]
}

@test "run: --stdin-file - with stdin closed: a usage refusal (100), by the shell before the claim and by isopod-run" {
	use_fake
	run --separate-stderr bash -c 'isopod run --json-only --stdin-file - -- cat <&-'
	[ "$status" -eq 100 ] && [[ "$stderr" == *"--stdin-file -: standard input is closed"* ]] || false
	no_claim
	# (run_tmp's shape: the only directories besides runs/ that isopod-run removes)
	local d="$BATS_TEST_TMPDIR/isopod.AbC123"
	mkdir "$d"
	run --separate-stderr bash -c 'isopod-run --libexec "$1" --vm vm-000000000000 --name n --dir "$2" \
		--start-ms 0 --timeout-s 1 --net none --stdin-file - -- cat <&-' sh "$ISOPOD_LIBEXEC" "$d"
	[ "$status" -eq 100 ] && [ ! -e "$d" ] || false
	json_is '.error_kind == "usage" and .error == "--stdin-file -: standard input is closed"'
	! grep -q '^exec' "$FAKE_LOG" || false
}

@test "run: isopod-result, exec'd last by isopod-run, is not left with INT, TERM and HUP blocked: SIGTERM ends a stalled result (143)" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" f pid st
	mkdir "$lx"
	for f in "$ISOPOD_SRC"/t/fake/*; do ln -s "$f" "$lx/"; done
	rm "$lx/isopod-result"
	# a result that stalls: logs, sleeps (its TERM at the default, its mask as
	# given: perl, as dash would unblock every signal), then the real one
	cat >"$lx/isopod-result" <<'EOF'
#!/usr/bin/perl
open(my $l, ">>", $ENV{FAKE_LOG}) or die; print $l "result-sleeping\n"; close($l);
sleep 20;
exec("$ENV{ISOPOD_SRC}/t/fake/isopod-result", @ARGV) or die;
EOF
	chmod +x "$lx/isopod-result"
	# (its own store: the killed result leaves runs/ for isopod gc)
	export ISOPOD_LIBEXEC="$lx" ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	rm -f "$FAKE_LOG"
	isopod run --json-only -- true >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- &
	pid=$!
	for _ in $(seq 1 400); do
		grep -q '^result-sleeping' "$FAKE_LOG" 2>/dev/null && break
		sleep 0.05
	done
	grep -q '^result-sleeping' "$FAKE_LOG"
	kill -TERM "$pid"
	st=0
	wait "$pid" || st=$?
	[ "$st" -eq 143 ]
}

@test "run --keep: isopod-result, exec'd with the VM kept, runs with INT, TERM and HUP blocked (a Ctrl-C cannot cut it short and leave a running VM nobody was told of); without --keep they are not" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" f
	mkdir "$lx"
	for f in "$ISOPOD_SRC"/t/fake/*; do ln -s "$f" "$lx/"; done
	rm "$lx/isopod-result"
	# a result that logs its blocked mask (perl: its mask as given), then the real one
	cat >"$lx/isopod-result" <<'EOF'
#!/usr/bin/perl
open(my $s, "<", "/proc/self/status") or die; my ($b) = grep { /^SigBlk:/ } <$s>;
$b =~ s/^SigBlk:\s*//; chomp $b; my $m = hex(substr($b, -8));
open(my $l, ">>", $ENV{FAKE_LOG}) or die;
printf $l "result-blocked %s\n", (($m & 0x4003) == 0x4003 ? "int-term-hup" : ($m & 0x4003) ? "some" : "none");
close($l);
exec("$ENV{ISOPOD_SRC}/t/fake/isopod-result", @ARGV) or die;
EOF
	chmod +x "$lx/isopod-result"
	export ISOPOD_LIBEXEC="$lx" ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	rm -f "$FAKE_LOG"
	# (as a user's shell starts it: a background job of a script has INT
	# ignored, and isopod-run leaves an ignored signal alone)
	run -0 --separate-stderr env --default-signal=INT,TERM,HUP isopod run --json-only --keep -- true
	grep -qx 'result-blocked int-term-hup' "$FAKE_LOG"
	! grep -q '^stop' "$FAKE_LOG" || false
	rm -f "$FAKE_LOG"
	run -0 --separate-stderr env --default-signal=INT,TERM,HUP isopod run --json-only -- true
	grep -qx 'result-blocked none' "$FAKE_LOG"
}

@test "run: a result nobody can read (stdout closed, or its reader gone with SIGPIPE ignored): isopod-result removes the scratch directory all the same (nothing runs after it)" {
	use_fake
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/h"
	run --separate-stderr bash -c 'isopod run --json-only -- true >&-'
	[ "$status" -eq 111 ] && [[ "$stderr" == *"unable to write to standard output"* ]] || false
	[ -z "$(ls -A "$ISOPOD_HOME/runs")" ]
	local d="$BATS_TEST_TMPDIR/scratch"
	mkdir "$d" && : >"$d/exec.json"
	run --separate-stderr bash -c 'isopod-result --dir "$1" --remove-dir --fail 143 --kind interrupted -- "interrupted by SIGTERM" >&-' sh "$d"
	[ "$status" -eq 111 ] && [ ! -e "$d" ] || false
}

@test "isopod-run: not a user command: run by hand without what sh/isopod gives, its usage refusal (100), stdout empty; -h the man page's SYNOPSIS" {
	run --separate-stderr isopod-run
	[ "$status" -eq 100 ] && [ -z "$output" ] || false
	[[ "$stderr" == "usage: isopod-run --libexec DIR"* ]]
	[[ "${stderr##*$'\n'}" == "isopod-run: fatal: --libexec, --vm, --name, --dir, --start-ms, --timeout-s and --net are sh/isopod's to give"* ]]
	run --separate-stderr isopod-run --libexec /x --vm v --name n --start-ms 0 --timeout-s 0 --net none -- true
	[ "$status" -eq 100 ] && [ -z "$output" ] && [[ "$stderr" == *"--timeout-s 0: out of range"* ]] || false
	# once it knows the run (--libexec, --vm, --name, --dir), a refusal is the run's
	# result, as a failure after it: the VM stopped, DIR removed (no shell left to)
	use_fake
	local d="$BATS_TEST_TMPDIR/isopod.AbC123"
	mkdir "$d" && : >"$d/exec.json"
	run --separate-stderr isopod-run --libexec "$ISOPOD_LIBEXEC" --vm vm-000000000000 --name n --dir "$d" \
		--start-ms 0 --timeout-s 1 --net none
	[ "$status" -eq 100 ] && [[ "$stderr" == *"isopod-run: fatal: no command given"* ]] || false
	json_is '.ok == false and .error_kind == "usage" and .error == "no command given"'
	grep -qx "stop --force --vm vm-000000000000" "$FAKE_LOG"
	[ ! -e "$d" ]
	mkdir "$d"
	run --separate-stderr isopod-run --timeout-s 0 --libexec "$ISOPOD_LIBEXEC" --vm vm-000000000000 --name n \
		--dir "$d" --start-ms 0 --net none -- true
	[ "$status" -eq 100 ] && [ ! -e "$d" ] || false
	json_is '.error_kind == "usage" and (.error | startswith("--timeout-s 0: out of range"))'
	# by hand, a --dir that is no run's scratch directory (an ordinary one, the
	# runs/ directory of another pid, a link to one) is refused, nothing touched
	local o="$BATS_TEST_TMPDIR/ordinary" dd
	mkdir -p "$o" "$BATS_TEST_TMPDIR/runs/vm-000000000000.1.1" && : >"$o/keep-me" &&
		: >"$BATS_TEST_TMPDIR/runs/vm-000000000000.1.1/keep-me" &&
		ln -s "$o" "$BATS_TEST_TMPDIR/isopod.L1nk00"
	rm -f "$FAKE_LOG"
	for dd in "$o" "$BATS_TEST_TMPDIR/runs/vm-000000000000.1.1" "$BATS_TEST_TMPDIR/isopod.L1nk00"; do
		run --separate-stderr isopod-run --libexec "$ISOPOD_LIBEXEC" --vm vm-000000000000 --name n \
			--dir "$dd" --start-ms 0 --timeout-s 1 --net none --bogus -- true
		[ "$status" -eq 100 ] && [ -z "$output" ] && [[ "$stderr" == *"fatal: bad option"* ]] ||
			{ echo "$dd: $status $stderr"; false; }
		[ -e "$dd/keep-me" ]
	done
	[ ! -e "$FAKE_LOG" ]
	run --separate-stderr isopod-run --libexec "$ISOPOD_LIBEXEC" --vm vm-000000000000 --name n \
		--dir "$o" --start-ms 0 --timeout-s 1 --net none -- true
	[ "$status" -eq 100 ] && [ -z "$output" ] && [ -e "$o/keep-me" ] || false
	[[ "$stderr" == *"isopod-run: fatal: --dir $o: not a run's scratch directory"* ]]
	# its own pid's runs/vm-ID.PID.START is one (isopod-run has the shell's pid)
	mkdir "$BATS_TEST_TMPDIR/runs2"
	run --separate-stderr bash -c 'd=$2/runs2/runs/vm-000000000000.$$.7 && mkdir -p "$d" && : >"$d/x" &&
		exec isopod-run --libexec "$1" --vm vm-000000000000 --name n --dir "$d" \
			--start-ms 0 --timeout-s 1 --net none --bogus -- true' sh "$ISOPOD_LIBEXEC" "$BATS_TEST_TMPDIR"
	[ "$status" -eq 100 ] && [ -z "$(ls -A "$BATS_TEST_TMPDIR/runs2/runs")" ] || false
	json_is '.error_kind == "usage"'
	run isopod-run -h
	[ "$status" -eq 0 ]
	syn=$(sed -n '/^\.Sh SYNOPSIS/,/^\.Sh DESCRIPTION/p' "$ISOPOD_SRC/man/isopod-run.1")
	for w in libexec vm name dir start-ms timeout-s net fold keep pooled json-only stage commit-as provenance \
		sign-option stdin-file notes-fd usage allow-ranges sysconfig boot-option exec-option; do
		[[ "$output" == *"--$w"* ]] && [[ "$syn" == *"Fl -$w"* ]] || { echo "--$w"; false; }
	done
}

@test "lint: the shell scripts are shellcheck -s sh clean" {
	command -v shellcheck >/dev/null || skip "shellcheck not installed"
	cd "$ISOPOD_SRC"
	run shellcheck -s sh sh/isopod t/run-bats t/run-unit t/fake/isopod-claim \
		t/fake/isopod-boot t/fake/isopod-exec t/fake/isopod-stop .ci/setup
	echo "$output"
	[ "$status" -eq 0 ]
	run shellcheck -s bash t/helpers.bash .ci/run
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "lint: source files are under 1000 lines; C functions in bin/, lib/ and agent/ at most 150 (opening to closing brace)" {
	local long
	cd "$ISOPOD_SRC"
	long=$(awk 'FNR == 1000 { print FILENAME }' bin/*.c lib/*.[ch] agent/*.[ch] fuzz/*.[ch] \
		t/unit/*.[ch] t/jail/*.c sh/isopod)
	[ -z "$long" ] || { echo "1000 lines or more: $long"; false; }
	# the style puts a function's braces in column 0, and nothing else's
	long=$(awk 'FNR == 1 { s = 0 } /^\{/ { s = FNR }
		/^\}/ { if (s && FNR - s + 1 > 150) print FILENAME ":" s ": " FNR - s + 1; s = 0 }' \
		bin/*.c lib/*.c agent/*.c)
	[ -z "$long" ] || { echo "functions over 150 lines: $long"; false; }
}

@test "lint: a struct (declared or a compound literal) is initialised by its members' names, not by position" {
	cd "$ISOPOD_SRC"
	# (an array's elements and `{ 0 }` are positional by nature)
	run grep -nE 'struct [a-z_]+ [a-z_]+ = \{ *[^ .{}0]|\(struct [a-z_]+\) *\{ *[^ .{}0]' \
		bin/*.c lib/*.c agent/*.c
	[ -z "$output" ] || { echo "positional: $output"; false; }
}

@test "lint: no bats check is a bare \`[ a ] && [ b ]\` (bash's errexit ignores a failure before the last &&: only the last check could fail the test)" {
	cd "$ISOPOD_SRC"
	# A list that ends the line in a test or check: each such one needs
	# `|| false`, or its checks on lines of their own.  Loops' `&& break`
	# and guarded actions (`&& return`, `kill`, `|| ...`) are not checks.
	run grep -nE "^[[:space:]]+(\[|json_is).* && (\[|json_is).*(\]|')\$" t/*.bats
	bad=$(grep -vE '\|\| |&& (break|return)' <<<"$output" || :)
	[ -z "$bad" ] || { echo "a && b with only b checked: $bad"; false; }
}

# bare_bang FILE...: each top-level command of a @test body that is a
# negated pipeline (`! cmd`, `! cmd | cmd`, over continued lines) and not
# the body's last command, as "FILE:LINE: ...".  What shellcheck's bats
# checks SC2314/SC2315 find, in one awk pass (shellcheck per file took 24 s):
# `! cmd || false` and `! cmd && cmd` are lists (quoted text aside), nested
# lines are a compound command's, heredoc bodies are data.
bare_bang() {
	awk '
	function strip(t) { gsub(/\x27[^\x27]*\x27/, "", t); gsub(/"([^"\\]|\\.)*"/, "", t); return t }
	FNR == 1 { body = 0; hd = ""; inq = 0 }
	/^@test .*\{$/ { body = 1; cont = 0; inq = 0; pend = ""; next }
	!body { next }
	hd != "" { t = $0; if (hdtab) sub(/^\t+/, "", t); if (t == hd) hd = ""; next }
	/^}$/ { body = 0; hd = ""; next }
	{
		line = $0
		# an odd count of single quotes (outside double ones) opens or
		# closes a quoted text over lines: its lines are no commands
		q = line; gsub(/"([^"\\\x27]|\\.)*"/, "", q); gsub(/[^\x27]/, "", q)
		wasq = inq; if (length(q) % 2) inq = !inq
		if (wasq) {
			if (!inq) { t = line; sub(/.*\x27/, "", t); cont = t ~ /(\\|\||&&)[ \t]*$/ }
			next
		}
		top = !cont && line ~ /^\t[^\t#]/ && line !~ /^\t(done|fi|esac|else|elif|then|do|[})])([ ;|&]|$)/
		if (top) {
			if (pend != "" && !list) print pend
			pend = ""
			if (line ~ /^\t! /) { pend = FILENAME ":" FNR ": " substr(line, 2); list = 0 }
		}
		t = strip(line)
		if (pend != "" && (top || cont) && t ~ /\|\||&&/) list = 1
		if (match(t, /<<-?[ \t]*[\\]?[A-Za-z_][A-Za-z_0-9]*/) && substr(t, RSTART - 1, 1) != "<") {
			hd = substr(t, RSTART, RLENGTH); hdtab = hd ~ /^<<-/
			sub(/^<<-?[ \t]*[\\]?/, "", hd)
		}
		if (match(line, /<<-?[ \t]*["\x27][A-Za-z_][A-Za-z_0-9]*["\x27]/) && substr(line, RSTART - 1, 1) != "<") {
			hd = substr(line, RSTART, RLENGTH); hdtab = hd ~ /^<<-/
			sub(/^<<-?[ \t]*["\x27]/, "", hd); sub(/["\x27]$/, "", hd)
		}
		cont = t ~ /(\\|\||&&)[ \t]*$/
	}' "$@"
}

@test "lint: no bats check is a bare \`! cmd\` before a test's last line (errexit ignores a negated command: it could never fail the test)" {
	cd "$ISOPOD_SRC"
	local bad t="$BATS_TEST_TMPDIR/planted.bats"
	bad=$(bare_bang t/*.bats)
	[ -z "$bad" ] || { echo "$bad (\`! cmd || false\` or \`run ! cmd\` can fail)"; false; }
	# the lint finds what it is for: bare ones, alone, piped or continued;
	# not one last, in a list, nested, quoted or in a heredoc
	printf '%s\n' '@test "planted" {' '	! true' '	! true | cat' '	! true \' '		x' \
		"	! grep -q 'a||b' f" '	! true || false' '	run ! true' '	for x in 1; do' '		! true' '	done' \
		'	cat <<-EOF' '	! true' '	EOF' "	jq '" '	! x' "	'" '	! false' '	echo' '	! true' '}' >"$t"
	bad=$(bare_bang "$t")
	[ "$bad" = "$t:2: ! true"$'\n'"$t:3: ! true | cat"$'\n'"$t:4: ! true \\"$'\n'"$t:6: ! grep -q 'a||b' f"$'\n'"$t:18: ! false" ] ||
		{ echo "the planted ones, found: $bad"; false; }
}

@test "lint: no library changes the process's environment to reach a child (struct proc_spec's env does)" {
	cd "$ISOPOD_SRC"
	# The one exception: lib/util.c's constructor takes ISOPOD_STATUS_FD
	# out before main runs (the descriptor is the tool's, not its children's).
	run grep -nE '\b(setenv|unsetenv|putenv|clearenv)[[:space:]]*\(' lib/*.c
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$(grep -vE '^lib/util\.c:[0-9]+:	unsetenv\("ISOPOD_STATUS_FD"\);$' <<<"$output")" ]
}

# lib/util.c's helpers that exit (main only): the only code in lib/ that may.
MAIN_ONLY='die|die_kind|die_usage|pathf|mkdirs|json_read_stdin|json_emit|store_lock|run_options_print'

@test "lint: libraries never exit: only lib/util.c's main-only helpers call die or exit, and no library calls them" {
	cd "$ISOPOD_SRC"
	# every other library: no call to exit, die or a helper that dies
	# (comment lines aside; _exit in a forked child and abort on a broken
	# constant table are not a tool's exit status)
	run grep -nE "(^|[^a-z_])(exit|$MAIN_ONLY)\(" lib/*.c
	local bad
	bad=$(grep -v '^lib/util\.c:' <<<"$output" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)' || true)
	[ -z "$bad" ] || { echo "a library that exits: $bad"; false; }
	# lib/util.c: exit and die only inside those helpers (and vdie, status_report under die)
	bad=$(awk -v ok="^($MAIN_ONLY|vdie|status_report)\$" '
		/^[a-z].*\(/ && !/;$/ { fn = $0; sub(/\(.*/, "", fn); sub(/.*[ *]/, "", fn) }
		/(^|[^a-z_])(exit|'"$MAIN_ONLY"')\(/ && !/^[ \t]*(\/?\*|\/\/)/ && fn !~ ok { print FILENAME ":" NR ": " fn }
	' lib/util.c)
	[ -z "$bad" ] || { echo "a lib/util.c function that exits and is not main-only: $bad"; false; }
}

@test "lint: no file-scope mutable variable in the tools or lib/ (function-scope statics and progname only)" {
	cd "$ISOPOD_SRC"
	# Writable data (.data, .bss, .data.rel.local) named without the
	# compiler's .N suffix of a function-scope static; progname is set by
	# every main (by design), the BPF program's counter map is the kernel's,
	# the rest is the C runtime's and libc's copy relocations (name@GLIBC).
	local f bad=
	for f in lib/*.o bin/isopod-*; do
		case $f in *.c | lib/tapfilter.bpf.o) continue ;; esac
		[ -f "$f" ] || continue
		bad=$bad$(objdump -t "$f" | awk -v f="$f" '$3 == "O" && $4 ~ /^\.(data|bss)/ && $4 !~ /rel\.ro/ &&
			$NF !~ /[.@]/ && $NF !~ /^(progname|__dso_handle|__TMC_END__)$/ { print " " f ":" $NF }')
	done
	[ -z "$bad" ] || { echo "file-scope mutable:$bad"; false; }
}

@test "run --net: the default is filtered; config files, ISOPOD_NET and --net override in that order" {
	use_fake
	unset ISOPOD_NET
	run_isopod -0 run --json-only -- true
	grep -q '^claim --net filtered$' "$FAKE_LOG"
	json_is '.egress == {allowed: [], denied: []}'
	sys="$BATS_TEST_TMPDIR/sys.conf" user="$BATS_TEST_TMPDIR/user.conf"
	printf '# host-wide\nnet = open\n' >"$sys"
	: >"$FAKE_LOG"
	ISOPOD_SYSCONFIG="$sys" run_isopod -0 run --json-only -- true
	grep -q '^claim --net open$' "$FAKE_LOG"
	printf 'net=none   # the user wins over the host\n' >"$user"
	: >"$FAKE_LOG"
	ISOPOD_SYSCONFIG="$sys" ISOPOD_CONFIG="$user" run_isopod -0 run --json-only -- true
	grep -q '^claim *$' "$FAKE_LOG"
	json_is 'has("egress") | not'
	: >"$FAKE_LOG"
	ISOPOD_NET=open ISOPOD_CONFIG="$user" run_isopod -0 run --json-only -- true
	grep -q '^claim --net open$' "$FAKE_LOG"
	: >"$FAKE_LOG"
	ISOPOD_NET=open run_isopod -0 run --json-only --net filtered -- true
	grep -q '^claim --net filtered$' "$FAKE_LOG"
}

@test "run --allow: config and option patterns reach claim verbatim (never globbed)" {
	use_fake
	conf="$BATS_TEST_TMPDIR/user.conf"
	printf 'allow = pkg.test\nallow = *.wild.test\n' >"$conf"
	cd "$BATS_TEST_TMPDIR"
	touch a.wild.test x.other.test
	ISOPOD_CONFIG="$conf" run_isopod -0 run --json-only --net filtered --allow '*.other.test' -- true
	grep -qxF 'claim --net filtered --allow pkg.test --allow *.wild.test --allow *.other.test' "$FAKE_LOG"
	# config patterns are not passed to a run that is not filtered
	: >"$FAKE_LOG"
	ISOPOD_CONFIG="$conf" run_isopod -0 run --json-only --net open -- true
	grep -qx 'claim --net open' "$FAKE_LOG"
}

@test "run --allow without filtered, bad --net, bad config: usage errors (100), nothing claimed" {
	use_fake
	run_isopod -100 run --net none --allow pkg.test -- true
	[[ "$stderr" == *"--allow needs --net filtered"* ]]
	run_isopod -100 run --net closed -- true
	[[ "$stderr" == *"want none, filtered, open or learn"* ]]
	# learn lets every name through: never a default, never with a list
	ISOPOD_NET=learn run_isopod -100 run -- true
	[[ "$stderr" == *"learn is never a default"* ]]
	printf 'net = learn\n' >"$BATS_TEST_TMPDIR/learn.conf"
	ISOPOD_NET="" ISOPOD_CONFIG="$BATS_TEST_TMPDIR/learn.conf" run_isopod -100 run -- true
	[[ "$stderr" == *"learn is never a default"* ]]
	run_isopod -100 run --net learn --allow pkg.test -- true
	[[ "$stderr" == *"--allow needs --net filtered"* ]]
	conf="$BATS_TEST_TMPDIR/bad.conf"
	printf 'net = open\ncolour = blue\n' >"$conf"
	ISOPOD_CONFIG="$conf" run_isopod -100 run -- true
	[[ "$stderr" == *"$conf:2: unknown key 'colour'"* ]]
	printf 'accel_host_cache = no\naccel_host_cache = maybe\n' >"$conf"
	ISOPOD_CONFIG="$conf" run_isopod -100 run -- true
	[[ "$stderr" == *"$conf:2: accel_host_cache 'maybe': want yes or no"* ]]
	printf 'just words\n' >"$conf"
	ISOPOD_CONFIG="$conf" run_isopod -100 run -- true
	[[ "$stderr" == *"$conf:1: expected 'key = value'"* ]]
	no_claim
}

@test "allow_range: in the host config each is a warning in every result and in doctor; in the user's config a usage error" {
	use_fake
	local sys="$BATS_TEST_TMPDIR/sys.conf" user="$BATS_TEST_TMPDIR/user.conf" w
	printf 'allow_range = 198.51.100.0/24   # a lab\nallow_range=198.18.0.0/16\n' >"$sys"
	w='this host lets guests reach a range the deny list blocks by default'
	for net in none filtered open; do
		ISOPOD_SYSCONFIG="$sys" run_isopod -0 run --json-only --net "$net" -- true
		json_is '.warnings == ["allow_range 198.51.100.0/24 ('"$sys"'): '"$w"'", "allow_range 198.18.0.0/16 ('"$sys"'): '"$w"'"]'
	done
	# none configured: no warning
	run_isopod -0 run --json-only --net none -- true
	json_is '.warnings == []'
	# doctor says so too (--quick: whatever else this host lacks)
	ISOPOD_SYSCONFIG="$sys" run_isopod doctor --quick
	json_is '.net.allow_ranges == ["198.51.100.0/24", "198.18.0.0/16"] and .net.config == "'"$sys"'"'
	json_is '.warnings | length == 2 and all(test("^allow_range 198\\.(51\\.100\\.0/24|18\\.0\\.0/16) "))'
	run_isopod doctor --quick
	json_is '.net.allow_ranges == [] and .warnings == []'
	# a user cannot open the host's table
	printf 'net = none\nallow_range = 198.18.0.0/15\n' >"$user"
	: >"$FAKE_LOG"
	ISOPOD_CONFIG="$user" run_isopod -100 run --json-only -- true
	[[ "$stderr" == *"config $user:2: allow_range is a host setting; it belongs in "* ]]
	no_claim
}

@test "require_attestation (isopod-mcp's), jail_uid_base, jail_uid_count (isopod-jail's): accepted in the host config, a usage error in the user's" {
	use_fake
	local sys="$BATS_TEST_TMPDIR/sys.conf" user="$BATS_TEST_TMPDIR/user.conf" kv
	printf 'require_attestation = yes\njail_uid_base = 3000000000 # isopod-jail(8)\njail_uid_count = 10\n' >"$sys"
	ISOPOD_SYSCONFIG="$sys" run_isopod -0 run --json-only --net none -- true
	for kv in 'require_attestation = no' 'jail_uid_base = 3000000000' 'jail_uid_count = 10'; do
		printf 'net = none\n%s\n' "$kv" >"$user"
		: >"$FAKE_LOG"
		ISOPOD_CONFIG="$user" run_isopod -100 run --json-only -- true
		[[ "$stderr" == *"config $user:2: ${kv%% *} is a host setting; it belongs in "* ]]
		no_claim
	done
}

@test "run: egress sums the ledger per kind, name and port; a line that is not JSON is counted, not fatal" {
	use_fake
	export FAKE_LEDGER="$BATS_TEST_TMPDIR/ledger"
	cat >"$FAKE_LEDGER" <<'L'
{"time":"t","kind":"connect","name":"pkg.test","port":443,"address":"198.51.100.10","up":10,"down":100,"verdict":"allowed","reason":null,"ms":5}
{"time":"t","kind":"connect","name":"pkg.test","port":443,"address":"198.51.100.11","up":1,"down":2,"verdict":"allowed","reason":null,"ms":5}
{"time":"t","kind":"http","name":"pkg.test","port":80,"address":"198.51.100.10","up":3,"down":4,"verdict":"allowed","reason":null,"ms":5}
{"time":"t","kind":"http","name":"other.test","port":80,"address":null,"up":0,"down":0,"verdict":"denied","reason":"not in the allowlist","ms":0}
{"time":"t","kind":"http","name":"other.test","port":80,"address":null,"up":0,"down":0,"verdict":"denied","reason":"not in the allowlist","ms":0}
{"time":"t","kind":"dns","name":"x.exfil.test","port":53,"address":null,"up":0,"down":0,"verdict":"denied","reason":"not in the allowlist","ms":0,"qtype":"TXT"}
not json {
L
	run_isopod -0 run --json-only --net filtered -- true
	json_is '.egress.allowed == [
		{kind: "connect", name: "pkg.test", port: 443, addresses: ["198.51.100.10", "198.51.100.11"], flows: 2, up: 11, down: 102},
		{kind: "http", name: "pkg.test", port: 80, addresses: ["198.51.100.10"], flows: 1, up: 3, down: 4}]'
	json_is '.egress.denied == [
		{kind: "dns", name: "x.exfil.test", port: 53, reason: "not in the allowlist", count: 1},
		{kind: "http", name: "other.test", port: 80, reason: "not in the allowlist", count: 2},
		{kind: "ledger", name: null, port: null, reason: "a ledger line is not JSON", count: 1}]'
	# --net none: no egress at all, even with a ledger lying around
	run_isopod -0 run --json-only --net none -- true
	json_is 'has("egress") | not'
}

# fake_ledger N LINE: use_fake, with a ledger of N lines LINE (a printf
# format: %s is the line's number, 1..N).
fake_ledger() {
	local i
	use_fake
	export FAKE_LEDGER="$BATS_TEST_TMPDIR/ledger"
	for i in $(seq 1 "$1"); do
		# shellcheck disable=SC2059
		printf "$2\n" "$i"
	done >"$FAKE_LEDGER"
}

@test "run: egress keeps at most 256 denied groups (the most counted) and says what it left out" {
	local i
	fake_ledger 300 '{"time":"t","kind":"dns","name":"n%s.exfil.test","port":53,"address":null,"up":0,"down":0,"verdict":"denied","reason":"not in the allowlist","ms":0}'
	for i in 1 2 3; do
		echo '{"time":"t","kind":"http","name":"hot.test","port":80,"address":null,"up":0,"down":0,"verdict":"denied","reason":"not in the allowlist","ms":0}'
	done >>"$FAKE_LEDGER"
	run_isopod -0 run --json-only --net filtered -- true
	json_is '.egress.denied | length == 256'
	json_is '.egress.denied_omitted == {groups: 45, count: 45}'
	json_is 'any(.egress.denied[]; .name == "hot.test" and .count == 3)'
	json_is '.egress | has("allowed_omitted") | not'
}

@test "run: a policy line in the ledger (the broker lost isopod-netsetup's table) is a warning, not egress; ok stays true" {
	use_fake
	export FAKE_LEDGER="$BATS_TEST_TMPDIR/ledger"
	cat >"$FAKE_LEDGER" <<'L'
{"time":"t","kind":"dns","name":"pkg.test","port":53,"address":"198.51.100.53","up":30,"down":46,"verdict":"allowed","reason":null,"ms":1,"qtype":"A"}
{"time":"t","kind":"policy","name":null,"port":1054,"verdict":"lost","reason":"network policy lost: isopod-netsetup's table inet isopod stopped answering its canary on 10.213.0.1:1054; the VM's network is cut (run isopod-netsetup)","vm":"vm-x"}
L
	run_isopod -0 run --json-only --net open -- true
	json_is '.ok == true and .warnings == ["network policy lost: isopod-netsetup'"'"'s table inet isopod stopped answering its canary on 10.213.0.1:1054; the VM'"'"'s network is cut (run isopod-netsetup)"]'
	json_is '.egress.denied == [] and (.egress.allowed | map(.kind)) == ["dns"]'
	# without it: no warning
	head -n 1 "$FAKE_LEDGER" >"$FAKE_LEDGER.1"
	mv "$FAKE_LEDGER.1" "$FAKE_LEDGER"
	run_isopod -0 run --json-only --net open -- true
	json_is '.warnings == []'
}

@test "run --net learn: the result proposes the allowlist its ledger shows (lib/propose.c); isopod allow propose prints the same" {
	use_fake
	export FAKE_LEDGER="$BATS_TEST_TMPDIR/ledger"
	cat >"$FAKE_LEDGER" <<'L'
{"time":"t","kind":"dns","name":"pkg.test","port":53,"address":"198.51.100.53","up":30,"down":46,"verdict":"allowed","reason":null,"ms":1,"qtype":"A"}
{"time":"t","kind":"connect","name":"pkg.test","port":443,"address":"198.51.100.10","up":9,"down":9,"verdict":"allowed","reason":null,"ms":3}
{"time":"t","kind":"connect","name":"files.test","port":443,"address":"198.51.100.10","up":9,"down":9,"verdict":"allowed","reason":null,"ms":3}
{"time":"t","kind":"connect","name":"198.51.100.7","port":443,"address":"198.51.100.7","up":9,"down":9,"verdict":"allowed","reason":null,"ms":3}
{"time":"t","kind":"connect","name":"rebind.test","port":443,"address":null,"up":0,"down":0,"verdict":"denied","reason":"a denied address","ms":3}
{"time":"t","kind":"dns","name":"git.test","port":53,"address":"198.51.100.53","up":30,"down":46,"verdict":"allowed","reason":null,"ms":1,"qtype":"A"}
not json
L
	run_isopod -0 run --json-only --net learn -- true
	grep -qx 'claim --net learn' "$FAKE_LOG"
	json_is '[.proposed_allowlist.allow[].pattern] == ["files.test", "pkg.test"]'
	json_is '.proposed_allowlist.allow[1].flows == [{kind: "connect", name: "pkg.test", port: 443, count: 1},
		{kind: "dns", name: "pkg.test", port: 53, count: 1}]'
	json_is '[.proposed_allowlist.unservable[].name] == ["198.51.100.7", "git.test"]'
	json_is '.proposed_allowlist | .lines == 7 and .skipped == 1 and .not_succeeded == 1'
	# filtered runs carry no proposal
	run_isopod -0 run --json-only --net filtered -- true
	json_is 'has("proposed_allowlist") | not'
	# the same from the ledger file, through the front end
	unset ISOPOD_LIBEXEC
	run_isopod -0 allow propose "$FAKE_LEDGER"
	json_is '[.allow[].pattern] == ["files.test", "pkg.test"] and (.unservable | length) == 2'
	run_isopod -101 allow propose "$BATS_TEST_TMPDIR/nothing"
	[[ "$stderr" == *"ledger $BATS_TEST_TMPDIR/nothing: unable to read it: No such file or directory"* ]]
	run_isopod -100 allow propose "$BATS_TEST_TMPDIR"
	[[ "$stderr" == *"not a regular file"* ]]
	run_isopod -100 allow list
	[[ "$stderr" == *"usage: isopod-allow propose [--fold] LEDGER"* ]]
}

@test "run --net learn: the proposal keeps at most 256 entries (the most counted), says what it left out, and warns" {
	fake_ledger 300 '{"time":"t","kind":"connect","name":"n%s.test","port":443,"address":"198.51.100.10","up":9,"down":9,"verdict":"allowed","reason":null,"ms":3}'
	run_isopod -0 run --json-only --net learn -- true
	json_is '.proposed_allowlist.allow | length == 256'
	json_is '.proposed_allowlist.allow_omitted == {entries: 44, count: 44}'
	json_is '.warnings == ["the proposed allowlist leaves out 44 entries (it keeps at most 256, in 16384 bytes)"]'
}

@test "run --net learn: the proposal's allow holds the names seen; the folds by the public suffix list (never under a public suffix) are reported, and applied only with --fold; no list, no fold and a warning" {
	local n
	fake_ledger 0 ''
	for n in a.cdn.example.org b.cdn.example.org c.cdn.example.org a.github.io b.github.io c.github.io; do
		printf '{"time":"t","kind":"connect","name":"%s","port":443,"address":"198.51.100.10","up":9,"down":9,"verdict":"allowed","reason":null,"ms":3}\n' "$n"
	done >"$FAKE_LEDGER"
	printf 'org\nio\n// ===BEGIN PRIVATE DOMAINS===\ngithub.io\n// ===END PRIVATE DOMAINS===\n' \
		>"$BATS_TEST_TMPDIR/psl.dat"
	export ISOPOD_PUBLIC_SUFFIX_LIST="$BATS_TEST_TMPDIR/psl.dat"
	# not asked: the names seen, the fold beside them
	run_isopod -0 run --json-only --net learn -- true
	json_is '[.proposed_allowlist.allow[].pattern] == ["a.cdn.example.org", "a.github.io", "b.cdn.example.org", "b.github.io", "c.cdn.example.org", "c.github.io"]'
	json_is '.proposed_allowlist.folds == [{pattern: "*.cdn.example.org",
		names: ["a.cdn.example.org", "b.cdn.example.org", "c.cdn.example.org"],
		widens: "every name below cdn.example.org (ports 80 and 443), not only the 3 seen: any its owner adds later, and anyone'"'"'s if cdn.example.org is shared hosting the public suffix list does not name (Debian'"'"'s lacks blob.core.windows.net, on.aws)"}]'
	json_is '.proposed_allowlist.fold == {public_suffixes: 3, min_names: 3, applied: false} and .warnings == []'
	# asked: the fold in allow, in its names' place
	run_isopod -0 run --json-only --net learn --fold -- true
	json_is '[.proposed_allowlist.allow[].pattern] == ["*.cdn.example.org", "a.github.io", "b.github.io", "c.github.io"]'
	json_is '.proposed_allowlist.allow[0].flows | map(.name) == ["a.cdn.example.org", "b.cdn.example.org", "c.cdn.example.org"]'
	json_is '.proposed_allowlist.fold == {public_suffixes: 3, min_names: 3, applied: true}'
	json_is '[.proposed_allowlist.folds[].pattern] == ["*.cdn.example.org"]'
	# --fold is learn's: refused with any other mode, before anything runs
	run_isopod -100 run --json-only --net filtered --fold -- true
	[[ "$stderr" == *"--fold folds the allowlist --net learn proposes; this run is --net filtered"* ]]
	ISOPOD_PUBLIC_SUFFIX_LIST="$BATS_TEST_TMPDIR/nothing" run_isopod -0 run --json-only --net learn --fold -- true
	json_is '(.proposed_allowlist.allow | map(.pattern) | map(select(startswith("*"))) | length) == 0'
	json_is '.proposed_allowlist.folds == [] and .proposed_allowlist.fold.applied == false'
	json_is '.warnings == ["the public suffix list '"$BATS_TEST_TMPDIR"'/nothing: unable to read it: No such file or directory: no name folded into a *.domain pattern"]'
	unset ISOPOD_LIBEXEC
	run_isopod -0 allow propose "$FAKE_LEDGER"
	json_is '(.allow | length) == 6 and (.allow | map(.pattern) | map(select(startswith("*"))) | length) == 0'
	json_is '[.folds[].pattern] == ["*.cdn.example.org"] and .fold.applied == false'
	[ -z "$stderr" ]
	run_isopod -0 allow propose --fold "$FAKE_LEDGER"
	json_is '[.allow[].pattern] == ["*.cdn.example.org", "a.github.io", "b.github.io", "c.github.io"]'
	json_is '[.folds[].pattern] == ["*.cdn.example.org"] and .fold.applied == true'
	run_isopod -100 allow propose --fold
	[[ "$stderr" == *"usage: isopod-allow propose [--fold] LEDGER"* ]]
	# a list cut short (no END PRIVATE line) is no list: names only
	printf 'org\nio\n' >"$BATS_TEST_TMPDIR/psl.dat"
	run_isopod -0 allow propose "$FAKE_LEDGER"
	json_is '(.allow | length) == 6 and .fold.public_suffixes == null'
	json_is '.fold.why | test("not the whole list")'
	[[ "$stderr" == *"warning: the public suffix list $BATS_TEST_TMPDIR/psl.dat: no \"===END PRIVATE DOMAINS===\" line"* ]]
}

# ---- the failure contract and isopod-result --------------------------------------

# contract S K CMD...: CMD fails as doc/INTERFACES.md "Failure contract" says:
# status S, stdout empty, stderr's last line "<prog>: fatal: ..." (prog the
# first isopod-X in CMD's words), and on ISOPOD_STATUS_FD exactly one line, the
# object {error: that line, error_kind: K, exit: S}.  CMD is exec'd by the
# shell that opens the descriptor (its pid is that shell's), stdin empty.
contract() {
	local want=$1 kind=$2 f="$BATS_TEST_TMPDIR/status" prog="" a last
	shift 2
	for a in "$@"; do
		[[ ! "$a" =~ (^|[/ ])(isopod-[a-z]+) ]] || { prog=${BASH_REMATCH[2]}; break; }
	done
	: >"$f"
	run --separate-stderr bash -c 'f=$1; shift; ISOPOD_STATUS_FD=5 exec "$@" 5>"$f" </dev/null' sh "$f" "$@"
	last=${stderr##*$'\n'}
	if [ "$status" -ne "$want" ] || [ -n "$output" ] || [[ "$last" != "$prog: fatal: "* ]] ||
		[ "$(wc -l <"$f")" -ne 1 ] || ! jq -e --arg l "$last" --arg k "$kind" --argjson s "$want" \
			'. == {error: $l, error_kind: $k, exit: $s}' "$f" >/dev/null; then
		echo "contract broken by: $*"
		echo "  status $status (want $want), stdout: ${output:0:200}"
		echo "  stderr's last line: $last"
		echo "  status descriptor: $(head -c 400 "$f")"
		return 1
	fi
}

# contracts S K [GUARD...] <LINES: each line's words a command (its first an
# isopod-X of bin/) that must fail as contract() says; all are run by this
# shell (a subshell each, which opens the descriptor and execs GUARD... and
# the tool) and their status objects checked in one jq pass (a jq per
# command made the test slow).  Command N's stderr (N from 1) is left in
# $BATS_TEST_TMPDIR/contracts/N.err.
contracts() {
	local want=$1 kind=$2 d="$BATS_TEST_TMPDIR/contracts" line n=0 st out err last bad=""
	local -a words
	shift 2
	rm -rf "$d" && mkdir -p "$d"
	while IFS= read -r line; do
		n=$((n + 1))
		read -r -a words <<<"$line"
		st=0
		(ISOPOD_STATUS_FD=5 exec "$@" "$ISOPOD_SRC/bin/${words[0]}" "${words[@]:1}" 5>"$d/$n.fd" \
			</dev/null >"$d/$n.out" 2>"$d/$n.err") || st=$?
		out="" err=""
		IFS= read -r -d '' out <"$d/$n.out" || :
		IFS= read -r -d '' err <"$d/$n.err" || :
		err=${err%$'\n'}
		last=${err##*$'\n'}
		printf '%s\n' "$last" >"$d/$n.last" # for the jq pass
		if [ "$st" -ne "$want" ] || [ -n "$out" ] || [[ "$last" != "${words[0]}: fatal: "* ]]; then
			bad+="contract broken by: $line"$'\n'"  status $st (want $want), stdout: ${out:0:200}"$'\n'
			bad+="  stderr's last line: $last"$'\n'
		fi
	done
	[ "$n" -gt 0 ] || { echo "contracts: no command"; return 1; }
	# each status descriptor: exactly one line, the object {error: stderr's
	# last line, error_kind: K, exit: S}; one message per one that is not
	bad+=$(jq -Rrn --arg k "$kind" --argjson s "$want" --argjson n "$n" '
		reduce inputs as $l ({}; .[input_filename | sub(".*/"; "")] += [$l])
		| . as $f | range(1; $n + 1) | tostring as $i
		| select(($f[$i + ".fd"] | length) != 1 or
			($f[$i + ".fd"][0] | fromjson? // null) != {error: $f[$i + ".last"][0], error_kind: $k, exit: $s})
		| "command \($i): status descriptor: \($f[$i + ".fd"] // [] | join("\n") | .[:400])"
		' "$d"/*.fd "$d"/*.last) || bad+="contracts: jq failed"
	[ -z "$bad" ] || { echo "$bad"; return 1; }
}

# contract_synopses NAME...: command N's stderr (contracts) has a line
# "usage: NAME " (the Nth NAME), or with NAME "-" any "usage: ".
contract_synopses() {
	local i=0 name err
	for name in "$@"; do
		i=$((i + 1))
		err=""
		IFS= read -r -d '' err <"$BATS_TEST_TMPDIR/contracts/$i.err" || :
		[ "$name" != - ] || name=""
		[[ "$err" == *$'\n'"usage: $name"* || "$err" == "usage: $name"* ]] ||
			{ echo "command $i (${name:-any}): no synopsis on stderr: $err"; return 1; }
	done
}

@test "contract: every tool in bin/ refuses a bad command line with stdout empty, the synopsis, then its fatal line last and one usage status object" {
	local t guard=()
	local -a tools=() any=()
	# a tool that failed to refuse must not touch the host: no network
	# (isopod-netsetup as root), an empty store of our own
	cat >"$BATS_TEST_TMPDIR/cases" <<'CASES'
isopod-allow
isopod-allow propose
isopod-attest
isopod-attest frob
isopod-attest keygen extra
isopod-boot extra
isopod-boot
isopod-broker
isopod-claim extra
isopod-commit
isopod-commit --check
isopod-commit --check --vm x label
isopod-doctor extra
isopod-doctor --quick --adverse
isopod-exec
isopod-exec -- true
isopod-fork --vm x
isopod-gc extra
isopod-image
isopod-image frob
isopod-image rm
isopod-image ls extra
isopod-image build a b
isopod-jail
isopod-mcp extra
isopod-netsetup extra
isopod-oci
isopod-oci frob
isopod-oci push x
isopod-oci pull a b c
isopod-pool
isopod-pool frob
isopod-pool ls extra
isopod-pool take
isopod-pool take --owner-pid 1
isopod-provenance
isopod-provenance sign
isopod-provenance verify a
isopod-result
isopod-result extra
isopod-result --fail 100 --kind usage
isopod-runner extra
isopod-slurm
isopod-slurm frob
isopod-slurm conf extra
isopod-slurm conf --dry-run
isopod-stage
isopod-stage frob
isopod-stage info
isopod-stage ls extra
isopod-stage flatten x
isopod-stop
isopod-stop extra
isopod-supervise extra
isopod-vm
isopod-vm frob
isopod-vm show
isopod-vm ls extra
isopod-warm
isopod-warm frob
isopod-warm ls extra
isopod-warm rm
isopod-warm rm --all 0123
CASES
	! unshare -n true 2>/dev/null || guard=(unshare -n)
	export ISOPOD_HOME="$BATS_TEST_TMPDIR/store"
	for t in "$ISOPOD_SRC"/bin/isopod-*; do
		[[ "$t" != *.* ]] && [ -x "$t" ] || continue
		tools+=("${t##*/}")
	done
	printf '%s --bogus-option\n' "${tools[@]}" | contracts 100 usage "${guard[@]}"
	contract_synopses "${tools[@]/%/ }"
	# every tool's source built and listed: a new one is in the loop
	[ "${#tools[@]}" -eq "$(ls "$ISOPOD_SRC"/bin/isopod-*.c | wc -l)" ] && [ "${#tools[@]}" -ge 24 ] || false
	# an operand missing, too many or of the wrong kind, per tool and verb
	contracts 100 usage "${guard[@]}" <"$BATS_TEST_TMPDIR/cases"
	mapfile -t any < <(sed 's/.*/-/' "$BATS_TEST_TMPDIR/cases")
	contract_synopses "${any[@]}"
}

@test "contract: real failures (not found, a store that is a file, a usage value, warm rm busy 102 and failed 111) leave stdout empty and write one status object" {
	local home="$BATS_TEST_TMPDIR/store" ka kb f="$BATS_TEST_TMPDIR/status" holder
	mkdir -p "$home"
	export ISOPOD_HOME="$home"
	contract 101 not_found isopod-stop --vm nosuchvm
	[[ "${stderr##*$'\n'}" == "isopod-stop: fatal: no such vm"* ]]
	contract 101 not_found isopod-vm show nosuchvm
	contract 101 not_found isopod-stage info st-000000000000
	contract 101 not_found isopod-image rm 0000000000000000000000000000000000000000000000000000000000000000
	contract 101 not_found isopod-warm rm 0123
	# a usage refusal of --check, with no store touched
	contract 100 usage isopod-exec --check --env =x -- true
	jq -e '.error | contains("--env '"'"'=x'"'"'")' "$f" >/dev/null
	# the store is a file: every reader and writer fails (111), none says "empty"
	echo x >"$BATS_TEST_TMPDIR/file"
	for cmd in isopod-claim "isopod-vm ls" "isopod-stage ls" "isopod-warm ls" "isopod-gc --dry-run" \
		"isopod-image ls" "isopod-stop --vm x"; do
		# shellcheck disable=SC2086 # the words are the command
		ISOPOD_HOME="$BATS_TEST_TMPDIR/file" contract 111 infra $cmd
	done
	# warm rm: two snapshots, one busy (its build lock held): 102, nothing removed
	ka=$(printf 'a%.0s' {1..64}) kb=$(printf 'b%.0s' {1..64})
	mkdir -p "$home/warm/$ka" "$home/warm/$kb"
	flock -o "$home/warm/$ka.lock" sleep 30 >/dev/null 2>&1 &
	holder=$!
	for _ in $(seq 100); do flock -n "$home/warm/$ka.lock" true || break; sleep 0.05; done
	contract 102 busy isopod-warm rm aaaa bbbb
	[[ "${stderr##*$'\n'}" == *"warm snapshot $ka is being built or retired (1 of the 2 named are busy); nothing removed" ]]
	[ -d "$home/warm/$ka" ] && [ -d "$home/warm/$kb" ] || false
	kill "$holder"
	wait "$holder" || true
	# a removal that fails (its retired name taken: the tool's pid is the
	# shell's, exec'd): 111, the failure named on stderr, stdout empty
	contract 111 infra bash -c 'mkdir -p "$ISOPOD_HOME/warm/.retired-$1.$$/x" && exec isopod-warm rm bbbb' sh "$kb"
	[[ "$stderr" == *"isopod-warm: warning: unable to remove the warm snapshot $kb: Directory not empty"* ]]
	[[ "${stderr##*$'\n'}" == "isopod-warm: fatal: 1 of 1 warm snapshots not removed (above); 0 removed (0 bytes)" ]]
	# success: nothing on the descriptor, the answer on stdout
	rm -r "$home/warm/.retired-$kb".*
	run --separate-stderr bash -c 'ISOPOD_STATUS_FD=5 isopod-warm rm bbbb aaaa bbbb 5>"$1"' sh "$f"
	[ "$status" -eq 0 ] && [ ! -s "$f" ] || false
	jq -e --arg a "$ka" --arg b "$kb" '.removed == [$b, $a] and .busy == []' <<<"$output"
	run --separate-stderr bash -c 'ISOPOD_STATUS_FD=5 isopod-exec --check --env A=B -- true 5>"$1"' sh "$f"
	[ "$status" -eq 0 ]
	[ "$output" = '{"ok":true}' ]
	[ ! -s "$f" ]
}

@test "--check: isopod-boot and isopod-exec refuse bad values without stdin, a VM or a store" {
	local home="$BATS_TEST_TMPDIR/nostore"
	ISOPOD_HOME="$home" run --separate-stderr isopod-boot --check --vcpus 0 </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"--vcpus 0: out of range"*"CPUs"* ]] || false
	ISOPOD_HOME="$home" run --separate-stderr isopod-boot --check --disk-mib 63 </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"--disk-mib 63"* ]] || false
	ISOPOD_HOME="$home" run --separate-stderr isopod-boot --check --vcpus 1 --mem-mib 64 --disk-mib 64 </dev/null
	[ "$status" -eq 0 ] && [ "$output" = '{"ok":true}' ] || false
	ISOPOD_HOME="$home" run --separate-stderr isopod-exec --check --copy-out /x:/no/such/dir/x -- true </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"no directory /no/such/dir"* ]] || false
	ISOPOD_HOME="$home" run --separate-stderr isopod-exec --check --stdin-file "$BATS_TEST_TMPDIR" -- true </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"not a readable file"* ]] || false
	[ ! -e "$home" ]
}

@test "claim --boot-check: the boot's options refused as isopod-boot --check refuses them (status, status object, diagnostic), before a record or a scratch directory" {
	local home="$BATS_TEST_TMPDIR/store" fb="$BATS_TEST_TMPDIR/st-boot" fc="$BATS_TEST_TMPDIR/st-claim" a bs be
	local fs="$BATS_TEST_TMPDIR/st-stand-in"
	mkdir -p "$home/vms" "$home/runs"
	export ISOPOD_HOME="$home"
	for a in "--vcpus 0" "--vcpus 100000" "--disk-mib 63" "--console-max -1" "--accel x" "--timeout-ms 0" \
		"--frob" "x" "--run-options=x" "ISOPOD_WARM=x" "ISOPOD_ACCEL=x"; do
		# shellcheck disable=SC2086 # the words are the options
		case $a in ISOPOD_*) export "${a?}" && set -- ;; *) set -- $a ;; esac
		run --separate-stderr bash -c 'ISOPOD_STATUS_FD=5 isopod-boot --check "$@" 5>"$0"' "$fb" "$@"
		bs=$status be=${stderr##*$'\n'}
		run --separate-stderr bash -c 'ISOPOD_STATUS_FD=5 isopod-claim --scratch $$ --gc-auto --boot-check -- "$@" 5>"$0"' "$fc" "$@"
		[ "$bs" -eq 100 ] && [ "$status" -eq 100 ] && [ -z "$output" ] || false
		[[ "$be" == "isopod-boot: fatal: "* ]]
		[ "${stderr##*$'\n'}" = "$be" ]
		cmp "$fb" "$fc"
		# the stand-in (t/fake) refuses as the real claim does
		run --separate-stderr bash -c 'ISOPOD_STATUS_FD=5 "$1" --scratch $$ --gc-auto --boot-check -- "${@:2}" 5>"$0"' \
			"$fs" "$ISOPOD_SRC/t/fake/isopod-claim" "$@"
		unset ISOPOD_WARM ISOPOD_ACCEL
		[ "$status" -eq 100 ] && [ -z "$output" ] && [ "${stderr##*$'\n'}" = "$be" ] || false
		cmp "$fb" "$fs"
		# nothing claimed: no record, no scratch directory
		[ -z "$(find "$home/vms" "$home/runs" -mindepth 1)" ]
	done
	# the claim's own refusals are its own; without -- the boot's options are not taken
	run --separate-stderr isopod-claim --boot-check --vcpus 1
	[ "$status" -eq 100 ] && [[ "${stderr##*$'\n'}" == "isopod-claim: fatal: bad option"* ]] || false
	# an option's value -- is not the boot's --
	run --separate-stderr isopod-claim --boot-check --id-file --
	[ "$status" -eq 100 ] && [ "${stderr##*$'\n'}" = "isopod-claim: fatal: --boot-check: the boot's options follow --" ] || false
	[ ! -e -- ] || false
	run --separate-stderr "$ISOPOD_SRC/t/fake/isopod-claim" --boot-check --vcpus 1
	[ "$status" -eq 100 ] && [ "$stderr" = "isopod-claim: fatal: --boot-check: the boot's options follow --" ] || false
	for a in isopod-claim "$ISOPOD_SRC/t/fake/isopod-claim"; do
		run --separate-stderr "$a" --boot-check -- --run-options
		[ "$status" -eq 100 ] && [[ "${stderr##*$'\n'}" == "isopod-claim: fatal: --boot-check: "* ]] || false
		run --separate-stderr "$a" --boot-check -- --vcpus 1 -h
		[ "$status" -eq 100 ] && [[ "${stderr##*$'\n'}" == "isopod-claim: fatal: --boot-check: "* ]] || false
	done
	[ -z "$(find "$home/vms" "$home/runs" -mindepth 1)" ]
	# options the boot takes: the claim goes on
	run --separate-stderr isopod-claim --boot-check -- --vcpus 1 --mem-mib 64 --disk-mib 64
	[ "$status" -eq 0 ]
	[ "$(find "$home/vms" -name meta.json | wc -l)" = 1 ]
}

@test "claim --boot-check: an option its build does not know is the boot's to judge (isopod-boot --check beside it, only on that refusal): passed, the claim goes on; refused, the boot's refusal; the stand-in claim (t/fake) does the same" {
	local home="$BATS_TEST_TMPDIR/store" lx="$BATS_TEST_TMPDIR/libexec" log="$BATS_TEST_TMPDIR/boot.log" claim
	mkdir -p "$lx"
	# the stand-in asks the isopod-boot beside it, the real claim the one
	# in ISOPOD_LIBEXEC: both $lx's
	ln -s "$ISOPOD_SRC/t/fake/isopod-claim" "$lx/isopod-claim"
	export ISOPOD_HOME="$home" ISOPOD_LIBEXEC="$lx"
	for claim in isopod-claim "$lx/isopod-claim"; do
		rm -rf "$home" "$log"
		mkdir -p "$home/vms"
		# a boot of another build: it takes --extra, refuses --other its own way
		cat >"$lx/isopod-boot" <<-EOF
			#!/bin/sh
			echo "\$*" >>"$log"
			case " \$* " in *" --other "*) echo 'isopod-boot: fatal: other build says no' >&2; exit 100 ;; esac
		EOF
		chmod +x "$lx/isopod-boot"
		run --separate-stderr "$claim" --boot-check -- --vcpus 1 --extra
		[ "$status" -eq 0 ] && [ "$(cat "$log")" = "--check --vcpus 1 --extra" ] || false
		[ "$(find "$home/vms" -name meta.json | wc -l)" = 1 ]
		# a refusal of its own range is the claim's: no boot asked
		rm "$log"
		run --separate-stderr "$claim" --boot-check -- --vcpus 0
		[ "$status" -eq 100 ] && [ ! -e "$log" ] || false
		[[ "${stderr##*$'\n'}" == "isopod-boot: fatal: --vcpus 0: out of range"* ]]
		run --separate-stderr "$claim" --boot-check -- --other
		[ "$status" -eq 100 ] && [ "$stderr" = "isopod-boot: fatal: other build says no" ] || false
		[ "$(find "$home/vms" -name meta.json | wc -l)" = 1 ]
		# no boot there to ask (exec fails: 127): the claim's own refusal
		# stands, a usage error (status 100), not the exec's 127
		rm "$lx/isopod-boot"
		run --separate-stderr "$claim" --boot-check -- --other
		[ "$status" -eq 100 ] && [[ "${stderr##*$'\n'}" == "isopod-boot: fatal: bad option"* ]] || false
		[ "$(find "$home/vms" -name meta.json | wc -l)" = 1 ]
	done
}

@test "claim --boot-check: the boot's refusal comes before the claim's own (--net without a slot, a bad --name); nothing locked" {
	local home="$BATS_TEST_TMPDIR/store" locks="$BATS_TEST_TMPDIR/locks" be
	mkdir -p "$home/vms" "$locks"
	export ISOPOD_HOME="$home" ISOPOD_NET_LOCKS="$locks"
	run --separate-stderr isopod-boot --check --vcpus 0
	[ "$status" -eq 100 ] && be=${stderr##*$'\n'} && [[ "$be" == "isopod-boot: fatal: "* ]] || false
	run --separate-stderr isopod-claim --net filtered --boot-check -- --vcpus 0
	[ "$status" -eq 100 ] && [ "${stderr##*$'\n'}" = "$be" ] || false
	run --separate-stderr isopod-claim --name 'BAD!' --boot-check -- --vcpus 0
	[ "$status" -eq 100 ] && [ "${stderr##*$'\n'}" = "$be" ] || false
	[ -z "$(find "$locks" "$home/vms" -mindepth 1)" ] && [ ! -e "$home/locks" ] || false
	# the control: without the boot's refusal, the claim's own
	run --separate-stderr isopod-claim --name 'BAD!' --boot-check -- --vcpus 1
	[ "$status" -eq 100 ] && [[ "${stderr##*$'\n'}" == "isopod-claim: fatal: invalid name"* ]] || false
}

@test "run --commit-as with a bad boot option: the boot's refusal (its --check, before the commit's), the commit's check not asked" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" clog="$BATS_TEST_TMPDIR/commit.log" t
	mkdir "$lx"
	for t in claim boot exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	printf '#!/bin/sh\necho "commit $*" >>"%s"\necho "isopod-commit: fatal: stub says no" >&2\nexit 100\n' "$clog" >"$lx/isopod-commit"
	chmod +x "$lx/isopod-commit"
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --commit-as x --vcpus 0 -- true
	[[ "${stderr}" == *"isopod-boot: fatal: --vcpus 0: out of range"* ]] && [[ "$stderr" != *"stub says no"* ]] || false
	[ ! -e "$clog" ] && [ "$(grep -c '^check boot --check --vcpus 0' "$FAKE_LOG")" = 1 ] || false
	no_claim
	# the control: good boot options, the commit's check refuses
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --commit-as x --vcpus 1 -- true
	[[ "$stderr" == *"stub says no"* ]] && [ "$(cat "$clog")" = "commit --check -- x" ] || false
	no_claim
	# a plain run's boot options are the claim's to check: no isopod-boot --check
	rm "$FAKE_LOG"
	run_isopod -0 run --vcpus 1 -- true
	grep -q '^claim' "$FAKE_LOG" && ! grep -q '^check boot' "$FAKE_LOG" || false
}

@test "--provenance: a directory --copy-in is refused (100) before anything is claimed; isopod-exec --check --for-provenance refuses it, --check alone takes it" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" t d="$BATS_TEST_TMPDIR/tree"
	mkdir "$lx" "$d"
	echo x >"$d/f"
	for t in claim boot exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	ln -s "$ISOPOD_SRC/bin/isopod-provenance" "$lx/isopod-provenance"
	run --separate-stderr isopod-exec --check --copy-in "$d:/d" -- true </dev/null
	[ "$status" -eq 0 ] && [ "$output" = '{"ok":true}' ] || false
	run --separate-stderr isopod-exec --check --for-provenance --copy-in "$d/f:/f" -- true </dev/null
	[ "$status" -eq 0 ] || false
	run --separate-stderr isopod-exec --check --for-provenance --copy-in "$d/f:/f" --copy-in "$d:/d" -- true </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"--copy-in $d: a directory; --provenance signs regular-file inputs only"* ]] || false
	run --separate-stderr isopod-exec --for-provenance -- true </dev/null
	[ "$status" -eq 100 ] && [[ "$stderr" == *"no VM"* ]] || false
	ISOPOD_LIBEXEC="$lx" run_isopod -100 run --copy-in "$d:/d" --copy-out "/x:$BATS_TEST_TMPDIR/x" \
		--provenance "$BATS_TEST_TMPDIR/p" -- true
	[[ "$stderr" == *"--copy-in $d: a directory; --provenance signs regular-file inputs only"* ]] || false
	no_claim
	[ ! -e "$BATS_TEST_TMPDIR/p" ]
}

@test "run --provenance: isopod-exec is run with --for-provenance (a copied-out tree lists its files), a run without it is not" {
	use_fake
	local lx="$BATS_TEST_TMPDIR/libexec" t
	mkdir "$lx"
	for t in claim boot exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	printf '#!/bin/sh\nexit 0\n' >"$lx/isopod-provenance"
	chmod +x "$lx/isopod-provenance"
	ISOPOD_LIBEXEC="$lx" run_isopod run --json-only --copy-out "/x:$BATS_TEST_TMPDIR/x" \
		--provenance "$BATS_TEST_TMPDIR/p" -- true
	grep -qx -- --for-provenance "$FAKE_DIR/args" || { cat "$FAKE_DIR/args"; false; }
	[ "$(cat "$FAKE_DIR/argv")" = true ]
	ISOPOD_LIBEXEC="$lx" run_isopod -0 run --json-only --copy-out "/x:$BATS_TEST_TMPDIR/y" -- true
	! grep -qx -- --for-provenance "$FAKE_DIR/args" || false
	[ "$(cat "$FAKE_DIR/argv")" = true ]
}

@test "run: a step's failure is read from its status object, not guessed from its stderr" {
	use_fake
	# a claim that speaks the contract with a kind no status maps to, and
	# whose last stderr line says something else
	local lx="$BATS_TEST_TMPDIR/libexec" t
	mkdir "$lx"
	for t in boot exec stop result; do ln -s "$ISOPOD_SRC/t/fake/isopod-$t" "$lx/isopod-$t"; done
	cat >"$lx/isopod-claim" <<'C'
#!/bin/sh
echo "isopod-claim: fatal: the diagnostic" >&2
echo "a later line that is not the diagnostic" >&2
[ -z "${ISOPOD_STATUS_FD:-}" ] ||
	echo '{"error":"isopod-claim: fatal: the diagnostic","error_kind":"quota","exit":102}' >&"$ISOPOD_STATUS_FD"
exit 102
C
	chmod +x "$lx/isopod-claim"
	ISOPOD_LIBEXEC="$lx" run_isopod -102 run --json-only -- true
	json_is '. == {ok: false, error: "isopod-claim: fatal: the diagnostic", error_kind: "quota"}'
}

@test "isopod-result: a failure the front end decides is quoted as the front end quotes (600 bytes, ? for non-ASCII)" {
	local long
	long=$(printf 'x%.0s' $(seq 1 700))
	run --separate-stderr isopod-result --vm vm-000000000001 --name n --usage 'isopod run …' \
		--fail 100 --kind usage -- "$(printf 'bad\001é')$long"
	[ "$status" -eq 100 ]
	json_is '.ok == false and .error_kind == "usage" and .vm == {id: "vm-000000000001", name: "n"}'
	json_is '(.error | startswith("bad???xx")) and (.error | endswith("…(706 bytes)"))'
	[[ "$stderr" == *"usage: isopod run …"$'\n'"isopod: fatal: bad???"* ]]
	run --separate-stderr isopod-result --failed boot --rc 7 --dir "$BATS_TEST_TMPDIR"
	[ "$status" -eq 111 ]
	json_is '. == {ok: false, error: "isopod-boot failed (exit 7)", error_kind: "infra"}'
}

@test "isopod-result --remove-dir: the directory's files, then the directory, once the result is out; a subdirectory leaves it; without the option nothing goes" {
	local d="$BATS_TEST_TMPDIR/scratch"
	mkdir "$d"
	printf '{"ok":false,"error":"the why","error_kind":"busy"}\n' >"$d/boot.status"
	printf 'noise\n' >"$d/boot.err"
	run --separate-stderr isopod-result --failed boot --rc 102 --dir "$d"
	json_is '. == {ok: false, error: "the why", error_kind: "busy"}'
	[ -f "$d/boot.status" ]
	[ -f "$d/boot.err" ]
	run --separate-stderr isopod-result --failed boot --rc 102 --dir "$d" --remove-dir
	[ "$status" -eq 102 ]
	json_is '. == {ok: false, error: "the why", error_kind: "busy"}'
	[ ! -e "$d" ]
	mkdir -p "$d/sub"
	printf 'the last line\n' >"$d/boot.err"
	run --separate-stderr isopod-result --failed boot --rc 7 --dir "$d" --remove-dir
	json_is '. == {ok: false, error: "the last line", error_kind: "infra"}'
	[ -d "$d/sub" ]
	[ ! -e "$d/boot.err" ]
}

@test "gc: a path that does not fit (a long ISOPOD_CACHE) is a usage error (100) naming its start, stdout empty: lib/gcstore.c returns it, isopod-gc exits" {
	local home="$BATS_TEST_TMPDIR/gcstore" pad root n
	# The root fits PATH_MAX (4095 bytes) but root/kernel does not; then a
	# root that does not fit at all.
	for n in 4092 5000; do
		pad=$(printf '%*s' "$((n - ${#BATS_TEST_TMPDIR} - 1))" '' | tr ' ' c)
		root="$BATS_TEST_TMPDIR/$pad"
		[ "${#root}" -eq "$n" ]
		ISOPOD_HOME="$home" ISOPOD_CACHE="$root" run --separate-stderr isopod-gc --cache --dry-run
		[ "$status" -eq 100 ]
		[[ "$stderr" == *"isopod-gc: fatal: path too long: ${root:0:64}..."* ]]
		[ -z "$output" ]
	done
	# the same store and option sweep when the path fits
	ISOPOD_HOME="$home" ISOPOD_CACHE="$BATS_TEST_TMPDIR/cache" run --separate-stderr isopod-gc --cache --dry-run
	[ "$status" -eq 0 ]
	json_is '.cache_removed == [] and .cache_busy == []'
}

@test "fuzz/qcow2_fuzz.c: a run ended without atexit (libFuzzer's out-of-memory exit, as a crash or SIGINT) leaves no input's bytes in /dev/shm, an empty directory at most" {
	local d="$BATS_TEST_TMPDIR" srcs
	command -v clang >/dev/null || skip "clang not installed"
	[ "$(id -u)" -eq 0 ] || skip "needs root: a /dev/shm of its own (a mount namespace)"
	cd "$ISOPOD_SRC"
	# the target's sources as fuzz/run builds it (one list)
	srcs=$(sed -n 's/^\tqcow2) srcs="\([^"]*\)"$/\1/p' fuzz/run)
	[ -n "$srcs" ]
	# shellcheck disable=SC2086 # a word list
	clang -g -O1 -std=c11 -D_GNU_SOURCE -Ilib -fsanitize=fuzzer,address,undefined \
		-o "$d/qcow2_fuzz" $srcs
	qemu-img create -q -f qcow2 "$d/a" 1M
	head -c 2200000 /dev/zero >"$d/big"
	# a is run (its template written in the store); reading big is over
	# -malloc_limit_mb: libFuzzer's out-of-memory _Exit, no atexit
	run unshare -m sh -c 'mount -t tmpfs none /dev/shm &&
		{ "$1/qcow2_fuzz" -malloc_limit_mb=1 -artifact_prefix="$1/" "$1/a" "$1/big" >/dev/null 2>&1
		echo "status $?"; find /dev/shm -mindepth 1 | sed "s|^/dev/shm/qcow2_fuzz\.......|store|"; }' sh "$d"
	echo "$output"
	[ "${lines[0]}" != "status 0" ] && [ "${lines[1]}" = store ] &&
		[ "${lines[2]}" = store/overlays ] && [ "${#lines[@]}" -eq 3 ] || false
}

# ---- the bench's tables (bench/verdict.jq), on canned figures -----------------

# t/bench/*.json hold figures just over or at their goals: each verdict must
# be of the unrounded figure (716 / 621 = 1.153 once read "1.15 ... met")
@test "bench/run --table: a ratio just over its goal is NOT met, printed with 3 decimals; one at its goal is met" {
	run --separate-stderr sh "$ISOPOD_SRC/bench/run" --table "$ISOPOD_SRC/t/bench/results.json"
	[ "$status" -eq 0 ]
	echo "$output"
	# goal 1: 716 / 621 = 1.1530 against 1.15
	[[ "$output" == *"orchestration ratio "*" 1.153 "*"goal <= 1.15: NOT met"* ]]
	# goal 8: 660 / 600 = 1.1, at the line
	[[ "$output" == *"ratio 1.100, goal <= 1.1: met"* ]]
	# goal 4: stdin 249.8 / 500 = 0.4996 against >= 0.5 (printed 0.500); copy-out 0.5, at the line
	[[ "$output" == *"stdin throughput "*"0.500 x the drive (by round 0.500-0.500), goal >= 0.5: NOT met"* ]]
	[[ "$output" == *"copy-out throughput "*"0.500 x the drive (by round 0.500-0.500), goal >= 0.5: met"* ]]
	# goal 2: 72 / 716 = 0.1006 against 0.10
	[[ "$output" == *"72 ms, 0.101x cold"*"goal <= 0.1: NOT met"* ]]
	# goal 3: 30.04 ms against 30
	[[ "$output" == *"front end own cost "*"30.0 / 12.3 ms"*"goal <= 30 ms: NOT met"* ]]
	# goal 7: a mean of 25600.125 KiB, not floored to 25600, against 25600
	[[ "$output" == *"QEMU PSS beyond guest RAM, resumed"*"against 25600.125): NOT met"* ]]
	[ "$(grep -c ': met' <<<"$output")" -eq 4 ]
	[ "$(grep -c 'NOT met' <<<"$output")" -eq 6 ]
}

@test "bench/jail --table, bench/scale --table: each verdict of the unrounded ratio" {
	run --separate-stderr sh "$ISOPOD_SRC/bench/jail" --table "$ISOPOD_SRC/t/bench/jail.json"
	[ "$status" -eq 0 ]
	echo "$output"
	# 1580 / 1500 = 1.0533 against 1.05; 210 / 200 = 1.05, at the line
	[[ "$output" == *"ratio 1.053, goal <= 1.05: NOT met"* ]]
	[[ "$output" == *"ratio 1.050, goal <= 1.05: met"* ]]
	run --separate-stderr sh "$ISOPOD_SRC/bench/scale" --table "$ISOPOD_SRC/t/bench/scale.json"
	[ "$status" -eq 0 ]
	echo "$output"
	# 1102 / (8 / 2 x 250) = 1.102 against 1.1; 4400 / 4000 = 1.1, at the line
	[[ "$output" == *"8 runs at once"*"one run 1.102, goal <= 1.1: NOT met"* ]]
	[[ "$output" == *"32 runs at once"*"one run 1.100, goal <= 1.1: met"* ]]
	run --separate-stderr sh "$ISOPOD_SRC/bench/jail" --table
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"usage: bench/jail"* ]]
}

@test "bench/verdict.jq: fixed(n) prints n decimals, rounding only the print" {
	run jq -L "$ISOPOD_SRC/bench" -nc 'include "verdict";
		[(716 / 621, 1.15, 2, 0.4996, -0.0004, -1.2345, null) | fixed(3)], [30.04 | fixed(1)], [12.5 | fixed(0)]'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = '["1.153","1.150","2.000","0.500","0.000","-1.235","null"]' ]
	[ "${lines[1]}" = '["30.0"]' ]
	[ "${lines[2]}" = '["13"]' ]
}

@test "bench/*: no ratio, and no figure a goal is compared with, is rounded before its JSON" {
	# the form the bench once stored its ratios in: (a / b * 100 | round) / 100
	cd "$ISOPOD_SRC"
	run grep -nE '\* 100 \| round' bench/run bench/jail bench/scale bench/broker bench/compare bench/pool
	echo "$output"
	[ "$status" -eq 1 ]
}
