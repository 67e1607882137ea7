"""Change the host clock with settimeofday, clock_settime, adjtimex and clock_adjtime (there is no time namespace)."""
import ctypes

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402
import time  # noqa: E402

SYS_adjtimex, SYS_settimeofday, SYS_clock_settime, SYS_clock_adjtime = 159, 164, 227, 305
CLOCK_REALTIME, CLOCK_TAI = 0, 11
ADJ_MAXERROR = 0x0004


def timex(modes, maxerror):
    # modes (int, padded), offset, freq, maxerror, ... : 208 bytes on x86_64
    return ctypes.create_string_buffer(struct.pack("iiqqq", modes, 0, 0, 0, maxerror) + b"\0" * 176, 216)


def main():
    # every setter is given the current time / current values, so a success changes ~nothing
    now = time.time()
    tv = ctypes.create_string_buffer(struct.pack("qq", int(now), int((now % 1) * 1e6)))
    r, e = sysc(SYS_settimeofday, tv, None)
    (ESCAPES.append("settimeofday succeeded") if r == 0 else NOTES.append("settimeofday: %s" % en(e)))
    for clk, name in ((CLOCK_REALTIME, "REALTIME"), (CLOCK_TAI, "TAI")):
        now = time.clock_gettime(clk)
        ts = ctypes.create_string_buffer(struct.pack("qq", int(now), int((now % 1) * 1e9)))
        r, e = sysc(SYS_clock_settime, clk, ts)
        (ESCAPES.append("clock_settime(%s) succeeded" % name) if r == 0
         else NOTES.append("clock_settime(%s): %s" % (name, en(e))))
    q = timex(0, 0)
    r, e = sysc(SYS_adjtimex, q)
    maxerror = struct.unpack("q", q.raw[24:32])[0] if r >= 0 else 16000000
    NOTES.append("adjtimex query: %s" % ("allowed" if r >= 0 else en(e)))
    r, e = sysc(SYS_adjtimex, timex(ADJ_MAXERROR, maxerror))
    (ESCAPES.append("adjtimex(ADJ_MAXERROR) changed kernel time state") if r >= 0
     else NOTES.append("adjtimex(ADJ_MAXERROR): %s" % en(e)))
    r, e = sysc(SYS_clock_adjtime, CLOCK_REALTIME, timex(ADJ_MAXERROR, maxerror))
    (ESCAPES.append("clock_adjtime(ADJ_MAXERROR) changed kernel time state") if r >= 0
     else NOTES.append("clock_adjtime(ADJ_MAXERROR): %s" % en(e)))


if __name__ == "__main__":
    finish(main)
