#!/usr/bin/env bats
# Learn mode end to end (issue 15): `isopod run --net learn` on a filtered
# slot whose broker lets every name through and records each flow, and the
# allowlist its result proposes (lib/propose.c), checked by running the
# same command under filtered with that list, and with each entry removed.
# Inside the sealed lab of t/lab/lab.sh (network namespaces only): its DNS
# (dns.py), its HTTPS listener with the lab's test CA, which is also a
# one-package index whose wheel redirects from pkg.test to files.test
# (tls.py).
#
# Budget: one busybox VM, four debian VMs one after another (pip under TCG is
# most of it).  Measured on a shared 2-core TCG host with other suites
# running: tests 1-2 with the file's set-up ~3.5 min; the debian test ~10.5
# min.  Running the three filtered pip runs at once was tried: on 2 cores
# they ran past their 300 s budget, so they stay serial.

load helpers
load lab/probe
[ -z "${LAB_CONF-}" ] || export ISOPOD_SYSCONFIG=$LAB_CONF

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	isopod_lab_up "t47l$$" --slots 2
	isopod_setup_file --images
	export ISOPOD_NET_LOCKS="$ISOPOD_HOME/locks"
	mkdir -p "$ISOPOD_NET_LOCKS"
}

teardown_file() {
	isopod_teardown_file
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

vrun() {
	ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" \
		PATH="$PATH" isopod run --json-only "$@"
}

# netns_del NS: a test's own netns and isopod-netsetup's record of it (as t/40).
netns_del() {
	local ino
	ino=$(ip netns exec "$1" stat -L -c %i /proc/self/ns/net 2>/dev/null) &&
		rm -f "/run/isopod/netstate-$ino.json"
	ip netns del "$1"
}

# shellcheck disable=SC2016 # guest scripts: expanded in the guest
GW='gw=${http_proxy#http://}; gw=${gw%:3128}'
# get URL through the proxy by hand (plain HTTP, absolute form).
PGET='pget() { printf "GET http://$1/ HTTP/1.0\r\nHost: $1\r\n\r\n" | nc -w 5 "$gw" 3128; }'

@test "learn: every name goes through the broker and into the ledger; the proposal names the name, the IP literal and the name only resolved; a rebound name is still refused" {
	run --separate-stderr vrun --net learn --timeout-s 120 -- sh -c "$GW; $PGET"'
		wget -q -O- http://pkg.test/ | sed "s/^/wget: /"
		pget 198.51.100.10 | sed "s/^/literal: /"
		pget rebind.test | sed "s/^/rebind: /"
		nslookup other.test >/dev/null && echo resolved-other'
	echo "$output" | jq -r .stdout
	[ "$status" -eq 0 ]
	json_is '.net.mode == "learn" and .net.slot != null'
	json_is '.stdout | test("wget: lab 198.51.100.10") and test("literal: lab 198.51.100.10") and test("resolved-other")'
	json_is '.stdout | test("rebind: HTTP/1.[01] 403")'
	json_is '[.proposed_allowlist.allow[].pattern] == ["pkg.test"]'
	json_is '.proposed_allowlist.allow[0].flows | any(. == {kind: "http", name: "pkg.test", port: 80, count: 1})'
	json_is '[.proposed_allowlist.unservable[] | {name, kind}] ==
		[{name: "other.test", kind: "dns"}, {name: "198.51.100.10", kind: "http"}]'
	json_is '.proposed_allowlist.unservable[0].why | test("another protocol")'
	json_is '.proposed_allowlist.unservable[1].why | test("IP address")'
	# the refusal is in the ledger, not in the proposal
	json_is '[.egress.denied[] | select(.name == "rebind.test")] | length == 1'
	# isopod allow propose reads the same ledger to the same proposal
	local id prop
	id=$(jq -r .vm.id <<<"$output")
	prop=$(jq -cS .proposed_allowlist <<<"$output")
	run --separate-stderr isopod allow propose "$ISOPOD_HOME/vms/$id/ledger.jsonl"
	[ "$status" -eq 0 ]
	[ "$(jq -cS . <<<"$output")" = "$prop" ]
}

@test "learn: a host with no filtered slot refuses it at once, naming the slots it needs" {
	local ns="${LAB_NAME}-n"
	ip netns add "$ns"
	ip netns exec "$ns" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 0 --open-slots 1 >/dev/null
	run --separate-stderr ip netns exec "$ns" env ISOPOD_HOME="$ISOPOD_HOME" \
		ISOPOD_NET_LOCKS="$BATS_TEST_TMPDIR/locks" PATH="$PATH" isopod run --json-only --net learn -- true
	netns_del "$ns"
	echo "$stderr"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"no filtered slots (--net learn runs on filtered slots): run \`sudo isopod-netsetup --slots N\`"* ]]
}

# The acceptance of issue 15: pip install from the lab's index under learn;
# the proposal under filtered serves it; without any one entry it fails.
PIP='pip install --no-cache-dir --retries 1 --timeout 30 --cert /root/ca.pem \
	--index-url https://pkg.test/simple/ labpkg && python3 -c "import labpkg; print(labpkg.WHERE)"'

prun() {
	vrun "$@" --stage debian --mem-mib 512 --timeout-s 300 \
		--copy-in "$ISOPOD_LAB_STATE/$LAB_NAME/tls/ca.pem:/root/ca.pem" -- sh -c "$PIP"
}

@test "learn, debian guest: pip install from the lab index (a redirect to a second name); filtered with the proposal installs it; with either entry removed it fails" {
	if [ "${ISOPOD_DEBIAN:-1}" = 0 ]; then
		skip "ISOPOD_DEBIAN=0: make images did not build the debian flavor"
	fi
	# four pip runs of a debian guest cost ~10 min under TCG: past CI's budget
	# (make check stays under 60 min); the busybox test above proves the
	# proposal through the same broker and ledger on every run
	if [ "${ISOPOD_TEST_SLOW:-0}" != 1 ]; then
		skip "the pip acceptance runs with ISOPOD_TEST_SLOW=1 (about 10 min)"
	fi
	[ -f "$ISOPOD_HOME/images/current-debian" ] || { echo "no debian image registered: run make images" >&2; return 1; }
	local pats p args=() rest
	run --separate-stderr prun --net learn
	echo "$output" | jq -r .stdout,.stderr
	[ "$status" -eq 0 ]
	json_is '.stdout | test("lab index")'
	json_is '[.proposed_allowlist.allow[].pattern] == ["files.test", "pkg.test"]'
	json_is '.proposed_allowlist.unservable == []'
	json_is '.proposed_allowlist.allow | all(.flows | any(.kind == "connect" and .port == 443))'
	pats=$(jq -r '.proposed_allowlist.allow[].pattern' <<<"$output")
	for p in $pats; do
		args+=(--allow "$p")
	done
	run --separate-stderr prun --net filtered "${args[@]}"
	echo "$output" | jq -r .stdout,.stderr
	[ "$status" -eq 0 ]
	json_is '.stdout | test("lab index")'
	for p in $pats; do
		rest=$(grep -vx "$p" <<<"$pats" | sed 's/^/--allow /')
		# shellcheck disable=SC2086 # one word per pattern
		run --separate-stderr prun --net filtered $rest
		echo "without $p: $(jq -c '{exit_code, denied: .egress.denied}' <<<"$output")"
		[ "$status" -ne 0 ]
		json_is '.stdout | test("lab index") | not'
		json_is '[.egress.denied[] | select(.name == "'"$p"'")] | length >= 1'
	done
}
