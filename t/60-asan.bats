#!/usr/bin/env bats
# The host tools built with ASan + UBSan (make asan) driving real VMs through
# the main paths: a sanitizer report anywhere fails the test.

load helpers

setup_file() {
	isopod_setup_file --images
	ASAN_BIN="$ISOPOD_SRC/build/asan/bin"
	export ASAN_BIN
	[ -x "$ASAN_BIN/isopod-exec" ] || {
		echo "# build/asan/bin is missing: run make asan" >&3
		return 1
	}
	export ISOPOD_LIBEXEC="$ASAN_BIN"
	# leaks at exit of one-shot tools are not bugs; memory errors and UB are
	export ASAN_OPTIONS=detect_leaks=0:exitcode=86:abort_on_error=0
	export UBSAN_OPTIONS=halt_on_error=1:exitcode=87:print_stacktrace=1
	DATA="$(mktemp -d /tmp/isopod-t60-data.XXXXXX)"
	export DATA
}

teardown_file() {
	rm -rf "$DATA"
	isopod_teardown_file
}

isopod() { "$ISOPOD_SRC/sh/isopod" "$@"; }

clean_stderr() {
	! grep -E 'AddressSanitizer|runtime error:|LeakSanitizer|UndefinedBehaviorSanitizer' <<<"$stderr" || false
}

@test "asan: the sanitizer build is what runs" {
	run --separate-stderr isopod doctor --quick
	nm -C "$ASAN_BIN/isopod-exec" | grep -q __asan_init
}

@test "asan: run with output on both streams, stdin, copy-in and copy-out" {
	head -c 300000 /dev/urandom > "$DATA/in"
	run --separate-stderr isopod run --json-only --cold --stdin-file "$DATA/in" \
		--copy-in "$DATA/in:/root/in" --copy-out "/root/in:$DATA/out" \
		-- sh -c 'wc -c; echo err >&2; printf "\377\376 bad utf8"; exit 3'
	[ "$status" -eq 3 ]
	clean_stderr
	json_is '.exit_code == 3 and .stderr == "err\n" and .copied_out[0].bytes == 300000'
	cmp "$DATA/in" "$DATA/out"
}

@test "asan: failures of every kind stay clean" {
	run -127 --separate-stderr isopod run --json-only --cold -- no-such-cmd
	clean_stderr
	# The budget covers the boot: a cold ASan boot took 5-6 s at load 11,
	# so 6 s ended it as 99 (infrastructure) before the command ran.
	run --separate-stderr isopod run --json-only --cold --timeout-s 15 -- sleep 100
	[ "$status" -eq 137 ]
	clean_stderr
	run --separate-stderr isopod run --cold --env '=x' -- true
	[ "$status" -eq 100 ]
	clean_stderr
	run --separate-stderr isopod vm rm no-such-vm
	[ "$status" -eq 101 ]
	clean_stderr
}

@test "asan: keep, exec, commit, fork, stage tools, stop and gc" {
	run --separate-stderr isopod run --json-only --cold --commit-as asan-st -- sh -c 'echo s > /root/s'
	[ "$status" -eq 0 ]
	clean_stderr
	run --separate-stderr isopod run --json-only --cold --keep --stage asan-st -- cat /root/s
	[ "$status" -eq 0 ]
	clean_stderr
	id=$(echo "$output" | jq -r .vm.id)
	run --separate-stderr "$ASAN_BIN/isopod-exec" --vm "$id" -- sh -c 'head -c 2000000 /dev/zero'
	[ "$status" -eq 0 ]
	clean_stderr
	run --separate-stderr "$ASAN_BIN/isopod-stop" --vm "$id"
	[ "$status" -eq 0 ]
	clean_stderr
	for v in ls "info asan-st" "verify asan-st"; do
		# shellcheck disable=SC2086
		run --separate-stderr "$ASAN_BIN/isopod-stage" $v
		[ "$status" -eq 0 ]
		clean_stderr
	done
	run --separate-stderr "$ASAN_BIN/isopod-gc" --dry-run
	[ "$status" -eq 0 ]
	clean_stderr
	json_is '.leaked == []'
}

@test "asan: provenance signed (with the committed stage) and verified, refusals included" {
	[ "$(id -u)" -eq 0 ] || skip "needs root: the host key directory is root's"
	export ISOPOD_ATTEST_DIR="$DATA/keys" ISOPOD_ATTESTATION="$DATA/no-attestation"
	"$ASAN_BIN/isopod-attest" keygen >/dev/null
	run --separate-stderr isopod run --json-only --commit-as asan-prov --env A=1 \
		--copy-out "/root/p:$DATA/p" --provenance "$DATA/p.prov" -- sh -c 'echo p > /root/p'
	[ "$status" -eq 0 ]
	clean_stderr
	json_is '(.provenance.subjects | length) == 2'
	run --separate-stderr "$ASAN_BIN/isopod-provenance" verify --stage base "$DATA/p" "$DATA/p.prov"
	[ "$status" -eq 0 ]
	clean_stderr
	run --separate-stderr "$ASAN_BIN/isopod-provenance" verify --stage asan-prov "$DATA/p" "$DATA/p.prov"
	[ "$status" -eq 1 ]
	clean_stderr
	printf '{"payload":"e30","payloadType":"x","signatures":[{"sig":"AA"}]}' >"$DATA/g.prov"
	run --separate-stderr "$ASAN_BIN/isopod-provenance" verify "$DATA/p" "$DATA/g.prov"
	[ "$status" -eq 1 ]
	clean_stderr
}

@test "asan: isopod-slurm run (stand-in sbatch, scontrol, scancel): the result with slurm, --stdin, the exit statuses, the job directory removed" {
	local d=$BATS_TEST_TMPDIR
	mkdir -p "$d/bin"
	# sbatch runs the script at once, as a node would (its words logged);
	# scontrol says $FAKE_STATE with the script's status
	# shellcheck disable=SC2016 # the stand-ins expand them
	printf '#!/bin/sh\necho "$*" >>%s/sbatch.log\nwhile :; do case $1 in --output=*) o=${1#*=};; --error=*) e=${1#*=};; --chdir=*) c=${1#*=};; --*) ;; *) break;; esac; shift; done\n(cd "$c" && sh "$@" >"$o" 2>"$e" </dev/null; echo $? >%s/rc)\necho 42\n' "$d" "$d" >"$d/bin/sbatch"
	# shellcheck disable=SC2016
	printf '#!/bin/sh\necho "JobId=$4 JobState=${FAKE_STATE:-COMPLETED} Reason=None Restarts=0 BatchHost=a ExitCode=$(cat %s/rc):0 Command=x"\n' "$d" >"$d/bin/scontrol"
	printf '#!/bin/sh\nexit 0\n' >"$d/bin/scancel"
	# the front end stand-in: its result, with what it read from --stdin-file
	# shellcheck disable=SC2016
	printf '#!/bin/sh\nprintf "{\\"ok\\":true,\\"exit_code\\":3,\\"stdout\\":\\"%%s\\"}\\n" "$(cat "$2")"\necho front-diag >&2\nexit 3\n' >"$d/front"
	chmod 755 "$d/bin/sbatch" "$d/bin/scontrol" "$d/bin/scancel" "$d/front"
	run --separate-stderr env PATH="$d/bin:$PATH" "$ASAN_BIN/isopod-slurm" run --dir "$d/jobs" --stdin --net filtered \
		--vcpus 2 --timeout-s 10 --stage nosuch -- "$d/front" --stdin-file stdin <<<"fed"
	echo "# $output" >&3
	[ "$status" -eq 3 ]
	clean_stderr
	jq -e '.ok == true and .exit_code == 3 and .stdout == "fed" and (.slurm | del(.queued_s, .run_s)) == {"job_id": "42", "node": "a", "state": "COMPLETED", "exit": 3}' <<<"$output"
	grep -q -- '--no-requeue --export=NONE --job-name=isopod-run\..* --gres=isopod_filtered:1 --cpus-per-task=2 --time=1 ' "$d/sbatch.log"
	! grep -q -- '--prefer' "$d/sbatch.log" || false
	[[ "$stderr" == *front-diag* ]] || false
	[ -z "$(ls -A "$d/jobs")" ]
	# stdin copied as it comes: 3 MiB (more than isopod-mcp's 1 MiB) whole;
	# an unreadable stdin (a directory) fails before sbatch, its directory gone
	head -c 3145728 /dev/urandom >"$d/big"
	printf '#!/bin/sh\ncmp -s "$2" %s/big && echo "{\\"ok\\":true,\\"exit_code\\":0}"\n' "$d" >"$d/front2"
	chmod 755 "$d/front2"
	: >"$d/sbatch.log"
	run --separate-stderr env PATH="$d/bin:$PATH" "$ASAN_BIN/isopod-slurm" run --dir "$d/jobs" --stdin -- \
		"$d/front2" --stdin-file stdin <"$d/big"
	[ "$status" -eq 0 ]
	clean_stderr
	jq -e '.ok == true' <<<"$output"
	run --separate-stderr env PATH="$d/bin:$PATH" "$ASAN_BIN/isopod-slurm" run --dir "$d/jobs" --stdin -- \
		"$d/front2" --stdin-file stdin <"$d"
	[ "$status" -eq 111 ] && [[ $stderr == *"unable to copy standard input"* ]] || false
	[ -z "$(ls -A "$d/jobs")" ]
	[ "$(wc -l <"$d/sbatch.log")" -eq 1 ]
	# Slurm's TIMEOUT: a failure, exit 99, never the step's success; the directory gone too
	run --separate-stderr env PATH="$d/bin:$PATH" FAKE_STATE=TIMEOUT "$ASAN_BIN/isopod-slurm" run --dir "$d/jobs" -- "$d/front" /dev/null
	[ "$status" -eq 99 ]
	clean_stderr
	jq -e '.ok == false and .error_kind == "timeout" and .slurm.state == "TIMEOUT"' <<<"$output"
	[ -z "$(ls -A "$d/jobs")" ]
	# no "--" (one that is --dir's value is none), a relative --dir: usage
	run --separate-stderr "$ASAN_BIN/isopod-slurm" run --dir -- "$d/front"
	[ "$status" -eq 100 ]
	[ -z "$output" ]
	clean_stderr
	run --separate-stderr "$ASAN_BIN/isopod-slurm" run --dir jobs -- "$d/front"
	[ "$status" -eq 100 ]
	clean_stderr
}

@test "asan: isopod-slurm conf, refresh (a stand-in scontrol and isopod-attest) and feature, refusals included" {
	local d=$BATS_TEST_TMPDIR
	run --separate-stderr "$ASAN_BIN/isopod-slurm" conf --node n1
	[ "$status" -eq 0 ]
	clean_stderr
	jq -e '.node == "n1" and (.features | any(startswith("isopod_base_"))) and (.gres | keys) == ["isopod_filtered", "isopod_open"]' <<<"$output"
	# shellcheck disable=SC2016 # the stand-in expands them
	printf '#!/bin/sh\necho "$*" >>%s/sc.log\n[ "$1" != -o ] || echo "NodeName=n1 AvailableFeatures=intel,isopod_st_000000000000 ActiveFeatures=intel State=IDLE+DRAIN Reason=isopod: x [root@t]"\n' \
		"$d" >"$d/scontrol"
	mkdir -p "$d/lx"
	printf '#!/bin/sh\necho '\''{"valid":false,"failures":[{"subject":"s","why":"w"}]}'\''\nexit 1\n' >"$d/lx/isopod-attest"
	chmod 755 "$d/scontrol" "$d/lx/isopod-attest"
	echo 'require_attestation = yes' >"$d/conf"
	run --separate-stderr env ISOPOD_SCONTROL="$d/scontrol" "$ASAN_BIN/isopod-slurm" refresh --node n1
	[ "$status" -eq 0 ]
	clean_stderr
	jq -e '.updated == true and .resumed == true and (.command[3] | startswith("AvailableFeatures=intel,isopod_base_"))' <<<"$output"
	run --separate-stderr env ISOPOD_SCONTROL="$d/scontrol" ISOPOD_SYSCONFIG="$d/conf" ISOPOD_LIBEXEC="$d/lx" \
		"$ASAN_BIN/isopod-slurm" refresh --node n1
	[ "$status" -eq 0 ]
	clean_stderr
	jq -e '.drained == true and .state_command[3:] == ["State=DRAIN", "Reason=isopod: attestation does not verify: s: w"]' <<<"$output"
	run --separate-stderr env ISOPOD_SYSCONFIG="$d/conf" ISOPOD_LIBEXEC="$d/lx" "$ASAN_BIN/isopod-slurm" conf --node n1
	[ "$status" -eq 111 ]
	[ -z "$output" ]
	clean_stderr
	run --separate-stderr env ISOPOD_SCONTROL=/bin/false "$ASAN_BIN/isopod-slurm" refresh --node n1
	[ "$status" -eq 111 ]
	[ -z "$output" ]
	clean_stderr
	run --separate-stderr "$ASAN_BIN/isopod-slurm" conf --node -x
	[ "$status" -eq 100 ]
	[ -z "$output" ]
	clean_stderr
	# feature REF: a stage of a store of its own, an unknown one, none
	sh "$BATS_TEST_DIRNAME/oci/mkchain.sh" "$d/h" 1 >"$d/h.ids"
	run --separate-stderr env ISOPOD_HOME="$d/h" "$ASAN_BIN/isopod-slurm" feature s1
	[ "$status" -eq 0 ]
	clean_stderr
	jq -e --arg id "$(cat "$d/h.ids")" '.stage == $id and .feature == "isopod_st_" + $id[3:]' <<<"$output"
	run --separate-stderr env ISOPOD_HOME="$d/h" "$ASAN_BIN/isopod-slurm" feature nosuch
	[ "$status" -eq 101 ]
	[ -z "$output" ]
	clean_stderr
	run --separate-stderr "$ASAN_BIN/isopod-slurm" feature
	[ "$status" -eq 100 ]
	[ -z "$output" ]
	clean_stderr
}

# mcp_slurm ENV... -- JSON_ARGS: one sandbox_run call through the ASan
# isopod-mcp --backend slurm whose tools are stand-ins in $d/lx (its
# isopod-slurm logs its argv to $d/slurm.log, one line a call); the
# server's stderr in $stderr, the raw.py transcript in $output.
mcp_slurm() {
	local d=$BATS_TEST_TMPDIR e=()
	while [ "$1" != -- ]; do e+=("$1"); shift; done
	shift
	run --separate-stderr env "${e[@]}" ISOPOD_LIBEXEC="$d/lx" ISOPOD_CONFIG=/dev/null \
		python3 "$ISOPOD_SRC/t/mcp/raw.py" --want 2 --timeout 30 -- "$ASAN_BIN/isopod-mcp" --io-root "$d" \
		--backend slurm --slurm-dir "$d/jobs" <<EOT
{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_run","arguments":$1}}
EOT
}

@test "asan: isopod-mcp --backend slurm (stand-in isopod-slurm): a call without net, vcpus, mem_mib asks Slurm for the front end's defaults and hands the node's front end the same" {
	local d=$BATS_TEST_TMPDIR
	mkdir -p "$d/lx"
	# shellcheck disable=SC2016 # the stand-in expands them
	printf '#!/bin/sh\necho "$*" >>%s/slurm.log\necho '\''{"ok":true,"exit_code":0,"stdout":"","stderr":""}'\''\n' "$d" >"$d/lx/isopod-slurm"
	printf '#!/bin/sh\nexit 111\n' >"$d/lx/isopod"
	chmod 755 "$d/lx/isopod-slurm" "$d/lx/isopod"
	# no variable, no configuration: filtered (a slot asked), 1 vCPU, 512 MiB
	mcp_slurm ISOPOD_NET= ISOPOD_VCPUS= ISOPOD_MEM_MIB= -- '{"argv":["true"]}'
	echo "# $(cat "$d/slurm.log")" >&3
	[ "$status" -eq 0 ]
	clean_stderr
	l=$(sed -n 1p "$d/slurm.log")
	[[ "${l%% -- *}" == *" --net filtered --vcpus=1 --mem-mib=512"* ]] || false
	f=" ${l#* -- }"
	[[ "$f" == *" --net filtered "* && "$f" == *" --vcpus=1 "* && "$f" == *" --mem-mib=512 "* ]] || false
	# the environment's, and a call's own vcpus over them, the same on both sides
	echo 'mem_mib = 300' >"$d/conf"
	mcp_slurm ISOPOD_NET=none ISOPOD_VCPUS=3 ISOPOD_SYSCONFIG="$d/conf" -- '{"argv":["true"],"vcpus":2}'
	[ "$status" -eq 0 ]
	clean_stderr
	l=$(sed -n 2p "$d/slurm.log")
	[[ "${l%% -- *}" == *" --net none --vcpus=2 --mem-mib=300"* ]] || false
	f=" ${l#* -- }"
	[[ "$f" == *" --net none "* && "$f" == *" --vcpus=2 "* && "$f" == *" --mem-mib=300 "* ]] || false
	[[ "$f" != *"--vcpus=3"* ]] || false
	# learn is never a default: the server refuses to start
	run --separate-stderr env ISOPOD_NET=learn ISOPOD_LIBEXEC="$d/lx" "$ASAN_BIN/isopod-mcp" --io-root "$d" --backend slurm </dev/null
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"net 'learn'"* ]] || false
	clean_stderr
}
