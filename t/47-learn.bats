#!/usr/bin/env bats
# Learn mode end to end (issue 15): `isopod run --net learn` on a filtered
# slot whose broker lets every name through and records each flow, and the
# allowlist its result proposes (lib/propose.c), checked by running the
# same command under filtered with that list, and with each entry removed.
# Inside the sealed lab of t/lab/lab.sh (network namespaces only): its DNS
# (dns.py), its HTTPS listener with the lab's test CA, which is also a
# one-package index whose wheel redirects from pkg.test to files.test
# (tls.py); and (issue 14) a stand-in of snapshot.debian.org (`lab.sh
# mirror`) serving a one-package apt repository where the debian image's
# apt source points.
#
# Budget: one busybox VM, four debian VMs one after another (pip under TCG is
# most of it).  Measured on a shared 2-core TCG host with other suites
# booting VMs at once (2026-12-02): tests 1-2 with the file's set-up ~3.5
# min; the debian test ~10.5 min; the apt test 78 s with the set-up.  With
# VM suites serialised (2026-12-03, /work/vmtest.lock): test 1 18 s, the
# debian pip test 48-58 s (each pip run 10-15 s, 22-24 s for the first,
# whose boot builds the warm snapshot or boots cold; the same with
# ISOPOD_WARM=0), the file's set-up and teardown ~10 s.  Running the three
# filtered pip runs at once was tried: on 2 cores
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
	# no name below a registrable domain (.test is no public suffix): no fold
	json_is '.proposed_allowlist.folds == [] and .proposed_allowlist.fold.applied == false'
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

# ptime WHAT RESULT: the pip run's timings on the TAP stream (the figures that
# decide whether this test can afford make check).
ptime() {
	echo "# pip $1: $(jq -c '{path, accel} + (.timings | {boot_ms, exec_ms, total_ms})' <<<"$2" 2>/dev/null)" >&3
}

@test "learn, debian guest: pip install from the lab index (a redirect to a second name); filtered with the proposal installs it; with either entry removed it fails" {
	if [ "${ISOPOD_DEBIAN:-1}" = 0 ]; then
		skip "ISOPOD_DEBIAN=0: make images did not build the debian flavor"
	fi
	# four pip runs of a debian guest, ~1 min in make check (files run one
	# after another; see the top): the issue's acceptance runs on every check
	[ -f "$ISOPOD_HOME/images/current-debian" ] || { echo "no debian image registered: run make images" >&2; return 1; }
	local pats p args=() rest
	run --separate-stderr prun --net learn
	echo "$output" | jq -r .stdout,.stderr
	ptime learn "$output"
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
	ptime filtered "$output"
	[ "$status" -eq 0 ]
	json_is '.stdout | test("lab index")'
	for p in $pats; do
		rest=$(grep -vx "$p" <<<"$pats" | sed 's/^/--allow /')
		# shellcheck disable=SC2086 # one word per pattern
		run --separate-stderr prun --net filtered $rest
		echo "without $p: $(jq -c '{exit_code, denied: .egress.denied}' <<<"$output")"
		ptime "filtered without $p" "$output"
		[ "$status" -ne 0 ]
		json_is '.stdout | test("lab index") | not'
		json_is '[.egress.denied[] | select(.name == "'"$p"'")] | length >= 1'
	done
}

# apt_repo DIR URL: a one-package apt repository (isopod-labapt, arch all)
# for bookworm main laid out under DIR at URL's path, its InRelease signed
# by a key made here, whose public half is DIR/key.asc.  Not Debian's
# InRelease: the build keeps none (images/build-base deletes the lists),
# and apt checks the signature, so the guest trusts the test key
# (/etc/apt/trusted.gpg.d) instead of debian-archive-keyring.
apt_repo() {
	local root g=$BATS_TEST_TMPDIR/gnupg pkg=$BATS_TEST_TMPDIR/pkg p
	root=$1/${2#http://*/}
	mkdir -p "$pkg/DEBIAN" "$pkg/usr/share/isopod-labapt" "$root/pool/main" \
		"$root/dists/bookworm/main/binary-amd64" "$g"
	chmod 700 "$g"
	printf '%s\n' 'Package: isopod-labapt' 'Version: 1.0' 'Architecture: all' \
		'Maintainer: isopod lab <lab@test>' 'Description: the lab mirror test package' >"$pkg/DEBIAN/control"
	echo "installed from the lab mirror" >"$pkg/usr/share/isopod-labapt/hello"
	dpkg-deb --root-owner-group -b "$pkg" "$root/pool/main/isopod-labapt_1.0_all.deb" >/dev/null
	(cd "$root" && dpkg-scanpackages pool/main /dev/null 2>/dev/null >dists/bookworm/main/binary-amd64/Packages)
	p=$root/dists/bookworm/main/binary-amd64/Packages
	{
		printf '%s\n' 'Origin: isopod-lab' 'Label: isopod-lab' 'Suite: stable' 'Codename: bookworm'
		echo "Date: $(date -u -d '-1 hour' '+%a, %d %b %Y %H:%M:%S UTC')"
		printf '%s\n' 'Architectures: amd64' 'Components: main' 'SHA256:'
		echo " $(sha256sum <"$p" | cut -d' ' -f1) $(stat -c %s "$p") main/binary-amd64/Packages"
	} >"$root/dists/bookworm/Release"
	gpg --homedir "$g" --batch --passphrase '' --quick-gen-key 'isopod lab <lab@test>' ed25519 sign never 2>/dev/null
	gpg --homedir "$g" --batch --armor --export >"$1/key.asc"
	chmod 644 "$1/key.asc"
	gpg --homedir "$g" --batch --clearsign -o "$root/dists/bookworm/InRelease" "$root/dists/bookworm/Release"
	gpgconf --homedir "$g" --kill all 2>/dev/null || :
}

APT='apt-get -q update && apt-get install -y -q isopod-labapt && cat /usr/share/isopod-labapt/hello'

arun() {
	vrun "$@" --stage debian --mem-mib 512 --timeout-s 300 \
		--copy-in "$BATS_TEST_TMPDIR/www/key.asc:/etc/apt/trusted.gpg.d/isopod-lab.asc" -- sh -c "$APT"
}

@test "apt, debian guest: filtered with snapshot.debian.org allowed, apt-get update and install work through the broker from the lab's stand-in of the image's apt source; without it, they fail and the mirror sees nothing" {
	if [ "${ISOPOD_DEBIAN:-1}" = 0 ]; then
		skip "ISOPOD_DEBIAN=0: make images did not build the debian flavor"
	fi
	# two apt runs of a debian guest: 78 s with the file's set-up on a
	# shared 2-core TCG host, so in every make check (t/35's "the image's
	# apt source" checks the source itself without a boot)
	[ -f "$ISOPOD_HOME/images/current-debian" ] || { echo "no debian image registered: run make images" >&2; return 1; }
	local src www=$BATS_TEST_TMPDIR/www log="$ISOPOD_LAB_STATE/$LAB_NAME/log" n
	src=$(jq -r .inputs.apt_source "$ISOPOD_HOME/images/base-$(head -n 1 "$ISOPOD_HOME/images/current-debian").json")
	[[ "$src" == http://snapshot.debian.org/archive/debian/*/ ]]
	apt_repo "$www" "$src"
	sh "$LAB" mirror "$LAB_NAME" "$www"
	run --separate-stderr arun --net filtered --allow snapshot.debian.org
	echo "$output" | jq -r .stdout,.stderr
	[ "$status" -eq 0 ]
	json_is '.stdout | test("installed from the lab mirror")'
	json_is '[.egress.allowed[] | select(.name == "snapshot.debian.org")] | length >= 1'
	grep -q "GET /${src#http://*/}dists/bookworm/InRelease" "$log"
	n=$(grep -c 'GET /' "$log")
	run --separate-stderr arun --net filtered
	echo "$output" | jq -r .stdout,.stderr
	[ "$status" -ne 0 ]
	json_is '.stdout | test("installed from the lab mirror") | not'
	json_is '[.egress.denied[] | select(.name == "snapshot.debian.org")] | length >= 1'
	[ "$(grep -c 'GET /' "$log")" -eq "$n" ]
}
