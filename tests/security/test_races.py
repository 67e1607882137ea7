"""Symlink races against the files and archive API.

A loop inside the sandbox keeps flipping paths between a real directory and a
symlink (atomically with renameat2(RENAME_EXCHANGE), and by delete+recreate)
aimed at host locations: /, /etc, the host marker directory's path,
/proc/1/root/..., /proc/self/cwd/.., a climbing relative path and another
sandbox's layer.  Meanwhile the host runs uploads, downloads, listings, tar
uploads and downloads, deletes and deep mkdirs through those paths, in
parallel.  Afterwards nothing outside the sandbox may have been read, written,
created or removed: the host marker dir is byte-for-byte unchanged, no
response carries its secret or its host-only file name, no file with the
race's token exists on the host, and the other sandbox is untouched.
"""
import io
import json
import os
import secrets
import tarfile
import threading
import time

import pytest

from conftest import STATE
import hostside
from hostside import files_url, put_file

RACE = secrets.token_hex(4)
STOP = "/root/race-stop"

SWAPPER = r"""
import ctypes, json, os, shutil, sys, time
cfg = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
AT_FDCWD, RENAME_EXCHANGE = -100, 2

def exchange(a, b):
    return libc.syscall(ctypes.c_long(316), ctypes.c_long(AT_FDCWD), a.encode(), ctypes.c_long(AT_FDCWD),
                        b.encode(), ctypes.c_long(RENAME_EXCHANGE)) == 0

def clear(p):
    try:
        os.unlink(p)
    except FileNotFoundError:
        pass
    except (IsADirectoryError, PermissionError, OSError):
        shutil.rmtree(p, ignore_errors=True)

def make_dir(p):
    for sub in cfg["prep"]:
        try:
            os.makedirs(os.path.join(p, sub), exist_ok=True)
        except OSError:
            pass
    for rel, data in cfg["decoys"].items():
        try:
            os.makedirs(os.path.dirname(os.path.join(p, rel)), exist_ok=True)
            with open(os.path.join(p, rel), "w") as f:
                f.write(data)
        except OSError:
            pass

def retarget(p, target):
    tmp = p + ".new"
    clear(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, p)

targets, paths = cfg["targets"], cfg["paths"]
for p in paths:
    os.makedirs(os.path.dirname(p), exist_ok=True)
    clear(p); clear(p + ".alt")
    make_dir(p)
    os.symlink(targets[0], p + ".alt")
open(cfg["ready"], "w").close()
n = exchanges = recreates = 0
deadline = time.time() + cfg["max_seconds"]
while not os.path.exists(cfg["stop"]) and time.time() < deadline:
    n += 1
    for i, p in enumerate(paths):
        if n % 97 == 0:
            # the slow way too: delete, recreate as a directory, delete, recreate as a link
            clear(p)
            make_dir(p)
            clear(p)
            try:
                os.symlink(targets[(n + i) % len(targets)], p)
            except OSError:
                pass
            recreates += 1
            continue
        if n % 13 == 0:
            # point whichever side is the link somewhere else
            for q in (p, p + ".alt"):
                if os.path.islink(q):
                    try:
                        retarget(q, targets[(n // 13 + i) % len(targets)])
                    except OSError:
                        pass
        if not os.path.lexists(p + ".alt"):
            try:
                os.symlink(targets[n % len(targets)], p + ".alt")
            except OSError:
                pass
        if not os.path.lexists(p):
            make_dir(p)
        if exchange(p, p + ".alt"):
            exchanges += 1
print(json.dumps({"rounds": n, "exchanges": exchanges, "recreates": recreates}))
"""


class RaceEnv:
    def __init__(self, client, daemon):
        self.client = client
        self.daemon = daemon
        self.marker = hostside.HostMarker("race")
        self.other = hostside.OtherSandbox(client, "race-other")
        # a file only the host's copy of the marker dir has: never in any answer
        self.host_only = "hostonly-%s.txt" % hostside.TOKEN
        with open(os.path.join(self.marker.dir, self.host_only), "w") as f:
            f.write(self.marker.secret)
        self.marker.baseline = self.marker._state()

    def targets(self):
        mdir = self.marker.dir
        other_upper = os.path.join(STATE, "sandboxes", self.other.id, "upper")
        return ["/", "/etc", mdir, "/proc/1/root" + mdir, "/proc/self/root/..", "/proc/1/cwd/../..",
                "../../../../../../../..", "/proc/self/cwd/../../../../" + mdir.lstrip("/"), other_upper,
                "/proc/1/root/etc", "/dev/fd/../../.." + mdir]

    def problems(self):
        out = self.marker.problems()
        out += self.other.problems()
        out += leftover_race_files()
        if self.daemon.proc.poll() is not None:
            out.append("forkboxd exited with %s" % self.daemon.proc.returncode)
        elif self.client.get("/healthz", key=False).status != 200:
            out.append("forkboxd unhealthy")
        return out

    def close(self):
        self.other.close()
        self.marker.remove()


def leftover_race_files():
    """Files named with this run's token anywhere on the host outside sandboxes."""
    out = []
    for d in ("/", "/etc", "/tmp", "/root", "/var/tmp", "/run", "/var/lib", STATE, os.path.join(STATE, "tmp")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        out += [os.path.join(d, n) for n in names if RACE in n]
    for root, dirs, files in os.walk("/tmp"):
        if root.count(os.sep) > 3:
            dirs[:] = []
        out += [os.path.join(root, n) for n in dirs + files if RACE in n]
    return sorted(set(out))


@pytest.fixture(scope="module")
def race_env(client, daemon):
    env = RaceEnv(client, daemon)
    yield env
    env.close()


class Swapper:
    """Runs the swapping loop in the sandbox (an exec in a thread) until stopped."""

    def __init__(self, client, sid, paths, targets, prep, decoys):
        self.client, self.sid = client, sid
        put_file(client, sid, "/root/swapper.py", SWAPPER.encode())
        cfg = {"paths": paths, "targets": targets, "prep": prep, "decoys": decoys, "stop": STOP,
               "ready": "/root/race-ready", "max_seconds": 60}
        self.result = {}
        self.thread = threading.Thread(target=self._run, args=(json.dumps(cfg),))
        self.thread.start()
        deadline = time.time() + 20
        while client.get(files_url(sid, "/root/race-ready")).status != 200:
            assert self.thread.is_alive() and time.time() < deadline, "swapper did not start: %r" % self.result
            time.sleep(0.02)

    def _run(self, cfg):
        self.result.update(self.client.exec(self.sid, ["python3", "/root/swapper.py", cfg], timeout=90))

    def stop(self):
        self.client.put(files_url(self.sid, STOP), raw=b"")
        self.thread.join(120)
        assert not self.thread.is_alive(), "swapper did not stop"
        assert self.result.get("exit_code") == 0, self.result
        stats = json.loads(self.result["stdout"])
        assert stats["exchanges"] > 0, stats
        return stats


class Ops:
    """Collects every response of the host-side operations and checks them."""

    def __init__(self, env):
        self.env = env
        self.lock = threading.Lock()
        self.statuses = {}
        self.leaks = []
        self.errors = []
        self.samples = {}  # first answer per (operation kind, status >= 500), for the log

    def record(self, what, resp):
        body = resp.body
        with self.lock:
            self.statuses.setdefault(what, []).append(resp.status)
            if self.env.marker.secret.encode() in body:
                self.leaks.append("%s answered with the host secret" % what)
            if self.env.host_only in what:
                # the file exists only on the host: any success reached it (error
                # messages naming the requested path are fine)
                if 200 <= resp.status < 300:
                    self.leaks.append("%s succeeded (%d) on a host-only file" % (what, resp.status))
            elif self.env.host_only.encode() in body:
                self.leaks.append("%s answered with the host-only name %s" % (what, self.env.host_only))
            if resp.status >= 500:
                self.samples.setdefault((what.split()[0], resp.status), body[:200])
            if resp.status >= 500 and resp.status != 503:
                self.errors.append("%s -> %r" % (what, resp))

    def run_parallel(self, jobs):
        threads = [threading.Thread(target=self._guard, args=(j,)) for j in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "host operations hung"

    def _guard(self, job):
        try:
            job()
        except Exception as e:  # a failed request must not go unnoticed
            with self.lock:
                self.errors.append("%s: %r" % (job.__name__, e))

    def summary(self):
        return {k: sorted(set(v)) for k, v in self.statuses.items()}


def make_tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = int(time.time())
            if data is None:
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                tf.addfile(ti)
            else:
                ti.size = len(data)
                ti.mode = 0o644
                tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def setup_race(client, sid, env, paths):
    mrel = env.marker.dir.lstrip("/")
    decoy = "SANDBOX-DECOY-%s" % RACE
    # the host marker's path inside the sandbox holds a decoy: reading it is fine, the host's is not
    put_file(client, sid, env.marker.file, decoy.encode())
    prep = [mrel, "etc", "keep", "sub"]
    decoys = {mrel + "/secret.txt": decoy, "secret.txt": decoy}
    return Swapper(client, sid, paths, env.targets(), prep, decoys), mrel


def finish(env, ops, swapper):
    stats = swapper.stop()
    print("swapper:", stats, "statuses:", ops.summary(), "5xx samples:", ops.samples)
    problems = env.problems()
    assert not ops.leaks, ops.leaks[:10]
    assert not problems, problems
    assert not ops.errors, ops.errors[:10]
    return stats


ITER = 40


def test_race_file_upload_download(client, sandbox, race_env):
    """PUT and GET files through paths that flip between a dir and links to host places."""
    sid = sandbox["id"]
    swapper, mrel = setup_race(client, sid, race_env, ["/root/race/a", "/root/race/b/c"])
    ops = Ops(race_env)

    def uploads():
        for i in range(ITER):
            for base in ("/root/race/a", "/root/race/b/c"):
                for rel in (mrel + "/secret.txt", "secret.txt", "keep/keep-%s.txt" % hostside.TOKEN,
                            "fbrace-%s-put-%d" % (RACE, i), "etc/fbrace-%s-%d" % (RACE, i)):
                    ops.record("PUT " + rel, client.put(files_url(sid, base + "/" + rel), raw=b"RACE-PUT-%d" % i))

    def downloads():
        for i in range(ITER):
            for base in ("/root/race/a", "/root/race/b/c", "/root/race/a.alt"):
                for rel in (mrel + "/secret.txt", "secret.txt", mrel + "/" + race_env.host_only,
                            race_env.host_only, "etc/hostname"):
                    ops.record("GET " + rel, client.get(files_url(sid, base + "/" + rel)))

    ops.run_parallel([uploads, downloads, downloads])
    finish(race_env, ops, swapper)
    assert 201 in sum(ops.statuses.values(), []), ops.summary()


def test_race_archive_upload(client, sandbox, race_env):
    """Tar uploads into (and below) a path that flips between a dir and links to host places."""
    sid = sandbox["id"]
    swapper, mrel = setup_race(client, sid, race_env, ["/root/race/t", "/root/race/u/v"])
    ops = Ops(race_env)

    def tar_uploads(base):
        def job():
            for i in range(ITER):
                tar = make_tar([("fbrace-%s-tar-%d.txt" % (RACE, i), b"RACE-TAR"),
                                ("d-%s-%d" % (RACE, i), None),
                                ("d-%s-%d/inner.txt" % (RACE, i), b"RACE-TAR-INNER"),
                                ("secret.txt", b"RACE-TAR-OVERWRITE"),
                                ("keep", None),
                                ("keep/keep-%s.txt" % hostside.TOKEN, b"RACE-TAR-OVERWRITE")])
                for target in (base, base + "/sub", base + "/" + mrel, base + "/etc"):
                    ops.record("PUT archive " + target, client.put(files_url(sid, target, endpoint="archive"), raw=tar))
        job.__name__ = "tar_uploads_" + base.replace("/", "_")
        return job

    ops.run_parallel([tar_uploads("/root/race/t"), tar_uploads("/root/race/u/v")])
    finish(race_env, ops, swapper)
    assert 201 in sum(ops.statuses.values(), []), ops.summary()


def test_race_archive_download_and_listing(client, sandbox, race_env):
    """Tar downloads, directory listings and stats of a path that flips to host places."""
    sid = sandbox["id"]
    swapper, mrel = setup_race(client, sid, race_env, ["/root/race/g", "/root/race/h/i"])
    ops = Ops(race_env)

    def archives():
        for i in range(ITER):
            for target in ("/root/race/g", "/root/race/h/i", "/root/race/g/" + mrel, "/root/race/h"):
                ops.record("GET archive " + target, client.get(files_url(sid, target, endpoint="archive")))

    def listings():
        for i in range(ITER * 2):
            for target in ("/root/race/g", "/root/race/g.alt", "/root/race/h/i", "/root/race/g/" + mrel,
                           "/root/race/h/i/" + mrel, "/root/race/g/etc", "/root/race"):
                ops.record("GET list " + target, client.get(files_url(sid, target)))

    ops.run_parallel([archives, listings, listings])
    finish(race_env, ops, swapper)
    assert 200 in sum(ops.statuses.values(), []), ops.summary()


def test_race_delete_and_mkdir(client, sandbox, race_env):
    """Deletes (files, recursive dirs) and uploads that create parent dirs, through flipping paths."""
    sid = sandbox["id"]
    swapper, mrel = setup_race(client, sid, race_env, ["/root/race/d", "/root/race/e/f"])
    ops = Ops(race_env)

    def mkdirs():
        for i in range(ITER):
            for base in ("/root/race/d", "/root/race/e/f"):
                for rel in ("newdir-%s-%d/a/b/c.txt" % (RACE, i), mrel + "/newdir-%s-%d/x.txt" % (RACE, i),
                            "etc/newdir-%s-%d/y.txt" % (RACE, i)):
                    ops.record("PUT deep " + rel.split("/")[0], client.put(files_url(sid, base + "/" + rel), raw=b"x"))

    def deletes():
        for i in range(ITER):
            for base in ("/root/race/d", "/root/race/e/f"):
                for rel in ("secret.txt", mrel + "/secret.txt", mrel + "/keep", "keep", mrel,
                            "keep/keep-%s.txt" % hostside.TOKEN, race_env.host_only,
                            "newdir-%s-%d" % (RACE, max(i - 1, 0))):
                    ops.record("DELETE " + rel, client.delete(files_url(sid, base + "/" + rel, recursive="true")))

    ops.run_parallel([mkdirs, deletes, deletes])
    finish(race_env, ops, swapper)
    statuses = sum(ops.statuses.values(), [])
    assert 201 in statuses and 204 in statuses, ops.summary()


def test_race_everything_at_once(client, sandbox, race_env):
    """All kinds of operations at once on one deep path whose middle component flips."""
    sid = sandbox["id"]
    swapper, mrel = setup_race(client, sid, race_env, ["/root/race/m", "/root/race/m2"])
    ops = Ops(race_env)
    base = "/root/race/m"

    def puts():
        for i in range(ITER):
            ops.record("PUT", client.put(files_url(sid, "%s/%s/fbrace-%s-%d" % (base, mrel, RACE, i)), raw=b"R"))
            ops.record("PUT", client.put(files_url(sid, base + "/secret.txt"), raw=b"RACE"))

    def gets():
        for i in range(ITER):
            ops.record("GET", client.get(files_url(sid, base + "/" + mrel + "/secret.txt")))
            ops.record("GET", client.get(files_url(sid, base + "/" + mrel)))
            ops.record("GET archive", client.get(files_url(sid, base, endpoint="archive")))

    def tars():
        for i in range(ITER):
            tar = make_tar([("fbrace-%s-all-%d" % (RACE, i), b"T"), ("secret.txt", b"T")])
            ops.record("PUT archive", client.put(files_url(sid, base + "/" + mrel, endpoint="archive"), raw=tar))
            ops.record("PUT archive", client.put(files_url(sid, "/root/race/m2", endpoint="archive"), raw=tar))

    def deletes():
        for i in range(ITER):
            ops.record("DELETE", client.delete(files_url(sid, "%s/%s/fbrace-%s-%d" % (base, mrel, RACE, i))))
            ops.record("DELETE", client.delete(files_url(sid, base + "/keep", recursive="true")))

    ops.run_parallel([puts, gets, tars, deletes])
    finish(race_env, ops, swapper)
