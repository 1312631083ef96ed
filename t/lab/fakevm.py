#!/usr/bin/env python3
"""t/lab/fakevm.py - a stand-in guest for testing the host-side network
without QEMU: frames are relayed between an isopod tap (in the current
netns, like QEMU would hold it) and a tap called eth0 inside the netns
GUEST (/run/netns/GUEST), where the test configures eth0 and runs busybox
probes as the "guest".

fakevm.py TAP GUEST MAXSECONDS - exits after MAXSECONDS, or when killed.
"""
import ctypes
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000


def tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def main():
    name, guest, maxs = sys.argv[1], sys.argv[2], float(sys.argv[3])
    host_fd = tap(name)                   # attached in the host netns
    libc = ctypes.CDLL(None, use_errno=True)
    nsfd = os.open("/run/netns/" + guest, os.O_RDONLY | os.O_CLOEXEC)
    if libc.setns(nsfd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns " + guest)
    guest_fd = tap("eth0")                # created in the guest netns
    peer = {host_fd: guest_fd, guest_fd: host_fd}
    end = time.monotonic() + maxs
    while time.monotonic() < end:
        r, _, _ = select.select([host_fd, guest_fd], [], [], 0.5)
        for fd in r:
            try:
                os.write(peer[fd], os.read(fd, 65536))
            except OSError:
                pass  # no carrier yet, or a frame the other side refused


if __name__ == "__main__":
    main()
