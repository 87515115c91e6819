#!/bin/sh
# Every dynamic symbol the shared library defines must be a chime_* function. TAP output.
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
echo "1..2"
if [ -n "$syms" ]; then echo "ok 1 - exports something"; else echo "not ok 1 - nm found no symbols"; fi
bad=$(printf '%s\n' "$syms" | grep -v '^chime_' | grep -v '^$' || true)
if [ -z "$bad" ] && printf '%s\n' "$syms" | grep -q '^chime_wheel_advance$'; then
  echo "ok 2 - only chime_* is exported"
else
  echo "not ok 2 - unexpected exports:"; printf '#   %s\n' $bad
fi
