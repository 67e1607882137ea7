"""Read other users' disk quotas with quotactl/quotactl_fd (a CAP_SYS_ADMIN command) on every filesystem reachable from the sandbox and on host block devices."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_quotactl, SYS_quotactl_fd = 179, 443
Q_SYNC, Q_QUOTAON, Q_QUOTAOFF, Q_GETQUOTA, Q_SETQUOTA = 0x800001, 0x800002, 0x800003, 0x800007, 0x800008
USRQUOTA, GRPQUOTA = 0, 1


def qcmd(cmd, typ):
    return (cmd << 8) | typ if cmd < 0x100 else ((cmd & 0xffffff) << 8) | typ


def main():
    buf = ctypes.create_string_buffer(256)
    other_uid = 1234  # a uid we are not: needs CAP_SYS_ADMIN over the filesystem
    seen = {}
    for path in ("/", "/dev/null", "/dev/shm", "/dev", "/proc", "/sys", "/tmp"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        for cmd, name in ((Q_GETQUOTA, "GETQUOTA(other uid)"),):
            r, e = sysc(SYS_quotactl_fd, fd, qcmd(cmd, USRQUOTA), other_uid, buf)
            if r == 0 or e == errno.ESRCH:
                ESCAPES.append("quotactl_fd(%s, %s) passed the privilege check (%s)" % (path, name, "ok" if r == 0 else en(e)))
            else:
                seen.setdefault(en(e), []).append(path)
        os.close(fd)
    for special in ("/dev/vda", "/dev/sda", "/dev/root", "/dev/null"):
        r, e = sysc(SYS_quotactl, qcmd(Q_GETQUOTA, USRQUOTA), ctypes.c_char_p(special.encode()), other_uid, buf)
        if r == 0 or e == errno.ESRCH:
            ESCAPES.append("quotactl(%s, GETQUOTA other uid) passed the privilege check" % special)
        else:
            seen.setdefault(en(e), []).append(special)
    NOTES.append("quota commands refused: %s" % "; ".join("%s for %s" % (k, ", ".join(v)) for k, v in seen.items()))


if __name__ == "__main__":
    finish(main)
