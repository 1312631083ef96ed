# shellcheck shell=sh
# shellcheck disable=SC2154 # spawned: set by lab.sh's spawn
# t/lab/cluster.sh - the lab's Slurm cluster (issue 16), sourced by lab.sh
# for its verbs (it uses lab.sh's nsx, spawn, await, die, STATE, LAB_DIR):
#
#   lab.sh cluster NAME          three namespaces and munged (root)
#   lab.sh slurm NAME A.json B.json [EPILOG]
#                                slurmctld in NAME-ctl, slurmd "a" in NAME-a and
#                                "b" in NAME-b; A.json and B.json are what
#                                `isopod-slurm conf` printed on each host
#                                (their slurm_conf and gres_conf lines);
#                                EPILOG: slurm.conf's Epilog= (a program
#                                slurmd runs as root after each job; ""
#                                for none)
#   lab.sh slurm NAME A.json B.json EPILOG HEALTH
#                                also HealthCheckProgram=HEALTH, run by
#                                each slurmd every 2 s whatever the node's
#                                state (HealthCheckNodeState=ANY)
#   lab.sh unslurm NAME          stop the daemons and every job (cluster stays)
#   lab.sh cexec NAME H CMD...   run CMD in NAME-H (H: ctl, a, b), SLURM_CONF set
#   lab.sh cregistry NAME        an OCI registry (docker-registry, plain
#                                HTTP) on 192.0.2.20:5000 in a fourth
#                                namespace, NAME-reg, on the cluster's bridge
#                                (where a site's registry would be: a host
#                                of its own); its storage $STATE/registry
#
# Three namespaces joined by a bridge that lives in NAME-ctl, made inside
# them; nothing is linked to the root namespace:
#
#   NAME-ctl  br0 192.0.2.1/24 (TEST-NET-1): slurmctld, host name "ctl"
#   NAME-a    e0 192.0.2.11/24: slurmd -N a, host name "a" (a UTS namespace)
#   NAME-b    e0 192.0.2.12/24: slurmd -N b, host name "b"
#   NAME-reg  e0 192.0.2.20/24: the registry (cregistry only)
#
# One munged (the filesystem's socket $STATE/slurm/munge/sock serves every
# namespace; its own key, never /etc/munge's).  Slurm 22.05 (Debian 12) as
# root, in the foreground, no systemd: ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, CgroupPlugin=cgroup/v1 (slurmd loads the cgroup
# plugin even then, and its autodetection fails on this hybrid hierarchy:
# "No filesystem mounted on /sys/fs/cgroup"), no accounting.  Each node is
# told 8 CPUs (SlurmdParameters=config_overrides) so that CPUs never limit
# concurrency before the GRES does; ISOPOD_LAB_CPUS=N tells it N instead
# (t/97: 1, so that one-CPU jobs spread over both nodes).
# ISOPOD_LAB_TASKPROLOG=PROG: slurm.conf's TaskProlog=PROG, which slurmd
# runs on the node before each job's script; the "export NAME=VALUE" lines
# it prints are the job's environment (a node's own configuration: t/97's
# nodes name their store there, since sbatch --export=NONE carries none of
# the submitter's).  ISOPOD_LAB_TASKCG=1: Slurm puts each job in cgroups
# with its limits: ProctrackType=proctrack/cgroup, TaskPlugin=task/cgroup,
# SelectTypeParameters=CR_CPU_Memory, cgroup.conf ConstrainRAMSpace and
# ConstrainCores (set ISOPOD_LAB_CPUS to the machine's CPUs: a job's CPUs
# become its cpuset); each slurmd runs in a cgroup namespace of its own
# (t/lab/cgns), the hierarchies mounted there, so that its slurm_a/...
# tree is below the lab's own cgroup, not at the host's root; `unslurm`
# and `down` remove those trees.  Every wait is bounded (await: 5 s).

CL_NET=192.0.2
CL_CTL=$CL_NET.1

cl_addr() {
	case $1 in
	ctl) echo "$CL_CTL" ;;
	a) echo "$CL_NET.11" ;;
	b) echo "$CL_NET.12" ;;
	reg) echo "$CL_NET.20" ;;
	*) die "no cluster host '$1': want ctl, a, b or reg" ;;
	esac
}

# cl_host NAME H: netns NAME-H, its e0 (H's address) on NAME-ctl's bridge.
cl_host() {
	ip netns add "$1-$2"
	nsx "$1-$2" ip link set lo up
	# born in the host's netns, its peer moved straight into NAME-ctl
	nsx "$1-$2" ip link add e0 type veth peer name "v$2" netns "$1-ctl"
	nsx "$1-ctl" ip link set "v$2" master br0 up
	nsx "$1-$2" ip addr add "$(cl_addr "$2")/24" dev e0
	nsx "$1-$2" ip link set e0 up
}

cmd_cluster() {
	name=$1
	[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
	command -v munged >/dev/null || die "munge not installed (.ci/setup)"
	if ip netns list | grep -q "^$name-ctl\b"; then
		die "cluster $name exists: lab.sh down $name first"
	fi
	mkdir -p "$STATE/slurm/munge" "$STATE/slurm/etc"
	touch "$STATE/pids" "$STATE/log"
	chmod 700 "$STATE/slurm/munge"
	ip netns add "$name-ctl"
	nsx "$name-ctl" ip link set lo up
	nsx "$name-ctl" ip link add br0 type bridge
	nsx "$name-ctl" ip addr add "$CL_CTL/24" dev br0
	nsx "$name-ctl" ip link set br0 up
	for h in a b; do
		cl_host "$name" "$h"
	done
	for h in a b; do
		await nsx "$name-$h" busybox ping -c1 -W1 "$CL_CTL" || die "cluster $name: $h cannot reach ctl"
	done
	m=$STATE/slurm/munge
	head -c 128 /dev/urandom >"$m/key"
	chmod 400 "$m/key"
	spawn "$name-ctl" munged -F -f --key-file="$m/key" --socket="$m/sock" \
		--pid-file="$m/pid" --seed-file="$m/seed" --log-file="$m/log"
	# shellcheck disable=SC2016 # $1 is the inner shell's
	await sh -c 'echo x | munge -S "$1" | unmunge -S "$1"' sh "$m/sock" ||
		die "cluster $name: munged does not answer on $m/sock"
	echo "cluster $name: ctl $CL_CTL, a $(cl_addr a), b $(cl_addr b), state $STATE/slurm"
}

# slurm.conf: the cluster's own lines, then each host's NodeName line as
# isopod-slurm printed it with the lab's NodeAddr and CPUs put in.
write_conf() {
	s=$STATE/slurm
	types=$(jq -r .gres_types "$2")
	proctrack=linuxproc task=none cr=CR_CPU
	# memory a consumable (CR_CPU_Memory): else a job's --mem is not its
	# allocation and task/cgroup limits it to the node's RAM
	[ "${ISOPOD_LAB_TASKCG-}" != 1 ] || proctrack=cgroup task=cgroup cr=CR_CPU_Memory
	cat >"$s/etc/slurm.conf" <<-EOF
		ClusterName=isopodlab
		SlurmctldHost=ctl($CL_CTL)
		SlurmUser=root
		SlurmdUser=root
		AuthType=auth/munge
		AuthInfo=socket=$s/munge/sock
		CredType=cred/munge
		StateSaveLocation=$s/state/ctl
		SlurmdSpoolDir=$s/state/%n
		SlurmctldPidFile=$s/state/ctl.pid
		SlurmdPidFile=$s/state/%n.pid
		SlurmctldLogFile=$s/log/ctl.log
		SlurmdLogFile=$s/log/%n.log
		ProctrackType=proctrack/$proctrack
		TaskPlugin=task/$task
		JobAcctGatherType=jobacct_gather/none
		AccountingStorageType=accounting_storage/none
		MpiDefault=none
		MailProg=/bin/true
		SelectType=select/cons_tres
		SelectTypeParameters=$cr
		SlurmdParameters=config_overrides
		ReturnToService=2
		SchedulerParameters=sched_interval=1,bf_interval=1
		SlurmctldTimeout=30
		SlurmdTimeout=30
		$types
	EOF
	[ -z "${4-}" ] || echo "Epilog=$4" >>"$s/etc/slurm.conf"
	[ -z "${ISOPOD_LAB_TASKPROLOG-}" ] || echo "TaskProlog=$ISOPOD_LAB_TASKPROLOG" >>"$s/etc/slurm.conf"
	[ -z "${5-}" ] || printf 'HealthCheckProgram=%s\nHealthCheckInterval=2\nHealthCheckNodeState=ANY\n' "$5" \
		>>"$s/etc/slurm.conf"
	: >"$s/etc/gres.conf"
	for h in a b; do
		[ "$h" = a ] && f=$2 || f=$3
		[ "$(jq -r .node "$f")" = "$h" ] || die "$f: not host $h's conf (its node is not '$h')"
		jq -r .slurm_conf "$f" | sed "s/^NodeName=$h /NodeName=$h NodeAddr=$(cl_addr "$h") CPUs=${ISOPOD_LAB_CPUS:-8} RealMemory=${ISOPOD_LAB_MEM_MIB:-4096} State=UNKNOWN /" \
			>>"$s/etc/slurm.conf"
		jq -j .gres_conf "$f" >>"$s/etc/gres.conf"
	done
	echo "PartitionName=lab Nodes=a,b Default=YES MaxTime=10 State=UP" >>"$s/etc/slurm.conf"
	echo "CgroupPlugin=cgroup/v1" >"$s/etc/cgroup.conf"
	[ "$task" = none ] || printf 'ConstrainRAMSpace=yes\nConstrainCores=yes\n' >>"$s/etc/cgroup.conf"
}

# Both nodes idle, as sinfo says (≤ 20 s: slurmd registers within a few).
nodes_idle() {
	nsx "$1-ctl" env SLURM_CONF="$STATE/slurm/etc/slurm.conf" sinfo -h -N -o '%N %T' |
		awk '$2 == "idle" { n++ } END { exit n != 2 }'
}

cmd_slurm() {
	name=$1
	case $# in 3 | 4 | 5) ;; *) die "usage: lab.sh slurm NAME A.json B.json [EPILOG [HEALTH]]" ;; esac
	ip netns list | grep -q "^$name-ctl\b" || die "no cluster $name: lab.sh cluster $name first"
	[ ! -s "$STATE/slurm/daemons" ] || die "slurm already runs in $name: lab.sh unslurm $name first"
	s=$STATE/slurm
	rm -rf "$s/state" "$s/log"
	mkdir -p "$s/state/ctl" "$s/state/a" "$s/state/b" "$s/log"
	write_conf "$@"
	export SLURM_CONF="$s/etc/slurm.conf"
	: >"$s/daemons"
	spawn "$name-ctl" unshare --uts sh -c 'hostname ctl && exec slurmctld -D -i'
	echo "$spawned" >>"$s/daemons"
	await nsx "$name-ctl" scontrol ping || die "cluster $name: slurmctld does not answer (see $s/log)"
	for h in a b; do
		if [ "${ISOPOD_LAB_TASKCG-}" = 1 ]; then
			spawn "$name-$h" sh "$LAB_DIR/cgns" "$s/cgroups" "lab-$name-$h" \
				unshare --uts sh -c "hostname $h && exec slurmd -D -N $h"
		else
			spawn "$name-$h" unshare --uts sh -c "hostname $h && exec slurmd -D -N $h"
		fi
		echo "$spawned" >>"$s/daemons"
	done
	i=0
	until nodes_idle "$name"; do
		i=$((i + 1))
		[ "$i" -le 40 ] || die "cluster $name: nodes not idle in 20 s: $(nsx "$name-ctl" sinfo -N 2>&1)"
		sleep 0.5
	done
	echo "slurm up in $name: SLURM_CONF=$SLURM_CONF"
}

# Every process in the cluster's namespaces but munged: the daemons and
# whatever their jobs left (slurmstepd, the job scripts), by pid.
kill_ns_pids() {
	for ns in "$@"; do
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			[ "$pid" = "$(cat "$STATE/slurm/munge/pid" 2>/dev/null)" ] || kill "$pid" 2>/dev/null || :
		done
	done
}

# Wait (<= 5 s) until no process but munged is left in netns NS (a
# process that is gone has no netns to list, even while it is a zombie).
# Whatever is still there after 3 s is sent SIGKILL: a slurmstepd whose
# job was still running blocks SIGTERM and retries its report to the
# daemons just killed, for minutes (with task/cgroup its job's cgroups
# stay as long).  1 when some are left.
ns_empty() {
	i=0
	mpid=$(cat "$STATE/slurm/munge/pid" 2>/dev/null) || mpid=
	while left=$(ip netns pids "$1" 2>/dev/null | grep -vx "${mpid:-none}") && [ -n "$left" ]; do
		i=$((i + 1))
		[ "$i" -le 50 ] || return 1
		# shellcheck disable=SC2086 # a list of pids
		[ "$i" -ne 30 ] || kill -KILL $left 2>/dev/null || :
		sleep 0.1
	done
}

# Remove the cgroup trees t/lab/cgns made for the slurmds (listed in
# $STATE/slurm/cgroups), deepest first, once their processes are gone
# (<= 5 s: an exiting job may still be counted).  1 when some are left.
rm_cgroups() {
	f=$STATE/slurm/cgroups
	[ -s "$f" ] || return 0
	i=0
	while :; do
		left=
		while read -r d; do
			[ ! -d "$d" ] || find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || left=$d
		done <"$f"
		[ -n "$left" ] || break
		i=$((i + 1))
		[ "$i" -le 50 ] || return 1
		sleep 0.1
	done
	: >"$f"
}

cmd_unslurm() {
	name=$1
	kill_ns_pids "$name-ctl" "$name-a" "$name-b"
	for ns in "$name-ctl" "$name-a" "$name-b"; do
		ns_empty "$ns" || die "cluster $name: processes left in $ns after 5 s"
	done
	rm_cgroups || die "cluster $name: cgroups left: $(cat "$STATE/slurm/cgroups")"
	: >"$STATE/slurm/daemons"
}

cmd_cexec() {
	name=$1 h=$2
	shift 2
	cl_addr "$h" >/dev/null
	nsx "$name-$h" env SLURM_CONF="$STATE/slurm/etc/slurm.conf" "$@"
}

cmd_cregistry() {
	name=$1
	ip netns list | grep -q "^$name-ctl\b" || die "no cluster $name: lab.sh cluster $name first"
	cl_host "$name" reg
	registry_serve "$name-reg" "$(cl_addr reg)" "$name-a" "cluster $name"
}
