"""Code shared by the benchmarks in bench/ (ttfc, exec): timing, statistics,
the forkbox HTTP client over the daemon's unix socket, the podman peer's
checks and clean-up, the host description and console output.

Only the Python standard library is used.
"""

import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

DEFAULT_SOCKET = "/run/forkbox/forkbox.sock"
DEFAULT_STATE_DIR = "/var/lib/forkbox"
DEFAULT_IMAGE = "localhost/forkbox-bench:latest"
STOP = threading.Event()  # set on Ctrl-C: clients finish their current iteration and stop

class IterationError(Exception):
    """One iteration failed; the message says where and why."""


class Unavailable(Exception):
    """A system cannot be benchmarked on this host; it is skipped."""


def now_ns():
    return time.perf_counter_ns()


def ms(ns):
    return ns / 1e6


# --------------------------------------------------------------------------
# subprocess helper shared by the peers


def run_argv(argv, timeout):
    """Runs argv in its own session; on timeout kills the whole group.

    Returns (returncode, stdout bytes, stderr bytes). Raises IterationError on
    timeout or when the program cannot be started.
    """
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        raise IterationError(f"cannot start {argv[0]}: {e}") from e
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        raise IterationError(f"{os.path.basename(argv[0])} timed out after {timeout:g} s")
    return proc.returncode, out, err


# --------------------------------------------------------------------------
# forkbox


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over an AF_UNIX stream socket."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        # With a timeout set the socket is non-blocking, and connect() on a
        # unix socket whose listen backlog is full fails at once with EAGAIN
        # instead of waiting; 16 clients connecting together can hit that.
        deadline = time.monotonic() + self.timeout
        delay = 0.001
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.unix_path)
            except BlockingIOError:
                sock.close()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            except OSError:
                sock.close()
                raise
            self.sock = sock
            return


class ForkboxClient:
    """One client thread's view of the daemon: one keep-alive connection."""

    def __init__(self, sock_path, key, timeout):
        self.conn = UnixHTTPConnection(sock_path, timeout)
        self.key = key
        self.reconnects = 0

    def close(self):
        self.conn.close()

    def connect(self):
        if self.conn.sock is None:
            self.conn.connect()

    def request(self, method, path, body=None, auth=True):
        """Returns (status, parsed JSON or None, raw bytes)."""
        headers = {}
        if auth:
            headers["Authorization"] = "Bearer " + self.key
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            reused = self.conn.sock is not None
            try:
                self.conn.request(method, path, body=data, headers=headers)
                resp = self.conn.getresponse()
                raw = resp.read()
                status = resp.status
                break
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected) as e:
                # The server may close an idle keep-alive connection at any
                # time; a request that failed on a reused connection never
                # reached it, so one retry on a fresh connection is safe.
                self.conn.close()
                if attempt == 0 and reused:
                    self.reconnects += 1
                    continue
                raise IterationError(f"{method} {path}: connection lost: {e}") from e
            except socket.timeout as e:
                self.conn.close()
                raise IterationError(f"{method} {path}: timed out after {self.conn.timeout:g} s") from e
            except (OSError, http.client.HTTPException) as e:
                self.conn.close()
                raise IterationError(f"{method} {path}: {type(e).__name__}: {e}") from e
        parsed = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        return status, parsed, raw


def api_error(what, status, parsed, raw):
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        return IterationError(f"{what}: HTTP {status} {err.get('code')}: {err.get('message')}")
    return IterationError(f"{what}: HTTP {status}: {raw[:200]!r}")


def load_api_key(key_file):
    """The API key: $FORKBOX_API_KEY, else the file. Returns (key, where from)."""
    env = os.environ.get("FORKBOX_API_KEY")
    if env:
        return env.strip(), "FORKBOX_API_KEY"
    try:
        with open(key_file, encoding="utf-8") as f:
            key = f.read().strip()
    except OSError as e:
        raise Unavailable(f"no API key: FORKBOX_API_KEY is unset and {key_file} is unreadable ({e.strerror})")
    if not key:
        raise Unavailable(f"API key file {key_file} is empty")
    return key, key_file


def forkbox_probe(sock_path, key_file, timeout):
    """Checks the daemon answers and takes the key. Returns (key, key source, /v1/info)."""
    if not os.path.exists(sock_path):
        raise Unavailable(f"daemon socket {sock_path} does not exist (is forkboxd running?)")
    probe = ForkboxClient(sock_path, "", min(timeout, 10))
    try:
        try:
            status, parsed, raw = probe.request("GET", "/healthz", auth=False)
        except IterationError as e:
            raise Unavailable(f"GET /healthz on {sock_path} failed: {e}")
        if status != 200:
            raise Unavailable(f"GET /healthz answered HTTP {status}: {raw[:120]!r}")
        key, source = load_api_key(key_file)
        probe.key = key
        try:
            status, parsed, raw = probe.request("GET", "/v1/info")
        except IterationError as e:
            raise Unavailable(f"GET /v1/info failed: {e}")
        if status == 401:
            raise Unavailable(f"the daemon refused the API key from {source} (401)")
        if status != 200 or not isinstance(parsed, dict):
            raise api_error("GET /v1/info", status, parsed, raw)
        return key, source, parsed
    finally:
        probe.close()


# --------------------------------------------------------------------------
# podman (rootful, runc, the image bench/setup-peers.sh imports)


class PodmanPeer:
    """Checks and clean-up shared by the benchmarks' podman systems."""

    name = "podman"

    def __init__(self, args):
        self.image = args.image
        self.timeout = args.timeout
        self.podman = shutil.which("podman")
        self.version = None
        self.image_rootfs = None
        self.leaked = []

    def prepare(self):
        if self.podman is None:
            raise Unavailable("podman is not installed (run bench/setup-peers.sh)")
        if shutil.which("runc") is None:
            raise Unavailable("runc is not installed (run bench/setup-peers.sh)")
        if os.geteuid() != 0:
            raise Unavailable("podman is benchmarked rootful; run as root")
        rc, out, _ = run_argv([self.podman, "--version"], 30)
        self.version = out.decode().strip() if rc == 0 else None
        rc, out, err = run_argv([self.podman, "image", "inspect", "--format",
                                 '{{ index .Labels "forkbox.bench.rootfs" }}', self.image], 60)
        if rc != 0:
            raise Unavailable(f"podman image {self.image} is missing (run bench/setup-peers.sh)")
        self.image_rootfs = out.decode().strip() or None

    def thread_setup(self):
        pass

    def remove(self, name):
        try:
            rc, _, _ = run_argv([self.podman, "rm", "--force", "--ignore", name], 60)
        except IterationError:
            rc = -1
        # Killed early, podman may not have recorded the container yet, while
        # conmon (which daemonizes, so killing podman's process group misses
        # it) and a `runc init` waiting to start live on. Find that conmon by
        # the container name it was given and remove its runc container.
        for pid, ctr_id in self.orphans(name):
            runc = shutil.which("runc") or "runc"
            try:
                run_argv([runc, "delete", "--force", ctr_id], 30)
            except IterationError:
                pass
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if rc != 0:
            # e.g. podman recorded the container just after the first rm.
            try:
                rc, _, _ = run_argv([self.podman, "rm", "--force", "--ignore", name], 60)
            except IterationError:
                rc = -1
        if rc != 0 or self.orphans(name):
            time.sleep(0.5)
            if rc != 0 or self.orphans(name):
                self.leaked.append(name)

    @staticmethod
    def orphans(name):
        """(conmon pid, container id) of conmon processes serving container `name`."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"conmon"):
                continue
            args = [a.decode("utf-8", "replace") for a in argv]
            for i in range(len(args) - 1):
                if args[i] == "-n" and args[i + 1] == name and "-c" in args:
                    j = args.index("-c")
                    if j + 1 < len(args):
                        found.append((int(entry), args[j + 1]))
        return found


# --------------------------------------------------------------------------
# statistics and measurement


def percentile(sorted_vals, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_vals:
        return None
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def summarize(samples):
    s = sorted(samples)
    if not s:
        return {"n": 0, "p50": None, "p99": None, "mean": None, "min": None, "max": None}
    return {
        "n": len(s),
        "p50": percentile(s, 0.50),
        "p99": percentile(s, 0.99),
        "mean": sum(s) / len(s),
        "min": s[0],
        "max": s[-1],
    }


class Result:
    def __init__(self, system, mode, attempted):
        self.system = system
        self.mode = mode
        self.attempted = attempted
        self.samples = []  # ms, successful iterations only
        self.phases = []  # forkbox: per-phase ms of each successful iteration
        self.errors = []
        self.wall_s = None
        self.clients = 1
        self.streak = 0  # consecutive failures
        self.aborted = None

    def add(self, total_ms, phases):
        self.samples.append(total_ms)
        if phases is not None:
            self.phases.append(phases)

    def fail(self, msg):
        self.errors.append(msg)

    def to_json(self):
        d = {
            "system": self.system,
            "mode": self.mode,
            "clients": self.clients,
            "attempted": self.attempted,
            "ok": len(self.samples),
            "failed": len(self.errors),
            "errors": self.errors[:20],
            "aborted": self.aborted,
            "stats_ms": summarize(self.samples),
            "samples_ms": [round(x, 4) for x in self.samples],
        }
        if self.wall_s is not None:
            d["wall_s"] = self.wall_s
            d["throughput_per_s"] = len(self.samples) / self.wall_s if self.wall_s > 0 else None
        if self.phases:
            d["phases_ms"] = {k: summarize([p[k] for p in self.phases]) for k in self.phases[0]}
        return d


MAX_STREAK = 5  # consecutive failures after which a system is given up


def timed(system, result):
    t0 = now_ns()
    try:
        phases = system.iteration()
    except IterationError as e:
        result.fail(str(e))
        return False
    result.add(ms(now_ns() - t0), phases)
    return True


def track(system, result, ok):
    """Gives a system up after MAX_STREAK failures in a row (a dead daemon)."""
    if ok:
        result.streak = 0
        return
    result.streak += 1
    if result.streak >= MAX_STREAK and result.aborted is None:
        result.aborted = f"given up after {MAX_STREAK} consecutive failures"
        log(f"{system.name} {result.mode}: {result.aborted}")


def warm_up(system, count):
    for _ in range(count):
        system.iteration()


def run_sequential(systems, n, pause, order):
    results = {s.name: Result(s.name, "sequential", n) for s in systems}
    if order == "interleaved":
        # Round i runs every system once, in an order rotated by i, so no
        # system always follows the same one and slow drift of the machine
        # hits all of them alike.
        rounds = []
        for i in range(n):
            k = i % len(systems)
            rounds.append(systems[k:] + systems[:k])
    else:
        rounds = [[s] for s in systems for _ in range(n)]
    try:
        for i, batch in enumerate(rounds):
            for s in batch:
                r = results[s.name]
                if r.aborted is None:
                    track(s, r, timed(s, r))
                    if pause > 0:
                        time.sleep(pause)
            progress(f"sequential {i + 1}/{len(rounds)}")
    except KeyboardInterrupt:
        STOP.set()
        for r in results.values():
            r.aborted = r.aborted or "interrupted"
    progress_done()
    return results


def spawn_baseline(count=20):
    """What starting a program costs this harness: subtract mentally from the peers."""
    true = shutil.which("true") or "/bin/true"
    samples = []
    for _ in range(count):
        t0 = now_ns()
        run_argv([true], 10)
        samples.append(ms(now_ns() - t0))
    return summarize(samples)


# --------------------------------------------------------------------------
# host description


def cgroup_layout():
    mounts = []
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in ("cgroup", "cgroup2"):
                    mounts.append((parts[1], parts[2]))
    except OSError:
        return "unknown"
    v2 = [m for m, t in mounts if t == "cgroup2"]
    v1 = [m for m, t in mounts if t == "cgroup"]
    if "/sys/fs/cgroup" in v2 and not v1:
        return "v2 (unified)"
    if v1 and v2:
        return f"v1 + hybrid v2 at {', '.join(v2)}"
    if v1:
        return "v1"
    return "unknown"


def host_info():
    info = {
        "hostname": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "cgroup": cgroup_layout(),
        "python": platform.python_version(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                    break
    except OSError:
        pass
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    info["os"] = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    try:
        info["loadavg_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


# --------------------------------------------------------------------------
# output


_prog = "bench"
_quiet = False
_tty = sys.stderr.isatty()


def configure_output(prog, quiet):
    """Names the program in log lines; quiet turns the progress line off."""
    global _prog, _quiet
    _prog = prog
    _quiet = quiet


def log(msg):
    if _tty:
        sys.stderr.write("\r\033[K")
    print(f"{_prog}: {msg}", file=sys.stderr, flush=True)


def progress(msg):
    if _quiet or not _tty:
        return
    sys.stderr.write(f"\r\033[K  {msg}")
    sys.stderr.flush()


def progress_done():
    if not _quiet and _tty:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def fmt_ratio(v):
    return "n/a" if v is None else f"{v:.2f}x"


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def host_sentence(host, started):
    """One line for docs/benchmarks.md: when and on what the numbers were taken."""
    line = (f"Measured {started} on {host.get('os', 'Linux')}, kernel {host['kernel']}, "
            f"{host['nproc']} CPUs ({host.get('cpu', 'unknown CPU')}), "
            f"{host.get('mem_gib', '?')} GiB, cgroup {host['cgroup']}.")
    if "loadavg_start" in host and "loadavg_end" in host:
        line += (f" 1-minute load average {host['loadavg_start'][0]:g} at the start, "
                 f"{host['loadavg_end'][0]:g} at the end.")
    return line


def text_table(rows, left):
    """rows[0] is the header; the first `left` columns are left-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for j, row in enumerate(rows):
        cells = [row[i].ljust(widths[i]) if i < left else row[i].rjust(widths[i]) for i in range(len(row))]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines
