#!/usr/bin/env python3
"""bench/qemumem.py [--detail] PID GUEST_MIB - where one QEMU's PSS goes (issue 13 goal 7).

Reads /proc/PID/smaps.  The guest's RAM is the writable, not executable
mapping at least GUEST_MIB large (anonymous for a cold VM, the snapshot's
file mapped private for a resumed clone); TCG's translation buffer is the
anonymous rwx mapping; everything else is QEMU's own (heap, thread stacks,
its binary's and libraries' pages, which PSS divides among the processes
that map them).  Prints one JSON line of KiB: {"guest_pss", "tcg_pss",
"other_pss", "other_anon"}; other_anon is the part of other_pss that is
the process's own (anonymous: heap, arenas, stacks, the libraries' pages
written by relocation), the rest being file pages PSS divides among the
QEMUs that map them.  Used by bench/run.

--detail adds "detail": other_pss by kind -- heap, malloc arenas (the
64 MiB-aligned anonymous mappings of glibc's per-thread arenas), 8 MiB
thread stacks, 1 MiB coroutine stacks, other anonymous mappings, and per
file its PSS and its anonymous (relocated, written) part.
"""
import json
import re
import sys

HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")
ARENA = 64 << 20  # glibc's HEAP_MAX_SIZE on 64-bit hosts


def kind_of(start, size, perm, name, guest_kib):
    if size >= guest_kib and perm.startswith("rw") and "x" not in perm:
        return "guest"
    if perm == "rwxp" and not name:
        return "tcg"
    if name == "[heap]":
        return "heap"
    if name:
        return name
    if start % ARENA == 0:
        return "arena"
    if size == 8192:
        return "thread stack"
    if size == 1024:
        return "coroutine stack"
    return "anon"


def main():
    args = sys.argv[1:]
    detail = args[:1] == ["--detail"]
    if detail:
        args = args[1:]
    pid, guest_kib = int(args[0]), int(args[1]) * 1024
    out = {"guest_pss": 0, "tcg_pss": 0, "other_pss": 0, "other_anon": 0}
    det = {}
    kind = "other"
    with open("/proc/%d/smaps" % pid, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                start = int(m.group(1), 16)
                size = (int(m.group(2), 16) - start) // 1024
                kind = kind_of(start, size, m.group(3), m.group(4), guest_kib)
                if kind not in ("guest", "tcg"):
                    det.setdefault(kind, {"pss": 0, "anon": 0, "n": 0})["n"] += 1
            elif line.startswith("Pss:") or line.startswith("Anonymous:"):
                v = int(line.split()[1])
                if kind in ("guest", "tcg"):
                    if line.startswith("Pss:"):
                        out[kind + "_pss"] += v
                    continue
                f_ = "pss" if line.startswith("Pss:") else "anon"
                out["other_" + f_] += v
                det[kind][f_] += v
    if detail:
        out["detail"] = {k: v for k, v in sorted(det.items(), key=lambda kv: -kv[1]["pss"])
                         if v["pss"] >= 64}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
