"""Mount filesystems with mount(2): tmpfs, proc, sysfs, devtmpfs, cgroup, a bind of /, and remounts of the read-only /proc/sys and /sys."""
import os

from _attack import ESCAPES, NOTES, cstr, en, finish, libc, sysc  # noqa: F401

SYS_mount, SYS_umount2 = 165, 166
MS_RDONLY, MS_NOSUID, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC = 1, 2, 32, 4096, 8192, 16384
MS_PRIVATE, MS_SHARED = 1 << 18, 1 << 20


def is_rw(path):
    """True when path is a mount point that is now mounted read-write."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4] == path:
                last = parts
    try:
        return "rw" in last[5].split(",")
    except NameError:
        return False


def main():
    base = "/tmp/fbx-mnt"
    attempts = [
        ("tmpfs", "tmpfs", "tmpfs", 0, ""),
        ("proc", "proc", "proc", 0, ""),
        ("sysfs", "sysfs", "sysfs", 0, ""),
        ("devtmpfs", "devtmpfs", "devtmpfs", 0, ""),
        ("cgroup-v1", "cgroup", "cgroup", 0, "memory"),
        ("cgroup-v1-named", "cgroup", "cgroup", 0, "none,name=fbx"),
        ("cgroup2", "cgroup2", "cgroup2", 0, ""),
        ("mqueue", "mqueue", "mqueue", 0, ""),
        ("overlay", "overlay", "overlay", 0, "lowerdir=/etc,upperdir=/tmp/fbx-up,workdir=/tmp/fbx-wk"),
        ("bind-root", "/", None, MS_BIND | MS_REC, None),
        ("bind-proc", "/proc", None, MS_BIND | MS_REC, None),
        ("bind-devnull", "/dev/null", None, MS_BIND, None),
    ]
    os.makedirs("/tmp/fbx-up", exist_ok=True)
    os.makedirs("/tmp/fbx-wk", exist_ok=True)
    for name, src, fstype, flags, data in attempts:
        target = "%s/%s" % (base, name)
        os.makedirs(base, exist_ok=True)
        if name == "bind-devnull":
            open(target, "a").close()
        else:
            os.makedirs(target, exist_ok=True)
        r, e = sysc(SYS_mount, cstr(src), cstr(target), cstr(fstype), flags, cstr(data))
        if r == 0:
            ESCAPES.append("mount %s on %s succeeded" % (name, target))
            sysc(SYS_umount2, cstr(target), 2)
        else:
            NOTES.append("mount %s: %s" % (name, en(e)))
    # remounts of read-only mounts and propagation changes
    remounts = [
        ("remount /proc/sys rw", None, "/proc/sys", None, MS_REMOUNT | MS_BIND, None),
        ("remount /proc/sys rw (plain)", None, "/proc/sys", None, MS_REMOUNT, None),
        ("remount /sys rw", None, "/sys", None, MS_REMOUNT, None),
        ("remount /sys rw (bind)", None, "/sys", None, MS_REMOUNT | MS_BIND, None),
        ("make / shared", None, "/", None, MS_SHARED | MS_REC, None),
        ("make / private", None, "/", None, MS_PRIVATE | MS_REC, None),
        ("move /proc/kallsyms mask", "/proc/kallsyms", "/tmp/fbx-mnt/tmpfs", None, MS_MOVE, None),
        ("move /proc/sys", "/proc/sys", "/tmp/fbx-mnt/proc", None, MS_MOVE, None),
    ]
    for name, src, target, fstype, flags, data in remounts:
        before = is_rw(target)
        r, e = sysc(SYS_mount, cstr(src), cstr(target), cstr(fstype), flags, cstr(data))
        if r == 0:
            after = is_rw(target)
            ESCAPES.append("%s succeeded (rw before=%s after=%s)" % (name, before, after))
        else:
            NOTES.append("%s: %s" % (name, en(e)))
    # the read-only mounts really are read-only
    for probe in ("/proc/sys/kernel/hostname", "/sys/kernel/profiling"):
        try:
            fd = os.open(probe, os.O_WRONLY)
            os.close(fd)
            ESCAPES.append("%s opened for writing" % probe)
        except OSError as e:
            NOTES.append("open %s for writing: %s" % (probe, en(e.errno)))


if __name__ == "__main__":
    finish(main)
