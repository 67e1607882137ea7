"""The files and archive endpoints: content, listings, deletes, and path
containment.  Every containment test plants a marker on the host and shows that
no request reaches it: `..`, symlinks made inside the sandbox (absolute ones,
ones into /proc, ones swapped while requests run) and hostile tar archives all
stay inside the sandbox's root."""
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import socket
import tarfile
import threading
import time
import urllib.parse

import pytest

from conftest import SOCKET, STATE

TOKEN = secrets.token_hex(6)
MARKER = "/tmp/forkbox-host-marker-" + TOKEN
MARKER_DIR = "/tmp/forkbox-host-dir-" + TOKEN
SECRET = ("HOST-SECRET-%s\n" % TOKEN).encode()


# --- helpers -------------------------------------------------------------------

def url(sid, path, endpoint="files", **params):
    q = {"path": path}
    q.update(params)
    return "/v1/sandboxes/%s/%s?%s" % (sid, endpoint, urllib.parse.urlencode(q))


def sh(client, sid, cmd, **kw):
    """Runs a shell command in the sandbox; returns the exec result."""
    return client.exec(sid, cmd, **kw)


def sh_ok(client, sid, cmd, **kw):
    r = client.exec(sid, cmd, **kw)
    assert r["exit_code"] == 0, (cmd, r)
    return r["stdout"]


def exists_in(client, sid, path):
    return client.exec(sid, ["test", "-e", path])["exit_code"] == 0


def is_link_in(client, sid, path):
    return client.exec(sid, ["test", "-L", path])["exit_code"] == 0


def cat_in(client, sid, path):
    r = client.exec(sid, ["cat", path])
    assert r["exit_code"] == 0, r
    return r["stdout"]


def err_code(resp):
    return resp.json()["error"]["code"]


def raw_request(method, path, body, key, headers=None, chunked=False, timeout=30):
    """One HTTP request on a raw socket.  Unlike http.client it still reads the
    answer when the server refuses a body before it was fully sent."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(SOCKET)
    head = "%s %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nConnection: close\r\n" % (
        method, path, key)
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    else:
        head += "Content-Length: %d\r\n" % len(body)
    for k, v in (headers or {}).items():
        head += "%s: %s\r\n" % (k, v)
    try:
        s.sendall(head.encode() + b"\r\n")
        if chunked:
            step = 65536
            for i in range(0, len(body), step):
                part = body[i:i + step]
                s.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall(body)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered early and closed; read what it said
    out = b""
    while True:
        try:
            d = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not d:
            break
        out += d
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return status, body


def make_tar(members, mode="w"):
    """members: list of (name, kind, arg) where kind is file/dir/symlink/hardlink/
    chr/blk/fifo; arg is bytes for files, the target for links, an octal mode
    for dirs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as tf:
        for name, kind, arg in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = int(time.time())
            if kind == "file":
                data = arg if arg is not None else b""
                ti.size = len(data)
                ti.mode = 0o644
                tf.addfile(ti, io.BytesIO(data))
                continue
            if kind == "dir":
                ti.type = tarfile.DIRTYPE
                ti.mode = arg if arg is not None else 0o755
            elif kind == "symlink":
                ti.type = tarfile.SYMTYPE
                ti.linkname = arg
                ti.mode = 0o777
            elif kind == "hardlink":
                ti.type = tarfile.LNKTYPE
                ti.linkname = arg
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
                ti.devmajor, ti.devminor = 1, 3
            elif kind == "blk":
                ti.type = tarfile.BLKTYPE
                ti.devmajor, ti.devminor = 7, 0
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            else:
                raise ValueError(kind)
            tf.addfile(ti)
    return buf.getvalue()


class HostMarker:
    """A file and a directory on the host that no request may read or change."""

    def __init__(self):
        with open(MARKER, "wb") as f:
            f.write(SECRET)
        os.makedirs(MARKER_DIR, exist_ok=True)
        with open(os.path.join(MARKER_DIR, "keep"), "wb") as f:
            f.write(SECRET)
        self.stat = os.stat(MARKER)
        self.dir_stat = os.stat(os.path.join(MARKER_DIR, "keep"))

    def check(self):
        st = os.stat(MARKER)
        with open(MARKER, "rb") as f:
            assert f.read() == SECRET, "host marker content changed"
        assert (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode) == (
            self.stat.st_ino, self.stat.st_size, self.stat.st_mtime_ns, self.stat.st_mode), "host marker touched"
        assert os.listdir(MARKER_DIR) == ["keep"], "host marker dir changed"
        st = os.stat(os.path.join(MARKER_DIR, "keep"))
        assert (st.st_ino, st.st_mtime_ns) == (self.dir_stat.st_ino, self.dir_stat.st_mtime_ns)

    def remove(self):
        os.unlink(MARKER)
        shutil.rmtree(MARKER_DIR)


@pytest.fixture(scope="module")
def host_marker():
    m = HostMarker()
    yield m
    m.check()
    m.remove()


@pytest.fixture(scope="module")
def sb(client, host_marker):
    """One sandbox shared by the tests of this module; each test uses its own paths."""
    s = client.create()
    sid = s["id"]
    assert not exists_in(client, sid, MARKER), "the host marker must not be visible in a sandbox"
    yield sid
    client.delete("/v1/sandboxes/" + sid)


def never_host(resp):
    """A response never carries the host marker's content."""
    assert SECRET not in resp.body, resp


# --- PUT ---------------------------------------------------------------------------

def test_put_creates_parents_and_answers_path_and_size(client, sb):
    r = client.put(url(sb, "/root/put1/a/b/c.txt"), raw=b"hello")
    assert r.status == 201, r
    assert r.json() == {"path": "/root/put1/a/b/c.txt", "size": 5}
    assert cat_in(client, sb, "/root/put1/a/b/c.txt") == "hello"
    out = sh_ok(client, sb, "stat -c '%a %F' /root/put1 /root/put1/a /root/put1/a/b /root/put1/a/b/c.txt")
    assert out.splitlines() == ["755 directory", "755 directory", "755 directory", "644 regular file"]


@pytest.mark.parametrize("mode", ["0600", "0750", "0444", "4755", "1777", "0000"])
def test_put_applies_mode(client, sb, mode):
    path = "/root/put-mode/f" + mode
    r = client.put(url(sb, path, mode=mode), raw=b"#!/bin/sh\n")
    assert r.status == 201, r
    assert sh_ok(client, sb, "stat -c %a " + path).strip() == "%o" % int(mode, 8)


@pytest.mark.parametrize("mode", ["0999", "abc", "-1", "", "077777", "10000", "0x1ff"])
def test_put_rejects_bad_mode(client, sb, mode):
    path = "/root/put-badmode/" + secrets.token_hex(3)
    r = client.put(url(sb, path, mode=mode), raw=b"x")
    assert r.status == 400, (mode, r)
    assert err_code(r) == "bad_request"
    assert not exists_in(client, sb, path)


def test_put_replaces_existing_file(client, sb):
    path = "/root/put-replace.txt"
    assert client.put(url(sb, path, mode="0600"), raw=b"a much longer first version\n").status == 201
    ino1 = sh_ok(client, sb, "stat -c %i " + path)
    r = client.put(url(sb, path, mode="0640"), raw=b"v2")
    assert r.status == 201 and r.json()["size"] == 2
    assert client.get(url(sb, path)).body == b"v2"
    assert sh_ok(client, sb, "stat -c '%a %s' " + path).strip() == "640 2"
    # replaced by rename, so a reader holding the old file never sees a mix
    assert sh_ok(client, sb, "stat -c %i " + path) != ino1
    # and no temp file is left behind next to it
    assert sh_ok(client, sb, "ls -A /root | grep -c fbtmp || true").strip() == "0"


def test_concurrent_puts_to_one_path(client, sb):
    bodies = [("writer-%d-" % i).encode() * (20000 + i) for i in range(8)]
    statuses = []

    def put(b):
        statuses.append(client.put(url(sb, "/root/put-concurrent"), raw=b).status)

    threads = [threading.Thread(target=put, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert statuses == [201] * len(bodies)
    # one writer wins whole; nothing is interleaved, no temp file is left
    assert client.get(url(sb, "/root/put-concurrent")).body in bodies
    assert sh_ok(client, sb, "ls -A /root | grep -c fbtmp || true").strip() == "0"


def test_put_empty_body(client, sb):
    r = client.put(url(sb, "/root/empty"), raw=b"")
    assert r.status == 201, r
    assert r.json() == {"path": "/root/empty", "size": 0}
    g = client.get(url(sb, "/root/empty"))
    assert g.status == 200 and g.body == b""
    assert sh_ok(client, sb, "stat -c %s /root/empty").strip() == "0"


def test_put_onto_directory_is_refused_and_keeps_it(client, sb):
    sh_ok(client, sb, "mkdir -p /root/put-dir/sub && echo keep > /root/put-dir/sub/k")
    r = client.put(url(sb, "/root/put-dir/sub"), raw=b"x")
    assert r.status == 409, r
    assert cat_in(client, sb, "/root/put-dir/sub/k") == "keep\n"
    assert sh_ok(client, sb, "ls -A /root/put-dir").split() == ["sub"]


def test_put_below_a_file_is_refused(client, sb):
    assert client.put(url(sb, "/root/put-notdir"), raw=b"x").status == 201
    # an empty body: see test_put_refused_with_a_body_reports_the_real_error for one with data
    r = client.put(url(sb, "/root/put-notdir/child"), raw=b"")
    assert r.status == 400, r
    assert cat_in(client, sb, "/root/put-notdir") == "x"


@pytest.mark.parametrize("path", ["/root/put-notdir2/child", "/proc/1/root/tmp/x", "/root/put-dangling/x"])
def test_put_refused_with_a_body_reports_the_real_error(client, sb, path):
    assert client.put(url(sb, "/root/put-notdir2"), raw=b"x").status == 201
    sh_ok(client, sb, "ln -sfn /nonexistent-dir /root/put-dangling")
    r = client.put(url(sb, path), raw=b"y" * (2 << 20))
    assert r.status in (400, 404), r


def test_put_root_and_missing_path_are_refused(client, sb):
    assert client.put(url(sb, "/"), raw=b"x").status == 400
    assert client.put(url(sb, "/.."), raw=b"x").status == 400
    assert client.put("/v1/sandboxes/%s/files" % sb, raw=b"x").status == 400
    assert client.put(url(sb, "relative/path"), raw=b"x").status == 400


def test_aborted_upload_leaves_nothing(client, sb, daemon):
    """A client that goes away mid-upload leaves neither the file nor a temp file."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(SOCKET)
    s.sendall(("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 1000000\r\n\r\n"
               % (url(sb, "/root/aborted/file"), daemon.key)).encode() + b"y" * 200000)
    time.sleep(0.3)
    s.close()
    deadline = time.time() + 5
    while time.time() < deadline:
        left = sh_ok(client, sb, "ls -A /root/aborted 2>/dev/null || true").split()
        if not left:
            break
        time.sleep(0.1)
    assert left == []
    assert not exists_in(client, sb, "/root/aborted/file")
    # the daemon is still fine
    assert client.get(url(sb, "/root")).status == 200


# --- GET -----------------------------------------------------------------------------

def test_get_binary_roundtrip_3mb(client, sb):
    data = os.urandom(3 * 1024 * 1024) + b"\0\r\n\xff"
    r = client.put(url(sb, "/root/big.bin"), raw=data)
    assert r.status == 201 and r.json()["size"] == len(data)
    g = client.get(url(sb, "/root/big.bin"))
    assert g.status == 200
    assert g.headers.get("Content-Type") == "application/octet-stream"
    assert int(g.headers["Content-Length"]) == len(data)
    assert g.body == data
    inside = sh_ok(client, sb, "sha256sum /root/big.bin").split()[0]
    assert inside == hashlib.sha256(data).hexdigest()


def test_get_file_written_inside(client, sb):
    sh_ok(client, sb, "printf 'a\\0b\\n' > /root/inside.bin")
    g = client.get(url(sb, "/root/inside.bin"))
    assert g.status == 200 and g.body == b"a\0b\n"


def test_get_missing_is_404(client, sb):
    r = client.get(url(sb, "/root/does/not/exist"))
    assert r.status == 404
    assert err_code(r) == "not_found"
    assert "message" in r.json()["error"]


def test_get_unknown_sandbox_is_404(client):
    r = client.get(url("sbx_0000000000000000", "/etc/passwd"))
    assert r.status == 404 and err_code(r) == "not_found"
    r = client.put(url("sbx_0000000000000000", "/root/x"), raw=b"x")
    assert r.status == 404
    r = client.delete(url("sbx_0000000000000000", "/root/x"))
    assert r.status == 404


def test_get_directory_listing(client, sb):
    sh_ok(client, sb, "mkdir -p /root/ls/sub && printf 12345 > /root/ls/f && chmod 0640 /root/ls/f"
                      " && chmod 0710 /root/ls/sub && ln -s f /root/ls/link && mkfifo /root/ls/pipe")
    before = time.time()
    r = client.get(url(sb, "/root/ls"))
    assert r.status == 200, r
    assert r.headers["Content-Type"].startswith("application/json")
    entries = {e["name"]: e for e in r.json()["entries"]}
    assert set(entries) == {"sub", "f", "link", "pipe"}
    for e in entries.values():
        assert set(e) == {"name", "type", "size", "mode", "mtime"}, e
        assert re.fullmatch(r"0[0-7]{3}", e["mode"]), e
        mt = datetime.datetime.strptime(e["mtime"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
        assert abs(mt.timestamp() - before) < 120, e
    assert entries["f"]["type"] == "file" and entries["f"]["size"] == 5 and entries["f"]["mode"] == "0640"
    assert entries["sub"]["type"] == "dir" and entries["sub"]["mode"] == "0710"
    assert entries["link"]["type"] == "symlink" and entries["link"]["size"] == 1
    assert entries["pipe"]["type"] == "other"
    inside = int(sh_ok(client, sb, "stat -c %Y /root/ls/f"))
    mt = datetime.datetime.strptime(entries["f"]["mtime"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    assert int(mt.timestamp()) == inside


def test_get_empty_directory_and_dir_through_symlink(client, sb):
    sh_ok(client, sb, "mkdir -p /root/lsempty && mkdir -p /root/lsreal && touch /root/lsreal/x"
                      " && ln -s /root/lsreal /root/lslink")
    assert client.get(url(sb, "/root/lsempty")).json() == {"entries": []}
    names = [e["name"] for e in client.get(url(sb, "/root/lslink")).json()["entries"]]
    assert names == ["x"]


# --- DELETE --------------------------------------------------------------------------

def test_delete_file(client, sb):
    assert client.put(url(sb, "/root/del/f"), raw=b"x").status == 201
    r = client.delete(url(sb, "/root/del/f"))
    assert r.status == 204 and r.body == b""
    assert not exists_in(client, sb, "/root/del/f")
    assert client.get(url(sb, "/root/del/f")).status == 404
    assert client.delete(url(sb, "/root/del/f")).status == 404


def test_delete_directories(client, sb):
    sh_ok(client, sb, "mkdir -p /root/deld/empty /root/deld/full/a/b && echo 1 > /root/deld/full/a/b/c"
                      " && ln -s / /root/deld/full/rootlink && mkfifo /root/deld/full/p")
    assert client.delete(url(sb, "/root/deld/empty")).status == 204
    assert not exists_in(client, sb, "/root/deld/empty")

    r = client.delete(url(sb, "/root/deld/full"))
    assert r.status == 409, r
    assert err_code(r) == "conflict"
    assert "recursive" in r.json()["error"]["message"]
    assert cat_in(client, sb, "/root/deld/full/a/b/c") == "1\n"
    r = client.delete(url(sb, "/root/deld/full", recursive="false"))
    assert r.status == 409

    r = client.delete(url(sb, "/root/deld/full", recursive="yes"))
    assert r.status == 400, r

    r = client.delete(url(sb, "/root/deld/full", recursive="true"))
    assert r.status == 204, r
    assert not exists_in(client, sb, "/root/deld/full")
    # the symlink to / was removed, not followed
    assert exists_in(client, sb, "/etc/passwd") and exists_in(client, sb, "/root/deld")


def test_delete_missing_and_root(client, sb):
    r = client.delete(url(sb, "/root/nothing-here"))
    assert r.status == 404 and err_code(r) == "not_found"
    assert client.delete(url(sb, "/root/nothing-here", recursive="true")).status == 404
    assert client.delete(url(sb, "/")).status == 400
    assert client.delete(url(sb, "/../..", recursive="true")).status == 400
    assert exists_in(client, sb, "/etc/passwd")
    assert client.delete("/v1/sandboxes/%s/files" % sb).status == 400


def test_delete_symlink_removes_the_link_only(client, sb):
    sh_ok(client, sb, "mkdir -p /root/dl/target && echo t > /root/dl/target/f && ln -s /root/dl/target /root/dl/link")
    assert client.delete(url(sb, "/root/dl/link", recursive="true")).status == 204
    assert not is_link_in(client, sb, "/root/dl/link")
    assert cat_in(client, sb, "/root/dl/target/f") == "t\n"


# --- containment: "..", absolute symlinks, /proc ---------------------------------------

def test_dotdot_stops_at_sandbox_root(client, sb, host_marker):
    sh_ok(client, sb, "echo 'fbmark-%s:x:4242:4242::/nonexistent:/usr/sbin/nologin' >> /etc/passwd" % TOKEN)
    inside = cat_in(client, sb, "/etc/passwd").encode()
    assert TOKEN.encode() in inside
    with open("/etc/passwd", "rb") as f:
        assert f.read() != inside
    for p in ["/../../etc/passwd", "/root/../../../../etc/passwd", "//..//..//etc//passwd",
              "/./.././etc/./passwd", "/etc/../../etc/passwd", "/" + "../" * 64 + "etc/passwd"]:
        r = client.get(url(sb, p))
        assert r.status == 200, (p, r)
        assert r.body == inside, p
    # percent-encoded dots and slashes too
    r = client.get("/v1/sandboxes/%s/files?path=%%2F%%2E%%2E%%2F%%2E%%2E%%2Fetc%%2Fpasswd" % sb)
    assert r.status == 200 and r.body == inside


def test_dotdot_never_reaches_host_marker(client, sb, host_marker, daemon):
    rel = MARKER.lstrip("/")
    attempts = ["/../../" + rel, "/root/../../../" + rel, "/tmp/../../../" + rel, MARKER]
    for p in attempts:
        r = client.get(url(sb, p))
        assert r.status == 404, (p, r)
        never_host(r)
        assert client.delete(url(sb, p)).status == 404
    # the daemon's own secret is not reachable either
    keyfile = "/../../.." + os.path.join(STATE, "api-key")
    r = client.get(url(sb, keyfile))
    assert r.status == 404 and daemon.key.encode() not in r.body
    # a write "up there" lands in the sandbox's /tmp
    r = client.put(url(sb, "/../../../" + rel), raw=b"SANDBOX-COPY")
    assert r.status == 201, r
    assert r.json()["path"] == "/../../../" + rel or r.json()["path"] == MARKER
    assert cat_in(client, sb, MARKER) == "SANDBOX-COPY"
    for p in attempts:
        r = client.get(url(sb, p))
        assert r.status == 200 and r.body == b"SANDBOX-COPY", p
    assert client.delete(url(sb, "/../../" + rel)).status == 204
    assert not exists_in(client, sb, MARKER)
    host_marker.check()


def test_absolute_symlink_resolves_inside_sandbox(client, sb, host_marker):
    sh_ok(client, sb, "ln -sfn /etc/hostname /root/l && ln -sfn %s /root/m" % MARKER)
    # the default template has no /etc/hostname; the host does
    assert os.path.exists("/etc/hostname")
    r = client.get(url(sb, "/root/l"))
    inside = client.exec(sb, ["cat", "/etc/hostname"])
    if inside["exit_code"] != 0:
        assert r.status == 404, r
    else:
        assert r.status == 200 and r.body.decode() == inside["stdout"]
    # give the sandbox its own hostname file: the link reads that, never the host's
    name = "sandbox-%s\n" % TOKEN
    assert client.put(url(sb, "/etc/hostname"), raw=name.encode()).status == 201
    r = client.get(url(sb, "/root/l"))
    assert r.status == 200 and r.body == name.encode()

    r = client.get(url(sb, "/root/m"))
    assert r.status == 404, r
    never_host(r)
    sh_ok(client, sb, "echo SANDBOX-M > %s" % MARKER)
    r = client.get(url(sb, "/root/m"))
    assert r.status == 200 and r.body == b"SANDBOX-M\n"
    sh_ok(client, sb, "rm -f %s" % MARKER)
    host_marker.check()


def test_symlinked_directory_resolves_inside_sandbox(client, sb, host_marker):
    sh_ok(client, sb, "ln -sfn /tmp /root/tmplink && ln -sfn %s /root/dirlink" % MARKER_DIR)
    r = client.get(url(sb, "/root/tmplink/" + os.path.basename(MARKER)))
    assert r.status == 404, r
    r = client.get(url(sb, "/root/dirlink"))
    assert r.status == 404, r
    r = client.get(url(sb, "/root/dirlink/keep"))
    assert r.status == 404, r
    never_host(r)
    host_marker.check()


@pytest.mark.parametrize("target", ["/proc/1/root", "/proc/self/root", "/proc/thread-self/root",
                                    "/proc/1/cwd", "/proc/self/cwd"])
def test_proc_magic_links_are_refused(client, sb, host_marker, target):
    link = "/root/proc-" + target.strip("/").replace("/", "-")
    sh_ok(client, sb, "ln -sfn %s %s" % (target, link))
    inside = cat_in(client, sb, "/etc/passwd").encode()
    for p in [target + "/etc/passwd", link + "/etc/passwd", target + MARKER, link + MARKER,
              link + "/../../../../" + MARKER]:
        r = client.get(url(sb, p))
        never_host(r)
        # refused, absent, or the sandbox's own file: never anything else
        assert r.status in (400, 404) or (r.status == 200 and r.body == inside), (p, r)
        assert r.status < 500, (p, r)
    for p in [link + "/tmp/fb-procwrite", target + "/tmp/fb-procwrite", link + MARKER]:
        # an empty body keeps this about resolution (see test_put_refused_with_a_body_...)
        r = client.put(url(sb, p), raw=b"")
        assert r.status in (400, 404), (p, r)
        r = client.delete(url(sb, p))
        assert r.status in (400, 404, 204), (p, r)
    assert not os.path.exists("/tmp/fb-procwrite")
    host_marker.check()


def test_fd_magic_links_are_refused(client, sb, host_marker):
    # fd/exe/root links are magic links: refused even though they only lead to sandbox objects
    for p in ["/proc/self/fd/0", "/proc/1/fd/0", "/proc/self/exe", "/proc/1/exe", "/proc/self/root"]:
        r = client.get(url(sb, p))
        assert r.status in (400, 404), (p, r)


def test_put_through_symlinked_directory_stays_inside(client, sb, host_marker):
    name = "forkbox-it-put-" + TOKEN
    sh_ok(client, sb, "ln -sfn /tmp /root/t")
    r = client.put(url(sb, "/root/t/" + name), raw=b"inside")
    assert r.status == 201, r
    assert cat_in(client, sb, "/tmp/" + name) == "inside"
    assert not os.path.exists("/tmp/" + name)
    # parents created through the link are also inside
    r = client.put(url(sb, "/root/t/%s-dir/a/b" % name), raw=b"deep")
    assert r.status == 201
    assert cat_in(client, sb, "/tmp/%s-dir/a/b" % name) == "deep"
    assert not os.path.exists("/tmp/%s-dir" % name)
    # through a link to the host marker's directory: the sandbox has no such
    # directory, so the write fails (a dangling link) or lands inside
    sh_ok(client, sb, "ln -sfn %s /root/md" % MARKER_DIR)
    r = client.put(url(sb, "/root/md/keep"), raw=b"overwrite?")
    assert r.status in (201, 404), r
    if r.status == 201:
        assert cat_in(client, sb, MARKER_DIR + "/keep") == "overwrite?"
    host_marker.check()
    sh_ok(client, sb, "rm -rf /tmp/%s* %s" % (name, MARKER_DIR))


def test_put_onto_symlink_replaces_the_link(client, sb, host_marker):
    sh_ok(client, sb, "echo original > /root/sym-target && ln -sfn /root/sym-target /root/sym-in"
                      " && ln -sfn %s /root/sym-host" % MARKER)
    r = client.put(url(sb, "/root/sym-host"), raw=b"replaced-host")
    assert r.status == 201, r
    assert not is_link_in(client, sb, "/root/sym-host")
    assert cat_in(client, sb, "/root/sym-host") == "replaced-host"
    assert not exists_in(client, sb, MARKER)

    r = client.put(url(sb, "/root/sym-in"), raw=b"replaced-in")
    assert r.status == 201
    assert not is_link_in(client, sb, "/root/sym-in")
    assert cat_in(client, sb, "/root/sym-in") == "replaced-in"
    assert cat_in(client, sb, "/root/sym-target") == "original\n"
    host_marker.check()


def test_delete_through_symlinks_never_touches_host(client, sb, host_marker):
    base = os.path.basename(MARKER)
    sh_ok(client, sb, "mkdir -p /root/dh && ln -sfn %s /root/dh/file && ln -sfn /tmp /root/dh/tmp"
                      " && ln -sfn %s /root/dh/dir && ln -sfn / /root/dh/root" % (MARKER, MARKER_DIR))
    # through a symlinked parent: the sandbox's /tmp has no such file
    assert client.delete(url(sb, "/root/dh/tmp/" + base)).status == 404
    assert client.delete(url(sb, "/root/dh/root" + MARKER)).status == 404
    assert client.delete(url(sb, "/root/dh/dir/keep")).status == 404
    host_marker.check()
    # the links themselves are removed, not their targets (a trailing slash
    # does not make the last component followed)
    assert client.delete(url(sb, "/root/dh/file")).status == 204
    assert client.delete(url(sb, "/root/dh/dir/", recursive="true")).status == 204
    assert not is_link_in(client, sb, "/root/dh/dir")
    assert client.delete(url(sb, "/root/dh/root", recursive="true")).status == 204
    assert exists_in(client, sb, "/etc/passwd")
    # a tree holding links to the host paths is removed without following them
    assert client.delete(url(sb, "/root/dh", recursive="true")).status == 204
    assert not exists_in(client, sb, "/root/dh")
    host_marker.check()


def test_symlink_swap_race_never_reaches_host(client, sandbox, host_marker):
    """A loop inside keeps swapping /root/race between a directory and a symlink
    to / while the client reads and writes through it."""
    sid = sandbox["id"]
    rel = MARKER.lstrip("/")
    swap = b"""
import os, shutil
p, n = "/root/race", 0
def clear():
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(p, ignore_errors=True)
while not os.path.exists("/root/stop"):
    clear()
    try:
        os.makedirs(p + "/tmp", exist_ok=True)
    except OSError:
        pass
    clear()
    try:
        os.symlink("/", p)
    except OSError:
        pass
    n += 1
print(n)
"""
    assert client.put(url(sid, "/root/swap.py"), raw=swap).status == 201
    result = {}

    def swapper():
        result["r"] = client.exec(sid, ["python3", "/root/swap.py"], timeout=60)

    t = threading.Thread(target=swapper)
    t.start()
    try:
        time.sleep(0.2)
        statuses = []
        for i in range(50):
            p = "/root/race/" + rel
            w = client.put(url(sid, p), raw=b"RACE-%d" % i)
            statuses.append(w.status)
            # 503 is the known wrong answer for a refused upload (see above)
            assert w.status in (201, 400, 404, 409, 503), w
            g = client.get(url(sid, p))
            never_host(g)
            assert g.status in (200, 400, 404), g
            if g.status == 200:
                assert g.body.startswith(b"RACE-"), g
            g = client.get(url(sid, "/root/race/../../../" + rel))
            never_host(g)
            d = client.delete(url(sid, p))
            assert d.status in (204, 400, 404, 409), d
            host_marker.check()
    finally:
        client.put(url(sid, "/root/stop"), raw=b"")
        t.join(60)
    assert not t.is_alive()
    assert result["r"]["exit_code"] == 0, result
    assert int(result["r"]["stdout"]) > 0
    print("race: swaps=%s put statuses=%s" % (result["r"]["stdout"].strip(), sorted(statuses)))
    assert 201 in statuses
    host_marker.check()


@pytest.mark.parametrize("path,make", [
    ("/root/special/fifo", "mkfifo /root/special/fifo"),
    ("/dev/null", None),
    ("/dev/zero", None),
    ("/dev/urandom", None),
    ("/root/special/sock", "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/root/special/sock')\""),
])
def test_special_files_are_refused_without_hanging(client, sb, path, make):
    if make:
        sh_ok(client, sb, "mkdir -p /root/special && rm -f %s && %s" % (path, make))
    t0 = time.time()
    r = client.get(url(sb, path), timeout=10)
    assert r.status == 400, r
    assert err_code(r) == "bad_request"
    assert time.time() - t0 < 5


def test_fifo_is_not_opened(client, sb):
    """Refusing a fifo must not open it: a writer blocked on it stays blocked."""
    sh_ok(client, sb, "mkdir -p /root/special && rm -f /root/special/fifo2 && mkfifo /root/special/fifo2")
    assert client.get(url(sb, "/root/special/fifo2"), timeout=10).status == 400
    # a link to the fifo is refused the same way
    sh_ok(client, sb, "ln -sfn /root/special/fifo2 /root/special/fifo2-link")
    assert client.get(url(sb, "/root/special/fifo2-link"), timeout=10).status == 400
    # no reader appeared: opening it for writing without blocking still fails (ENXIO)
    out = sh_ok(client, sb, "python3 -c \"import os\ntry:\n os.open('/root/special/fifo2', os.O_WRONLY|os.O_NONBLOCK); print('reader')\n"
                            "except OSError as e: print(e.errno)\"")
    assert out.strip() == "6"


def test_block_device_is_refused(client, sb):
    r = client.exec(sb, "mknod /root/special-blk b 7 0 && echo made")
    if r["exit_code"] != 0:
        pytest.skip("cannot mknod inside the sandbox (%s)" % r["stderr"].strip())
    assert client.get(url(sb, "/root/special-blk"), timeout=10).status == 400


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/version"])
def test_proc_pseudo_files_are_refused_or_read_fully(client, sb, path):
    t0 = time.time()
    r = client.get(url(sb, path), timeout=10)
    assert time.time() - t0 < 5
    if r.status == 400:
        return
    assert r.status == 200
    # refusing is fine; answering 200 must give the real content
    assert r.body != b"", "200 with an empty body for %s" % path


def test_path_with_nul_byte_is_refused(client, sb):
    sh_ok(client, sb, "mkdir -p /root/nul-keep && echo precious > /root/nul-keep/file")
    base = "/v1/sandboxes/%s/files?path=" % sb
    r = client.delete(base + "/root/nul-keep%00/../../etc&recursive=true")
    still_there = exists_in(client, sb, "/root/nul-keep/file")
    r2 = client.put(base + "/root/nul-f.txt%00.png", raw=b"x")
    created = exists_in(client, sb, "/root/nul-f.txt")
    r3 = client.get(base + "/root/nul-keep%00/file")
    assert still_there, "DELETE of a path with a NUL byte removed /root/nul-keep (status %d)" % r.status
    assert not created, "PUT of /root/nul-f.txt\\0.png wrote /root/nul-f.txt (status %d)" % r2.status
    assert (r.status, r2.status, r3.status) == (400, 400, 400)


NONUTF8 = b"\xff\xfe-latin1-\xe9"


@pytest.fixture
def nonutf8_dir(client, sb):
    d = "/root/nonutf8-" + secrets.token_hex(3)
    script = ("import os, sys; d = sys.argv[1].encode(); os.makedirs(d)\n"
              "for i in range(20): open(d + b'/ok%%02d' %% i, 'w').close()\n"
              "open(d + b'/' + %r, 'w').write('x')\n" % NONUTF8)
    r = client.exec(sb, ["python3", "-c", script, d])
    assert r["exit_code"] == 0, r
    return d


@pytest.mark.parametrize("what", ["listing", "archive", "get-path", "put-path", "delete-path"])
def test_non_utf8_names(client, sb, nonutf8_dir, what):
    d = nonutf8_dir
    q = urllib.parse.quote(d.encode() + b"/" + NONUTF8, safe="/")
    if what == "listing":
        r = client.get(url(sb, d))
        assert r.status == 200
        names = [e["name"] for e in r.json()["entries"]]
        assert len(names) == 21, "listing has %d of 21 entries" % len(names)
    elif what == "archive":
        r = client.get(url(sb, d, endpoint="archive"))
        assert r.status == 200, r
        assert len(tarfile.open(fileobj=io.BytesIO(r.body)).getmembers()) == 21
    elif what == "get-path":
        r = client.get("/v1/sandboxes/%s/files?path=%s" % (sb, q))
        assert r.status < 500, r
    elif what == "put-path":
        r = client.put("/v1/sandboxes/%s/files?path=%s" % (sb, q + "2"), raw=b"y")
        assert r.status < 500, r
    else:
        r = client.delete("/v1/sandboxes/%s/files?path=%s" % (sb, q))
        assert r.status < 500, r


def test_archive_put_non_utf8_member(client, sb):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tf:
        ti = tarfile.TarInfo("caf\xe9.txt")
        ti.size = 1
        tf.addfile(ti, io.BytesIO(b"x"))
    r = client.put(url(sb, "/root/nonutf8-archive", endpoint="archive"), raw=buf.getvalue())
    assert r.status in (201, 400), r


# --- archives -----------------------------------------------------------------------------

def test_archive_get(client, sb):
    blob = os.urandom(100000)
    assert client.put(url(sb, "/root/arc/a.txt"), raw=b"alpha\n").status == 201
    assert client.put(url(sb, "/root/arc/sub/deep/b.bin", mode="0600"), raw=blob).status == 201
    sh_ok(client, sb, "mkdir -p /root/arc/emptydir && ln -sfn sub/deep/b.bin /root/arc/rel-link"
                      " && ln -sfn /etc/passwd /root/arc/abs-link && mkfifo /root/arc/fifo")
    r = client.get(url(sb, "/root/arc", endpoint="archive"))
    assert r.status == 200, r
    assert r.headers["Content-Type"] == "application/x-tar"
    tf = tarfile.open(fileobj=io.BytesIO(r.body))
    members = {m.name.rstrip("/"): m for m in tf.getmembers()}
    for name in members:
        assert not name.startswith("/") and ".." not in name.split("/") and not name.startswith("arc"), name
    assert set(members) == {"a.txt", "sub", "sub/deep", "sub/deep/b.bin", "emptydir", "rel-link", "abs-link"}
    assert tf.extractfile(members["a.txt"]).read() == b"alpha\n"
    assert tf.extractfile(members["sub/deep/b.bin"]).read() == blob
    assert members["sub/deep/b.bin"].mode & 0o7777 == 0o600
    assert members["sub"].isdir() and members["emptydir"].isdir()
    assert members["rel-link"].issym() and members["rel-link"].linkname == "sub/deep/b.bin"
    # a symlink is archived as a symlink (its target is not read)
    assert members["abs-link"].issym() and members["abs-link"].linkname == "/etc/passwd"


def test_archive_get_errors(client, sb):
    assert client.get(url(sb, "/root/no-such-dir", endpoint="archive")).status == 404
    assert client.put(url(sb, "/root/arc-file"), raw=b"x").status == 201
    assert client.get(url(sb, "/root/arc-file", endpoint="archive")).status == 400
    assert client.get("/v1/sandboxes/%s/archive" % sb).status == 400


def test_archive_put_extracts(client, sb):
    members = [
        ("./", "dir", 0o755),
        ("d", "dir", 0o700),
        ("d/f.txt", "file", b"file-content\n"),
        ("d/e/g.bin", "file", bytes(range(256)) * 10),
        ("top.txt", "file", b"top"),
        ("empty", "file", b""),
        ("s", "symlink", "d/f.txt"),
        ("d/e/up", "symlink", "../f.txt"),
        ("dirlink", "symlink", "d"),
        ("h", "hardlink", "d/f.txt"),
    ]
    r = client.put(url(sb, "/root/xt", endpoint="archive"), raw=make_tar(members))
    assert r.status == 201, r
    body = r.json()
    assert body["path"] == "/root/xt"
    assert body["entries"] >= len(members) - 1
    assert cat_in(client, sb, "/root/xt/d/f.txt") == "file-content\n"
    assert cat_in(client, sb, "/root/xt/top.txt") == "top"
    assert client.get(url(sb, "/root/xt/d/e/g.bin")).body == bytes(range(256)) * 10
    assert sh_ok(client, sb, "stat -c %s /root/xt/empty").strip() == "0"
    assert sh_ok(client, sb, "stat -c %a /root/xt/d").strip() == "700"
    assert sh_ok(client, sb, "readlink /root/xt/s").strip() == "d/f.txt"
    assert cat_in(client, sb, "/root/xt/d/e/up") == "file-content\n"
    assert sh_ok(client, sb, "readlink /root/xt/dirlink").strip() == "d"
    ino = sh_ok(client, sb, "stat -c '%i %h' /root/xt/h /root/xt/d/f.txt").splitlines()
    assert ino[0] == ino[1] and ino[0].split()[1] == "2", ino


def test_archive_put_onto_a_file_is_refused(client, sb):
    assert client.put(url(sb, "/root/xt-file"), raw=b"file").status == 201
    r = client.put(url(sb, "/root/xt-file", endpoint="archive"), raw=make_tar([("a", "file", b"a")]))
    assert r.status in (400, 409), r
    assert cat_in(client, sb, "/root/xt-file") == "file"


def test_archive_put_through_symlinked_parent_stays_inside(client, sb, host_marker):
    sh_ok(client, sb, "ln -sfn /tmp /root/xt-tmplink")
    base = os.path.basename(MARKER_DIR)
    r = client.put(url(sb, "/root/xt-tmplink/" + base, endpoint="archive"),
                   raw=make_tar([("keep", "file", b"from-archive"), ("new", "file", b"new")]))
    assert r.status == 201, r
    assert cat_in(client, sb, MARKER_DIR + "/keep") == "from-archive"
    assert not os.path.exists(os.path.join(MARKER_DIR, "new"))
    host_marker.check()
    sh_ok(client, sb, "rm -rf " + MARKER_DIR)


def test_archive_put_into_existing_dir_replaces_files(client, sb):
    sh_ok(client, sb, "mkdir -p /root/xt2 && echo old > /root/xt2/a && echo keep > /root/xt2/b")
    r = client.put(url(sb, "/root/xt2", endpoint="archive"), raw=make_tar([("a", "file", b"new")]))
    assert r.status == 201, r
    assert cat_in(client, sb, "/root/xt2/a") == "new"
    assert cat_in(client, sb, "/root/xt2/b") == "keep\n"


@pytest.mark.parametrize("mode", ["w:gz", "w:xz", "w:bz2"])
def test_archive_put_compressed(client, sb, mode):
    target = "/root/xtc-" + mode.split(":")[1]
    data = make_tar([("c/f", "file", b"compressed " + mode.encode())], mode=mode)
    r = client.put(url(sb, target, endpoint="archive"), raw=data)
    assert r.status == 201, r
    assert cat_in(client, sb, target + "/c/f") == "compressed " + mode


def test_archive_roundtrip(client, sb):
    sh_ok(client, sb, "mkdir -p /root/rt/a/b && head -c 50000 /dev/urandom > /root/rt/a/b/r"
                      " && echo x > /root/rt/x && ln -s a/b/r /root/rt/l")
    tar = client.get(url(sb, "/root/rt", endpoint="archive")).body
    r = client.put(url(sb, "/root/rt-copy", endpoint="archive"), raw=tar)
    assert r.status == 201, r
    assert sh_ok(client, sb, "cd /root/rt && find . | sort && sha256sum a/b/r x") == \
        sh_ok(client, sb, "cd /root/rt-copy && find . | sort && sha256sum a/b/r x")
    assert sh_ok(client, sb, "readlink /root/rt-copy/l").strip() == "a/b/r"


HOSTILE = {
    "dotdot": [("../evil.txt", "file", b"evil")],
    "dotdot-nested": [("a/../../evil.txt", "file", b"evil")],
    "dotdot-deep": [("a/b/../../../../../../tmp/evil.txt", "file", b"evil")],
    "absolute": [("/tmp/evil.txt", "file", b"evil")],
    "absolute-marker": [(MARKER, "file", b"evil")],
    "symlink-absolute": [("l", "symlink", "/etc")],
    "symlink-absolute-marker": [("l", "symlink", MARKER)],
    "symlink-escape": [("l", "symlink", "../../..")],
    "symlink-escape-nested": [("a", "dir", 0o755), ("a/l", "symlink", "../../x")],
    "symlink-escape-then-write": [("l", "symlink", ".."), ("l/evil.txt", "file", b"evil")],
    "hardlink-absolute": [("h", "hardlink", "/etc/shadow")],
    "hardlink-dotdot": [("h", "hardlink", "../../../etc/shadow")],
    "hardlink-marker": [("h", "hardlink", MARKER)],
    "hardlink-to-target-dir": [("h", "hardlink", ".")],
    "chardev": [("null", "chr", None)],
    "blockdev": [("loop0", "blk", None)],
    "fifo": [("pipe", "fifo", None)],
    "file-as-target-itself": [(".", "file", b"evil")],
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("compression", ["w", "w:gz"])
def test_archive_put_hostile_is_rejected_with_nothing_written(client, sb, host_marker, name, compression):
    # good members around the bad one: none of them may be written either
    members = [("good-before.txt", "file", b"good"), ("gooddir", "dir", 0o755)] + HOSTILE[name] + \
        [("good-after.txt", "file", b"good")]
    data = make_tar(members, mode=compression)
    tag = "%s-%s" % (name, compression.replace(":", ""))

    target = "/root/hostile/new-" + tag
    r = client.put(url(sb, target, endpoint="archive"), raw=data)
    assert r.status == 400, (name, r)
    assert err_code(r) == "bad_request"
    assert "message" in r.json()["error"]
    assert not exists_in(client, sb, target), name

    # into an existing directory: its contents stay exactly as they were
    existing = "/root/hostile/old-" + tag
    sh_ok(client, sb, "mkdir -p %s && echo keep > %s/keep" % (existing, existing))
    before = sh_ok(client, sb, "cd %s && ls -laR --time-style=full-iso ." % existing)
    r = client.put(url(sb, existing, endpoint="archive"), raw=data)
    assert r.status == 400, (name, r)
    assert sh_ok(client, sb, "cd %s && ls -laR --time-style=full-iso ." % existing) == before
    # nothing escaped anywhere near it either
    assert not exists_in(client, sb, "/root/hostile/evil.txt")
    assert not exists_in(client, sb, "/root/evil.txt")
    assert not exists_in(client, sb, "/tmp/evil.txt")
    assert not exists_in(client, sb, MARKER)
    assert not os.path.exists("/tmp/evil.txt")
    host_marker.check()


@pytest.mark.parametrize("members", [
    # x/y -> .. is the target itself; x/y/z -> .. then lexically stays inside but really is its parent
    [("x", "dir", 0o755), ("x/y", "symlink", ".."), ("x/y/z", "symlink", ".."),
     ("x/y/z/outside.txt", "file", b"outside")],
    # even a link that stays inside is never written through
    [("sub", "dir", 0o755), ("l", "symlink", "sub"), ("l/f", "file", b"through")],
], ids=["chain-to-parent", "inside-link"])
def test_archive_put_never_writes_through_its_own_symlinks(client, sb, members):
    base = "/root/chain-" + secrets.token_hex(3)
    r = client.put(url(sb, base + "/inner", endpoint="archive"), raw=make_tar(members))
    assert r.status == 400, r
    assert "symlink" in r.json()["error"]["message"]
    assert not exists_in(client, sb, base), "something was written"


def test_archive_symlink_chain_still_stays_in_sandbox(client, sb, host_marker):
    """However the chain of links is built, extraction stays in the sandbox's root."""
    members = [("x", "dir", 0o755)]
    link = "x/y"
    members.append((link, "symlink", ".."))   # x/y -> target dir
    for _ in range(12):                          # each hop climbs one more level, lexically "inside"
        link += "/z"
        members.append((link, "symlink", ".."))
    members.append((link + "/" + MARKER.lstrip("/"), "file", b"chain"))
    r = client.put(url(sb, "/root/chain2/a/b", endpoint="archive"), raw=make_tar(members))
    assert r.status in (201, 400), r
    host_marker.check()
    if r.status == 201:
        assert cat_in(client, sb, MARKER) == "chain"
        sh_ok(client, sb, "rm -f " + MARKER)


@pytest.mark.parametrize("kind", ["truncated", "truncated-gz", "garbage", "empty", "bad-checksum"])
def test_archive_put_corrupt_is_rejected(client, sb, kind):
    good = make_tar([("a.txt", "file", b"a" * 10), ("big.bin", "file", os.urandom(300000)),
                     ("z.txt", "file", b"z")])
    if kind == "truncated":
        data = good[:len(good) // 2]
    elif kind == "truncated-gz":
        data = gzip.compress(good)[:-2000]
    elif kind == "garbage":
        data = os.urandom(10000)
    elif kind == "empty":
        data = b""
    else:
        data = bytearray(good)
        data[148:156] = b"0000000\0"  # first header's checksum
        data = bytes(data)
    target = "/root/corrupt-" + kind
    r = client.put(url(sb, target, endpoint="archive"), raw=data)
    assert r.status == 400, (kind, r)
    assert err_code(r) == "bad_request"
    assert not exists_in(client, sb, target)


def test_archive_put_missing_path(client, sb):
    r = client.put("/v1/sandboxes/%s/archive" % sb, raw=make_tar([("a", "file", b"a")]))
    assert r.status == 400


# --- body limits ------------------------------------------------------------------------

def test_json_body_over_limit_is_413(client, sb, daemon):
    big = json.dumps({"labels": {"k": "v" * (1 << 20)}}).encode()
    status, body = raw_request("POST", "/v1/sandboxes", big, daemon.key,
                               {"Content-Type": "application/json"})
    assert status == 413, body
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    # without a Content-Length (chunked) the limit holds as well
    status, body = raw_request("POST", "/v1/sandboxes/%s/ttl" % sb,
                               json.dumps({"ttl": 5, "pad": "y" * (1 << 20)}).encode(),
                               daemon.key, {"Content-Type": "application/json"}, chunked=True)
    assert status == 413, body
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    # nothing was created, the daemon still answers
    ids = [s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]]
    assert ids.count(sb) == 1
    assert client.exec(sb, "echo ok")["stdout"] == "ok\n"


def test_json_body_just_under_limit_is_accepted_or_400(client, daemon):
    # a 1 MiB body is parsed (and refused for its contents, not its size)
    body = json.dumps({"labels": {"k": "v" * ((1 << 20) - 100)}}).encode()
    assert len(body) <= 1 << 20
    status, resp = raw_request("POST", "/v1/sandboxes", body, daemon.key, {"Content-Type": "application/json"})
    assert status == 400, resp
