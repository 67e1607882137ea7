"""Sandboxes do not depend on the daemon: kill -9 of forkboxd, then a restart."""
import signal
import time


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
