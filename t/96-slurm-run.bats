#!/usr/bin/env bats
# Real runs under Slurm (issue 16): the lab's cluster (t/lab/cluster.sh) with
# isopod-netsetup's taps in host a (2 filtered slots) and each job a real
# `isopod run --net filtered` in a's network namespace, booting a VM on a
# real slot.  With the GRES isopod-slurm reads off the taps, Slurm holds
# back what does not fit and every run succeeds; with the GRES raised above
# the slots (the mutation), Slurm starts more runs than slots and the
# surplus fails with isopod's own "all 2 filtered network slots busy"
# (exit 102).  Boots VMs: run under the VM test lock.  ~30 s alone.

load helpers

setup_file() {
	need_slurm
	isopod_setup_file --images
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t96s$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T/store-b"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	ip netns exec "$LAB_NAME-a" isopod-netsetup --slots 2 --open-slots 0 --user 0 >"$T/ns-a.json"
	ip netns exec "$LAB_NAME-b" isopod-netsetup --slots 1 --open-slots 0 --user 0 >"$T/ns-b.json"
	ip netns exec "$LAB_NAME-a" env ISOPOD_HOME="$ISOPOD_HOME" isopod-slurm conf --node a >"$T/conf-a.json"
	ip netns exec "$LAB_NAME-b" env ISOPOD_HOME="$T/store-b" isopod-slurm conf --node b >"$T/conf-b.json"
}

teardown_file() {
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
	isopod_teardown_file
}

cx() { sh "$LAB" cexec "$LAB_NAME" "$@"; }

# runs N CONF_A DIR: Slurm with host a's conf CONF_A, then N jobs on a,
# each asking one filtered slot and running `isopod run --net filtered --
# sleep 2` there; DIR/<job>.json its result, DIR/<job>.rc its status, DIR/rec
# the jobs' starts and ends.  Waits (<= 150 s) until no job is left.
runs() {
	local n=$1 conf=$2 dir=$3 i
	sh "$LAB" unslurm "$LAB_NAME"
	sh "$LAB" slurm "$LAB_NAME" "$conf" "$T/conf-b.json" >/dev/null
	mkdir -p "$dir"
	: >"$dir/rec"
	for i in $(seq 1 "$n"); do
		cx ctl sbatch -Q -o "$dir/%j.out" --chdir=/tmp -w a -c1 --gres=isopod_filtered:1 --wrap \
			"echo \"\$(date +%s.%N) + \$SLURMD_NODENAME \$SLURM_JOB_ID\" >>$dir/rec
			isopod run --net filtered --timeout-s 100 -- sleep 2 >$dir/\$SLURM_JOB_ID.json
			echo \$? >$dir/\$SLURM_JOB_ID.rc
			echo \"\$(date +%s.%N) - \$SLURMD_NODENAME \$SLURM_JOB_ID\" >>$dir/rec"
	done
	for i in $(seq 1 300); do
		[ -n "$(cx ctl squeue -h)" ] || return 0
		sleep 0.5
	done
	echo "# jobs still queued after 150 s:" >&3
	cx ctl squeue >&3
	return 1
}

maxconc() {
	LC_ALL=C sort -k1,1n "$1" | awk -v n="$2" '$3 == n { c += ($2 == "+") ? 1 : -1; if (c > m) m = c } END { print m + 0 }'
}

@test "4 jobs running isopod run --net filtered on a host of 2 filtered slots: Slurm runs 2 at a time, every run gets a slot and succeeds" {
	runs 4 "$T/conf-a.json" "$T/ok"
	[ "$(ls "$T"/ok/*.rc | wc -l)" -eq 4 ]
	cat "$T"/ok/*.rc | sort | uniq -c >&3
	[ "$(cat "$T"/ok/*.rc | sort -u)" = 0 ]
	local f
	for f in "$T"/ok/*.json; do
		jq -e '.ok == true and .exit_code == 0 and .net.mode == "filtered" and (.net.tap | test("^isopod-tap[01]$"))' "$f"
	done
	[ "$(maxconc "$T/ok/rec" a)" -eq 2 ]
	# the figures of doc/schedulers.md: first start to last end, and each
	# run's own timings (boot, exec, total)
	echo "# 4 runs on 2 slots: $(LC_ALL=C sort -k1,1n "$T/ok/rec" | awk 'NR == 1 { s = $1 } { e = $1 } END { printf "%.1f s, %.0f jobs/min", e - s, 4 * 60 / (e - s) }');" \
		"timings (boot/exec/total ms): $(jq -r '.timings | "\(.boot_ms)/\(.exec_ms)/\(.total_ms)"' "$T"/ok/*.json | tr '\n' ' ')" >&3
}

@test "mutation: host a's GRES raised to 4 for its 2 slots: Slurm starts 4 runs at once and the 2 surplus fail with 102 (slots busy)" {
	jq '.slurm_conf |= sub("isopod_filtered:2"; "isopod_filtered:4") | .gres_conf |= sub("isopod_filtered Count=2"; "isopod_filtered Count=4")' \
		"$T/conf-a.json" >"$T/conf-a-lie.json"
	runs 4 "$T/conf-a-lie.json" "$T/lie"
	cat "$T"/lie/*.rc | sort | uniq -c >&3
	[ "$(maxconc "$T/lie/rec" a)" -gt 2 ]
	[ "$(grep -lx 102 "$T"/lie/*.rc | wc -l)" -ge 1 ]
	local f
	for f in $(grep -lx 102 "$T"/lie/*.rc); do
		jq -e '.ok == false and (.error | test("filtered network slots busy"))' "${f%.rc}.json"
	done
}
