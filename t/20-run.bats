#!/usr/bin/env bats
# isopod run: real microVM boots (TCG here).  Every behaviour of issue #2,
# each failure path with a negative test.

load helpers

setup_file() {
	isopod_setup_file --images
	ROOT=$ISOPOD_SRC
	export ROOT
	DATA="$(mktemp -d /tmp/isopod-t20-data.XXXXXX)"
	export DATA
}

teardown_file() {
	rm -rf "$DATA"
	isopod_teardown_file
}

isopod() { "$ROOT/sh/isopod" "$@"; }

@test "run: echo prints a complete JSON result and exits 0" {
	run --separate-stderr isopod run --json-only --cold -- echo hello
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.ok == true and .exit_code == 0 and .signal == null and .timed_out == false'
	echo "$output" | jq -e '.stdout == "hello\n" and .stdout_bytes == 6 and .stdout_truncated == false'
	echo "$output" | jq -e '.stderr == "" and .stderr_bytes == 0'
	echo "$output" | jq -e '.accel == "tcg" or .accel == "kvm"'
	echo "$output" | jq -e 'if .accel == "tcg" then (.accel_reason | length > 0) else true end'
	# TCG's guest was told the store's TSC rate (null: the host kept none); KVM's has none
	local t
	t=$(cat "$ISOPOD_HOME/accel/tsc.json" 2>/dev/null || echo null)
	echo "$output" | jq -e --argjson t "$t" \
		'if .accel == "tcg" then .tsc_khz == ($t.tsc_khz | if . == 0 then null else . end) else has("tsc_khz") | not end'
	echo "$output" | jq -e '.path == "cold" and (.vm.id | startswith("vm-")) and (.vm.name | length > 0)'
	echo "$output" | jq -e '.timings.boot_ms > 0 and .timings.exec_ms >= 0 and .timings.total_ms >= .timings.boot_ms'
	echo "$output" | jq -e '.warnings == [] and .copied_out == []'
	log=$(echo "$output" | jq -r .stdout_log)
	[ "$(cat "$log")" = hello ]
	# the VM is stopped after the run, and its record kept
	id=$(echo "$output" | jq -r .vm.id)
	! vm_locked "$id" || false
	[ -f "$ISOPOD_HOME/vms/$id/meta.json" ]
}

@test "jail: a running VM's QEMU is in the jail (uid, no_new_privs, no capabilities, only lo, its own pid namespace, cgroup limits); the result says what was applied" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	echo "$output" | jq -e '.jail.enabled == true and .jail.uid >= 2013265920 and .jail.uid < 2013331456 and .jail.no_new_privs == true'
	echo "$output" | jq -e '(.jail.namespaces | index("pid") and index("net")) and .jail.cgroup.memory_bytes > 0 and .jail.cgroup.pids > 0'
	echo "$output" | jq -e '.warnings == []'
	jail_check "$id"
	# the VM directory is the jail's group's while QEMU runs (sticky: it
	# cannot replace root's files), and a link the jail plants there does
	# not steer a root tool: isopod-exec refuses it
	d=$ISOPOD_HOME/vms/$id
	[ "$(stat -c %a:%u "$d")" = 1770:0 ]
	uid=$(jq -r .jail.uid "$d/meta.json")
	# (as the jail's uid, from inside the directory: the store above it is root's 0700)
	(cd "$d" && setpriv --reuid="$uid" --regid="$uid" --clear-groups sh -c 'mv agent.sock a.real && ln -s a.real agent.sock')
	run --separate-stderr isopod-exec --vm "$id" --timeout-ms 5000 -- true
	[ "$status" -ne 0 ]
	echo "$stderr $output" | grep -q "Too many levels of symbolic links"
	(cd "$d" && ! setpriv --reuid="$uid" --regid="$uid" --clear-groups rm -f meta.json) || false
	[ -f "$d/meta.json" ]
	isopod vm stop "$id" >/dev/null
	# QEMU gone: the directory and disk are root's again, the link removed
	[ "$(stat -c %a:%u:%g "$d")" = 700:0:0 ]
	[ "$(stat -c %a:%u:%g "$d/disk.qcow2")" = 600:0:0 ]
	[ ! -L "$d/agent.sock" ]
}

@test "jail: mutation: with ISOPOD_JAIL=0 (or the host's 'jail = no') jail_check fails on the same VM, and the result says so in warnings" {
	ISOPOD_JAIL=0 run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	echo "$output" | jq -e '.jail.enabled == false and (.jail.why | test("ISOPOD_JAIL=0"))'
	echo "$output" | jq -e '.warnings | any(test("QEMU runs unjailed .ISOPOD_JAIL=0"))'
	run --separate-stderr jail_check "$id"
	[ "$status" -eq 1 ]
	echo "$stderr" | grep -q "no seccomp filter of the jail's"
	echo "$stderr" | grep -q "the supervisor's mount namespace"
	isopod vm stop "$id" >/dev/null
	echo 'jail = no' >"$DATA/jail.conf"
	ISOPOD_SYSCONFIG=$DATA/jail.conf run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.jail.enabled == false and (.warnings | any(test("unjailed .*jail.conf:1: jail = no")))'
	ISOPOD_JAIL=maybe run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 100 ]
}

@test "run: the guest's exit status is isopod's exit status" {
	run --separate-stderr isopod run --json-only -- sh -c 'echo out; echo err >&2; exit 3'
	[ "$status" -eq 3 ]
	echo "$output" | jq -e '.ok == true and .exit_code == 3 and .stdout == "out\n" and .stderr == "err\n"'
}

@test "run: a signalled command exits 128+sig with signal set" {
	run --separate-stderr isopod run --json-only -- sh -c 'kill -TERM $$'
	[ "$status" -eq 143 ]
	echo "$output" | jq -e '.exit_code == 143 and .signal == 15 and .timed_out == false'
}

@test "run: command not found is exit 127 with error_kind not_found, not ok:false" {
	run -127 --separate-stderr isopod run --json-only -- no-such-command-xyz
	[ "$status" -eq 127 ]
	echo "$output" | jq -e '.ok == true and .exit_code == 127 and .error_kind == "not_found"'
	echo "$output" | jq -e '.error | contains("no-such-command-xyz")'
}

@test "run: a file that is not executable is exit 126" {
	run --separate-stderr isopod run --json-only -- /etc/passwd
	[ "$status" -eq 126 ]
	echo "$output" | jq -e '.exit_code == 126 and .error_kind == "not_executable"'
}

@test "run: a missing --cwd names the directory, not /bin/sh" {
	run --separate-stderr isopod run --json-only --cwd /no/such/dir -- pwd
	[ "$status" -ne 0 ]
	echo "$output" | jq -e '.error_kind == "cwd_missing" and (.error | contains("/no/such/dir"))'
	! echo "$output" | jq -e '.error | contains("/bin/sh")' || false
}

@test "run: --cwd and --env reach the command" {
	run --separate-stderr isopod run --json-only --cwd /tmp --env FOO=bar --env 'SP=a b' -- sh -c 'echo "$PWD $FOO $SP"'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout == "/tmp bar a b\n"'
}

@test "run: PATH and HOME are the agent's defaults; --env replaces each (one entry, not a second), and the command is looked up on the PATH given" {
	local path
	path=$(sed -n 's/^#define DEFAULT_PATH "\(.*\)"$/\1/p' "$ROOT/agent/agent.h")
	[ -n "$path" ]
	run --separate-stderr isopod run --json-only -- env
	[ "$status" -eq 0 ]
	jq -e --arg p "PATH=$path" '(.stdout | split("\n")) as $e |
		[$e[] | select(startswith("PATH="))] == [$p] and
		[$e[] | select(startswith("HOME="))] == ["HOME=/root"]' <<<"$output"
	# env itself, not a shell: a shell would fold a duplicate away
	run --separate-stderr isopod run --json-only --env PATH=/opt/none:/bin --env HOME=/tmp -- env
	[ "$status" -eq 0 ]
	json_is '(.stdout | split("\n")) as $e |
		[$e[] | select(startswith("PATH="))] == ["PATH=/opt/none:/bin"] and
		[$e[] | select(startswith("HOME="))] == ["HOME=/tmp"]'
	# the agent searches the command's own PATH, not its default
	run -127 --separate-stderr isopod run --json-only --env PATH=/opt/none -- env
	json_is '.exit_code == 127 and .error_kind == "not_found"'
}

@test "run: bad env names are refused before boot (exit 100), no VM record made" {
	mkdir -p "$ISOPOD_HOME/vms"
	before=$(ls "$ISOPOD_HOME/vms" | wc -l)
	for bad in '=x' 'noequals' ''; do
		run --separate-stderr isopod run --env "$bad" -- true
		[ "$status" -eq 100 ]
	done
	[ "$(ls "$ISOPOD_HOME/vms" | wc -l)" -eq "$before" ]
}

@test "run: out-of-range resources are refused before boot naming the range" {
	run --separate-stderr isopod run --vcpus 0 -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"vcpus"* ]]
	run --separate-stderr isopod run --vcpus 4096 -- true
	[ "$status" -eq 100 ]
	run --separate-stderr isopod run --mem-mib 1 -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"mem"* ]]
	run --separate-stderr isopod run --mem-mib 99999999 -- true
	[ "$status" -eq 100 ]
	run --separate-stderr isopod run --timeout-s 0 -- true
	[ "$status" -eq 100 ]
	run --separate-stderr isopod run --disk-mib 1 -- true
	[ "$status" -eq 100 ]
	run --separate-stderr isopod run --console-max -1 -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--console-max -1: out of range 0.."* ]]
}

@test "run: --disk-mib below the base image's size is a usage error naming that size, before QEMU starts" {
	bsha=$(cat "$ISOPOD_HOME/images/current-base")
	mib=$(( ($(stat -c %s "$ISOPOD_HOME/images/base-$bsha.img") + 1048575) / 1048576 ))
	# within --check's 64..1048576, so refused by the boot itself, which
	# knows the base
	run --separate-stderr isopod run --json-only --disk-mib $((mib - 1)) -- true
	[ "$status" -eq 100 ]
	json_is '.ok == false and .error_kind == "usage"'
	[[ "$stderr" == *"--disk-mib $((mib - 1))"*"the base image is $mib MiB"* ]]
	id=$(echo "$output" | jq -r .vm.id)
	[ ! -e "$ISOPOD_HOME/vms/$id/disk.qcow2" ] && ! vm_locked "$id" || false
}

@test "run: the hostname is the VM's vanity name; lo is up; /tmp is 1777" {
	run --separate-stderr isopod run --json-only -- sh -c 'hostname; stat -c %a /tmp; ip -o link show lo 2>/dev/null || cat /sys/class/net/lo/operstate; ping -c1 -W2 127.0.0.1 >/dev/null && echo lo-ok'
	[ "$status" -eq 0 ]
	name=$(echo "$output" | jq -r .vm.name)
	first=$(echo "$output" | jq -r .stdout | head -n1)
	[ "$first" = "$name" ]
	echo "$output" | jq -r .stdout | grep -qx 1777
	echo "$output" | jq -r .stdout | grep -qx lo-ok
}

# The TCG guest's clock (doc/DECISIONS.md "TSC under TCG"): its TSC is the
# host's, told the host's rate as the store measured and kept it
# (accel/tsc.json, lib/tsc.c), and tsc=reliable keeps it on the TSC.  The
# rate is checked against the host's clock over 3 s: the host writes its
# time to the guest's stdin twice, 3 s apart, and the guest answers each
# line with its uptime.  This is the clock's correctness, not a speed: the
# bound (3 %) is loose because each line's delivery and the guest's `cut`
# add tens of ms (this host: within 0.6 %), and it still fails a guest
# told the old 2 GHz on a host whose TSC is not within 3 % of 2 GHz
# (this one's, 2096 MHz: 4.8 % fast).  The guest boots on a loaded host:
# that is when the watchdog would take the TSC away (below).
@test "run: a TCG guest keeps the TSC clocksource (tsc=reliable) at the store's measured rate: its clock runs at the host's within 3 %" {
	local id rc=0 khz cmdline pids=() i
	# The guest boots on a loaded host (a busy loop per CPU, QEMU niced
	# below them): TCG then loses PIT ticks, refined-jiffies falls behind,
	# and without tsc=reliable the watchdog marks the TSC unstable within
	# 2 s of boot even at the right rate (measured; idle, it does not)
	for ((i = 0; i < $(nproc); i++)); do
		timeout 60 sh -c 'while :; do :; done' &
		pids+=($!)
	done
	run --separate-stderr nice -n 10 "$ROOT/sh/isopod" run --json-only --keep --cold --net none -- cat /proc/cmdline
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || :
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	if [ "$(echo "$output" | jq -r .accel)" != tcg ]; then
		isopod-stop --vm "$id" >/dev/null
		skip "KVM: its guests use kvm-clock, their line is unchanged"
	fi
	cmdline=$(echo "$output" | jq -r .stdout)
	# shellcheck disable=SC2016 # guest script
	{ sleep 1; date +%s%N; sleep 3; date +%s%N; } |
		isopod-exec --vm "$id" --stdin-file - -- sh -c 'while read -r h; do echo "$h $(cut -d" " -f1 /proc/uptime)"; done
			cat /sys/devices/system/clocksource/clocksource0/current_clocksource' >"$BATS_TEST_TMPDIR/clock.json" || rc=$?
	isopod-stop --vm "$id" >/dev/null || rc=1
	[ "$rc" -eq 0 ]
	jq -r .stdout "$BATS_TEST_TMPDIR/clock.json" >"$BATS_TEST_TMPDIR/clock"
	cat "$BATS_TEST_TMPDIR/clock"
	# read after 4 s: the watchdog had its second to mark the TSC unstable
	[ "$(sed -n 3p "$BATS_TEST_TMPDIR/clock")" = tsc ]
	awk 'NR == 1 { h = $1; g = $2 } NR == 2 { r = ($2 - g) * 1e9 / ($1 - h) }
		END { printf "rate %s\n", r; exit !(NR >= 2 && r > 0.97 && r < 1.03) }' \
		"$BATS_TEST_TMPDIR/clock"
	# the rate the store kept, whole MHz, is the one the guest was told
	# (microvm appends its virtio_mmio devices to the line)
	khz=$(jq -r .tsc_khz "$ISOPOD_HOME/accel/tsc.json")
	[ "$khz" -ge 100000 ] && [ $((khz % 1000)) -eq 0 ] || false
	grep -q " tsc_early_khz=$khz lpj=4000000 tsc=reliable " <<<"$cmdline"
}

@test "run: timeout kills the whole process group, keeps output, reports signal 9" {
	run --separate-stderr isopod run --json-only --timeout-s 8 -- sh -c 'echo started; sleep 1000 & sleep 1000'
	[ "$status" -eq 137 ]
	echo "$output" | jq -e '.timed_out == true and .signal == 9 and .exit_code == 137'
	echo "$output" | jq -e '.stdout == "started\n"'
	# a healthy agent reports the timeout itself, within the host's grace
	echo "warnings: $(echo "$output" | jq -c .warnings)" >&3
	echo "$output" | jq -e '.warnings | all(test("did not report") | not)'
}

# A guest process that starves the agent for good: SCHED_FIFO 99 on the one
# vCPU with real-time throttling off never yields, so PID 1 cannot run its
# timer (a deterministic stand-in for a fork bomb).  It prints, gives the
# agent a second to forward that, then spins.  Built with musl-gcc, as the agent.
rt_hog() {
	[ -x "$DATA/rt-hog" ] && return 0
	cat >"$DATA/rt-hog.c" <<'EOF_C'
#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void)
{
	struct sched_param sp = {.sched_priority = 99};
	int fd = open("/proc/sys/kernel/sched_rt_runtime_us", O_WRONLY);

	if (fd < 0 || write(fd, "-1\n", 3) != 3)
		return 2;
	close(fd);
	if (write(1, "hogging\n", 8) != 8)
		return 3;
	sleep(1);
	/* the raw syscall: musl's sched_setscheduler() is ENOSYS by design */
	if (syscall(SYS_sched_setscheduler, 0, SCHED_FIFO, &sp) < 0)
		return 4;
	for (;;)
		;
}
EOF_C
	musl-gcc -static -O1 -o "$DATA/rt-hog" "$DATA/rt-hog.c"
}

@test "exec: the host enforces --timeout-ms when the guest starves its agent (timed out, 137, VM stopped)" {
	rt_hog
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	t0=$(date +%s%N)
	run --separate-stderr isopod-exec --vm "$id" --timeout-ms 5000 \
		--copy-in "$DATA/rt-hog:/root/rt-hog" --copy-out /root/none:"$DATA" -- /root/rt-hog
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "isopod-exec took $ms ms: $output" >&3
	[ "$status" -eq 1 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .signal == 9 and .exit_code == 137'
	echo "$output" | jq -e '.stdout == "hogging\n"'
	echo "$output" | jq -e '.warnings | any(test("did not report the command.s end"))'
	echo "$output" | jq -e '.copied_out[0].error | test("stopped at the deadline")'
	# 5 s + the 1.5 s grace + QMP quit; the watchdog (30 s) never came into it
	[ "$ms" -lt 8000 ]
	for _ in $(seq 1 100); do vm_locked "$id" || break; sleep 0.1; done
	run ! vm_locked "$id"
}

@test "exec: copy-out is bounded in size (--copy-out-max) and in time (the budget + 2 s); then the vm is stopped, the result kept" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	mkdir -p "$DATA/co"
	# over the cap: the agent refuses it before sending a byte; the vm lives on
	run --separate-stderr isopod-exec --vm "$id" --copy-out-max 1000 \
		--copy-out /root/k:"$DATA/co/" --copy-out /root/s:"$DATA/co/" \
		-- sh -c 'head -c 4096 /dev/zero >/root/k; echo small >/root/s'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.copied_out[0].error | test("4096 bytes, more than the 1000")'
	echo "$output" | jq -e '.copied_out[1].bytes == 6'
	[ ! -e "$DATA/co/k" ] && [ -s "$DATA/co/s" ] || false
	vm_locked "$id"
	# a sparse 32 GiB file: copying it would take over a minute under TCG
	# (and fill the disk); it ends 2 s after the 3 s budget, the vm stopped.
	# (2 GiB was not enough: the agent reads holes with O_DIRECT at ~440
	# MB/s, doc/SPEED.md "Goal 4, a cold copy-out", and at load 1 the
	# copy ended within the 5 s.)
	t0=$(date +%s%N)
	run --separate-stderr isopod-exec --vm "$id" --timeout-ms 3000 --copy-out-max $((64 << 30)) \
		--copy-out /root/big:"$DATA/co/" --copy-out /root/s:"$DATA/co/s2" \
		-- sh -c 'truncate -s 32G /root/big; echo small >/root/s'
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "isopod-exec took $ms ms: $output" >&3
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.ok == true and .exit_code == 0 and .timed_out == false'
	echo "$output" | jq -e '.copied_out[0].error | test("copy-out allowance, ran out")'
	echo "$output" | jq -e '.copied_out[1].error | test("not copied: the vm was stopped")'
	echo "$output" | jq -e '.warnings | length == 2'
	[ "$ms" -lt 9000 ]
	# nothing of the big file (nor a temporary) is left on the host
	[ "$(ls -A "$DATA/co")" = s ]
	run ! vm_locked "$id"
}

@test "exec: each log keeps at most --log-max bytes, byte-exact; the rest is counted (stdout_bytes), not written" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	# 1 MiB of numbered lines (not one repeated byte: a shifted or stale
	# prefix would show) through a 5000-byte cap on each stream, not a
	# multiple of the pipe's 4 KiB: the frame that crosses it is cut
	gen='seq 1 200000 | head -c 1048576'
	run --separate-stderr isopod-exec --vm "$id" --log-max 5000 -- sh -c "$gen; echo under >&2"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.exit_code == 0 and .stdout_bytes == 1048576 and .stdout_log_truncated == true'
	echo "$output" | jq -e '.stderr_bytes == 6 and .stderr_log_truncated == false'
	log=$(echo "$output" | jq -r .stdout_log)
	[ "$(stat -c %s "$log")" -eq 5000 ]
	cmp "$log" <(seq 1 200000 | head -c 5000)
	[ "$(cat "$(echo "$output" | jq -r .stderr_log)")" = under ]
	# under the cap (the default): the whole output, the field false
	run --separate-stderr isopod-exec --vm "$id" -- sh -c "$gen"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout_bytes == 1048576 and .stdout_log_truncated == false'
	cmp "$(echo "$output" | jq -r .stdout_log)" <(seq 1 200000 | head -c 1048576)
	isopod-stop --vm "$id" >/dev/null
}

@test "console: console.log keeps at most --console-max bytes, byte-exact, the rest counted (console_bytes); cold, snapshot-build and warm" {
	# numbered, and no newline: the tty's ONLCR makes each \n a \r\n
	gen() { seq 1 700000 | tr '\n' ' ' | head -c "$1"; }
	cmd() { echo "gen() { seq 1 700000 | tr '\\n' ' ' | head -c \"\$1\"; }; gen $1 >/dev/console; echo ok"; }
	# where the command's bytes start: after the agent's own lines (cold)
	from() { grep -a -b -o '1 2 3 4 5 6 ' "$1" | head -n 1 | cut -d: -f1; }
	# 3 MiB through a 1 MiB cap: the log is the cap, the run succeeds
	run --separate-stderr isopod run --json-only --cold --console-max 1048576 -- sh -c "$(cmd 3145728)"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.ok == true and .exit_code == 0 and .stdout == "ok\n"'
	echo "$output" | jq -e '.console_log_truncated == true and .console_bytes >= 3145728'
	log=$ISOPOD_HOME/vms/$(echo "$output" | jq -r .vm.id)/console.log
	[ "$(stat -c %s "$log")" -eq 1048576 ]
	off=$(from "$log")
	cmp <(tail -c +$((off + 1)) "$log") <(gen $((1048576 - off)))
	# under the cap, through the warm pool (its build, then a resume; a
	# shape of its own, whatever ran before): all of it
	for path in snapshot-build warm; do
		run --separate-stderr isopod run --json-only --mem-mib 328 --console-max 1048576 -- sh -c "$(cmd 100000)"
		[ "$status" -eq 0 ]
		echo "$output" | jq -e --arg p "$path" '.ok == true and .path == $p and .stdout == "ok\n"'
		echo "$output" | jq -e '.console_log_truncated == false and .console_bytes >= 100000'
		log=$ISOPOD_HOME/vms/$(echo "$output" | jq -r .vm.id)/console.log
		[ "$(stat -c %s "$log")" -eq "$(echo "$output" | jq .console_bytes)" ]
		off=$(from "$log")
		cmp <(tail -c +$((off + 1)) "$log") <(gen 100000)
	done
}

@test "console: a kept VM's record says truncated at once; its supervisor SIGKILLed while the guest floods the console: QEMU goes too, the exec fails (111)" {
	run --separate-stderr isopod run --json-only --keep --console-max 65536 -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	m=$ISOPOD_HOME/vms/$id/meta.json
	q=$(jq -r .qemu_pid "$m")
	isopod-exec --vm "$id" --timeout-ms 60000 -- sh -c 'while :; do cat /proc/cpuinfo; done >/dev/console' >/dev/null 2>&1 &
	ex=$!
	for _ in $(seq 1 100); do jq -e '.console_log_truncated == true' "$m" >/dev/null && break; sleep 0.1; done
	jq -e '.console_log_truncated == true' "$m"
	[ "$(stat -c %s "$ISOPOD_HOME/vms/$id/console.log")" -eq 65536 ]
	kill -9 "$(jq -r .supervisor_pid "$m")" # ours: this test started it
	for _ in $(seq 1 100); do kill -0 "$q" 2>/dev/null || break; sleep 0.1; done
	run ! kill -0 "$q"
	run wait "$ex"
	[ "$status" -eq 111 ]
	isopod-gc >/dev/null # the jail's cgroups of the killed supervisor
}

@test "exec: at the deadline a QEMU that ignores QMP (SIGSTOPped) is killed: a timeout, the vm stopped" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	qpid=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	[ "$qpid" -gt 0 ]
	(sleep 1; kill -STOP "$qpid") 3>&- &
	stopper=$!
	t0=$(date +%s%N)
	run --separate-stderr isopod-exec --vm "$id" --timeout-ms 3000 -- sleep 60
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	wait "$stopper" || :
	echo "isopod-exec took $ms ms: $output" >&3
	# whatever happened, never leave a stopped QEMU behind
	locked=0
	vm_locked "$id" && locked=1
	kill -CONT "$qpid" 2>/dev/null || :
	[ "$locked" -eq 0 ]
	[ "$status" -eq 1 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .exit_code == 137'
	echo "$output" | jq -e '.warnings | any(test("the host stopped the vm"))'
	[ "$ms" -lt 12000 ]
}

@test "run: a fork bomb under --timeout-s ends at the deadline with timed_out and 137, not unresponsive" {
	t0=$(date +%s)
	# the main process stays (its exit would end the group), the bomb grows
	run --separate-stderr isopod run --json-only --timeout-s 15 -- sh -c 'echo bomb; b() { b | b & }; b; exec sleep 1000'
	s=$(( $(date +%s) - t0 ))
	echo "run took $s s: $(echo "$output" | jq -c 'del(.stdout, .stderr)')" >&3
	[ "$status" -eq 137 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .signal == 9 and .exit_code == 137'
	echo "$output" | jq -e '.stdout | startswith("bomb\n")'
	# the budget, the grace and the VM's stop, in whole seconds
	[ "$s" -le 19 ]
}

@test "run: background children die with the command; the run does not wait for them" {
	start=$(date +%s)
	run --separate-stderr isopod run --json-only -- sh -c '(sleep 60; echo late) & echo early'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout == "early\n"'
	[ $(( $(date +%s) - start )) -lt 50 ]
}

@test "run: stdin is forwarded, from a pipe and from --stdin-file" {
	run --separate-stderr bash -c 'printf "abc\ndef\n" | "$ROOT/sh/isopod" run --json-only -- wc -l'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '(.stdout | gsub(" "; "")) == "2\n"'
	printf 'from-file' > "$DATA/in.txt"
	run --separate-stderr isopod run --json-only --stdin-file "$DATA/in.txt" -- cat
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout == "from-file"'
}

# ok_quiet: $output is a success (exit 0) with no error, warning or stderr.
ok_quiet() {
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	json_is '.ok == true and .exit_code == 0 and .signal == null and .timed_out == false and
		.warnings == [] and (has("error") | not) and (has("error_kind") | not)'
}

@test "run: stdin the command never reads (1 and 4 MiB to true; EPIPE in the guest) is exit 0 with no error or warning" {
	# The guest's stdin pipe holds 1 MiB (agent PIPE_SZ) and the agent's
	# ring 256 KiB more: 1 MiB to true may all fit before true exits; 4
	# MiB cannot, so the agent's write meets a pipe with no reader: EPIPE.
	# The rest is credited and dropped, never an error.  A command that
	# closes its stdin and lives on makes the EPIPE certain, mid-exec.
	head -c 4194304 /dev/urandom >"$DATA/4m"
	head -c 1048576 "$DATA/4m" >"$DATA/1m"
	run --separate-stderr isopod run --json-only --stdin-file "$DATA/1m" -- true
	ok_quiet
	run --separate-stderr bash -c 'head -c 1048576 /dev/zero | "$ROOT/sh/isopod" run --json-only -- true'
	ok_quiet
	run --separate-stderr isopod run --json-only --stdin-file "$DATA/4m" -- true
	ok_quiet
	run --separate-stderr isopod run --json-only --stdin-file "$DATA/4m" -- sh -c 'exec <&-; sleep 1; echo alive'
	ok_quiet
	json_is '.stdout == "alive\n"'
	rm -f "$DATA/1m" "$DATA/4m"
}

@test "run: stdin still streaming when the command exits, then three copy-outs: each its own file's bytes and sha256" {
	# The agent credits stdin it discards after the reap; an older one sent
	# that CREDIT behind EXIT, and the host took it as the first FILE_GET's
	# reply: copy-out 1 failed, 2 got ERROR{busy}, 3 got file 1's bytes
	# under its own guest path.  The sleep: the pipe (1 MiB) and the
	# agent's ring (1 MiB) fill, and at the exit the ring's bytes are
	# discarded and credited in the turn that sends EXIT.  Fails only with
	# both ends broken (the host skips such a CREDIT; the agent sends none
	# after EXIT).
	head -c 4194304 /dev/urandom >"$DATA/4m"
	mkdir -p "$DATA/co3"
	run --separate-stderr isopod run --json-only --stdin-file "$DATA/4m" \
		--copy-out /root/c1:"$DATA/co3/" --copy-out /root/c2:"$DATA/co3/" --copy-out /root/c3:"$DATA/co3/" \
		-- sh -c 'echo one >/root/c1; echo two two >/root/c2; echo three three three >/root/c3; sleep 3; head -c1 >/dev/null'
	ok_quiet
	for i in 1 2 3; do
		case $i in 1) want="one" ;; 2) want="two two" ;; 3) want="three three three" ;; esac
		[ "$(cat "$DATA/co3/c$i")" = "$want" ]
		sum=$(printf '%s\n' "$want" | sha256sum | cut -d' ' -f1)
		echo "$output" | jq -e --arg s "$sum" --arg g "/root/c$i" --argjson i $((i - 1)) \
			'.copied_out[$i].guest == $g and .copied_out[$i].sha256 == $s and (.copied_out[$i].error == null)'
	done
	rm -rf "$DATA/4m" "$DATA/co3"
}

@test "run: a missing --stdin-file or --copy-in source is refused before boot" {
	run --separate-stderr isopod run --stdin-file /no/such/file -- cat
	[ "$status" -eq 100 ]
	run --separate-stderr isopod run --copy-in /no/such/file:/root/x -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"/no/such/file"* ]]
}

@test "run: 8 MB on stdout and on stderr at once does not deadlock; logs are exact" {
	run --separate-stderr isopod run --json-only -- sh -c 'head -c 8000000 /dev/zero | tr "\0" a & head -c 8000000 /dev/zero | tr "\0" b >&2; wait'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout_bytes == 8000000 and .stderr_bytes == 8000000'
	echo "$output" | jq -e '.stdout_truncated == true and .stderr_truncated == true'
	echo "$output" | jq -e '(.stdout | length) == 65536'
	[ "$(stat -c %s "$(echo "$output" | jq -r .stdout_log)")" -eq 8000000 ]
	[ "$(stat -c %s "$(echo "$output" | jq -r .stderr_log)")" -eq 8000000 ]
	[ "$(tr -d a < "$(echo "$output" | jq -r .stdout_log)" | wc -c)" -eq 0 ]
}

@test "run: binary output is byte-exact in the log; in-band stdout stays valid UTF-8" {
	head -c 300000 /dev/urandom > "$DATA/bin"
	run --separate-stderr isopod run --json-only --copy-in "$DATA/bin:/root/bin" -- cat /root/bin
	[ "$status" -eq 0 ]
	log=$(echo "$output" | jq -r .stdout_log)
	cmp "$log" "$DATA/bin"
	echo "$output" | jq -e '.stdout_truncated == true and .stdout_bytes == 300000'
	# jq parsed it, so it is valid JSON; invalid bytes became U+FFFD
	echo "$output" | jq -e '.stdout | contains("\ufffd")'
}

@test "run: a multi-byte character cut by the 64 KiB cap is dropped, not split" {
	# 65535 'a' then 'é' (2 bytes): the cap falls inside the character
	run --separate-stderr isopod run --json-only -- sh -c 'head -c 65535 /dev/zero | tr "\0" a; printf "\303\251tail"'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '(.stdout | length) == 65535 and .stdout_truncated == true and (.stdout | contains("\ufffd") | not)'
}

@test "run: copy-in, copy-out and stdin of 64 MiB each, sha256 equal" {
	# 64 MiB is a thousand times any buffer on the way (frames, pipes, the
	# 64 KiB in-band cap); 256 MiB proved nothing more and cost 4 minutes
	# of the suite under TCG (~3 MB/s over virtio-serial).
	head -c $((64 * 1024 * 1024)) /dev/urandom > "$DATA/big"
	want=$(sha256sum < "$DATA/big" | cut -d' ' -f1)
	mkdir -p "$DATA/out"
	run --separate-stderr isopod run --json-only --timeout-s 1800 \
		--stdin-file "$DATA/big" --copy-in "$DATA/big:/root/in.bin" --copy-out "/root/out.bin:$DATA/out/" \
		-- sh -c 'sha256sum | cut -d" " -f1; sha256sum < /root/in.bin | cut -d" " -f1; cp /root/in.bin /root/out.bin'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -r .stdout)" = "$want
$want" ]
	echo "$output" | jq -e --arg w "$want" '.copied_out[0].sha256 == $w and .copied_out[0].bytes == 67108864'
	[ "$(sha256sum < "$DATA/out/out.bin" | cut -d' ' -f1)" = "$want" ]
	rm -f "$DATA/big" "$DATA/out/out.bin"
}

@test "run: copy-outs of files cold on the guest's disk are byte-identical: past one O_DIRECT chunk, not whole blocks, part cached, sparse, in a directory" {
	# The agent reads what the page cache lacks with O_DIRECT, a chunk
	# (1 MiB less a page) at a time, into its ring and sends frames from
	# there (doc/SPEED.md "Goal 4, a cold copy-out").  Copy-in writes past
	# the page cache and the caches are dropped: these are read from the
	# disk.  cold: 3 chunks and a tail that is no whole sector; part: its
	# first 1.5 MB read back (cached, buffered), the rest cold, so the
	# reads switch at an offset no sector starts at; the directory: a
	# sparse file with data past its first chunk and a short tail, and a
	# plain one; shm: tmpfs, where O_DIRECT is refused.
	local src=$DATA/coldtree f
	rm -rf "$src" "$DATA/coldout"
	mkdir -p "$src" "$DATA/coldout"
	head -c $((3 * 1024 * 1024 + 1234)) /dev/urandom > "$DATA/cold"
	truncate -s $((8 * 1024 * 1024 + 77)) "$src/sparse"
	head -c $((1024 * 1024 + 300)) /dev/urandom |
		dd of="$src/sparse" bs=4096 seek=700 conv=notrunc status=none
	head -c $((2 * 1024 * 1024 + 7)) /dev/urandom > "$src/plain"
	run --separate-stderr isopod run --json-only --timeout-s 600 \
		--copy-in "$DATA/cold:/root/cold" --copy-in "$DATA/cold:/root/part" --copy-in "$src:/root/coldtree" \
		--copy-out "/root/cold:$DATA/coldout/" --copy-out "/root/part:$DATA/coldout/" \
		--copy-out "/dev/shm/shm:$DATA/coldout/" --copy-out "/root/coldtree:$DATA/coldout/tree" -- sh -c '
		cp /root/cold /dev/shm/shm && sync && echo 3 > /proc/sys/vm/drop_caches &&
		head -c 1500000 /root/part > /dev/null'
	echo "$stderr"
	[ "$status" -eq 0 ]
	for f in cold part shm; do
		cmp "$DATA/cold" "$DATA/coldout/$f"
	done
	echo "$output" | jq -e --arg w "$(sha256sum < "$DATA/cold" | cut -d' ' -f1)" \
		'[.copied_out[0:3][] | .sha256 == $w and .bytes == 3146962] == [true, true, true]'
	cmp "$src/sparse" "$DATA/coldout/tree/sparse"
	cmp "$src/plain" "$DATA/coldout/tree/plain"
	[ "$(stat -c %s "$DATA/coldout/tree/sparse")" = $((8 * 1024 * 1024 + 77)) ]
	# holes stay holes: 1 MiB and a page of data in 8 MiB
	[ "$(stat -c %b "$DATA/coldout/tree/sparse")" -lt 4096 ]
	rm -rf "$src" "$DATA/cold" "$DATA/coldout"
}

@test "exec: a cold file's copy-out reads it past the guest's page cache (O_DIRECT): none of its pages cached after it, all after a cat" {
	# The copy-outs above pass whether the agent read the disk with
	# O_DIRECT or fell back to buffered reads; this one does not: a
	# buffered read leaves the file in the page cache, O_DIRECT does not
	# (doc/SPEED.md "Goal 4, a cold copy-out").  The base image has no
	# fincore: a static mincore probe, copied in, counts the cached
	# pages; the cat shows it sees them.
	mkdir -p "$DATA/cc"
	"${MUSLCC:-musl-gcc}" -static -O -x c -o "$DATA/incore" - <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
int main(int argc, char **argv)
{
	static unsigned char vec[1 << 16];
	struct stat sb;
	int fd = argc == 2 ? open(argv[1], O_RDONLY) : -1;
	void *m;
	long i, n = 0, pages;
	if (fd < 0 || fstat(fd, &sb) < 0 || (pages = (sb.st_size + 4095) / 4096) > (long)sizeof vec)
		return 2;
	m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || mincore(m, (size_t)sb.st_size, vec) < 0)
		return 2;
	for (i = 0; i < pages; i++)
		n += vec[i] & 1;
	printf("%ld\n", n);
	return 0;
}
EOF
	head -c $((3 * 1024 * 1024 + 1234)) /dev/urandom > "$DATA/cc.in"
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr isopod-exec --vm "$id" --copy-in "$DATA/cc.in:/root/cc" \
		--copy-in "$DATA/incore:/root/incore" \
		--copy-out "/root/cc:$DATA/cc/" -- sh -c 'sync && echo 3 > /proc/sys/vm/drop_caches'
	echo "$stderr"
	[ "$status" -eq 0 ]
	cmp "$DATA/cc.in" "$DATA/cc/cc"
	run --separate-stderr isopod-exec --vm "$id" -- \
		sh -c 'chmod +x /root/incore && /root/incore /root/cc && cat /root/cc > /dev/null && /root/incore /root/cc'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -r .stdout)" = "0
$(( (3 * 1024 * 1024 + 1234 + 4095) / 4096 ))" ]
	isopod-stop --vm "$id" >/dev/null
	rm -rf "$DATA/cc" "$DATA/cc.in" "$DATA/incore"
}

# lane_case ID SIZE [ENV...]: SIZE bytes as stdin and as a copy-in to the
# kept VM ID (through isopod-exec, with ENV), the guest's sha256 of each
# and the file's size checked against the host's; the result's .bulk in $bulk
lane_case() {
	local id=$1 size=$2 want
	shift 2
	head -c "$size" /dev/urandom > "$DATA/lane"
	want=$(sha256sum < "$DATA/lane" | cut -d' ' -f1)
	run --separate-stderr env "$@" isopod-exec --vm "$id" --stdin-file "$DATA/lane" \
		--copy-in "$DATA/lane:/root/lane" -- \
		sh -c 'sha256sum | cut -d" " -f1; sha256sum < /root/lane | cut -d" " -f1; stat -c %s /root/lane'
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -r .stdout)" = "$want
$want
$size" ]
	echo "$output" | jq -e --arg w "$want" --argjson n "$size" \
		'.copied_in[0].sha256 == $w and .copied_in[0].bytes == $n'
	bulk=$(echo "$output" | jq .bulk)
}

@test "exec: stdin and copy-in through the bulk lane (0, 1, 511, a slot, a slot + 1, 5 slots + 7 bytes), byte-exact; ISOPOD_BULK=0 the port; the lane all holes after each, read-only to the guest, gone with QEMU (jailed and not)" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	lane=$ISOPOD_HOME/vms/$id/bulk.raw
	[ "$(stat -c %s "$lane")" -eq $((8 * 1048576)) ]
	for n in 0 1 511 1048576 1048577 $((5 * 1048576 + 7)); do
		lane_case "$id" "$n"
		[ "$bulk" = true ]
		# the exec's stdin and files do not stay in the VM's directory
		[ "$(stat -c %b "$lane")" -eq 0 ]
	done
	lane_case "$id" 1048577 ISOPOD_BULK=0
	[ "$bulk" = false ]
	# the drive is read-only: a guest that writes its device stores
	# nothing in the host's file (mutation: readonly=on removed in
	# lib/qemu.c, the write lands and blocks appear)
	run --separate-stderr isopod-exec --vm "$id" -- sh -c '
		for d in /sys/block/vd*; do
			[ "$(cat "$d/serial" 2>/dev/null)" = isopod.bulk ] && dev=/dev/${d##*/}
		done
		[ -n "$dev" ] || { echo "no lane device"; exit 3; }
		if head -c 1048576 /dev/urandom > "$dev"; then sync; echo "wrote 0"; else echo "wrote $?"; fi'
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout | test("^wrote [1-9]")'
	[ "$(stat -c %b "$lane")" -eq 0 ]
	isopod-stop --vm "$id" >/dev/null
	# QEMU is gone: so is the lane (the jail's reclaim)
	[ ! -e "$lane" ]
	# and unjailed (the supervisor unlinks it once QEMU is reaped)
	ISOPOD_JAIL=0 run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	lane=$ISOPOD_HOME/vms/$id/bulk.raw
	lane_case "$id" 1048577
	[ "$bulk" = true ]
	[ -e "$lane" ]
	isopod-stop --vm "$id" >/dev/null
	[ ! -e "$lane" ]
}

@test "run: the bulk lane on every path: cold, the warm pool's build and a warm clone each have it, their own" {
	head -c $((3 * 1048576 + 5)) /dev/urandom > "$DATA/lane"
	want=$(sha256sum < "$DATA/lane" | cut -d' ' -f1)
	for path in cold snapshot-build warm; do
		opt=
		[ "$path" != cold ] || opt=--cold
		run --separate-stderr isopod run --json-only --mem-mib 344 $opt --stdin-file "$DATA/lane" \
			--copy-in "$DATA/lane:/root/lane" -- \
			sh -c 'sha256sum | cut -d" " -f1; sha256sum < /root/lane | cut -d" " -f1'
		[ "$status" -eq 0 ]
		echo "$output" | jq -e --arg p "$path" '.path == $p and .bulk == true'
		[ "$(echo "$output" | jq -r .stdout)" = "$want
$want" ]
	done
}

# fill_disk [RUN-OPTION...]: a kept VM (vm.id in $id) that reserves all
# but 128 MiB of / with fallocate (2 GiB of real bytes would take a minute
# under TCG; a reservation writes none), then writes zeros with dd until the
# file system is full, at most the disk's cap + 64 MiB ($cap: the size the
# disk must have, in bytes), then tries one more file.  Prints its lines
# (avail, size, dd, left, more) in $out.
fill_disk() {
	run --separate-stderr isopod run --json-only --keep "$@" -- sh -c '
		a=$(df -k / | awk "NR==2 {print \$4}"); echo "avail $a"
		echo "size $(df -k / | awk "NR==2 {print \$2}")"
		fallocate -l $(( (a - 131072) * 1024 )) /root/bulk || echo "fallocate failed"
		dd if=/dev/zero of=/root/fill bs=1M count="$1" 2>&1; echo "dd $?"
		sync; echo "left $(df -k / | awk "NR==2 {print \$4}")"
		echo more >/root/more 2>/dev/null; echo "more $?"' sh $((cap / 1048576 + 64))
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	out=$(echo "$output" | jq -r .stdout)
	echo "$out" >&3
}

# fill_checked: what fill_disk leaves: ENOSPC inside (dd and the next write
# fail, nothing left), and on the host the overlay's virtual size is the cap
# and what it holds no more than the cap (plus the qcow2 tables).
fill_checked() {
	! grep -q "fallocate failed" <<<"$out" || false
	grep -q "No space left on device" <<<"$out"
	grep -qx "dd 1" <<<"$out" && grep -qx "more 1" <<<"$out" && grep -qx "left 0" <<<"$out" || false
	info=$(qemu-img info -U --output=json "$ISOPOD_HOME/vms/$id/disk.qcow2")
	echo "overlay: $(jq -c '{"virtual-size", "actual-size"}' <<<"$info"), cap $cap" >&3
	jq -e --argjson cap "$cap" '."virtual-size" == $cap and
		."actual-size" >= 128 * 1048576 and ."actual-size" <= $cap + 64 * 1048576' <<<"$info"
	[ "$(stat -c %s "$ISOPOD_HOME/vms/$id/disk.qcow2")" -le $((cap + 64 * 1048576)) ]
	isopod-stop --vm "$id" >/dev/null
}

@test "run: a fresh VM has 2 GiB free on / without a flag; filling it is ENOSPC inside, the host's overlay capped at the disk" {
	# without a flag the disk is the base image: its size is the cap
	bsha=$(cat "$ISOPOD_HOME/images/current-base")
	cap=$(stat -c %s "$ISOPOD_HOME/images/base-$bsha.img")
	fill_disk
	avail=$(awk '$1 == "avail" {print $2}' <<<"$out")
	[ "$avail" -ge $((2 * 1024 * 1024)) ]
	fill_checked
}

@test "run: a cold boot's disk is the store's overlay template copied, qemu-img's very bytes; an altered, truncated or foreign template is never used" {
	bsha=$(cat "$ISOPOD_HOME/images/current-base")
	base="$ISOPOD_HOME/images/base-$bsha.img"
	rm -rf "$ISOPOD_HOME/overlays"
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
	[ "$(overlay_of)" = qemu-img ]
	tpl=$(echo "$ISOPOD_HOME/overlays/$bsha"-*.qcow2)
	[ -f "$tpl" ]
	[ -f "${tpl%.qcow2}.sha256" ]
	# what qemu-img makes for such a VM, byte for byte: the base's absolute
	# path in the header, raw, the base's size
	rm -f "$DATA/ref.qcow2"
	qemu-img create -q -f qcow2 -F raw -b "$base" "$DATA/ref.qcow2" "$(stat -c %s "$base")"
	cmp "$tpl" "$DATA/ref.qcow2"
	qemu-img info -U --output=json "$tpl" | jq -e --arg b "$base" \
		'."backing-filename" == $b and ."backing-filename-format" == "raw"'
	run --separate-stderr isopod run --json-only --cold -- echo ok
	[ "$status" -eq 0 ]
	[ "$(jq -r .stdout <<<"$output")" = ok ]
	[ "$(overlay_of)" = template ]
	# mutations: one byte of its refcount table, the file cut short, and
	# another base's template (its digest with it) under this name
	printf 'X' | dd of="$tpl" bs=1 seek=70000 conv=notrunc status=none
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
	[ "$(overlay_of)" = qemu-img ]
	cmp "$tpl" "$DATA/ref.qcow2" # made again
	truncate -s 131072 "$tpl"
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
	[ "$(overlay_of)" = qemu-img ]
	cmp "$tpl" "$DATA/ref.qcow2"
	qemu-img create -q -f qcow2 -u -F raw -b "$DATA/other-base.img" "$tpl" "$(stat -c %s "$base")"
	sha256sum "$tpl" | cut -c1-64 > "${tpl%.qcow2}.sha256"
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
	[ "$(overlay_of)" = qemu-img ]
	cmp "$tpl" "$DATA/ref.qcow2"
	# isopod df counts the templates
	isopod df | jq -e '.usage.overlays > 0'
}

@test "run: --disk-mib above the base: filling the grown disk is ENOSPC inside, the host's overlay capped at --disk-mib" {
	bsha=$(cat "$ISOPOD_HOME/images/current-base")
	mib=$(( ($(stat -c %s "$ISOPOD_HOME/images/base-$bsha.img") + 1048575) / 1048576 + 64 ))
	cap=$((mib * 1048576))
	fill_disk --disk-mib "$mib"
	# the file system was grown past the base's size (the base's own
	# file system is smaller than its file: its inode tables)
	size=$(awk '$1 == "size" {print $2}' <<<"$out")
	[ "$size" -gt $(((mib - 64) * 1024)) ]
	fill_checked
}

@test "run: copy-out of a missing guest file is a warning and an error entry, not lost silently" {
	run --separate-stderr isopod run --json-only --copy-out "/root/nope:$DATA/" -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.copied_out[0].error | length > 0'
	echo "$output" | jq -e '.warnings | length == 1'
}

@test "exec: a --copy-out HOST/ whose HOST is a symlink to a directory is not entered (the kernel would follow it before the slash); --check refuses it before boot" {
	mkdir "$DATA/slash-victim"
	ln -s slash-victim "$DATA/slash-link"
	run --separate-stderr isopod run --json-only --copy-out "/root/f:$DATA/slash-link/" -- true
	[ "$status" -eq 100 ] && [[ "$stderr" == *"slash-link/: not a directory"* ]] || false
	run --separate-stderr isopod run --json-only --keep -- sh -c 'echo x >/root/f'
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr isopod-exec --vm "$id" --copy-out "/root/f:$DATA/slash-link/" \
		--copy-out "/root/f:$DATA/slash-link//" --copy-out "/root/f:$DATA/slash-victim/" -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '[.copied_out[0,1].error | test("not a directory.*symlink")] == [true, true]'
	echo "$output" | jq -e --arg d "$DATA/slash-victim/f" '.copied_out[2] | .host == $d and .bytes == 2'
	[ "$(ls -A "$DATA/slash-victim")" = f ]
	run --separate-stderr isopod vm rm --force "$id"
	[ "$status" -eq 0 ]
}

@test "exec: a later --copy-out through a symlink an earlier tree copy-out brought from the guest is refused, nothing lands where it points (review L2)" {
	local id
	mkdir "$DATA/l2-victim"
	run --separate-stderr isopod run --json-only --keep -- sh -c \
		"mkdir /root/t && ln -s '$DATA/l2-victim' /root/t/l && echo x >/root/f"
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	# isopod-exec without --check, as only a direct call can be
	run --separate-stderr isopod-exec --vm "$id" --copy-out "/root/t:$DATA/l2-tree" \
		--copy-out "/root/f:$DATA/l2-tree/l/x" -- true
	[ "$status" -eq 0 ]
	[ "$(readlink "$DATA/l2-tree/l")" = "$DATA/l2-victim" ]
	echo "$output" | jq -e '.copied_out[0].tree and (.copied_out[0] | has("error") | not)'
	echo "$output" | jq -e '.copied_out[1].error | test("no directory .*/l2-tree/l on the host")'
	[ -z "$(ls -A "$DATA/l2-victim")" ]
	run --separate-stderr isopod vm rm --force "$id"
	[ "$status" -eq 0 ]
}

@test "run --keep: a second command in the same VM; vm rm refuses a running VM unless forced" {
	run --separate-stderr isopod run --json-only --keep -- sh -c 'echo one > /root/state'
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	vm_locked "$id"
	# the VM's directory and the sockets QEMU made in it: the owner's and,
	# while QEMU runs, its jail's (sticky: root's files stay root's)
	[ "$(stat -c %a:%u:%g "$ISOPOD_HOME/vms/$id")" = "1770:0:$(jq -r .jail.gid "$ISOPOD_HOME/vms/$id/meta.json")" ]
	[ "$(stat -c '%F %a' "$ISOPOD_HOME/vms/$id/qmp.sock" "$ISOPOD_HOME/vms/$id/agent.sock")" = $'socket 600\nsocket 600' ]
	run --separate-stderr isopod-exec --vm "$id" -- cat /root/state
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout == "one\n"'
	echo "$output" | jq -e '.stdout_log | endswith("exec-2.stdout")'
	run --separate-stderr isopod vm rm "$id"
	[ "$status" -eq 102 ]
	vm_locked "$id"
	run --separate-stderr isopod vm rm --force "$id"
	[ "$status" -eq 0 ]
	! vm_locked "$id" || false
	[ ! -d "$ISOPOD_HOME/vms/$id" ]
}

# A cold boot's kernel command line says isopod.root_rw=1 (lib/qemu.h
# root_rw): its agent mounts the root read-write at boot, before the
# HELLO, so its HELLO_ACK says rw (a template's never does: t/50's warm
# clone answers ro).  No command runs here, and a read-only ext4 root
# writes nothing (the overlay stays empty until the first command), so a
# cluster in the overlay is the read-write mount's (ext4's superblock).
# Bounded wait, no timing asserted.
@test "boot: a cold boot's root is read-write before any command (the overlay is written); its HELLO_ACK said rw, its kernel was told isopod.root_rw=1" {
	vm=$(isopod-claim | jq -er .vm.id)
	run --separate-stderr isopod-boot --vm "$vm" --keep --cold
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.path == "cold" and .root == "rw"'
	qpid=$(jq -er .qemu_pid "$ISOPOD_HOME/vms/$vm/meta.json")
	tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -qx -- '.* isopod\.root_rw=1'
	disk="$ISOPOD_HOME/vms/$vm/disk.qcow2"
	written() { qemu-img map -U --output=json "$disk" | jq -e 'any(.[]; .depth == 0 and .data)' >/dev/null; }
	for _ in $(seq 150); do ! written || break; sleep 0.1; done
	written
	isopod-stop --force --vm "$vm" >/dev/null
}

# A run's VM thrown away at its end (no --keep, no --commit-as) has its
# root drive's flushes dropped by QEMU (cache.no-flush=on: they protect a
# disk nobody reads again, doc/DECISIONS.md); a --keep VM's disk may be
# committed or run again: its flushes stay.  The QEMU's own command line is
# read while it runs; bounded waits, no timing asserted.
@test "run: a throwaway VM's root drive has cache.no-flush=on, a --keep VM's has none; the record says which" {
	local id qpid bg idf=$BATS_TEST_TMPDIR/vm.id
	run --separate-stderr isopod run --json-only --keep --cold --net none -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -er .vm.id)
	qpid=$(jq -er .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -q -- '^id=root,file=.*/disk\.qcow2,format=qcow2,'
	! tr '\0' '\n' <"/proc/$qpid/cmdline" | grep -q 'no-flush' || false
	jq -e '.keep == true and .no_flush == false' "$ISOPOD_HOME/vms/$id/meta.json"
	isopod vm rm --force "$id" >/dev/null
	# a plain run: its VM id on fd 5 (isopod(1) ISOPOD_VM_ID_FD), its
	# QEMU's line read while the command sleeps, then the run stopped
	ISOPOD_VM_ID_FD=5 isopod run --json-only --cold --net none -- sleep 60 5>"$idf" >/dev/null 2>&1 &
	bg=$!
	await_running "$idf"
	st=0
	[ -n "$qpid" ] && tr '\0' '\n' <"/proc/$qpid/cmdline" |
		grep -qx -- 'id=root,file=.*/disk\.qcow2,format=qcow2,.*,cache\.no-flush=on' || st=1
	jq -e '.keep == false and .no_flush == true' "$ISOPOD_HOME/vms/$id/meta.json" || st=1
	# the VM stopped under the command (its run then ends)
	isopod-stop --force --vm "$id" >/dev/null || st=1
	wait "$bg" || :
	! vm_locked "$id" || st=1
	[ "$st" -eq 0 ]
}

@test "run: the root drive says its optimal request is 1 MiB: the guest reads ahead 2 MiB on it (doc/SPEED.md, the root's readahead)" {
	run --separate-stderr isopod run --json-only --cold --net none -- cat /sys/block/vda/queue/optimal_io_size /sys/block/vda/queue/read_ahead_kb
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -r .stdout)" = "$(printf '1048576\n2048')" ]
}

@test "run: a kernel whose agent speaks another protocol is refused before boot (101), naming both versions and the fix; no QEMU starts" {
	proto=$(sed -n 's/^#define ISOPOD_PROTO_NUM //p' "$ROOT/lib/frame.h")
	k=$ISOPOD_HOME/kernels/$(cat "$ISOPOD_HOME/kernels/current")
	# registration stamped the agent's own version into the record
	jq -e --argjson p "$proto" '.agent_protocol == $p' "$k/meta.json"
	isopod image ls | jq -se --argjson p "$proto" 'any(.[]; .kind == "kernel" and .current and .agent_protocol == $p)'
	cp "$k/meta.json" "$BATS_TEST_TMPDIR/meta.json"
	# a QEMU first on PATH that leaves a mark (no jail: the jail's mount
	# namespace would not see this directory, and would hide the attempt)
	q=$(mktemp -d /tmp/isopod-t20-q.XXXXXX)
	printf '#!/bin/sh\ntouch %s/ran\nexit 1\n' "$q" >"$q/qemu-system-x86_64"
	chmod 0755 "$q/qemu-system-x86_64"
	jq '.agent_protocol = 999' "$BATS_TEST_TMPDIR/meta.json" >"$k/meta.json"
	ISOPOD_JAIL=0 PATH="$q:$PATH" run --separate-stderr isopod run --json-only --cold -- true
	st1=$status err1=$stderr
	jq 'del(.agent_protocol)' "$BATS_TEST_TMPDIR/meta.json" >"$k/meta.json"
	ISOPOD_JAIL=0 PATH="$q:$PATH" run --separate-stderr isopod run --json-only --cold -- true
	st2=$status err2=$stderr
	ran=$(ls "$q")
	rm -rf "$q"
	echo "$st1: $err1" >&2
	echo "$st2: $err2" >&2
	[ "$st1" -eq 101 ] && [ "$st2" -eq 101 ] || false
	[[ "$err1" == *"agent speaks protocol 999, these tools speak $proto"* && "$err1" == *"run \`make images\`"* ]]
	[[ "$err2" == *"states no agent protocol version (these tools speak $proto)"* && "$err2" == *"images/register) again"* ]]
	[ "$ran" = qemu-system-x86_64 ]
	# registering again stamps the old record; then it boots
	# (the base flavor: the kernel's record is what register stamps; hashing
	# the debian image again would change nothing)
	ISOPOD_FLAVORS=base sh "$ROOT/images/register" "$ISOPOD_HOME" 2>/dev/null
	jq -e --argjson p "$proto" '.agent_protocol == $p' "$k/meta.json"
	run --separate-stderr isopod run --json-only --cold -- true
	[ "$status" -eq 0 ]
}

@test "vm: a nonexistent VM name or id is exit 101 naming it" {
	run --separate-stderr isopod vm rm no-such-vm-name
	[ "$status" -eq 101 ]
	[[ "$stderr" == *"no-such-vm-name"* ]]
	run --separate-stderr isopod-exec --vm vm-000000000000 -- true
	[ "$status" -eq 101 ]
	[[ "$stderr" == *"vm-000000000000"* ]]
}

@test "run: SIGKILL of isopod run stops the VMM and leaves no lock; gc finds no leak" {
	"$ROOT/sh/isopod" run --json-only -- sleep 300 > "$DATA/killed.json" 2>/dev/null &
	pid=$!
	id=""
	for _ in $(seq 1 600); do
		for d in "$ISOPOD_HOME"/vms/vm-*; do
			[ -f "$d/meta.json" ] || continue
			if [ "$(jq -r .state "$d/meta.json")" = running ] && [ "$(jq -r .owner_pid "$d/meta.json")" = "$pid" ]; then
				id=$(basename "$d")
			fi
		done
		[ -n "$id" ] && break
		sleep 0.1
	done
	[ -n "$id" ]
	qpid=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	kill -KILL "$pid"
	wait "$pid" || true
	for _ in $(seq 1 100); do vm_locked "$id" || break; sleep 0.1; done
	! vm_locked "$id" || false
	! kill -0 "$qpid" 2>/dev/null || false
	# the killed front end's scratch directory is the one leak, and gc
	# removes it (it used to stay in /tmp, never swept)
	run --separate-stderr isopod gc --dry-run
	[ "$status" -eq 0 ]
	echo "$output" | jq -e --arg p "$pid" --arg id "$id" '([.leaked[] | select(.kind != "run")] == []) and
		([.leaked[] | select(.kind == "run" and (.path | test("/runs/" + $id + "\\." + $p + "\\.")))] | length == 1)'
	d=$(echo "$ISOPOD_HOME/runs/$id.$pid".*)
	[ -d "$d" ]
	isopod gc >/dev/null
	[ ! -e "$d" ]
}

@test "run: SIGTERM as isopod-run boots (or runs) the command: the step ended, the VM stopped before the result, 143 interrupted; gc finds no leak" {
	local pid b st=0 id
	"$ROOT/sh/isopod" run --json-only --cold -- sleep 300 >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	for _ in $(seq 1 600); do
		b=$(pgrep -P "$pid" -x isopod-boot) && break
		sleep 0.05
	done
	[ -n "$b" ]
	# the run's pid (the supervisor's owner) is the driver's now
	[ "$(cat "/proc/$pid/comm")" = isopod-run ]
	kill -TERM "$pid"
	wait "$pid" || st=$?
	cat "$BATS_TEST_TMPDIR/err"
	[ "$st" -eq 143 ]
	jq -e '.ok == false and .error_kind == "interrupted" and .error == "interrupted by SIGTERM"' "$BATS_TEST_TMPDIR/out"
	id=$(jq -r .vm.id "$BATS_TEST_TMPDIR/out")
	! kill -0 "$b" 2>/dev/null || false
	! vm_locked "$id" || false
	# its scratch directory went with the result
	! ls -d "$ISOPOD_HOME"/runs/vm-*."$pid".* 2>/dev/null || false
	gc_clean
}

@test "run: a SIGTERM to the run's group as isopod-claim reports: the report is finished, the front end removes what it names" {
	local pid cpid d
	# (setsid in the background: its pid is the group's, the one signalled)
	ISOPOD_TEST_PAUSE_AT=claim-report setsid isopod run --json-only -- true \
		>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" &
	pid=$!
	cpid=$(stopped_in_group "$pid" isopod-claim)
	[ -n "$cpid" ]
	# the claim stopped between its directory and its report
	d=$(echo "$ISOPOD_HOME"/runs/vm-*."$pid".*)
	[ -d "$d" ]
	term_paused "$pid" "$cpid"
	[ ! -e "$d" ]
	gc_clean
}

@test "run: a guest that stops answering is killed by the watchdog (infra failure)" {
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	qmp="$ISOPOD_HOME/vms/$id/qmp.sock"
	# freeze the guest while a command runs: once its first line is in the
	# exec's log (written as it arrives), not after a fixed 3 s
	( for _ in $(seq 1 100); do
		grep -qs '^up$' "$ISOPOD_HOME/vms/$id"/exec-*.stdout && break
		sleep 0.1
	done
	printf '{"execute":"qmp_capabilities"}\n{"execute":"stop"}\n' | python3 -c '
import socket,sys,time
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(4096)
for l in sys.stdin: s.sendall(l.encode()); time.sleep(0.2); s.recv(4096)
' "$qmp" ) &
	run --separate-stderr env ISOPOD_WATCHDOG_MS=4000 isopod-exec --vm "$id" -- sh -c 'echo up; exec sleep 60'
	[ "$status" -eq 111 ]
	echo "$output" | jq -e '.ok == false and .error_kind == "unresponsive"'
	# the command ran before the freeze
	grep -qsx up "$ISOPOD_HOME/vms/$id"/exec-*.stdout
	for _ in $(seq 1 100); do vm_locked "$id" || break; sleep 0.1; done
	! vm_locked "$id" || false
}

@test "run: two and eight concurrent runs are isolated" {
	for n in 2 8; do
		pids=""
		for i in $(seq 1 "$n"); do
			isopod run --json-only -- sh -c "hostname; echo $i > /root/mine; sleep 1; cat /root/mine" > "$DATA/c$n-$i.json" 2>"$DATA/c$n-$i.err" &
			pids="$pids $!"
		done
		bad=0
		for p in $pids; do wait "$p" || bad=1; done
		if [ "$bad" -ne 0 ]; then
			# say which run failed and why before failing
			for i in $(seq 1 "$n"); do
				echo "run $i: $(cat "$DATA/c$n-$i.json") $(cat "$DATA/c$n-$i.err")" >&3
			done
			false
		fi
		ids=$(for i in $(seq 1 "$n"); do jq -r .vm.id "$DATA/c$n-$i.json"; done | sort -u | wc -l)
		names=$(for i in $(seq 1 "$n"); do jq -r .vm.name "$DATA/c$n-$i.json"; done | sort -u | wc -l)
		[ "$ids" -eq "$n" ]
		[ "$names" -eq "$n" ]
		for i in $(seq 1 "$n"); do
			j="$DATA/c$n-$i.json"
			[ "$(jq -r '.stdout' "$j" | sed -n 1p)" = "$(jq -r .vm.name "$j")" ]
			[ "$(jq -r '.stdout' "$j" | sed -n 2p)" = "$i" ]
		done
	done
	run --separate-stderr isopod gc --dry-run
	echo "$output" | jq -e '.leaked == []'
}

# fake_agent SOCK [MODE]: an agent that answers HELLO, then on EXEC sends
# "partial\n" on stdout and falls silent (no EXIT, no PONG): a guest starved
# right after its command started.  MODE mute: no answer to HELLO; pong: on FILE_PUT, a PONG every
# 20 ms and nothing else (a steady stream that is no answer); exit300: EXIT
# with an exit code out of range; badtext: ERROR with control bytes and
# invalid UTF-8 in its kind and message.  Its pid in $agent.
# fake_vm ID NAME: a running VM's record (id and d set) whose agent socket
# fake_agent serves; stop_agent ends that agent.
fake_vm() {
	id=$1
	d="$ISOPOD_HOME/vms/$id"
	mkdir -p "$d"
	jq -n --arg id "$id" --arg s "$d/agent.sock" --arg q "$d/qmp.sock" --arg n "$2" \
		'{id: $id, name: $n, state: "running", agent_sock: $s, qmp_sock: $q}' >"$d/meta.json"
}

stop_agent() {
	kill "$agent" 2>/dev/null || :
	wait "$agent" 2>/dev/null || :
}

fake_agent() {
	timeout 60 python3 - "$1" "${2:-silent}" <<'EOF_PY' 3>&- &
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)
c, _ = s.accept()
def send(ty, st, p=b""): c.sendall(struct.pack("<IBI", len(p), ty, st) + p)
def t(tag, v): return struct.pack("<BI", tag, len(v)) + v
buf = b""
while True:
    d = c.recv(65536)
    if not d: break
    buf += d
    while len(buf) >= 9:
        ln, ty, st = struct.unpack("<IBI", buf[:9])
        if len(buf) < 9 + ln: break
        p, buf = buf[9:9 + ln], buf[9 + ln:]
        if ty == 1 and sys.argv[2] == "mute":
            continue
        if ty == 1:  # HELLO: echo its COOKIE (tag 2)
            i, ck = 0, b""
            while i + 5 <= len(p):
                tag, l = struct.unpack("<BI", p[i:i + 5])
                if tag == 2: ck = p[i + 5:i + 5 + l]
                i += 5 + l
            send(2, 0, t(1, struct.pack("<I", 1)) + t(2, ck) + t(6, b"rw") + t(7, struct.pack("<Q", 1)))
        elif ty == 11 and sys.argv[2] == "pong":  # FILE_PUT
            for _ in range(3000):
                send(10, 0)
                time.sleep(0.02)
        elif ty == 3 and sys.argv[2] == "exit300":
            send(7, 0, t(14, struct.pack("<I", 300)) + t(15, struct.pack("<I", 0)) + t(16, struct.pack("<I", 0)))
        elif ty == 3 and sys.argv[2] == "badtext":
            send(8, 0, t(17, b"\xff\x1b[31mkind") + t(18, b"msg \x1b]0;pwned\x07 \xfe\x01"))
        elif ty == 3:  # EXEC
            send(4, 2, b"partial\n")
            time.sleep(60)
EOF_PY
	agent=$!
	for _ in $(seq 1 50); do [ -S "$1" ] && break; sleep 0.1; done
}

@test "exec: a silent agent past the deadline is a timeout (137) by the host; before it, unresponsive (111)" {
	fake_vm vm-fa4e0a9e0001 starved
	fake_agent "$d/agent.sock"
	t0=$(date +%s%N)
	run --separate-stderr env ISOPOD_WATCHDOG_MS=8000 isopod-exec --vm "$id" --timeout-ms 1000 -- true
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	stop_agent
	rm -f "$d/agent.sock"
	echo "$ms ms: $output" >&3
	[ "$status" -eq 1 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .signal == 9 and .exit_code == 137'
	echo "$output" | jq -e '.stdout == "partial\n" and .stdout_bytes == 8'
	echo "$output" | jq -e '.warnings | any(test("did not report the command.s end within 1500 ms"))'
	[ "$ms" -ge 2400 ] && [ "$ms" -lt 4500 ] || false
	# silence before the deadline stays the infrastructure's failure
	fake_agent "$d/agent.sock"
	run --separate-stderr env ISOPOD_WATCHDOG_MS=1500 isopod-exec --vm "$id" --timeout-ms 60000 -- true
	stop_agent
	[ "$status" -eq 111 ]
	echo "$output" | jq -e '.ok == false and .error_kind == "unresponsive"'
	rm -rf "$d"
}

@test "exec: a vm the host cannot stop at the deadline is a failure (111), never a timeout" {
	fake_vm vm-fa4e0a9e0002 unstoppable
	# the vm's lock held by something no quit and no kill of the record's qemu ends
	flock "$d/lock" sleep 30 3>&- &
	holder=$!
	for _ in $(seq 1 50); do vm_locked "$id" && break; sleep 0.1; done
	fake_agent "$d/agent.sock"
	run --separate-stderr isopod-exec --vm "$id" --timeout-ms 500 -- true
	kill "$agent" "$holder" 2>/dev/null || :
	wait "$agent" "$holder" 2>/dev/null || :
	echo "$output $stderr" >&3
	[ "$status" -eq 111 ]
	echo "$output" | jq -e '.ok == false and .error_kind == "not_stopped"'
	rm -rf "$d"
}

@test "exec: the handshake waits no longer than the deadline's grace (then a timeout, not 30 s)" {
	fake_vm vm-fa4e0a9e0006 mute
	fake_agent "$d/agent.sock" mute
	t0=$(date +%s%N)
	run --separate-stderr env ISOPOD_WATCHDOG_MS=8000 isopod-exec --vm "$id" --timeout-ms 1000 -- true
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	stop_agent
	echo "$ms ms: $output" >&3
	[ "$status" -eq 1 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .exit_code == 137'
	[ "$ms" -lt 4500 ]
	rm -rf "$d"
}

@test "exec: the VM only by --vm: no VM named is refused (100) naming --vm, stdin unread" {
	# stdin that never ends (a FIFO we hold open): a tool that read its VM
	# from it would hang until timeout's 124
	mkfifo "$BATS_TEST_TMPDIR/in"
	exec 7<>"$BATS_TEST_TMPDIR/in"
	run --separate-stderr timeout 10 isopod-exec --timeout-ms 2000 -- true <"$BATS_TEST_TMPDIR/in"
	exec 7>&-
	[ "$status" -eq 100 ]
	[ -z "$output" ]
	[[ "$stderr" == *"--vm REF"* ]]
}

@test "exec: a steady stream of PONGs does not hide the deadline (copy-in)" {
	fake_vm vm-fa4e0a9e0003 chatty
	fake_agent "$d/agent.sock" pong
	t0=$(date +%s%N)
	run --separate-stderr timeout 20 isopod-exec --vm "$id" --timeout-ms 1000 \
		--copy-in /etc/hostname:/root/h -- true
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	stop_agent
	echo "$ms ms: $output" >&3
	[ "$status" -eq 1 ]
	echo "$output" | jq -e '.ok == true and .timed_out == true and .exit_code == 137'
	[ "$ms" -lt 4500 ]
	rm -rf "$d"
}

@test "run: a guest error about a path with control bytes and invalid UTF-8: one JSON object, no escape on stderr" {
	isopod run --json-only --copy-in /etc/hostname:"/proc/$(printf '\377\033[31mx')" -- true \
		>"$DATA/p6.out" 2>"$DATA/p6.err" && st=0 || st=$?
	echo "$st: $(cat -v "$DATA/p6.out" "$DATA/p6.err")" >&3
	[ "$st" -eq 111 ]
	[ "$(jq -s length "$DATA/p6.out")" -eq 1 ]
	jq -e '.ok == false and (.error | test("No such file"))' "$DATA/p6.out"
	run ! env LC_ALL=C grep -q "$(printf '[\033\377]')" "$DATA/p6.err"
}

@test "exec: control bytes and invalid UTF-8 from the guest reach neither stderr raw nor break the JSON" {
	fake_vm vm-fa4e0a9e0005 rude
	fake_agent "$d/agent.sock" badtext
	isopod-exec --vm "$id" -- true >"$DATA/bt.out" 2>"$DATA/bt.err" && st=0 || st=$?
	stop_agent
	echo "$st: $(cat -v "$DATA/bt.out" "$DATA/bt.err")" >&3
	[ "$st" -eq 111 ]
	[ "$(jq -s length "$DATA/bt.out")" -eq 1 ]
	jq -e '.ok == false and (.error | test("msg"))' "$DATA/bt.out"
	run ! env LC_ALL=C grep -q "$(printf '[\001\033\007\377\376]')" "$DATA/bt.err"
	rm -rf "$d"
}

@test "exec: an exit code out of range from the agent is a failure (111), not a result" {
	fake_vm vm-fa4e0a9e0004 liar
	fake_agent "$d/agent.sock" exit300
	run --separate-stderr isopod-exec --vm "$id" -- true
	stop_agent
	[ "$status" -eq 111 ]
	echo "$output" | jq -e '.ok == false and .error_kind == "protocol" and (.error | test("exit code 300"))'
	rm -rf "$d"
}

@test "exec: a malformed frame from the guest is an error, never an unbounded allocation" {
	id=vm-bad0a9e00001
	mkdir -p "$ISOPOD_HOME/vms/$id"
	sock="$ISOPOD_HOME/vms/$id/agent.sock"
	jq -n --arg s "$sock" --arg q "$ISOPOD_HOME/vms/$id/qmp.sock" \
		'{id:"vm-bad0a9e00001",name:"bad-agent",state:"running",agent_sock:$s,qmp_sock:$q}' \
		> "$ISOPOD_HOME/vms/$id/meta.json"
	for kind in huge unknown truncated; do
		python3 - "$sock" "$kind" <<'EOF' &
import socket, struct, sys, os
path, kind = sys.argv[1], sys.argv[2]
try: os.unlink(path)
except FileNotFoundError: pass
s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1)
c, _ = s.accept(); c.recv(65536)
if kind == "huge":     c.sendall(struct.pack("<IBI", 0xfffffff0, 2, 0))
elif kind == "unknown": c.sendall(struct.pack("<IBI", 0, 200, 0))
else:                   c.sendall(struct.pack("<IBI", 100, 2, 0) + b"x" * 10)
c.close()
EOF
		srv=$!
		for _ in $(seq 1 50); do [ -S "$sock" ] && break; sleep 0.1; done
		run --separate-stderr env ISOPOD_WATCHDOG_MS=3000 isopod-exec --vm "$id" -- true
		wait "$srv" || true
		[ "$status" -eq 111 ]
		echo "$output" | jq -e '.ok == false'
		rm -f "$sock"
	done
	rm -rf "$ISOPOD_HOME/vms/$id"
}

@test "doctor: without --quick one real run; its result is .run and the accelerator is the one it got" {
	run --separate-stderr isopod doctor
	[ "$status" -eq 0 ]
	[ -n "$output" ]
	echo "$output" | jq -e '.ok == true and .missing == [] and .net.default_mode == "none"'
	echo "$output" | jq -e '.run.ok == true and .run.exit_code == 0 and (.run.vm.id | startswith("vm-"))'
	echo "$output" | jq -e '.accel == .run.accel and .kernel.present and .base.present'
	# the store's TSC rate, as the run's boot kept it (TCG) and its guest was told
	local t
	t=$(cat "$ISOPOD_HOME/accel/tsc.json" 2>/dev/null || echo null)
	echo "$output" | jq -e --argjson t "$t" \
		'.tsc_khz == ($t.tsc_khz | if . == 0 then null else . end) and (.tsc_khz == null) == (.tsc_reason != null)'
	echo "$output" | jq -e 'if .run.accel == "tcg" then .run.tsc_khz == .tsc_khz else true end'
	echo "$output" | jq -e 'if .kvm.usable and (.accel_reason | startswith("forced") | not) then .accel_probed else true end'
	# a test run that fails (here a front end that is not one) is what is missing
	run --separate-stderr isopod-doctor --net none --front-end false
	[ "$status" -eq 111 ]
	echo "$output" | jq -e '.ok == false and .missing == ["working-run"] and .run == {ok: false}'
	[[ "$stderr" == *"missing: working-run"* ]]
}

# No cgroup hierarchy writable (every cgroup mount read-only in a private
# mount namespace, where the doctor and its test run both live): the run
# proceeds without its limits, its result says so, and the doctor reports
# it as a warning (the same words), exit 0: nothing a run needs is missing.
@test "doctor: no writable cgroup hierarchy: the test run works and its result warns; the doctor's cgroup check fails and warns, exit 0" {
	[ "$(id -u)" -eq 0 ] || skip "needs root: a mount namespace"
	run --separate-stderr unshare -m --propagation private sh -c '
		for m in $(awk "\$9 ~ /^cgroup2?\$/ {print \$5}" /proc/self/mountinfo); do
			mount -o remount,bind,ro "$m" || exit 99
		done
		exec isopod doctor'
	echo "$output" | jq -c '{cgroup, warnings, run: {ok: .run.ok, warnings: .run.warnings, cgroup: .run.jail.cgroup}}'
	[ "$status" -eq 0 ]
	json_is '.ok == true and .missing == [] and .run.ok == true and .run.exit_code == 0'
	json_is '.cgroup.ok == false and .cgroup.hierarchy == "none" and .cgroup.paths == []'
	json_is '.cgroup.warnings | length == 2 and (.[0] | test("^jail: no memory limit: mkdir /sys/fs/cgroup/.*/isopod-doctor-[0-9]+: Read-only file system$"))'
	# the run's own warning, for its QEMU's cgroup (named by its VM id)
	json_is '.run.jail.enabled == true and (.run.jail.cgroup | has("memory_bytes") or has("pids") | not)'
	jq -e --arg id "$(jq -r .run.vm.id <<<"$output")" \
		'[.run.warnings[] | select(test("^jail: no memory limit: mkdir /sys/fs/cgroup/.*/isopod-" + $id + ": Read-only file system$"))] | length == 1' <<<"$output"
	# the doctor names it in its own warnings too
	json_is '[.warnings[] | select(startswith("jail: no "))] == .cgroup.warnings'
}

# The KVM probe boots the real kernel under KVM: its QEMU runs in QEMU's
# jail as a VM's does (lib/accel.c probe_spawn: qjail_plan with /dev/kvm,
# qjail_give, jail_spawn; jail_release and qjail_reclaim after).  The
# stand-in QEMU is t/17's static probe under that name: it logs who runs it
# and exits 1, so the verdict's reason ("qemu exited ...: LAST LOG LINE")
# carries its uid.  The store's verdicts are put back after.
# probe_reason [WRAP...]: the reason of the verdict a KVM probe by that
# stand-in leaves (isopod-boot of a claimed VM, run through WRAP...), in
# $reason, and in $probed whether a probe ran (1: its qemu.log was kept as
# accel/<ksha>.log; 0: the verdict came from the host's cache); the store's
# verdicts are put back.  The host's cache is the test's own
# ($BATS_TEST_TMPDIR/hostcache): a stand-in's verdict never reaches
# /run/isopod/accel.  The stand-in is copied once per test: its identity is
# in the host cache's key.
# The verdicts are the kernel-keyed files (hex names); accel/tsc.json, the
# host TSC rate lib/tsc.c keeps beside them (no .reason), is not one.
probe_reason() {
	local sb="$BATS_TEST_TMPDIR/qbin" keep="$BATS_TEST_TMPDIR/accel" vm
	mkdir -p "$sb" "$keep"
	[ -e "$sb/qemu-system-x86_64" ] || cp "$ISOPOD_SRC/build/jail/probe" "$sb/qemu-system-x86_64"
	rm -rf "${keep:?}"/*
	cp -a "$ISOPOD_HOME/accel/." "$keep/" 2>/dev/null || :
	rm -f "$ISOPOD_HOME"/accel/[0-9a-f]*.json "$ISOPOD_HOME"/accel/*.log
	vm=$(isopod-claim | jq -er .vm.id)
	# PROBE_REAL=1: the real QEMU, not the stand-in
	local pre="$sb:"
	[ -z "${PROBE_REAL-}" ] || pre=
	PATH="$pre$PATH" ISOPOD_ACCEL_HOST_CACHE_DIR="$BATS_TEST_TMPDIR/hostcache" \
		run --separate-stderr "$@" isopod-boot --vm "$vm" --owner-pid $$
	echo "$stderr"
	reason=$(jq -r .reason "$ISOPOD_HOME"/accel/[0-9a-f]*.json)
	probed=0
	! compgen -G "$ISOPOD_HOME/accel/*.log" >/dev/null || probed=1
	rm -f "$ISOPOD_HOME"/accel/[0-9a-f]*.json "$ISOPOD_HOME"/accel/*.log
	cp -a "$keep/." "$ISOPOD_HOME/accel/"
	isopod-stop --force --vm "$vm" >/dev/null 2>&1 || :
	echo "reason: $reason probed: $probed"
}

@test "accel: the KVM probe's QEMU runs as the jail's uid, no capabilities, no_new_privs; its directory is removed after" {
	local reason uid
	[ -e /dev/kvm ] || skip "no /dev/kvm: the probe never runs"
	[ "$(id -u)" -eq 0 ] || skip "root only: the jail's uid"
	probe_reason
	[[ "$reason" == "kvm: qemu exited with status 1: qemuprobe uid="* ]]
	uid=$(sed -n 's/.*qemuprobe uid=\([0-9]*\) .*/\1/p' <<<"$reason")
	[ "$uid" -ge 2013265920 ] && [ "$uid" -le 2013331455 ] || false
	[[ "$reason" == *" CapEff=0000000000000000 NoNewPrivs=1 kvm="* ]]
	# /dev/kvm is in its jail (a VM's tcg jail has none: ENOENT)
	[[ "$reason" != *"kvm=ENOENT"* ]]
	[ -z "$(find "$ISOPOD_HOME/accel" -maxdepth 1 -name 'probe-*')" ]
}

# Where KVM is real /dev/kvm is root:kvm 0660 (here root:root 0600): the
# jail keeps that one group.  A stand-in node of the same device, group
# 4243 0660, bound over /dev/kvm in a mount namespace of this test's own.
@test "accel: where /dev/kvm is group-usable (root:kvm 0660), the jailed probe keeps that group and opens it" {
	local node="$BATS_TEST_TMPDIR/kvm" reason
	[ -c /dev/kvm ] || skip "no /dev/kvm: the probe never runs"
	[ "$(id -u)" -eq 0 ] || skip "root only: the jail's groups"
	mknod -m 0660 "$node" c "$((0x$(stat -c %t /dev/kvm)))" "$((0x$(stat -c %T /dev/kvm)))"
	chgrp 4243 "$node"
	# shellcheck disable=SC2016 # expanded by that sh
	probe_reason unshare -m sh -c 'mount --bind "$1" /dev/kvm && shift && exec "$@"' sh "$node"
	[[ "$reason" == *"qemuprobe uid="*" NoNewPrivs=1 kvm=opened"* ]]
	# a QEMU that opened KVM and died of something else: the store's
	# verdict only, never the host's (lib/accel.c)
	[ -z "$(ls -A "$BATS_TEST_TMPDIR/hostcache" 2>/dev/null)" ]
}

# The host's verdict (lib/accelhost.c) as a second store finds it: in the
# test's own directory (probe_reason), the stand-in QEMU the probe (no
# 10 s); whether a probe ran is probe_reason's $probed (its qemu.log kept
# in the store).  The key holds the boot id ($ISOPOD_TEST_BOOT_ID fakes
# another boot); a file of another uid, or a directory others may write,
# is no verdict (a probe, never an error).
@test "accel: a second store takes the host's verdict without a probe; another boot, another uid's file, a directory others may write: a probe" {
	local reason probed first hc="$BATS_TEST_TMPDIR/hostcache" s2="$BATS_TEST_TMPDIR/s2" h1=$ISOPOD_HOME f
	[ -e /dev/kvm ] || skip "no /dev/kvm: the probe never runs"
	probe_reason
	[ "$probed" = 1 ] && [[ "$reason" == "kvm: qemu exited with status 1: "* ]] || false
	first=$reason
	f=$(echo "$hc"/*.json)
	[ "$(stat -c %a "$hc")" = 700 ] && [ "$(stat -c %a "$f")" = 600 ] || false
	jq -e --arg b "$(cat /proc/sys/kernel/random/boot_id)" --arg r "$first" \
		'.key.boot_id == $b and .accel == "tcg" and .reason == $r and (.key.qemu.path | endswith("/qbin/qemu-system-x86_64"))' "$f"
	# a second store, fresh: the first's kernel and base (hard links), no verdict
	mkdir -p "$s2/locks"
	cp -al "$ISOPOD_HOME/kernels" "$ISOPOD_HOME/images" "$s2/"
	export ISOPOD_HOME=$s2
	probe_reason
	[ "$probed" = 0 ] && [ "$reason" = "$first (host cache)" ] || false
	# another boot (a fake boot id): probed again, kept beside the first (one file per key)
	ISOPOD_TEST_BOOT_ID=00000000-0000-0000-0000-000000000001 probe_reason
	[ "$probed" = 1 ] && [ "$reason" = "$first" ] || false
	jq -se --arg b "$(cat /proc/sys/kernel/random/boot_id)" \
		'map(.key.boot_id) | sort == ([$b, "00000000-0000-0000-0000-000000000001"] | sort)' "$hc"/*.json
	ISOPOD_TEST_BOOT_ID=00000000-0000-0000-0000-000000000001 probe_reason
	[ "$probed" = 0 ] && [ "$reason" = "$first (host cache)" ] || false
	probe_reason # the real boot's verdict is still there
	[ "$probed" = 0 ] || false
	# a directory others may write: ignored (and nothing written there)
	chmod 0770 "$hc"
	probe_reason
	[ "$probed" = 1 ] && [ "$reason" = "$first" ] || false
	[[ "$stderr" == *"the host's accel cache is not used: $hc: owned by uid $(id -u) with mode 0770"* ]]
	chmod 0700 "$hc"
	probe_reason
	[ "$probed" = 0 ] || false
	# a file of another uid: ignored, replaced by the probe's
	if [ "$(id -u)" -eq 0 ]; then
		chown 4242 "$f"
		probe_reason
		[ "$probed" = 1 ] && [ "$reason" = "$first" ] || false
		[ "$(stat -c %u "$f")" = 0 ]
		probe_reason
		[ "$probed" = 0 ] || false
	fi
	export ISOPOD_HOME=$h1
	rm -rf "$s2"
}

# The PVM case for real: unjailed, this host's probe boots and the guest
# dies of a KVM internal error (where KVM works: the probe's "kvm", shared
# as well) -- a verdict of the host, not of one store or moment: a second
# store takes it without the 10 s probe.
@test "accel: a verdict of KVM itself (this PVM host's unjailed probe: a KVM internal error) is shared with a second store" {
	local reason probed first s2="$BATS_TEST_TMPDIR/s2" h1=$ISOPOD_HOME
	[ -e /dev/kvm ] || skip "no /dev/kvm: the probe never runs"
	PROBE_REAL=1 probe_reason env ISOPOD_JAIL=0
	[[ "$reason" == *"(KVM internal error in qemu.log)" || "$reason" == "kvm: "*"answered"* ]] ||
		skip "neither a PVM host nor KVM: $reason"
	[ "$probed" = 1 ] || false
	first=$reason
	mkdir -p "$s2/locks"
	cp -al "$ISOPOD_HOME/kernels" "$ISOPOD_HOME/images" "$s2/"
	export ISOPOD_HOME=$s2
	PROBE_REAL=1 probe_reason env ISOPOD_JAIL=0
	export ISOPOD_HOME=$h1
	rm -rf "$s2"
	[ "$probed" = 0 ] && [ "$reason" = "$first (host cache)" ] || false
}

@test "run: a directory copied in and out keeps modes, symlinks (not followed), empty dirs, holes; devices skipped; the guest cannot write outside the destination" {
	src=$DATA/tree
	rm -rf "$src" "$DATA/treeout" "$DATA/victim"
	mkdir -p "$src/sub/deep" "$src/empty" "$DATA/victim"
	printf 'hello\n' >"$src/sub/f"
	chmod 0640 "$src/sub/f"
	printf '#!/bin/sh\n' >"$src/x"
	chmod 04755 "$src/x"
	chmod 0750 "$src/sub"
	ln -s ../../../etc/passwd "$src/sub/up"
	ln -s "$DATA/victim" "$src/out"
	truncate -s 64M "$src/sparse"
	printf 'mid' | dd of="$src/sparse" bs=1 seek=$((32 * 1024 * 1024)) conv=notrunc status=none
	mkfifo "$src/fifo"
	# In the guest: the tree as it came, then a hostile one next to it:
	# symlinks that escape (.., absolute, to the host's victim dir) and a
	# directory reached through a symlink; a device; a setuid file.
	run --separate-stderr isopod run --json-only --timeout-s 600 \
		--copy-in "$src:/root/tree" --copy-out "/root/tree:$DATA/treeout" \
		--copy-out "/root/evil:$DATA/evilout" -- sh -c '
		cd /root/tree && stat -c "%n %a %F" x sub sub/f empty sparse && readlink sub/up && readlink out
		[ ! -e fifo ] && echo nofifo
		echo "blocks $(stat -c %b sparse)"
		mkdir -p /root/evil/d && cd /root/evil
		ln -s ../../../../../../.. up; ln -s / root; ln -s '"$DATA"'/victim v
		ln -s up/tmp via; echo data > d/f; chmod 4755 d/f; chmod 1777 d
		mknod null c 1 3; mkfifo pipe'
	echo "$output"
	echo "$stderr"
	[ "$status" -eq 0 ]
	stdout=$(echo "$output" | jq -r .stdout)
	grep -qx 'x 755 regular file' <<<"$stdout" || grep -qx 'x 4755 regular file' <<<"$stdout"
	grep -qx 'sub 750 directory' <<<"$stdout"
	grep -qx 'sub/f 640 regular file' <<<"$stdout"
	grep -qx 'empty 755 directory' <<<"$stdout"
	grep -qx '../../../etc/passwd' <<<"$stdout"
	grep -qx "$DATA/victim" <<<"$stdout"
	grep -qx nofifo <<<"$stdout"
	blocks=$(awk '$1 == "blocks" {print $2}' <<<"$stdout")
	[ "$blocks" -lt 1024 ] # 64 MiB apparent, a few KiB written
	echo "$output" | jq -e '.copied_in[0].tree == true and (.copied_in[0].skipped | map(.path) == ["fifo"])'
	# out: the same tree, modes, links as links, holes as holes
	echo "$output" | jq -e '.copied_out[0].tree == true and .copied_out[0].bytes > 0'
	# modes as sent, masked by the front end's umask (077) on the host;
	# setuid masked
	[ "$(stat -c %a "$DATA/treeout/sub")" = 700 ]
	[ "$(stat -c %a "$DATA/treeout/sub/f")" = 600 ]
	[ "$(stat -c %a "$DATA/treeout/x")" = 700 ]
	[ "$(stat -c %a "$DATA/treeout/empty")" = 700 ]
	[ -d "$DATA/treeout/empty" ]
	[ -d "$DATA/treeout/sub/deep" ]
	[ "$(readlink "$DATA/treeout/sub/up")" = ../../../etc/passwd ]
	[ "$(readlink "$DATA/treeout/out")" = "$DATA/victim" ]
	[ "$(cat "$DATA/treeout/sub/f")" = hello ]
	[ "$(stat -c %s "$DATA/treeout/sparse")" = $((64 * 1024 * 1024)) ]
	[ "$(stat -c %b "$DATA/treeout/sparse")" -lt 1024 ]
	cmp "$src/sparse" "$DATA/treeout/sparse"
	# the hostile tree: its links are links, nothing went through them,
	# the device and FIFO are skipped, no setuid and no sticky bit
	echo "$output" | jq -e '.copied_out[1].tree == true and (.copied_out[1].skipped | map(.path) | sort == ["null","pipe"])'
	[ "$(readlink "$DATA/evilout/up")" = ../../../../../../.. ]
	[ -L "$DATA/evilout/via" ]
	[ -L "$DATA/evilout/v" ]
	[ -L "$DATA/evilout/root" ]
	[ "$(stat -c %a "$DATA/evilout/d/f")" = 700 ] # sent 4755: no setuid, and the umask
	[ "$(stat -c %a "$DATA/evilout/d")" = 700 ]   # sent 1777: no sticky bit, nor others' write
	[ -z "$(ls -A "$DATA/victim")" ]
	[ ! -e "$DATA/evilout/null" ]
	[ ! -e "$DATA/evilout/pipe" ]
	# a destination that exists is not replaced, nor written into
	mkdir "$DATA/exists"
	echo mine >"$DATA/exists/etc"
	run --separate-stderr isopod run --json-only --copy-out "/etc:$DATA/exists/" -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.copied_out[0].error | test("exists")'
	[ "$(cat "$DATA/exists/etc")" = mine ]
	rm -rf "$src" "$DATA/treeout" "$DATA/evilout" "$DATA/victim" "$DATA/exists"
}

@test "run: isopod-exec stops the VM after the command (--stop), the front end starts no isopod-stop; --keep passes no --stop (nor a commit: t/90 step stop)" {
	# isopod-stop and isopod-exec wrapped: each call's arguments recorded
	local lx="$BATS_TEST_TMPDIR/libexec" t id
	mkdir "$lx"
	for t in "$ROOT"/bin/isopod-*; do ln -s "$t" "$lx/${t##*/}"; done
	for t in stop exec; do
		rm "$lx/isopod-$t"
		printf '#!/bin/sh\necho "$*" >>"%s/%s.calls"\nexec "%s/bin/isopod-%s" "$@"\n' \
			"$BATS_TEST_TMPDIR" "$t" "$ROOT" "$t" >"$lx/isopod-$t"
		chmod +x "$lx/isopod-$t"
	done
	ISOPOD_LIBEXEC="$lx" run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.ok == true and .warnings == []'
	id=$(echo "$output" | jq -r .vm.id)
	! vm_locked "$id" || false
	# QEMU quit (QMP): not its owner's exit, nor a signal
	jq -e '.stopped_by == "qemu"' "$ISOPOD_HOME/vms/$id/meta.json"
	grep -q -- "--stop " "$BATS_TEST_TMPDIR/exec.calls"
	[ ! -e "$BATS_TEST_TMPDIR/stop.calls" ]
	# a failed command too
	ISOPOD_LIBEXEC="$lx" run --separate-stderr isopod run --json-only -- false
	[ "$status" -eq 1 ]
	[ ! -e "$BATS_TEST_TMPDIR/stop.calls" ]
	# --keep: no --stop, the VM runs on
	rm "$BATS_TEST_TMPDIR/exec.calls"
	ISOPOD_LIBEXEC="$lx" run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	vm_locked "$id"
	! grep -q -- "--stop" "$BATS_TEST_TMPDIR/exec.calls" || false
	isopod-stop --force --vm "$id" >/dev/null
}

@test "isopod-exec --stop FILE: QMP quit, else the supervisor signalled (lib/vmstop.c, isopod-stop's); FILE only once stopped; a FILE it cannot make is a warning" {
	local id
	run --separate-stderr isopod run --json-only --keep -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr isopod-exec --vm "$id" --stop "$BATS_TEST_TMPDIR/gone" -- echo hi
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.stdout == "hi\n" and .warnings == []'
	[ -e "$BATS_TEST_TMPDIR/gone" ]
	! vm_locked "$id" || false
	jq -e '.stopped_by == "qemu"' "$ISOPOD_HOME/vms/$id/meta.json"
	# no QMP socket: the supervisor is signalled, the QMP failure said
	run --separate-stderr isopod run --json-only --keep -- true
	id=$(echo "$output" | jq -r .vm.id)
	mv "$ISOPOD_HOME/vms/$id/qmp.sock" "$ISOPOD_HOME/vms/$id/qmp.moved"
	run --separate-stderr isopod-exec --vm "$id" --stop "$BATS_TEST_TMPDIR/sig" -- true
	[ "$status" -eq 0 ]
	[ -e "$BATS_TEST_TMPDIR/sig" ]
	! vm_locked "$id" || false
	jq -e '.stopped_by == "signal"' "$ISOPOD_HOME/vms/$id/meta.json"
	echo "$stderr" | grep -q "qmp"
	# a FILE that cannot be made: stopped all the same, and a warning in the result
	run --separate-stderr isopod run --json-only --keep -- true
	id=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr isopod-exec --vm "$id" --stop "$BATS_TEST_TMPDIR/no/such" -- true
	[ "$status" -eq 0 ]
	! vm_locked "$id" || false
	echo "$output" | jq -e '.warnings | length == 1 and (.[0] | test("^isopod-exec --stop: vm .* stopped \\(qmp\\) but .*/no/such not made"))'
}

@test "run: exec's --stop fails, the front end's isopod-stop retries: the result says the retry stopped the vm, or failed too (review L1)" {
	# exec's stop made to fail: no QMP socket, no supervisor in the record;
	# both put back after exec when $RESTORE is set, so the retry works
	local lx="$BATS_TEST_TMPDIR/libexec" t id
	mkdir "$lx"
	for t in "$ROOT"/bin/isopod-*; do ln -s "$t" "$lx/${t##*/}"; done
	rm "$lx/isopod-exec"
	cat >"$lx/isopod-exec" <<-EOF
		#!/bin/sh
		d=\$ISOPOD_HOME/vms/\$2
		mv "\$d/qmp.sock" "\$d/qmp.moved" && cp "\$d/meta.json" "$BATS_TEST_TMPDIR/meta" &&
			jq 'del(.supervisor_pid)' "$BATS_TEST_TMPDIR/meta" >"\$d/meta.json" || exit 42
		"$ROOT/bin/isopod-exec" "\$@" && rc=0 || rc=\$?
		[ -z "\${RESTORE-}" ] || { mv "\$d/qmp.moved" "\$d/qmp.sock" &&
			jq --slurpfile o "$BATS_TEST_TMPDIR/meta" '.supervisor_pid = \$o[0].supervisor_pid' \\
			"\$d/meta.json" >"$BATS_TEST_TMPDIR/meta.new" && cat "$BATS_TEST_TMPDIR/meta.new" >"\$d/meta.json" || exit 43; }
		exit "\$rc"
	EOF
	chmod +x "$lx/isopod-exec"
	RESTORE=1 ISOPOD_LIBEXEC="$lx" run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.ok == true and (.warnings | length == 2)'
	echo "$output" | jq -e '.warnings[0] | test("^isopod-exec --stop: unable to stop the vm after the command: vm .* names no supervisor")'
	echo "$output" | jq -e '.warnings[1] == "isopod-exec --stop did not confirm the stop; after the retry by isopod-stop the vm is stopped"'
	id=$(echo "$output" | jq -r .vm.id)
	! vm_locked "$id" || false
	jq -e '.stopped_by == "qemu"' "$ISOPOD_HOME/vms/$id/meta.json"
	# the retry fails too (no QMP, no supervisor): said, and the status is the command's
	ISOPOD_LIBEXEC="$lx" run --separate-stderr isopod run --json-only -- true
	[ "$status" -eq 0 ]
	id=$(echo "$output" | jq -r .vm.id)
	echo "$output" | jq -e '.ok == true and (.warnings | length == 2)'
	echo "$output" | jq -e '.warnings[0] | test("^isopod-exec --stop: unable to stop the vm after the command")'
	echo "$output" | jq -e --arg id "$id" '.warnings[1] | test("^isopod-exec --stop did not confirm the stop; the retry by isopod-stop \($id) failed too \\(exit 99\\); tried again as the run ends, else the vm runs until its supervisor sees the run end$")'
	# (its supervisor stops the VM once the front end has gone; else we do)
	mv "$ISOPOD_HOME/vms/$id/qmp.moved" "$ISOPOD_HOME/vms/$id/qmp.sock"
	isopod-stop --force --vm "$id" >/dev/null
	! vm_locked "$id" || false
}
