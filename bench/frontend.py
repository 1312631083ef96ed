#!/usr/bin/env python3
"""bench/frontend.py TRACE - the front end's own cost in one `isopod run`.

TRACE is what `strace -f -q -ttt -e trace=execve,fork,vfork,clone,clone3
-e signal=none -o TRACE sh/isopod run ...` wrote.  The front end is the
traced process; its tools are the processes that exec an isopod-* program
(isopod-gc excepted: `--auto` runs beside the run, in the background) and
descend from no other tool.  The front end's own cost is the run's wall
time (the front end's exec to its exit) less the union of the tools'
lifetimes (each one's exec to its exit): its shell, jq, mktemp and the
forks that start the tools.  Prints one JSON line: {"wall_ms", "tools_ms",
"front_ms", "tools": {name: ms}, "gaps": [[label, ms]...], "spawns": N}:
gaps the front end's own time before, between and after its tools, in
order ("start>isopod-boot", ..., "isopod-result>exit"), spawns the
processes it forked itself (isopod-gc's included).  Used by bench/run and
bench/compare; doc/SPEED.md's breakdown is the gaps' medians.
"""
import json
import os
import re
import sys

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(execve|fork|vfork|clone|clone3)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. (execve|fork|vfork|clone|clone3) resumed>(.*)$")
RET = re.compile(r"\)\s+=\s+(-?\d+)")


def main():
    parent, path, execd, exited, pending = {}, {}, {}, {}, {}
    first = None
    for raw in open(sys.argv[1], encoding="utf-8", errors="replace"):
        m = LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, ts, rest = int(m.group(1)), float(m.group(2)), m.group(3)
        if first is None:
            first = (pid, ts)
        if rest.startswith("+++ exited") or rest.startswith("+++ killed"):
            exited[pid] = ts
            continue
        c = CALL.match(rest)
        r = RESUMED.match(rest)
        if c:
            name, tail = c.group(1), c.group(2)
            if name == "execve":
                q = re.match(r'"((?:[^"\\]|\\.)*)"', tail)
                pending[pid] = (q.group(1) if q else "", ts)
            if rest.endswith("<unfinished ...>"):
                continue
        elif r:
            name, tail = r.group(1), r.group(2)
        else:
            continue
        ret = RET.search(tail)
        if not ret:
            continue
        v = int(ret.group(1))
        if name == "execve":
            p, t = pending.pop(pid, ("", ts))
            if v == 0:
                path[pid], execd[pid] = p, t
        elif v > 0:
            parent[v] = pid
    if first is None:
        sys.exit("bench/frontend.py: %s: no trace" % sys.argv[1])
    front, t0 = first
    t1 = exited.get(front)
    if t1 is None:
        sys.exit("bench/frontend.py: the front end's exit is not in the trace")

    def tool(pid):
        b = os.path.basename(path.get(pid, ""))
        return b if b.startswith("isopod-") else None

    spans, per = [], {}
    for pid in execd:
        name = tool(pid)
        if not name or name == "isopod-gc" or pid == front:
            continue
        a, nested = parent.get(pid), False
        while a is not None and a != front:
            if tool(a):
                nested = True
                break
            a = parent.get(a)
        if nested:
            continue
        s, e = max(execd[pid], t0), min(exited.get(pid, t1), t1)
        if e > s:
            spans.append((s, e, name))
            per[name] = per.get(name, 0) + (e - s) * 1000
    busy, end, gaps, last = 0.0, None, [], "start"
    for s, e, name in sorted(spans):
        if end is None or s > end:
            gaps.append(["%s>%s" % (last, name), round((s - (t0 if end is None else end)) * 1000, 1)])
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
        last = name
    gaps.append(["%s>exit" % last, round((t1 - (t0 if end is None else end)) * 1000, 1)])
    wall = (t1 - t0) * 1000
    print(json.dumps({"wall_ms": round(wall, 1), "tools_ms": round(busy * 1000, 1),
                      "front_ms": round(wall - busy * 1000, 1),
                      "tools": {k: round(v, 1) for k, v in sorted(per.items())},
                      "gaps": gaps, "spawns": sum(1 for c in parent.values() if c == front)}))


if __name__ == "__main__":
    main()
