"""Create a userfaultfd (syscall, user-mode-only flag, /dev/userfaultfd), used to stall the kernel mid-copy in exploits."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_userfaultfd = 323
UFFD_USER_MODE_ONLY = 1


def main():
    for flags, name in ((os.O_CLOEXEC | os.O_NONBLOCK, "plain"), (os.O_CLOEXEC | UFFD_USER_MODE_ONLY, "user-mode-only")):
        fd, e = sysc(SYS_userfaultfd, flags)
        if fd >= 0:
            ESCAPES.append("userfaultfd (%s) gave fd %d" % (name, fd))
            os.close(fd)
        else:
            NOTES.append("userfaultfd %s: %s" % (name, en(e)))
    try:
        fd = os.open("/dev/userfaultfd", os.O_RDWR)
        ESCAPES.append("opened /dev/userfaultfd")
        os.close(fd)
    except OSError as e:
        NOTES.append("/dev/userfaultfd: %s" % en(e.errno))


if __name__ == "__main__":
    finish(main)
