#!/usr/bin/env bash
# Benchmark of `causeway collect` (crates/causeway/benches/collect.rs): 8 concurrent OTLP senders over
# HTTP and gRPC against the binary on loopback, points/s committed, sent vs stored, p50/p99
# request latency, and the in-process ingest baseline of the same run.
#   bash conformance/bench-collect.sh            # release build (cargo bench)
#   CAUSEWAY_BENCH_POINTS=400000 CAUSEWAY_BENCH_BATCH=2000 bash conformance/bench-collect.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH="$PWD/.deps/duckdb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec cargo bench -p causeway --bench collect "$@"
