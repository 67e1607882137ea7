"""Open perf events (own task software clock, hardware cycles, kernel tracepoints, system-wide on CPU 0) with perf_event_open."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_perf_event_open = 298
PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT = 0, 1, 2
EXCLUDE_KERNEL, EXCLUDE_HV, DISABLED = 1 << 5, 1 << 6, 1


def attr(ptype, config, flags):
    # type, size, config, sample_period, sample_type, read_format, flag bits ...
    data = struct.pack("IIQQQQQ", ptype, 128, config, 0, 0, 0, flags)
    return ctypes.create_string_buffer(data + b"\0" * (128 - len(data)), 128)


def main():
    tries = [
        ("own task, user-only software clock", attr(PERF_TYPE_SOFTWARE, 0, DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV), 0, -1),
        ("own task, hardware cycles", attr(PERF_TYPE_HARDWARE, 0, DISABLED), 0, -1),
        ("system-wide on cpu 0", attr(PERF_TYPE_SOFTWARE, 0, DISABLED), -1, 0),
        ("kernel tracepoint id 1", attr(PERF_TYPE_TRACEPOINT, 1, DISABLED), -1, 0),
        ("pid 1 software clock", attr(PERF_TYPE_SOFTWARE, 0, DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV), 1, -1),
    ]
    for name, a, pid, cpu in tries:
        r, e = sysc(SYS_perf_event_open, a, pid, cpu, -1, 0)
        if r >= 0:
            ESCAPES.append("perf_event_open (%s) gave fd %d" % (name, r))
            os.close(r)
        else:
            NOTES.append("perf_event_open %s: %s" % (name, en(e)))


if __name__ == "__main__":
    finish(main)
