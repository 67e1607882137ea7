"""Fixtures that start a real forkboxd and talk to it over HTTP, as a user would.

Environment:
  FORKBOX_BUILD_DIR   meson build dir holding the binaries (default: ./build)
  FORKBOX_TEST_STATE  state dir for the test daemon (default: /var/lib/forkbox-test);
                      its templates/ survive between runs so the default template
                      (debootstrap) is built once per machine.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("FORKBOX_BUILD_DIR", os.path.join(ROOT, "build")))
STATE = os.environ.get("FORKBOX_TEST_STATE", "/var/lib/forkbox-test")
RUN_DIR = "/run/forkbox-test"
SOCKET = RUN_DIR + "/forkbox.sock"
TCP_PORT = 17420
# the test daemon's sandboxes run as uids from here on (1024 ranges of 65536)
UID_POOL_START = 100000000
UID_POOL_END = UID_POOL_START + 1024 * 65536
DAEMON = os.path.join(BUILD, "src/daemon/forkboxd")
CLI = os.path.join(BUILD, "src/cli/forkbox")


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body[:300])


class Client:
    """A tiny HTTP+JSON client: one request per call, fresh connection each time."""

    def __init__(self, key, tcp=False):
        self.key = key
        self.tcp = tcp

    def conn(self, timeout=120):
        if self.tcp:
            return http.client.HTTPConnection("127.0.0.1", TCP_PORT, timeout=timeout)
        return UnixHTTPConnection(SOCKET, timeout=timeout)

    def request(self, method, path, body=None, headers=None, key=True, timeout=120, raw=None):
        h = dict(headers or {})
        if key and self.key is not None:
            h["Authorization"] = "Bearer " + self.key
        data = None
        if raw is not None:
            data = raw
        elif body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.conn(timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            c.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def put(self, path, raw=b"", **kw):
        return self.request("PUT", path, raw=raw, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    # conveniences
    def create(self, **spec):
        r = self.post("/v1/sandboxes", spec)
        assert r.status == 201, r
        return r.json()

    def exec(self, sid, cmd, **kw):
        body = {"cmd": cmd}
        body.update(kw)
        r = self.post("/v1/sandboxes/%s/exec" % sid, body)
        assert r.status == 200, r
        return r.json()


def _wait_healthy(proc, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("forkboxd exited with %s" % proc.returncode)
        try:
            c = UnixHTTPConnection(SOCKET, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("forkboxd did not become healthy")


class Daemon:
    """A forkboxd process on the test state dir."""

    def __init__(self):
        self.proc = None
        self.log_path = os.path.join(STATE + "-logs", "forkboxd.log")

    def start(self, extra_args=()):
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        log = open(self.log_path, "ab")
        args = [DAEMON, "--state-dir", STATE, "--run-dir", RUN_DIR, "--socket", SOCKET,
                "--listen", "127.0.0.1:%d" % TCP_PORT, "--cache-dir", "/var/cache/forkbox",
                # a uid pool of its own, apart from any other forkboxd on the host
                "--uid-pool-start", str(UID_POOL_START),
                # sandboxes' DNS goes to the lab's resolver (tests/netlab), never the host's
                "--dns-upstream", "198.18.1.53"]
        args += list(extra_args)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
        _wait_healthy(self.proc, 30)
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    @property
    def key(self):
        with open(os.path.join(STATE, "api-key")) as f:
            return f.read().strip()


def wait_default_template(client, timeout=900):
    """The first start on a machine builds the default template (debootstrap)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = client.get("/v1/info").json()
        state = info["templates"]["default"]
        if state == "ready":
            return
        if state == "failed":
            raise RuntimeError("default template build failed: %s" % info["templates"].get("default_error"))
        time.sleep(1)
    raise RuntimeError("default template not ready after %ds" % timeout)


def unmount_under(*paths):
    """Lazily unmounts paths and everything mounted below them, deepest first."""
    mounts = [l.split()[4] for l in open("/proc/self/mountinfo").read().splitlines()]
    hit = {m for m in mounts for p in paths if m == p or m.startswith(p + "/")}
    for m in sorted(hit, key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)


@pytest.fixture(scope="session")
def daemon():
    # a clean slate, but keep the (slow to build) templates
    os.makedirs(STATE, exist_ok=True)
    # the storage pool's binds (and layers mounted below them) go first:
    # their contents are deleted with the pool file below
    unmount_under(os.path.join(STATE, "sandboxes"), os.path.join(STATE, "checkpoints"),
                  os.path.join(STATE, "storage.mnt"), os.path.join(STATE, "volumes"))
    for name in os.listdir(STATE):
        # the lock file stays: a daemon still running on this state dir
        # holds a flock on that very inode
        if name not in ("templates", "lock"):
            p = os.path.join(STATE, name)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
    tdir = os.path.join(STATE, "templates")
    if os.path.isdir(tdir):
        for name in os.listdir(tdir):
            if name != "default":
                shutil.rmtree(os.path.join(tdir, name), ignore_errors=True)
    d = Daemon().start()
    wait_default_template(Client(d.key))
    yield d
    # sandboxes outlive the daemon by design: leave none behind for the next run
    c = Client(d.key)
    for sb in c.get("/v1/sandboxes").json().get("sandboxes", []):
        c.delete("/v1/sandboxes/" + sb["id"])
    rc = d.stop()
    assert rc == 0, "forkboxd exited with %s (see %s)" % (rc, d.log_path)


@pytest.fixture(scope="session")
def client(daemon):
    return Client(daemon.key)


@pytest.fixture
def sandbox(client):
    sb = client.create()
    yield sb
    client.delete("/v1/sandboxes/" + sb["id"])


@pytest.fixture
def make(client):
    """Creates sandboxes with a spec and deletes them afterwards."""
    made = []

    def _make(**spec):
        sb = client.create(**spec)
        made.append(sb["id"])
        return sb

    yield _make
    for sid in made:
        client.delete("/v1/sandboxes/" + sid)


def sh(client, sid, cmd, **kw):
    """Runs cmd in the sandbox and insists that it succeeds; returns stdout."""
    r = client.exec(sid, cmd, **kw)
    assert r["exit_code"] == 0, r
    return r["stdout"]


@pytest.fixture
def cli_env(daemon):
    env = dict(os.environ)
    env["FORKBOX_SOCKET"] = SOCKET
    env["FORKBOX_STATE_DIR"] = STATE
    env.pop("FORKBOX_URL", None)
    env.pop("FORKBOX_API_KEY", None)
    return env


def wait_pool_settled(timeout=30):
    """The warm pool refills in the background: wait until it is full so
    that counts of kernel objects compare like with like."""
    key = open(os.path.join(STATE, "api-key")).read().strip()
    c = Client(key)
    deadline = time.time() + timeout
    while time.time() < deadline:
        pool = c.get("/v1/info").json().get("warm_pool", {})
        if pool.get("ready", 0) >= pool.get("target", 0) and pool.get("cleanup_pending", 0) == 0:
            time.sleep(0.2)  # a refill that just finished may still be tidying up
            return
        time.sleep(0.05)
    raise RuntimeError("warm pool did not refill")


def host_snapshot():
    """Kernel objects a sandbox could leave behind on the host."""
    wait_pool_settled()
    mountinfo = open("/proc/self/mountinfo").read().splitlines()
    mounts = len(mountinfo)
    # each sandbox's writable layer is a filesystem of its own
    layer_mounts = sum(1 for l in mountinfo if l.split()[4].startswith(STATE + "/sandboxes/"))
    cgroups = 0
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        cgroups += sum(1 for d in dirs if d.startswith("sbx_"))
    netns = len(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else 0
    procs = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/status" % p) as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            # the test daemon's sandboxes only: other daemons on the
                            # host (a developer's, a second test instance) come and go
                            if UID_POOL_START <= int(line.split()[1]) < UID_POOL_END:
                                procs += 1
                            break
            except OSError:
                pass
    sandboxes_dir = os.path.join(STATE, "sandboxes")
    layers = len(os.listdir(sandboxes_dir)) if os.path.isdir(sandboxes_dir) else 0
    return {"mounts": mounts, "cgroups": cgroups, "netns": netns, "sandbox_procs": procs,
            "writable_layers": layers, "layer_mounts": layer_mounts}


def host_pids_with_cmdline(needle):
    """Host pids whose /proc/PID/cmdline equals needle (bytes, NUL-separated)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if f.read().rstrip(b"\0") == needle:
                    out.append(int(p))
        except OSError:
            pass
    return out
