"""Persistent volumes: ext4 images of their own size, mounted into sandboxes (read-write or
read-only, several at once) as idmapped binds, outliving sandboxes and daemon restarts, with tar
transfers of their contents done on the host without a sandbox."""
import io
import os
import signal
import subprocess
import tarfile
import time

import pytest

from conftest import DAEMON, STATE, Client, sh

MIB = 1 << 20
VOL_DIR = os.path.join(STATE, "volumes")


@pytest.fixture
def vols(client):
    """Volume names made by a test, deleted (with their sandboxes gone) afterwards."""
    made = []
    yield made
    for name in made:
        delete_volume(client, name)


def delete_volume(client, name, timeout=20):
    deadline = time.time() + timeout
    while True:
        r = client.delete("/v1/volumes/" + name)
        if r.status in (204, 404) or time.time() > deadline:
            return r
        time.sleep(0.2)


def mkvol(client, vols, name, **kw):
    body = {"name": name}
    body.update(kw)
    r = client.post("/v1/volumes", body)
    assert r.status == 201, r
    vols.append(name)
    return r.json()


def tar_of(members):
    """members: (name, kind, data_or_target, extra tarinfo attrs)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data, attrs in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "symlink":
                info.type = tarfile.SYMTYPE
                info.linkname = data
            elif kind == "hardlink":
                info.type = tarfile.LNKTYPE
                info.linkname = data
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = 1, 3
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            for k, v in attrs.items():
                setattr(info, k, v)
            t.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return buf.getvalue()


def listing(tar_bytes):
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
        return {m.name: m for m in t.getmembers()}


def test_create_list_get_delete(client, vols):
    v = mkvol(client, vols, "basic")
    assert v["name"] == "basic" and v["size_mb"] == 1024 and v["size_bytes"] == 1024 * MIB, v
    assert v["sandboxes"] == [] and v["created_at"].endswith("Z"), v
    small = mkvol(client, vols, "basic-small", size_mb=16)
    assert small["size_mb"] == 16
    names = [x["name"] for x in client.get("/v1/volumes").json()["volumes"]]
    assert "basic" in names and "basic-small" in names
    got = client.get("/v1/volumes/basic")
    assert got.status == 200 and got.json()["size_bytes"] == 1024 * MIB, got
    # an empty volume holds nothing at all (no lost+found)
    assert got.json()["used_bytes"] is not None
    assert listing(client.get("/v1/volumes/basic/archive").body) == {}
    # the image is sparse, private, and a filesystem of its own
    img = os.path.join(VOL_DIR, "default", "basic.img")
    st = os.stat(img)
    assert st.st_size == 1024 * MIB and st.st_blocks * 512 < 64 * MIB, st
    assert st.st_mode & 0o777 == 0o600
    assert os.stat(VOL_DIR).st_mode & 0o777 == 0o700
    # taken names are 409; deletes are 204 then 404
    r = client.post("/v1/volumes", {"name": "basic"})
    assert r.status == 409, r
    assert client.delete("/v1/volumes/basic").status == 204
    assert client.get("/v1/volumes/basic").status == 404
    assert client.delete("/v1/volumes/basic").status == 404
    assert not os.path.exists(img)
    assert not os.path.ismount(os.path.join(VOL_DIR, "default", "basic.mnt"))


@pytest.mark.parametrize("body,msg", [
    ({}, "name: required"),
    ({"name": ""}, "must not be empty"),
    ({"name": "Cache"}, "name must match"),
    ({"name": "../etc"}, "name must match"),
    ({"name": "a/b"}, "name must match"),
    ({"name": ".hidden"}, "name must match"),
    ({"name": "x" * 64}, "longer than 63"),
    ({"name": 5}, "must be a string"),
    ({"name": "ok", "size_mb": 15}, "size_mb: must be an integer between 16 and 1048576"),
    ({"name": "ok", "size_mb": 1048577}, "between 16 and 1048576"),
    ({"name": "ok", "size_mb": 2 ** 62}, "size_mb"),
    ({"name": "ok", "size_mb": 10 ** 30}, "integer"),
    ({"name": "ok", "size_mb": -1}, "size_mb"),
    ({"name": "ok", "size_mb": 1.5}, "size_mb"),
    ({"name": "ok", "size_mb": "100"}, "size_mb"),
    ({"name": "ok", "size": 100}, "unknown field \"size\""),
])
def test_bad_volume_bodies(client, body, msg):
    before = client.get("/v1/volumes").json()
    r = client.post("/v1/volumes", body)
    assert r.status == 400, r
    assert msg in r.json()["error"]["message"], r
    assert client.get("/v1/volumes").json() == before


def test_bad_raw_bodies_and_names(client):
    for raw in (b"", b"{", b"[]", b"null", b"{\"name\": \"a\", \"name\": \"b\"}"):
        r = client.request("POST", "/v1/volumes", raw=raw, headers={"Content-Type": "application/json"})
        assert r.status == 400, (raw, r)
    for name in ("UPPER", "..", "a%2Fb", "-x", "x" * 100):
        assert client.get("/v1/volumes/" + name).status in (400, 404), name
        assert client.delete("/v1/volumes/" + name).status in (400, 404), name
        assert client.get("/v1/volumes/%s/archive" % name).status in (400, 404), name
    assert client.get("/v1/volumes/missing").status == 404
    assert client.request("GET", "/v1/volumes", key=False).status == 401


def test_two_sandboxes_rw_and_ro(make, client, vols):
    mkvol(client, vols, "shared")
    a = make(volumes=[{"name": "shared", "path": "/data"}])["id"]
    b = make(volumes=[{"name": "shared", "path": "/mnt/ro", "read_only": True}])["id"]
    got = client.get("/v1/sandboxes/" + a).json()
    assert got["volumes"] == [{"name": "shared", "path": "/data", "read_only": False}], got
    # root-owned inside both, although their host uid ranges differ
    assert sh(client, a, "stat -c '%u:%g %a' /data") == "0:0 755\n"
    assert sh(client, b, "stat -c '%u:%g' /mnt/ro") == "0:0\n"
    sh(client, a, "echo hello > /data/f && mkdir /data/d && chown 1000:1000 /data/d && sync")
    assert sh(client, b, "cat /mnt/ro/f") == "hello\n"
    assert sh(client, b, "stat -c '%u:%g' /mnt/ro/d /mnt/ro/f") == "1000:1000\n0:0\n"
    # read-only refuses writes inside, even for root
    erofs = ("import errno, os\n"
             "for op in (lambda: open('/mnt/ro/g', 'w'), lambda: os.unlink('/mnt/ro/f'),\n"
             "           lambda: os.mkdir('/mnt/ro/n'), lambda: os.chmod('/mnt/ro/f', 0o777)):\n"
             "    try:\n"
             "        op()\n"
             "        print('wrote')\n"
             "    except OSError as e:\n"
             "        print(errno.errorcode[e.errno])\n")
    assert client.exec(b, ["python3", "-c", erofs])["stdout"] == "EROFS\n" * 4
    assert sh(client, a, "cat /data/f") == "hello\n"
    # a user inside writes as that user; the volume stores sandbox-relative owners
    sh(client, a, "su -s /bin/sh nobody -c 'touch /tmp/ok'; chmod 1777 /data; "
                  "setpriv --reuid 1000 --regid 1000 --clear-groups touch /data/by1000")
    assert sh(client, b, "stat -c '%u:%g' /mnt/ro/by1000") == "1000:1000\n"
    # both show in the volume, and the volume cannot go while they have it
    v = client.get("/v1/volumes/shared").json()
    assert sorted(s["id"] for s in v["sandboxes"]) == sorted([a, b]), v
    r = client.delete("/v1/volumes/shared")
    assert r.status == 409, r
    msg = r.json()["error"]["message"]
    assert a in msg and b in msg, msg
    # the host's view: raw owners 0..65535, not the sandboxes' host uids
    tar = listing(client.get("/v1/volumes/shared/archive").body)
    assert tar["d"].uid == 1000 and tar["f"].uid == 0 and tar["by1000"].uid == 1000, tar


def test_survives_sandbox_delete_and_remount(make, client, vols):
    mkvol(client, vols, "keep")
    a = make(volumes=[{"name": "keep", "path": "/keep"}])["id"]
    sh(client, a, "cd /keep && head -c 3000000 /dev/urandom > blob && sha256sum blob > sum && sync")
    want = sh(client, a, "cat /keep/sum")
    assert client.delete("/v1/sandboxes/" + a).status == 204
    # a new sandbox, another uid range, sees the same files
    b = make(volumes=[{"name": "keep", "path": "/elsewhere/deep"}])["id"]
    assert sh(client, b, "cd /elsewhere/deep && sha256sum -c sum >/dev/null && cat sum") == want
    assert sh(client, b, "stat -c %u /elsewhere/deep/blob") == "0\n"


def test_delete_refused_while_mounted_then_allowed(make, client):
    r = client.post("/v1/volumes", {"name": "busy"})
    assert r.status == 201, r
    sid = make(volumes=[{"name": "busy", "path": "/b"}])["id"]
    # paused counts as mounted too
    if client.post("/v1/sandboxes/%s/pause" % sid).status == 200:
        r = client.delete("/v1/volumes/busy")
        assert r.status == 409 and sid in r.json()["error"]["message"] and "paused" in r.json()["error"]["message"]
        assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200
    r = client.delete("/v1/volumes/busy")
    assert r.status == 409 and sid in r.json()["error"]["message"], r
    assert client.get("/v1/volumes/busy").status == 200
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    assert delete_volume(client, "busy").status == 204
    assert client.get("/v1/volumes/busy").status == 404


def test_missing_volume_at_create_makes_nothing(client, vols):
    before = client.get("/v1/sandboxes").json()["sandboxes"]
    r = client.post("/v1/sandboxes", {"volumes": [{"name": "nope", "path": "/x"}]})
    assert r.status == 404 and "nope" in r.json()["error"]["message"], r
    mkvol(client, vols, "half")
    r = client.post("/v1/sandboxes", {"volumes": [{"name": "half", "path": "/h"}, {"name": "nope", "path": "/x"}]})
    assert r.status == 404, r
    assert client.get("/v1/sandboxes").json()["sandboxes"] == before
    assert client.get("/v1/volumes/half").json()["sandboxes"] == []


@pytest.mark.parametrize("vol,msg", [
    ([{"name": "v", "path": "/"}], "cannot be mounted at /"),
    ([{"name": "v", "path": "/proc/x"}], "cannot be mounted at /proc/x"),
    ([{"name": "v", "path": "/sys"}], "cannot be mounted"),
    ([{"name": "v", "path": "/dev"}], "cannot be mounted"),
    ([{"name": "v", "path": "relative"}], "volumes[0].path"),
    ([{"name": "v", "path": "/a"}, {"name": "v", "path": "/a"}], "is also"),
    ([{"name": "v", "path": "/a"}, {"name": "w", "path": "/a/b"}], "overlaps"),
    ([{"name": "Bad", "path": "/a"}], "name must match"),
    ([{"name": "v", "path": "/a", "readonly": True}], "unknown field"),
    ([{"name": "v", "path": "/a%d" % i} for i in range(17)], "at most 16"),
    ({"name": "v"}, "must be an array"),
])
def test_bad_volume_mounts(client, vol, msg):
    before = client.get("/v1/sandboxes").json()["sandboxes"]
    r = client.post("/v1/sandboxes", {"volumes": vol})
    assert r.status == 400, r
    assert msg in r.json()["error"]["message"], r
    assert client.get("/v1/sandboxes").json()["sandboxes"] == before


def test_mount_path_through_symlinks_stays_inside(make, client, vols):
    """A mount path is resolved as inside the sandbox: a symlink in the template (Debian's
    /lib -> usr/lib) leads to the same place inside, never out to the host."""
    mkvol(client, vols, "linked")
    sid = make(volumes=[{"name": "linked", "path": "/lib/forkbox-vol"}])["id"]
    assert sh(client, sid, "touch /usr/lib/forkbox-vol/x && ls /lib/forkbox-vol") == "x\n"
    # a path through a file is a clear 400
    r = client.post("/v1/sandboxes", {"volumes": [{"name": "linked", "path": "/etc/hostname/x"}]})
    assert r.status == 400 and "not a directory" in r.json()["error"]["message"], r


def test_size_limit_is_enospc_inside(make, client, vols):
    mkvol(client, vols, "tiny", size_mb=16)
    sid = make(volumes=[{"name": "tiny", "path": "/t"}])["id"]
    host_free = os.statvfs(STATE).f_bavail
    r = client.exec(sid, "dd if=/dev/zero of=/t/fill bs=1M count=64 2>&1; echo rc=$?")
    assert "No space left on device" in r["stdout"] and "rc=1" in r["stdout"], r
    size = int(sh(client, sid, "stat -c %s /t/fill"))
    assert 8 * MIB < size <= 16 * MIB, size
    # the sandbox's own disk and the host are fine
    sh(client, sid, "echo fine > /root/ok && cat /root/ok")
    assert os.statvfs(STATE).f_bavail > host_free - 64 * MIB // os.statvfs(STATE).f_frsize
    v = client.get("/v1/volumes/tiny").json()
    assert v["used_bytes"] > 8 * MIB, v
    # freeing space works
    sh(client, sid, "rm /t/fill && echo again > /t/f")


def test_archive_round_trip_without_a_sandbox(make, client, vols):
    mkvol(client, vols, "tarred")
    sid = make(volumes=[{"name": "tarred", "path": "/v"}])["id"]
    sh(client, sid, "mkdir -p /v/src/sub && echo one > /v/src/a.txt && echo two > /v/src/sub/b.txt && "
                    "chown -R 1000:1001 /v/src/sub && chmod 0640 /v/src/a.txt && "
                    "ln -s /etc/shadow /v/src/shadow && ln -s ../../../../etc/passwd /v/src/climb && "
                    "mkfifo /v/src/fifo && sync")
    r = client.get("/v1/volumes/tarred/archive?path=/src")
    assert r.status == 200 and r.headers.get("Content-Type") == "application/x-tar", r
    got = listing(r.body)
    assert set(got) == {"a.txt", "sub", "sub/b.txt", "shadow", "climb"}, sorted(got)
    # symlinks are archived as links, never followed (the host's /etc/shadow is not in the tar)
    assert got["shadow"].issym() and got["shadow"].linkname == "/etc/shadow"
    assert got["climb"].issym() and got["climb"].size == 0
    assert got["sub/b.txt"].uid == 1000 and got["sub/b.txt"].gid == 1001
    assert got["a.txt"].mode & 0o777 == 0o640 and got["a.txt"].uid == 0
    with tarfile.open(fileobj=io.BytesIO(r.body)) as t:
        assert t.extractfile("sub/b.txt").read() == b"two\n"
    # a symlinked path is refused, not followed
    sh(client, sid, "ln -s /etc /v/etc-link")
    r = client.get("/v1/volumes/tarred/archive?path=/etc-link")
    assert r.status == 400 and "symlink" in r.json()["error"]["message"], r
    assert client.get("/v1/volumes/tarred/archive?path=/missing").status == 404
    # upload into another dir, owners kept, visible in the sandbox at once
    up = tar_of([("x", "dir", b"", {"uid": 1234, "gid": 1234}),
                 ("x/data.bin", "file", b"\x00\x01payload", {"uid": 1234, "gid": 4321, "mode": 0o600}),
                 ("x/link", "symlink", "data.bin", {}),
                 ("x/hard", "hardlink", "x/data.bin", {})])
    r = client.put("/v1/volumes/tarred/archive?path=/dst", raw=up)
    assert r.status == 201, r
    assert r.json() == {"path": "/dst", "entries": 4}, r
    out = sh(client, sid, "stat -c '%u:%g %a' /v/dst/x/data.bin /v/dst/x; stat -c %h /v/dst/x/hard")
    assert out == "1234:4321 600\n1234:1234 755\n2\n", out
    assert client.exec(sid, ["cat", "/v/dst/x/link"])["stdout"] == "\x00\x01payload"
    # and back out again, byte for byte
    back = listing(client.get("/v1/volumes/tarred/archive?path=/dst").body)
    assert back["x/data.bin"].uid == 1234 and back["x/data.bin"].size == 9
    # a whole-volume upload at the root
    r = client.put("/v1/volumes/tarred/archive", raw=tar_of([("top.txt", "file", b"top", {})]))
    assert r.status == 201 and r.json()["path"] == "/", r
    assert sh(client, sid, "cat /v/top.txt") == "top"


@pytest.mark.parametrize("members,msg", [
    ([("../escape", "file", b"x", {})], "climbs above"),
    ([("a/../../escape", "file", b"x", {})], "climbs above"),
    ([("/abs", "file", b"x", {})], ""),
    ([("ok", "file", b"x", {}), ("null", "chr", b"", {})], ""),
    ([("ok", "file", b"x", {}), ("pipe", "fifo", b"", {})], ""),
    ([("l", "symlink", "/etc", {}), ("l/shadow", "file", b"x", {})], ""),
    ([("l", "symlink", "../../..", {})], ""),
    ([("h", "hardlink", "../../etc/shadow", {})], ""),
    ([("big-owner", "file", b"x", {"uid": 70000})], "owner outside 0..65535"),
])
def test_bad_uploads_change_nothing(client, vols, members, msg):
    if "badup" not in vols:
        mkvol(client, vols, "badup")
        assert client.put("/v1/volumes/badup/archive", raw=tar_of([("keep", "file", b"k", {})])).status == 201
    before = client.get("/v1/volumes/badup/archive").body
    r = client.put("/v1/volumes/badup/archive?path=/sub", raw=tar_of(members))
    assert r.status == 400, r
    assert msg in r.json()["error"]["message"], r
    assert client.get("/v1/volumes/badup/archive").body == before
    assert not os.path.exists("/escape")


def test_bad_archive_requests(client, vols):
    mkvol(client, vols, "arch")
    r = client.put("/v1/volumes/arch/archive", raw=b"not a tar at all" * 100)
    assert r.status == 400, r
    assert client.put("/v1/volumes/missing/archive", raw=tar_of([("a", "file", b"", {})])).status == 404
    assert client.get("/v1/volumes/arch/archive?path=rel").status == 400
    assert client.get("/v1/volumes/arch/archive").status == 200


def test_survives_daemon_restart(daemon, make, client, vols):
    mkvol(client, vols, "durable", size_mb=64)
    a = make(volumes=[{"name": "durable", "path": "/d"}])["id"]
    sh(client, a, "echo before > /d/f && sync")
    # a kill -9: the running sandbox keeps the volume, the new daemon mounts the same filesystem
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    daemon.proc = None
    daemon.start()
    assert sh(client, a, "cat /d/f") == "before\n"
    b = make(volumes=[{"name": "durable", "path": "/d"}])["id"]
    sh(client, b, "echo from-b >> /d/f && sync")
    assert sh(client, a, "cat /d/f") == "before\nfrom-b\n"
    # a clean stop detaches the host's mount; the sandboxes keep theirs
    assert daemon.stop() == 0
    assert not os.path.ismount(os.path.join(VOL_DIR, "default", "durable.mnt"))
    daemon.start()
    sh(client, a, "echo after-stop >> /d/f && sync")
    assert sh(client, b, "cat /d/f") == "before\nfrom-b\nafter-stop\n"
    assert b"after-stop" in client.get("/v1/volumes/durable/archive").body
    # one filesystem instance per image: every mount of it is the same device
    devs = {l.split()[2] for l in open("/proc/self/mountinfo") if "durable.mnt" in l}
    assert len(devs) == 1, devs
    client.delete("/v1/sandboxes/" + a)
    client.delete("/v1/sandboxes/" + b)


def test_survives_host_restart(daemon, client, vols):
    """After a simulated reboot (no daemon, no sandbox, nothing mounted) the image is mounted again
    from the state dir when it is next used."""
    mkvol(client, vols, "reboot")
    assert client.put("/v1/volumes/reboot/archive", raw=tar_of([("kept", "file", b"yes", {})])).status == 201
    assert daemon.stop() == 0
    mnt = os.path.join(VOL_DIR, "default", "reboot.mnt")
    assert not os.path.ismount(mnt)
    daemon.start()
    sid = client.create(volumes=[{"name": "reboot", "path": "/r"}])["id"]
    try:
        assert sh(client, sid, "cat /r/kept") == "yes"
    finally:
        client.delete("/v1/sandboxes/" + sid)


def wait_criu(client, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if client.get("/v1/info").json().get("criu", {}).get("status") != "checking":
            return
        time.sleep(0.2)


def test_memory_operations_refused_with_volumes(make, client, vols):
    wait_criu(client)
    mkvol(client, vols, "nomem")
    sid = make(volumes=[{"name": "nomem", "path": "/n"}])["id"]
    for path, body in (("hibernate", None), ("fork", {"count": 1}), ("checkpoints", {"memory": True})):
        r = client.post("/v1/sandboxes/%s/%s" % (sid, path), body)
        assert r.status in (409, 501), (path, r)
        if r.status == 409:
            assert "volumes" in r.json()["error"]["message"], (path, r)
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"
    # files-only checkpoints work; they hold the sandbox's files, not the volume's
    sh(client, sid, "echo layer > /root/l && echo vol > /n/v && sync")
    r = client.post("/v1/sandboxes/%s/checkpoints" % sid, {"name": "files"})
    assert r.status == 201, r
    ck = r.json()["id"]
    sh(client, sid, "echo later > /n/v && rm /root/l")
    r = client.post("/v1/sandboxes/%s/rollback" % sid, {"checkpoint": ck})
    assert r.status == 200, r
    # the volume is mounted again after the rollback, with its current contents
    assert sh(client, sid, "cat /root/l /n/v") == "layer\nlater\n"
    # a sandbox from the checkpoint may mount volumes of its own
    other = make(checkpoint=ck, volumes=[{"name": "nomem", "path": "/other", "read_only": True}])["id"]
    assert sh(client, other, "cat /root/l /other/v") == "layer\nlater\n"
    client.delete("/v1/checkpoints/" + ck)


def test_other_tenant_sees_nothing(client, vols):
    out = subprocess.run([DAEMON, "--state-dir", STATE, "add-key", "vol-%d" % os.getpid()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    other = Client(out.stdout.strip())
    mkvol(client, vols, "mine")
    assert client.put("/v1/volumes/mine/archive", raw=tar_of([("secret", "file", b"s", {})])).status == 201
    assert other.get("/v1/volumes").json() == {"volumes": []}
    assert other.get("/v1/volumes/mine").status == 404
    assert other.get("/v1/volumes/mine/archive").status == 404
    assert other.put("/v1/volumes/mine/archive", raw=tar_of([("x", "file", b"", {})])).status == 404
    assert other.delete("/v1/volumes/mine").status == 404
    r = other.post("/v1/sandboxes", {"volumes": [{"name": "mine", "path": "/m"}]})
    assert r.status == 404, r
    # the same name is theirs to take, and a different volume
    r = other.post("/v1/volumes", {"name": "mine", "size_mb": 32})
    assert r.status == 201, r
    assert listing(other.get("/v1/volumes/mine/archive").body) == {}
    assert other.delete("/v1/volumes/mine").status == 204
    assert client.get("/v1/volumes/mine").status == 200


def test_cli(cli_env, client, tmp_path):
    from conftest import CLI

    def cli(*args, input=None):
        return subprocess.run([CLI] + list(args), env=cli_env, input=input, capture_output=True, timeout=120)

    try:
        p = cli("volume", "create", "cli-vol", "--size", "32")
        assert p.returncode == 0 and p.stdout == b"cli-vol\n", p
        p = cli("volume", "ls")
        assert p.returncode == 0 and b"cli-vol" in p.stdout and b"NAME" in p.stdout, p
        src = tmp_path / "in.tar"
        src.write_bytes(tar_of([("hello.txt", "file", b"hi from the cli\n", {"uid": 1000, "gid": 1000})]))
        p = cli("volume", "upload", "cli-vol", str(src))
        assert p.returncode == 0 and b"1 entries" in p.stdout, p
        p = cli("--json", "create", "--volume", "cli-vol:/v:ro", "--volume", "cli-vol:/w")
        assert p.returncode == 0, p
        import json
        sid = json.loads(p.stdout)["id"]
        try:
            assert sh(client, sid, "cat /v/hello.txt; stat -c %u /w/hello.txt") == "hi from the cli\n1000\n"
            assert client.exec(sid, "touch /v/x")["exit_code"] != 0
            sh(client, sid, "echo back > /w/back.txt")
            p = cli("volume", "rm", "cli-vol")
            assert p.returncode != 0 and sid.encode() in p.stderr, p
        finally:
            client.delete("/v1/sandboxes/" + sid)
        out = tmp_path / "out.tar"
        p = cli("volume", "download", "cli-vol", "-o", str(out))
        assert p.returncode == 0, p
        got = listing(out.read_bytes())
        assert set(got) == {"hello.txt", "back.txt"} and got["hello.txt"].uid == 1000, got
        p = cli("volume", "download", "cli-vol")  # to a pipe: stdout
        assert p.returncode == 0 and set(listing(p.stdout)) == {"hello.txt", "back.txt"}, p
        p = cli("volume", "upload", "cli-vol", "-", input=tar_of([("../x", "file", b"", {})]))
        assert p.returncode != 0 and b"climbs above" in p.stderr, p
        p = cli("create", "--volume", "nocolon")
        assert p.returncode != 0 and b"NAME:/PATH" in p.stderr, p
    finally:
        delete_volume(client, "cli-vol")
    assert client.get("/v1/volumes/cli-vol").status == 404
