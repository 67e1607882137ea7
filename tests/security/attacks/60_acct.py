"""Turn on BSD process accounting (acct) into a sandbox file, which the kernel would fill with records of host processes."""
import ctypes

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_acct = 163


def main():
    path = "/root/fbx-acct"
    open(path, "w").close()
    r, e = sysc(SYS_acct, ctypes.c_char_p(path.encode()))
    if r == 0:
        ESCAPES.append("acct(%s) enabled process accounting" % path)
        sysc(SYS_acct, None)
    else:
        NOTES.append("acct(file): %s" % en(e))
    r, e = sysc(SYS_acct, None)
    if r == 0:
        ESCAPES.append("acct(NULL) allowed (could switch host accounting off)")
    else:
        NOTES.append("acct(NULL): %s" % en(e))


if __name__ == "__main__":
    finish(main)
