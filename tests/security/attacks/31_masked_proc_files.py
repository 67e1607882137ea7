"""Read /proc files that must be masked, empty or unreadable: kcore, keys, timer_list, sched_debug, kpage*, latency_stats, timer_stats, and the /proc/acpi, /proc/scsi, /proc/driver trees."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402

FILES = ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats",
         "/proc/timer_stats", "/proc/kpagecount", "/proc/kpageflags", "/proc/kpagecgroup", "/proc/kmsg",
         "/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/slabinfo", "/proc/sysvipc/../kcore"]
DIRS = ["/proc/acpi", "/proc/scsi", "/proc/driver", "/proc/bus"]


def is_devnull(st):
    return stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3


def read_some(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def main():
    for path in FILES:
        try:
            st = os.stat(path)
        except OSError as e:
            NOTES.append("%s: %s" % (path, en(e.errno)))
            continue
        if is_devnull(st):
            NOTES.append("%s: masked" % path)
            continue
        if path == "/proc/kmsg":
            # reading would take messages from the host's log: opening is enough
            try:
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
                ESCAPES.append("opened %s" % path)
            except OSError as e:
                NOTES.append("%s: %s" % (path, en(e.errno)))
            continue
        try:
            data = read_some(path)
        except OSError as e:
            NOTES.append("%s: %s" % (path, en(e.errno)))
            continue
        if path in ("/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/slabinfo"):
            # allowed to exist; they must not carry kernel addresses
            words = [w for w in data.split() if w.startswith(b"0x") and int(w, 16) != 0]
            if words:
                ESCAPES.append("%s shows kernel addresses: %r" % (path, words[0]))
            else:
                NOTES.append("%s: readable=%s, no addresses" % (path, bool(data)))
            continue
        if data:
            ESCAPES.append("%s readable: %r" % (path, data[:60]))
        else:
            NOTES.append("%s: empty" % path)
    for d in DIRS:
        try:
            st = os.stat(d)
        except OSError as e:
            NOTES.append("%s: %s" % (d, en(e.errno)))
            continue
        if d == "/proc/bus":
            # may stay visible, read-only; writes are tested elsewhere
            continue
        leaked = []
        try:
            for root, dirs, files in os.walk(d):
                for name in files:
                    p = os.path.join(root, name)
                    try:
                        if read_some(p):
                            leaked.append(p)
                    except OSError:
                        pass
                if len(leaked) > 3:
                    break
        except OSError:
            pass
        if leaked:
            ESCAPES.append("%s is not masked: %s readable" % (d, leaked[:3]))
        else:
            NOTES.append("%s: nothing readable inside" % d)


if __name__ == "__main__":
    finish(main)
