#!/bin/sh
# Prepares the peer systems that bench/ttfc compares forkbox with: podman (with
# runc) and bubblewrap, plus a podman image made from the same root filesystem
# that forkbox's default template uses. For bench/fork and bench/memory-checkpoint
# it also puts a `criu` on PATH for runc (`podman container checkpoint/restore`):
# a wrapper that runs forkbox's CRIU build with CRIU_FAULT=130.
#
# Run as root. Idempotent: every step checks first and does nothing when its
# result is already in place, so a second run takes well under a second.
#
# usage: bench/setup-peers.sh [--rootfs DIR] [--image NAME] [--reimport]
#   --rootfs DIR   root filesystem to import (default: forkbox's default
#                  template, else the development copy in /var/tmp/fbdev)
#   --image NAME   podman image name (default localhost/forkbox-bench:latest)
#   --reimport     replace the image even if it is up to date
set -eu

FORKBOX_ROOTFS=/var/lib/forkbox/templates/default/rootfs
DEV_ROOTFS=/var/tmp/fbdev/rootfs
IMAGE=localhost/forkbox-bench:latest
CONF=/etc/containers/containers.conf
FORKBOX_CRIU=/usr/local/lib/forkbox/criu/criu
CRIU_WRAPPER=/usr/local/sbin/criu
ROOTFS=""
REIMPORT=0
old_id=""

say() { echo "setup-peers: $*"; }
die() { echo "setup-peers: error: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --rootfs) [ $# -ge 2 ] || die "--rootfs needs a directory"; ROOTFS=$2; shift 2 ;;
        --rootfs=*) ROOTFS=${1#--rootfs=}; shift ;;
        --image) [ $# -ge 2 ] || die "--image needs a name"; IMAGE=$2; shift 2 ;;
        --image=*) IMAGE=${1#--image=}; shift ;;
        --reimport) REIMPORT=1; shift ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "run as root"

# 1. Packages.
missing=""
for p in podman runc bubblewrap; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    say "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! apt-get install -y --no-install-recommends $missing; then
        apt-get update
        # shellcheck disable=SC2086
        apt-get install -y --no-install-recommends $missing
    fi
else
    say "packages present: podman runc bubblewrap"
fi

# 2. containers.conf: crun and podman's default ulimits fail on hosts with the
# hybrid cgroup v1/v2 layout; an empty default_ulimits list avoids the latter.
# Only the one key is added; everything else in the file is left alone.
mkdir -p /etc/containers
if [ ! -e "$CONF" ]; then
    printf '[containers]\ndefault_ulimits = []\n' >"$CONF"
    say "wrote $CONF"
elif awk '
        /^[[:space:]]*\[/ { sec = $0; gsub(/[[:space:]]/, "", sec) }
        sec == "[containers]" && /^[[:space:]]*default_ulimits[[:space:]]*=/ { found = 1 }
        END { exit !found }' "$CONF"; then
    say "$CONF already sets default_ulimits"
elif grep -q '^[[:space:]]*\[containers\][[:space:]]*$' "$CONF"; then
    tmp=$(mktemp "$CONF.XXXXXX")
    awk '{ print }
         !done && /^[[:space:]]*\[containers\][[:space:]]*$/ { print "default_ulimits = []"; done = 1 }' \
        "$CONF" >"$tmp"
    chmod --reference="$CONF" "$tmp"
    mv "$tmp" "$CONF"
    say "added default_ulimits = [] to the [containers] table of $CONF"
else
    printf '\n[containers]\ndefault_ulimits = []\n' >>"$CONF"
    say "appended a [containers] table to $CONF"
fi

# 3. CRIU for podman's checkpoint/restore. runc runs the first `criu` on PATH;
# Debian 12's own (3.17) cannot dump on current kernels, and on the virtual
# machines forkbox is developed on a dump hangs unless CRIU's hardware
# breakpoints are off (CRIU_FAULT=130, as forkboxd runs it). A small wrapper in
# /usr/local/sbin (ahead of /usr/sbin on PATH) runs forkbox's build that way.
# forkboxd itself runs $FORKBOX_CRIU directly and never looks at this wrapper.
WRAPPER_BODY="#!/bin/sh
# written by forkbox's bench/setup-peers.sh: CRIU for runc (podman checkpoint/restore)
CRIU_FAULT=130 exec $FORKBOX_CRIU \"\$@\""
if [ ! -x "$FORKBOX_CRIU" ]; then
    say "note: $FORKBOX_CRIU is missing (scripts/install-criu.sh); podman checkpoint/restore will not work"
elif [ -e "$CRIU_WRAPPER" ] && [ "$(cat "$CRIU_WRAPPER")" = "$WRAPPER_BODY" ]; then
    say "CRIU wrapper $CRIU_WRAPPER present"
elif [ -e "$CRIU_WRAPPER" ] && ! grep -q "bench/setup-peers.sh" "$CRIU_WRAPPER"; then
    say "note: $CRIU_WRAPPER exists and was not written here; left alone"
else
    mkdir -p "$(dirname "$CRIU_WRAPPER")"
    tmp=$(mktemp "$CRIU_WRAPPER.XXXXXX")
    printf '%s\n' "$WRAPPER_BODY" >"$tmp"
    chmod 0755 "$tmp"
    mv "$tmp" "$CRIU_WRAPPER"
    say "wrote $CRIU_WRAPPER (runs $FORKBOX_CRIU with CRIU_FAULT=130)"
fi

# 4. The podman image, imported from the same rootfs forkbox uses.
if [ -z "$ROOTFS" ]; then
    if [ -d "$FORKBOX_ROOTFS" ]; then
        ROOTFS=$FORKBOX_ROOTFS
    elif [ -d "$DEV_ROOTFS" ]; then
        ROOTFS=$DEV_ROOTFS
        say "note: $FORKBOX_ROOTFS does not exist yet; using $DEV_ROOTFS"
    else
        die "no rootfs: neither $FORKBOX_ROOTFS nor $DEV_ROOTFS exists (use --rootfs)"
    fi
fi
[ -d "$ROOTFS" ] || die "rootfs $ROOTFS is not a directory"
[ -x "$ROOTFS/bin/echo" ] || [ -x "$ROOTFS/usr/bin/echo" ] || die "$ROOTFS has no echo binary"
ROOTFS=$(cd "$ROOTFS" && pwd -P)

# A cheap fingerprint of the rootfs: its path plus the change times of the
# directory and of the package database. A rebuilt template changes it, and
# bench/ttfc compares it to tell whether podman runs the same files as the rest.
stamp() {
    s=$(stat -c '%Z' "$ROOTFS")
    if [ -e "$ROOTFS/var/lib/dpkg/status" ]; then
        s="$s-$(stat -c '%Y-%s' "$ROOTFS/var/lib/dpkg/status")"
    fi
    echo "$s"
}
STAMP=$(stamp)

if podman image exists "$IMAGE"; then
    have_src=$(podman image inspect --format '{{ index .Labels "forkbox.bench.rootfs" }}' "$IMAGE" 2>/dev/null || true)
    have_stamp=$(podman image inspect --format '{{ index .Labels "forkbox.bench.stamp" }}' "$IMAGE" 2>/dev/null || true)
    if [ "$REIMPORT" -eq 0 ] && [ "$have_src" = "$ROOTFS" ] && [ "$have_stamp" = "$STAMP" ]; then
        say "image $IMAGE is up to date (from $ROOTFS)"
        exit 0
    fi
    say "replacing image $IMAGE (was from '${have_src:-unknown}', stamp '${have_stamp:-none}')"
    old_id=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
fi

say "importing $ROOTFS as $IMAGE"
# The dev copy of the rootfs may have mount points still in use elsewhere:
# /proc, /sys and /dev content are supplied by every runtime anyway.
tar -C "$ROOTFS" --numeric-owner --xattrs --one-file-system -c . |
    podman import --quiet \
        --change "LABEL forkbox.bench.rootfs=$ROOTFS" \
        --change "LABEL forkbox.bench.stamp=$STAMP" \
        - "$IMAGE" >/dev/null
podman image exists "$IMAGE" || die "import of $IMAGE failed"
# Drop the replaced image, now untagged; harmless if a container still uses it.
if [ -n "${old_id:-}" ] && [ "$old_id" != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]; then
    podman rmi "$old_id" >/dev/null 2>&1 || true
fi
say "imported $IMAGE"
