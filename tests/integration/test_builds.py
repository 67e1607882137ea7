"""Template builds from a Dockerfile and an uploaded context: RUN steps in
sandboxes, COPY/ADD from the context, ENV/WORKDIR/USER/ARG/CMD, a per-step
cache keyed by inputs, streamed progress (API and CLI), clear refusals of
unsupported instructions, and failing steps that register nothing."""
import io
import json
import os
import subprocess
import tarfile
import time

import pytest

from conftest import CLI, STATE, sh
from imagelib import base_rootfs_entries, oci_archive

DOCKERFILE = """\
# a comment, and a continuation below
FROM default
ARG GREETING=hi
ENV APP_HOME=/srv/app \\
    MODE=test
WORKDIR $APP_HOME
COPY app/ ./
COPY run.sh /usr/local/bin/run.sh
RUN echo "$GREETING from run" > built.txt && chmod 755 /usr/local/bin/run.sh && echo step-output
RUN useradd -m -u 1234 app && chown app /srv/app
USER app
CMD ["python3", "-m", "http.server"]
"""


def context_tar(files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def files(dockerfile=DOCKERFILE, main=b"print('main v1')\n"):
    return {"Dockerfile": dockerfile.encode(), "app/main.py": main, "app/data/x.txt": b"x\n",
            "run.sh": b"#!/bin/sh\necho running\n"}


def build(client, name, ctx, query="", status=200):
    r = client.post("/v1/templates/%s/build%s" % (name, query), raw=ctx, timeout=900,
                    headers={"Content-Type": "application/x-tar"})
    assert r.status == status, r
    if status != 200:
        return r.json()
    return [json.loads(l) for l in r.body.decode().splitlines() if l.strip()]


def steps(events):
    return [e for e in events if e["type"] == "step"]


def output(events):
    return "".join(e.get("data", "") for e in events if e["type"] in ("stdout", "stderr"))


def last(events):
    assert events[-1]["type"] in ("done", "error"), events[-5:]
    return events[-1]


@pytest.fixture(scope="module")
def built(client):
    ev = build(client, "bt-app", context_tar(files()))
    yield ev
    client.delete("/v1/templates/bt-app")


def test_build_runs_steps_and_streams_output(client, built, make):
    assert last(built)["type"] == "done", last(built)
    st = steps(built)
    assert [s["step"] for s in st] == list(range(1, len(st) + 1)) and st[0]["of"] == len(st)
    assert st[0]["instruction"].startswith("FROM default") and st[0]["line"] == 2
    run = [s for s in st if s["instruction"].startswith("RUN echo")][0]
    assert run["line"] == 9 and run["cached"] is False
    assert "step-output" in output(built)
    tpl = last(built)["template"]
    assert tpl["source"] == "build" and tpl["base"] == "default", tpl
    cfg = tpl["config"]
    assert cfg["workdir"] == "/srv/app" and cfg["user"] == "app", cfg
    assert cfg["cmd"] == ["python3", "-m", "http.server"]
    assert "APP_HOME=/srv/app" in cfg["env"] and "MODE=test" in cfg["env"]
    assert not any(e.startswith("GREETING=") for e in cfg["env"]), "ARG leaked into the image env"
    # COPY x 2 and RUN x 2 made four layers on top of the default template
    assert len(tpl["layers"]) == 4, tpl["layers"]

    sb = make(template="bt-app")
    r = client.exec(sb["id"], "pwd; id -un; echo $APP_HOME; cat built.txt; cat main.py; cat data/x.txt; run.sh")
    assert r["exit_code"] == 0, r
    assert r["stdout"].split("\n")[:7] == ["/srv/app", "app", "/srv/app", "hi from run", "print('main v1')",
                                            "x", "running"], r


def test_rebuild_is_cached_and_changes_invalidate_what_follows(client, built):
    ev = build(client, "bt-app", context_tar(files()))
    assert last(ev)["type"] == "done", last(ev)
    runs = [s for s in steps(ev) if s["instruction"].startswith("RUN")]
    assert runs and all(s["cached"] for s in runs), runs
    assert "step-output" not in output(ev)
    assert last(ev)["cached_steps"] == len(runs)
    same = [l["digest"] for l in last(ev)["template"]["layers"]]
    assert same == [l["digest"] for l in last(built)["template"]["layers"]]

    # a changed file in the context: its COPY and everything after run again
    ev = build(client, "bt-app", context_tar(files(main=b"print('main v2')\n")))
    assert last(ev)["type"] == "done", last(ev)
    runs = [s for s in steps(ev) if s["instruction"].startswith("RUN")]
    assert not any(s["cached"] for s in runs), runs
    # a build arg the RUN sees: it runs again too
    ev = build(client, "bt-app", context_tar(files()), "?build_args=" + json.dumps({"GREETING": "yo"}).replace(" ", ""))
    assert last(ev)["type"] == "done", last(ev)
    first_run = [s for s in steps(ev) if s["instruction"].startswith("RUN echo")][0]
    assert first_run["cached"] is False
    # comments and blank lines do not change the keys
    ev = build(client, "bt-app", context_tar(files(dockerfile="\n# another comment\n" + DOCKERFILE)))
    runs = [s for s in steps(ev) if s["instruction"].startswith("RUN")]
    assert all(s["cached"] for s in runs), runs
    # and --no-cache runs everything
    ev = build(client, "bt-app", context_tar(files()), "?no_cache=1")
    assert not any(s["cached"] for s in steps(ev))


def test_failing_run_registers_nothing(client):
    df = "FROM default\nRUN echo fine\nRUN echo boom-output >&2; exit 3\nRUN echo never\n"
    ev = build(client, "bt-fail", context_tar({"Dockerfile": df.encode()}))
    err = last(ev)
    assert err["type"] == "error", err
    assert err["exit_code"] == 3 and err["line"] == 3 and err["step"] == 3, err
    assert "boom-output" in err["output_tail"] and "line 3" in err["message"], err
    assert "never" not in output(ev)
    assert client.get("/v1/templates/bt-fail").status == 404
    assert not os.path.exists(os.path.join(STATE, "templates", "bt-fail"))
    assert not [n for n in os.listdir(os.path.join(STATE, "templates")) if n.startswith(".build-")]


def test_bad_dockerfiles_are_refused_before_anything_runs(client):
    for df, words in (
        ("FROM default\nRUN true\nHEALTHCHECK CMD true\n", ["line 3", "HEALTHCHECK"]),
        ("FROM default\nRUN true\nFROM default\n", ["line 3", "multi-stage"]),
        ("FROM no-such-template\nRUN true\n", ["no-such-template"]),
        ("FROM default\nCOPY --from=x /a /b\n", ["line 2"]),
    ):
        r = build(client, "bt-bad", context_tar({"Dockerfile": df.encode()}), status=r_status(df))
        msg = r["error"]["message"]
        assert all(w in msg for w in words), msg
    # no Dockerfile in the context
    r = build(client, "bt-bad", context_tar({"other": b"x"}), status=400)
    assert "Dockerfile" in r["error"]["message"]
    # a body that is not a tar
    r = build(client, "bt-bad", b"not a tar at all" * 100, status=400)
    assert client.get("/v1/templates/bt-bad").status == 404


def r_status(df):
    return 404 if "no-such-template" in df else 400


def test_copy_errors_name_the_line(client):
    df = "FROM default\nCOPY missing.txt /x\n"
    ev = build(client, "bt-copy", context_tar({"Dockerfile": df.encode()}))
    err = last(ev)
    assert err["type"] == "error" and err["line"] == 2 and "missing.txt" in err["message"], err
    df = "FROM default\nADD https://example.com/x /x\n"
    r = build(client, "bt-copy", context_tar({"Dockerfile": df.encode()}), status=400)
    assert "line 2" in r["error"]["message"] and "URL" in r["error"]["message"], r
    # COPY into an existing dir keeps its mode (/tmp stays 1777), and a dest
    # naming an existing dir puts the file inside it
    df = "FROM default\nCOPY f.txt /tmp/\nCOPY f.txt /opt\nRUN stat -c %a /tmp; cat /opt/f.txt\n"
    ev = build(client, "bt-copy", context_tar({"Dockerfile": df.encode(), "f.txt": b"in-opt\n"}))
    assert last(ev)["type"] == "done", last(ev)
    assert "1777" in output(ev) and "in-opt" in output(ev), output(ev)
    client.delete("/v1/templates/bt-copy")
    assert client.get("/v1/templates/bt-copy").status == 404


def test_run_network_is_the_callers_choice(client):
    probe = ("python3 -c \"import socket; s = socket.socket(); s.settimeout(2); "
             "print('NET-UP' if s.connect_ex(('198.18.1.53', 53)) == 0 else 'NET-DOWN')\"")
    df = "FROM default\nRUN %s\n" % probe
    ev = build(client, "bt-net", context_tar({"Dockerfile": df.encode()}), "?network=none")
    assert last(ev)["type"] == "done", last(ev)
    assert "NET-DOWN" in output(ev), output(ev)
    client.delete("/v1/templates/bt-net")
    r = build(client, "bt-net", context_tar({"Dockerfile": df.encode()}), "?network=bogus", status=400)
    assert "network" in r["error"]["message"] or "mode" in r["error"]["message"]


def test_json_form_and_replacing_a_template(client, make):
    r = client.post("/v1/templates", {"name": "bt-json", "from": "default",
                                      "dockerfile": "RUN echo v1 > /version\nENV V=1\n"}, timeout=600)
    assert r.status == 200, r
    ev = [json.loads(l) for l in r.body.decode().splitlines()]
    assert last(ev)["type"] == "done", last(ev)
    sb = make(template="bt-json")
    assert sh(client, sb["id"], "cat /version; echo $V") == "v1\n1\n"
    # in use: it cannot be replaced
    r = client.post("/v1/templates", {"name": "bt-json", "dockerfile": "RUN echo v2 > /version\n"})
    assert r.status == 409 and sb["id"] in r.json()["error"]["message"] or "used" in r.json()["error"]["message"], r
    client.delete("/v1/sandboxes/" + sb["id"])
    r = client.post("/v1/templates", {"name": "bt-json", "dockerfile": "RUN echo v2 > /version\n"}, timeout=600)
    assert r.status == 200 and json.loads(r.body.decode().splitlines()[-1])["type"] == "done", r
    sb = make(template="bt-json")
    assert sh(client, sb["id"], "cat /version") == "v2\n"
    client.delete("/v1/sandboxes/" + sb["id"])
    assert client.delete("/v1/templates/bt-json").status == 204
    assert client.post("/v1/templates", {"name": "bt-json"}).status == 400
    assert client.post("/v1/templates", {"name": "bt-json", "dockerfile": "RUN x", "bogus": 1}).status == 400


def test_build_from_an_imported_image(client, make):
    r = client.put("/v1/templates/bt-img/import", raw=oci_archive([base_rootfs_entries()], workdir="/home/app",
                                                                      user="app"))
    assert r.status == 201, r
    df = "FROM bt-img\nRUN echo from-image > /home/app/made; id -un\nUSER root\n"
    ev = build(client, "bt-img2", context_tar({"Dockerfile": df.encode()}))
    assert last(ev)["type"] == "done", last(ev)
    assert "app" in output(ev)  # the RUN ran as the image's user
    tpl = last(ev)["template"]
    assert len(tpl["layers"]) == 2 and tpl["layers"][0]["templates"] == 2, tpl["layers"]
    assert tpl["config"]["workdir"] == "/home/app" and tpl["config"]["user"] == "root"
    sb = make(template="bt-img2")
    assert sh(client, sb["id"], "cat made; id -u") == "from-image\n0\n"
    client.delete("/v1/sandboxes/" + sb["id"])
    client.delete("/v1/templates/bt-img2")
    client.delete("/v1/templates/bt-img")


def test_cli_build_shows_steps(client, cli_env, tmp_path):
    for name, data in files().items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    (tmp_path / "Other.dockerfile").write_text("FROM default\nRUN echo cli-step\nRUN exit 7\n")
    cmd = [CLI, "template", "build", "-t", "bt-cli", "-f", "Dockerfile", str(tmp_path)]
    p = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    assert "Step 1/" in p.stdout and "FROM default" in p.stdout and "built template bt-cli" in p.stdout, p.stdout
    p = subprocess.run(cmd, env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0 and "(cached)" in p.stdout, p.stdout
    p = subprocess.run([CLI, "template", "build", "-t", "bt-cli2", "-f", "Other.dockerfile", str(tmp_path)],
                       env=cli_env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 1 and "cli-step" in p.stdout and "exit code 7" in p.stderr, (p.stdout, p.stderr)
    p = subprocess.run([CLI, "template", "ls"], env=cli_env, capture_output=True, text=True)
    assert "bt-cli" in p.stdout and "LAYERS" in p.stdout, p.stdout
    p = subprocess.run([CLI, "template", "inspect", "bt-cli"], env=cli_env, capture_output=True, text=True)
    assert json.loads(p.stdout)["source"] == "build"
    client.delete("/v1/templates/bt-cli")
    p = subprocess.run([CLI, "template", "gc"], env=cli_env, capture_output=True, text=True)
    assert p.returncode == 0 and "removed" in p.stdout, p.stdout
