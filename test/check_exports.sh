#!/bin/sh
# SPDX-License-Identifier: MIT
# Every dynamic symbol the shared library defines must be a chime_* function in the version node
# CHIME_0 (lib/chime.map). TAP output.
lib=$1
# nm -D prints versioned names as name@@NODE; the node itself is an absolute symbol (type A).
syms=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sort)
echo "1..3"
if [ -n "$syms" ]; then echo "ok 1 - exports something"; else echo "not ok 1 - nm found no symbols"; fi
bad=$(printf '%s\n' "$syms" | sed 's/@.*//' | grep -v '^chime_' | grep -v '^$' || true)
if [ -z "$bad" ] && printf '%s\n' "$syms" | grep -q '^chime_wheel_advance@@CHIME_0$'; then
  echo "ok 2 - only chime_* is exported"
else
  echo "not ok 2 - unexpected exports:"; printf '#   %s\n' $bad
fi
unversioned=$(printf '%s\n' "$syms" | grep -v '@@CHIME_0$' | grep -v '^$' || true)
if [ -z "$unversioned" ]; then
  echo "ok 3 - every export is in the version node CHIME_0"
else
  echo "not ok 3 - exports outside CHIME_0:"; printf '#   %s\n' $unversioned
fi
