"""Signal host processes (the daemon, a host sleeper) by their host pid numbers, every pid number up to 65536, and everything with kill(-1)."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import signal  # noqa: E402

SYS_kill, SYS_tgkill, SYS_rt_sigqueueinfo = 62, 234, 129


def main():
    own = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    targets = {}
    for var in ("FB_HOST_PID", "FB_DAEMON_PID"):
        if os.environ.get(var):
            targets[int(os.environ[var])] = var
    for p in os.environ.get("FB_OTHER_HOST_PIDS", "").split(","):
        if p.strip():
            targets[int(p)] = "FB_OTHER_HOST_PIDS"
    if not targets:
        print("ERROR: no host pids given")
        sys.exit(2)
    for pid, what in sorted(targets.items()):
        if pid in own:
            NOTES.append("%s=%d collides with a sandbox pid, skipped" % (what, pid))
            continue
        r, e = sysc(SYS_kill, pid, 0)
        if r == 0:
            ESCAPES.append("kill(%d [%s], 0) succeeded: the pid is reachable" % (pid, what))
        else:
            NOTES.append("kill(%s=%d, 0): %s" % (what, pid, en(e)))
        # the host sleeper records any signal it receives
        sig = signal.SIGUSR1 if what == "FB_HOST_PID" else 0
        r, e = sysc(SYS_tgkill, pid, pid, sig)
        if r == 0:
            ESCAPES.append("tgkill(%d [%s], %d) succeeded" % (pid, what, sig))
        r, e = sysc(SYS_kill, -pid, 0)
        if r == 0:
            ESCAPES.append("kill(-%d [%s], 0) reached a process group" % (pid, what))
    # every pid number in range: only the sandbox's own may answer
    reachable = []
    for pid in range(1, 65537):
        r, e = sysc(SYS_kill, pid, 0)
        if r == 0 and pid not in own:
            reachable.append(pid)
    own_now = {int(p) for p in os.listdir("/proc") if p.isdigit()}
    reachable = [p for p in reachable if p not in own_now]
    if reachable:
        ESCAPES.append("kill(pid, 0) works on pids not visible in /proc: %s" % reachable[:10])
    else:
        NOTES.append("of pids 1..65536 only the sandbox's own %d answer kill(pid, 0)" % len(own_now))
    # broadcast: signals that are harmless by default; the host sleeper logs them
    for sig in (signal.SIGWINCH, signal.SIGURG):
        r, e = sysc(SYS_kill, -1, sig)
        NOTES.append("kill(-1, %s) -> %s (runner checks the host saw nothing)" % (sig.name, "ok" if r == 0 else en(e)))


if __name__ == "__main__":
    finish(main)
