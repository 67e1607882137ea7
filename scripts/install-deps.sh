#!/bin/sh
# Installs the Debian packages forkbox needs to build, run, test and benchmark.
# Idempotent: only missing packages are installed, so a second run is fast.
set -eu

BUILD="meson ninja-build gcc pkgconf libmicrohttpd-dev libjansson-dev \
libseccomp-dev libnftables-dev libsqlite3-dev libarchive-dev libcurl4-gnutls-dev libcap-dev \
libhttp-parser-dev libwslay-dev"
RUN="debootstrap iproute2 ca-certificates e2fsprogs btrfs-progs iptables"
TEST="libcmocka-dev python3-pytest python3-requests clang-format openssl iptables nftables tmux podman runc"
BENCH="podman runc bubblewrap"

want="$BUILD $RUN"
criu=1 # CRIU >= 4 for memory checkpoints: scripts/install-criu.sh
case "${1:-run}" in
    run) ;;
    test) want="$want $TEST" ;;
    bench) want="$want $TEST $BENCH"; criu=0 ;;
    all) want="$want $TEST $BENCH" ;;
    *) echo "usage: $0 [run|test|bench|all]" >&2; exit 2 ;;
esac

missing=""
for p in $want; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done

if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "forkbox: missing packages:$missing (run as root to install)" >&2
        exit 1
    fi
    echo "forkbox: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y --no-install-recommends $missing; then
        apt-get update
        apt-get install -y --no-install-recommends $missing
    fi
fi

if [ "$criu" -eq 1 ]; then
    sh "$(dirname "$0")/install-criu.sh"
fi
