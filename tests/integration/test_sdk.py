"""The Python SDK in sdk/python against the real daemon."""
import os
import sys

import pytest

from conftest import ROOT, SOCKET

sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
import forkbox  # noqa: E402


def test_sdk_round_trip(daemon):
    """create/exec/write/read/delete through the SDK, as an adapter would use it."""
    fb = forkbox.Forkbox(key=daemon.key, socket_path=SOCKET)
    with fb.sandbox(ttl=60, labels={"sdk": "yes"}) as sb:
        r = sb.exec(["python3", "-c", "print(6*7)"])
        assert r["stdout"] == "42\n" and r["exit_code"] == 0
        sb.write("/root/x.txt", b"hello")
        assert sb.read("/root/x.txt") == b"hello"
        assert [s["id"] for s in fb.list(sdk="yes")] == [sb.id]
    with pytest.raises(forkbox.ForkboxError) as e:
        sb.exec("true")
    assert e.value.status == 404 and e.value.code == "not_found"


def test_sdk_templates_and_volumes(daemon, tmp_path):
    """Build a template from a context dir, use it with a volume, clean up."""
    fb = forkbox.Forkbox(key=daemon.key, socket_path=SOCKET)
    (tmp_path / "Dockerfile").write_text("FROM default\nCOPY hello.txt /srv/\nWORKDIR /srv\nRUN cat hello.txt\n")
    (tmp_path / "hello.txt").write_text("hi from the context\n")
    seen = []
    tpl = fb.build_template("sdk-tpl", str(tmp_path), on_event=seen.append)
    assert tpl["name"] == "sdk-tpl" and tpl["config"]["workdir"] == "/srv"
    assert any(e.get("data") == "hi from the context\n" for e in seen), seen
    assert "sdk-tpl" in [t["name"] for t in fb.templates()]
    fb.create_volume("sdk-vol", size_mb=64)
    with fb.sandbox(template="sdk-tpl", volumes=[{"name": "sdk-vol", "path": "/data"}]) as sb:
        assert sb.exec("pwd; cat hello.txt > /data/copy; cat /data/copy")["stdout"] == "/srv\nhi from the context\n"
    assert "sdk-vol" in [v["name"] for v in fb.volumes()]
    fb.delete_volume("sdk-vol")
    (tmp_path / "Dockerfile").write_text("FROM default\nRUN exit 4\n")
    with pytest.raises(forkbox.ForkboxError) as e:
        fb.build_template("sdk-bad", str(tmp_path))
    assert "exit code 4" in str(e.value)
    fb.delete_template("sdk-tpl")
    assert fb.gc_templates()["removed_layers"] >= 1
