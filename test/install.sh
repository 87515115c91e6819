#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# chime as a distribution or an application gets it: `meson install` into a prefix, then
# test/consumer.c built through pkg-config (shared library; static archive in a dynamic program;
# fully static) and through CMake's pkg_check_modules, each run and asked which allocator serves
# malloc and which serves chime's heap allocations; then the installed library's ABI against the
# committed baseline (test/abi.sh). The install is a fresh library-only build of this source tree with debug
# information (abidiff needs it), so it does not depend on how the calling build was configured.
# TAP output.
#
# Usage: test/install.sh SOURCE_ROOT ALLOCATOR SANITIZE
#   ALLOCATOR  the calling build's -Dallocator (the install uses the same)
#   SANITIZE   the calling build's b_sanitize; anything but "none" skips: a sanitized build's tests
#              are about chime's own code, which this script builds again without sanitizers.
set -euo pipefail
src=$(cd "$1" && pwd)
allocator=$2
if [ "$3" != none ]; then
  echo "1..0 # SKIP in a b_sanitize=$3 build (this test builds its own, unsanitized, copy)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; failed=1; }
failed=0
# Run a command quietly; on failure print its output as TAP comments.
quiet() { if ! "$@" >"$tmp/log" 2>&1; then sed 's/^/# /' "$tmp/log"; return 1; fi; }

echo "1..7"
# Without the PostgreSQL backend: Debian's libpq cannot be linked statically (libpq.pc's
# Libs.private names libpgcommon, libpgport and gssapi_krb5, whose archives no -dev package ships),
# so a chime built with it offers only the shared library to static consumers.
if quiet meson setup "$tmp/build" "$src" --prefix="$prefix" --libdir=lib -Dbuildtype=debug \
     -Ddefault_library=both -Dallocator="$allocator" -Dtests=disabled -Dperf=disabled -Ddocs=disabled \
     -Dpostgres=disabled &&
   quiet ninja -C "$tmp/build" && quiet meson install -C "$tmp/build" --no-rebuild; then
  ok "meson install into a prefix"
else
  not_ok "meson install into a prefix"
  exit 1
fi

missing=
for f in include/chime.h include/chime_timer.h include/chime_store.h lib/libchime.so.0 lib/libchime.a lib/pkgconfig/chime.pc \
         share/man/man3/chime.3 share/man/man3/chime_wheel.3 share/man/man3/chime_timer_stop.3; do
  [ -e "$prefix/$f" ] || missing="$missing $f"
done
if [ -z "$missing" ]; then ok "the prefix holds the header, both libraries, chime.pc and the man pages"
else not_ok "the prefix holds the header, both libraries, chime.pc and the man pages" "missing:$missing"; fi

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# The shared library serves its heap allocations from jemalloc (mallocx) or from malloc, as
# configured; nothing may ever replace the program's malloc.
if [ "$allocator" = jemalloc ]; then shared_heap=other; else shared_heap=glibc; fi

# $1: test name, $2: expected output, $3: the program, $4: NEEDED libchime (yes/no/static).
check_program() {
  local name=$1 want=$2 exe=$3 linkage=$4 got dyn
  if ! got=$(LD_LIBRARY_PATH=$prefix/lib "$exe" 2>&1); then
    not_ok "$name" "the program failed: $got"; return
  fi
  dyn=$(readelf -d "$exe" 2>/dev/null || true)
  case $linkage in
    yes) grep -q 'NEEDED.*libchime\.so' <<<"$dyn" || { not_ok "$name" "not linked to libchime.so"; return; } ;;
    no) ! grep -q 'NEEDED.*libchime\.so' <<<"$dyn" || { not_ok "$name" "linked to libchime.so"; return; } ;;
    static) [ -z "$(readelf -l "$exe" | grep INTERP)" ] || { not_ok "$name" "not a static executable"; return; } ;;
  esac
  if [ "$got" = "$want" ]; then ok "$name: $got"; else not_ok "$name" "got: $got" "want: $want"; fi
}

cc=${CC:-cc}
# shellcheck disable=SC2046 # pkg-config's output is a list of words
if quiet "$cc" -o "$tmp/dynamic" "$src/test/consumer.c" $(pkg-config --cflags --libs chime); then
  check_program "pkg-config, shared library" "malloc=glibc heap=$shared_heap" "$tmp/dynamic" yes
else not_ok "pkg-config, shared library: does not link"; fi

# The static archive in a dynamic program, as a build system that prefers static libraries links it.
# shellcheck disable=SC2046
if quiet "$cc" -o "$tmp/archive" "$src/test/consumer.c" $(pkg-config --cflags chime) \
     -Wl,-Bstatic $(pkg-config --static --libs chime) -Wl,-Bdynamic; then
  check_program "pkg-config --static, static archive" "malloc=glibc heap=glibc" "$tmp/archive" no
else not_ok "pkg-config --static, static archive: does not link"; fi

# shellcheck disable=SC2046
if quiet "$cc" -static -o "$tmp/static" "$src/test/consumer.c" $(pkg-config --cflags --static --libs chime); then
  check_program "-static \$(pkg-config --static --libs chime)" "malloc=glibc heap=glibc" "$tmp/static" static
else not_ok "-static \$(pkg-config --static --libs chime): does not link"; fi

mkdir "$tmp/cmake"
cat >"$tmp/cmake/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(consumer C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(CHIME REQUIRED IMPORTED_TARGET chime)
add_executable(consumer "$src/test/consumer.c")
target_link_libraries(consumer PRIVATE PkgConfig::CHIME)
EOF
if quiet cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -G Ninja && quiet cmake --build "$tmp/cmake/build"; then
  check_program "CMake pkg_check_modules(IMPORTED_TARGET)" "malloc=glibc heap=$shared_heap" \
    "$tmp/cmake/build/consumer" yes
else not_ok "CMake pkg_check_modules(IMPORTED_TARGET): does not build"; fi

if quiet "$src/test/abi.sh" check "$prefix/lib/libchime.so"; then
  ok "ABI: no symbol removed or changed since test/abi/libchime.abi"
else
  not_ok "ABI: a symbol was removed or changed since test/abi/libchime.abi (above); if intended, run test/abi.sh update"
fi
exit $failed
