"""Shared plumbing for the netlab servers: JSON-lines event log, readiness
marker, and exiting when the process that owns the lab is gone."""
import argparse
import json
import os
import signal
import sys
import threading
import time


class EventLog:
    """Appends one JSON object per line; safe to call from many threads."""

    def __init__(self, path, service):
        self.service = service
        self.lock = threading.Lock()
        self.path = path
        self.f = open(path, "a", encoding="utf-8") if path else None

    def write(self, **fields):
        rec = {"ts": round(time.time(), 6), "service": self.service}
        rec.update(fields)
        line = json.dumps(rec, sort_keys=True, default=str) + "\n"
        with self.lock:
            if self.f:
                self.f.write(line)
                self.f.flush()
            else:
                sys.stderr.write(line)


def base_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--service", required=True, help="name used in log records")
    p.add_argument("--log", help="JSON-lines file to append records to (default: stderr)")
    p.add_argument("--ready", help="file to create once every socket is bound")
    p.add_argument("--owner-pid", type=int, default=0,
                   help="exit when this pid disappears (the test process that owns the lab)")
    return p


def watch_owner(pid):
    if not pid:
        return

    def alive():
        try:
            with open("/proc/%d/stat" % pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False

    def loop():
        while alive():
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=loop, daemon=True, name="owner-watch").start()


def mark_ready(path):
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % os.getpid())
        os.rename(tmp, path)


def serve_until_signal():
    """Block the main thread until SIGTERM/SIGINT, then exit at once."""
    def bye(signum, frame):
        os._exit(0)
    signal.signal(signal.SIGTERM, bye)
    signal.signal(signal.SIGINT, bye)
    while True:
        signal.pause()
