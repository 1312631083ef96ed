#!/usr/bin/env python3
"""t/lab/tunnels.py N PROXY PORT TARGET - N CONNECT tunnels at once.

Through the proxy at PROXY (ADDR:PORT) to TARGET (NAME:PORT, an echo
service: t/lab/echo.py), all from this one process, non-blocking: tunnel i
sends S_i = 16384 + 1021 i random bytes (the even ones right behind their
CONNECT head, before the 200: early data), reads the echo while it sends,
shuts its write side, and reads to the end; it must get the 200, its bytes
and their digest.  Prints one JSON line: {"ok": N, "failed": N, "seconds":
S, "expect": [[up, down], ...]} (each tunnel's byte counts as the broker's
ledger must have them, sorted); a failed tunnel is described on stderr.
Bounded: 60 s.  Used by t/45-broker.bats and bench/broker.
"""
import hashlib
import json
import random
import selectors
import socket
import sys
import time

EST = b"HTTP/1.1 200 Connection established\r\n\r\n"


class Tunnel:
    def __init__(self, i, proxy, head):
        self.payload = random.Random(i).randbytes(16384 + 1021 * i)
        self.want = EST + self.payload + hashlib.sha256(self.payload).hexdigest().encode() + b"\n"
        self.sent_payload = i % 2 == 0
        self.out = head + self.payload if self.sent_payload else head
        self.off, self.inb, self.shut, self.done, self.err = 0, bytearray(), False, False, None
        self.s = socket.socket()
        self.s.setblocking(False)
        self.s.connect_ex(proxy)

    def ok(self):
        return self.done and self.inb == self.want

    def on(self, ev):
        if ev & selectors.EVENT_WRITE and self.off < len(self.out):
            self.off += self.s.send(self.out[self.off:self.off + 262144])
        if ev & selectors.EVENT_READ:
            k = self.s.recv(262144)
            if not k:
                self.done = True
            self.inb += k
        if not self.sent_payload and self.inb.startswith(EST):
            self.out += self.payload
            self.sent_payload = True
        if self.sent_payload and self.off == len(self.out) and not self.shut:
            self.s.shutdown(socket.SHUT_WR)
            self.shut = True


def main():
    n = int(sys.argv[1])
    host, port = sys.argv[2].rsplit(":", 1)
    head = b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[3].encode(), sys.argv[3].encode())
    sel = selectors.DefaultSelector()
    t0 = time.monotonic()
    ts = [Tunnel(i, (host, int(port)), head) for i in range(n)]
    for t in ts:
        sel.register(t.s, selectors.EVENT_READ | selectors.EVENT_WRITE, t)
    left, end = n, time.monotonic() + 60
    while left and time.monotonic() < end:
        for key, ev in sel.select(1):
            t = key.data
            try:
                t.on(ev)
            except OSError as e:
                t.err, t.done = str(e), True
            if t.done:
                sel.unregister(t.s)
                t.s.close()
                left -= 1
            else:
                want_w = selectors.EVENT_WRITE if t.off < len(t.out) else 0
                sel.modify(t.s, selectors.EVENT_READ | want_w, t)
    secs = time.monotonic() - t0
    for i, t in enumerate(ts):
        if not t.ok():
            print("tunnel %d: done %s, error %s, got %d of %d bytes: %r"
                  % (i, t.done, t.err, len(t.inb), len(t.want), bytes(t.inb[:60])), file=sys.stderr)
    ok = sum(1 for t in ts if t.ok())
    print(json.dumps({"ok": ok, "failed": n - ok, "seconds": round(secs, 2),
                      "expect": sorted([len(t.payload), len(t.payload) + 65] for t in ts)}))


if __name__ == "__main__":
    main()
