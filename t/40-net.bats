#!/usr/bin/env bats
# Networking (issue 4): isopod-netsetup and the egress policy, inside the
# sealed lab of t/lab/lab.sh (network namespaces only; nothing is linked to
# the root namespace, so no probe can leave this machine).
#
# The policy tests use stand-in guests (t/lab/fakevm.py: a netns whose eth0
# is relayed to isopod-tapK, probing with the same busybox the guest image
# carries), so they run in seconds and test exactly the host side: taps,
# addresses, nftables.  Every deny class is probed with TCP (busybox nc),
# UDP (busybox nslookup to the UDP echo) and ICMP (busybox ping) against a
# live listener, next to a control probe that passes in the same test, and
# the listeners' hit log proves a blocked probe never arrived.

load helpers

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh"
	export LAB_NAME="t40n$$"
	export ISOPOD_LAB_STATE="${BATS_FILE_TMPDIR}/lab"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" up "$LAB_NAME" >/dev/null
	sh "$LAB" exec "$LAB_NAME" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 18 --user 0 \
		>"$BATS_FILE_TMPDIR/netsetup.json"
	# Stand-in guests on slots 16 and 17; their slot locks are held for the
	# whole file, so real VMs get exactly slots 0..15.
	sh "$LAB" fakevm "$LAB_NAME" 16 900
	sh "$LAB" fakevm "$LAB_NAME" 17 900
	isopod_setup_file --images
	export ISOPOD_NET_LOCKS="$ISOPOD_HOME/locks"
	mkdir -p "$ISOPOD_NET_LOCKS"
	# One process holds both locks (on its fds 8, 9): killing it frees them.
	(
		exec 8>>"$ISOPOD_NET_LOCKS/slot-16" 9>>"$ISOPOD_NET_LOCKS/slot-17"
		flock -n 8 && flock -n 9 && exec sleep 900
	) 3>&- </dev/null >/dev/null 2>&1 &
	echo $! >"$BATS_FILE_TMPDIR/holder.pid"
	# Real VMs need isopod-boot with --net support; find out with one run.
	NET_VM=0
	if out=$(vrun --net open --timeout-s 60 -- true) &&
		jq -e '.net.mode == "open" and .net.slot == 0' >/dev/null <<<"$out"; then
		NET_VM=1
	fi
	export NET_VM
}

vm_tests() { [ "$NET_VM" = 1 ] || skip "isopod-boot without --net support (see the report)"; }

# isopod run inside the lab's host netns.
vrun() {
	ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$ISOPOD_HOME" \
		ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" PATH="$PATH" isopod run --json-only "$@"
}

teardown_file() {
	local pid
	pid=$(cat "$BATS_FILE_TMPDIR/holder.pid" 2>/dev/null) && kill "$pid" 2>/dev/null
	isopod_teardown_file
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

lab() { sh "$LAB" "$1" "$LAB_NAME" "${@:2}"; }
hits() { grep -c " $1 " "$ISOPOD_LAB_STATE/$LAB_NAME/hits" || :; }

# From stand-in guest K to ADDR: TCP 80, UDP 7, ICMP.  0 = got an answer.
tcp_ok() {
	printf 'GET / HTTP/1.0\r\n\r\n' | lab gexec "$1" busybox timeout 5 busybox nc -w 2 "$2" 80 |
		grep -q "^lab $2\$"
}
udp_ok() {
	lab gexec "$1" busybox nslookup -port=7 -timeout=1 -retry=1 probe.test "$2" | grep -q NXDOMAIN
}
icmp_ok() {
	lab gexec "$1" busybox ping -c1 -W1 "$2" >/dev/null
}

# assert_blocked K ADDR: no protocol gets through, and the listener at ADDR
# (proven live by lab up / fakevm) saw nothing.
assert_blocked() {
	local before after
	before=$(hits "$2")
	! tcp_ok "$1" "$2" || { echo "TCP to $2 got through" >&2; return 1; }
	! udp_ok "$1" "$2" || { echo "UDP to $2 got through" >&2; return 1; }
	! icmp_ok "$1" "$2" || { echo "ICMP to $2 got through" >&2; return 1; }
	after=$(hits "$2")
	[ "$before" = "$after" ] || { echo "the listener on $2 saw $((after - before)) hits" >&2; return 1; }
}

assert_open() {
	local before after
	before=$(hits "$2")
	tcp_ok "$1" "$2" || { echo "control: TCP to $2 failed" >&2; return 1; }
	udp_ok "$1" "$2" || { echo "control: UDP to $2 failed" >&2; return 1; }
	icmp_ok "$1" "$2" || { echo "control: ICMP to $2 failed" >&2; return 1; }
	after=$(hits "$2")
	[ "$after" -ge $((before + 2)) ] || { echo "control: listener on $2 saw no hits" >&2; return 1; }
}

@test "netsetup: JSON report, taps owned and addressed, table verified" {
	output=$(cat "$BATS_FILE_TMPDIR/netsetup.json")
	json_is '.table == "inet isopod" and .slots == 18 and .verified == true and .forwarding == true'
	json_is '.docker_user == false and .owner == 0 and .chains == 8 and .prefix == 25'
	json_is '[.taps[].name] == [range(18) | "isopod-tap\(.)"]'
	json_is '.taps[17] | .gateway == "10.213.0.69" and .guest == "10.213.0.70" and .mac == "02:69:73:00:00:11"'
	run lab exec ip -4 -o addr show dev isopod-tap3
	[[ "$output" == *"10.213.0.13/30"* ]]
	run lab exec cat /sys/class/net/isopod-tap2/owner
	[ "$output" = 0 ]
	run lab exec cat /proc/sys/net/ipv4/ip_forward
	[ "$output" = 1 ]
}

@test "netsetup: a second run changes nothing and verifies again" {
	local first second
	first=$(lab exec nft list table inet isopod | grep -v counter)
	run --separate-stderr lab exec "$ISOPOD_SRC/bin/isopod-netsetup" --slots 18 --user 0
	[ "$status" -eq 0 ]
	json_is '.verified == true and .taps_created == 0'
	json_is '[.taps[] | select(.busy) | .slot] == [16, 17]' # held by the stand-in guests
	second=$(lab exec nft list table inet isopod | grep -v counter)
	[ "$first" = "$second" ]
	[ "$(lab exec nft list tables | grep -c 'inet isopod')" -eq 1 ]
}

@test "netsetup: usage errors exit 100, a non-tap isopod-tapN is a conflict (102)" {
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-netsetup" --slots 0
	[ "$status" -eq 100 ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-netsetup" --base 10.213.0.4
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"aligned"* ]]
	run "$ISOPOD_SRC/bin/isopod-netsetup" -h
	[ "$status" -eq 0 ]
	[ "$output" = "usage: isopod-netsetup [--slots N] [--base ADDR] [--user UID] [--no-docker-user] [--remove]" ]
	# In a namespace of its own: a veth squatting on the name of slot 0.
	local ns="${LAB_NAME}-c"
	ip netns add "$ns"
	ip netns exec "$ns" ip link add isopod-tap0 type veth peer name x0
	run --separate-stderr ip netns exec "$ns" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 1
	ip netns del "$ns"
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"isopod-tap0"*"not a tap"* ]]
}

@test "netsetup --remove deletes the table and every tap; a rerun restores them" {
	local ns="${LAB_NAME}-r"
	ip netns add "$ns"
	run --separate-stderr ip netns exec "$ns" "$ISOPOD_SRC/bin/isopod-netsetup" --slots 3
	[ "$status" -eq 0 ]
	json_is '.verified == true and .taps_created == 3 and .owner == null'
	run --separate-stderr ip netns exec "$ns" "$ISOPOD_SRC/bin/isopod-netsetup" --remove
	[ "$status" -eq 0 ]
	json_is '.removed == true and (.taps | length) == 3'
	run ip netns exec "$ns" nft list ruleset
	[ -z "$output" ]
	run ip netns exec "$ns" ip -o link show
	[[ "$output" != *isopod-tap* ]]
	run --separate-stderr ip netns exec "$ns" "$ISOPOD_SRC/bin/isopod-netsetup" --remove
	[ "$status" -eq 0 ]
	json_is '.taps == []'
	ip netns del "$ns"
}

@test "open: the control target on the internet answers TCP, UDP and ICMP" {
	assert_open 16 198.51.100.10
	assert_open 17 198.51.100.10
	# and it sees the host's address, not the guest's: masqueraded.
	tail -n 3 "$ISOPOD_LAB_STATE/$LAB_NAME/hits" | grep -q '198.51.100.10 203.0.113.1$'
}

@test "deny: cloud metadata 169.254.169.254" {
	assert_open 16 198.51.100.10
	assert_blocked 16 169.254.169.254
}

@test "deny: RFC 1918 10/8, 172.16/12, 192.168/16" {
	assert_open 16 198.51.100.10
	assert_blocked 16 10.99.0.5
	assert_blocked 16 172.16.5.5
	assert_blocked 16 192.168.5.5
}

@test "deny: the host's own non-gateway address, and another slot's gateway" {
	assert_open 16 198.51.100.10
	assert_blocked 16 203.0.113.1
	! icmp_ok 16 10.213.0.69
	# the own gateway answers ping (a gateway service)
	icmp_ok 16 10.213.0.65
}

@test "deny: another VM, both ways" {
	assert_open 16 198.51.100.10
	assert_blocked 16 10.213.0.70
	assert_blocked 17 10.213.0.66
	# both listeners are live: the host reaches them
	printf 'GET / HTTP/1.0\r\n\r\n' | lab exec busybox nc -w 2 10.213.0.70 80 | grep -q '^lab 10.213.0.70$'
}

@test "anti-spoof: another source IP is dropped, the own one passes" {
	lab gexec 16 ip addr add 10.213.0.70/32 dev eth0
	run lab gexec 16 busybox ping -c1 -W1 -I 10.213.0.70 198.51.100.10
	local spoofed=$status
	lab gexec 16 ip addr del 10.213.0.70/32 dev eth0
	[ "$spoofed" -ne 0 ]
	lab gexec 16 busybox ping -c1 -W1 -I 10.213.0.66 198.51.100.10
}

@test "anti-spoof: another MAC is dropped, the own one passes" {
	lab gexec 17 ip link set eth0 address 02:69:73:00:00:10
	run lab gexec 17 busybox ping -c1 -W1 198.51.100.10
	local spoofed=$status
	lab gexec 17 ip link set eth0 address 02:69:73:00:00:11
	[ "$spoofed" -ne 0 ]
	lab gexec 17 busybox ping -c1 -W1 198.51.100.10
}

@test "mutation: without the table every denied target answers; netsetup restores the block" {
	lab exec nft delete table inet isopod
	run assert_open 16 169.254.169.254
	local open_meta=$status
	run assert_open 16 10.99.0.5
	local open_priv=$status
	run assert_open 16 10.213.0.70
	local open_vm=$status
	lab exec "$ISOPOD_SRC/bin/isopod-netsetup" --slots 18 --user 0 >/dev/null
	[ "$open_meta" -eq 0 ] && [ "$open_priv" -eq 0 ] && [ "$open_vm" -eq 0 ]
	assert_blocked 16 169.254.169.254
	assert_blocked 16 10.213.0.70
	assert_open 16 198.51.100.10
}

@test "lab: sealed — no route out of the internet netns, nothing linked to the root netns" {
	# the internet netns has no default route: anything else dies there
	run ip netns exec "${LAB_NAME}-inet" ip route show default
	[ -z "$output" ]
	# the lab's only veth ends in the lab: its peer is not in the root netns
	run ip -o link show
	[[ "$output" != *" i0@"* && "$output" != *" h0@"* ]]
}

# ---- real VMs (isopod run --net, QEMU in the lab's host netns) ----------------

# The guest's own probe loop: "tcp|udp|icmp ADDR ok|no" per target.
GUEST_PROBE='for a in "$@"; do
	if printf "GET / HTTP/1.0\r\n\r\n" | nc -w 2 "$a" 80 | grep -q "^lab $a\$"; then r=ok; else r=no; fi; echo "tcp $a $r"
	if nslookup -port=7 -timeout=1 -retry=1 probe.test "$a" | grep -q NXDOMAIN; then r=ok; else r=no; fi; echo "udp $a $r"
	if ping -c1 -W1 "$a" >/dev/null; then r=ok; else r=no; fi; echo "icmp $a $r"
done'

@test "vm --net none: no eth0, lo works, result says mode none" {
	vm_tests
	run --separate-stderr vrun --net none --timeout-s 60 -- sh -c 'ip link show eth0 >/dev/null 2>&1 && echo eth0; ping -c1 -W1 127.0.0.1 >/dev/null && echo lo-ok'
	[ "$status" -eq 0 ]
	json_is '.stdout == "lo-ok\n" and .net.mode == "none" and .net.slot == null'
}

@test "vm --net open: eth0 configured from HELLO; result reports net" {
	vm_tests
	run --separate-stderr vrun --net open --timeout-s 60 -- sh -c 'ip -4 -o addr show eth0; ip route show default; cat /sys/class/net/eth0/address'
	[ "$status" -eq 0 ]
	json_is '.net.mode == "open" and .net.slot == 0 and .net.guest_ip == "10.213.0.2" and .net.gateway == "10.213.0.1"'
	json_is '.stdout | test("inet 10.213.0.2/30") and test("default via 10.213.0.1") and test("02:69:73:00:00:00")'
}

@test "vm --net open: control reachable; metadata, RFC 1918, host, other VM blocked (TCP, UDP, ICMP)" {
	vm_tests
	local targets="198.51.100.10 169.254.169.254 10.99.0.5 172.16.5.5 192.168.5.5 203.0.113.1 10.213.0.66"
	local before after a
	before=$(grep -vc ' 198.51.100.10 ' "$ISOPOD_LAB_STATE/$LAB_NAME/hits" || :)
	run --separate-stderr vrun --net open --timeout-s 170 -- sh -c "$GUEST_PROBE" probe $targets
	[ "$status" -eq 0 ]
	echo "$output" | jq -r .stdout
	for p in tcp udp icmp; do
		echo "$output" | jq -e --arg l "$p 198.51.100.10 ok" '.stdout | split("\n") | index($l) != null'
		for a in ${targets#198.51.100.10 }; do
			echo "$output" | jq -e --arg l "$p $a no" '.stdout | split("\n") | index($l) != null'
		done
	done
	# No denied listener saw anything.
	after=$(grep -vc ' 198.51.100.10 ' "$ISOPOD_LAB_STATE/$LAB_NAME/hits" || :)
	[ "$before" = "$after" ]
}

@test "vm --net open: a spoofed source address is dropped, the own one passes" {
	vm_tests
	run --separate-stderr vrun --net open --timeout-s 60 -- sh -c '
		ip addr add 10.213.0.70/32 dev eth0
		ping -c1 -W2 -I 10.213.0.70 198.51.100.10 >/dev/null && echo spoof-passed
		ping -c1 -W2 -I 10.213.0.2 198.51.100.10 >/dev/null && echo own-ok'
	[ "$status" -eq 0 ]
	json_is '.stdout == "own-ok\n"'
}

@test "vm: taps missing → claim fails fast naming sudo isopod-netsetup and --net none" {
	vm_tests
	local ns="${LAB_NAME}-e"
	ip netns add "$ns"
	run --separate-stderr ip netns exec "$ns" env ISOPOD_HOME="$ISOPOD_HOME" PATH="$PATH" \
		isopod run --json-only --net open -- true
	ip netns del "$ns"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"sudo isopod-netsetup"*"--net none"* ]]
	run --separate-stderr isopod run --json-only --net filtered -- true
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"not implemented"* ]]
}

@test "vm: 18 concurrent networked runs on 16 slots: 16 run, 2 get 102 'slots busy', none leaks" {
	vm_tests
	local d="$BATS_TEST_TMPDIR/conc" i pids=() ok=0 busy=0 other=0 rc k
	mkdir -p "$d"
	for i in $(seq 1 18); do
		vrun --net open --mem-mib 192 --timeout-s 240 -- sleep 15 >"$d/$i.json" 2>"$d/$i.err" &
		pids+=($!)
	done
	for i in $(seq 1 18); do
		rc=0
		wait "${pids[$((i - 1))]}" || rc=$?
		case $rc in
		0) ok=$((ok + 1)) ;;
		102) grep -q 'slots busy' "$d/$i.err" && busy=$((busy + 1)) || other=$((other + 1)) ;;
		*) other=$((other + 1)); echo "run $i: exit $rc: $(tail -n 2 "$d/$i.err")" >&2 ;;
		esac
	done
	echo "ok=$ok busy=$busy other=$other" >&2
	[ "$ok" -eq 16 ] && [ "$busy" -eq 2 ] && [ "$other" -eq 0 ]
	# 16 distinct slots, and every one free again
	[ "$(cat "$d"/*.json | jq -r 'select(.net) | .net.slot' | sort -un | wc -l)" -eq 16 ]
	for k in $(seq 0 15); do
		flock -n "$ISOPOD_NET_LOCKS/slot-$k" true
	done
}

@test "vm: SIGKILL of a networked run frees its slot at once; the next run gets it" {
	vm_tests
	local pid i
	ip netns exec "$LAB_NAME-host" env ISOPOD_HOME="$ISOPOD_HOME" ISOPOD_NET_LOCKS="$ISOPOD_NET_LOCKS" \
		PATH="$PATH" isopod run --json-only --net open --timeout-s 120 -- sleep 100 \
		>/dev/null 2>&1 3>&- &
	pid=$!
	for i in $(seq 1 300); do # ≤ 60 s for the boot
		flock -n "$ISOPOD_NET_LOCKS/slot-0" true || break
		sleep 0.2
	done
	! flock -n "$ISOPOD_NET_LOCKS/slot-0" true # held by the running VM
	sleep 1
	kill -9 "$pid"
	wait "$pid" || :
	for i in $(seq 1 50); do # the supervisor sees its owner die and ends QEMU
		flock -n "$ISOPOD_NET_LOCKS/slot-0" true && break
		sleep 0.1
	done
	run --separate-stderr vrun --net open --timeout-s 60 -- sh -c 'printf "GET / HTTP/1.0\r\n\r\n" | nc -w 2 198.51.100.10 80 | tail -n 1'
	[ "$status" -eq 0 ]
	json_is '.net.slot == 0 and .stdout == "lab 198.51.100.10\n"'
}
