"""packaging/forkboxd.service and how forkboxd behaves under it, with daemons of its own.

The unit must verify with systemd-analyze, keep sandboxes alive across a stop
(KillMode=process) and keep the hardening it documents. The daemon, run with the
unit's privilege restrictions (no_new_privs, the capability bounding set) and
stopped the way KillMode=process stops it (SIGTERM to the main process only),
leaves its sandboxes running by default and deletes them all with
FORKBOX_STOP_SANDBOXES=1.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import DAEMON, ROOT, STATE, UnixHTTPConnection

UNIT = os.path.join(ROOT, "packaging", "forkboxd.service")

STATE3 = "/var/lib/forkbox-test-pkg"
RUN3 = "/run/forkbox-test-pkg"
SOCK3 = RUN3 + "/forkbox.sock"
PORT3 = 17423
UID_START3 = 300000000
UID_SLOTS3 = 16

# Settings that would give the daemon a mount namespace of its own, or a
# seccomp filter, device policy or BPF program that every sandbox inherits,
# or take root away: each breaks sandboxes or their re-adoption (see the
# comments in the unit). None may appear.
FORBIDDEN = (
    "PrivateTmp", "PrivateDevices", "PrivateMounts", "PrivateUsers", "PrivateNetwork", "PrivateIPC",
    "ProtectSystem", "ProtectHome", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectProc", "ProtectClock", "ProtectHostname", "ReadOnlyPaths",
    "ReadWritePaths", "InaccessiblePaths", "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths",
    "MountFlags", "RootDirectory", "RootImage", "SystemCallFilter", "SystemCallArchitectures",
    "RestrictNamespaces", "RestrictAddressFamilies", "MemoryDenyWriteExecute", "LockPersonality",
    "RestrictRealtime", "RestrictSUIDSGID", "DevicePolicy", "DeviceAllow", "IPAddressDeny",
    "IPAddressAllow", "User", "Group", "DynamicUser", "OOMScoreAdjust", "RuntimeDirectory",
)
# Capabilities the daemon needs: none may be dropped from the bounding set.
NEEDED_CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SYS_PTRACE", "CAP_KILL",
               "CAP_DAC_OVERRIDE", "CAP_CHOWN", "CAP_FOWNER", "CAP_SYS_RESOURCE", "CAP_SYS_CHROOT",
               "CAP_MKNOD", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_CHECKPOINT_RESTORE")


def parse_unit(path):
    """{section: {key: [values in order]}}, comments and blank lines skipped."""
    sections = {}
    cur = None
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                cur = sections.setdefault(line[1:-1], {})
                continue
            assert cur is not None and "=" in line, "stray line in the unit: %r" % line
            key, value = line.split("=", 1)
            cur.setdefault(key.strip(), []).append(value.strip())
    return sections


def service():
    return parse_unit(UNIT)["Service"]


def one(svc, key):
    assert key in svc, "%s= is missing from the unit" % key
    assert len(svc[key]) == 1, "%s= is set more than once" % key
    return svc[key][0]


def dropped_caps(svc):
    """Capabilities the unit removes from the bounding set."""
    value = one(svc, "CapabilityBoundingSet")
    assert value.startswith("~"), "CapabilityBoundingSet must be a deny list (~...): an allow list " \
                                  "would have to track every capability the daemon ever uses"
    return value[1:].split()


# --------------------------------------------------------------------------
# the unit file


def test_unit_keeps_sandboxes_and_its_hardening():
    """KillMode=process, the lifecycle settings and the chosen hardening are all in
    place; nothing that would confine or break sandboxes crept in."""
    svc = service()
    assert one(svc, "KillMode") == "process"
    assert one(svc, "Type") in ("exec", "simple")  # forkboxd does not speak sd_notify
    assert one(svc, "Restart") == "on-failure"
    assert one(svc, "TasksMax") == "infinity"
    assert one(svc, "Delegate") == "yes"
    assert int(one(svc, "LimitNOFILE")) >= 65536  # sandboxes get min(65536, the daemon's limit)
    assert one(svc, "NoNewPrivileges") == "yes"
    caps = dropped_caps(svc)
    assert "CAP_SYS_MODULE" in caps and "CAP_SYS_BOOT" in caps
    for cap in NEEDED_CAPS:
        assert cap not in caps, "the daemon needs %s" % cap
    for key in FORBIDDEN:
        assert key not in svc, "%s= must not be set (see the comments in the unit)" % key
    # the daemon must not be told to delete sandboxes on stop by default
    for env in svc.get("Environment", []):
        assert "FORKBOX_STOP_SANDBOXES=1" not in env


def test_unit_starts_the_installed_binary():
    """ExecStart is where `meson install` (and `make install`) puts forkboxd."""
    exec_start = one(service(), "ExecStart")
    binary = exec_start.split()[0]
    assert binary == "/usr/local/bin/forkboxd"
    build = os.path.dirname(os.path.dirname(os.path.dirname(DAEMON)))
    out = subprocess.run(["meson", "introspect", build, "--installed"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode == 0:
        assert binary in out.stdout, out.stdout


def test_readme_documents_the_service():
    """README keeps `make run` / `make test` as its first two commands and has a
    "Run as a service" section after them."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    commands = re.findall(r"(?m)^(make \w+|systemctl \w+)", text)
    assert commands[:2] == ["make run", "make test"], commands[:3]
    assert text.index("## Run as a service") > text.index("make test")
    assert "KillMode=process" in text and "FORKBOX_STOP_SANDBOXES" in text


def test_unit_verifies():
    """systemd-analyze verify accepts the unit (ExecStart pointed at the build's
    forkboxd, since /usr/local/bin/forkboxd need not be installed)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    tmp = "/tmp/forkbox-test-unit-%d" % os.getpid()
    os.makedirs(tmp, exist_ok=True)
    try:
        text = open(UNIT, encoding="utf-8").read()
        text = re.sub(r"(?m)^ExecStart=/usr/local/bin/forkboxd", "ExecStart=" + DAEMON, text)
        path = os.path.join(tmp, "forkboxd.service")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        r = subprocess.run([analyze, "verify", path], capture_output=True, text=True, timeout=120)
        mine = [l for l in (r.stdout + r.stderr).splitlines() if "forkboxd" in l]
        assert r.returncode == 0 and not mine, r.stdout + r.stderr
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# the daemon under the unit's restrictions


def hardened_argv(argv):
    """argv run with the unit's NoNewPrivileges= and CapabilityBoundingSet=, as
    systemd would apply them (the mount/seccomp-free part of the unit)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return list(argv)
    svc = service()
    wrap = [setpriv]
    if one(svc, "NoNewPrivileges") == "yes":
        wrap.append("--no-new-privs")
    known = set()
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 40
    # setpriv rejects capabilities it does not know; the kernel may know fewer
    names = {"CAP_CHOWN": 0, "CAP_SYS_MODULE": 16, "CAP_SYS_PACCT": 20, "CAP_SYS_BOOT": 22,
             "CAP_SYS_TIME": 25, "CAP_SYS_TTY_CONFIG": 26, "CAP_LEASE": 28, "CAP_AUDIT_CONTROL": 30,
             "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
             "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37}
    for cap in dropped_caps(svc):
        if names.get(cap, 99) <= last:
            known.add("-" + cap[4:].lower())
    if known:
        wrap += ["--bounding-set", ",".join(sorted(known))]
    return wrap + ["--"] + list(argv)


def request(method, path, key=None, body=None, timeout=60):
    conn = UnixHTTPConnection(SOCK3, timeout)
    try:
        headers = {"Authorization": "Bearer " + key} if key else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)
    finally:
        conn.close()


class PkgDaemon:
    """A forkboxd of its own: state, run dir, socket, port and uid pool."""

    def __init__(self):
        self.proc = None
        self.log = os.path.join(STATE + "-logs", "forkboxd-pkg.log")

    def start(self, env_extra=None):
        os.makedirs(os.path.dirname(self.log), exist_ok=True)
        env = dict(os.environ, FORKBOX_WARM_POOL="0")
        env.pop("FORKBOX_STOP_SANDBOXES", None)
        env.update(env_extra or {})
        argv = [DAEMON, "--state-dir", STATE3, "--run-dir", RUN3, "--socket", SOCK3,
                "--listen", "127.0.0.1:%d" % PORT3, "--cache-dir", "/var/cache/forkbox",
                "--uid-pool-start", str(UID_START3), "--uid-pool-slots", str(UID_SLOTS3),
                "--no-default-template", "--dns-upstream", "198.18.1.53"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(hardened_argv(argv), stdout=log, stderr=log, env=env)
        deadline = time.time() + 30
        while time.time() < deadline:
            assert self.proc.poll() is None, "forkboxd exited with %s (see %s)" % (self.proc.returncode, self.log)
            try:
                if request("GET", "/healthz", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("forkboxd did not become healthy (see %s)" % self.log)

    def stop(self):
        """What KillMode=process does: SIGTERM to the main process, nothing else."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    @property
    def key(self):
        with open(os.path.join(STATE3, "api-key")) as f:
            return f.read().strip()


def pool_pids():
    """Host pids running under this daemon's uid pool: sandbox processes."""
    hi = UID_START3 + UID_SLOTS3 * 65536
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/status" % p) as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if UID_START3 <= int(line.split()[1]) < hi:
                            out.append(int(p))
                        break
        except OSError:
            pass
    return sorted(out)


def sandbox_cgroups(sid):
    found = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if sid in dirs:
            found.append(os.path.join(root, sid))
        dirs[:] = [d for d in dirs if not d.startswith("sbx_") and d != "system.slice"]
    return found


def fresh_state():
    """State dir whose default template is the test daemon's (a symlink)."""
    shutil.rmtree(STATE3, ignore_errors=True)
    src = os.path.join(STATE, "templates", "default", "rootfs")
    os.makedirs(os.path.join(STATE3, "templates", "default"))
    os.symlink(src, os.path.join(STATE3, "templates", "default", "rootfs"))


def test_sandboxes_outlive_a_stop_and_stop_sandboxes_deletes_them(daemon):
    """Under the unit's restrictions: a sandbox survives SIGTERM of the daemon and
    is re-adopted by the next one; with FORKBOX_STOP_SANDBOXES=1 a SIGTERM deletes
    every sandbox (processes, cgroups, writable layers) before the daemon exits."""
    # the `daemon` fixture built (or found) the default template this one borrows
    assert os.path.isdir(os.path.join(STATE, "templates", "default", "rootfs"))
    assert pool_pids() == [], "processes of an earlier run are still in uid pool %d" % UID_START3
    fresh_state()
    d = PkgDaemon()
    try:
        d.start()
        key = d.key
        status, sb = request("POST", "/v1/sandboxes", key, {"ttl": 600})
        assert status == 201, sb
        sid = sb["id"]
        status, r = request("POST", "/v1/sandboxes/%s/exec" % sid, key,
                            {"cmd": ["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"]})
        assert status == 200 and r["exit_code"] == 0, r
        bg = r["stdout"].strip()
        time.sleep(0.2)
        before = pool_pids()
        assert len(before) >= 2, before  # forkbox-init and the sleep

        # 1. the default: a stop leaves the sandbox running
        assert d.stop() == 0
        time.sleep(0.5)
        assert pool_pids() == before, "a plain stop must not touch sandbox processes"

        # 2. the next daemon re-adopts it; this one deletes everything on stop
        d.start({"FORKBOX_STOP_SANDBOXES": "1"})
        status, got = request("GET", "/v1/sandboxes/" + sid, key)
        assert status == 200 and got["state"] == "running", got
        status, r = request("POST", "/v1/sandboxes/%s/exec" % sid, key,
                            {"cmd": ["sh", "-c", "kill -0 %s && echo alive" % bg]})
        assert status == 200 and r["stdout"] == "alive\n", r
        status, sb2 = request("POST", "/v1/sandboxes", key, {})
        assert status == 201, sb2
        assert sandbox_cgroups(sid) and sandbox_cgroups(sb2["id"])
        assert d.stop() == 0, "see %s" % d.log

        deadline = time.time() + 10
        while pool_pids() and time.time() < deadline:
            time.sleep(0.1)
        assert pool_pids() == [], "sandbox processes survived --stop-sandboxes"
        for s in (sid, sb2["id"]):
            assert sandbox_cgroups(s) == [], s
            assert not os.path.exists(os.path.join(STATE3, "sandboxes", s)), s

        # 3. and the next start finds none
        d.start()
        status, lst = request("GET", "/v1/sandboxes", key)
        assert status == 200 and lst["sandboxes"] == [], lst
        assert d.stop() == 0
    finally:
        if d.proc is not None:
            d.stop()
        if pool_pids():
            # leave nothing behind for the next run
            d.start({"FORKBOX_STOP_SANDBOXES": "1"})
            d.stop()
        shutil.rmtree(STATE3, ignore_errors=True)
        shutil.rmtree(RUN3, ignore_errors=True)
