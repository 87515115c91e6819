#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# chime as a meson subproject: a throwaway parent project, made here in a temporary directory, takes
# chime from subprojects/chime (a link to this source tree) and builds test/consumer.c against
# dependency('chime'), once with default_library=static (the parent's project() default) and once
# with =shared (the parent's command line). chime must build its library only (no tests, no perf
# harness, no docs programs: the parent's `meson test` runs the parent's one test), link the kind of
# library the parent asked for, and never replace the parent's malloc. Without jemalloc, the setup
# must fail with a message naming -Dchime:allocator=system, and that option must work. TAP output.
#
# Usage: test/subproject.sh SOURCE_ROOT SANITIZE (SANITIZE as in test/install.sh)
set -euo pipefail
src=$(cd "$1" && pwd)
if [ "$2" != none ]; then
  echo "1..0 # SKIP in a b_sanitize=$2 build (this test builds its own, unsanitized, copies)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; failed=1; }
quiet() { if ! "$@" >"$tmp/log" 2>&1; then sed 's/^/# /' "$tmp/log"; return 1; fi; }

parent=$tmp/parent
mkdir -p "$parent/subprojects"
ln -s "$src" "$parent/subprojects/chime"
cp "$src/test/consumer.c" "$parent/"
cat >"$parent/meson.build" <<'EOF'
project('parent', 'c', default_options: ['c_std=c11', 'warning_level=3', 'werror=true',
  'default_library=static'])
subproject('chime')
chime_dep = dependency('chime') # chime's meson.override_dependency provides it
test('consumer', executable('consumer', 'consumer.c', dependencies: chime_dep))
EOF

echo "1..4"
# static: from the parent's project() default_options; shared: from the parent's command line.
for kind in static shared; do
  name="default_library=$kind"
  b=$tmp/build-$kind
  option=()
  [ "$kind" = static ] || option=(-Ddefault_library="$kind")
  if ! quiet meson setup "$b" "$parent" -Dbuildtype=debug "${option[@]}" ||
     ! quiet ninja -C "$b"; then
    not_ok "$name: the parent does not build"
    continue
  fi
  problems=()
  # Only the parent's test, only chime's library targets.
  tests=$(meson introspect --tests "$b" | python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))')
  [ "$tests" = consumer ] || problems+=("the parent's tests are: $tests")
  targets=$(meson introspect --targets "$b" | python3 -c 'import json,sys; print(" ".join(sorted(t["name"] for t in json.load(sys.stdin))))')
  case $kind in
    static) want_targets="chime consumer" ;;
    shared) want_targets="chime chime_objs consumer" ;;
  esac
  [ "$targets" = "$want_targets" ] || problems+=("targets: $targets (want: $want_targets)")
  needed=$(readelf -d "$b/consumer" | grep -c 'NEEDED.*libchime\.so' || true)
  case $kind in
    static) [ "$needed" = 0 ] || problems+=("the consumer links libchime.so") ;;
    shared) [ "$needed" = 1 ] || problems+=("the consumer does not link libchime.so") ;;
  esac
  out=$("$b/consumer" 2>&1) || problems+=("the consumer failed: $out")
  case $out in malloc=glibc*) ;; *) problems+=("the parent's malloc was replaced: $out") ;; esac
  quiet meson test -C "$b" --no-rebuild || problems+=("the parent's meson test failed")
  if [ ${#problems[@]} -eq 0 ]; then ok "$name: library only, $kind, $out"
  else not_ok "$name" "${problems[@]}"; fi
done

# No jemalloc: hide every pkg-config file (an empty search path) and ask for the shared library.
mkdir "$tmp/no-pkgconfig"
if PKG_CONFIG_LIBDIR=$tmp/no-pkgconfig PKG_CONFIG_PATH= \
     meson setup "$tmp/build-nojemalloc" "$parent" -Ddefault_library=shared >"$tmp/log" 2>&1; then
  not_ok "without jemalloc the setup fails naming -Dchime:allocator=system" "the setup succeeded"
elif grep -q -- "-Dchime:allocator=system" "$tmp/log"; then
  ok "without jemalloc the setup fails naming -Dchime:allocator=system"
else
  not_ok "without jemalloc the setup fails naming -Dchime:allocator=system" "$(tail -n 5 "$tmp/log")"
fi
if quiet env PKG_CONFIG_LIBDIR="$tmp/no-pkgconfig" PKG_CONFIG_PATH= meson setup "$tmp/build-system" \
     "$parent" -Dbuildtype=debug -Ddefault_library=shared -Dchime:allocator=system &&
   quiet ninja -C "$tmp/build-system" && out=$("$tmp/build-system/consumer") &&
   [ "$out" = "malloc=glibc heap=glibc" ]; then
  ok "without jemalloc, -Dchime:allocator=system builds and runs: $out"
else
  not_ok "without jemalloc, -Dchime:allocator=system builds and runs" "${out:-}"
fi
exit $failed
