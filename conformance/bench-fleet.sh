#!/usr/bin/env bash
# Benchmark of fleet fan-out over three local agents (bench-fleet.py): p99 of the fan-out's cost
# above the slowest node. Use a release binary: CAUSEWAY_BIN=target/release/causeway.
source "$(dirname "$0")/common.sh"
exec python3 "$here/bench-fleet.py" "$CAUSEWAY_BIN" "$CAUSEWAY_TRACE" "${1:-100}"
