"""Memory features when things go wrong, each on a second daemon of its own: CRIU failing
in the middle of a dump, no working CRIU at all, a fork beyond the tenant's quota, and a
full disk.  Every refusal is clean: the sandbox runs on unchanged and nothing half-made is
left behind."""
import json
import os
import subprocess
import time

import pytest

from test_criu import STATE3, SecondDaemon, second_daemon, wait_criu, write_fake  # noqa: F401 (fixture)
from test_memory import SERVER

REAL_CRIU = "/usr/local/lib/forkbox/criu/criu"
TINY = "/tmp/forkbox-test-tiny-images"

pytestmark = pytest.mark.skipif(not os.access(REAL_CRIU, os.X_OK), reason="criu not installed")


class Box:
    """One sandbox of a second daemon running the in-memory server."""

    def __init__(self, d, **spec):
        self.d = d
        st, body = d.request("POST", "/v1/sandboxes", spec)
        assert st == 201, body
        self.id = json.loads(body)["id"]
        st, body = d.request("PUT", "/v1/sandboxes/%s/files?path=/root/server.py" % self.id, SERVER.encode())
        assert st == 201, body
        st, body = d.request("POST", "/v1/sandboxes/%s/processes" % self.id, {"cmd": ["python3", "/root/server.py"]})
        assert st == 201, body
        self.first = self.ask()

    def ask(self):
        code = ("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/', timeout=10)"
                ".read().decode())")
        for _ in range(100):
            st, body = self.d.request("POST", "/v1/sandboxes/%s/exec" % self.id, {"cmd": ["python3", "-c", code]})
            r = json.loads(body)
            if st == 200 and r["exit_code"] == 0:
                return json.loads(r["stdout"])
            time.sleep(0.1)
        raise AssertionError("no answer from %s: %r" % (self.id, body))

    def post(self, what, body=None):
        st, raw = self.d.request("POST", "/v1/sandboxes/%s/%s" % (self.id, what), body)
        return st, json.loads(raw)

    def state(self):
        st, raw = self.d.request("GET", "/v1/sandboxes/" + self.id)
        assert st == 200, raw
        return json.loads(raw)["state"]


def leftovers():
    """What a failed capture could leave in the second daemon's state dir."""
    found = []
    for sub in ("checkpoints", "sandboxes", "tmp"):
        p = os.path.join(STATE3, sub)
        if os.path.isdir(p):
            found += [sub + "/" + n for n in os.listdir(p) if n.startswith(("tmp.", ".fork.", "criu-selftest"))]
    return found


def sandbox_count(d):
    st, raw = d.request("GET", "/v1/sandboxes")
    return len(json.loads(raw)["sandboxes"])


@pytest.fixture
def tiny_fs():
    """A 512 KiB tmpfs: CRIU writing its images there runs out of space half-way."""
    os.makedirs(TINY, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tiny", TINY], check=True)
    yield TINY
    subprocess.run(["umount", "-l", TINY])


def test_criu_failing_mid_dump_leaves_the_sandbox_running_and_unchanged(second_daemon, tiny_fs):  # noqa: F811
    # dumps (but the start-up self-test's) write their images into the tiny tmpfs and
    # fail there while writing memory pages, after the processes were seized and infected
    fake = write_fake("criu-enospc", """
case "$1" in
dump)
  case "$*" in *criu-selftest*) exec %(real)s "$@";; esac
  args=""; next=0
  for a in "$@"; do
    if [ $next = 1 ]; then d=%(tiny)s/$(basename "$a"); mkdir -p "$d"; a=$d; next=0; fi
    [ "$a" = "-D" ] && next=1
    args="$args $a"
  done
  exec %(real)s $args;;
esac
exec %(real)s "$@"
""" % {"real": REAL_CRIU, "tiny": tiny_fs})
    d = second_daemon(fake)
    assert wait_criu(d.info)["status"] == "available"
    box = Box(d)
    for what, body in (("checkpoints", {"memory": True}), ("fork", {"count": 2}), ("hibernate", None)):
        st, r = box.post(what, body)
        assert st == 500 and "criu dump failed" in r["error"]["message"], (what, st, r)
        # running, the same memory, answering; nothing half-made left
        assert box.state() == "running", what
        got = box.ask()
        assert got["secret"] == box.first["secret"] and got["heap"] == box.first["heap"], what
        assert leftovers() == [], (what, leftovers())
        st, raw = d.request("GET", "/v1/sandboxes/%s/checkpoints" % box.id)
        assert json.loads(raw)["checkpoints"] == [], what
        assert sandbox_count(d) == 1, what
    # the failed dumps left the processes fit for the next: files-only checkpoints still work
    st, r = box.post("checkpoints", {"memory": False})
    assert st == 201 and r["memory"] is False, r


def test_without_criu_memory_features_answer_501_and_files_work(second_daemon):  # noqa: F811
    d = second_daemon("/nonexistent/criu")
    assert wait_criu(d.info)["status"] == "unavailable"
    st, body = d.request("POST", "/v1/sandboxes", {})
    sid = json.loads(body)["id"]
    for what, body in (("checkpoints", {"memory": True}), ("fork", {"count": 1}), ("hibernate", None)):
        st, raw = d.request("POST", "/v1/sandboxes/%s/%s" % (sid, what), body)
        err = json.loads(raw)["error"]
        assert st == 501 and err["code"] == "unsupported" and "CRIU" in err["message"], (what, st, err)
        assert "/nonexistent/criu" in err["message"]
    st, raw = d.request("POST", "/v1/sandboxes/%s/checkpoints" % sid, {"memory": False})
    assert st == 201, raw
    cid = json.loads(raw)["id"]
    st, raw = d.request("POST", "/v1/sandboxes/%s/rollback" % sid, {"checkpoint": cid})
    assert st == 200, raw
    assert sandbox_count(d) == 1


def test_fork_beyond_quota_is_refused_whole(second_daemon, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FORKBOX_MAX_SANDBOXES", "3")
    d = second_daemon(REAL_CRIU)
    assert wait_criu(d.info)["status"] == "available"
    box = Box(d)
    st, r = box.post("fork", {"count": 3})
    assert st == 429 and "limit of 3" in r["error"]["message"], r
    assert sandbox_count(d) == 1 and leftovers() == []
    st, r = box.post("fork", {"count": 2})
    assert st == 201 and len(r["sandboxes"]) == 2, r
    assert sandbox_count(d) == 3
    assert box.ask()["secret"] == box.first["secret"]


def test_full_disk_refuses_captures_cleanly(second_daemon, monkeypatch):  # noqa: F811
    monkeypatch.setenv("FORKBOX_STORAGE_SIZE", "400M")
    d = second_daemon(REAL_CRIU)
    assert wait_criu(d.info)["status"] == "available"
    assert d.info()["storage"]["kind"] == "btrfs-pool", d.info()["storage"]
    box = Box(d)
    # fill the pool from the host side until only a few MiB are left
    filler = os.path.join(STATE3, "checkpoints", "filler")
    st = os.statvfs(os.path.dirname(filler))
    left = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(max(0, left // (1 << 20) - 6)):
            try:
                f.write(chunk)
            except OSError:
                break
    os.sync()
    try:
        for what, body in (("checkpoints", {"memory": True}), ("fork", {"count": 4})):
            st, r = box.post(what, body)
            assert st == 413 and "space" in r["error"]["message"], (what, st, r)
            assert leftovers() == [] and sandbox_count(d) == 1, what
            assert box.state() == "running" and box.ask()["secret"] == box.first["secret"]
        st, raw = d.request("GET", "/v1/sandboxes/%s/checkpoints" % box.id)
        assert json.loads(raw)["checkpoints"] == []
    finally:
        os.unlink(filler)
