"""Join other namespaces through namespace fds found in /proc/self/fd, /proc/*/fd and /proc/*/ns (setns), and walk up with nsfs ioctls."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import fcntl  # noqa: E402

SYS_setns = 308
NS_GET_USERNS, NS_GET_PARENT = 0xB701, 0xB702
KINDS = ("cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user", "uts")


def own_inodes():
    out = set()
    for k in KINDS:
        try:
            out.add(os.stat("/proc/self/ns/" + k).st_ino)
        except OSError:
            pass
    return out


def main():
    mine = own_inodes()
    candidates = []  # (fd, description)
    for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
        for k in KINDS:
            path = "/proc/%s/ns/%s" % (pid, k)
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            candidates.append((fd, path))
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for n in fds:
            try:
                target = os.readlink("/proc/%s/fd/%s" % (pid, n))
            except OSError:
                continue
            if target.split(":")[0] in KINDS:
                try:
                    candidates.append((os.open("/proc/%s/fd/%s" % (pid, n), os.O_RDONLY), "fd %s of %s -> %s" % (n, pid, target)))
                except OSError as e:
                    NOTES.append("ns fd %s of %s: %s" % (n, pid, en(e.errno)))
    # owners and parents of our own namespaces lie outside the sandbox
    for k in ("user", "net", "mnt", "pid", "uts", "ipc", "cgroup"):
        try:
            fd = os.open("/proc/self/ns/" + k, os.O_RDONLY)
        except OSError:
            continue
        for req, name in ((NS_GET_PARENT, "NS_GET_PARENT"), (NS_GET_USERNS, "NS_GET_USERNS")):
            try:
                nfd = fcntl.ioctl(fd, req)
            except OSError as e:
                NOTES.append("%s on %s: %s" % (name, k, en(e.errno)))
                continue
            ino = os.fstat(nfd).st_ino
            if ino not in mine:
                candidates.append((nfd, "%s of our %s ns" % (name, k)))
                ESCAPES.append("%s on our %s ns handed out namespace %d outside the sandbox" % (name, k, ino))
            else:
                os.close(nfd)
        os.close(fd)
    foreign = 0
    for fd, how in candidates:
        ino = os.fstat(fd).st_ino
        if ino in mine:
            continue
        foreign += 1
        r, e = sysc(SYS_setns, fd, 0)
        if r == 0:
            ESCAPES.append("setns into %s (ns %d) succeeded" % (how, ino))
        else:
            NOTES.append("setns %s: %s" % (how, en(e)))
    # setns into our own namespaces needs CAP_SYS_ADMIN as well: a success means the cap is there
    r, e = sysc(SYS_setns, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0)
    if r == 0:
        ESCAPES.append("setns(own mnt ns) succeeded: CAP_SYS_ADMIN is available")
    else:
        NOTES.append("setns(own mnt ns): %s" % en(e))
    NOTES.insert(0, "%d namespace handles found, %d outside the sandbox's own" % (len(candidates), foreign))


if __name__ == "__main__":
    finish(main)
