"""Ports in: /v1/sandboxes/{id}/ports/{port}/... relays HTTP, streams and
WebSockets to a server inside the sandbox, with the API key or a signed
share URL.  The servers are Python's standard library, run in the sandbox."""
import base64
import hashlib
import http.client
import json
import os
import socket
import subprocess
import time

import pytest

from conftest import CLI, DAEMON, SOCKET, STATE, TCP_PORT, Client, sh

# One server for every test: echoes requests as JSON, streams on /stream
# and /sse until /tmp/release exists, breaks off on /short, and speaks
# WebSocket (handshake and framing by hand) on /ws.
SERVER = r'''
import base64, hashlib, json, os, socket, struct, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def wait_release():
    for _ in range(600):
        if os.path.exists("/tmp/release"):
            return
        time.sleep(0.05)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def echo(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": [[k, v] for k, v in self.headers.items()],
                          "body": body.decode("latin-1")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Upstream", "yes")
        self.send_header("Set-Cookie", "app=1; Path=/")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)
    def do_GET(self):
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"first\n", None, b"last\n"):
                if part is None:
                    wait_release()
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path == "/sse":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"data: one\n\n"); self.wfile.flush()
            wait_release()
            self.wfile.write(b"data: two\n\n"); self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/short":
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            self.wfile.write(b"x" * 1000); self.wfile.flush()
            self.close_connection = True
            return
        if self.path == "/big":
            data = bytes(range(256)) * 4096
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.path == "/ws":
            return self.websocket()
        self.echo()
    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = echo
    def websocket(self):
        self.close_connection = True
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        self.end_headers()
        self.wfile.flush()
        f = self.rfile
        while True:
            h = f.read(2)
            if len(h) < 2:
                return
            op, ln = h[0] & 15, h[1] & 127
            if ln == 126:
                ln = struct.unpack(">H", f.read(2))[0]
            elif ln == 127:
                ln = struct.unpack(">Q", f.read(8))[0]
            mask = f.read(4) if h[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(ln)))
            if op == 1:
                data = b"echo:" + data
            hdr = bytes([0x80 | op]) + (bytes([len(data)]) if len(data) < 126 else b"\x7e" + struct.pack(">H", len(data)))
            self.wfile.write(hdr + data); self.wfile.flush()
            if op == 8:
                return

ThreadingHTTPServer.allow_reuse_address = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

PORT = 8000


def start_server(client, sid, port=PORT):
    r = client.put("/v1/sandboxes/%s/files?path=/tmp/server.py" % sid, raw=SERVER.encode())
    assert r.status == 201, r
    sh(client, sid, "nohup python3 /tmp/server.py %d </dev/null >/tmp/server.log 2>&1 &" % port)
    # up once it answers through the proxy
    deadline = time.time() + 20
    while time.time() < deadline:
        if client.get("/v1/sandboxes/%s/ports/%d/ready" % (sid, port)).status == 200:
            return
        time.sleep(0.1)
    raise AssertionError(sh(client, sid, "cat /tmp/server.log"))


@pytest.fixture(scope="module")
def served(client):
    """A sandbox (network mode none: loopback only) with the server on port 8000."""
    sb = client.create(network={"mode": "none"})
    start_server(client, sb["id"])
    yield sb["id"]
    client.delete("/v1/sandboxes/" + sb["id"])


def base(sid, port=PORT):
    return "/v1/sandboxes/%s/ports/%d" % (sid, port)


def header_map(echo):
    return {k.lower(): v for k, v in echo["headers"]}


def assert_error(r, status, code):
    assert r.status == status, r
    assert r.json()["error"]["code"] == code, r


def release(client, sid, on):
    sh(client, sid, "touch /tmp/release" if on else "rm -f /tmp/release")


# ---- relaying requests ------------------------------------------------------------

def test_get_with_query_and_headers(served, daemon):
    """GET: path, query and headers reach the server; the API key does not; X-Forwarded-* are set."""
    c = Client(daemon.key, tcp=True)
    r = c.get(base(served) + "/a/b%20c?x=1&y=two%2Bthree&share=nope-not-for-you",
              headers={"X-Custom": "v1", "Cookie": "app=1; fb_share=secret; other=2"})
    # an Authorization header wins over a share parameter: the key authenticates
    assert r.status == 200, r
    echo = r.json()
    assert echo["method"] == "GET"
    assert echo["path"] == "/a/b%20c?x=1&y=two%2Bthree"
    h = header_map(echo)
    assert "authorization" not in h
    assert h["x-custom"] == "v1"
    assert h["cookie"] == "app=1; other=2"
    assert h["x-forwarded-prefix"] == base(served)
    assert h["x-forwarded-proto"] == "http"
    assert h["x-forwarded-for"] == "127.0.0.1"
    assert h["x-forwarded-host"] == "127.0.0.1:%d" % TCP_PORT
    assert h["connection"] == "close"
    assert r.headers["X-Upstream"] == "yes"
    assert r.headers["Set-Cookie"] == "app=1; Path=/"


def test_root_path_and_bare_prefix(served, client):
    for suffix in ("", "/"):
        r = client.get(base(served) + suffix)
        assert r.status == 200, r
        assert r.json()["path"] == "/"
    assert client.get(base(served) + "?q=1").json()["path"] == "/?q=1"


def test_post_body_and_other_methods(served, client):
    body = b"hello \x00 world" * 1000
    r = client.request("POST", base(served) + "/submit?k=v", raw=body,
                       headers={"Content-Type": "application/octet-stream"})
    assert r.status == 200, r
    echo = r.json()
    assert echo["method"] == "POST" and echo["path"] == "/submit?k=v"
    assert echo["body"].encode("latin-1") == body
    assert header_map(echo)["content-length"] == str(len(body))
    for method in ("PUT", "PATCH", "DELETE", "OPTIONS"):
        r = client.request(method, base(served) + "/m", raw=b"x" if method != "OPTIONS" else None)
        assert r.status == 200, (method, r)
        assert r.json()["method"] == method
    r = client.request("HEAD", base(served) + "/h")
    assert r.status == 200 and r.body == b""
    assert int(r.headers["Content-Length"]) > 0


def test_chunked_request_body(served, daemon):
    c = http.client.HTTPConnection("127.0.0.1", TCP_PORT, timeout=30)
    c.putrequest("POST", base(served) + "/chunked")
    c.putheader("Authorization", "Bearer " + daemon.key)
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for part in (b"abc", b"defg"):
        c.send(b"%x\r\n%s\r\n" % (len(part), part))
    c.send(b"0\r\n\r\n")
    echo = json.loads(c.getresponse().read())
    c.close()
    assert echo["body"] == "abcdefg"
    assert header_map(echo)["content-length"] == "7"
    assert "transfer-encoding" not in header_map(echo)


def test_large_response_is_intact(served, client):
    r = client.get(base(served) + "/big")
    assert r.status == 200
    assert r.body == bytes(range(256)) * 4096


def test_body_over_limit_is_413(served, daemon):
    s = socket.create_connection(("127.0.0.1", TCP_PORT), timeout=30)
    s.sendall(("POST %s/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n"
               % (base(served), daemon.key, (64 << 20) + 1)).encode())
    head = s.recv(4096).decode("latin-1")
    s.close()
    assert head.startswith("HTTP/1.1 413"), head
    assert "payload_too_large" in head


# ---- streaming ----------------------------------------------------------------------

def test_chunked_response_streams(served, client):
    """The first chunk reaches the client while the server still holds back the last."""
    release(client, served, False)
    c = client.conn(timeout=30)
    c.request("GET", base(served) + "/stream", headers={"Authorization": "Bearer " + client.key})
    r = c.getresponse()
    assert r.status == 200
    assert r.read1(100) == b"first\n"  # the server is waiting for /tmp/release now
    release(client, served, True)
    assert r.read() == b"last\n"
    c.close()


def test_server_sent_events_stream(served, client):
    release(client, served, False)
    c = client.conn(timeout=30)
    c.request("GET", base(served) + "/sse", headers={"Authorization": "Bearer " + client.key})
    r = c.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "text/event-stream"
    assert r.read1(100) == b"data: one\n\n"
    release(client, served, True)
    assert r.read() == b"data: two\n\n"
    c.close()


def test_server_closing_mid_body_breaks_the_answer(served, client):
    c = client.conn(timeout=30)
    c.request("GET", base(served) + "/short", headers={"Authorization": "Bearer " + client.key})
    r = c.getresponse()
    assert r.status == 200
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    c.close()


# ---- WebSocket ------------------------------------------------------------------------

def ws_frame(op, data):
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    n = len(data)
    ln = bytes([0x80 | n]) if n < 126 else b"\xfe" + n.to_bytes(2, "big")
    return bytes([0x80 | op]) + ln + mask + masked


def ws_read(s, buf):
    while len(buf) < 2:
        buf += s.recv(65536)
    n = buf[1] & 127
    off = 2
    if n == 126:
        while len(buf) < 4:
            buf += s.recv(65536)
        n, off = int.from_bytes(buf[2:4], "big"), 4
    while len(buf) < off + n:
        buf += s.recv(65536)
    return buf[0] & 15, buf[off:off + n], buf[off + n:]


def ws_connect(path, headers):
    s = socket.create_connection(("127.0.0.1", TCP_PORT), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode()
    req = ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n"
           % (path, key, "".join("%s: %s\r\n" % kv for kv in headers.items())))
    s.sendall(req.encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    return s, key, head.decode("latin-1"), rest


def test_websocket_echo(served, client):
    s, key, head, rest = ws_connect(base(served) + "/ws", {"Authorization": "Bearer " + client.key})
    assert head.startswith("HTTP/1.1 101"), head
    want = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert "sec-websocket-accept: " + want.decode().lower() in head.lower()
    assert "upgrade: websocket" in head.lower()
    for msg in (b"hello", b"x" * 5000, "h\u00e9".encode()):
        s.sendall(ws_frame(1, msg))
        op, data, rest = ws_read(s, rest)
        assert (op, data) == (1, b"echo:" + msg)
    s.sendall(ws_frame(8, b"\x03\xe8"))
    op, data, rest = ws_read(s, rest)
    assert op == 8
    s.settimeout(10)
    assert s.recv(100) == b""  # both ends closed
    s.close()


def test_websocket_needs_auth(served):
    s, _, head, _ = ws_connect(base(served) + "/ws", {})
    s.close()
    assert head.startswith("HTTP/1.1 401"), head


# ---- errors ------------------------------------------------------------------------------

def test_nothing_listening_is_502(served, client):
    r = client.get(base(served, 8001) + "/")
    assert_error(r, 502, "bad_gateway")
    assert "nothing is listening on port 8001 inside sandbox %s" % served in r.json()["error"]["message"]


@pytest.mark.parametrize("port", ["0", "70000", "abc", "65536", "080", "-1", "8000x"])
def test_bad_port_is_400(served, client, port):
    r = client.get("/v1/sandboxes/%s/ports/%s/" % (served, port))
    assert_error(r, 400, "bad_request")


def test_unknown_and_foreign_sandbox_are_404(served, client, other_tenant):
    assert_error(client.get(base("sbx_0000000000000000") + "/"), 404, "not_found")
    assert_error(other_tenant.get(base(served) + "/"), 404, "not_found")
    assert_error(other_tenant.post("/v1/sandboxes/%s/shares" % served, {"port": PORT}), 404, "not_found")


def test_no_or_bad_key_is_401(served, client):
    assert_error(client.get(base(served) + "/", key=False), 401, "unauthorized")
    assert_error(client.get(base(served) + "/", key=False, headers={"Authorization": "Bearer nope"}),
                 401, "unauthorized")


def test_method_not_routed_is_400(served, client):
    assert_error(client.request("TRACE", base(served) + "/"), 400, "bad_request")


# ---- share URLs --------------------------------------------------------------------------------

@pytest.fixture
def other_tenant(daemon):
    out = subprocess.run([DAEMON, "--state-dir", STATE, "add-key", "ports-%d" % os.getpid()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return Client(out.stdout.strip())


def share(client, sid, port=PORT, **kw):
    body = {"port": port}
    body.update(kw)
    r = client.post("/v1/sandboxes/%s/shares" % sid, body)
    assert r.status == 201, r
    return r.json()


def test_share_url_works_without_key_and_sets_cookie(served, client):
    before = int(time.time())
    sh_ = share(client, served, expires_in=600)
    assert sh_["url"] == base(served) + "/?share=" + sh_["token"]
    assert before + 600 <= sh_["expires_at"] <= int(time.time()) + 600
    c = client.conn(timeout=30)
    c.request("GET", sh_["url"] + "&q=1")
    resp = c.getresponse()
    body = resp.read()
    cookies = [v for k, v in resp.getheaders() if k.lower() == "set-cookie"]
    c.close()
    assert resp.status == 200, body
    assert json.loads(body)["path"] == "/?q=1"  # the token is not the app's
    assert "app=1; Path=/" in cookies  # the app's own cookies pass
    cookie = [v for v in cookies if v.startswith("fb_share=")][0]
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == "fb_share=" + sh_["token"]
    assert "Path=%s/" % base(served) in parts and "HttpOnly" in parts and "SameSite=Lax" in parts
    max_age = int([p for p in parts if p.startswith("Max-Age=")][0][8:])
    assert 590 <= max_age <= 600
    # the cookie alone is enough for a sub-path, and it does not reach the app
    r = client.get(base(served) + "/static/app.js", key=False, headers={"Cookie": "fb_share=" + sh_["token"]})
    assert r.status == 200, r
    assert "cookie" not in header_map(r.json())
    assert "fb_share" not in r.headers.get("Set-Cookie", "")
    # and for a WebSocket
    s, _, head, _ = ws_connect(base(served) + "/ws", {"Cookie": "fb_share=" + sh_["token"]})
    s.close()
    assert head.startswith("HTTP/1.1 101"), head


def test_bad_share_tokens_are_401(served, client, make):
    tok = share(client, served)["token"]
    exp, sig = tok.split(".")
    flipped = sig[:-1] + ("0" if sig[-1] != "0" else "1")
    other = make()["id"]
    later = str(int(exp) + 1)
    cases = {
        "tampered signature": (served, PORT, exp + "." + flipped),
        "extended expiry": (served, PORT, later + "." + sig),
        "other port": (served, PORT + 1, tok),
        "other sandbox": (other, PORT, tok),
        "garbage": (served, PORT, "x"),
        "empty": (served, PORT, ""),
    }
    for what, (sid, port, t) in cases.items():
        r = client.get(base(sid, port) + "/?share=" + t, key=False)
        assert_error(r, 401, "unauthorized")
        r = client.get(base(sid, port) + "/", key=False, headers={"Cookie": "fb_share=" + t})
        assert_error(r, 401, "unauthorized"), what
    # a share for another port does not open this one
    tok2 = share(client, served, port=PORT + 1)["token"]
    assert_error(client.get(base(served) + "/?share=" + tok2, key=False), 401, "unauthorized")


def test_expired_share_token_is_401(served, client):
    sh_ = share(client, served, expires_in=1)
    time.sleep(2.1)
    assert_error(client.get(sh_["url"], key=False), 401, "unauthorized")


def test_deleting_the_sandbox_voids_its_shares(client, make):
    sid = make()["id"]
    start_server(client, sid)
    sh_ = share(client, sid)
    assert client.get(sh_["url"], key=False).status == 200
    assert client.delete("/v1/sandboxes/" + sid).status == 204
    assert_error(client.get(sh_["url"], key=False), 401, "unauthorized")


@pytest.mark.parametrize("body", [{}, {"port": 0}, {"port": 65536}, {"port": "80"}, {"port": 80, "expires_in": 0},
                                  {"port": 80, "expires_in": 7 * 86400 + 1}, {"port": 80, "expires_in": "1"},
                                  {"port": 80, "x": 1}])
def test_share_request_validation(served, client, body):
    assert_error(client.post("/v1/sandboxes/%s/shares" % served, body), 400, "bad_request")


def test_share_needs_key(served, client):
    assert_error(client.post("/v1/sandboxes/%s/shares" % served, {"port": PORT}, key=False), 401, "unauthorized")


def test_share_max_lifetime(served, client):
    sh_ = share(client, served, expires_in=7 * 86400)
    assert sh_["expires_at"] >= int(time.time()) + 7 * 86400 - 5


# ---- CLI --------------------------------------------------------------------------------------------

def fb(env, *args):
    return subprocess.run([CLI] + list(args), env=env, capture_output=True, text=True, timeout=60)


def test_cli_port_prints_the_url(served, cli_env):
    env = dict(cli_env, FORKBOX_URL="http://127.0.0.1:%d" % TCP_PORT)
    p = fb(env, "port", served, str(PORT))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "http://127.0.0.1:%d%s/\n" % (TCP_PORT, base(served))
    p = fb(env, "port", served, str(PORT), "--share", "--expires", "120")
    assert p.returncode == 0, p.stderr
    url = p.stdout.strip()
    assert url.startswith("http://127.0.0.1:%d%s/?share=" % (TCP_PORT, base(served))), url
    # the printed share URL works without a key
    c = http.client.HTTPConnection("127.0.0.1", TCP_PORT, timeout=30)
    c.request("GET", url[len("http://127.0.0.1:%d" % TCP_PORT):])
    r = c.getresponse()
    assert r.status == 200 and json.loads(r.read())["path"] == "/"
    c.close()
    p = fb(env, "--json", "port", served, str(PORT), "--share")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["url"].startswith("http://127.0.0.1:") and out["token"] and out["expires_at"] > time.time()
    # over the unix socket the URL names the socket's nominal host
    p = fb(cli_env, "port", served, str(PORT))
    assert p.returncode == 0 and p.stdout.endswith(base(served) + "/\n"), p


@pytest.mark.parametrize("args", [[], ["sbx_x"], ["sbx_x", "0"], ["sbx_x", "70000"], ["sbx_x", "http"],
                                  ["sbx_x", "80", "extra"], ["sbx_x", "80", "--expires", "60"],
                                  ["sbx_x", "80", "--share", "--expires", "0"]])
def test_cli_port_usage_errors(cli_env, args):
    p = fb(cli_env, "port", *args)
    assert p.returncode == 2, (args, p.stdout, p.stderr)


def test_cli_port_help(cli_env):
    p = fb(cli_env, "port", "--help")
    assert p.returncode == 0 and p.stdout.startswith("Usage: forkbox port")


def test_cli_port_unknown_sandbox(cli_env):
    p = fb(cli_env, "port", "sbx_0000000000000000", "80", "--share")
    assert p.returncode == 1 and "not found" in p.stderr


def test_requests_the_http_layer_refuses(served, daemon):
    """Heads MHD refuses before any handler runs leave nothing behind (the
    ASan build's exit code at the end of the session says so)."""
    for extra in ("X-Big: %s\r\n" % ("a" * 300000), "Bad Header Line\r\n"):
        s = socket.create_connection(("127.0.0.1", TCP_PORT), timeout=30)
        try:
            s.sendall(("GET %s/ HTTP/1.1\r\nHost: x\r\n%s\r\n" % (base(served), extra)).encode())
            head = s.recv(4096).decode("latin-1")
        except ConnectionResetError:
            head = ""
        s.close()
        assert not head.startswith("HTTP/1.1 2"), head


def init_pid_of(sid):
    """Host pid of the sandbox's forkbox-init (found by its cgroup)."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            exe = os.readlink("/proc/%s/exe" % p)
            cg = open("/proc/%s/cgroup" % p).read()
        except OSError:
            continue
        if exe.startswith("/memfd:forkbox-init") and ("/forkbox/%s" % sid) in cg:
            ppid = int(open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[1])
            try:
                parent = os.readlink("/proc/%d/exe" % ppid)
            except OSError:  # the host's PID 1 (a re-adopted sandbox's init) may not be readable
                parent = ""
            if not parent.startswith("/memfd:forkbox-init"):
                return int(p)  # PID 1 of the sandbox, not one of its workers
    raise AssertionError("no init for " + sid)


def test_stopped_sandbox_is_409(daemon, client):
    """A sandbox whose init died while the daemon was down is `stopped` after
    the restart: its ports answer 409, and nothing is tried on its stale pid."""
    sid = client.create()["id"]
    try:
        pid = init_pid_of(sid)
        assert daemon.stop() == 0
        os.kill(pid, 9)
        for _ in range(100):
            if not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
        daemon.start()
        assert client.get("/v1/sandboxes/" + sid).json()["state"] == "stopped"
        assert_error(client.get(base(sid) + "/"), 409, "conflict")
    finally:
        client.delete("/v1/sandboxes/" + sid)
