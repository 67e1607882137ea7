"""Layer storage: checkpoints, rollbacks and new sandboxes from checkpoints are reflinks on the
btrfs pool (blocks shared until one side writes), their disk use is reported, a full pool refuses
cleanly, --storage=plain copies plainly, and a daemon restart (or a host restart, for a pool)
finds everything again."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from conftest import DAEMON, STATE, UnixHTTPConnection, sh, unmount_under
from test_checkpoints import TREE, checkpoint, ckpts, fill_tree, rollback  # noqa: F401 (fixture)

MIB = 1 << 20
CKPT_DIR = os.path.join(STATE, "checkpoints")


def storage(client):
    return client.get("/v1/info").json()["storage"]


def listing(client, sid):
    r = client.get("/v1/sandboxes/%s/checkpoints" % sid)
    assert r.status == 200, r
    return r.json()


def test_info_reports_the_pool(client):
    st = storage(client)
    assert st["kind"] == "btrfs-pool" and st["reflink"] is True, st
    assert st["path"] == os.path.join(STATE, "storage.btrfs")
    assert 0 < st["free_bytes"] <= st["size_bytes"], st
    # sparse: the host holds what the pool uses, not its size
    assert 0 < st["host_bytes"] < st["size_bytes"], st
    for d in ("sandboxes", "checkpoints"):
        assert os.path.ismount(os.path.join(STATE, d)), d
    assert os.stat(CKPT_DIR).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(STATE, "sandboxes")).st_mode & 0o777 == 0o711


def test_checkpoint_is_a_reflink_and_stays_put(make, client, ckpts):  # noqa: F811
    sid = make()["id"]
    fill_tree(client, sid)
    sh(client, sid, "head -c 20000000 /dev/urandom > /root/w/blob && sync")
    before = sh(client, sid, TREE)
    ck = checkpoint(client, sid, name="shared")
    ckpts.append(ck["id"])
    assert ck["size_bytes"] >= 23000000, ck
    # every block is still the sandbox's too
    assert ck["exclusive_bytes"] is not None and ck["exclusive_bytes"] < MIB, ck
    # the sandbox rewrites its data: the checkpoint keeps the old blocks, now its alone
    sh(client, sid, "head -c 20000000 /dev/urandom > /root/w/blob && rm -r /root/w/sub && sync")
    got = client.get("/v1/checkpoints/" + ck["id"]).json()
    assert got["size_bytes"] == ck["size_bytes"]
    assert got["exclusive_bytes"] >= 15000000, got
    # two more checkpoints with no write between them share every block: the chain counts them
    # once, while the first one's old blocks count on their own
    ck2 = checkpoint(client, sid, name="second")
    ckpts.append(ck2["id"])
    ck3 = checkpoint(client, sid, name="third")
    ckpts.append(ck3["id"])
    lst = listing(client, sid)
    assert [c["id"] for c in lst["checkpoints"]] == [ck["id"], ck2["id"], ck3["id"]]
    total = lst["total_bytes"]
    sizes = [c["size_bytes"] for c in lst["checkpoints"]]
    assert total <= sizes[0] + sizes[1] + MIB, lst
    assert total >= sizes[0] + sizes[1] - 4 * MIB, lst
    assert lst["checkpoints"][2]["exclusive_bytes"] < MIB, lst
    # rollback to the first: byte-exact, and the checkpoint is untouched by the sandbox's later writes
    rollback(client, sid, ck["id"])
    assert sh(client, sid, TREE) == before
    sh(client, sid, "echo after > /root/w/a.txt && sync")
    rollback(client, sid, ck["id"])
    assert sh(client, sid, TREE) == before
    # a new sandbox from it: byte-exact too, and a reflink
    nid = make(checkpoint=ck["id"])["id"]
    assert sh(client, nid, TREE) == before


def test_full_pool_refuses_with_413_and_leaves_nothing(make, client, ckpts):  # noqa: F811
    sid = make()["id"]
    sh(client, sid, "echo keep > /root/keep && sync")
    listed = listing(client, sid)["checkpoints"]
    filler = os.path.join(CKPT_DIR, "filler.test")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        # fill the pool to a few MiB (blocks reserved, nothing written to the host)
        size = 0
        for _ in range(20):
            vfs = os.statvfs(CKPT_DIR)
            avail = vfs.f_bavail * vfs.f_frsize
            if avail < 12 * MIB:
                break
            step = avail - 6 * MIB
            while step > MIB:
                try:
                    os.posix_fallocate(fd, size, step)
                    size += step
                    break
                except OSError:
                    step //= 2
        vfs = os.statvfs(CKPT_DIR)
        assert vfs.f_bavail * vfs.f_frsize < 16 * MIB
        before = set(os.listdir(CKPT_DIR))
        r = client.post("/v1/sandboxes/%s/checkpoints" % sid, {"name": "no room"})
        assert r.status == 413, r
        assert r.json()["error"]["code"] == "payload_too_large", r
        assert set(os.listdir(CKPT_DIR)) == before
        assert listing(client, sid)["checkpoints"] == listed
        assert client.exec(sid, ["cat", "/root/keep"])["stdout"] == "keep\n"
    finally:
        os.close(fd)
        os.unlink(filler)
        # btrfs hands emptied data chunks back lazily (the metadata the next clone needs waits for
        # them): a balance of empty chunks does it at once
        os.sync()
        subprocess.run(["btrfs", "balance", "start", "-dusage=0", CKPT_DIR], capture_output=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            vfs = os.statvfs(CKPT_DIR)
            if vfs.f_bavail * vfs.f_frsize > 1 << 30:
                break
            time.sleep(0.5)
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])


def _restart(daemon, *args):
    daemon.stop()
    daemon.start(list(args))


def test_plain_mode_and_restart_keep_everything(daemon, make, client, ckpts):  # noqa: F811
    sid = make()["id"]
    fill_tree(client, sid)
    before = sh(client, sid, TREE)
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    try:
        _restart(daemon, "--storage=plain")
        st = storage(client)
        # the pool stays mounted (its layers live there), but nothing is cloned
        assert st["kind"] == "btrfs-pool" and st["reflink"] is False and "plain" in st["note"], st
        assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"
        sh(client, sid, "echo changed > /root/w/a.txt")
        rollback(client, sid, ck["id"])
        assert sh(client, sid, TREE) == before
        ck2 = checkpoint(client, sid, name="plain")
        ckpts.append(ck2["id"])
        assert ck2["size_bytes"] >= 3000000
    finally:
        _restart(daemon)
    st = storage(client)
    assert st["kind"] == "btrfs-pool" and st["reflink"] is True, st
    # what was made before the restarts is all there and usable
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"
    assert [c["id"] for c in listing(client, sid)["checkpoints"]] == [ck["id"], ck2["id"]]
    sh(client, sid, "rm -r /root/w")
    rollback(client, sid, ck2["id"])
    assert sh(client, sid, TREE) == before
    nid = make(checkpoint=ck["id"])["id"]
    assert sh(client, nid, TREE) == before


class Lone:
    """A second forkboxd on a state dir of its own, without templates, sandboxes or TCP: enough to
    see what it makes of its storage."""

    def __init__(self, state):
        self.state = state
        self.sock = os.path.join("/run/fb-st-%d" % os.getpid(), "fb.sock")
        self.proc = None

    def start(self, *args):
        log = open(self.state + ".log", "ab")
        self.proc = subprocess.Popen(
            [DAEMON, "--state-dir", self.state, "--run-dir", os.path.dirname(self.sock), "--socket",
             self.sock, "--listen", "none", "--no-default-template", "--warm-pool", "0",
             "--uid-pool-start", "300000000", "--uid-pool-slots", "4"] + list(args),
            stdout=log, stderr=log)
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, open(self.state + ".log").read()[-2000:]
            try:
                c = UnixHTTPConnection(self.sock, timeout=2)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("lone daemon did not start")

    def storage(self):
        key = open(os.path.join(self.state, "api-key")).read().strip()
        c = UnixHTTPConnection(self.sock, timeout=10)
        c.request("GET", "/v1/info", headers={"Authorization": "Bearer " + key})
        import json
        return json.loads(c.getresponse().read())["storage"]

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(timeout=30) == 0
            self.proc = None


def test_small_pool_plain_state_and_host_restart(daemon):
    base = tempfile.mkdtemp(prefix="fb-storage-", dir="/var/tmp")
    state = os.path.join(base, "state")
    lone = Lone(state)
    try:
        lone.start("--storage-size", "300M")
        st = lone.storage()
        assert st["kind"] == "btrfs-pool" and st["reflink"] is True, st
        assert 200 * MIB < st["size_bytes"] <= 300 * MIB, st
        assert os.stat(os.path.join(state, "storage.btrfs")).st_size == 300 * MIB
        with open(os.path.join(state, "checkpoints", "marker"), "w") as f:
            f.write("kept")
        lone.stop()
        # a host restart loses every mount; the next start mounts the same pool again
        unmount_under(os.path.join(state, "sandboxes"), os.path.join(state, "checkpoints"))
        assert not os.path.ismount(os.path.join(state, "checkpoints"))
        lone.start()
        assert lone.storage()["kind"] == "btrfs-pool"
        assert open(os.path.join(state, "checkpoints", "marker")).read() == "kept"
        lone.stop()
        unmount_under(os.path.join(state, "sandboxes"), os.path.join(state, "checkpoints"))
        # a state dir with --storage=plain gets no pool at all
        plain = os.path.join(base, "plain")
        lone2 = Lone(plain)
        try:
            lone2.start("--storage=plain")
            st = lone2.storage()
            assert st["kind"] == "plain" and st["reflink"] is False, st
            assert not os.path.exists(os.path.join(plain, "storage.btrfs"))
            assert not os.path.ismount(os.path.join(plain, "sandboxes"))
        finally:
            lone2.stop()
    finally:
        lone.stop() if lone.proc else None
        unmount_under(os.path.join(state, "sandboxes"), os.path.join(state, "checkpoints"))
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(os.path.dirname(lone.sock), ignore_errors=True)
