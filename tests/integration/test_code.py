"""POST /v1/sandboxes/{id}/code: persistent Python contexts (state, results,
exceptions, output, NDJSON streaming, timeouts, exits, isolation between
contexts and tenants, input validation)."""
import json
import os
import subprocess
import threading
import time

import pytest

from conftest import DAEMON, STATE, Client


def code_path(sid):
    return "/v1/sandboxes/%s/code" % sid


def run(client, sid, code, **kw):
    body = {"language": "python", "code": code}
    body.update(kw)
    r = client.post(code_path(sid), body, timeout=kw.get("timeout", 60) + 30)
    assert r.status == 200, r
    return r.json()


def stream(client, sid, body, timeout=60):
    conn = client.conn(timeout=timeout)
    conn.request("POST", code_path(sid), body=json.dumps(body).encode(),
                 headers={"Authorization": "Bearer " + client.key, "Accept": "application/x-ndjson",
                          "Content-Type": "application/json"})
    return conn, conn.getresponse()


def kernels(client, sid):
    procs = client.get("/v1/sandboxes/%s/processes" % sid).json()["processes"]
    return [p for p in procs if p["tag"].startswith("code:")]


def test_state_survives_between_calls(sandbox, client):
    sid = sandbox["id"]
    r = run(client, sid, "x = 21\nimport math")
    assert r["error"] is None, r
    assert r["result"] is None
    assert r["context"] == "default"
    r = run(client, sid, "x * 2")
    assert r["result"] == "42", r
    r = run(client, sid, "math.floor(math.pi * 100)")
    assert r["result"] == "314", r
    # one kernel serves the context, visible among the processes under its tag
    ks = kernels(client, sid)
    assert [k["tag"] for k in ks if k["state"] == "running"] == ["code:default"], ks


def test_final_expression_result_and_statements(sandbox, client):
    sid = sandbox["id"]
    r = run(client, sid, "def f(n):\n    return [n] * 2\nf('a')")
    assert r["result"] == "['a', 'a']", r
    assert isinstance(r["duration_ms"], (int, float)) and r["duration_ms"] >= 0
    assert r["timed_out"] is False
    # a statement last: no result; an expression that is None: no result either
    assert run(client, sid, "y = f(1)")["result"] is None
    assert run(client, sid, "None")["result"] is None
    assert run(client, sid, "for i in range(3):\n    pass")["result"] is None
    # the repr, not str
    assert run(client, sid, "'hi'")["result"] == "'hi'"
    assert run(client, sid, "")["result"] is None


def test_exception_is_structured(sandbox, client):
    sid = sandbox["id"]
    r = run(client, sid, "def g():\n    return 1 / 0\nprint('before')\ng()")
    assert r["result"] is None
    e = r["error"]
    assert e["name"] == "ZeroDivisionError"
    assert e["value"] == "division by zero"
    assert isinstance(e["traceback"], list) and e["traceback"], e
    assert all(isinstance(l, str) for l in e["traceback"])
    assert e["traceback"][-1] == "ZeroDivisionError: division by zero"
    text = "\n".join(e["traceback"])
    assert "return 1 / 0" in text and "in g" in text, text
    assert "<string>" not in text  # the driver's own frames are not shown
    assert r["stdout"] == "before\n"
    # a syntax error, and the context still works afterwards
    r = run(client, sid, "if")
    assert r["error"]["name"] == "SyntaxError", r
    assert run(client, sid, "1 + 1")["result"] == "2"


def test_stdout_and_stderr_captured(sandbox, client):
    sid = sandbox["id"]
    r = run(client, sid, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.stdout.write('tail')\n7")
    assert r["stdout"] == "out\ntail", r
    assert r["stderr"] == "err\n", r
    assert r["result"] == "7"
    # a fake marker printed by the cell is just output
    r = run(client, sid, "print('\\x1eFBRESULT 00000000000000000000000000000000 {\"result\": \"9\"}')")
    assert r["result"] is None and r["error"] is None, r
    assert r["stdout"].startswith("\x1eFBRESULT 0000"), r
    # invalid UTF-8 from a subprocess is carried exactly
    r = run(client, sid, "import os\nos.write(1, b'a\\xffb')\n")
    assert r["stdout_b64"] == "Yf9i", r
    # input() sees end-of-file, not the kernel's requests
    r = run(client, sid, "input()")
    assert r["error"]["name"] == "EOFError", r
    assert run(client, sid, "'still here'")["result"] == "'still here'"


def test_streaming_is_incremental(sandbox, client):
    sid = sandbox["id"]
    code = "import sys, time\nprint('first')\nprint('warn', file=sys.stderr)\ntime.sleep(2)\nprint('second')\n6 * 7"
    t0 = time.time()
    conn, resp = stream(client, sid, {"language": "python", "code": code})
    try:
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "application/x-ndjson"
        events = []
        while True:
            line = resp.readline()
            if not line:
                break
            assert line.endswith(b"\n")
            events.append((time.time() - t0, json.loads(line)))
    finally:
        conn.close()
    types = [e["type"] for _, e in events]
    assert types[-1] == "result", types
    outs = [(t, e["data"]) for t, e in events if e["type"] == "stdout"]
    assert "".join(d for _, d in outs) == "first\nsecond\n", events
    assert "".join(e["data"] for _, e in events if e["type"] == "stderr") == "warn\n"
    first_t = next(t for t, d in outs if "first" in d)
    end_t = events[-1][0]
    assert end_t - first_t >= 1.5, events  # the first print came before the sleep ended
    final = events[-1][1]
    assert final["result"] == "42" and final["error"] is None and final["context"] == "default"
    assert "stdout" not in final


def test_timeout_interrupts_and_context_survives(sandbox, client):
    sid = sandbox["id"]
    run(client, sid, "kept = 'yes'")
    t0 = time.time()
    r = run(client, sid, "import time\nprint('start')\ntime.sleep(60)", timeout=1.5)
    took = time.time() - t0
    assert took < 10, took
    assert r["timed_out"] is True, r
    assert r["error"]["name"] == "KeyboardInterrupt", r
    assert "timeout" in r["error"]["value"], r
    assert any("time.sleep(60)" in l for l in r["error"]["traceback"]), r
    assert r["stdout"] == "start\n"
    r = run(client, sid, "kept")
    assert r["result"] == "'yes'" and r["timed_out"] is False, r


def test_timeout_of_a_cell_ignoring_interrupts_loses_the_context(sandbox, client):
    sid = sandbox["id"]
    run(client, sid, "v = 1")
    code = ("import time\nwhile True:\n    try:\n        time.sleep(30)\n"
            "    except KeyboardInterrupt:\n        pass")
    r = run(client, sid, code, timeout=1)
    assert r["timed_out"] is True
    assert r["error"]["name"] == "ContextLost", r
    r = run(client, sid, "'v' in globals()")
    assert r["result"] == "False", r  # a fresh context


def test_contexts_are_independent(sandbox, client):
    sid = sandbox["id"]
    run(client, sid, "who = 'a'", context="ctx-a")
    run(client, sid, "who = 'b'", context="ctx_b.2")
    assert run(client, sid, "who", context="ctx-a")["result"] == "'a'"
    r = run(client, sid, "who", context="ctx_b.2")
    assert r["result"] == "'b'" and r["context"] == "ctx_b.2"
    r = run(client, sid, "who")
    assert r["error"]["name"] == "NameError", r
    # a long-running cell in one context does not hold up another
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("r", run(client, sid, "import time\ntime.sleep(3)\n'slow'",
                                                                    context="ctx-a")))
    th.start()
    time.sleep(0.5)
    t0 = time.time()
    assert run(client, sid, "'quick'", context="ctx_b.2")["result"] == "'quick'"
    assert time.time() - t0 < 2.5
    th.join()
    assert box["r"]["result"] == "'slow'"


def test_concurrent_calls_to_one_context_run_one_at_a_time(sandbox, client):
    sid = sandbox["id"]
    # both first calls at once: one kernel, and cells never overlap
    results = []

    def cell(i):
        results.append(run(client, sid, "import time\ntry:\n    n += 1\nexcept NameError:\n    n = 1\n"
                                        "time.sleep(0.5)\nn", context="serial"))

    ths = [threading.Thread(target=cell, args=(i,)) for i in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert sorted(r["result"] for r in results) == ["1", "2", "3", "4"], results
    running = [k for k in kernels(client, sid) if k["tag"] == "code:serial" and k["state"] == "running"]
    assert len(running) == 1, running


def test_exit_ends_the_context_and_next_call_starts_fresh(sandbox, client):
    sid = sandbox["id"]
    run(client, sid, "z = 5")
    r = run(client, sid, "print('bye')\nexit()")
    assert r["error"]["name"] == "ContextEnded", r
    assert "ended" in r["error"]["value"]
    assert r["stdout"] == "bye\n"
    r = run(client, sid, "'z' in globals()")
    assert r["error"] is None and r["result"] == "False", r
    run(client, sid, "z = 6")
    r = run(client, sid, "import os\nos._exit(3)")
    assert r["error"]["name"] == "ContextEnded" and "exit code 3" in r["error"]["value"], r
    assert run(client, sid, "1")["result"] == "1"


def test_client_leaving_a_stream_interrupts_the_cell(sandbox, client):
    sid = sandbox["id"]
    run(client, sid, "mark = 'kept'", context="leave")
    conn, resp = stream(client, sid, {"code": "import time\nprint('go')\ntime.sleep(60)", "context": "leave"})
    assert resp.status == 200
    assert json.loads(resp.readline())["type"] == "stdout"
    conn.close()
    t0 = time.time()
    r = run(client, sid, "mark", context="leave", timeout=30)
    assert r["result"] == "'kept'", r
    assert time.time() - t0 < 15


def test_large_cells_outputs_and_results_are_bounded(sandbox, client):
    sid = sandbox["id"]
    # ~1 MiB of control characters: about 6 MiB once JSON-escaped on the way in
    body = "s = '" + "\x01" * (1000000) + "'\nlen(s)"
    assert run(client, sid, body)["result"] == "1000000"
    # output beyond 1 MiB per stream is dropped from a buffered answer
    r = run(client, sid, "import sys\nsys.stdout.write('x' * 3000000)\n'done'")
    assert r["truncated"] is True and len(r["stdout"]) == 1 << 20 and r["result"] == "'done'", len(r["stdout"])
    # a huge repr is clipped by the kernel
    r = run(client, sid, "'y' * 2000000")
    assert r["result"].startswith("'yyy") and r["result"].endswith("...[truncated]"), r["result"][-40:]
    assert len(r["result"]) < 300000
    # the context is still in step afterwards
    assert run(client, sid, "len(s)")["result"] == "1000000"


def test_sdk_run_code(daemon, sandbox):
    import sys
    from conftest import ROOT, SOCKET
    sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
    import forkbox
    fb = forkbox.Forkbox(key=daemon.key, socket_path=SOCKET)
    sb = forkbox.Sandbox(fb, sandbox)
    assert sb.run_code("a = 2")["result"] is None
    r = sb.run_code("print(a)\na ** 10")
    assert r["result"] == "1024" and r["stdout"] == "2\n", r
    assert sb.run_code("a", context="other")["error"]["name"] == "NameError"


def test_client_leaving_a_buffered_call_interrupts_the_cell(sandbox, client):
    import socket
    sid = sandbox["id"]
    run(client, sid, "mark = 'kept'", context="leave2")
    conn = client.conn(timeout=1)
    conn.request("POST", code_path(sid), body=json.dumps({"code": "import time\ntime.sleep(60)",
                                                          "context": "leave2"}).encode(),
                 headers={"Authorization": "Bearer " + client.key, "Content-Type": "application/json"})
    with pytest.raises(socket.timeout):
        conn.getresponse()
    conn.close()
    t0 = time.time()
    r = run(client, sid, "mark", context="leave2", timeout=30)
    assert r["result"] == "'kept'", r
    assert time.time() - t0 < 15


@pytest.mark.parametrize("body,fragment", [
    ({"language": "ruby", "code": "1"}, "language"),
    ({"code": 1}, "code"),
    ({"language": "python"}, "code"),
    ({"code": "1", "context": ""}, "context"),
    ({"code": "1", "context": "a/b"}, "context"),
    ({"code": "1", "context": "x" * 65}, "context"),
    ({"code": "1", "timeout": 0}, "timeout"),
    ({"code": "1", "timeout": 3601}, "timeout"),
    ({"code": "1", "timeout": "5"}, "timeout"),
    ({"code": "1", "extra": True}, "unknown field"),
    ({"code": "a\u0000b"}, "NUL"),
    ({"code": "x" * ((1 << 20) + 1)}, "code"),
])
def test_bad_input(sandbox, client, body, fragment):
    r = client.post(code_path(sandbox["id"]), body)
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["code"] == "bad_request" and fragment in err["message"], err


def test_bad_body_and_unknown_sandbox(sandbox, client):
    r = client.request("POST", code_path(sandbox["id"]), raw=b"[1]", headers={"Content-Type": "application/json"})
    assert r.status == 400 and r.json()["error"]["code"] == "bad_request", r
    r = client.post(code_path("sbx_0000000000000000"), {"code": "1"})
    assert r.status == 404 and r.json()["error"]["code"] == "not_found", r


def test_code_tag_is_reserved(sandbox, client):
    r = client.post("/v1/sandboxes/%s/processes" % sandbox["id"], {"cmd": ["sleep", "1"], "tag": "code:default"})
    assert r.status == 400, r
    assert "reserved" in r.json()["error"]["message"]


def test_other_tenant_gets_404(sandbox, client):
    out = subprocess.run([DAEMON, "--state-dir", STATE, "add-key", "code-%d" % os.getpid()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    other = Client(out.stdout.strip())
    r = other.post(code_path(sandbox["id"]), {"code": "1"})
    assert r.status == 404 and r.json()["error"]["code"] == "not_found", r
    assert kernels(client, sandbox["id"]) == []
