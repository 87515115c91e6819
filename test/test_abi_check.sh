#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test/abi.sh itself: it must pass an addition and fail a removal or a change, and ignore a change to
# a struct the header only names (an opaque pointer's target). A small library of its own (one
# header, a few functions, a public and an opaque struct) is the baseline; changed copies are
# checked against it. TAP output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/include"
export CHIME_ABI_BASELINE=$tmp/baseline.abi CHIME_ABI_HEADERS=$tmp/include

# $1: output library; $2: extra member of the public struct; $3: extra declarations and
# definitions; $4: 1 to drop the second function; $5: extra member of the opaque struct, which only
# demo.c defines (as struct chime_wheel is defined in wheel.c). Each library exports what its header
# declares.
build() {
  cat >"$tmp/include/abi_demo.h" <<H
struct abi_demo { int a; $2 };
typedef struct abi_opaque abi_opaque;
int abi_demo_get(const struct abi_demo *d);
int abi_opaque_get(const abi_opaque *o);
$( [ "$4" = 1 ] || echo 'int abi_demo_put(struct abi_demo *d, int a);' )
$3
H
  cat >"$tmp/demo.c" <<C
#include "abi_demo.h"
struct abi_opaque { int a; $5 };
int abi_demo_get(const struct abi_demo *d) { return d->a; }
int abi_opaque_get(const abi_opaque *o) { return o->a; }
$( [ "$4" = 1 ] || echo 'int abi_demo_put(struct abi_demo *d, int a) { d->a = a; return 0; }' )
$( [ -z "$3" ] || echo 'int abi_demo_new(void) { return 1; }' )
C
  cc -g -O0 -shared -fPIC -I"$tmp/include" -o "$1" "$tmp/demo.c"
}

build "$tmp/v1.so" "" "" 0 ""
"$here/abi.sh" update "$tmp/v1.so" >/dev/null

echo "1..5"
n=0
failed=0
expect() { # $1: pass or fail, $2: name, $3: library
  n=$((n + 1))
  if "$here/abi.sh" check "$3" >"$tmp/log" 2>&1; then got=pass; else got=fail; fi
  if [ "$got" = "$1" ]; then echo "ok $n - $2: the check says $got"
  else echo "not ok $n - $2: the check says $got, want $1"; sed 's/^/# /' "$tmp/log"; failed=1; fi
}
build "$tmp/same.so" "" "" 0 ""
expect pass "the same library" "$tmp/same.so"
build "$tmp/added.so" "" "int abi_demo_new(void);" 0 ""
expect pass "a function added" "$tmp/added.so"
build "$tmp/removed.so" "" "" 1 ""
expect fail "a function removed" "$tmp/removed.so"
build "$tmp/changed.so" "long b;" "" 0 ""
expect fail "a struct the functions take grew" "$tmp/changed.so"
build "$tmp/opaque.so" "" "" 0 "long b[4];"
expect pass "a struct behind an opaque pointer grew" "$tmp/opaque.so"
exit $failed
