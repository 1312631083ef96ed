#!/usr/bin/env python3
"""t/lab/serve.py - live listeners of the sealed test world (t/lab/lab.sh).

serve.py LOG ADDR...: for each ADDR, a TCP server on port 80 that answers any
request with an HTTP 200 whose body is "lab ADDR", and a UDP echo on port 7
that answers "lab ADDR <data>" (a DNS-shaped datagram gets NXDOMAIN).  Every hit is appended to LOG as
"tcp|udp ADDR PEER" so a test can prove a blocked probe never arrived.
Bound to the given addresses only; runs until killed.
Also "icmp DST PEER" for every ICMP echo request delivered to any address of
this network namespace (the kernel answers it; a raw socket sees it after
the firewall's input hooks), so a blocked ping is proven the same way: run
one serve.py per namespace.
"""
import socket
import sys
import threading

log_lock = threading.Lock()


def note(log, proto, addr, peer):
    with log_lock, open(log, "a") as f:
        f.write("%s %s %s\n" % (proto, addr, peer))


def tcp(log, addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 80))
    s.listen(64)
    while True:
        c, peer = s.accept()
        note(log, "tcp", addr, peer[0])
        c.settimeout(2)
        try:
            req = b""
            while b"\r\n\r\n" not in req and b"\n\n" not in req and len(req) < 8192:
                chunk = c.recv(4096)
                if not chunk:
                    break
                req += chunk
        except OSError:
            pass
        body = ("lab %s\n" % addr).encode()
        try:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        c.close()


def udp(log, addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, 7))
    while True:
        data, peer = s.recvfrom(2048)
        note(log, "udp", addr, peer[0])
        if len(data) >= 12:
            # Looks like DNS (busybox nslookup -port=7 is the guest's UDP
            # probe): answer NXDOMAIN to the same query, so the prober can
            # tell "answered" from "timed out".
            s.sendto(data[:2] + bytes([data[2] | 0x80, (data[3] & 0xF0) | 3]) + data[4:], peer)
        else:
            s.sendto(("lab %s " % addr).encode() + data, peer)


def icmp(log):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    while True:
        p, peer = s.recvfrom(2048)
        ihl = (p[0] & 15) * 4
        if len(p) > ihl and p[ihl] == 8:  # echo request
            note(log, "icmp", socket.inet_ntoa(p[16:20]), peer[0])


def main():
    log, addrs = sys.argv[1], sys.argv[2:]
    ts = []
    for a in addrs:
        for fn in (tcp, udp):
            t = threading.Thread(target=fn, args=(log, a), daemon=True)
            t.start()
            ts.append(t)
    t = threading.Thread(target=icmp, args=(log,), daemon=True)
    t.start()
    ts.append(t)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for t in ts:
        t.join()


if __name__ == "__main__":
    main()
