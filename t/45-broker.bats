#!/usr/bin/env bats
# isopod-broker (filtered mode's egress broker), without VMs: the broker runs
# in the sealed lab's host netns (t/lab/lab.sh) on 203.0.113.1, the host's own
# address, and is driven with curl and python from there.  Its targets live
# in the lab's "internet" netns; names resolve through the lab's DNS server
# (t/lab/dns.py, zone `test`), whose query log proves what was forwarded, and
# the lab listeners' hit log proves what was connected to.

load helpers

BRK=203.0.113.1

setup_file() {
	[ "$(id -u)" -eq 0 ] || skip "needs root: network namespaces"
	export LAB="$BATS_TEST_DIRNAME/lab/lab.sh"
	export LAB_NAME="t45b$$"
	export ISOPOD_LAB_STATE="${BATS_FILE_TMPDIR}/lab"
	export LEDGER="$BATS_FILE_TMPDIR/ledger"
	sh "$LAB" down "$LAB_NAME" 2>/dev/null || :
	sh "$LAB" up "$LAB_NAME" >/dev/null
	# The main broker: its resolver comes from the netns' resolv.conf.
	# The lab's pretend internet (TEST-NET-2) is opened as a host would
	# (lab.sh config: allow_range); pkg.test's ports 8080, 8081 and 8083
	# (the tunnels below) are named, as any port but 80 and 443 must be.
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" \
		--ledger "$LEDGER" --allow pkg.test --allow '*.wild.test' --allow rebind.test \
		--allow meta.test --allow mixed.test --allow alias.test --allow nx.test --vm vm-t45 \
		--allow pkg.test:8080 --allow pkg.test:8081 --allow pkg.test:8083 --allow bench.test --allow ula.test \
		--allow mapped.test --allow-range 198.51.100.0/24 \
		>"$BATS_FILE_TMPDIR/announce" 2>"$BATS_FILE_TMPDIR/broker.err" 3>&- </dev/null &
	echo $! >"$BATS_FILE_TMPDIR/broker.pid"
	await_announce "$BATS_FILE_TMPDIR/announce"
	ip netns exec "$LAB_NAME-inet" python3 -c "$HOLDER" 3>&- </dev/null >/dev/null 2>&1 &
	echo $! >"$BATS_FILE_TMPDIR/holder.pid"
	local i
	for i in $(seq 1 50); do
		ip netns exec "$LAB_NAME-host" python3 -c 'import socket; socket.create_connection(("198.51.100.10", 8080), 1).recv(6)' 2>/dev/null && return 0
		sleep 0.1
	done
	echo "no holder on 198.51.100.10:8080" >&2
	return 1
}

teardown_file() {
	local pid
	for pid in $(cat "$BATS_FILE_TMPDIR"/*.pid 2>/dev/null); do
		kill "$pid" 2>/dev/null || :
	done
	[ -n "${LAB-}" ] && sh "$LAB" down "$LAB_NAME"
}

# Wait (≤ 5 s) for a broker's announce line in FILE.
await_announce() {
	local i
	for i in $(seq 1 50); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	echo "no announce line in $1" >&2
	return 1
}

# test_broker TAG ARG...: a broker of the test's own in the lab's host netns
# (ARG... its options but --ledger), its ledger, announce line and stderr in
# $BATS_TEST_TMPDIR; sets $pid, also kept in TAG.pid for teardown_file, once
# it has announced itself.  The caller's environment reaches it.
test_broker() {
	local tag=$1 d=$BATS_TEST_TMPDIR
	shift
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" "$@" \
		--ledger "$d/ledger" >"$d/announce" 2>"$d/err" 3>&- </dev/null &
	pid=$!
	echo "$pid" >"$BATS_FILE_TMPDIR/$tag.pid"
	await_announce "$d/announce"
}

# stop_broker: SIGTERM to $pid, which must exit 0.
stop_broker() {
	local st=0
	kill -TERM "$pid"
	wait "$pid" || st=$?
	[ "$st" -eq 0 ]
}

lab() { sh "$LAB" "$1" "$LAB_NAME" "${@:2}"; }
hits() { grep -c " $1 " "$ISOPOD_LAB_STATE/$LAB_NAME/hits" || :; }
dnslog() { cat "$ISOPOD_LAB_STATE/$LAB_NAME/dns.log"; }
broker_pid() { cat "$BATS_FILE_TMPDIR/broker.pid"; }
# The last ledger line, as $output for json_is.
last_line() { output=$(tail -n 1 "$LEDGER"); }

# curl through the broker (-i: with the response head).
pcurl() { lab exec curl -sS -m 15 -x "http://$BRK:3128" "$@"; }

# A DNS query to SERVER (default the broker): prints "rcode=N an=N ip=A.B.C.D|-".
DNSQ='import socket, struct, sys
name, qtype, host, port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
q += struct.pack(">HH", qtype, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
s.sendto(q, (host, port))
r = s.recv(4096)
assert r[:2] == b"\x42\x42", "the answer has another id"
assert r[2] & 0x80, "not a response"
an = struct.unpack(">H", r[6:8])[0]
ip = socket.inet_ntoa(r[-4:]) if an and qtype == 1 else "-"
print("rcode=%d an=%d ip=%s" % (r[3] & 15, an, ip))'
dnsq() { lab exec python3 -c "$DNSQ" "$1" "${2:-1}" "${3:-$BRK}" "${4:-1053}"; }

# A long-lived service in the lab's internet: 198.51.100.10:8080 says
# "hello" to each connection and holds it until the peer closes (the lab's
# port 80 answers and closes at once).  Bounded: it exits after 300 s.
HOLDER='import socket, threading, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.10", 8080))
s.listen(16)
s.settimeout(1)
def hold(c):
    c.settimeout(60)
    try:
        c.sendall(b"hello\n")
        while c.recv(4096):
            pass
    except OSError:
        pass
    c.close()
end = time.time() + 300
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=hold, args=(c,), daemon=True).start()'

# Open a CONNECT tunnel through the broker at $1:$2 to pkg.test:8080 (the
# holder above), read its hello, send a ping, then hold the tunnel until
# the broker closes it (≤ 20 s); prints "tunnel up" once data went both ways.
HOLD='import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)
c.sendall(b"CONNECT pkg.test:8080 HTTP/1.1\r\nHost: pkg.test:8080\r\n\r\n")
c.settimeout(5)
r = b""
while b"hello" not in r:
    k = c.recv(4096)
    assert k, r
    r += k
assert r.startswith(b"HTTP/1.1 200 Connection established\r\n\r\n"), r
c.sendall(b"ping\n")
print("tunnel up", flush=True)
c.settimeout(20)
try:
    c.recv(1)
except OSError:
    pass'

@test "announce: one JSON line with the bound addresses, the resolver from resolv.conf" {
	output=$(cat "$BATS_FILE_TMPDIR/announce")
	[ "$(wc -l <"$BATS_FILE_TMPDIR/announce")" -eq 1 ]
	json_is '.pid > 1 and .proxy == "203.0.113.1:3128" and .dns == "203.0.113.1:1053"'
	json_is '.resolver == "198.51.100.53:53" and .allow_all == false and .vm == "vm-t45"'
	json_is '.allow == ["pkg.test","*.wild.test","rebind.test","meta.test","mixed.test","alias.test","nx.test","pkg.test:8080","pkg.test:8081","pkg.test:8083","bench.test","ula.test","mapped.test"]'
	json_is '.allow_ranges == ["198.51.100.0/24"]'
	[ "$(jq .pid <<<"$output")" = "$(broker_pid)" ]
	[ ! -s "$BATS_FILE_TMPDIR/broker.err" ]
}

@test "CONNECT to an allowed name works; its ledger line names the address and counts bytes" {
	local before
	before=$(hits 198.51.100.10)
	run pcurl --proxytunnel http://pkg.test/
	[ "$status" -eq 0 ]
	[ "$output" = "lab 198.51.100.10" ]
	[ "$(hits 198.51.100.10)" -eq $((before + 1)) ]
	last_line
	json_is '.kind == "connect" and .name == "pkg.test" and .port == 80 and .address == "198.51.100.10"'
	json_is '.verdict == "allowed" and .reason == null and .up > 0 and .down > 0 and .vm == "vm-t45"'
}

@test "plain HTTP through the proxy works (absolute form rewritten)" {
	local up
	run pcurl 'http://pkg.test/some/path?q=1'
	[ "$status" -eq 0 ]
	[ "$output" = "lab 198.51.100.10" ]
	last_line
	json_is '.kind == "http" and .name == "pkg.test" and .address == "198.51.100.10" and .verdict == "allowed"'
	up=$(jq .up <<<"$output")
	# The guest's Host, Proxy-* and Connection headers are dropped (the
	# broker writes Host from the target): the origin gets the same bytes.
	run pcurl -H 'Host: other.test' -H 'Proxy-Authorization: Basic eDp5' -H 'Connection: x' \
		-H 'Proxy-Foo: 1' 'http://pkg.test/some/path?q=1'
	[ "$output" = "lab 198.51.100.10" ]
	last_line
	json_is ".kind == \"http\" and .up == $up"
	# and an extra ordinary header does reach it
	run pcurl -H 'X-Extra: 1' 'http://pkg.test/some/path?q=1'
	last_line
	json_is ".up == $up + 12"
}

@test "a name outside the allowlist: 403 naming the name and the allowlist; never resolved, never reached" {
	local before
	before=$(hits 198.51.100.10)
	run pcurl -i http://other.test/
	[ "$status" -eq 0 ]
	[[ "$output" == "HTTP/1.1 403 Forbidden"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: not in the allowlist\r'* ]]
	[[ "$output" == *"isopod-broker: other.test is not in the allowlist (pkg.test, *.wild.test, rebind.test"* ]]
	run pcurl -i --proxytunnel https://other.test/
	[ "$status" -ne 0 ]
	[[ "$output" == *"403"* ]]
	[ "$(hits 198.51.100.10)" -eq "$before" ]
	! dnslog | grep -q '^other.test ' || false
	last_line
	json_is '.kind == "connect" and .name == "other.test" and .port == 443 and .address == null'
	json_is '.verdict == "denied" and .reason == "not in the allowlist"'
}

@test "wildcard: *.wild.test allows a.wild.test and b.wild.test, not wild.test itself" {
	run pcurl http://a.wild.test/
	[ "$output" = "lab 198.51.100.10" ]
	run pcurl --proxytunnel http://B.Wild.Test/
	[ "$output" = "lab 198.51.100.10" ]
	last_line
	json_is '.name == "b.wild.test" and .verdict == "allowed"'
	run pcurl -i http://wild.test/
	[[ "$output" == "HTTP/1.1 403"* ]]
	last_line
	json_is '.name == "wild.test" and .verdict == "denied" and .reason == "not in the allowlist"'
}

@test "IP literals are refused, plain and CONNECT, even a public one" {
	local before
	before=$(hits 198.51.100.10)
	run pcurl -i http://198.51.100.10/
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *"198.51.100.10 is an IP address, not a name in the allowlist"* ]]
	last_line
	json_is '.kind == "http" and .name == "198.51.100.10" and .verdict == "denied" and .reason == "an IP address, not a name"'
	run pcurl -i --proxytunnel http://169.254.169.254/
	[ "$status" -ne 0 ]
	last_line
	json_is '.kind == "connect" and .name == "169.254.169.254" and .verdict == "denied"'
	run pcurl -i 'http://[::1]/'
	[[ "$output" == "HTTP/1.1 403"* ]]
	[ "$(hits 198.51.100.10)" -eq "$before" ]
	[ "$(hits 169.254.169.254)" -eq 0 ]
}

@test "DNS rebinding: a name resolving to private or metadata addresses is refused; mixed.test uses the public one" {
	run pcurl -i http://rebind.test/
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: resolves only to denied addresses\r'* ]]
	last_line
	json_is '.name == "rebind.test" and .verdict == "denied" and .reason == "resolves only to denied addresses"'
	run pcurl -i --proxytunnel http://meta.test/
	[ "$status" -ne 0 ]
	last_line
	json_is '.kind == "connect" and .name == "meta.test" and .verdict == "denied" and .reason == "resolves only to denied addresses"'
	# both names were resolved (the check is on the answer, at connect time)
	dnslog | grep -q '^rebind.test A$'
	dnslog | grep -q '^meta.test A$'
	run pcurl http://mixed.test/
	[ "$output" = "lab 198.51.100.10" ]
	last_line
	json_is '.name == "mixed.test" and .address == "198.51.100.10" and .verdict == "allowed"'
	[ "$(hits 10.99.0.5)" -eq 0 ]
	[ "$(hits 169.254.169.254)" -eq 0 ]
}

@test "CNAME answers are followed; a name that does not exist gets 502" {
	run pcurl --proxytunnel http://alias.test/
	[ "$output" = "lab 198.51.100.10" ]
	run pcurl -i http://nx.test/
	[[ "$output" == "HTTP/1.1 502 Bad Gateway"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: no such name\r'* ]]
	last_line
	json_is '.name == "nx.test" and .verdict == "allowed" and .reason == "no such name" and .address == null'
}

@test "DNS: an allowed name is answered through the resolver; an unlisted one is REFUSED and never forwarded" {
	run dnsq pkg.test
	[ "$status" -eq 0 ]
	[ "$output" = "rcode=0 an=1 ip=198.51.100.10" ]
	last_line
	json_is '.kind == "dns" and .name == "pkg.test" and .qtype == "A" and .port == 53'
	json_is '.address == "198.51.100.53" and .verdict == "allowed" and .up > 0 and .down > 0'
	run dnsq unlisted-secret.test
	[ "$output" = "rcode=5 an=0 ip=-" ]
	run dnsq unlisted-secret.test 16
	[ "$output" = "rcode=5 an=0 ip=-" ]
	last_line
	json_is '.kind == "dns" and .name == "unlisted-secret.test" and .qtype == "TXT" and .verdict == "denied" and .reason == "not in the allowlist" and .address == null'
	run dnsq a.wild.test
	[ "$output" = "rcode=0 an=1 ip=198.51.100.10" ]
	run dnsq nx.test
	[ "$output" = "rcode=3 an=0 ip=-" ]
	dnslog | grep -q '^pkg.test A$'
	dnslog | grep -q '^a.wild.test A$'
	! dnslog | grep -q 'unlisted-secret' || false
	# the lab's DNS answers that name when asked directly (control)
	run dnsq unlisted-secret.test 1 198.51.100.53 53
	[ "$output" = "rcode=3 an=0 ip=-" ]
}

@test "malformed HTTP and DNS input gets 400 / FORMERR / nothing, and the broker keeps serving" {
	run lab exec python3 - "$BRK" <<'EOF'
import random, socket, struct, sys, time
B = sys.argv[1]
random.seed(45)
def http(data, close_early=False):
    c = socket.create_connection((B, 3128), 5)
    c.settimeout(5)
    c.sendall(data)
    if close_early:
        c.close()
        return None
    r = b""
    try:
        while True:
            k = c.recv(65536)
            if not k:
                break
            r += k
    except OSError:
        pass
    c.close()
    return r.split(b"\r\n", 1)[0]
want = {
    b"\r\n\r\n": b"400",
    b"GET / HTTP/1.1\r\nHost: pkg.test\r\n\r\n": b"400",
    b"CONNECT pkg.test HTTP/1.1\r\n\r\n": b"400",
    b"CONNECT pkg.test:0 HTTP/1.1\r\n\r\n": b"400",
    b"CONNECT pkg.test:99999 HTTP/1.1\r\n\r\n": b"400",
    b"GET http://user@pkg.test/ HTTP/1.1\r\n\r\n": b"400",
    b"GET https://pkg.test/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://pkg.test/ HTTP/2.0\r\n\r\n": b"400",
    b"GET http://pkg.test/ HTTP/1.1\r\nX: a\r\n folded\r\n\r\n": b"400",
    b"GET http://pkg.test/ HTTP/1.1\r\nX: \x01\r\n\r\n": b"400",
    b"GET http://pkg.test/ HTTP/1.1\rX: y\r\n\r\n": b"400",
    b"GET http://pkg.test:/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://pk\xffg.test/ HTTP/1.1\r\n\r\n": b"400",
    b"\x00" * 100 + b"\r\n\r\n": b"400",
    b"A" * 20000: b"400",
    b"GET http://" + b"a" * 300 + b".test/ HTTP/1.1\r\n\r\n": b"400",
    b"GET http://pkg_x.test/ HTTP/1.1\r\n\r\n": b"403",
}
bad = 0
for data, code in want.items():
    got = http(data)
    if not got.startswith(b"HTTP/1.1 " + code):
        print("HTTP %r: got %r, want %s" % (data[:40], got, code))
        bad += 1
for i in range(40):
    http(bytes(random.randrange(256) for _ in range(random.randrange(1, 300))) + b"\r\n\r\n")
for i in range(20):
    http(b"CONNECT pkg.test:80 HTTP/1.1\r\nX: " + b"y" * random.randrange(50), close_early=True)
# DNS
def dns(data, wait=0.5):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(wait)
    s.sendto(data, (B, 1053))
    try:
        return s.recv(4096)
    except socket.timeout:
        return None
def hdr(flags=0x0100, qd=1, an=0, ns=0, ar=0):
    return struct.pack(">HHHHHH", 0x1234, flags, qd, an, ns, ar)
q = b"\3pkg\4test\0\0\1\0\1"
cases = {
    "short": (b"\x12\x34\x01", None),
    "a response": (hdr(flags=0x8180) + q, None),
    "two questions": (hdr(qd=2) + q + q, 1),
    "no question": (hdr(qd=0), 1),
    "an answer in a query": (hdr(an=1) + q, 1),
    "opcode STATUS": (hdr(flags=0x1100) + q, 4),
    "pointer loop": (hdr() + b"\xc0\x0c\0\1\0\1", 1),
    "forward pointer": (hdr() + b"\xc0\x20\0\1\0\1" + b"\0" * 40, 1),
    "label type 0x40": (hdr() + b"\x41a\0\0\1\0\1", 1),
    "name over 255": (hdr() + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\x3f" + b"a" * 63 + b"\0\0\1\0\1", 1),
    "cut question": (hdr() + b"\3pkg\4te", 1),
    "no type": (hdr() + b"\3pkg\4test\0", 1),
    "dot inside a label": (hdr() + b"\7pkg.tes\0\0\1\0\1", 5),
}
for what, (data, rc) in cases.items():
    r = dns(data)
    got = None if r is None else r[3] & 15
    if got != rc or (r is not None and r[:2] != b"\x12\x34"):
        print("DNS %s: got rcode %r, want %r" % (what, got, rc))
        bad += 1
for i in range(200):
    dns(bytes(random.randrange(256) for _ in range(random.randrange(0, 600))), wait=0.01)
print("bad=%d" % bad)
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"bad=0" ]]
	# still alive, still serving both
	kill -0 "$(broker_pid)"
	run pcurl --proxytunnel http://pkg.test/
	[ "$output" = "lab 198.51.100.10" ]
	run dnsq pkg.test
	[ "$output" = "rcode=0 an=1 ip=198.51.100.10" ]
	[ ! -s "$BATS_FILE_TMPDIR/broker.err" ]
	run jq -c 'select(.reason == "malformed request")' "$LEDGER"
	[ "$(grep -c . <<<"$output")" -ge 16 ]
	run jq -c 'select(.kind == "dns" and .reason == "malformed query")' "$LEDGER"
	[ "$(grep -c . <<<"$output")" -ge 7 ]
}

@test "bulk both ways through a tunnel: bytes intact, backpressure holds, counted in the ledger" {
	# a service in the lab's internet: reads 3 MiB while sending 12 MiB, then
	# answers with the count and sha256 of what it read (bounded: timeout 60)
	ip netns exec "$LAB_NAME-inet" timeout 60 python3 -c 'import hashlib, socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.10", 8081))
s.listen(1)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(30)
h = hashlib.sha256()
n = 0
def rd():
    global n
    while n < 3 << 20:
        k = c.recv(65536)
        if not k:
            break
        n += len(k)
        h.update(k)
t = threading.Thread(target=rd)
t.start()
block = bytes(range(256)) * 4096
for i in range(12):
    c.sendall(block)
t.join()
c.sendall(("%d %s\n" % (n, h.hexdigest())).encode())
c.close()' 3>&- &
	local srv=$!
	echo "$srv" >"$BATS_FILE_TMPDIR/bulk.pid"
	run lab exec timeout 60 python3 -c 'import hashlib, socket, sys, threading, time
for i in range(50):  # until the service listens (the broker answers 502 before)
    c = socket.create_connection(("203.0.113.1", 3128), 5)
    c.settimeout(30)
    c.sendall(b"CONNECT pkg.test:8081 HTTP/1.1\r\n\r\n")
    r = b""
    while b"\r\n\r\n" not in r:
        r += c.recv(4096)
    if r.startswith(b"HTTP/1.1 200"):
        break
    c.close()
    time.sleep(0.1)
rest = [r.split(b"\r\n\r\n", 1)[1]]
up = bytes(range(255, -1, -1)) * (3 << 12)
t = threading.Thread(target=c.sendall, args=(up,))
t.start()
while True:
    k = c.recv(65536)
    if not k:
        break
    rest.append(k)
t.join()
data = b"".join(rest)
body, tail = data[:12 << 20], data[12 << 20:]
ok = body == (bytes(range(256)) * 4096) * 12
print(ok, tail.decode().strip() == "%d %s" % (len(up), hashlib.sha256(up).hexdigest()))'
	wait "$srv" || :
	echo "$output"
	[ "$output" = "True True" ]
	# one tunnel carried it all (tries before the service listened got 502s)
	output=$(jq -c 'select(.port == 8081 and .reason == null)' "$LEDGER")
	json_is '.kind == "connect" and .verdict == "allowed" and .up == 3145728 and .down == 12582912 + 73'
}

@test "ledger: every line is one JSON object with the documented fields" {
	local n
	# one of each kind and verdict, on top of what the tests before left
	pcurl --proxytunnel http://pkg.test/ >/dev/null
	pcurl http://other.test/ >/dev/null
	dnsq pkg.test >/dev/null
	dnsq other.test >/dev/null
	lab exec python3 -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(bytes(12), ("203.0.113.1", 1053)); s.settimeout(2); s.recv(512)'
	n=$(grep -c . "$LEDGER")
	[ "$n" -ge 5 ]
	# jq fails on a line that is not JSON
	[ "$(jq -c . "$LEDGER" | wc -l)" -eq "$n" ]
	run jq -sc '[.[] | select(
		(.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$")) and
		(.kind | IN("connect", "http", "dns")) and
		(.name == null or (.name | type == "string")) and
		(.port == null or (.port | type == "number")) and
		(.address == null or (.address | test("^[0-9.]+$"))) and
		(.up | type == "number") and (.down | type == "number") and (.ms | type == "number") and
		(.verdict | IN("allowed", "denied")) and
		(.reason == null or (.reason | type == "string")) and
		((.kind == "dns") == has("qtype")) and .vm == "vm-t45"
		)] | length' "$LEDGER"
	[ "$output" -eq "$n" ]
	# the allowed/denied verdicts the lead counts are both there
	jq -se 'any(.[]; .verdict == "denied") and any(.[]; .verdict == "allowed" and .kind == "connect")' "$LEDGER"
}

@test "SIGTERM: an open tunnel gets its ledger line, then exit 0" {
	local d="$BATS_TEST_TMPDIR" pid hold i
	test_broker term --proxy-port 3129 --dns-port 1054 --allow pkg.test:8080 \
		--allow-range 198.51.100.0/24
	lab exec python3 -c "$HOLD" "$BRK" 3129 >"$d/hold" 3>&- &
	hold=$!
	for i in $(seq 1 50); do grep -q 'tunnel up' "$d/hold" && break; sleep 0.1; done
	grep -q 'tunnel up' "$d/hold"
	[ ! -s "$d/ledger" ] # the flow is open: no line yet
	stop_broker
	wait "$hold" || :
	output=$(cat "$d/ledger")
	json_is '.kind == "connect" and .name == "pkg.test" and .address == "198.51.100.10" and .reason == "broker stopped"'
	json_is '.port == 8080 and .up == 5 and .down == 6'
}

@test "--parent: the broker ends when its parent dies, and flushes the ledger" {
	local d="$BATS_TEST_TMPDIR" parent bpid hold i
	# sh starts the broker with --parent $$, then becomes sleep (same pid)
	ip netns exec "$LAB_NAME-host" sh -c '"$1" --listen "$2" --proxy-port 3130 --dns-port 1055 --ledger "$3" \
		--allow pkg.test:8080 --allow-range 198.51.100.0/24 --parent $$ >"$4" 2>"$5" </dev/null & exec sleep 60' \
		sh "$ISOPOD_SRC/bin/isopod-broker" "$BRK" "$d/ledger" "$d/announce" "$d/err" 3>&- &
	parent=$!
	echo "$parent" >"$BATS_FILE_TMPDIR/parent.pid"
	await_announce "$d/announce"
	bpid=$(jq .pid "$d/announce")
	echo "$bpid" >"$BATS_FILE_TMPDIR/parent-broker.pid"
	[ "$(awk '{print $4}' "/proc/$bpid/stat")" = "$parent" ]
	lab exec python3 -c "$HOLD" "$BRK" 3130 >"$d/hold" 3>&- &
	hold=$!
	for i in $(seq 1 50); do grep -q 'tunnel up' "$d/hold" && break; sleep 0.1; done
	grep -q 'tunnel up' "$d/hold"
	kill -KILL "$parent"
	wait "$parent" || :
	for i in $(seq 1 50); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.1; done
	! kill -0 "$bpid" 2>/dev/null || false
	wait "$hold" || :
	output=$(cat "$d/ledger")
	json_is '.kind == "connect" and .name == "pkg.test" and .reason == "broker stopped"'
	# a parent that is already gone: the broker does not start
	run --separate-stderr lab exec "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" \
		--proxy-port 3131 --dns-port 1056 --ledger "$d/ledger2" --parent "$parent"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"parent $parent is gone"* ]]
}

@test "--no-proxy --allow-all (open mode): DNS only, every name answered" {
	local d="$BATS_TEST_TMPDIR" pid
	# without --no-proxy it would bind TCP 3128, the main broker's port, and exit 102
	test_broker open --dns-port 1057 --no-proxy --allow-all --resolver 198.51.100.53:53
	output=$(cat "$d/announce")
	json_is '.proxy == null and .dns == "203.0.113.1:1057" and .allow == [] and .allow_all == true'
	run dnsq other.test 1 "$BRK" 1057
	[ "$output" = "rcode=0 an=1 ip=198.51.100.10" ]
	stop_broker
	output=$(tail -n 1 "$d/ledger")
	json_is '.kind == "dns" and .name == "other.test" and .verdict == "allowed"'
}

@test "ledger cap: refusals past ISOPOD_LEDGER_MAX are counted, not written; nothing new is served; one last line says so" {
	local d="$BATS_TEST_TMPDIR" pid i size
	ISOPOD_LEDGER_MAX=2048 test_broker cap --proxy-port 3132 --dns-port 1058 --allow pkg.test \
		--resolver 198.51.100.53:53
	run dnsq pkg.test 1 "$BRK" 1058
	[ "$output" = "rcode=0 an=1 ip=198.51.100.10" ]
	for i in $(seq 1 40); do # ~100 bytes a line: well past 2 KiB
		dnsq "flood$i.test" 1 "$BRK" 1058 >/dev/null
	done
	size=$(stat -c %s "$d/ledger")
	[ "$size" -le 2048 ]
	# full: an allowed name is not served any more (it could not be recorded)
	run dnsq pkg.test 1 "$BRK" 1058
	[ "$output" = "rcode=5 an=0 ip=-" ]
	stop_broker
	output=$(tail -n 1 "$d/ledger")
	json_is '.kind == "ledger" and .verdict == "denied" and (.reason | test("^ledger full: [0-9]+ refusals not written$"))'
	[ "$(grep -c '"name":"pkg.test"' "$d/ledger")" -eq 1 ]
}

@test "a ledger that cannot be written fails closed: exit 111 naming it, nothing more served" {
	local d="$BATS_TEST_TMPDIR" pid i st=0
	# /dev/full: the first line written is the first failure (ENOSPC)
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" \
		--proxy-port 3133 --dns-port 1059 --allow pkg.test --resolver 198.51.100.53:53 \
		--ledger /dev/full >"$d/announce" 2>"$d/err" 3>&- </dev/null &
	pid=$!
	echo "$pid" >"$BATS_FILE_TMPDIR/full.pid"
	await_announce "$d/announce"
	# a refusal: answered REFUSED at once, then its line cannot be written
	run dnsq other.test 1 "$BRK" 1059
	[ "$output" = "rcode=5 an=0 ip=-" ]
	for i in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		echo "the broker still serves with a ledger it cannot write" >&2
		false
	fi
	wait "$pid" || st=$?
	[ "$st" -eq 111 ]
	grep -q "isopod-broker: fatal: unable to write the ledger: No space left on device" "$d/err"
	# gone: nothing more is served, the proxy port is closed
	run lab exec curl -sS -m 5 -x "http://$BRK:3133" http://pkg.test/
	[ "$status" -ne 0 ]
}

# A resolver that holds its answer: ARGV ADDR PORT GOT GO.  Bound, it
# creates GOT.up; it takes one query, creates GOT, waits (<= 30 s) for GO to exist, then answers it with
# pkg.test's address 198.51.100.10.
SLOWDNS='import os, socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
open(sys.argv[3] + ".up", "w").close()
s.settimeout(30)
q, peer = s.recvfrom(512)
open(sys.argv[3], "w").close()
end = time.time() + 30
while not os.path.exists(sys.argv[4]) and time.time() < end:
    time.sleep(0.05)
i = 12
while q[i]:
    i += 1 + q[i]
question = q[12:i + 5]
s.sendto(q[:2] + b"\x81\x80" + struct.pack(">HHHH", 1, 1, 0, 0) + question + b"\xc0\x0c" +
         struct.pack(">HHIH", 1, 1, 60, 4) + socket.inet_aton("198.51.100.10"), peer)'

@test "a ledger that fails while a request resolves: the answer that follows in the same round connects nowhere" {
	local d="$BATS_TEST_TMPDIR" st=0 before i cpid qpid rpid
	# the broker is stopped (SIGSTOP) while a refused DNS query (whose
	# line fails on /dev/full) and then the resolver's answer for a
	# request to pkg.test queue up: one round of events holds both, in that
	# order.  Nothing after the failure may be served: no connection.
	ln -s /dev/full "$d/ledger"
	ip netns exec "$LAB_NAME-host" python3 -c "$SLOWDNS" "$BRK" 5399 "$d/got" "$d/go" \
		3>&- </dev/null >/dev/null 2>&1 &
	rpid=$!
	echo "$rpid" >"$BATS_FILE_TMPDIR/slowdns.pid"
	for i in $(seq 1 50); do
		[ -e "$d/got.up" ] && break
		sleep 0.1
	done
	test_broker fullproxy --proxy-port 3134 --dns-port 1060 --allow pkg.test \
		--allow-range 198.51.100.0/24 --resolver "$BRK:5399"
	before=$(hits 198.51.100.10)
	lab exec curl -sS -m 10 -x "http://$BRK:3134" http://pkg.test/ >"$d/curl" 2>&1 3>&- &
	cpid=$!
	for i in $(seq 1 50); do
		[ -e "$d/got" ] && break
		sleep 0.1
	done
	[ -e "$d/got" ]
	kill -STOP "$pid"
	dnsq other.test 1 "$BRK" 1060 >"$d/dnsq" 2>&1 3>&- &
	qpid=$!
	# (bounded waits, no assertion: the broker must go on whatever happens)
	for i in $(seq 1 100); do
		ip netns exec "$LAB_NAME-host" ss -Huln 'sport = :1060' | awk '$2 > 0 { f = 1 } END { exit !f }' && break
		sleep 0.1
	done
	touch "$d/go"
	for i in $(seq 1 50); do
		kill -0 "$rpid" 2>/dev/null || break
		sleep 0.1
	done
	kill -CONT "$pid"
	wait "$pid" || st=$?
	wait "$cpid" || :
	wait "$qpid" || :
	[ "$st" -eq 111 ]
	grep -q "isopod-broker: fatal: unable to write the ledger: No space left on device" "$d/err"
	sleep 0.5 # the lab server logs a connection when it accepts it
	echo "hits on 198.51.100.10: $before before, $(hits 198.51.100.10) after" >&2
	[ "$(hits 198.51.100.10)" -eq "$before" ]
}

@test "a port already bound exits 102; no resolver exits 111 naming --resolver; usage errors exit 100" {
	run --separate-stderr lab exec "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" \
		--ledger "$BATS_TEST_TMPDIR/l" --allow pkg.test
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"unable to bind TCP 203.0.113.1:3128: Address already in use"* ]]
	# the UDP port alone (no proxy) conflicts too: no SO_REUSEADDR on UDP
	run --separate-stderr lab exec "$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" --no-proxy \
		--ledger "$BATS_TEST_TMPDIR/l" --allow pkg.test
	[ "$status" -eq 102 ]
	[[ "$stderr" == *"UDP 203.0.113.1:1053"* ]]
	[ -z "$output" ]
	# no nameserver in resolv.conf and no --resolver
	run --separate-stderr unshare -m sh -c 'mount --bind /dev/null /etc/resolv.conf && exec "$@"' sh \
		"$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger "$BATS_TEST_TMPDIR/l"
	[ "$status" -eq 111 ]
	[[ "$stderr" == *"--resolver"* ]]
	[ -z "$output" ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --ledger /dev/null
	[ "$status" -eq 100 ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
		--allow 'bad_name!' --resolver 127.0.0.1
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--allow bad_name!"* ]]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
		--resolver 127.0.0.1:99999
	[ "$status" -eq 100 ]
	run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
		--resolver 127.0.0.1 --canary 0
	[ "$status" -eq 100 ]
	[[ "$stderr" == *"--canary 0"* ]]
	run "$ISOPOD_SRC/bin/isopod-broker" -h
	[ "$status" -eq 0 ]
	[ "$output" = "usage: isopod-broker --listen ADDR --ledger FILE [--ledger-fd N] [--proxy-port N] [--dns-port N] [--allow PATTERN]... [--allow-all] [--allow-range CIDR]... [--no-proxy] [--resolver ADDR[:PORT]] [--parent PID] [--vm ID] [--canary PORT] [--expect-jail-chain]" ]
	# and the man page's SYNOPSIS says the same
	local synopsis
	synopsis=$(MANWIDTH=1000 man -l "$ISOPOD_SRC/man/isopod-broker.1" 2>/dev/null |
		awk '/^SYNOPSIS/ { getline; sub(/^ +/, ""); print; exit }')
	[ "$output" = "usage: $synopsis" ]
}

@test "a guest that resets a half-closed tunnel does not make the broker spin" {
	local pid t0 t1
	pid=$(broker_pid)
	# an upstream that ignores the broker's FIN and holds on for 6 s
	ip netns exec "$LAB_NAME-inet" timeout 20 python3 -c 'import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.10", 8083))
s.listen(4)
s.settimeout(15)
c, _ = s.accept()
time.sleep(6)
c.close()' 3>&- </dev/null >/dev/null 2>&1 &
	echo $! >"$BATS_FILE_TMPDIR/spin.pid"
	# the guest: a tunnel, its write side shut (the broker passes the FIN
	# on), then an abortive close (RST) while the broker wants nothing from
	# its socket: EPOLLHUP|EPOLLERR arrive whatever the interest
	run lab exec timeout 20 python3 -c 'import socket, struct, time
for i in range(50):
    c = socket.create_connection(("203.0.113.1", 3128), 5)
    c.settimeout(5)
    c.sendall(b"CONNECT pkg.test:8083 HTTP/1.1\r\n\r\n")
    r = b""
    while b"\r\n\r\n" not in r:
        k = c.recv(4096)
        if not k:
            break
        r += k
    if r.startswith(b"HTTP/1.1 200"):
        break
    c.close()
    time.sleep(0.1)
else:
    raise SystemExit("no tunnel")
c.shutdown(socket.SHUT_WR)
time.sleep(0.3)
c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
c.close()
print("reset")'
	[ "$output" = "reset" ]
	# CPU time (utime + stime, clock ticks) over 2 s: a busy loop takes ~2 s
	t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	sleep 2
	t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	echo "cpu ticks: $((t1 - t0))"
	[ $((t1 - t0)) -lt 40 ]
	# and the reset ended the flow, with its line, while the upstream
	# still holds on (it lets go 6 s after the connect)
	output=$(jq -c 'select(.port == 8083 and .verdict == "allowed" and .reason == null)' "$LEDGER")
	json_is '.kind == "connect" and .name == "pkg.test" and .address == "198.51.100.10" and .up == 0'
	kill -0 "$pid"
	wait "$(cat "$BATS_FILE_TMPDIR/spin.pid")" || :
}

@test "--allow-all: an IP literal of the host's own is denied, however many addresses the host has" {
	local d="$BATS_TEST_TMPDIR" pid i before
	before=$(hits 203.0.113.1)
	# Both blocks opened, so only the own-address check can stop these:
	# the host's own addresses stay denied whatever the overrides say.
	test_broker own --proxy-port 3133 --dns-port 1059 --allow-all --resolver 198.51.100.53:53 \
		--allow-range 203.0.113.0/24 --allow-range 192.0.2.0/24
	# 203.0.113.1 is the host's (TEST-NET-3, opened above)
	run lab exec curl -sS -m 15 -x "http://$BRK:3133" -i http://203.0.113.1/
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: a denied address\r'* ]]
	# the host grows 200 more addresses; the last one is its own as much
	for i in $(seq 1 200); do echo "addr add 192.0.2.$i/32 dev lo"; done >"$d/add"
	ip netns exec "$LAB_NAME-host" ip -batch "$d/add"
	run lab exec curl -sS -m 15 -x "http://$BRK:3133" -i http://192.0.2.200/
	sed 's/^addr add/addr del/' "$d/add" >"$d/del"
	ip netns exec "$LAB_NAME-host" ip -batch "$d/del"
	echo "$output"
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: a denied address\r'* ]]
	[ "$(hits 203.0.113.1)" -eq "$before" ]
	stop_broker
	output=$(tail -n 1 "$d/ledger")
	json_is '.name == "192.0.2.200" and .verdict == "denied" and .reason == "a denied address" and .address == null'
}

@test "ports: an entry allows 80 and 443 (CONNECT or HTTP); :22 and :8080 are refused naming the rule, the ledger has the port; NAME:PORT allows exactly that port" {
	local d="$BATS_TEST_TMPDIR" pid p
	test_broker ports --proxy-port 3134 --dns-port 1060 --allow pkg.test --allow other.test:8080 \
		--allow '*.wild.test' --allow-range 198.51.100.0/24 --resolver 198.51.100.53:53
	px() { lab exec curl -sS -m 15 -x "http://$BRK:3134" "$@"; }
	# CONNECT to 443 (the lab's HTTPS listener) and 80, plain HTTP to 80
	run px --cacert "$ISOPOD_LAB_STATE/$LAB_NAME/tls/ca.pem" https://pkg.test/
	[ "$output" = "lab tls 198.51.100.10" ]
	run px --proxytunnel http://pkg.test/
	[ "$output" = "lab 198.51.100.10" ]
	run px http://pkg.test/
	[ "$output" = "lab 198.51.100.10" ]
	# any other port of an allowed name: 403 naming the entry, nothing connected
	for p in 22 8080; do
		run px -i --proxytunnel "http://pkg.test:$p/"
		[ "$status" -ne 0 ]
		[[ "$output" == *"403"* ]]
		run lab exec python3 -c 'import socket, sys
c = socket.create_connection((sys.argv[1], 3134), 5)
c.sendall(b"CONNECT pkg.test:%s HTTP/1.1\r\n\r\n" % sys.argv[2].encode())
c.settimeout(5)
r = b""
while True:
    k = c.recv(4096)
    if not k:
        break
    r += k
print(r.decode())' "$BRK" "$p"
		[[ "$output" == "HTTP/1.1 403 Forbidden"* ]]
		[[ "$output" == *$'X-Isopod-Refusal: port not in the allowlist\r'* ]]
		[[ "$output" == *"isopod-broker: pkg.test port $p is not allowed: the allowlist entries for pkg.test (pkg.test) allow ports 80 (HTTP) and 443 (HTTPS) only; allow that port as pkg.test:$p"* ]]
	done
	# plain HTTP to another port too; and a wildcard's names alike
	run px -i http://pkg.test:8080/
	[[ "$output" == "HTTP/1.1 403"* && "$output" == *"port not in the allowlist"* ]]
	run px -i http://a.wild.test:22/
	[[ "$output" == "HTTP/1.1 403"* && "$output" == *"(*.wild.test)"* ]]
	# NAME:PORT: exactly that port (the holder on 8080), not 80 or 443
	run lab exec python3 -c 'import socket, sys
c = socket.create_connection((sys.argv[1], 3134), 5)
c.sendall(b"CONNECT other.test:8080 HTTP/1.1\r\n\r\n")
c.settimeout(5)
r = b""
while b"hello" not in r:
    k = c.recv(4096)
    if not k:
        break
    r += k
print(r.decode())' "$BRK"
	[[ "$output" == "HTTP/1.1 200 Connection established"*"hello"* ]]
	run px -i http://other.test/
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *"other.test port 80 is not allowed: the allowlist entries for other.test (other.test:8080) allow only the ports they name"* ]]
	stop_broker
	# the ledger: each refusal with its port, no address (never connected)
	output=$(jq -c -s '[.[] | select(.reason == "port not in the allowlist") | [.kind, .name, .port, .address]]' "$d/ledger")
	json_is '. == [["connect","pkg.test",22,null],["connect","pkg.test",22,null],["connect","pkg.test",8080,null],["connect","pkg.test",8080,null],["http","pkg.test",8080,null],["http","a.wild.test",22,null],["http","other.test",80,null]]'
	output=$(jq -c -s '[.[] | select(.verdict == "allowed") | [.kind, .name, .port]] | sort' "$d/ledger")
	json_is '. == [["connect","other.test",8080],["connect","pkg.test",80],["connect","pkg.test",443],["http","pkg.test",80]]'
}

@test "ports: a bad --allow port is a usage error (0, 65536, junk, empty, leading zero)" {
	local p
	for p in 'pkg.test:0' 'pkg.test:65536' 'pkg.test:ssh' 'pkg.test:' 'pkg.test:022' 'pkg.test:80:81'; do
		run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
			--resolver 127.0.0.1 --allow "$p"
		[ "$status" -eq 100 ]
		[[ "$stderr" == *"--allow $p: "* ]]
	done
}

@test "deny list: a name resolving into 198.18.0.0/15 is refused naming the block; an --allow-range opens it, the host's own address stays denied" {
	local d="$BATS_TEST_TMPDIR" pid before
	before=$(hits 198.18.0.10)
	run pcurl -i http://bench.test/
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: resolves only to denied addresses\r'* ]]
	[[ "$output" == *"bench.test resolves only to denied addresses (198.18.0.10: Benchmarking)"* ]]
	run pcurl -i --proxytunnel https://bench.test/
	[ "$status" -ne 0 ]
	last_line
	json_is '.kind == "connect" and .name == "bench.test" and .port == 443 and .verdict == "denied" and .address == null'
	# the TEST-NETs the lab does not open, as literals (--allow-all)
	test_broker deny --proxy-port 3135 --dns-port 1061 --allow-all --resolver 198.51.100.53:53
	run lab exec curl -sS -m 15 -x "http://$BRK:3135" -i http://198.18.0.10/
	[[ "$output" == *"198.18.0.10 is a denied address (Benchmarking)"* ]]
	run lab exec curl -sS -m 15 -x "http://$BRK:3135" -i http://198.51.100.10/
	[[ "$output" == *"198.51.100.10 is a denied address (Documentation (TEST-NET-2))"* ]]
	stop_broker
	[ "$(hits 198.18.0.10)" -eq "$before" ]
	# The override (the mutation that shows the refusal above can fail):
	# with 198.18.0.0/15 opened the same name is reached.
	test_broker open18 --proxy-port 3136 --dns-port 1062 --allow bench.test \
		--allow-range 198.18.0.0/15 --resolver 198.51.100.53:53
	output=$(cat "$d/announce")
	json_is '.allow_ranges == ["198.18.0.0/15"]'
	run lab exec curl -sS -m 15 -x "http://$BRK:3136" http://bench.test/
	[ "$output" = "lab 198.18.0.10" ]
	[ "$(hits 198.18.0.10)" -eq $((before + 1)) ]
	stop_broker
	# an override is a block of the list or a part of one; nothing else
	for r in 8.8.8.0/24 198.16.0.0/12 198.18.0.1/15 0.0.0.0/0 198.18.0.0 pkg.test/8; do
		run --separate-stderr "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
			--resolver 127.0.0.1 --allow-range "$r"
		[ "$status" -eq 100 ]
		[[ "$stderr" == *"--allow-range $r: "* ]]
	done
}

@test "IPv6: names with only AAAA (unique-local, IPv4-mapped) get no connection; IPv6 literals are refused" {
	local before
	before=$(hits 198.18.0.10)
	# the broker asks for A records only: an IPv6-only name has none
	run pcurl -i http://ula.test/
	[[ "$output" == "HTTP/1.1 502"* && "$output" == *"no such name"* ]]
	run pcurl -i --proxytunnel https://mapped.test/
	[ "$status" -ne 0 ]
	last_line
	json_is '.name == "mapped.test" and .address == null and .reason == "no such name"'
	dnslog | grep -q '^ula.test A$'
	dnslog | grep -q '^mapped.test A$'
	! dnslog | grep -Eq '^(ula|mapped)\.test AAAA$' || false
	# literals, even with every name allowed
	test_broker v6 --proxy-port 3137 --dns-port 1063 --allow-all --resolver 198.51.100.53:53
	run lab exec curl -sS -m 15 -x "http://$BRK:3137" -i 'http://[fd00::5]/'
	[[ "$output" == "HTTP/1.1 403"* && "$output" == *"IPv6 is not served"* ]]
	run lab exec curl -sS -m 15 -x "http://$BRK:3137" -i 'http://[::ffff:198.18.0.10]/'
	[[ "$output" == "HTTP/1.1 403"* ]]
	stop_broker
	[ "$(hits 198.18.0.10)" -eq "$before" ]
}

@test "lab: sealed — no route out of the internet netns, nothing linked to the root netns" {
	run ip netns exec "${LAB_NAME}-inet" ip route show default
	[ -z "$output" ]
	run ip -o link show
	[[ "$output" != *" i0@"* && "$output" != *" h0@"* ]]
	[ "$(ip netns exec "$LAB_NAME-host" cat /etc/resolv.conf)" = "nameserver 198.51.100.53" ]
}

@test "--canary without isopod-netsetup's table: exit 111 naming isopod-netsetup, no announce; with it, a loss is noticed" {
	local d=$BATS_TEST_TMPDIR st=0 pid
	# On the host netns' loopback (the main broker is on $BRK).  This lab
	# has no isopod table: nothing turns 1054 into 1055.
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" \
		--listen 127.0.0.1 --ledger "$d/ledger" --canary 1054 --allow pkg.test 3>&- </dev/null
	[ "$status" -eq 111 ]
	[ -z "$output" ]
	[[ "$stderr" == *"no network policy on 127.0.0.1"*"run isopod-netsetup"* ]]
	[ ! -s "$d/ledger" ]
	# mutation: a table that does the rewrite (as isopod-netsetup's canary
	# chain does) is enough for it to start, so the refusal above is the
	# canary's doing
	lab exec nft -f - <<-'EOF'
		table inet t45canary {
			chain canary {
				type filter hook output priority filter;
				ip daddr 127.0.0.1 udp dport 1054 udp dport set 1055
			}
		}
	EOF
	ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 \
		--ledger "$d/ledger" --canary 1054 --allow pkg.test >"$d/announce" 2>"$d/err" 3>&- </dev/null &
	pid=$!
	echo "$pid" >"$BATS_FILE_TMPDIR/canary.pid"
	await_announce "$d/announce" || { lab exec nft delete table inet t45canary; false; }
	# a broker not scheduled for a while (SIGSTOP, a loaded host) is no
	# loss: what it sent was answered at once
	sleep 1.5
	kill -STOP "$pid"
	sleep 4.5
	kill -CONT "$pid"
	sleep 1.5
	kill -0 "$pid" || { lab exec nft delete table inet t45canary; cat "$d/err"; false; }
	! grep -q policy "$d/ledger" || false
	lab exec nft delete table inet t45canary
	for _ in $(seq 1 80); do # it notices the table gone (≤ 8 s)
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
	wait "$pid" || st=$?
	cat "$d/err"
	[ "$st" -eq 111 ]
	jq -se 'length == 1 and .[0].kind == "policy" and .[0].verdict == "lost"' "$d/ledger"
}

@test "--canary: a host process that binds the canary port while the table is gone cannot answer for it (exit 111)" {
	local d=$BATS_TEST_TMPDIR rpid
	# The reflector: whatever reaches *:1054 goes back to 127.0.0.1:1055,
	# where the broker's canary socket is (no isopod table in this lab).
	ip netns exec "$LAB_NAME-host" timeout 20 python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 1054))
n = 0
while True:
    b, _ = s.recvfrom(64)
    s.sendto(b, ("127.0.0.1", 1055))
    n += 1
    open(sys.argv[1], "w").write(str(n))
' "$d/reflected" 3>&- </dev/null &
	rpid=$!
	echo "$rpid" >"$BATS_FILE_TMPDIR/reflector.pid"
	sleep 0.5
	run --separate-stderr ip netns exec "$LAB_NAME-host" "$ISOPOD_SRC/bin/isopod-broker" \
		--listen 127.0.0.1 --ledger "$d/ledger" --canary 1054 --allow pkg.test 3>&- </dev/null
	kill "$rpid" 2>/dev/null || :
	# the probe ran: the reflector got nonces and sent them back
	[ "$(cat "$d/reflected")" -ge 1 ]
	[ "$status" -eq 111 ]
	[ -z "$output" ]
	[[ "$stderr" == *"no network policy on 127.0.0.1"* ]]
}

@test "the host itself: no override opens 0/8 or 127/8; an address the host routes to itself (a local route) is denied though no interface has it" {
	local d="$BATS_TEST_TMPDIR" r lpid before
	for r in 127.0.0.0/8 127.0.0.2/32 0.0.0.0/8 0.0.0.0/32 ::1/128 ::/128 ::ffff:0:0/96; do
		run --separate-stderr ip netns exec "$LAB_NAME-host" timeout 10 \
			"$ISOPOD_SRC/bin/isopod-broker" --listen 127.0.0.1 --ledger /dev/null \
			--resolver 127.0.0.1 --allow-range "$r" 3>&- </dev/null
		[ "$status" -eq 100 ]
		[[ "$stderr" == *"--allow-range $r: the host itself"* ]]
	done
	# A host listener on every address, and 192.0.2.77 delivered locally
	# by a route (`ip route add local`), on no interface: own_addr's list
	# of interface addresses does not have it, the route lookup does.
	ip netns exec "$LAB_NAME-host" timeout 60 python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8099)); s.listen(8)
while True:
    c, a = s.accept(); c.recv(4096); open(sys.argv[1], "a").write("hit\n")
    c.sendall(b"HTTP/1.0 200 OK\r\n\r\nhost listener\n"); c.close()
' "$d/hostlog" 3>&- </dev/null >/dev/null 2>&1 &
	lpid=$!
	echo "$lpid" >"$BATS_FILE_TMPDIR/hostlistener.pid"
	ip netns exec "$LAB_NAME-host" ip route add local 192.0.2.77/32 dev lo
	test_broker local --proxy-port 3138 --dns-port 1064 --allow-all --resolver 198.51.100.53:53 \
		--allow-range 192.0.2.0/24
	# the probe can succeed: the listener answers on that address
	for _ in $(seq 1 50); do
		run ip netns exec "$LAB_NAME-host" curl -sS -m 5 http://192.0.2.77:8099/
		[ "$output" = "host listener" ] && break
		sleep 0.1
	done
	echo "$output"
	[ "$output" = "host listener" ]
	before=$(grep -c hit "$d/hostlog")
	run lab exec curl -sS -m 15 -x "http://$BRK:3138" -i http://192.0.2.77:8099/
	ip netns exec "$LAB_NAME-host" ip route del local 192.0.2.77/32 dev lo
	echo "$output"
	[[ "$output" == "HTTP/1.1 403"* ]]
	[[ "$output" == *$'X-Isopod-Refusal: a denied address\r'* ]]
	run lab exec curl -sS -m 15 -x "http://$BRK:3138" -i http://127.0.0.2:8099/
	[[ "$output" == "HTTP/1.1 403"* ]]
	run lab exec curl -sS -m 15 -x "http://$BRK:3138" -i http://0.0.0.0:8099/
	[[ "$output" == "HTTP/1.1 403"* ]]
	stop_broker
	kill "$lpid" 2>/dev/null || :
	[ "$(grep -c hit "$d/hostlog")" -eq "$before" ]
}

# await_listen PORT: until 198.51.100.10:PORT accepts (from the host netns)
await_listen() {
	local i
	for i in $(seq 1 50); do
		ip netns exec "$LAB_NAME-host" python3 -c 'import socket, sys; socket.create_connection(("198.51.100.10", int(sys.argv[1])), 1).close()' "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

@test "200 tunnels at once through one broker: every one gets its bytes back, in order, and its own ledger line with their counts" {
	local d="$BATS_TEST_TMPDIR" srv expect
	# t/lab/echo.py: each tunnel's bytes back, then their digest
	ip netns exec "$LAB_NAME-inet" timeout 90 python3 "$BATS_TEST_DIRNAME/lab/echo.py" \
		198.51.100.10 8084 3>&- </dev/null >/dev/null 2>&1 &
	srv=$!
	echo "$srv" >"$BATS_FILE_TMPDIR/echo200.pid"
	await_listen 8084
	test_broker many --proxy-port 3139 --dns-port 1065 --allow pkg.test:8084 \
		--allow-range 198.51.100.0/24
	# t/lab/tunnels.py: 200 at once, half with early data
	run --separate-stderr lab exec timeout 70 python3 "$BATS_TEST_DIRNAME/lab/tunnels.py" 200 \
		"$BRK:3139" pkg.test:8084
	echo "$stderr" | head -20
	echo "$output" | jq -c '{ok, failed}'
	json_is '.ok == 200 and .failed == 0'
	expect=$(jq -c .expect <<<"$output")
	stop_broker
	kill "$srv" 2>/dev/null || :
	# one line per tunnel, each with the bytes it sent and got
	output=$(jq -sc '[.[] | select(.port == 8084)]' "$d/ledger")
	json_is 'length == 200 and all(.[]; .kind == "connect" and .verdict == "allowed" and .reason == null and .address == "198.51.100.10")'
	json_is "([.[] | [.up, .down]] | sort) == $expect"
	[ ! -s "$d/err" ]
}

@test "half-close through the relay: either side's FIN is passed on after all its bytes, and the other way stays open until its own end" {
	local d="$BATS_TEST_TMPDIR" srv
	# the service: its first connection is read to the end, then answered
	# (1 MiB and the count and digest of what it read); to its second it
	# sends 1 MiB, shuts its write side, then reads to the end what the
	# guest says after that, into a file.  Bounded: 60 s.
	ip netns exec "$LAB_NAME-inet" timeout 60 python3 -c 'import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.51.100.10", 8085))
s.listen(4)
s.settimeout(30)
block = bytes(range(256)) * 4096
for conn in range(2):
    c, _ = s.accept()
    c.settimeout(30)
    if conn == 0:
        h, n = hashlib.sha256(), 0
        while True:
            k = c.recv(65536)
            if not k:
                break
            h.update(k)
            n += len(k)
        c.sendall(block + ("%d %s\n" % (n, h.hexdigest())).encode())
    else:
        c.sendall(block)
        c.shutdown(socket.SHUT_WR)
        r = b""
        while True:
            k = c.recv(65536)
            if not k:
                break
            r += k
        open(sys.argv[1], "wb").write(r)
    c.close()' "$d/after-fin" 3>&- </dev/null >/dev/null 2>&1 &
	srv=$!
	echo "$srv" >"$BATS_FILE_TMPDIR/halfclose.pid"
	test_broker half --proxy-port 3140 --dns-port 1066 --allow pkg.test:8085 \
		--allow-range 198.51.100.0/24
	run lab exec timeout 60 python3 -c 'import hashlib, socket, time
def tunnel():
    for i in range(50):  # until the service listens (502 before)
        c = socket.create_connection(("203.0.113.1", 3140), 5)
        c.settimeout(30)
        c.sendall(b"CONNECT pkg.test:8085 HTTP/1.1\r\n\r\n")
        r = b""
        while b"\r\n\r\n" not in r:
            k = c.recv(4096)
            if not k:
                break
            r += k
        if r.startswith(b"HTTP/1.1 200"):
            return c, r.split(b"\r\n\r\n", 1)[1]
        c.close()
        time.sleep(0.1)
    raise SystemExit("no tunnel")
def to_end(c, r):
    while True:
        k = c.recv(65536)
        if not k:
            return r
        r += k
block = bytes(range(256)) * 4096
# the guest ends first: its FIN reaches the service after its 300000 bytes,
# and the whole answer still comes back
c, r = tunnel()
up = (bytes(range(255, -1, -1)) * 1172)[:300000]
c.sendall(up)
c.shutdown(socket.SHUT_WR)
r = to_end(c, r)
print(r[:len(block)] == block, r[len(block):] == ("%d %s\n" % (len(up), hashlib.sha256(up).hexdigest())).encode())
c.close()
# the service ends first: the guest reads to the end, then still speaks
c, r = tunnel()
r = to_end(c, r)
print(r == block)
c.sendall(b"after-fin\n")
c.close()'
	echo "$output"
	[ "$output" = $'True True\nTrue' ]
	wait "$srv"
	[ "$(cat "$d/after-fin")" = after-fin ]
	stop_broker
	output=$(jq -sc '[.[] | select(.port == 8085 and .reason == null)]' "$d/ledger")
	json_is 'length == 2 and all(.[]; .kind == "connect" and .verdict == "allowed")'
	json_is '.[0].up == 300000 and .[0].down == 1048576 + 72 and .[1].up == 10 and .[1].down == 1048576'
}

@test "urgent (MSG_OOB) data through a tunnel, either way: the bytes around it arrive, the urgent byte is dropped, counted; the broker does not spin" {
	local d="$BATS_TEST_TMPDIR" srv i t0 t1
	# splice(2) stops at TCP's urgent mark while epoll still says the bytes
	# behind it are there: without a recv() past it the relay spins (or,
	# when the sender's FIN follows, splice says 0 and they are lost).
	# The service, on ports 8086 and 8087: to each connection "ab", an
	# urgent "X", "cd" (and on 8087 its end, FIN); what it reads (4 bytes,
	# or to the end) goes to the file up-PORT; then it reads to the end.
	# Bounded: 40 s.
	ip netns exec "$LAB_NAME-inet" timeout 40 python3 -c 'import socket, sys, threading, time
def serve(c, port):
    c.settimeout(20)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        c.sendall(b"ab"); time.sleep(0.2)
        c.send(b"X", socket.MSG_OOB); time.sleep(0.2)
        c.sendall(b"cd")
        if port == 8087:
            c.shutdown(socket.SHUT_WR)
        r = b""
        while len(r) < 4:
            k = c.recv(4096)
            if not k:
                break
            r += k
        if r:
            open("%s/up-%d" % (sys.argv[1], port), "wb").write(r)
        while c.recv(4096):
            pass
    except OSError:
        pass
    c.close()
def listen(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("198.51.100.10", port))
    s.listen(4)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, port), daemon=True).start()
threading.Thread(target=listen, args=(8087,), daemon=True).start()
listen(8086)' "$d" 3>&- </dev/null >/dev/null 2>&1 &
	srv=$!
	echo "$srv" >"$BATS_FILE_TMPDIR/urg.pid"
	await_listen 8086
	await_listen 8087
	test_broker urg --proxy-port 3141 --dns-port 1067 --allow pkg.test:8086 \
		--allow pkg.test:8087 --allow-range 198.51.100.0/24
	# the guest, a tunnel to each port: "12", an urgent "Y", "34" (no
	# end); it reads what comes down, to the end or for 5 s, says it
	# ("DOWN-8086 DOWN-8087"), then holds both tunnels 5 s (the CPU
	# check: their ways up stay open)
	lab exec timeout 30 python3 -c 'import socket, threading, time
def tunnel(port, out):
    c = socket.create_connection(("203.0.113.1", 3141), 5)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.settimeout(5)
    c.sendall(b"CONNECT pkg.test:%d HTTP/1.1\r\n\r\n" % port)
    r = b""
    while b"\r\n\r\n" not in r:
        k = c.recv(4096)
        if not k:
            break
        r += k
    assert r.startswith(b"HTTP/1.1 200"), r
    r = r.split(b"\r\n\r\n", 1)[1]
    c.sendall(b"12"); time.sleep(0.2)
    c.send(b"Y", socket.MSG_OOB); time.sleep(0.2)
    c.sendall(b"34")
    try:
        while True:
            k = c.recv(4096)
            if not k:
                break
            r += k
    except OSError:
        pass
    out[port] = (c, r.decode())
out = {}
ts = [threading.Thread(target=tunnel, args=(p, out)) for p in (8086, 8087)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(out[8086][1], out[8087][1], flush=True)
time.sleep(5)' >"$d/down" 2>"$d/client.err" 3>&- </dev/null &
	echo $! >"$BATS_FILE_TMPDIR/urgc.pid"
	for i in $(seq 1 100); do
		[ -s "$d/down" ] && break
		sleep 0.1
	done
	# the tunnels are open (the guest holds them 5 s after it printed) and
	# idle: CPU time (utime + stime, clock ticks of 10 ms) over 3 s; a
	# spinning loop takes ~3 s, the bound is 0.5 s
	t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	sleep 3
	t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
	echo "cpu ticks: $((t1 - t0))"
	cat "$d/client.err" >&2
	echo "down: $(cat "$d/down") up: $(cat "$d/up-8086" 2>/dev/null) $(cat "$d/up-8087" 2>/dev/null)"
	[ $((t1 - t0)) -lt 50 ]
	[ "$(cat "$d/down")" = "abcd abcd" ]
	[ "$(cat "$d/up-8086")" = 1234 ]
	[ "$(cat "$d/up-8087")" = 1234 ]
	wait "$(cat "$BATS_FILE_TMPDIR/urgc.pid")"
	stop_broker
	kill "$srv" 2>/dev/null || :
	# the urgent bytes are not counted: they never went on
	output=$(jq -sc '[.[] | select((.port == 8086 or .port == 8087) and .reason == null)]' "$d/ledger")
	json_is 'length == 2 and all(.[]; .kind == "connect" and .verdict == "allowed" and .up == 4 and .down == 4)'
}

@test "relay pipes: a broker of an unprivileged uid holding 200 tunnels leaves that uid's other pipes their size (fs.pipe-user-pages-soft); a pipe grows only once filled, to 1 MiB for 16 pipes at most" {
	local d srv soft uid=$((1990000000 + $$ % 100000))
	soft=$(cat /proc/sys/fs/pipe-user-pages-soft)
	# 200 tunnels with a byte through each way: eager 256 KiB pipes (two
	# per flow, 64 pages each) pass the soft limit (16384 pages by default)
	# at 128 flows; two default pipes a flow (16 pages each) stay below it.
	[ "$soft" -gt $((200 * 32 + 16)) ] && [ "$soft" -lt $((200 * 128)) ] ||
		skip "fs.pipe-user-pages-soft is $soft: 200 tunnels do not tell eager pipes from lazy ones"
	d=$(mktemp -d /tmp/isopod-t45-pipes.XXXXXX)
	chown "$uid:$uid" "$d"
	ip netns exec "$LAB_NAME-inet" timeout 60 python3 "$BATS_TEST_DIRNAME/lab/echo.py" \
		198.51.100.10 8088 60 3>&- </dev/null >/dev/null 2>&1 &
	srv=$!
	echo "$srv" >"$BATS_FILE_TMPDIR/echo-pipes.pid"
	await_listen 8088
	# the broker as uid (not root: root is exempt from the pipe limits)
	ip netns exec "$LAB_NAME-host" setpriv --reuid "$uid" --regid "$uid" --clear-groups \
		"$ISOPOD_SRC/bin/isopod-broker" --listen "$BRK" --proxy-port 3142 --dns-port 1068 \
		--allow pkg.test:8088 --allow-range 198.51.100.0/24 --ledger "$d/ledger" \
		>"$d/announce" 2>"$d/err" 3>&- </dev/null &
	pid=$!
	echo "$pid" >"$BATS_FILE_TMPDIR/pipes.pid"
	await_announce "$d/announce"
	# 200 tunnels, a byte through each way, left open; then, as uid, a
	# new pipe's size; then the broker's pipes after a second of silence,
	# and a byte again through each.  Bounded: 40 s.
	run --separate-stderr lab exec timeout 40 python3 -c 'import fcntl, json, os, socket, sys, time
proxy, uid, n = (sys.argv[1], 3142), int(sys.argv[2]), 200
held = []
for i in range(n):
    s = socket.create_connection(proxy, 5)
    s.sendall(b"CONNECT pkg.test:8088 HTTP/1.1\r\n\r\n")
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        k = s.recv(1)
        assert k, "tunnel %d: no answer" % i
        head += k
    assert head.startswith(b"HTTP/1.1 200"), head
    s.sendall(b"x")
    assert s.recv(1) == b"x", "tunnel %d: no echo" % i
    held.append(s)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setgroups([]); os.setgid(uid); os.setuid(uid)
    a, b = os.pipe()
    os.write(w, str(fcntl.fcntl(b, 1032)).encode())  # F_GETPIPE_SZ
    os._exit(0)
os.waitpid(pid, 0)
size = int(os.read(r, 64))
fds = "/proc/%s/fd" % sys.argv[3]
pipes = lambda: sum(os.readlink(os.path.join(fds, f)).startswith("pipe:") for f in os.listdir(fds))
def biggest():  # the size of the largest pipe the broker holds (F_GETPIPE_SZ)
    m = 0
    for f in os.listdir(fds):
        try:
            p = os.open(os.path.join(fds, f), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            m = max(m, fcntl.fcntl(p, 1032))
        except OSError:
            pass
        os.close(p)
    return m
# the pipes of the last tunnels are still there: none filled, none grown
busy, busy_max = pipes(), biggest()
# a second without traffic: the empty pipes go; bytes still pass after
time.sleep(1.6)
idle = pipes()
again = 0
for s in held:
    s.sendall(b"y")
    again += s.recv(1) == b"y"
def sizes():  # the sizes of the pipes the broker holds, one per pipe (two ends)
    z = {}
    for f in os.listdir(fds):
        try:
            name = os.readlink(os.path.join(fds, f))
            p = os.open(os.path.join(fds, f), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if name.startswith("pipe:"):
                z[name] = fcntl.fcntl(p, 1032)
        except OSError:
            pass
        os.close(p)
    return z.values()
# bulk into tunnels whose guest does not read: their pipes fill, and grow;
# one tunnel first, then eight more (18 directions filled)
def bulk(s):
    sent, stall = 0, time.time()
    s.setblocking(False)
    while time.time() - stall < 0.5 and sent < 64 << 20:
        try:
            sent += s.send(b"z" * 65536)
            stall = time.time()
        except BlockingIOError:
            time.sleep(0.01)
bulk(held[0])
bulk_max = biggest()
for s in held[1:9]:
    bulk(s)
z = sizes()
# those nine tunnels closed (their flows end), a tenth bulk tunnel gets
# 1 MiB pipes again: an ended flow gives its room back
for s in held[:9]:
    s.close()
end = time.time() + 5
while time.time() < end and any(n >= 1 << 20 for n in sizes()):
    time.sleep(0.1)
bulk(held[9])
print(json.dumps({"tunnels": len(held), "pipe": size, "busy_pipes": busy, "busy_max": busy_max,
                  "idle_pipes": idle, "again": again, "bulk_max": bulk_max,
                  "grown": sum(n > 65536 for n in z), "mib_pipes": sum(n >= 1 << 20 for n in z),
                  "mib_after": sum(n >= 1 << 20 for n in sizes())}))' "$BRK" "$uid" "$pid"
	echo "$stderr" | head -5
	echo "$output"
	kill -TERM "$pid"
	wait "$pid" || :
	kill "$srv" 2>/dev/null || :
	cat "$d/err"
	rm -rf "$d"
	json_is '.tunnels == 200 and .pipe == 65536'
	# (the broker has one pipe of its own; the first tunnels may be idle
	# already when busy_pipes is counted)
	json_is '.busy_pipes > 1 and .idle_pipes <= 1 and .again == 200'
	# a byte each way leaves a pipe its default size; bytes that fill it
	# grow it to 256 KiB (PIPE_SIZE), and filling that to 1 MiB (PIPE_BULK,
	# fs.pipe-max-size allowing) ...
	json_is '.busy_max == 65536'
	if [ "$(cat /proc/sys/fs/pipe-max-size)" -ge 1048576 ]; then
		json_is '.bulk_max == 1048576'
	else
		json_is '.bulk_max == 262144'
	fi
	# ... for 16 pipes at most (PIPE_BULK_MAX): of 18 filled directions,
	# the others keep 256 KiB; once their flows end, a new one grows again
	json_is '.grown >= 17 and .mib_pipes <= 16'
	[ "$(cat /proc/sys/fs/pipe-max-size)" -lt 1048576 ] || json_is '.mib_after >= 1'
}

@test "the host's own addresses are cached per address, yet an address the host takes (or drops) after an answer is seen at the next connect" {
	local d="$BATS_TEST_TMPDIR" i
	test_broker hostcache --proxy-port 3143 --dns-port 1069 --allow pkg.test:8080 \
		--allow-range 198.51.100.0/24
	# tunnel: the status line of a CONNECT to pkg.test:8080 (198.51.100.10)
	tunnel() {
		lab exec timeout 20 python3 -c 'import socket, sys
s = socket.create_connection((sys.argv[1], 3143), 10)
s.sendall(b"CONNECT pkg.test:8080 HTTP/1.1\r\n\r\n")
print(s.recv(4096).split(b"\r\n")[0].decode())' "$BRK"
	}
	for i in 1 2; do
		run tunnel
		[ "$output" = "HTTP/1.1 200 Connection established" ]
	done
	ip netns exec "$LAB_NAME-host" ip addr add 198.51.100.10/32 dev lo
	run tunnel
	ip netns exec "$LAB_NAME-host" ip addr del 198.51.100.10/32 dev lo
	echo "$output"
	[ "$output" = "HTTP/1.1 403 Forbidden" ]
	run tunnel
	[ "$output" = "HTTP/1.1 200 Connection established" ]
	stop_broker
	# the refusal's ledger line names the host's own address
	output=$(jq -sc '[.[] | select(.port == 8080)]' "$d/ledger")
	json_is 'length == 4 and ([.[] | .verdict] == ["allowed", "allowed", "denied", "allowed"])'
}
