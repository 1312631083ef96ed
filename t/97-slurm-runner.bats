#!/usr/bin/env bats
# shellcheck disable=SC2016 # single quotes: JSON and code for jq
# shellcheck disable=SC1010 # "done" is a state directory here, an argument
# isopod-runner --backend slurm (issue 16): the runner in the controller's
# namespace of the lab's cluster (t/lab/cluster.sh) hands each job to Slurm
# (sbatch of `isopod run --json-only ...`, the argv the local backend runs);
# the jobs are real `isopod run --net none` VMs on node a or b, each in its
# own network namespace; stdout and stderr come back through the spool,
# which the "hosts" share with the runner (one machine).  Each node is told
# 1 CPU (ISOPOD_LAB_CPUS), so one-CPU jobs spread over both.  sbatch
# carries none of the runner's environment (--export=NONE): the nodes find
# their stores through their own configuration, slurm.conf's TaskProlog
# (each node its own: a's the file's, b's another with the same kernel and
# base).  No
# attestation here: under Slurm it is each node's (t/95).  Boots VMs: run
# under the VM test lock.

load helpers

setup_file() {
	need_slurm
	isopod_setup_file --images
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh" LAB_NAME="t97s$$" ISOPOD_LAB_CPUS=1
	export ISOPOD_LAB_STATE="$BATS_FILE_TMPDIR/lab" T="$BATS_FILE_TMPDIR/t"
	mkdir -p "$T/jobenv"
	# node b's own store (a short path: unix sockets), the same kernel and
	# base as a's: hard links of the file's registered images (immutable)
	STORE_B=$(mktemp -d /tmp/isopod-t.97-b.XXXXXX)
	export STORE_B
	cp -al "$ISOPOD_HOME/kernels" "$ISOPOD_HOME/images" "$STORE_B/"
	# the nodes' own configuration of their jobs (slurm.conf's TaskProlog:
	# sbatch --export=NONE carries nothing of the submitter's environment):
	# the node's own store, no host or user config, and the job's
	# environment as the node gave it, in $T/jobenv/<job id>
	cat >"$T/taskprolog" <<-EOF
		#!/bin/sh
		env >"$T/jobenv/\$SLURM_JOB_ID"
		case \$SLURMD_NODENAME in
		a) echo export ISOPOD_HOME="$ISOPOD_HOME" ;;
		b) echo export ISOPOD_HOME="$STORE_B" ;;
		esac
		echo export ISOPOD_SYSCONFIG=/dev/null
		echo export ISOPOD_CONFIG=/dev/null
		echo export ISOPOD_NET=none
		echo export ISOPOD_GC_INTERVAL=off
	EOF
	chmod 755 "$T/taskprolog"
	export ISOPOD_LAB_TASKPROLOG="$T/taskprolog"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" cluster "$LAB_NAME" >/dev/null
	for h in a b; do
		ip netns exec "$LAB_NAME-$h" isopod-slurm conf --node "$h" >"$T/conf-$h.json"
	done
	sh "$LAB" slurm "$LAB_NAME" "$T/conf-a.json" "$T/conf-b.json" >/dev/null
	export SPOOL="$T/spool" SPOOL2="$T/spool2"
	mkdir -p "$SPOOL/queue"
	# the runner, in the controller's namespace ($RUNNER: its pid: env execs it)
	ip netns exec "$LAB_NAME-ctl" env SLURM_CONF="$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf" \
		"$ISOPOD_SRC/bin/isopod-runner" --backend slurm --spool "$SPOOL" --workers 4 \
		</dev/null >"$T/runner.out" 2>"$T/runner.err" 3>&- &
	echo $! >"$T/runner.pid"
	wait_until 10 jq -e '.state == "running"' "$SPOOL/status.json"
}

# stop_runner FILE: the runner whose pid FILE holds, SIGTERM then SIGKILL.
stop_runner() {
	local pid i
	[ -s "$1" ] || return 0
	pid=$(cat "$1")
	kill "$pid" 2>/dev/null || :
	for i in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
	kill -KILL "$pid" 2>/dev/null || :
	rm -f "$1"
}

teardown_file() {
	stop_runner "${T-}/runner2.pid"
	stop_runner "${T-}/runner.pid"
	local st=0
	[ -z "${LAB-}" ] || sh "$LAB" down "$LAB_NAME"
	[ -z "${STORE_B-}" ] || ISOPOD_HOME=$STORE_B isopod_teardown_file || st=1
	isopod_teardown_file || st=1
	return "$st"
}

# running_vms: the ids of the VMs running in either node's store.
running_vms() {
	local h
	for h in "$ISOPOD_HOME" "$STORE_B"; do
		ISOPOD_HOME=$h isopod vm ls | jq -r 'select(.running) | .id'
	done
}

teardown() {
	[ -n "${BATS_TEST_COMPLETED-}" ] || sed 's/^/# runner: /' "$T/runner.err" | tail -n 20 >&3
	[ -n "${BATS_TEST_COMPLETED-}" ] || [ ! -f "$T/runner2.err" ] || sed 's/^/# runner2: /' "$T/runner2.err" | tail -n 20 >&3
	# a test that drained the nodes gives them back, whatever happened
	[ ! -e "$T/drained" ] || { cx ctl scontrol update NodeName=a,b State=RESUME || :; rm -f "$T/drained"; }
}

# runner2 ARGS...: a second runner on $SPOOL2 in the controller's
# namespace, with a scancel in front of Slurm's that refuses (exit 1) while
# $T/refuse-scancel exists: settle's scancel failing for real.
runner2() {
	stop_runner "$T/runner2.pid" # one a test left running (it failed before stopping it)
	mkdir -p "$SPOOL2/queue" "$T/fakebin"
	printf '#!/bin/sh\nif [ -e %s/refuse-scancel ]; then echo "scancel: error: stand-in refuses job $2" >&2; exit 1; fi\nexec %s "$@"\n' \
		"$T" "$(command -v scancel)" >"$T/fakebin/scancel"
	chmod +x "$T/fakebin/scancel"
	ip netns exec "$LAB_NAME-ctl" env SLURM_CONF="$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf" \
		PATH="$T/fakebin:$PATH" "$ISOPOD_SRC/bin/isopod-runner" --backend slurm --spool "$SPOOL2" --workers 2 "$@" \
		</dev/null >"$T/runner2.out" 2>"$T/runner2.err" 3>&- &
	echo $! >"$T/runner2.pid"
	wait_until 10 jq -e '.state == "running"' "$SPOOL2/status.json"
}

cx() { sh "$LAB" cexec "$LAB_NAME" "$@"; }

wait_until() {
	local end=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$end" ]; then
			echo "wait_until: still not true: $*" >&2
			return 1
		fi
		sleep 0.5
	done
}

# job NAME JSON: written beside the queue, then renamed in (as writers must).
job() {
	printf '%s\n' "$2" >"$SPOOL/.$1.tmp"
	mv "$SPOOL/.$1.tmp" "$SPOOL/queue/$1.json"
}

# ended NAME: the job's directory in a final state, its path on stdout.
ended() {
	local s
	for s in done failed interrupted; do
		[ ! -d "$SPOOL/$s/$1" ] || { echo "$SPOOL/$s/$1"; return 0; }
	done
	return 1
}

@test "status: backend slurm, no local attestation (each node's); --backend other than local or slurm: 100" {
	jq -e '.backend == "slurm" and .attestation == null and .state == "running"' "$SPOOL/status.json"
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-runner" --spool "$T/other" --backend pbs
	[ "$status" -eq 100 ]
	[ -z "$output" ]
}

@test "4 jobs on the two-host cluster: done, each result the shape of a local run's plus where it ran (job id, node), on both nodes" {
	# the local shape: the front end's own result, which the local backend writes as is
	isopod run --json-only --net none --timeout-s 60 -- echo hi >"$T/local.json"
	local i t0=$SECONDS
	for i in 1 2 3 4; do job "ok$i" '{"argv": ["echo", "hi"], "net": "none", "timeout_s": 60}'; done
	wait_until 240 eval '[ "$(ls "$SPOOL/done" | wc -l)" -eq 4 ]'
	echo "# 4 jobs queued to all done: $((SECONDS - t0)) s; total_ms of each run: $(jq -r .timings.total_ms "$SPOOL"/done/ok*/result.json | tr '\n' ' ')" >&3
	for i in 1 2 3 4; do
		d=$SPOOL/done/ok$i
		jq -e '.ok == true and .exit_code == 0 and .stdout == "hi\n" and .slurm.state == "COMPLETED"
			and (.slurm.node | IN("a", "b")) and (.slurm.job_id | test("^[0-9]+$")) and .slurm.exit == 0' \
			"$d/result.json"
		# the same keys as the local result, and "slurm"
		jq -e --slurpfile l "$T/local.json" '(keys - ["slurm"]) == ($l[0] | keys)' "$d/result.json"
		jq -e --slurpfile r "$d/result.json" '.state == "done" and .exit == 0 and .slurm_job == $r[0].slurm.job_id' \
			"$d/state.json"
		# the job's stderr came back too (isopod run's diagnostics)
		[ -f "$d/stderr.log" ]
	done
	local nodes
	nodes=$(jq -r .slurm.node "$SPOOL"/done/ok*/result.json | sort -u | tr '\n' ' ')
	echo "# nodes: $(jq -r .slurm.node "$SPOOL"/done/ok*/result.json | sort | uniq -c | tr '\n' ' ')" >&3
	[ "$nodes" = "a b " ]
}

@test "a job that fails inside: its real exit, as the local run gives it" {
	local rc=0
	isopod run --json-only --net none --timeout-s 60 -- sh -c 'exit 7' >"$T/local7.json" || rc=$?
	job fail7 '{"argv": ["sh", "-c", "exit 7"], "net": "none", "timeout_s": 60}'
	wait_until 120 ended fail7
	d=$(ended fail7)
	echo "# local exit $rc, runner: $(jq -c '{state, exit}' "$d/state.json")" >&3
	jq -e '.exit_code == 7 and .slurm.exit == '"$rc" "$d/result.json"
	jq -e '.exit == '"$rc" "$d/state.json"
	jq -e --slurpfile l "$T/local7.json" '(keys - ["slurm"]) == ($l[0] | keys) and .ok == $l[0].ok' "$d/result.json"
}

@test "argv words ':' and '-n' (sbatch drops every ':' word of its argv): the same command as locally" {
	isopod run --json-only --net none --timeout-s 60 -- printf '[%s]' : -n '' 'a b' : >"$T/localc.json"
	job colon '{"argv": ["printf", "[%s]", ":", "-n", "", "a b", ":"], "net": "none", "timeout_s": 60}'
	wait_until 120 ended colon
	d=$(ended colon)
	# what scontrol says of an ended job (its fields' order: lib/slurmjob.c cuts before Command=)
	cx ctl scontrol -o show job "$(jq -r .slurm.job_id "$d/result.json")" >"$T/colon.scontrol"
	echo "# $(cut -c1-1500 "$T/colon.scontrol")" >&3
	# submitted --no-requeue: a node failure or preemption never runs it again
	grep -q ' Requeue=0 Restarts=0 ' "$T/colon.scontrol"
	jq -e '.stdout == "[:][-n][][a b][:]"' "$T/localc.json"
	jq -e --slurpfile l "$T/localc.json" '.ok == true and .stdout == $l[0].stdout' "$d/result.json"
}

@test "a job Slurm cancels (scancel): failed, interrupted, CANCELLED on its node; never a success; its VM stopped" {
	job long '{"argv": ["sleep", "120"], "net": "none", "timeout_s": 200}'
	wait_until 60 jq -e '.slurm_job' "$SPOOL/running/long/state.json"
	id=$(jq -r .slurm_job "$SPOOL/running/long/state.json")
	# running on its node, its VM up (the guest's sleep started)
	wait_until 60 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING'
	wait_until 60 eval '[ -n "$(running_vms)" ]'
	cx ctl scancel "$id"
	wait_until 90 ended long
	d=$(ended long)
	echo "# $(jq -c '{error, error_kind, slurm}' "$d/result.json")" >&3
	[ "$d" = "$SPOOL/failed/long" ]
	jq -e '.ok == false and .error_kind == "interrupted" and .slurm.state == "CANCELLED"
		and (.slurm.node | IN("a", "b")) and (.error | test("CANCELLED"))' "$d/result.json"
	jq -e '.state == "failed" and .exit != 0' "$d/state.json"
	wait_until 60 eval '[ -z "$(running_vms)" ]'
}

@test "a job no node can take (a filtered slot: none here): failed at once with sbatch's words, no Slurm job" {
	job nofit '{"argv": ["true"], "net": "filtered"}'
	wait_until 30 ended nofit
	d=$(ended nofit)
	[ "$d" = "$SPOOL/failed/nofit" ]
	jq -e '.ok == false and .error_kind == "infra" and (.error | test("sbatch exited")) and (has("slurm") | not)' \
		"$d/result.json"
}

@test "the runner's environment never reaches the job (sbatch --export=NONE): with ISOPOD_JAIL=0 and a test hook in it, the node's run is jailed and neither is in the job's environment" {
	ISOPOD_JAIL=0 ISOPOD_TEST_T97=leak runner2
	printf '%s\n' '{"argv": ["true"], "net": "none", "timeout_s": 60}' >"$SPOOL2/.e.tmp"
	mv "$SPOOL2/.e.tmp" "$SPOOL2/queue/envleak.json"
	wait_until 120 eval '[ -d "$SPOOL2/done/envleak" ] || [ -d "$SPOOL2/failed/envleak" ]'
	d=$SPOOL2/done/envleak
	id=$(jq -r .slurm.job_id "$d/result.json")
	echo "# $(jq -c '{ok, jail: {enabled: .jail.enabled, why: .jail.why}}' "$d/result.json"); the job's ISOPOD_*: $(grep '^ISOPOD_' "$T/jobenv/$id" | tr '\n' ' ')" >&3
	jq -e '.ok == true and .jail.enabled == true' "$d/result.json"
	# the job's environment as the node gave it (TaskProlog's record)
	grep -q '^SLURM_JOB_ID=' "$T/jobenv/$id"
	! grep -q '^ISOPOD_JAIL=\|^ISOPOD_TEST_' "$T/jobenv/$id" || false
	stop_runner "$T/runner2.pid"
}

# sbatch, scancel and scontrol read options from the environment (their
# man pages' ENVIRONMENT VARIABLES); the runner's own must not shape the
# job or the calls (lib/slurmjob.c sjob_env): SLURM_CONF alone goes on.
@test "Slurm's option variables in the runner's environment (SBATCH_PARTITION, SBATCH_TIMELIMIT, SCANCEL_STATE, SLURM_*) shape neither the job nor its cancel" {
	SBATCH_PARTITION=nonexistent SBATCH_TIMELIMIT=1 SBATCH_EXPORT=ALL SCANCEL_STATE=PENDING \
		SCONTROL_FEDERATION=1 SLURM_ISOPOD_T97=leak runner2
	printf '%s\n' '{"argv": ["echo", "hi"], "net": "none"}' >"$SPOOL2/.o.tmp"
	mv "$SPOOL2/.o.tmp" "$SPOOL2/queue/optenv.json"
	printf '%s\n' '{"argv": ["sleep", "120"], "net": "none", "timeout_s": 200}' >"$SPOOL2/.c.tmp"
	mv "$SPOOL2/.c.tmp" "$SPOOL2/queue/optcancel.json"
	wait_until 120 eval '[ -d "$SPOOL2/done/optenv" ] || [ -d "$SPOOL2/failed/optenv" ]'
	[ ! -d "$SPOOL2/failed/optenv" ] || { jq -c . "$SPOOL2/failed/optenv/result.json"; false; }
	d=$SPOOL2/done/optenv
	id=$(jq -r .slurm.job_id "$d/result.json")
	cx ctl scontrol -o show job "$id" >"$T/optenv.scontrol"
	echo "# $(grep -o 'Partition=[^ ]*\|TimeLimit=[^ ]*' "$T/optenv.scontrol" | tr '\n' ' ')" >&3
	jq -e '.ok == true and .stdout == "hi\n"' "$d/result.json"
	# the lab's partition and its MaxTime (no timeout_s: no --time), not the runner's variables'
	grep -q ' Partition=lab ' "$T/optenv.scontrol"
	grep -q ' TimeLimit=00:10:00 ' "$T/optenv.scontrol"
	# --export=NONE still passes the submitter's SLURM_*: not the runner's
	! grep -q '^SLURM_ISOPOD_T97=\|^SBATCH_' "$T/jobenv/$id" || false
	# the worker gone mid-job: the runner's scancel takes the running job (SCANCEL_STATE=PENDING would not)
	wait_until 60 jq -e '.slurm_job' "$SPOOL2/running/optcancel/state.json"
	id=$(jq -r .slurm_job "$SPOOL2/running/optcancel/state.json")
	wait_until 60 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING'
	kill -KILL "$(jq -r .worker_pid "$SPOOL2/running/optcancel/state.json")"
	wait_until 30 eval '[ -d "$SPOOL2/interrupted/optcancel" ]'
	wait_until 30 eval '! cx ctl squeue -h -j "$id" -o %T 2>/dev/null | grep -qx "RUNNING\|PENDING\|COMPLETING"'
	stop_runner "$T/runner2.pid"
}

@test "--queue-timeout-s: a job that cannot start (both nodes drained) is cancelled in the queue: failed, queue_timeout, never run" {
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-runner" --spool "$T/other" --backend slurm --queue-timeout-s 0
	[ "$status" -eq 100 ]
	touch "$T/drained"
	cx ctl scontrol update NodeName=a,b State=DRAIN Reason=t97-hold
	runner2 --queue-timeout-s 5
	printf '%s\n' '{"argv": ["echo", "hi"], "net": "none", "timeout_s": 60}' >"$SPOOL2/.q.tmp"
	mv "$SPOOL2/.q.tmp" "$SPOOL2/queue/qwait.json"
	wait_until 60 eval '[ -d "$SPOOL2/failed/qwait" ]'
	d=$SPOOL2/failed/qwait
	echo "# $(jq -c '{error, error_kind, slurm}' "$d/result.json")" >&3
	jq -e '.ok == false and .error_kind == "queue_timeout" and (.error | test("queue timeout of 5 s"))
		and .slurm.state == "CANCELLED" and .slurm.node == null and .slurm.queued_s >= 5 and .slurm.queued_s < 30' \
		"$d/result.json"
	jq -e '.state == "failed"' "$d/state.json"
	[ ! -s "$d/stdout" ]
	cx ctl scontrol update NodeName=a,b State=RESUME
	rm -f "$T/drained"
	stop_runner "$T/runner2.pid"
}

@test "its worker SIGKILLed while scancel fails: settled failed (infra, naming the job and scancel's words), never interrupted; the Slurm job runs on" {
	runner2
	printf '%s\n' '{"argv": ["sleep", "120"], "net": "none", "timeout_s": 200}' >"$SPOOL2/.n.tmp"
	mv "$SPOOL2/.n.tmp" "$SPOOL2/queue/nocancel.json"
	wait_until 60 jq -e '.slurm_job' "$SPOOL2/running/nocancel/state.json"
	id=$(jq -r .slurm_job "$SPOOL2/running/nocancel/state.json")
	wait_until 60 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING'
	# and launched: squeue says RUNNING while slurmstepd still sets the job
	# up, and a settle that moves the job's directory before it has opened
	# its stdout there fails the launch (JobLaunchFailure: a CI run, and 1
	# of 3 here); the TaskProlog's file is written once the task is set up
	wait_until 60 eval '[ -s "$T/jobenv/$id" ]'
	touch "$T/refuse-scancel"
	kill -KILL "$(jq -r .worker_pid "$SPOOL2/running/nocancel/state.json")"
	wait_until 30 eval '[ -d "$SPOOL2/failed/nocancel" ] || [ -d "$SPOOL2/interrupted/nocancel" ]'
	d=$SPOOL2/failed/nocancel
	echo "# $(jq -c '{error, error_kind}' "$d/result.json")" >&3
	jq -e --arg id "$id" '.ok == false and .error_kind == "infra" and (.error | contains("Slurm job " + $id))
		and (.error | contains("stand-in refuses job " + $id)) and (.error | contains("may still be running"))' "$d/result.json"
	jq -e '.state == "failed"' "$d/state.json"
	# the runner did not stop it, and said so: Slurm still runs it (a few
	# tries: squeue's call to a loaded controller can time out, and an
	# ended job never runs again; stop 30's rehearsal failed here once)
	wait_until 10 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING' ||
		{ cx ctl scontrol -o show job "$id"; false; }
	rm -f "$T/refuse-scancel"
	cx ctl scancel "$id"
	wait_until 60 eval '! cx ctl squeue -h -j "$id" -o %T 2>/dev/null | grep -qx "RUNNING\|PENDING\|COMPLETING"'
	wait_until 60 eval '[ -z "$(running_vms)" ]'
	stop_runner "$T/runner2.pid"
}

# shellcheck disable=SC2154 # $stderr is set by bats' run
# mcp ARGS_JSON_TAIL SCENARIO [JSON]: the SDK client (t/mcp/client.mjs, as
# t/90 drives it) against isopod-mcp --backend slurm in the controller's
# namespace (ip netns exec execs it: the server is the client's child); its
# one-line JSON in $output.
mcp() {
	local extra=$1
	shift
	MCP_SERVER=ip MCP_ARGS="[\"netns\",\"exec\",\"$LAB_NAME-ctl\",\"env\",\"SLURM_CONF=$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf\",\"$ISOPOD_SRC/bin/isopod-mcp\",\"--io-root\",\"$T\"$extra]" \
		run --separate-stderr node "$ISOPOD_SRC/t/mcp/client.mjs" "$@"
	[ "$status" -eq 0 ] || { echo "$stderr"; return 1; }
}
# the server's arguments for --backend slurm (its job directories in $T/mcpjobs)
sl() { printf ',"--backend","slurm","--slurm-dir","%s/mcpjobs"' "$T"; }

# Slurm's jobs of isopod-mcp's calls (isopod-slurm run: isopod-run.XXXXXX) not ended
mcp_jobs() { cx ctl squeue -h -o '%j %i %T' | grep '^isopod-run\.' | grep -v ' CANCELLED$\| COMPLETED$\| FAILED$' || :; }

@test "mcp --backend slurm: sandbox_run on a node: the local result's keys and 'slurm' (job id, node), the command's stdout and stdin, exit 7 is 7" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	local args='{"name":"sandbox_run","args":{"argv":["sh","-c","echo hi; cat; exit 7"],"stdin":"fed\n","net":"none","timeout_s":60}}'
	MCP_SERVER= MCP_ARGS="[\"--io-root\",\"$T\"]" run --separate-stderr node "$ISOPOD_SRC/t/mcp/client.mjs" call "$args"
	[ "$status" -eq 0 ]
	echo "$output" | jq -c .result.structuredContent >"$T/mcp-local.json"
	mcp "$(sl)" call "$args"
	echo "$output" | jq -c .result.structuredContent >"$T/mcp-slurm.json"
	echo "# $(jq -c '{ok, exit_code, stdout, slurm}' "$T/mcp-slurm.json")" >&3
	echo "$output" | jq -e '.result.isError == false'
	jq -e '.ok == true and .exit_code == 7 and .stdout == "hi\nfed\n"' "$T/mcp-local.json"
	jq -e '.ok == true and .exit_code == 7 and .stdout == "hi\nfed\n" and .slurm.state == "FAILED" and .slurm.exit == 7
		and (.slurm.node | IN("a", "b")) and (.slurm.job_id | test("^[0-9]+$"))' "$T/mcp-slurm.json"
	jq -e --slurpfile l "$T/mcp-local.json" '(keys - ["slurm"]) == ($l[0] | keys)' "$T/mcp-slurm.json"
	# the job's directory went with its success
	[ -z "$(ls -A "$T/mcpjobs")" ]
}

# --max-concurrent bounds the calls in flight under Slurm too (each is a
# Slurm job): a site's cap on one client's share of the cluster.
@test "mcp --backend slurm --max-concurrent 1: the second call's job runs after the first's (two nodes free: they would overlap)" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	mcp "$(sl),\"--max-concurrent\",\"1\"" concurrent \
		'{"args":{"argv":["sh","-c","date +%s; sleep 4; date +%s"],"net":"none","timeout_s":60}}'
	echo "# $(echo "$output" | jq -c '[.calls[].result.structuredContent | {stdout, node: .slurm.node}]')" >&3
	echo "$output" | jq -e '[.calls[].result.structuredContent | .ok and .exit_code == 0] == [true, true]'
	# [start, end] of each command by the guests' clocks: one after the other
	echo "$output" | jq -e '[.calls[].result.structuredContent.stdout | split("\n")[:2] | map(tonumber)] as [$a, $b] |
		$a[1] <= $b[0] or $b[1] <= $a[0]'
}

@test "mcp --backend slurm: a call without net asks Slurm for the default's slot (filtered: none here, sbatch refuses, nothing runs); the default size is what Slurm is asked (--mem)" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	# ISOPOD_NET empty, no configuration: the front end's default, filtered
	ISOPOD_NET='' mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"timeout_s":60}}'
	echo "# $(echo "$output" | jq -c '.result.structuredContent | {ok, error_kind, error}')" >&3
	echo "$output" | jq -e '.result.structuredContent | .ok == false and (.error | test("sbatch exited")) and (has("slurm") | not)'
	# the environment's memory (ISOPOD_NET=none here, helpers.bash): asked of Slurm, run with it
	ISOPOD_MEM_MIB=320 mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"timeout_s":60}}'
	echo "$output" | jq -e '.result.structuredContent | .ok == true and .exit_code == 0'
	id=$(echo "$output" | jq -r .result.structuredContent.slurm.job_id)
	cx ctl scontrol -o show job "$id" | grep -q 'MinMemoryNode=576M' # 320 + QEMU's fixed 256
	[ -z "$(ls -A "$T/mcpjobs")" ]
}

@test "mcp --backend slurm: a cancelled call (notifications/cancelled) and a server whose client is gone leave no job in squeue, no VM running" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	local args='{"args":{"argv":["sleep","120"],"net":"none","timeout_s":200}}'
	mcp "$(sl)" cancel "$args"
	echo "# cancel: $(echo "$output" | jq -c '{running_before, running_after, stop_ms}')" >&3
	echo "$output" | jq -e '(.running_before | length) == 1 and (.aborted.message | contains("test cancel"))'
	wait_until 30 eval '[ -z "$(mcp_jobs)" ]'
	# isopod-slurm run, back once scancel took, removed the job's directory itself
	wait_until 15 eval '[ -z "$(ls -A "$T/mcpjobs")" ]'
	wait_until 60 eval '[ -z "$(running_vms)" ]'
	mcp "$(sl)" close_running "$args"
	echo "# client gone: $(echo "$output" | jq -c '{running_before, close_ms}')" >&3
	echo "$output" | jq -e '(.running_before | length) == 1'
	wait_until 30 eval '[ -z "$(mcp_jobs)" ]'
	wait_until 60 eval '[ -z "$(running_vms)" ]'
	# isopod-slurm run, back once scancel took, removed its job's directory
	wait_until 15 eval '[ -z "$(ls -A "$T/mcpjobs")" ]' 
}

@test "mcp --backend slurm: the server's ISOPOD_JAIL=0 and a test hook never reach the job: jailed on its node, neither in the job's environment" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	ISOPOD_JAIL=0 ISOPOD_TEST_T97=leak mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"net":"none","timeout_s":60}}'
	echo "$output" | jq -c .result.structuredContent >"$T/mcp-env.json"
	id=$(jq -r .slurm.job_id "$T/mcp-env.json")
	echo "# $(jq -c '{ok, jail: {enabled: .jail.enabled, why: .jail.why}}' "$T/mcp-env.json"); the job's ISOPOD_*: $(grep '^ISOPOD_' "$T/jobenv/$id" | tr '\n' ' ')" >&3
	jq -e '.ok == true and .jail.enabled == true' "$T/mcp-env.json"
	grep -q '^SLURM_JOB_ID=' "$T/jobenv/$id"
	! grep -q '^ISOPOD_JAIL=\|^ISOPOD_TEST_' "$T/jobenv/$id" || false
}

@test "mcp --backend slurm: a budget past while Slurm still queues the job (nodes drained): cancelled, timeout as a local run past its deadline (isopod-slurm run: 99), nothing left in squeue" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	local pid rc=0 t0=$SECONDS
	touch "$T/drained"
	cx ctl scontrol update NodeName=a,b State=DRAIN Reason=t97-budget
	# isopod-slurm run as isopod-mcp runs it (its budget: timeout_s + 30 s
	# from the submission), for its exit status; the server's call beside it
	ip netns exec "$LAB_NAME-ctl" env SLURM_CONF="$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf" \
		"$ISOPOD_SRC/bin/isopod-slurm" run --dir "$T/budjobs" --net none --timeout-s 1 -- \
		"$ISOPOD_SRC/sh/isopod" run --json-only --net none --timeout-s 1 -- true >"$T/budget.json" 2>"$T/budget.err" &
	pid=$!
	mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"net":"none","timeout_s":1}}'
	wait "$pid" || rc=$?
	echo "# after $((SECONDS - t0)) s: isopod-slurm run exit $rc $(jq -c '{error_kind, error, slurm}' "$T/budget.json"); mcp: $(echo "$output" | jq -c '.result | {isError, kind: .structuredContent.error_kind}')" >&3
	[ "$rc" -eq 99 ]
	jq -e '.ok == false and .error_kind == "timeout" and (.error | test("outlived its budget")) and .slurm.state == "CANCELLED"' "$T/budget.json"
	echo "$output" | jq -e '.result.isError == true and (.result.structuredContent | .ok == false and .error_kind == "timeout" and .slurm.state == "CANCELLED")'
	wait_until 30 eval '[ -z "$(mcp_jobs)" ]'
	cx ctl scontrol update NodeName=a,b State=RESUME
	rm -f "$T/drained"
}

@test "mcp --backend slurm: a call with a progressToken hears Slurm's state of its job: PENDING with the reason (nodes drained), then RUNNING on its node, one notification a change" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	local pid
	touch "$T/drained"
	cx ctl scontrol update NodeName=a,b State=DRAIN Reason=t97-progress
	# sleep 12: RUNNING lasts past the longest gap between polls (10 s)
	(mcp "$(sl)" progress '{"args":{"argv":["sleep","12"],"net":"none","timeout_s":60}}' && echo "$output" >"$T/progress.json") &
	pid=$!
	# queued, a few polls seen (the gap doubles while the state stays), then free
	wait_until 30 eval '[ -n "$(mcp_jobs)" ]'
	sleep 4
	cx ctl scontrol update NodeName=a,b State=RESUME
	rm -f "$T/drained"
	wait "$pid"
	echo "# $(jq -c '[.heard[].message]' "$T/progress.json")" >&3
	jq -e '.result.structuredContent | .ok == true and .exit_code == 0' "$T/progress.json"
	jq -e '.result.structuredContent.slurm as $s | [.heard[].message] as $m | ($m | length) <= 8 and $m[0] == "started" and
		($m[1:] | all(startswith("Slurm job \($s.job_id): "))) and
		($m | map(test(": PENDING \\(.+\\)$")) | index(true)) as $p | ($m | index("Slurm job \($s.job_id): RUNNING on \($s.node)")) as $r |
		$p != null and $r != null and $p < $r and
		([range(1; $m | length) | select($m[.] == $m[. - 1])] | length) == 0' "$T/progress.json"
	jq -e '[.heard[].progress] as $p | $p == ($p | sort) and ($p | unique | length) == ($p | length)' "$T/progress.json"
}

@test "mcp --backend slurm: keep, copy_in and vm_exec refused (-32602 naming slurm), nothing submitted; --backend other: 100" {
	[ -d "$ISOPOD_SRC/t/mcp/node_modules/@modelcontextprotocol/sdk" ] || skip "t/mcp/node_modules: npm ci in t/mcp"
	local n0
	n0=$(ls "$T/mcpjobs" 2>/dev/null | wc -l)
	mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"net":"none","keep":true}}'
	echo "$output" | jq -e '.error.code == -32602 and (.error.message | contains("keep: refused under --backend slurm"))'
	mcp "$(sl)" call '{"name":"sandbox_run","args":{"argv":["true"],"copy_in":[{"host":"spool","guest":"/tmp/x"}]}}'
	echo "$output" | jq -e '.error.code == -32602 and (.error.message | contains("copy_in: refused under --backend slurm"))'
	mcp "$(sl)" call '{"name":"vm_exec","args":{"vm":"vm-000000000000","argv":["true"]}}'
	echo "$output" | jq -e '.error.code == -32602 and (.error.message | contains("vm_exec: refused under --backend slurm"))'
	[ "$(ls "$T/mcpjobs" 2>/dev/null | wc -l)" -eq "$n0" ]
	[ -z "$(mcp_jobs)" ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-mcp" --backend pbs </dev/null
	[ "$status" -eq 100 ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-mcp" --slurm-dir /tmp </dev/null
	[ "$status" -eq 100 ]
	# a job directory root another user could write, or a link: 100 naming
	# it, before any call (the server) or any submission (isopod-slurm run)
	mkdir -p "$T/gw" "$T/real"
	chmod 0777 "$T/gw"
	ln -sfn "$T/real" "$T/lnk"
	for d in gw lnk; do
		run --separate-stderr "$ISOPOD_SRC/bin/isopod-mcp" --backend slurm --slurm-dir "$T/$d" </dev/null
		echo "# $stderr" >&3
		[ "$status" -eq 100 ] && [[ $stderr == *"--slurm-dir $T/$d: "* ]] || false
		# in the lab (a mutant's sbatch then asks the lab's slurmctld, nothing else)
		run --separate-stderr ip netns exec "$LAB_NAME-ctl" env SLURM_CONF="$ISOPOD_LAB_STATE/$LAB_NAME/slurm/etc/slurm.conf" \
			"$ISOPOD_SRC/bin/isopod-slurm" run --dir "$T/$d" -- true
		[ "$status" -eq 100 ] && [[ $stderr == *"--dir $T/$d: "* ]] || false
		[ -z "$output" ] && [ -z "$(ls -A "$T/$d/")" ] || false
	done
	[ -z "$(mcp_jobs)" ]
}

@test "its worker SIGKILLed mid-job: the runner settles the job interrupted and cancels its Slurm job (state.json's slurm_job)" {
	job wkill '{"argv": ["sleep", "120"], "net": "none", "timeout_s": 200}'
	wait_until 60 jq -e '.slurm_job' "$SPOOL/running/wkill/state.json"
	id=$(jq -r .slurm_job "$SPOOL/running/wkill/state.json")
	wait_until 60 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING'
	kill -KILL "$(jq -r .worker_pid "$SPOOL/running/wkill/state.json")"
	wait_until 30 ended wkill
	d=$(ended wkill)
	[ "$d" = "$SPOOL/interrupted/wkill" ]
	jq -e '.ok == false and .error_kind == "interrupted"' "$d/result.json"
	# Slurm no longer runs it (squeue shows an ended job for MinJobAge: none, or not RUNNING)
	wait_until 60 eval '! cx ctl squeue -h -j "$id" -o %T 2>/dev/null | grep -qx "RUNNING\|PENDING\|COMPLETING"'
	wait_until 60 eval '[ -z "$(running_vms)" ]'
}

@test "the runner SIGKILLed mid-job (last: it stays dead): its worker cancels the Slurm job and writes interrupted" {
	job rkill '{"argv": ["sleep", "120"], "net": "none", "timeout_s": 200}'
	wait_until 60 jq -e '.slurm_job' "$SPOOL/running/rkill/state.json"
	id=$(jq -r .slurm_job "$SPOOL/running/rkill/state.json")
	wait_until 60 eval 'cx ctl squeue -h -j "$id" -o %T | grep -qx RUNNING'
	kill -KILL "$(cat "$T/runner.pid")"
	wait_until 60 ended rkill
	d=$(ended rkill)
	echo "# $(jq -c '{error, error_kind, slurm}' "$d/result.json")" >&3
	[ "$d" = "$SPOOL/interrupted/rkill" ]
	jq -e '.ok == false and .error_kind == "interrupted" and .slurm.state == "CANCELLED"' "$d/result.json"
	wait_until 60 eval '[ -z "$(running_vms)" ]'
	# and the job's processes have ended: a VM's lock is free before the
	# last of them writes its record (stop 29's rehearsal: the lab, taken
	# down right after, killed one mid-write and gc saw its meta.json's
	# staging file as a leak)
	wait_until 60 eval '! cx ctl squeue -h -j "$id" -o %T | grep -qxE "RUNNING|COMPLETING"'
	wait_until 60 eval '[ -z "$(find "$ISOPOD_HOME/vms" "$STORE_B/vms" -name "*.tmp.*" 2>/dev/null)" ]'
}
