"""Set up an io_uring instance (io_uring_setup/enter/register), whose operations would bypass per-syscall filtering."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register = 425, 426, 427
IORING_REGISTER_PROBE = 8


def main():
    params = ctypes.create_string_buffer(120)
    fd, e = sysc(SYS_io_uring_setup, 8, params)
    if fd >= 0:
        probe = ctypes.create_string_buffer(16 + 256 * 8)
        r, e2 = sysc(SYS_io_uring_register, fd, IORING_REGISTER_PROBE, probe, 256)
        ESCAPES.append("io_uring_setup gave ring fd %d (probe: %s)" % (fd, "ok" if r >= 0 else en(e2)))
        os.close(fd)
    else:
        NOTES.append("io_uring_setup: %s" % en(e))
    # the other two on a bad fd: EBADF would show they are reachable
    r, e = sysc(SYS_io_uring_enter, 9999, 0, 0, 0, None, 0)
    NOTES.append("io_uring_enter(bad fd): %s" % en(e))
    r, e = sysc(SYS_io_uring_register, 9999, 0, None, 0)
    NOTES.append("io_uring_register(bad fd): %s" % en(e))
    try:
        with open("/proc/sys/kernel/io_uring_disabled") as f:
            NOTES.append("io_uring_disabled=%s" % f.read().strip())
    except OSError:
        pass


if __name__ == "__main__":
    finish(main)
