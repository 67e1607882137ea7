"""Read and write forkbox-init's memory, environment and maps through /proc/PID/{mem,environ,maps,auxv,stack,syscall,pagemap,map_files}."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401


def main():
    pids = init_pids()
    if not pids:
        print("ERROR: no forkbox-init process visible")
        sys.exit(2)
    for pid in pids:
        for name, flags in (("mem", os.O_RDWR), ("mem", os.O_RDONLY), ("mem", os.O_WRONLY)):
            try:
                fd = os.open("/proc/%d/%s" % (pid, name), flags)
            except OSError as e:
                NOTES.append("open /proc/%d/mem flags=%d: %s" % (pid, flags, en(e.errno)))
                continue
            ESCAPES.append("opened /proc/%d/mem with flags %d" % (pid, flags))
            os.close(fd)
        for name in ("environ", "maps", "smaps", "auxv", "stack", "syscall", "pagemap", "personality", "io",
                     "mountinfo"):
            try:
                with open("/proc/%d/%s" % (pid, name), "rb") as f:
                    data = f.read(4096)
            except OSError as e:
                NOTES.append("/proc/%d/%s: %s" % (pid, name, en(e.errno)))
                continue
            if name == "mountinfo":
                continue  # the same view as our own: not private to init
            if data:
                ESCAPES.append("read %d bytes of /proc/%d/%s: %r" % (len(data), pid, name, data[:60]))
        try:
            entries = os.listdir("/proc/%d/map_files" % pid)
            if entries:
                ESCAPES.append("listed /proc/%d/map_files: %s" % (pid, entries[:3]))
        except OSError as e:
            NOTES.append("/proc/%d/map_files: %s" % (pid, en(e.errno)))
    # keep the notes short: one line per kind of refusal
    uniq = {}
    for n in NOTES:
        uniq.setdefault(n.split(":")[-1].strip(), n)
    NOTES[:] = ["%d pids of forkbox-init probed" % len(pids)] + sorted(uniq.values())


if __name__ == "__main__":
    finish(main)
