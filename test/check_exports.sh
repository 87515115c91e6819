#!/bin/sh
# Every dynamic symbol the shared library defines must be public API: chime_<name>, never a
# library-internal chime__<name> nor anything else. TAP output. The filter is checked on a made-up list
# first, so that a filter that lets everything through fails here.
lib=$1
# The symbols of a list (one per line) that are not public API.
not_public() { grep -v '^chime_[a-z0-9]' | grep -v '^$' || true; }
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
echo "1..3"
leaked=$(printf 'chime_wheel_new\nchime__records_take\nchime_\nmalloc\n' | not_public | tr '\n' ' ')
if [ "$leaked" = "chime__records_take chime_ malloc " ]; then
  echo "ok 1 - the filter rejects chime__*, a bare chime_ and foreign names"
else
  echo "not ok 1 - the filter let through what it should reject: got '$leaked'"
fi
if [ -n "$syms" ] && printf '%s\n' "$syms" | grep -q '^chime_wheel_advance$'; then
  echo "ok 2 - exports the API"
else
  echo "not ok 2 - nm found no chime_wheel_advance"
fi
bad=$(printf '%s\n' "$syms" | not_public)
if [ -z "$bad" ]; then
  echo "ok 3 - only chime_* is exported, no chime__*"
else
  echo "not ok 3 - unexpected exports:"; printf '#   %s\n' $bad
fi
