"""Set execution domains and flags through personality() that must be refused (READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, other ABIs, values with high bits)."""
import sys

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

SYS_personality = 135
PER_LINUX, PER_LINUX32, UNAME26 = 0, 0x0008, 0x0020000
ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC = 0x0040000, 0x0100000, 0x0200000, 0x0400000
ADDR_LIMIT_32BIT, SHORT_INODE, WHOLE_SECONDS, STICKY_TIMEOUTS = 0x0800000, 0x1000000, 0x2000000, 0x4000000
ADDR_LIMIT_3GB = 0x8000000
PER_SVR4, PER_BSD, PER_SUNOS, PER_OSF4, PER_HPUX = 0x04100001, 0x0006, 0x0400006, 0x000f, 0x0010


def attempt(value):
    def fn():
        r, e = sysc(SYS_personality, value)
        if r < 0:
            return "refused %s" % en(e)
        now, _ = sysc(SYS_personality, 0xffffffff)
        return "set %#x" % now
    return in_child(fn)


def main():
    bad = [("READ_IMPLIES_EXEC", READ_IMPLIES_EXEC), ("ADDR_NO_RANDOMIZE", ADDR_NO_RANDOMIZE),
           ("MMAP_PAGE_ZERO", MMAP_PAGE_ZERO), ("ADDR_COMPAT_LAYOUT", ADDR_COMPAT_LAYOUT),
           ("ADDR_LIMIT_32BIT", ADDR_LIMIT_32BIT), ("ADDR_LIMIT_3GB", ADDR_LIMIT_3GB),
           ("STICKY_TIMEOUTS", STICKY_TIMEOUTS), ("SHORT_INODE", SHORT_INODE), ("WHOLE_SECONDS", WHOLE_SECONDS),
           ("PER_SVR4", PER_SVR4), ("PER_BSD", PER_BSD), ("PER_SUNOS", PER_SUNOS), ("PER_OSF4", PER_OSF4),
           ("PER_HPUX", PER_HPUX), ("PER_LINUX32|ADDR_NO_RANDOMIZE", PER_LINUX32 | ADDR_NO_RANDOMIZE),
           ("READ_IMPLIES_EXEC with high bits", (1 << 32) | READ_IMPLIES_EXEC),
           ("PER_LINUX with high bits", (1 << 40)), ("0x7fffffff", 0x7fffffff)]
    refused = {}
    for name, value in bad:
        res = attempt(value)
        if res.startswith("set"):
            got = int(res.split()[1], 16)
            if got not in (PER_LINUX, PER_LINUX32, UNAME26, PER_LINUX32 | UNAME26):
                ESCAPES.append("personality(%s) took effect: persona now %#x" % (name, got))
            else:
                NOTES.append("personality(%s) returned but the persona stayed %#x" % (name, got))
        elif res.startswith("refused"):
            refused.setdefault(res.split()[1], []).append(name)
        else:
            print("ERROR: %s: %s" % (name, res))
            sys.exit(2)
    for k, v in refused.items():
        NOTES.append("%s for %s" % (k, ", ".join(v)))
    # the allowed ones must still work (otherwise the refusals prove little)
    for name, value in (("PER_LINUX32", PER_LINUX32), ("UNAME26", UNAME26)):
        NOTES.append("allowed %s: %s" % (name, attempt(value)))

if __name__ == "__main__":
    finish(main)
