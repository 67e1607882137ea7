"""A small forkbox client: the whole API surface an agent adapter needs.

Standard library only. Talks HTTP+JSON to forkboxd over its unix socket
(default) or TCP.

    from forkbox import Forkbox
    fb = Forkbox()                       # key from $FORKBOX_API_KEY or /var/lib/forkbox/api-key
    with fb.sandbox(ttl=300, labels={"user": "u42"}) as sb:
        r = sb.exec(["python3", "-c", "print(6*7)"])
        print(r["stdout"], r["exit_code"])
        sb.write("/root/data.txt", b"hello")
        print(sb.read("/root/data.txt"))
"""
import http.client
import json
import os
import socket
import urllib.parse

__all__ = ["Forkbox", "Sandbox", "ForkboxError"]


class ForkboxError(Exception):
    """An error answer: .status (HTTP), .code ("not_found", ...) and the message."""

    def __init__(self, status, code, message):
        super().__init__("%s (%d): %s" % (code, status, message))
        self.status, self.code, self.message = status, code, message


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class Forkbox:
    def __init__(self, key=None, socket_path=None, url=None, timeout=600):
        state = os.environ.get("FORKBOX_STATE_DIR", "/var/lib/forkbox")
        if key is None:
            key = os.environ.get("FORKBOX_API_KEY")
        if key is None:
            with open(os.path.join(state, "api-key")) as f:
                key = f.read().strip()
        self._key = key
        self._url = url or os.environ.get("FORKBOX_URL")
        self._socket = socket_path or os.environ.get("FORKBOX_SOCKET", "/run/forkbox/forkbox.sock")
        self._timeout = timeout

    def _conn(self):
        if self._url:
            u = urllib.parse.urlsplit(self._url)
            return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=self._timeout)
        return _UnixConnection(self._socket, self._timeout)

    def request(self, method, path, body=None, raw=None, query=None):
        """One API call; returns parsed JSON, raw bytes, or None for 204."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        headers = {"Authorization": "Bearer " + self._key}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        c = self._conn()
        try:
            c.request(method, path, body=data, headers=headers)
            r = c.getresponse()
            payload = r.read()
            ctype = r.getheader("Content-Type", "")
        finally:
            c.close()
        if r.status >= 400:
            try:
                err = json.loads(payload)["error"]
                raise ForkboxError(r.status, err["code"], err["message"])
            except (ValueError, KeyError):
                raise ForkboxError(r.status, "http", payload[:200].decode(errors="replace"))
        if r.status == 204:
            return None
        return json.loads(payload) if ctype.startswith("application/json") else payload

    def create(self, template="default", ttl=None, labels=None, env=None, **spec):
        body = {"template": template}
        for k, v in (("ttl", ttl), ("labels", labels), ("env", env)):
            if v is not None:
                body[k] = v
        body.update(spec)
        return Sandbox(self, self.request("POST", "/v1/sandboxes", body))

    def sandbox(self, **kw):
        """create() as a context manager that deletes the sandbox on exit."""
        return self.create(**kw)

    def list(self, **labels):
        q = [("label", "%s=%s" % kv) for kv in labels.items()]
        path = "/v1/sandboxes" + ("?" + urllib.parse.urlencode(q) if q else "")
        return self.request("GET", path)["sandboxes"]


class Sandbox:
    def __init__(self, client, obj):
        self._c = client
        self.obj = obj
        self.id = obj["id"]

    def exec(self, cmd, timeout=60, **kw):
        """Runs cmd (argv list, or a shell string); returns the result object."""
        body = {"cmd": cmd, "timeout": timeout}
        body.update(kw)
        return self._c.request("POST", "/v1/sandboxes/%s/exec" % self.id, body)

    def run_code(self, code, context="default", timeout=60):
        """Runs a cell of Python in a persistent context of the sandbox (its
        variables and imports stay for the next call); returns the result
        object: stdout, stderr, result (repr of a final expression or None),
        error (None or {"name", "value", "traceback"}), timed_out, ..."""
        body = {"language": "python", "code": code, "context": context, "timeout": timeout}
        return self._c.request("POST", "/v1/sandboxes/%s/code" % self.id, body)

    def write(self, path, data, mode="0644"):
        return self._c.request("PUT", "/v1/sandboxes/%s/files" % self.id, raw=data,
                               query={"path": path, "mode": mode})

    def read(self, path):
        return self._c.request("GET", "/v1/sandboxes/%s/files" % self.id, query={"path": path})

    def delete(self):
        self._c.request("DELETE", "/v1/sandboxes/" + self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.delete()
        except ForkboxError as e:
            if e.status != 404:
                raise
