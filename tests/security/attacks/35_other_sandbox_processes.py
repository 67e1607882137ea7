"""See and signal another sandbox's processes: scan /proc for its tagged process, then kill/pidfd_open/kill(-pgid) its host pids."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_kill, SYS_pidfd_open = 62, 434


def main():
    tag = os.environ.get("FB_OTHER_TAG", "").encode()
    hostpids = [int(p) for p in os.environ.get("FB_OTHER_HOST_PIDS", "").split(",") if p.strip()]
    if not tag or not hostpids:
        print("ERROR: FB_OTHER_TAG/FB_OTHER_HOST_PIDS not set")
        sys.exit(2)
    own = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    for p in own:
        try:
            with open("/proc/%d/cmdline" % p, "rb") as f:
                if tag in f.read():
                    if p != os.getpid():
                        ESCAPES.append("the other sandbox's process is visible here as pid %d" % p)
        except OSError:
            pass
    NOTES.append("%d processes visible, none of the other sandbox's" % len(own))
    for pid in hostpids:
        if pid in own:
            NOTES.append("host pid %d collides with one of ours, skipped" % pid)
            continue
        for sig in (0, 28):  # 28 = SIGWINCH: harmless, the runner checks the target
            r, e = sysc(SYS_kill, pid, sig)
            if r == 0:
                ESCAPES.append("kill(%d, %d) reached the other sandbox's process" % (pid, sig))
            r, e = sysc(SYS_kill, -pid, sig)
            if r == 0:
                ESCAPES.append("kill(-%d, %d) reached a process group" % (pid, sig))
        fd, e = sysc(SYS_pidfd_open, pid, 0)
        if fd >= 0:
            ESCAPES.append("pidfd_open(%d) of the other sandbox's process succeeded" % pid)
            os.close(fd)
        else:
            NOTES.append("kill/pidfd_open(%d): %s" % (pid, en(e)))


if __name__ == "__main__":
    finish(main)
