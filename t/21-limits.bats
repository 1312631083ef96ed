#!/usr/bin/env bats
# $stderr is bats' (run --separate-stderr); single quotes are for the inner shells.
# shellcheck disable=SC2154,SC2016
# Issue 16: isopod run inside a cgroup with limits (a Slurm job step's, a
# container's) fits the VM into them.  Real boots in a v1 memory cgroup made
# below the test's own (as a job's step would be), the limit on it and the
# run in a child of it (an ancestor's limit applies: lib/cgroup.c walks up).

load helpers

setup_file() {
	[ "$(id -u)" -eq 0 ] || {
		echo "# t/21-limits.bats: needs root (a memory cgroup of its own)" >&3
		return 1
	}
	isopod_setup_file --images
	ROOT=$ISOPOD_SRC
	local self mnt
	self=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
	mnt=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
	if [ -z "$self" ] || [ -z "$mnt" ]; then
		echo "# t/21-limits.bats: needs a cgroup v1 memory hierarchy (as this host has)" >&3
		return 1
	fi
	[ "$self" != / ] || self=''
	CG=$mnt$self/t-limits-$$
	mkdir "$CG" "$CG/run"
	export ROOT CG
}

teardown_file() {
	local _
	isopod_teardown_file
	# the runs are over (their jail cgroups gone with them): empty, so rmdir
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		rmdir "$CG/run" "$CG" 2>/dev/null
		[ -d "$CG" ] || break
		sleep 0.5
	done
	[ ! -d "$CG" ] || echo "# teardown: $CG left: $(find "$CG" -name cgroup.procs -exec cat {} +)" >&3
}

isopod() { "$ROOT/sh/isopod" "$@"; }

# in_cg LIMIT_MIB CMD...: CMD in $CG/run, $CG's memory limited to LIMIT_MIB.
in_cg() {
	echo $(($1 * 1048576)) >"$CG/memory.limit_in_bytes"
	shift
	sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CG/run" "$@"
}

@test "limits: a run in a memory cgroup that fits reports the limit and its cgroup, keeps the default size; QEMU's jail cgroup is below the run's" {
	run --separate-stderr in_cg 4096 "$ROOT/sh/isopod" run --json-only --keep -- true
	[ "$status" -eq 0 ]
	json_is '.limits.cgroup == 1 and .limits.memory_bytes == 4294967296'
	json_is ".limits.memory_cgroup == \"$CG\""
	json_is '.limits.mem_mib == 512 and .limits.vcpus == 1 and .limits.mem_reduced == false and .limits.vcpus_reduced == false'
	json_is '.limits.qemu_overhead_mib >= 256'
	id=$(echo "$output" | jq -r .vm.id)
	pid=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	# the jail's memory cgroup is made below the caller's: the job's limit
	# applies to QEMU; cpu and cpuset, where the jail makes none, are the
	# caller's own, inherited
	cat "/proc/$pid/cgroup" >&2
	grep -qx "[0-9]*:memory:${CG#*/memory}/run/isopod-$id" "/proc/$pid/cgroup"
	grep -q "^[0-9]*:cpu,\?[a-z,]*:$(sed -n 's/^[0-9]*:cpu,\?[a-z,]*://p' /proc/self/cgroup)\$" "/proc/$pid/cgroup"
	isopod vm stop "$id" >/dev/null
	echo "$output" | jq -c .limits >&3
}

@test "limits: the default memory too big for the cgroup is lowered to fit, reported, and the guest has it; the VM runs" {
	run --separate-stderr in_cg 4096 "$ROOT/sh/isopod" run --json-only -- true
	[ "$status" -eq 0 ]
	over=$(echo "$output" | jq -r .limits.qemu_overhead_mib)
	# room for 384 MiB of guest RAM, not the default 512
	run --separate-stderr in_cg $((384 + over)) "$ROOT/sh/isopod" run --json-only -- sh -c 'head -1 /proc/meminfo; true'
	[ "$status" -eq 0 ]
	json_is '.ok == true and .exit_code == 0'
	json_is '.limits.mem_mib == 384 and .limits.mem_reduced == true and .limits.vcpus == 1'
	json_is ".limits.memory_cgroup == \"$CG\""
	json_is ".limits.memory_bytes == $(((384 + over) * 1048576))"
	# the guest's RAM is the reduced size (less what the kernel keeps)
	kb=$(echo "$output" | jq -r .stdout | awk '/^MemTotal:/ { print $2 }')
	[ "$kb" -gt $((300 * 1024)) ]
	[ "$kb" -le $((384 * 1024)) ]
	id=$(echo "$output" | jq -r .vm.id)
	[ "$(jq .mem_mib "$ISOPOD_HOME/vms/$id/meta.json")" = 384 ]
}

@test "limits: an explicit --mem-mib that does not fit is a usage error (100) naming the limit, the cgroup and the size, before anything is claimed" {
	n=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	run --separate-stderr in_cg 600 "$ROOT/sh/isopod" run --json-only --mem-mib 512 -- true
	[ "$status" -eq 100 ]
	json_is '.ok == false and .error_kind == "usage"'
	[[ "$stderr" == *"--mem-mib 512 does not fit the cgroup's memory limit"*"> 600 MiB (629145600 bytes, $CG)"* ]]
	[ "$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -eq "$n" ]
}

@test "limits: under TCG a given --mem-mib that fits with QEMU's fixed 256 MiB but not the translation buffer's budget runs, its buffer capped to fit (tb-size), with a warning (what isopod-slurm asks of Slurm)" {
	run --separate-stderr in_cg 600 env ISOPOD_ACCEL=tcg "$ROOT/sh/isopod" run --json-only --keep --mem-mib 256 -- true
	[ "$status" -eq 0 ]
	json_is '.ok == true and .limits.mem_mib == 256 and .limits.mem_reduced == false and .limits.tcg_tb_mib == 88'
	json_is 'any(.warnings[]; test("--mem-mib 256 and QEMU.s fixed 256 MiB fit the memory limit of 600 MiB .*capped at 88 MiB .tb-size."))'
	# 600 - 256 - 256: QEMU runs with that buffer
	id=$(echo "$output" | jq -r .vm.id)
	pid=$(jq -r .qemu_pid "$ISOPOD_HOME/vms/$id/meta.json")
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- ' -accel tcg,tb-size=88 '
	isopod vm stop "$id" >/dev/null
	# 345 + 256 > 600: refused, as before
	run --separate-stderr in_cg 600 env ISOPOD_ACCEL=tcg "$ROOT/sh/isopod" run --json-only --mem-mib 345 -- true
	[ "$status" -eq 100 ]
}

@test "limits: a cgroup too small for the smallest VM is a usage error saying so, before anything is claimed" {
	n=$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	run --separate-stderr in_cg 200 "$ROOT/sh/isopod" run --json-only -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"not even the smallest VM fits the cgroup's memory limit: 64 MiB of guest RAM + "*"> 200 MiB (209715200 bytes, $CG)"* ]]
	[ "$(find "$ISOPOD_HOME/vms" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -eq "$n" ]
}

@test "limits: --vcpus in a fractional CFS quota: up to its ceiling runs throttled, with a warning; beyond it a usage error naming the quota's cgroup and the most that runs" {
	local cmnt cself st st2 st3 err out
	cmnt=$(awk '$9 == "cgroup" && $NF ~ /(^|,)cpu(,|$)/ { print $5; exit }' /proc/self/mountinfo)
	cself=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "cpu") print $3 }' /proc/self/cgroup)
	[ -n "$cmnt" ] || skip "no cgroup v1 cpu hierarchy"
	[ "$cself" != / ] || cself=''
	CPUCG=$cmnt$cself/t-limits-$$
	mkdir "$CPUCG"
	echo 100000 >"$CPUCG/cpu.cfs_period_us"
	echo 150000 >"$CPUCG/cpu.cfs_quota_us"
	# 1.5 CPUs: 2 vCPUs run (throttled); half a CPU: 2 do not (a host
	# of 2 CPUs refuses 3 itself)
	run --separate-stderr sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CPUCG" \
		"$ROOT/bin/isopod-boot" --check --vcpus 2
	st2=$status
	run --separate-stderr sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CPUCG" \
		"$ROOT/sh/isopod" run --json-only --vcpus 2 -- nproc
	out=$output st3=$status
	echo 50000 >"$CPUCG/cpu.cfs_quota_us"
	run --separate-stderr sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CPUCG" \
		"$ROOT/bin/isopod-boot" --check --vcpus 2
	st=$status err=$stderr
	# the run's supervisor may be leaving its cgroup still
	for _ in $(seq 1 20); do
		rmdir "$CPUCG" 2>/dev/null && break
		sleep 0.5
	done
	echo "$err"
	[ "$st" -eq 100 ]
	[[ "$err" == *"--vcpus 2 does not fit the cgroup's CPU limit: 0.50 CPUs (CFS quota of $CPUCG): at most --vcpus 1"* ]]
	[ "$st2" -eq 0 ]
	echo "$out" | jq -c '{limits, warnings, stdout}' >&3
	[ "$st3" -eq 0 ]
	output=$out
	json_is '.limits.vcpus == 2 and .limits.cpus == 1 and .limits.vcpus_throttled == true and .limits.vcpus_reduced == false'
	json_is '.stdout == "2\n"'
	json_is '[.warnings[] | select(test("2 vCPUs in a CFS quota of 1.50 CPUs.*throttled"))] | length == 1'
}
