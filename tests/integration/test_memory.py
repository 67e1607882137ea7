"""Memory state: hibernate/resume, memory checkpoints and rollback to them, new sandboxes
from them, and fork.  Every case checks that processes go on where they were: a Python
interpreter holding state in memory, an HTTP server holding a listening socket, and a
process half-way through writing a file."""
import json
import os
import re
import threading
import time

import pytest

from conftest import STATE, sh
from test_checkpoints import checkpoint, ckpts, rollback  # noqa: F401 (fixture)
from test_processes import COUNTER, events, put_file, start, status

CKPT_DIR = os.path.join(STATE, "checkpoints")

# An HTTP server whose state lives only in its memory: a random secret drawn at start
# and a counter that POST increments.  GET answers {"secret", "count", "hostname"}.
SERVER = r"""
import http.server, json, os, socket
state = {"secret": os.urandom(8).hex(), "count": 0, "heap": bytearray(os.urandom(1 << 20))}
class H(http.server.BaseHTTPRequestHandler):
    def _send(self):
        body = json.dumps({"secret": state["secret"], "count": state["count"],
                           "hostname": socket.gethostname(),
                           "heap": hash(bytes(state["heap"]))}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self): self._send()
    def do_POST(self): state["count"] += 1; self._send()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""

# Writes numbered lines into /root/out.txt, one every 20 ms, keeping the file open: it
# is always somewhere in the middle of writing it.
WRITER = r"""
import time
f = open("/root/out.txt", "w", buffering=1)
i = 0
while True:
    f.write("line %07d\n" % i); i += 1; time.sleep(0.02)
"""


def ask(client, sid, method="GET"):
    """The server's answer, fetched from inside the sandbox (its loopback)."""
    code = ("import urllib.request,sys; r=urllib.request.Request('http://127.0.0.1:8000/', method='%s',"
            " data=b'' if '%s'=='POST' else None); print(urllib.request.urlopen(r, timeout=10).read().decode())"
            % (method, method))
    for _ in range(100):
        r = client.exec(sid, ["python3", "-c", code])
        if r["exit_code"] == 0:
            return json.loads(r["stdout"])
        time.sleep(0.1)
    raise AssertionError("server in %s does not answer: %r" % (sid, r))


def setup_workload(client, sid):
    put_file(client, sid, "/root/server.py", SERVER)
    put_file(client, sid, "/root/writer.py", WRITER)
    srv = start(client, sid, cmd=["python3", "/root/server.py"], tag="server")
    wr = start(client, sid, cmd=["python3", "/root/writer.py"], tag="writer")
    first = ask(client, sid)
    return srv["pid"], wr["pid"], first


def lines_of(client, sid):
    return sh(client, sid, "cat /root/out.txt").splitlines()


def assert_contiguous(lines):
    """Numbered lines with no gap, no repeat and no torn line."""
    assert lines, "no lines"
    for n, line in enumerate(lines):
        assert re.fullmatch(r"line \d{7}", line), (n, line)
        assert int(line[5:]) == n, (n, line)


def info(client, sid):
    r = client.get("/v1/sandboxes/" + sid)
    assert r.status == 200, r
    return r.json()


def wait_more_lines(client, sid, than, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = lines_of(client, sid)
        if len(got) > than:
            return got
        time.sleep(0.1)
    raise AssertionError("the writer in %s stopped at %d lines" % (sid, than))


def test_hibernate_resume_processes_continue(make, client):
    sid = make()["id"]
    srv, wr, first = setup_workload(client, sid)
    assert ask(client, sid, "POST")["count"] == 1
    before = lines_of(client, sid)
    used = info(client, sid)["usage"]["memory_bytes"]
    assert used > 1 << 20

    got = client.post("/v1/sandboxes/%s/hibernate" % sid)
    assert got.status == 200, got
    h = got.json()
    assert h["state"] == "hibernated" and "resume" in h["state_reason"], h
    # its RAM is freed: no cgroup, no usage, no process of it on the host
    assert "memory_bytes" not in h.get("usage", {}), h
    # hibernating twice is not an error; commands wait for a resume
    assert client.post("/v1/sandboxes/%s/hibernate" % sid).json()["state"] == "hibernated"
    r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert r.status == 409 and "hibernated" in r.json()["error"]["message"], r
    listed = {s["id"]: s["state"] for s in client.get("/v1/sandboxes").json()["sandboxes"]}
    assert listed[sid] == "hibernated"

    got = client.post("/v1/sandboxes/%s/resume" % sid)
    assert got.status == 200 and got.json()["state"] == "running", got
    # the server's memory and its listening socket came back
    back = ask(client, sid)
    assert back["secret"] == first["secret"] and back["count"] == 1 and back["heap"] == first["heap"]
    assert ask(client, sid, "POST")["count"] == 2
    # and from the host, through the port proxy
    r = client.get("/v1/sandboxes/%s/ports/8000/" % sid)
    assert r.status == 200 and json.loads(r.body)["secret"] == first["secret"], r
    # the writer goes on in the same file, from where it was
    after = wait_more_lines(client, sid, len(before) + 5)
    assert after[:len(before)] == before
    assert_contiguous(after)
    for pid in (srv, wr):
        assert status(client, sid, pid)["state"] == "running"
    # twice more: a restored sandbox hibernates again
    for _ in range(2):
        assert client.post("/v1/sandboxes/%s/hibernate" % sid).json()["state"] == "hibernated"
        assert client.post("/v1/sandboxes/%s/resume" % sid).json()["state"] == "running"
    assert ask(client, sid)["secret"] == first["secret"]
    assert_contiguous(wait_more_lines(client, sid, len(after)))


def test_memory_checkpoint_rollback_restores_memory_files_and_processes(make, client, ckpts):
    sid = make()["id"]
    srv, wr, first = setup_workload(client, sid)
    ask(client, sid, "POST")
    counter = start(client, sid, cmd=["python3", "-c", COUNTER, "-1", "0.05"])["pid"]
    sh(client, sid, "echo v1 > /root/note")
    time.sleep(0.3)
    ck = checkpoint(client, sid, name="warm", memory=True)
    ckpts.append(ck["id"])
    assert ck["memory"] is True and ck["name"] == "warm", ck
    assert os.path.isdir(os.path.join(CKPT_DIR, ck["id"], "criu"))
    at_ck = lines_of(client, sid)
    out_at_ck = status(client, sid, counter)["output_bytes"]
    # the sandbox ran on through the checkpoint
    assert ask(client, sid)["count"] == 1
    wait_more_lines(client, sid, len(at_ck) + 20)

    # change everything: memory, files, processes
    for _ in range(3):
        ask(client, sid, "POST")
    sh(client, sid, "echo v2 > /root/note && touch /root/later")
    late = start(client, sid, cmd=["sleep", "1000"])["pid"]

    # a follower of a process that the rollback ends gets a clean end of stream
    follow = {}

    def follower():
        follow["ev"] = events(client, sid, late, follow=True, timeout=60)

    t = threading.Thread(target=follower)
    t.start()
    time.sleep(0.5)
    got = rollback(client, sid, ck["id"])
    assert got["id"] == sid and got["state"] == "running", got
    t.join(30)
    assert not t.is_alive(), "the follower never got an end of stream"
    assert follow["ev"][-1]["type"] in ("exit", "lost", "end"), follow

    back = ask(client, sid)
    assert back["secret"] == first["secret"] and back["count"] == 1 and back["heap"] == first["heap"], back
    assert sh(client, sid, "cat /root/note") == "v1\n"
    assert client.exec(sid, ["test", "-e", "/root/later"])["exit_code"] == 1
    # the writer is back at the checkpoint's line and goes on from there
    now = wait_more_lines(client, sid, len(at_ck) + 5)
    assert now[:len(at_ck)] == at_ck
    assert_contiguous(now)
    # the processes are those of the checkpoint; the later one is gone
    procs = {p["pid"]: p for p in client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"]}
    assert procs[srv]["state"] == "running" and procs[wr]["state"] == "running"
    assert procs[counter]["state"] == "running" and late not in procs, procs
    # the counter's output resumed from the checkpoint's offset, with nothing twice
    time.sleep(0.3)
    text = "".join(e["data"] for e in events(client, sid, counter) if e["type"] == "stdout")
    nums = [int(l.split()[1]) for l in text.splitlines()]
    assert nums == list(range(len(nums))) and len(text) > out_at_ck, (out_at_ck, nums[-3:])


def test_chains_and_deleting_a_parent(make, client, ckpts):
    sid = make()["id"]
    _, _, first = setup_workload(client, sid)
    a = checkpoint(client, sid, memory=True)
    ckpts.append(a["id"])
    ask(client, sid, "POST")
    b = checkpoint(client, sid, memory=True)
    ckpts.append(b["id"])
    c = checkpoint(client, sid, memory=False)
    ckpts.append(c["id"])
    assert a["parent"] is None and b["parent"] == a["id"] and c["parent"] == b["id"]
    listed = client.get("/v1/sandboxes/%s/checkpoints" % sid).json()["checkpoints"]
    assert [x["id"] for x in listed] == [a["id"], b["id"], c["id"]]
    assert [x["memory"] for x in listed] == [True, True, False]
    # a sandbox made from b, then b's parent deleted: neither b nor the sandbox breaks
    r = client.post("/v1/sandboxes", {"checkpoint": b["id"]})
    assert r.status == 201, r
    child = r.json()["id"]
    try:
        assert client.delete("/v1/checkpoints/" + a["id"]).status == 204
        ckpts.remove(a["id"])
        assert client.get("/v1/checkpoints/" + a["id"]).status == 404
        got = ask(client, child)
        assert got["secret"] == first["secret"] and got["count"] == 1, got
        assert got["hostname"] == "sbx-" + child[4:16]
        rollback(client, sid, b["id"])
        assert ask(client, sid)["count"] == 1
        # a files-only checkpoint rolls back files and restarts processes from scratch
        rollback(client, sid, c["id"])
        assert client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"] == []
    finally:
        client.delete("/v1/sandboxes/" + child)


def test_new_sandbox_from_memory_checkpoint_has_the_processes(make, client, ckpts):
    sid = make(env={"WHO": "parent"})["id"]
    srv, wr, first = setup_workload(client, sid)
    ck = checkpoint(client, sid, memory=True)
    ckpts.append(ck["id"])
    client.delete("/v1/sandboxes/" + sid)  # the checkpoint outlives its sandbox
    r = client.post("/v1/sandboxes", {"checkpoint": ck["id"]})
    assert r.status == 201, r
    new = r.json()["id"]
    try:
        assert new != sid
        got = ask(client, new)
        assert got["secret"] == first["secret"] and got["hostname"] == "sbx-" + new[4:16], got
        assert_contiguous(wait_more_lines(client, new, 10))
        procs = {p["pid"]: p["state"] for p in client.get("/v1/sandboxes/%s/processes" % new).json()["processes"]}
        assert procs.get(srv) == "running" and procs.get(wr) == "running", procs
        # its own uid range, not the old sandbox's
        assert sh(client, new, "cat /proc/self/uid_map").split()[0] == "0"
    finally:
        client.delete("/v1/sandboxes/" + new)


def ns_identity(client, sid):
    out = sh(client, sid, "hostname; readlink /proc/self/ns/net /proc/self/ns/user /proc/self/ns/pid;"
                          " cat /proc/self/uid_map")
    return out.split()


def test_fork_children_are_independent_with_their_own_identity(make, client):
    sid = make(labels={"role": "parent"})["id"]
    srv, wr, first = setup_workload(client, sid)
    sh(client, sid, "echo parent-file > /root/shared")
    parent_id = ns_identity(client, sid)
    r = client.post("/v1/sandboxes/%s/fork" % sid, {"count": 3})
    assert r.status == 201, r
    kids = [k["id"] for k in r.json()["sandboxes"]]
    try:
        assert len(set(kids)) == 3 and sid not in kids
        for k in r.json()["sandboxes"]:
            assert k["state"] == "running" and k["labels"] == {"role": "parent"}, k
        idents = {sid: parent_id}
        for k in kids:
            got = ask(client, k)
            # memory copied: the same secret and heap, the child's own hostname
            assert got["secret"] == first["secret"] and got["heap"] == first["heap"], got
            assert got["hostname"] == "sbx-" + k[4:16]
            assert sh(client, k, "cat /root/shared") == "parent-file\n"
            assert_contiguous(wait_more_lines(client, k, 10))
            idents[k] = ns_identity(client, k)
        # hostname, network, user and pid namespaces and uid ranges differ pairwise
        for i in (0, 1, 2, 3, 5):  # uid_map is "0 BASE 65536": BASE is field 5
            vals = [v[i] for v in idents.values()]
            assert len(set(vals)) == len(vals), (i, vals)
        # children change independently of each other and of the parent
        ask(client, kids[0], "POST")
        ask(client, kids[0], "POST")
        sh(client, kids[1], "echo child1 > /root/shared")
        assert ask(client, kids[0])["count"] == 2
        assert ask(client, kids[1])["count"] == 0 and ask(client, kids[2])["count"] == 0
        assert ask(client, sid)["count"] == 0
        assert sh(client, sid, "cat /root/shared") == "parent-file\n"
        assert sh(client, kids[2], "cat /root/shared") == "parent-file\n"
        # the parent kept running undisturbed
        assert status(client, sid, srv)["state"] == "running" and status(client, sid, wr)["state"] == "running"
        assert_contiguous(wait_more_lines(client, sid, len(lines_of(client, sid)) + 5))
        # a child forks again
        r2 = client.post("/v1/sandboxes/%s/fork" % kids[0], {})
        assert r2.status == 201 and len(r2.json()["sandboxes"]) == 1, r2
        grandchild = r2.json()["sandboxes"][0]["id"]
        kids.append(grandchild)
        assert ask(client, grandchild)["count"] == 2
    finally:
        for k in kids:
            client.delete("/v1/sandboxes/" + k)


@pytest.mark.parametrize("body", [{"count": 0}, {"count": 65}, {"count": "2"}, {"count": 1.5}, {"n": 2}, [2]])
def test_fork_bad_input(client, sandbox, body):
    before = len(client.get("/v1/sandboxes").json()["sandboxes"])
    r = client.post("/v1/sandboxes/%s/fork" % sandbox["id"], body)
    assert r.status == 400, r
    assert len(client.get("/v1/sandboxes").json()["sandboxes"]) == before


def test_memory_features_need_a_running_sandbox(make, client):
    sid = make()["id"]
    assert client.post("/v1/sandboxes/%s/pause" % sid).status == 200
    r = client.post("/v1/sandboxes/%s/fork" % sid, {"count": 1})
    assert r.status == 409, r
    assert client.post("/v1/sandboxes/%s/resume" % sid).status == 200
    assert client.post("/v1/sandboxes/sbx_0000000000000000/fork", {}).status == 404
    assert client.post("/v1/sandboxes/sbx_0000000000000000/hibernate").status == 404


def test_concurrent_checkpoints_execs_and_writes_are_serialised(make, client, ckpts):
    """Checkpoints, commands and file uploads at once: every request succeeds, and every
    checkpoint holds a whole prefix of the command log (no torn or missing line)."""
    sid = make()["id"]
    sh(client, sid, ": > /root/log")
    stop = threading.Event()
    errors = []

    def appender():
        i = 0
        while not stop.is_set():
            r = client.post("/v1/sandboxes/%s/exec" % sid, {"cmd": ["sh", "-c", "echo entry-%06d >> /root/log" % i]})
            if r.status != 200 or r.json()["exit_code"] != 0:
                errors.append(("exec", r))
            i += 1

    def uploader():
        i = 0
        while not stop.is_set():
            r = client.put("/v1/sandboxes/%s/files?path=/root/up-%d" % (sid, i % 5), raw=b"x" * 65536)
            if r.status != 201:
                errors.append(("put", r))
            i += 1

    threads = [threading.Thread(target=appender), threading.Thread(target=uploader)]
    for t in threads:
        t.start()
    made = []
    try:
        for _ in range(4):
            ck = checkpoint(client, sid, memory=True)
            ckpts.append(ck["id"])
            made.append(ck["id"])
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert errors == [], errors[:3]
    counts = []
    for cid in made:
        r = client.post("/v1/sandboxes", {"checkpoint": cid})
        assert r.status == 201, r
        nid = r.json()["id"]
        try:
            lines = sh(client, nid, "cat /root/log").splitlines()
        finally:
            client.delete("/v1/sandboxes/" + nid)
        assert lines == ["entry-%06d" % i for i in range(len(lines))], lines[-3:]
        counts.append(len(lines))
    assert counts == sorted(counts), counts


def test_fork_64_children(make, client):
    """The largest fork: 64 children, each running the parent's process with its memory."""
    sid = make(resources={"memory_mb": 64})["id"]
    token = os.urandom(8).hex()
    # the secret lives in memory only; SIGUSR1 makes the process write it out
    put_file(client, sid, "/root/hold.py",
             "import os, signal, socket, time\nsecret = %r\n"
             "def say(*a):\n    open('/root/said-' + socket.gethostname(), 'w').write(secret)\n"
             "signal.signal(signal.SIGUSR1, say)\nopen('/root/ready', 'w').write('1')\n"
             "while True:\n    time.sleep(3600)\n" % token)
    p = start(client, sid, cmd=["python3", "/root/hold.py"])["pid"]
    for _ in range(100):
        if client.exec(sid, ["test", "-e", "/root/ready"])["exit_code"] == 0:
            break
        time.sleep(0.1)
    sh(client, sid, "rm /root/hold.py")  # the children cannot read it from a file
    r = client.post("/v1/sandboxes/%s/fork" % sid, {"count": 64}, timeout=600)
    assert r.status == 201, r
    kids = [k["id"] for k in r.json()["sandboxes"]]
    try:
        assert len(set(kids)) == 64
        for k in kids:
            procs = {x["pid"]: x["state"] for x in client.get("/v1/sandboxes/%s/processes" % k).json()["processes"]}
            assert procs.get(p) == "running", (k, procs)
        for k in (kids[0], kids[-1]):
            r = client.post("/v1/sandboxes/%s/processes/%d/signal" % (k, p), {"signal": "USR1"})
            assert r.status == 204, r
            path = "/root/said-sbx-" + k[4:16]
            for _ in range(100):
                if client.exec(k, ["test", "-e", path])["exit_code"] == 0:
                    break
                time.sleep(0.1)
            assert sh(client, k, "cat " + path) == token
    finally:
        for k in kids:
            client.delete("/v1/sandboxes/" + k)
