#!/usr/bin/env python3
"""bench/ttfb.py N DIRECT PROXY... - first byte of a tiny GET, directly and through CONNECT.

DIRECT: ADDR:PORT of bench/bulk.py; each PROXY: ADDR:PORT of a broker whose
allowlist has pkg.test at that port.  N rounds, each one connection to
DIRECT then one tunnel per PROXY (one process throughout, so no client's
start-up is timed: curl's, at this machine's load, varies by milliseconds).
Prints one JSON object: per PROXY, in ms, the median time from connect()
to the first byte of the answer, its parts (connect to the broker, setup:
the CONNECT to its 200 line, which holds the broker's DNS query and its
connect; first: the GET to its first byte) and added: the median of each
round's tunnel minus that round's direct time, with its min and max.
Times in ms to the microsecond but added, unrounded: it is compared with
the goal (bench/broker's table, bench/verdict.jq).
"""
import json
import socket
import statistics
import sys
import time

GET = b"GET / HTTP/1.0\r\nHost: pkg.test\r\n\r\n"


def addr(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def first_byte(s, t0):
    s.sendall(GET)
    if not s.recv(1):
        raise OSError("no answer")
    return time.perf_counter() - t0


def direct(a):
    t0 = time.perf_counter()
    with socket.create_connection(a, 5) as s:
        return {"total": first_byte(s, t0)}


def tunnel(a, port):
    t0 = time.perf_counter()
    with socket.create_connection(a, 5) as s:
        t1 = time.perf_counter()
        s.sendall(b"CONNECT pkg.test:%d HTTP/1.1\r\nHost: pkg.test:%d\r\n\r\n" % (port, port))
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            k = s.recv(4096)
            if not k:
                raise OSError("no answer to CONNECT")
            head += k
        if not head.startswith(b"HTTP/1.1 200"):
            raise OSError(head.decode(errors="replace"))
        t2 = time.perf_counter()
        return {"connect": t1 - t0, "setup": t2 - t1, "first": first_byte(s, t2),
                "total": time.perf_counter() - t0}


def ms(x):
    return round(x * 1e3, 3)


def main():
    n, d = int(sys.argv[1]), addr(sys.argv[2])
    proxies = [addr(p) for p in sys.argv[3:]]
    rounds = []
    for _ in range(n):
        rounds.append((direct(d), [tunnel(p, d[1]) for p in proxies]))
        time.sleep(0.005)
    med = statistics.median
    out = {"rounds": n, "direct_ms": ms(med(r[0]["total"] for r in rounds))}
    for i, p in enumerate(sys.argv[3:]):
        added = [r[1][i]["total"] - r[0]["total"] for r in rounds]
        out[p] = {k: ms(med(r[1][i][k] for r in rounds)) for k in ("total", "connect", "setup", "first")}
        out[p].update(added=med(added) * 1e3, added_min=ms(min(added)), added_max=ms(max(added)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
