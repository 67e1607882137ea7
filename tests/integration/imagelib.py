"""Builds OCI layouts and docker-archives in memory for the template tests,
so they need neither a registry nor a container engine.

A layer is a list of entries: (name, kind, data_or_target, mode, uid, gid)
with kind one of "file", "dir", "symlink", "hardlink", "chardev".
"""
import gzip
import hashlib
import io
import json
import os
import tarfile


def _tarinfo(name, kind, payload, mode, uid, gid):
    ti = tarfile.TarInfo(name)
    ti.mode = mode
    ti.uid, ti.gid = uid, gid
    ti.mtime = 1700000000
    if kind == "file":
        ti.type = tarfile.REGTYPE
        ti.size = len(payload)
    elif kind == "dir":
        ti.type = tarfile.DIRTYPE
    elif kind == "symlink":
        ti.type = tarfile.SYMTYPE
        ti.linkname = payload
    elif kind == "hardlink":
        ti.type = tarfile.LNKTYPE
        ti.linkname = payload
    elif kind == "chardev":
        ti.type = tarfile.CHRTYPE
        ti.devmajor, ti.devminor = payload
    return ti


def layer_tar(entries):
    """Uncompressed layer bytes from entries."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            name, kind, payload = e[0], e[1], e[2]
            mode = e[3] if len(e) > 3 else (0o755 if kind == "dir" else 0o644)
            uid = e[4] if len(e) > 4 else 0
            gid = e[5] if len(e) > 5 else 0
            ti = _tarinfo(name, kind, payload, mode, uid, gid)
            if kind == "file":
                t.addfile(ti, io.BytesIO(payload))
            else:
                t.addfile(ti)
    return buf.getvalue()


def host_files(paths):
    """Entries copying host files (binaries and their libraries) into a layer."""
    out, dirs = [], set()
    for p in paths:
        rel = p.lstrip("/")
        parts = rel.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                out.append((d, "dir", None))
        with open(os.path.realpath(p), "rb") as f:
            out.append((rel, "file", f.read(), 0o755))
    return out


def base_rootfs_entries(extra_passwd=""):
    """A tiny root filesystem: dash as /bin/sh plus a few tools and libc."""
    libs = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2",
            "/lib/x86_64-linux-gnu/libselinux.so.1", "/lib/x86_64-linux-gnu/libpcre2-8.so.0"]
    bins = ["/usr/bin/dash", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/ls", "/usr/bin/env",
            "/usr/bin/pwd", "/usr/bin/rm", "/usr/bin/mkdir", "/usr/bin/touch", "/usr/bin/stat",
            "/usr/bin/head"]
    entries = host_files([p for p in bins + libs if os.path.exists(p)])
    passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n" + extra_passwd
    entries += [
        ("bin", "symlink", "usr/bin"),
        ("usr/bin/sh", "symlink", "dash"),
        ("etc", "dir", None),
        ("etc/passwd", "file", passwd.encode()),
        ("etc/group", "file", b"root:x:0:\napp:x:1000:\n"),
        ("root", "dir", None, 0o700),
        ("home", "dir", None),
        ("home/app", "dir", None, 0o755, 1000, 1000),
        ("tmp", "dir", None, 0o1777),
    ]
    return entries


def sha(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


def image_config(diff_ids, env=None, workdir="", user="", cmd=None):
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "WorkingDir": workdir, "User": user, "Cmd": cmd},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }, sort_keys=True).encode()


def _add(t, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    t.addfile(ti, io.BytesIO(data))


def oci_archive(layers, gzip_layers=True, config=None, tamper=None, ref="test:latest", **cfg):
    """An OCI image layout as tar bytes.  tamper(blobs) may change blobs
    (a dict digest -> bytes) after the manifest is written."""
    plain = [layer_tar(l) if isinstance(l, list) else l for l in layers]
    diff_ids = [sha(p) for p in plain]
    blobs = [gzip.compress(p, mtime=0) if gzip_layers else p for p in plain]
    cfg_blob = config if config is not None else image_config(diff_ids, **cfg)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(cfg_blob), "size": len(cfg_blob)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzip_layers else ""),
                    "digest": sha(b), "size": len(b)} for b in blobs],
    }).encode()
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest),
        "size": len(manifest), "annotations": {"org.opencontainers.image.ref.name": ref}}]}).encode()
    allblobs = {sha(b): b for b in blobs + [cfg_blob, manifest]}
    if tamper:
        tamper(allblobs)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        _add(t, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        _add(t, "index.json", index)
        for d, b in allblobs.items():
            _add(t, "blobs/sha256/" + d[7:], b)
    return buf.getvalue()


def docker_archive(layers, tags=("test:latest",), modern=False, **cfg):
    """A docker-archive as tar bytes: the classic layout (HASH/layer.tar,
    HASH.json) or, with modern, the OCI-layout-based one docker 25 writes."""
    plain = [layer_tar(l) if isinstance(l, list) else l for l in layers]
    diff_ids = [sha(p) for p in plain]
    cfg_blob = image_config(diff_ids, **cfg)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        if modern:
            names = ["blobs/sha256/" + sha(p)[7:] for p in plain]
            cfg_name = "blobs/sha256/" + sha(cfg_blob)[7:]
        else:
            names = [sha(p)[7:] + "/layer.tar" for p in plain]
            cfg_name = sha(cfg_blob)[7:] + ".json"
        _add(t, "manifest.json", json.dumps([{"Config": cfg_name, "RepoTags": list(tags),
                                              "Layers": names}]).encode())
        _add(t, cfg_name, cfg_blob)
        for n, p in zip(names, plain):
            _add(t, n, p)
    return buf.getvalue()
