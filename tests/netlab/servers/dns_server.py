"""netlab DNS server (UDP and TCP), in one of two roles.

auth      authoritative for the zones and names in --config (a JSON file that
          is re-read whenever it is replaced, so a test can change answers
          while the lab runs). Names under a delegated zone (evil.test) are
          forwarded to that zone's nameserver when the query asks for
          recursion (RD=1) and answered with a referral otherwise, so a
          resolver that forwards anything to this server ends up carrying
          tunnelled queries to the attacker.
attacker  answers every name under --zone and records every query it sees.

Every query is appended to --log as one JSON object per line.
"""
import json
import os
import random
import socket
import socketserver
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dnswire as w  # noqa: E402
from common import EventLog, base_args, mark_ready, serve_until_signal, watch_owner  # noqa: E402

TTL = 60
FORWARD_TIMEOUT = 2.0


class AuthData:
    """The zone data from the JSON config, reloaded when the file changes."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.key = None
        self.zones, self.records, self.delegations = [], {}, {}
        self.reload()

    def reload(self):
        try:
            st = os.stat(self.path)
        except OSError:
            return
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self.lock:
            if key == self.key:
                return
            with open(self.path) as f:
                cfg = json.load(f)
            self.zones = sorted((w.normalize(z) for z in cfg.get("zones", [])),
                                key=len, reverse=True)
            self.records = {w.normalize(k): v for k, v in cfg.get("records", {}).items()}
            self.delegations = {w.normalize(k): v for k, v in cfg.get("delegations", {}).items()}
            self.key = key


def soa(zone):
    apex = zone or "."
    return w.RR(zone, "SOA", TTL, ("ns." + zone if zone else "ns", "hostmaster." + apex.strip("."),
                                   2024010101, 3600, 600, 86400, TTL))


def records_of(name, rec, qtype):
    """RRs of `qtype` (or every type for ANY) from a mapping entry."""
    out = []
    for tname, values in rec.items():
        code = w.type_code(tname)
        if qtype != 255 and code != qtype:
            continue
        if tname.upper() == "CNAME":
            values = [values] if isinstance(values, str) else values
        elif tname.upper() == "TXT" and isinstance(values, str):
            values = [values]
        elif isinstance(values, str):
            values = [values]
        for v in values:
            out.append(w.RR(name, code, TTL, v))
    return out


class Resolver:
    def __init__(self, args, log):
        self.args = args
        self.log = log
        self.data = AuthData(args.config) if args.role == "auth" else None

    # ---------------------------------------------------------------- auth
    def auth_answer(self, q, raw, transport):
        d = self.data
        d.reload()
        name, qtype, _ = q.questions[0]
        name = w.normalize(name)
        info = {}
        for dz, deleg in d.delegations.items():
            if w.in_zone(name, dz):
                if q.rd:
                    info["forwarded_to"] = deleg["addr"]
                    return self.forward(q, raw, deleg["addr"], transport, info), info
                r = w.reply_to(q)
                r.authority.append(w.RR(dz, "NS", TTL, deleg["ns"]))
                if w.in_zone(deleg["ns"], dz):
                    r.additional.append(w.RR(deleg["ns"], "A", TTL, deleg["addr"]))
                info["referral"] = dz
                return r, info
        r = w.reply_to(q)
        zone = next((z for z in d.zones if w.in_zone(name, z)), None)
        if zone is None:
            if name not in d.records:
                r.rcode = w.RCODES["REFUSED"]
                return r, info
            zone = name
        r.aa = True
        cur, seen = name, set()
        while cur not in seen and len(seen) < 8:
            seen.add(cur)
            rec = d.records.get(cur)
            if rec is None:
                if cur == zone and qtype in (6, 255):
                    r.answers.append(soa(zone))
                elif cur == name and not any(k.endswith("." + cur) for k in d.records):
                    if cur != zone:
                        r.rcode = w.RCODES["NXDOMAIN"]
                break
            cname = next((v for k, v in rec.items() if k.upper() == "CNAME"), None)
            if cname is not None and qtype not in (5, 255):
                r.answers.append(w.RR(cur, "CNAME", TTL, cname))
                cur = w.normalize(cname)
                if not w.in_zone(cur, zone) and cur not in d.records:
                    break
                continue
            r.answers.extend(records_of(cur, rec, qtype))
            break
        if not r.answers or r.rcode:
            r.authority.append(soa(zone))
        return r, info

    def forward(self, q, raw, addr, transport, info):
        """Relay the query unchanged (new id) to addr and the answer back."""
        fid = random.randrange(0, 65536)
        out = struct.pack("!H", fid) + raw[2:]
        try:
            if transport == "tcp":
                with socket.create_connection((addr, 53), timeout=FORWARD_TIMEOUT) as s:
                    s.sendall(struct.pack("!H", len(out)) + out)
                    resp = recv_tcp_message(s)
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    s.settimeout(FORWARD_TIMEOUT)
                    s.connect((addr, 53))
                    s.send(out)
                    while True:
                        resp = s.recv(65535)
                        if resp[:2] == out[:2]:
                            break
            if resp is None or len(resp) < 12:
                raise OSError("no answer")
            r = w.Message.parse(resp)
            info["upstream_rcode"] = r.rcode_name
            return struct.pack("!H", q.id) + resp[2:]
        except (OSError, w.DNSError) as e:
            info["forward_error"] = str(e)
            r = w.reply_to(q)
            r.rcode = w.RCODES["SERVFAIL"]
            return r

    # ------------------------------------------------------------ attacker
    def attacker_answer(self, q):
        zone = w.normalize(self.args.zone)
        asked, qtype, _ = q.questions[0]
        name = w.normalize(asked)
        r = w.reply_to(q)
        if not w.in_zone(name, zone):
            r.rcode = w.RCODES["REFUSED"]
            return r, {}
        r.aa = True
        ns = "ns." + zone
        # first label as sent: tunnelled data may be case-sensitive
        first = asked.rstrip(".").split(".")[0] if name != zone else ""
        want = lambda code: qtype in (code, 255)  # noqa: E731
        if name == ns:
            if want(1):
                r.answers.append(w.RR(name, "A", TTL, self.args.ns_addr))
        else:
            if want(1):
                r.answers.append(w.RR(name, "A", TTL, self.args.a))
            if want(28):
                r.answers.append(w.RR(name, "AAAA", TTL, self.args.aaaa))
            if want(16):
                if first.startswith("big"):
                    txt = ["%03d" % i + "x" * 96 for i in range(40)]
                else:
                    txt = ["netlab-attacker", "got=" + first]
                r.answers.append(w.RR(name, "TXT", TTL, txt))
            if name == zone and want(2):
                r.answers.append(w.RR(name, "NS", TTL, ns))
            if name == zone and want(6):
                r.answers.append(soa(zone))
        if not r.answers:
            r.authority.append(soa(zone))
        return r, {}

    # --------------------------------------------------------------- both
    def handle(self, raw, client, transport):
        rec = {"client": client[0], "port": client[1], "transport": transport}
        try:
            q = w.Message.parse(raw)
        except w.DNSError as e:
            rec.update(error="malformed: %s" % e, length=len(raw))
            self.log.write(**rec)
            if len(raw) >= 12:
                r = w.Message(id=struct.unpack("!H", raw[:2])[0], qr=True,
                              rcode=w.RCODES["FORMERR"])
                return r.build()
            return None
        if q.qr:
            return None
        if q.questions:
            name, qtype, _ = q.questions[0]
            rec.update(name=name, type=w.type_name(qtype))
        rec.update(id=q.id, rd=q.rd, edns=q.edns_size)
        if q.opcode != 0 or len(q.questions) != 1:
            r = w.reply_to(q)
            r.rcode = w.RCODES["NOTIMP" if q.opcode else "FORMERR"]
            info = {}
        elif self.args.role == "auth":
            r, info = self.auth_answer(q, raw, transport)
        else:
            r, info = self.attacker_answer(q)
        rec.update(info)
        if isinstance(r, bytes):
            data = r
            try:
                rec["rcode"] = w.RCODE_NAMES.get(data[3] & 0xF, str(data[3] & 0xF))
            except IndexError:
                pass
        else:
            limit = 65535 if transport == "tcp" else min(max(q.edns_size or 512, 512), 4096)
            data = w.build_limited(r, limit)
            rec["rcode"] = r.rcode_name
            rec["answers"] = [rr.value for rr in r.answers]
            if r.tc:
                rec["truncated"] = True
        self.log.write(**rec)
        return data


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def recv_tcp_message(s):
    head = recv_exact(s, 2)
    if head is None:
        return None
    return recv_exact(s, struct.unpack("!H", head)[0])


class UDPHandler(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        out = self.server.resolver.handle(data, self.client_address, "udp")
        if out is not None:
            sock.sendto(out, self.client_address)


class TCPHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(10)
        try:
            while True:
                msg = recv_tcp_message(self.request)
                if msg is None:
                    return
                out = self.server.resolver.handle(msg, self.client_address, "tcp")
                if out is None:
                    return
                self.request.sendall(struct.pack("!H", len(out)) + out)
        except OSError:
            pass


class UDPServer(socketserver.ThreadingUDPServer):
    allow_reuse_address = True
    daemon_threads = True


class TCPServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    p = base_args(__doc__.splitlines()[0])
    p.add_argument("--role", choices=("auth", "attacker"), required=True)
    p.add_argument("--bind", required=True)
    p.add_argument("--port", type=int, default=53)
    p.add_argument("--config", help="auth: JSON zone data")
    p.add_argument("--zone", default="evil.test", help="attacker: zone answered")
    p.add_argument("--a", default="198.18.2.80", help="attacker: A answer")
    p.add_argument("--aaaa", default="2001:db8:18:2::80", help="attacker: AAAA answer")
    p.add_argument("--ns-addr", default="198.18.2.53", help="attacker: address of ns.<zone>")
    args = p.parse_args()
    log = EventLog(args.log, args.service)
    resolver = Resolver(args, log)
    udp = UDPServer((args.bind, args.port), UDPHandler)
    tcp = TCPServer((args.bind, args.port), TCPHandler)
    for srv in (udp, tcp):
        srv.resolver = resolver
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    watch_owner(args.owner_pid)
    mark_ready(args.ready)
    serve_until_signal()


if __name__ == "__main__":
    main()
