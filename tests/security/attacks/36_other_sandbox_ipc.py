"""Reach another sandbox's IPC: SysV shm/msg/sem by key and by id, its POSIX message queue, its /dev/shm file and its abstract unix socket."""
import ctypes
import errno
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402

SYS_shmget, SYS_shmat, SYS_shmctl, SYS_msgget, SYS_msgctl, SYS_semget = 29, 30, 31, 68, 71, 64
SYS_mq_open = 240
IPC_STAT = 2


def main():
    key = int(os.environ.get("FB_OTHER_IPC_KEY", "0"))
    mq = os.environ.get("FB_OTHER_MQ", "")
    abstract = os.environ.get("FB_OTHER_ABSTRACT", "")
    shmfile = os.environ.get("FB_OTHER_SHM_FILE", "")
    secret = os.environ.get("FB_OTHER_SECRET", "").encode()
    if not (key and mq and abstract):
        print("ERROR: FB_OTHER_IPC_KEY/FB_OTHER_MQ/FB_OTHER_ABSTRACT not set")
        sys.exit(2)
    r, e = sysc(SYS_shmget, key, 0, 0)
    if r >= 0:
        libc.shmat.restype = ctypes.c_void_p
        addr = libc.shmat(ctypes.c_int(r), None, ctypes.c_int(0o10000))  # SHM_RDONLY
        data = ctypes.string_at(addr, 64) if addr not in (None, ctypes.c_void_p(-1).value) else b""
        ESCAPES.append("shmget found the other sandbox's segment (id %d) %r" % (r, data[:40]))
    else:
        NOTES.append("shmget(key %#x): %s" % (key, en(e)))
    r, e = sysc(SYS_msgget, key, 0)
    (ESCAPES.append("msgget found the other sandbox's queue (id %d)" % r) if r >= 0
     else NOTES.append("msgget: %s" % en(e)))
    r, e = sysc(SYS_semget, key, 0, 0)
    (ESCAPES.append("semget found the other sandbox's semaphores (id %d)" % r) if r >= 0
     else NOTES.append("semget: %s" % en(e)))
    # ids are small integers: try the first few directly
    buf = ctypes.create_string_buffer(256)
    for ident in range(0, 64):
        for nr, name in ((SYS_shmctl, "shm"), (SYS_msgctl, "msg")):
            r, e = sysc(nr, ident, IPC_STAT, buf)
            if r >= 0:
                ESCAPES.append("%sctl(IPC_STAT) works on id %d" % (name, ident))
    for kind in ("shm", "msg", "sem"):
        try:
            with open("/proc/sysvipc/" + kind) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            rows = []
        for row in rows:
            if row.split() and int(row.split()[0]) == key:
                ESCAPES.append("/proc/sysvipc/%s lists the other sandbox's key" % kind)
    r, e = sysc(SYS_mq_open, ctypes.c_char_p(mq.lstrip("/").encode()), os.O_RDONLY, 0, None)
    (ESCAPES.append("mq_open(%s) opened the other sandbox's queue" % mq) if r >= 0
     else NOTES.append("mq_open(%s): %s" % (mq, en(e))))
    if shmfile:
        try:
            with open(shmfile, "rb") as f:
                data = f.read()
            ESCAPES.append("read %s%s" % (shmfile, " with the secret" if secret in data else ""))
        except OSError as e:
            NOTES.append("%s: %s" % (shmfile, en(e.errno)))
    for typ, name in ((socket.SOCK_STREAM, "stream"), (socket.SOCK_SEQPACKET, "seqpacket")):
        s = socket.socket(socket.AF_UNIX, typ)
        s.settimeout(2)
        try:
            s.connect("\0" + abstract)
            ESCAPES.append("connected (%s) to the other sandbox's abstract socket @%s" % (name, abstract))
        except OSError as e:
            if e.errno == errno.EPROTOTYPE:
                ESCAPES.append("the other sandbox's abstract socket @%s is visible here" % abstract)
            else:
                NOTES.append("connect @%s (%s): %s" % (abstract, name, en(e.errno)))
        s.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(b"fbx", "\0" + abstract)
        ESCAPES.append("sent a datagram to the other sandbox's abstract socket")
    except OSError as e:
        if e.errno == errno.EPROTOTYPE:
            ESCAPES.append("the other sandbox's abstract socket @%s answered a datagram with EPROTOTYPE" % abstract)
        else:
            NOTES.append("sendto @%s: %s" % (abstract, en(e.errno)))


if __name__ == "__main__":
    finish(main)
