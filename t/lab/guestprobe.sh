# t/lab/guestprobe.sh - deny probes run inside a real guest (its busybox):
#   isopod run ... -- sh -c "$(cat t/lab/guestprobe.sh)" guestprobe GW ADDR...
# Prints, for every ADDR: "live ADDR ok|no" (the guest pinged its gateway GW
# right before), then "tcp|udp|icmp ADDR ok|no|err" (in any order): ok, an answer (TCP 80:
# the page "lab ADDR"; UDP 7: the NXDOMAIN the lab's echo gives a DNS-shaped
# query; ICMP: a ping reply), no, none, err, the tool did not run (126/127).
# Last "live end ok|no", and "tool T missing" for a tool that is not there.
# The host scores the lines with probe.bash's vm_probes_blocked, which also
# wants the lab's own evidence: the packets on the tap, the hit log.
gw=$1
shift
for t in nc nslookup ping; do
	command -v "$t" >/dev/null 2>&1 || echo "tool $t missing"
done
live() {
	if ping -c1 -W2 "$gw" >/dev/null 2>&1; then echo "live $1 ok"; else echo "live $1 no"; fi
}
# res PROTO ADDR STATUS ANSWERED
res() {
	case $3 in
	126 | 127) r=err ;;
	*) if [ "$4" = 1 ]; then r=ok; else r=no; fi ;;
	esac
	echo "$1 $2 $r"
}
# An address's three probes run at once (a blocked one waits out its
# timeout), after its liveness ping; each prints its one line.
for a in "$@"; do
	live "$a"
	(
		o=$(printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 "$a" 80 2>&1)
		s=$?
		case $o in *"lab $a"*) m=1 ;; *) m=0 ;; esac
		res tcp "$a" "$s" "$m"
	) &
	(
		o=$(nslookup -port=7 -timeout=1 -retry=1 probe.test "$a" 2>&1)
		s=$?
		case $o in *NXDOMAIN*) m=1 ;; *) m=0 ;; esac
		res udp "$a" "$s" "$m"
	) &
	ping -c1 -W1 "$a" >/dev/null 2>&1
	s=$?
	if [ "$s" = 0 ]; then m=1; else m=0; fi
	res icmp "$a" "$s" "$m"
	wait
done
live end
