#!/usr/bin/env bash
# check_layers.sh SRC_DIR - layers only call downward: every #include "dir/..." in
# src/<layer>/ names a layer below it or its own. The order (docs/architecture.md):
#
#   rank 0  core                 errors, allocation, strings, block layouts
#   rank 1  formats, kernels     file readers/writers | compute kernels (side by side:
#                                neither includes the other)
#   rank 2  model                loader, step, sessions (over formats and kernels)
#   rank 3  backends, text       back-end instances (implement model's seam) |
#                                tokenizer, chat, sampler, generation (side by side)
#   rank 4  server               tern serve
#   rank 5  cli                  the tern program
#
# So formats never include model/ or backends/, core includes only core/, model and
# kernels never include text/ or server/, kernels never include model/ or formats/.
# "tern.h" (the public header) and same-folder includes are always allowed.
# Before checking SRC_DIR the script checks itself on a planted violation, so the
# test can fail.
set -uo pipefail
SRC=${1:?usage: check_layers.sh SRC_DIR}

rank() {
    case "$1" in
    core) echo 0 ;;
    formats | kernels) echo 1 ;;
    model) echo 2 ;;
    backends | text) echo 3 ;;
    server) echo 4 ;;
    cli) echo 5 ;;
    *) echo -1 ;;
    esac
}

# check DIR: prints each include that goes up or sideways; exit 1 when any.
check() {
    local dir=$1 bad=0 file line from to rf rt
    while IFS= read -r hit; do
        file=${hit%%:*}
        line=${hit#*:}; line=${line#*:}
        from=${file#"$dir"/}; from=${from%%/*}
        to=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"((\.\.\/)*)(src\/)?([a-z_]+)\/.*/\4/' <<<"$line")
        [ "$to" = "$from" ] && continue
        rf=$(rank "$from"); rt=$(rank "$to")
        if [ "$rf" -lt 0 ]; then echo "layer check: $file: folder '$from' has no rank (add it to tests/check_layers.sh)"; bad=1; continue; fi
        [ "$rt" -lt 0 ] && continue   # not a src/ layer (third-party path)
        if [ "$rt" -ge "$rf" ]; then
            echo "layer check: $file includes $to/ ($from is rank $rf, $to rank $rt): $line"
            bad=1
        fi
    done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"((\.\./)*)(src/)?[a-z_]+/' "$dir" \
             --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' | sed -E 's/^([^:]*):[0-9]+:/\1:x:/')
    return $bad
}

# Self-test: a planted tree with one arrow up must fail, a clean one must pass.
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/src/core" "$TMP/src/formats" "$TMP/src/model"
printf '#include "core/common.h"\n#include "tern.h"\n' >"$TMP/src/formats/ok.c"
printf '#include "formats/ok.h"\n#include "core/common.h"\n' >"$TMP/src/model/ok.c"
if ! check "$TMP/src" >/dev/null; then echo "FAIL: the layer check rejects a clean tree"; exit 1; fi
printf '#include "model/model.h"\n' >"$TMP/src/formats/up.c"
if check "$TMP/src" >/dev/null; then echo "FAIL: the layer check misses formats -> model"; exit 1; fi
rm "$TMP/src/formats/up.c"; printf '  # include "../formats/blocks.h"\n' >"$TMP/src/core/up.c"
if check "$TMP/src" >/dev/null; then echo "FAIL: the layer check misses core -> formats"; exit 1; fi

if check "$SRC"; then
    echo "layers: every include in $SRC goes downhill"
    exit 0
fi
echo "FAIL: includes that go up or sideways (see the order at the top of tests/check_layers.sh)"
exit 1
