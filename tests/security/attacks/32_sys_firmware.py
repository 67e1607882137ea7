"""Read firmware data under /sys/firmware (ACPI tables, e820 memory map, DMI, EFI variables), which must be masked."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401


def main():
    base = "/sys/firmware"
    try:
        top = os.listdir(base)
    except OSError as e:
        NOTES.append("%s: %s" % (base, en(e.errno)))
        return
    if not top:
        NOTES.append("%s is empty (masked)" % base)
        return
    readable = []
    count = 0
    for root, dirs, files in os.walk(base):
        for name in files:
            count += 1
            p = os.path.join(root, name)
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            os.close(fd)
            if data:
                readable.append((p, data[:40]))
        if count > 5000:
            break
    if readable:
        ESCAPES.append("%d files under /sys/firmware readable, e.g. %s" % (
            len(readable), "; ".join("%s=%r" % r for r in readable[:3])))
    else:
        NOTES.append("%d entries under /sys/firmware, none readable" % count)


if __name__ == "__main__":
    finish(main)
