#!/usr/bin/env bash
# docs/pagoda.1 names every command `pagoda --help` lists (as a .B entry of
# its COMMANDS section) and renders without groff warnings.
# usage: man_page.sh MAN_PAGE PAGODA [EXEC_WRAPPER...]
set -euo pipefail
page=$1
shift
cmds=$("$@" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}')
[ -n "$cmds" ] || { echo "FAIL: no commands in pagoda --help" >&2; exit 1; }
missing=0
for c in $cmds; do
  roff=${c//-/\\-}
  if ! grep -qxF ".B $roff" "$page"; then
    echo "FAIL: $page has no entry for the command '$c'" >&2
    missing=1
  fi
done
[ $missing = 0 ] || exit 1
if command -v groff >/dev/null; then
  warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
  [ -z "$warn" ] || { echo "FAIL: groff warnings: $warn" >&2; exit 1; }
fi
echo "man page names all $(echo $cmds | wc -w) commands:" $cmds
