#!/usr/bin/env bash
# `make test-package`: install the pagoda .deb into a fresh Debian root with
# `apt-get install ./pagoda_*.deb` (apt fetches its Depends from Debian's
# mirror) and serve the tiny model from there, asked with curl from outside.
#
# usage: test-package.sh PACKAGES_DIR MODEL_DIR [CACHE_DIR]
#   PACKAGES_DIR  holds pagoda_VERSION_ARCH.deb (`make package-native`)
#   MODEL_DIR     a model directory (default model: stories260K), bind-mounted
#                 read-only into the root at /models/NAME
#   CACHE_DIR     where the pristine debootstrap root (debian-bookworm-ARCH/) and
#                 apt's downloaded archives are kept between runs (default
#                 /work/cache; outside the repository)
#
# Each run starts from the cached root through an overlay (the root itself is
# never changed), in a private mount namespace (unshare), so every mount goes
# away with the script. Needs root, debootstrap, unshare, chroot, curl.
# Checks: apt-get installs the package and its Depends; dpkg -L lists the
# command, the library and the man page; `pagoda --version` runs; `pagoda
# serve` run as an unprivileged user answers /health and a completion equal
# to the chroot's own `pagoda generate` (scripts/package-checks.sh, shared with
# the arm64 twin).
set -euo pipefail
# shellcheck source=scripts/package-checks.sh
source "$(dirname "$0")/package-checks.sh"
pkgdir=$(realpath "$1")
model=$(realpath "$2")
cache=${3:-/work/cache}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
arch=$(dpkg --print-architecture)

if [ -z "${PAGODA_TEST_PACKAGE_NS:-}" ]; then
  [ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
  for t in debootstrap unshare chroot curl; do
    command -v "$t" >/dev/null || { echo "test-package: $t not found (scripts/install-deps.sh --containers)" >&2; exit 1; }
  done
  mkdir -p "$cache"
  base=$cache/debian-$suite-$arch
  if [ ! -x "$base/usr/bin/apt-get" ]; then
    echo "test-package: debootstrap $suite ($arch) into $base (once)" >&2
    rm -rf "$base.tmp"
    debootstrap --variant=minbase --arch="$arch" "$suite" "$base.tmp" "$mirror" >"$cache/debootstrap-$arch.log" 2>&1 ||
      { tail -20 "$cache/debootstrap-$arch.log" >&2; exit 1; }
    mv "$base.tmp" "$base"
  fi
  exec unshare --mount --propagation private env PAGODA_TEST_PACKAGE_NS=1 bash "$0" "$@"
fi

# ---- inside the private mount namespace
base=$cache/debian-$suite-$arch
deb=$(ls "$pkgdir"/pagoda_*_"$arch".deb 2>/dev/null | head -1 || true)
[ -n "$deb" ] || { echo "test-package: no pagoda_*_$arch.deb in $pkgdir (make package-native)" >&2; exit 1; }
tmp=$(mktemp -d /tmp/pagoda-test-package.XXXXXX)
root=$tmp/root
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  umount -R "$root" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/serve.log" ] && tail -20 "$tmp/serve.log" >&2; exit 1; }

pkg_make_root "$base" "$cache" "$arch" "$suite" "$mirror" "$model" "$deb"

echo "== apt-get install ./$(basename "$deb") into a fresh $suite root"
pkg_apt_install "$(basename "$deb")"
pkg_check_installed "$(dpkg-architecture -qDEB_HOST_MULTIARCH)"

echo "== pagoda serve as user nobody in the root, curl from outside"
pkg_serve_checks "$(basename "$model")" 60
echo "test-package passed: $(basename "$deb") installs and serves in a fresh Debian $suite root"
