#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The SPDX-License-Identifier header of every source file (C and C++ sources and headers, shell
# scripts, meson.build, linker scripts) under lib/, include/, test/, perf/, tools/ and docs/examples/.

#   test/spdx.sh check [ROOT]     TAP, one line per file: fails for a file without the header
#                                 within its first two lines (the second when the first is #!).
#   test/spdx.sh insert FILE...   add the header to the files that lack it:
#                                 "/* SPDX-License-Identifier: MIT */" on the first line of C, C++
#                                 and linker-script files; "# SPDX-License-Identifier: MIT" on the
#                                 first line of meson.build, or after the #! line of a script.
#   test/spdx.sh insert --all     the same for every file the check covers.

set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
license=MIT

# The files the check covers, relative to the root, sorted.
sources() {
  (cd "$1" && find lib include test perf tools docs/examples -type f \
     \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \
        -o -name '*.sh' -o -name '*.py' -o -name '*.map' -o -name meson.build \) | sort)
}

has_header() { head -n 2 "$1" | grep -q 'SPDX-License-Identifier: '; }

insert() {
  local f=$1 tmp
  has_header "$f" && return 0
  tmp=$(mktemp)
  case $f in
    *.c | *.h | *.cc | *.cpp | *.hpp | *.map)
      { echo "/* SPDX-License-Identifier: $license */"; cat "$f"; } >"$tmp" ;;
    *)
      if head -n 1 "$f" | grep -q '^#!'; then
        { head -n 1 "$f"; echo "# SPDX-License-Identifier: $license"; tail -n +2 "$f"; } >"$tmp"
      else
        { echo "# SPDX-License-Identifier: $license"; cat "$f"; } >"$tmp"
      fi ;;
  esac
  cat "$tmp" >"$f" # keeps the file's mode (scripts stay executable)
  rm -f "$tmp"
  echo "spdx.sh: added the header to $f"
}

case ${1:-} in
check)
  root=$(cd "${2:-$here/..}" && pwd)
  mapfile -t files < <(sources "$root")
  echo "1..${#files[@]}"
  n=0
  failed=0
  for f in "${files[@]}"; do
    n=$((n + 1))
    if has_header "$root/$f"; then
      echo "ok $n - $f"
    else
      echo "not ok $n - $f has no SPDX-License-Identifier (test/spdx.sh insert $f)"
      failed=1
    fi
  done
  exit $failed
  ;;
insert)
  shift
  root=$(cd "$here/.." && pwd)
  if [ "${1:-}" = --all ]; then
    mapfile -t files < <(sources "$root")
    for f in "${files[@]}"; do insert "$root/$f"; done
  else
    [ $# -gt 0 ] || { echo "usage: test/spdx.sh insert FILE... | --all" >&2; exit 2; }
    for f in "$@"; do insert "$f"; done
  fi
  ;;
*)
  echo "usage: test/spdx.sh check [ROOT] | test/spdx.sh insert FILE... | test/spdx.sh insert --all" >&2
  exit 2
  ;;
esac
