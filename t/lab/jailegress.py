"""t/lab/jailegress.py - what a socket of this process's uid reaches.

  jailegress.py serve ADDR:PORT...   listeners (TCP: "up\\n"; UDP: echo) until killed
  jailegress.py probe SPEC...        one line per SPEC: "SPEC ok|blocked|refused|error"

SPEC is tcp:ADDR:PORT, tcpr:ADDR:PORT (connect, then read the listener's
"up": the SYN-ACK is matched by the listener's uid, as this kernel's
sk_to_full_sk maps a request socket to its listener, but a syncookie's is
unowned; the data after it is the listener's), udp:ADDR:PORT, dns:ADDR:PORT
(an A query for pkg.test, answered by the lab's DNS), icmp:ADDR (a ping
socket: needs net.ipv4.ping_group_range to hold the gid).  ADDR may be
IPv6 ([::1]).  A tcp, udp or dns SPEC may end in @SRC: the socket is bound
to SRC first (e.g. a gateway address, as any local user may).
"ok" is an answer; Probes run at once.  "blocked" no answer within a second or EPERM (what a
netfilter drop in the output hook gives the sender); "refused" the host's
stack answered (it got there).  t/46-filtered.bats runs it as root (the
control: every target answers) and as a jail identity (setpriv)."""

import errno
import select
import socket
import sys
import threading

TMO = 1.0


def split(spec):
    kind, rest = spec.split(":", 1)
    if kind == "icmp":
        return kind, rest, 0, None
    rest, _, src = rest.partition("@")
    host, port = rest.rsplit(":", 1)
    return kind, host.strip("[]"), int(port), src.strip("[]") or None


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def probe(spec):
    kind, host, port, src = split(spec)
    fam = family(host)
    try:
        if kind in ("tcp", "tcpr"):
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(TMO)
            if src:
                s.bind((src, 0))
            s.connect((host, port))
            if kind == "tcpr" and s.recv(3) != b"up\n":
                return "error"
            s.close()
            return "ok"
        if kind == "icmp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
            s.settimeout(TMO)
            s.sendto(b"\x08\x00\x00\x00\x00\x00\x00\x01isopod", (host, 0))
            return "ok" if s.recv(100)[:1] == b"\x00" else "error"
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.settimeout(TMO)
        if src:
            s.bind((src, 0))
        s.connect((host, port))
        if kind == "dns":
            s.send(bytes.fromhex("abcd01000001000000000000") + b"\3pkg\4test\0\0\1\0\1")
            r = s.recv(512)
            return "ok" if r[:2] == b"\xab\xcd" and r[-4:] == bytes([198, 51, 100, 10]) else "error"
        s.send(b"isopod")
        s.recv(100)
        return "ok"
    except socket.timeout:
        return "blocked"
    except OSError as e:
        if e.errno == errno.EPERM:
            return "blocked"
        if e.errno == errno.ECONNREFUSED:
            return "refused"
        return "error:" + errno.errorcode.get(e.errno, str(e.errno))


def serve(addrs):
    socks = []
    for a in addrs:
        host, port = a.rsplit(":", 1)
        host = host.strip("[]")
        t = socket.socket(family(host), socket.SOCK_STREAM)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind((host, int(port)))
        t.listen(16)
        u = socket.socket(family(host), socket.SOCK_DGRAM)
        u.bind((host, int(port)))
        socks += [t, u]
    print("ready", flush=True)
    while True:
        for s in select.select(socks, [], [], 60)[0]:
            if s.type == socket.SOCK_STREAM:
                c, _ = s.accept()
                c.sendall(b"up\n")
                c.close()
            else:
                d, peer = s.recvfrom(512)
                s.sendto(d, peer)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2:])
    else:
        # all at once: a blocked one costs its second once, not per probe
        out = {}
        ts = [threading.Thread(target=lambda s=s: out.__setitem__(s, probe(s))) for s in sys.argv[2:]]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for spec in sys.argv[2:]:
            print(spec, out[spec], flush=True)
