"""Checkpoint export / import (docs/checkpoint-format.md) and image archives of a sandbox."""
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import CLI, STATE, sh
from test_lifecycle import tenant2  # noqa: F401 (fixture)

CKPT_DIR = os.path.join(STATE, "checkpoints")
TMP_DIR = os.path.join(STATE, "tmp")
CRIT = "/usr/local/lib/forkbox/criu/crit"

# what a round trip must keep, computed inside the sandbox: types, sizes, modes,
# owners, link counts, link targets, user xattrs and content hashes
TREE = ("cd /root/w && find . -printf '%p %y %s %m %u:%g %n %l\\n' | sort && "
        "find . -type f -print0 | sort -z | xargs -0 -r sha256sum && "
        "python3 -c 'import os; print(os.getxattr(\"xattr.txt\", \"user.note\"))' && "
        "ls -A /etc/apt && test ! -e /etc/issue && echo issue-gone")


def fill(client, sid):
    """Every kind of entry an upper dir holds, whiteouts and an opaque dir included."""
    sh(client, sid, "mkdir -p /root/w/sub/deeper /root/w/empty && cd /root/w && echo one > a.txt"
                    " && printf 'two\\n' > sub/b && chmod 0600 sub/b && chmod 4755 sub"
                    " && head -c 300000 /dev/urandom > sub/deeper/big.bin"
                    " && ln -s a.txt link && ln -s /etc/hostname abslink && ln a.txt hard"
                    " && echo mine > owned && chown 1000:1001 owned && chown 65534:65534 empty"
                    " && echo x > xattr.txt && python3 -c 'import os; os.setxattr(\"xattr.txt\", \"user.note\", b\"kept\")'"
                    " && touch -d 2001-02-03T04:05:06 a.txt"
                    # a deleted template file (a whiteout) and a replaced template dir (opaque)
                    " && rm /etc/issue && rm -r /etc/apt && mkdir /etc/apt && echo fresh > /etc/apt/only")


def checkpoint(client, sid, **body):
    r = client.post("/v1/sandboxes/%s/checkpoints" % sid, body)
    assert r.status == 201, r
    return r.json()


def export(client, cid):
    r = client.get("/v1/checkpoints/%s/export" % cid)
    assert r.status == 200, r
    assert r.headers.get("Content-Type") == "application/x-tar"
    return r.body


def do_import(client, data, expect=201):
    r = client.post("/v1/checkpoints/import", raw=data)
    assert r.status == expect, r
    return r.json()


def members(data):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]


def retar(entries):
    """A tar of (name, bytes) regular files, in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, blob in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(blob)
            t.addfile(ti, io.BytesIO(blob))
    return buf.getvalue()


def with_manifest(entries, edit):
    """The export's entries with the manifest edited by edit(dict) and re-dumped."""
    man = json.loads(entries[0][1])
    edit(man)
    return [("manifest.json", json.dumps(man).encode())] + entries[1:]


def with_layer(entries, layer_tar):
    """The export's entries with another rootfs/layer.tar (manifest kept consistent)."""
    def edit(man):
        for m in man["members"]:
            if m["name"] == "rootfs/layer.tar":
                m["size"] = len(layer_tar)
                m["sha256"] = hashlib.sha256(layer_tar).hexdigest()
    out = with_manifest(entries, edit)
    return [(n, layer_tar if n == "rootfs/layer.tar" else b) for n, b in out]


def state_listing():
    ck = sorted(os.listdir(CKPT_DIR)) if os.path.isdir(CKPT_DIR) else []
    tmp = sorted(n for n in os.listdir(TMP_DIR) if not n.startswith("upload."))
    return ck, tmp


@pytest.fixture
def ckpts(client):
    made = []
    yield made
    for cid in made:
        client.delete("/v1/checkpoints/" + cid)


def roundtrip(client, ckpts, memory_files=None):
    """export -> delete the checkpoint and its sandbox -> import -> create -> compare.
    memory_files: {name: bytes} placed as the checkpoint's criu/ images first
    (the memory variant checks them byte for byte)."""
    sid = client.create()["id"]
    fill(client, sid)
    before = sh(client, sid, TREE)
    ck = checkpoint(client, sid, name="exported")
    if memory_files:
        d = os.path.join(CKPT_DIR, ck["id"], "criu")
        os.mkdir(d, 0o700)
        for n, b in memory_files.items():
            with open(os.path.join(d, n), "wb") as f:
                f.write(b)
    data = export(client, ck["id"])
    names = [n for n, _ in members(data)]
    assert names[0] == "manifest.json" and names[1] == "rootfs/layer.tar", names
    assert client.delete("/v1/checkpoints/" + ck["id"]).status == 204
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    assert not os.path.exists(os.path.join(CKPT_DIR, ck["id"]))

    got = do_import(client, data)
    ckpts.append(got["id"])
    assert re.match(r"^ckpt_[0-9a-f]{16}$", got["id"]) and got["id"] != ck["id"], got
    assert got["name"] == "exported" and got["template"] == "default", got
    assert got["memory"] is bool(memory_files), got
    sb = client.post("/v1/sandboxes", {"checkpoint": got["id"]})
    if memory_files:
        # synthetic images restore no processes: refused cleanly, nothing left
        assert sb.status == 409 and "cannot be restored" in sb.json()["error"]["message"], sb
        return got, data
    assert sb.status == 201, sb
    nsid = sb.json()["id"]
    try:
        assert sh(client, nsid, TREE) == before
        assert sh(client, nsid, "cat /etc/apt/only; echo w > /root/w/new && id -u") == "fresh\n0\n"
    finally:
        client.delete("/v1/sandboxes/" + nsid)
    return got, data


def test_export_import_files_round_trip(client, ckpts):
    got, data = roundtrip(client, ckpts)
    ents = dict(members(data))
    man = json.loads(ents["manifest.json"])
    assert man["format"] == "forkbox-checkpoint" and man["version"] == 1, man
    assert man["template"]["name"] == "default" and man["template"]["digest"].startswith("sha256:")
    assert man["memory"] is False and [m["name"] for m in man["members"]] == ["rootfs/layer.tar"]
    layer = ents["rootfs/layer.tar"]
    assert man["members"][0]["sha256"] == hashlib.sha256(layer).hexdigest()
    assert man["members"][0]["size"] == len(layer)
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        by = {m.name.rstrip("/"): m for m in t.getmembers()}
    # OCI whiteouts and owners as the uids inside
    assert "etc/.wh.issue" in by and by["etc/.wh.issue"].isfile()
    assert "etc/apt/.wh..wh..opq" in by
    assert by["root/w/owned"].uid == 1000 and by["root/w/owned"].gid == 1001
    assert by["root/w/a.txt"].uid == 0
    assert by["root/w/hard"].islnk() or by["root/w/a.txt"].islnk()
    assert by["root/w/abslink"].linkname == "/etc/hostname"
    assert not any(n.startswith("/") or ".." in n.split("/") for n in by)
    # the imported checkpoint's files are its own: nothing points at the old one
    assert os.stat(os.path.join(CKPT_DIR, got["id"])).st_mode & 0o777 == 0o700


def crit_pstree():
    """A small, real CRIU image made with crit itself."""
    src = {"magic": "PSTREE", "entries": [{"pid": 1, "ppid": 0, "pgid": 1, "sid": 1}]}
    out = subprocess.run([CRIT, "encode"], input=json.dumps(src).encode(), capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.skipif(not os.path.exists(CRIT), reason="crit not installed (scripts/install-criu.sh)")
def test_export_import_criu_dir_byte_exact(client, ckpts, tmp_path):
    images = {"pstree.img": crit_pstree(), "pages-1.img": os.urandom(8192), "inventory.img": b"\x00" * 10}
    got, data = roundtrip(client, ckpts, memory_files=images)
    ents = dict(members(data))
    man = json.loads(ents["manifest.json"])
    assert man["memory"] is True
    assert sorted(m["name"] for m in man["members"]) == sorted(
        ["rootfs/layer.tar"] + ["criu/" + n for n in images])
    # the exported copy reads with CRIU's own tool
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        t.extractall(tmp_path)
    out = subprocess.run([CRIT, "decode", "-i", str(tmp_path / "criu" / "pstree.img")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["entries"][0]["pid"] == 1, out
    d = os.path.join(CKPT_DIR, got["id"], "criu")
    assert sorted(os.listdir(d)) == sorted(images)
    for n, b in images.items():
        assert open(os.path.join(d, n), "rb").read() == b


def test_export_import_memory_checkpoint(client, ckpts):
    """Export a memory checkpoint, delete the checkpoint and its sandbox, import the tar,
    create a sandbox from it: the Python process is back with the state it held in memory."""
    from test_memory import ask, assert_contiguous, setup_workload, wait_more_lines
    sid = client.create()["id"]
    try:
        _, _, first = setup_workload(client, sid)
        ask(client, sid, "POST")
        r = client.post("/v1/sandboxes/%s/checkpoints" % sid, {"memory": True})
        assert r.status == 201, r
        ck = r.json()
        data = export(client, ck["id"])
        names = [n for n, _ in members(data)]
        assert "criu/pstree.img" in names and "criu/forkbox-externals.json" in names, names
    finally:
        client.delete("/v1/sandboxes/" + sid)
    assert client.delete("/v1/checkpoints/" + ck["id"]).status == 204
    got = do_import(client, data)
    ckpts.append(got["id"])
    assert got["memory"] is True and got["id"] != ck["id"]
    assert os.path.isfile(os.path.join(CKPT_DIR, got["id"], "criu", "pstree.img"))
    r = client.post("/v1/sandboxes", {"checkpoint": got["id"]})
    assert r.status == 201, r
    new = r.json()["id"]
    try:
        back = ask(client, new)
        assert back["secret"] == first["secret"] and back["count"] == 1 and back["heap"] == first["heap"], back
        assert_contiguous(wait_more_lines(client, new, 10))
    finally:
        client.delete("/v1/sandboxes/" + new)


@pytest.fixture(scope="module")
def good_export(client):
    sid = client.create()["id"]
    sh(client, sid, "echo hi > /root/hi && rm /etc/issue")
    ck = checkpoint(client, sid)
    data = export(client, ck["id"])
    client.delete("/v1/checkpoints/" + ck["id"])
    client.delete("/v1/sandboxes/" + sid)
    return data


def layer_with(*extra):
    """A layer tar holding these (TarInfo, data) entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for ti, blob in extra:
            t.addfile(ti, io.BytesIO(blob) if blob else None)
    return buf.getvalue()


def tinfo(name, type_=tarfile.REGTYPE, linkname="", size=0, devmajor=0, devminor=0):
    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.linkname = linkname
    ti.size = size
    ti.devmajor, ti.devminor = devmajor, devminor
    return ti


def bad_exports(data):
    ents = members(data)
    truncated = data[:len(data) // 2]
    corrupt = [(n, (b[:1000] + bytes([b[1000] ^ 1]) + b[1001:]) if n == "rootfs/layer.tar" else b)
               for n, b in ents]
    return {
        "truncated": (truncated, 400, ""),
        "corrupt member": (retar(corrupt), 400, "sha256"),
        "dotdot member": (retar(with_layer(ents, layer_with((tinfo("../evil", size=1), b"x")))), 400, ""),
        "absolute member": (retar(with_layer(ents, layer_with((tinfo("/evil", size=1), b"x")))), 400, ""),
        "symlink escaping": (retar(with_layer(ents, layer_with(
            (tinfo("root/esc", tarfile.SYMTYPE, "../../../../../etc"), None)))), 400, "outside"),
        "device node": (retar(with_layer(ents, layer_with(
            (tinfo("root/null", tarfile.CHRTYPE, devmajor=1, devminor=3), None)))), 400, "device"),
        "through symlink": (retar(with_layer(ents, layer_with(
            (tinfo("root/l", tarfile.SYMTYPE, "/etc"), None), (tinfo("root/l/passwd", size=1), b"x")))), 400, ""),
        "missing manifest": (retar(ents[1:]), 400, "manifest.json"),
        "duplicate manifest": (retar(ents + [ents[0]]), 400, "second"),
        "wrong version": (retar(with_manifest(ents, lambda m: m.update(version=99))), 400, "version"),
        "unknown field": (retar(with_manifest(ents, lambda m: m.update(extra=1))), 400, "unknown"),
        "member not listed": (retar(ents + [("criu/x.img", b"x")]), 400, "not in the manifest"),
        "listed member missing": (retar(with_manifest(ents, lambda m: m["members"].append(
            {"name": "criu/x.img", "size": 1, "sha256": "0" * 64}) or m.update(memory=True))), 400, "missing"),
        "template mismatch": (retar(with_manifest(ents, lambda m: m["template"].update(digest="sha256:" + "a" * 64))),
                              409, "not the one"),
        "template unknown": (retar(with_manifest(ents, lambda m: m["template"].update(name="nosuch"))),
                             409, "does not exist"),
        "not a tar": (b"hello" * 100, 400, ""),
    }


@pytest.mark.parametrize("case", ["truncated", "corrupt member", "dotdot member", "absolute member",
                                  "symlink escaping", "device node", "through symlink", "missing manifest", "duplicate manifest",
                                  "wrong version", "unknown field", "member not listed", "listed member missing",
                                  "template mismatch", "template unknown", "not a tar"])
def test_import_refuses_bad_exports(client, good_export, case):
    data, status, words = bad_exports(good_export)[case]
    before = state_listing()
    r = client.post("/v1/checkpoints/import", raw=data)
    assert r.status == status, (case, r)
    msg = r.json()["error"]["message"]
    assert words in msg, (case, msg)
    assert state_listing() == before, case
    assert not any(n.startswith("tmp.") for n in os.listdir(CKPT_DIR))


def test_import_compressed_and_tenants(client, tenant2, good_export, ckpts):  # noqa: F811
    import gzip
    mine = do_import(client, gzip.compress(good_export, 1))
    ckpts.append(mine["id"])
    # another tenant sees nothing of it, and imports a copy of its own
    assert tenant2.get("/v1/checkpoints/%s/export" % mine["id"]).status == 404
    theirs = do_import(tenant2, good_export)
    assert theirs["id"] != mine["id"]
    assert client.get("/v1/checkpoints/" + theirs["id"]).status == 404
    sb = tenant2.post("/v1/sandboxes", {"checkpoint": theirs["id"]})
    assert sb.status == 201, sb
    sid = sb.json()["id"]
    assert sh(tenant2, sid, "cat /root/hi; test -e /etc/issue || echo gone") == "hi\ngone\n"
    tenant2.delete("/v1/sandboxes/" + sid)
    assert tenant2.delete("/v1/checkpoints/" + theirs["id"]).status == 204
    assert client.get("/v1/checkpoints/nope/export").status == 404


def test_empty_import_body(client):
    r = client.post("/v1/checkpoints/import", raw=b"")
    assert r.status == 400, r


# ---- image archives -----------------------------------------------------------

def podman_ready():
    if shutil.which("podman") is None or shutil.which("runc") is None:
        pytest.skip("podman/runc not installed (scripts/install-deps.sh test)")
    conf = "/etc/containers/containers.conf"
    text = open(conf).read() if os.path.exists(conf) else ""
    if not re.search(r"^\s*default_ulimits\s*=", text, re.M):
        # podman's default ulimits fail on this host's cgroup layout (see bench/setup-peers.sh)
        os.makedirs("/etc/containers", exist_ok=True)
        if re.search(r"^\s*\[containers\]\s*$", text, re.M):
            text = re.sub(r"^(\s*\[containers\]\s*)$", r"\1\ndefault_ulimits = []", text, count=1, flags=re.M)
        else:
            text += "\n[containers]\ndefault_ulimits = []\n"
        with open(conf, "w") as f:
            f.write(text)


def podman(*args, timeout=300):
    return subprocess.run(["podman"] + list(args), capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("fmt", ["oci", "docker"])
def test_image_archive_loads_and_runs_in_podman(client, make, tmp_path, fmt):
    podman_ready()
    sid = make(env={"GREETING": "hello"}, workdir="/srv")["id"]
    sh(client, sid, "echo marker-%s > /root/marker && rm /etc/debian_version" % fmt)
    r = client.get("/v1/sandboxes/%s/export?format=%s" % (sid, fmt), timeout=600)
    assert r.status == 200, r
    path = tmp_path / "img.tar"
    path.write_bytes(r.body)
    image = "localhost/forkbox/%s:latest" % sid
    try:
        out = podman("load", "-i", str(path))
        assert out.returncode == 0, out.stderr
        run = podman("run", "--rm", "--runtime", "runc", "--network", "none", image, "sh", "-c",
                     "cat /root/marker; test -e /etc/debian_version || echo deleted; pwd; echo $GREETING")
        assert run.returncode == 0, run.stderr
        assert run.stdout == "marker-%s\ndeleted\n/srv\nhello\n" % fmt, run.stdout
    finally:
        podman("rmi", "-f", image)
    # the sandbox ran on: it was only frozen while its layer was read
    assert sh(client, sid, "echo alive") == "alive\n"


def test_image_export_refusals(client, sandbox):
    assert client.get("/v1/sandboxes/%s/export?format=zip" % sandbox["id"]).status == 400
    assert client.get("/v1/sandboxes/sbx_0000000000000000/export").status == 404


def test_cli_export_import(client, make, cli_env, tmp_path, ckpts):
    sid = make()["id"]
    sh(client, sid, "echo cli > /root/c")
    cid = checkpoint(client, sid)["id"]
    ckpts.append(cid)
    f = tmp_path / "ck.tar"
    out = subprocess.run([CLI, "checkpoint", "export", cid, "-o", str(f)], env=cli_env, capture_output=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    stdout = subprocess.run([CLI, "checkpoint", "export", cid], env=cli_env, capture_output=True, timeout=300)
    assert stdout.returncode == 0 and stdout.stdout[:512] == f.read_bytes()[:512]
    out = subprocess.run([CLI, "checkpoint", "import", str(f)], env=cli_env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    nid = out.stdout.strip()
    assert re.match(r"^ckpt_[0-9a-f]{16}$", nid) and nid != cid
    ckpts.append(nid)
    img = tmp_path / "img.tar"
    out = subprocess.run([CLI, "export", sid, "--format", "oci", "-o", str(img)], env=cli_env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    with tarfile.open(img) as t:
        assert {"oci-layout", "index.json"} <= set(t.getnames())


def test_template_identity(client, ckpts, tmp_path):
    """An export names its template by digest: the same template imported again
    (same files) takes it, another template's files under the same name do not;
    a template cannot be deleted while a checkpoint still uses it."""
    import time
    from test_cli import tiny_rootfs_tar
    name = "it-export-" + os.urandom(3).hex()
    tarpath = str(tmp_path / "tiny.tar")
    tiny_rootfs_tar(tarpath)
    blob = open(tarpath, "rb").read()

    def delete_template():
        deadline = time.time() + 30
        while client.delete("/v1/templates/" + name).status == 409 and time.time() < deadline:
            time.sleep(0.2)

    assert client.put("/v1/templates/%s/import" % name, raw=blob).status == 201
    try:
        sid = client.create(template=name)["id"]
        sh(client, sid, "echo t > /t")
        ck = checkpoint(client, sid)
        data = export(client, ck["id"])
        client.delete("/v1/sandboxes/" + sid)
        r = client.delete("/v1/templates/" + name)
        assert r.status == 409 and ck["id"] in r.json()["error"]["message"], r
        assert client.delete("/v1/checkpoints/" + ck["id"]).status == 204
        delete_template()
        assert client.get("/v1/templates/" + name).status == 404
        r = client.post("/v1/checkpoints/import", raw=data)
        assert r.status == 409 and "does not exist" in r.json()["error"]["message"], r
        # the same tarball again gives the same files, so the same digest
        assert client.put("/v1/templates/%s/import" % name, raw=blob).status == 201
        again = do_import(client, data)
        sb = client.post("/v1/sandboxes", {"checkpoint": again["id"]})
        assert sb.status == 201, sb
        assert sh(client, sb.json()["id"], ["cat", "/t"]) == "t\n"
        client.delete("/v1/sandboxes/" + sb.json()["id"])
        assert client.delete("/v1/checkpoints/" + again["id"]).status == 204
        # other files under the same name: refused
        delete_template()
        other = io.BytesIO()
        with tarfile.open(tarpath) as src, tarfile.open(fileobj=other, mode="w") as dst:
            for m in src.getmembers():
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
            extra = tarfile.TarInfo("extra")
            extra.size = 1
            dst.addfile(extra, io.BytesIO(b"x"))
        assert client.put("/v1/templates/%s/import" % name, raw=other.getvalue()).status == 201
        before = state_listing()
        r = client.post("/v1/checkpoints/import", raw=data)
        assert r.status == 409 and "not the one" in r.json()["error"]["message"], r
        assert state_listing() == before
    finally:
        delete_template()
