#!/usr/bin/env bats
# Real runs under Slurm (issue 16): the lab's cluster (t/lab/cluster.sh) with
# isopod-netsetup's taps in host a (2 filtered slots) and each job a real
# `isopod run --net filtered` in a's network namespace, booting a VM on a
# real slot.  With the GRES isopod-slurm reads off the taps, Slurm holds
# back what does not fit and every run succeeds; with the GRES raised above
# the slots (the mutation), Slurm starts more runs than slots and the
# surplus fails with isopod's own "all 2 filtered network slots busy"
# (exit 102).  Each node has its own store, named by the node's own
# configuration (slurm.conf's TaskProlog): a's is the file's, b's another
# with the same kernel and base.  A stage travels: a job on a commits it in
# a real VM and pushes it to the cluster's registry (lab.sh cregistry, its
# own namespace on the cluster's bridge); a job on b runs on it by digest,
# isopod run pulling it first.  Boots VMs: run under the VM test lock.
# ~60 s alone (29 s before the travel test).

load helpers

setup_file() {
	need_slurm
	isopod_setup_file --images
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t96s$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T"
	# node b's own store (a short path: unix sockets), the same kernel and
	# base as a's: hard links of the file's registered images (immutable,
	# 0444), what images/register would copy there
	STORE_B=$(mktemp -d /tmp/isopod-t.96-b.XXXXXX)
	export STORE_B
	cp -al "$ISOPOD_HOME/kernels" "$ISOPOD_HOME/images" "$STORE_B/"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	REG=$(sh "$LAB" cregistry "$LAB_NAME")
	export REG
	# each node's own configuration of its jobs (slurm.conf's TaskProlog,
	# whose "export" lines win over the submitter's environment): its own
	# store, and what its runs may pull from
	printf 'pull_from = %s/isopod\n' "$REG" >"$T/pull.conf"
	cat >"$T/taskprolog" <<-EOF
		#!/bin/sh
		case \$SLURMD_NODENAME in
		a) echo export ISOPOD_HOME="$ISOPOD_HOME" ;;
		b) echo export ISOPOD_HOME="$STORE_B" ;;
		esac
		echo export ISOPOD_CONFIG="$T/pull.conf"
	EOF
	chmod 755 "$T/taskprolog"
	export ISOPOD_LAB_TASKPROLOG="$T/taskprolog"
	ip netns exec "$LAB_NAME-a" isopod-netsetup --slots 2 --open-slots 0 --user 0 >"$T/ns-a.json"
	ip netns exec "$LAB_NAME-b" isopod-netsetup --slots 1 --open-slots 0 --user 0 >"$T/ns-b.json"
	ip netns exec "$LAB_NAME-a" env ISOPOD_HOME="$ISOPOD_HOME" isopod-slurm conf --node a >"$T/conf-a.json"
	ip netns exec "$LAB_NAME-b" env ISOPOD_HOME="$STORE_B" isopod-slurm conf --node b >"$T/conf-b.json"
}

teardown_file() {
	local st=0
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
	[ -z "${STORE_B-}" ] || ISOPOD_HOME=$STORE_B isopod_teardown_file || st=1
	isopod_teardown_file || st=1
	return "$st"
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
	wait_jobs 150
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

# wait_jobs [SECONDS]: until no job is left in squeue (<= SECONDS, 120).
wait_jobs() {
	local i s=${1:-120}
	for i in $(seq 1 $((s * 2))); do
		[ -n "$(cx ctl squeue -h)" ] || return 0
		sleep 0.5
	done
	echo "# jobs still queued after $s s:" >&3
	cx ctl squeue >&3
	return 1
}

@test "a stage travels: a job on a commits it in a VM and pushes it to the cluster's registry; b's own store lacks it; a job on b runs --stage REGISTRY/REPO@DIGEST (pulled before boot) and its VM reads the file; b's store then holds it with the same id and bytes" {
	local d=$T/travel id dg t0 mk="travelled-$RANDOM$RANDOM"
	mkdir -p "$d"
	sh "$LAB" unslurm "$LAB_NAME"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a.json" "$T/conf-b.json" >/dev/null
	cx ctl sbatch -Q -o "$d/a.out" --chdir=/tmp -w a --wrap \
		"isopod run --json-only --net none --commit-as travel --timeout-s 100 -- sh -c 'echo $mk >/travel' >$d/run-a.json &&
		isopod stage push --plain-http travel $REG/isopod/travel:v1 >$d/push.json; echo \$? >$d/a.rc; echo \$ISOPOD_HOME >$d/a.home"
	wait_jobs
	[ "$(cat "$d/a.rc")" = 0 ] || { cat "$d/a.out" "$d/run-a.json" >&3; false; }
	[ "$(cat "$d/a.home")" = "$ISOPOD_HOME" ]
	id=$(jq -r .commit.stage.id "$d/run-a.json")
	[[ $id =~ ^st-[0-9a-f]{12}$ ]]
	dg=$(jq -r .digest "$d/push.json")
	[[ $dg =~ ^sha256:[0-9a-f]{64}$ ]]
	# b's store is its own: the stage is not there, a run on it by label fails
	[ ! -e "$STORE_B/stages/$id" ]
	cx ctl sbatch -Q -o "$d/b0.out" --chdir=/tmp -w b --wrap \
		"isopod run --json-only --net none --stage travel -- cat /travel >$d/run-b0.json; echo \$? >$d/b0.rc; echo \$ISOPOD_HOME >$d/b.home"
	wait_jobs
	[ "$(cat "$d/b.home")" = "$STORE_B" ]
	[ "$(cat "$d/b0.rc")" -ne 0 ]
	jq -e '.ok == false' "$d/run-b0.json"
	# on b by digest: the run pulls the chain, then boots on it
	t0=$(date +%s.%N)
	cx ctl sbatch -Q -o "$d/b.out" --chdir=/tmp -w b --wrap \
		"isopod run --json-only --net none --cold --stage $REG/isopod/travel@$dg --pull-plain-http --timeout-s 100 -- cat /travel >$d/run-b.json; echo \$? >$d/b.rc"
	wait_jobs
	echo "# a job on b pulling the stage and running on it: $(awk -v s="$t0" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s" \
		"submitted to gone; its timings: $(jq -c .timings "$d/run-b.json"); the layer: $(stat -c %s "$STORE_B/stages/$id/layer.qcow2" 2>/dev/null) bytes" >&3
	[ "$(cat "$d/b.rc")" = 0 ] || { cat "$d/b.out" "$d/run-b.json" >&3; false; }
	jq -e --arg id "$id" '.ok and .stdout == "\($mk)\n" and .on.stage.id == $id' --arg mk "$mk" "$d/run-b.json"
	# the same stage, id and bytes, in b's own store, pulled from the registry
	[ -d "$STORE_B/stages/$id" ]
	[ "$(sha256sum <"$STORE_B/stages/$id/layer.qcow2")" = "$(sha256sum <"$ISOPOD_HOME/stages/$id/layer.qcow2")" ]
	jq -e --arg r "$REG/isopod/travel@$dg" '.label == "travel" and .pulled.from == $r' "$STORE_B/stages/$id/meta.json"
	[ "$(ls "$STORE_B/stages")" = "$id" ]
}
