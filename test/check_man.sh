#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The man pages (docs/man/*.3) against the public headers. TAP output, one line per check:
#   - every public function (CHIME_API, or a static inline chime_* in the header) is named in the
#     NAME line of a page, which is also what installs `man <function>` (docs/man/meson.build);
#   - every name in a NAME line is declared in a header (no page for a function that is gone);
#   - every page renders without a warning (groff -ww, the formatter man(1) runs).
#
# Usage: test/check_man.sh docs/man include/chime.h include/chime_timer.h include/chime_store.h
set -euo pipefail
mandir=$1
shift
headers=("$@")

# CHIME_API declarations: the identifier before the first "(" on the line.
mapfile -t functions < <( { grep -hE '^CHIME_API ' "${headers[@]}"
                            grep -hE '^static inline [^(]*\bchime_[a-z]' "${headers[@]}"; } |
                          sed -E 's/\(.*//; s/.*[ *]//' | grep -v '^chime__' | sort -u)
# NAME lines: ".SH NAME" then "name, name, ... \- summary".
mapfile -t pages < <(find "$mandir" -name '*.3' | sort)
declare -A named_in
for page in "${pages[@]}"; do
  line=$(awk 'found { print; exit } /^\.SH NAME$/ { found = 1 }' "$page")
  line=${line%% \\- *}
  IFS=', ' read -r -a names <<<"$line"
  for name in "${names[@]}"; do named_in[$name]=${page##*/}; done
done

echo "1..$(( ${#functions[@]} + ${#named_in[@]} + ${#pages[@]} ))"
n=0
for f in "${functions[@]}"; do
  n=$((n + 1))
  if [ -n "${named_in[$f]:-}" ]; then echo "ok $n - $f is documented in ${named_in[$f]}"
  else echo "not ok $n - $f (declared in a public header) is named in no man page under $mandir"; fi
done
for name in $(printf '%s\n' "${!named_in[@]}" | sort); do
  n=$((n + 1))
  if grep -qE "\\b$name\\b" "${headers[@]}"; then echo "ok $n - $name (${named_in[$name]}) is declared"
  else echo "not ok $n - ${named_in[$name]} names $name, which no public header declares"; fi
done
for page in "${pages[@]}"; do
  n=$((n + 1))
  warnings=$(groff -t -man -Tutf8 -ww -z "$page" 2>&1)
  if [ -z "$warnings" ]; then echo "ok $n - ${page##*/} renders without warnings"
  else echo "not ok $n - ${page##*/} renders with warnings"; printf '%s\n' "$warnings" | sed 's/^/# /'; fi
done
