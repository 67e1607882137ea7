"""Attach to PID 1 (forkbox-init) and its workers with ptrace (PTRACE_ATTACH, PTRACE_SEIZE) to take over the control channel."""
import sys

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401

SYS_ptrace = 101
PTRACE_ATTACH, PTRACE_DETACH, PTRACE_SEIZE = 16, 17, 0x4206


def main():
    pids = init_pids()
    if 1 not in pids:
        print("ERROR: pid 1 is not forkbox-init: %r" % pids)
        sys.exit(2)
    for pid in pids:
        for req, name in ((PTRACE_ATTACH, "PTRACE_ATTACH"), (PTRACE_SEIZE, "PTRACE_SEIZE")):
            r, e = sysc(SYS_ptrace, req, pid, 0, 0)
            if r == 0:
                ESCAPES.append("%s to forkbox-init pid %d succeeded" % (name, pid))
                sysc(SYS_ptrace, PTRACE_DETACH, pid, 0, 0)
            else:
                NOTES.append("%s pid %d: %s" % (name, pid, en(e)))
    with open("/proc/1/status") as f:
        tracer = [line for line in f if line.startswith("TracerPid:")]
    if tracer and tracer[0].split()[1] != "0":
        ESCAPES.append("pid 1 has a tracer: %s" % tracer[0].strip())


if __name__ == "__main__":
    finish(main)
