"""netlab listener for hosts that a sandbox must never reach: accepts TCP on
every --tcp-ports port and datagrams on every --udp-ports port, and records
each one. A TCP client gets a one-line banner; whatever it sends in the first
two seconds is recorded too.

Records: {"event": "connect", ...} on accept, {"event": "data", ...} with the
first bytes received, {"event": "datagram", ...} for UDP.
"""
import os
import socket
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import EventLog, base_args, mark_ready, serve_until_signal, watch_owner  # noqa: E402


def ports(text):
    return [int(p) for p in text.split(",") if p.strip()] if text else []


def serve_conn(conn, peer, log, name):
    local = conn.getsockname()
    log.write(event="connect", client=peer[0], port=peer[1], local=local[0],
              local_port=local[1], transport="tcp")
    try:
        conn.settimeout(2)
        conn.sendall(("netlab %s port %d\n" % (name, local[1])).encode())
        data = b""
        try:
            while len(data) < 4096:
                chunk = conn.recv(4096 - len(data))
                if not chunk:
                    break
                data += chunk
        except socket.timeout:
            pass
        if data:
            log.write(event="data", client=peer[0], port=peer[1], local_port=local[1],
                      length=len(data), head=data[:200].decode("latin-1"))
    except OSError:
        pass
    finally:
        conn.close()


def tcp_loop(sock, log, name):
    while True:
        conn, peer = sock.accept()
        threading.Thread(target=serve_conn, args=(conn, peer, log, name), daemon=True).start()


def udp_loop(sock, log):
    local = sock.getsockname()
    while True:
        data, peer = sock.recvfrom(65535)
        log.write(event="datagram", client=peer[0], port=peer[1], local=local[0],
                  local_port=local[1], transport="udp", length=len(data),
                  head=data[:200].decode("latin-1"))


def main():
    p = base_args(__doc__.splitlines()[0])
    p.add_argument("--name", required=True)
    p.add_argument("--bind", required=True)
    p.add_argument("--tcp-ports", default="22,80,443")
    p.add_argument("--udp-ports", default="")
    args = p.parse_args()
    log = EventLog(args.log, args.service)
    for port in ports(args.tcp_ports):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((args.bind, port))
        s.listen(64)
        threading.Thread(target=tcp_loop, args=(s, log, args.name), daemon=True).start()
    for port in ports(args.udp_ports):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((args.bind, port))
        threading.Thread(target=udp_loop, args=(s, log), daemon=True).start()
    watch_owner(args.owner_pid)
    mark_ready(args.ready)
    serve_until_signal()


if __name__ == "__main__":
    main()
