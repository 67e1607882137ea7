"""Isolation as seen from inside a sandbox and from the host: uid ranges,
the shared template, /proc /sys /dev, forkbox-init's integrity, and the
posture report."""
import hashlib
import json
import os
import sqlite3
import subprocess
import time

import pytest

from conftest import BUILD, CLI, STATE, sh

TEMPLATE_ROOTFS = os.path.join(STATE, "templates", "default", "rootfs")


def uid_base(client, sid):
    return int(sh(client, sid, ["cat", "/proc/self/uid_map"]).split()[1])


def stored_bases():
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(STATE, "forkbox.db"), uri=True)
    try:
        return dict(db.execute("SELECT id, uid_base FROM sandboxes").fetchall())
    finally:
        db.close()


# ---- 1. uid ranges and the shared template ----------------------------------

def test_uid_ranges_recorded_and_disjoint(make, client):
    """Every sandbox's range is in the store, matches its uid_map, and overlaps no other."""
    ids = [make()["id"] for _ in range(3)] + [make(resources={"disk_mb": 64})["id"]]
    stored = stored_bases()
    for sid in ids:
        assert stored[sid] == uid_base(client, sid)
    bases = sorted(stored.values())
    for a, b in zip(bases, bases[1:]):
        assert b - a >= 65536, bases


def test_uid_range_not_reused_while_any_process_runs_as_it(make, client):
    """A range comes back only when nothing runs as it any more: a host process
    still running as a deleted sandbox's uid keeps it out of use."""
    sid = make(resources={"disk_mb": 64})["id"]  # not from the warm pool: allocated now
    base = uid_base(client, sid)
    client.delete("/v1/sandboxes/" + sid)
    deadline = time.time() + 10
    while time.time() < deadline and base in stored_bases().values():
        time.sleep(0.05)
    assert base not in stored_bases().values()
    squatter = subprocess.Popen(["setpriv", "--reuid", str(base), "--regid", str(base), "--clear-groups",
                                 "sleep", "60"])
    try:
        time.sleep(0.2)
        got = [uid_base(client, make(resources={"disk_mb": 64})["id"]) for _ in range(3)]
        assert base not in got, (base, got)
    finally:
        squatter.kill()
        squatter.wait()


def test_template_shared_not_copied(make, client):
    """The template stays root-owned on the host, appears root-owned inside, and
    a new sandbox's writable layer holds none of it."""
    sid = make()["id"]
    st = os.stat(os.path.join(TEMPLATE_ROOTFS, "usr/bin/python3.11"))
    assert (st.st_uid, st.st_gid) == (0, 0)
    assert sh(client, sid, ["stat", "-c", "%u:%g", "/usr/bin/python3.11"]).strip() == "0:0"
    upper = os.path.join(STATE, "sandboxes", sid, "layer", "upper")
    total = 0
    for root, dirs, files in os.walk(upper):
        total += sum(os.lstat(os.path.join(root, f)).st_size for f in files)
    assert total < 1 << 20, total
    # writes inside go to the layer, owned by the sandbox's range on the host
    sh(client, sid, "echo hi > /usr/local/new-file")
    st = os.lstat(os.path.join(upper, "usr/local/new-file"))
    assert st.st_uid == uid_base(client, sid)


# ---- 3. /proc, /sys, /dev ------------------------------------------------------

MASKED_FILES = ["/proc/kcore", "/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
                "/proc/sysrq-trigger", "/proc/kmsg"]
MASKED_DIRS = ["/proc/acpi", "/proc/scsi", "/sys/firmware", "/proc/driver"]
READONLY = ["/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/core_pattern",
            "/proc/irq/default_smp_affinity", "/sys/kernel/mm/transparent_hugepage/enabled"]


def test_sensitive_proc_files_masked(sandbox, client):
    """Masked /proc files read as empty."""
    for path in MASKED_FILES:
        r = client.exec(sandbox["id"], ["sh", "-c", "test ! -e %s || head -c 64 %s | wc -c" % (path, path)])
        assert r["exit_code"] == 0, (path, r)
        assert r["stdout"].strip() in ("", "0"), (path, r)


def test_sensitive_dirs_masked(sandbox, client):
    """Masked directories are empty and cannot be written."""
    for path in MASKED_DIRS:
        r = client.exec(sandbox["id"], ["sh", "-c", "test ! -e %s || ls -A %s" % (path, path)])
        assert r["exit_code"] == 0 and r["stdout"] == "", (path, r)
        r = client.exec(sandbox["id"], ["touch", path + "/x"])
        assert r["exit_code"] != 0, (path, r)


def test_proc_sys_and_sys_read_only(sandbox, client):
    """Writes to /proc/sys, /proc/irq and /sys fail with a read-only filesystem."""
    for path in READONLY:
        r = client.exec(sandbox["id"], ["sh", "-c", "test ! -e %s || echo 1 > %s" % (path, path)])
        assert r["exit_code"] != 0 or "No such file" in r["stderr"], (path, r)
        if r["exit_code"] != 0:
            assert "Read-only file system" in r["stderr"] or "Permission denied" in r["stderr"], (path, r)
    assert client.exec(sandbox["id"], ["touch", "/sys/x"])["exit_code"] != 0
    mounts = sh(client, sandbox["id"], ["cat", "/proc/self/mountinfo"])
    for line in mounts.splitlines():
        f = line.split()
        if f[4] in ("/proc/sys", "/sys", "/proc/bus", "/proc/fs", "/proc/irq"):
            assert "ro" in f[5].split(","), line
    # the host's values are untouched
    with open("/proc/sys/kernel/core_pattern") as fh:
        assert fh.read().strip() != "1"


def test_dev_holds_only_the_basics(sandbox, client):
    """/dev has null, zero, full, random, urandom, tty, ptmx, pts, shm and the fd links; nodev."""
    names = set(sh(client, sandbox["id"], ["ls", "-A", "/dev"]).split())
    assert names == {"null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
                     "stdout", "stderr"}, names
    for node in ("null", "zero", "full", "random", "urandom", "tty"):
        assert sh(client, sandbox["id"], ["stat", "-c", "%F", "/dev/" + node]).strip() == "character special file"
    r = client.exec(sandbox["id"], ["mknod", "/dev/sda", "b", "8", "0"])
    assert r["exit_code"] != 0, r
    mounts = sh(client, sandbox["id"], ["cat", "/proc/self/mountinfo"])
    dev = [l.split() for l in mounts.splitlines() if l.split()[4] == "/dev"]
    assert dev and "nodev" in dev[0][5].split(","), dev


# ---- 4. forkbox-init cannot be changed or used ----------------------------------

def init_host_pid(client, sid):
    """The host pid of a sandbox's init: the parent of a marker process."""
    out = sh(client, sid, "sleep 300 >/dev/null 2>&1 & echo $!").strip()
    inside = int(out)
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/status" % p) as f:
                status = f.read()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("NSpid:"):
                ns = line.split()[1:]
                if len(ns) == 2 and int(ns[1]) == inside and p == ns[0]:
                    ppid = int([l for l in status.splitlines() if l.startswith("PPid:")][0].split()[1])
                    # the worker that ran the shell may be the parent: walk up to the pid-ns init
                    while True:
                        with open("/proc/%d/status" % ppid) as f2:
                            st2 = f2.read()
                        nspid = [l for l in st2.splitlines() if l.startswith("NSpid:")][0].split()[1:]
                        if nspid[-1] == "1":
                            return ppid
                        ppid = int([l for l in st2.splitlines() if l.startswith("PPid:")][0].split()[1])
    raise AssertionError("init not found")


def test_init_binary_cannot_be_replaced(sandbox, client):
    """Root inside cannot write, truncate or reopen /proc/1/exe or /proc/self/exe of init,
    and init keeps running the sealed copy of the built binary."""
    sid = sandbox["id"]
    code = r"""
import os, errno
results = []
for path in ("/proc/1/exe", "/proc/1/mem", "/proc/1/fd", "/proc/1/root/."):
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY):
        try:
            fd = os.open(path, flags)
            results.append("OPEN %s %d" % (path, flags)); os.close(fd)
        except OSError as e:
            results.append("denied %s %s" % (path, errno.errorcode[e.errno]))
# the numbers may be listed (the dir belongs to the sandbox's root); what
# they point to must stay out of reach
for fd in os.listdir("/proc/1/fd"):
    for what, fn in (("readlink", lambda p: os.readlink(p)), ("reopen", lambda p: os.close(os.open(p, os.O_RDWR)))):
        try:
            fn("/proc/1/fd/" + fd)
            results.append("LEAK %s /proc/1/fd/%s" % (what, fd))
        except OSError as e:
            results.append("denied %s /proc/1/fd/%s %s" % (what, fd, errno.errorcode[e.errno]))
print("\n".join(results))
"""
    out = sh(client, sid, ["python3", "-c", code])
    for line in out.splitlines():
        # opening the fd directory itself is harmless as long as it cannot be listed
        if line.startswith("LEAK") or (line.startswith("OPEN") and line != "OPEN /proc/1/fd 0"):
            raise AssertionError(out)
    pid = init_host_pid(client, sid)
    exe = os.readlink("/proc/%d/exe" % pid)
    assert exe.startswith("/memfd:forkbox-init"), exe
    with open("/proc/%d/exe" % pid, "rb") as f:
        running = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(BUILD, "src/init/forkbox-init"), "rb") as f:
        built = hashlib.sha256(f.read()).hexdigest()
    assert running == built
    # and it still answers
    assert sh(client, sid, "echo ok") == "ok\n"


def test_sandbox_processes_hold_no_channel_to_init_or_daemon(sandbox, client):
    """A command's fds are pipes and files, never a socket to init or the daemon,
    and init's control socket path does not exist inside."""
    sid = sandbox["id"]
    sh(client, sid, "nohup sleep 300 >/dev/null 2>&1 &")
    out = sh(client, sid, "for p in /proc/[0-9]*; do [ $p = /proc/1 ] && continue; "
                          "ls -l $p/fd 2>/dev/null; done")
    assert "socket:" not in out, out
    r = client.exec(sid, "ls /run/forkbox* /var/lib/forkbox* 2>&1; find / -xdev -name init.sock 2>/dev/null")
    assert "init.sock" not in r["stdout"], r


# ---- 7. posture ------------------------------------------------------------------

def test_info_reports_posture(client):
    """/v1/info lists each mitigation with whether it is active and what the host lacks."""
    info = client.get("/v1/info").json()
    sec = info["security"]
    mit = {m["name"]: m for m in sec["mitigations"]}
    for name in ("user_namespace", "namespaces", "idmapped_template", "no_new_privs", "capabilities", "seccomp",
                 "proc_sys_masks", "minimal_dev", "init_sealed_memfd", "cgroup_limits", "disk_limits", "rlimits"):
        assert name in mit, name
        assert isinstance(mit[name]["active"], bool) and mit[name]["detail"]
    assert mit["seccomp"]["active"] and "allowlist" in mit["seccomp"]["detail"]
    assert mit["disk_limits"]["active"] is True
    assert all(isinstance(m, str) for m in sec["missing"])
    with open("/proc/self/mountinfo") as f:
        v1_host = not any(l.split()[4] == "/sys/fs/cgroup" and " - cgroup2 " in l for l in f)
    if v1_host:
        assert any("cgroup v2" in m for m in sec["missing"]), sec["missing"]
    for h in sec["host_settings"]:
        assert set(h) == {"sysctl", "value", "recommended", "ok", "why"}
    assert info["missing"] == sec["missing"]


def test_cli_info_shows_posture(daemon, cli_env):
    """`forkbox info` prints the mitigations as a checklist."""
    r = subprocess.run([CLI, "info"], env=cli_env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "security mitigations:" in r.stdout
    assert "[on ] seccomp: allowlist" in r.stdout
    assert "[on ] disk_limits:" in r.stdout
    assert "missing on this host:" in r.stdout
    r = subprocess.run([CLI, "--json", "info"], env=cli_env, capture_output=True, text=True, timeout=30)
    assert json.loads(r.stdout)["security"]["mitigations"]
