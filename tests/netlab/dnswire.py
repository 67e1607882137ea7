"""DNS wire format (RFC 1035) for the netlab servers and client, stdlib only.

Small on purpose: enough to parse and build queries and answers with A, AAAA,
CNAME, NS, SOA, TXT and an EDNS(0) OPT pseudo-record, including name
compression when parsing (and for owner names when building).
"""
import ipaddress
import random
import struct

TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16,
         "AAAA": 28, "SRV": 33, "OPT": 41, "HTTPS": 65, "ANY": 255}
TYPE_NAMES = {v: k for k, v in TYPES.items()}
RCODES = {"NOERROR": 0, "FORMERR": 1, "SERVFAIL": 2, "NXDOMAIN": 3, "NOTIMP": 4, "REFUSED": 5}
RCODE_NAMES = {v: k for k, v in RCODES.items()}
CLASS_IN = 1


class DNSError(Exception):
    pass


def type_code(t):
    if isinstance(t, int):
        return t
    t = t.upper()
    if t in TYPES:
        return TYPES[t]
    if t.startswith("TYPE") and t[4:].isdigit():
        return int(t[4:])
    raise ValueError("unknown DNS type %r" % t)


def type_name(code):
    return TYPE_NAMES.get(code, "TYPE%d" % code)


def normalize(name):
    """Lower-case, no trailing dot; the root is ''."""
    return name.rstrip(".").lower()


def in_zone(name, zone):
    name, zone = normalize(name), normalize(zone)
    return zone == "" or name == zone or name.endswith("." + zone)


def encode_name(name):
    name = name.rstrip(".")
    out = b""
    if name:
        for label in name.split("."):
            raw = label.encode("ascii")
            if not raw or len(raw) > 63:
                raise DNSError("bad label in %r" % name)
            out += bytes([len(raw)]) + raw
    return out + b"\x00"


def decode_name(data, off):
    """Return (name, offset just after the name in the original position)."""
    labels = []
    end = None
    jumps = 0
    while True:
        if off >= len(data):
            raise DNSError("name runs past the message")
        n = data[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(data):
                raise DNSError("truncated pointer")
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | data[off + 1]
            jumps += 1
            if jumps > 32:
                raise DNSError("compression loop")
            continue
        if n & 0xC0:
            raise DNSError("bad label type")
        off += 1
        if n == 0:
            break
        if off + n > len(data):
            raise DNSError("label runs past the message")
        labels.append(data[off:off + n].decode("ascii", "replace"))
        off += n
    name = ".".join(labels)
    if len(name) > 253:
        raise DNSError("name too long")
    return name, (end if end is not None else off)


class RR:
    """A resource record. `value` is the decoded rdata (str, list or tuple) when known."""

    def __init__(self, name, rtype, ttl=60, value=None, rclass=CLASS_IN, rdata=None):
        self.name = normalize(name)
        self.type = type_code(rtype)
        self.rclass = rclass
        self.ttl = ttl
        self.value = value
        self.rdata = rdata  # raw bytes when parsed

    @property
    def type_name(self):
        return type_name(self.type)

    def encode_rdata(self):
        t, v = self.type, self.value
        if v is None:
            return self.rdata or b""
        if t == 1:
            return ipaddress.IPv4Address(v).packed
        if t == 28:
            return ipaddress.IPv6Address(v).packed
        if t in (2, 5, 12):
            return encode_name(v)
        if t == 16:
            parts = [v] if isinstance(v, (str, bytes)) else list(v)
            out = b""
            for p in parts:
                raw = p.encode() if isinstance(p, str) else p
                for i in range(0, max(len(raw), 1), 255):
                    chunk = raw[i:i + 255]
                    out += bytes([len(chunk)]) + chunk
            return out
        if t == 6:
            mname, rname, serial, refresh, retry, expire, minimum = v
            return encode_name(mname) + encode_name(rname) + struct.pack(
                "!IIIII", serial, refresh, retry, expire, minimum)
        if isinstance(v, bytes):
            return v
        raise DNSError("cannot encode type %s" % self.type_name)

    def __repr__(self):
        return "RR(%s %d %s %r)" % (self.name, self.ttl, self.type_name, self.value)

    def as_dict(self):
        return {"name": self.name, "type": self.type_name, "ttl": self.ttl, "value": self.value}


def _decode_rdata(data, off, rdlen, rtype):
    rd = data[off:off + rdlen]
    try:
        if rtype == 1 and rdlen == 4:
            return str(ipaddress.IPv4Address(rd))
        if rtype == 28 and rdlen == 16:
            return str(ipaddress.IPv6Address(rd))
        if rtype in (2, 5, 12):
            return decode_name(data, off)[0]
        if rtype == 16:
            strings, i = [], 0
            while i < rdlen:
                n = rd[i]
                strings.append(rd[i + 1:i + 1 + n].decode("utf-8", "replace"))
                i += 1 + n
            return strings
        if rtype == 6:
            mname, o = decode_name(data, off)
            rname, o = decode_name(data, o)
            return (mname, rname) + struct.unpack("!IIIII", data[o:o + 20])
    except (DNSError, struct.error, ValueError):
        pass
    return rd


class Message:
    def __init__(self, id=0, qr=False, opcode=0, aa=False, tc=False, rd=True, ra=False,
                 rcode=0):
        self.id = id
        self.qr, self.opcode, self.aa, self.tc, self.rd, self.ra = qr, opcode, aa, tc, rd, ra
        self.rcode = rcode
        self.questions = []  # (name, qtype, qclass)
        self.answers, self.authority, self.additional = [], [], []
        self.edns_size = None  # UDP payload size from an OPT record, None without EDNS
        self.edns_version = 0

    @property
    def rcode_name(self):
        return RCODE_NAMES.get(self.rcode, "RCODE%d" % self.rcode)

    @classmethod
    def parse(cls, data):
        if len(data) < 12:
            raise DNSError("short message")
        mid, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", data[:12])
        m = cls(id=mid, qr=bool(flags & 0x8000), opcode=(flags >> 11) & 0xF,
                aa=bool(flags & 0x400), tc=bool(flags & 0x200), rd=bool(flags & 0x100),
                ra=bool(flags & 0x80), rcode=flags & 0xF)
        off = 12
        for _ in range(qd):
            name, off = decode_name(data, off)
            if off + 4 > len(data):
                raise DNSError("truncated question")
            qtype, qclass = struct.unpack("!HH", data[off:off + 4])
            off += 4
            m.questions.append((name, qtype, qclass))  # case kept (0x20 resolvers)
        for section, count in ((m.answers, an), (m.authority, ns), (m.additional, ar)):
            for _ in range(count):
                name, off = decode_name(data, off)
                if off + 10 > len(data):
                    raise DNSError("truncated record")
                rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", data[off:off + 10])
                off += 10
                if off + rdlen > len(data):
                    raise DNSError("truncated rdata")
                if rtype == 41:  # OPT: class is the UDP size, ttl carries ext-rcode/version
                    m.edns_size = max(rclass, 512)
                    m.edns_version = (ttl >> 16) & 0xFF
                    m.rcode |= ((ttl >> 24) & 0xFF) << 4
                else:
                    rr = RR(name, rtype, ttl, _decode_rdata(data, off, rdlen, rtype), rclass,
                            data[off:off + rdlen])
                    section.append(rr)
                off += rdlen
        return m

    def values(self, rtype=None):
        """Decoded values of the answer records, optionally of one type only."""
        code = None if rtype is None else type_code(rtype)
        return [rr.value for rr in self.answers if code is None or rr.type == code]

    def __repr__(self):
        return "<DNS %s aa=%d tc=%d answers=%r authority=%r>" % (
            self.rcode_name, self.aa, self.tc, self.answers, self.authority)

    def build(self):
        flags = ((0x8000 if self.qr else 0) | ((self.opcode & 0xF) << 11)
                 | (0x400 if self.aa else 0) | (0x200 if self.tc else 0)
                 | (0x100 if self.rd else 0) | (0x80 if self.ra else 0) | (self.rcode & 0xF))
        ar = len(self.additional) + (1 if self.edns_size is not None else 0)
        out = bytearray(struct.pack("!HHHHHH", self.id, flags, len(self.questions),
                                    len(self.answers), len(self.authority), ar))
        offsets = {}

        def put_name(name):
            name = name.rstrip(".")
            while name:
                key = name.lower()
                if key in offsets:
                    out.extend(struct.pack("!H", 0xC000 | offsets[key]))
                    return
                if len(out) < 0x3FFF:
                    offsets[key] = len(out)
                label, _, name = name.partition(".")
                raw = label.encode("ascii")
                out.append(len(raw))
                out.extend(raw)
            out.append(0)

        for name, qtype, qclass in self.questions:
            put_name(name)
            out.extend(struct.pack("!HH", qtype, qclass))
        for rr in self.answers + self.authority + self.additional:
            put_name(rr.name)
            rdata = rr.encode_rdata()
            out.extend(struct.pack("!HHIH", rr.type, rr.rclass, rr.ttl, len(rdata)))
            out.extend(rdata)
        if self.edns_size is not None:
            out.extend(b"\x00" + struct.pack("!HHIH", 41, self.edns_size,
                                             ((self.rcode >> 4) << 24), 0))
        return bytes(out)


def make_query(name, qtype="A", rd=True, edns_size=None, id=None):
    m = Message(id=random.randrange(0, 65536) if id is None else id, rd=rd)
    m.questions.append((name.rstrip("."), type_code(qtype), CLASS_IN))
    m.edns_size = edns_size
    return m


def reply_to(query):
    """An empty response skeleton echoing the query's id, question, RD and EDNS."""
    r = Message(id=query.id, qr=True, opcode=query.opcode, rd=query.rd)
    r.questions = list(query.questions)
    if query.edns_size is not None:
        r.edns_size = 1232
    return r


def build_limited(msg, limit):
    """Encode msg; if it is longer than limit, drop the records and set TC."""
    data = msg.build()
    if len(data) <= limit:
        return data
    msg.answers, msg.authority, msg.additional = [], [], []
    msg.tc = True
    return msg.build()
