"""Write anywhere under /sys (uevent_helper, power/state, kernel and mm knobs, device and net attributes, new files): every open for writing must fail."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402
import time  # noqa: E402

EXPLICIT = ["/sys/kernel/uevent_helper", "/sys/power/state", "/sys/power/disk", "/sys/kernel/profiling",
            "/sys/kernel/rcu_expedited", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/class/net/lo/mtu",
            "/sys/class/net/lo/flags", "/sys/block/vda/queue/scheduler", "/sys/devices/system/cpu/cpu0/online",
            "/sys/fs/cgroup/release_agent"]


def try_write(path, opened):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        return en(e.errno)
    # never write: opening for writing is already what a read-only /sys refuses
    os.close(fd)
    opened.append(path)
    return "opened"


def main():
    opened = []
    results = {}
    for p in EXPLICIT:
        results.setdefault(try_write(p, opened), []).append(p)
    deadline = time.time() + 20
    walked = 0
    for root, dirs, files in os.walk("/sys"):
        for name in files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o222:
                continue
            walked += 1
            results.setdefault(try_write(p, opened), []).append(p)
        if time.time() > deadline or walked > 40000:
            break
    for d in ("/sys", "/sys/kernel", "/sys/fs/cgroup", "/sys/class/net"):
        try:
            fd = os.open(os.path.join(d, "fbx-new"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.close(fd)
            opened.append(os.path.join(d, "fbx-new (created)"))
        except OSError as e:
            results.setdefault(en(e.errno), []).append(d + "/fbx-new")
        try:
            os.mkdir(os.path.join(d, "fbx-dir"))
            opened.append(os.path.join(d, "fbx-dir (mkdir)"))
        except OSError:
            pass
    if opened:
        ESCAPES.append("%d /sys paths writable, e.g. %s" % (len(opened), opened[:5]))
    results.pop("opened", None)
    NOTES.append("%d writable-mode sysfs files tried" % walked)
    for k, v in sorted(results.items()):
        NOTES.append("%s x%d (e.g. %s)" % (k, len(v), v[0]))


if __name__ == "__main__":
    finish(main)
