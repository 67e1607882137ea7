"""Templates from OCI image layouts and docker-archives: layers stored once by
digest and shared, whiteouts and opaque dirs honoured, the image config's
env, workdir and user given to sandboxes; listing, inspecting, deleting
(refused while in use) and collecting layers; malformed images refused
with nothing left behind."""
import gzip
import json
import os

import pytest

from conftest import STATE, sh
from imagelib import base_rootfs_entries, docker_archive, layer_tar, oci_archive, sha

LAYERS = os.path.join(STATE, "layers")


def stored_layers():
    return sorted(n for n in os.listdir(LAYERS) if not n.startswith(".")) if os.path.isdir(LAYERS) else []


def partials():
    return [n for n in os.listdir(LAYERS) if n.startswith(".")] if os.path.isdir(LAYERS) else []


def imp(client, name, data, query=""):
    return client.put("/v1/templates/%s/import%s" % (name, query), raw=data, timeout=300)


def drop(client, name):
    client.delete("/v1/templates/" + name)
    client.post("/v1/templates/gc")


BASE = base_rootfs_entries()
APP = [
    ("etc/motd", "file", b"from layer two\n"),
    ("opt", "dir", None),
    ("opt/app", "dir", None),
    ("opt/app/run.sh", "file", b"echo app\n", 0o755),
    ("opt/gone", "file", b"removed by layer three\n"),
    ("opt/cache", "dir", None),
    ("opt/cache/a", "file", b"a\n"),
    ("opt/cache/b", "file", b"b\n"),
]
TOP = [
    ("opt", "dir", None),
    ("opt/.wh.gone", "file", b""),
    ("opt/cache", "dir", None),
    ("opt/cache/.wh..wh..opq", "file", b""),
    ("opt/cache/c", "file", b"c\n"),
]
CFG = dict(env=["PATH=/usr/bin:/bin", "GREETING=hello from the image", "LANG=C.UTF-8"],
           workdir="/opt/app", user="app", cmd=["/bin/sh", "-c", "echo default cmd"])


@pytest.fixture(scope="module")
def oci_tpl(client):
    r = imp(client, "img-oci", oci_archive([BASE, APP, TOP], **CFG))
    assert r.status == 201, r
    yield r.json()
    drop(client, "img-oci")


def test_oci_layout_import_stacks_layers_with_whiteouts(client, oci_tpl, make):
    t = oci_tpl
    assert t["source"] == "oci" and len(t["layers"]) == 3, t
    assert t["config"]["workdir"] == "/opt/app" and t["config"]["user"] == "app", t
    assert t["config"]["cmd"] == ["/bin/sh", "-c", "echo default cmd"]
    for l in t["layers"]:
        assert l["digest"].startswith("sha256:") and l["digest"][7:] in stored_layers(), l
    sb = make(template="img-oci")
    r = client.exec(sb["id"], "cat /etc/motd; ls /opt; ls /opt/cache; test -e /opt/gone || echo no-gone")
    assert r["exit_code"] == 0, r
    assert r["stdout"].split("\n") == ["from layer two", "app", "cache", "c", "no-gone", ""], r


def test_sandbox_gets_the_image_env_workdir_and_user(client, oci_tpl, make):
    sb = make(template="img-oci")
    r = client.exec(sb["id"], "pwd; id -u; echo $GREETING; echo $LANG")
    assert r["exit_code"] == 0, r
    assert r["stdout"].split("\n")[:4] == ["/opt/app", "1000", "hello from the image", "C.UTF-8"], r
    # the request still wins over the image
    sb2 = make(template="img-oci", env={"GREETING": "mine"}, workdir="/tmp", user="root")
    r = client.exec(sb2["id"], "pwd; id -u; echo $GREETING")
    assert r["stdout"].split("\n")[:3] == ["/tmp", "0", "mine"], r
    # and a command may still name its own user
    r = client.exec(sb["id"], "id -u", user="root")
    assert r["stdout"].strip() == "0", r
    got = client.get("/v1/sandboxes/" + sb["id"]).json()
    assert got["user"] == "app" and got["workdir"] == "/opt/app", got


def test_docker_archives_both_layouts_share_layers(client, oci_tpl):
    before = stored_layers()
    for name, modern in (("img-docker", False), ("img-docker2", True)):
        r = imp(client, name, docker_archive([BASE, APP, TOP], modern=modern, **CFG))
        assert r.status == 201, r
        t = r.json()
        assert t["source"] == "docker-archive", t
        # same uncompressed layers as the OCI import: stored once
        assert [l["digest"] for l in t["layers"]] == [l["digest"] for l in oci_tpl["layers"]]
    assert stored_layers() == before, "layers were unpacked again"
    lst = {t["name"]: t for t in client.get("/v1/templates").json()["templates"]}
    assert lst["img-docker"]["layers"][0]["templates"] == 3, lst["img-docker"]
    assert lst["img-docker"]["shared_bytes"] > 0 and lst["img-docker"]["unique_bytes"] == 0
    # the same file in two templates is one inode: unpacked once, linked twice
    a = os.stat(os.path.join(STATE, "templates/img-oci/rootfs/usr/bin/dash"))
    b = os.stat(os.path.join(STATE, "templates/img-docker/rootfs/usr/bin/dash"))
    assert a.st_ino == b.st_ino and a.st_dev == b.st_dev
    for name in ("img-docker", "img-docker2"):
        assert client.delete("/v1/templates/" + name).status == 204
    # the OCI template still lists them: collecting keeps every one
    client.post("/v1/templates/gc")
    for l in oci_tpl["layers"]:
        assert l["digest"][7:] in stored_layers(), l


def test_delete_refused_while_used_then_gc_frees_layers(client, make):
    extra = [("only-here", "file", os.urandom(4096))]
    r = imp(client, "img-del", oci_archive([BASE, extra], gzip_layers=False, **CFG))
    assert r.status == 201, r
    own = r.json()["layers"][1]["digest"]
    sb = make(template="img-del")
    r = client.delete("/v1/templates/img-del")
    assert r.status == 409 and sb["id"] in r.json()["error"]["message"], r
    ck = client.post("/v1/sandboxes/%s/checkpoints" % sb["id"], {"name": "c"})
    assert ck.status == 201, ck
    client.delete("/v1/sandboxes/" + sb["id"])
    r = client.delete("/v1/templates/img-del")
    assert r.status == 409 and "checkpoint" in r.json()["error"]["message"], r
    assert client.delete("/v1/checkpoints/" + ck.json()["id"]).status == 204
    info = client.get("/v1/templates/img-del").json()
    assert info["used_by"] == {"sandboxes": [], "checkpoints": []}, info
    assert client.delete("/v1/templates/img-del").status == 204
    assert client.get("/v1/templates/img-del").status == 404
    assert own[7:] in stored_layers()
    gc = client.post("/v1/templates/gc").json()
    assert gc["removed_layers"] >= 1 and gc["freed_bytes"] >= 4096, gc
    assert own[7:] not in stored_layers()


def test_ref_picks_an_image_and_bad_refs_are_refused(client):
    data = docker_archive([BASE], tags=("one:1",))
    assert imp(client, "img-ref", data, "?ref=two:2").status == 404
    r = imp(client, "img-ref", data, "?ref=one:1")
    assert r.status == 201, r
    assert imp(client, "img-ref", data).status == 409
    drop(client, "img-ref")


def _refused(client, name, data, words):
    before = stored_layers()
    r = imp(client, name, data)
    assert r.status == 400, r
    msg = r.json()["error"]["message"]
    assert any(w in msg for w in words), msg
    assert client.get("/v1/templates/" + name).status == 404
    assert not os.path.exists(os.path.join(STATE, "templates", name))
    assert stored_layers() == before, "a refused import left layers behind"
    assert partials() == []


def test_malformed_images_are_refused_with_nothing_left(client):
    good = oci_archive([BASE, APP], **CFG)
    # truncated and corrupt outer archives
    _refused(client, "bad-trunc", good[: len(good) // 2], ["truncated", "corrupt"])
    _refused(client, "bad-gz", gzip.compress(good)[:-200], ["truncated", "corrupt", "readable"])

    # a blob that is not what its digest says
    def flip(blobs):
        d = next(k for k, v in blobs.items() if v[:2] == b"\x1f\x8b")
        blobs[d] = blobs[d][:-8] + b"XXXXXXXX"
    _refused(client, "bad-digest", oci_archive([BASE, APP], tamper=flip, **CFG), ["digest mismatch", "says"])

    # a manifest naming a layer blob the archive does not hold
    def lose(blobs):
        d = next(k for k, v in blobs.items() if v[:2] == b"\x1f\x8b")
        del blobs[d]
    _refused(client, "bad-missing", oci_archive([BASE, APP], tamper=lose, **CFG), ["missing"])

    # diff ids that do not match the layer content
    wrong = oci_archive([BASE], config=json.dumps({"config": {}, "rootfs": {
        "type": "layers", "diff_ids": [sha(b"something else")]}}).encode())
    _refused(client, "bad-diffid", wrong, ["digest mismatch"])

    # hostile layer members
    for name, layer, words in (
        ("bad-dotdot", [("../../etc/evil", "file", b"x")], ["..", "escape", "outside", "climb"]),
        ("bad-abs", [("/etc/evil", "file", b"x")], ["absolute"]),
        ("bad-link", [("etc", "dir", None), ("etc/x", "symlink", "../../../../root")], ["symlink", "climb", "outside"]),
        ("bad-hard", [("x", "hardlink", "../../etc/shadow")], ["link", "outside", ".."]),
        ("bad-dev", [("usr", "dir", None), ("usr/mem", "chardev", (1, 1))], ["device", "node", "type"]),
        ("bad-below", [("lnk", "symlink", "/etc"), ("lnk/passwd", "file", b"x")], ["below the symlink"]),
    ):
        _refused(client, name, oci_archive([BASE, layer], **CFG), words)
    # a device node in /dev is what root filesystems carry: dropped, not refused
    r = imp(client, "img-devok", oci_archive([BASE + [("dev", "dir", None), ("dev/null", "chardev", (1, 3))]]))
    assert r.status == 201, r
    assert not os.path.exists(os.path.join(STATE, "templates/img-devok/rootfs/dev/null"))
    drop(client, "img-devok")

    # configs that are not what they should be
    bad_cfg = oci_archive([BASE], config=b"{not json")
    _refused(client, "bad-config", bad_cfg, ["JSON"])
    _refused(client, "bad-env", oci_archive([BASE], env=["=novalue"]), ["Env"])
    # an image whose manifest lists more layers than its config
    few = oci_archive([BASE, APP], config=json.dumps({"rootfs": {"diff_ids": [sha(layer_tar(BASE))]}}).encode())
    _refused(client, "bad-count", few, ["diff ids"])


def test_rootfs_tar_import_still_works(client, make):
    r = imp(client, "img-rootfs", layer_tar(BASE))
    assert r.status == 201, r
    assert r.json()["source"] == "rootfs" and r.json()["layers"] == []
    sb = make(template="img-rootfs")
    assert sh(client, sb["id"], "cat /etc/group").startswith("root:x:0:")
    client.delete("/v1/sandboxes/" + sb["id"])
    drop(client, "img-rootfs")


def test_layers_survive_a_daemon_restart(client, oci_tpl, daemon, make):
    assert daemon.stop() == 0
    daemon.start()
    lst = {t["name"] for t in client.get("/v1/templates").json()["templates"]}
    assert "img-oci" in lst
    sb = make(template="img-oci")
    assert sh(client, sb["id"], "cat /etc/motd") == "from layer two\n"


def test_cli_imports_an_oci_layout_dir(client, cli_env, tmp_path, make):
    import io
    import subprocess
    import tarfile

    from conftest import CLI
    layout = tmp_path / "layout"
    with tarfile.open(fileobj=io.BytesIO(oci_archive([BASE, APP], **CFG))) as t:
        t.extractall(layout)
    p = subprocess.run([CLI, "template", "import", "img-dir", str(layout)], env=cli_env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and "oci" in p.stdout and "2 layers" in p.stdout, (p.stdout, p.stderr)
    sb = make(template="img-dir")
    assert sh(client, sb["id"], "cat /etc/motd; pwd") == "from layer two\n/opt/app\n"
    client.delete("/v1/sandboxes/" + sb["id"])
    p = subprocess.run([CLI, "template", "import", "--ref", "nope", "img-dir2", str(layout)], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "nope" in p.stderr, p.stderr
    drop(client, "img-dir")


def test_podman_save_archives_import(client, make, tmp_path):
    """Real `podman save` output, both formats: the same layers, stored once."""
    import subprocess

    from test_export import podman, podman_ready
    podman_ready()
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(layer_tar(BASE))
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "note.txt").write_text("from podman build\n")
    (tmp_path / "ctx" / "Containerfile").write_text(
        "FROM localhost/fbt-img:base\nCOPY note.txt /opt/note.txt\nENV FROM_PODMAN=yes\n"
        "WORKDIR /opt\nUSER app\nCMD [\"/bin/sh\"]\n")
    tags = ["localhost/fbt-img:base", "localhost/fbt-img:app"]
    try:
        r = podman("import", str(rootfs), tags[0])
        assert r.returncode == 0, r.stderr
        r = podman("build", "--network", "none", "-t", tags[1], "-f", str(tmp_path / "ctx" / "Containerfile"),
                   str(tmp_path / "ctx"))
        assert r.returncode == 0, r.stderr
        layers = {}
        for fmt in ("docker-archive", "oci-archive"):
            out = tmp_path / ("img." + fmt)
            r = podman("save", "--format", fmt, "-o", str(out), tags[1])
            assert r.returncode == 0, r.stderr
            name = "pod-" + fmt.split("-")[0]
            r = client.put("/v1/templates/%s/import" % name, raw=out.read_bytes(), timeout=300)
            assert r.status == 201, r
            t = r.json()
            layers[fmt] = [l["digest"] for l in t["layers"]]
            assert t["config"]["user"] == "app" and t["config"]["workdir"] == "/opt", t
            sb = make(template=name)
            assert sh(client, sb["id"], "cat note.txt; echo $FROM_PODMAN; id -u") == "from podman build\nyes\n1000\n"
            client.delete("/v1/sandboxes/" + sb["id"])
        assert layers["docker-archive"] == layers["oci-archive"] and len(layers["oci-archive"]) == 2
    finally:
        for t in ("pod-docker", "pod-oci"):
            client.delete("/v1/templates/" + t)
        client.post("/v1/templates/gc")
        subprocess.run(["podman", "rmi", "-f"] + tags, capture_output=True)
