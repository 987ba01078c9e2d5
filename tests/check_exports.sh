#!/usr/bin/env bash
# check_exports.sh LIBTERN.so TERN.H - the shared library's dynamic symbol table
# holds exactly the functions the public header declares: no internal function
# (hidden visibility), no data symbol, and nothing declared but missing.
set -uo pipefail
SO=${1:?usage: check_exports.sh libtern.so tern.h}
HDR=${2:?usage: check_exports.sh libtern.so tern.h}
command -v nm >/dev/null || { echo "*** SKIPPED: nm missing (binutils) ***"; exit 77; }
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
nm -D --defined-only "$SO" | awk '$2 ~ /[TDBRVWGS]/ {print $3}' | sed 's/@.*//' | sort -u >"$TMP/exported"
nm -D --defined-only "$SO" | awk '$2 ~ /[DBRGSV]/ {print $3}' | sed 's/@.*//' | sort -u >"$TMP/data"
# declarations: every identifier tern_* followed by '(' outside comments, minus
# the function-pointer typedefs (typedef ... (*tern_x_fn)(...))
sed -e 's://.*$::' "$HDR" | perl -0pe 's:/\*.*?\*/::gs' | grep -oE '\btern_[a-z0-9_]+[[:space:]]*\(' \
  | sed -E 's/[[:space:]]*\($//' | sort -u >"$TMP/declared"
fail=0
extra=$(comm -23 "$TMP/exported" "$TMP/declared")
missing=$(comm -13 "$TMP/exported" "$TMP/declared")
if [ -n "$extra" ]; then echo "FAIL: exported but not declared in tern.h:"; echo "$extra" | sed 's/^/  /'; fail=1; fi
if [ -n "$missing" ]; then echo "FAIL: declared in tern.h but not exported:"; echo "$missing" | sed 's/^/  /'; fail=1; fi
if [ -s "$TMP/data" ]; then echo "FAIL: data symbols exported:"; sed 's/^/  /' "$TMP/data"; fail=1; fi
echo "$(wc -l <"$TMP/exported") exported, $(wc -l <"$TMP/declared") declared"
exit $fail
