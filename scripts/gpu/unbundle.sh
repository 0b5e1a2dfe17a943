#!/usr/bin/env bash
#! Sourced by the GPU scripts: with CAUSEWAY_GPU_BUNDLE=DIR (scripts/gpu/bundle.sh), unpacks the
#! binary and its libraries into $work and points CAUSEWAY and LD_LIBRARY_PATH at them.
if [ -n "${CAUSEWAY_GPU_BUNDLE:-}" ]; then
    mkdir -p "$work/lib"
    gunzip -c "$CAUSEWAY_GPU_BUNDLE/causeway.gz" >"$work/causeway" && chmod +x "$work/causeway"
    for f in "$CAUSEWAY_GPU_BUNDLE"/lib/*.gz; do
        gunzip -c "$f" >"$work/lib/$(basename "$f" .gz)"
    done
    export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    CAUSEWAY="$work/causeway"
fi
