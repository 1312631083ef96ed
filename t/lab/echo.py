#!/usr/bin/env python3
"""t/lab/echo.py ADDR PORT [SECONDS] - an echo service for the broker's tunnels.

Each connection gets back what it sends and, after the sender's FIN, the
sha256 of it all as one hex line, then the end (so a tunnel's ledger line
must say up = N, down = N + 65).  A thread per connection; exits after
SECONDS (default 90).  Used by t/45-broker.bats and bench/broker.
"""
import hashlib
import socket
import sys
import threading
import time


def echo(c):
    c.settimeout(60)
    h = hashlib.sha256()
    try:
        while True:
            k = c.recv(65536)
            if not k:
                break
            h.update(k)
            c.sendall(k)
        c.sendall(h.hexdigest().encode() + b"\n")
    except OSError:
        pass
    c.close()


def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen(512)
    s.settimeout(1)
    end = time.time() + (float(sys.argv[3]) if len(sys.argv) > 3 else 90)
    while time.time() < end:
        try:
            c, _ = s.accept()
        except socket.timeout:
            continue
        threading.Thread(target=echo, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
