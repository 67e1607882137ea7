#!/bin/sh
# Starts forkboxd in the foreground on its defaults and, once it answers,
# prints the API key and a copy-paste quick start.
set -eu
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DAEMON="$BUILD/src/daemon/forkboxd"
CLI="$(pwd)/$BUILD/src/cli/forkbox"
STATE=${FORKBOX_STATE_DIR:-/var/lib/forkbox}
SOCK=${FORKBOX_SOCKET:-/run/forkbox/forkbox.sock}

quickstart() {
    key=$(cat "$STATE/api-key")
    cat <<EOT

  forkboxd is running.  API key (also in $STATE/api-key, mode 0600):

      $key

  Quick start (another terminal):

      export PATH="$(dirname "$CLI"):\$PATH"
      forkbox run -- python3 -c 'print(6*7)'
      ID=\$(forkbox create --label user=me) && forkbox exec \$ID -- uname -a
      forkbox cp ./README.md \$ID:/root/README.md && forkbox exec \$ID -- ls -l /root
      forkbox rm \$ID

      KEY=\$(cat $STATE/api-key)
      curl -s --unix-socket $SOCK -H "Authorization: Bearer \$KEY" \\
           -X POST http://localhost/v1/sandboxes -d '{"ttl": 300}'
      curl -s -H "Authorization: Bearer \$KEY" http://127.0.0.1:7420/v1/sandboxes

  The first start builds the default template (Debian bookworm + python3,
  about a minute); its progress is shown below.  API reference: docs/api.md.
  Stop with Ctrl-C: sandboxes keep running and are re-adopted on the next start.

EOT
}

if curl -sf --unix-socket "$SOCK" http://localhost/healthz >/dev/null 2>&1; then
    echo "forkboxd is already running on $SOCK"
    quickstart
    exit 0
fi

(
    for _ in $(seq 1 200); do
        if curl -sf --unix-socket "$SOCK" http://localhost/healthz >/dev/null 2>&1 && [ -s "$STATE/api-key" ]; then
            quickstart
            exit 0
        fi
        sleep 0.1
    done
    echo "forkboxd did not come up; see its log above" >&2
) &
shift || true
exec "$DAEMON" "$@"
