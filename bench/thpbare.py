#!/usr/bin/env python3
"""bench/thpbare.py PAIRS - bench/run's bare QEMU boot, with and without THP.

The baseline of goal 1 (the same kernel, initramfs, disk and command line
as a cold VM of isopod's, read off one, QEMU started by hand and its agent
told to power off once the root is mounted), booted PAIRS times with
prctl(PR_SET_THP_DISABLE) set before exec ("nothp") and PAIRS times
without ("thp"), the order alternating.  For each: the wall time, and
from getrusage of the waited child its CPU time (user, system), minor
faults and peak RSS.  JSON lines on stdout, medians and paired
differences on stderr.  From the source tree, under the bench lock:
flock /work/vmtest.lock python3 bench/thpbare.py 30

With OLD_TREE=DIR (a built tree without lib/qemu.c's qemu_nothp) each
boot also has a cold `isopod run -- true` (cold_ms): DIR's in the "thp"
arm, this tree's in the "nothp" arm, bare first or cold first alternating
every two pairs -- goal 1's ratio with THP on both sides or off on both.
"""
import ctypes, json, os, subprocess, sys, tempfile, time, statistics as S, shutil
LIBC = ctypes.CDLL(None, use_errno=True)
def nothp():
    if LIBC.prctl(41, 1, 0, 0, 0) != 0: os._exit(126)
root = os.getcwd()
home = tempfile.mkdtemp(prefix="isopod-thpb.")
work = tempfile.mkdtemp(prefix="isopod-thpbw.")
env = dict(os.environ, PATH=root + "/bin:" + os.environ["PATH"], ISOPOD_HOME=home,
           ISOPOD_NET="none", ISOPOD_CONFIG="/dev/null", ISOPOD_SYSCONFIG="/dev/null", ISOPOD_WARM="0")
subprocess.run(["sh", "images/register", home], env=env, stdout=subprocess.DEVNULL, check=True)
r = json.loads(subprocess.run(["sh/isopod", "run", "--cold", "--keep", "--json-only", "--mem-mib", "256", "--", "true"],
                              env=env, stdout=subprocess.PIPE, check=True).stdout)
vm = r["vm"]["id"]
pid = json.load(open(f"{home}/vms/{vm}/meta.json"))["qemu_pid"]
av = open(f"/proc/{pid}/cmdline").read().split("\0")
subprocess.run(["isopod-stop", "--force", "--vm", vm], env=env, stdout=subprocess.DEVNULL)
opt = lambda o: av[av.index(o) + 1]
serial = next(a for a in av if a.startswith("virtio-serial-device"))
rootdev = next(a for a in av if a.startswith("virtio-blk-device,drive=root"))
append = " ".join(w for w in opt("-append").split() if w != "isopod.root_rw=1") + " isopod.bench_exit=1"
ksha = open(f"{home}/kernels/current").read().strip()
kdir = f"{home}/kernels/{ksha}"
bsha = open(f"{home}/images/current-base").read().strip()
base = f"{home}/images/base-{bsha}.img"
cmd = ["qemu-system-x86_64", "-M", opt("-M"), "-accel", opt("-accel"), "-cpu", opt("-cpu"), "-m", "256", "-smp", "1",
       "-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-kernel", f"{kdir}/vmlinux",
       "-initrd", f"{kdir}/initramfs.cpio", "-append", append,
       "-chardev", f"file,id=con,path={work}/console.log", "-serial", "chardev:con",
       "-drive", f"id=root,file={work}/ov.qcow2,format=qcow2,if=none", "-device", rootdev, "-device", serial,
       "-chardev", f"socket,id=agent,path={work}/a.sock,server=on,wait=off",
       "-device", "virtserialport,chardev=agent,name=isopod.agent", "-device", "virtio-rng-device"]
OLD = os.environ.get("OLD_TREE")
def cold(mode):
    tree = OLD if mode == "thp" else root
    e = dict(env, PATH=tree + "/bin:" + os.environ["PATH"])
    t0 = time.monotonic()
    subprocess.run([tree + "/sh/isopod", "run", "--json-only", "--mem-mib", "256", "--", "true"], env=e,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return round((time.monotonic() - t0) * 1000)
def boot(mode):
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", base, f"{work}/ov.qcow2"], check=True)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         preexec_fn=nothp if mode == "nothp" else (lambda: None))
    _, st, ru = os.wait4(p.pid, 0)
    wall = (time.monotonic() - t0) * 1000
    return {"mode": mode, "wall_ms": round(wall), "cpu_ms": round((ru.ru_utime + ru.ru_stime) * 1000, 1),
            "utime_ms": round(ru.ru_utime * 1000, 1), "stime_ms": round(ru.ru_stime * 1000, 1),
            "minflt": ru.ru_minflt, "maxrss": ru.ru_maxrss, "st": st}
rows = []
try:
    for i in range(int(sys.argv[1])):
        for m in (("thp", "nothp") if i % 2 == 0 else ("nothp", "thp")):
            if OLD and (i // 2) % 2:
                c = cold(m); x = boot(m)
            else:
                x = boot(m); c = cold(m) if OLD else None
            if OLD:
                x["cold_ms"] = c
            x["pair"] = i; rows.append(x); print(json.dumps(x), flush=True)
finally:
    shutil.rmtree(home, ignore_errors=True); shutil.rmtree(work, ignore_errors=True)
for k in (("cold_ms",) if OLD else ()) + ("wall_ms", "cpu_ms", "utime_ms", "stime_ms", "minflt", "maxrss"):
    a = {m: S.median(r[k] for r in rows if r["mode"] == m) for m in ("thp", "nothp")}
    d = [b[k] - a_[k] for a_, b in ((next(r for r in rows if r["pair"] == i and r["mode"] == "thp"),
          next(r for r in rows if r["pair"] == i and r["mode"] == "nothp")) for i in range(int(sys.argv[1])))]
    print(k, a, "paired median diff", S.median(d), "nothp higher", sum(x > 0 for x in d), "/", len(d), file=sys.stderr)
