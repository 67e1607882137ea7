"""Code shared by bench/fork and bench/memory-checkpoint: a bench forkboxd of its own,
the Python process that holds ~100 MB of live heap, the checks made on it, and the
podman (runc + CRIU) container that runs the same process.

The heap process (HEAP_PY) fills a bytearray with os.urandom data (incompressible,
every page written, so resident), writes /root/heap.pid and /root/ready, then sleeps.
It answers two signals by writing a file with rename (never seen half-written):

  SIGUSR1  /root/pong: "PID LENGTH SAMPLE", SAMPLE = sha256 over 25 slices of 4 KiB
           spread across the heap (cheap: proves the process runs and its heap is there)
  SIGUSR2  /root/full: sha256 of the whole heap (compared once per run with the parent's)

Only the Python standard library is used.
"""

import os
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from benchlib import ForkboxClient, IterationError, ms, now_ns, run_argv, summarize  # noqa: E402

HEAP_MB = 100
HEAP_PY = f"""
import hashlib, os, signal, time
N = {HEAP_MB} << 20
heap = bytearray(os.urandom(N))
def sample():
    h = hashlib.sha256()
    for off in range(0, N, N // 25):
        h.update(heap[off:off + 4096])
    return h.hexdigest()
def put(name, text):
    with open(name + ".tmp", "w") as f:
        f.write(text)
    os.rename(name + ".tmp", name)
def pong(*_):
    put("/root/pong", "%d %d %s\\n" % (os.getpid(), len(heap), sample()))
def full(*_):
    put("/root/full", hashlib.sha256(heap).hexdigest() + "\\n")
signal.signal(signal.SIGUSR1, pong)
signal.signal(signal.SIGUSR2, full)
put("/root/heap.pid", str(os.getpid()))
put("/root/ready", sample() + "\\n")
while True:
    time.sleep(3600)
"""
HEAP_CMD = ["python3", "-c", HEAP_PY]

# Waits (in the sandbox/container) until the heap process has built its heap.
WAIT_READY = ("n=0; while [ ! -s /root/ready ]; do n=$((n+1)); [ $n -gt 12000 ] && exit 4; "
              "sleep 0.005; done; cat /root/ready")


def signal_and_read(sig, path):
    """sh: signal the heap process, wait for the file it writes, print it."""
    return (f"rm -f {path}; kill -{sig} \"$(cat /root/heap.pid)\" || exit 3; n=0; "
            f"while [ ! -s {path} ]; do n=$((n+1)); [ $n -gt 6000 ] && exit 4; sleep 0.002; done; "
            f"cat {path}")


PING = signal_and_read("USR1", "/root/pong")
FULL = signal_and_read("USR2", "/root/full")


def check_pong(who, out, expect_sample):
    parts = out.split()
    if len(parts) != 3 or parts[1] != str(HEAP_MB << 20) or parts[2] != expect_sample:
        raise IterationError(f"{who}: heap process answered {out!r}, expected sample {expect_sample}")


class Daemon:
    """A forkboxd of the bench's own: own state dir, run dir, socket and uid range, --debug."""

    def __init__(self, name, build, work, template_src, uid_start, slots, extra=(), need_criu=True):
        self.name = name
        self.need_criu = need_criu
        self.state = os.path.join(work, name, "state")
        self.log_path = os.path.join(work, name, "forkboxd.log")
        self.run = f"/run/fbb-{name}"
        self.sock = self.run + "/fb.sock"
        self.binary = os.path.join(build, "src/daemon/forkboxd")
        self.template_src = template_src
        self.uid_start = uid_start
        self.slots = slots
        self.extra = list(extra)
        self.proc = None
        self.client = None
        self.sandboxes = set()
        self.info = None

    def start(self):
        tdir = os.path.join(self.state, "templates")
        os.makedirs(tdir, exist_ok=True)
        if not os.path.isdir(os.path.join(tdir, "default")):
            subprocess.run(["cp", "-a", self.template_src, os.path.join(tdir, "default")], check=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--state-dir", self.state, "--run-dir", self.run, "--socket", self.sock,
             "--listen", "none", "--no-default-template", "--warm-pool", "0", "--debug",
             "--uid-pool-start", str(self.uid_start), "--uid-pool-slots", str(self.slots)] + self.extra,
            stdout=log, stderr=log)
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(self.state, "api-key")) or not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit(f"{self.name}: forkboxd did not start (see {self.log_path})")
            time.sleep(0.05)
        key = open(os.path.join(self.state, "api-key")).read().strip()
        self.client = ForkboxClient(self.sock, key, 300)
        while True:
            status, info, _ = self.client.request("GET", "/v1/info")
            if (status == 200 and info["templates"]["default"] == "ready"
                    and (not self.need_criu or info.get("criu", {}).get("status") not in ("checking", None))):
                break
            if time.time() > deadline:
                raise SystemExit(f"{self.name}: not ready: {info}")
            time.sleep(0.1)
        if self.need_criu and not info["criu"].get("available"):
            raise SystemExit(f"{self.name}: CRIU unavailable: {info['criu']}")
        self.info = info

    def call(self, method, path, body=None, want=(200,)):
        status, parsed, raw = self.client.request(method, path, body)
        if status not in want:
            raise IterationError(f"{self.name}: {method} {path}: {status} {raw[:300]!r}")
        return parsed

    def exec(self, sid, script, timeout=120):
        r = self.call("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["sh", "-c", script], "timeout": timeout})
        if r["exit_code"] != 0:
            raise IterationError(f"{self.name}: exec in {sid}: exit {r['exit_code']}: {r.get('stderr', '')[:200]!r}")
        return r["stdout"]

    def create(self, resources=None):
        body = {"template": "default"}
        if resources:
            body["resources"] = resources
        sid = self.call("POST", "/v1/sandboxes", body, want=(201,))["id"]
        self.sandboxes.add(sid)
        return sid

    def start_heap(self, sid):
        self.call("POST", f"/v1/sandboxes/{sid}/processes", {"cmd": HEAP_CMD}, want=(200, 201))

    def delete(self, sid):
        self.call("DELETE", f"/v1/sandboxes/{sid}", want=(204,))
        self.sandboxes.discard(sid)

    def stop(self):
        for sid in list(self.sandboxes):
            try:
                self.delete(sid)
            except IterationError as e:
                print(f"warning: {e}", file=sys.stderr)
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        mounts = [line.split()[4] for line in open("/proc/self/mountinfo")]
        for m in sorted((m for m in mounts if m.startswith(self.state + "/")), key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)

    def log_breakdown(self):
        """The --debug log's CRIU and fork timings, ms: {what: summary}."""
        pats = {"criu dump": re.compile(r"criu dump took (\d+) us"),
                "criu restore": re.compile(r"criu restore took (\d+) us"),
                "fork capture": re.compile(r"forked (\d+) times \(capture (\d+) us, total (\d+) us\)")}
        found = {}
        try:
            text = open(self.log_path, encoding="utf-8", errors="replace").read()
        except OSError:
            return {}
        for line in text.splitlines():
            for what, pat in pats.items():
                m = pat.search(line)
                if not m:
                    continue
                if what == "fork capture":
                    n = int(m.group(1))
                    found.setdefault(f"fork x{n} capture", []).append(int(m.group(2)) / 1000)
                    found.setdefault(f"fork x{n} total (daemon)", []).append(int(m.group(3)) / 1000)
                else:
                    found.setdefault(what, []).append(int(m.group(1)) / 1000)
        return {k: summarize(v) for k, v in found.items()}


class Podman:
    """The podman peer: rootful, runc, --network none, the image setup-peers.sh imports."""

    def __init__(self, image, timeout=300):
        self.image = image
        self.timeout = timeout
        self.podman = "podman"
        self.containers = set()

    def run(self, *args, timeout=None):
        rc, out, err = run_argv([self.podman] + list(args), timeout or self.timeout)
        if rc != 0:
            raise IterationError(f"podman {args[0]} {args[1] if len(args) > 1 else ''}: exit {rc}: "
                                 f"{err.decode(errors='replace').strip()[-300:]}")
        return out.decode(errors="replace")

    def prepare(self):
        rc, out, _ = run_argv([self.podman, "--version"], 30)
        if rc != 0:
            raise SystemExit("podman is not installed (run bench/setup-peers.sh)")
        self.version = out.decode().strip()
        rc, out, _ = run_argv(["criu", "--version"], 30)
        if rc != 0:
            raise SystemExit("no criu on PATH for runc (run bench/setup-peers.sh)")
        self.criu = out.decode().strip().splitlines()[0]
        rc, out, _ = run_argv([self.podman, "image", "inspect", "--format",
                               '{{ index .Labels "forkbox.bench.rootfs" }}', self.image], 60)
        if rc != 0:
            raise SystemExit(f"podman image {self.image} is missing (run bench/setup-peers.sh)")
        self.image_rootfs = out.decode().strip() or None

    def check_rootfs(self, template):
        want = os.path.realpath(os.path.join(template, "rootfs"))
        if self.image_rootfs != want:
            print(f"warning: podman image {self.image} was imported from {self.image_rootfs}, not {want} "
                  f"(bench/setup-peers.sh --rootfs {want})", file=sys.stderr)

    def start_heap(self, name):
        self.remove(name)
        self.containers.add(name)
        self.run("run", "-d", "--name", name, "--runtime", "runc", "--network", "none", self.image, *HEAP_CMD)

    def exec(self, name, script):
        return self.run("exec", name, "sh", "-c", script)

    def remove(self, name):
        run_argv([self.podman, "rm", "--force", "--ignore", "--time", "0", name], 120)
        self.containers.discard(name)

    def stop(self):
        for name in list(self.containers):
            self.remove(name)


def timed(fn, *args):
    t0 = now_ns()
    r = fn(*args)
    return ms(now_ns() - t0), r
