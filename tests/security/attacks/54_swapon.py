"""Enable swap on a sandbox file (swapon) or disable the host's swap areas (swapoff)."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_swapon, SYS_swapoff = 167, 168


def main():
    path = "/root/fbx-swapfile"
    pages = 40
    page = os.sysconf("SC_PAGE_SIZE")
    hdr = bytearray(page * pages)
    # swap header v1: version, last_page, nr_badpages at offset 1024; signature at the end of page 0
    hdr[1024:1036] = struct.pack("<III", 1, pages - 1, 0)
    hdr[page - 10:page] = b"SWAPSPACE2"
    with open(path, "wb") as f:
        f.write(hdr)
    os.chmod(path, 0o600)
    r, e = sysc(SYS_swapon, ctypes.c_char_p(path.encode()), 0)
    if r == 0:
        ESCAPES.append("swapon(%s) succeeded" % path)
        sysc(SYS_swapoff, ctypes.c_char_p(path.encode()))
    elif e != errno.EPERM:
        ESCAPES.append("swapon passed the CAP_SYS_ADMIN check (%s)" % en(e))
    else:
        NOTES.append("swapon: %s" % en(e))
    targets = [path]
    try:
        with open("/proc/swaps") as f:
            targets += [line.split()[0] for line in f.readlines()[1:] if line.split()]
    except OSError:
        pass
    for t in targets:
        # swapoff of a file that is not swap: EINVAL would mean the privilege check passed
        r, e = sysc(SYS_swapoff, ctypes.c_char_p(t.encode()))
        if r == 0 or e != errno.EPERM:
            ESCAPES.append("swapoff(%s) passed the CAP_SYS_ADMIN check (%s)" % (t, "ok" if r == 0 else en(e)))
        else:
            NOTES.append("swapoff(%s): %s" % (t, en(e)))


if __name__ == "__main__":
    finish(main)
