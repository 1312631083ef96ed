#!/usr/bin/env python3
"""t/lab/tapholder.py - a process that is not isopod's holding isopod taps
open, as a stray QEMU or another tool would (issue 14).

tapholder.py TAP...
    Attach a /dev/net/tun file to each TAP (TUNSETIFF, IFF_TAP|IFF_NO_PI),
    print "ready", then hold them until killed (600 s at most).

tapholder.py --when-recorded VMSDIR TAP
    Print "ready", wait (60 s at most) until a VM record VMSDIR/*/meta.json
    made since names TAP as its net.tap (isopod-boot has taken the slot and checked
    the tap then), attach to TAP at once, print "holding", hold it: a
    process taking the tap between isopod's check and QEMU's open.

The taps are persistent and single-queue (isopod-netsetup): while this
holds one, anybody else's TUNSETIFF on it fails with EBUSY.
"""
import fcntl
import glob
import json
import os
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def attach(tap):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", tap.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def recorded(vms, tap, old):
    for m in glob.glob(os.path.join(vms, "*", "meta.json")):
        if m in old:
            continue
        try:
            with open(m) as f:
                net = json.load(f).get("net") or {}
        except (OSError, ValueError):
            continue
        if net.get("tap") == tap:
            return True
    return False


def main():
    fds = []
    if sys.argv[1:2] == ["--when-recorded"]:
        vms, tap = sys.argv[2], sys.argv[3]
        old = set(glob.glob(os.path.join(vms, "*", "meta.json")))
        print("ready", flush=True)
        end = time.monotonic() + 60
        while not recorded(vms, tap, old):
            if time.monotonic() > end:
                sys.exit("tapholder: no record named %s within 60 s" % tap)
            time.sleep(0.005)
        fds.append(attach(tap))
        print("holding", flush=True)
    else:
        fds = [attach(t) for t in sys.argv[1:]]
        print("ready", flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
