#!/bin/sh
# Installs CRIU >= 4.0 (checkpoint/restore) for forkboxd's memory features.
#
# Debian 12's own criu (3.17) fails on current kernels ("Unexpected rt vDSO
# area bounds"), so this builds Debian 13 (trixie)'s criu from its source
# package, using only Debian's archive:
#   - a deb-src entry for trixie in its own file
#     (/etc/apt/sources.list.d/forkbox-criu-src.sources; deb-src only, so no
#     trixie binary package can ever be installed through it);
#   - `apt-get source --download-only criu/trixie` into a cache
#     (/var/cache/forkbox/criu-src) so re-runs on one machine download nothing;
#   - Debian 12's build dependencies, `make criu` and the protobuf modules
#     crit needs;
#   - installs into $PREFIX (default /usr/local/lib/forkbox/criu):
#       criu            the binary forkboxd runs (found there by default)
#       crit            CRIU's image tool (Python), a wrapper script
#       lib/pycriu/     crit's library with its generated protobuf modules
#
# forkbox's fixes in scripts/criu-patches/ are applied before the build
# (0001: restore a process whose executable is a memfd, as forkbox-init is).
#
# Idempotent: when $PREFIX/criu already runs, reports a version >= 4.0 and
# was built with the current patches, nothing is done.  Nothing is installed unless the build succeeded and the
# new binary runs; the criu binary is installed last, so a failure leaves
# either the old install or none.
#
# forkboxd must run criu with CRIU_FAULT=130 in its environment: on the
# virtual machines this is developed on, dumping hangs with hardware
# breakpoints enabled (see docs/architecture.md, "CRIU").
#
# Environment: FORKBOX_CRIU_PREFIX, FORKBOX_CRIU_CACHE, FORKBOX_DEBIAN_MIRROR.
set -eu

PREFIX=${FORKBOX_CRIU_PREFIX:-/usr/local/lib/forkbox/criu}
CACHE=${FORKBOX_CRIU_CACHE:-/var/cache/forkbox/criu-src}
MIRROR=${FORKBOX_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SOURCES=/etc/apt/sources.list.d/forkbox-criu-src.sources
BUILD_DEPS="gcc make patch pkgconf xz-utils python3 libprotobuf-c-dev protobuf-c-compiler libprotobuf-dev \
protobuf-compiler libnl-3-dev libnet1-dev libcap-dev libbsd-dev libgnutls28-dev libnftables-dev uuid-dev \
python3-protobuf"

die() {
    echo "install-criu: error: $*" >&2
    exit 1
}
say() { echo "install-criu: $*"; }

# "4.1.1" from `criu --version` ("Version: 4.1.1"); empty if it does not run
criu_version() {
    "$1" --version 2>/dev/null | sed -n 's/^Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1
}

version_ok() { # >= 4.0
    major=${1%%.*}
    case "$major" in '' | *[!0-9]*) return 1 ;; esac
    [ "$major" -ge 4 ]
}

# forkbox's own fixes to CRIU (scripts/criu-patches/*.patch, applied in
# order); an install made with another set is rebuilt
PATCHES=$(cd "$(dirname "$0")/criu-patches" && pwd)
patch_level() {
    cat "$PATCHES"/*.patch 2>/dev/null | sha256sum | cut -d' ' -f1
}

have=$(criu_version "$PREFIX/criu" || true)
if [ -n "$have" ] && version_ok "$have" && [ "$(cat "$PREFIX/patch-level" 2>/dev/null)" = "$(patch_level)" ]; then
    say "criu $have already installed at $PREFIX/criu"
    exit 0
fi

[ "$(id -u)" -eq 0 ] || die "criu >= 4.0 is not installed at $PREFIX; run this as root to build it"
command -v apt-get >/dev/null 2>&1 || die "apt-get not found: this script supports Debian only"
export DEBIAN_FRONTEND=noninteractive

missing=""
for p in $BUILD_DEPS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done
updated=0

mkdir -p "$CACHE"
# the newest criu_VERSION.orig.tar.* in dir $1, or nothing
newest_orig() {
    find "$1" -maxdepth 1 -type f -name 'criu_*.orig.tar.*' | sort -V | tail -n 1
}
orig=$(newest_orig "$CACHE")
if [ -z "$orig" ]; then
    say "adding the trixie deb-src entry ($SOURCES)"
    tmp_sources="$SOURCES.tmp"
    cat >"$tmp_sources" <<EOF
# Added by forkbox scripts/install-criu.sh: CRIU's source package only.
Types: deb-src
URIs: $MIRROR
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    mv -f "$tmp_sources" "$SOURCES"
    apt-get update || die "apt-get update failed (is $MIRROR reachable?)"
    updated=1
    dl=$(mktemp -d "$CACHE/download.XXXXXX")
    # the .orig tarball is all that is needed: apt-get source may still fail
    # on the Debian diff or its signature check, which is not used here
    (cd "$dl" && apt-get source --download-only criu/trixie) || say "apt-get source reported an error; checking what arrived"
    got=$(newest_orig "$dl")
    if [ -z "$got" ]; then
        rm -rf "$dl"
        die "apt-get source criu/trixie brought no criu_*.orig.tar.* (see the output above)"
    fi
    mv -f "$dl"/* "$CACHE"/
    rm -rf "$dl"
    orig="$CACHE/$(basename "$got")"
else
    say "using cached source $orig"
fi

if [ -n "$missing" ]; then
    say "installing build dependencies:$missing"
    # shellcheck disable=SC2086 # a list of package names
    if ! apt-get install -y --no-install-recommends $missing; then
        [ "$updated" -eq 1 ] || apt-get update || die "apt-get update failed"
        # shellcheck disable=SC2086
        apt-get install -y --no-install-recommends $missing || die "cannot install the build dependencies:$missing"
    fi
fi

build=$(mktemp -d /tmp/forkbox-criu-build.XXXXXX)
trap 'rm -rf "$build"' EXIT
trap 'exit 1' INT TERM
say "building from $(basename "$orig") in $build"
tar -xf "$orig" -C "$build" || die "cannot unpack $orig"
src=$(find "$build" -mindepth 1 -maxdepth 1 -type d | head -n 1)
if [ -z "$src" ] || [ ! -f "$src/Makefile" ]; then
    die "$orig holds no criu source tree"
fi
for p in "$PATCHES"/*.patch; do
    [ -f "$p" ] || continue
    say "applying $(basename "$p")"
    patch -d "$src" -p1 --forward --silent <"$p" || die "cannot apply $p"
done
make -C "$src" -j2 criu >"$build/make.log" 2>&1 || {
    tail -n 40 "$build/make.log" >&2
    die "make criu failed (last lines above)"
}
new=$(criu_version "$src/criu/criu" || true)
if [ -z "$new" ] || ! version_ok "$new"; then
    die "the built criu does not run or is older than 4.0 (got '$new')"
fi

# crit: CRIU's image tool, plain Python (Debian's /usr/bin/python3 with
# python3-protobuf) over the protobuf modules that
# `make crit` generates (lib/pycriu) from the source's images/*.proto
make -C "$src" -j2 PYTHON=/usr/bin/python3 crit >"$build/crit.log" 2>&1 || {
    tail -n 20 "$build/crit.log" >&2
    die "make crit failed (last lines above)"
}
PYTHONPATH="$src/lib:$src/crit" /usr/bin/python3 -m crit --help >/dev/null 2>&1 ||
    die "the built crit does not run (python3-protobuf missing?)"

say "installing criu $new into $PREFIX"
mkdir -p "$PREFIX/lib"
rm -rf "$PREFIX/lib/pycriu.new" "$PREFIX/lib/crit.new"
cp -R "$src/lib/pycriu" "$PREFIX/lib/pycriu.new"
find "$PREFIX/lib/pycriu.new" \( -name '*.o' -o -name '*.d' -o -name 'Makefile' -o -name '*.proto' \) -delete
cp -R "$src/crit/crit" "$PREFIX/lib/crit.new"
rm -rf "$PREFIX/lib/pycriu" "$PREFIX/lib/crit"
mv "$PREFIX/lib/pycriu.new" "$PREFIX/lib/pycriu"
mv "$PREFIX/lib/crit.new" "$PREFIX/lib/crit"
cat >"$PREFIX/crit.tmp" <<EOF
#!/bin/sh
# CRIU's image tool, installed by forkbox scripts/install-criu.sh
PYTHONPATH="$PREFIX/lib\${PYTHONPATH:+:\$PYTHONPATH}" exec /usr/bin/python3 -m crit "\$@"
EOF
chmod 0755 "$PREFIX/crit.tmp"
mv -f "$PREFIX/crit.tmp" "$PREFIX/crit"
"$PREFIX/crit" --help >/dev/null 2>&1 || die "crit does not run after install ($PREFIX/crit --help)"
install -m 0755 "$src/criu/criu" "$PREFIX/criu.tmp"
mv -f "$PREFIX/criu.tmp" "$PREFIX/criu"
patch_level >"$PREFIX/patch-level"
say "criu $(criu_version "$PREFIX/criu") installed at $PREFIX/criu (crit at $PREFIX/crit)"
