# Shared setup of the conformance scripts (sourced): finds the causeway binary and imports the
# vLLM trace once into a temporary store.
#   CAUSEWAY_BIN    binary to test (default: $CARGO_TARGET_DIR or ../target, debug profile)
#   CAUSEWAY_TRACE  an imported .duckdb (default: import the vLLM reference trace into a temp dir)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
CAUSEWAY_BIN=${CAUSEWAY_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/causeway}
if [ ! -x "$CAUSEWAY_BIN" ]; then
    echo "error: no causeway binary at $CAUSEWAY_BIN" >&2
    echo "hint: cargo build -p causeway, or set CAUSEWAY_BIN" >&2
    exit 2
fi
export CAUSEWAY_BIN
if [ -z "${CAUSEWAY_TRACE:-}" ]; then
    src=""
    for c in "$root/investigations/vllm-37343-logprobs-amplification.db" \
             "$root/../shared/investigations/vllm-37343-logprobs-amplification.db"; do
        if [ -f "$c" ]; then src=$c; break; fi
    done
    if [ -z "$src" ]; then
        echo "error: vllm-37343-logprobs-amplification.db not found in investigations/" >&2
        exit 2
    fi
    workdir=$(mktemp -d)
    trap 'rm -rf "$workdir"' EXIT
    CAUSEWAY_TRACE="$workdir/vllm-37343-logprobs-amplification.duckdb"
    "$CAUSEWAY_BIN" import "$src" -o "$CAUSEWAY_TRACE" >/dev/null
fi
export CAUSEWAY_TRACE
# Keep the self-test report of the machine out of the tests.
export CAUSEWAY_TEST_REPORT=${CAUSEWAY_TEST_REPORT:-$(mktemp -u)/test-report.json}
