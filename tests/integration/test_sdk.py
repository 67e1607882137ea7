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
