"""The process that holds a run's namespaces (chaos/supervise/isolation.py): they exist while it lives.

    python -I -S chaos/supervise/nshold.py NET [--infiniband=NIC,...] [PATH=BYTES ...]

NET ``1`` unshares a network namespace and brings its loopback up (an ioctl: no iproute2 needed); each
``PATH=BYTES`` mounts a tmpfs of that size on PATH in a private mount namespace (``/`` made private first,
so nothing propagates back to the machine). ``--infiniband`` gives that namespace a /sys/class/infiniband
listing the NIC names (a folder each, in place of the machine's own if it has one), for a host without
InfiniBand: sysfs takes no new folder, so /sys/class becomes a read-only tmpfs with every other class of the
machine bind-mounted back at its name (``fake_infiniband``).

It prints ``ready`` once they exist, then waits for its stdin to close: the runner's end of a pipe, closed
however the runner ends. A namespace outlives its holder only while a process of the run is
still inside it, and the kernel removes it, its links and its mounts with the last one. What cannot be done
(not root, a kernel without the feature) is one line on stderr and exit code 3, before ``ready``. Run by its
path with the standard library alone (``-I -S``), like chaos/supervise/deathsig.py, which it is exec'd by.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags at the start of its 24-byte union
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x2, 0x4, 0x20, 0x1000, 0x4000, 0x40000
SYS_CLASS = "/sys/class"


def _check(result: int, libc: ctypes.CDLL, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def isolate(net: bool, mounts: list[tuple[str, int]], nics: list[str]) -> None:
    """Unshare the namespaces asked for and set them up (loopback up, tmpfs mounted, NICs listed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    flags = (CLONE_NEWNET if net else 0) | (CLONE_NEWNS if mounts or nics else 0)
    _check(libc.unshare(flags), libc, "unshare")
    if mounts or nics:
        _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), libc, "make / private")
    for path, size in mounts:
        options = f"size={size},mode=0755".encode()
        _check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options), libc, f"tmpfs on {path}")
    if nics:
        fake_infiniband(libc, nics)
    if net:
        loopback_up()


def fake_infiniband(libc: ctypes.CDLL, nics: list[str]) -> None:
    """/sys/class/infiniband/<nic>/ for each name, in this (private) mount namespace: a tmpfs over /sys/class
    that holds each of the machine's classes bind-mounted back (reached through a descriptor opened before
    the tmpfs hid them) but its own infiniband, the listed one in its place, then made read-only as sysfs is."""
    below = os.open(SYS_CLASS, os.O_PATH | os.O_DIRECTORY)
    try:
        classes = sorted(name for name in os.listdir(SYS_CLASS) if name != "infiniband")  # a real one is hidden
        flags = MS_NOSUID | MS_NODEV
        _check(libc.mount(b"tmpfs", SYS_CLASS.encode(), b"tmpfs", flags, b"size=1m,mode=0755"), libc, f"tmpfs on {SYS_CLASS}")
        for name in classes:
            os.mkdir(f"{SYS_CLASS}/{name}")
            source = f"/proc/self/fd/{below}/{name}".encode()
            _check(libc.mount(source, f"{SYS_CLASS}/{name}".encode(), None, MS_BIND | MS_REC, None), libc, f"bind {SYS_CLASS}/{name}")
    finally:
        os.close(below)
    for nic in nics:
        os.makedirs(f"{SYS_CLASS}/infiniband/{nic}")
    _check(libc.mount(None, SYS_CLASS.encode(), None, MS_REMOUNT | MS_RDONLY | flags, None), libc, f"{SYS_CLASS} read-only")


def loopback_up() -> None:
    """Bring the new namespace's loopback up, by the ioctl `ip link set lo up` makes (no iproute2 needed:
    the GPU machines have none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _, flags = struct.unpack(IFREQ, fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0)))
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))


def main(argv: list[str]) -> None:
    net = argv[0] == "1"
    nics = [arg.removeprefix("--infiniband=").split(",") for arg in argv[1:] if arg.startswith("--infiniband=")]
    rest = [arg for arg in argv[1:] if not arg.startswith("--infiniband=")]
    mounts = [(path, int(size)) for path, size in (arg.rsplit("=", 1) for arg in rest)]
    try:
        isolate(net, mounts, nics[0] if nics else [])
    except OSError as e:
        print(f"nshold: {e.strerror or e}", file=sys.stderr, flush=True)
        sys.exit(3)
    print("ready", flush=True)
    sys.stdin.buffer.read()


if __name__ == "__main__":
    main(sys.argv[1:])
