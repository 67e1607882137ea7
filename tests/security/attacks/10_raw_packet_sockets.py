"""Open raw and packet sockets (AF_PACKET raw/dgram, SOCK_PACKET, SOCK_RAW for IPv4/IPv6) to sniff or forge traffic."""

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import socket  # noqa: E402

AF_PACKET = 17
ETH_P_ALL = 0x0003


def main():
    tries = [
        ("AF_PACKET/SOCK_RAW", AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)),
        ("AF_PACKET/SOCK_DGRAM", AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL)),
        ("AF_INET/SOCK_PACKET", socket.AF_INET, 10, socket.htons(ETH_P_ALL)),
        ("AF_INET/SOCK_RAW/IPPROTO_RAW", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
        ("AF_INET/SOCK_RAW/ICMP", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
        ("AF_INET/SOCK_RAW/TCP", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
        ("AF_INET6/SOCK_RAW/ICMPV6", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
        ("AF_INET6/SOCK_RAW/IPPROTO_RAW", socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW),
    ]
    for name, fam, typ, proto in tries:
        try:
            s = socket.socket(fam, typ, proto)
        except OSError as e:
            NOTES.append("%s: %s" % (name, en(e.errno)))
            continue
        detail = ""
        if fam == AF_PACKET:
            try:
                s.settimeout(0.2)
                s.recv(2048)
                detail = " and received a frame"
            except OSError:
                pass
        ESCAPES.append("%s socket created%s" % (name, detail))
        s.close()


if __name__ == "__main__":
    finish(main)
