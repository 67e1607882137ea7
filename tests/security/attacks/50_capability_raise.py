"""Raise capabilities beyond the kept set with capset, ambient capabilities and the bounding set, then try CAP_SYS_ADMIN-only actions."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, in_child, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_capget, SYS_capset, SYS_unshare, SYS_sethostname, SYS_mount = 125, 126, 272, 170, 165
LINUX_CAPABILITY_VERSION_3 = 0x20080522
PR_CAPBSET_READ, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_SET_SECUREBITS, PR_GET_SECUREBITS = 23, 47, 2, 28, 27
KEPT = {0, 1, 3, 4, 5, 6, 7, 8, 10, 18, 29, 31}
NAMES = {2: "DAC_READ_SEARCH", 9: "LINUX_IMMUTABLE", 11: "NET_BROADCAST", 12: "NET_ADMIN", 13: "NET_RAW",
         14: "IPC_LOCK", 15: "IPC_OWNER", 16: "SYS_MODULE", 17: "SYS_RAWIO", 19: "SYS_PTRACE", 20: "SYS_PACCT",
         21: "SYS_ADMIN", 22: "SYS_BOOT", 23: "SYS_NICE", 24: "SYS_RESOURCE", 25: "SYS_TIME", 26: "SYS_TTY_CONFIG",
         27: "MKNOD", 28: "LEASE", 30: "AUDIT_CONTROL", 32: "MAC_OVERRIDE", 33: "MAC_ADMIN", 34: "SYSLOG",
         35: "WAKE_ALARM", 36: "BLOCK_SUSPEND", 37: "AUDIT_READ", 38: "PERFMON", 39: "BPF", 40: "CHECKPOINT_RESTORE"}


def capget():
    hdr = ctypes.create_string_buffer(struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0))
    data = ctypes.create_string_buffer(24)
    r, e = sysc(SYS_capget, hdr, data)
    if r != 0:
        raise OSError(e, "capget")
    eff0, prm0, inh0, eff1, prm1, inh1 = struct.unpack("6I", data.raw)
    return eff0 | eff1 << 32, prm0 | prm1 << 32, inh0 | inh1 << 32


def forbidden(mask):
    return [NAMES.get(b, str(b)) for b in range(64) if mask & (1 << b) and b not in KEPT]


def main():
    eff, prm, inh = capget()
    for name, mask in (("effective", eff), ("permitted", prm)):
        if forbidden(mask):
            ESCAPES.append("%s set holds %s" % (name, forbidden(mask)))
    bset = [b for b in range(41) if libc.prctl(PR_CAPBSET_READ, b, 0, 0, 0) == 1]
    if forbidden(sum(1 << b for b in bset)):
        ESCAPES.append("bounding set holds %s" % forbidden(sum(1 << b for b in bset)))
    NOTES.append("capabilities: eff %#x, bounding %d caps" % (eff, len(bset)))

    def raise_all():
        out = []
        hdr = ctypes.create_string_buffer(struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0))
        full = ctypes.create_string_buffer(struct.pack("6I", *([0xffffffff] * 6)))
        r, e = sysc(SYS_capset, hdr, full)
        out.append("capset(all): %s" % ("ok" if r == 0 else en(e)))
        e2, p2, _ = capget()
        if forbidden(e2 | p2):
            out.append("ESC capset raised %s" % forbidden(e2 | p2))
        for b in (21, 12, 19, 27):
            r = libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, b, 0, 0)
            if r == 0:
                out.append("ESC ambient raise of %s succeeded" % NAMES[b])
            else:
                out.append("ambient raise of %s: %s" % (NAMES[b], en(ctypes.get_errno())))
        # CAP_SYS_ADMIN-only actions
        r, e = sysc(SYS_sethostname, ctypes.c_char_p(b"fbx-caps"), 8)
        out.append("ESC sethostname worked" if r == 0 else "sethostname: %s" % en(e))
        r, e = sysc(SYS_unshare, 0x00020000)
        out.append("ESC unshare(CLONE_NEWNS) worked" if r == 0 else "unshare(NEWNS): %s" % en(e))
        os.makedirs("/tmp/fbx-capmnt", exist_ok=True)
        r, e = sysc(SYS_mount, ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/tmp/fbx-capmnt"), ctypes.c_char_p(b"tmpfs"), 0, None)
        out.append("ESC mount tmpfs worked" if r == 0 else "mount tmpfs: %s" % en(e))
        # dropping SECBIT_NOROOT & co. (if set) must not bring any capability back
        libc.prctl(PR_SET_SECUREBITS, 0, 0, 0, 0)
        e3, p3, _ = capget()
        if forbidden(e3 | p3):
            out.append("ESC clearing securebits raised %s" % forbidden(e3 | p3))
        return "\n".join(out)
    for line in in_child(raise_all).splitlines():
        if line.startswith("ESC "):
            ESCAPES.append(line[4:])
        else:
            NOTES.append(line)


if __name__ == "__main__":
    finish(main)
