#!/usr/bin/env python3
"""bench/steps.py [--cold] [-n N] - a run's host steps, from perf trace.

N runs (default 5) of `sh/isopod run [--cold] --json-only --mem-mib 256 --
true` in the store of ISOPOD_HOME (ISOPOD_NET=none), each under `perf trace
-e execve,exit_group,connect,fsync` from the repository's root; prints, in
ms, the median (min-max) of each step between the tools' execs and exits:
the front end, isopod-claim, isopod-boot, isopod-supervise and its jail up
to QEMU's exec, QEMU's exec to boot's exit (a cold boot: the guest's whole
boot to the agent's HELLO_ACK; a resume: QMP, the migration, the first
HELLO), the exec's connect to its QMP connect (the command in the guest),
the stop, isopod-result.  What happens inside the guest needs the guest's
own clock (doc/SPEED.md, goal 1's fifth round).  Timing only: nothing is
asserted.  Run it under the VM lock.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

LINE = re.compile(r"\s*([\d.]+) \(.*?\): (\S+)/(\d+) (\w+)\(")


def events(path):
    ev = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            # a syscall's second half, or a failed execve (PATH's misses)
            if not m or "continued" in line or "= -1" in line:
                continue
            ev.append((float(m.group(1)), int(m.group(3)), m.group(4)))
    return sorted(ev)


def steps(ev, cold):
    ex = [e for e in ev if e[2] == "execve"]
    if len(ex) < 7:
        raise ValueError("%d execs, not 7" % len(ex))
    claim, run, boot, sup, qemu, exe, res = ex[:7]

    def gone(pid, after=0.0):
        return next(e[0] for e in ev if e[1] == pid and e[2] == "exit_group" and e[0] > after)

    conn = [e[0] for e in ev if e[1] == exe[1] and e[2] == "connect"]
    t_boot, t_qemu = gone(boot[1]), gone(qemu[1])
    t_sup, t_exec, t_res = gone(sup[1]), gone(exe[1]), gone(res[1], res[0])
    return [
        ("front end to isopod-claim's exec", claim[0]),
        ("isopod-claim to isopod-run's exec", run[0] - claim[0]),
        ("isopod-run to isopod-boot's exec", boot[0] - run[0]),
        ("isopod-boot to isopod-supervise's exec", sup[0] - boot[0]),
        ("supervise and the jail to QEMU's exec", qemu[0] - sup[0]),
        ("QEMU's exec to isopod-boot's exit (" + ("the guest's boot" if cold else "the resume")
         + " to HELLO_ACK)", t_boot - qemu[0]),
        ("isopod-boot's exit to isopod-exec's connect", conn[0] - t_boot),
        ("isopod-exec's connect to its QMP connect (the command)", conn[-1] - conn[0]),
        ("QMP connect to QEMU's exit", t_qemu - conn[-1]),
        ("QEMU's exit to the supervisor's", t_sup - t_qemu),
        ("the supervisor's exit to isopod-exec's", t_exec - t_sup),
        ("isopod-exec's exit to isopod-result's (the JSON out)", t_res - t_exec),
        ("total", t_res),
    ]


def main(argv):
    cold = "--cold" in argv
    n = int(argv[argv.index("-n") + 1]) if "-n" in argv else 5
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    env = dict(os.environ, ISOPOD_NET="none")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace")
        for _ in range(n):
            cmd = ["perf", "trace", "-f", "-o", out, "-e", "execve,exit_group,connect,fsync",
                   "--", "sh/isopod", "run"] + (["--cold"] if cold else []) + \
                  ["--json-only", "--mem-mib", "256", "--", "true"]
            subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, check=True)
            ev = events(out)
            try:
                rows.append(steps(ev, cold))
            except (ValueError, IndexError, StopIteration) as e:
                print("bench/steps: a run's trace not understood (%s): %s" % (e, [x for x in ev if x[2] == "execve"]), file=sys.stderr)
    if not rows:
        return 1
    for i, (name, _) in enumerate(rows[0]):
        v = [r[i][1] for r in rows]
        print("%7.1f  (%6.1f-%6.1f)  %s" % (statistics.median(v), min(v), max(v), name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
