#!/usr/bin/env python3
"""t/lab/fakevm.py - a stand-in guest for testing the host-side network
without QEMU, and the small tools the network tests use around it.

fakevm.py TAP GUEST MAXSECONDS [WIRELOG]
    Frames are relayed between an isopod tap (in the current netns, like
    QEMU would hold it) and a tap called eth0 inside the netns GUEST
    (/run/netns/GUEST), where the test configures eth0 and runs busybox
    probes as the "guest".  Exits after MAXSECONDS, or when killed.
    With WIRELOG, every IPv4 frame relayed is appended to it as
    "out|in PROTO SRC DST X" (out: sent by the guest; PROTO tcp, udp, icmp
    or the number; X the destination port, the ICMP type, or -): the
    lab's own record that a probe left the guest.

fakevm.py probe SECONDS SPEC...
    Probe every SPEC at once (tcp:ADDR:PORT, udp:ADDR:PORT, icmp:ADDR) and
    print "SPEC OUTCOME" for each: answered (TCP: the connection opened;
    UDP, ICMP: a reply came), refused (a reset or port unreachable),
    unreachable (an ICMP error or no route), or timeout (nothing within
    SECONDS).  Exit 0 only when every SPEC got one of these; anything else
    (a bad SPEC, an unexpected error) exits 1, so a probe that did not run
    can never read as blocked.

fakevm.py arp IFACE ETHSRC SHA SPA TPA
    Send one ARP request (who-has TPA tell SPA, sender hardware address
    SHA) in an Ethernet frame from ETHSRC out of IFACE: a guest's ARP,
    honest or claiming another address.

fakevm.py icmperr DST ISRC ISPORT IDST IDPORT [TYPE CODE MTU [IPROTO]]
    Send one ICMP port unreachable (or TYPE/CODE, with MTU in the last
    word: 3 4 1000 is fragmentation needed) to DST quoting a UDP datagram
    ISRC:ISPORT -> IDST:IDPORT (IPROTO 1: an ICMP header whose first
    words are ISPORT and IDPORT, 2048 for an echo request, which the
    kernel's PMTU update needs no socket for): a guest forging an error about somebody
    else's flow (or about nothing at all).

fakevm.py tcpraw SRC DST DPORT FLAGS
    Send one raw TCP segment (FLAGS, e.g. 0x03 for SYN|FIN, which
    conntrack calls invalid) from SRC to DST:DPORT.

fakevm.py vxlan DST VNI DMAC ISRC IDST IDPORT
    Send one VXLAN datagram (UDP 4789) to DST carrying an Ethernet frame
    to DMAC with a UDP datagram ISRC -> IDST:IDPORT inside: a guest
    building a packet for a host tunnel to decapsulate and route on.

fakevm.py udpraw IFACE ETHSRC ETHDST SRC[:SPORT] DST DPORT [VNI DMAC ISRC IDST IDPORT]
    Send one Ethernet frame from ETHSRC to ETHDST out of IFACE with a UDP
    datagram SRC:SPORT (40001 unless given) -> DST:DPORT built by hand
    (any source, 0.0.0.0:0 included, and any frame source); with VNI...,
    the datagram carries
    what vxlan would (DPORT 4789 for a host's tunnel).

fakevm.py sniff IFACE SECONDS
    Print "SRC DST PROTO" for every IPv4 packet IFACE receives, as it
    arrives (before its tc ingress filter).

fakevm.py udpprobe SRC SPORT DST DPORT CMD...
    A connected UDP socket SRC:SPORT -> DST:DPORT: one datagram, then
    CMD, then another; prints "reply", "refused" (an ICMP error reached
    the socket) or "timeout".

fakevm.py udprecv SRC SPORT DST DPORT SECONDS CMD...
    A UDP socket SRC:SPORT connected to DST:DPORT: one datagram and its
    reply (if any, within 1 s), then CMD; prints how many datagrams it
    received within SECONDS after CMD.

fakevm.py optprobe DST DPORT OPTHEX
    One UDP datagram to DST:DPORT carrying the IP option OPTHEX (e.g.
    94040000, router alert; "" for none); prints "reply" or "timeout".

fakevm.py udpmany DST DPORT N
    N UDP datagrams to DST:DPORT from N sockets (N source ports, so N
    conntrack entries), sent one every 20 ms; prints how many were answered
    within 2 s of the last.

fakevm.py serve LOG MAXSECONDS ADDR PORT...
    A stand-in for the egress broker on a gateway address: on each PORT a
    TCP listener that answers "gw ADDR PORT" and a UDP one that answers a
    DNS-shaped datagram with NXDOMAIN (else "gw ADDR PORT"); every hit is
    appended to LOG as "tcp|udp ADDR:PORT PEER".  Exits after MAXSECONDS.
"""
import ctypes
import errno
import fcntl
import os
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
ETH_P_ARP = 0x0806


def tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


PROTOS = {1: "icmp", 6: "tcp", 17: "udp"}


def wire_line(way, f):
    """One wire-log line for an Ethernet frame, or None (not IPv4)."""
    if len(f) < 34 or f[12:14] != b"\x08\x00":
        return None
    l4 = f[14 + (f[14] & 15) * 4:]
    proto = f[23]
    if proto in (6, 17) and len(l4) >= 4:
        x = str(struct.unpack("!H", l4[2:4])[0])
    elif proto == 1 and l4:
        x = str(l4[0])
    else:
        x = "-"
    return "%s %s %s %s %s\n" % (way, PROTOS.get(proto, proto), socket.inet_ntoa(f[26:30]),
                                  socket.inet_ntoa(f[30:34]), x)


def relay(name, guest, maxs, wirelog=None):
    wire = open(wirelog, "a", buffering=1) if wirelog else None
    host_fd = tap(name)                   # attached in the host netns
    libc = ctypes.CDLL(None, use_errno=True)
    nsfd = os.open("/run/netns/" + guest, os.O_RDONLY | os.O_CLOEXEC)
    if libc.setns(nsfd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns " + guest)
    guest_fd = tap("eth0")                # created in the guest netns
    peer = {host_fd: guest_fd, guest_fd: host_fd}
    end = time.monotonic() + maxs
    while time.monotonic() < end:
        r, _, _ = select.select([host_fd, guest_fd], [], [], 0.5)
        for fd in r:
            try:
                f = os.read(fd, 65536)
                os.write(peer[fd], f)
            except OSError:
                continue  # no carrier yet, or a frame the other side refused
            line = wire and wire_line("out" if fd == guest_fd else "in", f)
            if line:
                wire.write(line)


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def arp(iface, ethsrc, sha, spa, tpa):
    frame = (b"\xff" * 6 + mac(ethsrc) + struct.pack("!H", ETH_P_ARP)
             + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
             + mac(sha) + socket.inet_aton(spa) + b"\0" * 6 + socket.inet_aton(tpa))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    s.send(frame)
    s.close()


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def icmperr(dst, isrc, isport, idst, idport, itype=3, icode=3, mtu=0, iproto=socket.IPPROTO_UDP):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 1, 0, 64, int(iproto), 0,
                     socket.inet_aton(isrc), socket.inet_aton(idst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    body = struct.pack("!BBHI", int(itype), int(icode), 0, int(mtu)) + ip + struct.pack("!HHHH", int(isport), int(idport), 8, 0)
    body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.sendto(body, (dst, 0))


def tcpraw(src, dst, dport, flags):
    tcp = struct.pack("!HHIIBBHHH", 40000, int(dport), 1, 0, 5 << 4, int(flags, 0), 1024, 0, 0)
    ph = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", csum(ph + tcp)) + tcp[18:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    s.sendto(tcp, (dst, 0))


def ipudp(src, dst, dport, payload, sport=40001):
    udp = struct.pack("!HHHH", int(sport), int(dport), 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    return ip[:10] + struct.pack("!H", csum(ip)) + ip[12:] + udp


def vxlan_payload(vni, dmac, isrc, idst, idport):
    frame = (mac(dmac) + mac("02:00:00:00:00:01") + struct.pack("!H", 0x0800)
             + ipudp(isrc, idst, idport, b"vx!\n"))
    return struct.pack("!II", 0x08000000, int(vni) << 8) + frame


def vxlan(dst, vni, dmac, isrc, idst, idport):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(vxlan_payload(vni, dmac, isrc, idst, idport), (dst, 4789))


def udpraw(iface, ethsrc, ethdst, src, dst, dport, *vx):
    payload = vxlan_payload(*vx) if vx else b"raw!\n"
    src, _, sport = src.partition(":")
    frame = (mac(ethdst) + mac(ethsrc) + struct.pack("!H", 0x0800)
             + ipudp(src, dst, dport, payload, sport or 40001))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((iface, 0))
    s.send(frame)
    s.close()


def sniff(iface, secs):
    # Every protocol, so frames come before the interface's tc ingress
    # hook (a socket bound to IPv4 alone sees them after it, and then
    # not those the tap's tc filter drops); IPv4 frames received only.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    s.bind((iface, 0))
    s.settimeout(0.2)
    end = time.monotonic() + float(secs)
    while time.monotonic() < end:
        try:
            f, a = s.recvfrom(2048)
        except socket.timeout:
            continue
        if a[2] == socket.PACKET_OUTGOING or f[12:14] != b"\x08\x00" or len(f) < 34:
            continue
        print(socket.inet_ntoa(f[26:30]), socket.inet_ntoa(f[30:34]), f[23], flush=True)


def udpprobe(src, sport, dst, dport, cmd):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, int(sport)))
    s.connect((dst, int(dport)))
    s.settimeout(2)
    try:
        s.send(b"1")
        s.recv(100)
        if cmd:
            subprocess.run(cmd, check=False)
            time.sleep(0.5)
        s.send(b"2")
        s.recv(100)
        print("reply")
    except ConnectionRefusedError:
        print("refused")
    except socket.timeout:
        print("timeout")


def udprecv(src, sport, dst, dport, secs, cmd):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, int(sport)))
    s.connect((dst, int(dport)))
    # One exchange first: a reply caches its route on the socket, which
    # early demux then uses for whatever matches it (no rp_filter).
    s.settimeout(1)
    s.send(b"1")
    try:
        s.recv(2048)
    except (socket.timeout, ConnectionRefusedError):
        pass
    subprocess.run(cmd, check=False)
    end = time.monotonic() + float(secs)
    n = 0
    while time.monotonic() < end:
        s.settimeout(max(end - time.monotonic(), 0.01))
        try:
            s.recv(2048)
            n += 1
        except socket.timeout:
            break
        except ConnectionRefusedError:
            pass
    print(n)


def optprobe(dst, dport, opt):
    """UDP "x" to DST:DPORT, with the IP option OPT (hex; "" for none):
    prints "reply" or "timeout"."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if opt:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_OPTIONS, bytes.fromhex(opt))
    s.settimeout(2)
    s.sendto(b"x", (dst, int(dport)))
    try:
        s.recv(100)
        print("reply")
    except socket.timeout:
        print("timeout")


def udpmany(dst, dport, n):
    socks = []
    for _ in range(int(n)):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.sendto(b"x", (dst, int(dport)))
        socks.append(s)
        time.sleep(0.02)
    got, end = set(), time.time() + 2
    while time.time() < end and len(got) < len(socks):
        r, _, _ = select.select([s for s in socks if s not in got], [], [], 0.2)
        for s in r:
            try:
                s.recv(100)
                got.add(s)
            except OSError:
                pass
    print(len(got))


UNREACH = (errno.EHOSTUNREACH, errno.ENETUNREACH)


def probe_sock(kind, addr, port, secs):
    """tcp: the handshake completes; udp: a datagram is answered."""
    s = socket.socket(socket.AF_INET, kind)
    s.settimeout(secs)
    try:
        s.connect((addr, int(port)))
        if kind == socket.SOCK_DGRAM:
            s.send(b"probe")
            s.recv(2048)
        return "answered"  # it got through
    except ConnectionRefusedError:
        return "refused"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        if e.errno in UNREACH:
            return "unreachable"
        raise
    finally:
        s.close()


def probe_tcp(addr, port, secs):
    return probe_sock(socket.SOCK_STREAM, addr, port, secs)


def probe_udp(addr, port, secs):
    return probe_sock(socket.SOCK_DGRAM, addr, port, secs)


def probe_icmp(addr, secs):
    ident = random.randrange(1, 0xFFFF)
    body = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"isopod-probe"
    body = body[:2] + struct.pack("!H", csum(body)) + body[4:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    end = time.monotonic() + secs
    try:
        try:
            s.sendto(body, (addr, 0))
        except OSError as e:
            if e.errno in UNREACH:
                return "unreachable"
            raise
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return "timeout"
            s.settimeout(left)
            try:
                p, src = s.recvfrom(2048)
            except socket.timeout:
                return "timeout"
            ic = p[(p[0] & 15) * 4:]
            if len(ic) < 8:
                continue
            if ic[0] == 0 and src[0] == addr and struct.unpack("!H", ic[4:6])[0] == ident:
                return "answered"
            if ic[0] == 3 and len(ic) >= 36:  # an error quoting our echo request
                q = ic[8 + (ic[8] & 15) * 4:]
                if len(q) >= 6 and q[0] == 8 and struct.unpack("!H", q[4:6])[0] == ident:
                    return "unreachable"
    finally:
        s.close()


def probe(secs, specs):
    out = {}

    def one(spec):
        p = spec.split(":")
        if p[0] == "tcp" and len(p) == 3:
            out[spec] = probe_tcp(p[1], p[2], secs)
        elif p[0] == "udp" and len(p) == 3:
            out[spec] = probe_udp(p[1], p[2], secs)
        elif p[0] == "icmp" and len(p) == 2:
            out[spec] = probe_icmp(p[1], secs)

    ts = [threading.Thread(target=one, args=(s,), daemon=True) for s in specs]
    for t in ts:
        t.start()
    for t in ts:
        t.join(secs + 2)
    for s in specs:
        print(s, out.get(s, "error"))
    if len(out) != len(specs):
        sys.exit("fakevm.py probe: some probes did not run (bad SPEC, or an error above)")


def serve(log, maxs, addr, ports):
    lock = threading.Lock()

    def note(proto, port, peer):
        with lock, open(log, "a") as f:
            f.write("%s %s:%d %s\n" % (proto, addr, port, peer))

    def tcp(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        s.listen(16)
        while True:
            c, peer = s.accept()
            note("tcp", port, peer[0])
            try:
                c.sendall(("gw %s %d\n" % (addr, port)).encode())
            except OSError:
                pass
            c.close()

    def udp(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, port))
        while True:
            data, peer = s.recvfrom(2048)
            note("udp", port, peer[0])
            if len(data) >= 12:  # DNS-shaped: NXDOMAIN to the same query
                s.sendto(data[:2] + bytes([data[2] | 0x80, (data[3] & 0xF0) | 3]) + data[4:], peer)
            else:
                s.sendto(("gw %s %d" % (addr, port)).encode(), peer)

    for p in ports:
        for fn in (tcp, udp):
            threading.Thread(target=fn, args=(p,), daemon=True).start()
    time.sleep(maxs)


def main():
    a = sys.argv[1:]
    if a[:1] == ["arp"] and len(a) == 6:
        arp(*a[1:])
    elif a[:1] == ["icmperr"] and len(a) in (6, 9, 10):
        icmperr(*a[1:])
    elif a[:1] == ["tcpraw"] and len(a) == 5:
        tcpraw(*a[1:])
    elif a[:1] == ["vxlan"] and len(a) == 7:
        vxlan(*a[1:])
    elif a[:1] == ["udpraw"] and len(a) in (7, 12):
        udpraw(*a[1:])
    elif a[:1] == ["sniff"] and len(a) == 3:
        sniff(*a[1:])
    elif a[:1] == ["udpprobe"] and len(a) >= 5:
        udpprobe(*a[1:5], a[5:])
    elif a[:1] == ["udprecv"] and len(a) >= 7:
        udprecv(*a[1:6], a[6:])
    elif a[:1] == ["udpmany"] and len(a) == 4:
        udpmany(*a[1:])
    elif a[:1] == ["optprobe"] and len(a) == 4:
        optprobe(*a[1:])
    elif a[:1] == ["probe"] and len(a) >= 3:
        probe(float(a[1]), a[2:])
    elif a[:1] == ["serve"] and len(a) >= 5:
        serve(a[1], float(a[2]), a[3], [int(p) for p in a[4:]])
    elif len(a) in (3, 4):
        relay(a[0], a[1], float(a[2]), *a[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
