#!/bin/sh
# Copy the Nth ```c block (default the first) of README.md's "## Using it" section to a .c file, so the
# README's examples are compiled and run by the test suite and cannot rot.
# Usage: extract_example.sh README.md OUT.c [N]
set -eu
awk -v want="${3:-1}" '/^## Using it/ { in_section = 1; next }
     in_section && /^## / { exit }
     in_section && /^```c$/ { n++; if (n == want) in_code = 1; next }
     in_code && /^```$/ { exit }
     in_code { print }' "$1" >"$2"
[ -s "$2" ] || { echo "extract_example.sh: no C example number ${3:-1} under '## Using it' in $1" >&2; exit 1; }
