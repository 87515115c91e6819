#!/bin/sh
# Copy the first ```c block of README.md's "## Using it" section to a .c file, so the README's example
# is compiled and run by the test suite and cannot rot. Usage: extract_example.sh README.md OUT.c
set -eu
awk '/^## Using it/ { in_section = 1; next }
     in_section && /^## / { exit }
     in_section && /^```c$/ { in_code = 1; next }
     in_code && /^```$/ { exit }
     in_code { print }' "$1" >"$2"
[ -s "$2" ] || { echo "extract_example.sh: no C example under '## Using it' in $1" >&2; exit 1; }
