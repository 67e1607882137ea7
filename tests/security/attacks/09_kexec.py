"""Replace the running kernel with kexec_load / kexec_file_load (invalid flags: only the privilege check is probed)."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_kexec_load, SYS_kexec_file_load = 246, 320


def main():
    # invalid flags: a privileged caller gets EINVAL, nothing is loaded or unloaded
    r, e = sysc(SYS_kexec_load, 0, 0, None, 0x7ead0000)
    if r >= 0 or e not in (errno.EPERM, errno.ENOSYS):
        ESCAPES.append("kexec_load passed the privilege check (%s)" % ("ok" if r >= 0 else en(e)))
    else:
        NOTES.append("kexec_load: %s" % en(e))
    fd = os.open("/bin/true", os.O_RDONLY)
    r, e = sysc(SYS_kexec_file_load, fd, -1, 0, ctypes.c_char_p(b""), 0x40000000)
    os.close(fd)
    if r >= 0 or e not in (errno.EPERM, errno.ENOSYS):
        ESCAPES.append("kexec_file_load passed the privilege check (%s)" % ("ok" if r >= 0 else en(e)))
    else:
        NOTES.append("kexec_file_load: %s" % en(e))
    try:
        with open("/sys/kernel/kexec_loaded") as f:
            NOTES.append("kexec_loaded=%s" % f.read().strip())
    except OSError:
        pass


if __name__ == "__main__":
    finish(main)
