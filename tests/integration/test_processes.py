"""Background processes: start, list, status, stdin, signals, terminals, and
output that is durable (resumable from any offset, by many followers, across
disconnects and a SIGKILLed daemon) and bounded (older output dropped with a
marker)."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import CLI, SOCKET, Client, UnixHTTPConnection
from test_lifecycle import tenant2  # noqa: F401 (a fixture)

# numbered lines, one every `gap` seconds, forever or `n` of them
COUNTER = "import sys,time\nn=int(sys.argv[1]); gap=float(sys.argv[2])\ni=0\n" \
          "while n < 0 or i < n:\n    print('line %06d' % i, flush=True); i += 1; time.sleep(gap)\n"


def start(client, sid, expect=201, **body):
    r = client.post("/v1/sandboxes/%s/processes" % sid, body)
    assert r.status == expect, r
    return r.json()


def status(client, sid, pid):
    r = client.get("/v1/sandboxes/%s/processes/%d" % (sid, pid))
    assert r.status == 200, r
    return r.json()


def wait_state(client, sid, pid, state="exited", timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = status(client, sid, pid)
        if st["state"] == state:
            return st
        time.sleep(0.05)
    raise AssertionError("process %d never reached %s: %s" % (pid, state, st))


def events(client, sid, pid, offset=0, follow=False, sse=False, timeout=120):
    """The whole output stream as a list of events (NDJSON or SSE)."""
    headers = {"Accept": "text/event-stream"} if sse else {}
    r = client.get("/v1/sandboxes/%s/processes/%d/output?offset=%d&follow=%s"
                   % (sid, pid, offset, "true" if follow else "false"), headers=headers, timeout=timeout)
    assert r.status == 200, r
    if not sse:
        return [json.loads(l) for l in r.body.decode().splitlines()]
    out = []
    for block in r.body.decode().split("\n\n"):
        fields = dict(l.split(": ", 1) for l in block.splitlines() if l and not l.startswith(":"))
        if "data" in fields:
            ev = json.loads(fields["data"])
            ev["_id"] = int(fields["id"])
            out.append(ev)
    return out


def text(evs, kinds=("stdout", "stderr", "pty")):
    return "".join(e.get("data", "") for e in evs if e["type"] in kinds)


def put_file(client, sid, path, data):
    r = client.put("/v1/sandboxes/%s/files?path=%s" % (sid, path), raw=data.encode())
    assert r.status == 201, r


def test_start_list_status_exit_code_and_env(make, client):
    """A process starts with tag, env, cwd and user; it is listed; its status gives the exit code;
    stdout and stderr keep their order and their stream."""
    sid = make(env={"FROM_SANDBOX": "s"})["id"]
    client.exec(sid, ["mkdir", "-p", "/srv/work"])
    p = start(client, sid, cmd="echo out:$FROM_SANDBOX:$MINE:$(pwd):$(id -u); echo err >&2; exit 3",
              tag="job", env={"MINE": "m"}, cwd="/srv/work", user="nobody")
    assert p["state"] == "running" and p["tag"] == "job" and p["pid"] > 1, p
    st = wait_state(client, sid, p["pid"])
    assert st["exit_code"] == 3 and st["signal"] is None and st["ended_at"], st
    evs = events(client, sid, p["pid"])
    assert [e["type"] for e in evs] == ["stdout", "stderr", "exit"], evs
    assert evs[0]["data"] == "out:s:m:/srv/work:65534\n" and evs[1]["data"] == "err\n"
    assert evs[2]["exit_code"] == 3 and evs[2]["offset"] == st["output_bytes"]
    listed = client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"]
    assert [(x["pid"], x["tag"], x["state"]) for x in listed] == [(p["pid"], "job", "exited")]


def test_signal_stdin_and_running_state(make, client):
    sid = make()["id"]
    cat = start(client, sid, cmd=["python3", "-c", "import sys\nfor l in sys.stdin: print('got', l.strip(), flush=True)"])
    assert status(client, sid, cat["pid"])["state"] == "running"
    base = "/v1/sandboxes/%s/processes/%d" % (sid, cat["pid"])
    assert client.post(base + "/stdin", raw=b"one\n").status == 204
    assert client.post(base + "/stdin?eof=true", raw=b"two\n").status == 204
    st = wait_state(client, sid, cat["pid"])
    assert st["exit_code"] == 0
    assert text(events(client, sid, cat["pid"])) == "got one\ngot two\n"
    # stdin of a finished process, and signals to it, are a conflict
    assert client.post(base + "/stdin", raw=b"x").status == 409
    assert client.post(base + "/signal", {"signal": "TERM"}).status == 409

    sleeper = start(client, sid, cmd=["sleep", "1000"], tag="sleeper")
    r = client.post("/v1/sandboxes/%s/processes/%d/signal" % (sid, sleeper["pid"]), {"signal": "SIGKILL"})
    assert r.status == 204, r
    st = wait_state(client, sid, sleeper["pid"])
    assert st["signal"] == "KILL" and st["exit_code"] == 137, st


def test_pty_size_resize_and_input(make, client):
    sid = make()["id"]
    script = "stty size; read a; stty size; echo typed=$a"
    p = start(client, sid, cmd=script, pty={"cols": 100, "rows": 30})
    assert p["pty"] is True
    base = "/v1/sandboxes/%s/processes/%d" % (sid, p["pid"])
    deadline = time.time() + 10
    while "30 100" not in text(events(client, sid, p["pid"])) and time.time() < deadline:
        time.sleep(0.05)
    assert client.post(base + "/resize", {"cols": 132, "rows": 43}).status == 204
    assert client.post(base + "/stdin", raw=b"hello\r").status == 204
    wait_state(client, sid, p["pid"])
    evs = events(client, sid, p["pid"])
    assert {e["type"] for e in evs} == {"pty", "exit"}, evs
    out = text(evs)
    assert "30 100" in out and "43 132" in out and "typed=hello" in out, out
    # resize of a process without a terminal
    plain = start(client, sid, cmd=["sleep", "100"])
    r = client.post("/v1/sandboxes/%s/processes/%d/resize" % (sid, plain["pid"]), {"cols": 10, "rows": 10})
    assert r.status == 400, r


def test_bad_requests(make, client, tenant2):
    sid = make()["id"]
    for body in ({}, {"cmd": []}, {"cmd": "true", "timeout": 5}, {"cmd": "true", "pty": "yes"},
                 {"cmd": "true", "pty": {"cols": 0}}, {"cmd": "true", "tag": "x" * 65}, {"cmd": "true", "bogus": 1},
                 {"cmd": "true", "user": "no-such-user"}):
        r = client.post("/v1/sandboxes/%s/processes" % sid, body)
        assert r.status == 400, (body, r)
        assert r.json()["error"]["code"] == "bad_request"
    r = client.post("/v1/sandboxes/%s/processes" % sid, {"cmd": ["/no/such/binary"]})
    assert r.status >= 400 and "no/such/binary" in r.json()["error"]["message"], r
    p = start(client, sid, cmd=["sleep", "100"])
    base = "/v1/sandboxes/%s/processes/" % sid
    assert client.get(base + "99999").status == 404
    assert client.get(base + "abc").status == 400
    assert client.get(base + "%d/output?offset=-1" % p["pid"]).status == 400
    assert client.get(base + "%d/output?follow=maybe" % p["pid"]).status == 400
    for body in ({"signal": "NOPE"}, {"signal": 0}, {"signal": 99}, {}, {"signal": "TERM", "x": 1}):
        assert client.post(base + "%d/signal" % p["pid"], body).status == 400, body
    assert client.post(base + "%d/resize" % p["pid"], {"cols": 5000, "rows": 1}).status == 400
    try:  # refused from the declared length, before the body is read
        assert client.post(base + "%d/stdin" % p["pid"], raw=b"x" * (2 << 20)).status == 413
    except (BrokenPipeError, ConnectionResetError):
        pass
    # another tenant sees nothing of it
    assert tenant2.get(base + "%d" % p["pid"]).status == 404
    assert tenant2.get("/v1/sandboxes/%s/processes" % sid).status == 404
    assert tenant2.post(base + "%d/signal" % p["pid"], {"signal": "KILL"}).status == 404
    assert status(client, sid, p["pid"])["state"] == "running"


def test_output_resumes_from_any_offset_ndjson_and_sse(make, client):
    sid = make()["id"]
    put_file(client, sid, "/root/counter.py", COUNTER)
    p = start(client, sid, cmd=["python3", "/root/counter.py", "200", "0"])
    wait_state(client, sid, p["pid"])
    full = text(events(client, sid, p["pid"]))
    assert full == "".join("line %06d\n" % i for i in range(200))
    for off in (0, 1, 5, 12, 1000, len(full) - 1, len(full)):
        evs = events(client, sid, p["pid"], offset=off)
        assert text(evs) == full[off:], off
        assert evs[-1]["type"] == "exit" and evs[-1]["offset"] == len(full)
    # SSE: each event's id is the offset to resume from; Last-Event-ID resumes
    sse = events(client, sid, p["pid"], sse=True)
    assert text(sse) == full and sse[-1]["type"] == "exit"
    mid = sse[0]["_id"]
    r = client.get("/v1/sandboxes/%s/processes/%d/output" % (sid, p["pid"]),
                   headers={"Accept": "text/event-stream", "Last-Event-ID": str(mid)})
    assert r.status == 200 and "line 000000" not in r.body.decode()


def test_many_followers_and_reconnects_lose_nothing(make, client):
    """Eight followers of one live process all get every byte; a follower that hangs up mid-stream and
    comes back at its last offset gets exactly the rest."""
    sid = make()["id"]
    put_file(client, sid, "/root/counter.py", COUNTER)
    p = start(client, sid, cmd=["python3", "/root/counter.py", "300", "0.005"])
    results = [None] * 8

    def follow(i):
        results[i] = text(events(client, sid, p["pid"], follow=True))

    threads = [threading.Thread(target=follow, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    # the reconnecting follower: reads a little, drops the connection, resumes
    got, offset, cuts = "", 0, 0
    while True:
        c = UnixHTTPConnection(SOCKET, timeout=60)
        c.request("GET", "/v1/sandboxes/%s/processes/%d/output?offset=%d&follow=true" % (sid, p["pid"], offset),
                  headers={"Authorization": "Bearer " + client.key})
        r = c.getresponse()
        done = False
        for _ in range(3):
            line = r.readline()
            if not line:
                break
            ev = json.loads(line)
            if ev["type"] == "exit":
                done = True
                break
            if ev["type"] == "stdout":
                assert ev["offset"] == offset, (ev, offset)
                got += ev["data"]
                offset += len(ev["data"].encode())
        c.close()  # mid-stream
        cuts += 1
        if done:
            break
    for t in threads:
        t.join(120)
    expected = "".join("line %06d\n" % i for i in range(300))
    assert all(r == expected for r in results), [len(r or "") for r in results]
    assert got == expected and cuts > 3


def test_output_is_bounded_with_a_dropped_marker(make, client):
    sid = make()["id"]
    # 4 MiB of numbered 16-byte lines, keeping 256 KiB
    gen = "import sys\nw=sys.stdout.write\nfor i in range(262144): w('%015d\\n' % i)\n"
    put_file(client, sid, "/root/gen.py", gen)
    p = start(client, sid, cmd=["python3", "/root/gen.py"], max_output_bytes=256 << 10)
    st = wait_state(client, sid, p["pid"])
    assert st["output_bytes"] == 4 << 20 and st["output_dropped"] >= (4 << 20) - (2 << 20), st
    evs = events(client, sid, p["pid"])
    assert evs[0]["type"] == "dropped" and evs[0]["offset"] == 0 and evs[0]["bytes"] == st["output_dropped"], evs[0]
    rest = text(evs)
    assert len(rest) == (4 << 20) - st["output_dropped"] >= 256 << 10
    start_line = st["output_dropped"] // 16
    assert rest == "".join("%015d\n" % i for i in range(start_line, 262144))
    # the sandbox's disk holds only what is kept
    du = client.exec(sid, ["true"])  # the sandbox still works
    assert du["exit_code"] == 0


def test_processes_survive_daemon_kill(daemon, make, client):
    """kill -9 of forkboxd while processes run and a client follows: after a restart every process is
    still there, the output written during the outage is complete, and the exit code of a process that
    finished meanwhile is known."""
    sid = make(ttl=0)["id"]
    put_file(client, sid, "/root/counter.py", COUNTER)
    long = start(client, sid, cmd=["python3", "/root/counter.py", "-1", "0.02"], tag="long")
    short = start(client, sid, cmd="sleep 1.5; echo done; exit 7", tag="short")
    got = []

    def follow():
        try:
            for ev in events(client, sid, long["pid"], follow=True, timeout=30):
                got.append(ev)
        except Exception:  # the daemon dies under it
            pass

    t = threading.Thread(target=follow)
    t.start()
    time.sleep(0.5)
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    daemon.proc = None
    t.join(30)
    time.sleep(2.5)  # the short one finishes, the long one writes on
    daemon.start()
    assert client.get("/v1/sandboxes/" + sid).json()["state"] == "running"
    listed = {x["tag"]: x for x in client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"]}
    assert listed["long"]["state"] == "running" and listed["long"]["pid"] == long["pid"], listed
    assert listed["short"]["state"] == "exited" and listed["short"]["exit_code"] == 7, listed
    assert text(events(client, sid, short["pid"])) == "done\n"
    # resume where the dead stream stopped: nothing missing, nothing twice
    seen = text(got)
    offset = len(seen.encode())
    r = client.post("/v1/sandboxes/%s/processes/%d/signal" % (sid, long["pid"]), {"signal": "TERM"})
    assert r.status == 204
    wait_state(client, sid, long["pid"])
    rest = events(client, sid, long["pid"], offset=offset)
    full = seen + text(rest)
    n = full.count("\n")
    assert n > 100 and full == "".join("line %06d\n" % i for i in range(n)), full[-200:]
    assert rest[-1]["type"] == "exit" and rest[-1]["signal"] == "TERM"


@pytest.mark.skipif(os.environ.get("FORKBOX_SOAK_S") == "0", reason="soak disabled")
def test_no_session_cap_across_many_reconnects(make, client):
    """A ttl-0 sandbox with a running process stays up for minutes while clients come and go; every
    reconnect continues the output exactly where the last one stopped."""
    soak = float(os.environ.get("FORKBOX_SOAK_S", "180"))
    sid = make(ttl=0)["id"]
    put_file(client, sid, "/root/counter.py", COUNTER)
    p = start(client, sid, cmd=["python3", "/root/counter.py", "-1", "0.1"])
    offset, got, rounds = 0, "", 0
    end = time.time() + soak
    while time.time() < end:
        fresh = Client(client.key)  # a new client each time
        evs = events(fresh, sid, p["pid"], offset=offset)
        assert evs[-1]["type"] == "end", evs[-1]
        chunk = text(evs)
        got += chunk
        offset += len(chunk.encode())
        assert fresh.get("/v1/sandboxes/" + sid).json()["state"] == "running"
        rounds += 1
        time.sleep(2)
    n = got.count("\n")
    assert got == "".join("line %06d\n" % i for i in range(n))
    assert n >= soak * 5 and rounds >= soak / 4, (n, rounds)
    assert status(client, sid, p["pid"])["state"] == "running"


def test_cli_spawn_ps_logs_kill(make, client, cli_env):
    sid = make()["id"]

    def cli(*args, **kw):
        return subprocess.run([CLI] + list(args), env=cli_env, capture_output=True, text=True, timeout=60, **kw)

    r = cli("spawn", "--tag", "demo", sid, "--", "sh", "-c", "echo one; sleep 0.5; echo two >&2; exit 4")
    assert r.returncode == 0, r.stderr
    pid = int(r.stdout)
    r = cli("ps", sid)
    assert r.returncode == 0 and "demo" in r.stdout and str(pid) in r.stdout, r
    r = cli("logs", "-f", sid, str(pid))
    assert (r.returncode, r.stdout, r.stderr) == (4, "one\n", "two\n"), r
    r = cli("logs", "--offset", "2", sid, str(pid))
    assert r.stdout == "e\n", r
    sleeper = int(cli("spawn", sid, "--", "sleep", "100").stdout)
    assert cli("kill", "-s", "INT", sid, str(sleeper)).returncode == 0
    assert wait_state(client, sid, sleeper)["signal"] == "INT"
    r = cli("ps", "--json", sid)
    assert {p["pid"]: p["state"] for p in json.loads(r.stdout)["processes"]} == {pid: "exited", sleeper: "exited"}
    r = cli("logs", sid, "999999")
    assert r.returncode == 1 and "no process" in r.stderr, r
    assert cli("kill", sid, "abc").returncode == 2


def test_a_follower_does_not_hold_up_a_graceful_stop(daemon, make, client):
    """SIGTERM to forkboxd while a client follows a silent process that runs on: the daemon stops at
    once (not at the stream's next heartbeat or its kill timeout), the stream ends unfinished, and
    after a restart the process is still there."""
    sid = make(ttl=0)["id"]
    p = start(client, sid, cmd=["sleep", "1000"])
    t = threading.Thread(target=lambda: pytest.raises(Exception, events, client, sid, p["pid"], follow=True,
                                                      timeout=60))
    t.start()
    time.sleep(1)
    started = time.time()
    assert daemon.stop() == 0
    assert time.time() - started < 5
    t.join(30)
    daemon.start()
    assert status(client, sid, p["pid"])["state"] == "running"
