#!/usr/bin/env bash
#! One GPU pass in one command, for a lent machine with a 15-minute device budget: probe coverage,
#! the labelled cases not yet recorded (host-bound), sync-storm traced with --stacks (Python
#! frames of real PyTorch), then step time traced against untraced (mlp, default mode). Each part
#! is packed into $OUT/PART.tgz as soon as it ends, so a part cut short loses only itself.
#
#   bash scripts/gpu/bundle.sh                      # here: a release build, packed into .gpu
#   CAUSEWAY_GPU_BUNDLE=.gpu bash scripts/gpu/pass.sh   # there, as root (carry .gpu)
#
# PARTS (default "coverage record stacks overhead") picks parts; the overhead part's windows
# follow OVERHEAD_SECS (default 40) and CYCLES (default 2).
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/causeway-gpu}
PARTS=${PARTS:-"coverage record stacks overhead"}
base=$(mktemp -d /tmp/causeway-pass.XXXXXX)
mkdir -p "$OUT"

part() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    mkdir -p "$base/$name"
    echo "== part $name (limit ${limit}s)"
    OUT="$base/$name" timeout "$limit" "$@" >"$base/$name/stdout.txt" 2>&1
    echo "== part $name: rc $?, $((SECONDS - t0)) s"
    tar -C "$base" -czf "$OUT/$name.tgz" "$name"
}

for p in $PARTS; do
    case $p in
    coverage) part coverage 120 env COVERAGE=1 WORKLOADS= bash "$here/overhead.sh" ;;
    record) part record 130 env CASES=host-bound SECONDS_PER=6 bash "$here/record.sh" ;;
    stacks) part stacks 70 env CASES=sync-storm VARIANTS=problem SECONDS_PER=5 TRACE_OPTS=--stacks \
        bash "$here/record.sh" ;;
    overhead) part overhead 200 env COVERAGE=0 WORKLOADS=mlp CYCLES="${CYCLES:-2}" \
        TRACE_SECS="${OVERHEAD_SECS:-40}" SETTLE_SECS=20 OFF_SECS=6 CONFIGS="default:" \
        bash "$here/overhead.sh" ;;
    *) echo "unknown part $p" >&2 ;;
    esac
    # The lines a reader wants first, in the command's output.
    grep -hE '^(ok|MISSED|extra|skipped|[0-9]+ ops missed|== (record|[a-z-]+ (problem|healthy):)|\{"case"|mlp +default|mlp: untraced)' \
        "$base/$p"/report.txt "$base/$p"/stdout.txt 2>/dev/null | head -60
done
rm -rf "$base"
