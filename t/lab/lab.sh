#!/bin/sh
# t/lab/lab.sh - the sealed test world of the network tests.
#
#   lab.sh up NAME               build it (root)
#   lab.sh down NAME             kill its servers, delete its namespaces
#   lab.sh exec NAME CMD...      run CMD in NAME-host (where isopod runs)
#   lab.sh fakevm NAME K [SEC]   a stand-in guest for slot K (no QEMU): netns
#                                NAME-vmK with eth0 relayed to isopod-tapK
#   lab.sh gexec NAME K CMD...   run CMD in that stand-in guest
#   lab.sh rmvm NAME K           stop that stand-in guest, delete its netns
#   lab.sh hits NAME             the listeners' hit log
#   lab.sh config NAME           the path of the lab's isopod host config
#   lab.sh registry NAME         an OCI registry (Debian's docker-registry,
#                                plain HTTP) on 198.51.100.20:5000 in NAME-inet,
#                                its storage in $STATE/registry
#   lab.sh mirror NAME DIR       DIR served over HTTP on 198.51.100.30:80 in
#                                NAME-inet, the address the lab's DNS gives
#                                snapshot.debian.org (t/47's apt test)
#   lab.sh cluster|slurm|unslurm|cexec|cregistry NAME ...
#                                a Slurm cluster of a controller and two
#                                hosts (t/lab/cluster.sh says how)
#
# Two namespaces and one veth pair, created inside them; nothing is linked
# to the root namespace, so nothing sent in the lab can leave this machine:
#
#   NAME-host  h0 203.0.113.1/24, default route via 203.0.113.254.  isopod's
#              taps, nftables table and QEMU live here.  A live listener on
#              203.0.113.1 (the host's own non-gateway address).
#   NAME-inet  i0 203.0.113.254/24; on its lo the "internet":
#              198.51.100.10 (public-looking, TEST-NET-2), 169.254.169.254
#              (fake metadata), 10.99.0.5, 172.16.5.5, 192.168.5.5
#              (private ranges), 198.18.0.10 (benchmarking space).  A route back to 10.213.0.0/16 via the
#              host netns; no default route: a packet for anything else
#              dies here.  (On lo: this kernel has no dummy driver.)
#              Also on its lo: 198.51.100.53, the lab's DNS server.
#
# Every listed address serves TCP 80 (HTTP 200, body "lab ADDR") and UDP 7
# (echo), logging each hit to $STATE/hits (serve.py), and answers ping; the
# echo requests that reach any address of a lab netns are logged there too.
# 198.51.100.53 serves DNS on UDP 53 (dns.py, authoritative for the zone
# `test`), logging each query as "qname qtype" to $STATE/dns.log; and
# /etc/netns/NAME-host/resolv.conf names it, so whatever runs in NAME-host
# through `ip netns exec` (lab.sh exec) resolves through the lab.
# 198.51.100.10 also serves HTTPS on 443 (tls.py, body "lab tls ADDR"; and
# a one-package index, pkg.test/simple/labpkg/, whose wheel redirects to
# files.test) with a certificate for pkg.test, other.test, files.test and
# *.wild.test from the lab's own test CA, $STATE/tls/ca.pem (made by `up`
# with openssl).
# `up` checks that every listener answers before it returns, so a blocked
# probe in a test can never mean "nothing was there".
#
# The pretend internet is TEST-NET-2, which isopod's deny list blocks like
# every range that is not globally reachable.  The lab says so the way a
# host would: $STATE/isopod.conf (`lab.sh config NAME`) is an isopod host
# config with `allow_range = 198.51.100.0/24`; the network suites point
# ISOPOD_SYSCONFIG at it, so netsetup's table, the brokers and every result
# (its warning) see the override.  Nothing else of the list is opened.
set -eu

LAB_DIR=$(cd "$(dirname "$0")" && pwd)
STATE_ROOT=${ISOPOD_LAB_STATE:-/run/isopod-lab}
INET_ADDRS='198.51.100.10 169.254.169.254 10.99.0.5 172.16.5.5 192.168.5.5 198.18.0.10'
HOST_ADDR=203.0.113.1
DNS_ADDR=198.51.100.53
INET_GW=203.0.113.254
BASE3=10.213 # slot k: 10.213.X.Y with X.Y = 4k (isopod-netsetup's default base)
# The system's python when there is one (as t/lab/probe.bash's PROBE_PY): a
# version manager's shim first on PATH costs ~0.5 s a start, and a lab's
# `up` starts some twenty (its servers, and a probe of every listener).
PY=${PROBE_PY:-$(command -v /usr/bin/python3 || command -v python3)}

die() {
	printf 'lab: fatal: %s\n' "$*" >&2
	exit 111
}

check_name() {
	case $1 in
	'' | *[!a-z0-9-]* | -*) die "bad lab name '$1': want [a-z0-9-]" ;;
	esac
	[ ${#1} -le 20 ] || die "lab name '$1' longer than 20"
}

nsx() {
	ns=$1
	shift
	ip netns exec "$ns" "$@"
}

# Wait (≤ 5 s) until CMD... succeeds.
await() {
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		[ "$i" -le 50 ] || return 1
		sleep 0.1
	done
}

# Slot k's address with last part +h (1 gateway, 2 guest).
slot_ip() {
	n=$((4 * $1 + $2))
	echo "$BASE3.$((n / 256)).$((n % 256))"
}

slot_mac() {
	printf '02:69:73:00:%02x:%02x\n' $(($1 / 256)) $(($1 % 256))
}

# Start CMD... in netns NS in the background, its pid recorded for `down`.
spawn() {
	ns=$1
	shift
	ip netns exec "$ns" "$@" </dev/null >>"$STATE/log" 2>&1 3>&- &
	spawned=$!
	echo "$spawned" >>"$STATE/pids"
}

probe_tcp() {
	nsx "$1" "$PY" -c 'import socket,sys; s=socket.create_connection((sys.argv[1],80),2); s.sendall(b"GET / HTTP/1.0\r\n\r\n"); assert b"lab " in s.recv(4096)' "$2"
}

probe_dns() {
	nsx "$1" "$PY" -c 'import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(1)
s.sendto(bytes.fromhex("abcd01000001000000000000")+b"\3pkg\4test\0\0\1\0\1",(sys.argv[1],53))
r=s.recv(512); assert r[:2]==b"\xab\xcd" and r[3]&15==0 and r[-4:]==bytes([198,51,100,10])' "$2"
}

probe_tls() {
	nsx "$1" "$PY" -c 'import socket,ssl,sys
c=ssl.create_default_context(cafile=sys.argv[2])
s=c.wrap_socket(socket.create_connection((sys.argv[1],443),2),server_hostname="pkg.test")
s.sendall(b"GET / HTTP/1.0\r\n\r\n"); assert b"lab tls " in s.recv(4096)' "$2" "$STATE/tls/ca.pem"
}

# The lab's test CA and one server certificate for the HTTPS listener
# (names pkg.test, other.test, files.test, *.wild.test), made fresh for each lab.
make_tls() {
	d=$STATE/tls
	mkdir -p "$d"
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=isopod lab test CA" \
		-keyout "$d/ca.key" -out "$d/ca.pem" >/dev/null 2>&1 || return 1
	openssl req -newkey rsa:2048 -nodes -subj "/CN=pkg.test" \
		-keyout "$d/server.key" -out "$d/server.csr" >/dev/null 2>&1 || return 1
	printf 'subjectAltName=DNS:pkg.test,DNS:other.test,DNS:files.test,DNS:*.wild.test\nbasicConstraints=CA:FALSE\n' >"$d/ext"
	openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
		-days 2 -extfile "$d/ext" -out "$d/server.pem" >/dev/null 2>&1 || return 1
}

probe_udp() {
	nsx "$1" "$PY" -c 'import socket,sys; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.settimeout(1); s.sendto(b"x",(sys.argv[1],7)); assert s.recv(100).startswith(b"lab ")' "$2"
}

cmd_up() {
	name=$1
	[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
	if ip netns list | grep -q "^$name-host\b"; then
		die "lab $name exists: lab.sh down $name first"
	fi
	mkdir -p "$STATE"
	: >"$STATE/pids"
	: >"$STATE/hits"
	: >"$STATE/log"
	: >"$STATE/dns.log"
	printf '# the lab pretend internet (TEST-NET-2)\nallow_range = 198.51.100.0/24\n' >"$STATE/isopod.conf"
	ip netns add "$name-host"
	ip netns add "$name-inet"
	# The veth pair is born inside the lab: it never exists in the root netns.
	nsx "$name-host" ip link add h0 type veth peer name i0 netns "$name-inet"
	nsx "$name-host" ip link set lo up
	nsx "$name-host" ip addr add "$HOST_ADDR/24" dev h0
	nsx "$name-host" ip link set h0 up
	nsx "$name-host" ip route add default via "$INET_GW" dev h0
	nsx "$name-inet" ip link set lo up
	nsx "$name-inet" ip addr add "$INET_GW/24" dev i0
	nsx "$name-inet" ip link set i0 up
	for a in $INET_ADDRS $DNS_ADDR; do
		nsx "$name-inet" ip addr add "$a/32" dev lo
	done
	# The internet can route back to the VMs' range: without isopod's table
	# every lab address would be reachable from a guest (t/40-net.bats
	# checks that too), so a blocked probe is the table's doing.
	nsx "$name-inet" ip route add 10.213.0.0/16 via "$HOST_ADDR" dev i0
	# shellcheck disable=SC2086 # a list of addresses
	spawn "$name-inet" "$PY" "$LAB_DIR/serve.py" "$STATE/hits" $INET_ADDRS
	make_tls || die "lab $name: unable to make the test CA (openssl)"
	spawn "$name-inet" "$PY" "$LAB_DIR/tls.py" "$STATE/hits" 198.51.100.10 \
		"$STATE/tls/server.pem" "$STATE/tls/server.key"
	spawn "$name-host" "$PY" "$LAB_DIR/serve.py" "$STATE/hits" "$HOST_ADDR"
	spawn "$name-inet" "$PY" "$LAB_DIR/dns.py" "$STATE/dns.log" "$DNS_ADDR"
	mkdir -p "/etc/netns/$name-host"
	echo "nameserver $DNS_ADDR" >"/etc/netns/$name-host/resolv.conf"
	# Every listener live, seen from the host netns (through the veth).
	for a in $INET_ADDRS $HOST_ADDR; do
		await probe_tcp "$name-host" "$a" || die "lab $name: no TCP listener on $a"
		await probe_udp "$name-host" "$a" || die "lab $name: no UDP listener on $a"
		nsx "$name-host" busybox ping -c1 -W1 "$a" >/dev/null || die "lab $name: $a does not answer ping"
	done
	await probe_dns "$name-host" "$DNS_ADDR" || die "lab $name: no DNS server on $DNS_ADDR"
	await probe_tls "$name-host" 198.51.100.10 || die "lab $name: no HTTPS listener on 198.51.100.10"
	: >"$STATE/hits"
	: >"$STATE/dns.log"
	echo "lab $name up: host netns $name-host, internet $name-inet, state $STATE"
}

cmd_down() {
	name=$1
	if [ -f "$STATE/pids" ]; then
		while read -r pid; do
			kill "$pid" 2>/dev/null || :
		done <"$STATE/pids"
	fi
	for ns in $(ip netns list | awk '{print $1}'); do
		case $ns in
		"$name-host" | "$name-a" | "$name-b")
			if [ "$ns" != "$name-host" ]; then
				kill_ns_pids "$ns"
				ns_empty "$ns" || echo "lab: processes left in $ns after 5 s" >&2
			fi
			# isopod-netsetup's record of this netns (man isopod-netsetup, FILES)
			ino=$(ip netns exec "$ns" stat -L -c %i /proc/self/ns/net 2>/dev/null) &&
				rm -f "/run/isopod/netstate-$ino.json"
			ip netns del "$ns"
			;;
		"$name-ctl")
			kill_ns_pids "$ns"
			ns_empty "$ns" || echo "lab: processes left in $ns after 5 s" >&2
			ip netns del "$ns"
			;;
		"$name-inet" | "$name-reg" | "$name"-vm[0-9]*) ip netns del "$ns" ;;
		esac
	done
	rm_cgroups || echo "lab: cgroups left: $(cat "$STATE/slurm/cgroups")" >&2
	rm -rf "$STATE" "/etc/netns/$name-host"
}

# A stand-in guest on slot K: netns NAME-vmK whose eth0 (slot K's MAC and
# address, default route via its gateway) is relayed to isopod-tapK in the
# host netns by fakevm.py, for SEC seconds at most (default 120), with the
# same TCP 80 / UDP 7 listeners on the guest address as the internet hosts.
# $STATE/vmK.pid: the relay's pid (the guest lives while it does);
# $STATE/vmK.wire: every IPv4 frame it relayed (fakevm.py's wire log).
cmd_fakevm() {
	name=$1 k=$2 sec=${3:-120}
	g=$name-vm$k
	ip netns add "$g"
	nsx "$g" ip link set lo up
	: >"$STATE/vm$k.wire"
	spawn "$name-host" "$PY" "$LAB_DIR/fakevm.py" "isopod-tap$k" "$g" "$sec" "$STATE/vm$k.wire"
	echo "$spawned" >"$STATE/vm$k.pid"
	await nsx "$g" ip link show eth0 || die "fakevm $k: no eth0 in $g"
	nsx "$g" ip link set eth0 address "$(slot_mac "$k")"
	nsx "$g" ip addr add "$(slot_ip "$k" 2)/30" dev eth0
	nsx "$g" ip link set eth0 up
	nsx "$g" ip route add default via "$(slot_ip "$k" 1)" dev eth0
	await nsx "$g" busybox ping -c1 -W1 "$(slot_ip "$k" 1)" || die "fakevm $k: gateway does not answer"
	# A live listener on the guest address, for "another VM" probes.
	spawn "$g" "$PY" "$LAB_DIR/serve.py" "$STATE/hits" "$(slot_ip "$k" 2)"
	echo "$spawned" >>"$STATE/vm$k.pid"
	await probe_tcp "$name-host" "$(slot_ip "$k" 2)" || die "fakevm $k: no listener"
}

# Stop stand-in guest K (its relay and listener, as far as they still run)
# and delete its netns.
cmd_rmvm() {
	name=$1 k=$2
	if [ -f "$STATE/vm$k.pid" ]; then
		while read -r pid; do
			kill "$pid" 2>/dev/null || :
		done <"$STATE/vm$k.pid"
		rm -f "$STATE/vm$k.pid"
	fi
	ip netns del "$name-vm$k" 2>/dev/null || :
}

# The registry of t/32-oci.bats: docker-registry (distribution 2.8) serving
# /v2/ on REGISTRY_ADDR:5000, no auth, no TLS, its blobs under $STATE.
REGISTRY_ADDR=198.51.100.20
cmd_registry() {
	name=$1
	nsx "$name-inet" ip addr add "$REGISTRY_ADDR/32" dev lo
	registry_serve "$name-inet" "$REGISTRY_ADDR" "$name-host" "lab $name"
}

# registry_serve NS ADDR FROM WHAT: docker-registry in netns NS on ADDR:5000
# (an address NS already has), its storage $STATE/registry; answers /v2/
# as seen from netns FROM, else dies naming WHAT.  Prints ADDR:5000.
registry_serve() {
	command -v docker-registry >/dev/null || die "docker-registry not installed (.ci/setup)"
	mkdir -p "$STATE/registry"
	cat >"$STATE/registry.yml" <<-EOF
		version: 0.1
		log:
		  level: warn
		storage:
		  filesystem:
		    rootdirectory: $STATE/registry
		  delete:
		    enabled: true
		http:
		  addr: $2:5000
	EOF
	spawn "$1" docker-registry serve "$STATE/registry.yml"
	await nsx "$3" "$PY" -c 'import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)' \
		"http://$2:5000/v2/" || die "$4: no registry on $2:5000"
	echo "$2:5000"
}

# A static web server (python3's http.server) for DIR on MIRROR_ADDR:80,
# which the lab's DNS names snapshot.debian.org: the Debian snapshot
# archive the debian image's apt source names (images/build-base), with
# whatever repository a test lays out in DIR.  Requests are logged to
# $STATE/log ("GET /path HTTP/1.1" 200).
MIRROR_ADDR=198.51.100.30
cmd_mirror() {
	name=$1 dir=$2
	[ -d "$dir" ] || die "mirror: no directory $dir"
	nsx "$name-inet" ip addr add "$MIRROR_ADDR/32" dev lo
	spawn "$name-inet" "$PY" -m http.server --bind "$MIRROR_ADDR" --directory "$dir" 80
	await nsx "$name-host" "$PY" -c 'import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)' \
		"http://$MIRROR_ADDR/" || die "lab $name: no web server on $MIRROR_ADDR:80"
	echo "$MIRROR_ADDR"
}

# shellcheck source=t/lab/cluster.sh
. "$LAB_DIR/cluster.sh"

[ $# -ge 2 ] || die "usage: lab.sh up|down|exec|fakevm|gexec|rmvm|hits|registry|mirror|cluster|slurm|unslurm|cexec|cregistry NAME [ARGS...]"
verb=$1 name=$2
shift 2
check_name "$name"
STATE=$STATE_ROOT/$name
case $verb in
up) cmd_up "$name" ;;
down) cmd_down "$name" ;;
exec) nsx "$name-host" "$@" ;;
fakevm) cmd_fakevm "$name" "$@" ;;
rmvm) cmd_rmvm "$name" "$@" ;;
gexec)
	k=$1
	shift
	nsx "$name-vm$k" "$@"
	;;
hits) cat "$STATE/hits" ;;
config) echo "$STATE/isopod.conf" ;;
registry) cmd_registry "$name" ;;
mirror) cmd_mirror "$name" "$@" ;;
cluster) cmd_cluster "$name" ;;
slurm) cmd_slurm "$name" "$@" ;;
unslurm) cmd_unslurm "$name" ;;
cexec) cmd_cexec "$name" "$@" ;;
cregistry) cmd_cregistry "$name" ;;
*) die "unknown verb $verb" ;;
esac
