"""Become or hand files to uids/gids outside the sandbox's 65536-id map (setresuid, setresgid, setgroups, chown), and rewrite uid_map/gid_map/setgroups."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

SYS_setresuid, SYS_setresgid, SYS_setgroups = 117, 119, 116


def main():
    outside = [65536, 70000, 100000, 1000000, 100000000, 0x7ffffffe]
    for uid in outside:
        def fn(uid=uid):
            r, e = sysc(SYS_setresuid, uid, uid, uid)
            if r == 0:
                return "ESC setresuid(%d) succeeded (now %s)" % (uid, os.getresuid())
            return "setresuid(%d): %s" % (uid, en(e))
        res = in_child(fn)
        (ESCAPES if res.startswith("ESC") else NOTES).append(res.replace("ESC ", ""))

        def fg(gid=uid):
            r, e = sysc(SYS_setresgid, gid, gid, gid)
            if r == 0:
                return "ESC setresgid(%d) succeeded" % gid
            groups = (ctypes.c_uint * 1)(gid)
            r, e2 = sysc(SYS_setgroups, 1, groups)
            if r == 0:
                return "ESC setgroups([%d]) succeeded" % gid
            return "setresgid/setgroups(%d): %s/%s" % (gid, en(e), en(e2))
        res = in_child(fg)
        (ESCAPES if res.startswith("ESC") else NOTES).append(res.replace("ESC ", ""))
    path = "/tmp/fbx-chown"
    open(path, "w").close()
    for uid in outside:
        try:
            os.chown(path, uid, uid)
            ESCAPES.append("chown to %d succeeded (stat says %d)" % (uid, os.stat(path).st_uid))
        except OSError as e:
            NOTES.append("chown(%d): %s" % (uid, en(e.errno)))
    try:
        os.chown(path, 65535, 65535)
    except OSError as e:
        NOTES.append("note: chown to 65535 (mapped) failed: %s" % en(e.errno))
    for f, val in (("uid_map", "0 0 1\n"), ("gid_map", "0 0 1\n"), ("setgroups", "allow\n")):
        try:
            with open("/proc/self/" + f, "w") as fh:
                fh.write(val)
            ESCAPES.append("rewrote /proc/self/%s" % f)
        except OSError as e:
            NOTES.append("/proc/self/%s: %s" % (f, en(e.errno)))
    with open("/proc/self/uid_map") as fh:
        NOTES.append("uid_map: %s" % " ".join(fh.read().split()))
    uniq = {}
    for n in NOTES:
        k = n.rsplit(": ", 1)[-1]
        uniq.setdefault(k, []).append(n.rsplit(": ", 1)[0])
    NOTES[:] = ["%s: %s" % (k, ", ".join(v[:4]) + (" ..." if len(v) > 4 else "")) for k, v in uniq.items()]


if __name__ == "__main__":
    finish(main)
