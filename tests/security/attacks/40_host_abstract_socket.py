"""Connect to a host abstract unix socket ('\\0' + FB_HOST_ABSTRACT) with stream, seqpacket and datagram sockets."""
import errno
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402


def main():
    name = os.environ.get("FB_HOST_ABSTRACT", "")
    if not name:
        print("ERROR: FB_HOST_ABSTRACT not set")
        sys.exit(2)
    # the runner listens on @NAME (stream) and @NAME\0 (seqpacket); each is also
    # tried with the other type: EPROTOTYPE would mean the name is visible here
    for typ, tname, addr in ((socket.SOCK_STREAM, "stream", name), (socket.SOCK_SEQPACKET, "seqpacket", name + "\0"),
                             (socket.SOCK_SEQPACKET, "seqpacket", name), (socket.SOCK_STREAM, "stream", name + "\0")):
        s = socket.socket(socket.AF_UNIX, typ)
        s.settimeout(2)
        try:
            s.connect("\0" + addr)
            ESCAPES.append("%s connect to host abstract socket @%r succeeded" % (tname, addr))
        except OSError as e:
            if e.errno == errno.EPROTOTYPE:
                ESCAPES.append("host abstract socket @%r exists in this namespace (wrong type)" % addr)
            else:
                NOTES.append("%s connect @%r: %s" % (tname, addr, en(e.errno)))
        s.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(b"fbx-ping", "\0" + name + "-dgram")
        ESCAPES.append("datagram delivered to host abstract socket @%s-dgram" % name)
    except OSError as e:
        NOTES.append("sendto @%s-dgram: %s" % (name, en(e.errno)))
    # our own netns's view of abstract sockets must not include the host's
    try:
        with open("/proc/net/unix") as f:
            if ("@" + name) in f.read():
                ESCAPES.append("/proc/net/unix lists the host's @%s" % name)
    except OSError:
        pass


if __name__ == "__main__":
    finish(main)
