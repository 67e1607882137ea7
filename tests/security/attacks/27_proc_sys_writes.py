"""Write host sysctls under /proc/sys (core_pattern, modprobe, drop_caches, hostname, panic, kptr_restrict, net, fs...) directly and through /proc/self/root and /proc/self/.. aliases."""
import os

from _attack import ESCAPES, NOTES, en, finish, libc, sysc  # noqa: F401

KNOBS = ["kernel/core_pattern", "kernel/modprobe", "kernel/hostname", "kernel/domainname", "kernel/panic",
         "kernel/panic_on_oops", "kernel/kptr_restrict", "kernel/dmesg_restrict", "kernel/randomize_va_space",
         "kernel/perf_event_paranoid", "kernel/unprivileged_bpf_disabled", "kernel/printk", "kernel/sysrq",
         "kernel/ctrl-alt-del", "kernel/shmmax", "kernel/ns_last_pid", "kernel/core_uses_pid", "kernel/poweroff_cmd",
         "kernel/io_uring_disabled", "vm/drop_caches", "vm/overcommit_memory", "vm/unprivileged_userfaultfd",
         "vm/max_map_count", "fs/suid_dumpable", "fs/protected_symlinks", "fs/file-max",
         "net/ipv4/ip_forward", "net/core/bpf_jit_enable", "user/max_user_namespaces", "dev/tty/legacy_tiocsti"]
WRITE_ONLY_VALUES = {"vm/drop_caches": "1"}


def main():
    written = []
    tried = 0
    for knob in KNOBS:
        for prefix in ("/proc/sys/", "/proc/self/root/proc/sys/", "/proc/self/../sys/", "/proc/1/root/proc/sys/",
                       "/proc/thread-self/root/proc/sys/"):
            path = prefix + knob
            if not os.path.exists("/proc/sys/" + knob):
                break
            try:
                with open(path) as f:
                    value = f.read()
            except OSError:
                value = WRITE_ONLY_VALUES.get(knob)
                if value is None:
                    continue
            tried += 1
            # the value it already has: a success proves the write path without changing the host
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError as e:
                if prefix == "/proc/sys/":
                    NOTES.append("%s: %s" % (path, en(e.errno)))
                continue
            try:
                n = os.write(fd, value.encode())
                written.append("%s (%d bytes)" % (path, n))
            except OSError as e:
                ESCAPES.append("%s opened for writing (write: %s)" % (path, en(e.errno)))
            os.close(fd)
    if written:
        ESCAPES.append("wrote sysctls: " + ", ".join(written))
    # keep the report short: group refusals by errno
    by = {}
    for n in NOTES:
        by.setdefault(n.rsplit(": ", 1)[1], []).append(n.rsplit(": ", 1)[0].replace("/proc/sys/", ""))
    NOTES[:] = ["%d write attempts" % tried] + ["%s for %d knobs (e.g. %s)" % (k, len(v), ", ".join(v[:3])) for k, v in by.items()]


if __name__ == "__main__":
    finish(main)
