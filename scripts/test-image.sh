#!/usr/bin/env bash
# `make test-image` / `make image`: build the container image from the
# Dockerfile with podman (Debian's; it builds through buildah), run it on the
# tiny model and ask it with curl from outside.
#
# usage: test-image.sh [--build-only] PACKAGES_DIR MODEL_DIR [CACHE_DIR]
#   PACKAGES_DIR  the packages of `make package-native`, copied to the build
#                 context's packaging/debs/ (removed afterwards); the image
#                 installs them (--build-arg PAGODA_DEBS=prebuilt) instead of
#                 compiling pagoda a second time
#   MODEL_DIR     mounted read-only as the image's /models volume
#   CACHE_DIR     holds the debootstrap root of scripts/test-package.sh
#                 (debian-bookworm-ARCH/, made there if missing)
#
# No registry is reachable here, so the Dockerfile's base image
# (debian:bookworm-slim) is made locally: the cached debootstrap root,
# `podman import`ed under that name, and the build never pulls (--pull=never).
# Where a registry is, `docker build .` uses the real image and the "build" stage.
# Checks: the image runs as a non-root user, exposes 8000 with the model
# volume at /models, its HEALTHCHECK passes (`podman healthcheck run`), and a
# completion through the published port equals `pagoda generate`'s in the image.
#
# Sandboxes: PODMAN_BUILD_FLAGS and PODMAN_RUN_FLAGS are added to `podman
# build` and `podman run`, PODMAN_RUNTIME is podman's --runtime. Their defaults suit containers-in-a-container
# machines like the one this was written on, where crun refuses to start a
# container ("setrlimit RLIMIT_NOFILE: Operation not permitted" for podman's
# default ulimits, then "cgroups in hybrid mode not supported"): build steps
# run with buildah's chroot isolation, and the container with runc and
# ulimits within the caller's own hard limits. On a normal host both may be
# set empty.
set -euo pipefail
# shellcheck source=scripts/package-checks.sh
source "$(dirname "$0")/package-checks.sh"
build_only=0
if [ "${1:-}" = --build-only ]; then build_only=1; shift; fi
pkgdir=$(realpath "$1")
model=$(realpath "$2")
cache=${3:-/work/cache}
src=$(cd "$(dirname "$0")/.." && pwd)
arch=$(dpkg --print-architecture)
base_image=docker.io/library/debian:bookworm-slim
image=localhost/pagoda:test
ctr=pagoda-test-image-$$
build_flags=${PODMAN_BUILD_FLAGS---isolation chroot}
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
run_flags=${PODMAN_RUN_FLAGS---ulimit nofile=$nofile:$nofile --ulimit nproc=4096:4096}
runtime=${PODMAN_RUNTIME-runc}
tmp=$(mktemp -d)
cleanup() {
  podman rm -f "$ctr" >/dev/null 2>&1 || true
  rm -f "$src"/packaging/debs/*.deb
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  podman logs "$ctr" 2>&1 | tail -20 >&2 || true
  exit 1
}
command -v podman >/dev/null || fail "podman not found (scripts/install-deps.sh --containers)"
ls "$pkgdir"/pagoda_*_"$arch".deb >/dev/null 2>&1 || fail "no pagoda_*_$arch.deb in $pkgdir"
rm -f "$src"/packaging/debs/*.deb
cp "$pkgdir"/*.deb "$src/packaging/debs/"

# ---- the base image, from the cached debootstrap root
if ! podman image exists "$base_image"; then
  base=$cache/debian-bookworm-$arch
  if [ ! -x "$base/usr/bin/apt-get" ]; then
    mkdir -p "$cache"
    debootstrap --variant=minbase bookworm "$base.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
      >"$cache/debootstrap-$arch.log" 2>&1 || fail "debootstrap (see $cache/debootstrap-$arch.log)"
    mv "$base.tmp" "$base"
  fi
  echo "== podman import $base as $base_image (no registry here)"
  tar -C "$base" -c . | podman import --change 'CMD ["bash"]' - "$base_image" >/dev/null ||
    fail "podman import"
fi

echo "== podman build (Dockerfile, PAGODA_DEBS=prebuilt)"
# shellcheck disable=SC2086
# --format docker: the OCI image format has no HEALTHCHECK
podman build $build_flags --format docker --pull=never --network=host --build-arg PAGODA_DEBS=prebuilt \
  -t "$image" -f "$src/Dockerfile" "$src" >"$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log" >&2; fail "podman build"; }
grep -E 'STEP|COMMIT' "$tmp/build.log" | sed 's/^/   /' | tail -3 || true
[ $build_only = 1 ] && { echo "image $image built"; exit 0; }

user=$(podman image inspect --format '{{.Config.User}}' "$image")
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] || fail "image user is '$user', want non-root"
ports=$(podman image inspect --format '{{json .Config.ExposedPorts}}' "$image")
case "$ports" in *8000/tcp*) ;; *) fail "image exposes $ports, want 8000/tcp" ;; esac
health=$(podman image inspect --format '{{json .Config.Healthcheck}}' "$image")
case "$health" in *'/health'*) ;; *) fail "image HEALTHCHECK is $health, want a check of /health" ;; esac
volumes=$(podman image inspect --format '{{json .Config.Volumes}}' "$image")
case "$volumes" in *'"/models"'*) ;; *) fail "image volumes $volumes, want /models" ;; esac

echo "== podman run: the model as the /models volume, port 8000 published on 127.0.0.1"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# shellcheck disable=SC2086
# (without systemd podman logs that it cannot schedule the periodic
# healthchecks; `podman healthcheck run` below runs the check itself)
podman ${runtime:+--runtime "$runtime"} run $run_flags -d --name "$ctr" -p "127.0.0.1:$port:8000" \
  -v "$model:/models:ro" "$image" >/dev/null 2>"$tmp/run.err" || { cat "$tmp/run.err" >&2; fail "podman run"; }
ok=0
for _ in $(seq 1 120); do
  if podman healthcheck run "$ctr" >/dev/null 2>&1; then ok=1; break; fi
  [ "$(podman inspect --format '{{.State.Running}}' "$ctr")" = true ] || fail "the container exited"
  sleep 0.5
done
[ $ok = 1 ] || fail "HEALTHCHECK (curl /health inside the container) never passed in 60 s"
uid=$(podman exec "$ctr" id -u)
[ "$uid" != 0 ] || fail "pagoda serve runs as root in the container"
podman exec "$ctr" pagoda generate /models --prompt "Once upon a time" --temperature 0 \
  --max-tokens 16 --json >"$tmp/gen.json" 2>/dev/null || fail "pagoda generate in the container"
pkg_check_completion "$port" "$tmp/gen.json" # GET /health and the completion from outside
echo "   uid $uid, healthcheck ok, 127.0.0.1:$port -> 8000: completion '$got'"
echo "test-image passed: $image builds from the Dockerfile, runs as non-root and serves"
