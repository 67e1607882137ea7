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
import io
import json
import os
import socket
import tarfile
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

    # templates
    def templates(self):
        return self.request("GET", "/v1/templates")["templates"]

    def import_template(self, name, archive, ref=None):
        """archive: bytes or a path to an OCI layout / docker-archive / rootfs tar."""
        data = archive if isinstance(archive, bytes) else open(archive, "rb").read()
        return self.request("PUT", "/v1/templates/%s/import" % name, raw=data,
                            query={"ref": ref} if ref else None)

    def build_template(self, name, context_dir, dockerfile="Dockerfile", network=None, build_args=None,
                       no_cache=False, on_event=None):
        """Builds name from context_dir; on_event(ev) sees every progress event.
        Returns the template, or raises ForkboxError with the failing step's message."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            t.add(context_dir, arcname=".")
        q = {"dockerfile": dockerfile}
        if network:
            q["network"] = network
        if build_args:
            q["build_args"] = json.dumps(build_args)
        if no_cache:
            q["no_cache"] = "1"
        body = self.request("POST", "/v1/templates/%s/build" % name, raw=buf.getvalue(), query=q)
        last = None
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            last = json.loads(line)
            if on_event:
                on_event(last)
        if last is None or last.get("type") != "done":
            msg = last.get("message", "build failed") if last else "the build's stream ended early"
            raise ForkboxError(400, last.get("code", "bad_request") if last else "internal", msg)
        return last["template"]

    def delete_template(self, name):
        self.request("DELETE", "/v1/templates/%s" % name)

    def gc_templates(self):
        return self.request("POST", "/v1/templates/gc")

    # volumes
    def create_volume(self, name, size_mb=None):
        body = {"name": name}
        if size_mb is not None:
            body["size_mb"] = size_mb
        return self.request("POST", "/v1/volumes", body)

    def volumes(self):
        return self.request("GET", "/v1/volumes")["volumes"]

    def delete_volume(self, name):
        self.request("DELETE", "/v1/volumes/%s" % name)


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
