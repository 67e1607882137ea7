"""Change the root with pivot_root (onto a fresh directory, and '.' onto '.') to detach from the sandbox root."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_pivot_root = 155


def main():
    new = "/tmp/fbx-newroot"
    os.makedirs(new + "/old", exist_ok=True)
    # pivot_root checks CAP_SYS_ADMIN before anything else: EINVAL/EBUSY here would mean it passed
    for a, b in ((new, new + "/old"), (".", "."), ("/", "/")):
        pid = os.fork()
        if pid == 0:
            if a == ".":
                os.chdir("/")
            r, e = sysc(SYS_pivot_root, ctypes.c_char_p(a.encode()), ctypes.c_char_p(b.encode()))
            os._exit(0 if r == 0 else min(e, 250))
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            ESCAPES.append("pivot_root(%s, %s) succeeded" % (a, b))
        elif code not in (errno.EPERM, errno.ENOSYS):
            ESCAPES.append("pivot_root(%s, %s) passed the privilege check (%s)" % (a, b, en(code)))
        else:
            NOTES.append("pivot_root(%s, %s): %s" % (a, b, en(code)))


if __name__ == "__main__":
    finish(main)
