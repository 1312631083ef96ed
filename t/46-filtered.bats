#!/usr/bin/env bats
# Filtered mode end to end (issue 4): real microVMs on filtered slots, each
# with its own isopod-broker on the slot's gateway, inside the sealed lab of
# t/lab/lab.sh (network namespaces only: nothing can leave this machine).
#
# The guest is the busybox base image: wget honours http_proxy for plain
# HTTP, nc speaks CONNECT by hand, nslookup asks the resolver HELLO gave it
# (the gateway; port 53 is redirected to the broker's 1053).  The lab's
# authoritative DNS logs every query it receives (dns.log), and its web
# listeners every hit (hits), so "refused" and "blocked" are checked where
# the packets would have arrived, not only where they were sent.

load helpers
load lab/probe
# helpers.bash points ISOPOD_SYSCONFIG at /dev/null in every test; here it is
# the lab's host config (setup_file below): its allow_range opens the lab's
# pretend internet (TEST-NET-2) to the brokers, as it does to netsetup.
[ -z "${LAB_CONF-}" ] || export ISOPOD_SYSCONFIG=$LAB_CONF

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	isopod_lab_up "t46f$$" --slots 3 --open-slots 1
	isopod_setup_file --images
	export ISOPOD_NET_LOCKS="$ISOPOD_HOME/locks"
	mkdir -p "$ISOPOD_NET_LOCKS"
	# "Another VM" with a live listener: a stand-in guest on filtered slot 2
	# (10.213.0.10), its slot lock held for the whole file so no real VM
	# takes that slot.
	sh "$LAB" fakevm "$LAB_NAME" 2 1800
	(
		exec 8>>"$ISOPOD_NET_LOCKS/slot-2"
		flock -n 8 && exec sleep 1800
	) 3>&- </dev/null >/dev/null 2>&1 &
	echo $! >"$BATS_FILE_TMPDIR/holder.pid"
}

teardown_file() {
	local pid
	pid=$(cat "$BATS_FILE_TMPDIR/holder.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
	isopod_teardown_file
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

# isopod run inside the lab's host netns (resolv.conf: the lab's DNS).
vrun() {
	ip netns exec "$LAB_NAME-host" sh "$BATS_TEST_DIRNAME/lab/cgexec" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" \
		PATH="$PATH" ${ISOPOD_BROKER:+ISOPOD_BROKER="$ISOPOD_BROKER"} isopod run --json-only "$@"
}

hits() { grep -c " $1 " "$ISOPOD_LAB_STATE/$LAB_NAME/hits" || :; }
dnslog() { cat "$ISOPOD_LAB_STATE/$LAB_NAME/dns.log" 2>/dev/null || :; }

# shellcheck disable=SC2016 # guest scripts: expanded in the guest
# In the guest: the gateway from the proxy variable isopod-exec set.
GW='gw=${http_proxy#http://}; gw=${gw%:3128}'
# get URL through the proxy by hand (plain HTTP, absolute form): the whole answer.
PGET='pget() { printf "GET http://$1/ HTTP/1.0\r\nHost: $1\r\n\r\n" | nc -w 5 "$gw" 3128; }'
# connect HOST: CONNECT HOST:80, then GET / inside the tunnel.
PCONNECT='pconnect() { printf "CONNECT $1:80 HTTP/1.1\r\nHost: $1:80\r\n\r\nGET / HTTP/1.0\r\nHost: $1\r\n\r\n" | nc -w 5 "$gw" 3128; }'

@test "filtered: an allowed name works through the proxy (HTTP and CONNECT); another is refused naming the allowlist; egress says both" {
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 90 -- sh -c "$GW; $PGET; $PCONNECT"'
		wget -q -O- http://pkg.test/ | sed "s/^/wget: /"
		pconnect pkg.test | sed "s/^/connect: /"
		pget other.test | sed "s/^/refused: /"'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.net.mode == "filtered" and .net.slot == 0'
	json_is '.stdout | test("wget: lab 198.51.100.10")'
	json_is '.stdout | test("connect: HTTP/1.1 200") and test("connect: lab 198.51.100.10")'
	json_is '.stdout | test("refused: HTTP/1.[01] 403") and test("other.test is not in the allowlist \\(pkg.test\\)")'
	json_is '[.egress.allowed[] | select(.name == "pkg.test" and .port == 80) | .kind] | sort == ["connect", "http"]'
	json_is '.egress.allowed | all(.addresses == ["198.51.100.10"] and .down > 0)'
	json_is '.egress.denied == [{kind: "http", name: "other.test", port: 80, reason: "not in the allowlist", count: 1}]'
}

@test "filtered: --provenance names the mode, the allowlist and the egress ledger by digest; the artifact verifies" {
	local id l
	export ISOPOD_ATTEST_DIR="$BATS_TEST_TMPDIR/keys" ISOPOD_ATTESTATION="$BATS_TEST_TMPDIR/none"
	"$ISOPOD_SRC/bin/isopod-attest" keygen >/dev/null
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 90 \
		--copy-out "/tmp/page:$BATS_TEST_TMPDIR/page" --provenance "$BATS_TEST_TMPDIR/page.prov" -- \
		sh -c 'wget -q -O /tmp/page http://pkg.test/'
	[ "$status" -eq 0 ]
	json_is '.provenance.subjects[0].name == "page" and .egress.allowed[0].name == "pkg.test"'
	id=$(jq -r .vm.id <<<"$output")
	l=$(sha256sum <"$ISOPOD_HOME/vms/$id/ledger.jsonl" | cut -c1-64)
	run --separate-stderr isopod verify-artifact "$BATS_TEST_TMPDIR/page" "$BATS_TEST_TMPDIR/page.prov"
	echo "$output" # (shown when the test fails)
	[ "$status" -eq 0 ]
	jq -e --arg l "$l" '.valid and .network == {mode: "filtered", allow: ["pkg.test"]} and
		.ledger.sha256 == $l' <<<"$output"
}

@test "filtered: DNS answers allowed names through the gateway; an unlisted name is refused and never reaches the lab's DNS" {
	local tag="x$$r$RANDOM"
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 90 -- sh -c '
		cat /etc/resolv.conf
		nslookup pkg.test && echo allowed-resolved
		nslookup '"$tag"'.exfil.test || echo unlisted-failed'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.stdout | test("nameserver 10.213.0.1") and test("198.51.100.10") and test("allowed-resolved") and test("unlisted-failed")'
	# the first test built this shape's snapshot: a resumed filtered VM has its broker too
	json_is '.path == "warm"'
	dnslog | grep -q '^pkg.test '
	if dnslog | grep -q "$tag"; then
		echo "the lab DNS saw the unlisted name $tag" >&2
		return 1
	fi
	json_is '[.egress.denied[] | select(.kind == "dns" and .name == "'"$tag"'.exfil.test")] | length == 1'
	json_is '[.egress.allowed[] | select(.kind == "dns" and .name == "pkg.test")] | length == 1'
}

# Busybox nslookup without a type sends A and AAAA back to back and
# resends an unanswered one after half its timeout (5 s by default): each
# type asked once in the ledger is each answered the first time.  It once
# was not (a guest left on refined-jiffies under TCG: both queries took one
# id, the second answer was dropped as the first's duplicate: 5 s per
# lookup, doc/DECISIONS.md "TSC under TCG").  Two VMs at once, slots 0 and
# 1: the one seen slow first was the second.
# dns_once ID: the VM's ledger asked pkg.test once for A and once for AAAA.
dns_once() {
	jq -se '[.[] | select(.kind == "dns" and .name == "pkg.test") | .qtype] | sort == ["A", "AAAA"]' \
		"$ISOPOD_HOME/vms/$1/ledger.jsonl"
}

@test "filtered: two VMs at once (slots 0 and 1): nslookup of an allowed name asks A and AAAA once each (no retry of a dropped answer)" {
	local id0 id1 rc=0
	# shellcheck disable=SC2016 # guest script
	local look='nslookup pkg.test; echo "clock $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"'
	run --separate-stderr vrun --net filtered --allow pkg.test --keep --timeout-s 120 -- sh -c "$look"
	id0=$(jq -r '.vm.id // empty' <<<"$output")
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ] && [ -n "$id0" ] || false
	json_is '.net.slot == 0'
	run --separate-stderr vrun --net filtered --allow pkg.test --keep --timeout-s 120 -- sh -c "$look"
	id1=$(jq -r '.vm.id // empty' <<<"$output")
	echo "$output" | jq -r .stdout
	for id in "$id0" "$id1"; do
		[ -z "$id" ] || isopod-stop --vm "$id" >/dev/null || rc=1
	done
	[ "$status" -eq 0 ] && [ -n "$id1" ] && [ "$rc" -eq 0 ] || false
	json_is '.net.slot == 1'
	json_is '.stdout | test("198.51.100.10")'
	dns_once "$id0"
	dns_once "$id1"
}

@test "filtered: nothing is forwarded — internet, metadata, RFC 1918, host, other VM all blocked (TCP, UDP, ICMP); the proxy control passes" {
	local targets="198.51.100.10 169.254.169.254 10.99.0.5 172.16.5.5 192.168.5.5 203.0.113.1 10.213.0.10"
	local b_pub b_other a_pub a_other verdict=0
	# every line but the public listener's and the guest's liveness pings (t/lab/guestprobe.sh)
	others() { grep -v ' 198.51.100.10 ' "$ISOPOD_LAB_STATE/$LAB_NAME/hits" | grep -vc '^icmp 10.213.0.1 10.213.0.2$' || :; }
	b_pub=$(hits 198.51.100.10)
	b_other=$(others)
	# shellcheck disable=SC2086 # a list of addresses
	vm_probe_start isopod-tap0 10.213.0.1 10.213.0.2 $targets
	# shellcheck disable=SC2086
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 170 -- sh -c "$GW; $PGET
		$(cat "$BATS_TEST_DIRNAME/lab/guestprobe.sh")"'
		pget pkg.test | tail -n 1 | sed "s/^/control: /"' guestprobe 10.213.0.1 $targets
	# the one hit on purpose: the control, through the proxy
	vm_probes_blocked "$(jq -r '.stdout // ""' <<<"$output")" tcp:198.51.100.10=1 || verdict=1
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.net.slot == 0'
	json_is '.stdout | test("control: lab 198.51.100.10")'
	[ "$verdict" -eq 0 ]
	# The public listener saw the proxied control only; no other listener saw anything.
	a_pub=$(hits 198.51.100.10)
	a_other=$(others)
	[ "$a_pub" -eq $((b_pub + 1)) ]
	[ "$a_other" = "$b_other" ]
}

@test "filtered: names that resolve to denied addresses are refused at connect time (DNS rebinding); mixed answers use the public address" {
	local b10 b169
	b10=$(hits 10.99.0.5)
	b169=$(hits 169.254.169.254)
	run --separate-stderr vrun --net filtered --allow rebind.test --allow meta.test --allow mixed.test \
		--timeout-s 90 -- sh -c "$GW; $PGET; $PCONNECT"'
		pget rebind.test | sed "s/^/rebind: /"
		pconnect meta.test | sed "s/^/meta: /"
		pget mixed.test | sed "s/^/mixed: /"'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.stdout | test("rebind: HTTP/1.[01] 403") and test("meta: HTTP/1.[01] 403") and test("mixed: lab 198.51.100.10")'
	json_is '[.egress.denied[] | select(.reason == "resolves only to denied addresses") | .name] | sort == ["meta.test", "rebind.test"]'
	json_is '[.egress.allowed[] | select(.name == "mixed.test") | .addresses] == [["198.51.100.10"]]'
	[ "$(hits 10.99.0.5)" = "$b10" ]
	[ "$(hits 169.254.169.254)" = "$b169" ]
}

@test "filtered: an allowed name's other ports are refused naming the entry (egress has the port); a name in 198.18/15 is refused; the result warns of the lab's allow_range" {
	local b18
	b18=$(hits 198.18.0.10)
	run --separate-stderr vrun --net filtered --allow pkg.test --allow pkg.test:8443 --allow bench.test \
		--timeout-s 90 -- sh -c "$GW"'
		for p in 22 8080; do
			printf "CONNECT pkg.test:$p HTTP/1.1\r\n\r\n" | nc -w 5 "$gw" 3128 | sed "s/^/port$p: /"
		done
		printf "GET http://pkg.test/ HTTP/1.0\r\n\r\n" | nc -w 5 "$gw" 3128 | tail -n 1 | sed "s/^/p80: /"
		printf "GET http://bench.test/ HTTP/1.0\r\n\r\n" | nc -w 5 "$gw" 3128 | sed "s/^/bench: /"'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.stdout | test("port22: HTTP/1.1 403") and test("port8080: HTTP/1.1 403") and test("p80: lab 198.51.100.10")'
	json_is '.stdout | test("port22: isopod-broker: pkg.test port 22 is not allowed: the allowlist entries for pkg.test \\(pkg.test, pkg.test:8443\\)")'
	json_is '.stdout | test("bench: HTTP/1.1 403") and test("bench: .*resolves only to denied addresses \\(198.18.0.10: Benchmarking\\)")'
	json_is '[.egress.denied[] | select(.reason == "port not in the allowlist") | [.kind, .name, .port]] | sort == [["connect", "pkg.test", 22], ["connect", "pkg.test", 8080]]'
	json_is '[.egress.denied[] | select(.name == "bench.test") | .reason] == ["resolves only to denied addresses"]'
	json_is '.warnings | any(. == "allow_range 198.51.100.0/24 (\($ENV.LAB_CONF)): this host lets guests reach a range the deny list blocks by default")'
	[ "$(hits 198.18.0.10)" = "$b18" ]
}

@test "filtered: a wildcard allows names below it, not the name itself; IP literals are refused" {
	run --separate-stderr vrun --net filtered --allow '*.wild.test' --timeout-s 90 -- sh -c "$GW; $PGET"'
		pget a.wild.test | tail -n 1 | sed "s/^/a: /"
		pget wild.test | sed "s/^/bare: /"
		pget 198.51.100.10 | sed "s/^/literal: /"'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.stdout | test("a: lab 198.51.100.10") and test("bare: HTTP/1.[01] 403") and test("literal: HTTP/1.[01] 403")'
	json_is '[.egress.denied[] | .name] | sort == ["198.51.100.10", "wild.test"]'
}

@test "filtered: a bad --allow pattern is a usage error before anything boots" {
	local before
	before=$(ls "$ISOPOD_HOME/vms" 2>/dev/null | wc -l)
	run --separate-stderr vrun --net filtered --allow 'pkg..test' -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"pkg..test"* ]]
	run --separate-stderr vrun --net filtered --allow '*.test' -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"*.test"* ]]
	# claim refused it: no VM record was made
	[ "$(ls "$ISOPOD_HOME/vms" 2>/dev/null | wc -l)" -eq "$before" ]
}

@test "filtered: a broker that cannot start fails the run with its reason; the slot is free again" {
	local pid
	ISOPOD_BROKER=/bin/false run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	[ "$status" -eq 111 ]
	json_is '.ok == false and (.error | test("egress broker"))'
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
	# Someone else (root) on slot 0's proxy port: the claim finds it bound
	# and skips the slot, naming it; the run goes on on slot 1.
	ip netns exec "$LAB_NAME-host" python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.213.0.1", 3128)); s.listen(1); time.sleep(60)' &
	pid=$!
	sleep 0.5
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	kill "$pid"
	wait "$pid" || :
	[ "$status" -eq 0 ]
	json_is '.net.slot == 1 and (.warnings | any(test("^slot 0 \\(isopod-tap0\\): TCP port 10.213.0.1:3128 is bound by uid 0, pid [0-9]+ \\(python3\\), not by an isopod broker: skipped it$")))'
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
}

# squat K PORTS...: a local user (uid 4242) binds slot K's gateway on each
# PORT (u:N UDP, t:N TCP listener), as any user may (they are not
# privileged), and stays; its pid in $BATS_TEST_TMPDIR/squat-K.pid.
squat() {
	local k=$1
	shift
	ip netns exec "$LAB_NAME-host" setpriv --reuid=4242 --regid=4242 --clear-groups /usr/bin/python3 -c '
import socket, sys, time
gw = "10.213.0.%d" % (4 * int(sys.argv[1]) + 1)
keep = []
for p in sys.argv[2:]:
    s = socket.socket(type=socket.SOCK_DGRAM if p[0] == "u" else socket.SOCK_STREAM)
    s.bind((gw, int(p[2:])))
    if p[0] == "t":
        s.listen(1)
    keep.append(s)
print("bound", flush=True)
time.sleep(120)' "$k" "$@" >"$BATS_TEST_TMPDIR/squat-$k.out" 2>&1 &
	echo $! >"$BATS_TEST_TMPDIR/squat-$k.pid"
	for _ in $(seq 50); do
		grep -q bound "$BATS_TEST_TMPDIR/squat-$k.out" && return 0
		sleep 0.1
	done
	cat "$BATS_TEST_TMPDIR/squat-$k.out"
	return 1
}
unsquat() {
	local f
	for f in "$BATS_TEST_TMPDIR"/squat-*.pid; do
		[ -f "$f" ] || continue
		kill "$(cat "$f")" 2>/dev/null || :
		wait "$(cat "$f")" 2>/dev/null || :
		rm -f "$f"
	done
}

@test "filtered: a local user (uid 4242) squatting a slot's broker ports: the run skips that slot naming port, uid and pid, and runs on the next; every free slot squatted: 102 naming the squatter" {
	local a
	squat 0 u:1053
	a=$(cat "$BATS_TEST_TMPDIR/squat-0.pid")
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	[ "$status" -eq 0 ] || { unsquat; echo "$output $stderr"; false; }
	jq -e --arg a "$a" '.net.slot == 1 and (.warnings | any(. == "slot 0 (isopod-tap0): UDP port 10.213.0.1:1053 is bound by uid 4242, pid \($a) (python3), not by an isopod broker: skipped it"))' <<<"$output" ||
		{ unsquat; echo "$output"; false; }
	# slot 1 too (its canary answer port and its proxy): with slot 2
	# another VM's, no filtered slot is left; the error names slot 0's.
	squat 1 u:1055 t:3128
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	unsquat
	echo "$output"
	[ "$status" -eq 102 ]
	jq -e --arg a "$a" '.ok == false and (.error | contains("all 3 filtered network slots busy, 2 of them held open by a process that is not an isopod VM: slot 0 (isopod-tap0): UDP port 10.213.0.1:1053 is bound by uid 4242, pid \($a) (python3), not by an isopod broker (the first of them)"))' <<<"$output"
	# gone: slot 0 is used again
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	[ "$status" -eq 0 ]
	json_is '.net.slot == 0 and ([.warnings[] | select(test("skipped it"))] | length == 0)'
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
	flock -n "$ISOPOD_NET_LOCKS/slot-1" true
}

@test "filtered: a port bound after the claim's check fails that run naming the squatter (uid 4242, pid); the next run skips the slot" {
	local b="$BATS_TEST_TMPDIR/broker" p
	# A stand-in broker (unjailed: a script) that lets uid 4242 bind its
	# slot's DNS port first, then execs the real broker, which cannot bind.
	rm -f "$BATS_TEST_TMPDIR/race.pid"
	cat >"$b" <<-'SH'
	#!/bin/sh
	gw=; prev=
	for a in "$@"; do [ "$prev" = --listen ] && gw=$a; prev=$a; done
	# once: a warm resume that fails boots cold, with a broker again
	[ -e "$RACE_DIR/race.pid" ] || {
		setpriv --reuid=4242 --regid=4242 --clear-groups /usr/bin/python3 -c '
		import socket, sys, time
		s = socket.socket(type=socket.SOCK_DGRAM); s.bind((sys.argv[1], 1053))
		print("bound", flush=True); time.sleep(120)' "$gw" </dev/null >"$RACE_DIR/race.out" 2>&1 3>&- 4>&- &
		echo $! >"$RACE_DIR/race.pid"
		for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
			grep -q bound "$RACE_DIR/race.out" && break
			sleep 0.1
		done
	}
	exec "$REAL_BROKER" "$@"
	SH
	chmod 755 "$b"
	ISOPOD_JAIL=0 RACE_DIR=$BATS_TEST_TMPDIR REAL_BROKER=$ISOPOD_SRC/bin/isopod-broker ISOPOD_BROKER=$b \
		run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	p=$(cat "$BATS_TEST_TMPDIR/race.pid")
	echo "$output"
	[ "$status" -eq 111 ] || { kill "$p"; false; }
	jq -e --arg p "$p" '.error | contains("egress broker failed to start (exit 102): UDP port 10.213.0.1:1053 is bound by uid 4242, pid \($p) (python3), not by an isopod broker: the next run skips this slot")' <<<"$output" ||
		{ kill "$p"; false; }
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	kill "$p"
	[ "$status" -eq 0 ]
	json_is '.net.slot == 1 and (.warnings | any(test("^slot 0 \\(isopod-tap0\\): UDP port 10.213.0.1:1053 is bound by uid 4242")))'
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
}

@test "filtered: with isopod-netsetup's table flushed a new run refuses to start, naming isopod-netsetup; the slot is free again" {
	sh "$LAB" exec "$LAB_NAME" nft flush table inet isopod
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 3 --open-slots 1 --user 0 >/dev/null
	[ "$status" -eq 111 ]
	json_is '.ok == false and (.error | test("egress broker")) and (.error | test("run isopod-netsetup"))'
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
}

@test "filtered: SIGKILL of a run ends its broker with the VM; the next run gets the slot and a working broker at once; its QEMU was jailed" {
	local pid i
	ip netns exec "$LAB_NAME-host" sh "$BATS_TEST_DIRNAME/lab/cgexec" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" \
		PATH="$PATH" isopod run --json-only --net filtered --allow pkg.test --timeout-s 120 -- sleep 100 \
		>/dev/null 2>&1 3>&- &
	pid=$!
	for i in $(seq 1 300); do # ≤ 60 s for the boot
		[ -n "$(broker_pids)" ] && break
		sleep 0.2
	done
	[ -n "$(broker_pids)" ]
	sleep 1
	# the filtered VM's QEMU is jailed (its tap a descriptor, only lo)
	st=0
	jail_check "$(isopod vm ls | jq -r 'select(.running) | .id')" || st=1
	kill -9 "$pid"
	wait "$pid" || :
	for i in $(seq 1 50); do # the supervisor sees its owner die, ends QEMU, then the broker
		flock -n "$ISOPOD_NET_LOCKS/slot-0" true && break
		sleep 0.1
	done
	[ -z "$(broker_pids)" ]
	[ "$st" -eq 0 ]
	# the killed front end's scratch directory (runs/ in the store) is its
	# one leak, and gc removes it
	run --separate-stderr isopod gc
	[ "$status" -eq 0 ]
	json_is '([.leaked[] | select(.kind != "run")] == []) and ([.leaked[] | select(.kind == "run" and .removed)] | length == 1)'
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- wget -q -O- http://pkg.test/
	[ "$status" -eq 0 ]
	json_is '.net.slot == 0 and .stdout == "lab 198.51.100.10\n"'
}

# The pids of isopod-broker processes serving this file's store (read-only
# look at /proc: nothing is signalled here).
# One grep over every cmdline first: a loop of two processes a pid took
# 3.7 s a pass on a loaded host, past the guest's 6 s below.
broker_pids() {
	local f
	for f in $(grep -laF -- "$ISOPOD_HOME/" /proc/[0-9]*/cmdline 2>/dev/null); do
		tr '\0' ' ' 2>/dev/null <"$f" | grep -q "isopod-broker .*--ledger $ISOPOD_HOME/" &&
			echo "${f//[!0-9]/}"
	done
	return 0
}

# sleeper ENV...: a filtered run in the background (its guest: sleep, then
# one request, so the ledger is written while the broker is jailed), the
# run's pid in $rpid; once its supervisor has the broker's ready line
# (broker_pid in the record, ≤ 60 s), the VM's id in $id and the broker's
# pid in $bp.
sleeper() {
	local i
	ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" \
		PATH="$PATH" "$@" isopod run --json-only --net filtered --allow pkg.test --timeout-s 120 -- \
		sh -c 'sleep 6; wget -q -O- http://pkg.test/' >"$BATS_TEST_TMPDIR/run.json" 2>"$BATS_TEST_TMPDIR/run.err" 3>&- &
	rpid=$!
	for i in $(seq 1 300); do
		bp=$(broker_pids)
		id=$(tr '\0' '\n' 2>/dev/null <"/proc/$bp/cmdline" | grep -A1 -x -- --vm | tail -n 1)
		[ -n "$id" ] && [ "$(jq -r '.broker_pid // 0' "$ISOPOD_HOME/vms/$id/meta.json" 2>/dev/null)" = "$bp" ] &&
			return 0
		sleep 0.2
	done
	return 1
}

# broker_leaks: each way the broker of $id ($bp) is not jailed, one word a
# line (none: it is); read-only looks at /proc from outside.
broker_leaks() {
	local st sup ns uid
	st=$(cat "/proc/$bp/status")
	sup=$(awk '/^PPid:/ {print $2}' <<<"$st") # the supervisor: the jail's parent
	grep -E '^(Uid|Gid|NoNewPrivs|Cap|Seccomp)' <<<"$st" >&2
	uid=$(jail_uid "broker-$id")
	# its own identity from the jail range: not root, not its VM's QEMU's
	grep -qx "Uid:[[:space:]]*$uid[[:space:]]*$uid[[:space:]]*$uid[[:space:]]*$uid" <<<"$st" &&
		[ "$uid" != "$(jail_uid "$id")" ] || echo uid
	grep -qx 'NoNewPrivs:[[:space:]]*1' <<<"$st" || echo no_new_privs
	grep -qx 'CapEff:[[:space:]]*0000000000000000' <<<"$st" &&
		grep -qx 'CapPrm:[[:space:]]*0000000000000000' <<<"$st" &&
		grep -qx 'CapBnd:[[:space:]]*0000000000000000' <<<"$st" || echo caps
	# the jail's filter and the broker's own (installed before its ready line)
	grep -qx 'Seccomp_filters:[[:space:]]*2' <<<"$st" || echo seccomp
	for ns in pid mnt ipc uts cgroup; do
		[ "$(readlink "/proc/$bp/ns/$ns")" != "$(readlink "/proc/$sup/ns/$ns")" ] || echo "ns_$ns"
	done
	# the host's network namespace, where the gateway is (the control)
	[ "$(readlink "/proc/$bp/ns/net")" = "$(readlink "/proc/$sup/ns/net")" ] || echo net_not_hosts
	# nothing writable: every mount read-only but its /proc; the ledger a descriptor
	awk '$5 != "/proc" && $6 !~ /(^|,)ro(,|$)/ {print "writable " $5 >"/dev/stderr"; w = 1}
		END {exit w}' "/proc/$bp/mountinfo" || echo mounts
	[ "$(readlink "/proc/$bp/fd/4")" = "$ISOPOD_HOME/vms/$id/ledger.jsonl" ] || echo ledger_fd
}

@test "filtered: the broker runs jailed: its own uid, no capabilities, no_new_privs, two seccomp filters, its own namespaces but the host's network, nothing writable but its ledger descriptor" {
	sleeper
	run --separate-stderr broker_leaks
	echo "$stderr"
	echo "leaks: $output"
	[ -z "$output" ]
	# how isopod-gc would know it (the supervisor's record): its start and uid
	jq -e --argjson s "$(cut -d' ' -f22 "/proc/$bp/stat")" --argjson u "$(jail_uid "broker-$id")" \
		'.broker_start == $s and .broker_uid == $u' "$ISOPOD_HOME/vms/$id/meta.json"
	# what the jail applied is in the broker's log
	grep -q '^isopod-broker: jail: {.*"landlock_abi":[1-9]' "$ISOPOD_HOME/vms/$id/broker.log"
	# the root it sees: its binary, its libraries, two devices, /proc
	[ "$(ls "/proc/$bp/root")" != "$(ls /)" ]
	[ ! -e "/proc/$bp/root/etc" ] && [ -x "/proc/$bp/root$(readlink -f "$ISOPOD_SRC/bin/isopod-broker")" ] || false
	wait "$rpid"
	jq -e '.ok and .stdout == "lab 198.51.100.10\n" and
		(.egress.allowed | map(select(.kind == "http" and .name == "pkg.test")) | length == 1)' \
		"$BATS_TEST_TMPDIR/run.json"
}

@test "mutation: ISOPOD_JAIL=0 — the broker runs as the supervisor does, and every jail check fails" {
	# the switch is read once, by isopod-boot, for QEMU and the broker: a
	# supervisor that finds it flipped (ISOPOD_JAIL=1 here) still follows
	# the boot's decision in its spec
	printf '#!/bin/sh\nISOPOD_JAIL=1 exec "%s/bin/isopod-supervise" "$@"\n' "$ISOPOD_SRC" \
		>"$BATS_TEST_TMPDIR/supervise"
	chmod +x "$BATS_TEST_TMPDIR/supervise"
	sleeper ISOPOD_JAIL=0 ISOPOD_SUPERVISE="$BATS_TEST_TMPDIR/supervise"
	run --separate-stderr broker_leaks
	echo "$stderr"
	echo "leaks: $output"
	wait "$rpid"
	# its diagnostics apart: the wrapper above is not beside
	# isopod-memro.so, so warm is skipped with a warning on stderr
	cat "$BATS_TEST_TMPDIR/run.err" >&2
	jq -e '.warnings | any(. == "QEMU and its egress broker run unjailed (ISOPOD_JAIL=0)")' \
		"$BATS_TEST_TMPDIR/run.json"
	# no_new_privs and the one seccomp filter are the broker's own (it sets
	# them without the jail); the ledger descriptor is egress.c's either way
	[ "$(tr '\n' ' ' <<<"$output")" = "uid caps seccomp ns_pid ns_mnt ns_ipc ns_uts ns_cgroup mounts " ]
	grep -qx 'isopod-broker: jail: off (ISOPOD_JAIL=0)' "$ISOPOD_HOME/vms/$id/broker.log"
	jq -e .ok "$BATS_TEST_TMPDIR/run.json"
	# a bad value is a usage error before anything boots
	export ISOPOD_JAIL=maybe
	run --separate-stderr vrun --net filtered --allow pkg.test -- true
	unset ISOPOD_JAIL
	echo "$output $stderr"
	[ "$status" -eq 100 ]
	[[ "$output $stderr" == *"ISOPOD_JAIL: jail: yes or no, not maybe"* ]]
}

# ---- the jail egress chain (isopod-netsetup(8), JAIL EGRESS) ----------------
# No VM: a probe process (t/lab/jailegress.py) runs in the lab's host netns
# as root (the control: every target answers) and as a jail identity (the
# uid a broker gets), with listeners of its own on 127.0.0.1, ::1 and slot
# 1's gateway (where that slot's broker would serve :3128 and :1053).
JE_BLOCKED='tcp:127.0.0.1:7001 udp:127.0.0.1:7001 tcp:[::1]:7001 tcp:10.213.0.5:3128 udp:10.213.0.5:1053
	tcp:203.0.113.1:80 tcp:10.99.0.5:80 tcp:169.254.169.254:80 udp:198.51.100.10:7 icmp:198.51.100.10'
JE_ALLOWED='tcp:198.51.100.10:80 dns:198.51.100.53:53'

# The packets counted by the jail chains' drop rules.
je_drops() {
	{ ip netns exec "$LAB_NAME-host" nft list chain inet isopod jail_out
	  ip netns exec "$LAB_NAME-host" nft list chain inet isopod jail_deny; } |
		awk '/ drop/ { for (i = 1; i < NF; i++) if ($i == "packets") s += $(i + 1) } END { print s + 0 }'
}

# jail_egress_check: 0 when every JE_BLOCKED target answers root but not a
# jail uid, each JE_ALLOWED answers both, and the drops were counted.
jail_egress_check() {
	local uid py=/usr/bin/python3 srv d0 d1 root jail st=0
	uid=$(( $(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json") + 43900 ))
	# ping sockets for every gid, as on a host whose range covers the jail's
	ip netns exec "$LAB_NAME-host" sysctl -qw net.ipv4.ping_group_range="0 2147483647"
	ip netns exec "$LAB_NAME-host" "$py" "$BATS_TEST_DIRNAME/lab/jailegress.py" serve \
		127.0.0.1:7001 '[::1]:7001' 10.213.0.5:3128 10.213.0.5:1053 >"$BATS_TEST_TMPDIR/srv" 2>&1 3>&- &
	srv=$!
	for _ in $(seq 1 50); do grep -q ready "$BATS_TEST_TMPDIR/srv" && break; sleep 0.1; done
	# shellcheck disable=SC2086 # the lists split into specs
	root=$(ip netns exec "$LAB_NAME-host" "$py" "$BATS_TEST_DIRNAME/lab/jailegress.py" probe $JE_BLOCKED $JE_ALLOWED)
	d0=$(je_drops)
	# shellcheck disable=SC2086
	jail=$(ip netns exec "$LAB_NAME-host" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
		"$py" "$BATS_TEST_DIRNAME/lab/jailegress.py" probe $JE_BLOCKED $JE_ALLOWED)
	d1=$(je_drops)
	kill "$srv"
	wait "$srv" 2>/dev/null || :
	printf 'uid %s; root:\n%s\njail:\n%s\ndrops %s -> %s\n' "$uid" "$root" "$jail" "$d0" "$d1"
	[ "$(grep -c ' ok$' <<<"$root")" -eq 12 ] || { echo "the control failed"; return 1; }
	for t in $JE_BLOCKED; do grep -qxF "$t blocked" <<<"$jail" || { echo "not blocked: $t"; st=1; }; done
	for t in $JE_ALLOWED; do grep -qxF "$t ok" <<<"$jail" || { echo "not allowed: $t"; st=1; }; done
	[ "$d1" -ge $((d0 + 10)) ] || { echo "not counted"; st=1; }
	return "$st"
}

@test "jail egress: a jail uid reaches no loopback, host, other gateway, denied range, UDP but DNS, ICMP or IPv6 (dropped, counted); the lab internet and the resolver still answer" {
	run jail_egress_check
	echo "$output"
	[ "$status" -eq 0 ]
	jq -e '.jail_egress.chain == "jail" and .jail_egress.resolver == "198.51.100.53:53" and
		.jail_egress.uid_last - .jail_egress.uid_first == 65535' "$BATS_FILE_TMPDIR/netsetup.json"
}

# A real broker whose own policy lets everything through (--allow-all and
# 10.0.0.0/8 opened: what a guest that subverted it would make it do), on
# slot 0's gateway, as root and as a jail uid: only root's reaches the lab
# host in 10/8; the jail uid's connect is dropped and counted in jail_deny.
# The jail uid's broker started at all: its canary passed the chain.
widened_broker_check() {
	local uid who bp got ok d0 d1 out=""
	uid=$(( $(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json") + 43900 ))
	mkdir "$BATS_TEST_TMPDIR/b"
	for who in root jail; do
		set -- # root: as is
		[ "$who" = root ] || set -- setpriv --reuid="$uid" --regid="$uid" --clear-groups
		d0=$(je_drops)
		# the ledger handed over as descriptor 4, as the supervisor does
		ip netns exec "$LAB_NAME-host" "$@" "$ISOPOD_SRC/bin/isopod-broker" --listen 10.213.0.1 \
			--ledger "$BATS_TEST_TMPDIR/b/$who.ledger" --ledger-fd 4 --resolver 198.51.100.53:53 --canary 1054 \
			--allow-all --allow-range 10.0.0.0/8 --allow-range 198.51.100.0/24 \
			>"$BATS_TEST_TMPDIR/b/$who.out" 2>"$BATS_TEST_TMPDIR/b/$who.err" 4>>"$BATS_TEST_TMPDIR/b/$who.ledger" 3>&- </dev/null &
		bp=$!
		for _ in $(seq 1 50); do [ -s "$BATS_TEST_TMPDIR/b/$who.out" ] && break; sleep 0.1; done
		got=$(ip netns exec "$LAB_NAME-host" curl -s -m 4 -x http://10.213.0.1:3128 http://10.99.0.5/ || :)
		ok=$(ip netns exec "$LAB_NAME-host" curl -s -m 4 -x http://10.213.0.1:3128 http://pkg.test/ || :)
		d1=$(je_drops)
		kill "$bp" 2>/dev/null || cat "$BATS_TEST_TMPDIR/b/$who.err"
		wait "$bp" 2>/dev/null || :
		out+="$who: announced '$(head -c 60 "$BATS_TEST_TMPDIR/b/$who.out")' 10.99.0.5 '$got' pkg.test '$ok' counted $((d1 - d0))"$'\n'
	done
	echo "$out"
	grep -q "^root: announced '{\"pid\".* 10.99.0.5 'lab 10.99.0.5' pkg.test 'lab 198.51.100.10' counted 0$" <<<"$out" &&
		grep -q "^jail: announced '{\"pid\".* 10.99.0.5 '' pkg.test 'lab 198.51.100.10' counted [1-9]" <<<"$out"
}

@test "jail egress: a broker widened to 10.0.0.0/8 reaches 10.99.0.5 as root but not as a jail uid (jail_deny counts it); its canary and the resolver pass" {
	run widened_broker_check
	echo "$output"
	[ "$status" -eq 0 ]
}

# broken CHECK WANT: with the rules broken (by the caller), CHECK fails and
# its output matches the pattern WANT; isopod-netsetup restores the rules
# (before any assertion, so a failing one leaves the lab whole) and CHECK
# passes again.
broken() {
	run "$1"
	echo "$output"
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 3 --open-slots 1 --user 0 >/dev/null
	[ "$status" -ne 0 ]
	# shellcheck disable=SC2053 # WANT is a pattern
	[[ "$output" == $2 ]]
	run "$1"
	echo "after netsetup: $output"
	[ "$status" -eq 0 ]
}

@test "mutation: the jail chain's uid match gone (nft flush chain inet isopod jail): the widened broker reaches 10.99.0.5 as a jail uid and the jail egress check FAILS; netsetup restores it" {
	ip netns exec "$LAB_NAME-host" nft flush chain inet isopod jail
	run widened_broker_check
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"jail: announced '{"*" 10.99.0.5 'lab 10.99.0.5'"* ]]
	broken jail_egress_check '*tcp:127.0.0.1:7001 ok*'
}

# A peer on the lab internet starts flows to a jail uid's sockets (what an
# autobound port of a broker would get): its UDP answer and TCP SYN-ACK are
# "established" to conntrack but not the jail's own flows (review L2).
# Root's listener (the control) answers.
inbound_check() {
	served_check 203.0.113.1:7003 203.0.113.1:7003 ip netns exec "$LAB_NAME-inet" /usr/bin/python3
}

# served_check ADDRS TARGET PROBER...: listeners on ADDRS (one or more
# ADDR:PORT, UDP and TCP each) in the host netns, as root and then as a
# jail uid ("jail"; with SERVED_AS=UID, that uid: "user"), each probed by
# `PROBER jailegress.py probe` with tcpr:TARGET and udp:TARGET (or the
# SPECs in SERVED_PROBES), one at a time: a listener refused a sendto dies
# of the EPERM, so UDP goes last.  Root's must answer, the other's not.
served_check() {
	local addr=$1 target=$2 uid who srv out="" t ok="" blocked="" probes other=jail
	shift 2
	[ -z "${SERVED_AS-}" ] || other=user
	uid=${SERVED_AS:-$(( $(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json") + 43900 ))}
	probes=${SERVED_PROBES:-"tcpr:$target udp:$target"}
	for t in $probes; do
		ok+="$t ok " blocked+="$t blocked "
	done
	for who in root "$other"; do
		local as=()
		[ "$who" = root ] || as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups)
		# shellcheck disable=SC2086 # ADDRS: one listener each
		ip netns exec "$LAB_NAME-host" "${as[@]}" /usr/bin/python3 "$BATS_TEST_DIRNAME/lab/jailegress.py" serve \
			$addr >"$BATS_TEST_TMPDIR/srv-$who" 2>&1 3>&- &
		srv=$!
		for _ in $(seq 1 50); do grep -q ready "$BATS_TEST_TMPDIR/srv-$who" && break; sleep 0.1; done
		out+="$who: $(for t in $probes; do "$@" "$BATS_TEST_DIRNAME/lab/jailegress.py" probe "$t"
			done | tr '\n' ' ')"$'\n'
		kill "$srv"
		wait "$srv" 2>/dev/null || :
	done
	echo "$out"
	grep -qxF "root: $ok" <<<"$out" && grep -qxF "$other: $blocked" <<<"$out"
}

@test "jail egress: a flow a peer on the internet starts to a jail uid's socket gets no answer (UDP, TCP); root's does; the jail's own flows and DNS still pass" {
	run inbound_check
	echo "$output"
	[ "$status" -eq 0 ]
	run jail_egress_check
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "mutation: jail_out accepting established,related of every flow: the peer's UDP and TCP flows to a jail uid are answered and the check FAILS; netsetup restores it" {
	local h
	h=$(ip netns exec "$LAB_NAME-host" nft -a list chain inet isopod jail_out | awk '/ct direction original/ { print $NF; exit }')
	[ -n "$h" ]
	ip netns exec "$LAB_NAME-host" nft insert rule inet isopod jail_out position "$h" ct state established,related accept
	broken inbound_check '*jail: tcpr:203.0.113.1:7003 ok udp:203.0.113.1:7003 ok*'
}

# A real broker on slot 0's gateway (its canary passes: the table is
# loaded), as uid $1, with --expect-jail-chain unless $2 is "no-flag": one
# line "announced" or "exit N: <its last stderr line>" (review L1).
chain_broker() {
	local d="$BATS_TEST_TMPDIR/cb" bp flag=--expect-jail-chain st=0
	[ "${2-}" != no-flag ] || flag=
	mkdir -p "$d"
	: >"$d/out"
	# shellcheck disable=SC2086,SC2094 # $flag: none or one word; the ledger path is named, not read
	ip netns exec "$LAB_NAME-host" setpriv --reuid="$1" --regid="$1" --clear-groups \
		"$ISOPOD_SRC/bin/isopod-broker" --listen 10.213.0.1 --ledger "$d/ledger" --ledger-fd 4 \
		--resolver 198.51.100.53:53 --canary 1054 --allow pkg.test $flag \
		>"$d/out" 2>"$d/err" 4>>"$d/ledger" 3>&- </dev/null &
	bp=$!
	for _ in $(seq 1 50); do [ -s "$d/out" ] && break; kill -0 "$bp" 2>/dev/null || break; sleep 0.1; done
	if [ -s "$d/out" ]; then
		echo announced
		kill "$bp"
		wait "$bp" 2>/dev/null || :
	else
		wait "$bp" || st=$?
		echo "exit $st: $(tail -n 1 "$d/err")"
	fi
}

@test "jail egress: a broker with --expect-jail-chain starts as a uid in the chain's range; beyond it, or with the chain's uid match gone, it refuses (111) naming its uid and isopod-netsetup; without the flag it starts (the gap it closes)" {
	local first in out msg
	first=$(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json")
	in=$((first + 43900)) out=$((first + 65536 + 43900))
	msg="isopod-broker: fatal: this broker's uid $out is not in the host's jail egress chain: the jail uid range changed since isopod-netsetup ran, or netsetup predates it; run isopod-netsetup again"
	run chain_broker "$in"
	echo "in the range: $output"
	[ "$output" = announced ]
	run chain_broker "$out"
	echo "beyond it: $output"
	[ "$output" = "exit 111: $msg" ]
	# the gap: a broker outside the chain serves all the same when not asked
	run chain_broker "$out" no-flag
	echo "beyond it, no flag: $output"
	[ "$output" = announced ]
	# the chain's uid match gone (an older netsetup's table): refused in the range too
	ip netns exec "$LAB_NAME-host" nft flush chain inet isopod jail
	run chain_broker "$in"
	echo "chain flushed: $output"
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 3 --open-slots 1 --user 0 >/dev/null
	[ "$output" = "exit 111: ${msg//$out/$in}" ]
	run chain_broker "$in"
	echo "after netsetup: $output"
	[ "$output" = announced ]
}

@test "jail egress: with the host config's jail_uid_base moved after netsetup, a filtered run fails (111) before its VM boots, naming the broker's uid and isopod-netsetup; the slot is free again" {
	local first conf="$BATS_TEST_TMPDIR/config" id
	first=$(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json")
	cat "$LAB_CONF" >"$conf"
	echo "jail_uid_base = $((first + 65536))" >>"$conf"
	ISOPOD_SYSCONFIG=$conf run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 60 -- true
	echo "$output"
	[ "$status" -eq 111 ]
	json_is '.ok == false and (.error | test("egress broker failed to start \\(exit 111\\)")) and
		(.error | test("this broker.s uid [0-9]+ is not in the host.s jail egress chain")) and
		(.error | test("run isopod-netsetup again"))'
	# the uid it names is of the moved range; its QEMU never started
	id=$(jq -r '.vm.id // empty' <<<"$output")
	if [ -n "$id" ] && [ -f "$ISOPOD_HOME/vms/$id/meta.json" ]; then
		jq -e '.qemu_pid == null' "$ISOPOD_HOME/vms/$id/meta.json"
		[ ! -s "$ISOPOD_HOME/vms/$id/console.log" ]
	fi
	[ "$(jq -r .error <<<"$output" | sed -n 's/.*uid \([0-9]*\) is not.*/\1/p')" -ge $((first + 65536)) ]
	flock -n "$ISOPOD_NET_LOCKS/slot-0" true
	# the control: the same run with the range netsetup knows
	run --separate-stderr vrun --net filtered --allow pkg.test --timeout-s 120 -- true
	[ "$status" -eq 0 ]
}

# A local user (uid 4242: neither root nor a jail uid) binds a gateway
# address, as any user may, and writes to a jail uid's UDP socket and TCP
# listener there (what a broker's autobound port would get): the answers
# are replies to a slot address, but not from a broker's service port
# (1053, 3128), so jail_out drops them (review L2).
# Root's listener (the control) answers.
gateway_user_check() {
	served_check 10.213.0.1:7005 10.213.0.1:7005@10.213.0.1 \
		ip netns exec "$LAB_NAME-host" setpriv --reuid=4242 --regid=4242 --clear-groups /usr/bin/python3
}

@test "jail egress: a local user bound to a gateway address gets no answer from a jail uid's socket (UDP, TCP); root's answers; the jail's own flows and DNS still pass" {
	run gateway_user_check
	echo "$output"
	[ "$status" -eq 0 ]
	run jail_egress_check
	echo "$output"
	[ "$status" -eq 0 ]
}

@test "mutation: jail_out accepting every established reply to the slot range (no tap, no port): the local user reads the jail uid's answers and the check FAILS; netsetup restores it" {
	local h slots
	h=$(ip netns exec "$LAB_NAME-host" nft -a list chain inet isopod jail_out | awk '/ct direction original/ { print $NF; exit }')
	slots=$(jq -r '"\(.base)/\(.prefix)"' "$BATS_FILE_TMPDIR/netsetup.json")
	echo "slots $slots"
	[ -n "$h" ]
	ip netns exec "$LAB_NAME-host" nft insert rule inet isopod jail_out position "$h" \
		ip daddr "$slots" ct direction reply ct state established accept
	broken gateway_user_check '*jail: tcpr:10.213.0.1:7005@10.213.0.1 ok udp:10.213.0.1:7005@10.213.0.1 ok*'
}

# A broker as a jail uid on slot 2's gateway (10.213.0.9), asked by the
# stand-in guest behind isopod-tap2 (no VM): its DNS on port 53 (the dns
# chain redirects it to 1053) and its proxy on 3128 answer the guest, out
# of the tap, under jail_out's narrowed reply rules; and its DNS port
# answers a host process on lo, as the doctor's broker check asks it.
guest_answer_check() {
	local uid bp dns web host user
	uid=$(( $(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json") + 43900 ))
	mkdir -p "$BATS_TEST_TMPDIR/g"
	ip netns exec "$LAB_NAME-host" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
		"$ISOPOD_SRC/bin/isopod-broker" --listen 10.213.0.9 --ledger "$BATS_TEST_TMPDIR/g/ledger" --ledger-fd 4 \
		--resolver 198.51.100.53:53 --canary 1054 --allow pkg.test --allow-range 198.51.100.0/24 \
		>"$BATS_TEST_TMPDIR/g/out" 2>"$BATS_TEST_TMPDIR/g/err" 4>>"$BATS_TEST_TMPDIR/g/ledger" 3>&- </dev/null &
	bp=$!
	for _ in $(seq 1 50); do [ -s "$BATS_TEST_TMPDIR/g/out" ] && break; sleep 0.1; done
	dns=$(sh "$LAB" gexec "$LAB_NAME" 2 /usr/bin/python3 "$BATS_TEST_DIRNAME/lab/jailegress.py" probe dns:10.213.0.9:53)
	web=$(sh "$LAB" gexec "$LAB_NAME" 2 curl -s -m 4 -x http://10.213.0.9:3128 http://pkg.test/ || :)
	host=$(ip netns exec "$LAB_NAME-host" /usr/bin/python3 "$BATS_TEST_DIRNAME/lab/jailegress.py" probe dns:10.213.0.9:1053 \
		tcp:10.213.0.9:1053 tcp:10.213.0.9:3128 | tr '\n' ' ')
	# another local user (not root): dropped before it leaves ("blocked");
	# root's TCP to 1053 reaches the host ("refused": this broker serves
	# DNS on UDP), the control that the user's is dropped, not refused
	user=$(ip netns exec "$LAB_NAME-host" setpriv --reuid=4242 --regid=4242 --clear-groups /usr/bin/python3 \
		"$BATS_TEST_DIRNAME/lab/jailegress.py" probe dns:10.213.0.9:1053 tcp:10.213.0.9:1053 tcp:10.213.0.9:3128 |
		tr '\n' ' ')
	kill "$bp" 2>/dev/null || cat "$BATS_TEST_TMPDIR/g/err"
	wait "$bp" 2>/dev/null || :
	echo "announced '$(head -c 60 "$BATS_TEST_TMPDIR/g/out")' $dns web '$web' host $host user $user"
	# one status (run's subshell has no errexit): the guest's and root's
	# answered, the other user's refused
	[ "$dns" = "dns:10.213.0.9:53 ok" ] && [ "$web" = "lab 198.51.100.10" ] &&
		[ "$host" = "dns:10.213.0.9:1053 ok tcp:10.213.0.9:1053 refused tcp:10.213.0.9:3128 ok " ] &&
		[ "$user" = "dns:10.213.0.9:1053 blocked tcp:10.213.0.9:1053 blocked tcp:10.213.0.9:3128 blocked " ]
}

@test "jail egress: a jailed broker's DNS (port 53, redirected) and proxy answer a guest on its tap (the lab's stand-in guest, no VM), its DNS and proxy root on lo (the doctor's check), not another local user" {
	run guest_answer_check
	echo "$output"
	[ "$status" -eq 0 ]
}

# squat_check: a local user (uid 4242) binds slot 2's gateway DNS and proxy
# ports while no broker runs there, as any user may (they are not
# privileged); the stand-in guest's TCP DNS (53, redirected), proxy and
# UDP DNS reach it, and its answers are dropped.  Root's (an unjailed
# broker's stand-in) are answered: the control.
squat_check() {
	SERVED_AS=4242 SERVED_PROBES="tcpr:10.213.0.9:53 tcpr:10.213.0.9:3128 udp:10.213.0.9:53" \
		served_check "10.213.0.9:1053 10.213.0.9:3128" - sh "$LAB" gexec "$LAB_NAME" 2 /usr/bin/python3
}

@test "jail egress: a local user squatting a broker's ports on a gateway (no broker there) never answers the guest (UDP and TCP DNS, proxy); root's listener does" {
	run squat_check
	echo "$output"
	[ "$status" -eq 0 ]
}

# mutate PATTERN: delete the jail chain's rules whose listing matches the
# awk PATTERN (printing how many), for a mutation; netsetup restores them.
mutate_jail() {
	local hs h
	hs=$(ip netns exec "$LAB_NAME-host" nft -a list chain inet isopod jail | awk "/$1/ { print \$NF }")
	echo "deleted: $(wc -w <<<"$hs")"
	for h in $hs; do
		ip netns exec "$LAB_NAME-host" nft delete rule inet isopod jail handle "$h"
	done
}

# The mutations: the client drops gone one at a time, the other local
# user's query or connection on that port is answered and the check FAILS;
# the squatter drops gone, its answers reach the guest and the check FAILS.
@test "mutation: each of jail's local-client drops deleted alone (udp 1053, tcp 1053, tcp 3128), or the squatter drops: the user's probe on that port passes and the check FAILS; netsetup restores them" {
	local m want
	for m in "udp dport 1053 meta skuid/udp:1053" "tcp dport 1053 meta skuid/tcp:10.213.0.9:1053 refused" \
		"tcp dport 3128 meta skuid/tcp:10.213.0.9:3128 ok"; do
		want=${m#*/}
		[ "$want" != udp:1053 ] || want="dns:10.213.0.9:1053 ok"
		run mutate_jail "${m%%/*}"
		[ "$output" = "deleted: 1" ]
		broken guest_answer_check "*user *$want*"
	done
	run mutate_jail "sport (1053|3128) meta skuid"
	[ "$output" = "deleted: 3" ]
	broken squat_check '*user: tcpr:10.213.0.9:53 ok tcpr:10.213.0.9:3128 ok udp:10.213.0.9:53 ok*'
}

# The doctor's resolver port (review L3): the one 127.0.0.1 port jail_out
# accepts is privileged, so a jail uid (any non-root user) cannot bind it;
# a jail uid reaches it and not the old 1052.
@test "jail egress: the chain's one 127.0.0.1 port (the doctor's resolver, 952) is privileged: a non-root uid cannot bind it (EACCES); a jail uid reaches it and not 1052" {
	local uid chain port srv got
	uid=$(( $(jq .jail_egress.uid_first "$BATS_FILE_TMPDIR/netsetup.json") + 43900 ))
	chain=$(ip netns exec "$LAB_NAME-host" nft list chain inet isopod jail_out)
	echo "$chain"
	[ "$(grep -c 'ip daddr 127\.0\.0\.1 ' <<<"$chain")" -eq 1 ]
	port=$(sed -n 's/.*ip daddr 127\.0\.0\.1 udp dport \([0-9]*\) accept.*/\1/p' <<<"$chain")
	echo "port $port"
	[ -n "$port" ]
	run ip netns exec "$LAB_NAME-host" setpriv --reuid="$uid" --regid="$uid" --clear-groups /usr/bin/python3 -c \
		"import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
try: s.bind(('127.0.0.1', int(sys.argv[1]))); print('bound')
except OSError as e: print(e.strerror)" "$port"
	echo "$output"
	[ "$output" = "Permission denied" ]
	[ "$port" = 952 ]
	ip netns exec "$LAB_NAME-host" /usr/bin/python3 "$BATS_TEST_DIRNAME/lab/jailegress.py" serve \
		127.0.0.1:"$port" 127.0.0.1:1052 >"$BATS_TEST_TMPDIR/srv" 2>&1 3>&- &
	srv=$!
	for _ in $(seq 1 50); do grep -q ready "$BATS_TEST_TMPDIR/srv" && break; sleep 0.1; done
	got=$(ip netns exec "$LAB_NAME-host" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
		/usr/bin/python3 "$BATS_TEST_DIRNAME/lab/jailegress.py" probe udp:127.0.0.1:"$port" udp:127.0.0.1:1052 | tr '\n' ' ')
	kill "$srv"
	wait "$srv" 2>/dev/null || :
	echo "$got"
	[ "$got" = "udp:127.0.0.1:$port ok udp:127.0.0.1:1052 blocked " ]
}

@test "filtered: 18 concurrent runs on 16 filtered slots: 16 run with their own brokers, 2 get 102 'slots busy', none leaks" {
	local d="$BATS_TEST_TMPDIR/conc" k ok busy other
	# 17 filtered slots (slot 2 is the stand-in's: 16 free) and the open one.
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 17 --open-slots 1 --user 0 >/dev/null
	run_many "$d" 18 'filtered network slots busy' vrun --net filtered --allow pkg.test --mem-mib 192 \
		--timeout-s 300 -- sh -c 'sleep 15; wget -q -O- http://pkg.test/'
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 3 --open-slots 1 --user 0 >/dev/null
	[ "$ok" -eq 16 ] && [ "$busy" -eq 2 ] && [ "$other" -eq 0 ] || false
	# 16 distinct slots, each run served by its own broker, and all of it gone again
	[ "$(cat "$d"/*.json | jq -r 'select(.net) | .net.slot' | sort -un | wc -l)" -eq 16 ]
	[ "$(cat "$d"/*.json | jq -r 'select(.ok and .stdout == "lab 198.51.100.10\n" and
		(.egress.allowed | map(select(.kind == "http" and .name == "pkg.test")) | length == 1)) | .vm.id' | wc -l)" -eq 16 ]
	for k in 0 1 $(seq 3 16); do
		flock -n "$ISOPOD_NET_LOCKS/slot-$k" true
	done
	[ -z "$(broker_pids)" ]
}

@test "filtered, debian guest: curl https://pkg.test through CONNECT with the lab's test CA; https://other.test refused; the 403 names the allowlist" {
	if [ "${ISOPOD_DEBIAN:-1}" = 0 ]; then
		skip "ISOPOD_DEBIAN=0: make images did not build the debian flavor"
	fi
	[ -f "$ISOPOD_HOME/images/current-debian" ] || { echo "no debian image registered: run make images" >&2; return 1; }
	run --separate-stderr vrun --net filtered --allow pkg.test --stage debian --mem-mib 512 --timeout-s 240 \
		--copy-in "$ISOPOD_LAB_STATE/$LAB_NAME/tls/ca.pem:/root/ca.pem" -- sh -c '
		curl -sS --cacert /root/ca.pem https://pkg.test/ | sed "s/^/https: /"
		curl -sS --cacert /root/ca.pem https://other.test/ 2>&1 | sed "s/^/other-https: /"
		curl -sS http://other.test/ | sed "s/^/other-http: /"'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.stdout | test("https: lab tls 198.51.100.10")'
	json_is '.stdout | test("other-https: curl: \\(56\\) CONNECT tunnel failed, response 403")'
	json_is '.stdout | test("other-http: isopod-broker: other.test is not in the allowlist \\(pkg.test\\)")'
	json_is '[.egress.allowed[] | select(.kind == "connect" and .name == "pkg.test" and .port == 443)] | length == 1'
	json_is '[.egress.denied[] | select(.name == "other.test") | .kind] | sort == ["connect", "http"]'
}

# slurmstepd with proctrack/linuxproc, in small: python3 -c "$STEPD" PIDFILE
# CMD... is a child subreaper (an orphan of the step stays its
# descendant) that runs CMD in a session of its own, its pid in PIDFILE,
# and once CMD exits SIGKILLs every process still below it, as slurmstepd
# ends a step whose task exited.  tree_term PID: SIGTERM to PID and every
# descendant at once, scancel's signal to the step.
STEPD='import ctypes, os, sys, signal
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execvp(sys.argv[2], sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % pid)
os.waitpid(pid, 0)
def below(p):
    out = []
    for t in os.listdir("/proc/%d/task" % p):
        try:
            kids = [int(k) for k in open("/proc/%d/task/%s/children" % (p, t)).read().split()]
        except OSError:
            kids = []
        for k in kids:
            out += [k] + below(k)
    return out
left = below(os.getpid())
sys.stderr.write("stepd: the task exited; SIGKILL to what is left: %s\n" % left)
for k in left:
    try:
        os.kill(k, signal.SIGKILL)
    except OSError:
        pass
while True:
    try:
        os.wait()
    except ChildProcessError:
        break'
# step_run: a filtered run of `sleep 60` in the lab, as that step's task
# ($stepd: the stand-in slurmstepd; its stdout, stderr in $BATS_TEST_TMPDIR).
step_run() {
	python3 -c "$STEPD" "$BATS_TEST_TMPDIR/task.pid" ip netns exec "$LAB_NAME-host" \
		sh "$BATS_TEST_DIRNAME/lab/cgexec" env ISOPOD_HOME="$ISOPOD_HOME" \
		ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" PATH="$PATH" isopod run --json-only --net filtered \
		--timeout-s 120 -- sleep 60 >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err" 3>&- </dev/null &
	stepd=$!
}

tree_term() {
	local all= new="$1" p kids
	while [ -n "$new" ]; do
		kids=
		for p in $new; do
			kids="$kids $(cat /proc/"$p"/task/*/children 2>/dev/null || :)"
		done
		# shellcheck disable=SC2086 # the words: pids
		new=$(echo $kids)
		all="$all $new"
	done
	# shellcheck disable=SC2086
	kill -TERM $all 2>/dev/null || :
}

# What Slurm's scancel does to a run (proctrack/linuxproc): SIGTERM to every
# process of the step at once, the front end, isopod-exec, the supervisor,
# QEMU and the broker (each jail's init and program), then SIGKILL to what
# is left once the task exited.  The supervisor's cleanup must have removed
# the VM's cgroups (QEMU's isopod-<id>, the broker's isopod-broker-<id>, in
# every hierarchy) before the front end lets the step end: nothing is left
# for gc, which reports no leak and no cgroup.
@test "filtered: SIGTERM to the whole process tree at once (scancel), then SIGKILL to the rest: no cgroup of the VM is left, gc reports no leak" {
	local d="$BATS_TEST_TMPDIR" id i left gc
	step_run
	for i in $(seq 1 1200); do
		id=$(isopod vm ls 2>/dev/null | jq -r 'select(.running) | .id' | head -n 1)
		[ -n "$id" ] && [ -n "$(find /sys/fs/cgroup -maxdepth 6 -type d -name "isopod-broker-$id" 2>/dev/null)" ] && break
		sleep 0.1
	done
	echo "vm: $id"
	[ -n "$id" ]
	# the guest's command runs: the run is past its boot
	sleep 1
	tree_term "$stepd"
	wait "$stepd" || :
	left=$(find /sys/fs/cgroup -maxdepth 6 -type d -name "isopod-*$id")
	gc=$(isopod-gc --dry-run)
	cat "$d/err"
	echo "left: $left"
	echo "gc: $gc"
	[ -z "$left" ]
	jq -e --arg id "$id" '.leaked == [] and [.cgroups[] | select(.vm == $id)] == []' <<<"$gc"
	run vm_locked "$id"
	[ "$status" -ne 0 ]
}

# The same while the run's boot builds the warm template (the first run of
# its shape): isopod-boot holds the signal until the build has stopped and
# cleaned up after itself (lib/warmpool.c owner_gone): the template's jail
# and its cgroups, the VM's disk lent to it, vms/<id>/tpl, the staging
# directory.  Nothing is left for gc.
@test "filtered: the same tree-wide SIGTERM while the warm template is built: no template cgroup, lent disk, tpl/ or staging directory is left, gc reports no leak" {
	local d="$BATS_TEST_TMPDIR" id i st key left gc
	rm -rf "$ISOPOD_HOME/warm"
	step_run
	for i in $(seq 1 1200); do
		st=$(ls -d "$ISOPOD_HOME"/warm/.staging-* 2>/dev/null) && key=${st##*/.staging-} && key=${key%%.*} &&
			[ -n "$(find /sys/fs/cgroup -maxdepth 6 -type d -name "isopod-tpl-${key:0:32}-*" 2>/dev/null)" ] && break
		sleep 0.05
	done
	id=$(isopod vm ls | jq -r .id | head -n 1)
	echo "vm: $id, staging: $st"
	[ -n "$key" ]
	tree_term "$stepd"
	wait "$stepd" || :
	left=$(find /sys/fs/cgroup -maxdepth 6 -type d \( -name "isopod-*$id" -o -name "isopod-tpl-${key:0:32}-*" \))
	gc=$(isopod-gc --dry-run)
	cat "$d/err"
	echo "left: $left"
	echo "gc: $gc"
	[ -z "$left" ]
	[ ! -e "$ISOPOD_HOME/vms/$id/tpl" ]
	[ -z "$(ls -d "$ISOPOD_HOME"/warm/.staging-* 2>/dev/null)" ]
	jq -e --arg id "$id" --arg t "tpl-${key:0:32}-" \
		'.leaked == [] and [.cgroups[] | select(.vm == $id or (.template // "" | startswith($t)))] == []' <<<"$gc"
}

# QEMU that cannot start after the broker did (here: its console.log is a
# directory, so the supervisor cannot open it): the supervisor ends the
# broker and removes its jail's cgroups before it exits, and the boot fails
# saying why.  Nothing of the broker's is left for gc.
@test "filtered: QEMU fails to start after the broker: the supervisor removes the broker's cgroups; gc finds none" {
	local vm left gc
	lab_env() {
		ip netns exec "$LAB_NAME-host" sh "$BATS_TEST_DIRNAME/lab/cgexec" env ISOPOD_HOME="$ISOPOD_HOME" \
			ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" PATH="$PATH" "$@"
	}
	vm=$(lab_env isopod-claim --net filtered | jq -er .vm.id)
	mkdir "$ISOPOD_HOME/vms/$vm/console.log"
	run --separate-stderr lab_env isopod-boot --vm "$vm" --owner-pid $$ --cold --timeout-ms 60000
	left=$(find /sys/fs/cgroup -maxdepth 6 -type d -name "isopod-*$vm")
	gc=$(isopod-gc --dry-run)
	echo "$status: $stderr"
	cat "$ISOPOD_HOME/vms/$vm/broker.log"
	echo "left: $left"
	echo "gc: $gc"
	[ "$status" -ne 0 ]
	[[ "$stderr" == *"console.log"* ]]
	grep -q '"cgroup":{"version"' "$ISOPOD_HOME/vms/$vm/broker.log"
	[ -z "$left" ]
	jq -e --arg id "$vm" '[.cgroups[] | select(.vm == $id)] == []' <<<"$gc"
}
