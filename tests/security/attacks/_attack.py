"""Shared by every attack script: raw syscalls through libc and the verdict
contract (exit 0 with BLOCKED, 1 with ESCAPED and the evidence, 2 when the
script could not reach a verdict).  Uploaded beside each script."""
import ctypes
import errno
import sys
import traceback

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ESCAPES = []  # evidence that the attack worked
NOTES = []  # what stopped each attempt


def sysc(nr, *args):
    """A raw x86_64 syscall; returns (result, errno)."""
    conv = []
    for a in args:
        if a is None:
            conv.append(ctypes.c_void_p(None))
        elif isinstance(a, int):
            conv.append(ctypes.c_long(a))
        else:
            conv.append(a)
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    return r, ctypes.get_errno()


def en(e):
    return errno.errorcode.get(e, str(e))


def finish(main):
    try:
        main()
    except Exception:
        traceback.print_exc()
        if not ESCAPES:
            print("ERROR: the attack script failed before reaching a verdict")
            sys.exit(2)
    if ESCAPES:
        print("ESCAPED: " + "; ".join(ESCAPES))
        sys.exit(1)
    print("BLOCKED: " + "; ".join(NOTES))
    sys.exit(0)
