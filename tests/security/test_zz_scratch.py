import json
CMDS = [
 "id; cat /proc/self/status | grep -i -E 'cap|seccomp|nonewp'; ls -la /proc/self/fd; ls -la /proc/1/fd 2>&1; cat /proc/1/status | head -12",
 "mount 2>&1 | head -40; cat /proc/self/mountinfo",
 "ls -la /dev /run /tmp; ls /sys; ls /proc",
 "ps -ef 2>&1 || ls /proc; for p in /proc/[0-9]*; do echo $p $(tr '\\0' ' ' < $p/cmdline); done",
 "head -3 /proc/kallsyms; wc -c /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/sysrq-trigger; ls /proc/acpi /proc/scsi /sys/firmware 2>&1; cat /proc/latency_stats 2>&1 | head -2",
 "hostname; uname -a; cat /proc/sys/kernel/hostname; ls -la /proc/sys/kernel/core_pattern; cat /proc/sys/kernel/core_pattern",
 "python3 -c 'import os;print(os.listdir(\"/proc/self/ns\"))'; ls -la /proc/self/ns/ /proc/1/ns 2>&1",
 "which perl python3 nc socat curl busybox su sudo ping mount newuidmap 2>&1; find / -xdev -perm -4000 2>/dev/null; getcap -r / 2>/dev/null | head",
]
def test_scratch(client, sandbox):
    for c in CMDS:
        r = client.exec(sandbox["id"], c, timeout=30)
        print("=== ", c, "\n", r["stdout"], r["stderr"])
