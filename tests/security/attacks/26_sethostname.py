"""Change the hostname and domainname with sethostname/setdomainname and /proc/sys/kernel/{hostname,domainname} (runner checks the host's)."""
import ctypes

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402

SYS_sethostname, SYS_setdomainname = 170, 171


def main():
    old = socket.gethostname()
    new = b"fbx-pwned-host"
    r, e = sysc(SYS_sethostname, ctypes.c_char_p(new), len(new))
    if r == 0:
        ESCAPES.append("sethostname succeeded (hostname now %s)" % socket.gethostname())
        sysc(SYS_sethostname, ctypes.c_char_p(old.encode()), len(old))
    else:
        NOTES.append("sethostname: %s" % en(e))
    try:
        with open("/proc/sys/kernel/domainname") as f:
            olddom = f.read().strip()
    except OSError:
        olddom = "(none)"
    r, e = sysc(SYS_setdomainname, ctypes.c_char_p(b"fbx-pwned-domain"), 16)
    if r == 0:
        ESCAPES.append("setdomainname succeeded")
        sysc(SYS_setdomainname, ctypes.c_char_p(olddom.encode()), len(olddom))
    else:
        NOTES.append("setdomainname: %s" % en(e))
    for path, value in (("/proc/sys/kernel/hostname", "fbx-pwned-host"), ("/proc/sys/kernel/domainname", "fbx-pwned-domain")):
        try:
            with open(path, "w") as f:
                f.write(value)
            ESCAPES.append("wrote %s" % path)
        except OSError as e:
            NOTES.append("write %s: %s" % (path, en(e.errno)))
    if socket.gethostname() != old:
        ESCAPES.append("hostname changed from %s to %s" % (old, socket.gethostname()))


if __name__ == "__main__":
    finish(main)
