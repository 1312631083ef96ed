#!/usr/bin/env python3
"""bench/thp.py [PAIRS] - QEMU with and without transparent huge pages, A/B.

Issue 13 goal 7: this host's THP is `madvise` and QEMU madvises its guest
RAM and its TCG buffer MADV_HUGEPAGE.  This measures what
prctl(PR_SET_THP_DISABLE) costs and saves, from outside the code under
test: "nothp" runs the front end with the flag set (it is inherited across
fork and execve, so the supervisor's QEMU has it; the QEMU's own
/proc/PID/status THP_enabled line is read to show it did), "thp" without.
Since lib/qemu.c's qemu_nothp (the commit after 4ab0854) isopod sets the
flag itself on a TCG QEMU, so on such a tree both arms have THP off (their
thp_enabled says so): measure the tree before it, or a KVM host.

Per pair, the order alternating: a cold `isopod run -- true` (timed), a
warm one (timed), then a kept cold VM and a kept resumed VM, whose QEMU is
read (its PSS split by bench/qemumem.py, smaps_rollup's Rss, Pss and
AnonHugePages, /proc/PID/stat's minor faults and CPU time) and stopped.
Prints JSON lines to stdout, a summary of medians to stderr.  Run from the
source tree, under the bench lock: flock /work/vmtest.lock python3 bench/thp.py
"""
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PR_SET_THP_DISABLE = 41
LIBC = ctypes.CDLL(None, use_errno=True)


def nothp():
    if LIBC.prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
        os._exit(126)


def same():
    pass


def run(mode, args, env):
    t0 = time.monotonic()
    p = subprocess.run(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       preexec_fn=nothp if mode == "nothp" else same, check=True)
    return (time.monotonic() - t0) * 1000, json.loads(p.stdout)


def rollup(pid):
    out = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Rss", "Pss", "AnonHugePages"):
                out[k.lower()] = int(v.split()[0])
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("THP_enabled:"):
                out["thp_enabled"] = int(line.split()[1])
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    # fields 10 (minflt), 12 (majflt), 14 (utime), 15 (stime), from field 3 on
    out["minflt"], out["majflt"] = int(st[7]), int(st[9])
    out["cpu_ms"] = (int(st[11]) + int(st[12])) * 1000 // os.sysconf("SC_CLK_TCK")
    # the same to the microsecond, of the threads alive now (schedstat's
    # first field: ns on the CPU)
    ns = 0
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
            ns += int(f.read().split()[0])
    out["run_us"] = ns // 1000
    return out


def kept(mode, warm, env, home):
    e = dict(env, ISOPOD_WARM="1" if warm else "0")
    ms, r = run(mode, ["sh/isopod", "run", "--json-only", "--keep", "--mem-mib", "256", "--",
                       "true"], e)
    vm = r["vm"]["id"]
    with open(os.path.join(home, "vms", vm, "meta.json")) as f:
        meta = json.load(f)
    pid = meta["qemu_pid"]
    out = rollup(pid)
    out.update({k: v for k, v in meta.items() if k.endswith("_ms") and isinstance(v, int)})
    out.update(json.loads(subprocess.run(["python3", "bench/qemumem.py", str(pid), "256"],
                                         stdout=subprocess.PIPE, check=True).stdout))
    out["wall_ms"], out["path"] = round(ms), r.get("path")
    subprocess.run(["isopod-stop", "--vm", vm], env=env, stdout=subprocess.DEVNULL, check=True)
    return out


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    root = os.getcwd()
    home = tempfile.mkdtemp(prefix="isopod-thp.")
    env = dict(os.environ, PATH=root + "/bin:" + os.environ["PATH"], ISOPOD_HOME=home,
               ISOPOD_NET="none", ISOPOD_CONFIG="/dev/null", ISOPOD_SYSCONFIG="/dev/null")
    rows = []
    try:
        subprocess.run(["sh", "images/register", home], env=env, stdout=subprocess.DEVNULL,
                       check=True)
        # the warm snapshot, built once, outside the figures
        run("thp", ["sh/isopod", "run", "--json-only", "--mem-mib", "256", "--", "true"],
            dict(env, ISOPOD_WARM="1"))
        for i in range(pairs):
            for mode in (("thp", "nothp") if i % 2 == 0 else ("nothp", "thp")):
                row = {"pair": i, "mode": mode}
                for k, w in (("cold", "0"), ("warm", "1")):
                    ms, r = run(mode, ["sh/isopod", "run", "--json-only", "--mem-mib", "256",
                                       "--", "true"], dict(env, ISOPOD_WARM=w))
                    row[k + "_ms"] = round(ms)
                    row[k + "_path"] = r.get("path")
                row["coldvm"] = kept(mode, False, env, home)
                row["warmvm"] = kept(mode, True, env, home)
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        for d in os.listdir(os.path.join(home, "vms")) if os.path.isdir(
                os.path.join(home, "vms")) else []:
            subprocess.run(["isopod-stop", "--force", "--vm", d], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(home, ignore_errors=True)
    for mode in ("thp", "nothp"):
        rs = [r for r in rows if r["mode"] == mode]
        med = {k: statistics.median(r[k] for r in rs) for k in ("cold_ms", "warm_ms")}
        for vm in ("coldvm", "warmvm"):
            for k in ("pss", "rss", "anonhugepages", "guest_pss", "tcg_pss", "other_pss",
                      "minflt", "cpu_ms", "run_us", "wall_ms", "thp_enabled"):
                med[vm + "." + k] = statistics.median(r[vm][k] for r in rs)
        print(mode, json.dumps(med), file=sys.stderr)


if __name__ == "__main__":
    main()
