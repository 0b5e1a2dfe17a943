#!/usr/bin/env bash
#! Records the labelled real-GPU cases of scripts/gpu/cases.py (each variant traced end to end by
#! `causeway trace` in its default mode) into $OUT/recorded.tar.gz, one store per recording, and
#! appends each recording's stats and explain to $OUT/report.txt. The stores become
#! investigations/recorded/ (case files there say why each label holds).
#
#   CAUSEWAY=path/to/causeway [PYTHON=python3] [SECONDS_PER=8] [CASES="..."] \
#       [VARIANTS="problem healthy"] [TRACE_OPTS="--stacks"] bash scripts/gpu/record.sh
#   (or CAUSEWAY_GPU_BUNDLE=DIR, as scripts/gpu/bundle.sh packs it). With --stacks in TRACE_OPTS
#   the report adds, per store, where the Python frames of the synchronising calls point.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/causeway-gpu}
PY=${PYTHON:-python3}
SECS=${SECONDS_PER:-8}
CASES=${CASES:-"input-starvation sync-storm empty-cache cpu-contention host-bound"}
VARIANTS=${VARIANTS:-"problem healthy"}
read -ra OPTS <<<"${TRACE_OPTS:-}"
mkdir -p "$OUT"
work=$(mktemp -d /tmp/causeway-rec.XXXXXX)
# shellcheck source=scripts/gpu/unbundle.sh
source "$here/unbundle.sh"
CW=${CAUSEWAY:?set CAUSEWAY or CAUSEWAY_GPU_BUNDLE}
export NO_COLOR=1 CAUSEWAY_LOG=info PYTHONUNBUFFERED=1
mkdir -p "$work/rec"

for case in $CASES; do
    for variant in $VARIANTS; do
        db="$work/rec/$case-$variant.duckdb"
        pre=()
        bg=()
        if [ "$case" = cpu-contention ]; then
            pre=(taskset -c 3)
            if [ "$variant" = problem ]; then
                for _ in 1 2; do
                    taskset -c 3 gzip -1 </dev/zero >/dev/null &
                    bg+=($!)
                done
            fi
        fi
        echo "== record $case $variant" | tee -a "$OUT/logs.txt"
        t0=$(date +%s.%N)
        limit=$((SECS * 3 + 60))
        timeout "$limit" "$CW" trace --db "$db" "${OPTS[@]}" -- "${pre[@]}" "$PY" "$here/cases.py" "$case" \
            --variant "$variant" --seconds "$SECS" >"$work/rec/$case-$variant.out" 2>>"$OUT/logs.txt"
        rc=$?
        for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done
        wait 2>/dev/null
        {
            echo "== $case $variant: rc $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -h "$db" 2>/dev/null | cut -f1)"
            grep -h "^{\"case\"" "$work/rec/$case-$variant.out"
            [ -f "$db" ] || continue
            "$CW" stats --db "$db" 2>&1 | head -40
            "$CW" explain --db "$db" 2>&1 | head -30
            "$CW" query --db "$db" "SELECT (SELECT count(*) FROM events WHERE op IN ('cudaLaunchKernel', 'cuLaunchKernel', 'cuLaunchKernelEx')) AS launches, (SELECT count(*) FROM kernel_launches) AS named, (SELECT count(*) FROM kernels) AS kernels" 2>&1
            "$CW" query --db "$db" "SELECT kernel, count(*) AS n FROM kernel_launches GROUP BY 1 ORDER BY 2 DESC LIMIT 5" 2>&1
            "$CW" query --db "$db" "SELECT how, count(*) AS n, bool_and(complete) AS complete FROM library_attach GROUP BY 1" 2>&1
            if [[ " ${OPTS[*]} " == *" --stacks "* ]]; then
                "$CW" query --db "$db" "SELECT status, count(*) AS stacks, sum(frames) AS frames FROM python_stacks GROUP BY 1" 2>&1
                "$CW" query --db "$db" "SELECT kind, sum(count) AS n FROM drops GROUP BY 1" 2>&1
                # The innermost Python frame of each synchronising call, by op.
                "$CW" query --db "$db" "SELECT e.op, f.file, f.function, f.line, count(*) AS calls
                    FROM events e JOIN python_frames f ON f.stack_hash = e.stack_hash AND f.depth = 0
                    WHERE e.op IN ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaMemcpyAsync', 'cuMemcpyDtoHAsync_v2', 'cuStreamSynchronize', 'cudaMemcpy')
                    GROUP BY ALL ORDER BY calls DESC LIMIT 12" 2>&1
                "$CW" query --db "$db" "SELECT count(*) AS with_stack, count(*) FILTER (WHERE s.stack_hash IS NOT NULL) AS looked, count(*) FILTER (WHERE s.frames > 0) AS with_python
                    FROM events e LEFT JOIN python_stacks s USING (stack_hash) WHERE e.stack_hash IS NOT NULL AND e.stack_hash <> 0" 2>&1
                "$CW" stacks --db "$db" --max-frames 64 2>&1 | head -90
            fi
        } >>"$OUT/report.txt" 2>&1
    done
done
tar -C "$work/rec" -czf "$OUT/recorded.tar.gz" .  # investigations/recorded/ keeps each store gzipped
ls -l "$work/rec" >>"$OUT/report.txt"
rm -rf "$work"
