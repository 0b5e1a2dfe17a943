#!/usr/bin/env bash
# Side by side with Holistic Trace Analysis (HTA) on the real Kineto traces: HTA's temporal and
# idle time breakdowns (figures.py, in scripts/hta/.venv) against the same figures computed with
# SQL over causeway's store, and causeway's engine when `explain --json` has a `devices` array
# (compare.py); prints the tables and the time each took. docs/hta.md says what each figure means.
# Builds nothing: uses an existing causeway binary.
#   CAUSEWAY_BIN          binary (default: $CARGO_TARGET_DIR or ../../target, debug profile)
#   CAUSEWAY_SHARED_DIR   the shared investigations (default: ../shared/investigations beside the clone)
#   HTA_OUT               keep HTA's figures and ours (JSON) in this directory
# Extra arguments go to compare.py (e.g. --strict). Exit: 0 agree, 1 a figure differs, 2 setup.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
shared="${CAUSEWAY_SHARED_DIR:-$root/../shared/investigations}"
traces=("$shared"/kineto/*.pt.trace.json.gz)
if [ ! -d "$shared/kineto" ] || [ ! -f "${traces[0]}" ]; then
    echo "hta: no Kineto traces in $shared/kineto (the real traces this check reads are never committed;" >&2
    echo "hint: clone beside shared/, or set CAUSEWAY_SHARED_DIR)" >&2
    exit 2
fi
bin=${CAUSEWAY_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/causeway}
if [ ! -x "$bin" ]; then
    echo "hta: no causeway binary at $bin (hint: cargo build -p causeway, or set CAUSEWAY_BIN)" >&2
    exit 2
fi
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import hta.trace_analysis" 2>/dev/null; then
    echo "hta: installing Holistic Trace Analysis into $venv (first use, about a minute)" >&2
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q -r "$here/requirements.txt"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/causeway-hta.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# a copy: the shared build directory may be rebuilt while this runs
cp "$bin" "$tmp/causeway"
out="${HTA_OUT:-$tmp}"
mkdir -p "$out"
start=$SECONDS
"$venv/bin/python" "$here/figures.py" "$out/hta.json" "${traces[@]}"
status=0
python3 "$here/compare.py" --figures "$out/hta.json" --causeway "$tmp/causeway" --work "$tmp/stores" \
    --json "$out/ours.json" "$@" "${traces[@]}" || status=$?
echo "hta: ${#traces[@]} traces in $((SECONDS - start)) s" >&2
exit $status
