"""Read the kernel log through syslog(2)/klogctl, /dev/kmsg, /proc/kmsg and dmesg, and change the console log level."""
import ctypes
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

import stat  # noqa: E402
import subprocess  # noqa: E402

SYS_syslog = 103
READ_ALL, CONSOLE_LEVEL, SIZE_UNREAD, SIZE_BUFFER = 3, 8, 9, 10


def main():
    r, e = sysc(SYS_syslog, SIZE_BUFFER, None, 0)
    (ESCAPES.append("syslog(SIZE_BUFFER) = %d" % r) if r >= 0 else NOTES.append("syslog(SIZE_BUFFER): %s" % en(e)))
    buf = ctypes.create_string_buffer(65536)
    r, e = sysc(SYS_syslog, READ_ALL, buf, 65536)
    if r > 0:
        ESCAPES.append("syslog(READ_ALL) read %d bytes: %r" % (r, buf.raw[:80]))
    elif r == 0:
        ESCAPES.append("syslog(READ_ALL) allowed (empty buffer)")
    else:
        NOTES.append("syslog(READ_ALL): %s" % en(e))
    r, e = sysc(SYS_syslog, SIZE_UNREAD, None, 0)
    (ESCAPES.append("syslog(SIZE_UNREAD) = %d" % r) if r >= 0 else NOTES.append("syslog(SIZE_UNREAD): %s" % en(e)))
    try:
        with open("/proc/sys/kernel/printk") as f:
            level = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        level = 7
    r, e = sysc(SYS_syslog, CONSOLE_LEVEL, None, level)  # the current level: no change if it works
    (ESCAPES.append("syslog(CONSOLE_LEVEL) allowed") if r >= 0 else NOTES.append("syslog(CONSOLE_LEVEL): %s" % en(e)))
    for path in ("/dev/kmsg", "/proc/kmsg"):
        try:
            st = os.stat(path)
        except OSError as e:
            NOTES.append("%s: %s" % (path, en(e.errno)))
            continue
        if stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3):
            NOTES.append("%s is masked with /dev/null" % path)
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            NOTES.append("open %s: %s" % (path, en(e.errno)))
            continue
        # /proc/kmsg reads consume the host's log: opening is proof enough
        data = b""
        if path == "/dev/kmsg":
            try:
                data = os.read(fd, 8192)
            except OSError:
                pass
        ESCAPES.append("opened %s%s" % (path, " and read %r" % data[:80] if data else ""))
        os.close(fd)
    try:
        p = subprocess.run(["dmesg"], capture_output=True, timeout=10)
        if p.returncode == 0 and p.stdout.strip():
            ESCAPES.append("dmesg printed the kernel log: %r" % p.stdout[:80])
        else:
            NOTES.append("dmesg: exit %d %s" % (p.returncode, p.stderr.decode(errors="replace").strip()[:60]))
    except FileNotFoundError:
        NOTES.append("no dmesg binary")


if __name__ == "__main__":
    finish(main)
