#!/usr/bin/env bats
# shellcheck disable=SC2154 # $stderr: set by bats' run --separate-stderr
# isopod-attest (issue 10): keygen, sign, verify, and every refusal the
# issue lists, each its own test.
#
# Everything that reads the ruleset runs in the host netns of a sealed lab
# (t/lab/lab.sh) where isopod-netsetup wrote isopod's tables, as in
# t/40-net.bats; nothing touches the root namespace's nftables.  The store
# is a small stand-in (kernels/current, images/current-{base,debian} over
# files of a few bytes, never the build cache's hard links), the tools a
# copy of bin/ in $ISOPOD_LIBEXEC, QEMU a stand-in first on PATH: so each
# test can change exactly one subject and put it back.  Doctor reports are
# hand-made (the doctor's contract: doc/INTERFACES.md "Doctor report").

load helpers
# helpers.bash points ISOPOD_SYSCONFIG at /dev/null in every test; here it is
# the lab's host config (setup_file below), as netsetup saw it.
[ -z "${LAB_CONF-}" ] || export ISOPOD_SYSCONFIG=$LAB_CONF

DSSE_PY=/usr/bin/python3 # Debian's, with python3-securesystemslib

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces, a root-owned key"
	# The host config attest hashes is the one netsetup read (LAB_CONF).
	isopod_lab_up "t70a$$" --slots 2
	isopod_setup_file
	local k b d
	mkdir -p "$ISOPOD_HOME/kernels" "$ISOPOD_HOME/images"
	k=$(printf 'kernel' | sha256sum | cut -c1-64)
	mkdir "$ISOPOD_HOME/kernels/$k"
	printf 'vmlinux stand-in\n' >"$ISOPOD_HOME/kernels/$k/vmlinux"
	printf 'initramfs stand-in\n' >"$ISOPOD_HOME/kernels/$k/initramfs.cpio"
	echo "$k" >"$ISOPOD_HOME/kernels/current"
	for f in base debian; do
		printf '%s image stand-in\n' "$f" >"$BATS_FILE_TMPDIR/img"
		b=$(sha256sum <"$BATS_FILE_TMPDIR/img" | cut -c1-64)
		mv "$BATS_FILE_TMPDIR/img" "$ISOPOD_HOME/images/base-$b.img"
		echo "$b" >"$ISOPOD_HOME/images/current-$f"
	done
	export ISOPOD_LIBEXEC="$BATS_FILE_TMPDIR/libexec"
	mkdir -p "$ISOPOD_LIBEXEC"
	for f in "$ISOPOD_SRC"/bin/isopod-*; do
		case $f in *.c) continue ;; esac
		cp "$f" "$ISOPOD_LIBEXEC/"
	done
	cp "$ISOPOD_SRC/sh/isopod" "$ISOPOD_LIBEXEC/isopod"
	d="$BATS_FILE_TMPDIR/path"
	mkdir -p "$d"
	printf '#!/bin/sh\necho qemu stand-in\n' >"$d/qemu-system-x86_64"
	chmod 755 "$d/qemu-system-x86_64"
	export PATH="$d:$PATH"
	export ISOPOD_ATTEST_DIR="$BATS_FILE_TMPDIR/keys"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >"$BATS_FILE_TMPDIR/keygen.json"
}

teardown_file() {
	isopod_teardown_file
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

# isopod-attest in the lab's host netns, with this file's environment.
attest() { ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" "$@"; }
lab() { sh "$LAB" "$1" "$LAB_NAME" "${@:2}"; }
nftl() { lab exec nft "$@"; }

# report FILE [PROBE-VERDICT...]: a doctor report, finished now, one probe
# per verdict given (default one "pass"), then (unless "none": no probe at
# all) the rest of a full adverse run on the lab (adverse_coverage);
# REPORT_VERDICT overrides the overall verdict (default pass).
report() {
	local f=$1 now probes='[]' v subj cov='{"vms": [], "probes": [], "host_checks": []}'
	shift
	[ $# -gt 0 ] || set -- pass
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	# After the probes named, the rest of a full run on the lab as it is
	# (every live mode's classes, the host checks): what sign requires.
	[ "$1" = none ] || cov=$(adverse_coverage "$LAB_NAME-host")
	for v in "$@"; do
		[ "$v" = none ] && break
		probes=$(jq -c --arg v "$v" --argjson n "$(jq length <<<"$probes")" \
			'. + [{name: "metadata-tcp-\($n)", class: "metadata", vm: "doctor-none", verdict: $v,
			  steps: [{step: "liveness", ok: true}, {step: "tooling", ok: true},
			          {step: "control", ok: true}, {step: "attempt", ok: false},
			          {step: "evidence", ok: true, counter: "meta_in", moved: 1}]}]' <<<"$probes")
	done
	# The doctor records the live subjects before its probes.
	subj=$(attest subjects | jq -c .subjects)
	probes=$(jq -c --argjson c "$cov" '. + $c.probes' <<<"$probes")
	jq -n --arg id "$(cat /etc/machine-id)" --arg now "$now" --argjson p "$probes" \
		--arg v "${REPORT_VERDICT:-pass}" --argjson s "$subj" --argjson c "$cov" \
		'{doctor: {version: "test", suite: "adverse"}, host: {id: $id, hostname: "lab"},
		  started: $now, subjects: $s, setup: {ok: true}, vms: $c.vms,
		  host_checks: $c.host_checks,
		  finished: $now, verdict: $v,
		  counts: {probes: ($p | length), pass: ([$p[] | select(.verdict == "pass")] | length),
		           fail: ([$p[] | select(.verdict == "fail")] | length),
		           error: ([$p[] | select(.verdict == "error")] | length)},
		  probes: $p}' >"$f"
}

# sign_fresh: a passing report signed now, the envelope in $BATS_TEST_TMPDIR/env.json.
sign_fresh() {
	report "$BATS_TEST_TMPDIR/report.json"
	attest sign -o "$BATS_TEST_TMPDIR/env.json" "$@" "$BATS_TEST_TMPDIR/report.json" >/dev/null
}

# verify_fails WHAT ENVELOPE: verify says invalid (exit 1, valid false) and
# one failure names WHAT (a subject or a field).
verify_fails() {
	run --separate-stderr attest verify "$2"
	echo "$output"
	[ "$status" -eq 1 ]
	jq -e --arg w "$1" '.valid == false and any(.failures[]; .subject == $w or .field == $w)' \
		<<<"$output"
}

verify_ok() {
	run --separate-stderr attest verify "$1"
	echo "$output"
	[ "$status" -eq 0 ]
	jq -e '.valid == true and .failures == []' <<<"$output"
}

sha() { sha256sum "$1" | cut -c1-64; }

# sign_refuses PATCH WHY: a passing report changed by the jq PATCH is refused
# (exit 1 or 100), stderr saying WHY, nothing signed; the unpatched one signs.
sign_refuses() {
	local seq
	report "$BATS_TEST_TMPDIR/r.json" pass pass
	jq "$1" "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	seq=$(cat "$ISOPOD_ATTEST_DIR/sequence" 2>/dev/null || echo 0)
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	echo "$stderr"
	[ "$status" -eq 1 ] || [ "$status" -eq 100 ]
	[ -z "$output" ]
	[[ "$stderr" == *"$2"* ]]
	[ "$(cat "$ISOPOD_ATTEST_DIR/sequence" 2>/dev/null || echo 0)" = "$seq" ]
}

@test "usage: -h prints the synopsis; a bad verb, a bad --expires-s, extra operands: 100" {
	run "$ISOPOD_SRC/bin/isopod-attest" -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: isopod-attest keygen "* ]]
	run "$ISOPOD_SRC/bin/isopod-attest" frobnicate
	[ "$status" -eq 100 ]
	run "$ISOPOD_SRC/bin/isopod-attest" sign --expires-s 0 x
	[ "$status" -eq 100 ]
	run "$ISOPOD_SRC/bin/isopod-attest" verify a b
	[ "$status" -eq 100 ]
}

@test "keygen: private key 0600 in a root-owned 0700 directory, key id = sha256 of the public key; never replaced without --force" {
	local dir=$ISOPOD_ATTEST_DIR pk
	[ "$(stat -c '%u %a' "$dir")" = "0 700" ]
	[ "$(stat -c '%u %a' "$dir/key")" = "0 600" ]
	pk=$(jq -r .public_key "$BATS_FILE_TMPDIR/keygen.json")
	[ "$pk" = "$(cat "$dir/key.pub")" ]
	[ "$(jq -r .key_id "$BATS_FILE_TMPDIR/keygen.json")" = \
		"$("$DSSE_PY" -c 'import hashlib, sys; print(hashlib.sha256(bytes.fromhex(sys.argv[1])).hexdigest())' "$pk")" ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-attest" keygen
	[ "$status" -eq 102 ]
	[ "$pk" = "$(cat "$dir/key.pub")" ]
}

@test "sign refuses a key directory or key that is not root's alone, naming it" {
	report "$BATS_TEST_TMPDIR/r.json"
	chmod 755 "$ISOPOD_ATTEST_DIR"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	chmod 700 "$ISOPOD_ATTEST_DIR"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"key directory $ISOPOD_ATTEST_DIR must be owned by root with mode 0700"* ]]
	[ -z "$output" ]
	chmod 644 "$ISOPOD_ATTEST_DIR/key"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	chmod 600 "$ISOPOD_ATTEST_DIR/key"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"private key $ISOPOD_ATTEST_DIR/key must be"*"0600"* ]]
}

# The key directory is opened once (O_DIRECTORY | O_NOFOLLOW) and checked on
# that descriptor: a symlink to a good directory (root's, 0700) is refused
# by every verb, which then changes nothing in it.
@test "a symlinked key directory is refused by keygen, subjects, sign and verify, naming it" {
	local link="$BATS_TEST_TMPDIR/keylink" v seq pk
	sign_fresh
	ln -s "$ISOPOD_ATTEST_DIR" "$link"
	seq=$(cat "$ISOPOD_ATTEST_DIR/sequence")
	pk=$(cat "$ISOPOD_ATTEST_DIR/key.pub")
	for v in keygen subjects sign verify; do
		case $v in
		sign) set -- "$BATS_TEST_TMPDIR/report.json" ;;
		verify) set -- "$BATS_TEST_TMPDIR/env.json" ;;
		*) set -- ;;
		esac
		run --separate-stderr env ISOPOD_ATTEST_DIR="$link" \
			ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-attest" "$v" "$@"
		echo "$v: $status $stderr"
		[ "$status" -eq 111 ]
		[[ "$stderr" == *"key directory $link is not a directory (or is a symlink)"* ]]
		[ -z "$output" ]
	done
	[ "$(cat "$ISOPOD_ATTEST_DIR/sequence")" = "$seq" ]
	[ "$(cat "$ISOPOD_ATTEST_DIR/key.pub")" = "$pk" ]
	# The directory itself, by its own name: still good.
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "sign + verify: a DSSE envelope around an in-toto Statement v1 whose subjects are the live host's" {
	report "$BATS_TEST_TMPDIR/r.json" pass pass
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 0 ]
	echo "$output" >"$BATS_TEST_TMPDIR/env.json"
	jq -e '.payloadType == "application/vnd.in-toto+json" and (.signatures | length) == 1' \
		<<<"$output"
	jq -r .payload <<<"$output" | base64 -d >"$BATS_TEST_TMPDIR/stmt.json"
	jq -e '._type == "https://in-toto.io/Statement/v1" and
		.predicateType == "urn:isopod:predicate:containment:v1"' "$BATS_TEST_TMPDIR/stmt.json"
	# Every subject the issue lists, each {name, digest: {sha256}}.
	for n in ruleset/nftables qemu kernel/vmlinux kernel/initramfs image/base image/debian \
		bin/isopod bin/isopod-attest bin/isopod-boot bin/isopod-netsetup bin/isopod-memro.so config/host config/user; do
		jq -e --arg n "$n" 'any(.subject[]; .name == $n and (.digest.sha256 | test("^[0-9a-f]{64}$")))' \
			"$BATS_TEST_TMPDIR/stmt.json" || { echo "no subject $n"; return 1; }
	done
	# File digests checked with sha256sum, not with isopod's own hashing.
	local k
	k=$(cat "$ISOPOD_HOME/kernels/current")
	jq -e --arg q "$(sha "$BATS_FILE_TMPDIR/path/qemu-system-x86_64")" \
		--arg v "$(sha "$ISOPOD_HOME/kernels/$k/vmlinux")" \
		--arg i "$(sha "$ISOPOD_HOME/kernels/$k/initramfs.cpio")" \
		--arg b "$(sha "$ISOPOD_HOME/images/base-$(cat "$ISOPOD_HOME/images/current-base").img")" \
		--arg t "$(sha "$ISOPOD_LIBEXEC/isopod-boot")" --arg c "$(sha "$LAB_CONF")" \
		'[.subject[] | {(.name): .digest.sha256}] | add |
		 .qemu == $q and .["kernel/vmlinux"] == $v and .["kernel/initramfs"] == $i and
		 .["image/base"] == $b and .["bin/isopod-boot"] == $t and .["config/host"] == $c' \
		"$BATS_TEST_TMPDIR/stmt.json"
	# The predicate: host id, doctor version, times, a sequence, the evidence.
	# the two named probes and the full run's (adverse_coverage)
	jq -e --arg id "$(cat /etc/machine-id)" \
		--argjson n "$(($(adverse_coverage "$LAB_NAME-host" | jq '.probes | length') + 2))" '.predicate |
		.host.id == $id and .doctor.version == "test" and .verdict == "pass" and
		(.sequence | type) == "number" and (.probes | length) == $n and
		(.probes[0].steps | length) == 5 and
		((.expires | fromdateiso8601) - (.finished | fromdateiso8601)) == 86400' \
		"$BATS_TEST_TMPDIR/stmt.json"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	jq -e '.expires and .sequence and (.key_id | length) == 64' <<<"$output"
}

@test "interop: the envelope verifies with an independent DSSE implementation (securesystemslib + cryptography, PAE from the spec)" {
	sign_fresh
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$BATS_TEST_TMPDIR/env.json" \
		"$ISOPOD_ATTEST_DIR/key.pub"
	[ "$status" -eq 0 ]
	[ "$output" = "$(jq -r .payload "$BATS_TEST_TMPDIR/env.json" | base64 -d)" ]
	# ... and refuses what it must (so this check can fail).
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" flip "$BATS_TEST_TMPDIR/env.json" sig \
		>"$BATS_TEST_TMPDIR/bad.json"
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$BATS_TEST_TMPDIR/bad.json" \
		"$ISOPOD_ATTEST_DIR/key.pub"
	[ "$status" -eq 1 ]
}

@test "golden vector: the committed envelope is what the independent implementation makes from the fixed key and payload" {
	# (t/unit/dsse_test.c checks that lib/dsse.c makes the same bytes.)
	local g="$BATS_TEST_DIRNAME/attest/golden"
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" envelope "$g/seed" "$g/statement.json"
	[ "$status" -eq 0 ]
	[ "$output" = "$(cat "$g/envelope.json")" ]
	run "$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" verify "$g/envelope.json" "$g/key.pub"
	[ "$status" -eq 0 ]
}

@test "sign refuses a report with one FAIL probe (exit 1, naming it); nothing signed" {
	local seq
	seq=$(cat "$ISOPOD_ATTEST_DIR/sequence" 2>/dev/null || echo 0)
	report "$BATS_TEST_TMPDIR/r.json" pass fail pass
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == *"probe metadata-tcp-1 (class metadata): verdict fail, not pass"* ]]
	[ "$(cat "$ISOPOD_ATTEST_DIR/sequence" 2>/dev/null || echo 0)" = "$seq" ]
}

@test "sign refuses a report with one ERROR probe" {
	report "$BATS_TEST_TMPDIR/r.json" error pass
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == *"probe metadata-tcp-0 (class metadata): verdict error, not pass"* ]]
}

@test "sign refuses an empty report, a report whose own verdict is not pass, and a passing probe without evidence" {
	report "$BATS_TEST_TMPDIR/r.json" none
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"no probes"* ]]
	REPORT_VERDICT=fail report "$BATS_TEST_TMPDIR/r.json" pass
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"report: verdict fail, not pass"* ]]
	report "$BATS_TEST_TMPDIR/r.json" pass
	jq '.probes[0].steps = []' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"no steps"* ]]
	jq 'del(.probes)' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"probes is missing"* ]]
	printf '{"verdict":"pass","verdict":"fail"}' >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign - <"$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"duplicate"*"verdict"* ]]
}

@test "sign checks each passing probe's steps, not only its verdict: the reviewer's forged pass is refused" {
	# The control: the same report unpatched signs.
	report "$BATS_TEST_TMPDIR/r.json" pass pass
	attest sign -o "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/r.json" >/dev/null
	# verdict pass, liveness and control failed, the attempt got through, no
	# evidence step, counts.fail 3.
	sign_refuses '.probes[0].steps = [{step: "liveness", ok: false}, {step: "tooling", ok: true},
		{step: "control", ok: false}, {step: "attempt", ok: true}] | .counts.fail = 3' \
		"probe metadata-tcp-0: 4 steps, not the 5"
	sign_refuses '.probes[1].steps[0].ok = false' "probe metadata-tcp-1: step liveness: ok false"
	sign_refuses '.probes[0].steps[1].ok = false' "step tooling: ok false"
	sign_refuses '.probes[0].steps[2].ok = false' "step control: ok false"
	sign_refuses '.probes[0].steps[3].ok = true' "step attempt: ok true"
	sign_refuses '.probes[0].steps[4].ok = false' "step evidence: ok false"
	sign_refuses '.probes[0].steps[4].ok = "true"' "step evidence: ok is missing or not a boolean"
	sign_refuses 'del(.probes[0].steps[4]) | .probes[0].steps += [{step: "liveness", ok: true}]' \
		"step 5 is liveness, not evidence"
	sign_refuses '.probes[0].steps |= [.[0], .[2], .[1], .[3], .[4]]' "step 2 is control, not tooling"
	sign_refuses '.probes[0].steps += [{step: "evidence", ok: true}]' "6 steps"
	sign_refuses '.counts.fail = 3' "counts.fail is 3, but the probes say 0"
	sign_refuses '.counts.pass = 1' \
		"counts.pass is 1, but the probes say $(($(adverse_coverage "$LAB_NAME-host" | jq '.probes | length') + 2))"
	sign_refuses '.counts.probes = 3' "counts.probes is 3"
	sign_refuses 'del(.counts.error)' "counts.error is missing"
	sign_refuses '.probes[1].name = .probes[0].name' "probe metadata-tcp-0 appears twice"
}

# The whole suite, not only passing probes (review: a --modes none or a
# --vm run signed).  The lab has filtered slots (netsetup --slots 2), so a
# full run there is a none VM and a filtered VM, every class of each.
@test "sign: the control: the lab's live modes are none and filtered, and a full report of them signs" {
	lab exec cat /sys/class/net/isopod-tap0/ifalias | grep -qx 'isopod filtered'
	report "$BATS_TEST_TMPDIR/r.json"
	jq -e '[.vms[].mode] == ["none", "filtered"]' "$BATS_TEST_TMPDIR/r.json"
	attest sign -o "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/r.json" >/dev/null
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "sign refuses a report not of the adverse suite (exit 1, naming suite)" {
	sign_refuses '.doctor.suite = "basic"' "doctor.suite is basic, not adverse"
	sign_refuses 'del(.doctor.suite)' "doctor.suite is missing, not adverse"
	# beside the version, where the doctor writes it: not at the top
	sign_refuses 'del(.doctor.suite) | .suite = "adverse"' "doctor.suite is missing, not adverse"
	[ "$status" -eq 1 ]
}

@test "sign refuses a report whose setup did not finish (setup.ok false)" {
	sign_refuses '.setup = {ok: false, step: "boot", why: "no free slot"}' \
		"setup.ok is not true (step boot: no free slot)"
	[ "$status" -eq 1 ]
	sign_refuses 'del(.setup)' "setup.ok is not true"
}

@test "sign refuses a report without a live mode: the filtered VM's probes gone while filtered slots are live" {
	# isopod-doctor --adverse --modes none: only the none VM.
	sign_refuses 'del(.probes[] | select(.vm == "doctor-filtered")) | del(.vms[] | select(.mode == "filtered")) |
		.counts.probes = (.probes | length) | .counts.pass = (.probes | length)' \
		"mode filtered is missing: this host has filtered slots"
	[ "$status" -eq 1 ]
	# the VM listed, but none of its probes
	sign_refuses 'del(.probes[] | select(.vm == "doctor-filtered")) |
		.counts.probes = (.probes | length) | .counts.pass = (.probes | length)' \
		"mode filtered is missing"
}

@test "sign refuses a report missing one class of a live mode, naming it" {
	sign_refuses 'del(.probes[] | select(.vm == "doctor-filtered" and .class == "dns-exfiltration")) |
		.counts.probes = (.probes | length) | .counts.pass = (.probes | length)' \
		"mode filtered: class dns-exfiltration is missing"
	[ "$status" -eq 1 ]
	# a class of the mode run in a VM of another mode does not count
	sign_refuses '(.probes[] | select(.vm == "doctor-filtered" and .class == "metadata") | .vm) = "doctor-none"' \
		"mode filtered: class metadata is missing"
}

@test "sign refuses a report with a VM the doctor did not boot (a --vm run), or a probe in a VM not listed" {
	sign_refuses '(.vms[] | select(.mode == "filtered") | .booted_by_doctor) = false' \
		"VM doctor-filtered (mode filtered) was not booted by the doctor"
	[ "$status" -eq 1 ]
	sign_refuses '.probes[0].vm = "someone-elses"' "probe metadata-tcp-0 ran in VM someone-elses, which is not among"
	sign_refuses 'del(.vms)' "vms is missing or empty"
}

@test "sign refuses a report with a failed host check, or without the host checks of a live tap" {
	sign_refuses '.host_checks[1].ok = false' "host check fail-closed-rule on isopod-tap0 is not ok"
	[ "$status" -eq 1 ]
	sign_refuses '.host_checks = []' "host_checks is missing or empty, yet this host has 2 isopod tap(s)"
	sign_refuses 'del(.host_checks[] | select(.tap == "isopod-tap1" and .check == "tap-forwarding"))' \
		"no host check tap-forwarding for isopod-tap1"
}

@test "sign refuses a report without a live tap's tc-filter or broker check, or without the netstate check before or after the probes" {
	sign_refuses 'del(.host_checks[] | select(.tap == "isopod-tap1" and .check == "tc-filter"))' \
		"no host check tc-filter for isopod-tap1"
	[ "$status" -eq 1 ]
	sign_refuses 'del(.host_checks[] | select(.check == "netstate" and .when == "after"))' \
		"no host check netstate after the probes"
	sign_refuses 'del(.host_checks[] | select(.check == "netstate"))' \
		"no host check netstate before the probes"
	sign_refuses '(.host_checks[] | select(.check == "tc-filter" and .tap == "isopod-tap0") | .ok) = false' \
		"host check tc-filter on isopod-tap0 is not ok"
	# the broker of the VM on each slot (a doctor before that check: refused)
	sign_refuses 'del(.host_checks[] | select(.tap == "isopod-tap0" and .check == "broker"))' \
		"no host check broker for isopod-tap0"
	sign_refuses '(.host_checks[] | select(.check == "broker" and .tap == "isopod-tap1") | .ok) = false' \
		"host check broker on isopod-tap1 is not ok"
}

@test "sign refuses a report whose recorded subjects are not the live host's now, naming each" {
	local q
	q=$(command -v qemu-system-x86_64)
	report "$BATS_TEST_TMPDIR/r.json"
	jq -e '.subjects | length > 5 and any(.[]; .name == "qemu") and any(.[]; .name == "ruleset/nftables")' \
		"$BATS_TEST_TMPDIR/r.json"
	cp "$q" "$BATS_TEST_TMPDIR/qemu.orig"
	echo '# changed after the doctor ran' >>"$q"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r.json"
	cp "$BATS_TEST_TMPDIR/qemu.orig" "$q"
	echo "$stderr"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	[[ "$stderr" == *"subject qemu: the doctor tested"* ]]
	[[ "$stderr" == *"1 subject(s) differ"* ]]
	# A subject the doctor did not record, one it recorded that is gone.
	jq '.subjects |= map(select(.name != "kernel/vmlinux")) | .subjects += [{name: "image/gone", digest: {sha256: ("0" * 64)}}]' \
		"$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"subject kernel/vmlinux: on this host now, but not in the report"* ]]
	[[ "$stderr" == *"subject image/gone: in the report, but not on this host now"* ]]
	jq 'del(.subjects)' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"subjects is missing"* ]]
	# The control: put back, the same report signs.
	attest sign -o "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/r.json" >/dev/null
}

@test "sign refuses a report finished more than 1 h ago (--max-report-age-s sets it, at most 24 h)" {
	local old
	report "$BATS_TEST_TMPDIR/r.json"
	old=$(date -u -d '-2 hours' +%Y-%m-%dT%H:%M:%SZ)
	jq --arg t "$old" '.started = $t | .finished = $t' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"finished $old, older than the 3600 s a report may be"* ]]
	run --separate-stderr attest sign --max-report-age-s 86401 "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	run --separate-stderr attest sign --max-report-age-s 60 "$BATS_TEST_TMPDIR/r.json"
	[ "$status" -eq 0 ] # the control: a fresh report signs under a lower limit
	old=$(date -u -d '-5 minutes' +%Y-%m-%dT%H:%M:%SZ)
	jq --arg t "$old" '.started = $t | .finished = $t' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign --max-report-age-s 60 "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"older than the 60 s"* ]]
	run --separate-stderr attest sign --max-report-age-s 86400 "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 0 ]
}

@test "sign refuses another host's report and one already older than the expiry" {
	report "$BATS_TEST_TMPDIR/r.json"
	jq '.host.id = "0000"' "$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"host.id 0000 is not this host's"* ]]
	jq '.started = "2020-01-01T00:00:00Z" | .finished = "2020-01-01T00:10:00Z"' \
		"$BATS_TEST_TMPDIR/r.json" >"$BATS_TEST_TMPDIR/r2.json"
	run --separate-stderr attest sign "$BATS_TEST_TMPDIR/r2.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"older than the expiry"* ]]
}

# poison_cache PATH: DIR/digests.json claims PATH's current stat for the
# digest recorded there before PATH changed.
poison_cache() {
	python3 - "$ISOPOD_ATTEST_DIR/digests.json" "$1" <<'PY'
import json, os, sys
c, p = sys.argv[1], sys.argv[2]
d = json.load(open(c))
st = os.stat(p)
d[p].update(dev=st.st_dev, ino=st.st_ino, size=st.st_size, mtime_s=int(st.st_mtime),
            mtime_ns=st.st_mtime_ns % 10**9, ctime_s=int(st.st_ctime), ctime_ns=st.st_ctime_ns % 10**9)
json.dump(d, open(c + ".new", "w"))
os.chmod(c + ".new", 0o600)
os.replace(c + ".new", c)
PY
}

@test "verify checks the key directory, the pinned key, the digest cache and the state file like sign does" {
	local q k="$ISOPOD_ATTEST_DIR"
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	chmod 777 "$k"
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	chmod 700 "$k"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"key directory $k must be owned by root with mode 0700"* ]]
	chmod 666 "$k/key.pub"
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	chmod 644 "$k/key.pub"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"public key $k/key.pub must be"* ]]
	cp "$k/key.pub" "$BATS_TEST_TMPDIR/pub"
	run --separate-stderr attest verify --pubkey "$BATS_TEST_TMPDIR/pub" "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 0 ] # the control: a root-owned 0644 copy verifies
	chown 65534 "$BATS_TEST_TMPDIR/pub"
	run --separate-stderr attest verify --pubkey "$BATS_TEST_TMPDIR/pub" "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 111 ]
	ln -s "$BATS_TEST_TMPDIR/pub" "$BATS_TEST_TMPDIR/publink"
	run --separate-stderr attest verify --pubkey "$BATS_TEST_TMPDIR/publink" "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 111 ]
	# The state file: not root's 0600, refused.
	chmod 644 "$k"/verified-*.json
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	chmod 600 "$k"/verified-*.json
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"verify state"*"must be a regular file owned by root with mode 0600"* ]]
	# A poisoned cache hides a changed QEMU only when it is root's 0600 (the
	# control: root alone can do that); anyone else's is ignored.
	q=$(readlink -f "$(command -v qemu-system-x86_64)")
	cp "$q" "$BATS_TEST_TMPDIR/qemu.orig"
	echo '# changed' >>"$q"
	poison_cache "$q"
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 0 ]
	chown 65534 "$k/digests.json"
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/qemu.orig" "$q"
	echo "$output"
	[ "$status" -eq 1 ]
	jq -e 'any(.failures[]; .subject == "qemu")' <<<"$output"
	[[ "$stderr" == *"digest cache $k/digests.json is not root's 0600 file: ignored"* ]]
	rm -f "$k/digests.json"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

# resign JQ: $BATS_TEST_TMPDIR/env.json's statement changed by JQ and
# signed with the key (dsse.py: a valid signature) into bad.json.
resign() {
	jq -r .payload "$BATS_TEST_TMPDIR/env.json" | base64 -d | jq -c "$1" >"$BATS_TEST_TMPDIR/stmt2.json"
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" envelope "$ISOPOD_ATTEST_DIR/key" \
		"$BATS_TEST_TMPDIR/stmt2.json" >"$BATS_TEST_TMPDIR/bad.json"
}

@test "verify compares the subjects' paths: the same binaries found through another ISOPOD_LIBEXEC fail, naming each" {
	local alt="$BATS_TEST_TMPDIR/libexec"
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	cp -a "$ISOPOD_LIBEXEC" "$alt"
	ISOPOD_LIBEXEC=$alt run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	echo "$output"
	[ "$status" -eq 1 ]
	jq -e --arg p "$alt/isopod-attest" 'any(.failures[]; .subject == "bin/isopod-attest" and (.why | contains("path differs")) and (.why | contains($p)))' <<<"$output"
	# Same bytes: no digest differs.
	jq -e 'all(.failures[]; .why | contains("path differs"))' <<<"$output"
}

@test "verify refuses an expired attestation, naming predicate.expires" {
	local t1 t2
	# No sleeping on a loaded host: the same statement signed with its
	# times 2 h and 1 h in the past; the control (the times of now) verifies.
	sign_fresh
	t2=$(date -u -d '-2 hours' +%Y-%m-%dT%H:%M:%SZ)
	t1=$(date -u -d '-1 hours' +%Y-%m-%dT%H:%M:%SZ)
	resign '.'
	verify_ok "$BATS_TEST_TMPDIR/bad.json"
	resign ".predicate |= (.started = \"$t2\" | .finished = \"$t2\" | .signed = \"$t2\" | .expires = \"$t1\")"
	verify_fails predicate.expires "$BATS_TEST_TMPDIR/bad.json"
	[[ "$output" == *"expired at $t1"* ]]
	[ "$(jq '.failures | length' <<<"$output")" -eq 1 ]
}

@test "verify: times exactly YYYY-MM-DDTHH:MM:SSZ, started <= finished <= signed < expires, expires at most --max-validity-s (24 h) after finished" {
	sign_fresh
	resign '.'
	verify_ok "$BATS_TEST_TMPDIR/bad.json" # the control
	resign '.predicate.expires |= sub("T"; " ")'
	verify_fails predicate.expires "$BATS_TEST_TMPDIR/bad.json"
	resign '.predicate.expires = "2099-02-31T00:00:00Z"'
	verify_fails predicate.expires "$BATS_TEST_TMPDIR/bad.json"
	resign '.predicate.finished |= sub("Z$"; "+00:00")'
	verify_fails predicate.finished "$BATS_TEST_TMPDIR/bad.json"
	resign '.predicate.signed = "2000-01-01T00:00:00Z"'
	verify_fails predicate.signed "$BATS_TEST_TMPDIR/bad.json"
	resign '.predicate.started = "2099-01-01T00:00:00Z"'
	verify_fails predicate.finished "$BATS_TEST_TMPDIR/bad.json"
	resign '.predicate.expires = .predicate.signed'
	verify_fails predicate.expires "$BATS_TEST_TMPDIR/bad.json"
	[[ "$output" == *"not after signed"* ]]
	sign_fresh --expires-s 90000
	verify_fails predicate.expires "$BATS_TEST_TMPDIR/env.json"
	[[ "$output" == *"90000 s after finished, over the 86400 s"* ]]
	run --separate-stderr attest verify --max-validity-s 90000 "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 0 ]
}

@test "verify refuses an unknown key: signed with another key pair, verified with the pinned one" {
	local other="$BATS_TEST_TMPDIR/other"
	"$ISOPOD_SRC/bin/isopod-attest" keygen --dir "$other" >/dev/null
	report "$BATS_TEST_TMPDIR/r.json"
	attest sign --dir "$other" -o "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/r.json" >/dev/null
	run attest verify --dir "$other" --state "$BATS_TEST_TMPDIR/seen.json" "$BATS_TEST_TMPDIR/env.json"
	[ "$status" -eq 0 ] # the control: with its own key it verifies
	verify_fails signatures "$BATS_TEST_TMPDIR/env.json"
	[[ "$output" == *"no signature verifies with the pinned key"* ]]
}

@test "verify refuses one flipped payload byte" {
	sign_fresh
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" flip "$BATS_TEST_TMPDIR/env.json" payload \
		>"$BATS_TEST_TMPDIR/bad.json"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	verify_fails signatures "$BATS_TEST_TMPDIR/bad.json"
}

@test "verify refuses one flipped signature byte" {
	sign_fresh
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" flip "$BATS_TEST_TMPDIR/env.json" sig \
		>"$BATS_TEST_TMPDIR/bad.json"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	verify_fails signatures "$BATS_TEST_TMPDIR/bad.json"
}

@test "verify refuses a swapped payloadType: unsigned (signature) and signed by the right key (payloadType)" {
	sign_fresh
	jq -c '.payloadType = "application/json"' "$BATS_TEST_TMPDIR/env.json" >"$BATS_TEST_TMPDIR/bad.json"
	verify_fails signatures "$BATS_TEST_TMPDIR/bad.json"
	# The same payload really signed with the pinned key under another type.
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" resign "$BATS_TEST_TMPDIR/env.json" \
		"$ISOPOD_ATTEST_DIR/key" application/json >"$BATS_TEST_TMPDIR/bad.json"
	verify_fails payloadType "$BATS_TEST_TMPDIR/bad.json"
	# The control: resigned with the right type it verifies.
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" resign "$BATS_TEST_TMPDIR/env.json" \
		"$ISOPOD_ATTEST_DIR/key" application/vnd.in-toto+json >"$BATS_TEST_TMPDIR/good.json"
	verify_ok "$BATS_TEST_TMPDIR/good.json"
}

@test "verify refuses an older sequence replayed after a newer one verified; the sequence only grows" {
	local s1 s2
	sign_fresh
	mv "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/old.json"
	verify_ok "$BATS_TEST_TMPDIR/old.json" # while it is the newest: fine
	sign_fresh
	s1=$(jq -r .payload "$BATS_TEST_TMPDIR/old.json" | base64 -d | jq .predicate.sequence)
	s2=$(jq -r .payload "$BATS_TEST_TMPDIR/env.json" | base64 -d | jq .predicate.sequence)
	[ "$s2" -gt "$s1" ]
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	verify_ok "$BATS_TEST_TMPDIR/env.json" # the same one again: fine
	verify_fails predicate.sequence "$BATS_TEST_TMPDIR/old.json"
	[[ "$output" == *"is older than the last one verified ($s2): a replay"* ]]
}

@test "an older attestation does not verify again once the verifier's state is deleted: the signer's DIR/sequence decides; no DIR/sequence, no valid attestation" {
	sign_fresh
	cp "$BATS_TEST_TMPDIR/env.json" "$BATS_TEST_TMPDIR/old.json"
	verify_ok "$BATS_TEST_TMPDIR/old.json"
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	rm -f "$ISOPOD_ATTEST_DIR"/verified-*.json
	verify_fails predicate.sequence "$BATS_TEST_TMPDIR/old.json"
	[[ "$output" == *"is not the signer's latest"* ]]
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	mv "$ISOPOD_ATTEST_DIR/sequence" "$BATS_TEST_TMPDIR/sequence"
	rm -f "$ISOPOD_ATTEST_DIR"/verified-*.json
	run --separate-stderr attest verify "$BATS_TEST_TMPDIR/env.json"
	mv "$BATS_TEST_TMPDIR/sequence" "$ISOPOD_ATTEST_DIR/sequence"
	[ "$status" -eq 1 ]
	jq -e 'any(.failures[]; .field == "predicate.sequence" and (.why | test("signer.s counter")))' <<<"$output"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "a rule added after signing makes verify fail, naming the ruleset; removed again, it verifies" {
	local h
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl add rule inet isopod forward iifname "isopod-tap0" accept
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	h=$(nftl -a list chain inet isopod forward | sed -n 's/.*iifname "isopod-tap0" accept # handle \([0-9]*\)$/\1/p')
	[ -n "$h" ]
	nftl delete rule inet isopod forward handle "$h"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "a rule removed after signing makes verify fail; put back (with a new handle) it verifies" {
	local h h2
	sign_fresh
	h=$(nftl -a list chain inet isopod forward | sed -n 's/.*oifname "isopod-tap\*" counter packets [0-9]* bytes [0-9]* drop # handle \([0-9]*\)$/\1/p')
	[ -n "$h" ]
	nftl delete rule inet isopod forward handle "$h"
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl add rule inet isopod forward oifname '"isopod-tap*"' counter drop
	h2=$(nftl -a list chain inet isopod forward | sed -n 's/.*oifname "isopod-tap\*" counter packets [0-9]* bytes [0-9]* drop # handle \([0-9]*\)$/\1/p')
	[ -n "$h2" ] && [ "$h2" != "$h" ] || false
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "sets, maps and anonymous sets count: an element removed, a map's verdict changed, an anonymous set changed each fail verify; put back, it verifies" {
	local h
	nftl add chain inet isopod t70c
	nftl add chain inet isopod t70d
	nftl add set inet isopod t70s '{ type ipv4_addr; elements = { 10.9.9.1, 10.9.9.2 } }'
	nftl add map inet isopod t70m '{ type ipv4_addr : verdict; elements = { 10.9.9.1 : drop, 10.9.9.2 : jump t70d } }'
	nftl add rule inet isopod t70c ip daddr '{ 10.9.8.1, 10.9.8.2 }' drop
	nftl add rule inet isopod t70c ip daddr @t70s drop
	nftl add rule inet isopod t70c ip daddr vmap @t70m
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl delete element inet isopod t70s '{ 10.9.9.2 }'
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl add element inet isopod t70s '{ 10.9.9.2 }'
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl delete element inet isopod t70m '{ 10.9.9.1 }'
	nftl add element inet isopod t70m '{ 10.9.9.1 : accept }'
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl delete element inet isopod t70m '{ 10.9.9.1 }'
	nftl add element inet isopod t70m '{ 10.9.9.1 : drop }'
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	# The anonymous set replaced by another of the same size (the kernel
	# reuses the freed name __set<N>), then put back.
	h=$(nftl -a list chain inet isopod t70c | awk '/10\.9\.8\./ { print $NF }')
	nftl delete rule inet isopod t70c handle "$h"
	nftl insert rule inet isopod t70c ip daddr '{ 10.9.8.1, 10.9.8.3 }' drop
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	h=$(nftl -a list chain inet isopod t70c | awk '/10\.9\.8\./ { print $NF }')
	nftl delete rule inet isopod t70c handle "$h"
	nftl insert rule inet isopod t70c ip daddr '{ 10.9.8.1, 10.9.8.2 }' drop
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl flush chain inet isopod t70c
	nftl delete chain inet isopod t70c
	nftl delete map inet isopod t70m
	nftl delete chain inet isopod t70d
	nftl delete set inet isopod t70s
}

@test "other tables: a netdev table (an ingress chain forwarding to lo) or another table's new base chain fails verify; rules in another table's chains do not count" {
	nftl add table ip t70other
	nftl add chain ip t70other fw '{ type filter hook forward priority 0; policy accept; }'
	sign_fresh
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	# Docker-style churn: rules come and go in another table's chains.
	nftl add rule ip t70other fw ip daddr 10.9.7.1 accept
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl add table netdev evil
	nftl add chain netdev evil in '{ type filter hook ingress device lo priority 0; }'
	nftl add rule netdev evil in fwd to lo
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl delete table netdev evil
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl add chain ip t70other pre '{ type filter hook prerouting priority -300; policy accept; }'
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl delete chain ip t70other pre
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl chain ip t70other fw '{ policy drop; }'
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl delete table ip t70other
}

@test "counters moving after signing (a guest's denied packets) do not change the ruleset's digest" {
	sign_fresh
	nftl list table inet isopod >"$BATS_TEST_TMPDIR/before"
	# The tap's tc filter drops these before the table counts them: out
	# for the pings (it is no part of the ruleset), back by netsetup after.
	lab exec tc filter del dev isopod-tap0 ingress
	lab fakevm 0 60
	lab gexec 0 busybox ping -c1 -W1 169.254.169.254 || :
	lab gexec 0 busybox ping -c1 -W1 203.0.113.1 || :
	lab rmvm 0
	nftl list table inet isopod >"$BATS_TEST_TMPDIR/after"
	# The control: some counter really moved.
	run cmp -s "$BATS_TEST_TMPDIR/before" "$BATS_TEST_TMPDIR/after"
	[ "$status" -eq 1 ]
	grep -Eq 'counter packets [1-9]' "$BATS_TEST_TMPDIR/after"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	lab exec "$ISOPOD_SRC/bin/isopod-netsetup" --slots 2 --user 0 >/dev/null
}

@test "the table flushed or deleted after signing: verify fails; netsetup again: it verifies" {
	sign_fresh
	nftl flush table inet isopod
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	lab exec "$ISOPOD_SRC/bin/isopod-netsetup" --slots 2 --user 0 >/dev/null
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	nftl delete table inet isopod
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	nftl delete table arp isopod
	verify_fails ruleset/nftables "$BATS_TEST_TMPDIR/env.json"
	[[ "$output" == *"no table named isopod"* ]]
	lab exec "$ISOPOD_SRC/bin/isopod-netsetup" --slots 2 --user 0 >/dev/null
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "the QEMU binary changed after signing: verify fails naming qemu" {
	local q="$BATS_FILE_TMPDIR/path/qemu-system-x86_64"
	sign_fresh
	cp "$q" "$BATS_TEST_TMPDIR/q"
	echo '# changed' >>"$q"
	verify_fails qemu "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/q" "$q"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "the kernel or initramfs changed after signing: verify fails naming it" {
	local k
	k="$ISOPOD_HOME/kernels/$(cat "$ISOPOD_HOME/kernels/current")"
	sign_fresh
	cp "$k/vmlinux" "$BATS_TEST_TMPDIR/v"
	echo x >>"$k/vmlinux"
	verify_fails kernel/vmlinux "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/v" "$k/vmlinux"
	cp "$k/initramfs.cpio" "$BATS_TEST_TMPDIR/i"
	echo x >>"$k/initramfs.cpio"
	verify_fails kernel/initramfs "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/i" "$k/initramfs.cpio"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "a base image changed after signing fails naming it (also in place, same size and mtime); a flavor registered since is not signed" {
	local img
	img="$ISOPOD_HOME/images/base-$(cat "$ISOPOD_HOME/images/current-debian").img"
	sign_fresh
	cp -p "$img" "$BATS_TEST_TMPDIR/img"
	echo x >>"$img"
	verify_fails image/debian "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/img" "$img"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	# The digest cache (DIR/digests.json, by stat): a change in place that
	# keeps the size and puts the mtime back is still seen (ctime moved).
	touch -r "$img" "$BATS_TEST_TMPDIR/ref"
	stat -c '%s %y' "$img" >"$BATS_TEST_TMPDIR/stat.before"
	printf 'X' | dd of="$img" bs=1 seek=0 conv=notrunc status=none
	touch -r "$BATS_TEST_TMPDIR/ref" "$img"
	[ "$(stat -c '%s %y' "$img")" = "$(cat "$BATS_TEST_TMPDIR/stat.before")" ]
	verify_fails image/debian "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/img" "$img"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	cp "$ISOPOD_HOME/images/current-base" "$ISOPOD_HOME/images/current-extra"
	verify_fails image/extra "$BATS_TEST_TMPDIR/env.json"
	[[ "$output" == *"on this host now, but not signed"* ]]
	rm "$ISOPOD_HOME/images/current-extra"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "an isopod binary changed after signing fails naming it; a new one is not signed; the front end counts" {
	sign_fresh
	cp "$ISOPOD_LIBEXEC/isopod-boot" "$BATS_TEST_TMPDIR/b"
	printf 'x' >>"$ISOPOD_LIBEXEC/isopod-boot"
	verify_fails bin/isopod-boot "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/b" "$ISOPOD_LIBEXEC/isopod-boot"
	cp "$ISOPOD_LIBEXEC/isopod-stop" "$ISOPOD_LIBEXEC/isopod-new"
	verify_fails bin/isopod-new "$BATS_TEST_TMPDIR/env.json"
	rm "$ISOPOD_LIBEXEC/isopod-new"
	cp "$ISOPOD_LIBEXEC/isopod" "$BATS_TEST_TMPDIR/fe"
	echo '# changed' >>"$ISOPOD_LIBEXEC/isopod"
	verify_fails bin/isopod "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/fe" "$ISOPOD_LIBEXEC/isopod"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
}

@test "the effective configuration changed after signing: verify fails naming config/host or config/user" {
	sign_fresh
	cp "$LAB_CONF" "$BATS_TEST_TMPDIR/conf"
	echo 'allow_range = 198.18.0.0/15' >>"$LAB_CONF"
	verify_fails config/host "$BATS_TEST_TMPDIR/env.json"
	cp "$BATS_TEST_TMPDIR/conf" "$LAB_CONF"
	verify_ok "$BATS_TEST_TMPDIR/env.json"
	echo 'net = open' >"$BATS_TEST_TMPDIR/user.conf"
	ISOPOD_CONFIG="$BATS_TEST_TMPDIR/user.conf" verify_fails config/user "$BATS_TEST_TMPDIR/env.json"
}

@test "verify refuses another host's attestation and a malformed envelope, naming the field" {
	sign_fresh
	printf '{"payload":' >"$BATS_TEST_TMPDIR/bad.json"
	verify_fails envelope "$BATS_TEST_TMPDIR/bad.json"
	jq -c 'del(.signatures)' "$BATS_TEST_TMPDIR/env.json" >"$BATS_TEST_TMPDIR/bad.json"
	verify_fails signatures "$BATS_TEST_TMPDIR/bad.json"
	# A statement for another host, validly signed with the pinned key.
	jq -r .payload "$BATS_TEST_TMPDIR/env.json" | base64 -d |
		jq -c '.predicate.host.id = "0000"' >"$BATS_TEST_TMPDIR/stmt.json"
	jq -c --arg p "$(base64 -w0 <"$BATS_TEST_TMPDIR/stmt.json")" '.payload = $p' \
		"$BATS_TEST_TMPDIR/env.json" >"$BATS_TEST_TMPDIR/x.json"
	"$DSSE_PY" "$BATS_TEST_DIRNAME/attest/dsse.py" resign "$BATS_TEST_TMPDIR/x.json" \
		"$ISOPOD_ATTEST_DIR/key" application/vnd.in-toto+json >"$BATS_TEST_TMPDIR/bad.json"
	verify_fails predicate.host.id "$BATS_TEST_TMPDIR/bad.json"
}
