"""Reboot, halt or toggle Ctrl-Alt-Del through reboot(2) from inside the pid namespace (only after checking we are not in the host's namespaces)."""
import errno
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_reboot = 169
MAGIC1, MAGIC2 = 0xfee1dead, 672274793
CMD_CAD_OFF, CMD_CAD_ON, CMD_RESTART, CMD_POWER_OFF = 0, 0x89abcdef, 0x01234567, 0x4321fedc
PROC_PID_INIT_INO, PROC_USER_INIT_INO = 0xEFFFFFFC, 0xEFFFFFFD


def main():
    # a reboot(2) that gets through in the host's own pid namespace would take the
    # machine down: refuse to run there at all
    if os.stat("/proc/self/ns/pid").st_ino == PROC_PID_INIT_INO or os.stat("/proc/self/ns/user").st_ino == PROC_USER_INIT_INO:
        print("ERROR: running in the host's initial namespaces; refusing to call reboot(2)")
        sys.exit(2)
    # in a child pid namespace the CAD commands fail with EINVAL once CAP_SYS_BOOT is granted
    for cmd, name in ((CMD_CAD_OFF, "CAD_OFF"), (CMD_CAD_ON, "CAD_ON")):
        r, e = sysc(SYS_reboot, MAGIC1, MAGIC2, cmd, None)
        if r == 0 or e != errno.EPERM:
            ESCAPES.append("reboot(%s) passed the CAP_SYS_BOOT check (%s)" % (name, "ok" if r == 0 else en(e)))
        else:
            NOTES.append("reboot(%s): %s" % (name, en(e)))
    # RESTART/POWER_OFF would end this pid namespace (the exec would die); try in a child
    for cmd, name in ((CMD_RESTART, "RESTART"), (CMD_POWER_OFF, "POWER_OFF")):
        pid = os.fork()
        if pid == 0:
            r, e = sysc(SYS_reboot, MAGIC1, MAGIC2, cmd, None)
            os._exit(0 if r == 0 else min(e, 250))
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != errno.EPERM:
            ESCAPES.append("reboot(%s) did not fail with EPERM (%s)" % (name, en(code) if code > 0 else code))
        else:
            NOTES.append("reboot(%s): EPERM" % name)


if __name__ == "__main__":
    finish(main)
