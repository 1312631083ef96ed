#!/usr/bin/env python3
"""bench/frontend.py - the front end's own cost in one `isopod run`.

    bench/frontend.py TRACE
    bench/frontend.py --run perf|strace|auto OUT -- COMMAND...

TRACE is a trace of one run, from either tracer (a perf.data file is told
by its magic):

- perf (the goal's figure): `perf record -q -o TRACE -e
  sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit
  -- COMMAND`.  Tracepoints written to a ring buffer: the traced processes
  are never stopped, so the gaps between tools are the gaps an untraced run
  has, give or take the tracepoints' own cost.
- strace: `strace -f -q -ttt --seccomp-bpf -e
  trace=execve,fork,vfork,clone,clone3 -e signal=none -o TRACE COMMAND`.
  strace stops every traced process at each fork, exec and exit until it
  has been told; each of those inflates the gap it falls in, so its
  figure is an upper bound, kept beside perf's so nothing is hidden.

--run traces COMMAND itself (its stdout to OUT, its stderr passed on) and
prints the same JSON; auto is perf when `perf record` of the sched
tracepoints works here (perf installed, root or a low enough
perf_event_paranoid) and strace otherwise, with "tracer_note" saying why.
A failing COMMAND fails this, status 1.

The front end is the traced process; its tools are the processes that exec
an isopod-* program (isopod-gc excepted: `--auto` runs beside the run, in
the background) and descend from no other tool.  The front end's own pid
may exec one too: isopod-run (sh/isopod's driver of the claimed run) is the
front end, its time the front end's; a tool the front end's pid execs after
it (isopod-result, exec'd last) is a tool from its exec to the exit, as it
was when the shell forked it.  The front end's own cost
is the run's wall time (the front end's exec to its exit) less the union
of the tools' lifetimes (each one's exec to its exit): its shell and the
forks that start the tools.  Prints one JSON line: {"tracer", "wall_ms",
"tools_ms", "front_ms", "tools": {name: ms}, "gaps": [[label, ms]...],
"spawns": N}, each time in ms to 0.1 but front_ms, unrounded (goal 3's
figure, which bench/run compares with the goal: bench/verdict.jq): gaps
the front end's own time before, between and after its
tools, in order ("start>isopod-boot", ..., "isopod-result>exit"), spawns
the processes (and threads) it forked itself.  Used by bench/run and
bench/compare; doc/SPEED.md's breakdown is the gaps' medians.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
CALL = re.compile(r"^(execve|fork|vfork|clone|clone3)\((.*)$")
RESUMED = re.compile(r"^<\.\.\. (execve|fork|vfork|clone|clone3) resumed>(.*)$")
RET = re.compile(r"\)\s+=\s+(-?\d+)")
PERF_LINE = re.compile(r"^\s*(\d+)/(\d+)\s+(\d+\.\d+):\s+sched:sched_process_(fork|exec|exit):\s*(.*)$")
PERF_EVENTS = "sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit"


class Trace:
    """What either tracer saw: the front end's pid, its exec time, each
    process's parent, exec'd path, exec and exit times (seconds)."""

    def __init__(self):
        self.front, self.t0 = None, None
        self.parent, self.path, self.execd, self.exited = {}, {}, {}, {}
        self.front_execs = []  # (time, path) of each exec by the front end's pid

    def exec_(self, pid, ts, path):
        if self.front is None:
            self.front, self.t0 = pid, ts
        if pid == self.front:
            self.front_execs.append((ts, path))
        self.path[pid], self.execd[pid] = path, ts


def read_strace(name):
    tr, pending = Trace(), {}
    for raw in open(name, encoding="utf-8", errors="replace"):
        m = LINE.match(raw.rstrip("\n"))
        if not m:
            continue
        pid, ts, rest = int(m.group(1)), float(m.group(2)), m.group(3)
        if tr.front is None:
            # strace's first line is the front end's execve.
            tr.front, tr.t0 = pid, ts
        if rest.startswith("+++ exited") or rest.startswith("+++ killed"):
            tr.exited[pid] = ts
            continue
        c = CALL.match(rest)
        r = RESUMED.match(rest)
        if c:
            call, tail = c.group(1), c.group(2)
            if call == "execve":
                q = re.match(r'"((?:[^"\\]|\\.)*)"', tail)
                pending[pid] = (q.group(1) if q else "", ts)
            if rest.endswith("<unfinished ...>"):
                continue
        elif r:
            call, tail = r.group(1), r.group(2)
        else:
            continue
        ret = RET.search(tail)
        if not ret:
            continue
        v = int(ret.group(1))
        if call == "execve":
            p, t = pending.pop(pid, ("", ts))
            if v == 0:
                tr.exec_(pid, t, p)
        elif v > 0:
            tr.parent[v] = pid
    return tr


def read_perf(name):
    out = subprocess.run(["perf", "script", "-i", name, "--ns", "-F", "trace:pid,tid,time,event,trace"],
                         check=True, capture_output=True, text=True).stdout
    tr = Trace()
    for raw in out.splitlines():
        m = PERF_LINE.match(raw)
        if not m:
            continue
        pid, tid, ts, ev = int(m.group(1)), int(m.group(2)), float(m.group(3)), m.group(4)
        f = dict(re.findall(r"(\w+)=(\S*)", m.group(5)))
        if ev == "exec":
            tr.exec_(pid, ts, f.get("filename", ""))
        elif ev == "fork":
            tr.parent[int(f["child_pid"])] = pid
        elif f.get("group_dead", "true" if pid == tid else "false") == "true":
            # A process has exited when its last thread has (the field is
            # in kernels from 5.x; without it, its leader's exit).
            tr.exited[pid] = ts
    return tr


def cost(tr, name):
    if tr.front is None:
        sys.exit("bench/frontend.py: %s: no trace" % name)
    front, t0 = tr.front, tr.t0
    t1 = tr.exited.get(front)
    if t1 is None:
        sys.exit("bench/frontend.py: the front end's exit is not in the trace")

    def tool(pid):
        b = os.path.basename(tr.path.get(pid, ""))
        return b if b.startswith("isopod-") else None

    spans, per = [], {}
    for pid in tr.execd:
        name = tool(pid)
        if not name or name == "isopod-gc" or pid == front:
            continue
        a, nested = tr.parent.get(pid), False
        while a is not None and a != front:
            if tool(a):
                nested = True
                break
            a = tr.parent.get(a)
        if nested:
            continue
        s, e = max(tr.execd[pid], t0), min(tr.exited.get(pid, t1), t1)
        if e > s:
            spans.append((s, e, name))
            per[name] = per.get(name, 0) + (e - s) * 1000
    for ts, path in tr.front_execs:
        name = os.path.basename(path)
        if name.startswith("isopod-") and name not in ("isopod-run", "isopod-gc") and t1 > ts:
            spans.append((ts, t1, name))
            per[name] = per.get(name, 0) + (t1 - ts) * 1000
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
    return {"wall_ms": round(wall, 1), "tools_ms": round(busy * 1000, 1),
            "front_ms": wall - busy * 1000,
            "tools": {k: round(v, 1) for k, v in sorted(per.items())},
            "gaps": gaps, "spawns": sum(1 for c in tr.parent.values() if c == front)}


def is_perf(name):
    with open(name, "rb") as f:
        return f.read(8) == b"PERFILE2"


def perf_usable(tmp):
    """Why perf cannot trace the sched tracepoints here, or None."""
    probe = os.path.join(tmp, "probe.data")
    try:
        p = subprocess.run(["perf", "record", "-q", "-o", probe, "-e", PERF_EVENTS, "--", "true"],
                           capture_output=True, text=True, check=False)
    except OSError as e:
        return "perf not found (%s)" % e.strerror
    if p.returncode != 0 or not read_perf(probe).execd:
        return "perf record of the sched tracepoints failed: %s" % (p.stderr.strip().splitlines() or ["?"])[-1]
    return None


def run(tracer, out, cmd):
    with tempfile.TemporaryDirectory(prefix="isopod-frontend.") as tmp:
        note = None
        if tracer == "auto":
            note = perf_usable(tmp)
            tracer = "strace" if note else "perf"
        trace = os.path.join(tmp, "trace")
        if tracer == "perf":
            argv = ["perf", "record", "-q", "-o", trace, "-e", PERF_EVENTS, "--"] + cmd
        else:
            argv = ["strace", "-f", "-q", "-ttt", "--seccomp-bpf", "-e", "trace=execve,fork,vfork,clone,clone3",
                    "-e", "signal=none", "-o", trace] + cmd
        with open(out, "wb") as o:
            st = subprocess.run(argv, stdout=o, check=False).returncode
        if st != 0:
            sys.exit("bench/frontend.py: %s under %s: status %d" % (" ".join(cmd), tracer, st))
        r = {"tracer": tracer}
        if note:
            r["tracer_note"] = note + "; strace's figure instead (an upper bound)"
        r.update(cost(read_perf(trace) if tracer == "perf" else read_strace(trace), trace))
        return r


def main():
    a = sys.argv[1:]
    if len(a) >= 4 and a[0] == "--run" and a[1] in ("perf", "strace", "auto") and a[3] == "--":
        r = run(a[1], a[2], a[4:])
    elif len(a) == 1:
        perf = is_perf(a[0])
        r = {"tracer": "perf" if perf else "strace"}
        r.update(cost(read_perf(a[0]) if perf else read_strace(a[0]), a[0]))
    else:
        sys.exit("usage: bench/frontend.py TRACE | --run perf|strace|auto OUT -- COMMAND...")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
