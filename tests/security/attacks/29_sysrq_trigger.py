"""Trigger magic SysRq actions through /proc/sysrq-trigger (must be masked or absent) and enable them via /proc/sys/kernel/sysrq."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402


def main():
    path = "/proc/sysrq-trigger"
    try:
        st = os.stat(path)
    except OSError as e:
        NOTES.append("%s: %s (kernel without magic SysRq, or hidden)" % (path, en(e.errno)))
        st = None
    if st is not None:
        if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3:
            NOTES.append("%s is masked with /dev/null" % path)
        else:
            try:
                fd = os.open(path, os.O_WRONLY)
                # opening it for writing is proof enough: no command is written
                ESCAPES.append("opened the real %s for writing" % path)
                os.close(fd)
            except OSError as e:
                NOTES.append("open %s for writing: %s" % (path, en(e.errno)))
    knob = "/proc/sys/kernel/sysrq"
    try:
        with open(knob) as f:
            value = f.read()
        try:
            with open(knob, "w") as f:
                f.write(value)
            ESCAPES.append("wrote %s" % knob)
        except OSError as e:
            NOTES.append("write %s: %s" % (knob, en(e.errno)))
    except OSError as e:
        NOTES.append("%s: %s" % (knob, en(e.errno)))


if __name__ == "__main__":
    finish(main)
