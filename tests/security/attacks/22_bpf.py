"""Create BPF maps, load BPF programs and enumerate the host's loaded programs with bpf(2)."""
import ctypes
import errno

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_bpf = 321
BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_PROG_GET_NEXT_ID, BPF_MAP_GET_NEXT_ID, BPF_BTF_GET_NEXT_ID = 0, 5, 11, 12, 23
BPF_MAP_TYPE_ARRAY, BPF_PROG_TYPE_SOCKET_FILTER, BPF_PROG_TYPE_KPROBE = 2, 1, 2


def attr(data):
    return ctypes.create_string_buffer(data + b"\0" * (144 - len(data)), 144)


def main():
    a = attr(struct.pack("IIII", BPF_MAP_TYPE_ARRAY, 4, 4, 1))
    r, e = sysc(SYS_bpf, BPF_MAP_CREATE, a, 144)
    (ESCAPES.append("BPF_MAP_CREATE gave fd %d" % r) if r >= 0 else NOTES.append("BPF_MAP_CREATE: %s" % en(e)))
    # r0 = 0; exit
    insns = ctypes.create_string_buffer(struct.pack("BBhi", 0xb7, 0, 0, 0) + struct.pack("BBhi", 0x95, 0, 0, 0))
    lic = ctypes.create_string_buffer(b"GPL")
    for ptype, name in ((BPF_PROG_TYPE_SOCKET_FILTER, "socket filter"), (BPF_PROG_TYPE_KPROBE, "kprobe")):
        a = attr(struct.pack("IIQQ", ptype, 2, ctypes.addressof(insns), ctypes.addressof(lic)))
        r, e = sysc(SYS_bpf, BPF_PROG_LOAD, a, 144)
        (ESCAPES.append("BPF_PROG_LOAD (%s) gave fd %d" % (name, r)) if r >= 0
         else NOTES.append("BPF_PROG_LOAD %s: %s" % (name, en(e))))
    for cmd, name in ((BPF_PROG_GET_NEXT_ID, "PROG_GET_NEXT_ID"), (BPF_MAP_GET_NEXT_ID, "MAP_GET_NEXT_ID"),
                      (BPF_BTF_GET_NEXT_ID, "BTF_GET_NEXT_ID")):
        a = attr(struct.pack("III", 0, 0, 0))
        r, e = sysc(SYS_bpf, cmd, a, 144)
        if r == 0:
            ESCAPES.append("bpf %s listed host object id %d" % (name, struct.unpack("I", a.raw[4:8])[0]))
        elif e == errno.ENOENT:
            ESCAPES.append("bpf %s passed the privilege check (no objects)" % name)
        else:
            NOTES.append("bpf %s: %s" % (name, en(e)))


if __name__ == "__main__":
    finish(main)
