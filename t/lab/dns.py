#!/usr/bin/env python3
"""t/lab/dns.py - the sealed lab's DNS server (t/lab/lab.sh): authoritative
for the zone `test`, UDP only, python3 stdlib only.

dns.py LOG ADDR [PORT]: answers on ADDR:PORT (default 53) and appends
"qname qtype" (qtype by name, e.g. "pkg.test A") to LOG for every query it
receives, before answering, so a test can prove a query never arrived.

    pkg.test, other.test, files.test, a.wild.test, b.wild.test   A 198.51.100.10
    rebind.test     A 10.99.0.5            (a name rebound to a private address)
    meta.test       A 169.254.169.254      (to the cloud metadata service)
    mixed.test      A 10.99.0.5 and A 198.51.100.10
    alias.test      CNAME pkg.test (+ pkg.test's A in the same answer)
    bench.test      A 198.18.0.10          (benchmarking space, 198.18.0.0/15)
    ula.test        AAAA fd00::5           (IPv6 only: a unique-local address)
    mapped.test     AAAA ::ffff:198.18.0.10 (IPv6 only: IPv4-mapped)
    snapshot.debian.org  A 198.51.100.30 (the lab's stand-in, `lab.sh mirror`:
                    the debian image's apt source, never the real one)
    anything else   NXDOMAIN; a known name asked for another type: no data
"""
import socket
import struct
import sys

ZONE = {
    "pkg.test": [("A", "198.51.100.10")],
    "other.test": [("A", "198.51.100.10")],
    "files.test": [("A", "198.51.100.10")],
    "a.wild.test": [("A", "198.51.100.10")],
    "b.wild.test": [("A", "198.51.100.10")],
    "rebind.test": [("A", "10.99.0.5")],
    "meta.test": [("A", "169.254.169.254")],
    "mixed.test": [("A", "10.99.0.5"), ("A", "198.51.100.10")],
    "alias.test": [("CNAME", "pkg.test")],
    "bench.test": [("A", "198.18.0.10")],
    "ula.test": [("AAAA", "fd00::5")],
    "mapped.test": [("AAAA", "::ffff:198.18.0.10")],
    "snapshot.debian.org": [("A", "198.51.100.30")],
}
TYPES = {1: "A", 5: "CNAME", 28: "AAAA", 16: "TXT", 15: "MX", 2: "NS", 6: "SOA", 255: "ANY"}


def read_name(msg, off):
    labels = []
    while True:
        n = msg[off]
        if n == 0:
            return ".".join(labels), off + 1
        if n & 0xC0:
            raise ValueError("compressed name in a question")
        labels.append(msg[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += 1 + n


def wire_name(name):
    out = b""
    for label in name.split("."):
        out += bytes([len(label)]) + label.encode()
    return out + b"\0"


def rr(name, rtype, value):
    if rtype == "A":
        data, t = socket.inet_aton(value), 1
    elif rtype == "AAAA":
        data, t = socket.inet_pton(socket.AF_INET6, value), 28
    else:
        data, t = wire_name(value), 5
    return wire_name(name) + struct.pack(">HHIH", t, 1, 60, len(data)) + data


def answer(msg, log):
    if len(msg) < 12:
        return None
    qid, flags, qd = struct.unpack(">HHH", msg[:6])
    if flags & 0x8000 or qd != 1:
        return None
    try:
        qname, off = read_name(msg, 12)
        qtype, qclass = struct.unpack(">HH", msg[off:off + 4])
    except (ValueError, IndexError, struct.error):
        return None
    qname = qname.lower().rstrip(".")
    with open(log, "a") as f:
        f.write("%s %s\n" % (qname, TYPES.get(qtype, "TYPE%d" % qtype)))
    question = msg[12:off + 4]
    answers = []
    rcode = 0
    if qname not in ZONE:
        rcode = 3
    else:
        for rtype, value in ZONE[qname]:
            if rtype == "CNAME":
                answers.append(rr(qname, "CNAME", value))
                if qtype == 1:
                    answers += [rr(value, t, v) for t, v in ZONE[value] if t == "A"]
            elif qtype in (1, 255) and rtype == "A":
                answers.append(rr(qname, "A", value))
            elif qtype in (28, 255) and rtype == "AAAA":
                answers.append(rr(qname, "AAAA", value))
    # QR, AA, the query's RD, RA
    rflags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
    return struct.pack(">HHHHHH", qid, rflags, 1, len(answers), 0, 0) + question + b"".join(answers)


def main():
    log, addr = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 53
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        msg, peer = s.recvfrom(4096)
        try:
            resp = answer(msg, log)
        except Exception as e:  # a bad query must not stop the lab's DNS
            sys.stderr.write("dns.py: %r\n" % e)
            resp = None
        if resp:
            s.sendto(resp, peer)


if __name__ == "__main__":
    main()
