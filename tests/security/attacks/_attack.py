"""Shared by every attack script: raw syscalls through libc and the verdict
contract (exit 0 with BLOCKED, 1 with ESCAPED and the evidence, 2 when the
script could not reach a verdict).  Uploaded beside each script."""
import ctypes
import errno
import os
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


def in_child(fn):
    """Runs fn() in a forked child (so a chroot, setns or privilege change
    does not stick to the script); returns the text fn returned."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        try:
            out = fn() or ""
        except BaseException as e:
            out = "NOTE child exception: %r" % (e,)
        os.write(wr, out.encode("utf-8", "replace")[:65000])
        os._exit(0)
    os.close(wr)
    chunks = []
    while True:
        d = os.read(rd, 65536)
        if not d:
            break
        chunks.append(d)
    os.close(rd)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode("utf-8", "replace")


def host_only_paths():
    """Host paths a sandbox should never reach: the runner's marker and the
    overlay's own host directories (visible, not reachable, in mountinfo)."""
    out = []
    if os.environ.get("FB_HOST_MARKER"):
        out.append(os.environ["FB_HOST_MARKER"])
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                for opt in line.replace(" ", ",").split(","):
                    if opt.startswith(("upperdir=", "lowerdir=", "workdir=")):
                        out.append(opt.split("=", 1)[1].split(":")[0])
    except OSError:
        pass
    return [p for p in dict.fromkeys(out) if p.startswith("/")]


def cstr(s):
    """A C string argument for sysc (None stays a NULL pointer)."""
    return None if s is None else ctypes.c_char_p(s.encode())


def init_pids():
    """Pids of every forkbox-init process this sandbox can see (PID 1 and
    its workers), not counting this script."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if f.read().split(b"\0")[0] == b"forkbox-init":
                    out.append(int(p))
        except OSError:
            pass
    return sorted(out)
