"""Sandboxes do not depend on the daemon: kill -9 of forkboxd, then a restart."""
import os
import signal
import subprocess
import time

from conftest import RUN_DIR, STATE
from test_ports import init_pid_of


def test_sandboxes_survive_daemon_kill_and_are_readopted(daemon, client):
    """A sandbox and its background process survive SIGKILL of forkboxd; the next
    forkboxd re-adopts it: same id, still running, exec and files work, the
    background process kept its pid and state."""
    sb = client.create(labels={"restart": "yes"})
    sid = sb["id"]
    client.exec(sid, ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $! > /root/bg.pid"])
    client.put("/v1/sandboxes/%s/files?path=/root/state.txt" % sid, raw=b"before")
    time.sleep(0.2)
    pid_before = client.exec(sid, ["cat", "/root/bg.pid"])["stdout"].strip()

    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    daemon.proc = None
    daemon.start()

    got = client.get("/v1/sandboxes/" + sid)
    assert got.status == 200, got
    assert got.json()["state"] == "running"
    assert got.json()["labels"] == {"restart": "yes"}
    r = client.exec(sid, ["sh", "-c", "kill -0 %s && echo alive" % pid_before])
    assert r["stdout"] == "alive\n", r
    assert client.get("/v1/sandboxes/%s/files?path=/root/state.txt" % sid).body == b"before"
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    assert client.get("/v1/sandboxes/" + sid).status == 404


def _wait_gone(pid):
    """Until pid is gone or a zombie (its parent, the daemon, may not have reaped it yet)."""
    for _ in range(200):
        try:
            if open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except OSError:
            return
        time.sleep(0.05)
    raise AssertionError("pid %d did not die" % pid)


def _unmount_under(*prefixes):
    """Unmounts everything mounted below prefixes, deepest first (as a reboot would lose them)."""
    mounts = [l.split()[4] for l in open("/proc/self/mountinfo").read().splitlines()]
    for m in sorted({m for m in mounts if m.startswith(prefixes)}, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)


def test_host_restart_marks_sandboxes_stopped_with_the_reason(daemon, client):
    """After a simulated host restart (every sandbox process killed, every mount gone, a new boot
    id) the daemon reports the sandbox stopped and says why; it is never shown running, requests
    to it get 409 with the reason, and it can still be deleted cleanly."""
    sid = client.create(ttl=0)["id"]
    r = client.post("/v1/sandboxes/%s/processes" % sid, {"cmd": ["sleep", "1000"]})
    assert r.status == 201, r
    pid = init_pid_of(sid)
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    daemon.proc = None
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)
    _unmount_under(os.path.join(RUN_DIR, "sandboxes", sid), os.path.join(STATE, "sandboxes", sid))
    with open(os.path.join(STATE, "boot_id"), "w") as f:
        f.write("00000000-0000-0000-0000-000000000000\n")
    daemon.start()
    got = client.get("/v1/sandboxes/" + sid).json()
    assert got["state"] == "stopped" and "host restarted" in got["state_reason"], got
    listed = [s for s in client.get("/v1/sandboxes").json()["sandboxes"] if s["id"] == sid]
    assert listed[0]["state"] == "stopped"
    r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert r.status == 409 and "host restarted" in r.json()["error"]["message"], r
    assert client.get("/v1/sandboxes/%s/processes" % sid).status == 409
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    deadline = time.time() + 30
    while time.time() < deadline and os.path.exists(os.path.join(STATE, "sandboxes", sid)):
        time.sleep(0.1)
    assert not os.path.exists(os.path.join(STATE, "sandboxes", sid))


def test_sandbox_killed_under_a_running_daemon_is_not_reported_running(client):
    sid = client.create()["id"]
    try:
        pid = init_pid_of(sid)
        os.kill(pid, signal.SIGKILL)
        _wait_gone(pid)
        got = client.get("/v1/sandboxes/" + sid).json()
        assert got["state"] == "stopped" and "killed from outside" in got["state_reason"], got
        r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
        assert r.status == 409, r
    finally:
        assert client.delete("/v1/sandboxes/" + sid).status == 204
