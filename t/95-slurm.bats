#!/usr/bin/env bats
# isopod as the sandbox of Slurm (issue 16, first Slurm slice): the lab's
# cluster (t/lab/cluster.sh: munged, slurmctld in NAME-ctl, slurmd "a" and
# "b" each in its own network namespace, nothing linked to the root one)
# with the GRES and features that isopod-slurm(8) reads off each host:
# isopod-netsetup's real taps in NAME-a (2 filtered + 1 open slots) and
# NAME-b (3 + 1), a store per host (t/oci/mkchain.sh: stages without a VM).
# The jobs are stand-ins, not VMs: each records its start and end with a
# timestamp into a shared file and sleeps $HOLD s in between; the check is
# that no host ever ran more of them at once than it has slots.  No VM is
# booted here.  ~20 s alone.

load helpers

HOLD=2

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
		skip "slurmctld, slurmd or munged not installed (.ci/setup)"
	isopod_setup_file
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t95s$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	ip netns exec "$LAB_NAME-a" isopod-netsetup --slots 2 --open-slots 1 --user 0 >"$T/ns-a.json"
	ip netns exec "$LAB_NAME-b" isopod-netsetup --slots 3 --open-slots 1 --user 0 >"$T/ns-b.json"
	# host a's store: a base and a chain of two stages; b's: empty
	sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$T/store-a" 2 >"$T/a.ids"
	mkdir -p "$T/store-b"
	for h in a b; do
		ip netns exec "$LAB_NAME-$h" env ISOPOD_HOME="$T/store-$h" isopod-slurm conf --node "$h" \
			>"$T/conf-$h.json"
	done
	# the site's hook: slurmd runs it as root after every job on the node
	cat >"$T/epilog" <<-EOF
		#!/bin/sh
		export ISOPOD_HOME=$T/store-\$SLURMD_NODENAME
		export SLURM_CONF=$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf
		exec $ISOPOD_SRC/bin/isopod-slurm refresh --node "\$SLURMD_NODENAME" >>$T/epilog.log 2>&1
	EOF
	chmod 755 "$T/epilog"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a.json" "$T/conf-b.json" "$T/epilog" >/dev/null
}

teardown_file() {
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
	isopod_teardown_file
}

# cx H CMD...: CMD in the cluster's host H (ctl, a, b), SLURM_CONF set.
cx() { sh "$LAB" cexec "$LAB_NAME" "$@"; }

# burst N GRES REC: N batch jobs asking for GRES each (one CPU), each
# appending "<time> + <node> <job>" when it starts and "<time> - ..." when
# it ends to REC, $HOLD s apart; then wait (<= 60 s) until none is left.
burst() {
	local n=$1 gres=$2 rec=$3 i
	: >"$rec"
	for i in $(seq 1 "$n"); do
		cx ctl sbatch -Q -o /dev/null --chdir=/tmp -J "burst$i" -c1 --gres="$gres" --wrap \
			"echo \"\$(date +%s.%N) + \$SLURMD_NODENAME \$SLURM_JOB_ID\" >>$rec; sleep $HOLD; echo \"\$(date +%s.%N) - \$SLURMD_NODENAME \$SLURM_JOB_ID\" >>$rec"
	done
	for i in $(seq 1 120); do
		[ -n "$(cx ctl squeue -h)" ] || return 0
		sleep 0.5
	done
	echo "# jobs still queued after 60 s:" >&3
	cx ctl squeue >&3
	return 1
}

# maxconc REC NODE: the most jobs REC shows running at once on NODE.
maxconc() {
	LC_ALL=C sort -k1,1n "$1" | awk -v n="$2" '$3 == n { c += ($2 == "+") ? 1 : -1; if (c > m) m = c } END { print m + 0 }'
}

# within_slots REC: every host ran at most as many jobs at once as
# isopod-netsetup made filtered slots there (its JSON's .slots).
within_slots() {
	local h max slots st=0
	for h in a b; do
		max=$(maxconc "$1" "$h")
		slots=$(jq .slots "$T/ns-$h.json")
		echo "# host $h: at most $max jobs at once, $slots filtered slots" >&3
		[ "$max" -le "$slots" ] || st=1
	done
	return "$st"
}

@test "cluster: slurmctld and two slurmd, each in its own netns and nothing else, both idle with the GRES isopod-slurm read off the host's taps" {
	run cx ctl sinfo -h -N -o '%N %T %G'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "a idle isopod_filtered:2,isopod_open:1" ]
	[ "${lines[1]}" = "b idle isopod_filtered:3,isopod_open:1" ]
	# each daemon in its namespace, by the pid the lab recorded
	local pids=($(cat "$ISOPOD_LAB_STATE/$LAB_NAME/slurm/daemons"))
	[ "${#pids[@]}" -eq 3 ]
	[ "$(ip netns identify "${pids[0]}")" = "$LAB_NAME-ctl" ]
	[ "$(ip netns identify "${pids[1]}")" = "$LAB_NAME-a" ]
	[ "$(ip netns identify "${pids[2]}")" = "$LAB_NAME-b" ]
	# the hosts' only link is their veth to the controller's bridge, which
	# holds those two and nothing else; the root netns has none of them
	[ "$(ip -n "$LAB_NAME-a" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')" = "e0 isopod-tap0 isopod-tap1 isopod-tap2 lo " ]
	[ "$(ip -n "$LAB_NAME-ctl" -o link show master br0 | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')" = "va vb " ]
	! ip -n "$LAB_NAME-a" route | grep -q default
	! ip link show va 2>/dev/null
	! ip link show e0 2>/dev/null
}

@test "isopod-slurm conf: the slot counts per mode are netsetup's, the features the store's stages and base, [a-z0-9_] only" {
	jq -e --slurpfile ns "$T/ns-a.json" '.gres == {isopod_filtered: $ns[0].slots, isopod_open: $ns[0].open_slots}' "$T/conf-a.json"
	jq -e --slurpfile ns "$T/ns-b.json" '.gres == {isopod_filtered: $ns[0].slots, isopod_open: $ns[0].open_slots}' "$T/conf-b.json"
	local s1 s2 base
	s1=$(sed -n 1p "$T/a.ids") s2=$(sed -n 2p "$T/a.ids")
	base=$(jq -r .base.sha256 "$T/store-a/stages/$s1/meta.json")
	jq -e --arg s1 "isopod_st_${s1#st-}" --arg s2 "isopod_st_${s2#st-}" --arg b "isopod_base_$base" \
		'.features == ([$s1, $s2, $b] | sort) and all(.features[]; test("^[a-z0-9_]+$"))' "$T/conf-a.json"
	jq -e '.features == [] and .slurm_conf == "NodeName=b Gres=isopod_filtered:3,isopod_open:1"' "$T/conf-b.json"
	jq -e '.gres_conf == "NodeName=b Name=isopod_filtered Count=3\nNodeName=b Name=isopod_open Count=1\n"' "$T/conf-b.json"
	# --dry-run names the command and runs nothing (a failing scontrol here)
	run --separate-stderr env ISOPOD_HOME="$T/store-a" ISOPOD_SCONTROL=/bin/false isopod-slurm refresh --dry-run --node a
	[ "$status" -eq 0 ]
	echo "$output" | jq -e --slurpfile c "$T/conf-a.json" '.updated == false and
		.command == ["/bin/false", "update", "NodeName=a", "AvailableFeatures=\($c[0].features | join(","))",
			"ActiveFeatures=\($c[0].features | join(","))"]'
	run --separate-stderr env ISOPOD_HOME="$T/store-a" ISOPOD_SCONTROL=/bin/false isopod-slurm refresh --node a
	[ "$status" -eq 111 ] && [ -z "$output" ] && [[ $stderr == *"/bin/false update NodeName=a failed (exit 1)"* ]]
	run --separate-stderr isopod-slurm conf --node '-x'
	[ "$status" -eq 100 ] && [ -z "$output" ]
	run --separate-stderr isopod-slurm refresh --node 'a b'
	[ "$status" -eq 100 ] && [ -z "$output" ]
	run --separate-stderr isopod-slurm frob
	[ "$status" -eq 100 ] && [[ $stderr == *usage:* ]]
}

@test "GRES: 10 jobs of --gres=isopod_filtered:1 on hosts of 2 and 3 filtered slots never exceed the slots, fill them, and all finish" {
	burst 10 isopod_filtered:1 "$T/rec"
	[ "$(grep -c ' + ' "$T/rec")" -eq 10 ]
	[ "$(grep -c ' - ' "$T/rec")" -eq 10 ]
	within_slots "$T/rec"
	# Slurm queued the rest, not idled: each host ran its slots full
	[ "$(maxconc "$T/rec" a)" -eq 2 ]
	[ "$(maxconc "$T/rec" b)" -eq 3 ]
}

@test "features: a stage a job commits on host a is on node a when the job is done (Slurm's Epilog runs isopod-slurm refresh); a job constrained to it lands there; stage rm and refresh take it away" {
	local s1 s2 s3 f3 want slurm_conf=$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf
	s1=$(sed -n 1p "$T/a.ids") s2=$(sed -n 2p "$T/a.ids")
	run cx ctl sinfo -h -N -o '%N %f'
	[ "${lines[0]}" = "a $(jq -r '.features | join(",")' "$T/conf-a.json")" ]
	# a job on a commits a third stage, on s2, that slurm.conf's Feature=
	# does not name (the stand-in commit: t/oci/mkchain.sh)
	cx ctl sbatch -Q -o /dev/null --chdir=/tmp -w a --wrap \
		"sh $BATS_TEST_DIRNAME/oci/mkchain.sh $T/store-a 1 1 s $s2 >$T/s3.id"
	for i in $(seq 1 60); do
		[ -n "$(cx ctl squeue -h)" ] || break
		sleep 0.5
	done
	s3=$(cat "$T/s3.id")
	[[ $s3 =~ ^st-[0-9a-f]{12}$ ]]
	f3="isopod_st_${s3#st-}"
	want=$(jq -r --arg f3 "$f3" '.features + [$f3] | sort | join(",")' "$T/conf-a.json")
	run cx ctl sinfo -h -N -o '%N %f|%b'
	[ "${lines[0]}" = "a $want|$want" ]
	# b has nothing (its epilog ran after the GRES test's jobs: an empty
	# active list reads "", the available one "(null)")
	[[ ${lines[1]} =~ ^b\ \(null\)\|(\(null\))?$ ]]
	# placement by feature: 4 jobs asking for stage s3 all run on a (and
	# each one's epilog refreshes a's features to the same list)
	: >"$T/placed"
	for i in 1 2 3 4; do
		cx ctl sbatch -Q -o /dev/null --chdir=/tmp -C "$f3" --wrap "echo \$SLURMD_NODENAME >>$T/placed"
	done
	for i in $(seq 1 60); do
		[ -n "$(cx ctl squeue -h)" ] || break
		sleep 0.5
	done
	[ "$(sort "$T/placed" | uniq -c | awk '{print $1, $2}')" = "4 a" ]
	# the stage goes: after a refresh no node offers it, and a job asking
	# for it is refused
	ISOPOD_HOME="$T/store-a" isopod stage rm "$s3" >/dev/null
	run --separate-stderr ip netns exec "$LAB_NAME-a" env ISOPOD_HOME="$T/store-a" \
		SLURM_CONF="$slurm_conf" isopod-slurm refresh --node a
	[ "$status" -eq 0 ]
	echo "$output" | jq -e --slurpfile c "$T/conf-a.json" '.features == $c[0].features'
	run cx ctl sinfo -h -N -o '%N %f'
	[[ ${lines[0]} != *"$f3"* ]]
	[[ ${lines[0]} == *"isopod_st_${s1#st-}"* ]]
	run cx ctl sbatch -o /dev/null --chdir=/tmp -C "$f3" --wrap true
	[ "$status" -ne 0 ]
	# (Slurm 22.05 says which way it refuses by whether any node ever had it)
	[[ $output == *"Requested node configuration is not available"* ||
		$output == *"Invalid feature specification"* ]]
}

@test "mutation: node a given 4 filtered GRES for its 2 slots: the same 10 jobs run 4 at once there and the slot check FAILS" {
	jq '.slurm_conf |= sub("isopod_filtered:2"; "isopod_filtered:4") | .gres_conf |= sub("isopod_filtered Count=2"; "isopod_filtered Count=4")' \
		"$T/conf-a.json" >"$T/conf-a-lie.json"
	grep -q 'isopod_filtered:4' "$T/conf-a-lie.json"
	sh "$LAB" unslurm "$LAB_NAME"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a-lie.json" "$T/conf-b.json" >/dev/null
	burst 10 isopod_filtered:1 "$T/rec-lie"
	[ "$(grep -c ' - ' "$T/rec-lie")" -eq 10 ]
	[ "$(maxconc "$T/rec-lie" a)" -gt 2 ]
	run within_slots "$T/rec-lie"
	[ "$status" -eq 1 ]
}
