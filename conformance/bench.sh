#!/usr/bin/env bash
# Benchmark of `causeway mcp` on the vLLM trace: ready time and p99 tool latency (bench.py).
# Use a release binary for the figures: CAUSEWAY_BIN=target/release/causeway conformance/bench.sh
source "$(dirname "$0")/common.sh"
exec python3 "$here/bench.py" "$CAUSEWAY_BIN" "$CAUSEWAY_TRACE" "${1:-200}"
