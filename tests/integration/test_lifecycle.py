"""Sandbox lifecycle over the HTTP API: create, inspect, list, delete, TTL,
isolation as seen from inside and from the host, auth and tenants."""
import datetime
import os
import re
import subprocess
import time
import uuid

import pytest

from conftest import DAEMON, STATE, Client, host_pids_with_cmdline, sh

RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
TEMPLATE_ROOTFS = os.path.join(STATE, "templates", "default", "rootfs")


def parse_time(s):
    """RFC3339 (as forkbox writes it: UTC, 'Z', milliseconds) -> epoch seconds."""
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def host_uids(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                return [int(x) for x in line.split()[1:]]
    raise AssertionError("no Uid line for pid %d" % pid)


def marker_sleep():
    """A sleep duration unique enough to find the process on the host."""
    return "%d.%06d" % (900 + os.getpid() % 100, uuid.uuid4().int % 1000000)


@pytest.fixture(scope="module")
def tenant2(daemon):
    """A client holding the key of a second tenant."""
    out = subprocess.run([DAEMON, "--state-dir", STATE, "add-key", "tenant2-%d" % os.getpid()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip()
    assert key
    return Client(key)


# ---- create -----------------------------------------------------------------

def test_create_defaults(client):
    """POST /v1/sandboxes with no body gives 201 and the documented defaults."""
    r = client.post("/v1/sandboxes")
    assert r.status == 201, r
    sb = r.json()
    try:
        assert re.match(r"^sbx_[0-9a-z]+$", sb["id"]), sb["id"]
        assert sb["state"] == "running"
        assert sb["template"] == "default"
        assert RFC3339.match(sb["created_at"]), sb["created_at"]
        assert abs(parse_time(sb["created_at"]) - time.time()) < 60
        assert sb["expires_at"] is None
        assert sb["ttl"] == 0
        assert sb["on_expire"] == "delete"
        assert sb["labels"] == {}
        assert sb["env"] == {}
        assert sb["workdir"] == "/root"
        assert sb["resources"] == {"cpus": 1.0, "memory_mb": 512, "pids": 512, "disk_mb": 2048}
        assert sb["network"] == {"mode": "none", "allow": []}
        assert r.headers.get("Content-Type", "").startswith("application/json")
    finally:
        client.delete("/v1/sandboxes/" + sb["id"])


def test_create_with_empty_object_uses_defaults(client):
    """An empty JSON object is the same as no body."""
    r = client.post("/v1/sandboxes", {})
    assert r.status == 201, r
    sb = r.json()
    client.delete("/v1/sandboxes/" + sb["id"])
    assert sb["template"] == "default" and sb["workdir"] == "/root" and sb["expires_at"] is None


def test_create_ids_are_unique(make):
    """Two creates give two different ids."""
    a, b = make(), make()
    assert a["id"] != b["id"]


def test_create_with_full_spec_is_reflected(make, client):
    """Every field of a full create spec comes back in the answer and in GET."""
    spec = {
        "template": "default", "ttl": 600, "on_expire": "delete",
        "labels": {"user": "u42", "team/name": "a.b-c_d"},
        "env": {"FOO": "bar", "EMPTY": ""},
        "workdir": "/work/dir",
        "resources": {"cpus": 0.5, "memory_mb": 256, "pids": 128, "disk_mb": 1024},
        "network": {"mode": "none", "allow": []},
    }
    sb = make(**spec)
    got = client.get("/v1/sandboxes/" + sb["id"]).json()
    for k, v in spec.items():
        assert sb[k] == v, (k, sb[k])
        assert got[k] == v, (k, got[k])
    assert got["expires_at"] == sb["expires_at"]
    assert sb["expires_at"] is not None
    assert RFC3339.match(sb["expires_at"])
    left = parse_time(sb["expires_at"]) - parse_time(sb["created_at"])
    assert 599 <= left <= 601, left


def test_env_visible_in_exec(make, client):
    """The sandbox env is in the environment of every exec."""
    sb = make(env={"FOO": "bar baz", "SECOND": "x=y"})
    out = sh(client, sb["id"], ["env"])
    lines = out.splitlines()
    assert "FOO=bar baz" in lines
    assert "SECOND=x=y" in lines


def test_workdir_is_cwd_and_exists(make, client):
    """A workdir that the template lacks is created and is the cwd of exec."""
    sb = make(workdir="/srv/project/sub")
    sid = sb["id"]
    assert sh(client, sid, ["pwd"]).strip() == "/srv/project/sub"
    assert sh(client, sid, "test -d /srv/project/sub && echo yes").strip() == "yes"


def test_default_workdir_is_root(sandbox, client):
    """Without a workdir, exec runs in /root."""
    assert sh(client, sandbox["id"], ["pwd"]).strip() == "/root"


def test_memory_limit_enforced(make, client):
    """A process allocating more than memory_mb is killed."""
    sb = make(resources={"memory_mb": 32})
    sid = sb["id"]
    assert sb["resources"]["memory_mb"] == 32
    r = client.exec(sid, ["python3", "-c",
                          "x = bytearray(200 * 1024 * 1024)\nfor i in range(0, len(x), 4096): x[i] = 1\nprint('survived')"],
                    timeout=30)
    assert "survived" not in r["stdout"]
    assert r["exit_code"] != 0, r
    assert r["signal"] == "KILL", r
    assert r["timed_out"] is False
    # the sandbox itself survives its command's OOM kill
    assert sh(client, sid, "echo alive").strip() == "alive"


def test_memory_within_limit_works(make, client):
    """Allocating well below memory_mb works."""
    sb = make(resources={"memory_mb": 128})
    out = sh(client, sb["id"], ["python3", "-c", "x = bytearray(32 * 1024 * 1024); print(len(x))"])
    assert out.strip() == str(32 * 1024 * 1024)


FORK_COUNT = r"""
import os, signal
kids = []
try:
    for i in range(500):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        kids.append(pid)
except OSError:
    pass
print(len(kids))
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
"""


def test_pids_limit_enforced(make, client):
    """A fork loop cannot exceed resources.pids."""
    sb = make(resources={"pids": 32})
    sid = sb["id"]
    r = client.exec(sid, ["python3", "-c", FORK_COUNT], timeout=30)
    assert r["exit_code"] == 0, r
    n = int(r["stdout"].strip())
    assert 0 < n < 32, n
    # the limit is released again once the children are gone
    assert sh(client, sid, "echo ok").strip() == "ok"


def test_cpus_recorded(make, client):
    """resources.cpus is recorded as given."""
    sb = make(resources={"cpus": 0.25})
    assert sb["resources"]["cpus"] == 0.25
    got = client.get("/v1/sandboxes/" + sb["id"]).json()
    assert got["resources"]["cpus"] == 0.25


# ---- get / list / delete ----------------------------------------------------

def test_get_has_object_and_usage(sandbox, client):
    """GET of a sandbox is the object plus usage numbers."""
    sh(client, sandbox["id"], "echo warm")
    r = client.get("/v1/sandboxes/" + sandbox["id"])
    assert r.status == 200, r
    got = r.json()
    for k, v in sandbox.items():
        assert got[k] == v, k
    usage = got["usage"]
    for k in ("memory_bytes", "cpu_usec", "pids"):
        assert isinstance(usage[k], int) and usage[k] >= 0, usage
    assert usage["pids"] >= 1
    assert usage["memory_bytes"] > 0


def test_list_filters_by_labels_and_state(make, client):
    """list honours every label selector (AND) and the state filter."""
    tag = uuid.uuid4().hex[:12]
    a = make(labels={"run": tag, "role": "web", "env": "prod"})
    b = make(labels={"run": tag, "role": "web", "env": "dev"})
    c = make(labels={"run": tag, "role": "db"})

    def ids(query):
        r = client.get("/v1/sandboxes" + query)
        assert r.status == 200, r
        return {s["id"] for s in r.json()["sandboxes"]}

    assert ids("?label=run=%s" % tag) == {a["id"], b["id"], c["id"]}
    assert ids("?label=run=%s&label=role=web" % tag) == {a["id"], b["id"]}
    assert ids("?label=run=%s&label=role=web&label=env=prod" % tag) == {a["id"]}
    assert ids("?label=run=%s&label=role=db&label=env=prod" % tag) == set()
    assert ids("?label=run=%s&state=running" % tag) == {a["id"], b["id"], c["id"]}
    assert ids("?label=run=%s&state=stopped" % tag) == set()
    assert ids("?label=run=%s&state=paused" % tag) == set()
    everything = ids("")
    assert {a["id"], b["id"], c["id"]} <= everything
    listed = [s for s in client.get("/v1/sandboxes?label=run=%s&label=env=prod" % tag).json()["sandboxes"]]
    assert listed[0]["labels"] == a["labels"]
    assert listed[0]["state"] == "running"


def test_delete_then_404(client):
    """DELETE gives 204, a second DELETE 404, and GET 404 afterwards."""
    sb = client.create()
    path = "/v1/sandboxes/" + sb["id"]
    r = client.delete(path)
    assert r.status == 204, r
    assert r.body == b""
    r = client.delete(path)
    assert r.status == 404, r
    assert r.json()["error"]["code"] == "not_found"
    r = client.get(path)
    assert r.status == 404, r
    assert r.json()["error"]["code"] == "not_found"
    assert sb["id"] not in {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    r = client.post(path + "/exec", {"cmd": "true"})
    assert r.status == 404, r


def test_list_label_value_with_equals(make, client):
    """A selector splits at the first '=': the value may itself hold '='."""
    tag = uuid.uuid4().hex[:12]
    a = make(labels={"run": tag, "expr": "x=y"})
    r = client.get("/v1/sandboxes?label=run=%s&label=expr=x=y" % tag)
    assert [s["id"] for s in r.json()["sandboxes"]] == [a["id"]]
    r = client.get("/v1/sandboxes?label=run=%s&label=expr=x" % tag)
    assert r.json()["sandboxes"] == []


def stuck_setup_children(daemon_pid):
    """Host pids of sandbox setup children of the daemon that have not yet
    become forkbox-init: still the forkboxd image, PID 1 of a new pid ns."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/status" % p) as f:
                status = f.read()
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv0 = f.read().split(b"\0")[0]
        except OSError:
            continue
        fields = dict(l.split(":", 1) for l in status.splitlines() if ":" in l)
        nspid = fields.get("NSpid", "").split()
        if (int(fields["PPid"]) == daemon_pid and argv0 == DAEMON.encode() and len(nspid) == 2
                and nspid[1] == "1"):
            found.append(int(p))
    return found


def test_parallel_creates_while_connections_churn(daemon, client):
    """Creates run in parallel with other connections opening and closing, and none hangs."""
    import threading
    stop = threading.Event()
    statuses, stuck, errors, ids = [], [], [], []
    lock = threading.Lock()

    def churn():
        while not stop.is_set():
            try:
                Client(None).get("/healthz", timeout=10)
            except OSError:
                pass

    def creator():
        for _ in range(4):
            try:
                t0 = time.time()
                r = client.post("/v1/sandboxes", {"labels": {"parallel": "yes"}}, timeout=60)
                took = time.time() - t0
                with lock:
                    statuses.append((r.status, round(took, 1)))
                    if r.status == 201:
                        ids.append(r.json()["id"])
            except Exception as e:  # pragma: no cover - reported below
                errors.append(repr(e))

    def watchdog():
        # keeps the host usable: a wedged setup child would otherwise hang the
        # create forever and, orphaned, keep the daemon's listening sockets
        first_seen = {}
        while not stop.is_set():
            for pid in stuck_setup_children(daemon.proc.pid):
                first_seen.setdefault(pid, time.time())
                if time.time() - first_seen[pid] > 3:
                    try:
                        os.kill(pid, 9)
                        stuck.append(pid)
                    except OSError:
                        pass
            time.sleep(0.2)

    churners = [threading.Thread(target=churn) for _ in range(4)]
    dog = threading.Thread(target=watchdog)
    creators = [threading.Thread(target=creator) for _ in range(6)]
    for t in churners + [dog] + creators:
        t.start()
    try:
        for t in creators:
            t.join(300)
    finally:
        stop.set()
        for t in churners + [dog]:
            t.join(60)
        for pid in stuck_setup_children(daemon.proc.pid):
            os.kill(pid, 9)
            stuck.append(pid)
        for sid in ids:
            client.delete("/v1/sandboxes/" + sid)
    assert not errors, errors
    assert stuck == [], "setup children wedged: %s; creates: %s" % (stuck, statuses)
    assert all(st == 201 for st, _ in statuses), statuses
    assert len(set(ids)) == 24


def test_delete_while_exec_runs(client):
    """Deleting a sandbox ends a running exec promptly with an error, and the delete is quick."""
    import threading
    sb = client.create()
    out = {}

    def run():
        t0 = time.time()
        out["r"] = client.post("/v1/sandboxes/%s/exec" % sb["id"], {"cmd": "sleep 30"})
        out["t"] = time.time() - t0

    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.5)
    t0 = time.time()
    r = client.delete("/v1/sandboxes/" + sb["id"])
    took = time.time() - t0
    th.join(30)
    assert r.status == 204, r
    assert took < 5, took
    assert out["t"] < 10, out
    er = out["r"]
    assert er.status in (200, 503), er
    if er.status == 503:
        assert er.json()["error"]["code"] == "unavailable"
    else:
        assert er.json()["signal"] == "KILL"
    assert client.get("/v1/sandboxes/" + sb["id"]).status == 404


# ---- ttl --------------------------------------------------------------------

def test_ttl_refresh_and_clear(sandbox, client):
    """POST ttl moves expires_at to now+ttl; ttl 0 clears it."""
    path = "/v1/sandboxes/%s/ttl" % sandbox["id"]
    before = time.time()
    r = client.post(path, {"ttl": 600})
    assert r.status == 200, r
    o = r.json()
    assert o["id"] == sandbox["id"]
    assert o["ttl"] == 600
    exp = parse_time(o["expires_at"])
    assert before + 600 - 2 <= exp <= time.time() + 600 + 2
    r = client.post(path, {"ttl": 3600})
    assert r.status == 200, r
    exp2 = parse_time(r.json()["expires_at"])
    assert exp2 > exp + 2900
    assert client.get("/v1/sandboxes/" + sandbox["id"]).json()["expires_at"] == r.json()["expires_at"]
    r = client.post(path, {"ttl": 0})
    assert r.status == 200, r
    assert r.json()["expires_at"] is None
    assert r.json()["ttl"] == 0
    assert client.get("/v1/sandboxes/" + sandbox["id"]).json()["expires_at"] is None


def test_ttl_expiry_reaps(client):
    """A sandbox with ttl 1 is gone within a few seconds."""
    sb = client.create(ttl=1)
    assert sb["expires_at"] is not None
    path = "/v1/sandboxes/" + sb["id"]
    deadline = time.time() + 6
    status = None
    while time.time() < deadline:
        status = client.get(path).status
        if status == 404:
            break
        time.sleep(0.1)
    if status != 404:
        client.delete(path)
    assert status == 404, "sandbox with ttl 1 still there after 6 s"
    # its files go in the second phase of the delete, right after
    layer = os.path.join(STATE, "sandboxes", sb["id"])
    deadline = time.time() + 5
    while time.time() < deadline and os.path.exists(layer):
        time.sleep(0.05)
    assert not os.path.exists(layer)


def test_ttl_cleared_sandbox_survives(client):
    """Clearing the ttl of a short-lived sandbox keeps it alive."""
    sb = client.create(ttl=2)
    path = "/v1/sandboxes/" + sb["id"]
    try:
        r = client.post(path + "/ttl", {"ttl": 0})
        assert r.status == 200, r
        time.sleep(3)
        assert client.get(path).status == 200
    finally:
        client.delete(path)


# ---- isolation seen from inside -------------------------------------------

def test_uid_map_is_unprivileged_range(sandbox, client):
    """uid 0 inside maps to a 65536-uid range at >= 2000000 on the host."""
    for f in ("uid_map", "gid_map"):
        fields = sh(client, sandbox["id"], ["cat", "/proc/self/" + f]).split()
        assert len(fields) == 3, fields
        assert fields[0] == "0"
        assert int(fields[1]) >= 2000000
        assert fields[2] == "65536"
    assert sh(client, sandbox["id"], ["id", "-u"]).strip() == "0"


def test_host_sees_sandbox_processes_as_unprivileged(sandbox, client):
    """On the host, the sandbox's processes run as uid >= 2000000."""
    base = int(sh(client, sandbox["id"], ["cat", "/proc/self/uid_map"]).split()[1])
    secs = marker_sleep()
    sh(client, sandbox["id"], "sleep %s >/dev/null 2>&1 &" % secs)
    pids = []
    for _ in range(50):
        pids = host_pids_with_cmdline(b"sleep\0" + secs.encode())
        if pids:
            break
        time.sleep(0.05)
    assert len(pids) == 1, pids
    uids = host_uids(pids[0])
    assert all(u == base for u in uids), (uids, base)
    assert base >= 2000000
    with open("/proc/%d/status" % pids[0]) as f:
        gid_line = [l for l in f if l.startswith("Gid:")][0]
    assert all(int(g) >= 2000000 for g in gid_line.split()[1:])
    # and the sandbox's PID 1 too
    with open("/proc/%d/status" % pids[0]) as f:
        ppid = int([l for l in f if l.startswith("PPid:")][0].split()[1])
    assert all(u >= 2000000 for u in host_uids(ppid))
    client.delete("/v1/sandboxes/" + sandbox["id"])
    # delete answers once SIGKILL is sent; the namespace winds down right after
    deadline = time.time() + 5
    while time.time() < deadline and host_pids_with_cmdline(b"sleep\0" + secs.encode()):
        time.sleep(0.01)
    assert host_pids_with_cmdline(b"sleep\0" + secs.encode()) == []


def test_separate_pid_namespace(sandbox, client):
    """Only a handful of pids are visible and PID 1 is forkbox-init."""
    out = sh(client, sandbox["id"], "ls /proc | grep -E '^[0-9]+$'")
    pids = [int(p) for p in out.split()]
    assert 1 in pids
    assert len(pids) < 10, pids
    cmdline = sh(client, sandbox["id"], "tr '\\0' ' ' < /proc/1/cmdline").strip()
    assert cmdline == "forkbox-init"


def test_hostname_differs(sandbox, client):
    """The sandbox has its own hostname."""
    inside = sh(client, sandbox["id"], ["cat", "/proc/sys/kernel/hostname"]).strip()
    assert inside
    assert inside != os.uname().nodename


def test_only_loopback_network(sandbox, client):
    """The sandbox's network namespace has only lo."""
    out = sh(client, sandbox["id"], ["cat", "/proc/net/dev"])
    ifaces = [line.split(":")[0].strip() for line in out.splitlines()[2:] if ":" in line]
    assert ifaces == ["lo"], ifaces


def test_security_status_fields(sandbox, client):
    """NoNewPrivs is set, the capability bounding set is reduced, seccomp filters."""
    status = sh(client, sandbox["id"], ["cat", "/proc/self/status"])
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Seccomp"].strip() == "2"
    capbnd = int(fields["CapBnd"].strip(), 16)
    assert capbnd != 0x000001ffffffffff
    with open("/proc/sys/kernel/cap_last_cap") as f:
        full = (1 << (int(f.read()) + 1)) - 1
    assert capbnd & full != full
    assert not capbnd & (1 << 21), "CAP_SYS_ADMIN kept"
    assert not capbnd & (1 << 16), "CAP_SYS_MODULE kept"


def test_cgroup_namespace(sandbox, client):
    """/proc/self/cgroup shows the sandbox's cgroup as its root."""
    out = sh(client, sandbox["id"], ["cat", "/proc/self/cgroup"])
    lines = [l for l in out.splitlines() if l]
    assert lines
    for line in lines:
        assert line.split(":", 2)[2] == "/", line


def test_ipc_namespace_differs(sandbox, client):
    """The sandbox's ipc namespace is not the host's."""
    inside = sh(client, sandbox["id"], ["readlink", "/proc/self/ns/ipc"]).strip()
    assert inside.startswith("ipc:[")
    assert inside != os.readlink("/proc/self/ns/ipc")


def test_other_namespaces_differ(sandbox, client):
    """uts, net, pid, mnt, user and cgroup namespaces differ from the host's."""
    for ns in ("uts", "net", "pid", "mnt", "user", "cgroup"):
        inside = sh(client, sandbox["id"], ["readlink", "/proc/self/ns/" + ns]).strip()
        assert inside != os.readlink("/proc/self/ns/" + ns), ns


def test_writes_do_not_leak_into_template_or_other_sandbox(make, client):
    """A write in one sandbox is seen neither by another nor in the template."""
    a, b = make(), make()
    name = "leak-%s" % uuid.uuid4().hex[:8]
    with open(os.path.join(TEMPLATE_ROOTFS, "etc/passwd"), "rb") as f:
        passwd_before = f.read()
    sh(client, a["id"], "echo secret > /etc/%s && echo 'x:x:4242:4242::/:/bin/sh' >> /etc/passwd" % name)
    assert sh(client, a["id"], ["cat", "/etc/" + name]).strip() == "secret"
    r = client.exec(b["id"], ["cat", "/etc/" + name])
    assert r["exit_code"] != 0, r
    assert "4242" not in sh(client, b["id"], ["cat", "/etc/passwd"])
    assert not os.path.exists(os.path.join(TEMPLATE_ROOTFS, "etc", name))
    with open(os.path.join(TEMPLATE_ROOTFS, "etc/passwd"), "rb") as f:
        assert f.read() == passwd_before
    # a new sandbox starts from the pristine template too
    c = make()
    assert client.exec(c["id"], ["test", "-e", "/etc/" + name])["exit_code"] != 0


def test_deleting_a_file_does_not_touch_template(make, client):
    """Removing a template file inside a sandbox leaves the template intact."""
    a = make()
    sh(client, a["id"], "rm /etc/debian_version && ! test -e /etc/debian_version")
    assert os.path.exists(os.path.join(TEMPLATE_ROOTFS, "etc/debian_version"))
    b = make()
    sh(client, b["id"], "test -e /etc/debian_version")


def test_sandboxes_cannot_see_each_others_processes(make, client):
    """A process in sandbox A is invisible in sandbox B."""
    a, b = make(), make()
    secs = marker_sleep()
    sh(client, a["id"], "sleep %s >/dev/null 2>&1 &" % secs)
    find = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    assert "sleep " + secs in sh(client, a["id"], find)
    assert "sleep " + secs not in sh(client, b["id"], find)
    # B's view holds only its own init and the command looking
    assert len(sh(client, b["id"], "ls -d /proc/[0-9]*").split()) < 6


# ---- transport, auth, tenants -----------------------------------------------

def test_tcp_listener_works(client):
    """The TCP listener serves the same API with the same key."""
    tcp = Client(client.key, tcp=True)
    assert tcp.get("/healthz").status == 200
    r = tcp.post("/v1/sandboxes", {"labels": {"via": "tcp"}})
    assert r.status == 201, r
    sid = r.json()["id"]
    try:
        assert tcp.exec(sid, "echo tcp")["stdout"] == "tcp\n"
        assert client.get("/v1/sandboxes/" + sid).status == 200
    finally:
        assert tcp.delete("/v1/sandboxes/" + sid).status == 204
    assert Client(None, tcp=True).get("/v1/sandboxes").status == 401


def test_healthz_without_key(client):
    """GET /healthz needs no key."""
    for c in (Client(None), Client(None, tcp=True)):
        r = c.get("/healthz")
        assert r.status == 200, r
        assert r.json() == {"status": "ok"}


def all_v1_routes(sid):
    return [
        ("GET", "/v1/info", None),
        ("POST", "/v1/sandboxes", {}),
        ("GET", "/v1/sandboxes", None),
        ("GET", "/v1/sandboxes/" + sid, None),
        ("DELETE", "/v1/sandboxes/" + sid, None),
        ("POST", "/v1/sandboxes/%s/ttl" % sid, {"ttl": 5}),
        ("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": "true"}),
        ("GET", "/v1/sandboxes/%s/files?path=/root" % sid, None),
        ("PUT", "/v1/sandboxes/%s/files?path=/root/x" % sid, b"x"),
        ("DELETE", "/v1/sandboxes/%s/files?path=/root/x" % sid, None),
        ("GET", "/v1/sandboxes/%s/archive?path=/root" % sid, None),
        ("PUT", "/v1/sandboxes/%s/archive?path=/root" % sid, b"x"),
        ("GET", "/v1/templates", None),
        ("PUT", "/v1/templates/tpl-x/import", b"x"),
        ("DELETE", "/v1/templates/tpl-x", None),
    ]


def send(c, method, path, body, **kw):
    if isinstance(body, bytes):
        return c.request(method, path, raw=body, **kw)
    return c.request(method, path, body=body, **kw)


@pytest.mark.parametrize("key", [None, "", "wrong", "fbk_" + "0" * 48])
def test_unauthorized_on_every_v1_route(sandbox, client, key):
    """Every /v1 route answers 401 without a key or with a wrong one."""
    bad = Client(key)
    headers = {"Authorization": "Bearer " + key} if key == "" else None
    for method, path, body in all_v1_routes(sandbox["id"]):
        r = send(bad, method, path, body, headers=headers)
        assert r.status == 401, (method, path, r)
        err = r.json()["error"]
        assert err["code"] == "unauthorized", (method, path, r)
        assert err["message"]
    # nothing happened to the sandbox
    assert client.get("/v1/sandboxes/" + sandbox["id"]).status == 200


def test_unauthorized_with_other_schemes(sandbox, client):
    """The key sent with another scheme, or 'Bearer' without a key, is refused."""
    anon = Client(None)
    for h in ({"Authorization": "Basic " + client.key}, {"Authorization": "Bearer"},
              {"Authorization": client.key}, {"X-Api-Key": client.key}):
        r = anon.get("/v1/sandboxes/" + sandbox["id"], headers=h)
        assert r.status == 401, (h, r)
        assert r.json()["error"]["code"] == "unauthorized"


def test_other_tenant_cannot_touch_sandbox(sandbox, client, tenant2):
    """A second tenant gets 404 (not 403) for the first tenant's sandbox and an empty list."""
    sid = sandbox["id"]
    sh(client, sid, "echo data > /root/f")
    r = tenant2.get("/v1/sandboxes")
    assert r.status == 200, r
    assert r.json()["sandboxes"] == []
    calls = [
        ("GET", "/v1/sandboxes/" + sid, None),
        ("DELETE", "/v1/sandboxes/" + sid, None),
        ("POST", "/v1/sandboxes/%s/ttl" % sid, {"ttl": 1}),
        ("POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": "true"}),
        ("GET", "/v1/sandboxes/%s/files?path=/root/f" % sid, None),
        ("GET", "/v1/sandboxes/%s/files?path=/root" % sid, None),
        ("PUT", "/v1/sandboxes/%s/files?path=/root/g" % sid, b"evil"),
        ("DELETE", "/v1/sandboxes/%s/files?path=/root/f" % sid, None),
        ("GET", "/v1/sandboxes/%s/archive?path=/root" % sid, None),
        ("PUT", "/v1/sandboxes/%s/archive?path=/root" % sid, b"x" * 1024),
    ]
    for method, path, body in calls:
        r = send(tenant2, method, path, body)
        assert r.status == 404, (method, path, r)
        assert r.json()["error"]["code"] == "not_found", (method, path, r)
        assert "tenant" not in r.json()["error"]["message"].lower()
    # the first tenant's sandbox is untouched
    got = client.get("/v1/sandboxes/" + sid)
    assert got.status == 200 and got.json()["expires_at"] is None
    assert sh(client, sid, "cat /root/f; ls /root").split() == ["data", "f"]
    # and the second tenant's own sandboxes are invisible to the first
    r = tenant2.post("/v1/sandboxes", {"labels": {"owner": "t2"}})
    assert r.status == 201, r
    sid2 = r.json()["id"]
    try:
        assert [s["id"] for s in tenant2.get("/v1/sandboxes").json()["sandboxes"]] == [sid2]
        assert sid2 not in {s["id"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
        assert client.get("/v1/sandboxes/" + sid2).status == 404
        assert client.delete("/v1/sandboxes/" + sid2).status == 404
        assert client.post("/v1/sandboxes/%s/exec" % sid2, {"cmd": "true"}).status == 404
    finally:
        assert tenant2.delete("/v1/sandboxes/" + sid2).status == 204
