"""Files-only checkpoints: create, list, delete, rollback, and new sandboxes from a checkpoint."""
import os
import re
import subprocess
import threading
import time

import pytest

from conftest import STATE, sh
from test_lifecycle import tenant2  # noqa: F401 (fixture)
from test_processes import COUNTER, events, put_file, start

CKPT_RE = re.compile(r"^ckpt_[0-9a-f]{16}$")
CKPT_DIR = os.path.join(STATE, "checkpoints")

# a listing of /root/w with types, sizes, modes, link targets and content hashes,
# computed inside the sandbox
TREE = ("cd /root/w && find . -printf '%p %y %s %m %l\\n' | sort && "
        "find . -type f -print0 | sort -z | xargs -0 -r sha256sum")


def checkpoint(client, sid, expect=201, **body):
    r = client.post("/v1/sandboxes/%s/checkpoints" % sid, body)
    assert r.status == expect, r
    return r.json()


def rollback(client, sid, cid, expect=200):
    r = client.post("/v1/sandboxes/%s/rollback" % sid, {"checkpoint": cid})
    assert r.status == expect, r
    return r.json()


@pytest.fixture
def ckpts(client):
    """Checkpoints to delete afterwards (they outlive their sandboxes)."""
    made = []
    yield made
    for cid in made:
        client.delete("/v1/checkpoints/" + cid)


def fill_tree(client, sid):
    sh(client, sid, "mkdir -p /root/w/sub/deeper && cd /root/w && echo one > a.txt && printf 'two\\n' > sub/b"
                    " && head -c 3000000 /dev/urandom > sub/deeper/big.bin && ln -s a.txt link"
                    " && chmod 0600 sub/b && mkdir empty && rm /etc/issue")


def test_checkpoint_change_rollback_restores_exactly(make, client, ckpts):
    sb = make()
    sid = sb["id"]
    fill_tree(client, sid)
    before = sh(client, sid, TREE)
    ck = checkpoint(client, sid, name="before-patch", memory=False)
    ckpts.append(ck["id"])
    assert CKPT_RE.match(ck["id"]), ck
    assert ck["sandbox"] == sid and ck["name"] == "before-patch" and ck["memory"] is False
    assert ck["parent"] is None and ck["template"] == "default"
    assert ck["size_bytes"] >= 3000000, ck
    assert re.match(r"^\d{4}-\d\d-\d\dT", ck["created_at"])
    assert client.get("/v1/checkpoints/" + ck["id"]).json() == ck
    # the checkpoint dir is private to the daemon
    st = os.stat(os.path.join(CKPT_DIR, ck["id"]))
    assert st.st_mode & 0o777 == 0o700

    # change, delete, add
    sh(client, sid, "cd /root/w && echo changed > a.txt && rm -r sub/deeper && echo new > c.txt"
                    " && rm link && rmdir empty && echo back > /etc/issue && rm /etc/debian_version")
    assert sh(client, sid, TREE) != before
    got = rollback(client, sid, ck["id"])
    assert got["id"] == sid and got["state"] == "running", got
    assert sh(client, sid, TREE) == before
    # a file deleted before the checkpoint stays deleted, one deleted after it is back
    assert client.exec(sid, ["test", "-e", "/etc/issue"])["exit_code"] == 1
    assert client.exec(sid, ["test", "-e", "/etc/debian_version"])["exit_code"] == 0
    # the sandbox works as before: same id, same uids, files writable
    assert sh(client, sid, "echo ok > /root/w/after && cat /root/w/after && id -u") == "ok\n0\n"
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"
    listed = client.get("/v1/sandboxes/%s/checkpoints" % sid).json()["checkpoints"]
    assert [c["id"] for c in listed] == [ck["id"]]


def test_background_process_ends_at_rollback(make, client, ckpts):
    sid = make()["id"]
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    put_file(client, sid, "/root/counter.py", COUNTER)
    p = start(client, sid, cmd=["python3", "/root/counter.py", "-1", "0.05"])
    time.sleep(0.5)
    got = {}

    def follow():
        got["evs"] = events(client, sid, p["pid"], follow=True, timeout=60)

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.5)
    rollback(client, sid, ck["id"])
    t.join(30)
    assert not t.is_alive(), "the follower never got an end of stream"
    assert got["evs"][-1]["type"] in ("exit", "lost", "end"), got["evs"][-3:]
    # the records came back empty with the files, and nothing of it runs
    assert client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"] == []
    assert "counter.py" not in sh(client, sid, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; true")
    assert sh(client, sid, ["echo", "alive"]) == "alive\n"


def test_checkpoint_during_writes_holds_whole_lines(make, client, ckpts):
    sid = make()["id"]
    p = start(client, sid, cmd=["sh", "-c", "i=0; while :; do i=$((i+1)); echo \"line $i\" >> /root/log; done"])
    time.sleep(0.5)
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    # the writer was thawed: it goes on
    n1 = int(sh(client, sid, "wc -l < /root/log"))
    time.sleep(0.3)
    assert int(sh(client, sid, "wc -l < /root/log")) > n1
    client.post("/v1/sandboxes/%s/processes/%d/signal" % (sid, p["pid"]), {"signal": "KILL"})
    rollback(client, sid, ck["id"])
    # checked inside (the log is larger than an exec's output limit)
    check = ("import sys\nd = open('/root/log').read()\nassert d.endswith('\\n'), repr(d[-40:])\n"
             "ls = d.split('\\n')[:-1]\nassert ls == ['line %d' % i for i in range(1, len(ls) + 1)]\n"
             "print(len(ls))\n")
    put_file(client, sid, "/root/check.py", check)
    assert int(sh(client, sid, ["python3", "/root/check.py"])) > 10


def test_chain_parent_delete_and_create_from_checkpoint(make, client, ckpts):
    sid = make()["id"]
    sh(client, sid, "echo v1 > /root/v")
    c1 = checkpoint(client, sid, name="one")
    ckpts.append(c1["id"])
    sh(client, sid, "echo v2 > /root/v")
    c2 = checkpoint(client, sid, name="two")
    ckpts.append(c2["id"])
    assert c2["parent"] == c1["id"]
    listed = client.get("/v1/sandboxes/%s/checkpoints" % sid).json()["checkpoints"]
    assert [c["id"] for c in listed] == [c1["id"], c2["id"]]
    # rolling back to c1 makes c1 the parent of the next one
    rollback(client, sid, c1["id"])
    assert sh(client, sid, ["cat", "/root/v"]) == "v1\n"
    c3 = checkpoint(client, sid)
    ckpts.append(c3["id"])
    assert c3["parent"] == c1["id"]

    # deleting a parent breaks nothing built on it
    assert client.delete("/v1/checkpoints/" + c1["id"]).status == 204
    assert client.get("/v1/checkpoints/" + c1["id"]).status == 404
    assert client.delete("/v1/checkpoints/" + c1["id"]).status == 404
    assert not os.path.exists(os.path.join(CKPT_DIR, c1["id"]))
    rollback(client, sid, c2["id"])
    assert sh(client, sid, ["cat", "/root/v"]) == "v2\n"

    new = make(checkpoint=c2["id"], labels={"from": "ckpt"})
    nid = new["id"]
    assert nid != sid and new["state"] == "running" and new["template"] == "default"
    assert new["labels"] == {"from": "ckpt"}
    assert sh(client, nid, ["cat", "/root/v"]) == "v2\n"
    # independent of each other, and of the checkpoint
    sh(client, nid, "echo only-new > /root/v && echo n > /root/n")
    assert sh(client, sid, ["cat", "/root/v"]) == "v2\n"
    assert client.exec(sid, ["test", "-e", "/root/n"])["exit_code"] == 1
    sh(client, sid, "echo only-old > /root/o")
    assert client.exec(nid, ["test", "-e", "/root/o"])["exit_code"] == 1
    # files belong to the new sandbox's own root
    assert sh(client, nid, "stat -c %u:%g /root/v /root") == "0:0\n0:0\n"
    # its first checkpoint descends from the one it was made from
    c4 = checkpoint(client, nid)
    ckpts.append(c4["id"])
    assert c4["parent"] == c2["id"] and c4["sandbox"] == nid


def test_checkpoint_outlives_its_sandbox(client, ckpts):
    sid = client.create()["id"]
    sh(client, sid, "echo kept > /root/k")
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    assert client.get("/v1/checkpoints/" + ck["id"]).status == 200
    assert [c["id"] for c in client.get("/v1/sandboxes/%s/checkpoints" % sid).json()["checkpoints"]] \
        == [ck["id"]]
    nid = client.create(checkpoint=ck["id"])["id"]
    try:
        assert sh(client, nid, ["cat", "/root/k"]) == "kept\n"
    finally:
        client.delete("/v1/sandboxes/" + nid)


def test_paused_sandbox_checkpoint_keeps_it_paused(make, client, ckpts):
    sid = make()["id"]
    sh(client, sid, "echo p > /root/p")
    assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "paused"
    r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert r.status == 409
    assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200
    sh(client, sid, "rm /root/p")
    rollback(client, sid, ck["id"])
    assert sh(client, sid, ["cat", "/root/p"]) == "p\n"


def test_refusals(make, client, tenant2, ckpts):  # noqa: F811
    sid = make()["id"]
    # a memory checkpoint of a paused sandbox is refused (its processes must run to be dumped)
    assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200
    r = client.post("/v1/sandboxes/%s/checkpoints" % sid, {"memory": True})
    assert r.status == 409 and "running" in r.json()["error"]["message"], r
    assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200
    for bad in ({"memory": "yes"}, {"name": 5}, {"name": "x" * 200}, {"bogus": 1}, [1]):
        assert client.post("/v1/sandboxes/%s/checkpoints" % sid, bad).status == 400, bad
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    # other tenants see nothing of it
    assert tenant2.get("/v1/checkpoints/" + ck["id"]).status == 404
    assert tenant2.delete("/v1/checkpoints/" + ck["id"]).status == 404
    assert tenant2.post("/v1/sandboxes", {"checkpoint": ck["id"]}).status == 404
    assert tenant2.get("/v1/sandboxes/%s/checkpoints" % sid).status == 404
    assert tenant2.post("/v1/sandboxes/%s/checkpoints" % sid, {}).status == 404
    other = tenant2.create()["id"]
    try:
        assert tenant2.post("/v1/sandboxes/%s/rollback" % other, {"checkpoint": ck["id"]}).status == 404
    finally:
        tenant2.delete("/v1/sandboxes/" + other)
    # unknown or malformed ids
    unknown = "ckpt_" + "0" * 16
    assert client.get("/v1/checkpoints/" + unknown).status == 404
    assert client.get("/v1/checkpoints/nope").status == 404
    assert client.delete("/v1/checkpoints/" + unknown).status == 404
    rollback(client, sid, unknown, expect=404)
    assert client.post("/v1/sandboxes", {"checkpoint": unknown}).status == 404
    assert client.post("/v1/sandboxes", {"checkpoint": "../../etc"}).status == 400
    for body in ({}, {"checkpoint": 1}, {"checkpoint": ck["id"], "x": 1}):
        assert client.post("/v1/sandboxes/%s/rollback" % sid, body).status == 400, body
    assert client.post("/v1/sandboxes/sbx_0000000000000000/checkpoints", {}).status == 404
    assert client.get("/v1/checkpoints/" + ck["id"]).status == 200


def test_rollback_to_another_template_is_a_conflict(make, client, ckpts, tmp_path):
    from test_cli import tiny_rootfs_tar
    name = "it-ckpt-" + os.urandom(3).hex()
    tarpath = str(tmp_path / "tiny.tar")
    tiny_rootfs_tar(tarpath)
    with open(tarpath, "rb") as f:
        r = client.put("/v1/templates/%s/import" % name, raw=f.read())
    assert r.status in (200, 201), r
    try:
        tiny = make(template=name)["id"]
        ck = checkpoint(client, tiny)
        ckpts.append(ck["id"])
        assert ck["template"] == name
        sid = make()["id"]
        r = client.post("/v1/sandboxes/%s/rollback" % sid, {"checkpoint": ck["id"]})
        assert r.status == 409 and name in r.json()["error"]["message"], r
        assert sh(client, sid, ["echo", "untouched"]) == "untouched\n"
        # a checkpoint of another sandbox of the same template is fine
        sh(client, tiny, "echo t > /t")
        ck2 = checkpoint(client, tiny)
        ckpts.append(ck2["id"])
        tiny2 = make(template=name)["id"]
        rollback(client, tiny2, ck2["id"])
        assert sh(client, tiny2, ["cat", "/t"]) == "t\n"
        for s in (tiny, tiny2):
            client.delete("/v1/sandboxes/" + s)
    finally:
        for cid in list(ckpts):
            client.delete("/v1/checkpoints/" + cid)
        ckpts.clear()
        deadline = time.time() + 30
        while client.delete("/v1/templates/" + name).status == 409 and time.time() < deadline:
            time.sleep(0.2)


def test_failed_copy_leaves_nothing_and_sandbox_runs(make, client):
    sid = make()["id"]
    # make sure the dir exists, then make it unwritable even for root
    os.makedirs(CKPT_DIR, exist_ok=True)
    before = set(os.listdir(CKPT_DIR))
    subprocess.run(["chattr", "+i", CKPT_DIR], check=True)
    try:
        r = client.post("/v1/sandboxes/%s/checkpoints" % sid, {"name": "doomed"})
        assert r.status >= 400, r
        assert set(os.listdir(CKPT_DIR)) == before
    finally:
        subprocess.run(["chattr", "-i", CKPT_DIR], check=True)
    assert client.get("/v1/sandboxes/%s/checkpoints" % sid).json()["checkpoints"] == []
    sb = client.get("/v1/sandboxes/" + sid).json()
    assert sb["state"] == "running"
    # not left frozen: a command runs at once
    assert client.exec(sid, ["echo", "thawed"])["stdout"] == "thawed\n"


def test_checkpoints_usage_total(make, client, ckpts):
    sid = make()["id"]
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    usage = client.get("/v1/sandboxes/" + sid).json().get("usage", {})
    if "checkpoints_bytes" in usage:
        assert usage["checkpoints_bytes"] == ck["size_bytes"]


def test_cli_checkpoint_checkpoints_rollback_rm(make, client, cli_env):
    from test_cli import fb
    sid = make()["id"]
    sh(client, sid, "echo cli > /root/c")
    cid = fb(cli_env, "checkpoint", sid, "--name", "from-cli", check=0).stdout.strip()
    assert CKPT_RE.match(cid), cid
    try:
        out = fb(cli_env, "checkpoints", sid, check=0).stdout
        lines = out.splitlines()
        assert lines[0].split()[:3] == ["ID", "NAME", "PARENT"] and lines[1].split()[:2] == [cid, "from-cli"], out
        sh(client, sid, "rm /root/c")
        assert fb(cli_env, "rollback", sid, cid, check=0).stdout == "%s: rolled back to %s\n" % (sid, cid)
        assert sh(client, sid, ["cat", "/root/c"]) == "cli\n"
        nid = fb(cli_env, "create", "--checkpoint", cid, check=0).stdout.strip()
        try:
            assert sh(client, nid, ["cat", "/root/c"]) == "cli\n"
        finally:
            client.delete("/v1/sandboxes/" + nid)
        p = fb(cli_env, "rollback", sid, "ckpt_" + "0" * 16)
        assert p.returncode == 1 and p.stderr.startswith("forkbox: "), p
    finally:
        fb(cli_env, "checkpoint", "rm", cid, check=0)
    assert client.get("/v1/checkpoints/" + cid).status == 404


def test_exec_during_rollback_is_before_or_refused(make, client, ckpts):
    sid = make()["id"]
    ck = checkpoint(client, sid)
    ckpts.append(ck["id"])
    results = []
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["echo", "x"]}, timeout=60)
            results.append(r)

    t = threading.Thread(target=loop)
    t.start()
    time.sleep(0.3)
    rollback(client, sid, ck["id"])
    time.sleep(0.3)
    stop.set()
    t.join(60)
    assert not t.is_alive()
    for r in results:
        # whole answers only: a command that ran, or a clean refusal while rolling back
        assert r.status in (200, 409, 503), r
        if r.status == 200:
            assert r.json()["stdout"] in ("x\n", ""), r
    assert any(r.status == 200 for r in results)
    assert sh(client, sid, ["echo", "after"]) == "after\n"
