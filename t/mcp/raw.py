#!/usr/bin/env python3
"""t/mcp/raw.py - talk to isopod-mcp byte by byte, for what an SDK never
sends (garbage, batches, oversized lines), in t/90-mcp.bats.

  raw.py [--want N] [--timeout S] [--close-after-s S] -- SERVER [ARGS...] < LINES

Each line of stdin is sent as it is, except `@BIG:N` (a line of N bytes of
'x' in a JSON string, streamed in chunks), `@NUL:REST` (a NUL byte, then
REST), `@SLEEP:S`, `@WAIT:N` (read until N messages with an "id" came,
at most the timeout) and `@SH:COMMAND` (run with sh -c; its failure
fails the run).  Reads the
server's stdout until N messages with an "id" arrived (or the timeout),
then closes the server's stdin and waits for it to exit.  Prints one JSON
object: {"messages": [every line the server wrote, parsed; a line that is
not JSON fails the run], "rc": exit status, "exit_ms": ms from the close to
the exit}."""
import json
import os
import select
import subprocess
import sys
import time


def main():
    a = sys.argv[1:]
    want, timeout, close_after = 0, 60.0, None
    while a and a[0] != '--':
        if a[0] == '--want':
            want = int(a[1])
        elif a[0] == '--timeout':
            timeout = float(a[1])
        elif a[0] == '--close-after-s':
            close_after = float(a[1])
        a = a[2:]
    cmd = a[1:]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out = b''
    msgs = []

    def pump(wait):
        nonlocal out
        r, _, _ = select.select([p.stdout], [], [], wait)
        if r:
            chunk = os.read(p.stdout.fileno(), 1 << 20)
            if not chunk:
                return False
            out += chunk
            while b'\n' in out:
                line, out = out.split(b'\n', 1)
                msgs.append(json.loads(line))  # not JSON: the test fails here
        return True

    for line in sys.stdin.read().splitlines():
        if line.startswith('@BIG:'):
            n = int(line[5:])
            p.stdin.write(b'{"jsonrpc":"2.0","id":"big","method":"ping","params":{"x":"')
            chunk = b'x' * (1 << 20)
            left = n
            while left > 0:
                k = min(left, len(chunk))
                p.stdin.write(chunk[:k])
                left -= k
                pump(0)
            p.stdin.write(b'"}}\n')
        elif line.startswith('@NUL:'):
            p.stdin.write(b'\0' + line[5:].encode() + b'\n')
        elif line.startswith('@SLEEP:'):
            p.stdin.flush()
            end = time.time() + float(line[7:])
            while time.time() < end:
                pump(0.05)
        elif line.startswith('@WAIT:'):
            p.stdin.flush()
            end = time.time() + timeout
            while time.time() < end and sum(1 for m in msgs if 'id' in m) < int(line[6:]):
                if not pump(0.1):
                    break
        elif line.startswith('@SH:'):
            subprocess.run(['sh', '-c', line[4:]], check=True)
        else:
            p.stdin.write(line.encode() + b'\n')
        p.stdin.flush()
    end = time.time() + timeout
    while time.time() < end and sum(1 for m in msgs if 'id' in m) < want:
        if not pump(0.1):
            break
    if close_after:
        end = time.time() + close_after
        while time.time() < end:
            pump(0.05)
    t0 = time.time()
    p.stdin.close()
    while pump(0.1):
        if time.time() - t0 > timeout:
            p.kill()
            break
    rc = p.wait()
    print(json.dumps({'messages': msgs, 'rc': rc, 'exit_ms': int((time.time() - t0) * 1000)}))


main()
