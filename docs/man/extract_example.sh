#!/bin/sh
# SPDX-License-Identifier: MIT
# Copy the program in a man page's EXAMPLES section (its .EX ... .EE block that has a main) to a .c
# file, undoing man(7)'s escapes, so that docs/meson.build compiles and runs it as a test.
# Usage: extract_example.sh PAGE.3 OUT.c
set -eu
awk '/^\.SH / { in_examples = ($0 == ".SH EXAMPLES"); next }
     in_examples && /^\.EX$/ { block = ""; in_code = 1; next }
     in_code && /^\.EE$/ { in_code = 0; if (block ~ /int main\(/) { printf "%s", block; exit } next }
     in_code { block = block $0 "\n" }' "$1" |
  sed -e 's/\\e/\\/g' -e 's/\\-/-/g' -e "s/\\\\(aq/'/g" >"$2"
[ -s "$2" ] || { echo "extract_example.sh: no program under .SH EXAMPLES in $1" >&2; exit 1; }
