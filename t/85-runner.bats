#!/usr/bin/env bats
# shellcheck disable=SC2154 # $stderr: set by bats' run --separate-stderr
# shellcheck disable=SC1010 # "done" is a state directory here, an argument
# shellcheck disable=SC2016 # single quotes: JSON and code for jq, sh -c, eval
# shellcheck disable=SC2030,SC2031 # $RUNNER: each test is its own subshell
# isopod-runner (issue 10): jobs from a spool, run by `isopod run` in real
# VMs (--net none, warm: about half a second each under TCG), only while
# the host's attestation verifies.
#
# The runner, isopod-attest and netsetup run in the host netns of a sealed
# lab (t/lab/lab.sh), as in t/70-attest.bats: the ruleset the attestation
# covers is the lab's, and flushing it touches nothing outside.  The store
# has the real kernel and base image (jobs boot); the doctor's reports are
# hand-made and passing (its contract: doc/INTERFACES.md "Doctor report").
# Every wait is bounded (wait_until).

load helpers
[ -z "${LAB_CONF-}" ] || export ISOPOD_SYSCONFIG=$LAB_CONF

RECHECK=2

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces, a root-owned key"
	isopod_lab_up "t85r$$" --slots 2
	# One flavor: every base image is a subject, hashed at the first sign.
	export ISOPOD_FLAVORS=base
	isopod_setup_file --images
	export ISOPOD_ATTEST_DIR="$BATS_FILE_TMPDIR/keys"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >/dev/null
}

teardown_file() {
	isopod_teardown_file
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

setup() {
	SPOOL="$BATS_TEST_TMPDIR/spool"
	ATT="$BATS_TEST_TMPDIR/att/attestation.json"
	mkdir -p "$SPOOL/queue" "${ATT%/*}"
	RUNNER=
	sign
}

teardown() {
	# A runner left by a failed test: killed (by its pid), and its jobs'
	# VMs given the time to stop (workers stop them on the runner's death).
	if [ -n "$RUNNER" ] && kill -0 "$RUNNER" 2>/dev/null; then
		kill -KILL "$RUNNER"
		wait "$RUNNER" 2>/dev/null || :
	fi
	wait_until 60 no_vm_running || :
	# fake front ends (fake_libexec) that outlived a failed test: their groups
	if [ -f "$BATS_TEST_TMPDIR/fronts" ]; then
		while read -r pid _; do kill -KILL -- "-$pid" 2>/dev/null || :; done <"$BATS_TEST_TMPDIR/fronts"
	fi
	[ -n "${BATS_TEST_COMPLETED-}" ] || [ ! -f "$SPOOL.err" ] || sed 's/^/# runner: /' "$SPOOL.err" | tail -n 20 >&3
}

netsetup() { sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 2 --user 0 >/dev/null; }
innet() { ip netns exec "$LAB_NAME-host" "$@"; }
attest() { innet "$ISOPOD_SRC/bin/isopod-attest" "$@"; }

# wait_until SECS CMD...: CMD succeeds within SECS seconds (polled).
wait_until() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		if [ "$SECONDS" -ge "$end" ]; then
			echo "wait_until: still not true: $*" >&2
			return 1
		fi
		sleep 0.2
	done
}

no_vm_running() { [ -z "$(isopod vm ls | jq -r 'select(.running) | .id')" ]; }
vms_running() { [ "$(isopod vm ls | jq -r 'select(.running) | .id' | wc -l)" -ge "$1" ]; }
# count STATE: the jobs in a state directory (hidden files are not jobs)
count() { find "$SPOOL/$1" -mindepth 1 -maxdepth 1 ! -name '.*' 2>/dev/null | wc -l; }
is() { [ "$(count "$1")" -eq "$2" ]; }
status_is() { jq -e --arg s "$1" '.state == $s' "$SPOOL/status.json" >/dev/null 2>&1; }
started() { [ -f "$SPOOL/running/$1/state.json" ] && [ "$(jq .front_pid "$SPOOL/running/$1/state.json")" -gt 0 ]; }

# sign: a passing report of the live host (a full adverse run: every live
# mode's VM and classes, the host checks; adverse_coverage), signed into $ATT now.
sign() {
	local now subj cov
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	subj=$(attest subjects | jq -c .subjects)
	cov=$(adverse_coverage "$LAB_NAME-host")
	jq -n --arg id "$(cat /etc/machine-id)" --arg now "$now" --argjson s "$subj" --argjson c "$cov" \
		'{doctor: {version: "test", suite: "adverse"}, host: {id: $id, hostname: "lab"},
		  started: $now, finished: $now, subjects: $s, verdict: "pass", setup: {ok: true},
		  vms: $c.vms, host_checks: $c.host_checks, probes: $c.probes,
		  counts: {probes: ($c.probes | length), pass: ($c.probes | length), fail: 0, error: 0}}' \
		>"$BATS_TEST_TMPDIR/report.json"
	attest sign -o "$ATT" "$BATS_TEST_TMPDIR/report.json" >/dev/null
}

# job NAME JSON: written beside the queue, then renamed in (as writers must).
job() {
	printf '%s\n' "$2" >"$SPOOL/.$1.tmp"
	mv "$SPOOL/.$1.tmp" "$SPOOL/queue/$1.json"
}

# fake_libexec: $LX, a libexec whose isopod-attest always verifies (each
# call a line in $BATS_TEST_TMPDIR/verifies) and whose front end isopod
# starts no VM: it appends "PID LASTWORD" to $BATS_TEST_TMPDIR/fronts and
# says ok, or, when the job's last word is "hang", ignores SIGTERM and
# sleeps, or when it is "overrun", sleeps and answers SIGTERM as isopod
# run does (its own ok:false result, kind interrupted, its output so far),
# or when it is "big", says ok in 2 MB.  For the runner's own logic, fast; run with ISOPOD_LIBEXEC=$LX.
fake_libexec() {
	LX="$BATS_TEST_TMPDIR/libexec"
	mkdir -p "$LX"
	printf '#!/bin/sh\necho x >>"%s/verifies"\necho '\''{"valid":true,"failures":[]}'\''\n' \
		"$BATS_TEST_TMPDIR" >"$LX/isopod-attest"
	cat >"$LX/isopod" <<F
#!/bin/sh
for a; do last=\$a; done
echo "\$\$ \$last" >>"$BATS_TEST_TMPDIR/fronts"
echo "\$*" >>"$BATS_TEST_TMPDIR/args"
if [ "\$last" = hang ]; then trap '' TERM; sleep 300; fi
if [ "\$last" = overrun ]; then
	trap 'kill \$s; echo '\''{"ok": false, "error_kind": "interrupted", "error": "interrupted by SIGTERM", "stdout": "so far"}'\''; exit 143' TERM
	sleep 300 & s=\$!; wait
fi
if [ "\$last" = big ]; then
	printf '{"ok": true, "exit_code": 0, "stdout": "'; head -c 2000000 /dev/zero | tr '\\0' x; echo '"}'
	exit 0
fi
echo '{"ok": true, "exit_code": 0}'
F
	chmod +x "$LX/isopod-attest" "$LX/isopod"
}
ran() { [ "$({ cat "$BATS_TEST_TMPDIR/fronts" 2>/dev/null || :; } | grep -c " $1\$")" -eq "$2" ]; }

# runner [OPTION...]: started in the lab's host netns, in the background
# ($RUNNER: its pid); returns once status.json says it runs (or refused).
runner() {
	# ip netns exec execs the program: $! is the runner's pid (a function
	# run in the background would be a subshell's).
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" --attestation "$ATT" \
		--recheck-s "$RECHECK" "$@" </dev/null >"$SPOOL.out" 2>>"$SPOOL.err" 3>&- &
	RUNNER=$!
	wait_until 10 eval '[ "$(readlink "/proc/$RUNNER/exe")" = "$ISOPOD_SRC/bin/isopod-runner" ] || ! kill -0 "$RUNNER"'
	wait_until 60 jq -e '.state != "starting"' "$SPOOL/status.json" >/dev/null 2>&1
}

# runner_exit SECS: the runner exits within SECS; its status in $rc.
runner_exit() {
	wait_until "$1" eval '! kill -0 "$RUNNER" 2>/dev/null'
	rc=0
	wait "$RUNNER" || rc=$?
	RUNNER=
}

@test "usage: -h prints the synopsis; bad --workers, --recheck-s, an operand: 100" {
	run "$ISOPOD_SRC/bin/isopod-runner" -h
	[ "$status" -eq 0 ]
	[[ "$output" == "usage: isopod-runner [--spool DIR] [--workers N]"* ]]
	# the man page's SYNOPSIS says the same
	[ "$output" = "usage: $(MANWIDTH=1000 man -l "$ISOPOD_SRC/man/isopod-runner.8" 2>/dev/null |
		awk '/^SYNOPSIS/ { getline; sub(/^ +/, ""); print; exit }')" ]
	for a in "--workers 0" "--workers 65" "--recheck-s 0" "--recheck-s x" "--net-max all" "extra"; do
		# shellcheck disable=SC2086 # split on purpose
		run --separate-stderr "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" $a
		[ "$status" -eq 100 ]
	done
}

# The spool holds the jobs, their results and stale.json: one another user
# may write, theirs, or a link is refused as isopod-slurm run --dir is
# (lib/util.c dir_own_open), before anything is made in it (no VM).
@test "--spool another user could write, theirs, a symbolic link or a file: 100 naming it, nothing made there" {
	local b="$BATS_TEST_TMPDIR/sp" d
	mkdir -p "$b/g" "$b/o" "$b/t" "$b/other" "$b/real"
	chmod 0770 "$b/g"
	chmod 0707 "$b/o"
	chmod 1777 "$b/t"
	chown 65534:65534 "$b/other"
	ln -s real "$b/lnk"
	: >"$b/file"
	# no attestation: a runner that took such a spool stops at it (111), never runs on
	for d in g o t other lnk file; do
		run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" --spool "$b/$d" \
			--attestation "$BATS_TEST_TMPDIR/none.json"
		echo "# $d: $status $stderr" >&3
		[ "$status" -eq 100 ] && [ -z "$output" ] || false
		[[ $stderr == *"isopod-runner: fatal: --spool $b/$d: "* ]]
	done
	[ -z "$(find "$b" -mindepth 2)" ] && [ ! -s "$b/file" ] || false
	# the control: ours, 0755 (others may read): past the check, to the attestation (111)
	chmod 0755 "$b/g"
	run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" --spool "$b/g" \
		--attestation "$BATS_TEST_TMPDIR/none.json"
	[ "$status" -eq 111 ] && [ -d "$b/g/queue" ] || false
}

@test "refuses to start without a valid attestation: 111, the reason on stderr and in status.json; nothing taken" {
	job a '{"argv": ["true"]}'
	run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" \
		--attestation "$BATS_TEST_TMPDIR/none.json"
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"isopod-runner: fatal: refusing to start: attestation $BATS_TEST_TMPDIR/none.json does not verify"* ]]
	jq -e '.state == "refused" and .attestation.valid == false and (.reason | test("does not verify"))' \
		"$SPOOL/status.json"
	# An older attestation after a newer one was signed: refused, naming the field.
	cp "$ATT" "$BATS_TEST_TMPDIR/old.json"
	sign
	run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" \
		--attestation "$BATS_TEST_TMPDIR/old.json"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"predicate.sequence"* ]]
	jq -e '.state == "refused" and (.reason | contains("predicate.sequence"))' "$SPOOL/status.json"
	[ -f "$SPOOL/queue/a.json" ]
	is running 0 && is done 0 && is failed 0 || false
	# The control: the fresh one starts.
	runner
	wait_until 60 is done 1
}

# The unit shipped (contrib/isopod-runner.service), as systemd reads it:
# every line parses (systemd-analyze verify warns, on stderr, about a key
# or value it ignores, and exits 0 all the same), and its ExecStart is
# options the runner takes: without an attestation it refuses (111), not a
# usage error (100) that the unit would never retry.
@test "the systemd unit shipped parses (systemd-analyze verify: no warning), drains by SIGTERM to the runner alone, and its ExecStart options are the runner's" {
	local u="$BATS_TEST_TMPDIR/isopod-runner.service" args
	command -v systemd-analyze >/dev/null || skip "no systemd-analyze"
	sed "s|^ExecStart=/usr/local/bin/isopod-runner|ExecStart=$ISOPOD_SRC/bin/isopod-runner|" \
		"$ISOPOD_SRC/contrib/isopod-runner.service" >"$u"
	grep -q "^ExecStart=$ISOPOD_SRC/bin/isopod-runner " "$u"
	run --separate-stderr systemd-analyze verify --man=no "$u"
	echo "$stderr"
	[ "$status" -eq 0 ] && [ -z "$stderr" ] || false
	grep -qx 'KillMode=mixed' "$u"
	grep -qx 'RestartPreventExitStatus=100 102' "$u"
	args=$(sed -n 's|^ExecStart=[^ ]* ||p' "$u" | sed "s|/var/spool/isopod|$SPOOL|")
	# shellcheck disable=SC2086 # the unit's words
	run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" $args --attestation "$BATS_TEST_TMPDIR/none.json"
	echo "$stderr"
	[ "$status" -eq 111 ]
	jq -e '.state == "refused"' "$SPOOL/status.json"
}

@test "acceptance: 20 jobs on 2 workers; the table flushed: paused within the recheck, jobs stay queued; netsetup + sign: resumed and finished" {
	local i t0 t1
	for i in $(seq -w 1 20); do
		job "j$i" "{\"argv\": [\"echo\", \"j$i\"], \"net\": \"none\", \"timeout_s\": 120}"
	done
	runner --workers 2
	wait_until 240 is done 20
	is queue 0 && is failed 0 && is interrupted 0 || false
	for i in $(seq -w 1 20); do
		jq -e --arg o "j$i" '.ok == true and .exit_code == 0 and .stdout == "\($o)\n" and .vm.id' \
			"$SPOOL/done/j$i/result.json" >/dev/null
		jq -e '.state == "done" and .exit == 0' "$SPOOL/done/j$i/state.json" >/dev/null
	done
	# The table flushed: verify fails, naming the ruleset.
	t0=$SECONDS
	innet nft flush table inet isopod
	run --separate-stderr attest verify "$ATT"
	[ "$status" -eq 1 ]
	json_is 'any(.failures[]; .subject == "ruleset/nftables")'
	wait_until $((RECHECK + 10)) status_is paused
	t1=$SECONDS
	echo "paused after $((t1 - t0)) s (recheck $RECHECK s)"
	[ $((t1 - t0)) -le $((RECHECK + 5)) ]
	jq -e '.attestation.valid == false and (.reason | contains("ruleset/nftables"))' "$SPOOL/status.json"
	for i in 1 2 3 4 5; do
		job "k$i" '{"argv": ["echo", "late"], "net": "none"}'
	done
	sleep $((3 * RECHECK))
	is queue 5 && is running 0 && is done 20 || false
	status_is paused
	# netsetup puts the same ruleset back: the old attestation verifies
	# again, but the host changed under it: still paused until a fresh one
	netsetup
	run --separate-stderr attest verify "$ATT"
	[ "$status" -eq 0 ]
	sleep $((2 * RECHECK))
	is queue 5 && is done 20 || false
	jq -e '.state == "paused" and (.reason | contains("verifies again, but the host changed"))' "$SPOOL/status.json"
	# a fresh attestation: it resumes and finishes them.
	sign
	wait_until 120 is done 25
	is queue 0 && is failed 0 || false
	status_is running
	jq -e '.ok and .stdout == "late\n"' "$SPOOL/done/k5/result.json"
}

@test "verified before every job, not only on the timer; a fresh attestation resumes at once (inotify)" {
	# recheck once an hour: only the check before the job can see the flush
	RECHECK=3600 runner
	job a '{"argv": ["true"], "net": "none"}'
	wait_until 60 is done 1
	innet nft flush table inet isopod
	job b '{"argv": ["true"], "net": "none"}'
	wait_until 10 status_is paused
	jq -e '.reason | contains("ruleset/nftables")' "$SPOOL/status.json"
	sleep 2
	is queue 1 && is running 0 && is done 1 || false
	netsetup
	sign
	wait_until 60 is done 2
	status_is running
}

# past_seen: the clock is past the second the runner last saw the host
# change (SPOOL/stale.json): a report made now is of a doctor run after it.
past_seen() { [[ "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$(jq -r .seen "$SPOOL/stale.json")" ]]; }

# runner_fg: the runner in the foreground, where it is expected to refuse
# (a runner that starts instead is stopped after 30 s: status 124).
runner_fg() { run --separate-stderr timeout 30 ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" --attestation "$ATT"; }

# flushed_paused: the table flushed under a running runner: paused,
# remembered in stale.json (the attestation's sequence); netsetup puts the
# bytes back and the old attestation verifies again.
flushed_paused() {
	innet nft flush table inet isopod
	wait_until $((RECHECK + 10)) status_is paused
	jq -e --argjson q "$(jq -r .payload "$ATT" | base64 -d | jq .predicate.sequence)" \
		'.sequence == $q and (.seen | test("^[0-9-]{10}T[0-9:]{8}Z$"))' "$SPOOL/stale.json"
	netsetup
	run --separate-stderr attest verify "$ATT"
	[ "$status" -eq 0 ]
}

@test "the host changed under it is remembered across a restart (stale.json): the old attestation is refused at the restart, an unreadable record refuses the start (111), a fresh one starts it" {
	local why
	runner
	flushed_paused
	kill -TERM "$RUNNER"
	runner_exit 20
	[ "$rc" -eq 0 ]
	# the same spool, the same attestation, verifying again: refused
	job a '{"argv": ["echo", "a"], "net": "none"}'
	runner_fg
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"verifies again, but the host changed"* ]]
	jq -e '.state == "refused" and (.reason | contains("verifies again"))' "$SPOOL/status.json"
	# a record that cannot be read is never taken for "nothing seen"
	cp "$SPOOL/stale.json" "$BATS_TEST_TMPDIR/stale.json"
	for why in '{"sequence": 1' '{"sequence": "1", "seen": "2026-01-01T00:00:00Z"}' \
		'{"sequence": 1, "seen": "yesterday"}' '[]'; do
		printf '%s\n' "$why" >"$SPOOL/stale.json"
		runner_fg
		[ "$status" -eq 111 ]
		[[ "$stderr" == *"refusing to start: unable to read what this spool's runner saw: $SPOOL/stale.json: not "* ]]
		jq -e '.state == "refused" and (.reason | contains("stale.json"))' "$SPOOL/status.json"
	done
	cp "$BATS_TEST_TMPDIR/stale.json" "$SPOOL/stale.json"
	is queue 1 && is done 0 || false
	# a fresh doctor run (after the change), signed: it starts and runs
	wait_until 5 past_seen
	sign
	runner
	status_is running
	wait_until 60 is done 1
}

@test "after the host changed, a higher sequence is not enough: the report from before, signed again, keeps it paused; a doctor run started since resumes it" {
	cp "$BATS_TEST_TMPDIR/report.json" "$BATS_TEST_TMPDIR/before.json"
	runner
	flushed_paused
	wait_until $((RECHECK + 10)) eval 'jq -e ".reason | contains(\"verifies again\")" "$SPOOL/status.json" >/dev/null'
	job a '{"argv": ["echo", "a"], "net": "none"}'
	# the report made before the flush, signed again: a higher sequence,
	# the same doctor run
	attest sign -o "$ATT" "$BATS_TEST_TMPDIR/before.json" >/dev/null
	run --separate-stderr attest verify "$ATT"
	[ "$status" -eq 0 ]
	jq -e --argjson q "$(jq .sequence "$SPOOL/stale.json")" --arg t "$(jq -r .started "$BATS_TEST_TMPDIR/before.json")" \
		'.sequence > $q and .started == $t' <<<"$output"
	wait_until $((RECHECK + 10)) eval 'jq -e ".reason | contains(\"is of a doctor run started\")" "$SPOOL/status.json" >/dev/null'
	sleep $((2 * RECHECK))
	jq -e '.state == "paused" and .attestation.verify.valid' "$SPOOL/status.json"
	is queue 1 && is done 0 || false
	# a report of a doctor run started after the change: resumed
	wait_until 5 past_seen
	sign
	wait_until 60 is done 1
	status_is running
}

@test "stale.json that cannot be written stops it (111), never paused on the old record; a FIFO or a symlink there refuses the start (111) at once (no VM)" {
	local ok='{"valid":true,"sequence":2,"started":"2026-06-01T00:00:00Z","finished":"2026-06-01T00:01:00Z","failures":[]}'
	local bad='{"valid":false,"sequence":2,"started":"2026-06-01T00:00:00Z","finished":"2026-06-01T00:01:00Z","failures":[{"subject":"ruleset/nftables","why":"sha256 differs"}]}'
	fake_libexec
	# a stand-in verifier: valid, until $BATS_TEST_TMPDIR/broken exists (a subject fails)
	printf '#!/bin/sh\nif [ -e "%s/broken" ]; then echo '\''%s'\''; exit 1; fi\necho '\''%s'\''\n' \
		"$BATS_TEST_TMPDIR" "$bad" "$ok" >"$LX/isopod-attest"
	# an earlier record (sequence 1); the rename over it fails (EBUSY: in a
	# private mount namespace it is a mount point), as ENOSPC or EROFS would
	printf '{"sequence": 1, "seen": "2026-01-01T00:00:00Z"}\n' >"$SPOOL/stale.json"
	ISOPOD_LIBEXEC=$LX unshare -m --propagation private sh -c 'mount --bind "$0" "$0" && exec "$@"' \
		"$SPOOL/stale.json" "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" --attestation "$ATT" \
		--recheck-s 3600 </dev/null >"$SPOOL.out" 2>>"$SPOOL.err" 3>&- &
	RUNNER=$!
	wait_until 10 status_is running
	touch "$BATS_TEST_TMPDIR/broken"
	kill -HUP "$RUNNER"
	runner_exit 20
	cat "$SPOOL.err"
	[ "$rc" -eq 111 ]
	grep -F "isopod-runner: fatal: refusing to go on: unable to record $SPOOL/stale.json (the host changed under an attestation)" "$SPOOL.err"
	jq -e '.state == "refused" and (.reason | contains("unable to record")) and .attestation.valid == false' \
		"$SPOOL/status.json"
	# the old record is all a restart would read: it is not running on it
	jq -e '.sequence == 1' "$SPOOL/stale.json"
	[ -z "$(find "$SPOOL" -maxdepth 1 -name 'stale.json.*')" ]
	# the control: the same, writable: recorded, paused, still running
	rm "$BATS_TEST_TMPDIR/broken" "$SPOOL/status.json"
	ISOPOD_LIBEXEC=$LX runner --recheck-s 3600
	status_is running
	touch "$BATS_TEST_TMPDIR/broken"
	kill -HUP "$RUNNER"
	wait_until 10 status_is paused
	jq -e '.sequence == 2 and .after == "2026-06-01T00:01:00Z"' "$SPOOL/stale.json"
	kill -0 "$RUNNER"
	kill -TERM "$RUNNER"
	runner_exit 20
	[ "$rc" -eq 0 ]
	# not a regular file: refused at once (a FIFO would hang the start), never "nothing seen"
	rm "$SPOOL/stale.json"
	mkfifo "$SPOOL/stale.json"
	runner_fg
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"refusing to start: unable to read what this spool's runner saw: $SPOOL/stale.json: not a regular file"* ]]
	rm "$SPOOL/stale.json"
	ln -s "$BATS_TEST_TMPDIR/nonexistent" "$SPOOL/stale.json"
	runner_fg
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"$SPOOL/stale.json: a symbolic link, not a regular file"* ]]
}

@test "mutation: with a verifier that always says valid, the flushed table goes unnoticed (the acceptance check would fail)" {
	local lx="$BATS_TEST_TMPDIR/libexec" f
	mkdir -p "$lx"
	for f in "$ISOPOD_SRC"/bin/isopod-*; do
		case $f in *.c) continue ;; esac
		cp "$f" "$lx/"
	done
	cp "$ISOPOD_SRC/sh/isopod" "$lx/isopod"
	printf '#!/bin/sh\necho '\''{"valid":true,"failures":[]}'\''\n' >"$lx/isopod-attest"
	ISOPOD_LIBEXEC=$lx runner --workers 1
	innet nft flush table inet isopod
	job m1 '{"argv": ["true"], "net": "none"}'
	job m2 '{"argv": ["true"], "net": "none"}'
	sleep $((3 * RECHECK))
	wait_until 60 is done 2
	status_is running
	netsetup
}

@test "provenance: true: the run signs an envelope in the job's directory, naming the attestation the runner checks; it verifies with --require-attestation; without commit_as or copy-out the front end refuses it (failed)" {
	local res sid
	runner
	job p '{"argv": ["true"], "net": "none", "commit_as": "t85-prov", "provenance": true}'
	job q '{"argv": ["true"], "net": "none", "provenance": true}'
	wait_until 120 eval 'is done 1 && is failed 1'
	res="$SPOOL/done/p/result.json"
	jq -e --arg p "$SPOOL/done/p/provenance.json" '.ok and .provenance.path == $p' "$res"
	sid=$(jq -r .commit.stage.id "$res")
	run --separate-stderr innet "$ISOPOD_SRC/sh/isopod" verify-artifact --require-attestation \
		"$ISOPOD_HOME/stages/$sid/layer.qcow2" "$SPOOL/done/p/provenance.json"
	echo "$output"
	[ "$status" -eq 0 ]
	jq -e --arg s "$(sha256sum <"$ATT" | cut -c1-64)" '.valid and .attestation.sha256 == $s and .attestation.valid' <<<"$output"
	# q asked for it with nothing to sign: the front end's refusal
	jq -e '.ok == false and (.error | contains("--provenance"))' "$SPOOL/failed/q/result.json"
	isopod stage rm t85-prov >/dev/null
}

@test "job fields map onto isopod run: argv, env, cwd, stdin, timeout_s; a guest failure is done, the front end's refusal failed" {
	job fields '{"argv": ["sh", "-c", "echo \"$A\"; pwd; cat; exit 3"], "env": {"A": "x y"},
		"cwd": "/tmp", "stdin": "in\n", "timeout_s": 60, "net": "none", "cold": false}'
	job badnet '{"argv": ["true"], "net": "bogus"}'
	job allownone '{"argv": ["true"], "net": "none", "allow": ["pkg.test"]}'
	runner
	wait_until 120 is done 1
	wait_until 30 is failed 2
	jq -e '.ok == true and .exit_code == 3 and .stdout == "x y\n/tmp\nin\n"' "$SPOOL/done/fields/result.json"
	jq -e '.state == "done" and .exit == 3' "$SPOOL/done/fields/state.json"
	[ -f "$SPOOL/done/fields/stderr.log" ]
	# The runner checks types and its own net ceiling (a mode it does not
	# rank is refused before anything runs); the front end checks the rest.
	jq -e '.ok == false and .error_kind == "usage" and (.error | contains("net bogus: not a mode"))' \
		"$SPOOL/failed/badnet/result.json"
	jq -e '.state == "failed"' "$SPOOL/failed/badnet/state.json"
	jq -e '.ok == false and (.error | contains("--allow needs --net filtered"))' \
		"$SPOOL/failed/allownone/result.json"
}

@test "malformed jobs fail, naming why, and never crash it: bad JSON, duplicate key, unknown key, wrong types, oversized, FIFO, symlink" {
	job ok '{"argv": ["true"], "net": "none"}'
	job trunc '{"argv": ['
	job dup '{"argv": ["true"], "argv": ["false"]}'
	job unknown '{"argv": ["true"], "timeout": 5}'
	job type '{"argv": "true"}'
	job emptyargv '{"argv": []}'
	job envkey '{"argv": ["true"], "env": {"A=B": "c"}}'
	job notobj '[1]'
	job nul '{"argv": ["a\u0000b"]}'
	head -c 70000 /dev/zero | tr '\0' ' ' >"$SPOOL/.big"
	printf '{"argv": ["true"]}' >>"$SPOOL/.big"
	mv "$SPOOL/.big" "$SPOOL/queue/big.json"
	mkfifo "$SPOOL/queue/fifo.json"
	printf '{"argv": ["true"]}\n' >"$BATS_TEST_TMPDIR/target.json"
	ln -s "$BATS_TEST_TMPDIR/target.json" "$SPOOL/queue/link.json"
	# not jobs: a writer's temporary file, other suffixes
	printf '{"argv": ["true"]}\n' >"$SPOOL/queue/.hidden.json"
	printf '{"argv": ["true"]}\n' >"$SPOOL/queue/x.json.part"
	runner
	wait_until 60 is failed 11
	wait_until 60 is done 1
	kill -0 "$RUNNER"
	f() { jq -e --arg w "$2" '.ok == false and .error_kind == "usage" and (.error | contains($w))' \
		"$SPOOL/failed/$1/result.json" >/dev/null || { cat "$SPOOL/failed/$1/result.json"; return 1; }; }
	f trunc "not one JSON object"
	f dup "duplicate"
	f dup "argv"
	f unknown "unknown key timeout"
	f type "argv: want an array"
	f emptyargv "argv: want an array of 1"
	f envkey "env: bad name A=B"
	f notobj "not a JSON object"
	f nul "not one JSON object"
	f big "over 65536 bytes"
	f fifo "not a regular file"
	f link "not a regular file"
	jq -e '.state == "failed" and (.reason | contains("duplicate"))' "$SPOOL/failed/dup/state.json"
	[ -f "$SPOOL/queue/.hidden.json" ] && [ -f "$SPOOL/queue/x.json.part" ] || false
	# nothing of the refused jobs ran: one VM record, the good job's
	[ "$(isopod vm ls | jq -r --arg v "$(jq -r .vm.id "$SPOOL/done/ok/result.json")" 'select(.id == $v) | .id' | wc -l)" -eq 1 ]
}

@test "a name is used once: the same name queued again fails, the first result kept; a second runner on the spool: 102" {
	job same '{"argv": ["echo", "first"], "net": "none"}'
	runner
	wait_until 60 is done 1
	job same '{"argv": ["echo", "second"], "net": "none"}'
	wait_until 30 is failed 1
	jq -e '.stdout == "first\n"' "$SPOOL/done/same/result.json"
	jq -e '.ok == false and (.error | contains("used before"))' "$SPOOL"/failed/same~*/result.json
	run --separate-stderr innet "$ISOPOD_SRC/bin/isopod-runner" --spool "$SPOOL" --attestation "$ATT"
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"another isopod-runner serves this spool"* ]]
}

@test "SIGTERM drains: the running jobs finish, queued ones stay, exit 0" {
	job a '{"argv": ["sleep", "4"], "net": "none", "timeout_s": 120}'
	job b '{"argv": ["sleep", "4"], "net": "none", "timeout_s": 120}'
	runner --workers 2
	wait_until 60 started a
	wait_until 60 started b
	job c '{"argv": ["true"], "net": "none"}'
	job d '{"argv": ["true"], "net": "none"}'
	kill -TERM "$RUNNER"
	wait_until 10 status_is draining
	runner_exit 120
	[ "$rc" -eq 0 ]
	is done 2 && is queue 2 && is running 0 && is interrupted 0 || false
	jq -e '.ok and .exit_code == 0' "$SPOOL/done/a/result.json" "$SPOOL/done/b/result.json"
	jq -e '.state == "stopped" and .workers.busy == 0' "$SPOOL/status.json"
	no_vm_running
}

@test "SIGKILL of a worker mid-run: its job interrupted with its logs, its VM stopped; the runner goes on" {
	local w
	job long '{"argv": ["sleep", "60"], "net": "none", "timeout_s": 120}'
	runner
	wait_until 60 started long
	wait_until 60 vms_running 1
	w=$(jq .worker_pid "$SPOOL/running/long/state.json")
	kill -KILL "$w"
	wait_until 30 is interrupted 1
	jq -e '.ok == false and .error_kind == "interrupted" and (.error | contains("signal 9"))' \
		"$SPOOL/interrupted/long/result.json"
	jq -e '.state == "interrupted" and .started and .finished' "$SPOOL/interrupted/long/state.json"
	[ -f "$SPOOL/interrupted/long/stderr.log" ] && [ -f "$SPOOL/interrupted/long/job.json" ] || false
	wait_until 30 no_vm_running
	job after '{"argv": ["true"], "net": "none"}'
	wait_until 60 is done 1
}

@test "SIGKILL of the runner mid-run: its workers interrupt their jobs and stop their VMs; a restart takes the queue from there" {
	job a '{"argv": ["sleep", "60"], "net": "none", "timeout_s": 120}'
	job b '{"argv": ["sleep", "60"], "net": "none", "timeout_s": 120}'
	runner --workers 2
	wait_until 60 started a
	wait_until 60 started b
	job c '{"argv": ["echo", "c"], "net": "none"}'
	kill -KILL "$RUNNER"
	wait "$RUNNER" || :
	RUNNER=
	# every job queued, done or interrupted (with its logs); no VM left
	wait_until 40 is running 0
	is interrupted 2 && is queue 1 || false
	for j in a b; do
		jq -e '.ok == false and .error_kind == "interrupted"' "$SPOOL/interrupted/$j/result.json"
		[ -f "$SPOOL/interrupted/$j/stderr.log" ]
	done
	wait_until 30 no_vm_running
	runner
	wait_until 60 is done 1
	jq -e '.stdout == "c\n"' "$SPOOL/done/c/result.json"
}

@test "kill points: claiming, claimed (runner) → requeued and run once; started (worker) → interrupted; result written (worker) → done" {
	# the claim cut short (directory and lock made, job not moved): removed at restart
	job z '{"argv": ["echo", "z"], "net": "none"}'
	ISOPOD_TEST_KILL_AT=runner-claiming runner
	runner_exit 30
	[ "$rc" -eq 137 ]
	[ -d "$SPOOL/running/z" ] && [ -f "$SPOOL/queue/z.json" ] || false
	runner
	wait_until 60 is done 1
	jq -e '.stdout == "z\n"' "$SPOOL/done/z/result.json"
	is running 0
	kill -TERM "$RUNNER"
	runner_exit 60

	job a '{"argv": ["echo", "a"], "net": "none"}'
	ISOPOD_TEST_KILL_AT=runner-claimed runner
	runner_exit 30
	[ "$rc" -eq 137 ]
	[ -f "$SPOOL/running/a/job.json" ] && [ ! -f "$SPOOL/running/a/state.json" ] || false
	is queue 0
	runner
	wait_until 60 is done 2
	jq -e '.stdout == "a\n"' "$SPOOL/done/a/result.json"
	is interrupted 0 && is running 0 || false
	kill -TERM "$RUNNER"
	runner_exit 60

	job b '{"argv": ["echo", "b"], "net": "none"}'
	ISOPOD_TEST_KILL_AT=worker-started runner
	wait_until 30 is interrupted 1
	jq -e '.error_kind == "interrupted" and (.error | contains("signal 9"))' "$SPOOL/interrupted/b/result.json"
	kill -TERM "$RUNNER"
	runner_exit 60

	job c '{"argv": ["echo", "c"], "net": "none"}'
	ISOPOD_TEST_KILL_AT=worker-result runner
	wait_until 60 is done 3
	jq -e '.ok and .stdout == "c\n"' "$SPOOL/done/c/result.json"
	jq -e '.state == "done" and (.reason | contains("signal 9"))' "$SPOOL/done/c/state.json"
	kill -TERM "$RUNNER"
	runner_exit 60
}

@test "a worker that cannot write state.json starts nothing: its job is requeued, runs once when it can" {
	fake_libexec
	job once '{"argv": ["once"]}'
	ISOPOD_LIBEXEC=$LX ISOPOD_TEST_FAIL_AT=worker-state runner --workers 1
	wait_until 30 grep -q 'unable to write .*/running/once/state.json' "$SPOOL.err"
	sleep 3
	# not started, so never a front end; requeued (or being retried)
	ran once 0
	is done 0 && is failed 0 && is interrupted 0 || false
	kill -TERM "$RUNNER"
	runner_exit 30
	is queue 1
	ISOPOD_LIBEXEC=$LX runner --workers 1
	wait_until 30 is done 1
	ran once 1
}

@test "a requeued job's leftover temporary files (a kill mid-write) do not block its directory" {
	fake_libexec
	job a '{"argv": ["a"]}'
	ISOPOD_LIBEXEC=$LX ISOPOD_TEST_KILL_AT=runner-claimed runner
	runner_exit 30
	[ "$rc" -eq 137 ]
	echo '{"state"' >"$SPOOL/running/a/state.json.tmp.12345"
	echo 'in' >"$SPOOL/running/a/stdin.tmp.12346"
	ISOPOD_LIBEXEC=$LX runner
	wait_until 30 is done 1
	ran a 1
	is running 0 && is failed 0 || false
	[ -f "$SPOOL/done/a/job.json" ]
}

@test "a killed worker's front end that ignores SIGTERM is killed (its group) after the grace; its slot stays busy until then" {
	local w f
	fake_libexec
	job a '{"argv": ["hang"]}'
	ISOPOD_LIBEXEC=$LX runner --workers 1
	wait_until 30 started a
	w=$(jq .worker_pid "$SPOOL/running/a/state.json")
	f=$(jq .front_pid "$SPOOL/running/a/state.json")
	kill -0 "$f"
	job b '{"argv": ["b"]}'
	kill -KILL "$w"
	# the front end outlives its worker: the job and its slot wait (b does not start)
	sleep 5
	kill -0 "$f"
	is running 1 && is interrupted 0 || false
	ran b 0
	# past the grace (20 s) its group is killed, the job interrupted, b runs
	wait_until 40 is interrupted 1
	run kill -0 "$f"
	[ "$status" -ne 0 ]
	jq -e '.error_kind == "interrupted" and (.error | contains("signal 9"))' "$SPOOL/interrupted/a/result.json"
	wait_until 30 is done 1
	ran b 1
	grep -q "front end (pid $f) outlived its worker" "$SPOOL.err"
}

@test "a front end past its budget (timeout_s + the grace) is stopped by the runner: failed, error_kind timeout (never interrupted), its own result kept" {
	fake_libexec
	job over '{"argv": ["overrun"], "timeout_s": 1}'
	job mute '{"argv": ["hang"], "timeout_s": 1}'
	ISOPOD_TEST_GRACE_S=1 ISOPOD_LIBEXEC=$LX runner --workers 2
	# over answers the SIGTERM with its result (kind interrupted), which
	# keeps its output but not its kind: no one asked it to stop
	wait_until 20 is failed 1
	jq -e '.ok == false and .error_kind == "timeout" and .stdout == "so far" and
		(.error | startswith("isopod run outlived its budget (1 s + 1 s) and the runner stopped it; its own result said: interrupted by SIGTERM"))' \
		"$SPOOL/failed/over/result.json"
	jq -e '.state == "failed" and (.reason | contains("outlived its budget")) and .exit == 143' "$SPOOL/failed/over/state.json"
	# mute ignores the SIGTERM: SIGKILL 20 s on, no result of its own
	wait_until 40 is failed 2
	jq -e '.ok == false and .error_kind == "timeout" and
		(.error | contains("the runner stopped it; it exited 137 without a result"))' "$SPOOL/failed/mute/result.json"
	is interrupted 0 && is done 0 || false
}

@test "the job's bytes are copied at the claim: a writer's hard link cannot edit the job that ran" {
	fake_libexec
	printf '{"argv": ["linked"]}\n' >"$BATS_TEST_TMPDIR/mine.json"
	ln "$BATS_TEST_TMPDIR/mine.json" "$SPOOL/queue/linked.json"
	ISOPOD_LIBEXEC=$LX runner
	wait_until 30 is done 1
	[ "$(stat -c %i "$SPOOL/done/linked/job.json")" != "$(stat -c %i "$BATS_TEST_TMPDIR/mine.json")" ]
	printf '{"argv": ["edited"]}\n' >"$BATS_TEST_TMPDIR/mine.json"
	jq -e '.argv == ["linked"]' "$SPOOL/done/linked/job.json"
}

@test "a job file that does not parse fails without a verify: a flood of bad files is not a flood of verifies" {
	local i
	fake_libexec
	for i in $(seq 1 10); do job "bad$i" '{"argv": '; done
	RECHECK=3600 ISOPOD_LIBEXEC=$LX runner
	wait_until 30 is failed 10
	job good '{"argv": ["good"]}'
	wait_until 30 is done 1
	# one verify at start, one before the good job
	wc -l <"$BATS_TEST_TMPDIR/verifies"
	[ "$(wc -l <"$BATS_TEST_TMPDIR/verifies")" -eq 2 ]
}

@test "a result over 1 MiB (a verbose guest) is still the job's result: done, not failed" {
	fake_libexec
	job big '{"argv": ["big"]}'
	ISOPOD_LIBEXEC=$LX runner
	wait_until 30 is done 1
	jq -e '.ok and (.stdout | length) == 2000000' "$SPOOL/done/big/result.json" >/dev/null
}

@test "--net-max: a job asking for more net fails before it runs; one without net gets filtered, not the configured default" {
	fake_libexec
	job open '{"argv": ["open"], "net": "open"}'
	job nonet '{"argv": ["nonet"]}'
	ISOPOD_NET=open ISOPOD_LIBEXEC=$LX runner
	wait_until 30 is failed 1
	wait_until 30 is done 1
	jq -e '.ok == false and .error_kind == "usage" and (.error | contains("net open: above this runner'"'"'s --net-max filtered"))' \
		"$SPOOL/failed/open/result.json"
	ran open 0
	grep -q -- "--net filtered .* nonet\$" "$BATS_TEST_TMPDIR/args"
	kill -TERM "$RUNNER"
	runner_exit 30
	job open2 '{"argv": ["open2"], "net": "open"}'
	job none2 '{"argv": ["none2"]}'
	# learn lets every name out: no runner job gets it, whatever the ceiling
	job learn2 '{"argv": ["learn2"], "net": "learn"}'
	ISOPOD_LIBEXEC=$LX runner --net-max open
	wait_until 30 is done 3
	wait_until 30 is failed 2
	jq -e '.ok == false and .error_kind == "usage" and (.error | contains("net learn: not a mode a runner job may ask for"))' \
		"$SPOOL/failed/learn2/result.json"
	ran learn2 0
	grep -q -- "--net open .* open2\$" "$BATS_TEST_TMPDIR/args"
	kill -TERM "$RUNNER"
	runner_exit 30
	job filt '{"argv": ["filt"], "net": "filtered"}'
	job none3 '{"argv": ["none3"]}'
	ISOPOD_LIBEXEC=$LX runner --net-max none
	wait_until 30 is failed 3
	wait_until 30 is done 4
	grep -q -- "--net none .* none3\$" "$BATS_TEST_TMPDIR/args"
}
