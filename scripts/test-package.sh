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
# to the chroot's own `pagoda generate`.
set -euo pipefail
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

mkdir -p "$root" "$tmp/upper" "$tmp/work" "$cache/apt-archives-$arch/partial"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --bind "$cache/apt-archives-$arch" "$root/var/cache/apt/archives"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb ${mirror%/debian}/debian-security $suite-security main
EOF
mkdir -p "$root/models/$(basename "$model")"
mount --bind -o ro "$model" "$root/models/$(basename "$model")"
cp "$deb" "$root/tmp/"

echo "== apt-get install ./$(basename "$deb") into a fresh $suite root"
chroot "$root" apt-get update -qq >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log" >&2; fail "apt-get update"; }
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  "./tmp/$(basename "$deb")" >>"$tmp/apt.log" 2>&1 ||
  { tail -30 "$tmp/apt.log" >&2; fail "apt-get install ./$(basename "$deb")"; }
grep -E '^(Setting up|Unpacking) ' "$tmp/apt.log" | grep -c 'Setting up' |
  xargs -I{} echo "   {} packages set up (pagoda and its Depends)"
files=$(chroot "$root" dpkg -L pagoda)
for f in /usr/bin/pagoda /usr/share/man/man1/pagoda.1 "/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/libpagoda.so.0"; do
  grep -qxF "$f" <<<"$files" || fail "dpkg -L pagoda has no $f"
done
version=$(chroot "$root" pagoda --version) || fail "pagoda --version in the root"
echo "   $version"
ldd_missing=$(chroot "$root" ldd /usr/bin/pagoda | grep 'not found' || true)
[ -z "$ldd_missing" ] || fail "libraries missing in the root: $ldd_missing"

echo "== pagoda serve as user nobody in the root, curl from outside"
name=$(basename "$model")
chroot --userspec=nobody:nogroup "$root" pagoda generate "/models/$name" --prompt "Once upon a time" \
  --temperature 0 --max-tokens 16 --json >"$tmp/gen.json" 2>"$tmp/gen.err" ||
  { cat "$tmp/gen.err" >&2; fail "pagoda generate in the root"; }
chroot --userspec=nobody:nogroup "$root" pagoda serve "/models/$name" --host 127.0.0.1 --port 0 \
  >"$tmp/serve.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/^PORT=\([0-9]*\)$/\1/p' "$tmp/serve.log" | head -1)
  [ -n "$port" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "pagoda serve exited"
  sleep 0.1
done
[ -n "$port" ] || fail "pagoda serve printed no PORT= line in 60 s"
curl -fsS "http://127.0.0.1:$port/health" >/dev/null || fail "GET /health"
resp=$(curl -fsS "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}') || fail "POST /v1/completions"
got=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["text"])' "$resp")
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$tmp/gen.json")
[ -n "$got" ] || fail "empty completion: $resp"
[ "$got" = "$want" ] || fail "completion '$got' differs from pagoda generate's '$want'"
echo "   port $port: /health ok, completion '$got'"
echo "test-package passed: $(basename "$deb") installs and serves in a fresh Debian $suite root"
