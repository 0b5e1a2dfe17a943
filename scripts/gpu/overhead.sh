#!/usr/bin/env bash
#! Measures causeway on a machine with an NVIDIA GPU, as root: `causeway check`; every probed
#! function called a known number of times (coverage.py) against the calls the kernel counted;
#! then PyTorch training step times with the tracer attached to and detached from the same
#! process in turn (`causeway trace --pid`, default budget and full mode), each traced window
#! against the untraced windows on either side; a summary table last. $OUT (default
#! /tmp/causeway-gpu) gets report.txt, logs.txt, windows.jsonl, the step times and the traces.
#
#   CAUSEWAY=path/to/causeway [PYTHON=python3] [CYCLES=3] [WORKLOADS="mlp gpt"] \
#       [CONFIGS="default: full:--overhead-budget,100"] [COVERAGE=1] \
#       [TRACE_SECS=60] [OFF_SECS=8] [SETTLE_SECS=45] bash scripts/gpu/overhead.sh
#
# Each traced window lasts TRACE_SECS and its step time is taken from SETTLE_SECS on: a long
# job's steady state, after the controller has chosen modes (1-2 s), measured sampled ops' costs
# on the job (8 slices of each kind: 8-20 s) and checked in situ an op it keeps out of sampling
# (from 30 s into the trace). The defaults take about 7 minutes per workload: on a machine that
# runs one command for at most 10 minutes, run one workload per command (WORKLOADS=mlp).
#
# With CAUSEWAY_GPU_BUNDLE=DIR instead of CAUSEWAY, the binary and its libraries come gzipped
# from DIR (causeway.gz, lib/*.gz), as scripts/gpu/bundle.sh packs them for a machine that has
# no Rust toolchain.
set -u
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/causeway-gpu}
PY=${PYTHON:-python3}
CYCLES=${CYCLES:-3}
TRACE_SECS=${TRACE_SECS:-60}
OFF_SECS=${OFF_SECS:-8}
SETTLE_SECS=${SETTLE_SECS:-45}
# Traced configurations, each LABEL:OPTIONS with the trace options comma-separated.
CONFIGS=${CONFIGS:-"default: full:--overhead-budget,100"}
COVERAGE=${COVERAGE:-1}
WORKLOADS=${WORKLOADS-"mlp gpt"}
mkdir -p "$OUT"
work=$(mktemp -d /tmp/causeway-gpu.XXXXXX)

# shellcheck source=scripts/gpu/unbundle.sh
source "$here/unbundle.sh"
CW=${CAUSEWAY:?set CAUSEWAY to the causeway binary or CAUSEWAY_GPU_BUNDLE to a bundle}
export NO_COLOR=1 CAUSEWAY_LOG=info

{
    echo "== machine"
    uname -a
    nproc
    ls -l /sys/kernel/btf/vmlinux 2>&1
    nvidia-smi -L 2>&1
    nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.mem --format=csv 2>&1
    "$PY" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, sys.executable)'
    echo "== CUDA libraries PyTorch maps"
    "$PY" -c 'import torch; torch.zeros(1, device="cuda"); print("".join(sorted({l.split()[-1] + "\n" for l in open("/proc/self/maps") if "libcud" in l or "libnccl" in l})))'
    echo "== CUDA runtime CuPy uses (mapped files; whether its runtime module needs libcudart)"
    "$PY" -c 'import cupy, cupy_backends.cuda.api.runtime as r; cupy.cuda.runtime.malloc(16); print(r.__file__, b"libcudart.so" in open(r.__file__, "rb").read()); print("".join(sorted({l.split()[-1] + "\n" for l in open("/proc/self/maps") if "cud" in l})))' 2>&1 | tail -12
    echo "== causeway check"
    "$CW" check 2>&1
} 2>&1 | tee "$OUT/report.txt"

# Probe coverage: every probed function called a known number of times (coverage.py), traced
# in full mode with NCCL; the kernel's call counts against what the program did.
covdb="$work/coverage.duckdb"
[ "$COVERAGE" = 1 ] && {
echo "== coverage" >>"$OUT/logs.txt"
timeout 300 "$CW" trace --db "$covdb" --nccl --overhead-budget 100 -- \
    "$PY" "$here/coverage.py" 2>>"$OUT/logs.txt" | grep '^{"did"' >"$work/coverage.json"
"$CW" query --db "$covdb" --json "SELECT o.op, sum(c.calls) AS calls, sum(c.stored) AS stored
    FROM op_counts c JOIN ops o USING (op_id) GROUP BY 1" >"$work/coverage-counts.json" 2>>"$OUT/logs.txt"
"$PY" - "$work/coverage.json" "$work/coverage-counts.json" <<'PYEOF' | tee -a "$OUT/report.txt"
import json, sys
try:
    did = json.loads(open(sys.argv[1]).read())
except Exception as e:
    sys.exit(f"coverage.py printed nothing usable: {e}")
got = json.load(open(sys.argv[2]))
cols = [c["name"] for c in got["columns"]]
counted = {r[cols.index("op")]: r for r in got["rows"]}
print("== probe coverage: calls made, counted by the kernel, rows stored")
bad = 0
for op, n in sorted(did["did"].items()):
    r = counted.get(op)
    calls, stored = (r[cols.index("calls")], r[cols.index("stored")]) if r else (0, 0)
    flag = "ok" if calls >= n else "MISSED"
    bad += calls < n
    print(f"{flag:6} {op:24} {n:6} {calls:8} {stored:8}")
for op in sorted(set(counted) - set(did["did"])):
    r = counted[op]
    print(f"{'extra':6} {op:24} {'':6} {r[cols.index('calls')]:8} {r[cols.index('stored')]:8}")
for part, why in did["skipped"].items():
    print(f"skipped {part}: {why}")
print(f"{bad} ops missed calls")
PYEOF
gzip -c "$covdb" >"$OUT/coverage-trace.duckdb.gz"
}

# One window of the alternation: `off` sleeps, the others trace the training process.
window() {
    local label=$1 secs=$2
    shift 2
    local t0
    t0=$(date +%s.%N)
    if [ "$label" = off ]; then
        sleep "$secs"
    else
        echo "== $w $label cycle $c" >>"$OUT/logs.txt"
        timeout $((secs + 60)) "$CW" trace --pid "$pid" --duration "${secs}s" --db "$work/$w-$label-$c.duckdb" "$@" \
            >/dev/null 2>>"$OUT/logs.txt"
    fi
    echo "{\"workload\": \"$w\", \"label\": \"$label\", \"cycle\": $c, \"start\": $t0, \"end\": $(date +%s.%N)}" >>"$OUT/windows.jsonl"
}

: >"$OUT/windows.jsonl"
for w in $WORKLOADS; do
    rm -f "$work/stop"
    "$PY" "$here/train.py" --workload "$w" --warmup 100 --seconds 3600 --stop-file "$work/stop" \
        >"$OUT/steps-$w.json" 2>"$work/$w.err" &
    pid=$!
    until grep -q ready "$work/$w.err" || ! kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
    c=0
    window off "$OFF_SECS"
    for c in $(seq 1 "$CYCLES"); do
        for conf in $CONFIGS; do
            # shellcheck disable=SC2086 # the options are words
            window "${conf%%:*}" "$TRACE_SECS" $(echo "${conf#*:}" | tr ',' ' ')
            window off "$OFF_SECS"
        done
    done
    touch "$work/stop"
    wait "$pid"
    cat "$work/$w.err" >>"$OUT/logs.txt"
    db="$work/$w-default-$CYCLES.duckdb"
    [ -f "$db" ] || continue
    {
        echo "== $w: stats of the last default window"
        "$CW" stats --db "$db" 2>&1
        echo "== $w: calls counted in the kernel per op, and rows stored"
        "$CW" query --db "$db" "SELECT o.op, sum(c.calls) AS calls, sum(c.stored) AS stored
            FROM op_counts c JOIN ops o USING (op_id) GROUP BY 1 ORDER BY 2 DESC" 2>&1
        echo "== $w: probe modes chosen"
        "$CW" query --db "$db" "SELECT o.op, m.mode, m.previous, m.reason, round(m.overhead_pct, 3) AS overhead_pct
            FROM probe_modes m JOIN ops o USING (op_id) ORDER BY m.ts_ns" 2>&1
        echo "== $w: estimated overhead per window"
        "$CW" query --db "$db" "SELECT window_end_ns - min(window_start_ns) OVER () AS t, probe_ns * 100.0 / cpu_ns AS pct, calls
            FROM probe_overhead ORDER BY t" 2>&1
        echo "== $w: explain"
        "$CW" explain --db "$db" 2>&1 | head -40
    } >>"$OUT/report.txt" 2>&1
    gzip -c "$db" >"$OUT/$w-trace.duckdb.gz"
done

# The table: each traced window's median step time (from SETTLE_SECS after the tracer started
# to its end) against the mean of the untraced windows before and after it; the median and
# range of those ratios over the cycles.
"$PY" - "$OUT/windows.jsonl" "$OUT" "$SETTLE_SECS" <<'PYEOF' | tee -a "$OUT/report.txt"
import collections, json, statistics, sys
wins = [json.loads(l) for l in open(sys.argv[1])]
steps = {}
def med(w, lo, hi):
    s = [dt for t, dt in steps[w] if lo <= t <= hi]
    return (statistics.median(s), len(s)) if s else (None, 0)
ratios = collections.defaultdict(list)
n_steps = collections.Counter()
for w in sorted({x["workload"] for x in wins}):
    try:
        steps[w] = json.load(open(f"{sys.argv[2]}/steps-{w}.json"))["steps"]
    except Exception as e:
        print(f"{w}: no step times ({e})")
        continue
    seq = [x for x in wins if x["workload"] == w]
    for i, x in enumerate(seq):
        if x["label"] == "off" or i == 0 or i + 1 >= len(seq):
            continue
        m, n = med(w, x["start"] + float(sys.argv[3]), x["end"] - 0.2)
        b, _ = med(w, seq[i - 1]["start"] + 0.3, seq[i - 1]["end"] - 0.2)
        a, _ = med(w, seq[i + 1]["start"] + 0.3, seq[i + 1]["end"] - 0.2)
        if m and a and b:
            ratios[(w, x["label"])].append(m / ((a + b) / 2))
            n_steps[(w, x["label"])] += n
print(f"== step time, traced / untraced (same process, adjacent windows; traced from {sys.argv[3]} s on)")
print("workload mode     windows steps  median  range")
for (w, label), r in sorted(ratios.items()):
    print(f"{w:8} {label:8} {len(r):7} {n_steps[(w, label)]:6}  {(statistics.median(r) - 1) * 100:+6.2f}%  "
          f"{(min(r) - 1) * 100:+.2f}% .. {(max(r) - 1) * 100:+.2f}%")
for w in steps:
    off = [dt for x in wins if x["workload"] == w and x["label"] == "off"
           for t, dt in steps[w] if x["start"] + 0.3 <= t <= x["end"] - 0.2]
    if off:
        print(f"{w}: untraced median step {statistics.median(off):.3f} ms over {len(off)} steps")
PYEOF
rm -rf "$work"
