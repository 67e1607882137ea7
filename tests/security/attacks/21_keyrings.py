"""Use the kernel keyrings (add_key, request_key, keyctl), which are not namespaced, to plant or read keys; /proc/keys must be masked."""
import ctypes

from _attack import ESCAPES, NOTES, cstr, en, finish, libc, sysc  # noqa: F401

SYS_add_key, SYS_request_key, SYS_keyctl = 248, 249, 250
KEY_SPEC_PROCESS_KEYRING, KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -2, -3, -4
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_DESCRIBE, KEYCTL_READ = 0, 1, 6, 11


def main():
    payload = b"fbx-key-payload"
    r, e = sysc(SYS_add_key, cstr("user"), cstr("fbx-key"), ctypes.c_char_p(payload), len(payload), KEY_SPEC_PROCESS_KEYRING)
    (ESCAPES.append("add_key created key %d" % r) if r >= 0 else NOTES.append("add_key: %s" % en(e)))
    r, e = sysc(SYS_add_key, cstr("keyring"), cstr("fbx-ring"), None, 0, KEY_SPEC_USER_KEYRING)
    (ESCAPES.append("add_key created keyring %d in the user keyring" % r) if r >= 0 else NOTES.append("add_key(keyring): %s" % en(e)))
    r, e = sysc(SYS_request_key, cstr("user"), cstr("fbx-key"), None, 0)
    (ESCAPES.append("request_key returned %d" % r) if r >= 0 else NOTES.append("request_key: %s" % en(e)))
    for spec, name in ((KEY_SPEC_USER_KEYRING, "user"), (KEY_SPEC_SESSION_KEYRING, "session")):
        r, e = sysc(SYS_keyctl, KEYCTL_GET_KEYRING_ID, spec, 0)
        (ESCAPES.append("keyctl GET_KEYRING_ID(%s) = %d" % (name, r)) if r >= 0
         else NOTES.append("keyctl GET_KEYRING_ID(%s): %s" % (name, en(e))))
        buf = ctypes.create_string_buffer(4096)
        r, e = sysc(SYS_keyctl, KEYCTL_READ, spec, buf, 4096)
        (ESCAPES.append("keyctl READ(%s) returned %d bytes" % (name, r)) if r >= 0
         else NOTES.append("keyctl READ(%s): %s" % (name, en(e))))
    r, e = sysc(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, cstr("fbx-session"))
    (ESCAPES.append("keyctl JOIN_SESSION_KEYRING = %d" % r) if r >= 0 else NOTES.append("keyctl JOIN: %s" % en(e)))
    try:
        with open("/proc/keys") as f:
            data = f.read()
        if data.strip():
            ESCAPES.append("/proc/keys lists keys: %r" % data[:120])
        else:
            NOTES.append("/proc/keys is empty (masked)")
    except OSError as e:
        NOTES.append("/proc/keys: %s" % en(e.errno))


if __name__ == "__main__":
    finish(main)
