"""Write under /proc/bus, /proc/fs, /proc/irq and /proc/sys/fs (PCI config space, NFS/fscache knobs, IRQ affinity), which must be read-only."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402


def main():
    opened = []
    refusals = {}
    count = 0
    for top in ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/driver", "/proc/tty", "/proc/sys/fs"):
        for root, dirs, files in os.walk(top):
            for name in files:
                p = os.path.join(root, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                count += 1
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                except OSError as e:
                    refusals.setdefault(en(e.errno), []).append(p)
                    continue
                # never write: being able to open it for writing is the finding
                os.close(fd)
                opened.append(p)
            if count > 20000:
                break
    if opened:
        ESCAPES.append("%d files under /proc/{bus,fs,irq,...} open for writing, e.g. %s" % (len(opened), opened[:4]))
    NOTES.append("%d files tried" % count)
    for k, v in sorted(refusals.items()):
        NOTES.append("%s x%d (e.g. %s)" % (k, len(v), v[0]))


if __name__ == "__main__":
    finish(main)
