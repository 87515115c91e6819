#!/bin/sh
# SPDX-License-Identifier: MIT
# Every dynamic symbol the shared library defines must be public API: a chime_<name> function in the
# version node CHIME_0 (lib/chime.map), never a library-internal chime__<name> (which the map's
# chime_* glob would match) nor anything else. TAP output. The filter is checked on a made-up list
# first, so that a filter that lets everything through fails here.
lib=$1
# The symbols of a list (one per line, versions stripped) that are not public API.
not_public() { grep -v '^chime_[a-z0-9]' | grep -v '^$' || true; }
# nm -D prints versioned names as name@@NODE; the node itself is an absolute symbol (type A).
syms=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sort)
echo "1..4"
leaked=$(printf 'chime_wheel_new\nchime__records_take\nchime_\nmalloc\n' | not_public | tr '\n' ' ')
if [ "$leaked" = "chime__records_take chime_ malloc " ]; then
  echo "ok 1 - the filter rejects chime__*, a bare chime_ and foreign names"
else
  echo "not ok 1 - the filter let through what it should reject: got '$leaked'"
fi
if [ -n "$syms" ] && printf '%s\n' "$syms" | grep -q '^chime_wheel_advance@@CHIME_0$'; then
  echo "ok 2 - exports the API"
else
  echo "not ok 2 - nm found no chime_wheel_advance@@CHIME_0"
fi
bad=$(printf '%s\n' "$syms" | sed 's/@.*//' | not_public)
if [ -z "$bad" ]; then
  echo "ok 3 - only chime_* is exported, no chime__*"
else
  echo "not ok 3 - unexpected exports:"; printf '#   %s\n' $bad
fi
unversioned=$(printf '%s\n' "$syms" | grep -v '@@CHIME_0$' | grep -v '^$' || true)
if [ -z "$unversioned" ]; then
  echo "ok 4 - every export is in the version node CHIME_0"
else
  echo "not ok 4 - exports outside CHIME_0:"; printf '#   %s\n' $unversioned
fi
