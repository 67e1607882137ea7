"""Create new namespaces with unshare, clone and clone3 (a nested user namespace would hand out a fresh full capability set)."""
import ctypes
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_clone, SYS_unshare, SYS_clone3 = 56, 272, 435
SIGCHLD = 17
FLAGS = {
    "CLONE_NEWUSER": 0x10000000, "CLONE_NEWNS": 0x00020000, "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWPID": 0x20000000, "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWTIME": 0x00000080,
    "CLONE_NEWUSER|CLONE_NEWNS": 0x10020000,
}


def try_unshare(flag):
    def fn():
        r, e = sysc(SYS_unshare, flag)
        if r != 0:
            return "fail %s" % en(e)
        with open("/proc/self/status") as f:
            caps = [line.split()[1] for line in f if line.startswith("CapEff")]
        return "ok CapEff=%s" % (caps[0] if caps else "?")
    return in_child(fn)


def try_clone(flag):
    def fn():
        r, e = sysc(SYS_clone, flag | SIGCHLD, 0, None, None, 0)
        if r == 0:
            os._exit(0)  # the new child: leave at once
        if r < 0:
            return "fail %s" % en(e)
        os.waitpid(r, 0)
        return "ok pid %d" % r
    return in_child(fn)


def try_clone3(flag):
    def fn():
        # struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls
        args = ctypes.create_string_buffer(struct.pack("8Q", flag, 0, 0, 0, SIGCHLD, 0, 0, 0))
        r, e = sysc(SYS_clone3, args, 64)
        if r == 0:
            os._exit(0)
        if r < 0:
            return "fail %s" % en(e)
        os.waitpid(r, 0)
        return "ok pid %d" % r
    return in_child(fn)


def main():
    for name, flag in FLAGS.items():
        for how, fn in (("unshare", try_unshare), ("clone", try_clone), ("clone3", try_clone3)):
            res = fn(flag)
            if res.startswith("ok"):
                ESCAPES.append("%s(%s) succeeded: %s" % (how, name, res))
            elif res.startswith("fail"):
                NOTES.append("%s(%s): %s" % (how, name, res[5:]))
            else:
                print("ERROR: %s(%s): %s" % (how, name, res))
                sys.exit(2)
    # a plain fork still works (sanity: the refusals above are about the flags)
    res = try_clone(0)
    if not res.startswith("ok"):
        NOTES.append("note: plain clone failed too: %s" % res)
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            NOTES.append("max_user_namespaces=%s" % f.read().strip())
    except OSError:
        pass


if __name__ == "__main__":
    finish(main)
