"""Resource exhaustion stays inside the sandbox that causes it.

Each test runs one kind of exhaustion in a small sandbox while a second
sandbox is kept busy with a background loop; afterwards the daemon, the
busy sandbox and the host are checked: they still answer, and the host's
disk did not pay for it."""
import http.client
import os
import time

import pytest

from conftest import SOCKET, STATE, UnixHTTPConnection, sh


@pytest.fixture
def bystander(make, client):
    """A second sandbox, busy with a background loop for the whole test."""
    sb = make()
    # the counter is replaced atomically, so a reader never sees it empty
    sh(client, sb["id"], "nohup sh -c 'while :; do i=$((i+1)); echo $i > /tmp/c.new; mv /tmp/c.new /tmp/count; "
                         "done' >/dev/null 2>&1 &")
    deadline = time.time() + 5
    while time.time() < deadline and client.exec(sb["id"], "test -s /tmp/count")["exit_code"] != 0:
        time.sleep(0.05)
    return sb["id"]


def assert_unharmed(client, bystander):
    """The daemon answers, the busy sandbox answers and is still busy."""
    assert client.get("/healthz").status == 200
    assert client.get("/v1/info").status == 200
    before = int(sh(client, bystander, "cat /tmp/count").strip() or 0)
    assert sh(client, bystander, "echo ok").strip() == "ok"
    time.sleep(0.2)
    after = int(sh(client, bystander, "cat /tmp/count").strip() or 0)
    assert after > before, "the bystander's loop stopped"


def usage(client, sid):
    r = client.get("/v1/sandboxes/" + sid)
    assert r.status == 200, r
    return r.json()["usage"]


def host_free_bytes():
    st = os.statvfs(STATE)
    return st.f_bavail * st.f_frsize


def test_fork_bomb_hits_pids_limit(make, client, bystander):
    """A fork bomb stops at the pids limit; the sandbox can still be used."""
    sid = make(resources={"pids": 64})["id"]
    r = client.exec(sid, ["bash", "-c", "bomb() { bomb | bomb & }; bomb; sleep 3"], timeout=8)
    assert r["exit_code"] != 0 or r["timed_out"] or "fork" in r["stderr"], r
    assert usage(client, sid)["pids"] <= 64
    assert_unharmed(client, bystander)
    # the tree is killed at the timeout; the sandbox recovers
    deadline = time.time() + 10
    while time.time() < deadline:
        r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": "echo recovered", "timeout": 5})
        if r.status == 200 and r.json()["exit_code"] == 0:
            break
        # while the bomb's processes wind down: a clear "try again"
        assert r.status in (200, 503), r
        time.sleep(0.2)
    assert r.json()["stdout"] == "recovered\n", r


def test_memory_bomb_is_oom_killed_inside(make, client, bystander):
    """A memory bomb is OOM-killed inside its sandbox and the result says so."""
    sid = make(resources={"memory_mb": 64})["id"]
    r = client.exec(sid, ["python3", "-c", "x = []\nwhile True: x.append(bytearray(16 << 20))"], timeout=30)
    assert r["oom_killed"] is True, r
    assert r["signal"] == "KILL", r
    assert_unharmed(client, bystander)
    assert sh(client, sid, "echo alive") == "alive\n"


def test_cpu_hog_is_throttled(make, client, bystander):
    """Four busy loops in a sandbox with cpus=0.5 get about half a CPU, not four."""
    sid = make(resources={"cpus": 0.5})["id"]
    start = usage(client, sid)["cpu_usec"]
    t0 = time.time()
    client.exec(sid, "for i in 1 2 3 4; do timeout 3 sh -c 'while :; do :; done' & done; wait", timeout=10)
    wall = time.time() - t0
    used = (usage(client, sid)["cpu_usec"] - start) / 1e6
    # unthrottled this would be ~min(4, host cpus) * wall; the quota allows 0.5 * wall
    assert used < 0.8 * wall, (used, wall)
    assert_unharmed(client, bystander)


def test_disk_fill_gets_enospc_and_host_disk_untouched(make, client, bystander):
    """Filling a 64 MiB disk fails with ENOSPC inside; the host's disk barely moves."""
    sid = make(resources={"disk_mb": 64})["id"]
    free_before = host_free_bytes()
    r = client.exec(sid, "dd if=/dev/urandom of=/root/fill bs=1M count=500", timeout=60)
    assert r["exit_code"] != 0, r
    assert "No space left on device" in r["stderr"], r
    u = usage(client, sid)
    assert u["disk_bytes_limit"] <= 64 << 20
    assert u["disk_bytes"] >= u["disk_bytes_limit"] - (4 << 20), u
    # the host paid at most the image's size (plus noise from other writers)
    assert free_before - host_free_bytes() < 100 << 20
    assert_unharmed(client, bystander)
    # freeing space works and the sandbox goes on
    sh(client, sid, "rm /root/fill && echo small > /root/ok && cat /root/ok")


def test_inode_exhaustion_gets_enospc(make, client, bystander):
    """Creating empty files until the inode table is full fails with ENOSPC, not the host."""
    sid = make(resources={"disk_mb": 16})["id"]
    code = ("import errno, os\nos.makedirs('/root/many', exist_ok=True)\nn = 0\n"
            "try:\n    while n < 2000000:\n        open('/root/many/%d' % n, 'w').close(); n += 1\n"
            "except OSError as e:\n    print(n, errno.errorcode[e.errno])\n")
    r = client.exec(sid, ["python3", "-c", code], timeout=120)
    assert r["exit_code"] == 0, r
    n, err = r["stdout"].split()
    assert err == "ENOSPC", r
    assert int(n) < 100000
    u = usage(client, sid)
    assert u["disk_inodes"] >= u["disk_inodes_limit"] - 16, u
    assert_unharmed(client, bystander)


def test_dev_shm_fill_is_bounded(make, client, bystander):
    """/dev/shm is a 64 MiB tmpfs with an inode cap, charged to the sandbox."""
    sid = make()["id"]
    r = client.exec(sid, "dd if=/dev/zero of=/dev/shm/fill bs=1M count=500", timeout=30)
    assert "No space left on device" in r["stderr"], r
    size = int(sh(client, sid, "stat -c %s /dev/shm/fill"))
    assert size <= 64 << 20
    sh(client, sid, "rm /dev/shm/fill")
    code = ("import errno\nn = 0\ntry:\n    while n < 1000000:\n        open('/dev/shm/%d' % n, 'w').close(); n += 1\n"
            "except OSError as e:\n    print(n, errno.errorcode[e.errno])\n")
    out = sh(client, sid, ["python3", "-c", code], timeout=60).split()
    assert out[1] == "ENOSPC" and int(out[0]) <= 16384, out
    assert_unharmed(client, bystander)


def test_fd_exhaustion_is_per_process(make, client, bystander):
    """Opening files until EMFILE stops at the sandbox's RLIMIT_NOFILE, which it cannot raise."""
    sid = make()["id"]
    code = ("import errno, os, resource\nsoft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "try:\n    resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 2, hard * 2)); raised = 'raised'\n"
            "except (ValueError, OSError):\n    raised = 'kept'\n"
            "fds = []\ntry:\n    while True: fds.append(os.open('/dev/null', os.O_RDONLY))\n"
            "except OSError as e:\n    print(soft, hard, raised, len(fds), errno.errorcode[e.errno])\n")
    # several processes at once, each to its own limit
    r = client.exec(sid, "for i in 1 2 3 4; do python3 -c \"$C\" & done; wait", env={"C": code}, timeout=60)
    lines = [l.split() for l in r["stdout"].splitlines()]
    assert len(lines) == 4, r
    for soft, hard, raised, n, err in lines:
        # 65536, or the daemon's own hard limit where that is lower
        assert soft == hard and int(hard) <= 65536 and raised == "kept" and err == "EMFILE", lines
        assert int(n) >= int(hard) - 16
    assert_unharmed(client, bystander)


def test_upload_larger_than_disk_is_refused_and_leaves_nothing(make, client, bystander):
    """A file upload bigger than the sandbox's disk gets 413 and leaves no partial file."""
    sid = make(resources={"disk_mb": 32})["id"]
    data = os.urandom(1 << 20) * 48
    r = client.put("/v1/sandboxes/%s/files?path=/root/big.bin" % sid, raw=data)
    assert r.status == 413, r
    assert r.json()["error"]["code"] == "payload_too_large"
    assert sh(client, sid, "ls -A /root | grep -c big || true").strip() == "0"
    assert usage(client, sid)["disk_bytes"] < 8 << 20
    assert_unharmed(client, bystander)


def stream_upload(path, key, total, chunk=1 << 20):
    """PUT with chunked encoding (no Content-Length): the server only finds out
    the size while reading."""
    c = UnixHTTPConnection(SOCKET, timeout=300)
    c.putrequest("PUT", path)
    c.putheader("Authorization", "Bearer " + key)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    block = b"\0" * chunk
    sent = 0
    try:
        while sent < total:
            c.send(b"%x\r\n" % len(block) + block + b"\r\n")
            sent += len(block)
        c.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may stop reading once it has refused
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def test_huge_uploads_are_bounded(make, client, bystander):
    """Uploads past the 1 GiB limit are refused (declared or streamed) and their spool is freed."""
    sid = make()["id"]
    spool_dir = os.path.join(STATE, "tmp")
    # declared too large: refused before a byte is stored
    c = UnixHTTPConnection(SOCKET, timeout=30)
    c.putrequest("PUT", "/v1/sandboxes/%s/archive?path=/root" % sid)
    c.putheader("Authorization", "Bearer " + client.key)
    c.putheader("Content-Length", str(5 << 30))
    c.endheaders()
    r = c.getresponse()
    assert r.status == 413, r.read()
    c.close()
    # streamed without a length: refused once it passes the limit
    free_before = host_free_bytes()
    status, body = stream_upload("/v1/sandboxes/%s/archive?path=/root" % sid, client.key, (1 << 30) + (8 << 20))
    assert status == 413, body
    deadline = time.time() + 5
    while time.time() < deadline and os.listdir(spool_dir):
        time.sleep(0.05)
    assert os.listdir(spool_dir) == []
    # the filesystem may free the spool's blocks a moment after the unlink
    while time.time() < deadline and free_before - host_free_bytes() >= 64 << 20:
        time.sleep(0.1)
    assert free_before - host_free_bytes() < 64 << 20
    assert_unharmed(client, bystander)
