#!/usr/bin/env python3
"""bench/qemumem.py PID GUEST_MIB - where one QEMU's PSS goes (issue 13 goal 7).

Reads /proc/PID/smaps.  The guest's RAM is the writable, not executable
mapping at least GUEST_MIB large (anonymous for a cold VM, the snapshot's
file mapped private for a resumed clone); TCG's translation buffer is the
anonymous rwx mapping; everything else is QEMU's own (heap, thread stacks,
its binary's and libraries' pages, which PSS divides among the processes
that map them).  Prints one JSON line of KiB: {"guest_pss", "tcg_pss",
"other_pss"}.  Used by bench/run.
"""
import json
import re
import sys

HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$")


def main():
    pid, guest_kib = int(sys.argv[1]), int(sys.argv[2]) * 1024
    out = {"guest_pss": 0, "tcg_pss": 0, "other_pss": 0}
    kind = "other_pss"
    with open("/proc/%d/smaps" % pid, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = HEAD.match(line)
            if m:
                size = (int(m.group(2), 16) - int(m.group(1), 16)) // 1024
                perm, name = m.group(3), m.group(4)
                if size >= guest_kib and perm.startswith("rw") and "x" not in perm:
                    kind = "guest_pss"
                elif perm == "rwxp" and not name:
                    kind = "tcg_pss"
                else:
                    kind = "other_pss"
            elif line.startswith("Pss:"):
                out[kind] += int(line.split()[1])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
