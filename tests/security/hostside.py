"""Host-side fixtures for the security suite: things that live outside every
sandbox, that attack scripts try to reach, and that must come out of every
attack unchanged.

- HostMarker: a secret file and a directory on the host.
- Listeners: a TCP and a UDP service on 127.0.0.1 and ::1, and stream and
  datagram abstract unix sockets; they count every connection or datagram.
- HostSleeper: a host process that logs every signal it receives.
- OtherSandbox: a second sandbox holding a secret file, a tagged process,
  SysV IPC objects, a POSIX message queue, a /dev/shm file and an abstract
  socket, none of which the attacked sandbox may reach.
- TemplateGuard: hashes of template files, on the host and as a fresh
  sandbox sees them.
- host_state(): hostname, clock offset, sysctls and other host-wide state.
"""
import hashlib
import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

from conftest import STATE

TOKEN = secrets.token_hex(5)
# the uid range the test daemon hands out (conftest: --uid-pool-start)
UID_POOL_START = 100000000


def files_url(sid, path, endpoint="files", **params):
    q = {"path": path}
    q.update(params)
    return "/v1/sandboxes/%s/%s?%s" % (sid, endpoint, urllib.parse.urlencode(q))


def put_file(client, sid, path, data, mode=None):
    params = {"mode": mode} if mode else {}
    r = client.put(files_url(sid, path, **params), raw=data)
    assert r.status == 201, r


def sh(client, sid, cmd, timeout=60, **kw):
    r = client.exec(sid, cmd, timeout=timeout, **kw)
    assert r["exit_code"] == 0, (cmd, r)
    return r["stdout"]


# --- host marker -------------------------------------------------------------------

class HostMarker:
    """A file and a directory on the host whose content no sandbox may read and
    which no sandbox may change."""

    def __init__(self, name="host"):
        self.dir = "/tmp/fbsec-%s-%s" % (name, TOKEN)
        self.secret = "FBSEC-%s-SECRET-%s" % (name.upper(), TOKEN)
        self.file = os.path.join(self.dir, "secret.txt")
        os.makedirs(os.path.join(self.dir, "keep"), exist_ok=True)
        os.chmod(self.dir, 0o755)
        with open(self.file, "w") as f:
            f.write(self.secret + "\n")
        with open(os.path.join(self.dir, "keep", "keep-%s.txt" % TOKEN), "w") as f:
            f.write(self.secret + "\n")
        self.baseline = self._state()

    def _state(self):
        out = {}
        for root, dirs, files in os.walk(self.dir):
            for name in dirs + files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                content = None
                if os.path.isfile(p) and not os.path.islink(p):
                    with open(p, "rb") as f:
                        content = f.read()
                out[os.path.relpath(p, self.dir)] = (st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size,
                                                     st.st_mtime_ns, content)
        st = os.lstat(self.dir)
        out["."] = (st.st_mode, st.st_uid, st.st_ino, st.st_mtime_ns)
        return out

    def names(self):
        """Names that only exist on the host (to spot them in listings)."""
        return ["secret.txt", "keep-%s.txt" % TOKEN]

    def problems(self):
        now = self._state()
        if now == self.baseline:
            return []
        diff = sorted(set(now) ^ set(self.baseline)) + sorted(
            k for k in set(now) & set(self.baseline) if now[k] != self.baseline[k])
        return ["host marker dir %s changed: %s" % (self.dir, diff)]

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


# --- listeners -----------------------------------------------------------------------

class Listeners:
    """TCP and UDP services on the host's loopback (IPv4 and IPv6) and abstract
    unix sockets; every connection or datagram that arrives is recorded."""

    def __init__(self):
        self.hits = []
        self.lock = threading.Lock()
        self.stop = False
        self.socks = []
        tcp4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp4.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp4.bind(("127.0.0.1", 0))
        self.tcp_port = tcp4.getsockname()[1]
        self._listen(tcp4, "tcp 127.0.0.1")
        try:
            tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            tcp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            tcp6.bind(("::1", self.tcp_port))
            self._listen(tcp6, "tcp ::1")
        except OSError:
            pass
        udp4 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp4.bind(("127.0.0.1", 0))
        self.udp_port = udp4.getsockname()[1]
        self.socks.append((udp4, "udp 127.0.0.1", "dgram"))
        try:
            udp6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            udp6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            udp6.bind(("::1", self.udp_port))
            self.socks.append((udp6, "udp ::1", "dgram"))
        except OSError:
            pass
        self.abstract = "fbsec-host-%s" % TOKEN
        ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        ab.bind("\0" + self.abstract)
        self._listen(ab, "abstract stream")
        abs_sp = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        abs_sp.bind("\0" + self.abstract + "\0")
        self._listen(abs_sp, "abstract seqpacket")
        abd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        abd.bind("\0" + self.abstract + "-dgram")
        self.socks.append((abd, "abstract dgram", "dgram"))
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _listen(self, s, name):
        s.listen(16)
        self.socks.append((s, name, "listen"))

    def _serve(self):
        while not self.stop:
            r, _, _ = select.select([s for s, _, _ in self.socks], [], [], 0.2)
            for s in r:
                name, kind = [(n, k) for x, n, k in self.socks if x is s][0]
                try:
                    if kind == "listen":
                        c, peer = s.accept()
                        with self.lock:
                            self.hits.append("%s connection from %r" % (name, peer))
                        try:
                            c.sendall(b"HOST-SERVICE-%s\n" % TOKEN.encode())
                        except OSError:
                            pass
                        c.close()
                    else:
                        data, peer = s.recvfrom(4096)
                        with self.lock:
                            self.hits.append("%s datagram %r from %r" % (name, data[:40], peer))
                        if peer:
                            s.sendto(b"PONG", peer)
                except OSError:
                    pass

    def count(self):
        with self.lock:
            return len(self.hits)

    def since(self, n):
        with self.lock:
            return list(self.hits[n:])

    def self_test(self):
        """The listeners do see a host client (so zero really means nothing came)."""
        n = self.count()
        socket.create_connection(("127.0.0.1", self.tcp_port), timeout=5).close()
        deadline = time.time() + 5
        while self.count() == n and time.time() < deadline:
            time.sleep(0.01)
        assert self.count() == n + 1, "host listener does not count connections"
        with self.lock:
            self.hits.pop()

    def close(self):
        self.stop = True
        self.thread.join(2)
        for s, _, _ in self.socks:
            s.close()


def host_addresses():
    """The host's own non-loopback addresses (IPv4 from fib_trie, IPv6 from if_inet6)."""
    out = []
    try:
        prev = None
        with open("/proc/net/fib_trie") as f:
            for line in f:
                line = line.strip()
                if line.startswith("|--"):
                    prev = line.split()[1]
                elif "/32 host LOCAL" in line and prev and not prev.startswith("127."):
                    out.append(prev)
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                parts = line.split()
                if parts[5] == "lo":
                    continue
                h = parts[0]
                out.append(":".join(h[i:i + 4] for i in range(0, 32, 4)))
    except OSError:
        pass
    return list(dict.fromkeys(out))


# --- host sleeper ----------------------------------------------------------------------

SLEEPER = r"""
import os, signal, sys, time
log = sys.argv[1]
def handler(sig, frame):
    with open(log, "a") as f:
        f.write("%d\n" % sig)
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGURG, signal.SIGHUP, signal.SIGTERM,
          signal.SIGINT, signal.SIGCONT, signal.SIGALRM, signal.SIGPIPE, signal.SIGQUIT):
    signal.signal(s, handler)
open(log + ".ready", "w").close()
while True:
    time.sleep(3600)
"""


class HostSleeper:
    """A host process that records any signal sent to it."""

    def __init__(self):
        self.log = "/tmp/fbsec-sleeper-%s.log" % TOKEN
        # no inherited stdout/stderr: a leftover sleeper must never hold a pipe open
        self.proc = subprocess.Popen([sys.executable, "-c", SLEEPER, self.log], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 10
        while not os.path.exists(self.log + ".ready"):
            assert time.time() < deadline, "host sleeper did not start"
            time.sleep(0.01)

    @property
    def pid(self):
        return self.proc.pid

    def problems(self):
        out = []
        if self.proc.poll() is not None:
            out.append("host sleeper (pid %d) died: %s" % (self.pid, self.proc.returncode))
        if os.path.exists(self.log):
            with open(self.log) as f:
                sigs = f.read().split()
            if sigs:
                out.append("host sleeper received signals %s" % sigs)
        return out

    def close(self):
        self.proc.kill()
        self.proc.wait()
        for p in (self.log, self.log + ".ready"):
            if os.path.exists(p):
                os.unlink(p)


# --- the other sandbox ---------------------------------------------------------------------

HOLDER = r"""
import ctypes, os, select, signal, socket, sys, time
tag, key, mq, abstract, shmfile, secret = sys.argv[1:7]
key = int(key)
libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT = 0o1000
log = open("/root/holder.log", "a", buffering=1)
def handler(sig, frame):
    log.write("signal %d\n" % sig)
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGURG, signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
    signal.signal(s, handler)
shmid = libc.shmget(key, 4096, IPC_CREAT | 0o600)
libc.shmat.restype = ctypes.c_void_p
addr = libc.shmat(shmid, None, 0)
ctypes.memmove(addr, secret.encode(), len(secret))
assert libc.msgget(key, IPC_CREAT | 0o600) >= 0
assert libc.semget(key, 1, IPC_CREAT | 0o600) >= 0
libc.mq_open.restype = ctypes.c_int
assert libc.mq_open(mq.encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0, ctypes.get_errno()
with open(shmfile, "w") as f:
    f.write(secret)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("\0" + abstract)
srv.listen(8)
with open("/root/holder.pid", "w") as f:
    f.write(str(os.getpid()))
open("/root/holder.ready", "w").close()
while True:
    try:
        r, _, _ = select.select([srv], [], [], 60)
    except InterruptedError:
        continue
    if r:
        c, _ = srv.accept()
        log.write("connection\n")
        c.close()
"""

HOLDER_CHECK = r"""
import ctypes, os, sys
key, secret, shmfile = int(sys.argv[1]), sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
shmid = libc.shmget(key, 0, 0)
assert shmid >= 0, "shm segment gone"
libc.shmat.restype = ctypes.c_void_p
addr = libc.shmat(shmid, None, 0o10000)
assert ctypes.string_at(addr, len(secret)).decode() == secret, "shm content changed"
assert libc.msgget(key, 0) >= 0, "msg queue gone"
assert libc.semget(key, 0, 0) >= 0, "semaphores gone"
assert open(shmfile).read() == secret, "/dev/shm file changed"
pid = int(open("/root/holder.pid").read())
os.kill(pid, 0)
log = open("/root/holder.log").read()
assert log == "", "holder saw: %r" % log
print("ok")
"""


class OtherSandbox:
    """A second sandbox with things the attacked sandbox must not reach."""

    def __init__(self, client, name="other"):
        self.client = client
        self.sb = client.create(labels={"fbsec": name})
        self.id = self.sb["id"]
        tok = "%s-%s" % (name, TOKEN)
        self.tag = "fbsec-%s" % tok
        self.secret = "FBSEC-SECRET-%s" % tok
        self.marker = "/root/%s/secret.txt" % tok
        self.ipc_key = 0x5EC00000 | int(hashlib.sha256(tok.encode()).hexdigest()[:5], 16)
        self.mq = "/fbsec-mq-%s" % tok
        self.abstract = "fbsec-%s" % tok
        self.shm_file = "/dev/shm/fbsec-%s" % tok
        put_file(client, self.id, self.marker, self.secret.encode())
        put_file(client, self.id, "/root/holder.py", HOLDER.encode())
        put_file(client, self.id, "/root/holder-check.py", HOLDER_CHECK.encode())
        sh(client, self.id, "setsid python3 /root/holder.py %s %d %s %s %s %s </dev/null >/root/holder.out 2>&1 &"
           % (self.tag, self.ipc_key, self.mq, self.abstract, self.shm_file, self.secret))
        deadline = time.time() + 20
        while client.get(files_url(self.id, "/root/holder.ready")).status != 200:
            if time.time() > deadline:
                out = client.get(files_url(self.id, "/root/holder.out")).body
                raise RuntimeError("holder in the other sandbox did not start: %r" % out)
            time.sleep(0.05)
        self.host_pids = self._host_pids()
        assert self.host_pids, "the other sandbox's holder is not visible on the host"

    def _host_pids(self):
        out = []
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if self.tag.encode() in f.read():
                        out.append(int(p))
            except OSError:
                pass
        return out

    def env(self):
        return {"FB_OTHER_ID": self.id, "FB_OTHER_MARKER": self.marker, "FB_OTHER_SECRET": self.secret,
                "FB_OTHER_TAG": self.tag, "FB_OTHER_HOST_PIDS": ",".join(map(str, self.host_pids)),
                "FB_OTHER_IPC_KEY": str(self.ipc_key), "FB_OTHER_MQ": self.mq, "FB_OTHER_ABSTRACT": self.abstract,
                "FB_OTHER_SHM_FILE": self.shm_file}

    def problems(self):
        out = []
        r = self.client.get(files_url(self.id, self.marker))
        if r.status != 200 or r.body != self.secret.encode():
            out.append("other sandbox's marker changed: %r" % r)
        r = self.client.exec(self.id, ["python3", "/root/holder-check.py", str(self.ipc_key), self.secret,
                                       self.shm_file], timeout=30)
        if r["exit_code"] != 0:
            out.append("other sandbox's holder check failed: %s %s" % (r["stdout"], r["stderr"][-400:]))
        if sorted(self._host_pids()) != sorted(self.host_pids):
            out.append("other sandbox's holder pids changed: %s -> %s" % (self.host_pids, self._host_pids()))
        return out

    def close(self):
        self.client.delete("/v1/sandboxes/" + self.id)


# --- template ------------------------------------------------------------------------------

TEMPLATE_FILES = ["/etc/debian_version", "/usr/lib/os-release", "/etc/passwd", "/usr/bin/env", "/usr/bin/id",
                  "/usr/bin/perl", "/usr/bin/python3.11", "/bin/sh"]

HASHER = r"""
import hashlib, json, os, sys
out = {}
for p in sys.argv[1:]:
    try:
        st = os.stat(p)
        with open(p, "rb") as f:
            out[p] = [oct(st.st_mode), hashlib.sha256(f.read()).hexdigest()]
    except OSError as e:
        out[p] = str(e)
print(json.dumps(out, sort_keys=True))
"""


class TemplateGuard:
    """The default template's files, on the host and as a fresh sandbox sees them."""

    def __init__(self, client):
        self.client = client
        self.rootfs = os.path.join(STATE, "templates", "default", "rootfs")
        self.host_baseline = self.host_view()
        self.sandbox_baseline = self.sandbox_view()

    def host_view(self):
        out = {}
        for p in TEMPLATE_FILES:
            full = self.rootfs + p
            try:
                st = os.lstat(full)
                if os.path.islink(full):
                    out[p] = ["link", os.readlink(full)]
                    continue
                with open(full, "rb") as f:
                    out[p] = [oct(st.st_mode), st.st_uid, hashlib.sha256(f.read()).hexdigest()]
            except OSError as e:
                out[p] = str(e)
        return out

    def sandbox_view(self):
        sb = self.client.create(labels={"fbsec": "template-check"})
        try:
            r = self.client.exec(sb["id"], ["python3", "-c", HASHER] + TEMPLATE_FILES, timeout=30)
            assert r["exit_code"] == 0, r
            return json.loads(r["stdout"])
        finally:
            self.client.delete("/v1/sandboxes/" + sb["id"])

    def problems(self, fresh_sandbox=True):
        out = []
        now = self.host_view()
        if now != self.host_baseline:
            out.append("template files changed on the host: %s" % sorted(
                k for k in now if now[k] != self.host_baseline.get(k)))
        if fresh_sandbox:
            now = self.sandbox_view()
            if now != self.sandbox_baseline:
                out.append("a fresh sandbox sees changed template files: %s" % sorted(
                    k for k in now if now[k] != self.sandbox_baseline.get(k)))
        return out


# --- host-wide state --------------------------------------------------------------------------

SYSCTLS = ["kernel/hostname", "kernel/domainname", "kernel/core_pattern", "kernel/core_uses_pid", "kernel/printk",
           "kernel/kptr_restrict", "kernel/dmesg_restrict", "kernel/perf_event_paranoid",
           "kernel/unprivileged_bpf_disabled", "kernel/randomize_va_space", "kernel/panic", "kernel/panic_on_oops",
           "kernel/modprobe", "kernel/sysrq", "kernel/ctrl-alt-del", "kernel/poweroff_cmd", "kernel/io_uring_disabled",
           "fs/suid_dumpable", "fs/protected_symlinks", "net/ipv4/ip_forward", "vm/overcommit_memory",
           "vm/unprivileged_userfaultfd", "user/max_user_namespaces", "dev/tty/legacy_tiocsti"]
# files an escaped payload in one of the scripts would leave on the host
PAYLOAD_TRACES = ["/fbx-release-agent-ran", "/tmp/fbx-interp-ran", "/tmp/fbx-release-agent.sh", "/tmp/fbx-interp",
                  "/tmp/fbx-mnt", "/tmp/fbx-jail", "/root/fbx-acct", "/root/fbx-swapfile"]


def clock_offset():
    return time.time() - time.monotonic()


def host_state():
    st = {"hostname": socket.gethostname()}
    for k in SYSCTLS:
        try:
            with open("/proc/sys/" + k) as f:
                st[k] = f.read()
        except OSError:
            pass
    for k in ("/proc/swaps", "/proc/sys/fs/binfmt_misc"):
        try:
            st[k] = sorted(os.listdir(k)) if os.path.isdir(k) else open(k).read()
        except OSError:
            pass
    try:
        with open("/proc/key-users") as f:
            st["sandbox key users"] = [line for line in f if int(line.split(":")[0]) >= UID_POOL_START]
    except OSError:
        pass
    with open("/proc/self/mountinfo") as f:
        st["fbx mounts"] = [line for line in f if "fbx" in line]
    st["payload traces"] = [p for p in PAYLOAD_TRACES if os.path.lexists(p)]
    try:
        st["/sys/kernel/uevent_helper"] = open("/sys/kernel/uevent_helper").read()
    except OSError:
        pass
    return st


def state_problems(before, after):
    out = []
    for k in sorted(set(before) | set(after)):
        if before.get(k) != after.get(k):
            out.append("host %s changed: %r -> %r" % (k, before.get(k), after.get(k)))
    return out
