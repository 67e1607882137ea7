"""The CLI's commands for a sandbox's processes: checkpoint --memory, rollback to
it, fork -n N, pause, hibernate and resume, run against the test daemon (they
need its working CRIU)."""
import json
import re
import time

import pytest

from test_cli import ID_RE, fb

CKPT_RE = re.compile(r"^ckpt_[0-9a-f]{16}$")
NOBODY = "sbx_0000000000000000"

# prints and writes a counter ten times a second, forever
COUNTER = ("import time\n"
           "i = 0\n"
           "while True:\n"
           "    print(i, flush=True)\n"
           "    with open('/root/n', 'w') as f:\n"
           "        f.write(str(i))\n"
           "    i += 1\n"
           "    time.sleep(0.1)\n")


@pytest.fixture(scope="module", autouse=True)
def criu_works(client):
    deadline = time.time() + 60
    while time.time() < deadline:
        criu = client.get("/v1/info").json().get("criu") or {}
        if criu.get("status") != "checking":
            break
        time.sleep(0.5)
    assert criu.get("available") is True, "the test daemon has no working CRIU: %r" % criu


@pytest.fixture
def made(client):
    """Ids to delete afterwards (sandboxes and checkpoints)."""
    ids = []
    yield ids
    for i in ids:
        client.delete(("/v1/checkpoints/" if i.startswith("ckpt_") else "/v1/sandboxes/") + i)


def new_sandbox(env, made):
    sid = fb(env, "create", check=0).stdout.strip()
    assert ID_RE.match(sid), sid
    made.append(sid)
    return sid


def counter(env, sid):
    return int(fb(env, "exec", sid, "--", "cat", "/root/n", check=0).stdout)


def wait_counter(env, sid, above, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = fb(env, "exec", sid, "--", "cat", "/root/n")
        if p.returncode == 0 and p.stdout.strip().isdigit() and int(p.stdout) > above:
            return int(p.stdout)
        time.sleep(0.1)
    raise AssertionError("counter of %s never passed %d" % (sid, above))


def processes(env, sid):
    out = fb(env, "--json", "ps", sid, check=0).stdout
    return {p["pid"]: p for p in json.loads(out)["processes"]}


def state(env, sid):
    return json.loads(fb(env, "--json", "get", sid, check=0).stdout)["state"]


def test_checkpoint_memory_and_rollback_bring_back_a_running_process(env_made):
    env, made = env_made
    sid = new_sandbox(env, made)
    pid = int(fb(env, "spawn", sid, "--", "python3", "-c", COUNTER, check=0).stdout)
    wait_counter(env, sid, 5)
    cid = fb(env, "checkpoint", sid, "--memory", "--name", "warm", check=0).stdout.strip()
    assert CKPT_RE.match(cid), cid
    made.append(cid)
    at_checkpoint = counter(env, sid)
    files_only = fb(env, "checkpoint", sid, check=0).stdout.strip()
    made.append(files_only)
    ck = json.loads(fb(env, "--json", "checkpoints", sid, check=0).stdout)["checkpoints"]
    assert [(c["id"], c["memory"]) for c in ck] == [(cid, True), (files_only, False)], ck

    # the table says which one has memory
    lines = fb(env, "checkpoints", sid, check=0).stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAME", "PARENT", "MEMORY"], lines
    rows = {l.split()[0]: l.split() for l in lines[1:]}
    assert rows[cid][1] == "warm" and rows[cid][3] == "yes", lines
    assert rows[files_only][1] == "-" and rows[files_only][3] == "no", lines

    # the process goes on well past the checkpoint
    later = wait_counter(env, sid, at_checkpoint + 20)
    out = fb(env, "rollback", sid, cid, check=0).stdout
    assert out == "%s: rolled back to %s\n" % (sid, cid)
    assert state(env, sid) == "running"
    # the same process is back, counting on from where it was at the checkpoint
    # (the checkpoint froze it before at_checkpoint was read: it may lag by one)
    back = counter(env, sid)
    assert back <= at_checkpoint + 1 < later, (back, at_checkpoint, later)
    procs = processes(env, sid)
    assert procs[pid]["state"] == "running", procs
    # its output is that of the checkpoint's instant too: no line past it
    shown = [int(x) for x in fb(env, "logs", sid, str(pid), check=0).stdout.split()]
    assert shown == list(range(len(shown))) and shown[-1] <= back + 1, (shown[-5:], back)
    # and it is alive: it keeps counting
    wait_counter(env, sid, back + 5)
    assert fb(env, "exec", sid, "--", "echo", "ok", check=0).stdout == "ok\n"

    # a files-only checkpoint still ends the processes
    fb(env, "rollback", sid, files_only, check=0)
    assert all(p["state"] != "running" for p in processes(env, sid).values())


def test_fork_prints_running_children_with_their_own_hostnames(env_made):
    env, made = env_made
    sid = new_sandbox(env, made)
    fb(env, "spawn", sid, "--", "python3", "-c", COUNTER, check=0)
    wait_counter(env, sid, 3)
    p = fb(env, "fork", "-n", "2", sid, check=0)
    kids = p.stdout.splitlines()
    made.extend(k for k in kids if ID_RE.match(k))
    assert len(kids) == 2 and all(ID_RE.match(k) for k in kids), p.stdout
    assert len(set(kids + [sid])) == 3
    names = set()
    for k in kids:
        assert state(env, k) == "running"
        names.add(fb(env, "exec", k, "--", "hostname", check=0).stdout.strip())
        # the counter came along and runs on in each child
        wait_counter(env, k, counter(env, k) + 3)
    names.add(fb(env, "exec", sid, "--", "hostname", check=0).stdout.strip())
    assert len(names) == 3, names
    # default count 1; --json gives the whole answer
    out = json.loads(fb(env, "--json", "fork", sid, check=0).stdout)
    made.extend(s["id"] for s in out["sandboxes"])
    assert len(out["sandboxes"]) == 1 and out["sandboxes"][0]["state"] == "running", out


def test_pause_hibernate_resume(env_made):
    env, made = env_made
    sid = new_sandbox(env, made)
    fb(env, "spawn", sid, "--", "python3", "-c", COUNTER, check=0)
    wait_counter(env, sid, 3)

    assert fb(env, "pause", sid, check=0).stdout == "%s: paused\n" % sid
    assert state(env, sid) == "paused"
    p = fb(env, "exec", sid, "--", "true")
    assert p.returncode == 1 and p.stderr.startswith("forkbox: "), p
    assert fb(env, "pause", sid, check=0).stdout == "%s: paused\n" % sid  # no change
    assert fb(env, "resume", sid, check=0).stdout == "%s: running\n" % sid
    assert fb(env, "exec", sid, "--", "echo", "after-pause", check=0).stdout == "after-pause\n"

    before = counter(env, sid)
    assert fb(env, "hibernate", sid, check=0).stdout == "%s: hibernated\n" % sid
    assert state(env, sid) == "hibernated"
    assert fb(env, "hibernate", sid, check=0).stdout == "%s: hibernated\n" % sid
    out = json.loads(fb(env, "--json", "resume", sid, check=0).stdout)
    assert out["id"] == sid and out["state"] == "running", out
    assert fb(env, "exec", sid, "--", "echo", "after-hibernate", check=0).stdout == "after-hibernate\n"
    # the process came back from disk and counts on
    wait_counter(env, sid, before + 5)
    assert fb(env, "resume", sid, check=0).stdout == "%s: running\n" % sid


@pytest.mark.parametrize("args", [
    ["fork", "-n", "0", NOBODY],
    ["fork", "-n", "65", NOBODY],
    ["fork", "-n", "two", NOBODY],
    ["fork", "--count", "-1", NOBODY],
    ["fork"],
    ["fork", "-n", "2"],
    ["fork", NOBODY, "sbx_1111111111111111"],
    ["fork", "../x"],
    ["pause"],
    ["hibernate"],
    ["resume"],
    ["resume", "a/b"],
    ["pause", NOBODY, NOBODY],
    ["checkpoint", "--memory"],
    ["checkpoint", "--memory", "--bogus", NOBODY],
])
def test_usage_errors_exit_2(cli_env, args):
    p = fb(cli_env, *args, timeout=30)
    assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("forkbox"), p.stderr
    assert "Try 'forkbox %s --help'." % args[0] in p.stderr, p.stderr
    assert p.stdout == ""


@pytest.mark.parametrize("args", [
    ["fork", NOBODY],
    ["fork", "-n", "3", NOBODY],
    ["hibernate", NOBODY],
    ["checkpoint", "--memory", NOBODY],
])
def test_daemon_errors_exit_1(cli_env, args):
    p = fb(cli_env, *args)
    assert p.returncode == 1, (args, p)
    assert p.stderr.startswith("forkbox: ") and "not found" in p.stderr, p.stderr
    assert p.stdout == ""


def test_memory_refused_for_a_paused_sandbox(env_made):
    env, made = env_made
    sid = new_sandbox(env, made)
    fb(env, "pause", sid, check=0)
    p = fb(env, "checkpoint", "--memory", sid)
    assert p.returncode == 1 and p.stderr.startswith("forkbox: ") and "running" in p.stderr, p
    fb(env, "resume", sid, check=0)


@pytest.fixture
def env_made(cli_env, made):
    return cli_env, made
