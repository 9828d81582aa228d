#!/usr/bin/env bash
# `cmake --install` into a temporary DESTDIR, then a library user's program
# (tests/install/hello_pagoda.c) compiled against the installed header and
# library through pkg-config, once shared and once static, and run on MODEL.
# Its greedy completion must equal the installed `pagoda generate --json`'s.
# Also checks the installed file set: only the public headers, the shared
# library exporting exactly the pagoda_* functions of pagoda.h, the man page,
# and pagoda.pc / pagoda-static.pc whose prefix is the one installed to.
#
# usage: install_test.sh BUILD_DIR SOURCE_DIR MODEL CC [EXEC_WRAPPER...]
#   CC: the C compiler of the build (the cross gcc in the aarch64 build,
#   whose programs then run under EXEC_WRAPPER, i.e. qemu). In a cross build
#   PKG_CONFIG_LIBDIR names the target's .pc directories.
set -euo pipefail
build=$1 src=$2 model=$3 cc=$4
shift 4
wrap=("$@")
prefix=/opt/pagoda-install-test
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/stage
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$stage cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log" >&2; fail "cmake --install"; }
root=$stage$prefix
[ -x "$root/bin/pagoda" ] || fail "bin/pagoda not installed"
pc=$(find "$root" -name pagoda.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || fail "pagoda.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
for f in libpagoda.a libpagoda.so libpagoda.so.0; do
  [ -e "$libdir/$f" ] || fail "$f not in $libdir"
done
[ -f "$root/share/man/man1/pagoda.1" ] || fail "man page not installed"
[ -f "$root/share/doc/pagoda/README.md" ] || fail "README.md not installed as docs"
headers=$(cd "$root/include" && find . -type f | sort | tr '\n' ' ')
[ "$headers" = "./pagoda.h ./pagoda/status.h " ] ||
  fail "installed headers are '$headers', want only pagoda.h and pagoda/status.h"
for f in "$pc" "$(dirname "$pc")/pagoda-static.pc"; do
  grep -qx "prefix=$prefix" "$f" || fail "$f: prefix is not $prefix: $(head -1 "$f")"
done
if find "$root" -name 'gen_model*' | grep -q .; then fail "gen_model installed"; fi

# The shared library exports exactly the functions pagoda.h declares.
nm_tool=nm
case "$cc" in *-gcc) command -v "${cc%gcc}nm" >/dev/null && nm_tool=${cc%gcc}nm ;; esac
grep -oE '\bpagoda_[a-z_0-9]+ *\(' "$root/include/pagoda.h" | tr -d '( ' | sort -u >"$tmp/api"
"$nm_tool" -D --defined-only "$libdir/libpagoda.so" | awk '$2 == "T" {print $3}' |
  sed 's/@.*//' | sort -u >"$tmp/exported"
[ -s "$tmp/api" ] || fail "no pagoda_* declarations found in pagoda.h"
diff -u "$tmp/api" "$tmp/exported" >&2 ||
  fail "libpagoda.so exports differ from pagoda.h's functions (- declared, + exported)"

export PKG_CONFIG_PATH=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
if [ -n "${PKG_CONFIG_LIBDIR:-}" ]; then
  export PKG_CONFIG_LIBDIR=$libdir/pkgconfig:$PKG_CONFIG_LIBDIR
fi
cflags=$(pkg-config --cflags pagoda) || fail "pkg-config --cflags pagoda"
libs=$(pkg-config --libs pagoda) || fail "pkg-config --libs pagoda"
static_libs=$(pkg-config --libs pagoda-static) || fail "pkg-config --libs pagoda-static"
case "$cflags" in *"$stage$prefix/include"*) ;; *) fail "pkg-config --cflags: '$cflags'" ;; esac
# No -I into the source tree: only the installed headers are visible.
"$cc" -std=c11 -Wall -Wextra -Werror $cflags "$src/tests/install/hello_pagoda.c" \
  -o "$tmp/hello_shared" $libs || fail "compiling against the shared library"
"$cc" -std=c11 -Wall -Wextra -Werror $cflags "$src/tests/install/hello_pagoda.c" \
  -o "$tmp/hello_static" $static_libs ||
  fail "compiling against the static library"
readelf -d "$tmp/hello_shared" | grep -q 'NEEDED.*libpagoda\.so\.0' ||
  fail "hello_shared does not load libpagoda.so.0"
if readelf -d "$tmp/hello_static" | grep -q 'NEEDED.*libpagoda'; then
  fail "hello_static loads libpagoda.so"
fi

prompt="Once upon a time"
"${wrap[@]}" "$root/bin/pagoda" generate "$model" --prompt "$prompt" --temperature 0 \
  --max-tokens 24 --json >"$tmp/gen.json" 2>"$tmp/gen.err" ||
  { cat "$tmp/gen.err" >&2; fail "installed pagoda generate"; }
python3 -c 'import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))["text"])' \
  "$tmp/gen.json" >"$tmp/want.txt"
[ -s "$tmp/want.txt" ] || fail "pagoda generate produced no text"
for kind in shared static; do
  LD_LIBRARY_PATH=$libdir "${wrap[@]}" "$tmp/hello_$kind" "$model" "$prompt" 24 \
    >"$tmp/$kind.txt" 2>"$tmp/$kind.err" ||
    { cat "$tmp/$kind.err" >&2; fail "hello_$kind exited $?"; }
  cmp -s "$tmp/want.txt" "$tmp/$kind.txt" ||
    fail "hello_$kind wrote '$(cat "$tmp/$kind.txt")', pagoda generate '$(cat "$tmp/want.txt")'"
  echo "hello_$kind: '$(cat "$tmp/$kind.txt")' ($(grep -o 'finish_reason.*' "$tmp/$kind.err"))"
done
echo "install test passed: $prefix under DESTDIR, shared + static, $(wc -l <"$tmp/api") API functions"
