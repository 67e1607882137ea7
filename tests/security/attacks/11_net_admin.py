"""Reconfigure the network with CAP_NET_ADMIN actions: interface flags and MTU ioctls, rtnetlink link/address creation."""

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import fcntl  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

SIOCGIFFLAGS, SIOCSIFFLAGS, SIOCGIFMTU, SIOCSIFMTU = 0x8913, 0x8914, 0x8921, 0x8922
RTM_NEWLINK, RTM_DELLINK, RTM_NEWADDR = 16, 17, 20
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 1, 4, 0x200, 0x400
IFLA_IFNAME, IFLA_LINKINFO, IFLA_INFO_KIND = 3, 18, 1
IFA_LOCAL, IFA_ADDRESS = 2, 1


def rta(kind, payload):
    n = 4 + len(payload)
    return struct.pack("HH", n, kind) + payload + b"\0" * ((4 - n % 4) % 4)


def nl_request(s, msgtype, body, seq):
    hdr = struct.pack("IHHII", 16 + len(body), msgtype, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, seq, 0)
    s.send(hdr + body)
    data = s.recv(65536)
    # the ack is an NLMSG_ERROR (type 2) carrying -errno (0 = success)
    _, t, _, _, _ = struct.unpack("IHHII", data[:16])
    if t == 2:
        return -struct.unpack("i", data[16:20])[0]
    return 0


def main():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = struct.pack("16sH22x", b"lo", 0)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
    try:
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags))
        ESCAPES.append("SIOCSIFFLAGS on lo accepted")
    except OSError as e:
        NOTES.append("SIOCSIFFLAGS: %s" % en(e.errno))
    mtu = struct.unpack("16si20x", fcntl.ioctl(s, SIOCGIFMTU, struct.pack("16si20x", b"lo", 0)))[1]
    try:
        fcntl.ioctl(s, SIOCSIFMTU, struct.pack("16si20x", b"lo", mtu))
        ESCAPES.append("SIOCSIFMTU on lo accepted")
    except OSError as e:
        NOTES.append("SIOCSIFMTU: %s" % en(e.errno))
    s.close()
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    nl.settimeout(2)
    nl.bind((0, 0))
    linkinfo = rta(IFLA_INFO_KIND, b"dummy\0")
    body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0) + rta(IFLA_IFNAME, b"fbx0\0") + rta(IFLA_LINKINFO, linkinfo)
    err = nl_request(nl, RTM_NEWLINK, body, 1)
    if err == 0:
        ESCAPES.append("rtnetlink created a dummy interface fbx0")
        nl_request(nl, RTM_DELLINK, struct.pack("BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0) + rta(IFLA_IFNAME, b"fbx0\0"), 2)
    else:
        NOTES.append("RTM_NEWLINK dummy: %s" % en(err))
    lo = socket.if_nametoindex("lo")
    body = struct.pack("BBBBI", socket.AF_INET, 32, 0, 0, lo) + rta(IFA_LOCAL, socket.inet_aton("10.254.253.1")) + \
        rta(IFA_ADDRESS, socket.inet_aton("10.254.253.1"))
    err = nl_request(nl, RTM_NEWADDR, body, 3)
    if err == 0:
        ESCAPES.append("rtnetlink added 10.254.253.1 to lo")
    else:
        NOTES.append("RTM_NEWADDR: %s" % en(err))


if __name__ == "__main__":
    finish(main)
