"""forkboxd configuration, first start and state, with a second daemon of its own."""
import http.client
import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import time

from conftest import DAEMON, UnixHTTPConnection

STATE2 = "/var/lib/forkbox-test-cfg"
RUN2 = "/run/forkbox-test-cfg"
SOCK2 = RUN2 + "/api.sock"
PORT2 = 17421


def get(conn, path, key=None):
    headers = {"Authorization": "Bearer " + key} if key else {}
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    return r.status, r.read()


def test_configured_by_environment_first_start_and_state():
    """Socket, TCP address and state dir come from FORKBOX_* variables; the first start
    creates a 0600 API key that works on both listeners; state is SQLite in WAL mode."""
    shutil.rmtree(STATE2, ignore_errors=True)
    shutil.rmtree(RUN2, ignore_errors=True)  # a socket left by an earlier run would look ready
    env = dict(os.environ, FORKBOX_SOCKET=SOCK2, FORKBOX_LISTEN="127.0.0.1:%d" % PORT2,
               FORKBOX_STATE_DIR=STATE2, FORKBOX_RUN_DIR=RUN2, FORKBOX_WARM_POOL="0",
               FORKBOX_UID_POOL_START="200000000")
    proc = subprocess.Popen([DAEMON, "--no-default-template"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        keyfile = os.path.join(STATE2, "api-key")
        deadline = time.time() + 20
        while not (os.path.exists(SOCK2) and os.path.exists(keyfile)) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert stat.S_IMODE(os.stat(keyfile).st_mode) == 0o600
        key = open(keyfile).read().strip()
        assert key.startswith("fbk_") and len(key) > 40
        for conn in (UnixHTTPConnection(SOCK2, 10), http.client.HTTPConnection("127.0.0.1", PORT2, timeout=10)):
            status, body = get(conn, "/v1/info", key)
            assert status == 200, body
            assert json.loads(body)["templates"]["default"] == "missing"
            assert get(conn, "/v1/info")[0] == 401
        db = sqlite3.connect(os.path.join(STATE2, "forkbox.db"))
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # only a hash of the key is stored
        assert key not in open(os.path.join(STATE2, "forkbox.db"), "rb").read().decode("latin-1")
        # a create from the missing default template is a clear error, not a hang
        conn = UnixHTTPConnection(SOCK2, 10)
        conn.request("POST", "/v1/sandboxes", body=b"{}", headers={"Authorization": "Bearer " + key})
        r = conn.getresponse()
        assert r.status == 404 and json.loads(r.read())["error"]["code"] == "not_found"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()[-2000:]
    # the second start reuses the key
    proc = subprocess.Popen([DAEMON, "--no-default-template"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        assert open(os.path.join(STATE2, "api-key")).read().strip() == key
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    shutil.rmtree(STATE2, ignore_errors=True)
