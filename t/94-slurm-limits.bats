#!/usr/bin/env bats
# Issue 16: isopod run inside a real Slurm job, the job's cgroup limits
# respected.  The lab's cluster (t/lab/cluster.sh) with ISOPOD_LAB_TASKCG=1:
# TaskPlugin=task/cgroup, ProctrackType=proctrack/cgroup, cgroup.conf
# ConstrainRAMSpace and ConstrainCores, memory a consumable; each slurmd in
# a cgroup namespace rooted below this test's own cgroup (t/lab/cgns).  Each
# job runs `isopod run --json-only` on node a; its result's `limits` must
# name the memory limit and cpuset Slurm put on the job, in Slurm's own
# cgroups (slurm_a/uid_0/job_<id>/step_batch), and the VM must fit them.
# The control: the same job under task/none sees no limit.  Boots VMs: run
# under the VM test lock.  About 30 s alone.

load helpers

setup_file() {
	need_slurm
	if ! awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { f = 1 } END { exit !f }' /proc/self/mountinfo; then
		skip "needs cgroup v1 hierarchies (the lab's Slurm runs cgroup/v1)"
	fi
	isopod_setup_file --images
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t94s$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	ip netns exec "$LAB_NAME-a" env ISOPOD_HOME="$ISOPOD_HOME" isopod-slurm conf --node a >"$T/conf-a.json"
	ip netns exec "$LAB_NAME-b" env ISOPOD_HOME="$ISOPOD_HOME" isopod-slurm conf --node b >"$T/conf-b.json"
	# the machine's CPUs, not the lab's usual 8: ConstrainCores writes the
	# job's CPUs into its cpuset, and a CPU the machine lacks fails the job
	ISOPOD_LAB_TASKCG=1 ISOPOD_LAB_CPUS=$(nproc) sh "$LAB" slurm "$LAB_NAME" "$T/conf-a.json" "$T/conf-b.json" >/dev/null
	# the cgroups t/lab/cgns made (each node's root, in each controller)
	cp "$ISOPOD_LAB_STATE/$LAB_NAME/slurm/cgroups" "$T/cgroups"
	[ "$(wc -l <"$T/cgroups")" -eq 10 ]
}

teardown_file() {
	local d st=0
	if [ -n "${LAB-}" ]; then
		sh "$LAB" down "$LAB_NAME"
		# every cgroup the lab made is gone with it (Slurm's below them)
		while read -r d; do
			[ ! -d "$d" ] || {
				echo "# teardown: cgroup $d left" >&3
				st=1
			}
		done < <(cat "$T/cgroups" 2>/dev/null)
	fi
	isopod_teardown_file || st=1
	return "$st"
}

cx() { sh "$LAB" cexec "$LAB_NAME" "$@"; }

# job NAME SBATCH-OPTION... -- ISOPOD-RUN-ARG...: a batch job on node a
# running `isopod run --json-only ARGS`; $T/NAME.json its result, $T/NAME.rc
# its status, $T/NAME.max the job cgroup's memory.max_usage_in_bytes after
# it, $T/NAME.id the job's id.  Waits (<= 120 s) until the job is done.
job() {
	local name=$1 opts=() i id
	shift
	while [ "$1" != -- ]; do
		opts+=("$1")
		shift
	done
	shift
	id=$(cx ctl sbatch --parsable -o "$T/$name.out" --chdir=/tmp -w a "${opts[@]}" --wrap \
		"isopod run --json-only $* >$T/$name.json; echo \$? >$T/$name.rc
		cat /sys/fs/cgroup/memory/slurm_a/uid_0/job_\$SLURM_JOB_ID/memory.max_usage_in_bytes >$T/$name.max")
	[ -n "$id" ] || return 1
	echo "$id" >"$T/$name.id"
	for i in $(seq 1 240); do
		[ -n "$(cx ctl squeue -h -j "$id" 2>/dev/null)" ] || return 0
		sleep 0.5
	done
	echo "# job $id still queued after 120 s" >&3
	return 1
}

# the job step's cgroup in controller C, as the job sees it
step_cg() { echo "/sys/fs/cgroup/$1/slurm_a/uid_0/job_$(cat "$T/$2.id")/step_batch"; }

@test "a job of --mem=4000 -c1: isopod run reads the memory limit and cpuset of the job's step cgroup (Slurm's job_<id>/step_batch), keeps the default size; QEMU's memory counts in the job's cgroup" {
	job big --mem=4000 -c1 -- -- sh -c "'head -1 /proc/meminfo'"
	cat "$T/big.out" >&2
	[ "$(cat "$T/big.rc")" = 0 ]
	jq -e '.ok == true and .exit_code == 0' "$T/big.json"
	jq -e --arg m "$(step_cg memory big)" --arg c "$(step_cg cpuset big)" \
		'.limits | .cgroup == 1 and .memory_bytes == 4000 * 1048576 and .memory_cgroup == $m
		and .cpuset_cpus == 1 and .cpuset_cgroup == $c
		and .mem_mib == 512 and .mem_reduced == false and .vcpus == 1' "$T/big.json"
	# the job's cgroup was charged with the VM (QEMU is jailed below the
	# step's memory cgroup): tens of MiB, where the job's shell is ~1 MiB
	[ "$(cat "$T/big.max")" -gt $((32 * 1048576)) ]
	jq -c .limits "$T/big.json" >&3
	echo "# job cgroup's peak memory: $(($(cat "$T/big.max") / 1048576)) MiB" >&3
}

@test "a job of --mem=384+QEMU's cost: the default guest RAM is lowered to 384 MiB to fit the job's limit, and the guest has it" {
	over=$(jq -r .limits.qemu_overhead_mib "$T/big.json")
	[ "$over" -ge 256 ]
	job fit --mem=$((384 + over)) -c1 -- -- sh -c "'head -1 /proc/meminfo'"
	[ "$(cat "$T/fit.rc")" = 0 ]
	jq -e --arg m "$(step_cg memory fit)" \
		'.ok == true and .exit_code == 0 and .limits.memory_bytes == ('$((384 + over))' * 1048576)
		and .limits.memory_cgroup == $m and .limits.mem_mib == 384 and .limits.mem_reduced == true' "$T/fit.json"
	# the guest's MemTotal: 384 MiB less what its kernel keeps (< 32 MiB)
	kb=$(jq -r .stdout "$T/fit.json" | awk '{ print $2 }')
	[ "$kb" -le $((384 * 1024)) ]
	[ "$kb" -gt $((352 * 1024)) ]
}

@test "what isopod-slurm run asks of Slurm, --mem = --mem-mib + 256: the node's run keeps the given size (under TCG its translation buffer capped to fit)" {
	job asked --mem=$((384 + 256)) -c1 -- --mem-mib 384 -- sh -c "'head -1 /proc/meminfo'"
	cat "$T/asked.out" >&2
	[ "$(cat "$T/asked.rc")" = 0 ]
	jq -e --arg m "$(step_cg memory asked)" \
		'.ok == true and .exit_code == 0 and .limits.memory_bytes == (640 * 1048576) and .limits.memory_cgroup == $m
		and .limits.mem_mib == 384 and .limits.mem_reduced == false
		and (if .limits.qemu_overhead_mib > 256 then .limits.tcg_tb_mib >= 16 else .limits.tcg_tb_mib == null end)' "$T/asked.json"
	jq -c .limits "$T/asked.json" >&3
	echo "# job cgroup's peak memory: $(($(cat "$T/asked.max") / 1048576)) MiB of 640" >&3
}

@test "a given --mem-mib over the job's --mem, and --vcpus 2 in a one-CPU job: refused with 100, naming the limit and the step's cgroup" {
	job over --mem=1000 -c1 -- --mem-mib 800 -- true
	[ "$(cat "$T/over.rc")" = 100 ]
	jq -e --arg m "$(step_cg memory over)" \
		'.ok == false and (.error | test("--mem-mib 800 does not fit the cgroup.s memory limit") and contains("(1048576000 bytes, " + $m + ")"))' \
		"$T/over.json"
	job cpus --mem=1000 -c1 -- --vcpus 2 -- true
	[ "$(cat "$T/cpus.rc")" = 100 ]
	jq -e --arg c "$(step_cg cpuset cpus)" \
		'.ok == false and (.error | contains("--vcpus 2 does not fit the cgroup'"'"'s CPU limit: 1 CPUs (cpuset of " + $c + ")"))' \
		"$T/cpus.json"
}

@test "control: the same cluster under task/none: the job's --mem is no limit isopod sees, and a --mem-mib over it boots" {
	sh "$LAB" unslurm "$LAB_NAME"
	ISOPOD_LAB_CPUS=$(nproc) sh "$LAB" slurm "$LAB_NAME" "$T/conf-a.json" "$T/conf-b.json" >/dev/null
	job none --mem=1000 -c1 -- --mem-mib 800 -- true
	[ "$(cat "$T/none.rc")" = 0 ]
	jq -e '.ok == true and .limits.memory_bytes == null and .limits.memory_cgroup == null' "$T/none.json"
}
