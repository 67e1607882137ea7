"""Reach a host-only loopback service (FB_HOST_PORT TCP, FB_HOST_UDP_PORT UDP) on 127.0.0.1, ::1 and the host's addresses."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402


def main():
    tcp = int(os.environ.get("FB_HOST_PORT", "0"))
    udp = int(os.environ.get("FB_HOST_UDP_PORT", "0"))
    if not tcp:
        print("ERROR: FB_HOST_PORT not set")
        sys.exit(2)
    addrs = ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "localhost"]
    addrs += [a for a in os.environ.get("FB_HOST_ADDRS", "").split(",") if a]
    for a in addrs:
        fam = socket.AF_INET6 if ":" in a else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect((a, tcp))
            s.settimeout(2)
            try:
                data = s.recv(100)
            except OSError:
                data = b""
            ESCAPES.append("TCP connect to %s:%d succeeded (banner %r)" % (a, tcp, data[:40]))
        except OSError as e:
            NOTES.append("tcp %s: %s" % (a, en(e.errno) if e.errno else "timeout"))
        s.close()
        if udp:
            u = socket.socket(fam, socket.SOCK_DGRAM)
            u.settimeout(1)
            try:
                u.sendto(b"fbx-ping", (a, udp))
                data = u.recv(100)
                ESCAPES.append("UDP reply from %s:%d: %r" % (a, udp, data[:40]))
            except OSError as e:
                NOTES.append("udp %s: %s" % (a, en(e.errno) if e.errno else "no reply"))
            u.close()


if __name__ == "__main__":
    finish(main)
