"""Get raw I/O port access with iopl(3) and ioperm (keyboard controller, CMOS, PCI config ports); no port is touched."""

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_iopl, SYS_ioperm = 172, 173


def main():
    r, e = sysc(SYS_iopl, 3)
    (ESCAPES.append("iopl(3) succeeded") if r == 0 else NOTES.append("iopl(3): %s" % en(e)))
    for port, n in ((0x64, 1), (0x70, 2), (0xcf8, 8), (0x80, 1)):
        r, e = sysc(SYS_ioperm, port, n, 1)
        if r == 0:
            ESCAPES.append("ioperm(%#x, %d) succeeded" % (port, n))
            sysc(SYS_ioperm, port, n, 0)
        else:
            NOTES.append("ioperm(%#x): %s" % (port, en(e)))


if __name__ == "__main__":
    finish(main)
