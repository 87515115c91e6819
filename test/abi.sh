#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The shared library's ABI against the committed baseline, test/abi/libchime.abi (abigail-tools).
#
#   test/abi.sh check LIB    compare LIB (a libchime.so built with debug information) with the
#                            baseline: fails when a function or variable was removed or changed
#                            (a parameter, a return type, a struct it reaches), or an ELF symbol
#                            or its version was removed; additions pass.
#   test/abi.sh update       regenerate the baseline from this tree, after an intended change:
#                            builds the library alone with debug information in a temporary
#                            directory (a few seconds) and writes test/abi/libchime.abi.
#   test/abi.sh update LIB   the same from a library already built with debug information.
#
# test/install.sh runs the check in the test suite (suite 'script') on the library it installs.
# Only what the public headers (include/) declare is compared (--headers-dir): internal types may
# change freely.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
# test/test_abi_check.sh points these at a library of its own to check the check.
baseline=${CHIME_ABI_BASELINE:-$here/abi/libchime.abi}
headers=${CHIME_ABI_HEADERS:-$src/include}
# The same flags on both sides; no DT_NEEDED (it names jemalloc or not, per -Dallocator), no paths.
abidw_flags=(--headers-dir "$headers" --no-corpus-path --no-comp-dir-path --short-locs
  --no-elf-needed --drop-undefined-syms --type-id-style hash)

case ${1:-} in
check)
  lib=${2:?usage: test/abi.sh check LIB}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  abidw "${abidw_flags[@]}" --out-file "$tmp/new.abi" "$lib"
  grep -q '<abi-instr' "$tmp/new.abi" || { echo "abi.sh: $lib has no debug information" >&2; exit 1; }
  status=0
  # --hd1/--hd2: a type defined outside the public headers (what an opaque pointer points to, such
  # as struct chime_wheel) is the library's own business; its changes are filtered out.
  abidiff --hd1 "$headers" --hd2 "$headers" "$baseline" "$tmp/new.abi" >"$tmp/report" || status=$?
  cat "$tmp/report"
  # abidiff's status is a bit set: 1 error, 2 usage error, 4 the ABIs differ, 8 an incompatible
  # change. 4 alone covers additions and changes alike, so the summaries decide: any Removed or
  # Changed count other than 0 fails.
  if [ $((status & 3)) -ne 0 ]; then
    echo "abi.sh: abidiff failed (status $status)" >&2
    exit 1
  fi
  if [ $((status & 8)) -ne 0 ] ||
     grep -E 'changes summary:' "$tmp/report" | grep -qE '(^|[:,] )[1-9][0-9]* (Removed|Changed)'; then
    echo "abi.sh: the ABI changed incompatibly since $baseline; if that is intended, run: test/abi.sh update" >&2
    exit 1
  fi
  echo "abi.sh: compatible with $baseline"
  ;;
update)
  lib=${2:-}
  if [ -z "$lib" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    meson setup "$tmp/build" "$src" -Dbuildtype=debug -Ddefault_library=shared \
      -Dtests=disabled -Dperf=disabled -Ddocs=disabled >/dev/null
    ninja -C "$tmp/build" >/dev/null
    lib=$tmp/build/lib/libchime.so
  fi
  mkdir -p "$(dirname "$baseline")"
  abidw "${abidw_flags[@]}" --out-file "$baseline" "$lib"
  echo "abi.sh: wrote $baseline; commit it with the change that made it necessary"
  ;;
*)
  echo "usage: test/abi.sh check LIB | test/abi.sh update [LIB]" >&2
  exit 2
  ;;
esac
