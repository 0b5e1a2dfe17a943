#!/usr/bin/env bash
# Accuracy of sampled probes' estimated counts on a real Python loop (the lab's sync-storm
# workload: per step 1 cudaMemsetAsync, 200 launches, 5 cudaMemcpyAsync, 4 syncs): calls per
# step of each op, recorded exactly (--overhead-budget 100) and then RUNS times with OPTIONS
# (default: a budget of 0.3%, which samples launches, copies and syncs within 2 s).
#   scripts/sampled-accuracy.sh [RUNS] [OPTIONS]
# Needs root, a debug build (cargo build -p causeway) and scripts/deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
opts=${2:---overhead-budget 0.3}
target=${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}
export CAUSEWAY=${CAUSEWAY:-$target/debug/causeway}
export LAB_BUILD=${LAB_BUILD:-$target/tmp/lab-build}
export LD_LIBRARY_PATH="$PWD/.deps/duckdb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
per_step="SELECT o.op, round(sum(c.calls) / (SELECT count(*) FROM events WHERE op = 'cudaMemsetAsync'), 3) AS per_step,
  bool_or(o.op IN (SELECT o2.op FROM probe_modes m JOIN ops o2 USING (op_id) WHERE m.mode = 'sampled')) AS sampled
  FROM op_counts c JOIN ops o USING (op_id)
  WHERE o.op IN ('cudaLaunchKernel', 'cudaMemcpyAsync', 'cudaStreamSynchronize') GROUP BY 1 ORDER BY 1"
run() {
	LAB_TRACE_OPTS=$1 bash investigations/lab/sync-storm/run problem "$out/$2" >/dev/null
	echo "== $2 ($1)"
	"$CAUSEWAY" query --db "$out/$2/trace.duckdb" "$per_step"
}
run "--overhead-budget 100" exact
for i in $(seq "$runs"); do run "$opts" "run$i"; done
