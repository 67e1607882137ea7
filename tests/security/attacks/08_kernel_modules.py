"""Load and unload kernel modules with init_module, finit_module and delete_module."""
import ctypes
import errno
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

SYS_init_module, SYS_delete_module, SYS_finit_module = 175, 176, 313
SYS_create_module, SYS_query_module, SYS_get_kernel_syms = 174, 178, 177

# A refused caller gets EPERM before the kernel looks at the module; ENOSYS means
# the kernel has no module support.  Any other error means the privilege check
# passed (the junk image or unknown name was then refused): the caller could
# load or unload real modules.
DENIED = (errno.EPERM, errno.ENOSYS, errno.EACCES)


def judge(what, r, e):
    if r >= 0:
        ESCAPES.append("%s succeeded" % what)
    elif e not in DENIED:
        ESCAPES.append("%s passed the privilege check (failed later with %s)" % (what, en(e)))
    else:
        NOTES.append("%s: %s" % (what, en(e)))


def main():
    image = b"\x7fELF\x02\x01\x01" + b"\0" * 1024
    buf = ctypes.create_string_buffer(image, len(image))
    r, e = sysc(SYS_init_module, buf, len(image), ctypes.c_char_p(b""))
    judge("init_module(junk ELF)", r, e)
    with open("/tmp/fbx-junk.ko", "wb") as f:
        f.write(image)
    fd = os.open("/tmp/fbx-junk.ko", os.O_RDONLY)
    r, e = sysc(SYS_finit_module, fd, ctypes.c_char_p(b""), 0)
    judge("finit_module(junk file)", r, e)
    os.close(fd)
    r, e = sysc(SYS_delete_module, ctypes.c_char_p(b"fbx_no_such_module"), os.O_NONBLOCK)
    judge("delete_module(unknown name)", r, e)
    try:
        with open("/proc/modules") as f:
            loaded = [line.split()[0] for line in f]
    except OSError:
        loaded = []
    for name in loaded[:3]:
        # O_NONBLOCK|O_TRUNC would force; plain O_NONBLOCK fails on a busy module.
        # If the privilege check passes we do not want to actually unload: use a
        # module name with a trailing junk byte so the lookup fails.
        r, e = sysc(SYS_delete_module, ctypes.c_char_p((name + "\x01").encode()), os.O_NONBLOCK)
        judge("delete_module(%s+junk)" % name, r, e)
    for nr, name in ((SYS_create_module, "create_module"), (SYS_query_module, "query_module"),
                     (SYS_get_kernel_syms, "get_kernel_syms")):
        r, e = sysc(nr, 0, 0, 0, 0, 0)
        if r >= 0:
            ESCAPES.append("%s returned %d" % (name, r))
        else:
            NOTES.append("%s: %s" % (name, en(e)))


if __name__ == "__main__":
    finish(main)
