# shellcheck shell=bash
# Checks of an installed pagoda shared by scripts/test-package.sh,
# scripts/test-package-arm64.sh (a Debian root entered with chroot) and
# scripts/test-image.sh (the completion check). Sourced, not run: the
# functions use the caller's `fail MESSAGE` (report and exit 1) and its
# variables root (the root's folder) and tmp (a scratch folder for logs);
# pkg_serve_checks sets server_pid for the caller's EXIT trap.
# shellcheck disable=SC2154 # root and tmp are the caller's

# pkg_make_root BASE CACHE ARCH SUITE MIRROR MODEL DEB [DIR...]: $root as an
# overlay on the pristine root BASE (upper and work folders in $tmp) with
# /proc, /dev and each DIR of the host (rbind), apt's archives kept in
# CACHE/apt-archives-ARCH, the host's resolv.conf, SUITE from MIRROR as apt's
# sources, the model folder MODEL read-only at /models/NAME and the package
# DEB copied to /tmp.
pkg_make_root() {
  local base=$1 cache=$2 arch=$3 suite=$4 mirror=$5 model=$6 deb=$7 d
  shift 7
  mkdir -p "$root" "$tmp/upper" "$tmp/work" "$cache/apt-archives-$arch/partial"
  mount -t overlay overlay -o "lowerdir=$base,upperdir=$tmp/upper,workdir=$tmp/work" "$root"
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  for d in "$@"; do
    mount --rbind "$d" "$root$d"
  done
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
}

# pkg_apt_install DEB: `apt-get install ./DEB` (the file in the root's /tmp)
# with its Depends from the root's sources; apt's output in $tmp/apt.log.
pkg_apt_install() {
  local deb=$1 t0=$SECONDS
  chroot "$root" apt-get update -qq >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log" >&2; fail "apt-get update"; }
  chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "./tmp/$deb" >>"$tmp/apt.log" 2>&1 ||
    { tail -30 "$tmp/apt.log" >&2; fail "apt-get install ./$deb"; }
  echo "   $(grep -c '^Setting up ' "$tmp/apt.log" || true) packages set up (pagoda and its Depends) in $((SECONDS - t0)) s"
}

# pkg_check_installed MULTIARCH: dpkg -L pagoda lists the command, the man
# page and /usr/lib/MULTIARCH/libpagoda.so.0; ldd in the root finds every
# library of the command; `pagoda --version` runs.
pkg_check_installed() {
  local multiarch=$1 files f version
  files=$(chroot "$root" dpkg -L pagoda)
  for f in /usr/bin/pagoda /usr/share/man/man1/pagoda.1 "/usr/lib/$multiarch/libpagoda.so.0"; do
    grep -qxF "$f" <<<"$files" || fail "dpkg -L pagoda has no $f"
  done
  chroot "$root" ldd /usr/bin/pagoda >"$tmp/ldd.txt" 2>&1 || { cat "$tmp/ldd.txt" >&2; fail "ldd /usr/bin/pagoda in the root"; }
  ! grep -q 'not found' "$tmp/ldd.txt" || fail "libraries missing in the root: $(grep 'not found' "$tmp/ldd.txt" | tr -s ' \t\n' ' ')"
  echo "   ldd in the root: $(grep -c '=> /' "$tmp/ldd.txt") libraries, none missing"
  version=$(chroot "$root" pagoda --version) || fail "pagoda --version in the root"
  echo "   $version"
}

# pkg_check_completion PORT GEN_JSON: GET /health and a greedy completion of
# "Once upon a time" from the server at 127.0.0.1:PORT; its text must equal
# that of `pagoda generate --json` in GEN_JSON (same prompt, temperature 0,
# 16 tokens). Sets got to the text.
pkg_check_completion() {
  local port=$1 gen_json=$2 resp want
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null || fail "GET /health"
  resp=$(curl -fsS "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0}') || fail "POST /v1/completions"
  got=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["text"])' "$resp")
  want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["text"])' "$gen_json")
  [ -n "$got" ] || fail "empty completion: $resp"
  [ "$got" = "$want" ] || fail "completion '$got' differs from pagoda generate's '$want'"
}

# pkg_serve_checks NAME SECONDS: in the root as user nobody, `pagoda generate`
# and `pagoda serve` (port 0, its PORT= line awaited up to SECONDS) of the
# model /models/NAME, then pkg_check_completion from outside.
pkg_serve_checks() {
  local name=$1 seconds=$2 port='' rc
  chroot --userspec=nobody:nogroup "$root" pagoda generate "/models/$name" --prompt "Once upon a time" \
    --temperature 0 --max-tokens 16 --json >"$tmp/gen.json" 2>"$tmp/gen.err" ||
    { cat "$tmp/gen.err" >&2; fail "pagoda generate in the root"; }
  chroot --userspec=nobody:nogroup "$root" pagoda serve "/models/$name" --host 127.0.0.1 --port 0 \
    >"$tmp/serve.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 $((seconds * 10))); do
    port=$(sed -n 's/^PORT=\([0-9]*\)$/\1/p' "$tmp/serve.log" | head -1)
    [ -n "$port" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
      rc=0
      wait "$server_pid" || rc=$?
      server_pid=
      fail "pagoda serve exited (status $rc)"
    fi
    sleep 0.1
  done
  [ -n "$port" ] || fail "pagoda serve printed no PORT= line in $seconds s"
  pkg_check_completion "$port" "$tmp/gen.json"
  echo "   port $port: /health ok, completion '$got'"
}
