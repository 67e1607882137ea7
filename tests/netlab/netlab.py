"""netlab: a small fake internet built from network namespaces on this machine.

No lab traffic leaves the machine: every lab host is a network namespace
behind one lab router namespace, which the host's root network namespace
reaches through a single veth pair (the "upstream" interface, fbl<pid>u) and
a few routes for the lab's own prefixes. Nothing else on the host changes: no
default route, no resolv.conf, no sysctl of the root namespace. See README.md
for the topology and the address plan.

Usage::

    from netlab import NetLab            # tests/ is on sys.path under pytest

    with NetLab(names={"api.allowed.test": "198.18.0.12"}) as lab:
        r = lab.dns_query("allowed.test", "A")          # -> dnswire.Message
        assert r.values("A") == ["198.18.0.10"]
        status, headers, body = lab.http_request("GET", "allowed.test", "/x", https=True)
        assert lab.attacker_queries() == []

or as a pytest fixture::

    @pytest.fixture(scope="module")
    def lab():
        with NetLab() as lab:
            yield lab

API
---
NetLab(names=None, *, default_names=True, zones=(), tls_names=None,
       private10_ip="10.99.77.10", private192_ip="192.168.177.10",
       private_tcp_ports=(22, 80, 443, 3306, 8080), private_udp_ports=(53,),
       python=sys.executable, lock_timeout=120)
    names: extra DNS data for the authoritative server, merged over the
        defaults (DEFAULT_NAMES). A value is an address string, a list of
        addresses, or a dict of record types, e.g.
        {"A": ["198.18.0.12"], "AAAA": "2001:db8:18::12", "TXT": "v=1",
         "CNAME": "allowed.test"}; a TXT value may be a list of strings (one
        record each) or a list of lists (one multi-string record each).
        Every address in 198.18.0.0/24 is served by the web host.
    zones: extra zones the DNS server is authoritative for (besides "test").
    tls_names: the certificate's DNS names (default TLS_NAMES).

start() / stop(); also a context manager. stop() is idempotent and also
    tears down a half-started lab. start() first removes what earlier runs
    left behind (fblab-<pid>-* namespaces, fbl<pid>u links, work dirs) when
    their owning pid is gone, then takes a lock so only one lab exists at a
    time (the address plan is fixed). The lock is the abstract unix socket
    @forkbox-netlab-lock: nothing on disk, released when its owner dies; a
    second lab waits up to lock_timeout seconds for it.

Attributes (valid after start()):
    upstream_dns     authoritative DNS server, 198.18.1.53 (UDP+TCP 53)
    attacker_dns     attacker nameserver for evil.test, 198.18.2.53
    attacker_http_ip attacker HTTP sink, 198.18.2.80 (evil.test A records)
    http_ip, https_ip  web host, 198.18.0.10 (whole 198.18.0.0/24 answers)
    metadata_ip      169.254.169.254
    private_ips      ["10.99.77.10", "192.168.177.10"]
    hosts            {"web": ip, "dns": ip, ...} every lab address by role
    routes           prefixes routed from the root netns to the lab
    upstream_if      root-side interface name; upstream_gw its lab-side peer
    ca_file          PEM of the lab CA that signed the HTTPS certificate
    cert_file, key_file  the server certificate and key
    names            the DNS data in effect
    namespaces       {role: netns name}
    workdir          scratch dir (logs, certs, configs); removed by stop()
    egress_guard     True when the lab router rejects connections that lab
                     hosts open towards the root netns (iptables in the lab
                     router's namespace; replies to clients pass)

Services and their log names (lab.log(name) returns a list of dicts, one
per request/query/connection, in arrival order):
    "http"          web host port 80
    "https"         web host port 443 (records carry "sni"; failed
                    handshakes are {"event": "tls-error", ...})
    "dns"           authoritative DNS (records: name, type, client,
                    transport, rcode, forwarded_to, ...)
    "attacker"      attacker DNS; lab.attacker_queries() is the same list
    "attacker_http" attacker HTTP sink
    "metadata"      fake metadata service
    "private10", "private192"  listeners ({"event": "connect"|"data"|"datagram"})

Other methods:
    log(name), clear_logs(), attacker_queries(),
    wait_log(name, pred=None, count=1, timeout=5) -> records (raises on timeout)
    dns_query(name, qtype="A", server=None, tcp=False, port=53, timeout=3,
              rd=True, edns=None) -> dnswire.Message  (.rcode_name, .aa, .tc,
              .answers, .authority, .values(type)); server defaults to
              upstream_dns. Module-level dns_query() needs a server.
    set_names(names, replace=False)  change DNS data while running
    http_request(method, name, path="/", https=False, body=None, headers=None,
                 ip=None, port=None, timeout=10, verify=True)
                 -> (status, headers dict (lower-case keys), body bytes);
                 connects to ip (default: the name's A record in lab.names)
                 with Host/SNI = name, verifying against ca_file.
    ssl_context()    client context trusting only the lab CA
    address_of(name) first A address of name in lab.names (CNAMEs followed)
    exec(role, argv, **kw)  subprocess.run inside a lab namespace
    services         list of log names; pids() {service: pid}; describe() dict

METADATA_ACCESS_KEY / METADATA_SECRET / METADATA_TOKEN are the fake secrets
the metadata service hands out; look for them to detect a leak.

Command line (for poking at the lab by hand):
    python3 tests/netlab/netlab.py up        # start, print the plan, wait for ^C/SIGTERM
    python3 tests/netlab/netlab.py cleanup   # remove leftovers of dead runs
"""
import atexit
import errno
import glob
import http.client
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

try:
    from . import dnswire
    from .fakecreds import (METADATA_ACCESS_KEY, METADATA_ROLE, METADATA_SECRET,  # noqa: F401
                            METADATA_TOKEN)
except ImportError:  # imported as a top-level module or run as a script
    import dnswire
    from fakecreds import (METADATA_ACCESS_KEY, METADATA_ROLE, METADATA_SECRET,  # noqa: F401
                           METADATA_TOKEN)

__all__ = ["NetLab", "NetLabError", "dns_query", "cleanup_stale", "default_names",
           "DEFAULT_NAMES", "TLS_NAMES", "METADATA_ACCESS_KEY", "METADATA_ROLE",
           "METADATA_SECRET", "METADATA_TOKEN"]

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "servers")
NS_PREFIX = "fblab-"
LINK_RE = re.compile(r"^fbl(\d+)u$")
LOCK_NAME = b"\0forkbox-netlab-lock"

# ---------------------------------------------------------------- address plan
LAB_NET = "198.18.0.0/15"          # RFC 2544 benchmarking range: never on a real network
UPSTREAM_NET = "198.19.255.0/30"   # root netns <-> lab router
UPSTREAM_HOST_IP = "198.19.255.1"  # root netns side
UPSTREAM_GW_IP = "198.19.255.2"    # lab router side
GW_LINK_IP = "198.19.254.1"        # router's address on every host link (hosts' gateway)
WEB_NET = "198.18.0.0/24"          # every address here is answered by the web host
WEB_IP = "198.18.0.10"
DNS_IP = "198.18.1.53"
ATTACKER_DNS_IP = "198.18.2.53"
ATTACKER_HTTP_IP = "198.18.2.80"
METADATA_IP = "169.254.169.254"
PRIVATE10_IP = "10.99.77.10"
PRIVATE192_IP = "192.168.177.10"
EVIL_ZONE = "evil.test"

TLS_NAMES = ("allowed.test", "www.allowed.test", "*.allowed.test", "other.test",
             "www.other.test", "cdn.test", "*.cdn.test")


def default_names(private10_ip=PRIVATE10_IP, private192_ip=PRIVATE192_IP):
    return {
        "allowed.test": {"A": ["198.18.0.10"], "AAAA": ["2001:db8:18::10"],
                         "TXT": ["netlab allowed.test"]},
        "www.allowed.test": {"A": ["198.18.0.11"]},
        "other.test": {"A": ["198.18.0.20"]},
        "www.other.test": {"A": ["198.18.0.21"]},
        "cdn.test": {"A": ["198.18.0.30"]},
        "www.cdn.test": {"CNAME": "cdn.test"},
        "notincert.test": {"A": ["198.18.0.40"]},
        # names that look harmless but point where a sandbox must not go
        "internal.allowed.test": {"A": [private10_ip]},
        "private10.test": {"A": [private10_ip]},
        "private192.test": {"A": [private192_ip]},
        "metadata.test": {"A": [METADATA_IP]},
        "ns.test": {"A": [DNS_IP]},
    }


DEFAULT_NAMES = default_names()


class NetLabError(RuntimeError):
    pass


# ------------------------------------------------------------------ helpers
def _run(argv, check=True, timeout=30, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise NetLabError("%s failed (%d): %s" % (" ".join(argv), p.returncode,
                                                   p.stderr.strip() or p.stdout.strip()))
    return p


def ip(*args, ns=None, check=True):
    argv = ["ip"] + (["-n", ns] if ns else []) + [str(a) for a in args]
    return _run(argv, check=check)


def _pid_alive(pid):
    """True if pid exists and is not a zombie (an unreaped dead owner)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def list_namespaces():
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _ns_owner(name):
    m = re.match(r"^fblab-(\d+)-", name)
    return int(m.group(1)) if m else None


def _ns_pids(ns):
    p = ip("netns", "pids", ns, check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def destroy_namespace(ns):
    """Kill every process in ns, then delete it (its veths go with it)."""
    for _ in range(3):
        pids = _ns_pids(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    ip("netns", "del", ns, check=False)


def cleanup_stale(include_own=False):
    """Remove namespaces, root links and work dirs of labs whose owner died.

    Returns the names of what was removed.
    """
    removed = []
    me = os.getpid()

    def orphan(owner):
        if owner is None:
            return True
        return include_own if owner == me else not _pid_alive(owner)

    for ns in list_namespaces():
        if ns.startswith(NS_PREFIX) and orphan(_ns_owner(ns)):
            destroy_namespace(ns)
            removed.append(ns)
    links = json.loads(ip("-j", "link", "show", check=False).stdout or "[]")
    for link in links:
        m = LINK_RE.match(link.get("ifname", ""))
        if m and orphan(int(m.group(1))):
            ip("link", "del", link["ifname"], check=False)
            removed.append(link["ifname"])
    for d in glob.glob(os.path.join(tempfile.gettempdir(), NS_PREFIX + "*")):
        m = re.match(r"^fblab-(\d+)-", os.path.basename(d))
        if m and os.path.isdir(d) and orphan(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def _norm_record(value):
    """Normalize a names-mapping value into {TYPE: [values]} (CNAME: str)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        rec = {}
        for v in value:
            t = "AAAA" if ipaddress.ip_address(v).version == 6 else "A"
            rec.setdefault(t, []).append(str(v))
        return rec
    if not isinstance(value, dict):
        raise ValueError("bad names value %r" % (value,))
    rec = {}
    for t, v in value.items():
        t = t.upper()
        dnswire.type_code(t)
        if t == "CNAME":
            if not isinstance(v, str):
                raise ValueError("CNAME must be a single name")
            rec[t] = dnswire.normalize(v)
        else:
            rec[t] = [v] if isinstance(v, str) else list(v)
    return rec


def dns_query(name, qtype="A", server=None, tcp=False, port=53, timeout=3.0, rd=True,
              edns=None, retries=2):
    """Send one query and return the parsed response (dnswire.Message).

    edns: None for a plain query, or the UDP payload size to advertise.
    Raises socket.timeout/OSError when no answer arrives.
    """
    if server is None:
        raise ValueError("server required")
    q = dnswire.make_query(name, qtype, rd=rd, edns_size=edns)
    data = q.build()
    if tcp:
        with socket.create_connection((server, port), timeout=timeout) as s:
            s.sendall(struct.pack("!H", len(data)) + data)
            head = _recv_exact(s, 2)
            resp = _recv_exact(s, struct.unpack("!H", head)[0])
        m = dnswire.Message.parse(resp)
        if m.id != q.id:
            raise NetLabError("DNS id mismatch over TCP")
        return m
    last = None
    for _ in range(max(retries, 1)):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.connect((server, port))
            s.send(data)
            try:
                while True:
                    resp = s.recv(65535)
                    if len(resp) >= 12 and resp[:2] == data[:2]:
                        return dnswire.Message.parse(resp)
            except socket.timeout as e:
                last = e
    raise last


def _recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise NetLabError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return buf


class _SNIHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a fixed IP while sending `name` as SNI and Host."""

    def __init__(self, ip, name, port, context, timeout):
        super().__init__(name, port, context=context, timeout=timeout)
        self._ip = ip

    def connect(self):
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)


class _IPHTTPConnection(http.client.HTTPConnection):
    def __init__(self, ip, name, port, timeout):
        super().__init__(name, port, timeout=timeout)
        self._ip = ip

    def connect(self):
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


# ------------------------------------------------------------------ the lab
class NetLab:
    _active = None
    _active_lock = threading.Lock()

    def __init__(self, names=None, *, default_names=True, zones=(), tls_names=None,
                 private10_ip=PRIVATE10_IP, private192_ip=PRIVATE192_IP,
                 private_tcp_ports=(22, 80, 443, 3306, 8080), private_udp_ports=(53,),
                 python=None, lock_timeout=120):
        for a, net in ((private10_ip, "10.0.0.0/8"), (private192_ip, "192.168.0.0/16")):
            if ipaddress.ip_address(a) not in ipaddress.ip_network(net):
                raise ValueError("%s is not in %s" % (a, net))
        self.pid = os.getpid()
        self.prefix = "%s%d-" % (NS_PREFIX, self.pid)
        self.python = python or sys.executable
        self.lock_timeout = lock_timeout
        self.private_tcp_ports = tuple(private_tcp_ports)
        self.private_udp_ports = tuple(private_udp_ports)
        self.tls_names = tuple(tls_names or TLS_NAMES)
        self.zones = ["test"] + [dnswire.normalize(z) for z in zones]
        self.names = {}
        if default_names:
            for k, v in globals()["default_names"](private10_ip, private192_ip).items():
                self.names[dnswire.normalize(k)] = _norm_record(v)
        for k, v in (names or {}).items():
            self.names[dnswire.normalize(k)] = _norm_record(v)

        self.upstream_if = "fbl%du" % self.pid
        self.upstream_host_ip = UPSTREAM_HOST_IP
        self.upstream_gw = UPSTREAM_GW_IP
        self.upstream_dns = DNS_IP
        self.attacker_dns = ATTACKER_DNS_IP
        self.attacker_http_ip = ATTACKER_HTTP_IP
        self.http_ip = self.https_ip = WEB_IP
        self.metadata_ip = METADATA_IP
        self.private_ips = [private10_ip, private192_ip]
        self.hosts = {"web": WEB_IP, "dns": DNS_IP, "attacker": ATTACKER_DNS_IP,
                      "attacker_http": ATTACKER_HTTP_IP, "metadata": METADATA_IP,
                      "private10": private10_ip, "private192": private192_ip}
        # role -> (addresses, prefixes routed to it by the router, AnyIP local prefixes)
        self._plan = {
            "web": ([WEB_IP], [WEB_NET], [WEB_NET]),
            "dns": ([DNS_IP], [DNS_IP + "/32"], []),
            "attacker": ([ATTACKER_DNS_IP, ATTACKER_HTTP_IP],
                         [ATTACKER_DNS_IP + "/32", ATTACKER_HTTP_IP + "/32"], []),
            "meta": ([METADATA_IP], [METADATA_IP + "/32"], []),
            "priv10": ([private10_ip], [private10_ip + "/32"], []),
            "priv192": ([private192_ip], [private192_ip + "/32"], []),
        }
        self.routes = [LAB_NET, METADATA_IP + "/32", private10_ip + "/32",
                       private192_ip + "/32"]
        self.namespaces = {role: self.prefix + role for role in ["gw"] + list(self._plan)}
        self.workdir = None
        self.ca_file = self.cert_file = self.key_file = None
        self._procs = {}
        self._lock_sock = None
        self._added_routes = []
        self._created_ns = []
        self._link_created = False
        self._started = False
        self.egress_guard = None

    # ------------------------------------------------------------ lifecycle
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        if self._started:
            raise NetLabError("lab already started")
        with NetLab._active_lock:
            if NetLab._active is not None:
                raise NetLabError("another NetLab is running in this process")
            NetLab._active = self
        self._started = True
        try:
            cleanup_stale(include_own=True)
            self._take_lock()
            cleanup_stale(include_own=True)
            self._check_conflicts()
            self.workdir = tempfile.mkdtemp(prefix=self.prefix)
            os.chmod(self.workdir, 0o755)
            os.mkdir(os.path.join(self.workdir, "logs"))
            self._make_certs()
            self._write_dns_config()
            self._build_topology()
            self._start_services()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Tear everything down; safe to call more than once."""
        if not self._started:
            return
        errors = []
        procs = list(self._procs.values())
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(5)
        self._procs.clear()
        for prefix in reversed(self._added_routes):
            p = ip("route", "del", prefix, "dev", self.upstream_if, check=False)
            if p.returncode != 0 and "No such process" not in p.stderr \
                    and "Cannot find device" not in p.stderr:
                errors.append(p.stderr.strip())
        self._added_routes = []
        if self._link_created:
            ip("link", "del", self.upstream_if, check=False)
            self._link_created = False
        for ns in reversed(self._created_ns):
            destroy_namespace(ns)
        self._created_ns = []
        # anything of ours that is still around (e.g. a half-created object)
        for ns in list_namespaces():
            if ns.startswith(self.prefix):
                destroy_namespace(ns)
        if ip("link", "show", self.upstream_if, check=False).returncode == 0:
            ip("link", "del", self.upstream_if, check=False)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._release_lock()
        with NetLab._active_lock:
            if NetLab._active is self:
                NetLab._active = None
        self._started = False
        if errors:
            raise NetLabError("teardown: " + "; ".join(errors))

    def _take_lock(self):
        """One lab per host at a time (the address plan is fixed). The lock is
        an abstract unix socket of the root netns: no file to clean up, and it
        is released by the kernel when the owning process dies."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                s.bind(LOCK_NAME)
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    s.close()
                    raise
                if time.monotonic() > deadline:
                    s.close()
                    raise NetLabError("another netlab is running (abstract socket @%s)"
                                      % LOCK_NAME[1:].decode())
                time.sleep(0.2)
        self._lock_sock = s

    def _release_lock(self):
        if self._lock_sock is not None:
            self._lock_sock.close()
            self._lock_sock = None

    def _check_conflicts(self):
        """Refuse to start if the host already routes or owns any lab prefix."""
        ours = [ipaddress.ip_network(p) for p in self.routes + [UPSTREAM_NET]]
        routes = json.loads(ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
        for r in routes:
            dst = r.get("dst", "")
            if dst in ("default", "") or r.get("type") in ("broadcast", "multicast"):
                continue
            try:
                net = ipaddress.ip_network(dst, strict=False)
            except ValueError:
                continue
            if net.prefixlen == 0:
                continue
            for o in ours:
                if net.overlaps(o):
                    raise NetLabError("host route %s (dev %s) overlaps lab prefix %s; "
                                      "refusing to start" % (dst, r.get("dev"), o))

    # -------------------------------------------------------------- certs
    def _make_certs(self):
        d = os.path.join(self.workdir, "tls")
        os.mkdir(d)
        ca_cnf = os.path.join(d, "ca.cnf")
        with open(ca_cnf, "w") as f:
            f.write("[req]\ndistinguished_name = dn\nprompt = no\n"
                    "[dn]\nCN = forkbox netlab test CA %d\nO = forkbox netlab\n"
                    "[v3_ca]\nbasicConstraints = critical,CA:TRUE\n"
                    "keyUsage = critical,keyCertSign,cRLSign\n"
                    "subjectKeyIdentifier = hash\n" % self.pid)
        leaf_cnf = os.path.join(d, "leaf.cnf")
        with open(leaf_cnf, "w") as f:
            f.write("[req]\ndistinguished_name = dn\nprompt = no\n"
                    "[dn]\nCN = %s\nO = forkbox netlab\n" % self.tls_names[0])
        ext = os.path.join(d, "leaf.ext")
        with open(ext, "w") as f:
            f.write("[v3_leaf]\nbasicConstraints = critical,CA:FALSE\n"
                    "keyUsage = critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage = serverAuth\n"
                    "subjectKeyIdentifier = hash\n"
                    "authorityKeyIdentifier = keyid:always\n"
                    "subjectAltName = %s\n" % ",".join("DNS:" + n for n in self.tls_names))
        ca_key, ca_pem = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
        key, csr, pem = (os.path.join(d, n) for n in ("server.key", "server.csr", "server.pem"))
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _run(["openssl", "req", "-x509", "-new"] + ec + ["-keyout", ca_key, "-out", ca_pem,
             "-days", "7", "-config", ca_cnf, "-extensions", "v3_ca"])
        _run(["openssl", "req", "-new"] + ec + ["-keyout", key, "-out", csr, "-config", leaf_cnf])
        _run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
              "-set_serial", "0x%x" % int.from_bytes(os.urandom(8), "big"), "-days", "7",
              "-out", pem, "-extfile", ext, "-extensions", "v3_leaf"])
        for p in (ca_key, key):
            os.chmod(p, 0o600)
        for p in (ca_pem, pem):
            os.chmod(p, 0o644)
        self.ca_file, self.cert_file, self.key_file = ca_pem, pem, key

    # ---------------------------------------------------------------- DNS
    def _dns_config_path(self):
        return os.path.join(self.workdir, "dns.json")

    def _write_dns_config(self):
        cfg = {"zones": self.zones, "records": self.names,
               "delegations": {EVIL_ZONE: {"ns": "ns." + EVIL_ZONE, "addr": ATTACKER_DNS_IP}}}
        path = self._dns_config_path()
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(cfg, f, indent=1, sort_keys=True)
        os.rename(tmp, path)

    def set_names(self, names, replace=False):
        """Change the authoritative DNS data; takes effect on the next query."""
        new = {} if replace else dict(self.names)
        for k, v in names.items():
            new[dnswire.normalize(k)] = _norm_record(v)
        self.names = new
        if self.workdir:
            self._write_dns_config()

    # ----------------------------------------------------------- topology
    def _build_topology(self):
        gw = self.namespaces["gw"]
        for role, ns in self.namespaces.items():
            ip("netns", "add", ns)
            self._created_ns.append(ns)
            ip("link", "set", "lo", "up", ns=ns)
        # upstream: root netns <-> router
        ip("link", "add", self.upstream_if, "type", "veth", "peer", "name", "up0", "netns", gw)
        self._link_created = True
        # the lab is IPv4 only: no IPv6 on the host-side interface, so the host's
        # IPv6 routing tables do not change (a setting of this interface only,
        # gone with it)
        ip("link", "set", self.upstream_if, "addrgenmode", "none")
        try:
            with open("/proc/sys/net/ipv6/conf/%s/disable_ipv6" % self.upstream_if, "w") as f:
                f.write("1")
        except OSError:
            pass  # kernel without IPv6
        ip("link", "set", "up0", "addrgenmode", "none", ns=gw)
        ip("addr", "add", "%s/30" % UPSTREAM_HOST_IP, "dev", self.upstream_if)
        ip("link", "set", self.upstream_if, "up")
        ip("addr", "add", "%s/30" % UPSTREAM_GW_IP, "dev", "up0", ns=gw)
        ip("link", "set", "up0", "up", ns=gw)
        ip("route", "add", "default", "via", UPSTREAM_HOST_IP, "dev", "up0", ns=gw)
        # unassigned lab addresses fail fast instead of bouncing back upstream
        ip("route", "add", "unreachable", LAB_NET, ns=gw)
        _run(["ip", "netns", "exec", gw, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        # lab hosts only ever answer: refuse connections they would open towards
        # the root netns (and from there, with forwarding on, the real network)
        try:
            for rule in (["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
                         ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]):
                _run(["ip", "netns", "exec", gw, "iptables", "-w", "5", "-A", "FORWARD",
                      "-i", "h-+", "-o", "up0"] + rule)
            self.egress_guard = True
        except (NetLabError, OSError) as e:
            self.egress_guard = False
            sys.stderr.write("netlab: no egress guard in the lab router (%s)\n" % e)
        # one veth per host, /32 addressing with the router as on-link gateway
        for role, (addrs, gw_routes, anyip) in self._plan.items():
            ns = self.namespaces[role]
            hl = "h-" + role
            ip("link", "add", hl, "type", "veth", "peer", "name", "eth0", "netns", ns, ns=gw)
            ip("link", "set", hl, "addrgenmode", "none", ns=gw)
            ip("link", "set", "eth0", "addrgenmode", "none", ns=ns)
            ip("addr", "add", GW_LINK_IP + "/32", "dev", hl, ns=gw)
            ip("link", "set", hl, "up", ns=gw)
            for a in addrs:
                ip("addr", "add", a + "/32", "dev", "eth0", ns=ns)
            ip("link", "set", "eth0", "up", ns=ns)
            ip("route", "add", GW_LINK_IP, "dev", "eth0", "scope", "link", ns=ns)
            ip("route", "add", "default", "via", GW_LINK_IP, "dev", "eth0", ns=ns)
            for pfx in anyip:
                ip("route", "add", "local", pfx, "dev", "lo", ns=ns)
            for pfx in gw_routes:
                ip("route", "add", pfx, "dev", hl, ns=gw)
        # the only changes to the root netns: the upstream link and these routes
        for pfx in self.routes:
            ip("route", "add", pfx, "via", UPSTREAM_GW_IP, "dev", self.upstream_if)
            self._added_routes.append(pfx)

    # ----------------------------------------------------------- services
    def _service_specs(self):
        tls = ["--cert", self.cert_file, "--key", self.key_file]
        tcp_ports = ",".join(str(p) for p in self.private_tcp_ports)
        udp_ports = ",".join(str(p) for p in self.private_udp_ports)
        return {
            "http": ("web", "http_server.py", ["--role", "web", "--name", "web", "--port", "80"]),
            "https": ("web", "http_server.py",
                      ["--role", "web", "--name", "web", "--port", "443"] + tls),
            "dns": ("dns", "dns_server.py", ["--role", "auth", "--bind", DNS_IP,
                                             "--config", self._dns_config_path()]),
            "attacker": ("attacker", "dns_server.py",
                         ["--role", "attacker", "--bind", ATTACKER_DNS_IP, "--zone", EVIL_ZONE,
                          "--a", ATTACKER_HTTP_IP, "--ns-addr", ATTACKER_DNS_IP]),
            "attacker_http": ("attacker", "http_server.py",
                              ["--role", "web", "--name", "attacker", "--bind",
                               ATTACKER_HTTP_IP, "--port", "80"]),
            "metadata": ("meta", "http_server.py", ["--role", "metadata", "--name", "metadata",
                                                    "--bind", METADATA_IP, "--port", "80"]),
            "private10": ("priv10", "tcp_listener.py",
                          ["--name", "private10", "--bind", self.private_ips[0],
                           "--tcp-ports", tcp_ports, "--udp-ports", udp_ports]),
            "private192": ("priv192", "tcp_listener.py",
                           ["--name", "private192", "--bind", self.private_ips[1],
                            "--tcp-ports", tcp_ports, "--udp-ports", udp_ports]),
        }

    def _log_path(self, service):
        return os.path.join(self.workdir, "logs", service + ".jsonl")

    def _start_services(self):
        specs = self._service_specs()
        ready = {}
        for service, (role, script, args) in specs.items():
            ns = self.namespaces[role]
            ready[service] = os.path.join(self.workdir, service + ".ready")
            open(self._log_path(service), "a").close()
            argv = ["ip", "netns", "exec", ns, self.python, "-I", "-B", "-u",
                    os.path.join(SERVERS, script)] + args + [
                "--service", service, "--log", self._log_path(service),
                "--ready", ready[service], "--owner-pid", str(self.pid)]
            with open(os.path.join(self.workdir, service + ".err"), "wb") as err:
                self._procs[service] = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT,
                    start_new_session=True, close_fds=True)
        deadline = time.monotonic() + 20
        pending = set(specs)
        while pending:
            for service in list(pending):
                if os.path.exists(ready[service]):
                    pending.discard(service)
                elif self._procs[service].poll() is not None:
                    raise NetLabError("service %s exited: %s" % (service, self._stderr(service)))
            if pending and time.monotonic() > deadline:
                raise NetLabError("services not ready: %s" % ", ".join(sorted(pending)))
            if pending:
                time.sleep(0.02)

    def _stderr(self, service):
        try:
            with open(os.path.join(self.workdir, service + ".err"), errors="replace") as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def pids(self):
        """{service: pid} of the running servers."""
        return {s: p.pid for s, p in self._procs.items()}

    # --------------------------------------------------------------- logs
    @property
    def services(self):
        return list(self._service_specs()) if self.workdir else []

    def log(self, service):
        path = self._log_path(service)
        if not os.path.exists(path):
            raise KeyError("no such service log %r" % service)
        out = []
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.endswith("\n"):
                    out.append(json.loads(line))
        return out

    def clear_logs(self):
        for service in self.services:
            with open(self._log_path(service), "w"):
                pass

    def attacker_queries(self):
        return [r for r in self.log("attacker") if "name" in r or "error" in r]

    def wait_log(self, service, pred=None, count=1, timeout=5.0):
        """Wait until at least `count` records of service match pred; return them."""
        deadline = time.monotonic() + timeout
        while True:
            recs = [r for r in self.log(service) if pred is None or pred(r)]
            if len(recs) >= count:
                return recs
            if time.monotonic() > deadline:
                raise NetLabError("%s: %d matching records after %.1fs, wanted %d: %r"
                                  % (service, len(recs), timeout, count, self.log(service)[-5:]))
            time.sleep(0.02)

    # ------------------------------------------------------------- clients
    def dns_query(self, name, qtype="A", server=None, tcp=False, port=53, timeout=3.0,
                  rd=True, edns=None):
        return dns_query(name, qtype, server or self.upstream_dns, tcp=tcp, port=port,
                         timeout=timeout, rd=rd, edns=edns)

    def ssl_context(self):
        return ssl.create_default_context(cafile=self.ca_file)

    def address_of(self, name):
        rec = self.names.get(dnswire.normalize(name))
        for _ in range(8):
            if rec is None:
                break
            if "A" in rec:
                return rec["A"][0]
            if "CNAME" in rec:
                rec = self.names.get(rec["CNAME"])
                continue
            break
        raise KeyError("%s has no A record in the lab" % name)

    def http_request(self, method, name, path="/", https=False, body=None, headers=None,
                     ip=None, port=None, timeout=10, verify=True):
        ip = ip or self.address_of(name)
        if https:
            ctx = self.ssl_context()
            if not verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            conn = _SNIHTTPSConnection(ip, name, port or 443, ctx, timeout)
        else:
            conn = _IPHTTPConnection(ip, name, port or 80, timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def exec(self, role, argv, **kw):
        """Run argv inside the lab namespace of `role` (subprocess.run kwargs)."""
        kw.setdefault("timeout", 30)
        return subprocess.run(["ip", "netns", "exec", self.namespaces[role]] + list(argv), **kw)

    def describe(self):
        return {"upstream_if": self.upstream_if, "upstream_host_ip": self.upstream_host_ip,
                "upstream_gw": self.upstream_gw, "routes": self.routes, "hosts": self.hosts,
                "namespaces": self.namespaces, "ca_file": self.ca_file,
                "workdir": self.workdir, "pids": self.pids(),
                "names": self.names}


@atexit.register
def _stop_active_lab():
    lab = NetLab._active
    if lab is not None and lab.pid == os.getpid():
        try:
            lab.stop()
        except Exception:
            pass


def _main(argv):
    if len(argv) < 2 or argv[1] not in ("up", "cleanup"):
        print("usage: netlab.py up|cleanup", file=sys.stderr)
        return 2
    if argv[1] == "cleanup":
        for r in cleanup_stale():
            print("removed", r)
        return 0
    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    with NetLab() as lab:
        print(json.dumps(lab.describe(), indent=2))
        print("lab is up; ^C to tear down", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
