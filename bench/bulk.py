#!/usr/bin/env python3
"""bench/bulk.py ADDR PORT - an HTTP/1.0 server for the broker benchmark.

GET /mib/N answers N MiB of zeros (N <= 1024); anything else a short body.
One thread per connection; runs until killed (bench/broker kills it by pid).
"""
import socket
import sys
import threading

CHUNK = b"\0" * (1 << 20)


def serve(c):
    try:
        c.settimeout(30)
        req = b""
        while b"\r\n\r\n" not in req and len(req) < 16384:
            d = c.recv(4096)
            if not d:
                return
            req += d
        parts = req.split(b" ", 2)
        path = parts[1] if len(parts) > 1 else b"/"
        n = 0
        if path.startswith(b"/mib/"):
            try:
                n = max(0, min(1024, int(path[5:])))
            except ValueError:
                n = 0
        if n:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % (n << 20))
            for _ in range(n):
                c.sendall(CHUNK)
        else:
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
    except OSError:
        pass
    finally:
        c.close()


def main():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


if __name__ == "__main__":
    main()
