#!/usr/bin/env bats
# isopod as the sandbox of Slurm (issue 16, first Slurm slice): the lab's
# cluster (t/lab/cluster.sh: munged, slurmctld in NAME-ctl, slurmd "a" and
# "b" each in its own network namespace, nothing linked to the root one)
# with the GRES and features that isopod-slurm(8) reads off each host:
# isopod-netsetup's real taps in NAME-a and NAME-b (4 filtered + 1 open
# slots each: the issue's figures), a store per host (t/oci/mkchain.sh: stages without a VM).
# The jobs are stand-ins, not VMs: each records its start and end with a
# timestamp into a shared file and sleeps $HOLD s in between; the check is
# that no host ever ran more of them at once than it has slots.  No VM is
# booted here; isopod-attest and, for the refusals, scontrol are stand-ins
# where said.  ~90 s alone (30 s of it the hung scontrol's; 82 s with 10
# jobs on 2+3 slots).

load helpers

HOLD=2

setup_file() {
	need_slurm
	isopod_setup_file
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t95s$$"
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	ip netns exec "$LAB_NAME-a" isopod-netsetup --slots 4 --open-slots 1 --user 0 >"$T/ns-a.json"
	ip netns exec "$LAB_NAME-b" isopod-netsetup --slots 4 --open-slots 1 --user 0 >"$T/ns-b.json"
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
	# the site's own features on a (slurm.conf's Feature=), which a refresh keeps
	jq '.slurm_conf |= sub(" Feature="; " Feature=intel,ib,")' "$T/conf-a.json" >"$T/conf-a-site.json"
	grep -q 'Feature=intel,ib,isopod_' "$T/conf-a-site.json"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a-site.json" "$T/conf-b.json" "$T/epilog" >/dev/null
	# stand-ins: an scontrol that logs its arguments and shows $SC_SHOW;
	# isopod-attest verifying always ($T/lx-good) or never ($T/lx-bad);
	# the host config requiring an attestation
	# shellcheck disable=SC2016 # the stand-in expands them
	printf '#!/bin/sh\necho "$*" >>"$SC_LOG"\n[ "$1" != -o ] || cat "$SC_SHOW"\n' >"$T/scontrol"
	mkdir -p "$T/lx-good" "$T/lx-bad"
	printf '#!/bin/sh\necho '\''{"valid":true,"failures":[]}'\''\n' >"$T/lx-good/isopod-attest"
	printf '#!/bin/sh\necho '\''{"valid":false,"failures":[{"subject":"ruleset/nftables","why":"digest differs"}]}'\''\nexit 1\n' \
		>"$T/lx-bad/isopod-attest"
	chmod 755 "$T/scontrol" "$T/lx-good/isopod-attest" "$T/lx-bad/isopod-attest"
	echo 'require_attestation = yes' >"$T/hostconf"
}

teardown_file() {
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
	isopod_teardown_file
}

# cx H CMD...: CMD in the cluster's host H (ctl, a, b), SLURM_CONF set.
cx() { sh "$LAB" cexec "$LAB_NAME" "$@"; }

# burst N GRES REC [ARGS...]: N batch jobs asking for GRES each (one CPU;
# ARGS: more of sbatch's options), each appending "<time> + <node> <job>"
# when it starts and "<time> - ..." when it ends to REC, $HOLD s apart;
# then wait (<= 60 s) until none is left.
burst() {
	local n=$1 gres=$2 rec=$3 i
	shift 3
	: >"$rec"
	for i in $(seq 1 "$n"); do
		cx ctl sbatch -Q -o /dev/null --chdir=/tmp -J "burst$i" -c1 --gres="$gres" "$@" --wrap \
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

# maxall REC: the most jobs REC shows running at once, all nodes together.
maxall() {
	LC_ALL=C sort -k1,1n "$1" | awk '{ c += ($2 == "+") ? 1 : -1; if (c > m) m = c } END { print m + 0 }'
}

# placed REC: how many jobs started on each node, "a N b M".
placed() {
	echo "a $(grep -c ' + a ' "$1") b $(grep -c ' + b ' "$1")"
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
	[ "${lines[0]}" = "a idle isopod_filtered:4,isopod_open:1" ]
	[ "${lines[1]}" = "b idle isopod_filtered:4,isopod_open:1" ]
	# each daemon in its namespace, by the pid the lab recorded
	local pids=($(cat "$ISOPOD_LAB_STATE/$LAB_NAME/slurm/daemons"))
	[ "${#pids[@]}" -eq 3 ]
	[ "$(ip netns identify "${pids[0]}")" = "$LAB_NAME-ctl" ]
	[ "$(ip netns identify "${pids[1]}")" = "$LAB_NAME-a" ]
	[ "$(ip netns identify "${pids[2]}")" = "$LAB_NAME-b" ]
	# the hosts' only link is their veth to the controller's bridge, which
	# holds those two and nothing else; the root netns has none of them
	[ "$(ip -n "$LAB_NAME-a" -o link show | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')" = "e0 isopod-tap0 isopod-tap1 isopod-tap2 isopod-tap3 isopod-tap4 lo " ]
	[ "$(ip -n "$LAB_NAME-ctl" -o link show master br0 | awk -F': ' '{print $2}' | sed 's/@.*//' | sort | tr '\n' ' ')" = "va vb " ]
	! ip -n "$LAB_NAME-a" route | grep -q default || false
	! ip link show va 2>/dev/null || false
	! ip link show e0 2>/dev/null || false
}

@test "isopod-slurm conf: the slot counts per mode are netsetup's, the features the store's stages and base, [a-z0-9_] only" {
	jq -e --slurpfile ns "$T/ns-a.json" '.gres == {isopod_filtered: $ns[0].slots, isopod_open: $ns[0].open_slots}' "$T/conf-a.json"
	jq -e --slurpfile ns "$T/ns-b.json" '.gres == {isopod_filtered: $ns[0].slots, isopod_open: $ns[0].open_slots}' "$T/conf-b.json"
	local s1 s2 base
	s1=$(sed -n 1p "$T/a.ids") s2=$(sed -n 2p "$T/a.ids")
	base=$(jq -r .base.sha256 "$T/store-a/stages/$s1/meta.json")
	jq -e --arg s1 "isopod_st_${s1#st-}" --arg s2 "isopod_st_${s2#st-}" --arg b "isopod_base_$base" \
		'.features == ([$s1, $s2, $b] | sort) and all(.features[]; test("^[a-z0-9_]+$"))' "$T/conf-a.json"
	jq -e '.features == [] and .slurm_conf == "NodeName=b Gres=isopod_filtered:4,isopod_open:1"' "$T/conf-b.json"
	jq -e '.gres_conf == "NodeName=b Name=isopod_filtered Count=4\nNodeName=b Name=isopod_open Count=1\n"' "$T/conf-b.json"
	# --dry-run reads the node (a stand-in scontrol), names the command, and
	# updates nothing; the site's features (not isopod_*) stay, ours replace
	# the old isopod_ ones
	echo "NodeName=a Arch=x86_64 AvailableFeatures=intel,isopod_st_000000000000,ib ActiveFeatures=isopod_st_000000000000,intel OS=Linux 6.1 #1 SMP State=IDLE ThreadsPerCore=1" >"$T/show-a"
	export SC_LOG="$T/sc.log" SC_SHOW="$T/show-a"
	: >"$SC_LOG"
	run --separate-stderr env ISOPOD_HOME="$T/store-a" ISOPOD_SYSCONFIG="$T/none" ISOPOD_SCONTROL="$T/scontrol" \
		isopod-slurm refresh --dry-run --node a
	[ "$status" -eq 0 ]
	echo "$output" | jq -e --slurpfile c "$T/conf-a.json" --arg sc "$T/scontrol" '.updated == false and
		.drained == false and .attestation == {required: false} and .state_command == null and
		.features == $c[0].features and .command == [$sc, "update", "NodeName=a", "AvailableFeatures=\(["intel", "ib"] + $c[0].features | join(","))",
			"ActiveFeatures=\(["intel"] + $c[0].features | join(","))"]'
	[ "$(cat "$SC_LOG")" = "-o show node a" ]
	run --separate-stderr env ISOPOD_HOME="$T/store-a" ISOPOD_SCONTROL=/bin/false isopod-slurm refresh --node a
	[ "$status" -eq 111 ] && [ -z "$output" ] && [[ $stderr == *"/bin/false -o show node a failed (exit 1)"* ]] || false
	# one node, never many: ALL (any case) and nodesets are refused before
	# scontrol runs, and a name scontrol shows as not exactly one node
	: >"$SC_LOG"
	for n in ALL all aLl 'a[1-2]' a,b; do
		run --separate-stderr env ISOPOD_SCONTROL="$T/scontrol" isopod-slurm refresh --node "$n"
		[ "$status" -eq 100 ] && [ -z "$output" ] && [[ $stderr == *"want one node"* ]] || false
		run --separate-stderr isopod-slurm conf --node "$n"
		[ "$status" -eq 100 ] && [ -z "$output" ] || false
	done
	[ ! -s "$SC_LOG" ]
	printf 'NodeName=a Arch=x\nNodeName=a2 Arch=x\n' >"$T/show-2"
	run --separate-stderr env SC_SHOW="$T/show-2" ISOPOD_SCONTROL="$T/scontrol" isopod-slurm refresh --node a
	[ "$status" -eq 100 ] && [ -z "$output" ] && [[ $stderr == *"gives 2 node(s), not that one"* ]] || false
	echo "NodeName=a2 Arch=x" >"$T/show-2"
	run --separate-stderr env SC_SHOW="$T/show-2" ISOPOD_SCONTROL="$T/scontrol" isopod-slurm refresh --node a
	[ "$status" -eq 100 ] && [ -z "$output" ] || false
	[ "$(grep -c update "$SC_LOG")" -eq 0 ]
	run --separate-stderr isopod-slurm conf --node '-x'
	[ "$status" -eq 100 ] && [ -z "$output" ] || false
	run --separate-stderr isopod-slurm refresh --node 'a b'
	[ "$status" -eq 100 ] && [ -z "$output" ] || false
	run --separate-stderr isopod-slurm frob
	[ "$status" -eq 100 ] && [[ $stderr == *usage:* ]] || false
}

@test "isopod-slurm refresh: an scontrol that hangs is killed with what it started at 30 s: 111, naming it" {
	printf '#!/bin/sh\nsleep 300 &\necho $! >"$SC_PID"\nwait\n' >"$T/scontrol-hang"
	chmod 755 "$T/scontrol-hang"
	local t0 t1
	t0=$(date +%s)
	run --separate-stderr env SC_PID="$T/hang.pid" ISOPOD_HOME="$T/store-a" ISOPOD_SYSCONFIG="$T/none" \
		ISOPOD_SCONTROL="$T/scontrol-hang" timeout 90 isopod-slurm refresh --dry-run --node a
	t1=$(date +%s)
	echo "# $status after $((t1 - t0)) s: $stderr" >&3
	[ "$status" -eq 111 ] && [ -z "$output" ] && [[ $stderr == *"did not end within 30 s"* ]] || false
	[ $((t1 - t0)) -lt 60 ]
	# its child went with it (the group was killed): gone, or a zombie
	# no one reaped yet
	local st
	st=$(ps -o stat= -p "$(cat "$T/hang.pid")" || :)
	[ -z "$st" ] || [[ $st == Z* ]]
}

@test "GRES: 18 jobs of --gres=isopod_filtered:1 on two hosts of 4 filtered slots each never exceed the slots, fill them, and all finish" {
	burst 18 isopod_filtered:1 "$T/rec"
	[ "$(grep -c ' + ' "$T/rec")" -eq 18 ]
	[ "$(grep -c ' - ' "$T/rec")" -eq 18 ]
	within_slots "$T/rec"
	# Slurm queued the rest, not idled: each host ran its slots full
	[ "$(maxconc "$T/rec" a)" -eq 4 ]
	[ "$(maxconc "$T/rec" b)" -eq 4 ]
	# the figure of doc/schedulers.md: 18 jobs of $HOLD s on 8 slots take
	# 3 waves (6 s) at best, Slurm starting each the moment a slot frees
	echo "# 18 jobs on 8 slots: $(LC_ALL=C sort -k1,1n "$T/rec" | awk 'NR == 1 { s = $1 } { e = $1 } END { printf "%.1f s, %.0f jobs/min", e - s, 18 * 60 / (e - s) }')" >&3
}

@test "features: a stage a job commits on host a is on node a when the job is done (Slurm's Epilog runs isopod-slurm refresh); a job constrained to it lands there; stage rm and refresh take it away" {
	local s1 s2 s3 f3 want slurm_conf=$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf
	s1=$(sed -n 1p "$T/a.ids") s2=$(sed -n 2p "$T/a.ids")
	# the Epilog refreshed a after the GRES test's jobs: the site's
	# features intel and ib (slurm.conf) stay, before the store's
	run cx ctl sinfo -h -N -o '%N %f|%b'
	[ "${lines[0]}" = "a $(jq -r '["intel", "ib"] + .features | join(",")' "$T/conf-a.json")|$(jq -r '["intel", "ib"] + .features | join(",")' "$T/conf-a.json")" ]
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
	want=$(jq -r --arg f3 "$f3" '["intel", "ib"] + (.features + [$f3] | sort) | join(",")' "$T/conf-a.json")
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
	[[ ${lines[0]} == "a intel,ib,isopod_"* ]]
	[[ ${lines[0]} == *"isopod_st_${s1#st-}"* ]]
	run cx ctl sbatch -o /dev/null --chdir=/tmp -C "$f3" --wrap true
	[ "$status" -ne 0 ]
	# (Slurm 22.05 says which way it refuses by whether any node ever had it)
	[[ $output == *"Requested node configuration is not available"* ||
		$output == *"Invalid feature specification"* ]]
}

@test "soft placement: jobs that --prefer the feature isopod-slurm feature names for a's stage land on a while it has a free slot, then on b without waiting; without --prefer they land on b" {
	local s2 f
	s2=$(sed -n 2p "$T/a.ids")
	# feature REF: the stage's feature, by label, id or id prefix, as
	# conf spells it; nothing else of the store
	run --separate-stderr env ISOPOD_HOME="$T/store-a" isopod-slurm feature s2
	[ "$status" -eq 0 ]
	f="isopod_st_${s2#st-}"
	[ "$output" = "{\"stage\":\"$s2\",\"feature\":\"$f\"}" ]
	jq -e --arg f "$f" '.features | index($f)' "$T/conf-a.json"
	for r in "$s2" "${s2:0:7}"; do
		run --separate-stderr env ISOPOD_HOME="$T/store-a" isopod-slurm feature "$r"
		[ "$status" -eq 0 ] && [ "$(jq -r .feature <<<"$output")" = "$f" ] || false
	done
	run --separate-stderr env ISOPOD_HOME="$T/store-a" isopod-slurm feature nosuch
	[ "$status" -eq 101 ] && [ -z "$output" ] && [[ $stderr == *"no such stage: nosuch"* ]] || false
	run --separate-stderr env ISOPOD_HOME="$T/store-b" isopod-slurm feature s2
	[ "$status" -eq 101 ] && [ -z "$output" ] || false
	for a in "" "s1 s2" "--node a s2" "--dry-run s2" "-x s2"; do
		# shellcheck disable=SC2086 # the words are the arguments
		run --separate-stderr env ISOPOD_HOME="$T/store-a" isopod-slurm feature $a
		[ "$status" -eq 100 ] && [ -z "$output" ] && [[ $stderr == *usage:* ]] || false
	done
	# Slurm's own choice is b (a weighs more: lower weight is picked
	# first), so a job on a is the --prefer's doing, not the node order
	cx ctl scontrol update NodeName=a Weight=100
	# the control: 2 jobs without --prefer both land on b
	burst 2 isopod_filtered:1 "$T/rec-noprefer"
	echo "# without --prefer: $(placed "$T/rec-noprefer")" >&3
	[ "$(placed "$T/rec-noprefer")" = "a 0 b 2" ]
	# preferring a's stage: a's 4 filtered slots first, then b; all 6 at
	# once (none waited for a)
	burst 6 isopod_filtered:1 "$T/rec-prefer" --prefer="$f"
	echo "# --prefer=$f: $(placed "$T/rec-prefer"), at most $(maxall "$T/rec-prefer") at once" >&3
	[ "$(placed "$T/rec-prefer")" = "a 4 b 2" ]
	[ "$(maxall "$T/rec-prefer")" -eq 6 ]
	within_slots "$T/rec-prefer"
	cx ctl scontrol update NodeName=a Weight=1
}

# rb LIBEXEC [ARGS]: isopod-slurm refresh of node b in b's netns, the host
# config requiring an attestation, isopod-attest the one in LIBEXEC.
rb() {
	local lx=$1
	shift
	run --separate-stderr ip netns exec "$LAB_NAME-b" env ISOPOD_HOME="$T/store-b" ISOPOD_SYSCONFIG="$T/hostconf" \
		ISOPOD_LIBEXEC="$lx" SLURM_CONF="$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf" isopod-slurm refresh --node b "$@"
}

# state_b: node b's state and reason, "STATE|REASON".
state_b() { cx ctl sinfo -h -N -n b -o '%T|%E'; }

# state_b_becomes WANT: state_b is WANT within 5 s (a resume shows late).
state_b_becomes() {
	local i
	for i in $(seq 1 10); do
		[ "$(state_b)" != "$1" ] || return 0
		sleep 0.5
	done
	echo "# node b: $(state_b), not $1" >&3
	return 1
}

@test "attestation: required and failing, refresh drains node b (a job for b waits) and conf refuses; verifying again, refresh resumes it and the job runs; a drain by someone else is never resumed nor overwritten" {
	[ "$(state_b)" = "idle|none" ]
	rb "$T/lx-bad"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.drained == true and .resumed == false and .updated == true and
		.attestation.required and .attestation.valid == false and (.why | contains("ruleset/nftables: digest differs")) and
		.state_command[1:] == ["update", "NodeName=b", "State=DRAIN", "Reason=isopod: attestation does not verify: ruleset/nftables: digest differs"]'
	[ "$(state_b)" = "drained|isopod: attestation does not verify: ruleset/nftables: digest differs" ]
	cx ctl sbatch -Q -o /dev/null --chdir=/tmp -w b -J gated --wrap "echo ran >$T/gated"
	sleep 3
	[ "$(cx ctl squeue -h -n gated -o %T)" = PENDING ]
	[ ! -e "$T/gated" ]
	# conf on a host whose attestation fails offers nothing: refused
	run --separate-stderr env ISOPOD_HOME="$T/store-b" ISOPOD_SYSCONFIG="$T/hostconf" ISOPOD_LIBEXEC="$T/lx-bad" \
		isopod-slurm conf --node b
	[ "$status" -eq 111 ] && [ -z "$output" ] && [[ $stderr == *"refusing: this host requires an attestation"*"digest differs"* ]] || false
	run --separate-stderr env ISOPOD_HOME="$T/store-b" ISOPOD_SYSCONFIG="$T/hostconf" ISOPOD_LIBEXEC="$T/lx-good" \
		isopod-slurm conf --node b
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.attestation == {required: true, path: "/etc/isopod/attestation.json", valid: true}'
	# verifying: our drain is lifted, the job runs
	rb "$T/lx-good"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.drained == false and .resumed == true and .attestation.valid and (has("why") | not) and
		.state_command[1:] == ["update", "NodeName=b", "State=RESUME"]'
	for i in $(seq 1 40); do
		[ -n "$(cx ctl squeue -h -n gated)" ] || break
		sleep 0.5
	done
	[ "$(cat "$T/gated")" = ran ]
	[ "$(state_b)" = "idle|none" ]
	# a node the site drained: verifying does not resume it, failing does
	# not overwrite its reason
	cx ctl scontrol update NodeName=b State=DRAIN Reason=maintenance
	rb "$T/lx-good"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.resumed == false and .state_command == null'
	[ "$(state_b)" = "drained|maintenance" ]
	rb "$T/lx-bad"
	[ "$status" -eq 0 ]
	echo "$output" | jq -e '.drained == true and .state_command == null'
	[[ $stderr == *"node b is drained by someone else"* ]]
	[ "$(state_b)" = "drained|maintenance" ]
	cx ctl scontrol update NodeName=b State=RESUME
	state_b_becomes "idle|none"
}

# The gate between jobs: slurmd runs its HealthCheckProgram every
# HealthCheckInterval whatever the node's state (HealthCheckNodeState=ANY),
# so refresh there notices a host that broke while no job ends.  The site's
# script is the Epilog's, with PATH set (slurmd may give it an empty
# environment) and the node's name from the host name when slurmd sets no
# SLURMD_NODENAME.  The control first: without it, node b stays idle under
# an attestation that fails (the gap it closes).
@test "attestation between jobs: refresh as slurmd's HealthCheckProgram drains node b within 20 s of its attestation failing, no job ending and no refresh by hand (jobs Slurm would give b run on a), and resumes it once it verifies; without it b stays idle" {
	local i
	[ "$(state_b)" = "idle|none" ]
	echo "$T/lx-bad" >"$T/health-lx-b"
	echo "$T/lx-good" >"$T/health-lx-a"
	cat >"$T/health" <<-ZZHC
		#!/bin/sh
		PATH=/usr/sbin:/usr/bin:/sbin:/bin
		n=\${SLURMD_NODENAME:-\$(hostname)}
		echo "\$n \${SLURMD_NODENAME:+env}" >>$T/health.runs
		export ISOPOD_HOME=$T/store-\$n ISOPOD_SYSCONFIG=$T/hostconf ISOPOD_LIBEXEC=\$(cat $T/health-lx-\$n)
		export SLURM_CONF=$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf
		exec $ISOPOD_SRC/bin/isopod-slurm refresh --node "\$n" >>$T/health.log 2>&1
	ZZHC
	chmod 755 "$T/health"
	# the control: no health check configured, nothing notices
	sleep 6
	[ "$(state_b)" = "idle|none" ]
	[ ! -e "$T/health.runs" ]
	sh "$LAB" unslurm "$LAB_NAME"
	# verifying at the start (the lab waits for both nodes idle), then not
	echo "$T/lx-good" >"$T/health-lx-b"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a-site.json" "$T/conf-b.json" "$T/epilog" "$T/health" >/dev/null
	echo "$T/lx-bad" >"$T/health-lx-b"
	for i in $(seq 1 40); do
		[ "$(state_b)" != "drained|isopod: attestation does not verify: ruleset/nftables: digest differs" ] || break
		sleep 0.5
	done
	echo "# runs: $(sort "$T/health.runs" | uniq -c | tr '\n' ' ')" >&3
	[ "$(state_b)" = "drained|isopod: attestation does not verify: ruleset/nftables: digest differs" ]
	grep -q '^a' "$T/health.runs"
	[ "$(cx ctl sinfo -h -N -n a -o '%T')" = idle ]
	# the work goes to the other host: with a weighing more, Slurm's own
	# choice is b (t/95's soft-placement control: "a 0 b 2"), yet the jobs
	# run on a while b is drained
	cx ctl scontrol update NodeName=a Weight=100
	burst 2 isopod_filtered:1 "$T/rec-drained"
	cx ctl scontrol update NodeName=a Weight=1
	echo "# b drained: $(placed "$T/rec-drained")" >&3
	[ "$(placed "$T/rec-drained")" = "a 2 b 0" ]
	# verifying again: the next health check resumes it
	echo "$T/lx-good" >"$T/health-lx-b"
	for i in $(seq 1 40); do
		[ "$(state_b)" != "idle|none" ] || break
		sleep 0.5
	done
	[ "$(state_b)" = "idle|none" ]
}

@test "mutation: node a given 8 filtered GRES for its 4 slots: the same 18 jobs run more than 4 at once there and the slot check FAILS" {
	jq '.slurm_conf |= sub("isopod_filtered:4"; "isopod_filtered:8") | .gres_conf |= sub("isopod_filtered Count=4"; "isopod_filtered Count=8")' \
		"$T/conf-a.json" >"$T/conf-a-lie.json"
	grep -q 'isopod_filtered:8' "$T/conf-a-lie.json"
	sh "$LAB" unslurm "$LAB_NAME"
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a-lie.json" "$T/conf-b.json" >/dev/null
	burst 18 isopod_filtered:1 "$T/rec-lie"
	[ "$(grep -c ' - ' "$T/rec-lie")" -eq 18 ]
	[ "$(maxconc "$T/rec-lie" a)" -gt 4 ]
	run within_slots "$T/rec-lie"
	[ "$status" -eq 1 ]
}
