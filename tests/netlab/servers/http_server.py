"""netlab HTTP/HTTPS server, in one of two roles.

web       any GET/HEAD answers a text body naming this host, the local address,
          the Host header, the path and (over TLS) the SNI name. Also:
            GET  /stream?chunks=N&interval=S&size=B   slow chunked response
            POST /echo (or PUT)                       body echoed back
            GET  /bytes/N                             N bytes of payload
            GET  /status/N                            that status code
            GET  /delay?seconds=S                     answer after S seconds
            GET  /redirect?to=URL                     302 to URL
metadata  a fake cloud instance-metadata service (AWS IMDS v1/v2 paths and the
          GCP token path) handing out a fake credential.

Every request (and every failed TLS handshake) is appended to --log.
"""
import http.server
import json
import socketserver
import os
import ssl
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EventLog, base_args, mark_ready, serve_until_signal, watch_owner  # noqa: E402
from fakecreds import (METADATA_ACCESS_KEY, METADATA_ROLE, METADATA_SECRET,  # noqa: E402
                       METADATA_TOKEN)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "netlab"
    sys_version = ""

    def log_message(self, fmt, *args):
        pass

    def version_string(self):
        return "netlab"

    # ---------------------------------------------------------- plumbing
    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = b""
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline(8)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def record(self, **extra):
        local = self.connection.getsockname()
        rec = {"client": self.client_address[0], "port": self.client_address[1],
               "local": local[0], "local_port": local[1], "method": self.command,
               "path": self.path, "host": self.headers.get("Host"),
               "scheme": "https" if self.server.tls else "http",
               "sni": getattr(self.connection, "netlab_sni", None),
               "user_agent": self.headers.get("User-Agent")}
        rec.update(extra)
        self.server.log.write(**rec)

    def send(self, status, body, ctype="text/plain; charset=utf-8", headers=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Netlab-Host", self.server.name)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def info(self):
        local = self.connection.getsockname()
        lines = [
            "netlab host: %s" % self.server.name,
            "local address: %s:%d" % (local[0], local[1]),
            "host header: %s" % self.headers.get("Host", "-"),
            "path: %s" % self.path,
            "method: %s" % self.command,
            "scheme: %s" % ("https" if self.server.tls else "http"),
            "sni: %s" % (getattr(self.connection, "netlab_sni", None) or "-"),
            "client: %s:%d" % self.client_address[:2],
        ]
        return "\n".join(lines) + "\n"

    # ---------------------------------------------------------- dispatch
    def do_GET(self):
        self.dispatch(b"")

    def do_HEAD(self):
        self.dispatch(b"")

    def do_POST(self):
        self.dispatch(self.read_body())

    do_PUT = do_POST
    do_DELETE = do_GET

    def dispatch(self, body):
        url = urllib.parse.urlsplit(self.path)
        qs = dict(urllib.parse.parse_qsl(url.query))
        if self.server.role == "metadata":
            return self.metadata(url.path, body)
        self.record(body_len=len(body))
        path = url.path
        if path == "/echo" and self.command in ("POST", "PUT"):
            ctype = self.headers.get("Content-Type", "application/octet-stream")
            return self.send(200, body, ctype)
        if path == "/stream":
            return self.stream(int(qs.get("chunks", 5)), float(qs.get("interval", 0.2)),
                               int(qs.get("size", 0)))
        if path.startswith("/bytes/"):
            n = min(int(path[len("/bytes/"):] or 0), 256 << 20)
            return self.send_bytes(n)
        if path.startswith("/status/"):
            code = int(path[len("/status/"):])
            return self.send(code, self.info())
        if path == "/delay":
            time.sleep(min(float(qs.get("seconds", 1)), 60))
            return self.send(200, self.info())
        if path == "/redirect":
            return self.send(302, self.info(), headers=[("Location", qs.get("to", "/"))])
        return self.send(200, self.info())

    def stream(self, chunks, interval, size):
        chunks = max(0, min(chunks, 10000))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-Netlab-Host", self.server.name)
        self.end_headers()
        if self.command == "HEAD":
            return
        try:
            for i in range(chunks):
                data = ("chunk %d t=%.3f\n" % (i, time.time())).encode()
                if size > len(data):
                    data = data[:-1] + b"." * (size - len(data)) + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
                if i + 1 < chunks:
                    time.sleep(interval)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            self.close_connection = True

    def send_bytes(self, n):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if self.command == "HEAD":
            return
        block = b"x" * 65536
        try:
            while n > 0:
                self.wfile.write(block[:min(n, len(block))])
                n -= len(block)
        except OSError:
            self.close_connection = True

    # ---------------------------------------------------------- metadata
    def metadata(self, path, body):
        self.record(body_len=len(body), flavor=self.headers.get("Metadata-Flavor"),
                    imds_token=self.headers.get("X-aws-ec2-metadata-token"))
        cred = {"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": METADATA_ACCESS_KEY,
                "SecretAccessKey": METADATA_SECRET, "Token": METADATA_TOKEN,
                "LastUpdated": "2024-01-01T00:00:00Z", "Expiration": "2099-01-01T00:00:00Z"}
        if self.command == "PUT" and path == "/latest/api/token":
            return self.send(200, METADATA_TOKEN)
        if path in ("/", "/latest", "/latest/"):
            return self.send(200, "meta-data/\nuser-data\n")
        if path == "/latest/meta-data/":
            return self.send(200, "ami-id\ninstance-id\nlocal-ipv4\niam/\n")
        if path == "/latest/meta-data/instance-id":
            return self.send(200, "i-0netlab0000000000")
        if path == "/latest/meta-data/local-ipv4":
            return self.send(200, "10.99.77.99")
        if path == "/latest/meta-data/ami-id":
            return self.send(200, "ami-0netlab000000000")
        if path == "/latest/meta-data/iam/":
            return self.send(200, "security-credentials/\n")
        if path == "/latest/meta-data/iam/security-credentials/":
            return self.send(200, METADATA_ROLE)
        if path == "/latest/meta-data/iam/security-credentials/" + METADATA_ROLE:
            return self.send(200, json.dumps(cred, indent=2), "application/json")
        if path == "/latest/user-data":
            return self.send(200, "#!/bin/sh\necho netlab-user-data\n")
        if path.startswith("/computeMetadata/v1/"):
            if self.headers.get("Metadata-Flavor") != "Google":
                return self.send(403, "Missing Metadata-Flavor:Google header.\n")
            if path.endswith("/service-accounts/default/token"):
                return self.send(200, json.dumps({"access_token": METADATA_SECRET,
                                                  "expires_in": 3599,
                                                  "token_type": "Bearer"}),
                                 "application/json", [("Metadata-Flavor", "Google")])
            return self.send(200, "netlab\n", headers=[("Metadata-Flavor", "Google")])
        return self.send(404, "not found\n")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def server_bind(self):
        # HTTPServer.server_bind would look up our own name in DNS; the lab
        # hosts have no resolver, so skip that.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "netlab", self.server_address[1]

    def finish_request(self, request, client_address):
        request.settimeout(30)
        if not self.tls:
            return super().finish_request(request, client_address)
        conn = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            try:
                conn.do_handshake()
            except (ssl.SSLError, OSError) as e:
                self.log.write(event="tls-error", client=client_address[0],
                               port=client_address[1], error=str(e),
                               sni=getattr(conn, "netlab_sni", None))
                return
            super().finish_request(conn, client_address)
        finally:
            try:
                conn.close()
            except OSError:
                pass


def remember_sni(sslsock, name, ctx):
    sslsock.netlab_sni = name


def main():
    p = base_args(__doc__.splitlines()[0])
    p.add_argument("--role", choices=("web", "metadata"), default="web")
    p.add_argument("--name", required=True, help="host name put in bodies and headers")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--cert", help="PEM certificate (enables TLS)")
    p.add_argument("--key", help="PEM private key")
    args = p.parse_args()
    srv = Server((args.bind, args.port), Handler)
    srv.role, srv.name = args.role, args.name
    srv.log = EventLog(args.log, args.service)
    srv.tls = None
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        ctx.sni_callback = remember_sni
        srv.tls = ctx
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    watch_owner(args.owner_pid)
    mark_ready(args.ready)
    serve_until_signal()


if __name__ == "__main__":
    main()
