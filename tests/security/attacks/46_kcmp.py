"""Compare kernel objects of forkbox-init and its workers with kcmp (file/vm/files identity, kernel pointer ordering leak)."""
import os

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401

SYS_kcmp = 312
KCMP_FILE, KCMP_VM, KCMP_FILES, KCMP_FS, KCMP_SIGHAND, KCMP_IO, KCMP_SYSVSEM = 0, 1, 2, 3, 4, 5, 6


def main():
    me = os.getpid()
    for pid in init_pids():
        for kind, name, a, b in ((KCMP_FILE, "FILE", 3, 0), (KCMP_VM, "VM", 0, 0), (KCMP_FILES, "FILES", 0, 0),
                                 (KCMP_FS, "FS", 0, 0), (KCMP_SIGHAND, "SIGHAND", 0, 0)):
            r, e = sysc(SYS_kcmp, pid, me, kind, a, b)
            if r >= 0:
                ESCAPES.append("kcmp(init pid %d, self, %s) = %d" % (pid, name, r))
            else:
                NOTES.append("kcmp(%d, self, %s): %s" % (pid, name, en(e)))
    uniq = sorted(set(n.split(": ")[1] for n in NOTES))
    NOTES[:] = ["kcmp against forkbox-init refused: %s" % ", ".join(uniq)] if NOTES else []


if __name__ == "__main__":
    finish(main)
