"""Find and connect to forkboxd's API socket or any host unix socket: known paths, every socket file on the sandbox's filesystems, and paths listed in /proc/net/unix."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402
import stat  # noqa: E402


def main():
    cands = [os.environ.get("FB_DAEMON_SOCKET", ""), "/run/forkbox/forkbox.sock", "/run/forkbox-test/forkbox.sock",
             "/var/run/forkbox/forkbox.sock", "/run/forkbox-test-cfg/api.sock", "/var/run/docker.sock",
             "/run/containerd/containerd.sock", "/run/systemd/private", "/run/dbus/system_bus_socket"]
    run = os.environ.get("FB_RUN_DIR")
    if run:
        cands.append(run + "/forkbox.sock")
    try:
        with open("/proc/net/unix") as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if len(parts) >= 8 and parts[7].startswith("/"):
                    cands.append(parts[7])
    except OSError:
        pass
    found = 0
    for top in ("/run", "/var/run", "/tmp", "/var", "/root", "/home", "/dev", "/etc", "/srv", "/opt", "/mnt"):
        for root, dirs, files in os.walk(top):
            for name in files + dirs:
                p = os.path.join(root, name)
                try:
                    if stat.S_ISSOCK(os.lstat(p).st_mode):
                        cands.append(p)
                        found += 1
                except OSError:
                    pass
    extra = []
    for c in cands:
        if c:
            extra.append("/proc/1/root" + c)
            extra.append("/proc/self/root" + c)
    tried = 0
    for path in dict.fromkeys([c for c in cands + extra if c]):
        tried += 1
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(path)
        except OSError:
            s.close()
            continue
        answer = b""
        try:
            s.sendall(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
            answer = s.recv(200)
        except OSError:
            pass
        s.close()
        ESCAPES.append("connected to unix socket %s (answer %r)" % (path, answer[:60]))
    NOTES.append("%d socket paths tried (%d socket files found in the sandbox), no connection" % (tried, found))


if __name__ == "__main__":
    finish(main)
