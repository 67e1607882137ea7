"""Runs every escape attempt in attacks/ as root inside a fresh sandbox and
checks both what the script reports and, from the host, that nothing outside
the sandbox was reached or changed.

Script contract (see README.md): print "BLOCKED: ..." and exit 0 when the
attack fails, "ESCAPED: ..." and exit 1 when it works, exit 2 when the script
itself could not run.  Host-side inputs arrive as FB_* environment variables.
"""
import glob
import os
import re
import threading
import time

import pytest

from conftest import RUN_DIR, SOCKET, STATE, TCP_PORT
import hostside
from hostside import files_url

HERE = os.path.dirname(os.path.abspath(__file__))
ATTACKS = sorted(glob.glob(os.path.join(HERE, "attacks", "[0-9][0-9]_*.py")))
EXEC_TIMEOUT = 90
# the clock may drift a little while the suite runs; a settimeofday would jump it
CLOCK_TOLERANCE_S = 2.0


class SecurityEnv:
    """Everything on the host side an attack may aim at, plus the checks."""

    def __init__(self, client, daemon):
        self.client = client
        self.daemon = daemon
        self.marker = hostside.HostMarker()
        self.listeners = hostside.Listeners()
        self.listeners.self_test()
        self.sleeper = hostside.HostSleeper()
        self.other = hostside.OtherSandbox(client)
        self.template = hostside.TemplateGuard(client)
        self.addrs = hostside.host_addresses()

    def script_env(self, sid):
        env = {
            "FB_SANDBOX_ID": sid,
            "FB_HOST_MARKER": self.marker.file,
            "FB_HOST_MARKER_DIR": self.marker.dir,
            "FB_HOST_SECRET": self.marker.secret,
            "FB_HOST_PORT": str(self.listeners.tcp_port),
            "FB_HOST_UDP_PORT": str(self.listeners.udp_port),
            "FB_HOST_ABSTRACT": self.listeners.abstract,
            "FB_HOST_ADDRS": ",".join(self.addrs),
            "FB_HOST_PID": str(self.sleeper.pid),
            "FB_DAEMON_PID": str(self.daemon.proc.pid),
            "FB_DAEMON_PORT": str(TCP_PORT),
            "FB_DAEMON_SOCKET": SOCKET,
            "FB_STATE_DIR": STATE,
            "FB_RUN_DIR": RUN_DIR,
        }
        env.update(self.other.env())
        return env

    def snapshot(self):
        return {"state": hostside.host_state(), "clock": hostside.clock_offset(), "hits": self.listeners.count()}

    def problems(self, before):
        out = []
        out += self.marker.problems()
        out += hostside.state_problems(before["state"], hostside.host_state())
        drift = hostside.clock_offset() - before["clock"]
        if abs(drift) > CLOCK_TOLERANCE_S:
            out.append("host wall clock jumped by %.3f s" % drift)
        # a connection made just before the exec returned may still be in flight
        time.sleep(0.05)
        hits = self.listeners.since(before["hits"])
        if hits:
            out.append("host listeners were reached: %s" % hits)
        out += self.sleeper.problems()
        if self.daemon.proc.poll() is not None:
            out.append("forkboxd exited with %s" % self.daemon.proc.returncode)
        else:
            r = self.client.get("/healthz", key=False)
            if r.status != 200:
                out.append("forkboxd unhealthy: %r" % r)
        out += self.other.problems()
        out += self.template.problems()
        return out

    def close(self):
        self.other.close()
        self.listeners.close()
        self.sleeper.close()
        self.marker.remove()


@pytest.fixture(scope="session")
def security_env(client, daemon):
    env = SecurityEnv(client, daemon)
    yield env
    env.close()


def hooks_of(source):
    return re.findall(r"^# runner-hook: (\S+)", source, re.M)


def run_with_selfexe(client, sid, env):
    """Runs the script while exec'ing a '#!/proc/self/exe' file, which makes the
    exec worker run forkbox-init's memfd as a sandbox command: the script tries
    to grab and overwrite it while it runs."""
    env = dict(env, FB_HOOK_SELFEXE="1")
    result = {}

    def run():
        result.update(client.exec(sid, ["python3", "/tmp/attack.py"], env=env, timeout=EXEC_TIMEOUT))

    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and t.is_alive():
        if client.get(files_url(sid, "/tmp/fbx-selfexe-ready")).status == 200:
            break
        time.sleep(0.05)
    codes = []
    # the init binary run as a command waits on its own signalfd: a short timeout ends each run
    for _ in range(8):
        if not t.is_alive():
            break
        codes.append(client.exec(sid, ["/tmp/fbx-selfexe"], timeout=1)["exit_code"])
    client.put(files_url(sid, "/tmp/fbx-selfexe-done"), raw=b"")
    t.join(EXEC_TIMEOUT + 30)
    assert not t.is_alive(), "attack script did not finish"
    result["trigger_exit_codes"] = codes
    return result


def describe(script, r):
    return "%s: exit_code=%s signal=%s timed_out=%s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
        os.path.basename(script), r.get("exit_code"), r.get("signal"), r.get("timed_out"), r.get("stdout", ""),
        r.get("stderr", "")[-3000:])


@pytest.mark.parametrize("script", ATTACKS, ids=[os.path.basename(p) for p in ATTACKS])
def test_attack_is_blocked(client, sandbox, security_env, script):
    sid = sandbox["id"]
    with open(script, "rb") as f:
        source = f.read()
    r = client.put(files_url(sid, "/tmp/attack.py"), raw=source)
    assert r.status == 201, r
    # the shared contract module, imported by the script from its own directory
    with open(os.path.join(os.path.dirname(script), "_attack.py"), "rb") as f:
        r = client.put(files_url(sid, "/tmp/_attack.py"), raw=f.read())
    assert r.status == 201, r
    env = security_env.script_env(sid)
    before = security_env.snapshot()
    if "selfexe" in hooks_of(source.decode()):
        result = run_with_selfexe(client, sid, env)
        print("self-exe triggers exit codes:", result["trigger_exit_codes"])
    else:
        result = client.exec(sid, ["python3", "/tmp/attack.py"], env=env, timeout=EXEC_TIMEOUT)
    report = describe(script, result)
    print(report)
    problems = security_env.problems(before)
    assert not problems, "host-side checks failed after %s:\n%s\n%s" % (
        os.path.basename(script), "\n".join(problems), report)
    assert not result["timed_out"], report
    assert "ESCAPED" not in result["stdout"], report
    assert result["exit_code"] == 0, report
    assert result["stdout"].startswith("BLOCKED: ") or "\nBLOCKED: " in result["stdout"], report

