#!/usr/bin/env bash
# `make test-package-arm64`: install the arm64 pagoda .deb into a fresh arm64
# Debian root with `apt-get install ./pagoda_*_arm64.deb` (the root's own apt
# fetches the Depends, arm64 builds of the Debian libraries, from Debian's
# mirror) and serve the tiny model from there, asked with curl from outside.
# The arm64 twin of scripts/test-package.sh, on an amd64 machine.
#
# usage: test-package-arm64.sh PACKAGES_DIR MODEL_DIR [CACHE_DIR]
#   PACKAGES_DIR  holds pagoda_VERSION_arm64.deb (`make package-arm64`)
#   MODEL_DIR     a model directory (default model: stories260K), bind-mounted
#                 read-only into the root at /models/NAME
#   CACHE_DIR     where the pristine arm64 root (debian-bookworm-arm64-chrootless/)
#                 and apt's downloaded archives are kept between runs (default
#                 /work/cache; outside the repository)
#
# 1. The root is made once by `mmdebstrap --mode=chrootless --arch=arm64
#    --variant=apt`: the host's apt and dpkg install the essential set and apt
#    with `dpkg --root --force-script-chrootless` (maintainer scripts run on
#    the host with DPKG_ROOT), so no arm64 code runs. A maintainer script that
#    ignores DPKG_ROOT would change the host, so this runs in a private mount
#    namespace where the host's / is remounted read-only (only /tmp and
#    CACHE_DIR stay writable): such a script fails instead. The bookworm
#    merged /usr comes from mmdebstrap's merged-usr hook (usrmerge's postinst
#    ignores DPKG_ROOT).
# 2. pagoda's Depends cannot be installed that way: fontconfig-config's and
#    shared-mime-info's maintainer scripts (pulled in by libavcodec59 and
#    libavformat59 through librsvg2, cairo, libbluray) ignore
#    DPKG_ROOT and write to the host's /etc/fonts and /usr/share/mime. So the
#    package is installed as on an arm64 machine: `chroot ROOT apt-get install
#    ./pagoda_*_arm64.deb`, every arm64 program (apt, dpkg, maintainer
#    scripts, pagoda) run by qemu-aarch64-static through binfmt_misc. The
#    binfmt_misc entry is registered in a private instance: since Linux 6.7
#    (commit 21ca59b365c0, "binfmt_misc: enable sandboxed mounts") a user
#    namespace mounts its own binfmt_misc, so the handler exists only for
#    the processes of this script (the machine's binfmt_misc is neither
#    mounted nor changed). The user namespace maps every uid and gid to itself
#    (written by this script as root), so files keep their owners.
# Each run starts from the cached root through an overlay; every mount goes
# away with the namespaces.
#
# Needs root, Linux >= 6.7 (binfmt_misc in a user namespace), mmdebstrap,
# qemu-user-static, unshare, chroot, curl, python3.
# Checks: apt-get installs the package and its Depends, all arm64 or
# Architecture: all; dpkg -L lists the command, the library and the man page;
# ldd in the root finds every library; `pagoda --version` runs; `pagoda
# serve` run as an unprivileged user answers /health and a completion equal
# to the root's own `pagoda generate` (scripts/package-checks.sh, shared with
# scripts/test-package.sh).
set -euo pipefail
# shellcheck source=scripts/package-checks.sh
source "$(dirname "$0")/package-checks.sh"
pkgdir=$(realpath "$1")
model=$(realpath "$2")
cache=${3:-/work/cache}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
arch=arm64
multiarch=aarch64-linux-gnu
qemu=/usr/bin/qemu-aarch64-static
# Debian's qemu-aarch64 binfmt pattern (/usr/lib/binfmt.d/qemu-aarch64.conf);
# F: the kernel opens the (static) interpreter now, so the root needs no copy
binfmt=":pagoda-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
binfmt+=":\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:$qemu:F"
stage=${PAGODA_TEST_PACKAGE_STAGE:-host}

if [ "$stage" = host ]; then
  [ "$(id -u)" -eq 0 ] || { echo "test-package-arm64: needs root (mounts, user namespace maps)" >&2; exit 1; }
  for t in mmdebstrap "$qemu" unshare chroot curl python3; do
    command -v "$t" >/dev/null || { echo "test-package-arm64: $t not found (scripts/install-deps.sh --containers)" >&2; exit 1; }
  done
  mkdir -p "$cache"
  exec unshare --mount --propagation private env PAGODA_TEST_PACKAGE_STAGE=mountns bash "$0" "$@"
fi

if [ "$stage" = mountns ]; then
  # ---- private mount namespace: the host's / read-only from here on
  cache=$(realpath "$cache")
  mount --bind /tmp /tmp
  mount --bind "$cache" "$cache"
  mount -o remount,bind,ro /
  if touch /var/.pagoda-test-package-arm64 2>/dev/null; then
    rm -f /var/.pagoda-test-package-arm64
    echo "test-package-arm64: cannot make the host's / read-only in the namespace" >&2
    exit 1
  fi

  base=$cache/debian-$suite-$arch-chrootless
  if [ ! -x "$base/usr/bin/apt-get" ]; then
    echo "test-package-arm64: mmdebstrap --mode=chrootless $suite ($arch) into $base (once)" >&2
    rm -rf "$base.tmp"
    mmdebstrap --mode=chrootless --arch="$arch" --variant=apt \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      "$suite" "$base.tmp" "$mirror" >"$cache/mmdebstrap-$arch.log" 2>&1 ||
      { tail -20 "$cache/mmdebstrap-$arch.log" >&2; exit 1; }
    mv "$base.tmp" "$base"
  fi

  deb=$(ls "$pkgdir"/pagoda_*_"$arch".deb 2>/dev/null | head -1 || true)
  [ -n "$deb" ] || { echo "test-package-arm64: no pagoda_*_$arch.deb in $pkgdir (make package-arm64)" >&2; exit 1; }
  tmp=$(mktemp -d /tmp/pagoda-test-package-arm64.XXXXXX)
  root=$tmp/root
  child=
  cleanup() {
    [ -n "$child" ] && kill "$child" 2>/dev/null
    umount -R "$root" 2>/dev/null || true
    rm -rf "$tmp"
  }
  trap cleanup EXIT

  pkg_make_root "$base" "$cache" "$arch" "$suite" "$mirror" "$model" "$deb" /sys

  # a user namespace for the private binfmt_misc; the child waits until its
  # identity uid/gid maps are written (as root of the parent namespace)
  unshare --user --mount --propagation private \
    env PAGODA_TEST_PACKAGE_STAGE=userns-wait PAGODA_TEST_ROOT="$root" PAGODA_TEST_DEB="$(basename "$deb")" \
    PAGODA_TEST_LOGS="$cache/test-package-arm64-logs" \
    bash "$0" "$@" &
  child=$!
  for _ in $(seq 1 200); do
    [ "$(readlink "/proc/$child/ns/user")" != "$(readlink /proc/self/ns/user)" ] && break
    sleep 0.05
  done
  echo "0 0 4294967295" >"/proc/$child/uid_map"
  echo "0 0 4294967295" >"/proc/$child/gid_map"
  rc=0
  wait "$child" || rc=$?
  child=
  exit "$rc"
fi

if [ "$stage" = userns-wait ]; then
  # this shell started before the maps existed, as an unmapped user, so it
  # holds no capabilities: once uid 0 is mapped, start again as root of the
  # namespace (bash's own kill and wait need CAP_KILL for `nobody`'s server)
  for _ in $(seq 1 100); do
    [ "$(id -u)" = 0 ] && break
    sleep 0.05
  done
  [ "$(id -u)" = 0 ] || { echo "test-package-arm64: the user namespace got no uid map" >&2; exit 1; }
  exec env PAGODA_TEST_PACKAGE_STAGE=userns bash "$0" "$@"
fi

# ---- user namespace (uids/gids mapped to themselves), its own mount namespace
root=$PAGODA_TEST_ROOT
logs=$PAGODA_TEST_LOGS
deb=$PAGODA_TEST_DEB
tmp=$(dirname "$root")
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  true
}
trap cleanup EXIT
# on failure the logs (apt, ldd, generate, serve) are kept in CACHE_DIR/test-package-arm64-logs/
fail() {
  echo "FAIL: $*" >&2
  [ -f "$tmp/serve.log" ] && tail -20 "$tmp/serve.log" >&2
  rm -rf "$logs" && mkdir -p "$logs" && cp "$tmp"/*.log "$tmp"/*.txt "$tmp"/*.err "$logs"/ 2>/dev/null
  echo "logs: $logs" >&2
  exit 1
}

mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>"$tmp/binfmt.err" ||
  fail "cannot mount a private binfmt_misc in a user namespace (Linux >= 6.7 needed; $(uname -r)): $(cat "$tmp/binfmt.err")"
printf '%s' "$binfmt" >/proc/sys/fs/binfmt_misc/register || fail "cannot register $qemu in the private binfmt_misc"
export QEMU_CPU=max
chroot "$root" /usr/bin/true || fail "the root's arm64 /usr/bin/true does not run through qemu"

echo "== apt-get install ./$deb into a fresh $suite $arch root (chroot, arm64 apt under qemu)"
pkg_apt_install "$deb"
status=$(chroot "$root" dpkg-query -W -f='${db:Status-Status} ${Architecture}' pagoda) ||
  fail "dpkg-query: pagoda is not in the root's status"
[ "$status" = "installed $arch" ] || fail "pagoda in the root: '$status', want 'installed $arch'"
others=$(chroot "$root" dpkg-query -W -f='${Package}:${Architecture}\n' | grep -v -e ":$arch\$" -e ':all$' || true)
[ -z "$others" ] || fail "packages of other architectures in the root: $(echo $others)"
pkg_check_installed "$multiarch"

echo "== pagoda serve (arm64 under qemu) as user nobody in the root, curl from outside"
pkg_serve_checks "$(basename "$(ls -d "$root"/models/*)")" 120
echo "test-package-arm64 passed: $deb installs and serves in a fresh Debian $suite $arch root"
