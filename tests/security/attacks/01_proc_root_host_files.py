"""Read a host file through /proc/PID/root, /proc/PID/cwd and directory fds of every visible process."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, host_only_paths, libc, sysc  # noqa: F401


def probe(prefix, paths, secret, stats):
    """Looks for host-only paths below prefix (a directory path)."""
    for p in paths:
        full = prefix.rstrip("/") + p
        stats["tried"] += 1
        try:
            with open(full, "rb") as f:
                data = f.read(4096)
            if secret and secret.encode() in data:
                ESCAPES.append("read the host marker secret through %s" % full)
            else:
                ESCAPES.append("opened host-only path %s" % full)
            continue
        except IsADirectoryError:
            ESCAPES.append("host-only directory visible at %s" % full)
            continue
        except OSError as e:
            stats.setdefault(en(e.errno), 0)
            stats[en(e.errno)] += 1
        try:
            os.lstat(full)
            ESCAPES.append("host-only path exists at %s" % full)
        except OSError:
            pass


def main():
    secret = os.environ.get("FB_HOST_SECRET", "")
    paths = host_only_paths()
    if not paths:
        print("ERROR: no host-only paths known (FB_HOST_MARKER missing)")
        sys.exit(2)
    stats = {"tried": 0}
    # the plain path first: it must not exist in the sandbox at all
    probe("", paths, secret, stats)
    pids = [p for p in os.listdir("/proc") if p.isdigit()] + ["self", "thread-self"]
    for pid in pids:
        for link in ("root", "cwd"):
            base = "/proc/%s/%s" % (pid, link)
            probe(base, paths, secret, stats)
            probe(base + "/../../../../../..", paths, secret, stats)
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            tids = []
        for tid in tids:
            probe("/proc/%s/task/%s/root" % (pid, tid), paths, secret, stats)
        # directories held open by any process: climb from them
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            fds = []
        for fd in fds:
            link = "/proc/%s/fd/%s" % (pid, fd)
            try:
                if os.path.isdir(link):
                    probe(link + "/../../../../../../..", paths, secret, stats)
            except OSError:
                pass
    NOTES.append("%d lookups of %d host-only paths through /proc/*/{root,cwd,fd}, none reached the host (%s)"
                 % (stats.pop("tried"), len(paths), ", ".join("%s x%d" % kv for kv in sorted(stats.items()))))


if __name__ == "__main__":
    finish(main)
