"""Interactive sessions: GET .../processes/{pid}/attach (a WebSocket) and the
CLI's `forkbox shell` / `forkbox attach`, driven in a real terminal (tmux)."""
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest

from conftest import CLI, SOCKET

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WS:
    """A minimal RFC 6455 client: handshake, masked frames, ping answers."""

    def __init__(self, sock, rest):
        self.sock = sock
        self.buf = rest
        self.closed = None  # (code, reason) once a close frame arrived

    @staticmethod
    def open(path, key=None, upgrade=True):
        """(status, headers, WS or body bytes)"""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(SOCKET)
        nonce = base64.b64encode(os.urandom(16))
        head = "GET %s HTTP/1.1\r\nHost: localhost\r\n" % path
        if upgrade:
            head += ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Key: %s\r\n" % nonce.decode())
        if key:
            head += "Authorization: Bearer %s\r\n" % key
        s.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, "connection closed during the handshake: %r" % data
            data += chunk
        raw, rest = data.split(b"\r\n\r\n", 1)
        lines = raw.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:]}
        if status != 101:
            n = int(headers.get("content-length", "0"))
            while len(rest) < n:
                rest += s.recv(65536)
            s.close()
            return status, headers, rest
        want = base64.b64encode(hashlib.sha1(nonce + GUID).digest()).decode()
        assert headers["sec-websocket-accept"] == want, headers
        return status, headers, WS(s, rest)

    def send(self, payload, opcode=2):
        if isinstance(payload, str):
            payload = payload.encode()
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def control(self, **msg):
        self.send(json.dumps(msg), opcode=1)

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk

    def recv(self, timeout=30):
        """The next data or close frame: (opcode, payload).  Pings are answered."""
        self.sock.settimeout(timeout)
        while True:
            self._need(2)
            b0, b1 = self.buf[0], self.buf[1]
            assert b1 & 0x80 == 0, "the server must not mask"
            n, off = b1 & 0x7F, 2
            if n == 126:
                self._need(4)
                n, off = struct.unpack("!H", self.buf[2:4])[0], 4
            elif n == 127:
                self._need(10)
                n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
            self._need(off + n)
            payload, self.buf = self.buf[off:off + n], self.buf[off + n:]
            opcode = b0 & 0x0F
            assert b0 & 0x80, "the server sends whole messages"
            if opcode == 9:
                self.send(payload, opcode=10)
                continue
            if opcode == 8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.closed = (code, payload[2:].decode())
            return opcode, payload

    def close(self):
        """Our close, then the server's answer; the connection ends."""
        self.send(struct.pack("!H", 1000) + b"bye", opcode=8)
        while self.closed is None:
            self.recv()
        self.sock.close()


class Session:
    """Output bytes and events of one attach."""

    def __init__(self, ws):
        self.ws = ws
        self.out = b""
        self.events = []

    def pump(self, timeout=30):
        op, payload = self.ws.recv(timeout)
        if op == 2:
            self.out += payload
        elif op == 1:
            self.events.append(json.loads(payload))
        return op

    def until(self, pred, timeout=30):
        deadline = time.time() + timeout
        while not pred(self):
            left = deadline - time.time()
            assert left > 0, "timed out; output %r events %r" % (self.out[-2000:], self.events)
            if self.pump(left) == 8:
                assert pred(self), "closed %r; output %r events %r" % (self.ws.closed, self.out[-2000:], self.events)

    def wait_output(self, needle, timeout=30):
        needle = needle.encode() if isinstance(needle, str) else needle
        self.until(lambda s: needle in s.out, timeout)

    def wait_event(self, kind, timeout=30):
        self.until(lambda s: any(e["type"] == kind for e in s.events), timeout)
        return [e for e in self.events if e["type"] == kind][-1]



def wait_running(client, sid, comm, timeout=20):
    """Until a process named comm runs in the sandbox: a Ctrl-C typed before the shell has started
    the command would go to the shell instead."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = client.exec(sid, ["sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null"])
        if comm in r["stdout"].split():
            return
        time.sleep(0.1)
    raise AssertionError("%s never ran in %s" % (comm, sid))

def attach_path(sid, pid, query=""):
    return "/v1/sandboxes/%s/processes/%d/attach%s" % (sid, pid, query)


def attach(client, sid, pid, query=""):
    status, headers, ws = WS.open(attach_path(sid, pid, query), key=client.key)
    assert status == 101, (status, ws)
    return Session(ws)


def start(client, sid, **body):
    r = client.post("/v1/sandboxes/%s/processes" % sid, body)
    assert r.status == 201, r
    return r.json()["pid"]


def state(client, sid, pid):
    r = client.get("/v1/sandboxes/%s/processes/%d" % (sid, pid))
    assert r.status == 200, r
    return r.json()


def test_attach_pty_shell_detach_reattach_and_exit(sandbox, client):
    sid = sandbox["id"]
    pid = start(client, sid, cmd=["sh"], pty={"cols": 80, "rows": 24}, env={"PS1": "$ "})
    s = attach(client, sid, pid)
    hello = s.wait_event("attached")
    assert hello["pty"] is True and hello["offset"] >= 0, hello
    # the typed line echoes as `echo h""i`: only the command's output has hi<CR><LF>
    s.ws.send(b'echo h""i\r')
    s.wait_output("hi\r\n")
    s.ws.control(type="resize", cols=120, rows=40)
    s.ws.send(b"stty size\r")
    s.wait_output("40 120")
    # Ctrl-C is a byte for the terminal: it interrupts the foreground command
    s.ws.send(b"sleep 100\r")
    s.wait_output("sleep 100\r\n")
    wait_running(client, sid, "sleep")
    s.ws.send(b"\x03")
    s.ws.send(b"echo after-$((1+1))\r")
    s.wait_output("after-2\r\n", timeout=20)
    # a control message that is wrong is answered, and the session goes on
    s.ws.control(type="bogus")
    assert s.wait_event("error")["code"] == "bad_request"
    # other requests are served meanwhile
    assert state(client, sid, pid)["state"] == "running"
    s.ws.close()
    assert s.ws.closed[0] == 1000

    # detaching never ends the process
    time.sleep(0.2)
    assert state(client, sid, pid)["state"] == "running"

    s = attach(client, sid, pid)
    s.wait_event("attached")
    s.ws.send(b"echo again-$((2+3))\r")
    s.wait_output("again-5\r\n")
    assert b"hi\r\n" not in s.out, "a plain attach starts at the end of the output"
    s.ws.send(b"exit 3\r")
    ev = s.wait_event("exit")
    assert ev["exit_code"] == 3 and ev["signal"] is None, ev
    op = s.pump()
    assert op == 8 and s.ws.closed[0] == 1000, (op, s.ws.closed)
    s.ws.sock.close()
    assert state(client, sid, pid)["state"] == "exited"

    # an ended process: only a replay makes sense
    status, _, body = WS.open(attach_path(sid, pid), key=client.key)
    assert status == 409 and json.loads(body)["error"]["code"] == "conflict", (status, body)
    s = attach(client, sid, pid, "?replay=true")
    s.wait_event("exit")
    assert b"hi\r\n" in s.out and b"again-5" in s.out


def test_attach_pipes_signal_and_eof(sandbox, client):
    """A process without a terminal: stdout bytes out, stdin bytes in, signals, eof."""
    sid = sandbox["id"]
    prog = ("import os,signal,sys\n"
            "signal.signal(signal.SIGINT, lambda *a: os.write(1, b'got-int\\n'))\n"
            "print('ready', flush=True)\n"
            "for l in sys.stdin: print('line:' + l.strip(), flush=True)\n"
            "print('done', flush=True)\n")
    pid = start(client, sid, cmd=["python3", "-c", prog])
    s = attach(client, sid, pid, "?offset=0")
    assert s.wait_event("attached")["pty"] is False
    s.wait_output("ready\n")
    s.ws.control(type="signal", signal="INT")
    s.wait_output("got-int\n")
    s.ws.send(b"abc\n")
    s.wait_output("line:abc\n")
    s.ws.control(type="resize", cols=10, rows=10)  # no terminal to resize
    assert s.wait_event("error")["code"] == "bad_request"
    s.ws.control(type="eof")
    ev = s.wait_event("exit")
    assert ev["exit_code"] == 0, ev
    assert s.out == b"ready\ngot-int\nline:abc\ndone\n", s.out


def test_attach_errors(sandbox, client):
    sid = sandbox["id"]
    pid = start(client, sid, cmd=["sleep", "100"])
    status, _, body = WS.open(attach_path(sid, 999999), key=client.key)
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found", (status, body)
    status, _, body = WS.open(attach_path("sbx_0000000000000000", pid), key=client.key)
    assert status == 404, (status, body)
    status, _, body = WS.open(attach_path(sid, pid))
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized", (status, body)
    status, _, body = WS.open(attach_path(sid, pid), key=client.key, upgrade=False)
    assert status == 400 and json.loads(body)["error"]["code"] == "bad_request", (status, body)
    r = client.get(attach_path(sid, pid))
    assert r.status == 400, r
    for q in ("?offset=-1", "?replay=maybe", "?offset=0&replay=true"):
        status, _, body = WS.open(attach_path(sid, pid, q), key=client.key)
        assert status == 400, (q, status, body)
    # a message over the limit closes the connection with 1009; the process lives on
    s = attach(client, sid, pid)
    s.ws.send(b"x" * (64 * 1024 + 1))
    s.until(lambda x: x.ws.closed is not None)
    assert s.ws.closed[0] == 1009, s.ws.closed
    s.ws.sock.close()
    assert state(client, sid, pid)["state"] == "running"
    # a client that just disappears leaves the process running too
    s = attach(client, sid, pid)
    s.wait_event("attached")
    s.ws.sock.close()
    time.sleep(0.3)
    assert state(client, sid, pid)["state"] == "running"
    assert client.post("/v1/sandboxes/%s/processes/%d/signal" % (sid, pid), {"signal": "KILL"}).status == 204


# ---- the CLI in a real terminal ----


class Tmux:
    def __init__(self, env):
        self.name = "fbtest%d" % os.getpid()
        self.env = env

    def run(self, *args):
        return subprocess.run(["tmux", "-L", self.name, "-f", "/dev/null"] + list(args), env=self.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)

    def screen(self):
        return self.run("capture-pane", "-p", "-J", "-t", "fbtest").stdout

    def wait(self, pred, what, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            scr = self.screen()
            if pred(scr):
                return scr
            time.sleep(0.1)
        raise AssertionError("timed out waiting for %s; screen:\n%s" % (what, self.screen()))

    def wait_line(self, regex, timeout=30):
        r = re.compile(regex, re.M)
        return self.wait(lambda scr: r.search(scr), regex, timeout)

    def dead(self):
        return self.run("display-message", "-p", "-t", "fbtest", "#{pane_dead} #{pane_dead_status}").stdout.strip()


@pytest.fixture
def tmux(cli_env):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (scripts/install-deps.sh test)")
    t = Tmux(cli_env)
    yield t
    t.run("kill-server")


def test_shell_in_tmux(sandbox, cli_env, tmux, client):
    sid = sandbox["id"]
    cmd = "%s shell %s" % (CLI, sid)
    r = tmux.run("new-session", "-d", "-s", "fbtest", "-x", "100", "-y", "30",
                 "-e", "FORKBOX_SOCKET=" + cli_env["FORKBOX_SOCKET"],
                 "-e", "FORKBOX_STATE_DIR=" + cli_env["FORKBOX_STATE_DIR"], cmd,
                 ";", "set-option", "-t", "fbtest", "status", "off",
                 ";", "set-option", "-w", "-t", "fbtest", "remain-on-exit", "on")
    assert r.returncode == 0, r.stderr
    # a login shell's prompt
    tmux.wait(lambda scr: re.search(r"[#$] ?$", scr.rstrip("\n"), re.M), "a prompt")
    tmux.run("send-keys", "-t", "fbtest", "echo $((6*7))", "Enter")
    tmux.wait_line(r"^42\s*$")
    tmux.run("send-keys", "-t", "fbtest", "stty size", "Enter")
    tmux.wait_line(r"^30 100\s*$")

    tmux.run("resize-window", "-t", "fbtest", "-x", "120", "-y", "40")
    size = tmux.run("display-message", "-p", "-t", "fbtest", "#{pane_height} #{pane_width}").stdout.strip()
    assert size == "40 120", size
    # SIGWINCH reaches the CLI, which resizes the remote terminal; retried
    # until the resize has travelled
    deadline = time.time() + 30
    while True:
        tmux.run("send-keys", "-t", "fbtest", "clear; stty size", "Enter")
        try:
            tmux.wait_line(r"^40 120\s*$", timeout=3)
            break
        except AssertionError:
            assert time.time() < deadline, tmux.screen()

    # Ctrl-C interrupts the foreground command, not the shell
    tmux.run("send-keys", "-t", "fbtest", "sleep 100", "Enter")
    tmux.wait_line(r"sleep 100\s*$")
    wait_running(client, sandbox["id"], "sleep")
    time.sleep(0.3)  # let the shell start the sleep (correctness does not depend on it)
    tmux.run("send-keys", "-t", "fbtest", "C-c")
    tmux.run("send-keys", "-t", "fbtest", "echo after-$((1+1))", "Enter")
    tmux.wait_line(r"^after-2\s*$", timeout=20)
    procs = client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"]
    shells = [p for p in procs if p["tag"] == "shell"]
    assert len(shells) == 1 and shells[0]["pty"] and shells[0]["state"] == "running", procs

    tmux.run("send-keys", "-t", "fbtest", "exit 3", "Enter")
    # the pane's command (the CLI) ends with the shell's status
    deadline = time.time() + 30
    server = int(tmux.run("display-message", "-p", "#{pid}").stdout)
    while tmux.dead() != "1 3":
        assert time.time() < deadline, (tmux.dead(), tmux.screen())
        if tmux.dead() == "1":
            # dead but not reaped: tmux 3.3a sometimes misses the SIGCHLD of
            # a pane (the CLI is a zombie by then); a repeated one reaps it
            os.kill(server, signal.SIGCHLD)
        time.sleep(0.1)
    st = client.get("/v1/sandboxes/%s/processes/%d" % (sid, shells[0]["pid"])).json()
    assert st["state"] == "exited" and st["exit_code"] == 3, st


def test_cli_attach_errors(sandbox, cli_env):
    sid = sandbox["id"]
    r = subprocess.run([CLI, "attach", sid, "999999"], env=cli_env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no process 999999" in r.stderr, r
    r = subprocess.run([CLI, "attach", sid], env=cli_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r


def test_cli_attach_without_terminal(sandbox, client, cli_env):
    """stdin that is not a terminal: bytes in, output out, its end is eof, the status is the process's."""
    sid = sandbox["id"]
    pid = start(client, sid, cmd=["sh", "-c", "while read l; do echo got:$l; done; exit 5"])
    r = subprocess.run([CLI, "attach", "--replay", sid, str(pid)], env=cli_env, input="one\ntwo\n",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 5, r
    assert r.stdout == "got:one\ngot:two\n", r
