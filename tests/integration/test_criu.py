"""CRIU detection: the start-up self-test and how /v1/info and `forkbox info` report it.

The main test daemon must find the CRIU that scripts/install-criu.sh installed and pass
a real dump/restore.  Second daemons (own state dir, run dir, TCP port and uid pool)
started with FORKBOX_CRIU pointing at broken fakes must still start, report CRIU as
unavailable with the reason, and serve sandboxes and their files.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import CLI, DAEMON, SOCKET, STATE, UnixHTTPConnection

STATE3 = "/var/lib/forkbox-test-criu"
RUN3 = "/run/forkbox-test-criu"
SOCK3 = RUN3 + "/api.sock"
PORT3 = 17422
FAKES = "/tmp/forkbox-test-criu-fakes"


def wait_criu(get_info, timeout=60):
    """/v1/info's criu object once the self-test has finished."""
    deadline = time.time() + timeout
    while True:
        criu = get_info()["criu"]
        if criu["status"] != "checking" or time.time() > deadline:
            return criu
        time.sleep(0.1)


def version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def test_info_reports_working_criu(client, cli_env):
    criu = wait_criu(lambda: client.get("/v1/info").json())
    assert criu["status"] == "available", criu
    assert criu["available"] is True
    assert criu["reason"] is None
    assert version_tuple(criu["version"]) >= (4, 0)
    assert os.access(criu["path"], os.X_OK)
    assert 0 <= criu["selftest_ms"] < 60000
    info = client.get("/v1/info").json()
    assert not any("CRIU" in m for m in info["missing"]), info["missing"]
    # the CLI shows it too
    out = subprocess.run([CLI, "info"], env=cli_env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "criu.available: true" in out.stdout
    assert "criu.version: %s" % criu["version"] in out.stdout


def write_fake(name, body):
    os.makedirs(FAKES, exist_ok=True)
    path = os.path.join(FAKES, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


class SecondDaemon:
    """A forkboxd of its own whose default template is the main test daemon's."""

    def __init__(self, criu):
        shutil.rmtree(STATE3, ignore_errors=True)
        os.makedirs(os.path.join(STATE3, "templates", "default"))
        # shares the (slow to build) default template read-only
        os.symlink(os.path.join(STATE, "templates", "default", "rootfs"),
                   os.path.join(STATE3, "templates", "default", "rootfs"))
        env = dict(os.environ, FORKBOX_CRIU=criu, FORKBOX_SOCKET=SOCK3, FORKBOX_RUN_DIR=RUN3,
                   FORKBOX_LISTEN="127.0.0.1:%d" % PORT3, FORKBOX_STATE_DIR=STATE3,
                   FORKBOX_WARM_POOL="0", FORKBOX_UID_POOL_START="250000000",
                   FORKBOX_UID_POOL_SLOTS="16")
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.started = time.time()
        self.proc = subprocess.Popen([DAEMON, "--no-default-template", "--dns-upstream", "198.18.1.53"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
            try:
                if self.request("GET", "/healthz", key=False)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        self.healthy_after = time.time() - self.started
        with open(os.path.join(STATE3, "api-key")) as f:
            self.key = f.read().strip()

    def request(self, method, path, body=None, key=True, timeout=60):
        conn = UnixHTTPConnection(SOCK3, timeout)
        headers = {"Authorization": "Bearer " + self.key} if key else {}
        data = body
        if isinstance(body, dict):
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()

    def info(self):
        status, body = self.request("GET", "/v1/info")
        assert status == 200, body
        return json.loads(body)

    def file_roundtrip(self):
        """Creates a sandbox, writes and reads a file in it, deletes it."""
        status, body = self.request("POST", "/v1/sandboxes", {})
        assert status == 201, body
        sid = json.loads(body)["id"]
        try:
            status, body = self.request("PUT", "/v1/sandboxes/%s/files?path=/root/x.txt" % sid, b"hello criu")
            assert status == 201, body
            status, body = self.request("GET", "/v1/sandboxes/%s/files?path=/root/x.txt" % sid)
            assert status == 200 and body == b"hello criu", body
        finally:
            self.request("DELETE", "/v1/sandboxes/" + sid)

    def stop(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        err = self.proc.stderr.read().decode(errors="replace")
        return rc, err


@pytest.fixture
def second_daemon(daemon):
    made = []

    def start(criu):
        d = SecondDaemon(criu)
        made.append(d)
        return d

    yield start
    for d in made:
        if d.proc.poll() is None:
            d.stop()
    shutil.rmtree(STATE3, ignore_errors=True)
    shutil.rmtree(FAKES, ignore_errors=True)


def test_broken_criu_is_reported_and_files_still_work(second_daemon):
    fake = write_fake("criu", "echo 'Error (criu/crtools.c:1): this criu cannot work' >&2; exit 1")
    d = second_daemon(fake)
    criu = wait_criu(d.info, timeout=30)
    assert criu["status"] == "unavailable" and criu["available"] is False, criu
    assert criu["path"] == fake
    assert criu["version"] is None
    assert "exited 1" in criu["reason"] and "this criu cannot work" in criu["reason"], criu
    missing = [m for m in d.info()["missing"] if "CRIU" in m]
    assert len(missing) == 1 and "this criu cannot work" in missing[0] and "501" in missing[0], missing
    d.file_roundtrip()
    rc, err = d.stop()
    assert rc == 0, err[-2000:]
    assert "memory checkpoints unavailable" in err


def test_missing_and_old_criu_reasons(second_daemon):
    d = second_daemon("/nonexistent/criu")
    criu = wait_criu(d.info, timeout=30)
    assert criu["status"] == "unavailable" and criu["path"] is None
    assert "/nonexistent/criu" in criu["reason"] and "not executable" in criu["reason"]
    assert d.stop()[0] == 0
    d = second_daemon(write_fake("criu-old", "echo 'Version: 3.17.1'"))
    criu = wait_criu(d.info, timeout=30)
    assert criu["status"] == "unavailable" and criu["version"] == "3.17.1", criu
    assert "older than 4.0" in criu["reason"]
    assert d.stop()[0] == 0


def test_hanging_criu_never_blocks_the_daemon(second_daemon):
    """A criu that never returns: the daemon answers at once (status "checking"),
    serves files meanwhile, reports a timeout at the step's deadline, and a stop
    in the middle of the self-test is prompt."""
    fake = write_fake("criu-hang", "sleep 1000")
    d = second_daemon(fake)
    assert d.healthy_after < 10
    assert d.info()["criu"]["status"] == "checking"
    d.file_roundtrip()
    criu = wait_criu(d.info, timeout=30)
    assert criu["status"] == "unavailable", criu
    assert "timed out after 10000 ms" in criu["reason"], criu
    assert 10000 <= criu["selftest_ms"] < 15000
    assert d.stop()[0] == 0
    # stopped while the self-test still runs: criu is killed, the stop is quick
    d = second_daemon(fake)
    assert d.info()["criu"]["status"] == "checking"
    t0 = time.time()
    rc, err = d.stop(timeout=10)
    assert rc == 0, err[-2000:]
    assert time.time() - t0 < 5
    # nothing of the fake is left running
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", fake], capture_output=True, text=True).stdout.split()
    assert left == [], left
