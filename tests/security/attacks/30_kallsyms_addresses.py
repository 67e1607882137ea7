"""Leak kernel addresses (defeat KASLR) from /proc/kallsyms, /proc/modules, /sys/module/*/sections, /proc/PID/stack and /proc/PID/stat wchan."""

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import glob  # noqa: E402


def main():
    try:
        with open("/proc/kallsyms") as f:
            lines = f.read(1 << 20).splitlines()
        nonzero = [line for line in lines if line.split() and int(line.split()[0], 16) != 0]
        if nonzero:
            ESCAPES.append("/proc/kallsyms shows real addresses: %s" % nonzero[0])
        else:
            NOTES.append("/proc/kallsyms: %s" % ("empty (masked)" if not lines else "%d symbols, all addresses zero" % len(lines)))
    except OSError as e:
        NOTES.append("/proc/kallsyms: %s" % en(e.errno))
    try:
        with open("/proc/modules") as f:
            mods = f.read().splitlines()
        leaks = [m for m in mods if m.split() and m.split()[-1].startswith("0x") and int(m.split()[-1], 16) != 0]
        if leaks:
            ESCAPES.append("/proc/modules shows module addresses: %s" % leaks[0])
        else:
            NOTES.append("/proc/modules: no addresses (%d modules)" % len(mods))
    except OSError as e:
        NOTES.append("/proc/modules: %s" % en(e.errno))
    secs = glob.glob("/sys/module/*/sections/.text")[:50]
    leaked = 0
    for s in secs:
        try:
            with open(s) as f:
                v = f.read().strip()
            if v and int(v, 16) != 0:
                ESCAPES.append("%s = %s" % (s, v))
                leaked += 1
                break
        except (OSError, ValueError):
            pass
    NOTES.append("%d module section files checked" % len(secs))
    for pid in ("self", "1"):
        try:
            with open("/proc/%s/stack" % pid) as f:
                st = f.read()
            addrs = [w for w in st.replace("[<", " ").replace(">]", " ").split() if len(w) == 16 and set(w) - {"0"}
                     and all(c in "0123456789abcdef" for c in w)]
            if addrs:
                ESCAPES.append("/proc/%s/stack shows addresses: %s" % (pid, addrs[0]))
            else:
                NOTES.append("/proc/%s/stack: no addresses" % pid)
        except OSError as e:
            NOTES.append("/proc/%s/stack: %s" % (pid, en(e.errno)))
        try:
            with open("/proc/%s/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            wchan = int(fields[32])
            if wchan not in (0, 1):
                ESCAPES.append("/proc/%s/stat wchan = %#x" % (pid, wchan))
        except (OSError, ValueError, IndexError):
            pass


if __name__ == "__main__":
    finish(main)
