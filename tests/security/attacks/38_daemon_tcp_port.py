"""Connect to forkboxd's TCP API (FB_DAEMON_PORT, default 7420) over loopback, IPv6, and the host's own addresses."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402


def main():
    ports = {int(os.environ.get("FB_DAEMON_PORT", "7420")), 7420}
    addrs = ["127.0.0.1", "127.0.1.1", "0.0.0.0", "::1", "::ffff:127.0.0.1", "::"]
    addrs += [a for a in os.environ.get("FB_HOST_ADDRS", "").split(",") if a]
    for port in sorted(ports):
        for a in addrs:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect((a, port))
            except OSError as e:
                NOTES.append("%s:%d %s" % (a, port, en(e.errno) if e.errno else "timeout"))
                s.close()
                continue
            answer = b""
            try:
                s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                answer = s.recv(200)
            except OSError:
                pass
            s.close()
            ESCAPES.append("connected to %s:%d (answer %r)" % (a, port, answer[:60]))


if __name__ == "__main__":
    finish(main)
