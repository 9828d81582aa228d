#!/usr/bin/env bash
# Installs the Debian packages pagoda's build, tests and benchmarks need.
# Idempotent and quiet: runs `apt-get update` only when something is missing.
#
#   install-deps.sh            everything: native (amd64/arm64 host) packages,
#                              the aarch64 cross toolchain + qemu-user, and the
#                              arm64 multiarch -dev packages the cross-built
#                              tests link against (`make test`, `make package`)
#   install-deps.sh --serve    only what building the `pagoda` command and its
#                              libraries needs (`make run`, `make install`):
#                              no cmocka, linters, cross toolchain or qemu
#   install-deps.sh --serve-arm64  --serve's libraries for arm64 and the
#                              aarch64 cross compiler (`make package-arm64`)
#   install-deps.sh --containers  the tools of `make test-package`,
#                              `make test-package-arm64` and `make test-image`:
#                              debootstrap, mmdebstrap, qemu-user-static,
#                              buildah, podman
set -euo pipefail

mode=${1:-all}
case "$mode" in
  all | --all) mode=all ;;
  --serve | --serve-arm64 | --containers) mode=${mode#--} ;;
  *) echo "usage: install-deps.sh [--serve | --serve-arm64 | --containers]" >&2; exit 2 ;;
esac

# The library and the command (CMakeLists.txt's pkg_check_modules); curl for
# the request `make run` prints, file for CPack's dpkg-shlibdeps step.
SERVE_LIBS=(
  libmimalloc-dev libpcre2-dev libutf8proc-dev libcjson-dev libmicrohttpd-dev
  nettle-dev libxxhash-dev libcurl4-openssl-dev zlib1g-dev libedit-dev
  libsndfile1-dev libsoxr-dev libavformat-dev libavcodec-dev libavutil-dev
)
SERVE_PKGS=(build-essential cmake pkg-config file curl "${SERVE_LIBS[@]}")
# `make test-package` (a Debian root by debootstrap, chroot + unshare),
# `make test-package-arm64` (an arm64 root by mmdebstrap --mode=chrootless,
# then chroot with qemu-aarch64-static in a private binfmt_misc) and
# `make test-image` (buildah builds the Dockerfile, podman runs it with runc:
# scripts/test-image.sh's default runtime, as crun fails in some sandboxes).
# (On a systemd machine qemu-user-static also registers its qemu handlers in
# the machine's binfmt_misc; the test neither needs nor uses them.)
CONTAINER_PKGS=(debootstrap mmdebstrap qemu-user-static buildah podman runc uidmap fuse-overlayfs slirp4netns curl python3)

NATIVE_PKGS=(
  build-essential cmake pkg-config
  libcmocka-dev libmimalloc-dev libpcre2-dev libutf8proc-dev libcjson-dev
  libmicrohttpd-dev
  nettle-dev libxxhash-dev  # prefix-cache block hashes: SHA-256 (default), XXH3-128
  curl jq                  # end-to-end tests of `pagoda serve`
  python3                  # tests/node/scripted_gpt_oss.py (gpt-oss tool calls), tests/hub/mock_hub.py (mock HF hub)
  libcurl4-openssl-dev     # `pagoda bench serve` HTTP client (curl_multi), hub downloads
  libedit-dev              # `pagoda chat` line editing
  libomp-dev               # LLVM OpenMP, peer in the fork-join benchmark
  libsndfile1-dev libsoxr-dev libavformat-dev libavcodec-dev libavutil-dev  # audio decoding (src/audio/)
  ffmpeg                   # tests/test_audio_decode.c converts the test WAVs to mp3/m4a/webm/...
  zlib1g-dev               # src/speech/: Whisper's compression ratio (zlib, as utils.py)
  clang-format clang-tidy cppcheck
  file groff-base          # `make package`: CPack's dpkg-shlibdeps step; the man page test
  clang libclang-rt-14-dev # `make fuzz`: libFuzzer + ASan/UBSan runtimes for clang 14 (native only)
  libopenmpi-dev openmpi-bin  # tensor parallelism across hosts (src/dist/comm_mpi.c; -DPAGODA_MPI=OFF to leave out), comm_mpi_np* tests
  nginx                    # serve_data_parallel_nginx: 2 replicas behind deploy/nginx/pagoda-dp.conf
  chromium                 # serve_webui_chromium: the web chat page in headless Chromium (playwright-core)
)
CROSS_PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user binutils-aarch64-linux-gnu)
ARM64_PKGS=(libcmocka-dev:arm64 libmimalloc-dev:arm64 libpcre2-dev:arm64
            libutf8proc-dev:arm64 libcjson-dev:arm64 libc6-dev:arm64
            libmicrohttpd-dev:arm64 libcurl4-openssl-dev:arm64
            nettle-dev:arm64 libxxhash-dev:arm64
            libsndfile1-dev:arm64 libsoxr-dev:arm64 libavformat-dev:arm64
            libavcodec-dev:arm64 libavutil-dev:arm64 zlib1g-dev:arm64 libedit-dev:arm64)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
# dpkg must know the arm64 architecture before :arm64 packages install
add_arm64() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64
    missing+=(__update__)
  fi
}
case "$mode" in
  serve) want=("${SERVE_PKGS[@]}") ;;
  serve-arm64)
    want=("${SERVE_PKGS[@]}" gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu
          libc6-dev:arm64)
    for p in "${SERVE_LIBS[@]}"; do want+=("$p:arm64"); done
    add_arm64 ;;
  containers) want=("${CONTAINER_PKGS[@]}") ;;
  *) want=("${NATIVE_PKGS[@]}") ;;
esac
if [ "$mode" = all ] && [ "$(uname -m)" = "x86_64" ]; then
  want+=("${CROSS_PKGS[@]}" "${ARM64_PKGS[@]}")
  add_arm64
fi
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi

pkgs=()
for p in "${missing[@]}"; do [ "$p" = "__update__" ] || pkgs+=("$p"); done
echo "install-deps: installing ${pkgs[*]:-(package lists only)}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
if [ ${#pkgs[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
