# t/lab/probe.bash - deny probes that cannot pass when they did not run
# (STYLE.md pitfall 5), for the bats files using the lab:  load lab/probe
#
# Needs $LAB (lab.sh), $LAB_NAME and $ISOPOD_LAB_STATE, as those files set.
#
#   probe_blocked K SPEC...   stand-in guest K cannot reach any SPEC
#   assert_blocked K ADDR...  nor TCP 80, UDP 7 or ICMP of any ADDR
#   guest_live K              stand-in guest K is alive (relay, control ping)
#   target_live SPEC...       every SPEC has a live lab listener
#
# SPEC is tcp:ADDR:PORT, udp:ADDR:PORT or icmp:ADDR (fakevm.py probe).  A
# verdict never rests on a probe tool failing: "blocked" means the lab saw
# the probe leave the guest (the relay's wire log) and saw no hit at the
# target (the listeners' hit log), the guest was alive just before and just
# after, and the target's listener was live just before.  The probe tool
# itself must run and report an outcome for every SPEC, or the probe fails.

# A blocked probe waits this long for an answer; an allowed one gets it in
# milliseconds (and its hit is looked for after the second liveness check).
PROBE_SECS=${PROBE_SECS:-1}
# The system's python when there is one: a version manager's shim on PATH
# can cost half a second per start, and a probe starts four.
PROBE_PY=${PROBE_PY:-$(command -v /usr/bin/python3 || command -v python3)}

# Slot K's address with last part +H (1 gateway, 2 guest), as lab.sh has it.
_probe_slot_ip() {
	local n=$((4 * $1 + $2))
	echo "10.213.$((n / 256)).$((n % 256))"
}

# _probe_count KEY...: for each KEY, "PROTO ADDR" or "PROTO ADDR PEER", the
# number of hit-log lines it matches, one a line (one pass: bats makes
# every fork slow).
_probe_count() {
	awk -v keys="$(printf '%s\n' "$@")" '
		BEGIN { n = split(keys, k, "\n") }
		{ for (i = 1; i <= n; i++) if ($0 == k[i] || index($0, k[i] " ") == 1) c[i]++ }
		END { for (i = 1; i <= n; i++) print c[i] + 0 }' "$ISOPOD_LAB_STATE/$LAB_NAME/hits"
}

# Hit-log lines "PROTO ADDR [PEER]".
_probe_hits() { _probe_count "$*"; }

# _probe_await N KEY...: wait (≤ 2 s) until every KEY has more lines than
# the matching one of the N counts ("a b c"), as _probe_count gave them.
_probe_await() {
	local -a was now
	local i ok
	read -r -a was <<<"$1"
	shift
	for _ in {1..40}; do
		mapfile -t now < <(_probe_count "$@")
		ok=1
		for i in "${!was[@]}"; do
			[ "${now[i]}" -gt "${was[i]}" ] || ok=0
		done
		[ "$ok" = 0 ] || return 0
		sleep 0.05
	done
	return 1
}

# The fakevm.py probe of SPEC... from netns NS: "SPEC OUTCOME" lines.
_probe_run() {
	local ns=$1 out st=0
	shift
	out=$(ip netns exec "$ns" "$PROBE_PY" "$BATS_TEST_DIRNAME/lab/fakevm.py" probe "$PROBE_SECS" "$@") ||
		st=$?
	if [ "$st" -ne 0 ]; then
		echo "the probe tool did not run in $ns (exit $st): $out" >&2
		return 1
	fi
	echo "$out"
}

# "PROTO ADDR" of each SPEC, one a line.
_probe_keys() {
	local spec p a
	for spec in "$@"; do
		IFS=: read -r p a _ <<<"$spec"
		echo "$p $a"
	done
}

# target_live SPEC...: from the lab's host netns, every SPEC answers and its
# listener logs the hit (so "no hit" later means "never arrived", not
# "nobody there").
target_live() {
	local spec out n
	local -a keys
	mapfile -t keys < <(_probe_keys "$@")
	n=$(_probe_count "${keys[@]}" | tr '\n' ' ')
	out=$(_probe_run "$LAB_NAME-host" "$@") || return 1
	for spec in "$@"; do
		if ! grep -qxF "$spec answered" <<<"$out"; then
			echo "target $spec is not live from the host ($out): a blocked probe would prove nothing" >&2
			return 1
		fi
	done
	_probe_await "$n" "${keys[@]}" || {
		echo "targets $* answered the host but their listeners did not log every hit" >&2
		return 1
	}
}

# guest_live K: stand-in guest K's relay runs, and the guest pings its own
# gateway: answered, and the host's listener logged that very echo request.
guest_live() {
	local k=$1 pid gw ip n out
	pid=$(head -n 1 "$ISOPOD_LAB_STATE/$LAB_NAME/vm$k.pid" 2>/dev/null) || :
	if [ -z "$pid" ] || ! tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -q "fakevm.py isopod-tap$k "; then
		echo "stand-in guest $k is dead: its relay (pid ${pid:-none}) is gone" >&2
		return 1
	fi
	gw=$(_probe_slot_ip "$k" 1) ip=$(_probe_slot_ip "$k" 2)
	n=$(_probe_count "icmp $gw $ip")
	out=$(_probe_run "$LAB_NAME-vm$k" "icmp:$gw") || return 1
	if [ "$out" != "icmp:$gw answered" ]; then
		echo "stand-in guest $k does not reach its gateway ($out)" >&2
		return 1
	fi
	_probe_await "$n" "icmp $gw $ip" || {
		echo "stand-in guest $k: its ping got an answer, but the host logged no echo request" >&2
		return 1
	}
}

# probe_blocked K SPEC...: guest K probes every SPEC at once; each must be
# blocked.  $PROBE_BETWEEN (tests of this helper only) is evaluated between
# the liveness control and the probe.
probe_blocked() {
	local k=$1 wire ip mark spec p a port x out outcome i
	local -a keys before after sent
	shift
	wire=$ISOPOD_LAB_STATE/$LAB_NAME/vm$k.wire
	ip=$(_probe_slot_ip "$k" 2)
	mapfile -t keys < <(_probe_keys "$@")
	target_live "$@" || return 1
	guest_live "$k" || return 1
	if [ -n "${PROBE_BETWEEN-}" ]; then eval "$PROBE_BETWEEN"; fi
	mapfile -t before < <(_probe_count "${keys[@]}")
	mark=$(wc -l <"$wire")
	out=$(_probe_run "$LAB_NAME-vm$k" "$@") || return 1
	guest_live "$k" || { echo "(after probing $*)" >&2; return 1; }
	mapfile -t after < <(_probe_count "${keys[@]}")
	# The relay logs a frame as it passes it on, before any answer can come
	# back, and the tool waited for one: the lines are there by now.
	mapfile -t sent < <(tail -n +"$((mark + 1))" "$wire" | grep "^out [a-z]* $ip ")
	i=0
	for spec in "$@"; do
		IFS=: read -r p a port <<<"$spec"
		outcome=$(sed -n "s/^${spec//./\\.} //p" <<<"$out")
		case $outcome in
		timeout | unreachable | refused) ;;
		answered)
			echo "$spec from guest $k got through (answered)" >&2
			return 1
			;;
		*)
			echo "$spec from guest $k: no outcome ('$outcome'): $out" >&2
			return 1
			;;
		esac
		x=${port:-8} # ICMP: an echo request
		if ! printf '%s\n' "${sent[@]}" | grep -qxF "out $p $ip $a $x"; then
			echo "$spec from guest $k never left the guest (no frame in $wire): the probe did not run" >&2
			return 1
		fi
		if [ "${after[i]}" != "${before[i]}" ]; then
			echo "$spec from guest $k got through: the listener logged $((after[i] - before[i])) hit(s)" >&2
			return 1
		fi
		i=$((i + 1))
	done
}

# assert_blocked K ADDR...: TCP 80, UDP 7 and ICMP from guest K to every
# ADDR, in one probe_blocked (all at once: one wait for the blocked ones'
# timeouts, one liveness check before and after).
assert_blocked() {
	local k=$1 a
	local -a specs=()
	shift
	for a in "$@"; do
		specs+=("tcp:$a:80" "udp:$a:7" "icmp:$a")
	done
	probe_blocked "$k" "${specs[@]}"
}

# ---- real guests (QEMU): t/lab/guestprobe.sh probes, the verdict is here ----

# vm_probe_start TAP GW GUEST ADDR...: before the guest GUEST (gateway GW)
# on TAP probes ADDR... with guestprobe.sh, note the hit counts and record
# the tap's IPv4 packets ("SRC DST PROTO", fakevm.py sniff, at most 300 s)
# in $BATS_TEST_TMPDIR; vm_probes_blocked ends the recording.
vm_probe_start() {
	local tap=$1 gw=$2 ip=$3 a p
	shift 3
	{
		echo "$gw $ip $(_probe_hits icmp "$gw" "$ip")"
		for a in "$@"; do
			for p in tcp udp icmp; do
				echo "$p $a $(_probe_hits "$p" "$a")"
			done
		done
	} >"$BATS_TEST_TMPDIR/probe.marks"
	ip netns exec "$LAB_NAME-host" "$PROBE_PY" "$BATS_TEST_DIRNAME/lab/fakevm.py" sniff "$tap" 300 \
		</dev/null >"$BATS_TEST_TMPDIR/probe.sniff" 2>&1 3>&- &
	echo $! >"$BATS_TEST_TMPDIR/probe.sniff.pid"
	sleep 0.3 # bound to the tap before the guest can send anything
}

# vm_probes_blocked OUT [PROTO:ADDR=N...]: OUT (guestprobe.sh's lines)
# shows every ADDR of vm_probe_start blocked, each probe with the guest live
# right before, and live at the end; and the lab agrees: the tap saw every
# probe leave the guest, no listener logged a hit (but the N hits the test
# made on purpose, e.g. a control through the proxy), the gateway logged
# every liveness ping.  Ends the recording of vm_probe_start.
vm_probes_blocked() {
	local out=$1 m=$BATS_TEST_TMPDIR/probe.marks gw ip n0 a p n num pid bad=0 pings addrs e
	local -A extra=()
	for e in "${@:2}"; do
		extra[${e%=*}]=${e#*=}
	done
	pid=$(cat "$BATS_TEST_TMPDIR/probe.sniff.pid")
	kill "$pid" 2>/dev/null || :
	wait "$pid" 2>/dev/null || :
	read -r gw ip n0 <"$m"
	addrs=$(sed -n 's/^tcp \([^ ]*\) .*/\1/p' "$m")
	if grep -q '^tool ' <<<"$out"; then
		echo "the guest lacks a probe tool: $(grep '^tool ' <<<"$out")" >&2
		return 1
	fi
	for a in $addrs end; do
		grep -qxF "live $a ok" <<<"$out" || { echo "the guest was not live before probing $a" >&2; bad=1; }
	done
	for a in $addrs; do
		for p in tcp udp icmp; do
			grep -qxF "$p $a no" <<<"$out" || { echo "$p $a: not blocked: $(grep "^$p $a " <<<"$out")" >&2; bad=1; }
			case $p in tcp) num=6 ;; udp) num=17 ;; icmp) num=1 ;; esac
			grep -qxF "$ip $a $num" "$BATS_TEST_TMPDIR/probe.sniff" ||
				{ echo "$p $a: never left the guest (nothing from $ip on the tap)" >&2; bad=1; }
			n=$(sed -n "s/^$p ${a//./\\.} //p" "$m")
			n=$((n + ${extra[$p:$a]:-0}))
			[ "$(_probe_hits "$p" "$a")" = "$n" ] ||
				{ echo "$p $a: got through: the listener logged $(($(_probe_hits "$p" "$a") - n)) hit(s)" >&2; bad=1; }
		done
	done
	pings=$(grep -c '^live .* ok$' <<<"$out")
	[ "$(_probe_hits icmp "$gw" "$ip")" -ge $((n0 + pings)) ] ||
		{ echo "the gateway logged fewer of the guest's pings than it answered ($pings)" >&2; bad=1; }
	return "$bad"
}
