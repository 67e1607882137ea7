"""The forkbox command-line client, run as a user would: it finds the daemon's
socket and key through FORKBOX_SOCKET and FORKBOX_STATE_DIR (cli_env)."""
import gzip
import hashlib
import http.server
import io
import json
import os
import re
import secrets
import signal
import socketserver
import stat
import subprocess
import tarfile
import threading
import time
import urllib.parse

import pytest

from conftest import CLI, STATE, host_snapshot

ID_RE = re.compile(r"^sbx_[0-9a-f]{16}$")
ROOTFS = os.path.join(STATE, "templates", "default", "rootfs")

COMMANDS = [
    [], ["create"], ["ls"], ["get"], ["inspect"], ["rm"], ["ttl"], ["exec"], ["run"], ["cp"],
    ["files"], ["files", "ls"], ["files", "cat"], ["files", "put"], ["files", "rm"],
    ["template"], ["template", "ls"], ["template", "import"], ["template", "rm"],
    ["info"], ["version"], ["port"], ["network"], ["spawn"], ["ps"], ["logs"], ["kill"],
    ["checkpoint"], ["checkpoints"], ["rollback"], ["fork"], ["pause"], ["hibernate"], ["resume"],
]


def fb(env, *args, input=None, timeout=120, check=None):
    """Runs the CLI; returns the CompletedProcess (stdout/stderr as text unless input is bytes)."""
    text = not isinstance(input, bytes)
    p = subprocess.run([CLI] + list(args), env=env, input=input, capture_output=True, text=text,
                       timeout=timeout)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    return p


def ids_listed(env):
    out = fb(env, "--json", "ls", check=0).stdout
    return {s["id"] for s in json.loads(out)["sandboxes"]}


@pytest.fixture
def sid(client, cli_env):
    """A sandbox made with the CLI, removed through the API afterwards."""
    out = fb(cli_env, "create", check=0).stdout.strip()
    assert ID_RE.match(out), out
    yield out
    client.delete("/v1/sandboxes/" + out)


@pytest.fixture
def tmp(tmp_path):
    return str(tmp_path)


# --- help, usage, connection errors ---------------------------------------------------

@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: "-".join(c) or "top")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_for_every_command(cmd, flag):
    # no daemon needed: point the client at nothing
    env = dict(os.environ, FORKBOX_SOCKET="/nonexistent/forkbox.sock")
    env.pop("FORKBOX_URL", None)
    p = fb(env, *(cmd + [flag]), timeout=10)
    assert p.returncode == 0, (cmd, p.stderr)
    assert p.stdout.startswith("Usage: forkbox"), (cmd, p.stdout)
    if cmd and cmd != ["inspect"]:  # inspect is an alias: its usage names get
        assert " ".join(cmd) in p.stdout.splitlines()[0]
    assert p.stderr == ""


def test_no_command_and_unknown_command_exit_2():
    env = dict(os.environ, FORKBOX_SOCKET="/nonexistent/forkbox.sock")
    p = fb(env, timeout=10)
    assert p.returncode == 2 and "Usage: forkbox" in p.stderr
    p = fb(env, "frobnicate", timeout=10)
    assert p.returncode == 2
    assert "unknown command" in p.stderr and "frobnicate" in p.stderr


@pytest.mark.parametrize("args", [
    ["create", "--cpus", "lots"],
    ["create", "--bogus-option"],
    ["ttl", "sbx_0000000000000000", "abc"],
    ["ttl", "sbx_0000000000000000"],
    ["get"],
    ["exec", "sbx_0000000000000000"],
    ["cp", "/a", "/b"],
    ["cp", "sbx_0000000000000000:/a", "sbx_0000000000000000:/b"],
    ["cp", "sbx_0000000000000000:relative", "/tmp/x"],
    ["files", "cat", "sbx_0000000000000000"],
    ["template", "frob"],
    ["template", "import", "onlyname"],
])
def test_bad_command_line_exits_2(cli_env, args):
    p = fb(cli_env, *args, timeout=30)
    assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("forkbox"), p.stderr
    assert p.stdout == ""


def test_unreachable_daemon(cli_env, tmp):
    env = dict(cli_env, FORKBOX_SOCKET="/nonexistent")
    for args in (["ls"], ["create"], ["info"], ["exec", "sbx_0000000000000000", "--", "true"]):
        p = fb(env, *args, timeout=30)
        assert p.returncode == 1, (args, p)
        assert p.stderr.startswith("forkbox: ")
        assert "cannot reach forkboxd" in p.stderr and "/nonexistent" in p.stderr, p.stderr
        assert p.stdout == ""
    # TCP that nobody listens on
    env = dict(cli_env, FORKBOX_URL="http://127.0.0.1:1")
    p = fb(env, "ls", timeout=30)
    assert p.returncode == 1 and "cannot reach forkboxd" in p.stderr and "127.0.0.1:1" in p.stderr
    # --socket wins over the environment
    p = fb(cli_env, "--socket", "/nonexistent-too", "ls", timeout=30)
    assert p.returncode == 1 and "/nonexistent-too" in p.stderr
    # version still shows the client's own version without a daemon
    p = fb(dict(cli_env, FORKBOX_SOCKET="/nonexistent"), "version", timeout=30)
    assert re.search(r"forkbox\s+\S+", p.stdout), p


def test_wrong_or_missing_key(cli_env, tmp):
    p = fb(cli_env, "--key", "not-the-key", "ls")
    assert p.returncode == 1 and p.stderr.startswith("forkbox: ") and "key" in p.stderr.lower(), p
    env = dict(cli_env, FORKBOX_API_KEY="also-wrong")
    p = fb(env, "ls")
    assert p.returncode == 1 and "key" in p.stderr.lower()
    env = dict(cli_env, FORKBOX_STATE_DIR=tmp)  # no api-key file there
    p = fb(env, "ls")
    assert p.returncode == 1 and p.stderr.startswith("forkbox: ") and tmp in p.stderr, p
    # the key over TCP works too
    env = dict(cli_env, FORKBOX_URL="http://127.0.0.1:17420")
    fb(env, "ls", check=0)


@pytest.mark.parametrize("args", [
    ["get", "sbx_0000000000000000"],
    ["inspect", "sbx_0000000000000000"],
    ["rm", "sbx_0000000000000000"],
    ["ttl", "sbx_0000000000000000", "60"],
    ["exec", "sbx_0000000000000000", "--", "true"],
    ["files", "ls", "sbx_0000000000000000", "/root"],
    ["files", "cat", "sbx_0000000000000000", "/etc/passwd"],
    ["cp", "sbx_0000000000000000:/etc/passwd", "/tmp/forkbox-it-never"],
    ["pause", "sbx_0000000000000000"],
    ["resume", "sbx_0000000000000000"],
])
def test_unknown_sandbox(cli_env, args):
    p = fb(cli_env, *args)
    assert p.returncode == 1, (args, p)
    assert p.stderr.strip() == "forkbox: sandbox sbx_0000000000000000 not found", p.stderr
    assert not os.path.exists("/tmp/forkbox-it-never")


# --- sandboxes -----------------------------------------------------------------------------

def test_create_ls_get_rm(client, cli_env):
    p = fb(cli_env, "create", "--label", "suite=cli", "--env", "GREETING=hi", "--ttl", "600", check=0)
    sid = p.stdout.strip()
    assert ID_RE.match(sid), p.stdout
    try:
        # the human table
        out = fb(cli_env, "ls", check=0).stdout
        lines = out.splitlines()
        assert lines[0].split()[:3] == ["ID", "STATE", "TEMPLATE"]
        row = [l for l in lines if l.startswith(sid)]
        assert len(row) == 1 and "running" in row[0] and "default" in row[0] and "suite=cli" in row[0]
        # JSON, global option before or after the command
        for args in (["--json", "ls"], ["ls", "--json"]):
            listed = json.loads(fb(cli_env, *args, check=0).stdout)["sandboxes"]
            mine = [s for s in listed if s["id"] == sid]
            assert len(mine) == 1 and mine[0]["labels"] == {"suite": "cli"}
        # filters
        listed = json.loads(fb(cli_env, "--json", "ls", "--label", "suite=cli", check=0).stdout)["sandboxes"]
        assert [s["id"] for s in listed] == [sid]
        listed = json.loads(fb(cli_env, "--json", "ls", "--label", "suite=other", check=0).stdout)["sandboxes"]
        assert listed == []
        # get / inspect
        out = fb(cli_env, "get", sid, check=0).stdout
        assert sid in out and "running" in out
        obj = json.loads(fb(cli_env, "inspect", "--json", sid, check=0).stdout)
        assert obj["id"] == sid and obj["env"] == {"GREETING": "hi"} and obj["ttl"] == 600
        assert "usage" in obj
        # the API sees the same sandbox
        assert client.get("/v1/sandboxes/" + sid).status == 200
        # ttl
        fb(cli_env, "ttl", sid, "0", check=0)
        assert client.get("/v1/sandboxes/" + sid).json()["expires_at"] is None
    finally:
        p = fb(cli_env, "rm", sid)
    assert p.returncode == 0, p
    assert sid not in ids_listed(cli_env)
    assert client.get("/v1/sandboxes/" + sid).status == 404
    p = fb(cli_env, "rm", sid)
    assert p.returncode == 1 and "not found" in p.stderr


def test_rm_several_goes_on_past_failures(client, cli_env):
    a = fb(cli_env, "create", check=0).stdout.strip()
    b = fb(cli_env, "create", check=0).stdout.strip()
    p = fb(cli_env, "rm", a, "sbx_0000000000000000", b)
    assert p.returncode == 1, p
    assert "sbx_0000000000000000 not found" in p.stderr
    assert a not in ids_listed(cli_env) and b not in ids_listed(cli_env)


def test_create_with_resources(client, cli_env):
    p = fb(cli_env, "--json", "create", "--cpus", "0.5", "--memory", "256", "--pids", "64",
           "--workdir", "/srv/work", check=0)
    obj = json.loads(p.stdout)
    try:
        assert obj["resources"]["cpus"] == 0.5 and obj["resources"]["memory_mb"] == 256
        assert obj["resources"]["pids"] == 64 and obj["workdir"] == "/srv/work"
        out = fb(cli_env, "exec", obj["id"], "--", "pwd", check=0).stdout
        assert out == "/srv/work\n"
    finally:
        client.delete("/v1/sandboxes/" + obj["id"])
    # the API's refusal comes through with its message
    p = fb(cli_env, "create", "--memory", "1")
    assert p.returncode == 1 and p.stderr.startswith("forkbox: ") and "memory" in p.stderr, p


# --- exec and run ---------------------------------------------------------------------------

def test_exec_prints_output_and_exits_with_code(cli_env, sid):
    p = fb(cli_env, "exec", sid, "--", "python3", "-c", "import sys; print(1); sys.exit(3)")
    assert p.returncode == 3, p
    assert p.stdout == "1\n"
    p = fb(cli_env, "exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 0")
    assert p.returncode == 0 and p.stdout == "out\n" and p.stderr == "err\n"
    # every argument stays one argv entry
    p = fb(cli_env, "exec", sid, "--", "python3", "-c", "import sys; print(sys.argv[1:])", "a b", "$HOME", "'q'")
    assert p.stdout == "['a b', '$HOME', \"'q'\"]\n"


def test_exec_signals_and_timeouts(cli_env, sid):
    p = fb(cli_env, "exec", sid, "--", "sh", "-c", "kill -9 $$")
    assert p.returncode == 137, p
    t0 = time.time()
    p = fb(cli_env, "exec", "--timeout", "1", sid, "--", "sleep", "30")
    assert p.returncode == 124, p
    assert time.time() - t0 < 15
    p = fb(cli_env, "exec", sid, "--", "no-such-program-xyz")
    assert p.returncode == 127 or p.returncode == 1, p
    assert p.stderr != ""


def test_exec_options(cli_env, sid):
    p = fb(cli_env, "exec", "-e", "A=1", "--env", "B=two words", "-w", "/tmp", "-u", "nobody", sid, "--",
           "sh", "-c", 'echo "$A|$B|$(pwd)|$(id -un)"', check=0)
    assert p.stdout == "1|two words|/tmp|nobody\n"
    p = fb(cli_env, "exec", "--json", sid, "--", "sh", "-c", "echo hi; exit 4")
    assert p.returncode in (0, 4), p
    res = json.loads(p.stdout)
    assert res["exit_code"] == 4 and res["stdout"] == "hi\n" and res["timed_out"] is False


def test_exec_stdin(cli_env, sid):
    data = "line one\nline two\n\u00e9\n"
    p = fb(cli_env, "exec", "-i", sid, "--", "sh", "-c", "cat; echo done", input=data, check=0)
    assert p.stdout == data + "done\n"
    p = fb(cli_env, "exec", "--stdin", sid, "--", "wc", "-c", input="x" * 500000, check=0)
    assert p.stdout.strip() == "500000"
    # without -i the command gets no stdin (it does not hang reading it)
    p = fb(cli_env, "exec", sid, "--", "cat", input="ignored", timeout=30, check=0)
    assert p.stdout == ""


def test_exec_stdin_over_one_mib(cli_env, sid):
    p = fb(cli_env, "exec", "-i", sid, "--", "wc", "-c", input="x" * (2 << 20))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(2 << 20)


def test_exec_binary_output(cli_env, sid):
    # bytes that are not UTF-8 arrive exactly
    p = subprocess.run([CLI, "exec", sid, "--", "printf", "\\377\\376abc\\200"], env=cli_env,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p
    assert p.stdout == b"\xff\xfeabc\x80"


@pytest.mark.parametrize("json_mode", [False, True], ids=["stream", "json"])
def test_exec_output_with_nul_bytes(cli_env, sid, json_mode):
    args = [CLI] + (["--json"] if json_mode else []) + ["exec", sid, "--", "printf", "a\\000b\\n"]
    p = subprocess.run(args, env=cli_env, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    if json_mode:
        assert json.loads(p.stdout)["stdout"] == "a\0b\n"
    else:
        assert p.stdout == b"a\0b\n"


def test_exec_large_output_is_cut_with_a_warning(cli_env, sid):
    p = fb(cli_env, "exec", sid, "--", "python3", "-c",
           "import sys; sys.stdout.write('y' * 3000000)")
    assert p.stdout == "y" * (1 << 20)
    assert "truncated" in p.stderr


def test_run_interrupted_deletes_its_sandbox(client, cli_env):
    before = ids_listed(cli_env)
    proc = subprocess.Popen([CLI, "run", "--label", "suite=cli-sigint", "--", "sleep", "60"], env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            listed = client.get("/v1/sandboxes?label=suite=cli-sigint").json()["sandboxes"]
            if listed:
                break
            time.sleep(0.05)
        assert listed, "run never created its sandbox"
        time.sleep(0.5)  # let the command start
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    assert client.get("/v1/sandboxes?label=suite=cli-sigint").json()["sandboxes"] == []
    assert ids_listed(cli_env) - before == set()


def test_run_leaves_no_sandbox(cli_env):
    before = ids_listed(cli_env)
    snap = host_snapshot()
    p = fb(cli_env, "run", "--", "python3", "-c", "print(1)")
    assert p.returncode == 0, p
    assert p.stdout == "1\n"
    assert ids_listed(cli_env) - before == set()
    # the command's exit code, and cleanup on failure too
    p = fb(cli_env, "run", "--label", "suite=cli-run", "--", "sh", "-c", "echo bye; exit 5")
    assert p.returncode == 5 and p.stdout == "bye\n"
    p = fb(cli_env, "run", "--", "no-such-program-xyz")
    assert p.returncode != 0
    p = fb(cli_env, "run", "--timeout", "1", "--", "sleep", "30")
    assert p.returncode == 124
    p = fb(cli_env, "run", "-i", "--env", "X=y", "--", "sh", "-c", 'read l; echo "$l$X"', input="in\n")
    assert p.returncode == 0 and p.stdout == "iny\n"
    assert ids_listed(cli_env) - before == set()
    # a refused create leaves nothing either
    p = fb(cli_env, "run", "--template", "no-such-template", "--", "true")
    assert p.returncode == 1 and "no-such-template" in p.stderr
    assert ids_listed(cli_env) - before == set()
    # and nothing is left on the host: mounts, cgroups, processes, writable layers
    # (other sandboxes may go away meanwhile, so only growth counts)
    def grown():
        now = host_snapshot()
        return {k: (snap[k], now[k]) for k in snap if now[k] > snap[k]}
    deadline = time.time() + 10
    while grown() and time.time() < deadline:
        time.sleep(0.2)
    assert grown() == {}


# --- files and cp ------------------------------------------------------------------------------

def test_files_subcommands(client, cli_env, sid, tmp):
    data = os.urandom(200000)
    p = fb(cli_env, "files", "put", "--mode", "0750", sid, "/root/fs/a.bin", input=data)
    assert p.returncode == 0, p
    assert client.get("/v1/sandboxes/%s/files?path=/root/fs/a.bin" % sid).body == data
    p = fb(cli_env, "files", "cat", sid, "/root/fs/a.bin", input=b"")
    assert p.returncode == 0 and p.stdout == data
    out = fb(cli_env, "files", "ls", sid, "/root/fs", check=0).stdout
    assert "a.bin" in out and "0750" in out and "200000" in out
    listing = json.loads(fb(cli_env, "--json", "files", "ls", sid, "/root/fs", check=0).stdout)
    assert [e["name"] for e in listing["entries"]] == ["a.bin"]
    p = fb(cli_env, "files", "rm", sid, "/root/fs")
    assert p.returncode == 1 and ("recursive" in p.stderr or "-r" in p.stderr), p
    fb(cli_env, "files", "rm", "-r", sid, "/root/fs", check=0)
    p = fb(cli_env, "files", "cat", sid, "/root/fs/a.bin")
    assert p.returncode == 1 and "No such file" in p.stderr, p


def make_host_tree(root):
    os.makedirs(os.path.join(root, "sub", "deep"))
    os.makedirs(os.path.join(root, "emptydir"))
    with open(os.path.join(root, "a.txt"), "w") as f:
        f.write("alpha\n")
    with open(os.path.join(root, "sub", "deep", "r.bin"), "wb") as f:
        f.write(os.urandom(300000))
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    os.symlink("sub/deep/r.bin", os.path.join(root, "link"))


def tree_digest(root):
    """Relative path -> (kind, content hash or link target, permission bits)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), stat.S_IMODE(st.st_mode))
    return out


def sandbox_digest(client, sid, root):
    script = r"""
import hashlib, os, stat, sys, json
root = sys.argv[1]; out = {}
for dp, dn, fn in os.walk(root):
    for n in dn + fn:
        p = os.path.join(dp, n); rel = os.path.relpath(p, root); st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode): out[rel] = ["link", os.readlink(p)]
        elif stat.S_ISDIR(st.st_mode): out[rel] = ["dir"]
        else: out[rel] = ["file", hashlib.sha256(open(p, "rb").read()).hexdigest(), stat.S_IMODE(st.st_mode)]
print(json.dumps(out))
"""
    r = client.exec(sid, ["python3", "-c", script, root])
    assert r["exit_code"] == 0, r
    return {k: tuple(v) for k, v in json.loads(r["stdout"]).items()}


def test_cp_host_to_sandbox(client, cli_env, sid, tmp):
    src_file = os.path.join(tmp, "one.txt")
    with open(src_file, "wb") as f:
        f.write(b"one\0two\n")
    os.chmod(src_file, 0o640)
    # to a new path
    fb(cli_env, "cp", src_file, sid + ":/root/copied.txt", check=0)
    assert client.get("/v1/sandboxes/%s/files?path=/root/copied.txt" % sid).body == b"one\0two\n"
    mode = client.exec(sid, "stat -c %a /root/copied.txt")["stdout"].strip()
    assert mode == "640"
    # into an existing directory, under its own name
    fb(cli_env, "cp", src_file, sid + ":/root/", check=0)
    assert client.get("/v1/sandboxes/%s/files?path=/root/one.txt" % sid).body == b"one\0two\n"
    client.exec(sid, "mkdir -p /root/into")
    fb(cli_env, "cp", src_file, sid + ":/root/into", check=0)
    assert client.get("/v1/sandboxes/%s/files?path=/root/into/one.txt" % sid).body == b"one\0two\n"

    # a directory tree, to a new path and into an existing directory
    tree = os.path.join(tmp, "tree")
    make_host_tree(tree)
    want = tree_digest(tree)
    fb(cli_env, "cp", tree, sid + ":/root/newtree", check=0)
    assert sandbox_digest(client, sid, "/root/newtree") == want
    fb(cli_env, "cp", tree, sid + ":/root/into", check=0)
    assert sandbox_digest(client, sid, "/root/into/tree") == want
    out = client.exec(sid, ["/root/newtree/run.sh"])
    assert out["stdout"] == "ran\n"


def test_cp_sandbox_to_host(client, cli_env, sid, tmp):
    blob = os.urandom(1 << 20)
    assert client.put("/v1/sandboxes/%s/files?path=/root/out/blob.bin&mode=0600" % sid, raw=blob).status == 201
    client.exec(sid, "mkdir -p /root/out/tree/sub/deep /root/out/tree/emptydir && echo alpha > /root/out/tree/a.txt"
                     " && head -c 100000 /dev/urandom > /root/out/tree/sub/deep/r.bin"
                     " && ln -s sub/deep/r.bin /root/out/tree/link && chmod 0751 /root/out/tree/a.txt")
    # a file to a new path, and into an existing directory
    dst = os.path.join(tmp, "blob.copy")
    fb(cli_env, "cp", sid + ":/root/out/blob.bin", dst, check=0)
    with open(dst, "rb") as f:
        assert f.read() == blob
    assert stat.S_IMODE(os.stat(dst).st_mode) == 0o600
    os.makedirs(os.path.join(tmp, "into"))
    fb(cli_env, "cp", sid + ":/root/out/blob.bin", os.path.join(tmp, "into"), check=0)
    with open(os.path.join(tmp, "into", "blob.bin"), "rb") as f:
        assert f.read() == blob
    # a tree to a new path, and into an existing directory
    want = sandbox_digest(client, sid, "/root/out/tree")
    fb(cli_env, "cp", sid + ":/root/out/tree", os.path.join(tmp, "tree.copy"), check=0)
    assert tree_digest(os.path.join(tmp, "tree.copy")) == want
    fb(cli_env, "cp", sid + ":/root/out/tree", os.path.join(tmp, "into"), check=0)
    assert tree_digest(os.path.join(tmp, "into", "tree")) == want
    # no temp files are left next to the targets
    assert sorted(os.listdir(tmp)) == ["blob.copy", "into", "tree.copy"]
    assert sorted(os.listdir(os.path.join(tmp, "into"))) == ["blob.bin", "tree"]


def test_cp_roundtrip_binary(client, cli_env, sid, tmp):
    src = os.path.join(tmp, "rt.bin")
    data = os.urandom(3 << 20)
    with open(src, "wb") as f:
        f.write(data)
    fb(cli_env, "cp", src, sid + ":/root/rt.bin", check=0)
    fb(cli_env, "cp", sid + ":/root/rt.bin", src + ".back", check=0)
    with open(src + ".back", "rb") as f:
        assert f.read() == data


def test_cp_drops_setid_bits(client, cli_env, sid, tmp):
    client.exec(sid, "mkdir -p /root/suid && cp /bin/true /root/suid/t && chmod 6755 /root/suid/t"
                     " && cp /bin/true /root/suid-file && chmod 4755 /root/suid-file")
    fb(cli_env, "cp", sid + ":/root/suid-file", os.path.join(tmp, "f"), check=0)
    assert stat.S_IMODE(os.stat(os.path.join(tmp, "f")).st_mode) & 0o7000 == 0
    fb(cli_env, "cp", sid + ":/root/suid", os.path.join(tmp, "d"), check=0)
    assert stat.S_IMODE(os.stat(os.path.join(tmp, "d", "t")).st_mode) & 0o7000 == 0


def test_cp_empty_file_and_dir(client, cli_env, sid, tmp):
    os.makedirs(os.path.join(tmp, "up", "emptydir"))
    open(os.path.join(tmp, "up", "empty"), "w").close()
    fb(cli_env, "cp", os.path.join(tmp, "up", "emptydir"), sid + ":/root/emptydir", check=0)
    fb(cli_env, "cp", os.path.join(tmp, "up", "empty"), sid + ":/root/empty", check=0)
    r = client.exec(sid, "test -d /root/emptydir && ls -A /root/emptydir | wc -l && stat -c %s /root/empty")
    assert r["stdout"].split() == ["0", "0"], r
    fb(cli_env, "cp", sid + ":/root/emptydir", os.path.join(tmp, "down-dir"), check=0)
    fb(cli_env, "cp", sid + ":/root/empty", os.path.join(tmp, "down-file"), check=0)
    assert os.listdir(os.path.join(tmp, "down-dir")) == []
    assert os.path.getsize(os.path.join(tmp, "down-file")) == 0


def test_cp_dir_with_absolute_symlink_is_refused_whole(client, cli_env, sid, tmp):
    src = os.path.join(tmp, "withabs")
    os.makedirs(src)
    with open(os.path.join(src, "a"), "w") as f:
        f.write("a")
    os.symlink("/etc/passwd", os.path.join(src, "abs"))
    p = fb(cli_env, "cp", src, sid + ":/root/withabs")
    assert p.returncode == 1 and "absolute symlink" in p.stderr, p
    assert client.exec(sid, ["test", "-e", "/root/withabs"])["exit_code"] == 1


def test_cp_errors(cli_env, sid, tmp):
    p = fb(cli_env, "cp", sid + ":/root/missing", os.path.join(tmp, "x"))
    assert p.returncode == 1 and "No such file" in p.stderr, p
    assert os.listdir(tmp) == []
    p = fb(cli_env, "cp", os.path.join(tmp, "missing"), sid + ":/root/x")
    assert p.returncode == 1 and "missing" in p.stderr, p
    # a fifo on the host is not copied
    os.mkfifo(os.path.join(tmp, "fifo"))
    p = fb(cli_env, "cp", os.path.join(tmp, "fifo"), sid + ":/root/fifo", timeout=30)
    assert p.returncode == 1 and "not a regular file or directory" in p.stderr, p


def test_cp_into_sandbox_symlink_stays_inside(client, cli_env, sid, tmp):
    """A link planted in the sandbox that points at a host path leads nowhere on the host."""
    marker = "/tmp/forkbox-cli-marker-" + secrets.token_hex(4)
    with open(marker, "w") as f:
        f.write("host")
    try:
        client.exec(sid, "ln -s %s /root/planted && ln -s /tmp /root/tmplink" % marker)
        src = os.path.join(tmp, "payload")
        with open(src, "w") as f:
            f.write("payload")
        fb(cli_env, "cp", src, sid + ":/root/planted", check=0)
        fb(cli_env, "cp", src, sid + ":/root/tmplink/" + os.path.basename(marker), check=0)
        with open(marker) as f:
            assert f.read() == "host"
        p = fb(cli_env, "cp", sid + ":/root/planted", os.path.join(tmp, "back"))
        assert p.returncode == 0
        with open(os.path.join(tmp, "back")) as f:
            assert f.read() == "payload"
    finally:
        os.unlink(marker)


# --- a hostile daemon: what cp writes on the host ---------------------------------------------

class _FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, ctype, body):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path.endswith("/files"):
            self._send(200, "application/json", b'{"entries":[]}\n')
        elif u.path.endswith("/archive"):
            self._send(200, "application/x-tar", self.server.tar)
        else:
            self._send(404, "application/json", b'{"error":{"code":"not_found","message":"nope"}}\n')


class _FakeServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def tar_of(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind, arg in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = len(arg)
                ti.mode = 0o644
                tf.addfile(ti, io.BytesIO(arg))
                continue
            if kind == "hardlink-data":  # a hard link that carries data, as pax allows
                ti.type, ti.linkname, ti.size = tarfile.LNKTYPE, arg, 4
                tf.addfile(ti, io.BytesIO(b"evil"))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                       "chr": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                ti.linkname = arg
            if kind == "dir":
                ti.mode = 0o755
            if kind == "chr":
                ti.devmajor, ti.devminor = 1, 3
            tf.addfile(ti)
    return buf.getvalue()


@pytest.fixture
def fake_daemon(tmp_path):
    sock = str(tmp_path / "fake.sock")
    srv = _FakeServer(sock, _FakeHandler)
    srv.tar = b""
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    env = dict(os.environ, FORKBOX_SOCKET=sock, FORKBOX_API_KEY="fake")
    env.pop("FORKBOX_URL", None)
    yield srv, env
    srv.shutdown()
    srv.server_close()


def test_cp_from_hostile_daemon_never_escapes_destination(fake_daemon, tmp_path):
    srv, env = fake_daemon
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("keep")
    outside = tmp_path / "outside.txt"
    cases = {
        "dotdot": [("../outside.txt", "file", b"evil")],
        "absolute": [(str(outside), "file", b"evil")],
        "through-symlink": [("l", "symlink", str(victim)), ("l/pwned", "file", b"evil")],
        "through-relative-symlink": [("l", "symlink", "../victim"), ("l/pwned", "file", b"evil")],
        "hardlink-absolute": [("h", "hardlink", str(victim / "keep")), ("h", "file", b"evil")],
        "hardlink-dotdot": [("h", "hardlink", "../victim/keep")],
        "hardlink-with-data": [("h", "hardlink-data", str(victim / "keep"))],
        "hardlink-relative-with-data": [("h", "hardlink-data", "../victim/keep")],
    }
    for name, members in cases.items():
        srv.tar = tar_of([("ok.txt", "file", b"ok")] + members)
        dest = tmp_path / ("dest-" + name)
        p = fb(env, "cp", "sbx_0000000000000000:/root/tree", str(dest), timeout=30)
        assert not outside.exists(), name
        assert sorted(os.listdir(victim)) == ["keep"], name
        assert (victim / "keep").read_text() == "keep", name
        assert (victim / "keep").stat().st_nlink == 1, name
        assert p.returncode != 0, (name, p.stdout, p.stderr)
        assert p.stderr.startswith("forkbox: "), (name, p.stderr)


def test_cp_from_hostile_daemon_skips_devices_and_setid(fake_daemon, tmp_path):
    srv, env = fake_daemon
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        ti = tarfile.TarInfo("suid")
        ti.size, ti.mode = 2, 0o6755
        tf.addfile(ti, io.BytesIO(b"#!"))
        ti = tarfile.TarInfo("null")
        ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
        tf.addfile(ti)
        ti = tarfile.TarInfo("pipe")
        ti.type = tarfile.FIFOTYPE
        tf.addfile(ti)
        ti = tarfile.TarInfo("ok")
        ti.size = 2
        tf.addfile(ti, io.BytesIO(b"ok"))
    srv.tar = buf.getvalue()
    dest = tmp_path / "dest"
    p = fb(env, "cp", "sbx_0000000000000000:/root/tree", str(dest), timeout=30)
    assert p.returncode == 0, p
    assert sorted(os.listdir(dest)) == ["ok", "suid"]
    assert stat.S_IMODE((dest / "suid").stat().st_mode) & 0o7000 == 0


# --- templates -----------------------------------------------------------------------------------

def resolve_in(root, path):
    """path with every symlink resolved as if root were /; relative to root."""
    parts, out, hops = path.strip("/").split("/"), [], 0
    while parts:
        p = parts.pop(0)
        if p in ("", "."):
            continue
        if p == "..":
            if out:
                out.pop()
            continue
        cand = os.path.join(root, *out, p)
        if os.path.islink(cand):
            hops += 1
            assert hops < 40, path
            t = os.readlink(cand)
            if t.startswith("/"):
                out = []
            parts = t.strip("/").split("/") + parts
        else:
            out.append(p)
    return "/".join(out)


def tiny_rootfs_tar(path):
    """A few MB root filesystem cut from the default template: dash, echo, cat
    and the libraries they load."""
    want_files = ["usr/bin/dash", "usr/bin/echo", "usr/bin/cat", "etc/passwd", "etc/group"]
    libs = set()
    for b in ("usr/bin/dash", "usr/bin/echo", "usr/bin/cat"):
        out = subprocess.run(["ldd", os.path.join(ROOTFS, b)], capture_output=True, text=True).stdout
        for line in out.splitlines():
            m = re.search(r"(/\S+)\s+\(0x", line)
            if m:
                libs.add(resolve_in(ROOTFS, m.group(1)))
    assert any("libc.so" in l for l in libs), libs
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        def add_dir(name, mode=0o755):
            ti = tarfile.TarInfo(name)
            ti.type, ti.mode = tarfile.DIRTYPE, mode
            tf.addfile(ti)

        def add_link(name, target):
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname, ti.mode = tarfile.SYMTYPE, target, 0o777
            tf.addfile(ti)

        for d in ("usr", "usr/bin", "usr/sbin", "usr/lib", "usr/lib/x86_64-linux-gnu", "usr/lib64", "etc",
                  "proc", "dev", "sys", "run", "var", "var/tmp"):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_dir("root", 0o700)
        for name, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"),
                             ("usr/bin/sh", "dash")):
            add_link(name, target)
        for f in want_files + sorted(libs):
            tf.add(os.path.join(ROOTFS, f), arcname=f, recursive=False)
        # the loader's well-known path, as in the template (an absolute link)
        ld = os.path.join(ROOTFS, "usr/lib64/ld-linux-x86-64.so.2")
        if os.path.islink(ld):
            add_link("usr/lib64/ld-linux-x86-64.so.2", os.readlink(ld))


def test_template_ls_lists_default(cli_env):
    out = fb(cli_env, "template", "ls", check=0).stdout
    lines = out.splitlines()
    assert lines[0].split()[0] == "NAME"
    assert any(l.split()[0] == "default" for l in lines[1:]), out
    tpls = json.loads(fb(cli_env, "--json", "template", "ls", check=0).stdout)["templates"]
    default = [t for t in tpls if t["name"] == "default"]
    assert len(default) == 1 and default[0]["size_bytes"] > 0


def test_template_import_create_exec_rm(client, cli_env, tmp):
    name = "it-tiny-" + secrets.token_hex(3)
    tarpath = os.path.join(tmp, "tiny.tar")
    tiny_rootfs_tar(tarpath)
    assert os.path.getsize(tarpath) < 20 << 20
    p = fb(cli_env, "template", "import", name, tarpath)
    assert p.returncode == 0, p
    sid = None
    try:
        out = fb(cli_env, "template", "ls", check=0).stdout
        assert any(l.split()[0] == name for l in out.splitlines()), out
        # the same name again is refused
        p = fb(cli_env, "template", "import", name, tarpath)
        assert p.returncode == 1 and p.stderr.startswith("forkbox: ") and name in p.stderr, p

        sid = fb(cli_env, "create", "--template", name, check=0).stdout.strip()
        assert ID_RE.match(sid)
        p = fb(cli_env, "exec", sid, "--", "echo", "hi")
        assert p.returncode == 0 and p.stdout == "hi\n", p
        p = fb(cli_env, "exec", sid, "--", "sh", "-c", "echo $((6*7)) > /tmp/x; cat /tmp/x")
        assert p.stdout == "42\n", p
        # python3 is not in this template
        p = fb(cli_env, "exec", sid, "--", "python3", "-c", "1")
        assert p.returncode != 0

        # in use: refused, with the API's message
        p = fb(cli_env, "template", "rm", name)
        assert p.returncode == 1 and p.stderr.startswith("forkbox: "), p
        fb(cli_env, "rm", sid, check=0)
        sid = None
        fb(cli_env, "template", "rm", name, check=0)
        out = fb(cli_env, "template", "ls", check=0).stdout
        assert not any(l.split()[0] == name for l in out.splitlines()), out
        p = fb(cli_env, "template", "rm", name)
        assert p.returncode == 1 and name in p.stderr
    finally:
        if sid:
            client.delete("/v1/sandboxes/" + sid)
        client.delete("/v1/templates/" + name)


def test_template_import_from_stdin_gzip(client, cli_env, tmp):
    name = "it-tinygz-" + secrets.token_hex(3)
    tarpath = os.path.join(tmp, "tiny.tar")
    tiny_rootfs_tar(tarpath)
    with open(tarpath, "rb") as f:
        data = gzip.compress(f.read(), 1)
    try:
        p = fb(cli_env, "template", "import", name, "-", input=data)
        assert p.returncode == 0, p
        tpls = json.loads(fb(cli_env, "--json", "template", "ls", check=0).stdout)["templates"]
        assert name in [t["name"] for t in tpls]
        p = fb(cli_env, "run", "--template", name, "--", "cat", "/etc/passwd")
        assert p.returncode == 0 and p.stdout.startswith("root:"), p
    finally:
        client.delete("/v1/templates/" + name)


@pytest.mark.parametrize("content", [b"this is not a tar archive\n" * 100, b"", os.urandom(20000)],
                         ids=["text", "empty", "random"])
def test_template_import_non_tar_fails_clearly(client, cli_env, tmp, content):
    name = "it-bad-" + secrets.token_hex(3)
    path = os.path.join(tmp, "bad.tar")
    with open(path, "wb") as f:
        f.write(content)
    p = fb(cli_env, "template", "import", name, path)
    assert p.returncode == 1, p
    assert p.stderr.startswith("forkbox: "), p.stderr
    assert "archive" in p.stderr.lower() or "tarball" in p.stderr.lower(), p.stderr
    assert name not in [t["name"] for t in client.get("/v1/templates").json()["templates"]]
    assert not os.path.exists(os.path.join(STATE, "templates", name))


def test_template_import_missing_file_and_bad_name(cli_env, tmp):
    p = fb(cli_env, "template", "import", "it-nofile", os.path.join(tmp, "missing.tar"))
    assert p.returncode == 1 and "missing.tar" in p.stderr and "No such file" in p.stderr, p
    path = os.path.join(tmp, "t.tar")
    with open(path, "wb") as f:
        f.write(tar_of([("etc", "dir", None)]))
    p = fb(cli_env, "template", "import", "Bad Name!", path)
    assert p.returncode in (1, 2) and p.stderr.startswith("forkbox"), p


# --- info and version -------------------------------------------------------------------------

def test_info_and_version(client, cli_env):
    p = fb(cli_env, "info", check=0)
    assert "version" in p.stdout and "cgroup" in p.stdout and p.stderr == ""
    info = json.loads(fb(cli_env, "--json", "info", check=0).stdout)
    assert info == client.get("/v1/info").json() or info["version"] == client.get("/v1/info").json()["version"]
    p = fb(cli_env, "version", check=0)
    lines = p.stdout.split("\n")
    assert lines[0].split()[0] == "forkbox" and lines[1].split()[0] == "forkboxd"
    assert lines[1].split()[1] == info["version"]
