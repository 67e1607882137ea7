"""Pause and resume (cgroup freezer), and idle pauses that the next request undoes."""
import os
import signal
import time

from conftest import STATE  # noqa: F401 (kept for symmetry with the other suites)
from test_processes import COUNTER, put_file, start, text, events, wait_state


def listed_state(client, sid):
    """The state as the list shows it: listing does not count as a request to the sandbox."""
    for s in client.get("/v1/sandboxes").json()["sandboxes"]:
        if s["id"] == sid:
            return s
    raise AssertionError("sandbox %s not listed" % sid)


def freezer_state(sid):
    for path in ("/sys/fs/cgroup/freezer/forkbox/%s/freezer.state" % sid,
                 "/sys/fs/cgroup/forkbox/%s/cgroup.freeze" % sid):
        if os.path.exists(path):
            return open(path).read().strip()
    return None


def test_pause_stops_processes_and_resume_continues_them(make, client):
    sid = make()["id"]
    put_file(client, sid, "/root/counter.py", COUNTER)
    p = start(client, sid, cmd=["python3", "/root/counter.py", "-1", "0.02"])
    time.sleep(0.5)
    r = client.post("/v1/sandboxes/%s/pause" % sid)
    assert r.status == 200, r
    got = r.json()
    assert got["state"] == "paused" and "resume" in got["state_reason"], got
    assert freezer_state(sid) in ("FROZEN", "1")
    # nothing runs: requests that need its processes are refused with the reason
    r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert r.status == 409 and "paused" in r.json()["error"]["message"], r
    assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200  # again: no change
    time.sleep(1)
    r = client.post("/v1/sandboxes/%s/resume" % sid)
    assert r.status == 200 and r.json()["state"] == "running", r
    assert freezer_state(sid) in ("THAWED", "0")
    time.sleep(0.3)
    assert client.post("/v1/sandboxes/%s/processes/%d/signal" % (sid, p["pid"]), {"signal": "TERM"}).status == 204
    wait_state(client, sid, p["pid"])
    out = text(events(client, sid, p["pid"]))
    n = out.count("\n")
    # the counter went on where it stopped: no line lost, none twice
    assert n > 20 and out == "".join("line %06d\n" % i for i in range(n))
    assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200  # running already: no change


def test_paused_sandbox_can_be_deleted(client):
    sid = client.create()["id"]
    client.post("/v1/sandboxes/%s/processes" % sid, {"cmd": ["sleep", "1000"]})
    assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    deadline = time.time() + 30
    while time.time() < deadline and freezer_state(sid) is not None:
        time.sleep(0.1)
    assert freezer_state(sid) is None


def test_paused_sandbox_stays_paused_across_a_daemon_restart(daemon, client):
    sid = client.create()["id"]
    try:
        assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.proc.wait()
        daemon.proc = None
        daemon.start()
        assert listed_state(client, sid)["state"] == "paused"
        assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200
        assert client.exec(sid, ["echo", "back"])["stdout"] == "back\n"
    finally:
        client.delete("/v1/sandboxes/" + sid)


def test_idle_timeout_pauses_and_the_next_request_resumes(make, client):
    sid = make(idle_timeout=2)["id"]
    busy = make(idle_timeout=2)["id"]
    assert client.get("/v1/sandboxes/" + sid).json()["idle_timeout"] == 2
    put_file(client, busy, "/root/counter.py", COUNTER)
    start(client, busy, cmd=["python3", "/root/counter.py", "-1", "0.5"])
    deadline = time.time() + 20
    while time.time() < deadline and listed_state(client, sid)["state"] != "paused":
        time.sleep(0.25)
    got = listed_state(client, sid)
    assert got["state"] == "paused" and "idle" in got["state_reason"], got
    # a sandbox with a running process is not idle
    assert listed_state(client, busy)["state"] == "running"
    # the next request is served as if nothing happened
    r = client.exec(sid, ["echo", "awake"])
    assert r["stdout"] == "awake\n", r
    got = client.get("/v1/sandboxes/" + sid).json()
    assert got["state"] == "running" and "state_reason" not in got, got
    # and it pauses again once idle again
    deadline = time.time() + 20
    while time.time() < deadline and listed_state(client, sid)["state"] != "paused":
        time.sleep(0.25)
    assert listed_state(client, sid)["state"] == "paused"
    # a plain GET of it counts as a request too
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"


def test_bad_idle_timeout_and_pause_of_unknown(client):
    for v in (-1, "10", 1.5, 10 ** 12):
        r = client.post("/v1/sandboxes", {"idle_timeout": v})
        assert r.status == 400, (v, r)
    assert client.post("/v1/sandboxes/sbx_0000000000000000/pause").status == 404
    assert client.post("/v1/sandboxes/sbx_0000000000000000/resume").status == 404
