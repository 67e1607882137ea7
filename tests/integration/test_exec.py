"""POST /v1/sandboxes/{id}/exec: argv and shell forms, environment, users,
stdin, timeouts, exit status, output limits, binary output, NDJSON streaming
and concurrency."""
import base64
import hashlib
import json
import os
import threading
import time

import pytest

from conftest import host_pids_with_cmdline


def ex(client, sid, cmd, **kw):
    return client.exec(sid, cmd, **kw)


def exec_path(sid):
    return "/v1/sandboxes/%s/exec" % sid


def host_cmdline_pids(needle):
    """Host pids whose cmdline (NUL-separated) is exactly needle."""
    return set(host_pids_with_cmdline(needle))


def inside_cmdlines(client, sid):
    """Command lines of every process visible inside the sandbox."""
    out = client.exec(sid, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
    return [l.strip() for l in out["stdout"].splitlines() if l.strip()]


def stream(client, sid, body, timeout=30):
    """Starts an NDJSON exec; returns (connection, response)."""
    conn = client.conn(timeout=timeout)
    conn.request("POST", exec_path(sid), body=json.dumps(body).encode(),
                 headers={"Authorization": "Bearer " + client.key, "Accept": "application/x-ndjson",
                          "Content-Type": "application/json"})
    return conn, conn.getresponse()


def read_events(resp):
    events = []
    while True:
        line = resp.readline()
        if not line:
            return events
        assert line.endswith(b"\n"), line
        events.append(json.loads(line))


def joined(events, kind):
    out = b""
    for e in events:
        if e["type"] == kind:
            out += base64.b64decode(e["data_b64"]) if "data_b64" in e else e["data"].encode()
    return out


# ---- forms, env, cwd, user ----------------------------------------------------

def test_argv_form_is_not_shell_interpreted(sandbox, client):
    """An argv array runs the program directly, with no shell expansion."""
    r = ex(client, sandbox["id"], ["echo", "$HOME", "a  b", "*", "", ";"])
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "$HOME a  b *  ;\n"
    assert r["stderr"] == ""
    assert r["signal"] is None
    assert r["timed_out"] is False and r["truncated"] is False
    assert isinstance(r["duration_ms"], (int, float)) and r["duration_ms"] >= 0


def test_string_form_runs_in_shell(sandbox, client):
    """A string command runs with /bin/sh -c (pipes, variables, redirections)."""
    r = ex(client, sandbox["id"], "x=6; echo $((x*7)) | tr 4 X; echo err >&2; echo $0")
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "X2\n/bin/sh\n"
    assert r["stderr"] == "err\n"


def test_python_is_available(sandbox, client):
    """The default template has python3."""
    r = ex(client, sandbox["id"], ["python3", "-c", "print(6*7)"])
    assert r["stdout"] == "42\n", r


def test_exec_env_merges_over_sandbox_env(client):
    """exec env is merged over the sandbox env, which is merged over the defaults."""
    sb = client.create(env={"A": "sandbox", "B": "sandbox"})
    try:
        r = ex(client, sb["id"], ["env"], env={"A": "exec", "C": "exec"})
        env = dict(l.split("=", 1) for l in r["stdout"].splitlines())
        assert env["A"] == "exec"
        assert env["B"] == "sandbox"
        assert env["C"] == "exec"
        assert "/usr/bin" in env["PATH"]
        # the exec env does not stick to the sandbox
        r = ex(client, sb["id"], "echo ${A}-${C:-unset}")
        assert r["stdout"] == "sandbox-unset\n"
    finally:
        client.delete("/v1/sandboxes/" + sb["id"])


def test_exec_env_can_override_path(sandbox, client):
    """PATH from the request replaces the default one."""
    r = ex(client, sandbox["id"], ["/usr/bin/env"], env={"PATH": "/nowhere"})
    assert "PATH=/nowhere\n" in r["stdout"]
    r = ex(client, sandbox["id"], ["ls"], env={"PATH": "/nowhere"})
    assert r["exit_code"] == 127, r


def test_cwd(sandbox, client):
    """cwd sets the working directory; '..' is normalised."""
    assert ex(client, sandbox["id"], ["pwd"], cwd="/tmp")["stdout"] == "/tmp\n"
    assert ex(client, sandbox["id"], ["pwd"], cwd="/usr/../etc/")["stdout"] == "/etc\n"
    assert ex(client, sandbox["id"], ["pwd"])["stdout"] == "/root\n"


def test_cwd_missing_fails_cleanly(sandbox, client):
    """A cwd that does not exist fails the command and says why."""
    r = ex(client, sandbox["id"], ["pwd"], cwd="/does/not/exist")
    assert r["exit_code"] != 0, r
    assert "/does/not/exist" in r["stderr"]


def test_user_nobody(sandbox, client):
    """user 'nobody' runs the command as uid 65534."""
    r = ex(client, sandbox["id"], "id -u; id -g; id -G", user="nobody")
    assert r["exit_code"] == 0, r
    assert r["stdout"].split() == ["65534", "65534", "65534"]
    r = ex(client, sandbox["id"], "touch /root/nope", user="nobody")
    assert r["exit_code"] != 0
    assert "Permission denied" in r["stderr"]


def test_user_numeric_and_root(sandbox, client):
    """user as a decimal uid, and the default root."""
    assert ex(client, sandbox["id"], ["id", "-u"], user="65534")["stdout"] == "65534\n"
    assert ex(client, sandbox["id"], ["id", "-u"], user="1000")["stdout"] == "1000\n"
    assert ex(client, sandbox["id"], ["id", "-u"])["stdout"] == "0\n"
    assert ex(client, sandbox["id"], ["id", "-u"], user="root")["stdout"] == "0\n"


def test_unknown_user_is_400(sandbox, client):
    """A user name missing from the sandbox's /etc/passwd is refused with 400."""
    r = client.post(exec_path(sandbox["id"]), {"cmd": ["id"], "user": "no-such-user"})
    assert r.status == 400, r
    err = r.json()["error"]
    assert err["code"] == "bad_request"
    assert "no-such-user" in err["message"]


def test_user_added_inside_sandbox_is_usable(sandbox, client):
    """Users are looked up in the sandbox's own /etc/passwd."""
    r = ex(client, sandbox["id"], "echo 'alice:x:1234:1234::/home/alice:/bin/sh' >> /etc/passwd")
    assert r["exit_code"] == 0, r
    assert ex(client, sandbox["id"], ["id", "-u"], user="alice")["stdout"] == "1234\n"


def test_default_user_works_without_passwd_entry(client):
    """An exec with the default user runs as uid 0 even when /etc/passwd has no root line."""
    sb = client.create()
    try:
        r = ex(client, sb["id"], "rm /etc/passwd")
        assert r["exit_code"] == 0, r
        r = client.post(exec_path(sb["id"]), {"cmd": ["id", "-u"]})
        assert r.status == 200, r
        assert r.json()["stdout"] == "0\n"
    finally:
        client.delete("/v1/sandboxes/" + sb["id"])


# ---- stdin ----------------------------------------------------------------------

def test_stdin(sandbox, client):
    """stdin is fed to the command and then closed."""
    r = ex(client, sandbox["id"], ["cat"], stdin="hello\nwörld")
    assert r["stdout"] == "hello\nwörld", r
    r = ex(client, sandbox["id"], "read a; read b; echo \"$b-$a\"", stdin="1\n2\n")
    assert r["stdout"] == "2-1\n"


def test_no_stdin_means_eof(sandbox, client):
    """Without stdin the command reads EOF at once instead of hanging."""
    r = ex(client, sandbox["id"], ["cat"], timeout=5)
    assert r["timed_out"] is False, r
    assert r["exit_code"] == 0 and r["stdout"] == ""


def test_large_stdin(sandbox, client):
    """Close to 1 MB of stdin arrives intact."""
    data = "".join("%07d\n" % i for i in range(110000))
    r = ex(client, sandbox["id"], "md5sum", stdin=data)
    assert r["stdout"].split()[0] == hashlib.md5(data.encode()).hexdigest(), r


def test_stdin_not_read_is_harmless(sandbox, client):
    """A command that ignores a large stdin still finishes normally."""
    r = ex(client, sandbox["id"], ["true"], stdin="x" * 900000, timeout=10)
    assert r["exit_code"] == 0 and r["timed_out"] is False, r


def test_stdin_with_nul_bytes(sandbox, client):
    """stdin is data: NUL bytes in it reach the command."""
    r = client.post(exec_path(sandbox["id"]), {"cmd": ["od", "-An", "-c"], "stdin": "a\u0000b"})
    assert r.status == 200, r
    assert r.json()["stdout"].split() == ["a", "\\0", "b"]


def test_stdin_over_one_mib_within_documented_limit(sandbox, client):
    """A 2 MiB stdin (below the documented 16 MiB) is accepted."""
    data = "y" * (2 << 20)
    try:
        r = client.post(exec_path(sandbox["id"]), {"cmd": ["wc", "-c"], "stdin": data})
    except (BrokenPipeError, ConnectionResetError) as e:
        pytest.fail("the daemon refused the body before reading it (413): %s" % e)
    assert r.status == 200, r
    assert r.json()["stdout"].strip() == str(2 << 20)


# ---- timeout ------------------------------------------------------------------

def test_timeout_kills_whole_tree(sandbox, client):
    """On timeout the command and every process it started are killed."""
    needle = b"sleep\x001000"
    before = host_cmdline_pids(needle)
    t0 = time.time()
    r = ex(client, sandbox["id"], ["sh", "-c", "sleep 1000 & sleep 1000"], timeout=0.5)
    took = time.time() - t0
    assert r["timed_out"] is True, r
    assert r["signal"] == "KILL"
    assert r["exit_code"] == 137
    assert took < 5, took
    assert 450 <= r["duration_ms"] < 5000, r
    assert host_cmdline_pids(needle) - before == set()
    assert not [c for c in inside_cmdlines(client, sandbox["id"]) if c.startswith("sleep 1000")]


def test_timeout_kills_detached_descendants(sandbox, client):
    """Processes that left the command's session are killed on timeout too."""
    needle = b"sleep\x001000"
    before = host_cmdline_pids(needle)
    r = ex(client, sandbox["id"], "setsid sleep 1000 & (sleep 1000 &) ; nohup sleep 1000 >/dev/null 2>&1 & sleep 1000",
           timeout=0.5)
    assert r["timed_out"] is True, r
    assert host_cmdline_pids(needle) - before == set()
    assert not [c for c in inside_cmdlines(client, sandbox["id"]) if c.startswith("sleep 1000")]


def test_fast_command_not_timed_out(sandbox, client):
    """A command finishing before its timeout is reported normally."""
    r = ex(client, sandbox["id"], "sleep 0.1; echo done", timeout=5)
    assert r["timed_out"] is False and r["exit_code"] == 0 and r["stdout"] == "done\n", r


def test_output_before_timeout_is_kept(sandbox, client):
    """Output written before the timeout is returned."""
    r = ex(client, sandbox["id"], "echo before; sleep 10", timeout=0.5)
    assert r["timed_out"] is True
    assert r["stdout"] == "before\n", r


def test_background_process_survives_normal_exit(sandbox, client):
    """A process backgrounded by a command that exits normally keeps running."""
    r = ex(client, sandbox["id"], "sleep 1000.25 >/dev/null 2>&1 &")
    assert r["exit_code"] == 0 and r["timed_out"] is False, r
    assert "sleep 1000.25" in inside_cmdlines(client, sandbox["id"])


# ---- exit status --------------------------------------------------------------

@pytest.mark.parametrize("code", [0, 1, 2, 42, 126, 255])
def test_exit_codes(sandbox, client, code):
    """The command's exit status is reported, and a non-zero exit is still 200."""
    r = client.post(exec_path(sandbox["id"]), {"cmd": ["sh", "-c", "exit %d" % code]})
    assert r.status == 200, r
    body = r.json()
    assert body["exit_code"] == code
    assert body["signal"] is None


def test_killed_by_signal(sandbox, client):
    """A command killed by SIGKILL reports signal KILL and no timeout."""
    r = ex(client, sandbox["id"], "kill -9 $$")
    assert r["signal"] == "KILL", r
    assert r["timed_out"] is False
    assert r["exit_code"] != 0


def test_killed_by_sigterm(sandbox, client):
    """A command killed by SIGTERM reports signal TERM."""
    r = ex(client, sandbox["id"], "kill -TERM $$")
    assert r["signal"] == "TERM", r
    assert r["timed_out"] is False


def test_killed_by_signal_exit_code_128_plus_n(sandbox, client):
    """A command killed by signal n (no timeout) reports exit_code 128+n and the signal's name, as documented."""
    r = ex(client, sandbox["id"], "kill -9 $$")
    assert r["signal"] == "KILL" and r["timed_out"] is False
    assert r["exit_code"] == 137, r


def test_missing_command(sandbox, client):
    """A program that does not exist gives exit code 127 and says so on stderr."""
    r = ex(client, sandbox["id"], ["no-such-program-xyz", "arg"])
    assert r["exit_code"] == 127, r
    assert "no-such-program-xyz" in r["stderr"]
    r = ex(client, sandbox["id"], "no-such-program-xyz")
    assert r["exit_code"] == 127, r
    assert "no-such-program-xyz" in r["stderr"]


def test_not_executable(sandbox, client):
    """A file that is not executable fails with 126/127 and a message."""
    r = ex(client, sandbox["id"], ["/etc/passwd"])
    assert r["exit_code"] in (126, 127), r
    assert "/etc/passwd" in r["stderr"]


# ---- output -------------------------------------------------------------------

def test_output_cap_truncates(sandbox, client):
    """Output beyond max_output_bytes is dropped and truncated is true."""
    r = ex(client, sandbox["id"], "head -c 5000 /dev/zero | tr '\\0' a", max_output_bytes=1000)
    assert r["truncated"] is True, r
    assert len(r["stdout"]) == 1000
    assert r["stdout"] == "a" * 1000
    assert r["exit_code"] == 0


def test_output_cap_is_per_stream(sandbox, client):
    """The cap applies to stdout and stderr separately."""
    r = ex(client, sandbox["id"], "head -c 5000 /dev/zero | tr '\\0' e >&2; echo out", max_output_bytes=1000)
    assert r["truncated"] is True
    assert r["stderr"] == "e" * 1000
    assert r["stdout"] == "out\n"


def test_output_cap_zero(sandbox, client):
    """max_output_bytes 0 drops all output."""
    r = ex(client, sandbox["id"], "echo out; echo err >&2", max_output_bytes=0)
    assert r["stdout"] == "" and r["stderr"] == ""
    assert r["truncated"] is True
    assert r["exit_code"] == 0


def test_output_exactly_at_cap_not_truncated(sandbox, client):
    """Output of exactly max_output_bytes is complete and not truncated."""
    r = ex(client, sandbox["id"], "head -c 1000 /dev/zero | tr '\\0' a", max_output_bytes=1000)
    assert r["stdout"] == "a" * 1000
    assert r["truncated"] is False, r


def test_non_utf8_output(sandbox, client):
    """Bytes that are not UTF-8 come back exactly in stdout_b64."""
    r = ex(client, sandbox["id"], "printf '\\377\\376'")
    assert r["exit_code"] == 0
    assert r["stdout_b64"] == base64.b64encode(b"\xff\xfe").decode()
    assert r["stdout"] == "\ufffd\ufffd"
    assert "stderr_b64" not in r


def test_non_utf8_all_bytes(sandbox, client):
    """Every byte value survives the stdout_b64 round trip."""
    r = ex(client, sandbox["id"], ["python3", "-c",
                                   "import sys; sys.stdout.buffer.write(bytes(range(256)) * 3); "
                                   "sys.stderr.buffer.write(b'\\x80ok')"])
    assert base64.b64decode(r["stdout_b64"]) == bytes(range(256)) * 3
    assert base64.b64decode(r["stderr_b64"]) == b"\x80ok"


def test_utf8_output_has_no_b64(sandbox, client):
    """Valid UTF-8 output is plain text without a _b64 twin."""
    r = ex(client, sandbox["id"], ["printf", "h\u00e9llo \u2603 \U0001F600"])
    assert r["stdout"] == "h\u00e9llo \u2603 \U0001F600"
    assert "stdout_b64" not in r


def test_large_output_intact(sandbox, client):
    """2 MB of output arrives byte for byte when the cap allows it."""
    prog = ("import sys\n"
            "for i in range(2 * 1024 * 1024 // 16):\n"
            "    sys.stdout.write('%015d\\n' % i)\n")
    r = ex(client, sandbox["id"], ["python3", "-c", prog], max_output_bytes=4 * 1024 * 1024)
    expected = "".join("%015d\n" % i for i in range(2 * 1024 * 1024 // 16))
    assert r["truncated"] is False, {k: v for k, v in r.items() if k != "stdout"}
    assert len(r["stdout"]) == len(expected) == 2 * 1024 * 1024
    assert r["stdout"] == expected


def test_default_cap_is_one_mib(sandbox, client):
    """Without max_output_bytes, output is capped at 1 MiB."""
    r = ex(client, sandbox["id"], "head -c 1500000 /dev/zero | tr '\\0' z")
    assert r["truncated"] is True
    assert len(r["stdout"]) == 1048576


# ---- streaming ----------------------------------------------------------------

def test_ndjson_streams_incrementally(sandbox, client):
    """With Accept: application/x-ndjson the first output arrives before the command ends."""
    t0 = time.time()
    conn, resp = stream(client, sandbox["id"], {"cmd": "echo a; sleep 1; echo b; echo e >&2"})
    try:
        assert resp.status == 200
        assert resp.getheader("Content-Type", "").startswith("application/x-ndjson")
        first = json.loads(resp.readline())
        t_first = time.time() - t0
        rest = read_events(resp)
        t_all = time.time() - t0
    finally:
        conn.close()
    assert first == {"type": "stdout", "data": "a\n"}
    assert t_first < 0.8, t_first
    assert t_all >= 1.0, t_all
    events = [first] + rest
    assert joined(events, "stdout") == b"a\nb\n"
    assert joined(events, "stderr") == b"e\n"
    assert all(e["type"] in ("stdout", "stderr", "exit") for e in events), events
    last = events[-1]
    assert last["type"] == "exit"
    assert [e["type"] for e in events].count("exit") == 1
    assert last["exit_code"] == 0 and last["signal"] is None
    assert last["timed_out"] is False and last["truncated"] is False
    assert last["duration_ms"] >= 1000


def test_ndjson_matches_buffered_output(sandbox, client):
    """Streamed chunks put together equal the buffered output, for large output too."""
    cmd = ["python3", "-c", "import sys\nfor i in range(40000): print('line %d' % i)\nprint('e', file=sys.stderr)"]
    buffered = ex(client, sandbox["id"], cmd)
    conn, resp = stream(client, sandbox["id"], {"cmd": cmd})
    try:
        events = read_events(resp)
    finally:
        conn.close()
    assert joined(events, "stdout").decode() == buffered["stdout"]
    assert joined(events, "stderr").decode() == buffered["stderr"] == "e\n"
    assert len([e for e in events if e["type"] == "stdout"]) > 1


def test_ndjson_binary_and_split_utf8(sandbox, client):
    """Non-UTF-8 chunks come as data_b64; a character split across writes stays text."""
    conn, resp = stream(client, sandbox["id"],
                        {"cmd": "printf '\\303'; sleep 0.3; printf '\\251\\n'; printf '\\377\\000' >&2"})
    try:
        events = read_events(resp)
    finally:
        conn.close()
    out = [e for e in events if e["type"] == "stdout"]
    assert all("data" in e for e in out), out
    assert "".join(e["data"] for e in out) == "\u00e9\n"
    assert joined(events, "stderr") == b"\xff\x00"
    assert any("data_b64" in e for e in events if e["type"] == "stderr")


def test_ndjson_timeout_and_exit_status(sandbox, client):
    """The exit event carries timed_out, signal, exit_code and truncated."""
    conn, resp = stream(client, sandbox["id"], {"cmd": "head -c 3000 /dev/zero; sleep 5", "timeout": 0.5,
                                                "max_output_bytes": 100})
    try:
        events = read_events(resp)
    finally:
        conn.close()
    last = events[-1]
    assert last["type"] == "exit", events
    assert last["timed_out"] is True and last["signal"] == "KILL" and last["truncated"] is True
    assert len(joined(events, "stdout")) == 100
    conn, resp = stream(client, sandbox["id"], {"cmd": "exit 7"})
    try:
        events = read_events(resp)
    finally:
        conn.close()
    assert [e["type"] for e in events] == ["exit"], events
    assert events[0]["exit_code"] == 7


def test_ndjson_error_before_start_is_http_error(sandbox, client):
    """A failure before the command starts is an ordinary HTTP error, not a stream."""
    conn, resp = stream(client, sandbox["id"], {"cmd": ["id"], "user": "no-such-user"})
    try:
        assert resp.status == 400
        body = json.loads(resp.read())
    finally:
        conn.close()
    assert body["error"]["code"] == "bad_request"
    conn, resp = stream(client, sandbox["id"], {"cmd": []})
    try:
        assert resp.status == 400
        assert json.loads(resp.read())["error"]["code"] == "bad_request"
    finally:
        conn.close()


def test_ndjson_client_leaving_kills_command(sandbox, client):
    """A streaming client that disconnects takes its (still talking) command with it."""
    conn, resp = stream(client, sandbox["id"],
                        {"cmd": "echo start; while :; do echo tick; sleep 0.05; done & sleep 1000.5"})
    assert json.loads(resp.readline())["type"] == "stdout"
    conn.close()
    deadline = time.time() + 5
    left = None
    while time.time() < deadline:
        left = [c for c in inside_cmdlines(client, sandbox["id"]) if "1000.5" in c]
        if not left:
            break
        time.sleep(0.1)
    assert not left, left


# ---- concurrency ----------------------------------------------------------------

def test_concurrent_execs(sandbox, client):
    """8 execs at once in one sandbox all complete with their own output."""
    results = {}
    errors = []

    def run(i):
        try:
            r = client.post(exec_path(sandbox["id"]),
                            {"cmd": "sleep 0.5; cat; echo \" $N\"", "stdin": "in%d" % i, "env": {"N": str(i)}})
            results[i] = r
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    took = time.time() - t0
    assert not errors, errors
    assert sorted(results) == list(range(8))
    for i, r in results.items():
        assert r.status == 200, r
        assert r.json()["stdout"] == "in%d %d\n" % (i, i), r
    assert took < 3.5, "execs were serialised: %.1f s" % took


def test_concurrent_execs_in_several_sandboxes(client):
    """Execs in different sandboxes run side by side without crosstalk."""
    sbs = [client.create() for _ in range(3)]
    try:
        out = {}

        def run(sid):
            out[sid] = [client.exec(sid, "cat /proc/sys/kernel/hostname")["stdout"] for _ in range(5)]

        threads = [threading.Thread(target=run, args=(sb["id"],)) for sb in sbs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for sb in sbs:
            names = set(out[sb["id"]])
            assert len(names) == 1, names
        assert len({next(iter(set(v))) for v in out.values()}) == 3
    finally:
        for sb in sbs:
            client.delete("/v1/sandboxes/" + sb["id"])


def test_oom_kill_is_reported_and_contained(client):
    """A command over the sandbox's memory limit is OOM-killed inside the sandbox only,
    the result says oom_killed, and the sandbox keeps working."""
    sb = client.create(resources={"memory_mb": 64})
    try:
        r = ex(client, sb["id"], ["python3", "-c", "x = bytearray(256 << 20)"])
        assert r["oom_killed"] is True and r["signal"] == "KILL", r
        r = ex(client, sb["id"], "echo still here")
        assert r["stdout"] == "still here\n" and r["oom_killed"] is False, r
    finally:
        client.delete("/v1/sandboxes/" + sb["id"])
    assert client.get("/healthz", key=False).status == 200
